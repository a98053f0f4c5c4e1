"""STAND-IN for vllm.model_executor.layers.fused_moe.layer: FusedMoE's parameters, expert map and
weight_loader rules.

Parallelism (FusedMoEParallelConfig): the experts of a pipeline stage are spread over its dp*tp
ranks. Without expert parallelism every rank holds every expert, sliced over the dp*tp ranks
(MoE tensor-parallel size dp*tp, rank dp_rank*tp + tp_rank); with it (enable_expert_parallel and
dp*tp > 1) rank e = dp_rank*tp + tp_rank of the ep_size = dp*tp ranks holds whole experts.

Expert map (determine_expert_map): global_num_experts = experts + redundant experts (EPLB slots);
linear: rank e holds [e*base + min(e, rem), +base + (e < rem)); round_robin: {e, e+ep, ...}.
round_robin is only kept with expert groups (num_expert_group > 1), no redundant experts and no
EPLB; otherwise linear is used (with a warning). expert_map[physical id] = local slot or -1.
Physical slot s holds logical expert s % num_experts.

Unquantized parameters: w13_weight [local, 2*Ip, H] (gate rows then up rows of each expert),
w2_weight [local, H, Ip], Ip = intermediate / MoE-tp size. weight_loader(param, loaded_weight,
weight_name, shard_id, expert_id): maps the (physical) expert id through the expert map (a
non-local expert is skipped), takes the MoE-tp rank's rows (w1, w3: dim 0 of the expert's
tensor, into the first / second half of w13) or columns (w2: dim 1), one expert at a time, or all
experts at once for a 3-D loaded_weight. MXFP4 (gpt-oss): the parameters are uint8 blocks and
scales with the per-rank intermediate size padded (MXFP4_PAD); the model narrows the checkpoint
itself and weight_loader(..., shard_id=None, expert_id=None) copies the whole rank's tensor into
the leading part of the padded parameter. A quantization config object (layers/quantization/fp8.py:
DeepSeek-V4's): MXFP4 experts when its is_mxfp4_quant says so, loaded per expert by the rules above
(packed bytes and E8M0 scales per 32: w13_weight [E, 2*Ip, H/2], w13_weight_scale [E, 2*Ip, H/32],
w2_weight [E, H, Ip/2], w2_weight_scale [E, H, Ip/32], uint8, unpadded: vLLM pads Ip per kernel
only where it is not already a multiple of its alignment, 64 to 256), else block fp8
(Fp8MoEMethod: uint8 weights, weight_scale_inv [E, 2*Ip/bn, H/bk] and [E, H/bn, Ip/bk]).
Pack-quantized and NVFP4 experts: the parameters of the quantization method
(layers/quantization), loaded by the branches of quantized.py.
"""

import warnings

import torch

from vllm.config import get_current_vllm_config
from vllm.distributed import get_dp_group, get_tp_group
from vllm.model_executor.utils import set_weight_attrs

MXFP4_PAD = 256   # per-rank intermediate size padded to a multiple of this (vLLM: 64/128/256 by kernel)


def determine_expert_map(ep_size, ep_rank, global_num_experts, expert_placement_strategy="linear"):
    if ep_size == 1:
        return global_num_experts, None
    base, rem = divmod(global_num_experts, ep_size)
    local = base + (1 if ep_rank < rem else 0)
    expert_map = torch.full((global_num_experts,), -1, dtype=torch.int32)
    if expert_placement_strategy == "linear":
        start = ep_rank * base + min(ep_rank, rem)
        expert_map[start:start + local] = torch.arange(local, dtype=torch.int32)
    elif expert_placement_strategy == "round_robin":
        expert_map[ep_rank::ep_size] = torch.arange(local, dtype=torch.int32)
    else:
        raise ValueError("unknown expert placement strategy %r" % expert_placement_strategy)
    return local, expert_map


