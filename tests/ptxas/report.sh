# Sourced by check_spills.sh and check_wgmma.sh: the build's ptxas report of one object.
# The build compiles cuda.flash's instances at -Xptxas=-v and cmake/ptxas_report_launcher.sh keeps each
# unit's compiler stderr as <object>.ptxas.txt; these checks read it rather than compiling the unit again.

# ptxas_report OBJECT: prints OBJECT's report; fails with the reason when it is missing or older than
# the object (a build made before the build kept reports, or an object the launcher did not compile)
ptxas_report() {
  local obj=$1 report=$1.ptxas.txt
  if [ -z "$obj" ]; then
    echo "no object given: tests/CMakeLists.txt found no object of this unit in the build" >&2
    return 1
  fi
  if [ ! -f "$report" ]; then
    echo "$(basename "$obj"): no ptxas report $report (the build keeps one per kernel instance:" \
      "build the CUDA backends with this tree's CMake, e.g. cmake --build build, then run the test again)" >&2
    return 1
  fi
  if [ "$obj" -nt "$report" ]; then
    echo "$(basename "$obj"): its ptxas report $report is older than the object: rebuild (cmake --build build)" >&2
    return 1
  fi
  cat "$report"
}
