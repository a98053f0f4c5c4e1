#!/bin/sh
# test_cli_args.sh — the command line's options: vLLM's spellings (--tensor-parallel-size, -tp,
# --pipeline-parallel-size, -pp, --data-parallel-size, -dp, --download-dir, --load-format), byte
# counts with units, "did you mean" for unknown options, `plan` without --world, and each
# subcommand's --help listing only its own keys. The effect of an alias is read back from
# `plan --json` (tp, pp, dp) or from the message naming the cache folder; one load at 2 ranks
# takes aliases and units end to end. A mistyped local path (models/lama, ./x, ../m) fails at once
# as a missing folder, not as a Hub request; a tp that does not divide the attention heads says so
# first. A usage error of a job of several ranks is printed once. Needs SL_CLI, SL_FIXTURES and
# SL_MPIRUN.
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
contains() { grep -F -- "$2" "$1" >/dev/null 2>&1; }
lacks() { ! grep -F -- "$2" "$1" >/dev/null 2>&1; }

: "${SL_CLI:?SL_CLI is not set}" "${SL_FIXTURES:?SL_FIXTURES is not set}" "${SL_MPIRUN:?SL_MPIRUN is not set}"
M="$SL_FIXTURES/llama"
TMP=$(mktemp -d "${TMPDIR:-/tmp}/sl-cli-args-XXXXXX") || exit 1
trap 'rm -rf "$TMP"' EXIT
run() { # run NAME ARGS... → $TMP/NAME.out, $TMP/NAME.err, $rc
  name=$1
  shift
  "$SL_CLI" "$@" >"$TMP/$name.out" 2>"$TMP/$name.err"
  rc=$?
}
expect_rc() { # expect_rc NAME WANT
  check "$1: exit $2 (got $rc: $(head -c 600 "$TMP/$1.err"))" [ "$rc" -eq "$2" ]
}

# 1. vLLM's spellings: the sizes reach the plan.
alias_case() { # alias_case NAME FIELD VALUE ARGS...
  n=$1 field=$2 want=$3
  shift 3
  run "$n" plan "$M" --json "$@"
  expect_rc "$n" 0
  check "$n: \"$field\":$want in the plan" contains "$TMP/$n.out" "\"$field\":$want,"
}
alias_case tps tp 2 --world 2 --tensor-parallel-size 2
alias_case tpeq tp 2 --world 2 --tensor-parallel-size=2
alias_case tpshort tp 2 --world 2 -tp 2
alias_case pps pp 3 --world 3 --pipeline-parallel-size 3
alias_case ppshort pp 3 --world 3 -pp 3
alias_case dps dp 2 --world 2 --data-parallel-size 2
alias_case dpshort dp 2 --world 2 -dp 2
alias_case mixed tp 2 --world 4 -tp 2 --data-parallel-size 2
check "mixed: dp 2 as well" contains "$TMP/mixed.out" '"dp":2,'
alias_case ours tp 4 --world 4 --tp 4
alias_case loadformat tp 1 --world 1 --load-format safetensors
run badformat plan "$M" --world 1 --load-format npcache
expect_rc badformat 2
check "badformat: message" contains "$TMP/badformat.err" "unknown load format 'npcache'"
run dldir download org/none --offline --download-dir "$TMP/dl-cache"
if ! contains "$TMP/dldir.err" UNSUPPORTED; then # built without the Hub client: nothing to check
  expect_rc dldir 1
  check "--download-dir: the cache folder is the one given" contains "$TMP/dldir.err" "$TMP/dl-cache/models--org--none"
  run dldireq download org/none --offline "--download-dir=$TMP/dl2"
  check "--download-dir=: the cache folder is the one given" contains "$TMP/dldireq.err" "$TMP/dl2/models--org--none"
fi

# 2. byte counts with units, wherever a byte count is taken
run units plan "$M" --world 2 --tp 2 --staging-bytes 1.5G --read-chunk-bytes 16M --coalesce-gap-bytes 4K \
  --bucket-bytes 64MiB --save-max-part-bytes 5GB --hub-chunk-bytes 32MiB --hub-parallel-threshold 1G
