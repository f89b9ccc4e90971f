// FlashInfer's own MLA plan (library_plans.flashinfer_mla) beside attnscope's model of it
// (mla_plan.cpp): the field-by-field comparison and the agreement line of the report, the CLI and the
// GUI. Built in every configuration.
#include <algorithm>
#include <sstream>
#include <utility>

#include "attnscope/library_plan.h"
#include "attnscope/mla_plan.h"

namespace attnscope {

namespace {

std::string work_text(const MlaWork& w) {
  std::ostringstream o;
  o << "(q " << w.q_indptr << "+" << w.q_len << ", pages @" << w.kv_indptr << ", kv_len " << w.kv_len << ", rows @" << w.q_start
    << ", keys [" << w.kv_start << ", " << w.kv_end << "), partial " << w.partial_indptr << ")";
  return o.str();
}

// The first entry where two arrays differ, in words; false when equal.
bool first_diff(const std::vector<int>& a, const std::vector<int>& b, const char* name, std::string* ta, std::string* tb) {
  const size_t n = std::min(a.size(), b.size());
  for (size_t i = 0; i < n; ++i)
    if (a[i] != b[i]) {
      *ta = std::string(name) + "[" + std::to_string(i) + "] = " + std::to_string(a[i]);
      *tb = std::string(name) + "[" + std::to_string(i) + "] = " + std::to_string(b[i]);
      return true;
    }
  if (a.size() == b.size()) return false;
  *ta = std::string(name) + ": " + std::to_string(a.size()) + " entries";
  *tb = std::string(name) + ": " + std::to_string(b.size()) + " entries";
  return true;
}

}  // namespace

MlaPlanModel flashinfer_mla_model(const FlashInferMlaPlan& lib) {
  MlaPlanInputs in = lib.inputs;
  in.num_sm = lib.model_num_sms;
  return model_mla_plan(in);
}

std::vector<PlanFieldDiff> compare_flashinfer_mla_plan(const MlaPlanModel& m, const FlashInferMlaPlan& lib) {
  std::vector<PlanFieldDiff> d;
  if (!lib.ran && !lib.refused) return d;
  const bool model_refuses = !m.refusal.empty();
  if (lib.refused || model_refuses) {
    if (lib.refused != model_refuses)
      d.push_back(
          {"refusal", model_refuses ? "refuses: " + m.refusal : "accepts", lib.refused ? "refuses: " + lib.why : "accepts"});
    return d;
  }
  const MlaSchedule& a = m.schedule;
  const MlaSchedule& b = lib.schedule;
  if (a.num_blks_x != b.num_blks_x) d.push_back({"num_blks_x", std::to_string(a.num_blks_x), std::to_string(b.num_blks_x)});
  if (a.num_blks_y != b.num_blks_y) d.push_back({"num_blks_y", std::to_string(a.num_blks_y), std::to_string(b.num_blks_y)});
  std::string ta, tb;
  if (first_diff(a.work_indptr, b.work_indptr, "work_indptr", &ta, &tb)) d.push_back({"work_indptr", ta, tb});
  const size_t n = std::min(a.works.size(), b.works.size());
  size_t i = 0;
  while (i < n && a.works[i] == b.works[i]) ++i;
  if (i < n)
    d.push_back({"works", "item " + std::to_string(i) + " " + work_text(a.works[i]),
                 "item " + std::to_string(i) + " " + work_text(b.works[i])});
  else if (a.works.size() != b.works.size())
    d.push_back({"works", std::to_string(a.works.size()) + " items", std::to_string(b.works.size()) + " items"});
  const std::pair<const char*, std::pair<const std::vector<int>*, const std::vector<int>*>> merges[] = {
      {"merge_packed_offset_start", {&a.merge_packed_start, &b.merge_packed_start}},
      {"merge_packed_offset_end", {&a.merge_packed_end, &b.merge_packed_end}},
      {"merge_partial_packed_offset_start", {&a.merge_partial_start, &b.merge_partial_start}},
      {"merge_partial_packed_offset_end", {&a.merge_partial_end, &b.merge_partial_end}},
      {"merge_partial_stride", {&a.merge_partial_stride, &b.merge_partial_stride}}};
  for (const auto& [name, v] : merges)
    if (first_diff(*v.first, *v.second, name, &ta, &tb)) {
      d.push_back({"merge", ta, tb});
      break;
    }
  return d;
}

std::string flashinfer_mla_agreement_line(const MlaPlanModel& m, const FlashInferMlaPlan& lib) {
  std::ostringstream o;
  o << "FlashInfer's MLA planner";
  if (!lib.ran && !lib.refused) {
    o << ": not run: " << lib.why;
    return o.str();
  }
  o << " (" << lib.device.source << ")";
  const auto diffs = compare_flashinfer_mla_plan(m, lib);
  if (diffs.empty()) {
    if (lib.refused) {
      o << ": refuses the plan, as the model says: " << lib.why;
    } else {
      const MlaSchedule& s = lib.schedule;
      o << ": agrees with the model on every field (" << s.works.size() << " work items on " << s.num_blks_y << " clusters of "
        << s.num_blks_x << " CTA" << (s.num_blks_x > 1 ? "s" : "") << ", kv_len_limit " << m.kv_len_limit << ", " << m.merge_ctas
        << " merge CTAs)";
    }
    return o.str();
  }
  o << ": differs from the model in ";
  for (size_t i = 0; i < diffs.size(); ++i)
    o << (i ? ", " : "") << diffs[i].field << " (model " << diffs[i].model << ", FlashInfer " << diffs[i].library << ")";
  if (lib.inputs.num_sm != m.inputs.num_sm)
    o << "; FlashInfer plans for " << lib.inputs.num_sm << " SMs, the model for " << m.inputs.num_sm << " (/split/num_sms)";
  return o.str();
}

}  // namespace attnscope
