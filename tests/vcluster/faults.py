#!/usr/bin/env python3
"""faults.py -- faults between the nodes of a virtual cluster in the middle of a load (label vcluster).

Usage: faults.py --cli build/shardload --build build [--timeout-s 5] CASE
       CASE: link_down, kill, loss, slow_link

Each case brings up 2 nodes x 2 ranks with the 24 MB model served over sshfs from the storage
namespace, loads it at tp=4 with the load watchdog at --timeout-s, and (except slow_link) injects
the fault on node 1 once a rank has logged its "transfer:" line (the reads have started):

  link_down  node 1's link goes down and stays down (links 20 Mbit/s).
  kill       node 1's processes (its Open MPI daemon and ranks) are killed with SIGKILL.
  loss       30 % of node 1's outgoing packets are dropped (nftables) from then on.
  slow_link  node 1's link at 10 Mbit/s, the others at 1 Gbit/s (100x): the load must complete.

Every rank runs under `sh -c 'shardload ... 2>FILE; echo "exit $?" >>FILE'` with FILE on the local
disk, so what a rank prints does not depend on Open MPI forwarding it over a dead link, and the
rank's own exit status is recorded unless Open MPI's teardown kills the shell too. A thread watches
the ranks' processes in the nodes' namespaces (when each one ended) and their files (when the
cause appeared). The contract, checked on every surviving rank:

  link_down  all four ranks print the watchdog's line (phase, "not heard from" naming the other
             node's ranks) and end non-zero, within LIMIT seconds of the fault.
  kill       ranks 0 and 1 end within LIMIT, not with status 0, and the cause is named: their own
             watchdog line, or Open MPI's "lost communication with a remote daemon" naming node 1's
             address (Open MPI 4 ends the whole job itself about a second after a node's daemon
             dies, before any watchdog can fire).
  loss       either every rank ends non-zero naming the cause within LIMIT of its last progress,
             or the load completes and every rank's pre-sharded copy equals a fault-free load's.
  slow_link  the load completes (status 0 on every rank) although single waits exceed timeout_s,
             and every rank's pre-sharded copy equals a fault-free load's.

LIMIT = timeout_s + 30 s: the watchdog's own share is timeout_s + two listening rounds of
timeout_s / 4 (1..5 s) + 1 s before MPI_Abort. A rank of the cut-off node can be blocked in a call
into its dead sshfs mount (the file checks after the reads) until sshfs gives up on the storage
server (3 keepalives 5 s apart, scripts/vcluster) and only then poll and report: about 15 s more.
The rest is slack for two shared cores. The launcher
is bounded too (`vcluster mpirun --timeout`): if mpirun has not ended when every rank has, it is
killed and the output says so. Exit status 0 when the contract holds, 1 otherwise, 77 (with the
reason) where the machine cannot run a virtual cluster.
"""

import argparse
import filecmp
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import vclib  # noqa: E402

WATCHDOG = re.compile(r"error: watchdog: .*(not heard from|none made progress)")
FAILS = []


def check(cond, what):
    print(("ok:   " if cond else "FAIL: ") + what, flush=True)
    if not cond:
        FAILS.append(what)


