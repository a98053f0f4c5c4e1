#!/usr/bin/env python3
"""test_cast.py -- run under mpirun at 1, 2 and 4 ranks (tp = world): parameters bound to host
tensors of another float dtype (Loader.bind -> sl_loader_bind_as, converted by the C library while
it writes) hold torch's own .to(dtype) of the independent reference (common.reference), byte for
byte; where torch gives a NaN, a NaN (its bit pattern is not compared: torch's own kernels differ).

  - llama (BF16, the value function's random bits: NaNs, infinities, subnormals, 250 vocabulary
    rows padded to 256) into float32, float16 and float64, with load strategy auto, with mmap
    (the other parameters mappings of the files; a converted one never is) and with read chunks and
    buckets of odd sizes (elements split between two reads or two buckets);
  - llama_f32 (numbers) into bfloat16, float16 and float64 (rounding), the o_proj/down_proj slices
    crossing the two-phase exchange at tp > 1;
  - a mixed binding: converted, plain and unbound parameters in one load (the unbound by DLPack);
  - the C table entry of a converted parameter (dtype, nbytes) and its DLPack export (the caller's
    memory in its dtype), the sharded save in the bound
    dtype, and the refusals: an int32 tensor, and sl_loader_bind_as with a wrong size or an
    unsupported pair (the messages name the parameter and both dtypes).
"""

import ctypes
import os
import shutil
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

common.need(["numpy", "torch", "mpi4py"])

import numpy as np  # noqa: E402
import torch  # noqa: E402
from mpi4py import MPI  # noqa: E402

import shardload  # noqa: E402
from shardload import _lib  # noqa: E402

