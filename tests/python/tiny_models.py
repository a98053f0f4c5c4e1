"""tiny_models.py -- Llama and Mixtral decoders in plain torch with vLLM's parameter names and
tensor-parallel layout (the tests' stand-in for vLLM's model classes).

Column-parallel layers (qkv_proj, gate_up_proj, experts' w13, lm_head) hold their rank's rows;
row-parallel layers (o_proj, down_proj, experts' w2) their rank's columns, followed by an
allreduce through mpi4py (or a torch.distributed gloo group: TorchGroupComm); the
vocabulary-parallel embedding masks tokens outside its rows and allreduces; the lm_head's logits
are gathered and the padding cut off. Experts: every rank runs its local experts (all of them,
sharded, without expert parallelism; whole ones, a subset, with it) and the partial outputs are
allreduced. tp = 1 and comm = None is the unsharded model.
"""

import torch


class Comm:
    def __init__(self, comm):
        self.comm = comm

    def allreduce(self, t):
        if self.comm is None or self.comm.Get_size() == 1:
            return t
        from mpi4py import MPI
        a = t.detach().contiguous().numpy().copy()
        self.comm.Allreduce(MPI.IN_PLACE, a, op=MPI.SUM)
        return torch.from_numpy(a)

    def allgather_last(self, t):
        if self.comm is None or self.comm.Get_size() == 1:
            return t
        parts = self.comm.allgather(t.detach().contiguous().numpy())
        return torch.cat([torch.from_numpy(p) for p in parts], dim=-1)


class TorchGroupComm:
    """Comm's two collectives over a torch.distributed process group (gloo) instead of mpi4py:
    for workers joined by torch.distributed without MPI."""

    def __init__(self, group=None):
        import torch.distributed as dist
        self.dist = dist
        self.group = group if group is not None else dist.group.WORLD
        self.size = dist.get_world_size(self.group)

    def allreduce(self, t):
        if self.size == 1:
            return t
        a = t.detach().contiguous().clone()
        self.dist.all_reduce(a, op=self.dist.ReduceOp.SUM, group=self.group)
        return a

    def allgather_last(self, t):
        if self.size == 1:
            return t
        a = t.detach().contiguous()
        parts = [torch.empty_like(a) for _ in range(self.size)]
        self.dist.all_gather(parts, a, group=self.group)
        return torch.cat(parts, dim=-1)


