#!/usr/bin/env python3
"""test_hub_overlap_small.py -- a weight file no larger than the header request, in a load that
overlaps its Hub download (docs/spec/HUB.md §13 step 2).

The llama fixture with its last shard split in two: a small one (about 21 KB, under the 64 KiB
that the first header request asks for) and a large one; the other shards stay larger than 64 KiB,
so the load overlaps its download. Through the local Hub server, from an empty cache:
  1. at 2 ranks: the load is byte-exact against the load of the folder itself; the server's log
     shows exactly one GET that carried the small file's bytes (the header request,
     bytes=0-65535): it is not downloaded again; rank 0 says it is complete before any other
     weight is downloaded; the load's report counts one download per file (files and bytes equal
     to the snapshot's), and the small file's blob hashes to its name;
  2. the server flipping the small file's last byte: the load fails with the checksum mismatch
     naming the file, and leaves nothing for it in the snapshot, no blob that is not complete and
     no temporary;
  3. a server that ignores the small file's byte range (200 with all of it): the overlap is off
     (as for any server without ranges), the load is byte-exact, and the file is still fetched
     once;
  4. the same repository with its safetensors files as plain git files (no LFS: etags are git
     blob sha1s, served by the Hub itself): one GET for the small file, byte-exact; its last byte
     flipped: refused by the git blob hash.
"""

import hashlib
import json
import os
import re
import shutil
import struct
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from test_hub import HubServer  # noqa: E402
from test_hub_load import FAILS, check, overlap_env, run, same_save  # noqa: E402  (the checks this test shares)

SHA = "89abcdef0123456789abcdef0123456789abcdef"
REPO = "org/llama-small"
SMALL = "model-00003-of-00004.safetensors"
N_SMALL_TENSORS = 5  # the first tensors of the fixture's last shard: about 21 KB with the header


def read_st(path):
    """[(name, info, bytes)] of a safetensors file, in data order, and its metadata."""
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    meta = header.pop("__metadata__", None)
    body = data[8 + n:]
    tensors = sorted(header.items(), key=lambda kv: kv[1]["data_offsets"][0])
    return [(k, v, body[v["data_offsets"][0]:v["data_offsets"][1]]) for k, v in tensors], meta


def write_st(path, tensors, meta):
    header = {"__metadata__": meta} if meta is not None else {}
    off = 0
    for name, info, data in tensors:
        header[name] = {"dtype": info["dtype"], "shape": info["shape"], "data_offsets": [off, off + len(data)]}
        off += len(data)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(d for _, _, d in tensors))


def make_model(src, dst):
    """The llama fixture as four shards, the third one small."""
    os.makedirs(dst)
    with open(os.path.join(src, "model.safetensors.index.json")) as f:
        index = json.load(f)
    old = sorted(set(index["weight_map"].values()))
    check(len(old) == 3, "the llama fixture has 3 shards (%s)" % old)
    new_map = {}
    for i, name in enumerate(old[:2]):
        new = "model-%05d-of-00004.safetensors" % (i + 1)
        shutil.copyfile(os.path.join(src, name), os.path.join(dst, new))
        new_map[name] = new
    tensors, meta = read_st(os.path.join(src, old[2]))
    parts = [(SMALL, tensors[:N_SMALL_TENSORS]), ("model-00004-of-00004.safetensors", tensors[N_SMALL_TENSORS:])]
    for new, part in parts:
        write_st(os.path.join(dst, new), part, meta)
    where = {t[0]: new for new, part in parts for t in part}
    index["weight_map"] = {k: where.get(k, new_map.get(v)) for k, v in index["weight_map"].items()}
    with open(os.path.join(dst, "model.safetensors.index.json"), "w") as f:
        json.dump(index, f, indent=2)
    for name in os.listdir(src):
        if not name.endswith(".safetensors") and name != "model.safetensors.index.json":
            shutil.copyfile(os.path.join(src, name), os.path.join(dst, name))
    sizes = {n: os.path.getsize(os.path.join(dst, n)) for n in os.listdir(dst) if n.endswith(".safetensors")}
    check(sizes[SMALL] < 65536 and all(s > 65536 for n, s in sizes.items() if n != SMALL),
          "one shard under the 64 KiB header request, the others over it: %s" % sizes)


