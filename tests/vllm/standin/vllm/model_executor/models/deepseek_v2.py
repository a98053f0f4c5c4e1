"""STAND-IN for vllm.model_executor.models.deepseek_v2 (DeepseekV2ForCausalLM, and
DeepseekV3ForCausalLM, the same class in vLLM).

Names (vLLM's DeepseekV2Model / DeepseekV2DecoderLayer / DeepseekV2MLAAttention): model.embed_tokens
(first stage), model.layers.N.{input_layernorm, post_attention_layernorm, self_attn.{...}, mlp},
model.norm and lm_head (last stage). Attention (MLA): with q_lora_rank, fused_qkv_a_proj
(MergedColumnParallelLinear of [q_lora_rank, kv_lora_rank + qk_rope_head_dim] with disable_tp:
whole on every rank, shard 0 = the checkpoint's q_a_proj, shard 1 = kv_a_proj_with_mqa),
q_a_layernorm, q_b_proj (ColumnParallelLinear); without it, q_proj (ColumnParallelLinear) and
kv_a_proj_with_mqa (ReplicatedLinear); then kv_a_layernorm, kv_b_proj (ColumnParallelLinear),
o_proj (RowParallelLinear). MLP: layers >= first_k_dense_replace (every moe_layer_freq-th) are
DeepseekV2MoE = {gate (ReplicatedLinear [E, H], no bias) with gate.e_score_correction_bias, a
float32 Parameter whatever the model dtype, when topk_method is noaux_tc; experts (FusedMoE,
expert groups n_group, EPLB and redundant experts from the parallel config); shared_experts
(DeepseekV2MLP of moe_intermediate_size * n_shared_experts)}; the others a DeepseekV2MLP
(gate_up_proj, down_proj).

Loading (DeepseekV2ForCausalLM.load_weights): rotary_emb.inv_freq and the MTP layers
(get_spec_layer_idx_from_weight_name: model.layers.{L + k}. for k < num_nextn_predict_layers)
skipped; stacked mapping (gate_up_proj, gate_proj, 0), (gate_up_proj, up_proj, 1), and with
q_lora_rank (fused_qkv_a_proj, q_a_proj, 0), (fused_qkv_a_proj, kv_a_proj_with_mqa, 1); an
expert's gate_proj/up_proj is left to the expert mapping (FusedMoE.make_expert_params_mapping
over the physical experts, redundant ones included), whose weight_loader(...,
return_success=True) says whether the expert is local; KV-cache scale names remapped; tensors
of other stages skipped; the rest to weight_loader or default_weight_loader.
"""

import torch

from vllm.attention import Attention
from vllm.attention.layer import maybe_remap_kv_scale_name
from vllm.config import get_current_vllm_config
from vllm.distributed import get_pp_group
from vllm.model_executor.layers.fused_moe import FusedMoE
from vllm.model_executor.layers.layernorm import RMSNorm
from vllm.model_executor.layers.linear import (ColumnParallelLinear, MergedColumnParallelLinear,
                                               ReplicatedLinear, RowParallelLinear)
from vllm.model_executor.layers.vocab_parallel_embedding import ParallelLMHead, VocabParallelEmbedding
from vllm.model_executor.model_loader.weight_utils import default_weight_loader

from .llama import _get
from .utils import PPMissingLayer, is_pp_missing_parameter, make_layers


class DeepseekV2MLP(torch.nn.Module):
    def __init__(self, hidden_size, intermediate_size, prefix=""):
        super().__init__()
        self.gate_up_proj = MergedColumnParallelLinear(hidden_size, [intermediate_size] * 2,
                                                       bias=False, prefix=prefix + ".gate_up_proj")
        self.down_proj = RowParallelLinear(intermediate_size, hidden_size, bias=False,
                                           prefix=prefix + ".down_proj")


class DeepseekV2MoE(torch.nn.Module):
    def __init__(self, config, prefix=""):
        super().__init__()
        parallel = get_current_vllm_config().parallel_config
        E, H = config.n_routed_experts, config.hidden_size
        self.gate = ReplicatedLinear(H, E, bias=False, prefix=prefix + ".gate")
        if _get(config, "topk_method") == "noaux_tc":
            self.gate.e_score_correction_bias = torch.nn.Parameter(
                torch.empty(E, dtype=torch.float32), requires_grad=False)
        else:
            self.gate.e_score_correction_bias = None
        self.experts = FusedMoE(E, config.num_experts_per_tok, H, config.moe_intermediate_size,
                                prefix=prefix + ".experts", num_expert_group=_get(config, "n_group", 1),
                                enable_eplb=parallel.enable_eplb,
                                num_redundant_experts=parallel.eplb_config.num_redundant_experts)
        shared = _get(config, "n_shared_experts")
        self.shared_experts = DeepseekV2MLP(H, config.moe_intermediate_size * shared,
                                            prefix + ".shared_experts") if shared else None


