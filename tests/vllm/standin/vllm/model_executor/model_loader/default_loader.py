"""STAND-IN for vllm.model_executor.model_loader.default_loader.DefaultModelLoader: every rank reads
every checkpoint tensor whole and hands it to model.load_weights (the model's weight_loader rules
take each rank's part). Its extra config accepts only enable_multithread_load (bool), num_threads
(positive int) and enable_weights_track (bool); with weight tracking (default for unquantized
models) every named parameter must have been loaded, except those of modules whose quant method
post-processes them (attention scales)."""

import glob
import os

from .base_loader import BaseModelLoader
from .weight_utils import safetensors_weights_iterator


class DefaultModelLoader(BaseModelLoader):
    def __init__(self, load_config):
        super().__init__(load_config)
        extra = load_config.model_loader_extra_config
        if not isinstance(extra, dict):
            raise ValueError("model_loader_extra_config must be a dict")
        unexpected = set(extra) - {"enable_multithread_load", "num_threads", "enable_weights_track"}
        if unexpected:
            raise ValueError("Unexpected extra config keys for load format %s: %s"
                             % (load_config.load_format, unexpected))
        if not isinstance(extra.get("enable_multithread_load", False), bool):
            raise ValueError("enable_multithread_load must be a bool")
        n = extra.get("num_threads")
        if n is not None and not (isinstance(n, int) and n > 0):
            raise ValueError("num_threads must be a positive integer, got %r" % (n,))
        self.enable_weights_track = extra.get("enable_weights_track")

    def download_model(self, model_config):
        return None

    def load_weights(self, model, model_config):
        files = sorted(glob.glob(os.path.join(model_config.model, "*.safetensors")))
        if not files:
            raise RuntimeError("Cannot find any model weights with `%s`" % model_config.model)
        loaded = model.load_weights(safetensors_weights_iterator(files))
        track = self.enable_weights_track
        if track is None:
            track = model_config.quantization is None and loaded is not None
        if track and loaded is not None:
            for prefix, module in model.named_modules():
                qm = getattr(module, "quant_method", None)
                if qm is not None and hasattr(qm, "process_weights_after_loading"):
                    for n, _ in module.named_parameters():
                        loaded.add(prefix + "." + n if prefix else n)
            missing = {n for n, _ in model.named_parameters()} - loaded
            if missing:
                raise ValueError("Following weights were not initialized from checkpoint: %s"
                                 % missing)
