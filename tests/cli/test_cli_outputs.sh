#!/bin/sh
# test_cli_outputs.sh — the paths a load writes are made ready before it reads anything
# (docs/spec/TRACKING.md §4.6), at 2 ranks. The phase is shown by the model: a model that does not
# exist fails "no such folder" as soon as it is resolved, so an error naming the report or the
# save instead came before resolution, before any byte was read. Cases: a report under a file
# (its folder cannot be made), a report that is a folder, a save folder under a file: each
# refused, printed once, exit 1, naming the option and the path; a report and a save in folders
# that do not exist yet: made, both written; a report that cannot be written after the load
# (/dev/full): the save is complete all the same, the summary printed, the error says the load
# succeeded and where the copy is. Needs SL_CLI, SL_FIXTURES and SL_MPIRUN.
set -u

. "$(dirname "$0")/cli_common.sh" || exit 1
cli_begin outputs
: >"$TMP/afile"
NOMODEL="$TMP/no-such-model"

# refused(NAME WANT...): exit 1, one "rank 0" line, holding each WANT, and not "no such folder".
refused() {
  n=$1
  shift
  [ "$rc" -eq 1 ] || fail "$n: exit $rc, expected 1: $(head -c 600 "$TMP/$n.err")"
  [ "$(count "$TMP/$n.err" "shardload load: rank")" = 1 ] || fail "$n: printed once: $(cat "$TMP/$n.err")"
  for w in "$@"; do
    contains "$TMP/$n.err" "$w" || fail "$n: the message names '$w': $(cat "$TMP/$n.err")"
  done
  ! contains "$TMP/$n.err" "no such folder" || fail "$n: the model was resolved first: $(cat "$TMP/$n.err")"
}

run underfile "$NOMODEL" --tp 2 --report "$TMP/afile/r.json"
refused underfile "report (--report)" "$TMP/afile"
run isdir "$NOMODEL" --tp 2 --report "$TMP"
refused isdir "report (--report): $TMP is a folder"
run saveunder "$NOMODEL" --tp 2 --save-sharded "$TMP/afile/copy"
refused saveunder "save_sharded (--save-sharded)" "$TMP/afile"
[ ! -e "$TMP/copy" ] || fail "nothing was saved"

run made "$M" --tp 2 --report "$TMP/new/sub/r.json" --save-sharded "$TMP/new/copy/a"
[ "$rc" -eq 0 ] || fail "made: exit $rc: $(head -c 600 "$TMP/made.err")"
contains "$TMP/new/sub/r.json" '"read_amplification"' || fail "made: the report was written in its new folder"
[ -f "$TMP/new/copy/a/config.json" ] || fail "made: the save was written in its new folder"
ls -a "$TMP/new/sub" "$TMP/new/copy/a" | grep -q shardload-probe && fail "made: a probe file was left behind"

if [ -w /dev/full ] && ! printf x 2>/dev/null >/dev/full; then
  run full "$M" --tp 2 --report /dev/full --save-sharded "$TMP/kept"
  [ "$rc" -eq 1 ] || fail "full: exit $rc, expected 1"
  contains "$TMP/full.err" "cannot write the report /dev/full" || fail "full: the report's error: $(cat "$TMP/full.err")"
  contains "$TMP/full.err" "the load succeeded; its sharded copy is saved in $TMP/kept" ||
    fail "full: the error says the copy was kept: $(cat "$TMP/full.err")"
  contains "$TMP/full.err" "shardload: loaded $M" || fail "full: the summary was printed: $(cat "$TMP/full.err")"
  [ -f "$TMP/kept/config.json" ] && [ -f "$TMP/kept/model-rank-1-part-0.safetensors" ] ||
    fail "full: the save is complete: $(ls "$TMP/kept" 2>&1)"
else
  echo "no /dev/full that refuses writes: the late report failure is not checked"
fi

echo "test_cli_outputs: $fails failures"
[ "$fails" -eq 0 ]
