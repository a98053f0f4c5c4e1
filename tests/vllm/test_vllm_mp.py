#!/usr/bin/env python3
"""test_vllm_mp.py WORLD [GROUP] -- the vLLM plugin in WORLD workers started as vLLM's mp executor
starts them (`vllm serve`: torch.multiprocessing spawn, one process per worker, a gloo world over
tcp://127.0.0.1), each building its model and loading it with
get_model_loader(LoadConfig(load_format="shardload")).load_model(...), compared with the stand-in
DefaultModelLoader's (vLLM's weight_loader rules over the whole checkpoint). GROUP: main (default),
dtype (a model dtype other than the checkpoint's, on the host), qwen (Qwen3-Next and Qwen3.5) or mm (the
multimodal wrappers Qwen3-VL and Gemma-3 with their vision towers). Cases: harness.cases(); the
environment variable SL_VLLM_CASE runs only the cases whose name contains it, SL_VLLM_EXTRA (JSON)
adds shardload configuration keys to every case (a debugging aid)."""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402

harness.need(["torch", "numpy"])

if __name__ == "__main__":
    world = int(sys.argv[1])
    group = sys.argv[2] if len(sys.argv) > 2 else "main"
    timeout = int(os.environ.get("SL_VLLM_TIMEOUT", "240"))
    sys.exit(harness.spawn(world, group, timeout))
