#!/usr/bin/env python3
"""The GUI screenshots in docs/screenshots/: how each was made, the code that draws it, and a check that none is
older than that code.

    python3 scripts/screenshots.py --check      # what the ctest Docs.ScreenshotsNewerThanTheirTabs runs
    python3 scripts/screenshots.py --remake --gui build/app/gui/attnscope [NAME.png ...]
                                                # remake the screenshots this machine can make (Xvfb)
    python3 scripts/screenshots.py --list       # each screenshot's command

--check compares, in git, the last commit that touched each screenshot with the last commit that touched each
file that draws its tab (SHOTS below: the tab's panel and the views it draws for that case). A drawing file
changed after its screenshot fails the check, naming both, until the screenshot is remade (--remake, then commit
it) or, for a screenshot this machine cannot remake (one made on the GPU machine), an exemption is recorded in
SHOTS: `"exempt": (COMMIT, WHY)` accepts changes to the drawing files up to COMMIT (their last commit when the
exemption was written) for the reason WHY; a later change fails again. Outside a git checkout (a source tarball)
the check cannot see the history and skips with the reason (exit 77, ctest's SKIP_RETURN_CODE).

Left out of every screenshot's list on purpose: the case editor, the status bar and the shared drawing helpers
(app/gui/draw/): every screenshot shows them, so listing them would make any change there stale every
screenshot. Python 3 standard library only.
"""
import argparse
import os
import shlex
import subprocess
import sys

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
SKIP = 77
P = "app/gui/panels/"

