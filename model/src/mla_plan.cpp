// attnscope's model of FlashInfer's MLA planner (docs/conventions.md section 14) and its comparison
// with the library's own plan. Host code, built in every configuration.
#include "attnscope/mla_plan.h"

#include <algorithm>
#include <sstream>
#include <utility>

#include "attnscope/library_plan.h"

namespace attnscope {

namespace {

int ceil_div(int64_t a, int64_t b) { return static_cast<int>((a + b - 1) / b); }

// A tile's keys under the causal bound: every tile but the request's last stops where its last
// packed row's query stops (bottom-right aligned), clamped to [0, kv_len).
int tile_keys(const MlaPlanInputs& in, int q_len, int kv_len, int tile, int tiles, int tile_rows) {
  if (!in.causal || tile + 1 == tiles) return kv_len;
  const int end = kv_len - q_len + ceil_div(static_cast<int64_t>(tile + 1) * tile_rows, in.num_heads);
  return std::max(std::min(end, kv_len), 0);
}

// The per-item key budget: the even share of keys per cluster, rounded up to 32 / 64 / 128 / 192
// for short shares and to a multiple of 256 above that.
int round_limit(int64_t share) {
  const int x = static_cast<int>(std::max<int64_t>(share, 1));
  if (x <= 8) return 32;
  if (x <= 16) return 64;
  if (x <= 32) return 128;
  if (x <= 64) return 192;
  return ceil_div(x, 256) * 256;
}

int cluster_size_of(const MlaPlanInputs& in) {
  const int batch = static_cast<int>(in.kv_len.size());
  int64_t rows = 0;
  for (int i = 0; i < batch; ++i) rows += static_cast<int64_t>(in.qo_indptr[i + 1] - in.qo_indptr[i]) * in.num_heads;
  return rows / batch > 64 ? 2 : 1;  // average packed rows per request
}

// The least-loaded cluster first: a binary heap over (cluster, accumulated cost) kept by the standard
// library's heap operations on a vector that starts as (0, 0), (1, 0), ... (already a heap), so that
// clusters of equal cost come out in the same order as the library's planner takes them.
class ClusterHeap {
 public:
  explicit ClusterHeap(int n) {
    for (int i = 0; i < n; ++i) h_.emplace_back(i, 0.f);
  }
  std::pair<int, float> pop() {
    std::pop_heap(h_.begin(), h_.end(), later);
    const auto e = h_.back();
    h_.pop_back();
    return e;
  }
  void push(std::pair<int, float> e) {
    h_.push_back(e);
    std::push_heap(h_.begin(), h_.end(), later);
  }

 private:
  static bool later(const std::pair<int, float>& a, const std::pair<int, float>& b) { return a.second > b.second; }
  std::vector<std::pair<int, float>> h_;
};

// Splits one tile's keys over the clusters, recording the merge CTAs when it is split.
struct Scheduler {
  const MlaPlanInputs& in;
  MlaPlanModel& m;
  ClusterHeap heap;
  std::vector<std::vector<MlaWork>> per_cluster;

  void add_merges(int q_indptr, int tile, int rows, int keys) {
    MlaSchedule& s = m.schedule;
    const int chunks = std::max(keys * m.cluster_size / m.kv_len_limit, 1);
    const int chunk_rows = ceil_div(rows, chunks);
    const int base = q_indptr * in.num_heads + tile * m.cluster_tile_q;
    for (int off = 0; off < rows; off += chunk_rows) {
      const int k = m.merge_ctas++;
      if (k >= in.num_sm) continue;  // cannot happen (the planner's bound); counted and refused below
      s.merge_packed_start[k] = base + off;
      s.merge_packed_end[k] = base + std::min(off + chunk_rows, rows);
      s.merge_partial_start[k] = m.partial_rows + off;
      s.merge_partial_end[k] = m.partial_rows + ceil_div(keys, m.kv_len_limit) * rows;
      s.merge_partial_stride[k] = rows;
    }
  }

