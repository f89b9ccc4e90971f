#!/usr/bin/env bash
# Installs the dependencies (Debian packages) and builds attnscope into build/.
# Extra arguments go to CMake's configure step (e.g. -DCMAKE_CUDA_ARCHITECTURES=90).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup-deps.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release "$@"
cmake --build build -j"$(nproc)"
