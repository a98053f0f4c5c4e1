#!/usr/bin/env python3
"""test_config_keys -- the configuration keys have one owner, the table of src/api/config.c, and
every list of them kept elsewhere agrees with what the built library says (sl_config_keys(), read
through ctypes; standard library only; SL_SOURCE_DIR and SHARDLOAD_LIBRARY from ctest):

  1. docs/CLI.md's table (between its config-keys markers) is exactly what scripts/config-keys
     writes: every key, no other, each with the library's default and meaning, in its order;
  2. the notes under it ("- `key`, ...: ...") name only keys (a name ending in `_` is a prefix
     that must start some key);
  3. docs/HUB-CLIENT.md's table of knobs names only keys, with the library's defaults where the
     library has a plain one (byte counts may be written in KiB/MiB/GiB);
  4. the CLI's per-command key lists and flag table (src/cli/args.c) name only keys, and every key
     but the positional model is in some command's list (else no --help shows it).
Each difference is printed naming the key, with the command that fixes it; exit 0 when there is
none, 1 otherwise.
"""

import importlib.machinery
import importlib.util
import os
import re
import sys

sys.dont_write_bytecode = True
ROOT = os.environ.get("SL_SOURCE_DIR") or os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
# Keys no subcommand lists as an option: the model is the commands' positional argument.
POSITIONAL = {"model"}
UNITS = {"KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30}


def generator():
    """scripts/config-keys as a module: the same parser and table the fix command uses."""
    path = os.path.join(ROOT, "scripts", "config-keys")
    loader = importlib.machinery.SourceFileLoader("config_keys", path)
    spec = importlib.util.spec_from_loader("config_keys", loader)
    mod = importlib.util.module_from_spec(spec)
    loader.exec_module(mod)
    return mod


def read(rel):
    with open(os.path.join(ROOT, rel), encoding="utf-8") as f:
        return f.read()


def check_table(gen, keys, text):
    problems = ["%s: %s" % (gen.DOC_NAME, p) for p in gen.compare(keys, gen.doc_block(text))]
    return problems + (["fix: %s (rewrites the table from the library)" % gen.FIX] if problems else [])


def known(name, names):
    return any(n.startswith(name) for n in names) if name.endswith("_") else name in names


def check_notes(gen, names, text):
    """The bullets after the generated table, up to the next bold paragraph or heading."""
    if gen.END not in text:
        return []
    problems = []
    for line in text[text.index(gen.END):].splitlines()[1:]:
        if line.startswith(("**", "#")):
            break
        if line.startswith("- ") and ": " in line:
            for name in re.findall(r"`([^`]+)`", line.split(": ", 1)[0]):
                if not known(name, names):
                    problems.append("%s: the note on `%s` names no configuration key (edit the "
                                    "note under the table)" % (gen.DOC_NAME, name))
    return problems


def value(text):
    """A default cell or library default as a comparable value: None (none, or words), an int
    (plain or with a binary unit), or the text itself."""
    t = re.sub(r" \(.*\)$", "", text.replace("`", "").strip())
    m = re.fullmatch(r"(\d+) (KiB|MiB|GiB)", t)
    if m:
        return int(m.group(1)) * UNITS[m.group(2)]
    if t.isdigit():
        return int(t)
    return None if t in ("", "—", "-") or " " in t or "," in t else t


def split_cells(cell, n):
    """A row's default cell split over its n keys: one value each, or one shared by all."""
    parts = [p.strip() for p in re.split(r",\s*(?![^()]*\))", cell)]
    return parts if len(parts) == n else [cell] * n


def check_hub_client(names, defaults):
    text = read("docs/HUB-CLIENT.md")
    head = "## Knobs (configuration keys)"
    if head not in text:
        return ["docs/HUB-CLIENT.md: no section \"%s\"" % head]
    problems = []
    for line in text[text.index(head):].splitlines()[1:]:
        if line.startswith("#"):
            break
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if not line.startswith("| `") or len(cells) < 3:
            continue
        row_keys = re.findall(r"`([^`]+)`", cells[0])
        for key, cell in zip(row_keys, split_cells(cells[1], len(row_keys))):
            if key not in names:
                problems.append("docs/HUB-CLIENT.md: `%s` is not a configuration key" % key)
                continue
            want = value(defaults[key]) if defaults[key] is not None else None
            if want is not None and value(cell) != want:
                problems.append("docs/HUB-CLIENT.md: key %s: default '%s', the library's '%s' (edit the "
                                "knobs table)" % (key, cell, defaults[key]))
    return problems


def check_cli(names):
    text = read("src/cli/args.c")
    problems = []
    listed = set()
    for cmd, body in re.findall(r"static const char \*const (\w+)_keys\[\] = \{(.*?)\};", text, re.S):
        for key in re.findall(r'"(\w+)"', body):
            listed.add(key)
            if key not in names:
                problems.append("src/cli/args.c: %s_keys lists `%s`, not a configuration key" % (cmd, key))
    m = re.search(r"static const flag flags\[\] = \{(.*?)\n\};", text, re.S)
    for flag, key in re.findall(r'\{"(-[\w-]+)", "(\w+)"', m.group(1) if m else ""):
        if key not in names:
            problems.append("src/cli/args.c: flag %s sets `%s`, not a configuration key" % (flag, key))
    if not listed:
        problems.append("src/cli/args.c: no per-command key list found")
    for key in sorted(set(names) - listed - POSITIONAL):
        problems.append("src/cli/args.c: key %s is in no command's list (no --help shows it)" % key)
    return problems


def main():
    gen = generator()
    keys = gen.library_keys(gen.library_path())
    names = [k for k, _, _ in keys]
    defaults = {k: d for k, d, _ in keys}
    if len(keys) < 10:
        print("the library lists only %d keys: sl_config_keys() not parsed" % len(keys))
        return 1
    doc = read(gen.DOC_NAME)
    problems = check_table(gen, keys, doc) + check_notes(gen, names, doc)
    problems += check_hub_client(names, defaults) + check_cli(names)
    for p in problems:
        print(p)
    if not problems:
        print("%d configuration keys; %s, docs/HUB-CLIENT.md and src/cli/args.c agree" % (len(keys), gen.DOC_NAME))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
