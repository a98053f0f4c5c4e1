#!/bin/sh
# tests/mpi/hide_files.sh — runs a command as an MPI rank that cannot see some files, the way a node
# without the shared volume cannot:
#   mpirun -np N hide_files.sh [--same-node | --node NAME] RANKS WHAT -- CMD [ARGS...]
#   RANKS  comma-separated ranks (OMPI_COMM_WORLD_RANK) that are affected; the others run CMD as is
#   WHAT   DIR: an empty tmpfs over DIR (the folder is there, its files are not);
#          FILE=OTHER: OTHER's bytes bind-mounted over FILE (a different file at the same path)
# Each affected rank gets its own private mount namespace (unshare -m): nothing is visible outside
# it, and it ends with the rank. A rank that sees other files is another node's rank: an affected
# rank poses as a node of its own (SHARDLOAD_INJECT_HOST, engine/nodes.c), as the first rank of a
# node looks at the files for its node (docs/spec/STORAGE.md §2); with --node NAME the affected ranks
# are one node NAME (each in its own namespace, mounting the same thing: one view); with --same-node
# a rank stays on the node of the others, a copy mounted for that one rank only.
# Needs root (or user namespaces); `hide_files.sh --check` exits 0 when it can, 77 otherwise (the
# tests skip).
set -eu
if [ "${1:-}" = "--check" ]; then
  unshare -m --propagation private sh -c 'mount -t tmpfs none /mnt 2>/dev/null' >/dev/null 2>&1 && exit 0
  exit 77
fi
node=own
if [ "$1" = "--same-node" ]; then
  node=
  shift
elif [ "$1" = "--node" ]; then
  node=$2
  shift 2
fi
ranks=$1
what=$2
shift 2
[ "$1" = "--" ] && shift
rank=${OMPI_COMM_WORLD_RANK:-${PMIX_RANK:-0}}
case ",$ranks," in
  *",$rank,"*) ;;
  *) exec "$@" ;;
esac
if [ "$node" = own ]; then
  export SHARDLOAD_INJECT_HOST="$(hostname)-hidden-rank-$rank"
elif [ -n "$node" ]; then
  export SHARDLOAD_INJECT_HOST="$node"
fi
case "$what" in
  *=*) file=${what%%=*}; other=${what#*=}
       exec unshare -m --propagation private sh -c 'mount --bind "$1" "$2" && shift 2 && exec "$@"' sh \
         "$other" "$file" "$@" ;;
  *)   exec unshare -m --propagation private sh -c 'mount -t tmpfs none "$1" && shift && exec "$@"' sh \
         "$what" "$@" ;;
esac
