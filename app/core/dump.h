// `attnscope-cli run --dump DIR`: the inputs and every backend's outputs as .npy, plus meta.json
// describing the case in plain numbers, so other tools (tests/peer) can check them. The pieces are
// public because `run --export-script` (export_script.h) writes the same files beside its script.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "attnscope/workload.h"
#include "session.h"

namespace attnscope {

// Creates `dir` (and its parents) and checks that a file can be written in it. Throws
// std::runtime_error naming the directory and the reason, so a bad DIR fails before a long run.
void prepare_output_dir(const std::string& dir);

// K or V of the workload in logical order [total_kv, kv_heads, head_dim] (request by request, key by
// key), whatever the paging, layout or allocation. `pool` is w.k_pool or w.v_pool.
std::vector<float> logical_kv(const CaseSpec& c, const PageTable& pt, const std::vector<float>& pool, int head_dim);

// q.npy [total_q, qo_heads, d_qk], k.npy / v.npy [total_kv, kv_heads, d] (logical order), float32.
// Returns the file count.
int write_input_npys(const CaseSpec& c, const PageTable& pt, const Workload& w, const std::string& dir);

// o_<backend>.npy [total_q, qo_heads, d_vo] and lse_<backend>.npy [total_q, qo_heads] (natural log)
// of every backend that ran. Returns the file count.
int write_result_npys(const Session& s, const std::string& dir);

// An int32 .npy, C order (page tables and indptrs, which FlashInfer takes as int32).
void write_npy_i32(const std::string& path, const std::vector<int>& data, const std::vector<int64_t>& shape);

// Writes q.npy, k.npy, v.npy, the o_/lse_ files above and meta.json. Returns the file count.
int dump_session(const Session& s, const std::string& dir);

}  // namespace attnscope
