// DeepSeek Sparse Attention (DSA, DeepSeek-V3.2; `/sparse` with `/mla`): the lightning indexer, its
// top-k selection and what the selection becomes. The selection is turned into the request's mask
// bits (mask_bits.h) ANDed with the causal mask, so every consumer of masks (CPU backends, block
// map, Mask tab) sees exactly the kept tokens.
//
// Indexer (DeepSeek-V3.2-Exp inference/model.py `Indexer.forward` and inference/kernel.py `fp8_index`,
// commit 3b99a5350d260b7c2a357e82362305509e2d0724):
//   I[t, s] = sum_j w[t, j] * H^-1/2 * D^-1/2 * ReLU(q_idx[t, j] . k_idx[s])
// with H = index_heads, D = index_head_dim. The FP8 form quantises each q_idx row and each k_idx row
// (one block of up to 128 dims) to e4m3 with a power-of-two scale (ue8m0, the released config's
// scale_fmt) and computes k_s[s] * sum_j (w[t, j] H^-1/2 q_s[t, j] D^-1/2) ReLU(q8 . k8) in fp32.
#pragma once

#include <cstdint>
#include <vector>

#include "attnscope/case_spec.h"
#include "attnscope/mask.h"
#include "attnscope/mask_bits.h"
#include "attnscope/paging.h"

namespace attnscope {

struct Workload;

// The indexer's inputs of one request, bf16 values (the reference's rotate_activation asserts bf16):
// q [q_len][heads][dim], w [q_len][heads], k [kv_len][dim]. Seeded from the request's seed on streams of
// their own (TensorId kIdxQ, kIdxW, kIdxK), standard normal rounded to bf16; a query's index follows
// /requests/i/q_offset as the attention's Q does.
struct IndexerInputs {
  int heads = 0, dim = 0, q_len = 0, kv_len = 0;
  std::vector<float> q, w, k;
};
IndexerInputs indexer_inputs(const CaseSpec& c, int r);

// The FP8 form's tensors: q8 / k8 the e4m3 values (as floats), q_scale [q_len][heads], k_scale [kv_len].
struct IndexerFp8 {
  std::vector<float> q8, q_scale, k8, k_scale;
};
// One row of x (n <= 128 values, one quantisation block) to e4m3: amax floored at 1e-4, scale
// 2^ceil(log2(amax / 448)) (ue8m0), stored fp8(clamp(x / scale, -448, 448)). Returns the scale.
float quantize_block_e4m3(const float* x, int n, float* q8);
IndexerFp8 quantize_indexer(const IndexerInputs& in);

// Scores of query row q over keys [0, n): fp64 from the bf16 inputs; or the FP8 form (dot products summed
// in fp32 in dimension order, the heads' terms in fp32 in head order: the kernel's tensor-core and reduce
// orders are not specified, these fix one), widened to double.
void indexer_scores_fp64(const IndexerInputs& in, int q, int n, double* out);
void indexer_scores_fp8(const IndexerInputs& in, const IndexerFp8& f, int q, int n, double* out);

// Top-k of scores [0, n) into out[0, top_k): the larger score first, then the lower token index; NaN is
// never selected (counted instead); fewer than top_k candidates leave -1 padding. Returns the NaN count.
int select_top_k(const double* scores, int n, int top_k, int* out);

// A request's selection: [q_len][top_k] logical token indices in rank order (given: as given), -1 padded.
struct SparseSelection {
  int q_len = 0, top_k = 0;
  bool given = false;     // from /sparse/indices (no indexer ran)
  std::vector<int> idx;   // [q_len * top_k]
  std::vector<int> nans;  // [q_len] NaN scores seen in the row (never selected)
  const int* row(int q) const { return idx.data() + static_cast<size_t>(q) * top_k; }
  int kept(int q) const;     // entries that are not -1
  int padding(int q) const;  // -1 entries
};
// The indexer over request r with the given scoring (causal: query q sees keys [0, q_abs]).
SparseSelection indexer_selection(const CaseSpec& c, int r, SparseScoring scoring);
// The case's selection of request r: /sparse/indices when given, else the indexer with /sparse/scoring.
SparseSelection sparse_selection(const CaseSpec& c, int r);

// The selection as mask bits, ANDed with the built-in mask `builtin` (the causal mask).
MaskBits sparse_mask_bits(const SparseSelection& s, const RowMask& builtin);

// Logical token index to physical slot through a request's page-table row: page_row[idx / page_size] *
// page_size + idx % page_size; -1 stays -1.
inline int64_t sparse_slot(const int* page_row, int page_size, int idx) {
  if (idx < 0) return -1;
  return static_cast<int64_t>(page_row[idx / page_size]) * page_size + idx % page_size;
}
// The selection of request r as physical slots ([q_len * top_k], -1 kept).
std::vector<int64_t> sparse_slots(const SparseSelection& s, const PageTable& pt, int r);

// Entries of a that b lacks (-1 ignored): how many selections flip between two rows of top_k.
int selection_differs(const int* a, const int* b, int top_k);

// Recall of mass of query q of request r: per query head, the share of the dense softmax mass (fp64
// logits q . k x sm_scale over every causally visible key) carried by the kept tokens `kept` (-1 ignored).
std::vector<double> recall_of_mass(const CaseSpec& c, const PageTable& pt, const Workload& w, int r, int q, const int* kept,
                                   int n);

// /sparse's rules (docs/case-format.md): CaseError naming the path. Called by validate_case.
void validate_sparse(const CaseSpec& c);
// What the indexer may cost: the sum over requests of q_len x kv_len x index_heads x index_head_dim.
constexpr int64_t kMaxIndexerMacs = int64_t{1} << 34;
// The indexer's multiply-adds for the case (saturating): 0 without /sparse or with /sparse/indices given.
int64_t indexer_macs(const CaseSpec& c);
// The selection's buffer, [q_len][top_k] int32 per request, summed over the requests (256 MiB).
constexpr int64_t kMaxSelectionEntries = int64_t{1} << 26;

const char* scoring_name(SparseScoring s);  // "fp8", "fp64"

}  // namespace attnscope
