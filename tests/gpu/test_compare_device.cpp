// Comparisons where the data is (issue 43 item 4): the pass on the device gives every DiffReport field
// the host's bits on every example, and a GPU backend's device copy is its downloaded O and LSE.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <random>
#include <thread>

#include "attnscope/compare.h"
#include "attnscope/device_compare.h"
#include "case_json.h"
#include "compare_device.h"
#include "device_result.h"
#include "gpu_test_util.h"
#include "session.h"

using namespace attnscope;
using attnscope::testing::run_id;
namespace fs = std::filesystem;

namespace {

uint64_t bits(double x) {
  uint64_t u;
  std::memcpy(&u, &x, 8);
  return u;
}

// The device pass over uploaded copies of a's and b's host vectors (the comparison never sees a host
// value): any difference from the host pass is the device arithmetic's.
DiffPassFn on_device(const CaseSpec& c, int* calls) {
  return [&c, calls](const Result& a, const Result& b, double rtol, double atol) {
    ++*calls;
    const auto da = cuda::upload_device_copy(a), db = cuda::upload_device_copy(b);
    std::vector<uint8_t> ok;
    if (!a.row_valid.empty() || !b.row_valid.empty())
      for (int64_t t = 0; t < c.total_q(); ++t) ok.push_back(a.row_ok(t) && b.row_ok(t));
    const bool lse = !a.lse.empty() && !b.lse.empty();
    return cuda::device_pass(c, da->o(), db->o(), lse ? da->lse() : nullptr, lse ? db->lse() : nullptr, ok, rtol, atol);
  };
}

void expect_same_stats(const DiffStats& h, const DiffStats& d, const char* what) {
  SCOPED_TRACE(what);
  EXPECT_EQ(h.count, d.count);
  EXPECT_EQ(bits(h.max_abs), bits(d.max_abs));
  EXPECT_EQ(bits(h.mean_abs), bits(d.mean_abs));
  EXPECT_EQ(bits(h.rel_l2), bits(d.rel_l2));
  EXPECT_EQ(bits(h.nmse), bits(d.nmse));
  EXPECT_EQ(h.max_ulp, d.max_ulp);
  EXPECT_EQ(h.bit_identical, d.bit_identical);
  EXPECT_EQ(h.nan_a, d.nan_a);
  EXPECT_EQ(h.inf_a, d.inf_a);
  EXPECT_EQ(h.nan_b, d.nan_b);
  EXPECT_EQ(h.inf_b, d.inf_b);
  EXPECT_EQ(h.nonfinite_mismatch, d.nonfinite_mismatch);
  EXPECT_EQ(h.allclose_loose, d.allclose_loose);
  EXPECT_EQ(h.allclose_tight, d.allclose_tight);
  EXPECT_EQ(h.worst_index, d.worst_index);
}

void expect_same(const DiffReport& h, const DiffReport& d) {
  EXPECT_EQ(h.available, d.available);
  EXPECT_EQ(h.rows_compared, d.rows_compared);
  EXPECT_EQ(h.sampled, d.sampled);
  expect_same_stats(h.o, d.o, "O");
  expect_same_stats(h.lse, d.lse, "LSE");
  ASSERT_EQ(h.error_map.size(), d.error_map.size());
  int64_t cells = 0;
  for (size_t i = 0; i < h.error_map.size(); ++i) cells += f32_bits(h.error_map[i]) != f32_bits(d.error_map[i]);
  EXPECT_EQ(cells, 0) << "error-map cells whose bits differ";
  EXPECT_EQ(h.lowp_max_abs.has_value(), d.lowp_max_abs.has_value());
  if (h.lowp_max_abs && d.lowp_max_abs) {
    EXPECT_EQ(bits(*h.lowp_max_abs), bits(*d.lowp_max_abs));
  }
  EXPECT_EQ(h.verdict.pass, d.verdict.pass);
  EXPECT_EQ(h.verdict.skipped, d.verdict.skipped);
  EXPECT_EQ(h.verdict.rule, d.verdict.rule);
  EXPECT_EQ(h.verdict.detail, d.verdict.detail);
}

// Every example and zoo case; under compute-sanitizer (ATTNSCOPE_GPU_QUICK) every fifth.
std::vector<fs::path> examples() {
  std::vector<fs::path> all, out;
  for (const char* dir : {"/examples", "/examples/zoo"})
    for (const auto& e : fs::directory_iterator(std::string(ATTNSCOPE_SOURCE_DIR) + dir))
      if (e.path().extension() == ".json") all.push_back(e.path());
  std::sort(all.begin(), all.end());
  const size_t step = std::getenv("ATTNSCOPE_GPU_QUICK") ? 5 : 1;
  for (size_t i = 0; i < all.size(); i += step) out.push_back(all[i]);
  return out;
}

}  // namespace

