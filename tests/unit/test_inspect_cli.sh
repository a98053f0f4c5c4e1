#!/bin/sh
# test_inspect_cli.sh — `shardload inspect` end to end: the human listing of a fixture (file names,
# a known tensor line, totals), --json parsed back (when python3 is present), an invalid file
# (exit 1, stderr names the file and the error kind), a config.json said to be no safetensors file
# (what it starts with, not its first 8 bytes as a length), usage errors (exit 2), --help, a bogus pickle
# folder and an index warning. Needs SL_CLI (the tool) and SL_FIXTURES (scripts/make-fixture all).
set -u

fails=0
checks=0
fail() {
  echo "FAIL: $*" >&2
  fails=$((fails + 1))
}
check() { # check DESCRIPTION COMMAND...
  checks=$((checks + 1))
  desc=$1
  shift
  "$@" || fail "$desc"
}
contains() { # contains FILE TEXT
  grep -F -- "$2" "$1" >/dev/null 2>&1
}
matches() { # matches FILE REGEX
  grep -E -- "$2" "$1" >/dev/null 2>&1
}

if [ -z "${SL_CLI:-}" ] || [ ! -x "$SL_CLI" ]; then
  echo "test_inspect_cli: SL_CLI is not set to the shardload tool" >&2
  exit 1
fi
if [ -z "${SL_FIXTURES:-}" ] || [ ! -d "$SL_FIXTURES/llama" ]; then
  echo "test_inspect_cli: SL_FIXTURES does not hold the fixture models" >&2
  exit 1
fi
TMP=$(mktemp -d "${TMPDIR:-/tmp}/sl-inspect-cli-XXXXXX") || exit 1
trap 'rm -rf "$TMP"' EXIT
run() { # run NAME ARGS... → $TMP/NAME.out, $TMP/NAME.err, $rc
  name=$1
  shift
  "$SL_CLI" inspect "$@" >"$TMP/$name.out" 2>"$TMP/$name.err"
  rc=$?
}

# 1. the llama fixture, human output
run llama "$SL_FIXTURES/llama"
check "llama: exit 0 (got $rc; $(cat "$TMP/llama.err"))" [ "$rc" -eq 0 ]
for f in model-00001-of-00003.safetensors model-00002-of-00003.safetensors model-00003-of-00003.safetensors; do
  check "llama: lists $f" contains "$TMP/llama.out" "$SL_FIXTURES/llama/$f"
done
check "llama: load format line (auto resolved)" contains "$TMP/llama.out" "load format: hf"
check "llama: embed_tokens line (name, dtype, shape, bytes, file)" matches "$TMP/llama.out" \
  '^  model\.embed_tokens\.weight +BF16 +\[250, 64\] +32000 +[0-9]+ +model-00001-of-00003\.safetensors$'
check "llama: inv_freq line" matches "$TMP/llama.out" \
  '^  model\.layers\.0\.self_attn\.rotary_emb\.inv_freq +F32 +\[4\] +16 +[0-9]+ +model-00002-of-00003\.safetensors$'
check "llama: totals" contains "$TMP/llama.out" "totals: 3 files, 31 tensors, 273808 bytes"
check "llama: BF16 total" matches "$TMP/llama.out" '^  BF16 +30 tensors +273792 bytes$'
check "llama: F32 total" matches "$TMP/llama.out" '^  F32 +1 tensor +16 bytes$'
check "llama: no warnings" contains "$TMP/llama.out" "warnings: none"
check "llama: one line per tensor" [ "$(grep -c 'safetensors$' "$TMP/llama.out")" -eq 31 ]

# 2. --json parses and carries the same content
run json "$SL_FIXTURES/llama" --json
check "json: exit 0 (got $rc)" [ "$rc" -eq 0 ]
PY=${PYTHON:-}
if [ -z "$PY" ] || ! command -v "$PY" >/dev/null 2>&1; then
  PY=python3
fi
if command -v "$PY" >/dev/null 2>&1; then
  check "json: parses with the expected content" "$PY" -c '
import json, sys
d = json.load(open(sys.argv[1]))
assert d["load_format"] == "hf", d["load_format"]
assert [f["name"] for f in d["files"]] == ["model-0000%d-of-00003.safetensors" % i for i in (1, 2, 3)]
assert sum(f["tensors"] for f in d["files"]) == 31
assert len(d["tensors"]) == 31 and d["totals"]["tensors"] == 31 and d["totals"]["files"] == 3
assert d["totals"]["bytes"] == 273808 == sum(t["nbytes"] for t in d["tensors"])
t = [t for t in d["tensors"] if t["name"] == "model.embed_tokens.weight"][0]
assert t["dtype"] == "BF16" and t["shape"] == [250, 64] and t["nbytes"] == 32000 and t["file"] == 0
assert {x["dtype"]: x["bytes"] for x in d["totals"]["dtypes"]} == {"BF16": 273792, "F32": 16}
assert d["warnings"] == [] and d["notes"] == []
' "$TMP/json.out"
else
  echo "test_inspect_cli: no python3: the JSON parse check is skipped" >&2
  check "json: looks like one object" matches "$TMP/json.out" '^\{'
