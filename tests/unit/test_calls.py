#!/usr/bin/env python3
"""test_calls -- the library's files call each other the way docs/ARCHITECTURE.md says.

Reads the symbols of the library's object files (nm: the functions and data each file defines and
the ones it uses), so it sees calls, not includes: a header can be included without being called,
and a call can hide behind a function pointer table only where the interface says so.
  1. no cycle between files: when a.c calls b.c, nothing b.c calls (directly or not) calls a.c —
     files split to fit a size cap and still calling each other in circles are one file in two;
  2. calls follow the layers: a file calls only files of its folder and of the folders before it
     in docs/ARCHITECTURE.md's table (the order tests/unit/test_tree.py checks includes against).
     The stand-ins of absent/ take the place of the component they replace (absent/cuda.c of
     backend/cuda/, absent/uring.c of engine/uring/, absent/hub.c of hub/,
     absent/s3.c of s3/), so calling them is
     calling that folder.
Usage: test_calls.py OBJECT... (the objects of the library; CMake passes $<TARGET_OBJECTS:...>,
a ';'-separated list). Exit 0 when both hold; otherwise each violation is printed and the exit
code is 1.
"""

import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import test_tree  # noqa: E402  (the layer order, read from docs/ARCHITECTURE.md)

STAND_INS = {"absent/cuda": "backend", "absent/uring": "engine", "absent/hub": "hub", "absent/s3": "s3"}


def source_of(obj):
    """src/<folder>/.../name.c.o (CMake's object path under <target>.dir/) -> folder/.../name"""
    path = obj.replace(os.sep, "/")
    tail = path.split(".dir/", 1)[1] if ".dir/" in path else path
    return tail[:-len(".c.o")] if tail.endswith(".c.o") else os.path.splitext(tail)[0]


def symbols(objs):
    """(defined: symbol -> file, used: file -> set of symbols) over the objects."""
    defined, used = {}, {}
    for obj in objs:
        name = source_of(obj)
        out = subprocess.run(["nm", obj], capture_output=True, text=True, check=True).stdout
        used[name] = set()
        for line in out.splitlines():
            parts = line.split()
            if len(parts) == 3 and parts[1] in "TDBR":
                defined[parts[2]] = name
            elif len(parts) == 2 and parts[0] == "U":
                used[name].add(parts[1])
    return defined, used


def call_graph(defined, used):
    graph = {}
    for f, syms in used.items():
        for s in syms:
            g = defined.get(s)
            if g is not None and g != f:
                graph.setdefault(f, {}).setdefault(g, set()).add(s)
    return graph


def cycles(graph, nodes):
    """Strongly connected sets of more than one file (Tarjan's algorithm, iterative)."""
    index, low, on, stack, out, counter = {}, {}, set(), [], [], [0]
    for root in sorted(nodes):
        if root in index:
            continue
        work = [(root, iter(sorted(graph.get(root, {}))))]
        index[root] = low[root] = counter[0]
        counter[0] += 1
        stack.append(root)
        on.add(root)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = counter[0]
                    counter[0] += 1
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(graph.get(w, {})))))
                elif w in on:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                if len(comp) > 1:
                    out.append(sorted(comp))
    return out


def layer(name):
    return STAND_INS.get(name, name.split("/")[0])


def main(argv):
    objs = [p for a in argv for p in a.split(";") if p]
    if not objs:
        print("usage: test_calls.py OBJECT...")
        return 2
    defined, used = symbols(objs)
    graph = call_graph(defined, used)
    order = test_tree.layer_order()
    problems = []
    for comp in cycles(graph, used.keys()):
        edges = [f"{a} -> {b} ({', '.join(sorted(graph[a][b])[:3])})"
                 for a in comp for b in sorted(graph.get(a, {})) if b in comp]
        problems.append("files that call each other in a circle: " + "; ".join(edges))
    for a in sorted(graph):
        for b in sorted(graph[a]):
            la, lb = layer(a), layer(b)
            if la in order and lb in order and order.index(lb) > order.index(la):
                problems.append(f"{a}.c calls {b}.c ({', '.join(sorted(graph[a][b])[:3])}): {lb}/ comes "
                                f"after {la}/ in docs/ARCHITECTURE.md's layers")
    for p in problems:
        print(p)
    print(f"{len(problems)} problem(s) in the library's calls" if problems else
          f"library calls: {len(used)} files, no cycle, every call goes down the layers")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
