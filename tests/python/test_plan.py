#!/usr/bin/env python3
"""test_plan.py -- caller-described plans from Python (shardload.Plan, Loader(plan=),
shardload.torch.load_into(plan=), shardload.dryrun(plans=)), under MPI at 1 and 2 ranks, tp = the
world size.

Each rank describes the llama fixture's layout itself, from vLLM's rules as tests/python/common.py
writes them (padded vocabulary with its padding declared zeros, qkv with the kv heads, gate_up,
row-parallel o_proj and down_proj, replicated norms), with two twists: the final norm held in F32
(a planned conversion) and the stray rotary inv_freq as a fallback parameter (one whole tensor as
stored). Checks, on every rank:
  - every parameter byte-exact against common.reference (the norm: the reference's BF16 widened
    independently, the upper 16 bits; inv_freq: the checkpoint's F32), each table entry's fill
    ("recorded", "fallback"), its dtype and local shape as described;
  - the report: amplification 1.00, every rank's bytes read as planned, the fill object's counts
    and the summary's line;
  - load_into a module built from the plan: nothing missing or unexpected, the same bytes;
  - the JSON form round trip; the dry run of the plans gives the spec's dry run's reads per rank;
  - a plan naming a tensor the checkpoint lacks: PlanError on every rank before any byte is read;
  - a plan the library refuses as it is handed over on one rank: that rank raises its own error,
    the others that it could not set its plan (nobody loads without a plan).
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

common.need(["mpi4py", "numpy", "torch"])
from mpi4py import MPI  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402

import shardload  # noqa: E402
import shardload.torch  # noqa: E402

comm = MPI.COMM_WORLD
rank, world = comm.Get_rank(), comm.Get_size()
fails = []


def check(ok, what):
    if not ok:
        fails.append(what)


def describe(ckpt, lay, bad_tensor=None):
    """This rank's plan of the llama fixture, written from vLLM's rules (common.py)."""
    c = ckpt.config
    H, Hq, Hkv, V = c["hidden_size"], c["num_attention_heads"], c["num_key_value_heads"], c["vocab_size"]
    d = H // Hq
    T, r = lay.tp, lay.r
    kvl, R = (1, T // Hkv) if T >= Hkv else (Hkv // T, 1)
    plan = shardload.Plan()

    def vocab(name):
        per = (-(-V // 64) * 64) // T
        a, b = min(V, r * per), min(V, (r + 1) * per)
        i = plan.param(name, "BF16", [per, H])
        plan.region(i, name, [a, 0], [b - a, H], [0, 0], [b - a, H])
        if b - a < per:
            plan.zeros(i, [b - a, 0], [per - (b - a), H])

    def whole(name, dtype="BF16"):
        shape = list(ckpt.get(name).shape)
        i = plan.param(name, dtype, shape)
        plan.region(i, name, [0] * len(shape), shape, [0] * len(shape), shape)

    vocab("model.embed_tokens.weight")
    for L in range(c["num_hidden_layers"]):
        p = "model.layers.%d." % L
        whole(p + "input_layernorm.weight")
        qn, kn = (Hq // T) * d, kvl * d
        i = plan.param(p + "self_attn.qkv_proj.weight", torch.bfloat16, [qn + 2 * kn, H])
        plan.region(i, p + "self_attn.q_proj.weight", [r * qn, 0], [qn, H], [0, 0], [qn, H])
        plan.region(i, p + "self_attn.k_proj.weight", [(r // R) * kn, 0], [kn, H], [qn, 0], [kn, H])
        plan.region(i, p + "self_attn.v_proj.weight", [(r // R) * kn, 0], [kn, H], [qn + kn, 0], [kn, H])
        w = Hq * d // T
        i = plan.param(p + "self_attn.o_proj.weight", "BF16", [H, w])
        plan.region(i, p + "self_attn.o_proj.weight", [0, r * w], [H, w], [0, 0], [H, w])
        whole(p + "post_attention_layernorm.weight")
        n = c["intermediate_size"] // T
        i = plan.param(p + "mlp.gate_up_proj.weight", "BF16", [2 * n, H])
        plan.region(i, p + "mlp.gate_proj.weight", [r * n, 0], [n, H], [0, 0], [n, H])
        plan.region(i, p + "mlp.up_proj.weight", [r * n, 0], [n, H], [n, 0], [n, H])
        i = plan.param(p + "mlp.down_proj.weight", "BF16", [H, n])
        plan.region(i, bad_tensor or p + "mlp.down_proj.weight", [0, r * n], [H, n], [0, 0], [H, n])
    whole("model.norm.weight", "F32")  # held in F32: converted as it lands
    vocab("lm_head.weight")
    inv = "model.layers.0.self_attn.rotary_emb.inv_freq"
    i = plan.param(inv, "F32", [4], fill="fallback")
    plan.region(i, inv, [0], [4], [0], [4])
    return plan


def expected(ckpt, lay):
    want = common.reference(ckpt, lay)
    want["model.norm.weight"] = want["model.norm.weight"].astype(np.uint32) << 16  # BF16 -> F32 bits
    want["model.layers.0.self_attn.rotary_emb.inv_freq"] = ckpt.get("model.layers.0.self_attn.rotary_emb.inv_freq")
    return want


def same(have, want):
    return have.tobytes() == np.ascontiguousarray(want).tobytes()


def main():
    folder = os.path.join(common.fixtures(), "llama")
    ckpt = common.Checkpoint(folder)
    lay = common.Layout(world, rank, world)
    want = expected(ckpt, lay)
    plan = describe(ckpt, lay)
    text = plan.to_json()
    check(shardload.Plan.from_json(text).to_json() == text, "the JSON form does not round-trip")
    with shardload.Loader(folder, comm, plan=plan, tp=world, quiet=True) as loader:
        params = loader.plan()
        check(sorted(p.name for p in params) == sorted(want), "names: %s" % sorted(p.name for p in params))
        for p in params:
            fill = "fallback" if p.name.endswith("inv_freq") else "recorded"
            check(p.fill == fill, "%s: fill %s, expected %s" % (p.name, p.fill, fill))
            check(p.dtype == ("F32" if p.name in ("model.norm.weight",) or fill == "fallback" else "BF16"),
                  "%s: dtype %s" % (p.name, p.dtype))
        loader.load()
        for p in params:
            have = p.numpy()
            check(p.name in want and same(have, want[p.name]), "%s differs" % p.name)
        report = loader.report()
        check(abs(report["read_amplification"] - 1.0) < 1e-9, "amplification %s" % report["read_amplification"])
        for rr in report["ranks"]:
            check(rr["bytes_read"] == rr["bytes_read_planned"], "rank %d read %d, planned %d"
                  % (rr["rank"], rr["bytes_read"], rr["bytes_read_planned"]))
        fill = report["fill"]
        check(fill["spec"]["params"] == 0 and fill["recorded"]["params"] == world * (len(params) - 1) and
              fill["fallback"] == {"params": world, "bytes": 16 * world,
                                   "names": ["model.layers.0.self_attn.rotary_emb.inv_freq"]}, "fill: %s" % fill)
        check("filled: %d recorded" % (world * (len(params) - 1)) in loader.summary(), loader.summary())

    # load_into a module built from the plan
    with shardload.Loader(folder, comm, plan=describe(ckpt, lay), tp=world, quiet=True) as loader:
        module = common.module_from_plan(loader.plan(), lambda dt: {"BF16": torch.bfloat16, "F32": torch.float32}[dt])
    missing, unexpected = shardload.torch.load_into(module, folder, comm=comm, plan=describe(ckpt, lay), tp=world,
                                                    quiet=True)
    check(not missing and not unexpected, "load_into: missing %s, unexpected %s" % (missing, unexpected))
    for name, t in module.state_dict().items():
        check(common.raw(t) == np.ascontiguousarray(want[name]).tobytes(), "load_into: %s differs" % name)

    # the dry run of every rank's plan against the spec's
    plans = comm.allgather(plan.to_json())
    mine = shardload.dryrun(folder, world, plans=[shardload.Plan.from_json(t) for t in plans], tp=world)
    spec = shardload.dryrun(folder, world, tp=world)
    for a, b in zip(mine["ranks"], spec["ranks"]):  # + the 16 bytes of inv_freq, which the spec skips
        check(a["bytes_needed"] == b["bytes_needed"] + 16, "dry run rank %d: %s vs %s" % (a["rank"], a, b))
    check(mine["bytes_read"] == spec["bytes_read"] + 16 and mine["read_amplification"] == 1.0,
          "dry run: read %s (spec %s), amplification %s" % (mine["bytes_read"], spec["bytes_read"],
                                                            mine["read_amplification"]))

    # a tensor the checkpoint lacks: refused on every rank before any byte is read
    bad = describe(ckpt, lay, bad_tensor="model.layers.9.mlp.down_proj.weight" if rank == world - 1 else None)
    try:
        with shardload.Loader(folder, comm, plan=bad, tp=world, quiet=True) as loader:
            loader.load()
        check(False, "a plan naming an absent tensor loaded")
    except shardload.PlanError as e:
        check("model.layers.9.mlp.down_proj.weight" in str(e) and "no such tensor" in str(e), "message: %s" % e)
    # a plan the library refuses as it is handed over (9 dimensions) on the last rank: that rank
    # raises its own error, the others the agreement's, nobody waits
    bad = describe(ckpt, lay)
    if rank == world - 1:
        bad.param("too.many.dims", "BF16", [1] * 9)
    try:
        with shardload.Loader(folder, comm, plan=bad, tp=world, quiet=True) as loader:
            loader.load()
        check(False, "a plan of 9 dimensions loaded")
    except shardload.Error as e:
        own = rank == world - 1
        check(("9 dimensions" in str(e)) if own else ("rank %d could not set its plan" % (world - 1) in str(e)),
              "rank %d: %s" % (rank, e))
    common.finish_mpi(comm, "test_plan", fails)


main()
