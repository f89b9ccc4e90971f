#!/usr/bin/env python3
"""Golden block masks from PyTorch's FlexAttention for the mask zoo (issue 12).

For every case with a mask_mod (examples/zoo/*.json by default), each request and each block size,
this builds the mask_mod from attnscope's own PyTorch translation of the expression
(`attnscope-cli plan CASE --json`, expressions.mask_mod.torch), calls FlexAttention's
create_block_mask(mask_mod, 1, 1, q_len, kv_len, BLOCK_SIZE=N) on the GPU and writes str(block_mask)
to OUT/<case>.r<request>.bs<N>.txt; then compares it with what attnscope prints
(`attnscope-cli plan CASE --flex-block-mask N`). tests/cpu/test_mask_zoo.cpp checks attnscope's text
against the recorded files on every CI run.

FlexAttention's q_idx counts from 0 within the query tensor; attnscope's is the absolute position
kv_len - q_len + i, so the translation adds that offset. Exit 0 when every text is equal, 1 if one
differs, 2 if PyTorch or a GPU is missing.

usage: python3 tests/peer/flex_block_masks.py --cli build/app/attnscope-cli --out tests/data/flex_block_mask
"""
import argparse
import glob
import json
import os
import re
import subprocess
import sys


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("cases", nargs="*")
    ap.add_argument("--cli", default="build/app/attnscope-cli")
    ap.add_argument("--out", default="tests/data/flex_block_mask")
    ap.add_argument("--block-sizes", default="128,64")
    ap.add_argument("--max-requests", type=int, default=2)
    a = ap.parse_args()
    try:
        import torch
        from torch.nn.attention.flex_attention import create_block_mask
    except ImportError as e:
        print(f"needs PyTorch with FlexAttention: {e}", file=sys.stderr)
        return 2
    if not torch.cuda.is_available():
        print("needs a CUDA device", file=sys.stderr)
        return 2
    os.makedirs(a.out, exist_ok=True)
    cases = a.cases or sorted(glob.glob(os.path.join(os.path.dirname(__file__), "../../examples/zoo/*.json")))
    bad = n = 0
    for path in cases:
        case = json.load(open(path))
        if "mask_mod" not in case.get("attention", {}):
            continue
        plan = json.loads(subprocess.run([a.cli, "plan", path, "--json"], capture_output=True, text=True, check=True).stdout)
        body = plan["expressions"]["mask_mod"]["torch"]
        name = os.path.splitext(os.path.basename(path))[0]
        hq = case["heads"]["qo"]
        for r, req in enumerate(case["requests"][: a.max_requests]):
            ql, kl = req["q_len"], req["kv_len"]
            starts = req.get("doc_starts", [0])
            doc_id = torch.zeros(kl, dtype=torch.int64, device="cuda")
            for s in starts[1:]:
                doc_id[s:] += 1
            env = {
                "torch": torch,
                "q_len": ql,
                "kv_len": kl,
                "prefix_len": req.get("prefix_len", 0),
                "_b": lambda x: torch.as_tensor(x) != 0,
                "_doc": lambda x, d=doc_id: d[torch.as_tensor(x).long()],
                "_alibi": lambda h: torch.tensor([0.0] * hq, device="cuda")[torch.as_tensor(h).long()],
            }
            src = f"def mask_mod(b, h, q_idx, kv_idx):\n    q_idx = q_idx + {kl - ql}\n    return _b({body})\n"
            exec(src, env)
            for bs in [int(x) for x in a.block_sizes.split(",")]:
                bm = create_block_mask(env["mask_mod"], 1, 1, ql, kl, device="cuda", BLOCK_SIZE=bs)
                theirs = str(bm)
                out = subprocess.run([a.cli, "plan", path, "--flex-block-mask", str(bs)], capture_output=True, text=True, check=True).stdout
                # the section of request r: after its header line, up to the closing ")"
                m = re.search(rf"^request {r}: [^\n]*\n(.*?\n\))", out, re.S | re.M)
                ours = m.group(1) if m else "(missing)"
                fname = f"{name}.r{r}.bs{bs}.txt"
                open(os.path.join(a.out, fname), "w").write(theirs + "\n")
                n += 1
                if ours != theirs:
                    bad += 1
                    print(f"DIFFERS {fname}\n--- FlexAttention\n{theirs}\n--- attnscope\n{ours}")
                else:
                    print(f"equal   {fname}")
    print(f"{n - bad} of {n} block-mask texts equal to FlexAttention's ({torch.__version__}, {torch.cuda.get_device_name(0)})")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
