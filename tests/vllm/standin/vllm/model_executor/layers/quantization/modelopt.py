"""STAND-IN for vllm.model_executor.layers.quantization.modelopt: ModelOpt NVFP4
(ModelOptNvFp4Config, ModelOptNvFp4LinearMethod, ModelOptNvFp4FusedMoE). The config comes from
config.json's quantization_config ({"quant_method": "modelopt", "quant_algo": "NVFP4", "ignore"})
or hf_quant_config.json's ({"producer": {"name": "modelopt"}, "quantization": {"quant_algo",
"exclude_modules"}}). A layer is excluded when its name is listed (a fused layer: when its parts
are, all alike: is_layer_skipped) or matches a listed wildcard (fnmatch). Linear: weight
[out, in/2] U8 and weight_scale [out, in/16] F8 (ModelWeightParameter), weight_scale_2 and
input_scale [parts] F32 (PerTensorScaleParameter); a partition whose input is not a multiple of 16
is refused. FusedMoE: w13_weight [E, 2Ip, H/2], w2_weight [E, H, Ip/2], scales [E, 2Ip, H/16] /
[E, H, Ip/16], w13_weight_scale_2 / w13_input_scale [E, 2], w2_* [E] (parameters without a
quant_method attribute: FusedMoE.weight_loader's ModelOpt branch)."""

import fnmatch

from .compressed_tensors import NvFp4Linear, NvFp4MoE

_NAMES = ("weight", "weight_scale_2", "input_scale")


def is_layer_skipped(prefix, ignored, fused):
    proj = prefix.split(".")[-1]
    if proj in fused:
        verdict = None
        for shard in fused[proj]:
            one = prefix.replace(proj, shard) in ignored
            if verdict is None:
                verdict = one
            elif one != verdict:
                raise ValueError("Detected some but not all shards of %s are quantized" % prefix)
        return bool(verdict)
    return prefix in ignored


class ModelOptNvFp4Config:
    def __init__(self, exclude, fused):
        self.exclude, self.fused = exclude, fused
        self.input_scales = True

    @classmethod
    def from_config(cls, raw, fused):
        if "quantization" in raw:
            q = raw["quantization"]
            algo, exclude = q.get("quant_algo"), q.get("exclude_modules") or []
        else:
            algo, exclude = raw.get("quant_algo"), raw.get("ignore") or []
        if algo != "NVFP4":
            raise ValueError("ModelOpt currently only supports NVFP4 here, got %r" % algo)
        return cls(exclude, fused)

    def get_name(self):
        return "modelopt_fp4"

    def is_layer_excluded(self, prefix):
        if is_layer_skipped(prefix, self.exclude, self.fused):
            return True
        return any(fnmatch.fnmatch(prefix, pattern) for pattern in self.exclude)

    def get_linear_method(self, prefix):
        return None if self.is_layer_excluded(prefix) else NvFp4Linear(self, _NAMES)

    def get_moe_method(self, prefix):
        return None if self.is_layer_excluded(prefix) else NvFp4MoE(self, "ModelOptNvFp4FusedMoE", _NAMES)
