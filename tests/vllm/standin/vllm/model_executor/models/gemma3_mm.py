"""STAND-IN for vllm.model_executor.models.gemma3_mm (Gemma3ForConditionalGeneration), with the
SigLIP tower of models/siglip.py and Gemma-3's decoder of models/gemma3.py.

vLLM's hf_to_vllm_mapper: model.language_model. -> language_model.model., model.vision_tower. ->
vision_tower., model.multi_modal_projector. -> multi_modal_projector., lm_head. ->
language_model.lm_head. (the first Gemma-3 checkpoints store vLLM's names already). The tower and
the projector are built on every pipeline stage, and not at all when the image limit is 0
(--language-model-only, --limit-mm-per-prompt image 0). Tensor-parallel as vLLM shards SigLIP:
  vision_model.embeddings.patch_embedding      Conv2d [Hv, C, P, P] and bias: whole
  vision_model.embeddings.position_embedding   VocabParallelEmbedding ((img/P)^2 rows, padded to 64)
  encoder.layers.L.layer_norm1, layer_norm2    LayerNorm: whole
  encoder.layers.L.self_attn.qkv_proj          QKVParallelLinear from q_proj, k_proj, v_proj (bias)
  encoder.layers.L.self_attn.out_proj          RowParallelLinear, bias whole
  encoder.layers.L.mlp.fc1 / fc2               ColumnParallelLinear (bias) / RowParallelLinear
  vision_model.post_layernorm                  LayerNorm: whole
  multi_modal_projector.mm_input_projection_weight [Hv, H] (a plain Parameter), mm_soft_emb_norm
The decoder (Gemma3Model): embed_tokens and norm on every pipeline stage, layers with q_norm,
k_norm and four norms; no lm_head parameter (the logits use the embedding); lm_head.* skipped."""

import torch

from vllm.model_executor.layers.layernorm import GemmaRMSNorm, RMSNorm
from vllm.model_executor.layers.linear import ColumnParallelLinear, QKVParallelLinear, RowParallelLinear
from vllm.model_executor.layers.vocab_parallel_embedding import VocabParallelEmbedding
from vllm.model_executor.model_loader.weight_utils import default_weight_loader

from .llama import LlamaDecoderLayer, LlamaForCausalLM, _get
from .qwen3_vl import map_name
from .utils import make_layers

MAPPER = (("model.language_model.", "language_model.model."), ("model.vision_tower.", "vision_tower."),
          ("model.multi_modal_projector.", "multi_modal_projector."), ("lm_head.", "language_model.lm_head."))


class Gemma3DecoderLayer(LlamaDecoderLayer):
    qk_norm = True

    def __init__(self, config, quant_config=None, prefix=""):
        super().__init__(config, quant_config, prefix)
        eps = _get(config, "rms_norm_eps", 1e-6)
        self.pre_feedforward_layernorm = RMSNorm(config.hidden_size, eps)
        self.post_feedforward_layernorm = RMSNorm(config.hidden_size, eps)


class Gemma3Model(torch.nn.Module):
    def __init__(self, config, quant_config):
        super().__init__()
        self.embed_tokens = VocabParallelEmbedding(config.vocab_size, config.hidden_size)
        self.start_layer, self.end_layer, self.layers = make_layers(
            config.num_hidden_layers, lambda prefix: Gemma3DecoderLayer(config, quant_config, prefix),
            "model.layers")
        self.norm = GemmaRMSNorm(config.hidden_size, _get(config, "rms_norm_eps", 1e-6))


class Gemma3ForCausalLM(LlamaForCausalLM):
    def __init__(self, vllm_config, prefix=""):
        torch.nn.Module.__init__(self)
        config = vllm_config.model_config.hf_text_config
        self.config = config
        self.tied = True   # no lm_head parameter: lm_head.* is skipped
        self.model = Gemma3Model(config, vllm_config.model_config.quantization)

    def load_weights(self, weights):
        loaded = super().load_weights(weights)
        loaded.discard("lm_head.weight")
        return loaded


