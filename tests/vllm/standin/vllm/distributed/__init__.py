"""STAND-IN for vllm.distributed (re-exports the accessors of parallel_state, as vLLM does)."""

from .parallel_state import (destroy_model_parallel, get_dp_group, get_ep_group, get_pp_group,  # noqa: F401
                             get_tensor_model_parallel_rank, get_tensor_model_parallel_world_size,
                             get_tp_group, get_world_group, init_distributed_environment,
                             initialize_model_parallel)
