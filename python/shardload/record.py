"""record.py -- a rank's plan recorded from the model's own weight loaders.

    recording = shardload.record.record(model, shardload.catalog.tensors(folder))
    recording.params      # recorded parameters: regions of checkpoint tensors (record_plan.py)
    recording.fallback    # checkpoint tensors handed to the model's load_weights as real tensors

model.load_weights runs once, as vLLM's default loader runs it, over stand-ins of the checkpoint's
tensors: meta tensors (shape and dtype, no storage, nothing read) of a torch.Tensor subclass whose
__torch_function__ follows each of them through the views a weight loader takes. Parameters are
watched the same way while the recording runs (their class is swapped for a subclass with the
same hook, and restored after), so that nothing is ever written to their memory: a write into a
parameter view is intercepted and becomes an event of that parameter.

What a stand-in goes through and stays exact:
  - any op whose result shares the stand-in's storage with its dtype (narrow, select, indexing
    with ints and slices, view/reshape of viewable data, chunk/split/unbind, transpose/permute/.t(),
    squeeze/unsqueeze, expand, movedim, diagonal, as_strided...): a view, whose geometry torch
    computes itself on the meta tensor;
  - copies that keep the values: contiguous, clone, reshape/flatten that copy, and .to/.float/...
    (a float dtype: a conversion; a device: nothing): a "layer" over the input's values;
  - param.copy_(x), param[i] = x, default_weight_loader (copy_), param.fill_ of a view: a
    region event (the source geometry resolved through the layers to the checkpoint tensor).
Anything else touching a stand-in (arithmetic, cat of different tensors, dtype reinterpretation,
data-dependent indexing, .item(), .tolist(), numpy, in-place ops on it, a copy into a tensor that
is not a parameter) marks its checkpoint tensor "fallback": the tensor is then loaded as a real
tensor and handed to load_weights, and every parameter it writes is filled that way only
(record_plan.py closes the set). Writes of values that do not come from the checkpoint (zeros,
a constant) are recorded and replayed before the load. When unsure, fall back: a recording never
produces a region that is not the loader's exact copy.

torch 1.13 and 2.x: only __torch_function__, Tensor.as_subclass and storage identity are used.
"""

import gc
import math
import time
import weakref

import torch

from . import record_geometry as geom
from .record_plan import Event, finish

_active = None       # the Recorder while load_weights runs
REGION_LIMIT = 4096  # regions one copy may give before its tensor falls back

_DTYPES = {"F64": "float64", "F32": "float32", "F16": "float16", "BF16": "bfloat16", "I64": "int64",
           "I32": "int32", "I16": "int16", "I8": "int8", "U8": "uint8", "BOOL": "bool",
           "U16": "uint16", "U32": "uint32", "U64": "uint64", "F8_E4M3": "float8_e4m3fn",
           "F8_E5M2": "float8_e5m2", "F8_E8M0": "float8_e8m0fnu", "C64": "complex64"}
_RAW = {8: torch.uint8, 16: torch.int16, 32: torch.int32, 64: torch.int64}
_BITS = {"F64": 64, "I64": 64, "U64": 64, "F32": 32, "I32": 32, "U32": 32, "F16": 16, "BF16": 16,
         "I16": 16, "U16": 16}
NAMES = {}   # torch dtype -> safetensors name
for _k, _v in _DTYPES.items():
    if hasattr(torch, _v):
        NAMES.setdefault(getattr(torch, _v), _k)
FLOATS = {torch.float32, torch.float16, torch.bfloat16, torch.float64}


class RecordError(Exception):
    """A weight loader did something the recording cannot stand for (it names the parameter and
    the checkpoint tensor): the load fails with this message on every rank."""


def torch_dtype(name):
    """The torch dtype a checkpoint tensor of safetensors dtype `name` is given to loaders as."""
    t = _DTYPES.get(name)
    if t is not None and hasattr(torch, t):
        return getattr(torch, t)
    return _RAW.get(_BITS.get(name, 8), torch.uint8)


