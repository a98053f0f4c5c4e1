"""record_plan.py -- what a recording (shardload.record) adds up to: a rank's recorded plan.

The recorder leaves, per parameter, the events of the load in order:
  region    a copy of a box-expressible view of checkpoint tensor `tensor` (a record_geometry.Copy);
  fallback  a write of values computed from checkpoint tensors or parameters (origins);
  const     a write of values that do not come from the checkpoint (zeros, a constant tensor);
  unknown   any other write (an in-place op on the parameter, a rebinding of .data).
finish() turns them into a Recording:

1. Each parameter with region events gets its regions in one orientation (held, or with its last
   two dimensions transposed when its copies come from transposed views: the fewer regions wins).
   The regions must tile a box of the parameter exactly (no byte written twice, none left out
   inside the box); the box is the whole parameter, or a part of it (the real rows of a padded
   vocabulary: the rest is what the loader filled with constants). Constants written after a
   region over the same bytes, unknown writes, more than REGION_LIMIT regions: the parameter is
   filled by the fallback instead.
2. The fallback closes: a parameter written by a fallback tensor is filled only by the fallback
   (every tensor that writes it joins the fallback), until nothing changes. Fallback tensors are
   loaded as real tensors (one reader each, broadcast) and handed to load_weights.
3. Constants are replayed into the module before the load (a fallback parameter keeps only those
   written while a tensor that is not in the fallback was being loaded).
"""

from . import record_geometry as geom
from .record_ops import NAMES, element_bits


NO_ORIGINS = frozenset()   # the origins of an event that has none (shared: never changed)


class Event:
    __slots__ = ("seq", "kind", "g", "origins", "tensor", "copy", "sdtype", "value", "whole")

    def __init__(self, seq, kind, g, origins=None, tensor=None, copy=None, sdtype=None,
                 value=None, whole=False):
        self.seq, self.kind, self.g = seq, kind, g
        self.origins = origins if origins is not None else NO_ORIGINS
        self.tensor, self.copy, self.sdtype, self.value, self.whole = tensor, copy, sdtype, value, whole


class Region:
    """dst_start/dst_count address the parameter's box in the parameter's orientation (its last
    two dimensions swapped when RecordedParam.transposed), relative to the box's start."""
    __slots__ = ("tensor", "src_start", "src_count", "dst_start", "dst_count", "nbytes")

    def __init__(self, tensor, src_start, src_count, dst_start, dst_count, nbytes):
        self.tensor, self.src_start, self.src_count = tensor, src_start, src_count
        self.dst_start, self.dst_count, self.nbytes = dst_start, dst_count, nbytes

    def as_tuple(self):
        return (self.tensor, tuple(self.src_start), tuple(self.src_count), tuple(self.dst_start),
                tuple(self.dst_count))


class RecordedParam:
    """A parameter the plan fills from regions. shape: the module parameter's; box: None (the
    whole parameter) or (start, count) in the held orientation, the part the regions fill;
    plan_shape: the box's shape (the plan parameter's); zeros: [(start, count)] boxes (in the
    parameter's orientation) the loader fills with zeros beside the regions (zero_seqs: their
    events, not replayed); dtype: the parameter's (the plan converts the checkpoint's on the
    host), src_dtype: the checkpoint tensors' when they all have one."""
    __slots__ = ("name", "dtype", "torch_dtype", "shape", "transposed", "box", "regions", "zeros",
                 "zero_seqs", "nbytes", "src_dtype")

    def plan_shape(self):
        return tuple(self.box[1]) if self.box is not None else tuple(self.shape)

    def __repr__(self):
        return "RecordedParam(%s, %s, %s%s, %d regions%s)" % (
            self.name, self.dtype, list(self.shape), ", transposed" if self.transposed else "",
            len(self.regions), "" if self.box is None else ", box %s" % (self.box,))


