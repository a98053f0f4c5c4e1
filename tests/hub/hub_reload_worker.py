#!/usr/bin/env python3
"""hub_reload_worker.py -- one rank of tests/hub/test_hub_reload.py (run under mpirun): a load of
org/model through the local Hub server, then reloads as the repository's main branch moves
(docs/spec/DESIGN.md §10). Rank 0 re-points the server between the steps (its control endpoint),
every rank checks its tensors against the reference read from the served folder itself
(tests/python/common.py). Environment: HF_ENDPOINT and HF_HOME (the test's server and cache),
SL_RELOAD_A / SL_RELOAD_B (the folders of the two commits), SL_RELOAD_SHA_A / SL_RELOAD_SHA_B,
SL_RELOAD_CHANGED (the one weight file that differs between them).
"""

import json
import os
import sys
import urllib.request

sys.path.insert(0, os.path.join(os.environ.get("SL_SOURCE_DIR", "."), "tests", "python"))
import common  # noqa: E402

common.need(["numpy", "torch", "mpi4py"])

from mpi4py import MPI  # noqa: E402

import shardload  # noqa: E402

comm = MPI.COMM_WORLD
rank, world = comm.Get_rank(), comm.Get_size()
fails = []
A, B = os.environ["SL_RELOAD_A"], os.environ["SL_RELOAD_B"]
SHA_A, SHA_B = os.environ["SL_RELOAD_SHA_A"], os.environ["SL_RELOAD_SHA_B"]
CHANGED = os.environ["SL_RELOAD_CHANGED"]
lay = common.Layout(world, rank, world)


def check(cond, msg):
    if not cond:
        fails.append(msg)


def control(path, payload=None):
    data = json.dumps(payload).encode() if payload is not None else None
    req = urllib.request.Request(os.environ["HF_ENDPOINT"] + path, data=data,
                                 method="POST" if data is not None else "GET")
    with urllib.request.urlopen(req, timeout=10) as r:
        return json.loads(r.read())


def serve(folder, sha):
    """Rank 0 points main at commit sha served from folder (the log is cleared); every rank waits."""
    if rank == 0:
        control("/_test/config", {"repos": {"org/model": {"dir": folder, "sha": sha}}, "rules": [],
                                  "renames": {}})
    comm.Barrier()


def content_gets():
    """Rank 0: the paths the client fetched content for (GET, not the revision API)."""
    return [e["path"] for e in control("/_test/log") if e["method"] == "GET" and "/api/" not in e["path"]]


def same(tag, tensors, folder):
    ref = common.reference(common.Checkpoint(folder), lay)
    for name, t in tensors.items():
        check(common.raw(t) == common.raw(ref[name]), "%s: %s differs from %s" % (tag, name, folder))


try:
    serve(A, SHA_A)
    loader = shardload.Loader("org/model", comm, tp=world, quiet=True, hub_backoff_base_ms=10)
    loader.load()
    tensors = loader.params()
    same("load", tensors, A)

    # main moves to B: only the weight file whose hash changed is downloaded
    serve(B, SHA_B)
    loader.reload()
    same("reload of main at B", tensors, B)
    if rank == 0:
        check(loader.report().get("commit") == SHA_B, "the report names commit B: %s" % loader.report().get("commit"))
        gets = content_gets()
        check(len(gets) >= 1 and all(CHANGED in p for p in gets),
              "only %s was downloaded: %s" % (CHANGED, gets))
        blobs = os.listdir(os.path.join(os.environ["HF_HOME"], "hub", "models--org--model", "blobs"))
        loaded = [n for n in os.listdir(A) if n == "config.json" or n.endswith(".safetensors")
                  or n.endswith(".safetensors.index.json")]
        check(len(blobs) == len(loaded) + 1, "the files of commit A and one more: %d blobs for %d files"
              % (len(blobs), len(loaded)))

    # a revision the Hub does not know: refused on every rank, nothing changed
    try:
        loader.reload(revision="no-such-branch")
        check(False, "an unknown revision was not refused")
    except shardload.Error as e:
        check(type(e).__name__ == "HubRevisionNotFoundError", "unknown revision: %s: %s" % (type(e).__name__, e))
    same("refused revision", tensors, B)

    # main back at A: every file is in the cache, nothing is downloaded
    serve(A, SHA_A)
    loader.reload(revision="main")
    same("reload of main at A", tensors, A)
    if rank == 0:
        check(content_gets() == [], "back at A: no download (%s)" % content_gets())
    loader.close()
except Exception as e:  # noqa: BLE001 — one rank's exception is a failure, not a hang
    fails.append("%s: %s" % (type(e).__name__, e))
common.finish_mpi(comm, "hub_reload_worker", fails)
