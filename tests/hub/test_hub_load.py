#!/usr/bin/env python3
"""test_hub_load.py -- `mpirun -np 4 shardload load org/name` through the local Hub server.

Rank 0 downloads a multi-shard fixture model into a fresh cache; all four ranks load it
(tp=2 dp=2) and write a pre-sharded copy, which must be byte-identical to the copy written by the
same load from the fixture folder itself (whose bytes the mpi tests check against an independent
reference). The server's request log must show exactly one client process, rank 0's. The load
fetches only what it reads (config.json, the index, the weights); `shardload download` afterwards
adds the other top-level non-weight files (docs/spec/HUB.md §3). A second run makes one request (the
revision API); offline runs make none and a cache miss fails cleanly on every rank; a missing
repository fails every rank with its own message.
"""

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from test_hub import HubServer  # noqa: E402

FAILS = []


def check(cond, what):
    if not cond:
        FAILS.append(what)
        print("FAIL: " + what, file=sys.stderr)


def run(argv, env, timeout=150):
    p = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=timeout)
    return p.returncode, p.stdout, p.stderr


def overlap_env(server, work):
    """The environment of a load from the test server into a fresh Hub home, logging at info (the
    overlap tests read rank 0's lines)."""
    env = dict(os.environ)
    env.update({"HF_ENDPOINT": server.endpoint, "HF_HOME": os.path.join(work, "home"), "SHARDLOAD_LOG": "info"})
    env.pop("HF_HUB_OFFLINE", None)
    return env


def same_save(copy, ref):
    """Whether the pre-sharded copy equals the reference save: the same weight files (every
    `.safetensors` part, none missing or extra) and every byte of every file both hold."""
    a, b = files_of(copy), files_of(ref)
    parts = sorted(k for k in a if k.endswith(".safetensors"))
    return (parts != [] and parts == sorted(k for k in b if k.endswith(".safetensors"))
            and all(a[k] == b[k] for k in a if k in b))


def files_of(folder):
    out = {}
    for name in sorted(os.listdir(folder)):
        with open(os.path.join(folder, name), "rb") as f:
            out[name] = f.read()
    return out


