#!/usr/bin/env python3
"""test_vllm_refit.py CASE -- weight sync into a running vLLM engine through its worker extension
(shardload.vllm.RefitWorkerExtension; docs/INTEGRATION.md, docs/spec/DESIGN.md §13), on the
stand-in: an engine of 2 workers started as vLLM's mp executor starts them (spawn, a gloo world of
their own), loaded with load_format "shardload" and {"refit": true}, and 2 trainer processes of
another job; the driver calls collective_rpc as an RL loop's would, while the trainers call
shardload.publish over the sync group both sides joined (shardload.sync_group: trainers ranks 0-1,
workers 2-3). Steps: version 1 (the plan made), version 2 (the plan reused, the parameters written
in place: the same data pointers), version 2 again (zero bytes), version 3 with a trainer
publishing a tensor the checkpoint lacks (refused on every rank naming it; the workers keep
version 2), version 3 (done). After each version every worker's model equals the stand-in
DefaultModelLoader's load of a checkpoint holding that version's weights (vLLM's weight_loader
rules, independent of shardload's plan). CASE:
  llama    llama_f32 at tp 2, the model in the checkpoint's F32
  mixtral  mixtral_f32 at tp 2 with expert parallelism, the model in BF16 (each F32 byte
           converted as it lands, against torch's conversion in the reference)
"""

import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402

harness.need(["torch", "numpy"])

import refit_check  # noqa: E402

CASES = {"llama": dict(name="llama_f32 tp2 refit", fixture="llama_f32", tp=2),
         "mixtral": dict(name="mixtral_f32 tp2 ep bf16 refit", fixture="mixtral_f32", tp=2, ep=True,
                         dtype="bfloat16")}
TRAINERS, WORKERS = 2, 2
# (version, a trainer publishes a tensor the checkpoint lacks)
STEPS = [(1, False), (2, False), (2, False), (3, True), (3, False)]


class Verdict:
    def __init__(self):
        self.fails = []

    def check(self, cond, msg):
        if not cond:
            self.fails.append(msg)
            print("FAIL: %s" % msg, flush=True)


def expect_report(out, label, reports, planned, moved):
    for r, rep in enumerate(reports):
        out.check(rep is not None and rep["planned"] == planned, "%s: worker %d: planned %s, expected %s"
                  % (label, r, rep and rep["planned"], planned))
        got = rep["bytes_transferred"] if rep else -1
        out.check(got > 0 if moved else got == 0, "%s: worker %d moved %d bytes" % (label, r, got))


def drive(ex, out, case, folder, work):
    """The RL loop's side of the engine: one collective_rpc per step."""
    fields = dict(case)
    for step, (v, bad) in enumerate(STEPS):
        label = "step %d (version %d%s)" % (step, v, ", a bad name" if bad else "")
        if step == 1:
            before = ex.collective_rpc(refit_check.same_tensors, args=(["model.embed_tokens.weight"],))
        try:
            reports = ex.collective_rpc("shardload_refit", args=(v,), timeout=120)
        except RuntimeError as e:
            out.check(bad and refit_check.BAD_NAME in str(e), "%s: the workers raised %s" % (label, e))
            states = ex.collective_rpc("shardload_refit_state")
            out.check(all(s["version"] == (v - 1, None) for s in states),
                      "%s: after the refusal the workers hold %s" % (label, [s["version"] for s in states]))
            continue
        out.check(not bad, "%s: the workers' refit succeeded" % label)
        expect_report(out, label, reports, planned=step == 0, moved=step != 2)
        if step == 1:
            after = ex.collective_rpc(refit_check.same_tensors, args=(["model.embed_tokens.weight"],))
            out.check(before == after and all(before), "%s: parameters moved: %s -> %s" % (label, before, after))
        if step in (0, 1, 4):
            ref = os.path.join(work, "v%d" % v)
            refit_check.write_version(folder, ref, v)
            for fails in ex.collective_rpc(refit_check.compare, args=(fields, ref), timeout=120):
                for f in fails:
                    out.check(False, "%s: %s" % (label, f))
        states = ex.collective_rpc("shardload_refit_state")
        out.check(all(s["version"] == (v, None) and set(s["states"].values()) == {"new"} for s in states),
                  "%s: versions %s" % (label, [s["version"] for s in states]))


def check_trainers(out, results):
    for t, outcome in sorted(results):
        out.check(len(outcome) == len(STEPS), "trainer %d: %s" % (t, outcome[-1:]))
        for (v, bad), got in zip(STEPS, outcome):
            if bad:
                out.check(got[0] == "error" and refit_check.BAD_NAME in got[2],
                          "trainer %d, version %d with a bad name: %s" % (t, v, got))
            else:
                out.check(got[0] == "ok", "trainer %d, version %d: %s" % (t, v, got))


def main():
    name = sys.argv[1] if len(sys.argv) > 1 else ""
    if name not in CASES:
        print("usage: test_vllm_refit.py {%s}" % "|".join(CASES))
        return 2
    import torch.multiprocessing as mp
    from vllm.v1.executor.multiproc_executor import MultiprocExecutor
    case = CASES[name]
    folder = os.path.join(harness.fixtures(), case["fixture"])
    extra = {"refit": True, "progress": "never", "timeout_s": 60}
    vc = harness.vllm_configs(harness.Case(**case), folder, "shardload", extra)
    vc.parallel_config.worker_extension_cls = "shardload.vllm.RefitWorkerExtension"
    out = Verdict()
    port = harness.free_port()
    ctx = mp.get_context("spawn")
    results = ctx.Queue()
    trainers = [ctx.Process(target=refit_check.trainer_main, daemon=True,
                            args=(t, TRAINERS, TRAINERS + WORKERS, port, folder, STEPS, results))
                for t in range(TRAINERS)]
    t0 = time.time()
    ex = MultiprocExecutor(vc)
    try:
        for p in trainers:
            p.start()
        out.check(all(ex.collective_rpc(refit_check.register)), "the load format was not registered")
        ex.collective_rpc("load_model", timeout=120)
        ranks = ex.collective_rpc("shardload_sync_group", args=("127.0.0.1", port, TRAINERS, TRAINERS + WORKERS),
                                  timeout=120)
        out.check(ranks == [TRAINERS + r for r in range(WORKERS)], "sync ranks %s" % ranks)
        with tempfile.TemporaryDirectory(prefix="sl-vllm-refit-") as work:
            drive(ex, out, case, folder, work)
        check_trainers(out, [results.get(timeout=120) for _ in trainers])
    except Exception as e:  # noqa: BLE001 -- every failure is the test's verdict
        out.check(False, "%s: %s" % (type(e).__name__, e))
    finally:
        ex.shutdown()
        for p in trainers:
            p.join(10)
            if p.is_alive():
                p.kill()
    print("vllm refit %s: %d failure(s) (%.1f s)" % (name, len(out.fails), time.time() - t0), flush=True)
    return 1 if out.fails else 0


if __name__ == "__main__":
    sys.exit(main())
