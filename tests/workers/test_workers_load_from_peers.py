#!/usr/bin/env python3
"""test_workers_load_from_peers.py -- Loader.load_from_peers over a torch.distributed gloo group of 4
worker processes (no mpirun, no MPI; docs/spec/DESIGN.md §11): workers 0-1 load the llama fixture
at tp 2 from storage over their own group, workers 2-3 receive it at tp 1 dp 2 over theirs, the
transfer over the whole group. The receivers' tensors equal the reference of the target layout
(tests/python/common.py, read from the checkpoint's own files) and their report says bytes_read 0;
the donors' tensors are byte for byte what they held before.
"""

import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import harness  # noqa: E402
import common  # noqa: E402  (harness put tests/python on the path)

TIMEOUT_S = 60  # the loader's deadline per wait: a hang fails the test instead of stalling it
DONORS = 2


def body(w, src):
    import torch.distributed as dist
    import shardload
    groups = [dist.new_group([0, 1]), dist.new_group([2, 3])]  # every worker creates both, in order
    gives = w.rank < DONORS
    side = groups[0 if gives else 1]
    tp, dp = (2, 1) if gives else (1, 2)
    own = w.rank if gives else w.rank - DONORS
    ref = common.reference(common.Checkpoint(src), common.Layout(2, own, tp))
    loader = shardload.Loader(src, group=side, tp=tp, dp=dp, timeout_s=TIMEOUT_S, progress="never")
    before = None
    if gives:
        loader.load()
        before = {n: common.raw(t) for n, t in loader.params().items()}
    loader.load_from_peers(group=w.group)
    got = loader.params()
    w.check(set(got) == set(ref), "names differ: %s" % sorted(set(got) ^ set(ref)))
    for name, t in got.items():
        if name in ref:
            w.check(common.raw(t) == common.raw(ref[name]), "%s differs from the reference" % name)
        if before is not None:
            w.check(common.raw(t) == before[name], "the donor's %s changed" % name)
    if not gives:  # every receiver holds the receivers' report: their first every row, the other its own
        ranks = loader.report().get("ranks", [])
        w.check(len(ranks) == (2 if own == 0 else 1) and all(r.get("bytes_read") == 0 for r in ranks),
                "the receivers' report: %s" % [r.get("bytes_read") for r in ranks])
    loader.close()


if __name__ == "__main__":
    harness.need_torch()
    result = harness.run(body, 4, (os.path.join(common.fixtures(), "llama"),))
    harness.main("test_workers_load_from_peers", result)
