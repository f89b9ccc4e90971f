#!/usr/bin/env python3
"""Prints the skipped tests of the last ctest run with their GTEST_SKIP reasons.

ctest shows only "(Skipped)" in its summary and the reason only with -V; this reads the run's log
(Testing/Temporary/LastTest.log, full output of every test) and prints one line per reason: the reason,
how many tests it skipped and their names (the first few when many share it). A gtest skip gives its
GTEST_SKIP message; a script test that skips (SKIP_RETURN_CODE) ends its output with "SKIP: reason".
Usage: skip-summary.py [BUILD_DIR or LastTest.log]  (default: the current directory). Exits 0 unless the log
cannot be read (2), so it never changes the test command's own status.
"""
import os
import re
import sys

SHOWN = 3  # names listed per reason before "and N more"

TEST_HEAD = re.compile(r"^\d+/\d+ Test: (.+)$")
SKIP_AT = re.compile(r"^(\S+:\d+): Skipped$")  # gtest: "<file>:<line>: Skipped", the message below it
SKIP_END = re.compile(r"^\[  SKIPPED \] ")
SCRIPT_SKIP = re.compile(r"^SKIP: (.*)$")  # a script test that exits with its SKIP_RETURN_CODE says why last
OUTPUT_END = "<end of output>"


def skipped_tests(lines):
    """(test name, reason) for each test whose output has a gtest skip."""
    out, name, reason, in_skip, last = [], None, None, False, ""
    for line in lines:
        if line == OUTPUT_END:
            script = SCRIPT_SKIP.match(last)
            if name is not None and reason is None and script:
                reason = [script.group(1)]
        last = line
        head = TEST_HEAD.match(line)
        if head:
            if name is not None and reason is not None:
                out.append((name, reason))
            name, reason, in_skip = head.group(1), None, False
            continue
        if name is None:
            continue
        if SKIP_AT.match(line) and reason is None:
            in_skip, reason = True, []
        elif in_skip and SKIP_END.match(line):
            in_skip = False
        elif in_skip:
            reason.append(line.strip())
        elif reason is None and SKIP_END.match(line):
            reason = []  # a skip whose location line was not printed
    if name is not None and reason is not None:
        out.append((name, reason))
    return [(n, " ".join(r for r in rs if r) or "(no reason given)") for n, rs in out]


def summary(skips):
    by_reason = {}
    for name, reason in skips:
        by_reason.setdefault(reason, []).append(name)
    lines = [f"{len(skips)} test{'s' if len(skips) != 1 else ''} skipped, by reason:"] if skips else []
    for reason, names in sorted(by_reason.items(), key=lambda kv: (-len(kv[1]), kv[0])):
        shown = ", ".join(names[:SHOWN]) + (f" and {len(names) - SHOWN} more" if len(names) > SHOWN else "")
        lines.append(f"  {len(names):3}  {reason}  [{shown}]")
    return lines


def main(argv):
    where = argv[1] if len(argv) > 1 else "."
    log = os.path.join(where, "Testing", "Temporary", "LastTest.log") if os.path.isdir(where) else where
    try:
        with open(log, encoding="utf-8", errors="replace") as f:
            lines = f.read().splitlines()
    except OSError as e:
        print(f"skip-summary: cannot read {log}: {e.strerror}", file=sys.stderr)
        return 2
    for line in summary(skipped_tests(lines)):
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
