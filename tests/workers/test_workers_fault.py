#!/usr/bin/env python3
"""test_workers_fault.py FAULT -- a load over a torch.distributed gloo group survives the loss of
one worker: every other worker raises a shardload error within the deadline, naming the lost one.

Three workers (torch.multiprocessing, a TCP store hosted by rank 0) load the llama fixture at
dp 3 with one reader thread, every read slowed down (SHARDLOAD_INJECT_READ_DELAY_MS) so that the
load lasts long enough to be interrupted, and timeout_s 10. Rank 2 is the victim (not rank 0,
whose process hosts the store). FAULT:
  kill        rank 2 SIGKILLs itself from its progress callback once some, not all, of its bytes
              are loaded (mid-transfer);
  kill_exit   the same, and every survivor's process ends as soon as its load() raised (rank 0's
              hosts the store: the others must have learned who was lost before it is gone);
  stop        rank 2's progress callback tells the parent it is mid-transfer, the parent SIGSTOPs
              it (it stays stopped: its connections stay open, it answers nothing);
  raise_exit  rank 2 raises an ordinary Python exception after plan() and before load(), while the
              others call load(), and its process ends;
  raise_stay  the same, but its process stays alive without loading (its exception was handled
              elsewhere): only the deadline can tell.
Each survivor checks that load() raised shardload.CommError (it did not return, nor raise anything
else) whose message names rank 2 and, where it lists ranks not heard from, names no survivor,
whose peer_rank is 2 (the lost worker, not the survivor that noticed first, nor rank 0) and whose
lost_ranks is [2]; it reports the time it raised, then leaves with os._exit once every survivor has
reported (rank 0's process hosts the store through which the others learn why the load failed),
or at once (kill_exit). The parent
checks that each raised within RAISE_BOUND_S of the fault (a bound: timeout_s + the grace of the
liveness check, with room for a loaded machine), and kills every worker's process group in a
finally (SIGCONT first).
"""

import os
import re
import shutil
import signal
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import harness  # noqa: E402
import common  # noqa: E402  (harness put tests/python on the path)

WORLD = 3
VICTIM = 2
TIMEOUT_S = 10
RAISE_BOUND_S = 60
READ_DELAY_MS = 300
# Rank 1 calls load() this much later than rank 0: workers never arrive together, and a survivor
# whose deadline falls while another survivor is checking who is alive must not take that one,
# which stops its heartbeat once it has failed, for a lost rank.
STAGGER_S = 0.7
FAULTS = ("kill", "kill_exit", "stop", "raise_exit", "raise_stay")


def check_message(w, text):
    """The message names the victim; a list of ranks not heard from holds no survivor."""
    w.check(re.search(r"\branks? (\d+, )*%d\b" % VICTIM, text) is not None,
            "the error does not name rank %d: %s" % (VICTIM, text))
    for m in re.finditer(r"not heard from ranks? ([\d, ]+)", text):
        named = {int(x) for x in m.group(1).replace(" ", "").split(",") if x}
        w.check(named == {VICTIM}, "the error says ranks %s were not heard from (only rank %d is "
                "gone): %s" % (sorted(named), VICTIM, text))


def body(w, fault, model, stamp):
    import shardload
    # Every read sleeps first: the load lasts seconds, so a fault lands in the middle of it.
    os.environ["SHARDLOAD_INJECT_READ_DELAY_MS"] = str(READ_DELAY_MS)
    state = {"told": False}

    def progress(done, total):
        if w.rank != VICTIM or not 0 < done < total or state["told"]:
            return
        state["told"] = True
        if fault.startswith("kill"):
            with open(stamp, "w") as f:  # the parent's reference time for the bound
                f.write(repr(time.time()))
            os.kill(os.getpid(), signal.SIGKILL)
        elif fault == "stop":
            w.send("midload", time.time())

    loader = shardload.Loader(model, group=w.group, dp=WORLD, threads=1, timeout_s=TIMEOUT_S,
                              progress=progress)
    loader.plan()
    if w.rank == VICTIM and fault.startswith("raise"):
        w.send("fault", time.time())
        try:
            raise ValueError("worker %d fails before load()" % w.rank)
        except ValueError:
            if fault == "raise_exit":
                w.queue.close()
                w.queue.join_thread()
                os._exit(1)
            time.sleep(10 * RAISE_BOUND_S)  # alive, never loading; the parent kills it
    if w.rank == 1:
        time.sleep(STAGGER_S)
    try:
        loader.load()
        w.fail("load() returned although rank %d is gone (%s)" % (VICTIM, fault))
        return
    except shardload.Error as e:
        w.info.update(raised=time.time(), kind=type(e).__name__, message=str(e))
        print("worker %d: %s: %s" % (w.rank, type(e).__name__, e), flush=True)
        check_message(w, str(e))
        # A peer lost is the communicator's failure, whichever rank saw it first, and the lost
        # peer is the one every survivor names.
        w.check(isinstance(e, shardload.CommError), "load() raised %s, not CommError: %s"
                % (type(e).__name__, e))
        w.check(e.peer_rank == VICTIM and getattr(e, "lost_ranks", None) == [VICTIM],
                "peer_rank %r, lost_ranks %r: expected %d and [%d]: %s"
                % (e.peer_rank, getattr(e, "lost_ranks", None), VICTIM, VICTIM, e))
    except Exception as e:  # noqa: BLE001 -- the wrong kind of failure
        w.fail("load() raised %s, not a shardload error: %s" % (type(e).__name__, e))
        return
    if w.rank != VICTIM and fault.startswith("kill"):
        w.check(os.path.exists(stamp), "the victim did not kill itself mid-load")
    loader.close()


def main():
    harness.need_torch()
    fault = sys.argv[1]
    if fault not in FAULTS:
        print("usage: test_workers_fault.py {%s}" % "|".join(FAULTS))
        sys.exit(2)
    model = os.path.join(common.fixtures(), "llama")
    work = tempfile.mkdtemp(prefix="shardload-fault-")
    stamp = os.path.join(work, "killed")
    times = {}

    def on_event(msg, procs, result):
        kind = msg[0]
        if kind == "midload" and fault == "stop" and "fault" not in times:
            os.kill(procs[VICTIM].pid, signal.SIGSTOP)
            times["fault"] = time.time()
            print("parent: stopped worker %d mid-load" % VICTIM, flush=True)
        elif kind == "fault":
            times["fault"] = msg[2]

    survivors = [r for r in range(WORLD) if r != VICTIM]
    try:
        result = harness.run(body, WORLD, (fault, model, stamp), timeout_s=120, store="tcp",
                             expect=survivors, on_event=on_event, barrier=False, linger=fault != "kill_exit")
        if fault.startswith("kill") and os.path.exists(stamp):
            times["fault"] = float(open(stamp).read())
    finally:
        shutil.rmtree(work, ignore_errors=True)
    if "fault" not in times:
        result.fail("the fault (%s) never happened: the load ended before rank %d was mid-way?"
                    % (fault, VICTIM))
    else:
        for r in survivors:
            fails, info = result.verdicts.get(r, ([], {}))
            if "raised" not in info:
                continue  # its verdict says why
            after = info["raised"] - times["fault"]
            print("parent: worker %d raised %s %.1f s after the fault (%s)"
                  % (r, info["kind"], after, fault), flush=True)
            if not -1.0 <= after <= RAISE_BOUND_S:
                result.fail("worker %d raised %.1f s after the fault (bound %d s)"
                            % (r, after, RAISE_BOUND_S))
    harness.main("test_workers_fault %s" % fault, result)


if __name__ == "__main__":
    main()
