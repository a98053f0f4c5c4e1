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
print("test_torch_device: %s" % ("ok" if not fails else "%d failures" % len(fails)))
sys.exit(1 if fails else 0)
