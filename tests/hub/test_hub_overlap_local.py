#!/usr/bin/env python3
"""test_hub_overlap_local.py -- a load that overlaps its Hub download into a cache that only rank 0
sees, as a node-local cache on another node is (docs/spec/STORAGE.md §1, §2).

The llama fixture through the local Hub server, from an empty cache, at 3 ranks with ranks 1 and 2
each in their own mount namespace with an empty tmpfs over the cache (tests/mpi/hide_files.sh),
storage auto:
  1. the load overlaps the download and is byte-exact against the load of the folder itself
     (--save-sharded copies, written to a folder every rank sees);
  2. rank 0's token in the model folder told it that ranks 1 and 2 cannot see the cache: the
     report's storage says 1 rank read every file and 2 none; ranks 1 and 2 read 0 bytes from
     storage, and the files were downloaded once (the server saw one GET per weight body);
  3. no token file is left in the snapshot;
  4. the same load with every rank seeing the cache: storage says every rank could read every file.
Skips (77) where mount namespaces cannot be made.
"""

import json
import os
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from test_hub import HubServer  # noqa: E402
from test_hub_load import FAILS, check, overlap_env, run, same_save  # noqa: E402  (the checks this test shares)

SHA = "13579bdf13579bdf13579bdf13579bdf13579bdf"
REPO = "org/llama-local"
HIDE = os.path.join(HERE, "..", "mpi", "hide_files.sh")


def load(mpirun, cli, env, hidden, cache, copy, report):
    argv = [mpirun, "-np", "3"]
    if hidden:
        argv += [HIDE, hidden, cache, "--"]
    argv += [cli, "load", REPO, "--dp", "3", "--hub-backoff-base-ms", "10", "--timeout-s", "30", "--save-sharded", copy,
             "--report", report]
    return run(argv, env, timeout=200)


def main():
    if subprocess.run([HIDE, "--check"]).returncode != 0:
        print("test_hub_overlap_local: cannot make mount namespaces here (needs root): skipped")
        return 77
    fixtures = os.environ["SL_FIXTURES"]
    cli = os.environ["SL_CLI"]
    mpirun = os.environ["SL_MPIRUN"]
    model_dir = os.path.join(fixtures, "llama")
    work = tempfile.mkdtemp(prefix="sl-hublocal-")
    server = HubServer(work)
    try:
        base = overlap_env(server, work)
        ref = os.path.join(work, "ref")
        rc, _, err = run([mpirun, "-np", "3", cli, "load", model_dir, "--dp", "3", "--save-sharded", ref],
                         dict(base, HF_HUB_CACHE=os.path.join(work, "unused")))
        check(rc == 0, "local load succeeds: " + err[-1500:])
        server.configure({REPO: {"dir": model_dir, "sha": SHA}})

        for hidden, label in (("1,2", "cache on rank 0 only"), ("", "cache seen by every rank")):
            cache = os.path.join(work, "cache-" + ("local" if hidden else "shared"))
            os.makedirs(cache)
            copy = os.path.join(work, "copy-" + ("local" if hidden else "shared"))
            report = os.path.join(work, "report-%s.json" % ("local" if hidden else "shared"))
            server.configure({REPO: {"dir": model_dir, "sha": SHA}})  # clears the log
            rc, _, err = load(mpirun, cli, dict(base, HF_HUB_CACHE=cache), hidden, cache, copy, report)
            check(rc == 0, "%s: the load succeeds (rc=%d): %s" % (label, rc, err[-2500:]))
            if rc != 0:
                continue
            check("to download: loading them as they arrive" in err,
                  "%s: the load overlapped the download: %s" % (label, err[-1500:]))
            check(same_save(copy, ref),
                  "%s: every pre-sharded byte equals the local load's" % label)
            with open(report) as f:
                rep = json.load(f)
            st = rep["storage"]
            want = {"mode": "auto", "ranks_reading_every_file": 1 if hidden else 3,
                    "ranks_reading_no_file": 2 if hidden else 0}
            check(st == want, "%s: report storage %s, expected %s" % (label, st, want))
            if hidden:
                reads = [r["bytes_read"] for r in rep["ranks"]]
                check(reads[1] == 0 and reads[2] == 0 and reads[0] > 0,
                      "%s: only rank 0 read from storage (%s)" % (label, reads))
                check(abs(rep["read_amplification"] - 1.0) < 1e-9, "%s: read amplification 1.00" % label)
                bodies = [e["path"] for e in server.log() if e["method"] == "GET" and e["status"] in (200, 206)
                          and e["path"].endswith(".safetensors") and e["range"] != "bytes=0-65535"]
                names = [os.path.basename(p) for p in bodies]
                check(len(names) == len(set(names)), "%s: each weight downloaded once: %s" % (label, names))
            snap = os.path.join(cache, "models--org--llama-local", "snapshots", SHA)
            left = [n for n in os.listdir(snap) if n.startswith(".shardload-probe")] if os.path.isdir(snap) else []
            check(left == [], "%s: no token file left in the snapshot (%s)" % (label, left))
    finally:
        server.stop()
        shutil.rmtree(work, ignore_errors=True)
    print("%d failure(s)" % len(FAILS))
    return 1 if FAILS else 0


if __name__ == "__main__":
    sys.exit(main())
