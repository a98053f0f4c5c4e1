#!/usr/bin/env python3
"""bench_refit_job.py -- the MPI job of scripts/bench-refit: one weight-sync step, timed, three ways.

Usage (under mpirun, every rank): bench_refit_job.py --model DIR --trainers T --tp N --dp N
    --reps K --scratch DIR --out FILE [--network-gbps R] [--bucket-bytes B]

Ranks [0, T) are trainers, each holding FSDP's block of rows (torch.chunk's cut) of every checkpoint
tensor of a version, in the checkpoint's BF16, every element of version v's blocks the same bits
(0x3F80 + v), so that each receiver can check every byte it got. The other ranks are receivers, which
load the model at tp x dp once (shardload, not timed). Each repetition times, from a barrier of
every rank to the next, in alternating order:
  refit  the trainers shardload.publish their blocks and the receivers Loader.refit (the library's
         plan, made at the first refit and reused after; each byte across each node's link once);
  bcast  baseline (a), as vLLM's NCCL weight transfer and OpenRLHF do it: per tensor, the trainers
         gather their blocks on trainer 0 (MPI_Gatherv), which broadcasts the full tensor to every
         receiver (MPI_Bcast over trainer 0 and the receivers: Open MPI's own algorithm). The
         receivers keep the full tensors: taking their slices out is not timed;
  save   baseline (b): the same gather on trainer 0, which writes the whole checkpoint into
         --scratch (a shared volume) as one safetensors file, then the receivers reload it in
         place (Loader.reload: shardload's own storage load, each byte read once).
After each, every receiver checks that every element it holds (refit, save: its parameters; bcast:
every full tensor received) is the version's (or a padded vocabulary's zero rows). The first rank of each node reads the bytes into
and out of its node's link (eth0 of its network namespace, /proc/net/dev) around each case.
Rank 0 writes FILE (JSON): the load, and per case the list of {seconds, link: {node: [in, out]},
version} (refit: the report's planned, planning and transfer seconds, bytes moved and relayed, its
predicted seconds and bytes into each node's link too).
Benchmarks are not tests: nothing here asserts a time.
"""

import argparse
import json
import os
import shutil
import socket
import struct
import sys
import time

import numpy as np
import torch
from mpi4py import MPI

import shardload

BF16_BASE = 0x3F80


def parse_args():
    ap = argparse.ArgumentParser(prog="bench_refit_job.py")
    ap.add_argument("--model", required=True)
    ap.add_argument("--trainers", type=int, default=2)
    ap.add_argument("--tp", type=int, default=1)
    ap.add_argument("--dp", type=int, default=1)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--scratch", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--network-gbps", type=float, default=0.0)
    ap.add_argument("--bucket-bytes", type=int, default=0)
    return ap.parse_args()


def headers(folder):
    """{name: (dtype, shape)} of every tensor of the checkpoint, in name order."""
    out = {}
    for f in sorted(os.listdir(folder)):
        if f.endswith(".safetensors"):
            with open(os.path.join(folder, f), "rb") as fh:
                (n,) = struct.unpack("<Q", fh.read(8))
                for name, info in json.loads(fh.read(n)).items():
                    if name != "__metadata__":
                        out[name] = (info["dtype"], [int(x) for x in info["shape"]])
    return dict(sorted(out.items()))


def link_counters():
    """(bytes in, bytes out) of this network namespace's eth0, or None (no such interface)."""
    try:
        with open("/proc/net/dev") as f:
            for line in f:
                name, _, rest = line.partition(":")
                if name.strip() == "eth0":
                    v = rest.split()
                    return int(v[0]), int(v[8])
    except OSError:
        pass
    return None


