#!/usr/bin/env python3
"""test_vcluster.py -- shardload on a virtual cluster (scripts/vcluster), one group per ctest test.

Usage: test_vcluster.py --vc-load BUILD/vc_load GROUP      (GROUP: 2x2, 3x1, hub, slow_link, page_cache)

Every group brings up its own cluster (own id, subnet and namespaces) with the fixtures served
from the storage namespace over sshfs (every read crosses the emulated network), runs, and takes
the cluster down again (also on failure and on SIGINT/SIGTERM); every mpirun is bounded by
`timeout -k`. Exit 77 (skipped) with the reason when the machine cannot run a vcluster.

  2x2        2 nodes x 2 ranks, links 1 Gbit/s: vc_load (every layout of 4 ranks on dense, MoE and
             EP fixtures, byte-exact on every rank; hostnames, node-local ranks, the library's
             cuda_device default; per-node figures of the report), then a 24 MB model at tp=4 and
             tp=2 dp=2: per node, the bytes that crossed the node's link are at least what its ranks
             read and at most that plus what they received by broadcast (+ slack): a node reads
             only its ranks' bytes. (These clusters mount the storage without page cache,
             `vcluster up --no-page-cache`, so that the link carries exactly what the ranks pread;
             with the page cache, readahead and page granularity fetch more, see docs/TESTING.md.)
  3x1        3 nodes x 1 rank: vc_load at world 3 and the per-node link check at pp=3 and dp=3.
  hub        3 nodes x 1 rank, nodes reading the machine's folders (--local: the Hub cache must be
             shared and sshfs cannot hold its symbolic links); the local test Hub runs on 127.0.0.1 inside node 0, so only node 0
             can reach it (checked: the other nodes get connection refused); a Hub load
             org/llama at dp=3 succeeds, the server saw exactly one client process (rank 0), no
             other rank tried to resolve, and the pre-sharded copy equals a load from the folder.
  slow_link  2 nodes x 2 ranks, links 1 Gbit/s but node 1's 10 Mbit/s (100x slower): the load
             completes, byte-exact (vc_load's four-rank cases on two fixtures and the 24 MB model's
             report: amplification 1.00), and takes at least node 1's bytes / 10 Mbit/s.
  page_cache 2 nodes x 2 ranks, links 1 Gbit/s, the storage mounted with the page cache (as NFS or
             Lustre clients are, and reads across nodes without read-ahead): vc_load's four-rank
             cases on two fixtures byte-exact on every rank, then a 64 MB model at tp=4 and tp=2
             dp=2; per node, the bytes over its
             link are at most the storage blocks its ranks read plus what they received (+3 % and
             1 MiB): no read-ahead past the plan's reads into the other node's bytes (before the
             loader turned it off across nodes, 15 % more crossed each link at tp=4). The report
             says so (the strategy choice's reason).
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
PAGE_CACHE_MODEL_SIZE = "64M"  # tensors large enough for the kernel's read-ahead windows to grow
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

    def add_model(self, size=MODEL_SIZE):
        model = vclib.ensure_model(self.build, size)
        shutil.copytree(model, os.path.join(self.export, "model"), copy_function=os.link)

    def cleanup(self):
        shutil.rmtree(self.export, ignore_errors=True)

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


def load_model(ctx, cl, ppn, layout, label, timeout=300, size=MODEL_SIZE):
    """The model (of size, ctx.add_model) through the cli; returns (report, per-node link bytes in,
    seconds)."""
    rep = os.path.join(ctx.export, "report-%s.json" % re.sub(r"\W", "", label))
    before = [cl.counters(n) for n in range(cl.nodes)]
    rc, out, err, secs = cl.mpirun(ppn, [ctx.cli, "load", os.path.join(cl.root, "model"), "--report", rep,
                                         "--quiet"] + layout, env=ctx.env(cl, ppn), timeout=timeout)
    after = [cl.counters(n) for n in range(cl.nodes)]
    check(rc == 0, "%s: load of the %s model %s (rc %d, %.1f s)%s" %
          (label, size, " ".join(layout), rc, secs, "" if rc == 0 else ": " + err[-2000:]))
    if rc != 0:
        return None, None, secs
    inbound = [a[0] - b[0] for a, b in zip(after, before)]
    return vclib.load_json(rep), inbound, secs


def check_node_traffic(ctx, cl, ppn, layout, label):
    report, inbound, _ = load_model(ctx, cl, ppn, layout, label)
    if report is None:
        return
    check(abs(report["read_amplification"] - 1.0) < 1e-9, "%s: read amplification 1.00" % label)
    nodes = vclib.report_nodes(report, ppn)
    total = report["checkpoint_bytes"]
    for n in range(cl.nodes):
        f = nodes[n]
        lo = f["bytes_read"]
        hi = f["bytes_read"] + f["bytes_received"] + SLACK
        check(lo <= inbound[n] <= hi,
              "%s: node %d: %d bytes came over its link; its ranks read %d and received %d by "
              "broadcast (expected between %d and %d)" % (label, n, inbound[n], f["bytes_read"],
                                                           f["bytes_received"], lo, hi))
        if f["bytes_read"] + f["bytes_received"] < total // 2:
            check(inbound[n] < total // 2 + SLACK, "%s: node %d did not read the whole model (%d of %d bytes)" %
                  (label, n, inbound[n], total))
    return report


# ---- groups -------------------------------------------------------------------------------------

def group_2x2(ctx):
    ctx.add_model()
    with vclib.Cluster(nodes=2, rate="1gbit", storage=ctx.export, no_page_cache=True) as cl:
        run_vc_load(ctx, cl, 2, "2x2")
        check_node_traffic(ctx, cl, 2, ["--tp", "4"], "2x2 tp=4")
        check_node_traffic(ctx, cl, 2, ["--tp", "2", "--dp", "2"], "2x2 tp=2 dp=2")


def group_3x1(ctx):
    ctx.add_model()
    with vclib.Cluster(nodes=3, rate="1gbit", storage=ctx.export, no_page_cache=True) as cl:
        run_vc_load(ctx, cl, 1, "3x1")
        check_node_traffic(ctx, cl, 1, ["--pp", "3"], "3x1 pp=3")
        check_node_traffic(ctx, cl, 1, ["--dp", "3"], "3x1 dp=3")


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


def group_hub(ctx):
    # The nodes see the machine's folders (--local): the Hub cache that rank 0 fills must be
    # shared, and sshfs cannot hold it (creating or reading its symbolic links fails).
    with vclib.Cluster(nodes=3, rate="1gbit", local=ctx.export) as cl:
        work = os.path.join(ctx.export, "hub")
        os.makedirs(work)
        port_file = os.path.join(work, "ports.json")
        # The Hub server inside node 0, on node 0's own 127.0.0.1.
        server = subprocess.Popen([vclib.VCLUSTER, "--id", str(cl.id), "exec", "0", sys.executable,
                                   os.path.join(ctx.source, "tests", "hub", "server.py"), "--port-file", port_file],
                                  stdout=subprocess.DEVNULL)
        try:
            deadline = time.time() + 30
            while not os.path.exists(port_file):
                if time.time() > deadline or server.poll() is not None:
                    raise RuntimeError("the test Hub server did not start in node 0")
                time.sleep(0.1)
            time.sleep(0.2)
            ports = vclib.load_json(port_file)
            endpoint = "http://127.0.0.1:%d" % ports["hub"]

            def hubctl(path, payload=None):
                p = cl.exec(0, [sys.executable, "-c", HUBCTL, endpoint + path, json.dumps(payload) if payload else ""])
                if p.returncode != 0:
                    raise RuntimeError("hub control %s failed: %s" % (path, p.stderr))
                return json.loads(p.stdout)

            sha = "0123456789abcdef0123456789abcdef01234567"
            # The server reads the model from the machine's folder (it is a process of node 0 that
            # sees the machine's files); the ranks read the cache through the shared storage.
            hubctl("/_test/config", {"repos": {"org/llama": {"dir": os.path.join(ctx.fixtures, "llama"), "sha": sha}},
                                     "rules": [], "renames": {}})
            for n in (1, 2):
                for port in (ports["hub"], ports["cdn"]):
                    for host in ("127.0.0.1", "10.213.%d.10" % cl.id):
                        r = cl.exec(n, [sys.executable, "-c", CONNECT, host, str(port)]).stdout.strip()
                        check(r.startswith("refused"), "hub: node %d cannot reach the Hub at %s:%d (%s)" % (n, host, port, r))
            r = cl.exec(0, [sys.executable, "-c", CONNECT, "127.0.0.1", str(ports["hub"])]).stdout.strip()
            check(r == "connected", "hub: node 0 reaches the Hub (%s)" % r)
            hubctl("/_test/clear", {})
            env = ctx.env(cl, 1, HF_ENDPOINT=endpoint, HF_HUB_CACHE=os.path.join(cl.root, "hub", "cache"),
                          HF_HOME=os.path.join(cl.root, "hub", "home"), SHARDLOAD_LOG="info")
            env.pop("HF_HUB_OFFLINE", None)
            layout = ["--dp", "3", "--hub-backoff-base-ms", "10"]
            rc, _, err, secs = cl.mpirun(1, [ctx.cli, "load", "org/llama", "--save-sharded",
                                             os.path.join(cl.root, "hub", "hub-copy")] + layout, env=env, timeout=180)
            check(rc == 0, "hub: 3 nodes load org/llama, rank 0 downloading (rc %d, %.1f s)%s" %
                  (rc, secs, "" if rc == 0 else ": " + err[-3000:]))
            log = hubctl("/_test/log")
            pids = {e.get("pid") for e in log}
            m = re.search(r"\[shardload 0\] info: resolving 'org/llama' \(process (\d+)\)", err)
            check(m is not None, "hub: rank 0 logged its process id")
            check(len(log) > 0 and m is not None and pids == {int(m.group(1))},
                  "hub: the server saw exactly one client process, rank 0's (%s)" % sorted(map(str, pids)))
            check(not re.findall(r"\[shardload [12]\] info: resolving", err), "hub: no other rank tried to resolve")
            rc, _, err, _ = cl.mpirun(1, [ctx.cli, "load", os.path.join(cl.root, "fixtures", "llama"), "--save-sharded",
                                          os.path.join(cl.root, "hub", "dir-copy")] + layout,
                                      env=ctx.env(cl, 1), timeout=180)
            check(rc == 0, "hub: the same load from the folder (rc %d)" % rc)
            a, b = os.path.join(work, "hub-copy"), os.path.join(work, "dir-copy")
            if rc == 0 and os.path.isdir(a) and os.path.isdir(b):
                names = sorted(f for f in os.listdir(b) if f.endswith(".safetensors"))
                check(len(names) == 3 and sorted(f for f in os.listdir(a) if f.endswith(".safetensors")) == names,
                      "hub: one part per rank in both copies (%s)" % names)
                check(all(filecmp.cmp(os.path.join(a, f), os.path.join(b, f), shallow=False) for f in names),
                      "hub: the copies are byte-identical")
        finally:
            server.terminate()
            try:
                server.wait(timeout=10)
            except subprocess.TimeoutExpired:
                server.kill()


def group_slow_link(ctx):
    ctx.add_model()
    fast, slow, slow_bps = "1gbit", "10mbit", 10e6
    with vclib.Cluster(nodes=2, rate=fast, storage=ctx.export) as cl:
        cl.fault("rate", "1", slow)
        st = vclib.vc(["status"], cl.id).stdout
        check(re.search(r"slvc%d-n1 .*rate 10Mbit" % cl.id, st) is not None, "slow_link: node 1 at 10 Mbit/s\n" + st)
        run_vc_load(ctx, cl, 2, "slow_link", SLVC_CASES="quick")
        report, inbound, secs = load_model(ctx, cl, 2, ["--tp", "4"], "slow_link tp=4", timeout=240)
        if report is not None:
            check(abs(report["read_amplification"] - 1.0) < 1e-9, "slow_link: read amplification 1.00")
            nodes = vclib.report_nodes(report, 2)
            need = nodes[1]["bytes_read"] + nodes[1]["bytes_received"]
            floor = need * 8 / slow_bps
            check(secs >= 0.9 * floor, "slow_link: the load took %.1f s, at least node 1's %d bytes at 10 Mbit/s (%.1f s)"
                  % (secs, need, floor))
            check(inbound[1] >= nodes[1]["bytes_read"], "slow_link: node 1's reads crossed its slow link")


def group_page_cache(ctx):
    ctx.add_model(PAGE_CACHE_MODEL_SIZE)
    with vclib.Cluster(nodes=2, rate="1gbit", storage=ctx.export) as cl:
        run_vc_load(ctx, cl, 2, "page_cache", SLVC_CASES="quick")
        for layout in (["--tp", "4"], ["--tp", "2", "--dp", "2"]):
            label = "page_cache " + " ".join(layout)
            report, inbound, _ = load_model(ctx, cl, 2, layout, label, size=PAGE_CACHE_MODEL_SIZE)
            if report is None:
                continue
            check(abs(report["read_amplification"] - 1.0) < 1e-9, "%s: read amplification 1.00" % label)
            nodes = report.get("nodes") or []
            check(len(nodes) == 2, "%s: the report has 2 nodes (%d)" % (label, len(nodes)))
            for e in nodes:
                n = e["node"]
                need = e["bytes_storage_blocks"] + e["bytes_network_in"]
                hi = need * 1.03 + (1 << 20)
                check(e["bytes_read"] <= inbound[n] <= hi,
                      "%s: node %d: %d bytes came over its link; its ranks read %d (storage blocks %d) and "
                      "received %d (expected between %d and %d)" % (label, n, inbound[n], e["bytes_read"],
                                                                     e["bytes_storage_blocks"], e["bytes_network_in"],
                                                                     e["bytes_read"], hi))
            # Where the page cache is read (not O_DIRECT), the report says it is without read-ahead.
            buffered = [c for c in report.get("strategy_choice", []) if c.get("strategy", "").endswith("buffered")]
            if layout == ["--tp", "4"]:
                check(buffered, "%s: some bytes are read through the page cache (%s)" %
                      (label, [c.get("strategy") for c in report.get("strategy_choice", [])]))
            for c in buffered:
                check("without read-ahead" in c.get("reason", ""),
                      "%s: %s: the strategy choice says its page-cache reads have no read-ahead across nodes (%s)" %
                      (label, c.get("file"), c.get("reason")))


GROUPS = {"2x2": group_2x2, "3x1": group_3x1, "hub": group_hub, "slow_link": group_slow_link,
          "page_cache": group_page_cache}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--vc-load", required=True)
    ap.add_argument("group", choices=sorted(GROUPS))
    args = ap.parse_args()
    why = vclib.skip_reason()
    if why is not None:
        print("skipped: %s" % why)
        return 77
    vclib.install_signal_handlers()
    ctx = Ctx(args)
    t0 = time.monotonic()
    try:
        GROUPS[args.group](ctx)
    except vclib.Interrupted as e:
        check(False, "interrupted (%s); the cluster was taken down" % e)
    finally:
        ctx.cleanup()
    print("%s: %d failure(s), %.1f s" % (args.group, len(FAILS), time.monotonic() - t0))
    return 1 if FAILS else 0


if __name__ == "__main__":
    sys.exit(main())
