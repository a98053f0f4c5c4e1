#!/usr/bin/env python3
"""test_plan_golden.py — `shardload plan --json` is unchanged by work on the planner's speed: the
JSON of a set of layouts (tensor, pipeline and data parallel, expert parallel, two-phase reads on
and off, several nodes; the real DeepSeek-V3 headers at 256 ranks) is compared field by field with
the planner's output recorded before that work (tests/data/plan_golden/CASE.json). The planning time
and the model argument are left out. Every differing field is named. Environment (set by ctest):
SL_CLI, SL_FIXTURES, SL_SOURCE_DIR. Only the standard library is needed.
Regenerate a golden (only when a change of the plan is intended): --write."""
import json
import os
import subprocess
import sys
import tempfile

CASES = [
    ("llama_tp4", "llama", "--world 4 --tp 4"),
    ("llama_tp2pp2dp4", "llama", "--world 16 --tp 2 --pp 2 --dp 4 --ranks-per-node 4"),
    ("llama_dp64", "llama", "--world 128 --tp 2 --dp 64 --ranks-per-node 8"),
    ("mixtral_ep", "mixtral", "--world 32 --tp 2 --dp 16 --enable-expert-parallel --ranks-per-node 4"),
    ("mixtral_tp4pp2", "mixtral", "--world 8 --tp 4 --pp 2"),
    ("dsv2_ep", "deepseek_v2_lite", "--world 64 --tp 4 --dp 16 --enable-expert-parallel --ranks-per-node 8"),
    ("dsv3_tp4pp2ep", "deepseek_v3", "--world 64 --tp 4 --pp 2 --dp 8 --enable-expert-parallel --ranks-per-node 8"),
    ("dsv3_nottwo", "deepseek_v3", "--world 32 --tp 4 --pp 2 --dp 4 --no-two-phase-reads --ranks-per-node 8"),
    ("qwen3moe_ep", "qwen3_moe", "--world 24 --tp 2 --dp 12 --enable-expert-parallel --ranks-per-node 6"),
    ("qwen2_tp3", "qwen2", "--world 6 --tp 3 --dp 2 --ranks-per-node 2"),
    ("llama4_ep", "llama4_text", "--world 8 --tp 2 --dp 4 --enable-expert-parallel --ranks-per-node 4"),
    ("gptoss_ep", "gpt_oss", "--world 8 --tp 1 --dp 8 --enable-expert-parallel --ranks-per-node 4"),
    ("dsv3full_256", "deepseek_v3_full", "--world 256 --tp 8 --pp 2 --dp 16 --enable-expert-parallel"),
]
IGNORED = ("planning_seconds", "model", "fill")  # fill: added after the golden outputs were recorded


def differences(a, b, path=""):
    if type(a) is not type(b):
        return [f"{path or '/'}: {a!r} != {b!r}"]
    if isinstance(a, dict):
        out = []
        for k in sorted(set(a) | set(b)):
            if k not in a or k not in b:
                out.append(f"{path}/{k}: only in the {'golden' if k in a else 'new'} output")
            else:
                out += differences(a[k], b[k], f"{path}/{k}")
        return out
    if isinstance(a, list):
        if len(a) != len(b):
            return [f"{path}: {len(a)} entries != {len(b)}"]
        out = []
        for i, (u, v) in enumerate(zip(a, b)):
            out += differences(u, v, f"{path}[{i}]")
        return out
    return [] if a == b else [f"{path}: {a!r} != {b!r}"]


def plan(cli, folder, opts):
    r = subprocess.run([cli, "plan", folder] + opts.split() + ["--json"], capture_output=True, text=True,
                       timeout=240)
    if r.returncode != 0:
        raise RuntimeError(f"shardload plan {folder} {opts} failed: {r.stderr.strip()[-400:]}")
    doc = json.loads(r.stdout)
    for k in IGNORED:
        doc.pop(k, None)
    return doc


def main():
    write = "--write" in sys.argv
    cli, fixtures, source = os.environ["SL_CLI"], os.environ["SL_FIXTURES"], os.environ["SL_SOURCE_DIR"]
    golden_dir = os.path.join(source, "tests", "data", "plan_golden")
    failed = 0
    with tempfile.TemporaryDirectory(prefix="sl-plan-golden-") as tmp:
        full = os.path.join(tmp, "deepseek_v3_full")
        subprocess.run([os.path.join(source, "scripts", "make-fixture"), "deepseek_v3_full", full, "--header-only"],
                       check=True, capture_output=True, timeout=240)
        for name, model, opts in CASES:
            folder = full if model == "deepseek_v3_full" else os.path.join(fixtures, model)
            got = plan(cli, folder, opts)
            path = os.path.join(golden_dir, name + ".json")
            if write:
                with open(path, "w") as f:
                    json.dump(got, f, separators=(",", ":"))
                    f.write("\n")
                continue
            with open(path) as f:
                want = json.load(f)
            diff = differences(want, got)
            if diff:
                failed += 1
                print(f"FAIL {name} ({model} {opts}): {len(diff)} fields differ from the golden plan:")
                for d in diff[:20]:
                    print("  " + d)
            else:
                print(f"ok {name}")
    print(f"{len(CASES)} plans, {failed} differ")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
