#!/usr/bin/env python3
"""test_hostile_spec -- specs whose expressions are deeply nested or very long end with a clear
error, never a crash (issue: ~50,000 nested '(' / '-' / '!', 100,000 nested default(, 100,000
'+0' terms used to overflow the stack of the expression parser and evaluator).

Each hostile spec is specs/llama.json with vars.H replaced; `shardload plan FIXTURE --world 1
--arch SPEC` must exit 1 (not a signal) and name the limit; a spec at the limit still plans.
Environment (set by ctest): SL_CLI, SL_FIXTURES, SL_SOURCE_DIR. Standard library only.
"""
import json
import os
import subprocess
import sys
import tempfile

CLI = os.environ["SL_CLI"]
FIXTURE = os.path.join(os.environ["SL_FIXTURES"], "llama")
SPEC = os.path.join(os.environ["SL_SOURCE_DIR"], "specs", "llama.json")

HOSTILE = {
    "50k nested parentheses": "(" * 50000 + "hidden_size" + ")" * 50000,
    "50k unary minus": "-" * 50000 + "hidden_size",
    "50k unary not": "!" * 50000 + "hidden_size",
    "100k nested default(": "default(" * 100000 + "hidden_size" + ")" * 100000,
    "100k +0 terms": "hidden_size" + "+0" * 100000,
    "1k +0 terms (over the length limit)": "hidden_size" + "+0" * 3000,
    "70 +0 terms (over the height limit)": "hidden_size" + "+0" * 70,
    "2000 nested parentheses (within the length limit)": "(" * 2000 + "hidden_size" + ")" * 2000,
    "2000 unary minus (within the length limit)": "-" * 2000 + "hidden_size",
    "400 nested default( (within the length limit)": "default(" * 400 + "hidden_size" + ")" * 400,
    "20 arguments": "max(hidden_size" + ", 0" * 19 + ")",
}
# Fine: nesting within the limit computes the same H.
FINE = {
    "30 nested parentheses": "(" * 30 + "hidden_size" + ")" * 30,
    "40 +0 terms": "hidden_size" + "+0" * 40,
}


def run(expr, tmp):
    with open(SPEC) as f:
        spec = json.load(f)
    spec["vars"]["H"] = expr
    path = os.path.join(tmp, "spec.json")
    with open(path, "w") as f:
        json.dump(spec, f)
    return subprocess.run([CLI, "plan", FIXTURE, "--world", "1", "--arch", path],
                          capture_output=True, text=True, timeout=120)


def main():
    failures = 0
    with tempfile.TemporaryDirectory() as tmp:
        for what, expr in HOSTILE.items():
            p = run(expr, tmp)
            ok = p.returncode == 1 and ("nested deeper than" in p.stderr or "longer than" in p.stderr
                                        or "arguments in one call" in p.stderr)
            ok = ok and len(p.stderr) < 8192  # the message quotes the expression, bounded
            print(("ok   " if ok else "FAIL ") + what + f": exit {p.returncode}: {p.stderr.strip()[:300]}")
            failures += not ok
        for what, expr in FINE.items():
            p = run(expr, tmp)
            ok = p.returncode == 0
            print(("ok   " if ok else "FAIL ") + what + f": exit {p.returncode} {p.stderr.strip()[:300]}")
            failures += not ok
    print(f"{len(HOSTILE) + len(FINE) - failures} passed, {failures} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
