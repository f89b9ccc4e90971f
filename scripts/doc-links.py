#!/usr/bin/env python3
"""Check that every relative link in attnscope's Markdown docs resolves: the file exists and, for `file.md#anchor`
or `#anchor`, the target has a heading with that GitHub anchor.

    python3 scripts/doc-links.py            # README.md and every docs/**/*.md; exit 1 naming each broken link
    python3 scripts/doc-links.py --self-test  # the checker itself catches a missing file and a missing anchor

Run by the ctest `Docs.RelativeLinksResolve` (label cpu). Links inside fenced blocks and inline code are not
links and are skipped; http(s) and mailto links are not checked (no network). Anchors follow GitHub's rule: the
heading's text lower-cased, punctuation other than `-` and `_` dropped, spaces made `-`, a repeated heading
suffixed `-1`, `-2`, ...; an explicit `<a id="...">` / `<a name="...">` counts too. Python 3 standard library only.
"""
import os
import re
import sys
import tempfile

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
LINK_RE = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
FENCE_RE = re.compile(r"^\s*(```+|~~~+)")
HEADING_RE = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
ANCHOR_RE = re.compile(r"<a\s+(?:id|name)=\"([^\"]+)\"")


def prose_lines(text):
    """(line number, the line, the line with inline code blanked) for each line outside fenced blocks."""
    fence = None
    for n, line in enumerate(text.split("\n"), 1):
        m = FENCE_RE.match(line)
        if fence is None and m:
            fence = m.group(1)
            continue
        if fence is not None:
            if line.strip().startswith(fence):
                fence = None
            continue
        yield n, line, re.sub(r"`[^`]*`", lambda c: "`" + " " * (len(c.group(0)) - 2) + "`", line)


def slug(heading):
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link in a heading keeps its text
    text = re.sub(r"<[^>]+>", "", text).strip().lower()
    text = re.sub(r"[^\w\- ]", "", text, flags=re.UNICODE)
    return text.replace(" ", "-")


def anchors_of(path, cache={}):
    if path not in cache:
        with open(path, encoding="utf-8") as f:
            text = f.read()
        found, seen = set(), {}
        for _, line, _ in prose_lines(text):
            found.update(ANCHOR_RE.findall(line))
            m = HEADING_RE.match(line)
            if not m:
                continue
            s = slug(m.group(2))
            k = seen.get(s, 0)
            seen[s] = k + 1
            found.add(s if k == 0 else "%s-%d" % (s, k))
        cache[path] = found
    return cache[path]


def check_file(path, root):
    problems = []
    rel = os.path.relpath(path, root)
    with open(path, encoding="utf-8") as f:
        text = f.read()
    for n, _, line in prose_lines(text):
        for m in LINK_RE.finditer(line):
            target = m.group(1)
            if re.match(r"^[a-z][a-z0-9+.-]*:", target, re.I):
                continue  # http:, https:, mailto:
            file_part, _, anchor = target.partition("#")
            dest = os.path.normpath(os.path.join(os.path.dirname(path), file_part)) if file_part else path
            if not os.path.exists(dest):
                problems.append("%s:%d: link target %s does not exist (%s)" % (rel, n, target,
                                                                               os.path.relpath(dest, root)))
                continue
            if anchor and dest.endswith(".md") and anchor not in anchors_of(dest):
                problems.append("%s:%d: link %s: %s has no heading with the anchor #%s" % (
                    rel, n, target, os.path.relpath(dest, root), anchor))
    return problems


def doc_files(root):
    files = [os.path.join(root, "README.md")]
    for d, _, names in os.walk(os.path.join(root, "docs")):
        files += [os.path.join(d, x) for x in sorted(names) if x.endswith(".md")]
    return [f for f in files if os.path.exists(f)]


def self_test():
    with tempfile.TemporaryDirectory() as tmp:
        os.makedirs(os.path.join(tmp, "docs"))
        with open(os.path.join(tmp, "docs", "a.md"), "w") as f:
            f.write("# A `code` title (issue 1)\n\n## Twice\n\n## Twice\n\n```\n[not a link](nowhere.md)\n```\n")
        with open(os.path.join(tmp, "README.md"), "w") as f:
            f.write("[ok](docs/a.md#a-code-title-issue-1) [ok](docs/a.md#twice-1) [ok](#top) `[code](no.md)`\n"
                    "<a id=\"top\"></a>\n"
                    "[bad file](docs/b.md) [bad anchor](docs/a.md#twice-2) ![bad image](docs/x.png)\n")
        problems = []
        for p in doc_files(tmp):
            problems += check_file(p, tmp)
    want = ["docs/b.md does not exist", "no heading with the anchor #twice-2", "docs/x.png does not exist"]
    fails = [w for w in want if not any(w in p for p in problems)]
    if len(problems) != len(want):
        fails.append("expected %d problems, got %r" % (len(want), problems))
    for f in fails:
        print("self-test FAILED: " + f)
    return 1 if fails else 0


def main(argv):
    if "--self-test" in argv:
        rc = self_test()
        print("self-test: %s" % ("ok" if rc == 0 else "FAILED"))
        return rc
    files = doc_files(ROOT)
    problems = []
    for p in files:
        problems += check_file(p, ROOT)
    for p in problems:
        print(p)
    if problems:
        print("%d broken relative link(s) in %d Markdown file(s): fix the path or the anchor (a renamed heading "
              "changes its anchor)" % (len(problems), len(files)))
        return 1
    print("ok: every relative link in %d Markdown file(s) resolves" % len(files))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
