"""STAND-IN for vllm.v1.executor.multiproc_executor: MultiprocExecutor(vllm_config) starts one
process per worker (torch.multiprocessing, spawn), each a WorkerWrapperBase whose worker joins a
gloo world over tcp://127.0.0.1 and sets up vLLM's groups; collective_rpc(method, timeout, args,
kwargs) runs the method (a name, or a picklable callable given the worker first) on every worker
and returns their results in rank order, raising when any worker raised (vLLM: RuntimeError
naming the worker's error). shutdown() ends the workers. Requests go over one pipe per worker
(vLLM broadcasts them through a shared-memory queue)."""

import multiprocessing.connection
import socket

import torch.multiprocessing as mp


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _worker_main(rank, all_kwargs, pipe):
    from .worker_base_entry import serve
    serve(rank, all_kwargs, pipe)


class MultiprocExecutor:
    def __init__(self, vllm_config, startup_timeout_s=120):
        world = vllm_config.parallel_config.world_size_across_dp
        init = "tcp://127.0.0.1:%d" % _free_port()
        kwargs = [dict(vllm_config=vllm_config, local_rank=r, rank=r, distributed_init_method=init,
                       is_driver_worker=r == 0) for r in range(world)]
        ctx = mp.get_context("spawn")
        self.pipes, self.procs = [], []
        for r in range(world):
            mine, theirs = ctx.Pipe()
            p = ctx.Process(target=_worker_main, args=(r, kwargs, theirs), daemon=True)
            p.start()
            self.pipes.append(mine)
            self.procs.append(p)
        self.collective_rpc("init_device", timeout=startup_timeout_s)

    def collective_rpc(self, method, timeout=None, args=(), kwargs=None):
        for pipe in self.pipes:
            pipe.send((method, tuple(args), dict(kwargs or {})))
        results = [None] * len(self.pipes)
        pending = dict(enumerate(self.pipes))
        failures = []
        while pending:
            ready = multiprocessing.connection.wait(list(pending.values()), timeout)
            if not ready:
                raise TimeoutError("collective_rpc %r: workers %s did not answer within %s s"
                                   % (method, sorted(pending), timeout))
            for rank in [r for r, p in pending.items() if p in ready]:
                try:
                    ok, value = pending.pop(rank).recv()
                except EOFError:
                    ok, value = False, "worker %d died" % rank
                if ok:
                    results[rank] = value
                else:
                    failures.append((rank, value))
        if failures:
            raise RuntimeError("Worker failed with error %s" % "; ".join(
                "worker %d: %s" % f for f in sorted(failures)))
        return results

    def shutdown(self):
        for pipe in self.pipes:
            try:
                pipe.send(None)
            except OSError:
                pass
        for p in self.procs:
            p.join(10)
            if p.is_alive():
                p.kill()
                p.join(5)