// Every example as the live run makes it (GPU results keep their device copies), every comparison of
// the case and every ordered pair of its results under allclose: the device's report is the host's.
TEST(CompareDevice, EveryExampleAgreesWithTheHostBitForBit) {
  REQUIRE_GPU();
  set_device_copy_budget(int64_t{8} << 30);
  int reports = 0, compared = 0, device_calls = 0, where_the_data_is = 0;
  for (const auto& path : examples()) {
    SCOPED_TRACE(path.filename().string());
    SessionOptions opt;
    opt.device_copies = true;
    const auto s = run_session(read_case_file(path.string()), opt);
    const CaseSpec& c = s->spec();
    const DiffPassFn dev = on_device(c, &device_calls);
    ASSERT_EQ(s->diffs.size(), c.comparisons.size());
    for (size_t i = 0; i < c.comparisons.size(); ++i) {
      const ComparisonSpec& k = c.comparisons[i];
      SCOPED_TRACE(comparison_label(k));
      const Result *a = s->result(k.backend), *b = s->result(k.baseline);
      if (!a || !b) continue;
      const DiffReport h = compare_results(c, *a, *b, k, s->result(k.lowp));
      expect_same(h, compare_results(c, *a, *b, k, s->result(k.lowp), dev));
      // the session's own report (compare_one: the device where both copies are there)
      expect_same(h, s->diffs[i]);
      if (s->diffs[i].vs_original)
        expect_same_stats(diff_only(c, *a, *s->original_ideal).o, *s->diffs[i].vs_original, "vs the original ideal");
      where_the_data_is += a->device && b->device;
      ++reports;
      compared += h.available;  // both sides ok: the statistics were computed
    }
    for (const auto& a : s->results)
      for (const auto& b : s->results) {
        if (&a == &b || !a.ok() || !b.ok()) continue;
        SCOPED_TRACE(a.backend + " vs " + b.backend);
        const ComparisonSpec k{a.backend, b.backend, CompareRule::kAllclose, 1e-2, 1e-3, ""};
        expect_same(compare_results(c, a, b, k, nullptr), compare_results(c, a, b, k, nullptr, dev));
        ++reports;
        ++compared;
      }
  }
  std::cout << "[ compared ] " << reports << " reports (" << compared << " with statistics), " << device_calls
            << " device passes; " << where_the_data_is << " of the cases' comparisons had both sides on the device\n";
  EXPECT_GE(compared, std::getenv("ATTNSCOPE_GPU_QUICK") ? 8 : 40);
  EXPECT_GE(device_calls, compared);  // each, and twice_lowp's bound too, ran a device pass
}

