"""vctest -- the harness the virtual-cluster test groups share (test_vcluster.py, groups_local.py).

check() records a failure and goes on (a group reports every failed check, not the first); Ctx holds
the folders of one group (the export every node sees, the folder only node 0 sees); run_vc_load and
load_model run vc_load and the cli on a cluster; HubServer runs the local test Hub inside node 0.
"""

import argparse
import filecmp
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
import vclib  # noqa: E402

FAILS = []
MODEL_SIZE = "24M"
SLACK = 3 << 20  # bytes of MPI, ssh and header traffic a node may see besides the model's


def check(cond, what):
    print(("ok:   " if cond else "FAIL: ") + what, flush=True)
    if not cond:
        FAILS.append(what)


class Ctx:
    def __init__(self, args):
        self.vc_load = args.vc_load
        self.fixtures = os.environ["SL_FIXTURES"]
        self.cli = os.environ["SL_CLI"]
        self.build = os.environ.get("SL_BUILD_DIR", os.path.dirname(self.cli))
        self.source = os.environ.get("SL_SOURCE_DIR", vclib.REPO)
        # The folder the storage namespace exports: the fixtures and the 24 MB model, hard-linked
        # (sshfs shows symlinks as links, which the nodes would resolve locally).
        self.export = tempfile.mkdtemp(prefix="vcluster-export-", dir=self.build)
        shutil.copytree(self.fixtures, os.path.join(self.export, "fixtures"), copy_function=os.link)
        self.node0 = None

    def add_model(self, size=MODEL_SIZE):
        model = vclib.ensure_model(self.build, size)
        shutil.copytree(model, os.path.join(self.export, "model"), copy_function=os.link)

    def node0_folder(self):
        """A folder for `vcluster up --node-local`: only node 0 will see what is put there."""
        self.node0 = tempfile.mkdtemp(prefix="vcluster-node0-", dir=self.build)
        return self.node0

    def cleanup(self):
        shutil.rmtree(self.export, ignore_errors=True)
        if self.node0 is not None:
            shutil.rmtree(self.node0, ignore_errors=True)

    def env(self, cl, ppn, **extra):
        e = dict(os.environ)
        e.update({"SL_FIXTURES": os.path.join(cl.root, "fixtures"), "SLVC_PPN": str(ppn),
                  "SLVC_HOST_PREFIX": cl.prefix})
        e.update({k: str(v) for k, v in extra.items()})
        return e


def run_vc_load(ctx, cl, ppn, label, timeout=300, **extra):
    rc, out, err, secs = cl.mpirun(ppn, [ctx.vc_load], env=ctx.env(cl, ppn, **extra), timeout=timeout)
    sys.stdout.write(out)
    check(rc == 0, "%s: vc_load on %d node(s) x %d rank(s) passes (rc %d, %.1f s)%s" %
          (label, cl.nodes, ppn, rc, secs, "" if rc == 0 else ": " + (out + err)[-3000:]))
    return rc == 0


def load_model(ctx, cl, ppn, layout, label, timeout=300, size=MODEL_SIZE, model=None):
    """The model (of size, ctx.add_model; or the folder `model`) through the cli; returns (report,
    per-node link bytes in, seconds)."""
    rep = os.path.join(ctx.export, "report-%s.json" % re.sub(r"\W", "", label))
    before = [cl.counters(n) for n in range(cl.nodes)]
    rc, out, err, secs = cl.mpirun(ppn, [ctx.cli, "load", model or os.path.join(cl.root, "model"), "--report", rep,
                                         "--quiet"] + layout, env=ctx.env(cl, ppn), timeout=timeout)
    after = [cl.counters(n) for n in range(cl.nodes)]
    check(rc == 0, "%s: load of the %s model %s (rc %d, %.1f s)%s" %
          (label, size, " ".join(layout), rc, secs, "" if rc == 0 else ": " + err[-2000:]))
    if rc != 0:
        return None, None, secs
    inbound = [a[0] - b[0] for a, b in zip(after, before)]
    return vclib.load_json(rep), inbound, secs


HUBCTL = r"""
import json, sys, urllib.request
url, payload = sys.argv[1], sys.argv[2]
data = payload.encode() if payload else None
req = urllib.request.Request(url, data=data, method="POST" if data else "GET")
with urllib.request.urlopen(req, timeout=10) as r:
    sys.stdout.write(r.read().decode())
"""

