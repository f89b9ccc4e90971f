// CUDA-graph capture and replay around flashinfer.decode / flashinfer.prefill (fi_graph.h).
#include <algorithm>
#include <cmath>

#include "attnscope/fp8.h"
#include "attnscope/workload.h"
#include "device_workload.h"
#include "fi_graph.h"
#include "gpu_timer.h"

namespace attnscope::peers::flashinfer {

// A case the caps lift is checked as every capture: the session compares the real rows with the
// eager run (cuda_graph_run.cpp: bit-identical under a fixed split, else the twice_lowp rule).
std::string graph_refusal(const CaseSpec& c, const Plan& p, const CudaGraphPad& pad, GraphCaps caps) {
  if (c.fp8_kv() && !caps.fp8_kv) return "an FP8 KV cache (its scales are applied outside the kernel launch this mode captures)";
  if (c.attention.local_chunk && !pad.local_unmodelled.empty()) return pad.local_unmodelled;
  if (c.attention.alibi && c.has_sinks() && caps.sinks)
    return "attention sinks with ALiBi (the sinks variant's rows hold each sink less its unit's ALiBi origin shift, "
           "fi_sink_rows: per unit of the batch, where the captured graph holds one buffer filled at capture)";
  if (c.attention.alibi && !caps.alibi)
    return "ALiBi (its positions are the units' origins, which the padded batch does not carry)";
  if (c.has_sinks() && !caps.sinks) return "attention sinks (per-unit sink rows)";
  if (choose_mask(c, p) == FiMask::kCustom) return "a custom mask (its bits are packed per unit of the eager batch)";
  if (p.units.size() != c.requests.size()) return "the plan splits requests into several units";
  // each unit is its request whole, or with chunked local attention the entry's virtual batch
  for (size_t i = 0; i < p.units.size(); ++i) {
    const WorkUnit& u = p.units[i];
    const GraphPadEntry& e = pad.entries[i];
    if (u.request != static_cast<int>(i) || u.q_begin != 0 || u.kv_begin != e.chunk_begin || u.kv_len != e.seq_len)
      return "the plan's unit " + std::to_string(i) + " is not request " + std::to_string(i) +
             (c.attention.local_chunk ? "'s virtual batch as the padded batch has it" : " whole");
  }
  return "";
}

FiUnits graph_units(const std::vector<GraphPadEntry>& entries, int page_size) {
  const GraphCsr s = graph_csr(entries);
  FiUnits u;
  u.page_size = page_size;
  u.qo_indptr = s.qo_indptr;
  u.kv_indptr = s.kv_indptr;
  u.kv_indices = s.kv_indices;
  u.kv_last_page_len = s.kv_last_page_len;
  for (const auto& e : entries) {  // the eager units' origins (fi_units) for a live entry; 0 for padding
    u.q_abs_first.push_back(e.position);
    u.kv_begin.push_back(e.chunk_begin);
  }
  u.total_q = s.qo_indptr.back();
  return u;
}

namespace {

template <class T>
cuda::DeviceBuffer sized(size_t n) {
  cuda::DeviceBuffer b(std::max<size_t>(n, 1) * sizeof(T));
  cuda::check(cudaMemset(b.as<void>(), 0, b.bytes()), "cudaMemset (graph metadata)");
  return b;
}

void put(const cuda::DeviceBuffer& b, const std::vector<int>& v, const char* what) {
  if (v.size() * sizeof(int) > b.bytes()) throw cuda::CudaError(std::string("graph metadata ") + what + " outgrows its buffer");
  if (!v.empty()) cuda::check(cudaMemcpy(b.as<void>(), v.data(), v.size() * sizeof(int), cudaMemcpyHostToDevice), what);
}

}  // namespace

GraphIo::GraphIo(const CaseSpec& c, const cuda::DeviceWorkload& w, const CudaGraphPad& pad, const FiUnits& cap,
                 const FiUnits& rep) {
  const size_t n = static_cast<size_t>(pad.bucket);
  du.qo_indptr = sized<int>(n + 1);
  du.kv_indptr = sized<int>(n + 1);
  du.kv_last_page_len = sized<int>(n);
  du.kv_indices = sized<int>(std::max(cap.kv_indices.size(), rep.kv_indices.size()));
  const int64_t rows = static_cast<int64_t>(pad.bucket) * pad.tokens_per_entry;
  const size_t q_row = static_cast<size_t>(c.num_qo_heads) * c.head_dim_qk * dtype_bytes(c.dtype);
  q = sized<char>(rows * q_row);
  // the live rows are the workload's Q in token order; the padded rows stay zero (stale in an engine)
  cuda::check(cudaMemcpy(q.as<void>(), w.q.as<void>(), static_cast<size_t>(w.total_q) * q_row, cudaMemcpyDeviceToDevice),
              "cudaMemcpy (Q into the graph's buffer)");
  out = poisoned_outputs(c, rows);
  cuda::check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate (capture stream)");
}

GraphIo::~GraphIo() {
  if (exec_) cudaGraphExecDestroy(exec_);
  if (graph_) cudaGraphDestroy(graph_);
  if (stream) cudaStreamDestroy(stream);
}

void GraphIo::upload(const FiUnits& u) {
  put(du.qo_indptr, u.qo_indptr, "qo_indptr");
  put(du.kv_indptr, u.kv_indptr, "kv_indptr");
  put(du.kv_indices, u.kv_indices, "kv_indices");
  put(du.kv_last_page_len, u.kv_last_page_len, "kv_last_page_len");
  cuda::check(cudaDeviceSynchronize(), "graph metadata upload");
}

void GraphIo::capture(const std::function<void()>& launch) {
  cuda::check(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal), "cudaStreamBeginCapture");
  try {
    launch();
  } catch (...) {
    cudaGraph_t g = nullptr;
    cudaStreamEndCapture(stream, &g);  // leave the stream usable; the launch's error is the one reported
    if (g) cudaGraphDestroy(g);
    throw;
  }
  cuda::check(cudaStreamEndCapture(stream, &graph_), "cudaStreamEndCapture");
  cuda::check(cudaGraphInstantiate(&exec_, graph_, 0), "cudaGraphInstantiate");
}

