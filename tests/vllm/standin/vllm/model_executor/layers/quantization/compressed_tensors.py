"""STAND-IN for vllm.model_executor.layers.quantization.compressed_tensors: the config of
compressed-tensors W4A16 / W8A16 pack-quantized and NVFP4 checkpoints and the parameters its
schemes create (vLLM compressed_tensors.py, schemes/compressed_tensors_wNa16.py,
compressed_tensors_w4a4_nvfp4.py, compressed_tensors_moe_wna16_marlin.py,
compressed_tensors_moe_w4a4_nvfp4.py). Kernels and process_weights_after_loading are left out: the
tests compare what the weight loaders put on each rank. FP8 scales are uint8 here (torch 1.13 has
no float8).

Ignore list (should_ignore_layer): "re:" entries are Python regular expressions matched with
re.match, others exact names; a fused layer not listed by name is ignored when its parts are
(packed_modules_mapping), and its parts must agree.

Linear W4A16 / W8A16: weight_packed [out, in/pack] I32 (PackedvLLMParameter, packed along the
input), weight_scale [out, in/G] (GroupQuantScaleParameter; per channel on a row-parallel layer:
ChannelQuantScaleParameter [out, 1], whole), weight_zero_point [out/pack, in/G] I32 when
asymmetric (packed along the output), weight_shape [2] int64 (BasevLLMParameter: every part's
whole tensor, the last one stays). Linear NVFP4: weight_packed [out, in/2] U8, weight_scale
[out, in/16] F8 (GroupQuantScaleParameter), weight_global_scale and input_global_scale [parts]
F32 (PerTensorScaleParameter).

FusedMoE W4A16 (the Marlin method, is_transposed): w13_weight_packed [E, H/pack, 2Ip],
w2_weight_packed [E, Ip/pack, H], w13_weight_scale [E, H/G, 2Ip], w2_weight_scale [E, Ip/G, H]
(per channel [E, 1, ...]), zero points [E, H/G, 2Ip/pack] / [E, Ip/G, H/pack], w13_weight_shape /
w2_weight_shape [E, 2] in the model dtype, g_idx and sort indices [E, H] / [E, Ip] (zeros, no
checkpoint tensor). FusedMoE NVFP4: w13_weight_packed [E, 2Ip, H/2], w2_weight_packed
[E, H, Ip/2], scales [E, 2Ip, H/16] / [E, H, Ip/16], w13_weight_global_scale /
w13_input_global_scale [E, 2], w2_* [E].
"""

import re

import torch

from vllm.model_executor.parameter import (BasevLLMParameter, ChannelQuantScaleParameter,
                                           GroupQuantScaleParameter, ModelWeightParameter,
                                           PackedColumnParameter, PackedvLLMParameter,
                                           PerTensorScaleParameter)
from vllm.model_executor.utils import set_weight_attrs


def _match(name, target):
    if target.startswith("re:"):
        return re.match(target[3:], name) is not None
    return name == target


def should_ignore_layer(name, ignore, fused):
    proj = name.split(".")[-1]
    if proj in fused and name not in ignore:
        verdict = None
        for shard in fused[proj]:
            one = any(_match(name.replace(proj, shard), t) for t in ignore)
            if verdict is None:
                verdict = one
            elif one != verdict:
                raise ValueError("Found a different quantization schemes for %s in %s" % (fused[proj], name))
        return bool(verdict)
    return any(_match(name, t) for t in ignore)


