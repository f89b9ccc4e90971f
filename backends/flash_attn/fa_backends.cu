// flash_attn.varlen / flash_attn.kvcache: FlashAttention-2's own forward kernels (the sdist's
// instantiation units, fa_table.cu) on the case's device workload. Flash_fwd_params is filled from
// fa_conventions.cpp's Launch as flash_api.cpp's set_params_fprop / set_params_splitkv fill it.
// Q, K/V (ragged pool or paged pool, in place) and O are attnscope's own buffers; a contiguous
// cache for flash_attn.kvcache is copied from the ragged pool (untimed).
#include <cuda_runtime.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <cstring>
#include <sstream>

#include "attnscope/device.h"
#include "device_check.h"
#include "device_result.h"
#include "device_workload.h"
#include "fa_backends.h"
#include "fa_kernels.h"
#include "fa_planner.h"
#include "flash.h"
#include "gpu_timer.h"

namespace attnscope::peers::flash_attn {

namespace {

using attnscope::cuda::DeviceBuffer;

Built built() {
  Built b;
  std::stringstream dims(ATTNSCOPE_FLASH_ATTN_DIMS_TEXT), types(ATTNSCOPE_FLASH_ATTN_TYPES_TEXT);
  for (std::string t; std::getline(dims, t, ',');) b.head_dims.push_back(std::stoi(t));
  for (std::string t; std::getline(types, t, ',');) b.dtypes.push_back(t == "fp16" ? DType::kFp16 : DType::kBf16);
  return b;
}

int device_sms() {
  int n = 0;
  if (cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, 0) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return n;
}

// "" when device 0's compute capability is one the kernel units were compiled for (real code only:
// no PTX is embedded), else the reason.
std::string arch_check() {
  int major = 0, minor = 0;
  cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0);
  cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, 0);
  std::stringstream archs(ATTNSCOPE_FLASH_ATTN_ARCHS_TEXT);
  for (std::string a; std::getline(archs, a, ',');)
    if (a.empty() || !std::isdigit(static_cast<unsigned char>(a[0])) || std::atoi(a.c_str()) == major * 10 + minor)
      return "";  // native / all: taken at their word
  return "FlashAttention-2's kernel units were compiled for " + std::string(ATTNSCOPE_FLASH_ATTN_ARCHS_TEXT) +
         " (ATTNSCOPE_FLASH_ATTN_ARCHS); device 0 is sm_" + std::to_string(major * 10 + minor);
}

// The buffers one launch reads and writes, besides the workload's Q / K / V.
struct LaunchBuffers {
  DeviceBuffer o, lse, oaccum, lseaccum, cu_q, cu_k, seqused_k, table, slopes, kcache, vcache;
};

flash::Flash_fwd_params fill_params(const Launch& l, const CaseSpec& c, const cuda::DeviceWorkload& w, LaunchBuffers& b) {
  flash::Flash_fwd_params p{};
  p.is_bf16 = c.dtype == DType::kBf16;
  p.q_ptr = w.q.as<void>();
  p.k_ptr = l.cache_src.empty() ? w.k.as<void>() : b.kcache.as<void>();
  p.v_ptr = l.cache_src.empty() ? w.v.as<void>() : b.vcache.as<void>();
  p.q_batch_stride = l.q_batch_stride;
  p.q_row_stride = l.q_row_stride;
  p.q_head_stride = l.q_head_stride;
  p.k_batch_stride = p.v_batch_stride = l.k_batch_stride;
  p.k_row_stride = p.v_row_stride = l.k_row_stride;
  p.k_head_stride = p.v_head_stride = l.k_head_stride;
  p.o_ptr = b.o.as<void>();
  p.o_batch_stride = l.o_batch_stride;
  p.o_row_stride = l.o_row_stride;
  p.o_head_stride = l.o_head_stride;
  p.h = l.h;
  p.h_k = l.h_k;
  p.h_h_k_ratio = l.h / l.h_k;
  p.b = l.b;
  p.seqlen_q = l.seqlen_q;
  p.seqlen_k = l.seqlen_k;
  p.seqlen_q_rounded = l.seqlen_q_rounded;
  p.seqlen_k_rounded = l.seqlen_k_rounded;
  p.d = l.d;
  p.d_rounded = l.d_rounded;
  p.total_q = l.total_q;
  p.softcap = l.softcap;
  p.scale_softmax = l.scale_softmax;
  p.scale_softmax_log2 = l.scale_softmax_log2;
  p.p_dropout = 1.f;  // the probability to keep: no dropout
  p.p_dropout_in_uint8_t = 255;
  p.rp_dropout = 1.f;
  p.scale_softmax_rp_dropout = l.scale_softmax;
  p.is_causal = l.is_causal;
  p.window_size_left = l.window_left;
  p.window_size_right = l.window_right;
  p.softmax_lse_ptr = b.lse.as<void>();
  p.cu_seqlens_q = l.cu_seqlens_q.empty() ? nullptr : b.cu_q.as<int>();
  p.cu_seqlens_k = b.cu_k.as<int>();
  p.is_seqlens_k_cumulative = l.seqlens_k_cumulative;
  p.seqused_k = l.seqused_k.empty() ? nullptr : b.seqused_k.as<int>();
  p.unpadded_lse = l.unpadded_lse;
  p.block_table = l.paged ? b.table.as<int>() : nullptr;
  p.block_table_batch_stride = l.max_num_blocks_per_seq;
  p.page_block_size = l.page_block_size;
  p.num_splits = l.num_splits;
  p.oaccum_ptr = l.num_splits > 1 ? b.oaccum.as<void>() : nullptr;
  p.softmax_lseaccum_ptr = l.num_splits > 1 ? b.lseaccum.as<void>() : nullptr;
  p.alibi_slopes_ptr = l.alibi_slopes.empty() ? nullptr : b.slopes.as<void>();
  p.alibi_slopes_batch_stride = 0;
  return p;
}

