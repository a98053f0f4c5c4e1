"""STAND-IN for vllm.model_executor.models.qwen3_next (Qwen3NextForCausalLM) and the gated DeltaNet
layer it shares with Qwen3.5 (vLLM's layers/mamba/gdn: QwenGatedDeltaNetAttention).

Names: model.{embed_tokens, layers.N.{input_layernorm, post_attention_layernorm, linear_attn |
self_attn, mlp}, norm}, lm_head. layer_types (else every full_attention_interval-th layer) picks
linear_attn or self_attn:
- linear_attn (gated DeltaNet): in_proj_qkvz (MergedColumnParallelLinear: Qwen3-Next one output
  [2K + 2V], the checkpoint's key-head-group order kept, so contiguous row blocks; Qwen3.5 four
  outputs [K, K, V, V]), in_proj_ba (one output [2*nv] / two [nv, nv]), conv1d (ColumnParallel
  [K+K+V, kernel] unsqueezed to [., 1, kernel], loaded by mamba_v2_sharded_weight_loader: the q, k
  and v sections each split), A_log and dt_bias [nv/tp] (sharded_weight_loader(0)), norm
  (RMSNormGated [dv]), out_proj (RowParallelLinear);
- self_attn: qkv_proj (QKVParallelLinear of 2*Hq "heads" with attn_output_gate: q and gate rows of
  each head), o_proj, q_norm / k_norm [d];
- mlp: a Qwen2-MoE sparse block {gate (ReplicatedLinear [E, H]), shared_expert_gate (ReplicatedLinear
  [1, H]), shared_expert (gate_up_proj, down_proj), experts (FusedMoE)} where num_experts > 0, not in
  mlp_only_layers and on every decoder_sparse_step-th layer (Qwen3.5: by model_type), else a dense MLP.
load_weights: mtp.* and rotary buffers skipped; q/k/v_proj -> qkv_proj, gate/up_proj -> gate_up_proj
(shard 0, 1, the shared expert's too); Qwen3.5's in_proj_qkv -> in_proj_qkvz shards (0, 1, 2),
in_proj_z -> 3, in_proj_b / in_proj_a -> in_proj_ba 0 / 1; experts one tensor each through
FusedMoE.make_expert_params_mapping, or stacked (experts.gate_up_proj [E, 2I, H] chunked into w1, w3;
experts.down_proj [E, H, I] as w2) handed to FusedMoE.weight_loader one expert at a time, as vLLM's
Qwen3_5Model does (no transpose)."""

import torch

from vllm.config import get_current_vllm_config
from vllm.distributed import get_pp_group, get_tensor_model_parallel_rank, get_tensor_model_parallel_world_size
from vllm.model_executor.layers.fused_moe import FusedMoE
from vllm.model_executor.layers.layernorm import GemmaRMSNorm, RMSNormGated
from vllm.model_executor.layers.linear import (ColumnParallelLinear, MergedColumnParallelLinear,
                                               QKVParallelLinear, ReplicatedLinear, RowParallelLinear)
from vllm.model_executor.layers.mamba.mamba_mixer2 import mamba_v2_sharded_weight_loader
from vllm.model_executor.layers.vocab_parallel_embedding import ParallelLMHead, VocabParallelEmbedding
from vllm.model_executor.model_loader.weight_utils import default_weight_loader, sharded_weight_loader
from vllm.model_executor.utils import set_weight_attrs

from .llama import LlamaMLP, _get
from .utils import PPMissingLayer, is_pp_missing_parameter, make_layers


def layer_type(config, index):
    types = _get(config, "layer_types")
    if types is not None:
        return types[index]
    interval = _get(config, "full_attention_interval", 4)
    return "linear_attention" if (index + 1) % interval else "full_attention"


