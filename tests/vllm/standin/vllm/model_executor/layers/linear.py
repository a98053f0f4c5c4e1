"""STAND-IN for vllm.model_executor.layers.linear: the tensor-parallel linear layers and the rules
their weight_loader(param, loaded_weight[, shard_id]) applies to a whole checkpoint tensor.

- ReplicatedLinear: weight [out, in] on every rank, copied whole.
- ColumnParallelLinear: weight [out/tp, in]; rank r takes rows [r*out/tp, +out/tp) (bias alike).
- MergedColumnParallelLinear(output_sizes): weight [sum/tp, in]; part k (shard id k) takes rows
  [r*s_k/tp, +s_k/tp) of its own tensor, placed at row sum(s_<k)/tp; a tuple of shard ids (k, k+1,
  ...) is one checkpoint tensor holding those parts one after the other (Qwen3.5's in_proj_qkv as
  parts 0, 1, 2 of in_proj_qkvz), each part taken as above.
- QKVParallelLinear: q heads split over tp; kv heads split when tp < total kv heads, else each kv
  head replicated on tp/total_kv ranks (rank r holds kv head r // replicas); shard ids q, k, v.
- RowParallelLinear: weight [out, in/tp]; rank r takes columns [r*in/tp, +in/tp); bias whole.
- disable_tp=True (vLLM's LinearBase): the layer acts as tensor-parallel rank 0 of 1 (whole
  weights on every rank; DeepSeek's fused_qkv_a_proj).
- a block-fp8 quant_config (layers/quantization/fp8.py): the weight holds F8 bytes and a
  weight_scale_inv in blocks is loaded by the same rule counted in blocks.

A layer that the model's quantization config quantizes (layers/quantization: pack-quantized,
NVFP4) gets its quantization method's parameters instead of `weight` (output_partition_sizes: the
rank's rows of each part), vLLM parameters (model_executor/parameter.py) loaded by each layer's
weight_loader_v2 rules: column-parallel whole-layer loads, merged parts with their rank offset and
size, qkv parts with the kv replicas, row-parallel loads; scalars reshaped to [1].
Unquantized layers load through weight_loader (vLLM gives weight_loader_v2 only to the quant
methods of its WEIGHT_LOADER_V2_SUPPORTED list).
"""

import torch

from vllm.distributed import get_tensor_model_parallel_rank, get_tensor_model_parallel_world_size
from vllm.model_executor.parameter import BasevLLMParameter
from vllm.model_executor.utils import set_weight_attrs


def _param(shape, dtype, loader, **attrs):
    p = torch.nn.Parameter(torch.empty(shape, dtype=dtype), requires_grad=False)
    set_weight_attrs(p, dict(weight_loader=loader, **attrs))
    return p


def _weight(layer, rows, cols, loader, **attrs):
    """layer.weight [rows, cols] of the layer's dtype, or F8 bytes with their block scales."""
    from vllm.model_executor.layers.quantization.fp8 import Fp8Config, create_fp8_linear
    if isinstance(layer.quant_config, Fp8Config):
        create_fp8_linear(layer, rows, cols, loader, attrs)
    else:
        layer.weight = _param((rows, cols), layer.params_dtype, loader, **attrs)


class LinearBase(torch.nn.Module):
    def __init__(self, input_size, output_size, params_dtype=None, quant_config=None, prefix="",
                 disable_tp=False):
        super().__init__()
        self.input_size, self.output_size = input_size, output_size
        self.params_dtype = params_dtype or torch.get_default_dtype()
        self.quant_config = quant_config
        self.tp_rank = 0 if disable_tp else get_tensor_model_parallel_rank()
        self.tp_size = 1 if disable_tp else get_tensor_model_parallel_world_size()
        from vllm.model_executor.layers.quantization import linear_method
        self.quant_method = linear_method(quant_config, prefix)

    def _quantized(self, partition_sizes, input_per_partition):
        """The quantization method's parameters instead of `weight`; False when unquantized."""
        if self.quant_method is None:
            return False
        self.quant_method.create_weights(self, partition_sizes, input_per_partition, self.input_size,
                                         self.output_size, self.params_dtype, self.weight_loader)
        return True


class ReplicatedLinear(LinearBase):
    def __init__(self, input_size, output_size, bias=True, params_dtype=None, quant_config=None,
                 prefix=""):
        super().__init__(input_size, output_size, params_dtype, quant_config, prefix)
        _weight(self, output_size, input_size, self.weight_loader)
        if bias:
            self.bias = _param((output_size,), self.params_dtype, self.weight_loader)
        else:
            self.register_parameter("bias", None)

    def weight_loader(self, param, loaded_weight):
        assert param.shape == loaded_weight.shape, (param.shape, loaded_weight.shape)
        param.data.copy_(loaded_weight)


