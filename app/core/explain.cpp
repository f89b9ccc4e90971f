// explain_case and trace_to_json (explain.h).
#include "explain.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <stdexcept>
#include <string>

#include "attnscope/device.h"
#include "attnscope/registry.h"
#include "attnscope/sparse.h"
#include "attnscope/workload.h"

namespace attnscope {

namespace {

constexpr int64_t kMaxExplainBytes = int64_t{4} << 30;  // the host inputs of the whole case are generated

nlohmann::json num(double x) {
  if (std::isnan(x)) return "nan";
  if (std::isinf(x)) return x > 0 ? "inf" : "-inf";
  return x;
}

nlohmann::json nums(const std::vector<float>& v) {
  nlohmann::json a = nlohmann::json::array();
  for (float x : v) a.push_back(num(x));
  return a;
}

// A GPU library's own top-k (BackendFamily::gpu_top_k, the first family offering one) on the explained
// row's indexer scores, as fp32, beside the plan's selection: docs/dsa.md section 3. Only where the
// indexer chose (not given indices).
void gpu_top_k_check(const CaseSpec& c, const Plan& p, SoftmaxTrace& t) {
  if (!t.sparse || !c.sparse->indices.empty()) return;
  SoftmaxTrace::SparseCheck& k = *t.sparse;
  const BackendFamily* fam = nullptr;
  for (const BackendFamily& f : backend_families())
    if (f.gpu_top_k && !fam) fam = &f;
  if (!fam) return;
  k.gpu_top_k_name = fam->gpu_top_k_name;
  const IndexerInputs in = indexer_inputs(c, t.request);
  const int n = in.kv_len - in.q_len + t.query + 1, top_k = c.sparse->top_k;  // causal: keys [0, q_abs]
  std::vector<double> sc(n);
  if (c.sparse->scoring == SparseScoring::kFp8)
    indexer_scores_fp8(in, quantize_indexer(in), t.query, n, sc.data());
  else
    indexer_scores_fp64(in, t.query, n, sc.data());
  std::vector<float> row(sc.begin(), sc.end());  // FP8 scores are fp32 values; fp64 ones round here
  std::vector<float> sorted = row;
  std::sort(sorted.begin(), sorted.end(), std::greater<>());
  k.gpu_top_k_tie = n > top_k && sorted[top_k - 1] == sorted[top_k];
  std::string why;
  if (fam->compiled && query_devices(&why).empty()) {  // "no CUDA device: ..." rather than a failed allocation
    k.gpu_top_k_note = why;
    return;
  }
  try {
    const std::vector<int> got = fam->gpu_top_k(row, {n}, n, top_k);
    k.gpu_top_k_differs = selection_differs((*p.sparse)[t.request].row(t.query), got.data(), top_k);
  } catch (const std::exception& e) {
    k.gpu_top_k_note = e.what();
  }
}

}  // namespace

SoftmaxTrace explain_case(const CaseSpec& c, int request, int query, int head, bool sparse_checks) {
  // the trace is the plan twin's arithmetic: a case it refuses (an FP8 cache with per-token scales,
  // FP8 attention) has no trace, and saying why beats printing the stored FP8 values as outputs
  const std::string twin = backend_for_role(Role::kPlanTwin);
  if (const BackendInfo* info = backend_info(twin)) {
    std::string why = fp8_for(*info, c);
    if (why.empty()) why = make_backend(twin)->check(c);
    if (!why.empty())
      throw std::invalid_argument("explain steps through " + twin + "'s arithmetic, which refuses this case: " + why);
  }
  const Plan p = make_plan(c);
  const int64_t bytes = workload_bytes(c, p.pages);
  if (bytes > kMaxExplainBytes)
    throw std::invalid_argument("the case's host inputs would need " + std::to_string(bytes >> 20) + " MiB, more than the " +
                                std::to_string(kMaxExplainBytes >> 20) + " MiB explain generates; use fewer tokens");
  const Workload w = make_workload(c, p.pages);
  SoftmaxTrace t = explain_row(c, p, w, request, query, head, sparse_checks);
  if (sparse_checks) gpu_top_k_check(c, p, t);
  return t;
}

std::string logit_formula(const SoftmaxTrace& t) {
  auto g = [](double v) {
    char b[32];
    std::snprintf(b, sizeof b, "%.5g", v);
    return std::string(b);
  };
  // the plain path folds the scale into exp2's argument (one rounding): the logits shown are q.k x c
  // rounded, P is exp2(fma(q.k, c, -m))
  if (t.soft_cap <= 0 && !t.alibi && !t.score_mod)
    return "q.k x sm_scale x log2(e) = q.k x " + g(t.scale_log2) + " (P = exp2(fma(q.k, " + g(t.scale_log2) + ", -m)))";
  const std::string x = (t.soft_cap > 0 ? g(t.soft_cap) + " x tanh(q.k x " + g(t.sm_scale) + " / " + g(t.soft_cap) + ")"
                                        : "q.k x " + g(t.sm_scale)) +
                        (t.alibi ? " + slope x (k - q_abs)" : "");
  return (t.score_mod ? "score_mod(" + x + ")" : x) + ", times log2(e)";
}

nlohmann::json trace_to_json(const SoftmaxTrace& t) {
  nlohmann::json j;
  j["schema"] = "attnscope/explain@1";
  j["row"] = {{"request", t.request},       {"query", t.query},           {"head", t.head},
              {"token", t.token},           {"q_abs", t.q_abs},           {"unit", t.unit},
              {"visible_lo", t.visible_lo}, {"visible_hi", t.visible_hi}, {"visible", t.visible}};
  j["plan"] = {{"cta_tile_q", t.tile_q}, {"chunk_pages", t.chunk_pages}, {"kv_warp_split", t.kv_warp_split},
               {"split_kv", t.split},    {"sm_scale", t.sm_scale},       {"scale_log2", t.scale_log2},
               {"alibi", t.alibi},       {"soft_cap", t.soft_cap}};
  nlohmann::json steps = nlohmann::json::array();
  for (const auto& s : t.steps)
    steps.push_back({{"chunk", s.chunk},
                     {"way", s.way},
                     {"kv_begin", s.kv_begin},
                     {"kv_end", s.kv_end},
                     {"visible", s.visible},
                     {"tile_max", num(s.tile_max)},
                     {"m_old", num(s.m_old)},
                     {"m_new", num(s.m_new)},
                     {"rescale", num(s.rescale)},
                     {"den", num(s.den)},
                     {"o_norm", num(s.o_norm)},
                     {"o_head", nums(s.o_head)},
                     {"skipped", s.skipped}});
  j["steps"] = steps;
  nlohmann::json parts = nlohmann::json::array();
  for (const auto& p : t.partials)
    parts.push_back({{"chunk", p.chunk},
                     {"item", p.item},
                     {"kv_begin", p.kv_begin},
                     {"kv_end", p.kv_end},
                     {"way_m", nums(p.way_m)},
                     {"way_d", nums(p.way_d)},
                     {"way_scale", nums(p.way_scale)},
                     {"m", num(p.m)},
                     {"den", num(p.den)},
                     {"lse2", num(p.lse2)},
                     {"o_head", nums(p.o_head)}});
  j["partials"] = parts;
  nlohmann::json merges = nlohmann::json::array();
  for (const auto& m : t.merges)
    merges.push_back({{"chunk", m.chunk},
                      {"lse_acc", num(m.lse_acc)},
                      {"lse_chunk", num(m.lse_chunk)},
                      {"w_acc", num(m.w_acc)},
                      {"w_chunk", num(m.w_chunk)},
                      {"lse_after", num(m.lse_after)},
                      {"o_head", nums(m.o_head)}});
  j["merges"] = merges;
  // the sink has no merge step: logit2 is the row's starting m (d = 1) in its output or first chunk
  if (t.sink != -INFINITY) j["sink"] = {{"logit", num(t.sink)}, {"logit2", num(t.sink2)}, {"p", num(t.sink_prob)}};
  nlohmann::json ref = nlohmann::json::array();
  for (double x : t.ref_o) ref.push_back(num(x));
  j["final"] = {{"o", nums(t.o)}, {"lse", num(t.lse)}};
  j["exact"] = {{"o", ref}, {"lse", num(t.ref_lse)}};
  j["difference"] = {{"o_max_abs", num(t.max_abs_diff)}, {"lse_abs", num(t.lse_diff)}};
  nlohmann::json keys = nlohmann::json::array();
  for (size_t i = 0; i < t.keys.size(); ++i)
    keys.push_back({{"key", t.keys[i]}, {"logit2", num(t.logits[i])}, {"p", num(t.probs[i])}});
  j["keys"] = keys;
  if (t.sparse) {  // a /sparse row: docs/dsa.md section 5's checks; gathered: the kept tokens in cpu.tiled's order
    const SoftmaxTrace::SparseCheck& k = *t.sparse;
    j["sparse"] = {{"kept", k.kept},
                   {"padding", k.padding},
                   {"nan_scores", k.nans},
                   {"recall", num(k.recall)},
                   {"recall_min", num(k.recall_min)},
                   {"recall_min_head", k.recall_min_head},
                   {"recall_mean", num(k.recall_mean)},
                   {"dense_lse", num(k.dense_lse)},
                   {"sparse_minus_dense_o_max_abs", num(k.dense_diff)},
                   {"gathered", t.gathered},
                   {"dense_plain_logits", k.plain_logits}};
    if (k.flips >= 0) j["sparse"]["fp8_flips_vs_fp64"] = k.flips;
    if (!k.gpu_top_k_name.empty())
      j["sparse"]["gpu_top_k"] =
          k.gpu_top_k_differs >= 0
              ? nlohmann::json{{"by", k.gpu_top_k_name}, {"differs", k.gpu_top_k_differs}, {"tie_at_top_k", k.gpu_top_k_tie}}
              : nlohmann::json{{"by", k.gpu_top_k_name}, {"not_run", k.gpu_top_k_note}};
  }
  return j;
}

}  // namespace attnscope
