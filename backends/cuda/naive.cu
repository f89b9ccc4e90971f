// cuda.reference (fp64) and cuda.naive (fp32, materialised scores): one block per (query row,
// head), the visible keys' scores written to a scratch row, softmax over it, then P.V. They share
// one kernel template; Acc is the arithmetic type.
#include <cuda_runtime.h>

#include <chrono>
#include <cmath>

#include "attnscope/mask.h"
#include "cuda_backends.h"
#include "device_check.h"
#include "device_result.h"
#include "device_workload.h"

namespace attnscope::cuda {

namespace {

constexpr int kThreads = 256;

__device__ inline float load_elem(const void* base, int64_t i, DType t) {
  if (t == DType::kFp32) return static_cast<const float*>(base)[i];
  const uint16_t b = static_cast<const uint16_t*>(base)[i];
  return t == DType::kFp16 ? f16_bits_to_f32(b) : bf16_bits_to_f32(b);
}

struct NaiveParams {
  DevicePlanView view;
  const void* q;
  const void* k;
  const void* v;
  DType dt;
  int hq, hk, dq, dv, group;
  double sm_scale, soft_cap;
  int alibi;
  const double* slopes;     // [hq]
  const ExprOp* score_ops;  // the score_mod's program (nullptr: none)
  int score_n;
  const ExprEnv* envs;    // [requests] the score_mod's per-request variables (doc_starts set here from the mask)
  const int64_t* tokens;  // [rows / hq] tokens computed by this launch
  float* o;               // [total_q, hq, dv]
  float* lse;             // [total_q, hq]
  void* scratch;          // [rows in launch, max_kv] Acc
  int64_t scratch_stride;
  int round_output;  // cuda.naive writes O rounded to the dtype
  // FP8 (docs/conventions.md section 10): the pools hold the stored values; a key's K scale (and Q's
  // scale) multiply its logit, its V scale its V row. Null without an FP8 cache.
  const float* k_scale;
  const float* v_scale;
  float q_scale;
  ScaleGranularity granularity;
  // attention sinks (docs/conventions.md section 12): [hq] natural-log logits, a denominator term with
  // no value vector (cpu.reference's order: the row max includes it); nullptr: none
  const double* sinks;
};

template <class Acc>
__device__ Acc block_reduce(Acc v, bool is_max, Acc* sh) {
  for (int off = 16; off > 0; off >>= 1) {
    const Acc o = __shfl_xor_sync(0xffffffffu, v, off);
    v = is_max ? (o > v ? o : v) : v + o;
  }
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0) sh[warp] = v;
  __syncthreads();
  if (warp == 0) {
    v = lane < kThreads / 32 ? sh[lane] : (is_max ? static_cast<Acc>(-INFINITY) : static_cast<Acc>(0));
    for (int off = 16; off > 0; off >>= 1) {
      const Acc o = __shfl_xor_sync(0xffffffffu, v, off);
      v = is_max ? (o > v ? o : v) : v + o;
    }
    if (lane == 0) sh[0] = v;
  }
  __syncthreads();
  const Acc r = sh[0];
  __syncthreads();
  return r;
}

__device__ inline double dexp(double x) { return exp(x); }
__device__ inline float dexp(float x) { return expf(x); }
__device__ inline double dlog(double x) { return log(x); }
__device__ inline float dlog(float x) { return logf(x); }
__device__ inline double dtanh(double x) { return tanh(x); }
__device__ inline float dtanh(float x) { return tanhf(x); }

template <class Acc>
__global__ void __launch_bounds__(kThreads) naive_kernel(NaiveParams p) {
  __shared__ Acc sh[kThreads / 32];
  extern __shared__ unsigned char smem_raw[];
  Acc* qs = reinterpret_cast<Acc*>(smem_raw);
  const int h = blockIdx.x % p.hq;
  const int64_t t = p.tokens[blockIdx.x / p.hq];
  // request of this token
  int r = 0;
  while (r + 1 < p.view.num_requests && p.view.q_indptr[r + 1] <= t) ++r;
  const RowMask m = p.view.masks[r];
  const int qa = q_abs_of(m, static_cast<int>(t - p.view.q_indptr[r]));
  int lo, hi;
  visible_range(m, qa, &lo, &hi);
  float* o = p.o + (t * p.hq + h) * p.dv;
  const Acc sink = p.sinks ? static_cast<Acc>(p.sinks[h]) : static_cast<Acc>(-INFINITY);
  if (hi <= lo) {  // fully masked row: O = 0, LSE = -inf or the sink
    for (int d = threadIdx.x; d < p.dv; d += blockDim.x) o[d] = 0.f;
    if (threadIdx.x == 0) p.lse[t * p.hq + h] = static_cast<float>(sink);
    return;
  }
  for (int d = threadIdx.x; d < p.dq; d += blockDim.x) qs[d] = static_cast<Acc>(load_elem(p.q, (t * p.hq + h) * p.dq + d, p.dt));
  __syncthreads();
  Acc* s = reinterpret_cast<Acc*>(p.scratch) + static_cast<int64_t>(blockIdx.x) * p.scratch_stride;
  const int kvh = h / p.group;
  const int* pages = p.view.kv_indices + p.view.kv_indptr[r];
  const int ps = p.view.page_size;
  const Acc scale = static_cast<Acc>(p.sm_scale), cap = static_cast<Acc>(p.soft_cap);
  const Acc slope = p.alibi ? static_cast<Acc>(p.slopes[h]) : static_cast<Acc>(0);
  Acc mx = static_cast<Acc>(-INFINITY);
  ExprEnv env;
  if (p.score_n > 0) {
    env = p.envs[r];
    env.doc_starts = m.doc_starts;
    env.num_docs = m.num_docs;
    env.v[kVarH] = h;
    env.v[kVarQ] = qa;
  }
  for (int k = lo + threadIdx.x; k < hi; k += blockDim.x) {
    if (!mask_bit(m, qa, k)) {  // a mask_mod's hole inside the row's range
      s[k - lo] = static_cast<Acc>(-INFINITY);
      continue;
    }
    const int64_t base = kv_offset(p.view.layout, pages[k / ps], k % ps, kvh, 0, ps, p.hk, p.dq);
    Acc dot = 0;
    for (int d = 0; d < p.dq; ++d) dot += qs[d] * static_cast<Acc>(load_elem(p.k, base + d, p.dt));
    if (p.k_scale)  // the scales factor out of the dot product (cpu.reference's order)
      dot *= static_cast<Acc>(p.q_scale) *
             static_cast<Acc>(p.k_scale[scale_index(p.granularity, pages[k / ps], k % ps, kvh, ps, p.hk)]);
    Acc x = dot * scale;
    if (cap > 0) x = cap * dtanh(x / cap);
    if (p.alibi) x += slope * static_cast<Acc>(k - qa);
    if (p.score_n > 0) {  // the score_mod, interpreted in doubles (expr_program.h, as on the host)
      env.v[kVarKv] = k;
      env.v[kVarScore] = static_cast<double>(x);
      x = static_cast<Acc>(eval_expr(p.score_ops, p.score_n, env));
    }
    s[k - lo] = x;
    mx = x > mx ? x : mx;
  }
  mx = block_reduce<Acc>(mx, true, sh);
  if (mx == static_cast<Acc>(-INFINITY)) {  // every visible key scored -inf (a score_mod): fully masked too
    for (int d = threadIdx.x; d < p.dv; d += blockDim.x) o[d] = 0.f;
    if (threadIdx.x == 0) p.lse[t * p.hq + h] = static_cast<float>(sink);
    return;  // uniform: mx is the block's reduced value
  }
  mx = sink > mx ? sink : mx;
  Acc den = 0;
  for (int k = lo + threadIdx.x; k < hi; k += blockDim.x) {
    const Acc e = dexp(s[k - lo] - mx);
    // the V scale weighs the key's whole V row: folded into its probability after the sum
    s[k - lo] = p.v_scale ? e * static_cast<Acc>(p.v_scale[scale_index(p.granularity, pages[k / ps], k % ps, kvh, ps, p.hk)]) : e;
    den += e;
  }
  den = block_reduce<Acc>(den, false, sh);  // also a barrier: s[] is complete
  if (p.sinks) den += dexp(sink - mx);      // the sink's term: no value vector
  for (int d = threadIdx.x; d < p.dv; d += blockDim.x) {
    Acc acc = 0;
    for (int k = lo; k < hi; ++k)
      acc += s[k - lo] *
             static_cast<Acc>(load_elem(p.v, kv_offset(p.view.layout, pages[k / ps], k % ps, kvh, d, ps, p.hk, p.dv), p.dt));
    const float out = static_cast<float>(acc / den);
    o[d] = p.round_output ? round_to(p.dt, out) : out;
  }
  if (threadIdx.x == 0) p.lse[t * p.hq + h] = static_cast<float>(mx + dlog(den));
}

class NaiveBackend final : public Backend {
 public:
  NaiveBackend(std::string id, bool fp64) : id_(std::move(id)), fp64_(fp64) {}
  std::string id() const override { return id_; }
  std::string describe() const override {
    return fp64_ ? "fp64 naive attention on the GPU (ground truth at any size)" : "fp32 naive attention with materialised scores";
  }
  std::string check(const CaseSpec& c) const override { return device_check(); }

