# launch/env.sh — shared by the launch recipes (sourced, not run): the default number of ranks
# per node and the environment variables a load needs on every rank.

# Ranks per node when not given: one per GPU on this node, else one per CPU socket. The
# recipes assume every node looks like the one they run on.
sl_default_ranks_per_node() {
  n=0
  if command -v nvidia-smi >/dev/null 2>&1; then
    n=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ')
  fi
  if [ "${n:-0}" -eq 0 ]; then
    n=$(lscpu 2>/dev/null | sed -n 's/^Socket(s): *//p')
  fi
  echo "${n:-1}"
}

# Names of the set variables every rank needs: the Hub and its cache (HF_*), shardload's own
# (SHARDLOAD_*), the GPUs and NCCL (CUDA_VISIBLE_DEVICES, NCCL_*), vLLM's pipeline split, and
# where the tool and its libraries are.
sl_forwarded_vars() {
  env | sed -n 's/^\(HF_[A-Za-z0-9_]*\|SHARDLOAD_[A-Za-z0-9_]*\|NCCL_[A-Za-z0-9_]*\|CUDA_VISIBLE_DEVICES\|VLLM_PP_LAYER_PARTITION\|PATH\|LD_LIBRARY_PATH\)=.*/\1/p' |
    sort -u
}

# The recipes' common arguments: HOSTFILE [--ranks-per-node N] MODEL. Sets hostfile, ppn (ranks
# per node, defaulted as above), nodes (the host file's non-comment lines), model, and
# sl_consumed (how many arguments to shift off; the rest are shardload load options).
sl_launch_args() {
  local me=$1
  shift
  local usage="usage: $me HOSTFILE [--ranks-per-node N] MODEL [shardload load options...]"
  if [ $# -lt 2 ]; then echo "$usage" >&2; exit 2; fi
  hostfile=$1
  ppn=""
  sl_consumed=2
  if [ "$2" = "--ranks-per-node" ]; then
    if [ $# -lt 4 ]; then echo "$usage" >&2; exit 2; fi
    ppn=$3
    sl_consumed=4
  fi
  model=${!sl_consumed}
  [ -r "$hostfile" ] || { echo "$me: cannot read host file '$hostfile'" >&2; exit 2; }
  ppn=${ppn:-$(sl_default_ranks_per_node)}
  nodes=$(grep -cv '^[[:space:]]*\(#\|$\)' "$hostfile")
}