class DeepseekV2MLAAttention(torch.nn.Module):
    def __init__(self, config, quant_config=None, prefix=""):
        super().__init__()
        H, heads = config.hidden_size, config.num_attention_heads
        q_lora, kv_lora = _get(config, "q_lora_rank"), config.kv_lora_rank
        nope, rope, v = config.qk_nope_head_dim, config.qk_rope_head_dim, config.v_head_dim
        self.qk_head_dim = nope + rope
        if q_lora is not None:
            self.fused_qkv_a_proj = MergedColumnParallelLinear(
                H, [q_lora, kv_lora + rope], bias=False, prefix=prefix + ".fused_qkv_a_proj",
                disable_tp=True)
            self.q_a_layernorm = RMSNorm(q_lora, config.rms_norm_eps)
            self.q_b_proj = ColumnParallelLinear(q_lora, heads * self.qk_head_dim, bias=False,
                                                 prefix=prefix + ".q_b_proj")
        else:
            self.kv_a_proj_with_mqa = ReplicatedLinear(H, kv_lora + rope, bias=False,
                                                       prefix=prefix + ".kv_a_proj_with_mqa")
            self.q_proj = ColumnParallelLinear(H, heads * self.qk_head_dim, bias=False,
                                               prefix=prefix + ".q_proj")
        self.kv_a_layernorm = RMSNorm(kv_lora, config.rms_norm_eps)
        self.kv_b_proj = ColumnParallelLinear(kv_lora, heads * (nope + v), bias=False,
                                              prefix=prefix + ".kv_b_proj")
        self.o_proj = RowParallelLinear(heads * v, H, bias=False, prefix=prefix + ".o_proj")
        local = self.kv_b_proj.weight.shape[0] // (nope + v)
        self.attn = Attention(local, self.qk_head_dim, self.qk_head_dim ** -0.5, num_kv_heads=local,
                              quant_config=quant_config, prefix=prefix + ".attn")


class DeepseekV2DecoderLayer(torch.nn.Module):
    def __init__(self, config, quant_config=None, prefix=""):
        super().__init__()
        index = int(prefix.rsplit(".", 1)[1])
        self.self_attn = DeepseekV2MLAAttention(config, quant_config, prefix + ".self_attn")
        moe = _get(config, "n_routed_experts") is not None and \
            index >= _get(config, "first_k_dense_replace", 0) and \
            index % _get(config, "moe_layer_freq", 1) == 0
        self.mlp = DeepseekV2MoE(config, prefix + ".mlp") if moe else \
            DeepseekV2MLP(config.hidden_size, config.intermediate_size, prefix + ".mlp")
        self.input_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.post_attention_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)


class DeepseekV2Model(torch.nn.Module):
    def __init__(self, config, quant_config=None, prefix="model"):
        super().__init__()
        pp = get_pp_group()
        self.embed_tokens = VocabParallelEmbedding(config.vocab_size, config.hidden_size) \
            if pp.is_first_rank else PPMissingLayer()
        self.start_layer, self.end_layer, self.layers = make_layers(
            config.num_hidden_layers,
            lambda prefix: DeepseekV2DecoderLayer(config, quant_config, prefix), prefix + ".layers")
        self.norm = RMSNorm(config.hidden_size, config.rms_norm_eps) if pp.is_last_rank \
            else PPMissingLayer()


def get_spec_layer_idx_from_weight_name(config, name):
    n = _get(config, "num_nextn_predict_layers", 0)
    for i in range(n):
        if name.startswith("model.layers.%d." % (config.num_hidden_layers + i)):
            return config.num_hidden_layers + i
    return None


class DeepseekV2ForCausalLM(torch.nn.Module):
    def __init__(self, vllm_config, prefix=""):
        super().__init__()
        config = vllm_config.model_config.hf_config
        self.config = config
        self.fuse_qkv_a_proj = _get(config, "q_lora_rank") is not None
        self.model = DeepseekV2Model(config, vllm_config.model_config.quantization)
        self.lm_head = ParallelLMHead(config.vocab_size, config.hidden_size) \
            if get_pp_group().is_last_rank else PPMissingLayer()
        # Read while the model is built: vLLM 0.10.2-0.13 leave the current config unset later.
        self.num_redundant_experts = vllm_config.parallel_config.eplb_config.num_redundant_experts

    def load_weights(self, weights):
        stacked = [("gate_up_proj", "gate_proj", 0), ("gate_up_proj", "up_proj", 1)]
        if self.fuse_qkv_a_proj:
            stacked += [("fused_qkv_a_proj", "q_a_proj", 0),
                        ("fused_qkv_a_proj", "kv_a_proj_with_mqa", 1)]
        experts = FusedMoE.make_expert_params_mapping(
            "gate_proj", "down_proj", "up_proj", _get(self.config, "n_routed_experts", 0) or 0,
            self.num_redundant_experts)
        params = dict(self.named_parameters())
        loaded = set()
        for name, w in weights:
            if "rotary_emb.inv_freq" in name:
                continue
            if get_spec_layer_idx_from_weight_name(self.config, name) is not None:
                continue
            for param_name, weight_name, shard_id in stacked:
                if weight_name not in name:
                    continue
                if "mlp.experts." in name and name not in params:
                    continue
                mapped = name.replace(weight_name, param_name)
                if param_name == "fused_qkv_a_proj" and mapped not in params:
                    continue
                name = mapped
                if name.endswith(".bias") and name not in params:
                    continue
                if is_pp_missing_parameter(name, self):
                    continue
                p = params[name]
                p.weight_loader(p, w, shard_id)
                break
            else:
                is_expert = False
                for param_name, weight_name, expert_id, shard_id in experts:
                    if weight_name not in name:
                        continue
                    is_expert = True
                    mapped = name.replace(weight_name, param_name)
                    if is_pp_missing_parameter(mapped, self):
                        continue
                    p = params[mapped]
                    if p.weight_loader(p, w, mapped, shard_id=shard_id, expert_id=expert_id,
                                       return_success=True):
                        name = mapped
                        break
                else:
                    if is_expert:
                        continue
                    if name.endswith(".bias") and name not in params:
                        continue
                    name = maybe_remap_kv_scale_name(name, params)
                    if name is None or is_pp_missing_parameter(name, self):
                        continue
                    p = params[name]
                    getattr(p, "weight_loader", default_weight_loader)(p, w)
            loaded.add(name)
        return loaded


class DeepseekV3ForCausalLM(DeepseekV2ForCausalLM):
    pass
