"""STAND-IN for vllm.model_executor.models.qwen3_vl: Qwen3VLForConditionalGeneration, its vision
tower Qwen3_VisionTransformer (`visual.*`) and Qwen3's decoder (`language_model.*`).

vLLM's hf_to_vllm_mapper renames the checkpoint's names: model.visual. -> visual., lm_head. ->
language_model.lm_head., model.language_model. -> language_model.model. (a checkpoint that
stores vLLM's names already is left as it is). The tower is built on every pipeline stage, and
not at all (visual None, its tensors skipped) when the image and video limits are both 0
(--language-model-only, --limit-mm-per-prompt). Tensor-parallel as vLLM shards it by default
(mm_encoder_tp_mode "weights"):
  patch_embed.proj                     Conv3d [Hv, C, Tp, P, P] and bias: whole (default_weight_loader)
  pos_embed                            nn.Embedding [Npos, Hv]: whole
  blocks.B.norm1, norm2                LayerNorm weight and bias: whole
  blocks.B.attn.qkv                    QKVParallelLinear (Nh heads, Nh kv heads, bias): the
                                       checkpoint's fused qkv split into q, k, v (shard id None)
  blocks.B.attn.proj                   RowParallelLinear, bias whole
  blocks.B.mlp.linear_fc1 / fc2        ColumnParallelLinear (bias) / RowParallelLinear
  merger, deepstack_merger_list.K      norm (LayerNorm over Hv; over Hm = Hv * merge^2 for the
                                       deepstack ones), linear_fc1 ColumnParallelLinear [Hm, Hm],
                                       linear_fc2 RowParallelLinear [Out, Hm]
Qwen3.5's wrappers (vLLM models/qwen3_5.py) use this same tower."""

import torch

from vllm.model_executor.layers.linear import ColumnParallelLinear, QKVParallelLinear, RowParallelLinear
from vllm.model_executor.model_loader.weight_utils import default_weight_loader

from .llama import Qwen3ForCausalLM, _get

MAPPER = (("model.visual.", "visual."), ("lm_head.", "language_model.lm_head."),
          ("model.language_model.", "language_model.model."))


def map_name(name, mapper):
    for old, new in mapper:
        if name.startswith(old):
            return new + name[len(old):]
    return name


class VisionMLP(torch.nn.Module):
    def __init__(self, dim, hidden):
        super().__init__()
        self.linear_fc1 = ColumnParallelLinear(dim, hidden, bias=True)
        self.linear_fc2 = RowParallelLinear(hidden, dim, bias=True)


class VisionAttention(torch.nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.qkv = QKVParallelLinear(dim, dim // heads, heads, heads, bias=True)
        self.proj = RowParallelLinear(dim, dim, bias=True)


class VisionBlock(torch.nn.Module):
    def __init__(self, dim, heads, hidden):
        super().__init__()
        self.norm1 = torch.nn.LayerNorm(dim, eps=1e-6)
        self.norm2 = torch.nn.LayerNorm(dim, eps=1e-6)
        self.attn = VisionAttention(dim, heads)
        self.mlp = VisionMLP(dim, hidden)


class PatchMerger(torch.nn.Module):
    def __init__(self, out, dim, merge, postshuffle_norm=False):
        super().__init__()
        hm = dim * merge * merge
        self.norm = torch.nn.LayerNorm(hm if postshuffle_norm else dim, eps=1e-6)
        self.linear_fc1 = ColumnParallelLinear(hm, hm, bias=True)
        self.linear_fc2 = RowParallelLinear(hm, out, bias=True)


class Qwen3_VisionTransformer(torch.nn.Module):
    def __init__(self, vc):
        super().__init__()
        hv, merge = vc.hidden_size, vc.spatial_merge_size
        self.patch_embed = torch.nn.Module()
        k = (vc.temporal_patch_size, vc.patch_size, vc.patch_size)
        self.patch_embed.proj = torch.nn.Conv3d(_get(vc, "in_channels", 3), hv, k, stride=k, bias=True)
        self.pos_embed = torch.nn.Embedding(vc.num_position_embeddings, hv)
        self.blocks = torch.nn.ModuleList([VisionBlock(hv, vc.num_heads, vc.intermediate_size)
                                           for _ in range(vc.depth)])
        self.merger = PatchMerger(vc.out_hidden_size, hv, merge)
        deep = _get(vc, "deepstack_visual_indexes", [])
        self.deepstack_merger_list = torch.nn.ModuleList(
            [PatchMerger(vc.out_hidden_size, hv, merge, True) for _ in deep])

    def load_weights(self, weights):
        params = dict(self.named_parameters())
        loaded = set()
        for name, w in weights:
            p = params[name]
            getattr(p, "weight_loader", default_weight_loader)(p, w)
            loaded.add(name)
        return loaded


class Qwen3VLForConditionalGeneration(torch.nn.Module):
    causal_cls = Qwen3ForCausalLM
    mapper = MAPPER

    def __init__(self, vllm_config, prefix=""):
        super().__init__()
        mc = vllm_config.model_config
        mm = mc.multimodal_config
        if mm is not None and mm.get_limit_per_prompt("image") == 0 and mm.get_limit_per_prompt("video") == 0:
            self.visual = None
        else:
            self.visual = Qwen3_VisionTransformer(mc.hf_config.vision_config)
        self.language_model = self.causal_cls(vllm_config, prefix="language_model")

    def load_weights(self, weights):
        text, tower = [], []
        for name, w in weights:
            name = map_name(name, self.mapper)
            if name.startswith("language_model."):
                text.append((name[len("language_model."):], w))
            elif name.startswith("visual.") and self.visual is not None:
                tower.append((name[len("visual."):], w))
        loaded = {"language_model." + n for n in self.language_model.load_weights(text)}
        if self.visual is not None:
            loaded |= {"visual." + n for n in self.visual.load_weights(tower)}
        return loaded
