#!/usr/bin/env python3
"""test_workers_refit.py CASE -- weight sync over a torch.distributed gloo group of 4 workers (no
mpirun, no MPI; docs/spec/DESIGN.md §13): workers 0-1 are trainers holding FSDP's row blocks of
every tensor's F32 master weights of a version (tests/python/refit_ref.py), workers 2-3 receivers
that loaded the llama fixture at tp 2 over their own group; the refits go over the whole group.
Messages of 4 KiB, so that a refit has many. CASE:
  steps  versions 1, 2 and a repeat of 2 (nothing moves), every receiver tensor against
         common.reference over the version's weights as torch rounds them, the plan made once;
  raise  trainer 1 fails before its second message of version 2 (SHARDLOAD_INJECT_REFIT_ERROR): every
         worker raises a shardload error naming it; each receiver's parameters hold what
         reload_state() says (new: version 2's bytes, old: version 1's, partial: each byte one of
         the two), version() says (1, 2); the next refit of version 2, over a new group of the same
         workers (gloo cannot cancel the failed refit's messages still in flight on the old one),
         reuses the plan and completes it, moving no more than a whole refit;
  kill   trainer 1 SIGKILLs itself at its second message of version 2: the three others raise
         CommError within the bound (timeout_s 10 + the liveness check's grace, with room for a
         loaded machine), naming rank 1; the receivers' loaders stay open: reload_state() and
         version() as above, every parameter readable;
  kill_receiver  the same with receiver 3 killed: the trainers and receiver 2 raise CommError in
         time naming rank 3, receiver 2's loader as above.
"""

import os
import re
import signal
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import harness  # noqa: E402
import common  # noqa: E402  (harness put tests/python on the path)

TIMEOUT_S = 10
RAISE_BOUND_S = 60
CASES = ("steps", "raise", "kill", "kill_receiver")
VICTIMS = {"raise": 1, "kill": 1, "kill_receiver": 3}


def receiver_check(w, tag, ckpt, loader, v):
    import refit_ref
    want = common.reference(refit_ref.Versioned(ckpt, v), common.Layout(2, w.rank - 2, 2))
    for name, t in loader.params().items():
        w.check(common.raw(t) == common.raw(want[name]), "%s: %s differs from version %d" % (tag, name, v))


def torn_check(w, ckpt, loader, before, now):
    """Each parameter holds what reload_state() says; version() says which versions."""
    import numpy as np
    import refit_ref
    lay = common.Layout(2, w.rank - 2, 2)
    old = common.reference(refit_ref.Versioned(ckpt, before), lay)
    new = common.reference(refit_ref.Versioned(ckpt, now), lay)
    states = loader.reload_state()
    for name, t in loader.params().items():
        have = np.frombuffer(common.raw(t), np.uint8)
        a, b = (np.frombuffer(common.raw(x[name]), np.uint8) for x in (old, new))
        neither = int(np.sum((have != a) & (have != b)))
        w.check(neither == 0, "%s holds %d bytes of neither version" % (name, neither))
        s = states[name]
        w.check(s != "new" or np.array_equal(have, b), "%s is new but holds old bytes" % name)
        w.check(s != "old" or np.array_equal(have, a), "%s is old but holds new bytes" % name)
    w.check(loader.version() == (before, now), "version() = %s, expected %s" % (loader.version(), (before, now)))
    w.info["states"] = sorted(set(states.values()))


def kill_at_second_message(stamp):
    """This worker SIGKILLs itself as it starts its second point-to-point message of a refit."""
    from shardload import torchcomm
    real = torchcomm.TorchComm.broadcast
    count = {"n": 0}

    def broadcast(self, members, root, ptr, nbytes, epoch, timeout_s):
        if len(members) == 2:
            count["n"] += 1
            if count["n"] == 2:
                with open(stamp, "w") as f:
                    f.write(repr(time.time()))
                os.kill(os.getpid(), signal.SIGKILL)
        return real(self, members, root, ptr, nbytes, epoch, timeout_s)
    torchcomm.TorchComm.broadcast = broadcast


def refit(w, ckpt, loader, pub, v):
    import refit_ref
    if loader is None:
        return pub.publish(refit_ref.blocks(ckpt, v, w.rank, 2), version=v, group=w.group)
    return loader.refit(group=w.group, version=v)


