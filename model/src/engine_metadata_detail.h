// Helpers the engine metadata files share (engine_metadata.cpp defines them).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "attnscope/engine_metadata.h"

namespace attnscope::engine_detail {

EngineView sglang_view(const CaseSpec& c, const Plan& p);
EngineView vllm_view(const CaseSpec& c, const Plan& p);
// The DSA engines' views (engine_metadata_dsa.cpp): sglang-nsa and vllm-flashmla-sparse.
EngineView dsa_view(Engine e, const CaseSpec& c, const Plan& p);
std::optional<std::string> dsa_size_refusal(Engine e, const CaseSpec& c, const PageTable& pt);

std::optional<std::string> common_refusal(const CaseSpec& c);
// The page table's rows, `width` columns, 0 past a request's pages (an engine's zeroed table).
std::vector<std::vector<int64_t>> page_rows(const PageTable& pt, int width);
EngineTensor table_tensor(const std::string& name, const std::vector<std::vector<int64_t>>& rows, int width, bool slots,
                          const std::string& note);
EngineTensor vec_tensor(const std::string& name, const std::string& dtype, const std::vector<int64_t>& v,
                        const std::string& note = "");
EngineTensor scalar(const std::string& name, int64_t v, const std::string& note = "");
std::string number_text(double x);                               // shortest form: 50, 30.5
std::vector<int64_t> prefix_sum(const std::vector<int64_t>& v);  // [0, v0, v0 + v1, ...]

}  // namespace attnscope::engine_detail
