// The engine-metadata tests' lookups: a tensor of an EngineView by name (engine_metadata.h).
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "attnscope/engine_metadata.h"

namespace attnscope::testing {

using V = std::vector<int64_t>;

// The tensor's values (a test failure, and none, when the view has no such tensor).
inline V values(const EngineView& v, const std::string& name) {
  const EngineTensor* t = v.find(name);
  EXPECT_NE(t, nullptr) << name;
  return t ? t->values : V{};
}

// Its shape, {-1} when absent.
inline V shape(const EngineView& v, const std::string& name) {
  const EngineTensor* t = v.find(name);
  return t ? t->shape : V{-1};
}

}  // namespace attnscope::testing
