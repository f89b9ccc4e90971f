#!/usr/bin/env bash
# Here, on the CPU machine (nvcc, no GPU): builds for sm_90 the binaries scripts/gpu-ab.sh times, so a
# GPU call spends its device time measuring, not compiling (building both trees there took 130-180 s of
# each A/B call; two cuda.flash-only trees take about 3.5 minutes on two cores here).
#   base: `git archive ${BASE_REF:-HEAD}`; new: this working tree (committed or not)
#   cuda.flash alone (no FlashInfer, cuDNN, GUI), head dims DIMS (default "64;128")
#   TESTS=1: the new tree also builds gpu_tests, with every head dim (its cases choose their own)
#   BASE_BIN=path: take this attnscope-cli as the base instead of building one (INFO names the path;
#   its tree is whatever built it); PACK=path: where to pack (several variants of one base: one pack each,
#   timed in one GPU call with gpu-ab.sh's PACK)
# Packs .carry/prebuilt.tar.xz (base/attnscope-cli, new/attnscope-cli, new/gpu_tests with TESTS=1, INFO; xz:
# the device carries at most 64 MiB in all, and a cli of every head dim is 84 MB unpacked).
# There: PREBUILT=1 CASES="prefill-noncausal ..." bash scripts/gpu-ab.sh (carry .carry).
# The binaries need the GPU machine's libcudart.so.13 and a glibc / libstdc++ at least as new as the
# symbols they use (built on Debian 12: up to GLIBC_2.34, GLIBCXX_3.4.29); gpu-ab.sh checks that they
# start there and builds instead when they do not. gpu_tests finds the repository's examples through
# the absolute source path compiled into it, so build it from the same path the GPU machine's copy has.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
work="${WORK:-/tmp/attnscope-prebuild}"
rm -rf "$work"
mkdir -p "$work/src-base" "$work/pack/base" "$work/pack/new"
git archive "${BASE_REF:-HEAD}" | tar x -C "$work/src-base"
flags=(-DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 -DATTNSCOPE_GUI=OFF -DATTNSCOPE_FLASHINFER=OFF
  -DATTNSCOPE_CUDNN=OFF)
t0=$(date +%s)
build() {  # source dir, build dir, head dims ("" = all), tests ON/OFF, targets...
  local src=$1 b=$2 dims=$3 tests=$4
  shift 4
  local targets=()
  for t in "$@"; do targets+=(--target "$t"); done
  cmake -S "$src" -B "$b" "${flags[@]}" -DATTNSCOPE_TESTS="$tests" -DATTNSCOPE_FLASH_HEAD_DIMS="$dims" > "$b.cfg.log" 2>&1 ||
    { tail -20 "$b.cfg.log"; exit 1; }
  cmake --build "$b" -j"$(nproc)" "${targets[@]}" > "$b.log" 2>&1 || { grep -A3 ' error' "$b.log" | head -30; exit 1; }
  echo "built $(basename "$b") ($*) at $(( $(date +%s) - t0 ))s"
}
dims="${DIMS:-64;128}"
new_dims=$dims
[ "${TESTS:-0}" = 1 ] && new_dims="all (TESTS=1)"
if [ -n "${BASE_BIN:-}" ]; then  # a base attnscope-cli built before (e.g. another pack's base/), not built again
  cp "$BASE_BIN" "$work/pack/base/attnscope-cli"
else
  build "$work/src-base" "$work/b-base" "$dims" OFF attnscope-cli
  cp "$work/b-base/app/attnscope-cli" "$work/pack/base/"
fi
if [ "${TESTS:-0}" = 1 ]; then
  build "$root" "$work/b-new" "" ON attnscope-cli gpu_tests
  cp "$work/b-new/tests/gpu_tests" "$work/pack/new/"
else
  build "$root" "$work/b-new" "$dims" OFF attnscope-cli
fi
cp "$work/b-new/app/attnscope-cli" "$work/pack/new/"
{
  echo "base: ${BASE_BIN:+the binary $BASE_BIN, not built here; }$(git rev-parse --short "${BASE_REF:-HEAD}"); new: the working tree at $(git rev-parse --short HEAD)$(git diff --quiet HEAD || echo ' with changes')"
  echo "head dims: base $dims, new $new_dims; sm_90; built $(date -u +%FT%TZ)"
} > "$work/pack/INFO"
mkdir -p .carry
rm -f .carry/prebuilt.tar.gz  # an older pack's name
pack="${PACK:-.carry/prebuilt.tar.xz}"
tar cJf "$pack" -C "$work/pack" .
echo "packed $pack ($(du -h "$pack" | cut -f1)): $(tr '\n' ' ' < "$work/pack/INFO")"
# what travels to the GPU machine: the tracked files and the carried paths (the device tool's limit: 64 MiB)
total=$(( $(git ls-files -z | xargs -0 du -cb 2> /dev/null | tail -1 | cut -f1) + $(du -b "$pack" | cut -f1) ))
if [ "$total" -gt $(( 64 * 1024 * 1024 )) ]; then
  echo "warning: the tree and this pack come to $(( total / 1024 / 1024 )) MiB, over the 64 MiB a device call carries:" \
    "build fewer head dims (DIMS=128) or without TESTS=1"
fi
