"""STAND-IN for vllm.distributed.parallel_state: the world and the tensor-, pipeline-, data- and
expert-parallel groups as vLLM arranges them. Global rank = ((dp * pp) + pp_rank) * tp + tp_rank
(vLLM lays the ranks out as [dp, pp, tp], tp fastest); the expert group of a stage spans its
dp * tp ranks. Each group is a GroupCoordinator with .ranks, .world_size, .rank_in_group and a
gloo .cpu_group (vLLM's device group is NCCL; here, without GPUs, the same gloo group)."""

import torch
import torch.distributed as dist


class GroupCoordinator:
    def __init__(self, group_ranks, name):
        self.unique_name = name
        self.rank = dist.get_rank()
        self.cpu_group = None
        for ranks in group_ranks:          # every rank creates every group, in the same order
            pg = dist.new_group(ranks, backend="gloo")
            if self.rank in ranks:
                self.ranks = list(ranks)
                self.cpu_group = pg
        self.device_group = self.cpu_group
        self.world_size = len(self.ranks)
        self.rank_in_group = self.ranks.index(self.rank)
        self.local_rank = self.rank

    @property
    def is_first_rank(self):
        return self.rank_in_group == 0

    @property
    def is_last_rank(self):
        return self.rank_in_group == self.world_size - 1


_WORLD = _TP = _PP = _DP = _EP = None


def init_distributed_environment(world_size=-1, rank=-1, distributed_init_method="env://",
                                 local_rank=-1, backend="gloo"):
    global _WORLD
    if not dist.is_initialized():
        dist.init_process_group(backend, init_method=distributed_init_method,
                                world_size=world_size, rank=rank)
    if _WORLD is None:
        _WORLD = GroupCoordinator([list(range(dist.get_world_size()))], "world")


def initialize_model_parallel(tensor_model_parallel_size=1, pipeline_model_parallel_size=1,
                              data_parallel_size=1, backend="gloo"):
    global _TP, _PP, _DP, _EP
    tp, pp, dp = tensor_model_parallel_size, pipeline_model_parallel_size, data_parallel_size
    world = dist.get_world_size()
    assert world == tp * pp * dp, "world %d != tp %d x pp %d x dp %d" % (world, tp, pp, dp)
    ranks = torch.arange(world).reshape(-1, dp, pp, tp)
    _TP = GroupCoordinator(ranks.view(-1, tp).tolist(), "tp")
    _PP = GroupCoordinator(ranks.transpose(2, 3).reshape(-1, pp).tolist(), "pp")
    _DP = GroupCoordinator(ranks.transpose(1, 3).reshape(-1, dp).tolist(), "dp")
    _EP = GroupCoordinator(ranks.transpose(1, 2).reshape(-1, dp * tp).tolist(), "ep")


def destroy_model_parallel():
    global _TP, _PP, _DP, _EP, _WORLD
    _TP = _PP = _DP = _EP = _WORLD = None


def _need(g, what):
    assert g is not None, "%s group is not initialized" % what
    return g


def get_world_group():
    return _need(_WORLD, "world")


def get_tp_group():
    return _need(_TP, "tensor model parallel")


def get_pp_group():
    return _need(_PP, "pipeline model parallel")


def get_dp_group():
    return _need(_DP, "data parallel")


def get_ep_group():
    return _need(_EP, "expert parallel")


def get_tensor_model_parallel_rank():
    return get_tp_group().rank_in_group


def get_tensor_model_parallel_world_size():
    return get_tp_group().world_size
