"""setup.py -- copies libshardload.so next to the package when it can find a build.

`python3 -m pip install --no-build-isolation ./python` (no network). The library is taken from
SHARDLOAD_LIBRARY when set, else from the repository's build folder (../build/lib, or
$SL_BUILD_DIR/lib); without one the package installs alone and finds the library at run time
(SHARDLOAD_LIBRARY, then the system linker path).
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


class BuildPy(build_py):
    def run(self):
        super().run()
        lib = find_library()
        if lib is None:
            print("shardload: no libshardload.so found to bundle (set SHARDLOAD_LIBRARY); the "
                  "package will look for it at run time")
            return
        dst = os.path.join(self.build_lib, "shardload", "libshardload.so")
        shutil.copyfile(lib, dst)
        print("shardload: bundled %s" % lib)


setup(cmdclass={"build_py": BuildPy})
