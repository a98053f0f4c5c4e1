"""STAND-IN for vllm.v1.worker.worker_base: WorkerBase (the attributes a worker extension uses: rank,
local_rank, vllm_config, model_runner, get_model()) and WorkerWrapperBase, which builds the worker
class named by parallel_config.worker_cls (after loading the general plugins) and, when parallel_config.worker_extension_cls names a
class, adds that class to the worker class's bases first (vLLM refuses an extension attribute the
worker class already has), so that collective_rpc can call the extension's methods on every
worker (vLLM `vllm/v1/worker/worker_base.py`, `WorkerWrapperBase.init_worker` and
`execute_method`). execute_method(method, *args) runs a method named by a string, or a callable
given the worker as its first argument (vLLM's `run_method`)."""

import importlib


def resolve_obj_by_qualname(qualname):
    module, _, name = qualname.rpartition(".")
    return getattr(importlib.import_module(module), name)


def run_method(obj, method, args, kwargs):
    if isinstance(method, str):
        return getattr(obj, method)(*args, **kwargs)
    return method(obj, *args, **kwargs)


class WorkerBase:
    def __init__(self, vllm_config, local_rank, rank, distributed_init_method, is_driver_worker=False):
        self.vllm_config = vllm_config
        self.model_config = vllm_config.model_config
        self.load_config = vllm_config.load_config
        self.parallel_config = vllm_config.parallel_config
        self.local_rank, self.rank = local_rank, rank
        self.distributed_init_method = distributed_init_method
        self.is_driver_worker = is_driver_worker
        self.device = None
        self.model_runner = None

    def get_model(self):
        raise NotImplementedError


class WorkerWrapperBase:
    def __init__(self, rpc_rank=0):
        self.rpc_rank = rpc_rank
        self.worker = None

    def init_worker(self, all_kwargs):
        kwargs = all_kwargs[self.rpc_rank]
        from vllm.plugins import load_general_plugins
        load_general_plugins()
        parallel = kwargs["vllm_config"].parallel_config
        worker_class = resolve_obj_by_qualname(parallel.worker_cls)
        if parallel.worker_extension_cls:
            extension = resolve_obj_by_qualname(parallel.worker_extension_cls)
            if extension not in worker_class.__bases__:
                for attr in dir(extension):
                    if not attr.startswith("__"):
                        assert not hasattr(worker_class, attr), (
                            "worker class %s already has an attribute %s, which conflicts with the "
                            "worker extension class %s" % (worker_class, attr, extension))
                worker_class.__bases__ = worker_class.__bases__ + (extension,)
        self.worker = worker_class(**kwargs)

    def execute_method(self, method, *args, **kwargs):
        return run_method(self, method, args, kwargs)

    def __getattr__(self, attr):
        return getattr(self.worker, attr)
