"""STAND-IN for vllm.model_executor.models.starcoder2 (Starcoder2ForCausalLM), an architecture
shardload has no spec for: the vLLM plugin loads it through a recorded plan.

Names (vLLM's models/starcoder2.py, Starcoder2Model / Starcoder2DecoderLayer): model.embed_tokens
(VocabParallelEmbedding), model.layers.N.{input_layernorm, post_attention_layernorm (torch
nn.LayerNorm: weight and bias, loaded by default_weight_loader), self_attn.{qkv_proj
(QKVParallelLinear, bias = config.use_bias), o_proj (RowParallelLinear, bias), attn},
mlp.{c_fc (ColumnParallelLinear, bias), c_proj (RowParallelLinear, bias)}}, model.norm
(nn.LayerNorm). embed_tokens and norm exist on every pipeline stage, as vLLM builds them.
lm_head: with tie_word_embeddings, the module model.embed_tokens itself (its weight appears under
both names); else a ParallelLMHead.

Loading: Starcoder2ForCausalLM.load_weights is an AutoWeightsLoader skipping rotary_emb.inv_freq
and, when tied, lm_head.weight; names under model. go to Starcoder2Model.load_weights: stacked
mapping (qkv_proj, q_proj, q), (qkv_proj, k_proj, k), (qkv_proj, v_proj, v) into
QKVParallelLinear.weight_loader (KV heads replicated when tp exceeds them), KV-cache scale names
remapped (maybe_remap_kv_scale_name), tensors of other stages skipped (is_pp_missing_parameter),
everything else to its parameter's weight_loader or default_weight_loader.
"""

import torch

from vllm.attention import Attention
from vllm.attention.layer import maybe_remap_kv_scale_name
from vllm.distributed import get_tensor_model_parallel_world_size
from vllm.model_executor.layers.linear import (ColumnParallelLinear, QKVParallelLinear,
                                               RowParallelLinear)
from vllm.model_executor.layers.vocab_parallel_embedding import ParallelLMHead, VocabParallelEmbedding
from vllm.model_executor.model_loader.weight_utils import default_weight_loader

from .utils import AutoWeightsLoader, is_pp_missing_parameter, make_layers


class Starcoder2Attention(torch.nn.Module):
    def __init__(self, config, quant_config=None, prefix=""):
        super().__init__()
        tp = get_tensor_model_parallel_world_size()
        heads, kv = config.num_attention_heads, config.num_key_value_heads
        assert heads % tp == 0
        assert kv % tp == 0 if kv >= tp else tp % kv == 0
        self.head_dim = config.hidden_size // heads
        self.qkv_proj = QKVParallelLinear(config.hidden_size, self.head_dim, heads, kv,
                                          bias=config.use_bias, prefix=prefix + ".qkv_proj")
        self.o_proj = RowParallelLinear(heads * self.head_dim, config.hidden_size,
                                        bias=config.use_bias, prefix=prefix + ".o_proj")
        self.attn = Attention(self.qkv_proj.num_heads, self.head_dim, self.head_dim ** -0.5,
                              num_kv_heads=self.qkv_proj.num_kv_heads, quant_config=quant_config,
                              prefix=prefix + ".attn")


class Starcoder2MLP(torch.nn.Module):
    def __init__(self, config, prefix=""):
        super().__init__()
        self.c_fc = ColumnParallelLinear(config.hidden_size, config.intermediate_size,
                                         bias=config.use_bias, prefix=prefix + ".c_fc")
        self.c_proj = RowParallelLinear(config.intermediate_size, config.hidden_size,
                                        bias=config.use_bias, prefix=prefix + ".c_proj")


class Starcoder2DecoderLayer(torch.nn.Module):
    def __init__(self, config, quant_config=None, prefix=""):
        super().__init__()
        self.self_attn = Starcoder2Attention(config, quant_config, prefix + ".self_attn")
        self.mlp = Starcoder2MLP(config, prefix + ".mlp")
        self.input_layernorm = torch.nn.LayerNorm(config.hidden_size, eps=config.norm_epsilon)
        self.post_attention_layernorm = torch.nn.LayerNorm(config.hidden_size,
                                                           eps=config.norm_epsilon)


class Starcoder2Model(torch.nn.Module):
    def __init__(self, config, quant_config=None, prefix="model"):
        super().__init__()
        self.embed_tokens = VocabParallelEmbedding(config.vocab_size, config.hidden_size)
        self.start_layer, self.end_layer, self.layers = make_layers(
            config.num_hidden_layers,
            lambda prefix: Starcoder2DecoderLayer(config, quant_config, prefix), prefix + ".layers")
        self.norm = torch.nn.LayerNorm(config.hidden_size, eps=config.norm_epsilon)

    def load_weights(self, weights):
        stacked_params_mapping = [("qkv_proj", "q_proj", "q"), ("qkv_proj", "k_proj", "k"),
                                  ("qkv_proj", "v_proj", "v")]
        params = dict(self.named_parameters())
        loaded = set()
        for name, w in weights:
            for param_name, weight_name, shard_id in stacked_params_mapping:
                if weight_name not in name:
                    continue
                name = name.replace(weight_name, param_name)
                if is_pp_missing_parameter(name, self):
                    continue
                p = params[name]
                p.weight_loader(p, w, shard_id)
                break
            else:
                name = maybe_remap_kv_scale_name(name, params)
                if name is None or is_pp_missing_parameter(name, self):
                    continue
                p = params[name]
                getattr(p, "weight_loader", default_weight_loader)(p, w)
            loaded.add(name)
        return loaded


class Starcoder2ForCausalLM(torch.nn.Module):
    def __init__(self, vllm_config, prefix=""):
        super().__init__()
        config = vllm_config.model_config.hf_config
        self.config = config
        self.model = Starcoder2Model(config, vllm_config.model_config.quantization)
        self.tied = bool(getattr(config, "tie_word_embeddings", False))
        if self.tied:
            self.lm_head = self.model.embed_tokens
        else:
            self.lm_head = ParallelLMHead(config.vocab_size, config.hidden_size)

    def load_weights(self, weights):
        skip = ["rotary_emb.inv_freq", "lm_head.weight"] if self.tied else ["rotary_emb.inv_freq"]
        return AutoWeightsLoader(self, skip_prefixes=skip).load_weights(weights)
