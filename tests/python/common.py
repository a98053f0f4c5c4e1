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


def finish_mpi(comm, name, fails, tmp=None):
    """The end of an MPI test: every rank prints its failures, the ranks agree on the count, rank 0
    removes tmp and says the total; exits 1 when any rank failed."""
    import shutil
    comm.Barrier()
    if tmp is not None and comm.Get_rank() == 0:
        shutil.rmtree(tmp, ignore_errors=True)
    for f in fails:
        print("rank %d: FAIL: %s" % (comm.Get_rank(), f), flush=True)
    bad = comm.allreduce(len(fails))
    if comm.Get_rank() == 0:
        print("%s: %d ranks, %d failures" % (name, comm.Get_size(), bad))
    sys.exit(1 if bad else 0)


def fixtures():
    return os.environ.get("SL_FIXTURES", "fixtures")


def numeric_fixtures():
    return os.environ.get("SL_PY_FIXTURES", os.path.join(fixtures(), "..", "fixtures-python"))


# -------------------------------------------------------------------------------------------------
# safetensors, read independently

ST_DTYPES = {"F32": "<f4", "F16": "<f2", "BF16": "<u2", "F64": "<f8", "I64": "<i8", "I32": "<i4",
             "I16": "<i2", "I8": "i1", "U8": "u1", "BOOL": "u1", "F8_E4M3": "u1", "F8_E5M2": "u1",
             "F8_E8M0": "u1"}


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