# name: how it was made (case, GUI arguments after it, window size) and the files that draw what it shows.
# "python": the case has a python: backend (run with --allow-python; needs PyTorch in the worker's Python).
# "gpu": made on the GPU machine with scripts/gpu-screenshot.sh (this list's --remake leaves it alone).
SHOTS = {
    "split.png": dict(case="examples/gqa-decode-long.json", args="--tab split", size="1400x860",
                      draws=[P + "split_panel.cpp", P + "split_panel_graph.cpp"]),
    "mask.png": dict(case="examples/llama4-chunked-local.json", args="--tab mask", size="1400x860",
                     draws=[P + "mask_panel.cpp"]),
    "pages.png": dict(case="examples/poisoned-pages.json", args="--tab pages", size="1400x860",
                      draws=[P + "pages_panel.cpp"]),
    "local.png": dict(case="examples/llama4-chunked-local.json", args="--tab local", size="1400x860",
                      draws=[P + "local_panel.cpp"]),
    "diff.png": dict(case="examples/prefix-lm.json", args="--tab diff", size="1400x860",
                     draws=[P + "diff_panel.cpp"]),
    "timing.png": dict(case="examples/prefix-lm.json", args="--tab timing", size="1400x860",
                       draws=[P + "timing_panel.cpp"]),
    "softmax.png": dict(case="examples/gemma2-window-softcap.json", args="--tab softmax", size="1600x1000",
                        draws=[P + "softmax_panel.cpp"]),
    "softmax-sink.png": dict(case="examples/gpt-oss-sinks-sliding.json", args="--tab softmax", size="1600x1000",
                             draws=[P + "softmax_panel.cpp"]),
    "tree-mask.png": dict(case="examples/eagle-tree-verify.json", args="--tab mask", size="1600x1000",
                          draws=[P + "mask_panel.cpp", P + "tree_view.cpp"]),
    "sweep.png": dict(case="examples/gqa-decode-long.json", args="--tab sweep --sweep /requests/*/kv_len=64:16384:x2",
                      size="1600x1000", draws=[P + "sweep_panel.cpp"]),
    "plan-cost.png": dict(case="examples/deepseek-v3-decode.json", args="--tab sweep --plan-cost", size="1600x1000",
                          draws=[P + "plan_cost_panel.cpp"]),
    "consistency.png": dict(case="examples/fp8-decode-vs-prefill.json", args="--tab consistency --consistency 128",
                            size="1600x1000", draws=[P + "consistency_panel.cpp"]),
    "merge.png": dict(case="examples/lse-base-mixup.json", args="--tab merge", size="1600x720",
                      draws=[P + "merge_panel.cpp", P + "merge_data.cpp"]),
    "engine.png": dict(case="examples/llama4-chunked-local.json", args="--tab engine --view sglang-fa",
                       size="1600x1000", draws=[P + "engine_panel.cpp"]),
    "engine-dsa.png": dict(case="examples/dsa-short-context.json", args="--tab engine --view sglang-nsa",
                           size="1600x1000", draws=[P + "engine_panel.cpp"]),
    "fp8-pages.png": dict(case="examples/fp8-kv-per-token-fragmented.json", args="--tab pages --view scales",
                          size="1400x860", draws=[P + "pages_panel.cpp", P + "fp8_views.cpp", P + "fp8_data.cpp"]),
    "fp8-saturation.png": dict(case="examples/fp8-e5m2-outliers-saturate.json", args="--tab pages --view scales",
                               size="1400x860",
                               draws=[P + "pages_panel.cpp", P + "fp8_views.cpp", P + "fp8_data.cpp"]),
    "fp8-channels.png": dict(case="examples/fp8-e5m2-outliers-saturate.json", args="--tab pages --view channels",
                             size="1400x860",
                             draws=[P + "pages_panel.cpp", P + "fp8_views.cpp", P + "fp8_data.cpp"]),
    "fp8-diff.png": dict(case="examples/fp8-e5m2-outliers-saturate.json", args="--tab diff --view original",
                         size="1400x860", draws=[P + "diff_panel.cpp"]),
    "mla-pages.png": dict(case="examples/deepseek-v3-decode.json", args="--tab pages", size="1280x800",
                          draws=[P + "pages_panel.cpp", P + "mla_view.cpp"]),
    "sparse-mask.png": dict(case="examples/deepseek-v32-dsa-decode.json", args="--tab mask", size="1600x1000",
                            draws=[P + "mask_panel.cpp", P + "sparse_view.cpp", P + "sparse_data.cpp"]),
    "sparse-pages.png": dict(case="examples/deepseek-v32-dsa-decode.json", args="--tab pages", size="1600x1000",
                             draws=[P + "pages_panel.cpp", P + "mla_view.cpp", P + "sparse_view.cpp",
                                    P + "sparse_data.cpp"]),
    "sparse-softmax.png": dict(case="examples/deepseek-v32-dsa-decode.json", args="--tab softmax", size="1600x1000",
                               draws=[P + "softmax_panel.cpp", P + "sparse_view.cpp", P + "sparse_data.cpp"]),
    "zoo-natten-2d.png": dict(case="examples/zoo/natten-2d.json", args="--tab mask", size="1400x860",
                              draws=[P + "mask_panel.cpp"]),
    "zoo-block-sparse.png": dict(case="examples/zoo/block-sparse.json", args="--tab mask", size="1400x860",
                                 draws=[P + "mask_panel.cpp"]),
    "split-flash-attn.png": dict(case="tests/data/readme/flash-attn-split-pages.json", args="--tab split",
                                 size="1600x1000", draws=[P + "split_panel.cpp", P + "split_panel_graph.cpp"]),
    "mask-flex-blockmask.png": dict(case="examples/python/flex-blockmask.json", args="--tab mask", size="1600x1000",
                                    python=True, draws=[P + "mask_panel.cpp"],
                                    exempt=("5d7b1fa", "made at 4e0e6fc on the CPU machine with PyTorch 2.11 (CPU) in "
                                            "the worker's Python, which this machine lacks; mask_panel.cpp changed "
                                            "after only in e5f4b06, a clang-format of one call (no text or drawing "
                                            "changed: git show -w e5f4b06), d68dba1, where a hovered key's value "
                                            "reads its generator stream through KeySource (the same values without "
                                            "/parallel; nothing drawn changed; bdef814 is its clang-format), and "
                                            "8e0066f / 87f29b9, the /sparse views (drawn only for a /sparse case, "
                                            "which this one is not; the block outlines' zoom test reads the same "
                                            "row height when no sparse row is stretched), and 5d7b1fa, parts of MaskPanel::draw moved into "
                                            "functions unchanged")),
    "sweep-h100-decode-kv-len.png": dict(
        case=None, args="--tab sweep --sweep-report docs/sweeps/h100-decode-kv-len.json",
        size="1600x1000", draws=[P + "sweep_panel.cpp"]),
    "sweep-h100-prefill-batch.png": dict(
        case=None, args="--tab sweep --sweep-report docs/sweeps/h100-prefill-batch.json",
        size="1600x1000", draws=[P + "sweep_panel.cpp"]),
    "gpu-timing.png": dict(case="tests/data/device/gui-real-backends.json", args="--tab timing", size="1600x1000",
                           gpu=True, draws=[P + "timing_panel.cpp"],
                           exempt=("913b7b6", "made on the H100 at cea836f with cuda.flash, FlashInfer and cuDNN "
                                   "running, which no CPU machine can remake; timing_panel.cpp changed after in "
                                   "4cb6d46 (one work count, the same figures), 26ddaa9 (a CUDA-event row's kernel "
                                   "note, shown only after 'time GPU backends', not pressed here), 65a89b8 (TFLOP/s "
                                   "and GB/s of the work each run did: a sampled reference marked *), 1b5eb82 and "
                                   "947265b (include paths, registry roles), 959d236 (a merge) and f001bab (a "
                                   "hand-off column for python: backends, none in this case) and 913b7b6 (a line over the "
                                   "figures only when a library other than the one built against is loaded: remade "
                                   "on the H200 on 2026-11-28, it showed no such line; that lean build lacked "
                                   "FlashInfer's Hopper units, so this fuller picture stays); timing.png, remade on "
                                   "the CPU build, shows the current tab")),
    "gpu-diff.png": dict(case="tests/data/device/gui-real-backends.json", args="--tab diff", size="1600x1000",
                         gpu=True, draws=[P + "diff_panel.cpp"],
                         exempt=("8ec9249", "made on the H100 at cea836f (flashinfer.prefill against the fp64 "
                                 "reference), which no CPU machine can remake; diff_panel.cpp changed after in "
                                 "3fc1ed6 and 03e6791 (an amber NOT CHECKED verdict; clang-format), c02e7fb (tick "
                                 "values on the heatmap's axes), 65a89b8 and e8d4317 (grey not-compared cells and "
                                 "their legend: this case compares every row), 2a9d57f and 8ac6d8d (code moved into "
                                 "helpers), e91eb06 and 5f941b3 (FP8 cases only), faf12d5 (tooltip wording) and 8ec9249 "
                                 "(an FP8 error split of stale results only); "
                                 "diff.png, remade on the CPU build, shows the current tab")),
    "gpu-split.png": dict(case="tests/data/device/gui-real-backends.json", args="--tab split", size="1600x1000",
                          gpu=True, draws=[P + "split_panel.cpp", P + "split_panel_graph.cpp"],
                          exempt=("acc8ab0", "made on the H100 at cea836f (FlashInfer's own planner answering from "
                                  "the device), which no CPU machine can remake; split_panel.cpp changed after in "
                                  "65a89b8 (hostile inputs), 947265b (registry roles), 302ad19 (MLA cases only), "
                                  "dd5f7b5 (FlashAttention-2's own split beside the model: a section this "
                                  "screenshot lacks) and 5d12ffa, and split_panel_graph.cpp in 5d12ffa and acc8ab0 "
                                  "(CUDA-graph cases only); split.png and split-flash-attn.png, remade on the CPU "
                                  "build, show the current tab")),
}


