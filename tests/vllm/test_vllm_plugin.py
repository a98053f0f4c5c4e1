#!/usr/bin/env python3
"""test_vllm_plugin.py -- the vLLM plugin's rules that need no second worker, in one process:

- vLLM's plugin loading (vllm.plugins.load_general_plugins, group vllm.general_plugins) finds the
  entry point the package declares (python/pyproject.toml) and registers load format shardload;
- register() never raises: vLLM without a model-loader registry, or a registry that raises, gives
  a RuntimeWarning and None;
- model_loader_extra_config: vLLM's keys go to shardload's extra_config, the others are shardload
  keys, an unknown key or value fails when vLLM creates the loader (naming it; vLLM's own keys are
  checked by the C library when the load starts: test_vllm_mp.py), enable_weights_track false
  turns strict off, the key plan takes auto, spec or record; load_config.download_dir becomes cache_dir, the model revision revision;
- the expert map: module_experts reads FusedMoE's expert_map (EPLB's redundant slots as logical
  expert slot % experts) and planned_experts a plan's sources (per-expert and fused 3-D tensors),
  so check_experts can tell a placement mismatch.
"""

import importlib
import os
import sys
import tempfile
import types
import warnings

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402

harness.need(["torch", "numpy"])

import torch  # noqa: E402

fails = []


def check(cond, msg):
    if not cond:
        fails.append(msg)
        print("FAIL: " + msg, flush=True)


# --- the entry point, as vLLM loads it -------------------------------------------------------------
import shardload  # noqa: E402  (the package's version; importing it opens no library)

site = tempfile.mkdtemp(prefix="sl-vllm-ep-")
dist_info = os.path.join(site, "shardload-%s.dist-info" % shardload.__version__)
os.makedirs(dist_info)
with open(os.path.join(dist_info, "METADATA"), "w") as f:
    f.write("Metadata-Version: 2.1\nName: shardload\nVersion: %s\n" % shardload.__version__)
with open(os.path.join(harness.SOURCE, "python", "pyproject.toml")) as f:
    toml = f.read()
check('[project.entry-points."vllm.general_plugins"]' in toml and
      'shardload = "shardload.vllm:register"' in toml, "pyproject.toml declares the entry point")
with open(os.path.join(dist_info, "entry_points.txt"), "w") as f:
    f.write("[vllm.general_plugins]\nshardload = shardload.vllm:register\n")
sys.path.insert(0, site)
importlib.invalidate_caches()

import vllm.plugins  # noqa: E402
from vllm.model_executor import model_loader  # noqa: E402

vllm.plugins.load_general_plugins()
cls = model_loader._LOAD_FORMAT_TO_MODEL_LOADER.get("shardload")
check(cls is not None and cls.__name__ == "ShardloadModelLoader",
      "load_general_plugins registered load format shardload: %r" % (cls,))

import shardload.vllm as slv  # noqa: E402

# --- register() never raises -----------------------------------------------------------------------
real = model_loader.register_model_loader


def boom(name):
    raise RuntimeError("registry refuses %s" % name)


for label, patch in (("a registry that raises", lambda: setattr(model_loader, "register_model_loader", boom)),
                     ("vLLM without register_model_loader",
                      lambda: delattr(model_loader, "register_model_loader"))):
    slv._registered = None
    patch()
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        try:
            out = slv.register()
        except BaseException as e:  # noqa: BLE001
            out = e
    model_loader.register_model_loader = real
    check(out is None, "%s: register() returned %r, expected None" % (label, out))
    check(any(issubclass(w.category, RuntimeWarning) and "shardload" in str(w.message) for w in seen),
          "%s: no RuntimeWarning naming shardload (%s)" % (label, [str(w.message) for w in seen]))
slv._registered = None
check(slv.register() is cls, "register() again registers the same class")

# --- options -----------------------------------------------------------------------------------------
from vllm.config import LoadConfig, ModelConfig  # noqa: E402

opts, strict = slv.split_options({"num_threads": 4, "enable_multithread_load": True,
                                  "load_strategy": "mmap", "enable_weights_track": False})
check(opts == {"load_strategy": "mmap", "extra_config": {"num_threads": 4,
                                                         "enable_multithread_load": True,
                                                         "enable_weights_track": False}},
      "split_options: %r" % opts)
