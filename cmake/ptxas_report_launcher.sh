#!/usr/bin/env bash
# CUDA_COMPILER_LAUNCHER of the units whose ptxas report the ptxas tests read (backends/cuda/CMakeLists.txt):
# runs the rest of its command line (the user's own launcher such as ccache, then nvcc) and, for a unit
# compiled with -Xptxas=-v, keeps its compiler stderr in <object>.ptxas.txt, so the tests read the build's
# own report instead of compiling the unit again. The console gets stderr without ptxas' -v lines.
# Usage: ptxas_report_launcher.sh [LAUNCHER...] COMPILER ARG...
set -uo pipefail
obj= verbose= prev=
for a in "$@"; do
  case $prev in -o | --output-file) obj=$a ;; -Xptxas | --ptxas-options) [[ ",$a," == *,-v,* ]] && verbose=1 ;; esac
  case $a in
    -o=* | --output-file=*) obj=${a#*=} ;;
    -Xptxas=* | --ptxas-options=*) [[ ",${a#*=}," == *,-v,* ]] && verbose=1 ;;
  esac
  prev=$a
done
[ -n "$obj" ] && [ -n "$verbose" ] || exec "$@"
report=$obj.ptxas.txt
rm -f "$report"
"$@" 2>"$report.tmp"
status=$?
# ptxas -v: "ptxas info    : ..." lines and the indented "N bytes stack frame, ..." line under each function
grep -vE '^ptxas info +:|^ +[0-9]+ bytes stack frame' "$report.tmp" >&2
# touched after the move: stderr's last write comes before nvcc writes the object, and the tests take a
# report older than its object for a stale one
if [ $status == 0 ]; then mv -f "$report.tmp" "$report" && touch "$report"; else rm -f "$report.tmp"; fi
exit $status