comm = MPI.COMM_WORLD
rank, world = comm.Get_rank(), comm.Get_size()
failures = []
counts = {"params": 0, "bytes": 0, "nan": 0}
TORCH = {"F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16, "F64": torch.float64}
INT_VIEW = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


def check(cond, msg):
    if not cond:
        failures.append(msg)
        print("rank %d: FAIL: %s" % (rank, msg), flush=True)


def as_torch(arr, dtype_name):
    """A reference numpy array (BF16 as raw uint16) as a torch tensor of its checkpoint dtype."""
    if dtype_name == "BF16":
        return torch.from_numpy(np.array(arr, copy=True).view(np.int16)).view(torch.bfloat16)
    return torch.from_numpy(np.array(arr, copy=True))


def compare(tag, name, got, want):
    """got, want: torch tensors of one dtype. Bytes equal, except that a NaN of want needs a NaN."""
    check(got.dtype == want.dtype and tuple(got.shape) == tuple(want.shape),
          "%s: %s is %s %s, want %s %s" % (tag, name, got.dtype, tuple(got.shape), want.dtype,
                                          tuple(want.shape)))
    if got.dtype != want.dtype or tuple(got.shape) != tuple(want.shape):
        return
    iv = INT_VIEW[want.element_size()]
    gi, wi = got.contiguous().view(iv), want.contiguous().view(iv)
    nan = torch.isnan(want)
    same = (gi == wi) | (nan & torch.isnan(got))
    bad = int((~same).sum())
    if bad:
        k = int((~same).flatten().nonzero()[0])
        check(False, "%s: %s: %d of %d elements differ from torch's .to(%s), first at %d: %#x, "
              "want %#x" % (tag, name, bad, want.numel(), want.dtype, k, int(gi.flatten()[k]),
                            int(wi.flatten()[k])))
    counts["params"] += 1
    counts["bytes"] += want.numel() * want.element_size()
    counts["nan"] += int(nan.sum())


def load_cast(folder, dtype, tag, modes=None, **config):
    """Loads folder with every parameter bound (modes: name -> 'cast', 'plain' or 'unbound');
    returns (loader, bound tensors) after the load, the loader still open."""
    ckpt = common.Checkpoint(folder)
    ref = common.reference(ckpt, common.Layout(world, rank, world))
    loader = shardload.Loader(folder, comm, tp=world, **config)
    bound = {}
    for p in loader.plan():
        mode = (modes or {}).get(p.name, "cast")
        if p.alias_of is not None or mode == "unbound":
            continue
        t = torch.full(p.shape, 7.0, dtype=dtype if mode == "cast" else TORCH[p.dtype])
        check(loader.bind(p.name, t), "%s: bind(%s) refused" % (tag, p.name))
        bound[p.name] = t
    loader.load()
    planned = {p.name: p.dtype for p in loader.plan()}
    for name, t in bound.items():
        want = as_torch(ref[name], planned[name]).to(t.dtype)
        compare(tag, name, t, want)
    return loader, bound, ref, planned


def run(folder, dtype, tag, **config):
    loader, _, _, _ = load_cast(folder, dtype, tag, **config)
    loader.close()


llama = os.path.join(common.fixtures(), "llama")
llama_f32 = os.path.join(common.numeric_fixtures(), "llama_f32")

# BF16 random bits into the three other types, three ways of reading
for dt in (torch.float32, torch.float16, torch.float64):
    run(llama, dt, "llama->%s auto" % dt)
    run(llama, dt, "llama->%s mmap" % dt, load_strategy="mmap")
    run(llama, dt, "llama->%s odd chunks" % dt, read_chunk_bytes=4099, bucket_bytes=1001,
        load_strategy="mmap")
# F32 numbers rounded
for dt in (torch.bfloat16, torch.float16, torch.float64):
    run(llama_f32, dt, "llama_f32->%s" % dt)
    run(llama_f32, dt, "llama_f32->%s odd chunks" % dt, read_chunk_bytes=4097, bucket_bytes=999)

# mixed: converted, plain and unbound parameters in one load
with shardload.Loader(llama, comm, tp=world) as l0:
    names = [p.name for p in l0.plan() if p.alias_of is None]
modes = {n: ("cast", "plain", "unbound")[i % 3] for i, n in enumerate(names)}
loader, bound, ref, planned = load_cast(llama, torch.float32, "llama mixed", modes,
                                        load_strategy="mmap")
for name, t in loader.params().items():
    if modes.get(name) == "unbound":
        compare("llama mixed unbound", name, t, as_torch(ref[name], planned[name]))
# the C table entry describes the caller's memory
for p in loader.plan():
    c = loader._param(p.index)
    if modes.get(p.name) == "cast":
        check(_lib.text(c.dtype) == "F32" and c.dtype_bits == 32 and c.nbytes == 2 * p.nbytes and
              c.data == bound[p.name].data_ptr(),
              "table entry of converted %s: %s %d bits %d bytes" % (p.name, _lib.text(c.dtype),
                                                                    c.dtype_bits, c.nbytes))
        x = p.torch()  # DLPack: the caller's memory, in its dtype
        check(x.dtype == torch.float32 and tuple(x.shape) == tuple(p.shape) and
              x.data_ptr() == bound[p.name].data_ptr(),
              "DLPack of converted %s: %s" % (p.name, x.dtype))
        a = p.numpy()
        check(a.dtype == np.float32 and a.tobytes() == bound[p.name].numpy().tobytes(),
              "numpy of converted %s: %s" % (p.name, a.dtype))
    else:
        check(_lib.text(c.dtype) == p.dtype and c.nbytes == p.nbytes,
              "table entry of %s: %s %d bytes" % (p.name, _lib.text(c.dtype), c.nbytes))
loader.close()

# the sharded save holds a converted parameter in its bound dtype
tmp = comm.bcast(tempfile.mkdtemp(prefix="sl-cast-") if rank == 0 else None)
out = os.path.join(tmp, "saved")
loader, bound, _, _ = load_cast(llama, torch.float16, "llama save", save_sharded=out)
loader.close()
comm.Barrier()
saved = {}
for f in sorted(os.listdir(out)):
    if f.startswith("model-rank-%d-" % rank) and f.endswith(".safetensors"):
        ckpt = common.Checkpoint.__new__(common.Checkpoint)
        ckpt.tensors = {}
        ckpt._read(os.path.join(out, f))
        saved.update(ckpt.tensors)
for name, t in bound.items():
    dt, arr = saved.get(name, (None, None))
    check(dt == "F16", "save: %s saved as %s, want F16" % (name, dt))
    if dt == "F16":
        check(arr.tobytes() == t.numpy().tobytes(),
              "save: %s differs from the loaded tensor" % name)

# refusals
with shardload.Loader(llama, comm, tp=world) as l:
    p = [q for q in l.plan() if q.alias_of is None][0]
    check(not l.bind(p.name, torch.zeros(p.shape, dtype=torch.int32)), "int32 accepted")
    try:
        l.load()
        check(False, "an int32 tensor for a BF16 parameter loaded")
    except shardload.InvalidArgumentError as e:
        check("BF16" in str(e) and "int32" in str(e), "int32 refusal: %s" % e)
with shardload.Loader(llama, comm, tp=world) as l:
    p = [q for q in l.plan() if q.alias_of is None][0]
    buf = torch.zeros(p.shape, dtype=torch.float32)
    h, lib, ptr = l._h, _lib.lib, ctypes.c_void_p(buf.data_ptr())
    F32, I32 = 17, 15  # sl_dtype
    st = lib.sl_loader_bind_as(h, p.name.encode(), ptr, p.nbytes, F32)
    msg = l._message()
    check(st == shardload.InvalidArgumentError.status and p.name in msg and "BF16" in msg and
          "F32" in msg and str(2 * p.nbytes) in msg, "wrong size: %d %s" % (st, msg))
    st = lib.sl_loader_bind_as(h, p.name.encode(), ptr, 2 * p.nbytes, I32)
    msg = l._message()
    check(st == shardload.UnsupportedError.status and "BF16" in msg and "I32" in msg,
          "BF16 -> I32: %d %s" % (st, msg))
    st = lib.sl_loader_bind_as(h, p.name.encode(), ptr, 2 * p.nbytes, F32)
    check(st == 0, "F32 after the refusals: %d %s" % (st, l._message()))

comm.Barrier()
if rank == 0:
    shutil.rmtree(tmp, ignore_errors=True)
total = comm.allreduce(counts["params"])
nbytes = comm.allreduce(counts["bytes"])
nans = comm.allreduce(counts["nan"])
bad = comm.allreduce(len(failures))
if rank == 0:
    print("test_cast: %d ranks, %d parameter checks, %d bytes compared (%d NaNs), %d failures"
          % (world, total, nbytes, nans, bad))
sys.exit(1 if bad else 0)
