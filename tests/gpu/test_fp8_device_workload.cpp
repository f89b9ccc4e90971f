// The FP8 device workload (device_workload.h) against the host's make_workload, bit for bit: the
// stored bytes, the scales, and the dtype pools holding the FP8 values (what cuda.flash, FlashInfer and
// cuDNN read). Built only with the CUDA backends; skips without a device.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>

#include "attnscope/device.h"
#include "attnscope/plan.h"
#include "attnscope/workload.h"
#include "cuda_backends.h"
#include "device_check.h"
#include "device_workload.h"
#include "fp8_case_gen.h"
#include "require.h"

using namespace attnscope;
using attnscope::testing::force_fp8;
using attnscope::testing::GenLimits;
using attnscope::testing::random_fp8_case;

namespace {

int cases(int full) { return std::getenv("ATTNSCOPE_GPU_QUICK") ? std::max(6, full / 6) : full; }

// The same bits, NaN matching NaN (poisoned slots and unused token scales).
void expect_same(const std::vector<float>& dev, const std::vector<float>& host, const std::string& what) {
  ASSERT_EQ(dev.size(), host.size()) << what;
  for (size_t i = 0; i < dev.size(); ++i) {
    if (std::isnan(dev[i]) && std::isnan(host[i])) continue;
    ASSERT_EQ(f32_bits(dev[i]), f32_bits(host[i])) << what << "[" << i << "] device " << dev[i] << " host " << host[i];
  }
}

// The stored bytes: the host pool's FP8 value where it holds one, 0x7f where poisoned (NaN), 0 (+0) in
// unused slots without poison.
void expect_bytes(const std::vector<uint8_t>& b, const std::vector<float>& host, Fp8Format f, const std::string& what) {
  ASSERT_EQ(b.size(), host.size()) << what;
  for (size_t i = 0; i < b.size(); ++i) {
    if (std::isnan(host[i])) {
      ASSERT_EQ(b[i], 0x7f) << what << "[" << i << "]";
      continue;
    }
    ASSERT_EQ(f32_bits(fp8_bits_to_f32(f, b[i])), f32_bits(host[i])) << what << "[" << i << "] byte " << int(b[i]);
  }
}

}  // namespace

TEST(GpuFp8, DeviceWorkloadMatchesTheHostBitForBit) {
  REQUIRE_WHY_EMPTY(cuda::device_check());
  int given = 0, amax = 0, hnd = 0, nhd = 0, fragmented = 0, poisoned = 0, fp8_attn = 0, q_given = 0;
  const int n = cases(36);
  for (int seed = 0; seed < n; ++seed) {
    CaseSpec c = random_fp8_case(static_cast<uint64_t>(seed) + 500, GenLimits{4, 40, 300});
    force_fp8(c, seed % 2 ? Fp8Format::kE5M2 : Fp8Format::kE4M3, static_cast<ScaleGranularity>((seed / 2) % 3));
    if (seed % 4 == 1 && c.kv_cache.storage == KvStorage::kPaged) {
      c.kv_cache.allocation = PageAlloc::kFragmented;
      c.kv_cache.poison_unused = true;
    }
    if (seed % 5 == 2) c.fp8_attention = Fp8AttentionSpec{};
    validate_case(c);
    SCOPED_TRACE(c.name);
    const Plan p = make_plan(c);
    const Workload w = make_workload(c, p.pages);
    const cuda::DeviceWorkload d = cuda::make_device_workload(c, p);
    ASSERT_TRUE(d.fp8.has_value());
    const Fp8Format f = *d.fp8;
    EXPECT_EQ(f, *c.kv_cache.fp8);
    EXPECT_EQ(d.granularity, c.kv_cache.scales.granularity);
    expect_same(cuda::download_as_float(d.q, d.q_elems, c.dtype), w.q, "Q");
    expect_same(cuda::download_as_float(d.k, d.k_elems, c.dtype), w.k_pool, "K pool");
    expect_same(cuda::download_as_float(d.v, d.v_elems, c.dtype), w.v_pool, "V pool");
    expect_bytes(d.k8.to_host<uint8_t>(d.k_elems), w.k_pool, f, "K bytes");
    expect_bytes(d.v8.to_host<uint8_t>(d.v_elems), w.v_pool, f, "V bytes");
    expect_same(d.k_scale.to_host<float>(w.k_scale.size()), w.k_scale, "K scales");
    expect_same(d.v_scale.to_host<float>(w.v_scale.size()), w.v_scale, "V scales");
    EXPECT_EQ(d.k_scale.bytes(), w.k_scale.size() * 4);
    EXPECT_EQ(f32_bits(d.q_scale), f32_bits(w.q_scale));
    given += !c.kv_cache.scales.k.empty();
    amax += c.kv_cache.scales.k.empty();
    (c.kv_cache.layout == KvLayout::kHND ? hnd : nhd) += c.kv_cache.storage == KvStorage::kPaged;
    fragmented += c.kv_cache.allocation == PageAlloc::kFragmented;
    poisoned += c.kv_cache.poison_unused;
    fp8_attn += c.fp8_attention.has_value();
    q_given += c.fp8_attention && c.fp8_attention->q_scale;
  }
  for (int k : {given, amax, hnd, nhd, fragmented, poisoned, fp8_attn}) EXPECT_GT(k, 0) << "a setting the cases never drew";
  RecordProperty("given_q_scale_cases", q_given);
}

