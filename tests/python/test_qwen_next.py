#!/usr/bin/env python3
"""test_qwen_next.py -- Qwen3-Next and Qwen3.5 through the Python package, under mpirun at 1, 2 and 4
ranks (ctest; tp = the world size; at 3 ranks, run by hand, tp 1 x dp 3 loads only):

(a) shardload.Loader loads qwen3_next, qwen3_5 (tied, ConditionalGeneration, vision skipped),
    qwen3_5_moe (stacked experts) and qwen3_5_moe_text, without and with expert parallelism; every
    parameter handed out by DLPack equals the independent reference of vLLM's rules
    (qwen_next_ref.py), and so does every tensor shardload.torch.load_into writes into a module;
(b) the shards compute the model: tiny_qwen_next.py's gated DeltaNet + gated attention + MoE
    decoder, filled by load_into at tp = the world size (with and without expert parallelism) from
    the numeric fixtures qwen3_next_f32 and qwen3_5_moe_f32, gives the logits of the unsharded model
    built from the reference at tp 1 (F32, tolerance 1e-4). A layout mistake (a key-head group,
    a conv1d section or a q/gate pair cut wrongly) changes the logits.
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

common.need(["numpy", "torch", "mpi4py"])

import torch  # noqa: E402
from mpi4py import MPI  # noqa: E402

import shardload  # noqa: E402
import shardload.torch  # noqa: E402
import qwen_next_ref  # noqa: E402
import tiny_qwen_next  # noqa: E402

comm = MPI.COMM_WORLD
rank, world = comm.Get_rank(), comm.Get_size()
fails = []
TOL = 1e-4


def check(ok, msg):
    if not ok:
        fails.append(msg)


def options(folder, tp, ep):
    opts = {"tp": tp, "dp": world // tp, "enable_expert_parallel": ep}
    if "ConditionalGeneration" in common.Checkpoint(folder).config["architectures"][0]:
        opts["skip_vision"] = True
    return opts


def module(shapes):
    m = torch.nn.Module()
    for name, shape in shapes.items():
        parts = name.split(".")
        mod = m
        for part in parts[:-1]:
            if not hasattr(mod, part):
                mod.add_module(part, torch.nn.Module())
            mod = getattr(mod, part)
        mod.register_parameter(parts[-1], torch.nn.Parameter(torch.full(shape, 7.0), requires_grad=False))
    return m


def load_case(name, tp, ep):
    folder = os.path.join(common.fixtures(), name)
    ckpt = common.Checkpoint(folder)
    ref = qwen_next_ref.reference(ckpt, common.Layout(world, rank, tp, ep))
    tag = "%s tp=%d dp=%d%s" % (name, tp, world // tp, " ep" if ep else "")
    with shardload.Loader(folder, comm, **options(folder, tp, ep)) as loader:
        loader.load()
        got = loader.params()
        check(set(got) == set(ref), "%s: names differ: %s" % (tag, sorted(set(got) ^ set(ref))))
        for n in set(got) & set(ref):
            check(common.raw(got[n]) == common.raw(ref[n]), "%s: %s differs from vLLM's rules" % (tag, n))
        del got
    # caller-bound tensors (no tied pair here: the tied head is an alias the plan shares)
    shapes = {n: a.shape for n, a in ref.items()}
    m = module(shapes)
    missing, unexpected = shardload.torch.load_into(m, folder, comm, **options(folder, tp, ep))
    check(missing == [] and unexpected == [], "%s: load_into lists %s %s" % (tag, missing, unexpected))
    for n, t in m.state_dict().items():
        check(common.raw(t) == common.raw(ref[n]), "%s: load_into %s differs" % (tag, n))
    return len(ref)


def forward_case(name, ep):
    folder = os.path.join(common.numeric_fixtures(), name)
    ckpt = common.Checkpoint(folder)
    c = qwen_next_ref.text_config(ckpt.config)
    whole = qwen_next_ref.reference(ckpt, common.Layout(1, 0, 1, False))
    full = tiny_qwen_next.TinyQwenNext(ckpt.config, {n: a.shape for n, a in whole.items()})
    with torch.no_grad():
        for n, p in full.params.items():
            p.copy_(torch.from_numpy(whole[n].copy()))
    lay = common.Layout(world, rank, world, ep)
    mine = qwen_next_ref.reference(ckpt, lay)   # only for the shapes
    experts = common.local_experts(c["num_experts"], lay)
    model = tiny_qwen_next.TinyQwenNext(ckpt.config, {n: a.shape for n, a in mine.items()}, world, rank, comm,
                                        experts)
    missing, unexpected = shardload.torch.load_into(model, folder, comm, **options(folder, world, ep))
    check(missing == [] and unexpected == [], "%s: load_into lists %s %s" % (name, missing, unexpected))
    tokens = torch.tensor([[1, 5, 99, 42, 7, 3, 77, 17], [0, 64, 63, 98, 2, 11, 50, 8]]) % c["vocab_size"]
    with torch.no_grad():
        want, got = full(tokens), model(tokens)
    diff = (got - want).abs().max().item() if got.shape == want.shape else float("inf")
    ok = diff <= TOL and bool(torch.isfinite(got).all())
    check(ok, "%s tp=%d%s: logits differ by %.3g" % (name, world, " ep" if ep else "", diff))
    if rank == 0:
        print("%s tp=%d%s: logits %s, max |diff| %.3g (|logits| max %.3g)" % (
            name, world, " ep" if ep else "", list(got.shape), diff, want.abs().max().item()), flush=True)


tp = world if world != 3 else 1
params = 0
for fixture in ("qwen3_next", "qwen3_5", "qwen3_5_moe", "qwen3_5_moe_text"):
    for ep in (False, True):
        if ep and fixture == "qwen3_5":
            continue
        if world == 3 and not ep and fixture != "qwen3_5":   # 8-row experts over 3 ranks: refused
            continue
        params += load_case(fixture, tp, ep)
if world != 3:   # tp 3 cuts the 4 key heads
    for fixture in ("qwen3_next_f32", "qwen3_5_moe_f32"):
        for ep in (False, True):
            forward_case(fixture, ep)
if rank == 0:
    print("test_qwen_next: %d parameters compared on rank 0" % params)
common.finish_mpi(comm, "test_qwen_next", fails)
