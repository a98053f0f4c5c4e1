#!/usr/bin/env python3
"""test_hub.py -- the `hub` tests: the Hub client against tests/hub/server.py (docs/spec/HUB.md §11).

usage: test_hub.py --driver PATH [--cli PATH] GROUP...
  groups: basic, faults, parallel, errors, locks, cli, signals, nospace (each a ctest test of its own)

Each scenario starts from an empty cache folder, configures the server (repositories, renames,
fault rules; the request log is cleared), runs tests/hub/hub_driver (or the shardload CLI) with
HF_ENDPOINT, HF_HUB_CACHE and a private HOME, and checks the driver's JSON result, the server's
request log (methods, raw paths, Range and Authorization headers, client pids) and the exact
cache tree. The fixture repository is written here: config.json, an index and three safetensors
shards (LFS, served through the CDN port), plus tokenizer/README/nested files (git files).
Exit status: 0 when every check passed, 77 when a group could not run here (nospace needs root to
mount a small tmpfs), else 1.
"""

import argparse
import fcntl
import hashlib
import json
import os
import shutil
import signal
import socket
import stat
import struct
import subprocess
import sys
import tempfile
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
SHA = "1f2e3d4c5b6a79881f2e3d4c5b6a79881f2e3d4c"
SHA_PR = "a1a2a3a4a5a6a7a8a9a0b1b2b3b4b5b6b7b8b9b0"
OTHER_SHA = "0000000000000000000000000000000000000bad"
REPO = "org/model"
SHARDS = ["model-00001-of-00003.safetensors", "model-00002-of-00003.safetensors",
          "model-00003-of-00003.safetensors"]
INDEX = "model.safetensors.index.json"
WEIRD = "a b/c+d#\u00e9.json"
WEIRD_RAW = "a%20b/c%2Bd%23%C3%A9.json"

FAILURES = []
CHECKS = [0]


def check(cond, msg):
    CHECKS[0] += 1
    if not cond:
        FAILURES.append(msg)
        print("FAIL: %s" % msg, file=sys.stderr, flush=True)
    return cond


# ---- fixture ---------------------------------------------------------------------------------

def safetensors_bytes(tensors):
    """A valid safetensors file: {name: (n_floats, seed)}."""
    header = {}
    data = b""
    for name in sorted(tensors):
        n, seed = tensors[name]
        chunk = b"".join(struct.pack("<f", float((seed * 7919 + i * 31) % 1000) / 10.0) for i in range(n))
        header[name] = {"dtype": "F32", "shape": [n], "data_offsets": [len(data), len(data) + len(chunk)]}
        data += chunk
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    return struct.pack("<Q", len(h)) + h + data


def write(path, data):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(data if isinstance(data, bytes) else data.encode())


def make_fixture(root, shard_floats=(6000, 9000, 4000), index_override=None, extra=None):
    """The model folder; returns {path: bytes}."""
    files = {}
    weight_map = {}
    for k, name in enumerate(SHARDS):
        tensors = {"model.layers.%d.w" % k: (shard_floats[k], k + 1), "model.layers.%d.b" % k: (16, k + 11)}
        files[name] = safetensors_bytes(tensors)
        for t in tensors:
            weight_map[t] = name
    files[INDEX] = json.dumps(index_override or {"metadata": {"total_size": 1}, "weight_map": weight_map}).encode()
    files["config.json"] = json.dumps({"architectures": ["LlamaForCausalLM"], "hidden_size": 16}).encode()
    files["tokenizer.json"] = b'{"version": "1.0"}'
    files["README.md"] = b"# test model\n"
    files["generation_config.json"] = b"{}"
    files[".gitattributes"] = b"*.safetensors filter=lfs\n"
    files["original/params.json"] = b'{"dim": 16}'
    files[WEIRD] = b'{"weird": true}'
    files["training_args.bin"] = b"pickle"
    files.update(extra or {})
    for path, data in files.items():
        write(os.path.join(root, path), data)
    return files


def git_sha1(data):
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def etag_of(path, data):
    return hashlib.sha256(data).hexdigest() if path.endswith(".safetensors") else git_sha1(data)


# ---- server ----------------------------------------------------------------------------------

class HubServer:
    def __init__(self, workdir, rate=None):
        self.port_file = os.path.join(workdir, "ports.json")
        extra = ["--rate", str(rate)] if rate else []
        self.proc = subprocess.Popen([sys.executable, os.path.join(HERE, "server.py"), "--port-file", self.port_file]
                                     + extra, stdout=subprocess.DEVNULL, stderr=sys.stderr)
        deadline = time.time() + 20
        while not os.path.exists(self.port_file):
            if time.time() > deadline or self.proc.poll() is not None:
                raise RuntimeError("the test Hub server did not start")
            time.sleep(0.02)
        with open(self.port_file) as f:
            ports = json.load(f)
        self.hub = ports["hub"]
        self.cdn = ports["cdn"]
        self.endpoint = "http://127.0.0.1:%d" % self.hub

    def _call(self, path, payload=None):
        data = json.dumps(payload).encode() if payload is not None else None
        req = urllib.request.Request(self.endpoint + path, data=data, method="POST" if data is not None else "GET")
        with urllib.request.urlopen(req, timeout=10) as r:
            return json.loads(r.read())

    def configure(self, repos, rules=None, renames=None):
        self._call("/_test/config", {"repos": repos, "rules": rules or [], "renames": renames or {}})

    def rules(self, rules):
        self._call("/_test/rules", rules)

    def log(self):
        return self._call("/_test/log")

    def clear(self):
        self._call("/_test/clear", {})

    def stop(self):
        self.proc.terminate()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()


# ---- environment of one scenario -------------------------------------------------------------

class Scenario:
    """A temp folder with the fixture, a cache and a HOME; runs the driver."""

    def __init__(self, ctx, name, **fixture_args):
        self.ctx = ctx
        self.name = name
        self.dir = tempfile.mkdtemp(prefix="sl-hub-%s-" % name)
        self.model = os.path.join(self.dir, "model")
        self.files = make_fixture(self.model, **fixture_args)
        self.cache = os.path.join(self.dir, "cache")
        self.home = os.path.join(self.dir, "home")
        os.makedirs(self.home)
        self.repo_dir = os.path.join(self.cache, "models--org--model")
        self.snap = os.path.join(self.repo_dir, "snapshots", SHA)

    def repo_spec(self, **extra):
        spec = {"dir": self.model, "sha": SHA, "refs": {"main": SHA, "v1.0": SHA, "refs/pr/1": SHA_PR}}
        spec.update(extra)
        return spec

    def serve(self, rules=None, renames=None, repos=None, **extra):
        self.ctx.server.configure(repos or {REPO: self.repo_spec(**extra)}, rules, renames)

    def env(self, **over):
        env = {k: v for k, v in os.environ.items() if not (k.startswith("HF_") or k.startswith("HUGGING")
                                                             or k == "TRANSFORMERS_OFFLINE")}
        env.update({"HF_ENDPOINT": self.ctx.server.endpoint, "HF_HUB_CACHE": self.cache, "HOME": self.home,
                    "XDG_CACHE_HOME": os.path.join(self.home, ".cache"), "ASAN_OPTIONS": "detect_leaks=0"})
        for k, v in over.items():
            if v is None:
                env.pop(k, None)
            else:
                env[k] = v
        return env

    def run(self, *args, env=None, public=False, timeout=90, background=False):
        argv = [self.ctx.driver] + (["--public"] if public else []) + ["model=" + REPO, "hub_backoff_base_ms=10",
                                                                        "quiet=true"] + list(args)
        if background:
            return subprocess.Popen(argv, env=env or self.env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                    text=True)
        p = subprocess.run(argv, env=env or self.env(), capture_output=True, text=True, timeout=timeout)
        return parse_result(p.stdout, p.stderr, p.returncode, self.name)

    def cleanup(self):
        for root, dirs, _files in os.walk(self.dir):
            for d in dirs:
                try:
                    os.chmod(os.path.join(root, d), 0o755)
                except OSError:
                    pass
        shutil.rmtree(self.dir, ignore_errors=True)


def parse_result(stdout, stderr, rc, name):
    lines = [l for l in stdout.splitlines() if l.startswith("{")]
    if not lines:
        check(False, "%s: the driver printed no result (rc %d); stderr:\n%s" % (name, rc, stderr[-3000:]))
        return {"status": "NONE", "message": "", "snapshot": "", "stderr": stderr, "rc": rc, "files_downloaded": 0,
                "bytes_downloaded": 0, "fallback": False, "pid": -1, "commit": "", "format": ""}
    res = json.loads(lines[-1])
    res["stderr"] = stderr
    res["rc"] = rc
    check((rc == 0) == (res["status"] == "OK"), "%s: exit status %d with status %s" % (name, rc, res["status"]))
    return res


def expect_ok(sc, res, what=""):
    return check(res["status"] == "OK", "%s%s: expected OK, got %s: %s\n%s" % (
        sc.name, what, res["status"], res["message"], res.get("stderr", "")[-2000:]))


def expect_err(sc, res, status, *needles):
    """status: a status name, or "HUB/<cause>" for SL_STATUS_HUB with that sl_hub_cause."""
    got = res["status"] if res["status"] != "HUB" else "HUB/" + res.get("cause", "")
    ok = check(got == status, "%s: expected %s, got %s: %s" % (sc.name, status, got, res["message"]))
    for n in needles:
        ok = check(n in res["message"], "%s: message lacks %r: %s" % (sc.name, n, res["message"])) and ok
    return ok