class Job:
    def __init__(self, a):
        self.a = a
        self.world = MPI.COMM_WORLD
        self.rank = self.world.Get_rank()
        self.trainer = self.rank < a.trainers
        self.side = self.world.Split(0 if self.trainer else 1, self.rank)
        names = self.world.allgather(socket.gethostname())
        order = list(dict.fromkeys(names))
        self.node_of = [order.index(n) for n in names]
        self.leader = names.index(names[self.rank]) == self.rank
        self.tensors = headers(a.model)
        if any(d != "BF16" for d, _ in self.tensors.values()):
            raise SystemExit("bench_refit_job: the model must be BF16 throughout")
        # baseline (a)'s communicator: trainer 0 (its root) and the receivers
        self.bcast = self.world.Split(0 if self.rank == 0 or not self.trainer else MPI.UNDEFINED, self.rank)
        self.config = {"timeout_s": 600}
        if a.network_gbps > 0:
            self.config["network_gbps"] = a.network_gbps
        if a.bucket_bytes > 0:
            self.config["bucket_bytes"] = a.bucket_bytes
        self.loader = self.publisher = None
        self.blocks = {}

    # the two sides' state --------------------------------------------------------------------------

    def load(self):
        t0 = time.monotonic()
        if not self.trainer:
            self.loader = shardload.Loader(self.a.model, self.side, tp=self.a.tp, dp=self.a.dp, quiet=True,
                                           **self.config)
            self.loader.load()
        else:
            self.publisher = shardload.Publisher(**self.config)
            for name, (_, shape) in self.tensors.items():
                offsets, extent = shardload.fsdp_block(shape, self.rank, self.a.trainers)
                self.blocks[name] = (torch.empty(extent, dtype=torch.bfloat16), offsets)
        self.world.Barrier()
        return time.monotonic() - t0

    def fill(self, v):
        for t, _ in self.blocks.values():
            t.view(torch.int16).fill_(BF16_BASE + v)

    def receiver_ok(self, tensors, v):
        """Every element is the version's, or 0 (the rows a padded vocabulary adds, which no
        checkpoint byte fills: the load left them zero)."""
        want = BF16_BASE + v
        return all(bool(((t.view(torch.int16) == want) | (t.view(torch.int16) == 0)).all())
                   for t in tensors if t.numel())

    # the cases ------------------------------------------------------------------------------------

    def refit(self, v):
        if self.trainer:
            report = self.publisher.publish(self.blocks, version=v, comm=self.world)
            ok = None
        else:
            report = self.loader.refit(comm=self.world, version=v)
            ok = lambda: self.receiver_ok(self.loader.params().values(), v)  # noqa: E731
        keys = ("planned", "planning_seconds", "bytes_transferred", "bytes_relayed", "transfer_seconds",
                "total_seconds")
        out = {k: report.get(k) for k in keys}
        out["predicted_seconds"] = report.get("prediction", {}).get("predicted_seconds")
        out["predicted_network_in"] = {str(n["node"]): n["bytes_network_in"] for n in report.get("nodes", [])}
        return ok, out

    def gathered(self):
        """Yields (name, full tensor bytes on trainer 0 or None) tensor by tensor (trainers only)."""
        tside = self.side
        for name, (_, shape) in self.tensors.items():
            block = self.blocks[name][0].contiguous().view(torch.int16).numpy().view(np.uint8).reshape(-1)
            counts = tside.gather(block.size, root=0)
            full = None
            if tside.Get_rank() == 0:
                full = np.empty(sum(counts), dtype=np.uint8)
                displs = np.concatenate([[0], np.cumsum(counts)[:-1]]).astype(int).tolist()
                tside.Gatherv(block, [full, counts, displs, MPI.BYTE], root=0)
            else:
                tside.Gatherv(block, None, root=0)
            yield name, full

    def baseline_bcast(self, v):
        ok = None
        if self.trainer:
            for _, full in self.gathered():
                if full is not None:
                    self.bcast.Bcast([full, MPI.BYTE], root=0)
        else:
            got = [torch.empty(shape, dtype=torch.bfloat16) for _, shape in self.tensors.values()]
            for buf in got:
                self.bcast.Bcast([buf.view(torch.int16).numpy().view(np.uint8), MPI.BYTE], root=0)
            ok = lambda: self.receiver_ok(got, v)  # noqa: E731
        return ok, {}

    def baseline_save(self, v):
        folder = os.path.join(self.a.scratch, "v%d" % v)
        if self.trainer:
            writer = None
            if self.rank == 0:
                writer = SafetensorsWriter(folder, self.a.model, self.tensors)
            for name, full in self.gathered():
                if writer is not None:
                    writer.write(full)
            if writer is not None:
                writer.close()
        self.world.Barrier()
        ok = None
        if not self.trainer:
            self.loader.reload(folder)
            ok = lambda: self.receiver_ok(self.loader.params().values(), v)  # noqa: E731
        return ok, {}

    def clean_saves(self, v):
        """The save folders of versions before v (not timed; the receivers read v's)."""
        if self.rank == 0:
            for old in os.listdir(self.a.scratch):
                if old != "v%d" % v:
                    shutil.rmtree(os.path.join(self.a.scratch, old), ignore_errors=True)

    def timed(self, case, v):
        """One case of version v, from a barrier of every rank to the next; then the check (not
        timed: a function the case returns, or None)."""
        if self.trainer:
            self.fill(v)
        self.world.Barrier()
        before = link_counters() if self.leader else None
        t0 = time.monotonic()
        check, extra = getattr(self, case)(v)
        self.world.Barrier()
        seconds = time.monotonic() - t0
        after = link_counters() if self.leader else None
        ok = check() if check is not None else True
        if case == "baseline_save":
            self.clean_saves(v)
        link = None
        if before is not None and after is not None:
            link = [after[0] - before[0], after[1] - before[1]]
        links = self.world.gather((self.node_of[self.rank], link) if self.leader else None, root=0)
        oks = self.world.allgather(ok)
        if not all(oks):
            raise SystemExit("bench_refit_job: %s of version %d: ranks %s hold other bytes"
                             % (case, v, [r for r, x in enumerate(oks) if not x]))
        out = dict(extra, seconds=seconds, version=v)
        if self.rank == 0:
            out["link"] = {str(n): l for n, l in (x for x in links if x is not None) if l is not None}
        return out


