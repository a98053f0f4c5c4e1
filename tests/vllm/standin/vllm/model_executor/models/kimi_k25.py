"""STAND-IN for vllm.model_executor.models.kimi_k25 (KimiK25ForConditionalGeneration) and the
parameters of its vision tower (models/kimi_k25_vit.py: MoonViT3dPretrainedModel,
KimiK25MultiModalProjector).

The model: vision_tower and mm_projector built on every pipeline stage and without the
checkpoint's quant_config (neither class takes one), language_model = DeepseekV2Model of
text_config (deepseek_v2.py) with the quant_config (which ModelConfig finds under
text_config.quantization_config: W4A16 routed experts), lm_head (ParallelLMHead) on the last stage.

The tower (mm_encoder_tp_mode "weights"):
  patch_embed.proj                  Conv2d [Hv, 3, p, p] and bias: whole (default_weight_loader)
  patch_embed.pos_emb.weight        a plain Parameter [Gh, Gw, Hv]: whole
  encoder.blocks.B.norm0, norm1     LayerNorm weight and bias: whole
  encoder.blocks.B.wqkv             QKVParallelLinear (Nh heads, Nh kv heads, bias): the
                                    checkpoint's fused tensor split into q, k, v (no shard id)
  encoder.blocks.B.wo               RowParallelLinear, bias whole
  encoder.blocks.B.mlp.fc0 / fc1    ColumnParallelLinear / RowParallelLinear (MLP2), with biases
  encoder.final_layernorm           LayerNorm: whole
  mm_projector.pre_norm             LayerNorm over Hv; linear_1 [Hm, Hm] and linear_2 [H, Hm]
                                    ReplicatedLinear with biases, Hm = Hv * merge_kernel h * w

load_weights (vLLM's, in order): rotary_emb.inv_freq / cos_cached / sin_cached and the
multi-token-prediction layers (a name containing model.layers.{num_hidden_layers + i}.) skipped;
the key map applied to every name (language_model.lm_head -> lm_head, language_model.model ->
language_model, mm_projector.proj.0 / proj.2 -> mm_projector.linear_1 / linear_2); a name
containing "vision" to its parameter's weight_loader; else the stacked mapping (gate_up_proj from
gate_proj / up_proj; fused_qkv_a_proj from q_a_proj / kv_a_proj_with_mqa with a q LoRA), the
expert mapping (FusedMoE.make_expert_params_mapping, no redundant experts), or the parameter's
own weight_loader; a missing bias and the tensors of other stages skipped. Returns None, as vLLM's
does."""

import torch

from vllm.distributed import get_pp_group
from vllm.model_executor.layers.fused_moe import FusedMoE
from vllm.model_executor.layers.linear import (ColumnParallelLinear, QKVParallelLinear, ReplicatedLinear,
                                               RowParallelLinear)
from vllm.model_executor.layers.quantization import get_quant_config
from vllm.model_executor.layers.vocab_parallel_embedding import ParallelLMHead
from vllm.model_executor.model_loader.weight_utils import default_weight_loader

from .deepseek_v2 import DeepseekV2ForCausalLM, DeepseekV2Model
from .llama import _get
from .utils import PPMissingLayer, is_pp_missing_parameter

KEYS = (("language_model.lm_head", "lm_head"), ("language_model.model", "language_model"),
        ("mm_projector.proj.0", "mm_projector.linear_1"), ("mm_projector.proj.2", "mm_projector.linear_2"))


class MLP2(torch.nn.Module):
    def __init__(self, dim, hidden):
        super().__init__()
        self.fc0 = ColumnParallelLinear(dim, hidden, bias=True)
        self.fc1 = RowParallelLinear(hidden, dim, bias=True)


