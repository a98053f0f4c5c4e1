"""refit_ref.py -- what the weight-sync tests share (tests/python/test_refit.py,
tests/workers/test_workers_refit.py; docs/spec/DESIGN.md §13): a trainer's "master weights" of a
version and the receivers' expected tensors, computed with numpy and torch alone.

Version v's master weights (F32) of a checkpoint tensor: its values as F32 (BF16 widened; NaN and
infinities made 0), times 0.5, plus v / 1000: finite everywhere, and not representable in BF16 in
general, so that the receivers' BF16 is torch's rounding of them (Tensor.to(torch.bfloat16)).
Versioned(ckpt, v) is a Checkpoint (common.py) whose tensors are those roundings in the
checkpoint's dtype, so that common.reference gives what each receiver must hold.
"""

import numpy as np
import torch

from common import fsdp_rows  # noqa: F401  (re-exported for the tests)


def _as_f32(dtype, arr):
    if dtype == "BF16":
        return (arr.astype(np.uint32) << 16).view(np.float32)
    return arr.astype(np.float32)


def master(ckpt, name, v):
    """Version v's F32 master weights of checkpoint tensor name (numpy)."""
    dtype, arr = ckpt.tensors[name]
    f = np.nan_to_num(_as_f32(dtype, arr), nan=0.0, posinf=0.0, neginf=0.0)
    return (f * np.float32(0.5) + np.float32(v / 1000.0)).astype(np.float32)


def to_checkpoint_dtype(ckpt, name, f32):
    """The F32 values in the checkpoint tensor's dtype, as torch rounds them (raw bits for BF16)."""
    dtype = ckpt.tensors[name][0]
    t = torch.from_numpy(np.ascontiguousarray(f32))
    if dtype == "BF16":
        return t.to(torch.bfloat16).view(torch.int16).numpy().view(np.uint16)
    if dtype == "F16":
        return t.to(torch.float16).numpy()
    return f32.astype(np.float32)


class Versioned:
    """A Checkpoint of version v's weights in the checkpoint's dtypes (for common.reference)."""

    def __init__(self, ckpt, v):
        self.config = ckpt.config
        self.tensors = {n: (d, None) for n, (d, _) in ckpt.tensors.items()}
        self._ckpt, self._v, self._cache = ckpt, v, {}

    def get(self, name):
        if name not in self._cache:
            self._cache[name] = to_checkpoint_dtype(self._ckpt, name, master(self._ckpt, name, self._v))
        return self._cache[name]


def blocks(ckpt, v, shard, shards, dtype="F32"):
    """{name: (torch tensor, offsets)}: this trainer's rows of every tensor (FSDP's Shard(0)),
    version v, as F32 master weights or already in the checkpoint's dtype (dtype="checkpoint")."""
    out = {}
    for name in ckpt.tensors:
        f = master(ckpt, name, v)
        lo, hi = fsdp_rows(f.shape[0] if f.ndim else 0, shard, shards)
        part = f[lo:hi] if f.ndim else f
        if dtype == "checkpoint":
            part = np.ascontiguousarray(to_checkpoint_dtype(ckpt, name, part))
            if ckpt.tensors[name][0] == "BF16":  # torch 1.13 has no uint16: through int16
                t = torch.from_numpy(part.view(np.int16)).view(torch.bfloat16)
            else:
                t = torch.from_numpy(part)
        else:
            t = torch.from_numpy(np.ascontiguousarray(part))
        out[name] = (t, [lo] + [0] * (f.ndim - 1) if f.ndim else [])
    return out
