#!/usr/bin/env python3
"""test_forward.py -- the shards compute the model. Under mpirun at 1, 2 and 4 ranks (3: skipped,
tp 3 does not divide these models' heads), tp = the world size: a tiny Llama (GQA 8/2, kv heads
replicated at tp 4, untied head, vocabulary 250 padded to 256) and a tiny Mixtral (8 experts,
expert parallelism: whole experts on their EP ranks; also without it: experts sharded by tp) in
plain torch (tiny_models.py), with vLLM's parameter names, filled by shardload.torch.load_into,
run one forward pass over a fixed token batch; every rank's logits must equal those of the
unsharded model built from the safetensors files by the tests' own reader (F32, tolerance 1e-5).
A tiny Llama-4 (llama4_f32: GQA 8/2, MoE layers 1 and 3 with a shared expert, layer 3 without
rotary; with and without expert parallelism) is compared the same way with its unsharded model in
the checkpoint's own convention (tiny_llama4.py: rotary on adjacent pairs of q_proj/k_proj as
stored, experts [E, H, 2I] as stored), while the sharded one runs vLLM's (neox rotary on
qkv_proj): they agree only when the loader permutes q and k rows as vLLM's Llama-4 load_weights
does.
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

common.need(["numpy", "torch", "mpi4py"])

import torch  # noqa: E402
from mpi4py import MPI  # noqa: E402

import shardload.torch  # noqa: E402
import tiny_llama4  # noqa: E402
import tiny_models  # noqa: E402

comm = MPI.COMM_WORLD
rank, world = comm.Get_rank(), comm.Get_size()
if world == 3:
    if rank == 0:
        print("test_forward: SKIP at 3 ranks (tp 3 divides neither model's heads)")
    sys.exit(0)
torch.manual_seed(0)
TOL = 1e-5
worst = 0.0
bad = 0


def sharded(folder, config, ep):
    lay = common.Layout(world, rank, world, ep)
    experts = common.local_experts(config["num_local_experts"], lay) \
        if "num_local_experts" in config else None
    model = tiny_models.TinyDecoder(config, world, rank, comm, experts, ep)
    missing, unexpected = shardload.torch.load_into(model, folder, comm, tp=world,
                                                    enable_expert_parallel=ep)
    assert not missing and not unexpected, (missing, unexpected)
    return model


def llama4_both(folder, ep):
    """Llama-4: the sharded vLLM-convention model (tiny_llama4.Vllm4) against the checkpoint's own
    convention (tiny_llama4.Hf4): equal only if q and k rows arrive permuted for vLLM's rotary."""
    ckpt = common.Checkpoint(folder)
    text = ckpt.config["text_config"]
    lay = common.Layout(world, rank, world, ep)
    experts = common.local_experts(text["num_local_experts"], lay)
    model = tiny_llama4.Vllm4(ckpt.config, world, rank, comm, experts, ep)
    missing, unexpected = shardload.torch.load_into(model, folder, comm, tp=world,
                                                    enable_expert_parallel=ep)
    assert not missing and not unexpected, (missing, unexpected)
    return tiny_models.logits_both(tiny_llama4.Hf4(ckpt.config, ckpt.get), model, text)


for name, ep in (("llama_f32", False), ("mixtral_f32", True), ("mixtral_f32", False),
                 ("llama4_f32", False), ("llama4_f32", True)):
    folder = os.path.join(common.numeric_fixtures(), name)
    if name == "llama4_f32":
        got, want, diff = llama4_both(folder, ep)
    else:
        config, full = tiny_models.unsharded(folder)
        got, want, diff = tiny_models.logits_both(full, sharded(folder, config, ep), config)
    worst = max(worst, diff)
    ok = diff <= TOL and got.shape == want.shape and torch.isfinite(got).all()
    bad += 0 if ok else 1
    print("rank %d: %s tp=%d%s: logits %s, max |diff| %.3g (|logits| max %.3g)%s"
          % (rank, name, world, " ep" if ep else "", list(got.shape), diff,
             want.abs().max().item(), "" if ok else " FAIL"), flush=True)

bad = comm.allreduce(bad)
worst = comm.allreduce(worst, op=MPI.MAX)
if rank == 0:
    print("test_forward: %d ranks, max logits diff %.3g (tolerance %g), %d failures"
          % (world, worst, TOL, bad))
sys.exit(1 if bad else 0)
