#!/usr/bin/python3
"""bench_vllm_peer.py -- the vLLM-style peer of scripts/bench: loads a Llama-shaped safetensors
checkpoint into tensor-parallel ranks the way vLLM's default loader does, to time it beside shardload.

Usage (under MPI, one process per rank; Debian's python3 has torch and mpi4py):
  mpirun -np T /usr/bin/python3 scripts/bench_vllm_peer.py MODEL [--tp T] [--threads N]
         [--views] [--verify DIR]

On every rank, as vLLM's default loader (load format auto/safetensors, tensor parallelism T):
  1. model init: every parameter of the rank is allocated (torch.empty, as vLLM creates its layers)
     before any weight is read, in the vllm layout: fused qkv_proj and gate_up_proj;
  2. every weight file is mapped (mmap of the whole file; the header is parsed with json, as
     safetensors does) and every tensor of it, in name order, is copied out whole into fresh memory
     (vLLM's weights iterator yields full tensors; --views skips this copy and hands out views of the
     mapping instead);
  3. each full tensor is narrowed to the rank's slice and copied into its parameter, with vLLM's
     rules: column-parallel q/k/v/gate/up split dim 0 (q/k/v by heads, key/value heads replicated
     when T > their number; gate/up as parts 0 and 1 of gate_up_proj), row-parallel o_proj and
     down_proj split dim 1, embed_tokens and lm_head by rows of the vocabulary padded to a multiple
     of 64 (padding rows zeroed), norms (and biases of row-parallel layers) replicated.
Every rank reads every byte of every file. The clock runs from a barrier before step 1 to a barrier
after step 3 (MPI start-up and `import torch` excluded, as shardload's total_seconds excludes
start-up); wall_seconds is the slowest rank's.

--threads N   torch intra-op threads per rank (default 1: vLLM's multiprocess workers set
              OMP_NUM_THREADS=1 unless the user sets it)
--verify DIR  compare every parameter, byte for byte, with the files `shardload load MODEL --tp T
              --save-sharded DIR` wrote (DIR/model-rank-{rank}-part-{k}.safetensors); any
              difference, missing or extra tensor is reported and the exit status is 1

Rank 0 prints one JSON line on stdout. Errors: a message on stderr, exit status 2.
"""

import argparse
import glob
import json
import mmap
import os
import re
import resource
import struct
import sys
import time

import torch
from mpi4py import MPI

PROG = "bench_vllm_peer"
DTYPES = {"BF16": torch.bfloat16, "F16": torch.float16, "F32": torch.float32, "F64": torch.float64,
          "I8": torch.int8, "U8": torch.uint8, "I16": torch.int16, "I32": torch.int32,
          "I64": torch.int64, "BOOL": torch.bool}
CONFIG_DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}
VOCAB_PAD = 64        # vLLM's DEFAULT_VOCAB_PADDING_SIZE
HEADER_MAX = 100 << 20  # a safetensors header larger than this is refused
# checkpoint name fragment -> (fused parameter fragment, part), as vLLM's stacked_params_mapping
STACKED = [(".q_proj.", ".qkv_proj.", "q"), (".k_proj.", ".qkv_proj.", "k"),
           (".v_proj.", ".qkv_proj.", "v"), (".gate_proj.", ".gate_up_proj.", 0),
           (".up_proj.", ".gate_up_proj.", 1)]
ROW = (".o_proj.weight", ".down_proj.weight")


class PeerError(Exception):
    """Bad input (model, options): reported and exit status 2."""


