"""STAND-IN for vllm.model_executor.models.deepseek_v4 (DeepseekV4ForCausalLM), from vLLM's model file
and layers/deepseek_v4_attention.py, layers/deepseek_compressor.py, layers/fused_moe/router/
norm_gate_linear.py.

Names: model.embed_tokens (first stage), model.hc_head_fn [hc, hc*H], hc_head_base [hc],
hc_head_scale [1] (float32, on every stage), model.layers.N.{attn_norm, hc_attn_fn/base/scale,
hc_ffn_fn/base/scale (float32), attn.{attn_sink [max(heads/tp, 64)] float32 filled with -inf,
fused_wqa_wkv (MergedColumnParallelLinear [q_lora, head_dim], disable_tp), q_norm, wq_b (column),
kv_norm, wo_a (column, o_groups * o_lora rows), wo_b (row), indexer (compress ratio 4: wq_b
ReplicatedLinear, weights_proj ReplicatedLinear unquantized, k_norm LayerNorm (float32; no
checkpoint tensor: vLLM keeps its initial ones and zeros), compressor), mla_attn}, ffn.{norm_gate.{norm,
gate (ReplicatedLinear [E, H]), tid2eid [V, K] int32 (layers < num_hash_layers) or
e_score_correction_bias [E] float32 (noaux_tc)}, shared_experts.{gate_up_proj, down_proj}, experts
(FusedMoE)}}, model.norm, lm_head (last stage). A compressor (compress ratio r > 1; the indexer's
always 4): ape [r, c*d] float32, fused_wkv_wgate (MergedColumnParallelLinear [c*d, c*d] over H,
disable_tp, unquantized), norm [d]; c = 2 when r == 4. mla_attn (vLLM's
DeepseekV4MultiHeadLatentAttentionWrapper) holds the attention's compressor and, as vLLM's does,
registers the attention's modules again (fused_wqa_wkv, q_norm, wq_b, kv_norm, wo_a, wo_b,
indexer) and its inner mla_attn the attention sink: one Parameter under several names.
Linear layers are block fp8 (DeepseekV4FP8Config from config.json's quantization_config and
expert_dtype: layers/quantization/fp8.py).

load_weights: the checkpoint names mapped as vLLM's WeightsMapper maps them (prefixes layers. ->
model.layers., embed. -> model.embed., norm. -> model.norm., hc_head -> model.hc_head, mtp. ->
model.mtp.; X.scale -> X.weight_scale_inv, but experts.N.wK.scale -> .weight_scale with FP4
experts; suffixes head.weight -> lm_head.weight, embed.weight -> embed_tokens.weight,
.ffn_norm.weight -> .ffn.norm_gate.norm.weight, .ffn.gate.weight -> .ffn.norm_gate.gate.weight,
.ffn.gate.bias -> .ffn.norm_gate.e_score_correction_bias, .ffn.gate.tid2eid ->
.ffn.norm_gate.tid2eid; substrings .attn.compressor. -> .attn.mla_attn.compressor.,
.shared_experts.w2 -> .shared_experts.down_proj), mtp. skipped; then the stacked mapping (w1/w3 ->
gate_up_proj, attn.wq_a/attn.wkv -> attn.fused_wqa_wkv, compressor.wkv/wgate ->
compressor.fused_wkv_wgate; experts excepted), the experts through FusedMoE's mapping, attn_sink
into the leading heads/tp slots of the rank's heads, the rest by weight_loader or
default_weight_loader (tid2eid's int64 converted to int32 by copy_)."""

import re

import torch

from vllm.distributed import get_pp_group, get_tensor_model_parallel_rank, get_tensor_model_parallel_world_size
from vllm.config import get_current_vllm_config
from vllm.model_executor.layers.fused_moe import FusedMoE
from vllm.model_executor.layers.layernorm import LayerNorm, RMSNorm
from vllm.model_executor.layers.linear import (ColumnParallelLinear, MergedColumnParallelLinear,
                                               ReplicatedLinear, RowParallelLinear)
