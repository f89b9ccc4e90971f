// The metadata tensors an inference engine builds for a case's batch before it calls the attention
// kernel, named as the engine's code names them (docs/conventions.md, "Engine metadata"):
//   sglang-fa         SGLang's FlashAttentionBackend.init_forward_metadata (FlashAttentionMetadata,
//                     its local_attn_metadata and, for a tree verify, forward_metadata_spec_decode_expand)
//   vllm-flashinfer   vLLM v1's FlashInferMetadataBuilder.build (paged_kv_indptr / _indices /
//                     _last_page_len, the decode / prefill split and what each wrapper's plan is given)
//   sglang-nsa        SGLang's DeepSeek sparse attention backend (NativeSparseAttnBackend): NSAMetadata
//                     and the top-k indices translated into token slots (a /sparse case only)
//   vllm-flashmla-sparse  vLLM's FLASHMLA_SPARSE backend: topk_indices_buffer, req_id_per_token and
//                     the indices converted into global slots (a /sparse case only)
// Derived from the engines' sources at the commits named in engine_source(), from the case, the page
// table attnscope builds (make_page_table) and, for the DSA views, the plan's sparse selection. Host
// only: nothing here runs a kernel.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "attnscope/case_spec.h"
#include "attnscope/plan.h"

namespace attnscope {

enum class Engine { kSglangFa, kVllmFlashInfer, kSglangNsa, kVllmFlashMlaSparse };

const char* engine_id(Engine e);                           // "sglang-fa", ..., "vllm-flashmla-sparse"
std::optional<Engine> parse_engine(const std::string& s);  // by id
constexpr const char* kEngineIds = "sglang-fa, vllm-flashinfer, sglang-nsa, vllm-flashmla-sparse";
// Whether a case's /engine may name it: the engines whose tensors feed attnscope's backends. The DSA
// views (sglang-nsa, vllm-flashmla-sparse) are shown by plan --engine only.
bool engine_feeds_backends(Engine e);
constexpr const char* kFedEngineIds = "sglang-fa, vllm-flashinfer";
// The most cells a view's tables may hold (an engine's page table is batch x widest request): a case
// past it is refused naming /requests rather than allocating it.
constexpr int64_t kMaxEngineCells = int64_t{1} << 25;

// The file and commit each derivation follows.
struct EngineSource {
  const char* repo;
  const char* file;
  const char* commit;
  const char* also;  // other files read for it (helpers the file calls), with their commits
};
extern const EngineSource kSglangSource;
extern const EngineSource kVllmSource;
extern const EngineSource kSglangNsaSource;
extern const EngineSource kVllmSparseSource;
const EngineSource& engine_source(Engine e);

// One tensor (or host scalar) as the engine holds it. Values are row-major; a scalar has shape {}.
struct EngineTensor {
  std::string name;            // the engine's name: "cu_seqlens_q", "local_attn_metadata.local_block_table"
  std::string dtype;           // "int32", "int64", or "int" for a Python int on the host
  std::vector<int64_t> shape;  // {} for a scalar
  std::vector<int64_t> values;
  std::string note;  // what the values are, where that is not obvious from the name
  // A 2-D table of the cache: each cell is a physical page id, or with `slots` a token slot
  // (page * page_size + offset). The GUI draws it as a grid and looks each cell up in the pool.
  bool table = false;
  bool slots = false;
};

struct EngineView {
  Engine engine = Engine::kSglangFa;
  std::string mode;                    // "extend", "decode", "target_verify", "target_verify_topk", "encoder",
                                       // "decode+prefill" ...; "+local" when local attention metadata is built too
  std::string mode_reason;             // why the case maps to this mode, one line
  std::optional<std::string> refusal;  // the engine cannot express the case: the path and the rule
  std::vector<EngineTensor> tensors;
  std::vector<int> request_order;       // vLLM: the case's request index at each batch position
  std::vector<std::string> mismatches;  // where the engine's tensors disagree with attnscope's plan
  std::vector<std::string> notes;       // what is modelled how (pool values, padding, omissions)
  const EngineTensor* find(const std::string& name) const;
};

// The engine's tensors for the case (validated, as make_plan requires) and its plan. Never throws for
// a valid case: what the engine cannot express is the view's refusal.
EngineView engine_metadata(Engine e, const CaseSpec& c, const Plan& p);

// What one cell of an engine's table points at in the pool (the GUI's hover): the owner request
// (or kPageNull / kPageUnused, or kCellOutside past the pool) and a line saying which keys it holds.
constexpr int kCellOutside = -3;
int engine_cell_owner(const PageTable& pt, int64_t value, bool slots);
std::string engine_cell_text(const PageTable& pt, int64_t value, bool slots);

// Internals shared by the two engines' files, exposed for the tests.
namespace engine_detail {
// make_local_attention_virtual_batches (both engines): per virtual batch its query count, key count,
// first key and request, and the block table rows picked from the engine's table (cell(r, col) of a
// table `width` columns wide, columns clipped to width - 1), `page_size` tokens per table column.
struct LocalBatches {
  int chunk = 0;  // the chunk size used (SGLang shrinks it, see sglang_effective_chunk)
  std::vector<int> seqlens_q, cu_seqlens_q, seqlens_k, k_start, request;
  std::vector<std::vector<int64_t>> block_table;  // [virtual][chunk / page_size]
};
using TableCell = std::function<int64_t(int request, int column)>;
LocalBatches local_virtual_batches(int chunk, const std::vector<int>& q_lens, const std::vector<int>& seq_lens,
                                   const TableCell& cell, int width, int page_size);
// SGLang's effective chunk: min(chunk, max seq_len) rounded down to a page multiple, at least a page.
int sglang_effective_chunk(int chunk, int max_seq_len, int page_size);
// vLLM's reorder_batch_to_split_decodes_and_prefills on the case's requests: the request index at
// each position after its swaps (decodes, then extends, then prefills).
std::vector<int> vllm_reorder(const std::vector<int>& q_lens, const std::vector<int>& kv_lens, int decode_threshold);
// The engine's virtual batches against attnscope's (plan.local): one line per difference.
std::vector<std::string> compare_local(const LocalBatches& engine, const VirtualBatches& ours, const PageTable& pt);
}  // namespace engine_detail

}  // namespace attnscope
