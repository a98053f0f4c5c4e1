#!/usr/bin/env python3
"""test_workers_load.py N -- loads over a torch.distributed gloo group of N worker processes
(torch.multiprocessing, no mpirun, no MPI), byte-exact on every worker against the tests'
independent reference (tests/python/common.py: its own safetensors reader and vLLM's slicing
rules): tensor parallel, tp x dp, pipeline stages (vLLM's layer split and an explicit
pp_layer_partition; layers under their global index, the embedding on the first stage, norm and
lm_head on the last, a tied embedding on both), MoE with and without expert parallelism (linear
placement), and DeepSeek's MLA attention (DeepSeek-V2-Lite without q LoRA, V3 with it).

Per case and worker: the planned names and local shapes equal the reference's; every parameter
handed out by DLPack (Loader.params(), read after the loader is closed) equals the reference byte
for byte; for some cases also shardload.torch.load_into over the group into a module pre-filled
with 7s. Every worker also checks that MPI was never initialised and mpi4py never imported.
"""

import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import harness  # noqa: E402
import common  # noqa: E402  (harness put tests/python on the path)

# (fixture, reference family, tp, pp, expert parallel, explicit partition, also load_into)
# dp = N / (tp * pp). Fixtures: llama (h64 L3, 8/2 heads, V250), qwen2 (12/1 heads: tp 3),
# llama_tied (tied head), llama_l4 (4 layers: 3 stages split them 1, 2, 1), mixtral (8 experts
# of I64), the F32 llama_f32 / mixtral_f32, deepseek_v2_lite (MLA, no q LoRA, 8 experts + 2
# shared), deepseek_v3 (q LoRA, noaux_tc router, MTP layer).
CASES = {
    1: [("llama", "dense", 1, 1, False, None, True),
        ("mixtral", "dense", 1, 1, True, None, False),
        ("deepseek_v2_lite", "deepseek", 1, 1, False, None, False),
        ("deepseek_v3", "deepseek", 1, 1, False, None, False)],
    2: [("llama", "dense", 2, 1, False, None, True),
        ("llama", "dense", 1, 2, False, None, True),
        ("llama_tied", "dense", 1, 2, False, None, False),
        ("llama_l4", "dense", 1, 2, False, [3, 1], False),
        ("llama_f32", "dense", 1, 1, False, None, False),
        ("mixtral", "dense", 2, 1, True, None, False),
        ("mixtral", "dense", 1, 1, False, None, False),
        ("mixtral_f32", "dense", 1, 1, True, None, True),
        ("deepseek_v2_lite", "deepseek", 2, 1, False, None, False),
        ("deepseek_v2_lite", "deepseek", 1, 1, True, None, False),
        ("deepseek_v3", "deepseek", 1, 2, True, None, False)],
    3: [("qwen2", "dense", 3, 1, False, None, True),
        ("llama_l4", "dense", 1, 3, False, None, True),
        ("llama_tied", "dense", 1, 3, False, None, False),
        ("llama", "dense", 1, 1, False, None, False),
        ("mixtral", "dense", 1, 1, True, None, True),
        ("deepseek_v2_lite", "deepseek", 1, 1, True, None, False),
        ("deepseek_v2_lite", "deepseek", 1, 1, False, None, False),
        ("deepseek_v3", "deepseek", 1, 3, False, None, False)],
    4: [("llama", "dense", 4, 1, False, None, True),
        ("llama", "dense", 2, 1, False, None, False),
        ("llama", "dense", 2, 2, False, None, True),
        ("llama", "dense", 1, 2, False, [1, 2], False),
        ("llama_l4", "dense", 1, 4, False, None, False),
        ("llama_tied", "dense", 2, 2, False, None, False),
        ("mixtral", "dense", 2, 1, True, None, False),
        ("mixtral", "dense", 4, 1, False, None, False),
        ("mixtral", "dense", 2, 2, True, None, False),
        ("mixtral_f32", "dense", 4, 1, True, None, True),
        ("deepseek_v2_lite", "deepseek", 4, 1, False, None, False),
        ("deepseek_v2_lite", "deepseek", 2, 1, True, None, True),
        ("deepseek_v3", "deepseek", 2, 2, True, None, False)],
}

TIMEOUT_S = 60  # the loader's deadline per wait: a hang fails the case instead of the test


def folder_of(name):
    if name in ("llama_f32", "mixtral_f32"):
        return os.path.join(common.numeric_fixtures(), name)
    if name in ("llama_tied", "llama_l4"):
        return os.path.join(os.environ["SL_WORKERS_FIXTURES"], name)
    return os.path.join(common.fixtures(), name)


def torch_dtype(dt):
    import torch
    return {"F32": torch.float32, "BF16": torch.bfloat16, "F16": torch.float16}[dt]


