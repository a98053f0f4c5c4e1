#!/usr/bin/env python3
"""test_load.py -- run under mpirun at 1..4 ranks: every byte of every parameter on every rank,
(a) handed out by DLPack (torch.from_dlpack and numpy.from_dlpack of the loader's memory, checked
again after the loader is closed) and (b) written into caller-bound torch tensors by load_into,
equals the independent reference (common.reference). Fixtures: llama (BF16, 3 shards), the F32
numeric llama_f32 and mixtral_f32, mixtral with and without expert parallelism; tp = the largest
of 4, 2, 1 dividing the world (the rest dp). Plan metadata (names, shapes, slices) is checked too.
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

common.need(["numpy", "torch", "mpi4py"])

import numpy as np  # noqa: E402
import torch  # noqa: E402
from mpi4py import MPI  # noqa: E402

import shardload  # noqa: E402
import shardload.torch  # noqa: E402

comm = MPI.COMM_WORLD
rank, world = comm.Get_rank(), comm.Get_size()
failures = []
checked = {"params": 0, "bytes": 0}


def check(cond, msg):
    if not cond:
        failures.append(msg)
        print("rank %d: FAIL: %s" % (rank, msg), flush=True)


def compare(tag, name, got, want):
    check(common.raw(got) == common.raw(want), "%s: %s differs from the reference" % (tag, name))
    checked["params"] += 1
    checked["bytes"] += len(common.raw(want))


def torch_dtype(dt):
    return {"F32": torch.float32, "BF16": torch.bfloat16, "F16": torch.float16}[dt]


def run(folder, tp, ep):
    ckpt = common.Checkpoint(folder)
    lay = common.Layout(world, rank, tp, ep)
    ref = common.reference(ckpt, lay)
    tag = "%s tp=%d dp=%d%s" % (os.path.basename(folder), tp, world // tp, " ep" if ep else "")
    # (a) loader memory, by DLPack
    loader = shardload.Loader(folder, comm, tp=tp, dp=world // tp, enable_expert_parallel=ep)
    plan = loader.plan()
    names = {p.name for p in plan}
    check(names == set(ref), "%s: planned names differ: %s" % (tag, sorted(names ^ set(ref))))
    for p in plan:
        if p.name in ref:
            check(tuple(p.shape) == ref[p.name].shape, "%s: %s shape %s != %s" %
                  (tag, p.name, p.shape, ref[p.name].shape))
        if p.alias_of is None:
            check(len(p.slices) > 0, "%s: %s has no sources" % (tag, p.name))
            for s in p.slices:
                check(s["tensor"] in ckpt.tensors, "%s: %s source %s" % (tag, p.name, s["tensor"]))
    loader.load()
    tensors = loader.params()          # torch, by DLPack
    host = {p.name: np.from_dlpack(p) for p in plan if p.dtype in ("F32",)}  # numpy, by DLPack
    report = loader.report()
    loader.close()                     # handed-out memory must survive this
    for name, t in tensors.items():
        check(isinstance(t, torch.Tensor) and t.device.type == "cpu", "%s: %s type" % (tag, name))
        compare(tag + " dlpack/torch", name, t, ref[name])
    for name, a in host.items():
        compare(tag + " dlpack/numpy", name, a, ref[name])
    if rank == 0:
        check(report.get("tp") == tp, "%s: report tp" % tag)
    del tensors, host
    # (b) caller-bound tensors through load_into
    with shardload.Loader(folder, comm, tp=tp, dp=world // tp, enable_expert_parallel=ep) as l2:
        module = common.module_from_plan(l2.plan(), torch_dtype)
    for p in module.parameters():
        p.data.fill_(7)  # the load must overwrite every byte (padding rows included)
    missing, unexpected = shardload.torch.load_into(module, folder, comm, tp=tp, dp=world // tp,
                                                    enable_expert_parallel=ep)
    check(missing == [] and unexpected == [], "%s: load_into lists %s %s" % (tag, missing, unexpected))
    for name, t in module.state_dict().items():
        compare(tag + " load_into", name, t, ref[name])


tp = 4 if world % 4 == 0 else 2 if world % 2 == 0 else 1
numeric = common.numeric_fixtures()
run(os.path.join(common.fixtures(), "llama"), tp, False)
run(os.path.join(numeric, "llama_f32"), tp, False)
run(os.path.join(numeric, "mixtral_f32"), tp, True)
if world != 3:  # without EP the experts' 32 rows are split over dp*tp ranks
    run(os.path.join(numeric, "mixtral_f32"), tp, False)

total = comm.allreduce(checked["params"])
nbytes = comm.allreduce(checked["bytes"])
bad = comm.allreduce(len(failures))
if rank == 0:
    print("test_load: %d ranks, %d parameter checks, %d bytes compared, %d failures"
          % (world, total, nbytes, bad))
sys.exit(1 if bad else 0)
