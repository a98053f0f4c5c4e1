#!/usr/bin/env bash
# test_bench_peer.sh -- the vLLM-style peer of scripts/bench (scripts/bench_vllm_peer.py) builds the
# same parameters as shardload: for the tiny llama (GQA 8/2, key/value heads replicated at tp 4,
# vocabulary 250 padded to 256, a rotary buffer to skip) at tp = 1, 2, 4 and llama_bias (qkv, o_proj
# and MLP biases, GQA 4/2) at tp 4, `shardload load --save-sharded` writes each rank's tensors and
# the peer, run at the same tp, compares every one of its parameters with them byte for byte (and
# fails on a missing or extra tensor). A corrupted saved byte must then be reported.
set -euo pipefail
py=/usr/bin/python3
"$py" -c "import torch, mpi4py" 2>/dev/null || { echo "SKIP: python3-torch or python3-mpi4py missing"; exit 77; }
peer="${SL_SOURCE_DIR:?}/scripts/bench_vllm_peer.py"
tmp=$(mktemp -d "${SL_BUILD_DIR:-/tmp}/sl-bench-peer.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
for case in llama:1 llama:2 llama:4 llama_bias:4; do
  model=${case%:*} tp=${case#*:}
  {
    "$SL_MPIRUN" -np "$tp" "$SL_CLI" load "$SL_FIXTURES/$model" --tp "$tp" --quiet \
      --save-sharded "$tmp/$model-$tp" > /dev/null
    out=$("$SL_MPIRUN" -np "$tp" "$py" "$peer" "$SL_FIXTURES/$model" --verify "$tmp/$model-$tp")
    "$py" - "$out" "$model" "$tp" <<'PY'
import json, sys
res = json.loads([l for l in sys.argv[1].splitlines() if l.startswith("{")][-1])
assert res["tp"] == int(sys.argv[3]) and res["verified_tensors"] > 0, res
assert not res["verify_problems"], res["verify_problems"]
print("test_bench_peer: %s tp=%s: %d tensors equal" % (sys.argv[2], sys.argv[3], res["verified_tensors"]))
PY
  }
done
# The comparison can fail: flip the last data byte of rank 1's first part at tp=2.
part=$(ls "$tmp"/llama-2/model-rank-1-part-*.safetensors | head -n 1)
"$py" -c "import sys; b = bytearray(open(sys.argv[1], 'rb').read()); b[-1] ^= 0xff; open(sys.argv[1], 'wb').write(b)" "$part"
if out=$("$SL_MPIRUN" -np 2 "$py" "$peer" "$SL_FIXTURES/llama" --verify "$tmp/llama-2" 2> "$tmp/err"); then
  echo "FAIL: a corrupted saved byte was not reported"; exit 1
fi
grep -q "rank 1: .*bytes differ" "$tmp/err" || { echo "FAIL: expected 'rank 1: ... bytes differ':"; cat "$tmp/err"; exit 1; }
echo "test_bench_peer: a corrupted byte is reported: $(grep -m1 'bytes differ' "$tmp/err")"
