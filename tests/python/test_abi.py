#!/usr/bin/env python3
"""test_abi.py -- the package checks the library it loads (shardload._lib.check_library), one
process, no MPI job (the library is opened, MPI is not initialised):
  - on the real library the check passes when the package is imported: SL_MAX_DIMS is the
    library's, every ctypes layout has the library's size, the versions share major and minor;
  - a simulated mismatch raises one LibraryMismatch (an ImportError) naming the library's path and
    each difference: another package version (both versions), a ctypes layout of another size
    (the struct, both sizes: the layout of sl_param_source before its size field), another
    SL_COMM_OPS_VERSION, all three at once in one message; a library without sl_version();
  - the check runs when the library is opened: with the package's version changed, the first use
    (shardload.Loader) raises the mismatch, and succeeds once the version is restored.
"""

import ctypes
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402,F401  (puts the repository's python/ on the path)

import shardload  # noqa: E402

fails = []


def check(cond, msg):
    if not cond:
        fails.append(msg)
        print("FAIL: " + msg, flush=True)


def mismatch(fn):
    """The message of the LibraryMismatch fn raises, or None."""
    try:
        fn()
    except _lib.LibraryMismatch as e:
        check(isinstance(e, ImportError), "LibraryMismatch is an ImportError")
        return str(e)
    check(False, "no LibraryMismatch raised")
    return None


# --- the real library passes -------------------------------------------------------------------
from shardload import _lib  # noqa: E402  (opens and checks the library)

lib_version = _lib.text(_lib.lib.sl_version())
check(lib_version.split(".")[:2] == shardload.__version__.split(".")[:2],
      "library %s, package %s: same major and minor" % (lib_version, shardload.__version__))
check(_lib.SL_MAX_DIMS == _lib.lib.sl_abi(b"SL_MAX_DIMS"), "SL_MAX_DIMS is the library's")
for name, cls in _lib.layouts().items():
    check(_lib.lib.sl_abi(name.encode()) == ctypes.sizeof(cls),
          "%s: the library's %d bytes, the layout's %d" % (name, _lib.lib.sl_abi(name.encode()), ctypes.sizeof(cls)))
_lib.check_library(_lib.lib, _lib.path, shardload.__version__, _lib.layouts(), _lib.constants())
src = _lib.ParamSource(size=ctypes.sizeof(_lib.ParamSource))
check(src.size == _lib.lib.sl_abi(b"sl_param_source"), "ParamSource(size=...) carries the library's size")


# --- simulated mismatches -----------------------------------------------------------------------
class ParamSourceWithoutSize(ctypes.Structure):
    """sl_param_source as it was before its size field."""
    _fields_ = [f for f in _lib.ParamSource._fields_ if f[0] != "size"]


lib_size = _lib.lib.sl_abi(b"sl_param_source")
old_size = ctypes.sizeof(ParamSourceWithoutSize)

msg = mismatch(lambda: _lib.check_library(_lib.lib, _lib.path, "9.9.0", _lib.layouts(), _lib.constants()))
for words in (_lib.path, "version", "library is %s" % lib_version, "package 9.9.0"):
    check(msg is not None and words in msg, "version mismatch names %r: %s" % (words, msg))
check(msg is not None and "struct" not in msg, "only the version differs: %s" % msg)

layouts = dict(_lib.layouts(), sl_param_source=ParamSourceWithoutSize)
msg = mismatch(lambda: _lib.check_library(_lib.lib, _lib.path, shardload.__version__, layouts, _lib.constants()))
want = "struct sl_param_source: %d bytes in the library, %d in the package's ctypes layout" % (lib_size, old_size)
check(msg is not None and want in msg and _lib.path in msg, "layout mismatch says %r: %s" % (want, msg))
check(msg is not None and "version:" not in msg, "only the layout differs: %s" % msg)

constants = {"SL_COMM_OPS_VERSION": 2}
msg = mismatch(lambda: _lib.check_library(_lib.lib, _lib.path, shardload.__version__, _lib.layouts(), constants))
check(msg is not None and "SL_COMM_OPS_VERSION: 1 in the library, 2 in the package" in msg,
      "constant mismatch: %s" % msg)

msg = mismatch(lambda: _lib.check_library(_lib.lib, _lib.path, "9.9.0", layouts, constants))
check(msg is not None and all(w in msg for w in ("package 9.9.0", "struct sl_param_source", "SL_COMM_OPS_VERSION")),
      "every difference in one message: %s" % msg)
check(msg is not None and "SHARDLOAD_LIBRARY" in msg, "the message says what to do: %s" % msg)

msg = mismatch(lambda: _lib._abi_functions(object(), "/old/libshardload.so"))
check(msg is not None and "/old/libshardload.so has no sl_version()" in msg, "a library before sl_version: %s" % msg)

# --- at load: the check runs when the library is opened -----------------------------------------
for name in [m for m in sys.modules if m.startswith("shardload.") and m != "shardload.torchcomm"]:
    del sys.modules[name]
for attr in ("_lib", "Loader", "errors", "loader", "config"):
    shardload.__dict__.pop(attr, None)
real_version = shardload.__version__
shardload.__version__ = "9.9.0"
try:
    shardload.Loader
    check(False, "a package of another version opened the library")
except ImportError as e:
    check("9.9.0" in str(e) and "library is %s" % lib_version in str(e),
          "the first use names both versions: %s" % e)
shardload.__version__ = real_version
check(shardload.Loader is not None, "with the version restored the package loads")

print("test_abi: %d failures" % len(fails))
sys.exit(1 if fails else 0)