def main():
    fixtures = os.environ["SL_FIXTURES"]
    cli = os.environ["SL_CLI"]
    mpirun = os.environ["SL_MPIRUN"]
    model_dir = os.path.join(fixtures, "llama")
    work = tempfile.mkdtemp(prefix="sl-hubload-")
    server = HubServer(work)
    try:
        sha = "0123456789abcdef0123456789abcdef01234567"
        server.configure({"org/llama": {"dir": model_dir, "sha": sha}})
        env = dict(os.environ)
        env.update({"HF_ENDPOINT": server.endpoint, "HF_HUB_CACHE": os.path.join(work, "cache"),
                    "HF_HOME": os.path.join(work, "home"), "SHARDLOAD_LOG": "info"})
        env.pop("HF_HUB_OFFLINE", None)
        layout = ["--tp", "2", "--dp", "2", "--hub-backoff-base-ms", "10"]

        # 1. download on rank 0 + load on 4 ranks
        rc, _, err = run([mpirun, "-np", "4", cli, "load", "org/llama"] + layout +
                         ["--save-sharded", os.path.join(work, "hub-copy")], env)
        check(rc == 0, "load through the Hub succeeds (rc=%d): %s" % (rc, err[-2000:]))
        log = server.log()
        pids = {e["pid"] for e in log}
        check(len(log) > 0 and len(pids) == 1 and None not in pids,
              "exactly one client process connected (pids %s)" % sorted(map(str, pids)))
        m = re.search(r"\[shardload 0\] info: resolving 'org/llama' \(process (\d+)\)", err)
        check(m is not None, "rank 0 logged its pid")
        others = re.findall(r"\[shardload [123]\] info: resolving", err)
        check(not others, "no other rank tried to resolve the repository")
        if m is not None:
            check(pids == {int(m.group(1))}, "the connecting process is rank 0 (%s vs %s)" % (pids, m.group(1)))
        downloads = [e for e in log if e["method"] == "GET" and ".safetensors" in e["path"] and e["port"] == "cdn"]
        check(len(downloads) >= 3, "the three shards were downloaded (%d GETs)" % len(downloads))
        snap = os.path.join(work, "cache", "models--org--llama", "snapshots", sha)
        fixture = sorted(n for n in os.listdir(model_dir) if os.path.isfile(os.path.join(model_dir, n)))
        load_set = sorted(n for n in fixture if n == "config.json" or n.endswith(".safetensors")
                          or n.endswith(".safetensors.index.json"))
        extras = sorted(set(fixture) - set(load_set))
        check(extras != [], "the fixture has top-level non-weight files (%s)" % fixture)
        got = sorted(os.listdir(snap)) if os.path.isdir(snap) else []
        check(got == load_set, "the load fetched only what it reads: %s (expected %s)" % (got, load_set))
        rc, out, err = run([cli, "download", "org/llama", "--quiet"], env)
        got = sorted(os.listdir(snap)) if os.path.isdir(snap) else []
        check(rc == 0 and out.strip() == snap, "download succeeds (rc=%d): %s" % (rc, err[-1000:]))
        check(got == fixture, "download added the top-level non-weight files: %s (expected %s)" % (got, fixture))

        # 2. the same load from the folder: identical pre-sharded bytes
        rc, _, err = run([mpirun, "-np", "4", cli, "load", model_dir] + layout +
                         ["--save-sharded", os.path.join(work, "local-copy")], env)
        check(rc == 0, "local load succeeds: " + err[-2000:])
        # (the Hub snapshot holds only what a load needs: config.json and the weights, so the
        # other non-weight files of the folder are not in the hub copy)
        a = files_of(os.path.join(work, "hub-copy"))
        b = {k: v for k, v in files_of(os.path.join(work, "local-copy")).items() if k in a or k.startswith("model-")}
        check(sorted(a) == sorted(b), "same files (%s vs %s)" % (sorted(a), sorted(b)))
        check(all(a[k] == b.get(k) for k in a), "every pre-sharded byte is identical")
        check(sum(1 for k in a if k.startswith("model-rank-")) == 4, "one part per rank")

        # 3. second run: served from the cache, only the revision API asked
        server.clear()
        rc, _, err = run([mpirun, "-np", "4", cli, "load", "org/llama"] + layout, env)
        check(rc == 0, "cached load succeeds: " + err[-2000:])
        log = server.log()
        check(len(log) == 1 and "/api/models/org/llama/revision/" in log[0]["path"],
              "second run: one revision request only (%s)" % [e["path"] for e in log])

        # 4. offline: no request, cache hit works; a miss fails on every rank
        server.clear()
        env_off = dict(env, HF_HUB_OFFLINE="1")
        rc, _, err = run([mpirun, "-np", "4", cli, "load", "org/llama"] + layout, env_off)
        check(rc == 0, "offline cached load succeeds: " + err[-2000:])
        rc, _, err = run([mpirun, "-np", "4", cli, "load", "org/absent"] + layout, env_off)
        check(rc != 0, "offline miss fails")
        check("org/absent" in err and "offline" in err, "offline miss names the repository: " + err[-1500:])
        check(len(server.log()) == 0, "offline runs make no request")

        # 5. a repository the Hub does not know: every rank fails, the cause printed once
        rc, _, err = run([mpirun, "-np", "4", cli, "load", "org/nothing"] + layout, env, timeout=120)
        check(rc != 0, "unknown repository fails")
        check(err.count("HUB (REPO_NOT_FOUND)") == 1, "the cause is printed once: " + err[-1500:])
    finally:
        server.stop()
        shutil.rmtree(work, ignore_errors=True)
    print("%d failures" % len(FAILS), file=sys.stderr)
    return 1 if FAILS else 0


if __name__ == "__main__":
    sys.exit(main())
