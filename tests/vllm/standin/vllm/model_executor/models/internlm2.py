"""STAND-IN for vllm.model_executor.models.internlm2 (InternLM2ForCausalLM), an architecture
shardload has no spec for: the vLLM plugin loads it through a recorded plan.

Names (vLLM's models/internlm2.py, InternLM2Model / InternLMDecoderLayer): model.tok_embeddings
(VocabParallelEmbedding), model.layers.N.{attention_norm, attention.{wqkv (QKVParallelLinear, no
bias), wo (RowParallelLinear), attn}, ffn_norm, feed_forward.{gate_up_proj
(MergedColumnParallelLinear of the checkpoint's w1 and w3), w2 (RowParallelLinear)}}, model.norm,
output (ParallelLMHead; with tie_word_embeddings it is model.tok_embeddings.weight). As vLLM
builds it, tok_embeddings, norm and output exist on every pipeline stage (no PPMissingLayer);
make_layers leaves the other stages' layers out. head_dim = hidden_size / num_attention_heads.

Loading (InternLM2ForCausalLM.load_weights): stacked mapping (gate_up_proj, w1, 0),
(gate_up_proj, w3, 1); rotary_emb.inv_freq skipped; a bias the module lacks skipped; tensors of
other stages skipped (is_pp_missing_parameter); every other tensor goes to its parameter's
weight_loader with no shard id: the checkpoint's fused wqkv goes whole to
QKVParallelLinear.weight_loader, which cuts it into q, k, v by the total sizes (vLLM
layers/linear.py, QKVParallelLinear.weight_loader, loaded_shard_id None) and takes each part's
rank slice (KV heads replicated when tp exceeds them). The checkpoint's wqkv rows are grouped by
KV head; vLLM reorders the projected q/k/v at run time (InternLM2Attention.split_qkv), so the
loaded parameter is these contiguous cuts.
"""

import torch

from vllm.attention import Attention
from vllm.distributed import get_tensor_model_parallel_world_size
from vllm.model_executor.layers.layernorm import RMSNorm
from vllm.model_executor.layers.linear import (MergedColumnParallelLinear, QKVParallelLinear,
                                               RowParallelLinear)
from vllm.model_executor.layers.vocab_parallel_embedding import ParallelLMHead, VocabParallelEmbedding
from vllm.model_executor.model_loader.weight_utils import default_weight_loader

from .utils import is_pp_missing_parameter, make_layers


class InternLM2MLP(torch.nn.Module):
    def __init__(self, hidden_size, intermediate_size, prefix=""):
        super().__init__()
        self.gate_up_proj = MergedColumnParallelLinear(hidden_size, [intermediate_size] * 2,
                                                       bias=False, prefix=prefix + ".gate_up_proj")
        self.w2 = RowParallelLinear(intermediate_size, hidden_size, bias=False, prefix=prefix + ".w2")


class InternLM2Attention(torch.nn.Module):
    def __init__(self, hidden_size, num_heads, num_kv_heads, quant_config=None, prefix=""):
        super().__init__()
        tp = get_tensor_model_parallel_world_size()
        assert num_heads % tp == 0
        assert num_kv_heads % tp == 0 if num_kv_heads >= tp else tp % num_kv_heads == 0
        self.head_dim = hidden_size // num_heads
        self.wqkv = QKVParallelLinear(hidden_size, self.head_dim, num_heads, num_kv_heads,
                                      bias=False, prefix=prefix + ".wqkv")
        self.wo = RowParallelLinear(num_heads * self.head_dim, hidden_size, bias=False,
                                    prefix=prefix + ".wo")
        self.attn = Attention(self.wqkv.num_heads, self.head_dim, self.head_dim ** -0.5,
                              num_kv_heads=self.wqkv.num_kv_heads, quant_config=quant_config,
                              prefix=prefix + ".attn")


class InternLMDecoderLayer(torch.nn.Module):
    def __init__(self, config, quant_config=None, prefix=""):
        super().__init__()
        self.attention = InternLM2Attention(config.hidden_size, config.num_attention_heads,
                                            config.num_key_value_heads, quant_config,
                                            prefix + ".attention")
        self.feed_forward = InternLM2MLP(config.hidden_size, config.intermediate_size,
                                         prefix + ".feed_forward")
        self.attention_norm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.ffn_norm = RMSNorm(config.hidden_size, config.rms_norm_eps)


class InternLM2Model(torch.nn.Module):
    def __init__(self, config, quant_config=None, prefix="model"):
        super().__init__()
        self.tok_embeddings = VocabParallelEmbedding(config.vocab_size, config.hidden_size)
        self.start_layer, self.end_layer, self.layers = make_layers(
            config.num_hidden_layers,
            lambda prefix: InternLMDecoderLayer(config, quant_config, prefix), prefix + ".layers")
        self.norm = RMSNorm(config.hidden_size, config.rms_norm_eps)


class InternLM2ForCausalLM(torch.nn.Module):
    def __init__(self, vllm_config, prefix=""):
        super().__init__()
        config = vllm_config.model_config.hf_config
        self.config = config
        self.model = InternLM2Model(config, vllm_config.model_config.quantization)
        self.output = ParallelLMHead(config.vocab_size, config.hidden_size)
        if getattr(config, "tie_word_embeddings", False):
            self.output.weight = self.model.tok_embeddings.weight

    def load_weights(self, weights):
        stacked_params_mapping = [("gate_up_proj", "w1", 0), ("gate_up_proj", "w3", 1)]
        params = dict(self.named_parameters())
        loaded = set()
        for name, w in weights:
            if "rotary_emb.inv_freq" in name:
                continue
            for param_name, weight_name, shard_id in stacked_params_mapping:
                if weight_name not in name:
                    continue
                name = name.replace(weight_name, param_name)
                if name.endswith(".bias") and name not in params:
                    continue
                if is_pp_missing_parameter(name, self):
                    continue
                p = params[name]
                p.weight_loader(p, w, shard_id)
                break
            else:
                if name.endswith(".bias") and name not in params:
                    continue
                if is_pp_missing_parameter(name, self):
                    continue
                p = params[name]
                getattr(p, "weight_loader", default_weight_loader)(p, w)
            loaded.add(name)
        return loaded