def git(*args):
    try:
        p = subprocess.run(["git", "-C", ROOT] + list(args), capture_output=True, text=True)
    except FileNotFoundError:  # no git installed: as good as no checkout
        return None
    return p.stdout.strip() if p.returncode == 0 else None


def last_change(path):
    """(unix time, short commit) of the last commit that touched path, or None."""
    out = git("log", "-1", "--format=%ct %h", "--", path)
    if not out:
        return None
    t, h = out.split()
    return int(t), h


def check():
    if git("rev-parse", "--is-inside-work-tree") != "true":
        print("SKIP: not a git checkout, or no git (%s): the screenshots' age cannot be compared with the code's"
              % ROOT)
        return SKIP
    if git("rev-parse", "--is-shallow-repository") == "true":
        print("SKIP: a shallow clone: its history ends before the screenshots were made, so their age cannot be "
              "compared with the code's (git fetch --unshallow)")
        return SKIP
    problems, shown = [], sorted(f for f in os.listdir(os.path.join(ROOT, "docs", "screenshots"))
                                 if f.endswith(".png"))
    for name in shown:
        if name not in SHOTS:
            problems.append("docs/screenshots/%s is in no row of scripts/screenshots.py's SHOTS: add how it was made "
                            "and the files that draw it" % name)
    for name, s in sorted(SHOTS.items()):
        png = "docs/screenshots/" + name
        made = last_change(png)
        if made is None:
            problems.append("%s is listed in SHOTS but not committed" % png)
            continue
        exempt = s.get("exempt")
        through = None
        if exempt:
            t = git("log", "-1", "--format=%ct", exempt[0])
            if t is None:
                problems.append("%s: its exemption names commit %s, which this history does not have" % (png, exempt[0]))
                continue
            through = int(t)
        for src in s["draws"]:
            if not os.path.exists(os.path.join(ROOT, src)):
                problems.append("%s: %s, listed as drawing it, does not exist (moved? update SHOTS)" % (png, src))
                continue
            changed = last_change(src)
            if changed is None or changed[0] <= made[0]:
                continue
            if through is not None and changed[0] <= through:
                continue
            how = ("on the GPU machine (scripts/gpu-screenshot.sh %s OUT TAB) and commit it, or renew its exemption in "
                   "scripts/screenshots.py with what changed" % s["case"] if s.get("gpu") else
                   "(python3 scripts/screenshots.py --remake --gui build/app/gui/attnscope %s), look at it, and "
                   "commit it" % name)
            problems.append("%s is stale: made in %s, but %s changed after it, in %s%s; remake it %s"
                            % (png, made[1], src, changed[1],
                               " (after its exemption, which covers changes up to %s)" % exempt[0] if exempt else "",
                               how))
    for p in problems:
        print(p)
    if problems:
        print("%d problem(s) with %d screenshot(s)" % (len(problems), len(SHOTS)))
        return 1
    print("ok: %d screenshot(s) newer than the code that draws them (%d exempt, with reasons)"
          % (len(SHOTS), sum(1 for s in SHOTS.values() if s.get("exempt"))))
    return 0


