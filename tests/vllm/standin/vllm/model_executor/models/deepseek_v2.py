"""STAND-IN for vllm.model_executor.models.deepseek_v2 (DeepseekV2ForCausalLM, and DeepseekV3,
DeepseekV32 and GlmMoeDsa ForCausalLM, which vLLM builds from the same classes), from vLLM's model
file. One model serves the plugin's cases (DeepSeek-V3.2 / GLM-5 with the indexer, the MTP draft
of deepseek_mtp.py built from its decoder layer) and the recorder's (DeepSeek-V3 and V2-Lite through
per-parameter weight_loaders and load_weights' stacked mapping).

Names (vLLM's DeepseekV2Model / DeepseekV2DecoderLayer / DeepseekV2MLAAttention): model.embed_tokens
(first stage), model.layers.N.{input_layernorm, post_attention_layernorm, self_attn.{...}, mlp},
model.norm and lm_head (last stage). Attention (MLA): with q_lora_rank, fused_qkv_a_proj
(MergedColumnParallelLinear of [q_lora_rank, kv_lora_rank + qk_rope_head_dim] with disable_tp:
whole on every rank, shard 0 = the checkpoint's q_a_proj, shard 1 = kv_a_proj_with_mqa),
q_a_layernorm, q_b_proj (ColumnParallelLinear); without it, q_proj (ColumnParallelLinear) and
kv_a_proj_with_mqa (ReplicatedLinear); then kv_a_layernorm, kv_b_proj (ColumnParallelLinear),
o_proj (RowParallelLinear), attn (Attention: its KV-cache scales), and the indexer.

The indexer (configs with index_topk, i.e. DeepSeek-V3.2 and GLM-5): wq_b (ReplicatedLinear
[index_n_heads * index_head_dim, q_lora]), wk_weights_proj (MergedColumnParallelLinear
[index_head_dim, index_n_heads] over hidden, disable_tp: wk is shard 0, weights_proj shard 1) and
k_norm (LayerNorm: float32 weight and bias); a layer has none when index_topk_pattern has 'S' at
its index, or, without a pattern, when max(L - index_skip_topk_offset + 1, 0) % index_topk_freq
!= 0 (defaults 2 and 1); a multi-token-prediction layer always has one.

MLP: layers >= first_k_dense_replace (every moe_layer_freq-th) are DeepseekV2MoE = {gate
(ReplicatedLinear [E, H], no bias) with gate.e_score_correction_bias, a float32 Parameter without
a weight_loader, when topk_method is noaux_tc (transformers' DeepseekV3Config default, which
GLM-5's config.json leaves out; DeepSeek-V2 configs say greedy); experts (FusedMoE, expert groups
n_group, EPLB and redundant experts from the parallel config); shared_experts (DeepseekV2MLP of
moe_intermediate_size * n_shared_experts)}; the others a DeepseekV2MLP (gate_up_proj, down_proj).

Quantization (vLLM's quant_config, layers/quantization): every linear of the attention and the
MLPs and the routed experts are built with it, the router without; a compressed-tensors config
(W4A16 routed experts, Kimi-K2-Thinking and K2.5) gives the layers it does not ignore their
packed parameters; a method named only (block fp8) leaves them unquantized here, as before.

Loading (DeepseekV2Model.load_weights): rotary_emb.inv_freq, the MTP layers
(get_spec_layer_idx_from_weight_name: model.layers.{L + k}. for k < num_nextn_predict_layers) and
the indexer tensors of layers built without one skipped; stacked mapping (gate_up_proj,
gate_proj, 0), (gate_up_proj, up_proj, 1), (wk_weights_proj, wk, 0), (wk_weights_proj,
weights_proj, 1), (fused_qkv_a_proj, q_a_proj, 0), (fused_qkv_a_proj, kv_a_proj_with_mqa, 1), the
last two only where the parameter exists (a q LoRA); an expert's gate_proj/up_proj is left to the
expert mapping (FusedMoE.make_expert_params_mapping over the physical experts, redundant ones
included), whose weight_loader(..., return_success=True) says whether the expert is local; a bias
the model lacks skipped; KV-cache scale names remapped; tensors of other stages skipped; the rest
to weight_loader or default_weight_loader. The names handled are returned, as vLLM returns them
(a skipped stacked or expert tensor under the name it had reached).
"""

