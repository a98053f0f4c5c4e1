"""bench_sections.py -- what the benchmark scripts that write one section of docs/BENCHMARKS.md
share: the section between its markers (placed above the part scripts/bench generates, which keeps
it), the machine's load average, sizes with K/M/G suffixes. Python 3 standard library only."""

import os

BENCH_BEGIN = "<!-- bench:begin"


def parse_size(text):
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    t = text.strip().upper()
    return int(float(t[:-1]) * units[t[-1]]) if t[-1] in units else int(t)


def loadavg():
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


def write_section(out_path, begin, end, body):
    """Replaces the text between begin and end in out_path (or adds the section above the generated
    part of scripts/bench, or at the end), atomically."""
    text = open(out_path).read() if os.path.exists(out_path) else "# Benchmarks\n"
    block = begin + "\n\n" + body + "\n" + end + "\n"
    if begin in text and end in text:
        text = text[:text.index(begin)] + block + text[text.index(end) + len(end) + 1:]
    elif BENCH_BEGIN in text:
        i = text.index(BENCH_BEGIN)
        text = text[:i] + block + "\n" + text[i:]
    else:
        text = text.rstrip("\n") + "\n\n" + block
    with open(out_path + ".tmp", "w") as f:
        f.write(text)
    os.replace(out_path + ".tmp", out_path)
