"""vclib -- helpers for the virtual-cluster tests and benchmarks (scripts/vcluster).

Cluster(...) brings a cluster up (its own id, subnet and namespaces) and always takes it down
again: on return, on an exception, and on SIGINT/SIGTERM (turned into an exception). Clusters
left by a killed owner are removed by `vcluster down --stale`, which every Cluster runs first.
"""

import json
import os
import re
import signal
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
VCLUSTER = os.path.join(REPO, "scripts", "vcluster")


class Interrupted(Exception):
    pass


def _raise(signum, _frame):
    raise Interrupted("signal %d" % signum)


def install_signal_handlers():
    signal.signal(signal.SIGTERM, _raise)
    signal.signal(signal.SIGINT, _raise)


def vc(args, cid=None, check=True, timeout=120, capture=True, env=None):
    argv = [VCLUSTER] + (["--id", str(cid)] if cid is not None else []) + list(args)
    p = subprocess.run(argv, capture_output=capture, text=True, timeout=timeout, env=env)
    if check and p.returncode != 0:
        raise RuntimeError("vcluster %s failed (%d): %s" % (" ".join(args), p.returncode,
                                                            (p.stderr or "")[-2000:]))
    return p


def skip_reason():
    """None when this machine can run a vcluster with shared storage, else the reason."""
    p = subprocess.run([VCLUSTER, "check"], capture_output=True, text=True)
    return None if p.returncode == 0 else (p.stdout + p.stderr).strip() or "vcluster check failed"


class Cluster:
    def __init__(self, nodes=2, rate=None, storage=None, local=None, storage_rate=None, no_page_cache=False,
                 node_local=()):
        self.args = ["up", "--nodes", str(nodes)]
        for d in node_local:  # folders only node 0 sees (the others: an empty tmpfs each)
            self.args += ["--node-local", d]
        if no_page_cache:
            self.args += ["--no-page-cache"]
        if rate:
            self.args += ["--rate", rate]
        if storage_rate:
            self.args += ["--storage-rate", storage_rate]
        if storage:
            self.args += ["--storage", storage]
        if local:
            self.args += ["--local", local]
        self.nodes = nodes
        self.id = None

    def __enter__(self):
        vc(["down", "--stale"], check=False)
        env = dict(os.environ, SLVC_OWNER=str(os.getpid()))
        p = vc(self.args, env=env)
        m = re.search(r"SLVC_ID=(\d+)", p.stdout)
        if not m:
            raise RuntimeError("vcluster up printed no id: %s %s" % (p.stdout, p.stderr))
        self.id = int(m.group(1))
        self.root = vc(["path"], self.id).stdout.strip()
        self.prefix = "slvc%d-n" % self.id
        return self

    def __exit__(self, *exc):
        if self.id is not None:
            vc(["down"], self.id, check=False)
            left = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
            if ("slvc%d-" % self.id) in left:
                print("vclib: namespaces left after down: %s" % left, file=sys.stderr)
        return False

    def mpirun(self, ppn, argv, env=None, timeout=300, np=None):
        """Runs argv on the cluster; returns (rc, stdout, stderr, seconds)."""
        args = ["mpirun", "--ppn", str(ppn), "--timeout", str(timeout)]
        if np is not None:
            args += ["-np", str(np)]
        t0 = time.monotonic()
        p = subprocess.run([VCLUSTER, "--id", str(self.id)] + args + list(argv), capture_output=True,
                           text=True, env=env, timeout=timeout + 60)
        return p.returncode, p.stdout, p.stderr, time.monotonic() - t0

    def exec(self, node, argv, check=False, timeout=60):
        return vc(["exec", str(node)] + list(argv), self.id, check=check, timeout=timeout)

    def counters(self, node):
        rx, tx = vc(["counters", str(node)], self.id).stdout.split()
        return int(rx), int(tx)

    def fault(self, *args):
        return vc(list(args), self.id)


def ensure_model(build, size):
    """A Llama-shaped model of ~size (scripts/make-fixture bench), generated once into the build."""
    out = os.path.join(build, "vcluster-model-%s" % size)
    if not os.path.exists(os.path.join(out, "config.json")):
        subprocess.run([os.path.join(REPO, "scripts", "make-fixture"), "bench", out, "--size", size],
                       check=True, stdout=subprocess.DEVNULL)
    return out


def report_nodes(report, ppn):
    """Per-node sums of the report's per-rank figures (rank r on node r // ppn)."""
    nodes = {}
    for e in report["ranks"]:
        n = nodes.setdefault(e["rank"] // ppn, {"bytes_read": 0, "bytes_covering": 0, "bytes_received": 0,
                                                "bytes_sent": 0, "bytes_needed": 0})
        for k in n:
            n[k] += e.get(k, 0)
    return nodes


def load_json(path):
    with open(path) as f:
        return json.load(f)
