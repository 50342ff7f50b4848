#!/usr/bin/env python3
"""Import cycles between the .rs files of Rust source trees (`make lint` runs it).

Edges: `use`/paths naming `crate::a::b`, `super::x`, `self::x` resolved to files,
outside `#[cfg(test)]` modules and test-only files. Prints each cycle found."""
import os, re, sys


def check(root):
    files = {}
    for d, _, fs in os.walk(root):
        for f in fs:
            if f.endswith('.rs'):
                p = os.path.join(d, f)
                rel = os.path.relpath(p, root)[:-3]
                parts = rel.split(os.sep)
                if parts[-1] in ('mod', 'lib', 'main'):
                    parts = parts[:-1]
                files[tuple(parts)] = p
    def strip_tests(text):
        i = text.find('#[cfg(test)]')
        return text if i < 0 else text[:i]
    def resolve(mod, path):
        # longest prefix of path that is a file module
        for n in range(len(path), 0, -1):
            if tuple(path[:n]) in files:
                return tuple(path[:n])
        return None
    edges = {}
    for mod, p in files.items():
        name = mod[-1] if mod else ''
        if 'test' in name:  # test-only files
            continue
        text = strip_tests(open(p).read())
        text = re.sub(r'//.*', '', text)
        is_dir_mod = os.path.basename(p) == 'mod.rs' or os.path.basename(p) == 'lib.rs'
        base = list(mod) if is_dir_mod else list(mod[:-1])
        out = set()
        for m in re.finditer(r'\b((?:crate|super|self)(?:::[a-z_][a-z0-9_]*)+)', text):
            segs = m.group(1).split('::')
            cur = [] if segs[0] == 'crate' else list(mod)
            for s in segs[1:] if segs[0] != 'super' else segs:
                if s == 'super':
                    cur = cur[:-1]
                else:
                    cur.append(s)
            t = resolve(mod, cur)
            if t is not None and t != mod and t[:len(mod)] != mod and mod[:len(t)] != t:
                out.add(t)
        edges[mod] = out
    # find cycles via Tarjan SCC
    idx, low, stack, on, sccs, counter = {}, {}, [], set(), [], [0]
    sys.setrecursionlimit(10000)
    def strong(v):
        idx[v] = low[v] = counter[0]; counter[0] += 1; stack.append(v); on.add(v)
        for w in edges.get(v, ()):
            if w not in idx:
                strong(w); low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], idx[w])
        if low[v] == idx[v]:
            comp = []
            while True:
                w = stack.pop(); on.discard(w); comp.append(w)
                if w == v: break
            if len(comp) > 1: sccs.append(comp)
    for v in list(edges):
        if v not in idx: strong(v)
    for c in sccs:
        print(f'{root}: cycle:', ' <-> '.join('/'.join(x) for x in sorted(c)))
    print(f'{root}: {len(sccs)} import cycle(s) among {len(edges)} files')
    return len(sccs)


if __name__ == "__main__":
    total = sum(check(root) for root in sys.argv[1:])
    sys.exit(1 if total else 0)
