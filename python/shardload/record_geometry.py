"""record_geometry.py -- strided copies as boxes: the arithmetic of the recorder (shardload.record).

A copy the recorder sees is a set of iteration dimensions, each with a size and a stride on each
side (element strides in the storage of a checkpoint tensor and of a parameter, both contiguous
row-major), plus a starting offset on each side. A plan region is a pair of boxes (start and
count per dimension of the checkpoint tensor, and of the parameter) whose elements pair up in
row-major order of each box. This module turns the first into the second:

  merge      adjacent iteration dimensions that are one run on every side;
  align      a side over its tensor's shape: every iteration dimension then walks exactly one
             dimension of the tensor with a fixed step (a dimension that runs over the end of a
             row is split into rows and columns when the pattern repeats exactly, else the copy
             is not expressible);
  regions    the dimensions walked with step 1 on both sides become box dimensions, ordered as
             the checkpoint tensor's; every other dimension (a step, a repeat, two dimensions on
             one tensor dimension, an order the destination cannot follow) is enumerated: one
             region per index.

A destination may be addressed in the "transposed" orientation of its parameter (the last two
dimensions swapped, as the plan's transposed parameters are): a copy from a transposed checkpoint
view (Llama-4's experts) is then one box instead of one region per row.

Pure Python, no torch: shardload.record calls it with numbers read from torch tensors.
"""


class NotExpressible(Exception):
    """A strided view that no set of boxes of bounded size expresses."""


def contiguous_strides(shape):
    out = [1] * len(shape)
    for d in range(len(shape) - 2, -1, -1):
        out[d] = out[d + 1] * shape[d + 1]
    return out


def numel(shape):
    n = 1
    for s in shape:
        n *= s
    return n


def unravel(offset, shape):
    """Row-major multi-index of a flat element offset in a tensor of `shape`."""
    out = [0] * len(shape)
    for d in range(len(shape) - 1, -1, -1):
        if shape[d]:
            offset, out[d] = divmod(offset, shape[d])
    return out


def merge(dims):
    """dims: [[n, stride_side0, stride_side1, ...]] outer to inner. Drops size-1 dimensions and
    merges a dimension into the next when it is the same run on every side."""
    out = []
    for d in dims:
        if d[0] == 1:
            continue
        if out:
            prev = out[-1]
            if all(prev[k] == d[0] * d[k] for k in range(1, len(d))):
                prev[0] *= d[0]
                for k in range(1, len(d)):
                    prev[k] = d[k]
                continue
        out.append(list(d))
    return out