class CompressedTensorsConfig:
    def __init__(self, kind, bits, group, symmetric, input_scales, ignore, fused):
        self.kind, self.bits, self.group, self.symmetric = kind, bits, group, symmetric
        self.input_scales, self.ignore, self.fused = input_scales, ignore, fused
        self.pack = 32 // bits if bits else 1

    @classmethod
    def from_config(cls, raw, fused):
        group = next(iter(raw["config_groups"].values()))
        w, a = group["weights"], group.get("input_activations")
        if w["type"] == "int":
            channel = w.get("strategy") == "channel"
            return cls("wna16", w["num_bits"], None if channel else w["group_size"],
                       w.get("symmetric", True), False, raw.get("ignore") or [], fused)
        return cls("nvfp4", 0, 16, True, a is not None, raw.get("ignore") or [], fused)

    def get_name(self):
        return "compressed-tensors"

    def get_linear_method(self, prefix):
        if should_ignore_layer(prefix, self.ignore, self.fused):
            return None
        return WNA16Linear(self) if self.kind == "wna16" else NvFp4Linear(self)

    def get_moe_method(self, prefix):
        if should_ignore_layer(prefix, self.ignore, self.fused):
            return None
        return WNA16MarlinMoE(self) if self.kind == "wna16" else NvFp4MoE(self, "CompressedTensorsW4A4Nvfp4MoEMethod")


