"""STAND-IN for vllm.model_executor.models.utils and vllm.distributed.utils.get_pp_indices: the
layers of a pipeline stage, and PPMissingLayer for the others.

Split (vLLM's): VLLM_PP_LAYER_PARTITION ("4,6,6,4") when set, else base = L // P layers per stage
and the L % P stages just before the last get one more."""

import os
import weakref

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


_pp_missing_names = {}   # id(model) -> (weak reference, its PPMissingLayer names), as vLLM caches


def get_pp_missing_layer_names(model):
    """The prefixes ("name.") of the model's PPMissingLayer modules, computed once per model."""
    entry = _pp_missing_names.get(id(model))
    if entry is None or entry[0]() is not model:
        names = [name + "." for name, mod in model.named_modules() if isinstance(mod, PPMissingLayer)]
        entry = _pp_missing_names[id(model)] = (weakref.ref(model), names)
    return entry[1]


def is_pp_missing_parameter(name, model):
    """vLLM's models/utils.py is_pp_missing_parameter: the name lies under a PPMissingLayer."""
    if isinstance(model, PPMissingLayer):
        return True
    return any(name.startswith(prefix) for prefix in get_pp_missing_layer_names(model))


class AutoWeightsLoader:
    """vLLM's models/utils.py AutoWeightsLoader, reduced to what the stand-in's models use:
    checkpoint names are dispatched down the module tree by their first component (consecutive
    names with one prefix go together); a child module with its own load_weights gets its names
    without the prefix, a parameter goes to its weight_loader (default_weight_loader without
    one). Names starting with one of skip_prefixes or containing one of skip_substrs are
    skipped; skip_substrs always holds the rotary tables early checkpoints carry
    (ROTARY_EMBEDS_UNUSED_WEIGHTS). Returns the set of loaded parameter names."""

    ROTARY_EMBEDS_UNUSED_WEIGHTS = ["rotary_emb.inv_freq", "rotary_emb.cos_cached",
                                    "rotary_emb.sin_cached"]

    def __init__(self, module, skip_prefixes=None, skip_substrs=None):
        self.module = module
        self.skip_prefixes = list(skip_prefixes or [])
        self.skip_substrs = list(skip_substrs or []) + self.ROTARY_EMBEDS_UNUSED_WEIGHTS

    def _skip(self, name):
        return any(name.startswith(p) for p in self.skip_prefixes) or \
            any(s in name for s in self.skip_substrs)

    def load_weights(self, weights):
        return self._load(self.module, "", (kv for kv in weights if not self._skip(kv[0])))

    def _load(self, module, base, weights):
        import itertools
        from vllm.model_executor.model_loader.weight_utils import default_weight_loader
        loaded = set()
        if module is not self.module and hasattr(module, "load_weights"):
            return {base + n for n in module.load_weights(weights) or ()}
        children = dict(module.named_children())
        params = dict(module.named_parameters(recurse=False))
        for prefix, group in itertools.groupby(weights, key=lambda kv: kv[0].split(".", 1)[0]):
            if prefix in children:
                rest = ((n.split(".", 1)[1], w) for n, w in group)
                loaded |= self._load(children[prefix], base + prefix + ".", rest)
            elif prefix in params:
                for _, w in group:
                    p = params[prefix]
                    getattr(p, "weight_loader", default_weight_loader)(p, w)
                    loaded.add(base + prefix)
            else:
                names = [n for n, _ in group]
                raise ValueError("There is no module or parameter named '%s' in %s (%s)"
                                 % (base + prefix, type(self.module).__name__, names[:3]))
        return loaded
