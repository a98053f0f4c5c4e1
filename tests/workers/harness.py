"""harness.py -- runs a test function in N worker processes joined by a torch.distributed gloo
process group, without mpirun (torch.multiprocessing, spawn context), and gathers every worker's
verdict in the parent, which exits non-zero when any worker failed or gave none.

    def body(w, *args):          # in every worker: w.rank, w.world, w.group, w.check(cond, msg)
        ...
    if __name__ == "__main__":
        harness.main("name", harness.run(body, world, args))

Each worker:
  - dies with the parent (PR_SET_PDEATHSIG, and a watch on its parent's pid): a test killed by its
    timeout leaves nothing behind; it leads its own process group, so that the parent can kill it
    with whatever it started;
  - joins the group ("file://" store in a temporary folder, or "tcp://127.0.0.1:PORT" on a free
    port, hosted by rank 0), runs the body, records an exception of the body as a failure;
  - checks that MPI was never initialised (MPI_Initialized through the library's own libmpi) and
    that mpi4py was never imported: a load over a process group must not need either;
  - puts its verdict on its own multiprocessing queue, then (unless barrier=False) meets the
    others in a bounded barrier so that no rank tears down the store while another still uses it,
    and leaves with os._exit (a gloo group with pending work can hang at interpreter exit).
The parent keeps the verdicts, hands every other message to on_event, and in a finally kills
every worker's process group (SIGCONT first: a stopped process ends too).
"""

import ctypes
import datetime
import faulthandler
import os
import queue as queue_mod
import shutil
import signal
import socket
import sys
import tempfile
import threading
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "python"))
for _m in ("numpy", "torch"):  # before common, which imports numpy
    try:
        __import__(_m)
    except ImportError:
        print("SKIP: %s is not installed for %s (Debian: python3-%s)" % (_m, sys.executable, _m))
        sys.exit(77)
import common  # noqa: E402

INIT_TIMEOUT_S = 120        # joining the group (slow interpreter starts on a loaded machine)
BARRIER_TIMEOUT_S = 60
EXIT_GRACE_S = 60           # after its verdict, a worker's exit


def need_torch():
    """Exit 77 (skipped) without torch.distributed's gloo (without torch or numpy this module
    already did)."""
    import torch.distributed as dist
    if not dist.is_available() or not dist.is_gloo_available():
        common.skip("torch.distributed with gloo is not available in %s" % sys.executable)


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# -------------------------------------------------------------------------------------------------
# worker side


class Worker:
    """What a test body gets: its rank, the group, checks, and messages to the parent."""

    def __init__(self, rank, world, queue):
        self.rank, self.world, self.queue = rank, world, queue
        self.group = None
        self.failures = []
        self.info = {}

    def check(self, cond, msg):
        if not cond:
            self.fail(msg)
        return bool(cond)

    def fail(self, msg):
        self.failures.append(msg)
        print("worker %d: FAIL: %s" % (self.rank, msg), file=sys.stderr, flush=True)

    def send(self, *msg):
        """A message to the parent's on_event: (kind, rank, ...)."""
        self.queue.put((msg[0], self.rank) + tuple(msg[1:]))

    def check_mpi_untouched(self):
        import shardload._lib
        flag = ctypes.c_int(-1)
        rc = shardload._lib.lib.MPI_Initialized(ctypes.byref(flag))
        self.check(rc == 0 and flag.value == 0,
                   "MPI was initialised in a worker of a torch.distributed load (MPI_Initialized "
                   "rc %d, flag %d)" % (rc, flag.value))
        self.check("mpi4py" not in sys.modules, "mpi4py was imported in a worker")


def _die_with(parent):
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass

    def watch():
        while True:
            if os.getppid() != parent:
                os._exit(3)
            time.sleep(0.5)
    if os.getppid() != parent:
        os._exit(3)
    threading.Thread(target=watch, name="parent-watch", daemon=True).start()


def _bounded_barrier(w):
    import torch.distributed as dist
    box = {}

    def run():
        try:
            dist.barrier()
            box["ok"] = True
        except Exception as e:  # noqa: BLE001 -- reported below
            box["error"] = e
    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(BARRIER_TIMEOUT_S)
    return box


