#!/usr/bin/env python3
"""installed_check.py -- what test_install.sh runs with the installed package, as a user would:
`mpirun -np 2 VENV/bin/python -m mpi4py installed_check.py MODE MODEL` (or, for MODE group,
`VENV/bin/python -m torch.distributed.run ... installed_check.py group MODEL`: the run lines of
python/README.md) from a folder outside the repository, with no PYTHONPATH, SHARDLOAD_LIBRARY or
SHARDLOAD_SPECS. It sits beside a copy of common.py (the independent safetensors reader and
reference), away from the repository.

MODE load:  the package imported is the installed one (library and specs bundled in it); a load
            at tp = the world size (spelled tensor_parallel_size, as vLLM does) gives every rank
            exactly the reference's bytes for every parameter.
MODE raise: the last rank raises an ordinary Python exception after planning, while the others
            enter the collective load(): mpi4py's -m runner aborts the job on the uncaught
            exception, so mpirun ends (test_install.sh checks that it ends within its deadline).
MODE group: no MPI: torch.distributed's workers (gloo, initialised from the launcher's
            environment) load at tp = the world size over their group; every rank gets exactly the
            reference's bytes.
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402  (numpy only)

import shardload  # noqa: E402

mode, model = sys.argv[1], sys.argv[2]
if mode == "group":  # torch.distributed's workers, no MPI at all
    import torch
    import torch.distributed as dist
    dist.init_process_group("gloo")
    comm, group = None, dist.group.WORLD
    rank, world = dist.get_rank(), dist.get_world_size()

    def allsum(n):
        t = torch.tensor([n], dtype=torch.int64)
        dist.all_reduce(t)
        return int(t.item())
else:
    from mpi4py import MPI
    comm, group = MPI.COMM_WORLD, None
    rank, world = comm.Get_rank(), comm.Get_size()

    def allsum(n):
        return comm.allreduce(n)
fails = []


def check(cond, msg):
    if not cond:
        fails.append(msg)
        print("rank %d: FAIL: %s" % (rank, msg), flush=True)


for var in ("PYTHONPATH", "SHARDLOAD_LIBRARY", "SHARDLOAD_SPECS"):
    check(var not in os.environ, "%s is set (%s)" % (var, os.environ.get(var)))
pkg = os.path.dirname(os.path.abspath(shardload.__file__))
check(pkg.startswith(os.path.realpath(sys.prefix)) or pkg.startswith(sys.prefix),
      "shardload imported from %s, not from the environment %s" % (pkg, sys.prefix))
check(os.path.dirname(shardload.library_path) == pkg,
      "the library %s is not the one bundled in %s" % (shardload.library_path, pkg))
check(os.path.isfile(os.path.join(pkg, "specs", "llama.json")), "no specs/llama.json in %s" % pkg)

if mode == "raise":
    loader = shardload.Loader(model, comm, tensor_parallel_size=world)
    loader.plan()
    if rank == world - 1:
        raise RuntimeError("an ordinary exception on rank %d, mid-script" % rank)
    loader.load()  # waits for the rank that raised: only the abort of the job ends this
    print("rank %d: FAIL: load() returned although rank %d raised" % (rank, world - 1), flush=True)
    sys.exit(1)

ckpt = common.Checkpoint(model)
ref = common.reference(ckpt, common.Layout(world, rank, world))
with shardload.Loader(model, comm, group=group, tensor_parallel_size=world) as loader:
    loader.load()
    got = loader.params("numpy")
check(set(got) == set(ref), "parameter names differ: %s" % sorted(set(got) ^ set(ref)))
nbytes = 0
for name in sorted(set(got) & set(ref)):
    want = common.raw(ref[name])
    check(common.raw(got[name]) == want, "%s differs from the checkpoint" % name)
    nbytes += len(want)
bad = allsum(len(fails))
total = allsum(nbytes)
if rank == 0:
    print("installed_check: %d ranks%s, %d bytes compared, %d failures (package %s)"
          % (world, " (torch.distributed)" if group is not None else "", total, bad, pkg))
sys.exit(1 if bad else 0)