def cache_tree(root):
    """{relative path: ("D",) | ("F", content bytes) | ("L", link text)} of everything under root."""
    out = {}
    if not os.path.isdir(root):
        return out
    for dirpath, dirs, files in os.walk(root):
        for d in list(dirs):
            p = os.path.join(dirpath, d)
            rel = os.path.relpath(p, root)
            if os.path.islink(p):
                out[rel] = ("L", os.readlink(p))
                dirs.remove(d)
            else:
                out[rel] = ("D",)
        for f in files:
            p = os.path.join(dirpath, f)
            rel = os.path.relpath(p, root)
            if os.path.islink(p):
                out[rel] = ("L", os.readlink(p))
            else:
                with open(p, "rb") as fh:
                    out[rel] = ("F", fh.read())
    return out


def expected_tree(sc, paths, refs=("main",), commit=SHA):
    """The exact cache tree after downloading paths of the fixture at commit."""
    tree = {"CACHEDIR.TAG": None, ".locks": ("D",), ".locks/models--org--model": ("D",),
            "models--org--model": ("D",), "models--org--model/blobs": ("D",),
            "models--org--model/snapshots": ("D",), "models--org--model/snapshots/" + commit: ("D",)}
    if refs:
        tree["models--org--model/refs"] = ("D",)
    for r in refs:
        parts = r.split("/")
        for i in range(1, len(parts)):
            tree["models--org--model/refs/" + "/".join(parts[:i])] = ("D",)
        tree["models--org--model/refs/" + r] = ("F", commit.encode())
    for p in paths:
        data = sc.files[p]
        e = etag_of(p, data)
        tree["models--org--model/blobs/" + e] = ("F", data)
        parts = p.split("/")
        for i in range(1, len(parts)):
            tree["models--org--model/snapshots/%s/%s" % (commit, "/".join(parts[:i]))] = ("D",)
        tree["models--org--model/snapshots/%s/%s" % (commit, p)] = ("L", "../" * (2 + p.count("/")) + "blobs/" + e)
    return tree


def check_tree(sc, paths, refs=("main",), commit=SHA, stale_locks=False):
    """stale_locks: a process killed with SIGKILL may leave the lock file of a blob it had
    finished but not yet unlocked (the lock itself died with it); such files are allowed."""
    got = cache_tree(sc.cache)
    want = expected_tree(sc, paths, refs, commit)
    if stale_locks:
        got = {k: v for k, v in got.items()
               if not (k.startswith(".locks/models--org--model/") and k.endswith(".lock"))}
    tag = got.get("CACHEDIR.TAG")
    check(tag is not None and tag[0] == "F" and
          tag[1].split(b"\n")[0] == b"Signature: 8a477f597d28d172789f06886806bc55",
          "%s: CACHEDIR.TAG first line" % sc.name)
    got.pop("CACHEDIR.TAG", None)
    want.pop("CACHEDIR.TAG", None)
    extra = sorted(set(got) - set(want))
    missing = sorted(set(want) - set(got))
    check(not extra and not missing, "%s: cache tree differs: unexpected %s, missing %s" % (sc.name, extra, missing))
    for k in sorted(set(got) & set(want)):
        check(got[k] == want[k], "%s: cache entry %s is %r, expected %r" % (sc.name, k, got[k][:2] if got[k][0] != "F"
                                                                            else ("F", len(got[k][1])),
                                                                            want[k] if want[k][0] != "F" else
                                                                            ("F", len(want[k][1]))))


def reqs(log, method=None, port=None, contains=None):
    return [e for e in log if (method is None or e["method"] == method) and (port is None or e["port"] == port)
            and (contains is None or contains in e["path"])]


DEFAULT_FILES = ["config.json", INDEX] + SHARDS


def blob_path(sc, path, data=None):
    return os.path.join(sc.repo_dir, "blobs", etag_of(path, sc.files[path] if data is None else data))


def leftovers(sc):
    blobs = os.path.join(sc.repo_dir, "blobs")
    return sorted(f for f in os.listdir(blobs) if f.endswith(".incomplete")) if os.path.isdir(blobs) else []


# ---- basic -----------------------------------------------------------------------------------

def t_multi_shard(ctx):
    sc = Scenario(ctx, "multi_shard")
    sc.serve()
    res = sc.run()
    if expect_ok(sc, res):
        check(res["snapshot"] == sc.snap, "multi_shard: snapshot %s" % res["snapshot"])
        check(res["commit"] == SHA and res["format"] == "hf", "multi_shard: commit/format %s %s" % (res["commit"],
                                                                                                  res["format"]))
        check(res["files_downloaded"] == 5, "multi_shard: files_downloaded %d" % res["files_downloaded"])
        total = sum(len(sc.files[p]) for p in DEFAULT_FILES)
        check(res["bytes_downloaded"] == total, "multi_shard: bytes %d != %d" % (res["bytes_downloaded"], total))
    check_tree(sc, DEFAULT_FILES)
    with open(os.path.join(sc.repo_dir, "refs", "main"), "rb") as f:
        check(f.read() == SHA.encode(), "multi_shard: refs/main is exactly the commit, no newline")
    log = ctx.server.log()
    api = reqs(log, "GET", "hub", "/api/")
    check(len(api) == 1 and api[0]["path"] == "/api/models/org/model/revision/main",
          "multi_shard: one revision API call, got %s" % [e["path"] for e in api])
    heads = reqs(log, "HEAD")
    check(sorted(e["path"] for e in heads) == sorted("/org/model/resolve/%s/%s" % (SHA, p) for p in DEFAULT_FILES),
          "multi_shard: one HEAD per file at the commit: %s" % [e["path"] for e in heads])
    check(not reqs(log, "HEAD", "cdn"), "multi_shard: no HEAD on the CDN (absolute redirects are not followed)")
    cdn = reqs(log, "GET", "cdn")
    check(sorted(e["path"].split("/")[-1].split("?")[0] for e in cdn) == sorted(SHARDS),
          "multi_shard: one CDN GET per shard: %s" % [e["path"] for e in cdn])
    check(all(e["headers"].get("accept-encoding") == "identity" for e in log), "multi_shard: Accept-Encoding identity")
    check(all(e["headers"].get("user-agent", "").startswith("shardload/") and "libcurl/" in e["headers"]["user-agent"]
              for e in log), "multi_shard: User-Agent shardload/<v> libcurl/<v>")
    check(all(e["pid"] == res["pid"] for e in log), "multi_shard: every request came from the driver process: %s" %
          sorted({e["pid"] for e in log}, key=str))
    check("training_args.bin" not in os.listdir(sc.snap), "multi_shard: non-selected files not downloaded")

    # Second run: exactly one request (the revision API), nothing downloaded.
    ctx.server.clear()
    res = sc.run()
    expect_ok(sc, res, " (second run)")
    log = ctx.server.log()
    check(len(log) == 1 and log[0]["method"] == "GET" and "/revision/main" in log[0]["path"],
          "multi_shard: second run makes exactly one request: %s" % [(e["method"], e["path"]) for e in log])
    check(res["files_downloaded"] == 0, "multi_shard: second run downloads nothing")
    check_tree(sc, DEFAULT_FILES)

    # Offline: no request at all; same snapshot.
    ctx.server.clear()
    res = sc.run(env=sc.env(HF_HUB_OFFLINE="1"))
    expect_ok(sc, res, " (offline)")
    check(res["snapshot"] == sc.snap, "multi_shard: offline snapshot")
    check(not ctx.server.log(), "multi_shard: offline makes no request")
    res = sc.run("offline=true", env=sc.env(HF_HUB_OFFLINE="0", TRANSFORMERS_OFFLINE="1"))
    expect_ok(sc, res, " (offline option)")
    check(not ctx.server.log(), "multi_shard: offline option makes no request")

    # A 40-hex revision with the snapshot complete: no request.
    res = sc.run("revision=" + SHA)
    expect_ok(sc, res, " (hex40)")
    check(not ctx.server.log(), "multi_shard: hex40 revision with a complete snapshot makes no request")

    # refs/main with a trailing newline (another client) works offline.
    write(os.path.join(sc.repo_dir, "refs", "main"), SHA + "\n")
    res = sc.run(env=sc.env(HF_HUB_OFFLINE="1"))
    expect_ok(sc, res, " (refs with newline)")

    # Offline misses fail cleanly, naming what is missing.
    res = sc.run("revision=v9", env=sc.env(HF_HUB_OFFLINE="1"))
    expect_err(sc, res, "HUB/OFFLINE", "org/model@v9", "offline")
    os.unlink(os.path.join(sc.snap, SHARDS[1]))
    res = sc.run(env=sc.env(HF_HUB_OFFLINE="1"))
    expect_err(sc, res, "HUB/OFFLINE", SHARDS[1])
    res = sc.run("revision=" + OTHER_SHA, env=sc.env(HF_HUB_OFFLINE="1"))
    expect_err(sc, res, "HUB/OFFLINE", OTHER_SHA)
    check(not ctx.server.log(), "multi_shard: offline failures make no request")

    # Online again: only the missing shard is fetched (its blob is still there: no GET at all).
    res = sc.run()
    expect_ok(sc, res, " (repair)")
    log = ctx.server.log()
    check([e["method"] for e in log] == ["GET", "HEAD"] and SHARDS[1] in log[1]["path"],
          "multi_shard: repair = API + one HEAD: %s" % [(e["method"], e["path"]) for e in log])
    check_tree(sc, DEFAULT_FILES)
    sc.cleanup()


def t_tree_file(ctx):
    sc = Scenario(ctx, "tree_file")
    sc.serve()
    expect_ok(sc, sc.run())
    # Remove the index and a shard: without a tree file the folder is used as it is.
    os.unlink(os.path.join(sc.snap, INDEX))
    os.unlink(os.path.join(sc.snap, SHARDS[2]))
    res = sc.run(env=sc.env(HF_HUB_OFFLINE="1"))
    expect_ok(sc, res, " (no tree file)")
    trees = os.path.join(sc.repo_dir, "trees")
    os.makedirs(trees)
    write(os.path.join(trees, SHA + ".json"), json.dumps(
        {"format_version": 1, "files": [{"path": p, "type": "file"} for p in sorted(sc.files)]}))
    res = sc.run(env=sc.env(HF_HUB_OFFLINE="1"))
    expect_err(sc, res, "HUB/OFFLINE", "incomplete snapshot", SHARDS[2])
    sc.cleanup()


