// The flash_attn family's translation of an attnscope case into FlashAttention-2's terms, in one
// place: what its two APIs take (mha_varlen_fwd, mha_fwd_kvcache) and the rule each refusal names,
// the window / soft-cap / ALiBi spellings, the tensors' strides over attnscope's own buffers,
// seqlenq_ngroups_swapped, the block table, the num_splits argument, and the LSE layout FA2
// returns. Pure host code (no CUDA, no FA2 header), so every rule is tested in every build.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "attnscope/case_spec.h"
#include "attnscope/plan.h"

namespace attnscope::peers::flash_attn {

enum class Api {
  kVarlen,   // flash_attn_varlen_func: ragged Q (cu_seqlens_q) against ragged K/V (cu_seqlens_k)
  kKvcache,  // flash_attn_with_kvcache: [batch, seqlen_q] queries over a cache with cache_seqlens
};

// The instantiations this build compiled (CMake: ATTNSCOPE_FLASH_ATTN_HEAD_DIMS / _DTYPES).
struct Built {
  std::vector<int> head_dims;
  std::vector<DType> dtypes;
};

// "" when FA2's API takes the case through `api` with `built`'s instantiations, else the reason,
// naming the rule (and what it takes).
std::string refusal_reason(Api api, const CaseSpec& c, const Built& built);

// flash_attn_with_kvcache's num_splits argument for the case: 0 (FA2's heuristic) unless
// /split/planner is `off` (1) or `fixed` (ceil(seqlen_k / (fixed_split_size x page_size)), at most
// 128). *from says which, in words.
int num_splits_arg(const CaseSpec& c, int64_t seqlen_k, std::string* from);

// FlashAttention-2's num_splits_heuristic (flash_api.cpp), in attnscope's words: the smallest
// split count within 85% of the best wave efficiency, 1 when the blocks nearly fill the SMs.
int num_splits_heuristic(int batch_nheads_mblocks, int num_sms, int num_n_blocks, int max_splits);

// One launch as FA2's API would set up Flash_fwd_params for it. Strides in elements.
struct Launch {
  Api api = Api::kVarlen;
  bool swapped = false;  // seqlenq_ngroups_swapped: decode GQA, the group moved into seqlen_q
  int b = 0, h = 0, h_k = 0, d = 0, d_rounded = 0;
  int seqlen_q = 0, seqlen_k = 0, seqlen_q_rounded = 0, seqlen_k_rounded = 0, total_q = 0;
  int64_t q_batch_stride = 0, q_row_stride = 0, q_head_stride = 0;
  int64_t o_batch_stride = 0, o_row_stride = 0, o_head_stride = 0;
  int64_t k_batch_stride = 0, k_row_stride = 0, k_head_stride = 0;  // V alike
  float scale_softmax = 0, scale_softmax_log2 = 0, softcap = 0;
  int window_left = -1, window_right = -1;
  bool is_causal = false;
  bool unpadded_lse = false;  // varlen: LSE [h, total_q]; kvcache: [b, h, seqlen_q]
  // varlen: cumulative offsets [b + 1]; kvcache: cache_seqlens [b] (not cumulative)
  std::vector<int> cu_seqlens_q, cu_seqlens_k;
  bool seqlens_k_cumulative = true;
  // kvcache
  bool paged = false;
  int page_block_size = 1, max_num_blocks_per_seq = 0;
  std::vector<int> block_table;  // [b * max_num_blocks_per_seq]
  // a contiguous cache [b, seqlen_k, h_k, d] copied from the ragged pool: request r's keys start at
  // token cache_src[r] of the pool (copy not timed; unused tail poisoned as the pool's unused slots)
  std::vector<int64_t> cache_src;
  std::vector<float> alibi_slopes;  // [num_qo_heads] or empty
  int num_splits = 1;               // after set_params_splitkv (1: no split)
  std::string num_splits_from;
  bool force_split_kernel = false;  // a paged cache runs only the split kernel (FA2's rule)
  // varlen with padding (/requests/*/pad_start): one segment per request over its non-padding
  // queries and keys, then one of its padding queries with no key (FA2 writes O = 0, LSE +inf there);
  // seqused_k [b] gives each segment's keys. Empty: no padding, no seqused_k.
  std::vector<int> seqused_k;
  // /engine sglang-fa (kvcache): the arrays above are SGLang's (cache_seqlens_int32, page_table, or
  // local_attn_metadata's virtual batches); `fed` names them, `engine_refusal` is set (the tensor and
  // the rule) where what SGLang builds is not what flash_attn_with_kvcache can take
  std::string fed, engine_refusal;
};

// Replaces the kvcache launch's cache_seqlens / block table / batch by the tensors of SGLang's
// FlashAttention backend (engine_metadata, sglang-fa), as forward_decode / forward_extend pass them
// to flash_attn_with_kvcache. Sets l->fed, or l->engine_refusal naming the tensor and the rule.
void feed_from_sglang(const CaseSpec& c, const Plan& p, Launch* l);

// The launch for a case refusal_reason accepts. `num_sms`: the device's SM count (get_num_sm).
// With /engine sglang-fa a kvcache launch is fed from SGLang's tensors (feed_from_sglang).
Launch translate(Api api, const CaseSpec& c, const Plan& p, int num_sms);

// FA2's LSE buffer in attnscope's [total_q, qo_heads] order (natural log; +inf of an empty row
// becomes -inf, conventions.md section 1).
std::vector<float> lse_to_attnscope(const Launch& l, const CaseSpec& c, const std::vector<float>& buf);
int64_t lse_elems(const Launch& l);
// The LSE buffer to allocate: lse_elems rounded up to the split-KV combine kernel's row block
// (flash_fwd_splitkv_combine_kernel, kBlockM 4 / 8 / 16 by head dim), whose last block writes its
// padded LSE rows unguarded where the LSE is not unpadded (PyTorch's allocator rounds to 512 bytes).
int64_t lse_buffer_elems(const Launch& l);

}  // namespace attnscope::peers::flash_attn
