#!/usr/bin/env python3
"""test_progress.py -- what rank 0 prints while a load runs under mpirun with stderr in a log.

A Llama-shaped model (scripts/make-fixture bench) in a temporary folder is loaded at 2 ranks
(dp=2: half of it travels by broadcast) with stdout and stderr redirected to one file:
  - `--progress always`: a first line as the load starts (allocate, 0 B), progress lines
    (cluster-wide figures, phase) and a final `done` line, however short the load;
  - default (auto): progress lines whenever the load lasted longer than a few intervals (a
    shorter load may leave the log alone; the test reads the report's time instead of assuming
    a speed);
  - `--progress never` and `--quiet`: no progress line; `--quiet` prints no summary either;
  - mpirun itself on a terminal (util-linux `script` gives it one; skipped without it): rank 0's
    stderr is a pipe to mpirun, yet the bar is drawn (carriage-return redraws of
    "[shardload 0] ..."), and no log line is printed.
SHARDLOAD_PROGRESS_INTERVAL shortens the interval between lines. Needs SL_CLI, SL_MPIRUN,
SL_SOURCE_DIR.
"""
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile

CLI = os.environ["SL_CLI"]
MPIRUN = os.environ["SL_MPIRUN"]
SRC = os.environ["SL_SOURCE_DIR"]
INTERVAL = 0.2
LINE = re.compile(r"^\[shardload 0\] progress (allocate|transfer|track): \S+ \S+ / \S+ \S+ \([0-9.]+ %\) "
                  r"cluster-wide, [0-9.]+ MB/s")
DONE = re.compile(r"^\[shardload 0\] progress done: ")


def load(tmp, model, name, extra):
    log = os.path.join(tmp, name + ".log")
    report = os.path.join(tmp, name + ".json")
    env = dict(os.environ, SHARDLOAD_PROGRESS_INTERVAL=str(INTERVAL))
    with open(log, "w") as f:
        rc = subprocess.run([MPIRUN, "-np", "2", CLI, "load", model, "--dp", "2", "--report", report] + extra,
                            stdout=f, stderr=subprocess.STDOUT, env=env, timeout=600).returncode
    text = open(log).read()
    if rc != 0:
        sys.exit("FAIL: load %s exited %d:\n%s" % (name, rc, text[-3000:]))
    lines = text.splitlines()
    with open(report) as f:
        seconds = json.load(f)["phases"]["total_seconds"]
    return ([l for l in lines if LINE.match(l)], [l for l in lines if DONE.match(l)],
            [l for l in lines if "progress" in l and l.startswith("[shardload")], seconds)


def load_on_terminal(tmp, model):
    """The load with mpirun's stdout and stderr on a pseudo-terminal: the raw bytes it wrote there."""
    typescript = os.path.join(tmp, "terminal.typescript")
    cmd = " ".join(shlex.quote(a) for a in [MPIRUN, "-np", "2", CLI, "load", model, "--dp", "2"])
    env = dict(os.environ, SHARDLOAD_PROGRESS_INTERVAL=str(INTERVAL))
    rc = subprocess.run(["script", "-qec", cmd, typescript], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                        stderr=subprocess.STDOUT, env=env, timeout=600).returncode
    with open(typescript, "rb") as f:
        return rc, f.read().decode("utf-8", "replace")


def main():
    fails = []
    with tempfile.TemporaryDirectory(prefix="sl-progress-") as tmp:
        model = os.path.join(tmp, "model")
        subprocess.run([os.path.join(SRC, "scripts", "make-fixture"), "bench", model, "--size", "128M"],
                       check=True, stdout=subprocess.DEVNULL)
        lines, done, _, _ = load(tmp, model, "always", ["--progress", "always"])
        if not lines or len(done) != 1:
            fails.append("--progress always: %d progress lines, %d done lines" % (len(lines), len(done)))
        elif not lines[0].startswith("[shardload 0] progress allocate: 0 B / "):
            fails.append("--progress always: the first line is not written as the load starts: %s" % lines[0])
        lines, done, _, seconds = load(tmp, model, "auto", [])
        if seconds > 4 * INTERVAL and not lines:
            fails.append("auto: a %.2f s load (interval %.1f s) printed no progress line" % (seconds, INTERVAL))
        if lines and len(done) != 1:
            fails.append("auto: progress lines but %d done lines" % len(done))
        print("auto: %d progress lines in %.2f s" % (len(lines), seconds))
        for name, extra in (("never", ["--progress", "never"]), ("quiet", ["--quiet"])):
            _, _, any_lines, _ = load(tmp, model, name, extra)
            if any_lines:
                fails.append("%s: progress printed: %s" % (name, any_lines[:2]))
        with open(os.path.join(tmp, "quiet.log")) as f:
            quiet = f.read()
        if "shardload: loaded" in quiet:
            fails.append("--quiet: the summary was printed: %s" % quiet[-600:])
        if shutil.which("script") is None:
            print("no `script` program: the bar on a terminal under mpirun is not checked")
        else:
            rc, raw = load_on_terminal(tmp, model)
            if rc != 0:
                fails.append("on a terminal: exit %d: %s" % (rc, raw[-2000:]))
            elif "\r[shardload 0] " not in raw or "[shardload 0] progress " in raw:
                fails.append("on a terminal under mpirun: no bar (or log lines): %r" % raw[-1500:])
    for f in fails:
        print("FAIL: " + f, file=sys.stderr)
    print("%d failure(s)" % len(fails))
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
