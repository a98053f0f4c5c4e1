#!/usr/bin/env python3
"""test_s3.py -- the S3 client and s3:// loads against a local store (tests/s3/stack.py: s3rver
behind the fault-injecting front tests/s3/front.py), one group per ctest test:

  client  listing (every page, against an independent client's), reads at any offset over 1 or 4
          connections (each range asked once), virtual-host addressing, credentials from profile
          files with a session token, anonymous reads;
  errors  what the store refuses, each named with bucket, key and cause: unsigned, unknown key id,
          wrong secret, expired or invalid token, no such bucket or key, the bucket's region, an
          empty prefix, a strategy that needs local files, a profile that does not exist;
  faults  503 SlowDown, a connection dropped mid-range or stalled, a connection closed, an object
          replaced mid-read or mid-load, a store that never recovers: each ends with the right bytes
          or a clear error, never a hang, never a wrong byte, never a temporary file left;
  load    `shardload load s3://...` at 1-4 ranks, dense and MoE with expert parallelism, byte-exact
          against the same load from the fixture folder (whose bytes the mpi tests check against an
          independent reference); only rank 0 lists, every byte range asked once cluster-wide;
          the Python package loads s3:// too.
usage: test_s3.py --driver S3_DRIVER GROUP    (exit 77: node, s3rver or botocore missing)
"""

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import stack  # noqa: E402

FAILS = []


def check(cond, what):
    if not cond:
        FAILS.append(what)
        print("FAIL: " + what, file=sys.stderr, flush=True)
    return cond


class Ctx:
    def __init__(self, driver, work, st):
        self.driver = driver
        self.work = work
        self.st = st
        self.cli = os.environ.get("SL_CLI", "shardload")
        self.mpirun = os.environ.get("SL_MPIRUN", "mpirun")
        self.fixtures = os.environ.get("SL_FIXTURES", "fixtures")
        self.tmp = os.path.join(work, "tmp")  # TMPDIR of every process: must stay empty
        os.makedirs(self.tmp)

    def drv(self, *args, env=None, retry_s=10, timeout=120):
        argv = [self.driver, "--retry-s", str(retry_s)] + [str(a) for a in args]
        env = dict(env or self.st.env(), TMPDIR=self.tmp)
        t0 = time.time()
        p = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=timeout)
        try:
            out = json.loads(p.stdout.strip().splitlines()[-1])
        except (ValueError, IndexError):
            out = {"status": "NO_OUTPUT", "message": p.stderr[-2000:]}
        out["rc"] = p.returncode
        out["seconds"] = time.time() - t0
        return out

    def load(self, model, np=1, flags=(), env=None, save=None, timeout=240):
        argv = [self.mpirun, "-np", str(np), self.cli, "load", model] + list(flags)
        if save is not None:
            argv += ["--save-sharded", save]
        env = dict(env or self.st.env(), TMPDIR=self.tmp)
        t0 = time.time()
        p = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=timeout)
        return p.returncode, p.stdout, p.stderr, time.time() - t0

    def tmp_clean(self, what):
        left = os.listdir(self.tmp)
        check(left == [], "%s: no temporary file left (%s)" % (what, left))


def files_of(folder):
    out = {}
    for name in sorted(os.listdir(folder)):
        with open(os.path.join(folder, name), "rb") as f:
            out[name] = f.read()
    return out


def ranges(entries):
    """[(first, last)] of the 206 replies among entries, with the bytes each actually sent."""
    out = []
    for e in entries:
        m = re.match(r"^bytes=(\d+)-(\d+)$", e["range"] or "")
        if m and e["status"] == 206:
            out.append((int(m.group(1)), int(m.group(2)), e["bytes"]))
    return sorted(out)


def no_overlap(entries, what):
    """Every byte of every object asked once: the ranged replies of one key never overlap."""
    keys = {}
    for e in entries:
        keys.setdefault(e["key"], []).append(e)
    for key, es in keys.items():
        last = -1
        for a, b, _ in ranges(es):
            if not check(a > last, "%s: %s: bytes %d-%d asked again (up to %d already)" % (what, key, a, b, last)):
                return
            last = b


