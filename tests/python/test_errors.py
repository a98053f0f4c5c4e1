#!/usr/bin/env python3
"""test_errors.py -- failures are one named exception on every rank, and nobody hangs (mpirun is
bounded by ctest's timeout and `timeout` in python.cmake). Under mpirun at 1..4 ranks, on llama:
  - the last rank binds a tensor of the wrong shape: ShapeError on every rank (the others' message
    "another rank failed: ...");
  - the last rank binds an unknown name: NotFoundError on every rank;
  - a wrong dtype (int32 for BF16: no conversion): InvalidArgumentError; a bad configuration value: ConfigError (the C message);
  - a checkpoint lacking a weight: MissingWeightsError on every rank (strict), a warning without;
  - load_into a module with an extra parameter: MissingWeightsError naming it, on every rank;
    strict=False loads and returns it in `missing`;
  - importing shardload and shardload.vllm opens no library; the first use reports the paths tried;
  - SL_STATUS_HUB is HubError with .cause, the former classes (HubGatedError, ...) its subclasses
    chosen by cause; a message comes from sl_last_error, this thread's.
"""

import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

common.need(["numpy", "torch", "mpi4py"])

import torch  # noqa: E402
from mpi4py import MPI  # noqa: E402

import shardload  # noqa: E402
import shardload.torch  # noqa: E402

comm = MPI.COMM_WORLD
rank, world = comm.Get_rank(), comm.Get_size()
last = world - 1
tp = 2 if world % 2 == 0 else 1
llama = os.path.join(common.fixtures(), "llama")
fails = []


def expect(cls, fn, words=()):
    try:
        fn()
    except shardload.Error as e:
        ok = isinstance(e, cls) and all(w in str(e) for w in words)
        if not ok:
            fails.append("expected %s %s, got %s: %s" % (cls.__name__, words, type(e).__name__, e))
        return e
    fails.append("expected %s, nothing raised" % cls.__name__)


def bind_then_load(what):
    with shardload.Loader(llama, comm, tp=tp, dp=world // tp) as l:
        p = l.plan()[1]
        if rank == last:
            if what == "shape":
                l.bind(p.name, torch.empty(p.shape[0] + 1, dtype=torch.bfloat16))
            elif what == "name":
                l.bind("no.such.weight", torch.empty(4, dtype=torch.bfloat16))
            else:
                l.bind(p.name, torch.empty(p.shape, dtype=torch.int32))  # float types convert
        l.load()


e = expect(shardload.ShapeError, lambda: bind_then_load("shape"))
if e is not None and rank != last:
    expect(shardload.ShapeError, lambda: (_ for _ in ()).throw(e), ["another rank failed"])
expect(shardload.NotFoundError, lambda: bind_then_load("name"),
       ["no.such.weight"] if rank == last else ["another rank failed"])
expect(shardload.InvalidArgumentError, lambda: bind_then_load("dtype"),
       ["BF16"] if rank == last else ["another rank failed"])
expect(shardload.ConfigError, lambda: shardload.Loader(llama, comm, tp=0), ["tp"])
expect(shardload.ConfigError, lambda: shardload.Config(no_such_key=1), ["no_such_key"])

# a weight missing from the checkpoint
tmp = tempfile.mkdtemp(prefix="sl-py-") if rank == 0 else None
tmp = comm.bcast(tmp)
dropped = os.path.join(tmp, "llama-drop")
if rank == 0:
    subprocess.run([os.path.join(common.SOURCE, "scripts", "make-fixture"), "llama", dropped,
                    "--drop", "model.layers.1.mlp.up_proj.weight"], check=True,
                   stdout=subprocess.DEVNULL)
comm.Barrier()
expect(shardload.MissingWeightsError,
       lambda: shardload.Loader(dropped, comm, tp=tp, dp=world // tp).load(),
       ["model.layers.1.mlp.up_proj.weight"])
with shardload.Loader(dropped, comm, tp=tp, dp=world // tp, strict=False, quiet=True) as l:
    l.load()  # not strict: loads the rest

# load_into with a parameter the checkpoint lacks (only the last rank's module has it)
with shardload.Loader(llama, comm, tp=tp, dp=world // tp) as l:
    module = common.module_from_plan(l.plan(), lambda dt: torch.bfloat16)
if rank == last:
    module.register_parameter("extra_scale", torch.nn.Parameter(torch.ones(3)))
expect(shardload.MissingWeightsError,
       lambda: shardload.torch.load_into(module, llama, comm, tp=tp, dp=world // tp),
       ["extra_scale"] if rank == last else ["another rank failed"])
missing, unexpected = shardload.torch.load_into(module, llama, comm, strict=False, tp=tp,
                                                dp=world // tp)
if missing != (["extra_scale"] if rank == last else []) or unexpected != []:
    fails.append("strict=False: missing %s unexpected %s" % (missing, unexpected))

# SL_STATUS_HUB and its causes; the one message channel
hub = shardload.HubError.status
e = shardload.error_for(hub, "gated", cause="GATED")
if not (type(e) is shardload.HubGatedError and isinstance(e, shardload.HubError) and e.cause == "GATED"
        and e.status == hub and e.status_name == "HUB"):
    fails.append("HUB/GATED: %s %s %s %s" % (type(e).__name__, e.cause, e.status, e.status_name))
e = shardload.error_for(hub, "no key", cause="S3_NO_SUCH_KEY")
if not (type(e) is shardload.HubError and e.cause == "S3_NO_SUCH_KEY"):
    fails.append("HUB/S3_NO_SUCH_KEY: %s %s" % (type(e).__name__, e.cause))
if not issubclass(shardload.HubOfflineError, shardload.HubError) or shardload.HubError.status_name != "HUB":
    fails.append("HubOfflineError is not a HubError")
bad = expect(shardload.ConfigError, lambda: shardload.Config(tensor_paralel=2), ["tensor_paralel"])
if bad is not None and bad.message != shardload._lib.last_error():
    fails.append("the message is not sl_last_error's: %r" % bad.message)

# library search message
if rank == 0:
    env = dict(os.environ, SHARDLOAD_LIBRARY="/nonexistent/libshardload.so", PYTHONPATH=tmp)
    pkg = os.path.join(tmp, "shardload")
    os.makedirs(pkg)
    src = os.path.join(common.SOURCE, "python", "shardload")
    for f in os.listdir(src):
        if f.endswith(".py"):
            with open(os.path.join(src, f)) as a, open(os.path.join(pkg, f), "w") as b:
                b.write(a.read())
    # Importing the package and its vLLM plugin module opens nothing (vLLM imports the plugin in
    # every process it starts); the first name that needs the library says where it looked.
    r = subprocess.run([sys.executable, "-c", "import shardload, shardload.vllm, sys; "
                        "assert not any('libshardload' in l for l in open('/proc/self/maps')); "
                        "shardload.Loader"], env=env, cwd=tmp, capture_output=True, text=True)
    if r.returncode == 0 or "/nonexistent/libshardload.so" not in r.stderr or \
            "system linker path" not in r.stderr or "LibraryNotFound" not in r.stderr:
        fails.append("library search message: %r" % r.stderr[-500:])

common.finish_mpi(comm, "test_errors", fails, tmp)
