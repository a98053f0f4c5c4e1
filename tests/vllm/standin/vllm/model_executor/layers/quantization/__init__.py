"""STAND-IN for vllm.model_executor.layers.quantization."""
