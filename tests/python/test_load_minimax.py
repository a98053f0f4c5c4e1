#!/usr/bin/env python3
"""test_load_minimax.py -- run under mpirun at 1..4 ranks: MiniMax-M2 (the minimax_m2 fixture)
through the Python package (shardload.Loader, tensors by DLPack), every byte of every parameter on
every rank against an independent numpy reference written here from vLLM's rules
(docs/spec/ARCHITECTURES.md §22): qkv_proj with GQA replication, o_proj by columns, q_norm's rows
with the rank's q heads, k_norm's with its key/value heads (replicated when tp exceeds them, as
vLLM's MiniMaxText01RMSNormTP shards it), the router and the score-correction bias held in float32,
experts stacked (w1, w3 -> w13; w2), the MTP module's layer absent. tp = the largest of 4, 2, 1
dividing the world, the rest dp, with and without expert parallelism."""

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


def as_f32(ckpt, name):
    dtype, a = ckpt.tensors[name]
    return (a.astype(np.uint32) << 16).view(np.float32) if dtype == "BF16" else a


def reference(ckpt, lay):
    c, g, V = ckpt.config, ckpt.get, ckpt.config["vocab_size"]
    T, r = lay.tp, lay.r
    Hq, Hkv, d = c["num_attention_heads"], c["num_key_value_heads"], c["head_dim"]
    kvl, R = (1, T // Hkv) if T >= Hkv else (Hkv // T, 1)
    qn, kn = Hq // T * d, kvl * d
    out = {"model.embed_tokens.weight": common.vocab_slice(g("model.embed_tokens.weight"), V, lay),
           "model.norm.weight": g("model.norm.weight"),
           "lm_head.weight": common.vocab_slice(g("lm_head.weight"), V, lay)}
    for L in range(c["num_hidden_layers"]):
        p = "model.layers.%d." % L
        a, m = p + "self_attn.", p + "block_sparse_moe."
        for n in ("input_layernorm.weight", "post_attention_layernorm.weight"):
            out[p + n] = g(p + n)
        k0 = (r // R) * kn
        out[a + "qkv_proj.weight"] = np.concatenate([g(a + "q_proj.weight")[r * qn:(r + 1) * qn],
                                                     g(a + "k_proj.weight")[k0:k0 + kn],
                                                     g(a + "v_proj.weight")[k0:k0 + kn]])
        out[a + "o_proj.weight"] = common._row(g(a + "o_proj.weight"), lay)
        out[a + "q_norm.weight"] = g(a + "q_norm.weight")[r * qn:(r + 1) * qn]
        out[a + "k_norm.weight"] = g(a + "k_norm.weight")[k0:k0 + kn]
        out[m + "gate.weight"] = as_f32(ckpt, m + "gate.weight")
        out[m + "e_score_correction_bias"] = as_f32(ckpt, m + "e_score_correction_bias")
        ip = c["intermediate_size"] // lay.moe_tp
        s = lay.moe_r * ip
        w13, w2 = [], []
        for x in common.local_experts(c["num_local_experts"], lay):
            e = m + "experts.%d." % x
            w13.append(np.concatenate([g(e + "w1.weight")[s:s + ip], g(e + "w3.weight")[s:s + ip]]))
            w2.append(g(e + "w2.weight")[:, s:s + ip])
        out[m + "experts.w13_weight"] = np.stack(w13)
        out[m + "experts.w2_weight"] = np.ascontiguousarray(np.stack(w2))
    return out


def run(tp, ep):
    folder = os.path.join(common.fixtures(), "minimax_m2")
    ckpt = common.Checkpoint(folder)
    lay = common.Layout(world, rank, tp, ep)
    want = reference(ckpt, lay)
    tag = "minimax_m2 tp=%d dp=%d%s" % (tp, world // tp, " ep" if ep else "")
    with shardload.Loader(folder, comm, tp=tp, dp=world // tp, enable_expert_parallel=ep) as loader:
        names = {p.name for p in loader.plan()}
        if names != set(want):
            fails.append("%s: planned names differ: %s" % (tag, sorted(names ^ set(want))))
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
if world != 3:   # 32 expert rows do not split over 3 MoE ranks
    run(tp, False)
common.finish_mpi(comm, "test_load_minimax", fails)
