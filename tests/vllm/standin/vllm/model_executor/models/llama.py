"""STAND-IN for vllm.model_executor.models.llama (and qwen3: the same decoder with q_norm/k_norm).

Names: model.embed_tokens (VocabParallelEmbedding: first stage, and the last one too when the head
is tied), model.layers.N.{input_layernorm, self_attn.{qkv_proj, o_proj, attn, q_norm, k_norm},
post_attention_layernorm, mlp.{gate_up_proj, down_proj}}, model.norm and lm_head (ParallelLMHead)
on the last stage; with tie_word_embeddings lm_head.weight IS model.embed_tokens.weight (one
Parameter). load_weights(weights) gives each checkpoint tensor to its parameter's weight_loader:
q/k/v_proj -> qkv_proj (shard q, k, v), gate/up_proj -> gate_up_proj (shard 0, 1); skips
rotary_emb.inv_freq, lm_head.* when tied, and tensors of other pipeline stages; maps KV-cache
scales to self_attn.attn.*; returns the set of loaded parameter names. A quantized checkpoint
(layers/quantization) gives the linears their quantized parameters (q/k/v_proj.weight_packed ->
qkv_proj.weight_packed, shard q, ...): the same stacked mapping, by substring."""

import torch

from vllm.attention import Attention
from vllm.attention.layer import maybe_remap_kv_scale_name
from vllm.distributed import get_pp_group
from vllm.model_executor.layers.layernorm import RMSNorm
from vllm.model_executor.layers.quantization import get_quant_config
from vllm.model_executor.layers.linear import (MergedColumnParallelLinear, QKVParallelLinear,
                                               RowParallelLinear)
from vllm.model_executor.layers.vocab_parallel_embedding import ParallelLMHead, VocabParallelEmbedding
from vllm.model_executor.model_loader.weight_utils import default_weight_loader

from .utils import PPMissingLayer, is_pp_missing_parameter, make_layers


def _get(config, name, default=None):
    return getattr(config, name, default) if getattr(config, name, None) is not None else default


class LlamaMLP(torch.nn.Module):
    def __init__(self, hidden_size, intermediate_size, bias=False, quant_config=None, prefix=""):
        super().__init__()
        self.gate_up_proj = MergedColumnParallelLinear(hidden_size, [intermediate_size] * 2, bias=bias,
                                                       quant_config=quant_config, prefix=prefix + ".gate_up_proj")
        self.down_proj = RowParallelLinear(intermediate_size, hidden_size, bias=bias, quant_config=quant_config,
                                           prefix=prefix + ".down_proj")


