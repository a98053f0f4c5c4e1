"""A STAND-IN for vLLM, for shardload's tests only: not vLLM, and no code of vLLM's.

vLLM cannot be installed where these tests run (no package index), so this package reproduces,
in its own words, the part of vLLM's public surface that shardload.vllm touches, from the facts
of vLLM's source (vllm-project/vllm, interface of 0.10.2 and later): module paths, the model-loader
interface and registry, the plugin entry points, the process-group accessors, the config classes,
and model classes whose parameters and weight_loader rules follow vLLM's conventions (fused
qkv/gate_up, padded vocabulary, tied head, attention scales, FusedMoE with expert maps). It runs
on CPU with torch 1.13 and gloo. Each file says which vLLM module it stands for.
"""

__version__ = "0.0.0+standin"
