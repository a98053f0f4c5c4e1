#!/bin/sh
# test_cli_multimodal.sh — the multimodal wrappers through the command line at 2 ranks
# (docs/spec/ARCHITECTURES.md §24): `shardload load qwen3_vl --tp 2 --save-sharded DIR` succeeds with
# nothing missing or unexpected, and each rank's saved visual.blocks.0.attn.qkv.weight holds its q,
# k and v row blocks of the checkpoint's fused attn.qkv (compared byte for byte by a few lines of
# Python reading both files); `shardload load gemma3_mm --pp 2 --save-sharded` gives both stages the
# tower, the embedding and the final norm, SigLIP's position embedding padded to 64 rows (the 4
# real ones, then zeros); `--language-model-only` (and `--skip-vision`) loads the text model alone,
# the tower's tensors counted as skipped; kimi_k25_w4a16 (W4A16 experts, BF16 MoonViT tower) at tp 2
# with the tower and with --skip-vision, the summary's missing/unexpected/skipped counts.
# Needs SL_CLI, SL_FIXTURES, SL_MPIRUN and python3.
set -u

fails=0
fail() {
  echo "FAIL: $*" >&2
  fails=$((fails + 1))
}
contains() { grep -F -- "$2" "$1" >/dev/null 2>&1; }

: "${SL_CLI:?SL_CLI is not set}" "${SL_FIXTURES:?SL_FIXTURES is not set}" "${SL_MPIRUN:?SL_MPIRUN is not set}"
PY=${PYTHON:-python3}
TMP=$(mktemp -d "${TMPDIR:-/tmp}/sl-cli-mm-XXXXXX") || exit 1
trap 'rm -rf "$TMP"' EXIT

# The safetensors reader the checks share: tensors(path) -> {name: bytes}, shapes(path) -> {name: shape}.
cat >"$TMP/st.py" <<'EOF'
import json, os, struct

