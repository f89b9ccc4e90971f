#!/usr/bin/env bash
# A/B of cuda.flash on a GPU machine: a base tree against this working tree, both built in the same
# run, each case timed alternately (base, new) for ROUNDS rounds, so the two columns share the GPU's
# state (docs/perf-history.md's "one run vs HEAD" numbers). Optional: GPU tests and compute-sanitizer
# on the new build.
#
# Here (with git): mkdir -p .carry && git archive HEAD | gzip > .carry/base.tar.gz
# There:           CASES="prefill-noncausal decode-paged" bash scripts/gpu-ab.sh
# (carry .carry; the device has no network, so the real-library backends build only when .deps is
# there: DEPS=1 unpacks .carry/deps.tar.gz; cuda.flash alone needs nothing).
# PREBUILT=1: no build here; the binaries come from .carry/prebuilt.tar.xz (or PACK; scripts/gpu-prebuild.sh,
# run on the CPU machine), and when they do not start on this machine's image, it builds as without it.
# Knobs: CASES (names under bench/), ROUNDS (2), REPS (30), BASE_DIMS (head dims the base builds,
# "64;128"), NEW_DIMS (empty: all, as the tests need), TESTS / MEMCHECK / RACE (gtest filters for
# gpu_tests, plain / under memcheck / under racecheck, ATTNSCOPE_GPU_QUICK=1), ENV_A / ENV_B
# (environment for each side instead of two trees, e.g. ENV_A=ATTNSCOPE_FLASH_PAIR=1
# ENV_B=ATTNSCOPE_FLASH_PAIR=0 with BASE=new). Results in $OUT (or ./gpu-logs): ab.txt, tests.log.
set -u
cd "$(dirname "$0")/.."
out="$(realpath -m "${OUT:-gpu-logs}")"; mkdir -p "$out"
nvidia-smi --query-gpu=name --format=csv,noheader
[ "${DEPS:-0}" = 1 ] && [ -f .carry/deps.tar.gz ] && tar xzf .carry/deps.tar.gz
t0=$(date +%s)
new_cli=build-gpu/app/attnscope-cli tests_bin=build-gpu/tests/gpu_tests prebuilt=0
if [ "${PREBUILT:-0}" = 1 ]; then
  pb=/tmp/ab-prebuilt
  rm -rf "$pb" && mkdir -p "$pb"
  # Python's tarfile reads xz without the xz tool, which an image may lack
  unpack='import sys, tarfile
t = tarfile.open(sys.argv[1])
try:
    t.extractall(sys.argv[2], filter="data")
except TypeError:  # a Python without extraction filters
    t.extractall(sys.argv[2])'
  if ! python3 -c "$unpack" "${PACK:-.carry/prebuilt.tar.xz}" "$pb"; then
    echo "PREBUILT=1: could not unpack ${PACK:-.carry/prebuilt.tar.xz} (scripts/gpu-prebuild.sh makes it); building instead"
  elif "$pb/new/attnscope-cli" --help > /dev/null 2>&1 && "$pb/base/attnscope-cli" --help > /dev/null 2>&1; then
    prebuilt=1 new_cli=$pb/new/attnscope-cli tests_bin=$pb/new/gpu_tests
    base_cli=$pb/base/attnscope-cli
    [ "${BASE:-tree}" = tree ] || base_cli=$new_cli
    echo "prebuilt: $(tr '\n' ' ' < "$pb/INFO")"
  else
    echo "PREBUILT=1: the carried binaries do not start here ($("$pb/new/attnscope-cli" --help 2>&1 | head -1)); building instead"
  fi