# ---- client -------------------------------------------------------------------------------------


def put_client_objects(ctx):
    up = os.path.join(ctx.work, "up")
    os.makedirs(up)
    big = os.urandom(3_000_000)
    with open(os.path.join(up, "big w+é.bin"), "wb") as f:
        f.write(big)
    with open(os.path.join(up, "small.json"), "w") as f:
        f.write('{"a": 1}')
    ctx.st.upload(up, "models", "client")
    return big


def group_client(ctx):
    st = ctx.st
    big = put_client_objects(ctx)
    key = "client/big w+é.bin"
    r = ctx.drv("list", "models", "client/")
    want = st.listing("models", "client/")
    got = [(o["key"], o["size"], o["etag"]) for o in r.get("objects", [])]
    check(r["status"] == "OK" and got == want, "listing as the independent client's: %s vs %s" % (got, want))
    etag = dict((k, e) for k, _, e in want).get(key, "-")
    if os.path.exists("/usr/bin/aws"):
        out = st.aws("s3api", "list-objects-v2", "--bucket", "models", "--prefix", "client/")
        check(sorted(o["Key"] for o in json.loads(out)["Contents"]) == sorted(k for k, _, _ in want),
              "awscli lists the same keys")
    # Pagination: 1005 objects, two pages of the store's 1000.
    st.put_many("models", {"many/%04d.txt" % i: b"x" * (i % 7) for i in range(1005)})
    want = st.listing("models", "many/")
    st.clear()
    r = ctx.drv("list", "models", "many/")
    lists = [e for e in st.log() if e["key"] is None]
    got = [(o["key"], o["size"], o["etag"]) for o in r.get("objects", [])]
    check(r["status"] == "OK" and len(got) == 1005 and got == want,
          "1005 objects listed over two pages (%s, %d)" % (r["status"], len(got)))
    check(len(lists) == 2 and "continuation-token=" in lists[1]["query"] and lists[1]["query"].index(
        "continuation-token") < lists[1]["query"].index("list-type"), "two pages, the second with its token first: %s" % [
        (e["query"], e["status"]) for e in lists])
    # Reads at any offset, over 1 or 4 connections, each range asked once, pinned by If-Match.
    for off, n, threads in ((0, 3_000_000, 1), (123, 2_000_001, 4), (2_999_999, 1, 1)):
        st.clear()
        out = os.path.join(ctx.work, "read.bin")
        r = ctx.drv("read", "models", key, etag, off, n, out, threads)
        data = open(out, "rb").read() if os.path.exists(out) else b""
        check(r["status"] == "OK" and data == big[off:off + n], "read %d+%d over %d: %s" % (off, n, threads,
                                                                                          r["message"]))
        gets = [e for e in st.log() if e["key"] == key]
        step = (n + threads - 1) // threads
        parts = sorted((off + i * step, off + min(n, (i + 1) * step) - 1) for i in range(threads))
        check([(a, b) for a, b, _ in ranges(gets)] == parts and len(gets) == threads,
              "each part asked once: %s vs %s" % (ranges(gets), parts))
        check(all(e["if_match"] == etag and e["auth"] == "ok" for e in gets), "signed, pinned to the ETag")
    # Virtual-host addressing, asked for in the config file; the endpoint as a host name.
    cfg = os.path.join(ctx.work, "vh.config")
    with open(cfg, "w") as f:
        f.write("[default]\ns3 =\n  addressing_style = virtual\n")
    st.clear()
    env = st.env(AWS_CONFIG_FILE=cfg, AWS_ENDPOINT_URL="http://localhost:%d" % st.port)
    r = ctx.drv("read", "models", key, etag, 10, 1000, os.path.join(ctx.work, "vh.bin"), env=env)
    hosts = {e["host"] for e in st.log()}
    check(r["status"] == "OK" and hosts == {"models.localhost:%d" % st.port},
          "virtual-host addressing: %s %s" % (r["message"], hosts))
    # A profile of the shared files, with a session token (signed: x-amz-security-token).
    st.configure(credentials={"AKPROFILE": {"secret": "profile/secret", "token": "session-token-1"}})
    creds = os.path.join(ctx.work, "credentials")
    with open(creds, "w") as f:
        f.write("[default]\naws_access_key_id = AKWRONG\naws_secret_access_key = x\n\n[dev]\n"
                "aws_access_key_id = AKPROFILE\naws_secret_access_key = profile/secret\n"
                "aws_session_token = session-token-1\n")
    conf = os.path.join(ctx.work, "config")
    with open(conf, "w") as f:
        f.write("# the profile's region\n[profile dev]\nregion = %s\n" % stack.REGION)
    env = st.env(AWS_ACCESS_KEY_ID=None, AWS_SECRET_ACCESS_KEY=None, AWS_REGION=None, AWS_PROFILE="dev",
                 AWS_SHARED_CREDENTIALS_FILE=creds, AWS_CONFIG_FILE=conf)
    c = ctx.drv("conf", env=env)
    check(c.get("access_key") == "AKPROFILE" and c.get("has_token") and "profile 'dev'" in c.get("creds_from", ""),
          "the profile's credentials: %s" % c)
    r = ctx.drv("read", "models", key, etag, 0, 10, os.path.join(ctx.work, "p.bin"), env=env)
    check(r["status"] == "OK", "read with the profile's credentials and token: " + r["message"])
    # Anonymous reads where the store allows them: sent unsigned.
    st.configure(anonymous=True)
    st.clear()
    env = st.env(AWS_ACCESS_KEY_ID=None, AWS_SECRET_ACCESS_KEY=None)
    r = ctx.drv("read", "models", key, "-", 0, 10, os.path.join(ctx.work, "a.bin"), env=env)
    check(r["status"] == "OK" and [e["auth"] for e in st.log()] == ["none"], "anonymous read: " + r["message"])
    st.configure()
    ctx.tmp_clean("client")