class WNA16Linear:
    def __init__(self, config):
        self.c = config

    def create_weights(self, layer, output_partition_sizes, input_size_per_partition, input_size, output_size,
                       params_dtype, weight_loader):
        c = self.c
        out = sum(output_partition_sizes)
        group = c.group if c.group is not None else input_size
        row_parallel = input_size != input_size_per_partition
        partition = not (c.group is None and row_parallel)   # marlin_repeat_scales_on_all_ranks
        if partition:
            assert input_size_per_partition % group == 0, "group_size does not divide the partition"
        groups = input_size_per_partition // group if partition else input_size // group
        layer.register_parameter("weight_packed", PackedvLLMParameter(
            data=torch.empty(out, input_size_per_partition // c.pack, dtype=torch.int32), input_dim=1,
            output_dim=0, packed_factor=c.pack, packed_dim=1, weight_loader=weight_loader))
        scale = torch.empty(out, groups, dtype=params_dtype)
        if partition:
            layer.register_parameter("weight_scale", GroupQuantScaleParameter(
                data=scale, output_dim=0, input_dim=1, weight_loader=weight_loader))
        else:
            layer.register_parameter("weight_scale", ChannelQuantScaleParameter(
                data=scale, output_dim=0, weight_loader=weight_loader))
        layer.register_parameter("weight_shape", BasevLLMParameter(
            data=torch.empty(2, dtype=torch.int64), weight_loader=weight_loader))
        if not c.symmetric:
            zeros = torch.zeros(out // c.pack, groups, dtype=torch.int32)
            zp = PackedvLLMParameter(data=zeros, input_dim=1, output_dim=0, packed_dim=0, packed_factor=c.pack,
                                     weight_loader=weight_loader) if partition else \
                PackedColumnParameter(data=zeros, output_dim=0, packed_dim=0, packed_factor=c.pack,
                                      weight_loader=weight_loader)
            layer.register_parameter("weight_zero_point", zp)


class NvFp4Linear:
    """compressed-tensors NVFP4 (W4A4: with input_global_scale; W4A16: without)."""

    def __init__(self, config, names=("weight_packed", "weight_global_scale", "input_global_scale")):
        self.c = config
        self.names = names

    def create_weights(self, layer, output_partition_sizes, input_size_per_partition, input_size, output_size,
                       params_dtype, weight_loader):
        if input_size_per_partition % 16 != 0:
            raise ValueError("Unsupported model when in features size is not multiple of 16")
        out, n = sum(output_partition_sizes), len(output_partition_sizes)
        weight, wscale2, iscale = self.names
        layer.register_parameter(weight, ModelWeightParameter(
            data=torch.empty(out, input_size_per_partition // 2, dtype=torch.uint8), input_dim=1, output_dim=0,
            weight_loader=weight_loader))
        layer.register_parameter("weight_scale", GroupQuantScaleParameter(
            data=torch.empty(out, input_size_per_partition // 16, dtype=torch.uint8), input_dim=1,
            output_dim=0, weight_loader=weight_loader))
        layer.register_parameter(wscale2, PerTensorScaleParameter(
            data=torch.empty(n, dtype=torch.float32), weight_loader=weight_loader))
        if self.c.input_scales:
            layer.register_parameter(iscale, PerTensorScaleParameter(
                data=torch.empty(n, dtype=torch.float32), weight_loader=weight_loader))


def _param(layer, name, shape, dtype, attrs):
    p = torch.nn.Parameter(torch.zeros(shape, dtype=dtype), requires_grad=False)
    set_weight_attrs(p, dict(attrs))
    layer.register_parameter(name, p)
    return p


class WNA16MarlinMoE:
    name = "CompressedTensorsWNA16MarlinMoEMethod"

    def __init__(self, config):
        self.c = config

    def create_weights(self, layer, num_experts, hidden_size, intermediate_size_per_partition, params_dtype,
                       extra_weight_attrs):
        c = self.c
        E, H, Ip, p = num_experts, hidden_size, intermediate_size_per_partition, c.pack
        attrs = dict(extra_weight_attrs, is_transposed=True, quant_method="channel" if c.group is None else "group")
        if c.group is None:
            g13 = g2 = 1
        else:
            if H % c.group != 0 or Ip % c.group != 0:
                raise ValueError("CompressedTensors WNA16 Marlin MoE: group_size %d does not divide %d / %d"
                                 % (c.group, H, Ip))
            g13, g2 = H // c.group, Ip // c.group
        _param(layer, "w13_weight_packed", (E, H // p, 2 * Ip), torch.int32, attrs)
        _param(layer, "w2_weight_packed", (E, Ip // p, H), torch.int32, attrs)
        _param(layer, "w13_weight_scale", (E, g13, 2 * Ip), params_dtype, attrs)
        _param(layer, "w2_weight_scale", (E, g2, H), params_dtype, dict(attrs, load_full_w2=False))
        if not c.symmetric:
            _param(layer, "w13_weight_zero_point", (E, g13, 2 * Ip // p), torch.int32, attrs)
            _param(layer, "w2_weight_zero_point", (E, g2, H // p), torch.int32, attrs)
        _param(layer, "w2_weight_shape", (E, 2), torch.get_default_dtype(), attrs)
        _param(layer, "w13_weight_shape", (E, 2), torch.get_default_dtype(), attrs)
        _param(layer, "w13_weight_g_idx", (E, H), torch.int32, attrs)
        _param(layer, "w2_weight_g_idx", (E, Ip), torch.int32, attrs)
        _param(layer, "w13_g_idx_sort_indices", (E, H), torch.int32, attrs)
        _param(layer, "w2_g_idx_sort_indices", (E, Ip), torch.int32, attrs)


class NvFp4MoE:
    """The NVFP4 MoE methods: compressed-tensors' (weight_packed, weight_global_scale,
    input_global_scale) and ModelOpt's (weight, weight_scale_2, input_scale)."""

    def __init__(self, config, name, names=("weight_packed", "weight_global_scale", "input_global_scale")):
        self.c = config
        self.name = name
        self.names = names

    def create_weights(self, layer, num_experts, hidden_size, intermediate_size_per_partition, params_dtype,
                       extra_weight_attrs):
        E, H, Ip = num_experts, hidden_size, intermediate_size_per_partition
        weight, wscale2, iscale = self.names
        modelopt = self.name.startswith("ModelOpt")
        plain = dict(extra_weight_attrs)
        _param(layer, "w13_" + weight, (E, 2 * Ip, H // 2), torch.uint8, plain)
        _param(layer, "w2_" + weight, (E, H, Ip // 2), torch.uint8, plain)
        group = plain if modelopt else dict(plain, quant_method="group")
        _param(layer, "w13_weight_scale", (E, 2 * Ip, H // 16), torch.uint8, group)
        _param(layer, "w2_weight_scale", (E, H, Ip // 16), torch.uint8, group)
        tensor = plain if modelopt else dict(plain, quant_method="tensor")
        _param(layer, "w13_" + wscale2, (E, 2), torch.float32, tensor)
        _param(layer, "w2_" + wscale2, (E,), torch.float32, tensor)
        if self.c.input_scales:
            _param(layer, "w13_" + iscale, (E, 2), torch.float32, tensor)
            _param(layer, "w2_" + iscale, (E,), torch.float32, tensor)
