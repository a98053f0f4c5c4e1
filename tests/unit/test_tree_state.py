#!/usr/bin/env python3
"""test_tree_state -- no hidden mutable state in src/, and every lock says what it guards.

Checks, over src/ (standard library only; the file walk and the function finder of test_tree.py):
  1. every variable of static storage that is not const -- `static` at file or function scope, and
     a file-scope variable with external linkage -- carries, on its declaration line or in the
     comment that ends just above it, a comment starting with "process-wide:" that says why one
     copy for the whole process is right and what makes concurrent use safe. A thread-local one
     starts its comment with "per-thread:" instead. A new global is then a visible decision, not
     state two loaders of one process share by accident;
  2. every pthread mutex, read-write lock and spin lock (a field or a variable) has a comment on its
     line or ending just above it that says what it guards (the word "guards");
  3. a function that takes a second lock while it holds one, or that calls a function it was handed
     (a callback parameter) while it holds one, finds the lock order written next to the held
     lock's declaration (a comment with "lock order:"), in its own file or a header of src/ it
     includes. Within one function only: an order that crosses calls is written down by hand.
Exit 0 when every check holds; otherwise every violation is printed and the exit code is 1.
"""

import os
import re
import sys

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_tree import SRC, functions, rel, sources  # noqa: E402

STORAGE = re.compile(r"^\s*(?:static|_Thread_local|thread_local|__thread)\b")
THREAD_LOCAL = re.compile(r"\b(?:_Thread_local|thread_local|__thread)\b")
LOCK_DECL = re.compile(r"^\s*(?:static\s+)?pthread_(?:mutex|rwlock|spinlock)_t\s+(\w+)\s*(?:\[[^\]]*\]\s*)?[;=]")
LOCK_TAKE = re.compile(r"\bpthread_(?:mutex_lock|mutex_trylock|rwlock_rdlock|rwlock_wrlock|spin_lock)\s*\(\s*&?\s*([^)]+?)\s*\)")
LOCK_GIVE = re.compile(r"\bpthread_(?:mutex_unlock|rwlock_unlock|spin_unlock)\s*\(\s*&?\s*([^)]+?)\s*\)")
LOCAL_INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def blank(text):
    """The text with comments, string and character literals and preprocessor lines replaced by
    spaces (newlines kept, so line numbers hold): what is left is code."""
    out = []
    i, n = 0, len(text)
    line_start = True  # nothing but blanks since the last newline
    while i < n:
        c = text[i]
        if line_start and c == "#":
            while i < n and not (text[i] == "\n" and text[i - 1] != "\\"):
                out.append("\n" if text[i] == "\n" else " ")  # a directive, continuation lines too
                i += 1
            continue
        if text.startswith("/*", i):
            end = text.find("*/", i + 2)
            end = n if end < 0 else end + 2
            out.append(re.sub(r"[^\n]", " ", text[i:end]))
            i = end
            continue
        if text.startswith("//", i):
            end = text.find("\n", i)
            end = n if end < 0 else end
            out.append(" " * (end - i))
            i = end
            continue
        if c in "\"'":
            j = i + 1
            while j < n and text[j] != c and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            if j >= n or text[j] == "\n":  # not closed on its line: keep the newline
                out.append(" " * (j - i))
                i = j
            else:
                out.append(c + " " * (j - i - 1) + c)
                i = j + 1
            line_start = False
            continue
        out.append(c)
        i += 1
        if c == "\n":
            line_start = True
        elif c not in " \t":
            line_start = False
    return "".join(out)


def comment_of(lines, i):
    """The comment on line i after its code, and the comment that ends on the line just above it
    (a block or a run of // lines), each as plain text ("" when none)."""
    line = lines[i]
    own = ""
    m = re.search(r"(/\*|//)(.*)$", line)
    if m and line[:m.start()].strip():
        own = re.sub(r"\*/\s*$", "", m.group(2)).strip()
    above = []
    j = i - 1
    if j >= 0 and lines[j].strip().endswith("*/"):
        while j >= 0:
            above.insert(0, lines[j])
            if "/*" in lines[j]:
                break
            j -= 1
        if above and lines[j if j >= 0 else 0].split("/*")[0].strip():
            above = []  # the block closes a line of code: it belongs to that line
    else:
        while j >= 0 and lines[j].strip().startswith("//"):
            above.insert(0, lines[j])
            j -= 1
    text = " ".join(re.sub(r"^\s*(/\*+|\*+/?|//)|\*/\s*$", "", l).strip() for l in above).strip()
    return own, text


def declaration(code, i):
    """The head of the declaration starting on code line i (up to its initialiser, its ';' or
    a body): a structure's member list in it is dropped."""
    text = "\n".join(code[i:i + 40])
    head, depth, k = [], 0, 0
    while k < len(text):
        c = text[k]
        if c == "(":
            depth += 1
        elif c == ")":
            depth -= 1
        elif depth == 0 and c in ";=":
            break
        elif depth == 0 and c == "{":
            if not re.search(r"\b(?:struct|union|enum)(?:\s+\w+)?\s*$", "".join(head)):
                break
            inner = 1
            while inner and k + 1 < len(text):
                k += 1
                inner += {"{": 1, "}": -1}.get(text[k], 0)
            k += 1
            continue
        head.append(c)
        k += 1
    return " ".join("".join(head).split())