expect_rc units 0
for bad in 12X 1.5 -1M 256MM; do
  run "unit$bad" plan "$M" --world 1 --staging-bytes "$bad"
  expect_rc "unit$bad" 2
  check "staging $bad: names the key and the units" contains "$TMP/unit$bad.err" "staging_bytes: '$bad' is not"
done
run unittp plan "$M" --world 1 --tp 1K
expect_rc unittp 2
"$SL_MPIRUN" -np 2 "$SL_CLI" load "$M" -tp 2 --staging-bytes 4M --read-chunk-bytes=256K --bucket-bytes 1MiB \
  --quiet >"$TMP/mpiload.out" 2>"$TMP/mpiload.err"
rc=$?
expect_rc mpiload 0

# 3. did you mean
dym() { # dym NAME WANT ARGS...
  n=$1 want=$2
  shift 2
  run "$n" "$@"
  expect_rc "$n" 2
  check "$n: suggests $want ($(cat "$TMP/$n.err"))" contains "$TMP/$n.err" "did you mean $want?"
}
dym typo --staging-bytes plan "$M" --world 1 --stagin-bytes 1M
dym swap --staging-bytes plan "$M" --world 1 --stagign-bytes 1M
dym prefix --staging-bytes plan "$M" --world 1 --staging 1M
dym vllm --tensor-parallel-size plan "$M" --world 1 --tensor-parallel 1
dym world --world plan "$M" --wrold 1
dym json --json plan "$M" --world 1 --jsn
dym inspect --load-format inspect "$M" --load-fromat hf
dym download --revision download org/name --revison main
dym downloaddir --download-dir download org/name --downlaod-dir /tmp
dym listparams --list-params load "$M" --list-param
run far plan "$M" --world 1 --zzzzzzzz 1
expect_rc far 2
check "far: unknown, no suggestion" contains "$TMP/far.err" "unknown option '--zzzzzzzz' (shardload plan --help"
run single plan "$M" --world 1 -x
expect_rc single 2
check "single dash: unknown option" contains "$TMP/single.err" "unknown option '-x'"
run worldload load "$M" --world 2
expect_rc worldload 2
check "--world is plan's only" contains "$TMP/worldload.err" "unknown option '--world'"

# 4. plan without --world
run noworld plan "$M" --tp 2
expect_rc noworld 2
check "plan without --world says it is needed" contains "$TMP/noworld.err" "--world N is needed"

# 5. each subcommand's --help lists its own keys only
run hload load --help
expect_rc hload 0
for f in --staging-bytes --tensor-parallel-size -tp --device --save-sharded --list-params --report --no-strict; do
  check "load --help lists $f" contains "$TMP/hload.out" "$f"
done
for f in --world --storage-gbps --ranks-per-node --include --json; do
  check "load --help does not list $f" lacks "$TMP/hload.out" "$f"
done
run hplan plan --help
expect_rc hplan 0
for f in --world --tp --pipeline-parallel-size -dp --storage-gbps --ranks-per-node --staging-bytes --json; do
  check "plan --help lists $f" contains "$TMP/hplan.out" "$f"
done
for f in --device --save-sharded --report --include --list-params --hub-connections; do
  check "plan --help does not list $f" lacks "$TMP/hplan.out" "$f"
done
run hinspect inspect --help
expect_rc hinspect 0
for f in --load-format --json; do
  check "inspect --help lists $f" contains "$TMP/hinspect.out" "$f"
done
for f in --tp --world --staging-bytes --device; do
  check "inspect --help does not list $f" lacks "$TMP/hinspect.out" "$f "
done
run hdownload download --help
expect_rc hdownload 0
for f in --revision --include --all --download-dir --cache-dir --hub-connections; do
  check "download --help lists $f" contains "$TMP/hdownload.out" "$f"
done
for f in --world --staging-bytes --device "--tp "; do
  check "download --help does not list $f" lacks "$TMP/hdownload.out" "$f"
done
check "help states the unit convention" contains "$TMP/hplan.out" "powers of 1024"
run top --help
expect_rc top 0
check "shardload --help names the commands" contains "$TMP/top.out" "shardload plan MODEL --world N"

