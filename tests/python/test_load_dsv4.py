#!/usr/bin/env python3
"""test_load_dsv4.py -- run under mpirun at 1..4 ranks: DeepSeek-V4 (the deepseek_v4 fixture: FP4
experts, block fp8 16x16 with E8M0 scales) through the Python package (shardload.Loader, tensors by
DLPack), every byte of every parameter on every rank against an independent numpy reference written
here from vLLM's rules (docs/spec/ARCHITECTURES.md §23): the flat names mapped to vLLM's, wq_a and
wkv concatenated and replicated, wq_b and attn_sink by heads, wo_a by rows and wo_b by columns,
every F8 weight's scale (X.scale) in blocks of it, compressors where compress_ratios > 1 and
indexers where it is 4, the hash table as int32 below num_hash_layers, else the score-correction
bias, shared experts merged, FP4 experts and their E8M0 scales stacked per local expert with the
MoE rank's rows (w1, w3) or packed columns (w2), the head's mixing parameters on the stage, the
mtp.* layer absent. tp = the largest of 4, 2, 1 dividing the world, the rest dp, with and without
expert parallelism."""

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
fails = []


def column(t, lay):
    """Rows of rank r (a scale's rows are blocks: the rank's share of them)."""
    n = t.shape[0] // lay.tp
    return t[lay.r * n:(lay.r + 1) * n]


def row(t, lay):
    n = t.shape[1] // lay.tp
    return np.ascontiguousarray(t[:, lay.r * n:(lay.r + 1) * n])


def linear(out, g, vname, sname, how, lay):
    """vLLM's weight and its weight_scale_inv (the checkpoint's X.scale, one per 16 x 16 block)
    sliced the same way (the fixture's rank boundaries are whole blocks)."""
    w, s = g(sname + ".weight"), g(sname + ".scale")
    if how == "column":
        w, s = column(w, lay), column(s, lay)
    elif how == "row":
        w, s = row(w, lay), row(s, lay)
    out[vname + ".weight"], out[vname + ".weight_scale_inv"] = w, s


def concat(out, g, vname, parts, scales=True):
    out[vname + ".weight"] = np.concatenate([g(p + ".weight") for p in parts])
    if scales:
        out[vname + ".weight_scale_inv"] = np.concatenate([g(p + ".scale") for p in parts])


def compressor(out, g, v, s):
    out[v + "ape"] = g(s + "ape")
    concat(out, g, v + "fused_wkv_wgate", [s + "wkv", s + "wgate"], scales=False)
    out[v + "norm.weight"] = g(s + "norm.weight")


