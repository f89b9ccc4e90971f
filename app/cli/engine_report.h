// `attnscope-cli plan CASE --engine ID [--json]`: the metadata tensors an engine builds for the case
// (attnscope/engine_metadata.h) as a table or as JSON.
#pragma once

#include <nlohmann/json.hpp>
#include <ostream>

#include "attnscope/engine_metadata.h"
#include "cli_args.h"

namespace attnscope::cli {

// The values of one tensor in one line per row, long ones elided with a count ("... (120 more)").
std::string engine_values_text(const EngineTensor& t);
void print_engine_view(std::ostream& o, const EngineView& v);
nlohmann::ordered_json engine_view_to_json(const EngineView& v);
// The --engine branch of `plan`: throws UsageError naming --engine for a bad id or combination.
int plan_engine(const Args& a, const CaseSpec& c, const Plan& p);

}  // namespace attnscope::cli
