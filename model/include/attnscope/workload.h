// Workload: the tensors of a case. Values come from a counter-based generator of
// (request seed, tensor, index) written with exactly rounded integer and IEEE operations only, so
// the host and a GPU produce the same bits. K/V live in the paged pool described by the PageTable.
#pragma once

#include <cstdint>
#include <vector>

#include "attnscope/case_spec.h"
#include "attnscope/gen.h"
#include "attnscope/paging.h"
#include "attnscope/types.h"

namespace attnscope {

// Where a (request, key, head, dim) element of K or V sits in the paged pool.
AS_HD inline int64_t kv_offset(KvLayout layout, int page, int slot, int head, int dim, int page_size, int heads, int head_dim) {
  if (layout == KvLayout::kNHD) return ((static_cast<int64_t>(page) * page_size + slot) * heads + head) * head_dim + dim;
  return ((static_cast<int64_t>(page) * heads + head) * page_size + slot) * head_dim + dim;
}

struct Workload {
  std::vector<int64_t> q_indptr;  // [num_requests + 1], token offsets of each request's queries
  std::vector<float> q;           // [total_q, qo_heads, head_dim_qk], values exactly representable in dtype
  std::vector<float> k_pool;      // paged pool [num_pages, page_size, kv_heads, head_dim_qk] (NHD) or HND
  std::vector<float> v_pool;      // the same with head_dim_vo
  // FP8 (docs/conventions.md section 10). With kv_cache.fp8, k_pool / v_pool hold the stored FP8
  // values (exact in float) and an element's value is pool value * its scale (fp8.h's scale_index);
  // k_orig / v_orig hold the values before quantisation, in the same places. With fp8_attention,
  // q holds FP8 values times q_scale and q_orig the originals. All empty (q_scale 1) otherwise.
  std::vector<float> k_scale, v_scale;
  std::vector<float> k_orig, v_orig, q_orig;
  float q_scale = 1.0f;
  bool has_scales() const { return !k_scale.empty(); }
  const float* q_row(int64_t token, int head, const CaseSpec& c) const {
    return q.data() + (token * c.num_qo_heads + head) * c.head_dim_qk;
  }
};

// Index of an element in the generator's stream (independent of paging and layout).
inline uint64_t q_index(const CaseSpec& c, int r, int q, int h, int d) {
  return (static_cast<uint64_t>(q + c.requests[r].q_offset) * c.num_qo_heads + h) * c.q_gen_dim() + d;
}
inline uint64_t kv_index(int k, int h, int d, int heads, int dim) { return (static_cast<uint64_t>(k) * heads + h) * dim + d; }

// Host tensors of the case. Unused pages and last-page slots hold NaN when kv_cache.poison_unused,
// else 0 (never read by a correct backend either way).
Workload make_workload(const CaseSpec& c, const PageTable& pt);

// The same tensors before quantisation: q / k_pool / v_pool from the originals, no scales. The
// reference over it is the "original ideal" (docs/conventions.md section 10). `w` itself when not FP8.
Workload original_inputs(const Workload& w);

// The per-query-head sink logits of a case with /attention/sinks (docs/conventions.md section 12), as
// fp32 values, the sink tensor's type in the kernels (gpt-oss): given logits rounded to fp32; `true`:
// s_h = 1 + 2 z_h rounded to the case dtype, z_h = gen_standard(data.seed, kSink, h) (about N(1, 2^2),
// shared by every request as a model parameter is). Empty without sinks.
std::vector<float> sink_logits(const CaseSpec& c);

// Bytes the host workload needs (to refuse over-large cases before allocating).
int64_t workload_bytes(const CaseSpec& c, const PageTable& pt);

}  // namespace attnscope
