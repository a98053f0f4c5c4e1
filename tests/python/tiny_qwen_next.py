"""tiny_qwen_next.py -- a Qwen3-Next / Qwen3.5 decoder in plain torch with vLLM's parameter names and
tensor-parallel layout (the tests' stand-in for vLLM's model, whose kernels are CUDA's), for the
forward-pass check of test_qwen_next.py.

Per layer, as vLLM's qwen3_next.py / qwen3_5.py compute it:
- gated DeltaNet (linear attention), on this rank's heads: in_proj_qkvz and in_proj_ba give q, k,
  v, z, b, a (Qwen3-Next: per local key-head group [q | k | v of its value heads | z], [b | a];
  Qwen3.5: [q | k | v | z], [b | a]); a causal depthwise conv1d over q, k and v, then silu; q and k
  L2-normalised (q also scaled by dk^-1/2), each value head reading its key head; decay
  g = -exp(A_log) * softplus(a + dt_bias) and beta = sigmoid(b); the delta rule run step by step
  (state S [dk, dv]: S *= exp(g); S += k (x) beta*(v - k S); o = q S); the gated RMS norm
  norm(o) * w * silu(z) over each head; out_proj; sum over the ranks;
- gated full attention: qkv_proj gives each local head's q and gate and the kv heads; q/k norms,
  partial rotary (a quarter of the head), causal softmax attention, output * sigmoid(gate), o_proj;
- MoE: softmax router, top-k renormalised, the rank's experts (all of them sharded without
  expert parallelism, whole ones with it), plus the shared expert times sigmoid(shared_expert_gate),
  summed over the ranks; or a dense MLP;
- norms are Gemma's (x_hat * (1 + w)); vocabulary-parallel embedding and head as tiny_models.py.
tp = 1 and comm = None is the unsharded model.
"""

import torch
import torch.nn.functional as F

from tiny_models import Comm

import qwen_next_ref


def gemma_norm(x, w, eps):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * (1.0 + w)


