#!/usr/bin/env python3
"""test_multimodal.py -- run under mpirun at 1, 2 and 4 ranks: the multimodal wrappers qwen3_vl
(Qwen3-VL: Qwen3's decoder and the Qwen3-VL vision tower), gemma3_mm (Gemma-3 with SigLIP and
its projector) and kimi_k25_w4a16 (Kimi-K2.5: DeepSeek-V3's decoder with W4A16 routed experts, the
quantization_config under text_config, and the BF16 MoonViT tower with its projector) loaded
through shardload.Loader at tp = the world size, every byte of every parameter (by DLPack) equal
to an independent numpy reference of vLLM's rules written here from the layers vLLM builds and
docs/spec/ARCHITECTURES.md §24 and §18:

  names        vLLM's hf_to_vllm_mapper: model.language_model. -> language_model.model.,
               lm_head. -> language_model.lm_head., model.visual. -> visual.,
               model.vision_tower. -> vision_tower., model.multi_modal_projector. ->
               multi_modal_projector.; Kimi-K2.5 (models/kimi_k25.py, load_weights' key map):
               language_model.model. -> language_model., language_model.lm_head -> lm_head,
               mm_projector.proj.0 / proj.2 -> mm_projector.linear_1 / linear_2;
  text         qkv_proj = the rank's q heads, then its k and v heads (one head per tp / Hkv ranks
               when tp >= Hkv); gate_up_proj = its gate rows then its up rows; o_proj, down_proj
               by input columns; the vocabulary padded to 64 and cut in tp blocks; norms whole;
               Gemma-3: embed_tokens and norm on every stage, no lm_head (tied);
  tower        fused or separate q/k/v split by heads (weights and biases); out/proj and fc2
               weights by input columns, their biases whole; fc1 (weight, bias) by output rows;
               SigLIP's position embedding as a padded vocabulary; the rest whole; MoonViT
               (models/kimi_k25_vit.py) built without the quant_config: wqkv fused q/k/v,
               wo and mlp.fc1 row-parallel, mlp.fc0 column-parallel, the projector replicated;
  Kimi text    DeepSeek-V3's MLA and MoE as vLLM's DeepseekV2Model holds them (fused_qkv_a_proj,
               q_b_proj / kv_b_proj by rows, o_proj by columns, dense layer 0 and the shared
               experts as merged gate_up / row down, router and its correction bias whole); the
               routed experts compressed-tensors W4A16 (docs/spec/ARCHITECTURES.md §18, the Marlin
               MoE method): every expert tensor transposed, w13 = gate then up along dim 1 (the
               rank's intermediate slice of the output rows), w2 the rank's intermediate slice of
               the input (8 packed values per int32, G inputs per scale), and w13/w2_weight_shape
               one [2] per expert (up_proj's, down_proj's).

Then with skip_vision: the text parameters alone, the tower's tensors counted in skipped_count.
Environment (set by ctest): SL_FIXTURES (and the library and package paths)."""

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
checked = {"params": 0, "bytes": 0}


def check(cond, msg):
    if not cond:
        failures.append(msg)
        print("rank %d: FAIL: %s" % (rank, msg), flush=True)


def rows(t, tp, r):
    n = t.shape[0] // tp
    return t[r * n:(r + 1) * n]


def cols(t, tp, r):
    n = t.shape[1] // tp
    return np.ascontiguousarray(t[:, r * n:(r + 1) * n])


def heads(t, nh, d, tp, r):
    """Rows of head block r of t ([nh * d, ...]); with tp >= nh, the head of ranks r // (tp / nh)."""
    if tp >= nh:
        h = r // (tp // nh)
        return t[h * d:(h + 1) * d]
    return rows(t, tp, r)


def qkv(q, k, v, hq, hkv, d, tp, r):
    return np.concatenate([rows(q, tp, r), heads(k, hkv, d, tp, r), heads(v, hkv, d, tp, r)])


