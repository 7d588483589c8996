#!/usr/bin/env python3
"""serve_layers.py DIR — which files of DIR (tools/serve) call functions
defined in which others, and whether any calls form a circle (issue 33:
"no two files of tools/serve call each other in a circle"). Prints the
graph and "ok" or "FAIL circle a.c -> b.c -> a.c"; exits 0 or 1."""
import os
import re
import sys

d = sys.argv[1]
files = sorted(f for f in os.listdir(d) if f.endswith(".c"))
text = {f: re.sub(r"/\*.*?\*/", "", open(os.path.join(d, f)).read(), flags=re.S) for f in files}
defs = {}
for f in files:
    for m in re.finditer(r"^(?!static)[a-z][a-z0-9_ *]*?[ *]([a-z_][a-z0-9_]*)\([^;]*?\)\s*\{", text[f], re.M):
        defs[m.group(1)] = f
calls = {f: sorted({df for name, df in defs.items() if df != f and re.search(r"\b" + name + r"\s*\(", text[f])}) for f in files}
for f in files:
    print(f"{f} -> {' '.join(calls[f])}")
state = {}
circle = None


def visit(u, path):
    global circle
    state[u] = 1
    for v in calls[u]:
        if state.get(v) == 1 and not circle:
            circle = path[path.index(v):] + [v]
        elif not state.get(v):
            visit(v, path + [v])
    state[u] = 2


for f in files:
    if not state.get(f):
        visit(f, [f])
if circle:
    print("FAIL circle " + " -> ".join(circle))
    sys.exit(1)
print(f"ok {len(files)} files, {sum(len(c) for c in calls.values())} file-to-file calls, no circle")
