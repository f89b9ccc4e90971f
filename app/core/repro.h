// make_repro: a session as a self-checking case file (the same JSON `attnscope-cli run --export`
// and the GUI's "Export repro" write).
#pragma once

#include "case_json.h"
#include "session.h"

namespace attnscope {

// The session's case with /environment (where it ran) and /recorded (each ok backend's digest, the
// comparisons' verdicts, the plan's key fields and the library plans) filled in.
CaseFile make_repro(const Session& s);

}  // namespace attnscope
