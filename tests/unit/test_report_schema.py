#!/usr/bin/env python3
"""test_report_schema.py -- real reports against docs/report.schema.json (docs/REPORT.md).

Loads the llama fixture at 1 rank and at 3 ranks (tp=1, dp=3: broadcasts) and the mixtral fixture
at 3 ranks with expert parallelism, writing --report; runs `shardload plan --json` for a few
worlds; validates every object against the schema (python3-jsonschema; skipped, code 77,
without it), then checks what the schema cannot: report_version 2; the load's node layout comes
from the job (one machine: one node holding every rank, named by this host, node_layout `job`),
the dry run's from ranks_per_node (`configured`, no host names); per-node sums equal the
per-rank sums; the prediction is the sum of its parts. With one rank per node on two nodes
(tp=2: two-phase exchanges and broadcasts between the nodes), every byte a rank receives or sends
crosses its node's link once, so the time model's network bytes per node equal the rank's
figures, which the schedule counts on its own (exchange rounds are all-to-alls, not broadcasts).
A described plan (every tensor its own parameter, one a fallback) loaded and dry-run at 2 ranks: both
reports valid, their fill counting each way (docs/REPORT.md). Needs SL_CLI, SL_MPIRUN, SL_FIXTURES,
SL_SOURCE_DIR.
"""
import json
import os
import socket
import subprocess
import sys
import tempfile

try:
    import jsonschema
except ImportError:
    print("python3-jsonschema is not installed: skipped")
    sys.exit(77)

CLI = os.environ["SL_CLI"]
MPIRUN = os.environ["SL_MPIRUN"]
FIX = os.environ["SL_FIXTURES"]
SRC = os.environ["SL_SOURCE_DIR"]
fails = []


def check(cond, msg):
    if not cond:
        fails.append(msg)
        print("FAIL: " + msg, file=sys.stderr)


def validate(schema, doc, tag):
    v = jsonschema.Draft202012Validator(schema)
    errors = sorted(v.iter_errors(doc), key=lambda e: list(e.path))
    for e in errors[:5]:
        check(False, "%s: %s at %s" % (tag, e.message[:200], "/".join(map(str, e.path))))
    check(doc.get("report_version") == 2, "%s: report_version %r" % (tag, doc.get("report_version")))
    nodes, pred = doc["nodes"], doc["prediction"]
    check(len(nodes) == pred["nodes"], "%s: %d node objects, prediction says %d" % (tag, len(nodes), pred["nodes"]))
    check(sum(n["ranks"] for n in nodes) == doc["world"], "%s: node ranks do not add up to the world" % tag)
    for k in ("bytes_read", "bytes_received", "bytes_sent"):
        check(sum(n[k] for n in nodes) == sum(r[k] for r in doc["ranks"]), "%s: node %s != rank sum" % (tag, k))
    check(abs(pred["predicted_seconds"] - pred["predicted_read_seconds"] - pred["predicted_broadcast_seconds"])
          < 0.0015, "%s: predicted_seconds is not read + broadcast: %s" % (tag, pred))
    for n in nodes:
        check(n["bytes_storage_blocks"] >= n["bytes_read"] - sum(r["bytes_covering"] for r in doc["ranks"]),
              "%s: node %d storage blocks below its reads" % (tag, n["node"]))


