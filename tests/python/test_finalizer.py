#!/usr/bin/env python3
"""test_finalizer.py -- a Loader dropped without close() runs no collective, and says so. Under
mpirun at 1 and 2 ranks, on llama (numpy only: the arrays come by DLPack):
  - rank 0 drops a loaded loader (del, gc.collect()) while the other ranks keep theirs: one
    ResourceWarning naming the model; the C calls are sl_loader_release_local, never
    sl_loader_destroy (the package's `lib` is wrapped to record them); a barrier after it completes
    (a collective release would wait for the others); an array from params() keeps its bytes;
  - close() and the context manager still call sl_loader_destroy, warn nothing, and a closed
    loader's finalizer calls nothing;
  - a failed MPI_Init (simulated through the wrapped `lib`) raises MpiError, not PeerFailedError.
"""

import gc
import os
import sys
import warnings

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

common.need(["numpy", "mpi4py"])

import numpy as np  # noqa: E402
from mpi4py import MPI  # noqa: E402

import shardload  # noqa: E402
import shardload.loader as sl_loader  # noqa: E402

comm = MPI.COMM_WORLD
rank, world = comm.Get_rank(), comm.Get_size()
tp = 2 if world % 2 == 0 else 1
llama = os.path.join(common.fixtures(), "llama")
fails = []
WATCHED = ("sl_loader_destroy", "sl_loader_release_local", "MPI_Init", "MPI_Initialized")


class Recording:
    """The ctypes library, recording the calls of WATCHED that go through it; `fake` replaces some."""

    def __init__(self, real, fake=None):
        self._real = real
        self.calls = []
        self.fake = fake or {}

    def __getattr__(self, name):
        if name in self.fake:
            self.calls.append(name)
            return self.fake[name]
        value = getattr(self._real, name)
        if name in WATCHED:
            self.calls.append(name)
        return value


def with_lib(recording, fn):
    real = sl_loader.lib
    sl_loader.lib = recording
    try:
        return fn()
    finally:
        sl_loader.lib = real


def open_loaded():
    loader = shardload.Loader(llama, comm, tp=tp, dp=world // tp)
    loader.load()
    return loader


def drop(loader_box):
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        loader_box.pop()
        gc.collect()
    return [w for w in seen if issubclass(w.category, ResourceWarning)]


# 1. The finalizer of rank 0's loader, the others' still open.
box = [open_loaded()]
name = box[0].plan()[0].name
array = box[0].params("numpy")[name]
before = np.array(array, copy=True)
if rank == 0:
    rec = Recording(sl_loader.lib)
    seen = with_lib(rec, lambda: drop(box))
    if len(seen) != 1 or llama not in str(seen[0].message) or "close()" not in str(seen[0].message):
        fails.append("expected one ResourceWarning naming %s and close(), got %s"
                     % (llama, [str(w.message) for w in seen]))
    if rec.calls != ["sl_loader_release_local"]:
        fails.append("the finalizer called %s, expected sl_loader_release_local alone" % rec.calls)
    if not np.array_equal(array, before):
        fails.append("%s changed after the loader was released" % name)
comm.Barrier()  # rank 0 got here without the other ranks releasing anything
if rank != 0:
    drop(box)

# 2. close() and `with`: the collective destroy, no warning; nothing more from the finalizer.
rec = Recording(sl_loader.lib)
with warnings.catch_warnings(record=True) as seen:
    warnings.simplefilter("always")

    def closed_twice():
        with open_loaded():
            pass
        loader = open_loaded()
        loader.close()
        loader.close()
        del loader
        gc.collect()
    with_lib(rec, closed_twice)
if rec.calls != ["sl_loader_destroy", "sl_loader_destroy"]:
    fails.append("close() and `with` called %s, expected sl_loader_destroy twice" % rec.calls)
if any(issubclass(w.category, ResourceWarning) for w in seen):
    fails.append("a closed loader warned: %s" % [str(w.message) for w in seen])

# 3. A failed MPI_Init: the MPI status's class (the package's own path without mpi4py).


def not_initialized(flag_ref):
    return 0


rec = Recording(sl_loader.lib, {"MPI_Initialized": not_initialized, "MPI_Init": lambda a, b: 15})
promote = sl_loader._lib.promote_mpi
sl_loader._lib.promote_mpi = lambda: None
try:
    with_lib(rec, sl_loader._world_without_mpi4py)
    fails.append("a failed MPI_Init raised nothing")
except shardload.Error as e:
    if not isinstance(e, shardload.MpiError) or e.status_name != "MPI" or "MPI_Init" not in str(e):
        fails.append("a failed MPI_Init raised %s (%s): %s" % (type(e).__name__, e.status_name, e))
finally:
    sl_loader._lib.promote_mpi = promote
if rec.calls != ["MPI_Initialized", "MPI_Init"]:
    fails.append("the simulated MPI_Init path made the calls %s" % rec.calls)

common.finish_mpi(comm, "test_finalizer", fails)