# ---- errors -------------------------------------------------------------------------------------


def expect(r, status, *words, what):
    """status: a status name, or "HUB/<cause>" for a store failure and its cause."""
    got = r["status"] if r["status"] != "HUB" else "HUB/" + r["cause"]
    ok = got == status and all(w in r["message"] for w in words)
    check(ok, "%s: %s %s (wanted %s with %s)" % (what, got, r["message"], status, words))


def group_errors(ctx):
    st = ctx.st
    put_client_objects(ctx)
    key = "client/small.json"
    out = os.path.join(ctx.work, "e.bin")
    env = st.env(AWS_ACCESS_KEY_ID=None, AWS_SECRET_ACCESS_KEY=None)
    expect(ctx.drv("read", "models", key, "-", 0, 4, out, env=env), "HUB/S3_ACCESS_DENIED", "s3://models/client/small.json",
           "access denied", "AccessDenied", "unsigned", what="unsigned, not anonymous")
    expect(ctx.drv("read", "models", key, "-", 0, 4, out, env=st.env(AWS_ACCESS_KEY_ID="AKNOPE")), "HUB/S3_UNKNOWN_KEY_ID",
           "InvalidAccessKeyId", "AWS_ACCESS_KEY_ID", what="unknown key id")
    expect(ctx.drv("list", "models", "client/", env=st.env(AWS_SECRET_ACCESS_KEY="wrong")), "HUB/S3_BAD_SIGNATURE",
           "listing s3://models/client/", "SignatureDoesNotMatch", what="wrong secret")
    st.configure(credentials={stack.ACCESS: {"secret": stack.SECRET, "token": "tok", "expired": True}})
    expect(ctx.drv("read", "models", key, "-", 0, 4, out, env=st.env(AWS_SESSION_TOKEN="tok")), "HUB/S3_EXPIRED_TOKEN",
           "has expired", "ExpiredToken", what="expired token")
    st.configure(credentials={stack.ACCESS: {"secret": stack.SECRET, "token": "tok"}})
    expect(ctx.drv("read", "models", key, "-", 0, 4, out, env=st.env(AWS_SESSION_TOKEN="other")), "HUB/S3_INVALID_TOKEN",
           "InvalidToken", what="wrong token")
    st.configure()
    expect(ctx.drv("read", "nobucket", "k", "-", 0, 4, out), "HUB/S3_NO_SUCH_BUCKET", "bucket 'nobucket' does not exist",
           "NoSuchBucket", what="no such bucket")
    expect(ctx.drv("read", "models", "client/nothing", "-", 0, 4, out), "HUB/S3_NO_SUCH_KEY", "s3://models/client/nothing",
           "NoSuchKey", what="no such key")
    st.configure(bucket_regions={"models": "eu-west-1"})
    expect(ctx.drv("list", "models", "client/"), "HUB/S3_WRONG_REGION", "is in region eu-west-1, not us-east-1",
           "AWS_REGION=eu-west-1", what="wrong region")
    expect(ctx.drv("read", "models", key, "-", 0, 4, out, env=st.env(AWS_REGION="eu-west-1")), "OK",
           what="the right region")
    st.configure()
    bad = os.path.join(ctx.work, "bad.config")
    with open(bad, "w") as f:
        f.write("[default]\nregion = us-east-1\nnot a setting\n")
    expect(ctx.drv("list", "models", "client/", env=st.env(AWS_CONFIG_FILE=bad)), "CONFIG", bad, "line 3",
           what="a malformed config file")
    # The same through a load: every rank fails with the cause, nothing hangs.
    rc, _, err, secs = ctx.load("s3://models/nothing/here", np=2, flags=["--tp", "2"])
    check(rc != 0 and "s3://models/nothing/here: no objects under this prefix" in err,
          "an empty prefix fails the load: " + err[-800:])
    rc, _, err, _ = ctx.load("s3://models/client", np=1, flags=["--load-strategy", "mmap"])
    check(rc != 0 and "ranged GETs" in err and "load_strategy 'mmap'" in err, "mmap refused for s3://: " + err[-600:])
    rc, _, err, _ = ctx.load("s3://models/client", np=1, env=st.env(AWS_PROFILE="ghost"))
    check(rc != 0 and "AWS_PROFILE=ghost: no such profile" in err, "a missing profile: " + err[-600:])
    rc, _, err, secs = ctx.load("s3://models/client", np=2, flags=["--dp", "2"],
                                env=st.env(AWS_SECRET_ACCESS_KEY="wrong"))
    check(rc != 0 and "SignatureDoesNotMatch" in err and secs < 60, "bad credentials fail the load: " + err[-600:])
    ctx.tmp_clean("errors")


