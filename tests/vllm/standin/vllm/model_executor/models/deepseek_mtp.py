"""STAND-IN for vllm.model_executor.models.deepseek_mtp: DeepSeekMTP, the multi-token-prediction
draft of DeepSeek-V3, V3.2 and GLM-5 (vLLM names its architecture DeepSeekMTPModel), from vLLM's
model file.

Names: model.embed_tokens (VocabParallelEmbedding, shared by the MTP layers), and for each MTP
layer L in [num_hidden_layers, + num_nextn_predict_layers): model.layers.L.{enorm, hnorm (RMSNorm),
eh_proj (nn.Linear [H, 2H] without bias: no weight_loader), shared_head.{norm (RMSNorm),
head (ParallelLMHead)}, mtp_block (a DeepseekV2DecoderLayer: MoE, and the indexer on
DeepSeek-V3.2 / GLM-5)}.

load_weights: only tensors of the MTP layers (model.layers.L.); names of enorm, hnorm, eh_proj and
shared_head stay, embed_tokens becomes model.embed_tokens and is taken from the first MTP layer
only, every other name moves under model.layers.L.mtp_block.; then the stacked mapping, the
experts and the rest as the target model's load_weights."""

import torch

from vllm.model_executor.layers.fused_moe import FusedMoE
from vllm.model_executor.layers.layernorm import RMSNorm
from vllm.model_executor.layers.vocab_parallel_embedding import ParallelLMHead, VocabParallelEmbedding

from .deepseek_v2 import DeepseekV2DecoderLayer, load_one, spec_layer
from .llama import _get

SPEC_PARTS = ("embed_tokens", "enorm", "hnorm", "eh_proj", "shared_head")


class SharedHead(torch.nn.Module):
    def __init__(self, config):
        super().__init__()
        self.norm = RMSNorm(config.hidden_size, _get(config, "rms_norm_eps", 1e-6))
        self.head = ParallelLMHead(config.vocab_size, config.hidden_size)


class DeepSeekMultiTokenPredictorLayer(torch.nn.Module):
    def __init__(self, config, prefix):
        super().__init__()
        eps = _get(config, "rms_norm_eps", 1e-6)
        self.enorm = RMSNorm(config.hidden_size, eps)
        self.hnorm = RMSNorm(config.hidden_size, eps)
        self.eh_proj = torch.nn.Linear(config.hidden_size * 2, config.hidden_size, bias=False)
        self.eh_proj.weight.requires_grad_(False)
        self.shared_head = SharedHead(config)
        self.mtp_block = DeepseekV2DecoderLayer(config, prefix)


class DeepSeekMultiTokenPredictor(torch.nn.Module):
    def __init__(self, config, prefix="model"):
        super().__init__()
        self.mtp_start_layer_idx = config.num_hidden_layers
        n = config.num_nextn_predict_layers
        self.layers = torch.nn.ModuleDict({
            str(i): DeepSeekMultiTokenPredictorLayer(config, "%s.layers.%d" % (prefix, i))
            for i in range(self.mtp_start_layer_idx, self.mtp_start_layer_idx + n)})
        self.embed_tokens = VocabParallelEmbedding(config.vocab_size, config.hidden_size)


class DeepSeekMTP(torch.nn.Module):
    def __init__(self, vllm_config, prefix=""):
        super().__init__()
        self.config = vllm_config.model_config.hf_config
        self.tied = False
        self.num_redundant_experts = vllm_config.parallel_config.eplb_config.num_redundant_experts
        self.model = DeepSeekMultiTokenPredictor(self.config)

    def rewrite(self, layer, name):
        part = next((p for p in SPEC_PARTS if p in name), None)
        if part is None:
            return name.replace("model.layers.%d." % layer, "model.layers.%d.mtp_block." % layer)
        if part == "embed_tokens":
            return name.replace("model.layers.%d." % layer, "model.")
        return name

    def load_weights(self, weights):
        params = dict(self.named_parameters())
        experts = FusedMoE.make_expert_params_mapping("gate_proj", "down_proj", "up_proj",
                                                      self.config.n_routed_experts, self.num_redundant_experts)
        loaded = set()
        for name, w in weights:
            if "rotary_emb.inv_freq" in name:
                continue
            layer = spec_layer(self.config, name)
            if layer is None:
                continue
            name = self.rewrite(layer, name)
            if layer != self.model.mtp_start_layer_idx and ".layers" not in name:
                continue   # the MTP layers share one embedding: the first layer's
            done = load_one(self, params, name, w, experts)
            if done is not None:
                loaded.add(done)
        return loaded
