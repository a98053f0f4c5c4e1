#!/usr/bin/env python3
"""test_hub_overlap_cached.py -- a load that overlaps its Hub download when the cache already holds
some of the weights (docs/spec/HUB.md §13; docs/HUB-CLIENT.md "A load overlapping the download").

The llama fixture (three shards) through the local Hub server; the cache holds everything
`shardload download` leaves except the first two shards (their snapshot entries and blobs removed),
so the load overlaps the download of those two, whose bodies the server holds back 1.5 s. At 2 ranks:
  1. the load is byte-exact against the load of the fixture folder;
  2. the server's log shows no request at all for the cached shard: it is neither downloaded nor
     asked for its header;
  3. rank 0 says the cached shard is in the cache, never that it downloaded it, and starts reading
     it before either missing shard's download completes: its gate opens before the background
     downloads start, not after the files before it in the download order (ordering events in the
     log, not times);
  4. the counts are truthful: "2 of 3 weight files ... to download", and the report's download
     figures are the two missing shards' files and bytes.
"""

import json
import os
import re
import shutil
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from test_hub import HubServer  # noqa: E402
from test_hub_load import FAILS, check, overlap_env, run, same_save  # noqa: E402  (the checks this test shares)

SHA = "fedcba9876543210fedcba9876543210fedcba98"
REPO = "org/llama-cached"
MISSING = ["model-00001-of-00003.safetensors", "model-00002-of-00003.safetensors"]
CACHED = "model-00003-of-00003.safetensors"


def uncache(cache, names):
    """Removes names' snapshot entries and the blobs they point to (as if never downloaded)."""
    snap = os.path.join(cache, "models--org--llama-cached", "snapshots", SHA)
    for name in names:
        entry = os.path.join(snap, name)
        check(os.path.islink(entry), "the prefilled snapshot links %s to its blob" % name)
        if os.path.islink(entry):
            os.remove(os.path.realpath(entry))
        os.remove(entry)


def main():
    fixtures = os.environ["SL_FIXTURES"]
    cli = os.environ["SL_CLI"]
    mpirun = os.environ["SL_MPIRUN"]
    model_dir = os.path.join(fixtures, "llama")
    work = tempfile.mkdtemp(prefix="sl-hubcached-")
    server = HubServer(work)
    try:
        base = overlap_env(server, work)
        tp = ["--tp", "2", "--hub-backoff-base-ms", "10"]
        ref = os.path.join(work, "ref")
        rc, _, err = run([mpirun, "-np", "2", cli, "load", model_dir] + tp + ["--save-sharded", ref],
                         dict(base, HF_HUB_CACHE=os.path.join(work, "unused")))
        check(rc == 0, "local load succeeds: " + err[-1500:])

        # the cache: everything but the first two shards
        server.configure({REPO: {"dir": model_dir, "sha": SHA}})
        cache = os.path.join(work, "cache")
        env = dict(base, HF_HUB_CACHE=cache)
        rc, _, err = run([cli, "download", REPO, "--quiet"], env)
        check(rc == 0, "prefilling the cache succeeds: " + err[-1000:])
        uncache(cache, MISSING)

        # the missing shards' bodies (not their header requests) come 1.5 s late
        rules = []
        for name in MISSING:
            rules.append({"method": "GET", "path": name, "range": "bytes=0-65535", "times": -1})
            rules.append({"port": "cdn", "method": "GET", "path": name, "action": {"delay": 1.5}, "times": -1})
        server.configure({REPO: {"dir": model_dir, "sha": SHA}}, rules=rules)  # also clears the log
        copy = os.path.join(work, "copy")
        report = os.path.join(work, "report.json")
        rc, _, err = run([mpirun, "-np", "2", cli, "load", REPO] + tp + ["--save-sharded", copy, "--report", report],
                         env)
        check(rc == 0, "load through the Hub succeeds (rc=%d): %s" % (rc, err[-2500:]))
        check("2 of 3 weight files of %s to download: loading them as they arrive" % REPO in err,
              "the load overlapped the download of the two missing shards only: " + err[-1500:])

        # 1. byte-exact
        if rc == 0:
            check(same_save(copy, ref),
                  "every pre-sharded byte equals the local load's")

        # 2. the cached shard never asked for
        asked = [(e["port"], e["method"], e["range"]) for e in server.log() if CACHED in e["path"]]
        check(asked == [], "no request for the cached shard: %s" % asked)
        for name in MISSING:
            check(any(e["method"] == "GET" and name in e["path"] and e["status"] in (200, 206)
                      and e["range"] != "bytes=0-65535" for e in server.log()),
                  "%s was downloaded" % name)

        # 3. rank 0: the cached shard ready, and read, before any missing shard is downloaded
        lines = err.splitlines()
        said = [i for i, l in enumerate(lines)
                if l.startswith("[shardload 0] info: %s is in the cache already (weight file 3 of 3)" % CACHED)]
        read = [i for i, l in enumerate(lines) if l.startswith("[shardload 0] info: reading %s (" % CACHED)]
        done = [i for i, l in enumerate(lines)
                if re.match(r"\[shardload 0\] info: downloaded (%s)" % "|".join(map(re.escape, MISSING)), l)]
        check(said != [] and done != [] and said[0] < done[0],
              "rank 0 says the cached shard is ready before a missing shard is downloaded: " + err[-2500:])
        check(read != [] and done != [] and read[0] < done[0],
              "rank 0 reads the cached shard before a missing shard is downloaded: " + err[-2500:])
        check(not any(re.match(r"\[shardload 0\] info: downloaded %s" % re.escape(CACHED), l) for l in lines),
              "rank 0 never calls the cached shard downloaded: " + err[-2500:])

        # 4. the report counts the downloads only
        if rc == 0:
            with open(report) as f:
                dl = json.load(f)["download"]
            sizes = [os.path.getsize(os.path.join(model_dir, n)) for n in MISSING]
            check(dl["files"] == len(MISSING) and dl["bytes"] == sum(sizes),
                  "the report counts the two downloads: %s vs %d files, %d bytes" % (dl, len(MISSING), sum(sizes)))
    finally:
        server.stop()
        shutil.rmtree(work, ignore_errors=True)
    print("%d failures" % len(FAILS), file=sys.stderr)
    return 1 if FAILS else 0


if __name__ == "__main__":
    sys.exit(main())
