"""bench_setup.py -- the machine, the build and the model of scripts/bench: what the report's
Machine table says, the build scripts/setup makes, the naive baseline compiled against it, and the
benchmark model generated once with make-fixture. Python 3 standard library only.
"""

import datetime
import os
import platform
import re
import shutil

from bench_util import HERE, REPO, BenchError, fmt_bytes, log, rel, run, tail

STAMP = ".bench-stamp"


def first_line(cmd):
    rc, out, _, _ = run(cmd, timeout=30)
    return out.strip().splitlines()[0] if rc == 0 and out.strip() else None


def machine_info(model_dir):
    info = {"date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
            "kernel": platform.release(), "cores": os.cpu_count()}
    try:
        with open("/proc/cpuinfo") as f:
            m = re.search(r"^model name\s*:\s*(.*)$", f.read(), re.MULTILINE)
        info["cpu"] = m.group(1).strip() if m else platform.processor()
    except OSError:
        info["cpu"] = platform.processor()
    try:
        with open("/proc/meminfo") as f:
            m = re.search(r"^MemTotal:\s*(\d+) kB", f.read(), re.MULTILINE)
        info["ram_bytes"] = int(m.group(1)) * 1024 if m else None
    except OSError:
        info["ram_bytes"] = None
    rc, out, _, _ = run(["df", "-PT", "-B1", model_dir], timeout=30)
    if rc == 0 and len(out.splitlines()) >= 2:
        f = out.splitlines()[1].split()
        info["filesystem"] = {"type": f[1], "size_bytes": int(f[2]), "available_bytes": int(f[4])}
        rc2, out2, _, _ = run(["lsblk", "-dn", "-o", "NAME,SIZE,ROTA,TYPE,MODEL", f[0]], timeout=30)
        if rc2 == 0 and out2.strip():
            info["block_device"] = " ".join(out2.split())
    virt = first_line(["systemd-detect-virt"])
    if virt is None or virt == "none":
        try:
            with open("/proc/cpuinfo") as f:
                virt = "virtual machine (hypervisor flag)" if " hypervisor" in f.read() else "none"
        except OSError:
            virt = None
    rc, out, _, _ = run(["dmesg"], timeout=30)
    m = re.search(r"Hypervisor detected: (\S+)", out) if rc == 0 else None
    if m:
        virt = "%s (hypervisor %s)" % (virt or "virtual machine", m.group(1))
    info["virtualization"] = virt
    try:
        with open("/sys/kernel/mm/transparent_hugepage/enabled") as f:
            info["transparent_hugepage"] = f.read().strip()
    except OSError:
        pass
    info["mpi"] = first_line(["mpirun", "--version"])
    info["shardload_commit"] = first_line(["git", "-C", REPO, "rev-parse", "--short", "HEAD"])
    return info


def ensure_build(build, explicit):
    """Runs scripts/setup unless --build names an existing build; returns the absolute folder."""
    build = os.path.abspath(os.path.join(REPO, build))
    have = (os.path.isfile(os.path.join(build, "shardload"))
            and os.path.isfile(os.path.join(build, "lib", "libshardload.so")))
    if explicit and have:
        log("using the existing build in %s" % rel(build))
        return build
    log("building with scripts/setup into %s" % rel(build))
    env = dict(os.environ, SL_BUILD_DIR=build)
    rc, _, err, _ = run([os.path.join(HERE, "setup")], env=env, timeout=3600)
    if rc != 0:
        raise BenchError("scripts/setup failed (status %d):\n%s" % (rc, tail(err, 20)))
    if not os.path.isfile(os.path.join(build, "shardload")):
        raise BenchError("scripts/setup succeeded but %s has no shardload binary" % rel(build))
    return build


def build_naive(build):
    """Compiles scripts/bench_naive.c with mpicc against the built library."""
    exe = os.path.join(build, "bench_naive")
    src = os.path.join(HERE, "bench_naive.c")
    lib_dir = os.path.join(build, "lib")
    lib = os.path.join(lib_dir, "libshardload.so")
    if (os.path.isfile(exe) and os.path.getmtime(exe) >= os.path.getmtime(src)
            and os.path.getmtime(exe) >= os.path.getmtime(lib)):
        return exe
    cmd = ["mpicc", "-O2", "-std=c11", "-I" + os.path.join(REPO, "include"),
           "-I" + os.path.join(build, "include"), src, "-L" + lib_dir,
           "-lshardload", "-Wl,-rpath," + lib_dir, "-lpthread", "-o", exe]
    rc, _, err, _ = run(cmd, timeout=300)
    if rc != 0:
        raise BenchError("cannot compile scripts/bench_naive.c:\n%s" % tail(err, 20))
    return exe


def ensure_model(path, size_text, size_bytes, extra=None):
    """Generates a model with make-fixture once; a stamp file marks a complete one."""
    stamp = os.path.join(path, STAMP)
    want = "%s %s" % (size_text, " ".join(extra or []))
    if os.path.isfile(stamp):
        with open(stamp) as f:
            if f.read().strip() == want.strip():
                log("reusing the model in %s" % rel(path))
                return
    os.makedirs(path, exist_ok=True)
    if size_bytes is not None:
        st = shutil.disk_usage(path)
        if st.free < size_bytes * 1.1:
            raise BenchError("not enough disk space for a %s model in %s (%s free)"
                             % (size_text, rel(path), fmt_bytes(st.free)))
    cmd = [os.path.join(HERE, "make-fixture")] + (extra or ["bench", path, "--size", size_text])
    log("generating the model: %s" % " ".join(rel(c) if os.sep in c else c for c in cmd))
    rc, _, err, wall = run(cmd, timeout=3600)
    if rc != 0:
        raise BenchError("make-fixture failed (status %d):\n%s" % (rc, tail(err)))
    with open(stamp, "w") as f:
        f.write(want.strip() + "\n")
    log("model written in %.1f s" % wall)

