// The CLI's text for a /parallel case (docs/partitions.md): the partitions in `plan`, and in `run`
// each backend's partials, the merges beside attnscope's and which LSE base merges its partials.
#pragma once

#include <ostream>

#include "attnscope/case_spec.h"
#include "session.h"

namespace attnscope {

void print_partition_plan(std::ostream& o, const CaseSpec& c);  // nothing for a case without /parallel
void print_partition_run(std::ostream& o, const Session& s);

}  // namespace attnscope
