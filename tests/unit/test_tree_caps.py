#!/usr/bin/env python3
"""test_tree_caps -- the tests' shared code and the scripts keep the product's size caps.

src/ is held to its caps by test_tree.py; the same caps hold here, over tests/common/ (the
reference the library is checked against) and scripts/ (with its subfolders), so that neither
grows into a file nobody can read (standard library only):
  1. no file over MAX_FILE_LINES lines;
  2. no C function (tests/common/*.c, scripts/**/*.c) over MAX_FUNC_LINES lines, unless most of it
     is one switch (a dispatcher), found as test_tree.py finds them;
  3. no Python function or method over MAX_FUNC_LINES lines, and no Python class over
     MAX_FILE_LINES lines, in scripts/ (*.py, and files without the extension whose first line
     names python);
Exit 0 when every check holds; otherwise every violation is printed and the exit code is 1.
"""

import ast
import os
import sys

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tree_files  # noqa: E402
from test_tree import MAX_FILE_LINES, MAX_FUNC_LINES, ROOT, functions  # noqa: E402

FOLDERS = ["tests/common", "scripts"]


def files():
    """The project's files there (tree_files.py: never an ignored build output or cache)."""
    yield from tree_files.files(ROOT, FOLDERS)


def is_python(path, text):
    if path.endswith(".py"):
        return True
    first = text.split("\n", 1)[0]
    return first.startswith("#!") and "python" in first


def c_problems(r, lines):
    for name, start, count, switch_lines in functions(lines):
        if count > MAX_FUNC_LINES and switch_lines < count * 0.6:
            yield (f"{r}:{start + 1}: {name} is {count} lines (at most {MAX_FUNC_LINES} unless it is a "
                   "switch dispatcher): cut it into named steps")


def python_problems(r, text):
    try:
        tree = ast.parse(text, filename=r)
    except SyntaxError as e:
        yield f"{r}:{e.lineno}: not valid Python ({e.msg})"
        return
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            cap, what = MAX_FUNC_LINES, "function"
        elif isinstance(node, ast.ClassDef):
            cap, what = MAX_FILE_LINES, "class"
        else:
            continue
        count = node.end_lineno - node.lineno + 1
        if count > cap:
            yield f"{r}:{node.lineno}: {what} {node.name} is {count} lines (at most {cap}): split it"


def main():
    problems = []
    for path in files():
        r = os.path.relpath(path, ROOT)
        try:
            with open(path, encoding="utf-8") as f:
                text = f.read()
        except UnicodeDecodeError:
            continue  # not text: nothing to read, nothing to cap
        lines = text.splitlines()
        if len(lines) > MAX_FILE_LINES:
            problems.append(f"{r}: {len(lines)} lines (at most {MAX_FILE_LINES}): split it by job")
        if path.endswith(".c"):
            problems.extend(c_problems(r, lines))
        elif r.startswith("scripts" + os.sep) and is_python(path, text):
            problems.extend(python_problems(r, text))
    for p in problems:
        print(p)
    print(f"{len(problems)} problem(s) in tests/common and scripts" if problems
          else "tests/common and scripts: every check holds")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
