"""STAND-IN for vllm.model_executor.layers.layernorm: RMSNorm (and GemmaRMSNorm, RMSNormGated: the
gated DeltaNet's norm over one head, [head_v_dim]) holds `weight` [hidden] (ones), loaded by
default_weight_loader (no weight_loader attribute); LayerNorm holds `weight` (ones) and `bias`
(zeros) [dim] in float32 whatever the model dtype (vLLM's LayerNorm creates them so), loaded by
default_weight_loader, whose copy_ converts a checkpoint's BF16."""

import torch


class RMSNorm(torch.nn.Module):
    def __init__(self, hidden_size, eps=1e-6):
        super().__init__()
        self.variance_epsilon = eps
        self.weight = torch.nn.Parameter(torch.ones(hidden_size), requires_grad=False)

    def forward(self, x):
        x32 = x.float()
        x32 = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.variance_epsilon)
        return x32.to(x.dtype) * self.weight


class LayerNorm(torch.nn.Module):
    def __init__(self, dim, eps=1e-6):
        super().__init__()
        self.dim, self.eps = dim, eps
        self.weight = torch.nn.Parameter(torch.ones(dim, dtype=torch.float32), requires_grad=False)
        self.bias = torch.nn.Parameter(torch.zeros(dim, dtype=torch.float32), requires_grad=False)


GemmaRMSNorm = RMSNorm


class RMSNormGated(RMSNorm):
    def __init__(self, hidden_size, eps=1e-5, group_size=None, norm_before_gate=True, **kw):
        super().__init__(hidden_size, eps)