class GatedDeltaNet(torch.nn.Module):
    def __init__(self, config, interleaved, prefix=""):
        super().__init__()
        tp, rank = get_tensor_model_parallel_world_size(), get_tensor_model_parallel_rank()
        H = config.hidden_size
        nk, nv = config.linear_num_key_heads, config.linear_num_value_heads
        K, V = nk * config.linear_key_head_dim, nv * config.linear_value_head_dim
        self.conv1d = ColumnParallelLinear(config.linear_conv_kernel_dim, 2 * K + V, bias=False,
                                           prefix=prefix + ".conv1d")
        self.conv1d.weight.data = self.conv1d.weight.data.unsqueeze(1)
        sizes = [2 * K + 2 * V] if interleaved else [K, K, V, V]
        self.in_proj_qkvz = MergedColumnParallelLinear(H, sizes, bias=False, prefix=prefix + ".in_proj_qkvz")
        self.in_proj_ba = MergedColumnParallelLinear(H, [2 * nv] if interleaved else [nv, nv], bias=False,
                                                     prefix=prefix + ".in_proj_ba")
        delattr(self.conv1d.weight, "weight_loader")
        set_weight_attrs(self.conv1d.weight, {"weight_loader": mamba_v2_sharded_weight_loader(
            [(K, 0, False), (K, 0, False), (V, 0, False)], tp, rank)})
        assert nv % tp == 0
        self.dt_bias = torch.nn.Parameter(torch.ones(nv // tp), requires_grad=False)
        self.A_log = torch.nn.Parameter(torch.empty(nv // tp, dtype=torch.float32), requires_grad=False)
        set_weight_attrs(self.A_log, {"weight_loader": sharded_weight_loader(0)})
        set_weight_attrs(self.dt_bias, {"weight_loader": sharded_weight_loader(0)})
        self.norm = RMSNormGated(config.linear_value_head_dim, eps=_get(config, "rms_norm_eps", 1e-6))
        self.out_proj = RowParallelLinear(V, H, bias=False, prefix=prefix + ".out_proj")


class GatedAttention(torch.nn.Module):
    def __init__(self, config, prefix=""):
        super().__init__()
        H, heads = config.hidden_size, config.num_attention_heads
        kv = _get(config, "num_key_value_heads", heads)
        d = _get(config, "head_dim", H // heads)
        gate = bool(_get(config, "attn_output_gate", True))
        assert heads % get_tensor_model_parallel_world_size() == 0
        self.qkv_proj = QKVParallelLinear(H, d, heads * (1 + gate), kv, bias=bool(_get(config, "qkv_bias", False)),
                                          prefix=prefix + ".qkv_proj")
        self.o_proj = RowParallelLinear(heads * d, H, bias=False, prefix=prefix + ".o_proj")
        eps = _get(config, "rms_norm_eps", 1e-6)
        self.q_norm = GemmaRMSNorm(d, eps)
        self.k_norm = GemmaRMSNorm(d, eps)


class SparseMoeBlock(torch.nn.Module):
    def __init__(self, config, prefix=""):
        super().__init__()
        parallel = get_current_vllm_config().parallel_config
        H, E = config.hidden_size, config.num_experts
        self.gate = ReplicatedLinear(H, E, bias=False, prefix=prefix + ".gate")
        self.shared_expert_gate = ReplicatedLinear(H, 1, bias=False, prefix=prefix + ".shared_expert_gate")
        if _get(config, "shared_expert_intermediate_size", 0) > 0:
            self.shared_expert = LlamaMLP(H, config.shared_expert_intermediate_size,
                                          prefix=prefix + ".shared_expert")
        self.experts = FusedMoE(E, config.num_experts_per_tok, H, config.moe_intermediate_size,
                                prefix=prefix + ".experts", enable_eplb=parallel.enable_eplb,
                                num_redundant_experts=parallel.eplb_config.num_redundant_experts)


class DecoderLayer(torch.nn.Module):
    interleaved = True   # Qwen3-Next's fused in_proj_qkvz / in_proj_ba

    def __init__(self, config, prefix=""):
        super().__init__()
        index = int(prefix.rsplit(".", 1)[1])
        if layer_type(config, index) == "linear_attention":
            self.linear_attn = GatedDeltaNet(config, self.interleaved, prefix + ".linear_attn")
        else:
            self.self_attn = GatedAttention(config, prefix + ".self_attn")
        if self.moe_layer(config, index):
            self.mlp = SparseMoeBlock(config, prefix + ".mlp")
        else:
            self.mlp = LlamaMLP(config.hidden_size, config.intermediate_size, prefix=prefix + ".mlp")
        eps = _get(config, "rms_norm_eps", 1e-6)
        self.input_layernorm = GemmaRMSNorm(config.hidden_size, eps)
        self.post_attention_layernorm = GemmaRMSNorm(config.hidden_size, eps)
        if _get(config, "layer_scale", False):
            self.attn_layer_scale = torch.nn.Parameter(torch.zeros(1, 1, config.hidden_size), requires_grad=False)
            self.ffn_layer_scale = torch.nn.Parameter(torch.zeros(1, 1, config.hidden_size), requires_grad=False)

    @staticmethod
    def moe_layer(config, index):
        step = _get(config, "decoder_sparse_step", 1)
        return (index not in (_get(config, "mlp_only_layers", []) or []) and
                _get(config, "num_experts", 0) > 0 and (index + 1) % step == 0)


class Qwen3NextModel(torch.nn.Module):
    def __init__(self, config, layer_cls, prefix="model"):
        super().__init__()
        pp = get_pp_group()
        tied = bool(_get(config, "tie_word_embeddings", False))
        self.embed_tokens = VocabParallelEmbedding(config.vocab_size, config.hidden_size) \
            if pp.is_first_rank or (tied and pp.is_last_rank) else PPMissingLayer()
        self.start_layer, self.end_layer, self.layers = make_layers(
            config.num_hidden_layers, lambda prefix: layer_cls(config, prefix), prefix + ".layers")
        self.norm = GemmaRMSNorm(config.hidden_size, _get(config, "rms_norm_eps", 1e-6)) \
            if pp.is_last_rank else PPMissingLayer()


class Qwen3NextForCausalLM(torch.nn.Module):
    layer_cls = DecoderLayer
    stacked_params_mapping = [(".qkv_proj", ".q_proj", "q"), (".qkv_proj", ".k_proj", "k"),
                              (".qkv_proj", ".v_proj", "v"), (".gate_up_proj", ".gate_proj", 0),
                              (".gate_up_proj", ".up_proj", 1)]

    def __init__(self, vllm_config, prefix=""):
        super().__init__()
        config = vllm_config.model_config.hf_text_config
        self.config = config
        self.num_redundant_experts = vllm_config.parallel_config.eplb_config.num_redundant_experts
        model_prefix = prefix + ".model" if prefix else "model"
        self.model = Qwen3NextModel(config, self.layer_cls, model_prefix)
        self.tied = bool(_get(config, "tie_word_embeddings", False))
        if get_pp_group().is_last_rank:
            self.lm_head = ParallelLMHead(config.vocab_size, config.hidden_size)
            if self.tied:
                self.lm_head = self.lm_head.tie_weights(self.model.embed_tokens)
        else:
            self.lm_head = PPMissingLayer()

    def _expert(self, name, w, params, loaded):
        """A routed expert tensor (one expert's, or stacked); True when name is one."""
        if ".experts." not in name:
            return False
        if name.endswith((".experts.gate_up_proj", ".experts.down_proj")):
            moe_prefix = name.rsplit(".", 1)[0]
            target = moe_prefix + (".w13_weight" if name.endswith("gate_up_proj") else ".w2_weight")
            if is_pp_missing_parameter(target, self):
                return True
            p = params[target]
            parts = (("w1", w.chunk(2, dim=-2)[0]), ("w3", w.chunk(2, dim=-2)[1])) \
                if name.endswith("gate_up_proj") else (("w2", w),)
            for shard, t in parts:
                for e in range(t.shape[0]):
                    p.weight_loader(p, t[e], target, shard_id=shard, expert_id=e, return_success=True)
            loaded.add(target)
            return True
        mapping = FusedMoE.make_expert_params_mapping("gate_proj", "down_proj", "up_proj", self.config.num_experts,
                                                      self.num_redundant_experts)
        for param_part, ckpt_part, expert, shard in mapping:
            if ckpt_part not in name:
                continue
            target = name.replace(ckpt_part, param_part)
            if is_pp_missing_parameter(target, self):
                return True
            p = params[target]
            p.weight_loader(p, w, target, shard_id=shard, expert_id=expert)
            loaded.add(target)
        return True

    def load_weights(self, weights):
        params = dict(self.named_parameters())
        loaded = set()
        for name, w in weights:
            if name.startswith("mtp.") or "rotary_emb.inv_freq" in name or \
                    (self.tied and name.startswith("lm_head.")):
                continue
            if self._expert(name, w, params, loaded):
                continue
            for param_part, ckpt_part, shard in self.stacked_params_mapping:
                if ckpt_part not in name:
                    continue
                target = name.replace(ckpt_part, param_part)
                if not is_pp_missing_parameter(target, self):
                    p = params[target]
                    p.weight_loader(p, w, shard)
                    loaded.add(target)
                break
            else:
                if is_pp_missing_parameter(name, self):
                    continue
                p = params[name]
                getattr(p, "weight_loader", default_weight_loader)(p, w)
                loaded.add(name)
        if self.tied and "model.embed_tokens.weight" in loaded:
            loaded.add("lm_head.weight")
        return loaded