def variable(head):
    """(name, is const) of a declaration head, or None when it declares a function (a pointer to a
    function is a variable)."""
    if "(" in head and not re.match(r"[^(]*\(\s*\*", head):
        return None
    fp = re.search(r"\(\s*\*\s*((?:const\s+)?)(\w+)", head)
    if fp:
        return fp.group(2), bool(fp.group(1))
    m = re.search(r"(\w+)\s*(?:\[[^\]]*\]\s*)*$", head)
    if m is None:
        return None
    qualifiers = head[:m.start()]
    if "*" in qualifiers:
        return m.group(1), bool(re.search(r"\bconst\b", qualifiers.rsplit("*", 1)[1]))
    return m.group(1), bool(re.search(r"\bconst\b", qualifiers))


def depths(code):
    """The brace depth at the start of every code line."""
    out, d = [], 0
    for line in code:
        out.append(d)
        d += line.count("{") - line.count("}")
    return out


def global_problems(r, lines, code):
    """Check 1: static and external variables that are not const."""
    at = depths(code)
    for i, line in enumerate(code):
        is_static = STORAGE.match(line)
        external = at[i] == 0 and re.match(r"^[A-Za-z_]", line) and \
            not re.match(r"^(?:typedef|extern|struct|union|enum|static|inline)\b", line)
        if not (is_static or external):
            continue
        head = declaration(code, i)
        v = variable(head)
        if v is None or v[1] or len(head.split()) < 2:
            continue
        tag = "per-thread:" if THREAD_LOCAL.search(head) else "process-wide:"
        own, above = comment_of(lines, i)
        if own.startswith(tag) or above.startswith(tag):
            continue
        kind = "a thread-local" if tag == "per-thread:" else "a static" if is_static else "a global"
        yield (f"{r}:{i + 1}: {v[0]} is {kind} variable that is not const: say why with a comment "
               f"starting \"{tag}\" on its line or just above it (or move it into the state it belongs to)")


def lock_decls(lines, code):
    """{lock name: [comment text, ...]} of the locks declared in a file."""
    out = {}
    for i, line in enumerate(code):
        m = LOCK_DECL.match(line)
        if m:
            own, above = comment_of(lines, i)
            out.setdefault(m.group(1), []).append(own + " " + above)
    return out


def lock_comment_problems(r, lines, code):
    """Check 2: every lock says what it guards."""
    for i, line in enumerate(code):
        m = LOCK_DECL.match(line)
        if m:
            own, above = comment_of(lines, i)
            if "guards" not in own and "guards" not in above:
                yield (f"{r}:{i + 1}: lock {m.group(1)} has no comment saying what it guards (\"guards "
                       "...\" on its line or just above it)")


def early_exit(code, k, depth_at):
    """Whether the block around code line k leaves the function (return or goto at its depth)
    before it closes: an unlock there does not release the lock for the lines that follow."""
    d = depth_at[k]
    if d <= 1:
        return False  # the function's own block: its return is the end, not an early exit
    for j in range(k + 1, len(code)):
        if depth_at[j] < d or (depth_at[j] == d and code[j].strip().startswith("}")):
            return False
        if depth_at[j] == d and re.match(r"^\s*(?:return|goto)\b", code[j]):
            return True
    return False


def order_events(code, start, count):
    """(line, held lock, what) for every second lock taken and every callback called while a lock
    is held in the function whose lines are start .. start + count."""
    body = code[start:start + count]
    brace = next((k for k, l in enumerate(body) if "{" in l), 0)
    callbacks = re.findall(r"\(\s*\*\s*(\w+)\s*\)\s*\(", " ".join(body[:brace + 1]))
    depth_at = depths(body)
    held = []
    for k in range(brace + 1, len(body)):
        line = body[k]
        if held:
            for cb in callbacks:
                if re.search(r"\b%s\s*\(" % re.escape(cb), line):
                    yield start + k, held[-1], f"calls {cb}(), a function it was handed,"
        for m in LOCK_TAKE.finditer(line):
            if held:
                yield start + k, held[-1], f"takes {m.group(1)}"
            held.append(m.group(1))
        for m in LOCK_GIVE.finditer(line):
            if m.group(1) in held and not early_exit(body, k, depth_at):
                held.remove(m.group(1))


def included_locks(text):
    """Lock declarations of the headers of src/ a file includes."""
    out = {}
    for inc in LOCAL_INCLUDE.findall(text):
        path = os.path.join(SRC, inc)
        if os.path.isfile(path):
            with open(path, encoding="utf-8") as f:
                t = f.read()
            for name, comments in lock_decls(t.split("\n"), blank(t).split("\n")).items():
                out.setdefault(name, []).extend(comments)
    return out


def order_problems(r, path, text, lines, code):
    """Check 3: the lock order is written next to a lock held while another is taken."""
    if not path.endswith(".c"):
        return
    known = None
    for name, start, count, _ in functions(code):
        for line, held, what in order_events(code, start, count):
            if known is None:
                known = included_locks(text)
                for k, v in lock_decls(lines, code).items():
                    known.setdefault(k, []).extend(v)
            field = re.findall(r"\w+", held)[-1] if re.findall(r"\w+", held) else held
            if any("lock order:" in c for c in known.get(field, [])):
                continue
            yield (f"{r}:{line + 1}: {name} {what} while holding {held}: write the lock order next to "
                   f"{field}'s declaration (a comment with \"lock order:\")")


def main():
    problems = []
    for path in sources():
        with open(path, encoding="utf-8") as f:
            text = f.read()
        lines = text.split("\n")
        code = blank(text).split("\n")
        r = rel(path)
        problems += global_problems(r, lines, code)
        problems += lock_comment_problems(r, lines, code)
        problems += order_problems(r, path, text, lines, code)
    for p in problems:
        print(p)
    print(f"{len(problems)} problem(s) with state in the source tree" if problems
          else "source tree state: every check holds")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
