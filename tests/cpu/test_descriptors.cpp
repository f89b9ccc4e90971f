// Every family's backend descriptors, every field, against tests/data/backend_descriptors.txt: the
// descriptors are data the registry and the listings read, so a rewrite of family.cpp (issue 42 item 6,
// named fields instead of positions) must leave them as they were. The descriptors are compiled in
// every build, so a CPU build checks the GPU families' too.
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <sstream>

#include "attnscope/registry.h"

using namespace attnscope;

namespace {

// in the enums' order (backend.h)
const char* expr_name(Expressions e) {
  constexpr const char* kNames[] = {"none", "lowered", "full"};
  return kNames[static_cast<int>(e)];
}

const char* role_name(Role r) {
  constexpr const char* kNames[] = {"none", "reference", "lowp", "plan_twin"};
  return kNames[static_cast<int>(r)];
}

const char* sparse_name(SparseRun r) {
  static const char* kNames[] = {"no", "plan", "gathered", "gathered_else_plan"};
  return kNames[static_cast<int>(r)];
}

void describe(std::ostream& s, const BackendInfo& b) {
  s << "id: " << b.id << "\n  summary: " << b.summary << "\n  takes: " << b.takes << "\n  mask_mod: " << expr_name(b.mask_mod)
    << " score_mod: " << expr_name(b.score_mod) << " gpu: " << b.gpu << " bench_default: " << b.bench_default
    << " library_plan: " << b.library_plan << " role: " << role_name(b.role) << "\n  fp8_kv_scales: " << b.fp8_kv_scales
    << " fp8_attention: " << b.fp8_attention << " sinks: " << b.sinks << " trees: " << b.trees << " mla: " << b.mla
    << " sparse: " << sparse_name(b.sparse) << "\n  script_sdpa_backend: " << b.script_sdpa_backend
    << "\n  script_sdpa_note: " << b.script_sdpa_note << "\n";
}

std::string describe_all() {
  std::ostringstream s;
  for (const auto& f : backend_families()) {
    s << "family " << f.name << "\n";
    for (const auto& b : f.backends) describe(s, b);
    if (!f.id_prefix.empty()) describe(s << "pattern ", f.pattern);
  }
  return s.str();
}

}  // namespace

// On a deliberate change, write the new text with ATTNSCOPE_DESCRIPTORS_OUT=PATH and review the diff.
TEST(Descriptors, EveryFieldAsRecorded) {
  const std::string now = describe_all();
  if (const char* out = std::getenv("ATTNSCOPE_DESCRIPTORS_OUT")) std::ofstream(out) << now;
  std::ifstream in(ATTNSCOPE_SOURCE_DIR "/tests/data/backend_descriptors.txt");
  ASSERT_TRUE(in) << "tests/data/backend_descriptors.txt is missing";
  std::stringstream recorded;
  recorded << in.rdbuf();
  EXPECT_EQ(recorded.str(), now);
}
