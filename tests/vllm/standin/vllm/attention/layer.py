"""STAND-IN for vllm.attention.layer (vllm.model_executor.layers.attention in the newest releases).

Every Attention registers persistent float32 scalar buffers _k_scale, _v_scale, _q_scale,
_prob_scale (1.0), as vLLM does since about 0.14. With a quantization config that quantizes the
KV cache (here: quantization "fp8" or "compressed-tensors"), its quant method adds Parameters
k_scale, v_scale, q_scale, prob_scale initialised to -1.0 and loaded by default_weight_loader from
checkpoint tensors when present; process_weights_after_loading then copies every positive one
into its buffer (a missing k or v scale leaves 1.0) and removes the four Parameters. Checkpoints
name them ...self_attn.k_proj.k_scale or ...self_attn.k_scale; models map both to
...self_attn.attn.k_scale (maybe_remap_kv_scale_name)."""

import torch

KV_CACHE_QUANTIZATIONS = ("fp8", "compressed-tensors")
SCALES = ("k_scale", "v_scale", "q_scale", "prob_scale")


class BaseKVCacheMethod:
    def create_weights(self, layer):
        for name in SCALES:
            layer.register_parameter(name, torch.nn.Parameter(torch.tensor(-1.0), requires_grad=False))

    def process_weights_after_loading(self, layer):
        for name in SCALES:
            value = getattr(layer, name).item()
            if value > 0:
                getattr(layer, "_" + name).fill_(value)
            delattr(layer, name)


class Attention(torch.nn.Module):
    def __init__(self, num_heads, head_size, scale, num_kv_heads=None, cache_config=None,
                 quant_config=None, prefix=""):
        super().__init__()
        self.num_heads, self.head_size, self.scale = num_heads, head_size, scale
        self.num_kv_heads = num_kv_heads or num_heads
        self.layer_name = prefix
        for name in SCALES:
            self.register_buffer("_" + name, torch.tensor(1.0, dtype=torch.float32))
        self.quant_method = None
        if quant_config in KV_CACHE_QUANTIZATIONS:
            self.quant_method = BaseKVCacheMethod()
            self.quant_method.create_weights(self)

    def process_weights_after_loading(self, act_dtype):
        if self.quant_method is not None:
            self.quant_method.process_weights_after_loading(self)


def maybe_remap_kv_scale_name(name, params_dict):
    for scale in ("k_scale", "v_scale", "q_scale", "prob_scale"):
        for old in (".self_attn.%s_proj.%s" % (scale[0], scale), ".self_attn.%s" % scale):
            if name.endswith(old):
                new = name[: -len(old)] + ".self_attn.attn." + scale
                return new if new in params_dict else None
    return name
