"""torchcomm.py -- the loader's communicator over a torch.distributed process group (no MPI).

shardload.Loader(model, group=pg) builds one: the C library calls these functions (its table
sl_comm_ops, shardload/core.h) for every collective of a load. Host bytes travel through the
group's own collectives and point-to-point messages (gloo on host memory); the stop signal of a
failing transfer, the liveness of every rank and the failure that broke the communicator go through
the group's key-value store (the one torch.distributed was initialised with, or store=).

Every call is bounded. The calling thread never blocks in a torch wait: a helper thread does
(_Waiter), and the caller polls it against the deadline, whatever the backend's own timeout is:
  - each rank writes a heartbeat into the store while it waits (and when the library polls it
    during its reads): a sequence number and the seconds since it last made progress;
  - past timeout_s the waiting rank reads every heartbeat twice, a grace period apart: ranks whose
    heartbeat did not move are "not heard from" (dead, stopped, unreachable). When all are alive
    and one of them progressed within timeout_s the job is slow, not stuck: it waits on. Otherwise
    the call returns TIMEOUT naming the silent ranks;
  - a call that fails or expires breaks the communicator: the library calls abort(), which writes
    the message into the store, and every other rank's call ends at once with "rank R: <message>";
  - the ranks found lost (not heard from when a call failed or expired) travel with that message,
    so every survivor names them (`lost`, which the loader gives as the error's peer_rank), not
    the survivor that happened to report first; a survivor waits, bounded, until every other
    survivor has read why the load failed (settle()), so that the process hosting the store does
    not end before the others could learn it. A store that cannot be read names no rank.
Nothing here ends the process or touches MPI.
"""

import collections
import ctypes
import queue
import threading
import time
import uuid

OK, ERROR, TIMEOUT, STOPPED = 0, 1, 2, 3
MIN, SUM = 0, 1
OPS_VERSION = 1

HEARTBEAT_EVERY_S = 0.5
CHECK_EVERY_S = 0.05  # the store's stop and failure keys, while a call waits (a store round trip each)
TAG_BASE = 0x5100

_c_msg = ctypes.c_void_p
_P64 = ctypes.POINTER(ctypes.c_uint64)
_PINT = ctypes.POINTER(ctypes.c_int)

BROADCAST = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, _PINT, ctypes.c_int, ctypes.c_int, ctypes.c_void_p,
                             ctypes.c_uint64, ctypes.c_uint64, ctypes.c_double, _c_msg, ctypes.c_size_t)
ALLGATHER = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_uint64, ctypes.c_void_p,
                             ctypes.c_double, _c_msg, ctypes.c_size_t)
ALLTOALLV = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, _PINT, ctypes.c_int, ctypes.c_void_p, _P64, _P64,
                             ctypes.c_void_p, _P64, _P64, ctypes.c_uint64, ctypes.c_double, _c_msg,
                             ctypes.c_size_t)
ALLREDUCE = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.POINTER(ctypes.c_int64), ctypes.c_int,
                             ctypes.c_int, ctypes.c_double, _c_msg, ctypes.c_size_t)
STOP_RAISE = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_uint64)
STOP_CHECK = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_uint64, _PINT)
POLL = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_double)
ABORT = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_char_p)


def _error(status_name, message):
    """shardload's exception for a set-up failure: the class of that C status (CommError,
    InvalidArgumentError), like every failure the loader reports. Imported here, not at the top:
    the error classes come from the loaded library."""
    from .errors import BY_STATUS, Error
    cls = next((c for c in BY_STATUS.values() if c.status_name == status_name), Error)
    return cls(message)


class CommOps(ctypes.Structure):
    """struct sl_comm_ops (shardload/core.h)."""
    _fields_ = [("version", ctypes.c_uint32), ("rank", ctypes.c_int), ("size", ctypes.c_int),
                ("ctx", ctypes.c_void_p), ("broadcast", BROADCAST), ("allgather", ALLGATHER),
                ("alltoallv", ALLTOALLV), ("allreduce", ALLREDUCE), ("stop_raise", STOP_RAISE),
                ("stop_check", STOP_CHECK), ("poll", POLL), ("abort", ABORT)]


class CommFailed(Exception):
    """A call cannot complete: result (ERROR/TIMEOUT/STOPPED) and the message for the library."""

    def __init__(self, result, message):
        super().__init__(message)
        self.result = result
        self.message = message


