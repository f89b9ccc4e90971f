// CaseSpec: everything a user configures about one attention batch. Plain data; the JSON form is
// documented in docs/case-format.md and read/written by app/core/case_json.cpp. Every field maps to
// one JSON path, which is what CaseError names.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "attnscope/types.h"

namespace attnscope {

// Invalid input. `path` is a JSON pointer ("/requests/3/q_len"), `rule` says what is required.
class CaseError : public std::runtime_error {
 public:
  CaseError(std::string path, std::string rule)
      : std::runtime_error(path + ": " + rule), path_(std::move(path)), rule_(std::move(rule)) {}
  const std::string& path() const { return path_; }
  const std::string& rule() const { return rule_; }

 private:
  std::string path_;
  std::string rule_;
};

struct RequestSpec {
  int q_len = 1;                  // new query tokens
  int kv_len = 1;                 // total keys (cached prefix + new), tokens
  std::optional<int> prefix_len;  // prefix-LM: keys [0, prefix_len) visible to every query
  std::vector<int> doc_starts;    // packed documents: sorted key positions where a document
                                  // starts; first must be 0. Empty = one document.
  std::optional<int> pad_start;   // keys and queries at absolute positions >= pad_start are
                                  // padding: visible to nobody, their query rows fully masked
  std::optional<uint64_t> seed;   // data seed of this request; default derived from data.seed
                                  // and the request index (kept explicit by `invariance`)
  int q_offset = 0;               // its queries take the generator's Q values of queries q_offset..:
                                  // a decode step replays one query of a prefill (`consistency`)
  // Speculative-decoding tree (docs/conventions.md section 12): [q_len] parent of each new token, -1
  // (the prefix) or an earlier new token's index. Empty = no tree (the new tokens form a chain).
  std::vector<int> tree_parents;
  bool operator==(const RequestSpec&) const = default;
};

enum class KvStorage { kPaged, kRagged };  // ragged = one contiguous [tokens, heads, dim] per request
enum class PageAlloc { kContiguous, kShuffled, kFragmented };

// FP8 scales (docs/conventions.md section 10): an element's value is stored FP8 times its scale.
// Granularity: one scale for the tensor, one per KV head, or one per (token, KV head).
enum class ScaleGranularity { kTensor, kHead, kToken };
struct KvScalesSpec {
  ScaleGranularity granularity = ScaleGranularity::kTensor;
  std::vector<double> k, v;  // given scales (tensor: 1 value, head: num_kv_heads); empty = "amax":
                             // amax / the format's max, computed from the data per group
  bool operator==(const KvScalesSpec&) const = default;
};

struct KvCacheSpec {
  KvStorage storage = KvStorage::kPaged;
  int page_size = 16;  // tokens per page (1 when ragged)
  KvLayout layout = KvLayout::kNHD;
  PageAlloc allocation = PageAlloc::kContiguous;
  uint64_t allocation_seed = 0;  // shuffled / fragmented page order
  bool null_page = true;         // physical page 0 is reserved and never referenced (vLLM)
  bool poison_unused = false;    // unused pages and last-page slots hold NaN
  // Width of the block table as FlashAttention's flash_attn_with_kvcache sees it (block_table.size(1),
  // FlashAttention's max_num_blocks_per_seq), pages (tokens when ragged: the cache's seqlen dim). FA2
  // hands max_num_blocks_per_seq * page_size to its split heuristic, so the allocated cache, not the
  // live length, decides the split count. Absent: the tightest table (the longest request's pages).
  std::optional<int> max_num_blocks_per_seq;
  std::optional<Fp8Format> fp8;  // /kv_cache/dtype: K and V stored FP8 (absent: the case dtype)
  KvScalesSpec scales;           // with fp8 only
  bool operator==(const KvCacheSpec&) const = default;
};

// /attention/sinks: `true` (seeded: `logits` empty, values from sink_logits in workload.h) or one
// logit per query head, in the units of the scaled logits (q.k x sm_scale, natural log).
struct SinksSpec {
  std::vector<double> logits;  // [num_qo_heads], or empty = drawn from data.seed
  bool operator==(const SinksSpec&) const = default;
};

struct AttentionSpec {
  bool causal = true;              // bottom-right aligned
  std::optional<int> window;       // W: visible iff q_abs - W < k <= q_abs (W includes the query)
  std::optional<int> local_chunk;  // c: chunked local attention (Llama-4)
  bool prefix_lm = false;          // use each request's prefix_len
  std::optional<double> soft_cap;  // s = cap * tanh(s / cap), before masking
  std::optional<double> sm_scale;  // default 1 / sqrt(head_dim_qk)
  bool alibi = false;              // s += slope[h] * (k - q_abs)
  // Expressions (grammar: docs/case-format.md, "Expressions"). mask_mod is ANDed with the built-in
  // mask above (set causal false for the expression alone); score_mod replaces the scaled logit
  // `score` (q.k * sm_scale) and cannot be combined with soft_cap or alibi.
  std::optional<std::string> mask_mod;
  std::optional<std::string> score_mod;
  // Attention sinks (gpt-oss; docs/conventions.md section 12): one logit per query head joins every
  // row's softmax denominator with no value vector. Absent: none.
  std::optional<SinksSpec> sinks;
  bool operator==(const AttentionSpec&) const = default;
};

// /mla: DeepSeek's multi-head latent attention (docs/conventions.md section 13). The cache holds one
// latent vector per token, [ckv (kv_lora_rank) ; kpe (rope_dim)], shared by every query head. Absorbed
// (decode): one latent KV head, QK over rank + rope dims, VO over the rank dims. Non-absorbed (prefill):
// per-head K = [W_uk ckv ; kpe] and V = W_uv ckv, up-projected by seeded matrices, so both forms are
// one model and their outputs can be diffed (mla.h's mla_project_output).
struct MlaSpec {
  int kv_lora_rank = 512;
  int rope_dim = 64;
  bool absorbed = true;
  int qk_nope_dim = 128;  // per-head no-position dims of Q and K
  int v_head_dim = 128;   // per-head V / O dims of the non-absorbed form
  bool operator==(const MlaSpec&) const = default;
  int latent_dim() const { return kv_lora_rank + rope_dim; }
  int qk_dim() const { return absorbed ? latent_dim() : qk_nope_dim + rope_dim; }
  int vo_dim() const { return absorbed ? kv_lora_rank : v_head_dim; }
};

// /sparse: DeepSeek Sparse Attention (DSA, DeepSeek-V3.2) over /mla (model/include/attnscope/sparse.h): a
// "lightning indexer" scores every visible token for each query and only the top_k best are attended.
// The indexer's inputs are seeded; `indices` instead gives an engine's buffer directly.
enum class SparseScoring { kFp8, kFp64 };  // the indexer's FP8 form (the reference kernel's) or its fp64 twin
struct SparseSpec {
  int top_k = 2048;          // DeepSeek-V3.2's index_topk
  int index_heads = 64;      // index_n_heads
  int index_head_dim = 128;  // index_head_dim
  SparseScoring scoring = SparseScoring::kFp8;
  // Given selection: [request][query][at most top_k] logical token indices, -1 only as padding after the
  // real ones. Empty: the indexer selects.
  std::vector<std::vector<std::vector<int>>> indices;
  bool operator==(const SparseSpec&) const = default;
};

enum class Planner { kFlashInfer, kFlashAttn, kFixed, kOff };
enum class PartialPrecision { kFp32, kDtype };  // split-KV partial outputs kept in fp32 or rounded

struct SplitSpec {
  Planner planner = Planner::kFlashInfer;
  std::optional<int> fixed_split_size;  // pages per KV chunk (tokens when ragged); planner `fixed` only
  std::optional<int> fixed_tile_q;      // packed query rows per tile: 16, 64 or 128; overrides the rule
  int num_sms = 132;                    // the SM count the planner budgets for (H100 SXM: 132)
  bool cuda_graph = false;              // FlashInfer CUDA-graph planning (worst-case tile, padded grid)
  PartialPrecision partials = PartialPrecision::kFp32;
  bool operator==(const SplitSpec&) const = default;
};

// /cuda_graph (docs/conventions.md, "CUDA-graph replay"): the batch replayed through a CUDA graph captured
// at `bucket` entries, the real batch padded to it the way `engine` pads (model/include/attnscope/cuda_graph_pad.h).
// /cuda_graph/engine is optional: the reader derives it from /engine (graph_engine_for), and a case whose
// two fields disagree is refused.
enum class GraphEngine { kSglang, kVllm };
struct CudaGraphSpec {
  int bucket = 1;  // the captured batch size, >= the number of requests
  GraphEngine engine = GraphEngine::kSglang;
  bool operator==(const CudaGraphSpec&) const = default;
};

struct DataSpec {
  uint64_t seed = 1;
  double mean = 0.0;
  double std = 1.0;
  std::vector<int> outlier_channels;  // head-dim channels of K scaled by outlier_scale
  double outlier_scale = 1.0;
  bool operator==(const DataSpec&) const = default;
};

// FP8 attention proper (FA3 / cuDNN style): Q quantised to the KV cache's FP8 format with one
// scale of its own; the output stays in the case dtype.
struct Fp8AttentionSpec {
  std::optional<double> q_scale;  // absent: amax(Q) / the format's max
  bool operator==(const Fp8AttentionSpec&) const = default;
};

// /parallel (docs/conventions.md section 18): the case's keys partitioned across kernels, each part's
// partial (O, LSE) merged by its log-sum-exp. Exactly one of context / cascade.
enum class LseBase { kE, k2 };  // natural log (FlashAttention, cuDNN, PyTorch) or base 2 (FlashInfer)
struct ContextParallelSpec {
  int ranks = 2;       // c: each request's keys sharded over c ranks
  int interleave = 1;  // i: rank r owns position p iff floor(p / i) mod c == r
  bool operator==(const ContextParallelSpec&) const = default;
};
struct CascadeSpec {
  int shared_prefix = 0;  // tokens every request shares (a system prompt), a multiple of the page size
  bool operator==(const CascadeSpec&) const = default;
};
struct ParallelSpec {
  std::optional<ContextParallelSpec> context;
  std::optional<CascadeSpec> cascade;
  // The base the merge reads a backend's partial LSE in, by backend id ("" = every backend). Absent:
  // the backend's own (correct); a base that is not its own reproduces the base-mix bug (sglang #40903).
  std::map<std::string, LseBase> merge_base;
  LseBase merge_base_of(const std::string& id, LseBase native) const {
    auto it = merge_base.find(id);
    if (it == merge_base.end()) it = merge_base.find("");
    return it == merge_base.end() ? native : it->second;
  }
  bool operator==(const ParallelSpec&) const = default;
};
// How the generator numbers a request's keys: key j of the case is the key at position
// offset + shard_position(j) of the unpartitioned case (partition.h), and positions below
// shared_prefix come from the case's shared-prefix stream (cascade), not the request's. Set on the
// sub-cases partition.h makes (and shared_prefix on a cascade case); never read from JSON.
struct KeySource {
  int offset = 0, ranks = 1, rank = 0, interleave = 1;
  int shared_prefix = 0;
  bool operator==(const KeySource&) const = default;
  bool identity() const { return offset == 0 && ranks == 1 && shared_prefix == 0; }
  AS_HD int64_t position(int64_t j) const { return offset + ((j / interleave) * ranks + rank) * interleave + j % interleave; }
};

enum class CompareRule { kAllclose, kTwiceLowp, kBitwise, kMaxAbs };

struct ComparisonSpec {
  std::string backend;   // a backend id of the case
  std::string baseline;  // usually a reference
  CompareRule rule = CompareRule::kAllclose;
  double rtol = 1e-2;  // allclose
  double atol = 1e-3;  // allclose; max_abs bound; twice_lowp rounding floor
  std::string lowp;    // twice_lowp: the same-precision naive baseline (the JSON reader's default: the registry's)
  bool operator==(const ComparisonSpec&) const = default;
};

struct CaseSpec {
  std::string name;
  std::string description;
  std::vector<RequestSpec> requests;
  int num_qo_heads = 1;
  int num_kv_heads = 1;
  int head_dim_qk = 64;
  int head_dim_vo = 64;
  DType dtype = DType::kBf16;
  KvCacheSpec kv_cache;
  AttentionSpec attention;
  SplitSpec split;
  DataSpec data;
  std::optional<Fp8AttentionSpec> fp8_attention;  // needs kv_cache.fp8
  std::optional<MlaSpec> mla;                     // sets num_kv_heads and the head dims (validate_case)
  std::optional<SparseSpec> sparse;               // DeepSeek Sparse Attention over /mla (sparse.h)
  std::optional<CudaGraphSpec> cuda_graph;        // needs split.cuda_graph
  std::vector<std::string> backends;              // backend ids to run, in order
  std::vector<ComparisonSpec> comparisons;
  std::optional<int> sample_rows;      // references computed on N sampled query rows per request
  std::optional<int> pad_head_dim_to;  // the padded flash backend: zero-pad head dims to this (default 64),
                                       // sm_scale kept from the true head dim (FlashInfer workaround)
  // /engine: "" (the backends build their own metadata) or an engine id (engine_metadata.h): the
  // real-library backends that engine drives are fed the metadata tensors it builds for the batch
  std::string engine;
  std::optional<ParallelSpec> parallel;  // /parallel: partitions merged by LSE (partition.h)
  KeySource key_source;                  // the generator's key numbering (sub-cases; not JSON)
  bool operator==(const CaseSpec&) const = default;

