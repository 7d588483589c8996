#!/usr/bin/env python3
"""figures.py: issue 38's measurements on the trained models, through the
kvbound CLI only (ppl, needle), so every figure has a command a reader can
rerun. Writes OUT/figures.json (every command and its JSON) and
OUT/figures.md (the tables of docs/EVALUATION.md and the model card).

    tools/train/figures.py --vanilla models/kvb-vanilla-1m.gguf --sink models/kvb-sink-1m.gguf --out figs

The held-out book is Dracula from its first chapter (texts.book_story: the
Project Gutenberg header and footer cut, as train.py cut every book, and the
title page, contents and list of illustrations, about 3,900 tokens of runs
of spaces and headings), written to OUT/dracula.txt.
"""
import argparse
import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
POLICIES = ["window", "streaming", "h2o", "tova", "scissorhands", "snapkv", "pyramidkv", "adakv", "knorm", "block-h2o", "lminfinite", "keydiff", "expected-attention"]


def log(msg):
    print(msg, file=sys.stderr, flush=True)


class Runner:
    def __init__(self, args):
        self.args = args
        self.records = []

    def kv(self, what, cmd, out_json=None):
        """Runs kvbound; returns its JSON (the last stdout line, or out_json's file)."""
        full = [self.args.kvbound] + cmd + ["-t", str(self.args.threads)]
        shown = " ".join(["kvbound"] + [show_path(c) for c in cmd])
        t0 = time.time()
        r = subprocess.run(full, capture_output=True, text=True)
        if r.returncode != 0:
            raise SystemExit("figures.py: %s failed (%d): %s" % (shown, r.returncode, r.stderr.strip()[-400:]))
        if out_json:
            with open(out_json) as f:
                res = json.load(f)
        else:
            res = json.loads(r.stdout.strip().splitlines()[-1])
        log("%-38s %5.1f s  %s" % (what, time.time() - t0, shown))
        self.records.append({"what": what, "command": shown, "result": res})
        return res

    def ppl(self, what, model, policies, budget, tokens, extra=()):
        return self.kv(what, ["ppl", "-m", model, "-f", self.args.text, "--policy", ",".join(policies), "--budget", str(budget),
                              "--max-tokens", str(tokens), "--json"] + list(extra))

    def needle(self, what, model, policy, budget, lengths, depths, extra=()):
        d = os.path.join(self.args.out, "needle-%d" % len(self.records))
        cmd = ["needle", "-m", model, "--lengths", ",".join(map(str, lengths)), "--depths", ",".join(map(str, depths)),
               "--policy", policy, "--trials", str(self.args.trials), "--out", d] + list(extra)
        if policy != "full":
            cmd += ["--budget", str(budget)]
        return self.kv(what, cmd, os.path.join(d, "needle.json"))


def show_path(p):
    """A file inside the checkout or ../shared as the repository root sees it, others as given."""
    if not os.path.exists(p):
        return p
    r = os.path.relpath(os.path.abspath(p), REPO)
    return p if r.startswith("../..") else r


def mean(xs):
    xs = list(xs)
    return sum(xs) / len(xs) if xs else float("nan")


