#!/usr/bin/env bash
# tests/mpi/test_watchdog.sh — the load watchdog against a rank that dies or stops mid-load.
# Usage: test_watchdog.sh kill|stop VICTIM NP
#
# `shardload load` of the llama fixture at dp = NP with one reader thread and every read slowed
# down (SHARDLOAD_INJECT_READ_DELAY_MS), timeout_s 3. Each rank writes its pid through a small
# wrapper; once every rank has started its transfer (the "transfer:" info line), rank VICTIM gets
# SIGKILL or SIGSTOP. Open MPI's own teardown on a process's death is turned off
# (orte_abort_on_non_zero_status 0), so that the surviving ranks must notice by themselves.
# Checks: every surviving rank prints its watchdog line naming the phase ("loading") and the
# victim as not heard from; the job ends with a non-zero status within timeout_s + 10 s of the
# fault; the measured time is printed.
set -uo pipefail
fault=$1 victim=$2 np=$3
timeout_s=3
src=${SL_SOURCE_DIR:?} cli=${SL_CLI:?} fixtures=${SL_FIXTURES:?}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cat >"$work/rank.sh" <<'EOF'
#!/bin/sh
echo $$ >"$SL_PID_DIR/pid.$OMPI_COMM_WORLD_RANK"
exec "$@"
EOF
chmod +x "$work/rank.sh"
export SL_PID_DIR=$work SHARDLOAD_LOG=info SHARDLOAD_INJECT_READ_DELAY_MS=300
# mpirun bounds itself: a job whose ranks hang may ignore SIGTERM.
timeout -k 10 90 "$src/scripts/mpirun-local" -np "$np" --mca orte_abort_on_non_zero_status 0 \
  -x SL_PID_DIR -x SHARDLOAD_LOG -x SHARDLOAD_INJECT_READ_DELAY_MS -x SHARDLOAD_SPECS \
  "$work/rank.sh" "$cli" load "$fixtures/llama" --dp "$np" --threads 1 --quiet --timeout-s "$timeout_s" \
  >"$work/out.txt" 2>&1 &
job=$!
for _ in $(seq 600); do
  [ "$(grep -c 'transfer:' "$work/out.txt")" -ge "$np" ] && break
  sleep 0.05
done
if [ "$(grep -c 'transfer:' "$work/out.txt")" -lt "$np" ]; then
  cat "$work/out.txt"
  echo "FAIL: the ranks did not start their transfers"
  kill -- "$job" 2>/dev/null
  exit 1
fi
sleep 0.3
pid=$(cat "$work/pid.$victim")
case $fault in
kill) kill -KILL "$pid" ;;
stop) kill -STOP "$pid" ;;
*) echo "unknown fault $fault" && exit 2 ;;
esac
t0=$(date +%s.%N)
wait "$job"
rc=$?
elapsed=$(echo "$(date +%s.%N) - $t0" | bc)
# A stopped process is released by mpirun's teardown (SIGCONT, SIGTERM, SIGKILL); nothing stays.
kill -KILL "$pid" 2>/dev/null
grep -v 'transfer:' "$work/out.txt"
fail=0
[ "$rc" -ne 0 ] || { echo "FAIL: the job exited 0"; fail=1; }
for r in $(seq 0 $((np - 1))); do
  [ "$r" = "$victim" ] && continue
  line=$(grep "shardload: rank $r: error: watchdog:" "$work/out.txt" | head -1)
  if [ -z "$line" ]; then
    echo "FAIL: rank $r printed no watchdog line"
    fail=1
  elif ! grep -q "while loading" <<<"$line" || ! grep -Eq "not heard from ranks? ([0-9, -]*[^0-9])?$victim\b" <<<"$line"; then
    echo "FAIL: rank $r's line names neither the phase nor rank $victim: $line"
    fail=1
  fi
done
limit=$((timeout_s + 10))
if [ "$(echo "$elapsed > $limit" | bc)" = 1 ]; then
  echo "FAIL: the job took ${elapsed} s after the fault (limit ${limit} s)"
  fail=1
fi
echo "$fault rank $victim of $np: mpirun exit $rc, ${elapsed} s after the fault (timeout_s $timeout_s)"
exit $fail
