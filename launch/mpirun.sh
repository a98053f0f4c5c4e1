#!/usr/bin/env bash
# Load a model on the nodes of a host file with Open MPI. Ranks per node default to the GPUs of
# this node (one per socket without GPUs); every variable a load needs (HF_*, SHARDLOAD_*,
# CUDA_VISIBLE_DEVICES, NCCL_*, PATH, LD_LIBRARY_PATH) is forwarded to every rank. Rank 0 (first
# host) downloads when the model is a Hub repository: the cache (HF_HUB_CACHE or --cache-dir)
# and any model folder must be on storage every node sees at the same path.
# Usage: launch/mpirun.sh HOSTFILE [--ranks-per-node N] MODEL [shardload load options...]
#   launch/mpirun.sh hosts.txt deepseek-ai/DeepSeek-V3 --tp 8 --pp 2 --device cuda
#   launch/mpirun.sh hosts.txt --ranks-per-node 2 /shared/models/Llama-3.1-8B --tp 2 --dp 2
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/env.sh"
sl_launch_args "$0" "$@"
shift "$sl_consumed"
forward=()
for v in $(sl_forwarded_vars); do
  forward+=(-x "$v")
done
exec mpirun -np $((nodes * ppn)) --hostfile "$hostfile" --map-by "ppr:$ppn:node" --bind-to none \
  "${forward[@]}" shardload load "$model" "$@"
