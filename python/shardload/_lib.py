"""_lib.py -- finds libshardload.so and declares the C functions shardload uses (ctypes).

Search order (the first that loads wins; the error lists every path tried):
  1. next to this package: shardload/libshardload.so* (what `pip install ./python` copies in);
  2. the file named by the environment variable SHARDLOAD_LIBRARY;
  3. the system linker path: libshardload.so.0, libshardload.so (ldconfig, LD_LIBRARY_PATH).
The library is loaded with RTLD_LOCAL: its symbols (and those of the MPI, CUDA and NCCL libraries
it links) do not take part in the resolution of libraries loaded later into the process (torch's
own NCCL). Where this package initialises MPI itself (no mpi4py), libmpi is first made global
(promote_mpi): Open MPI builds whose components do not link libmpi resolve its symbols from the
global scope (Debian's do link it; mpi4py does the same promotion for itself).
MPI_Comm is Open MPI's pointer-sized handle (c_void_p).

The library found is checked before anything uses it (check_library): its version (sl_version) must
have this package's major and minor version, and every struct this package lays out with ctypes
(Param, ParamSource, torchcomm.CommOps) must have the size the library was built with (sl_abi), and
torchcomm.OPS_VERSION the library's SL_COMM_OPS_VERSION; SL_MAX_DIMS, which those layouts use, is
the library's own (sl_abi("SL_MAX_DIMS")). Any difference
raises LibraryMismatch (an ImportError) naming the library's path, both versions, and each struct
with both sizes.
"""

import ctypes
import glob
import os

_HERE = os.path.dirname(os.path.abspath(__file__))

c_status = ctypes.c_int
c_comm = ctypes.c_void_p


class LibraryNotFound(ImportError):
    """libshardload could not be loaded; the message lists the paths tried."""


class LibraryMismatch(ImportError):
    """libshardload was loaded but does not match this package (its version, or the size of a
    struct); the message names the library's path and every difference."""


def candidates():
    """(label, path) in search order."""
    out = []
    for path in sorted(glob.glob(os.path.join(_HERE, "libshardload.so*")), key=len):
        out.append(("next to the package", path))
    env = os.environ.get("SHARDLOAD_LIBRARY")
    if env:
        out.append(("SHARDLOAD_LIBRARY", env))
    out.append(("system linker path", "libshardload.so.0"))
    out.append(("system linker path", "libshardload.so"))
    return out


def _load():
    tried = []
    for label, path in candidates():
        try:
            lib = ctypes.CDLL(path, mode=ctypes.RTLD_LOCAL)
            return lib, path
        except OSError as e:
            tried.append("  %s: %s (%s)" % (label, path, e))
    if not os.environ.get("SHARDLOAD_LIBRARY"):
        tried.append("  SHARDLOAD_LIBRARY: not set")
    raise LibraryNotFound("cannot load libshardload; tried:\n" + "\n".join(tried) +
                          "\nbuild it (cmake --build build) and set SHARDLOAD_LIBRARY=<build>/lib/"
                          "libshardload.so, or reinstall the package after building")


def promote_mpi():
    """Makes the libmpi that libshardload linked global (before MPI_Init without mpi4py): Open MPI
    opens its components with dlopen, and some builds' components resolve libmpi's symbols from the
    global scope. The library is the one already loaded (found from an MPI function's address)."""
    info = _DlInfo()
    addr = ctypes.cast(lib.MPI_Init, ctypes.c_void_p)
    libc = ctypes.CDLL(None)
    libc.dladdr.argtypes = [ctypes.c_void_p, ctypes.POINTER(_DlInfo)]
    if libc.dladdr(addr, ctypes.byref(info)) and info.dli_fname:
        ctypes.CDLL(info.dli_fname.decode(), mode=ctypes.RTLD_GLOBAL)


class _DlInfo(ctypes.Structure):
    _fields_ = [("dli_fname", ctypes.c_char_p), ("dli_fbase", ctypes.c_void_p),
                ("dli_sname", ctypes.c_char_p), ("dli_saddr", ctypes.c_void_p)]


