"""STAND-IN for vllm.model_executor.models.mixtral: a Llama decoder whose MLP is block_sparse_moe =
{gate: ReplicatedLinear [E, H] without bias, experts: FusedMoE} with the checkpoint's
experts.<e>.w1/w2/w3 mapped onto w13_weight / w2_weight through
FusedMoE.make_expert_params_mapping (every physical slot, EPLB's redundant ones included).
Redundant experts and EPLB come from the parallel config; an expert-group count (n_group in
config.json, as DeepSeek declares) is passed on so that round_robin placement can apply."""

import torch

from vllm.config import get_current_vllm_config
from vllm.model_executor.layers.fused_moe import FusedMoE
from vllm.model_executor.layers.linear import ReplicatedLinear

from .llama import LlamaDecoderLayer, LlamaForCausalLM, _get


class MixtralMoE(torch.nn.Module):
    def __init__(self, config, quant_config=None, prefix=""):
        super().__init__()
        parallel = get_current_vllm_config().parallel_config
        E = config.num_local_experts
        self.gate = ReplicatedLinear(config.hidden_size, E, bias=False, prefix=prefix + ".gate")
        self.experts = FusedMoE(E, config.num_experts_per_tok, config.hidden_size,
                                config.intermediate_size, quant_config=quant_config, prefix=prefix + ".experts",
                                num_expert_group=_get(config, "n_group"),
                                enable_eplb=parallel.enable_eplb,
                                num_redundant_experts=parallel.eplb_config.num_redundant_experts)


class MixtralDecoderLayer(LlamaDecoderLayer):
    def __init__(self, config, quant_config=None, prefix=""):
        super().__init__(config, quant_config, prefix)
        del self.mlp
        self.block_sparse_moe = MixtralMoE(config, quant_config, prefix + ".block_sparse_moe")

    def make_mlp(self, config, quant_config, prefix):
        return torch.nn.Module()


class MixtralForCausalLM(LlamaForCausalLM):
    layer_type = MixtralDecoderLayer

    def __init__(self, vllm_config, prefix=""):
        super().__init__(vllm_config, prefix)
        # Read while the model is built: vLLM 0.10.2-0.13 leave the current config unset later.
        self.num_redundant_experts = vllm_config.parallel_config.eplb_config.num_redundant_experts

    def expert_mapping(self):
        return FusedMoE.make_expert_params_mapping("w1", "w2", "w3", self.config.num_local_experts,
                                                   self.num_redundant_experts)