class Watcher(threading.Thread):
    """Per rank: when its shardload process was last seen in the nodes' namespaces, and when the
    cause first appeared in its stderr file (seconds on the monotonic clock)."""

    def __init__(self, cluster, outdir, nranks):
        super().__init__(daemon=True)
        self.ns = [os.stat("/run/netns/%s%d" % (cluster.prefix, i)).st_ino for i in range(cluster.nodes)]
        self.outdir, self.nranks = outdir, nranks
        self.seen, self.gone, self.cause_at = {}, {}, {}
        self.stop = False

    def scan(self):
        alive = set()
        for pid in filter(str.isdigit, os.listdir("/proc")):
            try:
                if os.stat("/proc/%s/ns/net" % pid).st_ino not in self.ns:
                    continue
                with open("/proc/%s/comm" % pid) as f:
                    if f.read().strip() != "shardload":
                        continue
                with open("/proc/%s/environ" % pid, "rb") as f:
                    env = f.read().split(b"\0")
            except OSError:
                continue
            for kv in env:
                if kv.startswith(b"OMPI_COMM_WORLD_RANK="):
                    alive.add(int(kv.split(b"=")[1]))
        now = time.monotonic()
        for r in range(self.nranks):
            if r in alive:
                self.seen[r] = now
                self.gone.pop(r, None)
            elif r in self.seen and r not in self.gone:
                self.gone[r] = now
            if r not in self.cause_at and WATCHDOG.search(read(self.err(r))):
                self.cause_at[r] = now

    def err(self, r):
        return os.path.join(self.outdir, "r%d.err" % r)

    def run(self):
        while not self.stop:
            self.scan()
            time.sleep(0.1)


def read(path):
    try:
        with open(path, errors="replace") as f:
            return f.read()
    except OSError:
        return ""


def same_copy(ref, got):
    names = sorted(f for f in os.listdir(ref) if f.endswith(".safetensors"))
    return bool(names) and all(os.path.exists(os.path.join(got, f)) and
                               filecmp.cmp(os.path.join(ref, f), os.path.join(got, f), shallow=False) for f in names)


def reference(args, model, out):
    """A fault-free load of the same model on this machine's processes (no network)."""
    mpirun = os.path.join(vclib.REPO, "scripts", "mpirun-local")
    p = subprocess.run([mpirun, "-np", "4", args.cli, "load", model, "--tp", "4", "--quiet", "--save-sharded", out],
                       capture_output=True, text=True, timeout=300)
    if p.returncode != 0:
        raise RuntimeError("the fault-free reference load failed (%d): %s" % (p.returncode, p.stderr[-1500:]))


