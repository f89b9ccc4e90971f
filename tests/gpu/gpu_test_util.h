// What the cuda family's GPU tests share: the skip without CUDA or a device, the quick mode's case
// counts (ATTNSCOPE_GPU_QUICK: compute-sanitizer runs a sixth of the cases), and a backend run.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <string>

#include "attnscope/device.h"
#include "attnscope/registry.h"
#include "require.h"

namespace attnscope::testing {

// `full` random cases, or under ATTNSCOPE_GPU_QUICK a sixth of them and at least `quick_min`.
inline int gpu_cases(int full, int quick_min) {
  return std::getenv("ATTNSCOPE_GPU_QUICK") ? std::max(quick_min, full / 6) : full;
}

// Runs backend `id` on the case as the app does (run_backend: refusals, poisoned outputs).
inline Result run_id(const std::string& id, const CaseSpec& c, const Plan& p, const Workload& w, const RunOptions& o = {}) {
  auto b = make_backend(id);
  return run_backend(*b, c, p, w, o);
}

// An absorbed MLA case of DeepSeek's dims (latent 512 + rope 64, one KV head), the MLA tests' start.
inline CaseSpec absorbed_mla_case(const std::string& name, int heads, DType dt) {
  CaseSpec c;
  c.name = name;
  c.mla = MlaSpec{};
  c.num_qo_heads = heads;
  c.num_kv_heads = 1;
  c.head_dim_qk = c.mla->qk_dim();
  c.head_dim_vo = c.mla->vo_dim();
  c.dtype = dt;
  return c;
}

}  // namespace attnscope::testing
