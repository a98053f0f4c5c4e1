#!/usr/bin/env python3
"""test_refit.py -- run under mpirun at 4 ranks: weight sync from Python over MPI (shardload.publish,
Loader.refit; docs/spec/DESIGN.md §13). Ranks 0-1 are trainers holding FSDP's row blocks of every
tensor's F32 master weights (tests/python/refit_ref.py), ranks 2-3 receivers loaded from storage.

  llama, receivers at tp 2: version 1 published as F32 (the library rounds into BF16), version 2
  already in BF16, version 1 again, then a repeat (nothing moves): every receiver tensor equals
  common.reference over the version's weights as torch rounds them; a tensor taken from params()
  before the first refit sees the new values (same memory); model.norm.weight bound as an F32
  tensor on receiver 0 holds the BF16 values widened; Loader.version(), reload_state(), the
  reports (the plan made once, then reused; bytes moved, then none) on every rank.
  mixtral, receivers at tp 1 dp 2 with expert parallelism: one version, publishers given the
  full shape; shardload.dryrun_refit of the same layouts predicts the bytes the refit moved.
  A module (shardload.torch.load_into(..., refit=True), refit_into): versions 4 and 5 land in its
  bound tensors and in a non-contiguous one load_into copies (copied again after each refit);
  refit_close ends it.
  A refusal: a trainer publishing a tensor the checkpoint lacks fails every rank naming it, and
  the receivers keep serving.
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

common.need(["numpy", "torch", "mpi4py"])

import numpy as np  # noqa: E402
import torch  # noqa: E402
from mpi4py import MPI  # noqa: E402

import refit_ref  # noqa: E402
import shardload  # noqa: E402

comm = MPI.COMM_WORLD
rank, world = comm.Get_rank(), comm.Get_size()
TRAINERS = 2
failures = []


def check(cond, msg):
    if not cond:
        failures.append(msg)


def receiver_check(tag, ckpt, loader, v, lay, bound):
    want = common.reference(refit_ref.Versioned(ckpt, v), lay)
    got = loader.params()
    check(set(got) == set(want), "%s: names differ: %s" % (tag, sorted(set(got) ^ set(want))))
    for name, t in got.items():
        if name not in want:
            continue
        if name in bound:  # an F32 tensor bound to a BF16 parameter: the BF16 values widened
            w = torch.from_numpy(want[name].view(np.int16)).view(torch.bfloat16).float()
            check(torch.equal(t, w), "%s: the bound F32 %s differs" % (tag, name))
        else:
            check(common.raw(t) == common.raw(want[name]), "%s: %s differs from version %d" % (tag, name, v))
    check(loader.version() == (v, None), "%s: version() = %s" % (tag, loader.version()))
    check(set(loader.reload_state().values()) == {"new"}, "%s: states %s" % (tag, set(loader.reload_state().values())))


def llama():
    folder = os.path.join(common.fixtures(), "llama")
    ckpt = common.Checkpoint(folder)
    trainer = rank < TRAINERS
    side = comm.Split(0 if trainer else 1, rank)
    loader, early, bound = None, None, {}
    if not trainer:
        loader = shardload.Loader(folder, side, tp=2, quiet=True, timeout_s=60)
        plan = {p.name: p for p in loader.plan()}
        if side.Get_rank() == 0:
            bound["model.norm.weight"] = torch.zeros(plan["model.norm.weight"].shape, dtype=torch.float32)
            loader.bind("model.norm.weight", bound["model.norm.weight"])
        loader.load()
        early = loader.params()["model.layers.0.mlp.down_proj.weight"]
    lay = common.Layout(2, side.Get_rank(), 2)
    steps = [(1, "F32", True), (2, "checkpoint", False), (1, "F32", False), (1, "F32", False)]
    for i, (v, dtype, planned) in enumerate(steps):
        tag = "llama step %d (version %d, %s)" % (i, v, dtype)
        if trainer:
            report = shardload.publish(refit_ref.blocks(ckpt, v, rank, TRAINERS, dtype), version=v, comm=comm,
                                       timeout_s=60)
        else:
            report = loader.refit(comm=comm, version=v)
            receiver_check(tag, ckpt, loader, v, lay, bound)
            now = loader.params()["model.layers.0.mlp.down_proj.weight"]
            check(common.raw(early) == common.raw(now), "%s: an earlier params() tensor does not see the refit" % tag)
        check(report["version"] == v and report["planned"] == (i == 0), "%s: report %s" % (tag, report))
        moved = report["bytes_transferred"]
        check((moved == 0) == (i == 3), "%s: %d bytes moved" % (tag, moved))
        same = comm.allgather(moved)
        check(len(set(same)) == 1, "%s: the ranks' reports differ: %s" % (tag, same))
    if loader is not None:
        loader.close()
    side.Free()


def mixtral():
    folder = os.path.join(common.fixtures(), "mixtral")
    ckpt = common.Checkpoint(folder)
    trainer = rank < TRAINERS
    side = comm.Split(0 if trainer else 1, rank)
    if trainer:
        tensors = {n: (t, off, ckpt.tensors[n][1].shape) for n, (t, off) in
                   refit_ref.blocks(ckpt, 3, rank, TRAINERS).items()}
        report = shardload.publish(tensors, version=3, comm=comm, timeout_s=60)
    else:
        loader = shardload.Loader(folder, side, tp=1, dp=2, enable_expert_parallel=True, quiet=True, timeout_s=60)
        loader.load()
        report = loader.refit(comm=comm, version=3)
        receiver_check("mixtral ep", ckpt, loader, 3, common.Layout(2, side.Get_rank(), 1, ep=True), {})
        loader.close()
    plan, _ = shardload.dryrun_refit(folder, 2, "fsdp:2", tp=1, dp=2, enable_expert_parallel=True,
                                     ranks_per_node=4)
    check(plan["bytes_transferred"] == report["bytes_transferred"],
          "mixtral: the dry run moves %d bytes, the refit %d" % (plan["bytes_transferred"], report["bytes_transferred"]))
    side.Free()


def module():
    """shardload.torch.load_into(..., refit=True) then refit_into: a module's bound tensors and a
    non-contiguous one (copied in by load_into, copied again after each refit) hold the version."""
    import shardload.torch as sl_torch
    folder = os.path.join(common.fixtures(), "llama")
    ckpt = common.Checkpoint(folder)
    trainer = rank < TRAINERS
    side = comm.Split(0 if trainer else 1, rank)
    copied = "model.layers.0.mlp.down_proj.weight"
    if trainer:
        for v in (4, 5):
            shardload.publish(refit_ref.blocks(ckpt, v, rank, TRAINERS), version=v, comm=comm, timeout_s=60)
    else:
        with shardload.Loader(folder, side, tp=2, quiet=True) as probe:
            plan = probe.plan()
        m = common.module_from_plan(plan, lambda d: {"BF16": torch.bfloat16, "F32": torch.float32}[d])
        owner, leaf = m.get_submodule(copied.rsplit(".", 1)[0]), copied.rsplit(".", 1)[1]
        shape = tuple(getattr(owner, leaf).shape)
        getattr(owner, leaf).data = torch.empty(shape[::-1], dtype=torch.bfloat16).t()  # not contiguous
        sl_torch.load_into(m, folder, comm=side, tp=2, quiet=True, timeout_s=60, refit=True)
        lay = common.Layout(2, side.Get_rank(), 2)
        for v in (4, 5):
            report = sl_torch.refit_into(m, v, comm=comm)
            want = common.reference(refit_ref.Versioned(ckpt, v), lay)
            got = m.state_dict()
            check(report["bytes_transferred"] > 0, "module, version %d: nothing moved" % v)
            for name, t in got.items():
                check(name in want and common.raw(t) == common.raw(want[name]),
                      "module, version %d: %s differs%s" % (v, name, " (copied)" if name == copied else ""))
        check(sl_torch.refit_loader(m).version() == (5, None), "module: version %s" % (sl_torch.refit_loader(m).version(),))
        sl_torch.refit_close(m)
        try:
            sl_torch.refit_into(m, 6, comm=comm)
            check(False, "refit_into after refit_close was accepted")
        except shardload.Error as e:
            check("refit=True" in str(e), "refit_into after refit_close: %s" % e)
    side.Free()


def refused():
    folder = os.path.join(common.fixtures(), "llama")
    trainer = rank < TRAINERS
    side = comm.Split(0 if trainer else 1, rank)
    try:
        if trainer:
            x = torch.zeros(4, 64)
            shardload.publish({"model.layers.0.mlp.gate_prj.weight": (x, [0, 0])}, version=5, comm=comm,
                              timeout_s=60)
        else:
            loader = shardload.Loader(folder, side, dp=2, quiet=True, timeout_s=60)
            loader.load()
            try:
                loader.refit(comm=comm, version=5)
            finally:
                check(len(loader.params()) > 0 and loader.version() == (0, None), "the receiver stopped serving")
                loader.close()
        check(False, "a tensor the checkpoint lacks was accepted")
    except shardload.Error as e:
        check("gate_prj" in str(e), "the error does not name the tensor: %s" % e)
    side.Free()


if world != 4:
    common.skip("test_refit runs at 4 ranks (2 trainers, 2 receivers), not %d" % world)
try:
    llama()
    mixtral()
    module()
    refused()
except Exception as e:  # noqa: BLE001 — one rank's exception is a failure, not a hang
    import traceback
    traceback.print_exc()
    failures.append("%s: %s" % (type(e).__name__, e))
common.finish_mpi(comm, "test_refit", failures)
