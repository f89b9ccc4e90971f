// cudnn.sdpa's translation of an attnscope case into cuDNN's SDPA terms, in one place: which masks
// cuDNN can express and how (padding lengths, causal alignment, window bound, ALiBi), the ragged
// offsets and page-table rows that let cuDNN read attnscope's own buffers in place, the shape class
// that keys the graph cache, and the conventions applied to what cuDNN returns. Pure host code: no
// cuDNN and no CUDA, so every rule here is plain data.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "attnscope/case_spec.h"
#include "attnscope/plan.h"

namespace attnscope::peers::cudnn {

// The shape class of a cuDNN SDPA graph: every value that is baked into the graph. Extents are
// rounded up by bucket() (cuDNN reads the true per-sequence lengths from the seq_len tensors), so
// editing lengths, data, allocation or poisoning within a bucket reuses the built graph.
struct GraphKey {
  DType dtype = DType::kBf16;  // fp16 or bf16 (Q, K, V and O)
  int batch = 0;               // B: cuDNN sequences = attnscope's work units (requests or virtual batches) with a computed query
  int hq = 0, hk = 0;          // query heads, key/value heads (GQA when hk < hq)
  int d_qk = 0, d_v = 0;       // head dims
  int64_t s_q = 0;             // queries per sequence, bucketed maximum over the units
  int64_t s_kv = 0;            // keys per sequence, bucketed maximum over the units
  bool paged = true;           // K/V through page tables; false: ragged offsets into the token-major pool
  KvLayout layout = KvLayout::kNHD;  // paged only
  int page_size = 0;                 // paged only: tokens per page (cuDNN's block_size)
  int64_t num_pages = 0;             // paged only: container extent, bucketed (>= the pool's pages)
  int64_t table_size = 0;            // paged only: page-table columns, ceil(s_kv / page_size)
  bool causal = false;               // right bound 0
  bool top_left = false;             // diagonal alignment top-left (ALiBi only; equals bottom-right there)
  int window = 0;                    // left bound W, 0 = none
  bool alibi = false;
  // Attention sinks: one fp32 logit per query head joins each row's denominator (cuDNN's sink_token,
  // a [1, Hq, 1, 1] input bound at execution, so the values are not part of the key).
  bool sinks = false;
  float scale = 0;  // sm_scale, applied by cuDNN after Q.K
  // > 1: a GQA decode batch packed as FlashInfer's and FlashAttention's decode kernels pack it: the
  // group = hq / hk query heads that share a KV head are the rows of one sequence of hk heads, so
  // each K/V tile is read once per KV head rather than once per query head (see translate()).
  int group = 1;
  // Every sequence has the same S_q and S_kv (exact, not bucketed), Q/O/LSE and the ragged K/V
  // pool hold them back to back, nothing is padding: plain strided tensors with no padding mask
  // and no ragged offsets, the form PyTorch's SDPA hands cuDNN (see translate()).
  bool dense = false;
  // FP8 attention (cudnn.sdpa_fp8): Q, K and V in this format with per-tensor descale factors; O
  // in the same FP8 format when o_fp8 (what Hopper's FP8 engines write), else in `dtype`.
  std::optional<Fp8Format> fp8;
  bool o_fp8 = false;
  bool operator==(const GraphKey&) const = default;
  std::string describe() const;  // "B=3 Hq=8 Hk=2 d=128 bf16 S_q<=256 S_kv<=2048 paged NHD page 16 ..."
};

// What cuDNN is asked to compute for one case: the graph's shape class and the values of its
// index tensors. All offsets are in elements (cuDNN's ragged-offset convention), int32.
struct SdpaProblem {
  GraphKey key;
  // The index tensors below are made for every form; a dense graph (key.dense) reads none of them.
  std::vector<int32_t> seq_q;          // [B] rows cuDNN computes per sequence (padding queries cut off; packed: group), >= 1
  std::vector<int32_t> seq_kv;         // [B] keys per sequence (padding keys cut off), >= 1
  std::vector<int32_t> q_offsets;      // [B + 1] first element of each sequence's Q rows in [total_q, Hq, d_qk]
  std::vector<int32_t> o_offsets;      // [B + 1] the same in O [total_q, Hq, d_v]
  std::vector<int32_t> stats_offsets;  // [B + 1] the same in LSE [total_q, Hq]
  std::vector<int32_t> k_offsets;      // [B + 1] ragged storage only: first element of each sequence's keys
  std::vector<int32_t> v_offsets;      // [B + 1] ragged storage only: the same in the V pool
  std::vector<int32_t> page_table;     // [B * table_size] paged only: physical pages, row-major
  std::vector<uint8_t> computed;       // [total_q] 1 = cuDNN computes the row; 0 = padding query
  std::string masks;                   // the mask translation in words, for the result message
};

// Empty when cuDNN can run the case, else why not. Static rules only (what no cuDNN graph
// expresses, or what this cuDNN version lacks); cuDNN's own support check runs when the graph is
// built, and a refusal there is reported with cuDNN's message. `cudnn_version` is cudnnGetVersion().
std::string refusal_reason(const CaseSpec& c, int cudnn_version);

// The FP8 attention backend's own rules (cudnn.sdpa_fp8) before refusal_reason(): the case must
// be FP8 attention (Q, K and V in FP8). The scale granularity is the registry's (its descriptor).
std::string fp8_refusal_reason(const CaseSpec& c);

struct TranslateOptions {
  bool pack_gqa_decode = true;     // allow the packed GQA decode form (GraphKey::group)
  bool dense_when_uniform = true;  // allow the dense form (GraphKey::dense)
  // Causal / window bands aligned top-left wherever that equals attnscope's bottom-right mask
  // (every sequence with S_q == S_kv), and no band for decode batches (one query per sequence, the
  // last key, sees every key): Hopper's FP8 engines have no bottom-right alignment.
  bool prefer_top_left = false;
};

// The case in cuDNN's terms. Requires refusal_reason(c) to be empty.
SdpaProblem translate(const CaseSpec& c, const Plan& p, const TranslateOptions& o);
// `pack_gqa_decode`: allow the packed GQA decode form (GraphKey::group); false gives the plain one.
// `dense_when_uniform`: allow the dense form (GraphKey::dense); false keeps the ragged one.
inline SdpaProblem translate(const CaseSpec& c, const Plan& p, bool pack_gqa_decode = true, bool dense_when_uniform = true) {
  return translate(c, p, TranslateOptions{pack_gqa_decode, dense_when_uniform});
}

// attnscope's conventions on what cuDNN returned: the rows cuDNN does not compute (padding
// queries, fully masked in attnscope) get O = 0 and LSE = -inf, or the head's sink logit with sinks. `o` is [total_q, Hq, d_v],
// `lse` [total_q, Hq], both as downloaded.
void apply_conventions(const CaseSpec& c, const SdpaProblem& s, std::vector<float>* o, std::vector<float>* lse);

// What a NaN in cuDNN's output on a poisoned pool means (issue 47): every slot a request uses holds
// finite values, so a (token, head) row with NaN in O or LSE read a slot no request uses (cuDNN 9.19
// does; docs/backends.md "cuDNN and unused page slots"). Empty when no row is NaN or the pool is not
// poisoned; else the note for the result's message, naming the rows and `running` (the library).
std::string unused_slot_note(const CaseSpec& c, const std::vector<float>& o, const std::vector<float>& lse,
                             const std::string& running);

// Rounds an extent up to its cache bucket: the next power of two (1 stays 1; translate() declares
// S_q >= 2, see there). Costs at most 2x in declared extent; the kernels skip the
// rows and keys past each sequence's true length.
int64_t bucket(int64_t n);

}  // namespace attnscope::peers::cudnn
