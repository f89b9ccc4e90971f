#!/usr/bin/env python3
"""Generate and check the command outputs shown in attnscope's Markdown docs.

Every output block in README.md and in every docs/*.md (docs/cli.md, docs/cli-tour.md, docs/fp8.md, ...) comes
from a named case run by this script, so a change in what the tool prints fails the ctest
`Docs.GeneratedOutputsMatchTheTool` until the docs are regenerated. A block moved from one of these files to
another stays checked; a hand-written output in any of them is an error:

    python3 scripts/readme-outputs.py --write    # regenerate every block in place (after a build)
    python3 scripts/readme-outputs.py --check    # what the test runs: exit 1 naming each stale block

Markers (HTML comments, invisible on GitHub):

  <!-- output: attnscope-cli ARGS [| SELECTOR]... -->
  ```
  (generated: "$ build/app/attnscope-cli ARGS", then stdout, then stderr, then "[exit N]" when N != 0)
  ```

  SELECTORs make an excerpt; each adds lines (a union), omitted runs show as "...":
    first N | last N | lines A-B | match REGEX (every matching line) | section REGEX (from the first
    matching line to the line before the next blank one) | no-gaps (leave the omitted runs unmarked: for
    a list taken out of a longer text, such as the command lines of --help; say so beside the block)

  <!-- ids: attnscope-cli backends -->`a`, `b`, ...<!-- /ids -->   (inline: the first word of each line)

Timings change from run to run, so both the stored and the fresh text are normalised before comparing:
numbers followed by `us` / `ms` / `host` / `gpu`, the column under a `host ms` header, and the environment-dependent
tail of the `library` line (FlashInfer's own planner: not compiled / no device / the device) are masked, and
runs of spaces collapse. Everything else (digests, errors, verdicts, statistics, plans) must match exactly.
A fenced block that starts with "$ ...attnscope-cli" but has no marker is an error: outputs are never
hand-written (GPU measurements live in docs/performance.md and docs/gpu-runs.md as prose and tables, with their
provenance).
Python 3 standard library only.
"""
import argparse
import difflib
import os
import re
import shlex
import subprocess
import sys

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))


def default_files():
    """README.md and every Markdown file directly under docs/, sorted: what --check and --write read."""
    docs = os.path.join(ROOT, "docs")
    return ["README.md"] + sorted("docs/" + f for f in os.listdir(docs) if f.endswith(".md"))


SHOWN_CLI = "build/app/attnscope-cli"  # the path a reader has after `bash scripts/build.sh`
REGEN = "python3 scripts/readme-outputs.py --write"

OUTPUT_RE = re.compile(r"^<!-- output: (.*?) -->\s*$")
IDS_RE = re.compile(r"<!-- ids: (.*?) -->(.*?)<!-- /ids -->")
FENCE_RE = re.compile(r"^(```+|~~~+)")


class MarkerError(Exception):
    pass


# ---------------------------------------------------------------- running the tool


