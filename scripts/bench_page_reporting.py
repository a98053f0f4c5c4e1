"""The memory state scripts/bench measures in: free page reporting paused, memory backed.

On a virtual machine with free page reporting (virtio-balloon or a hypervisor's own reporting),
the guest hands memory it has freed back to the host a few seconds later; the next write to such
a page faults on the host, which costs far more than the write itself (docs/PERFORMANCE.md §1,
and docs/PERFORMANCE.md §10). A load that keeps its bytes writes fresh memory (its parameters, or
the page cache a mapping reads into); fio, the cold ceiling, reads into one buffer it reuses. So with reporting
on, what a cold run costs depends on how long ago the previous run freed its memory, and warm
against cold, or cold against fio, measures the hypervisor rather than the loader.

Bare metal, and guests without reporting, keep memory once it is touched. The benchmark makes
this guest such a machine for its duration: it raises `page_reporting_order` above the largest
block the buddy allocator has (nothing is reported any more), touches enough memory once that
every run finds its pages backed, and puts the setting back when it ends (also on an error, an
interrupt or SIGTERM). `--keep-page-reporting` leaves the setting alone; the runs then pause
until reporting has settled, as before. Python 3 standard library only.
"""

import atexit
import os
import re
import signal
import time

PARAMS = "/sys/module/page_reporting/parameters"
ORDER = os.path.join(PARAMS, "page_reporting_order")
REPORTED_KIB = os.path.join(PARAMS, "reported_kib")
BUDDYINFO = "/proc/buddyinfo"
GIB = 1 << 30


def _read_int(path):
    try:
        with open(path) as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def _write(path, value):
    """True when the kernel took the value."""
    try:
        with open(path, "w") as f:
            f.write("%d\n" % value)
        return _read_int(path) == value
    except OSError:
        return False


def reported_kib():
    """KiB the kernel's free page reporting has handed back to the hypervisor so far, where the
    kernel exposes that count (not every kernel does), else None."""
    return _read_int(REPORTED_KIB)


def buddy_orders():
    """Number of block orders of the buddy allocator (columns of /proc/buddyinfo), or None."""
    try:
        with open(BUDDYINFO) as f:
            line = f.readline()
    except OSError:
        return None
    # "Node 0, zone      DMA  c0 c1 ... c10": after the zone's name, one count per order
    fields = line.split("zone", 1)[-1].split()[1:]
    return len(fields) if fields and all(f.isdigit() for f in fields) else None


class PageReporting:
    """Pauses free page reporting for the benchmark and restores it (see the module text)."""

    def __init__(self, log):
        self.log = log
        self.original = _read_int(ORDER)
        self.written = None         # the order written by pause() (kept after restore, for the report)
        self.in_force = False       # the written order is still the kernel's (restore() not yet called)
        self.state = "on"           # what the runs had: "paused", "limited", "off", "on", "absent",
        #                             "not permitted"
        self.warmed_bytes = 0
        self.warm_seconds = None

    def pause(self):
        """Raises page_reporting_order as far as the kernel allows; returns self.state."""
        if self.original is None:
            self.state = "absent"
            return self.state
        orders = buddy_orders() or 11
        if self.original >= orders:
            self.state = "off"      # reporting was off before the run: nothing to pause or restore
            self.log("free page reporting is off (page_reporting_order %d): left as it is" % self.original)
            return self.state
        # The largest value the kernel takes: some accept one past the largest order (nothing is
        # reported), others stop at the largest order (only blocks of that order are reported).
        for value in range(max(orders, self.original + 1), self.original, -1):
            if _write(ORDER, value):
                self.written, self.in_force = value, True
                break
        if not self.in_force:
            self.state = "not permitted"
            self.log("free page reporting stays on: page_reporting_order %d cannot be raised by this user"
                     % self.original)
            return self.state
        atexit.register(self.restore)
        for sig in (signal.SIGTERM, signal.SIGHUP):
            try:
                signal.signal(sig, self._on_signal)
            except (OSError, ValueError):
                pass
        self.state = "paused" if self.written >= orders else "limited"
        self.log("free page reporting %s: page_reporting_order %d -> %d (restored when the benchmark ends)"
                 % ("paused" if self.state == "paused" else "limited to the largest blocks",
                    self.original, self.written))
        return self.state

    def _on_signal(self, signum, _frame):
        self.restore()
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)

    def restore(self):
        if not self.in_force:
            return
        if _write(ORDER, self.original):
            self.log("free page reporting restored: page_reporting_order %d" % self.original)
        else:
            self.log("could not restore page_reporting_order to %d: write it to %s by hand"
                     % (self.original, ORDER))
        self.in_force = False

    def warm_up(self, nbytes):
        """Touches nbytes of memory once and frees it, so that later runs find it backed by the
        host (with reporting paused nothing hands it back). Bounded by the memory free now, less
        1 GiB, so that nothing in the page cache is evicted."""
        free = None
        try:
            with open("/proc/meminfo") as f:
                m = re.search(r"^MemFree:\s*(\d+) kB", f.read(), re.MULTILINE)
            free = int(m.group(1)) * 1024 if m else None
        except OSError:
            pass
        if free is not None:
            nbytes = min(nbytes, free - GIB)
        if nbytes <= 0:
            return 0
        started = time.monotonic()
        done = 0
        step = GIB
        keep = []
        while done < nbytes:
            n = min(step, nbytes - done)
            keep.append(bytearray(b"\x01") * n)   # a repeat of one byte is a memset: every page written
            done += n
        del keep
        self.warmed_bytes = done
        self.warm_seconds = time.monotonic() - started
        self.log("memory touched once: %.1f GiB in %.1f s" % (done / GIB, self.warm_seconds))
        return done

    @property
    def kept(self):
        """True when the runs had nothing handed back (reporting paused by us, or off already)."""
        return self.state in ("paused", "off")

    @property
    def paused(self):
        """True while nothing freed is handed back (the runs need not wait for it)."""
        return self.kept and (self.in_force or self.state == "off")

    def describe(self):
        """One line for the report's Machine table."""
        if self.state == "absent":
            return "not shown by this kernel (no %s)" % ORDER
        if self.state == "off":
            return "off before the run (page_reporting_order %d, past the largest block), left as it is; " \
                   "%.1f GiB touched once before the first load" % (self.original, self.warmed_bytes / GIB)
        if self.state == "not permitted":
            return "on (page_reporting_order %d; this user cannot change it): runs pause until it settles" \
                % self.original
        if self.state == "on":
            return "on (page_reporting_order %d, left alone: --keep-page-reporting): runs pause until it " \
                   "settles" % self.original
        what = "paused" if self.state == "paused" else "limited to blocks of the largest order"
        return "%s for the run (page_reporting_order %d -> %d, restored afterwards); %.1f GiB touched " \
               "once before the first load" % (what, self.original, self.written, self.warmed_bytes / GIB)
