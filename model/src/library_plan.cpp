// attnscope's planner model beside a library's own plan: the device profile the library's planner
// answers from without a GPU, and the field-by-field comparison the report, the CLI, the GUI and
// the CPU test use. Built in every configuration (FlashInfer's planner itself is fi_planner.cu).
#include "attnscope/library_plan.h"

#include <sstream>

namespace attnscope {

namespace {

std::string str(int64_t v) { return std::to_string(v); }

std::string item_text(const char* a, int unit, int q_tile, int kv_chunk) {
  return std::string("(") + a + " " + str(unit) + ", q-tile " + str(q_tile) + ", kv-chunk " + str(kv_chunk) + ")";
}

// First index where two index arrays differ, in words; empty when equal.
std::string first_difference(const std::vector<int>& model, const std::vector<int>& lib, std::string* model_text,
                             std::string* lib_text) {
  const size_t n = std::min(model.size(), lib.size());
  for (size_t i = 0; i < n; ++i)
    if (model[i] != lib[i]) {
      // ostringstream: GCC 12 warns (-Wrestrict, a false positive) on the chain of string +
      std::ostringstream a, b;
      a << "[" << i << "] = " << model[i] << " (" << model.size() << " entries)";
      b << "[" << i << "] = " << lib[i] << " (" << lib.size() << " entries)";
      *model_text = a.str();
      *lib_text = b.str();
      return "differs";
    }
  if (model.size() != lib.size()) {
    *model_text = str(model.size()) + " entries";
    *lib_text = str(lib.size()) + " entries";
    return "differs";
  }
  return "";
}

}  // namespace

DeviceProfile h100_profile(int num_sms, const std::string& why) {
  DeviceProfile p;
  p.from_device = false;
  p.sm_count = num_sms;
  p.cc_major = 9;
  p.cc_minor = 0;
  p.max_smem_per_block_optin = 232448;
  p.source = "profile H100 SXM, " + str(num_sms) + " SMs" + (why.empty() ? "" : ", " + why);
  return p;
}

std::vector<PlanFieldDiff> compare_flashinfer_plan(const SplitPlan& m, const FlashInferPlan& lib) {
  std::vector<PlanFieldDiff> d;
  if (!lib.ran) return d;
  const bool model_refuses = !m.refusal.empty();
  if (lib.refused || model_refuses) {
    // a refused plan has no outputs: the refusal itself is the one field to compare
    if (lib.refused != model_refuses)
      d.push_back(
          {"refusal", model_refuses ? "refuses: " + m.refusal : "accepts", lib.refused ? "refuses: " + lib.why : "accepts"});
    return d;
  }
  auto add = [&](const char* f, const std::string& a, const std::string& b) {
    if (a != b) d.push_back({f, a, b});
  };
  add("cta_tile_q", str(m.cta_tile_q), str(lib.cta_tile_q));
  if (lib.kv_chunk_unbounded) {
    // disable_split_kv: FlashInfer's chunk is "the whole KV" (INT64_MAX pages); the model's `off`
    // says the same with the longest KV as its chunk
    add("kv_chunk_size", m.planner == Planner::kOff ? "unbounded (split off)" : str(m.chunk_tokens) + " tokens",
        "unbounded (split off)");
  } else {
    add("kv_chunk_size", str(m.chunk_tokens) + " tokens", str(lib.kv_chunk_size) + " tokens");
  }
  add("split_kv", m.split_kv ? "true" : "false", lib.split_kv ? "true" : "false");
  add("new_batch_size", str(m.num_items), str(lib.new_batch_size));
  add("padded_batch_size", str(m.padded_items), str(lib.padded_batch_size));
  const size_t n = std::min(m.items.size(), lib.request_indices.size());
  bool items_differ = m.items.size() != lib.request_indices.size();
  std::string mi = str(m.items.size()) + " items", li = str(lib.request_indices.size()) + " items";
  for (size_t i = 0; i < n; ++i) {
    const WorkItem& it = m.items[i];
    if (it.unit != lib.request_indices[i] || it.q_tile != lib.qo_tile_indices[i] || it.kv_chunk != lib.kv_tile_indices[i]) {
      items_differ = true;
      mi = "item " + str(i) + " " + item_text("unit", it.unit, it.q_tile, it.kv_chunk);
      li = "item " + str(i) + " " + item_text("request", lib.request_indices[i], lib.qo_tile_indices[i], lib.kv_tile_indices[i]);
      break;
    }
  }
  if (items_differ) d.push_back({"work_items", mi, li});
  std::string a, b;
  if (!first_difference(m.merge_indptr, lib.merge_indptr, &a, &b).empty()) d.push_back({"merge_indptr", a, b});
  if (!first_difference(m.o_indptr, lib.o_indptr, &a, &b).empty()) d.push_back({"o_indptr", a, b});
  return d;
}

std::string flashinfer_agreement_line(const SplitPlan& m, const FlashInferPlan& lib) {
  std::ostringstream o;
  o << "FlashInfer's own planner";
  if (!lib.ran) {
    o << ": not run: " << lib.why;
    return o.str();
  }
  o << " (" << lib.device.source << ")";
  const auto diffs = compare_flashinfer_plan(m, lib);
  if (diffs.empty()) {
    if (lib.refused)
      o << ": refuses the plan, as the model says: " << lib.why;
    else
      o << ": agrees with the model on every field";
    return o.str();
  }
  o << ": differs from the model in ";
  for (size_t i = 0; i < diffs.size(); ++i)
    o << (i ? ", " : "") << diffs[i].field << " (model " << diffs[i].model << ", FlashInfer " << diffs[i].library << ")";
  if (lib.max_batch_size_if_split != m.max_items)
    o << "; FlashInfer budgets " << lib.max_batch_size_if_split << " work items for " << lib.device.sm_count << " SMs, the model "
      << m.max_items << " for /split/num_sms";
  if (!lib.note.empty()) o << "; " << lib.note;
  return o.str();
}

}  // namespace attnscope
