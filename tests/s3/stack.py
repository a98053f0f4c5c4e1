#!/usr/bin/env python3
"""stack.py -- a local S3 store for the `s3` tests: s3rver (npm) behind the fault-injecting front
(tests/s3/front.py), both on 127.0.0.1 with ports chosen at start, plus an independent client
(Debian's awscli, /usr/bin/aws, else botocore) that uploads fixtures and lists what is stored.

s3rver is found at $SL_S3RVER, else at .s3rver/node_modules/.bin/s3rver of the source tree (what
scripts/setup installs); without node, s3rver or botocore the tests skip (exit 77). Every process
started here is stopped by stop(); the store's files live in the caller's work folder.
"""

import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE = os.environ.get("SL_SOURCE_DIR", os.path.join(HERE, "..", ".."))
ACCESS = "AKIDSHARDLOADTEST"
SECRET = "test/secret+key=0123456789"
REGION = "us-east-1"
# Variables of AWS's tools that would change what a client here does.
AWS_VARS = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE", "AWS_DEFAULT_PROFILE",
            "AWS_REGION", "AWS_DEFAULT_REGION", "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3",
            "AWS_SHARED_CREDENTIALS_FILE", "AWS_CONFIG_FILE", "http_proxy", "https_proxy", "HTTP_PROXY",
            "HTTPS_PROXY", "ALL_PROXY", "all_proxy")


class Skip(Exception):
    pass


def s3rver_path():
    p = os.environ.get("SL_S3RVER") or os.path.join(SOURCE, ".s3rver", "node_modules", ".bin", "s3rver")
    if not os.path.exists(p):
        raise Skip("s3rver not found at %s (scripts/setup installs it; or set SL_S3RVER)" % p)
    if shutil.which("node") is None:
        raise Skip("node not found (Debian: nodejs)")
    try:
        import botocore  # noqa: F401
    except ImportError:
        raise Skip("botocore not found for %s (Debian: python3-botocore)" % sys.executable)
    return p


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def wait_port(port, proc, what, seconds=30):
    deadline = time.time() + seconds
    while time.time() < deadline:
        if proc.poll() is not None:
            raise RuntimeError("%s exited at start (rc %s)" % (what, proc.returncode))
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError("%s did not start listening on %d" % (what, port))


