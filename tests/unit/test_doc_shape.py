#!/usr/bin/env python3
"""test_doc_shape -- the documents a newcomer reads first stay short enough to scan.

Checks (standard library only; the repository is $SL_SOURCE_DIR, else two folders above this script):
  1. no line of docs/ARCHITECTURE.md is over MAX_ARCH_LINE characters (one short row per file; the
     long explanations belong in docs/spec/);
  2. README.md has at most MAX_README_LINES lines (the detail lives in docs/);
  3. no comment block of a public header (include/shardload/*.h, *.h.in) is over MAX_COMMENT_LINES
     lines: each function's contract is short, the long explanations are in docs/API.md;
  4. a public header with numbered sections (the banners "/* ----" followed by " * N. Title") has
     a "Contents:" list in a comment, naming exactly those sections.
Each problem is printed with its file and line; exit 0 when there is none, 1 otherwise.
"""

import glob
import os
import re
import sys

MAX_ARCH_LINE = 400
MAX_README_LINES = 350
MAX_COMMENT_LINES = 15
ROOT = os.environ.get("SL_SOURCE_DIR") or os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))


def read_lines(rel):
    with open(os.path.join(ROOT, rel), encoding="utf-8") as f:
        return f.read().split("\n")


def architecture_problems():
    return ["docs/ARCHITECTURE.md:%d: %d characters (at most %d): one short row per file, the long "
            "explanation in docs/spec/" % (n, len(line), MAX_ARCH_LINE)
            for n, line in enumerate(read_lines("docs/ARCHITECTURE.md"), 1) if len(line) > MAX_ARCH_LINE]


def readme_problems():
    lines = read_lines("README.md")
    count = len(lines) - 1 if lines and lines[-1] == "" else len(lines)
    if count > MAX_README_LINES:
        return ["README.md: %d lines (at most %d): move the detail into docs/ and link it"
                % (count, MAX_README_LINES)]
    return []


def comment_blocks(lines):
    """(first line number, line count, text) of every /* ... */ comment, and of every run of
    consecutive // lines, in a C header."""
    blocks = []
    i = 0
    while i < len(lines):
        line = lines[i]
        code = re.sub(r'"(\\.|[^"\\])*"', '""', line)
        start = code.find("/*")
        if start >= 0 and (code.find("//") < 0 or code.find("//") > start):
            j = i
            rest = code[start + 2:]
            while "*/" not in rest:
                j += 1
                if j >= len(lines):
                    break
                rest = lines[j]
            blocks.append((i + 1, j - i + 1, "\n".join(lines[i:j + 1])))
            i = j + 1
            continue
        if code.lstrip().startswith("//"):
            j = i
            while j + 1 < len(lines) and lines[j + 1].lstrip().startswith("//"):
                j += 1
            blocks.append((i + 1, j - i + 1, "\n".join(lines[i:j + 1])))
            i = j + 1
            continue
        i += 1
    return blocks


def header_problems(rel):
    lines = read_lines(rel)
    problems = []
    blocks = comment_blocks(lines)
    for first, count, _ in blocks:
        if count > MAX_COMMENT_LINES:
            problems.append("%s:%d: a comment block of %d lines (at most %d): keep the contract, move "
                            "the explanation to docs/API.md and cite it" % (rel, first, count, MAX_COMMENT_LINES))
    banners = {}
    for n in range(1, len(lines)):
        m = re.match(r"^ \* (\d+)\. ", lines[n])
        if m and lines[n - 1].startswith("/* ----"):
            banners[m.group(1)] = n + 1
    contents = [(first, text) for first, _, text in blocks if "Contents:" in text]
    if not contents:
        if banners:
            problems.append("%s: numbered sections but no \"Contents:\" list naming them" % rel)
        return problems
    first, text = contents[0]
    listed = set(re.findall(r"(?<![\w.§])(\d+)\. ", text.split("Contents:", 1)[1]))
    for num in sorted(set(banners) - listed, key=int):
        problems.append("%s:%d: section %s is not in the contents list (line %d)" % (rel, banners[num], num, first))
    for num in sorted(listed - set(banners), key=int):
        problems.append("%s:%d: the contents list names section %s, which the header does not have"
                        % (rel, first, num))
    if not banners:
        problems.append("%s: a contents list but no numbered section banner" % rel)
    return problems


def main():
    problems = architecture_problems() + readme_problems()
    headers = sorted(glob.glob(os.path.join(ROOT, "include", "shardload", "*.h"))
                     + glob.glob(os.path.join(ROOT, "include", "shardload", "*.h.in")))
    if not headers:
        problems.append("include/shardload/: no public header found")
    for path in headers:
        problems += header_problems(os.path.relpath(path, ROOT))
    for p in problems:
        print(p)
    print("%d problem(s): docs/ARCHITECTURE.md, README.md and %d public headers" % (len(problems), len(headers)))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