def _abi_functions(lib, path):
    """Declares sl_version, sl_version_hex and sl_abi; a library without them predates them."""
    for name, res, args in (("sl_version", ctypes.c_char_p, []), ("sl_version_hex", ctypes.c_uint32, []),
                            ("sl_abi", ctypes.c_uint64, [ctypes.c_char_p])):
        try:
            fn = getattr(lib, name)
        except AttributeError:
            raise LibraryMismatch("libshardload at %s has no %s(): it is older than this package "
                                  "(shardload %s); %s" % (path, name, _package_version(), _REMEDY)) from None
        fn.restype = res
        fn.argtypes = args


def _package_version():
    from . import __version__
    return __version__


_REMEDY = ("use a library built from the same source as the package: rebuild it (cmake --build build) "
           "and reinstall the package, or set SHARDLOAD_LIBRARY to a matching libshardload.so")


def _max_dims(lib, path):
    """SL_MAX_DIMS as the library was built (the array length in Param and ParamSource)."""
    n = lib.sl_abi(b"SL_MAX_DIMS")
    if not 1 <= n <= 64:
        raise LibraryMismatch("libshardload at %s reports SL_MAX_DIMS = %d; %s" % (path, n, _REMEDY))
    return n


lib, path = _load()
_abi_functions(lib, path)
SL_MAX_DIMS = _max_dims(lib, path)


class Param(ctypes.Structure):
    _fields_ = [("name", ctypes.c_char_p), ("dtype", ctypes.c_char_p),
                ("dtype_bits", ctypes.c_uint32), ("ndim", ctypes.c_uint32),
                ("global_shape", ctypes.c_uint64 * SL_MAX_DIMS),
                ("local_shape", ctypes.c_uint64 * SL_MAX_DIMS),
                ("shard", ctypes.c_char_p), ("data", ctypes.c_void_p),
                ("nbytes", ctypes.c_uint64), ("device", ctypes.c_int),
                ("alias_of", ctypes.c_char_p)]


class ParamSource(ctypes.Structure):
    """struct sl_param_source: set .size = ctypes.sizeof(ParamSource) before the call."""
    _fields_ = [("size", ctypes.c_size_t), ("tensor", ctypes.c_char_p), ("dtype", ctypes.c_int),
                ("tensor_ndim", ctypes.c_uint32),
                ("tensor_shape", ctypes.c_uint64 * SL_MAX_DIMS),
                ("src_offset", ctypes.c_uint64), ("src_stride", ctypes.c_uint64),
                ("row_bytes", ctypes.c_uint64), ("rows", ctypes.c_uint64),
                ("dst_offset", ctypes.c_uint64), ("dst_stride", ctypes.c_uint64),
                ("dst_transposed", ctypes.c_uint32)]


def layouts():
    """The ctypes copy of every struct this package hands to or reads from the library, by its C name."""
    from .torchcomm import CommOps
    return {"sl_param": Param, "sl_param_source": ParamSource, "sl_comm_ops": CommOps}


def constants():
    """The header's constants this package writes down itself, by their C name."""
    from .torchcomm import OPS_VERSION
    return {"SL_COMM_OPS_VERSION": OPS_VERSION}


