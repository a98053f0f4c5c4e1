"""tree_files -- the files of the source tree that the tree tests read (standard library only).

The tree tests (doc_refs, source_tree, tree_caps, tree_state, test_version) check the project's
own files, never what a build or an install leaves beside them (build/, python/build/,
python/shardload.egg-info/, __pycache__/): those are not the project's, and a test that read them
would fail on a tree that is fine (issue: `pip install ./python` leaves a PKG-INFO whose links
resolve only inside the repository).

What "the project's files" are:
  - in a git checkout (ROOT is the top of a git work tree, a linked worktree included): what git
    tracks plus the untracked files that are not ignored, `git ls-files --cached --others
    --exclude-standard`, so new work is checked before it is committed; a tracked file deleted
    from the work tree is not there to read and is left out;
  - anywhere else (a source tarball, a copy without .git, or no git program): every file under
    ROOT except .git and what the tree's own .gitignore files ignore, read here with the subset
    of gitignore(5) the project uses: blank lines and '#' comments skipped; a pattern is a glob
    (fnmatch) matched against the name when it has no '/' but a trailing one, else against the
    path relative to its .gitignore's folder (a leading '/' anchors it there); a trailing '/'
    matches folders only; a '!' pattern re-includes what an earlier pattern of the same or a
    higher .gitignore excluded. An ignored folder is not entered.
mode() says which of the two was used (tests print it, so a reader knows what was scanned).
"""

import fnmatch
import os
import subprocess

_cache = {}


def _git_files(root):
    """Relative paths from git, or None when root is not the top of a git work tree."""
    try:
        top = subprocess.run(["git", "-C", root, "rev-parse", "--show-toplevel"], capture_output=True,
                             text=True, timeout=60)
        if top.returncode != 0 or os.path.realpath(top.stdout.strip()) != os.path.realpath(root):
            return None
        out = subprocess.run(["git", "-C", root, "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                             capture_output=True, timeout=60, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    names = sorted(set(p.decode("utf-8", "surrogateescape") for p in out.split(b"\0") if p))
    return [p for p in names if os.path.isfile(os.path.join(root, p))]


def _read_ignores(folder, rel_folder):
    """The rules of folder/.gitignore as (negated, dir_only, anchored, pattern, rel_folder)."""
    rules = []
    try:
        with open(os.path.join(folder, ".gitignore"), encoding="utf-8") as f:
            lines = f.read().splitlines()
    except OSError:
        return rules
    for line in lines:
        line = line.rstrip()
        if not line or line.startswith("#"):
            continue
        negated = line.startswith("!")
        if negated:
            line = line[1:]
        dir_only = line.endswith("/")
        line = line.rstrip("/")
        anchored = "/" in line
        rules.append((negated, dir_only, anchored, line.lstrip("/"), rel_folder))
    return rules


def _ignored(rules, rel, is_dir):
    """Whether rel (relative to ROOT, '/'-separated) is ignored: the last matching rule decides."""
    ignored = False
    for negated, dir_only, anchored, pattern, base in rules:
        if dir_only and not is_dir:
            continue
        if base and not rel.startswith(base + "/"):
            continue
        sub = rel[len(base) + 1:] if base else rel
        hit = fnmatch.fnmatchcase(sub, pattern) if anchored else fnmatch.fnmatchcase(os.path.basename(sub), pattern)
        if hit:
            ignored = not negated
    return ignored


def _walk_files(root):
    """Relative paths of a tree without git: every file but .git and what its .gitignore files ignore."""
    found = []

    def walk(folder, rel_folder, rules):
        rules = rules + _read_ignores(folder, rel_folder)
        try:
            entries = sorted(os.listdir(folder))
        except OSError:
            return
        for name in entries:
            if name == ".git":
                continue
            path = os.path.join(folder, name)
            rel = rel_folder + "/" + name if rel_folder else name
            is_dir = os.path.isdir(path) and not os.path.islink(path)
            if _ignored(rules, rel, is_dir):
                continue
            if is_dir:
                walk(path, rel, rules)
            elif os.path.isfile(path):
                found.append(rel)

    walk(root, "", [])
    return sorted(found)


def _listing(root):
    root = os.path.abspath(root)
    if root not in _cache:
        files = None if os.environ.get("SL_TREE_FILES") == "walk" else _git_files(root)
        _cache[root] = ("git", files) if files is not None else ("walk", _walk_files(root))
    return _cache[root]


def mode(root):
    """'git' or 'walk': how files(root) lists the tree (SL_TREE_FILES=walk forces the walk)."""
    return _listing(root)[0]


def files(root, tops=None, suffixes=None):
    """Absolute paths of the project's files under root, sorted; only those under one of tops
    (paths relative to root: a folder or a file) when given, only names ending in one of suffixes
    when given."""
    root = os.path.abspath(root)
    rels = _listing(root)[1]
    out = []
    for rel in rels:
        if tops is not None and not any(rel == t or rel.startswith(t.rstrip("/") + "/") for t in tops):
            continue
        if suffixes is not None and not rel.endswith(tuple(suffixes)):
            continue
        out.append(os.path.join(root, *rel.split("/")))
    return out