class MoonViTEncoderLayer(torch.nn.Module):
    def __init__(self, heads, dim, hidden):
        super().__init__()
        self.norm0 = torch.nn.LayerNorm(dim)
        self.norm1 = torch.nn.LayerNorm(dim)
        self.mlp = MLP2(dim, hidden)
        self.wqkv = QKVParallelLinear(dim, dim // heads, heads, heads, bias=True)
        self.wo = RowParallelLinear(dim, dim, bias=True)


class MoonViT3dPretrainedModel(torch.nn.Module):
    def __init__(self, vc):
        super().__init__()
        hv, p = vc.hidden_size, vc.patch_size
        self.patch_embed = torch.nn.Module()
        self.patch_embed.proj = torch.nn.Conv2d(3, hv, (p, p), stride=(p, p), bias=True)
        self.patch_embed.pos_emb = torch.nn.Module()
        self.patch_embed.pos_emb.weight = torch.nn.Parameter(
            torch.empty(vc.init_pos_emb_height, vc.init_pos_emb_width, hv), requires_grad=False)
        self.encoder = torch.nn.Module()
        self.encoder.blocks = torch.nn.ModuleList([MoonViTEncoderLayer(vc.num_attention_heads, hv,
                                                                       vc.intermediate_size)
                                                   for _ in range(vc.num_hidden_layers)])
        self.encoder.final_layernorm = torch.nn.LayerNorm(hv)


class KimiK25MultiModalProjector(torch.nn.Module):
    def __init__(self, vc, text_hidden):
        super().__init__()
        kh, kw = _get(vc, "merge_kernel_size", [2, 2])
        hm = vc.hidden_size * kh * kw
        self.pre_norm = torch.nn.LayerNorm(vc.hidden_size, eps=1e-5)
        self.linear_1 = ReplicatedLinear(hm, hm, bias=True)
        self.linear_2 = ReplicatedLinear(hm, text_hidden, bias=True)


class KimiK25ForConditionalGeneration(torch.nn.Module):
    packed_modules_mapping = DeepseekV2ForCausalLM.packed_modules_mapping

    def __init__(self, vllm_config, prefix=""):
        super().__init__()
        mc = vllm_config.model_config
        config = mc.hf_config
        text = config.text_config
        self.config = config
        self.vision_tower = MoonViT3dPretrainedModel(config.vision_config)
        self.mm_projector = KimiK25MultiModalProjector(config.vision_config, text.hidden_size)
        quant = get_quant_config(mc, self.packed_modules_mapping)
        self.language_model = DeepseekV2Model(text, quant, prefix="language_model")
        vocab = _get(config, "vocab_size") or text.vocab_size
        self.lm_head = ParallelLMHead(vocab, text.hidden_size) if get_pp_group().is_last_rank else PPMissingLayer()

    def _mtp(self, name):
        text = self.config.text_config
        first = text.num_hidden_layers
        return any("model.layers.%d." % (first + i) in name
                   for i in range(_get(text, "num_nextn_predict_layers", 0) or 0))

    def load_weights(self, weights):
        text = self.config.text_config
        stacked = [(".gate_up_proj", ".gate_proj", 0), (".gate_up_proj", ".up_proj", 1)]
        if _get(text, "kv_lora_rank") and _get(text, "q_lora_rank"):
            stacked += [(".fused_qkv_a_proj", ".q_a_proj", 0), (".fused_qkv_a_proj", ".kv_a_proj_with_mqa", 1)]
        experts = FusedMoE.make_expert_params_mapping("gate_proj", "down_proj", "up_proj",
                                                      _get(text, "n_routed_experts", 0) or 0, 0)
        params = dict(self.named_parameters())
        for name, w in weights:
            if any("rotary_emb." + k in name for k in ("inv_freq", "cos_cached", "sin_cached")) or self._mtp(name):
                continue
            for old, new in KEYS:
                name = name.replace(old, new)
            if "vision" not in name and self._stacked_or_expert(params, name, w, stacked, experts):
                continue
            if (name.endswith(".bias") and name not in params) or is_pp_missing_parameter(name, self):
                continue
            p = params[name]
            getattr(p, "weight_loader", default_weight_loader)(p, w)
        return None

    def _stacked_or_expert(self, params, name, w, stacked, experts):
        """True when the stacked or the expert mapping took the tensor (or skipped it)."""
        for param_part, ckpt_part, shard in stacked:
            if ckpt_part not in name or ("mlp.experts." in name and name not in params):
                continue
            name = name.replace(ckpt_part, param_part)
            if (name.endswith(".bias") and name not in params) or is_pp_missing_parameter(name, self):
                return True
            params[name].weight_loader(params[name], w, shard)
            return True
        for param_part, ckpt_part, expert, shard in experts:
            if ckpt_part not in name:
                continue
            name = name.replace(ckpt_part, param_part)
            if is_pp_missing_parameter(name, self):
                return True
            p = params[name]
            p.weight_loader(p, w, name, expert_id=expert, shard_id=shard)
            return True
        return False
