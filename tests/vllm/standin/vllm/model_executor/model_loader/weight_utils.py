"""STAND-IN for vllm.model_executor.model_loader.weight_utils: default_weight_loader,
sharded_weight_loader(dim) (rank r copies block r of dim: the gated DeltaNet's A_log, dt_bias), and
an iterator over the tensors of safetensors files (its own reader: 8-byte header length, JSON header,
data; BF16 through int16, as numpy lacks it; F8 as uint8), each file's tensors in sorted name order as
vLLM's safetensors_weights_iterator gives them (safe_open's keys())."""

import json
import struct

import numpy as np
import torch

_NP = {"F32": "<f4", "F16": "<f2", "F64": "<f8", "BF16": "<i2", "I64": "<i8", "I32": "<i4",
       "I16": "<i2", "I8": "i1", "U8": "u1", "BOOL": "u1", "F8_E4M3": "u1", "F8_E5M2": "u1",
       "F8_E8M0": "u1"}


def default_weight_loader(param, loaded_weight):
    if param.numel() == 1 and loaded_weight.numel() == 1:
        param.data.fill_(loaded_weight.item())
    else:
        assert param.size() == loaded_weight.size(), \
            "shape mismatch: parameter %s, checkpoint %s" % (param.size(), loaded_weight.size())
        param.data.copy_(loaded_weight)


def sharded_weight_loader(shard_axis):
    def loader(param, loaded_weight):
        from vllm.distributed import get_tensor_model_parallel_rank
        n = param.data.shape[shard_axis]
        param.data.copy_(loaded_weight.narrow(shard_axis, get_tensor_model_parallel_rank() * n, n))
    return loader


def safetensors_weights_iterator(files):
    for path in files:
        with open(path, "rb") as f:
            data = f.read()
        (n,) = struct.unpack("<Q", data[:8])
        header = json.loads(data[8:8 + n])
        for name in sorted(header):   # safetensors' safe_open(...).keys(): sorted names
            info = header[name]
            if name == "__metadata__":
                continue
            a, b = info["data_offsets"]
            dt = np.dtype(_NP[info["dtype"]])
            arr = np.frombuffer(data, dtype=dt, count=(b - a) // dt.itemsize, offset=8 + n + a)
            t = torch.from_numpy(arr.copy()).reshape(info["shape"])
            if info["dtype"] == "BF16":
                t = t.view(torch.bfloat16)
            yield name, t