def repo_dir(cache):
    return os.path.join(cache, "models--org--llama-small")


def snapshot(cache):
    """{name: size} of the snapshot's entries."""
    snap = os.path.join(repo_dir(cache), "snapshots", SHA)
    names = sorted(os.listdir(snap)) if os.path.isdir(snap) else []
    return {n: os.path.getsize(os.path.join(snap, n)) for n in names}


def blobs_bad(cache):
    """Temporaries, and blobs whose content does not hash to their name (sha256 or git blob sha1)."""
    bdir = os.path.join(repo_dir(cache), "blobs")
    bad = []
    for name in sorted(os.listdir(bdir)) if os.path.isdir(bdir) else []:
        with open(os.path.join(bdir, name), "rb") as f:
            data = f.read()
        ok = (len(name) == 64 and hashlib.sha256(data).hexdigest() == name) or \
             (len(name) == 40 and hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest() == name)
        if not ok:
            bad.append(name)
    return bad


def small_gets(server, port):
    """The GETs that carried the small file's bytes (the LFS redirect on the Hub carries none)."""
    return [e for e in server.log() if e["method"] == "GET" and e["port"] == port and SMALL in e["path"]
            and e["status"] in (200, 206)]


def same(copy, ref, what):
    check(same_save(copy, ref),
          "%s: every pre-sharded byte equals the local load's" % what)


def corrupted(server, base, work, mpirun, cli, port, case):
    """The small file's last byte flipped by the server: refused by verification, nothing left."""
    size = os.path.getsize(os.path.join(work, "model", SMALL))
    server.rules([{"port": port, "method": "GET", "path": SMALL, "action": {"corrupt": size - 1}, "times": -1}])
    cache = os.path.join(work, "corrupt-" + case)
    rc, _, err = run([mpirun, "-np", "1", cli, "load", REPO, "--hub-backoff-base-ms", "10"],
                     dict(base, HF_HUB_CACHE=cache))
    check(rc != 0, "%s: a corrupted small file fails the load" % case)
    check(re.search(r"checksum mismatch for %s" % re.escape(SMALL), err) is not None,
          "%s: the failure is the checksum mismatch of the small file: %s" % (case, err[-2000:]))
    check(SMALL not in snapshot(cache), "%s: no snapshot entry for the refused file" % case)
    check(blobs_bad(cache) == [], "%s: no temporary, no blob that is not complete: %s" % (case, blobs_bad(cache)))
    server.rules([])


