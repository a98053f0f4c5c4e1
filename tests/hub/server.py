#!/usr/bin/env python3
"""server.py -- a local, fault-injecting Hugging Face Hub for the `hub` tests (docs/spec/HUB.md §11).

Two ThreadingHTTPServers on 127.0.0.1 with ports chosen by the OS: the "hub" (revision API,
resolve URLs) and a "cdn" (where LFS files are redirected, as the real Hub does with signed URLs).
The ports are written as JSON to --port-file ({"hub": N, "cdn": M, "pid": P}).

Repositories are served from local folders. Behaviour per repository (set by the test):
  GET  /api/models/{repo}/revision/{enc(rev)}   {"sha", "siblings": [{"rfilename"}...]}
  HEAD /{repo}/resolve/{rev}/{path}             git file: 200 + ETag (git blob sha1) + Content-Length
                                                LFS file: 302 to the CDN + X-Linked-Etag (sha256)
                                                + X-Linked-Size; both with X-Repo-Commit
  GET  /{repo}/resolve/{rev}/{path}             git file: content (Range supported); LFS: 302
  GET  /cdn/{repo}/{sha}/{path}?sig=...         (cdn port) content with Range support
A renamed repository answers a relative 307 to its new name. Unknown repository: 401 RepoNotFound;
unknown revision: 404 RevisionNotFound; unknown file: 404 EntryNotFound (with X-Repo-Commit).

Control endpoints (hub port, never logged):
  POST /_test/config   {"repos": {...}, "renames": {...}, "rules": [...]}: replaces everything,
                       clears the log
  POST /_test/rules    [...]: replaces the fault rules
  GET  /_test/log      the request log (JSON list)
  POST /_test/clear    clears the log
A repository entry: {"dir": folder, "sha": hex40, "refs": {"main": sha, ...},
  "lfs": [fnmatch patterns, default "*.safetensors"], "extra_siblings": [names listed but absent],
  "size_override": {path: announced size}, "gated": token}. A gated repository answers resolve
  requests without "Bearer <token>" with 401 GatedRepo, with another token 403 GatedRepo.

Fault rules (first rule that matches and still has `times` left applies; times -1 = always):
  match: "port" hub|cdn, "method", "path" (substring of the decoded path), "range" (exact Range
         header value, or true/false for present/absent)
  action keys (combinable): "status" + "headers" + "body" (reply with that status),
         "delay" (s before replying), "drop_after" (send K body bytes then cut the connection),
         "stall_after" + "stall" (pause K bytes into the body), "slow" (s between 16 KiB pieces; "piece": another size),
         "corrupt" (flip the byte at that content offset), "truncate"/"extend" (serve N bytes
         fewer/more, consistently announced), "ignore_range" (answer 200 with everything),
         "head_set" {name: value} / "head_remove" [names] (edit the reply headers).

Every request is logged as one JSON object: port, method, path (raw, as sent), headers
(lower-cased names), auth (Authorization value or null), range, status, t and t_end (times),
concurrent (requests in flight on that port at its start, itself included), and pid: the process
that opened the connection, found from the peer port via /proc/net/tcp and /proc/*/fd (Linux).
--rate B throttles every body byte of both ports together to B bytes per second (scripts/bench-hub).
Python 3 standard library only.
"""

import argparse
import fnmatch
import hashlib
import json
import os
import re
import socket
import sys
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

STATE_LOCK = threading.Lock()
# --rate: every body byte of both ports together passes one token bucket (bytes per second).
RATE_LOCK = threading.Lock()
RATE = {"bps": 0.0, "next": 0.0}


def throttle(n):
    """Waits until n more body bytes may be sent under --rate (no-op without it)."""
    if RATE["bps"] <= 0:
        return
    with RATE_LOCK:
        now = time.monotonic()
        start = max(now, RATE["next"])
        RATE["next"] = start + n / RATE["bps"]
    if start > now:
        time.sleep(start - now)

STATE = {"repos": {}, "renames": {}, "rules": [], "log": [], "inflight": {"hub": 0, "cdn": 0}}
PORTS = {}
PIECE = 16384


