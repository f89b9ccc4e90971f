// /engine vllm-flashinfer: flashinfer.decode and flashinfer.prefill fed from the tensors vLLM's
// FlashInfer backend builds (engine_metadata.h, vllm-flashinfer) instead of attnscope's own FiUnits.
// FlashInferImpl.forward hands the decode wrapper the first num_decodes requests of the reordered
// batch (paged_kv_indptr[:num_decodes + 1], paged_kv_indices, paged_kv_last_page_len[:num_decodes])
// and the prefill wrapper the rest (qo_indptr rebased, paged_kv_indptr[num_decodes:] not rebased).
// Host code only, so the CPU build compiles and tests every rule.
#pragma once

#include <string>
#include <vector>

#include "attnscope/case_spec.h"
#include "attnscope/engine_metadata.h"
#include "attnscope/plan.h"
#include "fi_conventions.h"

namespace attnscope::peers::flashinfer {

enum class FiWrapper { kDecode, kPrefill };
const char* fi_wrapper_name(FiWrapper w);  // "decode wrapper", "prefill wrapper"

// One wrapper's share of vLLM's batch as FlashInfer receives it, in vLLM's (reordered) batch order.
struct VllmWrapperUnits {
  FiUnits units;                     // kv_indptr / kv_indices exactly as passed: not rebased for the prefill wrapper
  std::vector<int> entry;            // [units]: the index of each unit in vLLM's batch (a request or a virtual batch)
  std::vector<int> position;         // [units]: the reordered request position it belongs to
  std::vector<std::string> tensors;  // the engine's tensors this wrapper was given
};

// vLLM's whole batch split between the two wrappers, checked against what the kernel needs.
struct VllmFeed {
  std::string refusal;  // "/engine vllm-flashinfer: TENSOR ...: the rule" (no launch); "" when fed
  int num_decodes = 0, num_prefills = 0;
  std::vector<int> request_order;  // the case's request at each position of vLLM's batch
  VllmWrapperUnits decode, prefill;
  std::string mode;                     // the view's mode ("decode", "decode+prefill", "prefill+local" ...)
  std::vector<std::string> mismatches;  // the view's disagreements with attnscope's plan (legal values, fed as they are)
};

// From an engine view (engine_metadata(kVllmFlashInfer, c, p), or one a test edits). `pt`: the pool
// the kernel reads. Never throws; what the kernel cannot take is the refusal.
VllmFeed vllm_feed_from_view(const CaseSpec& c, const PageTable& pt, const EngineView& v);
VllmFeed vllm_feed(const CaseSpec& c, const Plan& p);

// The units backend `w` launches. Without /engine vllm-flashinfer: *u untouched, "" returned, *fed
// empty. With it: *u is the wrapper's units in the case's token order (Q and O rows stay attnscope's;
// vLLM's reorder is a permutation of them), *fed the line for the result message, or the refusal
// (the tensor or JSON path and the rule), including a batch part of which vLLM gives the other wrapper.
std::string feed_units(const CaseSpec& c, const Plan& p, FiWrapper w, FiUnits* u, std::string* fed);

}  // namespace attnscope::peers::flashinfer
