#!/usr/bin/env python3
"""bench_record_cost.py FOLDER TP PP EP REPS OUT.json -- the cost of recording one rank's plan
(shardload.record) of a full-size model, in one process (scripts/bench-record runs it).

FOLDER: a checkpoint folder, headers only is enough (make-fixture deepseek_v3_full --header-only).
The model is the vLLM stand-in's (tests/vllm/standin), built for rank 0 of the layout (tp TP, pp
PP, expert parallelism when EP is 1) with every parameter on the meta device (torch.empty/zeros/
ones create meta tensors while it is built), so that a 671B-parameter module takes no memory; the
recorder never touches parameter memory anyway. An FP8 checkpoint is recorded as its BF16 twin
(the weight_scale_inv tensors left out, quantization_config dropped): the stand-in has no
block-FP8 linear method. Measured, REPS times each (CPU seconds of this process and wall seconds):
  load_weights  the model's own load_weights over plain meta tensors (what any loader pays:
                vLLM's `auto` runs the same Python over real tensors);
  record        shardload.record.record: load_weights over the stand-ins plus the recorder.
"""

import contextlib
import json
import os
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(REPO, "tests", "vllm"))

import recorded_util as U  # noqa: E402
import torch  # noqa: E402

import shardload.catalog  # noqa: E402
import shardload.record  # noqa: E402


@contextlib.contextmanager
def meta_factories():
    saved = {n: getattr(torch, n) for n in ("empty", "zeros", "ones")}
    for n, f in saved.items():
        def make(*a, _f=f, **k):
            k.setdefault("device", "meta")
            return _f(*a, **k)
        setattr(torch, n, make)
    try:
        yield
    finally:
        for n, f in saved.items():
            setattr(torch, n, f)


def bf16_twin(folder):
    """(folder holding a config.json without quantization, catalog without FP8 scales, as BF16)."""
    with open(os.path.join(folder, "config.json")) as f:
        config = json.load(f)
    quantized = config.pop("quantization_config", None) is not None
    twin = tempfile.mkdtemp(prefix="sl-record-bench-")
    with open(os.path.join(twin, "config.json"), "w") as f:
        json.dump(config, f)
    catalog = []
    for t in shardload.catalog.tensors(folder):
        if quantized and t.name.endswith("_scale_inv"):
            continue
        if t.dtype.startswith("F8"):
            t = t._replace(dtype="BF16", nbytes=t.nbytes * 2)
        catalog.append(t)
    return twin, catalog


def main():
    folder, tp, pp, ep, reps, out = sys.argv[1:7]
    tp, pp, reps = int(tp), int(pp), int(reps)
    twin, catalog = bf16_twin(folder)
    with meta_factories():
        model = U.build(twin, 0, tp=tp, pp=pp, ep=ep == "1")
    result = {"tensors": len(catalog), "params": sum(1 for _ in model.parameters()),
              "load_weights_cpu": [], "load_weights_wall": [], "record_cpu": [], "record_wall": []}

    def plain():
        for t in catalog:
            yield t.name, torch.empty(t.shape, dtype=shardload.record.torch_dtype(t.dtype),
                                      device="meta")
    for _ in range(reps):
        c, w = time.process_time(), time.perf_counter()
        with torch.no_grad():
            model.load_weights(plain())
        result["load_weights_cpu"].append(time.process_time() - c)
        result["load_weights_wall"].append(time.perf_counter() - w)
        c, w = time.process_time(), time.perf_counter()
        rec = shardload.record.record(model, catalog)
        result["record_cpu"].append(time.process_time() - c)
        result["record_wall"].append(time.perf_counter() - w)
    result.update(recorded=len(rec.params), regions=sum(len(p.regions) for p in rec.params),
                  fallback=len(rec.fallback), skipped=len(rec.skipped))
    with open(out, "w") as f:
        json.dump(result, f)


if __name__ == "__main__":
    main()
