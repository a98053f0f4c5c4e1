"""STAND-IN for vllm.model_executor.models.deepseek_v2 (DeepseekV2/V3/V32ForCausalLM and
GlmMoeDsaForCausalLM, which vLLM builds from the same classes), from vLLM's model file.

Names: model.embed_tokens, model.layers.N.{input_layernorm, post_attention_layernorm,
self_attn.{fused_qkv_a_proj (MergedColumnParallelLinear [q_lora, kv_lora + rope], disable_tp),
q_a_layernorm, q_b_proj (column) | q_proj (column) and kv_a_proj_with_mqa (replicated) without a q
LoRA, kv_a_layernorm, kv_b_proj (column), o_proj (row), indexer}, mlp}, model.norm, lm_head.
The indexer (configs with index_topk, i.e. DeepSeek-V3.2 and GLM-5): wq_b (ReplicatedLinear
[index_n_heads * index_head_dim, q_lora]), wk_weights_proj (MergedColumnParallelLinear
[index_head_dim, index_n_heads] over hidden, disable_tp: wk is shard 0, weights_proj shard 1) and
k_norm (LayerNorm: float32 weight and bias); a layer has none when index_topk_pattern has 'S' at
its index, or, without a pattern, when max(L - index_skip_topk_offset + 1, 0) % index_topk_freq
!= 0 (defaults 2 and 1); a multi-token-prediction layer always has one. mlp: routed experts
(FusedMoE), gate (replicated [E, H]) with e_score_correction_bias (float32, no weight_loader)
when topk_method is noaux_tc (transformers' DeepseekV3Config default, which GLM-5's config.json
leaves out), shared_experts (gate_up_proj / down_proj) on layers >= first_k_dense_replace (every
moe_layer_freq-th), else a dense gate_up_proj / down_proj.

load_weights: skips rotary buffers, the MTP layers (model.layers.L for L >= num_hidden_layers) and
the indexer tensors of layers built without one; stacked mapping gate/up_proj -> gate_up_proj,
q_a_proj / kv_a_proj_with_mqa -> fused_qkv_a_proj, indexer wk / weights_proj -> wk_weights_proj;
experts through FusedMoE.make_expert_params_mapping; the rest by their weight_loader or
default_weight_loader."""

import torch

from vllm.config import get_current_vllm_config
from vllm.distributed import get_pp_group
from vllm.model_executor.layers.fused_moe import FusedMoE
from vllm.model_executor.layers.layernorm import LayerNorm, RMSNorm
from vllm.model_executor.layers.linear import (ColumnParallelLinear, MergedColumnParallelLinear,
                                               ReplicatedLinear, RowParallelLinear)
from vllm.model_executor.layers.vocab_parallel_embedding import ParallelLMHead, VocabParallelEmbedding
from vllm.model_executor.model_loader.weight_utils import default_weight_loader

from .llama import _get
from .utils import PPMissingLayer, is_pp_missing_parameter, make_layers


class DeepseekV2MLP(torch.nn.Module):
    def __init__(self, hidden_size, intermediate_size, prefix=""):
        super().__init__()
        self.gate_up_proj = MergedColumnParallelLinear(hidden_size, [intermediate_size] * 2, bias=False,
                                                       prefix=prefix + ".gate_up_proj")
        self.down_proj = RowParallelLinear(intermediate_size, hidden_size, bias=False,
                                           prefix=prefix + ".down_proj")


class DeepseekV2MoE(torch.nn.Module):
    def __init__(self, config, prefix=""):
        super().__init__()
        parallel = get_current_vllm_config().parallel_config
        E = config.n_routed_experts
        self.gate = ReplicatedLinear(config.hidden_size, E, bias=False, prefix=prefix + ".gate")
        if _get(config, "topk_method", "noaux_tc") == "noaux_tc":
            self.gate.e_score_correction_bias = torch.nn.Parameter(
                torch.empty(E, dtype=torch.float32), requires_grad=False)
        self.experts = FusedMoE(E, config.num_experts_per_tok, config.hidden_size,
                                config.moe_intermediate_size, prefix=prefix + ".experts",
                                num_expert_group=_get(config, "n_group"),
                                enable_eplb=parallel.enable_eplb,
                                num_redundant_experts=parallel.eplb_config.num_redundant_experts)
        shared = _get(config, "n_shared_experts", 0)
        if shared:
            self.shared_experts = DeepseekV2MLP(config.hidden_size, config.moe_intermediate_size * shared,
                                                prefix + ".shared_experts")


