#!/usr/bin/env bash
# On a GPU machine: build for the local architecture, run the GPU tests, compute-sanitizer
# (memcheck on the whole GPU test binary, racecheck and synccheck on a quick subset), and the
# benchmark table (every GPU backend beside PyTorch SDPA, tests/peer/bench_table.py). Logs go to
# $OUT (or ./gpu-logs). Usage: bash scripts/gpu-check.sh [arch]
# The pinned peer headers come from .deps/ (scripts/fetch-peers.sh), or from .carry/deps.tar.gz on
# a machine without network (pack it with: tar czf .carry/deps.tar.gz --exclude=.deps/nccl .deps: NCCL's
# library alone is over the carry limit, and the build there takes PyTorch's NCCL, backends/gpu/nccl_find.cmake).
# Knobs (environment): BUILD_TARGETS="gpu_tests attnscope-cli" (build only those), GPU_FILTER (run
# gpu_tests on a gtest filter instead of ctest -L gpu), CUDNN_FROM_TORCH=0 (build cudnn.sdpa against the
# cuDNN found beside the toolkit instead of PyTorch's wheel, the default), MEMCHECK_FILTER / MEMCHECK_TIMEOUT,
# SKIP_SANITIZER, SKIP_RACE (no racecheck / synccheck), SKIP_PTXAS_ALL / PTXAS_ARCHS (the cuda family
# compiled for every shipped architecture, default "80-real;90-real", and `ctest -L ptxas` on it), BENCH_CASES, REPS, SKIP_BENCH, SKIP_PEER,
# PROBES (case files to run with their comparisons), INVARIANCE_CASE / INVARIANCE_BACKEND, NCU_CASE,
# FLEX_GOLDEN=1 (record FlexAttention's block masks of the mask zoo, tests/peer/flex_block_masks.py), BEFORE (a
# saved run, e.g. docs/bench/<file>.json: issue 10's table gets its "before" column).
set -uo pipefail
cd "$(dirname "$0")/.."
arch="${1:-90}"
out="$(realpath -m "${OUT:-gpu-logs}")"
mkdir -p "$out"
if [ ! -d .deps/flashinfer ] && [ -f .carry/deps.tar.gz ]; then tar xzf .carry/deps.tar.gz; fi
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv > "$out/gpu.txt" 2>&1
logs=/tmp/attnscope-build-logs; mkdir -p "$logs"
cudnn_args=()
if [ "${CUDNN_FROM_TORCH:-1}" = 1 ]; then
  # Build cudnn.* against the cuDNN wheel PyTorch loads (nvidia-cudnn-cu13), every run the same: it is
  # the library of PyTorch's SDPA cuDNN backend in the benchmark table, and the binary's RPATH keeps it
  # (no LD_LIBRARY_PATH; issue 47). Another cuDNN on the machine (Debian's, the toolkit's) is not used.
  cw=$(python3 -c 'import nvidia.cudnn as m; print(list(m.__path__)[0])' 2>/dev/null || true)
  if [ -n "$cw" ] && [ -f "$cw/include/cudnn_version.h" ] && ls "$cw"/lib/libcudnn.so* > /dev/null 2>&1; then
    cudnn_args=(-DATTNSCOPE_CUDNN_ROOT="$cw")
  else
    echo "no cuDNN wheel with headers beside PyTorch ($cw): the cuDNN found beside the toolkit is used"
  fi
fi
cmake -S . -B build-gpu -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES="$arch" -DATTNSCOPE_GUI=OFF "${cudnn_args[@]}" ${EXTRA_CMAKE:-} > "$logs/configure.log" 2>&1 || { cp "$logs/configure.log" "$out/"; tail -30 "$logs/configure.log"; exit 1; }
# BUILD_TARGETS (e.g. "gpu_tests attnscope-cli") builds only those: the GPU run needs no CPU test binaries.
targets=()
for t in ${BUILD_TARGETS:-}; do targets+=(--target "$t"); done
cmake --build build-gpu -j"$(nproc)" "${targets[@]}" > "$logs/build.log" 2>&1 || { cp "$logs/build.log" "$out/"; grep -E "error" -A3 "$logs/build.log" | head -60; exit 1; }
grep -E "spill" "$logs/build.log" | sort -u | head -20
grep -E "attnscope: family|attnscope: cudnn" "$logs/configure.log"
if [ -n "${GPU_FILTER:-}" ]; then
  # the GPU test binary directly, on a subset (ctest needs every test binary built)
  timeout "${TEST_TIMEOUT:-600}" build-gpu/tests/gpu_tests --gtest_filter="$GPU_FILTER" > "$out/gpu-tests.log" 2>&1; echo "gpu_tests $GPU_FILTER: rc=$?"
  grep -E "^\[  (FAILED|PASSED|SKIPPED) |Failure" "$out/gpu-tests.log" | head -30
else
  ( cd build-gpu && ctest -L gpu --output-on-failure ${CTEST_ARGS:-} > "$out/ctest-gpu.log" 2>&1 ); echo "ctest -L gpu: rc=$?"
  tail -15 "$out/ctest-gpu.log"
