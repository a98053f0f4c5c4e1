"""plan_headers.py -- the harness of the header-only plan tests (test_plan_qwen_next.py,
test_plan_multimodal.py): a real model's headers from `scripts/make-fixture MODEL DIR --header-only`,
the tensors' sizes and pipeline stages computed from them independently of the library, and the
checks of a `shardload plan --json` document against the bytes each rank should hold. Failures are
counted here; finish() prints the count and gives the exit status. Standard library only."""

import json
import os
import struct
import subprocess

DTYPE_BYTES = {"BF16": 2, "F16": 2, "F32": 4}
failures = 0


def check(ok, msg):
    global failures
    if not ok:
        failures += 1
        print("FAIL: " + msg, flush=True)
    return ok


def finish(test):
    """Prints the failure count of test; the process exit status (0 when none failed)."""
    print("%s: %d failure(s)" % (test, failures))
    return 1 if failures else 0


def headers(folder):
    """name -> (dtype, shape) of every tensor of every safetensors file in folder."""
    out = {}
    for name in sorted(os.listdir(folder)):
        if not name.endswith(".safetensors"):
            continue
        with open(os.path.join(folder, name), "rb") as f:
            n = struct.unpack("<Q", f.read(8))[0]
            head = json.loads(f.read(n))
        for k, v in head.items():
            if k != "__metadata__":
                out[k] = (v["dtype"], v["shape"])
    return out


def header_fixture(source, model, folder):
    """Writes model's header-only files into folder; (its tensors as headers() gives them, its config)."""
    subprocess.run([os.path.join(source, "scripts", "make-fixture"), model, folder, "--header-only"],
                   check=True, stdout=subprocess.DEVNULL)
    with open(os.path.join(folder, "config.json")) as f:
        config = json.load(f)
    return headers(folder), config


def nbytes(t):
    dtype, shape = t
    n = DTYPE_BYTES[dtype]
    for d in shape:
        n *= d
    return n


def stage_of_layer(layer, layers, pp):
    """The pipeline stage of a layer: base = layers // pp, the stages before the last get the remainder
    (docs/spec/LAYOUTS.md §2.1)."""
    base, rem = divmod(layers, pp)
    counts = [base + (1 if p + 1 < pp and p + 1 + rem >= pp else 0) for p in range(pp)]
    start = 0
    for p, c in enumerate(counts):
        if start <= layer < start + c:
            return p
        start += c
    raise AssertionError(layer)


def check_plan(label, doc, want, unique, experts_local, covering_allowed):
    """A plan document against want ({rank: bytes}) and the job's distinct bytes: every byte read once
    (read amplification 1.00); bytes read = unique, with no covering bytes unless covering_allowed (then
    bytes read less the covering ones = unique); each rank needing and holding exactly its bytes and
    experts_local experts. Prints a summary line."""
    check(doc["read_amplification"] == 1.0, "%s: read amplification %r" % (label, doc["read_amplification"]))
    check(doc["bytes_unique"] == unique, "%s: %d distinct bytes, expected %d" % (label, doc["bytes_unique"], unique))
    if covering_allowed:
        check(doc["bytes_read"] - doc["bytes_covering"] == unique, "%s: %d bytes read" % (label, doc["bytes_read"]))
    else:
        check(doc["bytes_covering"] == 0 and doc["bytes_read"] == unique, "%s: %d bytes read (%d covering), "
              "expected %d" % (label, doc["bytes_read"], doc["bytes_covering"], unique))
    for rank in doc["ranks"]:
        g = rank["rank"]
        check(rank["bytes_needed"] == want[g] and rank["bytes_local"] == want[g],
              "%s: rank %d needs %d bytes (local %d), expected %d"
              % (label, g, rank["bytes_needed"], rank["bytes_local"], want[g]))
        check(rank["experts_local"] == experts_local, "%s: rank %d holds %d experts"
              % (label, g, rank["experts_local"]))
    print("%s: %d ranks, %.2f GB each at most, read amplification %.2f, planned in %.2f s"
          % (label, len(doc["ranks"]), max(want.values()) / 1e9, doc["read_amplification"],
             doc["planning_seconds"]), flush=True)
