// JSON forms of plans, results and comparisons: what `attnscope-cli ... --json` prints and
// `run --report` writes. Documented in docs/cli.md; keys are stable.
#pragma once

#include <nlohmann/json.hpp>

#include "attnscope/plan.h"
#include "session.h"

namespace attnscope {

nlohmann::ordered_json plan_to_json(const CaseSpec& c, const Plan& p);
nlohmann::ordered_json result_to_json(const Result& r);
nlohmann::ordered_json diff_to_json(const DiffReport& d);
nlohmann::ordered_json session_to_json(const Session& s);

}  // namespace attnscope