# ---- faults -------------------------------------------------------------------------------------


def slowdown(times, key=None, method="GET"):
    rule = {"method": method, "times": times, "action": {"status": 503, "code": "SlowDown",
                                                         "message": "Please reduce your request rate."}}
    if key is not None:
        rule["key"] = key
    return rule


def group_faults_client(ctx, big, key, etag):
    st = ctx.st
    out = os.path.join(ctx.work, "f.bin")

    def read(off, n, threads=1, retry_s=10):
        if os.path.exists(out):
            os.remove(out)
        r = ctx.drv("read", "models", key, etag, off, n, out, threads, retry_s=retry_s)
        data = open(out, "rb").read() if os.path.exists(out) else None
        return r, data

    st.configure(rules=[slowdown(2, key)])
    r, data = read(5, 2_000_000)
    codes = [e["status"] for e in st.log()]
    check(r["status"] == "OK" and data == big[5:2_000_005] and codes[:3] == [503, 503, 206],
          "SlowDown twice, then the bytes: %s %s" % (r["message"], codes))
    st.configure(rules=[slowdown(-1, key)])
    r, data = read(0, 1000, retry_s=2)
    check(r["status"] == "HUB" and r["cause"] == "HTTP" and "gave up after" in r["message"] and "SlowDown" in r["message"] and
          key in r["message"] and r["seconds"] < 20, "a store that stays slow: %s (%.1f s)" % (r["message"],
                                                                                             r["seconds"]))
    st.configure(rules=[{"method": "GET", "key": key, "times": 1, "action": {"drop_after": 100000}}])
    r, data = read(1000, 2_000_000)
    rs = ranges(st.log())
    check(r["status"] == "OK" and data == big[1000:2_001_000], "dropped mid-range, resumed: " + r["message"])
    check(len(rs) == 2 and rs[0][2] == 100000 and rs[1][0] == 1000 + 100000,
          "the rest asked for, not the whole range again: %s" % rs)
    st.configure(rules=[{"method": "GET", "key": key, "times": 1,
                         "action": {"stall_after": 50000, "stall": 6}}])
    r, data = read(0, 1_000_000, retry_s=8)
    check(r["status"] == "OK" and data == big[:1_000_000], "a stalled connection cut and resumed: " + r["message"])
    st.configure(rules=[{"method": "GET", "key": key, "times": 1, "action": {"close": True}}])
    r, data = read(0, 4096)
    check(r["status"] == "OK" and data == big[:4096], "a connection closed without a reply: " + r["message"])
    st.configure(rules=[{"list": True, "times": 1, "action": {"status": 500, "code": "InternalError"}}])
    r = ctx.drv("list", "models", "client/")
    check(r["status"] == "OK" and len(r["objects"]) == 2, "a listing page tried again: " + r["message"])
    # Replaced during a read of four parts: the read fails, naming the object; the store keeps
    # the new bytes (the next read, pinned to the new ETag, would succeed).
    st.configure(rules=[{"method": "GET", "key": key, "times": 1, "action": {"replace": "new content"}}])
    r, data = read(0, 2_000_000, threads=4)
    check(r["status"] == "HUB" and r["cause"] == "S3_CHANGED" and "replaced during the load" in r["message"] and key in r["message"],
          "an object replaced mid-read: " + r["message"])
    st.configure()


