"""bench_measure.py -- the measurements of scripts/bench (class Bench): the ceilings (cat, fio,
fill), shardload at 1 and 4 ranks, the naive baseline, the memory check, the comparison with the
vLLM-style peer (bench_peer_section.py) and the cold runs with freed memory handed back
(bench_page_reporting.py). Results and notes accumulate in the Bench object; bench_report.py
renders them. Python 3 standard library only.
"""

import json
import os
import shutil
import time

import bench_peer_section as peer_section
from bench_page_reporting import PageReporting, reported_kib
from bench_util import (CMA_VAR, GIB, HERE, LAYOUTS, LOAD_KEYS, MIB, THP_TUNABLE, VARIANTS, WORLD, BenchError,
                        cpu_snapshot, fmt_bytes, foreign_cpu, gb, log, rel, run, summarize, tail)

# Free page reporting's progress (see Bench.settle): quiet = under 64 MiB reported in 4 s.
SETTLE_STEP_S = 4.0
SETTLE_QUIET_KIB = 64 * 1024
SETTLE_MAX_S = 60.0


class Bench:
    """Runs the measurements; results and notes accumulate in self.results and self.notes."""

    def __init__(self, args, build, model, tiny, naive, scratch):
        self.args = args
        self.build = build
        self.model = model
        self.tiny = tiny
        self.naive_exe = naive
        self.scratch = scratch
        self.mpirun = os.path.join(HERE, "mpirun-local")
        self.shardload = os.path.join(build, "shardload")
        self.notes = []
        self.results = {}
        self.files = []             # (path, size) of every selected weight file
        self.file_bytes = 0
        self.can_drop = False
        self.settle_seconds = []    # how long each settle() waited
        self.reporting = PageReporting(log)
        self.fio_engine = None      # the fio engine that works here (fio())
        self.fio_runs = []          # GB/s of every fio pass, interleaved with the cold loads

    def note(self, text):
        log("note: " + text)
        self.notes.append(text)

    def list_files(self):
        rc, out, err, _ = run([self.mpirun, "-np", "1", self.naive_exe, self.model, "--list-files"])
        if rc != 0:
            raise BenchError("cannot list the weight files of %s:\n%s" % (rel(self.model), tail(err)))
        for line in out.splitlines():
            size, _, path = line.partition("\t")
            if path:
                self.files.append((path, int(size)))
        if not self.files:
            raise BenchError("no weight files found in %s" % rel(self.model))
        self.file_bytes = sum(s for _, s in self.files)

    def drop_caches(self):
        """True when the page cache could be dropped (root on Linux)."""
        os.sync()
        try:
            with open("/proc/sys/vm/drop_caches", "w") as f:
                f.write("3\n")
            return True
        except OSError:
            return False

    def warm(self):
        run(["cat"] + [p for p, _ in self.files], discard_stdout=True)

    # --- ceilings -------------------------------------------------------------------------------
    def cat(self, cold):
        gbps = []
        for _ in range(self.args.reps):
            if cold and not self.drop_caches():
                return None
            rc, _, err, wall = run(["cat"] + [p for p, _ in self.files], discard_stdout=True)
            if rc != 0:
                self.note("cat failed: %s" % tail(err, 2))
                return None
            gbps.append(gb(self.file_bytes) / wall)
        return summarize(gbps)

    def ensure_fio(self):
        if shutil.which("fio"):
            return True
        if os.geteuid() != 0:
            self.note("fio is not installed and this user cannot install it: fio ceiling skipped "
                      "(apt-get install fio)")
            return False
        log("installing fio with apt-get")
        env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
        rc, _, _, _ = run(["apt-get", "install", "-y", "-qq", "fio"], env=env, timeout=600)
        if rc != 0:
            run(["apt-get", "update", "-qq"], env=env, timeout=600)
            rc, _, _, _ = run(["apt-get", "install", "-y", "-qq", "fio"], env=env, timeout=600)
        if rc != 0 or not shutil.which("fio"):
            self.note("fio could not be installed with apt-get: fio ceiling skipped")
            return False
        return True

    def fio_once(self, engine):
        """One pass over every file; (GB/s, None) or (None, error)."""
        total_bytes = 0
        total_s = 0.0
        for path, _ in self.files:
            cmd = ["fio", "--name=seqread", "--filename=" + path, "--readonly", "--rw=read",
                   "--bs=1M", "--iodepth=32", "--ioengine=" + engine, "--direct=1",
                   "--output-format=json"]
            rc, out, err, _ = run(cmd)
            if rc != 0:
                return None, tail(err or out, 3)
            try:
                job = json.loads(out[out.index("{"):])["jobs"][0]["read"]
                nbytes = job["io_bytes"]
                bw = job["bw_bytes"]
            except (ValueError, KeyError, IndexError) as e:
                return None, "unreadable fio output (%s)" % e
            if nbytes <= 0 or bw <= 0:
                return None, "fio read nothing from %s" % rel(path)
            total_bytes += nbytes
            total_s += nbytes / bw
        return gb(total_bytes) / total_s, None

    def fio(self, reps):
        """Chooses the fio engine (io_uring, else libaio) with a first pass, then makes reps - 1
        more passes; every pass is kept in self.fio_runs. The cold loads call fio_rep() before
        each of their repetitions instead, so that fio and the loads they are compared with
        share the minutes (this virtual disk's speed drifts by tens of percent within minutes)."""
        if not self.ensure_fio():
            return
        for engine in ("io_uring", "libaio"):
            gbps, error = self.fio_once(engine)
            if gbps is None:
                self.note("fio with the %s engine failed: %s" % (engine, error))
                continue
            self.fio_engine = engine
            self.fio_runs.append(gbps)
            for _ in range(reps - 1):
                self.fio_rep()
            return

    def fio_rep(self):
        """One more fio pass with the engine fio() chose, kept in self.fio_runs."""
        if self.fio_engine is None:
            return
        gbps, error = self.fio_once(self.fio_engine)
        if gbps is None:
            self.note("fio failed: %s" % error)
        else:
            self.fio_runs.append(gbps)

    def fio_result(self):
        if not self.fio_runs:
            return None
        res = summarize(self.fio_runs)
        res["engine"] = self.fio_engine
        return res

    # --- programs under MPI ---------------------------------------------------------------------
    def mpi(self, world, env):
        """The mpirun-local prefix, exporting the variables of env (a dict, may be None)."""
        cmd = [self.mpirun]
        for name in sorted(env or {}):
            cmd += ["-x", name]
        return cmd + ["-np", str(world)]

    @staticmethod
    def env(extra):
        return dict(os.environ, **extra) if extra else None

    def naive_run(self, world, mode_args, env=None):
        if mode_args:  # read-only mode allocates no more than its buffers (touched off the clock)
            self.settle()
        cmd = self.mpi(world, env) + [self.naive_exe, self.model, "--threads", str(self.args.threads)] + mode_args
        rc, out, err, wall = run(cmd, env=self.env(env))
        if rc != 0:
            return None, "bench_naive %s failed (status %d): %s" % (" ".join(mode_args), rc, tail(err, 3))
        line = [ln for ln in out.splitlines() if ln.startswith("{")]
        if not line:
            return None, "bench_naive printed no result"
        res = json.loads(line[-1])
        res["command_wall_seconds"] = wall
        return res, None

    def naive(self, world, mode_args, cold=False, reps=None, env=None):
        runs = []
        snap = cpu_snapshot()
        for _ in range(reps or self.args.reps):
            if cold:
                self.drop_caches()
            res, error = self.naive_run(world, mode_args, env)
            if res is None:
                self.note(error)
                return None
            runs.append(res)
        # gbps: checkpoint bytes per second of wall time (at 1 rank with --keep: the fill ceiling)
        res = self.fold(runs, ["wall_seconds", "command_wall_seconds", "peak_rss_bytes_max"],
                        extra=lambda r: {"gbps": gb(r["checkpoint_bytes"]) / r["wall_seconds"]
                                         if r["wall_seconds"] > 0 else None})
        res["foreign_cpu_fraction"] = foreign_cpu(snap)
        return res

    def settle(self):
        """Waits so that memory freed before this run is handed back to the hypervisor first:
        every run starts alike. Linux free page reporting starts about 2 s after a free but hands
        back a few hundred MB per pass, so a `drop_caches` of a warm 4 GiB model, or the exit of a
        peer run, takes 15-25 s: after the fixed pause, keep waiting while the kernel's counter
        of reported memory (where it exposes one) still grows, up to SETTLE_MAX_S more."""
        pause = self.pause_seconds()
        if pause <= 0:
            return
        started = time.monotonic()
        time.sleep(pause)
        # With reporting paused nothing is handed back: the fixed pause is all there is to wait.
        before = None if self.reporting.paused else reported_kib()
        while before is not None and time.monotonic() - started < pause + SETTLE_MAX_S:
            time.sleep(SETTLE_STEP_S)
            now = reported_kib()
            if now is None or now - before < SETTLE_QUIET_KIB:
                break
            before = now
        self.settle_seconds.append(time.monotonic() - started)

    def pause_seconds(self):
        """--settle, or its default: 12 s where this guest hands freed memory back (the wait for
        it follows), 3 s where it does not or with --quick."""
        if self.args.settle is not None:
            return self.args.settle
        return 3.0 if self.args.quick or self.reporting.paused else 12.0

    def prepare_memory(self):
        """Pauses free page reporting and touches memory once (bench_page_reporting.py), unless
        --keep-page-reporting. What is touched covers the most any step here holds at once: the
        page cache of the model and the peer's copies beside its parameters."""
        if self.args.keep_page_reporting:
            return
        if self.reporting.pause() in ("paused", "limited", "off"):
            self.reporting.warm_up(3 * self.file_bytes + 2 * GIB)

    def handed_back(self):
        """With reporting paused for the run: restores it, then measures the default strategy cold
        against fio in the state a guest with reporting is in after a pause (every page freed
        before the run handed back): before each repetition the caches are dropped and the wait for
        reporting to settle precedes a fio pass; load_run waits again before the load."""
        if self.reporting.state != "paused" or not self.can_drop:
            return
        self.reporting.restore()
        log("default strategy cold against fio, memory handed back to the host (reporting on), %d pairs"
            % self.args.reps)
        main_fio, main_waits = self.fio_runs, self.settle_seconds   # the main runs' figures stay theirs
        self.fio_runs, self.settle_seconds = [], []

        def settled_fio():
            self.drop_caches()
            self.settle()
            self.fio_rep()
        snap = cpu_snapshot()
        res = self.load(1, ["--load-strategy", "auto"], cold=True, before_rep=settled_fio)
        self.results["handed_back"] = {"fio": self.fio_result(), "auto_cold": res,
                                       "foreign_cpu_fraction": foreign_cpu(snap),
                                       "pause_seconds": self.settle_seconds}
        self.fio_runs, self.settle_seconds = main_fio, main_waits

    def load_run(self, world, opts, env=None):
        if self.model != self.tiny:
            self.settle()
        report = os.path.join(self.scratch, "report.json")
        if os.path.exists(report):
            os.unlink(report)
        cmd = self.mpi(world, env) + [self.shardload, "load", self.model, "--report", report,
                                      "--threads", str(self.args.threads), "--quiet"] + opts
        rc, _, err, wall = run(cmd, env=self.env(env))
        if rc != 0 or not os.path.isfile(report):
            return None, "shardload load %s failed (status %d): %s" % (" ".join(opts), rc, tail(err, 4))
        with open(report) as f:
            rep = json.load(f)
        ph = rep.get("phases", {})
        transfer = ph.get("transfer_seconds") or 0.0
        res = {
            "command_wall_seconds": wall,
            "total_seconds": ph.get("total_seconds"),
            "transfer_seconds": transfer,
            "allocate_seconds": ph.get("allocate_seconds"),
            "bytes_mapped": sum((r.get("bytes_mapped") or 0) for r in rep.get("ranks", [])),
            "gbps": gb(rep["bytes_unique"]) / transfer if transfer > 0 else None,
            "bytes_unique": rep.get("bytes_unique"),
            "bytes_read": rep.get("bytes_read"),
            "bytes_broadcast": rep.get("bytes_broadcast"),
            "read_amplification": rep.get("read_amplification"),
            "read_amplification_with_covering": rep.get("read_amplification_with_covering"),
            "naive_read_amplification": rep.get("naive_read_amplification"),
            "staging_bytes": rep.get("staging_bytes"),
            "peak_rss_bytes_max": rep.get("peak_rss_bytes_max"),
            "ranks": [{k: r.get(k) for k in ("rank", "peak_rss_bytes", "bytes_local", "bytes_read",
                                             "bytes_read_planned", "bytes_received", "bytes_sent",
                                             "read_ops", "transfer_seconds", "broadcast_seconds")}
                      for r in rep.get("ranks", [])],
            "load_strategy": rep.get("load_strategy"),
        }
        return res, None

    def load(self, world, opts, cold=False, reps=None, env=None, before_rep=None):
        runs = []
        snap = cpu_snapshot()
        for _ in range(reps or self.args.reps):
            if before_rep:
                before_rep()
            if cold:
                self.drop_caches()
            res, error = self.load_run(world, opts, env)
            if res is None:
                self.note(error)
                return None
            runs.append(res)
        res = self.fold(runs, LOAD_KEYS)
        res["foreign_cpu_fraction"] = foreign_cpu(snap)
        return res

    def load_rotated(self, world, variants, cold=False, before_rep=None):
        """The same as load() for each (name, options) of variants, but repetition after
        repetition, each starting one variant further: a slow drift of the machine, or what one
        run leaves behind for the next, falls on every variant alike. {name: result or None}."""
        runs = {name: [] for name, _ in variants}
        failed = set()
        snap = cpu_snapshot()
        for rep in range(self.args.reps):
            if before_rep:
                before_rep()
            for k in range(len(variants)):
                name, opts = variants[(rep + k) % len(variants)]
                if name in failed:
                    continue
                if cold:
                    self.drop_caches()
                res, error = self.load_run(world, opts)
                if res is None:
                    self.note(error)
                    failed.add(name)
                    continue
                runs[name].append(res)
        foreign = foreign_cpu(snap)
        out = {}
        for name, _ in variants:
            if name in failed:
                out[name] = None
                continue
            out[name] = self.fold(runs[name], LOAD_KEYS)
            out[name]["foreign_cpu_fraction"] = foreign
        return out

    @staticmethod
    def fold(runs, keys, extra=None):
        """Median run: the fields of the run with the median of keys[0]; every key summarized."""
        if extra:
            for r in runs:
                r.update(extra(r))
        order = sorted(runs, key=lambda r: (r.get(keys[0]) is None, r.get(keys[0]) or 0))
        mid = dict(order[(len(order) - 1) // 2])
        for k in keys + (["gbps"] if extra else []):
            mid[k + "_stats"] = summarize([r.get(k) for r in runs])
            mid[k] = mid[k + "_stats"]["median"] if mid[k + "_stats"] else None
        mid["reps"] = len(runs)
        return mid

    # --- the whole benchmark --------------------------------------------------------------------
    def measure(self):
        a = self.args
        r = self.results
        snap = cpu_snapshot()
        self.list_files()
        log("model: %d weight files, %s" % (len(self.files), fmt_bytes(self.file_bytes)))
        self.prepare_memory()
        self.warm()
        log("ceiling: cat, warm cache")
        r["cat_warm"] = self.cat(cold=False)
        log("ceiling: fill (bench_naive --keep, 1 rank, warm cache)")
        self.warm()
        r["fill_warm"] = self.naive(1, ["--keep"])
        log("ceiling: fill with transparent huge pages (%s)" % THP_TUNABLE)
        r["fill_warm_thp"] = self.naive(1, ["--keep"], env={"GLIBC_TUNABLES": THP_TUNABLE})
        self.can_drop = not a.no_cold and self.drop_caches()
        if not a.no_cold and not self.can_drop:
            self.note("cold cache not measurable here (cannot write /proc/sys/vm/drop_caches: "
                      "run as root)")
        # fio: one pass here (the engine); with the cold loads, one more before each repetition.
        log("ceiling: fio O_DIRECT")
        self.fio(1 if self.can_drop else a.reps)
        r["fio"] = self.fio_result()
        if self.can_drop:
            log("ceiling: cat, cold cache")
            r["cat_cold"] = self.cat(cold=True)
        r["load_1"] = {}
        for cold in ([False, True] if self.can_drop else [False]):
            key = "cold" if cold else "warm"
            r["load_1"][key] = {}
            if not cold:
                self.warm()
            log("shardload, 1 rank, %s cache: %s, in rotation%s" % (key, ", ".join(s for s, _, _ in VARIANTS),
                                                                   ", a fio pass before each" if cold else ""))
            r["load_1"][key] = self.load_rotated(1, [(s, opts) for s, opts, _ in VARIANTS], cold=cold,
                                                 before_rep=self.fio_rep if cold else None)
            r["fio"] = self.fio_result()
        self.warm()
        r["load_4"] = {}
        r["naive_4"] = {}
        log("naive baseline, %d ranks, read only" % WORLD)
        r["naive_4"]["read"] = self.naive(WORLD, [])
        for name, opts, tp in LAYOUTS:
            log("shardload, %d ranks, %s" % (WORLD, name))
            r["load_4"][name] = self.load(WORLD, opts)
            log("naive baseline, %d ranks, slice 1/%d kept" % (WORLD, tp))
            # One run only: the slowest measurement, and a second view of the baseline.
            # Huge pages for the kept slices, as shardload's host parameters have them.
            r["naive_4"]["slice %d" % tp] = self.naive(WORLD, ["--slice", str(tp)], reps=1,
                                                       env={"GLIBC_TUNABLES": THP_TUNABLE})
        # scripts/mpirun-local disables Open MPI's single-copy transfers between processes (CMA);
        # one run with them shows what the broadcast-heavy layout gains where they work.
        name, opts, _ = LAYOUTS[1]
        log("shardload, %d ranks, %s, Open MPI single copy via CMA" % (WORLD, name))
        r["load_4_cma"] = {name: self.load(WORLD, opts, reps=1, env={CMA_VAR: "cma"})}
        log("shardload, %d ranks, tp=4, mmap strategy" % WORLD)
        r["load_4_mmap"] = {"tp=4": self.load(WORLD, ["--tp", "4", "--load-strategy", "mmap"])}
        self.vs_peer()
        self.memory()
        self.handed_back()
        self.finish(snap)

    def vs_peer(self):
        section = peer_section.PeerSection(self, run, tail, log)
        section.measure(self.scratch, self.args.peer_reps or 1)

    def measure_peer_only(self):
        """--peer-only: what the targets against the vLLM-style peer need, and nothing else."""
        a = self.args
        r = self.results
        snap = cpu_snapshot()
        self.list_files()
        log("model: %d weight files, %s" % (len(self.files), fmt_bytes(self.file_bytes)))
        self.prepare_memory()
        self.can_drop = not a.no_cold and self.drop_caches()
        if not a.no_cold and not self.can_drop:
            self.note("cold cache not measurable here (cannot write /proc/sys/vm/drop_caches: "
                      "run as root)")
        log("ceiling: fio O_DIRECT")
        self.fio(1 if self.can_drop else a.reps)
        r["fio"] = self.fio_result()
        r["load_1"] = {"warm": {}}
        self.warm()
        rivals = [(s, opts) for s, opts, _ in VARIANTS if s in peer_section.WARM_RIVALS]
        log("shardload, 1 rank, warm cache: %s, in rotation" % ", ".join(s for s, _ in rivals))
        r["load_1"]["warm"] = self.load_rotated(1, rivals)
        if self.can_drop:
            log("shardload, 1 rank, auto, cold cache, a fio pass before each")
            r["load_1"]["cold"] = {"auto": self.load(1, ["--load-strategy", "auto"], cold=True,
                                                     before_rep=self.fio_rep)}
            r["fio"] = self.fio_result()
        self.vs_peer()
        self.memory()
        self.handed_back()
        self.finish(snap)

    def finish(self, snap):
        r = self.results
        r["foreign_cpu_fraction"] = foreign_cpu(snap)
        if r["foreign_cpu_fraction"] is not None and r["foreign_cpu_fraction"] > 0.05:
            self.note("other processes used %.0f%% of the machine's CPU time during this run (measured "
                      "from /proc/stat minus the benchmark's own processes): times are pessimistic and "
                      "noisy; rerun on a quiet machine for reference numbers"
                      % (100 * r["foreign_cpu_fraction"]))

    def memory(self):
        r = self.results
        model_bytes = self.file_bytes
        cap = min(64 * MIB, model_bytes // 10) // MIB * MIB
        cap = max(cap, MIB)
        name, opts, _ = LAYOUTS[1]
        log("memory: baseline (tiny model), 1 and %d ranks" % WORLD)
        saved = self.model
        self.model = self.tiny
        # The smallest staging cap: the bound adds the cap itself, so the baseline must not hold
        # staging (4 MiB slots are huge pages: a tiny load would touch 2 MiB of each).
        small = ["--staging-bytes", str(MIB)]
        base1 = self.load(1, small, reps=1)
        base4 = self.load(WORLD, opts + small, reps=1)
        self.model = saved
        r["rss_baseline"] = {"1": base1["peak_rss_bytes_max"] if base1 else None,
                             str(WORLD): base4["peak_rss_bytes_max"] if base4 else None}
        log("memory: %d ranks, %s, staging cap %s" % (WORLD, name, fmt_bytes(cap)))
        res = self.load(WORLD, opts + ["--staging-bytes", str(cap)], reps=1)
        r["memory"] = None
        if res is None:
            return
        base = r["rss_baseline"][str(WORLD)] or 0
        worst = None
        for rk in res["ranks"]:
            bound = rk["bytes_local"] + res["staging_bytes"] + base
            margin = bound - rk["peak_rss_bytes"]
            if worst is None or margin < worst["margin_bytes"]:
                worst = {"rank": rk["rank"], "peak_rss_bytes": rk["peak_rss_bytes"],
                         "bytes_local": rk["bytes_local"], "bound_bytes": bound, "margin_bytes": margin}
        r["memory"] = {"layout": name, "world": WORLD, "staging_bytes": res["staging_bytes"],
                       "model_bytes": model_bytes, "model_over_cap": model_bytes / res["staging_bytes"],
                       "baseline_bytes": base, "peak_rss_bytes_max": res["peak_rss_bytes_max"],
                       "worst_rank": worst, "within": worst["margin_bytes"] >= 0,
                       "total_seconds": res["total_seconds"], "ranks": res["ranks"]}

