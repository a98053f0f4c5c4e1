"""STAND-IN for vllm.model_executor.model_loader: the load-format registry. register_model_loader
(name) is a class decorator (a BaseModelLoader subclass; an existing name is overwritten with a
warning); get_model_loader(load_config) instantiates the class of load_config.load_format;
get_model builds and loads a model."""

import warnings

from .base_loader import BaseModelLoader
from .default_loader import DefaultModelLoader

_LOAD_FORMAT_TO_MODEL_LOADER = {"auto": DefaultModelLoader, "hf": DefaultModelLoader,
                                "safetensors": DefaultModelLoader}


def register_model_loader(load_format):
    def wrapper(cls):
        if not (isinstance(cls, type) and issubclass(cls, BaseModelLoader)):
            raise ValueError("%r is not a BaseModelLoader subclass" % (cls,))
        if load_format in _LOAD_FORMAT_TO_MODEL_LOADER:
            warnings.warn("load format %r is already registered; overwriting it" % load_format)
        _LOAD_FORMAT_TO_MODEL_LOADER[load_format] = cls
        return cls
    return wrapper


def get_model_loader(load_config):
    cls = _LOAD_FORMAT_TO_MODEL_LOADER.get(load_config.load_format)
    if cls is None:
        raise ValueError("Unknown load_format: %s" % load_config.load_format)
    return cls(load_config)


def get_model(*, vllm_config, model_config=None, load_config=None, prefix=""):
    loader = get_model_loader(load_config or vllm_config.load_config)
    return loader.load_model(vllm_config=vllm_config,
                             model_config=model_config or vllm_config.model_config, prefix=prefix)


__all__ = ["BaseModelLoader", "DefaultModelLoader", "get_model", "get_model_loader",
           "register_model_loader"]
