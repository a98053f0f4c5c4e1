#!/usr/bin/env bash
# cli_no_cuda.sh — shardload on a node without CUDA: libshardload.so and the `shardload` command have
# no load-time dependency on the CUDA runtime, the driver or NCCL (readelf -d names none), and, with
# every folder that holds a libcudart or a libnccl hidden (a private mount namespace: empty folders
# mounted over them), a host load works, `import shardload` works, and `--device cuda` fails at once
# saying the CUDA runtime was not found. The hidden part needs unshare(1) with mount rights (root):
# elsewhere it is skipped with a note and only readelf is checked.
# Environment (set by ctest): SL_CLI, SL_BUILD_DIR, SL_SOURCE_DIR, SL_MPIRUN, SL_FIXTURES, PYTHON.
set -u
: "${SL_CLI:?}" "${SL_BUILD_DIR:?}" "${SL_SOURCE_DIR:?}" "${SL_MPIRUN:?}" "${SL_FIXTURES:?}"
py=${PYTHON:-python3}
lib=$(find "$SL_BUILD_DIR" -maxdepth 2 -name 'libshardload.so' | head -1)
out=$(mktemp -d "${TMPDIR:-/tmp}/sl-no-cuda-XXXXXX") || exit 1
trap 'rm -rf "$out"' EXIT
fail=0

for f in "$lib" "$SL_CLI"; do
  if [ ! -f "$f" ]; then
    echo "FAIL: $f not found" >&2
    exit 1
  fi
  if readelf -d "$f" | grep -E 'NEEDED.*(libcudart|libnccl|libcuda\.)' >"$out/needed"; then
    echo "FAIL: $(basename "$f") depends on CUDA at load time:" >&2
    cat "$out/needed" >&2
    fail=1
  else
    echo "ok: $(basename "$f") names no CUDA library (readelf -d)"
  fi
done

if ! unshare -m true 2>/dev/null; then
  echo "note: no private mount namespace here (unshare -m needs root): the hidden-CUDA part is skipped"
  exit "$fail"
fi
# Every folder the dynamic loader would find a CUDA runtime, a driver library or NCCL in (deepest
# first: a folder inside another is mounted over before the outer one empties it).
mkdir -p "$out/empty"
hide=$( (ldconfig -p | grep -E 'libcudart|libnccl|libcuda\.so' | sed 's/.*=> //' | xargs -r -n1 dirname;
         for d in /usr/local/cuda /usr/local/cuda-*; do [ -d "$d" ] && readlink -f "$d"; done) | sort -ru)
echo "hidden: $(echo "$hide" | tr '\n' ' ')"
cat >"$out/inside.sh" <<'INNER'
set -u
for d in $HIDE; do mount --bind "$EMPTY" "$d" || exit 90; done
"$SL_MPIRUN" -np 1 "$SL_CLI" load "$SL_FIXTURES/llama" --device cpu --quiet >"$OUT/cpu.log" 2>&1
echo $? >"$OUT/cpu.rc"
timeout 60 "$SL_MPIRUN" -np 1 "$SL_CLI" load "$SL_FIXTURES/llama" --device cuda --quiet >"$OUT/cuda.log" 2>&1
echo $? >"$OUT/cuda.rc"
PYTHONPATH="$SL_SOURCE_DIR/python" SHARDLOAD_LIBRARY="$LIB" "$PY" -c 'import shardload; print("import ok")' \
  >"$OUT/py.log" 2>&1
echo $? >"$OUT/py.rc"
INNER
HIDE="$hide" EMPTY="$out/empty" OUT="$out" LIB="$lib" PY="$py" SL_MPIRUN="$SL_MPIRUN" SL_CLI="$SL_CLI" \
  SL_FIXTURES="$SL_FIXTURES" SL_SOURCE_DIR="$SL_SOURCE_DIR" unshare -m bash "$out/inside.sh"
rc=$?
if [ "$rc" = 90 ]; then
  echo "note: mounting over the CUDA folders was refused: the hidden-CUDA part is skipped"
  exit "$fail"
fi
if [ "$(cat "$out/cpu.rc" 2>/dev/null)" != 0 ]; then
  echo "FAIL: without CUDA, a --device cpu load failed:" >&2
  tail -10 "$out/cpu.log" >&2
  fail=1
else
  echo "ok: without CUDA, a --device cpu load works"
fi
cuda_rc=$(cat "$out/cuda.rc" 2>/dev/null)
if [ "$cuda_rc" = 0 ] || [ "$cuda_rc" = 124 ] || ! grep -q "the CUDA runtime was not found" "$out/cuda.log"; then
  echo "FAIL: without CUDA, --device cuda exited $cuda_rc without saying the CUDA runtime was not found:" >&2
  tail -10 "$out/cuda.log" >&2
  fail=1
else
  echo "ok: without CUDA, --device cuda fails: $(grep -m1 -o 'the CUDA runtime was not found[^:]*' "$out/cuda.log")"
fi
if [ "$(cat "$out/py.rc" 2>/dev/null)" != 0 ]; then
  echo "FAIL: without CUDA, import shardload failed:" >&2
  tail -10 "$out/py.log" >&2
  fail=1
else
  echo "ok: without CUDA, import shardload works"
fi
exit "$fail"
