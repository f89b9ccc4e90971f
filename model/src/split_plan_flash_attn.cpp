// The `flash_attn` planner model: FlashAttention-2's split-KV decision as flash_attn_with_kvcache
// makes it (csrc/flash_attn/flash_api.cpp: mha_fwd_kvcache, set_params_splitkv,
// num_splits_heuristic; conventions.md section 5). The KV length it budgets for is the allocated
// cache (the block table's width x page size), not the live length, so the split count, and with
// it the last bits of the output, depend on the cache buffer size.
#include <algorithm>
#include <cmath>

#include "split_plan_detail.h"

namespace attnscope {

using plan_detail::ceil_div;
using plan_detail::str;

int flash_attn_num_splits(int64_t blocks, int num_sms, int num_n_blocks, int max_splits) {
  // num_splits_heuristic: enough blocks to almost fill the SMs -> 1 split
  if (blocks >= 0.8f * num_sms) return 1;
  max_splits = std::min({max_splits, num_sms, num_n_blocks});
  // a split count whose blocks per split equal the previous count's gives the same partition
  auto eligible = [&](int s) { return s == 1 || ceil_div(num_n_blocks, s) != ceil_div(num_n_blocks, s - 1); };
  std::vector<float> eff(std::max(max_splits, 0), 0.f);
  float max_eff = 0.f;
  for (int s = 1; s <= max_splits; ++s) {
    if (!eligible(s)) continue;
    const float waves = static_cast<float>(blocks * s) / num_sms;  // float as in flash_api.cpp
    eff[s - 1] = waves / std::ceil(waves);
    max_eff = std::max(max_eff, eff[s - 1]);
  }
  for (int s = 1; s <= max_splits; ++s)
    if (eligible(s) && eff[s - 1] >= 0.85 * max_eff) return s;  // 0.85 is a double there too
  return 1;
}

int64_t flash_attn_seqlen_k(const CaseSpec& c, const std::vector<WorkUnit>& units) {
  const int ps = c.effective_page_size();
  // vLLM's virtual batches carry block tables sliced to one attention chunk: local_chunk / page
  // entries wide, whatever the request's own table
  if (c.attention.local_chunk) return *c.attention.local_chunk;
  // mha_fwd_kvcache: seqlen_k = max_num_blocks_per_seq * page_block_size (paged), or the cache's
  // seqlen dimension (contiguous: page 1)
  if (c.kv_cache.max_num_blocks_per_seq) return static_cast<int64_t>(*c.kv_cache.max_num_blocks_per_seq) * ps;
  int64_t pages = 1;
  for (const auto& u : units) pages = std::max(pages, ceil_div(u.kv_len, ps));
  return pages * ps;
}

namespace plan_detail {

SplitPlan plan_flash_attn(const CaseSpec& c, const std::vector<WorkUnit>& units, const std::vector<RowMask>& masks) {
  SplitPlan sp;
  begin_split_plan(c, units, &sp);
  auto& why = sp.reasoning;
  const int G = sp.group_size, ps = sp.page_size, B = static_cast<int>(units.size());
  if (c.split.fixed_tile_q) {
    sp.cta_tile_q = *c.split.fixed_tile_q;
    why.push_back("cta_tile_q = " + str(sp.cta_tile_q) + ", fixed by /split/fixed_tile_q (independent of the batch)");
  } else {
    sp.cta_tile_q = 64;
    why.push_back("cta_tile_q = 64: FlashAttention-2's split-KV kernel uses kBlockM = 64");
  }
  const int T = sp.cta_tile_q;
  if (T == 16) sp.kv_warp_split = 4;
  for (const auto& u : units) sp.kv_pages.push_back(static_cast<int>(ceil_div(u.kv_len, ps)));

  // q is [batch, seqlen_q, heads, dim]: the batch is padded to the longest query
  int max_q = 0;
  for (const auto& u : units) max_q = std::max(max_q, u.q_len);
  sp.seqlen_k = flash_attn_seqlen_k(c, units);
  const std::string seqlen_from =
      c.attention.local_chunk ? "local_chunk " + str(*c.attention.local_chunk) + " (a virtual batch's sliced block table)"
      : c.kv_cache.max_num_blocks_per_seq
          ? "/kv_cache/max_num_blocks_per_seq " + str(*c.kv_cache.max_num_blocks_per_seq) + " x page " + str(ps)
          : "the widest unit's " + str(sp.seqlen_k / ps) + " pages x page " + str(ps) +
                " (no /kv_cache/max_num_blocks_per_seq: the tightest block table)";
  why.push_back("seqlen_k = " + str(sp.seqlen_k) + ": the allocated cache length flash_attn_with_kvcache sees, from " +
                seqlen_from);
  // block_n follows head_size = head_dim rounded up to 8 (FA2 pads Q/K/V to a multiple of 8)
  const int head_size = static_cast<int>(ceil_div(c.head_dim_qk, 8) * 8);
  const int block_n = head_size <= 64 ? 256 : (head_size <= 128 ? 128 : 64);
  const int n_blocks = static_cast<int>(ceil_div(sp.seqlen_k, block_n));
  // seqlenq_ngroups_swapped: decode with GQA, no window (window_size_right < 0), no ALiBi and a
  // head dim that is a multiple of 8 moves the group into seqlen_q
  const bool swapped = max_q == 1 && G > 1 && !c.attention.window && !c.attention.alibi && c.head_dim_qk % 8 == 0;
  const int64_t seqlen_q = swapped ? G : max_q;
  const int64_t m_blocks = ceil_div(seqlen_q, 64);
  const int64_t heads = swapped ? c.num_kv_heads : c.num_qo_heads;
  const int64_t blocks = static_cast<int64_t>(B) * heads * m_blocks;
  // set_params_splitkv passes 2 x SMs ("128 threads per block"); conventions.md section 5 writes num_sms
  const int sms2 = 2 * c.split.num_sms;
  const int s = flash_attn_num_splits(blocks, sms2, n_blocks, 128);
  const int64_t per = ceil_div(n_blocks, s);
  sp.num_splits = s;
  sp.chunk_tokens = per * block_n;
  sp.chunk_pages = static_cast<int>(ceil_div(sp.chunk_tokens, ps));
  sp.split_kv = s > 1;
  why.push_back(std::string(swapped ? "GQA decode: seqlen_q and group swapped, " : "") + "blocks = " + str(B) + " x " +
                str(heads) + " heads x " + str(m_blocks) + " m-blocks = " + str(blocks) + "; n_blocks = ceil(" +
                str(sp.seqlen_k) + " / " + str(block_n) + ") = " + str(n_blocks));
  if (blocks >= 0.8 * sms2)
    why.push_back(str(blocks) + " >= 0.8 x " + str(sms2) + " (2 x SMs): 1 split");
  else
    why.push_back("efficiency rule over s <= min(128, " + str(sms2) + ", " + str(n_blocks) + "): num_splits = " + str(s));
  why.push_back("each split covers " + str(per) + " blocks = " + str(sp.chunk_tokens) + " keys; every unit gets " + str(s) +
                " splits, those past a unit's keys empty (they follow the allocated cache, not the unit)");
  if (c.kv_cache.storage == KvStorage::kPaged && c.kv_cache.page_size % 256 != 0)
    why.push_back("note: flash_attn_with_kvcache refuses a paged cache whose page size " + str(c.kv_cache.page_size) +
                  " is not a multiple of 256; the model plans as if the block table were accepted");
  if (std::max(c.head_dim_qk, c.head_dim_vo) > 256) why.push_back("note: FlashAttention-2 supports head dims up to 256 only");

  for (int64_t rows : sp.packed_rows) {
    sp.unit_tiles.push_back(static_cast<int>(ceil_div(rows, T)));
    sp.unit_chunks.push_back(s);  // the grid has num_splits splits for every batch entry
  }
  emit_items(units, masks, false, &sp);
  sp.padded_items = sp.num_items;
  why.push_back(str(sp.num_items) + " work items x " + str(c.num_kv_heads) + " kv heads (grid " + str(sp.padded_items) +
                " x 1 x " + str(c.num_kv_heads) + ")");
  if (sp.split_kv)
    why.push_back("merge: each query row combines its " + str(s) +
                  " split partials in split order (FlashAttention-2 keeps them in fp32 out_accum; /split/partials " +
                  partials_name(c.split.partials) + ")");
  return sp;
}

}  // namespace plan_detail

}  // namespace attnscope
