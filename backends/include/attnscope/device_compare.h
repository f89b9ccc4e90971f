// Comparisons where the data is (docs/architecture.md, "Where comparisons run"): when both results of
// a comparison carry a device copy (Result::device) on one device, the order-defined pass runs there
// and only its summaries (chunk partials, error-map cells) cross to the host; its bits are the host's.
#pragma once

#include <cstdint>
#include <optional>

#include "attnscope/compare.h"

namespace attnscope {

// The pass of `a` against `b` on the device holding both copies; nullopt where either has none, they
// are on different devices, a copy was dropped, or this build has no CUDA (the caller then runs
// host_diff_pass).
std::optional<DiffPass> device_diff_pass(const CaseSpec& c, const Result& a, const Result& b, double rtol, double atol);

// compare_results' pass for case c: the device's where it can, else the host's.
DiffPassFn diff_pass_where_the_data_is(const CaseSpec& c);

// Device copies are kept only where a run asks (RunOptions::keep_device_copy) and up to this many
// bytes in the whole process, the oldest dropped first (and all of them whenever a backend needs
// the memory). 1 GiB unless set.
void set_device_copy_budget(int64_t bytes);
int64_t device_copy_budget();
int64_t device_copy_bytes();  // held now

}  // namespace attnscope
