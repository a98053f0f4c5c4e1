"""tiny_llama4.py -- Llama-4's text decoder in plain torch, twice (the forward-pass check of
tests/python/test_forward.py):

  Hf4      the model as its checkpoint defines it (Hugging Face's Llama4TextModel), built from
           the safetensors files by the tests' own reader: q_proj/k_proj as stored, rotary as
           the checkpoint's convention (complex: elements 2i and 2i+1 of a head form one pair),
           experts as stored ([E, H, 2I] gate columns then up columns, [E, I, H]).
  Vllm4    the model as vLLM's models/llama4.py runs it on one tensor-parallel rank, with
           vLLM's parameter names and shapes, filled by shardload: qkv_proj [(Hq/T + 2*kvl)*d, H]
           with vLLM's rotary (neox: elements i and i + d/2 of a head form one pair), experts
           w13_weight [El, 2*Ip, H] / w2_weight [El, H, Ip], row-parallel outputs all-reduced.

Both: layers without rotary where no_rope_layers[l] == 0, the weightless q/k norm after the
rotary on the others (use_qk_norm), a top-k router whose scores are sigmoids of the chosen logits
and scale the expert's input, a shared expert beside the routed ones on every
interleave_moe_layer_step-th layer, a dense MLP on the others. The two rotary conventions agree
only if the loader permutes q and k rows as vLLM's load_weights does (permute_qk_weight_for_rotary:
row 2i + j of a head to row j*d/2 + i): without that the logits differ."""

import torch

from tiny_models import Comm, rms_norm


def _text(config):
    return config.get("text_config", config)


def rope_pairs(x, pos, theta):
    """The checkpoint's rotary: elements (2i, 2i+1) of the last dim rotated by pos * theta^(-2i/d)."""
    d = x.shape[-1]
    inv = 1.0 / (theta ** (torch.arange(0, d, 2, dtype=torch.float32) / d))
    ang = pos[:, None].float() * inv[None, :]
    a, b = x[..., 0::2], x[..., 1::2]
    out = torch.empty_like(x)
    out[..., 0::2] = a * ang.cos() - b * ang.sin()
    out[..., 1::2] = a * ang.sin() + b * ang.cos()
    return out


def rope_neox(x, pos, theta):
    """vLLM's rotary for Llama-4 (is_neox_style): elements (i, i + d/2) rotated together."""
    d = x.shape[-1]
    inv = 1.0 / (theta ** (torch.arange(0, d, 2, dtype=torch.float32) / d))
    ang = pos[:, None].float() * inv[None, :]
    cos = torch.cat([ang.cos(), ang.cos()], -1)
    sin = torch.cat([ang.sin(), ang.sin()], -1)
    x1, x2 = x[..., : d // 2], x[..., d // 2:]
    return x * cos + torch.cat([-x2, x1], -1) * sin


def l2_norm(x, eps):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)


def attention(q, k, v, hq_local, kv_start, group, d):
    """q [B, hq, S, d], k/v [B, kvl, S, d]; q head j (global index) uses kv head j // group."""
    S = q.shape[2]
    mask = torch.full((S, S), float("-inf")).triu(1)
    heads = []
    for j in range(q.shape[1]):
        g = (hq_local + j) // group - kv_start
        s = (q[:, j] @ k[:, g].transpose(-1, -2)) / d ** 0.5 + mask
        heads.append(torch.softmax(s, -1) @ v[:, g])
    return torch.stack(heads, 1)


def route(h, router, top_k):
    """[T, E] sigmoid scores of the top_k logits of each token, zero elsewhere (vLLM's
    Llama4MoE.custom_routing_function; Hugging Face's Llama4TextMoe alike)."""
    logits = h @ router.T
    val, idx = logits.topk(top_k, -1)
    scores = torch.zeros_like(logits)
    return scores.scatter(-1, idx, torch.sigmoid(val))


