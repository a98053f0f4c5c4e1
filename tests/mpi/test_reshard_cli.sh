#!/usr/bin/env bash
# test_reshard_cli.sh — `mpirun -np N shardload reshard` (docs/spec/DESIGN.md §11): the receivers'
# --save-sharded copy must be byte-identical to the copy a storage load of the target layout saves
# (same files, same bytes), and the report must list the donors, then the receivers with 0 bytes read
# and every byte they hold received. Pairs: tp 2 → 4 (6 ranks), pp 2 → tp 2 (4), deepseek_v3 tp 2 +
# EP → dp 2 + EP (4).
set -euo pipefail
cli=${SL_CLI:?} fixtures=${SL_FIXTURES:?} mpirun=${SL_MPIRUN:?}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail=0
run() { # name fixture np_from from_args np_to to_args
  local name=$1 fixture=$2 nf=$3 from=$4 nt=$5 to=$6
  "$mpirun" -np $((nf + nt)) "$cli" reshard "$fixtures/$fixture" $from $to --quiet \
    --save-sharded "$work/$name.peers" --report "$work/$name.json" 2>"$work/$name.log" || {
    echo "FAIL $name: reshard failed"; cat "$work/$name.log"; fail=1; return; }
  "$mpirun" -np "$nt" "$cli" load "$fixtures/$fixture" $to --quiet --save-sharded "$work/$name.storage" \
    2>"$work/$name.slog" || { echo "FAIL $name: storage load failed"; cat "$work/$name.slog"; fail=1; return; }
  if ! diff -r "$work/$name.peers" "$work/$name.storage" >/dev/null; then
    echo "FAIL $name: the saved copies differ"; diff -r "$work/$name.peers" "$work/$name.storage" | head; fail=1
  fi
  /usr/bin/python3 - "$work/$name.json" "$nf" "$nt" "$name" <<'PY' || fail=1
import json, sys
d = json.load(open(sys.argv[1]))
nf, nt, name = int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
donors, receivers = d["donors"]["ranks"], d["receivers"]["ranks"]
ok = len(donors) == nf and len(receivers) == nt
ok = ok and all(r["bytes_read"] == 0 and r["bytes_received"] > 0 for r in receivers)
ok = ok and sum(r["bytes_read"] for r in donors) > 0
print(("ok " if ok else "FAIL ") + name + ": report " +
      str([(r["bytes_read"], r["bytes_received"]) for r in receivers]))
sys.exit(0 if ok else 1)
PY
}
run tp2_tp4 llama 2 "--from-tp 2" 4 "--tp 4"
run pp2_tp2 llama 2 "--from-pp 2" 2 "--tp 2"
run dsv3 deepseek_v3 2 "--from-tp 2 --from-enable-expert-parallel" 2 "--dp 2 --enable-expert-parallel"
exit $fail
