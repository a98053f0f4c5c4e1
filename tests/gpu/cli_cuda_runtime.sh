#!/usr/bin/env bash
# cli_cuda_runtime.sh — which CUDA runtime and NCCL `shardload load --device cuda` opens at run time
# (src/backend/cuda/libs.c), with the CPU stand-ins of libcudart.so.13, of a CUDA 12.4
# libcudart.so.12 (no cudaGetDriverEntryPointByVersion, as before 12.5) and of libnccl.so.2 on
# LD_LIBRARY_PATH (tests/gpu/cuda_mock.cmake), at one rank unless said:
#  1. a CUDA 12.4 driver (MOCK_CUDA_DRIVER_VERSION=12040), both runtimes found: the 12 runtime is
#     kept (a 12.x driver cannot run 13.x), the driver's entry points come from
#     cudaGetDriverEntryPoint, and the load equals --device cpu byte for byte;
#  2. a CUDA 13.0 driver: the 13 runtime, entry points from cudaGetDriverEntryPointByVersion;
#  3. SHARDLOAD_CUDART naming the 13 runtime under the 12.4 driver: the load fails saying the driver
#     is too old, with both versions;
#  4. SHARDLOAD_CUDART naming a file that does not exist: the load fails naming the variable;
#  5. SHARDLOAD_NCCL naming a file that does not exist: at 2 ranks with tensor parallelism (a
#     broadcast needs NCCL) every rank fails saying NCCL was not found; at 1 rank (no broadcast) the
#     load succeeds.
# Environment (set by ctest): SL_CLI, SL_MPIRUN, SL_FIXTURES, SL_CUDA_MOCK_DIR, SL_CUDA_MOCK12_DIR.
set -u
: "${SL_CLI:?}" "${SL_MPIRUN:?}" "${SL_FIXTURES:?}" "${SL_CUDA_MOCK_DIR:?}" "${SL_CUDA_MOCK12_DIR:?}"
out=$(mktemp -d "${TMPDIR:-/tmp}/sl-cuda-runtime-XXXXXX") || exit 1
trap 'rm -rf "$out"' EXIT
fail=0
both="$SL_CUDA_MOCK12_DIR:$SL_CUDA_MOCK_DIR" # the 12 folder first: its libnccl.so.2 goes with its runtime

run() { # name np [VAR=value...] -- [shardload load options...]: one job; its exit status in $out/name.rc
  local name=$1 np=$2
  shift 2
  local vars=()
  while [ "$1" != "--" ]; do
    vars+=("$1")
    shift
  done
  shift
  timeout 120 env "${vars[@]}" SHARDLOAD_LOG=info "$SL_MPIRUN" -np "$np" "$SL_CLI" load "$SL_FIXTURES/llama" \
    --quiet "$@" >"$out/$name.log" 2>&1
  echo $? >"$out/$name.rc"
}

expect() { # name ok|fail [text...]: the job's outcome and texts its log must hold
  local name=$1 want=$2 rc
  shift 2
  rc=$(cat "$out/$name.rc")
  if { [ "$want" = ok ] && [ "$rc" != 0 ]; } || { [ "$want" = fail ] && { [ "$rc" = 0 ] || [ "$rc" = 124 ]; }; }; then
    echo "FAIL: $name: exit $rc, expected $want" >&2
    tail -15 "$out/$name.log" >&2
    fail=1
    return
  fi
  for text in "$@"; do
    if ! grep -qF -- "$text" "$out/$name.log"; then
      echo "FAIL: $name: the log does not say \"$text\":" >&2
      grep -i -e cuda -e nccl "$out/$name.log" | head -10 >&2
      fail=1
    fi
  done
}

run cpu 1 -- --device cpu --save-sharded "$out/cpu"
expect cpu ok

run cuda12 1 "LD_LIBRARY_PATH=$both" MOCK_CUDA_DRIVER_VERSION=12040 -- --device cuda --save-sharded "$out/cuda12"
expect cuda12 ok "CUDA runtime 12.4" "$SL_CUDA_MOCK12_DIR/libcudart.so.12" "driver entry points from cudaGetDriverEntryPoint;"
if ! diff -r "$out/cpu" "$out/cuda12" >/dev/null; then
  echo "FAIL: cuda12: the shards differ from device cpu" >&2
  fail=1
fi

run cuda13 1 "LD_LIBRARY_PATH=$both" MOCK_CUDA_DRIVER_VERSION=13000 -- --device cuda
expect cuda13 ok "CUDA runtime 13." "$SL_CUDA_MOCK_DIR/libcudart.so.13" "driver entry points from cudaGetDriverEntryPointByVersion;"

run old_driver 1 "LD_LIBRARY_PATH=$both" "SHARDLOAD_CUDART=$SL_CUDA_MOCK_DIR/libcudart.so.13" \
  MOCK_CUDA_DRIVER_VERSION=12040 -- --device cuda
expect old_driver fail "driver is too old" "supports CUDA 12.4" "CUDA runtime 13."

run no_runtime 1 "LD_LIBRARY_PATH=$both" SHARDLOAD_CUDART=/nonexistent/libcudart.so.13 -- --device cuda
expect no_runtime fail "SHARDLOAD_CUDART=/nonexistent/libcudart.so.13 cannot be opened"

run no_nccl 2 "LD_LIBRARY_PATH=$SL_CUDA_MOCK_DIR" SHARDLOAD_NCCL=/nonexistent/libnccl.so.2 -- --device cuda --tp 2
expect no_nccl fail "NCCL was not found (/nonexistent/libnccl.so.2"
if [ "$(grep -c 'NCCL was not found' "$out/no_nccl.log")" -lt 1 ]; then
  fail=1
fi

run no_nccl_1 1 "LD_LIBRARY_PATH=$SL_CUDA_MOCK_DIR" SHARDLOAD_NCCL=/nonexistent/libnccl.so.2 -- --device cuda
expect no_nccl_1 ok "NCCL not loaded"

[ "$fail" = 0 ] && echo "cli_cuda_runtime: ok"
exit "$fail"
