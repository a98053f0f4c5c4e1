"""scripts/bench_page_reporting.py pauses free page reporting for scripts/bench and always puts
it back: against stand-in files for the kernel's parameter and /proc/buddyinfo it raises the order
past the largest block (or to the largest the kernel takes, "limited"), restores the original on
restore(), at interpreter exit and on SIGTERM, and leaves a kernel without the parameter (or a
user who may not write it) alone. Standard library only."""

import os
import signal
import subprocess
import sys
import tempfile
import textwrap

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPTS = os.path.join(HERE, "..", "..", "scripts")
sys.path.insert(0, SCRIPTS)
import bench_page_reporting as bpr  # noqa: E402

BUDDY = "Node 0, zone      DMA      0      0      0      0      0      0      0      0      1      1      2\n" \
        "Node 0, zone   Normal    310    120     64     30     17     12      6      4      3      2   5000\n"


def stand_ins(folder, order):
    order_path = os.path.join(folder, "page_reporting_order")
    buddy_path = os.path.join(folder, "buddyinfo")
    with open(order_path, "w") as f:
        f.write("%d\n" % order)
    with open(buddy_path, "w") as f:
        f.write(BUDDY)
    bpr.ORDER, bpr.BUDDYINFO = order_path, buddy_path
    return order_path


def read(path):
    with open(path) as f:
        return int(f.read())


def check(cond, what):
    if not cond:
        print("FAIL: " + what)
        sys.exit(1)


def main():
    logs = []
    with tempfile.TemporaryDirectory() as tmp:
        path = stand_ins(tmp, 9)
        check(bpr.buddy_orders() == 11, "buddyinfo has 11 orders, got %r" % bpr.buddy_orders())
        pr = bpr.PageReporting(logs.append)
        check(pr.pause() == "paused" and pr.paused and pr.kept, "pause() -> paused, got %s" % pr.state)
        check(read(path) == 11, "order raised to 11 (one past the largest block), got %d" % read(path))
        check("9 -> 11" in pr.describe(), "describe names both orders: " + pr.describe())
        pr.restore()
        check(read(path) == 9 and not pr.paused, "restore() puts 9 back, got %d" % read(path))
        check(pr.kept, "after restore the runs' state is still told as kept")
        check("9 -> 11" in pr.describe(), "describe still tells what the run had: " + pr.describe())
        pr.restore()  # a second restore (at exit) writes nothing more
        check(read(path) == 9, "a second restore keeps 9")

        # A kernel that takes at most the largest order (10): only those blocks are still reported.
        stand_ins(tmp, 9)
        real_write = bpr._write
        bpr._write = lambda p, v: v <= 10 and real_write(p, v)
        pr = bpr.PageReporting(logs.append)
        check(pr.pause() == "limited" and not pr.paused and not pr.kept,
              "a kernel taking <= 10 -> limited (runs still wait), got %s" % pr.state)
        check(read(path) == 10, "order 10 written, got %d" % read(path))
        pr.restore()
        check(read(path) == 9, "limited: restored to 9")
        # A user who may not write it.
        bpr._write = lambda p, v: False
        pr = bpr.PageReporting(logs.append)
        check(pr.pause() == "not permitted" and read(path) == 9, "refused writes -> not permitted, 9 kept")
        check("cannot change it" in pr.describe(), pr.describe())
        bpr._write = real_write

        # Reporting already off (the order past the largest block): nothing written, nothing restored.
        path = stand_ins(tmp, 11)
        pr = bpr.PageReporting(logs.append)
        check(pr.pause() == "off" and pr.paused and read(path) == 11, "order 11 before -> off, kept")
        pr.restore()
        check(read(path) == 11 and "left as it is" in pr.describe(), "off: nothing restored")

        # No such parameter: nothing written, said so.
        bpr.ORDER = os.path.join(tmp, "absent")
        pr = bpr.PageReporting(logs.append)
        check(pr.pause() == "absent" and not os.path.exists(bpr.ORDER), "no parameter -> absent, nothing created")

        # Restored at exit and on SIGTERM, in a process of its own.
        for how in ("exit", "sigterm"):
            path = stand_ins(tmp, 7)
            code = textwrap.dedent("""
                import sys
                sys.path.insert(0, %r)
                import bench_page_reporting as bpr
                bpr.ORDER, bpr.BUDDYINFO = %r, %r
                pr = bpr.PageReporting(lambda m: None)
                assert pr.pause() == "paused"
                print("paused", flush=True)
                sys.stdin.readline()   # the parent closes it (exit) or sends SIGTERM first
                """) % (SCRIPTS, path, bpr.BUDDYINFO)
            proc = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                    text=True)
            check(proc.stdout.readline().strip() == "paused", "%s: the child paused" % how)
            check(read(path) == 11, "%s: paused in the child" % how)
            if how == "sigterm":
                proc.send_signal(signal.SIGTERM)
            proc.stdin.close()
            rc = proc.wait(timeout=20)
            check(read(path) == 7, "%s: restored to 7, got %d (status %d)" % (how, read(path), rc))
            if how == "sigterm":
                check(rc == -signal.SIGTERM, "SIGTERM still ends the child by the signal (status %d)" % rc)
    print("test_bench_page_reporting: paused, limited, refused, absent, restored (call, exit, SIGTERM)")


if __name__ == "__main__":
    main()