# ------------------------------------------------------------------------------------------------
# The tracked tensor


REF, DERIVED, PVIEW = 1, 2, 3


class Tracked(torch.Tensor):
    """A checkpoint stand-in (REF: a view of its meta tensor, or of a layer over it), a value
    computed from stand-ins or parameters (DERIVED, with its origins), or a view of a parameter
    (PVIEW). Every op on one goes through the active Recorder."""

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        rec = _active
        if rec is None:
            with torch._C.DisableTorchFunction():
                return func(*args, **(kwargs or {}))
        return rec.dispatch(func, args, kwargs or {})

    def __repr__(self):
        return "<shardload stand-in %s %s>" % (getattr(self, "_sl_what", "?"), list(self.shape))


def _param_class(base, cache={}):
    """A subclass of a parameter's class with the recording hook (swapped in while recording)."""
    cls = cache.get(base)
    if cls is None:
        cls = type("Recording" + base.__name__, (base,),
                   {"__torch_function__": Tracked.__dict__["__torch_function__"]})
        cache[base] = cls
    return cls


def _storage_key(t):
    with torch._C.DisableTorchFunction():
        if hasattr(t, "untyped_storage"):
            return t.untyped_storage()._cdata
        return t.storage()._cdata


def _wrap(t, kind, what, origins=None):
    with torch._C.DisableTorchFunction():
        out = t.as_subclass(Tracked)
    out._sl_kind = kind
    out._sl_what = what
    if origins is not None:
        out._sl_origins = origins
    return out


def _fname(func):
    name = getattr(func, "__name__", "")
    if name in ("__get__", "__set__"):
        owner = getattr(getattr(func, "__self__", None), "__name__", "?")
        return owner + "." + name[2:-2]
    return name


def _flatten(x, out):
    if isinstance(x, (list, tuple)):
        for y in x:
            _flatten(y, out)
    elif isinstance(x, dict):
        for y in x.values():
            _flatten(y, out)
    elif isinstance(x, torch.Tensor):
        out.append(x)
    return out


def _tree_map(fn, x):
    if isinstance(x, list):
        return [_tree_map(fn, y) for y in x]
    if isinstance(x, tuple):
        return tuple(_tree_map(fn, y) for y in x)
    if isinstance(x, dict):
        return {k: _tree_map(fn, v) for k, v in x.items()}
    return fn(x)


# Ops a stand-in may take that copy its values into new storage, in its logical order.
_COPIES = {"contiguous", "clone", "reshape", "flatten", "ravel", "reshape_as", "view_as",
           "unflatten"}
# Conversions: the dtype (or nothing) changes.
_CONVERSIONS = {"to", "type", "type_as", "float", "double", "half", "bfloat16", "cpu", "cuda",
                "pin_memory", "int", "long", "short", "char", "byte", "bool"}
_CAST = {"float": torch.float32, "double": torch.float64, "half": torch.float16,
         "bfloat16": torch.bfloat16, "int": torch.int32, "long": torch.int64, "short": torch.int16,
         "char": torch.int8, "byte": torch.uint8, "bool": torch.bool}
# In-place ops that change only a tensor's geometry.
_INPLACE_VIEWS = {"t_", "transpose_", "squeeze_", "unsqueeze_", "as_strided_", "swapdims_",
                  "swapaxes_", "detach_", "requires_grad_", "share_memory_", "retain_grad"}
# Ops that read the values out of a tensor into Python.
_EXTRACT = {"item", "tolist", "numpy", "__array__", "__bool__", "__float__", "__int__", "__index__",
            "__complex__", "data_ptr", "__reduce_ex__", "__deepcopy__"}
_DEVICE_QUERIES = {"device.get", "is_cuda.get", "is_meta.get", "get_device"}
_TEXT = {"__repr__", "__str__", "__format__"}


