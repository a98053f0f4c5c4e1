#!/usr/bin/env bash
# cli_mock_load.sh — the command-line tool (SL_CLI_MOCK: the real `shardload`, whose library opens
# the CPU stand-in of CUDA and NCCL found on LD_LIBRARY_PATH, tests/gpu/cuda_mock.cmake) at 2 ranks:
#  1. `load --device cuda --save-sharded` equals `--device cpu` byte for byte (every saved shard)
#     at tensor-parallel, expert-parallel and pipeline layouts, and the report counts the NCCL
#     communicators: every rank made one per broadcasting group it belongs to, none when nothing
#     is broadcast.
#  2. Each rank's GPU is current when MPI starts (a CUDA-aware MPI makes its context there, on
#     GPU 0 otherwise): mpi_init_probe.c (SL_MPI_INIT_PROBE, preloaded into each rank) prints the
#     context current at MPI_Init.
#  3. A broadcast whose root is slow to read its bucket (every read delayed, one reader thread)
#     while the load watchdog's timeout is 1 s: the receivers' wait is extended because the root
#     makes progress, and the load succeeds (a fixed NCCL deadline failed it).
# Environment (set by ctest): SL_CLI_MOCK, SL_MPI_INIT_PROBE, LD_LIBRARY_PATH, SL_MPIRUN, SL_FIXTURES;
# python3 reads the reports.
set -u
: "${SL_CLI_MOCK:?SL_CLI_MOCK is not set}" "${SL_MPIRUN:?SL_MPIRUN is not set}" "${SL_FIXTURES:?SL_FIXTURES is not set}"
py=${PYTHON:-python3}
out=$(mktemp -d "${TMPDIR:-/tmp}/sl-cli-mock-XXXXXX") || exit 1
trap 'rm -rf "$out"' EXIT
fail=0

load() { # name model device [options...]: one load at 2 ranks, its report and shards under $out/name
  local name=$1 model=$2 device=$3
  shift 3
  # shellcheck disable=SC2086
  if ! timeout 240 "$SL_MPIRUN" -np 2 ${RANK_WRAP:-} "$SL_CLI_MOCK" load "$SL_FIXTURES/$model" --device "$device" --quiet \
      --save-sharded "$out/$name" --report "$out/$name.json" "$@" >"$out/$name.log" 2>&1; then
    echo "FAIL: $name: shardload load $model --device $device $* failed:" >&2
    tail -20 "$out/$name.log" >&2
    fail=1
    return 1
  fi
}

# Every rank's count of NCCL communicators in REPORT equals EXPECT; "groups": the report's number
# of broadcasting groups (at 2 ranks every group holds both).
check_comms() { # report expect
  "$py" - "$1" "$2" <<'PYEOF' || fail=1
import json, sys
report = sys.argv[1]
doc = json.load(open(report))
counts = [r["nccl_communicators"] for r in doc["ranks"]]
groups = doc["schedule"]["broadcasting_groups"]
expect = groups if sys.argv[2] == "groups" else int(sys.argv[2])
if sys.argv[2] == "groups" and groups < 1:
    sys.exit(f"FAIL: {report}: no broadcasting group: the case tests nothing")
if counts != [expect] * len(counts):
    sys.exit(f"FAIL: {report}: NCCL communicators per rank {counts}, expected {expect} on each "
             f"({groups} broadcasting groups)")
PYEOF
}

# tensor parallel; expert parallel; pipeline parallel (qwen3's tied embedding is read by the first
# stage and broadcast to the last).
for case in "tp2|llama|--tp 2" "ep2|mixtral|--tp 2 --enable-expert-parallel" "pp2|qwen3|--pp 2"; do
  IFS='|' read -r name model opts <<<"$case"
  # shellcheck disable=SC2086
  load "$name-cpu" "$model" cpu $opts || continue
  # shellcheck disable=SC2086
  load "$name-cuda" "$model" cuda $opts || continue
  if ! diff -r "$out/$name-cpu" "$out/$name-cuda" >/dev/null; then
    echo "FAIL: $name: the shards saved from device cuda differ from device cpu" >&2
    diff -r "$out/$name-cpu" "$out/$name-cuda" >&2
    fail=1
  fi
  check_comms "$out/$name-cpu.json" 0
  check_comms "$out/$name-cuda.json" groups
done

# The device before MPI_Init: rank r (node-local rank r) on device r.
if MOCK_MPI_INIT_PROBE=1 RANK_WRAP="env LD_PRELOAD=$SL_MPI_INIT_PROBE" load probe llama cuda --tp 2; then
  for r in 0 1; do
    if ! grep -q "mock: MPI_Init with the CUDA context of device $r\$" "$out/probe.log"; then
      echo "FAIL: probe: no rank started MPI with device $r current:" >&2
      grep "mock: MPI_Init" "$out/probe.log" >&2
      fail=1
    fi
  done
fi

# The slow root: 250 ms per read, one reader thread, watchdog timeout 1 s.
if SHARDLOAD_LOG=info SHARDLOAD_INJECT_READ_DELAY_MS=250 load slow llama cuda --tp 2 --threads 1 --timeout-s 1; then
  if ! diff -r "$out/tp2-cpu" "$out/slow" >/dev/null; then
    echo "FAIL: slow: the shards differ from device cpu" >&2
    fail=1
  fi
  if ! grep -q "an NCCL broadcast for" "$out/slow.log"; then
    echo "FAIL: slow: no broadcast waited past the 1 s timeout (the case did not test the extension)" >&2
    tail -20 "$out/slow.log" >&2
    fail=1
  fi
fi
[ "$fail" = 0 ] && echo "cli_mock_load: ok"
exit "$fail"
