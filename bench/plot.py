#!/usr/bin/env python3
"""plot.py - draw what collfuse measured, as SVG or PNG (Debian's python3-matplotlib).

    python3 bench/plot.py ar.json -o ar.svg        # collfuse bench allreduce --json
    python3 bench/plot.py fusion.json -o fusion.png  # collfuse bench fusion --json
    python3 bench/plot.py trace.json -o trace.svg  # collfuse run --trace trace.json

What it draws depends on the file:
- `bench allreduce --json`: bus bandwidth (GB/s) against the buffer size, one
  line per algorithm of collfuse's, `auto`, each peer that ran (MPI), and the
  memory-traffic bound (every rank's memcpy of the size at once, as bus
  bandwidth), sizes on a log scale.
- `bench fusion --json`: milliseconds per iteration by variant, with the
  exposed communication (time a rank waited on collectives) drawn inside each
  bar.
- a Chrome trace of `run --trace`: the timeline, one row per rank and
  thread (compute, collectives), each event a box coloured by what it is
  (compute, collective, wait, ...), over the timed iterations (--all: every
  event; --iterations N: the first N from --first).
The format follows -o's extension (.svg or .png); without -o the picture is
FILE with .svg for .json.
"""
import argparse
import json
import os
import sys

try:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch
except ImportError:  # pragma: no cover - said to the user
    sys.exit("plot.py: needs matplotlib (Debian: apt install python3-matplotlib; "
             "scripts/install-deps installs it)")

COLOURS = {
    "compute": "#4c72b0", "copy": "#8172b2", "fused": "#64b5cd", "start": "#cccccc",
    "wait": "#c44e52", "collective": "#dd8452", "algorithm": "#ccb974",
    "transport": "#937860", "iteration": "#eeeeee", "phase": "#55a868",
}


def plot_allreduce(d, ax):
    factor = d.get("busbw_factor", 1.0)
    rows = d["results"]
    sizes = [r["bytes"] for r in rows]
    names = []
    for r in rows:
        for name in (r.get("collfuse") or {}):
            if name not in names:
                names.append(name)
    for name in names:
        pts = [(r["bytes"], r["collfuse"][name]["busbw_gbps"]) for r in rows
               if (r.get("collfuse") or {}).get(name)]
        if pts:
            style = "-" if name == "auto" else "--"
            ax.plot(*zip(*pts), style, marker="o", lw=2.5 if name == "auto" else 1.2,
                    label="collfuse " + name)
    for peer in ("mpi",):
        pts = [(r["bytes"], r[peer]["busbw_gbps"]) for r in rows if r.get(peer)]
        if pts:
            ax.plot(*zip(*pts), ":", marker="s", color="black", label=peer.upper() + " (peer)")
    pts = [(r["bytes"], r["bytes"] * factor / r["bound"]["us"] * 1e-3) for r in rows
           if r.get("bound") and r["bound"].get("us")]
    if pts:
        ax.plot(*zip(*pts), "-", color="grey", alpha=0.6, lw=4, label="memory-traffic bound")
    ax.set_xscale("log", base=2)
    ax.set_xticks(sizes)
    ax.set_xticklabels([size_text(s) for s in sizes], rotation=45)
    ax.set_xlabel("buffer size per rank")
    ax.set_ylabel("bus bandwidth (GB/s)")
    ax.set_title("AllReduce on %s ranks (%s, %s %s)" % (d.get("ranks"), d.get("transport", ""),
                                                         d.get("dtype", ""), d.get("reduction", "")))
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)