def check_library(lib, path, version, layouts, constants):
    """Raises LibraryMismatch unless the library at path has version's major and minor version,
    every struct of layouts ({C name: ctypes class}) has the size the library was built with, and
    every constant of constants ({C name: value}) its value. One error lists every difference."""
    problems = []
    lib_version = text(lib.sl_version())
    lib_hex = lib.sl_version_hex()
    want = [int(x) for x in version.split(".")[:2]]
    if [lib_hex >> 16, (lib_hex >> 8) & 0xFF] != want:
        problems.append("version: the library is %s, the package %s (the major and minor versions must be "
                        "equal)" % (lib_version, version))
    for name, cls in sorted(layouts.items()):
        size = lib.sl_abi(name.encode())
        if size == 0:
            problems.append("struct %s: unknown to the library (the package's layout is %d bytes)"
                            % (name, ctypes.sizeof(cls)))
        elif size != ctypes.sizeof(cls):
            problems.append("struct %s: %d bytes in the library, %d in the package's ctypes layout (%s.%s)"
                            % (name, size, ctypes.sizeof(cls), cls.__module__, cls.__name__))
    for name, value in sorted(constants.items()):
        got = lib.sl_abi(name.encode())
        if got != value:
            problems.append("%s: %d in the library, %d in the package" % (name, got, value))
    if problems:
        raise LibraryMismatch("libshardload at %s (version %s) does not match the Python package shardload %s:\n"
                              "  %s\n%s" % (path, lib_version, version, "\n  ".join(problems), _REMEDY))


def text(b):
    return b.decode("utf-8", "replace") if b is not None else None


def last_error():
    """The message of this thread's last failed C call (sl_last_error): the one channel of messages."""
    return text(lib.sl_last_error())


check_library(lib, path, _package_version(), layouts(), constants())