class LlamaAttention(torch.nn.Module):
    def __init__(self, config, quant_config=None, prefix="", qk_norm=False):
        super().__init__()
        H = config.hidden_size
        heads, kv = config.num_attention_heads, _get(config, "num_key_value_heads", config.num_attention_heads)
        d = _get(config, "head_dim", H // heads)
        bias = bool(_get(config, "attention_bias", False))
        self.qkv_proj = QKVParallelLinear(H, d, heads, kv, bias=bias, quant_config=quant_config,
                                          prefix=prefix + ".qkv_proj")
        self.o_proj = RowParallelLinear(heads * d, H, bias=bias, quant_config=quant_config, prefix=prefix + ".o_proj")
        if qk_norm:
            eps = _get(config, "rms_norm_eps", 1e-6)
            self.q_norm = RMSNorm(d, eps)
            self.k_norm = RMSNorm(d, eps)
        self.attn = Attention(self.qkv_proj.num_heads, d, d ** -0.5,
                              num_kv_heads=self.qkv_proj.num_kv_heads, quant_config=quant_config,
                              prefix=prefix + ".attn")


class LlamaDecoderLayer(torch.nn.Module):
    qk_norm = False

    def __init__(self, config, quant_config=None, prefix=""):
        super().__init__()
        eps = _get(config, "rms_norm_eps", 1e-6)
        self.self_attn = LlamaAttention(config, quant_config, prefix + ".self_attn", self.qk_norm)
        self.mlp = self.make_mlp(config, quant_config, prefix + ".mlp")
        self.input_layernorm = RMSNorm(config.hidden_size, eps)
        self.post_attention_layernorm = RMSNorm(config.hidden_size, eps)

    def make_mlp(self, config, quant_config, prefix):
        return LlamaMLP(config.hidden_size, config.intermediate_size,
                        bool(_get(config, "mlp_bias", False)), quant_config, prefix)


class Qwen3DecoderLayer(LlamaDecoderLayer):
    qk_norm = True


class LlamaModel(torch.nn.Module):
    def __init__(self, config, quant_config, layer_type, prefix="model"):
        super().__init__()
        pp = get_pp_group()
        tied = bool(_get(config, "tie_word_embeddings", False))
        if pp.is_first_rank or (tied and pp.is_last_rank):
            self.embed_tokens = VocabParallelEmbedding(config.vocab_size, config.hidden_size)
        else:
            self.embed_tokens = PPMissingLayer()
        self.start_layer, self.end_layer, self.layers = make_layers(
            config.num_hidden_layers, lambda prefix: layer_type(config, quant_config, prefix),
            prefix + ".layers")
        self.norm = RMSNorm(config.hidden_size, _get(config, "rms_norm_eps", 1e-6)) \
            if pp.is_last_rank else PPMissingLayer()


class LlamaForCausalLM(torch.nn.Module):
    layer_type = LlamaDecoderLayer
    packed_modules_mapping = {"qkv_proj": ["q_proj", "k_proj", "v_proj"], "gate_up_proj": ["gate_proj", "up_proj"]}
    stacked_params_mapping = [(".qkv_proj", ".q_proj", "q"), (".qkv_proj", ".k_proj", "k"),
                              (".qkv_proj", ".v_proj", "v"), (".gate_up_proj", ".gate_proj", 0),
                              (".gate_up_proj", ".up_proj", 1)]

    def __init__(self, vllm_config, prefix=""):
        super().__init__()
        config = vllm_config.model_config.hf_text_config
        self.config = config
        quant = get_quant_config(vllm_config.model_config, self.packed_modules_mapping)
        self.model = LlamaModel(config, quant, self.layer_type)
        self.tied = bool(_get(config, "tie_word_embeddings", False))
        if get_pp_group().is_last_rank:
            self.lm_head = ParallelLMHead(config.vocab_size, config.hidden_size)
            if self.tied:
                self.lm_head = self.lm_head.tie_weights(self.model.embed_tokens)
        else:
            self.lm_head = PPMissingLayer()

    def expert_mapping(self):
        return []

    def load_weights(self, weights):
        params = dict(self.named_parameters())
        loaded = set()
        for name, w in weights:
            if "rotary_emb.inv_freq" in name or (self.tied and name.startswith("lm_head.")):
                continue
            if "scale" in name:
                name = maybe_remap_kv_scale_name(name, params)
                if name is None:
                    continue
            for param_part, ckpt_part, shard in self.stacked_params_mapping:
                if ckpt_part not in name or ".experts." in name:
                    continue
                target = name.replace(ckpt_part, param_part)
                if is_pp_missing_parameter(target, self):
                    break
                p = params[target]
                p.weight_loader(p, w, shard)
                loaded.add(target)
                break
            else:
                done = False
                for param_part, ckpt_part, expert, shard in self.expert_mapping():
                    if ckpt_part not in name:
                        continue
                    target = name.replace(ckpt_part, param_part)
                    if is_pp_missing_parameter(target, self):
                        done = True
                        break
                    p = params[target]
                    p.weight_loader(p, w, target, shard_id=shard, expert_id=expert)
                    loaded.add(target)
                    done = True   # every physical slot of this logical expert: keep looping
                if done or is_pp_missing_parameter(name, self):
                    continue
                p = params[name]
                getattr(p, "weight_loader", default_weight_loader)(p, w)
                loaded.add(name)
        if self.tied and "model.embed_tokens.weight" in loaded:
            loaded.add("lm_head.weight")
        return loaded


class Qwen3ForCausalLM(LlamaForCausalLM):
    layer_type = Qwen3DecoderLayer
