"""setup.py -- copies libshardload.so and the architecture specs into the package when it can find
a build.

`python3 -m pip install --no-build-isolation ./python` (no network). The library is taken from
SHARDLOAD_LIBRARY when set, else from the repository's build folder (../build/lib, or
$SL_BUILD_DIR/lib). Without one the install fails, saying how to get one (a package without its
library would install "successfully" and fail at its first use), unless the system linker finds
an installed libshardload (ctypes.util.find_library: a prefix in ld.so.conf, the .deb), or
SHARDLOAD_NO_LIBRARY=1 says the library will be provided at run time (SHARDLOAD_LIBRARY, the system
linker path): then the package installs alone and says so.

The specs (specs/*.json and specs/vision/*.json of the repository: what tells the library how to
slice each architecture) go to shardload/specs/, beside the bundled library, where the library looks for them (a `specs`
folder next to its own file). They are taken from where the library found above reads its own
(<libdir>/../share/shardload/specs: a build folder or an install prefix), else from the
repository's specs/ folder (../specs).
"""

import ctypes.util
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


NO_LIBRARY = """shardload: no libshardload.so to bundle, and none installed on the system.
  Build it first, in the shardload source tree:
      cmake -S . -B build && cmake --build build -j
  then install ./python from that tree (it takes build/lib beside python/), or point
  SHARDLOAD_LIBRARY at a built libshardload.so (SL_BUILD_DIR at a build folder).
  To install the package alone and provide the library at run time (SHARDLOAD_LIBRARY, or the
  system linker path), set SHARDLOAD_NO_LIBRARY=1."""


def no_library():
    """None when installing without a bundled library is fine (the reason printed), else the error."""
    system = ctypes.util.find_library("shardload")
    if system is not None:
        print("shardload: no libshardload.so to bundle; the system's %s will be used at run time" % system)
        return None
    if os.environ.get("SHARDLOAD_NO_LIBRARY", "") not in ("", "0"):
        print("shardload: installed without libshardload.so (SHARDLOAD_NO_LIBRARY): provide it at run "
              "time with SHARDLOAD_LIBRARY or on the system linker path")
        return None
    return NO_LIBRARY


class BuildPy(build_py):
    def run(self):
        super().run()
        lib = find_library()
        if lib is None:
            error = no_library()
            if error is not None:
                raise SystemExit(error)
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
