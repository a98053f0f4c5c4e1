"""STAND-IN for vllm.model_executor.models: ModelRegistry maps an architecture name of config.json
to its model class. EagleLlamaForCausalLM stands for a draft architecture that vLLM knows and
shardload has no spec for (here it is built as the Llama decoder)."""


class _Registry:
    def _classes(self):
        from .llama import LlamaForCausalLM, Qwen3ForCausalLM
        from .gpt_oss import GptOssForCausalLM
        from .llama4 import Llama4ForConditionalGeneration
        from .mixtral import MixtralForCausalLM
        from .deepseek_v2 import DeepseekV2ForCausalLM, DeepseekV3ForCausalLM, GlmMoeDsaForCausalLM
        from .deepseek_mtp import DeepSeekMTP
        from .minimax_m2 import MiniMaxM2ForCausalLM
        from .deepseek_v4 import DeepseekV4ForCausalLM
        from . import gemma3_mm, kimi_k25, qwen3_5, qwen3_next, qwen3_vl
        from .internlm2 import InternLM2ForCausalLM
        from .starcoder2 import Starcoder2ForCausalLM
        from .loader_variants import (ArithLlamaForCausalLM, SparsityLlamaForCausalLM,
                                      StrayLlamaForCausalLM)
        recorded = {"InternLM2ForCausalLM": InternLM2ForCausalLM,   # (the recorder's tests)
                    "Starcoder2ForCausalLM": Starcoder2ForCausalLM,
                    "ArithLlamaForCausalLM": ArithLlamaForCausalLM,
                    "SparsityLlamaForCausalLM": SparsityLlamaForCausalLM,
                    "StrayLlamaForCausalLM": StrayLlamaForCausalLM}
        deepseek = {"DeepseekV2ForCausalLM": DeepseekV2ForCausalLM,   # as vLLM's registry maps them
                    "DeepseekV3ForCausalLM": DeepseekV3ForCausalLM,
                    "DeepseekV32ForCausalLM": DeepseekV3ForCausalLM,
                    "GlmMoeDsaForCausalLM": GlmMoeDsaForCausalLM}
        frontier = {**deepseek, "DeepSeekMTPModel": DeepSeekMTP, "MiniMaxM2ForCausalLM": MiniMaxM2ForCausalLM,
                    "DeepseekV4ForCausalLM": DeepseekV4ForCausalLM}
        qwen = {"Qwen3NextForCausalLM": qwen3_next.Qwen3NextForCausalLM,
                "Qwen3_5ForCausalLM": qwen3_5.Qwen3_5ForCausalLM,
                "Qwen3_5MoeForCausalLM": qwen3_5.Qwen3_5MoeForCausalLM,
                "Qwen3_5ForConditionalGeneration": qwen3_5.Qwen3_5ForConditionalGeneration,
                "Qwen3_5MoeForConditionalGeneration": qwen3_5.Qwen3_5MoeForConditionalGeneration}
        return {**recorded, **frontier, **qwen,
                "LlamaForCausalLM": LlamaForCausalLM, "MistralForCausalLM": LlamaForCausalLM,
                "Qwen3ForCausalLM": Qwen3ForCausalLM, "MixtralForCausalLM": MixtralForCausalLM,
                "EagleLlamaForCausalLM": LlamaForCausalLM, "GptOssForCausalLM": GptOssForCausalLM,
                "Llama4ForConditionalGeneration": Llama4ForConditionalGeneration,
                "Qwen3VLForConditionalGeneration": qwen3_vl.Qwen3VLForConditionalGeneration,
                "Gemma3ForConditionalGeneration": gemma3_mm.Gemma3ForConditionalGeneration,
                "KimiK25ForConditionalGeneration": kimi_k25.KimiK25ForConditionalGeneration}

    def get_supported_archs(self):
        return list(self._classes())

    def resolve(self, architectures):
        classes = self._classes()
        for a in architectures:
            if a in classes:
                return classes[a]
        raise ValueError("Model architectures %s are not supported for now. Supported "
                         "architectures: %s" % (architectures, sorted(classes)))


ModelRegistry = _Registry()
