"""STAND-IN for vllm.model_executor.models.minimax_m2 (MiniMaxM2ForCausalLM), from vLLM's model file,
with MiniMaxText01RMSNormTP of vLLM's layers/mamba/linear_attn.py.

Names: model.embed_tokens, model.layers.N.{input_layernorm, post_attention_layernorm,
self_attn.{qkv_proj, o_proj, q_norm, k_norm}, block_sparse_moe.{gate, e_score_correction_bias,
experts}}, model.norm, lm_head. q_norm and k_norm are RMS norms over every head
(MiniMaxText01RMSNormTP): a weight of hidden / weight_shard_world_size elements whose
weight_loader takes contiguous part weight_shard_rank of the checkpoint's; q_norm over the q heads
is split over tp, k_norm over the key/value heads too unless they are fewer than tp, then into
Hkv parts, rank r taking part r // (tp / Hkv) (the kv head its k rows are). The router is a
ReplicatedLinear [E, H] of params_dtype float32 (a BF16 checkpoint's is converted by copy_), the
score-correction bias (use_routing_bias) a float32 parameter whose weight_loader converts;
experts a FusedMoE with the checkpoint's experts.X.w1/w2/w3. load_weights: q/k/v_proj ->
qkv_proj, the experts, the rest by weight_loader; the MTP modules' layers (num_mtp_modules after
the last) are skipped."""

import torch

from vllm.config import get_current_vllm_config
from vllm.distributed import get_tensor_model_parallel_rank, get_tensor_model_parallel_world_size
from vllm.model_executor.layers.fused_moe import FusedMoE
from vllm.model_executor.layers.linear import ReplicatedLinear

from .llama import LlamaAttention, LlamaForCausalLM, LlamaModel, _get


class MiniMaxText01RMSNormTP(torch.nn.Module):
    def __init__(self, hidden_size, eps=1e-6, weight_shard_world_size=None, weight_shard_rank=None):
        super().__init__()
        self.shard_world = weight_shard_world_size or get_tensor_model_parallel_world_size()
        self.shard_rank = get_tensor_model_parallel_rank() if weight_shard_rank is None else weight_shard_rank
        self.weight = torch.nn.Parameter(torch.ones(hidden_size // self.shard_world), requires_grad=False)
        self.weight.weight_loader = self.weight_loader

    def weight_loader(self, param, loaded_weight):
        n = loaded_weight.shape[0] // self.shard_world
        param.data.copy_(loaded_weight[self.shard_rank * n:(self.shard_rank + 1) * n])


class MiniMaxM2Attention(LlamaAttention):
    def __init__(self, config, quant_config=None, prefix=""):
        super().__init__(config, quant_config, prefix)
        tp = get_tensor_model_parallel_world_size()
        heads, kv = config.num_attention_heads, config.num_key_value_heads
        d = _get(config, "head_dim", config.hidden_size // heads)
        eps = _get(config, "rms_norm_eps", 1e-6)
        self.q_norm = MiniMaxText01RMSNormTP(d * heads, eps)
        if kv < tp:
            self.k_norm = MiniMaxText01RMSNormTP(d * kv, eps, weight_shard_world_size=kv,
                                                 weight_shard_rank=get_tensor_model_parallel_rank() // (tp // kv))
        else:
            self.k_norm = MiniMaxText01RMSNormTP(d * kv, eps)


class MiniMaxM2MoE(torch.nn.Module):
    def __init__(self, config, prefix=""):
        super().__init__()
        parallel = get_current_vllm_config().parallel_config
        E = config.num_local_experts
        if _get(config, "use_routing_bias", False):
            self.e_score_correction_bias = torch.nn.Parameter(torch.empty(E, dtype=torch.float32),
                                                              requires_grad=False)
            self.e_score_correction_bias.weight_loader = self.ebias_weight_loader
        self.experts = FusedMoE(E, config.num_experts_per_tok, config.hidden_size, config.intermediate_size,
                                prefix=prefix + ".experts", num_expert_group=1,
                                enable_eplb=parallel.enable_eplb,
                                num_redundant_experts=parallel.eplb_config.num_redundant_experts)
        self.gate = ReplicatedLinear(config.hidden_size, E, bias=False, params_dtype=torch.float32,
                                     prefix=prefix + ".gate")

    @staticmethod
    def ebias_weight_loader(param, loaded_weight):
        assert param.size() == loaded_weight.size()
        param.data.copy_(loaded_weight.to(torch.float32))


class MiniMaxM2DecoderLayer(torch.nn.Module):
    def __init__(self, config, quant_config=None, prefix=""):
        super().__init__()
        from vllm.model_executor.layers.layernorm import RMSNorm
        eps = _get(config, "rms_norm_eps", 1e-6)
        self.self_attn = MiniMaxM2Attention(config, quant_config, prefix + ".self_attn")
        self.block_sparse_moe = MiniMaxM2MoE(config, prefix + ".block_sparse_moe")
        self.input_layernorm = RMSNorm(config.hidden_size, eps)
        self.post_attention_layernorm = RMSNorm(config.hidden_size, eps)


class MiniMaxM2ForCausalLM(LlamaForCausalLM):
    layer_type = MiniMaxM2DecoderLayer

    def __init__(self, vllm_config, prefix=""):
        super().__init__(vllm_config, prefix)
        self.num_redundant_experts = vllm_config.parallel_config.eplb_config.num_redundant_experts

    def expert_mapping(self):
        return FusedMoE.make_expert_params_mapping("w1", "w2", "w3", self.config.num_local_experts,
                                                   self.num_redundant_experts)

    def load_weights(self, weights):
        first, n = self.config.num_hidden_layers, _get(self.config, "num_mtp_modules", 0) or 0
        mtp = tuple("model.layers.%d." % (first + i) for i in range(n))
        return super().load_weights((name, w) for name, w in weights if not name.startswith(mtp))


_ = LlamaModel   # the same model body (embed_tokens, layers, norm) as Llama