fi
if [ "${SKIP_PTXAS_ALL:-0}" != 1 ]; then
  # Every architecture attnscope's kernels ship for, compiled and ptxas-checked here: a build without a GPU
  # (CI) compiles sm_90 alone (docs/architecture.md "What CI compiles"). Only the cuda family is built.
  pa="${PTXAS_ARCHS:-80-real;90-real}"
  { cmake -S . -B build-ptxas -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES="$pa" -DATTNSCOPE_GUI=OFF \
      -DATTNSCOPE_FLASHINFER=OFF -DATTNSCOPE_CUDNN=OFF -DATTNSCOPE_FLASH_ATTN=OFF > "$logs/ptxas-configure.log" 2>&1 &&
    cmake --build build-ptxas -j"$(nproc)" --target attnscope_family_cuda > "$logs/ptxas-build.log" 2>&1 &&
    ( cd build-ptxas && ctest -L ptxas --output-on-failure > "$out/ptxas-all.log" 2>&1 ); }
  echo "ctest -L ptxas at $pa: rc=$?"; tail -3 "$out/ptxas-all.log" 2>/dev/null || tail -20 "$logs/ptxas-build.log"
fi
cli=build-gpu/app/attnscope-cli
# which cuDNN (and other library) the binary runs: version and file, mismatches named
[ -x "$cli" ] && "$cli" devices | tee "$out/devices.txt"
# Device probes: cases whose comparisons say whether a library computes what the case means.
for p in ${PROBES:-}; do
  timeout 120 "$cli" run "$p" > "$out/probe-$(basename "$p" .json).log" 2>&1; echo "probe $(basename "$p"): rc=$?"
  grep -E " vs |^(ok|FAIL)" "$out/probe-$(basename "$p" .json).log" | head -8
done
if [ -n "${INVARIANCE_CASE:-}" ]; then
  timeout 180 "$cli" invariance "$INVARIANCE_CASE" --backend "${INVARIANCE_BACKEND:-flashinfer.prefill}" > "$out/invariance.log" 2>&1; echo "invariance: rc=$?"
  cat "$out/invariance.log" | head -12
fi
if [ "${FLEX_GOLDEN:-0}" = 1 ]; then
  # FlexAttention's printed block masks of the mask zoo, beside attnscope's (tests/data/flex_block_mask)
  python3 tests/peer/flex_block_masks.py --cli "$cli" --out "$out/flex_block_mask" > "$out/flex-golden.log" 2>&1; echo "flex golden: rc=$?"
  tail -3 "$out/flex-golden.log"
  # one file back instead of dozens (the device tool returns few files)
  tar czf "$out/flex_block_mask.tgz" -C "$out" flex_block_mask && rm -rf "$out/flex_block_mask"
fi
san=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
if [ "${SKIP_SANITIZER:-0}" != 1 ]; then
  ATTNSCOPE_GPU_QUICK=1 timeout "${MEMCHECK_TIMEOUT:-900}" "$san" --tool memcheck --error-exitcode 9 build-gpu/tests/gpu_tests ${MEMCHECK_FILTER:+--gtest_filter=$MEMCHECK_FILTER} > "$out/memcheck.log" 2>&1; echo "memcheck: rc=$?"
  tail -4 "$out/memcheck.log"
  if [ "${SKIP_RACE:-0}" != 1 ]; then
    ATTNSCOPE_GPU_QUICK=1 timeout 600 "$san" --tool racecheck --racecheck-report all --error-exitcode 9 build-gpu/tests/gpu_tests --gtest_filter='Gpu.FlashAgrees*:Gpu.FullyMasked*:FlashSm90.*' > "$out/racecheck.log" 2>&1; echo "racecheck: rc=$?"
    tail -4 "$out/racecheck.log"
    ATTNSCOPE_GPU_QUICK=1 timeout 600 "$san" --tool synccheck --error-exitcode 9 build-gpu/tests/gpu_tests --gtest_filter='Gpu.FlashAgrees*:FlashSm90.*' > "$out/synccheck.log" 2>&1; echo "synccheck: rc=$?"
    tail -3 "$out/synccheck.log"
  else
    echo "racecheck, synccheck: not run (SKIP_RACE=1)"
  fi
fi
if [ "${SKIP_BENCH:-0}" != 1 ]; then
  python3 tests/peer/bench_table.py --cli "$cli" --reps "${REPS:-30}" --json-out "$out/bench-table.json" ${BEFORE:+--before "$BEFORE"} \
    ${BENCH_CASES:-bench/prefill-*.json bench/decode-paged.json bench/decode-contiguous.json} > "$out/bench-table.md" 2> "$out/bench-table.log"
  echo "bench table: rc=$?"; cat "$out/bench-table.md"
fi
if [ "${SKIP_PEER:-0}" != 1 ]; then
  for b in bench/prefill-causal.json bench/prefill-noncausal.json; do
    python3 tests/peer/peer_check.py --cli "$cli" --case "$b" --reps "${REPS:-20}" --out "$out/peer-$(basename "$b" .json).json" > "$out/peer-$(basename "$b" .json).log" 2>&1
    echo "peer $(basename "$b"): rc=$?"; grep -E '"(torch_ms|attnscope_cuda_flash_ms|time_ratio_torch_over_attnscope|max_abs_vs_sdpa|max_abs_vs_fp32_ref|sdpa_max_abs_vs_fp32_ref|sdpa_backend)"' "$out/peer-$(basename "$b" .json).log"; tail -2 "$out/peer-$(basename "$b" .json).log" | grep -i error
  done
fi
if [ -n "${NCU_CASE:-}" ]; then
  ncu --section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats -k regex:flash_kernel -c 1 "$cli" run "$NCU_CASE" --backends cuda.flash > "$out/ncu.txt" 2>&1
  grep -E "Registers Per|Achieved Occupancy|Theoretical Occupancy|Block Limit|Compute \(SM\) Throughput|Memory Throughput|Duration|Stall|Warp Cycles Per Issued" "$out/ncu.txt" | head -30
fi
