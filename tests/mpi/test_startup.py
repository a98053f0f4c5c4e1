#!/usr/bin/env python3
"""test_startup.py -- start-up costs that must not grow with the job (docs/spec/STORAGE.md §2,
docs/REPORT.md §5): opens of the checkpoint files per rank, and the report a rank holds.

The llama fixture re-sharded into four files (make-fixture --shards 4), loaded by test_startup
(tests/mpi/test_startup.c: dp = world, storage auto, every rank's bytes against the reference)
with the job posing as nodes (SHARDLOAD_INJECT_HOST: rank r on node r // PPN), every rank traced:

  8 ranks on 2 nodes of 4:
    - the opens of each shard file each rank made, counted by the trace: a rank that is not the
      first of its node opens each file at most once (at most 4 opens), the first of each node
      (ranks 0 and 4) at most twice; the count the library reports for each rank (its row's
      file_opens) equals the trace's; the job's totals (file_opens: total, per_rank_max and its
      rank, per_rank_mean) are those of the rows;
    - rank 0 holds the job's report (report_scope "job", 8 rows, 2 nodes); every other rank its
      own view (report_scope "rank", its one row, equal to rank 0's row of it, no node rows), each
      valid against docs/report.schema.json;
  2 ranks on 2 nodes of 1: the same checks; then the report on rank 1 at 8 ranks is no larger than
  at 2 ranks + 10 %.

The opens are counted with strace (-f, open and openat) where it is installed and can trace here;
otherwise with tests/mpi/open_count.c (SL_OPEN_COUNT_SO, LD_PRELOAD: every open call the process
makes, the library unaware of it). SL_TEST_OPEN_COUNT=preload picks the latter. Neither is the
library's own count.
"""

import glob
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

MPIRUN = os.environ["SL_MPIRUN"]
SRC = os.environ["SL_SOURCE_DIR"]
FILES = 4
GROWTH = 1.10
fails = []


def check(cond, msg):
    if not cond:
        fails.append(msg)
        print("FAIL: " + msg, file=sys.stderr)


def strace_works():
    if os.environ.get("SL_TEST_OPEN_COUNT") == "preload" or shutil.which("strace") is None:
        return False
    p = subprocess.run(["strace", "-f", "-qq", "-e", "trace=open,openat", "-o", os.devnull, "true"],
                       capture_output=True, timeout=60)
    return p.returncode == 0


WRAPPER = r"""#!/bin/sh
# rank r on node r / PPN, its open calls traced into DIR/trace.r
ppn=$1; dir=$2; how=$3; shift 3
r=${OMPI_COMM_WORLD_RANK:-${PMIX_RANK:-0}}
export SHARDLOAD_INJECT_HOST=startup-node-$((r / ppn))
if [ "$how" = strace ]; then
  exec strace -f -qq -e trace=open,openat -o "$dir/trace.$r" "$@"
fi
export SL_OPEN_COUNT_FILE="$dir/trace.$r" LD_PRELOAD="$SL_OPEN_COUNT_SO${LD_PRELOAD:+:$LD_PRELOAD}"
export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}verify_asan_link_order=0"  # a sanitized build
exec "$@"
"""


def run(binary, model, out, world, ppn, how):
    os.makedirs(out)
    wrapper = os.path.join(out, "wrap.sh")
    with open(wrapper, "w") as f:
        f.write(WRAPPER)
    os.chmod(wrapper, 0o755)
    env = dict(os.environ, SL_OPEN_COUNT_MATCH=model + "/")
    p = subprocess.run([MPIRUN, "-np", str(world), wrapper, str(ppn), out, how, binary, model, out], env=env,
                       capture_output=True, text=True, timeout=240)
    check(p.returncode == 0, "%d ranks: test_startup failed (status %d): %s" % (world, p.returncode,
                                                                            (p.stdout + p.stderr)[-3000:]))
    return p.returncode == 0


def opens_traced(out, model, rank):
    """Per shard file, how many open calls of rank `rank` the trace saw (any result)."""
    names = ["model-%05d-of-%05d.safetensors" % (i + 1, FILES) for i in range(FILES)]
    pat = re.compile(r'open(?:at)?\((?:[^,]*, )?"%s/([^"]+)"' % re.escape(model))
    counts = dict.fromkeys(names, 0)
    with open(os.path.join(out, "trace.%d" % rank)) as f:
        for line in f:
            m = pat.search(line)
            if m and m.group(1) in counts:
                counts[m.group(1)] += 1
            check(not line.startswith("dropped"), "rank %d: the counter dropped calls: %s" % (rank, line.strip()))
    return counts


