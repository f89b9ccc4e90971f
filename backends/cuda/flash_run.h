// What every cuda.flash run shares around its kernel (flash.cu, flash_mla.cu): the poisoned outputs and
// split-KV partials, and the tail of launch, merge, download and timing, written once.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "attnscope/backend.h"
#include "cuda_util.h"
#include "flash_params.h"

namespace attnscope::cuda {

// O [total_q, hq, d] in the dtype, LSE [total_q, hq], and the partials of `part_rows` rows (at least one,
// so the pointers exist), every byte 0xff: an element the kernels forget stays NaN (in fp16, bf16, fp32).
struct FlashOutputs {
  DeviceBuffer o, lse, part_o, part_lse;
  int64_t total_q = 0;
  int hq = 0, d = 0;
  FlashOutputs(int64_t total_q, int hq, int d, int64_t part_rows, DType dt);
  void bind(FlashParams& fp) const;  // fp.o, lse, part_o, part_lse
  // The merge of the partials into O and LSE, rows in the order of the plan's merge_indptr (on the device).
  MergeParams merge(const DeviceBuffer& merge_indptr) const;
};

// One cuda.flash launch as run() does it: `kernel` (which checks its own launch; skipped when the plan
// has no items) and, with split-KV, the merge; once synchronously, then O (the first `dv` of each row's
// out.d dims: a padded head dim is sliced back) and LSE into *res, then opt's timed launches.
struct FlashTail {
  std::function<void(bool sync)> kernel;
  bool has_items = true;
  bool split_kv = false;
  dim3 grid, block;  // the kernel's, for the timing loop's error text
};
void run_flash_tail(const FlashTail& t, const FlashOutputs& out, const MergeParams& mp, DType dt, int dv, const RunOptions& opt,
                    Result* res);

}  // namespace attnscope::cuda
