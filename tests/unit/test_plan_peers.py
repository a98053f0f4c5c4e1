#!/usr/bin/env python3
"""test_plan_peers.py -- `shardload plan --from-tp` (the dry run of a load from peers,
sl_dryrun_peers): per rank, every receiver receives exactly the bytes its plan needs and a storage
dry run of the target layout says it needs; the bytes sent (donors', and relaying receivers') add
up to the receivers' bytes received and to bytes_transferred; no rank reads storage; the prediction
is the busiest node's network time plus the busiest node's relay time; replicas on a node with no
donor take the bytes over its link once (tp 2 -> tp 1 dp 2, the receivers on a node of their own);
the JSON validates against docs/report.schema.json (its peers_dryrun variant; skipped without
python3-jsonschema).
"""

import json
import os
import subprocess
import sys

CLI = os.environ["SL_CLI"]
FIX = os.environ["SL_FIXTURES"]
SRC = os.environ["SL_SOURCE_DIR"]
fails = []

CASES = [("llama", ["--world", "2", "--tp", "2"], ["--from-tp", "2"]),
         ("llama", ["--world", "2", "--tp", "1", "--dp", "2"], ["--from-tp", "2"]),
         ("llama", ["--world", "4", "--tp", "2", "--dp", "2", "--ranks-per-node", "2"], ["--from-tp", "1"]),
         ("mixtral", ["--world", "2", "--dp", "2", "--enable-expert-parallel"], ["--from-tp", "2"]),
         ("llama", ["--world", "2", "--tp", "1", "--dp", "2", "--ranks-per-node", "2"], ["--from-tp", "2"])]

try:
    import jsonschema
    schema = json.load(open(os.path.join(SRC, "docs", "report.schema.json")))
except ImportError:
    jsonschema = None

for model, target, source in CASES:
    tag = "%s %s from %s" % (model, " ".join(target), " ".join(source))
    folder = os.path.join(FIX, model)
    peers = json.loads(subprocess.check_output([CLI, "plan", folder] + target + source + ["--json"]))
    plain = json.loads(subprocess.check_output([CLI, "plan", folder] + target + ["--json"]))
    if jsonschema is not None:
        try:
            jsonschema.validate(peers, schema)
        except jsonschema.ValidationError as e:
            fails.append("%s: the JSON does not validate: %s" % (tag, e.message))
    ranks = peers["ranks"]
    donors = [r for r in ranks if r["role"] == "donor"]
    receivers = [r for r in ranks if r["role"] == "receiver"]
    sent = sum(r["bytes_sent"] for r in ranks)
    got = sum(r["bytes_received"] for r in receivers)
    if not (sent == got == peers["bytes_transferred"] > 0):
        fails.append("%s: sent %d, received %d, transferred %d" % (tag, sent, got, peers["bytes_transferred"]))
    want = {r["rank"]: r["bytes_needed"] for r in plain["ranks"]}
    for r in receivers:
        if r["bytes_received"] != r["bytes_needed"] or r["bytes_needed"] != want.get(r["side_rank"]):
            fails.append("%s: receiver %d received %d, needs %d, a storage load %s" % (
                tag, r["side_rank"], r["bytes_received"], r["bytes_needed"], want.get(r["side_rank"])))
    if any(r["bytes_read"] for r in ranks) or any(r["bytes_received"] for r in donors):
        fails.append("%s: a rank reads storage or a donor receives" % tag)
    relayed = sum(r["bytes_sent"] for r in receivers)
    if relayed != peers["bytes_relayed"] or relayed != sum(n["bytes_relayed"] for n in peers["nodes"]):
        fails.append("%s: receivers sent %d, %d relayed" % (tag, relayed, peers["bytes_relayed"]))
    p = peers["prediction"]
    rate = p["network_gbps_per_node"] * 1e9
    local = p["local_gbps"] * 1e9
    most = max(max(n["bytes_network_in"], n["bytes_network_out"]) for n in peers["nodes"])
    most_relayed = max(n["bytes_relayed"] for n in peers["nodes"])
    want = most / rate + most_relayed / local
    if abs(p["predicted_seconds"] - want) > 1e-6 or abs(p["network_seconds"] - most / rate) > 1e-6:
        fails.append("%s: predicted %g s, the nodes say %g" % (tag, p["predicted_seconds"], want))
    for n in peers["nodes"]:
        t = max(n["bytes_network_in"], n["bytes_network_out"]) / rate + n["bytes_relayed"] / local
        if abs(n["predicted_seconds"] - t) > 1e-6:
            fails.append("%s: node %d predicted %g s, its bytes say %g" % (tag, n["node"], n["predicted_seconds"], t))
    if "ranks-per-node" in " ".join(target) and most == 0:
        fails.append("%s: donors and receivers on other nodes, no network bytes" % tag)
    if "--dp" in target and target[target.index("--dp") + 1] == "2" and "--ranks-per-node" in target \
            and target[target.index("--tp") + 1] == "1":
        # both replicas on node 1, the donors on node 0: the model once over the link, then relayed
        one = receivers[0]["bytes_needed"]
        node1 = peers["nodes"][1]
        if node1["bytes_network_in"] != one or node1["bytes_relayed"] != one:
            fails.append("%s: node 1 took %d over its link and relayed %d; a replica needs %d" % (
                tag, node1["bytes_network_in"], node1["bytes_relayed"], one))

for f in fails:
    print("FAIL: " + f)
print("test_plan_peers: %d cases, %d failures" % (len(CASES), len(fails)))
sys.exit(1 if fails else 0)
