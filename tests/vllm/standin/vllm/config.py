"""STAND-IN for vllm.config (vLLM's vllm/config/): the config classes shardload.vllm reads, and the
current-config context that vLLM sets while it builds a model (get_current_vllm_config outside
it returns a default VllmConfig, as vLLM does, with a warning)."""

import contextlib
import dataclasses
import json
import os
import types
import warnings
from typing import Any, Optional

import torch


def _namespace(d):
    if isinstance(d, dict):
        return types.SimpleNamespace(**{k: _namespace(v) for k, v in d.items()})
    return d


@dataclasses.dataclass
class MultiModalConfig:
    """vLLM's vllm/config/multimodal.py: language_model_only (--language-model-only) and
    limit_per_prompt (--limit-mm-per-prompt); get_limit_per_prompt(modality) is 0 for every
    modality with language_model_only, else the limit given (vLLM's default when none is)."""
    language_model_only: bool = False
    limit_per_prompt: dict = dataclasses.field(default_factory=dict)
    mm_encoder_tp_mode: str = "weights"   # weights | data

    def get_limit_per_prompt(self, modality):
        if self.language_model_only:
            return 0
        return int(self.limit_per_prompt.get(modality, 999))


@dataclasses.dataclass
class ModelConfig:
    """model: folder of the checkpoint; dtype: "auto" (config.json's torch_dtype) or a torch
    dtype or its name; hf_config: config.json as attributes (the text config for multimodal
    models is hf_config.text_config, as transformers gives it); quant_config_dict: its
    quantization_config (else text_config's, else hf_quant_config.json's), quantization: its method; multimodal_config: a
    MultiModalConfig for a config.json with vision_config (a multimodal model), else None."""
    model: str = ""
    revision: Optional[str] = None
    dtype: Any = "auto"
    quantization: Optional[str] = None
    language_model_only: bool = False
    limit_mm_per_prompt: Optional[dict] = None
    mm_encoder_tp_mode: str = "weights"

    def __post_init__(self):
        with open(os.path.join(self.model, "config.json")) as f:
            raw = json.load(f)
        self.hf_config = _namespace(raw)
        self.multimodal_config = MultiModalConfig(self.language_model_only, dict(
            self.limit_mm_per_prompt or {}), self.mm_encoder_tp_mode) if "vision_config" in raw else None
        self.hf_text_config = getattr(self.hf_config, "text_config", self.hf_config)
        self.architectures = list(raw.get("architectures", []))
        # ModelOpt's older releases keep the quantization config in hf_quant_config.json (vLLM's
        # get_config reads it when config.json has none); its producer names the method.
        quant = raw.get("quantization_config")
        if quant is None:   # vLLM checks the text config too, for multimodal models (Kimi-K2.5)
            quant = (raw.get("text_config") or {}).get("quantization_config")
        side = os.path.join(self.model, "hf_quant_config.json")
        if quant is None and os.path.isfile(side):
            with open(side) as f:
                quant = json.load(f)
        self.quant_config_dict = quant
        if self.quantization is None and quant is not None:
            self.quantization = quant.get("quant_method") or \
                ("modelopt" if quant.get("producer", {}).get("name") == "modelopt" else None)
        if self.dtype == "auto":
            name = raw.get("torch_dtype") or getattr(self.hf_text_config, "torch_dtype", "float32")
            self.dtype = name
        if isinstance(self.dtype, str):
            self.dtype = getattr(torch, self.dtype)


@dataclasses.dataclass
class LoadConfig:
    load_format: str = "auto"
    download_dir: Optional[str] = None
    model_loader_extra_config: dict = dataclasses.field(default_factory=dict)
    device: Optional[str] = None
    ignore_patterns: Optional[list] = None


@dataclasses.dataclass
class EPLBConfig:
    num_redundant_experts: int = 0


@dataclasses.dataclass
class ParallelConfig:
    tensor_parallel_size: int = 1
    pipeline_parallel_size: int = 1
    data_parallel_size: int = 1
    data_parallel_rank: int = 0
    enable_expert_parallel: bool = False
    expert_placement_strategy: str = "linear"   # linear | round_robin
    enable_eplb: bool = False
    eplb_config: EPLBConfig = dataclasses.field(default_factory=EPLBConfig)
    distributed_executor_backend: Optional[str] = None   # mp | ray | external_launcher
    prefill_context_parallel_size: int = 1
    decode_context_parallel_size: int = 1
    worker_cls: str = "vllm.v1.worker.cpu_worker.CPUWorker"
    worker_extension_cls: str = ""   # a class added to the worker's bases (collective_rpc methods)

    @property
    def world_size(self):
        return self.tensor_parallel_size * self.pipeline_parallel_size

    @property
    def world_size_across_dp(self):
        return self.world_size * self.data_parallel_size


@dataclasses.dataclass
class DeviceConfig:
    device: str = "cpu"


@dataclasses.dataclass
class CacheConfig:
    cache_dtype: str = "auto"


@dataclasses.dataclass
class SpeculativeConfig:
    """draft_model_config: the draft's ModelConfig. As vLLM's hf_config_override, a draft of model
    type deepseek_v3, deepseek_v32 or glm_moe_dsa is the checkpoint's multi-token-prediction
    layers: its architectures become ["DeepSeekMTPModel"]."""
    draft_model_config: Optional[ModelConfig] = None

    def __post_init__(self):
        m = self.draft_model_config
        if m is not None and getattr(m.hf_config, "model_type", None) in (
                "deepseek_v3", "deepseek_v32", "glm_moe_dsa"):
            m.architectures = ["DeepSeekMTPModel"]
            m.hf_config.architectures = ["DeepSeekMTPModel"]


@dataclasses.dataclass
class VllmConfig:
    model_config: Optional[ModelConfig] = None
    load_config: LoadConfig = dataclasses.field(default_factory=LoadConfig)
    parallel_config: ParallelConfig = dataclasses.field(default_factory=ParallelConfig)
    device_config: DeviceConfig = dataclasses.field(default_factory=DeviceConfig)
    cache_config: CacheConfig = dataclasses.field(default_factory=CacheConfig)
    speculative_config: Optional[SpeculativeConfig] = None


_current = None


@contextlib.contextmanager
def set_current_vllm_config(vllm_config):
    global _current
    old = _current
    _current = vllm_config
    try:
        yield
    finally:
        _current = old


def get_current_vllm_config():
    if _current is None:
        warnings.warn("Current vLLM config is not set.")
        return VllmConfig()
    return _current
