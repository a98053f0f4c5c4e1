"""The tensor-parallel comparison of scripts/bench: shardload against the vLLM-style peer
(scripts/bench_vllm_peer.py) at tp = 1, 2, 4 (one rank per tensor-parallel rank), warm and cold, in
the same run, and the targets those runs decide. Imported by scripts/bench; Python 3 standard
library only (the peer itself runs with Debian's /usr/bin/python3, which has torch and mpi4py).
"""

import json
import os
import shutil

HERE = os.path.dirname(os.path.realpath(__file__))
PEER = os.path.join(HERE, "bench_vllm_peer.py")
PEER_PYTHON = "/usr/bin/python3"
TPS = (1, 2, 4)
MIB = 1 << 20
# The strategies the default is compared with when the page cache is warm: same (vllm) layout.
WARM_RIVALS = ("auto", "direct", "io_uring", "mmap")


def peer_missing(run):
    """None when the peer can run here, else why not."""
    if not os.path.isfile(PEER_PYTHON):
        return "%s not found (the peer needs Debian's python3 with python3-torch and python3-mpi4py)" % PEER_PYTHON
    rc, _, err, _ = run([PEER_PYTHON, "-c", "import torch, mpi4py"], timeout=120)
    if rc != 0:
        return "%s cannot import torch and mpi4py (apt-get install python3-torch python3-mpi4py): %s" % (
            PEER_PYTHON, err.strip().splitlines()[-1] if err.strip() else "status %d" % rc)
    return None


def peer_command(model, tp):
    """The peer's command line at tp (to run under an mpirun prefix)."""
    return [PEER_PYTHON, PEER, model, "--tp", str(tp)]


def peer_result(out):
    """The JSON result line the peer prints on stdout (rank 0), or None."""
    line = [ln for ln in out.splitlines() if ln.startswith("{")]
    return json.loads(line[-1]) if line else None


def reads_per_mib(res):
    """Average over ranks of read_ops / (bytes_read / MiB) of a shardload result (None if unknown)."""
    vals = [rk["read_ops"] / (rk["bytes_read"] / MIB) for rk in (res or {}).get("ranks", [])
            if rk.get("read_ops") is not None and rk.get("bytes_read")]
    return sum(vals) / len(vals) if vals else None


class PeerSection:
    """Runs the comparison through a scripts/bench Bench object (its load, settle, drop_caches)."""

    def __init__(self, bench, run, tail, log):
        self.b = bench
        self.run = run
        self.tail = tail
        self.log = log

    def peer_once(self, tp, model, verify=None):
        b = self.b
        if model == b.model:
            b.settle()
        cmd = b.mpi(tp, None) + peer_command(model, tp)
        if verify:
            cmd += ["--verify", verify]
        rc, out, err, wall = self.run(cmd)
        res = peer_result(out)
        if res is None:
            return None, "bench_vllm_peer.py at tp=%d failed (status %d): %s" % (tp, rc, self.tail(err, 4))
        res["command_wall_seconds"] = wall
        if rc != 0 and not res.get("verify_problems"):
            return None, "bench_vllm_peer.py at tp=%d: status %d: %s" % (tp, rc, self.tail(err, 4))
        return res, None

    def peer(self, tp, cold, reps):
        runs = []
        for _ in range(reps):
            if cold:
                self.b.drop_caches()
            res, error = self.peer_once(tp, self.b.model)
            if res is None:
                self.b.note(error)
                return None
            runs.append(res)
        return self.b.fold(runs, ["wall_seconds", "command_wall_seconds", "peak_rss_bytes_max"])

    def verify(self, scratch):
        """The peer's parameters against shardload's --save-sharded output of the tiny model."""
        b = self.b
        out = {}
        for tp in TPS:
            folder = os.path.join(scratch, "saved-tp%d" % tp)
            shutil.rmtree(folder, ignore_errors=True)
            cmd = b.mpi(tp, None) + [b.shardload, "load", b.tiny, "--tp", str(tp), "--quiet",
                                     "--save-sharded", folder]
            rc, _, err, _ = self.run(cmd)
            if rc != 0:
                out[str(tp)] = {"tensors": 0, "problems": ["shardload --save-sharded failed (status %d): %s"
                                                           % (rc, self.tail(err, 3))]}
                continue
            res, error = self.peer_once(tp, b.tiny, verify=folder)
            out[str(tp)] = ({"tensors": 0, "problems": [error]} if res is None else
                            {"tensors": res.get("verified_tensors", 0),
                             "problems": res.get("verify_problems", [])})
            shutil.rmtree(folder, ignore_errors=True)
        bad = [tp for tp, v in out.items() if v["problems"] or not v["tensors"]]
        if bad:
            b.note("the vLLM-style peer's parameters differ from shardload's at tp=%s: %s"
                   % (",".join(bad), "; ".join(out[bad[0]]["problems"][:3])))
        return out

    def measure(self, scratch, peer_reps):
        """Fills bench.results["vs_peer"]: {cache: {tp: {"shardload": res, "peer": res}}}."""
        b = self.b
        r = b.results
        missing = peer_missing(self.run)
        sec = {"available": missing is None, "why_not": missing, "cold_measured": b.can_drop,
               "peer_reps": peer_reps,
               "cold_why": None if b.can_drop else ("--no-cold" if b.args.no_cold
                                                    else "caches cannot be dropped: run as root")}
        r["vs_peer"] = sec
        if missing:
            b.note("vLLM-style peer not run: " + missing)
        else:
            self.log("vLLM-style peer: verifying its parameters against shardload --save-sharded (tiny model)")
            sec["verify"] = self.verify(scratch)
        for cold in ([False, True] if b.can_drop else [False]):
            key = "cold" if cold else "warm"
            sec[key] = {}
            if not cold:
                b.warm()
            for tp in TPS:
                row = {}
                if tp == 1 and b.results.get("load_1", {}).get(key, {}).get("auto"):
                    row["shardload"] = r["load_1"][key]["auto"]   # the same command, measured above
                else:
                    self.log("shardload, %d rank(s), tp=%d, %s cache" % (tp, tp, key))
                    row["shardload"] = b.load(tp, ["--tp", str(tp)], cold=cold)
                if not missing:
                    self.log("vLLM-style peer, %d rank(s), tp=%d, %s cache" % (tp, tp, key))
                    row["peer"] = self.peer(tp, cold, peer_reps)
                sec[key][str(tp)] = row


