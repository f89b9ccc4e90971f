// Validation of a repro's /recorded and /environment sections, as strict as the rest of the case:
// a replay that silently ignored a malformed section would check less than the file claims.
#pragma once

#include <nlohmann/json.hpp>

namespace attnscope {

// Throws CaseError naming the JSON path and the rule. `rec` is /recorded (an object).
void validate_recorded(const nlohmann::json& rec);
// `env` is /environment (an object).
void validate_environment(const nlohmann::json& env);

}  // namespace attnscope