class Recording:
    """params: [RecordedParam]; fallback: [checkpoint tensor names] (catalog order) with
    reasons[name]; fallback_params: names of the parameters the fallback fills; consts:
    [(parameter name, (offset, sizes, strides), value)] to replay before the load, in order;
    skipped: the checkpoint tensors this rank's load_weights does not use; catalog: {name:
    shardload.catalog.Tensor}; seconds: the recording's wall time."""

    def __init__(self):
        self.params, self.fallback, self.reasons = [], [], {}
        self.fallback_params, self.consts, self.skipped = [], [], []
        self.catalog, self.seconds = {}, 0.0

    def fills(self):
        """{parameter name: "recorded" | "fallback"}."""
        out = {p.name: "recorded" for p in self.params}
        out.update({n: "fallback" for n in self.fallback_params})
        return out

    def bytes(self):
        """{"recorded": checkpoint bytes the regions read, "fallback": bytes of the fallback
        tensors} of this rank."""
        return {"recorded": sum(r.nbytes for p in self.params for r in p.regions),
                "fallback": sum(self.catalog[t].nbytes for t in self.fallback)}

    def to_json(self, fallback_prefix="fallback:"):
        """The plan in the library's JSON form (docs/spec/DESIGN.md §12), as a dict: recorded
        parameters (regions and zeros), one fallback parameter per fallback tensor (named
        fallback_prefix + the tensor's name), the skipped tensors."""
        params = []
        for p in self.params:
            regions = [{"tensor": r.tensor, "start": list(r.src_start), "count": list(r.src_count),
                        "dst_start": list(r.dst_start), "dst_count": list(r.dst_count)}
                       for r in p.regions]
            regions += [{"zeros": True, "dst_start": list(a), "dst_count": list(b)}
                        for a, b in p.zeros]
            params.append({"name": p.name, "dtype": p.dtype, "shape": list(p.plan_shape()),
                           "transposed": bool(p.transposed), "fill": "recorded",
                           "regions": regions})
        for t in self.fallback:
            shape = list(self.catalog[t].shape)
            params.append({"name": fallback_prefix + t, "dtype": self.catalog[t].dtype,
                           "shape": shape, "fill": "fallback",
                           "regions": [{"tensor": t, "start": [0] * len(shape), "count": shape,
                                        "dst_start": [0] * len(shape), "dst_count": shape}]})
        return {"params": params, "skip": list(self.skipped)}

    def summary(self):
        b = self.bytes()
        return ("recorded %d parameters (%d regions, %d bytes), fallback %d tensors (%d bytes) "
                "filling %d parameters, %d tensors skipped, in %.2f s"
                % (len(self.params), sum(len(p.regions) for p in self.params), b["recorded"],
                   len(self.fallback), b["fallback"], len(self.fallback_params), len(self.skipped),
                   self.seconds))




def _oriented_shape(shape, transposed):
    shape = list(shape)
    if transposed and len(shape) >= 2:
        shape[-1], shape[-2] = shape[-2], shape[-1]
    return shape


