#!/usr/bin/env python3
"""test_hub_overlap.py -- a load that overlaps its Hub download (docs/spec/HUB.md §13).

Through the local Hub server, from an empty cache, at 1 and 2 ranks:
  1. the load succeeds and its pre-sharded copy is byte-identical to the one loaded from the
     fixture folder itself; the weights' header requests are in flight together (each held 0.3 s
     by the server); the last weight file is held back by the server (a delay before its
     body), and rank 0's log shows a file being read while fewer files than all were complete,
     before the last file's "downloaded" line: ordering events, not times;
  2. the cache afterwards has the layout `shardload download` leaves: every snapshot entry a
     relative symlink to the same blob name, the same refs, no temporaries;
  3. the server failing the last weight file (HTTP 500 on every attempt) fails the load (mpirun
     non-zero, every rank leaving through the agreement) with the file named, and leaves no
     partial file visible: nothing in the snapshot for it, no blob that is not complete;
  4. at 2 ranks, with the watchdog's timeout at 1 s, the last weight file trickling in for about
     5 s (a small piece every 0.2 s): the load waits for it and succeeds, byte-identical, with no
     watchdog expiry: bytes still arriving are progress, however long one file takes;
  5. at 2 ranks, SIGINT to rank 0 while the last weight is in flight (its body stalled): the job
     ends non-zero, rank 0 says it was interrupted, every rank leaves, no temporary and nothing
     for that file in the snapshot or under a blob name stays; the next load completes byte-exact
     from that cache.
"""

import hashlib
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from test_hub import HubServer  # noqa: E402
from test_hub_load import FAILS, check, overlap_env, run, same_save  # noqa: E402  (the checks this test shares)

SHA = "0123456789abcdef0123456789abcdef01234567"
LAST = "model-00003-of-00003.safetensors"


def layout(cache):
    """Snapshot entries -> blob names, refs, and every name under blobs/."""
    repo = os.path.join(cache, "models--org--llama")
    snap = os.path.join(repo, "snapshots", SHA)
    links = {}
    for name in sorted(os.listdir(snap)) if os.path.isdir(snap) else []:
        p = os.path.join(snap, name)
        links[name] = os.readlink(p) if os.path.islink(p) else "(not a link)"
    refs = {}
    rdir = os.path.join(repo, "refs")
    for name in sorted(os.listdir(rdir)) if os.path.isdir(rdir) else []:
        with open(os.path.join(rdir, name)) as f:
            refs[name] = f.read()
    blobs = sorted(os.listdir(os.path.join(repo, "blobs"))) if os.path.isdir(os.path.join(repo, "blobs")) else []
    return links, refs, blobs


def blobs_complete(cache):
    """Every non-temporary LFS blob (64-hex name) hashes to its name."""
    bdir = os.path.join(cache, "models--org--llama", "blobs")
    bad = []
    for name in os.listdir(bdir) if os.path.isdir(bdir) else []:
        if len(name) == 64 and re.fullmatch(r"[0-9a-f]{64}", name):
            with open(os.path.join(bdir, name), "rb") as f:
                if hashlib.sha256(f.read()).hexdigest() != name:
                    bad.append(name)
    return bad


