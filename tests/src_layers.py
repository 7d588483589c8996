#!/usr/bin/env python3
"""src_layers.py BUILD_DIR [--root DIR] [--unit ROOM:a.c+b.c ...] — the
library's real call graph and its layers (issue 48, item 4).

For every object file of the library (BUILD_DIR/CMakeFiles/kvbound_obj.dir/
src/ROOM/**.o), `nm` gives the symbols it defines and the ones it needs; an
undefined symbol defined by another object is an arrow from the first file to
the second (calls and data alike; a symbol renamed by a macro is seen under
its real name, a static inline function of a header as calls from each file
that uses it). A folder of src/ is a room (src/ops/ref and src/ops/x86 belong
to src/ops). Checked:
  (a) the rooms form no circle, and every arrow between rooms goes down
      LAYERS below, which must be the rows of the diagram under "## Layers"
      in docs/ARCHITECTURE.md (the two are compared); two rooms of one row
      may call one way only where SAME_ROW says so;
  (b) inside a room the files call one another one way only (no circle of
      any length), except the groups UNITS declares as one unit split for
      size, each with its reason; a group must be named in its room's design
      note (NOTES) as "one unit split for size: a.c + b.c", and must still
      call both ways (a stale declaration fails too). docs/ARCHITECTURE.md
      names every room's note.
--root DIR: the source tree whose docs and notes are read (default: this
script's ..); an object whose source is not in it is a leftover of an
earlier build and is not read. --unit ROOM:a.c+b.c: one more declared unit,
for the test of this check (tests/test_layers_cli.sh). Prints the room
arrows, then "ok ..." or one "FAIL ..." line per fault; exits 0 or 1."""
import os
import re
import subprocess
import sys

# The rooms, bottom to top: the rows of docs/ARCHITECTURE.md's layers
# diagram. An arrow may go from a room to any room of a lower row.
LAYERS = [
    ["core"],
    ["ops"],
    ["policies"],
    ["cache"],
    ["gguf", "tokenizer"],
    ["json"],
    ["grammar"],
    ["chat"],
    ["model", "sample"],
    ["eval"],
]
# The arrows allowed inside a row of the diagram (one way), and why.
SAME_ROW = {
    ("tokenizer", "gguf"): "a vocabulary is read from a GGUF file's tokenizer.ggml.* keys",
    ("model", "sample"): "a batch samples each sequence's next token",
}
# Each room's design note: where its files and their order are described,
# and where a unit split for size must be named.
NOTES = {
    "core": "src/core/core.h",
    "ops": "src/ops/ops.h",
    "policies": "src/policies/policy.h",
    "cache": "src/cache/cache_impl.h",
    "gguf": "src/gguf/gguf.h",
    "tokenizer": "src/tokenizer/tokenizer.h",
    "json": "src/json/json.h",
    "grammar": "src/grammar/grammar.h",
    "chat": "src/chat/jinja.h",
    "model": "src/model/model.h",
    "sample": "src/sample/sample.c",
    "eval": "src/eval/lab.c",
}
# Files of one room that call one another both ways because they are one
# unit split for size: room -> [(files, reason)], e.g.
#   "tokenizer": [(["vocab.c", "bpe.c"], "why the two cannot call one way")].
# None today: the circles issue 48 named were made one way (tokenizer:
# lookup.c; model: ffn.c; policies: kvb_policy_peak_tokens in registry.c).
UNITS = {}

args = sys.argv[1:]
if not args or args[0].startswith("-"):
    sys.exit(__doc__)
build = args.pop(0)
root = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
while args:
    opt = args.pop(0)
    if opt == "--root" and args:
        root = args.pop(0)
    elif opt == "--unit" and args and ":" in args[0]:
        room, files = args.pop(0).split(":", 1)
        UNITS.setdefault(room, []).append((files.split("+"), "declared on the command line"))
    else:
        sys.exit(f"src_layers.py: unknown argument {opt}")

fails = []
objdir = os.path.join(build, "CMakeFiles", "kvbound_obj.dir", "src")
objs = sorted(os.path.relpath(os.path.join(d, f), objdir) for d, _, fs in os.walk(objdir) for f in fs if f.endswith(".c.o"))
# an object whose source is gone is a leftover of an earlier build (a file moved or removed)
gone = [o for o in objs if not os.path.isfile(os.path.join(root, "src", o[:-2]))]
if gone:
    print("not read (their sources are gone): " + " ".join(gone))
objs = [o for o in objs if o not in gone]
if not objs:
    print(f"FAIL no object files under {objdir} (build the library first)")
    sys.exit(1)
rank = {room: i for i, row in enumerate(LAYERS) for room in row}


def room_of(f):
    return f.split("/", 1)[0]


def file_of(o):
    return o[:-2]  # "cache/cache.c.o" -> "cache/cache.c"


objset = set(objs)
defs, needs = {}, {f: set() for f in map(file_of, objs)}
r = subprocess.run(["nm", "-P", "-A"] + objs, cwd=objdir, capture_output=True, text=True)
if r.returncode != 0:
    print(f"FAIL nm: {r.stderr.strip()}")
    sys.exit(1)
for line in r.stdout.splitlines():
    o, _, rest = line.partition(": ")
    p = rest.split()
    if o not in objset or len(p) < 2:
        continue
    f, sym, kind = file_of(o), p[0], p[1]
    if kind == "U":
        needs[f].add(sym)
    elif kind in "TDBRCGSVWiu":
        if sym in defs and defs[sym] != f and kind not in "VW":
            fails.append(f"{sym} defined twice: {defs[sym]} and {f}")
        defs[sym] = f
