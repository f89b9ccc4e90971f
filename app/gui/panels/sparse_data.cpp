#include "sparse_data.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>

#include "attnscope/gen.h"
#include "attnscope/mla.h"
#include "case_json.h"

namespace attnscope::gui {

namespace {

// The K rows a head's logits read over keys [0, n) of request r: the latent rows (absorbed: the same
// for every head), or [W_uk[h] c_kv ; k_pe] per head (non-absorbed). Same bits as mla_key_row.
struct KeyRows {
  const CaseSpec& c;
  MlaGen g;
  int r, n;
  std::vector<float> latent;  // [n][latent]
  KeyRows(const CaseSpec& cs, int req, int keys) : c(cs), g(mla_gen(cs)), r(req), n(keys) {
    latent.resize(static_cast<size_t>(n) * g.latent());
    for (int k = 0; k < n; ++k) {
      const int64_t pos = c.key_source.position(k);
      const std::vector<float> row = mla_latent_rows(g, c.key_seed(r, pos), pos, 1);
      std::copy(row.begin(), row.end(), latent.begin() + static_cast<size_t>(k) * g.latent());
    }
  }
  // [n][head_dim_qk] for head h: the latent itself when absorbed
  std::vector<float> of_head(int h) const {
    if (c.mla->absorbed) return latent;
    std::vector<float> w(static_cast<size_t>(g.nope) * g.rank), out(static_cast<size_t>(n) * c.head_dim_qk);
    for (int i = 0; i < g.nope; ++i)
      for (int d = 0; d < g.rank; ++d) w[static_cast<size_t>(i) * g.rank + d] = mla_weight(g, TensorId::kWuk, h, i, d);
    for (int k = 0; k < n; ++k) {
      const float* lat = latent.data() + static_cast<size_t>(k) * g.latent();
      float* row = out.data() + static_cast<size_t>(k) * c.head_dim_qk;
      for (int i = 0; i < g.nope; ++i) row[i] = mla_dot(g, g.rank, w.data() + static_cast<size_t>(i) * g.rank, 1, lat, 1);
      for (int j = 0; j < g.rope; ++j) row[g.nope + j] = lat[g.rank + j];
    }
    return out;
  }
};

// Head h's dense softmax over keys [0, n) in fp64: logits q . k x sm_scale, as recall_of_mass sums them.
std::vector<double> head_softmax(const CaseSpec& c, const KeyRows& keys, int r, int q, int h) {
  const std::vector<float> qv = mla_query_row(c, r, q, h), kr = keys.of_head(h);
  const int D = c.head_dim_qk, n = keys.n;
  const double scale = c.sm_scale_or_default();
  std::vector<double> x(n);
  double mx = -std::numeric_limits<double>::infinity();
  for (int k = 0; k < n; ++k) {
    const float* kv = kr.data() + static_cast<size_t>(k) * D;
    double dot = 0;
    for (int d = 0; d < D; ++d) dot += static_cast<double>(qv[d]) * kv[d];
    x[k] = dot * scale;
    mx = std::max(mx, x[k]);
  }
  double all = 0;
  for (int k = 0; k < n; ++k) all += x[k] = std::exp(x[k] - mx);
  for (double& v : x) v /= all;
  return x;
}

double kept_share(const std::vector<double>& p, const std::vector<uint8_t>& kept) {
  double s = 0;
  for (size_t k = 0; k < p.size(); ++k)
    if (kept[k]) s += p[k];
  return s;
}

}  // namespace

int64_t sparse_head_macs(const CaseSpec& c, int visible) {
  int64_t per_key = c.head_dim_qk;
  if (c.mla && !c.mla->absorbed) per_key += int64_t{c.mla->qk_nope_dim} * c.mla->kv_lora_rank;
  return per_key * std::max(1, visible);
}

SparseRow sparse_row(const CaseSpec& c, const SparseSelection& sel, int r, int q, int head, bool with_mass, bool all_heads) {
  SparseRow s;
  s.request = r;
  s.query = q = std::clamp(q, 0, std::max(0, sel.q_len - 1));
  s.q_abs = c.requests[r].kv_len - c.requests[r].q_len + q;
  s.visible = std::max(0, s.q_abs + 1);
  s.top_k = sel.top_k;
  s.given = sel.given;
  s.heads = c.num_qo_heads;
  s.head = std::clamp(head, 0, std::max(0, c.num_qo_heads - 1));
  s.is_kept.assign(s.visible, 0);
  if (sel.q_len == 0) return s;
  s.kept = sel.kept(q);
  s.padding = sel.padding(q);
  s.nans = sel.nans.empty() ? 0 : sel.nans[q];
  const int* row = sel.row(q);
  for (int i = 0; i < sel.top_k; ++i)
    if (row[i] >= 0 && row[i] < s.visible) s.is_kept[row[i]] = 1;
  if (!with_mass || s.visible == 0) return s;
  const KeyRows keys(c, r, s.visible);
  s.mass = head_softmax(c, keys, r, q, s.head);
  s.kept_mass = kept_share(s.mass, s.is_kept);
  if (all_heads) {
    const int64_t per_head = sparse_head_macs(c, s.visible);
    const int n = static_cast<int>(std::clamp<int64_t>(kSparseHeadsMacs / per_head, 1, c.num_qo_heads));
    for (int h = 0; h < n; ++h)
      s.recall.push_back(h == s.head ? s.kept_mass : kept_share(head_softmax(c, keys, r, q, h), s.is_kept));
  }
  return s;
}

SparseSlots sparse_slots_of_row(const PageTable& pt, int r, int q, const int* row, int top_k) {
  SparseSlots s;
  s.request = r;
  s.query = q;
  s.page_size = pt.page_size;
  s.page_count.assign(pt.num_pages, 0);
  s.page_outside.assign(pt.num_pages, 0);
  const int pages = pt.pages_of(r);
  const int* page_row = pt.indices.data() + pt.indptr[r];
  s.table.assign(page_row, page_row + std::min(pages, kMaxSlotPages));
  s.kv_len = pages > 0 ? (pages - 1) * pt.page_size + pt.last_page_len[r] : 0;
  s.slot_selected.assign(s.table.size() * pt.page_size, 0);
  for (int i = 0; i < top_k; ++i) {
    const int idx = row[i];
    if (idx < 0) {
      ++s.padding;
      continue;
    }
    ++s.kept;
    if (idx < static_cast<int>(s.slot_selected.size())) s.slot_selected[idx] = 1;
    // an index past the request's page table, or a page another request owns, is read from the wrong place
    int64_t slot = -1;
    if (idx / pt.page_size < pages) {
      slot = sparse_slot(page_row, pt.page_size, idx);
      const int page = static_cast<int>(slot / pt.page_size);
      if (page >= 0 && page < pt.num_pages) {
        ++s.page_count[page];
        if (pt.owner[page] != r) s.page_outside[page] = 1, ++s.outside;
      } else {
        slot = -1;
      }
    }
    if (slot < 0) ++s.outside;
    if (s.first_idx.size() < 6) s.first_idx.push_back(idx), s.first_slot.push_back(slot);
  }
  for (int n : s.page_count) s.pages_touched += n > 0;
  return s;
}

SparseMaskItems build_sparse_mask_items(const CaseSpec& c, const SparseSelection& sel, int r, int explained_q, int head,
                                        int max_cells) {
  SparseMaskItems m;
  const int q_len = c.requests[r].q_len, kv_len = c.requests[r].kv_len;
  m.request = r;
  m.head = head;
  m.q_per_cell = std::max(1, (q_len + max_cells - 1) / max_cells);
  m.k_per_cell = std::max(1, (kv_len + max_cells - 1) / max_cells);
  m.rows = (q_len + m.q_per_cell - 1) / m.q_per_cell;
  m.cols = (kv_len + m.k_per_cell - 1) / m.k_per_cell;
  const size_t cells = static_cast<size_t>(m.rows) * m.cols;
  m.cls.assign(cells, 0);
  m.mass.assign(cells, std::numeric_limits<float>::quiet_NaN());
  std::vector<int> mass_rows(cells, 0);
  // the mass of every row while the budget lasts (the explained row always): a long prefill gets one
  const int64_t per_row = sparse_head_macs(c, kv_len);
  const bool every_row = per_row * std::max(1, q_len) <= kSparseMassMacs;
  explained_q = std::clamp(explained_q, 0, std::max(0, q_len - 1));
  for (int q = 0; q < q_len; ++q) {
    const bool with_mass = every_row || q == explained_q;
    const SparseRow row = sparse_row(c, sel, r, q, head, with_mass);
    if (q == explained_q) m.row = row;
    const size_t base = static_cast<size_t>(q / m.q_per_cell) * m.cols;
    for (int k = 0; k < row.visible && k < kv_len; ++k) {
      uint8_t& cl = m.cls[base + k / m.k_per_cell];
      cl = std::max<uint8_t>(cl, row.is_kept[k] ? 2 : 1);
    }
    if (row.mass.empty()) continue;
    ++m.rows_with_mass;
    std::vector<double> cell_mass(m.cols, 0);
    for (int k = 0; k < row.visible && k < kv_len; ++k)
      if (row.is_kept[k]) cell_mass[k / m.k_per_cell] += row.mass[k];
    for (int col = 0; col < m.cols; ++col) {
      if (m.cls[base + col] != 2) continue;
      float& v = m.mass[base + col];
      v = (std::isnan(v) ? 0.f : v) + static_cast<float>(cell_mass[col]);
      ++mass_rows[base + col];
    }
  }
  for (size_t i = 0; i < cells; ++i)
    if (mass_rows[i] > 1) m.mass[i] /= static_cast<float>(mass_rows[i]);
  return m;
}

std::string sparse_case_key(const CaseSpec& c, const Plan& p) {
  CaseSpec k = c;
  if (k.sparse) k.sparse->indices.clear();
  char b[40];
  std::snprintf(b, sizeof b, "|%p", static_cast<const void*>(p.sparse.get()));
  return case_to_json(k).dump() + b;
}

}  // namespace attnscope::gui
