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
    heading numbered so ("## 3. ..." or "### 3.1 ...");
  - paths of the project's files cited in the comments of src/, include/ and tests/ (C comments in
    .c and .h files, '#' comments in .py, .sh, .cmake and CMakeLists.txt): a token folder/.../name.ext
    (ext c, h, py, sh, cmake, in) whose first folder is a folder of the repository (at its root,
    under src/, include/, tests/ or python/, or beside the citing file) must exist relative to one of
    those; a file the build writes from name.ext.in counts (shardload/version.h), a name in capitals
    is a placeholder (tests/unit/NAME.c). Other projects' paths (vLLM's compressed_tensors/utils.py,
    dlpack/dlpack.h) start with no folder of this repository and are not checked.
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
# Source paths in comments: at least one folder, a source extension, not part of a glob or template.
CODE_SCAN = ["src", "include", "tests"]
CODE_PATH = re.compile(r"(?<![\w./<>*{-])(?P<path>(?:[\w.-]+/)+(?P<stem>[\w.-]+)\.(?:c|h|py|sh|cmake|in))"
                       r"(?![\w/*<>-])")
BASES = ["", "src", "include", "tests", "python"]


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


def c_comments(text):
    """[(line number, text)] of the /* */ and // comments of C source, string literals skipped."""
    out, i, n, line = [], 0, len(text), 1
    while i < n:
        if text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j
            for k, part in enumerate(text[i:j].split("\n")):
                out.append((line + k, part))
            line += text.count("\n", i, j)
            i = j + 2
        elif text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            out.append((line, text[i:j]))
            i = j
        elif text[i] in "\"'":
            quote, i = text[i], i + 1
            while i < n and text[i] != quote and text[i] != "\n":
                i += 2 if text[i] == "\\" else 1
            i += 1
        else:
            line += text[i] == "\n"
            i += 1
    return out


def hash_comments(text):
    return [(k, line[line.index("#"):]) for k, line in enumerate(text.split("\n"), 1) if "#" in line]


def comments(path, text):
    if path.endswith((".c", ".h")):
        return c_comments(text)
    if path.endswith((".py", ".sh", ".cmake")) or os.path.basename(path) == "CMakeLists.txt":
        return hash_comments(text)
    return []


def project_path(name, citing):
    """Whether name's first folder is one of the repository's (else another project's path)."""
    first = name.split("/")[0]
    dirs = [os.path.join(ROOT, b) for b in BASES] + [os.path.dirname(citing)]
    return any(os.path.isdir(os.path.join(d, first)) for d in dirs)


def code_exists(name, citing):
    for d in [os.path.join(ROOT, b) for b in BASES] + [os.path.dirname(citing)]:
        p = os.path.join(d, name)
        if os.path.isfile(p) or os.path.isfile(p + ".in"):
            return True
    return False


def check_code_paths(path, problems):
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except (UnicodeDecodeError, OSError):
        return 0
    rel = os.path.relpath(path, ROOT)
    count = 0
    for lineno, line in comments(path, text):
        for m in CODE_PATH.finditer(line):
            name = m.group("path")
            if m.group("stem").isupper() or not project_path(name, path):
                continue
            count += 1
            if not code_exists(name, path):
                problems.append("%s:%d: %s (in a comment) is no file of the repository" % (rel, lineno, name))
    return count


def main():
    problems = []
    count = 0
    for p in files():
        if os.path.abspath(p) == SELF:
            continue
        count += check_file(p, problems)
    for p in tree_files.files(ROOT, CODE_SCAN):
        if not SKIP_DIRS.intersection(os.path.relpath(p, ROOT).split(os.sep)[:-1]):
            count += check_code_paths(p, problems)
    for p in problems:
        print(p)
    print("%d references checked, %d broken (files listed by %s)" % (count, len(problems), tree_files.mode(ROOT)))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
