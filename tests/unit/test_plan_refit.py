#!/usr/bin/env python3
"""test_plan_refit.py -- `shardload plan --from-publishers` (the dry run of a refit,
sl_dryrun_refit; docs/API.md §13): each trainer holds exactly the bytes of its blocks, computed
here from the safetensors headers (FSDP's rows as torch.chunk cuts them, or the blocks a JSON file
lists); each receiver receives exactly what a storage dry run of the same layout says it needs;
the bytes sent add up to the bytes received and to bytes_transferred, the relays' to
bytes_relayed; replicas of the trainers do not send a byte twice; the prediction follows its nodes;
a published tensor the checkpoint lacks and two trainers' overlapping blocks are refused naming
the tensor.
"""

import json
import os
import struct
import subprocess
import sys
import tempfile

CLI = os.environ["SL_CLI"]
FIX = os.environ["SL_FIXTURES"]
BITS = {"F64": 64, "I64": 64, "U64": 64, "F32": 32, "I32": 32, "U32": 32, "F16": 16, "BF16": 16,
        "I16": 16, "U16": 16, "I8": 8, "U8": 8, "BOOL": 8, "F8_E4M3": 8, "F8_E5M2": 8}
fails = []


def headers(folder):
    out = {}
    for f in sorted(os.listdir(folder)):
        if f.endswith(".safetensors"):
            with open(os.path.join(folder, f), "rb") as fh:
                (n,) = struct.unpack("<Q", fh.read(8))
                for name, info in json.loads(fh.read(n)).items():
                    if name != "__metadata__":
                        out[name] = (info["dtype"], info["shape"])
    return out


def nbytes(dtype, extent):
    n = BITS[dtype]
    for d in extent:
        n *= d
    return n // 8