def _quantized_shapes(qc, prefix, layer, E, H, I):
    if qc.is_mxfp4_quant(prefix, layer):
        return {"w13_weight": ((E, 2 * I, H // 2), torch.uint8),
                "w13_weight_scale": ((E, 2 * I, H // 32), torch.uint8),
                "w2_weight": ((E, H, I // 2), torch.uint8),
                "w2_weight_scale": ((E, H, I // 32), torch.uint8)}
    bn, bk = qc.weight_block_size
    return {"w13_weight": ((E, 2 * I, H), torch.uint8),
            "w13_weight_scale_inv": ((E, 2 * I // bn, H // bk), qc.scale_dtype()),
            "w2_weight": ((E, H, I), torch.uint8),
            "w2_weight_scale_inv": ((E, H // bn, I // bk), qc.scale_dtype())}


def _round_up(x, m):
    return (x + m - 1) // m * m


class FusedMoE(torch.nn.Module):
    def __init__(self, num_experts, top_k, hidden_size, intermediate_size, params_dtype=None,
                 reduce_results=False, renormalize=True, quant_config=None, prefix="",
                 num_expert_group=None, enable_eplb=False, num_redundant_experts=0,
                 has_bias=False):
        super().__init__()
        parallel = get_current_vllm_config().parallel_config
        tp, dp = get_tp_group(), get_dp_group()
        flat_size = dp.world_size * tp.world_size
        flat_rank = dp.rank_in_group * tp.world_size + tp.rank_in_group
        self.use_ep = bool(parallel.enable_expert_parallel) and flat_size > 1
        self.ep_size, self.ep_rank = (flat_size, flat_rank) if self.use_ep else (1, 0)
        self.tp_size, self.tp_rank = (1, 0) if self.use_ep else (flat_size, flat_rank)
        self.logical_num_experts = num_experts
        self.global_num_experts = num_experts + num_redundant_experts
        self.num_redundant_experts = num_redundant_experts
        self.enable_eplb = enable_eplb
        strategy = parallel.expert_placement_strategy
        if strategy == "round_robin" and not ((num_expert_group or 1) > 1 and
                                              num_redundant_experts == 0 and not enable_eplb):
            warnings.warn("round_robin expert placement needs expert groups, no redundant experts "
                          "and no EPLB; using linear")
            strategy = "linear"
        self.expert_placement_strategy = strategy
        if self.use_ep:
            if enable_eplb:
                assert self.global_num_experts % self.ep_size == 0
            else:
                assert num_redundant_experts == 0, "redundant experts need EPLB"
            self.local_num_experts, self.expert_map = determine_expert_map(
                self.ep_size, self.ep_rank, self.global_num_experts, strategy)
        else:
            self.local_num_experts, self.expert_map = self.global_num_experts, None
        self.top_k, self.hidden_size = top_k, hidden_size
        assert intermediate_size % self.tp_size == 0
        self.intermediate_size_per_partition = intermediate_size // self.tp_size
        self.quant_config = quant_config
        dtype = params_dtype or torch.get_default_dtype()
        E, H, I = self.local_num_experts, hidden_size, self.intermediate_size_per_partition
        attrs = {"weight_loader": self.weight_loader}
        # Pack-quantized / NVFP4 experts: the quantization method creates them (quantized.py).
        from vllm.model_executor.layers.quantization import moe_method
        self.quant_method = moe_method(quant_config, prefix)
        if self.quant_method is not None:
            self.quant_method.create_weights(self, E, H, I, dtype, attrs)
            shapes = {}
        elif hasattr(quant_config, "is_mxfp4_quant"):
            shapes = _quantized_shapes(quant_config, prefix, self, E, H, I)
        elif quant_config == "mxfp4":
            Ip = _round_up(I, MXFP4_PAD)
            shapes = {"w13_weight": ((E, 2 * Ip, H // 2), torch.uint8),
                      "w13_weight_scale": ((E, 2 * Ip, H // 32), torch.uint8),
                      "w13_bias": ((E, 2 * Ip), dtype),
                      "w2_weight": ((E, H, Ip // 2), torch.uint8),
                      "w2_weight_scale": ((E, H, Ip // 32), torch.uint8),
                      "w2_bias": ((E, H), dtype)}
        else:
            shapes = {"w13_weight": ((E, 2 * I, H), dtype), "w2_weight": ((E, H, I), dtype)}
            if has_bias:
                shapes.update(w13_bias=((E, 2 * I), dtype), w2_bias=((E, H), dtype))
        for name, (shape, dt) in shapes.items():
            p = torch.nn.Parameter(torch.zeros(shape, dtype=dt), requires_grad=False)
            set_weight_attrs(p, attrs)
            self.register_parameter(name, p)

    def _map_global_expert_id_to_local_expert_id(self, expert_id):
        return expert_id if self.expert_map is None else int(self.expert_map[expert_id])

    def weight_loader(self, param, loaded_weight, weight_name, shard_id, expert_id,
                      return_success=False):
        if self.quant_config == "mxfp4":   # the model passed the rank's tensor, all experts
            if "bias" in weight_name:
                param.data[:, :loaded_weight.shape[1]].copy_(loaded_weight)
            else:
                param.data[:, :loaded_weight.shape[1], :loaded_weight.shape[2]].copy_(loaded_weight)
            return True if return_success else None
        local = self._map_global_expert_id_to_local_expert_id(expert_id)
        if local == -1:
            return False if return_success else None
        if shard_id not in ("w1", "w2", "w3"):
            raise ValueError("shard_id must be w1, w2 or w3, got %r" % (shard_id,))
        if self.quant_method is not None:
            from .quantized import load_quantized
            load_quantized(self, param, loaded_weight, weight_name, shard_id, local)
            return True if return_success else None
        dim = 1 if shard_id == "w2" else 0
        full = loaded_weight.dim() == 3
        if full:
            dim += 1
        data = param.data if full else param.data[local]
        if shard_id == "w2":
            n = data.shape[dim]
            data.copy_(loaded_weight.narrow(dim, self.tp_rank * n, n))
        else:
            n = data.shape[dim] // 2
            part = data.narrow(dim, 0 if shard_id == "w1" else n, n)
            part.copy_(loaded_weight.narrow(dim, self.tp_rank * n, n))
        return True if return_success else None

    @staticmethod
    def make_expert_params_mapping(ckpt_gate_proj_name, ckpt_down_proj_name, ckpt_up_proj_name,
                                   num_experts, num_redundant_experts=0):
        """(param prefix, checkpoint name part, physical expert id, shard id) for every physical
        slot and part; slot s loads logical expert s % num_experts."""
        out = []
        for physical in range(num_experts + num_redundant_experts):
            logical = physical % num_experts
            for shard_id, ckpt in (("w1", ckpt_gate_proj_name), ("w2", ckpt_down_proj_name),
                                   ("w3", ckpt_up_proj_name)):
                prefix = "experts.w13_" if shard_id in ("w1", "w3") else "experts.w2_"
                out.append((prefix, "experts.%d.%s." % (logical, ckpt), physical, shard_id))
        return out