def _entry(rank, world, init, fn, args, queue, parent, barrier, release, dump_after_s):
    _die_with(parent)
    # A worker still busy when the parent is about to give up shows where it is stuck.
    faulthandler.dump_traceback_later(dump_after_s, exit=False)
    try:
        os.setpgid(0, 0)
    except OSError:
        pass
    w = Worker(rank, world, queue)
    joined = False
    try:
        import torch
        import torch.distributed as dist
        torch.set_num_threads(1)  # the workers share a few cores
        dist.init_process_group("gloo", init_method=init, rank=rank, world_size=world,
                                timeout=datetime.timedelta(seconds=INIT_TIMEOUT_S))
        joined = True
        w.group = dist.group.WORLD
        fn(w, *args)
    except BaseException as e:  # noqa: BLE001 -- every failure becomes this worker's verdict
        w.fail("%s: %s\n%s" % (type(e).__name__, e, traceback.format_exc()))
    try:
        w.check_mpi_untouched()
    except BaseException as e:  # noqa: BLE001
        w.fail("checking MPI: %s: %s" % (type(e).__name__, e))
    queue.put(("verdict", rank, w.failures, w.info))
    faulthandler.cancel_dump_traceback_later()
    if barrier and joined:
        box = _bounded_barrier(w)
        if "ok" not in box:
            print("worker %d: the final barrier did not complete (%s)"
                  % (rank, box.get("error", "timed out")), file=sys.stderr, flush=True)
            queue.put(("late", rank, "the final barrier did not complete: %s"
                       % box.get("error", "timed out")))
    queue.close()
    queue.join_thread()
    sys.stdout.flush()
    sys.stderr.flush()
    if release is not None:
        # linger: stay until every expected verdict is in (rank 0's process hosts a TCP store the
        # others may still need to learn why the load failed)
        end = time.monotonic() + EXIT_GRACE_S
        while not os.path.exists(release) and time.monotonic() < end:
            time.sleep(0.05)
    os._exit(0)


# -------------------------------------------------------------------------------------------------
# parent side


class Result:
    """Verdicts per rank, failures the parent found, and the test's own notes."""

    def __init__(self, world):
        self.world = world
        self.verdicts = {}       # rank -> (failures, info)
        self.others = {}         # the same of ranks outside `expect` (a fault test's victim)
        self.problems = []       # the parent's own findings
        self.t_verdict = {}      # rank -> monotonic time its verdict arrived

    def fail(self, msg):
        self.problems.append(msg)
        print("parent: FAIL: %s" % msg, file=sys.stderr, flush=True)

    def failures(self):
        out = list(self.problems)
        for r in sorted(self.verdicts):
            out += ["worker %d: %s" % (r, m) for m in self.verdicts[r][0]]
        return out


def _kill_worker(p):
    if p.pid is None:
        return
    for sig in (signal.SIGCONT, signal.SIGKILL):
        try:
            if os.getpgid(p.pid) == p.pid:
                os.killpg(p.pid, sig)
            else:
                os.kill(p.pid, sig)
        except (ProcessLookupError, PermissionError):
            pass


def _next_message(queues, timeout):
    """The next message of any of the queues, or None after timeout seconds."""
    end = time.monotonic() + timeout
    while True:
        for q in queues:
            try:
                return q.get_nowait()
            except queue_mod.Empty:
                pass
        if time.monotonic() >= end:
            return None
        time.sleep(0.01)


def _on_sigterm(signum, frame):
    raise SystemExit(128 + signum)  # runs the finally that kills the workers