CONNECT = r"""
import socket, sys
s = socket.socket()
s.settimeout(3)
try:
    s.connect((sys.argv[1], int(sys.argv[2])))
    print("connected")
except OSError as e:
    print("refused: %s" % e)
"""

HUB_SHA = "0123456789abcdef0123456789abcdef01234567"


class HubServer:
    """tests/hub/server.py inside node 0, on node 0's own 127.0.0.1 (no other node reaches it),
    serving org/llama from the fixture (the server is a process of node 0 that sees the machine's
    files). `with HubServer(ctx, cl, work) as hub:` hub.endpoint, hub.ports, hub.ctl(path, payload)."""

    def __init__(self, ctx, cl, work):
        self.ctx, self.cl, self.work = ctx, cl, work
        self.server = None

    def __enter__(self):
        port_file = os.path.join(self.work, "ports.json")
        self.server = subprocess.Popen([vclib.VCLUSTER, "--id", str(self.cl.id), "exec", "0", sys.executable,
                                        os.path.join(self.ctx.source, "tests", "hub", "server.py"),
                                        "--port-file", port_file], stdout=subprocess.DEVNULL)
        try:
            deadline = time.time() + 30
            while not os.path.exists(port_file):
                if time.time() > deadline or self.server.poll() is not None:
                    raise RuntimeError("the test Hub server did not start in node 0")
                time.sleep(0.1)
            time.sleep(0.2)
            self.ports = vclib.load_json(port_file)
            self.endpoint = "http://127.0.0.1:%d" % self.ports["hub"]
            self.ctl("/_test/config", {"repos": {"org/llama": {"dir": os.path.join(self.ctx.fixtures, "llama"),
                                                               "sha": HUB_SHA}},
                                       "rules": [], "renames": {}})
        except BaseException:
            self.stop()
            raise
        return self

    def ctl(self, path, payload=None):
        p = self.cl.exec(0, [sys.executable, "-c", HUBCTL, self.endpoint + path,
                             json.dumps(payload) if payload is not None else ""])
        if p.returncode != 0:
            raise RuntimeError("hub control %s failed: %s" % (path, p.stderr))
        return json.loads(p.stdout)

    def reach(self, node, host, port):
        """What a connection from node to host:port gets: "connected" or "refused: ..."."""
        return self.cl.exec(node, [sys.executable, "-c", CONNECT, host, str(port)]).stdout.strip()

    def stop(self):
        if self.server is None:
            return
        self.server.terminate()
        try:
            self.server.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.server.kill()
        self.server = None

    def __exit__(self, *exc):
        self.stop()
        return False


def same_copies(a, b, label, parts):
    """Two --save-sharded folders: `parts` parts each, the same names, byte-identical."""
    if not (os.path.isdir(a) and os.path.isdir(b)):
        check(False, "%s: both pre-sharded copies exist (%s, %s)" % (label, a, b))
        return
    names = sorted(f for f in os.listdir(b) if f.endswith(".safetensors"))
    check(len(names) == parts and sorted(f for f in os.listdir(a) if f.endswith(".safetensors")) == names,
          "%s: one part per rank in both copies (%s)" % (label, names))
    check(all(os.path.exists(os.path.join(a, f)) and filecmp.cmp(os.path.join(a, f), os.path.join(b, f), shallow=False)
              for f in names), "%s: the copies are byte-identical" % label)


def main(groups, doc):
    ap = argparse.ArgumentParser(description=doc.split("\n", 1)[0])
    ap.add_argument("--vc-load", required=True)
    ap.add_argument("group", choices=sorted(groups))
    args = ap.parse_args()
    why = vclib.skip_reason()
    if why is not None:
        print("skipped: %s" % why)
        return 77
    vclib.install_signal_handlers()
    ctx = Ctx(args)
    t0 = time.monotonic()
    try:
        groups[args.group](ctx)
    except vclib.Interrupted as e:
        check(False, "interrupted (%s); the cluster was taken down" % e)
    finally:
        ctx.cleanup()
    print("%s: %d failure(s), %.1f s" % (args.group, len(FAILS), time.monotonic() - t0))
    return 1 if FAILS else 0
