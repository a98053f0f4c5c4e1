"""STAND-IN for vllm.model_executor.layers.mamba.mamba_mixer2.mamba_v2_sharded_weight_loader: the
weight_loader of a parameter whose rows are several sections, each split over the tensor-parallel
ranks on its own (the gated DeltaNet's conv1d: its q, k and v rows).

shard_spec lists (full_dim, extra, duplicate_groups) per section, in order. For each section, rank
r copies rows [r*full_dim/tp, +full_dim/tp) of that section of the checkpoint tensor (rank 0's
block when duplicate_groups, minus `extra` rows at the end) to its next rows of the parameter;
the checkpoint advances by full_dim - extra rows, the parameter by full_dim/tp."""


def mamba_v2_sharded_weight_loader(shard_spec, tp_size, tp_rank):
    def loader(param, loaded_weight):
        boundary, loaded_boundary = 0, 0
        for full_dim, extra, duplicate_groups in shard_spec:
            shard_size = full_dim // tp_size
            rank = 0 if duplicate_groups else tp_rank
            loaded_skip = rank * shard_size
            start = loaded_boundary + loaded_skip
            take = min(shard_size, full_dim - extra - loaded_skip)
            param.data[boundary:boundary + take, ...] = loaded_weight[start:start + take]
            boundary += shard_size
            loaded_boundary += full_dim - extra
    return loader
