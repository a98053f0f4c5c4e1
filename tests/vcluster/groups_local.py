"""groups_local -- virtual-cluster groups with no shared mount (test_vcluster.py runs them).

The checkpoint, or the Hub cache, is on node 0's disk only: `vcluster up --node-local DIR` leaves
DIR (a folder of the machine) to node 0 and mounts an empty tmpfs of their own over it on the
other nodes, as a node-local disk of another machine looks from there. The fixtures the reference
reads stay visible everywhere (`--local`: the nodes read the machine's folders).

  2x2_local  2 nodes x 2 ranks, links 1 Gbit/s: vc_load with SLVC_MODEL_ROOT (every case loads
             the copy on node 0 with storage auto, byte-exact on every rank against the reference;
             node 1's ranks open no file and read 0 bytes; read amplification 1.00), then, links at
             25 Mbit/s, the 24 MB model, on node 0 only, at tp=4 and tp=2 dp=2 with --storage auto:
             (a) every per-node figure of the report (bytes read, received, sent; the model's
             storage blocks and network bytes) equals `shardload plan --storage local
             --ranks-per-node 2 --world 4`'s, and the bytes over node 1's link lie between the
             model's network bytes into it and what its ranks received (+3 MiB); (b) the measured
             transfer (phases.transfer_seconds) within -25 % / +25 % of the plan's predicted time
             at the link's rate (see check_time).
  3x1_local  the same at 3 nodes x 1 rank, pp=3 and dp=3.
  hub_local  3 nodes x 1 rank, links 1 Gbit/s, the Hub cache (HF_HUB_CACHE, HF_HOME) on node 0
             only, the test Hub inside node 0: `load org/llama --storage local --dp 3` downloads and
             loads; the server saw rank 0's process only; ranks 1 and 2 opened no file and read 0
             bytes, and nothing appeared in the cache folder as nodes 1 and 2 see it; node 0 holds
             the three weight files. Then from the warm cache with --storage auto (the ranks find
             out themselves): the same. Both pre-sharded copies (in a folder every node sees) are
             byte-identical to a load from the fixture folder.
"""

import json
import os
import re
import shutil
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import vclib  # noqa: E402
from vctest import MODEL_SIZE, SLACK, HubServer, check, load_model, run_vc_load, same_copies  # noqa: E402

# The model loads run at 25 Mbit/s: slow enough that the links, not the two cores the ranks share
# with Open MPI's TCP transport (and whatever else runs), set their time (at 50 Mbit/s on a busy
# machine tp=4 took 1.16-1.46 x its prediction, at 25 Mbit/s 1.13-1.16 x). vc_load's many small
# loads run at 1 Gbit/s first.
RATE, RATE_BPS = "25mbit", 25e6
GOODPUT = 1448 / 1514  # TCP payload of a full 1514-byte frame at the 1500-byte MTU (what tbf counts)
TOLERANCE = 0.25
# Per-node figures of the report that the plan must reproduce: the inputs of its time model.
FIGURES = ("bytes_read", "bytes_received", "bytes_sent", "bytes_storage_blocks", "bytes_network_in",
           "bytes_network_out")


def stage_node0(ctx):
    """The folder only node 0 will see, holding copies of the fixtures and of the 24 MB model."""
    nl = ctx.node0_folder()
    shutil.copytree(ctx.fixtures, os.path.join(nl, "fixtures"), copy_function=os.link)
    shutil.copytree(vclib.ensure_model(ctx.build, MODEL_SIZE), os.path.join(nl, "model"), copy_function=os.link)
    return nl


def check_node0_only(cl, folder, label, want):
    """Node 0 sees the names `want` in folder; every other node sees it empty."""
    for n in range(cl.nodes):
        p = cl.exec(n, ["ls", "-A", folder])
        seen = sorted(p.stdout.split())
        if n == 0:
            check(p.returncode == 0 and all(w in seen for w in want), "%s: node 0 sees %s in %s (%s)" %
                  (label, want, folder, seen))
        else:
            check(p.returncode == 0 and seen == [], "%s: node %d sees %s empty (%s)" % (label, n, folder, seen))