def fsdp_rows(rows, shard, shards):
    """[lo, hi) of the rows shard `shard` of `shards` holds, as torch.chunk (FSDP's Shard(0)) cuts
    them: blocks of ceil(rows / shards), the last ones shorter or empty."""
    chunk = -(-rows // shards) if shards else rows
    lo = min(shard * chunk, rows)
    return lo, min(lo + chunk, rows)


def raw(t):
    """Bytes of a tensor (torch or numpy), for exact comparison."""
    if hasattr(t, "detach"):
        t = t.detach().cpu().contiguous()
        if str(t.dtype) == "torch.bfloat16":
            import torch
            t = t.view(torch.int16)
        t = t.numpy()
    return np.ascontiguousarray(t).tobytes()


# -------------------------------------------------------------------------------------------------
# dp x pp x tp layouts, pipeline stages, DeepSeek MLA (the torch.distributed worker tests)


class StageLayout:
    """One rank of a dp x pp x tp job, vLLM's order: tensor parallel fastest, then the pipeline,
    then data parallel (g = q*pp*tp + p*tp + r). Experts live in the stage group of dp*tp ranks:
    sliced over all of them without expert parallelism (moe rank q*tp + r), whole ones with it
    (expert-parallel rank q*tp + r). The fields reference() reads mean what they mean in Layout."""

    def __init__(self, world, rank, tp, pp=1, ep=False):
        assert world % (tp * pp) == 0, (world, tp, pp)
        self.tp, self.pp, self.dp = tp, pp, world // (tp * pp)
        self.r = rank % tp
        self.stage = (rank // tp) % pp
        self.dp_rank = rank // (tp * pp)
        self.ep = ep
        stage_rank, stage_size = self.dp_rank * tp + self.r, self.dp * tp
        self.moe_tp = 1 if ep else stage_size
        self.moe_r = 0 if ep else stage_rank
        self.ep_size = stage_size if ep else 1
        self.ep_rank = stage_rank if ep else 0


def pp_stages(layers, pp, partition=None):
    """[(start, end)] of every pipeline stage, as vLLM's get_pp_indices: `partition` (a list of
    counts) when given, else layers // pp each and one more for the layers % pp stages just
    before the last one."""
    if partition is not None:
        counts = list(partition)
    else:
        counts = [layers // pp] * pp
        for i in range(2, layers % pp + 2):
            counts[-i] += 1
    out, start = [], 0
    for n in counts:
        out.append((start, start + n))
        start += n
    assert start == layers, (layers, counts)
    return out


def stage_filter(full, config, lay, partition=None):
    """The part of a whole-model reference {name: array} stage lay.stage holds: its layers under
    their global index, the embedding on the first stage (and on the last when tied: the head uses
    it), the final norm and lm_head on the last."""
    start, end = pp_stages(config["num_hidden_layers"], lay.pp, partition)[lay.stage]
    first, last = lay.stage == 0, lay.stage == lay.pp - 1
    out = {}
    for name, a in full.items():
        if name.startswith("model.layers."):
            keep = start <= int(name.split(".")[2]) < end
        elif name.startswith("model.embed_tokens."):
            keep = first or (last and bool(config.get("tie_word_embeddings")))
        elif name.startswith("model.norm.") or name.startswith("lm_head."):
            keep = last
        else:
            keep = True
        if keep:
            out[name] = a
    return out


def reference_stage(ckpt, lay, partition=None):
    """reference() of a dp x pp x tp rank (StageLayout): the llama / mistral / qwen2 / mixtral
    families, only what its pipeline stage holds."""
    return stage_filter(reference(ckpt, lay), ckpt.config, lay, partition)


def _column(t, lay):
    n = t.shape[0] // lay.tp
    return t[lay.r * n:(lay.r + 1) * n]


def _row(t, lay):
    n = t.shape[1] // lay.tp
    return np.ascontiguousarray(t[:, lay.r * n:(lay.r + 1) * n])


def _merged(parts, lay):
    return np.concatenate([_column(p, lay) for p in parts])


def reference_deepseek(ckpt, lay, partition=None):
    """{vLLM name: array} a rank (StageLayout) holds of a DeepSeek-V2/V3 checkpoint, as vLLM's
    DeepseekV2ForCausalLM builds it. Attention (MLA): q_proj (no q LoRA) or q_b_proj column-parallel
    over the heads; q_a_proj and kv_a_proj_with_mqa replicated, concatenated into fused_qkv_a_proj
    (q rows first) when there is a q LoRA; kv_b_proj column-parallel (its rows are per head);
    o_proj row-parallel; the LoRA norms replicated. MLP: gate_up_proj / down_proj on the first
    first_k_dense_replace layers (and those off moe_layer_freq), else a replicated router,
    e_score_correction_bias with noaux_tc, routed experts stacked as in reference() (w1 = gate_proj,
    w3 = up_proj, w2 = down_proj) and shared experts as a dense MLP over the tensor-parallel group.
    MTP layers (index >= num_hidden_layers) are not loaded."""
    c = ckpt.config
    g = ckpt.get
    V = c["vocab_size"]
    q_lora = c.get("q_lora_rank") or 0
    E = c.get("n_routed_experts") or 0
    first_dense = c.get("first_k_dense_replace", 0)
    freq = c.get("moe_layer_freq", 1)
    out = {"model.embed_tokens.weight": vocab_slice(g("model.embed_tokens.weight"), V, lay),
           "model.norm.weight": g("model.norm.weight"),
           "lm_head.weight": vocab_slice(g("lm_head.weight"), V, lay)}
    for L in range(c["num_hidden_layers"]):
        p = "model.layers.%d." % L
        a = p + "self_attn."
        for n in ("input_layernorm.weight", "post_attention_layernorm.weight"):
            out[p + n] = g(p + n)
        if q_lora:
            out[a + "fused_qkv_a_proj.weight"] = np.concatenate(
                [g(a + "q_a_proj.weight"), g(a + "kv_a_proj_with_mqa.weight")])
            out[a + "q_a_layernorm.weight"] = g(a + "q_a_layernorm.weight")
            out[a + "q_b_proj.weight"] = _column(g(a + "q_b_proj.weight"), lay)
        else:
            out[a + "q_proj.weight"] = _column(g(a + "q_proj.weight"), lay)
            out[a + "kv_a_proj_with_mqa.weight"] = g(a + "kv_a_proj_with_mqa.weight")
        out[a + "kv_a_layernorm.weight"] = g(a + "kv_a_layernorm.weight")
        out[a + "kv_b_proj.weight"] = _column(g(a + "kv_b_proj.weight"), lay)
        out[a + "o_proj.weight"] = _row(g(a + "o_proj.weight"), lay)
        m = p + "mlp."
        if not (E > 0 and L >= first_dense and L % freq == 0):
            out[m + "gate_up_proj.weight"] = _merged([g(m + "gate_proj.weight"),
                                                      g(m + "up_proj.weight")], lay)
            out[m + "down_proj.weight"] = _row(g(m + "down_proj.weight"), lay)
            continue
        out[m + "gate.weight"] = g(m + "gate.weight")
        if c.get("topk_method") == "noaux_tc":
            out[m + "gate.e_score_correction_bias"] = g(m + "gate.e_score_correction_bias")
        ip = c["moe_intermediate_size"] // lay.moe_tp
        s = lay.moe_r * ip
        w13, w2 = [], []
        for x in local_experts(E, lay):
            e = m + "experts.%d." % x
            w13.append(np.concatenate([g(e + "gate_proj.weight")[s:s + ip],
                                       g(e + "up_proj.weight")[s:s + ip]]))
            w2.append(g(e + "down_proj.weight")[:, s:s + ip])
        out[m + "experts.w13_weight"] = np.stack(w13)
        out[m + "experts.w2_weight"] = np.ascontiguousarray(np.stack(w2))
        if c.get("n_shared_experts"):
            sh = m + "shared_experts."
            out[sh + "gate_up_proj.weight"] = _merged([g(sh + "gate_proj.weight"),
                                                       g(sh + "up_proj.weight")], lay)
            out[sh + "down_proj.weight"] = _row(g(sh + "down_proj.weight"), lay)
    return stage_filter(out, c, lay, partition)
