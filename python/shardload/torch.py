"""shardload.torch -- load a checkpoint straight into an nn.Module's own parameters.

    missing, unexpected = shardload.torch.load_into(module, "/models/m", tp=2)

Every parameter and persistent buffer of `module` whose name is a planned parameter (vLLM's
layout: qkv_proj, gate_up_proj, experts.w13_weight / w2_weight, padded vocabulary ...) is bound,
so the loader writes into the module's memory (no copy, no second allocation). Returns
(missing, unexpected) as torch's load_state_dict does: module tensors the plan does not fill, and
planned parameters the module lacks. With strict (the default, as the C key `strict`) either list
non-empty is an error raised on every rank before any byte is read; strict=False loads the rest.
A planned alias (tied embeddings: lm_head.weight) is filled by sharing when the module ties the
two tensors already, else copied from its target after the load.
"""

import torch

from .errors import MissingWeightsError, UnexpectedWeightsError
from .loader import Loader


def module_tensors(module):
    """{name: tensor}: parameters and persistent buffers, as state_dict names them."""
    out = {}
    for name, p in module.named_parameters():
        out[name] = p
    for mod_name, mod in module.named_modules():
        skip = getattr(mod, "_non_persistent_buffers_set", set())
        for b_name, b in mod.named_buffers(recurse=False):
            if b is not None and b_name not in skip:
                out[(mod_name + "." if mod_name else "") + b_name] = b
    return out


def _strict_value(strict, config):
    if strict is None:
        strict = config.pop("strict", True)
    if isinstance(strict, str):
        strict = strict.lower() in ("1", "true", "yes", "on")
    return bool(strict)


def load_into(module, model, comm=None, strict=None, **config):
    """COLLECTIVE. Loads `model` (folder or Hub id) into `module` on every rank of comm.
    config: the C library's keys (tp, pp, dp, enable_expert_parallel, device, ...). The device
    defaults to the module's (cuda when its parameters are on a GPU)."""
    strict = _strict_value(strict, config)
    tensors = module_tensors(module)
    if "device" not in config:
        on_gpu = any(t.is_cuda for t in tensors.values())
        config["device"] = "cuda" if on_gpu else "cpu"
    with Loader(model, comm, strict=strict, **config) as loader:
        plan = loader.plan()
        planned = {p.name: p for p in plan}
        missing = sorted(n for n in tensors if n not in planned)
        unexpected = sorted(n for n in planned if n not in tensors)
        problem = None
        if strict and (missing or unexpected):
            parts = []
            if missing:
                parts.append("module tensors the checkpoint does not fill: " + ", ".join(missing))
            if unexpected:
                parts.append("planned parameters the module lacks: " + ", ".join(unexpected))
            cls = MissingWeightsError if missing else UnexpectedWeightsError
            problem = cls("load_into: " + "; ".join(parts))
        loader.agree(problem)
        aliases = []
        for name, p in planned.items():
            if name not in tensors:
                continue
            if p.alias_of is not None:
                aliases.append((name, p.alias_of))
                continue
            loader.bind(name, tensors[name].data)
        loader.load()
        for name, target in aliases:
            dst = tensors[name].data
            src = tensors.get(target)
            if src is not None and dst.data_ptr() != src.data.data_ptr():
                with torch.no_grad():
                    dst.copy_(src.data)
            elif src is None:
                with torch.no_grad():
                    dst.copy_(loader.params()[name])
    return missing, unexpected
