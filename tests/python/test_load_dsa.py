#!/usr/bin/env python3
"""test_load_dsa.py -- run under mpirun at 1..4 ranks: DeepSeek-V3.2 and GLM-5 through the Python
package (shardload.Loader, tensors by DLPack), every byte of every parameter on every rank against
an independent numpy reference written here from vLLM's rules (docs/spec/ARCHITECTURES.md §20 and
docs/spec/ARCHITECTURES.md §21): DeepSeek-V3's MLA and MoE (common.reference_deepseek's rules) plus the sparse-attention
indexer, replicated (wq_b; wk and weights_proj concatenated as wk_weights_proj; k_norm weight and
bias held in float32), none in the layers index_topk_pattern / index_topk_freq leave without one; and the MTP
draft (specs/deepseek_mtp.json) as vLLM's DeepSeekMTP holds it. Fixtures deepseek_v32 and glm5
(GLM-5 has no topk_method in config.json: the score-correction bias is there by default); tp = the
largest of 4, 2, 1 dividing the world, the rest dp, with and without expert parallelism."""

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
MTP_SPEC = os.path.join(common.SOURCE, "specs", "deepseek_mtp.json")


def has_indexer(c, layer):
    if layer >= c["num_hidden_layers"]:
        return True
    pattern = c.get("index_topk_pattern")
    if pattern is not None:
        return not (layer < len(pattern) and pattern[layer] == "S")
    freq, off = c.get("index_topk_freq", 1), c.get("index_skip_topk_offset", 2)
    return max(layer - off + 1, 0) % freq == 0


def as_f32(ckpt, name):
    """A checkpoint tensor as float32: BF16's 16 bits above 16 zero bits, F32 as it is."""
    dtype, a = ckpt.tensors[name]
    if dtype == "BF16":
        return (a.astype(np.uint32) << 16).view(np.float32)
    assert dtype == "F32", (name, dtype)
    return a


def decoder(ckpt, lay, layer, out, prefix):
    """One decoder layer read from model.layers.L. into out under prefix (the draft's mtp_block.)."""
    c, g = ckpt.config, ckpt.get
    src = "model.layers.%d." % layer
    a, va = src + "self_attn.", prefix + "self_attn."
    for n in ("input_layernorm.weight", "post_attention_layernorm.weight"):
        out[prefix + n] = g(src + n)
    out[va + "fused_qkv_a_proj.weight"] = np.concatenate([g(a + "q_a_proj.weight"),
                                                          g(a + "kv_a_proj_with_mqa.weight")])
    for n in ("q_a_layernorm.weight", "kv_a_layernorm.weight"):
        out[va + n] = g(a + n)
    out[va + "q_b_proj.weight"] = common._column(g(a + "q_b_proj.weight"), lay)
    out[va + "kv_b_proj.weight"] = common._column(g(a + "kv_b_proj.weight"), lay)
    out[va + "o_proj.weight"] = common._row(g(a + "o_proj.weight"), lay)
    if has_indexer(c, layer):
        i, vi = a + "indexer.", va + "indexer."
        out[vi + "wq_b.weight"] = g(i + "wq_b.weight")
        out[vi + "wk_weights_proj.weight"] = np.concatenate([g(i + "wk.weight"), g(i + "weights_proj.weight")])
        for n in ("k_norm.weight", "k_norm.bias"):   # held in float32 (vLLM's LayerNorm)
            out[vi + n] = as_f32(ckpt, i + n)
    m, vm = src + "mlp.", prefix + "mlp."
    if layer < c["first_k_dense_replace"]:
        out[vm + "gate_up_proj.weight"] = common._merged([g(m + "gate_proj.weight"), g(m + "up_proj.weight")], lay)
        out[vm + "down_proj.weight"] = common._row(g(m + "down_proj.weight"), lay)
        return
    out[vm + "gate.weight"] = g(m + "gate.weight")
    if c.get("topk_method", "noaux_tc") == "noaux_tc":
        out[vm + "gate.e_score_correction_bias"] = g(m + "gate.e_score_correction_bias")
    ip = c["moe_intermediate_size"] // lay.moe_tp
    s = lay.moe_r * ip
    w13, w2 = [], []
    for x in common.local_experts(c["n_routed_experts"], lay):
        e = m + "experts.%d." % x
        w13.append(np.concatenate([g(e + "gate_proj.weight")[s:s + ip], g(e + "up_proj.weight")[s:s + ip]]))
        w2.append(g(e + "down_proj.weight")[:, s:s + ip])
    out[vm + "experts.w13_weight"] = np.stack(w13)
    out[vm + "experts.w2_weight"] = np.ascontiguousarray(np.stack(w2))
    sh, vsh = m + "shared_experts.", vm + "shared_experts."
    out[vsh + "gate_up_proj.weight"] = common._merged([g(sh + "gate_proj.weight"), g(sh + "up_proj.weight")], lay)
    out[vsh + "down_proj.weight"] = common._row(g(sh + "down_proj.weight"), lay)


def reference(ckpt, lay, draft):
    c, g, V = ckpt.config, ckpt.get, ckpt.config["vocab_size"]
    L0 = c["num_hidden_layers"]
    out = {}
    if not draft:
        out["model.embed_tokens.weight"] = common.vocab_slice(g("model.embed_tokens.weight"), V, lay)
        out["model.norm.weight"] = g("model.norm.weight")
        out["lm_head.weight"] = common.vocab_slice(g("lm_head.weight"), V, lay)
        for layer in range(L0):
            decoder(ckpt, lay, layer, out, "model.layers.%d." % layer)
        return out
    out["model.embed_tokens.weight"] = common.vocab_slice(g("model.layers.%d.embed_tokens.weight" % L0), V, lay)
    for layer in range(L0, L0 + c["num_nextn_predict_layers"]):
        p = "model.layers.%d." % layer
        for n in ("enorm.weight", "hnorm.weight", "eh_proj.weight", "shared_head.norm.weight"):
            out[p + n] = g(p + n)
        out[p + "shared_head.head.weight"] = common.vocab_slice(g(p + "shared_head.head.weight"), V, lay)
        decoder(ckpt, lay, layer, out, p + "mtp_block.")
    return out


def run(fixture, tp, ep, draft):
    folder = os.path.join(common.fixtures(), fixture)
    ckpt = common.Checkpoint(folder)
    lay = common.Layout(world, rank, tp, ep)
    want = reference(ckpt, lay, draft)
    tag = "%s%s tp=%d dp=%d%s" % (fixture, " draft" if draft else "", tp, world // tp, " ep" if ep else "")
    keys = {"arch": MTP_SPEC} if draft else {}
    with shardload.Loader(folder, comm, tp=tp, dp=world // tp, enable_expert_parallel=ep, **keys) as loader:
        plan = loader.plan()
        names = {p.name for p in plan}
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
for fixture in ("deepseek_v32", "glm5"):
    for ep in (False, True):
        if not ep and world == 3:   # 32 expert rows do not split over 3 MoE ranks
            continue
        run(fixture, tp, ep, draft=False)
run("glm5", tp, True, draft=True)
common.finish_mpi(comm, "test_load_dsa", fails)
