"""STAND-IN for vllm.model_executor.layers.vocab_parallel_embedding: the vocabulary is padded to a
multiple of 64 and split in equal parts; rank r holds rows [r*per, (r+1)*per) of the padded
vocabulary, of which the real ones come from the checkpoint and the padding rows are zero.
ParallelLMHead is the same layer; tie_weights(embed_tokens) makes it share embed_tokens' weight
Parameter (one Parameter under two names)."""

import torch

from vllm.distributed import get_tensor_model_parallel_rank, get_tensor_model_parallel_world_size
from vllm.model_executor.utils import set_weight_attrs

DEFAULT_VOCAB_PADDING_SIZE = 64


def pad_vocab_size(vocab_size, pad_to=DEFAULT_VOCAB_PADDING_SIZE):
    return ((vocab_size + pad_to - 1) // pad_to) * pad_to


class VocabParallelEmbedding(torch.nn.Module):
    def __init__(self, num_embeddings, embedding_dim, params_dtype=None, org_num_embeddings=None,
                 padding_size=DEFAULT_VOCAB_PADDING_SIZE, quant_config=None, prefix=""):
        super().__init__()
        tp, r = get_tensor_model_parallel_world_size(), get_tensor_model_parallel_rank()
        self.org_vocab_size = num_embeddings
        self.num_embeddings_padded = pad_vocab_size(num_embeddings, padding_size)
        assert self.num_embeddings_padded % tp == 0
        per = self.num_embeddings_padded // tp
        self.vocab_start_index = r * per
        self.org_vocab_start_index = min(r * per, num_embeddings)
        self.org_vocab_end_index = min((r + 1) * per, num_embeddings)
        dtype = params_dtype or torch.get_default_dtype()
        self.weight = torch.nn.Parameter(torch.empty(per, embedding_dim, dtype=dtype),
                                         requires_grad=False)
        set_weight_attrs(self.weight, {"weight_loader": self.weight_loader, "output_dim": 0})

    def weight_loader(self, param, loaded_weight):
        assert loaded_weight.shape[0] == self.org_vocab_size, (loaded_weight.shape, self.org_vocab_size)
        n = self.org_vocab_end_index - self.org_vocab_start_index
        param.data[:n].copy_(loaded_weight.narrow(0, self.org_vocab_start_index, n))
        param.data[n:].fill_(0)


class ParallelLMHead(VocabParallelEmbedding):
    def __init__(self, num_embeddings, embedding_dim, bias=False, params_dtype=None,
                 org_num_embeddings=None, padding_size=DEFAULT_VOCAB_PADDING_SIZE,
                 quant_config=None, prefix=""):
        super().__init__(num_embeddings, embedding_dim, params_dtype, org_num_embeddings,
                         padding_size, quant_config, prefix)
        self.register_parameter("bias", None)

    def tie_weights(self, embed_tokens):
        self.weight = embed_tokens.weight
        return self