class ColumnParallelLinear(LinearBase):
    def __init__(self, input_size, output_size, bias=True, gather_output=False, params_dtype=None,
                 quant_config=None, prefix="", output_sizes=None, partition_sizes=None, disable_tp=False):
        super().__init__(input_size, output_size, params_dtype, quant_config, prefix, disable_tp)
        self.output_sizes = output_sizes or [output_size]
        assert output_size % self.tp_size == 0
        rows = output_size // self.tp_size
        parts = partition_sizes or [s // self.tp_size for s in self.output_sizes]
        if not self._quantized(parts, input_size):
            _weight(self, rows, input_size, self.weight_loader, output_dim=0)
        if bias:
            self.bias = _param((rows,), self.params_dtype, self.weight_loader, output_dim=0)
        else:
            self.register_parameter("bias", None)

    def weight_loader(self, param, loaded_weight):
        if isinstance(param, BasevLLMParameter):
            param.load_column_parallel_weight(loaded_weight.reshape(1) if loaded_weight.dim() == 0
                                              else loaded_weight)
            return
        n = param.shape[0]
        param.data.copy_(loaded_weight.narrow(0, self.tp_rank * n, n))


class MergedColumnParallelLinear(ColumnParallelLinear):
    def __init__(self, input_size, output_sizes, bias=True, gather_output=False, params_dtype=None,
                 quant_config=None, prefix="", disable_tp=False):
        super().__init__(input_size, sum(output_sizes), bias, gather_output, params_dtype,
                         quant_config, prefix, output_sizes=list(output_sizes), disable_tp=disable_tp)

    def weight_loader(self, param, loaded_weight, loaded_shard_id=None):
        if loaded_shard_id is None:   # a checkpoint that fuses the parts already: split it
            at = 0
            for k, size in enumerate(self.output_sizes):
                self.weight_loader(param, loaded_weight.narrow(0, at, size), k)
                at += size
            return
        if isinstance(loaded_shard_id, tuple):   # consecutive parts in one checkpoint tensor
            at = 0
            for k in loaded_shard_id:
                size = self.output_sizes[k]
                self.weight_loader(param, loaded_weight.narrow(0, at, size), k)
                at += size
            return
        size = self.output_sizes[loaded_shard_id] // self.tp_size
        offset = sum(self.output_sizes[:loaded_shard_id]) // self.tp_size
        if isinstance(param, BasevLLMParameter):
            param.load_merged_column_weight(loaded_weight, shard_id=loaded_shard_id, shard_offset=offset,
                                            shard_size=size, tp_rank=self.tp_rank)
            return
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
        d = head_size
        super().__init__(hidden_size, out, bias, False, params_dtype, quant_config, prefix,
                         output_sizes=sizes,
                         partition_sizes=[self.num_heads * d, self.num_kv_heads * d, self.num_kv_heads * d])

    def weight_loader(self, param, loaded_weight, loaded_shard_id=None):
        d = self.head_size
        if loaded_shard_id is None:   # fused q/k/v checkpoint tensor
            sizes = self.output_sizes
            at = 0
            for sid, size in zip("qkv", sizes):
                self.weight_loader(param, loaded_weight.narrow(0, at, size), sid)
                at += size
            return
        if isinstance(param, BasevLLMParameter):
            offset = {"q": 0, "k": self.num_heads * d, "v": (self.num_heads + self.num_kv_heads) * d}
            size = self.num_heads * d if loaded_shard_id == "q" else self.num_kv_heads * d
            param.load_qkv_weight(loaded_weight, num_heads=self.num_kv_head_replicas, shard_id=loaded_shard_id,
                                  shard_offset=offset[loaded_shard_id], shard_size=size, tp_rank=self.tp_rank)
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
        if not self._quantized([output_size], cols):
            _weight(self, output_size, cols, self.weight_loader, input_dim=1)
        if bias:
            self.bias = _param((output_size,), self.params_dtype, self.weight_loader)
        else:
            self.register_parameter("bias", None)

    def weight_loader(self, param, loaded_weight):
        if isinstance(param, BasevLLMParameter):
            param.load_row_parallel_weight(loaded_weight.reshape(1) if loaded_weight.dim() == 0
                                           else loaded_weight)
            return
        if param.dim() == 2:
            n = param.shape[1]
            loaded_weight = loaded_weight.narrow(1, self.tp_rank * n, n)
        param.data.copy_(loaded_weight)
