"""Test architectures of the stand-in (not vLLM's): the Llama decoder with weight loaders that do
what a recorded plan cannot express or must refuse, for the recorder's tests.

- ArithLlamaForCausalLM: the norms are stored as offsets from 1 and loaded as 1 + w (arithmetic
  on a checkpoint tensor, as some model files do); gate_proj and up_proj are kept until both
  arrived, then concatenated and handed to gate_up_proj's weight_loader as one fused tensor
  (torch.cat of two checkpoint tensors). Both must fall back: loaded as real tensors through this
  load_weights, equal to what the `auto` format gives.
- SparsityLlamaForCausalLM: load_weights counts each tensor's nonzero elements first (an op with
  a data-dependent shape, which no stand-in can run): the recording fails, and every worker hands
  the model to vLLM's own loader.
- StrayLlamaForCausalLM: model.norm.weight is a view into a larger buffer, and its loader writes
  one element past it (as_strided over the buffer): the recording refuses it, naming the
  parameter and the checkpoint tensor.
"""

import torch

from vllm.model_executor.model_loader.weight_utils import default_weight_loader

from .llama import LlamaForCausalLM


class ArithLlamaForCausalLM(LlamaForCausalLM):
    def load_weights(self, weights):
        params = dict(self.named_parameters())
        pending = {}
        rest = []
        loaded = set()
        for name, w in weights:
            if name.endswith("layernorm.weight") or name == "model.norm.weight":
                if name not in params:
                    continue
                p = params[name]
                default_weight_loader(p, 1.0 + w)
                loaded.add(name)
            elif ".mlp.gate_proj." in name or ".mlp.up_proj." in name:
                prefix = name.split(".mlp.")[0]
                pending.setdefault(prefix, {})["gate" if ".gate_proj." in name else "up"] = w
                if len(pending[prefix]) == 2:
                    parts = pending.pop(prefix)
                    target = prefix + ".mlp.gate_up_proj.weight"
                    if target in params:
                        p = params[target]
                        p.weight_loader(p, torch.cat([parts["gate"], parts["up"]], dim=0))
                        loaded.add(target)
            else:
                rest.append((name, w))
        return loaded | super().load_weights(iter(rest))


class SparsityLlamaForCausalLM(LlamaForCausalLM):
    def load_weights(self, weights):
        self.nonzero = {}
        rest = []
        for name, w in weights:
            self.nonzero[name] = int(torch.nonzero(w).shape[0])
            rest.append((name, w))
        return super().load_weights(iter(rest))


class StrayLlamaForCausalLM(LlamaForCausalLM):
    def __init__(self, vllm_config, prefix=""):
        super().__init__(vllm_config, prefix)
        norm = getattr(self.model, "norm", None)
        if isinstance(getattr(norm, "weight", None), torch.nn.Parameter):
            n = norm.weight.numel()
            buffer = torch.zeros(n + 1, dtype=norm.weight.dtype)
            norm.weight = torch.nn.Parameter(buffer[:n], requires_grad=False)

    def load_weights(self, weights):
        rest = []
        for name, w in weights:
            if name == "model.norm.weight" and hasattr(self.model.norm, "weight"):
                p = self.model.norm.weight
                n = p.numel()
                p.data.as_strided((n + 1,), (1,), p.storage_offset()).narrow(0, 1, n).copy_(w)
                continue
            rest.append((name, w))
        return super().load_weights(iter(rest)) | {"model.norm.weight"}