def partial_rope(x, pos, theta, rot):
    x_rot, x_pass = x[..., :rot], x[..., rot:]
    inv = 1.0 / (theta ** (torch.arange(0, rot, 2, dtype=torch.float32) / rot))
    ang = pos[:, None].float() * inv[None, :]
    cos, sin = torch.cat([ang.cos(), ang.cos()], -1), torch.cat([ang.sin(), ang.sin()], -1)
    x1, x2 = x_rot[..., : rot // 2], x_rot[..., rot // 2:]
    return torch.cat([x_rot * cos + torch.cat([-x2, x1], -1) * sin, x_pass], -1)


class TinyQwenNext(torch.nn.Module):
    def __init__(self, config, shapes, tp=1, rank=0, comm=None, experts_local=None):
        super().__init__()
        self.config, self.c = config, qwen_next_ref.text_config(config)
        self.tp, self.r = tp, rank
        self.comm = comm if hasattr(comm, "allgather_last") else Comm(comm)
        self.vp, _, self.head = qwen_next_ref.names(config)
        E = self.c.get("num_experts", 0)
        self.experts_local = list(range(E)) if experts_local is None else experts_local
        self.params = {}
        for name, shape in shapes.items():
            parts = name.split(".")
            mod = self
            for part in parts[:-1]:
                if not hasattr(mod, part):
                    mod.add_module(part, torch.nn.Module())
                mod = getattr(mod, part)
            p = torch.nn.Parameter(torch.zeros(shape, dtype=torch.float32), requires_grad=False)
            mod.register_parameter(parts[-1], p)
            self.params[name] = p

    def p(self, name):
        return self.params[name]

    def gdn(self, v, h):
        c, T = self.c, self.tp
        nk, nv = c["linear_num_key_heads"] // T, c["linear_num_value_heads"] // T
        dk, dv = c["linear_key_head_dim"], c["linear_value_head_dim"]
        rep = nv // nk
        B, S, _ = h.shape
        qkvz = h @ self.p(v + "in_proj_qkvz.weight").T
        ba = h @ self.p(v + "in_proj_ba.weight").T
        if self.config["architectures"][0] == "Qwen3NextForCausalLM":   # grouped by key head
            q, k, val, z = qkvz.view(B, S, nk, 2 * dk + 2 * rep * dv).split([dk, dk, rep * dv, rep * dv], -1)
            b, a = ba.view(B, S, nk, 2 * rep).split([rep, rep], -1)
        else:
            q, k, val, z = qkvz.split([nk * dk, nk * dk, nv * dv, nv * dv], -1)
            b, a = ba.split([nv, nv], -1)
        mixed = torch.cat([q.reshape(B, S, -1), k.reshape(B, S, -1), val.reshape(B, S, -1)], -1)
        w = self.p(v + "conv1d.weight")[:, 0, :]                  # [channels, kernel]
        kernel = w.shape[1]
        padded = F.pad(mixed.transpose(1, 2), (kernel - 1, 0))
        mixed = F.silu(F.conv1d(padded, w[:, None, :], groups=w.shape[0])).transpose(1, 2)
        q, k, val = mixed.split([nk * dk, nk * dk, nv * dv], -1)
        q = F.normalize(q.reshape(B, S, nk, dk), dim=-1) * dk ** -0.5
        k = F.normalize(k.reshape(B, S, nk, dk), dim=-1)
        val = val.reshape(B, S, nv, dv)
        q, k = q.repeat_interleave(rep, 2), k.repeat_interleave(rep, 2)   # value head j reads key head j // rep
        beta = torch.sigmoid(b.reshape(B, S, nv))
        g = -torch.exp(self.p(v + "A_log")) * F.softplus(a.reshape(B, S, nv) + self.p(v + "dt_bias"))
        state = torch.zeros(B, nv, dk, dv)
        outs = []
        for t in range(S):
            state = state * torch.exp(g[:, t])[..., None, None]
            kt = k[:, t]
            delta = (val[:, t] - torch.einsum("bhk,bhkv->bhv", kt, state)) * beta[:, t, :, None]
            state = state + kt[..., None] * delta[..., None, :]
            outs.append(torch.einsum("bhk,bhkv->bhv", q[:, t], state))
        o = torch.stack(outs, 1)                                   # [B, S, nv, dv]
        eps = c.get("rms_norm_eps", 1e-6)
        o = o * torch.rsqrt(o.pow(2).mean(-1, keepdim=True) + eps) * self.p(v + "norm.weight")
        o = o * F.silu(z.reshape(B, S, nv, dv))
        return self.comm.allreduce(o.reshape(B, S, nv * dv) @ self.p(v + "out_proj.weight").T)

    def attention(self, v, h, pos, mask):
        c, T, r = self.c, self.tp, self.r
        Hq, Hkv, d = c["num_attention_heads"], c["num_key_value_heads"], c["head_dim"]
        kvl, R = (1, T // Hkv) if T >= Hkv else (Hkv // T, 1)
        hq = Hq // T
        B, S, _ = h.shape
        eps = c.get("rms_norm_eps", 1e-6)
        qg, k, val = (h @ self.p(v + "qkv_proj.weight").T).split([2 * hq * d, kvl * d, kvl * d], -1)
        q, gate = qg.view(B, S, hq, 2 * d).chunk(2, -1)
        q = gemma_norm(q, self.p(v + "q_norm.weight"), eps).transpose(1, 2)
        k = gemma_norm(k.view(B, S, kvl, d), self.p(v + "k_norm.weight"), eps).transpose(1, 2)
        rot = int(d * c.get("partial_rotary_factor", 1.0))
        q, k = partial_rope(q, pos, c.get("rope_theta", 10000.0), rot), \
            partial_rope(k, pos, c.get("rope_theta", 10000.0), rot)
        val = val.view(B, S, kvl, d).transpose(1, 2)
        kv_start = (r // R) * kvl
        heads = []
        for j in range(hq):
            kv = (r * hq + j) // (Hq // Hkv) - kv_start
            s = (q[:, j] @ k[:, kv].transpose(-1, -2)) / d ** 0.5 + mask
            heads.append(torch.softmax(s, -1) @ val[:, kv])
        o = torch.stack(heads, 1).transpose(1, 2) * torch.sigmoid(gate)
        return self.comm.allreduce(o.reshape(B, S, hq * d) @ self.p(v + "o_proj.weight").T)

    def mlp(self, m, h):
        g, u = (h @ self.p(m + "gate_up_proj.weight").T).chunk(2, -1)
        return (F.silu(g) * u) @ self.p(m + "down_proj.weight").T

    def moe(self, m, h):
        probs = torch.softmax(h @ self.p(m + "gate.weight").T, -1)
        top, idx = probs.topk(self.c["num_experts_per_tok"], -1)
        top = top / top.sum(-1, keepdim=True)
        out = torch.zeros_like(h)
        for slot, e in enumerate(self.experts_local):
            w = (top * (idx == e)).sum(-1, keepdim=True)
            g, u = (h @ self.p(m + "experts.w13_weight")[slot].T).chunk(2, -1)
            out = out + w * ((F.silu(g) * u) @ self.p(m + "experts.w2_weight")[slot].T)
        shared = self.mlp(m + "shared_expert.", h) * torch.sigmoid(h @ self.p(m + "shared_expert_gate.weight").T)
        return self.comm.allreduce(out + shared)

    def forward(self, tokens):
        c = self.c
        eps = c.get("rms_norm_eps", 1e-6)
        W = self.p(self.vp + "embed_tokens.weight")
        lo = self.r * W.shape[0]
        local = (tokens >= lo) & (tokens < lo + W.shape[0])
        x = self.comm.allreduce(W[(tokens - lo).clamp(0, W.shape[0] - 1)] * local[..., None])
        B, S = tokens.shape
        pos = torch.arange(S)
        mask = torch.full((S, S), float("-inf")).triu(1)
        for layer in range(c["num_hidden_layers"]):
            v = self.vp + "layers.%d." % layer
            h = gemma_norm(x, self.p(v + "input_layernorm.weight"), eps)
            if qwen_next_ref.full_attention(c, layer):
                x = x + self.attention(v + "self_attn.", h, pos, mask)
            else:
                x = x + self.gdn(v + "linear_attn.", h)
            h = gemma_norm(x, self.p(v + "post_attention_layernorm.weight"), eps)
            if qwen_next_ref.moe_layer(self.config, layer):
                x = x + self.moe(v + "mlp.", h)
            else:
                x = x + self.comm.allreduce(self.mlp(v + "mlp.", h))
        x = gemma_norm(x, self.p(self.vp + "norm.weight"), eps)
        logits = self.comm.allgather_last(x @ self.p(self.head).T)
        return logits[..., : c["vocab_size"]]