void GraphIo::poison() {
  cuda::check(cudaMemset(out.o.as<void>(), 0xff, out.o.bytes()), "cudaMemset (poison O before the replay)");
  cuda::check(cudaMemset(out.lse.as<void>(), 0xff, out.lse.bytes()), "cudaMemset (poison LSE before the replay)");
}

void GraphIo::replay() {
  cuda::check(cudaGraphLaunch(exec_, stream), "cudaGraphLaunch");
  cuda::check(cudaStreamSynchronize(stream), "graph replay");
}

double GraphIo::replay_median_ms(int n) { return cuda::graph_launch_median_ms(exec_, stream, n); }

GraphCheck fit_check(const GraphGrid& cap, const GraphGrid& rep, bool same_offsets) {
  GraphCheck k;
  k.what = "fits the captured grid";
  std::string d;
  auto differs = [&](const std::string& what, int64_t a, int64_t b) {
    if (a != b) d += (d.empty() ? "" : "; ") + what + " captured " + std::to_string(a) + ", replay plan " + std::to_string(b);
  };
  differs("padded_batch_size", cap.padded_batch, rep.padded_batch);
  differs("split_kv", cap.split_kv, rep.split_kv);
  differs("cta_tile_q", cap.cta_tile_q, rep.cta_tile_q);
  if (rep.new_batch > cap.padded_batch)
    d += (d.empty() ? "" : "; ") + std::string("the real batch needs ") + std::to_string(rep.new_batch) +
         " CTAs, the captured grid has " + std::to_string(cap.padded_batch);
  if (rep.float_ws > cap.float_ws || rep.int_ws > cap.int_ws)
    d += (d.empty() ? "" : "; ") + std::string("workspace ") + std::to_string(rep.float_ws) + " + " + std::to_string(rep.int_ws) +
         " bytes, captured " + std::to_string(cap.float_ws) + " + " + std::to_string(cap.int_ws);
  if (!same_offsets && d.empty()) d = "the plan's workspace offsets moved (the captured launch reads the old ones)";
  k.pass = d.empty();
  k.detail = k.pass ? "replay plan = captured plan: " + graph_grid_text(rep) : "does not fit: " + d;
  return k;
}

namespace {

// The V row [kv_heads x d] of slot 0 of `page` as the kernel reads it: the dtype pool, or an FP8 cache's
// stored bytes (v8) dequantised without scale (exact in the dtype; v_scale is applied on the output).
std::vector<float> v_row_of_slot0(const CaseSpec& c, const cuda::DeviceWorkload& w, int page, int ps) {
  const int Hk = c.num_kv_heads, D = c.head_dim_vo;
  const bool fp8 = c.fp8_kv();
  const size_t eb = fp8 ? 1 : dtype_bytes(c.dtype), page_elems = static_cast<size_t>(ps) * Hk * D;
  const cuda::DeviceBuffer& pool = fp8 ? w.v8 : w.v;
  std::vector<float> pv(page_elems);
  if (fp8) {
    std::vector<uint8_t> bytes(page_elems);
    cuda::check(
        cudaMemcpy(bytes.data(), pool.as<char>() + static_cast<size_t>(page) * page_elems, page_elems, cudaMemcpyDeviceToHost),
        "cudaMemcpy (the padded entries' FP8 V page)");
    for (size_t i = 0; i < page_elems; ++i) pv[i] = fp8_bits_to_f32(*c.kv_cache.fp8, bytes[i]);
  } else {
    cuda::DeviceBuffer buf(page_elems * eb);
    cuda::check(cudaMemcpy(buf.as<void>(), pool.as<char>() + static_cast<size_t>(page) * page_elems * eb, buf.bytes(),
                           cudaMemcpyDeviceToDevice),
                "cudaMemcpy (the padded entries' V page)");
    pv = cuda::download_as_float(buf, static_cast<int64_t>(page_elems), c.dtype);
  }
  std::vector<float> v(static_cast<size_t>(Hk) * D);
  for (int h = 0; h < Hk; ++h)
    for (int d = 0; d < D; ++d)
      v[static_cast<size_t>(h) * D + d] = c.kv_cache.layout == KvLayout::kNHD ? pv[static_cast<size_t>(h) * D + d]
                                                                              : pv[(static_cast<size_t>(h) * ps + 0) * D + d];
  return v;
}

}  // namespace

