"""STAND-IN for vllm.model_executor.models.gpt_oss (MXFP4 checkpoints).

Names (vLLM's, after its checkpoint-name mapping self_attn -> attn, embed_tokens -> embedding):
model.embedding, model.layers.N.{input_layernorm, attn.{qkv_proj (with bias), o_proj (with bias),
sinks [heads/tp], attn}, post_attention_layernorm, mlp.{router (ReplicatedLinear with bias),
experts (FusedMoE, MXFP4: w13_weight/_scale/_bias, w2_weight/_scale/_bias, per-rank intermediate
size padded)}}, model.norm, lm_head.

load_weights narrows each expert tensor itself and hands the rank's tensor, every local expert at
once, to FusedMoE.weight_loader(param, tensor, weight_name, shard_id=None, expert_id=None):
gate_up_proj_blocks [E, 2I, H/32, 16] viewed [E, 2I, H/2] and gate_up_proj_scales [E, 2I, H/32],
gate_up_proj_bias [E, 2I]: rows [2*r*Ip, 2*(r+1)*Ip) (gate/up interleaved, kept) of the local
experts; down_proj_blocks [E, H, I/32, 16] viewed [E, H, I/2]: bytes [r*Ip/2, +Ip/2) of every
row, down_proj_scales [E, H, I/32]: blocks [r*Ip/32, +Ip/32); down_proj_bias [E, H]: whole on
MoE rank 0, zero elsewhere (added once after the reduction). r, Ip: the FusedMoE's MoE-tp rank and
per-rank intermediate size; with expert parallelism the local experts' slabs, whole."""

import torch

from vllm.attention import Attention
from vllm.distributed import get_pp_group, get_tensor_model_parallel_rank, get_tensor_model_parallel_world_size
from vllm.model_executor.layers.fused_moe import FusedMoE
from vllm.model_executor.layers.layernorm import RMSNorm
from vllm.model_executor.layers.linear import QKVParallelLinear, ReplicatedLinear, RowParallelLinear
from vllm.model_executor.layers.vocab_parallel_embedding import ParallelLMHead, VocabParallelEmbedding
from vllm.model_executor.model_loader.weight_utils import default_weight_loader

from .llama import _get
from .utils import PPMissingLayer, is_pp_missing_parameter, make_layers


