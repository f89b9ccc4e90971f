// A known wgmma trap for tests/ptxas/check_wgmma.sh: a chain whose length a runtime branch decides
// (the accumulators are written by a wgmma on one path only), which ptxas answers by injecting a
// warpgroup.arrive (C7519). Compiled by the check only, never linked.
#include "sm90_primitives.cuh"

using namespace attnscope::cuda;

__global__ void wgmma_trap_probe(float* out, uint64_t da, uint64_t db, int n) {
  float d[32];
  for (int i = 0; i < 32; ++i) d[i] = 0.f;
  wgmma_fence();
  wgmma_ss_m64n64k16_bf16(d, da, db, 1);
  if (n > 1) wgmma_ss_m64n64k16_bf16(d, da, db, 1);
  wgmma_commit();
  wgmma_wait<0>();
  for (int i = 0; i < 32; ++i) out[threadIdx.x * 32 + i] = d[i];
}
