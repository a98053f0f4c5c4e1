"""plan_compare.py -- two plans of one rank compared as the byte-level copies they make.

Each planned parameter becomes an element map: for every element of the module's parameter (row-
major, held orientation), which element of which checkpoint tensor lands there (a number: the
tensor's position in the catalog times 2**40 plus the element's row-major index), -1 where none
does (vocabulary padding). Maps are computed from what each plan says, independently:
  - loader_maps(loader.plan(), catalog): the library's own description of a plan
    (Parameter.slices: byte rows from a tensor's offset, with strides, into the parameter's
    memory; a dst_transposed source counts its destination in the other orientation);
  - recording_maps(recording, catalog): a shardload.record Recording's regions (box pairs in
    row-major order, a transposed parameter addressed with its last two dimensions swapped, a
    part of the parameter when its box is not all of it).
compare(a, b) lists the parameters whose maps differ, and those only one side has. numpy only.
"""

import numpy as np

BITS = {"F64": 64, "I64": 64, "U64": 64, "F32": 32, "I32": 32, "U32": 32, "F16": 16, "BF16": 16,
        "I16": 16, "U16": 16}


def _bits(dtype):
    return BITS.get(dtype, 8)


def _ids(catalog):
    return {t.name: k for k, t in enumerate(catalog)}


def _numel(shape):
    n = 1
    for s in shape:
        n *= s
    return n


def _swap(shape):
    shape = list(shape)
    if len(shape) >= 2:
        shape[-1], shape[-2] = shape[-2], shape[-1]
    return shape


def loader_maps(plan, catalog, shapes=None):
    """{name: element map} of loader.plan() (list of shardload.Parameter). shapes: {name: the
    module parameter's shape} for parameters planned as a part of it (not needed for a spec)."""
    ids = _ids(catalog)
    out = {}
    for p in plan:
        if p.alias_of is not None:
            continue
        shape = list(p.shape)
        flat = np.full(_numel(shape), -1, dtype=np.int64)
        transposed = any(s.get("dst_transposed") for s in p.slices)
        oriented = _swap(shape) if transposed else shape
        view = flat.reshape(oriented) if transposed else flat
        dst_bits = None
        for s in p.slices:
            eb = _bits(s["tensor_dtype"]) // 8 or 1
            dst_bits = dst_bits or eb
            base = ids[s["tensor"]] << 40
            row = s["row_bytes"] // eb
            target = view.reshape(-1) if transposed else view
            for r in range(s["rows"]):
                src = (s["src_offset"] + r * s["src_stride"]) // eb
                dst = (s["dst_offset"] + r * s["dst_stride"]) * 8 // (_bits(p.dtype) or 8)
                target[dst:dst + row] = base + np.arange(src, src + row, dtype=np.int64)
        if transposed:
            flat = np.ascontiguousarray(view.reshape(oriented).swapaxes(-1, -2)).reshape(-1)
        out[p.name] = flat
    return out


def recording_maps(recording, catalog):
    """{name: element map} of a Recording (the module parameter's whole shape)."""
    ids = _ids(catalog)
    out = {}
    for p in recording.params:
        full = np.full(tuple(p.shape), -1, dtype=np.int64)
        target = full
        if p.box is not None:
            target = target[tuple(slice(s, s + c) for s, c in zip(*p.box))]
        if p.transposed:
            target = target.swapaxes(-1, -2)
        for r in p.regions:
            shape = catalog[ids[r.tensor]].shape
            index = np.arange(_numel(shape), dtype=np.int64).reshape(shape)
            src = index[tuple(slice(s, s + c) for s, c in zip(r.src_start, r.src_count))]
            dst = target[tuple(slice(s, s + c) for s, c in zip(r.dst_start, r.dst_count))]
            dst[...] = ((ids[r.tensor] << 40) + src).reshape(dst.shape)
        out[p.name] = full.reshape(-1)
    return out


def compare(a, b, ignore=()):
    """Messages for the parameters whose maps differ between a and b (names in ignore skipped)."""
    out = []
    for name in sorted(set(a) | set(b)):
        if name in ignore:
            continue
        if name not in a or name not in b:
            out.append("%s: only in the %s plan" % (name, "first" if name in a else "second"))
        elif a[name].shape != b[name].shape:
            out.append("%s: %d elements against %d" % (name, a[name].size, b[name].size))
        elif not np.array_equal(a[name], b[name]):
            k = int(np.flatnonzero(a[name] != b[name])[0])
            out.append("%s: element %d comes from %s against %s"
                       % (name, k, _where(a[name][k]), _where(b[name][k])))
    return out


def _where(v):
    v = int(v)
    return "nothing" if v < 0 else "tensor #%d element %d" % (v >> 40, v & ((1 << 40) - 1))
