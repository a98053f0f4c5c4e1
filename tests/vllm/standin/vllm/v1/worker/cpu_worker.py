"""STAND-IN for vLLM's worker class on a device (vllm/v1/worker/gpu_worker.py `Worker`,
cpu_worker.py `CPUWorker`): init_device() joins vLLM's world (gloo here) and sets up its groups,
load_model() builds and loads the model through the configured load format (the model runner
holds it as .model), get_model() returns it."""

import types

from .worker_base import WorkerBase


class CPUWorker(WorkerBase):
    def init_device(self):
        from vllm.distributed import parallel_state as ps
        parallel = self.parallel_config
        world = parallel.world_size_across_dp
        ps.init_distributed_environment(world, self.rank, self.distributed_init_method, self.local_rank, "gloo")
        ps.initialize_model_parallel(parallel.tensor_parallel_size, parallel.pipeline_parallel_size,
                                     parallel.data_parallel_size)
        self.model_runner = types.SimpleNamespace(model=None)

    def load_model(self):
        from vllm.model_executor.model_loader import get_model
        self.model_runner.model = get_model(vllm_config=self.vllm_config)

    def get_model(self):
        return self.model_runner.model