from vllm.model_executor.layers.quantization.fp8 import DeepseekV4FP8Config
from vllm.model_executor.layers.vocab_parallel_embedding import ParallelLMHead, VocabParallelEmbedding
from vllm.model_executor.model_loader.weight_utils import default_weight_loader

from .llama import _get
from .utils import PPMissingLayer, is_pp_missing_parameter, make_layers


def _f32(*shape, fill=None):
    t = torch.empty(shape, dtype=torch.float32) if fill is None else torch.full(shape, fill, dtype=torch.float32)
    return torch.nn.Parameter(t, requires_grad=False)


class DeepseekCompressor(torch.nn.Module):
    def __init__(self, config, ratio, head_dim, prefix=""):
        super().__init__()
        c = 2 if ratio == 4 else 1
        self.ape = _f32(ratio, c * head_dim)
        self.fused_wkv_wgate = MergedColumnParallelLinear(config.hidden_size, [c * head_dim] * 2, bias=False,
                                                          disable_tp=True, prefix=prefix + ".fused_wkv_wgate")
        self.norm = RMSNorm(head_dim, _get(config, "rms_norm_eps", 1e-6))


class DeepseekV4Indexer(torch.nn.Module):
    def __init__(self, config, quant_config, prefix=""):
        super().__init__()
        n, d = config.index_n_heads, config.index_head_dim
        self.wq_b = ReplicatedLinear(config.q_lora_rank, n * d, bias=False, quant_config=quant_config,
                                     prefix=prefix + ".wq_b")
        self.weights_proj = ReplicatedLinear(config.hidden_size, n, bias=False, prefix=prefix + ".weights_proj")
        self.k_norm = LayerNorm(d, eps=1e-6)
        self.compressor = DeepseekCompressor(config, 4, d, prefix + ".compressor")


class DeepseekV4MLAAttention(torch.nn.Module):
    """vLLM's inner attention: it keeps the (padded) attention sink and the indexer."""

    def __init__(self, attn_sink, indexer):
        super().__init__()
        self.attn_sink = attn_sink
        self.indexer = indexer


class DeepseekV4MultiHeadLatentAttentionWrapper(torch.nn.Module):
    def __init__(self, attn, config, ratio, prefix=""):
        super().__init__()
        for name in ("fused_wqa_wkv", "q_norm", "wq_b", "kv_norm", "wo_a", "wo_b", "indexer"):
            setattr(self, name, getattr(attn, name))
        self.mla_attn = DeepseekV4MLAAttention(attn.attn_sink, attn.indexer)
        self.compressor = DeepseekCompressor(config, ratio, config.head_dim, prefix + ".compressor") \
            if ratio > 1 else None


