#!/usr/bin/env python3
"""test_version -- the version has one source, project(VERSION) in CMakeLists.txt, and every copy
of it agrees (standard library only; SL_SOURCE_DIR, SL_BUILD_DIR and SL_CLI from ctest):

  1. <build>/include/shardload/version.h, which the build writes from it: SL_VERSION_MAJOR, _MINOR,
     _PATCH, _STRING and SL_VERSION_HEX (0x00MMmmpp);
  2. the built library's sl_version() and sl_version_hex(), and `shardload --version`;
  3. the copies a build cannot write: the Python package's __version__ (pyproject.toml takes it
     from there), the manual page's header, the image tags of launch/mpijob.yaml, the
     find_package(shardload MAJOR.MINOR) of docs/INSTALL.md;
  4. no other file of the repository spells the version out: a new copy is derived, or added to
     COPIES here.
Exit 0 when every check holds; otherwise every difference is printed and the exit code is 1.
"""

import ctypes
import os
import re
import subprocess
import sys

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tree_files  # noqa: E402  (the project's files: never an ignored build output)

ROOT = os.environ.get("SL_SOURCE_DIR") or os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BUILD = os.environ.get("SL_BUILD_DIR") or os.path.join(ROOT, "build")

# Files that may spell the version out, each with the pattern that must hold it (group 1).
COPIES = {
    "CMakeLists.txt": r"project\(shardload VERSION (\d+\.\d+\.\d+)\b",
    "python/shardload/__init__.py": r'^__version__ = "([^"]*)"$',
    "packaging/shardload.1": r'^\.TH SHARDLOAD 1 "[^"]*" "shardload ([^"]*)"',
    "launch/mpijob.yaml": r"image: shardload:(\S+)",
}
# Text files scanned for a stray copy (tests/data holds generated fixtures).
SCANNED = (".c", ".h", ".in", ".py", ".md", ".txt", ".toml", ".yaml", ".yml", ".sh", ".cmake", ".1", ".json")
SKIPPED_DIRS = {"tests/data"}

problems = []


def read(rel):
    with open(os.path.join(ROOT, rel), encoding="utf-8") as f:
        return f.read()


def project_version():
    m = re.search(COPIES["CMakeLists.txt"], read("CMakeLists.txt"), re.M)
    if not m:
        sys.exit("CMakeLists.txt: no project(shardload VERSION MAJOR.MINOR.PATCH)")
    return m.group(1)


def check_header(version):
    path = os.path.join(BUILD, "include", "shardload", "version.h")
    if not os.path.isfile(path):
        problems.append("%s: missing (configure the build)" % path)
        return
    with open(path, encoding="utf-8") as f:
        text = f.read()
    macros = dict(re.findall(r"^#define (SL_VERSION_\w+) (.*)$", text, re.M))
    major, minor, patch = (int(x) for x in version.split("."))
    want = {"SL_VERSION_MAJOR": str(major), "SL_VERSION_MINOR": str(minor), "SL_VERSION_PATCH": str(patch),
            "SL_VERSION_STRING": '"%s"' % version}
    for name, value in want.items():
        if macros.get(name) != value:
            problems.append("version.h: %s is %s, the project's %s" % (name, macros.get(name), value))
    if "SL_VERSION_HEX" not in macros:
        problems.append("version.h: no SL_VERSION_HEX")


def check_library(version):
    major, minor, patch = (int(x) for x in version.split("."))
    lib_path = os.path.join(BUILD, "lib", "libshardload.so")
    try:
        lib = ctypes.CDLL(lib_path, mode=ctypes.RTLD_LOCAL)
    except OSError as e:
        problems.append("cannot load %s: %s" % (lib_path, e))
        return
    lib.sl_version.restype = ctypes.c_char_p
    lib.sl_version_hex.restype = ctypes.c_uint32
    got = lib.sl_version().decode()
    if got != version:
        problems.append("sl_version() is %s, the project's %s" % (got, version))
    hexv = lib.sl_version_hex()
    if hexv != (major << 16) | (minor << 8) | patch:
        problems.append("sl_version_hex() is 0x%06x for %s" % (hexv, version))
    cli = os.environ.get("SL_CLI") or os.path.join(BUILD, "shardload")
    out = subprocess.run([cli, "--version"], capture_output=True, text=True, timeout=30)
    if out.returncode != 0 or out.stdout.strip() != "shardload %s" % version:
        problems.append("`shardload --version` printed %r (exit %d), expected 'shardload %s'"
                        % (out.stdout.strip(), out.returncode, version))


def check_copies(version):
    for rel, pattern in COPIES.items():
        found = re.findall(pattern, read(rel), re.M)
        if not found:
            problems.append("%s: no version where expected (%s)" % (rel, pattern))
        for v in found:
            if v != version:
                problems.append("%s: version %s, the project's %s (CMakeLists.txt)" % (rel, v, version))
    toml = read("python/pyproject.toml")
    if re.search(r'^version\s*=\s*"', toml, re.M) or 'version = {attr = "shardload.__version__"}' not in toml:
        problems.append("python/pyproject.toml: the version comes from shardload.__version__ (dynamic), "
                        "not a copy")
    major_minor = ".".join(version.split(".")[:2])
    for v in re.findall(r"find_package\(shardload (\S+) ", read("docs/INSTALL.md")):
        if v != major_minor:
            problems.append("docs/INSTALL.md: find_package(shardload %s), the project's %s" % (v, major_minor))


def check_no_stray_copy(version):
    pattern = re.compile(r"(?<![\w.])%s(?![\w.]*\d)" % re.escape(version))
    for path in tree_files.files(ROOT, suffixes=SCANNED):
        rel = os.path.relpath(path, ROOT).replace(os.sep, "/")
        if rel in COPIES or any(rel.startswith(d + "/") for d in SKIPPED_DIRS):
            continue
        try:
            with open(path, encoding="utf-8") as f:
                text = f.read()
        except (UnicodeDecodeError, OSError):
            continue
        for n, line in enumerate(text.split("\n"), 1):
            if pattern.search(line):
                problems.append("%s:%d: spells the version %s out: derive it from the project's "
                                "(CMakeLists.txt), or list the file in COPIES of %s"
                                % (rel, n, version, os.path.relpath(__file__, ROOT)))


def main():
    version = project_version()
    check_header(version)
    check_library(version)
    check_copies(version)
    check_no_stray_copy(version)
    for p in problems:
        print(p)
    print("%d problem(s) with the version" % len(problems) if problems
          else "version %s: every copy agrees" % version)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
