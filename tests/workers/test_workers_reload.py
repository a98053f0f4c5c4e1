#!/usr/bin/env python3
"""test_workers_reload.py N -- Loader.reload over a torch.distributed gloo group of N worker
processes (no mpirun, no MPI; docs/spec/DESIGN.md §10): the checks of tests/python/reload_check.py
on the llama fixture, tp = the largest of 4, 2, 1 dividing N (the rest dp) — tensors exported before
by DLPack and a bound tensor see the second checkpoint's values at the same addresses, against the
reference read from its own files; refusals (a dtype, another name set, a missing folder) leave
every tensor as it was, the same error class on every worker. The parent writes the second
checkpoints before starting the workers.
"""

import os
import shutil
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import harness  # noqa: E402
import common  # noqa: E402  (harness put tests/python on the path)
import reload_check  # noqa: E402

TIMEOUT_S = 60  # the loader's deadline per wait: a hang fails the test instead of stalling it


def body(w, src, variants, qwen2):
    import shardload
    tp = 4 if w.world % 4 == 0 else 2 if w.world % 2 == 0 else 1
    loader = shardload.Loader(src, group=w.group, tp=tp, dp=w.world // tp, timeout_s=TIMEOUT_S,
                              progress="never")
    reload_check.check(loader, src, variants, qwen2, common.Layout(w.world, w.rank, tp), w.check)


if __name__ == "__main__":
    harness.need_torch()
    world = int(sys.argv[1])
    src = os.path.join(common.fixtures(), "llama")
    tmp = tempfile.mkdtemp(prefix="sl-workers-reload-")
    try:
        variants = reload_check.make_variants(src, tmp)
        result = harness.run(body, world, (src, variants, os.path.join(common.fixtures(), "qwen2")))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    harness.main("test_workers_reload", result)
