#!/usr/bin/env python3
"""front.py -- a fault-injecting S3 front for the `s3` tests, in front of a local s3rver.

s3rver (npm) stores objects and answers path-style requests, ranged GETs and ListObjectsV2, but it
checks no signature and knows no If-Match. This front, on 127.0.0.1 with a port chosen by the OS
(written as JSON to --port-file: {"port": N, "pid": P}), does what it lacks and forwards the rest:

  - addressing: path-style (/bucket/key) and virtual-host (Host: bucket.localhost:N) requests are
    both accepted and forwarded path-style;
  - authentication: a request with an Authorization header is checked as AWS would: the access key
    known, the credential scope's region the bucket's, the session token present and valid, and
    the SigV4 signature recomputed with botocore from the canonical form of the decoded path and
    query (so a client that signs a wrongly encoded URL fails here as it would on AWS). Unsigned
    requests are refused (403 AccessDenied) unless the configuration allows anonymous reads;
  - If-Match on GET and HEAD: compared with the object's current ETag (412 PreconditionFailed);
  - regions: a bucket may be configured in another region: signed requests for the wrong region get
    400 AuthorizationHeaderMalformed naming the right one, with x-amz-bucket-region;
  - faults, by rules (the first rule that matches and has `times` left applies; times -1 = always):
      match:  "method", "key" (substring of the decoded key), "range" (exact Range value, or
              true/false for present/absent), "query" (substring of the raw query), "list" (true:
              only ListObjectsV2 requests), "after" (let that many matching requests through first)
      action: "status" + "code" + "message" (an S3 error reply), "headers", "delay" (s before
              replying), "drop_after" (send K body bytes, then cut the connection), "stall_after"
              + "stall" (pause K bytes into the body for that many seconds), "replace" (upload new
              bytes for the object first: the request then fails its If-Match like any later
              one), "close" (cut the connection without a reply).

Control endpoints (never logged; bucket names cannot start with '_'):
  POST /_test/config  {"credentials": {AK: {"secret": S, "token": T or null, "expired": bool}},
                       "region": R, "bucket_regions": {bucket: region}, "anonymous": bool,
                       "rules": [...]}: replaces everything and clears the log
  POST /_test/rules   [...]: replaces the rules
  GET  /_test/log     the request log: one JSON object per request (method, host, bucket, key,
                      query, range, if_match, auth ("ok", "none" or the error code), status,
                      bytes (body bytes sent), pid of the connecting process (Linux /proc), t)
  POST /_test/clear   clears the log
Python 3 standard library and botocore (Debian python3-botocore).
"""

import argparse
import http.client
import json
import os
import re
import socket
import sys
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from xml.sax.saxutils import escape

from botocore.auth import S3SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "hub"))
from server import peer_pid  # noqa: E402  (the Hub test server's: which process holds a socket)

LOCK = threading.Lock()
STATE = {"credentials": {}, "region": "us-east-1", "bucket_regions": {}, "anonymous": False, "rules": [],
         "log": []}
BACKEND = {"port": 0}
AUTH_RE = re.compile(r"^AWS4-HMAC-SHA256 Credential=([^/]+)/(\d{8})/([^/]+)/s3/aws4_request, ?"
                     r"SignedHeaders=([a-z0-9;-]+), ?Signature=([0-9a-f]{64})$")
# Reply headers of s3rver passed on to the client.
PASSED = ("content-type", "content-length", "content-range", "etag", "last-modified", "accept-ranges")


def rule_matches(rule, method, key, query, headers):
    if rule.get("times", 1) == 0:
        return False
    if rule.get("method") not in (None, method):
        return False
    if rule.get("key") is not None and (key is None or rule["key"] not in key):
        return False
    if rule.get("query") is not None and rule["query"] not in query:
        return False
    if rule.get("list") is True and "list-type=2" not in query:
        return False
    want = rule.get("range")
    got = headers.get("Range")
    if (want is True and got is None) or (want is False and got is not None):
        return False
    return not (isinstance(want, str) and got != want)


def take_rule(method, key, query, headers):
    with LOCK:
        for rule in STATE["rules"]:
            if rule_matches(rule, method, key, query, headers):
                if rule.get("after", 0) > 0:  # let this many matching requests through first
                    rule["after"] -= 1
                    continue
                if rule.get("times", 1) > 0:
                    rule["times"] = rule.get("times", 1) - 1
                return dict(rule.get("action", {}))
    return {}


def backend(method, path, query, headers=None, body=None):
    """One request to s3rver (path-style, unsigned): (status, headers dict lower-cased, body)."""
    conn = http.client.HTTPConnection("127.0.0.1", BACKEND["port"], timeout=60)
    try:
        conn.request(method, path + ("?" + query if query else ""), body=body, headers=headers or {})
        r = conn.getresponse()
        data = r.read()
        return r.status, {k.lower(): v for k, v in r.getheaders()}, data
    finally:
        conn.close()


