// The `explain` command's core and the Softmax tab's data: one row's online-softmax step-through
// (attnscope/softmax_trace.h) built from a case, and its JSON form.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "attnscope/softmax_trace.h"

namespace attnscope {

// Plans the case, generates its host inputs and traces query `query` of request `request`, head
// `head`. Throws std::invalid_argument naming the argument for a row that does not exist, or when
// the case's inputs exceed the CPU limit.
// `sparse_checks` as explain_row's.
SoftmaxTrace explain_case(const CaseSpec& c, int request, int query, int head, bool sparse_checks = false);

// How the trace's logits are formed, in words: "q.k x sm_scale x log2(e) = q.k x 0.12752 (P =
// exp2(fma(q.k, 0.12752, -m)))", or with the soft-cap, the ALiBi term, the score_mod. The CLI and
// the Softmax tab print the same line.
std::string logit_formula(const SoftmaxTrace& t);

// schema attnscope/explain@1: the row, the plan, every tile step, the partials, the merge, the final
// and exact results. Infinities are written as the strings "-inf" / "inf".
nlohmann::json trace_to_json(const SoftmaxTrace& t);

}  // namespace attnscope
