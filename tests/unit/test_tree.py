#!/usr/bin/env python3
"""test_tree -- the source tree keeps the shape docs/ARCHITECTURE.md describes.

Checks, over src/ (standard library only; SL_SOURCE_DIR or the repository around this file; the
project's files only, as tests/unit/tree_files.py lists them: never an ignored build output):
  1. no source file over MAX_FILE_LINES lines;
  2. no function over MAX_FUNC_LINES lines, unless most of it is one switch (a dispatcher);
  3. the communicator layer (src/comm/**) and the backends (src/backend/**) do not include
     the planner's headers (plan/...): they take plain member lists, so they can be reasoned
     about, and tested, without a schedule;
  4. no macro constant is defined in two files (one owner for every number);
  5. optional components are chosen by folder, not by a file-name suffix (*_cuda.c, *_uring.c);
  6. the command-line tool (src/cli/) includes only the public header of the library;
  7. layers: a folder includes only folders listed before it in the table of docs/ARCHITECTURE.md
     (read from the document, so the map and the tree cannot drift apart); every folder of src/
     has its row;
  8. the map is true to the tree: every .c file of src/ is named in the first cell of a row of its
     folder's file table (the table under the heading "### `folder/`"; a pattern such as `http*.c`
     names the files it matches), and every file those cells name exists.
Exit 0 when every check holds; otherwise every violation is printed and the exit code is 1.
"""

import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tree_files  # noqa: E402

MAX_FILE_LINES = 800
MAX_FUNC_LINES = 120
ROOT = os.environ.get("SL_SOURCE_DIR") or os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SRC = os.path.join(ROOT, "src")

FUNC_START = re.compile(r"^(?:static\s+)?(?:inline\s+)?[A-Za-z_][\w\s\*]*?\b([A-Za-z_]\w*)\s*\(")
DEFINE = re.compile(r"^\s*#\s*define\s+([A-Za-z_]\w*)(?:\s+(\S.*?))?\s*(?:/\*.*)?$")
INCLUDE = re.compile(r'^\s*#\s*include\s+(?:"([^"]+)"|<(mpi\.h)>)')


def layer_order():
    """The folders of src/ in the order of docs/ARCHITECTURE.md's table (rows "| `name/` | ...")."""
    with open(os.path.join(ROOT, "docs", "ARCHITECTURE.md"), encoding="utf-8") as f:
        return [m.group(1) for m in (re.match(r"^\|\s*`([a-z0-9_]+)/`\s*\|", line) for line in f) if m]


def file_cells():
    """folder -> the first cells of the rows of its file table in docs/ARCHITECTURE.md (the rows
    under the heading "### `folder/`", up to the next heading), joined."""
    cells = {}
    folder = None
    with open(os.path.join(ROOT, "docs", "ARCHITECTURE.md"), encoding="utf-8") as f:
        for line in f:
            if line.startswith("#"):
                m = re.match(r"^###\s+`([a-z0-9_]+)/`\s*$", line)
                folder = m.group(1) if m else None
                if folder is not None:
                    cells.setdefault(folder, "")
            elif folder is not None and line.startswith("|"):
                cells[folder] += line.strip().strip("|").split("|")[0] + "\n"
    return cells


def map_problems():
    """.c files missing from their folder's file table, and names in it that match no file."""
    import fnmatch
    problems = []
    cells = file_cells()
    for folder in layer_order():
        if folder not in cells:
            problems.append(f"docs/ARCHITECTURE.md has no file table for {folder}/ (a heading \"### `{folder}/`\")")
    for folder, row in sorted(cells.items()):
        top = os.path.join(SRC, folder)
        files = sorted(os.path.relpath(p, top).replace(os.sep, "/")
                       for p in tree_files.files(ROOT, ["src/" + folder], (".c",)))
        named = set(re.findall(r"`([\w*./-]+\.c)`", row))
        for f in files:
            if not any(fnmatch.fnmatch(f, p) or fnmatch.fnmatch(os.path.basename(f), p) for p in named):
                problems.append(f"src/{folder}/{f} is not named in the {folder}/ file table of docs/ARCHITECTURE.md")
        for p in sorted(named):
            if not any(fnmatch.fnmatch(f, p) or fnmatch.fnmatch(os.path.basename(f), p) for f in files):
                problems.append(f"the {folder}/ file table of docs/ARCHITECTURE.md names `{p}`, which is no file of "
                                f"src/{folder}/")
    return problems


def layer_problems(r, folder, inc, order):
    """An include that goes up: inc names a folder of src/ that comes after this file's folder."""
    target = inc.split("/")[0] if "/" in inc else folder
    if target not in order or folder not in order or order.index(target) <= order.index(folder):
        return []
    return [f"{r}: includes \"{inc}\": {target}/ comes after {folder}/ in docs/ARCHITECTURE.md's layers "
            "(a folder includes only the folders before it)"]


def sources():
    yield from tree_files.files(ROOT, ["src"], (".c", ".h"))


def rel(path):
    return os.path.relpath(path, ROOT)


