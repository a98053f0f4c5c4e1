# cli_common.sh — sourced by the command-line tests that run `shardload load` at 2 ranks
# (test_cli_outputs.sh, test_cli_saved.sh, test_cli_reload.sh): the failure count and the checks on
# a run's output, the environment they need (SL_CLI, SL_FIXTURES, SL_MPIRUN), the llama fixture as
# $M, a temporary folder $TMP removed at exit, and run().
# Use: . "$(dirname "$0")/cli_common.sh" && cli_begin TAG (TAG names the temporary folder).

fails=0
fail() {
  echo "FAIL: $*" >&2
  fails=$((fails + 1))
}
contains() { grep -F -- "$2" "$1" >/dev/null 2>&1; }
count() { grep -c -F -- "$2" "$1" 2>/dev/null; }

# cli_begin TAG: checks the environment, sets M and makes TMP (sl-cli-TAG-XXXXXX), exits 1 otherwise.
cli_begin() {
  : "${SL_CLI:?SL_CLI is not set}" "${SL_FIXTURES:?SL_FIXTURES is not set}" "${SL_MPIRUN:?SL_MPIRUN is not set}"
  M="$SL_FIXTURES/llama"
  TMP=$(mktemp -d "${TMPDIR:-/tmp}/sl-cli-$1-XXXXXX") || exit 1
  trap 'rm -rf "$TMP"' EXIT
}

run() { # run NAME ARGS... → $TMP/NAME.out, $TMP/NAME.err, $rc (shardload load under mpirun at 2 ranks)
  name=$1
  shift
  timeout 120 "$SL_MPIRUN" -np 2 "$SL_CLI" load "$@" >"$TMP/$name.out" 2>"$TMP/$name.err"
  rc=$?
}
