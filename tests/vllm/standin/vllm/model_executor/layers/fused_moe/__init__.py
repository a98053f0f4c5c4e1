"""STAND-IN for vllm.model_executor.layers.fused_moe."""

from .layer import FusedMoE, determine_expert_map  # noqa: F401
