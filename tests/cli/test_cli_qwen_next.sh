#!/bin/sh
# test_cli_qwen_next.sh — Qwen3-Next and Qwen3.5 through the command line at 2 ranks:
# `shardload load qwen3_next --tp 2 --save-sharded DIR` succeeds with nothing missing or unexpected,
# and each rank's saved conv1d holds the q, k and v blocks docs/spec/LAYOUTS.md §3.13 gives it
# (compared byte for byte with the fixture's conv1d by a few lines of Python reading both files);
# the Qwen3.5 wrapper is refused without --skip-vision (naming model.visual. and the option) and
# loads with it, its vision and MTP tensors counted as skipped; `shardload plan` at tp 3 is refused
# naming in_proj_qkvz and the key heads. Needs SL_CLI, SL_FIXTURES, SL_MPIRUN and python3.
set -u

fails=0
fail() {
  echo "FAIL: $*" >&2
  fails=$((fails + 1))
}
contains() { grep -F -- "$2" "$1" >/dev/null 2>&1; }

: "${SL_CLI:?SL_CLI is not set}" "${SL_FIXTURES:?SL_FIXTURES is not set}" "${SL_MPIRUN:?SL_MPIRUN is not set}"
PY=${PYTHON:-python3}
TMP=$(mktemp -d "${TMPDIR:-/tmp}/sl-cli-qwen-XXXXXX") || exit 1
trap 'rm -rf "$TMP"' EXIT

"$SL_MPIRUN" -np 2 "$SL_CLI" load "$SL_FIXTURES/qwen3_next" --tp 2 --save-sharded "$TMP/saved" --progress never \
  >"$TMP/next.out" 2>"$TMP/next.err" || fail "qwen3_next tp 2: $(tail -c 600 "$TMP/next.err")"
contains "$TMP/next.err" "missing 0, unexpected 0" || fail "qwen3_next: summary $(tail -c 400 "$TMP/next.err")"
"$PY" - "$SL_FIXTURES/qwen3_next" "$TMP/saved" <<'EOF' || fail "qwen3_next: saved conv1d blocks"
import json, os, struct, sys

def tensors(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        head = json.loads(f.read(n))
        data = f.read()
    return {k: data[v["data_offsets"][0]:v["data_offsets"][1]] for k, v in head.items() if k != "__metadata__"}

src, saved = sys.argv[1], sys.argv[2]
full = {}
for name in os.listdir(src):
    if name.endswith(".safetensors"):
        full.update(tensors(os.path.join(src, name)))
name = "model.layers.0.linear_attn.conv1d.weight"
row = 4 * 4                    # kernel 4, F32
rows = full[name]
bad = 0
for r in (0, 1):
    got = tensors(os.path.join(saved, "model-rank-%d-part-0.safetensors" % r))[name]
    want = rows[8 * r * row:(8 * r + 8) * row] + rows[(16 + 8 * r) * row:(24 + 8 * r) * row] + \
        rows[(32 + 16 * r) * row:(48 + 16 * r) * row]
    if got != want:
        print("rank %d: conv1d differs from its q, k, v blocks" % r)
        bad += 1
sys.exit(1 if bad else 0)
EOF

"$SL_MPIRUN" -np 2 "$SL_CLI" load "$SL_FIXTURES/qwen3_5" --tp 2 --quiet >"$TMP/v.out" 2>"$TMP/v.err"
rc=$?
[ "$rc" -ne 0 ] || fail "qwen3_5 without --skip-vision loaded"
contains "$TMP/v.err" "model.visual." || fail "qwen3_5: no vision prefix in $(tail -c 400 "$TMP/v.err")"
contains "$TMP/v.err" "--skip-vision" || fail "qwen3_5: the option is not named"
"$SL_MPIRUN" -np 2 "$SL_CLI" load "$SL_FIXTURES/qwen3_5" --tp 2 --skip-vision --progress never >"$TMP/s.out" \
  2>"$TMP/s.err" || fail "qwen3_5 --skip-vision: $(tail -c 600 "$TMP/s.err")"
contains "$TMP/s.err" "missing 0, unexpected 0, ignored 0, skipped 16" ||
  fail "qwen3_5: 5 vision and 11 MTP tensors skipped: $(tail -c 400 "$TMP/s.err")"

"$SL_CLI" plan "$SL_FIXTURES/qwen3_next" --world 3 --tp 3 >"$TMP/p.out" 2>"$TMP/p.err"
rc=$?
[ "$rc" -ne 0 ] || fail "plan tp 3 accepted"
contains "$TMP/p.err" "in_proj_qkvz.weight: the gated DeltaNet's 4 key heads (linear_num_key_heads)" ||
  fail "plan tp 3: $(cat "$TMP/p.err")"

if [ "$fails" -ne 0 ]; then
  echo "test_cli_qwen_next: $fails failure(s)" >&2
  exit 1
fi
echo "test_cli_qwen_next: ok"
