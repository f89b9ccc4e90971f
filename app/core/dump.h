// `attnscope-cli run --dump DIR`: the inputs and every backend's outputs as .npy, plus meta.json
// describing the case in plain numbers, so other tools (tests/peer) can check them. The pieces are
// public because `run --export-script` (export_script.h) writes the same files beside its script.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string>
#include <string_view>
#include <vector>

#include "attnscope/workload.h"
#include "session.h"

namespace attnscope {

// Creates `dir` (and its parents) and checks that a file can be written in it (with a new file of a
// fresh name, removed again). Throws std::runtime_error naming the directory and the reason, so a
// bad DIR fails before a long run.
void prepare_output_dir(const std::string& dir);

// Writes the concatenated `parts` as dir/name without opening what is there: into a new file
// created exclusively in dir, renamed over `name` at the end, so a link at dir/name is replaced,
// not written through (and a hard link's other names keep their content). Throws std::runtime_error.
void write_file_in(const std::string& dir, const std::string& name, std::initializer_list<std::string_view> parts);

// dir/name as a C-order .npy of float32 (T = float) or int32 (T = int: page tables and indptrs,
// which FlashInfer takes as int32), written as write_file_in does. Throws std::logic_error when
// data does not hold exactly the shape's count of values.
template <class T>
void write_npy_in(const std::string& dir, const std::string& name, const std::vector<T>& data, const std::vector<int64_t>& shape);

// K or V of the workload in logical order [total_kv, kv_heads, head_dim] (request by request, key by
// key), whatever the paging, layout or allocation. `pool` is w.k_pool or w.v_pool.
std::vector<float> logical_kv(const CaseSpec& c, const PageTable& pt, const std::vector<float>& pool, int head_dim);

// q.npy [total_q, qo_heads, d_qk], k.npy / v.npy [total_kv, kv_heads, d] (logical order), float32.
// Returns the file count.
int write_input_npys(const CaseSpec& c, const PageTable& pt, const Workload& w, const std::string& dir);

// "o_<backend>.npy" for prefix "o_": the file a result is dumped to, '/' and '%' in the id (a python:
// backend's path) escaped as %2F and %25 so that the name stays in DIR.
std::string result_npy_name(const std::string& prefix, const std::string& backend);

// o_<backend>.npy [total_q, qo_heads, d_vo] and lse_<backend>.npy [total_q, qo_heads] (natural log)
// of every backend that ran; no lse_ file for one that returned no LSE (a python: function may).
// Returns the file count.
int write_result_npys(const Session& s, const std::string& dir);

// Writes q.npy, k.npy, v.npy, the o_/lse_ files above and meta.json (each result with "files": the
// names written, "lse": null and a note where none was). Returns the file count.
int dump_session(const Session& s, const std::string& dir);

}  // namespace attnscope
