#!/usr/bin/env python3
"""test_torch_device.py -- shardload.torch passes the parameters' GPU to the loader (cuda_device)
instead of letting it pick the node-local rank's. No GPU is needed: the device choice is computed
from the tensors' devices (stand-ins with torch's attributes), and load_into is run up to the
loader it would open, which records the configuration it was given. Needs PYTHONPATH=python/ and
torch (skipped, 77, without it)."""
import sys

try:
    import torch  # noqa: F401  (shardload.torch imports it)
except ImportError:
    print("SKIP: no torch")
    sys.exit(77)

import torch  # noqa: E402
import shardload.torch as st

fails = []


def check(cond, msg):
    if not cond:
        fails.append(msg)
        print("FAIL: " + msg, file=sys.stderr)


class Dev:
    def __init__(self, kind, index):
        self.type, self.index = kind, index


class T:
    def __init__(self, kind, index=None):
        self.device = Dev(kind, index)
        self.is_cuda = kind == "cuda"


check(st._cuda_device_of({"a": T("cuda", 3), "b": T("cuda", 3)}) == 3, "all on GPU 3")
check(st._cuda_device_of({"a": T("cpu"), "b": T("cuda", 5)}) == 5, "one on GPU 5")
check(st._cuda_device_of({"a": T("cuda", 6), "b": T("cuda", 2)}) == 2, "on GPUs 6 and 2: the lowest")
check(st._cuda_device_of({"a": T("cpu")}) is None, "on the host: none")


class Stop(Exception):
    pass


seen = {}


def fake_open_loader(model, comm, group, strict=None, **config):
    seen.update(config)
    raise Stop()


st.open_loader = fake_open_loader
st.module_tensors = lambda module: {"w": T("cuda", 4)}
for given, expect in (({}, 4), ({"cuda_device": 1}, 1)):
    seen.clear()
    try:
        st.load_into(object(), "model", **given)
    except Stop:
        pass
    check(seen.get("device") == "cuda" and seen.get("cuda_device") == expect,
          "load_into(%r) gave the loader %r, expected device cuda, cuda_device %d" % (given, seen, expect))

# A planned conversion on a GPU (DeepSeek-V3.2's indexer k_norm held in F32 from BF16 tensors, an
# I64 table held in I32): the library converts in host memory only, so load_into stages the
# checkpoint's bytes in a device tensor of their dtype and casts with copy_ after the load.
class P:
    def __init__(self, name, dtype, sources, shape=(4,)):
        self.name, self.dtype, self.shape, self.alias_of = name, dtype, tuple(shape), None
        self.slices = [{"tensor_dtype": d} for d in sources]


class MT:  # a module tensor stand-in: what _how reads
    def __init__(self, kind, dtype, shape=(4,)):
        self.device, self.dtype, self.shape, self.is_cuda = Dev(kind, 0), dtype, shape, kind == "cuda"

    def is_contiguous(self):
        return True


sd = __import__("shardload.loader", fromlist=["sources_dtype"]).sources_dtype
check(sd(P("n", "F32", ["BF16", "BF16"])) == "BF16", "sources BF16, held F32: BF16")
check(sd(P("n", "BF16", ["BF16"])) is None, "held as its sources: none")
check(sd(P("n", "F32", ["BF16", "F16"])) is None, "sources of two dtypes: none")
for p, t, dev, expect in ((P("k_norm", "F32", ["BF16"]), MT("cuda", torch.float32), "cuda", "stage"),
                          (P("k_norm", "F32", ["BF16"]), MT("cuda", torch.bfloat16), "cuda", "stage"),
                          (P("tid2eid", "I32", ["I64"]), MT("cuda", torch.int32), "cuda", "stage"),
                          (P("k_norm", "F32", ["BF16"]), MT("cpu", torch.float32), "cpu", "bind"),
                          (P("w", "BF16", ["BF16"]), MT("cuda", torch.bfloat16), "cuda", "bind"),
                          (P("w", "BF16", ["BF16"]), MT("cuda", torch.float32), "cuda", "copy")):
    got = st._how(p, t, dev)
    check(got == expect, "_how(%s held %s from %s, module %s on %s) = %s, expected %s"
          % (p.name, p.dtype, p.slices[0]["tensor_dtype"], t.dtype, t.device.type, got, expect))


class FakeLoader:  # records binds; its load writes the sources' values into the bound buffers
    device = "cuda"

    def __init__(self):
        self.bound = {}

    def __enter__(self):
        return self

    def __exit__(self, *a):
        return False

    def plan(self):
        return [P("k_norm", "F32", ["BF16"])]

    def agree(self, problem=None):
        if problem is not None:
            raise problem

    def bind(self, name, tensor):
        self.bound[name] = tensor

    def load(self):
        for t in self.bound.values():
            t.copy_(torch.tensor([1.5, -2.25, 3.0078125, 0.1], dtype=torch.float32))

    def params(self):
        raise AssertionError("a staged parameter needs no loader memory")


fake = FakeLoader()
module_tensor = torch.zeros(4, dtype=torch.float32)
st.open_loader = lambda *a, **k: fake
st.module_tensors = lambda module: {"k_norm": module_tensor}
st._how = lambda p, t, dev: "stage"  # on a host tensor: the GPU's classification, tested above
missing, unexpected = st.load_into(object(), "model", device="cuda")
staged = fake.bound.get("k_norm")
check(staged is not None and staged.dtype == torch.bfloat16 and staged is not module_tensor,
      "k_norm bound through a BF16 buffer of its own, got %r" % (staged,))
expect = torch.tensor([1.5, -2.25, 3.0078125, 0.1], dtype=torch.float32).to(torch.bfloat16).to(torch.float32)
check(torch.equal(module_tensor, expect), "k_norm cast into the module's F32 tensor: %s" % module_tensor)
check(missing == [] and unexpected == [], "nothing missing or unexpected: %s %s" % (missing, unexpected))
print("test_torch_device: %s" % ("ok" if not fails else "%d failures" % len(fails)))
sys.exit(1 if fails else 0)