def git_blob_sha1(data):
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


class Repo:
    """A repository served from a folder; file hashes are computed once."""

    def __init__(self, repo_id, spec):
        self.id = repo_id
        self.dir = spec["dir"]
        self.sha = spec["sha"]
        self.refs = dict(spec.get("refs", {"main": self.sha}))
        self.lfs = spec.get("lfs", ["*.safetensors"])
        self.extra = list(spec.get("extra_siblings", []))
        self.size_override = dict(spec.get("size_override", {}))
        self.gated = spec.get("gated")
        self.files = {}
        for root, _dirs, names in os.walk(self.dir):
            for name in names:
                full = os.path.join(root, name)
                rel = os.path.relpath(full, self.dir).replace(os.sep, "/")
                self.files[rel] = full
        self._etags = {}
        self._data = {}

    def siblings(self):
        return sorted(self.files) + self.extra

    def resolve(self, rev):
        """The commit of a revision: a ref name, or a commit itself (every commit serves the folder)."""
        if rev == self.sha or rev in self.refs.values():
            return rev
        return self.refs.get(rev)

    def is_lfs(self, path):
        return any(fnmatch.fnmatch(path, p) for p in self.lfs)

    def content(self, path):
        # Kept while the file is unchanged: ranged requests (chunks, headers) would otherwise each
        # read the whole file, which made a throttled benchmark measure the server.
        full = self.files[path]
        st = os.stat(full)
        key = (st.st_size, st.st_mtime_ns, st.st_ino)
        hit = self._data.get(path)
        if hit is not None and hit[0] == key:
            return hit[1]
        with open(full, "rb") as f:
            data = f.read()
        self._data[path] = (key, data)
        return data

    def etag(self, path):
        if path not in self._etags:
            data = self.content(path)
            self._etags[path] = hashlib.sha256(data).hexdigest() if self.is_lfs(path) else git_blob_sha1(data)
        return self._etags[path]


def peer_pid(client_port, server_port):
    """The pid of the local process whose socket is 127.0.0.1:client_port -> :server_port."""
    want_local = "0100007F:%04X" % client_port
    want_remote = "0100007F:%04X" % server_port
    inode = None
    try:
        with open("/proc/net/tcp") as f:
            for line in f.readlines()[1:]:
                fields = line.split()
                if len(fields) > 9 and fields[1] == want_local and fields[2] == want_remote:
                    inode = fields[9]
                    break
    except OSError:
        return None
    if inode is None or inode == "0":
        return None
    target = "socket:[%s]" % inode
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        fd_dir = "/proc/%s/fd" % pid
        try:
            for fd in os.listdir(fd_dir):
                try:
                    if os.readlink(os.path.join(fd_dir, fd)) == target:
                        return int(pid)
                except OSError:
                    continue
        except OSError:
            continue
    return None


def rule_matches(rule, port, method, path, headers):
    if rule.get("times", 1) == 0:
        return False
    if rule.get("port") not in (None, port):
        return False
    if rule.get("method") not in (None, method):
        return False
    if rule.get("path") is not None and rule["path"] not in path:
        return False
    want = rule.get("range")
    got = headers.get("Range")
    if want is True and got is None:
        return False
    if want is False and got is not None:
        return False
    if isinstance(want, str) and got != want:
        return False
    return True