import torch

from vllm.attention import Attention
from vllm.attention.layer import maybe_remap_kv_scale_name
from vllm.config import get_current_vllm_config
from vllm.distributed import get_pp_group
from vllm.model_executor.layers.fused_moe import FusedMoE
from vllm.model_executor.layers.layernorm import LayerNorm, RMSNorm
from vllm.model_executor.layers.linear import (ColumnParallelLinear, MergedColumnParallelLinear,
                                               ReplicatedLinear, RowParallelLinear)
from vllm.model_executor.layers.quantization import get_quant_config
from vllm.model_executor.layers.vocab_parallel_embedding import ParallelLMHead, VocabParallelEmbedding
from vllm.model_executor.model_loader.weight_utils import default_weight_loader

from .llama import _get
from .utils import PPMissingLayer, is_pp_missing_parameter, make_layers


class DeepseekV2MLP(torch.nn.Module):
    def __init__(self, hidden_size, intermediate_size, prefix="", quant_config=None):
        super().__init__()
        self.gate_up_proj = MergedColumnParallelLinear(hidden_size, [intermediate_size] * 2, bias=False,
                                                       quant_config=quant_config, prefix=prefix + ".gate_up_proj")
        self.down_proj = RowParallelLinear(intermediate_size, hidden_size, bias=False, quant_config=quant_config,
                                           prefix=prefix + ".down_proj")


class DeepseekV2MoE(torch.nn.Module):
    def __init__(self, config, prefix="", quant_config=None):
        super().__init__()
        parallel = get_current_vllm_config().parallel_config
        E, H = config.n_routed_experts, config.hidden_size
        self.gate = ReplicatedLinear(H, E, bias=False, prefix=prefix + ".gate")
        if _get(config, "topk_method", "noaux_tc") == "noaux_tc":
            self.gate.e_score_correction_bias = torch.nn.Parameter(
                torch.empty(E, dtype=torch.float32), requires_grad=False)
        else:
            self.gate.e_score_correction_bias = None
        self.experts = FusedMoE(E, config.num_experts_per_tok, H, config.moe_intermediate_size,
                                quant_config=quant_config, prefix=prefix + ".experts",
                                num_expert_group=_get(config, "n_group", 1),
                                enable_eplb=parallel.enable_eplb,
                                num_redundant_experts=parallel.eplb_config.num_redundant_experts)
        shared = _get(config, "n_shared_experts")
        self.shared_experts = DeepseekV2MLP(H, config.moe_intermediate_size * shared,
                                            prefix + ".shared_experts", quant_config) if shared else None


class Indexer(torch.nn.Module):
    def __init__(self, config, prefix=""):
        super().__init__()
        H, n, d = config.hidden_size, config.index_n_heads, config.index_head_dim
        self.wq_b = ReplicatedLinear(config.q_lora_rank, n * d, bias=False, prefix=prefix + ".wq_b")
        self.wk_weights_proj = MergedColumnParallelLinear(H, [d, n], bias=False, disable_tp=True,
                                                          prefix=prefix + ".wk_weights_proj")
        self.k_norm = LayerNorm(d, eps=1e-6)


def has_indexer(config, layer):
    """vLLM's DeepseekV2MLAAttention: whether layer builds an indexer."""
    if not hasattr(config, "index_topk"):
        return False
    if layer >= config.num_hidden_layers:
        return True
    pattern = _get(config, "index_topk_pattern")
    if pattern is None:
        offset = _get(config, "index_skip_topk_offset", 2)
        return max(layer - offset + 1, 0) % _get(config, "index_topk_freq", 1) == 0
    return not (0 <= layer < len(pattern) and pattern[layer] == "S")