check(strict is False, "enable_weights_track false turns strict off")
check(slv.split_options('{"strict": false}') == ({}, False), "a JSON string extra config")
check(slv.split_options({"refit": True}) == ({"refit": True}, True), "refit is load_into's option")
for bad, word in (({"no_such_key": 1}, "no_such_key"), ({"threads": "four"}, "threads"),
                  ({"plan": "recorded"}, "plan"), ({"refit": 1}, "refit")):
    try:
        model_loader.get_model_loader(LoadConfig(load_format="shardload", model_loader_extra_config=bad))
        check(False, "extra config %r accepted" % bad)
    except Exception as e:  # noqa: BLE001
        check(word in str(e), "extra config %r: message %r does not name %s" % (bad, str(e), word))

folder = os.path.join(harness.fixtures(), "llama_f32")
loader = model_loader.get_model_loader(LoadConfig(load_format="shardload", download_dir="/hf/cache",
                                                  model_loader_extra_config={"threads": 3}))
mc = ModelConfig(model=folder, revision="v1")
layout = {"keys": {"tp": 2, "pp": 1, "dp": 1}}
check(loader.plan_mode == "auto", "the plan key defaults to auto")
check(model_loader.get_model_loader(LoadConfig(load_format="shardload", model_loader_extra_config={
    "plan": "record"})).plan_mode == "record", "plan record")
o = loader._options(torch.nn.Linear(2, 2), mc, layout)
check(o.get("cache_dir") == "/hf/cache" and o.get("revision") == "v1" and o.get("threads") == 3
      and o.get("tp") == 2, "options: %r" % o)

# --- expert maps ----------------------------------------------------------------------------------------
from vllm.model_executor.layers.fused_moe import determine_expert_map  # noqa: E402

moe = types.SimpleNamespace(global_num_experts=10, logical_num_experts=8, num_redundant_experts=2,
                            expert_map=determine_expert_map(2, 1, 10)[1])
check(slv.module_experts(moe) == [5, 6, 7, 0, 1], "EPLB slots 5..9 of 10 hold %s" % slv.module_experts(moe))
moe = types.SimpleNamespace(global_num_experts=8, expert_map=determine_expert_map(2, 1, 8, "round_robin")[1])
check(slv.module_experts(moe) == [1, 3, 5, 7], "round_robin rank 1: %s" % slv.module_experts(moe))
moe = types.SimpleNamespace(global_num_experts=4, expert_map=None)
check(slv.module_experts(moe) == [0, 1, 2, 3], "no expert parallelism")


def param(name, shape, nbytes, slices):
    return types.SimpleNamespace(name=name, shape=shape, nbytes=nbytes, slices=slices)


per_expert = [{"tensor": "m.layers.0.mlp.experts.%d.w1.weight" % e, "tensor_shape": [4, 2],
               "tensor_dtype": "F32", "src_offset": 0, "dst_offset": k * 64}
              for k, e in enumerate((1, 3))]
p = param("m.layers.0.mlp.experts.w13_weight", (2, 8, 2), 128, per_expert)
check(slv.planned_experts(p) == [1, 3], "per-expert sources: %s" % slv.planned_experts(p))
fused = [{"tensor": "m.layers.0.mlp.experts.gate_up_proj_blocks", "tensor_shape": [4, 8, 2, 16],
          "tensor_dtype": "U8", "src_offset": e * 256, "dst_offset": k * 256}
         for k, e in enumerate((2, 3))]
p = param("m.layers.0.mlp.experts.w13_weight", (2, 8, 2, 16), 512, fused)
check(slv.planned_experts(p) == [2, 3], "fused sources: %s" % slv.planned_experts(p))


class Model(torch.nn.Module):
    pass


model = Model()
model.add_module("experts", torch.nn.Module())
model.experts.global_num_experts = 4
model.experts.expert_map = determine_expert_map(2, 0, 4, "round_robin")[1]   # {0, 2}
p = param("experts.w13_weight", (2, 8, 2), 128, [dict(per_expert[0], tensor="x.experts.0.w1.weight"),
                                                 dict(per_expert[1], tensor="x.experts.1.w1.weight")])
msg = slv.check_experts([p], model)
check(msg is not None and "[0, 2]" in msg and "[0, 1]" in msg, "check_experts: %r" % msg)

print("test_vllm_plugin: %d failure(s)" % len(fails))
sys.exit(1 if fails else 0)