void graph_outputs(const CaseSpec& c, const cuda::DeviceWorkload& w, const CudaGraphPad& pad, const FiUnits& rep,
                   const GraphIo& io, GraphReplayReport* r) {
  Result all;
  download_outputs(c, rep, alibi_slopes(c), io.out, &all);  // rep's origins: the live rows' LSE as the eager run's
  const int Hq = c.num_qo_heads, D = c.head_dim_vo;
  const int64_t live_rows = static_cast<int64_t>(pad.live) * pad.tokens_per_entry;
  r->o.assign(all.o.begin(), all.o.begin() + live_rows * Hq * D);
  r->lse.assign(all.lse.begin(), all.lse.begin() + live_rows * Hq);
  GraphCheck k;
  k.what = "padded rows";
  const int64_t rows = static_cast<int64_t>(pad.bucket) * pad.tokens_per_entry;
  if (rows == live_rows) {
    k.pass = true;
    k.detail = "none (the batch fills the bucket)";
    r->checks.push_back(k);
    return;
  }
  // a padded SGLang decode entry reads one key (slot 0 of its first page) with a zero Q row: its O is
  // that key's V, weighed against the sink where the prefill's sinks variant adds one (SGLang drops
  // the row, kAnything; FlashInfer's value is still determined, so it is checked)
  const GraphPadEntry& e = pad.entries[pad.live];
  const bool sink_key = c.has_sinks() && pad.expect == CudaGraphPad::PadExpect::kAnything && pad.tokens_per_entry == 1 &&
                        e.seq_len == 1 && !e.pages.empty();
  const bool one_key = pad.expect == CudaGraphPad::PadExpect::kValueOfKey || sink_key;
  std::vector<float> want;
  std::string expect_text = pad.expect_text;
  if (one_key) {
    const Fp8KvScales sc = fp8_kv_scales(c, w);
    want = pad_one_key_row(v_row_of_slot0(c, w, e.pages[0], rep.page_size), Hq, c.num_kv_heads, D, c.dtype,
                           sink_key ? sink_logits(c) : std::vector<float>{}, static_cast<float>(sc.v));
    if (sink_key) expect_text += "; FlashInfer's value checked: V / (1 + e^sink) (zero Q row: the key's logit is 0)";
    if (c.fp8_kv()) expect_text += "; V from the FP8 bytes, times v_scale " + std::to_string(sc.v);
  }
  int64_t poisoned = 0, wrong = 0, checked = 0;
  for (int64_t t = live_rows; t < rows; ++t)
    for (int h = 0; h < Hq; ++h)
      for (int d = 0; d < D; ++d) {
        const float o = all.o[(t * Hq + h) * D + d];
        ++checked;
        if (std::isnan(o)) {
          ++poisoned;
          continue;
        }
        if (pad.expect == CudaGraphPad::PadExpect::kZero && o != 0.f) ++wrong;
        if (one_key) {
          const float x = want[static_cast<size_t>(h) * D + d];
          if (sink_key ? !(std::fabs(o - x) <= pad_row_tolerance(c.dtype, x)) : o != x) ++wrong;
        }
      }
  k.pass = poisoned == 0 && wrong == 0;
  k.detail = std::to_string(rows - live_rows) + " rows x " + std::to_string(Hq) + " heads: " +
             (k.pass ? std::string("all as expected (") + expect_text + ")"
                     : std::to_string(poisoned) + " of " + std::to_string(checked) + " elements still poison, " +
                           std::to_string(wrong) + " differ from the expectation (" + expect_text + ")");
  r->checks.push_back(k);
}

GraphCheck refused_fit(const GraphGrid& cap, const GraphGrid& want, const std::string& planner_refuses) {
  GraphCheck k = fit_check(cap, want, true);
  k.pass = false;
  k.detail = (k.detail.rfind("does not fit", 0) == 0 ? k.detail + "; " : std::string("does not fit: ")) + planner_refuses;
  return k;
}

void replay_and_check(const CaseSpec& c, const cuda::DeviceWorkload& w, const CudaGraphPad& pad, const FiUnits& rep, GraphIo& io,
                      int time_reps, GraphReplayReport* r) {
  io.poison();
  io.replay();
  graph_outputs(c, w, pad, rep, io, r);
  if (time_reps > 0) {
    r->replay_ms = io.replay_median_ms(time_reps);
    r->replay_reps = time_reps;
  }
}

}  // namespace attnscope::peers::flashinfer
