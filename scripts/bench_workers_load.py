#!/usr/bin/env python3
"""bench_workers_load.py -- one timed load per rank, for scripts/bench-workers (not a test).

    mpirun -np N /usr/bin/python3 scripts/bench_workers_load.py mpi MODEL TP OUT.json
    /usr/bin/python3 scripts/bench_workers_load.py torch MODEL TP OUT.json N

Every rank times shardload.Loader(...) through load() (the in-process time of a load: creation,
catalog, plan, reads, broadcasts, tracking) over MPI (mpi4py's COMM_WORLD) or over a
torch.distributed gloo group of N processes started with torch.multiprocessing; rank 0 writes the
slowest rank's seconds and the report's byte counts to OUT.json. dp = ranks / TP.
Run with Debian's /usr/bin/python3 (torch, mpi4py, numpy).
"""

import json
import os
import sys
import tempfile
import time


def timed_load(model, tp, world, **where):
    import shardload
    t0 = time.monotonic()
    with shardload.Loader(model, tp=tp, dp=world // tp, progress="never", **where) as loader:
        loader.load()
        seconds = time.monotonic() - t0
        report = loader.report()
    return seconds, report


def write(out, kind, world, tp, seconds, report):
    keys = ("bytes_unique", "bytes_read", "bytes_broadcast")
    with open(out, "w") as f:
        json.dump({"kind": kind, "world": world, "tp": tp, "seconds": max(seconds),
                   "bytes": {k: report.get(k) for k in keys if k in report}}, f)


def run_mpi(model, tp, out):
    from mpi4py import MPI
    comm = MPI.COMM_WORLD
    seconds, report = timed_load(model, tp, comm.Get_size(), comm=comm)
    all_seconds = comm.gather(seconds)
    if comm.Get_rank() == 0:
        write(out, "mpi", comm.Get_size(), tp, all_seconds, report)


def torch_worker(rank, world, init, model, tp, queue):
    import torch.distributed as dist
    dist.init_process_group("gloo", init_method=init, rank=rank, world_size=world)
    try:
        seconds, report = timed_load(model, tp, world, group=dist.group.WORLD)
        queue.put((rank, seconds, report if rank == 0 else None))
    except BaseException as e:  # noqa: BLE001 -- reported to the parent, which fails the run
        queue.put((rank, None, "%s: %s" % (type(e).__name__, e)))
    dist.destroy_process_group()


def run_torch(model, tp, out, world):
    import torch.multiprocessing as mp
    ctx = mp.get_context("spawn")
    queue = ctx.SimpleQueue()
    init = "file://" + os.path.join(tempfile.mkdtemp(), "store")
    mp.spawn(torch_worker, args=(world, init, model, tp, queue), nprocs=world)
    results = [queue.get() for _ in range(world)]
    failed = [r for r in results if r[1] is None]
    if failed:
        sys.exit("bench_workers_load: %s" % failed)
    report = next(r[2] for r in results if r[0] == 0)
    write(out, "torch", world, tp, [r[1] for r in results], report)


if __name__ == "__main__":
    kind, model, tp, out = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
    if kind == "mpi":
        run_mpi(model, tp, out)
    else:
        run_torch(model, tp, out, int(sys.argv[5]))
