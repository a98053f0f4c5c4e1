#!/bin/sh
# test_cli_reload.sh — `shardload load MODEL --reload MODEL2` (docs/spec/DESIGN.md §10) at 2 ranks:
# the load, then each reload in order, each summarized ("reloaded ... in place"), the report file
# the last reload's; a reload of another architecture's checkpoint fails every rank with SHAPE,
# printed once, naming the parameter; --save-sharded with --reload, and --reload-revision without
# --reload, are usage errors; --help lists both options. Needs SL_CLI, SL_FIXTURES and SL_MPIRUN.
set -u

. "$(dirname "$0")/cli_common.sh" || exit 1
cli_begin reload

run twice "$M" --tp 2 --reload "$M" --reload "$M" --report "$TMP/report.json"
[ "$rc" -eq 0 ] || fail "load + 2 reloads: exit $rc: $(head -c 1000 "$TMP/twice.err")"
[ "$(count "$TMP/twice.err" "reloaded $M in place")" = 2 ] || fail "two reloads announced: $(cat "$TMP/twice.err")"
[ "$(count "$TMP/twice.err" "shardload: loaded $M")" = 3 ] || fail "three summaries: $(cat "$TMP/twice.err")"
contains "$TMP/report.json" '"read_amplification"' || fail "the report file was written"

run other "$M" --tp 2 --reload "$SL_FIXTURES/qwen2"
[ "$rc" -ne 0 ] || fail "a reload of another architecture succeeded"
[ "$(count "$TMP/other.err" "SHAPE:")" = 1 ] || fail "SHAPE printed once: $(cat "$TMP/other.err")"
contains "$TMP/other.err" "qkv_proj.bias" || fail "the parameter is named: $(cat "$TMP/other.err")"

run save "$M" --reload "$M" --save-sharded "$TMP/saved"
[ "$rc" -eq 2 ] || fail "--save-sharded with --reload: exit $rc, expected 2"
contains "$TMP/save.err" "--save-sharded saves the first load" || fail "the usage error says why: $(cat "$TMP/save.err")"
[ ! -e "$TMP/saved" ] || fail "nothing was saved"

run rev "$M" --reload-revision main
[ "$rc" -eq 2 ] || fail "--reload-revision without --reload: exit $rc, expected 2"

"$SL_CLI" load --help >"$TMP/help.out" 2>&1
contains "$TMP/help.out" "--reload MODEL" || fail "--help lists --reload"
contains "$TMP/help.out" "--reload-revision REV" || fail "--help lists --reload-revision"

echo "test_cli_reload: $fails failures"
[ "$fails" -eq 0 ]