def command(name, gui, out):
    s = SHOTS[name]
    # a saved sweep (--sweep-report) opens the case it was run on
    return (["xvfb-run", "-a", "-s", "-screen 0 %sx24" % s["size"], gui] + ([s["case"]] if s["case"] else [])
            + ["--screenshot", out] + shlex.split(s["args"]) + ["--size", s["size"]])


def remake(gui, names):
    gui = os.path.abspath(gui)
    if not os.access(gui, os.X_OK):
        print("error: --gui %s is not an executable attnscope (build it first: bash scripts/build.sh)" % gui)
        return 2
    rc = 0
    for name in names or sorted(SHOTS):
        s = SHOTS[name]
        if s.get("gpu"):
            print("%s: made on the GPU machine (scripts/gpu-screenshot.sh %s OUT ...); not remade here" % (name,
                                                                                                        s["case"]))
            continue
        cmd = command(name, gui, os.path.join("docs", "screenshots", name))
        if s.get("python"):
            cmd.insert(cmd.index(s["case"]) + 1, "--allow-python")
        print("$ " + " ".join(shlex.quote(c) for c in cmd), flush=True)
        p = subprocess.run(cmd, cwd=ROOT)
        if p.returncode != 0:
            print("%s: exit %d" % (name, p.returncode))
            rc = 1
    return rc


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    g = ap.add_mutually_exclusive_group(required=True)
    g.add_argument("--check", action="store_true", help="fail naming each screenshot older than its drawing code")
    g.add_argument("--remake", action="store_true", help="remake the screenshots this machine can make")
    g.add_argument("--list", action="store_true", help="print each screenshot's command")
    ap.add_argument("--gui", default="build/app/gui/attnscope", help="the attnscope binary (for --remake)")
    ap.add_argument("names", nargs="*", help="screenshot file names (default: all)")
    a = ap.parse_args()
    unknown = [n for n in a.names if n not in SHOTS]
    if unknown:
        print("error: not in SHOTS: %s" % ", ".join(unknown))
        return 2
    if a.check:
        return check()
    if a.list:
        for n in a.names or sorted(SHOTS):
            print("%-30s %s" % (n, " ".join(shlex.quote(c) for c in command(n, "attnscope", "docs/screenshots/" + n))))
        return 0
    return remake(a.gui, a.names)


if __name__ == "__main__":
    sys.exit(main())
