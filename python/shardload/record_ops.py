"""record_ops.py -- the tracked tensor of the recorder (shardload.record) and its tables: which
torch ops are views, copies, conversions, writes or reads of values; checkpoint dtypes in torch.

A Tracked tensor is a torch.Tensor subclass over a meta tensor (a checkpoint stand-in, or a
value computed from stand-ins) or over a parameter's own memory (a parameter view). Its
attributes: _sl_kind (REF, DERIVED, PVIEW; parameters being recorded carry PARAM on their
swapped class), _sl_base (the tensor whose views have it as ._base: identity of the storage
without reading it), _sl_info (REF: the checkpoint tensor or layer it views; PVIEW: the
parameter), _sl_origins (DERIVED: where its values come from), _sl_what (a name for messages).
"""

import torch

from . import record_geometry as geom

REF, DERIVED, PVIEW, PARAM = 1, 2, 3, 4

_DTYPES = {"F64": "float64", "F32": "float32", "F16": "float16", "BF16": "bfloat16", "I64": "int64",
           "I32": "int32", "I16": "int16", "I8": "int8", "U8": "uint8", "BOOL": "bool",
           "U16": "uint16", "U32": "uint32", "U64": "uint64", "F8_E4M3": "float8_e4m3fn",
           "F8_E5M2": "float8_e5m2", "F8_E8M0": "float8_e8m0fnu", "C64": "complex64"}
_RAW = {8: torch.uint8, 16: torch.int16, 32: torch.int32, 64: torch.int64}
BITS = {"F64": 64, "I64": 64, "U64": 64, "F32": 32, "I32": 32, "U32": 32, "F16": 16, "BF16": 16,
        "I16": 16, "U16": 16, "C64": 64}
NAMES = {}   # torch dtype -> safetensors name
for _k, _v in _DTYPES.items():
    if hasattr(torch, _v):
        NAMES.setdefault(getattr(torch, _v), _k)
FLOATS = {torch.float32, torch.float16, torch.bfloat16, torch.float64}


def torch_dtype(name):
    """The torch dtype a checkpoint tensor of safetensors dtype `name` reaches loaders in (a
    type this torch lacks: the unsigned raw type of its width)."""
    t = _DTYPES.get(name)
    if t is not None and hasattr(torch, t):
        return getattr(torch, t)
    return _RAW.get(BITS.get(name, 8), torch.uint8)


def element_bits(name):
    return BITS.get(name, 8)


_DISABLED = torch._C.DisableTorchFunction
OPS = {}   # func -> (name, category): category() of op_name(func), filled as ops are met
_SCALARS = (int, float, bool, slice, type(None), type(Ellipsis), torch.dtype, torch.Size)
SCALAR_TYPES = frozenset(_SCALARS)


def track_view(recorder, func, args, kwargs=None):
    """A view op on tracked args[0] (not DERIVED) with scalar arguments, as the Recorder answers
    it: a view with the input's dtype adopts its tracking; anything else is classified by the
    Recorder (view_result)."""
    first = args[0]
    kind = first._sl_kind
    with _DISABLED():
        out = func(*args, **kwargs) if kwargs else func(*args)
    if type(out) is torch.Tensor:
        base = first if kind == PARAM else first._sl_base
        info = first._sl_info
        if out._base is base and out.dtype == info.dtype:
            if kind == PARAM:
                return adopt(out, PVIEW, base, info, info.name)
            return adopt(out, kind, base, info, first._sl_what)
    return recorder.view_result(func, args, out)


def _param_data(param):
    """param.data of a parameter being recorded: an alias of its memory, watched."""
    with _DISABLED():
        alias = param.detach()
    return wrap(alias, PVIEW, alias, param._sl_info, param._sl_info.name)


