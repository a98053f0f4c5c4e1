#!/usr/bin/env bash
# cli_no_gpu.sh — `shardload load MODEL --tp 2 --device cuda` where no GPU can be used: at 2 ranks,
# every rank must exit non-zero within the time limit, and the job's stderr must say "no CUDA
# device available" (CUDA build) or "built without CUDA" (build without CUDA). Exit 77 (skipped)
# when the load succeeds, i.e. where a GPU is usable. Environment (set by ctest): SL_CLI, SL_MPIRUN,
# SL_FIXTURES.
set -u
: "${SL_CLI:?SL_CLI is not set}" "${SL_MPIRUN:?SL_MPIRUN is not set}" "${SL_FIXTURES:?SL_FIXTURES is not set}"

out=$(mktemp -d "${TMPDIR:-/tmp}/sl-cli-nogpu-XXXXXX") || exit 1
trap 'rm -rf "$out"' EXIT

# Each rank records its own exit status and stderr (Open MPI names the rank in the environment).
timeout 150 "$SL_MPIRUN" -np 2 bash -c '
  r=${OMPI_COMM_WORLD_RANK:-${PMI_RANK:-${PMIX_RANK:-x}}}
  dir=$1; shift
  "$@" >"$dir/out.$r" 2>"$dir/err.$r"
  echo $? >"$dir/rc.$r"
' bash "$out" "$SL_CLI" load "$SL_FIXTURES/llama" --tp 2 --device cuda
mpirun_rc=$?
if [ "$mpirun_rc" -eq 124 ]; then
  echo "FAIL: shardload load --device cuda did not finish within 150 s" >&2
  exit 1
fi

# Every rank must fail; the reason must reach the job's stderr. (The CLI prints each distinct
# failure once, on rank 0, naming the rank it came from; a rank may also print its own.)
fail=0
ok_loads=0
for r in 0 1; do
  if [ ! -f "$out/rc.$r" ]; then
    echo "FAIL: rank $r left no exit status (mpirun exit $mpirun_rc)" >&2
    fail=1
    continue
  fi
  rc=$(cat "$out/rc.$r")
  echo "rank $r: exit $rc"
  if [ "$rc" = 0 ]; then
    ok_loads=$((ok_loads + 1))
  fi
done
if [ "$ok_loads" = 2 ]; then
  echo "SKIP: the load succeeded on both ranks: a GPU is usable here"
  exit 77
fi
if [ "$ok_loads" != 0 ]; then
  echo "FAIL: $ok_loads rank(s) exited 0 while another failed" >&2
  fail=1
fi
if grep -h -e "no CUDA device available" -e "built without CUDA" "$out"/err.* >"$out/found"; then
  sed 's/^/stderr: /' "$out/found"
else
  echo "FAIL: no rank's stderr says \"no CUDA device available\" or \"built without CUDA\"; stderr was:" >&2
  for r in 0 1; do
    [ -f "$out/err.$r" ] && sed "s/^/    rank $r: /" "$out/err.$r" >&2
  done
  fail=1
fi
exit "$fail"
