#!/usr/bin/env python3
"""test_load_from_peers.py -- run under mpirun at 4 ranks: Loader.load_from_peers over MPI
(docs/spec/DESIGN.md §11). Ranks 0-1 (the donors) load a model from storage in a source layout,
ranks 2-3 (the receivers) create a loader of a target layout and receive their parameters from the
donors. Checked on every pair: each receiver's tensors equal the independent reference of the target
layout (common.reference over the checkpoint's own files, as a storage load would hold them); the
donors' tensors are byte for byte what they held before and still the source layout's reference;
the receivers' report says bytes_read 0 for each and bytes_received > 0. Pairs: llama tp 2 -> tp 2,
llama tp 2 -> tp 1 dp 2, mixtral tp 2 -> tp 1 dp 2 with expert parallelism. Then the refusals: a
receiver that planned already fails on every rank, and the donors keep serving.
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

common.need(["numpy", "torch", "mpi4py"])

from mpi4py import MPI  # noqa: E402

import shardload  # noqa: E402

comm = MPI.COMM_WORLD
rank, world = comm.Get_rank(), comm.Get_size()
failures = []
DONORS = 2


def check(cond, msg):
    if not cond:
        failures.append(msg)


def pair(folder, src, dst):
    """src, dst: (tp, dp, ep) of the donors' and the receivers' layouts (2 ranks each)."""
    gives = rank < DONORS
    side = comm.Split(0 if gives else 1, rank)
    tp, dp, ep = src if gives else dst
    tag = "%s tp%d dp%d%s -> tp%d dp%d%s" % ((os.path.basename(folder),) + src[:2] + ("ep" if src[2] else "",)
                                           + dst[:2] + ("ep" if dst[2] else "",))
    ref = common.reference(common.Checkpoint(folder),
                           common.Layout(side.Get_size(), side.Get_rank(), tp, ep))
    loader = shardload.Loader(folder, side, tp=tp, dp=dp, enable_expert_parallel=ep, quiet=True)
    before = None
    if gives:
        loader.load()
        before = {n: common.raw(t) for n, t in loader.params().items()}
        read_before = loader.report().get("bytes_read")
    loader.load_from_peers(comm)
    got = loader.params()
    check(set(got) == set(ref), "%s: names differ: %s" % (tag, sorted(set(got) ^ set(ref))))
    for name, t in got.items():
        if name in ref:
            check(common.raw(t) == common.raw(ref[name]), "%s: %s differs from the reference" % (tag, name))
        if before is not None:
            check(common.raw(t) == before[name], "%s: the donor's %s changed" % (tag, name))
    report = loader.report()
    if gives:
        check(report.get("bytes_read") == read_before, "%s: the donor's report changed" % tag)
    elif side.Get_rank() == 0:  # the receivers' report (their first rank's: every receiver's figures)
        ranks = report.get("ranks", [])
        check(len(ranks) == side.Get_size(), "%s: the report lists %d ranks" % (tag, len(ranks)))
        for r in ranks:
            check(r.get("bytes_read") == 0, "%s: a receiver read %s bytes" % (tag, r.get("bytes_read")))
            check(r.get("bytes_received", 0) > 0, "%s: a receiver received nothing" % tag)
    return loader, side


def refused(folder):
    """A receiver that planned already: every rank raises the same class; the donors keep serving."""
    gives = rank < DONORS
    side = comm.Split(0 if gives else 1, rank)
    loader = shardload.Loader(folder, side, tp=2, quiet=True)
    if gives:
        loader.load()
    else:
        loader.plan()
    try:
        loader.load_from_peers(comm)
        check(False, "a planned receiver was accepted")
    except shardload.Error as e:
        kinds = comm.allgather(type(e).__name__)
        check(len(set(kinds)) == 1, "the ranks raised different classes: %s" % kinds)
    if gives:
        check(len(loader.params()) > 0, "the donor stopped serving after a refused load from peers")
    loader.close()
    side.Free()


if world != 4:
    common.skip("test_load_from_peers runs at 4 ranks (2 donors, 2 receivers), not %d" % world)
llama = os.path.join(common.fixtures(), "llama")
mixtral = os.path.join(common.fixtures(), "mixtral")
try:
    for folder, src, dst in ((llama, (2, 1, False), (2, 1, False)), (llama, (2, 1, False), (1, 2, False)),
                             (mixtral, (2, 1, False), (1, 2, True))):
        loader, side = pair(folder, src, dst)
        loader.close()
        side.Free()
    refused(llama)
except Exception as e:  # noqa: BLE001 — one rank's exception is a failure, not a hang
    failures.append("%s: %s" % (type(e).__name__, e))
common.finish_mpi(comm, "test_load_from_peers", failures)
