// FlashInfer's Hopper MLA kernel (mla_hopper.cuh BatchMLAPageAttentionHopper), head_dim_ckv 512 /
// kpe 64, bf16 / fp16, causal or none: compiled for sm_90a in attnscope_flashinfer_sm90 (sm90.cmake),
// or, when that library is not built, this unit alone with ATTNSCOPE_FI_SM90_WHY saying why.
#include "fi_mla_kernels.h"

#ifndef ATTNSCOPE_FI_SM90_WHY
#include <flashinfer/attention/mla_hopper.cuh>
#include <stdexcept>

#include "fi_mla_launch.cuh"
#endif

namespace attnscope::peers::flashinfer {

#ifdef ATTNSCOPE_FI_SM90_WHY
std::string mla_sm90_not_built() { return ATTNSCOPE_FI_SM90_WHY; }
cudaError_t launch_mla_sm90(const MlaLaunchArgs&, bool, DType, cudaStream_t) { return cudaErrorNotSupported; }
#else
namespace {
template <class T>
cudaError_t launch(const MlaLaunchArgs& a, bool causal, cudaStream_t s) {
  auto p = mla_params<T>(a);
  const auto x = static_cast<uint32_t>(a.info[kBlksX]), y = static_cast<uint32_t>(a.info[kBlksY]);
  namespace fm = ::flashinfer::mla;
  return causal ? fm::BatchMLAPageAttentionHopper< ::flashinfer::MaskMode::kCausal, kMlaRank, kMlaRope>(p, x, y, s)
                : fm::BatchMLAPageAttentionHopper< ::flashinfer::MaskMode::kNone, kMlaRank, kMlaRope>(p, x, y, s);
}
}  // namespace

std::string mla_sm90_not_built() { return ""; }

cudaError_t launch_mla_sm90(const MlaLaunchArgs& a, bool causal, DType dt, cudaStream_t s) {
  // FlashInfer's own refusals (FLASHINFER_ERROR) as the one exception type the backend expects
  try {
    if (dt == DType::kBf16) return launch<nv_bfloat16>(a, causal, s);
    if (dt == DType::kFp16) return launch<half>(a, causal, s);
  } catch (const ::flashinfer::Error& e) {
    throw std::domain_error(e.what());
  }
  return cudaErrorNotSupported;
}
#endif

}  // namespace attnscope::peers::flashinfer