def run_cli(cli, args, timeout=300):
    env = dict(os.environ, LC_ALL="C")
    try:
        p = subprocess.run([cli] + args, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise MarkerError("attnscope-cli %s: no answer within %d s" % (" ".join(args), timeout))
    return p.returncode, p.stdout, p.stderr


def split_marker(body):
    parts = [s.strip() for s in body.split(" | ")]
    words = shlex.split(parts[0])
    if not words or words[0] != "attnscope-cli":
        raise MarkerError('the command must start with "attnscope-cli": %r' % parts[0])
    return parts[0], words[1:], parts[1:]


def select(lines, selectors):
    """The lines the selectors keep (a union), with "..." for each omitted run."""
    if not selectors:
        return lines
    keep = set()
    n = len(lines)
    gaps = "no-gaps" not in selectors
    for sel in selectors:
        if sel == "no-gaps":
            continue
        kind, _, arg = sel.partition(" ")
        arg = arg.strip()
        try:
            if kind == "first":
                keep.update(range(min(int(arg), n)))
            elif kind == "last":
                keep.update(range(max(0, n - int(arg)), n))
            elif kind == "lines":
                a, b = (int(x) for x in arg.split("-"))
                keep.update(range(a - 1, min(b, n)))
            elif kind in ("match", "section"):
                rx = re.compile(shlex.split(arg)[0] if arg.startswith(("'", '"')) else arg)
                hits = [i for i, l in enumerate(lines) if rx.search(l)]
                if not hits:
                    raise MarkerError("selector %r matches no line of the output" % sel)
                if kind == "match":
                    keep.update(hits)
                else:
                    i = hits[0]
                    while i < n and lines[i].strip():
                        keep.add(i)
                        i += 1
            else:
                raise MarkerError("unknown selector %r (first N, last N, lines A-B, match RE, section RE, no-gaps)" % sel)
        except ValueError:
            raise MarkerError("bad selector %r" % sel)
    out, prev = [], -1
    for i in sorted(keep):
        if i != prev + 1 and gaps:
            out.append(" " * (len(lines[i]) - len(lines[i].lstrip())) + "...")
        out.append(lines[i])
        prev = i
    if prev != n - 1 and n and gaps:
        out.append("...")
    return out


def generate(cli, body):
    shown, args, selectors = split_marker(body)
    rc, out, err = run_cli(cli, args)
    lines = (out + err).rstrip("\n").split("\n") if (out + err).strip() else []
    lines = [l.rstrip() for l in lines]
    lines = select(lines, selectors)
    if rc != 0:
        lines.append("[exit %d]" % rc)
    return "\n".join(["$ " + SHOWN_CLI + shown[len("attnscope-cli"):]] + lines)


def backend_ids(cli, body):
    shown, args, _ = split_marker(body)
    rc, out, err = run_cli(cli, args)
    if rc == 0 and out.strip():
        return [l.split()[0] for l in out.splitlines() if l.strip() and not l.startswith(" ")]
    # Until `attnscope-cli backends` exists: the registry's list as the --backends check prints it.
    rc2, _, err2 = run_cli(cli, ["run", "examples/prefix-lm.json", "--backends", "?"])
    m = re.search(r"must be one of (.+)$", err2.strip())
    if m:
        print("note: %s failed (%s); took the ids from the --backends error instead" % (shown, (err or out).strip()),
              file=sys.stderr)
        return [s.strip() for s in m.group(1).split(",")]
    raise MarkerError("%s failed (exit %d: %s) and the --backends error lists no ids: cannot list the backend ids"
                      % (shown, rc, (err or out).strip()))


# ---------------------------------------------------------------- comparing


NUM = r"-?\d+(?:\.\d+)?(?:e[-+]?\d+)?"
TIMING_RES = [
    (re.compile(r"(?<![\w.])" + NUM + r"(?= (?:us|ms|host|gpu)\b)"), "<t>"),
    (re.compile(r"(FlashInfer's own planner).*"), r"\1 <environment>"),
]
TIMING_COLUMNS = ["host ms"]


def normalise(text):
    """The text with timings and environment-dependent parts masked, spaces collapsed."""
    out, cols = [], []
    for line in text.split("\n"):
        line = line.rstrip()
        if not line:
            cols = []
        for h in TIMING_COLUMNS:
            c = line.find(h)
            if c >= 0:
                cols = [c]
                break
        else:
            for c in cols:
                if c < len(line) and line[c] != " " and (c == 0 or line[c - 1] == " "):
                    m = re.match(r"\S+", line[c:])
                    line = line[:c] + "<t>" + line[c + m.end():]
        for rx, rep in TIMING_RES:
            line = rx.sub(rep, line)
        out.append(re.sub(r" {2,}", " ", line))
    return "\n".join(out).strip("\n")


# ---------------------------------------------------------------- the documents


def blocks_of(path, lines):
    """(marker line index, marker body, first content line, closing fence line) of each output block."""
    found = []
    for i, line in enumerate(lines):
        m = OUTPUT_RE.match(line)
        if not m:
            continue
        f = FENCE_RE.match(lines[i + 1]) if i + 1 < len(lines) else None
        if not f:
            raise MarkerError("%s:%d: the output marker must be followed by a fenced block" % (path, i + 1))
        j = i + 2
        while j < len(lines) and not lines[j].startswith(f.group(1)):
            j += 1
        if j == len(lines):
            raise MarkerError("%s:%d: the fenced block is not closed" % (path, i + 2))
        found.append((i, m.group(1), i + 2, j))
    return found


def unmarked_outputs(path, lines, blocks):
    """Fenced blocks that show an attnscope-cli command's output without a marker."""
    starts = {b[2] - 1 for b in blocks}
    bad, in_fence = [], None
    for i, line in enumerate(lines):
        f = FENCE_RE.match(line)
        if in_fence is None and f:
            in_fence = (i, f.group(1))
            if i not in starts and i + 1 < len(lines) and re.match(r"^\$ \S*attnscope-cli\b", lines[i + 1]):
                bad.append("%s:%d: a hand-written attnscope-cli output; add an <!-- output: ... --> marker above it"
                           % (path, i + 1))
        elif in_fence is not None and line.startswith(in_fence[1]):
            in_fence = None
    return bad


def process(path, cli, write, force, problems):
    full = os.path.join(ROOT, path)
    with open(full, encoding="utf-8") as f:
        lines = f.read().split("\n")
    blocks = blocks_of(path, lines)
    problems.extend(unmarked_outputs(path, lines, blocks))
    changed = 0
    for marker, body, a, b in reversed(blocks):
        stored = "\n".join(lines[a:b])
        try:
            fresh = generate(cli, body)
        except MarkerError as e:
            raise MarkerError("%s:%d: %s" % (path, marker + 1, e))
        if normalise(stored) == normalise(fresh) and not force:
            continue
        if write:
            lines[a:b] = fresh.split("\n")
            changed += 1
            continue
        diff = difflib.unified_diff(normalise(stored).split("\n"), normalise(fresh).split("\n"),
                                    "%s (stored)" % path, "attnscope-cli (now)", lineterm="", n=1)
        problems.append("%s:%d: the output of `%s` differs from what the tool prints now (times shown as <t>):\n%s"
                        % (path, marker + 1, body, "\n".join(list(diff)[:60])))
    for i, line in enumerate(lines):
        for m in list(IDS_RE.finditer(line)):
            try:
                ids = ", ".join("`%s`" % x for x in backend_ids(cli, m.group(1)))
            except MarkerError as e:
                raise MarkerError("%s:%d: %s" % (path, i + 1, e))
            if ids == m.group(2):
                continue
            if write:
                line = line.replace(m.group(0), "<!-- ids: %s -->%s<!-- /ids -->" % (m.group(1), ids))
                lines[i] = line
                changed += 1
            else:
                problems.append("%s:%d: the ids of `%s` are now %s (stored: %s)" % (path, i + 1, m.group(1), ids,
                                                                                  m.group(2)))
    if write and changed:
        with open(full, "w", encoding="utf-8") as f:
            f.write("\n".join(lines))
        print("%s: %d block(s) regenerated" % (path, changed))
    return len(blocks)


# ---------------------------------------------------------------- self-test of the normaliser


def self_test(cli):
    """The check ignores a timing and catches a digest, a verdict and a statistic (each must hold)."""
    body = "attnscope-cli run examples/prefix-lm.json"
    one, two = generate(cli, body), generate(cli, body)
    fails = []

    def expect(same, a, b, what):
        if (normalise(a) == normalise(b)) != same:
            fails.append(what)

    expect(True, one, two, "two runs of the same case must compare equal (timings masked)")
    t = re.search(r"^(cpu\.reference\s+ok\s+)(\S+)", one, re.M)
    expect(True, one, one.replace(t.group(0), t.group(1) + "98765.4"), "a changed host ms must compare equal")
    expect(True, one, re.sub(r"\(" + NUM + r" us\)", "(1234.5 us)", one), "a changed plan time must compare equal")
    d = re.search(r"\b[0-9a-f]{16}\b", one).group(0)
    expect(False, one, one.replace(d, d[:-1] + ("0" if d[-1] != "0" else "1")), "a changed digest must differ")
    expect(False, one, one.replace("PASS", "FAIL", 1), "a changed verdict must differ")
    m = re.search(r"max abs (" + NUM + r")", one).group(1)
    expect(False, one, one.replace("max abs " + m, "max abs 9" + m, 1), "a changed max abs must differ")
    expect(False, one, one.replace("ok: ", "FAILED: ", 1), "a changed summary must differ")
    sweep = generate(cli, "attnscope-cli sweep examples/prefix-lm.json --set /data/seed=1,2 --backends cpu.tiled")
    expect(True, sweep, re.sub(NUM + " host", "777.77 host", sweep), "a changed sweep time must compare equal")
    expect(False, sweep, sweep.replace("SKIP", "PASS", 1), "a changed sweep verdict must differ")
    # End to end on a file: a stale block and a hand-written one are named; --write mends the stale one.
    import tempfile
    val = generate(cli, "attnscope-cli validate examples/prefix-lm.json")
    with tempfile.TemporaryDirectory() as tmp:
        md = os.path.join(tmp, "doc.md")
        with open(md, "w") as f:
            f.write("<!-- output: attnscope-cli validate examples/prefix-lm.json -->\n```\n%s\n```\n\n```\n"
                    "$ attnscope-cli run x.json\nok\n```\n" % val.replace("2 requests", "3 requests"))
        problems = []
        process(md, cli, False, False, problems)
        if len(problems) != 2 or "differs" not in problems[1] or "hand-written" not in problems[0]:
            fails.append("a stale block and a hand-written one must both be named, got %r" % problems)
        process(md, cli, True, False, [])
        with open(md) as f:
            if val not in f.read():
                fails.append("--write must regenerate the stale block")
    for f in fails:
        print("self-test FAILED: " + f)
    print("self-test: %d of 11 checks hold" % (11 - len(fails)))
    return 1 if fails else 0


def find_cli(given):
    if given:
        return os.path.abspath(given)
    for p in ("build/app/attnscope-cli", "build-cpu/app/attnscope-cli"):
        if os.access(os.path.join(ROOT, p), os.X_OK):
            return os.path.join(ROOT, p)
    return None


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    g = ap.add_mutually_exclusive_group(required=True)
    g.add_argument("--check", action="store_true", help="exit 1 naming every block that differs from the tool")
    g.add_argument("--write", action="store_true", help="regenerate the blocks that differ, in place")
    g.add_argument("--self-test", action="store_true", help="check that the comparison masks timings only")
    ap.add_argument("--force", action="store_true", help="with --write: rewrite every block, not only changed ones")
    ap.add_argument("--cli", help="the attnscope-cli binary (default build/app/ or build-cpu/app/attnscope-cli)")
    ap.add_argument("files", nargs="*", help="Markdown files relative to the repository (default: %s)"
                    % "README.md and docs/*.md")
    a = ap.parse_args()
    cli = find_cli(a.cli)
    if not cli or not os.access(cli, os.X_OK):
        print("error: --cli: no attnscope-cli binary (%s); build it first (bash scripts/build.sh)" % (cli or "none found"),
              file=sys.stderr)
        return 2
    if a.self_test:
        return self_test(cli)
    problems, total = [], 0
    try:
        for path in a.files or default_files():
            total += process(path, cli, a.write, a.force, problems)
    except MarkerError as e:
        print("error: " + str(e), file=sys.stderr)
        return 2
    for p in problems:
        print(p + "\n")
    if problems:
        print("%d problem(s) in %d generated block(s). The docs show what attnscope-cli printed when they were made; "
              "regenerate them with `%s` (after building attnscope-cli) and commit the result." % (len(problems), total,
                                                                                                     REGEN))
        return 1
    if a.check:
        print("ok: %d generated output block(s) match the tool" % total)
    return 0


if __name__ == "__main__":
    sys.exit(main())
