"""setup.py -- copies libshardload.so and the architecture specs into the package when it can find
a build.

`python3 -m pip install --no-build-isolation ./python` (no network). The library is taken from
SHARDLOAD_LIBRARY when set, else from the repository's build folder (../build/lib, or
$SL_BUILD_DIR/lib); without one the package installs alone and finds the library at run time
(SHARDLOAD_LIBRARY, then the system linker path).

The specs (specs/*.json and specs/vision/*.json of the repository: what tells the library how to
slice each architecture) go to shardload/specs/, beside the bundled library, where the library looks for them (a `specs`
folder next to its own file). They are taken from where the library found above reads its own
(<libdir>/../share/shardload/specs: a build folder or an install prefix), else from the
repository's specs/ folder (../specs).
"""

import glob
import os
import shutil

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = os.path.dirname(os.path.abspath(__file__))


def find_library():
    env = os.environ.get("SHARDLOAD_LIBRARY")
    if env and os.path.isfile(env):
        return os.path.realpath(env)
    dirs = []
    if os.environ.get("SL_BUILD_DIR"):
        dirs.append(os.path.join(os.environ["SL_BUILD_DIR"], "lib"))
    dirs.append(os.path.join(HERE, "..", "build", "lib"))
    for d in dirs:
        hits = sorted(glob.glob(os.path.join(d, "libshardload.so*")), key=len)
        if hits:
            return os.path.realpath(hits[0])
    return None


def find_specs(lib):
    """The folder of *.json specs to bundle, or None."""
    dirs = []
    if lib is not None:
        dirs.append(os.path.join(os.path.dirname(lib), "..", "share", "shardload", "specs"))
    dirs.append(os.path.join(HERE, "..", "specs"))
    for d in dirs:
        if glob.glob(os.path.join(d, "*.json")):
            return os.path.realpath(d)
    return None


class BuildPy(build_py):
    def run(self):
        super().run()
        lib = find_library()
        if lib is None:
            print("shardload: no libshardload.so found to bundle (set SHARDLOAD_LIBRARY); the "
                  "package will look for it at run time")
        else:
            dst = os.path.join(self.build_lib, "shardload", "libshardload.so")
            shutil.copyfile(lib, dst)
            print("shardload: bundled %s" % lib)
        specs = find_specs(lib)
        if specs is None:
            print("shardload: no architecture specs found to bundle (specs/*.json); the library "
                  "will look for them beside itself and in SHARDLOAD_SPECS")
            return
        dst = os.path.join(self.build_lib, "shardload", "specs")
        shutil.rmtree(dst, ignore_errors=True)
        os.makedirs(dst)
        # specs/*.json and the vision towers' specs/vision/*.json that wrappers include by name
        names = sorted(os.path.relpath(p, specs) for p in glob.glob(os.path.join(specs, "*.json"))
                       + glob.glob(os.path.join(specs, "vision", "*.json")))
        for name in names:
            os.makedirs(os.path.dirname(os.path.join(dst, name)), exist_ok=True)
            shutil.copyfile(os.path.join(specs, name), os.path.join(dst, name))
        print("shardload: bundled %d architecture specs from %s" % (len(names), specs))


setup(cmdclass={"build_py": BuildPy})
