// CUDA-graph capture and replay of cuda.flash (flash_graph.h). cuda.flash's work items are data (each
// carries its rows and key range), so the graph binds buffers, not a plan: items sized for the
// captured grid (the real batch's items, then empty ones), the padded batch's units, masks, page
// table and merge offsets, the split-KV partials sized for the grid. The split flag, the tile and the
// kernel are baked in at capture.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>

#include "attnscope/mask.h"
#include "attnscope/mask_expr.h"
#include "attnscope/workload.h"
#include "flash_graph.h"
#include "flash_params.h"
#include "gpu_timer.h"

namespace attnscope::cuda {

std::string flash_graph_refusal(const CaseSpec& c, const Plan& p, const CudaGraphPad& pad) {
  if (c.mla_absorbed()) return "MLA's absorbed form (its own kernel, flash_mla.cu, is not captured)";
  if (c.fp8_kv()) return "an FP8 KV cache (the padded rows' expectation is not modelled for the FP8 bytes)";
  if (c.attention.local_chunk && !pad.local_unmodelled.empty()) return pad.local_unmodelled;
  if (c.attention.local_chunk && (c.attention.window || c.attention.prefix_lm))
    return "chunked local attention with a window or prefix-LM (the virtual batch's mask is modelled as causal alone)";
  if (p.mask_store) return "a mask_mod or trees (their bit rows are packed per request of the eager batch)";
  if (p.score_mod && !lower_score_mod(*p.score_mod)) return "an interpreted score_mod (its per-request variables)";
  if (c.split.planner == Planner::kFlashAttn)
    return "the flash_attn planner (FlashAttention-2 sizes its grid to the batch; no CUDA-graph grid is modelled)";
  if (p.units.size() != c.requests.size()) return "the plan splits requests into several units";
  for (size_t i = 0; i < p.units.size(); ++i) {
    const WorkUnit& u = p.units[i];
    const GraphPadEntry& e = pad.entries[i];
    if (u.request != static_cast<int>(i) || u.kv_begin != e.chunk_begin || u.q_begin != 0 || u.kv_len != e.seq_len)
      return "the plan's unit " + std::to_string(i) + " is not request " + std::to_string(i) +
             (c.attention.local_chunk ? "'s virtual batch as the padded batch has it" : " whole");
  }
  return "";
}

namespace {

// The padded batch as cuda.flash runs it: entry i is unit i, request i of the padded batch, whole.
struct GraphBatch {
  std::vector<WorkUnit> units;
  std::vector<RowMask> masks;     // host: the plan's for the live entries, a plain one for padding
  std::vector<int64_t> q_indptr;  // [bucket + 1]
  GraphCsr csr;
  SplitPlan sp;
  int64_t part_rows() const { return sp.o_indptr.empty() ? 0 : sp.o_indptr.back(); }
};

// A padded entry's mask: the case's built-in mask on its own lengths (no documents, prefix or bits).
RowMask padding_mask(const Plan& p, const GraphPadEntry& e) {
  RowMask m = p.masks[0];
  m.chunk = 0;  // a virtual batch of chunked local attention: its keys are the chunk's
  m.q_len = e.q_len;
  m.kv_len = e.seq_len;
  m.doc_starts = nullptr;
  m.num_docs = 0;
  m.prefix_len = 0;
  m.pad_start = -1;
  m.bits = nullptr;
  m.bounds = nullptr;
  m.words = 0;
  return m;
}

GraphBatch graph_batch(const CaseSpec& c, const Plan& p, const std::vector<GraphPadEntry>& entries) {
  GraphBatch b;
  b.q_indptr.push_back(0);
  for (size_t i = 0; i < entries.size(); ++i) {
    const GraphPadEntry& e = entries[i];
    b.units.push_back(WorkUnit{static_cast<int>(i), 0, e.q_len, 0, e.seq_len});
    // a live entry keeps the eager run's mask, except a virtual batch of chunked local attention: its
    // keys re-based to the chunk, where its one query sees every key (causal)
    b.masks.push_back(e.padding() || c.attention.local_chunk ? padding_mask(p, e) : p.masks[e.request]);
    b.q_indptr.push_back(b.q_indptr.back() + e.q_len);
  }
  b.csr = graph_csr(entries);
  b.sp = make_split_plan(c, b.units, b.masks);
  b.sp.split_kv = true;  // the graph must serve batches that split, so its merge is always recorded
  return b;
}

template <class T>
DeviceBuffer zeroed(size_t n) {
  DeviceBuffer b(std::max<size_t>(n, 1) * sizeof(T));
  check(cudaMemset(b.as<void>(), 0, b.bytes()), "cudaMemset (graph buffer)");
  return b;
}

template <class T>
void put(const DeviceBuffer& b, const std::vector<T>& v, const char* what) {
  if (v.size() * sizeof(T) > b.bytes()) throw CudaError(std::string("cuda.flash graph: ") + what + " outgrows its buffer");
  if (!v.empty()) check(cudaMemcpy(b.as<void>(), v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice), what);
}

// The buffers the captured graph reads and writes, sized at capture for the bucket and its grid.
struct GraphBuffers {
  DeviceBuffer items, units, tok, chunks, oind, mind, masks, kv_indptr, kv_indices, q_indptr;
  DeviceBuffer q, o, lse, part_o, part_lse, slopes, sink2;
  int capacity_items = 0;
  int64_t capacity_rows = 0;
};

// What an engine's replay does: the batch's metadata into the captured buffers. Live entries' masks
// are the eager workload's device masks (their documents point into its device memory).
void upload(const CaseSpec& c, const GraphBatch& b, const std::vector<GraphPadEntry>& entries, const DeviceWorkload& w,
            GraphBuffers* g) {
  std::vector<WorkItem> items = b.sp.items;
  items.resize(g->capacity_items, WorkItem{});  // empty items (no rows, no keys): padding CTAs that write nothing
  put(g->items, items, "items");
  put(g->units, b.units, "units");
  put(g->tok, std::vector<int64_t>(b.q_indptr.begin(), b.q_indptr.end() - 1), "unit_tok");
  put(g->chunks, b.sp.unit_chunks, "unit_chunks");
  put(g->oind, b.sp.o_indptr, "o_indptr");
  put(g->mind, b.sp.merge_indptr, "merge_indptr");
  put(g->kv_indptr, b.csr.kv_indptr, "kv_indptr");
  put(g->kv_indices, b.csr.kv_indices, "kv_indices");
  put(g->q_indptr, b.q_indptr, "q_indptr");
  put(g->masks, b.masks, "masks");
  for (size_t i = 0; i < entries.size(); ++i)
    if (!entries[i].padding() && !c.attention.local_chunk)
      check(cudaMemcpy(g->masks.as<RowMask>() + i, w.masks.as<RowMask>() + entries[i].request, sizeof(RowMask),
                       cudaMemcpyDeviceToDevice),
            "cudaMemcpy (a live entry's mask)");
  check(cudaDeviceSynchronize(), "graph metadata upload");
}

GraphGrid grid_of(const CaseSpec& c, const CudaGraphPad& pad, const SplitPlan& sp, int items, int64_t part_rows) {
  GraphGrid g;
  g.entries = pad.bucket;
  g.padded_batch = items;
  g.kv_heads = c.num_kv_heads;
  g.new_batch = sp.num_items;
  g.split_kv = sp.split_kv;
  g.cta_tile_q = sp.cta_tile_q;
  g.kv_chunk_tokens = static_cast<int>(sp.chunk_tokens);
  g.float_ws = part_rows * c.num_qo_heads * (c.head_dim_vo + 1) * 4;
  g.int_ws = static_cast<int64_t>(items) * static_cast<int64_t>(sizeof(WorkItem));
  return g;
}

// The real batch's plan against what the capture baked in: its tile and warp split (the kernel), its
// work items within the captured grid, its partials within the captured workspace. The chunk size
// may differ: each item carries its own key range.
GraphCheck flash_fit(const SplitPlan& cap, const SplitPlan& rep, const GraphBuffers& g, int64_t rep_rows) {
  GraphCheck k;
  k.what = "fits the captured grid";
  std::string d;
  auto add = [&](const std::string& s) { d += (d.empty() ? "" : "; ") + s; };
  if (cap.cta_tile_q != rep.cta_tile_q)
    add("cta_tile_q captured " + std::to_string(cap.cta_tile_q) + ", replay plan " + std::to_string(rep.cta_tile_q));
  if (cap.kv_warp_split != rep.kv_warp_split)
    add("kv_warp_split captured " + std::to_string(cap.kv_warp_split) + ", replay plan " + std::to_string(rep.kv_warp_split));
  if (rep.num_items > g.capacity_items)
    add("the real batch needs " + std::to_string(rep.num_items) + " work items, the captured grid has " +
        std::to_string(g.capacity_items) + " CTAs per KV head");
  if (rep_rows > g.capacity_rows)
    add("split-KV partials of " + std::to_string(rep_rows) + " rows, the captured workspace holds " +
        std::to_string(g.capacity_rows));
  k.pass = d.empty();
  k.detail = k.pass ? "replay plan within the captured kernel: " + std::to_string(rep.num_items) + " of " +
                          std::to_string(g.capacity_items) + " CTAs, " + std::to_string(rep_rows) + " of " +
                          std::to_string(g.capacity_rows) + " partial rows, chunk " + std::to_string(rep.chunk_tokens) +
                          " tokens (captured " + std::to_string(cap.chunk_tokens) + ")"
                    : "does not fit: " + d;
  return k;
}

// The padded rows of the replay against what the engine expects (pad.expect), as fi_graph does.
GraphCheck padded_rows(const CaseSpec& c, const DeviceWorkload& w, const CudaGraphPad& pad, const std::vector<float>& o) {
  GraphCheck k;
  k.what = "padded rows";
  const int Hq = c.num_qo_heads, Hk = c.num_kv_heads, D = c.head_dim_vo;
  const int64_t live_rows = static_cast<int64_t>(pad.live) * pad.tokens_per_entry;
  const int64_t rows = static_cast<int64_t>(pad.bucket) * pad.tokens_per_entry;
  if (rows == live_rows) {
    k.pass = true;
    k.detail = "none (the batch fills the bucket)";
    return k;
  }
  std::vector<float> v_key;  // the V rows of the one key a padded SGLang decode entry reads: slot 0 of its first page
  if (pad.expect == CudaGraphPad::PadExpect::kValueOfKey) {
    const int ps = w.view.page_size;
    const size_t page_elems = static_cast<size_t>(ps) * Hk * D, eb = dtype_bytes(c.dtype);
    DeviceBuffer page(page_elems * eb);
    check(cudaMemcpy(page.as<void>(), w.v.as<char>() + static_cast<size_t>(pad.entries[pad.live].pages[0]) * page_elems * eb,
                     page.bytes(), cudaMemcpyDeviceToDevice),
          "cudaMemcpy (the padded entries' V page)");
    const std::vector<float> pv = download_as_float(page, static_cast<int64_t>(page_elems), c.dtype);
    v_key.resize(static_cast<size_t>(Hk) * D);
    for (int h = 0; h < Hk; ++h)
      for (int d = 0; d < D; ++d)
        v_key[h * D + d] =
            c.kv_cache.layout == KvLayout::kNHD ? pv[static_cast<size_t>(h) * D + d] : pv[static_cast<size_t>(h) * ps * D + d];
  }
  int64_t poisoned = 0, wrong = 0, checked = 0;
  for (int64_t t = live_rows; t < rows; ++t)
    for (int h = 0; h < Hq; ++h)
      for (int d = 0; d < D; ++d) {
        const float x = o[(t * Hq + h) * D + d];
        ++checked;
        if (std::isnan(x)) {
          ++poisoned;
          continue;
        }
        if (pad.expect == CudaGraphPad::PadExpect::kZero && x != 0.f) ++wrong;
        if (pad.expect == CudaGraphPad::PadExpect::kValueOfKey && x != v_key[(h / c.group_size()) * D + d]) ++wrong;
      }
  k.pass = poisoned == 0 && wrong == 0;
  k.detail = std::to_string(rows - live_rows) + " rows x " + std::to_string(Hq) + " heads: " +
             (k.pass ? "all as expected (" + pad.expect_text + ")"
                     : std::to_string(poisoned) + " of " + std::to_string(checked) + " elements still poison, " +
                           std::to_string(wrong) + " differ from the expectation (" + pad.expect_text + ")");
  return k;
}

// The buffers for the capture's batch and the real one (the larger page list of the two).
GraphBuffers allocate(const CaseSpec& c, const DeviceWorkload& w, const CudaGraphPad& pad, const GraphBatch& cap,
                      const GraphBatch& rep) {
  GraphBuffers g;
  const int T = cap.sp.cta_tile_q, G = c.group_size();
  g.capacity_items = std::max(cap.sp.padded_items, 1);
  // an item holds at most ceil(T / G) + 1 queries (a tile may start inside a query's G rows)
  g.capacity_rows = static_cast<int64_t>(g.capacity_items) * ((T + G - 1) / G + 1);
  const size_t n = static_cast<size_t>(pad.bucket);
  const int64_t rows = static_cast<int64_t>(pad.bucket) * pad.tokens_per_entry;
  const int Hq = c.num_qo_heads, D = c.head_dim_vo;
  g.items = zeroed<WorkItem>(g.capacity_items);
  g.units = zeroed<WorkUnit>(n);
  g.tok = zeroed<int64_t>(n);
  g.chunks = zeroed<int>(n);
  g.oind = zeroed<int>(n + 1);
  g.mind = zeroed<int>(rows + 1);
  g.masks = zeroed<RowMask>(n);
  g.kv_indptr = zeroed<int>(n + 1);
  g.kv_indices = zeroed<int>(std::max(cap.csr.kv_indices.size(), rep.csr.kv_indices.size()));
  g.q_indptr = zeroed<int64_t>(n + 1);
  const size_t q_row = static_cast<size_t>(Hq) * c.head_dim_qk * dtype_bytes(c.dtype);
  g.q = zeroed<char>(rows * q_row);  // the live rows are the workload's Q in token order; the padded rows zero
  check(cudaMemcpy(g.q.as<void>(), w.q.as<void>(), static_cast<size_t>(w.total_q) * q_row, cudaMemcpyDeviceToDevice),
        "cudaMemcpy (Q into the graph's buffer)");
  g.o = zeroed<char>(rows * Hq * D * dtype_bytes(c.dtype));
  g.lse = zeroed<float>(rows * Hq);
  g.part_o = zeroed<float>(g.capacity_rows * Hq * D);
  g.part_lse = zeroed<float>(g.capacity_rows * Hq);
  std::vector<float> slopes(Hq), sink2;
  for (int h = 0; h < Hq; ++h) slopes[h] = static_cast<float>(alibi_slope(h, Hq));
  for (float x : sink_logits(c)) sink2.push_back(x * static_cast<float>(kLog2e));
  g.slopes = DeviceBuffer::from(slopes);
  if (!sink2.empty()) g.sink2 = DeviceBuffer::from(sink2);
  return g;
}

// The kernel parameters on the graph's buffers, as flash.cu's eager run sets them.
FlashParams graph_params(const CaseSpec& c, const Plan& p, const DeviceWorkload& w, const GraphBuffers& g, int heavy_first) {
  FlashParams fp{};
  fp.view = w.view;
  fp.view.masks = g.masks.as<RowMask>();
  fp.view.kv_indptr = g.kv_indptr.as<int>();
  fp.view.kv_indices = g.kv_indices.as<int>();
  fp.view.q_indptr = g.q_indptr.as<int64_t>();
  fp.view.num_requests = static_cast<int>(g.units.bytes() / sizeof(WorkUnit));
  fp.q = g.q.as<void>();
  fp.k = w.k.as<void>();
  fp.v = w.v.as<void>();
  fp.items = g.items.as<WorkItem>();
  fp.units = g.units.as<WorkUnit>();
  fp.unit_tok = g.tok.as<int64_t>();
  fp.unit_chunks = g.chunks.as<int>();
  fp.o_indptr = g.oind.as<int>();
  fp.slopes = g.slopes.as<float>();
  fp.num_items = g.capacity_items;
  fp.heavy_first = heavy_first;
  fp.hq = c.num_qo_heads;
  fp.hk = c.num_kv_heads;
  fp.group = c.group_size();
  fp.sm_scale = static_cast<float>(c.sm_scale_or_default());
  fp.scale_log2 = fp.sm_scale * static_cast<float>(kLog2e);
  const auto lowered = p.score_mod ? lower_score_mod(*p.score_mod) : std::nullopt;
  fp.soft_cap = static_cast<float>((lowered ? lowered->soft_cap : c.attention.soft_cap).value_or(0.0));
  fp.alibi = (lowered ? lowered->alibi : c.attention.alibi) ? 1 : 0;
  fp.sink2 = g.sink2.bytes() ? g.sink2.as<float>() : nullptr;
  fp.split = 1;
  fp.round_partials = c.split.partials == PartialPrecision::kDtype ? 1 : 0;
  fp.o = g.o.as<void>();
  fp.lse = g.lse.as<float>();
  fp.part_o = g.part_o.as<float>();
  fp.part_lse = g.part_lse.as<float>();
  return fp;
}

}  // namespace

GraphReplayReport flash_capture_replay(const CaseSpec& c, const Plan& p, const CudaGraphPad& pad, const FlashDebugOptions& dbg,
                                       int time_reps) {
  GraphReplayReport r;
  if (auto why = flash_graph_refusal(c, p, pad); !why.empty()) {
    r.not_captured = why;
    return r;
  }
  const GraphBatch cap = graph_batch(c, p, pad.capture), rep = graph_batch(c, p, pad.entries);
  const DeviceWorkload w = make_device_workload(c, p);
  GraphBuffers g = allocate(c, w, pad, cap, rep);
  r.captured_grid = grid_of(c, pad, cap.sp, g.capacity_items, g.capacity_rows);
  r.replay_grid = grid_of(c, pad, rep.sp, std::max(rep.sp.padded_items, 1), rep.part_rows());
  if (rep.sp.cta_tile_q != p.split.cta_tile_q || rep.sp.kv_warp_split != p.split.kv_warp_split)
    r.bits_differ_why = "the replay's tile " + std::to_string(rep.sp.cta_tile_q) + " (bucket rows) is not the eager run's " +
                        std::to_string(p.split.cta_tile_q);
  if (c.attention.local_chunk)
    r.bits_differ_why = "chunked local attention: the virtual batches' keys are re-based to their chunks";
  r.notes.push_back("split kernel and merge captured (split-KV forced: the graph must serve batches that split); " +
                    std::to_string(g.capacity_items - cap.sp.num_items) + " of the captured " + std::to_string(g.capacity_items) +
                    " CTAs per KV head were empty items at capture");

  upload(c, cap, pad.capture, w, &g);
  FlashParams fp = graph_params(c, p, w, g, dbg.heavy_first ? 1 : 0);
  const int T = cap.sp.cta_tile_q, D = c.head_dim_qk;
  const FlashMode mode = flash_mode(fp);
  int warps = 0, warps_n = 0, rb = 0;
  flash_geometry(T, D, cap.sp.kv_warp_split, mode, dbg.rb, &warps, &warps_n, &rb);
  const FlashSm90Launcher sm90 =
      flash_sm90_fits(T, cap.sp.kv_warp_split, D, mode) && dbg.sm90 ? find_flash_sm90_launcher(D, c.dtype) : nullptr;
  const bool hopper = sm90 && device_is_sm90();
  fp.heads_inner = !hopper && warps_n > 1 && dbg.heads_inner ? 1 : 0;
  const FlashLauncher launch = find_flash_launcher(D, c.dtype);
  if (!hopper && !launch) throw CudaError("cuda.flash graph: no kernel for head_dim " + std::to_string(D));
  const unsigned n_x = static_cast<unsigned>(g.capacity_items);
  const dim3 grid =
      fp.heads_inner ? dim3(static_cast<unsigned>(c.num_kv_heads), 1, n_x) : dim3(n_x, 1, static_cast<unsigned>(c.num_kv_heads));
  const dim3 block(hopper ? T * 2 : warps * warps_n * 32);
  const size_t smem = hopper ? flash_sm90_smem_bytes(D, T) : flash_smem_bytes(D, warps, warps_n, rb);
  const int64_t rows = static_cast<int64_t>(pad.bucket) * pad.tokens_per_entry;
  const MergeParams mp{g.mind.as<int>(), g.part_o.as<float>(), g.part_lse.as<float>(), g.o.as<void>(), g.lse.as<float>(), rows,
                       c.num_qo_heads,   c.head_dim_vo};
  cudaStream_t stream = nullptr;
  check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate (capture stream)");
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  auto cleanup = [&] {
    if (exec) cudaGraphExecDestroy(exec);
    if (graph) cudaGraphDestroy(graph);
    cudaStreamDestroy(stream);
  };
  auto record = [&](bool sync) {
    if (hopper)
      sm90(fp, T, grid, stream);
    else
      launch(fp, warps, warps_n, rb, grid, stream);
    check_launch(hopper ? "flash_sm90_kernel (graph)" : "flash_kernel (graph)", grid, block, smem, sync);
    launch_merge(mp, c.dtype, stream);
    check_launch("merge_kernel (graph)", dim3(static_cast<unsigned>((rows * c.num_qo_heads * 32 + 127) / 128)), dim3(128), 0,
                 sync);
  };
  try {
    record(true);  // once uncaptured: the kernels' modules load and their shared-memory attributes are set outside the capture
    check(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal), "cudaStreamBeginCapture");
    try {
      record(false);
    } catch (...) {
      cudaGraph_t bad = nullptr;
      cudaStreamEndCapture(stream, &bad);
      if (bad) cudaGraphDestroy(bad);
      throw;
    }
    check(cudaStreamEndCapture(stream, &graph), "cudaStreamEndCapture");
    check(cudaGraphInstantiate(&exec, graph, 0), "cudaGraphInstantiate");
    r.captured = true;
    r.checks.push_back(flash_fit(cap.sp, rep.sp, g, rep.part_rows()));
    if (!r.checks.back().pass) {  // replaying would read past what was captured: not replayed
      cleanup();
      return r;
    }
    upload(c, rep, pad.entries, w, &g);
    for (DeviceBuffer* b : {&g.o, &g.lse, &g.part_o, &g.part_lse})
      check(cudaMemset(b->as<void>(), 0xff, b->bytes()), "cudaMemset (poison before the replay)");
    check(cudaGraphLaunch(exec, stream), "cudaGraphLaunch");
    check(cudaStreamSynchronize(stream), "graph replay");
  } catch (...) {
    cleanup();
    throw;
  }
  const int Hq = c.num_qo_heads, Dv = c.head_dim_vo;
  const std::vector<float> o = download_as_float(g.o, rows * Hq * Dv, c.dtype);
  const std::vector<float> lse = g.lse.to_host<float>(static_cast<size_t>(rows) * Hq);
  if (time_reps > 0) {  // the same replay again: its outputs are rewritten with the same values
    try {
      r.replay_ms = graph_launch_median_ms(exec, stream, time_reps);
      r.replay_reps = time_reps;
    } catch (...) {
      cleanup();
      throw;
    }
  }
  cleanup();
  const int64_t live_rows = static_cast<int64_t>(pad.live) * pad.tokens_per_entry;
  r.o.assign(o.begin(), o.begin() + live_rows * Hq * Dv);
  r.lse.assign(lse.begin(), lse.begin() + live_rows * Hq);
  r.checks.push_back(padded_rows(c, w, pad, o));
  return r;
}

}  // namespace attnscope::cuda
