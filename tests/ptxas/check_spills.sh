#!/usr/bin/env bash
# ptxas' spill report on cuda.flash's kernel instances against the recorded list (tests/ptxas/spills.txt,
# docs/perf-history-2.md "Spills"): fails on a kernel that spills and is not listed, or whose bytes moved, or a
# listed one that no longer spills (update the list). The build compiles these units without -warn-spills,
# so this is where a new spill shows. The numbers are ptxas', so another nvcc than the list's skips (77).
# Usage: check_spills.sh LIST NVCC --reports OBJECT...     checks each unit's report that the build kept,
#                                                           OBJECT.ptxas.txt (tests/ptxas/report.sh); the ctest way
#        check_spills.sh LIST NVCC FLAG... -- UNIT.cu...   compiles each unit at -Xptxas -v and checks it
#        check_spills.sh LIST --output UNIT < ptxas-output  checks one unit's -Xptxas -v output (check_wgmma.sh)
# SPILLS_RECORD=1 prints the list's lines (unit, arch, kernel, spill stores, spill loads) instead (with --reports:
# from the build's reports, no compile).
set -uo pipefail
list=$1
shift
source "$(dirname "$0")/report.sh"

# "arch function stores loads" for every function of a ptxas -v output that spills
spills_of() {
  awk '/Compiling entry function .* for / { a = $NF; gsub(/\047/, "", a) }
       /Function properties for / { f = $NF }
       match($0, /[0-9]+ bytes spill stores, [0-9]+ bytes spill loads/) {
         split(substr($0, RSTART, RLENGTH), w, " "); if (w[1] + w[5] > 0) print a, f, w[1], w[5] }'
}

# compare one unit's ptxas output (stdin) with its lines of the list, for the architectures the list
# records ("# arches ..."); returns 1 on a difference, 77 when it matches but an architecture was not recorded
check_unit() {
  local unit=$1 out got want arches seen missing
  out=$(cat)
  if ! grep -q "Function properties for" <<<"$out"; then
    echo "$unit: no 'Function properties' in ptxas' output: this check cannot see its report"
    return 1
  fi
  got=$(spills_of <<<"$out" | sort)
  if [ -n "${SPILLS_RECORD:-}" ]; then  # write the list's lines instead of checking
    [ -z "$got" ] || sed "s/^/$unit /" <<<"$got"
    return 0
  fi
  arches=" $(sed -n 's/^# arches //p' "$list") "
  seen=$(sed -n "s/.*Compiling entry function .* for '\\(sm_[0-9a-z]*\\)'.*/\\1/p" <<<"$out" | sort -u)
  missing=$(for a in $seen; do [[ "$arches" == *" $a "* ]] || echo -n "$a "; done)
  got=$(awk -v A="$arches" 'index(A, " " $1 " ")' <<<"$got")
  # the list's lines for the architectures both recorded and compiled here
  want=$(awk -v u="$unit" -v A="$arches" -v S=" $(echo $seen) " '$1 == u && index(A, " " $2 " ") && index(S, " " $2 " ") {
    print $2, $3, $4, $5 }' "$list" | sort)
  if [ "$got" == "$want" ]; then
    echo "$unit: spills as recorded at $(echo $seen) ($(grep -c . <<<"$got") spilling kernels)"
    if [ -n "$missing" ]; then
      echo "SKIP: $unit: spills at ${missing% } not recorded in $list (the other architectures match)"
      return 77
    fi
    return 0
  fi
  echo "$unit: spills differ from $list (< recorded, > now: arch, kernel, spill stores, spill loads):"
  diff <(echo "$want") <(echo "$got") | grep '^[<>]'
  echo "if the change is intended, update $list and docs/perf-history-2.md (Spills)"
  return 1
}

nvcc_version() { "$1" --version | sed -n 's/.*release \([0-9.]*\), V\([0-9.]*\).*/\2/p'; }

if [ "${1:-}" == --output ]; then
  unit=$(basename "$2")
  unit=${unit%.o}
  check_unit "${unit%.cu}"
  exit $?
fi
nvcc=$1
shift
reports=
given=()
if [ "${1:-}" == --reports ]; then
  reports=1
else
  while [ $# -gt 0 ] && [ "$1" != -- ]; do given+=("$1"); shift; done
fi
shift
if [ $# == 0 ]; then
  echo "no unit or object to check (tests/CMakeLists.txt found none of the build's kernel instances)"
  exit 1
fi
recorded=$(sed -n 's/^# nvcc \([0-9.]*\).*/\1/p' "$list")
have=$(nvcc_version "$nvcc")
if [ "$recorded" != "$have" ] && [ -z "${SPILLS_RECORD:-}" ]; then
  echo "SKIP: $list was recorded with nvcc $recorded, this is nvcc $have: ptxas' spills differ between versions"
  exit 77
fi
fail=0
skip=0
for f in "$@"; do
  if [ -n "$reports" ]; then
    out=$(ptxas_report "$f" 2>&1) || { echo "$out"; fail=1; continue; }
    unit=$(basename "$f" .cu.o)
  else
    out=$("$nvcc" -fatbin -o /dev/null -std=c++20 -O3 -DNDEBUG -Xptxas -v "${given[@]}" "$f" 2>&1) ||
      { echo "$f: did not compile"; echo "$out" | tail -20; fail=1; continue; }
    unit=$(basename "$f" .cu)
  fi
  check_unit "$unit" <<<"$out"
  case $? in 0) ;; 77) skip=1 ;; *) fail=1 ;; esac
done
[ $fail == 0 ] && [ $skip == 1 ] && exit 77
exit $fail