def t_all_and_include(ctx):
    sc = Scenario(ctx, "all_include")
    sc.serve()
    res = sc.run("download_all=true", "include=original/*", "include=a b/*")
    expect_ok(sc, res)
    extras = ["tokenizer.json", "README.md", "generation_config.json", ".gitattributes"]
    check_tree(sc, DEFAULT_FILES + extras + ["original/params.json", WEIRD])
    log = ctx.server.log()
    check(any(e["path"] == "/org/model/resolve/%s/%s" % (SHA, WEIRD_RAW) for e in reqs(log, "HEAD")),
          "all_include: encpath golden seen by the server: %s" % [e["path"] for e in reqs(log, "HEAD")])
    check(not reqs(log, contains="training_args"), "all_include: weight-like extras are not added by --all")
    # '*.json' does not reach into original/ unless the pattern names it.
    sc2 = Scenario(ctx, "include_original")
    sc2.serve()
    expect_ok(sc2, sc2.run("include=*.json"))
    check(not os.path.exists(os.path.join(sc2.snap, "original")), "include_original: original/ ignored by default")
    check(os.path.exists(os.path.join(sc2.snap, WEIRD)), "include_original: '*.json' matched a nested file")
    sc.cleanup()
    sc2.cleanup()


def t_revisions(ctx):
    sc = Scenario(ctx, "revisions")
    sc.serve(refs={"main": SHA, "v1.0": SHA, "refs/pr/1": SHA})
    res = sc.run("revision=refs/pr/1")
    expect_ok(sc, res)
    log = ctx.server.log()
    check(log[0]["path"] == "/api/models/org/model/revision/refs%2Fpr%2F1",
          "revisions: enc golden refs%%2Fpr%%2F1 on the server side: %s" % log[0]["path"])
    check(all("/resolve/%s/" % SHA in e["path"] for e in reqs(log, "HEAD")), "revisions: files use the commit")
    res = sc.run("revision=v1.0")
    expect_ok(sc, res)
    check_tree(sc, DEFAULT_FILES, refs=("refs/pr/1", "v1.0"))
    # hex40 revision on an empty cache: the API is asked (file list), no refs written.
    sc2 = Scenario(ctx, "revision_hex")
    sc2.serve()
    res = sc2.run("revision=" + SHA)
    expect_ok(sc2, res)
    check(ctx.server.log()[0]["path"] == "/api/models/org/model/revision/" + SHA, "revision_hex: API path")
    check_tree(sc2, DEFAULT_FILES, refs=())
    sc.cleanup()
    sc2.cleanup()


def t_renamed_and_auth(ctx):
    sc = Scenario(ctx, "renamed")
    sc.serve(renames={"old-org/model": REPO})
    res = sc.run("model=old-org/model", env=sc.env(HF_TOKEN="hf_secret"))
    expect_ok(sc, res)
    log = ctx.server.log()
    heads = reqs(log, "HEAD")
    old = [e for e in heads if e["path"].startswith("/old-org/model/resolve/")]
    new = [e for e in heads if e["path"].startswith("/org/model/resolve/")]
    check(len(old) == 5 and len(new) == 5, "renamed: each HEAD followed the relative 307 once: %d/%d" % (len(old),
                                                                                                           len(new)))
    check(all(e["auth"] == "Bearer hf_secret" for e in heads), "renamed: token kept on same-host HEAD redirects")
    api = reqs(log, "GET", "hub", "/api/")
    check(len(api) == 2 and all(e["auth"] == "Bearer hf_secret" for e in api),
          "renamed: API redirect followed with the token: %s" % [(e["path"], e["auth"]) for e in api])
    cdn = reqs(log, "GET", "cdn")
    check(len(cdn) == 3 and all(e["auth"] is None for e in cdn), "renamed: no Authorization on the CDN port")
    hub_gets = [e for e in reqs(log, "GET", "hub") if "/resolve/" in e["path"]]
    check(len(hub_gets) == 2 and all(e["auth"] == "Bearer hf_secret" for e in hub_gets),
          "renamed: Authorization kept on same-host file GETs: %s" % [(e["path"], e["auth"]) for e in hub_gets])
    old_dir = os.path.join(sc.cache, "models--old-org--model")
    check(os.path.isdir(os.path.join(old_dir, "snapshots", SHA)), "renamed: cached under the requested id")
    sc.cleanup()


def t_tokens(ctx):
    cases = [
        ("config_wins", ["hub_token=hf_cfg"], {"HF_TOKEN": "hf_env"}, "Bearer hf_cfg"),
        ("cleaned", [], {"HF_TOKEN": "hf_x\r\n"}, "Bearer hf_x"),
        ("hf_token_first", [], {"HF_TOKEN": "hf_a", "HUGGING_FACE_HUB_TOKEN": "hf_b"}, "Bearer hf_a"),
        ("legacy", [], {"HUGGING_FACE_HUB_TOKEN": "hf_legacy"}, "Bearer hf_legacy"),
        ("file", [], {"__file": " hf_file\n"}, "Bearer hf_file"),
        ("implicit_off", [], {"HF_TOKEN": "hf_env", "HF_HUB_DISABLE_IMPLICIT_TOKEN": "1"}, None),
        ("implicit_off_cfg", ["hub_token=hf_cfg"], {"HF_TOKEN": "hf_env", "HF_HUB_DISABLE_IMPLICIT_TOKEN": "true"},
         "Bearer hf_cfg"),
        ("empty", [], {"HF_TOKEN": " \r\n"}, None),
    ]
    for name, args, envs, want in cases:
        sc = Scenario(ctx, "token_" + name)
        sc.serve()
        envs = dict(envs)
        if "__file" in envs:
            write(os.path.join(sc.home, ".cache", "huggingface", "token"), envs.pop("__file"))
        res = sc.run(*args, env=sc.env(**envs))
        expect_ok(sc, res)
        log = ctx.server.log()
        hub = [e for e in log if e["port"] == "hub"]
        check(hub and all(e["auth"] == want for e in hub),
              "token_%s: Authorization %r expected, got %s" % (name, want, sorted({str(e["auth"]) for e in hub})))
        check(all(e["auth"] is None for e in log if e["port"] == "cdn"), "token_%s: no token to the CDN" % name)
        sc.cleanup()


def t_no_symlinks(ctx):
    sc = Scenario(ctx, "no_symlinks")
    sc.serve()
    res = sc.run(env=sc.env(HF_HUB_DISABLE_SYMLINKS="1"))
    expect_ok(sc, res)
    for p in DEFAULT_FILES:
        full = os.path.join(sc.snap, p)
        check(os.path.isfile(full) and not os.path.islink(full), "no_symlinks: %s is a regular file" % p)
        with open(full, "rb") as f:
            check(f.read() == sc.files[p], "no_symlinks: %s content" % p)
    ctx.server.clear()
    expect_ok(sc, sc.run(env=sc.env(HF_HUB_DISABLE_SYMLINKS="1")), " (second run)")
    check(len(ctx.server.log()) == 1, "no_symlinks: regular files count as cached")
    sc.cleanup()


def t_readonly(ctx):
    sc = Scenario(ctx, "readonly")
    sc.serve()
    expect_ok(sc, sc.run())
    for root, dirs, files in os.walk(sc.cache):
        for n in dirs + files:
            p = os.path.join(root, n)
            if not os.path.islink(p):
                os.chmod(p, stat.S_IMODE(os.stat(p).st_mode) & ~0o222)
    os.chmod(sc.cache, 0o555)
    ctx.server.clear()
    res = sc.run()
    expect_ok(sc, res, " (read-only cache)")
    check(len(ctx.server.log()) == 1, "readonly: one request")
    res = sc.run(env=sc.env(HF_HUB_OFFLINE="1"))
    expect_ok(sc, res, " (read-only cache, offline)")
    sc.cleanup()


def t_public_api(ctx):
    sc = Scenario(ctx, "public_api")
    sc.serve()
    res = sc.run(public=True)
    expect_ok(sc, res)
    check(res["snapshot"] == sc.snap, "public_api: snapshot")
    res = sc.run("model=org/missing", public=True)
    expect_err(sc, res, "HUB/REPO_NOT_FOUND", "HF_TOKEN")
    sc.cleanup()


def t_progress(ctx):
    """Progress goes to stderr only when it is a TTY and quiet is off, at most ~4 lines a second."""
    import pty
    sc = Scenario(ctx, "progress")
    sc.serve(rules=[shard_rule(k, {"slow": 0.1}, times=-1) for k in range(3)])
    master, slave = pty.openpty()
    argv = [ctx.driver, "model=" + REPO, "hub_backoff_base_ms=10"]
    t0 = time.time()
    p = subprocess.Popen(argv, env=sc.env(), stdout=subprocess.PIPE, stderr=slave)
    os.close(slave)
    chunks = []
    while True:
        try:
            data = os.read(master, 65536)
        except OSError:
            break
        if not data:
            break
        chunks.append(data)
    p.wait(timeout=60)
    elapsed = time.time() - t0
    os.close(master)
    text = b"".join(chunks).decode(errors="replace")
    draws = text.count("\r")
    check(p.returncode == 0, "progress: driver failed")
    check("files]" in text and "total" in text and "/s" in text and any(x in text for x in SHARDS),
          "progress: per-file and overall figures on the TTY: %r" % text[-300:])
    check(1 <= draws <= 4 * elapsed + 3, "progress: %d redraws in %.1f s" % (draws, elapsed))
    sc2 = Scenario(ctx, "progress_quiet")
    sc2.serve()
    res = sc2.run()  # stderr is a pipe here (and quiet is set)
    check("files]" not in res["stderr"], "progress: nothing when stderr is not a TTY")
    sc.cleanup()
    sc2.cleanup()