def reference_save(ctx, model, np, flags):
    out = os.path.join(ctx.work, "ref-%s-%d-%s" % (model, np, "_".join(flags).replace("-", "")))
    if not os.path.exists(out):
        rc, _, err, _ = ctx.load(os.path.join(ctx.fixtures, model), np=np, flags=flags, save=out)
        check(rc == 0, "the local load of %s at %d ranks: %s" % (model, np, err[-1500:]))
    return out


def compare_saves(ctx, s3_save, ref, what):
    if not (os.path.isdir(s3_save) and os.path.isdir(ref)):
        check(False, "%s: both saves exist" % what)
        return
    a = files_of(s3_save)
    b = {k: v for k, v in files_of(ref).items() if k in a or k.startswith("model-")}
    check(sorted(a) == sorted(b), "%s: the same files (%s vs %s)" % (what, sorted(a), sorted(b)))
    check(all(a[k] == b.get(k) for k in a), "%s: every saved byte identical" % what)
    check(not any(k.endswith(".tmp") for k in os.listdir(s3_save)), "%s: no temporary file in the save" % what)


def group_faults(ctx):
    st = ctx.st
    big = put_client_objects(ctx)
    key = "client/big w+é.bin"
    etag = dict((k, e) for k, _, e in st.listing("models", "client/"))[key]
    group_faults_client(ctx, big, key, etag)
    st.upload(os.path.join(ctx.fixtures, "llama"), "models", "llama")
    flags = ["--tp", "2", "--timeout-s", "20"]
    ref = reference_save(ctx, "llama", 2, ["--tp", "2"])
    shard = "llama/model-00002-of-00003.safetensors"
    # Faults a load lives through: SlowDown on a shard, a range cut short, a 500 on the listing.
    st.configure(rules=[slowdown(3, shard), {"method": "GET", "key": "00003", "range": True, "times": 1,
                                            "action": {"drop_after": 3000}},
                        {"list": True, "times": 1, "action": {"status": 500, "code": "InternalError"}}])
    save = os.path.join(ctx.work, "faults-ok")
    rc, _, err, _ = ctx.load("s3://models/llama", np=2, flags=flags, save=save)
    check(rc == 0, "a load through SlowDown, a cut range and a 500: " + err[-1500:])
    compare_saves(ctx, save, ref, "faulty store")
    codes = [e["status"] for e in st.log()]
    check(codes.count(503) == 3 and codes.count(500) == 1, "the faults happened (%s)" % codes)
    # Replaced mid-load: every rank fails, naming the object; nothing saved, nothing hangs.
    # (after 2: rank 0's two header requests go through; the first read of a rank replaces it)
    st.configure(rules=[{"method": "GET", "key": shard, "range": True, "after": 2, "times": 1,
                         "action": {"replace": "replaced"}}])
    save = os.path.join(ctx.work, "faults-replaced")
    rc, _, err, secs = ctx.load("s3://models/llama", np=2, flags=flags, save=save)
    check(rc != 0 and "replaced during the load" in err and "s3://models/" + shard in err and secs < 90,
          "an object replaced mid-load fails the load, naming it (%.1f s): %s" % (secs, err[-1500:]))
    check(not os.path.exists(save) or os.listdir(save) == [], "nothing saved by the failed load")
    st.upload(os.path.join(ctx.fixtures, "llama"), "models", "llama")  # the original bytes back
    # A store that never recovers: a clear error within the watchdog's bound, never a hang.
    rule = slowdown(-1, "llama/model-00001")
    rule["after"] = 2  # the headers read, the ranks' reads fail
    st.configure(rules=[rule])
    rc, _, err, secs = ctx.load("s3://models/llama", np=2, flags=["--tp", "2", "--timeout-s", "6"])
    check(rc != 0 and "gave up after" in err and "SlowDown" in err and secs < 60,
          "a shard that stays unavailable fails the load (%.1f s): %s" % (secs, err[-1500:]))
    check("watchdog" not in err, "the S3 error ends the load before the watchdog does: " + err[-800:])
    st.configure()
    ctx.tmp_clean("faults")


