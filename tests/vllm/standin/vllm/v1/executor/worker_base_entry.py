"""The stand-in executor's worker process: a WorkerWrapperBase serving collective_rpc requests over
its pipe until told to stop (None). An exception in a method is sent back as the worker's error
(its type, message and the end of its traceback) and the worker goes on serving."""

import os
import sys

from ..worker.worker_base import WorkerWrapperBase


def serve(rank, all_kwargs, pipe):
    wrapper = WorkerWrapperBase(rpc_rank=rank)
    wrapper.init_worker(all_kwargs)
    while True:
        try:
            request = pipe.recv()
        except EOFError:
            break
        if request is None:
            break
        method, args, kwargs = request
        try:
            pipe.send((True, wrapper.execute_method(method, *args, **kwargs)))
        except BaseException as e:  # noqa: BLE001 -- reported to the executor, as vLLM does
            import traceback
            pipe.send((False, "%s: %s\n%s" % (type(e).__name__, e, traceback.format_exc()[-1500:])))
    sys.stdout.flush()
    os._exit(0)
