#!/bin/sh
# test_cli_docs.sh — what a new user reads agrees with what the tool does:
#   1. the man page (packaging/shardload.1) names every subcommand `shardload --help` lists, and
#      --reload, --load-format, --save-sharded, --report and s3:// sources;
#   2. `scripts/demo --help` and `scripts/test --help` print their usage and exit 0 before any work
#      (the demo's folder is not created), an unknown argument of the demo exits 2 the same way;
#   3. README.md says where the built tool is (build/shardload), and docs/CLI.md calls the save's
#      temporaries what the writer names them (.partial, written through .partial.<8 hex>.tmp: the
#      pattern of src/format/safetensors_write.c);
#   4. docs/INSTALL.md's list of what the static archive needs holds every library of this build's
#      shardload.pc Libs.private, and says what a prefix outside the loader's path needs
#      (LD_LIBRARY_PATH, an rpath; tests/install/test_install.sh runs both).
# Needs SL_CLI, SL_SOURCE_DIR and SL_BUILD_DIR.
set -u

fails=0
fail() {
  echo "FAIL: $*" >&2
  fails=$((fails + 1))
}
contains() { grep -F -- "$2" "$1" >/dev/null 2>&1; }

: "${SL_CLI:?SL_CLI is not set}" "${SL_SOURCE_DIR:?SL_SOURCE_DIR is not set}" "${SL_BUILD_DIR:?SL_BUILD_DIR is not set}"
S="$SL_SOURCE_DIR"
TMP=$(mktemp -d "${TMPDIR:-/tmp}/sl-cli-docs-XXXXXX") || exit 1
trap 'rm -rf "$TMP"' EXIT

# 1. the man page and the tool's own list of subcommands
"$SL_CLI" --help >"$TMP/help.out" 2>&1
sed -n 's/^ *\(mpirun -np N \)\{0,1\}shardload \([a-z]*\) .*/\2/p' "$TMP/help.out" | sort -u >"$TMP/commands"
[ "$(wc -l <"$TMP/commands")" -ge 5 ] || fail "shardload --help lists $(wc -l <"$TMP/commands") subcommands: $(cat "$TMP/help.out")"
man="$S"/packaging/shardload.1
while read -r c; do
  contains "$man" ".B shardload $c" || fail "the man page's synopsis lacks 'shardload $c'"
done <"$TMP/commands"
for opt in '\-\-reload' '\-\-load\-format' '\-\-save\-sharded' '\-\-report' 's3://'; do
  contains "$man" "$opt" || fail "the man page does not mention $opt"
done

# 2. the scripts' --help: usage at once, nothing built or written
for script in demo test; do
  out=$(SL_DEMO_DIR="$TMP/demo" "$S/scripts/$script" --help 2>&1)
  rc=$?
  [ "$rc" -eq 0 ] || fail "scripts/$script --help: exit $rc"
  case "$out" in "usage: scripts/$script"*) ;; *) fail "scripts/$script --help does not start with its usage: $out" ;; esac
done
SL_DEMO_DIR="$TMP/demo" "$S/scripts/demo" --bogus >"$TMP/demo.out" 2>&1
rc=$?
[ "$rc" -eq 2 ] || fail "scripts/demo --bogus: exit $rc, expected 2"
contains "$TMP/demo.out" "unknown argument '--bogus'" || fail "scripts/demo --bogus: $(cat "$TMP/demo.out")"
[ ! -e "$TMP/demo" ] || fail "scripts/demo --help or --bogus started the demo (its folder exists)"

# 3. README.md: the tool's place; docs/CLI.md: the temporaries' names
readme="$S"/README.md
contains "$readme" "the tool is \`build/shardload\`" || fail "README.md does not say the tool is build/shardload"
contains "$S/src/format/safetensors_write.c" '"%s.%08x.tmp"' ||
  fail "the safetensors writer no longer names its temporaries <path>.<8 hex>.tmp: update docs/CLI.md and this test"
contains "$S"/docs/CLI.md ".model-rank-R-part-K.safetensors.partial.<8 hex>.tmp" ||
  fail "docs/CLI.md does not name the save's temporaries .partial.<8 hex>.tmp"

# 4. docs/INSTALL.md: the static archive's libraries, a prefix outside the loader's path
install="$S"/docs/INSTALL.md
libs=$(sed -n 's/^Libs.private: //p' "$SL_BUILD_DIR/shardload.pc")
for l in $libs; do
  case "$l" in
    -l*) contains "$install" "\`$l" || fail "docs/INSTALL.md's static list lacks $l (Libs.private: $libs)" ;;
    *nccl*) contains "$install" "NCCL" || fail "docs/INSTALL.md's static list lacks NCCL" ;;
  esac
done
for w in LD_LIBRARY_PATH "-Wl,-rpath" "pkg-config --cflags --static --libs shardload"; do
  contains "$install" "$w" || fail "docs/INSTALL.md does not say $w"
done

echo "test_cli_docs: $fails failures"
[ "$fails" -eq 0 ]
