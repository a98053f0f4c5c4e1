"""STAND-IN for vllm.model_executor.models.utils and vllm.distributed.utils.get_pp_indices: the
layers of a pipeline stage, and PPMissingLayer for the others.

Split (vLLM's): VLLM_PP_LAYER_PARTITION ("4,6,6,4") when set, else base = L // P layers per stage
and the L % P stages just before the last get one more."""

import os

import torch

from vllm.distributed import get_pp_group


class PPMissingLayer(torch.nn.Identity):
    """A layer another pipeline stage holds: no parameters."""


def get_pp_indices(num_layers, pp_rank, pp_size):
    text = os.environ.get("VLLM_PP_LAYER_PARTITION")
    if text:
        counts = [int(x) for x in text.split(",")]
        assert len(counts) == pp_size and sum(counts) == num_layers
    else:
        base, rem = divmod(num_layers, pp_size)
        counts = [base] * pp_size
        for i in range(rem):
            counts[pp_size - 2 - i] += 1
    start = sum(counts[:pp_rank])
    return start, start + counts[pp_rank]


def make_layers(num_layers, layer_fn, prefix):
    pp = get_pp_group()
    start, end = get_pp_indices(num_layers, pp.rank_in_group, pp.world_size)
    layers = torch.nn.ModuleList([layer_fn(prefix="%s.%d" % (prefix, i)) if start <= i < end
                                  else PPMissingLayer() for i in range(num_layers)])
    return start, end, layers


def is_pp_missing_parameter(name, model):
    for mod_name, mod in model.named_modules():
        if isinstance(mod, PPMissingLayer) and name.startswith(mod_name + "."):
            return True
    return False
