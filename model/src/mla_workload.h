// make_workload's MLA part (mla.cpp), declared here rather than in mla.h so that mla.h does not
// depend on workload.h, which calls it.
#pragma once

#include "attnscope/case_spec.h"
#include "attnscope/paging.h"
#include "attnscope/workload.h"

namespace attnscope {

// Fills w.q / w.k_pool / w.v_pool of an MLA case.
void make_mla_workload(const CaseSpec& c, const PageTable& pt, Workload& w);

}  // namespace attnscope
