#!/usr/bin/env python3
"""test_load_packed.py -- run under mpirun at 1, 2 and 4 ranks: pack-quantized and NVFP4 fixtures
loaded through shardload.Loader (DLPack tensors) equal, byte for byte, what vLLM's weight loaders
put on each rank, computed here with numpy from the checkpoint and vLLM's rules
(docs/spec/ARCHITECTURES.md §18-§19), not from the C library's plan:

  ct_nvfp4       compressed-tensors NVFP4 Llama: a column-like linear's packed bytes and FP8 group
                 scales are its output rows of the rank (qkv with GQA replication, gate_up),
                 a row-parallel one's its input columns; weight_global_scale / input_global_scale
                 one entry per part (PerTensorScaleParameter).
  mixtral_w4a16  experts W4A16 group 128 with zero points in vLLM's Marlin MoE layout:
                 FusedMoE.weight_loader transposes every tensor of the WNA16 MoE methods, then takes
                 the MoE rank's intermediate slice of dim 1 (w13, gate then up) or dim 0 (w2);
                 w13_weight_shape / w2_weight_shape hold one [2] per expert (gate/up: the up part's,
                 loaded last), as the checkpoint stores it (the vLLM plugin converts it).

tp = the largest of 4, 2, 1 dividing the world (the rest dp); the MoE fixture also with expert
parallelism.
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

common.need(["numpy", "torch", "mpi4py"])

import numpy as np  # noqa: E402
from mpi4py import MPI  # noqa: E402

import shardload  # noqa: E402

comm = MPI.COMM_WORLD
rank, world = comm.Get_rank(), comm.Get_size()
failures = []


def check(cond, msg):
    if not cond:
        failures.append(msg)


def qkv_rows(c, lay):
    """(q rows, k/v rows) slices of the rank, vLLM's QKVParallelLinear."""
    H, Hq, Hkv = c["hidden_size"], c["num_attention_heads"], c["num_key_value_heads"]
    d = c.get("head_dim") or H // Hq
    T, r = lay.tp, lay.r
    kvl, R = (1, T // Hkv) if T >= Hkv else (Hkv // T, 1)
    qn, kn = (Hq // T) * d, kvl * d
    return slice(r * qn, (r + 1) * qn), slice((r // R) * kn, (r // R + 1) * kn)


def scalars(g, names):
    return np.concatenate([g(n).reshape(1) for n in names])


def nvfp4_reference(ckpt, lay):
    """{vLLM name: array} of compressed-tensors NVFP4 Llama on this rank."""
    c, g = ckpt.config, ckpt.get
    T, r = lay.tp, lay.r
    out = {"model.embed_tokens.weight": common.vocab_slice(g("model.embed_tokens.weight"), c["vocab_size"], lay),
           "lm_head.weight": common.vocab_slice(g("lm_head.weight"), c["vocab_size"], lay),
           "model.norm.weight": g("model.norm.weight")}
    qs, ks = qkv_rows(c, lay)
    for L in range(c["num_hidden_layers"]):
        p = "model.layers.%d." % L
        for n in ("input_layernorm.weight", "post_attention_layernorm.weight"):
            out[p + n] = g(p + n)
        a, m = p + "self_attn.", p + "mlp."
        for kind in ("weight_packed", "weight_scale"):
            out[a + "qkv_proj." + kind] = np.concatenate(
                [g(a + "q_proj." + kind)[qs], g(a + "k_proj." + kind)[ks], g(a + "v_proj." + kind)[ks]])
            gate, up = g(m + "gate_proj." + kind), g(m + "up_proj." + kind)
            i = gate.shape[0] // T
            out[m + "gate_up_proj." + kind] = np.concatenate([gate[r * i:(r + 1) * i], up[r * i:(r + 1) * i]])
            for row, name in ((a + "o_proj.", "o_proj"), (m + "down_proj.", "down_proj")):
                t = g(row + kind)
                w = t.shape[1] // T
                out[row + kind] = np.ascontiguousarray(t[:, r * w:(r + 1) * w])
        for kind in ("weight_global_scale", "input_global_scale"):
            out[a + "qkv_proj." + kind] = scalars(g, [a + x + "_proj." + kind for x in "qkv"])
            out[m + "gate_up_proj." + kind] = scalars(g, [m + x + "_proj." + kind for x in ("gate", "up")])
            out[a + "o_proj." + kind] = scalars(g, [a + "o_proj." + kind])
            out[m + "down_proj." + kind] = scalars(g, [m + "down_proj." + kind])
    return out


def marlin_reference(ckpt, lay):
    """{vLLM name: array} of mixtral_w4a16 on this rank: BF16 attention, W4A16 experts (Marlin)."""
    c, g = ckpt.config, ckpt.get
    T, r = lay.tp, lay.r
    out = {"model.embed_tokens.weight": common.vocab_slice(g("model.embed_tokens.weight"), c["vocab_size"], lay),
           "lm_head.weight": common.vocab_slice(g("lm_head.weight"), c["vocab_size"], lay),
           "model.norm.weight": g("model.norm.weight")}
    qs, ks = qkv_rows(c, lay)
    E, I, pack = c["num_local_experts"], c["intermediate_size"], 8
    ip = I // lay.moe_tp
    s = lay.moe_r * ip
    G = c["quantization_config"]["config_groups"]["group_0"]["weights"]["group_size"]
    for L in range(c["num_hidden_layers"]):
        p = "model.layers.%d." % L
        for n in ("input_layernorm.weight", "post_attention_layernorm.weight"):
            out[p + n] = g(p + n)
        a = p + "self_attn."
        out[a + "qkv_proj.weight"] = np.concatenate([g(a + "q_proj.weight")[qs], g(a + "k_proj.weight")[ks],
                                                     g(a + "v_proj.weight")[ks]])
        o = g(a + "o_proj.weight")
        w = o.shape[1] // T
        out[a + "o_proj.weight"] = np.ascontiguousarray(o[:, r * w:(r + 1) * w])
        m = p + "block_sparse_moe."
        out[m + "gate.weight"] = g(m + "gate.weight")
        # (kind, rows of w1/w3 per intermediate unit, columns of w2 per intermediate unit)
        units = {"weight_packed": (1, pack), "weight_scale": (1, G), "weight_zero_point": (pack, G)}
        for kind, (u13, u2) in units.items():
            w13, w2 = [], []
            for x in common.local_experts(E, lay):
                e = m + "experts.%d." % x
                a13 = slice(s // u13, (s + ip) // u13)
                w13.append(np.concatenate([g(e + "w1." + kind)[a13].T, g(e + "w3." + kind)[a13].T], axis=1))
                w2.append(g(e + "w2." + kind)[:, s // u2:(s + ip) // u2].T)
            out[m + "experts.w13_" + kind] = np.ascontiguousarray(np.stack(w13))
            out[m + "experts.w2_" + kind] = np.ascontiguousarray(np.stack(w2))
        xs = common.local_experts(E, lay)
        out[m + "experts.w13_weight_shape"] = np.stack([g(m + "experts.%d.w3.weight_shape" % x) for x in xs])
        out[m + "experts.w2_weight_shape"] = np.stack([g(m + "experts.%d.w2.weight_shape" % x) for x in xs])
    return out


def run(name, build, tp, ep):
    folder = os.path.join(common.fixtures(), name)
    ckpt = common.Checkpoint(folder)
    lay = common.Layout(world, rank, tp, ep)
    ref = build(ckpt, lay)
    tag = "%s tp=%d dp=%d%s" % (name, tp, world // tp, " ep" if ep else "")
    with shardload.Loader(folder, comm, tp=tp, dp=world // tp, enable_expert_parallel=ep) as loader:
        plan = {p.name: p for p in loader.plan()}
        check(set(plan) == set(ref), "%s: planned names differ: %s" % (tag, sorted(set(plan) ^ set(ref))))
        loader.load()
        got = loader.params()  # FP8 scales arrive as their bytes (torch 1.13 has no float8)
        for n, want in ref.items():
            t = got.get(n)
            check(n in plan and tuple(plan[n].shape) == want.shape, "%s: %s shape %s, vLLM's %s"
                  % (tag, n, plan[n].shape if n in plan else None, want.shape))
            check(t is not None and common.raw(t) == common.raw(want), "%s: %s differs from vLLM's rules" % (tag, n))
        del got


tp = 4 if world % 4 == 0 else 2 if world % 2 == 0 else 1
run("ct_nvfp4", nvfp4_reference, tp, False)
run("mixtral_w4a16", marlin_reference, tp, False)
if world > 1:
    run("mixtral_w4a16", marlin_reference, tp, True)
common.finish_mpi(comm, "test_load_packed", failures)
