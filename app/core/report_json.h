// JSON forms of plans, results and comparisons: what `attnscope-cli ... --json` prints and
// `run --report` writes. Documented in docs/cli.md; keys are stable.
#pragma once

#include <nlohmann/json.hpp>

#include "attnscope/plan.h"
#include "session.h"

namespace attnscope {

nlohmann::ordered_json plan_to_json(const CaseSpec& c, const Plan& p);
// library_plans: each library's own plan of the case (FlashInfer's PrefillSplitQOKVIndptr result,
// its inputs, the device profile it answered from) and its field-by-field agreement with the model.
nlohmann::ordered_json library_plans_to_json(const Plan& p);
nlohmann::ordered_json flashinfer_plan_to_json(const SplitPlan& model, const FlashInferPlan& f);
// library_plans.flashinfer_mla: FlashInfer's MLAPlan, attnscope's model of it and their agreement.
nlohmann::ordered_json flashinfer_mla_plan_to_json(const FlashInferMlaPlan& f);
nlohmann::ordered_json result_to_json(const Result& r);
nlohmann::ordered_json diff_to_json(const DiffReport& d);
nlohmann::ordered_json session_to_json(const Session& s);

}  // namespace attnscope
