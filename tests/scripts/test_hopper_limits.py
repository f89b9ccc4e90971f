#!/usr/bin/env python3
"""bench/hopper_limits.py on hand-written `attnscope-cli bench --json` files: the rows, each run's copy bandwidth, the
ratios computed from the medians given, the cells of a backend that did not run, and a set with no result at all."""
import json
import os
import subprocess
import sys
import tempfile
import unittest

SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bench", "hopper_limits.py")


def ok(backend, ms, kv_gbps=0.0, share=0.0, tflops=0.0):
    return {"backend": backend, "status": "ok", "note": "", "median_ms": ms, "min_ms": ms, "max_ms": ms, "reps": 30,
            "tflops": tflops, "gbps": kv_gbps, "kv_gbps": kv_gbps, "copy_share": share}


def bench(rows, copy=4000.0):
    return {"schema": "attnscope/bench@1", "case": "c", "device": "NVIDIA TEST GPU", "copy_gbps": copy, "rows": rows}


def table(files):
    with tempfile.TemporaryDirectory() as d:
        for name, b in files.items():
            with open(os.path.join(d, name + ".json"), "w") as f:
                json.dump(b, f)
        p = subprocess.run([sys.executable, SCRIPT, d], capture_output=True, text=True)
        return p.returncode, p.stdout


class HopperLimits(unittest.TestCase):
    def test_rows_and_ratios(self):
        rc, out = table({
            "dec-bf16": bench([ok("cuda.flash", 0.5, 4000, 0.98), ok("flashinfer.decode", 1.0, 2000, 0.5)], 4100),
            "dec-fp8": bench([ok("cuda.flash", 0.25, 4000, 0.97),
                              {**ok("flashinfer.decode", 0), "status": "unsupported", "note": "no FP8 here"}], 4120),
            "mla": bench([ok("cuda.flash", 0.3, 1000, 0.25), ok("flashinfer.mla_sm90", 0.15, 2000, 0.5)]),
            "pre-causal": bench([ok("cuda.flash", 0.9, tflops=400), ok("cudnn.sdpa", 0.6, tflops=600),
                                 ok("python.fa3", 0.5, tflops=720)]),
            "sinks-on": bench([ok("cuda.flash", 0.412), ok("flashinfer.prefill", 0.55)]),
            "sinks-off": bench([ok("cuda.flash", 0.4), ok("flashinfer.prefill", 0.55)]),
        })
        self.assertEqual(rc, 0, out)
        self.assertIn("device: NVIDIA TEST GPU; device copy bandwidth per run (GB/s, read + write): 4100, 4120, 4000", out)
        self.assertIn("| 0.500 ms = 4000 GB/s (98% of copy) | flashinfer.decode 1.000 ms = 2000 GB/s (50% of copy) | 0.50x", out)
        self.assertIn("flashinfer.decode unsupported: no FP8 here | 2.00x faster than its bf16 |", out)
        self.assertIn("cuda.flash takes 2.00x of its time", out)
        # the better peer is FA3 (0.5 ms): cuda.flash at 0.9 ms runs at 0.56x of its speed
        self.assertIn("python.fa3 (FlashAttention-3) 0.500 ms = 720 TF/s | 0.56x of the better peer's speed", out)
        self.assertIn("| same, non-causal | not run | cudnn.sdpa not run; python.fa3 (FlashAttention-3) not run | n/a", out)
        self.assertIn("cuda.flash | 0.412 ms / 0.400 ms | | sink cost +3.0% |", out)
        self.assertIn("flashinfer.prefill | 0.550 ms / 0.550 ms | | sink cost +0.0% |", out)

    def test_no_result_fails(self):
        rc, out = table({})
        self.assertEqual(rc, 1)
        self.assertIn("no bench run produced a result", out)


if __name__ == "__main__":
    unittest.main()