def run_case(w, case, stats):
    import torch
    import shardload
    import shardload.torch
    fixture, family, tp, pp, ep, partition, into = case
    folder = folder_of(fixture)
    ckpt = common.Checkpoint(folder)
    lay = common.StageLayout(w.world, w.rank, tp, pp, ep)
    if family == "deepseek":
        ref = common.reference_deepseek(ckpt, lay, partition)
    else:
        ref = common.reference_stage(ckpt, lay, partition)
    tag = "%s tp=%d pp=%d dp=%d%s%s (stage %d)" % (
        fixture, tp, pp, lay.dp, " ep" if ep else "",
        " partition=%s" % partition if partition else "", lay.stage)
    config = {"tp": tp, "pp": pp, "dp": lay.dp, "enable_expert_parallel": ep,
              "timeout_s": TIMEOUT_S, "progress": "never"}
    if partition:
        config["pp_layer_partition"] = ",".join(str(n) for n in partition)

    def compare(how, name, got, want):
        w.check(common.raw(got) == common.raw(want), "%s %s: %s differs from the reference"
                % (tag, how, name))
        stats["params"] += 1
        stats["bytes"] += len(common.raw(want))

    # (a) the loader's memory, by DLPack
    loader = shardload.Loader(folder, group=w.group, **config)
    plan = loader.plan()
    names = {p.name for p in plan}
    w.check(names == set(ref), "%s: planned names differ from the reference: %s"
            % (tag, sorted(names ^ set(ref))))
    for p in plan:
        if p.name in ref:
            w.check(tuple(p.shape) == ref[p.name].shape, "%s: %s local shape %s, reference %s"
                    % (tag, p.name, p.shape, ref[p.name].shape))
    w.check(loader.rank == w.rank, "%s: loader.rank %d" % (tag, loader.rank))
    loader.load()
    tensors = loader.params()
    report = loader.report()
    loader.close()  # handed-out memory must survive this
    # every rank holds the job's figures, not only the first; the first every rank's row, the others
    # their own (docs/REPORT.md §5)
    w.check((report.get("tp"), report.get("pp"), report.get("dp")) == (tp, pp, lay.dp),
            "%s: rank %d's report sizes %s" % (tag, w.rank, [report.get(k) for k in ("tp", "pp", "dp")]))
    rows = [r.get("rank") for r in report.get("ranks", [])]
    w.check(rows == (list(range(w.world)) if w.rank == 0 else [w.rank]),
            "%s: rank %d's report lists ranks %s" % (tag, w.rank, rows))
    w.check(report.get("report_scope") == ("job" if w.rank == 0 else "rank"),
            "%s: rank %d's report_scope %s" % (tag, w.rank, report.get("report_scope")))
    w.check(set(tensors) == set(ref), "%s: params() names differ" % tag)
    for name, t in tensors.items():
        w.check(isinstance(t, torch.Tensor) and t.device.type == "cpu", "%s: %s type %s"
                % (tag, name, type(t)))
        if name in ref:
            compare("dlpack", name, t, ref[name])
    del tensors
    if not into:
        return
    # (b) a module's own tensors, through shardload.torch.load_into over the group
    with shardload.Loader(folder, group=w.group, **config) as l2:
        module = common.module_from_plan(l2.plan(), torch_dtype)
    for p in module.parameters():
        p.data.fill_(7)  # every byte must be written, padding rows included
    missing, unexpected = shardload.torch.load_into(module, folder, group=w.group, **config)
    w.check(missing == [] and unexpected == [], "%s: load_into lists %s %s"
            % (tag, missing, unexpected))
    state = module.state_dict()
    w.check(set(state) == {p.name for p in plan if p.alias_of is None},
            "%s: load_into module names differ" % tag)
    for name, t in state.items():
        if name in ref:
            compare("load_into", name, t, ref[name])


def body(w, cases):
    stats = {"params": 0, "bytes": 0, "cases": 0}
    for case in cases:
        run_case(w, case, stats)
        stats["cases"] += 1
    w.info.update(stats)
    print("worker %d: %d cases, %d parameter checks, %d bytes compared"
          % (w.rank, stats["cases"], stats["params"], stats["bytes"]), flush=True)


if __name__ == "__main__":
    harness.need_torch()
    world = int(sys.argv[1])
    result = harness.run(body, world, (CASES[world],), timeout_s=360)
    for r, (fails, info) in sorted(result.verdicts.items()):
        if not fails and info.get("cases") != len(CASES[world]):
            result.fail("worker %d ran %s of %d cases" % (r, info.get("cases"), len(CASES[world])))
    harness.main("test_workers_load N=%d" % world, result)
