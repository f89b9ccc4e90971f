// FlashInfer's own merges of partial (O, LSE) rows (fi_merge.h), compiled from the pinned wheel's
// include/flashinfer/attention/cascade.cuh: MergeState folded pairwise, MergeStates and
// VariableLengthMergeStates. FlashInfer reads and writes LSE in base 2: it is given
// merge_input_lse2(x, native, read) (attnscope's merge's read rule) and its LSE is turned back with
// lse2_to_e. O goes in and comes out in the dtype (cascade.cuh's DTypeIn / DTypeO).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <climits>
#include <flashinfer/attention/cascade.cuh>
#include <string>
#include <vector>

#include "attnscope/partition.h"
#include "cuda_util.h"
#include "device_check.h"
#include "fi_merge.h"
#include "gpu_timer.h"
#include "scoped_device.h"

namespace attnscope::peers::flashinfer {

namespace {

namespace fi = ::flashinfer;
using cuda::check;
using cuda::DeviceBuffer;

enum class Kind { kMergeState, kMergeStates, kVarlen };

const char* kind_id(Kind k) {
  return k == Kind::kMergeState    ? "flashinfer.merge_state"
         : k == Kind::kMergeStates ? "flashinfer.merge_states"
                                   : "flashinfer.merge_states_varlen";
}

// One value in the dtype's storage (the partials hold the dtype's values: exact).
void store(DType dt, float x, void* base, size_t i) {
  if (dt == DType::kFp32)
    static_cast<float*>(base)[i] = x;
  else
    static_cast<uint16_t*>(base)[i] = dt == DType::kFp16 ? f32_to_f16_bits(x) : f32_to_bf16_bits(x);
}
float load(DType dt, const void* base, size_t i) {
  if (dt == DType::kFp32) return static_cast<const float*>(base)[i];
  const uint16_t b = static_cast<const uint16_t*>(base)[i];
  return dt == DType::kFp16 ? f16_bits_to_f32(b) : bf16_bits_to_f32(b);
}

// The partials on the device in FlashInfer's layouts, the rows as [seq_len, heads]: per partial
// ([rows, dv] V, [rows] S) for MergeState, or [seq_len, P, heads, dv] / [seq_len, P, heads] for
// MergeStates, which is also the variable-length merge's [nnz, heads, dv] with an indptr giving
// position t the entries t * P .. t * P + P - 1. S in base 2.
struct Staged {
  std::vector<DeviceBuffer> v, s;  // one each (interleaved) or P each
  DeviceBuffer indptr;
};
Staged stage(const MergeInput& in, Kind kind, uint32_t heads) {
  const int P = static_cast<int>(in.parts.size()), es = dtype_bytes(in.dtype);
  const size_t rows = static_cast<size_t>(in.rows), dv = static_cast<size_t>(in.dv), seq_len = rows / heads;
  auto lse2 = [&](int k, size_t r) { return merge_input_lse2(in.parts[k].lse[r], in.native, in.read); };
  Staged st;
  if (kind == Kind::kMergeState) {
    std::vector<uint8_t> v(rows * dv * es);
    std::vector<float> s(rows);
    for (int k = 0; k < P; ++k) {
      for (size_t i = 0; i < rows * dv; ++i) store(in.dtype, in.parts[k].o[i], v.data(), i);
      for (size_t r = 0; r < rows; ++r) s[r] = lse2(k, r);
      st.v.push_back(DeviceBuffer::from(v));
      st.s.push_back(DeviceBuffer::from(s));
    }
    return st;
  }
  std::vector<uint8_t> v(rows * P * dv * es);
  std::vector<float> s(rows * P);
  for (size_t t = 0; t < seq_len; ++t)
    for (int k = 0; k < P; ++k)
      for (size_t h = 0; h < heads; ++h) {
        const size_t r = t * heads + h, e = (t * P + k) * heads + h;
        for (size_t d = 0; d < dv; ++d) store(in.dtype, in.parts[k].o[r * dv + d], v.data(), e * dv + d);
        s[e] = lse2(k, r);
      }
  st.v.push_back(DeviceBuffer::from(v));
  st.s.push_back(DeviceBuffer::from(s));
  if (kind == Kind::kVarlen) {
    std::vector<int32_t> indptr(seq_len + 1);
    for (size_t t = 0; t <= seq_len; ++t) indptr[t] = static_cast<int32_t>(t * P);
    st.indptr = DeviceBuffer::from(indptr);
  }
  return st;
}

// FlashInfer's head count for the rows: MergeInput::qo_heads where it divides them and MergeState's
// block (head_dim / vec_size threads by heads) fits 1024 threads, else 1 (each row a position).
uint32_t heads_for(const MergeInput& in) {
  const int vec = std::max(16 / dtype_bytes(in.dtype), in.dv / 32), bdx = in.dv / vec;
  if (in.qo_heads > 0 && in.rows % in.qo_heads == 0 && bdx * in.qo_heads <= 1024) return static_cast<uint32_t>(in.qo_heads);
  return 1;
}

// The kind's launches, V in and out in T; the output is v_out / s_out ([rows, dv], [rows] base 2).
// MergeState: partial 0 merged with 1 into one buffer, that with 2 into the other, and so on: the
// running V is written in T after every step, as a cascade of MergeState calls leaves it.
// The rows go in as [seq_len, heads] (heads: MergeInput::qo_heads where its block fits, else 1).
template <class T>
cudaError_t launch(Kind kind, const Staged& st, int P, uint32_t seq_len, uint32_t heads, uint32_t dv, T* v_out, float* s_out,
                   const DeviceBuffer* ping) {
  if (kind == Kind::kMergeStates)
    return fi::MergeStates(st.v[0].as<T>(), st.s[0].as<float>(), v_out, s_out, P, seq_len, heads, dv);
  if (kind == Kind::kVarlen)
    return fi::VariableLengthMergeStates(st.v[0].as<T>(), st.s[0].as<float>(), st.indptr.as<int32_t>(), v_out, s_out, seq_len,
                                         nullptr, heads, dv, /*enable_pdl=*/false);
  const size_t rows = static_cast<size_t>(seq_len) * heads;
  if (P == 1) {  // nothing to merge: the partial itself
    cudaError_t e = cudaMemcpyAsync(v_out, st.v[0].as<T>(), rows * dv * sizeof(T), cudaMemcpyDeviceToDevice);
    return e != cudaSuccess ? e : cudaMemcpyAsync(s_out, st.s[0].as<float>(), rows * 4, cudaMemcpyDeviceToDevice);
  }
  T* acc_v = st.v[0].as<T>();
  float* acc_s = st.s[0].as<float>();
  for (int k = 1; k < P; ++k) {
    // the last step writes the output; the others alternate between the two ping buffers
    T* out_v = k == P - 1 ? v_out : ping[2 * (k % 2)].as<T>();
    float* out_s = k == P - 1 ? s_out : ping[2 * (k % 2) + 1].as<float>();
    if (cudaError_t e = fi::MergeState(acc_v, acc_s, st.v[k].as<T>(), st.s[k].as<float>(), out_v, out_s, seq_len, heads, dv);
        e != cudaSuccess)
      return e;
    acc_v = out_v;
    acc_s = out_s;
  }
  return cudaSuccess;
}

cudaError_t launch_dtype(DType dt, Kind kind, const Staged& st, int P, uint32_t seq_len, uint32_t heads, uint32_t dv, void* v_out,
                         float* s_out, const DeviceBuffer* ping) {
  // 16-bit only (run_kind refuses fp32): FlashInfer's bindings dispatch fp16 / bf16 (csrc/cascade.cu), and
  // MergeStates does not compile for float at head dim 512 (a 512-bit cp.async)
  if (dt == DType::kFp16) return launch<half>(kind, st, P, seq_len, heads, dv, static_cast<half*>(v_out), s_out, ping);
  return launch<nv_bfloat16>(kind, st, P, seq_len, heads, dv, static_cast<nv_bfloat16*>(v_out), s_out, ping);
}

std::string what_it_read(const MergeInput& in) {
  return std::string("FlashInfer read the partials' LSE in base 2: merge_input_lse2 from base ") + lse_base_name(in.native) +
         " as base " + lse_base_name(in.read) + " would be read";
}

MergeRun run_kind(Kind kind, const MergeInput& in) {
  MergeRun r;
  r.id = kind_id(kind);
  const int P = static_cast<int>(in.parts.size());
  if (std::string why = cuda::device_check(); !why.empty()) {
    r.status = status_of_reason(why);
    r.message = why;
    return r;
  }
  if (in.dv != 64 && in.dv != 128 && in.dv != 256 && in.dv != 512) {
    r.status = Status::kUnsupported;
    r.message = "head_dim_vo " + std::to_string(in.dv) +
                ": FlashInfer's merges dispatch head dims 64, 128, 256 and 512 only (cascade.cuh, DISPATCH_HEAD_DIM)";
    return r;
  }
  if (in.dtype == DType::kFp32) {
    r.status = Status::kUnsupported;
    r.message =
        "dtype fp32: FlashInfer's merges take fp16 / bf16 (its bindings, csrc/cascade.cu, dispatch 16-bit types; "
        "MergeStates does not compile for float at head dim 512)";
    return r;
  }
  if (P < 1 || in.rows > INT32_MAX / std::max(P, 1)) {
    r.status = Status::kUnsupported;
    r.message = "FlashInfer's merges take 1 or more partials and a row count that fits its 32-bit indices";
    return r;
  }
  if (in.rows == 0) {  // nothing to launch (a grid of no blocks is a launch error)
    r.message = what_it_read(in) + "; no rows";
    return r;
  }
  try {
    cuda::ScopedDevice on(in.device);
    const uint32_t heads = heads_for(in), rows = static_cast<uint32_t>(in.rows), dv = static_cast<uint32_t>(in.dv);
    const Staged st = stage(in, kind, heads);
    const size_t v_bytes = static_cast<size_t>(rows) * dv * dtype_bytes(in.dtype);
    DeviceBuffer v_out(v_bytes), s_out(static_cast<size_t>(rows) * 4);
    DeviceBuffer ping[4];
    if (kind == Kind::kMergeState && P > 2)
      for (int i = 0; i < 4; ++i) ping[i].alloc(i % 2 == 0 ? v_bytes : static_cast<size_t>(rows) * 4);
    cuda::GpuEventTimer timer;
    timer.start();
    const cudaError_t e = launch_dtype(in.dtype, kind, st, P, rows / heads, heads, dv, v_out.as<void>(), s_out.as<float>(), ping);
    r.device_ms = timer.stop();
    check(e, kind_id(kind));
    cuda::check_launch(kind_id(kind), dim3(rows), dim3(), 0);
    const std::vector<uint8_t> v = v_out.to_host<uint8_t>(v_bytes);
    const std::vector<float> s = s_out.to_host<float>(rows);
    r.o.resize(static_cast<size_t>(rows) * dv);
    for (size_t i = 0; i < r.o.size(); ++i) r.o[i] = load(in.dtype, v.data(), i);
    r.lse.resize(rows);
    for (size_t i = 0; i < rows; ++i) r.lse[i] = lse2_to_e(s[i]);
    r.message = what_it_read(in) + "; rows as [" + std::to_string(rows / heads) + " positions, " + std::to_string(heads) +
                " heads] on GPU " + std::to_string(in.device) + " (the launches timed, not the staging)";
  } catch (const std::exception& ex) {
    cudaGetLastError();
    r = MergeRun{};
    r.id = kind_id(kind);
    r.status = Status::kError;
    r.message = ex.what();
  }
  return r;
}

}  // namespace

std::vector<Merger> fi_mergers() {
  const std::string reads = "; reads LSE in base 2 (the partials' LSE given as the case's merge base reads them)";
  return {
      {.id = "flashinfer.merge_state",
       .summary = "FlashInfer's MergeState (attention/cascade.cuh) folded pairwise in order 0, 1, ...: each step writes "
                  "V in the dtype, so O is rounded after every step" +
                  reads,
       .gpu = true,
       .run = [](const MergeInput& in) { return run_kind(Kind::kMergeState, in); }},
      {.id = "flashinfer.merge_states",
       .summary = "FlashInfer's MergeStates over [rows, P, dv] (cascade.cuh: a running max and sum in fp32, normalised "
                  "once, one rounding)" +
                  reads,
       .gpu = true,
       .run = [](const MergeInput& in) { return run_kind(Kind::kMergeStates, in); }},
      {.id = "flashinfer.merge_states_varlen",
       .summary = "FlashInfer's VariableLengthMergeStates (the persistent merge its split-KV kernels run), an indptr "
                  "giving every row all P partials" +
                  reads,
       .gpu = true,
       .run = [](const MergeInput& in) { return run_kind(Kind::kVarlen, in); }},
  };
}

}  // namespace attnscope::peers::flashinfer