def functions(lines):
    """Yields (name, first line index, line count, lines inside a switch) of each function body.

    The project is clang-formatted: a definition starts at column 0 and its body closes with a
    '}' at column 0. Brace depth is counted outside strings, characters and comments."""
    i = 0
    n = len(lines)
    while i < n:
        m = FUNC_START.match(lines[i])
        if not m or lines[i].startswith(("typedef", "struct", "enum", "union", "#")):
            i += 1
            continue
        # find the opening brace of the body (signature may span lines) or a ';' (a prototype)
        j = i
        while j < n and "{" not in strip_code(lines[j]) and ";" not in strip_code(lines[j]):
            j += 1
        if j >= n or ";" in strip_code(lines[j]).split("{")[0]:
            i = j + 1
            continue
        depth = 0
        switch_lines = 0
        switch_depth = None
        k = j
        while k < n:
            code = strip_code(lines[k])
            if switch_depth is None and re.search(r"\bswitch\s*\(", code):
                switch_depth = depth
            if switch_depth is not None:
                switch_lines += 1
            depth += code.count("{") - code.count("}")
            if switch_depth is not None and depth <= switch_depth and k > j and "}" in code:
                switch_depth = None
            if depth == 0 and k >= j and "}" in code:
                break
            k += 1
        yield m.group(1), i, k - i + 1, switch_lines
        i = k + 1


def strip_code(line):
    line = re.sub(r'"(\\.|[^"\\])*"', '""', line)
    line = re.sub(r"'(\\.|[^'\\])*'", "''", line)
    line = re.sub(r"/\*.*?\*/", "", line)
    return line.split("//")[0]


def main():
    problems = []
    defines = {}
    aliases = []  # (file, name, other macro): a second name for a number that has an owner
    order = layer_order()
    folders = sorted(d for d in os.listdir(SRC) if os.path.isdir(os.path.join(SRC, d)))
    for d in folders:
        if d not in order:
            problems.append(f"src/{d}/ has no row in docs/ARCHITECTURE.md's table of layers")
    for path in sources():
        with open(path, encoding="utf-8") as f:
            lines = f.read().split("\n")
        r = rel(path)
        if len(lines) > MAX_FILE_LINES:
            problems.append(f"{r}: {len(lines)} lines (at most {MAX_FILE_LINES}): split it by job")
        if path.endswith(".c"):
            for name, start, count, switch_lines in functions(lines):
                if count > MAX_FUNC_LINES and switch_lines < count * 0.6:
                    problems.append(f"{r}:{start + 1}: {name} is {count} lines (at most {MAX_FUNC_LINES} "
                                    "unless it is a switch dispatcher): cut it into named steps")
        base = os.path.basename(path)
        if re.search(r"_(no)?(cuda|uring|hub|s3)\.c$", base):
            problems.append(f"{r}: optional components are chosen by folder, not by a file-name suffix")
        in_comm_or_backend = r.startswith(os.path.join("src", "backend") + os.sep) or \
            r.startswith(os.path.join("src", "comm") + os.sep) or r.startswith("src/absent/cuda")
        in_cli = r.startswith(os.path.join("src", "cli") + os.sep)
        folder = os.path.relpath(path, SRC).split(os.sep)[0]
        guard = None
        for line in lines:
            m = INCLUDE.match(line)
            if m:
                inc = m.group(1) or m.group(2)
                problems += layer_problems(r, folder, inc, order)
                if in_comm_or_backend and inc.startswith("plan/"):
                    problems.append(f"{r}: includes \"{inc}\": the communicator and the backends take "
                                    "member lists, not the planner's types")
                # MPI stays behind the seam: its header only in the MPI transport and the MPI
                # entry points (api/loader.c, api/peers.c, api/refit_mpi.c); everything else sees
                # shardload/core.h.
                if inc in ("shardload/shardload.h", "mpi.h") and not in_cli and \
                        r not in ("src/api/loader.c", "src/api/peers.c", "src/api/refit_mpi.c", "src/comm/mpi.h",
                                  "src/comm/mpi.c", "src/comm/mpi_watchdog.c"):
                    problems.append(f"{r}: includes \"{inc}\": only the MPI transport and the MPI entry "
                                    "point see MPI (use shardload/core.h)")
                # One self-contained helper is compiled into the tool too (src/CMakeLists.txt).
                if in_cli and "/" in inc and not inc.startswith("shardload/") and \
                        inc != "base/edit_distance.h":
                    problems.append(f"{r}: includes \"{inc}\": the tool uses the public header only")
            m = re.match(r"^\s*#\s*ifndef\s+(\w+)", line)
            if m and guard is None:
                guard = m.group(1)
            m = DEFINE.match(line)
            if m and m.group(1) != guard:
                defines.setdefault(m.group(1), set()).add(r)
                value = m.group(2) or ""
                if re.fullmatch(r"[A-Z][A-Z0-9_]*", value):
                    aliases.append((r, m.group(1), value))
    problems += map_problems()
    for name, where in sorted(defines.items()):
        if len(where) > 1:
            problems.append(f"#define {name} appears in {len(where)} files ({', '.join(sorted(where))}): "
                            "give it one owner")
    for r, name, value in aliases:
        if value in defines and r not in defines[value]:
            problems.append(f"{r}: #define {name} {value} renames a constant owned by "
                            f"{', '.join(sorted(defines[value]))}: use it under its own name")
    for p in problems:
        print(p)
    print(f"{len(problems)} problem(s) in the source tree" if problems else "source tree: every check holds")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
