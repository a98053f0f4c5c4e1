"""STAND-IN for vllm.model_executor.models.llama4 (text part of Llama4ForConditionalGeneration; the
vision tower is left out here).

Names: language_model.model.{embed_tokens, layers.N.{input_layernorm, self_attn.{qkv_proj, o_proj,
attn}, post_attention_layernorm, feed_forward}, norm}, language_model.lm_head. feed_forward is a
dense MLP (gate_up_proj, down_proj; intermediate_size_mlp) except on every
interleave_moe_layer_step-th layer, where it is {router (ReplicatedLinear [E, H], no bias),
experts (FusedMoE: w13_weight [E, 2I, H], w2_weight [E, H, I]), shared_expert (gate_up_proj,
down_proj)}. The checkpoint stores the experts fused and transposed: experts.gate_up_proj
[E, H, 2I] (gate columns then up columns), experts.down_proj [E, I, H]; load_weights transposes
them and hands each expert to FusedMoE.weight_loader (w1 = gate, w3 = up, w2 = down).
Llama4ForCausalLM.load_weights first permutes the rows of every q_proj / k_proj weight within each
head for vLLM's neox rotary (permute_qk_weight_for_rotary: view [heads, d/2, 2, H], swap the two
middle dimensions: row 2i + j of a head becomes row j*d/2 + i)."""

import torch

from vllm.distributed import get_pp_group
from vllm.model_executor.layers.fused_moe import FusedMoE
from vllm.model_executor.layers.linear import ReplicatedLinear
from vllm.model_executor.layers.vocab_parallel_embedding import ParallelLMHead

from .llama import LlamaAttention, LlamaForCausalLM, LlamaMLP, LlamaModel, _get
from .utils import PPMissingLayer, is_pp_missing_parameter


class Llama4MoE(torch.nn.Module):
    def __init__(self, config, quant_config=None, prefix=""):
        super().__init__()
        E, H = config.num_local_experts, config.hidden_size
        self.router = ReplicatedLinear(H, E, bias=False, prefix=prefix + ".router")
        self.experts = FusedMoE(E, config.num_experts_per_tok, H, config.intermediate_size,
                                prefix=prefix + ".experts")
        self.shared_expert = LlamaMLP(H, config.intermediate_size, prefix=prefix + ".shared_expert")


class Llama4DecoderLayer(torch.nn.Module):
    def __init__(self, config, quant_config=None, prefix=""):
        super().__init__()
        from vllm.model_executor.layers.layernorm import RMSNorm
        index = int(prefix.rsplit(".", 1)[1])
        step = _get(config, "interleave_moe_layer_step", 1)
        eps = _get(config, "rms_norm_eps", 1e-5)
        self.self_attn = LlamaAttention(config, quant_config, prefix + ".self_attn")
        if (index + 1) % step == 0:
            self.feed_forward = Llama4MoE(config, quant_config, prefix + ".feed_forward")
        else:
            self.feed_forward = LlamaMLP(config.hidden_size, config.intermediate_size_mlp,
                                         prefix=prefix + ".feed_forward")
        self.input_layernorm = RMSNorm(config.hidden_size, eps)
        self.post_attention_layernorm = RMSNorm(config.hidden_size, eps)


class Llama4ForCausalLM(LlamaForCausalLM):
    def __init__(self, vllm_config, prefix=""):
        torch.nn.Module.__init__(self)
        config = vllm_config.model_config.hf_text_config
        self.config = config
        self.tied = False
        self.model = LlamaModel(config, vllm_config.model_config.quantization, Llama4DecoderLayer,
                                prefix="language_model.model")
        self.lm_head = ParallelLMHead(config.vocab_size, config.hidden_size) \
            if get_pp_group().is_last_rank else PPMissingLayer()


def permute_qk_weight_for_rotary(config, name, w):
    """vLLM's Llama4ForCausalLM.permute_qk_weight_for_rotary for unquantized weights."""
    modules = name.split(".")
    if modules[-1] != "weight":
        return w
    if "k_proj" in modules or "wk" in modules:
        heads = config.num_key_value_heads
    elif "q_proj" in modules or "wq" in modules:
        heads = config.num_attention_heads
    else:
        return w
    attn_in, attn_out = config.head_dim * heads, config.hidden_size
    return w.view(heads, attn_in // heads // 2, 2, attn_out).transpose(1, 2).reshape(attn_in, attn_out)


class Llama4ForConditionalGeneration(torch.nn.Module):
    def __init__(self, vllm_config, prefix=""):
        super().__init__()
        self.language_model = Llama4ForCausalLM(vllm_config, prefix="language_model")

    def load_weights(self, weights):
        lm = self.language_model
        rest = []
        loaded = set()
        params = dict(self.named_parameters())
        for name, w in weights:
            if not name.startswith("language_model."):
                continue
            if ".feed_forward.experts." not in name:
                short = name[len("language_model."):]
                rest.append((short, permute_qk_weight_for_rotary(lm.config, short, w)))
                continue
            target_prefix = name.rsplit(".", 1)[0]
            if is_pp_missing_parameter(target_prefix + ".w13_weight", self):
                continue
            moe = self.get_submodule(target_prefix)
            w = w.transpose(-1, -2)   # [E, 2I, H] or [E, H, I]
            if name.endswith(".gate_up_proj"):
                target = target_prefix + ".w13_weight"
                gate, up = w.chunk(2, dim=1)
                parts = (("w1", gate), ("w3", up))
            else:
                target = target_prefix + ".w2_weight"
                parts = (("w2", w),)
            p = params[target]
            for shard, t in parts:
                for e in range(t.shape[0]):
                    moe.weight_loader(p, t[e], target, shard_id=shard, expert_id=e)
            loaded.add(target)
        loaded |= {"language_model." + n for n in lm.load_weights(rest)}
        return loaded
