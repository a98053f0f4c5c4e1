#!/usr/bin/env python3
"""test_reload.py -- run under mpirun at 1..4 ranks: Loader.reload over MPI
(docs/spec/DESIGN.md §10) on the llama fixture, tp = the largest of 4, 2, 1 dividing the world (the rest dp): the checks
of reload_check.py (tensors exported before by DLPack and bound tensors see the new values at the
same addresses, against the reference read from the second checkpoint's own files; refusals leave
every tensor as it was, on every rank with the same error class; after close() the tensors keep
the last values). Rank 0 writes the second checkpoints into a temporary folder.
"""

import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

common.need(["numpy", "torch", "mpi4py"])

from mpi4py import MPI  # noqa: E402

import reload_check  # noqa: E402
import shardload  # noqa: E402

comm = MPI.COMM_WORLD
rank, world = comm.Get_rank(), comm.Get_size()
failures = []


def check(cond, msg):
    if not cond:
        failures.append(msg)


src = os.path.join(common.fixtures(), "llama")
tmp = comm.bcast(tempfile.mkdtemp(prefix="sl-reload-") if rank == 0 else None)
variants = reload_check.make_variants(src, tmp) if rank == 0 else None
variants = comm.bcast(variants)
tp = 4 if world % 4 == 0 else 2 if world % 2 == 0 else 1
try:
    loader = shardload.Loader(src, comm, tp=tp, dp=world // tp, quiet=True)
    reload_check.check(loader, src, variants, os.path.join(common.fixtures(), "qwen2"),
                       common.Layout(world, rank, tp), check)
except Exception as e:  # noqa: BLE001 — one rank's exception is a failure, not a hang
    failures.append("%s: %s" % (type(e).__name__, e))
common.finish_mpi(comm, "test_reload", failures, tmp)
