// A python:PATH.py:FUNCTION backend: the case's inputs, as the other backends see them, handed to the
// user's function in the shared worker (worker_client.h); what it returns checked against the contract
// (docs/python-backends.md) and made a Result, every failure a status with its reason.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <mutex>

#include "attnscope/engine_metadata.h"
#include "attnscope/fa3_plan.h"
#include "attnscope/library_plan.h"
#include "attnscope/mask.h"
#include "attnscope/mask_expr.h"
#include "attnscope/registry.h"
#include "gpu_handoff.h"
#include "python_family.h"
#include "worker_client.h"

namespace attnscope::python {
namespace {

// The worker cuts a long exception text itself (worker.py, short_traceback); this bounds what any
// reply can put in a report, keeping both ends (the file:line is at the end).
std::string bounded(const std::string& s) {
  constexpr size_t kHead = 3000, kTail = 1000;
  if (s.size() <= kHead + kTail + 64) return s;
  auto boundary = [&](size_t i) {  // back to the start of a UTF-8 character
    while (i > 0 && (static_cast<unsigned char>(s[i]) & 0xc0) == 0x80) --i;
    return i;
  };
  const size_t head = boundary(kHead), tail = boundary(s.size() - kTail);
  return s.substr(0, head) + " ... [" + std::to_string(tail - head) + " bytes cut] ... " + s.substr(tail);
}

struct Arrays {
  std::vector<std::vector<int>> ints;  // owned int32 metadata, kept alive for the call
  std::vector<Buffer> list;
  void f32(const std::string& name, const std::vector<float>& v, std::vector<int64_t> shape) {
    list.push_back({name, "f32", std::move(shape), v.data(), v.size() * sizeof(float)});
  }
  void i32(const std::string& name, std::vector<int> v, std::vector<int64_t> shape) {
    ints.push_back(std::move(v));
    list.push_back({name, "i32", std::move(shape), ints.back().data(), ints.back().size() * sizeof(int)});
  }
};

}  // namespace

nlohmann::json expression_meta(const CaseSpec& c) {
  nlohmann::json m = nlohmann::json::object();
  const auto& at = c.attention;
  if (at.mask_mod) {
    m["mask_mod"] = expr_to_torch(Expr::parse(*at.mask_mod, Expr::Kind::kMask));
    m["mask_mod_text"] = *at.mask_mod;
    std::vector<int> prefix;
    std::vector<std::vector<int>> docs;
    for (const auto& r : c.requests) {
      prefix.push_back(r.prefix_len.value_or(0));
      docs.push_back(r.doc_starts);
    }
    m["prefix_lens"] = prefix;
    m["doc_starts"] = docs;
  }
  if (at.alibi) {
    std::vector<double> slopes;
    for (int h = 0; h < c.num_qo_heads; ++h) slopes.push_back(alibi_slope(h, c.num_qo_heads));
    m["alibi_slopes"] = slopes;
  }
  return m;
}

namespace {

// The batch metadata in the forms engines use (vLLM / FlashAttention, FlashInfer) and the scalars.
nlohmann::json metadata(const CaseSpec& c, const Plan& p, Arrays* a) {
  const PageTable& pt = p.pages;
  const int B = static_cast<int>(c.requests.size());
  const bool ragged = c.kv_cache.storage == KvStorage::kRagged;
  std::vector<int> cu_q(B + 1, 0), cu_k(B + 1, 0), seqlens(B), lo(c.total_q()), hi(c.total_q()), q_abs(c.total_q());
  int max_q = 0, max_k = 0, width = 0;
  for (int r = 0; r < B; ++r) {
    cu_q[r + 1] = cu_q[r] + c.requests[r].q_len;
    seqlens[r] = c.requests[r].kv_len;
    cu_k[r + 1] = cu_k[r] + seqlens[r];
    max_q = std::max(max_q, c.requests[r].q_len);
    max_k = std::max(max_k, seqlens[r]);
    width = std::max(width, pt.pages_of(r));
    const RowMask& m = p.masks[r];
    for (int q = 0; q < c.requests[r].q_len; ++q) {
      q_abs[cu_q[r] + q] = q_abs_of(m, q);
      visible_range(m, q_abs[cu_q[r] + q], &lo[cu_q[r] + q], &hi[cu_q[r] + q]);
    }
  }
  if (c.kv_cache.max_num_blocks_per_seq) width = std::max(width, *c.kv_cache.max_num_blocks_per_seq);
  // vLLM's block table: each request's pages, the rest of the row 0 (never read by a correct kernel)
  std::vector<int> table(static_cast<size_t>(B) * width, 0);
  for (int r = 0; r < B; ++r)
    for (int i = 0; i < pt.pages_of(r); ++i) table[static_cast<size_t>(r) * width + i] = pt.indices[pt.indptr[r] + i];
  const int64_t tq = c.total_q();
  a->i32("cu_seqlens_q", cu_q, {B + 1});
  a->i32("cu_seqlens_k", cu_k, {B + 1});
  a->i32("cache_seqlens", seqlens, {B});
  a->i32("block_table", table, {B, width});
  a->i32("kv_indptr", pt.indptr, {B + 1});
  a->i32("kv_indices", pt.indices, {static_cast<int64_t>(pt.indices.size())});
  a->i32("kv_last_page_len", pt.last_page_len, {B});
  a->i32("mask_lo", lo, {tq});
  a->i32("mask_hi", hi, {tq});
  a->i32("q_abs", q_abs, {tq});
  const auto& at = c.attention;
  nlohmann::json meta = {{"dtype", dtype_name(c.dtype)},
                         {"num_requests", B},
                         {"total_q", tq},
                         {"total_kv", c.total_kv()},
                         {"num_qo_heads", c.num_qo_heads},
                         {"num_kv_heads", c.num_kv_heads},
                         {"head_dim_qk", c.head_dim_qk},
                         {"head_dim_vo", c.head_dim_vo},
                         {"storage", ragged ? "ragged" : "paged"},
                         {"layout", c.kv_cache.layout == KvLayout::kNHD ? "NHD" : "HND"},
                         {"page_size", pt.page_size},
                         {"num_pages", pt.num_pages},
                         {"max_seqlen_q", max_q},
                         {"max_seqlen_k", max_k},
                         {"sm_scale", c.scale()},
                         {"causal", at.causal},
                         {"window_left", at.window ? *at.window - 1 : -1},
                         {"soft_cap", at.soft_cap.value_or(0.0)},
                         {"local_chunk", at.local_chunk.value_or(0)}};
  meta.update(expression_meta(c));
  return meta;
}

// The count and first place of NaN or infinite values of O or LSE (-inf is LSE's fully masked row),
// "" when none. `per_token`: values per query token.
std::string non_finite(const std::vector<float>& v, const char* name, int64_t per_token, int heads, bool lse) {
  int64_t n = 0, first = -1;
  for (size_t i = 0; i < v.size(); ++i) {
    if (!(std::isnan(v[i]) || (std::isinf(v[i]) && !(lse && v[i] < 0)))) continue;
    if (first < 0) first = static_cast<int64_t>(i);
    ++n;
  }
  if (first < 0) return "";
  const int64_t t = first / per_token, head = (first % per_token) / (per_token / heads);
  return std::string(name) + " has " + std::to_string(n) + (lse ? " NaN or +inf" : " NaN or infinite") +
         " value(s), the first at token " + std::to_string(t) + ", head " + std::to_string(head);
}

// Why FA3 as the fa3-fwd 0.0.3 wheel built it cannot take the case ("" when it can): what the build
// compiled out named by its flag (fa3_fwd_config.CONFIG), else FA3's own rule (hopper/flash_api.cpp
// mha_fwd's checks). The one list: the worker trusts it (worker_fa3.py checks only the rows' key ranges).
std::string fa3_refusal(const CaseSpec& c) {
  const std::string out = "python.fa3: compiled out of fa3-fwd: FLASHATTENTION_DISABLE_";
  const auto& at = c.attention;
  if (c.dtype == DType::kFp16) return out + "FP16 (/dtype fp16; this build runs bf16 and FP8 e4m3)";
  if (c.dtype != DType::kBf16) return "python.fa3: FA3 takes bf16 or FP8 e4m3 (/dtype is fp32)";
  if (at.window) return out + "LOCAL (/attention/window: a sliding window is FA3's local attention)";
  if (at.local_chunk) return out + "LOCAL (/attention/local_chunk: FA3's attention_chunk is local attention)";
  if (at.alibi) return "python.fa3: FA3 has no ALiBi (/attention/alibi); python.flex_attention runs it";
  bool other = at.prefix_lm;
  for (const auto& r : c.requests) other = other || !r.doc_starts.empty();
  if (other) return "python.fa3: FA3 takes a causal mask (bottom-right) or none, with padding; not prefix-LM or documents";
  if (c.fp8_kv()) {
    if (*c.kv_cache.fp8 != Fp8Format::kE4M3) return "python.fa3: FA3 takes FP8 e4m3 only (/kv_cache/dtype is fp8_e5m2)";
    if (c.kv_cache.scales.granularity == ScaleGranularity::kToken)
      return "python.fa3: FA3's descale factors are per (request, KV head); per-token scales (/kv_cache/scales/granularity "
             "token) have no form there";
    if (!c.fp8_attention)
      return "python.fa3: FA3 runs FP8 with Q, K and V all e4m3: an FP8 KV cache needs /fp8_attention (Q in FP8)";
  }
  const int d = c.head_dim_qk, dv = c.head_dim_vo, align = c.fp8_kv() ? 16 : 8;
  if (d > 256 || d % align || dv % align)
    return "python.fa3: FA3 takes head dims up to 256 in multiples of " + std::to_string(align) +
           " (this case: " + std::to_string(d) + " / " + std::to_string(dv) + ")";
  if (dv != d && !((d > 128 && d <= 192 && dv > 96 && dv <= 128) || (d <= 64 && dv <= 512)))
    return "python.fa3: FA3 takes a V head dim unlike Q/K's only for Q/K in (128, 192] with V in (96, 128], or Q/K <= 64 "
           "with V <= 512 (this case: " +
           std::to_string(d) + " / " + std::to_string(dv) + ")";
  return "";
}

// Why the engine's sparse MLA kernel cannot take the case ("" when it can), for python.sgl_dsa and
// python.vllm_dsa (worker_dsa.py); the registry has already refused what is not absorbed MLA. The
// kernel is FlashMLA's flash_mla_sparse_fwd over a bf16 pool of 576-dim latent rows; both engines run
// it with 64-token pages (docs/dsa.md section 6).
std::string dsa_refusal(const CaseSpec& c, const std::string& id) {
  const bool sgl = id == "python.sgl_dsa";
  if (!c.is_sparse())
    return id + " runs DeepSeek sparse attention only (/sparse): the engine's sparse kernel reads an index list";
  if (c.dtype != DType::kBf16) return id + ": FlashMLA's sparse kernel takes bf16 (/dtype is " + dtype_name(c.dtype) + ")";
  if (c.head_dim_qk != 576 || c.head_dim_vo != 512)
    return id + ": FlashMLA's sparse kernel takes DeepSeek-V3.2's latent rows, head dims 576 / 512 (this case: " +
           std::to_string(c.head_dim_qk) + " / " + std::to_string(c.head_dim_vo) + ")";
  if (c.kv_cache.storage == KvStorage::kRagged || c.kv_cache.layout != KvLayout::kNHD)
    return id + ": the engine's sparse kernel reads a paged NHD pool (/kv_cache)";
  if (c.kv_cache.page_size != 64)
    return id + ": " + (sgl ? "SGLang's nsa backend runs 64-token pages" : "FLASHMLA_SPARSE takes 64-token blocks only") +
           " (/kv_cache/page_size is " + std::to_string(c.kv_cache.page_size) + ")";
  if (sgl && c.sparse->top_k != 2048)
    return id + ": SGLang's top-k and index transform kernels are built for top_k 2048 (/sparse/top_k is " +
           std::to_string(c.sparse->top_k) + ")";
  const int h = c.num_qo_heads;
  if (sgl && h % 64 != 0 && 64 % h != 0)
    return id + ": SGLang's _forward_flashmla_sparse pads the query heads to 64 (Hopper) or 128 and asserts that " +
           std::to_string(h) + " divides it";
  if (c.attention.soft_cap) return id + ": FlashMLA's sparse kernel takes no soft-cap (/attention/soft_cap)";
  if (c.attention.alibi) return id + ": FlashMLA's sparse kernel takes no ALiBi (/attention/alibi)";
  return "";
}

// The DSA engine's index buffer for the worker in the case's request order (vLLM's view lists the rows
// in its reordered batch): dsa_indices [total_q, top_k] slots and, for vLLM, dsa_topk_length [total_q].
void dsa_arrays(const CaseSpec& c, const Plan& p, bool sgl, Arrays* a) {
  const EngineView v = engine_metadata(sgl ? Engine::kSglangNsa : Engine::kVllmFlashMlaSparse, c, p);
  if (v.refusal) throw WorkerFailure("the engine's index buffer: " + *v.refusal);
  const EngineTensor* t = v.find(sgl ? "page_table_1.transformed" : "topk_indices");
  const EngineTensor* len = sgl ? nullptr : v.find("topk_length");
  const int64_t K = c.sparse->top_k, n = static_cast<int64_t>(c.requests.size());
  std::vector<int64_t> first(n, 0);  // the first view row of each case request
  int64_t row = 0;
  for (int64_t b = 0; b < n; ++b) {
    const int r = v.request_order.empty() ? static_cast<int>(b) : v.request_order[b];
    first[r] = row;
    row += c.requests[r].q_len;
  }
  std::vector<int> idx, lengths;
  for (int64_t r = 0; r < n; ++r)
    for (int64_t q = 0; q < c.requests[r].q_len; ++q) {
      for (int64_t j = 0; j < K; ++j) idx.push_back(static_cast<int>(t->values[(first[r] + q) * K + j]));
      if (len) lengths.push_back(static_cast<int>(len->values[first[r] + q]));
    }
  a->i32("dsa_indices", idx, {c.total_q(), K});
  if (len) a->i32("dsa_topk_length", lengths, {c.total_q()});
}

// FA3's own plan as the worker read it back (worker_fa3.py), beside attnscope's model of it for the
// device's SM count, as the Result's text.
std::string fa3_plan_lines(const CaseSpec& c, const nlohmann::json& j) {
  Fa3OwnPlan own;
  own.available = j.is_object();
  own.why = "the worker returned no plan";
  if (own.available) {
    own.num_sms = j.value("num_sms", 0);
    own.device = j.value("device", std::string("the device")) + ", " + std::to_string(own.num_sms) + " SMs";
    own.num_splits = j.value("num_splits", 1);
    own.request_splits = j.value("request_splits", std::vector<int>{});
    own.request_m_blocks = j.value("request_m_blocks", std::vector<int>{});
    own.metadata = j.value("metadata", std::vector<int>{});
    own.metadata_size = j.value("metadata_size", 0);
  }
  const Fa3PlanModel m = model_fa3_plan(fa3_plan_inputs(c, own.num_sms > 0 ? own.num_sms : c.split.num_sms));
  std::string s = fa3_plan_text(m, &own);
  if (own.available) {
    const auto diffs = compare_fa3_plan(m, own);
    s += diffs.empty() ? "  FA3 agrees with the model on every field read back\n"
                       : "  FA3 differs from the model in " + std::to_string(diffs.size()) + " field(s)\n";
    if (j.contains("metadata_error"))
      s += "  get_scheduler_metadata failed: " + j.value("metadata_error", std::string()) + "\n";
    else
      s +=
          "  scheduler metadata (" + std::to_string(own.metadata_size) + " int32): " + nlohmann::json(own.metadata).dump() + "\n";
  }
  return s;
}

class PythonBackend final : public Backend {
 public:
  // file empty: fn is one of the worker's named adapters (python.sdpa's "sdpa")
  PythonBackend(std::string id, std::string file, std::string fn)
      : id_(std::move(id)), file_(std::move(file)), fn_(std::move(fn)) {}
  std::string id() const override { return id_; }
  std::string describe() const override {
    return file_.empty() ? "attnscope's " + fn_ + " adapter in its Python worker"
                         : "the function " + fn_ + " in " + file_ + ", run by attnscope's Python worker";
  }
  std::string check(const CaseSpec& c) const override {
    if (fn_ == "fa3") return fa3_refusal(c);
    if (fn_ == "sgl_dsa" || fn_ == "vllm_dsa") return dsa_refusal(c, id_);
    if (c.attention.alibi && fn_ != "flex_attention")
      return id_ + " is not handed ALiBi slopes (docs/python-backends.md); python.flex_attention runs ALiBi";
    if (!file_.empty()) return "";
    if (fn_.rfind("sdpa", 0) == 0 && c.attention.soft_cap)
      return id_ + ": PyTorch's SDPA has no soft-cap (/attention/soft_cap); python.flex_attention runs it";
    if (fn_ == "sgl_fa3" || fn_ == "vllm_fa") {
      if (c.dtype == DType::kFp32) return id_ + ": FlashAttention takes fp16 / bf16 (/dtype is fp32)";
      if (c.kv_cache.storage == KvStorage::kRagged || c.kv_cache.layout != KvLayout::kNHD)
        return id_ + ": the engine's kernel reads a paged NHD cache (/kv_cache)";
    }
    return "";
  }
  Result run(const CaseSpec& c, const Plan& p, const Workload& w_in, const RunOptions& opt) override;

