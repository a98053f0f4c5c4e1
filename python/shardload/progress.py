"""Progress of a load as a Python callable: Loader(..., progress=fn) or progress=True.

fn(bytes_done, bytes_total) is called by the C library (sl_loader_set_progress) from a thread of
its own, at most 4 times a second, and once more with bytes_done == bytes_total at the end. On
rank 0 the figures are the job's, cluster-wide (an estimate from rank 0's own progress, see
docs/REPORT.md), on the other ranks the rank's own bytes. progress=True: on rank 0 a tqdm bar
when tqdm can be imported, else a line on stderr every few seconds; nothing on the other ranks.
Sizes are written as the CLI writes them (KiB, MiB, GiB: powers of 1024), rates in MB/s.
An exception raised by fn is kept and raised by load() once the load has finished.
"""

import ctypes
import sys
import threading
import time

CALLBACK = ctypes.CFUNCTYPE(None, ctypes.c_uint64, ctypes.c_uint64, ctypes.c_void_p)


def _size(n):
    """A byte count as the C library and the CLI write it (src/base/bytes_fmt.c): binary units,
    "123 B", "992.00 MiB"; rates stay in MB/s (10^6 bytes per second), as there."""
    units = ("B", "KiB", "MiB", "GiB", "TiB", "PiB")
    v, u = float(n), 0
    while v >= 1024.0 and u < len(units) - 1:
        v /= 1024.0
        u += 1
    return "%d B" % n if u == 0 else "%.2f %s" % (v, units[u])


class LineReporter:
    """A line on stderr every `interval` seconds and at the end (tqdm absent)."""

    def __init__(self, interval=5.0, stream=None):
        self.interval = interval
        self.stream = stream
        self.t0 = time.monotonic()
        self.last = self.t0

    def __call__(self, done, total):
        now = time.monotonic()
        if done < total and now - self.last < self.interval:
            return
        self.last = now
        rate = done / (now - self.t0) if now > self.t0 else 0.0
        pct = 100.0 * done / total if total else 100.0
        print("shardload: %s / %s (%.1f %%), %.1f MB/s" % (_size(done), _size(total), pct, rate / 1e6),
              file=self.stream or sys.stderr, flush=True)


class TqdmReporter:
    """A tqdm bar in bytes."""

    def __init__(self, tqdm_cls):
        self.tqdm_cls = tqdm_cls
        self.bar = None

    def __call__(self, done, total):
        if self.bar is None:
            # KiB, MiB, GiB as the CLI writes sizes (tqdm's own default is powers of 1000)
            self.bar = self.tqdm_cls(total=total, unit="iB", unit_scale=True, unit_divisor=1024, desc="shardload")
        self.bar.update(done - self.bar.n)
        if done >= total:
            self.bar.close()


def default_reporter(rank):
    """progress=True: what rank `rank` shows (None: nothing)."""
    if rank != 0:
        return None
    try:
        from tqdm import tqdm
    except ImportError:
        return LineReporter()
    return TqdmReporter(tqdm)


class Forwarder:
    """Keeps the ctypes callback alive for the loader's lifetime and any exception of fn."""

    def __init__(self, fn):
        self.fn = fn
        self.error = None
        self.lock = threading.Lock()
        self.c_callback = CALLBACK(self._call)

    def _call(self, done, total, _user):
        with self.lock:
            if self.error is not None:
                return
            try:
                self.fn(int(done), int(total))
            except BaseException as e:  # noqa: B902 -- raised again by load()
                self.error = e

    def raise_pending(self):
        e, self.error = self.error, None
        if e is not None:
            raise e
