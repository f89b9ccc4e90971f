#!/usr/bin/env python3
"""scripts/skip-summary.py on a ctest log (LastTest.log's format, CMake 3.25): the skipped tests' reasons, grouped."""
import os
import subprocess
import sys
import tempfile
import unittest

SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts", "skip-summary.py")


def block(i, name, body, verdict):
    return f"""{i}/9 Testing: {name}
{i}/9 Test: {name}
Command: "/b/tests/cpu_tests" "--gtest_filter={name}" "--gtest_also_run_disabled_tests"
Directory: /b/tests
"{name}" start time: Nov 25 23:19 UTC
Output:
----------------------------------------------------------
Running main() from ./googletest/src/gtest_main.cc
Note: Google Test filter = {name}
[==========] Running 1 test from 1 test suite.
[ RUN      ] {name}
{body}<end of output>
Test time =   0.01 sec
----------------------------------------------------------
{verdict}
"{name}" end time: Nov 25 23:19 UTC
----------------------------------------------------------

"""


def skipped(name, at, *reason):
    body = f"{at}: Skipped\n" + "".join(r + "\n" for r in reason) + f"[  SKIPPED ] {name} (0 ms)\n"
    body += f"[==========] 1 test from 1 test suite ran. (0 ms total)\n[  PASSED  ] 0 tests.\n"
    body += f"[  SKIPPED ] 1 test, listed below:\n[  SKIPPED ] {name}\n"
    return body, "Test Pass Reason:\nSkip regular expression found in output. Regex=[\\[  SKIPPED \\]]"


def passed(name):
    return f"[       OK ] {name} (0 ms)\n[  PASSED  ] 1 test.\n", "Test Passed."


def failed(name):
    return f"../../tests/cpu/t.cpp:9: Failure\nExpected equality\n[  FAILED  ] {name} (0 ms)\n", "Test Failed."


def sample():
    tests = [
        ("Gpu.A", *skipped("Gpu.A", "../../tests/gpu/test_gpu.cpp:40", "this build has no CUDA backends")),
        ("Types.Ok", *passed("Types.Ok")),
        ("Gpu.B", *skipped("Gpu.B", "../../tests/gpu/test_gpu.cpp:80", "this build has no CUDA backends")),
        ("Gui.Shot", *skipped("Gui.Shot", "../../tests/gui/test_gui.cpp:5", "xvfb-run is not installed", "(see setup)")),
        ("Gpu.C", *skipped("Gpu.C", "../../tests/gpu/test_gpu.cpp:90", "this build has no CUDA backends")),
        ("Mask.Bad", *failed("Mask.Bad")),
        ("Gpu.D", *skipped("Gpu.D", "../../tests/gpu/test_gpu.cpp:99", "this build has no CUDA backends")),
        ("Gpu.E", *skipped("Gpu.E", "../../tests/gpu/test_gpu.cpp:99", "this build has no CUDA backends")),
        ("Plan.Quiet", *skipped("Plan.Quiet", "../../tests/cpu/t.cpp:3")),
        ("Ptxas.Old", "compiling\nSKIP: recorded with nvcc 13.0.88, this is nvcc 12.4\n", "Test Passed."),
        ("Docs.Says", "SKIP: in the middle, not last\nok\n", "Test Passed."),
    ]
    head = "Start testing: Nov 25 23:19 UTC\n----------------------------------------------------------\n"
    return head + "".join(block(i + 1, n, b, v) for i, (n, b, v) in enumerate(tests)) + "End testing: Nov 25 23:20 UTC\n"


def run(*args):
    return subprocess.run([sys.executable, SCRIPT, *args], capture_output=True, text=True)


class SkipSummary(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()
        os.makedirs(os.path.join(self.dir.name, "Testing", "Temporary"))
        self.log = os.path.join(self.dir.name, "Testing", "Temporary", "LastTest.log")
        with open(self.log, "w") as f:
            f.write(sample())

    def tearDown(self):
        self.dir.cleanup()

    def test_groups_reasons_most_common_first(self):
        r = run(self.dir.name)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(
            r.stdout.splitlines(),
            [
                "8 tests skipped, by reason:",
                "    5  this build has no CUDA backends  [Gpu.A, Gpu.B, Gpu.C and 2 more]",
                "    1  (no reason given)  [Plan.Quiet]",
                "    1  recorded with nvcc 13.0.88, this is nvcc 12.4  [Ptxas.Old]",
                "    1  xvfb-run is not installed (see setup)  [Gui.Shot]",
            ],
        )

    def test_log_file_given_directly(self):
        self.assertEqual(run(self.log).stdout, run(self.dir.name).stdout)

    def test_no_skips_prints_nothing(self):
        with open(self.log, "w") as f:
            f.write(sample().replace("Skipped\n", "Skipped?\n").replace("[  SKIPPED ]", "[  PASSED  ]").replace("SKIP:", "ok"))
        r = run(self.dir.name)
        self.assertEqual((r.returncode, r.stdout), (0, ""))

    def test_missing_log_is_an_error_on_stderr(self):
        r = run(os.path.join(self.dir.name, "nope"))
        self.assertEqual(r.returncode, 2)
        self.assertEqual(r.stdout, "")
        self.assertIn("cannot read", r.stderr)


if __name__ == "__main__":
    unittest.main()
