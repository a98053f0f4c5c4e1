"""bench_util.py -- what every part of scripts/bench shares: the runs it makes (1-rank variants,
4-rank layouts), units, formatting, running a command with a timeout, the share of the machine's
CPU that other processes used, and nested lookups in the results. Python 3 standard library only.
"""

import os
import re
import resource
import signal
import statistics
import subprocess
import sys
import time

PROG = "bench"
HERE = os.path.dirname(os.path.realpath(__file__))
REPO = os.path.dirname(HERE)
# 1-rank loads: (key, options, end to end). End to end: the transfer time includes making the
# parameter memory resident. prefault: the allocation touches it first (its time is
# allocate_seconds), so the transfer measures the read engine alone, as with memory the caller
# bound or with device memory.
VARIANTS = [
    ("auto", ["--load-strategy", "auto"], True),
    ("direct", ["--load-strategy", "direct"], True),
    ("io_uring", ["--load-strategy", "io_uring"], True),
    ("mmap", ["--load-strategy", "mmap"], True),
    ("mmap, checkpoint layout", ["--load-strategy", "mmap", "--layout", "checkpoint"], True),
    ("auto, prefault", ["--load-strategy", "auto", "--prefault"], False),
    ("direct, prefault", ["--load-strategy", "direct", "--prefault"], False),
    ("io_uring, prefault", ["--load-strategy", "io_uring", "--prefault"], False),
]
STRATEGIES = [k for k, _, _ in VARIANTS]
END_TO_END = [k for k, _, e in VARIANTS if e]
LAYOUTS = [("tp=4", ["--tp", "4"], 4), ("tp=2 dp=2", ["--tp", "2", "--dp", "2"], 2)]
WORLD = 4
CMA_VAR = "OMPI_MCA_btl_vader_single_copy_mechanism"
# The figures of a shardload result summarized over its repetitions (Bench.fold); the first decides
# which repetition is the median one.
LOAD_KEYS = ["gbps", "transfer_seconds", "total_seconds", "command_wall_seconds", "peak_rss_bytes_max"]
THP_TUNABLE = "glibc.malloc.hugetlb=1"  # glibc >= 2.35: malloc's mmap'd chunks get MADV_HUGEPAGE
CMD_TIMEOUT = 900            # seconds: no single command may run longer
GIB = 1 << 30
MIB = 1 << 20


class BenchError(Exception):
    """A failure that stops the benchmark (bad option, no build, no model)."""


def log(msg):
    print("%s: %s" % (PROG, msg), file=sys.stderr, flush=True)


def parse_size(text):
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([KMGT]?)i?B?\s*", text, re.IGNORECASE)
    if not m:
        raise BenchError("--size '%s': expected a number with an optional K/M/G/T suffix" % text)
    mult = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}[m.group(2).upper()]
    value = int(float(m.group(1)) * mult)
    if value < 64 * MIB:
        raise BenchError("--size '%s': the benchmark model must be at least 64M" % text)
    return value


def rel(path):
    """A path as the report shows it: relative to the repository when inside it, else its name."""
    path = os.path.realpath(path)
    if path == REPO or path.startswith(REPO + os.sep):
        return os.path.relpath(path, REPO)
    return os.path.basename(path)


def gb(nbytes):
    return nbytes / 1e9


def fmt_bytes(n):
    if n is None:
        return "n/a"
    for unit, scale in (("GiB", GIB), ("MiB", MIB), ("KiB", 1 << 10)):
        if abs(n) >= scale:
            return "%.2f %s" % (n / scale, unit)
    return "%d B" % n


def fmt(x, spec="%.2f"):
    return "n/a" if x is None else spec % x


def spread(stats):
    """'min-max' of a summarize() result ('' for one run)."""
    if not stats or len(stats.get("runs", [])) < 2:
        return ""
    return "%.2f-%.2f" % (stats["min"], stats["max"])


def pct(x):
    return "n/a" if x is None else "%.0f%%" % (100 * x)


def summarize(values):
    values = [v for v in values if v is not None]
    if not values:
        return None
    return {"median": statistics.median(values), "min": min(values), "max": max(values), "runs": values}


def run(cmd, env=None, timeout=CMD_TIMEOUT, discard_stdout=False):
    """Runs cmd (a list) in its own process group; returns (rc, stdout, stderr, wall seconds).
    With discard_stdout the output goes to /dev/null (as `cat FILES > /dev/null`). On timeout the
    group is killed and rc is 124."""
    t0 = time.monotonic()
    out_f = open(os.devnull, "wb") if discard_stdout else None
    try:
        p = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=out_f or subprocess.PIPE,
                             stderr=subprocess.PIPE, start_new_session=True)
    except OSError as e:
        if out_f:
            out_f.close()
        return 127, "", "cannot run %s: %s" % (cmd[0], e), 0.0
    try:
        out, err = p.communicate(timeout=timeout)
        rc = p.returncode
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        out, err = p.communicate()
        rc = 124
    wall = time.monotonic() - t0
    if out_f:
        out_f.close()
    return (rc, (out or b"").decode(errors="replace"), (err or b"").decode(errors="replace"), wall)


def tail(text, lines=6):
    return "\n".join(text.strip().splitlines()[-lines:])


def cpu_snapshot():
    """(wall, busy CPU seconds of the whole machine, CPU seconds of our finished children)."""
    busy = None
    try:
        with open("/proc/stat") as f:
            fields = [int(x) for x in f.readline().split()[1:]]
        # user nice system idle iowait irq softirq steal ...: busy = all but idle and iowait
        busy = (sum(fields[:8]) - fields[3] - fields[4]) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        pass
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    me = resource.getrusage(resource.RUSAGE_SELF)
    return (time.monotonic(), busy, ru.ru_utime + ru.ru_stime + me.ru_utime + me.ru_stime)


def foreign_cpu(start):
    """Fraction of the machine's CPU time used by other processes since the snapshot start."""
    end = cpu_snapshot()
    if start[1] is None or end[1] is None or end[0] <= start[0]:
        return None
    other = (end[1] - start[1]) - (end[2] - start[2])
    return max(0.0, other / ((end[0] - start[0]) * (os.cpu_count() or 1)))



def g(d, *keys):
    """Nested get that tolerates missing results."""
    for k in keys:
        if not isinstance(d, dict) or d.get(k) is None:
            return None
        d = d[k]
    return d