class SiglipAttention(torch.nn.Module):
    def __init__(self, hv, heads):
        super().__init__()
        self.qkv_proj = QKVParallelLinear(hv, hv // heads, heads, bias=True)
        self.out_proj = RowParallelLinear(hv, hv, bias=True)


class SiglipMLP(torch.nn.Module):
    def __init__(self, hv, inter):
        super().__init__()
        self.fc1 = ColumnParallelLinear(hv, inter, bias=True)
        self.fc2 = RowParallelLinear(inter, hv, bias=True)


class SiglipEncoderLayer(torch.nn.Module):
    def __init__(self, vc):
        super().__init__()
        eps = _get(vc, "layer_norm_eps", 1e-6)
        self.layer_norm1 = torch.nn.LayerNorm(vc.hidden_size, eps=eps)
        self.self_attn = SiglipAttention(vc.hidden_size, vc.num_attention_heads)
        self.layer_norm2 = torch.nn.LayerNorm(vc.hidden_size, eps=eps)
        self.mlp = SiglipMLP(vc.hidden_size, vc.intermediate_size)


class SiglipVisionModel(torch.nn.Module):
    stacked = ((".qkv_proj", ".q_proj", "q"), (".qkv_proj", ".k_proj", "k"), (".qkv_proj", ".v_proj", "v"))

    def __init__(self, vc):
        super().__init__()
        hv, ps = vc.hidden_size, vc.patch_size
        self.vision_model = torch.nn.Module()
        emb = self.vision_model.embeddings = torch.nn.Module()
        emb.patch_embedding = torch.nn.Conv2d(_get(vc, "num_channels", 3), hv, ps, stride=ps)
        emb.position_embedding = VocabParallelEmbedding((vc.image_size // ps) ** 2, hv)
        self.vision_model.encoder = torch.nn.Module()
        self.vision_model.encoder.layers = torch.nn.ModuleList(
            [SiglipEncoderLayer(vc) for _ in range(vc.num_hidden_layers)])
        self.vision_model.post_layernorm = torch.nn.LayerNorm(hv, eps=_get(vc, "layer_norm_eps", 1e-6))

    def load_weights(self, weights):
        params = dict(self.named_parameters())
        loaded = set()
        for name, w in weights:
            for fused, part, shard in self.stacked:
                if part in name:
                    name = name.replace(part, fused)
                    params[name].weight_loader(params[name], w, shard)
                    break
            else:
                p = params[name]
                getattr(p, "weight_loader", default_weight_loader)(p, w)
            loaded.add(name)
        return loaded


class Gemma3MultiModalProjector(torch.nn.Module):
    def __init__(self, config):
        super().__init__()
        hv, h = config.vision_config.hidden_size, config.text_config.hidden_size
        self.mm_input_projection_weight = torch.nn.Parameter(torch.zeros(hv, h), requires_grad=False)
        self.mm_soft_emb_norm = GemmaRMSNorm(hv, eps=_get(config.vision_config, "layer_norm_eps", 1e-6))


class Gemma3ForConditionalGeneration(torch.nn.Module):
    def __init__(self, vllm_config, prefix=""):
        super().__init__()
        mc = vllm_config.model_config
        mm = mc.multimodal_config
        if mm is not None and mm.get_limit_per_prompt("image") == 0:
            self.vision_tower = self.multi_modal_projector = None
        else:
            self.vision_tower = SiglipVisionModel(mc.hf_config.vision_config)
            self.multi_modal_projector = Gemma3MultiModalProjector(mc.hf_config)
        self.language_model = Gemma3ForCausalLM(vllm_config, prefix="language_model")

    def load_weights(self, weights):
        text, tower, projector = [], [], {}
        for name, w in weights:
            name = map_name(name, MAPPER)
            if name.startswith("language_model."):
                text.append((name[len("language_model."):], w))
            elif name.startswith("vision_tower.") and self.vision_tower is not None:
                tower.append((name[len("vision_tower."):], w))
            elif name.startswith("multi_modal_projector.") and self.multi_modal_projector is not None:
                projector[name] = w
        loaded = {"language_model." + n for n in self.language_model.load_weights(text)}
        if self.vision_tower is not None:
            loaded |= {"vision_tower." + n for n in self.vision_tower.load_weights(tower)}
            params = dict(self.named_parameters())
            for name, w in projector.items():
                default_weight_loader(params[name], w)
                loaded.add(name)
        return loaded