def _inplace(name):
    return (name.endswith("_") and not name.startswith("__")) or name in (
        "__setitem__", "__iadd__", "__isub__", "__imul__", "__itruediv__", "__ifloordiv__",
        "__imod__", "__ipow__", "__iand__", "__ior__", "__ixor__", "__ilshift__", "__irshift__",
        "__imatmul__", "data.set")


# ------------------------------------------------------------------------------------------------
# The recorder


class _Root:
    __slots__ = ("name", "index", "shape", "dtype", "sdtype", "meta")


class _Layer:
    """Storage holding a copy of a view's values: element j of the storage (row-major over
    `sizes`) is the element at offset + sum(i_k * strides_k) of storage `parent`."""
    __slots__ = ("parent", "offset", "sizes", "strides", "dtype", "keep")


class _Param:
    __slots__ = ("index", "name", "param", "cls", "shape", "dtype", "numel", "base", "key",
                 "contiguous", "events")


class Recorder:
    def __init__(self, model, catalog, region_limit=REGION_LIMIT):
        self.model = model
        self.catalog = list(catalog)
        self.region_limit = region_limit
        self.roots = {}        # storage key -> _Root
        self.layers = {}       # storage key -> _Layer
        self.params = []       # _Param
        self.by_key = {}       # parameter storage key -> _Param
        self.by_id = {}        # id(parameter) -> _Param
        self.marked = {}       # checkpoint tensor -> why it falls back (the first reason)
        self.escaped = set()   # tensors whose data went into a tensor that is no parameter
        self.current = None    # the checkpoint tensor being handed to load_weights
        self.seq = 0
        self.alive = weakref.WeakSet()
        self.seconds = 0.0

    # setup -----------------------------------------------------------------------------------

    def _watch_params(self):
        names = {}
        for name, p in self.model.named_parameters():
            names.setdefault(id(p), (name, p))
        for i, (name, p) in enumerate(names.values()):
            info = _Param()
            info.index, info.name, info.param, info.cls = i, name, p, type(p)
            with torch._C.DisableTorchFunction():
                info.shape, info.dtype = tuple(p.shape), p.dtype
                info.numel, info.base = p.numel(), p.storage_offset()
                info.contiguous = p.is_contiguous()
            info.key = _storage_key(p)
            info.events = []
            self.params.append(info)
            self.by_key.setdefault(info.key, info)
            self.by_id[id(p)] = info
        for info in self.params:
            info.param.__class__ = _param_class(info.cls)

    def _unwatch_params(self):
        for info in self.params:
            info.param.__class__ = info.cls

    def weights(self):
        """(name, stand-in) of every checkpoint tensor, as vLLM's default loader yields them."""
        for index, t in enumerate(self.catalog):
            root = _Root()
            root.name, root.index, root.shape, root.sdtype = t.name, index, tuple(t.shape), t.dtype
            root.dtype = torch_dtype(t.dtype)
            root.meta = torch.empty(root.shape, dtype=root.dtype, device="meta")
            self.roots[_storage_key(root.meta)] = root
            self.current = t.name
            ref = _wrap(root.meta, REF, t.name)
            self.alive.add(ref)
            yield t.name, ref
        self.current = None

    def run(self):
        """Runs model.load_weights over the stand-ins; returns the Recording (record_plan.py)."""
        global _active
        if _active is not None:
            raise RecordError("a recording is already running in this process")
        t0 = time.perf_counter()
        self._watch_params()
        _active = self
        try:
            with torch.no_grad():
                self.model.load_weights(self.weights())
        finally:
            _active = None
            self._unwatch_params()
        gc.collect()
        for ref in list(self.alive):   # a stand-in the model kept: its tensor must be real
            for origin in self._origins(ref):
                if origin[0] == "t":
                    self.mark(origin[1], "the model keeps a reference to it after load_weights")
        self.alive = weakref.WeakSet()
        out = finish(self)
        self.seconds = time.perf_counter() - t0
        out.seconds = self.seconds
        return out

    # classification --------------------------------------------------------------------------

    def mark(self, tensor, why):
        self.marked.setdefault(tensor, why)

    def _pinfo(self, t):
        """The _Param of a parameter or of a view of one, else None."""
        info = self.by_id.get(id(t))
        if info is not None:
            return info
        if getattr(t, "_sl_kind", None) == PVIEW:
            return self.by_key.get(_storage_key(t))
        return None

    def _origins(self, t):
        """{("t", tensor name) | ("p", parameter index)} a tensor's values come from."""
        kind = getattr(t, "_sl_kind", None)
        if kind == REF:
            return {("t", n) for n in self._ref_tensors(_storage_key(t))}
        if kind == DERIVED:
            return t._sl_origins
        info = self._pinfo(t)
        return {("p", info.index)} if info is not None else set()

    def _ref_tensors(self, key):
        out = []
        while key in self.layers:
            key = self.layers[key].parent
        root = self.roots.get(key)
        if root is not None:
            out.append(root.name)
        return out

    def _classify(self, o, sources, name, tracked_in):
        """Wraps an output tensor of an op: a view of a stand-in, of a layer or of a parameter;
        a new layer (a value-keeping copy of one stand-in); DERIVED; or plain."""
        if not isinstance(o, torch.Tensor) or isinstance(o, Tracked) or id(o) in self.by_id:
            return o
        key = _storage_key(o)
        root = self.roots.get(key)
        layer = self.layers.get(key) if root is None else None
        if root is not None or layer is not None:
            dtype = root.dtype if root is not None else layer.dtype
            if o.dtype == dtype:
                out = _wrap(o, REF, root.name if root is not None else "layer")
                self.alive.add(out)
                return out
            return self._derived(o, {("t", n) for n in self._ref_tensors(key)})
        info = self.by_key.get(key)
        if info is not None:
            out = _wrap(o, PVIEW, info.name)
            out._sl_raw = o.dtype != info.dtype
            return out
        if not sources:
            return o
        if name in _COPIES and len(tracked_in) == 1 and \
                getattr(tracked_in[0], "_sl_kind", None) == REF:
            layer = self._layer(tracked_in[0], o)
            if layer is not None:
                out = _wrap(o, REF, "layer")
                self.alive.add(out)
                return out
        op = next((t._sl_what for t in tracked_in if getattr(t, "_sl_kind", None) == DERIVED), name)
        return self._derived(o, sources, op)

    def _derived(self, o, origins, op="derived"):
        out = _wrap(o, DERIVED, op, frozenset(origins))
        self.alive.add(out)
        return out

    def _layer(self, src, o, cast=False):
        """Registers o (new storage) as a copy of src's values; None when o is no such copy."""
        with torch._C.DisableTorchFunction():
            if o.numel() != src.numel() or (o.dtype != src.dtype and not cast):
                return None
            sizes, strides, offset = list(src.shape), list(src.stride()), src.storage_offset()
            osizes, ostrides = list(o.shape), list(o.stride())
            if o.storage_offset() != 0:
                return None
            if ostrides != geom.contiguous_strides(osizes) and o.numel() > 1:
                # A copy that keeps the input's memory order (clone of a permuted view): its
                # storage order is its dims sorted by stride; only for the input's own shape.
                if osizes != sizes:
                    return None
                perm = sorted(range(len(osizes)), key=lambda d: -ostrides[d])
                if geom.contiguous_strides([osizes[d] for d in perm]) != [ostrides[d] for d in perm]:
                    return None
                sizes, strides = [sizes[d] for d in perm], [strides[d] for d in perm]
        layer = _Layer()
        layer.parent, layer.offset = _storage_key(src), offset
        layer.sizes, layer.strides, layer.dtype, layer.keep = sizes, strides, o.dtype, o
        key = _storage_key(o)
        self.layers[key] = layer
        return layer

    # dispatch --------------------------------------------------------------------------------

    def dispatch(self, func, args, kwargs):
        name = _fname(func)
        if "out" in kwargs and kwargs["out"] is not None:
            return self._write(name, kwargs["out"], args, kwargs, out_kw=True)
        if _inplace(name) and name not in _INPLACE_VIEWS and args:
            return self._write(name, args[0], args, kwargs)
        first = args[0] if args else None
        kind = getattr(first, "_sl_kind", None)
        if kind in (REF, DERIVED) and self._meta(first):
            if name in _EXTRACT:
                return self._extract(name, first, args, kwargs)
            if name in _DEVICE_QUERIES:
                return {"device.get": torch.device("cpu"), "is_cuda.get": False,
                        "is_meta.get": False, "get_device": -1}[name]
            if name in _TEXT:
                return repr(first) if name != "__format__" else format(repr(first), *args[1:2])
            if name in _CONVERSIONS:
                return self._convert(name, first, args, kwargs)
        if name == "data.get" or name == "detach":
            info = self.by_id.get(id(first))
            if info is not None:   # param.data: a view of the whole parameter
                with torch._C.DisableTorchFunction():
                    return _wrap(first.detach(), PVIEW, info.name)
        return self._compute(func, name, args, kwargs)

    def _meta(self, t):
        with torch._C.DisableTorchFunction():
            return t.device.type == "meta"

    def _compute(self, func, name, args, kwargs):
        tensors = _flatten((args, kwargs), [])
        tracked = [t for t in tensors if isinstance(t, Tracked) or id(t) in self.by_id]
        to_meta = any(getattr(t, "_sl_kind", None) in (REF, DERIVED) and self._meta(t)
                      for t in tracked)
        sources = set()
        for t in tracked:
            sources |= self._origins(t)
        if to_meta:
            def meta(x):
                if isinstance(x, torch.Tensor):
                    with torch._C.DisableTorchFunction():
                        return x if x.device.type == "meta" else x.detach().to("meta")
                return x
            args, kwargs = _tree_map(meta, args), _tree_map(meta, kwargs)
        try:
            with torch._C.DisableTorchFunction():
                out = func(*args, **kwargs)
        except Exception as e:
            for origin in sources:
                if origin[0] == "t":
                    self.mark(origin[1], "%s failed on its stand-in: %s" % (name, e))
            raise
        if hasattr(out, "__next__"):   # an iterator (Tensor.__iter__)
            out = list(out)
        return _tree_map(lambda o: self._classify(o, sources, name, tracked), out)

    def _extract(self, name, first, args, kwargs):
        for origin in self._origins(first):
            if origin[0] == "t":
                self.mark(origin[1], "its values are read (%s)" % name)
        with torch._C.DisableTorchFunction():
            shape, dtype = tuple(first.shape), first.dtype
        zero = False if dtype == torch.bool else (0 if not dtype.is_floating_point else 0.0)
        if name in ("item", "__float__", "__int__", "__index__", "__complex__"):
            return {"__float__": 0.0, "__int__": 0, "__index__": 0, "__complex__": 0j}.get(name, zero)
        if name == "__bool__":
            return False
        if name == "data_ptr":
            return 0
        if name == "tolist":
            out = zero
            for n in reversed(shape):
                out = [out] * n
            return out
        if name in ("numpy", "__array__"):
            import numpy
            return numpy.zeros(shape)
        with torch._C.DisableTorchFunction():
            return self._derived(torch.empty(shape, dtype=dtype, device="meta"),
                                 self._origins(first))

    def _convert(self, name, first, args, kwargs):
        dtype = None
        if name in _CAST:
            dtype = _CAST[name]
        elif name == "type_as":
            dtype = args[1].dtype
        elif name in ("to", "type"):
            for a in list(args[1:]) + list(kwargs.values()):
                if isinstance(a, torch.dtype):
                    dtype = a
                elif isinstance(a, torch.Tensor):
                    with torch._C.DisableTorchFunction():
                        dtype = a.dtype
                elif name == "type" and isinstance(a, str):
                    return self._compute(torch.Tensor.type, name, args, kwargs)
            if name == "type" and len(args) == 1 and not kwargs:
                return "torch.FloatTensor"
        with torch._C.DisableTorchFunction():
            same = dtype is None or dtype == first.dtype
        if same:
            return first
        with torch._C.DisableTorchFunction():
            out = first.to(dtype)
        if first._sl_kind == REF and self._layer(first, out, cast=True) is not None:
            ref = _wrap(out, REF, "layer")
            self.alive.add(ref)
            return ref
        return self._derived(out, self._origins(first))

    # writes ----------------------------------------------------------------------------------

    def _write(self, name, target, args, kwargs, out_kw=False):
        info = self._pinfo(target)
        kind = getattr(target, "_sl_kind", None)
        if info is not None:
            self._param_write(info, name, target, args, kwargs, out_kw)
            return target
        values = [a for a in _flatten((args[1:] if not out_kw else args, kwargs), [])
                  if a is not target]
        origins = set()
        for v in values:
            origins |= self._origins(v)
        if kind in (REF, DERIVED):
            for origin in self._origins(target):
                if origin[0] == "t":
                    self.mark(origin[1], "an in-place op (%s) changes it" % name)
            return target
        for origin in origins:   # a stand-in's values copied into a tensor that is no parameter
            if origin[0] == "t":
                self.mark(origin[1], "%s copies it into a tensor that is no parameter" % name)
                self.escaped.add(origin[1])
        return target

    def _geometry(self, info, view):
        with torch._C.DisableTorchFunction():
            g = (view.storage_offset() - info.base, tuple(view.shape), tuple(view.stride()))
        if any(n == 0 for n in g[1]):
            return None   # writes nothing
        last = g[0] + sum((n - 1) * s for n, s in zip(g[1], g[2]) if n > 0)
        if g[0] < 0 or last >= info.numel or any(s < 0 for s in g[2]):
            raise RecordError(
                "recording: the weight loader of checkpoint tensor %s writes outside parameter %s "
                "(elements %d..%d of %d)" % (self.current, info.name, g[0], last, info.numel))
        return g

    def _param_write(self, info, name, target, args, kwargs, out_kw):
        self.seq += 1
        if info.param is not target and getattr(target, "_sl_raw", False):
            self._event(info, Event(self.seq, "unknown", None, origins=self._value_origins(args, kwargs)))
            return
        view = target if info.param is not target else info.param
        if name == "__setitem__":
            with torch._C.DisableTorchFunction():
                sub = view[args[1]]
            if _storage_key(sub) != info.key:
                self._event(info, Event(self.seq, "unknown", None,
                                        origins=self._value_origins(args[2:], {})))
                return
            view, value = sub, args[2]
        elif name == "copy_" and not out_kw:
            value = args[1]
        elif name == "fill_" and not out_kw:
            value = args[1]
        elif name == "zero_" and not out_kw:
            value = 0
        elif name == "data.set":
            self._event(info, Event(self.seq, "unknown", None, origins=self._value_origins(args[1:], {}),
                                    whole=True))
            return
        else:
            origins = self._value_origins(args[1:] if not out_kw else args, kwargs)
            self._event(info, Event(self.seq, "unknown", self._geometry(info, view), origins=origins))
            return
        g = self._geometry(info, view)
        if g is not None:
            self._value_write(info, g, value)

    def _value_origins(self, args, kwargs):
        origins = set()
        for v in _flatten((args, kwargs), []):
            origins |= self._origins(v)
        return origins

    def _value_write(self, info, g, value):
        kind = getattr(value, "_sl_kind", None)
        if kind == REF and info.contiguous:
            self._region(info, g, value)
        elif kind is not None or id(value) in self.by_id:
            op = getattr(value, "_sl_what", "a parameter's data") if kind == DERIVED else \
                ("a parameter's data" if kind != REF else "a copy it cannot express")
            self._event(info, Event(self.seq, "fallback", g, origins=self._origins(value),
                                    value=op))
        elif isinstance(value, torch.Tensor):
            if self.escaped:
                origins = {("t", t) for t in self.escaped}
                self._event(info, Event(self.seq, "fallback", g, origins=origins))
            elif value.device.type == "meta":
                self._event(info, Event(self.seq, "unknown", g, origins=set()))
            else:
                self._event(info, Event(self.seq, "const", g, value=value.detach().cpu().clone(),
                                        tensor=self.current))
        elif isinstance(value, (bool, int, float)) and not (isinstance(value, float) and
                                                            math.isnan(value)):
            self._event(info, Event(self.seq, "const", g, value=value, tensor=self.current))
        else:
            self._event(info, Event(self.seq, "unknown", g, origins=set()))

    def _event(self, info, e):
        if e.kind in ("fallback", "unknown"):
            e.tensor = self.current   # the tensor whose loader wrote it (rerun by the fallback)
        info.events.append(e)

    def _region(self, info, g, value):
        """A copy of stand-in `value` into view g of parameter info: a region event, or a
        fallback event when the copy cannot be a set of boxes."""
        with torch._C.DisableTorchFunction():
            offset, sizes, strides = value.storage_offset(), list(value.shape), list(value.stride())
            dtype = value.dtype
        key = _storage_key(value)
        # Broadcast the value to the destination's shape (copy_ does).
        dsizes = list(g[1])
        if len(sizes) > len(dsizes):
            extra = len(sizes) - len(dsizes)
            if any(n != 1 for n in sizes[:extra]):
                raise RecordError("recording: %s: a value of shape %s copied into a view of shape "
                                  "%s of parameter %s" % (self.current, sizes, dsizes, info.name))
            sizes, strides = sizes[extra:], strides[extra:]
        sizes = [1] * (len(dsizes) - len(sizes)) + sizes
        strides = [0] * (len(dsizes) - len(strides)) + strides
        for d in range(len(dsizes)):
            if sizes[d] != dsizes[d]:
                strides[d] = 0
        dims = [[dsizes[d], strides[d], g[2][d]] for d in range(len(dsizes))]
        casts = [dtype]
        names = self._ref_tensors(key)
        tensor = names[0] if names else None
        try:
            while key in self.layers:
                layer = self.layers[key]
                dims = geom.merge(dims)
                amap = geom.align(dims, 1, offset, layer.sizes)
                start = geom.unravel(offset, layer.sizes)
                offset = layer.offset + sum(start[d] * layer.strides[d] for d in range(len(start)))
                for k, (d, m) in enumerate(amap):
                    dims[k][1] = 0 if d is None else m * layer.strides[d]
                key = layer.parent
                casts.append(self.layers[key].dtype if key in self.layers else self.roots[key].dtype)
            root = self.roots[key]
            casts.reverse()   # root's dtype first, then each layer's, outermost last
            if not _conversion_ok(casts, info.dtype):
                raise geom.NotExpressible("dtype conversions %s into %s"
                                          % ([str(c) for c in casts], info.dtype))
            copy = geom.plan_copy(dims, offset, root.shape, g[0], info.shape)
        except geom.NotExpressible as e:
            if tensor is not None:
                self.mark(tensor, "a copy into %s cannot be expressed: %s" % (info.name, e))
            self._event(info, Event(self.seq, "fallback", g,
                                    origins={("t", n) for n in names}))
            return
        self._event(info, Event(self.seq, "region", g, tensor=root.name, copy=copy,
                                sdtype=root.sdtype))


def _exact(src, via):
    """True when dtype `via` holds every value of dtype `src` exactly."""
    return via == src or via == torch.float64 and src in FLOATS or \
        via == torch.float32 and src in (torch.float16, torch.bfloat16)


def _conversion_ok(casts, final):
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


def record(model, catalog, region_limit=REGION_LIMIT):
    """The Recording of model.load_weights over stand-ins of the catalog's tensors (catalog: a
    list of shardload.catalog.Tensor, or objects with name, dtype, shape)."""
    return Recorder(model, catalog, region_limit).run()
