// attnscope-cli consistency: the text table, the per-position line and the JSON of a ConsistencyReport.
#pragma once

#include <nlohmann/json.hpp>
#include <ostream>
#include <string>

#include "consistency.h"

namespace attnscope::cli {

void print_consistency(std::ostream& o, const ConsistencyReport& r);
nlohmann::ordered_json consistency_to_json(const ConsistencyReport& r);

// One character per column of positions (at most `cols` columns, each the max over its positions):
// '.' every row bit-identical, '!' a NaN/Inf mismatch, '0' bits differ at |diff| 0 (signed zeros),
// '1'..'9' the decade of max |diff| (d: at least 1e(d-10); 1 also below, 9 also above). Empty for a
// backend that was not run.
std::string position_line(const BackendConsistency& b, int cols);

}  // namespace attnscope::cli