def _regions_of(info, limit):
    """(RecordedParam, None) or (None, why) for a parameter's region events."""
    events = [e for e in info.events if e.kind == "region"]
    copies = [e.copy for e in events]
    if all(c.ready is not None for c in copies):   # boxes in the held orientation already
        count, transposed = len(copies), False
    else:
        choices = [False] + ([True] if len(info.shape) >= 2 else [])
        counts = []
        for t in choices:
            n = [c.count(t, limit) for c in copies]
            if None not in n:
                counts.append((sum(n), t))
        if not counts:
            return None, "a copy takes more than %d regions" % limit
        count, transposed = min(counts, key=lambda x: (x[0], x[1]))
    if count > limit:
        return None, "%d regions (limit %d)" % (count, limit)
    dtype = NAMES.get(info.dtype)
    if dtype is None:
        return None, "its dtype %s has no checkpoint name" % info.dtype
    regions, seqs = [], []
    numel = geom.numel
    try:
        for e in events:
            bits = element_bits(e.sdtype)
            tensor, seq = e.tensor, e.seq
            for src_start, src_count, dst_start, dst_count in e.copy.regions(transposed, limit):
                regions.append(Region(tensor, src_start, src_count, dst_start, dst_count,
                                      numel(src_count) * bits // 8))
                seqs.append(seq)
    except geom.NotExpressible as x:
        return None, str(x)
    oriented = _oriented_shape(info.shape, transposed)
    # Constant zeros beside the regions (vLLM's padded vocabulary rows): zero boxes of the plan
    # when regions and zeros together are the whole parameter.
    zeros, zero_seqs = [], set()
    for c in info.events:
        if c.kind == "const" and _is_zero(c.value):
            b = geom.side_box(c.g[0], [[n, st] for n, st in zip(c.g[1], c.g[2])], info.shape,
                              transposed)
            if b is not None and not any(_boxes_meet(b, (r.dst_start, r.dst_count)) for r in regions):
                zeros.append(b)
                zero_seqs.add(c.seq)
    whole = geom.boxes_tile([(r.dst_start, r.dst_count) for r in regions] + zeros) if zeros else None
    if whole is not None and whole[0] == [0] * len(oriented) and whole[1] == oriented:
        tiled = ([0] * len(oriented), oriented)
    else:
        zeros, zero_seqs = [], set()
        tiled = geom.boxes_tile([(r.dst_start, r.dst_count) for r in regions])
    if tiled is None:
        return None, "its regions overlap, or leave bytes out inside the part they fill"
    lo, hi = tiled
    # A constant written over a region's bytes after it would be lost: constants are replayed
    # before the load.
    held = None
    first = min(seqs)
    for c in info.events:
        if c.kind == "const" and c.seq > first and c.seq not in zero_seqs:
            if held is None:
                held = [(_oriented_shape(r.dst_start, transposed),
                         _oriented_shape(r.dst_count, transposed)) for r in regions]
            bb = geom.bounding_box(c.g[0], c.g[1], c.g[2], info.shape)
            if bb is not None and any(s < c.seq and _boxes_meet(bb, h) for s, h in zip(seqs, held)):
                return None, "a constant is written over its regions after them"
    count_box = [hi[d] - lo[d] for d in range(len(lo))]
    p = RecordedParam()
    p.name, p.dtype, p.torch_dtype, p.shape = info.name, dtype, info.dtype, tuple(info.shape)
    p.transposed, p.regions, p.zeros, p.zero_seqs = transposed, regions, zeros, zero_seqs
    sources = {e.sdtype for e in events}
    p.src_dtype = sources.pop() if len(sources) == 1 else None   # the checkpoint's, when one
    if lo != [0] * len(lo) or count_box != oriented:
        for r in regions:
            r.dst_start = [r.dst_start[d] - lo[d] for d in range(len(lo))]
        p.box = (_oriented_shape(lo, transposed), _oriented_shape(count_box, transposed))
    else:
        p.box = None
    p.nbytes = geom.numel(p.plan_shape()) * _itemsize(info.dtype)
    return p, None


def _is_zero(value):
    """A constant whose bytes are all zero (+0.0, 0, False, a tensor of them)."""
    import math
    import torch
    if isinstance(value, torch.Tensor):
        return value.numel() > 0 and not bool(value.detach().reshape(-1).view(torch.uint8).any())
    if isinstance(value, float):
        return value == 0 and math.copysign(1.0, value) > 0
    return isinstance(value, (int, bool)) and value == 0


def _itemsize(dtype):
    import torch
    return torch.empty((), dtype=dtype, device="meta").element_size()


def _boxes_meet(a, b):
    return all(a[0][d] < b[0][d] + b[1][d] and b[0][d] < a[0][d] + a[1][d]
               for d in range(len(a[0])))


def finish(rec):
    """The Recording of a Recorder whose load_weights has run."""
    out = Recording()
    out.catalog = {t.name: t for t in rec.catalog}
    fb_tensors = dict(rec.marked)
    for t in rec.escaped:
        fb_tensors.setdefault(t, "its values were copied into a tensor that is no parameter")
    recorded, why_param = {}, {}
    for info in rec.params:
        kinds = {e.kind for e in info.events}
        has_region = "region" in kinds
        if "fallback" in kinds:
            ops = sorted({str(e.value) for e in info.events if e.kind == "fallback"})
            why_param[info.index] = "it is written with the result of %s" % ", ".join(ops)
        elif "unknown" in kinds and (has_region or any(e.origins for e in info.events
                                                       if e.kind == "unknown")):
            why_param[info.index] = "an in-place op other than a copy writes it"
        elif has_region:
            p, why = _regions_of(info, rec.region_limit)
            if p is None:
                why_param[info.index] = why
            else:
                recorded[info.index] = p
    # Close the fallback: tensors of fallback parameters, parameters of fallback tensors.
    changed = True
    while changed:
        changed = False
        for info in rec.params:
            if info.index in why_param:
                for e in info.events:
                    names = [o[1] for o in e.origins if o[0] == "t"]
                    if e.kind == "region":
                        names.append(e.tensor)
                    elif e.kind in ("fallback", "unknown") and e.tensor is not None:
                        names.append(e.tensor)   # the tensor whose loader wrote it
                    for n in names:
                        if n not in fb_tensors:
                            fb_tensors[n] = "it writes %s (%s)" % (info.name, why_param[info.index])
                            changed = True
            elif any(e.kind == "region" and e.tensor in fb_tensors for e in info.events):
                culprit = next(e.tensor for e in info.events
                               if e.kind == "region" and e.tensor in fb_tensors)
                why_param[info.index] = "%s falls back (%s)" % (culprit, fb_tensors[culprit])
                recorded.pop(info.index, None)
                changed = True
    out.params = [recorded[i] for i in sorted(recorded)]
    out.fallback_params = [rec.params[i].name for i in sorted(why_param)]
    out.param_reasons = {rec.params[i].name: w for i, w in why_param.items()}
    order = {t.name: k for k, t in enumerate(rec.catalog)}
    out.fallback = sorted((t for t in fb_tensors if t in order), key=order.get)
    out.reasons = {t: fb_tensors[t] for t in out.fallback}
    used = set(out.fallback) | {r.tensor for p in out.params for r in p.regions}
    out.skipped = [t.name for t in rec.catalog if t.name not in used]
    consts = []
    for info in rec.params:
        zero = recorded[info.index].zero_seqs if info.index in recorded else ()
        for e in info.events:
            if e.kind == "const" and e.seq not in zero and \
                    (info.index not in why_param or e.tensor not in fb_tensors):
                consts.append((e.seq, info.name, e.g, e.value))
    out.consts = [c[1:] for c in sorted(consts, key=lambda c: c[0])]
    return out

