#!/usr/bin/env python3
"""curve.py: train.py's loss.jsonl files as one SVG: validation loss,
retrieval accuracy and the attention share on position 0 (the mean over
layers after the first, and the largest layer) by step, one colour per run.
Standard library only.

    tools/train/curve.py --svg models/kvb-training.svg vanilla=runs/vanilla/loss.jsonl sink=runs/sink/loss.jsonl
"""
import argparse
import json
import sys

COLOURS = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b"]


def read(path):
    rows = []
    with open(path) as f:
        for line in f:
            line = line.strip()
            if line:
                rows.append(json.loads(line))
    if not rows:
        raise SystemExit("curve.py: %s has no rows" % path)
    return rows


def panel(x0, y0, w, h, title, series, ymin, ymax, xmax):
    out = ['<g transform="translate(%d,%d)">' % (x0, y0),
           '<rect width="%d" height="%d" fill="none" stroke="#999"/>' % (w, h),
           '<text x="%d" y="-8" font-size="13" text-anchor="middle">%s</text>' % (w // 2, title)]
    for i in range(5):
        v = ymin + (ymax - ymin) * i / 4
        y = h - h * i / 4
        out.append('<line x1="0" x2="%d" y1="%.1f" y2="%.1f" stroke="#eee"/>' % (w, y, y))
        out.append('<text x="-6" y="%.1f" font-size="10" text-anchor="end">%.2f</text>' % (y + 3, v))
    for i in range(5):
        x = w * i / 4
        out.append('<text x="%.1f" y="%d" font-size="10" text-anchor="middle">%d</text>' % (x, h + 14, xmax * i / 4))
    for colour, dash, pts in series:
        path = " ".join("%.1f,%.1f" % (w * s / xmax, h - h * (min(max(v, ymin), ymax) - ymin) / (ymax - ymin)) for s, v in pts)
        out.append('<polyline fill="none" stroke="%s" stroke-width="1.6"%s points="%s"/>'
                   % (colour, ' stroke-dasharray="4,3"' if dash else "", path))
    out.append("</g>")
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("runs", nargs="+", help="NAME=loss.jsonl")
    ap.add_argument("--svg", required=True)
    args = ap.parse_args()
    runs = []
    for r in args.runs:
        if "=" not in r:
            raise SystemExit("curve.py: %s: want NAME=loss.jsonl" % r)
        name, path = r.split("=", 1)
        runs.append((name, read(path)))
    xmax = max(row["step"] for _, rows in runs for row in rows)
    w, h = 300, 180
    svg = ['<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif">' % (3 * (w + 70) + 20, h + 90 + 16 * ((len(runs) - 1) // 3)),
           '<rect width="100%" height="100%" fill="white"/>']
    loss_pts = [v for _, rows in runs for v in (row["val_loss"] for row in rows)]
    lo, hi = min(loss_pts), max(loss_pts)

    def series(key):
        out = []
        for i, (_, rows) in enumerate(runs):
            c = COLOURS[i % len(COLOURS)]
            if key == "sink":
                out.append((c, False, [(row["step"], sum(row["sink_mass"][1:]) / max(1, len(row["sink_mass"]) - 1)) for row in rows]))
                out.append((c, True, [(row["step"], max(row["sink_mass"][1:] or [0])) for row in rows]))
            else:
                out.append((c, False, [(row["step"], row[key]) for row in rows]))
        return out

    svg += panel(60, 30, w, h, "validation loss (nats)", series("val_loss"), lo, hi, xmax)
    svg += panel(60 + w + 70, 30, w, h, "passkey / fact retrieval accuracy", series("retrieval_acc"), 0, 1, xmax)
    svg += panel(60 + 2 * (w + 70), 30, w, h, "attention on position 0 (mean; dashed: max layer)", series("sink"), 0, 1, xmax)
    for i, (name, rows) in enumerate(runs):
        svg.append('<text x="%d" y="%d" font-size="12" fill="%s">%s (%d steps)</text>'
                   % (60 + (i % 3) * 360, h + 75 + (i // 3) * 16, COLOURS[i % len(COLOURS)], name, rows[-1]["step"]))
    svg.append('<text x="%d" y="%d" font-size="10">step</text>' % (60 + w // 2, h + 58))
    svg.append("</svg>")
    with open(args.svg, "w") as f:
        f.write("\n".join(svg) + "\n")
    print("curve: %s" % args.svg, file=sys.stderr)


if __name__ == "__main__":
    main()