class Shape:
    """The Llama dimensions and the rank's share of them (vLLM's QKVParallelLinear rules)."""

    def __init__(self, cfg, tp, tp_rank):
        try:
            self.hidden = cfg["hidden_size"]
            self.layers = cfg["num_hidden_layers"]
            self.heads = cfg["num_attention_heads"]
            self.kv = cfg.get("num_key_value_heads") or self.heads
            self.inter = cfg["intermediate_size"]
            self.vocab = cfg["vocab_size"]
        except KeyError as e:
            raise PeerError("config.json: missing %s (a Llama-shaped model is expected)" % e)
        self.head_dim = cfg.get("head_dim") or self.hidden // self.heads
        self.tied = bool(cfg.get("tie_word_embeddings", False))
        self.attn_bias = bool(cfg.get("attention_bias", False))
        self.mlp_bias = bool(cfg.get("mlp_bias", False))
        self.dtype = CONFIG_DTYPES.get(cfg.get("torch_dtype", "bfloat16"), torch.bfloat16)
        self.tp, self.tp_rank = tp, tp_rank
        if self.heads % tp or self.inter % tp:
            raise PeerError("heads %d and intermediate_size %d must divide by tp %d"
                            % (self.heads, self.inter, tp))
        if tp >= self.kv:
            if tp % self.kv:
                raise PeerError("tp %d is not a multiple of the %d key/value heads" % (tp, self.kv))
            self.kv_local, self.kv_replicas = 1, tp // self.kv
        else:
            if self.kv % tp:
                raise PeerError("%d key/value heads do not divide by tp %d" % (self.kv, tp))
            self.kv_local, self.kv_replicas = self.kv // tp, 1
        self.q_local = self.heads // tp
        padded = -(-self.vocab // VOCAB_PAD) * VOCAB_PAD
        if padded % tp:
            raise PeerError("padded vocabulary %d does not divide by tp %d" % (padded, tp))
        self.vocab_per = padded // tp

    def qkv_part(self, part):
        """(offset in qkv_proj, rows, first source row) of part q, k or v on this rank."""
        d, q, kvl = self.head_dim, self.q_local, self.kv_local
        if part == "q":
            return 0, q * d, self.tp_rank * q * d
        start = (self.tp_rank // self.kv_replicas) * kvl * d
        return (q * d if part == "k" else (q + kvl) * d), kvl * d, start

    def params(self):
        """name -> local shape of every parameter of the rank (vLLM's Llama in the vllm layout)."""
        h, tp = self.hidden, self.tp
        qkv_rows = (self.q_local + 2 * self.kv_local) * self.head_dim
        out = {"model.embed_tokens.weight": [self.vocab_per, h], "model.norm.weight": [h]}
        if not self.tied:
            out["lm_head.weight"] = [self.vocab_per, h]
        for i in range(self.layers):
            p = "model.layers.%d." % i
            out[p + "input_layernorm.weight"] = [h]
            out[p + "post_attention_layernorm.weight"] = [h]
            out[p + "self_attn.qkv_proj.weight"] = [qkv_rows, h]
            out[p + "self_attn.o_proj.weight"] = [h, self.heads * self.head_dim // tp]
            out[p + "mlp.gate_up_proj.weight"] = [2 * self.inter // tp, h]
            out[p + "mlp.down_proj.weight"] = [h, self.inter // tp]
            if self.attn_bias:
                out[p + "self_attn.qkv_proj.bias"] = [qkv_rows]
                out[p + "self_attn.o_proj.bias"] = [h]
            if self.mlp_bias:
                out[p + "mlp.gate_up_proj.bias"] = [2 * self.inter // tp]
                out[p + "mlp.down_proj.bias"] = [h]
        return out


def weight_files(model):
    """The safetensors files vLLM would read: those of the index when there is one, else all."""
    index = os.path.join(model, "model.safetensors.index.json")
    if os.path.isfile(index):
        with open(index) as f:
            names = sorted(set(json.load(f).get("weight_map", {}).values()))
        return [os.path.join(model, n) for n in names]
    files = sorted(glob.glob(os.path.join(model, "*.safetensors")))
    if not files:
        raise PeerError("%s: no *.safetensors files" % model)
    return files


class Mapped:
    """One safetensors file mapped whole; tensors are views of the mapping."""

    def __init__(self, path):
        self.path = path
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            if size < 8:
                raise PeerError("%s: %d bytes, too short for a safetensors file" % (path, size))
            # ACCESS_COPY: a private mapping (writable for torch.frombuffer, never written)
            self.map = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_COPY)
        (hlen,) = struct.unpack("<Q", self.map[:8])
        if hlen > min(HEADER_MAX, size - 8):
            raise PeerError("%s: header length %d exceeds the file (%d bytes)" % (path, hlen, size))
        try:
            header = json.loads(self.map[8:8 + hlen])
        except ValueError as e:
            raise PeerError("%s: header is not JSON (%s)" % (path, e))
        header.pop("__metadata__", None)
        self.base = 8 + hlen
        self.size = size
        self.header = header

    def names(self):
        return sorted(self.header)

    def view(self, name):
        info = self.header[name]
        dtype = DTYPES.get(info.get("dtype"))
        if dtype is None:
            raise PeerError("%s: tensor %s has dtype %s, not supported here"
                            % (self.path, name, info.get("dtype")))
        begin, end = info["data_offsets"]
        shape = list(info["shape"])
        count = 1
        for n in shape:
            count *= n
        if self.base + end > self.size or end - begin != count * torch.tensor([], dtype=dtype).element_size():
            raise PeerError("%s: tensor %s: data_offsets %s disagree with its shape %s or the file size"
                            % (self.path, name, info["data_offsets"], shape))
        if count == 0:
            return torch.empty(shape, dtype=dtype)
        return torch.frombuffer(self.map, dtype=dtype, count=count, offset=self.base + begin).view(shape)

    def close(self):
        self.map.close()


def load_one(shape, params, name, full):
    """vLLM's weight_loader for one checkpoint tensor: narrow `full` to the rank's part and copy
    it into its parameter. Returns the parameter name written, or None for a skipped tensor."""
    if "rotary_emb.inv_freq" in name or (shape.tied and name == "lm_head.weight"):
        return None
    r, tp = shape.tp_rank, shape.tp
    for frag, fused, part in STACKED:
        if frag in name:
            pname = name.replace(frag, fused)
            param = params[pname]
            if part in ("q", "k", "v"):
                off, rows, start = shape.qkv_part(part)
            else:
                rows = full.shape[0] // tp
                off, start = part * (shape.inter // tp), r * rows
            param.narrow(0, off, rows).copy_(full.narrow(0, start, rows))
            return pname
    if name not in params:
        raise PeerError("checkpoint tensor %s has no parameter in this Llama peer" % name)
    param = params[name]
    if name.endswith(ROW):
        cols = full.shape[1] // tp
        param.copy_(full.narrow(1, r * cols, cols))
    elif name in ("model.embed_tokens.weight", "lm_head.weight"):
        lo = min(r * shape.vocab_per, full.shape[0])
        n = min(shape.vocab_per, full.shape[0] - lo)
        param[:n].copy_(full.narrow(0, lo, n))
        param[n:].fill_(0)
    else:  # norms, row-parallel biases: replicated
        param.copy_(full)
    return name


def load(model, shape, views):
    """Steps 1-3 of the module docstring; returns (params, bytes copied out, files)."""
    params = {n: torch.empty(s, dtype=shape.dtype) for n, s in shape.params().items()}
    written = set()
    copied = 0
    files = weight_files(model)
    for path in files:
        f = Mapped(path)
        try:
            for name in f.names():
                t = f.view(name)
                full = t if views else t.clone()
                copied += 0 if views else full.numel() * full.element_size()
                pname = load_one(shape, params, name, full)
                if pname:
                    written.add(pname)
                del t, full
        finally:
            f.close()
    missing = sorted(set(params) - written)
    if missing:
        raise PeerError("parameters never loaded: %s" % ", ".join(missing[:5]))
    return params, copied, files


def verify(params, shape, folder, rank):
    """(compared, problems): every parameter against shardload's --save-sharded parts of rank."""
    parts = sorted(glob.glob(os.path.join(folder, "model-rank-%d-part-*.safetensors" % rank)),
                   key=lambda p: int(re.search(r"part-(\d+)", p).group(1)))
    if not parts:
        return 0, ["no model-rank-%d-part-*.safetensors in %s" % (rank, folder)]
    seen, problems, compared = set(), [], 0
    for path in parts:
        f = Mapped(path)
        try:
            for name in f.names():
                seen.add(name)
                mine = params.get(name)
                if mine is None and shape.tied and name == "lm_head.weight":
                    mine = params["model.embed_tokens.weight"]  # the save keeps the alias's first name
                    seen.add("model.embed_tokens.weight")
                if mine is None:
                    problems.append("%s: in the shardload save, not in the peer" % name)
                    continue
                theirs = f.view(name)
                compared += 1
                if list(theirs.shape) != list(mine.shape) or theirs.dtype != mine.dtype:
                    problems.append("%s: shardload %s %s, peer %s %s" % (
                        name, list(theirs.shape), theirs.dtype, list(mine.shape), mine.dtype))
                elif not torch.equal(theirs.contiguous().view(torch.uint8),
                                     mine.contiguous().view(torch.uint8)):
                    problems.append("%s: bytes differ" % name)
                del theirs
        finally:
            f.close()
    for name in sorted(set(params) - seen):
        problems.append("%s: in the peer, not in the shardload save" % name)
    return compared, problems


def peak_rss_bytes():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def main():
    p = argparse.ArgumentParser(prog="scripts/bench_vllm_peer.py", description=__doc__.split("\n")[0])
    p.add_argument("model")
    p.add_argument("--tp", type=int, help="tensor-parallel size (default: the world size)")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--views", action="store_true")
    p.add_argument("--verify", metavar="DIR")
    a = p.parse_args()
    comm = MPI.COMM_WORLD
    rank, world = comm.Get_rank(), comm.Get_size()
    tp = a.tp or world
    if tp < 1 or world % tp or a.threads < 1:
        raise PeerError("the world size %d must be a multiple of --tp %d, and --threads >= 1" % (world, tp))
    torch.set_num_threads(a.threads)
    with open(os.path.join(a.model, "config.json")) as f:
        cfg = json.load(f)
    comm.Barrier()
    t0 = time.monotonic()
    shape = Shape(cfg, tp, rank % tp)
    params, copied, files = load(a.model, shape, a.views)
    comm.Barrier()
    mine = time.monotonic() - t0
    wall = comm.allreduce(mine, op=MPI.MAX)
    local = sum(t.numel() * t.element_size() for t in params.values())
    result = {"program": PROG, "world": world, "tp": tp, "threads": a.threads, "views": a.views,
              "wall_seconds": wall,
              "checkpoint_bytes": sum(os.path.getsize(f) for f in files),
              "bytes_copied_out": comm.allreduce(copied, op=MPI.SUM),
              "bytes_params": comm.allreduce(local, op=MPI.SUM),
              "peak_rss_bytes_max": comm.allreduce(peak_rss_bytes(), op=MPI.MAX)}
    status = 0
    if a.verify:
        compared, problems = verify(params, shape, a.verify, rank)
        everyone = comm.gather((rank, compared, problems), root=0)
        if rank == 0:
            result["verified_tensors"] = sum(c for _, c, _ in everyone)
            result["verify_problems"] = ["rank %d: %s" % (r, m) for r, _, ps in everyone for m in ps]
            for line in result["verify_problems"][:20]:
                print("%s: verify: %s" % (PROG, line), file=sys.stderr)
        status = comm.bcast(1 if rank == 0 and result["verify_problems"] else 0, root=0)
    if rank == 0:
        print(json.dumps(result), flush=True)
    return status


if __name__ == "__main__":
    try:
        sys.exit(main())
    except (PeerError, OSError, ValueError) as e:
        print("%s: error (rank %d): %s" % (PROG, MPI.COMM_WORLD.Get_rank(), e), file=sys.stderr, flush=True)
        MPI.COMM_WORLD.Abort(2)