class OAIAttention(torch.nn.Module):
    def __init__(self, config, prefix=""):
        super().__init__()
        H, heads, kv = config.hidden_size, config.num_attention_heads, config.num_key_value_heads
        d = _get(config, "head_dim", H // heads)
        tp = get_tensor_model_parallel_world_size()
        self.heads_per_rank = heads // tp
        self.qkv_proj = QKVParallelLinear(H, d, heads, kv, bias=True, prefix=prefix + ".qkv_proj")
        self.o_proj = RowParallelLinear(heads * d, H, bias=True, prefix=prefix + ".o_proj")
        self.sinks = torch.nn.Parameter(torch.empty(self.heads_per_rank), requires_grad=False)
        self.attn = Attention(self.qkv_proj.num_heads, d, d ** -0.5,
                              num_kv_heads=self.qkv_proj.num_kv_heads, prefix=prefix + ".attn")


class MLPBlock(torch.nn.Module):
    def __init__(self, config, quant_config, prefix=""):
        super().__init__()
        E = config.num_local_experts
        self.router = ReplicatedLinear(config.hidden_size, E, bias=True, prefix=prefix + ".router")
        self.experts = FusedMoE(E, config.num_experts_per_tok, config.hidden_size,
                                config.intermediate_size, quant_config=quant_config,
                                prefix=prefix + ".experts", has_bias=True)


class TransformerBlock(torch.nn.Module):
    def __init__(self, config, quant_config, prefix=""):
        super().__init__()
        eps = _get(config, "rms_norm_eps", 1e-5)
        self.input_layernorm = RMSNorm(config.hidden_size, eps)
        self.attn = OAIAttention(config, prefix + ".attn")
        self.post_attention_layernorm = RMSNorm(config.hidden_size, eps)
        self.mlp = MLPBlock(config, quant_config, prefix + ".mlp")


class GptOssModel(torch.nn.Module):
    def __init__(self, config, quant_config):
        super().__init__()
        pp = get_pp_group()
        self.embedding = VocabParallelEmbedding(config.vocab_size, config.hidden_size) \
            if pp.is_first_rank else PPMissingLayer()
        self.start_layer, self.end_layer, self.layers = make_layers(
            config.num_hidden_layers, lambda prefix: TransformerBlock(config, quant_config, prefix),
            "model.layers")
        self.norm = RMSNorm(config.hidden_size, _get(config, "rms_norm_eps", 1e-5)) \
            if pp.is_last_rank else PPMissingLayer()


class GptOssForCausalLM(torch.nn.Module):
    def __init__(self, vllm_config, prefix=""):
        super().__init__()
        self.config = config = vllm_config.model_config.hf_text_config
        self.model = GptOssModel(config, vllm_config.model_config.quantization)
        self.lm_head = ParallelLMHead(config.vocab_size, config.hidden_size) \
            if get_pp_group().is_last_rank else PPMissingLayer()

    def load_weights(self, weights):
        params = dict(self.named_parameters())
        loaded = set()
        tp_rank = get_tensor_model_parallel_rank()
        stacked = [(".qkv_proj", ".q_proj", "q"), (".qkv_proj", ".k_proj", "k"),
                   (".qkv_proj", ".v_proj", "v")]
        for name, w in weights:
            name = name.replace(".self_attn.", ".attn.").replace("model.embed_tokens.", "model.embedding.")
            if is_pp_missing_parameter(name, self):
                continue
            if ".mlp.experts." in name:
                self._load_expert(name, w, params, loaded)
                continue
            if name.endswith(".sinks"):
                p = params[name]
                n = p.shape[0]
                p.data.copy_(w[tp_rank * n:(tp_rank + 1) * n])
                loaded.add(name)
                continue
            for param_part, ckpt_part, shard in stacked:
                if ckpt_part in name:
                    target = name.replace(ckpt_part, param_part)
                    p = params[target]
                    p.weight_loader(p, w, shard)
                    loaded.add(target)
                    break
            else:
                p = params[name]
                getattr(p, "weight_loader", default_weight_loader)(p, w)
                loaded.add(name)
        return loaded

    def _load_expert(self, name, w, params, loaded):
        prefix, ckpt = name.rsplit(".", 1)
        moe = self.get_submodule(prefix)
        target = {"gate_up_proj_blocks": "w13_weight", "gate_up_proj_scales": "w13_weight_scale",
                  "gate_up_proj_bias": "w13_bias", "down_proj_blocks": "w2_weight",
                  "down_proj_scales": "w2_weight_scale", "down_proj_bias": "w2_bias"}[ckpt]
        if moe.use_ep:
            local = [e for e in range(moe.global_num_experts) if int(moe.expert_map[e]) >= 0]
            w = w[local[0]:local[-1] + 1]   # linear placement: one run of experts
        E = w.shape[0]
        ip, r = moe.intermediate_size_per_partition, moe.tp_rank
        if ckpt.endswith("_blocks"):
            w = w.reshape(E, w.shape[1], -1)
        if ckpt.startswith("gate_up_proj"):
            w = w[:, 2 * r * ip:2 * (r + 1) * ip]
        elif ckpt == "down_proj_blocks":
            w = w[..., r * ip // 2:(r + 1) * ip // 2]
        elif ckpt == "down_proj_scales":
            w = w[..., r * ip // 32:(r + 1) * ip // 32]
        elif ckpt == "down_proj_bias" and r != 0:
            w = torch.zeros_like(w)
        full = prefix + "." + target
        p = params[full]
        p.weight_loader(p, w.contiguous(), weight_name=full, shard_id=None, expert_id=None)
        loaded.add(full)
