// A python:PATH.py:FUNCTION backend: the case's inputs, as the other backends see them, handed to the
// user's function in the shared worker (worker_client.h); what it returns checked against the contract
// (docs/python-backends.md) and made a Result, every failure a status with its reason.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <mutex>

#include "attnscope/registry.h"
#include "python_family.h"
#include "worker_client.h"

namespace attnscope::python {
namespace {

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

// The batch metadata in the forms engines use (vLLM / FlashAttention, FlashInfer) and the scalars.
nlohmann::json metadata(const CaseSpec& c, const Plan& p, const Workload& w, Arrays* a) {
  const PageTable& pt = p.pages;
  const int B = static_cast<int>(c.requests.size());
  const bool ragged = c.kv_cache.storage == KvStorage::kRagged;
  std::vector<int> cu_q(B + 1), cu_k(B + 1, 0), seqlens(B), lo(c.total_q()), hi(c.total_q());
  int max_q = 0, max_k = 0, width = 0;
  for (int r = 0; r < B; ++r) {
    cu_q[r + 1] = static_cast<int>(w.q_indptr[r + 1]);
    seqlens[r] = c.requests[r].kv_len;
    cu_k[r + 1] = cu_k[r] + seqlens[r];
    max_q = std::max(max_q, c.requests[r].q_len);
    max_k = std::max(max_k, seqlens[r]);
    width = std::max(width, pt.pages_of(r));
    const RowMask& m = p.masks[r];
    for (int q = 0; q < c.requests[r].q_len; ++q) visible_range(m, q_abs_of(m, q), &lo[cu_q[r] + q], &hi[cu_q[r] + q]);
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
  const auto& at = c.attention;
  return {{"dtype", dtype_name(c.dtype)},
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
    if (c.attention.alibi) return id_ + " is not handed ALiBi slopes (docs/python-backends.md)";
    if (fn_ == "sdpa" && file_.empty() && c.attention.soft_cap)
      return "python.sdpa: PyTorch's SDPA has no soft-cap (/attention/soft_cap); python.flex_attention runs it";
    return "";
  }
  Result run(const CaseSpec& c, const Plan& p, const Workload& w_in, const RunOptions& opt) override;

 private:
  std::string id_, file_, fn_;
};

Result PythonBackend::run(const CaseSpec& c, const Plan& p, const Workload& w_in, const RunOptions& opt) {
  Result r;
  r.backend = id_;
  // bench hands GPU-style backends no host inputs: this one makes its own, as a GPU backend does
  Workload own;
  const Workload* w = &w_in;
  if (w_in.q.empty()) {
    own = make_workload(c, p.pages);
    w = &own;
  }
  Arrays a;
  nlohmann::json h;
  h["op"] = "call";
  h["file"] = file_.empty() ? "attnscope's adapters" : file_;
  h["function"] = fn_;
  if (file_.empty()) h["adapter"] = fn_;
  h["reps"] = std::max(1, opt.bench_reps);
  h["meta"] = metadata(c, p, *w, &a);
  const int64_t tq = c.total_q(), kvh = c.num_kv_heads;
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
  Reply rep;
  {
    std::lock_guard<std::mutex> l(shared_worker_mutex());
    try {
      rep = shared_worker().call(h, a.list, user_code_timeout(), opt.cancel);
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
                rep.header.value("message", "the worker gave no reason");
    return r;
  }
  const size_t want_o = static_cast<size_t>(tq) * c.num_qo_heads * c.head_dim_vo * 4;
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
  // the function's own time, and what the hand-off cost around it
  std::vector<double> ms;
  for (const auto& x : rep.header.value("call_ms", nlohmann::json::array())) ms.push_back(x.get<double>());
  double sum = 0;
  for (double x : ms) sum += x;
  std::sort(ms.begin(), ms.end());
  const double overhead = rep.round_trip_ms - sum, worker = rep.header.value("worker_overhead_ms", 0.0);
  char buf[200];
  std::snprintf(buf, sizeof buf, "CPU time (time.perf_counter) %.3f ms per call; hand-off %.3f ms (worker side %.3f ms)",
                ms.empty() ? 0.0 : ms[ms.size() / 2], overhead, worker);
  r.message = buf;
  if (opt.bench_reps > 0 && !ms.empty()) {
    r.timing.device_ms = ms[ms.size() / 2];
    r.timing.device_ms_min = ms.front();
    r.timing.device_ms_max = ms.back();
    r.timing.reps = static_cast<int>(ms.size());
  }
  return r;
}

}  // namespace

std::unique_ptr<Backend> make_python_backend(const std::string& id, const std::string& file, const std::string& fn) {
  return std::make_unique<PythonBackend>(id, file, fn);
}

}  // namespace attnscope::python
