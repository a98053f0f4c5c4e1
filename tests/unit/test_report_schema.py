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
reports valid, their fill counting each way (docs/REPORT.md).
A refit (weight sync, docs/spec/DESIGN.md §13) at 4 ranks posing as two nodes -- ranks 0-1 trainers
publishing FSDP's rows of every llama tensor (shardload.publish, numpy), ranks 2-3 receivers at tp 2
(Loader.refit, Loader.refit_report) -- twice (the plan made, then reused with nothing to move): every
rank's report valid (refit) and the same but planning_seconds, its bytes adding up per rank and per
node, and its messages, bytes, nodes and prediction those of `shardload plan --from-publishers
fsdp:2` on the same nodes; that dry run and one with replicas valid (refit_dryrun). Copies of each
with a member removed, of the wrong type, negative or unknown are rejected: the schema can fail.
Needs SL_CLI, SL_MPIRUN, SL_FIXTURES, SL_SOURCE_DIR; for the refit the package (PYTHONPATH), the
library (SHARDLOAD_LIBRARY), numpy and mpi4py (without them that part is skipped and says so).
"""
import json
import os
import socket
import subprocess
import sys
import tempfile

REFIT_TRAINERS = 2  # ranks 0-1; ranks 2-3 receive at tp 2


def refit_job(out):
    """Under mpirun at 4 ranks posing as two nodes (SHARDLOAD_INJECT_HOST): the trainers publish the
    rows of every llama tensor that torch.chunk gives them (FSDP's Shard(0)), as F32 (BF16 widened),
    version 1 then a repeat; each rank writes the reports it got (a JSON list) to out/rank<N>.json."""
    import numpy as np
    from mpi4py import MPI
    import shardload
    comm = MPI.COMM_WORLD
    rank = comm.Get_rank()
    trainer = rank < REFIT_TRAINERS
    os.environ["SHARDLOAD_INJECT_HOST"] = "schema-trainers" if trainer else "schema-receivers"
    folder = os.path.join(os.environ["SL_FIXTURES"], "llama")
    side = comm.Split(0 if trainer else 1, rank)
    reports = []
    if trainer:
        tensors = {}
        for f in sorted(os.listdir(folder)):
            if not f.endswith(".safetensors"):
                continue
            with open(os.path.join(folder, f), "rb") as fh:
                n = int.from_bytes(fh.read(8), "little")
                header, data = json.loads(fh.read(n)), fh.read()
            for name, v in header.items():
                if name == "__metadata__":
                    continue
                raw = data[v["data_offsets"][0]:v["data_offsets"][1]]
                if v["dtype"] == "BF16":  # widened to F32: the library rounds it back exactly
                    arr = (np.frombuffer(raw, np.uint16).astype(np.uint32) << 16).view(np.float32)
                else:
                    arr = np.frombuffer(raw, {"F32": np.float32}[v["dtype"]])
                arr = arr.reshape(v["shape"])
                chunk = -(-arr.shape[0] // REFIT_TRAINERS)
                lo = min(rank * chunk, arr.shape[0])
                hi = min(lo + chunk, arr.shape[0])
                tensors[name] = (np.ascontiguousarray(arr[lo:hi]), [lo] + [0] * (arr.ndim - 1))
        for _ in range(2):
            reports.append(shardload.publish(tensors, version=1, comm=comm, timeout_s=60))
    else:
        loader = shardload.Loader(folder, side, tp=2, quiet=True, timeout_s=60)
        loader.load()
        for _ in range(2):
            loader.refit(comm=comm, version=1)
            reports.append(loader.refit_report())
        loader.close()
    side.Free()
    with open(os.path.join(out, "rank%d.json" % rank), "w") as f:
        json.dump(reports, f)


if __name__ == "__main__" and sys.argv[1:2] == ["--refit-job"]:
    refit_job(sys.argv[2])
    sys.exit(0)

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


def schema_errors(schema, doc):
    """The schema's verdict on doc: the most telling error's text per failure (oneOf's branches)."""
    v = jsonschema.Draft202012Validator(schema)
    out = []
    for e in v.iter_errors(doc):
        best = jsonschema.exceptions.best_match([e] + list(e.context or []))
        out.append("%s at %s" % (best.message[:200], "/".join(map(str, best.absolute_path))))
    return out


def refit_figures(doc, tag):
    """What the schema cannot check of a refit's report or its dry run: the figures add up."""
    ranks, nodes, pred = doc["ranks"], doc["nodes"], doc["prediction"]
    check(doc.get("report_version") == 2, "%s: report_version %r" % (tag, doc.get("report_version")))
    check(len(ranks) == doc["world"] and sum(r["role"] == "trainer" for r in ranks) == doc["trainers"],
          "%s: %d ranks (%d trainers), world %d, trainers %d" % (tag, len(ranks), sum(
              r["role"] == "trainer" for r in ranks), doc["world"], doc["trainers"]))
    sent, received = sum(r["bytes_sent"] for r in ranks), sum(r["bytes_received"] for r in ranks)
    check(sent == received == doc["bytes_transferred"],
          "%s: ranks sent %d, received %d, bytes_transferred %d" % (tag, sent, received, doc["bytes_transferred"]))
    check(len(nodes) == len({r["node"] for r in ranks}) and all(n["node"] == i for i, n in enumerate(nodes)),
          "%s: nodes %s for the ranks' %s" % (tag, [n["node"] for n in nodes], sorted({r["node"] for r in ranks})))
    check(sum(n["bytes_network_in"] for n in nodes) == sum(n["bytes_network_out"] for n in nodes),
          "%s: bytes into nodes != bytes out of them" % tag)
    check(sum(n["bytes_relayed"] for n in nodes) == doc["bytes_relayed"],
          "%s: node relays do not add up to bytes_relayed %d" % (tag, doc["bytes_relayed"]))
    check(abs(pred["predicted_seconds"] - pred["network_seconds"] - pred["relay_seconds"]) < 0.0000015,
          "%s: predicted_seconds is not network + relay: %s" % (tag, pred))


def broken_copies(doc):
    """(what was broken, the copy): a member removed, one of the wrong type, an unknown one, a rank
    row with a role the document does not have, the prediction without one of its members."""
    import copy
    out = []
    for key in ("bytes_transferred", "ranks"):
        c = copy.deepcopy(doc)
        del c[key]
        out.append(("without %s" % key, c))
    c = copy.deepcopy(doc)
    c["trainers"] = str(c["trainers"])
    out.append(("trainers a string", c))
    c = copy.deepcopy(doc)
    c["bytes_relayed"] = -1
    out.append(("bytes_relayed negative", c))
    c = copy.deepcopy(doc)
    c["bytes_moved"] = 0
    out.append(("an unknown member", c))
    c = copy.deepcopy(doc)
    c["ranks"][0]["role"] = "donor"
    out.append(("a donor rank", c))
    c = copy.deepcopy(doc)
    del c["prediction"]["network_seconds"]
    out.append(("prediction without network_seconds", c))
    c = copy.deepcopy(doc)
    c["nodes"][0]["bytes_relayed"] = 1.5
    out.append(("a node's bytes_relayed not an integer", c))
    return out


def rejects(schema, doc, tag):
    """The valid doc passes, every broken copy of it fails: the schema describes it, not anything."""
    errors = schema_errors(schema, doc)
    for e in errors[:5]:
        check(False, "%s: %s" % (tag, e))
    if errors:
        return
    for what, c in broken_copies(doc):
        check(schema_errors(schema, c) != [], "%s: a copy %s passes the schema" % (tag, what))


def refit(schema, tmp):
    """A refit's reports (every rank's, planned then reused) and the dry runs of refits (docs/REPORT.md,
    Refit report): valid, their figures adding up, the dry run of the same layouts on the same nodes
    the refit's figures; broken copies of each kind rejected."""
    folder = os.path.join(FIX, "llama")
    dry = {}
    runs = (("refit dry run fsdp:2 on 2 nodes",
             ["--world", "2", "--tp", "2", "--ranks-per-node", "2", "--from-publishers", "fsdp:2"]),
            ("refit dry run fsdp:2x2 on 3 nodes",
             ["--world", "4", "--tp", "2", "--dp", "2", "--ranks-per-node", "3", "--from-publishers", "fsdp:2x2"]))
    for tag, args in runs:
        p = subprocess.run([CLI, "plan", folder, "--json"] + args, capture_output=True, text=True, timeout=120)
        check(p.returncode == 0, "%s: %s" % (tag, p.stderr[-500:]))
        if p.returncode != 0:
            continue
        doc = dry[tag] = json.loads(p.stdout)
        rejects(schema, doc, tag)
        refit_figures(doc, tag)
        check(doc["prediction"]["nodes"] == len(doc["nodes"]), "%s: prediction %s" % (tag, doc["prediction"]))
        check(doc["bytes_relayed"] > 0, "%s: nothing relayed within a node" % tag)
    probe = subprocess.run([sys.executable, "-c", "import numpy, mpi4py, shardload"], capture_output=True, text=True)
    if probe.returncode != 0:
        print("the refit's report is not checked: this Python cannot import numpy, mpi4py and shardload: %s" %
              probe.stderr.strip().splitlines()[-1:])
        return
    out = os.path.join(tmp, "refit")
    os.mkdir(out)
    p = subprocess.run([MPIRUN, "-np", str(2 * REFIT_TRAINERS), sys.executable, os.path.abspath(__file__),
                        "--refit-job", out], capture_output=True, text=True, timeout=240)
    check(p.returncode == 0, "refit job: %s" % (p.stdout[-1000:] + p.stderr[-2000:]))
    if p.returncode != 0:
        return
    per_rank = [json.load(open(os.path.join(out, "rank%d.json" % k))) for k in range(2 * REFIT_TRAINERS)]
    for step, planned in ((0, True), (1, False)):
        tag = "refit step %d" % step
        doc = per_rank[0][step]
        for k, other in enumerate(per_rank):
            # the same report on every rank but planning_seconds: each rank makes the plan itself
            differ = sorted(key for key in doc if key != "planning_seconds" and other[step].get(key) != doc[key])
            check(not differ, "%s: rank %d's report differs from rank 0's in %s" % (tag, k, differ))
        rejects(schema, doc, tag)
        refit_figures(doc, tag)
        check(doc["version"] == 1 and doc["planned"] == planned and (doc["planning_seconds"] > 0) == planned,
              "%s: version %s planned %s planning_seconds %s" % (tag, doc["version"], doc["planned"],
                                                                 doc["planning_seconds"]))
        check((doc["bytes_transferred"] > 0) == planned and (doc["parts_moved"] == doc["parts"]) == planned,
              "%s: %d bytes, %d of %d parts moved" % (tag, doc["bytes_transferred"], doc["parts_moved"], doc["parts"]))
    doc, plan = per_rank[0][0], dry.get("refit dry run fsdp:2 on 2 nodes")
    if plan is not None:
        for key in ("world", "trainers", "parts", "messages", "largest_message_bytes", "bytes_transferred",
                    "bytes_relayed", "nodes"):
            check(doc[key] == plan[key], "refit vs its dry run: %s %s, predicted %s" % (key, doc[key], plan[key]))
        check(doc["bytes_planned"] == plan["bytes_transferred"], "refit: bytes_planned %d, the dry run's %d" %
              (doc["bytes_planned"], plan["bytes_transferred"]))
        for key in ("network_seconds", "relay_seconds", "predicted_seconds"):
            check(doc["prediction"][key] == plan["prediction"][key], "refit vs its dry run: prediction %s" % key)
        check([(r["role"], r["node"], r["bytes_sent"], r["bytes_received"]) for r in doc["ranks"]] ==
              [(r["role"], r["node"], r["bytes_sent"], r["bytes_received"]) for r in plan["ranks"]],
              "refit vs its dry run: the ranks' bytes differ")


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
        refit(schema, tmp)
    print("%d failure(s)" % len(fails))
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
