"""STAND-IN for vllm.model_executor (see vllm/__init__.py of this stand-in)."""
