// Batch-invariance check: the batch, then every request alone, compared bit for bit.
#include "invariance.h"

#include "attnscope/library_plan.h"
#include "attnscope/plan.h"
#include "attnscope/registry.h"
#include "session.h"

namespace attnscope {

int PlannerInvariance::identical_requests() const {
  int n = 0;
  for (int d : differing_values) n += d == 0;
  return n;
}

namespace {

// Backends that run their library's own plan (Plan::library.flashinfer, the only library planner so
// far) take their tile and chunk from it, and the flash_attn model has no equivalent there.
bool runs_flashinfer_plan(const std::string& backend) {
  const BackendInfo* b = backend_info(backend);
  return b && b->library_plan;
}

// The tile and chunk (pages) the backend ran with: FlashInfer's plan for those, else the
// model's. FlashInfer's chunk is in tokens, converted to pages; -1 = unbounded (disable_split_kv).
void plan_tile_chunk(const std::string& backend, const Plan& p, int* tile, int* chunk_pages) {
  const FlashInferPlan& lib = p.library.flashinfer;
  if (runs_flashinfer_plan(backend) && lib.available) {
    *tile = lib.cta_tile_q;
    *chunk_pages = lib.kv_chunk_unbounded || lib.page_size <= 0 ? -1 : static_cast<int>(lib.kv_chunk_size / lib.page_size);
    return;
  }
  *tile = p.split.cta_tile_q;
  *chunk_pages = p.split.chunk_pages;
}

}  // namespace

InvarianceReport check_invariance(const CaseSpec& base, const InvarianceOptions& opt) {
  validate_case(base, &registry_ids());
  InvarianceReport rep;
  const std::string backend = opt.backend.empty() ? backend_for_role(Role::kPlanTwin) : opt.backend;
  rep.backend = backend;
  rep.case_name = base.name;
  const int R = static_cast<int>(base.requests.size());
  rep.num_requests = R;
  const int Hq = base.num_qo_heads, Dv = base.head_dim_vo;

  for (Planner pl : opt.planners) {
    PlannerInvariance pi;
    pi.planner = pl;
    if (runs_flashinfer_plan(backend) && pl == Planner::kFlashAttn) {
      pi.error = backend + " plans with FlashInfer's own planner, which has no flash_attn mode (skipped)";
      rep.planners.push_back(pi);
      continue;
    }
    CaseSpec c = with_planner(base, pl, opt.fixed_split_size, opt.fixed_tile_q);
    c.backends = {backend};
    c.comparisons.clear();
    c.sample_rows.reset();
    // keep each request's data when it runs alone
    for (int r = 0; r < R; ++r) c.requests[r].seed = base.request_seed(r);
    if (runs_flashinfer_plan(backend))  // FlashInfer takes a split size, never a tile
      pi.note = pl == Planner::kFixed ? "fixed_split_size " + std::to_string(*c.split.fixed_split_size) + " pages"
                : pl == Planner::kOff ? "disable_split_kv"
                                      : "FlashInfer's auto split";
    else if (pl == Planner::kFixed)
      pi.note =
          "fixed split " + std::to_string(*c.split.fixed_split_size) + " pages, tile " + std::to_string(*c.split.fixed_tile_q);
    else
      pi.note = c.split.fixed_tile_q ? "tile fixed at " + std::to_string(*c.split.fixed_tile_q) : "auto tile";
    if (opt.progress) opt.progress(std::string(planner_name(pl)) + ": batch");
    CaseFile f;
    f.spec = c;
    auto batch = run_session(f);
    const Result& br = batch->results.at(0);
    plan_tile_chunk(backend, batch->plan, &pi.batch_tile, &pi.batch_chunk_pages);
    if (runs_flashinfer_plan(backend)) pi.note += "; tile and chunk from FlashInfer's own plan";
    if (!br.ok()) {
      pi.error = br.backend + " " + status_name(br.status) + ": " + br.message;
      rep.planners.push_back(pi);
      continue;
    }
    int64_t tok = 0;
    for (int r = 0; r < R; ++r) {
      if (opt.progress) opt.progress(std::string(planner_name(pl)) + ": request " + std::to_string(r) + " alone");
      CaseFile fr;
      fr.spec = sub_case(c, {r});
      auto alone = run_session(fr);
      const Result& ar = alone->results.at(0);
      int tile = 0, chunk = 0;
      plan_tile_chunk(backend, alone->plan, &tile, &chunk);
      pi.alone_tile.push_back(tile);
      pi.alone_chunk_pages.push_back(chunk);
      const int q_len = c.requests[r].q_len;
      int diff = 0;
      if (!ar.ok()) {
        diff = -1;
      } else {
        for (int64_t i = 0; i < static_cast<int64_t>(q_len) * Hq * Dv; ++i)
          diff += f32_bits(ar.o[i]) != f32_bits(br.o[tok * Hq * Dv + i]);
        for (int64_t i = 0; i < static_cast<int64_t>(q_len) * Hq; ++i)
          diff += f32_bits(ar.lse[i]) != f32_bits(br.lse[tok * Hq + i]);
      }
      pi.differing_values.push_back(diff);
      tok += q_len;
    }
    rep.planners.push_back(pi);
  }
  return rep;
}

}  // namespace attnscope
