#!/usr/bin/env bash
# The same as launch/mpirun.sh for MPICH and Intel MPI (Hydra's mpiexec): ranks per node default
# to the GPUs of this node (one per socket without GPUs), every variable a load needs forwarded
# with -genv. The cache and model folders must be on storage every node sees at the same path.
# Usage: launch/mpiexec.sh HOSTFILE [--ranks-per-node N] MODEL [shardload load options...]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/env.sh"
sl_launch_args "$0" "$@"
shift "$sl_consumed"
forward=()
for v in $(sl_forwarded_vars); do
  forward+=(-genv "$v" "${!v}")
done
exec mpiexec -n $((nodes * ppn)) -ppn "$ppn" -f "$hostfile" "${forward[@]}" shardload load "$model" "$@"
