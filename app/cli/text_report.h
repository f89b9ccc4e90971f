// Human-readable text of cases, plans, sessions and invariance reports (attnscope-cli output).
#pragma once

#include <ostream>
#include <string>
#include <vector>

#include "attnscope/plan.h"
#include "bench.h"
#include "invariance.h"
#include "mla_forms.h"
#include "session.h"
#include "sweep.h"

namespace attnscope::cli {

std::string case_summary(const CaseSpec& c);
void print_plan(std::ostream& o, const CaseSpec& c, const Plan& p);
void print_session(std::ostream& o, const Session& s);
void print_invariance(std::ostream& o, const InvarianceReport& r);
void print_bench(std::ostream& o, const BenchReport& r);
void print_mla_forms(std::ostream& o, const MlaFormsReport& r);
void print_sweep(std::ostream& o, const SweepReport& r);

}  // namespace attnscope::cli