# ---- load ---------------------------------------------------------------------------------------


def load_case(ctx, model, np, flags):
    st = ctx.st
    what = "%s at %d ranks %s" % (model, np, " ".join(flags))
    ref = reference_save(ctx, model, np, flags)
    st.clear()
    save = os.path.join(ctx.work, "s3-%s-%d-%s" % (model, np, "_".join(flags).replace("-", "")))
    report = os.path.join(ctx.work, "report-%s-%d.json" % (model, np))
    rc, _, err, _ = ctx.load("s3://models/" + model, np=np, flags=list(flags) + ["--report", report], save=save)
    if not check(rc == 0, "%s: the s3:// load succeeds: %s" % (what, err[-2000:])):
        return
    compare_saves(ctx, save, ref, what)
    log = st.log()
    lists = [e for e in log if e["key"] is None]
    check(len(lists) == 1, "%s: one listing (%d)" % (what, len(lists)))
    meta = [e for e in log if e["key"] is None or e["key"].endswith(".json") or e["range"] == "bytes=0-7"]
    check(len({e["pid"] for e in meta}) == 1, "%s: one process lists and reads the headers" % what)
    weights = [e for e in log if e["key"] is not None and e["key"].endswith(".safetensors")]
    check(all(e["status"] == 206 and e["if_match"] for e in weights), "%s: ranged GETs pinned to ETags" % what)
    check(len({e["pid"] for e in weights}) <= np, "%s: at most one process per rank" % what)
    no_overlap(weights, what)
    # What the store sent for the weights is what the ranks read (the report), plus rank 0's headers.
    with open(report) as f:
        rep = json.load(f)
    headers = [e for e in weights if e["pid"] == meta[0]["pid"] and re.match(r"^bytes=(0-7|8-\d+)$", e["range"])]
    sent = sum(b - a + 1 for a, b, _ in ranges(weights)) - sum(b - a + 1 for a, b, _ in ranges(headers))
    check(sent == rep["bytes_read"], "%s: the store sent what the ranks read (%d vs %d)" % (what, sent,
                                                                                           rep["bytes_read"]))


