#!/usr/bin/env python3
"""test_planned_dtype -- the spec key "dtype" (a parameter held in another dtype than its checkpoint
tensors, docs/SPECS.md) through `shardload plan FIXTURE --arch SPEC`:

- the dry run counts the held size: specs/llama.json with "dtype": "F32" on the llama fixture's
  norms (BF16, hidden size 64; 3 layers of 2 norms plus the final one, replicated) gives every rank
  2 bytes more per norm element it holds than the plain spec, bytes needed unchanged;
- refused, exit 1, with a message naming the spec file and the parameter: a dtype that is not one
  a parameter can be converted to ("I64", "F8_E4M3", a number), and "F32" on a parameter whose
  checkpoint tensors cannot be converted (the compressed-tensors fp8 fixture's F8_E4M3 o_proj),
  and "I32" on a BF16 norm (I32 is held only from I64 sources).
Environment (set by ctest): SL_CLI, SL_FIXTURES, SL_SOURCE_DIR. Standard library only.
"""
import json
import os
import subprocess
import sys
import tempfile

CLI = os.environ["SL_CLI"]
FIXTURES = os.environ["SL_FIXTURES"]
SPEC = os.path.join(os.environ["SL_SOURCE_DIR"], "specs", "llama.json")
NORMS = ("input_layernorm.weight", "post_attention_layernorm.weight", "model.norm.weight")
H, LAYERS = 64, 3


def stage_layers(layers, stages, stage):
    """docs/spec/LAYOUTS.md §2.1: base layers each, one more for the rem stages before the last."""
    base, rem = divmod(layers, stages)
    return base + (1 if stages - 1 - rem <= stage < stages - 1 else 0)


def spec_with(tmp, dtypes):
    """specs/llama.json with "dtype" set on the parameters whose name ends with a key of dtypes."""
    with open(SPEC) as f:
        spec = json.load(f)
    for p in spec["params"]:
        for end, value in dtypes.items():
            if p["name"].endswith(end):
                p["dtype"] = value
    path = os.path.join(tmp, "spec.json")
    with open(path, "w") as f:
        json.dump(spec, f)
    return path


def plan(fixture, world, tp, pp, spec=None):
    args = [CLI, "plan", os.path.join(FIXTURES, fixture), "--world", str(world), "--tp", str(tp),
            "--pp", str(pp), "--json"]
    if spec is not None:
        args += ["--arch", spec]
    return subprocess.run(args, capture_output=True, text=True, timeout=120)


def main():
    failures = 0

    def check(ok, what):
        nonlocal failures
        print(("ok   " if ok else "FAIL ") + what)
        failures += not ok

    with tempfile.TemporaryDirectory() as tmp:
        f32 = spec_with(tmp, {n: "F32" for n in NORMS})
        for world, tp, pp in ((1, 1, 1), (2, 1, 2), (2, 2, 1)):
            base, held = plan("llama", world, tp, pp), plan("llama", world, tp, pp, f32)
            check(base.returncode == 0 and held.returncode == 0,
                  f"world {world} tp {tp} pp {pp} plans: {base.stderr.strip()} {held.stderr.strip()}")
            if base.returncode != 0 or held.returncode != 0:
                continue
            b, h = json.loads(base.stdout), json.loads(held.stdout)
            for r in range(world):
                stage = r // tp  # g = p*T + r with dp 1
                norms = 2 * stage_layers(LAYERS, pp, stage) + (1 if stage == pp - 1 else 0)
                want = b["ranks"][r]["bytes_local"] + norms * H * 2
                check(h["ranks"][r]["bytes_local"] == want,
                      f"world {world} tp {tp} pp {pp} rank {r}: bytes_local "
                      f"{h['ranks'][r]['bytes_local']}, expected {want} ({norms} norms held in F32)")
                check(h["ranks"][r]["bytes_needed"] == b["ranks"][r]["bytes_needed"],
                      f"world {world} rank {r}: bytes_needed unchanged")

        for bad in ("I64", "F8_E4M3", 32, ""):
            p = plan("llama", 1, 1, 1, spec_with(tmp, {"input_layernorm.weight": bad}))
            ok = p.returncode == 1 and "'dtype' must be one of F32, F16, BF16, F64" in p.stderr and \
                "input_layernorm.weight" in p.stderr and "spec.json" in p.stderr
            check(ok, f"dtype {bad!r} refused: exit {p.returncode}: {p.stderr.strip()[:300]}")

        p = plan("llama", 1, 1, 1, spec_with(tmp, {"input_layernorm.weight": "I32"}))
        ok = p.returncode == 1 and "input_layernorm.weight" in p.stderr and "BF16" in p.stderr and \
            "cannot be converted" in p.stderr and "spec.json" in p.stderr
        check(ok, f"I32 on a BF16 norm refused: exit {p.returncode}: {p.stderr.strip()[:300]}")

        p = plan("ct_fp8_tensor", 1, 1, 1, spec_with(tmp, {"o_proj.weight": "F32"}))
        ok = p.returncode == 1 and "o_proj.weight" in p.stderr and "F8_E4M3" in p.stderr and \
            "cannot be converted" in p.stderr and "spec.json" in p.stderr
        check(ok, f"F32 on an F8_E4M3 weight refused: exit {p.returncode}: {p.stderr.strip()[:300]}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