  Result run(const CaseSpec& c, const Plan& p, const Workload&, const RunOptions& opt) override {
    Result res;
    res.backend = id_;
    const bool sample = fp64_ && opt.sample_rows.has_value();
    const auto sel = row_selection(c, sample ? opt.sample_rows : std::nullopt);
    if (sample) {
      res.row_valid = sel;
      res.message = "sampled " + std::to_string(*opt.sample_rows) + " query rows per request";
    }
    std::vector<int64_t> tokens;
    for (int64_t t = 0; t < static_cast<int64_t>(sel.size()); ++t)
      if (sel[t]) tokens.push_back(t);
    int max_kv = 1;
    for (const auto& r : c.requests) max_kv = std::max(max_kv, r.kv_len);

    const size_t acc = fp64_ ? 8 : 4;
    const int64_t total_q = c.total_q();
    require_device_memory(device_workload_bytes(c, p) + total_q * c.num_qo_heads * (c.head_dim_vo + 1) * 4 + (int64_t{256} << 20),
                          id_ + " (inputs, outputs and a 256 MiB score scratch)");
    const auto shared_w = device_workload(c, p, opt);
    const DeviceWorkload& w = *shared_w;
    DeviceBuffer o(total_q * c.num_qo_heads * c.head_dim_vo * 4), lse(total_q * c.num_qo_heads * 4);
    // poison: unwritten rows stay NaN
    cuda::check(cudaMemset(o.as<void>(), 0xff, o.bytes()), "cudaMemset");
    cuda::check(cudaMemset(lse.as<void>(), 0xff, lse.bytes()), "cudaMemset");
    std::vector<double> slopes(c.num_qo_heads);
    for (int h = 0; h < c.num_qo_heads; ++h) slopes[h] = alibi_slope(h, c.num_qo_heads);
    DeviceBuffer d_slopes = DeviceBuffer::from(slopes);
    std::vector<double> sinks;
    for (float x : sink_logits(c)) sinks.push_back(x);
    DeviceBuffer d_sinks = sinks.empty() ? DeviceBuffer() : DeviceBuffer::from(sinks);
    DeviceScoreMod sm;
    if (p.score_mod) sm = upload_score_mod(c, *p.score_mod);

    // score scratch: as many (token, head) rows per launch as 256 MiB holds
    const int64_t rows_per_launch = std::max<int64_t>(1, std::min<int64_t>((int64_t{256} << 20) / (max_kv * acc), 65535));
    const int64_t tokens_per_launch = std::max<int64_t>(1, rows_per_launch / c.num_qo_heads);
    DeviceBuffer scratch(static_cast<size_t>(tokens_per_launch * c.num_qo_heads * max_kv * acc));
    NaiveParams prm{w.view,
                    w.q.as<void>(),
                    w.k.as<void>(),
                    w.v.as<void>(),
                    c.dtype,
                    c.num_qo_heads,
                    c.num_kv_heads,
                    c.head_dim_qk,
                    c.head_dim_vo,
                    c.group_size(),
                    c.sm_scale_or_default(),
                    c.attention.soft_cap.value_or(0.0),
                    c.attention.alibi ? 1 : 0,
                    d_slopes.as<double>(),
                    p.score_mod ? sm.ops.as<ExprOp>() : nullptr,
                    sm.n,
                    p.score_mod ? sm.envs.as<ExprEnv>() : nullptr,
                    nullptr,
                    o.as<float>(),
                    lse.as<float>(),
                    scratch.as<void>(),
                    max_kv,
                    fp64_ ? 0 : 1,
                    w.fp8 ? w.k_scale.as<float>() : nullptr,
                    w.fp8 ? w.v_scale.as<float>() : nullptr,
                    w.q_scale,
                    w.granularity,
                    sinks.empty() ? nullptr : d_sinks.as<double>()};
    const size_t smem = c.head_dim_qk * acc;
    for (int64_t first = 0; first < static_cast<int64_t>(tokens.size()); first += tokens_per_launch) {
      if (opt.cancel && opt.cancel->load()) break;
      const int64_t n = std::min<int64_t>(tokens_per_launch, static_cast<int64_t>(tokens.size()) - first);
      DeviceBuffer d_tok = DeviceBuffer::from(std::vector<int64_t>(tokens.begin() + first, tokens.begin() + first + n));
      prm.tokens = d_tok.as<int64_t>();
      const dim3 grid(static_cast<unsigned>(n * c.num_qo_heads));
      if (fp64_)
        naive_kernel<double><<<grid, kThreads, smem>>>(prm);
      else
        naive_kernel<float><<<grid, kThreads, smem>>>(prm);
      check_launch(fp64_ ? "naive_kernel<double>" : "naive_kernel<float>", grid, dim3(kThreads), smem);
      if (opt.progress) opt.progress(static_cast<double>(first + n) / tokens.size());
    }
    res.o = o.to_host<float>(total_q * c.num_qo_heads * c.head_dim_vo);
    res.lse = lse.to_host<float>(total_q * c.num_qo_heads);
    attach_device_copy(&res, o, DType::kFp32, total_q * c.num_qo_heads, c.head_dim_vo, c.head_dim_vo, opt);
    return res;
  }

 private:
  std::string id_;
  bool fp64_;
};

}  // namespace

std::unique_ptr<Backend> make_naive_backend(const std::string& id) {
  return std::make_unique<NaiveBackend>(id, id == "cuda.reference");
}

}  // namespace attnscope::cuda