def header(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        return json.loads(f.read(n)), 8 + n

def tensors(path):
    head, base = header(path)
    with open(path, "rb") as f:
        data = f.read()[base:]
    return {k: data[v["data_offsets"][0]:v["data_offsets"][1]] for k, v in head.items() if k != "__metadata__"}

def folder(path):
    out = {}
    for name in sorted(os.listdir(path)):
        if name.endswith(".safetensors"):
            out.update(tensors(os.path.join(path, name)))
    return out

def count(path, prefixes):
    n = 0
    for name in sorted(os.listdir(path)):
        if name.endswith(".safetensors"):
            n += sum(1 for k in header(os.path.join(path, name))[0] if k.startswith(tuple(prefixes)))
    return n
EOF

"$SL_MPIRUN" -np 2 "$SL_CLI" load "$SL_FIXTURES/qwen3_vl" --tp 2 --save-sharded "$TMP/vl" --progress never \
  >"$TMP/vl.out" 2>"$TMP/vl.err" || fail "qwen3_vl tp 2: $(tail -c 600 "$TMP/vl.err")"
contains "$TMP/vl.err" "missing 0, unexpected 0" || fail "qwen3_vl: summary $(tail -c 400 "$TMP/vl.err")"
"$PY" - "$TMP" "$SL_FIXTURES/qwen3_vl" "$TMP/vl" <<'EOF' || fail "qwen3_vl: saved attn.qkv blocks"
import os, sys
sys.path.insert(0, sys.argv[1])
from st import folder, tensors
full = folder(sys.argv[2])
rows = full["model.visual.blocks.0.attn.qkv.weight"]   # [96, 32] BF16: q, k, v blocks of 32 rows
row = 32 * 2
bad = 0
for r in (0, 1):
    got = tensors(os.path.join(sys.argv[3], "model-rank-%d-part-0.safetensors" % r))
    want = b"".join(rows[(32 * p + 16 * r) * row:(32 * p + 16 * r + 16) * row] for p in range(3))
    if got.get("visual.blocks.0.attn.qkv.weight") != want:
        print("rank %d: visual.blocks.0.attn.qkv.weight is not its q, k, v blocks" % r)
        bad += 1
    if "language_model.model.layers.0.self_attn.qkv_proj.weight" not in got:
        print("rank %d: no language_model.model.layers.0.self_attn.qkv_proj.weight" % r)
        bad += 1
sys.exit(1 if bad else 0)
EOF

"$SL_MPIRUN" -np 2 "$SL_CLI" load "$SL_FIXTURES/gemma3_mm" --pp 2 --save-sharded "$TMP/g" --progress never \
  >"$TMP/g.out" 2>"$TMP/g.err" || fail "gemma3_mm pp 2: $(tail -c 600 "$TMP/g.err")"
"$PY" - "$TMP" "$SL_FIXTURES/gemma3_mm" "$TMP/g" <<'EOF' || fail "gemma3_mm pp 2: what each stage holds"
import os, sys
sys.path.insert(0, sys.argv[1])
from st import folder, tensors
full = folder(sys.argv[2])
pos = full["model.vision_tower.vision_model.embeddings.position_embedding.weight"]   # [4, 32] BF16
bad = 0
for r in (0, 1):
    got = tensors(os.path.join(sys.argv[3], "model-rank-%d-part-0.safetensors" % r))
    for name in ("vision_tower.vision_model.encoder.layers.1.self_attn.qkv_proj.weight",
                 "multi_modal_projector.mm_input_projection_weight", "language_model.model.embed_tokens.weight",
                 "language_model.model.norm.weight"):
        if name not in got:
            print("stage %d lacks %s" % (r, name))
            bad += 1
    p = got.get("vision_tower.vision_model.embeddings.position_embedding.weight", b"")
    if p != pos + bytes(60 * 32 * 2):
        print("stage %d: position_embedding is not the 4 rows padded to 64 with zeros (%d bytes)" % (r, len(p)))
        bad += 1
    if "lm_head.weight" in got or "language_model.lm_head.weight" in got:
        print("stage %d holds a head (Gemma-3 has none)" % r)
        bad += 1
sys.exit(1 if bad else 0)
EOF

tower=$("$PY" -c "import sys; sys.path.insert(0, '$TMP'); from st import count
print(count('$SL_FIXTURES/gemma3_mm', ['model.vision_tower.', 'model.multi_modal_projector.']))")
for opt in --language-model-only --skip-vision; do
  "$SL_MPIRUN" -np 2 "$SL_CLI" load "$SL_FIXTURES/gemma3_mm" --tp 2 "$opt" --progress never >"$TMP/t.out" \
    2>"$TMP/t.err" || fail "gemma3_mm $opt: $(tail -c 600 "$TMP/t.err")"
  contains "$TMP/t.err" "missing 0, unexpected 0, ignored 0, skipped $tower" ||
    fail "gemma3_mm $opt: the $tower tower tensors skipped: $(tail -c 400 "$TMP/t.err")"
done

# Kimi-K2.5 with W4A16 routed experts (quantization_config under text_config) and its BF16 MoonViT
# tower: nothing missing with or without the tower; skipped: each routed expert's
# gate_proj.weight_shape (vLLM keeps up_proj's in w13_weight_shape), plus the tower's tensors
# with --skip-vision.
K=$SL_FIXTURES/kimi_k25_w4a16
kimi=$("$PY" -c "import sys, os; sys.path.insert(0, '$TMP'); from st import header
names = [k for f in sorted(os.listdir('$K')) if f.endswith('.safetensors')
         for k in header(os.path.join('$K', f))[0]]
shape = sum(1 for k in names if '.mlp.experts.' in k and k.endswith('.gate_proj.weight_shape'))
tower = sum(1 for k in names if k.startswith(('vision_tower.', 'mm_projector.')))
print(shape, shape + tower)")
for opt in "" --skip-vision; do
  want=${kimi% *}
  [ -n "$opt" ] && want=${kimi#* }
  "$SL_MPIRUN" -np 2 "$SL_CLI" load "$K" --tp 2 $opt --progress never >"$TMP/k.out" \
    2>"$TMP/k.err" || fail "kimi_k25_w4a16 tp 2 $opt: $(tail -c 600 "$TMP/k.err")"
  contains "$TMP/k.err" "missing 0, unexpected 0, ignored 0, skipped $want;" ||
    fail "kimi_k25_w4a16 tp 2 $opt: $want skipped: $(tail -c 400 "$TMP/k.err")"
done

if [ "$fails" -ne 0 ]; then
  echo "test_cli_multimodal: $fails failure(s)" >&2
  exit 1
fi
echo "test_cli_multimodal: ok"