def python_case(ctx):
    script = os.path.join(ctx.work, "py_s3.py")
    with open(script, "w") as f:
        f.write("""import sys
from mpi4py import MPI
import torch
import shardload
comm = MPI.COMM_WORLD
def params(model):
    with shardload.Loader(model, comm, tp=2) as l:
        l.load()
        return {k: v.contiguous().view(torch.uint8).flatten().clone() for k, v in l.params().items()}
a = params(sys.argv[1])
b = params(sys.argv[2])
ok = len(a) > 0 and sorted(a) == sorted(b) and all(torch.equal(a[k], b[k]) for k in a)
bad = comm.allreduce(0 if ok else 1)
print("python s3 load:", "same" if bad == 0 else "DIFFERENT", flush=True)
sys.exit(1 if bad else 0)
""")
    env = ctx.st.env(PYTHONPATH=os.path.join(stack.SOURCE, "python"),
                     SHARDLOAD_LIBRARY=os.path.join(os.environ.get("SL_BUILD_DIR", ""), "lib", "libshardload.so"),
                     TMPDIR=ctx.tmp, LD_PRELOAD=os.environ.get("SL_PY_PRELOAD"))
    py = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else sys.executable  # Debian's: mpi4py, torch
    if subprocess.run([py, "-c", "import mpi4py, torch"], capture_output=True).returncode != 0:
        print("the Python load skipped: %s lacks mpi4py or torch" % py, file=sys.stderr)
        return
    p = subprocess.run([ctx.mpirun, "-np", "2", py, script, "s3://models/llama", os.path.join(ctx.fixtures, "llama")],
                       env=env, capture_output=True, text=True, timeout=240)
    check(p.returncode == 0 and "same" in p.stdout, "the Python package loads s3:// byte-exact: %s %s" % (
        p.stdout[-500:], p.stderr[-1500:]))


def group_load(ctx):
    st = ctx.st
    for model in ("llama", "qwen2_moe"):
        st.upload(os.path.join(ctx.fixtures, model), "models", model)
    load_case(ctx, "llama", 1, [])
    load_case(ctx, "llama", 2, ["--tp", "2"])
    load_case(ctx, "llama", 3, ["--dp", "3"])
    load_case(ctx, "llama", 4, ["--tp", "2", "--dp", "2"])
    load_case(ctx, "qwen2_moe", 2, ["--tp", "2", "--enable-expert-parallel"])
    load_case(ctx, "qwen2_moe", 4, ["--tp", "2", "--dp", "2", "--enable-expert-parallel"])
    python_case(ctx)
    ctx.tmp_clean("load")


GROUPS = {"client": group_client, "errors": group_errors, "faults": group_faults, "load": group_load}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--driver", required=True)
    ap.add_argument("group", choices=sorted(GROUPS))
    args = ap.parse_args()
    work = tempfile.mkdtemp(prefix="sl-s3-%s-" % args.group)
    st = None
    try:
        try:
            st = stack.S3Stack(work)
        except stack.Skip as e:
            print("SKIP: %s" % e)
            return 77
        GROUPS[args.group](Ctx(args.driver, work, st))
    finally:
        if st is not None:
            st.stop()
        shutil.rmtree(work, ignore_errors=True)
    print("%s: %d failures" % (args.group, len(FAILS)), file=sys.stderr)
    return 1 if FAILS else 0


if __name__ == "__main__":
    sys.exit(main())
