#!/usr/bin/env python3
"""test_workers_forward.py N -- the shards loaded over a torch.distributed gloo group compute the
model. N worker processes (torch.multiprocessing, no mpirun), tp = N: a tiny Llama (llama_f32: GQA
8/2, kv heads replicated at tp 4, untied head, vocabulary 250 padded to 256) and a tiny Mixtral
(mixtral_f32: 8 experts; with expert parallelism, whole experts on their ranks; without, experts
sliced by tp), the plain-torch decoders of tests/python/tiny_models.py whose collectives go through
the same gloo group (TorchGroupComm), filled by shardload.torch.load_into(group=...), run one
forward pass over a fixed token batch. On every worker the logits must equal those of the
unsharded model built from the safetensors files by the tests' own reader (F32, tolerance 1e-5).
"""

import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import harness  # noqa: E402
import common  # noqa: E402  (harness put tests/python on the path)

TOL = 1e-5
CASES = (("llama_f32", False), ("mixtral_f32", True), ("mixtral_f32", False))


def sharded(w, folder, config, ep):
    import shardload.torch
    import tiny_models
    lay = common.Layout(w.world, w.rank, w.world, ep)
    experts = common.local_experts(config["num_local_experts"], lay) \
        if "num_local_experts" in config else None
    model = tiny_models.TinyDecoder(config, w.world, w.rank, tiny_models.TorchGroupComm(w.group),
                                    experts, ep)
    missing, unexpected = shardload.torch.load_into(model, folder, group=w.group, tp=w.world,
                                                    enable_expert_parallel=ep, timeout_s=60,
                                                    progress="never")
    w.check(not missing and not unexpected, "load_into: missing %s, unexpected %s"
            % (missing, unexpected))
    return model


def body(w):
    import torch
    import tiny_models
    torch.manual_seed(0)
    worst, done = 0.0, 0
    for name, ep in CASES:
        folder = os.path.join(common.numeric_fixtures(), name)
        config, full = tiny_models.unsharded(folder)
        got, want, diff = tiny_models.logits_both(full, sharded(w, folder, config, ep), config)
        worst = max(worst, diff)
        ok = diff <= TOL and bool(torch.isfinite(got).all())
        w.check(ok, "%s tp=%d%s: logits %s (want %s), max |diff| %.3g > %g" % (
            name, w.world, " ep" if ep else "", list(got.shape), list(want.shape), diff, TOL))
        print("worker %d: %s tp=%d%s: logits %s, max |diff| %.3g (|logits| max %.3g)"
              % (w.rank, name, w.world, " ep" if ep else "", list(got.shape), diff,
                 want.abs().max().item()), flush=True)
        done += 1
    w.info.update(cases=done, worst=worst)


if __name__ == "__main__":
    harness.need_torch()
    world = int(sys.argv[1])
    result = harness.run(body, world, (), timeout_s=240)
    for r, (fails, info) in sorted(result.verdicts.items()):
        if not fails and info.get("cases") != len(CASES):
            result.fail("worker %d ran %s of %d cases" % (r, info.get("cases"), len(CASES)))
    harness.main("test_workers_forward N=%d" % world, result)