class Tracked(torch.Tensor):
    """See the module docstring. Every op on one goes through the active Recorder."""

    _hook = None   # the active Recorder's dispatch, set while a recording runs

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        hook = Tracked._hook
        if hook is None:
            with _DISABLED():
                return func(*args, **(kwargs or {}))
        if kwargs:
            return hook(func, args, kwargs)
        # The two most frequent kinds of op are answered here, as the Recorder's dispatch would
        # answer them: a query of metadata without tensor arguments (dim, shape, size(d)), and
        # a view of a stand-in or a parameter with scalar arguments (narrow, select, indexing).
        entry = OPS.get(func)
        if entry is None:
            return hook(func, args, {})
        cat = entry[1]
        if cat == QUERY:
            if len(args) == 1 or (len(args) == 2 and type(args[1]) is int):
                with _DISABLED():
                    return func(*args)
        elif cat == VIEW and args:
            first = args[0]
            kind = getattr(first, "_sl_kind", None)
            if kind is not None and kind != DERIVED:
                for a in args[1:]:
                    if type(a) not in SCALAR_TYPES:
                        return hook(func, args, {})
                return track_view(hook.__self__, func, args)
        elif cat == DATA and len(args) == 1 and getattr(args[0], "_sl_kind", None) == PARAM:
            return _param_data(args[0])
        return hook(func, args, {})

    def __repr__(self):
        return "<shardload stand-in %s %s>" % (getattr(self, "_sl_what", "?"), list(self.shape))


# The ops a weight loader runs on nearly every checkpoint tensor (an expert's: dim, the
# parameter's .data, indexing, .shape, narrow on both sides, copy_) as methods of the tracked
# classes: Python finds them before torch's own, which skips torch's __torch_function__ protocol
# (about a microsecond and a half per op; a DeepSeek-V3-sized model runs 300,000 of them). Each
# answers exactly as __torch_function__ above would, and hands anything else to it.
_TF = Tracked.__dict__["__torch_function__"].__func__
_TENSOR = torch._C._TensorBase
_SHAPE = _TENSOR.shape
shape_of = _SHAPE.__get__   # a tensor's shape where torch functions are disabled
_DATA = _TENSOR.data


def _generic(func, args, kwargs=None):
    return _TF(Tracked, func, (Tracked,), args, kwargs)


def _view_method(func):
    def method(self, *args, **kwargs):
        hook = Tracked._hook
        if hook is None or kwargs or self._sl_kind == DERIVED:
            return _generic(func, (self,) + args, kwargs)
        for a in args:
            if type(a) not in SCALAR_TYPES:
                return hook(func, (self,) + args, {})
        return track_view(hook.__self__, func, (self,) + args)
    method.__name__ = func.__name__
    return method


def _query_method(func):
    def method(self, *args):
        if not args or (len(args) == 1 and type(args[0]) is int):
            with _DISABLED():
                return func(self, *args)
        return _generic(func, (self,) + args)
    method.__name__ = func.__name__
    return method


def _shape(self):
    with _DISABLED():
        return _SHAPE.__get__(self)


def _copy_(self, src, *args, **kwargs):
    hook = Tracked._hook
    if hook is None or kwargs or args:
        return _generic(_TENSOR.copy_, (self, src) + args, kwargs)
    return hook.__self__.copy(_TENSOR.copy_, self, src)


def _tracked_data(self):
    if Tracked._hook is None:
        return _generic(_DATA.__get__, (self,))
    return self   # the same values and geometry (what the Recorder's dispatch answers)


def _param_data_get(self):
    if Tracked._hook is None:
        return _generic(_DATA.__get__, (self,))
    return _param_data(self)


def _data_set(self, value):
    _generic(_DATA.__set__, (self, value))


_METHODS = {"narrow": _view_method(_TENSOR.narrow), "__getitem__": _view_method(_TENSOR.__getitem__),
            "dim": _query_method(_TENSOR.dim), "size": _query_method(_TENSOR.size),
            "shape": property(_shape), "copy_": _copy_}
for _name, _method in _METHODS.items():
    setattr(Tracked, _name, _method)
Tracked.data = property(_tracked_data, _data_set)


_PARAM_CLASSES = {}


def param_class(base):
    """A subclass of a parameter's class with the recording hook (swapped in while recording)."""
    cls = _PARAM_CLASSES.get(base)
    if cls is None:
        attrs = dict(_METHODS, __torch_function__=Tracked.__dict__["__torch_function__"],
                     _sl_kind=PARAM, data=property(_param_data_get, _data_set))
        cls = type("Recording" + base.__name__, (base,), attrs)
        _PARAM_CLASSES[base] = cls
    return cls


def wrap(t, kind, base, info=None, what=None):
    """t (a plain tensor: no __torch_function__ of its own) as a Tracked of `kind`."""
    out = t.as_subclass(Tracked)
    out._sl_kind = kind
    out._sl_base = base
    out._sl_info = info
    out._sl_what = what
    return out