# 6. local paths vs Hub ids: a mistyped local path fails at once as a missing folder, never as a
# Hub request (the Hub endpoint points at a closed port: a request would end in a network error).
mkdir -p "$TMP/cwd/models"
: >"$TMP/cwd/weights.safetensors"
local_case() { # local_case NAME MODEL SHOWN
  n=$1 model=$2 shown=$3
  (cd "$TMP/cwd" && HF_ENDPOINT=http://127.0.0.1:9 HF_HUB_OFFLINE=0 "$SL_CLI" plan "$model" --world 1) \
    >"$TMP/$n.out" 2>"$TMP/$n.err"
  rc=$?
  expect_rc "$n" 1
  check "$n: a missing local folder ($(cat "$TMP/$n.err"))" contains "$TMP/$n.err" \
    "no such folder: $shown (a local path; Hub ids look like org/name)"
  check "$n: no Hub request" lacks "$TMP/$n.err" "127.0.0.1"
}
local_case beside models/lama models/lama # "models/" exists here: not a Hub id
local_case dot ./x ./x
local_case dotdot ../m ../m
local_case deep a/b/c a/b/c
local_case abs "$TMP/cwd/none" "$TMP/cwd/none"
(cd "$TMP/cwd" && HF_ENDPOINT=http://127.0.0.1:9 "$SL_CLI" plan weights.safetensors --world 1) \
  >"$TMP/file.out" 2>"$TMP/file.err"
rc=$?
expect_rc file 1
check "a local file: not a folder ($(cat "$TMP/file.err"))" contains "$TMP/file.err" "not a folder: weights.safetensors"
# org/name with no local "org": still a Hub id (offline here: the cache is asked, not the network)
(cd "$TMP/cwd" && "$SL_CLI" plan org/none --world 1 --offline --cache-dir "$TMP/hub-cache") \
  >"$TMP/hubid.out" 2>"$TMP/hubid.err"
rc=$?
expect_rc hubid 1
check "org/none is a Hub id ($(cat "$TMP/hubid.err"))" lacks "$TMP/hubid.err" "no such folder"
check "org/none is looked up as a Hub id" contains "$TMP/hubid.err" "org/none"
# the model as a local path, relative to the working folder
(cd "$SL_FIXTURES" && "$SL_CLI" plan ./llama --world 2 --tp 2) >"$TMP/rel.out" 2>"$TMP/rel.err"
rc=$?
expect_rc rel 0

# 7. attention heads first: tp 3 divides neither llama's 8 heads nor its padded vocabulary (256)
run heads plan "$M" --world 3 --tp 3
expect_rc heads 1
check "heads: vLLM's message first ($(cat "$TMP/heads.err"))" contains "$TMP/heads.err" \
  "Total number of attention heads (8) must be divisible by tensor parallel size (3)"
check "heads: no complaint about the vocabulary" lacks "$TMP/heads.err" "vocabulary"

# 8. usage errors of a job printed once: every rank parses the same argv (load at 4 ranks, reshard
# at 3), rank 0 says it, every rank exits 2
timeout 120 "$SL_MPIRUN" -np 4 "$SL_CLI" load "$M" --tp 4 --stagin-bytes 1M >"$TMP/once.out" 2>"$TMP/once.err"
rc=$?
expect_rc once 2
check "load at 4 ranks: one 'did you mean' ($(cat "$TMP/once.err"))" \
  [ "$(grep -c "did you mean --staging-bytes" "$TMP/once.err")" = 1 ]
timeout 120 "$SL_MPIRUN" -np 3 "$SL_CLI" reshard "$M" --from-tp 1 --tp 2 --bogus-flag 1 >"$TMP/rsonce.out" \
  2>"$TMP/rsonce.err"
rc=$?
expect_rc rsonce 2
check "reshard at 3 ranks: the unknown option once ($(cat "$TMP/rsonce.err"))" \
  [ "$(grep -c "unknown option '--bogus-flag'" "$TMP/rsonce.err")" = 1 ]

if [ "$fails" -ne 0 ]; then
  echo "test_cli_args: $fails of $checks checks failed" >&2
  exit 1
fi
echo "test_cli_args: $checks checks passed"