def size_text(b):
    for unit, k in (("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if b >= k and b % k == 0:
            return "%d%s" % (b // k, unit)
    return str(b)


def plot_fusion(d, ax):
    vs = [v for v in d["variants"] if "skipped" not in v]
    names = [v["name"] for v in vs]
    ms = [v["time_ms"] for v in vs]
    exposed = [max(v.get("exposed_ms", 0), 0) for v in vs]
    y = range(len(vs))
    ax.barh(y, ms, color="#4c72b0", label="ms per iteration (median)")
    ax.barh(y, exposed, height=0.4, color="#c44e52", label="exposed communication")
    ax.set_yticks(list(y))
    ax.set_yticklabels(names, fontsize=8)
    ax.invert_yaxis()
    for i, m in enumerate(ms):
        ax.text(m, i, " %.2f" % m, va="center", fontsize=8)
    ax.set_xlabel("ms per iteration")
    ax.set_title("%s on %d ranks: fusion variants" % (d.get("graph") or d.get("file"), d["ranks"]))
    ax.legend(fontsize=8)


def plot_trace(d, ax, args):
    ev = d["traceEvents"]
    names = {(e["pid"], e.get("tid")): e["args"]["name"] for e in ev if e["ph"] == "M"}
    ranks = d.get("otherData", {}).get("ranks", 0)
    xs = [e for e in ev if e["ph"] == "X" and e["pid"] < ranks]
    its = sorted((e for e in xs if e["cat"] == "iteration" and e["pid"] == 0),
                 key=lambda e: e["ts"])
    lo, hi = (min(e["ts"] for e in xs), max(e["ts"] + e["dur"] for e in xs)) if xs else (0, 1)
    if its and not args.all:
        chosen = its[args.first:args.first + args.iterations] or its[-1:]
        lo, hi = chosen[0]["ts"], chosen[-1]["ts"] + chosen[-1]["dur"]
    rows = sorted({(e["pid"], e["tid"]) for e in xs})
    span = (hi - lo) / 1e3 or 1
    depth_of = {"iteration": -1, "algorithm": 1, "transport": 2}  # nested events drawn thinner
    for k, lane in enumerate(rows):
        boxes = {}
        for e in xs:
            if (e["pid"], e["tid"]) != lane or e["cat"] == "iteration":
                continue
            if e["ts"] + e["dur"] < lo or e["ts"] > hi:
                continue
            x, w = (e["ts"] - lo) / 1e3, max(e["dur"] / 1e3, 1e-4)
            boxes.setdefault(e["cat"], []).append((x, w))
            if depth_of.get(e["cat"], 0) == 0 and w > 0.06 * span:
                ax.text(x + w / 2, k, e["name"], ha="center", va="center", fontsize=6, clip_on=True)
        for cat, spans in sorted(boxes.items(), key=lambda kv: depth_of.get(kv[0], 0)):
            d = depth_of.get(cat, 0)
            h = 0.8 if d <= 0 else 0.8 / (2 * d)
            ax.broken_barh(spans, (k + 0.4 - h, h), color=COLOURS.get(cat, "#999999"),
                           edgecolor="white", linewidth=0.5)
    ax.set_yticks(range(len(rows)))
    ax.set_yticklabels(["rank %d %s" % (p, names.get((p, t), t)) for p, t in rows], fontsize=8)
    ax.invert_yaxis()
    ax.set_xlim(0, (hi - lo) / 1e3)
    ax.set_xlabel("ms")
    cats = sorted({e["cat"] for e in xs if e["cat"] != "iteration"})
    ax.legend(handles=[Patch(color=COLOURS.get(c, "#999999"), label=c) for c in cats],
              fontsize=8, loc="upper right")
    ax.set_title(args.title or "timeline of %d ranks" % ranks)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("input", help="a --json of bench allreduce or bench fusion, or a run --trace file")
    p.add_argument("-o", "--output", help="OUT.svg or OUT.png (default: INPUT with .svg)")
    p.add_argument("--title", help="the picture's title")
    p.add_argument("--all", action="store_true", help="trace: every event, not the timed iterations")
    p.add_argument("--first", type=int, default=0, help="trace: the first iteration drawn (default 0)")
    p.add_argument("--iterations", type=int, default=1, help="trace: how many (default 1)")
    args = p.parse_args()
    try:
        with open(args.input) as f:
            d = json.load(f)
    except (OSError, ValueError) as e:
        sys.exit("plot.py: %s: %s" % (args.input, e))
    out = args.output or os.path.splitext(args.input)[0] + ".svg"
    if not out.endswith((".svg", ".png")):
        sys.exit("plot.py: %s: the output is .svg or .png" % out)
    if "traceEvents" in d:
        fig, ax = plt.subplots(figsize=(11, 1 + 0.35 * 2 * d.get("otherData", {}).get("ranks", 1)))
        plot_trace(d, ax, args)
    elif d.get("bench") == "allreduce":
        fig, ax = plt.subplots(figsize=(8, 5))
        plot_allreduce(d, ax)
    elif d.get("bench") == "fusion":
        fig, ax = plt.subplots(figsize=(9, 1.5 + 0.45 * len(d.get("variants", []))))
        plot_fusion(d, ax)
    else:
        sys.exit("plot.py: %s: neither a trace nor bench allreduce/fusion --json" % args.input)
    if args.title and "traceEvents" not in d:
        ax.set_title(args.title)
    fig.tight_layout()
    fig.savefig(out, metadata={"Date": None} if out.endswith(".svg") else None)
    print("plot.py: wrote %s" % out)


if __name__ == "__main__":
    main()
