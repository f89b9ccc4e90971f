#!/usr/bin/env bash
# The README's test command: set-up, build, then every test (labels cpu, cli, gui, gpu, ptxas).
# GPU tests skip with a reason when no CUDA device is present; the reasons of every skipped test are
# printed after ctest's summary (scripts/skip-summary.py), and the exit status stays ctest's.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh "$@"
cd build
status=0
ctest --output-on-failure -j"$(nproc)" || status=$?
if command -v python3 >/dev/null; then
  python3 ../scripts/skip-summary.py . || true
fi
exit $status
