// MLA's two forms diffed (docs/conventions.md section 13): `attnscope-cli mla-forms CASE`. The case and
// the same model in its other form run on each backend that takes the form; absorbed outputs are
// projected through W_uv onto the non-absorbed output space, and every output is compared with
// cpu.reference on the non-absorbed form under the 2x rule (cpu.lowp on that form sets the bound).
#pragma once

#include <string>
#include <vector>

#include "attnscope/backend.h"
#include "attnscope/case_spec.h"

namespace attnscope {

struct MlaFormsRow {
  std::string backend;
  bool absorbed = false;        // the form it ran (absorbed outputs are projected through W_uv)
  Status status = Status::kOk;  // not ok: `reason`, no number
  std::string reason;
  double max_abs = 0;  // max |O - reference| in the non-absorbed output space
  bool pass = false;
};

struct MlaFormsReport {
  std::string case_name;
  bool given_absorbed = false;  // the form the case file has
  double lowp_max_abs = 0;      // max |cpu.lowp - cpu.reference| on the non-absorbed form
  double bound = 0;             // 2 x lowp_max_abs + kMlaFormsFloor
  std::vector<MlaFormsRow> rows;
  int exit_code() const;  // 1 a comparison failed, 3 something was not run, else 0
};

constexpr double kMlaFormsFloor = 1e-3;  // the rule's floor: rows where cpu.lowp happens to be exact
// The most multiply-adds the host may spend up-projecting the non-absorbed form's K and V.
constexpr double kMlaFormsMaxMacs = 2e10;

// Throws CaseError for a case without /mla, or one whose non-absorbed host inputs exceed
// kMlaFormsMaxMacs (the message gives the numbers). `backends` empty: the case's own.
MlaFormsReport check_mla_forms(const CaseSpec& c, const std::vector<std::string>& backends);

}  // namespace attnscope
