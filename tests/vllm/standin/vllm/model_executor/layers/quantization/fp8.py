"""STAND-IN for vllm.model_executor.layers.quantization.fp8 (block-quantized FP8 linear layers, as
Fp8LinearMethod.create_weights and vLLM's BlockQuantScaleParameter load them) and DeepSeek-V4's
DeepseekV4FP8Config (models/deepseek_v4.py).

A linear layer with an Fp8Config of weight_block_size [bn, bk] holds `weight` [rows, cols] of the
checkpoint's F8 bytes (uint8 here: torch 1.13 has no float8 types) and `weight_scale_inv`
[ceil(rows/bn), ceil(cols/bk)]: float8_e8m0fnu when the config's scales are E8M0 (uint8 here), else
float32. The weight is loaded by the layer's own weight_loader; the scale by the same rule in
blocks: a column-parallel layer's rows [r*n, +n) of n = its block rows, a merged layer's part k
into block rows sum(s_<k)/bn/tp .. of size s_k/bn/tp from the part's block rows [r*that, +that),
a row-parallel layer's block columns [r*n, +n), a replicated one whole.

DeepseekV4FP8Config: expert_dtype from config.json ("fp4" unless set): FP4 experts are MXFP4
(is_mxfp4_quant: FusedMoE holds packed uint8 weights and uint8 E8M0 scales per 32), FP8 experts
block fp8 (Fp8MoEMethod: weight_scale_inv in blocks); linear scales E8M0 when expert_dtype is fp4
(is_scale_e8m0), float32 otherwise.
"""

import torch

from vllm.model_executor.utils import set_weight_attrs


class Fp8Config:
    def __init__(self, weight_block_size, is_scale_e8m0=False):
        self.weight_block_size = list(weight_block_size)
        self.is_scale_e8m0 = is_scale_e8m0

    @staticmethod
    def get_name():
        return "fp8"

    def is_mxfp4_quant(self, prefix, layer):
        return False

    def scale_dtype(self):
        return torch.uint8 if self.is_scale_e8m0 else torch.float32


class DeepseekV4FP8Config(Fp8Config):
    def __init__(self, weight_block_size, expert_dtype="fp4"):
        super().__init__(weight_block_size, is_scale_e8m0=expert_dtype == "fp4")
        self.expert_dtype = expert_dtype

    @staticmethod
    def get_name():
        return "deepseek_v4_fp8"

    def is_mxfp4_quant(self, prefix, layer):
        return self.expert_dtype == "fp4"


def create_fp8_linear(layer, rows, cols, weight_loader, weight_attrs):
    """layer.weight (uint8 [rows, cols]) and layer.weight_scale_inv in blocks (see the module)."""
    bn, bk = layer.quant_config.weight_block_size
    w = torch.nn.Parameter(torch.empty((rows, cols), dtype=torch.uint8), requires_grad=False)
    set_weight_attrs(w, dict(weight_loader=weight_loader, **weight_attrs))
    layer.register_parameter("weight", w)
    s = torch.nn.Parameter(torch.empty((-(-rows // bn), -(-cols // bk)), dtype=layer.quant_config.scale_dtype()),
                           requires_grad=False)
    set_weight_attrs(s, dict(weight_loader=lambda p, w, shard=None: load_block_scale(layer, p, w, shard)))
    layer.register_parameter("weight_scale_inv", s)


def load_block_scale(layer, param, loaded, shard):
    """BlockQuantScaleParameter's rules for the layer's kind (see the module)."""
    from vllm.model_executor.layers.linear import (ColumnParallelLinear, MergedColumnParallelLinear,
                                                   RowParallelLinear)
    bn, _ = layer.quant_config.weight_block_size
    r = layer.tp_rank
    if isinstance(layer, MergedColumnParallelLinear) and shard is not None:
        size = layer.output_sizes[shard] // bn // layer.tp_size
        offset = sum(layer.output_sizes[:shard]) // bn // layer.tp_size
        param.data.narrow(0, offset, size).copy_(loaded.narrow(0, r * size, size))
    elif isinstance(layer, ColumnParallelLinear):
        n = param.shape[0]
        param.data.copy_(loaded.narrow(0, r * n, n))
    elif isinstance(layer, RowParallelLinear):
        n = param.shape[1]
        param.data.copy_(loaded.narrow(1, r * n, n))
    else:
        assert param.shape == loaded.shape, (param.shape, loaded.shape)
        param.data.copy_(loaded)