def take_rule(port, method, path, headers):
    """The action of the first matching rule (its count decremented), or {}."""
    with STATE_LOCK:
        for rule in STATE["rules"]:
            if rule_matches(rule, port, method, path, headers):
                if rule.get("times", 1) > 0:
                    rule["times"] = rule.get("times", 1) - 1
                return dict(rule.get("action", {}))
    return {}


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "shardload-test-hub/1"
    # Headers and body go out as separate writes: with Nagle's algorithm the body of every small
    # reply waited for the client's delayed ACK (40-50 ms a request), which no real Hub adds.
    disable_nagle_algorithm = True

    def log_message(self, *args):
        pass

    def setup(self):
        super().setup()
        self.pid = peer_pid(self.client_address[1], self.server.server_address[1])

    # ---- plumbing ------------------------------------------------------------------------------

    def do_GET(self):
        self.handle_any("GET")

    def do_HEAD(self):
        self.handle_any("HEAD")

    def do_POST(self):
        self.handle_any("POST")

    def handle_any(self, method):
        port = self.server.name
        raw = self.path
        if port == "hub" and raw.startswith("/_test/"):
            self.control(method, raw)
            return
        with STATE_LOCK:
            STATE["inflight"][port] += 1
            concurrent = STATE["inflight"][port]
        entry = {
            "port": port, "method": method, "path": raw,
            "headers": {k.lower(): v for k, v in self.headers.items()},
            "auth": self.headers.get("Authorization"), "range": self.headers.get("Range"),
            "pid": self.pid, "t": time.time(), "concurrent": concurrent, "status": None,
        }
        with STATE_LOCK:
            STATE["log"].append(entry)
        self.entry = entry
        try:
            path = urllib.parse.unquote(raw.split("?", 1)[0])
            action = take_rule(port, method, path, self.headers)
            if action.get("delay"):
                time.sleep(action["delay"])
            if "status" in action:
                body = action.get("body", "").encode()
                hdrs = dict(action.get("headers", {}))
                self.reply(action["status"], hdrs, body, method, action)
                return
            if port == "hub":
                self.route_hub(method, raw, action)
            else:
                self.route_cdn(method, raw, action)
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True
        finally:
            with STATE_LOCK:
                STATE["inflight"][port] -= 1
                entry["t_end"] = time.time()

    def reply(self, status, headers, body, method, action=None):
        action = action or {}
        for name, value in action.get("head_set", {}).items():
            headers[name] = value
        for name in action.get("head_remove", []):
            for key in [k for k in headers if k.lower() == name.lower()]:
                del headers[key]
        keys = {k.lower() for k in headers}
        if "content-length" not in keys and "content-length" not in [n.lower() for n in action.get("head_remove", [])]:
            headers["Content-Length"] = str(len(body))
        self.entry["status"] = status
        self.send_response(status)
        for name, value in headers.items():
            self.send_header(name, value)
        self.end_headers()
        if method == "HEAD":
            return
        self.send_body(body, action)

    def send_body(self, body, action):
        drop = action.get("drop_after")
        stall_at = action.get("stall_after")
        slow = action.get("slow")
        limit = len(body) if drop is None else min(drop, len(body))
        sent = 0
        # Throttled plain bodies go in larger pieces: Python would not keep up with 16 KiB ones.
        piece = PIECE if (slow or stall_at is not None or RATE["bps"] <= 0) else 256 * 1024
        piece = max(1, int(action.get("piece", piece)))
        while sent < limit:
            n = min(piece, limit - sent)
            if stall_at is not None and sent < stall_at <= sent + n:
                n = stall_at - sent
            if n > 0:
                throttle(n)
                self.wfile.write(body[sent:sent + n])
                self.wfile.flush()
                sent += n
            if stall_at is not None and sent == stall_at:
                time.sleep(action.get("stall", 1.0))
                stall_at = None
            if slow:
                time.sleep(slow)
        if drop is not None and drop < len(body):
            self.wfile.flush()
            self.close_connection = True
            try:
                self.connection.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def json_reply(self, status, obj, headers=None):
        hdrs = {"Content-Type": "application/json"}
        hdrs.update(headers or {})
        self.reply(status, hdrs, json.dumps(obj).encode(), "GET")

    def error_reply(self, method, status, code, message, extra=None):
        hdrs = {"X-Error-Code": code, "X-Error-Message": message, "X-Request-Id": "req-%d" % id(self),
                "Content-Type": "application/json"}
        hdrs.update(extra or {})
        self.reply(status, hdrs, json.dumps({"error": message}).encode(), method)

    # ---- control -------------------------------------------------------------------------------

    def control(self, method, raw):
        length = int(self.headers.get("Content-Length", "0") or 0)
        data = self.rfile.read(length) if length else b""
        out = {"ok": True}
        with STATE_LOCK:
            if raw == "/_test/config" and method == "POST":
                cfg = json.loads(data)
                STATE["repos"] = {rid: Repo(rid, spec) for rid, spec in cfg.get("repos", {}).items()}
                STATE["renames"] = dict(cfg.get("renames", {}))
                STATE["rules"] = list(cfg.get("rules", []))
                STATE["log"] = []
            elif raw == "/_test/rules" and method == "POST":
                STATE["rules"] = list(json.loads(data))
            elif raw == "/_test/clear" and method == "POST":
                STATE["log"] = []
            elif raw == "/_test/log":
                out = STATE["log"]
            else:
                out = {"error": "unknown control request %s %s" % (method, raw)}
        body = json.dumps(out).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    # ---- hub -----------------------------------------------------------------------------------

    def lookup(self, repo_id):
        with STATE_LOCK:
            return STATE["repos"].get(repo_id), STATE["renames"].get(repo_id)

    def route_hub(self, method, raw, action):
        path_only = raw.split("?", 1)[0]
        m = re.match(r"^/api/models/(.+)/revision/([^/]+)$", path_only)
        if m and method == "GET":
            self.api_revision(m.group(1), m.group(2), action)
            return
        m = re.match(r"^/(.+?)/resolve/([^/]+)/(.+)$", path_only)
        if m and method in ("GET", "HEAD"):
            self.resolve(method, m.group(1), m.group(2), m.group(3), action)
            return
        self.error_reply(method, 404, "NotFound", "no route for %s" % path_only)

    def api_revision(self, repo_id, rev_raw, action):
        repo, renamed = self.lookup(repo_id)
        if renamed is not None:
            self.reply(307, {"Location": "/api/models/%s/revision/%s" % (renamed, rev_raw)}, b"", "GET", action)
            return
        if repo is None:
            self.error_reply("GET", 401, "RepoNotFound", "Repository not found")
            return
        rev = urllib.parse.unquote(rev_raw)
        sha = repo.resolve(rev)
        if sha is None:
            self.error_reply("GET", 404, "RevisionNotFound", "Invalid rev id: %s" % rev)
            return
        body = json.dumps({"id": repo.id, "sha": sha, "private": False,
                           "siblings": [{"rfilename": p} for p in repo.siblings()]}).encode()
        self.reply(200, {"Content-Type": "application/json"}, body, "GET", action)

    def resolve(self, method, repo_id, rev_raw, path_raw, action):
        repo, renamed = self.lookup(repo_id)
        if renamed is not None:
            self.reply(307, {"Location": "/%s/resolve/%s/%s" % (renamed, rev_raw, path_raw)}, b"", method, action)
            return
        if repo is None:
            self.error_reply(method, 401, "RepoNotFound", "Repository not found")
            return
        auth = self.headers.get("Authorization")
        if repo.gated is not None and auth != "Bearer " + repo.gated:
            if auth is None:
                self.error_reply(method, 401, "GatedRepo", "Access to model %s is restricted. You must have "
                                 "access to it and be authenticated to access it. Please log in." % repo.id)
            else:
                self.error_reply(method, 403, "GatedRepo", "Access to model %s is restricted and you are not in "
                                 "the authorized list." % repo.id)
            return
        sha = repo.resolve(urllib.parse.unquote(rev_raw))
        if sha is None:
            self.error_reply(method, 404, "RevisionNotFound", "Invalid rev id")
            return
        path = urllib.parse.unquote(path_raw)
        if path not in repo.files:
            self.error_reply(method, 404, "EntryNotFound", "%s does not exist on \"main\"" % path,
                             {"X-Repo-Commit": sha})
            return
        etag = repo.etag(path)
        if repo.is_lfs(path):
            size = repo.size_override.get(path, len(repo.content(path)))
            location = "http://127.0.0.1:%d/cdn/%s/%s/%s?sig=%s" % (
                PORTS["cdn"], repo.id, sha, urllib.parse.quote(path), etag[:8])
            hdrs = {"Location": location, "X-Repo-Commit": sha, "X-Linked-Etag": '"%s"' % etag,
                    "X-Linked-Size": str(size), "ETag": '"%s"' % git_blob_sha1(b"lfs pointer " + etag.encode())}
            self.reply(302, hdrs, b"", method, action)
            return
        hdrs = {"ETag": '"%s"' % etag, "X-Repo-Commit": sha, "Accept-Ranges": "bytes"}
        self.content_reply(method, repo.content(path), hdrs, action)

    # ---- content -------------------------------------------------------------------------------

    def route_cdn(self, method, raw, action):
        m = re.match(r"^/cdn/(.+)/([0-9a-f]{40})/(.+)$", raw.split("?", 1)[0])
        if not m:
            self.reply(404, {}, b"no such object", method, action)
            return
        repo, _ = self.lookup(m.group(1))
        path = urllib.parse.unquote(m.group(3))
        if repo is None or path not in repo.files:
            self.reply(404, {}, b"no such object", method, action)
            return
        self.content_reply(method, repo.content(path), {"Accept-Ranges": "bytes", "ETag": '"cdn"'}, action)

    def content_reply(self, method, data, hdrs, action):
        if "corrupt" in action and action["corrupt"] < len(data):
            i = action["corrupt"]
            data = data[:i] + bytes([data[i] ^ 0xFF]) + data[i + 1:]
        if action.get("truncate"):
            data = data[:max(0, len(data) - action["truncate"])]
        if action.get("extend"):
            data = data + b"\0" * action["extend"]
        rng = self.headers.get("Range")
        if rng and not action.get("ignore_range"):
            m = re.match(r"^bytes=(\d+)-(\d*)$", rng)
            if not m:
                self.reply(416, dict(hdrs, **{"Content-Range": "bytes */%d" % len(data)}), b"", method, action)
                return
            a = int(m.group(1))
            b = int(m.group(2)) if m.group(2) else len(data) - 1
            if a >= len(data) or b < a:
                self.reply(416, dict(hdrs, **{"Content-Range": "bytes */%d" % len(data)}), b"", method, action)
                return
            b = min(b, len(data) - 1)
            hdrs = dict(hdrs, **{"Content-Range": "bytes %d-%d/%d" % (a, b, len(data))})
            self.reply(206, hdrs, data[a:b + 1], method, action)
            return
        self.reply(200, hdrs, data, method, action)


class Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    # socketserver's default backlog (5) dropped the SYNs of a client opening a dozen ranged
    # connections at once (two files x 8 chunks): each dropped one cost the client's 1 s SYN
    # retransmission, which a throttled benchmark then measured. A real CDN accepts them.
    request_queue_size = 128

    def __init__(self, name):
        super().__init__(("127.0.0.1", 0), Handler)
        self.name = name

    def handle_error(self, request, client_address):
        """Clients cutting connections (cancelled transfers) are normal here: stay quiet."""
        if isinstance(sys.exc_info()[1], (ConnectionError, TimeoutError)):
            return
        super().handle_error(request, client_address)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--port-file", required=True, help="where to write {\"hub\": N, \"cdn\": M, \"pid\": P}")
    ap.add_argument("--rate", type=float, default=0.0,
                    help="bytes per second for all bodies together (a throttled Hub for benchmarks); 0: unlimited")
    args = ap.parse_args()
    RATE["bps"] = args.rate
    hub = Server("hub")
    cdn = Server("cdn")
    PORTS["hub"] = hub.server_address[1]
    PORTS["cdn"] = cdn.server_address[1]
    for srv in (hub, cdn):
        threading.Thread(target=srv.serve_forever, daemon=True).start()
    tmp = args.port_file + ".tmp"
    with open(tmp, "w") as f:
        json.dump({"hub": PORTS["hub"], "cdn": PORTS["cdn"], "pid": os.getpid()}, f)
    os.replace(tmp, args.port_file)
    print("hub on 127.0.0.1:%d, cdn on 127.0.0.1:%d" % (PORTS["hub"], PORTS["cdn"]), flush=True)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