files = sorted(needs)
for f in files:
    if room_of(f) not in rank:
        fails.append(f"room src/{room_of(f)} ({f}) is not in LAYERS: declare its place in the diagram")
        rank[room_of(f)] = -1

# file -> {file: first symbol}
calls = {f: {} for f in files}
for f in files:
    for sym in sorted(needs[f]):
        g = defs.get(sym)
        if g and g != f:
            calls[f].setdefault(g, sym)


def sccs(nodes, edges):
    """Tarjan's strongly connected components of the graph nodes -> edges[n]."""
    index, low, on, stack, out, n = {}, {}, set(), [], [], [0]

    def visit(v):
        index[v] = low[v] = n[0]
        n[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(edges.get(v, ())):
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
            out.append(sorted(comp))

    for v in sorted(nodes):
        if v not in index:
            visit(v)
    return [c for c in out if len(c) > 1]


def a_circle(comp, edges):
    """One circle through the component's first node, as a path."""
    start, inside = comp[0], set(comp)
    prev, todo = {start: None}, [start]
    while todo:
        v = todo.pop(0)
        for w in sorted(edges.get(v, ())):
            if w == start:
                path = [v]
                while prev[path[-1]] is not None:
                    path.append(prev[path[-1]])
                return list(reversed(path)) + [start]
            if w in inside and w not in prev:
                prev[w] = v
                todo.append(w)
    return comp


# (a) rooms
room_calls = {}
for f in files:
    for g, sym in calls[f].items():
        a, b = room_of(f), room_of(g)
        if a != b:
            room_calls.setdefault(a, {}).setdefault(b, []).append((f, g, sym))
for a in sorted(room_calls):
    print(f"{a} -> " + " ".join(f"{b}({len(room_calls[a][b])})" for b in sorted(room_calls[a])) + "  (file pairs)")
for comp in sccs(set(rank), {a: set(bs) for a, bs in room_calls.items()}):
    fails.append("circle of rooms " + " -> ".join(a_circle(comp, {a: set(bs) for a, bs in room_calls.items()})))
for a in sorted(room_calls):
    for b, arrows in sorted(room_calls[a].items()):
        f, g, sym = arrows[0]
        if rank[a] > rank[b] or (rank[a] == rank[b] and (a, b) in SAME_ROW):
            continue
        why = "the same row, and SAME_ROW does not allow it" if rank[a] == rank[b] else f"{a} is below {b}"
        fails.append(f"arrow up {a} -> {b}: {f} -> {g} ({sym}; {len(arrows)} such): {why}")

# the diagram's rows, top to bottom, against LAYERS
arch = os.path.join(root, "docs", "ARCHITECTURE.md")
try:
    doc = open(arch, encoding="utf-8").read()
except OSError as e:
    doc = ""
    fails.append(f"cannot read {arch}: {e}")
m = re.search(r"^## Layers\n+```\n(.*?)^```", doc, re.M | re.S)
rows = [] if not m else [sorted(re.findall(r"src/([a-z]+)", ln.split("  ")[0])) for ln in m.group(1).splitlines() if ln.startswith("src/")]
if rows[::-1] != [sorted(r) for r in LAYERS]:
    fails.append(f"LAYERS {LAYERS} is not the layers diagram of docs/ARCHITECTURE.md (bottom up: {rows[::-1]})")


def note_text(path):
    try:
        t = open(os.path.join(root, path), encoding="utf-8").read()
    except OSError:
        return None
    return " ".join(re.sub(r"^\s*(/\*+|\*+/|\*|//|#)", " ", ln) for ln in t.splitlines()).split()


for room, path in sorted(NOTES.items()):
    if note_text(path) is None:
        fails.append(f"the design note of src/{room}, {path}, is missing")
    if path not in doc:
        fails.append(f"docs/ARCHITECTURE.md does not say that src/{room}'s design note is {path}")

# (b) files inside each room
n_inside = 0
for room in sorted(set(room_of(f) for f in files)):
    mine = [f for f in files if room_of(f) == room]
    edges = {f: {g for g in calls[f] if room_of(g) == room} for f in mine}
    n_inside += sum(len(e) for e in edges.values())
    short = lambda f: f.split("/", 1)[1]
    units = [(set(f"{room}/{u}" for u in us), us, why) for us, why in UNITS.get(room, [])]
    comps = sccs(mine, edges)
    for comp in comps:
        unit = next((u for u in units if set(comp) <= u[0]), None)
        if unit is None:
            fails.append(f"circle in src/{room} among {', '.join(short(f) for f in comp)}: "
                         + " -> ".join(short(f) for f in a_circle(comp, edges))
                         + " (make it one way, or declare one unit split for size in UNITS and its note)")
    for uset, us, why in units:
        name = "one unit split for size: " + " + ".join(us)
        if not any(uset <= set(c) for c in comps):
            fails.append(f"src/{room}: {' + '.join(us)} is declared one unit split for size, but its files no longer call one another both ways")
        note = note_text(NOTES.get(room, ""))
        if note is None or " ".join(name.split()) not in " ".join(note):
            fails.append(f"src/{room}: the design note {NOTES.get(room)} does not name \"{name}\" ({why})")

for f in fails:
    print("FAIL " + f)
if fails:
    sys.exit(1)
print(f"ok {len(files)} objects in {len(rank)} rooms, {sum(len(b) for b in room_calls.values())} room arrows all down, "
      f"{n_inside} file arrows inside rooms, no circle")
