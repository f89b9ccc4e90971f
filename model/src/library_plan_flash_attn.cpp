// FlashAttention-2's own split decision (library_plans.flash_attn, reproduced by the flash_attn
// family) beside attnscope's flash_attn model of it: the field-by-field comparison the report, the
// CLI, the GUI and the CPU test use. Built in every configuration.
#include <sstream>

#include "attnscope/library_plan.h"

namespace attnscope {

namespace {
std::string str(int64_t v) { return std::to_string(v); }
}  // namespace

std::vector<PlanFieldDiff> compare_flash_attn_plan(const FlashAttnPlan& lib) {
  std::vector<PlanFieldDiff> d;
  if (!lib.ran) return d;
  const SplitPlan& m = lib.model;
  if (lib.refused) {
    // the model plans every case; the library's refusal is the one field left to compare
    d.push_back({"refusal", "plans it", "refuses: " + lib.why});
    return d;
  }
  auto add = [&](const char* f, const std::string& a, const std::string& b) {
    if (a != b) d.push_back({f, a, b});
  };
  add("seqlen_k", str(m.seqlen_k) + " tokens", str(lib.seqlen_k) + " tokens");
  add("num_splits", str(m.num_splits), str(lib.num_splits));
  add("chunk_tokens", str(m.chunk_tokens), str(lib.chunk_tokens));
  add("split_kv", m.split_kv ? "true" : "false", lib.num_splits > 1 ? "true" : "false");
  return d;
}

std::string flash_attn_agreement_line(const FlashAttnPlan& lib) {
  std::ostringstream o;
  o << "FlashAttention-2's own num_splits";
  if (!lib.ran) {
    o << ": not run: " << lib.why;
    return o.str();
  }
  o << " (" << lib.pin << ", " << lib.device.source << ")";
  const auto diffs = compare_flash_attn_plan(lib);
  if (diffs.empty()) {
    o << ": agrees with the model on every field (num_splits " << lib.num_splits << ", seqlen_k " << lib.seqlen_k << ", "
      << lib.chunk_tokens << " keys per split)";
    return o.str();
  }
  o << ": differs from the model in ";
  for (size_t i = 0; i < diffs.size(); ++i)
    o << (i ? ", " : "") << diffs[i].field << " (model " << diffs[i].model << ", FlashAttention " << diffs[i].library << ")";
  if (!lib.refused && lib.model.planner == Planner::kFlashAttn && lib.num_sms_x2 != 0)
    o << "; FlashAttention budgets for " << lib.num_sms_x2 / 2 << " SMs (" << lib.device.source
      << "), the model for /split/num_sms";
  return o.str();
}

}  // namespace attnscope