def experts(out, c, g, m, s, lay):
    ip = c["moe_intermediate_size"] // lay.moe_tp
    a = lay.moe_r * ip
    w13, w13s, w2, w2s = [], [], [], []
    for x in common.local_experts(c["n_routed_experts"], lay):
        e = s + "ffn.experts.%d." % x
        w13.append(np.concatenate([g(e + "w1.weight")[a:a + ip], g(e + "w3.weight")[a:a + ip]]))
        w13s.append(np.concatenate([g(e + "w1.scale")[a:a + ip], g(e + "w3.scale")[a:a + ip]]))
        w2.append(g(e + "w2.weight")[:, a // 2:(a + ip) // 2])     # two FP4 values a byte
        w2s.append(g(e + "w2.scale")[:, a // 32:(a + ip) // 32])   # one E8M0 scale per 32
    out[m + "ffn.experts.w13_weight"] = np.stack(w13)
    out[m + "ffn.experts.w13_weight_scale"] = np.stack(w13s)
    out[m + "ffn.experts.w2_weight"] = np.ascontiguousarray(np.stack(w2))
    out[m + "ffn.experts.w2_weight_scale"] = np.ascontiguousarray(np.stack(w2s))


def layer(out, c, g, L, lay):
    m, s = "model.layers.%d." % L, "layers.%d." % L
    ratio = c["compress_ratios"][L]
    out[m + "attn_norm.weight"] = g(s + "attn_norm.weight")
    for n in ("hc_attn_fn", "hc_attn_base", "hc_attn_scale", "hc_ffn_fn", "hc_ffn_base", "hc_ffn_scale"):
        out[m + n] = g(s + n)
    out[m + "attn.attn_sink"] = column(g(s + "attn.attn_sink"), lay)
    concat(out, g, m + "attn.fused_wqa_wkv", [s + "attn.wq_a", s + "attn.wkv"])
    out[m + "attn.q_norm.weight"] = g(s + "attn.q_norm.weight")
    out[m + "attn.kv_norm.weight"] = g(s + "attn.kv_norm.weight")
    linear(out, g, m + "attn.wq_b", s + "attn.wq_b", "column", lay)
    linear(out, g, m + "attn.wo_a", s + "attn.wo_a", "column", lay)
    linear(out, g, m + "attn.wo_b", s + "attn.wo_b", "row", lay)
    if ratio > 1:
        compressor(out, g, m + "attn.mla_attn.compressor.", s + "attn.compressor.")
    if ratio == 4:
        linear(out, g, m + "attn.indexer.wq_b", s + "attn.indexer.wq_b", "replicated", lay)
        out[m + "attn.indexer.weights_proj.weight"] = g(s + "attn.indexer.weights_proj.weight")
        compressor(out, g, m + "attn.indexer.compressor.", s + "attn.indexer.compressor.")
    out[m + "ffn.norm_gate.norm.weight"] = g(s + "ffn_norm.weight")
    out[m + "ffn.norm_gate.gate.weight"] = g(s + "ffn.gate.weight")
    if L < c["num_hash_layers"]:
        out[m + "ffn.norm_gate.tid2eid"] = g(s + "ffn.gate.tid2eid").astype(np.int32)  # wraps, as torch
    else:
        out[m + "ffn.norm_gate.e_score_correction_bias"] = g(s + "ffn.gate.bias")
    w1, w2, w3 = (s + "ffn.shared_experts.w%d" % i for i in (1, 2, 3))
    sh = m + "ffn.shared_experts."
    out[sh + "gate_up_proj.weight"] = np.concatenate([column(g(w1 + ".weight"), lay),
                                                      column(g(w3 + ".weight"), lay)])
    out[sh + "gate_up_proj.weight_scale_inv"] = np.concatenate([column(g(w1 + ".scale"), lay),
                                                                column(g(w3 + ".scale"), lay)])
    linear(out, g, sh + "down_proj", w2, "row", lay)
    experts(out, c, g, m, s, lay)


def reference(ckpt, lay):
    c, g, V = ckpt.config, ckpt.get, ckpt.config["vocab_size"]
    out = {"model.embed_tokens.weight": common.vocab_slice(g("embed.weight"), V, lay),
           "model.norm.weight": g("norm.weight"),
           "lm_head.weight": common.vocab_slice(g("head.weight"), V, lay)}
    for n in ("hc_head_fn", "hc_head_base", "hc_head_scale"):
        out["model." + n] = g(n)
    for L in range(c["num_hidden_layers"]):
        layer(out, c, g, L, lay)
    return out


def run(tp, ep):
    folder = os.path.join(common.fixtures(), "deepseek_v4")
    ckpt = common.Checkpoint(folder)
    lay = common.Layout(world, rank, tp, ep)
    want = reference(ckpt, lay)
    tag = "deepseek_v4 tp=%d dp=%d%s" % (tp, world // tp, " ep" if ep else "")
    with shardload.Loader(folder, comm, tp=tp, dp=world // tp, enable_expert_parallel=ep) as loader:
        plan = {p.name: p for p in loader.plan()}
        if set(plan) != set(want):
            fails.append("%s: planned names differ: %s" % (tag, sorted(set(plan) ^ set(want))))
        tid = plan.get("model.layers.0.ffn.norm_gate.tid2eid")
        if tid is None or tid.dtype != "I32":
            fails.append("%s: the hash table is not planned as I32" % tag)
        loader.load()
        got = loader.params()
    n = 0
    for name in sorted(set(got) & set(want)):
        if common.raw(got[name]) != common.raw(want[name]):
            fails.append("%s: %s differs from the reference" % (tag, name))
        n += len(common.raw(want[name]))
    if rank == 0:
        print("%s: %d parameters, %d bytes compared" % (tag, len(got), n), flush=True)


tp = max(t for t in (4, 2, 1) if world % t == 0)
run(tp, True)
if world != 3:   # 128 expert rows in 32-blocks do not split over 3 MoE ranks
    run(tp, False)
common.finish_mpi(comm, "test_load_dsv4", fails)
