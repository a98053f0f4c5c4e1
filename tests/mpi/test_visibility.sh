#!/bin/sh
# tests/mpi/test_visibility.sh NP BINARY — loads where some ranks cannot see the checkpoint, the way
# nodes without the shared volume cannot (docs/spec/STORAGE.md), on one machine: each affected rank
# runs in its own mount namespace (tests/mpi/hide_files.sh) over a copy of the fixtures.
#   1. the files on rank 0 only;
#   2. (3 ranks or more) on the even ranks only;
#   3. rank 1 holds another file at one path (same size, another header: it must not read it), and
#      the last rank an identical copy of another (its own inode and times: it may read it);
#   4. storage shared with the files on rank 0 only: a clear error on every rank;
#   5. rank 1 on rank 0's node (hide_files.sh --same-node) with another file at one path, a copy
#      mounted for that rank only: its node's first rank (rank 0) saw the catalog's file, so rank 1
#      reads it and the identity check catches it at open, before any byte is used (rank 1 reads from
#      that file: tp = world, pp = 3 at 3 ranks): IO on rank 1 naming the file, "changed since its
#      header was read", PEER_FAILED on the others.
#   6. the upper half of the ranks one node (hide_files.sh --node) whose ranks all hold an identical
#      copy of the first shard (its own inode and times): its first rank accepts it by its header in
#      the probe, the others when they open it; every rank's bytes against the reference.
# An affected rank poses as a node of its own (hide_files.sh: SHARDLOAD_INJECT_HOST), except in 5
# and 6: the first rank of each node looks at the files for its node (docs/spec/STORAGE.md §2).
# BINARY is tests/mpi/test_visibility.c's; it checks every rank's bytes against the reference.
# Skips (77) where mount namespaces cannot be made.
set -eu
np=$1
bin=$2
here=$(cd "$(dirname "$0")" && pwd)
hide=$here/hide_files.sh
mpirun=${SL_MPIRUN:?SL_MPIRUN is set by ctest}
"$hide" --check || { echo "test_visibility: cannot make mount namespaces here (needs root): skipped"; exit 77; }
root=$(mktemp -d "${TMPDIR:-/tmp}/sl-visibility.XXXXXX")
trap 'rm -rf "$root"' EXIT
for f in llama mixtral deepseek_v3; do cp -r "${SL_FIXTURES:?}/$f" "$root/"; done
others=$(seq -s, 1 $((np - 1)))

echo "== 1. the files on rank 0 only (ranks $others cannot see them)"
"$mpirun" -np "$np" "$hide" "$others" "$root" -- "$bin" "$root" "$others"

if [ "$np" -ge 3 ]; then
  odd=$(seq -s, 1 2 $((np - 1)))
  echo "== 2. the files on the even ranks only (ranks $odd cannot see them)"
  "$mpirun" -np "$np" "$hide" "$odd" "$root" -- "$bin" "$root" "$odd"
fi

echo "== 3. another file at a path on rank 1, an identical copy on rank $((np - 1))"
/usr/bin/python3 - "$root" <<'PY'
import shutil, sys
root = sys.argv[1]
for fx in ("llama", "mixtral", "deepseek_v3"):
    src = f"{root}/{fx}/model-00002-of-00003.safetensors"
    data = bytearray(open(src, "rb").read())
    at = data.index(b'"dtype"')          # a header byte: the same size, another header
    data[at + 1] = ord("D")
    open(f"{root}/{fx}.other", "wb").write(data)
    shutil.copyfile(f"{root}/{fx}/model-00001-of-00003.safetensors", f"{root}/{fx}.copy")
PY
last=$((np - 1))
set -- "$bin" "$root" "-"
for fx in llama mixtral deepseek_v3; do
  set -- "$hide" 1 "$root/$fx/model-00002-of-00003.safetensors=$root/$fx.other" -- "$@"
  set -- "$hide" "$last" "$root/$fx/model-00001-of-00003.safetensors=$root/$fx.copy" -- "$@"
done
"$mpirun" -np "$np" "$@"

echo "== 4. storage shared with the files on rank 0 only: refused"
"$mpirun" -np "$np" "$hide" "$others" "$root" -- "$bin" "$root" "$others" shared

echo "== 5. another file at a path on rank 1, on rank 0's node: caught when it is opened"
"$mpirun" -np "$np" "$hide" --same-node 1 "$root/llama/model-00002-of-00003.safetensors=$root/llama.other" -- \
  "$bin" "$root" "-" caught

upper=$(seq -s, $((np / 2)) $((np - 1)))
echo "== 6. ranks $upper one node holding an identical copy of the first shard"
set -- "$bin" "$root" "-"
for fx in llama mixtral deepseek_v3; do
  set -- "$hide" --node copy-node "$upper" "$root/$fx/model-00001-of-00003.safetensors=$root/$fx.copy" -- "$@"
done
"$mpirun" -np "$np" "$@"