def adopt(t, kind, base, info=None, what=None):
    """wrap() for a tensor the caller just received from an op, that nothing else references:
    its own class is changed (no alias made: half the cost)."""
    t.__class__ = Tracked
    d = t.__dict__
    d["_sl_kind"] = kind
    d["_sl_base"] = base
    d["_sl_info"] = info
    d["_sl_what"] = what
    return t


def base_of(t):
    """The tensor whose views carry it as ._base, for a tracked tensor or a recorded parameter."""
    return t if getattr(t, "_sl_kind", None) == PARAM else t._sl_base


def storage_key(t):
    with torch._C.DisableTorchFunction():
        if hasattr(t, "untyped_storage"):
            return t.untyped_storage()._cdata
        return t.storage()._cdata


def flatten(x, out):
    if isinstance(x, (list, tuple)):
        for y in x:
            flatten(y, out)
    elif isinstance(x, dict):
        for y in x.values():
            flatten(y, out)
    elif isinstance(x, torch.Tensor):
        out.append(x)
    return out


def tree_map(fn, x):
    """fn over the tensors of plain lists, tuples and dicts (torch.Size and named tuples pass)."""
    t = type(x)
    if t is list:
        return [tree_map(fn, y) for y in x]
    if t is tuple:
        return tuple(tree_map(fn, y) for y in x)
    if t is dict:
        return {k: tree_map(fn, v) for k, v in x.items()}
    return fn(x)


def has_tensor(args, kwargs):
    for a in args:
        if type(a) in _SCALARS:
            continue
        if isinstance(a, torch.Tensor):
            return True
        if isinstance(a, (list, tuple)) and any(isinstance(b, torch.Tensor) for b in a):
            return True
    return any(isinstance(v, torch.Tensor) for v in kwargs.values())


# Categories of ops (by name).
WRITE, VIEW, DATA, EXTRACT, DEVICE, TEXT, CONVERT, QUERY, OTHER = range(9)

# Ops that read only a tensor's metadata.
_QUERIES = {"dim", "size", "numel", "nelement", "ndimension", "stride", "storage_offset",
            "is_contiguous", "element_size", "__len__", "is_floating_point", "is_complex",
            "shape.get", "dtype.get", "ndim.get", "layout.get", "requires_grad.get", "names.get",
            "is_sparse.get", "is_quantized.get", "itemsize.get", "nbytes.get", "grad.get",
            "is_leaf.get", "_version.get", "__hash__"}

# Ops that return views of their first argument (checked: a result that does not share the
# input's storage is classified as a new value).
_VIEWS = {"narrow", "select", "__getitem__", "view", "reshape", "t", "transpose", "permute",
          "squeeze", "unsqueeze", "chunk", "split", "split_with_sizes", "unbind", "flatten",
          "expand", "expand_as", "movedim", "moveaxis", "swapaxes", "swapdims", "T.get", "mT.get",
          "as_strided", "unflatten", "diagonal", "view_as", "reshape_as", "contiguous",
          "tensor_split", "hsplit", "vsplit", "unfold", "ravel", "alias"}
# Ops that copy their single stand-in's values into new storage, in its logical order.
COPIES = {"contiguous", "clone", "reshape", "flatten", "ravel", "reshape_as", "unflatten"}
_CONVERSIONS = {"to", "type", "type_as", "float", "double", "half", "bfloat16", "cpu", "cuda",
                "pin_memory", "int", "long", "short", "char", "byte", "bool"}
CAST = {"float": torch.float32, "double": torch.float64, "half": torch.float16,
        "bfloat16": torch.bfloat16, "int": torch.int32, "long": torch.int64, "short": torch.int16,
        "char": torch.int8, "byte": torch.uint8, "bool": torch.bool}
# In-place ops that change only a tensor's geometry or bookkeeping.
_INPLACE_VIEWS = {"t_", "transpose_", "squeeze_", "unsqueeze_", "as_strided_", "swapdims_",
                  "swapaxes_", "detach_", "requires_grad_", "share_memory_", "retain_grad"}
_EXTRACT = {"item", "tolist", "numpy", "__array__", "__bool__", "__float__", "__int__", "__index__",
            "__complex__", "data_ptr", "__reduce_ex__", "__deepcopy__"}
