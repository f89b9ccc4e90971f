// The python family's parts (family.cpp builds the descriptor from them).
#pragma once

#include <memory>
#include <string>

#include "attnscope/backend.h"

namespace attnscope::python {

// The backend running FUNCTION of FILE (an absolute path) for id python:PATH.py:FUNCTION.
std::unique_ptr<Backend> make_python_backend(const std::string& id, const std::string& file, const std::string& fn);

}  // namespace attnscope::python