 private:
  std::string id_, file_, fn_;
};

// Whether the running worker takes the GPU path (PyTorch with CUDA importable there): asked once per
// worker process, under the worker's lock. `why` says why not.
bool worker_takes_gpu(double timeout_s, const std::atomic<bool>* cancel, std::string* why) {
  static const std::string no_gpu = gpu_handoff_unavailable();
  static pid_t probed = -1;
  static bool ok = false;
  static std::string reason;
  if (!no_gpu.empty()) {
    *why = no_gpu;
    return false;
  }
  Worker& wk = shared_worker();
  if (probed < 0 || probed != wk.pid()) {
    const Reply rep = wk.call({{"op", "probe"}}, {}, timeout_s, cancel);
    probed = wk.pid();
    ok = rep.header.value("cuda", false);
    reason = rep.header.value("why", rep.header.value("message", ""));
  }
  *why = reason;
  return ok;
}

// The reply's timing as the Result's note (and Timing under bench): the function's time with the
// timer the worker used, and the fixed cost around it.
void note_timing(const Reply& rep, bool gpu, const RunOptions& opt, Result* r) {
  std::vector<double> ms;
  for (const auto& x : rep.header.value("call_ms", nlohmann::json::array())) ms.push_back(x.get<double>());
  double sum = 0;
  for (double x : ms) sum += x;
  std::sort(ms.begin(), ms.end());
  const bool events = rep.header.value("timer", "") == "cuda_events";
  const double setup = rep.header.value("setup_ms", 0.0), worker = rep.header.value("worker_overhead_ms", 0.0);
  const double overhead = rep.round_trip_ms - (gpu ? rep.header.value("call_wall_ms", 0.0) + setup : sum);
  char buf[320];
  std::snprintf(buf, sizeof buf, "%s %.3f ms per call%s; hand-off %.3f ms (worker side %.3f ms)",
                events ? "CUDA events"
                : gpu  ? "host time (a NumPy function on the GPU path)"
                       : "CPU time (time.perf_counter)",
                ms.empty() ? 0.0 : ms[ms.size() / 2], gpu ? ", inputs through CUDA IPC" : "", overhead, worker);
  r->message = buf;
  r->timing.overhead_ms = overhead;
  if (setup > 0) {
    std::snprintf(buf, sizeof buf, "; adapter set-up %.3f ms", setup);
    r->message += buf;
  }
  if (const auto ipc = rep.header.find("ipc"); ipc != rep.header.end() && ipc->is_object()) {
    // the worker's IPC mappings this call: reused from an earlier call of the same allocations, or opened
    std::snprintf(buf, sizeof buf, "; IPC mappings %d reused, %d opened", ipc->value("reused", 0), ipc->value("opened", 0));
    r->message += buf;
  }
  if (opt.bench_reps > 0 && !ms.empty()) {
    r->timing.device_ms = ms[ms.size() / 2];
    r->timing.device_ms_min = ms.front();
    r->timing.device_ms_max = ms.back();
    r->timing.reps = static_cast<int>(ms.size());
  }
}

Result PythonBackend::run(const CaseSpec& c, const Plan& p, const Workload& w_in, const RunOptions& opt) {
  Result r;
  r.backend = id_;
  Arrays a;
  nlohmann::json h;
  h["op"] = "call";
  h["file"] = file_.empty() ? "attnscope's adapters" : file_;
  h["function"] = fn_;
  if (file_.empty()) h["adapter"] = fn_;
  h["reps"] = std::max(1, opt.bench_reps);
  h["meta"] = metadata(c, p, &a);
  if (fn_ == "fa3") h["meta"]["fa3_num_splits"] = fa3_plan_inputs(c, c.split.num_sms).num_splits_arg;
  if (file_.empty() && (fn_ == "sgl_dsa" || fn_ == "vllm_dsa")) {
    try {
      dsa_arrays(c, p, fn_ == "sgl_dsa", &a);
    } catch (const WorkerFailure& e) {
      r.status = Status::kError;
      r.message = e.what();
      return r;
    }
  }
  const int64_t tq = c.total_q(), kvh = c.num_kv_heads;
  Reply rep;
  bool gpu = false;
  bool downloaded = false;
  Workload own;  // the NumPy path's host inputs when the caller gave none (bench, as to a GPU backend)
  {
    std::lock_guard<std::mutex> l(shared_worker_mutex());
    try {
      std::string why;
      gpu = worker_takes_gpu(user_code_timeout(), opt.cancel, &why);
      if (gpu) {
        std::vector<IntArray> meta;
        for (const auto& b : a.list) meta.push_back({b.name, static_cast<const int*>(b.data), b.bytes / sizeof(int), b.shape});
        GpuHandoff* dev = nullptr;
        try {
          dev = &gpu_handoff_for(c, p, meta);
        } catch (const std::runtime_error& e) {
          throw WorkerFailure(std::string("the GPU hand-off: ") + e.what());
        }
        h["cuda"] = dev->header();
        h["warmup"] = opt.bench_reps > 0 ? 2 : 0;  // a compiled adapter may compile again on its second call
        rep = shared_worker().call(h, {}, user_code_timeout(), opt.cancel);
        // read back under the lock: the next call refills the same allocations
        if (rep.header.value("status", "") == "ok") {
          try {
            dev->download(rep.header.value("lse", false), &r.o, &r.lse);
            downloaded = true;
          } catch (const std::runtime_error& e) {
            r.status = Status::kError;
            r.message = std::string("reading O back from the device: ") + e.what();
            return r;
          }
        }
      } else {
        const Workload* w = &w_in;
        if (w_in.q.empty()) {
          own = make_workload(c, p.pages);
          w = &own;
        }
        const bool ragged = c.kv_cache.storage == KvStorage::kRagged;
        const bool nhd = c.kv_cache.layout == KvLayout::kNHD;
        const int64_t np = p.pages.num_pages, ps = p.pages.page_size;
        auto pool = [&](int d) -> std::vector<int64_t> {
          if (ragged) return {np * ps, kvh, d};
          return nhd ? std::vector<int64_t>{np, ps, kvh, d} : std::vector<int64_t>{np, kvh, ps, d};
        };
        a.f32("q", w->q, {tq, c.num_qo_heads, c.head_dim_qk});
        a.f32("k_cache", w->k_pool, pool(c.head_dim_qk));
        a.f32("v_cache", w->v_pool, pool(c.head_dim_vo));
        rep = shared_worker().call(h, a.list, user_code_timeout(), opt.cancel);
      }
    } catch (const WorkerCancelled& e) {
      r.status = Status::kCancelled;
      r.message = e.what();
      return r;
    } catch (const WorkerFailure& e) {
      r.status = Status::kError;
      r.message = e.what();
      return r;
    }
  }
  if (rep.header.value("status", "") != "ok") {
    const std::string kind = rep.header.value("kind", "");
    r.status = kind == "unavailable" ? Status::kUnsupported : Status::kError;  // a library missing here
    r.message = (kind == "exception"  ? "Python exception: "
                 : kind == "contract" ? "contract: "
                                      : "") +
                bounded(rep.header.value("message", "the worker gave no reason"));
    return r;
  }
  const size_t want_o = static_cast<size_t>(tq) * c.num_qo_heads * c.head_dim_vo * 4;
  if (gpu) {
    if (!downloaded) {
      r.status = Status::kError;
      r.message = "O was not read back from the device";
      return r;
    }
  } else {
    if (rep.buffers.empty() || rep.buffers[0].size() != want_o) {
      r.status = Status::kError;
      r.message = "the Python worker returned an O of the wrong size";
      return r;
    }
    r.o.resize(want_o / 4);
    std::memcpy(r.o.data(), rep.buffers[0].data(), want_o);
    if (rep.buffers.size() > 1 && rep.buffers[1].size() == static_cast<size_t>(tq) * c.num_qo_heads * 4) {
      r.lse.resize(rep.buffers[1].size() / 4);
      std::memcpy(r.lse.data(), rep.buffers[1].data(), rep.buffers[1].size());
    }
  }
  std::string bad = non_finite(r.o, "O", int64_t{c.num_qo_heads} * c.head_dim_vo, c.num_qo_heads, false);
  if (bad.empty()) bad = non_finite(r.lse, "LSE", c.num_qo_heads, c.num_qo_heads, true);
  if (!bad.empty()) {
    r.status = Status::kError;
    r.message = bad;
    r.o.clear();
    r.lse.clear();
    return r;
  }
  for (float& x : r.o) x = round_to(c.dtype, x);  // O in the case dtype, as every backend returns it
  if (const auto bm = rep.header.find("block_mask"); bm != rep.header.end() && bm->is_object()) r.block_mask = bm->dump();
  if (const auto fp = rep.header.find("fa3_plan"); fp != rep.header.end()) r.library_plan = fa3_plan_lines(c, *fp);
  note_timing(rep, gpu, opt, &r);
  return r;
}

}  // namespace

std::unique_ptr<Backend> make_python_backend(const std::string& id, const std::string& file, const std::string& fn) {
  return std::make_unique<PythonBackend>(id, file, fn);
}

}  // namespace attnscope::python
