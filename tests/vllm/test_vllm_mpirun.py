#!/usr/bin/env python3
"""test_vllm_mpirun.py -- the vLLM plugin with vLLM's external_launcher: every worker a process
that someone else started, here mpirun through launch/vllm-mpirun.sh (which turns Open MPI's
rank variables into RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT), joining the
torch.distributed world by env://, then vLLM's groups, then the same cases as test_vllm_mp.py
(harness.cases). The ranks agree on a free MASTER_PORT first (mpi4py), so that concurrent tests
do not collide.

    mpirun -np N launch/vllm-mpirun.sh /usr/bin/python3 tests/vllm/test_vllm_mpirun.py [GROUP]

GROUP: main (default) or recorded (harness.cases).
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402

harness.need(["torch", "numpy", "mpi4py"])

import torch.distributed as dist  # noqa: E402
from mpi4py import MPI  # noqa: E402

from vllm.distributed import parallel_state as ps  # noqa: E402

comm = MPI.COMM_WORLD
if "RANK" not in os.environ:
    harness.skip("run under mpirun through launch/vllm-mpirun.sh")
rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
assert rank == comm.Get_rank() and world == comm.Get_size(), "launcher variables disagree with MPI"
os.environ["MASTER_PORT"] = str(comm.bcast(harness.free_port() if rank == 0 else None))
dist.init_process_group("gloo", init_method="env://")
ps.init_distributed_environment(world, rank, "env://", int(os.environ["LOCAL_RANK"]), "gloo")
bad = harness.run_cases(world, rank, sys.argv[1] if len(sys.argv) > 1 else "main")
if rank == 0:
    print("vllm plugin under mpirun (external_launcher), %d worker(s): %d failure(s)" % (world, bad))
sys.stdout.flush()
# Leave without the interpreter's finalisation, as the mp workers do (harness._worker): torch 1.13's
# gloo threads may still drop the last reference to a finished collective's tensor, which then
# needs the interpreter lock while it is being torn down (std::terminate). MPI is finalised first,
# so mpirun sees a clean exit.
MPI.Finalize()
os._exit(1 if bad else 0)
