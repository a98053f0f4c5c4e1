#!/usr/bin/env python3
"""test_vllm_minimax.py WORLD -- the vLLM plugin on MiniMax-M2 in WORLD workers started as vLLM's mp
executor starts them (harness.spawn), each case compared parameter by parameter with the stand-in's
own weight loaders over the whole checkpoint (cases_minimax.py)."""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402

harness.need(["torch", "numpy"])

if __name__ == "__main__":
    world = int(sys.argv[1])
    sys.exit(harness.spawn(world, "minimax", int(os.environ.get("SL_VLLM_TIMEOUT", "240"))))
