"""STAND-IN for vllm.model_executor.layers.quantization: the quantization config of a model,
built as vLLM builds it (get_quant_config): compressed-tensors W4A16 / W8A16 pack-quantized and
NVFP4 (compressed_tensors.py), ModelOpt NVFP4 (modelopt.py) from config.json's
quantization_config (ModelConfig reads hf_quant_config.json when config.json has none); any other
method stays the method's name, as the stand-in layers used it before (gpt_oss's "mxfp4", "fp8").
Block fp8 (fp8.py: Fp8Config, DeepSeek-V4's config) is built by the models that use it."""


def get_quant_config(model_config, packed_modules_mapping=None):
    method = getattr(model_config, "quantization", None)
    raw = getattr(model_config, "quant_config_dict", None)
    if method == "compressed-tensors" and raw is not None:
        from .compressed_tensors import CompressedTensorsConfig
        return CompressedTensorsConfig.from_config(raw, packed_modules_mapping or {})
    if method in ("modelopt", "modelopt_fp4") and raw is not None:
        from .modelopt import ModelOptNvFp4Config
        return ModelOptNvFp4Config.from_config(raw, packed_modules_mapping or {})
    return method


def linear_method(quant_config, prefix):
    """The quantized linear method of the layer named prefix, or None (unquantized)."""
    get = getattr(quant_config, "get_linear_method", None)
    return get(prefix) if get is not None else None


def moe_method(quant_config, prefix):
    """The quantized MoE method of the FusedMoE layer named prefix, or None (unquantized)."""
    get = getattr(quant_config, "get_moe_method", None)
    return get(prefix) if get is not None else None