class DeepseekV4Attention(torch.nn.Module):
    def __init__(self, config, quant_config, layer, prefix=""):
        super().__init__()
        tp = get_tensor_model_parallel_world_size()
        H, heads, d = config.hidden_size, config.num_attention_heads, config.head_dim
        ql, ol, g = config.q_lora_rank, config.o_lora_rank, config.o_groups
        eps = _get(config, "rms_norm_eps", 1e-6)
        ratio = max(1, config.compress_ratios[layer]) if layer < config.num_hidden_layers else 1
        self.attn_sink = _f32(max(heads // tp, 64), fill=-float("inf"))
        self.fused_wqa_wkv = MergedColumnParallelLinear(H, [ql, d], bias=False, quant_config=quant_config,
                                                        disable_tp=True, prefix=prefix + ".fused_wqa_wkv")
        self.q_norm = RMSNorm(ql, eps)
        self.wq_b = ColumnParallelLinear(ql, heads * d, bias=False, quant_config=quant_config,
                                         prefix=prefix + ".wq_b")
        self.kv_norm = RMSNorm(d, eps)
        self.wo_a = ColumnParallelLinear(heads * d // g, g * ol, bias=False, quant_config=quant_config,
                                         prefix=prefix + ".wo_a")
        self.wo_b = RowParallelLinear(g * ol, H, bias=False, quant_config=quant_config, prefix=prefix + ".wo_b")
        self.indexer = DeepseekV4Indexer(config, quant_config, prefix + ".indexer") if ratio == 4 else None
        self.mla_attn = DeepseekV4MultiHeadLatentAttentionWrapper(self, config, ratio, prefix + ".mla_attn")


class NormGateLinear(torch.nn.Module):
    def __init__(self, config, layer, prefix=""):
        super().__init__()
        E = config.n_routed_experts
        self.norm = RMSNorm(config.hidden_size, _get(config, "rms_norm_eps", 1e-6))
        self.gate = ReplicatedLinear(config.hidden_size, E, bias=False, prefix=prefix + ".gate")
        if layer < _get(config, "num_hash_layers", 0):
            self.tid2eid = torch.nn.Parameter(
                torch.randint(0, E, (config.vocab_size, config.num_experts_per_tok), dtype=torch.int32),
                requires_grad=False)
        elif _get(config, "topk_method") == "noaux_tc":
            self.e_score_correction_bias = _f32(E)


class DeepseekV4MLP(torch.nn.Module):
    def __init__(self, hidden, inter, quant_config, prefix=""):
        super().__init__()
        self.gate_up_proj = MergedColumnParallelLinear(hidden, [inter] * 2, bias=False, quant_config=quant_config,
                                                       prefix=prefix + ".gate_up_proj")
        self.down_proj = RowParallelLinear(inter, hidden, bias=False, quant_config=quant_config,
                                           prefix=prefix + ".down_proj")


class DeepseekV4MoE(torch.nn.Module):
    def __init__(self, config, quant_config, layer, prefix=""):
        super().__init__()
        parallel = get_current_vllm_config().parallel_config
        self.norm_gate = NormGateLinear(config, layer, prefix + ".norm_gate")
        shared = _get(config, "n_shared_experts")
        if shared is not None:
            self.shared_experts = DeepseekV4MLP(config.hidden_size, config.moe_intermediate_size * shared,
                                                quant_config, prefix + ".shared_experts")
        self.experts = FusedMoE(config.n_routed_experts, config.num_experts_per_tok, config.hidden_size,
                                config.moe_intermediate_size, quant_config=quant_config,
                                prefix=prefix + ".experts", num_expert_group=1,
                                enable_eplb=parallel.enable_eplb,
                                num_redundant_experts=parallel.eplb_config.num_redundant_experts)


class DeepseekV4DecoderLayer(torch.nn.Module):
    def __init__(self, config, quant_config, prefix=""):
        super().__init__()
        layer = int(prefix.rsplit(".", 1)[1])
        hc, H = config.hc_mult, config.hidden_size
        mix = (2 + hc) * hc
        self.attn = DeepseekV4Attention(config, quant_config, layer, prefix + ".attn")
        self.ffn = DeepseekV4MoE(config, quant_config, layer, prefix + ".ffn")
        self.attn_norm = RMSNorm(H, _get(config, "rms_norm_eps", 1e-6))
        for stage in ("attn", "ffn"):
            setattr(self, "hc_%s_fn" % stage, _f32(mix, hc * H))
            setattr(self, "hc_%s_base" % stage, _f32(mix))
            setattr(self, "hc_%s_scale" % stage, _f32(3))


class DeepseekV4Model(torch.nn.Module):
    def __init__(self, config, quant_config, prefix="model"):
        super().__init__()
        pp = get_pp_group()
        hc, H = config.hc_mult, config.hidden_size
        self.embed_tokens = VocabParallelEmbedding(config.vocab_size, H) if pp.is_first_rank else PPMissingLayer()
        self.start_layer, self.end_layer, self.layers = make_layers(
            config.num_hidden_layers, lambda prefix: DeepseekV4DecoderLayer(config, quant_config, prefix),
            prefix + ".layers")
        self.norm = RMSNorm(H, _get(config, "rms_norm_eps", 1e-6)) if pp.is_last_rank else PPMissingLayer()
        self.hc_head_fn = _f32(hc, hc * H)
        self.hc_head_base = _f32(hc)
        self.hc_head_scale = _f32(1)


def checkpoint_to_vllm(name, fp4):
    """vLLM's hf_to_vllm_mapper for DeepSeek-V4 (see the module); None for the skipped mtp. names."""
    for old, new in (("layers.", "model.layers."), ("embed.", "model.embed."), ("norm.", "model.norm."),
                     ("hc_head", "model.hc_head"), ("mtp.", "model.mtp.")):
        if name.startswith(old):
            name = new + name[len(old):]
            break
    if fp4 and re.search(r"\.experts\.\d+\.w[123]\.scale$", name):
        name = name[:-len(".scale")] + ".weight_scale"
    elif name.endswith(".scale"):
        name = name[:-len(".scale")] + ".weight_scale_inv"
    for old, new in (("head.weight", "lm_head.weight"), ("embed.weight", "embed_tokens.weight"),
                     (".ffn_norm.weight", ".ffn.norm_gate.norm.weight"),
                     (".ffn.gate.weight", ".ffn.norm_gate.gate.weight"),
                     (".ffn.gate.bias", ".ffn.norm_gate.e_score_correction_bias"),
                     (".ffn.gate.tid2eid", ".ffn.norm_gate.tid2eid")):
        if name.endswith(old):
            name = name[:-len(old)] + new
            break
    name = name.replace(".attn.compressor.", ".attn.mla_attn.compressor.")
    name = name.replace(".shared_experts.w2", ".shared_experts.down_proj")
    return None if "mtp." in name else name


STACKED = [("gate_up_proj", "w1", 0), ("gate_up_proj", "w3", 1),
           ("attn.fused_wqa_wkv", "attn.wq_a", 0), ("attn.fused_wqa_wkv", "attn.wkv", 1),
           ("compressor.fused_wkv_wgate", "compressor.wkv", 0), ("compressor.fused_wkv_wgate", "compressor.wgate", 1)]


class DeepseekV4ForCausalLM(torch.nn.Module):
    def __init__(self, vllm_config, prefix=""):
        super().__init__()
        config = vllm_config.model_config.hf_config
        self.config = config
        self.tied = False
        self.num_redundant_experts = vllm_config.parallel_config.eplb_config.num_redundant_experts
        q = config.quantization_config
        self.quant_config = DeepseekV4FP8Config(q.weight_block_size, _get(config, "expert_dtype", "fp4"))
        self.model = DeepseekV4Model(config, self.quant_config)
        self.lm_head = ParallelLMHead(config.vocab_size, config.hidden_size) \
            if get_pp_group().is_last_rank else PPMissingLayer()

    def _one(self, params, experts, name, w):
        for param_name, weight_name, shard in STACKED:
            if ".experts." in name or weight_name not in name:
                continue
            name = name.replace(weight_name, param_name)
            if is_pp_missing_parameter(name, self):
                return None
            p = params[name]
            p.weight_loader(p, w, shard)
            return name
        if ".experts." in name:
            for param_name, weight_name, expert_id, shard in experts:
                if weight_name not in name:
                    continue
                mapped = name.replace(weight_name, param_name)
                if is_pp_missing_parameter(mapped, self):
                    continue
                p = params[mapped]
                if p.weight_loader(p, w, mapped, shard_id=shard, expert_id=expert_id, return_success=True):
                    return mapped
            return None
        if is_pp_missing_parameter(name, self):
            return None
        if "attn_sink" in name:   # the rank's heads into the leading slots of the padded sink
            n = self.config.num_attention_heads // get_tensor_model_parallel_world_size()
            r = get_tensor_model_parallel_rank()
            params[name].data[:n].copy_(w[r * n:(r + 1) * n])
            return name
        p = params[name]
        getattr(p, "weight_loader", default_weight_loader)(p, w)
        return name

    def load_weights(self, weights):
        params = dict(self.named_parameters())
        experts = FusedMoE.make_expert_params_mapping("w1", "w2", "w3", self.config.n_routed_experts,
                                                      self.num_redundant_experts)
        fp4 = self.quant_config.expert_dtype == "fp4"
        loaded = set()
        for name, w in weights:
            mapped = checkpoint_to_vllm(name, fp4)
            if mapped is None:
                continue
            done = self._one(params, experts, mapped, w)
            if done is not None:
                loaded.add(done)
        return loaded