def g(d, *keys):
    for k in keys:
        if not isinstance(d, dict) or d.get(k) is None:
            return None
        d = d[k]
    return d


def targets(r):
    """The targets of the comparison, each {target, measured, met} (met None: not measured)."""
    out = []
    fio = g(r, "fio", "median")
    cold_auto = g(r, "load_1", "cold", "auto", "gbps")
    name = "default strategy (auto), 1 rank, cold >= 0.9 x fio O_DIRECT deep-queue"
    if fio and cold_auto:
        out.append({"target": name, "measured": "%.2f GB/s = %.2f x fio (%.2f GB/s)"
                    % (cold_auto, cold_auto / fio, fio), "met": cold_auto / fio >= 0.9})
    else:
        out.append({"target": name, "measured": "not measured (no fio, --no-cold, or caches cannot be dropped: run as root)",
                    "met": None})
    warm = {s: g(r, "load_1", "warm", s, "gbps") for s in WARM_RIVALS}
    best = max((s for s in warm if warm[s]), key=lambda s: warm[s], default=None)
    if warm.get("auto") and best:
        out.append({"target": "default strategy (auto), 1 rank, warm >= 0.9 x the best strategy (vllm layout)",
                    "measured": "%.2f GB/s = %.2f x %s (%.2f GB/s)" % (warm["auto"], warm["auto"] / warm[best],
                                                                       best, warm[best]),
                    "met": warm["auto"] / warm[best] >= 0.9})
    dp2 = g(r, "load_4", "tp=2 dp=2")
    if reads_per_mib(dp2) is not None:
        out.append({"target": "4 ranks tp=2 dp=2: <= 1 read per MiB read (read_ops / MiB, average over ranks)",
                    "measured": "%.2f" % reads_per_mib(dp2), "met": reads_per_mib(dp2) <= 1.0})
    sec = r.get("vs_peer") or {}
    for tp in ("2", "4"):
        w = g(sec, "warm", tp, "shardload")
        c = g(sec, "cold", tp, "shardload")
        rpm = [x for x in (reads_per_mib(w), reads_per_mib(c)) if x is not None]
        if rpm:
            out.append({"target": "tp=%s: <= 1 read per MiB read (read_ops / MiB, average over ranks)" % tp,
                        "measured": "%.2f" % max(rpm), "met": max(rpm) <= 1.0})
        amp = [x["read_amplification"] for x in (w, c) if x and x.get("read_amplification") is not None]
        if amp:
            out.append({"target": "tp=%s: read amplification 1.00" % tp, "measured": "%.2f" % max(amp),
                        "met": abs(max(amp) - 1.0) < 0.005})
        if w and c:
            out.append({"target": "tp=%s: warm never slower than cold (shardload, in process)" % tp,
                        "measured": "warm %.2f s, cold %.2f s" % (w["total_seconds"], c["total_seconds"]),
                        "met": w["total_seconds"] <= c["total_seconds"]})
        elif w:
            out.append({"target": "tp=%s: warm never slower than cold (shardload, in process)" % tp,
                        "measured": "cold not measured (%s)" % sec.get("cold_why"), "met": None})
        for key in ("warm", "cold"):
            s, p = g(sec, key, tp, "shardload"), g(sec, key, tp, "peer")
            label = "tp=%s, %s: shardload wall <= 0.5 x vLLM-style peer" % (tp, key)
            if s and p:
                out.append({"target": label, "measured": "%.2f s vs peer %.2f s = %.2f x"
                            % (s["total_seconds"], p["wall_seconds"], s["total_seconds"] / p["wall_seconds"]),
                            "met": s["total_seconds"] <= 0.5 * p["wall_seconds"]})
            elif key == "cold" and not sec.get("cold_measured"):
                out.append({"target": label, "measured": "not measured (%s)" % sec.get("cold_why"), "met": None})
            elif sec and not sec.get("available"):
                out.append({"target": label, "measured": "peer not run: %s" % sec.get("why_not"), "met": None})
    return out


