// The skips the tests share: each ends the test with GTEST_SKIP() and the reason where what it needs is
// not here (a CUDA device, a compiled family, a backend that takes the probe case), so a file's own
// REQUIRE_* names only its probe.
#pragma once

#include <gtest/gtest.h>

#include <string>

#include "attnscope/device.h"
#include "attnscope/registry.h"

// Skips with `why_expr`'s text where it is not empty (a reason this test cannot run here).
#define REQUIRE_WHY_EMPTY(why_expr)                          \
  do {                                                       \
    const std::string require_why_ = (why_expr);             \
    if (!require_why_.empty()) GTEST_SKIP() << require_why_; \
  } while (0)

// Skips where no CUDA device is usable (query_devices finds none).
#define REQUIRE_DEVICE()                                                                     \
  do {                                                                                       \
    std::string require_device_;                                                             \
    if (attnscope::query_devices(&require_device_).empty()) GTEST_SKIP() << require_device_; \
  } while (0)

// Skips where this build has no CUDA backends or there is no device.
#define REQUIRE_GPU()                                                                   \
  do {                                                                                  \
    if (!attnscope::cuda_compiled()) GTEST_SKIP() << "this build has no CUDA backends"; \
    REQUIRE_DEVICE();                                                                   \
  } while (0)

// Skips where the family of backend `id` is not compiled, with its note (the configure-time reason).
#define REQUIRE_COMPILED(id)                                                                                            \
  do {                                                                                                                  \
    const attnscope::BackendFamily* require_family_ = attnscope::family_of(id);                                         \
    if (!require_family_ || !require_family_->compiled)                                                                 \
      GTEST_SKIP() << "the " << (require_family_ ? require_family_->name : std::string(id))                             \
                   << " family is not compiled: " << (require_family_ ? require_family_->note : std::string("absent")); \
  } while (0)

// The family of `id` is compiled and there is a device.
#define REQUIRE_COMPILED_GPU(id) \
  do {                           \
    REQUIRE_COMPILED(id);        \
    REQUIRE_DEVICE();            \
  } while (0)

// Skips where backend `id` refuses case `c` (not instantiated in this build, no device, ...): "id: why".
#define REQUIRE_TAKES(id, c)                                                         \
  do {                                                                               \
    const std::string require_refusal_ = attnscope::make_backend(id)->check(c);      \
    if (!require_refusal_.empty()) GTEST_SKIP() << (id) << ": " << require_refusal_; \
  } while (0)
