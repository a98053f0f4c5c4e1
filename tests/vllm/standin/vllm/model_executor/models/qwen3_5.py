"""STAND-IN for vllm.model_executor.models.qwen3_5: Qwen3.5, dense and MoE, text-only
(Qwen3_5ForCausalLM, Qwen3_5MoeForCausalLM) and the ConditionalGeneration wrappers (the vision tower
is left out here: vLLM's `visual.*`; its checkpoint tensors model.visual.* are not loaded).

The layers are Qwen3-Next's (qwen3_next.py) with the gated DeltaNet's separate projections: the
checkpoint's in_proj_qkv and in_proj_z are loaded as shards (0, 1, 2) and 3 of in_proj_qkvz
(MergedColumnParallelLinear [K, K, V, V]: a rank holds its q, k, v then z rows), in_proj_b and
in_proj_a as shards 0 and 1 of in_proj_ba. The MLP is the sparse block on every layer of the MoE
model (text config model_type qwen3_5_moe_text), a dense MLP otherwise. The wrappers map
checkpoint names as vLLM's hf_to_vllm_mapper does: model.language_model. -> language_model.model.,
lm_head. -> language_model.lm_head., model.visual. -> visual. (dropped here), and skip mtp.*."""

import torch

from .qwen3_next import DecoderLayer, Qwen3NextForCausalLM, _get


class Qwen3_5DecoderLayer(DecoderLayer):
    interleaved = False

    @staticmethod
    def moe_layer(config, index):
        return _get(config, "model_type") == "qwen3_5_moe_text"


class Qwen3_5MoeDecoderLayer(Qwen3_5DecoderLayer):
    @staticmethod
    def moe_layer(config, index):
        return True


class Qwen3_5ForCausalLM(Qwen3NextForCausalLM):
    layer_cls = Qwen3_5DecoderLayer
    stacked_params_mapping = Qwen3NextForCausalLM.stacked_params_mapping + [
        (".in_proj_qkvz", ".in_proj_qkv", (0, 1, 2)), (".in_proj_qkvz", ".in_proj_z", 3),
        (".in_proj_ba", ".in_proj_b", 0), (".in_proj_ba", ".in_proj_a", 1)]


class Qwen3_5MoeForCausalLM(Qwen3_5ForCausalLM):
    layer_cls = Qwen3_5MoeDecoderLayer


class Qwen3_5ForConditionalGeneration(torch.nn.Module):
    causal_cls = Qwen3_5ForCausalLM
    mapper = (("model.language_model.", "language_model.model."), ("lm_head.", "language_model.lm_head."),
              ("model.visual.", "visual."))

    def __init__(self, vllm_config, prefix=""):
        super().__init__()
        self.language_model = self.causal_cls(vllm_config, prefix="language_model")

    def load_weights(self, weights):
        def mapped():
            for name, w in weights:
                for old, new in self.mapper:
                    if name.startswith(old):
                        name = new + name[len(old):]
                        break
                if name.startswith("language_model."):   # mtp.* and visual.* are not the text model's
                    yield name[len("language_model."):], w
        return {"language_model." + n for n in self.language_model.load_weights(mapped())}


class Qwen3_5MoeForConditionalGeneration(Qwen3_5ForConditionalGeneration):
    causal_cls = Qwen3_5MoeForCausalLM
