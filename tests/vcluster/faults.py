#!/usr/bin/env python3
"""faults.py -- faults between nodes of a virtual cluster during a load (NOT in ctest yet).

Usage: SL_CLI=build/shardload SL_BUILD_DIR=build tests/vcluster/faults.py
           [--timeout-s 20] [--grace 10] [--rate 20mbit] [SCENARIO ...]
       SCENARIO: link_down, kill, loss (default: all three)

Needs the library's load watchdog (configuration key `timeout_s`, CLI `--timeout-s`): without it
the script says so and exits 77 (a cut-off rank would wait forever, see docs/TESTING.md).

Each scenario brings up 2 nodes x 2 ranks (links at --rate, the 24 MB model served over sshfs),
first loads it once without a fault (tp=4, --save-sharded: the expected bytes), then loads it again
and injects the fault on node 1 two seconds in:

  link_down  node 1's link goes down (`vcluster link 1 down`) and stays down: nodes cannot talk.
  kill       node 1's processes are killed (`vcluster kill 1`: its MPI daemon and ranks).
  loss       30 % of node 1's outgoing packets are dropped (`vcluster loss 1 30`, nftables).

Expected (the load watchdog's contract): every surviving rank (all four for link_down and loss;
ranks 0 and 1 for kill) exits non-zero and its stderr names the cause (a line "error:" with
timeout / timed out / watchdog / lost / connection / peer / unreachable), no later than
timeout_s + grace seconds after the fault; mpirun ends by then too. For loss the load may also
succeed, if it finishes within timeout_s, and its pre-sharded copy must then equal the fault-free
one. Ranks' output is captured per rank by Open MPI (--output-filename, written on the rank's own
node), so a rank cut off from mpirun still leaves its message. Exit status 0 when every scenario met
the contract, 1 otherwise.
"""

import argparse
import filecmp
import glob
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import vclib  # noqa: E402

CAUSE = re.compile(r"error.*(timeout|timed out|watchdog|lost|connection|peer|unreachable|no progress)",
                   re.IGNORECASE)
FAILS = []


def check(cond, what):
    print(("ok:   " if cond else "FAIL: ") + what, flush=True)
    if not cond:
        FAILS.append(what)


def rank_outputs(folder):
    """{rank: (stderr text, mtime)} from mpirun --output-filename FOLDER."""
    out = {}
    for path in glob.glob(os.path.join(folder, "*", "rank.*", "stderr")):
        r = int(path.split("rank.")[-1].split(os.sep)[0])
        with open(path, errors="replace") as f:
            out[r] = (f.read(), os.path.getmtime(path))
    return out


def scenario(name, args, cli, export):
    with vclib.Cluster(nodes=2, rate=args.rate, storage=export) as cl:
        model = os.path.join(cl.root, "model")
        work = os.path.join(export, "work-" + name)
        os.makedirs(work)
        base = ["load", model, "--tp", "4", "--timeout-s", str(args.timeout_s)]
        rc, _, err, secs = cl.mpirun(2, [cli] + base + ["--quiet", "--save-sharded", os.path.join(cl.root, "work-" + name, "ref")],
                                     timeout=300)
        check(rc == 0, "%s: fault-free load (rc %d, %.1f s) %s" % (name, rc, secs, err[-1500:] if rc else ""))
        outdir = os.path.join(work, "out")
        argv = ["--output-filename", outdir, cli] + base + ["--save-sharded", os.path.join(cl.root, "work-" + name, "got")]
        limit = args.timeout_s + args.grace
        result = {}

        def run():
            result["r"] = cl.mpirun(2, argv, timeout=limit + 60)

        t = threading.Thread(target=run)
        t.start()
        time.sleep(2)
        t_fault = time.time()
        if name == "link_down":
            cl.fault("link", "1", "down")
        elif name == "kill":
            cl.fault("kill", "1")
        elif name == "loss":
            cl.fault("loss", "1", "30")
        t.join()
        rc, out, err, secs = result["r"]
        ended = time.time() - t_fault
        check(ended <= limit + 5, "%s: mpirun ended %.1f s after the fault (limit timeout_s + grace = %d s)" % (name, ended, limit))
        outs = rank_outputs(outdir)
        survivors = [0, 1] if name == "kill" else [0, 1, 2, 3]
        if name == "loss" and rc == 0:
            same = all(filecmp.cmp(os.path.join(work, "ref", f), os.path.join(work, "got", f), shallow=False)
                       for f in os.listdir(os.path.join(work, "ref")) if f.endswith(".safetensors"))
            check(same, "loss: the load completed despite 30 %% loss, byte-identical to the fault-free copy")
        else:
            check(rc != 0, "%s: the job failed (rc %d)" % (name, rc))
            for r in survivors:
                text, mtime = outs.get(r, ("", 0))
                line = next((ln for ln in text.splitlines() if CAUSE.search(ln)), None)
                check(line is not None, "%s: rank %d named the cause: %s" % (name, r, line or repr(text[-300:])))
                if line is not None:
                    check(mtime - t_fault <= limit, "%s: rank %d reported %.1f s after the fault" % (name, r, mtime - t_fault))
        if name == "link_down":
            cl.fault("link", "1", "up")
        if name == "loss":
            cl.fault("loss", "1", "off")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--timeout-s", type=int, default=20)
    ap.add_argument("--grace", type=int, default=10)
    ap.add_argument("--rate", default="20mbit")
    ap.add_argument("scenarios", nargs="*", default=["link_down", "kill", "loss"])
    args = ap.parse_args()
    cli = os.environ.get("SL_CLI", os.path.join(vclib.REPO, "build", "shardload"))
    build = os.environ.get("SL_BUILD_DIR", os.path.dirname(cli))
    why = vclib.skip_reason()
    if why is not None:
        print("skipped: %s" % why)
        return 77
    helptext = subprocess.run([cli, "load", "--help"], capture_output=True, text=True)
    if "timeout-s" not in helptext.stdout + helptext.stderr:
        print("skipped: the library has no load watchdog yet (configuration key timeout_s); "
              "without it a rank cut off from the others waits forever")
        return 77
    vclib.install_signal_handlers()
    export = tempfile.mkdtemp(prefix="vcluster-faults-", dir=build)
    try:
        shutil.copytree(vclib.ensure_model(build, "24M"), os.path.join(export, "model"), copy_function=os.link)
        for s in args.scenarios:
            scenario(s, args, cli, export)
    except vclib.Interrupted as e:
        check(False, "interrupted (%s); the cluster was taken down" % e)
    finally:
        shutil.rmtree(export, ignore_errors=True)
    print("faults: %d failure(s)" % len(FAILS))
    return 1 if FAILS else 0


if __name__ == "__main__":
    sys.exit(main())
