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
"""

import ctypes
import glob
import os

_HERE = os.path.dirname(os.path.abspath(__file__))

c_status = ctypes.c_int
c_comm = ctypes.c_void_p
SL_MAX_DIMS = 8


class LibraryNotFound(ImportError):
    """libshardload could not be loaded; the message lists the paths tried."""


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


class Param(ctypes.Structure):
    _fields_ = [("name", ctypes.c_char_p), ("dtype", ctypes.c_char_p),
                ("dtype_bits", ctypes.c_uint32), ("ndim", ctypes.c_uint32),
                ("global_shape", ctypes.c_uint64 * SL_MAX_DIMS),
                ("local_shape", ctypes.c_uint64 * SL_MAX_DIMS),
                ("shard", ctypes.c_char_p), ("data", ctypes.c_void_p),
                ("nbytes", ctypes.c_uint64), ("device", ctypes.c_int),
                ("alias_of", ctypes.c_char_p)]


class ParamSource(ctypes.Structure):
    _fields_ = [("tensor", ctypes.c_char_p), ("dtype", ctypes.c_int),
                ("tensor_ndim", ctypes.c_uint32),
                ("tensor_shape", ctypes.c_uint64 * SL_MAX_DIMS),
                ("src_offset", ctypes.c_uint64), ("src_stride", ctypes.c_uint64),
                ("row_bytes", ctypes.c_uint64), ("rows", ctypes.c_uint64),
                ("dst_offset", ctypes.c_uint64), ("dst_stride", ctypes.c_uint64),
                ("dst_transposed", ctypes.c_uint32)]


lib, path = _load()

_P = ctypes.POINTER
_SIGS = {
    "sl_status_name": (ctypes.c_char_p, [c_status]),
    "sl_status_message": (ctypes.c_char_p, [c_status]),
    "sl_config_create": (c_status, [_P(ctypes.c_void_p)]),
    "sl_config_destroy": (None, [ctypes.c_void_p]),
    "sl_config_set": (c_status, [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_char_p]),
    "sl_config_get": (ctypes.c_char_p, [ctypes.c_void_p, ctypes.c_char_p]),
    "sl_config_keys": (ctypes.c_char_p, []),
    "sl_config_error": (ctypes.c_char_p, [ctypes.c_void_p]),
    "sl_loader_create": (c_status, [ctypes.c_void_p, c_comm, _P(ctypes.c_void_p)]),
    "sl_loader_destroy": (None, [ctypes.c_void_p]),
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
}
for _name, (_res, _args) in _SIGS.items():
    _fn = getattr(lib, _name)
    _fn.restype = _res
    _fn.argtypes = _args

# The address of sl_dlpack_free, for capsule destructors that must not call back into Python.
dlpack_free_address = ctypes.cast(lib.sl_dlpack_free, ctypes.c_void_p).value


def text(b):
    return b.decode("utf-8", "replace") if b is not None else None
