#!/usr/bin/env python3
"""test_progress.py -- run under mpirun: the progress callback of shardload.Loader.

progress=callable: called at least once, bytes_done never decreasing and at most bytes_total, the
last call done == total; on rank 0 the total is the report's cluster bytes_needed, on the others
the rank's own bytes. progress=True: a tqdm bar on rank 0 (a stand-in tqdm module, so that the
test does not depend on tqdm being installed), or a line on stderr without tqdm; nothing on the
other ranks. An exception raised by the callable is raised by load(), after the load finished.
A string is the `progress` configuration key.
"""

import io
import os
import sys
import types

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

common.need(["numpy", "mpi4py"])

from mpi4py import MPI  # noqa: E402

import shardload  # noqa: E402
import shardload.progress  # noqa: E402

comm = MPI.COMM_WORLD
rank, world = comm.Get_rank(), comm.Get_size()
failures = []
MODEL = os.path.join(os.environ["SL_FIXTURES"], "llama")
TP = 2 if world % 2 == 0 else 1


def check(cond, msg):
    if not cond:
        failures.append(msg)
        print("rank %d: FAIL: %s" % (rank, msg), flush=True)


def load(progress, **kw):
    loader = shardload.Loader(MODEL, comm, tp=TP, dp=world // TP, progress=progress, **kw)
    try:
        loader.load()
        return loader.report()
    finally:
        loader.close()


# a callable
calls = []
report = load(lambda done, total: calls.append((done, total)), quiet=True)
check(len(calls) >= 1, "no progress call")
check(all(d <= t for d, t in calls), "done above total: %s" % calls[:5])
check(all(a[0] <= b[0] and a[1] == b[1] for a, b in zip(calls, calls[1:])), "not monotone: %s" % calls[:5])
check(calls and calls[-1][0] == calls[-1][1] > 0, "last call not done == total: %s" % calls[-1:])
own = calls[-1][1] if calls and rank != 0 else 0
others = comm.allreduce(own)
if rank == 0:
    check(calls[-1][1] == report["bytes_needed"], "rank 0 total %d, report bytes_needed %d" %
          (calls[-1][1], report["bytes_needed"]))
    check(world == 1 or others < report["bytes_needed"], "the other ranks' totals are not their own")

# progress=True with a stand-in tqdm
bars = []


class FakeTqdm:
    def __init__(self, total, **kw):
        self.total, self.n, self.closed, self.kw = total, 0, False, kw
        bars.append(self)

    def update(self, k):
        self.n += k

    def close(self):
        self.closed = True


sys.modules["tqdm"] = types.SimpleNamespace(tqdm=FakeTqdm)
load(True, quiet=True)
if rank == 0:
    check(len(bars) == 1 and bars[0].closed and bars[0].n == bars[0].total > 0,
          "tqdm bar: %s" % [(b.n, b.total, b.closed) for b in bars])
    # binary units, as the CLI's sizes (tqdm shows "MiB" with unit "iB" and divisor 1024)
    check(bars and bars[0].kw.get("unit") == "iB" and bars[0].kw.get("unit_divisor") == 1024,
          "tqdm bar units: %s" % (bars[0].kw if bars else None))
else:
    check(not bars, "a tqdm bar on rank %d" % rank)

# progress=True without tqdm: a line on stderr (rank 0)
sys.modules["tqdm"] = None  # import fails
err = io.StringIO()
reporter = shardload.progress.default_reporter(rank)
if rank == 0:
    check(isinstance(reporter, shardload.progress.LineReporter), "no line reporter without tqdm")
    reporter.stream = err
    reporter(5, 10)
    reporter(10, 10)
    check("10 B / 10 B (100.0 %)" in err.getvalue(), "line: %r" % err.getvalue())
    # sizes as the CLI writes them (src/base/bytes_fmt.c: KiB, MiB, GiB with two decimals)
    mib = io.StringIO()
    reporter.stream = mib
    reporter(1040187392, 1040187392)
    check("shardload: 992.00 MiB / 992.00 MiB (100.0 %), " in mib.getvalue() and " MB/s" in mib.getvalue(),
          "sizes in MiB as the CLI's: %r" % mib.getvalue())
else:
    check(reporter is None, "a reporter on rank %d" % rank)
load(True, quiet=True)

# an exception in the callable: raised by load(), on the rank that raised it
def boom(done, total):
    raise ValueError("boom at %d" % done)


try:
    load(boom if rank == 0 else None, quiet=True)
    check(rank != 0, "the callback's exception was not raised")
except ValueError as e:
    check(rank == 0 and "boom" in str(e), "unexpected exception %r" % e)

# a string: the configuration key
load("never")

bad = comm.allreduce(len(failures))
if rank == 0:
    print("%d failure(s) over %d rank(s)" % (bad, world))
sys.exit(1 if bad else 0)