def run(fn, world, args=(), timeout_s=240, store="file", expect=None, on_event=None, barrier=True,
        exit_codes=(0,), linger=False):
    """Starts `world` workers running fn(w, *args); returns a Result once every rank in `expect`
    (default: all) gave its verdict, or at timeout_s. on_event(msg, procs, result) gets every other
    message (kind, rank, ...). A rank of `expect` without a verdict, or exiting with a code not in
    exit_codes, is a failure; ranks outside `expect` are the test's business (result.others).
    linger: a worker that gave its verdict exits only once every rank of `expect` gave one (for
    barrier=False, where nothing else keeps the store's host alive for the others)."""
    import torch.multiprocessing as mp
    signal.signal(signal.SIGTERM, _on_sigterm)
    # The workers run on this machine: talk over loopback whatever the hostname resolves to.
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    expect = set(range(world)) if expect is None else set(expect)
    ctx = mp.get_context("spawn")
    # One queue per worker: a queue's writers share a lock, and a worker killed or stopped while
    # its feeder thread holds it would block everyone else's verdict.
    queues = [ctx.Queue() for _ in range(world)]
    tmp = tempfile.mkdtemp(prefix="shardload-workers-")
    init = ("file://" + os.path.join(tmp, "store")) if store == "file" else \
        "tcp://127.0.0.1:%d" % free_port()
    release = os.path.join(tmp, "release") if linger else None
    dump_after_s = max(10, timeout_s - 15)
    procs = [ctx.Process(target=_entry, name="worker-%d" % r,
                         args=(r, world, init, fn, args, queues[r], os.getpid(), barrier, release,
                               dump_after_s))
             for r in range(world)]
    result = Result(world)
    result.procs = procs
    dead_since = {}
    try:
        for p in procs:
            p.start()
        deadline = time.monotonic() + timeout_s
        while expect - set(result.verdicts) and time.monotonic() < deadline:
            msg = _next_message(queues, 0.2)
            if msg is None:
                now = time.monotonic()
                for r in sorted(expect - set(result.verdicts)):
                    if procs[r].exitcode is None:
                        continue
                    dead_since.setdefault(r, now)
                    if now - dead_since[r] > 5 and r not in result.verdicts:  # its queue is drained
                        result.verdicts[r] = (["exited with code %s before giving a verdict"
                                               % procs[r].exitcode], {})
                continue
            if msg[0] == "verdict":
                where = result.verdicts if msg[1] in expect else result.others
                where[msg[1]] = (msg[2], msg[3])
                result.t_verdict[msg[1]] = time.monotonic()
            elif msg[0] == "late":
                result.fail("worker %d: %s" % (msg[1], msg[2]))
            elif on_event is not None:
                on_event(msg, procs, result)
        if release is not None:
            open(release, "w").close()
        for r in sorted(expect - set(result.verdicts)):
            state = "alive" if procs[r].is_alive() else "exit code %s" % procs[r].exitcode
            result.fail("worker %d gave no verdict within %d s (%s)" % (r, timeout_s, state))
        end = time.monotonic() + EXIT_GRACE_S
        for r in sorted(expect):
            procs[r].join(max(0.1, end - time.monotonic()))
        # Messages sent after a verdict (the final barrier's failure).
        while True:
            msg = _next_message([q for r, q in enumerate(queues) if r in expect], 0.2)
            if msg is None:
                break
            if msg[0] == "late":
                result.fail("worker %d: %s" % (msg[1], msg[2]))
            elif on_event is not None and msg[0] != "verdict":
                on_event(msg, procs, result)
        for r in sorted(expect):
            code = procs[r].exitcode
            if code is None:
                result.fail("worker %d did not exit within %d s of its verdict" % (r, EXIT_GRACE_S))
            elif code not in exit_codes:
                result.fail("worker %d exited with code %s" % (r, code))
    finally:
        for p in procs:
            _kill_worker(p)
        for p in procs:
            p.join(5)
        shutil.rmtree(tmp, ignore_errors=True)
    return result


def main(name, results):
    """Prints every failure and exits 1 when there is one (results: a Result or a list of them)."""
    if not isinstance(results, (list, tuple)):
        results = [results]
    failures = [f for r in results for f in r.failures()]
    for f in failures:
        print("%s: FAIL: %s" % (name, f), flush=True)
    print("%s: %d worker runs, %d failures" % (name, len(results), len(failures)), flush=True)
    sys.exit(1 if failures else 0)