fi
if [ "$prebuilt" = 0 ]; then
  cmake -S . -B build-gpu -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 -DATTNSCOPE_GUI=OFF \
    ${NEW_DIMS:+-DATTNSCOPE_FLASH_HEAD_DIMS=$NEW_DIMS} > /tmp/ab-cfg-new.log 2>&1 || { tail -20 /tmp/ab-cfg-new.log; exit 1; }
  base_cli=build-gpu/app/attnscope-cli
  if [ "${BASE:-tree}" = tree ]; then
    [ -f .carry/base.tar.gz ] || { echo "no .carry/base.tar.gz (git archive HEAD | gzip > .carry/base.tar.gz); or BASE=new"; exit 2; }
    rm -rf /tmp/ab-base && mkdir -p /tmp/ab-base && tar xzf .carry/base.tar.gz -C /tmp/ab-base
    cmake -S /tmp/ab-base -B /tmp/ab-base/b -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 -DATTNSCOPE_GUI=OFF \
      -DATTNSCOPE_FLASH_HEAD_DIMS="${BASE_DIMS:-64;128}" > /tmp/ab-cfg-base.log 2>&1 || { tail -20 /tmp/ab-cfg-base.log; exit 1; }
    (cmake --build /tmp/ab-base/b -j"$(( $(nproc) / 3 + 1 ))" --target attnscope-cli > /tmp/ab-build-base.log 2>&1
     echo "base build rc=$? $(( $(date +%s) - t0 ))s") &
    base_cli=/tmp/ab-base/b/app/attnscope-cli
  fi
  cmake --build build-gpu -j"$(nproc)" --target attnscope-cli gpu_tests > /tmp/ab-build-new.log 2>&1
  echo "new build rc=$? $(( $(date +%s) - t0 ))s"
  wait
  grep -h -A3 ' error' /tmp/ab-build-new.log /tmp/ab-build-base.log 2>/dev/null | head -30
fi
if [ -n "${TESTS:-}${MEMCHECK:-}${RACE:-}" ] && [ ! -x "$tests_bin" ]; then
  echo "TESTS / MEMCHECK / RACE: no $tests_bin (prebuilt without TESTS=1?): not run"
  TESTS="" MEMCHECK="" RACE=""
fi
if [ -n "${TESTS:-}" ]; then
  timeout 400 "$tests_bin" --gtest_filter="$TESTS" > "$out/tests.log" 2>&1; echo "gpu_tests $TESTS: rc=$?"
  grep -E '^\[  (FAILED|PASSED|SKIPPED) |Failure|^\[==========\]' "$out/tests.log" | head -30
fi
median() {  # cli, env, case -> the cuda.flash median in ms (or the row's status)
  env $2 "$1" bench "bench/$3.json" --backends cuda.flash --reps "${REPS:-30}" --json 2>/dev/null |
    python3 -c 'import json,sys; r=json.load(sys.stdin)["rows"][0]; print("%.3f" % r["median_ms"] if r.get("median_ms") else r.get("status"))'
}
for r in $(seq 1 "${ROUNDS:-2}"); do
  for c in ${CASES:-}; do
    echo "round $r $c base $(median "$base_cli" "${ENV_A:-}" "$c") new $(median "$new_cli" "${ENV_B:-}" "$c")"
  done
done | tee "$out/ab.txt"
san=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
if [ -n "${MEMCHECK:-}" ]; then
  ATTNSCOPE_GPU_QUICK=1 timeout 300 "$san" --tool memcheck --error-exitcode 9 "$tests_bin" --gtest_filter="$MEMCHECK" > "$out/memcheck.log" 2>&1
  echo "memcheck $MEMCHECK: rc=$?"; tail -3 "$out/memcheck.log"
fi
if [ -n "${RACE:-}" ]; then
  ATTNSCOPE_GPU_QUICK=1 timeout 300 "$san" --tool racecheck --racecheck-report all --error-exitcode 9 "$tests_bin" --gtest_filter="$RACE" > "$out/racecheck.log" 2>&1
  echo "racecheck $RACE: rc=$?"; tail -3 "$out/racecheck.log"
fi
echo "total $(( $(date +%s) - t0 ))s"
