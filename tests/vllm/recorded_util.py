"""recorded_util.py -- what the recorder's tests share (one process, no shardload C library
needed beyond the catalog):

- emulate(tp, pp, dp, rank): vLLM's process groups as seen by one rank of a layout, without a
  torch.distributed world (the stand-in models read only sizes and ranks while they are built and
  loaded), so that one process records every rank of any layout;
- build(folder, ...): the stand-in's model of a fixture for the emulated rank;
- real_tensors(folder): the checkpoint's tensors read whole (the stand-in's own safetensors reader,
  as vLLM's default loader reads them);
- apply(recording, model, real): the recording carried out with torch on real tensors: constants
  replayed, each region's source box copied into its destination box (row-major pairing, the
  parameter's last two dimensions swapped for a transposed one), zero boxes zeroed, then
  load_weights over the fallback tensors -- an independent reading of what a recorded plan means;
- reference(folder, ...): the same rank loaded by vLLM's rules (model.load_weights over every
  real tensor, what the `auto` load format does);
- differences(a, b): the parameters and buffers whose bytes differ.
"""

import glob
import os
import sys
import types

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE = os.environ.get("SL_SOURCE_DIR", os.path.join(HERE, "..", ".."))
sys.path.insert(0, os.path.join(HERE, "standin"))
sys.path.insert(0, os.path.join(SOURCE, "python"))

import torch  # noqa: E402


class _Group:
    def __init__(self, ranks, rank):
        self.ranks = list(ranks)
        self.world_size = len(ranks)
        self.rank = rank
        self.rank_in_group = self.ranks.index(rank)
        self.cpu_group = self.device_group = None

    @property
    def is_first_rank(self):
        return self.rank_in_group == 0

    @property
    def is_last_rank(self):
        return self.rank_in_group == self.world_size - 1


def emulate(tp=1, pp=1, dp=1, rank=0):
    """Sets the stand-in's process groups to those of `rank` in a world laid out as vLLM lays it
    out ([dp, pp, tp], tp fastest)."""
    from vllm.distributed import parallel_state as ps
    world = tp * pp * dp
    ranks = torch.arange(world).reshape(dp, pp, tp)

    def group_of(rows):
        for row in rows:
            if rank in row:
                return _Group(row, rank)
        raise AssertionError(rank)
    ps._WORLD = _Group(range(world), rank)
    ps._TP = group_of(ranks.reshape(-1, tp).tolist())
    ps._PP = group_of(ranks.transpose(1, 2).reshape(-1, pp).tolist())
    ps._DP = group_of(ranks.permute(1, 2, 0).reshape(-1, dp).tolist())
    ps._EP = group_of(ranks.transpose(0, 1).reshape(pp, -1).tolist())


def configs(folder, tp=1, pp=1, dp=1, ep=False, dtype="auto", placement="linear", eplb=False,
            redundant=0):
    from vllm.config import EPLBConfig, LoadConfig, ModelConfig, ParallelConfig, VllmConfig
    parallel = ParallelConfig(tensor_parallel_size=tp, pipeline_parallel_size=pp,
                              data_parallel_size=dp, enable_expert_parallel=ep,
                              expert_placement_strategy=placement, enable_eplb=eplb,
                              eplb_config=EPLBConfig(redundant))
    return VllmConfig(model_config=ModelConfig(model=folder, dtype=dtype), parallel_config=parallel,
                      load_config=LoadConfig(load_format="auto"))


def build(folder, rank=0, **layout):
    """The stand-in model of a fixture, built as rank `rank` of the layout builds it."""
    from vllm.model_executor.model_loader.utils import initialize_model, set_default_torch_dtype
    emulate(layout.get("tp", 1), layout.get("pp", 1), layout.get("dp", 1), rank)
    vc = configs(folder, **layout)
    with set_default_torch_dtype(vc.model_config.dtype):
        return initialize_model(vllm_config=vc)


def real_tensors(folder):
    from vllm.model_executor.model_loader.weight_utils import safetensors_weights_iterator
    files = sorted(glob.glob(os.path.join(folder, "*.safetensors")))
    return dict(safetensors_weights_iterator(files))


def reference(folder, real, rank=0, **layout):
    model = build(folder, rank, **layout)
    with torch.no_grad():
        model.load_weights(iter(list(real.items())))
    return model


def _box(start, count):
    return tuple(slice(s, s + c) for s, c in zip(start, count))


def apply(recording, model, real):
    """Carries out a Recording on `model` with the real tensors (see the module docstring)."""
    params = dict(model.named_parameters())
    with torch.no_grad():
        for name, (offset, sizes, strides), value in recording.consts:
            p = params[name].data
            view = p.as_strided(sizes, strides, p.storage_offset() + offset)
            if isinstance(value, torch.Tensor):
                view.copy_(value)
            else:
                view.fill_(value)
        for rp in recording.params:
            target = params[rp.name].data
            if rp.box is not None:
                target = target[_box(*rp.box)]
            if rp.transposed:
                target = target.transpose(-1, -2)
            for r in rp.regions:
                src = real[r.tensor][_box(r.src_start, r.src_count)]
                dst = target[_box(r.dst_start, r.dst_count)]
                dst.copy_(src.reshape(dst.shape))
            for start, count in rp.zeros:
                target[_box(start, count)].zero_()
        if recording.fallback:
            model.load_weights(iter([(n, real[n]) for n in recording.fallback]))
    return model


def raw(t):
    t = t.detach().cpu().contiguous()
    if t.dtype == torch.bfloat16:
        t = t.view(torch.int16)
    return t.numpy().tobytes()


def differences(a, b):
    """Names whose tensors differ between modules a and b (state_dict, bytes)."""
    sa, sb = a.state_dict(), b.state_dict()
    out = sorted(set(sa) ^ set(sb))
    for n in sorted(set(sa) & set(sb)):
        x, y = sa[n], sb[n]
        if x.dtype != y.dtype or tuple(x.shape) != tuple(y.shape) or raw(x) != raw(y):
            out.append(n)
    return out


def catalog(folder):
    import shardload.catalog
    return shardload.catalog.tensors(folder)


def fake_catalog(real):
    """Catalog entries for tensors held in memory (the unit tests' own tensors)."""
    from shardload.record import NAMES
    return [types.SimpleNamespace(name=n, dtype=NAMES[t.dtype], shape=tuple(t.shape),
                                  nbytes=t.numel() * t.element_size())
            for n, t in real.items()]
