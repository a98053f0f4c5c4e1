"""qwen_next_ref.py -- what a rank of a Qwen3-Next / Qwen3.5 model holds in vLLM's layout, from the
checkpoint read by the tests' own reader (common.Checkpoint), with vLLM's loading rules written out
here (not the C code's plan), for a dp x tp layout (pp 1; Layout of common.py):

- the gated DeltaNet (linear_attn): a section of rows split in tp equal blocks, rank r taking block
  r. Qwen3-Next's in_proj_qkvz [2K + 2V, H] and in_proj_ba [2*nv, H] are one section each (their
  rows are ordered by key-head group); conv1d [K + K + V, 1, kernel] is three (q, k, v); Qwen3.5's
  in_proj_qkvz is in_proj_qkv's three sections then in_proj_z's one, in_proj_ba in_proj_b's then
  in_proj_a's; A_log and dt_bias one section of nv; out_proj by columns; norm whole;
- full attention: qkv_proj from q_proj (2*Hq heads of d rows: each head's q then gate), k_proj,
  v_proj with GQA replication; o_proj by columns; q/k norms whole;
- MoE: router and shared_expert_gate whole, shared expert gate/up rows and down columns by tp,
  experts as common.reference stacks them (from one tensor per expert, or from the stacked 3-D
  experts.gate_up_proj [E, 2I, H] and experts.down_proj [E, H, I]);
- names: Qwen3-Next and text-only Qwen3.5 under model.; the ConditionalGeneration wrappers'
  checkpoint names model.language_model.X held as language_model.model.X, lm_head as
  language_model.lm_head; vision (model.visual.) and MTP (mtp.) tensors not held.
"""

import numpy as np

import common


def text_config(config):
    return config.get("text_config", config)


def names(config):
    """(vLLM prefix, checkpoint prefix, head name) of the text model."""
    if "ConditionalGeneration" in config["architectures"][0]:
        return "language_model.model.", "model.language_model.", "language_model.lm_head.weight"
    return "model.", "model.", "lm_head.weight"


def full_attention(c, layer):
    types = c.get("layer_types")
    if types is not None:
        return types[layer] == "full_attention"
    return (layer + 1) % c.get("full_attention_interval", 4) == 0


def moe_layer(config, layer):
    c = text_config(config)
    if config["architectures"][0] == "Qwen3NextForCausalLM":
        return c.get("num_experts", 0) > 0 and layer not in c.get("mlp_only_layers", []) and \
            (layer + 1) % c.get("decoder_sparse_step", 1) == 0
    return c.get("model_type") == "qwen3_5_moe_text"


def blocks(t, sections, lay):
    """Rank r's block of each section of t's rows, stacked."""
    out, at = [], 0
    for rows in sections:
        n = rows // lay.tp
        out.append(t[at + lay.r * n:at + (lay.r + 1) * n])
        at += rows
    assert at == t.shape[0], (at, t.shape)
    return np.concatenate(out)


def cols(t, lay):
    n = t.shape[1] // lay.tp
    return np.ascontiguousarray(t[:, lay.r * n:(lay.r + 1) * n])


