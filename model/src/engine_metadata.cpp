// Engine metadata: what both engines share (the virtual-batch helper, the mask rules neither engine's
// kernel call has an argument for) and the dispatch. The engines' own derivations are in
// engine_metadata_sglang.cpp and engine_metadata_vllm.cpp.
#include "attnscope/engine_metadata.h"

#include <algorithm>
#include <map>
#include <sstream>

#include "engine_metadata_detail.h"

namespace attnscope {

const EngineSource kSglangSource = {"sgl-project/sglang", "python/sglang/srt/layers/attention/flashattention_backend.py",
                                    "756596d14cbf314dfa846f62064e4a9113f826ef", ""};
const EngineSource kVllmSource = {
    "vllm-project/vllm", "vllm/v1/attention/backends/flashinfer.py", "00a817ada81626793c9e2432903ee4c5b33ab33a",
    "vllm/v1/attention/backends/utils.py at 00bd1493b3e82d6c13c68ee8a0e1c5a96707e190 (split_decodes_and_prefills, "
    "reorder_batch_to_split_decodes_and_prefills, make_local_attention_virtual_batches); "
    "vllm/attention/layers/chunked_local_attention.py (the builder wrapper that calls it)"};

const char* engine_id(Engine e) {
  switch (e) {
    case Engine::kSglangFa:
      return "sglang-fa";
    case Engine::kVllmFlashInfer:
      return "vllm-flashinfer";
    case Engine::kSglangNsa:
      return "sglang-nsa";
    case Engine::kVllmFlashMlaSparse:
      return "vllm-flashmla-sparse";
  }
  return "";
}

std::optional<Engine> parse_engine(const std::string& s) {
  for (Engine e : {Engine::kSglangFa, Engine::kVllmFlashInfer, Engine::kSglangNsa, Engine::kVllmFlashMlaSparse})
    if (s == engine_id(e)) return e;
  return std::nullopt;
}

bool engine_feeds_backends(Engine e) { return e == Engine::kSglangFa || e == Engine::kVllmFlashInfer; }

const EngineSource& engine_source(Engine e) {
  switch (e) {
    case Engine::kSglangFa:
      return kSglangSource;
    case Engine::kVllmFlashInfer:
      return kVllmSource;
    case Engine::kSglangNsa:
      return kSglangNsaSource;
    case Engine::kVllmFlashMlaSparse:
      return kVllmSparseSource;
  }
  return kSglangSource;
}

const EngineTensor* EngineView::find(const std::string& name) const {
  for (const auto& t : tensors)
    if (t.name == name) return &t;
  return nullptr;
}

int engine_cell_owner(const PageTable& pt, int64_t value, bool slots) {
  const int64_t page = slots ? value / pt.page_size : value;
  if (value < 0 || page >= pt.num_pages) return kCellOutside;
  return pt.owner[static_cast<size_t>(page)];
}

std::string engine_cell_text(const PageTable& pt, int64_t value, bool slots) {
  const int64_t page = slots ? value / pt.page_size : value;
  const std::string what =
      slots ? "slot " + std::to_string(value) + " = page " + std::to_string(page) + " + " + std::to_string(value % pt.page_size)
            : "page " + std::to_string(value);
  const int owner = engine_cell_owner(pt, value, slots);
  if (owner == kCellOutside) return what + ": outside the pool of " + std::to_string(pt.num_pages) + " pages";
  if (owner == kPageNull) return what + ": the null page (no request's; a zeroed table reads 0)";
  if (owner == kPageUnused) return what + ": unused";
  int j = 0;
  for (int i = pt.indptr[owner]; i < pt.indptr[owner + 1]; ++i)
    if (pt.indices[i] == page) j = i - pt.indptr[owner];
  const int first = j * pt.page_size;
  const int last = first + (j + 1 == pt.pages_of(owner) ? pt.last_page_len[owner] : pt.page_size) - 1;
  if (slots) return what + ": request " + std::to_string(owner) + ", key " + std::to_string(first + value % pt.page_size);
  return what + ": request " + std::to_string(owner) + "'s page " + std::to_string(j) + " (keys " + std::to_string(first) + ".." +
         std::to_string(last) + ")";
}

namespace engine_detail {

namespace {
int64_t cdiv(int64_t a, int64_t b) { return (a + b - 1) / b; }
}  // namespace

int sglang_effective_chunk(int chunk, int max_seq_len, int page_size) {
  int eff = std::min(chunk, max_seq_len);
  eff = (eff / page_size) * page_size;
  return eff < page_size ? page_size : eff;
}

// Each request is cut where its keys cross a chunk boundary: the first virtual batch holds the new
// tokens up to the end of the chunk the cached context ends in, then one per whole chunk. The
// block-table row of a virtual batch starts at its first key's page and spans chunk / page_size
// columns of the request's row, each column index clipped to the table's last column.
LocalBatches local_virtual_batches(int chunk, const std::vector<int>& q_lens, const std::vector<int>& seq_lens,
                                   const TableCell& cell, int width, int page_size) {
  LocalBatches lb;
  lb.chunk = chunk;
  lb.cu_seqlens_q.push_back(0);
  const int cols = chunk / page_size;
  for (size_t r = 0; r < q_lens.size(); ++r) {
    const int q = q_lens[r], s = seq_lens[r];
    const int first = std::min(chunk - (s - q) % chunk, q);
    const int last_tokens = s % chunk == 0 ? chunk : s % chunk;
    const int blocks = 1 + static_cast<int>(cdiv(q - first, chunk));
    for (int a = 0; a < blocks; ++a) {
      const int ra = blocks - a - 1;
      const int sq = a == 0 ? first : std::min(q - first - chunk * (a - 1), chunk);
      const int sk = ra == 0 ? last_tokens : chunk;
      const int start = s - (ra * chunk + last_tokens);
      lb.seqlens_q.push_back(sq);
      lb.cu_seqlens_q.push_back(lb.cu_seqlens_q.back() + sq);
      lb.seqlens_k.push_back(sk);
      lb.k_start.push_back(start);
      lb.request.push_back(static_cast<int>(r));
      std::vector<int64_t> row;
      for (int i = 0; i < cols; ++i) row.push_back(cell(static_cast<int>(r), std::min(start / page_size + i, width - 1)));
      lb.block_table.push_back(std::move(row));
    }
  }
  return lb;
}

// Regions: 0 decode (few new tokens over a cached context), 1 extend (more, over a context), 2
// prefill (no context). Positions whose region differs from the sorted target are paired in order
// and the states swapped along each cycle, exactly as the runner's swap_states loop does.
std::vector<int> vllm_reorder(const std::vector<int>& q_lens, const std::vector<int>& kv_lens, int decode_threshold) {
  const int n = static_cast<int>(q_lens.size());
  std::vector<int> order(n), region(n), target(n);
  int decodes = 0, extends = 0;
  for (int i = 0; i < n; ++i) {
    order[i] = i;
    const bool prefill = kv_lens[i] - q_lens[i] == 0;
    region[i] = prefill ? 2 : (q_lens[i] <= decode_threshold ? 0 : 1);
    decodes += region[i] == 0;
    extends += region[i] == 1;
  }
  for (int i = 0; i < n; ++i) target[i] = i < decodes ? 0 : (i < decodes + extends ? 1 : 2);
  std::vector<int> orig;
  for (int i = 0; i < n; ++i)
    if (region[i] != target[i]) orig.push_back(i);
  std::vector<int> sorted = orig;
  std::stable_sort(sorted.begin(), sorted.end(), [&](int a, int b) { return region[a] < region[b]; });
  // src_dest_map keeps insertion order (a Python dict): src = sorted[k] -> dst = orig[k]
  std::vector<std::pair<int, int>> map_order;
  std::map<int, int> dest;
  for (size_t k = 0; k < orig.size(); ++k) {
    map_order.push_back({sorted[k], orig[k]});
    dest[sorted[k]] = orig[k];
  }
  for (const auto& entry : map_order) {
    const int src = entry.first;
    int dst = dest[src];
    while (src != dst) {
      std::swap(order[src], order[dst]);
      const auto it = dest.find(dst);
      const int next = it == dest.end() ? dst : it->second;
      dest[dst] = dst;
      dst = next;
    }
  }
  return order;
}

std::vector<std::string> compare_local(const LocalBatches& engine, const VirtualBatches& ours, const PageTable& pt) {
  std::vector<std::string> out;
  const size_t n = engine.seqlens_q.size();
  if (n != ours.batches.size()) {
    out.push_back("virtual batches: the engine makes " + std::to_string(n) + " (chunk " + std::to_string(engine.chunk) +
                  "), attnscope's chunked mask needs " + std::to_string(ours.batches.size()) + " (chunk " +
                  std::to_string(ours.chunk) + ")");
    return out;
  }
  const int ps = pt.page_size;
  for (size_t v = 0; v < n; ++v) {
    const auto& b = ours.batches[v];
    const std::string at = "virtual batch " + std::to_string(v) + " (request " + std::to_string(b.request) + "): ";
    if (engine.seqlens_q[v] != b.q_len || engine.seqlens_k[v] != b.kv_len || engine.k_start[v] != b.kv_begin) {
      out.push_back(at + "engine q " + std::to_string(engine.seqlens_q[v]) + ", keys [" + std::to_string(engine.k_start[v]) +
                    ", +" + std::to_string(engine.seqlens_k[v]) + "), attnscope q " + std::to_string(b.q_len) + ", keys [" +
                    std::to_string(b.kv_begin) + ", +" + std::to_string(b.kv_len) + ")");
      continue;
    }
    // the kernel reads the row's first ceil(keys / page_size) cells as the chunk's pages
    const int used = static_cast<int>((engine.seqlens_k[v] + ps - 1) / ps);
    for (int i = 0; i < used; ++i) {
      const int64_t want = pt.page_of(b.request, b.kv_begin + i * ps);
      if (engine.block_table[v][i] != want) {
        out.push_back(at + "block table column " + std::to_string(i) + " holds " + std::to_string(engine.block_table[v][i]) +
                      ", the page of keys from " + std::to_string(b.kv_begin + i * ps) + " is " + std::to_string(want));
        break;
      }
    }
  }
  return out;
}

// What neither engine's attention call has an argument for: the first such field, as a refusal.
std::optional<std::string> common_refusal(const CaseSpec& c) {
  const auto& a = c.attention;
  if (a.prefix_lm)
    return "/attention/prefix_lm: a prefix-LM mask has no argument in the engine's kernel call (causal, window only)";
  if (a.mask_mod) return "/attention/mask_mod: the engine passes no mask to the kernel beyond causal / window / chunk";
  if (a.score_mod) return "/attention/score_mod: the engine's kernel call takes no score modification (soft cap only)";
  if (a.alibi) return "/attention/alibi: the engine's FlashAttention / FlashInfer call is made without ALiBi slopes";
  for (size_t r = 0; r < c.requests.size(); ++r) {
    const auto& q = c.requests[r];
    const std::string at = "/requests/" + std::to_string(r);
    if (!q.doc_starts.empty()) return at + "/doc_starts: packed documents are separate requests to the engine";
    if (q.pad_start) return at + "/pad_start: the engine's batches hold no padding tokens inside a request";
  }
  if (c.kv_cache.fp8 && c.kv_cache.scales.granularity != ScaleGranularity::kTensor)
    return std::string("/kv_cache/scales/granularity: the engine's layer holds one k_scale / v_scale per tensor, not ") +
           granularity_name(c.kv_cache.scales.granularity);
  return std::nullopt;
}

std::vector<std::vector<int64_t>> page_rows(const PageTable& pt, int width) {
  const int n = static_cast<int>(pt.indptr.size()) - 1;
  std::vector<std::vector<int64_t>> rows(n, std::vector<int64_t>(width, 0));
  for (int r = 0; r < n; ++r)
    for (int j = 0; j < std::min(pt.pages_of(r), width); ++j) rows[r][j] = pt.indices[pt.indptr[r] + j];
  return rows;
}

EngineTensor table_tensor(const std::string& name, const std::vector<std::vector<int64_t>>& rows, int width, bool slots,
                          const std::string& note) {
  EngineTensor t{name, "int32", {static_cast<int64_t>(rows.size()), width}, {}, note, true, slots};
  for (const auto& r : rows) t.values.insert(t.values.end(), r.begin(), r.end());
  return t;
}

EngineTensor vec_tensor(const std::string& name, const std::string& dtype, const std::vector<int64_t>& v,
                        const std::string& note) {
  return EngineTensor{name, dtype, {static_cast<int64_t>(v.size())}, v, note, false, false};
}

EngineTensor scalar(const std::string& name, int64_t v, const std::string& note) {
  return EngineTensor{name, "int", {}, {v}, note, false, false};
}

std::string number_text(double x) {
  std::ostringstream o;
  o << x;
  return o.str();
}

std::vector<int64_t> prefix_sum(const std::vector<int64_t>& v) {
  std::vector<int64_t> out{0};
  for (int64_t x : v) out.push_back(out.back() + x);
  return out;
}

}  // namespace engine_detail

namespace {

// The widest table either engine builds for the case: batch x the longest request's pages (SGLang),
// or the block table's width (vLLM).
std::optional<std::string> size_refusal(Engine e, const CaseSpec& c, const PageTable& pt) {
  int64_t max_kv = 0, max_pages = 0;
  for (size_t r = 0; r < c.requests.size(); ++r) {
    max_kv = std::max<int64_t>(max_kv, c.requests[r].kv_len);
    max_pages = std::max<int64_t>(max_pages, pt.pages_of(static_cast<int>(r)));
  }
  const int64_t width = e == Engine::kSglangFa ? (max_kv + pt.page_size - 1) / pt.page_size
                                               : std::max<int64_t>(max_pages, c.kv_cache.max_num_blocks_per_seq.value_or(0));
  const int64_t cells = width * static_cast<int64_t>(c.requests.size());
  if (cells > kMaxEngineCells)
    return "/requests: the engine's page table would hold " + std::to_string(cells) + " cells (" +
           std::to_string(c.requests.size()) + " requests x " + std::to_string(width) + " columns), more than the " +
           std::to_string(kMaxEngineCells) + " attnscope shows";
  if (!c.attention.local_chunk) return std::nullopt;
  // the local block table: one row of chunk / page_size columns per virtual batch
  const int ch = e == Engine::kSglangFa
                     ? engine_detail::sglang_effective_chunk(*c.attention.local_chunk, static_cast<int>(max_kv), pt.page_size)
                     : *c.attention.local_chunk;
  int64_t rows = 0;
  for (const auto& r : c.requests) {
    const int first = std::min(ch - (r.kv_len - r.q_len) % ch, r.q_len);
    rows += 1 + (r.q_len - first + ch - 1) / ch;
  }
  if (rows * (ch / pt.page_size) <= kMaxEngineCells) return std::nullopt;
  return "/attention/local_chunk: the engine's local block table would hold " + std::to_string(rows * (ch / pt.page_size)) +
         " cells (" + std::to_string(rows) + " virtual batches x " + std::to_string(ch / pt.page_size) +
         " columns), more than the " + std::to_string(kMaxEngineCells) + " attnscope shows";
}

}  // namespace

EngineView engine_metadata(Engine e, const CaseSpec& c, const Plan& p) {
  const bool dsa = !engine_feeds_backends(e);
  if (c.is_sparse() && !dsa) {  // the dense backends have no index list: the DSA views show what serves it
    EngineView v;
    v.engine = e;
    v.mode = "none";
    v.refusal = std::string("/sparse: ") + (e == Engine::kSglangFa
                                                ? "SGLang serves DeepSeek sparse attention through its nsa backend "
                                                  "(NativeSparseAttnBackend), not FlashAttentionBackend: --engine sglang-nsa"
                                                : "vLLM serves DeepSeek sparse attention through FLASHMLA_SPARSE, not "
                                                  "FlashInferImpl: --engine vllm-flashmla-sparse");
    return v;
  }
  if (auto why = dsa ? engine_detail::dsa_size_refusal(e, c, p.pages) : size_refusal(e, c, p.pages)) {
    EngineView v;
    v.engine = e;
    v.mode = "none";
    v.refusal = *why;
    return v;
  }
  EngineView v = dsa                      ? engine_detail::dsa_view(e, c, p)
                 : e == Engine::kSglangFa ? engine_detail::sglang_view(c, p)
                                          : engine_detail::vllm_view(c, p);
  v.engine = e;
  if (v.refusal) v.tensors.clear();
  if (v.mode.empty()) v.mode = "none";  // refused before a mode was chosen
  return v;
}

}  // namespace attnscope