  void tile(int r, int tile, int tiles) {
    const int q_len = in.qo_indptr[r + 1] - in.qo_indptr[r], kv_len = in.kv_len[r];
    const int packed = q_len * in.num_heads;
    const int rows = std::min(m.cluster_tile_q, packed - tile * m.cluster_tile_q);
    int left = tile_keys(in, q_len, kv_len, tile, tiles, m.cluster_tile_q);
    const bool split = left > m.kv_len_limit;
    if (split) add_merges(in.qo_indptr[r], tile, rows, left);
    const bool empty = left == 0;  // still one item, which writes the empty rows
    int start = 0;
    while (left > 0 || empty) {
      auto [cl, cost] = heap.pop();
      const int len = std::min(left, m.kv_len_limit);
      heap.push({cl, cost + (2 * static_cast<float>(m.cluster_tile_q) + static_cast<float>(len))});
      MlaWork w;
      w.q_indptr = in.qo_indptr[r];
      w.kv_indptr = in.kv_indptr[r];
      w.q_len = q_len;
      w.kv_len = kv_len;
      w.partial_indptr = split ? m.partial_rows : -1;
      if (split) m.partial_rows += rows;
      w.q_start = tile * m.cluster_tile_q;
      w.kv_start = start;
      w.kv_end = start + len;
      per_cluster[cl].push_back(w);
      left -= len;
      start += len;
      if (empty) break;
    }
  }
};

}  // namespace

MlaPlanInputs mla_plan_inputs(const CaseSpec& c, const std::vector<WorkUnit>& units, int num_sm) {
  MlaPlanInputs in;
  const int ps = c.effective_page_size();
  in.qo_indptr.assign(1, 0);
  in.kv_indptr.assign(1, 0);
  for (const WorkUnit& u : units) {
    in.qo_indptr.push_back(in.qo_indptr.back() + u.q_len);
    in.kv_indptr.push_back(in.kv_indptr.back() + (u.kv_len + ps - 1) / ps);
    in.kv_len.push_back(u.kv_len);
  }
  in.num_heads = c.num_qo_heads;
  in.head_dim_o = c.head_dim_vo;
  in.causal = c.attention.causal;
  in.num_sm = num_sm;
  return in;
}

int64_t mla_work_bound(const MlaPlanInputs& in) {
  if (in.kv_len.empty() || in.num_sm <= 0 || in.num_heads <= 0) return 0;
  const int cs = cluster_size_of(in);
  int64_t tiles = 0;
  for (size_t i = 0; i < in.kv_len.size(); ++i)
    tiles += ceil_div(static_cast<int64_t>(in.qo_indptr[i + 1] - in.qo_indptr[i]) * in.num_heads, 64 * cs);
  return tiles + in.num_sm / cs;
}

MlaPlanModel model_mla_plan(const MlaPlanInputs& in) {
  MlaPlanModel m;
  m.inputs = in;
  if (in.kv_len.empty()) {
    m.refusal = "an empty batch (FlashInfer's MLAPlan divides by the batch size)";
    return m;
  }
  if (in.num_sm <= 0 || in.num_heads <= 0) {
    m.refusal = "no SMs or no heads to plan for";
    return m;
  }
  if (mla_work_bound(in) > kMlaMaxWorks) {
    m.refusal = "up to " + std::to_string(mla_work_bound(in)) +
                " work items (query tiles + clusters): FlashInfer's MLAPlan holds " + std::to_string(kMlaMaxWorks) +
                " and does not check";
    return m;
  }
  const int batch = static_cast<int>(in.kv_len.size());
  m.cluster_size = cluster_size_of(in);
  const int clusters = in.num_sm / m.cluster_size;
  m.cluster_tile_q = 64 * m.cluster_size;
  MlaSchedule& s = m.schedule;
  s.num_blks_x = m.cluster_size;
  s.num_blks_y = clusters;
  for (int r = 0; r < batch; ++r) {
    const int q_len = in.qo_indptr[r + 1] - in.qo_indptr[r];
    const int tiles = ceil_div(static_cast<int64_t>(q_len) * in.num_heads, m.cluster_tile_q);
    for (int t = tiles - 1; t >= 0; --t) m.total_kv += tile_keys(in, q_len, in.kv_len[r], t, tiles, m.cluster_tile_q);
  }
  m.kv_len_limit = round_limit((m.total_kv + clusters - 1) / clusters);
  for (auto* v :
       {&s.merge_packed_start, &s.merge_packed_end, &s.merge_partial_start, &s.merge_partial_end, &s.merge_partial_stride})
    v->assign(in.num_sm, 0);

  Scheduler sch{in, m, ClusterHeap(clusters), std::vector<std::vector<MlaWork>>(clusters)};
  // requests in order, each one's tiles from the last (the longest under causal) to the first
  for (int r = 0; r < batch; ++r) {
    const int tiles = ceil_div(static_cast<int64_t>(in.qo_indptr[r + 1] - in.qo_indptr[r]) * in.num_heads, m.cluster_tile_q);
    for (int t = tiles - 1; t >= 0; --t) sch.tile(r, t, tiles);
  }
  if (m.merge_ctas > in.num_sm) {
    m.refusal = std::to_string(m.merge_ctas) + " merge CTAs for " + std::to_string(in.num_sm) + " SMs";
    s = MlaSchedule();
    return m;
  }
  s.work_indptr.assign(1, 0);
  for (auto& list : sch.per_cluster) {
    s.works.insert(s.works.end(), list.begin(), list.end());
    s.work_indptr.push_back(static_cast<int>(s.works.size()));
  }
  return m;
}

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
