"""record.py -- a rank's plan recorded from the model's own weight loaders.

    recording = shardload.record.record(model, shardload.catalog.tensors(folder))
    recording.params      # recorded parameters: regions of checkpoint tensors (record_plan.py)
    recording.fallback    # checkpoint tensors handed to the model's load_weights as real tensors

model.load_weights runs once, as vLLM's default loader runs it, over stand-ins of the checkpoint's
tensors: meta tensors (shape and dtype, no storage, nothing read) of a torch.Tensor subclass whose
__torch_function__ follows each of them through the views a weight loader takes (record_ops.py).
Parameters are watched the same way while the recording runs (their class is swapped for a
subclass with the same hook, and restored after), so that nothing is ever written to their
memory: a write into a parameter or a view of one is intercepted and becomes an event of that
parameter (record_plan.py).

What a stand-in goes through and stays exact:
  - any op whose result is a view of the stand-in's storage with its dtype (narrow, select,
    indexing with ints and slices, view/reshape of viewable data, chunk/split/unbind,
    transpose/permute/.t(), squeeze/unsqueeze, expand, movedim...): torch computes the view's
    geometry itself, on the meta tensor;
  - copies that keep the values: contiguous, clone, reshape/flatten that copy, .to/.float/...
    (a float dtype: a conversion; a device: nothing): a "layer" over the input's values;
  - param.copy_(x), param[i] = x, default_weight_loader (copy_), fill_ from a 0-dim stand-in:
    a region event, the source resolved through the layers to the checkpoint tensor.
Anything else on a stand-in (arithmetic, cat of different tensors, dtype reinterpretation,
data-dependent indexing, .item(), .tolist(), numpy, an in-place op on it, a copy into a tensor
that is not a parameter, a reference the model keeps after load_weights) makes its checkpoint
tensor fall back: it is then loaded as a real tensor and handed to load_weights, and every
parameter it writes is filled that way only (record_plan.py closes the set). Writes of values
that do not come from the checkpoint (zeros, a constant) are recorded and replayed before the
load. When unsure, fall back: a recording never produces a region that is not the loader's exact
copy. A loader that writes outside its parameter is a RecordError naming both.

torch 1.13 and 2.x: only __torch_function__, Tensor.as_subclass and Tensor._base are used.
"""

import gc
import math
import sys
import time
import weakref

import torch

from . import record_geometry as geom
from .record_ops import (CONVERT, COPIES, DATA, DERIVED, DEVICE, EXTRACT, NAMES,  # noqa: F401
                         OPS, PARAM, PVIEW, QUERY, REF, SCALAR_TYPES, TEXT, VIEW, WRITE, Tracked,
                         adopt, base_of, category, conversion_dtype, conversion_ok, flatten,
                         has_tensor, op_entry, op_name, param_class, shape_of, simple_box, storage_key,
                         torch_dtype, track_view, tree_map, wrap)
from .record_plan import NO_ORIGINS, Event, finish

REGION_LIMIT = 4096  # regions one parameter may take before it falls back
_DISABLED = torch._C.DisableTorchFunction
_SCALAR_TYPES = SCALAR_TYPES
_EMPTY = ()
_UNSEEN = object()
_EXTENTS = {}   # (sizes, strides) of a view -> (offset of its last element, a negative stride)


def _extent(sizes, strides):
    """(last - first element's offset, any negative stride) of a view; _EMPTY when empty."""
    last, negative = 0, False
    for n, s in zip(sizes, strides):
        if n == 0:
            return _EMPTY
        last += (n - 1) * s
        negative = negative or s < 0
    return last, negative


def _plain_args(args, kwargs):
    """True when no argument but the first is a tensor (a view's sizes, dims, indices)."""
    for a in args[1:]:
        if type(a) not in _SCALAR_TYPES:
            return not has_tensor(args[1:], kwargs)
    if kwargs:
        return kwargs.get("out") is None and not has_tensor((), kwargs)
    return True


class RecordError(Exception):
    """A weight loader did something a recording must refuse (it names the parameter and the
    checkpoint tensor): the load fails with this message on every rank."""