def reference(ckpt, lay):
    """{vLLM name: numpy array} of this rank."""
    config = ckpt.config
    c = text_config(config)
    g = ckpt.get
    vp, sp, head = names(config)
    K = c["linear_num_key_heads"] * c["linear_key_head_dim"]
    V = c["linear_num_value_heads"] * c["linear_value_head_dim"]
    nv = c["linear_num_value_heads"]
    Hq, Hkv, d = c["num_attention_heads"], c["num_key_value_heads"], c["head_dim"]
    T, r = lay.tp, lay.r
    kvl, R = (1, T // Hkv) if T >= Hkv else (Hkv // T, 1)
    out = {vp + "embed_tokens.weight": common.vocab_slice(g(sp + "embed_tokens.weight"), c["vocab_size"], lay),
           vp + "norm.weight": g(sp + "norm.weight")}
    tied = c.get("tie_word_embeddings", config.get("tie_word_embeddings", False))
    out[head] = out[vp + "embed_tokens.weight"] if tied else \
        common.vocab_slice(g("lm_head.weight"), c["vocab_size"], lay)
    for layer in range(c["num_hidden_layers"]):
        v, s = vp + "layers.%d." % layer, sp + "layers.%d." % layer
        for n in ("input_layernorm.weight", "post_attention_layernorm.weight"):
            out[v + n] = g(s + n)
        if full_attention(c, layer):
            a, b = v + "self_attn.", s + "self_attn."
            qn = 2 * Hq // T * d
            out[a + "qkv_proj.weight"] = np.concatenate(
                [g(b + "q_proj.weight")[r * qn:(r + 1) * qn],
                 g(b + "k_proj.weight")[(r // R) * kvl * d:(r // R + 1) * kvl * d],
                 g(b + "v_proj.weight")[(r // R) * kvl * d:(r // R + 1) * kvl * d]])
            out[a + "o_proj.weight"] = cols(g(b + "o_proj.weight"), lay)
            for n in ("q_norm.weight", "k_norm.weight"):
                out[a + n] = g(b + n)
        else:
            a, b = v + "linear_attn.", s + "linear_attn."
            if b + "in_proj_qkvz.weight" in ckpt.tensors:
                out[a + "in_proj_qkvz.weight"] = blocks(g(b + "in_proj_qkvz.weight"), [2 * K + 2 * V], lay)
                out[a + "in_proj_ba.weight"] = blocks(g(b + "in_proj_ba.weight"), [2 * nv], lay)
            else:
                out[a + "in_proj_qkvz.weight"] = np.concatenate(
                    [blocks(g(b + "in_proj_qkv.weight"), [K, K, V], lay), blocks(g(b + "in_proj_z.weight"), [V], lay)])
                out[a + "in_proj_ba.weight"] = np.concatenate(
                    [blocks(g(b + "in_proj_b.weight"), [nv], lay), blocks(g(b + "in_proj_a.weight"), [nv], lay)])
            out[a + "conv1d.weight"] = blocks(g(b + "conv1d.weight"), [K, K, V], lay)
            for n in ("A_log", "dt_bias"):
                out[a + n] = blocks(g(b + n), [nv], lay)
            out[a + "norm.weight"] = g(b + "norm.weight")
            out[a + "out_proj.weight"] = cols(g(b + "out_proj.weight"), lay)
        m, q = v + "mlp.", s + "mlp."
        if not moe_layer(config, layer):
            i = g(q + "gate_proj.weight").shape[0] // T
            out[m + "gate_up_proj.weight"] = np.concatenate(
                [g(q + "gate_proj.weight")[r * i:(r + 1) * i], g(q + "up_proj.weight")[r * i:(r + 1) * i]])
            out[m + "down_proj.weight"] = cols(g(q + "down_proj.weight"), lay)
            continue
        out[m + "gate.weight"] = g(q + "gate.weight")
        out[m + "shared_expert_gate.weight"] = g(q + "shared_expert_gate.weight")
        e = q + "shared_expert."
        i = g(e + "gate_proj.weight").shape[0] // T
        out[m + "shared_expert.gate_up_proj.weight"] = np.concatenate(
            [g(e + "gate_proj.weight")[r * i:(r + 1) * i], g(e + "up_proj.weight")[r * i:(r + 1) * i]])
        out[m + "shared_expert.down_proj.weight"] = cols(g(e + "down_proj.weight"), lay)
        E, im = c["num_experts"], c["moe_intermediate_size"]
        ip = im // lay.moe_tp
        lo = lay.moe_r * ip
        w13, w2 = [], []
        for x in common.local_experts(E, lay):
            if q + "experts.gate_up_proj" in ckpt.tensors:
                gu, dn = g(q + "experts.gate_up_proj")[x], g(q + "experts.down_proj")[x]
                gate, up = gu[:im], gu[im:]
            else:
                gate, up = g(q + "experts.%d.gate_proj.weight" % x), g(q + "experts.%d.up_proj.weight" % x)
                dn = g(q + "experts.%d.down_proj.weight" % x)
            w13.append(np.concatenate([gate[lo:lo + ip], up[lo:lo + ip]]))
            w2.append(dn[:, lo:lo + ip])
        out[m + "experts.w13_weight"] = np.stack(w13)
        out[m + "experts.w2_weight"] = np.ascontiguousarray(np.stack(w2))
    return out
