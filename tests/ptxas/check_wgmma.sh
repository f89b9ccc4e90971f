#!/usr/bin/env bash
# ptxas' wgmma pipeline report on cuda.flash's Hopper kernels: fails when ptxas serialises a wgmma
# ("wgmma.mma_async instructions are serialized ...", C7510-C7520) or injects a warpgroup.arrive
# (C7519). ptxas says so only at -v and the kernel still computes the same bits, just without its
# overlap, so neither the build nor a GPU test would notice (docs/perf-history-2.md v37: a chain whose
# length a branch decided, or a 64-register S accumulator, serialised every wgmma of the kernel).
# The instances' ptxas output is the build's own: it compiles them at -Xptxas=-v and keeps each report as
# OBJECT.ptxas.txt (tests/ptxas/report.sh). A probe with a known trap, compiled here with the same flags,
# comes first, so a silent ptxas (another version's wording) fails rather than passes.
# With --spills LIST, each instance's spills are also checked against the recorded list (check_spills.sh;
# the build compiles these without -warn-spills), from the same report.
# Usage: check_wgmma.sh [--spills LIST] NVCC PROBE.cu FLAG... -- OBJECT... (FLAG: the build's sm_90a
# flags and -I dirs for the probe, tests/CMakeLists.txt passes ATTNSCOPE_SM90_CUDA_FLAGS; OBJECT: the
# objects of the Hopper instances)
set -uo pipefail
spills=
if [ "$1" == --spills ]; then spills=$2; shift 2; fi
nvcc=$1 probe=$2
shift 2
here=$(dirname "$0")
source "$here/report.sh"
if [ -n "$spills" ]; then
  recorded=$(sed -n 's/^# nvcc \([0-9.]*\).*/\1/p' "$spills")
  have=$("$nvcc" --version | sed -n 's/.*release [0-9.]*, V\([0-9.]*\).*/\1/p')
  if [ "$recorded" != "$have" ]; then
    echo "spills not checked: $spills was recorded with nvcc $recorded, this is nvcc $have"
    spills=
  fi
fi
given=()
while [ $# -gt 0 ] && [ "$1" != -- ]; do given+=("$1"); shift; done
shift
if [ $# == 0 ]; then
  echo "no object to check (tests/CMakeLists.txt found none of the Hopper instances)"
  exit 1
fi
flags=(-cubin -o /dev/null -std=c++20 -O3 -Xptxas -v "${given[@]}")
pat='wgmma.mma_async instructions are serialized|warpgroup.arrive is injected'
out=$("$nvcc" "${flags[@]}" "$probe" 2>&1) || { echo "the probe did not compile:"; echo "$out" | tail -20; exit 1; }
if ! grep -qE "$pat" <<<"$out"; then
  echo "ptxas did not report the probe's known wgmma trap: this check cannot see its messages"
  echo "$out" | tail -5
  exit 1
fi
echo "probe: ptxas reports its wgmma trap, as it should"
fail=0
for f in "$@"; do
  out=$(ptxas_report "$f" 2>&1) || { echo "$out"; fail=1; continue; }
  unit=$(basename "$f" .cu.o)
  if ! grep -q "Compiling entry function .* for 'sm_90a'" <<<"$out"; then
    echo "$unit: no sm_90a entry function in its ptxas report: this check cannot see its messages"
    fail=1
  elif grep -E "$pat" <<<"$out"; then
    echo "$unit: ptxas serialises wgmma (above)"
    fail=1
  else
    echo "$unit: no wgmma serialised"
  fi
  if [ -n "$spills" ]; then
    bash "$here/check_spills.sh" "$spills" --output "$f" <<<"$out"
    case $? in 0 | 77) ;; *) fail=1 ;; esac  # 77: an architecture the list does not record, said above
  fi
done
exit $fail
