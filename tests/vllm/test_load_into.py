#!/usr/bin/env python3
"""test_load_into.py -- shardload.torch.load_into's rules for modules built the way vLLM builds
them, under mpirun at 1 and 2 ranks (tp = ranks), every rank checking its own module against the
independent reference of tests/python/common.py:

- a tied head: the plan's alias lm_head.weight is left shared when the module ties the two names
  to one Parameter (state_dict lists both, named_parameters one), copied when it does not;
- a module tensor that is not contiguous (a transposed view) is filled by copy after the load;
- attention scales the checkpoint lacks (_k_scale buffers, k_scale parameters) keep their values
  and are not reported; any other extra tensor is (strict: MissingWeightsError on every rank);
- fallback(name, tensor): a planned name the module lacks, taken by fallback.targets, receives the
  rank's loaded bytes after the load (equal to the reference); a fallback that raises on one rank
  makes every rank raise;
- check(plan): a message returned on one rank fails every rank before any byte is read.
"""

import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "python"))
import harness  # noqa: E402

harness.need(["torch", "numpy", "mpi4py"])

import torch  # noqa: E402
from mpi4py import MPI  # noqa: E402

import common  # noqa: E402  (tests/python: the reference)
import shardload  # noqa: E402
import shardload.torch  # noqa: E402

comm = MPI.COMM_WORLD
rank, world = comm.Get_rank(), comm.Get_size()
last = world - 1
fails = []


def check(cond, msg):
    if not cond:
        fails.append(msg)
        print("rank %d: FAIL: %s" % (rank, msg), flush=True)


def fx(name):
    return os.path.join(harness.fixtures(), name)


def module_for(folder, dtype):
    with shardload.Loader(folder, comm, tp=world) as l:
        return common.module_from_plan(l.plan(), lambda dt: dtype)


def same(t, ref_array, name):
    check(common.raw(t) == common.raw(ref_array), "%s differs from the reference" % name)


def expect(exc_cls, words, fn):
    try:
        fn()
    except shardload.Error as e:
        check(isinstance(e, exc_cls) or "another rank failed" in e.message,
              "raised %s, expected %s: %s" % (type(e).__name__, exc_cls.__name__, e.message))
        check(any(w in e.message for w in words), "message %r lacks %s" % (e.message, words))
        return
    check(False, "no %s raised (expected %s)" % (exc_cls.__name__, words))


# --- tied head ----------------------------------------------------------------------------------------
qwen = fx("qwen3")
ref = common.reference(common.Checkpoint(qwen), common.Layout(world, rank, world))
for tie in (True, False):
    m = module_for(qwen, torch.bfloat16)   # lm_head is an alias: module_from_plan leaves it out
    head = torch.nn.Module()
    m.add_module("lm_head", head)
    if tie:
        head.weight = m.model.embed_tokens.weight
    else:
        head.register_parameter("weight", torch.nn.Parameter(
            torch.zeros_like(m.model.embed_tokens.weight), requires_grad=False))
    missing, unexpected = shardload.torch.load_into(m, qwen, comm, tp=world)
    check(missing == [] and unexpected == [], "tied=%s: %s %s" % (tie, missing, unexpected))
    check((m.lm_head.weight is m.model.embed_tokens.weight) == tie, "tied=%s: sharing changed" % tie)
    same(m.lm_head.weight, ref["lm_head.weight"], "lm_head.weight (tied=%s)" % tie)
    same(m.model.embed_tokens.weight, ref["model.embed_tokens.weight"], "embed (tied=%s)" % tie)

# --- not contiguous; attention scales kept ------------------------------------------------------------
llama = fx("llama_f32")
ref = common.reference(common.Checkpoint(llama), common.Layout(world, rank, world))
m = module_for(llama, torch.float32)
o = m.model.layers.get_submodule("0").self_attn.o_proj
shape = tuple(o.weight.shape)
o.weight = torch.nn.Parameter(torch.zeros(shape[::-1]).t(), requires_grad=False)
attn = torch.nn.Module()
m.model.layers.get_submodule("0").self_attn.add_module("attn", attn)
attn.register_buffer("_k_scale", torch.tensor(1.0))
attn.register_parameter("k_scale", torch.nn.Parameter(torch.tensor(-1.0), requires_grad=False))
missing, unexpected = shardload.torch.load_into(m, llama, comm, tp=world)
check(missing == [] and unexpected == [], "scales/non-contiguous: %s %s" % (missing, unexpected))
check(not o.weight.is_contiguous(), "o_proj.weight was replaced instead of filled")
same(o.weight, ref["model.layers.0.self_attn.o_proj.weight"], "non-contiguous o_proj.weight")
check(attn._k_scale.item() == 1.0 and attn.k_scale.item() == -1.0, "attention scales changed")
if rank == last:
    m.register_parameter("extra_scale", torch.nn.Parameter(torch.ones(2)))
expect(shardload.MissingWeightsError, ["extra_scale", "another rank failed"],
       lambda: shardload.torch.load_into(m, llama, comm, tp=world))

# --- fallback --------------------------------------------------------------------------------------------
m = module_for(llama, torch.float32)
qkv = "model.layers.1.self_attn.qkv_proj.weight"
del m.model.layers.get_submodule("1").self_attn.qkv_proj.weight
got = {}


class Fallback:
    def __init__(self, fail_on=None):
        self.fail_on = fail_on

    def targets(self, name):
        return [] if name == qkv else None

    def __call__(self, name, tensor):
        if rank == self.fail_on:
            raise RuntimeError("cannot place %s" % name)
        got[name] = tensor.clone()


shardload.torch.load_into(m, llama, comm, tp=world, fallback=Fallback())
check(set(got) == {qkv}, "fallback received %s" % sorted(got))
if qkv in got:
    same(got[qkv], ref[qkv], "the fallback's %s" % qkv)
expect(shardload.Error, ["cannot place", "another rank failed"],
       lambda: shardload.torch.load_into(m, llama, comm, tp=world, fallback=Fallback(last)))
expect(shardload.UnexpectedWeightsError, [qkv, "another rank failed"],
       lambda: shardload.torch.load_into(m, llama, comm, tp=world))

# --- check -----------------------------------------------------------------------------------------------
m = module_for(llama, torch.float32)
expect(shardload.Error, ["layout refused", "another rank failed"],
       lambda: shardload.torch.load_into(m, llama, comm, tp=world,
                                         check=lambda plan: "layout refused" if rank == last else None))

bad = comm.allreduce(len(fails))
if rank == 0:
    print("test_load_into: %d ranks, %d failures" % (world, bad))
sys.exit(1 if bad else 0)