  int group_size() const { return num_qo_heads / num_kv_heads; }
  double scale() const { return sm_scale_or_default(); }
  double sm_scale_or_default() const;
  int64_t total_q() const;
  int64_t total_kv() const;
  uint64_t request_seed(int r) const;   // explicit seed, or mix(data.seed, r)
  uint64_t shared_prefix_seed() const;  // the stream of a cascade's shared-prefix keys (no request index reaches it)
  // The seed and generator index base of request r's key j: the position key_source gives, from the
  // shared stream below the shared prefix, else the request's.
  uint64_t key_seed(int r, int64_t position) const {
    return position < keys().shared_prefix ? shared_prefix_seed() : request_seed(r);
  }
  // key_source with a cascade's shared prefix filled in (the generator's one source of both)
  KeySource keys() const {
    KeySource k = key_source;
    if (parallel && parallel->cascade) k.shared_prefix = parallel->cascade->shared_prefix;
    return k;
  }
  bool fp8_kv() const { return kv_cache.fp8.has_value(); }
  bool has_sinks() const { return attention.sinks.has_value(); }
  bool has_trees() const;  // any request has tree_parents
  bool is_mla() const { return mla.has_value(); }
  bool mla_absorbed() const { return mla && mla->absorbed; }
  bool is_sparse() const { return sparse.has_value(); }
  // Dims of the generator's Q row: the case's head_dim_qk, or MLA's non-absorbed qk_nope + rope (the
  // absorbed Q is derived from it, docs/conventions.md section 13).
  int q_gen_dim() const { return mla ? mla->qk_nope_dim + mla->rope_dim : head_dim_qk; }
  // Bytes of the KV cache per token: K and V per KV head, or MLA's latent row (absorbed form).
  int64_t kv_bytes_per_token(int elem_bytes) const;
  int effective_page_size() const { return kv_cache.storage == KvStorage::kRagged ? 1 : kv_cache.page_size; }
};

// Which backend ids exist is the backends floor's knowledge (its registry), not the model's: the
// caller passes it in. `known` answers for one id; `listing` is the text of every id for the error.
struct BackendIds {
  bool (*known)(const std::string& id) = nullptr;
  std::string (*listing)() = nullptr;
};

// Format limits that the JSON reader also enforces while reading (validate_case checks them again).
constexpr int kMaxRequests = 4096;
constexpr int kMaxTokens = 1 << 22;    // q_len / kv_len: keeps every host index in int range per request
constexpr double kMaxSinkLogit = 1e4;  // |sink| bound: finite in every dtype (fp16 max 65504) and in exp2's range

// Checks every rule that is not a matter of JSON syntax (ranges and cross-field consistency).
// Throws CaseError naming the path. Called by the JSON reader and by the GUI editor with the
// registry's ids; without them (`ids` null) backend ids are checked for duplicates only.
void validate_case(const CaseSpec& c, const BackendIds* ids = nullptr);
// The mask_mod / score_mod part of validate_case (the GUI's editor checks as the user types).
void validate_expressions(const CaseSpec& c);

const char* planner_name(Planner p);
const char* alloc_name(PageAlloc a);
const char* storage_name(KvStorage s);
const char* rule_name(CompareRule r);
const char* partials_name(PartialPrecision p);
const char* granularity_name(ScaleGranularity g);
const char* graph_engine_name(GraphEngine e);  // "sglang", "vllm"
// The padding /engine implies (/cuda_graph/engine derives from it): sglang-fa -> sglang, vllm-flashinfer
// -> vllm, anything else (no engine) -> sglang.
GraphEngine graph_engine_for(const std::string& engine);

// A copy of `c` planned by model `p`, made valid for it: `fixed` gets the case's split size and
// tile, or 2048 tokens of pages and tile 128 (64 for head_dim vo >= 256), unless given here; the
// other models drop the fixed split size, and flash_attn / off drop CUDA-graph planning. Used by
// `invariance` and the GUI's planner comparison.
CaseSpec with_planner(const CaseSpec& c, Planner p, std::optional<int> fixed_split_size = std::nullopt,
                      std::optional<int> fixed_tile_q = std::nullopt);

// A copy of `c` holding only the listed requests (explicit per-request seeds kept, so the data of
// each request is unchanged). Used by `invariance`.
CaseSpec sub_case(const CaseSpec& c, const std::vector<int>& request_ids);

}  // namespace attnscope