def body(w, case, folder, stamp):
    import torch.distributed as dist
    import shardload
    groups = [dist.new_group([0, 1]), dist.new_group([2, 3])]  # every worker creates both, in order
    ckpt = common.Checkpoint(folder)
    trainer = w.rank < 2
    loader = pub = None
    if trainer:
        pub = shardload.Publisher(timeout_s=TIMEOUT_S, bucket_bytes=4096)
    else:
        loader = shardload.Loader(folder, group=groups[1], tp=2, timeout_s=TIMEOUT_S, bucket_bytes=4096,
                                  progress="never")
        loader.load()
    report = refit(w, ckpt, loader, pub, 1)
    w.check(report["planned"], "the first refit reused a plan")
    if not trainer:
        receiver_check(w, "version 1", ckpt, loader, 1)
    if case == "steps":
        report = refit(w, ckpt, loader, pub, 2)
        w.check(not report["planned"] and report["bytes_transferred"] > 0, "version 2: %s" % report)
        if not trainer:
            receiver_check(w, "version 2", ckpt, loader, 2)
        report = refit(w, ckpt, loader, pub, 2)
        w.check(report["bytes_transferred"] == 0, "a repeat moved %d bytes" % report["bytes_transferred"])
        return
    full = report["bytes_transferred"]
    victim = VICTIMS[case]
    if w.rank == victim and case == "raise":
        os.environ["SHARDLOAD_INJECT_REFIT_ERROR"] = "%d:2" % victim
    if w.rank == victim and case.startswith("kill"):
        kill_at_second_message(stamp)
    try:
        refit(w, ckpt, loader, pub, 2)
        w.fail("the refit of version 2 succeeded although rank %d failed (%s)" % (victim, case))
        return
    except shardload.Error as e:
        w.info.update(raised=time.time(), kind=type(e).__name__, message=str(e))
        print("worker %d: %s: %s" % (w.rank, type(e).__name__, e), flush=True)
        w.check(w.rank == victim or re.search(r"\brank %d\b" % victim, str(e)) is not None,
                "the error does not name rank %d: %s" % (victim, e))
        w.check(not case.startswith("kill") or isinstance(e, shardload.CommError),
                "%s, not CommError" % type(e).__name__)
    os.environ.pop("SHARDLOAD_INJECT_REFIT_ERROR", None)
    if not trainer:
        torn_check(w, ckpt, loader, 1, 2)
    if case == "raise":  # a new group (gloo cannot drop the failed refit's messages) completes the version
        w.group = dist.new_group([0, 1, 2, 3])
        report = refit(w, ckpt, loader, pub, 2)
        w.check(0 < report["bytes_transferred"] <= full and not report["planned"],
                "the second try moved %d bytes of %d (planned: %s)" % (report["bytes_transferred"], full,
                                                                        report["planned"]))
        if not trainer:
            receiver_check(w, "version 2 completed", ckpt, loader, 2)
            w.check(loader.version() == (2, None), "version() = %s" % (loader.version(),))


def main():
    harness.need_torch()
    case = sys.argv[1] if len(sys.argv) > 1 else ""
    if case not in CASES:
        print("usage: test_workers_refit.py {%s}" % "|".join(CASES))
        sys.exit(2)
    import tempfile
    import shutil
    work = tempfile.mkdtemp(prefix="shardload-refit-")
    stamp = os.path.join(work, "killed")
    folder = os.path.join(common.fixtures(), "llama")
    try:
        if case.startswith("kill"):
            survivors = [r for r in range(4) if r != VICTIMS[case]]
            result = harness.run(body, 4, (case, folder, stamp), timeout_s=180, store="tcp", expect=survivors,
                                 barrier=False, linger=True)
            if not os.path.exists(stamp):
                result.fail("the victim never reached its second message")
            else:
                killed = float(open(stamp).read())
                for r in survivors:
                    info = result.verdicts.get(r, ([], {}))[1]
                    if "raised" in info and not -1.0 <= info["raised"] - killed <= RAISE_BOUND_S:
                        result.fail("worker %d raised %.1f s after the kill" % (r, info["raised"] - killed))
        else:
            result = harness.run(body, 4, (case, folder, stamp), timeout_s=180,
                                 barrier=case == "steps", store="tcp" if case != "steps" else "file")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    harness.main("test_workers_refit %s" % case, result)


if __name__ == "__main__":
    main()
