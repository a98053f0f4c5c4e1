"""packed_cases.py -- the cases of the vLLM plugin tests for pack-quantized and NVFP4 checkpoints
(harness.cases(world, "packed")): the stand-in's quantized linear and FusedMoE parameters
(tests/vllm/standin/vllm/model_executor/layers/quantization) loaded through the plugin against
their own weight loaders over the whole checkpoint. mixtral_w4a16's w13/w2_weight_shape (vLLM
holds them in the model dtype, shardload plans the checkpoint's integers) are handed to the
plugin's conversion: two per MoE layer."""


def packed_cases(C, world):
    if world == 1:
        return [C("ct_w4a16 W4A16 group 32", "ct_w4a16"),
                C("ct_w8a16 W8A16 channel zero points", "ct_w8a16"),
                C("ct_nvfp4 compressed-tensors NVFP4", "ct_nvfp4"),
                C("modelopt_nvfp4 ModelOpt NVFP4", "modelopt_nvfp4"),
                C("mixtral_w4a16 Marlin experts", "mixtral_w4a16", expect_handed=4),
                C("mixtral_modelopt hf_quant_config.json", "mixtral_modelopt")]
    if world == 2:
        return [C("ct_w4a16 tp2", "ct_w4a16", tp=2),
                C("ct_w4a16_g128 tp2 zero points", "ct_w4a16_g128", tp=2),
                C("ct_w8a16 tp2 channel scales whole on row-parallel", "ct_w8a16", tp=2),
                C("ct_nvfp4 tp2", "ct_nvfp4", tp=2),
                C("modelopt_nvfp4 tp2", "modelopt_nvfp4", tp=2),
                C("mixtral_w4a16 tp2", "mixtral_w4a16", tp=2, expect_handed=4),
                C("mixtral_w4a16 tp2 ep", "mixtral_w4a16", tp=2, ep=True, expect_handed=4),
                C("mixtral_modelopt tp2", "mixtral_modelopt", tp=2),
                C("mixtral_modelopt dp2 ep", "mixtral_modelopt", dp=2, ep=True)]
    return []
