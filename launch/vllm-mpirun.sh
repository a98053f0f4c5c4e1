#!/usr/bin/env bash
# vllm-mpirun.sh -- vLLM with every worker an MPI rank, loading with shardload.
#
#   mpirun -np 4 launch/vllm-mpirun.sh python3 my_offline_script.py
#
# vLLM's external_launcher executor runs one worker per process started by someone else (here
# mpirun); each process reads its place from torch.distributed's variables. This wrapper maps
# Open MPI's (OMPI_COMM_WORLD_RANK, OMPI_COMM_WORLD_LOCAL_RANK, OMPI_COMM_WORLD_SIZE) to the ones
# vLLM reads (RANK, LOCAL_RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT) and runs the command. The
# script then builds its engine with distributed_executor_backend="external_launcher",
# tensor_parallel_size (times pipeline_parallel_size and data parallel) = the number of ranks and
# load_format="shardload" (the plugin registered by `pip install ./python`), e.g.
#   LLM(model=M, tensor_parallel_size=4, distributed_executor_backend="external_launcher",
#       load_format="shardload")
# MASTER_ADDR defaults to 127.0.0.1 (one node; set it to the first host for multi-node jobs),
# MASTER_PORT to 29500. vLLM picks cuda:LOCAL_RANK. The load runs over vLLM's own torch.distributed
# group, not MPI; mpirun only starts the processes (`vllm serve` needs no wrapper at all). The test
# suite runs this wrapper with a stand-in of vLLM (ctest -L vllm: vllm_mpirun_np*), not vLLM itself.
set -euo pipefail
: "${OMPI_COMM_WORLD_RANK:?run this under Open MPI mpirun}"
export RANK="$OMPI_COMM_WORLD_RANK"
export WORLD_SIZE="$OMPI_COMM_WORLD_SIZE"
export LOCAL_RANK="${OMPI_COMM_WORLD_LOCAL_RANK:-0}"
export LOCAL_WORLD_SIZE="${OMPI_COMM_WORLD_LOCAL_SIZE:-1}"
export MASTER_ADDR="${MASTER_ADDR:-127.0.0.1}"
export MASTER_PORT="${MASTER_PORT:-29500}"
exec "$@"