def rms_norm(x, w, eps):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def rope(x, pos, theta):
    d = x.shape[-1]
    inv = 1.0 / (theta ** (torch.arange(0, d, 2, dtype=torch.float32) / d))
    ang = pos[:, None].float() * inv[None, :]
    cos = torch.cat([ang.cos(), ang.cos()], -1)
    sin = torch.cat([ang.sin(), ang.sin()], -1)
    x1, x2 = x[..., : d // 2], x[..., d // 2:]
    return x * cos + torch.cat([-x2, x1], -1) * sin


def empty_params(config, tp, experts_local, ep):
    """{name: shape} of one rank's parameters (vLLM layout)."""
    c = config
    H, Hq, Hkv = c["hidden_size"], c["num_attention_heads"], c["num_key_value_heads"]
    d = c.get("head_dim") or H // Hq
    vp = -(-c["vocab_size"] // 64) * 64
    kvl = 1 if tp >= Hkv else Hkv // tp
    shapes = {"model.embed_tokens.weight": (vp // tp, H), "model.norm.weight": (H,),
              "lm_head.weight": (vp // tp, H)}
    for L in range(c["num_hidden_layers"]):
        p = "model.layers.%d." % L
        shapes[p + "input_layernorm.weight"] = (H,)
        shapes[p + "post_attention_layernorm.weight"] = (H,)
        shapes[p + "self_attn.qkv_proj.weight"] = ((Hq // tp + 2 * kvl) * d, H)
        shapes[p + "self_attn.o_proj.weight"] = (H, Hq * d // tp)
        if "num_local_experts" in c:
            E, inter = c["num_local_experts"], c["intermediate_size"]
            ip = inter if ep else inter // tp
            m = p + "block_sparse_moe."
            shapes[m + "gate.weight"] = (E, H)
            shapes[m + "experts.w13_weight"] = (len(experts_local), 2 * ip, H)
            shapes[m + "experts.w2_weight"] = (len(experts_local), H, ip)
        else:
            i = c["intermediate_size"] // tp
            shapes[p + "mlp.gate_up_proj.weight"] = (2 * i, H)
            shapes[p + "mlp.down_proj.weight"] = (H, i)
    return shapes


class TinyDecoder(torch.nn.Module):
    """Llama (dense MLP) or Mixtral (block_sparse_moe) by config; parameters at vLLM's names."""

    def __init__(self, config, tp=1, rank=0, comm=None, experts_local=None, ep=False):
        super().__init__()
        self.c, self.tp, self.r = config, tp, rank
        # comm: an mpi4py communicator (or None), or an adaptor such as TorchGroupComm
        self.comm = comm if hasattr(comm, "allgather_last") else Comm(comm)
        E = config.get("num_local_experts", 0)
        self.experts_local = list(range(E)) if experts_local is None else experts_local
        for name, shape in empty_params(config, tp, self.experts_local, ep).items():
            parts = name.split(".")
            mod = self
            for part in parts[:-1]:
                if not hasattr(mod, part):
                    mod.add_module(part, torch.nn.Module())
                mod = getattr(mod, part)
            mod.register_parameter(parts[-1], torch.nn.Parameter(
                torch.empty(shape, dtype=torch.float32), requires_grad=False))

    def forward(self, tokens):
        c = self.c
        H, Hq, Hkv = c["hidden_size"], c["num_attention_heads"], c["num_key_value_heads"]
        d = c.get("head_dim") or H // Hq
        eps, theta = c.get("rms_norm_eps", 1e-5), c.get("rope_theta", 10000.0)
        T, r = self.tp, self.r
        kvl, R = (1, T // Hkv) if T >= Hkv else (Hkv // T, 1)
        hq = Hq // T
        m = self.model
        # vocabulary-parallel embedding
        W = m.embed_tokens.weight
        lo = r * W.shape[0]
        local = (tokens >= lo) & (tokens < lo + W.shape[0])
        x = W[(tokens - lo).clamp(0, W.shape[0] - 1)] * local[..., None]
        x = self.comm.allreduce(x)
        B, S = tokens.shape
        pos = torch.arange(S)
        mask = torch.full((S, S), float("-inf")).triu(1)
        for L in range(c["num_hidden_layers"]):
            layer = getattr(m.layers, str(L))
            h = rms_norm(x, layer.input_layernorm.weight, eps)
            qkv = h @ layer.self_attn.qkv_proj.weight.T
            q, k, v = qkv.split([hq * d, kvl * d, kvl * d], -1)
            q = rope(q.view(B, S, hq, d).transpose(1, 2), pos, theta)
            k = rope(k.view(B, S, kvl, d).transpose(1, 2), pos, theta)
            v = v.view(B, S, kvl, d).transpose(1, 2)
            kv_start = (r // R) * kvl
            heads = []
            for j in range(hq):
                g = (r * hq + j) // (Hq // Hkv) - kv_start  # this q head's local kv head
                s = (q[:, j] @ k[:, g].transpose(-1, -2)) / d ** 0.5 + mask
                heads.append(torch.softmax(s, -1) @ v[:, g])
            a = torch.stack(heads, 1).transpose(1, 2).reshape(B, S, hq * d)
            x = x + self.comm.allreduce(a @ layer.self_attn.o_proj.weight.T)
            h = rms_norm(x, layer.post_attention_layernorm.weight, eps)
            if hasattr(layer, "block_sparse_moe"):
                moe = layer.block_sparse_moe
                probs = torch.softmax(h @ moe.gate.weight.T, -1)
                top, idx = probs.topk(c["num_experts_per_tok"], -1)
                top = top / top.sum(-1, keepdim=True)
                out = torch.zeros_like(h)
                for k_local, e in enumerate(self.experts_local):
                    w = (top * (idx == e)).sum(-1, keepdim=True)
                    g, u = (h @ moe.experts.w13_weight[k_local].T).chunk(2, -1)
                    out = out + w * ((torch.nn.functional.silu(g) * u) @ moe.experts.w2_weight[k_local].T)
                x = x + self.comm.allreduce(out)
            else:
                g, u = (h @ layer.mlp.gate_up_proj.weight.T).chunk(2, -1)
                x = x + self.comm.allreduce((torch.nn.functional.silu(g) * u) @ layer.mlp.down_proj.weight.T)
        x = rms_norm(x, m.norm.weight, eps)
        logits = self.comm.allgather_last(x @ self.lm_head.weight.T)
        return logits[..., : c["vocab_size"]]


def unsharded(folder):
    """(config, the whole TinyDecoder) with the tests' reference weights at one rank: the model the
    shards' forward passes are compared with."""
    import common
    ckpt = common.Checkpoint(folder)
    model = TinyDecoder(ckpt.config)
    weights = common.reference(ckpt, common.Layout(1, 0, 1, False))
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.copy_(torch.from_numpy(weights[name].copy()))
    return ckpt.config, model


def logits_both(full, sharded, config):
    """(got, want, max |diff|) of the sharded and the whole model on the same two token rows (the
    diff is inf when the shapes differ, so a wrong shape never passes)."""
    V = config["vocab_size"]
    tokens = torch.tensor([[1, 5, 99, 42, 7, 3, 77, 17], [0, 64, 63, 98, 2, 11, 50, 8]]) % V
    with torch.no_grad():
        want = full(tokens)
        got = sharded(tokens)
    diff = (got - want).abs().max().item() if got.shape == want.shape else float("inf")
    return got, want, diff