_DEVICE = {"device.get", "is_cuda.get", "is_meta.get", "get_device"}
_TEXT = {"__repr__", "__str__", "__format__"}
_INPLACE_DUNDER = {"__setitem__", "__iadd__", "__isub__", "__imul__", "__itruediv__",
                   "__ifloordiv__", "__imod__", "__ipow__", "__iand__", "__ior__", "__ixor__",
                   "__ilshift__", "__irshift__", "__imatmul__", "data.set"}


def op_name(func):
    name = getattr(func, "__name__", "")
    if name in ("__get__", "__set__"):
        owner = getattr(getattr(func, "__self__", None), "__name__", "?")
        return owner + "." + name[2:-2]
    return name


def op_entry(func):
    """(name, category) of an op, cached in OPS."""
    entry = OPS.get(func)
    if entry is None:
        name = op_name(func)
        entry = OPS[func] = (name, category(name))
    return entry


def category(name):
    if name in _INPLACE_DUNDER or (name.endswith("_") and not name.startswith("__")
                                   and name not in _INPLACE_VIEWS):
        return WRITE
    if name in ("data.get", "detach"):
        return DATA
    if name in _VIEWS:
        return VIEW
    if name in _EXTRACT:
        return EXTRACT
    if name in _DEVICE:
        return DEVICE
    if name in _TEXT:
        return TEXT
    if name in _CONVERSIONS:
        return CONVERT
    if name in _QUERIES:
        return QUERY
    return OTHER


def conversion_dtype(name, args, kwargs):
    """The dtype a conversion op asks for (None: the same dtype, a device move); "query" for
    Tensor.type() without arguments; "other" for a type string."""
    if name in CAST:
        return CAST[name]
    if name == "type_as":
        return args[1].dtype
    dtype = None
    for a in list(args[1:]) + list(kwargs.values()):
        if isinstance(a, torch.dtype):
            dtype = a
        elif isinstance(a, torch.Tensor):
            with torch._C.DisableTorchFunction():
                dtype = a.dtype
        elif name == "type" and isinstance(a, str):
            return "other"
    if name == "type" and len(args) == 1 and not kwargs:
        return "query"
    return dtype


def _exact(src, via):
    """True when dtype `via` holds every value of dtype `src` exactly."""
    return via == src or via == torch.float64 and src in FLOATS or \
        via == torch.float32 and src in (torch.float16, torch.bfloat16)


def conversion_ok(casts, final):
    """casts: the checkpoint dtype, then the dtype of each conversion on the way; final: the
    parameter's. True when the chain is one conversion the plan can do (equal dtypes, or floats
    among F32/F16/BF16/F64 with every step on the way exact or the last one the parameter's)."""
    src = casts[0]
    chain = casts[1:] + [final]
    if all(c == src for c in chain):
        return True
    if src not in FLOATS or any(c not in FLOATS for c in chain):
        return False
    for k, c in enumerate(chain[:-1]):
        if not _exact(src, c) and not all(x == c for x in chain[k:]):
            return False
    return True


_STRIDES = {}   # shape (a tuple) -> its contiguous strides
_WALKS = {}     # (sizes, strides, shape) -> _walk()
_NO_WALK = ()


def _walk(sizes, strides, shape):
    """[(tensor dim, size)] of a view (sizes, strides) that walks a box of a contiguous tensor of
    `shape` in row-major order, wherever it starts; _NO_WALK when it does not."""
    cs = _STRIDES.get(shape)
    if cs is None:
        cs = _STRIDES[shape] = geom.contiguous_strides(shape)
    steps = []
    last = -1
    for n, s in zip(sizes, strides):
        if n == 1:
            continue
        d = last + 1
        while d < len(shape) and (cs[d] != s or shape[d] == 1):
            d += 1
        if d >= len(shape):
            return _NO_WALK
        steps.append((d, n))
        last = d
    return steps


def simple_box(offset, sizes, strides, shape):
    """(start, count) when the view (offset, sizes, strides) of a contiguous tensor of `shape`
    is a box walked in row-major order (each view dimension of size > 1 on its own tensor
    dimension, in increasing order, step 1); else None. sizes, strides and shape are tuples (the
    walk is cached by them)."""
    key = (sizes, strides, shape)
    walk = _WALKS.get(key)
    if walk is None:
        walk = _WALKS[key] = _walk(sizes, strides, shape)
    if walk is _NO_WALK:
        return None
    start = geom.unravel(offset, shape)
    count = [1] * len(shape)
    for d, n in walk:
        if start[d] + n > shape[d]:
            return None
        count[d] = n
    return start, count
