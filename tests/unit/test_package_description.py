#!/usr/bin/env python3
"""test_package_description -- the Python package's long description reads right away from the
repository: no link in it resolves only inside the source tree.

The description is the file python/pyproject.toml names as `readme` (setuptools copies it into the
package's metadata: `pip show -v`, PKG-INFO, an index's project page), where a relative link such
as one from python/ to ../docs/ leads nowhere. Checks that the file exists, that python/setup.py does
not set another description beside it, and that every Markdown link, image, reference definition
and HTML href/src in it is an absolute URL (scheme://...) or a fragment (#...).
Standard library only. Exit 0 when every check holds, 1 otherwise (each link printed).
"""

import os
import re
import sys

ROOT = os.environ.get("SL_SOURCE_DIR") or os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PY = os.path.join(ROOT, "python")
LINKS = [re.compile(r"\]\(\s*<?([^)\s>]+)"),                 # [text](target), ![alt](target)
         re.compile(r"^\s*\[[^\]]+\]:\s*<?(\S+?)>?(?:\s|$)"),  # [label]: target
         re.compile(r"""\b(?:href|src)\s*=\s*["']([^"']+)""")]


def main():
    problems = []
    with open(os.path.join(PY, "pyproject.toml"), encoding="utf-8") as f:
        m = re.search(r'^readme\s*=\s*"([^"]+)"', f.read(), re.M)
    if m is None:
        print("python/pyproject.toml names no readme file (the package's long description)")
        return 1
    path = os.path.join(PY, m.group(1))
    with open(os.path.join(PY, "setup.py"), encoding="utf-8") as f:
        if "long_description" in f.read():
            problems.append("python/setup.py sets a long_description beside pyproject.toml's readme")
    with open(path, encoding="utf-8") as f:
        lines = f.read().split("\n")
    count = 0
    for n, line in enumerate(lines, 1):
        for pattern in LINKS:
            for target in pattern.findall(line):
                count += 1
                if not re.match(r"^[a-zA-Z][a-zA-Z0-9+.-]*://|^#|^mailto:", target):
                    problems.append(f"python/{m.group(1)}:{n}: link to '{target}' resolves only inside the "
                                    "repository (the package's description is read without it): write the "
                                    "path as text, or an absolute URL")
    for p in problems:
        print(p)
    print(f"{count} link(s) in the package's description, {len(problems)} problem(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
