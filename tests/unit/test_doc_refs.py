#!/usr/bin/env python3
"""test_doc_refs.py -- every document reference in the repository points at something that exists.

Scans the project's files (tests/unit/tree_files.py: in a git checkout what git tracks plus untracked
files that are not ignored, never ignored build outputs such as python/shardload.egg-info/; without
git, the tree less what its .gitignore files ignore) under src/, tests/, docs/, README.md, scripts/,
launch/, python/, less the fuzzers' input corpora (data, not prose), for
  - names of Markdown files (a basename starting with an upper-case letter, ending in .md, with an
    optional folder part): the file must exist, taken relative to the repository root, to the
    citing file's folder, or, for a bare name, to docs/;
  - section signs followed by a number (§3, §3.1, the ends of a range §1–§3): the section belongs to
    the nearest Markdown name before it on the same line; in a Markdown file with none before it,
    to that file itself; anywhere else a bare section sign is an error. The cited file must have a
    heading numbered so ("## 3. ..." or "### 3.1 ...").
Each broken reference is listed as path:line: reason. Exit 0 when there is none, 1 otherwise.
The repository root is $SL_SOURCE_DIR, else two folders above this script.
"""
import os
import re
import sys

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tree_files  # noqa: E402

ROOT = os.environ.get("SL_SOURCE_DIR") or os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
SCAN = ["src", "tests", "docs", "README.md", "scripts", "launch", "python"]
SKIP_DIRS = {"corpus"}  # tests/fuzz/corpus/: fuzzer inputs, not prose
TOKEN = re.compile(r"(?P<md>(?<![\w.-])(?:[\w.-]+/)*[A-Z][\w-]*\.md)(?![\w])"
                   r"|§ ?(?P<sec>\d+(?:\.\d+)*)")
HEADING = re.compile(r"^#{1,6}\s+(\d+(?:\.\d+)*)\.?\s")
SELF = os.path.abspath(__file__)


def files():
    for p in tree_files.files(ROOT, SCAN):
        if not SKIP_DIRS.intersection(os.path.relpath(p, ROOT).split(os.sep)[:-1]):
            yield p


def resolve(name, citing):
    cands = [os.path.join(ROOT, name), os.path.join(os.path.dirname(citing), name)]
    if "/" not in name:
        cands.append(os.path.join(ROOT, "docs", name))
    for c in cands:
        if os.path.isfile(c):
            return os.path.normpath(c)
    return None


_headings = {}


def headings(path):
    if path not in _headings:
        found = set()
        with open(path, encoding="utf-8", errors="replace") as f:
            in_code = False
            for line in f:
                if line.startswith("```"):
                    in_code = not in_code
                m = None if in_code else HEADING.match(line)
                if m:
                    found.add(m.group(1))
        _headings[path] = found
    return _headings[path]


def check_file(path, problems):
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except (UnicodeDecodeError, OSError):
        return 0
    rel = os.path.relpath(path, ROOT)
    is_md = path.endswith(".md")
    count = 0
    for lineno, line in enumerate(text.split("\n"), 1):
        target = None  # (name, resolved path or None) of the nearest Markdown name on this line
        for m in TOKEN.finditer(line):
            if m.group("md"):
                name = m.group("md")
                target = (name, resolve(name, path))
                count += 1
                if target[1] is None:
                    problems.append("%s:%d: %s does not exist in the repository" % (rel, lineno, name))
                continue
            sec = m.group("sec")
            count += 1
            if target is None:
                if not is_md:
                    problems.append("%s:%d: §%s names no file (put the Markdown file it belongs to before it on the line)" % (rel, lineno, sec))
                    continue
                target = (os.path.basename(path), path)
            if target[1] is None:
                continue  # already reported
            if sec not in headings(target[1]):
                problems.append("%s:%d: %s has no section %s" % (rel, lineno, target[0], sec))
    return count


def main():
    problems = []
    count = 0
    for p in files():
        if os.path.abspath(p) == SELF:
            continue
        count += check_file(p, problems)
    for p in problems:
        print(p)
    print("%d references checked, %d broken (files listed by %s)" % (count, len(problems), tree_files.mode(ROOT)))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