def vocab(t, n, tp, r):
    per = -(-n // 64) * 64 // tp
    a, b = min(n, r * per), min(n, (r + 1) * per)
    out = np.zeros((per,) + t.shape[1:], t.dtype)
    out[:b - a] = t[a:b]
    return out


def text_reference(ck, src, dst, tp, r, gemma):
    """The decoder of a wrapper: checkpoint prefix src (model.language_model.), vLLM's dst."""
    c = ck.config["text_config"]
    g = ck.get
    hq, hkv, V = c["num_attention_heads"], c["num_key_value_heads"], c["vocab_size"]
    d = c["head_dim"]
    out = {dst + "embed_tokens.weight": vocab(g(src + "embed_tokens.weight"), V, tp, r),
           dst + "norm.weight": g(src + "norm.weight")}
    if not gemma:
        out["language_model.lm_head.weight"] = vocab(g("lm_head.weight"), V, tp, r)
    norms = ["input_layernorm", "post_attention_layernorm", "self_attn.q_norm", "self_attn.k_norm"]
    if gemma:
        norms += ["pre_feedforward_layernorm", "post_feedforward_layernorm"]
    for L in range(c["num_hidden_layers"]):
        s, v = "%slayers.%d." % (src, L), "%slayers.%d." % (dst, L)
        for n in norms:
            out[v + n + ".weight"] = g(s + n + ".weight")
        a = s + "self_attn."
        out[v + "self_attn.qkv_proj.weight"] = qkv(g(a + "q_proj.weight"), g(a + "k_proj.weight"),
                                                   g(a + "v_proj.weight"), hq, hkv, d, tp, r)
        out[v + "self_attn.o_proj.weight"] = cols(g(a + "o_proj.weight"), tp, r)
        out[v + "mlp.gate_up_proj.weight"] = np.concatenate([rows(g(s + "mlp.gate_proj.weight"), tp, r),
                                                             rows(g(s + "mlp.up_proj.weight"), tp, r)])
        out[v + "mlp.down_proj.weight"] = cols(g(s + "mlp.down_proj.weight"), tp, r)
    return out


def linear_pair(out, ck, src, dst, kind, tp, r):
    """weight and bias of a column (kind "col": both by rows) or row ("row": weight by columns,
    bias whole) parallel linear."""
    w, b = ck.get(src + ".weight"), ck.get(src + ".bias")
    out[dst + ".weight"] = rows(w, tp, r) if kind == "col" else cols(w, tp, r)
    out[dst + ".bias"] = rows(b, tp, r) if kind == "col" else b


def qwen3_vl_reference(ck, tp, r, tower):
    out = text_reference(ck, "model.language_model.", "language_model.model.", tp, r, False)
    if not tower:
        return out
    vc = ck.config["vision_config"]
    hv, nh = vc["hidden_size"], vc["num_heads"]
    for name in ck.tensors:
        if not name.startswith("model.visual."):
            continue
        v = name[len("model."):]
        t = ck.get(name)
        if ".attn.qkv." in name:
            q, k, w = np.split(t, 3)
            out[v] = qkv(q, k, w, nh, nh, hv // nh, tp, r)
        elif name.endswith(("linear_fc1.weight", "linear_fc1.bias")):
            out[v] = rows(t, tp, r)
        elif name.endswith(("attn.proj.weight", "linear_fc2.weight")):
            out[v] = cols(t, tp, r)
        else:
            out[v] = t
    return out


def gemma3_mm_reference(ck, tp, r, tower):
    out = text_reference(ck, "model.language_model.", "language_model.model.", tp, r, True)
    if not tower:
        return out
    vc = ck.config["vision_config"]
    hv, nh = vc["hidden_size"], vc["num_attention_heads"]
    cv, vv = "model.vision_tower.vision_model.", "vision_tower.vision_model."
    e = "embeddings."
    out[vv + e + "patch_embedding.weight"] = ck.get(cv + e + "patch_embedding.weight")
    out[vv + e + "patch_embedding.bias"] = ck.get(cv + e + "patch_embedding.bias")
    npos = (vc["image_size"] // vc["patch_size"]) ** 2
    out[vv + e + "position_embedding.weight"] = vocab(ck.get(cv + e + "position_embedding.weight"), npos, tp, r)
    for L in range(vc["num_hidden_layers"]):
        s, v = "%sencoder.layers.%d." % (cv, L), "%sencoder.layers.%d." % (vv, L)
        for n in ("layer_norm1", "layer_norm2"):
            for k in ("weight", "bias"):
                out[v + n + "." + k] = ck.get(s + n + "." + k)
        for k in ("weight", "bias"):
            parts = [ck.get(s + "self_attn.%s_proj.%s" % (p, k)) for p in "qkv"]
            out[v + "self_attn.qkv_proj." + k] = qkv(*parts, nh, nh, hv // nh, tp, r)
        linear_pair(out, ck, s + "self_attn.out_proj", v + "self_attn.out_proj", "row", tp, r)
        linear_pair(out, ck, s + "mlp.fc1", v + "mlp.fc1", "col", tp, r)
        linear_pair(out, ck, s + "mlp.fc2", v + "mlp.fc2", "row", tp, r)
    for k in ("weight", "bias"):
        out[vv + "post_layernorm." + k] = ck.get(cv + "post_layernorm." + k)
    for n in ("mm_input_projection_weight", "mm_soft_emb_norm.weight"):
        out["multi_modal_projector." + n] = ck.get("model.multi_modal_projector." + n)
    return out


def kimi_experts(out, ck, src, dst, E, inter, tp, r):
    """The W4A16 routed experts of one MoE layer in the Marlin MoE layout (no expert parallelism:
    every expert, sliced over the tp ranks along the intermediate dimension)."""
    quant = ck.config["text_config"]["quantization_config"]
    group = quant["config_groups"]["group_0"]["weights"]["group_size"]
    ip = inter // tp
    s = r * ip
    # (kind, checkpoint inputs per stored column of w2): 8 int4 per int32, one scale per group
    for kind, per in (("weight_packed", 8), ("weight_scale", group)):
        w13, w2 = [], []
        for x in range(E):
            e = "%s%d." % (src, x)
            w13.append(np.concatenate([ck.get(e + "gate_proj." + kind)[s:s + ip].T,
                                       ck.get(e + "up_proj." + kind)[s:s + ip].T], axis=1))
            w2.append(ck.get(e + "down_proj." + kind)[:, s // per:(s + ip) // per].T)
        out[dst + "w13_" + kind] = np.ascontiguousarray(np.stack(w13))
        out[dst + "w2_" + kind] = np.ascontiguousarray(np.stack(w2))
    out[dst + "w13_weight_shape"] = np.stack([ck.get("%s%d.up_proj.weight_shape" % (src, x)) for x in range(E)])
    out[dst + "w2_weight_shape"] = np.stack([ck.get("%s%d.down_proj.weight_shape" % (src, x)) for x in range(E)])


def kimi_text_reference(ck, tp, r):
    c = ck.config["text_config"]
    g = ck.get
    V, E = c["vocab_size"], c["n_routed_experts"]
    src, dst = "language_model.model.", "language_model."
    out = {dst + "embed_tokens.weight": vocab(g(src + "embed_tokens.weight"), V, tp, r),
           dst + "norm.weight": g(src + "norm.weight"),
           "lm_head.weight": vocab(g("language_model.lm_head.weight"), V, tp, r)}
    for L in range(c["num_hidden_layers"]):
        s, v = "%slayers.%d." % (src, L), "%slayers.%d." % (dst, L)
        for n in ("input_layernorm", "post_attention_layernorm", "self_attn.q_a_layernorm",
                  "self_attn.kv_a_layernorm"):
            out[v + n + ".weight"] = g(s + n + ".weight")
        a, va = s + "self_attn.", v + "self_attn."
        out[va + "fused_qkv_a_proj.weight"] = np.concatenate([g(a + "q_a_proj.weight"),
                                                              g(a + "kv_a_proj_with_mqa.weight")])
        out[va + "q_b_proj.weight"] = rows(g(a + "q_b_proj.weight"), tp, r)
        out[va + "kv_b_proj.weight"] = rows(g(a + "kv_b_proj.weight"), tp, r)
        out[va + "o_proj.weight"] = cols(g(a + "o_proj.weight"), tp, r)
        m, vm = s + "mlp.", v + "mlp."
        dense = [(m, vm)]
        if L >= c["first_k_dense_replace"]:
            out[vm + "gate.weight"] = g(m + "gate.weight")
            out[vm + "gate.e_score_correction_bias"] = g(m + "gate.e_score_correction_bias")
            kimi_experts(out, ck, m + "experts.", vm + "experts.", E, c["moe_intermediate_size"], tp, r)
            dense = [(m + "shared_experts.", vm + "shared_experts.")]
        for p, vp in dense:
            out[vp + "gate_up_proj.weight"] = np.concatenate([rows(g(p + "gate_proj.weight"), tp, r),
                                                              rows(g(p + "up_proj.weight"), tp, r)])
            out[vp + "down_proj.weight"] = cols(g(p + "down_proj.weight"), tp, r)
    return out


def kimi_k25_reference(ck, tp, r, tower):
    out = kimi_text_reference(ck, tp, r)
    if not tower:
        return out
    vc = ck.config["vision_config"]
    hv, nh = vc["hidden_size"], vc["num_attention_heads"]
    projector = {"mm_projector.proj.0.": "mm_projector.linear_1.", "mm_projector.proj.2.": "mm_projector.linear_2."}
    for name in ck.tensors:
        if not name.startswith(("vision_tower.", "mm_projector.")):
            continue
        t = ck.get(name)
        v = name
        for old, new in projector.items():
            v = v.replace(old, new)
        if ".wqkv." in name:
            q, k, w = np.split(t, 3)
            out[v] = qkv(q, k, w, nh, nh, hv // nh, tp, r)
        elif name.endswith(("mlp.fc0.weight", "mlp.fc0.bias")):
            out[v] = rows(t, tp, r)
        elif name.endswith(("wo.weight", "mlp.fc1.weight")):
            out[v] = cols(t, tp, r)
        else:
            out[v] = t
    return out


def find_key(doc, key):
    """The first value of key anywhere in a JSON document (the report nests its coverage)."""
    if isinstance(doc, dict):
        if key in doc:
            return doc[key]
        doc = list(doc.values())
    if isinstance(doc, list):
        for item in doc:
            found = find_key(item, key)
            if found is not None:
                return found
    return None


def run(fixture, reference, tower_prefixes, superseded=lambda name: False):
    """superseded(name): a checkpoint tensor vLLM's loaders read and then overwrite (a routed
    expert's gate_proj.weight_shape: w13_weight_shape keeps up_proj's, loaded after it), skipped
    with or without the tower."""
    folder = os.path.join(common.fixtures(), fixture)
    ck = common.Checkpoint(folder)
    tp = world
    for skip in (False, True):
        tag = "%s tp=%d%s" % (fixture, tp, " skip_vision" if skip else "")
        ref = reference(ck, tp, rank, not skip)
        loader = shardload.Loader(folder, comm, tp=tp, skip_vision=skip)
        loader.load()
        got = loader.params()
        report = loader.report()
        check(set(got) == set(ref), "%s: names differ: %s" % (tag, sorted(set(got) ^ set(ref))[:8]))
        for name in sorted(set(got) & set(ref)):
            a, b = common.raw(got[name]), common.raw(ref[name])
            check(a == b, "%s: %s differs from the reference (shape %s, expected %s)"
                  % (tag, name, tuple(got[name].shape), ref[name].shape))
            checked["params"] += 1
            checked["bytes"] += len(b)
        if rank == 0:
            n = sum(1 for t in ck.tensors if superseded(t) or (skip and t.startswith(tower_prefixes)))
            check(find_key(report, "skipped_count") == n, "%s: skipped_count %r, expected %d"
                  % (tag, find_key(report, "skipped_count"), n))
        del got
        loader.close()


run("qwen3_vl", qwen3_vl_reference, ("model.visual.",))
run("gemma3_mm", gemma3_mm_reference, ("model.vision_tower.", "model.multi_modal_projector."))
run("kimi_k25_w4a16", kimi_k25_reference, ("vision_tower.", "mm_projector."),
    lambda name: ".mlp.experts." in name and name.endswith(".gate_proj.weight_shape"))

total = comm.allreduce(checked["params"])
nbytes = comm.allreduce(checked["bytes"])
bad = comm.allreduce(len(failures))
if rank == 0:
    print("test_multimodal: %d ranks, %d parameter checks, %d bytes compared, %d failures"
          % (world, total, nbytes, bad))
sys.exit(1 if bad else 0)