def cells_mean(res, key, recall=None):
    cs = res["cells"]
    if recall is not None and cs and "accuracy_no_recall" in cs[0]:
        key = key if recall else key + "_no_recall"
    return mean(c[key] for c in cs)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--vanilla", required=True)
    ap.add_argument("--sink", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--data", default=os.path.join(REPO, "..", "shared", "data"))
    ap.add_argument("--kvbound", default=os.path.join(REPO, "build", "kvbound"))
    ap.add_argument("--ctx", type=int, default=512, help="the trained context T")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--trials", type=int, default=2, help="needle trials per cell")
    ap.add_argument("--quick", action="store_true", help="shorter texts and grids (a preview)")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    sys.path.insert(0, HERE)
    from texts import book_story
    src = os.path.join(args.data, "text", "pg345_dracula.txt")
    with open(src, encoding="utf-8") as f:
        body = book_story(f.read())
    args.text = os.path.join(args.out, "dracula.txt")
    with open(args.text, "w", encoding="utf-8") as f:
        f.write(body)
    T = args.ctx
    long_n = 2 * T if args.quick else 8 * T
    B = T // 2
    R = Runner(args)
    fig = {"ctx": T, "budget": B, "long_tokens": long_n}
    models = {"vanilla": args.vanilla, "sink": args.sink}

    # 1. sinks: the share of full attention on position 0, per layer
    for name, m in models.items():
        r = R.ppl("sink mass (%s)" % name, m, ["streaming"], B, T, ["--mass"])["runs"][0]
        fig["sink_mass_%s" % name] = r["sink_mass_layer"]

    # 2. the StreamingLLM table, past T at equal budget: window, streaming, full, recompute
    for name, m in models.items():
        full = R.ppl("streaming table, full (%s)" % name, m, ["window", "streaming", "lminfinite"], B, long_n)
        rec = R.ppl("streaming table, recompute (%s)" % name, m, ["streaming"], B, long_n, ["--baseline", "recompute"])
        runs = {r["policy"]: r for r in full["runs"]}
        fig["streaming_table_%s" % name] = {"full": runs["window"]["baseline_ppl"], "window": runs["window"]["ppl"],
                                            "streaming": runs["streaming"]["ppl"], "lminfinite": runs["lminfinite"]["ppl"],
                                            "recompute": rec["runs"][0]["baseline_ppl"]}

    # 3. the sink-token experiment: streaming with 0, 1, 2, 4, 8 sinks
    for name, m in models.items():
        row = {}
        for s in (0, 1, 2, 4, 8):
            row[s] = R.ppl("sinks %d (%s)" % (s, name), m, ["streaming"], B, long_n, ["--sinks", str(s), "--baseline", "none"])["runs"][0]["ppl"]
        fig["sinks_%s" % name] = row

    # 4. retrieval: the full cache at lengths <= T, then every policy at two budgets, then recall
    lengths = sorted({max(64, n) for n in ([T // 4, T // 2, T] if args.quick else [T // 4, T // 2, 3 * T // 4, T])})
    depths = [0, 0.5, 1] if args.quick else [0, 0.25, 0.5, 0.75, 1]
    for name, m in models.items():
        r = R.needle("needle full (%s)" % name, m, "full", 0, lengths, depths)
        fig["needle_full_%s" % name] = {"accuracy": cells_mean(r, "accuracy"), "cells": r["cells"]}
    m = models["vanilla"]
    fig["needle_policies"] = {}
    for budget in (T // 4, T // 2):
        for p in POLICIES:
            r = R.needle("needle %s B=%d" % (p, budget), m, p, budget, [T], depths)
            fig["needle_policies"]["%s/%d" % (p, budget)] = {"accuracy": cells_mean(r, "accuracy"), "retained": cells_mean(r, "retained")}
    rl = [T, 2 * T] if args.quick else [T, 2 * T, 4 * T]
    full = R.needle("recall: full (vanilla)", m, "full", 0, rl, [0, 0.25, 0.5, 0.75])
    rec = R.needle("recall: streaming 256 R=8 (vanilla)", m, "streaming", 256, rl, [0, 0.25, 0.5, 0.75], ["--recall-pages", "8"])
    fig["recall"] = {"full_retained": cells_mean(full, "retained"), "full_accuracy": cells_mean(full, "accuracy"),
                     "retained": cells_mean(rec, "retained", True), "retained_no_recall": cells_mean(rec, "retained", False),
                     "accuracy": cells_mean(rec, "accuracy", True), "accuracy_no_recall": cells_mean(rec, "accuracy", False),
                     "cells": rec["cells"]}
    fig["recall"]["ratio"] = fig["recall"]["retained"] / fig["recall"]["full_retained"] if fig["recall"]["full_retained"] else None

    # 5. every policy on the vanilla model: ppl, KL, top-1 and KV bytes
    # inside the trained context (T tokens, so the full cache is the reference), B = T/4; the prompt-compression
    # policies also by their own protocol (a prompt of 3T/4 compressed, the rest scored: --prompt)
    keys = ("ppl", "baseline_ppl", "kl", "top1", "kv_bytes_peak")
    r = R.ppl("policy table", m, POLICIES, T // 4, T)
    fig["policy_table"] = {x["policy"]: {k: x.get(k) for k in keys} for x in r["runs"]}
    r = R.ppl("policy table, prompt compression", m, ["snapkv", "pyramidkv", "adakv", "window"], T // 4, T, ["--prompt", str(3 * T // 4)])
    fig["policy_table_prompt"] = {x["policy"]: {k: x.get(k) for k in keys} for x in r["runs"]}

    with open(os.path.join(args.out, "figures.json"), "w") as f:
        json.dump({"figures": fig, "runs": R.records}, f, indent=1)
    write_md(fig, R.records, os.path.join(args.out, "figures.md"))
    log("figures: %s/figures.json, figures.md" % args.out)


def write_md(fig, records, path):
    T, B = fig["ctx"], fig["budget"]
    L = []
    a = L.append
    a("## Sinks: share of full attention on position 0, per layer (%d tokens)\n" % T)
    a("| model | " + " | ".join("layer %d" % i for i in range(len(fig["sink_mass_vanilla"]))) + " |")
    a("|---|" + "---|" * len(fig["sink_mass_vanilla"]))
    for n in ("vanilla", "sink"):
        a("| %s | %s |" % (n, " | ".join("%.3f" % x for x in fig["sink_mass_%s" % n])))
    a("\n## The StreamingLLM table: %d tokens of Dracula (%.0f T), budget %d\n" % (fig["long_tokens"], fig["long_tokens"] / T, B))
    a("| model | full cache | window | streaming (4 sinks) | sliding window with recompute | lminfinite |")
    a("|---|---|---|---|---|---|")
    for n in ("vanilla", "sink"):
        s = fig["streaming_table_%s" % n]
        a("| %s | %.2f | %.2f | %.2f | %.2f | %.2f |" % (n, s["full"], s["window"], s["streaming"], s["recompute"], s["lminfinite"]))
    a("\n## Sinks kept by `streaming` (ppl, budget %d, %d tokens)\n" % (B, fig["long_tokens"]))
    a("| model | 0 | 1 | 2 | 4 | 8 |")
    a("|---|---|---|---|---|---|")
    for n in ("vanilla", "sink"):
        s = fig["sinks_%s" % n]
        a("| %s | %s |" % (n, " | ".join("%.2f" % s[k] for k in (0, 1, 2, 4, 8))))
    a("\n## Retrieval\n")
    for n in ("vanilla", "sink"):
        a("- full cache, %s: passkey accuracy %.3f over %d cells (lengths <= T)" % (n, fig["needle_full_%s" % n]["accuracy"], len(fig["needle_full_%s" % n]["cells"])))
    rc = fig["recall"]
    a("- recall (streaming, hot budget 256, R = 8, lengths T..4T): retention %.3f (without recall %.3f), the full cache's %.3f, "
      "ratio %.3f; accuracy %.3f with recall, %.3f without, full cache %.3f"
      % (rc["retained"], rc["retained_no_recall"], rc["full_retained"], rc["ratio"] or 0, rc["accuracy"], rc["accuracy_no_recall"], rc["full_accuracy"]))
    a("\n| policy | B = %d: accuracy (retention) | B = %d |" % (T // 4, T // 2))
    a("|---|---|---|")
    for p in POLICIES:
        c = [fig["needle_policies"]["%s/%d" % (p, b)] for b in (T // 4, T // 2)]
        a("| %s | %.2f (%.2f) | %.2f (%.2f) |" % (p, c[0]["accuracy"], c[0]["retained"], c[1]["accuracy"], c[1]["retained"]))
    a("\n## Every policy (vanilla, %d tokens, B = %d)\n" % (T, T // 4))
    a("| policy | ppl | KL | top-1 | KV bytes (peak) | needle accuracy at length T |")
    a("|---|---|---|---|---|---|")
    pt = fig["policy_table"]
    first = next(iter(pt.values()))
    a("| full | %.3f | | | | %.2f |" % (first["baseline_ppl"], fig["needle_full_vanilla"]["accuracy"]))
    for p, x in pt.items():
        a("| %s | %.3f | %.4f | %.3f | %d | %.2f |" % (p, x["ppl"], x["kl"], x["top1"], x["kv_bytes_peak"], fig["needle_policies"]["%s/%d" % (p, T // 4)]["accuracy"]))
    pp = fig["policy_table_prompt"]
    a("\nPrompt compression by its own protocol (`--prompt %d`: the first 3T/4 tokens compressed to B, the rest scored):\n" % (3 * T // 4))
    a("| policy | ppl | full | KL | top-1 |")
    a("|---|---|---|---|---|")
    for p, x in pp.items():
        a("| %s | %.3f | %.3f | %.4f | %.3f |" % (p, x["ppl"], x["baseline_ppl"], x["kl"], x["top1"]))
    a("\n## Commands\n")
    for r in records:
        a("- %s: `%s`" % (r["what"], r["command"]))
    with open(path, "w") as f:
        f.write("\n".join(L) + "\n")


if __name__ == "__main__":
    main()