class DeepseekV2MLAAttention(torch.nn.Module):
    def __init__(self, config, layer, quant_config=None, prefix=""):
        super().__init__()
        H, heads = config.hidden_size, config.num_attention_heads
        q_lora, kv_lora = _get(config, "q_lora_rank"), config.kv_lora_rank
        nope, rope, v = config.qk_nope_head_dim, config.qk_rope_head_dim, config.v_head_dim
        eps = _get(config, "rms_norm_eps", 1e-6)
        self.qk_head_dim = nope + rope
        if q_lora is not None:
            self.fused_qkv_a_proj = MergedColumnParallelLinear(H, [q_lora, kv_lora + rope], bias=False,
                                                               disable_tp=True, quant_config=quant_config,
                                                               prefix=prefix + ".fused_qkv_a_proj")
            self.q_a_layernorm = RMSNorm(q_lora, eps)
            self.q_b_proj = ColumnParallelLinear(q_lora, heads * self.qk_head_dim, bias=False,
                                                 quant_config=quant_config, prefix=prefix + ".q_b_proj")
        else:
            self.kv_a_proj_with_mqa = ReplicatedLinear(H, kv_lora + rope, bias=False, quant_config=quant_config,
                                                       prefix=prefix + ".kv_a_proj_with_mqa")
            self.q_proj = ColumnParallelLinear(H, heads * self.qk_head_dim, bias=False, quant_config=quant_config,
                                               prefix=prefix + ".q_proj")
        self.kv_a_layernorm = RMSNorm(kv_lora, eps)
        self.kv_b_proj = ColumnParallelLinear(kv_lora, heads * (nope + v), bias=False, quant_config=quant_config,
                                              prefix=prefix + ".kv_b_proj")
        self.o_proj = RowParallelLinear(heads * v, H, bias=False, quant_config=quant_config, prefix=prefix + ".o_proj")
        local = heads // self.kv_b_proj.tp_size
        self.attn = Attention(local, self.qk_head_dim, self.qk_head_dim ** -0.5, num_kv_heads=local,
                              quant_config=quant_config, prefix=prefix + ".attn")
        if has_indexer(config, layer):
            self.indexer = Indexer(config, prefix + ".indexer")


class DeepseekV2DecoderLayer(torch.nn.Module):
    def __init__(self, config, prefix="", quant_config=None):
        super().__init__()
        layer = int(prefix.rsplit(".", 1)[1])
        eps = _get(config, "rms_norm_eps", 1e-6)
        self.self_attn = DeepseekV2MLAAttention(config, layer, quant_config, prefix + ".self_attn")
        moe = _get(config, "n_routed_experts") is not None and \
            layer >= _get(config, "first_k_dense_replace", 0) and \
            layer % _get(config, "moe_layer_freq", 1) == 0
        self.mlp = DeepseekV2MoE(config, prefix + ".mlp", quant_config) if moe else \
            DeepseekV2MLP(config.hidden_size, config.intermediate_size, prefix + ".mlp", quant_config)
        self.input_layernorm = RMSNorm(config.hidden_size, eps)
        self.post_attention_layernorm = RMSNorm(config.hidden_size, eps)


class DeepseekV2Model(torch.nn.Module):
    def __init__(self, config, quant_config=None, prefix="model"):
        super().__init__()
        pp = get_pp_group()
        self.embed_tokens = VocabParallelEmbedding(config.vocab_size, config.hidden_size) \
            if pp.is_first_rank else PPMissingLayer()
        self.start_layer, self.end_layer, self.layers = make_layers(
            config.num_hidden_layers,
            lambda prefix: DeepseekV2DecoderLayer(config, prefix, quant_config), prefix + ".layers")
        self.norm = RMSNorm(config.hidden_size, _get(config, "rms_norm_eps", 1e-6)) \
            if pp.is_last_rank else PPMissingLayer()


# vLLM's stacked_params_mapping of an MLA model: (parameter, checkpoint part, shard id).
STACKED = [("gate_up_proj", "gate_proj", 0), ("gate_up_proj", "up_proj", 1),
           ("wk_weights_proj", "wk", 0), ("wk_weights_proj", "weights_proj", 1),
           ("fused_qkv_a_proj", "q_a_proj", 0), ("fused_qkv_a_proj", "kv_a_proj_with_mqa", 1)]


