#!/usr/bin/env python3
"""test_vcluster.py -- shardload on a virtual cluster (scripts/vcluster), one group per ctest test.

Usage: test_vcluster.py --vc-load BUILD/vc_load GROUP
       GROUP: 2x2, 3x1, hub, slow_link, page_cache; 2x2_local, 3x1_local, hub_local (groups_local.py)

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
  2x2_local  (groups_local.py: no shared mount) 2 nodes x 2 ranks, the fixtures and the 24 MB model
             copied onto node 0's disk only (`vcluster up --node-local`: the other nodes see an
             empty folder there): vc_load loads every case from the copy with storage auto,
             byte-exact on every rank, node 1 reading nothing; the model at tp=4 and tp=2 dp=2
             with --storage auto, links 25 Mbit/s: per-node figures equal `shardload plan
             --storage local`'s, node 1's link carries what its ranks received, and the transfer
             takes the plan's predicted time at the link's rate (-25 % .. +25 %, allowing for
             the copy each receiving rank of a node gets).
  3x1_local  the same at 3 nodes x 1 rank, pp=3 and dp=3.
  hub_local  3 nodes x 1 rank, the Hub cache on node 0 only: org/llama at dp=3 with --storage local
             (downloading) and then auto (warm cache) loads, nodes 1 and 2 open no file and see
             nothing of the cache, the pre-sharded copies equal a load from the folder.
"""

import os
import re
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import groups_local  # noqa: E402
import vclib  # noqa: E402
from vctest import SLACK, HubServer, check, load_model, main, run_vc_load, same_copies  # noqa: E402

PAGE_CACHE_MODEL_SIZE = "64M"  # tensors large enough for the kernel's read-ahead windows to grow


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


def group_hub(ctx):
    # The nodes see the machine's folders (--local): the Hub cache that rank 0 fills must be
    # shared, and sshfs cannot hold it (creating or reading its symbolic links fails).
    with vclib.Cluster(nodes=3, rate="1gbit", local=ctx.export) as cl:
        work = os.path.join(ctx.export, "hub")
        os.makedirs(work)
        with HubServer(ctx, cl, work) as hub:
            for n in (1, 2):
                for port in (hub.ports["hub"], hub.ports["cdn"]):
                    for host in ("127.0.0.1", "10.213.%d.10" % cl.id):
                        r = hub.reach(n, host, port)
                        check(r.startswith("refused"), "hub: node %d cannot reach the Hub at %s:%d (%s)" % (n, host, port, r))
            r = hub.reach(0, "127.0.0.1", hub.ports["hub"])
            check(r == "connected", "hub: node 0 reaches the Hub (%s)" % r)
            hub.ctl("/_test/clear", {})
            env = ctx.env(cl, 1, HF_ENDPOINT=hub.endpoint, HF_HUB_CACHE=os.path.join(cl.root, "hub", "cache"),
                          HF_HOME=os.path.join(cl.root, "hub", "home"), SHARDLOAD_LOG="info")
            env.pop("HF_HUB_OFFLINE", None)
            layout = ["--dp", "3", "--hub-backoff-base-ms", "10"]
            rc, _, err, secs = cl.mpirun(1, [ctx.cli, "load", "org/llama", "--save-sharded",
                                             os.path.join(cl.root, "hub", "hub-copy")] + layout, env=env, timeout=180)
            check(rc == 0, "hub: 3 nodes load org/llama, rank 0 downloading (rc %d, %.1f s)%s" %
                  (rc, secs, "" if rc == 0 else ": " + err[-3000:]))
            log = hub.ctl("/_test/log")
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
            if rc == 0:
                same_copies(os.path.join(work, "hub-copy"), os.path.join(work, "dir-copy"), "hub", 3)


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
GROUPS.update(groups_local.GROUPS)


if __name__ == "__main__":
    sys.exit(main(GROUPS, __doc__))
