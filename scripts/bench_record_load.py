#!/usr/bin/env python3
"""bench_record_load.py FOLDER TP REPS OUT.json -- one model loaded into the vLLM stand-in's model
three ways, in TP workers started as vLLM's mp executor starts them (torch.multiprocessing spawn,
a gloo group; scripts/bench-record runs it):
  spec      load format shardload with shardload's spec plan;
  recorded  load format shardload with a plan recorded from the model's own weight loaders
            (model_loader_extra_config {"plan": "record"}): the recording included;
  auto      vLLM's default loader (the stand-in's: every worker reads every file whole and applies
            the model's weight_loader rules).
A warm-up round of the three is not counted; each repetition runs the three in turn, a different
one first each time; the time of a way is the slowest worker's, from the start
of load_model to its end (the model built, then loaded). The recording's own time is reported
apart. Nothing asserts a time.
"""

import json
import os
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "tests", "vllm"))


def worker(rank, world, init, folder, reps, status):
    import torch.distributed as dist
    import harness   # the stand-in vLLM on the path
    from vllm.config import LoadConfig, ModelConfig, ParallelConfig, VllmConfig
    from vllm.distributed import parallel_state as ps
    from vllm.model_executor.model_loader import get_model_loader
    import shardload.vllm
    del harness
    dist.init_process_group("gloo", init_method=init, world_size=world, rank=rank)
    ps.init_distributed_environment(world, rank, init, rank, "gloo")
    ps.initialize_model_parallel(world, 1, 1)
    shardload.vllm.register()
    ways = {"spec": ("shardload", {"plan": "spec"}), "recorded": ("shardload", {"plan": "record"}),
            "auto": ("auto", {})}
    out = {w: [] for w in ways}
    out["recording"] = []
    order = list(ways)
    for rep in range(-1, reps):   # -1: a warm-up round, not counted (first touches of memory)
        for way in order[rep % 3:] + order[:rep % 3]:   # each way first in turn
            fmt, extra = ways[way]
            if fmt == "shardload":
                extra = dict(extra, progress="never", timeout_s=600)
            vc = VllmConfig(model_config=ModelConfig(model=folder),
                            parallel_config=ParallelConfig(tensor_parallel_size=world),
                            load_config=LoadConfig(load_format=fmt, model_loader_extra_config=extra))
            dist.barrier()
            t0 = time.perf_counter()
            loader = get_model_loader(vc.load_config)
            model = loader.load_model(vc, vc.model_config)
            seconds = time.perf_counter() - t0
            times = [None] * world
            dist.all_gather_object(times, seconds)
            rec = [None] * world
            dist.all_gather_object(rec, loader.last["recording"].seconds if way == "recorded" else 0)
            if rep >= 0:
                out[way].append(max(times))
                if way == "recorded":
                    out["recording"].append(max(rec))
            del model, loader
    if rank == 0:
        with open(status, "w") as f:
            json.dump(out, f)
    dist.barrier()
    os._exit(0)


def main():
    import torch.multiprocessing as mp
    sys.path.insert(0, os.path.join(os.path.dirname(HERE), "tests", "vllm"))
    import harness
    folder, tp, reps, out = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
    ctx = mp.get_context("spawn")
    init = "tcp://127.0.0.1:%d" % harness.free_port()
    status = tempfile.mktemp(suffix=".json")
    procs = [ctx.Process(target=worker, args=(r, tp, init, folder, reps, status)) for r in range(tp)]
    for p in procs:
        p.start()
    for p in procs:
        p.join()
    with open(status) as f:
        result = json.load(f)
    os.unlink(status)
    with open(out, "w") as f:
        json.dump(result, f)


if __name__ == "__main__":
    main()
