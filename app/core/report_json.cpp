// JSON reports.
#include "report_json.h"

#include <cmath>

#include "attnscope/compare.h"
#include "attnscope/fp8.h"
#include "expr_numpy.h"

namespace attnscope {

using nlohmann::ordered_json;

namespace {
// JSON has no infinities or NaN: they are written as strings.
ordered_json num(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  return v;
}

// The fields every library plan's report opens with, in this order: whether its planner ran, was
// available or refused, why, the pin, and the device its planner was asked about. `compiled` and
// `note` where the plan has them (FlashInfer's two).
template <class P>
ordered_json plan_status_json(const P& f) {
  ordered_json j;
  if constexpr (requires { f.compiled; }) j["compiled"] = f.compiled;
  j["ran"] = f.ran;
  j["available"] = f.available;
  j["refused"] = f.refused;
  j["why"] = f.why;
  if constexpr (requires { f.note; }) j["note"] = f.note;
  j["pin"] = f.pin;
  return j;
}

ordered_json device_json(const DeviceProfile& d) {
  return {{"source", d.source}, {"from_device", d.from_device}, {"sm_count", d.sm_count}};
}

// Each plan's agreement with the model: null `agrees` when there was nothing to compare, the line the
// CLI prints, and the differing fields (`library`: the key of the library's value).
ordered_json agreement_json(bool compared, const std::vector<PlanFieldDiff>& diffs, const std::string& line,
                            const char* library) {
  ordered_json dj = ordered_json::array();
  for (const auto& x : diffs) dj.push_back({{"field", x.field}, {"model", x.model}, {library, x.library}});
  return {{"agrees", compared ? ordered_json(diffs.empty()) : ordered_json(nullptr)}, {"line", line}, {"differences", dj}};
}
}  // namespace

ordered_json flashinfer_plan_to_json(const SplitPlan& model, const FlashInferPlan& f) {
  ordered_json j = plan_status_json(f);
  const DeviceProfile& d = f.device;
  j["device"] = device_json(d);
  j["device"]["compute_capability"] = std::to_string(d.cc_major) + "." + std::to_string(d.cc_minor);
  j["device"]["max_smem_per_block_optin"] = d.max_smem_per_block_optin;
  // agrees: null when there is nothing to compare (not compiled, planner flash_attn)
  const ordered_json agreement =
      agreement_json(f.ran, compare_flashinfer_plan(model, f), flashinfer_agreement_line(model, f), "flashinfer");
  if (!f.ran) {
    j["agreement"] = agreement;
    return j;
  }
  j["inputs"] = {{"qo_indptr", f.qo_indptr},
                 {"kv_indptr", f.kv_indptr},
                 {"page_size", f.page_size},
                 {"total_num_rows", f.total_num_rows},
                 {"num_qo_heads", f.num_qo_heads},
                 {"num_kv_heads", f.num_kv_heads},
                 {"head_dim_qk", f.head_dim_qk},
                 {"head_dim_vo", f.head_dim_vo},
                 {"kv_dtype_bytes", f.kv_dtype_bytes},
                 {"window_left", f.window_left},
                 {"fixed_split_size", f.fixed_split_size},
                 {"disable_split_kv", f.disable_split_kv},
                 {"enable_cuda_graph", f.enable_cuda_graph},
                 {"uniform_q_len", f.uniform_q_len},
                 {"max_batch_size_if_split", f.max_batch_size_if_split}};
  if (f.available) {
    j["cta_tile_q"] = f.cta_tile_q;
    j["kv_chunk_size"] = f.kv_chunk_size;  // tokens, as returned
    j["kv_chunk_unbounded"] = f.kv_chunk_unbounded;
    if (f.kv_chunk_unbounded)
      j["kv_chunk_note"] = "disable_split_kv: FlashInfer's chunk is INT64_MAX pages and kv_chunk_size is that times page_size " +
                           std::to_string(f.page_size) +
                           (f.page_size > 1 ? ", which overflows int64 (the value above is what it returned)" : "") +
                           "; never read, split_kv is false";
    j["split_kv"] = f.split_kv;
    j["new_batch_size"] = f.new_batch_size;
    j["padded_batch_size"] = f.padded_batch_size;
    j["request_indices"] = f.request_indices;
    j["qo_tile_indices"] = f.qo_tile_indices;
    j["kv_tile_indices"] = f.kv_tile_indices;
    j["merge_indptr"] = f.merge_indptr;
    j["o_indptr"] = f.o_indptr;
    j["float_workspace_bytes"] = f.float_workspace_bytes;
    j["int_workspace_bytes"] = f.int_workspace_bytes;
  }
  j["agreement"] = agreement;
  return j;
}

ordered_json flashinfer_mla_plan_to_json(const FlashInferMlaPlan& f) {
  ordered_json j = plan_status_json(f);
  j["device"] = device_json(f.device);
  const MlaPlanInputs& in = f.inputs;
  j["inputs"] = {{"qo_indptr", in.qo_indptr},   {"kv_indptr", in.kv_indptr}, {"kv_len", in.kv_len}, {"num_heads", in.num_heads},
                 {"head_dim_o", in.head_dim_o}, {"causal", in.causal},       {"num_sm", in.num_sm}};
  auto schedule = [](const MlaSchedule& s) {
    ordered_json w = ordered_json::array();
    for (const MlaWork& x : s.works)
      w.push_back({{"q_indptr", x.q_indptr},
                   {"kv_indptr", x.kv_indptr},
                   {"partial_indptr", x.partial_indptr},
                   {"q_len", x.q_len},
                   {"kv_len", x.kv_len},
                   {"q_start", x.q_start},
                   {"kv_start", x.kv_start},
                   {"kv_end", x.kv_end}});
    return ordered_json{{"num_blks_x", s.num_blks_x},
                        {"num_blks_y", s.num_blks_y},
                        {"work_indptr", s.work_indptr},
                        {"works", w},
                        {"merge_packed_offset_start", s.merge_packed_start},
                        {"merge_packed_offset_end", s.merge_packed_end},
                        {"merge_partial_packed_offset_start", s.merge_partial_start},
                        {"merge_partial_packed_offset_end", s.merge_partial_end},
                        {"merge_partial_stride", s.merge_partial_stride}};
  };
  const MlaPlanModel m = flashinfer_mla_model(f);
  ordered_json model = {{"num_sm", m.inputs.num_sm}, {"refusal", m.refusal}};
  if (m.refusal.empty()) {
    model["cluster_size"] = m.cluster_size;
    model["cluster_tile_q"] = m.cluster_tile_q;
    model["total_kv"] = m.total_kv;
    model["kv_len_limit"] = m.kv_len_limit;
    model["merge_ctas"] = m.merge_ctas;
    model["partial_rows"] = m.partial_rows;
    model["schedule"] = schedule(m.schedule);
  }
  j["model"] = model;
  if (f.available) {
    j["schedule"] = schedule(f.schedule);
    j["int_workspace_bytes"] = f.int_workspace_bytes;
    j["float_workspace_bytes"] = f.float_workspace_bytes;
  }
  j["agreement"] =
      agreement_json(f.ran || f.refused, compare_flashinfer_mla_plan(m, f), flashinfer_mla_agreement_line(m, f), "flashinfer");
  return j;
}

ordered_json flash_attn_plan_to_json(const FlashAttnPlan& f) {
  ordered_json j = plan_status_json(f);
  j["source"] = "attnscope's reproduction of flash_api.cpp (mha_fwd_kvcache, set_params_splitkv, num_splits_heuristic)";
  j["device"] = device_json(f.device);
  if (f.available) {
    j["inputs"] = {{"num_splits_arg", f.num_splits_arg},
                   {"num_splits_from", f.num_splits_from},
                   {"batch_size", f.batch_size},
                   {"num_heads", f.num_heads},
                   {"num_heads_k", f.num_heads_k},
                   {"head_size", f.head_size},
                   {"seqlen_q", f.seqlen_q},
                   {"seqlen_k", f.seqlen_k},
                   {"seqlenq_ngroups_swapped", f.ngroups_swapped},
                   {"paged", f.paged},
                   {"page_block_size", f.page_block_size},
                   {"max_num_blocks_per_seq", f.max_num_blocks_per_seq}};
    j["heuristic"] = {{"block_n", f.block_n},
                      {"num_n_blocks", f.num_n_blocks},
                      {"num_m_blocks", f.num_m_blocks},
                      {"batch_nheads_mblocks", f.batch_nheads_mblocks},
                      {"num_sms_x2", f.num_sms_x2}};
    j["num_splits"] = f.num_splits;
    j["chunk_tokens"] = f.chunk_tokens;
    j["split_kernel"] = f.split_kernel;
    j["accum_bytes"] = f.accum_bytes;
  }
  const SplitPlan& m = f.model;
  j["model"] = {
      {"num_splits", m.num_splits}, {"seqlen_k", m.seqlen_k}, {"chunk_tokens", m.chunk_tokens}, {"split_kv", m.split_kv}};
  j["agreement"] = agreement_json(f.ran, compare_flash_attn_plan(f), flash_attn_agreement_line(f), "flash_attn");
  return j;
}

ordered_json library_plans_to_json(const Plan& p) {
  ordered_json j = {{"flashinfer", flashinfer_plan_to_json(p.split, p.library.flashinfer)}};
  // absorbed MLA cases only, so that the other cases' reports keep their form
  if (!p.library.flashinfer_mla.inputs.kv_len.empty())
    j["flashinfer_mla"] = flashinfer_mla_plan_to_json(p.library.flashinfer_mla);
  if (p.library.flash_attn.asked) j["flash_attn"] = flash_attn_plan_to_json(p.library.flash_attn);
  return j;
}

ordered_json plan_to_json(const CaseSpec& c, const Plan& p) {
  ordered_json j;
  if (p.mask_mod || p.score_mod) {
    // the expressions and their PyTorch form (FlexAttention's mask_mod / score_mod bodies; the peer
    // scripts read these)
    ordered_json e;
    if (p.mask_mod) e["mask_mod"] = {{"text", p.mask_mod->text()}, {"torch", expr_torch_text(*p.mask_mod)}};
    if (p.score_mod) e["score_mod"] = {{"text", p.score_mod->text()}, {"torch", expr_torch_text(*p.score_mod)}};
    j["expressions"] = e;
  }
  const auto& pt = p.pages;
  j["page_table"] = {{"page_size", pt.page_size}, {"num_pages", pt.num_pages},         {"indptr", pt.indptr},
                     {"indices", pt.indices},     {"last_page_len", pt.last_page_len}, {"owner", pt.owner}};
  ordered_json vb = ordered_json::array();
  for (const auto& b : p.local.batches)
    vb.push_back({{"request", b.request},
                  {"q_begin", b.q_begin},
                  {"q_len", b.q_len},
                  {"kv_begin", b.kv_begin},
                  {"kv_len", b.kv_len},
                  {"block_table", b.block_table}});
  j["virtual_batches"] = {{"chunk", p.local.chunk}, {"batches", vb}, {"cu_q", p.local.cu_q}};
  ordered_json units = ordered_json::array();
  for (const auto& u : p.units)
    units.push_back(
        {{"request", u.request}, {"q_begin", u.q_begin}, {"q_len", u.q_len}, {"kv_begin", u.kv_begin}, {"kv_len", u.kv_len}});
  j["units"] = units;
  const auto& s = p.split;
  ordered_json items = ordered_json::array();
  for (const auto& it : s.items)
    items.push_back({it.unit, it.q_tile, it.kv_chunk, it.row_begin, it.row_end, it.kv_begin, it.kv_end});
  j["split"] = {{"planner", planner_name(s.planner)},
                {"group_size", s.group_size},
                {"page_size", s.page_size},
                {"packed_rows", s.packed_rows},
                {"kv_pages", s.kv_pages},
                {"avg_packed_rows", s.avg_packed_rows},
                {"max_items", s.max_items},
                {"cta_tile_q", s.cta_tile_q},
                {"chunk_pages", s.chunk_pages},
                {"chunk_tokens", s.chunk_tokens},
                {"split_kv", s.split_kv},
                {"window_chunks", s.window_chunks},
                {"num_items", s.num_items},
                {"padded_items", s.padded_items},
                {"unit_tiles", s.unit_tiles},
                {"unit_chunks", s.unit_chunks},
                {"items_columns", {"unit", "q_tile", "kv_chunk", "row_begin", "row_end", "kv_begin", "kv_end"}},
                {"items", items},
                {"merge_indptr", s.merge_indptr},
                {"o_indptr", s.o_indptr},
                {"refusal", s.refusal},
                {"num_splits", s.num_splits},
                {"seqlen_k", s.seqlen_k},
                {"reasoning", s.reasoning}};
  if (!s.item_tile_indptr.empty()) {  // a mask_mod: the non-empty KV tiles each item visits
    j["split"]["item_tile_indptr"] = s.item_tile_indptr;
    j["split"]["item_tiles"] = s.item_tiles;
  }
  j["library_plans"] = library_plans_to_json(p);
  const auto& bm = p.blocks;
  ordered_json bu = ordered_json::array();
  for (const auto& u : bm.units) {
    std::string cls;
    for (auto t : u.cls) cls += t == TileClass::kFull ? 'F' : t == TileClass::kPartial ? 'P' : '.';
    bu.push_back({{"unit", u.unit},
                  {"q_tiles", u.q_tiles},
                  {"kv_tiles", u.kv_tiles},
                  {"classes", cls},
                  {"full", u.full},
                  {"partial", u.partial},
                  {"empty", u.empty}});
  }
  j["block_map"] = {{"q_tile_rows", bm.q_tile_rows},
                    {"kv_tile", bm.kv_tile},
                    {"sparsity", bm.sparsity()},
                    {"full", bm.full},
                    {"partial", bm.partial},
                    {"empty", bm.empty},
                    {"units", bu},
                    {"text", block_map_text(bm)}};
  j["plan_us"] = p.plan_us;
  (void)c;
  return j;
}

ordered_json result_to_json(const Result& r) {
  ordered_json j;
  j["backend"] = r.backend;
  j["status"] = status_name(r.status);
  j["message"] = r.message;
  j["sampled"] = !r.row_valid.empty();
  if (r.ok()) j["digest"] = result_digest(r);
  // a library's own plan read back from its call beside attnscope's model (text lines, as `run` prints them)
  if (!r.library_plan.empty()) j["library_plan"] = r.library_plan;
  if (r.graph) {  // /cuda_graph: the capture and replay (docs/conventions.md, "CUDA-graph replay")
    const GraphReplayReport& g = *r.graph;
    auto grid = [](const GraphGrid& x) {
      return ordered_json{{"entries", x.entries},
                          {"padded_batch", x.padded_batch},
                          {"kv_heads", x.kv_heads},
                          {"ctas_needed", x.new_batch},
                          {"split_kv", x.split_kv},
                          {"cta_tile_q", x.cta_tile_q},
                          {"kv_chunk_tokens", x.kv_chunk_tokens},
                          {"float_workspace", x.float_ws},
                          {"int_workspace", x.int_ws}};
    };
    ordered_json checks = ordered_json::array();
    for (const auto& k : g.checks)
      checks.push_back({{"check", k.what},
                        {"verdict", k.skipped ? "not checked"
                                    : k.pass  ? "pass"
                                              : "FAIL"},
                        {"detail", k.detail}});
    j["cuda_graph"] = {{"captured", g.captured},
                       {"not_captured", g.not_captured},
                       {"engine", g.engine},
                       {"bucket", g.bucket},
                       {"live", g.live},
                       {"captured_grid", grid(g.captured_grid)},
                       {"replay_grid", grid(g.replay_grid)},
                       {"checks", checks},
                       {"notes", g.notes}};
    if (g.replay_reps > 0)
      j["cuda_graph"]["time_ms"] = {{"replay_median", g.replay_ms}, {"replays", g.replay_reps}, {"eager_median", g.eager_ms}};
  }
  j["host_ms"] = r.timing.host_ms;
  if (r.timing.reps > 0)
    j["device_ms"] = {{"median", r.timing.device_ms},
                      {"min", r.timing.device_ms_min},
                      {"max", r.timing.device_ms_max},
                      {"reps", r.timing.reps}};
  return j;
}

static ordered_json stats_to_json(const DiffStats& s) {
  return {{"count", s.count},
          {"max_abs", num(s.max_abs)},
          {"mean_abs", num(s.mean_abs)},
          {"rel_l2", num(s.rel_l2)},
          {"nmse", num(s.nmse)},
          {"max_ulp", s.max_ulp},
          {"bit_identical", s.bit_identical},
          {"nan_a", s.nan_a},
          {"inf_a", s.inf_a},
          {"nan_b", s.nan_b},
          {"inf_b", s.inf_b},
          {"nonfinite_mismatch", s.nonfinite_mismatch},
          {"allclose_1e-2_1e-3", s.allclose_loose},
          {"allclose_1e-3_1e-4", s.allclose_tight}};
}

ordered_json diff_to_json(const DiffReport& d) {
  ordered_json j;
  j["backend"] = d.backend;
  j["baseline"] = d.baseline;
  j["available"] = d.available;
  j["verdict"] = {
      {"pass", d.verdict.pass}, {"skipped", d.verdict.skipped}, {"rule", d.verdict.rule}, {"detail", d.verdict.detail}};
  if (!d.available) return j;
  j["sampled"] = d.sampled;
  j["rows_compared"] = d.rows_compared;
  j["o"] = stats_to_json(d.o);
  j["lse"] = stats_to_json(d.lse);
  if (d.lowp_max_abs) j["lowp_max_abs"] = num(*d.lowp_max_abs);
  if (d.vs_original) j["o_vs_original_ideal"] = stats_to_json(*d.vs_original);
  if (d.baseline_vs_original) j["baseline_vs_original_ideal"] = stats_to_json(*d.baseline_vs_original);
  return j;
}

ordered_json session_to_json(const Session& s) {
  ordered_json j;
  j["schema"] = "attnscope/report@1";
  j["case"] = s.spec().name;
  j["sample_rows"] = s.sample_rows ? ordered_json(*s.sample_rows) : ordered_json(nullptr);
  j["plan"] = {{"planner", planner_name(s.plan.split.planner)}, {"cta_tile_q", s.plan.split.cta_tile_q},
               {"chunk_pages", s.plan.split.chunk_pages},       {"split_kv", s.plan.split.split_kv},
               {"num_items", s.plan.split.num_items},           {"plan_us", s.plan.plan_us}};
  j["library_plans"] = library_plans_to_json(s.plan);
  ordered_json rs = ordered_json::array();
  for (const auto& r : s.results) rs.push_back(result_to_json(r));
  j["results"] = rs;
  ordered_json ds = ordered_json::array();
  for (const auto& d : s.diffs) ds.push_back(diff_to_json(d));
  j["comparisons"] = ds;
  if (s.spec().fp8_kv()) {
    ordered_json f;
    f["kv_dtype"] = fp8_name(*s.spec().kv_cache.fp8);
    f["granularity"] = granularity_name(s.spec().kv_cache.scales.granularity);
    f["fp8_attention"] = s.spec().fp8_attention.has_value();
    // the dequantised ideal against the original ideal: FP8's error, not any kernel's
    f["quantisation_error"] = s.quantisation ? stats_to_json(s.quantisation->o) : ordered_json(nullptr);
    f["note"] = s.fp8_note;
    j["fp8"] = f;
  }
  ordered_json rp = ordered_json::array();
  std::vector<ReplayCheck> checks = s.replay;  // the digests, then the recorded plan and verdicts
  checks.insert(checks.end(), s.replay_records.begin(), s.replay_records.end());
  for (const auto& r : checks)
    rp.push_back({{"kind", replay_kind_name(r.kind)},
                  {"backend", r.backend},
                  {"recorded", r.recorded},
                  {"now", r.now},
                  {"state", replay_state_name(r.state, r.kind)},
                  {"why", r.why},
                  {"match", r.match()}});
  j["replay"] = rp;
  j["environment"] = environment_to_json(s.env);
  j["failed"] = s.failed();
  const RunSummary sum = s.summary();
  j["summary"] = {{"state", sum.state_name()}, {"exit_code", sum.exit_code()}, {"line", sum.line()}};
  return j;
}

}  // namespace attnscope
