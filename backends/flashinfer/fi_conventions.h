// attnscope's conventions translated to FlashInfer's, in one place: the window, the LSE base, the
// split arguments, the mask mode (causal / none / custom bits), the attention variant, the
// per-unit page table and ALiBi's position origin. Every flashinfer.* backend uses these and nothing
// else for the translation. Host-only and header-only (no FlashInfer or CUDA include), so the tests
// check the translation without a GPU.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "attnscope/case_spec.h"
#include "attnscope/mask.h"
#include "attnscope/plan.h"

namespace attnscope::peers::flashinfer {

// attnscope's W counts the visible keys including the query; FlashInfer's window_left counts the
// keys to the left of it (conventions.md section 1). -1 = no window.
inline int window_left(const CaseSpec& c) { return c.attention.window ? *c.attention.window - 1 : -1; }

// FlashInfer's LSE is base 2 (it keeps m in log2 units); attnscope reports natural log. -inf (a
// fully masked row) stays -inf.
inline float lse2_to_natural(float lse2) { return std::isinf(lse2) && lse2 < 0 ? lse2 : lse2 * 0.6931471805599453f; }

// The case's split section as FlashInfer's plan arguments.
struct SplitArgs {
  int fixed_split_size = -1;  // pages (tokens when ragged); -1 = planner chooses
  bool disable_split_kv = false;
  bool enable_cuda_graph = false;
  std::string note;  // what attnscope's planner model has no FlashInfer equivalent for, if anything
};
inline SplitArgs split_args(const CaseSpec& c) {
  SplitArgs a;
  a.enable_cuda_graph = c.split.cuda_graph;
  switch (c.split.planner) {
    case Planner::kFixed:
      a.fixed_split_size = c.split.fixed_split_size.value_or(-1);
      break;
    case Planner::kOff:
      a.disable_split_kv = true;
      break;
    case Planner::kFlashAttn:
      a.note = "planner flash_attn has no FlashInfer equivalent: FlashInfer plans with its own defaults";
      break;
    case Planner::kFlashInfer:
      break;
  }
  if (c.split.fixed_tile_q)
    a.note += std::string(a.note.empty() ? "" : "; ") +
              "/split/fixed_tile_q is not a FlashInfer plan argument (an open PR adds one): FlashInfer chooses its own tile";
  return a;
}

// FlashInfer keeps split-KV partial outputs in the output dtype (tmp_v is DTypeO*): attnscope's
// /split/partials fp32 has no FlashInfer equivalent. Empty when nothing to say.
inline std::string partials_note(const CaseSpec& c) {
  return c.split.partials == PartialPrecision::kFp32
             ? "/split/partials fp32 has no FlashInfer equivalent: FlashInfer rounds split-KV partials to the dtype"
             : "";
}

// FlashInfer's MaskMode values attnscope uses (the kernel's template argument).
enum class FiMask { kNone = 0, kCausal = 1, kCustom = 2 };
inline const char* fi_mask_name(FiMask m) { return m == FiMask::kNone ? "none" : m == FiMask::kCausal ? "causal" : "custom"; }

// The DefaultAttention instantiations attnscope compiles (fi_params.cuh says which template
// arguments each is and why).
// kSinks: attnscope's own variant (fi_sinks.cuh), flashinfer.prefill only.
enum class FiVariant { kPlain = 0, kAlibi = 1, kSoftcap = 2, kSinks = 3 };
inline const char* fi_variant_name(FiVariant v) {
  return v == FiVariant::kPlain ? "plain" : v == FiVariant::kAlibi ? "alibi" : v == FiVariant::kSoftcap ? "softcap" : "sinks";
}

// Sinks need the sinks variant (it carries window and ALiBi too; soft-cap with sinks is refused);
// soft-cap needs the soft-cap variant (it cannot be switched off); a window or ALiBi needs the ALiBi
// variant, which carries both and switches each off at run time; else the plain variant.
inline FiVariant choose_variant(const CaseSpec& c) {
  if (c.has_sinks()) return FiVariant::kSinks;
  if (c.attention.soft_cap) return FiVariant::kSoftcap;
  if (c.attention.alibi || c.attention.window) return FiVariant::kAlibi;
  return FiVariant::kPlain;
}

// A combination no FlashInfer variant computes as attnscope defines it; empty when fine.
inline std::string variant_refusal(const CaseSpec& c) {
  if (c.attention.soft_cap && c.attention.alibi)
    return "soft-cap together with ALiBi: FlashInfer's DefaultAttention<..., soft_cap, alibi> scales the logits by sm_scale "
           "twice (the ALiBi branch multiplies by sm_scale, the soft-cap pre-tanh scale includes it again), so no "
           "FlashInfer variant computes cap * tanh(s / cap) with ALiBi";
  if (c.attention.soft_cap && c.has_sinks())
    return "soft-cap together with attention sinks: flashinfer.prefill's sinks variant is built on the window / ALiBi "
           "variant only (fi_instances.def); the cuda family and the CPU backends take both";
  return "";
}

// The units (requests, or vLLM's virtual batches) as FlashInfer's CSR inputs, int32 as its Python
// wrappers pass them. Virtual batches get their sliced block tables exactly as vLLM's FlashInfer
// metadata builder derives them from the virtual seq_lens: ceil(kv_len / page_size) leading entries
// of the sliced table and last_page_len = kv_len - (pages - 1) * page_size.
struct FiUnits {
  std::vector<int> qo_indptr;         // [units + 1], query rows (tokens of Q, in order)
  std::vector<int> kv_indptr;         // [units + 1], pages
  std::vector<int> kv_indices;        // [kv_indptr.back()], physical pages
  std::vector<int> kv_last_page_len;  // [units], in [1, page_size]
  std::vector<int64_t> q_abs_first;   // [units], attnscope's absolute position of the unit's first query
  std::vector<int> kv_begin;          // [units], absolute key position of the unit's first key
  int page_size = 1;
  int64_t total_q = 0;
};

// Throws CaseError-free std::runtime_error only on an inconsistent plan (units out of token order).
inline FiUnits fi_units(const CaseSpec& c, const Plan& p) {
  FiUnits u;
  const PageTable& pt = p.pages;
  u.page_size = pt.page_size;
  u.qo_indptr.push_back(0);
  u.kv_indptr.push_back(0);
  const bool local = !p.local.batches.empty() && p.local.batches.size() == p.units.size();
  for (size_t i = 0; i < p.units.size(); ++i) {
    const WorkUnit& w = p.units[i];
    const RequestSpec& r = c.requests[w.request];
    u.qo_indptr.push_back(u.qo_indptr.back() + w.q_len);
    u.q_abs_first.push_back(static_cast<int64_t>(r.kv_len) - r.q_len + w.q_begin);
    u.kv_begin.push_back(w.kv_begin);
    const int pages = (w.kv_len + pt.page_size - 1) / pt.page_size;
    for (int j = 0; j < pages; ++j) {
      // vLLM's sliced table for a virtual batch; the request's own table otherwise (the same pages:
      // kv_begin is a multiple of the chunk, which is a multiple of the page size)
      const int page =
          local ? p.local.batches[i].block_table[j] : pt.indices[pt.indptr[w.request] + w.kv_begin / pt.page_size + j];
      u.kv_indices.push_back(page);
    }
    u.kv_indptr.push_back(u.kv_indptr.back() + pages);
    u.kv_last_page_len.push_back(pages > 0 ? w.kv_len - (pages - 1) * pt.page_size : 0);
  }
  u.total_q = u.qo_indptr.back();
  return u;
}

// Keys [lo, hi) (absolute positions) row q of unit i sees under FlashInfer's native mask mode and
// window: causal is bottom-right aligned within the unit (kv_idx + qo_len <= kv_len + q_idx), the
// window keeps kv_idx + qo_len + window_left >= kv_len + q_idx (variants.cuh).
inline void fi_native_range(const WorkUnit& w, int kv_begin, int q, bool causal, int wl, int64_t* lo, int64_t* hi) {
  const int64_t qa = static_cast<int64_t>(w.kv_len) - w.q_len + q;  // the query's position within the unit's keys
  int64_t a = 0, b = w.kv_len;
  if (causal) b = std::min<int64_t>(b, qa + 1);
  if (wl >= 0) a = std::max<int64_t>(a, qa - wl);
  if (b < a) b = a;
  *lo = kv_begin + a;
  *hi = kv_begin + b;
}

// The mask mode for the case: causal / none when FlashInfer's native mode plus window_left gives
// every row exactly the keys attnscope's mask allows, else custom (prefix-LM, documents, padding).
// *why says which request needs the custom mask.
inline FiMask choose_mask(const CaseSpec& c, const Plan& p, std::string* why = nullptr) {
  if (p.mask_store) {  // a mask_mod's or a tree's rows are not intervals
    if (why) *why = c.attention.mask_mod ? "the case has a mask_mod" : "the case has a speculative tree (tree_parents)";
    return FiMask::kCustom;
  }
  const bool causal = c.attention.causal;
  const int wl = window_left(c);
  for (size_t i = 0; i < p.units.size(); ++i) {
    const WorkUnit& w = p.units[i];
    const RequestSpec& r = c.requests[w.request];
    const RowMask& m = p.masks[w.request];
    for (int q = 0; q < w.q_len; ++q) {
      const int qa = (r.kv_len - r.q_len) + w.q_begin + q;
      int lo, hi;
      visible_range(m, qa, &lo, &hi);
      if (hi < lo) hi = lo;
      int64_t flo, fhi;
      fi_native_range(w, w.kv_begin, q, causal, wl, &flo, &fhi);
      const bool empty_a = hi <= lo, empty_b = fhi <= flo;
      if (empty_a != empty_b || (!empty_a && (lo != flo || hi != fhi))) {
        if (why)
          *why = "request " + std::to_string(w.request) + " query " + std::to_string(w.q_begin + q) + " sees keys [" +
                 std::to_string(lo) + ", " + std::to_string(hi) + "), FlashInfer's " + (causal ? "causal" : "non-causal") +
                 " mode [" + std::to_string(flo) + ", " + std::to_string(fhi) + ")";
        return FiMask::kCustom;
      }
    }
  }
  return causal ? FiMask::kCausal : FiMask::kNone;
}

// Bytes of the packed custom mask: one segment per unit, each starting on a byte boundary.
inline int64_t custom_mask_bytes(const Plan& p) {
  int64_t n = 0;
  for (const WorkUnit& w : p.units) n += (static_cast<int64_t>(w.q_len) * w.kv_len + 7) / 8;
  return n;
}

// FlashInfer's custom mask: per unit a row-major [q_len, kv_len] bit matrix, bit q * kv_len + k set
// when attnscope's mask allows the pair, packed little bit order (bit i of byte i / 8 is element i
// % 8), segments byte-aligned as segment_packbits(..., bitorder="little") leaves them;
// *mask_indptr gets each segment's byte offset ([units + 1], int32 like FlashInfer's mask_indptr).
inline std::vector<uint8_t> pack_custom_mask(const CaseSpec& c, const Plan& p, std::vector<int>* mask_indptr) {
  std::vector<uint8_t> bits(static_cast<size_t>(custom_mask_bytes(p)), 0);
  mask_indptr->assign(1, 0);
  int64_t base = 0;
  for (const WorkUnit& w : p.units) {
    const RequestSpec& r = c.requests[w.request];
    const RowMask& m = p.masks[w.request];
    for (int q = 0; q < w.q_len; ++q) {
      int lo, hi;
      visible_range(m, (r.kv_len - r.q_len) + w.q_begin + q, &lo, &hi);
      // the row's visible interval within the unit's keys, less a mask_mod's holes
      const int qa = (r.kv_len - r.q_len) + w.q_begin + q;
      const int a = std::max(lo - w.kv_begin, 0), b = std::min(hi - w.kv_begin, w.kv_len);
      for (int k = a; k < b; ++k) {
        if (!mask_bit(m, qa, w.kv_begin + k)) continue;
        const int64_t bit = static_cast<int64_t>(q) * w.kv_len + k;
        bits[base + bit / 8] |= static_cast<uint8_t>(1u << (bit % 8));
      }
    }
    base += (static_cast<int64_t>(w.q_len) * w.kv_len + 7) / 8;
    mask_indptr->push_back(static_cast<int>(base));
  }
  return bits;
}

// ALiBi's position origin: attnscope adds slope * (k - q_abs) with absolute positions; FlashInfer
// adds slope * (kv_idx - qo_idx) with both indices relative to the unit (prefill) or qo_idx = 0
// (decode). Per row the two differ by the constant slope * (kv_begin - q_abs_first) (prefill) or
// slope * (kv_begin - q_abs) (decode, q_abs of the single query): the output is unchanged, the
// natural-log LSE is FlashInfer's plus this shift.
inline double alibi_lse_shift(double slope, int64_t kv_begin, int64_t q_abs_origin) {
  return slope * static_cast<double>(kv_begin - q_abs_origin);
}

// The sinks variant's maybe_sinks: [units, num_qo_heads] floats, each head's sink logit (natural log,
// `sinks` = sink_logits(c)) in FlashInfer's frame of the unit. Without ALiBi that is the sink itself.
// With ALiBi FlashInfer's logits are attnscope's less the unit's origin shift (alibi_lse_shift above),
// so the sink, which ALiBi does not touch, is moved by the same amount: the row's softmax is then
// attnscope's, and its LSE is FlashInfer's plus the shift, as without sinks. `slopes`: alibi_slopes (zero
// without ALiBi, FlashInfer's float slopes).
inline std::vector<float> fi_sink_rows(const std::vector<float>& sinks, const std::vector<float>& slopes,
                                       const std::vector<int>& kv_begin, const std::vector<int64_t>& q_abs_first) {
  const size_t H = sinks.size();
  std::vector<float> rows(kv_begin.size() * H);
  for (size_t i = 0; i < kv_begin.size(); ++i)
    for (size_t h = 0; h < H; ++h)
      rows[i * H + h] = static_cast<float>(sinks[h] - alibi_lse_shift(slopes[h], kv_begin[i], q_abs_first[i]));
  return rows;
}

}  // namespace attnscope::peers::flashinfer