def render(r, md_table, fmt, fmt_bytes, spread):
    """The markdown of the comparison ('' when it was not run)."""
    sec = r.get("vs_peer")
    if not sec:
        return ""
    parts = ["\n### Against the vLLM-style peer (tp = 1, 2, 4; one rank per tensor-parallel rank)\n",
             "*peer*: `scripts/bench_vllm_peer.py` under the same `mpirun`: every rank maps every file, "
             "copies every tensor out whole, narrows it to its slice and copies that into a preallocated "
             "parameter (see Method). Times are in process (barrier to barrier, MPI start-up and Python "
             "imports excluded); *command* is the whole `mpirun` command. *reads/MiB*: shardload's "
             "`read_ops / (bytes_read / MiB)` per rank, averaged over ranks. shardload: median of the "
             "run's repetitions; peer: %d run(s) per row (`--peer-reps`).\n" % sec.get("peer_reps", 1)]
    if not sec.get("available"):
        parts.append("Peer not run: %s.\n" % sec.get("why_not"))
    ver = sec.get("verify") or {}
    if ver:
        parts.append("Parameters of the peer against `shardload load --save-sharded` (tiny `llama` fixture, "
                     "byte for byte): " + "; ".join(
                         "tp=%s %s" % (tp, "%d tensors equal" % v["tensors"] if not v["problems"]
                                       else "**%d differences** (%s)" % (len(v["problems"]), v["problems"][0]))
                         for tp, v in sorted(ver.items())) + ".\n")
    rows = []
    for key in ("warm", "cold"):
        for tp in TPS:
            s, p = g(sec, key, str(tp), "shardload"), g(sec, key, str(tp), "peer")
            if key not in sec:
                rows.append(["%d" % tp, key, "not measured (%s)" % sec.get("cold_why")]
                            + [""] * 8)
                continue
            rpm = reads_per_mib(s)
            rows.append(["%d" % tp, key,
                         fmt(g(s, "total_seconds")), spread(g(s, "total_seconds_stats")),
                         fmt(g(p, "wall_seconds")), spread(g(p, "wall_seconds_stats")),
                         "%.2f" % (p["wall_seconds"] / s["total_seconds"]) if s and p and s["total_seconds"] else "n/a",
                         "%s / %s" % (fmt(g(s, "command_wall_seconds")), fmt(g(p, "command_wall_seconds"))),
                         fmt(rpm), fmt(g(s, "read_amplification")),
                         "%s / %s" % (fmt_bytes(g(s, "peak_rss_bytes_max")), fmt_bytes(g(p, "peak_rss_bytes_max")))])
    parts.append(md_table(["tp", "cache", "shardload s", "min-max", "peer s", "min-max", "peer ÷ shardload",
                           "command s (shardload / peer)", "reads/MiB", "read amplification",
                           "max peak RSS (shardload / peer)"], rows))
    return "\n".join(parts) + "\n"
