// FP8 case rules (docs/case-format.md, "FP8"). Every violation names the JSON path and the rule.
#include "attnscope/fp8.h"

#include <cmath>
#include <sstream>
#include <string>

namespace attnscope {

const char* fp8_name(Fp8Format f) { return f == Fp8Format::kE4M3 ? "fp8_e4m3" : "fp8_e5m2"; }

const char* granularity_name(ScaleGranularity g) {
  switch (g) {
    case ScaleGranularity::kTensor:
      return "tensor";
    case ScaleGranularity::kHead:
      return "head";
    case ScaleGranularity::kToken:
      return "token";
  }
  return "?";
}

namespace {

std::string num(double v) {
  std::ostringstream o;
  o << v;
  return o.str();
}

// A scale the kernels can hold as a normal float, far from overflow in x / scale and fp8 * scale.
void check_scale(double s, const std::string& path) {
  if (!(std::isfinite(s) && s >= 1e-30 && s <= 1e30))
    throw CaseError(path,
                    num(s) + " is not a scale, must be finite and in [1e-30, 1e30] (a scale multiplies the stored FP8 value)");
}

void check_given(const std::vector<double>& v, const CaseSpec& c, const char* which) {
  const std::string path = std::string("/kv_cache/scales/") + which;
  if (v.empty()) return;  // "amax"
  const auto g = c.kv_cache.scales.granularity;
  if (g == ScaleGranularity::kToken)
    throw CaseError(path,
                    "per-token scales come from the data, write \"amax\" (numbers are taken for granularity tensor "
                    "or head)");
  if (g == ScaleGranularity::kTensor && v.size() != 1)
    throw CaseError(path, std::to_string(v.size()) + " values with granularity tensor, give one number");
  if (g == ScaleGranularity::kHead && v.size() != static_cast<size_t>(c.num_kv_heads))
    throw CaseError(path, std::to_string(v.size()) + " values with granularity head, give one per KV head (" +
                              std::to_string(c.num_kv_heads) + ")");
  for (size_t i = 0; i < v.size(); ++i) check_scale(v[i], g == ScaleGranularity::kTensor ? path : path + "/" + std::to_string(i));
}

}  // namespace

void validate_fp8(const CaseSpec& c) {
  const auto& kc = c.kv_cache;
  if (!kc.fp8) {
    if (kc.scales != KvScalesSpec{})
      throw CaseError("/kv_cache/scales", "set without an FP8 /kv_cache/dtype (fp8_e4m3 or fp8_e5m2)");
    if (c.fp8_attention)
      throw CaseError("/fp8_attention", "needs an FP8 /kv_cache/dtype: Q is quantised to the cache's FP8 format");
    return;
  }
  if (c.dtype == DType::kFp32)
    throw CaseError("/kv_cache/dtype", std::string(fp8_name(*kc.fp8)) +
                                           " with /dtype fp32: an FP8 cache is read by bf16 / fp16 kernels, set /dtype to "
                                           "bf16 or fp16");
  check_given(kc.scales.k, c, "k");
  check_given(kc.scales.v, c, "v");
  if (c.fp8_attention && c.fp8_attention->q_scale) check_scale(*c.fp8_attention->q_scale, "/fp8_attention/q_scale");
}

float e4m3_value(float y) {
  const uint32_t u = f32_bits(y), a = u & 0x7fffffffu;
  if (a < 0x3c800000u) {  // below 2^-6, e4m3's subnormals: multiples of 2^-9 (exact scalings, one rint)
    const float v = std::nearbyint(std::fabs(y) * 512.0f) * (1.0f / 512.0f);
    return (u >> 31) ? -v : v;
  }
  // keep 3 of the 23 mantissa bits, to nearest, ties to the even one (a carry moves the exponent up)
  const uint32_t r = (a + 0x7ffffu + ((a >> 20) & 1u)) & ~0xfffffu;
  return bits_f32((u & 0x80000000u) | r);
}

float fp8_value(Fp8Format f, float y) {
  if (f == Fp8Format::kE4M3 && std::fabs(y) <= 448.0f) return e4m3_value(y);  // NaN fails the test
  return fp8_bits_to_f32(f, f32_to_fp8_bits(f, y));
}

}  // namespace attnscope
