#!/usr/bin/env bash
# cli_mock_reshard.sh — `shardload reshard --device cuda` with the command-line tool built against
# the CPU stand-in of CUDA and NCCL (shardload_mock, tests/gpu/gpumock.cmake): donors and receivers
# on the stand-in's GPUs (each rank the GPU of its node-local rank in the job), the receivers'
# --save-sharded copy (device memory copied back) byte-identical to a `--device cpu` storage load
# of the target layout, and the report: receivers with 0 bytes read, bytes received, and NCCL
# communicators (the pairs'). Pairs: llama tp 1 → tp 2 (3 ranks), mixtral tp 2 + EP → dp 2 + EP (4).
# Environment (set by ctest): SL_CLI_MOCK, SL_MPIRUN, SL_FIXTURES.
set -u
: "${SL_CLI_MOCK:?SL_CLI_MOCK is not set}" "${SL_MPIRUN:?SL_MPIRUN is not set}" "${SL_FIXTURES:?SL_FIXTURES is not set}"
py=${PYTHON:-/usr/bin/python3}
work=$(mktemp -d "${TMPDIR:-/tmp}/sl-cli-mock-reshard-XXXXXX") || exit 1
trap 'rm -rf "$work"' EXIT
fail=0
run() { # name fixture np_from from_args np_to to_args
  local name=$1 fixture=$2 nf=$3 from=$4 nt=$5 to=$6
  # shellcheck disable=SC2086
  if ! timeout 240 "$SL_MPIRUN" -np $((nf + nt)) "$SL_CLI_MOCK" reshard "$SL_FIXTURES/$fixture" $from $to \
      --device cuda --quiet --save-sharded "$work/$name.peers" --report "$work/$name.json" \
      >"$work/$name.log" 2>&1; then
    echo "FAIL $name: reshard --device cuda failed" >&2
    tail -20 "$work/$name.log" >&2
    fail=1
    return
  fi
  # shellcheck disable=SC2086
  if ! timeout 240 "$SL_MPIRUN" -np "$nt" "$SL_CLI_MOCK" load "$SL_FIXTURES/$fixture" $to --device cpu --quiet \
      --save-sharded "$work/$name.storage" >"$work/$name.slog" 2>&1; then
    echo "FAIL $name: storage load failed" >&2
    tail -20 "$work/$name.slog" >&2
    fail=1
    return
  fi
  if ! diff -r "$work/$name.peers" "$work/$name.storage" >/dev/null; then
    echo "FAIL $name: the copy saved from the receivers' GPUs differs from the storage load's" >&2
    diff -r "$work/$name.peers" "$work/$name.storage" | head >&2
    fail=1
  fi
  "$py" - "$work/$name.json" "$nf" "$nt" "$name" <<'PY' || fail=1
import json, sys
d = json.load(open(sys.argv[1]))
nf, nt, name = int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
donors, receivers = d["donors"]["ranks"], d["receivers"]["ranks"]
ok = len(donors) == nf and len(receivers) == nt
ok = ok and all(r["bytes_read"] == 0 and r["bytes_received"] > 0 for r in receivers)
ok = ok and all(r["nccl_communicators"] > 0 for r in receivers)
print(("ok " if ok else "FAIL ") + name + ": receivers (read, received, NCCL communicators) " +
      str([(r["bytes_read"], r["bytes_received"], r["nccl_communicators"]) for r in receivers]))
sys.exit(0 if ok else 1)
PY
}
run tp1_tp2 llama 1 "--from-tp 1" 2 "--tp 2"
run mixtral_ep mixtral 2 "--from-tp 2 --from-enable-expert-parallel" 2 "--dp 2 --enable-expert-parallel"
exit $fail