# ---- faults ----------------------------------------------------------------------------------

def shard_rule(k, action, times=1, **match):
    rule = {"port": "cdn", "method": "GET", "path": SHARDS[k], "times": times, "action": action}
    rule.update(match)
    return rule


def t_drop_resume(ctx):
    sc = Scenario(ctx, "drop_resume")
    sc.serve(rules=[shard_rule(1, {"drop_after": 10000})])
    res = sc.run()
    expect_ok(sc, res)
    gets = reqs(ctx.server.log(), "GET", "cdn", SHARDS[1])
    check([e["range"] for e in gets] == [None, "bytes=10000-"], "drop_resume: resumed with Range: %s" %
          [e["range"] for e in gets])
    check_tree(sc, DEFAULT_FILES)
    sc.cleanup()


def t_dead_attempts(ctx):
    sc = Scenario(ctx, "dead_attempts")
    sc.serve(rules=[shard_rule(0, {"drop_after": 5000}), shard_rule(0, {"drop_after": 0}, times=-1)])
    res = sc.run("hub_parallel_files=1")
    expect_err(sc, res, "HUB/NETWORK", SHARDS[0], "5 consecutive")
    gets = reqs(ctx.server.log(), "GET", "cdn", SHARDS[0])
    check([e["range"] for e in gets] == [None] + ["bytes=5000-"] * 5, "dead_attempts: 1 + 5 requests: %s" %
          [e["range"] for e in gets])
    check(not os.path.exists(blob_path(sc, SHARDS[0])), "dead_attempts: no blob")
    check(not os.path.lexists(os.path.join(sc.snap, SHARDS[0])), "dead_attempts: no pointer")
    inc = leftovers(sc)
    check(inc == [etag_of(SHARDS[0], sc.files[SHARDS[0]]) + ".incomplete"], "dead_attempts: resumable temp kept: %s"
          % inc)
    # The next run resumes it.
    sc.serve()
    expect_ok(sc, sc.run(), " (resume run)")
    gets = reqs(ctx.server.log(), "GET", "cdn", SHARDS[0])
    check([e["range"] for e in gets] == ["bytes=5000-"], "dead_attempts: next run resumes at 5000: %s" %
          [e["range"] for e in gets])
    check_tree(sc, DEFAULT_FILES)
    sc.cleanup()


def api_rule(action, times=1):
    return {"port": "hub", "method": "GET", "path": "/api/models/", "times": times, "action": action}


def api_times(log):
    return [e["t"] for e in reqs(log, "GET", "hub", "/api/")]


def t_retry_waits(ctx):
    sc = Scenario(ctx, "retry_503")
    sc.serve(rules=[api_rule({"status": 503}, times=2)])
    res = sc.run("hub_backoff_base_ms=100")
    expect_ok(sc, res)
    t = api_times(ctx.server.log())
    check(len(t) == 3, "retry_503: 3 API attempts, got %d" % len(t))
    if len(t) == 3:
        check(0.095 <= t[1] - t[0] < 1.5 and 0.19 <= t[2] - t[1] < 1.5,
              "retry_503: waits of 1 and 2 units (100 ms): %.3f %.3f" % (t[1] - t[0], t[2] - t[1]))
    cases = [("retry_after", {"status": 429, "headers": {"Retry-After": "2"}}, 0.29, 1.5),
             ("ratelimit", {"status": 429, "headers": {"RateLimit": '"default";r=0;t=5'}}, 0.59, 2.0),
             ("cap", {"status": 429, "headers": {"Retry-After": "600"}}, 0.59, 2.5)]
    for name, action, low, high in cases:
        sc2 = Scenario(ctx, "retry_" + name)
        sc2.serve(rules=[api_rule(action)])
        res = sc2.run("hub_backoff_base_ms=%d" % (100 if name != "cap" else 10))
        expect_ok(sc2, res)
        t = api_times(ctx.server.log())
        check(len(t) == 2 and low <= t[1] - t[0] < high, "retry_%s: wait %.3f s not in [%.2f, %.2f)" % (
            name, t[1] - t[0] if len(t) == 2 else -1, low, high))
        sc2.cleanup()
    sc3 = Scenario(ctx, "retry_exhausted")
    sc3.serve(rules=[api_rule({"status": 500, "headers": {"X-Request-Id": "rid-500"}}, times=-1)])
    res = sc3.run()
    expect_err(sc3, res, "HUB/HTTP", "500", "after 5 retries", "rid-500", "/api/models/org/model/revision/main")
    check(len(api_times(ctx.server.log())) == 6, "retry_exhausted: 6 attempts")
    check(not os.path.exists(sc3.cache), "retry_exhausted: nothing written")
    # A chunk/file GET gets the same policy: 503 twice then fine.
    sc4 = Scenario(ctx, "retry_get")
    sc4.serve(rules=[shard_rule(2, {"status": 503}, times=2)])
    expect_ok(sc4, sc4.run())
    check(len(reqs(ctx.server.log(), "GET", "cdn", SHARDS[2])) == 3, "retry_get: 3 GETs of the shard")
    sc.cleanup()
    sc3.cleanup()
    sc4.cleanup()


def t_corruption(ctx):
    sc = Scenario(ctx, "corrupt")
    sc.serve(rules=[shard_rule(1, {"corrupt": 100})])
    res = sc.run()
    expect_err(sc, res, "HUB/CHECKSUM", "checksum mismatch for " + SHARDS[1])
    check(not os.path.exists(blob_path(sc, SHARDS[1])), "corrupt: nothing published under blobs/")
    check(not os.path.lexists(os.path.join(sc.snap, SHARDS[1])), "corrupt: no pointer")
    check(not [f for f in leftovers(sc) if f.startswith(etag_of(SHARDS[1], sc.files[SHARDS[1]]))],
          "corrupt: temp removed: %s" % leftovers(sc))
    check(all(os.path.getsize(os.path.join(sc.repo_dir, "blobs", f)) > 0 for f in leftovers(sc)),
          "corrupt: no empty temp left by cancelled downloads: %s" % leftovers(sc))
    sc2 = Scenario(ctx, "corrupt_git")
    sc2.serve(rules=[{"port": "hub", "method": "GET", "path": "config.json", "action": {"corrupt": 3}}])
    expect_err(sc2, sc2.run(), "HUB/CHECKSUM", "checksum mismatch for config.json", "git blob")
    sc3 = Scenario(ctx, "verify_off")
    sc3.serve(rules=[shard_rule(1, {"corrupt": 100})])
    expect_ok(sc3, sc3.run("hub_verify=false"))
    with open(os.path.join(sc3.snap, SHARDS[1]), "rb") as f:
        got = f.read()
    check(len(got) == len(sc3.files[SHARDS[1]]) and got != sc3.files[SHARDS[1]], "verify_off: unverified content kept")
    for name, action in [("short", {"truncate": 100}), ("long", {"extend": 100})]:
        sc4 = Scenario(ctx, "size_" + name)
        sc4.serve(rules=[shard_rule(2, action)])
        expect_err(sc4, sc4.run(), "HUB/SIZE", "size mismatch for " + SHARDS[2])
        check(not os.path.exists(blob_path(sc4, SHARDS[2])), "size_%s: no blob" % name)
        check(not os.path.lexists(os.path.join(sc4.snap, SHARDS[2])), "size_%s: no pointer" % name)
        check(not [f for f in leftovers(sc4) if f.startswith(etag_of(SHARDS[2], sc4.files[SHARDS[2]]))],
              "size_%s: temp removed: %s" % (name, leftovers(sc4)))
        sc4.cleanup()
    sc.cleanup()
    sc2.cleanup()
    sc3.cleanup()


def prepare_partial(sc, k, nbytes):
    data = sc.files[SHARDS[k]]
    path = os.path.join(sc.repo_dir, "blobs", etag_of(SHARDS[k], data) + ".incomplete")
    write(path, data[:nbytes])


def t_ranges(ctx):
    sc = Scenario(ctx, "leftover_resume")
    prepare_partial(sc, 0, 7000)
    sc.serve()
    res = sc.run()
    expect_ok(sc, res)
    gets = reqs(ctx.server.log(), "GET", "cdn", SHARDS[0])
    check([e["range"] for e in gets] == ["bytes=7000-"], "leftover_resume: Range bytes=7000-: %s" %
          [e["range"] for e in gets])
    total = sum(len(sc.files[p]) for p in DEFAULT_FILES) - 7000
    check(res["bytes_downloaded"] == total, "leftover_resume: only the rest is fetched")
    check_tree(sc, DEFAULT_FILES)
    sc2 = Scenario(ctx, "ignored_range")
    prepare_partial(sc2, 0, 7000)
    sc2.serve(rules=[shard_rule(0, {"ignore_range": True})])
    expect_ok(sc2, sc2.run())
    gets = reqs(ctx.server.log(), "GET", "cdn", SHARDS[0])
    check([(e["range"], e["status"]) for e in gets] == [("bytes=7000-", 200)], "ignored_range: one 200 reply: %s" %
          [(e["range"], e["status"]) for e in gets])
    check_tree(sc2, DEFAULT_FILES)
    sc3 = Scenario(ctx, "range_416")
    prepare_partial(sc3, 0, 7000)
    sc3.serve(rules=[shard_rule(0, {"status": 416}, range=True)])
    expect_ok(sc3, sc3.run())
    gets = reqs(ctx.server.log(), "GET", "cdn", SHARDS[0])
    check([e["range"] for e in gets] == ["bytes=7000-", None], "range_416: one retry without Range: %s" %
          [e["range"] for e in gets])
    check_tree(sc3, DEFAULT_FILES)
    sc4 = Scenario(ctx, "too_long_partial")
    write(os.path.join(sc4.repo_dir, "blobs", etag_of(SHARDS[0], sc4.files[SHARDS[0]]) + ".incomplete"),
          b"x" * (len(sc4.files[SHARDS[0]]) + 5))
    sc4.serve()
    expect_ok(sc4, sc4.run())
    check([e["range"] for e in reqs(ctx.server.log(), "GET", "cdn", SHARDS[0])] == [None],
          "too_long_partial: restarted from 0")
    check_tree(sc4, DEFAULT_FILES)
    for s in (sc, sc2, sc3, sc4):
        s.cleanup()


