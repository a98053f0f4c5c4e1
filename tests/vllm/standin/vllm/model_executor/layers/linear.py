"""STAND-IN for vllm.model_executor.layers.linear: the tensor-parallel linear layers and the rules
their weight_loader(param, loaded_weight[, shard_id]) applies to a whole checkpoint tensor.

- ReplicatedLinear: weight [out, in] on every rank, copied whole.
- ColumnParallelLinear: weight [out/tp, in]; rank r takes rows [r*out/tp, +out/tp) (bias alike).
- MergedColumnParallelLinear(output_sizes): weight [sum/tp, in]; part k (shard id k) takes rows
  [r*s_k/tp, +s_k/tp) of its own tensor, placed at row sum(s_<k)/tp.
- QKVParallelLinear: q heads split over tp; kv heads split when tp < total kv heads, else each kv
  head replicated on tp/total_kv ranks (rank r holds kv head r // replicas); shard ids q, k, v.
- RowParallelLinear: weight [out, in/tp]; rank r takes columns [r*in/tp, +in/tp); bias whole.
- disable_tp=True (vLLM's LinearBase): the layer acts as tensor-parallel rank 0 of 1 (whole
  weights on every rank; DeepSeek's fused_qkv_a_proj).
Unquantized layers load through weight_loader (vLLM gives weight_loader_v2 only to the quant
methods of its WEIGHT_LOADER_V2_SUPPORTED list).
"""

import torch

from vllm.distributed import get_tensor_model_parallel_rank, get_tensor_model_parallel_world_size
from vllm.model_executor.utils import set_weight_attrs


def _param(shape, dtype, loader, **attrs):
    p = torch.nn.Parameter(torch.empty(shape, dtype=dtype), requires_grad=False)
    set_weight_attrs(p, dict(weight_loader=loader, **attrs))
    return p


class LinearBase(torch.nn.Module):
    def __init__(self, input_size, output_size, params_dtype=None, quant_config=None, prefix="",
                 disable_tp=False):
        super().__init__()
        self.input_size, self.output_size = input_size, output_size
        self.params_dtype = params_dtype or torch.get_default_dtype()
        self.quant_config = quant_config
        self.tp_rank = 0 if disable_tp else get_tensor_model_parallel_rank()
        self.tp_size = 1 if disable_tp else get_tensor_model_parallel_world_size()


class ReplicatedLinear(LinearBase):
    def __init__(self, input_size, output_size, bias=True, params_dtype=None, quant_config=None,
                 prefix=""):
        super().__init__(input_size, output_size, params_dtype, quant_config, prefix)
        self.weight = _param((output_size, input_size), self.params_dtype, self.weight_loader)
        if bias:
            self.bias = _param((output_size,), self.params_dtype, self.weight_loader)
        else:
            self.register_parameter("bias", None)

    def weight_loader(self, param, loaded_weight):
        assert param.shape == loaded_weight.shape, (param.shape, loaded_weight.shape)
        param.data.copy_(loaded_weight)


class ColumnParallelLinear(LinearBase):
    def __init__(self, input_size, output_size, bias=True, gather_output=False, params_dtype=None,
                 quant_config=None, prefix="", output_sizes=None, disable_tp=False):
        super().__init__(input_size, output_size, params_dtype, quant_config, prefix, disable_tp)
        self.output_sizes = output_sizes or [output_size]
        assert output_size % self.tp_size == 0
        rows = output_size // self.tp_size
        self.weight = _param((rows, input_size), self.params_dtype, self.weight_loader, output_dim=0)
        if bias:
            self.bias = _param((rows,), self.params_dtype, self.weight_loader, output_dim=0)
        else:
            self.register_parameter("bias", None)

    def weight_loader(self, param, loaded_weight):
        n = param.shape[0]
        param.data.copy_(loaded_weight.narrow(0, self.tp_rank * n, n))


class MergedColumnParallelLinear(ColumnParallelLinear):
    def __init__(self, input_size, output_sizes, bias=True, gather_output=False, params_dtype=None,
                 quant_config=None, prefix="", disable_tp=False):
        super().__init__(input_size, sum(output_sizes), bias, gather_output, params_dtype,
                         quant_config, prefix, output_sizes=list(output_sizes),
                         disable_tp=disable_tp)

    def weight_loader(self, param, loaded_weight, loaded_shard_id=None):
        if loaded_shard_id is None:   # a checkpoint that fuses the parts already: split it
            at = 0
            for k, size in enumerate(self.output_sizes):
                self.weight_loader(param, loaded_weight.narrow(0, at, size), k)
                at += size
            return
        size = self.output_sizes[loaded_shard_id] // self.tp_size
        offset = sum(self.output_sizes[:loaded_shard_id]) // self.tp_size
        param.data.narrow(0, offset, size).copy_(
            loaded_weight.narrow(0, self.tp_rank * size, size))


class QKVParallelLinear(ColumnParallelLinear):
    def __init__(self, hidden_size, head_size, total_num_heads, total_num_kv_heads=None,
                 bias=True, params_dtype=None, quant_config=None, prefix=""):
        tp = get_tensor_model_parallel_world_size()
        total_num_kv_heads = total_num_kv_heads or total_num_heads
        self.head_size = head_size
        self.num_heads = total_num_heads // tp
        if tp >= total_num_kv_heads:
            self.num_kv_heads, self.num_kv_head_replicas = 1, tp // total_num_kv_heads
        else:
            self.num_kv_heads, self.num_kv_head_replicas = total_num_kv_heads // tp, 1
        out = (self.num_heads + 2 * self.num_kv_heads) * tp * head_size
        sizes = [total_num_heads * head_size] + [total_num_kv_heads * head_size] * 2
        super().__init__(hidden_size, out, bias, False, params_dtype, quant_config, prefix,
                         output_sizes=sizes)

    def weight_loader(self, param, loaded_weight, loaded_shard_id=None):
        d = self.head_size
        if loaded_shard_id is None:   # fused q/k/v checkpoint tensor
            sizes = self.output_sizes
            at = 0
            for sid, size in zip("qkv", sizes):
                self.weight_loader(param, loaded_weight.narrow(0, at, size), sid)
                at += size
            return
        if loaded_shard_id == "q":
            offset, size, block = 0, self.num_heads * d, self.tp_rank
        elif loaded_shard_id == "k":
            offset, size = self.num_heads * d, self.num_kv_heads * d
            block = self.tp_rank // self.num_kv_head_replicas
        else:
            offset, size = (self.num_heads + self.num_kv_heads) * d, self.num_kv_heads * d
            block = self.tp_rank // self.num_kv_head_replicas
        param.data.narrow(0, offset, size).copy_(loaded_weight.narrow(0, block * size, size))


class RowParallelLinear(LinearBase):
    def __init__(self, input_size, output_size, bias=True, input_is_parallel=True,
                 params_dtype=None, reduce_results=True, quant_config=None, prefix="",
                 disable_tp=False):
        super().__init__(input_size, output_size, params_dtype, quant_config, prefix, disable_tp)
        assert input_size % self.tp_size == 0
        cols = input_size // self.tp_size
        self.weight = _param((output_size, cols), self.params_dtype, self.weight_loader, input_dim=1)
        if bias:
            self.bias = _param((output_size,), self.params_dtype, self.weight_loader)
        else:
            self.register_parameter("bias", None)

    def weight_loader(self, param, loaded_weight):
        if param.dim() == 2:
            n = param.shape[1]
            loaded_weight = loaded_weight.narrow(1, self.tp_rank * n, n)
        param.data.copy_(loaded_weight)