class FaBackend final : public Backend {
 public:
  explicit FaBackend(Api api) : api_(api) {}
  std::string id() const override { return api_ == Api::kVarlen ? "flash_attn.varlen" : "flash_attn.kvcache"; }
  std::string describe() const override {
    return std::string("FlashAttention-2's forward kernels from ") + ATTNSCOPE_FLASH_ATTN_PIN + " (" +
           (api_ == Api::kVarlen ? "flash_attn_varlen_func" : "flash_attn_with_kvcache") + " semantics)";
  }
  std::string check(const CaseSpec& c) const override {
    if (auto why = refusal_reason(api_, c, built()); !why.empty()) return why;
    if (auto why = cuda::device_check(); !why.empty()) return why;
    return arch_check();
  }

  Result run(const CaseSpec& c, const Plan& pl, const Workload&, const RunOptions& opt) override {
    Result res;
    res.backend = id();
    const Launch l = translate(api_, c, pl, device_sms());
    if (!l.engine_refusal.empty()) {  // what the engine builds is not what the kernel takes: no launch
      res.status = Status::kUnsupported;
      res.message = l.engine_refusal;
      return res;
    }
    const int Hq = c.num_qo_heads, Hk = c.num_kv_heads, d = c.head_dim_qk, eb = dtype_bytes(c.dtype);
    const int64_t total_q = c.total_q(), out_elems = total_q * Hq * d;
    const int64_t cache_elems = l.cache_src.empty() ? 0 : static_cast<int64_t>(l.b) * l.seqlen_k * Hk * d;
    const int64_t accum_rows = l.num_splits > 1 ? static_cast<int64_t>(l.num_splits) * l.b * l.h * l.seqlen_q : 0;
    cuda::require_device_memory(cuda::device_workload_bytes(c, pl) + out_elems * eb + lse_buffer_elems(l) * 4 +
                                    2 * cache_elems * eb + accum_rows * (l.d_rounded + 1) * 4,
                                id() + " (inputs, outputs, cache copy, split partials)");
    const auto shared_w = cuda::device_workload(c, pl, opt);
    const cuda::DeviceWorkload& w = *shared_w;
    LaunchBuffers b;
    b.o.alloc(std::max<int64_t>(out_elems, 1) * eb);
    b.lse.alloc(lse_buffer_elems(l) * 4);
    // Poison the outputs: an element FA2 does not write stays NaN and shows in the comparison.
    for (DeviceBuffer* x : {&b.o, &b.lse}) cuda::check(cudaMemset(x->as<void>(), 0xff, x->bytes()), "cudaMemset (poison)");
    if (accum_rows) {
      b.oaccum.alloc(accum_rows * l.d_rounded * 4);
      b.lseaccum.alloc(accum_rows * 4);
    }
    if (!l.cu_seqlens_q.empty()) b.cu_q = DeviceBuffer::from(l.cu_seqlens_q);
    b.cu_k = DeviceBuffer::from(l.cu_seqlens_k);
    if (!l.seqused_k.empty()) b.seqused_k = DeviceBuffer::from(l.seqused_k);
    if (l.paged) b.table = DeviceBuffer::from(l.block_table);
    if (!l.alibi_slopes.empty()) b.slopes = DeviceBuffer::from(l.alibi_slopes);
    if (cache_elems) copy_cache(l, c, w, &b);

    flash::Flash_fwd_params p = fill_params(l, c, w, b);
    const bool split = l.num_splits > 1 || l.force_split_kernel;
    auto launch = [&] {
      if (!run_instance(p.is_bf16, d, l.is_causal, split, p, 0))
        throw std::runtime_error("no FA2 instantiation for this case (refusal_reason should have said)");
    };
    launch();
    cuda::check(cudaDeviceSynchronize(), "FlashAttention-2 forward");
    res.o = cuda::download_as_float(b.o, out_elems, c.dtype);
    res.lse = lse_to_attnscope(l, c, b.lse.to_host<float>(lse_elems(l)));
    cuda::attach_device_copy(&res, b.o, c.dtype, c.total_q() * c.num_qo_heads, c.head_dim_vo, c.head_dim_vo, opt);
    cuda::time_launches(
        opt, launch, [] { cuda::check(cudaDeviceSynchronize(), "FlashAttention-2 benchmark loop"); }, &res.timing);
    std::ostringstream m;
    m << ATTNSCOPE_FLASH_ATTN_PIN << ": " << (split ? "run_mha_fwd_splitkv_dispatch" : "run_mha_fwd_") << " d" << d
      << (l.is_causal ? " causal" : "")
      << (c.attention.window && !l.is_causal
              ? ", window_size (" + std::to_string(l.window_left) + ", " + std::to_string(l.window_right) + ")"
              : "")
      << (l.seqused_k.empty() ? "" : "; padding as " + std::to_string(l.b) + " segments with seqused_k") << "; "
      << (l.fed.empty() ? "" : l.fed + "; ") << l.num_splits_from << (l.swapped ? "; GQA decode swapped (seqlen_q = group)" : "")
      << (l.paged ? "; block table " + std::to_string(l.max_num_blocks_per_seq) + " pages of " + std::to_string(l.page_block_size)
                  : "");
    res.message = m.str();
    return res;
  }