class _Root:
    """A checkpoint tensor's stand-in: `meta` is a weak reference to the base of every view of
    it (alive while the loader or the model holds a view: the stand-ins of the tensors already
    loaded are freed as the load goes)."""
    __slots__ = ("name", "index", "shape", "dtype", "sdtype", "meta")

    @property
    def root(self):   # a property, not a slot: no reference cycle per checkpoint tensor
        return self


class _Layer:
    """Storage `keep` holding a copy of a view's values: its element j (row-major over `sizes`)
    is the element at offset + sum(i_k * strides_k) of `parent`'s storage (a _Root or _Layer)."""
    __slots__ = ("parent", "offset", "sizes", "strides", "dtype", "keep", "root")


class _Param:
    __slots__ = ("index", "name", "param", "cls", "shape", "dtype", "numel", "base", "contiguous",
                 "events")


class Recorder:
    def __init__(self, model, catalog, region_limit=REGION_LIMIT):
        self.model = model
        self.catalog = list(catalog)
        self.region_limit = region_limit
        self.roots = []
        self.layers = []
        self.params = []       # _Param
        self.marked = {}       # checkpoint tensor -> why it falls back (the first reason)
        self.escaped = set()   # tensors whose values went into a tensor that is no parameter
        self.current = None    # the checkpoint tensor being handed to load_weights
        self.seq = 0
        self.seconds = 0.0
        self._source_boxes = {}   # (offset, sizes, strides, shape) of a stand-in view -> simple_box

    # setup -----------------------------------------------------------------------------------

    def _watch_params(self):
        seen = set()
        for name, p in self.model.named_parameters():
            if id(p) in seen:
                continue
            seen.add(id(p))
            info = _Param()
            info.index, info.name, info.param, info.cls = len(self.params), name, p, type(p)
            with torch._C.DisableTorchFunction():
                info.shape, info.dtype = tuple(p.shape), p.dtype
                info.numel, info.base = p.numel(), p.storage_offset()
                info.contiguous = p.is_contiguous()
            info.events = []
            self.params.append(info)
        for info in self.params:
            info.param.__class__ = param_class(info.cls)
            info.param._sl_info = info

    def _unwatch_params(self):
        for info in self.params:
            info.param.__class__ = info.cls
            info.param.__dict__.pop("_sl_info", None)

    def weights(self):
        """(name, stand-in) of every checkpoint tensor, as vLLM's default loader yields them."""
        protos = {}   # checkpoint dtype -> an empty meta tensor of its torch dtype
        for index, t in enumerate(self.catalog):
            root = _Root()
            root.name, root.index, root.shape, root.sdtype = t.name, index, tuple(t.shape), t.dtype
            proto = protos.get(t.dtype)
            if proto is None:
                proto = protos[t.dtype] = torch.empty(0, dtype=torch_dtype(t.dtype), device="meta")
            root.dtype = proto.dtype
            meta = proto.new_empty(root.shape)
            root.meta = weakref.ref(meta)
            self.roots.append(root)
            self.current = t.name
            yield t.name, wrap(meta, REF, meta, root, t.name)
            del meta
        self.current = None

    def run(self):
        """Runs model.load_weights over the stand-ins; returns the Recording (record_plan.py)."""
        if Tracked._hook is not None:
            raise RecordError("recording: a recording is already running in this process")
        t0 = time.perf_counter()
        collecting = gc.isenabled()
        gc.disable()   # a recording allocates many small objects and frees few: no cycle passes
        try:
            try:
                self._watch_params()
                Tracked._hook = self.dispatch
                with torch.no_grad():
                    self.model.load_weights(self.weights())
            finally:
                Tracked._hook = None
                self._unwatch_params()
            self._kept()
            out = finish(self)
        finally:
            if collecting:
                gc.enable()
        self.seconds = time.perf_counter() - t0
        out.seconds = self.seconds
        return out

    def _kept(self):
        """A stand-in the model still references after load_weights (its views hold their base
        alive) must be real: its tensor falls back."""
        def kept():
            return [r for r in self.roots if r.meta() is not None] + \
                [x.root for x in self.layers if sys.getrefcount(x.keep) > 2]
        if kept():
            gc.collect()
            for r in kept():
                self.mark(r.name, "the model keeps a reference to it after load_weights")
        self.layers = []

    # classification --------------------------------------------------------------------------

    def mark(self, tensor, why):
        self.marked.setdefault(tensor, why)

    def _origins(self, t):
        """{("t", tensor name) | ("p", parameter index)} a tensor's values come from."""
        kind = getattr(t, "_sl_kind", None)
        if kind == REF:
            return {("t", t._sl_info.root.name)}
        if kind == DERIVED:
            return t._sl_origins
        if kind in (PVIEW, PARAM):
            return {("p", t._sl_info.index)}
        return set()

    def _same(self, o, t, kind):
        """o (an op's result) as a view of tracked input t, or None when it is not one."""
        base = base_of(t)
        ob = o._base
        if ob is not None and ob is base:
            alias_base = base
        elif ob is None and storage_key(o) == storage_key(t):
            alias_base = o   # an alias without a view record (.data): its views root at it
        else:
            return None
        if kind == REF and o.dtype != t._sl_info.dtype:
            return None
        kind = PVIEW if kind == PARAM else kind
        out = wrap(o, kind, alias_base, t._sl_info, getattr(t, "_sl_what", None))
        if kind == PVIEW:
            out._sl_raw = o.dtype != t._sl_info.dtype
        return out

    def _classify(self, o, tracked, name):
        """Wraps an op's output: a view of a tracked input; a new layer (a value-keeping copy of
        one stand-in); DERIVED (computed from tracked inputs); or plain."""
        if not isinstance(o, torch.Tensor) or getattr(o, "_sl_kind", None) is not None:
            return o
        for t in tracked:
            kind = t._sl_kind
            if kind in (REF, PVIEW, PARAM):
                out = self._same(o, t, kind)
                if out is not None:
                    return out
        if name in COPIES and len(tracked) == 1 and tracked[0]._sl_kind == REF:
            out = self._layer(tracked[0], o)
            if out is not None:
                return out
        sources = set()
        for t in tracked:
            sources |= self._origins(t)
        op = next((t._sl_what for t in tracked if t._sl_kind == DERIVED), name)
        return wrap(o, DERIVED, None, None, op) if not sources else self._derived(o, sources, op)

    def _derived(self, o, origins, op):
        out = wrap(o, DERIVED, None, None, op)
        out._sl_origins = frozenset(origins)
        return out

    def _layer(self, src, o, cast=False):
        """o (new storage) as a copy of stand-in src's values: a REF over a new layer, or None."""
        with torch._C.DisableTorchFunction():
            if o.numel() != src.numel() or (o.dtype != src.dtype and not cast) or \
                    o.storage_offset() != 0:
                return None
            sizes, strides, offset = list(src.shape), list(src.stride()), src.storage_offset()
            osizes, ostrides = list(o.shape), list(o.stride())
        if ostrides != geom.contiguous_strides(osizes) and o.numel() > 1:
            # A copy that keeps the input's memory order (clone of a permuted view): its storage
            # holds its dims sorted by stride; only for the input's own shape.
            if osizes != sizes:
                return None
            perm = sorted(range(len(osizes)), key=lambda d: -ostrides[d])
            if geom.contiguous_strides([osizes[d] for d in perm]) != [ostrides[d] for d in perm]:
                return None
            sizes, strides = [sizes[d] for d in perm], [strides[d] for d in perm]
        layer = _Layer()
        layer.parent, layer.offset, layer.sizes, layer.strides = src._sl_info, offset, sizes, strides
        layer.dtype, layer.keep, layer.root = o.dtype, o, src._sl_info.root
        self.layers.append(layer)
        return wrap(o, REF, o, layer, "layer")

    # dispatch --------------------------------------------------------------------------------

    def copy(self, func, dst, src):
        """dst.copy_(src) of a tracked dst (record_ops.py calls it for the method)."""
        kind = dst._sl_kind
        if (kind == PVIEW or kind == PARAM) and getattr(src, "_sl_kind", None) == REF and \
                dst._sl_info.contiguous and not getattr(dst, "_sl_raw", False):
            # param.copy_(stand-in view), the write of nearly every region: what _write,
            # _param_write and _value_write do for it, inline
            info = dst._sl_info
            self.seq += 1
            g = self._geometry(info, dst)
            if g is not None:
                self._region(info, g, src)
            return dst
        return self._write("copy_", dst, (dst, src), {})

    def dispatch(self, func, args, kwargs):
        entry = OPS.get(func)
        name, cat = entry if entry is not None else op_entry(func)
        first = args[0] if args else None
        kind = getattr(first, "_sl_kind", None)
        if name == "copy_" and kind is not None and len(args) == 2 and not kwargs:
            return self.copy(func, first, args[1])
        if cat == VIEW and kind is not None and kind != DERIVED and _plain_args(args, kwargs):
            return track_view(self, func, args, kwargs)
        return self._rest(func, name, cat, args, kwargs, first, kind)

    def view_result(self, func, args, out):
        """The result of a view op on tracked args[0] (Tracked.__torch_function__ ran it) that is
        not one plain tensor viewing it: each tensor in it classified."""
        name = op_entry(func)[0]
        first = args[0]
        kind = first._sl_kind
        return tree_map(lambda o: self._view_result(o, first, kind, name), out)

    def _rest(self, func, name, cat, args, kwargs, first, kind):
        if cat == QUERY and not has_tensor(args[1:], kwargs):
            with _DISABLED():
                return func(*args, **kwargs)
        if kwargs.get("out") is not None:
            return self._write(name, kwargs["out"], args, kwargs, out_kw=True)
        if cat == WRITE and args:
            return self._write(name, args[0], args, kwargs)
        if cat == DATA and kind is not None:
            if kind != PARAM:
                return first   # .data / .detach(): the same values and geometry
            with _DISABLED():
                alias = first.detach()
            return wrap(alias, PVIEW, alias, first._sl_info, first._sl_info.name)
        if kind in (REF, DERIVED) and self._meta(first):
            if cat == EXTRACT:
                return self._extract(name, first)
            if cat == DEVICE:
                return {"device.get": torch.device("cpu"), "is_cuda.get": False,
                        "is_meta.get": False, "get_device": -1}[name]
            if cat == TEXT:
                return repr(first) if name != "__format__" else format(repr(first), *args[1:2])
            if cat == CONVERT:
                return self._convert(name, first, args, kwargs, func)
        return self._compute(func, name, args, kwargs)

    def _view_result(self, o, first, kind, name):
        if not isinstance(o, torch.Tensor):
            return o
        out = self._same(o, first, kind)
        return out if out is not None else self._classify(o, [first], name)

    def _meta(self, t):
        with torch._C.DisableTorchFunction():
            return t.device.type == "meta"

    def _compute(self, func, name, args, kwargs):
        tracked = [t for t in flatten((args, kwargs), []) if getattr(t, "_sl_kind", None)]
        if any(t._sl_kind in (REF, DERIVED) and self._meta(t) for t in tracked):
            def meta(x):
                if isinstance(x, torch.Tensor):
                    with torch._C.DisableTorchFunction():
                        return x if x.device.type == "meta" else x.detach().to("meta")
                return x
            args, kwargs = tree_map(meta, args), tree_map(meta, kwargs)
        try:
            with torch._C.DisableTorchFunction():
                out = func(*args, **kwargs)
        except Exception as e:
            for t in tracked:
                for origin in self._origins(t):
                    if origin[0] == "t":
                        self.mark(origin[1], "%s failed on its stand-in: %s" % (name, e))
            raise
        if hasattr(out, "__next__"):   # an iterator (Tensor.__iter__)
            out = list(out)
        return tree_map(lambda o: self._classify(o, tracked, name), out)

    def _extract(self, name, first):
        for origin in self._origins(first):
            if origin[0] == "t":
                self.mark(origin[1], "its values are read (%s)" % name)
        with torch._C.DisableTorchFunction():
            shape, dtype = tuple(first.shape), first.dtype
        zero = False if dtype == torch.bool else (0.0 if dtype.is_floating_point else 0)
        if name in ("item", "__float__", "__int__", "__index__", "__complex__"):
            return {"__float__": 0.0, "__int__": 0, "__index__": 0, "__complex__": 0j}.get(name, zero)
        if name in ("__bool__", "data_ptr"):
            return False if name == "__bool__" else 0
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
                                 self._origins(first), name)

    def _convert(self, name, first, args, kwargs, func):
        dtype = conversion_dtype(name, args, kwargs)
        if dtype == "query":
            return "torch.FloatTensor"
        if dtype == "other":
            return self._compute(func, name, args, kwargs)
        with torch._C.DisableTorchFunction():
            if dtype is None or dtype == first.dtype:
                return first
            out = first.to(dtype)
        if first._sl_kind == REF:
            ref = self._layer(first, out, cast=True)
            if ref is not None:
                return ref
        return self._derived(out, self._origins(first), name)

    # writes ----------------------------------------------------------------------------------

    def _write(self, name, target, args, kwargs, out_kw=False):
        kind = getattr(target, "_sl_kind", None)
        if kind in (PARAM, PVIEW):
            self._param_write(target._sl_info, name, target, args, kwargs, out_kw)
            return target
        if kind in (REF, DERIVED):
            for origin in self._origins(target):
                if origin[0] == "t":
                    self.mark(origin[1], "an in-place op (%s) changes it" % name)
        for v in flatten((args[1:] if not out_kw else args, kwargs), []):
            for origin in self._origins(v):   # a stand-in copied into a tensor that is no parameter
                if origin[0] == "t":
                    self.mark(origin[1], "%s copies it into a tensor that is no parameter" % name)
                    self.escaped.add(origin[1])
        return target

    def _geometry(self, info, view):
        with _DISABLED():
            g = (view.storage_offset() - info.base, tuple(shape_of(view)), view.stride())
        walk = _EXTENTS.get((g[1], g[2]))
        if walk is None:
            walk = _EXTENTS[(g[1], g[2])] = _extent(g[1], g[2])
        if walk is _EMPTY:
            return None   # writes nothing
        last = g[0] + walk[0]
        if g[0] < 0 or last >= info.numel or walk[1]:
            raise RecordError(
                "recording: the weight loader of checkpoint tensor %s writes outside parameter %s "
                "(elements %d..%d of %d)" % (self.current, info.name, g[0], last, info.numel))
        return g

    def _param_write(self, info, name, target, args, kwargs, out_kw):
        self.seq += 1
        if getattr(target, "_sl_raw", False):   # a view of the parameter in another dtype
            self._event(info, Event(self.seq, "unknown", None,
                                    origins=self._value_origins(args, kwargs)))
            return
        view, value = target, None
        if name == "__setitem__":
            try:
                with torch._C.DisableTorchFunction():
                    view = target[args[1]]
                same = view._base is base_of(target)
            except Exception:
                same = False
            if not same:
                self._event(info, Event(self.seq, "unknown", None,
                                        origins=self._value_origins(args[1:], {})))
                return
            value = args[2]
        elif name in ("copy_", "fill_") and not out_kw:
            value = args[1]
        elif name == "zero_" and not out_kw:
            value = 0
        else:   # any other in-place op, a rebinding of .data, an out= result
            origins = self._value_origins(args[1:] if not out_kw else args, kwargs)
            g = None if name == "data.set" else self._geometry(info, view)
            self._event(info, Event(self.seq, "unknown", g, origins=origins))
            return
        g = self._geometry(info, view)
        if g is not None:
            self._value_write(info, g, value)

    def _value_origins(self, args, kwargs):
        origins = set()
        for v in flatten((args, kwargs), []):
            origins |= self._origins(v)
        return origins

    def _value_write(self, info, g, value):
        kind = getattr(value, "_sl_kind", None)
        if kind == REF and info.contiguous:
            self._region(info, g, value)
        elif kind is not None:
            op = getattr(value, "_sl_what", None) if kind == DERIVED else None
            if kind in (PVIEW, PARAM):
                op = "a parameter's data"
            elif kind == REF:
                op = "a copy into a parameter that is not contiguous"
            self._event(info, Event(self.seq, "fallback", g, origins=self._origins(value),
                                    value=op))
        elif isinstance(value, torch.Tensor):
            if self.escaped:   # it may hold a stand-in's values copied on the way
                self._event(info, Event(self.seq, "fallback", g, value="a copy of a copy",
                                        origins={("t", t) for t in self.escaped}))
            elif value.device.type == "meta":
                self._event(info, Event(self.seq, "unknown", g))
            else:
                self._event(info, Event(self.seq, "const", g, value=value.detach().cpu().clone(),
                                        tensor=self.current))
        elif isinstance(value, (bool, int, float)) and not (isinstance(value, float) and
                                                            math.isnan(value)):
            self._event(info, Event(self.seq, "const", g, value=value, tensor=self.current))
        else:
            self._event(info, Event(self.seq, "unknown", g))

    def _event(self, info, e):
        if e.kind in ("fallback", "unknown"):
            e.tensor = self.current   # the tensor whose loader wrote it (rerun by the fallback)
        info.events.append(e)

    def _region(self, info, g, value):
        """A copy of stand-in `value` into view g of parameter info: a region event, or a
        fallback event when the copy cannot be a set of boxes."""
        with _DISABLED():
            offset, sizes, strides = value.storage_offset(), tuple(shape_of(value)), value.stride()
            dtype = value.dtype
        src = value._sl_info
        root = src.root
        if src is root and sizes == g[1] and dtype == root.dtype and \
                (dtype == info.dtype or conversion_ok([dtype], info.dtype)):
            # Both sides boxes walked in row-major order (the common case): one box pair.
            key = (offset, sizes, strides, root.shape)
            a = self._source_boxes.get(key, _UNSEEN)   # experts: one view, many tensors
            if a is _UNSEEN:
                a = self._source_boxes[key] = simple_box(offset, sizes, strides, root.shape)
            b = simple_box(g[0], g[1], g[2], info.shape) if a is not None else None
            if b is not None:
                copy = geom.Copy.boxes(offset, root.shape, g[0], info.shape, (sizes, strides, g[2]),
                                       [(list(a[0]), list(a[1]), b[0], b[1])])
                info.events.append(Event(self.seq, "region", g, NO_ORIGINS, root.name, copy,
                                         root.sdtype))
                return
        try:
            offset, dims, casts = self._resolve(src, offset, list(sizes), list(strides), dtype, g,
                                                info)
            if not conversion_ok(casts, info.dtype):
                raise geom.NotExpressible("the dtype conversions %s into %s"
                                          % ([str(c) for c in casts], info.dtype))
            copy = geom.plan_copy(dims, offset, root.shape, g[0], info.shape)
        except geom.NotExpressible as e:
            self.mark(root.name, "its copy into %s cannot be expressed: %s" % (info.name, e))
            self._event(info, Event(self.seq, "fallback", g, origins={("t", root.name)},
                                    value="a copy no set of boxes expresses"))
            return
        self._event(info, Event(self.seq, "region", g, tensor=root.name, copy=copy,
                                sdtype=root.sdtype))

    def _resolve(self, src, offset, sizes, strides, dtype, g, info):
        """(offset, iteration dims [[n, checkpoint stride, parameter stride]], dtypes on the way)
        of a copy of a stand-in view (broadcast to the destination's shape) through its layers."""
        dsizes = list(g[1])
        if len(sizes) > len(dsizes):
            extra = len(sizes) - len(dsizes)
            if any(n != 1 for n in sizes[:extra]):
                raise RecordError("recording: %s: a value of shape %s is copied into a view of "
                                  "shape %s of parameter %s" % (self.current, sizes, dsizes, info.name))
            sizes, strides = sizes[extra:], strides[extra:]
        sizes = [1] * (len(dsizes) - len(sizes)) + sizes
        strides = [0] * (len(dsizes) - len(strides)) + strides
        for d in range(len(dsizes)):
            if sizes[d] != dsizes[d]:
                strides[d] = 0
        dims = [[dsizes[d], strides[d], g[2][d]] for d in range(len(dsizes))]
        casts = [dtype]
        while isinstance(src, _Layer):
            dims = geom.merge(dims)
            amap = geom.align(dims, 1, offset, src.sizes)
            start = geom.unravel(offset, src.sizes)
            offset = src.offset + sum(start[d] * src.strides[d] for d in range(len(start)))
            for k, (d, m) in enumerate(amap):
                dims[k][1] = 0 if d is None else m * src.strides[d]
            src = src.parent
            casts.append(src.dtype)
        casts.reverse()   # the checkpoint's dtype first
        return offset, dims, casts


def record(model, catalog, region_limit=REGION_LIMIT):
    """The Recording of model.load_weights over stand-ins of the catalog's tensors (catalog: a
    list of shardload.catalog.Tensor, or objects with name, dtype, shape, nbytes)."""
    return Recorder(model, catalog, region_limit).run()