def described(schema, tmp):
    """A described plan (docs/spec/DESIGN.md §12) of llama at 2 ranks: every tensor a parameter of its
    own, the rotary inv_freq a fallback one; the load's and the dry run's reports, their fill."""
    import struct
    tensors = {}
    folder = os.path.join(FIX, "llama")
    for f in sorted(os.listdir(folder)):
        if f.endswith(".safetensors"):
            with open(os.path.join(folder, f), "rb") as fh:
                n = struct.unpack("<Q", fh.read(8))[0]
                tensors.update({k: v for k, v in json.loads(fh.read(n)).items() if k != "__metadata__"})
    params = []
    for name, v in sorted(tensors.items()):
        z = [0] * len(v["shape"])
        params.append({"name": name, "dtype": v["dtype"], "shape": v["shape"],
                       "fill": "fallback" if name.endswith("inv_freq") else "recorded",
                       "regions": [{"tensor": name, "start": z, "count": v["shape"], "dst_start": z,
                                    "dst_count": v["shape"]}]})
    plan_file = os.path.join(tmp, "plan.json")
    with open(plan_file, "w") as f:
        json.dump({"classes": [{"ranks": [0, 1], "plan": {"params": params}}]}, f)
    report = os.path.join(tmp, "described.json")
    p = subprocess.run([MPIRUN, "-np", "2", CLI, "load", folder, "--dp", "2", "--plan-file", plan_file, "--report",
                        report, "--quiet"], capture_output=True, text=True, timeout=300)
    q = subprocess.run([CLI, "plan", folder, "--world", "2", "--dp", "2", "--plan-file", plan_file, "--json"],
                       capture_output=True, text=True, timeout=300)
    check(p.returncode == 0 and q.returncode == 0, "described: %s %s" % (p.stderr[-1000:], q.stderr[-1000:]))
    if p.returncode != 0 or q.returncode != 0:
        return
    for tag, doc in (("described load", json.load(open(report))), ("described plan", json.loads(q.stdout))):
        validate(schema, doc, tag)
        fill = doc["fill"]
        want = {"spec": {"params": 0, "bytes": 0},
                "recorded": {"params": 2 * (len(tensors) - 1), "bytes": 2 * (doc["checkpoint_bytes"] - 16)},
                "fallback": {"params": 2, "bytes": 32, "names": ["model.layers.0.self_attn.rotary_emb.inv_freq"]}}
        check(fill == want, "%s: fill %s, expected %s" % (tag, fill, want))


def main():
    schema = json.load(open(os.path.join(SRC, "docs", "report.schema.json")))
    jsonschema.Draft202012Validator.check_schema(schema)
    with tempfile.TemporaryDirectory(prefix="sl-schema-") as tmp:
        loads = [("llama np1", 1, "llama", []), ("llama np3 dp3", 3, "llama", ["--dp", "3"]),
                 ("mixtral np3 ep", 3, "mixtral", ["--dp", "3", "--enable-expert-parallel"])]
        for tag, np_, model, extra in loads:
            report = os.path.join(tmp, "r.json")
            p = subprocess.run([MPIRUN, "-np", str(np_), CLI, "load", os.path.join(FIX, model), "--report", report,
                                "--quiet"] + extra, capture_output=True, text=True, timeout=300)
            if p.returncode != 0:
                check(False, "%s: load failed: %s" % (tag, p.stderr[-2000:]))
                continue
            doc = json.load(open(report))
            validate(schema, doc, tag)
            pred = doc["prediction"]
            check(pred["node_layout"] == "job" and pred["nodes"] == 1 and pred["ranks_per_node"] == np_,
                  "%s: node layout not the job's: %s" % (tag, pred))
            check(doc["nodes"][0]["hostname"] == socket.gethostname(),
                  "%s: hostname %r" % (tag, doc["nodes"][0]["hostname"]))
        for world, extra in ((1, []), (4, ["--tp", "2", "--dp", "2", "--ranks-per-node", "2"]),
                             (6, ["--dp", "6", "--ranks-per-node", "4"]),
                             (2, ["--tp", "2", "--ranks-per-node", "1"])):
            tag = "plan world %d" % world
            p = subprocess.run([CLI, "plan", os.path.join(FIX, "llama"), "--world", str(world), "--json"] + extra,
                               capture_output=True, text=True, timeout=300)
            check(p.returncode == 0, "%s: %s" % (tag, p.stderr[-500:]))
            if p.returncode == 0:
                doc = json.loads(p.stdout)
                validate(schema, doc, tag)
                check(doc["prediction"]["node_layout"] == "configured" and
                      all(n["hostname"] is None for n in doc["nodes"]), "%s: %s" % (tag, doc["prediction"]))
                if world == 2:
                    check(doc["exchanges"] > 0, "%s: no two-phase exchange at tp=2" % tag)
                    for n in doc["nodes"]:
                        r = doc["ranks"][n["node"]]
                        check(n["bytes_network_in"] == r["bytes_received"] and n["bytes_network_out"] == r["bytes_sent"],
                              "%s: node %d network in/out %d/%d, its rank received/sent %d/%d" %
                              (tag, n["node"], n["bytes_network_in"], n["bytes_network_out"], r["bytes_received"],
                               r["bytes_sent"]))
        # dp=6 on nodes of 4: ranks 0-3 and 4-5; every broadcast spans both nodes.
        described(schema, tmp)
    print("%d failure(s)" % len(fails))
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
