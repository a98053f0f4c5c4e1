"""catalog.py -- the tensors of a checkpoint (names, dtypes, shapes, files) from the headers alone.

    for t in shardload.catalog.tensors("/models/m"):
        t.name, t.dtype, t.shape, t.nbytes, t.file

The C library's inspection API (sl_model_open, section 6 of shardload/core.h) reads the headers
of the folder's safetensors files (the file selection of the configuration's load_format, index
files resolved) and nothing of the data. A Hub id is first brought into the Hugging Face cache
(sl_hub_download, what a load would read anyway). Tensors are listed as vLLM's default loader
iterates them: files in sorted path order, each file's tensors in header order.
"""

import collections
import ctypes
import os

from . import _lib
from .config import Config
from .errors import error_for

lib = _lib.lib

Tensor = collections.namedtuple("Tensor", "name dtype shape nbytes file")


class TensorInfo(ctypes.Structure):
    """struct sl_tensor_info: .size = ctypes.sizeof(TensorInfo) before the call."""
    _fields_ = [("size", ctypes.c_size_t), ("name", ctypes.c_char_p), ("dtype", ctypes.c_char_p),
                ("ndim", ctypes.c_uint32), ("shape", ctypes.c_uint64 * _lib.SL_MAX_DIMS),
                ("nbytes", ctypes.c_uint64), ("offset", ctypes.c_uint64), ("file", ctypes.c_size_t)]


_P = ctypes.POINTER
_SIGS = {
    "sl_model_open": (ctypes.c_int, [ctypes.c_char_p, ctypes.c_void_p, _P(ctypes.c_void_p),
                                     _P(ctypes.c_void_p)]),
    "sl_model_close": (None, [ctypes.c_void_p]),
    "sl_model_file_count": (ctypes.c_size_t, [ctypes.c_void_p]),
    "sl_model_file_path": (ctypes.c_char_p, [ctypes.c_void_p, ctypes.c_size_t]),
    "sl_model_tensor_count": (ctypes.c_size_t, [ctypes.c_void_p]),
    "sl_model_tensor": (ctypes.c_int, [ctypes.c_void_p, ctypes.c_size_t, _P(TensorInfo)]),
    "sl_hub_download": (ctypes.c_int, [ctypes.c_void_p, _P(ctypes.c_void_p)]),
}
for _name, (_res, _args) in _SIGS.items():
    _fn = getattr(lib, _name)
    _fn.restype = _res
    _fn.argtypes = _args

_libc = ctypes.CDLL(None)
_libc.free.argtypes = [ctypes.c_void_p]
_libc.free.restype = None


def _take_text(ptr):
    """A malloc'd C string as str, freed."""
    if not ptr.value:
        return None
    try:
        return ctypes.string_at(ptr.value).decode("utf-8", "replace")
    finally:
        _libc.free(ptr.value)


def _local_folder(model, options):
    """A local path for model (a folder or file, or a Hub id brought into the cache)."""
    if os.path.exists(model):
        return model
    cfg = Config()
    cfg.set("model", model)
    for key in ("revision", "cache_dir", "load_format"):
        if options.get(key):
            cfg.set(key, options[key])
    out = ctypes.c_void_p()
    st = lib.sl_hub_download(cfg.handle, ctypes.byref(out))
    if st != 0:
        raise error_for(st, _lib.last_error())
    return _take_text(out)


def tensors(model, **options):
    """[Tensor] of a checkpoint: model is a folder, a .safetensors file or a Hub id; options: the
    configuration keys that choose the files (load_format; revision and cache_dir for Hub ids).
    Raises the library's error (shardload.NotFoundError, ...) naming the path."""
    path = _local_folder(model, options)
    cfg = Config()
    if options.get("load_format"):
        cfg.set("load_format", options["load_format"])
    handle = ctypes.c_void_p()
    st = lib.sl_model_open(path.encode(), cfg.handle, ctypes.byref(handle), None)
    if st != 0:
        raise error_for(st, _lib.last_error())
    try:
        files = [_lib.text(lib.sl_model_file_path(handle, i))
                 for i in range(lib.sl_model_file_count(handle))]
        out = []
        info = TensorInfo(size=ctypes.sizeof(TensorInfo))
        for i in range(lib.sl_model_tensor_count(handle)):
            st = lib.sl_model_tensor(handle, i, ctypes.byref(info))
            if st != 0:
                raise error_for(st, "%s: tensor %d of the catalog" % (path, i))
            shape = tuple(info.shape[d] for d in range(info.ndim))
            out.append((files[info.file], info.offset,
                        Tensor(_lib.text(info.name), _lib.text(info.dtype), shape, info.nbytes,
                               files[info.file])))
    finally:
        lib.sl_model_close(handle)
    out.sort(key=lambda x: (x[0], x[1]))
    return [t for _, _, t in out]
