"""STAND-IN for vllm.model_executor.model_loader.base_loader: BaseModelLoader(load_config) with the
abstract download_model(model_config) and load_weights(model, model_config), and load_model
(vllm_config, model_config): builds the model under the model dtype with the config context set,
calls load_weights, then process_weights_after_loading, and returns the model in eval mode."""

import abc

import torch

from .utils import initialize_model, process_weights_after_loading, set_default_torch_dtype


class BaseModelLoader(abc.ABC):
    def __init__(self, load_config):
        self.load_config = load_config

    @abc.abstractmethod
    def download_model(self, model_config):
        raise NotImplementedError

    @abc.abstractmethod
    def load_weights(self, model, model_config):
        raise NotImplementedError

    def load_model(self, vllm_config, model_config, prefix=""):
        device = self.load_config.device or vllm_config.device_config.device
        with set_default_torch_dtype(model_config.dtype):
            model = initialize_model(vllm_config=vllm_config, model_config=model_config,
                                     prefix=prefix)
            self.load_weights(model, model_config)
            process_weights_after_loading(model, model_config, torch.device(device))
        return model.eval()