def plan_json(ctx, model, layout, world, ppn, gbps):
    p = subprocess.run([ctx.cli, "plan", model] + layout +
                       ["--world", str(world), "--storage", "local", "--ranks-per-node", str(ppn),
                        "--network-gbps", repr(gbps), "--json"], capture_output=True, text=True, timeout=120)
    check(p.returncode == 0, "shardload plan %s (rc %d)%s" % (" ".join(layout), p.returncode, p.stderr[-2000:]))
    return json.loads(p.stdout) if p.returncode == 0 else None


def check_rows(report, ppn, label, mode):
    """The report's storage (mode; node 0's ranks read every file, the others none) and the rows of
    the ranks off node 0: no file opened, no byte read."""
    st = report.get("storage", {})
    world = report["world"]
    on0 = min(ppn, world)
    check(st.get("mode") == mode and st.get("ranks_reading_every_file") == on0 and
          st.get("ranks_reading_no_file") == world - on0,
          "%s: report storage %s: %d ranks read every file (node 0's), %d none" % (label, st, on0, world - on0))
    for r in report["ranks"][on0:]:
        check(r["bytes_read"] == 0 and r["files_opened"] == 0, "%s: rank %d (node %d) opened %d files, read %d bytes"
              % (label, r["rank"], r["rank"] // ppn, r["files_opened"], r["bytes_read"]))


def check_time(report, plan, label):
    """(b): the measured transfer against the plan's prediction at the link's payload rate. The
    model counts a broadcast once per node it reaches; Open MPI's broadcast over TCP is not
    node-aware and sends a node's ranks a copy each (node 1's link counters carry what its ranks
    received, not the model's network bytes). The upper bound allows for that with the plan's own
    figures: the broadcast time scaled by the largest node's bytes_received / bytes_network_in."""
    pred = plan["prediction"]
    measured = report["phases"]["transfer_seconds"]
    copies = max([n["bytes_received"] / n["bytes_network_in"] for n in plan["nodes"] if n["bytes_network_in"] > 0]
                 or [1.0])
    lo = (1 - TOLERANCE) * pred["predicted_seconds"]
    hi = (1 + TOLERANCE) * (pred["predicted_read_seconds"] + copies * pred["predicted_broadcast_seconds"])
    check(lo <= measured <= hi,
          "%s: transfer %.2f s, predicted %.2f s (read %.3f + broadcast %.2f; measured / predicted %.2f), "
          "a copy per receiving rank x%.3f: expected between %.2f and %.2f s" %
          (label, measured, pred["predicted_seconds"], pred["predicted_read_seconds"],
           pred["predicted_broadcast_seconds"], measured / pred["predicted_seconds"], copies, lo, hi))


def check_local_load(ctx, cl, ppn, nl, layout, label):
    model = os.path.join(nl, "model")
    report, inbound, _ = load_model(ctx, cl, ppn, layout + ["--storage", "auto"], label, model=model)
    if report is None:
        return
    world = cl.nodes * ppn
    plan = plan_json(ctx, model, layout, world, ppn, RATE_BPS * GOODPUT / 8e9)
    check(abs(report["read_amplification"] - 1.0) < 1e-9, "%s: read amplification 1.00 (%.4f)" %
          (label, report["read_amplification"]))
    check_rows(report, ppn, label, "auto")
    if plan is None:
        return
    for n in range(cl.nodes):
        # bytes_read as planned: a cold file read with O_DIRECT widens each read to whole blocks
        # (the ranks' bytes_read_planned is what the plan gave them, read exactly)
        got = dict(report["nodes"][n], bytes_read=sum(r["bytes_read_planned"] for r in report["ranks"]
                                                      if r["rank"] // ppn == n))
        want = plan["nodes"][n]
        check(all(got[k] == want[k] for k in FIGURES), "%s: node %d: the report's figures %s equal the plan's %s" %
              (label, n, [got[k] for k in FIGURES], [want[k] for k in FIGURES]))
        if n == 0:
            continue
        lo, hi = want["bytes_network_in"], want["bytes_received"] + SLACK
        check(lo <= inbound[n] <= hi, "%s: node %d: %d bytes came over its link (the model's network bytes into "
              "it %d, its ranks received %d: expected between %d and %d)" %
              (label, n, inbound[n], lo, want["bytes_received"], lo, hi))
    check_time(report, plan, label)


def local_group(ctx, nodes, ppn, layouts, label):
    nl = stage_node0(ctx)
    with vclib.Cluster(nodes=nodes, rate="1gbit", local=ctx.export, node_local=[nl]) as cl:
        check_node0_only(cl, nl, label, ["fixtures", "model"])
        run_vc_load(ctx, cl, ppn, label, SLVC_MODEL_ROOT=os.path.join(nl, "fixtures"))
        for n in range(nodes):
            cl.fault("rate", str(n), RATE)
        for layout in layouts:
            check_local_load(ctx, cl, ppn, nl, layout, "%s %s" % (label, " ".join(layout)))


def group_2x2_local(ctx):
    local_group(ctx, 2, 2, [["--tp", "4"], ["--tp", "2", "--dp", "2"]], "2x2_local")


def group_3x1_local(ctx):
    local_group(ctx, 3, 1, [["--pp", "3"], ["--dp", "3"]], "3x1_local")


def hub_load(ctx, cl, hub, nl, storage, copy, label):
    """org/llama at dp=3 through the Hub cache on node 0; returns the report (or None)."""
    work = hub.work
    rep = os.path.join(work, "report-%s.json" % copy)
    env = ctx.env(cl, 1, HF_ENDPOINT=hub.endpoint, HF_HUB_CACHE=os.path.join(nl, "cache"),
                  HF_HOME=os.path.join(nl, "home"), SHARDLOAD_LOG="info")
    env.pop("HF_HUB_OFFLINE", None)
    hub.ctl("/_test/clear", {})
    rc, _, err, secs = cl.mpirun(1, [ctx.cli, "load", "org/llama", "--storage", storage, "--dp", "3",
                                     "--hub-backoff-base-ms", "10", "--report", rep,
                                     "--save-sharded", os.path.join(work, copy)], env=env, timeout=180)
    check(rc == 0, "%s: 3 nodes load org/llama --storage %s, the cache on node 0 only (rc %d, %.1f s)%s" %
          (label, storage, rc, secs, "" if rc == 0 else ": " + err[-3000:]))
    if rc != 0:
        return None
    pids = {e.get("pid") for e in hub.ctl("/_test/log")}
    m = re.search(r"\[shardload 0\] info: resolving 'org/llama' \(process (\d+)\)", err)
    check(m is not None and pids <= {int(m.group(1))},
          "%s: no process but rank 0's reached the Hub (%s)" % (label, sorted(map(str, pids))))
    check(not re.findall(r"\[shardload [12]\] info: resolving", err), "%s: no other rank tried to resolve" % label)
    report = vclib.load_json(rep)
    check_rows(report, 1, label, storage)
    return report


def group_hub_local(ctx):
    nl = ctx.node0_folder()
    with vclib.Cluster(nodes=3, rate="1gbit", local=ctx.export, node_local=[nl]) as cl:
        work = os.path.join(ctx.export, "hub")  # every node sees it: the reports and the copies
        os.makedirs(work)
        with HubServer(ctx, cl, work) as hub:
            hub_load(ctx, cl, hub, nl, "local", "hub-copy", "hub_local")
            check_node0_only(cl, nl, "hub_local", ["cache"])
            p = cl.exec(0, ["find", os.path.join(nl, "cache"), "-name", "*.safetensors"])
            check(len(p.stdout.split()) == 3, "hub_local: node 0's cache holds the 3 weight files (%s)" % p.stdout.split())
            hub_load(ctx, cl, hub, nl, "auto", "hub-auto-copy", "hub_local warm auto")
            check_node0_only(cl, nl, "hub_local warm auto", ["cache"])
        rc, _, err, _ = cl.mpirun(1, [ctx.cli, "load", os.path.join(cl.root, "fixtures", "llama"), "--dp", "3",
                                      "--save-sharded", os.path.join(work, "dir-copy")], env=ctx.env(cl, 1), timeout=180)
        check(rc == 0, "hub_local: the same load from the fixture folder (rc %d)%s" % (rc, "" if rc == 0 else err[-2000:]))
        if rc == 0:
            for copy in ("hub-copy", "hub-auto-copy"):
                same_copies(os.path.join(work, copy), os.path.join(work, "dir-copy"), "hub_local " + copy, 3)


GROUPS = {"2x2_local": group_2x2_local, "3x1_local": group_3x1_local, "hub_local": group_hub_local}