def head_rule(path, action):
    return {"port": "hub", "method": "HEAD", "path": path, "times": -1, "action": action}


def t_head_metadata(ctx):
    for name, action, missing in [("no_commit", {"head_remove": ["X-Repo-Commit"]}, "X-Repo-Commit"),
                                  ("no_etag", {"head_remove": ["ETag"]}, "ETag"),
                                  ("no_size", {"head_remove": ["Content-Length"]}, "size")]:
        sc = Scenario(ctx, "head_" + name)
        sc.serve(rules=[head_rule("config.json", action)])
        res = sc.run("hub_parallel_files=1")
        expect_err(sc, res, "HUB/METADATA", "incomplete file metadata for config.json (missing %s)" % missing)
        check(not os.path.exists(blob_path(sc, "config.json")), "head_%s: no blob" % name)
        check(not os.path.lexists(os.path.join(sc.snap, "config.json")), "head_%s: no pointer" % name)
        check(not reqs(ctx.server.log(), "GET", contains="config.json"), "head_%s: no GET" % name)
        sc.cleanup()
    sc = Scenario(ctx, "head_lfs_no_size")
    sc.serve(rules=[head_rule(SHARDS[0], {"head_remove": ["X-Linked-Size"]})])
    expect_err(sc, sc.run(), "HUB/METADATA", "missing size")  # Content-Length of a 302 does not count
    sc.cleanup()
    sc = Scenario(ctx, "weak_etag")
    sc.serve(rules=[head_rule("config.json", {"head_set": {"ETag": 'W/"%s"' % git_sha1(b"x")}})])
    res = sc.run()
    expect_err(sc, res, "HUB/CHECKSUM", "config.json")  # the weak etag was parsed and used for verification
    sc.serve(rules=[head_rule("config.json", {"head_set": {"ETag": 'W/"%s"' % etag_of("config.json",
                                                                                        sc.files["config.json"])}})])
    expect_ok(sc, sc.run(), " (weak etag)")
    check_tree(sc, DEFAULT_FILES)
    sc.cleanup()
    sc = Scenario(ctx, "commit_mismatch")
    sc.serve(rules=[head_rule(SHARDS[2], {"head_set": {"X-Repo-Commit": OTHER_SHA}})])
    expect_err(sc, sc.run(), "HUB/METADATA", OTHER_SHA, SHA, SHARDS[2])
    check(not os.path.lexists(os.path.join(sc.snap, SHARDS[2])), "commit_mismatch: no pointer")
    sc.cleanup()
    sc = Scenario(ctx, "bad_etag")
    sc.serve(rules=[head_rule("config.json", {"head_set": {"ETag": '"../../x"'}})])
    expect_err(sc, sc.run("hub_parallel_files=1"), "HUB/INVALID_NAME", "../../x")
    check(not os.path.exists(os.path.join(sc.cache, "x")) and not os.path.exists(os.path.join(sc.repo_dir, "x")),
          "bad_etag: nothing written outside blobs/")
    check(not reqs(ctx.server.log(), "GET", contains="config.json"), "bad_etag: no GET")
    sc.cleanup()


def t_slow(ctx):
    sc = Scenario(ctx, "slow_body")
    # libcurl's speed is an average over the last seconds: a body that stops after 1 byte drops
    # below 1 byte/s within about 2 s (timeout 1 s), long before the 6 s stall ends.
    sc.serve(rules=[shard_rule(1, {"stall_after": 1, "stall": 6.0})])
    t0 = time.time()
    res = sc.run(env=sc.env(HF_HUB_DOWNLOAD_TIMEOUT="1"))
    expect_ok(sc, res)
    gets = reqs(ctx.server.log(), "GET", "cdn", SHARDS[1])
    check([e["range"] for e in gets] == [None, "bytes=1-"], "slow_body: low-speed abort then resume: %s" %
          [e["range"] for e in gets])
    check(time.time() - t0 < 5.5, "slow_body: detected by the low-speed limit (%.1f s)" % (time.time() - t0))
    check_tree(sc, DEFAULT_FILES)
    # Stalled HEADs do not matter once everything is cached: no HEAD is sent.
    sc.serve(rules=[{"port": "hub", "method": "HEAD", "times": -1, "action": {"delay": 5}}])
    t0 = time.time()
    res = sc.run(env=sc.env(HF_HUB_ETAG_TIMEOUT="1"))
    expect_ok(sc, res, " (stalled HEAD, cached)")
    check(time.time() - t0 < 3 and not reqs(ctx.server.log(), "HEAD"), "slow_body: cached files get no HEAD")
    # An uncached file whose first HEAD stalls past the etag timeout is asked again (60 s timeout).
    os.unlink(os.path.join(sc.snap, "config.json"))
    sc.serve(rules=[{"port": "hub", "method": "HEAD", "times": 1, "action": {"delay": 3}}])
    res = sc.run(env=sc.env(HF_HUB_ETAG_TIMEOUT="1"))
    expect_ok(sc, res, " (stalled first HEAD)")
    check(len(reqs(ctx.server.log(), "HEAD")) == 2, "slow_body: the stalled HEAD was repeated")
    sc.cleanup()


# ---- parallel --------------------------------------------------------------------------------

PAR = ["hub_parallel_threshold=30000", "hub_chunk_bytes=8192", "hub_connections=3"]


def chunk_ranges(size, c=8192):
    return ["bytes=%d-%d" % (a, min(a + c, size) - 1) for a in range(0, size, c)]


def t_parallel(ctx):
    sc = Scenario(ctx, "parallel", shard_floats=(16000, 9000, 4000))
    big = SHARDS[0]
    size = len(sc.files[big])
    check(size > 30000 and len(sc.files[SHARDS[1]]) > 30000 and len(sc.files[SHARDS[2]]) < 30000,
          "parallel: fixture sizes")
    sc.serve(rules=[shard_rule(0, {"delay": 0.1}, times=-1)])
    res = sc.run(*PAR)
    expect_ok(sc, res)
    log = ctx.server.log()
    gets = reqs(log, "GET", "cdn", big)
    check(sorted(e["range"] for e in gets) == sorted(chunk_ranges(size)), "parallel: exact chunk ranges: %s" %
          sorted(e["range"] for e in gets))
    most = max(sum(1 for o in gets if o["t"] <= e["t"] < o["t_end"]) for e in gets)
    check(2 <= most <= 3, "parallel: chunks overlap, at most hub_connections=3 at once (saw %d)" % most)
    check(reqs(log, "GET", "cdn", SHARDS[2])[0]["range"] is None, "parallel: small file as one stream")
    check_tree(sc, DEFAULT_FILES)
    check(leftovers(sc) == [], "parallel: no temp left")
    sc.cleanup()
    sc = Scenario(ctx, "chunk_retry", shard_floats=(16000, 9000, 4000))
    sc.serve(rules=[shard_rule(0, {"drop_after": 1000}, range="bytes=8192-16383"),
                    shard_rule(0, {"status": 503}, range="bytes=16384-24575")])
    expect_ok(sc, sc.run(*PAR))
    ranges = [e["range"] for e in reqs(ctx.server.log(), "GET", "cdn", SHARDS[0])]
    check("bytes=9192-16383" in ranges, "chunk_retry: the broken chunk resumed from its own bytes: %s" % ranges)
    check(ranges.count("bytes=16384-24575") == 2, "chunk_retry: the 503 chunk was retried")
    check_tree(sc, DEFAULT_FILES)
    sc.cleanup()
    # Chunks are hashed as their prefix completes: a flipped byte in a middle chunk (hashed while
    # later ones arrive) and in the last one (hashed after the transfer) both fail the checksum.
    for name, k in (("chunk_corrupt_mid", 1), ("chunk_corrupt_last", None)):
        sc = Scenario(ctx, name, shard_floats=(16000, 9000, 4000))
        ranges = chunk_ranges(len(sc.files[SHARDS[0]]))
        rng = ranges[k if k is not None else len(ranges) - 1]
        at = int(rng.split("=")[1].split("-")[0]) + 5
        sc.serve(rules=[shard_rule(0, {"corrupt": at}, range=rng)])
        expect_err(sc, sc.run(*PAR), "HUB/CHECKSUM", "checksum mismatch for " + SHARDS[0])
        check(not os.path.exists(blob_path(sc, SHARDS[0])), "%s: nothing published under blobs/" % name)
        check(not os.path.lexists(os.path.join(sc.snap, SHARDS[0])), "%s: no pointer" % name)
        check(leftovers(sc) == [], "%s: temp removed: %s" % (name, leftovers(sc)))
        sc.cleanup()
    sc = Scenario(ctx, "no_ranges", shard_floats=(16000, 9000, 4000))
    sc.serve(rules=[shard_rule(0, {"ignore_range": True}, times=-1)])
    expect_ok(sc, sc.run(*PAR))
    gets = reqs(ctx.server.log(), "GET", "cdn", SHARDS[0])
    ranges = [e["range"] for e in gets]
    check(len(ranges) >= 2 and ranges.count(None) == 1 and ranges[0] is not None,
          "no_ranges: ranged attempt, then one stream: %s" % ranges)
    check_tree(sc, DEFAULT_FILES)
    check(leftovers(sc) == [], "no_ranges: parallel temp removed")
    sc.cleanup()
    sc = Scenario(ctx, "huge")
    sc.serve(rules=[shard_rule(0, {"ignore_range": True}, times=-1)],
             size_override={SHARDS[0]: 60000000000})
    res = sc.run("hub_parallel_files=1")
    expect_err(sc, res, "HUB/HTTP", "50 GB", SHARDS[0])
    gets = reqs(ctx.server.log(), "GET", "cdn", SHARDS[0])
    check(gets and all(e["range"] is not None for e in gets), "huge: never a GET without Range")
    check(leftovers(sc) == [], "huge: temp removed: %s" % leftovers(sc))
    sc.cleanup()