// A case without FP8 leaves the FP8 fields empty and the inputs as before (the generator's test in
// test_gpu.cpp checks their bits).
TEST(GpuFp8, PlainCaseHasNoFp8Buffers) {
  REQUIRE_WHY_EMPTY(cuda::device_check());
  const CaseSpec c = attnscope::testing::random_case(3);
  const Plan p = make_plan(c);
  const cuda::DeviceWorkload d = cuda::make_device_workload(c, p);
  EXPECT_FALSE(d.fp8.has_value());
  EXPECT_EQ(d.k8.bytes() + d.v8.bytes() + d.k_scale.bytes() + d.v_scale.bytes(), 0u);
  EXPECT_EQ(d.q_scale, 1.0f);
}

// device_workload_bytes counts the FP8 buffers: the stored bytes and both tensors' scales.
TEST(GpuFp8, WorkloadBytesCountTheFp8Buffers) {
  CaseSpec c = random_fp8_case(7);
  force_fp8(c, Fp8Format::kE4M3, ScaleGranularity::kToken);
  CaseSpec plain = c;
  plain.kv_cache.fp8.reset();
  plain.kv_cache.scales = KvScalesSpec{};
  plain.fp8_attention.reset();
  const Plan p = make_plan(c);
  const int64_t slots = static_cast<int64_t>(p.pages.num_pages) * p.pages.page_size * c.num_kv_heads;
  EXPECT_EQ(cuda::device_workload_bytes(c, p) - cuda::device_workload_bytes(plain, make_plan(plain)),
            slots * (c.head_dim_qk + c.head_dim_vo) + 8 * slots);
}

// cuda.flash's FP8 register path converts K / V bytes with shifts, masks and a power-of-two multiply
// (fp8x4_split), not the library conversion: every finite code of both formats must come out as the
// format defines it, in fp16 and in bf16, signed zeros and subnormals included. NaN / inf codes are left
// out: the quantisation never writes them (it saturates), and the conversion does not keep them.
TEST(GpuFp8, RegisterConversionIsExactForEveryFiniteCode) {
  REQUIRE_WHY_EMPTY(cuda::device_check());
  int subnormals = 0;
  for (Fp8Format f : {Fp8Format::kE4M3, Fp8Format::kE5M2})
    for (DType dt : {DType::kFp16, DType::kBf16}) {
      const std::vector<uint16_t> got = cuda::fp8_register_conversion_of_every_code(f, dt);
      ASSERT_EQ(got.size(), 256u);
      for (int code = 0; code < 256; ++code) {
        const float want = fp8_bits_to_f32(f, static_cast<uint8_t>(code));
        if (!std::isfinite(want)) continue;
        if (want != 0.f && std::fabs(want) < (f == Fp8Format::kE4M3 ? 0x1p-6f : 0x1p-14f)) ++subnormals;
        const float v = dt == DType::kBf16 ? bf16_bits_to_f32(got[code]) : f16_bits_to_f32(got[code]);
        EXPECT_EQ(f32_bits(v), f32_bits(want)) << fp8_name(f) << " code " << code << " as " << dtype_name(dt);
      }
    }
  EXPECT_EQ(subnormals, 2 * (14 + 6));  // e4m3 has 7 subnormal magnitudes, e5m2 3, each signed, in two dtypes
}