def error_xml(code, message, extra=None):
    fields = "".join("<%s>%s</%s>" % (k, escape(str(v)), k) for k, v in (extra or {}).items())
    return ('<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>%s</Code><Message>%s</Message>%s'
            "<RequestId>front</RequestId></Error>" % (code, escape(message), fields)).encode()


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "shardload-test-s3/1"
    disable_nagle_algorithm = True

    def log_message(self, *args):
        pass

    def setup(self):
        super().setup()
        self.pid = peer_pid(self.client_address[1], self.server.server_address[1])

    def do_GET(self):
        self.handle_any("GET")

    def do_HEAD(self):
        self.handle_any("HEAD")

    def do_PUT(self):
        self.handle_any("PUT")

    def do_POST(self):
        self.handle_any("POST")

    def do_DELETE(self):
        self.handle_any("DELETE")

    # ---- the request ----------------------------------------------------------------------------

    def address(self):
        """(bucket, key or None, raw path of the key part) from the Host header and the path."""
        raw_path, _, query = self.path.partition("?")
        host = (self.headers.get("Host") or "").split(":")[0].lower()
        if host.endswith(".localhost"):
            bucket = host[:-len(".localhost")]
            rest = raw_path[1:]
        else:
            bucket, _, rest = raw_path[1:].partition("/")
            bucket = urllib.parse.unquote(bucket)
        key = urllib.parse.unquote(rest) if rest else None
        return bucket, key, query

    def handle_any(self, method):
        if self.path.startswith("/_test/"):
            self.control(method)
            return
        length = int(self.headers.get("Content-Length", "0") or 0)
        body = self.rfile.read(length) if length else b""
        bucket, key, query = self.address()
        entry = {"method": method, "host": self.headers.get("Host"), "bucket": bucket, "key": key,
                 "query": query, "range": self.headers.get("Range"), "if_match": self.headers.get("If-Match"),
                 "auth": None, "status": None, "bytes": 0, "pid": self.pid, "t": time.time()}
        with LOCK:
            STATE["log"].append(entry)
        self.entry = entry
        try:
            self.serve(method, bucket, key, query, body)
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True

    def serve(self, method, bucket, key, query, body):
        failure = self.authenticate(method, bucket, query)
        signed = self.headers.get("Authorization") is not None
        self.entry["auth"] = failure[1] if failure is not None else "ok" if signed else "none"
        if failure is not None:
            status, code, message, extra, headers = failure
            self.reply(status, headers, error_xml(code, message, extra), method)
            return
        action = take_rule(method, key, query, self.headers)
        if action.get("delay"):
            time.sleep(action["delay"])
        if action.get("close"):
            self.close_connection = True
            self.connection.shutdown(socket.SHUT_RDWR)
            return
        if "replace" in action and key is not None:
            backend("PUT", "/%s/%s" % (bucket, urllib.parse.quote(key)), "",
                    {"Content-Type": "application/octet-stream"}, action["replace"].encode())
        if "status" in action:
            self.reply(action["status"], dict(action.get("headers", {})),
                       error_xml(action.get("code", "InternalError"), action.get("message", "injected")), method)
            return
        path = "/" + urllib.parse.quote(bucket) + ("/" + urllib.parse.quote(key) if key is not None else "")
        want = self.headers.get("If-Match")
        if want is not None and key is not None and method in ("GET", "HEAD"):
            st, hdrs, _ = backend("HEAD", path, "")
            if st == 200 and hdrs.get("etag") != want:
                self.reply(412, {}, error_xml("PreconditionFailed", "At least one of the pre-conditions you "
                                              "specified did not hold", {"Condition": "If-Match"}), method)
                return
        fwd = {k: v for k, v in self.headers.items() if k.lower() in ("range", "content-type")}
        st, hdrs, data = backend(method, path, query, fwd, body if method in ("PUT", "POST") else None)
        out = {k: v for k, v in hdrs.items() if k in PASSED}
        out.pop("content-length", None)
        self.reply(st, out, data, method, action)

    # ---- authentication -------------------------------------------------------------------------

    def authenticate(self, method, bucket, query):
        """None when the request may go on, else (status, code, message, extra, headers)."""
        with LOCK:
            creds = dict(STATE["credentials"])
            region = STATE["bucket_regions"].get(bucket, STATE["region"])
            anonymous = STATE["anonymous"]
        auth = self.headers.get("Authorization")
        if auth is None:
            if anonymous:
                return None
            return (403, "AccessDenied", "Access Denied (an unsigned request)", {}, {})
        m = AUTH_RE.match(auth)
        if m is None:
            return (400, "AuthorizationHeaderMalformed", "The authorization header is malformed", {}, {})
        access, _day, scope_region, signed, signature = m.groups()
        cred = creds.get(access)
        if cred is None:
            return (403, "InvalidAccessKeyId", "The AWS Access Key Id you provided does not exist in our "
                    "records.", {"AWSAccessKeyId": access}, {})
        if scope_region != region:
            return (400, "AuthorizationHeaderMalformed", "The authorization header is malformed; the region "
                    "'%s' is wrong; expecting '%s'" % (scope_region, region), {"Region": region},
                    {"x-amz-bucket-region": region})
        names = signed.split(";")
        for need in ("host", "x-amz-date", "x-amz-content-sha256"):
            if need not in names:
                return (400, "InvalidRequest", "Missing required header for this request: " + need
                        if need != "host" else "host is not signed", {}, {})
        token = cred.get("token")
        if token is not None and ("x-amz-security-token" not in names
                                  or self.headers.get("x-amz-security-token") != token):
            return (403, "InvalidToken", "The provided token is malformed or otherwise invalid.", {}, {})
        if cred.get("expired"):
            return (400, "ExpiredToken", "The provided token has expired.", {}, {})
        headers = {}
        for name in names:
            value = self.headers.get(name)
            if value is None:
                return (403, "SignatureDoesNotMatch", "signed header %s is missing" % name, {}, {})
            headers[name] = value
        # The canonical form from the decoded path and query, as AWS computes it: a client that
        # encodes a key or a query value otherwise signs something else.
        raw_path, _, _ = self.path.partition("?")
        path = urllib.parse.quote(urllib.parse.unquote(raw_path), safe="/~")
        params = urllib.parse.parse_qsl(query, keep_blank_values=True)
        req = AWSRequest(method=method, url="http://%s%s" % (headers["host"], path), headers=headers,
                         params=params)
        req.context["timestamp"] = headers["x-amz-date"]
        signer = S3SigV4Auth(Credentials(access, cred["secret"], token), "s3", region)
        canonical = signer.canonical_request(req)
        want = signer.signature(signer.string_to_sign(req, canonical), req)
        if want != signature:
            return (403, "SignatureDoesNotMatch", "The request signature we calculated does not match the "
                    "signature you provided.", {"CanonicalRequest": canonical}, {})
        return None

    # ---- replies --------------------------------------------------------------------------------

    def reply(self, status, headers, body, method, action=None):
        action = action or {}
        self.entry["status"] = status
        self.send_response(status)
        for name, value in headers.items():
            self.send_header(name, value)
        if status >= 300 and not any(k.lower() == "content-type" for k in headers):
            self.send_header("Content-Type", "application/xml")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if method == "HEAD":
            return
        drop = action.get("drop_after")
        stall_at = action.get("stall_after")
        limit = len(body) if drop is None else min(drop, len(body))
        sent = 0
        while sent < limit:
            n = min(16384, limit - sent)
            if stall_at is not None and sent < stall_at <= sent + n:
                n = stall_at - sent
            if n > 0:
                self.wfile.write(body[sent:sent + n])
                self.wfile.flush()
                sent += n
                self.entry["bytes"] = sent
            if stall_at is not None and sent == stall_at:
                time.sleep(action.get("stall", 1.0))
                stall_at = None
        if drop is not None and drop < len(body):
            self.close_connection = True
            try:
                self.connection.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def control(self, method):
        length = int(self.headers.get("Content-Length", "0") or 0)
        data = self.rfile.read(length) if length else b""
        out = {"ok": True}
        with LOCK:
            if self.path == "/_test/config" and method == "POST":
                cfg = json.loads(data)
                STATE["credentials"] = dict(cfg.get("credentials", {}))
                STATE["region"] = cfg.get("region", "us-east-1")
                STATE["bucket_regions"] = dict(cfg.get("bucket_regions", {}))
                STATE["anonymous"] = bool(cfg.get("anonymous", False))
                STATE["rules"] = list(cfg.get("rules", []))
                STATE["log"] = []
            elif self.path == "/_test/rules" and method == "POST":
                STATE["rules"] = list(json.loads(data))
            elif self.path == "/_test/clear" and method == "POST":
                STATE["log"] = []
            elif self.path == "/_test/log":
                out = STATE["log"]
            else:
                out = {"error": "unknown control request %s %s" % (method, self.path)}
        body = json.dumps(out).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


class Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 128

    def handle_error(self, request, client_address):
        """Clients cutting connections are normal here: stay quiet."""
        if isinstance(sys.exc_info()[1], (ConnectionError, TimeoutError)):
            return
        super().handle_error(request, client_address)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--port-file", required=True, help='where to write {"port": N, "pid": P}')
    ap.add_argument("--backend-port", type=int, required=True, help="the s3rver's port on 127.0.0.1")
    args = ap.parse_args()
    BACKEND["port"] = args.backend_port
    srv = Server(("127.0.0.1", 0), Handler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    tmp = args.port_file + ".tmp"
    with open(tmp, "w") as f:
        json.dump({"port": srv.server_address[1], "pid": os.getpid()}, f)
    os.replace(tmp, args.port_file)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