# ---- errors ----------------------------------------------------------------------------------

def err_action(status, code=None, message=None, body=None):
    hdrs = {"X-Request-Id": "rid-%d" % status}
    if code:
        hdrs["X-Error-Code"] = code
    if message:
        hdrs["X-Error-Message"] = message
    act = {"status": status, "headers": hdrs}
    if body is not None:
        act["body"] = body
    return act


def t_api_errors(ctx):
    cases = [
        ("revision", err_action(404, "RevisionNotFound", "Invalid rev id: x"), "HUB/REVISION_NOT_FOUND",
         ["revision 'main'", "revision not found", "rid-404"]),
        ("repo", err_action(401, "RepoNotFound", "Repository not found"), "HUB/REPO_NOT_FOUND",
         ["repository not found", "HF_TOKEN"]),
        ("repo_404", err_action(404, "RepoNotFound", "Repository not found"), "HUB/REPO_NOT_FOUND",
         ["repository not found", "HTTP 404"]),
        ("repo_401", err_action(401, None, "Unauthorized"), "HUB/REPO_NOT_FOUND", ["HF_TOKEN"]),
        ("bad_token", err_action(401, None, "Invalid credentials in Authorization header"), "HUB/BAD_TOKEN",
         ["rejected the token"]),
        ("gated_401", err_action(401, "GatedRepo", "Access to model org/model is restricted."), "HUB/GATED",
         ["HF_TOKEN", "accepted the terms"]),
        ("gated_403", err_action(403, "GatedRepo", "not in the authorized list"), "HUB/GATED",
         ["accept the terms", "not in the authorized list"]),
        ("disabled", err_action(403, None, "Access to this resource is disabled."), "HUB/DISABLED", ["disabled"]),
        ("forbidden", err_action(403), "HUB/FORBIDDEN", ["HTTP 403"]),
        ("not_found", err_action(404, body='{"error": ["boom", "bang"]}'), "HUB/NOT_FOUND", ["boom; bang"]),
        ("bad_request", err_action(400, body='{"error_description": "nope"}'), "HUB/BAD_REQUEST", ["nope"]),
        ("teapot", err_action(418), "HUB/HTTP", ["418"]),
    ]
    for name, action, status, needles in cases:
        sc = Scenario(ctx, "api_" + name)
        sc.serve(rules=[api_rule(action, times=-1)])
        res = sc.run()
        expect_err(sc, res, status, "http://127.0.0.1:%d/api/models/org/model/revision/main" % ctx.server.hub,
                   *needles)
        check(len(ctx.server.log()) == 1, "api_%s: no retry" % name)
        check(not os.path.exists(sc.cache), "api_%s: nothing written" % name)
        sc.cleanup()
    # The server's own answers for unknown repositories and revisions.
    sc = Scenario(ctx, "unknown")
    sc.serve()
    expect_err(sc, sc.run("model=org/missing"), "HUB/REPO_NOT_FOUND", "org/missing")
    expect_err(sc, sc.run("revision=nope"), "HUB/REVISION_NOT_FOUND", "nope")
    sc.cleanup()


def t_head_errors(ctx):
    sc = Scenario(ctx, "head_gated")
    sc.serve(rules=[head_rule("config.json", err_action(401, "GatedRepo", "restricted"))])
    expect_err(sc, sc.run(), "HUB/GATED", "config.json", "HF_TOKEN", "HEAD")
    sc.cleanup()
    sc = Scenario(ctx, "gated_repo")
    sc.serve(gated="hf_good")
    expect_err(sc, sc.run(), "HUB/GATED", "HF_TOKEN", "Please log in", "HTTP 401")
    expect_err(sc, sc.run(env=sc.env(HF_TOKEN="hf_other")), "HUB/GATED", "accept the terms", "HTTP 403")
    expect_ok(sc, sc.run(env=sc.env(HF_TOKEN="hf_good")), " (gated, with access)")
    check_tree(sc, DEFAULT_FILES)
    sc.cleanup()
    sc = Scenario(ctx, "head_entry")
    sc.serve(rules=[head_rule("config.json", dict(err_action(404, "EntryNotFound", "gone"),
                                                  headers={"X-Error-Code": "EntryNotFound",
                                                           "X-Repo-Commit": SHA}))])
    expect_err(sc, sc.run(), "HUB/ENTRY_NOT_FOUND", "config.json")
    check(os.path.isfile(os.path.join(sc.repo_dir, ".no_exist", SHA, "config.json")), "head_entry: .no_exist marker")
    sc.cleanup()
    # The optional index missing: marker written, all shards used.
    sc = Scenario(ctx, "index_absent")
    sc.serve(rules=[head_rule(INDEX, {"status": 404, "headers": {"X-Error-Code": "EntryNotFound",
                                                                 "X-Repo-Commit": SHA}})])
    expect_ok(sc, sc.run())
    check(os.path.isfile(os.path.join(sc.repo_dir, ".no_exist", SHA, INDEX)), "index_absent: marker")
    check(all(os.path.isfile(os.path.join(sc.snap, s)) for s in SHARDS), "index_absent: every shard downloaded")
    sc.cleanup()
    sc = Scenario(ctx, "head_repo_401")
    sc.serve(rules=[head_rule(SHARDS[0], err_action(401, None, None))])
    expect_err(sc, sc.run(), "HUB/REPO_NOT_FOUND", SHARDS[0])
    sc.cleanup()
    sc = Scenario(ctx, "no_config")
    os.unlink(os.path.join(sc.model, "config.json"))
    sc.serve()
    expect_err(sc, sc.run(), "HUB/ENTRY_NOT_FOUND", "config.json")
    check(not os.path.exists(sc.cache), "no_config: nothing written")
    sc.cleanup()


def t_fallback(ctx):
    sc = Scenario(ctx, "fallback")
    sc.serve()
    expect_ok(sc, sc.run())
    sc.serve(rules=[api_rule(err_action(500), times=-1)])
    res = sc.run()
    expect_ok(sc, res, " (500s, cached)")
    check(res["fallback"] and "500" in res["stderr"] and "cached snapshot" in res["stderr"],
          "fallback: warning names the error: %s" % res["stderr"][-500:])
    sc.serve(rules=[api_rule(err_action(401, "RepoNotFound", "Repository not found"), times=-1)])
    res = sc.run()
    expect_ok(sc, res, " (401, cached)")
    sc.serve(rules=[api_rule(err_action(404, "RevisionNotFound", "bad"), times=-1)])
    expect_err(sc, sc.run(), "HUB/REVISION_NOT_FOUND")
    # Outage: nothing listens on the endpoint.
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    dead = "http://127.0.0.1:%d" % s.getsockname()[1]
    s.close()
    res = sc.run(env=sc.env(HF_ENDPOINT=dead))
    expect_ok(sc, res, " (outage, cached)")
    check(res["fallback"] and "network error" in res["stderr"], "fallback: outage warning")
    sc2 = Scenario(ctx, "outage_empty")
    res = sc2.run(env=sc2.env(HF_ENDPOINT=dead))
    expect_err(sc2, res, "HUB/NETWORK", dead)
    sc.cleanup()
    sc2.cleanup()


def t_validation(ctx):
    for name, bad in [("dotdot", "../evil"), ("absolute", "/etc/passwd"), ("nested", "a/../../b"),
                      ("drive", "C:x"), ("backslash", "a\\b")]:
        sc = Scenario(ctx, "sibling_" + name)
        sc.serve(extra_siblings=[bad])
        res = sc.run()
        expect_err(sc, res, "HUB/INVALID_NAME", "'%s'" % bad)
        check(len(ctx.server.log()) == 1, "sibling_%s: no request after the listing" % name)
        check(not os.path.exists(sc.cache), "sibling_%s: nothing written" % name)
        sc.cleanup()
    wm = {"a": "../x", "b": SHARDS[0]}
    sc = Scenario(ctx, "index_traversal", index_override={"weight_map": wm})
    sc.serve()
    res = sc.run()
    expect_err(sc, res, "INDEX", "../x")
    check(not reqs(ctx.server.log(), contains=".safetensors?") and not reqs(ctx.server.log(), "GET", "cdn"),
          "index_traversal: no weight requested")
    check(not os.path.exists(os.path.join(sc.snap, SHARDS[0])), "index_traversal: no weight written")
    sc.cleanup()
    sc = Scenario(ctx, "bad_names")
    sc.serve()
    for args, needle in [(["model=a/../b"], "a/../b"), (["model=x/y.git"], "x/y.git"), (["revision=a//b"], "a//b"),
                         (["revision=../main"], "../main")]:
        expect_err(sc, sc.run(*args), "HUB/INVALID_NAME", needle)
    check(not ctx.server.log(), "bad_names: no request")
    check(not os.path.exists(sc.cache), "bad_names: nothing written")
    res = sc.run(env=sc.env(HF_HUB_ETAG_TIMEOUT="soon"))
    expect_err(sc, res, "CONFIG", "HF_HUB_ETAG_TIMEOUT")
    sc.cleanup()