class Indexer(torch.nn.Module):
    def __init__(self, config, prefix=""):
        super().__init__()
        H, n, d = config.hidden_size, config.index_n_heads, config.index_head_dim
        self.wq_b = ReplicatedLinear(config.q_lora_rank, n * d, bias=False, prefix=prefix + ".wq_b")
        self.wk_weights_proj = MergedColumnParallelLinear(H, [d, n], bias=False, disable_tp=True,
                                                          prefix=prefix + ".wk_weights_proj")
        self.k_norm = LayerNorm(d, eps=1e-6)


def has_indexer(config, layer):
    """vLLM's DeepseekV2MLAAttention: whether layer builds an indexer."""
    if not hasattr(config, "index_topk"):
        return False
    if layer >= config.num_hidden_layers:
        return True
    pattern = _get(config, "index_topk_pattern")
    if pattern is None:
        offset = _get(config, "index_skip_topk_offset", 2)
        return max(layer - offset + 1, 0) % _get(config, "index_topk_freq", 1) == 0
    return not (0 <= layer < len(pattern) and pattern[layer] == "S")


class DeepseekV2MLAAttention(torch.nn.Module):
    def __init__(self, config, layer, prefix=""):
        super().__init__()
        H, heads = config.hidden_size, config.num_attention_heads
        nope, rope, v = config.qk_nope_head_dim, config.qk_rope_head_dim, config.v_head_dim
        q_lora, kv_lora = _get(config, "q_lora_rank"), config.kv_lora_rank
        eps = _get(config, "rms_norm_eps", 1e-6)
        if q_lora is not None:
            self.fused_qkv_a_proj = MergedColumnParallelLinear(H, [q_lora, kv_lora + rope], bias=False,
                                                               disable_tp=True,
                                                               prefix=prefix + ".fused_qkv_a_proj")
            self.q_a_layernorm = RMSNorm(q_lora, eps)
            self.q_b_proj = ColumnParallelLinear(q_lora, heads * (nope + rope), bias=False,
                                                 prefix=prefix + ".q_b_proj")
        else:
            self.kv_a_proj_with_mqa = ReplicatedLinear(H, kv_lora + rope, bias=False,
                                                       prefix=prefix + ".kv_a_proj_with_mqa")
            self.q_proj = ColumnParallelLinear(H, heads * (nope + rope), bias=False, prefix=prefix + ".q_proj")
        self.kv_a_layernorm = RMSNorm(kv_lora, eps)
        self.kv_b_proj = ColumnParallelLinear(kv_lora, heads * (nope + v), bias=False, prefix=prefix + ".kv_b_proj")
        self.o_proj = RowParallelLinear(heads * v, H, bias=False, prefix=prefix + ".o_proj")
        if has_indexer(config, layer):
            self.indexer = Indexer(config, prefix + ".indexer")


class DeepseekV2DecoderLayer(torch.nn.Module):
    def __init__(self, config, prefix=""):
        super().__init__()
        layer = int(prefix.rsplit(".", 1)[1])
        eps = _get(config, "rms_norm_eps", 1e-6)
        self.self_attn = DeepseekV2MLAAttention(config, layer, prefix + ".self_attn")
        freq = _get(config, "moe_layer_freq", 1)
        if _get(config, "n_routed_experts") is not None and layer >= config.first_k_dense_replace and \
                layer % freq == 0:
            self.mlp = DeepseekV2MoE(config, prefix + ".mlp")
        else:
            self.mlp = DeepseekV2MLP(config.hidden_size, config.intermediate_size, prefix + ".mlp")
        self.input_layernorm = RMSNorm(config.hidden_size, eps)
        self.post_attention_layernorm = RMSNorm(config.hidden_size, eps)


