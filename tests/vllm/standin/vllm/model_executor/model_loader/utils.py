"""STAND-IN for vllm.model_executor.model_loader.utils: initialize_model builds the model class of
the architecture with the current vLLM config set (the only time vLLM 0.10.2-0.13 sets it), and
process_weights_after_loading runs each module's quantization post-processing, then each
attention layer's."""

import contextlib
import dataclasses

import torch

from vllm.attention import Attention
from vllm.config import set_current_vllm_config


@contextlib.contextmanager
def set_default_torch_dtype(dtype):
    old = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        yield
    finally:
        torch.set_default_dtype(old)


def initialize_model(vllm_config, model_config=None, prefix=""):
    from vllm.model_executor.models import ModelRegistry
    model_config = model_config or vllm_config.model_config
    cls = ModelRegistry.resolve(model_config.architectures)
    config = dataclasses.replace(vllm_config, model_config=model_config)
    with set_current_vllm_config(config):
        return cls(vllm_config=config, prefix=prefix)


def process_weights_after_loading(model, model_config, target_device):
    for module in model.modules():
        qm = getattr(module, "quant_method", None)
        if qm is not None and not isinstance(module, Attention) and \
                hasattr(qm, "process_weights_after_loading"):
            qm.process_weights_after_loading(module)
    for module in model.modules():
        if isinstance(module, Attention):
            module.process_weights_after_loading(model_config.dtype)
