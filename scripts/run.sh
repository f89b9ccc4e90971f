#!/usr/bin/env bash
# The README's run command: set-up, build, then open a case (default: a bundled example).
# With a display and the GUI built, the GUI opens; otherwise attnscope-cli plans and runs the case.
# The build's own output is shown (a first build with CUDA takes long; a silent one would look hung).
set -euo pipefail
cd "$(dirname "$0")/.."
case_file="${1:-examples/mixed-prefill-decode-fragmented.json}"
start=$SECONDS

echo "run.sh: [1/2] build: packages (scripts/setup-deps.sh), CMake configure, then compile with CMake's [ NN%] progress" >&2
bash scripts/build.sh >&2
echo "run.sh: [2/2] built in $((SECONDS - start)) s; opening $case_file" >&2
if [ -x build/app/gui/attnscope ] && [ -n "${DISPLAY:-}${WAYLAND_DISPLAY:-}" ]; then
  exec build/app/gui/attnscope "$case_file"
fi
if [ -x build/app/gui/attnscope ]; then
  echo "run.sh: no display; running the case headless with attnscope-cli instead" >&2
fi
build/app/attnscope-cli plan "$case_file"
echo
exec build/app/attnscope-cli run "$case_file"
