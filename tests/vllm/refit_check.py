"""refit_check.py -- what test_vllm_refit.py runs outside its driver: the trainer processes, and the
functions it hands to collective_rpc (run in each vLLM worker, the worker as first argument).

A version's weights are tests/python/refit_ref.py's F32 master weights of the fixture's tensors;
the expected model of a version is the stand-in DefaultModelLoader's load (vLLM's weight_loader
rules over whole tensors, independent of shardload's plan) of a checkpoint folder holding those
weights, written here with a safetensors writer of its own.
"""

import json
import os
import shutil
import struct
import traceback

import harness

BAD_NAME = "model.layers.0.mlp.gate_up_proj_bogus.weight"
_ST = {"F32": "<f4", "F16": "<f2", "BF16": "<u2"}


def write_version(folder, out, v):
    """A checkpoint folder `out` with version v's weights of the checkpoint at `folder`."""
    import numpy as np
    import common
    import refit_ref
    ckpt = common.Checkpoint(folder)
    os.makedirs(out, exist_ok=True)
    for f in os.listdir(folder):
        if f.endswith(".json") and f != "model.safetensors.index.json":
            shutil.copy(os.path.join(folder, f), out)
    header, blobs, offset = {}, [], 0
    for name in sorted(ckpt.tensors):
        dtype = ckpt.tensors[name][0]
        arr = np.ascontiguousarray(refit_ref.to_checkpoint_dtype(ckpt, name, refit_ref.master(ckpt, name, v)))
        data = arr.astype(_ST[dtype]).tobytes()
        header[name] = {"dtype": dtype, "shape": list(arr.shape), "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with open(os.path.join(out, "model.safetensors"), "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text)
        for b in blobs:
            f.write(b)


# -------------------------------------------------------------------------------------------------
# In the workers (collective_rpc with a callable: fn(worker, *args))


def register(worker):
    import shardload.vllm
    return shardload.vllm.register() is not None


def compare(worker, case_fields, version_folder):
    """Failure messages of this worker: its model against the stand-in's default load of the
    version's checkpoint (byte for byte; converted cases: NaN may differ in its bits)."""
    from vllm.model_executor.model_loader import get_model_loader
    case = harness.Case(**case_fields)
    vc = harness.vllm_configs(case, version_folder, "auto", {})
    ref = get_model_loader(vc.load_config).load_model(vc, vc.model_config)
    got, want = worker.get_model().state_dict(), ref.state_dict()
    fails = []
    if set(got) != set(want):
        fails.append("names differ: %s" % sorted(set(got) ^ set(want)))
    for name in sorted(set(got) & set(want)):
        if not harness.same(got[name], want[name], case.dtype != "auto"):
            fails.append("%s differs from the version's weights under vLLM's rules" % name)
    return ["worker %d: %s" % (worker.rank, f) for f in fails]


def same_tensors(worker, names):
    """The data pointers of the named parameters (to show a refit writes in place)."""
    params = dict(worker.get_model().named_parameters())
    return {n: params[n].data_ptr() for n in names if n in params}


# -------------------------------------------------------------------------------------------------
# The trainers


def trainer_main(t, trainers, world, port, folder, steps, results):
    """Trainer t of `trainers` (FSDP row blocks of every tensor's F32 master weights) publishing
    each step's version over the sync group; puts (t, [outcome per step]) on results, an outcome
    being ("ok", report) or ("error", class name, message)."""
    out = []
    try:
        import common
        import refit_ref
        import shardload
        ckpt = common.Checkpoint(folder)
        sg = shardload.sync_group("127.0.0.1", port, t, world, timeout_s=120)
        pub = shardload.Publisher(timeout_s=60, bucket_bytes=8192)
        for v, bad in steps:
            blocks = refit_ref.blocks(ckpt, v, t, trainers)
            if bad and t == 0:
                import torch
                blocks[BAD_NAME] = (torch.zeros(4), [0])
            try:
                out.append(("ok", pub.publish(blocks, version=v, group=sg)))
            except shardload.Error as e:
                out.append(("error", type(e).__name__, str(e)))
        pub.close()
    except BaseException as e:  # noqa: BLE001 -- reported to the driver
        out.append(("crash", type(e).__name__, "%s\n%s" % (e, traceback.format_exc()[-1500:])))
    results.put((t, out))