class SafetensorsWriter:
    """One safetensors file written tensor by tensor in name order (the header first: every shape is
    known), and the model's JSON files beside it."""

    def __init__(self, folder, model, tensors):
        os.makedirs(folder, exist_ok=True)
        for f in os.listdir(model):
            if f.endswith(".json") and not f.endswith(".index.json"):
                shutil.copy(os.path.join(model, f), folder)
        header, off = {}, 0
        for name, (dtype, shape) in tensors.items():
            n = 2 * int(np.prod(shape)) if shape else 2
            header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [off, off + n]}
            off += n
        text = json.dumps(header).encode()
        text += b" " * (-len(text) % 8)
        self.f = open(os.path.join(folder, "model.safetensors"), "wb")
        self.f.write(struct.pack("<Q", len(text)) + text)

    def write(self, data):
        self.f.write(memoryview(data))

    def close(self):
        self.f.flush()
        os.fsync(self.f.fileno())
        self.f.close()


ORDER = ("refit", "baseline_bcast", "baseline_save")
NAMES = {"refit": "refit", "baseline_bcast": "bcast", "baseline_save": "save"}


def main():
    a = parse_args()
    job = Job(a)
    load = job.load()
    results = {NAMES[c]: [] for c in ORDER}
    v = 0
    for rep in range(a.reps):
        for case in (ORDER if rep % 2 == 0 else ORDER[::-1]):
            v += 1
            results[NAMES[case]].append(job.timed(case, v))
            if job.rank == 0:
                r = results[NAMES[case]][-1]
                print("bench_refit_job: rep %d %s: %.2f s %s" % (rep, NAMES[case], r["seconds"], r.get("link")),
                      file=sys.stderr, flush=True)
    if job.rank == 0:
        with open(a.out, "w") as f:
            json.dump({"load_seconds": load, "world": job.world.Get_size(), "trainers": a.trainers, "tp": a.tp,
                       "dp": a.dp, "cases": results}, f, indent=1)
    if job.loader is not None:
        job.loader.close()
    if job.publisher is not None:
        job.publisher.close()


if __name__ == "__main__":
    main()
