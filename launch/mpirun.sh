#!/usr/bin/env bash
# Load a model on the nodes of a host file with Open MPI: one rank per GPU (or per socket on
# CPU-only nodes), rank 0 on the first host downloads when the model is a Hub repository.
# Usage: launch/mpirun.sh HOSTFILE RANKS MODEL [shardload load options...]
#   launch/mpirun.sh hosts.txt 16 deepseek-ai/DeepSeek-V3 --tp 8 --pp 2 --device cuda
set -euo pipefail
if [ $# -lt 3 ]; then
  echo "usage: $0 HOSTFILE RANKS MODEL [options...]" >&2
  exit 2
fi
hostfile=$1
ranks=$2
model=$3
shift 3
# The Hugging Face cache must be on storage every node sees (HF_HUB_CACHE or --cache-dir).
exec mpirun -np "$ranks" --hostfile "$hostfile" --map-by ppr:8:node --bind-to none \
  -x HF_HUB_CACHE -x HF_HOME -x HF_TOKEN -x HF_ENDPOINT -x SHARDLOAD_LOG -x PATH -x LD_LIBRARY_PATH \
  shardload load "$model" "$@"