# ---- locks -----------------------------------------------------------------------------------

def t_two_processes(ctx):
    sc = Scenario(ctx, "two_processes")
    sc.serve(rules=[{"port": "cdn", "method": "GET", "times": -1, "action": {"slow": 0.05}},
                    {"port": "hub", "method": "GET", "path": "/resolve/", "times": -1, "action": {"delay": 0.2}}])
    procs = [sc.run("hub_parallel_files=2", background=True) for _ in range(2)]
    results = []
    for p in procs:
        out, errs = p.communicate(timeout=120)
        results.append(parse_result(out, errs, p.returncode, sc.name))
    for r in results:
        expect_ok(sc, r)
    log = ctx.server.log()
    for path in DEFAULT_FILES:
        gets = [e for e in reqs(log, "GET") if "/resolve/" in e["path"] or e["port"] == "cdn"]
        n = len([e for e in gets if e["path"].split("?")[0].endswith("/" + path)])
        check(n == 1, "two_processes: %s downloaded %d times" % (path, n))
    pids = {e["pid"] for e in log}
    check(pids == {r["pid"] for r in results}, "two_processes: requests from both pids: %s vs %s" % (
        pids, [r["pid"] for r in results]))
    check(sum(r["files_downloaded"] for r in results) == 5, "two_processes: 5 blobs in all")
    check_tree(sc, DEFAULT_FILES)
    sc.cleanup()


def t_locks(ctx):
    sc = Scenario(ctx, "stale_lock")
    locks = os.path.join(sc.cache, ".locks", "models--org--model")
    os.makedirs(locks)
    stale = os.path.join(locks, etag_of("config.json", sc.files["config.json"]) + ".lock")
    write(stale, b"")
    sc.serve()
    t0 = time.time()
    expect_ok(sc, sc.run())
    check(time.time() - t0 < 10, "stale_lock: no wait")
    check(not os.path.exists(stale), "stale_lock: lock file removed on release")
    sc.cleanup()
    sc = Scenario(ctx, "held_lock")
    locks = os.path.join(sc.cache, ".locks", "models--org--model")
    os.makedirs(locks)
    held = os.path.join(locks, etag_of("config.json", sc.files["config.json"]) + ".lock")
    fd = os.open(held, os.O_RDWR | os.O_CREAT, 0o664)
    fcntl.flock(fd, fcntl.LOCK_EX)
    sc.serve()
    res = sc.run("hub_lock_timeout_s=1")
    expect_err(sc, res, "HUB/CACHE", "timed out", held)
    os.close(fd)
    expect_ok(sc, sc.run(), " (after release)")
    sc.cleanup()


# ---- cli -------------------------------------------------------------------------------------

def t_cli(ctx):
    if not check(ctx.cli and os.access(ctx.cli, os.X_OK), "cli: no executable shardload at %s (pass --cli)" % ctx.cli):
        return
    sc = Scenario(ctx, "cli")
    sc.serve()

    def cli(*args, **env):
        p = subprocess.run([ctx.cli, "download"] + list(args), env=sc.env(**env), capture_output=True, text=True,
                           timeout=90)
        return p.returncode, p.stdout, p.stderr

    rc, out, err = cli(REPO, "--quiet")
    check(rc == 0 and out == sc.snap + "\n", "cli: prints the snapshot (rc %d, out %r, err %s)" % (rc, out, err[-800:]))
    # docs/spec/HUB.md §3: `download` also fetches every other top-level non-weight file, and only those.
    check_tree(sc, DEFAULT_FILES + TOP_LEVEL_EXTRAS)
    rc, out, err = cli(REPO, "--all", "--include", "original/*", "--quiet")
    check(rc == 0 and os.path.isfile(os.path.join(sc.snap, "tokenizer.json")) and
          os.path.isfile(os.path.join(sc.snap, "original", "params.json")), "cli: --all and --include")
    other = os.path.join(sc.dir, "other-cache")
    rc, out, err = cli(REPO, "--revision=refs/pr/1", "--cache-dir", other, "--load-format", "safetensors")
    check(rc == 0 and out.startswith(os.path.join(other, "models--org--model", "snapshots", SHA_PR)),
          "cli: --revision --cache-dir (rc %d, out %r, err %s)" % (rc, out, err[-800:]))
    rc, out, err = cli(REPO, "--offline", "--cache-dir", os.path.join(sc.dir, "empty"))
    check(rc == 1 and out == "" and "offline" in err and "HUB (OFFLINE)" in err, "cli: offline miss (rc %d, %s)" %
          (rc, err))
    rc, out, err = cli()
    check(rc == 2 and "repository" in err, "cli: missing REPO is a usage error")
    rc, out, err = cli(REPO, "--bogus")
    check(rc == 2 and "--bogus" in err, "cli: unknown option is a usage error")
    rc, out, err = cli(REPO, "--load-format", "npcache")
    check(rc == 2 and "unknown load format" in err, "cli: bad load format is a usage error")
    rc, out, err = cli("--help")
    check(rc == 0 and "usage: shardload download" in out, "cli: --help")
    sc.cleanup()


def t_mistyped_name(ctx):
    """A load of a name that is neither a folder nor a file here (`lama3`, or `models/lama3` from a
    folder without `models`): the message says first that there is no such folder, then what the Hub
    said; one request, no retry. A Hub whose name does not resolve: failed at the first attempt (no
    "retrying" in the debug log), the message saying why it was not retried."""
    if not check(ctx.cli and os.access(ctx.cli, os.X_OK), "mistyped: no executable shardload (pass --cli)"):
        return
    sc = Scenario(ctx, "mistyped")
    sc.serve()
    cwd = os.path.join(sc.dir, "elsewhere")
    os.makedirs(cwd)
    mpirun = os.environ.get("SL_MPIRUN")

    def load(name, **env):
        argv = ([mpirun, "-np", "1"] if mpirun else []) + [ctx.cli, "load", name, "--hub-backoff-base-ms", "10"]
        p = subprocess.run(argv, env=sc.env(SHARDLOAD_LOG="debug", **env), cwd=cwd, capture_output=True, text=True,
                           timeout=90)
        return p.returncode, p.stderr

    for name in ("lama3", "models/lama3"):
        ctx.server.clear()
        rc, err = load(name)
        first = "rank 0: HUB (REPO_NOT_FOUND): no folder '%s' here (%s), and as a Hub repository id:" % (name, cwd)
        check(rc == 1 and first in err and "epository not found" in err,
              "mistyped %s: no folder first, then the Hub's answer (rc %d): %s" % (name, rc, err[-1500:]))
        check(len(ctx.server.log()) == 1, "mistyped %s: one request: %s" % (name, ctx.server.log()))
    rc, err = load("lama3", HF_ENDPOINT="http://no-such-host.invalid")
    check(rc == 1 and "HUB (NETWORK): no folder 'lama3' here (%s)" % cwd in err and "resolve" in err and
          "not retried" in err, "unresolvable Hub: no folder first, then why (rc %d): %s" % (rc, err[-1500:]))
    check("retrying" not in err, "unresolvable Hub: the name was tried once: %s" % err[-1500:])
    sc.cleanup()


TOP_LEVEL_EXTRAS = ["tokenizer.json", "README.md", "generation_config.json", ".gitattributes"]


def t_download_sets(ctx):
    """What lands in the snapshot: `download` = load files + top-level non-weight files; --load-only and a
    load (the driver's sl__hub_resolve with the loader's options) = config, index, weights."""
    if not check(ctx.cli and os.access(ctx.cli, os.X_OK), "download_sets: no shardload CLI (pass --cli)"):
        return
    for name, args, want in [("download_default", [], DEFAULT_FILES + TOP_LEVEL_EXTRAS),
                             ("download_all", ["--all"], DEFAULT_FILES + TOP_LEVEL_EXTRAS),
                             ("download_load_only", ["--load-only"], DEFAULT_FILES),
                             ("download_include", ["--load-only", "--include", "tokenizer*"],
                              DEFAULT_FILES + ["tokenizer.json"])]:
        sc = Scenario(ctx, name)
        sc.serve()
        p = subprocess.run([ctx.cli, "download", REPO, "--quiet"] + args, env=sc.env(), capture_output=True,
                           text=True, timeout=90)
        check(p.returncode == 0 and p.stdout == sc.snap + "\n", "%s: rc %d, out %r, err %s" % (
            name, p.returncode, p.stdout, p.stderr[-800:]))
        check_tree(sc, want)
        check(not reqs(ctx.server.log(), contains="training_args"), "%s: weight-like files are not extras" % name)
        sc.cleanup()
    sc = Scenario(ctx, "load_set")
    sc.serve()
    expect_ok(sc, sc.run())
    check_tree(sc, DEFAULT_FILES)
    sc.cleanup()


# ---- signals and interrupted downloads (docs/spec/HUB.md §5.5) --------------------------------

def wait_for(pred, timeout=20.0):
    end = time.time() + timeout
    while time.time() < end:
        v = pred()
        if v:
            return v
        time.sleep(0.02)
    return None


def parallel_temps(sc):
    """blobs/<etag>.<8hex>.incomplete files."""
    return [f for f in leftovers(sc) if f.count(".") == 2]


def stream_partials(sc):
    """blobs/<etag>.incomplete files holding bytes."""
    blobs = os.path.join(sc.repo_dir, "blobs")
    out = []
    for f in leftovers(sc):
        if f.count(".") == 1:
            try:
                if os.path.getsize(os.path.join(blobs, f)) > 0:
                    out.append(f)
            except OSError:
                pass
    return out


def lock_files(sc):
    d = os.path.join(sc.cache, ".locks", "models--org--model")
    return sorted(os.listdir(d)) if os.path.isdir(d) else []