def trickle(server, model_dir, base, work, mpirun, cli, tp, ref):
    """Case 4: the last weight arrives in 25 pieces 0.2 s apart (about 5 s) under a 1 s timeout."""
    size = os.path.getsize(os.path.join(model_dir, LAST))
    piece = max(1, -(-size // 25))
    server.rules([{"port": "cdn", "method": "GET", "path": LAST, "range": False,
                   "action": {"slow": 0.2, "piece": piece}, "times": -1}])
    cache = os.path.join(work, "trickle")
    copy = os.path.join(work, "trickle-copy")
    rc, _, err = run([mpirun, "-np", "2", cli, "load", "org/llama"] + tp +
                     ["--timeout-s", "1", "--save-sharded", copy], dict(base, HF_HUB_CACHE=cache))
    check(rc == 0, "a download trickling for ~5 s under a 1 s timeout: the load succeeds (rc=%d): %s"
          % (rc, err[-2500:]))
    check("not heard from" not in err and "no progress" not in err,
          "trickling download: no watchdog expiry: " + err[-1500:])
    # The timeout did pass while the file arrived, and the watchdog waited on because of it.
    check(re.search(r"info: watchdog: .* but a rank made progress [0-9.]+ s ago: waiting on", err) is not None,
          "trickling download: the watchdog saw the timeout pass and waited on: " + err[-1500:])
    if rc == 0:
        check(same_save(copy, ref),
              "trickling download: every pre-sharded byte equals the local load's")
    server.rules([])


def rank0_pid(cli):
    """The pid of rank 0 of a running `shardload load` (Open MPI sets OMPI_COMM_WORLD_RANK), or None."""
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open("/proc/%s/cmdline" % pid, "rb") as f:
                argv = f.read().split(b"\0")
            with open("/proc/%s/environ" % pid, "rb") as f:
                env = f.read().split(b"\0")
        except OSError:
            continue
        if argv and argv[0] == cli.encode() and b"load" in argv and b"OMPI_COMM_WORLD_RANK=0" in env:
            return int(pid)
    return None


def temporaries(cache):
    bdir = os.path.join(cache, "models--org--llama", "blobs")
    return [n for n in os.listdir(bdir) if n.endswith(".incomplete")] if os.path.isdir(bdir) else []


def interrupt(server, base, work, mpirun, cli, tp, ref):
    """Case 5: the last weight's body stalls after 4 KiB; rank 0 gets SIGINT meanwhile."""
    server.rules([{"port": "cdn", "method": "GET", "path": LAST, "range": False,
                   "action": {"stall_after": 4096, "stall": 60}, "times": -1}])
    cache = os.path.join(work, "sigint")
    env = dict(base, HF_HUB_CACHE=cache)
    p = subprocess.Popen([mpirun, "-np", "2", cli, "load", "org/llama"] + tp, env=env, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    pid = None
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and p.poll() is None and (pid is None or not temporaries(cache)):
        pid = pid or rank0_pid(cli)
        time.sleep(0.05)
    check(pid is not None and temporaries(cache) != [],
          "SIGINT case: rank 0 found (%s) with the last weight in flight (temporaries %s)" % (pid, temporaries(cache)))
    if pid is not None:
        os.kill(pid, signal.SIGINT)
    try:
        _, err = p.communicate(timeout=90)
    except subprocess.TimeoutExpired:
        p.kill()
        _, err = p.communicate()
        check(False, "SIGINT case: the job did not end within 90 s of the signal: " + err[-2000:])
    check(p.returncode != 0, "SIGINT case: the job ends non-zero (rc=%s)" % p.returncode)
    check("interrupted by SIGINT" in err, "SIGINT case: rank 0 says it was interrupted: " + err[-2000:])
    check("not heard from" not in err, "SIGINT case: every rank left on its own: " + err[-1500:])
    check(temporaries(cache) == [], "SIGINT case: temporaries left: %s" % temporaries(cache))
    links, _, _ = layout(cache)
    check(LAST not in links, "SIGINT case: no snapshot entry for the interrupted file")
    check(blobs_complete(cache) == [], "SIGINT case: no partial blob under a blob name")
    # The next load from the same cache completes.
    server.rules([])
    copy = os.path.join(work, "sigint-copy")
    rc, _, err = run([mpirun, "-np", "2", cli, "load", "org/llama"] + tp + ["--save-sharded", copy], env)
    check(rc == 0, "SIGINT case: the next load succeeds: " + err[-2000:])
    if rc == 0:
        check(same_save(copy, ref),
              "SIGINT case, next load: every pre-sharded byte equals the local load's")


def main():
    fixtures = os.environ["SL_FIXTURES"]
    cli = os.environ["SL_CLI"]
    mpirun = os.environ["SL_MPIRUN"]
    model_dir = os.path.join(fixtures, "llama")
    work = tempfile.mkdtemp(prefix="sl-hubovl-")
    server = HubServer(work)
    try:
        base = overlap_env(server, work)
        # the last weight's body (a plain GET, not the ranged header request) comes 2 s late
        hold = [{"port": "cdn", "method": "GET", "path": LAST, "range": False, "action": {"delay": 2.0},
                 "times": -1},
                # every header request answers 0.3 s late, so that requests made one after the
                # other cannot overlap and requests made together must
                {"port": "hub", "method": "GET", "range": "bytes=0-65535", "action": {"delay": 0.3},
                 "times": -1}]
        for ranks in (1, 2):
            tp = ["--tp", str(ranks), "--hub-backoff-base-ms", "10"]
            # the reference: the same load from the fixture folder
            ref = os.path.join(work, "ref-%d" % ranks)
            env = dict(base, HF_HUB_CACHE=os.path.join(work, "unused"))
            rc, _, err = run([mpirun, "-np", str(ranks), cli, "load", model_dir] + tp + ["--save-sharded", ref], env)
            check(rc == 0, "%d rank(s): local load succeeds: %s" % (ranks, err[-1500:]))

            # 1. overlapped download + load
            cache = os.path.join(work, "cache-%d" % ranks)
            env = dict(base, HF_HUB_CACHE=cache)
            server.configure({"org/llama": {"dir": model_dir, "sha": SHA}}, rules=hold)
            copy = os.path.join(work, "hub-%d" % ranks)
            rc, _, err = run([mpirun, "-np", str(ranks), cli, "load", "org/llama"] + tp + ["--save-sharded", copy], env)
            check(rc == 0, "%d rank(s): load through the Hub succeeds (rc=%d): %s" % (ranks, rc, err[-2500:]))
            heads = [e for e in server.log() if e["port"] == "hub" and e["range"] == "bytes=0-65535"]
            most = max([sum(1 for o in heads if o["t"] <= e["t"] < (o["t_end"] or o["t"])) for e in heads] or [0])
            check(len(heads) == 3 and most >= 2,
                  "%d rank(s): the 3 weights' header requests were in flight together (%d requests, at most %d "
                  "at once)" % (ranks, len(heads), most))
            lines = err.splitlines()
            reads = [i for i, l in enumerate(lines)
                     if re.match(r"\[shardload 0\] info: reading \S+ \((\d+) of 3 files complete\)", l)
                     and int(re.search(r"\((\d+) of 3", l).group(1)) < 3]
            last = [i for i, l in enumerate(lines) if l.startswith("[shardload 0] info: downloaded %s" % LAST)]
            check(reads != [] and last != [] and reads[0] < last[0],
                  "%d rank(s): rank 0 read a file before the last one was downloaded: %s" % (ranks, err[-2500:]))
            if ranks == 2:
                check(any(l.startswith("[shardload 1] info: reading ") for l in lines),
                      "rank 1 read files as they arrived: " + err[-1500:])
            # every rank starts each complete file before the held-back one arrives (the contract;
            # this small fixture queues the held-back file's reads last, so the order readers take
            # operations in is not what this tells apart)
            late = [l for i, l in enumerate(lines) if last and i > last[0]
                    and re.match(r"\[shardload \d+\] info: reading (?!%s)" % re.escape(LAST), l)]
            check(last != [] and late == [],
                  "%d rank(s): no complete file is first read after the last one arrived: %s" % (ranks, late))
            if rc == 0:
                check(same_save(copy, ref),
                      "%d rank(s): every pre-sharded byte equals the local load's" % ranks)

            # 2. the cache is what `shardload download` leaves (for the files the load fetched)
            dl_cache = os.path.join(work, "dl-%d" % ranks)
            server.rules([])
            rc, out, err = run([cli, "download", "org/llama", "--quiet"], dict(base, HF_HUB_CACHE=dl_cache))
            check(rc == 0, "download succeeds: " + err[-1000:])
            la, ra, ba = layout(cache)
            ld, rd, bd = layout(dl_cache)
            check(la != {} and all(ld.get(k) == v for k, v in la.items()),
                  "%d rank(s): same snapshot links as shardload download (%s vs %s)" % (ranks, la, ld))
            check(ra == rd, "same refs (%s vs %s)" % (ra, rd))
            check(set(ba) <= set(bd) and not any(n.endswith(".incomplete") for n in ba),
                  "same blob names, no temporaries (%s vs %s)" % (ba, bd))
            check(blobs_complete(cache) == [], "every blob is complete")

            # 3. the last weight fails on the server: every rank fails, the file named, nothing partial
            cache = os.path.join(work, "fail-%d" % ranks)
            env = dict(base, HF_HUB_CACHE=cache)
            server.rules([{"port": "cdn", "method": "GET", "path": LAST, "range": False, "action": {"status": 500},
                           "times": -1}])
            rc, _, err = run([mpirun, "-np", str(ranks), cli, "load", "org/llama"] + tp, env)
            check(rc != 0, "%d rank(s): a failed download fails the load" % ranks)
            check(LAST in err and "500" in err, "%d rank(s): the failure names the file: %s" % (ranks, err[-2000:]))
            check("timeout_s" not in err and "not heard from" not in err,
                  "%d rank(s): no watchdog expiry: %s" % (ranks, err[-1500:]))
            links, _, blobs = layout(cache)
            check(LAST not in links, "%d rank(s): no snapshot entry for the failed file" % ranks)
            check(blobs_complete(cache) == [], "%d rank(s): no partial blob under a blob name (%s)" % (ranks, blobs))

            # 4. a download that outlasts the watchdog's timeout several times, bytes still arriving
            if ranks == 2:
                trickle(server, model_dir, base, work, mpirun, cli, tp, ref)
            # 5. SIGINT to rank 0 while a weight is in flight
            if ranks == 2:
                interrupt(server, base, work, mpirun, cli, tp, ref)
    finally:
        server.stop()
        shutil.rmtree(work, ignore_errors=True)
    print("%d failures" % len(FAILS), file=sys.stderr)
    return 1 if FAILS else 0


if __name__ == "__main__":
    sys.exit(main())
