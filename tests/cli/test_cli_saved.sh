#!/bin/sh
# test_cli_saved.sh — what `--save-sharded` wrote loads back the obvious way, at 2 ranks
# (docs/spec/FILES.md §1.4, §3): saved at tp 2, the folder loads with the default load format (auto) and
# --tp 2, and with no sizes at all (the saved layout is taken: the report says tp 2), every rank
# holding the first load's parameters (name, dtype, local shape, size of each from --list-params;
# their bytes are compared by tests/mpi/test_sharded_state.c); asked for dp 2 instead, it fails on every rank, printed once, naming the saved
# tp/pp/dp and what to pass. `load --help` lists the values of --load-format and --layout, and
# docs/CLI.md and the man page give the same values.
# Needs SL_CLI, SL_FIXTURES and SL_MPIRUN.
set -u

. "$(dirname "$0")/cli_common.sh" || exit 1
cli_begin saved
# The parameters of --list-params ("rank R: NAME DTYPE [SHAPE] N bytes"), one per line, sorted.
params() { grep -E '^rank [0-9]+: ' "$1" | sed 's/ bytes: .*/ bytes/' | sort; }

run first "$M" --tp 2 --list-params --save-sharded "$TMP/saved"
[ "$rc" -eq 0 ] || fail "load and save: exit $rc: $(head -c 1000 "$TMP/first.err")"
[ -f "$TMP/saved/config.json" ] || fail "the save is complete (config.json)"

run auto "$TMP/saved" --tp 2 --list-params --report "$TMP/auto.json"
[ "$rc" -eq 0 ] || fail "load format auto, --tp 2: exit $rc: $(head -c 1000 "$TMP/auto.err")"
contains "$TMP/auto.json" '"load_format":"sharded_state"' || fail "auto read the folder as sharded_state: $(head -c 600 "$TMP/auto.json")"

run bare "$TMP/saved" --list-params --report "$TMP/bare.json"
[ "$rc" -eq 0 ] || fail "load format auto, no sizes: exit $rc: $(head -c 1000 "$TMP/bare.err")"
contains "$TMP/bare.json" '"tp":2,"pp":1,"dp":1' || fail "no sizes: the saved layout is taken: $(head -c 600 "$TMP/bare.json")"

params "$TMP/first.out" >"$TMP/first.params"
for n in auto bare; do
  params "$TMP/$n.out" >"$TMP/$n.params"
  [ -s "$TMP/$n.params" ] || fail "$n: --list-params printed parameters: $(head -c 600 "$TMP/$n.out")"
  # every saved parameter back with its shape and checksum (the first load lists aliases too)
  missing=$(grep -v -x -F -f "$TMP/first.params" "$TMP/$n.params" | head -3)
  [ -z "$missing" ] || fail "$n: parameters differ from the first load's: $missing"
done

run other "$TMP/saved" --dp 2
[ "$rc" -eq 1 ] || fail "another layout: exit $rc, expected 1"
[ "$(count "$TMP/other.err" "LAYOUT:")" = 1 ] || fail "another layout: LAYOUT printed once: $(cat "$TMP/other.err")"
contains "$TMP/other.err" "was saved at tp=2 pp=1 dp=1, but this job asks for tp=1 pp=1 dp=2" ||
  fail "another layout: the saved and the asked layouts named: $(cat "$TMP/other.err")"
contains "$TMP/other.err" "load it with --tp 2 --pp 1 --dp 1" || fail "another layout: what to pass: $(cat "$TMP/other.err")"

"$SL_CLI" load --help >"$TMP/help.out" 2>&1
contains "$TMP/help.out" "one of auto, hf, safetensors, mistral, pt, sharded_state (default auto)" ||
  fail "--help lists the load formats: $(grep -e --load-format "$TMP/help.out")"
contains "$TMP/help.out" "one of vllm, checkpoint (default vllm)" ||
  fail "--help lists the layouts: $(grep -e --layout "$TMP/help.out")"

# The values --help lists are the ones docs/CLI.md and the man page give.
: "${SL_SOURCE_DIR:?SL_SOURCE_DIR is not set}"
for opt in load-format layout; do
  values=$(sed -n "s/^  --$opt .*; one of \(.*\) (default .*/\1/p" "$TMP/help.out")
  [ -n "$values" ] || fail "--help lists no values of --$opt"
  bars=$(echo "$values" | sed 's/, /|/g')
  contains "$SL_SOURCE_DIR"/docs/CLI.md "--$opt $bars" || fail "docs/CLI.md does not give --$opt $bars"
  man=$(echo "$values" | sed 's/,/ (default),/')
  tr '\n' ' ' <"$SL_SOURCE_DIR/packaging/shardload.1" >"$TMP/man.txt"
  contains "$TMP/man.txt" "is one of $man" || fail "the man page does not say --$opt is one of $man"
done

echo "test_cli_saved: $fails failures"
[ "$fails" -eq 0 ]
