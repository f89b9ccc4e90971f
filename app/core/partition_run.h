// A backend run over the partitions of a /parallel case (model/include/attnscope/partition.h): each
// partition's sub-case planned and run as a case of its own, its rows placed in the whole case's, the
// partials merged by LSE (attnscope's merge is the result; every merger of the build beside it).
#pragma once

#include <string>

#include "attnscope/backend.h"

namespace attnscope {

// The result of backend `id` on a partitioned case: o / lse merged, Result::partition the partials and
// the merges. host_inputs: generate each partition's host workload (a CPU backend). A reference keeps
// its unpartitioned o / lse (`whole`) and adds its partials and their merge beside them.
Result run_partitioned(const std::string& id, const CaseSpec& c, const RunOptions& ro, bool host_inputs,
                       const Result* whole = nullptr);

// Which base the partials of `r` merge correctly in: each base's merge against `truth` (max |O - truth|
// over the rows both computed) and the verdict ("base 2 (its descriptor says 2)").
struct MergeBaseCheck {
  std::string backend;
  double err_e = 0, err_2 = 0;
  std::string verdict;
};
MergeBaseCheck check_merge_bases(const CaseSpec& c, const Result& r, const Result& truth);

}  // namespace attnscope
