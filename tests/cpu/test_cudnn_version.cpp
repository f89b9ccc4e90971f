// The cuDNN built-with / running comparison (issue 47, backends/cudnn/cudnn_version.h): which pairs
// the frontend can run on, and the text every listing shows. Pure host code: runs in every build.
#include <gtest/gtest.h>

#include <cmath>

#include "cudnn_conventions.h"
#include "cudnn_version.h"

using attnscope::peers::cudnn::compare_cudnn_versions;
using attnscope::peers::cudnn::cudnn_version_text;

TEST(CudnnVersion, TextOfCuDnn9And8Numbers) {
  EXPECT_EQ(cudnn_version_text(91900), "9.19.0");
  EXPECT_EQ(cudnn_version_text(91401), "9.14.1");
  EXPECT_EQ(cudnn_version_text(8907), "8.9.7");
  EXPECT_EQ(cudnn_version_text(0), "unknown");
}

TEST(CudnnVersion, SameVersionIsUsableAndShowsThePath) {
  const auto v = compare_cudnn_versions(91900, 91900, "/w/nvidia/cudnn/lib/libcudnn.so.9");
  EXPECT_TRUE(v.usable);
  EXPECT_TRUE(v.matches);
  EXPECT_EQ(v.text, "cuDNN 9.19.0 (/w/nvidia/cudnn/lib/libcudnn.so.9)");
  EXPECT_EQ(v.reason, "");
}

TEST(CudnnVersion, OlderLibraryThanTheHeadersIsUnsupportedWithBothVersionsAndThePath) {
  // the H200 of issue 47: frontend built on 9.19 headers, Debian's 9.14 loaded
  const auto v = compare_cudnn_versions(91900, 91400, "/usr/lib/x86_64-linux-gnu/libcudnn.so.9.14.0");
  EXPECT_FALSE(v.usable);
  EXPECT_FALSE(v.matches);
  EXPECT_EQ(v.text, "cuDNN built with 9.19.0, running 9.14.0 (/usr/lib/x86_64-linux-gnu/libcudnn.so.9.14.0)");
  EXPECT_EQ(v.reason.rfind(v.text + ": older than the headers", 0), 0u) << v.reason;
  EXPECT_NE(v.reason.find("-DATTNSCOPE_CUDNN_ROOT"), std::string::npos) << v.reason;
}

TEST(CudnnVersion, NewerLibraryOfTheSameMajorRunsButIsShown) {
  const auto v = compare_cudnn_versions(91400, 91900, "/opt/libcudnn.so.9");
  EXPECT_TRUE(v.usable);
  EXPECT_FALSE(v.matches);
  EXPECT_EQ(v.text, "cuDNN built with 9.14.0, running 9.19.0 (/opt/libcudnn.so.9)");
  EXPECT_EQ(v.reason, "");
}

TEST(CudnnVersion, AnotherMajorIsUnsupportedEitherWay) {
  for (const auto& [built, running] : {std::pair{91900, 100000}, std::pair{91900, 8907}}) {
    const auto v = compare_cudnn_versions(built, running, "/x/libcudnn.so");
    EXPECT_FALSE(v.usable) << running;
    EXPECT_NE(v.reason.find("a different major version"), std::string::npos) << v.reason;
  }
}

TEST(CudnnVersion, NoLibraryOrNoPathIsSaid) {
  const auto none = compare_cudnn_versions(91900, 0, "");
  EXPECT_FALSE(none.usable);
  EXPECT_EQ(none.reason.rfind("no cuDNN library answered", 0), 0u) << none.reason;
  EXPECT_EQ(compare_cudnn_versions(91900, 91900, "").text, "cuDNN 9.19.0 (path unknown)");
}

// The note a cuDNN result carries when it read slots no request uses (cudnn_conventions.h): only on
// a poisoned paged pool, only when a row is NaN, naming how many rows and the library.
TEST(CudnnUnusedSlots, NoteOnlyForNaNRowsOfAPoisonedPagedPool) {
  using attnscope::peers::cudnn::unused_slot_note;
  attnscope::CaseSpec c;
  c.requests = {attnscope::RequestSpec{2, 20}, attnscope::RequestSpec{1, 7}};
  c.num_qo_heads = 2;
  c.num_kv_heads = 1;
  c.head_dim_qk = c.head_dim_vo = 4;
  c.kv_cache.page_size = 16;
  attnscope::validate_case(c);
  std::vector<float> o(3 * 2 * 4, 0.5f), lse(3 * 2, 1.0f);
  c.kv_cache.poison_unused = true;
  EXPECT_EQ(unused_slot_note(c, o, lse, "cuDNN 9.19.0"), "");  // finite: nothing read that should not be
  o[1 * 4 + 3] = NAN;                                          // row 1, O only
  lse[5] = NAN;                                                // row 5, LSE only
  const std::string note = unused_slot_note(c, o, lse, "cuDNN 9.19.0");
  EXPECT_EQ(note.rfind("NaN in 2 of 6 (token, head) rows", 0), 0u) << note;
  EXPECT_NE(note.find("cuDNN 9.19.0 read K/V slots no request uses"), std::string::npos) << note;
  EXPECT_NE(note.find("/kv_cache/poison_unused"), std::string::npos) << note;
  c.kv_cache.poison_unused = false;  // NaN without poison is not this note's to explain
  EXPECT_EQ(unused_slot_note(c, o, lse, "cuDNN 9.19.0"), "");
  lse[5] = -INFINITY;  // a fully masked row is -inf, never NaN
  c.kv_cache.poison_unused = true;
  EXPECT_EQ(unused_slot_note(c, o, lse, "cuDNN 9.19.0").rfind("NaN in 1 of 6", 0), 0u);
}
