#!/usr/bin/env python3
"""test_tree_files -- the tree tests read the project's files, never ignored build outputs.

Builds a small tree in a temporary folder, shaped as the repository is after
`pip install ./python` (python/shardload.egg-info/PKG-INFO and python/build/, both ignored by
python/.gitignore, each citing a Markdown file that does not exist), with one untracked file that
is not ignored and cites a missing file too, then runs tests/unit/test_doc_refs.py on it
(SL_SOURCE_DIR) and checks tests/unit/tree_files.py directly:
  1. as a git checkout: the untracked, not ignored file is reported; the ignored ones are not; a
     tracked file deleted from the work tree is not listed;
  2. as a copy without .git (a source tarball): the same verdicts, from the .gitignore files read
     by tree_files.py itself (a '!' rule re-including a file is honoured);
  3. the real repository: nothing listed lies under a folder its .gitignore files ignore.
Standard library only (git for case 1: skipped, with a message, when there is no git program).
Exit 0 when every check holds, 1 otherwise.
"""

import os
import shutil
import subprocess
import sys
import tempfile

sys.dont_write_bytecode = True
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import tree_files  # noqa: E402

ROOT = os.environ.get("SL_SOURCE_DIR") or os.path.dirname(os.path.dirname(HERE))
# Markdown names are spelled with MD so that doc_refs, which reads this file too, does not take
# the fixture's deliberately broken references for the repository's own.
MD = ".md"
FILES = {
    ".gitignore": "/build*/\n__pycache__/\n",
    "python/.gitignore": "build/\n*.egg-info/\n*.log\n!keep.log\n",
    "README" + MD: "# demo\nSee docs/GUIDE" + MD + ".\n",
    "docs/GUIDE" + MD: "# Guide\n## 1. Start\n",
    "docs/GONE" + MD: "# tracked, then deleted from the work tree\n",
    "python/README" + MD: "# package\nSee docs/GUIDE" + MD + " \u00a71.\n",
    # what setuptools leaves beside the package: ignored, with references that resolve nowhere
    "python/shardload.egg-info/PKG-INFO": "Description: see ../docs/INTEGRATION" + MD + "\n",
    "python/build/lib/shardload/NOTES" + MD: "see BUILT" + MD + "\n",
    "build/fixtures/README" + MD: "see FIXTURE" + MD + "\n",
    "python/run.log": "see LOGGED" + MD + "\n",
    # a '!' rule re-includes it: read, and its reference checked
    "python/keep.log": "see KEPT" + MD + "\n",
    # new work, not yet committed and not ignored: checked
    "docs/NEW" + MD: "# New\nSee MISSING" + MD + ".\n",
}
TRACKED = [".gitignore", "python/.gitignore", "README" + MD, "docs/GUIDE" + MD, "docs/GONE" + MD,
           "python/README" + MD]
REPORTED = ["docs/NEW" + MD + ":2: MISSING" + MD, "python/keep.log:1: KEPT" + MD]
NOT_REPORTED = ["INTEGRATION" + MD, "BUILT" + MD, "FIXTURE" + MD, "LOGGED" + MD]

problems = []


def make_tree(top):
    for rel, text in FILES.items():
        path = os.path.join(top, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)


def git(top, *args):
    env = dict(os.environ, GIT_CONFIG_NOSYSTEM="1", HOME=top, GIT_AUTHOR_NAME="t", GIT_AUTHOR_EMAIL="t@t",
               GIT_COMMITTER_NAME="t", GIT_COMMITTER_EMAIL="t@t")
    subprocess.run(["git", "-C", top] + list(args), check=True, capture_output=True, env=env, timeout=60)


def check_doc_refs(top, how):
    env = dict(os.environ, SL_SOURCE_DIR=top)
    r = subprocess.run([sys.executable, os.path.join(HERE, "test_doc_refs.py")], capture_output=True, text=True,
                       env=env, timeout=120)
    out = r.stdout + r.stderr
    if r.returncode != 1:
        problems.append(f"{how}: doc_refs exited {r.returncode}, expected 1 (two broken references):\n{out}")
    for want in REPORTED:
        if want.split(": ")[0] + ":" not in out or want.split(": ")[1] not in out:
            problems.append(f"{how}: doc_refs did not report {want}:\n{out}")
    for name in NOT_REPORTED:
        if name in out:
            problems.append(f"{how}: doc_refs reported {name}, cited only by an ignored file:\n{out}")
    if f"listed by {how}" not in out:
        problems.append(f"doc_refs did not say it listed the files by {how}:\n{out}")


def check_listing(top, how):
    tree_files._cache.clear()
    rels = sorted(os.path.relpath(p, top).replace(os.sep, "/") for p in tree_files.files(top))
    want = sorted(r for r in FILES if r != "docs/GONE" + MD and not any(
        n in FILES[r] for n in NOT_REPORTED))
    if tree_files.mode(top) != how:
        problems.append(f"tree_files.mode says {tree_files.mode(top)}, expected {how}")
    if rels != want:
        problems.append(f"{how}: tree_files.files listed {rels}, expected {want}")
    only_docs = [os.path.relpath(p, top) for p in tree_files.files(top, ["docs"], (".md",))]
    if sorted(only_docs) != ["docs/GUIDE" + MD, "docs/NEW" + MD]:
        problems.append(f"{how}: tree_files.files(top, ['docs'], ('.md',)) listed {only_docs}")


def check_repository():
    """The repository itself: no listed file lies in a folder that git (or the walk) ignores."""
    tree_files._cache.clear()
    for p in tree_files.files(ROOT):
        rel = os.path.relpath(p, ROOT).replace(os.sep, "/")
        parts = rel.split("/")
        if parts[0].startswith("build") or "__pycache__" in parts or any(x.endswith(".egg-info") for x in parts):
            problems.append(f"the repository's listing holds {rel}, a build output")


def main():
    with tempfile.TemporaryDirectory(prefix="sl-tree-files-") as tmp:
        checkout = os.path.join(tmp, "checkout")
        make_tree(checkout)
        if shutil.which("git") is None:
            print("no git program: the git checkout case is skipped")
        else:
            git(checkout, "init", "-q")
            git(checkout, "add", "--", *TRACKED)
            git(checkout, "commit", "-q", "-m", "tracked")
            os.unlink(os.path.join(checkout, "docs", "GONE" + MD))
            check_listing(checkout, "git")
            check_doc_refs(checkout, "git")
        tarball = os.path.join(tmp, "tarball")
        make_tree(tarball)
        os.unlink(os.path.join(tarball, "docs", "GONE" + MD))
        check_listing(tarball, "walk")
        check_doc_refs(tarball, "walk")
    check_repository()
    for p in problems:
        print(p)
    print(f"{len(problems)} problem(s) with the tree listing" if problems else "tree listing: every check holds")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