def spec_layer(config, name):
    """The MTP layer a checkpoint name belongs to, or None (vLLM's get_spec_layer_idx_from_weight_name)."""
    first = config.num_hidden_layers
    for i in range(_get(config, "num_nextn_predict_layers", 0) or 0):
        if name.startswith("model.layers.%d." % (first + i)):
            return first + i
    return None


def load_one(model, params, name, w, experts):
    """One checkpoint tensor through vLLM's rules: the stacked mapping, else the experts, else the
    parameter of its name. Returns the name vLLM adds to its loaded set (the parameter's; for a
    tensor another stage or worker holds, the name it had reached), or None where vLLM adds none
    (a KV-cache scale the model lacks)."""
    for param_name, weight_name, shard in STACKED:
        if weight_name not in name:
            continue
        if "mlp.experts." in name and name not in params:
            continue   # an expert's gate/up_proj: the expert mapping below takes it
        mapped = name.replace(weight_name, param_name)
        if param_name == "fused_qkv_a_proj" and mapped not in params:
            continue   # no q LoRA: q_proj and kv_a_proj_with_mqa are parameters of their own
        name = mapped
        if name.endswith(".bias") and name not in params:
            continue
        if is_pp_missing_parameter(name, model):
            continue
        p = params[name]
        p.weight_loader(p, w, shard)
        return name
    is_expert = False
    for param_name, weight_name, expert_id, shard in experts:
        if weight_name not in name:
            continue
        is_expert = True
        mapped = name.replace(weight_name, param_name)
        if is_pp_missing_parameter(mapped, model):
            continue
        p = params[mapped]
        if p.weight_loader(p, w, mapped, shard_id=shard, expert_id=expert_id, return_success=True):
            return mapped
    if is_expert:
        return name    # an expert of no local slot
    if name.endswith(".bias") and name not in params:
        return name
    name = maybe_remap_kv_scale_name(name, params)
    if name is None:
        return None
    if is_pp_missing_parameter(name, model):
        return name
    p = params[name]
    getattr(p, "weight_loader", default_weight_loader)(p, w)
    return name


class DeepseekV2ForCausalLM(torch.nn.Module):
    packed_modules_mapping = {"gate_up_proj": ["gate_proj", "up_proj"],
                              "fused_qkv_a_proj": ["q_a_proj", "kv_a_proj_with_mqa"]}

    def __init__(self, vllm_config, prefix=""):
        super().__init__()
        config = vllm_config.model_config.hf_config
        self.config = config
        self.tied = False
        # Read while the model is built: vLLM 0.10.2-0.13 leave the current config unset later.
        self.num_redundant_experts = vllm_config.parallel_config.eplb_config.num_redundant_experts
        self.model = DeepseekV2Model(config, get_quant_config(vllm_config.model_config, self.packed_modules_mapping))
        self.lm_head = ParallelLMHead(config.vocab_size, config.hidden_size) \
            if get_pp_group().is_last_rank else PPMissingLayer()

    def load_weights(self, weights):
        params = dict(self.named_parameters())
        experts = FusedMoE.make_expert_params_mapping(
            "gate_proj", "down_proj", "up_proj", _get(self.config, "n_routed_experts", 0) or 0,
            self.num_redundant_experts)
        with_indexer = {n.rsplit(".indexer.", 1)[0] for n in params if ".indexer." in n}
        loaded = set()
        for name, w in weights:
            if "rotary_emb.inv_freq" in name or spec_layer(self.config, name) is not None:
                continue
            if ".indexer." in name and name.rsplit(".indexer.", 1)[0] not in with_indexer:
                continue   # a layer built without an indexer: its checkpoint tensors are dropped
            done = load_one(self, params, name, w, experts)
            if done is not None:
                loaded.add(done)
        return loaded


class DeepseekV3ForCausalLM(DeepseekV2ForCausalLM):
    pass


class GlmMoeDsaForCausalLM(DeepseekV2ForCausalLM):
    pass


DeepseekV32ForCausalLM = DeepseekV3ForCausalLM   # vLLM's registry maps V3.2 to the V3 class