def is_process_group(obj):
    """Whether obj is a torch.distributed process group (without importing torch otherwise)."""
    mod = type(obj).__module__ or ""
    return mod.startswith("torch") and hasattr(obj, "rank") and hasattr(obj, "size")


def _bytes_view(ptr, nbytes):
    """A uint8 torch tensor on nbytes of C memory at ptr (no copy)."""
    import torch
    return torch.frombuffer((ctypes.c_uint8 * nbytes).from_address(ptr), dtype=torch.uint8)


def _write_msg(buf, cap, text):
    data = text.encode("utf-8", "replace")[:max(0, cap - 1)] + b"\0"
    ctypes.memmove(buf, data, len(data))


# The last works waited for, held process-wide. A gloo thread may drop its reference to a work (and
# so to its tensors) just after the wait returned; were that the last reference, the tensors would
# be destroyed on the gloo thread, which needs the interpreter lock, and at interpreter exit that
# ends the process with std::terminate (torch 1.13). Held here, the last reference is always
# Python's own, released with the lock.
_RECENT_WORKS = collections.deque(maxlen=64)


class _Waiter:
    """One thread that waits for torch Work objects. gloo's point-to-point works complete only inside
    a blocking wait() (is_completed() stays false, and a wait with a timeout leaves them unusable),
    so the blocking wait happens here and the calling thread polls an event against its deadline.
    A wait that never returns (a stopped peer) keeps this daemon thread; the communicator is broken
    by then and submits nothing more."""

    def __init__(self):
        self._queue = queue.Queue()
        self._thread = None

    def submit(self, works):
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="shardload-torch-wait", daemon=True)
            self._thread.start()
        done, box = threading.Event(), {}
        self._queue.put((works, done, box))
        return done, box

    def _run(self):
        while True:
            works, done, box = self._queue.get()
            try:
                for w in works:
                    w.wait()
            except BaseException as e:  # noqa: BLE001 -- handed to the waiting thread
                box["error"] = e
            done.set()


