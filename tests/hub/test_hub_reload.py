#!/usr/bin/env python3
"""test_hub_reload.py -- reload in place from the Hub (docs/spec/DESIGN.md §10), at 2 ranks through
the local Hub server: a repository whose main branch moves from commit A (the llama fixture) to
commit B (the same with its second weight file's bytes inverted) and back. The ranks
(tests/hub/hub_reload_worker.py under mpirun, the Python package) load main at A, reload main at B
and then at A again, checking every tensor against the served folders; the Hub cache being keyed by
content, the move to B downloads the changed file only and the move back downloads nothing; an
unknown revision is refused on every rank with nothing changed.
"""

import os
import shutil
import struct
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from test_hub import HubServer  # noqa: E402

PY = "/usr/bin/python3"
CHANGED = "model-00002-of-00003.safetensors"


def invert(path):
    """The weight bytes of a safetensors file inverted in place (its header kept)."""
    data = bytearray(open(path, "rb").read())
    (n,) = struct.unpack("<Q", bytes(data[:8]))
    for i in range(8 + n, len(data)):
        data[i] ^= 0xFF
    open(path, "wb").write(bytes(data))


def main():
    if not os.path.exists(PY):
        print("SKIP: %s is not installed" % PY)
        return 77
    probe = subprocess.run([PY, "-c", "import torch, numpy, mpi4py"], capture_output=True)
    if probe.returncode != 0:
        print("SKIP: %s lacks torch, numpy or mpi4py" % PY)
        return 77
    work = tempfile.mkdtemp(prefix="sl-hubreload-")
    server = HubServer(work)
    try:
        a = os.path.join(work, "a")
        b = os.path.join(work, "b")
        shutil.copytree(os.path.join(os.environ["SL_FIXTURES"], "llama"), a)
        shutil.copytree(a, b)
        invert(os.path.join(b, CHANGED))
        env = dict(os.environ)
        env.update({"HF_ENDPOINT": server.endpoint, "HF_HOME": os.path.join(work, "home"),
                    "PYTHONPATH": os.path.join(env["SL_SOURCE_DIR"], "python"),
                    "SL_RELOAD_A": a, "SL_RELOAD_B": b, "SL_RELOAD_CHANGED": CHANGED,
                    "SL_RELOAD_SHA_A": "a" * 40, "SL_RELOAD_SHA_B": "b" * 40,
                    "OMPI_MCA_rmaps_base_oversubscribe": "1"})
        env.pop("HF_HUB_OFFLINE", None)
        env.pop("HF_HUB_CACHE", None)
        p = subprocess.run(["timeout", "240", env["SL_MPIRUN"], "-np", "2", PY,
                            os.path.join(HERE, "hub_reload_worker.py")], env=env, capture_output=True,
                           text=True, timeout=280)
        sys.stdout.write(p.stdout[-4000:])
        sys.stderr.write(p.stderr[-4000:])
        if p.returncode != 0:
            print("FAIL: the ranks failed (exit %d)" % p.returncode, file=sys.stderr)
            return 1
        return 0
    finally:
        server.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