class DeepseekV2Model(torch.nn.Module):
    def __init__(self, config, prefix="model"):
        super().__init__()
        pp = get_pp_group()
        self.embed_tokens = VocabParallelEmbedding(config.vocab_size, config.hidden_size) \
            if pp.is_first_rank else PPMissingLayer()
        self.start_layer, self.end_layer, self.layers = make_layers(
            config.num_hidden_layers, lambda prefix: DeepseekV2DecoderLayer(config, prefix), prefix + ".layers")
        self.norm = RMSNorm(config.hidden_size, _get(config, "rms_norm_eps", 1e-6)) \
            if pp.is_last_rank else PPMissingLayer()


STACKED = [("gate_up_proj", "gate_proj", 0), ("gate_up_proj", "up_proj", 1),
           ("fused_qkv_a_proj", "q_a_proj", 0), ("fused_qkv_a_proj", "kv_a_proj_with_mqa", 1),
           ("wk_weights_proj", "wk", 0), ("wk_weights_proj", "weights_proj", 1)]


def spec_layer(config, name):
    """The MTP layer a checkpoint name belongs to, or None (vLLM's get_spec_layer_idx_from_weight_name)."""
    first = config.num_hidden_layers
    for i in range(_get(config, "num_nextn_predict_layers", 0) or 0):
        if name.startswith("model.layers.%d." % (first + i)):
            return first + i
    return None


def load_one(model, params, name, w, experts):
    """One checkpoint tensor through vLLM's rules (stacked mapping, experts, the rest); the name
    it loaded, or None when it belongs elsewhere (another stage, a non-local expert)."""
    for param_name, weight_name, shard in STACKED:
        if weight_name not in name:
            continue
        if "mlp.experts." in name and name not in params:
            continue
        mapped = name.replace(weight_name, param_name)
        if param_name == "fused_qkv_a_proj" and mapped not in params:
            continue
        if is_pp_missing_parameter(mapped, model):
            return None
        p = params[mapped]
        p.weight_loader(p, w, shard)
        return mapped
    is_expert = False
    for param_name, weight_name, expert_id, shard in experts:
        if weight_name not in name:
            continue
        is_expert = True
        mapped = name.replace(weight_name, param_name)
        if is_pp_missing_parameter(mapped, model):
            continue
        p = params[mapped]
        if p.weight_loader(p, w, mapped, shard_id=shard, expert_id=expert_id, return_success=True):
            return mapped
    if is_expert or is_pp_missing_parameter(name, model):
        return None
    p = params[name]
    getattr(p, "weight_loader", default_weight_loader)(p, w)
    return name


class DeepseekV2ForCausalLM(torch.nn.Module):
    def __init__(self, vllm_config, prefix=""):
        super().__init__()
        config = vllm_config.model_config.hf_config
        self.config = config
        self.tied = False
        self.num_redundant_experts = vllm_config.parallel_config.eplb_config.num_redundant_experts
        self.model = DeepseekV2Model(config)
        self.lm_head = ParallelLMHead(config.vocab_size, config.hidden_size) \
            if get_pp_group().is_last_rank else PPMissingLayer()

    def load_weights(self, weights):
        params = dict(self.named_parameters())
        experts = FusedMoE.make_expert_params_mapping("gate_proj", "down_proj", "up_proj",
                                                      self.config.n_routed_experts, self.num_redundant_experts)
        with_indexer = {n.rsplit(".indexer.", 1)[0] for n in params if ".indexer." in n}
        loaded = set()
        for name, w in weights:
            if "rotary_emb.inv_freq" in name or spec_layer(self.config, name) is not None:
                continue
            if ".indexer." in name and name.rsplit(".indexer.", 1)[0] not in with_indexer:
                continue   # a layer built without an indexer: its checkpoint tensors are dropped
            done = load_one(self, params, name, w, experts)
            if done is not None:
                loaded.add(done)
        return loaded


DeepseekV3ForCausalLM = DeepseekV2ForCausalLM
DeepseekV32ForCausalLM = DeepseekV2ForCausalLM
GlmMoeDsaForCausalLM = DeepseekV2ForCausalLM
