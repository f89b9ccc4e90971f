// Text output of attnscope-cli.
#include "text_report.h"

#include <algorithm>
#include <cstdio>
#include <sstream>

#include "attnscope/compare.h"
#include "attnscope/fp8.h"
#include "attnscope/mask_expr.h"
#include "attnscope/sparse.h"
#include "attnscope/workload.h"
#include "cuda_graph_run.h"
#include "fp8_stats.h"
#include "partition_report.h"
#include "report_json.h"

namespace attnscope::cli {

namespace {

std::string fmt(const char* f, double v) {
  char b[64];
  std::snprintf(b, sizeof b, f, v);
  return b;
}

std::string sci(double v) { return fmt("%.2e", v); }

std::string pad(std::string s, size_t w) {
  if (s.size() < w) s.append(w - s.size(), ' ');
  return s;
}

// A column's width: its widest cell (the header included) and two spaces, so no id runs into the
// next column.
size_t width(size_t w, const std::string& cell) { return std::max(w, cell.size() + 2); }

std::string list(const std::vector<int>& v, size_t max_items = 16) {
  std::string s = "[";
  for (size_t i = 0; i < v.size() && i < max_items; ++i) s += (i ? ", " : "") + std::to_string(v[i]);
  if (v.size() > max_items) s += ", ... (" + std::to_string(v.size()) + " in all)";
  return s + "]";
}

std::string mask_text(const CaseSpec& c) {
  const auto& a = c.attention;
  std::string s = a.causal ? "causal" : "non-causal";
  if (a.window) s += ", window " + std::to_string(*a.window);
  if (a.local_chunk) s += ", local chunk " + std::to_string(*a.local_chunk);
  if (a.prefix_lm) s += ", prefix-LM";
  bool docs = false, pads = false;
  for (const auto& r : c.requests) {
    docs |= !r.doc_starts.empty();
    pads |= r.pad_start.has_value();
  }
  if (docs) s += ", documents";
  if (pads) s += ", padding";
  if (a.soft_cap) s += ", soft-cap " + fmt("%g", *a.soft_cap);
  if (a.alibi) s += ", ALiBi";
  int trees = 0;
  for (const auto& r : c.requests) trees += !r.tree_parents.empty();
  if (trees) s += ", tree" + (c.requests.size() > 1 ? " (" + std::to_string(trees) + " requests)" : std::string());
  if (a.sinks) s += a.sinks->logits.empty() ? ", sinks (seeded)" : ", sinks";
  return s;
}

// FlashAttention-2's own num_splits (reproduced from flash_api.cpp) beside the flash_attn model.
void print_flash_attn_plan(std::ostream& o, const FlashAttnPlan& f) {
  if (!f.asked) return;
  o << "\nFLASHATTENTION-2'S OWN SPLIT  flash_attn_with_kvcache (" << f.pin << ", set_params_splitkv + num_splits_heuristic)";
  if (f.ran) o << ", device answers from " << f.device.source;
  o << "\n";
  if (f.available) {
    o << "  inputs  batch " << f.batch_size << ", heads " << f.num_heads << " (kv " << f.num_heads_k << "), head_size "
      << f.head_size << ", seqlen_q " << f.seqlen_q << (f.ngroups_swapped ? " (GQA decode swapped)" : "") << ", seqlen_k "
      << f.seqlen_k
      << (f.paged ? " (" + std::to_string(f.max_num_blocks_per_seq) + " blocks x " + std::to_string(f.page_block_size) + ")" : "")
      << ", " << f.num_splits_from << "\n";
    o << "  rule    block_n " << f.block_n << ", n_blocks " << f.num_n_blocks << ", m_blocks " << f.num_m_blocks
      << ", batch x heads x m_blocks " << f.batch_nheads_mblocks << " vs 0.8 x " << f.num_sms_x2 << " (2 x SMs)\n";
    o << "  result  num_splits " << f.num_splits << ", " << f.chunk_tokens << " keys per split, "
      << (f.split_kernel ? "split-KV kernel" : "non-split kernel") << ", partials " << f.accum_bytes << " B\n";
  }
  o << "  " << flash_attn_agreement_line(f) << "\n";
}

// FlashAttention-3's split decision as attnscope models it (fa3_plan.h); FA3's own is read back when
// the call runs, so `run` shows the two side by side (Result::library_plan).
void print_fa3_plan(std::ostream& o, const Fa3LibraryPlan& f) {
  if (!f.asked) return;
  o << "\nFLASHATTENTION-3'S SPLIT (attnscope's model: get_num_splits, get_pack_gqa, prepare_varlen_num_blocks; " << f.source
    << ")\n";
  o << fa3_plan_text(f.model, nullptr);
}

// FlashInfer's own plan of the same units beside the model's, and where the two differ.
void print_library_plans(std::ostream& o, const Plan& p) {
  const FlashInferPlan& f = p.library.flashinfer;
  o << "\nFLASHINFER'S OWN PLAN  PrefillSplitQOKVIndptr";
  if (!f.pin.empty()) o << " (" << f.pin << ")";
  if (f.ran) o << ", device answers from " << f.device.source;
  o << "\n";
  if (f.ran) {
    o << "  inputs  qo_indptr " << list(f.qo_indptr, 12) << ", kv_indptr " << list(f.kv_indptr, 12) << " pages, page "
      << f.page_size << ", window_left " << f.window_left << ", fixed_split_size " << f.fixed_split_size << ", disable_split_kv "
      << (f.disable_split_kv ? "yes" : "no") << ", cuda graph " << (f.enable_cuda_graph ? "yes" : "no")
      << ", max_batch_size_if_split " << f.max_batch_size_if_split << "\n";
  }
  if (f.available) {
    o << "  result  cta_tile_q " << f.cta_tile_q << ", kv_chunk_size ";
    if (f.kv_chunk_unbounded)
      o << "unbounded (disable_split_kv: INT64_MAX pages x page " << f.page_size
        << (f.page_size > 1 ? " overflows int64, returned " + std::to_string(f.kv_chunk_size) : std::string()) << ")";
    else
      o << f.kv_chunk_size << " tokens";
    o << ", split_kv " << (f.split_kv ? "yes" : "no") << ", " << f.new_batch_size << " items, padded " << f.padded_batch_size
      << "\n";
    o << "  request_indices " << list(f.request_indices, 24) << "\n";
    o << "  qo_tile_indices " << list(f.qo_tile_indices, 24) << "\n";
    o << "  kv_tile_indices " << list(f.kv_tile_indices, 24) << "\n";
    o << "  merge_indptr    " << list(f.merge_indptr, 24) << "\n";
    o << "  o_indptr        " << list(f.o_indptr, 24) << "\n";
    o << "  workspaces      float " << f.float_workspace_bytes << " B, int " << f.int_workspace_bytes << " B\n";
  }
  o << "  " << flashinfer_agreement_line(p.split, f) << "\n";
  print_flash_attn_plan(o, p.library.flash_attn);
  print_fa3_plan(o, p.library.fa3);
}

// FlashInfer's MLA planner (absorbed MLA cases) beside attnscope's model of it.
void print_mla_library_plan(std::ostream& o, const Plan& p) {
  const FlashInferMlaPlan& f = p.library.flashinfer_mla;
  if (f.inputs.kv_len.empty()) return;  // not an absorbed MLA case
  const MlaPlanModel m = flashinfer_mla_model(f);
  o << "\nFLASHINFER'S MLA PLAN  MLAPlan";
  if (!f.pin.empty()) o << " (" << f.pin << ")";
  if (f.ran) o << ", device answers from " << f.device.source;
  o << "\n  inputs  qo_indptr " << list(f.inputs.qo_indptr, 12) << ", kv_indptr " << list(f.inputs.kv_indptr, 12)
    << " pages, kv_len " << list(f.inputs.kv_len, 12) << ", " << f.inputs.num_heads << " heads, "
    << (f.inputs.causal ? "causal" : "no mask") << "\n";
  if (m.refusal.empty())
    o << "  model   " << m.cluster_size << " CTA" << (m.cluster_size > 1 ? "s" : "") << " per cluster x " << m.schedule.num_blks_y
      << " clusters (" << m.inputs.num_sm << " SMs), tile " << m.cluster_tile_q << " rows, " << m.total_kv
      << " keys over the tiles, kv_len_limit " << m.kv_len_limit << ", " << m.schedule.works.size() << " work items, "
      << m.partial_rows << " partial rows, " << m.merge_ctas << " merge CTAs\n";
  if (f.available) {
    const MlaSchedule& s = f.schedule;
    std::vector<int> kv_end;
    for (size_t i = 0; i < s.works.size() && i < 24; ++i) kv_end.push_back(s.works[i].kv_end);
    o << "  result  grid (" << s.num_blks_x << ", " << s.num_blks_y << "), " << s.works.size() << " work items, work_indptr "
      << list(s.work_indptr, 12) << "\n";
    o << "  workspaces int " << f.int_workspace_bytes << " B staged, float " << f.float_workspace_bytes << " B\n";
  }
  o << "  " << flashinfer_mla_agreement_line(m, f) << "\n";
}

// /sparse's selection per request (sparse.h): what the plan's mask bits hold, counted, and the last query's
// first kept tokens with their physical slots.
void print_sparse(std::ostream& o, const CaseSpec& c, const Plan& p) {
  const SparseSpec& sp = *c.sparse;
  o << "sparse DeepSeek sparse attention (ANDed with it): top_k " << sp.top_k << ", "
    << (sp.indices.empty() ? "indexer " + std::to_string(sp.index_heads) + " heads x " + std::to_string(sp.index_head_dim) +
                                 " dims, " + scoring_name(sp.scoring) + " scores"
                           : std::string("indices given (/sparse/indices)"))
    << "\n";
  for (int r = 0; r < static_cast<int>(c.requests.size()) && r < 8; ++r) {
    const SparseSelection& s = (*p.sparse)[r];
    int64_t kept = 0, padding = 0, nans = 0;
    for (int q = 0; q < s.q_len; ++q) {
      kept += s.kept(q);
      padding += s.padding(q);
      nans += s.nans[q];
    }
    const std::vector<int64_t> slots = sparse_slots(s, p.pages, r);
    const int last = s.q_len - 1, n = std::min(s.kept(last), 8);
    o << "      request " << r << ": " << kept << " kept, " << padding << " -1 padding"
      << (nans ? ", " + std::to_string(nans) + " NaN scores" : "") << "; its last query keeps "
      << list(std::vector<int>(s.row(last), s.row(last) + n), 8) << (s.kept(last) > n ? " ..." : "") << " at slots "
      << list(std::vector<int>(slots.begin() + static_cast<int64_t>(last) * s.top_k,
                               slots.begin() + static_cast<int64_t>(last) * s.top_k + n),
              8)
      << "\n";
  }
  o << "      allowed pairs per head: " << allowed_pairs(c, p) << "\n";
}

}  // namespace

std::string case_summary(const CaseSpec& c) {
  std::ostringstream o;
  o << (c.name.empty() ? "(unnamed)" : c.name) << ": " << c.requests.size() << " request" << (c.requests.size() == 1 ? "" : "s")
    << ", " << c.total_q() << " query / " << c.total_kv() << " kv tokens, heads " << c.num_qo_heads << "/" << c.num_kv_heads
    << ", head_dim " << c.head_dim_qk;
  if (c.head_dim_vo != c.head_dim_qk) o << "/" << c.head_dim_vo;  // streamed: GCC 12 -Wrestrict misfires on "/" + string
  if (c.mla)
    o << " (MLA " << (c.mla->absorbed ? "absorbed" : "non-absorbed") << ", latent " << c.mla->kv_lora_rank << " + "
      << c.mla->rope_dim << ")";
  o << ", " << dtype_name(c.dtype);
  if (c.kv_cache.fp8)
    o << (c.fp8_attention ? " out, Q/K/V " : ", KV ") << fp8_name(*c.kv_cache.fp8) << " ("
      << granularity_name(c.kv_cache.scales.granularity) << " scales)";
  o << ", " << storage_name(c.kv_cache.storage);
  if (c.kv_cache.storage == KvStorage::kPaged)
    o << " (page " << c.kv_cache.page_size << ", " << layout_name(c.kv_cache.layout) << ", " << alloc_name(c.kv_cache.allocation)
      << (c.kv_cache.poison_unused ? ", poisoned" : "") << ")";
  o << ", " << mask_text(c);
  return o.str();
}

void print_plan(std::ostream& o, const CaseSpec& c, const Plan& p) {
  o << "case  " << case_summary(c) << "\n";
  o << "mask  native spellings: ";
  if (c.attention.window) {
    const int w = *c.attention.window;
    o << "W = " << w << " (cuDNN / vLLM sliding_window " << w << ", FlashInfer window_left " << w - 1
      << ", FlashAttention window_size (" << w - 1 << ", 0))";
  } else {
    o << "no sliding window (FlashInfer window_left -1, FlashAttention window_size (-1, -1))";
  }
  o << "; sm_scale " << fmt("%.6g", c.sm_scale_or_default()) << "\n";
  // the built-in mask as a mask_mod expression (absolute positions), once per distinct text
  std::string last;
  for (int r = 0; r < static_cast<int>(c.requests.size()); ++r) {
    const std::string e = builtin_mask_expr(c, r);
    if (e == last) continue;
    o << "      as an expression"
      << (c.requests.size() > 1
              ? " (request " + std::to_string(r) + (r + 1 < static_cast<int>(c.requests.size()) ? " on" : "") + ")"
              : std::string())
      << ": " << e << "\n";
    last = e;
  }
  if (c.attention.mask_mod) {
    int64_t pairs = 0, builtin = 0;
    for (int r = 0; r < static_cast<int>(c.requests.size()); ++r) {
      const RowMask m = row_mask(c, r);
      for (int q = 0; q < c.requests[r].q_len; ++q) builtin += allowed_in(m, q_abs_of(m, q), 0, c.requests[r].kv_len);
    }
    pairs = allowed_pairs(c, p);
    o << "      mask_mod (ANDed with it): " << *c.attention.mask_mod << "\n"
      << "      allowed pairs per head: " << pairs << " of the built-in mask's " << builtin << "\n";
  }
  if (c.attention.score_mod) o << "score score_mod: " << *c.attention.score_mod << "\n";
  for (int r = 0, shown = 0; r < static_cast<int>(c.requests.size()) && shown < 8; ++r) {
    if (c.requests[r].tree_parents.empty()) continue;
    o << "      tree (ANDed with it), request " << r << ": parents " << list(c.requests[r].tree_parents, 32)
      << " (a new token sees the prefix, itself and its ancestors)\n";
    ++shown;
  }
  if (c.has_trees()) o << "      allowed pairs per head: " << allowed_pairs(c, p) << "\n";
  if (p.sparse) print_sparse(o, c, p);
  if (c.has_sinks()) {
    const std::vector<float> s = sink_logits(c);
    o << "sinks one logit per query head in the denominator, no value vector"
      << (c.attention.sinks->logits.empty() ? " (seeded)" : "") << ": [";
    for (size_t h = 0; h < s.size() && h < 16; ++h) o << (h ? ", " : "") << fmt("%.6g", s[h]);
    o << (s.size() > 16 ? ", ... (" + std::to_string(s.size()) + " in all)]\n" : std::string("]\n"));
  }
  o << "\n";

  const auto& pt = p.pages;
  o << "PAGE TABLE  page_size " << pt.page_size << ", " << pt.num_pages << " physical pages";
  int unused = 0;
  for (int ow : pt.owner) unused += ow == kPageUnused;
  o << " (" << unused << " unused" << (c.kv_cache.null_page && c.kv_cache.storage == KvStorage::kPaged ? ", page 0 null" : "")
    << ")\n";
  o << "  kv_indptr        " << list(pt.indptr) << "\n";
  o << "  kv_last_page_len " << list(pt.last_page_len) << "\n";
  for (size_t r = 0; r < c.requests.size() && r < 8; ++r) {
    std::vector<int> pages(pt.indices.begin() + pt.indptr[r], pt.indices.begin() + pt.indptr[r + 1]);
    o << "  request " << pad(std::to_string(r), 3) << " pages " << list(pages, 12) << "\n";
  }
  if (c.requests.size() > 8) o << "  ... " << c.requests.size() - 8 << " more requests\n";

  if (!p.local.batches.empty()) {
    o << "\nVIRTUAL BATCHES  chunked local attention, chunk " << p.local.chunk
      << " (vLLM make_local_attention_virtual_batches)\n";
    o << "  vb   request  q_begin  q_len  chunk_start  kv_len  block_table\n";
    for (size_t i = 0; i < p.local.batches.size() && i < 32; ++i) {
      const auto& b = p.local.batches[i];
      o << "  " << pad(std::to_string(i), 5) << pad(std::to_string(b.request), 9) << pad(std::to_string(b.q_begin), 9)
        << pad(std::to_string(b.q_len), 7) << pad(std::to_string(b.kv_begin), 13) << pad(std::to_string(b.kv_len), 8)
        << list(b.block_table, 8) << "\n";
    }
    if (p.local.batches.size() > 32) o << "  ... " << p.local.batches.size() - 32 << " more\n";
    o << "  cu_q " << list(p.local.cu_q, 24) << "\n";
  }

  const auto& s = p.split;
  o << "\nSPLIT PLAN  planner " << planner_name(s.planner) << ": tile " << s.cta_tile_q << " packed rows, chunk " << s.chunk_pages
    << " pages (" << s.chunk_tokens << " keys), split_kv " << (s.split_kv ? "yes" : "no") << ", " << s.num_items << " items"
    << (s.padded_items != s.num_items ? " (grid " + std::to_string(s.padded_items) + ")" : "") << "\n";
  for (const auto& line : s.reasoning) o << "  - " << line << "\n";
  o << "  per unit: q-tiles x kv-chunks (item ids)\n";
  int item = 0;
  for (size_t u = 0; u < p.units.size(); ++u) {
    const int tiles = s.unit_tiles[u], chunks = s.unit_chunks[u];
    if (u < 8) {
      const auto& un = p.units[u];
      o << "  unit " << u << " (request " << un.request << ", q " << un.q_len << ", kv " << un.kv_len << "): " << tiles << " x "
        << chunks;
      if (tiles * chunks <= 24) {
        o << "  items";
        for (int t = 0; t < tiles; ++t) {
          o << " [";
          for (int k = 0; k < chunks; ++k) o << (k ? " " : "") << item + t * chunks + k;
          o << "]";
        }
      } else {
        o << "  items " << item << ".." << item + tiles * chunks - 1;
      }
      o << "  merge fan-in " << chunks << "\n";
    }
    item += tiles * chunks;
  }
  if (p.units.size() > 8) o << "  ... " << p.units.size() - 8 << " more units\n";

  print_library_plans(o, p);
  print_mla_library_plan(o, p);
  o << graph_pad_text(c, p);   // /cuda_graph: the padded batch
  print_partition_plan(o, c);  // /parallel: each partition and its own plan

  o << "\nBLOCK MAP  ";
  o << block_map_text(p.blocks);
  o << "\nplanned in " << fmt("%.1f", p.plan_us) << " us\n";
}

void print_session(std::ostream& o, const Session& s) {
  const CaseSpec& c = s.spec();
  const auto& sp = s.plan.split;
  o << "case    " << case_summary(c) << "\n";
  o << "plan    " << planner_name(sp.planner) << ", tile " << sp.cta_tile_q << ", chunk " << sp.chunk_pages << " pages, "
    << (sp.split_kv ? "split-KV" : "no split") << ", " << sp.num_items << " items (" << fmt("%.1f", s.plan.plan_us) << " us)\n";
  o << "library " << flashinfer_agreement_line(sp, s.plan.library.flashinfer) << "\n";
  if (const FlashInferMlaPlan& mla = s.plan.library.flashinfer_mla; !mla.inputs.kv_len.empty())
    o << "library " << flashinfer_mla_agreement_line(flashinfer_mla_model(mla), mla) << "\n";
  if (s.plan.library.flash_attn.asked) o << "library " << flash_attn_agreement_line(s.plan.library.flash_attn) << "\n";
  if (c.fp8_kv()) {
    o << "fp8     ";
    // the given scales may clamp most of K and V: that explains a large quantisation error
    if (s.quantisation)
      if (const std::string sat = fp8_saturation_text(build_fp8_data(c, s.plan.pages)); !sat.empty()) o << sat << "; ";
    if (s.quantisation)
      o << "quantisation error (dequantised ideal vs original ideal): max abs " << sci(s.quantisation->o.max_abs) << ", rel L2 "
        << sci(s.quantisation->o.rel_l2) << "; comparisons below measure the kernel error (against the dequantised ideal)\n";
    else
      o << s.fp8_note << "\n";
  }
  if (s.sample_rows)
    o << "sample  references computed on " << *s.sample_rows << " query rows per request; comparisons use those rows\n";
  size_t wb = width(0, "backend"), ws = width(0, "status");
  for (const auto& r : s.results) {
    wb = width(wb, r.backend);
    ws = width(ws, status_name(r.status));
  }
  o << "\n" << pad("backend", wb) << pad("status", ws) << pad("host ms", 10) << pad("digest", 18) << "note\n";
  for (const auto& r : s.results) {
    o << pad(r.backend, wb) << pad(status_name(r.status), ws) << pad(fmt("%.1f", r.timing.host_ms), 10)
      << pad(r.ok() ? result_digest(r) : "-", 18) << r.message << "\n";
  }
  for (const auto& r : s.results) o << graph_report_text(r);  // /cuda_graph replays
  for (const auto& r : s.results)                             // a library's own plan read back from its call, beside the model
    if (!r.library_plan.empty())
      o << "\nLIBRARY PLAN OF " << r.backend << " (its own beside attnscope's model)\n" << r.library_plan;
  print_partition_run(o, s);  // /parallel
  if (!s.diffs.empty()) {
    // each row names its rule: a case may compare the same pair under two rules
    std::vector<std::string> names;
    size_t wc = width(0, "comparison");
    for (size_t i = 0; i < s.diffs.size(); ++i) {
      names.push_back(i < c.comparisons.size() ? comparison_label(c.comparisons[i])
                                               : s.diffs[i].backend + " vs " + s.diffs[i].baseline);
      wc = width(wc, names.back());
    }
    o << "\n"
      << pad("comparison", wc) << pad("max abs", 10) << pad("mean abs", 10) << pad("rel L2", 10) << pad("max ulp", 9)
      << pad("bit-eq", 8) << pad("ac 1e-2", 8) << pad("ac 1e-3", 8) << "verdict\n";
    for (size_t i = 0; i < s.diffs.size(); ++i) {
      const DiffReport& d = s.diffs[i];
      const std::string& name = names[i];
      if (!d.available) {
        o << pad(name, wc) << (d.verdict.skipped ? "SKIP  " : "FAIL  ") << d.verdict.detail << "\n";
        continue;
      }
      const double bit = d.o.count ? 100.0 * d.o.bit_identical / d.o.count : 0;
      o << pad(name, wc) << pad(sci(d.o.max_abs), 10) << pad(sci(d.o.mean_abs), 10) << pad(sci(d.o.rel_l2), 10)
        << pad(std::to_string(d.o.max_ulp), 9) << pad(fmt("%.0f%%", bit), 8) << pad(d.o.allclose_loose ? "yes" : "no", 8)
        << pad(d.o.allclose_tight ? "yes" : "no", 8)
        << (d.verdict.pass      ? "PASS"
            : d.verdict.skipped ? "SKIP"
                                : "FAIL")
        << "\n";
      o << "    " << d.verdict.rule << ": " << d.verdict.detail;
      o << "; LSE max abs " << sci(d.lse.max_abs);
      if (d.vs_original) o << "; vs the original ideal max abs " << sci(d.vs_original->max_abs);
      if (d.o.nan_a || d.o.inf_a) o << "; " << d.o.nan_a << " NaN, " << d.o.inf_a << " Inf in " << d.backend;
      o << "\n";
    }
  }
  std::vector<ReplayCheck> checks = s.replay;  // the digests, then the recorded plan and verdicts
  checks.insert(checks.end(), s.replay_records.begin(), s.replay_records.end());
  size_t wr = 0;
  for (const auto& r : checks) wr = width(wr, r.backend);
  for (const auto& r : checks) {
    o << "replay  " << pad(r.backend, std::max<size_t>(wr, 24));
    if (r.state == ReplayState::kIdentical)
      o << (r.kind == ReplayKind::kDigest ? "bit-identical to the recorded digest "
            : r.kind == ReplayKind::kPlan ? "equal to the recorded plan: "
                                          : "equal to the recorded verdict: ")
        << r.recorded;
    if (r.state == ReplayState::kDiffers)
      o << "DIFFERS (" << (r.why.empty() ? "recorded " + r.recorded + ", now " + r.now : r.why) << ")";
    if (r.state == ReplayState::kNotChecked) o << "NOT CHECKED (why: " << r.why << ")";
    o << "\n";
  }
  o << "\n" << s.summary().line() << "\n";
}

void print_invariance(std::ostream& o, const InvarianceReport& r) {
  o << "batch invariance of " << r.backend << " on " << (r.case_name.empty() ? "(unnamed)" : r.case_name) << ": each of "
    << r.num_requests << " requests alone vs inside the batch, bitwise on O and LSE\n\n";
  o << pad("planner", 12) << pad("batch tile/chunk", 18) << pad("identical", 11) << pad("differ", 8) << "detail\n";
  for (const auto& p : r.planners) {
    const std::string tc = std::to_string(p.batch_tile) + " / " + std::to_string(p.batch_chunk_pages);
    if (!p.error.empty()) {
      o << pad(planner_name(p.planner), 12) << pad(tc, 18) << pad("-", 11) << pad("-", 8) << p.error << "\n";
      continue;
    }
    const int same = p.identical_requests();
    std::string detail = p.note;
    std::vector<std::string> bad;
    for (size_t i = 0; i < p.differing_values.size(); ++i) {
      if (p.differing_values[i] == 0) continue;
      std::string b = "request " + std::to_string(i) + ": " + std::to_string(p.differing_values[i]) + " values (alone: tile " +
                      std::to_string(p.alone_tile[i]) + ", chunk " + std::to_string(p.alone_chunk_pages[i]) + ")";
      bad.push_back(b);
    }
    o << pad(planner_name(p.planner), 12) << pad(tc, 18) << pad(std::to_string(same) + "/" + std::to_string(r.num_requests), 11)
      << pad(std::to_string(r.num_requests - same), 8) << detail << "\n";
    for (size_t i = 0; i < bad.size() && i < 6; ++i) o << "      " << bad[i] << "\n";
    if (bad.size() > 6) o << "      ... " << bad.size() - 6 << " more\n";
  }
}

void print_mla_forms(std::ostream& o, const MlaFormsReport& r) {
  o << "MLA forms of " << (r.case_name.empty() ? "(unnamed)" : r.case_name) << " (given "
    << (r.given_absorbed ? "absorbed" : "non-absorbed") << ", the other form derived): every output in the non-absorbed "
    << "space (absorbed x W_uv) against cpu.reference on the non-absorbed form\n";
  o << "bound  2 x max|cpu.lowp - ref| + " << fmt("%g", kMlaFormsFloor) << " = " << fmt("%.3g", r.bound) << " (cpu.lowp "
    << fmt("%.3g", r.lowp_max_abs) << ")\n\n";
  o << pad("backend", 18) << pad("form", 22) << pad("max abs", 11) << "verdict\n";
  for (const auto& x : r.rows) {
    o << pad(x.backend, 18) << pad(x.absorbed ? "absorbed (x W_uv)" : "non-absorbed", 22);
    if (x.status != Status::kOk)
      o << pad("-", 11)
        << (x.reason.rfind(status_name(x.status), 0) == 0 ? x.reason : std::string(status_name(x.status)) + ": " + x.reason)
        << "\n";
    else
      o << pad(sci(x.max_abs), 11) << (x.pass ? "PASS" : "FAIL") << "\n";
  }
}

void print_bench(std::ostream& o, const BenchReport& r) {
  const std::string name = r.case_name.empty() ? "(unnamed)" : r.case_name;
  o << "bench  " << name << (r.device_found ? " on " + r.device : ": no device to time on: " + r.device) << "\n";
  o << "       " << fmt("%.3g", r.flops / 1e12) << " TFLOP per run (" << r.allowed_pairs << " allowed pairs per head), "
    << fmt("%.3g", r.bytes / 1e9) << " GB moved at least (K/V " << fmt("%.3g", r.kv_bytes / 1e9) << " GB); ";
  // the copy bandwidth only where it was measured: 0 GB/s would read as a measurement
  if (r.copy_gbps > 0) o << "device copy " << fmt("%.0f", r.copy_gbps) << " GB/s; ";
  o << "plan " << fmt("%.1f", r.plan_us) << " us\n\n";
  size_t wb = width(0, "backend");
  for (const auto& x : r.rows) wb = width(wb, x.backend);
  o << pad("backend", wb) << pad("median ms", 11) << pad("min-max ms", 18) << pad("TFLOP/s", 10) << pad("GB/s", 9)
    << pad("KV GB/s", 9) << "of copy\n";
  for (const auto& x : r.rows) {
    if (x.status != "ok") {
      o << pad(x.backend, wb) << x.status << "\n";
      continue;
    }
    o << pad(x.backend, wb) << pad(fmt("%.4f", x.median_ms), 11) << pad(fmt("%.4f", x.min_ms) + "-" + fmt("%.4f", x.max_ms), 18)
      << pad(fmt("%.1f", x.tflops), 10) << pad(fmt("%.0f", x.gbps), 9) << pad(fmt("%.0f", x.kv_gbps), 9)
      << fmt("%.0f%%", 100 * x.copy_share) << (x.note.empty() ? "" : "  " + x.note) << "\n";
  }
}

void print_sweep(std::ostream& o, const SweepReport& r) {
  o << "sweep  " << r.case_name << ": " << r.path << " over " << r.points.size() << " values\n";
  const SweepPoint* first = nullptr;
  for (const auto& p : r.points)
    if (p.error.empty()) {
      first = &p;
      break;
    }
  auto value = [](const SweepPoint& p) {
    return p.value.is_string() ? p.value.get<std::string>()
                               : p.value.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  };
  auto backend_cell = [](const SweepBackend& b) {
    return b.status != "ok" ? b.status.substr(0, b.status.find(':'))
                            : (b.device_ms > 0 ? fmt("%.4f", b.device_ms) + " gpu" : fmt("%.2f", b.host_ms) + " host");
  };
  auto comparison_cell = [](const SweepComparison& k) {
    return k.verdict == "SKIP" ? std::string("SKIP (not compared)") : k.verdict + " max abs " + sci(k.max_abs);
  };
  // every column as wide as its widest cell: ids, values and statuses longer than a guess do not run together
  size_t wv = width(0, "value");
  std::vector<size_t> wb, wc;
  if (first) {
    for (const auto& b : first->backends) wb.push_back(width(0, b.backend + " ms"));
    for (const auto& k : first->comparisons) wc.push_back(width(0, k.name));
  }
  for (const auto& p : r.points) {
    wv = width(wv, value(p));
    for (size_t i = 0; i < p.backends.size() && i < wb.size(); ++i) wb[i] = width(wb[i], backend_cell(p.backends[i]));
    for (size_t i = 0; i < p.comparisons.size() && i < wc.size(); ++i) wc[i] = width(wc[i], comparison_cell(p.comparisons[i]));
  }
  o << pad("value", wv) << pad("tile", 6) << pad("chunk", 7) << pad("items", 7) << pad("split", 7);
  if (first) {
    for (size_t i = 0; i < wb.size(); ++i) o << pad(first->backends[i].backend + " ms", wb[i]);
    for (size_t i = 0; i < wc.size(); ++i) o << pad(first->comparisons[i].name, wc[i]);
  }
  o << "\n";
  for (const auto& p : r.points) {
    o << pad(value(p), wv);
    if (!p.error.empty()) {
      o << "invalid: " << p.error << "\n";
      continue;
    }
    o << pad(std::to_string(p.tile), 6) << pad(std::to_string(p.chunk_pages), 7) << pad(std::to_string(p.items), 7)
      << pad(p.split_kv ? "yes" : "no", 7);
    for (size_t i = 0; i < p.backends.size(); ++i) o << pad(backend_cell(p.backends[i]), i < wb.size() ? wb[i] : 0);
    for (size_t i = 0; i < p.comparisons.size(); ++i) o << pad(comparison_cell(p.comparisons[i]), i < wc.size() ? wc[i] : 0);
    o << "\n";
  }
  o << "(times: CUDA events median with --reps N for GPU backends, else the host time of one run)\n";
}

}  // namespace attnscope::cli
