#!/usr/bin/env bash
# The README's test command: set-up, build, then every test (labels cpu, cli, gui, gpu).
# GPU tests skip with a reason when no CUDA device is present.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh "$@"
cd build
ctest --output-on-failure -j"$(nproc)"
