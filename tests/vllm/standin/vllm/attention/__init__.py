"""STAND-IN for vllm.attention."""

from .layer import Attention  # noqa: F401