class TorchComm:
    """The communication functions of one loader over `group` (all ranks of the load).

    store: a torch.distributed Store shared by the group's processes (default: the one the default
    process group was initialised with). timeout_s: the deadline of the set-up exchange (the
    library passes its own timeout_s with every later call)."""

    def __init__(self, group=None, store=None, timeout_s=600.0):
        import torch
        import torch.distributed as dist
        from .syncgroup import Calls, SyncGroup
        self.torch, self.dist = torch, dist
        if isinstance(group, SyncGroup):  # a group of its own world: its own calls, ranks and store
            self.dist, self.group = Calls(dist, group), None
            self.rank, self.size = group.rank(), group.size()
            store = store if store is not None else group.store
        elif not dist.is_available() or not dist.is_initialized():
            raise _error("INVALID_ARGUMENT", "group=: torch.distributed is not initialised (call "
                         "torch.distributed.init_process_group first, or pass a shardload.sync_group)")
        else:
            self.group = group if group is not None else dist.group.WORLD
            self.rank = dist.get_rank(self.group)
            self.size = dist.get_world_size(self.group)
        if self.rank < 0:
            raise _error("INVALID_ARGUMENT", "group=: this process is not a member of the process group")
        self._global = [self._global_rank(r) for r in range(self.size)]
        self.failure = None        # the message that broke the communicator, once it broke
        self.lost = []             # ranks not heard from when it broke (dead, stopped, unreachable)
        self._last_beat = 0.0
        self._last_progress = time.monotonic()
        self._next_check = 0.0
        self._waiter = _Waiter()
        base = store if store is not None else self._default_store()
        # One namespace of keys per loader: rank 0 draws it, every rank receives it.
        uid = self._shared_uid(timeout_s)
        self.store = dist.PrefixStore("shardload/%s/" % uid, base)
        self.tag = TAG_BASE + (int(uid[:6], 16) % 4096) * 16
        self._beat(force=True)
        self._ops = None

    # set-up ---------------------------------------------------------------------------------------

    def _global_rank(self, r):
        dist = self.torch.distributed
        if self.group is None or self.group is dist.group.WORLD:
            return r
        fn = getattr(dist, "get_global_rank", None) or getattr(dist.distributed_c10d, "_get_global_rank")
        return fn(self.group, r)

    def _default_store(self):
        c10d = self.dist.distributed_c10d
        try:
            return c10d._get_default_store()
        except Exception as e:  # noqa: BLE001 -- any failure means the same to the user
            raise _error("COMM", "group=: cannot reach torch.distributed's store (%s); pass store= "
                         "(a torch.distributed Store shared by every rank)" % e) from None

    def _shared_uid(self, timeout_s):
        torch = self.torch
        t = torch.zeros(16, dtype=torch.uint8)
        if self.rank == 0:
            t.copy_(torch.frombuffer(bytearray(uuid.uuid4().bytes), dtype=torch.uint8))
        deadline = time.monotonic() + (timeout_s if timeout_s and timeout_s > 0 else 1e9)
        try:
            work = self.dist.broadcast(t, src=self._global[0], group=self.group, async_op=True)
            while not work.is_completed():
                if time.monotonic() > deadline:
                    raise _error("COMM", "group=: rank %d: the ranks did not all create the loader within "
                                 "%g s (timeout_s): is every rank of the group creating it?"
                                 % (self.rank, timeout_s))
                time.sleep(0.001)
            work.wait()
            _RECENT_WORKS.append(work)
        except RuntimeError as e:  # the backend's own failure: a peer left, the group broke
            raise _error("COMM", "group=: rank %d: the set-up exchange failed: %s" % (self.rank, e)) from None
        return bytes(t.tolist()).hex()

    # the C table ----------------------------------------------------------------------------------

    def ops(self):
        """struct sl_comm_ops for sl_loader_create_ops (kept alive by this object)."""
        if self._ops is None:
            self._callbacks = [BROADCAST(self._c_broadcast), ALLGATHER(self._c_allgather),
                               ALLTOALLV(self._c_alltoallv), ALLREDUCE(self._c_allreduce),
                               STOP_RAISE(self._c_stop_raise), STOP_CHECK(self._c_stop_check),
                               POLL(self._c_poll), ABORT(self._c_abort)]
            self._ops = CommOps(OPS_VERSION, self.rank, self.size, None, *self._callbacks)
        return self._ops

    def _guard(self, fn, msg, cap):
        """Runs one collective: its result for the library, never an exception through C."""
        if self.failure is not None:
            _write_msg(msg, cap, self.failure)
            return ERROR
        try:
            fn()
            self._last_progress = time.monotonic()
            return OK
        except CommFailed as e:
            _write_msg(msg, cap, e.message)
            return e.result
        except BaseException as e:  # noqa: BLE001 -- a KeyboardInterrupt must not cross C either
            _write_msg(msg, cap, "%s: %s" % (type(e).__name__, e))
            return ERROR

    def _c_broadcast(self, ctx, members, n, root, buf, nbytes, epoch, timeout_s, msg, cap):
        return self._guard(lambda: self.broadcast(self._members(members, n), root, buf, nbytes, epoch,
                                                  timeout_s), msg, cap)

    def _c_allgather(self, ctx, send, nbytes, recv, timeout_s, msg, cap):
        return self._guard(lambda: self.allgather(send, nbytes, recv, timeout_s), msg, cap)

    def _c_alltoallv(self, ctx, members, n, send, scount, sdispl, recv, rcount, rdispl, epoch, timeout_s,
                     msg, cap):
        def run():
            self.alltoallv(self._members(members, n), send, scount[:n], sdispl[:n], recv, rcount[:n],
                           rdispl[:n], epoch, timeout_s)
        return self._guard(run, msg, cap)

    def _c_allreduce(self, ctx, values, count, op, timeout_s, msg, cap):
        return self._guard(lambda: self.allreduce(values, count, op, timeout_s), msg, cap)

    # The store's keys are read without blocking through add(key, 0) (a counter, 0 while unset):
    # a flag is a counter raised after the text it announces was written.

    def _c_stop_raise(self, ctx, epoch):
        try:
            self.store.set("stop_from/%d" % epoch, str(self.rank))
            self.store.add("stop/%d" % epoch, 1)
        except Exception:  # noqa: BLE001 -- the store is gone: the calls will say so
            pass

    def _c_stop_check(self, ctx, epoch, frm):
        try:
            if self.store.add("stop/%d" % epoch, 0) == 0:
                return 0
            frm[0] = int(self.store.get("stop_from/%d" % epoch))
            return 1
        except Exception:  # noqa: BLE001
            return 0

    def _c_poll(self, ctx, idle_s):
        try:
            self._beat(idle=idle_s)
        except Exception:  # noqa: BLE001
            pass

    def _c_abort(self, ctx, reason):
        text = reason.decode("utf-8", "replace") if reason else "the communicator failed"
        if self.failure is None:
            self.failure = text
        try:
            if self.store.add("failed", 0) == 0:
                self.store.set("failed_lost", ",".join(str(r) for r in self.lost))
                self.store.set("failed_msg", "%d\n%s" % (self.rank, text))
                self.store.add("failed", 1)
        except Exception:  # noqa: BLE001 -- the store itself may be what failed
            pass

    # the operations -------------------------------------------------------------------------------

    def _members(self, members, n):
        return list(range(self.size)) if not members else [members[i] for i in range(n)]

    def broadcast(self, members, root, ptr, nbytes, epoch, timeout_s):
        if nbytes == 0 or len(members) <= 1:
            return
        t = _bytes_view(ptr, nbytes)
        if len(members) == self.size:
            works = [self.dist.broadcast(t, src=self._global[members[root]], group=self.group, async_op=True)]
        elif self.rank == members[root]:
            works = [self.dist.isend(t, self._global[m], group=self.group, tag=self.tag)
                     for m in members if m != self.rank]
        else:
            works = [self.dist.irecv(t, self._global[members[root]], group=self.group, tag=self.tag)]
        self._wait(works, timeout_s, epoch, "broadcast")

    def allgather(self, send, nbytes, recv, timeout_s):
        if nbytes == 0:
            return
        out = _bytes_view(recv, nbytes * self.size)
        parts = [out[r * nbytes:(r + 1) * nbytes] for r in range(self.size)]
        mine = _bytes_view(send, nbytes).clone()  # send may alias recv
        self._wait([self.dist.all_gather(parts, mine, group=self.group, async_op=True)], timeout_s, 0,
                   "allgather")

    def alltoallv(self, members, send, scount, sdispl, recv, rcount, rdispl, epoch, timeout_s):
        works = []
        for i, m in enumerate(members):
            if m == self.rank:
                if scount[i]:
                    ctypes.memmove(recv + rdispl[i], send + sdispl[i], scount[i])
                continue
            if rcount[i]:
                works.append(self.dist.irecv(_bytes_view(recv + rdispl[i], rcount[i]), self._global[m],
                                             group=self.group, tag=self.tag + 1))
            if scount[i]:
                works.append(self.dist.isend(_bytes_view(send + sdispl[i], scount[i]), self._global[m],
                                             group=self.group, tag=self.tag + 1))
        self._wait(works, timeout_s, epoch, "all-to-all")

    def allreduce(self, values, count, op, timeout_s):
        torch = self.torch
        t = torch.tensor([values[i] for i in range(count)], dtype=torch.int64)
        rop = self.dist.ReduceOp.MIN if op == MIN else self.dist.ReduceOp.SUM
        self._wait([self.dist.all_reduce(t, op=rop, group=self.group, async_op=True)], timeout_s, 0,
                   "reduction")
        for i, v in enumerate(t.tolist()):
            values[i] = v

    # waiting --------------------------------------------------------------------------------------

    def _wait(self, works, timeout_s, epoch, what):
        """Waits until all works completed; raises CommFailed on a failure, a stop (epoch), a peer's
        failure, or the deadline (see the module's description)."""
        start = time.monotonic()
        deadline = start + timeout_s if timeout_s and timeout_s > 0 else None
        _RECENT_WORKS.extend(works)
        done, box = self._waiter.submit(works)
        while not done.wait(CHECK_EVERY_S):  # returns at once when the works complete
            now = time.monotonic()
            self._beat_quietly(now - self._last_progress)
            if now >= self._next_check:
                self._next_check = now + CHECK_EVERY_S
                self._check_peers(epoch)
            if deadline is not None and now > deadline:
                silent, idle = self._listen()
                # A rank that failed while we listened stopped beating: its failure is the cause,
                # not its silence.
                self._check_peers(epoch)
                if silent is None:
                    raise CommFailed(TIMEOUT, "%s: no progress for %.0f s (timeout_s); the store of the process "
                                              "group cannot be read, so which ranks are alive is unknown"
                                     % (what, now - start))
                if not silent and idle is not None and idle < timeout_s:
                    deadline = time.monotonic() + timeout_s  # slow, not stuck: wait on
                    continue
                self.lost = silent
                raise CommFailed(TIMEOUT, "%s: no progress for %.0f s (timeout_s)%s" % (
                    what, now - start, self._describe(silent)))
        e = box.get("error")
        if e is not None:  # gloo's own errors (a peer's connection closed)
            text = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            suffix = self._silent_suffix()
            self._check_peers(epoch)  # as above: a peer's failure comes first
            raise CommFailed(ERROR, "%s: %s%s" % (what, text, suffix))

    def _check_peers(self, epoch):
        try:
            if self.store.add("failed", 0) > 0:
                rank, _, text = self.store.get("failed_msg").decode("utf-8", "replace").partition("\n")
                # What the failing rank found lost is the cause (a rank that failed on its own
                # error stops beating too, and is not lost)
                lost = self.store.get("failed_lost").decode()
                self.lost = [int(r) for r in lost.split(",") if r.strip().isdigit()]
                raise CommFailed(ERROR, "rank %s failed: %s" % (rank, text))
            if epoch and self.store.add("stop/%d" % epoch, 0) > 0:
                raise CommFailed(STOPPED, "stopped by rank %s" % self.store.get("stop_from/%d" % epoch).decode())
        except CommFailed:
            raise
        except Exception as e:  # noqa: BLE001
            # Which process ended is not known here: the store's host may have finished after a
            # failure elsewhere as well as died. Ranks already found lost are the cause.
            if self.lost:
                raise CommFailed(ERROR, "lost rank%s %s (dead, stopped or unreachable); the store of the "
                                        "process group is now unreachable too (%s)" % (
                                            "s" if len(self.lost) > 1 else "",
                                            ", ".join(str(r) for r in self.lost), e)) from None
            raise CommFailed(ERROR, "the store of the process group is unreachable (%s): the process that "
                                    "hosts it has ended or cannot be reached" % e) from None

    # liveness -------------------------------------------------------------------------------------

    def _beat(self, idle=None, force=False):
        now = time.monotonic()
        if not force and now - self._last_beat < HEARTBEAT_EVERY_S:
            return
        self._last_beat = now
        self.store.set("idle/%d" % self.rank, "%.3f" % (idle if idle is not None else 0.0))
        self.store.add("alive/%d" % self.rank, 1)

    def _beat_quietly(self, idle):
        """A heartbeat while waiting; an unreachable store is reported by _check_peers."""
        try:
            self._beat(idle=idle)
        except Exception:  # noqa: BLE001
            pass

    def _heartbeats(self):
        """rank -> (heartbeat, idle seconds) of the others; None when the store cannot be read (then
        nothing can be said of who is alive: no rank is taken for silent)."""
        out = {}
        for r in range(self.size):
            if r == self.rank:
                continue
            try:
                seq = self.store.add("alive/%d" % r, 0)
                if seq > 0:
                    out[r] = (seq, float(self.store.get("idle/%d" % r)))
            except Exception:  # noqa: BLE001
                return None
        return out

    def _grace(self, timeout_s=None):
        t = (timeout_s or 4.0) / 4
        return min(5.0, max(1.0, t))

    def _listen(self, grace=None):
        """(ranks not heard from, least idle seconds of the others or None), over a grace period;
        (None, None) when the store cannot be read."""
        before = self._heartbeats()
        end = time.monotonic() + (grace or self._grace())
        while before is not None and time.monotonic() < end:
            self._beat_quietly(time.monotonic() - self._last_progress)
            time.sleep(0.05)
        after = self._heartbeats() if before is not None else None
        if after is None:
            return None, None
        silent = [r for r in range(self.size)
                  if r != self.rank and (r not in after or r not in before or after[r][0] == before[r][0])]
        idles = [after[r][1] for r in after if r not in silent]
        return silent, (min(idles) if idles else None)

    def _describe(self, silent):
        if not silent:
            return "; every rank answered, none made progress (a wait that cannot complete)"
        return "; not heard from rank%s %s (of %d ranks; dead, stopped or unreachable)" % (
            "s" if len(silent) > 1 else "", ", ".join(str(r) for r in silent), self.size)

    def _silent_suffix(self):
        try:
            silent, _ = self._listen(grace=1.0)
        except Exception:  # noqa: BLE001
            return ""
        if silent:
            self.lost = silent
        return self._describe(silent) if silent else ""

    def settle(self):
        """After the communicator broke: this rank has learned why; wait, at most a grace period,
        until every rank not lost has too. The store lives in one of the processes (global rank 0's
        under torch.distributed's env:// and tcp:// initialisation): if that process raised and
        ended at once, a survivor still waiting would find the store gone and could not tell which
        rank was lost."""
        try:
            self.store.add("seen", 1)
            need = self.size - len(self.lost)
            end = time.monotonic() + self._grace()
            while self.store.add("seen", 0) < need and time.monotonic() < end:
                time.sleep(0.02)
        except Exception:  # noqa: BLE001 -- the store is already gone: nothing to wait for
            pass

