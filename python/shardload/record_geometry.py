"""record_geometry.py -- strided copies as boxes: the arithmetic of the recorder (shardload.record).

A copy the recorder sees is a set of iteration dimensions, each with a size and a stride on each
side (element strides in the storage of a checkpoint tensor and of a parameter, both contiguous
row-major), plus a starting offset on each side. A plan region is a pair of boxes (start and
count per dimension of the checkpoint tensor, and of the parameter) whose elements pair up in
row-major order of each box. This module turns the first into the second:

  merge      adjacent iteration dimensions that are one run on every side;
  order      the iteration dimensions as the source walks its tensor (outer first);
  align      one side over its tensor's shape: every iteration dimension then walks exactly one
             dimension of the tensor with a fixed step (a dimension that runs over the end of a
             row is split into rows and columns when the pattern repeats exactly);
  regions    the fewest outer dimensions are enumerated (one region per index) such that the
             rest walks a box in row-major order on each side -- the two boxes need not have
             the same shape (a reshape of contiguous data is one region); a step, a repeat, or
             an order the destination cannot follow ends up enumerated.

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


def _perm(shape, transposed):
    """The dims of a shape seen in an orientation (the last two swapped when transposed)."""
    order = list(range(len(shape)))
    if transposed and len(shape) >= 2:
        order[-1], order[-2] = order[-2], order[-1]
    return order


def side_box(offset, dims, shape, transposed=False):
    """(start, count) of the box that walking dims [[n, stride]] (outer to inner) from element
    `offset` of a contiguous tensor of `shape` visits in row-major order -- of the tensor seen
    in an orientation (its last two dimensions swapped when transposed) --; None when the walk
    is no such box."""
    dims = merge([list(d) for d in dims])
    try:
        amap = align(dims, 1, offset, shape)
    except NotExpressible:
        return None
    order = _perm(shape, transposed)
    where = {d: k for k, d in enumerate(order)}   # tensor dim -> oriented dim
    oshape = [shape[d] for d in order]
    start = unravel(offset, shape)
    ostart = [start[d] for d in order]
    count = [1] * len(shape)
    last = -1
    for (d, m), dim in zip(amap, dims):
        if d is None or m != 1:
            return None
        k = where[d]
        if k <= last:
            return None
        count[k] = dim[0]
        last = k
    if any(ostart[k] + count[k] > oshape[k] for k in range(len(shape))):
        return None
    return ostart, count


class Copy:
    """One strided copy from src_offset in a checkpoint tensor of src_shape to dst_offset in a
    parameter of dst_shape (elements): iteration dims [[n, src stride, dst stride]] ordered as
    the source walks its tensor. regions(transposed) cuts it into box pairs: the fewest outer
    dimensions enumerated (one region per index) such that the rest is a box on both sides."""

    __slots__ = ("src_offset", "src_shape", "dst_offset", "dst_shape", "dims", "ready", "_cut")

    def __init__(self, src_offset, src_shape, dst_offset, dst_shape, dims):
        self.src_offset, self.src_shape = src_offset, list(src_shape)
        self.dst_offset, self.dst_shape = dst_offset, list(dst_shape)
        self.dims = dims    # or, until needed, the raw iteration dims [[n, src stride, dst stride]]
        self.ready = None   # the held orientation's regions, when the caller knows them
        self._cut = None

    @classmethod
    def boxes(cls, src_offset, src_shape, dst_offset, dst_shape, raw, ready):
        """A copy whose regions in the held orientation are known (one box pair, `ready`); its
        iteration dims, raw = (sizes, src strides, dst strides), are ordered only if asked for."""
        copy = cls.__new__(cls)
        copy.src_offset, copy.src_shape, copy.dst_offset, copy.dst_shape = \
            src_offset, src_shape, dst_offset, dst_shape
        copy.dims, copy.ready, copy._cut = None, ready, raw
        return copy

    def _regions(self, transposed, limit):
        if self.ready is not None and not transposed:
            return self.ready
        if self.dims is None:   # a ready copy asked for the other orientation
            self.dims = _order([[n, ss, ds] for n, ss, ds in zip(*self._cut)])
            self._cut = None
        if self._cut is None:
            self._cut = {}
        if transposed in self._cut:
            return self._cut[transposed]
        out = None
        for j in range(len(self.dims) + 1):
            enum, rest = self.dims[:j], self.dims[j:]
            total = numel([d[0] for d in enum])
            if total > limit:
                break
            src_rest = [[d[0], d[1]] for d in rest]
            dst_rest = [[d[0], d[2]] for d in rest]
            found = []
            index = [0] * len(enum)
            for _ in range(total):
                so = self.src_offset + sum(i * d[1] for i, d in zip(index, enum))
                do = self.dst_offset + sum(i * d[2] for i, d in zip(index, enum))
                a = side_box(so, src_rest, self.src_shape)
                b = side_box(do, dst_rest, self.dst_shape, transposed) if a is not None else None
                if b is None:
                    found = None
                    break
                found.append((a[0], a[1], b[0], b[1]))
                for k in range(len(enum) - 1, -1, -1):
                    index[k] += 1
                    if index[k] < enum[k][0]:
                        break
                    index[k] = 0
            if found is not None:
                out = found
                break
        self._cut[transposed] = out
        return out

    def count(self, transposed, limit):
        """How many regions the copy takes in an orientation (None: more than limit)."""
        r = self._regions(transposed, limit)
        return None if r is None else len(r)

    def regions(self, transposed, limit):
        """[(src_start, src_count, dst_start, dst_count)] (destination in the oriented shape);
        raises NotExpressible beyond `limit` regions."""
        r = self._regions(transposed, limit)
        if r is None:
            raise NotExpressible("more than %d regions" % limit)
        return r


def plan_copy(dims, src_offset, src_shape, dst_offset, dst_shape):
    """A Copy from iteration dims [[n, src stride, dst stride]] (the destination's logical
    order). The dims are reordered as the source walks its tensor (outer first; repeats, stride
    0, first: they are enumerated anyway): both sides then pair in that order."""
    return Copy(src_offset, src_shape, dst_offset, dst_shape, _order(dims))


def _order(dims):
    return merge(sorted(merge(dims), key=lambda d: (d[1] != 0, -d[1])))


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
