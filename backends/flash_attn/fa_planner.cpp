// FlashAttention-2's split decision on the host (fa_planner.h), beside the model.
#include "fa_planner.h"

#include <algorithm>

#include "attnscope/mask.h"
#include "attnscope/plan.h"
#include "fa_conventions.h"

namespace attnscope::peers::flash_attn {

namespace {

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// The planner judges the API's rules, not this build's instantiations: every head dim FA2 takes.
const Built& every_instantiation() {
  static const Built b = [] {
    Built x;
    for (int d = 1; d <= 256; ++d) x.head_dims.push_back(d);
    x.dtypes = {DType::kBf16, DType::kFp16};
    return x;
  }();
  return b;
}

SplitPlan model_of(const CaseSpec& c, const std::vector<WorkUnit>& units) {
  CaseSpec m = c;
  m.split.planner = Planner::kFlashAttn;
  m.split.fixed_split_size.reset();
  std::vector<RowMask> masks;
  for (int r = 0; r < static_cast<int>(c.requests.size()); ++r) masks.push_back(row_mask(m, r));
  return make_split_plan(m, units, masks);
}

}  // namespace

FlashAttnPlan library_plan(const CaseSpec& c, const std::vector<WorkUnit>& units, const DeviceProfile& device) {
  FlashAttnPlan p;
  p.ran = true;
  p.pin = kFlashAttnPin;
  p.device = device;
  p.model = model_of(c, units);
  p.asked = c.split.planner == Planner::kFlashAttn;
  for (const auto& id : c.backends) p.asked = p.asked || id.rfind("flash_attn.", 0) == 0;
  // the case as flash_attn_with_kvcache takes it (its dtype and head dim rules aside from this build's)
  CaseSpec k = c;
  if (k.dtype != DType::kFp16) k.dtype = DType::kBf16;  // the split rule does not depend on the dtype
  if (std::string why = refusal_reason(Api::kKvcache, k, every_instantiation()); !why.empty()) {
    p.refused = true;
    p.why = why;
    return p;
  }
  const int B = static_cast<int>(c.requests.size()), Hq = c.num_qo_heads, Hk = c.num_kv_heads;
  const int L = c.requests[0].q_len, ps = c.effective_page_size();
  int max_k = 0;
  for (const auto& r : c.requests) max_k = std::max(max_k, r.kv_len);
  p.paged = c.kv_cache.storage == KvStorage::kPaged;
  p.page_block_size = p.paged ? ps : 1;
  const int width =
      c.kv_cache.max_num_blocks_per_seq ? *c.kv_cache.max_num_blocks_per_seq : static_cast<int>(ceil_div(max_k, ps));
  p.max_num_blocks_per_seq = p.paged ? width : 0;
  p.seqlen_k = p.paged ? static_cast<int64_t>(width) * ps : width;
  p.head_size = static_cast<int>(ceil_div(c.head_dim_qk, 8) * 8);
  // mha_fwd_kvcache's GQA decode rewrite: window_size (-1, -1) after causal is dropped for one query
  p.ngroups_swapped = L == 1 && Hq > Hk && !c.attention.window && !c.attention.alibi && c.head_dim_qk % 8 == 0;
  p.batch_size = B;
  p.num_heads = p.ngroups_swapped ? Hk : Hq;
  p.num_heads_k = Hk;
  p.seqlen_q = p.ngroups_swapped ? Hq / Hk : L;
  // set_params_splitkv
  p.block_n = p.head_size <= 64 ? 256 : (p.head_size <= 128 ? 128 : 64);
  p.num_n_blocks = static_cast<int>(ceil_div(p.seqlen_k, p.block_n));
  p.num_m_blocks = static_cast<int>(ceil_div(p.seqlen_q, 64));
  p.num_sms_x2 = 2 * device.sm_count;
  p.batch_nheads_mblocks = static_cast<int64_t>(B) * p.num_heads * p.num_m_blocks;
  p.num_splits_arg = num_splits_arg(c, p.seqlen_k, &p.num_splits_from);
  p.num_splits = p.num_splits_arg >= 1
                     ? p.num_splits_arg
                     : num_splits_heuristic(static_cast<int>(p.batch_nheads_mblocks), p.num_sms_x2, p.num_n_blocks, 128);
  p.chunk_tokens = ceil_div(p.num_n_blocks, p.num_splits) * p.block_n;
  p.split_kernel = p.num_splits > 1 || p.paged;
  if (p.num_splits > 1) {
    const int64_t d_rounded = p.head_size <= 128 ? ceil_div(p.head_size, 32) * 32 : ceil_div(p.head_size, 64) * 64;
    const int64_t rows = static_cast<int64_t>(p.num_splits) * B * p.num_heads * p.seqlen_q;
    p.accum_bytes = rows * (d_rounded + 1) * 4;
  }
  p.available = true;
  return p;
}

}  // namespace attnscope::peers::flash_attn