def check_world(out, model, world, ppn, schema):
    """Opens and reports of one run; the report text of rank 1."""
    reports = {}
    for r in range(world):
        with open(os.path.join(out, "report.%d.json" % r)) as f:
            reports[r] = f.read()
    docs = {r: json.loads(t) for r, t in reports.items()}
    job = docs[0]
    tag = "%d ranks" % world
    check(job.get("report_scope") == "job" and [x["rank"] for x in job["ranks"]] == list(range(world)) and
          len(job["nodes"]) == world // ppn, "%s: rank 0's report is not the job's: scope %s, %d rows, %d nodes" %
          (tag, job.get("report_scope"), len(job["ranks"]), len(job["nodes"])))
    rows = {x["rank"]: x for x in job["ranks"]}
    total = sum(x["file_opens"] for x in job["ranks"])
    top = max(job["ranks"], key=lambda x: (x["file_opens"], -x["rank"]))
    for r in range(world):
        doc = docs[r]
        first = r % ppn == 0
        traced = opens_traced(out, model, r)
        each = 2 if first else 1
        check(all(n <= each for n in traced.values()), "%s: rank %d (%s of its node) opened a shard file more than "
              "%d time(s): %s" % (tag, r, "first" if first else "not first", each, traced))
        check(sum(traced.values()) <= each * FILES, "%s: rank %d: %d opens" % (tag, r, sum(traced.values())))
        check(rows[r]["file_opens"] == sum(traced.values()), "%s: rank %d: the report counts %d opens, the trace "
              "saw %d (%s)" % (tag, r, rows[r]["file_opens"], sum(traced.values()), traced))
        want = {"total": total, "per_rank_max": top["file_opens"], "per_rank_max_rank": top["rank"]}
        got = {k: doc["file_opens"][k] for k in want}
        check(got == want and abs(doc["file_opens"]["per_rank_mean"] - total / world) < 0.001,
              "%s: rank %d: the job's opens %s, expected %s (mean %.3f)" % (tag, r, doc["file_opens"], want,
                                                                           total / world))
        if r == 0:
            continue
        check(doc.get("report_scope") == "rank" and doc["ranks"] == [rows[r]] and doc["nodes"] == [],
              "%s: rank %d's report is not its view: scope %s, rows %s, %d nodes" %
              (tag, r, doc.get("report_scope"), [x["rank"] for x in doc["ranks"]], len(doc["nodes"])))
        rest = {k: v for k, v in doc.items() if k not in ("report_scope", "ranks", "nodes")}
        check(rest == {k: v for k, v in job.items() if k not in ("report_scope", "ranks", "nodes")},
              "%s: rank %d's job figures differ from rank 0's" % (tag, r))
    for r, doc in docs.items():
        if schema is not None:
            errors = list(schema.iter_errors(doc))
            check(not errors, "%s: rank %d's report against the schema: %s" % (tag, r, errors[0].message[:300]
                                                                                if errors else ""))
    return reports[1]


def main():
    binary = sys.argv[1]
    how = "strace" if strace_works() else "preload"
    if how == "preload" and not os.path.isfile(os.environ.get("SL_OPEN_COUNT_SO", "")):
        print("test_startup: neither strace nor SL_OPEN_COUNT_SO to count opens with: skipped")
        return 77
    print("test_startup: opens counted with %s" % ("strace" if how == "strace" else "the LD_PRELOAD counter"))
    try:
        import jsonschema
        with open(os.path.join(SRC, "docs", "report.schema.json")) as f:
            schema = jsonschema.Draft202012Validator(json.load(f))
    except ImportError:
        print("test_startup: python3-jsonschema is not installed: the reports are not validated")
        schema = None
    tmp = tempfile.mkdtemp(prefix="sl-startup-")
    try:
        model = os.path.join(tmp, "llama4")
        p = subprocess.run([os.path.join(SRC, "scripts", "make-fixture"), "llama", model, "--shards", str(FILES)],
                           capture_output=True, text=True, timeout=120)
        check(p.returncode == 0, "make-fixture: %s" % p.stderr[-1000:])
        check(len(glob.glob(os.path.join(model, "*.safetensors"))) == FILES, "the model has not %d files" % FILES)
        texts = {}
        for world, ppn in ((8, 4), (2, 1)):
            out = os.path.join(tmp, "np%d" % world)
            if not fails and run(binary, model, out, world, ppn, how):
                texts[world] = check_world(out, model, world, ppn, schema)
        if 8 in texts and 2 in texts:
            big, small = len(texts[8].encode()), len(texts[2].encode())
            print("test_startup: the report on rank 1: %d bytes at 8 ranks, %d at 2" % (big, small))
            check(big <= small * GROWTH, "the report on rank 1 grew with the job: %d bytes at 8 ranks, %d at 2 "
                  "(at most +%d %%)" % (big, small, round((GROWTH - 1) * 100)))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print("%d failure(s)" % len(fails))
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