def _split(dims, i, inner):
    """Splits dims[i] (size n) into (n / inner, stride * inner) and (inner, stride), on every side."""
    d = dims[i]
    outer = [d[0] // inner] + [s * inner for s in d[1:]]
    dims[i:i + 1] = [outer, [inner] + list(d[1:])]


def align(dims, side, offset, shape):
    """Aligns side `side` (1-based stride index) of dims over a contiguous tensor of `shape`
    starting at element `offset`, splitting dimensions (on every side) where a run crosses the
    end of a tensor dimension. Returns [(tensor dim, step)] per dimension of the (modified) dims;
    tensor dim None for a stride of 0 (a repeat). Raises NotExpressible."""
    strides = contiguous_strides(shape)
    start = unravel(offset, shape)
    out = []
    i = 0
    while i < len(dims):
        n, s = dims[i][0], dims[i][side]
        if s == 0:
            out.append((None, 0))
            i += 1
            continue
        if s < 0:
            raise NotExpressible("negative stride")
        d = next((k for k in range(len(shape)) if shape[k] > 1 and s % strides[k] == 0), None)
        if d is None:
            raise NotExpressible("stride %d is no multiple of a dimension's stride" % s)
        m = s // strides[d]
        if start[d] + (n - 1) * m < shape[d]:
            out.append((d, m))
            i += 1
            continue
        # The run wraps past the end of dimension d: rows of f steps, when the pattern repeats.
        if shape[d] % m or start[d] >= m:
            raise NotExpressible("a run crosses dimension %d irregularly" % d)
        f = shape[d] // m
        if f <= 1 or n % f:
            raise NotExpressible("a run crosses dimension %d irregularly" % d)
        _split(dims, i, f)   # the outer part is aligned on the next pass, the inner fits
    return out


def align_all(dims, src, dst):
    """Aligns the source (side 1) and the destination (side 2) until neither splits further.
    src, dst: (offset, shape). Returns (source map, destination map)."""
    for _ in range(64):
        count = len(dims)
        smap = align(dims, 1, src[0], src[1])
        dmap = align(dims, 2, dst[0], dst[1])
        if len(dims) == count:
            smap = align(dims, 1, src[0], src[1])
            if len(dims) == count:
                return smap, dmap
    raise NotExpressible("the views do not settle")


class Copy:
    """One aligned strided copy: box dimensions (n, src dim, dst dim) and enumerated dimensions
    (n, src stride, dst stride), from src_offset in a tensor of src_shape to dst_offset in a
    parameter of dst_shape (elements)."""

    __slots__ = ("src_offset", "src_shape", "dst_offset", "dst_shape", "box", "enum")

    def __init__(self, src_offset, src_shape, dst_offset, dst_shape, box, enum):
        self.src_offset, self.src_shape = src_offset, src_shape
        self.dst_offset, self.dst_shape = dst_offset, dst_shape
        self.box, self.enum = box, enum

    def elements(self):
        n = 1
        for b in self.box:
            n *= b[0]
        for e in self.enum:
            n *= e[0]
        return n


def plan_copy(dims, src_offset, src_shape, dst_offset, dst_shape):
    """A Copy from iteration dims [[n, src stride, dst stride]]. Raises NotExpressible."""
    dims = merge(dims)
    smap, dmap = align_all(dims, (src_offset, src_shape), (dst_offset, dst_shape))
    box, enum = [], []
    seen_src, seen_dst = set(), set()
    # Larger dimensions first get the box roles; a second one on the same tensor dimension (a
    # view that revisits elements) is enumerated.
    order = sorted(range(len(dims)), key=lambda i: -dims[i][0])
    roles = {}
    for i in order:
        (ds, ms), (dd, md) = smap[i], dmap[i]
        if ms == 1 and md == 1 and ds not in seen_src and dd not in seen_dst:
            seen_src.add(ds)
            seen_dst.add(dd)
            roles[i] = (dims[i][0], ds, dd)
    for i, d in enumerate(dims):
        if i in roles:
            box.append(roles[i])
        else:
            enum.append((d[0], d[1], d[2]))
    box.sort(key=lambda b: b[1])
    return Copy(src_offset, list(src_shape), dst_offset, list(dst_shape), box, enum)


def _oriented(dim, ndim, transposed):
    if transposed and ndim >= 2 and dim is not None and dim >= ndim - 2:
        return 2 * ndim - 3 - dim   # ndim-2 <-> ndim-1
    return dim


def _ordered(box, ndim, transposed):
    """Splits box dims (sorted by source dim) into those kept (destination dims increasing in the
    orientation) and those that must be enumerated."""
    keep, moved = list(box), []
    while True:
        dd = [_oriented(b[2], ndim, transposed) for b in keep]
        bad = [k for k in range(1, len(dd)) if dd[k] <= dd[k - 1]]
        if not bad:
            return keep, moved
        # Enumerate the smaller of the first inverted pair.
        k = bad[0]
        victim = k if keep[k][0] <= keep[k - 1][0] else k - 1
        moved.append(keep.pop(victim))


def region_count(copy, transposed):
    """How many regions copy gives in an orientation."""
    ndim = len(copy.dst_shape)
    _, moved = _ordered(copy.box, ndim, transposed)
    n = 1
    for e in copy.enum:
        n *= e[0]
    for b in moved:
        n *= b[0]
    return n


def regions(copy, transposed, limit):
    """[(src_start, src_count, dst_start, dst_count)] of copy in an orientation (destination
    boxes in the oriented parameter shape). Raises NotExpressible beyond `limit` regions."""
    ndim = len(copy.dst_shape)
    keep, moved = _ordered(copy.box, ndim, transposed)
    src_strides = contiguous_strides(copy.src_shape)
    dst_strides = contiguous_strides(copy.dst_shape)
    enum = [(e[0], e[1], e[2]) for e in copy.enum] + \
        [(b[0], src_strides[b[1]], dst_strides[b[2]]) for b in moved]
    total = 1
    for e in enum:
        total *= e[0]
    if total > limit:
        raise NotExpressible("%d regions (limit %d)" % (total, limit))
    src_count = [1] * len(copy.src_shape)
    dst_count = [1] * ndim
    for n, ds, dd in keep:
        src_count[ds] = n
        dst_count[_oriented(dd, ndim, transposed)] = n
    if transposed and ndim >= 2:
        dst_count_shape = list(copy.dst_shape[:-2]) + [copy.dst_shape[-1], copy.dst_shape[-2]]
    else:
        dst_count_shape = list(copy.dst_shape)
    out = []
    index = [0] * len(enum)
    for _ in range(total):
        so, do = copy.src_offset, copy.dst_offset
        for k, (n, s, t) in enumerate(enum):
            so += index[k] * s
            do += index[k] * t
        src_start = unravel(so, copy.src_shape)
        dst_start = unravel(do, copy.dst_shape)
        if transposed and ndim >= 2:
            dst_start[-1], dst_start[-2] = dst_start[-2], dst_start[-1]
        for d in range(ndim):
            if dst_start[d] + dst_count[d] > dst_count_shape[d]:
                raise NotExpressible("a destination box leaves the parameter")
        out.append((src_start, list(src_count), dst_start, list(dst_count)))
        for k in range(len(enum) - 1, -1, -1):
            index[k] += 1
            if index[k] < enum[k][0]:
                break
            index[k] = 0
    return out


def boxes_tile(boxes):
    """(lo, hi) of the covering box when the boxes [(start, count)] tile it exactly (no overlap,
    no gap), else None."""
    if not boxes:
        return None
    ndim = len(boxes[0][0])
    lo = [min(b[0][d] for b in boxes) for d in range(ndim)]
    hi = [max(b[0][d] + b[1][d] for b in boxes) for d in range(ndim)]
    total = sum(numel(b[1]) for b in boxes)
    if total != numel([hi[d] - lo[d] for d in range(ndim)]):
        return None
    return (lo, hi) if not boxes_overlap(boxes) else None


def boxes_overlap(boxes):
    """True when two of the boxes [(start, count)] share an element (a sweep over dimension 0)."""
    if not boxes or not boxes[0][0]:
        return len(boxes) > 1
    items = sorted(((b[0][0], b[0][0] + b[1][0], b) for b in boxes), key=lambda x: x[0])
    active = []
    for lo, hi, b in items:
        active = [a for a in active if a[1] > lo]
        for _, _, other in active:
            if all(b[0][d] < other[0][d] + other[1][d] and other[0][d] < b[0][d] + b[1][d]
                   for d in range(1, len(b[0]))):
                return True
        active.append((lo, hi, b))
    return False


def bounding_box(offset, sizes, strides, shape):
    """(start, count) of the smallest box of a tensor of `shape` holding every element of the
    view (offset, sizes, strides); None for an empty view."""
    if any(n == 0 for n in sizes):
        return None
    last = offset + sum((n - 1) * s for n, s in zip(sizes, strides))
    lo, hi = unravel(offset, shape), unravel(last, shape)
    # A view can reach lower indices in inner dimensions than its first element: widen those.
    box_lo, box_hi = list(lo), list(hi)
    for d in range(len(shape)):
        if any(box_lo[k] != box_hi[k] for k in range(d)):
            box_lo[d], box_hi[d] = 0, shape[d] - 1
        else:
            box_lo[d], box_hi[d] = min(lo[d], hi[d]), max(lo[d], hi[d])
    return box_lo, [box_hi[d] - box_lo[d] + 1 for d in range(len(shape))]
