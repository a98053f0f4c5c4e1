"""common.py -- helpers of the Python tests: environment, an independent reference of what each
rank holds, plain-torch modules built from a plan.

The reference reads the safetensors files with its own parser (8-byte length, JSON header, data)
and applies vLLM's slicing rules written out here (not the C code's plan): vocabulary padded to a
multiple of 64 and split in equal parts, column/row splits, qkv with GQA replication
(tp > kv heads: each kv head on tp/kv ranks), gate_up fused, experts stacked as w13 [E, 2I, H] /
w2 [E, H, I], sharded over dp*tp ranks without expert parallelism, whole experts per rank with it
(linear placement: the first E % ep ranks one more). Global rank = dp_rank*tp + tp_rank (pp 1).
"""

import json
import os
import struct
import sys

import numpy as np

SOURCE = os.environ.get("SL_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(SOURCE, "python"))


def skip(msg):
    print("SKIP: " + msg)
    sys.exit(77)


def need(modules):
    for m in modules:
        try:
            __import__(m)
        except ImportError:
            skip("%s is not installed for %s (Debian: python3-%s)" % (m, sys.executable, m))


def fixtures():
    return os.environ.get("SL_FIXTURES", "fixtures")


def numeric_fixtures():
    return os.environ.get("SL_PY_FIXTURES", os.path.join(fixtures(), "..", "fixtures-python"))


# -------------------------------------------------------------------------------------------------
# safetensors, read independently

ST_DTYPES = {"F32": "<f4", "F16": "<f2", "BF16": "<u2", "F64": "<f8", "I64": "<i8", "I32": "<i4",
             "I16": "<i2", "I8": "i1", "U8": "u1", "BOOL": "u1", "F8_E4M3": "u1", "F8_E5M2": "u1"}


class Checkpoint:
    """Every tensor of a model folder as numpy arrays (raw dtypes for BF16/F8)."""

    def __init__(self, folder):
        self.folder = folder
        self.tensors = {}
        self.config = json.load(open(os.path.join(folder, "config.json")))
        for f in sorted(os.listdir(folder)):
            if f.endswith(".safetensors"):
                self._read(os.path.join(folder, f))

    def _read(self, path):
        data = open(path, "rb").read()
        (n,) = struct.unpack("<Q", data[:8])
        header = json.loads(data[8:8 + n])
        base = 8 + n
        for name, info in header.items():
            if name == "__metadata__":
                continue
            a, b = info["data_offsets"]
            arr = np.frombuffer(data, dtype=ST_DTYPES[info["dtype"]], count=(b - a) //
                                np.dtype(ST_DTYPES[info["dtype"]]).itemsize, offset=base + a)
            self.tensors[name] = (info["dtype"], arr.reshape(info["shape"]))

    def get(self, name):
        return self.tensors[name][1]


# -------------------------------------------------------------------------------------------------
# vLLM slicing rules


class Layout:
    def __init__(self, world, rank, tp, ep=False):
        self.tp = tp
        self.dp = world // tp
        self.r = rank % tp
        self.dp_rank = rank // tp
        self.ep = ep
        self.moe_tp = 1 if ep else world
        self.moe_r = 0 if ep else rank
        self.ep_size = world if ep else 1
        self.ep_rank = rank if ep else 0


def vocab_slice(t, vocab, lay):
    vp = -(-vocab // 64) * 64
    per = vp // lay.tp
    a = min(vocab, lay.r * per)
    b = min(vocab, (lay.r + 1) * per)
    out = np.zeros((per,) + t.shape[1:], t.dtype)
    out[:b - a] = t[a:b]
    return out


def local_experts(n, lay):
    if not lay.ep:
        return list(range(n))
    base, rem = divmod(n, lay.ep_size)
    e = lay.ep_rank
    start = e * base + min(e, rem)
    return list(range(start, start + base + (1 if e < rem else 0)))


def reference(ckpt, lay):
    """{vLLM name: numpy array} this rank holds (llama / mistral / qwen2 / mixtral families)."""
    c = ckpt.config
    g = ckpt.get
    H, Hq, Hkv = c["hidden_size"], c["num_attention_heads"], c["num_key_value_heads"]
    d = c.get("head_dim") or H // Hq
    T, r = lay.tp, lay.r
    V = c["vocab_size"]
    out = {"model.embed_tokens.weight": vocab_slice(g("model.embed_tokens.weight"), V, lay),
           "model.norm.weight": g("model.norm.weight")}
    if c.get("tie_word_embeddings"):
        out["lm_head.weight"] = out["model.embed_tokens.weight"]
    else:
        out["lm_head.weight"] = vocab_slice(g("lm_head.weight"), V, lay)
    if T >= Hkv:
        kvl, R = 1, T // Hkv
    else:
        kvl, R = Hkv // T, 1
    qn, kn = (Hq // T) * d, kvl * d
    for L in range(c["num_hidden_layers"]):
        p = "model.layers.%d." % L
        for n in ("input_layernorm.weight", "post_attention_layernorm.weight"):
            out[p + n] = g(p + n)
        a = p + "self_attn."
        for kind in ("weight", "bias"):
            if a + "q_proj." + kind not in ckpt.tensors:
                continue
            q = g(a + "q_proj." + kind)[r * qn:(r + 1) * qn]
            k = g(a + "k_proj." + kind)[(r // R) * kn:(r // R + 1) * kn]
            v = g(a + "v_proj." + kind)[(r // R) * kn:(r // R + 1) * kn]
            out[a + "qkv_proj." + kind] = np.concatenate([q, k, v])
        o = g(a + "o_proj.weight")
        w = o.shape[1] // T
        out[a + "o_proj.weight"] = np.ascontiguousarray(o[:, r * w:(r + 1) * w])
        if p + "mlp.gate_proj.weight" in ckpt.tensors:
            gate, up, down = (g(p + "mlp.%s_proj.weight" % x) for x in ("gate", "up", "down"))
            i = gate.shape[0] // T
            out[p + "mlp.gate_up_proj.weight"] = np.concatenate([gate[r * i:(r + 1) * i],
                                                                 up[r * i:(r + 1) * i]])
            out[p + "mlp.down_proj.weight"] = np.ascontiguousarray(down[:, r * i:(r + 1) * i])
        m = p + "block_sparse_moe."
        if m + "gate.weight" in ckpt.tensors:
            out[m + "gate.weight"] = g(m + "gate.weight")
            E = c["num_local_experts"]
            I = c["intermediate_size"]
            ip = I // lay.moe_tp
            s = lay.moe_r * ip
            w13, w2 = [], []
            for x in local_experts(E, lay):
                e = m + "experts.%d." % x
                w13.append(np.concatenate([g(e + "w1.weight")[s:s + ip], g(e + "w3.weight")[s:s + ip]]))
                w2.append(g(e + "w2.weight")[:, s:s + ip])
            out[m + "experts.w13_weight"] = np.stack(w13)
            out[m + "experts.w2_weight"] = np.ascontiguousarray(np.stack(w2))
    return out


# -------------------------------------------------------------------------------------------------
# torch modules from a plan


def module_from_plan(plan, dtype_of, device="cpu"):
    """An nn.Module whose parameters sit at the plan's dotted names (torch.empty: untouched)."""
    import torch
    root = torch.nn.Module()
    for p in plan:
        if p.alias_of is not None:
            continue
        parts = p.name.split(".")
        mod = root
        for part in parts[:-1]:
            if not hasattr(mod, part):
                mod.add_module(part, torch.nn.Module())
            mod = getattr(mod, part)
        t = torch.empty(p.shape, dtype=dtype_of(p.dtype), device=device)
        mod.register_parameter(parts[-1], torch.nn.Parameter(t, requires_grad=False))
    return root


def raw(t):
    """Bytes of a tensor (torch or numpy), for exact comparison."""
    if hasattr(t, "detach"):
        t = t.detach().cpu().contiguous()
        if str(t.dtype) == "torch.bfloat16":
            import torch
            t = t.view(torch.int16)
        t = t.numpy()
    return np.ascontiguousarray(t).tobytes()
