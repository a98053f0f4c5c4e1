"""STAND-IN for vllm.model_executor.parameter: the parameters quantized linear layers create, each
loading a whole checkpoint tensor into the rank's part by the rules of its class (vLLM's
BasevLLMParameter and subclasses):

- BasevLLMParameter: every load copies the whole tensor (shapes must agree; a [] into a [1]).
- _Column (output_dim): column-parallel takes rows [tp_rank*n, +n) of output_dim; a merged part
  (shard_offset, shard_size) and a qkv part (kv parts at tp_rank // replicas) likewise, both
  divided by packed_factor when the packed dim is the output dim (zero points).
- RowvLLMParameter (input_dim): row-parallel takes [tp_rank*n, +n) of input_dim.
- ModelWeightParameter, GroupQuantScaleParameter: both; ChannelQuantScaleParameter: column only
  (row-parallel: whole); PackedvLLMParameter: both, packed; PackedColumnParameter: column, packed.
- PerTensorScaleParameter: one entry per logical part: a merged/qkv part's scalar into entry
  shard_id (q 0, k 1, v 2), column- and row-parallel ones whole.
"""

import torch

from vllm.distributed import get_tensor_model_parallel_rank, get_tensor_model_parallel_world_size


class BasevLLMParameter(torch.nn.Parameter):
    def __new__(cls, data, **kwargs):
        return super().__new__(cls, data=data, requires_grad=False)

    def __init__(self, data, weight_loader):
        self._weight_loader = weight_loader
        self.tp_rank = get_tensor_model_parallel_rank()
        self.tp_size = get_tensor_model_parallel_world_size()

    @property
    def weight_loader(self):
        return self._weight_loader

    def _assert_and_load(self, w):
        scalar = self.data.dim() == 1 and self.data.numel() == 1 and w.dim() == 0
        assert tuple(self.data.shape) == tuple(w.shape) or scalar, (self.data.shape, w.shape)
        self.data.copy_(w)

    def load_column_parallel_weight(self, w):
        self._assert_and_load(w)

    def load_row_parallel_weight(self, w):
        self._assert_and_load(w)

    def load_merged_column_weight(self, w, **kwargs):
        self._assert_and_load(w)

    def load_qkv_weight(self, w, **kwargs):
        self._assert_and_load(w)

    @staticmethod
    def shard_index(shard_id):
        return shard_id if isinstance(shard_id, int) else {"q": 0, "k": 1, "v": 2}[shard_id]


class _Column(BasevLLMParameter):
    def __init__(self, output_dim, **kwargs):
        self.output_dim = output_dim
        super().__init__(**kwargs)

    def _packed_out(self):
        return getattr(self, "packed_dim", None) == self.output_dim

    def load_column_parallel_weight(self, w):
        n = self.data.shape[self.output_dim]
        w = w.narrow(self.output_dim, self.tp_rank * n, n)
        assert self.data.shape == w.shape
        self.data.copy_(w)

    def _load_part(self, w, offset, size, block):
        if self._packed_out():
            size, offset = size // self.packed_factor, offset // self.packed_factor
        dst = self.data.narrow(self.output_dim, offset, size)
        src = w.narrow(self.output_dim, block * size, size)
        assert dst.shape == src.shape, (dst.shape, src.shape)
        dst.copy_(src)

    def load_merged_column_weight(self, w, **kwargs):
        self._load_part(w, kwargs["shard_offset"], kwargs["shard_size"], self.tp_rank)

    def load_qkv_weight(self, w, **kwargs):
        block = self.tp_rank if kwargs["shard_id"] == "q" else self.tp_rank // kwargs["num_heads"]
        self._load_part(w, kwargs["shard_offset"], kwargs["shard_size"], block)


class RowvLLMParameter(BasevLLMParameter):
    def __init__(self, input_dim, **kwargs):
        self.input_dim = input_dim
        super().__init__(**kwargs)

    def load_row_parallel_weight(self, w):
        n = self.data.shape[self.input_dim]
        w = w.narrow(self.input_dim, self.tp_rank * n, n)
        if w.dim() == 0:
            w = w.reshape(1)
        assert self.data.shape == w.shape
        self.data.copy_(w)


class ModelWeightParameter(_Column, RowvLLMParameter):
    pass


class GroupQuantScaleParameter(_Column, RowvLLMParameter):
    pass


class ChannelQuantScaleParameter(_Column):
    pass


class PackedColumnParameter(_Column):
    def __init__(self, packed_factor, packed_dim, **kwargs):
        self.packed_factor = packed_factor
        self.packed_dim = packed_dim
        super().__init__(**kwargs)


class PackedvLLMParameter(ModelWeightParameter):
    def __init__(self, packed_factor, packed_dim, **kwargs):
        self.packed_factor = packed_factor
        self.packed_dim = packed_dim
        super().__init__(**kwargs)


class PerTensorScaleParameter(BasevLLMParameter):
    def _into(self, w, shard_id):
        if w.dim() != 0:
            assert w.shape[0] == 1
            w = w[0]
        self.data[self.shard_index(shard_id)].copy_(w)

    def load_merged_column_weight(self, w, **kwargs):
        self._into(w, kwargs["shard_id"])

    def load_qkv_weight(self, w, **kwargs):
        self._into(w, kwargs["shard_id"])

    def load_column_parallel_weight(self, w):
        super().load_row_parallel_weight(w)
