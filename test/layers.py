#!/usr/bin/env python3
"""Checks that dependencies between dex's C files run one way (src/README.md, "Layout").

Reads the symbols each object file of src/ defines and uses (nm), and fails if
  - a file uses a file of a folder it may not depend on: the order is
      util <- wire, shmem <- engine <- api, workers <- dex.c (the module)
    (wire and shmem do not use each other; api and workers do not use each other), or
  - two files use each other, directly or through others (a cycle).
Run after the build: python3 test/layers.py [SRCDIR]. Prints one line per problem and
"layers: N files, M dependencies, ok" when there is none; exits 1 on a problem.
"""
import collections
import glob
import os
import subprocess
import sys

ALLOWED = {
    'util': set(),
    'wire': {'util'},
    'shmem': {'util'},
    'engine': {'util', 'wire', 'shmem'},
    'api': {'util', 'wire', 'shmem', 'engine'},
    'workers': {'util', 'wire', 'shmem', 'engine'},
    'module': {'util', 'wire', 'shmem', 'engine', 'api', 'workers'},
}


def folder(path, src):
    rel = os.path.relpath(path, src)
    return rel.split(os.sep)[0] if os.sep in rel else 'module'


def main():
    src = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else
                          os.path.join(os.path.dirname(__file__), '..', 'src'))
    # only objects of sources that exist: a file moved or split leaves its old object behind
    objs = sorted(o for o in glob.glob(os.path.join(src, '**', '*.o'), recursive=True)
                  if os.sep + 'gen' + os.sep not in o and os.path.exists(o[:-2] + '.c'))
    if not objs:
        print(f'layers: no object files under {src}: build first')
        return 1
    defined, used = {}, collections.defaultdict(set)
    for o in objs:
        out = subprocess.run(['nm', o], capture_output=True, text=True, check=True).stdout
        for line in out.splitlines():
            f = line.split()
            if len(f) == 3 and f[1] in 'TDBR':
                defined[f[2]] = o
            elif len(f) == 2 and f[0] == 'U':
                used[o].add(f[1])
    deps = collections.defaultdict(lambda: collections.defaultdict(set))
    for o, syms in used.items():
        for s in syms:
            if s in defined and defined[s] != o:
                deps[o][defined[s]].add(s)

    def name(o):
        return os.path.relpath(o, src)[:-2] + '.c'

    problems = 0
    for o in objs:
        for t, syms in sorted(deps[o].items()):
            a, b = folder(o, src), folder(t, src)
            if a != b and b not in ALLOWED[a]:
                print(f'layers: {name(o)} ({a}) may not use {name(t)} ({b}): {", ".join(sorted(syms))}')
                problems += 1

    # cycles: strongly connected components of more than one file (Tarjan)
    index, low, stack, on, comps = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in deps[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                comps.append(comp)

    sys.setrecursionlimit(10000)
    for o in objs:
        if o not in index:
            visit(o)
    for comp in comps:
        members = set(comp)
        edges = [f'{name(a)} -> {name(b)} ({", ".join(sorted(deps[a][b]))})'
                 for a in sorted(comp) for b in sorted(deps[a]) if b in members]
        print('layers: files that use each other: ' + '; '.join(edges))
        problems += 1

    n_deps = sum(len(d) for d in deps.values())
    if problems:
        print(f'layers: {problems} problems')
        return 1
    print(f'layers: {len(objs)} files, {n_deps} dependencies, ok')
    return 0


if __name__ == '__main__':
    sys.exit(main())