# Shards 1 and 2 (24 and 36 kB) go as parallel chunks, shard 3 (16 kB) as one stream.
SIG_ARGS = ["hub_parallel_threshold=20000", "hub_chunk_bytes=8192", "hub_connections=2", "hub_parallel_files=4"]
# Every CDN body stalls after 4 kB: transfers in flight, with bytes in their temporaries.
STALL = [{"port": "cdn", "method": "GET", "times": -1, "action": {"stall_after": 4096, "stall": 30}}]


def default_signals():
    """The child gets default dispositions whatever the test runner ignores (a background job ignores
    SIGINT); an ignored signal is left ignored by the library, by design."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)


def start(argv, env):
    return subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=default_signals)


def driver_argv(ctx, *args):
    return [ctx.driver, "model=" + REPO, "hub_backoff_base_ms=10", "quiet=true"] + list(args)


def in_flight(sc):
    return parallel_temps(sc) and stream_partials(sc)


def t_kill9(ctx):
    sc = Scenario(ctx, "kill9")
    sc.serve(rules=STALL)
    p = start(driver_argv(ctx, *SIG_ARGS), sc.env())
    check(wait_for(lambda: in_flight(sc)), "kill9: downloads in flight (parallel temporaries %s, partials %s)" % (
        parallel_temps(sc), stream_partials(sc)))
    p.kill()
    p.communicate(timeout=30)
    check(parallel_temps(sc), "kill9: the killed process left its parallel temporaries behind")
    # The next run (no fault): the stale temporaries are removed under their blobs' locks; the partial of
    # the single stream is resumed (docs/spec/HUB.md §5.2); the cache ends exactly as after a clean
    # download.
    sc.serve()
    res = sc.run(*SIG_ARGS)
    expect_ok(sc, res, " (after kill -9)")
    check(not leftovers(sc), "kill9: temporaries left after the next run: %s" % leftovers(sc))
    check_tree(sc, DEFAULT_FILES, stale_locks=True)
    # Stale temporaries of a blob the next run does not download (it is complete) go too.
    blob = etag_of(SHARDS[0], sc.files[SHARDS[0]])
    stale = os.path.join(sc.repo_dir, "blobs", blob + ".0badf00d.incomplete")
    write(stale, b"\0" * 4096)
    os.unlink(os.path.join(sc.snap, SHARDS[0]))
    expect_ok(sc, sc.run(*SIG_ARGS), " (stale temporary of a complete blob)")
    check(not os.path.exists(stale), "kill9: the stale temporary of a complete blob was removed")
    # A temporary whose blob's lock is held (a live downloader) is left alone.
    live = os.path.join(sc.repo_dir, "blobs", blob + ".0000beef.incomplete")
    write(live, b"\0" * 16)
    lockp = os.path.join(sc.cache, ".locks", "models--org--model", blob + ".lock")
    fd = os.open(lockp, os.O_RDWR | os.O_CREAT, 0o664)
    fcntl.flock(fd, fcntl.LOCK_EX)
    expect_ok(sc, sc.run(*SIG_ARGS), " (live temporary)")
    check(os.path.exists(live), "kill9: a temporary under a held lock was removed")
    os.close(fd)
    os.unlink(lockp)
    sc.cleanup()


def check_interrupted(sc, name, rc, text, signame):
    check(rc not in (0, None) and rc > 0, "%s: exit status %s (expected a non-zero exit, not death by signal)" % (
        name, rc))
    check("interrupted by " + signame in text, "%s: no 'interrupted by %s' message: %s" % (name, signame,
                                                                                        text[-1500:]))
    check(not leftovers(sc), "%s: temporaries left: %s" % (name, leftovers(sc)))
    check(not lock_files(sc), "%s: lock files left: %s" % (name, lock_files(sc)))


def t_signals(ctx):
    for signame in ("SIGTERM", "SIGINT"):
        sig = getattr(signal, signame)
        # The library (hub_driver): parallel chunks and a single stream in flight.
        name = "driver_" + signame
        sc = Scenario(ctx, name)
        sc.serve(rules=STALL)
        p = start(driver_argv(ctx, *SIG_ARGS), sc.env())
        check(wait_for(lambda: in_flight(sc)), "%s: downloads in flight" % name)
        t0 = time.time()
        p.send_signal(sig)
        out, err = p.communicate(timeout=60)
        check(time.time() - t0 < 10, "%s: took %.1f s to stop" % (name, time.time() - t0))
        res = parse_result(out, err, p.returncode, name)
        check(res["status"] == "IO", "%s: status %s: %s" % (name, res["status"], res["message"]))
        check_interrupted(sc, name, p.returncode, res["message"], signame)
        sc.serve()
        expect_ok(sc, sc.run(*SIG_ARGS), " (next run)")
        check_tree(sc, DEFAULT_FILES)
        sc.cleanup()
        if not ctx.cli:
            continue
        # The CLI: `download` (one stream per file at the default threshold) and `load` on one rank (the
        # parallel chunks of the driver's settings; the load itself would fail later on this fixture).
        # `--load-strategy mmap` downloads before the catalog (no overlap, docs/spec/HUB.md §13): the
        # model stage, which fails on this fixture, would otherwise end the downloads first.
        for cmd, argv in [("download", [ctx.cli, "download", REPO, "--quiet"]),
                          ("load", [ctx.cli, "load", REPO, "--quiet", "--hub-backoff-base-ms", "10",
                                    "--hub-parallel-threshold", "20000", "--hub-chunk-bytes", "8192",
                                    "--load-strategy", "mmap"])]:
            name = "%s_%s" % (cmd, signame)
            sc = Scenario(ctx, name)
            sc.serve(rules=STALL)
            p = start(argv, sc.env())
            want = (lambda: in_flight(sc)) if cmd == "load" else (lambda: stream_partials(sc))
            check(wait_for(want), "%s: downloads in flight" % name)
            p.send_signal(sig)
            out, err = p.communicate(timeout=60)
            check_interrupted(sc, name, p.returncode, err, signame)
            check("shardload" in err and out == "", "%s: the error goes to stderr: %r %r" % (name, out, err[-500:]))
            sc.cleanup()


# ---- a full device (docs/spec/HUB.md §5.5) -----------------------------------------------------

def t_no_space(ctx):
    if os.geteuid() != 0 or not shutil.which("mount"):
        print("nospace: skipped (needs root to mount a small tmpfs)", file=sys.stderr)
        ctx.skipped = True
        return
    sc = Scenario(ctx, "no_space", shard_floats=(6000, 60000, 4000))
    mnt = os.path.join(sc.dir, "small")
    os.makedirs(mnt)
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=128k,mode=0755", "tmpfs", mnt], capture_output=True,
                       text=True)
    if r.returncode != 0:
        print("nospace: skipped (cannot mount a tmpfs: %s)" % r.stderr.strip(), file=sys.stderr)
        ctx.skipped = True
        sc.cleanup()
        return
    try:
        sc.cache = mnt
        sc.repo_dir = os.path.join(mnt, "models--org--model")
        sc.snap = os.path.join(sc.repo_dir, "snapshots", SHA)
        sc.serve()
        size = len(sc.files[SHARDS[1]])
        blobs = os.path.join(sc.repo_dir, "blobs")
        for mode, args in [("stream", []), ("parallel", ["hub_parallel_threshold=16384", "hub_chunk_bytes=8192"])]:
            res = sc.run("hub_parallel_files=1", *args)
            expect_err(sc, res, "HUB/CACHE", "not enough space", SHARDS[1], "needs %d bytes" % size, blobs,
                       "removed")
            check(not leftovers(sc), "no_space (%s): partial downloads left on the full device: %s" % (
                mode, leftovers(sc)))
            check(not lock_files(sc), "no_space (%s): lock files left: %s" % (mode, lock_files(sc)))
    finally:
        subprocess.run(["umount", mnt], capture_output=True)
        sc.cleanup()


GROUPS = {
    "basic": [t_multi_shard, t_tree_file, t_all_and_include, t_revisions, t_renamed_and_auth, t_tokens,
              t_no_symlinks, t_readonly, t_public_api, t_progress],
    "faults": [t_drop_resume, t_dead_attempts, t_retry_waits, t_corruption, t_ranges, t_head_metadata, t_slow],
    "parallel": [t_parallel],
    "errors": [t_api_errors, t_head_errors, t_fallback, t_validation],
    "locks": [t_two_processes, t_locks],
    "cli": [t_cli, t_download_sets, t_mistyped_name],
    "signals": [t_kill9, t_signals],
    "nospace": [t_no_space],
}


class Ctx:
    pass


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--driver", required=True)
    ap.add_argument("--cli")
    ap.add_argument("--only", help="run only the scenario functions whose name contains this")
    ap.add_argument("groups", nargs="+", choices=sorted(GROUPS))
    args = ap.parse_args()
    ctx = Ctx()
    ctx.driver = args.driver
    ctx.cli = args.cli
    ctx.skipped = False
    work = tempfile.mkdtemp(prefix="sl-hub-server-")
    ctx.server = HubServer(work)
    t0 = time.time()
    try:
        for g in args.groups:
            for fn in GROUPS[g]:
                if args.only and args.only not in fn.__name__:
                    continue
                t = time.time()
                fn(ctx)
                print("%-24s %.1f s" % (fn.__name__, time.time() - t), file=sys.stderr, flush=True)
    finally:
        ctx.server.stop()
        shutil.rmtree(work, ignore_errors=True)
    print("%d checks, %d failures (%.1f s)" % (CHECKS[0], len(FAILURES), time.time() - t0), file=sys.stderr)
    if FAILURES:
        return 1
    return 77 if ctx.skipped else 0


if __name__ == "__main__":
    signal.signal(signal.SIGTERM, lambda *a: sys.exit(1))
    sys.exit(main())