_P = ctypes.POINTER
_SIGS = {
    "sl_status_name": (ctypes.c_char_p, [c_status]),
    "sl_status_message": (ctypes.c_char_p, [c_status]),
    "sl_last_error": (ctypes.c_char_p, []),
    "sl_last_error_cause": (ctypes.c_int, []),
    "sl_hub_cause_name": (ctypes.c_char_p, [ctypes.c_int]),
    "sl_config_create": (c_status, [_P(ctypes.c_void_p)]),
    "sl_config_destroy": (None, [ctypes.c_void_p]),
    "sl_config_set": (c_status, [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_char_p]),
    "sl_config_get": (ctypes.c_char_p, [ctypes.c_void_p, ctypes.c_char_p]),
    "sl_config_keys": (ctypes.c_char_p, []),
    "sl_loader_create": (c_status, [ctypes.c_void_p, c_comm, _P(ctypes.c_void_p)]),
    "sl_loader_destroy": (None, [ctypes.c_void_p]),
    "sl_loader_release_local": (None, [ctypes.c_void_p]),
    "sl_loader_error": (ctypes.c_char_p, [ctypes.c_void_p]),
    "sl_loader_create_ops": (c_status, [ctypes.c_void_p, ctypes.c_void_p, _P(ctypes.c_void_p)]),
    "sl_loader_error_cause": (c_status, [ctypes.c_void_p, _P(ctypes.c_int)]),
    "sl_loader_set_cuda": (c_status, [ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p,
                                      ctypes.c_void_p]),
    "sl_loader_plan": (c_status, [ctypes.c_void_p]),
    "sl_loader_bind": (c_status, [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p,
                                  ctypes.c_uint64]),
    "sl_loader_bind_as": (c_status, [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p,
                                     ctypes.c_uint64, ctypes.c_int]),
    "sl_loader_load": (c_status, [ctypes.c_void_p]),
    "sl_loader_param_count": (ctypes.c_size_t, [ctypes.c_void_p]),
    "sl_loader_param": (_P(Param), [ctypes.c_void_p, ctypes.c_size_t]),
    "sl_loader_report_json": (ctypes.c_char_p, [ctypes.c_void_p]),
    "sl_loader_summary": (ctypes.c_char_p, [ctypes.c_void_p]),
    "sl_param_dtype_id": (ctypes.c_int, [_P(Param)]),
    "sl_dtype_name": (ctypes.c_char_p, [ctypes.c_int]),
    "sl_dtype_bits": (ctypes.c_uint32, [ctypes.c_int]),
    "sl_loader_param_source_count": (ctypes.c_size_t, [ctypes.c_void_p, ctypes.c_size_t]),
    "sl_loader_param_source": (c_status, [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_size_t,
                                          _P(ParamSource)]),
    "sl_loader_param_retain": (c_status, [ctypes.c_void_p, ctypes.c_size_t,
                                          _P(ctypes.c_void_p)]),
    "sl_param_ref_data": (ctypes.c_void_p, [ctypes.c_void_p]),
    "sl_param_ref_release": (None, [ctypes.c_void_p]),
    "sl_loader_param_dlpack": (c_status, [ctypes.c_void_p, ctypes.c_size_t,
                                          _P(ctypes.c_void_p)]),
    "sl_dlpack_free": (None, [ctypes.c_void_p]),
    "sl_loader_agree": (c_status, [ctypes.c_void_p, c_status, ctypes.c_char_p]),
    "sl_loader_set_progress": (c_status, [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p]),
    "sl_loader_reload": (c_status, [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_char_p]),
    "sl_loader_reload_state": (c_status, [ctypes.c_void_p, ctypes.c_size_t, _P(ctypes.c_int)]),
    "sl_loader_load_from_peers": (c_status, [ctypes.c_void_p, c_comm]),
    "sl_loader_load_from_peers_ops": (c_status, [ctypes.c_void_p, ctypes.c_void_p]),
    # caller-described plans (shardload/core.h section 12; plan.py)
    "sl_plan_create": (c_status, [_P(ctypes.c_void_p)]),
    "sl_plan_destroy": (None, [ctypes.c_void_p]),
    "sl_plan_add_param": (c_status, [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_int, ctypes.c_uint32,
                                     _P(ctypes.c_uint64), ctypes.c_int, ctypes.c_int, _P(ctypes.c_uint32)]),
    "sl_plan_add_params": (c_status, [ctypes.c_void_p, ctypes.c_size_t, _P(ctypes.c_char_p), _P(ctypes.c_int),
                                      _P(ctypes.c_uint32), _P(ctypes.c_uint64), ctypes.c_size_t, _P(ctypes.c_uint8),
                                      _P(ctypes.c_uint8)]),
    "sl_plan_add_regions": (c_status, [ctypes.c_void_p, ctypes.c_size_t, _P(ctypes.c_uint32), _P(ctypes.c_uint32),
                                       _P(ctypes.c_char_p), ctypes.c_size_t, _P(ctypes.c_uint32),
                                       _P(ctypes.c_uint32), _P(ctypes.c_uint64), ctypes.c_size_t]),
    "sl_plan_skip": (c_status, [ctypes.c_void_p, ctypes.c_char_p]),
    "sl_plan_param_count": (ctypes.c_size_t, [ctypes.c_void_p]),
    "sl_plan_region_count": (ctypes.c_uint64, [ctypes.c_void_p]),
    "sl_plan_from_json": (c_status, [ctypes.c_char_p, ctypes.c_size_t, _P(ctypes.c_void_p), _P(ctypes.c_void_p)]),
    "sl_plan_to_json": (ctypes.c_void_p, [ctypes.c_void_p]),
    "sl_loader_set_plan": (c_status, [ctypes.c_void_p, ctypes.c_void_p]),
    "sl_loader_param_fill": (ctypes.c_int, [ctypes.c_void_p, ctypes.c_size_t]),
    "sl_dryrun_create": (c_status, [ctypes.c_void_p, ctypes.c_int, _P(ctypes.c_void_p)]),
    "sl_dryrun_create_described": (c_status, [ctypes.c_void_p, ctypes.c_int, _P(ctypes.c_void_p),
                                              _P(ctypes.c_void_p)]),
    "sl_dryrun_destroy": (None, [ctypes.c_void_p]),
    "sl_dryrun_json": (ctypes.c_char_p, [ctypes.c_void_p]),
    "sl_dryrun_summary": (ctypes.c_char_p, [ctypes.c_void_p]),
}
for _name, (_res, _args) in _SIGS.items():
    _fn = getattr(lib, _name)
    _fn.restype = _res
    _fn.argtypes = _args

# The address of sl_dlpack_free, for capsule destructors that must not call back into Python.
dlpack_free_address = ctypes.cast(lib.sl_dlpack_free, ctypes.c_void_p).value