 private:
  // The contiguous cache flash_attn_with_kvcache reads ([b, seqlen_k, h_k, d]): each request's keys
  // from the ragged pool, the unused tail NaN under poison_unused (else 0), as the pool's own.
  static void copy_cache(const Launch& l, const CaseSpec& c, const cuda::DeviceWorkload& w, LaunchBuffers* b) {
    const int64_t row = static_cast<int64_t>(c.num_kv_heads) * c.head_dim_qk * dtype_bytes(c.dtype);
    b->kcache.alloc(static_cast<size_t>(l.b) * l.seqlen_k * row);
    b->vcache.alloc(b->kcache.bytes());
    const int fill = c.kv_cache.poison_unused ? 0xff : 0;
    for (DeviceBuffer* x : {&b->kcache, &b->vcache})
      cuda::check(cudaMemset(x->as<void>(), fill, x->bytes()), "cudaMemset (cache)");
    for (int r = 0; r < l.b; ++r) {
      const size_t bytes = static_cast<size_t>(c.requests[r].kv_len) * row;
      const size_t dst = static_cast<size_t>(r) * l.seqlen_k * row, src = static_cast<size_t>(l.cache_src[r]) * row;
      cuda::check(cudaMemcpy(b->kcache.as<char>() + dst, w.k.as<char>() + src, bytes, cudaMemcpyDeviceToDevice),
                  "cache copy (K)");
      cuda::check(cudaMemcpy(b->vcache.as<char>() + dst, w.v.as<char>() + src, bytes, cudaMemcpyDeviceToDevice),
                  "cache copy (V)");
    }
  }
  Api api_;
};

}  // namespace

std::unique_ptr<Backend> make_backend(Api api) { return std::make_unique<FaBackend>(api); }

DeviceProfile planner_device(int num_sms) {
  const int n = device_sms();
  if (n <= 0) return h100_profile(num_sms, "no CUDA device here");
  DeviceProfile p = h100_profile(n, "");
  p.from_device = true;
  cudaDeviceProp prop{};
  cudaGetDeviceProperties(&prop, 0);
  p.cc_major = prop.major;
  p.cc_minor = prop.minor;
  p.source = "device 0: " + std::string(prop.name) + ", " + std::to_string(n) + " SMs, cc " + std::to_string(prop.major) + "." +
             std::to_string(prop.minor);
  return p;
}

}  // namespace attnscope::peers::flash_attn
