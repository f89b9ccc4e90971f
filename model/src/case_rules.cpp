// CaseSpec rules that are not JSON syntax: ranges and cross-field consistency. Every violation is
// a CaseError naming the JSON path of the offending field and the rule.
#include <algorithm>
#include <cmath>
#include <set>
#include <sstream>

#include "attnscope/case_spec.h"
#include "attnscope/engine_metadata.h"
#include "attnscope/fp8.h"
#include "attnscope/mask_bits.h"
#include "attnscope/mask_expr.h"
#include "attnscope/partition.h"
#include "attnscope/sparse.h"

namespace attnscope {

namespace {

std::string req_path(size_t i, const char* field) { return "/requests/" + std::to_string(i) + "/" + field; }

void require(bool ok, const std::string& path, const std::string& rule) {
  if (!ok) throw CaseError(path, rule);
}

// "s" with control bytes escaped; appended piecewise (GCC 12 misreports `"\"" + std::string&&` under -Wrestrict).
std::string quoted(const std::string& s) {
  std::string q = "\"";
  q += printable(s);
  q += '"';
  return q;
}

std::string num(double v) {
  std::ostringstream o;
  o << v;
  return o.str();
}

constexpr int kMaxLen = kMaxTokens;
constexpr int kMaxHeads = 256;
constexpr int kMaxHeadDim = 1024;

// /attention/sinks: one finite logit per query head, or seeded (empty).
void validate_sinks(const CaseSpec& c) {
  if (!c.attention.sinks || c.attention.sinks->logits.empty()) return;
  const auto& v = c.attention.sinks->logits;
  require(static_cast<int>(v.size()) == c.num_qo_heads, "/attention/sinks",
          "has " + std::to_string(v.size()) + " values, must have one per query head (heads/qo " +
              std::to_string(c.num_qo_heads) + ") or be true (drawn from the seed)");
  for (size_t h = 0; h < v.size(); ++h)
    require(std::isfinite(v[h]) && std::fabs(v[h]) <= kMaxSinkLogit, "/attention/sinks/" + std::to_string(h),
            num(v[h]) + " is not allowed, a sink logit must be finite and in [-" + num(kMaxSinkLogit) + ", " +
                num(kMaxSinkLogit) + "]");
}

// /mla: the dims in range, and the heads / head dims it sets (docs/conventions.md section 13). FP8
// latent caches, outlier channels, sinks and head-dim padding are not modelled with it.
void validate_mla(const CaseSpec& c) {
  if (!c.mla) return;
  const MlaSpec& m = *c.mla;
  auto in = [](int v, int lo, int hi, const std::string& path) {
    require(v >= lo && v <= hi, path,
            std::to_string(v) + " is out of range, must be in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
  };
  in(m.kv_lora_rank, 1, 1024, "/mla/kv_lora_rank");
  in(m.rope_dim, 0, 1024 - m.kv_lora_rank, "/mla/rope_dim");
  in(m.qk_nope_dim, 1, 1024 - m.rope_dim, "/mla/qk_nope_dim");
  in(m.v_head_dim, 1, 1024, "/mla/v_head_dim");
  const std::string form = m.absorbed ? "absorbed" : "non-absorbed";
  const int kv = m.absorbed ? 1 : c.num_qo_heads;
  require(c.num_kv_heads == kv, "/heads/kv",
          std::to_string(c.num_kv_heads) + " with /mla " + form + ", must be " + std::to_string(kv) +
              (m.absorbed ? " (one latent head shared by every query head)" : " (one up-projected K/V head per query head)"));
  require(c.head_dim_qk == m.qk_dim(), "/head_dim/qk",
          std::to_string(c.head_dim_qk) + " with /mla " + form + ", must be " + std::to_string(m.qk_dim()) +
              (m.absorbed ? " (kv_lora_rank + rope_dim)" : " (qk_nope_dim + rope_dim)") + ", or leave head_dim out");
  require(c.head_dim_vo == m.vo_dim(), "/head_dim/vo",
          std::to_string(c.head_dim_vo) + " with /mla " + form + ", must be " + std::to_string(m.vo_dim()) +
              (m.absorbed ? " (kv_lora_rank)" : " (v_head_dim)") + ", or leave head_dim out");
  require(!c.fp8_kv(), "/kv_cache/dtype", "an FP8 latent cache is not modelled, MLA cases store the latent in the case dtype");
  require(c.data.outlier_channels.empty(), "/data/outliers", "not with /mla (the latent has no per-head channels to scale)");
  require(!c.attention.sinks, "/attention/sinks", "not with /mla (sinks are gpt-oss's, MLA models have none)");
  require(!c.pad_head_dim_to, "/kernels/pad_head_dim_to", "not with /mla");
}

// /requests/i/tree_parents: q_len entries, each -1 (the prefix) or an earlier new token. A parent
// before its child excludes self references and cycles by construction.
void validate_tree(const RequestSpec& r, size_t i) {
  if (r.tree_parents.empty()) return;
  const std::string path = req_path(i, "tree_parents");
  require(static_cast<int>(r.tree_parents.size()) == r.q_len, path,
          "has " + std::to_string(r.tree_parents.size()) + " entries, must have one per new token (q_len " +
              std::to_string(r.q_len) + ")");
  for (size_t j = 0; j < r.tree_parents.size(); ++j) {
    const int p = r.tree_parents[j];
    const std::string at = path + "/" + std::to_string(j);
    require(
        p >= -1 && p < r.q_len, at,
        std::to_string(p) + " is out of range, must be -1 (the prefix) or a new token's index in [0, " + std::to_string(j) + ")");
    require(
        p != static_cast<int>(j), at,
        std::to_string(p) + " is the token itself, a parent must be -1 or an earlier token (index < " + std::to_string(j) + ")");
    require(p < static_cast<int>(j), at,
            std::to_string(p) + " is a forward reference, a parent must be -1 or an earlier token (index < " + std::to_string(j) +
                "): this is also what rules out cycles");
  }
}

// The rules of request i (the case-wide ones are validate_case's).
void validate_request(const CaseSpec& c, size_t i) {
  const auto& a = c.attention;
  const auto& r = c.requests[i];
  require(r.q_len >= 1, req_path(i, "q_len"), std::to_string(r.q_len) + " is not allowed, must be >= 1");
  require(r.kv_len >= 1, req_path(i, "kv_len"), std::to_string(r.kv_len) + " is not allowed, must be >= 1");
  require(r.q_len <= kMaxLen, req_path(i, "q_len"),
          std::to_string(r.q_len) + " is too large, at most " + std::to_string(kMaxLen));
  require(r.kv_len <= kMaxLen, req_path(i, "kv_len"),
          std::to_string(r.kv_len) + " is too large, at most " + std::to_string(kMaxLen));
  if (a.causal || a.window || a.local_chunk || !r.doc_starts.empty() || r.pad_start || a.mask_mod || !r.tree_parents.empty())
    require(r.q_len <= r.kv_len, req_path(i, "q_len"),
            std::to_string(r.q_len) + " > kv_len " + std::to_string(r.kv_len) +
                ", queries are the last q_len keys, so q_len <= kv_len is required with a causal, window, chunk, document, " +
                (r.tree_parents.empty() ? "padding mask or a mask_mod" : "padding mask, a mask_mod or a tree (tree_parents)"));
  validate_tree(r, i);
  if (a.prefix_lm) {
    require(r.prefix_len.has_value(), req_path(i, "prefix_len"),
            "missing, /attention/prefix_lm needs a prefix_len on every request");
  } else if (!a.mask_mod && !a.score_mod) {  // an expression may read prefix_len without the built-in prefix-LM
    require(!r.prefix_len.has_value(), req_path(i, "prefix_len"),
            "set while /attention/prefix_lm is false (and no mask_mod or score_mod could read it)");
  }
  if (r.prefix_len)
    require(*r.prefix_len >= 0 && *r.prefix_len <= r.kv_len, req_path(i, "prefix_len"),
            std::to_string(*r.prefix_len) + " is out of range, must be in [0, kv_len " + std::to_string(r.kv_len) + "]");
  if (!r.doc_starts.empty()) {
    require(r.doc_starts[0] == 0, req_path(i, "doc_starts") + "/0",
            std::to_string(r.doc_starts[0]) + " is not allowed, the first document starts at 0");
    for (size_t d = 1; d < r.doc_starts.size(); ++d) {
      require(
          r.doc_starts[d] > r.doc_starts[d - 1], req_path(i, "doc_starts") + "/" + std::to_string(d),
          std::to_string(r.doc_starts[d]) + " must be greater than the previous start " + std::to_string(r.doc_starts[d - 1]));
      require(r.doc_starts[d] < r.kv_len, req_path(i, "doc_starts") + "/" + std::to_string(d),
              std::to_string(r.doc_starts[d]) + " is not a key position, must be < kv_len " + std::to_string(r.kv_len));
    }
  }
  require(r.q_offset >= 0 && r.q_offset <= kMaxLen, req_path(i, "q_offset"),
          std::to_string(r.q_offset) + " is out of range, must be in [0, " + std::to_string(kMaxLen) + "]");
  if (r.pad_start)
    require(*r.pad_start >= 0 && *r.pad_start <= r.kv_len, req_path(i, "pad_start"),
            std::to_string(*r.pad_start) + " is out of range, must be in [0, kv_len " + std::to_string(r.kv_len) + "]");
}

// /cuda_graph with /mla: what an engine captures of MLA is the absorbed decode SGLang's flashinfer_mla
// backend runs (BatchMLAPagedAttentionWrapper, use_cuda_graph; cuda_graph_pad.cpp names the commit).
void validate_cuda_graph_mla(const CaseSpec& c) {
  require(c.mla_absorbed(), "/mla/absorbed",
          "false with /cuda_graph: the non-absorbed form is plain attention with head dims " + std::to_string(c.head_dim_qk) +
              " / " + std::to_string(c.head_dim_vo) +
              ", which no engine captures for MLA (SGLang's flashinfer_mla backend captures the absorbed decode); set it "
              "true or drop /cuda_graph");
  require(c.cuda_graph->engine == GraphEngine::kSglang, "/cuda_graph/engine",
          "\"vllm\" with /mla: vLLM v1's FlashInfer MLA backend (vllm/v1/attention/backends/mla/flashinfer_mla.py @ "
          "002d68ef00d4b4ac34ec2394d430f3727c516a7d) calls trtllm_batch_decode_with_kv_cache_mla (sm_100), not FlashInfer's "
          "MLAPlan kernels, so its padding of them is not modelled; use \"sglang\"");
  require(c.requests[0].q_len == 1, "/requests/0/q_len",
          std::to_string(c.requests[0].q_len) +
              " with /cuda_graph and /mla: the captured MLA batch modelled is SGLang's decode (q_len 1); its target-verify "
              "graph runs the prefill wrapper with the draft tokens, which is not modelled");
}

// /cuda_graph: the graph is captured at `bucket` entries of num_tokens_per_bs query tokens each
// (docs/conventions.md, "CUDA-graph replay"), so the real batch must fit and be uniform.
void validate_cuda_graph(const CaseSpec& c) {
  if (!c.cuda_graph) return;
  const CudaGraphSpec& g = *c.cuda_graph;
  const int n = static_cast<int>(c.requests.size());
  require(g.bucket >= 1 && g.bucket <= kMaxRequests, "/cuda_graph/bucket",
          std::to_string(g.bucket) + " is out of range, must be in [1, " + std::to_string(kMaxRequests) + "]");
  require(g.bucket >= n, "/cuda_graph/bucket",
          std::to_string(g.bucket) + " is smaller than the batch (" + std::to_string(n) +
              " requests): the captured size must be >= the number of requests");
  require(c.split.cuda_graph, "/split/cuda_graph",
          "false with /cuda_graph, a captured batch needs the plan made for CUDA graphs (set it true)");
  for (int r = 1; r < n; ++r)
    require(c.requests[r].q_len == c.requests[0].q_len, "/requests/" + std::to_string(r) + "/q_len",
            std::to_string(c.requests[r].q_len) + " differs from request 0's " + std::to_string(c.requests[0].q_len) +
                ": a captured graph has the same query tokens per request (num_tokens_per_bs)");
  if (!c.engine.empty() && parse_engine(c.engine))
    require(g.engine == graph_engine_for(c.engine), "/cuda_graph/engine",
            std::string("\"") + graph_engine_name(g.engine) + "\" disagrees with /engine \"" + c.engine +
                "\": /engine is the one source of the padding (sglang-fa pads as sglang, vllm-flashinfer as vllm); "
                "leave /cuda_graph/engine out or make it \"" +
                graph_engine_name(graph_engine_for(c.engine)) + "\"");
  if (g.engine == GraphEngine::kVllm)
    require(c.requests[0].q_len == 1, "/requests/0/q_len",
            std::to_string(c.requests[0].q_len) + " with /cuda_graph/engine \"vllm\"" +
                (c.engine.empty() ? "" : " (from /engine " + c.engine + ")") +
                ": vLLM's FlashInfer backend captures pure decode batches only (q_len 1)");
  if (c.is_mla()) validate_cuda_graph_mla(c);
}

}  // namespace

void validate_expressions(const CaseSpec& c) {
  const auto& a = c.attention;
  auto parse = [](const std::string& text, Expr::Kind kind, const char* path) {
    require(!text.empty(), path, "empty, write an expression or leave the field out");
    try {
      return Expr::parse(text, kind);
    } catch (const ExprError& e) {
      throw CaseError(path, e.what());
    }
  };
  if (a.mask_mod) {
    const Expr e = parse(*a.mask_mod, Expr::Kind::kMask, "/attention/mask_mod");
    // one mask per request, shared by its heads: the packed bits the kernels read and FlashInfer's
    // custom mask are per (query, key)
    require(!e.reads_head(), "/attention/mask_mod",
            "reads h, but a mask_mod here is shared by every head (as FlashInfer's custom mask is); a head-dependent "
            "bias belongs in score_mod");
    check_mask_budget(c, e);
  }
  if (a.score_mod) {
    parse(*a.score_mod, Expr::Kind::kScore, "/attention/score_mod");
    require(!a.soft_cap, "/attention/score_mod",
            "cannot be combined with /attention/soft_cap: write the cap in the expression (C * tanh(score / C))");
    require(!a.alibi, "/attention/score_mod",
            "cannot be combined with /attention/alibi: write it in the expression (+ alibi(h) * (kv_idx - q_idx))");
  }
}

const char* planner_name(Planner p) {
  switch (p) {
    case Planner::kFlashInfer:
      return "flashinfer";
    case Planner::kFlashAttn:
      return "flash_attn";
    case Planner::kFixed:
      return "fixed";
    case Planner::kOff:
      return "off";
  }
  return "?";
}
const char* alloc_name(PageAlloc a) {
  switch (a) {
    case PageAlloc::kContiguous:
      return "contiguous";
    case PageAlloc::kShuffled:
      return "shuffled";
    case PageAlloc::kFragmented:
      return "fragmented";
  }
  return "?";
}
const char* storage_name(KvStorage s) { return s == KvStorage::kPaged ? "paged" : "ragged"; }
const char* rule_name(CompareRule r) {
  switch (r) {
    case CompareRule::kAllclose:
      return "allclose";
    case CompareRule::kTwiceLowp:
      return "twice_lowp";
    case CompareRule::kBitwise:
      return "bitwise";
    case CompareRule::kMaxAbs:
      return "max_abs";
  }
  return "?";
}
const char* partials_name(PartialPrecision p) { return p == PartialPrecision::kFp32 ? "fp32" : "dtype"; }
const char* dtype_name(DType t) {
  switch (t) {
    case DType::kFp32:
      return "fp32";
    case DType::kFp16:
      return "fp16";
    case DType::kBf16:
      return "bf16";
  }
  return "?";
}
const char* layout_name(KvLayout l) { return l == KvLayout::kNHD ? "NHD" : "HND"; }

double CaseSpec::sm_scale_or_default() const {
  if (attention.sm_scale) return *attention.sm_scale;
  // MLA: both forms scale by the per-head QK dims (DeepSeek's softmax_scale), not the latent's 576
  return 1.0 / std::sqrt(static_cast<double>(mla ? mla->qk_nope_dim + mla->rope_dim : head_dim_qk));
}
int64_t CaseSpec::kv_bytes_per_token(int eb) const {
  if (mla_absorbed()) return static_cast<int64_t>(mla->latent_dim()) * eb;  // V is the latent's ckv part
  return static_cast<int64_t>(num_kv_heads) * (head_dim_qk + head_dim_vo) * eb;
}
bool CaseSpec::has_trees() const {
  for (const auto& r : requests)
    if (!r.tree_parents.empty()) return true;
  return false;
}
int64_t CaseSpec::total_q() const {
  int64_t t = 0;
  for (const auto& r : requests) t += r.q_len;
  return t;
}
int64_t CaseSpec::total_kv() const {
  int64_t t = 0;
  for (const auto& r : requests) t += r.kv_len;
  return t;
}
uint64_t CaseSpec::request_seed(int r) const {
  if (requests[r].seed) return *requests[r].seed;
  // splitmix64 of (seed, r): distinct, well-mixed streams per request
  uint64_t z = data.seed + 0x9e3779b97f4a7c15ull * static_cast<uint64_t>(r + 1);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

uint64_t CaseSpec::shared_prefix_seed() const {
  uint64_t z = data.seed + 0x9e3779b97f4a7c15ull * 0x5ba4edull;  // a stream no request index reaches
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

CaseSpec with_planner(const CaseSpec& base, Planner p, std::optional<int> split, std::optional<int> tile) {
  CaseSpec c = base;
  c.split.planner = p;
  if (p == Planner::kFixed) {
    c.split.fixed_split_size = split                         ? split
                               : base.split.fixed_split_size ? base.split.fixed_split_size
                                                             : std::optional<int>(std::max(1, 2048 / c.effective_page_size()));
    c.split.fixed_tile_q = tile                      ? tile
                           : base.split.fixed_tile_q ? base.split.fixed_tile_q
                                                     : std::optional<int>(c.head_dim_vo >= 256 ? 64 : 128);
  } else {
    c.split.fixed_split_size.reset();
    if (p == Planner::kFlashAttn || p == Planner::kOff) {
      c.split.cuda_graph = false;
      c.cuda_graph.reset();  // /cuda_graph needs the CUDA-graph plan
    }
  }
  return c;
}

CaseSpec sub_case(const CaseSpec& c, const std::vector<int>& ids) {
  CaseSpec s = c;
  s.requests.clear();
  if (s.sparse) s.sparse->indices.clear();
  for (int id : ids) {
    RequestSpec r = c.requests[id];
    r.seed = c.request_seed(id);
    s.requests.push_back(r);
    if (c.sparse && !c.sparse->indices.empty())
      s.sparse->indices.push_back(c.sparse->indices[id]);  // a given selection follows its request
  }
  return s;
}

GraphEngine graph_engine_for(const std::string& engine) {
  return engine == engine_id(Engine::kVllmFlashInfer) ? GraphEngine::kVllm : GraphEngine::kSglang;
}

void validate_case(const CaseSpec& c, const BackendIds* ids) {
  const auto& a = c.attention;
  const int ps = c.kv_cache.page_size;

  require(c.engine.empty() || parse_engine(c.engine).has_value(), "/engine",
          "\"" + c.engine + "\" is not an engine (" + kFedEngineIds + ")");
  require(c.engine.empty() || engine_feeds_backends(*parse_engine(c.engine)), "/engine",
          "\"" + c.engine + "\" is a view of plan --engine only, it feeds no backend (/engine takes " + kFedEngineIds + ")");
  require(!c.requests.empty(), "/requests", "must hold at least 1 request");
  require(c.requests.size() <= kMaxRequests, "/requests",
          std::to_string(c.requests.size()) + " requests, at most " + std::to_string(kMaxRequests) + " allowed");

  require(c.num_qo_heads >= 1 && c.num_qo_heads <= kMaxHeads, "/heads/qo",
          std::to_string(c.num_qo_heads) + " is out of range, must be in [1, " + std::to_string(kMaxHeads) + "]");
  require(c.num_kv_heads >= 1 && c.num_kv_heads <= kMaxHeads, "/heads/kv",
          std::to_string(c.num_kv_heads) + " is out of range, must be in [1, " + std::to_string(kMaxHeads) + "]");
  require(c.num_qo_heads % c.num_kv_heads == 0, "/heads/kv",
          std::to_string(c.num_kv_heads) + " kv heads do not divide " + std::to_string(c.num_qo_heads) +
              " qo heads (GQA needs qo % kv == 0)");
  require(c.head_dim_qk >= 1 && c.head_dim_qk <= kMaxHeadDim, "/head_dim/qk",
          std::to_string(c.head_dim_qk) + " is out of range, must be in [1, " + std::to_string(kMaxHeadDim) + "]");
  require(c.head_dim_vo >= 1 && c.head_dim_vo <= kMaxHeadDim, "/head_dim/vo",
          std::to_string(c.head_dim_vo) + " is out of range, must be in [1, " + std::to_string(kMaxHeadDim) + "]");

  // KV cache
  require(ps >= 1 && ps <= 4096, "/kv_cache/page_size", std::to_string(ps) + " is out of range, must be in [1, 4096]");
  if (c.kv_cache.storage == KvStorage::kRagged) {
    require(ps == 1, "/kv_cache/page_size", std::to_string(ps) + " with ragged storage, must be 1 (or absent)");
    require(c.kv_cache.layout == KvLayout::kNHD, "/kv_cache/layout",
            "HND with ragged storage, ragged KV is [tokens, heads, dim] (NHD)");
    require(c.kv_cache.allocation == PageAlloc::kContiguous, "/kv_cache/allocation",
            std::string(alloc_name(c.kv_cache.allocation)) + " with ragged storage, ragged KV is contiguous");
    require(!c.kv_cache.null_page, "/kv_cache/null_page", "true with ragged storage, only a paged cache has a null page");
  }

  validate_fp8(c);
  validate_mla(c);

  // attention
  if (a.window)
    require(*a.window >= 1, "/attention/window",
            std::to_string(*a.window) + " is not allowed, must be >= 1 (W counts the query itself)");
  if (a.local_chunk) {
    require(*a.local_chunk >= 1, "/attention/local_chunk", std::to_string(*a.local_chunk) + " is not allowed, must be >= 1");
    require(a.causal, "/attention/local_chunk", "chunked local attention is causal, set /attention/causal to true");
    require(*a.local_chunk % c.effective_page_size() == 0, "/attention/local_chunk",
            std::to_string(*a.local_chunk) + " is not a multiple of page_size " + std::to_string(c.effective_page_size()) +
                " (vLLM's virtual batches slice the block table per chunk)");
    require(!a.window, "/attention/window", "cannot be combined with local_chunk");
    require(!a.prefix_lm, "/attention/prefix_lm", "cannot be combined with local_chunk");
  }
  if (a.prefix_lm) {
    require(a.causal, "/attention/prefix_lm", "prefix-LM extends a causal mask, set /attention/causal to true");
    require(!a.window, "/attention/window", "cannot be combined with prefix_lm");
  }
  if (a.soft_cap)
    require(std::isfinite(*a.soft_cap) && *a.soft_cap > 0, "/attention/soft_cap",
            num(*a.soft_cap) + " is not allowed, must be > 0");
  if (a.sm_scale)
    require(std::isfinite(*a.sm_scale) && *a.sm_scale > 0, "/attention/sm_scale",
            num(*a.sm_scale) + " is not allowed, must be > 0 and finite");
  validate_expressions(c);
  validate_sinks(c);

  // requests
  for (size_t i = 0; i < c.requests.size(); ++i) validate_request(c, i);

  check_tree_budget(c);  // after the requests' own rules: it sums their lengths
  validate_sparse(c);    // after them too: given indices are checked against q_len and kv_len

  // the block table's width as flash_attn_with_kvcache sees it (checked after the requests: it
  // must address every request's keys, as FlashAttention checks max(seqlens_k) against it)
  if (c.kv_cache.max_num_blocks_per_seq) {
    const int64_t w = *c.kv_cache.max_num_blocks_per_seq;
    const int eps = c.effective_page_size();
    const int64_t max_w = kMaxLen / eps;
    require(w >= 1 && w <= max_w, "/kv_cache/max_num_blocks_per_seq",
            std::to_string(w) + " is out of range, must be in [1, " + std::to_string(max_w) + "] pages (" +
                std::to_string(kMaxLen) + " tokens at page_size " + std::to_string(eps) + ")");
    for (size_t i = 0; i < c.requests.size(); ++i) {
      const int64_t pages = (static_cast<int64_t>(c.requests[i].kv_len) + eps - 1) / eps;
      require(w >= pages, "/kv_cache/max_num_blocks_per_seq",
              std::to_string(w) + " pages cannot address request " + std::to_string(i) + "'s kv_len " +
                  std::to_string(c.requests[i].kv_len) + " (" + std::to_string(pages) + " pages of " + std::to_string(eps) +
                  " tokens), must be >= the longest request's pages (FlashAttention: max(seqlens_k) <= "
                  "max_num_blocks_per_seq * page_block_size)");
    }
  }

  // split
  const auto& s = c.split;
  if (s.planner == Planner::kFixed)
    require(s.fixed_split_size.has_value(), "/split/fixed_split_size",
            "missing, planner \"fixed\" needs a fixed split size (pages)");
  if (s.fixed_split_size) {
    require(s.planner == Planner::kFixed, "/split/fixed_split_size",
            std::string("set with planner \"") + planner_name(s.planner) + "\", only planner \"fixed\" uses it");
    require(*s.fixed_split_size >= 1, "/split/fixed_split_size",
            std::to_string(*s.fixed_split_size) + " is not allowed, must be >= 1");
  }
  if (s.fixed_tile_q) {
    const int t = *s.fixed_tile_q;
    require(t == 16 || t == 64 || t == 128, "/split/fixed_tile_q",
            std::to_string(t) + " is not a FlashInfer query tile, must be 16, 64 or 128");
    require(!(t == 128 && c.head_dim_vo >= 256), "/split/fixed_tile_q",
            "128 with head_dim vo >= 256, FlashInfer uses at most 64 there");
  }
  require(s.num_sms >= 1 && s.num_sms <= 1024, "/split/num_sms",
          std::to_string(s.num_sms) + " is out of range, must be in [1, 1024]");
  if (s.cuda_graph)
    require(
        s.planner == Planner::kFlashInfer || s.planner == Planner::kFixed, "/split/cuda_graph",
        std::string("true with planner \"") + planner_name(s.planner) + "\", only the FlashInfer models plan for CUDA graphs");

  // data
  require(std::isfinite(c.data.mean), "/data/mean", "must be finite");
  require(std::isfinite(c.data.std) && c.data.std > 0, "/data/std", num(c.data.std) + " is not allowed, must be > 0 and finite");
  for (size_t i = 0; i < c.data.outlier_channels.size(); ++i) {
    const int ch = c.data.outlier_channels[i];
    require(ch >= 0 && ch < c.head_dim_qk, "/data/outliers/channels/" + std::to_string(i),
            std::to_string(ch) + " is not a channel, must be in [0, head_dim qk " + std::to_string(c.head_dim_qk) + ")");
  }
  require(std::isfinite(c.data.outlier_scale) && c.data.outlier_scale > 0, "/data/outliers/scale",
          num(c.data.outlier_scale) + " is not allowed, must be > 0 and finite");

  // backends and comparisons
  std::set<std::string> seen;
  for (size_t i = 0; i < c.backends.size(); ++i) {
    const auto& b = c.backends[i];
    const std::string p = "/backends/" + std::to_string(i);
    if (ids) require(ids->known(b), p, quoted(b) + " is not a backend, must be one of " + ids->listing());
    require(seen.insert(b).second, p, quoted(b) + " is listed twice");
  }
  for (size_t i = 0; i < c.comparisons.size(); ++i) {
    const auto& k = c.comparisons[i];
    const std::string p = "/comparisons/" + std::to_string(i);
    require(seen.count(k.backend) > 0, p + "/backend", quoted(k.backend) + " is not in /backends");
    require(seen.count(k.baseline) > 0, p + "/baseline", quoted(k.baseline) + " is not in /backends");
    require(k.backend != k.baseline, p + "/baseline", std::string("compares ").append(quoted(k.backend)).append(" with itself"));
    if (k.rule == CompareRule::kTwiceLowp) require(seen.count(k.lowp) > 0, p + "/lowp", quoted(k.lowp) + " is not in /backends");
    require(std::isfinite(k.rtol) && k.rtol >= 0, p + "/rtol", num(k.rtol) + " is not allowed, must be >= 0");
    require(std::isfinite(k.atol) && k.atol >= 0, p + "/atol", num(k.atol) + " is not allowed, must be >= 0");
  }
  if (c.pad_head_dim_to)
    require(*c.pad_head_dim_to > std::max(c.head_dim_qk, c.head_dim_vo) && *c.pad_head_dim_to <= kMaxHeadDim,
            "/kernels/pad_head_dim_to",
            std::to_string(*c.pad_head_dim_to) + " must be greater than the head dims (" + std::to_string(c.head_dim_qk) + ", " +
                std::to_string(c.head_dim_vo) + ") and <= " + std::to_string(kMaxHeadDim));
  if (c.sample_rows)
    require(*c.sample_rows >= 1, "/reference/sample_rows", std::to_string(*c.sample_rows) + " is not allowed, must be >= 1");
  validate_cuda_graph(c);
  if (c.parallel)
    for (const auto& [id, base] : c.parallel->merge_base)
      require(id.empty() || std::count(c.backends.begin(), c.backends.end(), id), "/parallel/merge_base/" + id,
              "not a backend of this case (/backends)");
  if (std::string rule = partition_rule(c); !rule.empty()) {
    const size_t colon = rule.find(": ");
    throw CaseError(rule.substr(0, colon), rule.substr(colon + 2));
  }
}

}  // namespace attnscope
