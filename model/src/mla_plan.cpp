// attnscope's model of FlashInfer's MLA planner (docs/conventions.md section 14); its comparison with
// the library's own plan is library_plan_mla.cpp's. Host code, built in every configuration.
#include "attnscope/mla_plan.h"

#include <algorithm>
#include <utility>

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

}  // namespace attnscope
