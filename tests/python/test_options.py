#!/usr/bin/env python3
"""test_options.py -- configuration keys and messages as a Python user meets them, under mpirun at
1..3 ranks, on llama (8 attention heads, vocabulary 250 padded to 256):
  - vLLM's spellings of keys (tensor_parallel_size, pipeline_parallel_size, data_parallel_size,
    download_dir) set the same keys as tp, pp, dp, cache_dir, in Config and in Loader, and a load
    spelled so gives the same parameters;
  - an unknown key raises ConfigError with "did you mean ...?";
  - messages name the key, not only a command-line flag (no "change --tp");
  - a mistyped relative local path (models/lama beside a models/ folder, ./x, ../m, a/b/c) raises
    NotFoundError "no such folder: ..." at once on every rank: never a Hub request (the Hub
    endpoint points at a closed port, so a request would be a network error);
  - at 3 ranks, tp 3 divides neither the heads nor the padded vocabulary: the heads are named first,
    as vLLM says it.
"""

import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

common.need(["numpy", "mpi4py"])

from mpi4py import MPI  # noqa: E402

import shardload  # noqa: E402

comm = MPI.COMM_WORLD
rank, world = comm.Get_rank(), comm.Get_size()
llama = os.path.abspath(os.path.join(common.fixtures(), "llama"))
fails = []


def check(cond, msg):
    if not cond:
        fails.append(msg)


def expect(cls, fn, words=(), absent=()):
    try:
        fn()
    except shardload.Error as e:
        text = str(e)
        if not isinstance(e, cls) or not all(w in text for w in words) or any(w in text for w in absent):
            fails.append("expected %s with %s and without %s, got %s: %s" %
                         (cls.__name__, list(words), list(absent), type(e).__name__, text))
        return e
    fails.append("expected %s %s, nothing raised" % (cls.__name__, list(words)))
    return None


# vLLM's spellings of keys
for alias, key, value in [("tensor_parallel_size", "tp", 2), ("pipeline_parallel_size", "pp", 3),
                          ("data_parallel_size", "dp", 4), ("download_dir", "cache_dir", "/x/cache")]:
    c = shardload.Config(**{alias: value})
    check(c.get(key) == str(value), "Config(%s=%r).get(%r) = %r" % (alias, value, key, c.get(key)))
    check(c.get(alias) == str(value), "Config(%s=%r).get(%r) = %r" % (alias, value, alias, c.get(alias)))
expect(shardload.ConfigError, lambda: shardload.Config(tensor_parallel_size=0),
       ["tp: '0' is not a positive integer", "tensor_parallel_size is vLLM's name for tp"])

# did you mean
expect(shardload.ConfigError, lambda: shardload.Config(tensor_paralel_size=2),
       ["unknown configuration key 'tensor_paralel_size'; did you mean tensor_parallel_size?"])
expect(shardload.ConfigError, lambda: shardload.Config(stagin_bytes="4M"), ["did you mean staging_bytes?"])
expect(shardload.ConfigError, lambda: shardload.Loader(llama, comm, enable_expert_paralel=True),
       ["did you mean enable_expert_parallel?"])
expect(shardload.ConfigError, lambda: shardload.Config(zzzzzzzz=1), ["unknown configuration key 'zzzzzzzz'"],
       ["did you mean"])

# a load spelled the vLLM way gives the parameters of tp/dp
tp = 2 if world % 2 == 0 else 1
with shardload.Loader(llama, comm, tp=tp, dp=world // tp) as a, \
        shardload.Loader(llama, comm, tensor_parallel_size=tp, data_parallel_size=world // tp) as b:
    pa = [(p.name, p.shape) for p in a.plan()]
    pb = [(p.name, p.shape) for p in b.plan()]
    check(pa == pb and len(pa) > 0, "the plans of tp=%d and tensor_parallel_size=%d differ" % (tp, tp))

# messages name the key
expect(shardload.LayoutError, lambda: shardload.Loader(llama, comm, tp=world + 1).plan(),
       ["tp * pp * dp", "the sizes tp, pp, dp"], ["change --tp"])
expect(shardload.ConfigError, lambda: shardload.Loader(llama, comm, dp=world, enable_eplb=True).plan(),
       ["enable_eplb (--enable-eplb) requires enable_expert_parallel"])

# mistyped relative local paths: at once, as a missing folder
tmp = tempfile.mkdtemp(prefix="sl-py-opts-") if rank == 0 else None
tmp = comm.bcast(tmp)
if rank == 0:
    os.makedirs(os.path.join(tmp, "work", "models"))
comm.Barrier()
here = os.getcwd()
endpoint = os.environ.get("HF_ENDPOINT")
os.environ["HF_ENDPOINT"] = "http://127.0.0.1:9"  # read by the C library at the load
os.chdir(os.path.join(tmp, "work"))
try:
    for model in ("models/lama", "./x", "../m", "a/b/c"):
        expect(shardload.NotFoundError, lambda: shardload.Loader(model, comm, dp=world).plan(),
               ["no such folder: %s (a local path; Hub ids look like org/name)" % model] if rank == 0
               else ["no such folder: %s" % model], ["127.0.0.1", "network"])
    # the fixture by a relative path loads
    os.chdir(os.path.dirname(llama))
    with shardload.Loader("./llama", comm, tp=tp, dp=world // tp) as l:
        check(len(l.plan()) > 0, "./llama: no parameters")
finally:
    os.chdir(here)
    if endpoint is None:
        del os.environ["HF_ENDPOINT"]
    else:
        os.environ["HF_ENDPOINT"] = endpoint

# the heads first
if world == 3:
    expect(shardload.DivisibilityError, lambda: shardload.Loader(llama, comm, tensor_parallel_size=3).plan(),
           ["Total number of attention heads (8) must be divisible by tensor parallel size (3)"],
           ["vocabulary"])

common.finish_mpi(comm, "test_options", fails, tmp)