class Hf4:
    """The unsharded model straight from the checkpoint's tensors (numpy arrays by name)."""

    def __init__(self, config, get):
        self.c = _text(config)
        self.w = lambda name: torch.from_numpy(get("language_model." + name).copy())

    def __call__(self, tokens):
        c, w = self.c, self.w
        H, Hq, Hkv, d = c["hidden_size"], c["num_attention_heads"], c["num_key_value_heads"], c["head_dim"]
        eps, theta = c["rms_norm_eps"], c["rope_theta"]
        x = w("model.embed_tokens.weight")[tokens]
        B, S = tokens.shape
        pos = torch.arange(S)
        for L in range(c["num_hidden_layers"]):
            p = "model.layers.%d." % L
            h = rms_norm(x, w(p + "input_layernorm.weight"), eps)
            q = (h @ w(p + "self_attn.q_proj.weight").T).view(B, S, Hq, d).transpose(1, 2)
            k = (h @ w(p + "self_attn.k_proj.weight").T).view(B, S, Hkv, d).transpose(1, 2)
            v = (h @ w(p + "self_attn.v_proj.weight").T).view(B, S, Hkv, d).transpose(1, 2)
            if c["no_rope_layers"][L]:
                q, k = rope_pairs(q, pos, theta), rope_pairs(k, pos, theta)
                if c.get("use_qk_norm"):
                    q, k = l2_norm(q, eps), l2_norm(k, eps)
            a = attention(q, k, v, 0, 0, Hq // Hkv, d).transpose(1, 2).reshape(B, S, Hq * d)
            x = x + a @ w(p + "self_attn.o_proj.weight").T
            h = rms_norm(x, w(p + "post_attention_layernorm.weight"), eps)
            f = p + "feed_forward."
            if (L + 1) % c["interleave_moe_layer_step"] == 0:
                gu, dn = w(f + "experts.gate_up_proj"), w(f + "experts.down_proj")
                scores = route(h, w(f + "router.weight"), c["num_experts_per_tok"])
                out = torch.zeros_like(h)
                for e in range(gu.shape[0]):
                    g, u = (h * scores[..., e:e + 1] @ gu[e]).chunk(2, -1)
                    out = out + (torch.nn.functional.silu(g) * u) @ dn[e]
                s = f + "shared_expert."
                g = h @ w(s + "gate_proj.weight").T
                u = h @ w(s + "up_proj.weight").T
                x = x + out + (torch.nn.functional.silu(g) * u) @ w(s + "down_proj.weight").T
            else:
                g = h @ w(f + "gate_proj.weight").T
                u = h @ w(f + "up_proj.weight").T
                x = x + (torch.nn.functional.silu(g) * u) @ w(f + "down_proj.weight").T
        x = rms_norm(x, w("model.norm.weight"), eps)
        return x @ w("lm_head.weight").T


def vllm_shapes(config, tp, experts_local, ep):
    """{vLLM name: local shape} of one tensor-parallel rank (Llama4ForConditionalGeneration's
    language_model)."""
    c = _text(config)
    H, Hq, Hkv, d = c["hidden_size"], c["num_attention_heads"], c["num_key_value_heads"], c["head_dim"]
    vp = -(-c["vocab_size"] // 64) * 64
    kvl = 1 if tp >= Hkv else Hkv // tp
    im = c["intermediate_size"]
    ip = im if ep else im // tp
    lm = "language_model."
    shapes = {lm + "model.embed_tokens.weight": (vp // tp, H), lm + "model.norm.weight": (H,),
              lm + "lm_head.weight": (vp // tp, H)}
    for L in range(c["num_hidden_layers"]):
        p = lm + "model.layers.%d." % L
        shapes[p + "input_layernorm.weight"] = (H,)
        shapes[p + "post_attention_layernorm.weight"] = (H,)
        shapes[p + "self_attn.qkv_proj.weight"] = ((Hq // tp + 2 * kvl) * d, H)
        shapes[p + "self_attn.o_proj.weight"] = (H, Hq * d // tp)
        f = p + "feed_forward."
        if (L + 1) % c["interleave_moe_layer_step"] == 0:
            shapes[f + "router.weight"] = (c["num_local_experts"], H)
            shapes[f + "experts.w13_weight"] = (len(experts_local), 2 * ip, H)
            shapes[f + "experts.w2_weight"] = (len(experts_local), H, ip)
            shapes[f + "shared_expert.gate_up_proj.weight"] = (2 * im // tp, H)
            shapes[f + "shared_expert.down_proj.weight"] = (H, im // tp)
        else:
            i = c["intermediate_size_mlp"] // tp
            shapes[f + "gate_up_proj.weight"] = (2 * i, H)
            shapes[f + "down_proj.weight"] = (H, i)
    return shapes


class Vllm4(torch.nn.Module):
    """One tensor-parallel rank of vLLM's Llama-4 text model (tp = the world, dp 1): parameters at
    vLLM's names, empty until a loader fills them."""

    def __init__(self, config, tp, rank, comm, experts_local, ep):
        super().__init__()
        self.c, self.tp, self.r = _text(config), tp, rank
        self.comm = Comm(comm)
        self.experts_local = experts_local
        for name, shape in vllm_shapes(config, tp, experts_local, ep).items():
            parts = name.split(".")
            mod = self
            for part in parts[:-1]:
                if not hasattr(mod, part):
                    mod.add_module(part, torch.nn.Module())
                mod = getattr(mod, part)
            mod.register_parameter(parts[-1], torch.nn.Parameter(
                torch.empty(shape, dtype=torch.float32), requires_grad=False))

    def forward(self, tokens):
        c, T, r = self.c, self.tp, self.r
        Hq, Hkv, d = c["num_attention_heads"], c["num_key_value_heads"], c["head_dim"]
        eps, theta = c["rms_norm_eps"], c["rope_theta"]
        kvl, R = (1, T // Hkv) if T >= Hkv else (Hkv // T, 1)
        hq = Hq // T
        m = self.language_model.model
        W = m.embed_tokens.weight
        lo = r * W.shape[0]
        local = (tokens >= lo) & (tokens < lo + W.shape[0])
        x = self.comm.allreduce(W[(tokens - lo).clamp(0, W.shape[0] - 1)] * local[..., None])
        B, S = tokens.shape
        pos = torch.arange(S)
        for L in range(c["num_hidden_layers"]):
            layer = getattr(m.layers, str(L))
            h = rms_norm(x, layer.input_layernorm.weight, eps)
            q, k, v = (h @ layer.self_attn.qkv_proj.weight.T).split([hq * d, kvl * d, kvl * d], -1)
            q = q.view(B, S, hq, d).transpose(1, 2)
            k = k.view(B, S, kvl, d).transpose(1, 2)
            v = v.view(B, S, kvl, d).transpose(1, 2)
            if c["no_rope_layers"][L]:
                q, k = rope_neox(q, pos, theta), rope_neox(k, pos, theta)
                if c.get("use_qk_norm"):
                    q, k = l2_norm(q, eps), l2_norm(k, eps)
            a = attention(q, k, v, r * hq, (r // R) * kvl, Hq // Hkv, d)
            a = a.transpose(1, 2).reshape(B, S, hq * d)
            x = x + self.comm.allreduce(a @ layer.self_attn.o_proj.weight.T)
            h = rms_norm(x, layer.post_attention_layernorm.weight, eps)
            f = layer.feed_forward
            if hasattr(f, "experts"):
                scores = route(h, f.router.weight, c["num_experts_per_tok"])
                out = torch.zeros_like(h)
                for k_local, e in enumerate(self.experts_local):
                    g, u = (h * scores[..., e:e + 1] @ f.experts.w13_weight[k_local].T).chunk(2, -1)
                    out = out + (torch.nn.functional.silu(g) * u) @ f.experts.w2_weight[k_local].T
                g, u = (h @ f.shared_expert.gate_up_proj.weight.T).chunk(2, -1)
                out = out + (torch.nn.functional.silu(g) * u) @ f.shared_expert.down_proj.weight.T
                x = x + self.comm.allreduce(out)
            else:
                g, u = (h @ f.gate_up_proj.weight.T).chunk(2, -1)
                x = x + self.comm.allreduce((torch.nn.functional.silu(g) * u) @ f.down_proj.weight.T)
        x = rms_norm(x, m.norm.weight, eps)
        logits = self.comm.allgather_last(x @ self.language_model.lm_head.weight.T)
        return logits[..., : c["vocab_size"]]
