"""reload_check.py -- the Python side of reload in place (Loader.reload, docs/spec/DESIGN.md §10),
shared by tests/python/test_reload.py (mpirun) and tests/workers/test_workers_reload.py (a gloo
process group): the same checks over either transport.

make_variants(src, dst): the second checkpoints, written once (rank 0, or the workers' parent):
  inverted   every weight byte XORed with 0xFF (the same shapes, other values)
  dtype      model.norm.weight stored as F16 instead of BF16 (same bytes)
check(loader, ...): on every rank, with a loader of `src` planned and not yet loaded:
  - model.norm.weight bound to a caller tensor, then load; params() by DLPack (torch) and numpy;
  - reload(inverted): every tensor handed out before (the same objects), the bound one and a
    fresh params() equal the reference computed from the inverted files by tests/python/common.py
    (its own safetensors reader), at the same data pointers; reload_state() all "new";
  - reload(dtype), reload(qwen2) (another name set) and reload(a folder that does not exist):
    every rank raises the same class (ShapeError naming the parameter, NotFoundError), the tensors
    keep the inverted values, reload_state() all "old";
  - reload(src) and reload() (the loader's current model): the original reference again; after
    close() the tensors handed out keep the last values.
"""

import json
import os
import shutil
import struct

import common


def _rewrite(src, dst, edit):
    """Copies safetensors file src to dst with edit(name, info, data) -> (info, data) per tensor."""
    raw = open(src, "rb").read()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n])
    base = 8 + n
    out_header, blobs, off = {}, [], 0
    for name, info in header.items():
        if name == "__metadata__":
            out_header[name] = info
            continue
        a, b = info["data_offsets"]
        info, data = edit(name, dict(info), raw[base + a:base + b])
        info["data_offsets"] = [off, off + len(data)]
        off += len(data)
        out_header[name] = info
        blobs.append(data)
    text = json.dumps(out_header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    with open(dst, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))


def _inverted(name, info, data):
    return info, bytes(b ^ 0xFF for b in data)


def _dtype(name, info, data):
    if name == "model.norm.weight":
        info["dtype"] = "F16"
    return info, data


def make_variants(src, dst):
    """dst/inverted and dst/dtype from model folder src."""
    out = {}
    for tag, edit in (("inverted", _inverted), ("dtype", _dtype)):
        folder = os.path.join(dst, tag)
        os.makedirs(folder)
        for f in sorted(os.listdir(src)):
            if f.endswith(".safetensors"):
                _rewrite(os.path.join(src, f), os.path.join(folder, f), edit)
            else:
                shutil.copy(os.path.join(src, f), os.path.join(folder, f))
        out[tag] = folder
    return out


def _same(check, tag, tensors, ref):
    for name, t in tensors.items():
        check(common.raw(t) == common.raw(ref[name]), "%s: %s differs from the reference" % (tag, name))


def _refused(check, shardload, loader, model, cls, text, tensors, ref):
    try:
        loader.reload(model)
        check(False, "reload(%s) was not refused" % model)
    except shardload.Error as e:
        check(isinstance(e, cls), "reload(%s): %s, expected %s: %s" % (model, type(e).__name__,
                                                                        cls.__name__, e))
        check(text is None or text in str(e), "reload(%s): %r does not name %r" % (model, str(e), text))
    _same(check, "refused %s" % os.path.basename(model), tensors, ref)
    states = loader.reload_state()
    check(set(states.values()) == {"old"}, "refused %s: states %s" % (model, set(states.values())))


def check(loader, src, variants, qwen2, lay, check):
    """The checks of the module docstring (every rank, collective calls in the same order)."""
    import torch

    import shardload
    ref_a = common.reference(common.Checkpoint(src), lay)
    ref_b = common.reference(common.Checkpoint(variants["inverted"]), lay)
    plan = {p.name: p for p in loader.plan()}
    bound = None
    if "model.norm.weight" in plan:
        bound = torch.full(plan["model.norm.weight"].shape, 7, dtype=torch.bfloat16)
        check(loader.bind("model.norm.weight", bound), "bind model.norm.weight")
    loader.load()
    tensors = loader.params()
    host = {n: p.numpy() for n, p in plan.items() if not p.bound}
    ptrs = {n: t.data_ptr() for n, t in tensors.items()}
    _same(check, "load", tensors, ref_a)
    check(set(loader.reload_state().values()) <= {"old"}, "states before any reload")

    loader.reload(variants["inverted"])
    _same(check, "reload: tensors from before", tensors, ref_b)
    _same(check, "reload: numpy from before", host, ref_b)
    if bound is not None:
        check(common.raw(bound) == common.raw(ref_b["model.norm.weight"]), "reload: the bound tensor")
    again = loader.params()
    check(all(again[n].data_ptr() == ptrs[n] for n in ptrs), "reload: a tensor moved")
    _same(check, "reload: params() after", again, ref_b)
    check(set(loader.reload_state().values()) == {"new"}, "states after the reload")

    _refused(check, shardload, loader, variants["dtype"], shardload.ShapeError, "model.norm.weight",
             tensors, ref_b)
    _refused(check, shardload, loader, qwen2, shardload.ShapeError, "parameter", tensors, ref_b)
    _refused(check, shardload, loader, os.path.join(variants["inverted"], "absent"),
             shardload.NotFoundError, "no such folder", tensors, ref_b)

    loader.reload(src)
    _same(check, "reload back", tensors, ref_a)
    loader.reload()
    _same(check, "reload of the current model", tensors, ref_a)
    loader.close()
    _same(check, "after close", tensors, ref_a)