class S3Stack:
    def __init__(self, work, buckets=("models",)):
        binary = s3rver_path()
        self.work = work
        self.procs = []
        self.backend_port = free_port()
        argv = [binary, "-d", os.path.join(work, "s3data"), "-a", "127.0.0.1", "-p", str(self.backend_port),
                "--silent"]
        for b in buckets:
            argv += ["--configure-bucket", b]
        # s3rver makes its continuation tokens with DES, which OpenSSL 3 keeps in its legacy provider.
        env = dict(os.environ, NODE_OPTIONS="--openssl-legacy-provider")
        self.procs.append(subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=sys.stderr, env=env))
        wait_port(self.backend_port, self.procs[-1], "s3rver")
        port_file = os.path.join(work, "front.json")
        self.procs.append(subprocess.Popen([sys.executable, os.path.join(HERE, "front.py"), "--port-file", port_file,
                                            "--backend-port", str(self.backend_port)], stdout=subprocess.DEVNULL,
                                           stderr=sys.stderr))
        deadline = time.time() + 20
        while not os.path.exists(port_file):
            if time.time() > deadline or self.procs[-1].poll() is not None:
                raise RuntimeError("the S3 front did not start")
            time.sleep(0.02)
        with open(port_file) as f:
            self.port = json.load(f)["port"]
        self.endpoint = "http://127.0.0.1:%d" % self.port
        self.home = os.path.join(work, "home")
        os.makedirs(self.home, exist_ok=True)
        self.configure()

    # ---- the front -------------------------------------------------------------------------------

    def _call(self, path, payload=None):
        data = json.dumps(payload).encode() if payload is not None else None
        req = urllib.request.Request(self.endpoint + path, data=data, method="POST" if data is not None else "GET")
        with urllib.request.urlopen(req, timeout=20) as r:
            return json.loads(r.read())

    def configure(self, credentials=None, rules=None, anonymous=False, bucket_regions=None, region=REGION):
        creds = credentials if credentials is not None else {ACCESS: {"secret": SECRET}}
        self._call("/_test/config", {"credentials": creds, "rules": rules or [], "anonymous": anonymous,
                                     "bucket_regions": bucket_regions or {}, "region": region})

    def rules(self, rules):
        self._call("/_test/rules", rules)

    def log(self):
        return self._call("/_test/log")

    def clear(self):
        self._call("/_test/clear", {})

    # ---- clients ---------------------------------------------------------------------------------

    def env(self, **extra):
        """The environment of a shardload process: this store, these credentials, nothing of the
        caller's AWS settings or proxies, a HOME without ~/.aws."""
        env = {k: v for k, v in os.environ.items() if k not in AWS_VARS}
        env.update({"AWS_ACCESS_KEY_ID": ACCESS, "AWS_SECRET_ACCESS_KEY": SECRET, "AWS_REGION": REGION,
                    "AWS_ENDPOINT_URL": self.endpoint, "HOME": self.home})
        for k, v in extra.items():
            if v is None:
                env.pop(k, None)
            else:
                env[k] = v
        return env

    def _botocore(self, endpoint=None, access=ACCESS, secret=SECRET):
        import botocore.session
        s = botocore.session.get_session()
        return s.create_client("s3", region_name=REGION, endpoint_url=endpoint or self.endpoint,
                               aws_access_key_id=access, aws_secret_access_key=secret)

    def aws(self, *args):
        """Debian's awscli (/usr/bin/aws: another `aws` may come first on PATH) against the front;
        None when it is not installed."""
        if not os.path.exists("/usr/bin/aws"):
            return None
        env = self.env()
        env.pop("AWS_ENDPOINT_URL")  # awscli 2.9 ignores it: --endpoint-url below
        p = subprocess.run(["/usr/bin/aws", "--endpoint-url", self.endpoint] + list(args), env=env,
                           capture_output=True, text=True, timeout=300)
        if p.returncode != 0:
            raise RuntimeError("aws %s failed: %s" % (" ".join(args), p.stderr[-2000:]))
        return p.stdout

    def upload(self, folder, bucket, prefix):
        """Every file of folder (recursively) under s3://bucket/prefix/, through the front."""
        if self.aws("s3", "cp", "--recursive", "--only-show-errors", folder, "s3://%s/%s" % (bucket, prefix)) is None:
            c = self._botocore()
            for root, _dirs, names in os.walk(folder):
                for n in names:
                    full = os.path.join(root, n)
                    rel = os.path.relpath(full, folder).replace(os.sep, "/")
                    with open(full, "rb") as f:
                        c.put_object(Bucket=bucket, Key="%s/%s" % (prefix, rel), Body=f.read())

    def put_many(self, bucket, items):
        """Small objects straight into s3rver (bulk, not through the front): {key: bytes}."""
        # s3rver's own account (it checks the signatures it is sent, when it can).
        c = self._botocore("http://127.0.0.1:%d" % self.backend_port, "S3RVER", "S3RVER")
        for key, data in items.items():
            c.put_object(Bucket=bucket, Key=key, Body=data)

    def listing(self, bucket, prefix):
        """[(key, size, etag)] as the independent client lists them (every page)."""
        out = []
        c = self._botocore()
        token = None
        while True:
            kw = {"Bucket": bucket, "Prefix": prefix}
            if token:
                kw["ContinuationToken"] = token
            r = c.list_objects_v2(**kw)
            out += [(o["Key"], o["Size"], o["ETag"]) for o in r.get("Contents", [])]
            token = r.get("NextContinuationToken")
            if not r.get("IsTruncated"):
                return out

    def stop(self):
        for p in reversed(self.procs):
            p.terminate()
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
