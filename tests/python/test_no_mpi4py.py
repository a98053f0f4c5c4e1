#!/usr/bin/env python3
"""test_no_mpi4py.py -- run under mpirun at 1..4 ranks as if mpi4py were not installed: the package
initialises MPI itself through the library (MPI_COMM_WORLD of Open MPI by ctypes, libmpi made
global first) and finalises it at exit. Every rank loads the llama fixture at tp = the largest of
2, 1 dividing the world and compares every parameter with the independent reference; the ranks
agree on the result through a second load's agreement (Loader.agree), since there is no mpi4py to
reduce with. Importing shardload must not import mpi4py (it is blocked here: an import fails).
"""

import os
import sys

sys.modules["mpi4py"] = None  # `import mpi4py` now raises ImportError, as on a machine without it
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

common.need(["numpy"])

import shardload  # noqa: E402

world = int(os.environ.get("OMPI_COMM_WORLD_SIZE", "1"))
tp = 2 if world % 2 == 0 else 1
folder = os.path.join(common.fixtures(), "llama")
ckpt = common.Checkpoint(folder)
fails = []
with shardload.Loader(folder, tp=tp, dp=world // tp, progress="never") as loader:
    rank = loader.rank
    loader.load()
    want = common.reference(ckpt, common.Layout(world, rank, tp))
    got = loader.params(kind="numpy")
    if sorted(got) != sorted(want):
        fails.append("parameter names differ from the reference: %s" % sorted(set(got) ^ set(want)))
    for name in sorted(set(got) & set(want)):
        if common.raw(got[name]) != common.raw(want[name]):
            fails.append("%s differs from the reference" % name)
    for f in fails:
        print("rank %d: FAIL: %s" % (rank, f), flush=True)
    # Every rank learns whether any rank failed: the loader's own agreement over MPI raises on
    # every rank when one passes an error.
    bad = False
    try:
        loader.agree(shardload.Error("%d parameter(s) differ" % len(fails)) if fails else None)
    except shardload.Error as e:
        bad = True
        print("rank %d: the load differs on some rank: %s" % (rank, e), flush=True)
if rank == 0:
    print("test_no_mpi4py: %d ranks, tp %d, %d parameters per rank checked, %s"
          % (world, tp, len(want), "FAILED" if bad else "ok"), flush=True)
sys.exit(1 if bad else 0)