def run_case(case, args, export):
    limit = args.timeout_s + 30
    rate = "1gbit" if case == "slow_link" else "20mbit"
    work = os.path.join(export, "work")
    outdir = os.path.join(work, "out")
    os.makedirs(outdir)
    reference(args, os.path.join(export, "model"), os.path.join(work, "ref"))
    with vclib.Cluster(nodes=2, rate=rate, storage=export) as cl:
        if case == "slow_link":
            cl.fault("rate", "1", "10mbit")
        model = os.path.join(cl.root, "model")
        # The copies go to the local disk: writing them over a faulty link is not what is tested.
        load = [args.cli, "load", model, "--tp", "4", "--timeout-s", str(args.timeout_s),
                "--save-sharded", os.path.join(work, "got")]
        script = "%s >%s/r$OMPI_COMM_WORLD_RANK.out 2>%s/r$OMPI_COMM_WORLD_RANK.err; " \
                 "echo \"exit $?\" >>%s/r$OMPI_COMM_WORLD_RANK.err" % (
                     " ".join(shlex.quote(a) for a in load), outdir, outdir, outdir)
        env = dict(os.environ, SHARDLOAD_LOG="info")
        watcher = Watcher(cl, outdir, 4)
        watcher.start()
        result = {}
        bound = 120 if case in ("slow_link", "loss") else limit + 30
        t = threading.Thread(target=lambda: result.setdefault("r", cl.mpirun(2, ["sh", "-c", script], env=env,
                                                                             timeout=bound)))
        t0 = time.monotonic()
        t.start()
        t_fault = None
        while case != "slow_link" and t.is_alive():
            if any("transfer:" in read(watcher.err(r)) for r in range(4)):
                t_fault = time.monotonic()
                cl.fault(*{"link_down": ["link", "1", "down"], "kill": ["kill", "1"],
                           "loss": ["loss", "1", "30"]}[case])
                break
            time.sleep(0.02)
        t.join()
        rc, _, err, secs = result["r"]
        watcher.scan()
        watcher.stop = True
        since = t_fault if t_fault is not None else t0
        print("%s: fault injected %s; mpirun status %d, %.1f s after the fault%s" % (
            case, "%.1f s after the start" % (t_fault - t0) if t_fault else "at the start (link rate)", rc,
            time.monotonic() - since, " (ended by its bound: killed)" if rc in (124, 137) else ""), flush=True)
        for r in range(4):
            text = read(watcher.err(r))
            cause = next((ln for ln in text.splitlines() if WATCHDOG.search(ln)), None)
            ex = re.findall(r"^exit (\d+)$", text, re.M)
            print("  rank %d: %s; ended %s; cause %s: %s" % (
                r, "exit status %s" % ex[-1] if ex else "no exit status (killed with its shell by Open MPI)",
                "%.1f s after the fault" % (watcher.gone[r] - since) if r in watcher.gone else "?",
                "%.1f s after the fault" % (watcher.cause_at[r] - since) if r in watcher.cause_at else "-",
                cause or "-"), flush=True)
        rearmed = sum(read(watcher.err(r)).count("but a rank made progress") for r in range(4))
        print("  waits that passed timeout_s while the job still moved (watchdog waited on): %d" % rearmed)
        for line in re.findall(r"^(?:ORTE has lost.*|  Remote daemon:.*|  Local host:.*|  Message:.*)$", err, re.M):
            print("  mpirun: %s" % line.strip())
        check(t_fault is not None or case == "slow_link", "%s: the fault struck during the transfer" % case)
        completed = rc == 0 and all(re.search(r"^exit 0$", read(watcher.err(r)), re.M) for r in range(4))
        if case == "slow_link" or (case == "loss" and completed):
            check(completed, "%s: the load completed on every rank (mpirun %d) %s" % (case, rc, err[-800:] if rc else ""))
            check(same_copy(os.path.join(work, "ref"), os.path.join(work, "got")),
                  "%s: every rank's pre-sharded copy equals the fault-free load's" % case)
            return
        check(rc != 0, "%s: the job failed (mpirun status %d)" % (case, rc))
        survivors = [0, 1] if case == "kill" else [0, 1, 2, 3]
        lost_daemon = re.search(r"lost communication with a remote daemon(.|\n)*Remote daemon:.* on node %s\b" %
                                re.escape("10.213.%d.11" % cl.id), err)
        for r in survivors:
            text = read(watcher.err(r))
            check(not re.search(r"^exit 0$", text, re.M), "%s: rank %d did not end with status 0" % (case, r))
            gone = watcher.gone.get(r)
            check(gone is not None and gone - since <= limit,
                  "%s: rank %d ended within %d s of the fault" % (case, r, limit))
            named = r in watcher.cause_at and watcher.cause_at[r] - since <= limit
            if case == "kill":
                check(named or lost_daemon is not None,
                      "kill: rank %d's end has its cause named (its watchdog line, or Open MPI's lost daemon "
                      "on node 1's address)" % r)
            else:
                check(named, "%s: rank %d named the phase and the ranks not heard from within %d s" % (case, r, limit))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cli", required=True)
    ap.add_argument("--build", required=True)
    ap.add_argument("--timeout-s", type=int, default=5)
    ap.add_argument("case", choices=["link_down", "kill", "loss", "slow_link"])
    args = ap.parse_args()
    why = vclib.skip_reason()
    if why is not None:
        print("skipped: %s" % why)
        return 77
    vclib.install_signal_handlers()
    export = tempfile.mkdtemp(prefix="vcluster-faults-", dir=args.build)
    try:
        shutil.copytree(vclib.ensure_model(args.build, "24M"), os.path.join(export, "model"), copy_function=os.link)
        run_case(args.case, args, export)
    except vclib.Interrupted as e:
        check(False, "interrupted (%s); the cluster was taken down" % e)
    finally:
        shutil.rmtree(export, ignore_errors=True)
    print("faults %s: %d failure(s)" % (args.case, len(FAILS)))
    return 1 if FAILS else 0


if __name__ == "__main__":
    sys.exit(main())