def main():
    fixtures = os.environ["SL_FIXTURES"]
    cli = os.environ["SL_CLI"]
    mpirun = os.environ["SL_MPIRUN"]
    work = tempfile.mkdtemp(prefix="sl-hubsmall-")
    server = HubServer(work)
    try:
        model = os.path.join(work, "model")
        make_model(os.path.join(fixtures, "llama"), model)
        base = overlap_env(server, work)
        tp = ["--tp", "2", "--hub-backoff-base-ms", "10"]
        ref = os.path.join(work, "ref")
        rc, _, err = run([mpirun, "-np", "2", cli, "load", model] + tp + ["--save-sharded", ref],
                         dict(base, HF_HUB_CACHE=os.path.join(work, "unused")))
        check(rc == 0, "local load of the four-shard model succeeds: %s" % err[-1500:])

        # 1. overlapped load, 2 ranks: the small file fetched once, by its header request
        server.configure({REPO: {"dir": model, "sha": SHA}})
        cache = os.path.join(work, "cache")
        copy = os.path.join(work, "copy")
        report = os.path.join(work, "report.json")
        rc, _, err = run([mpirun, "-np", "2", cli, "load", REPO] + tp + ["--save-sharded", copy, "--report", report],
                         dict(base, HF_HUB_CACHE=cache))
        check(rc == 0, "load through the Hub succeeds (rc=%d): %s" % (rc, err[-2500:]))
        check("weight files of %s to download: loading them as they arrive" % REPO in err,
              "the load overlapped its download: " + err[-1500:])
        gets = small_gets(server, "cdn")
        check([e["range"] for e in gets] == ["bytes=0-65535"],
              "one GET carried the small file, its header request: %s" % [(e["range"], e["status"]) for e in gets])
        lines = err.splitlines()
        kept = [i for i, l in enumerate(lines)
                if l.startswith("[shardload 0] info: downloaded %s (weight file 3 of 4, whole with its header "
                                "request)" % SMALL)]
        others = [i for i, l in enumerate(lines) if re.match(r"\[shardload 0\] info: downloaded model-0000[124]", l)]
        check(kept != [] and others != [] and kept[0] < min(others),
              "rank 0: the small file complete before any other weight is downloaded: " + err[-2500:])
        if rc == 0:
            same(copy, ref, "overlapped load")
            with open(report) as f:
                dl = json.load(f)["download"]
            snap = snapshot(cache)
            check(dl["files"] == len(snap) and dl["bytes"] == sum(snap.values()),
                  "the report counts each file once: %s vs %d files, %d bytes in the snapshot"
                  % (dl, len(snap), sum(snap.values())))
        check(SMALL in snapshot(cache) and blobs_bad(cache) == [],
              "the small file is in the snapshot, every blob complete: %s" % blobs_bad(cache))

        # 2. the small file corrupted by the server: refused (sha256 of an LFS file)
        corrupted(server, base, work, mpirun, cli, "cdn", "LFS")

        # 3. a server without ranges for the small file: one GET all the same
        server.configure({REPO: {"dir": model, "sha": SHA}},
                         rules=[{"port": "cdn", "method": "GET", "path": SMALL, "action": {"ignore_range": True},
                                 "times": -1}])
        copy = os.path.join(work, "copy-noranges")
        rc, _, err = run([mpirun, "-np", "1", cli, "load", REPO, "--hub-backoff-base-ms", "10",
                          "--save-sharded", copy], dict(base, HF_HUB_CACHE=os.path.join(work, "cache-noranges")))
        check(rc == 0, "no ranges: the load succeeds (rc=%d): %s" % (rc, err[-2500:]))
        check("the Hub ignores byte ranges" in err, "no ranges: the overlap is off: " + err[-1500:])
        gets = small_gets(server, "cdn")
        check([e["status"] for e in gets] == [200], "no ranges: one GET carried the small file: %s"
              % [(e["range"], e["status"]) for e in gets])
        if rc == 0:
            ref1 = os.path.join(work, "ref1")
            rc1, _, err1 = run([mpirun, "-np", "1", cli, "load", model, "--save-sharded", ref1],
                               dict(base, HF_HUB_CACHE=os.path.join(work, "unused")))
            check(rc1 == 0, "local load at 1 rank succeeds: " + err1[-1500:])
            same(copy, ref1, "no ranges")

        # 4. safetensors files as git files (git blob sha1 etags, served by the Hub itself)
        server.configure({REPO: {"dir": model, "sha": SHA, "lfs": []}})
        copy = os.path.join(work, "copy-git")
        cache = os.path.join(work, "cache-git")
        rc, _, err = run([mpirun, "-np", "2", cli, "load", REPO] + tp + ["--save-sharded", copy],
                         dict(base, HF_HUB_CACHE=cache))
        check(rc == 0, "git files: the load succeeds (rc=%d): %s" % (rc, err[-2500:]))
        gets = small_gets(server, "hub")
        check([e["range"] for e in gets] == ["bytes=0-65535"],
              "git files: one GET carried the small file: %s" % [(e["range"], e["status"]) for e in gets])
        if rc == 0:
            same(copy, ref, "git files")
        check(blobs_bad(cache) == [], "git files: every blob complete: %s" % blobs_bad(cache))
        corrupted(server, base, work, mpirun, cli, "hub", "git files")
    finally:
        server.stop()
        shutil.rmtree(work, ignore_errors=True)
    print("%d failures" % len(FAILS), file=sys.stderr)
    return 1 if FAILS else 0


if __name__ == "__main__":
    sys.exit(main())
