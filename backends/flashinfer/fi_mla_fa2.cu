// FlashInfer's FA2-style MLA kernel (mla.cuh BatchMLAPagedAttention), head_dim_ckv 512 / kpe 64:
// the instantiations flashinfer.mla launches (bf16, fp16; causal, none).
#include <flashinfer/attention/mla.cuh>
#include <stdexcept>

#include "fi_mla_launch.cuh"

namespace attnscope::peers::flashinfer {

namespace {
template <class T>
cudaError_t launch(const MlaLaunchArgs& a, bool causal, cudaStream_t s) {
  auto p = mla_params<T>(a);
  const auto x = static_cast<uint32_t>(a.info[kBlksX]), y = static_cast<uint32_t>(a.info[kBlksY]);
  namespace fm = ::flashinfer::mla;
  return causal ? fm::BatchMLAPagedAttention<::flashinfer::MaskMode::kCausal, kMlaRank, kMlaRope>(p, x, y, s)
                : fm::BatchMLAPagedAttention<::flashinfer::MaskMode::kNone, kMlaRank, kMlaRope>(p, x, y, s);
}
}  // namespace

cudaError_t launch_mla_fa2(const MlaLaunchArgs& a, bool causal, DType dt, cudaStream_t s) {
  // FlashInfer's own refusals (FLASHINFER_ERROR) as the one exception type the backend expects
  try {
    if (dt == DType::kBf16) return launch<nv_bfloat16>(a, causal, s);
    if (dt == DType::kFp16) return launch<half>(a, causal, s);
  } catch (const ::flashinfer::Error& e) {
    throw std::domain_error(e.what());
  }
  return cudaErrorNotSupported;
}

}  // namespace attnscope::peers::flashinfer