fi

# 3. a single file
run single "$SL_FIXTURES/qwen3/model.safetensors"
check "single: exit 0 (got $rc)" [ "$rc" -eq 0 ]
check "single: totals" contains "$TMP/single.out" "totals: 1 file, 25 tensors, 262912 bytes"

# 4. an invalid file: exit 1, stderr names the file and the kind
mkdir "$TMP/broken"
size=$(wc -c <"$SL_FIXTURES/qwen3/model.safetensors")
head -c $((size - 10)) "$SL_FIXTURES/qwen3/model.safetensors" >"$TMP/broken/model.safetensors"
run broken "$TMP/broken/model.safetensors"
check "broken: exit 1 (got $rc)" [ "$rc" -eq 1 ]
check "broken: stderr names the file and the kind" \
  contains "$TMP/broken.err" "shardload inspect: $TMP/broken/model.safetensors: ST_INCOMPLETE: "
check "broken: nothing on stdout" [ ! -s "$TMP/broken.out" ]
run brokendir "$TMP/broken"
check "broken folder: exit 1 (got $rc)" [ "$rc" -eq 1 ]
check "broken folder: stderr names the file and the kind" \
  contains "$TMP/brokendir.err" "$TMP/broken/model.safetensors: ST_INCOMPLETE: "
# a file of another kind (config.json): said to be no safetensors file, with what it starts with,
# not a header length of 7 * 10^18 as if it meant something
run notst "$SL_FIXTURES/llama/config.json"
check "config.json: exit 1 (got $rc)" [ "$rc" -eq 1 ]
check "config.json: not a safetensors file ($(cat "$TMP/notst.err"))" \
  contains "$TMP/notst.err" "$SL_FIXTURES/llama/config.json: ST_HEADER_TOO_LARGE: not a safetensors file: it starts with \"{"
run missing "$TMP/nothing-here"
check "missing: exit 1 (got $rc)" [ "$rc" -eq 1 ]
check "missing: NOT_FOUND" contains "$TMP/missing.err" "$TMP/nothing-here: NOT_FOUND: "

# 5. usage
run noarg
check "no argument: exit 2 (got $rc)" [ "$rc" -eq 2 ]
check "no argument: usage on stderr" contains "$TMP/noarg.err" "usage: shardload inspect"
run badfmt "$SL_FIXTURES/llama" --load-format bogus
check "bad load format: exit 2 (got $rc)" [ "$rc" -eq 2 ]
check "bad load format: message" contains "$TMP/badfmt.err" "unknown load format 'bogus'"
run twoargs "$SL_FIXTURES/llama" "$SL_FIXTURES/qwen3"
check "two arguments: exit 2 (got $rc)" [ "$rc" -eq 2 ]
run help --help
check "help: exit 0 (got $rc)" [ "$rc" -eq 0 ]
check "help: usage on stdout" contains "$TMP/help.out" "usage: shardload inspect"

# 6. a folder whose pytorch_model.bin is no torch.save zip: exit 1, PICKLE naming the file
mkdir "$TMP/pickle"
printf 'not really a pickle' >"$TMP/pickle/pytorch_model.bin"
run pickle "$TMP/pickle"
check "pickle: exit 1 (got $rc)" [ "$rc" -eq 1 ]
check "pickle: PICKLE naming the file" contains "$TMP/pickle.err" "pytorch_model.bin: PICKLE: "
run pickle_st "$TMP/pickle" --load-format safetensors
check "pickle with --load-format safetensors: exit 1 (got $rc)" [ "$rc" -eq 1 ]
check "pickle with --load-format safetensors: NO_WEIGHTS" contains "$TMP/pickle_st.err" "NO_WEIGHTS"

# 7. an index mapping a tensor to the wrong file: a warning, exit 0
mkdir "$TMP/badindex"
cp "$SL_FIXTURES/llama/"*.safetensors "$SL_FIXTURES/llama/config.json" "$TMP/badindex/"
sed 's|"lm_head.weight": "model-00001-of-00003.safetensors"|"lm_head.weight": "model-00003-of-00003.safetensors"|' \
  "$SL_FIXTURES/llama/model.safetensors.index.json" >"$TMP/badindex/model.safetensors.index.json"
check "badindex: the index was edited" contains "$TMP/badindex/model.safetensors.index.json" \
  '"lm_head.weight": "model-00003-of-00003.safetensors"'
run badindex "$TMP/badindex"
check "badindex: exit 0 (got $rc)" [ "$rc" -eq 0 ]
check "badindex: warning" contains "$TMP/badindex.out" \
  "maps tensor 'lm_head.weight' to model-00003-of-00003.safetensors, but it is in model-00001-of-00003.safetensors"

echo "$checks checks, $fails failures" >&2
[ "$fails" -eq 0 ]
