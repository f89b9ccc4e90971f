// `attnscope-cli run --dump DIR`: the inputs and every backend's outputs as .npy, plus meta.json
// describing the case in plain numbers, so other tools (tests/peer) can check them.
#pragma once

#include <string>

#include "session.h"

namespace attnscope {

// Writes q.npy [total_q, qo_heads, d_qk], k.npy / v.npy [total_kv, kv_heads, d] (logical order:
// request by request, key by key), o_<backend>.npy [total_q, qo_heads, d_vo],
// lse_<backend>.npy [total_q, qo_heads] (natural log) and meta.json. Returns the file count.
int dump_session(const Session& s, const std::string& dir);

}  // namespace attnscope