// A GPU backend's attached copy is its host O and LSE bit for bit (O converted on the device, the
// padding columns of cuda.flash's padded head dims dropped), and the budget bounds the copies.
TEST(CompareDevice, AttachedCopiesAreTheDownloads) {
  REQUIRE_GPU();
  set_device_copy_budget(int64_t{8} << 30);
  int checked = 0;
  for (const char* name : {"mixed-prefill-decode-fragmented.json", "encoder-headdim32.json", "gemma2-window-softcap.json"}) {
    SCOPED_TRACE(name);
    CaseSpec c = read_case_file(std::string(ATTNSCOPE_SOURCE_DIR) + "/examples/" + name).spec;
    const auto pad = c.pad_head_dim_to;
    for (int dv : {c.head_dim_vo, 80}) {  // 80: cuda.flash runs it padded to 96 (/kernels/pad_head_dim_to)
      c.head_dim_qk = c.head_dim_vo = dv;
      c.pad_head_dim_to = dv == 80 ? std::optional<int>(96) : pad;
      const Plan p = plan_case(c);
      for (const char* id : {"cuda.flash", "cuda.flash_padded", "cuda.naive", "cuda.reference", "flashinfer.prefill",
                             "flashinfer.decode", "cudnn.sdpa"}) {
        SCOPED_TRACE(std::string(id) + " head dim " + std::to_string(dv));
        RunOptions keep;
        keep.keep_device_copy = true;
        const Result r = run_id(id, c, p, Workload{}, keep);
        if (!r.ok()) {
          std::cout << "[ not run  ] " << name << " " << id << " d" << dv << ": " << r.message << "\n";
          continue;
        }
        const auto* d = dynamic_cast<const cuda::DeviceResult*>(r.device.get());
        ASSERT_NE(d, nullptr) << "no device copy attached";
        ASSERT_EQ(d->o_elems(), static_cast<int64_t>(r.o.size()));
        ASSERT_EQ(d->lse_elems(), static_cast<int64_t>(r.lse.size()));
        std::vector<float> o(r.o.size()), lse(r.lse.size());
        cuda::check(cudaMemcpy(o.data(), d->o(), o.size() * 4, cudaMemcpyDeviceToHost), "copy back");
        cuda::check(cudaMemcpy(lse.data(), d->lse(), lse.size() * 4, cudaMemcpyDeviceToHost), "copy back");
        EXPECT_EQ(std::memcmp(o.data(), r.o.data(), o.size() * 4), 0) << "O";
        EXPECT_EQ(std::memcmp(lse.data(), r.lse.data(), lse.size() * 4), 0) << "LSE";
        // a comparison of the result with itself runs on the device and finds every value identical
        const auto pass = device_diff_pass(c, r, r, 0, 0);
        ASSERT_TRUE(pass.has_value());
        EXPECT_EQ(fold_chunks(pass->o).raw_differ, 0);
        ++checked;
      }
    }
  }
  EXPECT_GE(checked, 6);

  // the budget: a copy over it is not kept; lowering it drops the oldest; a dropped copy is compared on the host
  const CaseSpec c = read_case_file(std::string(ATTNSCOPE_SOURCE_DIR) + "/examples/gemma2-window-softcap.json").spec;
  const Plan p = plan_case(c);
  RunOptions o;
  o.keep_device_copy = true;
  const Result r1 = run_id("cuda.naive", c, p, Workload{}, o), r2 = run_id("cuda.naive", c, p, Workload{}, o);
  ASSERT_TRUE(r1.ok() && r2.ok() && r1.device && r2.device) << r1.message;
  const int64_t one = (static_cast<int64_t>(r1.o.size()) + static_cast<int64_t>(r1.lse.size())) * 4;
  EXPECT_GE(device_copy_bytes(), 2 * one);
  set_device_copy_budget(one);
  EXPECT_EQ(device_copy_bytes(), one);  // r1's copy, the older, went
  EXPECT_FALSE(device_diff_pass(c, r1, r2, 0, 0).has_value());
  EXPECT_TRUE(device_diff_pass(c, r2, r2, 0, 0).has_value());
  set_device_copy_budget(one - 1);
  EXPECT_EQ(run_id("cuda.naive", c, p, Workload{}, o).device, nullptr);
  set_device_copy_budget(int64_t{1} << 30);
  // without the flag no copy is kept
  EXPECT_EQ(run_id("cuda.naive", c, p, Workload{}, RunOptions{}).device, nullptr);
}

// A measurement, not a check beyond the bits: one pass over 8192 tokens x 32 heads x 128 dims on the
// host (every hardware thread) and on the device (the copies already there), printed.
TEST(CompareDevice, TimeOfALargePass) {
  REQUIRE_GPU();
  if (std::getenv("ATTNSCOPE_GPU_QUICK")) GTEST_SKIP() << "a timing: not under compute-sanitizer";
  CaseSpec c;
  c.requests = {{8192, 8192}};
  c.num_qo_heads = c.num_kv_heads = 32;
  c.head_dim_qk = c.head_dim_vo = 128;
  c.dtype = DType::kBf16;
  const int64_t n = c.total_q() * 32 * 128;
  Result a, b;
  std::mt19937 g(7);
  std::uniform_real_distribution<float> u(-1, 1);
  for (int64_t i = 0; i < n; ++i) {
    b.o.push_back(round_to(c.dtype, u(g)));
    a.o.push_back(round_to(c.dtype, b.o.back() + u(g) * 0.01f));
  }
  for (int64_t r = 0; r < c.total_q() * 32; ++r) {
    b.lse.push_back(u(g));
    a.lse.push_back(b.lse.back());
  }
  a.device = cuda::upload_device_copy(a);
  b.device = cuda::upload_device_copy(b);
  using clk = std::chrono::steady_clock;
  auto ms = [](clk::time_point t0) { return std::chrono::duration<double, std::milli>(clk::now() - t0).count(); };
  ASSERT_TRUE(device_diff_pass(c, a, b, 1e-2, 1e-3).has_value());  // warm-up
  auto t0 = clk::now();
  const auto dev = device_diff_pass(c, a, b, 1e-2, 1e-3);
  const double dev_ms = ms(t0);
  t0 = clk::now();
  const DiffPass host = host_diff_pass(c, a, b, 1e-2, 1e-3);
  const double host_ms = ms(t0);
  ASSERT_TRUE(dev.has_value());
  ASSERT_EQ(dev->o.size(), host.o.size());
  EXPECT_EQ(std::memcmp(dev->o.data(), host.o.data(), host.o.size() * sizeof(DiffPartial)), 0);
  std::cout << "[ timing   ] pass over " << n << " O elements: device " << dev_ms << " ms, host " << host_ms << " ms ("
            << std::thread::hardware_concurrency() << " threads)\n";
}
