"""shardload.vllm -- vLLM's load format "shardload" (`vllm serve M --load-format shardload`).

A thin adaptor over shardload.torch.load_into, written against the model-loader interface of
vLLM 0.10.2 / 0.11 (vllm/model_executor/model_loader/base_loader.py: BaseModelLoader with
download_model(model_config) and load_weights(model, model_config); registration through
vllm.model_executor.model_loader.register_model_loader, or ModelLoaderRegistry.register where a
version has that instead). It is not exercised in CI (vLLM is not installed there): everything it
does is load_into, which is.

It works where every vLLM worker is an MPI rank: the external_launcher executor started by mpirun
(launch/vllm-mpirun.sh). Ranks follow vLLM's order (dp outer, then pp, then tp), which is
shardload's. Options: the load config's model_loader_extra_config is passed on as shardload
configuration keys (e.g. {"threads": 16, "load_strategy": "mmap"}).

vllm is imported only by register() and the loader class, never by `import shardload`.
"""

LOAD_FORMAT = "shardload"
_registered = None


def _parallel():
    from vllm.config import get_current_vllm_config
    from vllm.distributed import get_pp_group, get_tensor_model_parallel_world_size
    import torch.distributed as dist
    tp = get_tensor_model_parallel_world_size()
    pp = get_pp_group().world_size
    world = dist.get_world_size() if dist.is_initialized() else tp * pp
    parallel = get_current_vllm_config().parallel_config
    return {"tp": tp, "pp": pp, "dp": max(1, world // (tp * pp)),
            "enable_expert_parallel": bool(getattr(parallel, "enable_expert_parallel", False))}


def loader_class():
    """The BaseModelLoader subclass (defined on first use: it needs vllm)."""
    from vllm.model_executor.model_loader.base_loader import BaseModelLoader

    class ShardloadModelLoader(BaseModelLoader):
        """load_format="shardload": every rank loads its own shards with shardload."""

        def download_model(self, model_config):
            # Rank 0 of the load resolves Hub repositories itself; nothing to do ahead of it.
            return None

        def load_weights(self, model, model_config):
            import torch
            from .torch import load_into
            options = dict(getattr(self.load_config, "model_loader_extra_config", None) or {})
            options.update(_parallel())
            if any(p.is_cuda for p in model.parameters()):
                options.setdefault("device", "cuda")
                options.setdefault("cuda_device", torch.cuda.current_device())
            revision = getattr(model_config, "revision", None)
            if revision:
                options.setdefault("revision", revision)
            load_into(model, model_config.model, **options)

    return ShardloadModelLoader


def register():
    """The vllm.general_plugins entry point: registers load_format "shardload"."""
    global _registered
    if _registered is not None:
        return _registered
    cls = loader_class()
    try:
        from vllm.model_executor.model_loader import register_model_loader
        register_model_loader(LOAD_FORMAT)(cls)
    except ImportError:
        from vllm.model_executor.model_loader.registry import ModelLoaderRegistry
        ModelLoaderRegistry.register(LOAD_FORMAT)(cls)
    _registered = cls
    return cls