def fsdp_held(tensors, shard, shards):
    """Bytes of trainer `shard`'s rows of every tensor, as torch.chunk cuts them."""
    total = 0
    for dtype, shape in tensors.values():
        if not shape:
            total += nbytes(dtype, [])
            continue
        chunk = -(-shape[0] // shards)
        lo = min(shard * chunk, shape[0])
        hi = min(lo + chunk, shape[0])
        total += nbytes(dtype, [hi - lo] + shape[1:])
    return total


def column_blocks(tensors, trainers):
    """JSON publishers: every tensor cut along its last dimension (1-D and scalars by trainer 0)."""
    out = [dict() for _ in range(trainers)]
    held = [0] * trainers
    for name, (dtype, shape) in tensors.items():
        if len(shape) < 2:
            out[0][name] = {"offsets": [0] * len(shape), "extent": list(shape)}
            held[0] += nbytes(dtype, shape)
            continue
        cols = shape[-1]
        step = -(-cols // trainers)
        for t in range(trainers):
            lo, hi = min(t * step, cols), min((t + 1) * step, cols)
            out[t][name] = {"offsets": [0] * (len(shape) - 1) + [lo], "extent": shape[:-1] + [hi - lo]}
            held[t] += nbytes(dtype, shape[:-1] + [hi - lo])
    return {"trainers": out}, held


def plan(folder, args):
    p = subprocess.run([CLI, "plan", folder] + args + ["--json"], capture_output=True, text=True)
    return p.returncode, (json.loads(p.stdout) if p.returncode == 0 else None), p.stderr


def check_case(tag, folder, target, spec, held, replicas=1):
    rc, r, err = plan(folder, target + ["--from-publishers", spec])
    if rc != 0:
        fails.append("%s: the dry run failed: %s" % (tag, err.strip()[-300:]))
        return
    rc, plain, err = plan(folder, target)
    want = {x["rank"]: x["bytes_needed"] for x in plain["ranks"]}
    ranks = r["ranks"]
    trainers = [x for x in ranks if x["role"] == "trainer"]
    receivers = [x for x in ranks if x["role"] == "receiver"]
    if [x["bytes_held"] for x in trainers] != held:
        fails.append("%s: trainers hold %s, their blocks are %s" % (tag, [x["bytes_held"] for x in trainers], held))
    for x in receivers:
        if not x["bytes_received"] == x["bytes_held"] == want.get(x["side_rank"]):
            fails.append("%s: receiver %d received %d, holds %d, a storage load needs %s" % (
                tag, x["side_rank"], x["bytes_received"], x["bytes_held"], want.get(x["side_rank"])))
    sent = sum(x["bytes_sent"] for x in ranks)
    got = sum(x["bytes_received"] for x in receivers)
    if not (sent == got == r["bytes_transferred"] > 0) or any(x["bytes_received"] for x in trainers):
        fails.append("%s: sent %d, received %d, transferred %d" % (tag, sent, got, r["bytes_transferred"]))
    relayed = sum(x["bytes_sent"] for x in receivers)
    if relayed != r["bytes_relayed"] or relayed != sum(n["bytes_relayed"] for n in r["nodes"]):
        fails.append("%s: receivers sent %d, %d relayed" % (tag, relayed, r["bytes_relayed"]))
    if replicas > 1 and sum(x["bytes_sent"] for x in trainers) + relayed != got:
        fails.append("%s: replicas sent %d for %d received" % (tag, sum(x["bytes_sent"] for x in trainers), got))
    p = r["prediction"]
    rate, local = p["network_gbps_per_node"] * 1e9, p["local_gbps"] * 1e9
    most = max(max(n["bytes_network_in"], n["bytes_network_out"]) for n in r["nodes"])
    expect = most / rate + max(n["bytes_relayed"] for n in r["nodes"]) / local
    if abs(p["predicted_seconds"] - expect) > 1e-6:
        fails.append("%s: predicted %g s, the nodes say %g" % (tag, p["predicted_seconds"], expect))


def refused(tag, folder, target, publishers, needle):
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump(publishers, f)
    try:
        rc, _, err = plan(folder, target + ["--from-publishers", f.name])
    finally:
        os.unlink(f.name)
    if rc == 0 or needle not in err:
        fails.append("%s: exit %d, message %r does not name %s" % (tag, rc, err.strip()[-300:], needle))


llama = os.path.join(FIX, "llama")
mixtral = os.path.join(FIX, "mixtral")
lt, mt = headers(llama), headers(mixtral)
check_case("llama fsdp:2 -> tp 2 dp 2, 3 ranks per node", llama,
           ["--world", "4", "--tp", "2", "--dp", "2", "--ranks-per-node", "3"], "fsdp:2",
           [fsdp_held(lt, t, 2) for t in range(2)])
check_case("llama fsdp:3 -> tp 4 (uneven last blocks)", llama, ["--world", "4", "--tp", "4"],
           "fsdp:3", [fsdp_held(lt, t, 3) for t in range(3)])
check_case("llama fsdp:2x2 (replicas) -> tp 2", llama, ["--world", "2", "--tp", "2", "--ranks-per-node", "2"],
           "fsdp:2x2", [fsdp_held(lt, t % 2, 2) for t in range(4)], replicas=2)
cols, held = column_blocks(mt, 2)
check_case("mixtral columns (JSON) -> dp 2 with EP", mixtral,
           ["--world", "2", "--dp", "2", "--enable-expert-parallel"], json.dumps(cols), held)
refused("a tensor the checkpoint lacks", llama, ["--world", "2", "--tp", "2"],
        {"trainers": [{"model.layers.0.mlp.gate_prj.weight": {"offsets": [0, 0], "extent": [1, 1]}}]},
        "model.layers.0.mlp.gate_prj.weight")
rows = lt["model.norm.weight"][1][0]
refused("overlapping blocks", llama, ["--world", "2", "--tp", "2"],
        {"trainers": [{"model.norm.weight": {"offsets": [0], "extent": [rows]}},
                      {"model.norm.weight": {"offsets": [1], "extent": [rows - 1]}}]}, "model.norm.weight")

for f in fails:
    print("FAIL: " + f)
print("test_plan_refit: %d failures" % len(fails))
sys.exit(1 if fails else 0)
