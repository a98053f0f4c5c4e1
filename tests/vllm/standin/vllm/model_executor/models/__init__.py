"""STAND-IN for vllm.model_executor.models: ModelRegistry maps an architecture name of config.json
to its model class. EagleLlamaForCausalLM stands for a draft architecture that vLLM knows and
shardload has no spec for (here it is built as the Llama decoder)."""


class _Registry:
    def _classes(self):
        from .llama import LlamaForCausalLM, Qwen3ForCausalLM
        from .gpt_oss import GptOssForCausalLM
        from .llama4 import Llama4ForConditionalGeneration
        from .mixtral import MixtralForCausalLM
        from .deepseek_v2 import DeepseekV2ForCausalLM, DeepseekV3ForCausalLM
        from .internlm2 import InternLM2ForCausalLM
        from .starcoder2 import Starcoder2ForCausalLM
        from .loader_variants import (ArithLlamaForCausalLM, SparsityLlamaForCausalLM,
                                      StrayLlamaForCausalLM)
        recorded = {"InternLM2ForCausalLM": InternLM2ForCausalLM,   # (the recorder's tests)
                    "Starcoder2ForCausalLM": Starcoder2ForCausalLM,
                    "DeepseekV2ForCausalLM": DeepseekV2ForCausalLM,
                    "DeepseekV3ForCausalLM": DeepseekV3ForCausalLM,
                    "ArithLlamaForCausalLM": ArithLlamaForCausalLM,
                    "SparsityLlamaForCausalLM": SparsityLlamaForCausalLM,
                    "StrayLlamaForCausalLM": StrayLlamaForCausalLM}
        return {**recorded, "LlamaForCausalLM": LlamaForCausalLM, "MistralForCausalLM": LlamaForCausalLM,
                "Qwen3ForCausalLM": Qwen3ForCausalLM, "MixtralForCausalLM": MixtralForCausalLM,
                "EagleLlamaForCausalLM": LlamaForCausalLM, "GptOssForCausalLM": GptOssForCausalLM,
                "Llama4ForConditionalGeneration": Llama4ForConditionalGeneration}

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
