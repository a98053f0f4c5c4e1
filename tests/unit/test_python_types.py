#!/usr/bin/env python3
"""test_python_types -- the package's type stubs, checked by mypy (Debian: mypy).

1. mypy --strict on tests/python/typed_usage.py (a typed program using every public name): no error;
2. mypy on a few lines that misuse the API (a wrong argument type, a misspelt keyword, an attribute
   that does not exist, a result used as the wrong type): exactly those lines are reported, so the
   stubs are what mypy reads (an untyped package would pass anything).
The package comes from python/ (MYPYPATH); nothing is imported or run. Exit 0 when both hold, 1
otherwise, 77 (skipped) when mypy is not installed for /usr/bin/python3.
"""

import importlib.util
import os
import re
import subprocess
import sys
import tempfile

ROOT = os.environ.get("SL_SOURCE_DIR") or os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
USAGE = os.path.join(ROOT, "tests", "python", "typed_usage.py")

# Each line misuses the API; mypy must report each one (the number is the line in the file).
MISUSE = [
    "import shardload, shardload.torch",
    "loader = shardload.Loader(42)",                    # model: str
    "loader.plan()[0].nmae",                            # no such attribute
    "size: str = loader.plan()[0].nbytes",              # an int
    "loader.params(kind='jax')",                        # torch, numpy or dlpack
    "loader.reload(revison='main')",                    # misspelt keyword
    "shardload.error_for('SHAPE')",                     # status: int
    "shardload.NoSuchError",                            # not exported
    "shardload.torch.load_into(None, 42)",              # model: str
    "shardload.torch.refit_into(None, 'v1')",           # version: int
    "n: int = shardload.torch.load_into(None, 'm')",    # (missing, unexpected)
]


def run_mypy(paths, cache):
    env = dict(os.environ, MYPYPATH=os.path.join(ROOT, "python"))
    cmd = [sys.executable, "-m", "mypy", "--strict", "--no-error-summary", "--show-error-codes",
           "--cache-dir", cache] + paths
    return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=240)


def main():
    if importlib.util.find_spec("mypy") is None:
        print("SKIP: mypy is not installed for %s (Debian: apt-get install mypy)" % sys.executable)
        return 77
    problems = []
    with tempfile.TemporaryDirectory() as tmp:
        cache = os.path.join(tmp, "cache")
        r = run_mypy([USAGE], cache)
        if r.returncode != 0:
            problems.append("mypy --strict on typed_usage.py (rc %d):\n%s%s" % (r.returncode, r.stdout, r.stderr))
        bad = os.path.join(tmp, "misuse.py")
        with open(bad, "w") as f:
            f.write("\n".join(MISUSE) + "\n")
        r = run_mypy([bad], cache)
        reported = {int(m.group(1)) for m in re.finditer(r"misuse\.py:(\d+): error", r.stdout)}
        expected = set(range(2, len(MISUSE) + 1))
        if r.returncode != 1 or reported != expected:
            problems.append("mypy on the misuses: lines %s reported, expected %s (rc %d):\n%s%s"
                            % (sorted(reported), sorted(expected), r.returncode, r.stdout, r.stderr))
    for p in problems:
        print(p)
    print("%d problem(s)" % len(problems) if problems else "mypy: the stubs type the usage, and the misuses fail")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
