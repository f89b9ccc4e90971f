// FlashAttention-3's split decision for python.fa3's varlen call (fa3_plan.h), from reading
// Dao-AILab/flash-attention at 0251105a: hopper/flash_api.cpp (mha_fwd, get_num_splits, get_pack_gqa),
// hopper/heuristics.h, hopper/tile_size.h and hopper/flash_prepare_scheduler.cu. The float arithmetic
// is kept where FA3 decides in float (its efficiencies, the scheduler's 10% margin), so that a tie
// breaks the same way.
#include "attnscope/fa3_plan.h"

#include <algorithm>
#include <cmath>
#include <sstream>

#include "attnscope/library_plan.h"

namespace attnscope {
namespace {

int ceil_div(int64_t a, int64_t b) { return static_cast<int>((a + b - 1) / b); }

// The head dims this build has kernels for (flash_api.cpp round_up_headdim; V's own when it differs).
int round_qk(int d) { return d <= 64 ? 64 : d <= 96 ? 96 : d <= 128 ? 128 : d <= 192 ? 192 : 256; }
int round_v(int d) { return d <= 256 ? round_qk(d) : 512; }

// tile_size_fwd_sm90's (kBlockM, kBlockN) without local attention, V column-major or non-TMA paged KV,
// none of which python.fa3's calls use.
std::pair<int, int> tile_sm90(int d, int dv, bool causal, int elem) {
  if (elem == 2) {
    if (d <= 64) {
      if (dv == 512) return {64, 64};
      if (dv == 256) return {128, 96};
      return {192, causal ? 128 : 192};
    }
    if (d <= 96) return {192, 144};
    if (d <= 128) return {128, causal ? 128 : 176};
    if (d <= 192) return {128, dv <= 128 ? 128 : 112};
    return {128, 80};
  }
  if (d <= 64) return {192, 160};
  if (d <= 96) return {192, 128};
  if (d <= 128) return {128, 224};  // 192 only with soft-cap and local attention, compiled out here
  if (d <= 192) return {128, 160};  // 128 only with local attention
  return {128, 128};
}

// heuristics.h num_splits_heuristic: 1 when the m-blocks nearly fill the SMs (unless one KV head
// overflows a 50 MB L2 and there are queries to reread it, non-causal), 1 for 4 n-blocks or fewer,
// else the fewest splits within 85% of the best wave efficiency.
int splits_heuristic(int64_t total_mblocks, int num_sms, int n_blocks, int m_blocks, int64_t kv_head_bytes, bool causal,
                     int max_splits, std::string* rule) {
  if (total_mblocks >= 0.8f * num_sms) {
    const int64_t l2 = 50 * 1024 * 1024;
    if (kv_head_bytes > l2 && m_blocks >= num_sms * 2 && !causal) {
      *rule = "m-blocks fill 0.8 x SMs, but one KV head is over the 50 MB L2 budget: a split per 50 MB";
      return static_cast<int>(std::min<int64_t>((kv_head_bytes + l2 - 1) / l2, max_splits));
    }
    *rule = "m-blocks fill 0.8 x SMs: no split";
    return 1;
  }
  if (n_blocks <= 4) {
    *rule = "4 n-blocks or fewer: no split";
    return 1;
  }
  max_splits = std::min({max_splits, num_sms, n_blocks});
  std::vector<float> eff;
  float best = 0.f;
  for (int s = 1; s <= max_splits; ++s) {
    const float waves = static_cast<float>(total_mblocks * s) / num_sms;
    eff.push_back(waves / std::ceil(waves));
    best = std::max(best, eff.back());
  }
  for (int s = 1; s <= max_splits; ++s)
    if (eff[s - 1] >= 0.85 * best) {
      *rule = "the fewest splits within 85% of the best wave efficiency";
      return s;
    }
  *rule = "no split count reached 85% of the best efficiency";
  return 1;
}

std::string list(const std::vector<int>& v, size_t max_items = 16) {
  std::string s = "[";
  for (size_t i = 0; i < v.size() && i < max_items; ++i) s += (i ? ", " : "") + std::to_string(v[i]);
  if (v.size() > max_items) s += ", ... (" + std::to_string(v.size()) + ")";
  return s + "]";
}

}  // namespace

Fa3PlanInputs fa3_plan_inputs(const CaseSpec& c, int num_sms) {
  Fa3PlanInputs in;
  for (const auto& r : c.requests) {
    // padding (pad_start P): FA3 computes the rows before it over the keys before it
    const int keys = r.pad_start ? std::min(*r.pad_start, r.kv_len) : r.kv_len;
    in.q_lens.push_back(r.pad_start ? std::clamp(*r.pad_start - (r.kv_len - r.q_len), 0, r.q_len) : r.q_len);
    in.kv_lens.push_back(in.q_lens.back() > 0 ? keys : 0);
    in.max_seqlen_q = std::max(in.max_seqlen_q, r.q_len);
    in.max_seqlen_k = std::max(in.max_seqlen_k, r.kv_len);
  }
  in.num_heads = c.num_qo_heads;
  in.num_heads_k = c.num_kv_heads;
  in.head_dim = c.head_dim_qk;
  in.head_dim_v = c.head_dim_vo;
  in.element_bytes = c.fp8_attention ? 1 : 2;
  in.causal = c.attention.causal;
  in.softcap = c.attention.soft_cap.has_value() && *c.attention.soft_cap > 0;
  in.num_sms = num_sms;
  const int max_k = in.max_seqlen_k;
  if (c.split.planner == Planner::kOff) {
    in.num_splits_arg = 1;
    in.num_splits_from = "num_splits=1 (/split/planner off)";
  } else if (c.split.planner == Planner::kFixed && c.split.fixed_split_size) {
    const int64_t chunk = static_cast<int64_t>(*c.split.fixed_split_size) * c.effective_page_size();
    in.num_splits_arg = std::clamp(ceil_div(max_k, chunk), 1, 128);
    in.num_splits_from = "num_splits=" + std::to_string(in.num_splits_arg) + " (/split/planner fixed: ceil(max_seqlen_k " +
                         std::to_string(max_k) + " / " + std::to_string(chunk) + " keys), at most 128)";
  } else {
    in.num_splits_from = "num_splits=0: FA3's heuristic";
  }
  return in;
}

Fa3PlanModel model_fa3_plan(const Fa3PlanInputs& in) {
  Fa3PlanModel m;
  m.in = in;
  for (int q : in.q_lens) m.max_seqlen_q = std::max(m.max_seqlen_q, q);
  for (int k : in.kv_lens) m.max_seqlen_k = std::max(m.max_seqlen_k, k);
  if (in.max_seqlen_q > 0) m.max_seqlen_q = in.max_seqlen_q;
  if (in.max_seqlen_k > 0) m.max_seqlen_k = in.max_seqlen_k;
  m.d_rounded = round_qk(in.head_dim);
  m.dv_rounded = in.head_dim_v == in.head_dim ? m.d_rounded : round_v(in.head_dim_v);
  // mha_fwd: causal with one query row is the same mask as none, and FA3 drops it (non-paged KV)
  m.is_causal = in.causal && m.max_seqlen_q != 1;
  std::tie(m.block_m, m.block_n) = tile_sm90(m.d_rounded, m.dv_rounded, m.is_causal, in.element_bytes);
  const int group = in.num_heads_k > 0 ? in.num_heads / in.num_heads_k : 1;
  // get_num_splits: the query rows of all of a KV head's query heads, over the longest request
  m.num_m_blocks = ceil_div(static_cast<int64_t>(m.max_seqlen_q) * group, m.block_m);
  m.num_n_blocks = ceil_div(m.max_seqlen_k, m.block_n);
  m.size_one_kv_head = static_cast<int64_t>(m.max_seqlen_k) * (in.head_dim + in.head_dim_v) * in.element_bytes;
  m.total_mblocks = static_cast<int64_t>(in.num_heads_k) * m.num_m_blocks;  // batch counted as 1 (varlen)
  if (in.num_splits_arg >= 1) {
    m.num_splits = in.num_splits_arg;
    m.split_rule = "as passed";
  } else {
    m.num_splits = splits_heuristic(m.total_mblocks, in.num_sms, m.num_n_blocks, m.num_m_blocks, m.size_one_kv_head, m.is_causal,
                                    128, &m.split_rule);
  }
  // get_pack_gqa: always with splits; never with one query head per KV head; varlen otherwise always
  m.pack_gqa = in.pack_gqa_arg >= 0 ? in.pack_gqa_arg == 1 : (m.num_splits > 1 || group > 1);
  // prepare_varlen_num_blocks: one CTA for up to 992 requests; more, or one split, gives every request 1
  const int B = static_cast<int>(in.q_lens.size());
  const int heads = m.pack_gqa ? in.num_heads_k : in.num_heads;
  for (int b = 0; b < B; ++b) {
    m.request_m_blocks.push_back(ceil_div(static_cast<int64_t>(in.q_lens[b]) * (m.pack_gqa ? group : 1), m.block_m));
    m.request_n_blocks.push_back(ceil_div(in.kv_lens[b], m.block_n));
    m.total_blocks += static_cast<int64_t>(m.request_m_blocks.back()) * m.request_n_blocks.back();
  }
  const bool all_one = B > 992 || m.num_splits == 1;
  // the blocks each SM would get with a 10% margin (float, as the kernel's ceilf)
  m.blocks_per_sm = static_cast<int>(
      std::ceil(static_cast<float>(m.total_blocks) * 1.1f * static_cast<float>(heads) / static_cast<float>(in.num_sms)));
  for (int b = 0; b < B; ++b) {
    int s = 1;
    if (!all_one && m.blocks_per_sm > 0)
      s = std::max(std::min(ceil_div(m.request_n_blocks[b], m.blocks_per_sm), m.num_splits), 1);
    m.request_splits.push_back(s);
  }
  return m;
}

std::vector<PlanFieldDiff> compare_fa3_plan(const Fa3PlanModel& m, const Fa3OwnPlan& own) {
  std::vector<PlanFieldDiff> d;
  if (!own.available) return d;
  auto add = [&](const char* f, const std::string& a, const std::string& b) {
    if (a != b) d.push_back({f, a, b});
  };
  add("num_splits", std::to_string(m.num_splits), std::to_string(own.num_splits));
  if (own.pack_gqa >= 0) add("pack_gqa", m.pack_gqa ? "true" : "false", own.pack_gqa ? "true" : "false");
  if (!own.request_m_blocks.empty())
    add("request_m_blocks", list(m.request_m_blocks, 1 << 20), list(own.request_m_blocks, 1 << 20));
  if (!own.request_splits.empty()) add("request_splits", list(m.request_splits, 1 << 20), list(own.request_splits, 1 << 20));
  return d;
}

std::string fa3_plan_text(const Fa3PlanModel& m, const Fa3OwnPlan* own) {
  std::ostringstream o;
  const auto& in = m.in;
  o << "  inputs  " << in.q_lens.size() << " requests, max_seqlen_q " << m.max_seqlen_q << ", max_seqlen_k " << m.max_seqlen_k
    << ", heads " << in.num_heads << " (kv " << in.num_heads_k << "), head dims " << in.head_dim << "/" << in.head_dim_v
    << (in.element_bytes == 1 ? ", e4m3" : ", bf16")
    << (m.is_causal ? ", causal"
        : in.causal ? ", causal dropped (one query row)"
                    : "")
    << (in.softcap ? ", soft-cap" : "") << ", " << in.num_sms << " SMs (model), " << in.num_splits_from << "\n";
  o << "  rule    tile " << m.block_m << " x " << m.block_n << " (head dims rounded " << m.d_rounded << "/" << m.dv_rounded
    << "), m_blocks " << m.num_m_blocks << " x kv heads " << in.num_heads_k << " = " << m.total_mblocks
    << " vs 0.8 x SMs, n_blocks " << m.num_n_blocks << ": " << m.split_rule << "\n";
  o << "  sched   per request m_blocks " << list(m.request_m_blocks) << ", n_blocks " << list(m.request_n_blocks) << ", "
    << m.total_blocks << " blocks x " << (m.pack_gqa ? in.num_heads_k : in.num_heads)
    << " heads x 1.1 / SMs = " << m.blocks_per_sm << " per SM\n";
  if (!own) {
    o << "  model   num_splits " << m.num_splits << ", pack_gqa " << (m.pack_gqa ? "true" : "false") << ", per request splits "
      << list(m.request_splits) << "\n";
    return o.str();
  }
  if (!own->available) {
    o << "  model   num_splits " << m.num_splits << ", pack_gqa " << (m.pack_gqa ? "true" : "false") << ", per request splits "
      << list(m.request_splits) << "\n  FA3's own: not read back: " << own->why << "\n";
    return o.str();
  }
  auto row = [&](const std::string& f, const std::string& a, const std::string& b, bool compared = true) {
    std::string line = "  " + f;
    line.resize(20, ' ');
    line += a;
    if (line.size() < 44) line.resize(44, ' ');
    line += " " + b;
    o << line << (compared && a != b ? "  <- differs" : "") << "\n";
  };
  row("field", "model", "FA3 (" + own->device + ")", false);
  row("num_splits", std::to_string(m.num_splits), std::to_string(own->num_splits));
  row("pack_gqa", m.pack_gqa ? "true" : "false",
      own->pack_gqa < 0 ? "(not observable)"
      : own->pack_gqa   ? "true"
                        : "false",
      own->pack_gqa >= 0);
  if (!own->request_m_blocks.empty()) row("request_m_blocks", list(m.request_m_blocks), list(own->request_m_blocks));
  if (!own->request_splits.empty()) row("request_splits", list(m.request_splits), list(own->request_splits));
  if (own->num_sms && own->num_sms != in.num_sms)
    o << "  (the model budgets for /split/num_sms " << in.num_sms << "; FA3 for the device's " << own->num_sms << ")\n";
  return o.str();
}

}  // namespace attnscope
