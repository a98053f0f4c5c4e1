"""syncgroup.py -- a process group of its own for weight sync between processes that already belong
to other torch.distributed worlds (trainer ranks and the workers of an inference engine).

torch.distributed has one default world per process: a trainer's is its training job, a vLLM
worker's is vLLM's. A refit needs one group that holds both sides (docs/spec/DESIGN.md §13), so
`shardload.sync_group(host, port, rank, world_size)` makes a gloo group outside either world, over
a TCPStore that rank 0 serves at host:port (as vLLM's StatelessProcessGroup does for its NCCL
weight transfer), and the refit calls take it as group=:

    sg = shardload.sync_group("10.0.0.1", 29600, rank, world_size)       # on every rank of the sync
    shardload.publish(blocks, version=step, group=sg)                    # trainers
    loader.refit(version=step, group=sg)                                 # receivers

The group carries the control messages and host bytes (gloo); its store carries the stop signal,
the heartbeats and the failure of a refit, as a torch.distributed group's store does
(torchcomm.py). Nothing here needs torch.distributed to be initialised.
"""

import datetime

from .errors import CommError, InvalidArgumentError


class SyncGroup:
    """A gloo process group unknown to torch.distributed's registry, with its store. rank() and
    size() as a ProcessGroup's; .pg is the group, .store the TCPStore."""

    def __init__(self, pg, store, rank, size):
        self.pg = pg
        self.store = store
        self._rank, self._size = rank, size

    def rank(self):
        return self._rank

    def size(self):
        return self._size

    def __repr__(self):
        return "shardload.SyncGroup(rank %d of %d)" % (self._rank, self._size)


def sync_group(host, port, rank, world_size, timeout_s=600.0):
    """COLLECTIVE over the world_size processes that call it, each with its own rank (0 serves the
    store at host:port). Returns a SyncGroup for group= of shardload.publish, Loader.refit and
    shardload.torch.refit_into. timeout_s bounds the rendezvous (the refits pass their own)."""
    import torch.distributed as dist
    rank, world_size = int(rank), int(world_size)
    if world_size < 1 or not 0 <= rank < world_size:
        raise InvalidArgumentError("sync_group: rank %d of a group of %d" % (rank, world_size))
    wait = datetime.timedelta(seconds=float(timeout_s))
    try:
        store = dist.TCPStore(str(host), int(port), world_size, rank == 0, timeout=wait)
        pg = dist.ProcessGroupGloo(store, rank, world_size, wait)
    except (RuntimeError, ValueError) as e:
        raise CommError("sync_group: rank %d of %d at %s:%s: %s" % (rank, world_size, host, port, e)) from None
    return SyncGroup(pg, store, rank, world_size)


class Calls:
    """The torch.distributed functions TorchComm calls, over one SyncGroup's process group (the
    group is not in torch.distributed's registry, so the module-level functions cannot take it):
    ranks are the group's own."""

    def __init__(self, dist, sg):
        self._dist, self._pg = dist, sg.pg
        self.ReduceOp, self.PrefixStore = dist.ReduceOp, dist.PrefixStore

    def broadcast(self, t, src, group=None, async_op=True):
        opts = self._dist.BroadcastOptions()
        opts.rootRank, opts.rootTensor = src, 0
        return self._pg.broadcast([t], opts)

    def isend(self, t, dst, group=None, tag=0):
        return self._pg.send([t], dst, tag)

    def irecv(self, t, src, group=None, tag=0):
        return self._pg.recv([t], src, tag)

    def all_gather(self, parts, mine, group=None, async_op=True):
        return self._pg.allgather([parts], [mine])

    def all_reduce(self, t, op=None, group=None, async_op=True):
        opts = self._dist.AllreduceOptions()
        opts.reduceOp = op
        return self._pg.allreduce([t], opts)
