#!/usr/bin/env python3
"""trace.py COLLFUSE: `run --trace FILE.json` writes a Chrome trace whose
structure Perfetto can draw, for a run that succeeds and for runs that fail.

A graph of MatMuls whose products are all-reduced (fusion=1, so the default
pipeline buckets them and the buckets overlap the MatMuls after them) runs
on 4 ranks with warmup and iterations, on random data with --verify. The
trace must have one process per rank (and the driver's), two named lanes
per rank, events that nest on each lane (a complete event never straddles
another's end: Chrome's begin/end pairs), one iteration event per iteration
and rank, every collective of every iteration, bucket events that name their
members (the graph's AllReduces), the driver's plan building and kernel
lookups (named, with whether a cache had them), and timestamps that fit in the time the
test measured around the process. A rank that fails at a step, a rank that
vanishes (the others time out) and a compute step that never returns (the
run gives the rank up) still leave a readable trace that says why.
"""
import json
import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import checks  # noqa: E402
from checks import cf, fail  # noqa: E402

checks.CF = sys.argv[1]
RANKS = 4
LAYERS = 6


def graph(path):
    lines = ['<graph name="trace_test" version="1" world_size="%d">' % RANKS]
    for i in range(LAYERS):
        lines += [
            '<node name="x%d" op="Input" dtype="float32" shape="96,96"/>' % i,
            '<node name="w%d" op="Input" dtype="float32" shape="96,96"/>' % i,
            '<node name="g%d" op="MatMul"><input ref="x%d"/><input ref="w%d"/></node>' % (i, i, i),
            '<node name="ar%d" op="AllReduce" reduction="mean" fusion="1"><input ref="g%d"/></node>'
            % (i, i),
            '<node name="o%d" op="Output"><input ref="ar%d"/></node>' % (i, i),
        ]
    lines.append("</graph>")
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")


def load(path, what):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError) as e:
        fail("%s: the trace cannot be read: %s" % (what, e))
        return None


def structure(t, what, ranks=RANKS):
    """Processes, lanes and nesting; returns the complete events."""
    ev = t.get("traceEvents", [])
    meta = {(e["pid"], e.get("tid"), e["name"]): e["args"]["name"] for e in ev if e["ph"] == "M"}
    for r in range(ranks):
        if meta.get((r, None, "process_name")) != "rank %d" % r:
            fail("%s: no process for rank %d" % (what, r))
        for tid, name in ((0, "compute"), (1, "collectives")):
            if meta.get((r, tid, "thread_name")) != name:
                fail("%s: rank %d has no lane %d '%s'" % (what, r, tid, name))
    if meta.get((ranks, None, "process_name")) != "driver":
        fail("%s: no driver process" % what)
    xs = [e for e in ev if e["ph"] == "X"]
    if any(e["ph"] not in ("X", "M") for e in ev):
        fail("%s: events other than complete and metadata ones" % what)
    lanes = {}
    for e in xs:
        if not (0 <= e["pid"] <= ranks) or e["tid"] not in (0, 1) or e["dur"] < 0 or e["ts"] < 0:
            fail("%s: event out of place: %s" % (what, e))
        lanes.setdefault((e["pid"], e["tid"]), []).append(e)
    for lane, es in lanes.items():
        es.sort(key=lambda e: (e["ts"], -e["dur"]))
        stack = []
        for e in es:
            while stack and stack[-1] <= e["ts"] + 1e-3:
                stack.pop()
            end = e["ts"] + e["dur"]
            if stack and end > stack[-1] + 1e-3:
                fail("%s: lane %s: '%s' at %.3f ends after the event it began in" %
                     (what, lane, e["name"], e["ts"]))
                break
            stack.append(end)
    return xs


def main():
    tmp = tempfile.mkdtemp()
    g = os.path.join(tmp, "g.xml")
    graph(g)
    out = os.path.join(tmp, "ok.json")
    warmup, iters = 1, 3
    t0 = time.monotonic()
    p = cf("run", g, "--warmup", str(warmup), "--iters", str(iters), "--verify", "--json",
           "--split", "bytes:80K",
           "--trace", out)
    wall_us = (time.monotonic() - t0) * 1e6
    t = load(out, "a run that succeeds")
    if t and p.returncode == 0:
        res = json.loads(p.stdout)
        xs = structure(t, "ok")
        if t["otherData"].get("ranks") != RANKS or t["otherData"].get("dropped_events") != 0:
            fail("otherData: %s" % t["otherData"])
        if "failed" in t["otherData"]:
            fail("a run that succeeded is marked failed")
        lo = min(e["ts"] for e in xs)
        hi = max(e["ts"] + e["dur"] for e in xs)
        if hi - lo > wall_us:
            fail("the events span %.0f us, the process ran %.0f us" % (hi - lo, wall_us))
        members = {"ar%d" % i for i in range(LAYERS)}
        buckets = 0
        for r in range(RANKS):
            mine = [e for e in xs if e["pid"] == r]
            its = [e for e in mine if e["cat"] == "iteration"]
            if sorted(e["args"]["iteration"] for e in its) != list(range(warmup + iters)):
                fail("rank %d: iteration events %s" % (r, [e["args"] for e in its]))
            if sum(e["cat"] == "compute" and e["tid"] == 0 for e in mine) != LAYERS * (warmup + iters):
                fail("rank %d: not one compute event per MatMul and iteration" % r)
            colls = [e for e in mine if e["cat"] == "collective"]
            if len(colls) != res["collectives_executed"] * (warmup + iters):
                fail("rank %d: %d collective events, %d collectives x %d iterations" %
                     (r, len(colls), res["collectives_executed"], warmup + iters))
            seen = set()
            for e in colls:
                a = e.get("args", {})
                if a.get("bytes", 0) <= 0 or not a.get("algorithm"):
                    fail("rank %d: collective without bytes or algorithm: %s" % (r, e))
                if a.get("op", "").startswith("Fused"):
                    buckets += 1
                    if not a.get("members") or not set(a["members"]) <= members:
                        fail("rank %d: bucket '%s' names members %s" % (r, e["name"], a.get("members")))
                    seen |= set(a["members"])
                else:
                    seen.add(e["name"])
            if seen != members:
                fail("rank %d: the collectives cover %s, not every AllReduce" % (r, sorted(seen)))
        if buckets == 0:
            fail("no bucket in the trace (the graph's AllReduces have fusion=1)")
        phases = {e["name"] for e in xs if e["pid"] == RANKS and e["cat"] == "phase"}
        for ph in ("read", "compile", "plan", "iterations", "verify"):
            if ph not in phases:
                fail("the driver has no '%s' phase (%s)" % (ph, sorted(phases)))
        # plan building and every kernel looked up, generated or from a cache
        plans = [e for e in xs if e["pid"] == RANKS and e["cat"] == "plan"]
        if not plans or any(e.get("args", {}).get("arena_bytes", 0) <= 0 for e in plans):
            fail("the driver has no plan events with arena_bytes: %s" % plans)
        kernels = [e for e in xs if e["pid"] == RANKS and e["cat"] == "kernel"]
        if not any(e["name"].startswith("cf_nary_mean_float32") for e in kernels):
            fail("no kernel event names the mean kernels the buckets need: %s"
                 % sorted(e["name"] for e in kernels))
        if any(e.get("args", {}).get("cache") not in (0, 1, 2) for e in kernels):
            fail("kernel events without args.cache 0, 1 or 2: %s" % kernels)

    # dot --trace: the graph's collectives filled by the waits the trace measured
    if t:
        dot = os.path.join(tmp, "g.dot")
        p = cf("compile", g, "--split", "bytes:80K", "-o", os.path.join(tmp, "fused.xml"))
        cf("dot", os.path.join(tmp, "fused.xml"), "--trace", out, "-o", dot)
        text = open(dot).read() if os.path.exists(dot) else ""
        waited = text.count("waited ")
        if waited != 3:  # the three buckets of --split bytes:80K
            fail("dot --trace labels %d collectives with their wait, not 3" % waited)
        if 'fillcolor="#ff3737"' not in text:
            fail("dot --trace: the longest wait is not filled deep red")
        bad = os.path.join(tmp, "bad.json")
        with open(bad, "w") as f:
            f.write('{"x": 1}')
        p = cf("dot", g, "--trace", bad, want=1)
        if "not a trace of collfuse run --trace" not in p.stderr:
            fail("dot --trace of a file that is no trace: %r" % p.stderr)

    # failures: the trace is written all the same, with the message
    cases = [
        ("a rank that fails", {"COLLFUSE_TEST_FAIL": "1:1:2"}, ["--timeout", "20"], "rank 1 failed"),
        ("a rank that vanishes", {"COLLFUSE_TEST_FAIL": "2:2:1"}, ["--timeout", "2"], "timed out"),
        ("a step that never returns", {"COLLFUSE_TEST_FAIL": "4:3:0"}, ["--timeout", "2"],
         "rank 3 timed out"),
    ]
    for what, env, extra, says in cases:
        path = os.path.join(tmp, "failed.json")
        if os.path.exists(path):
            os.unlink(path)
        old = dict(os.environ)
        os.environ.update(env)
        try:
            p = cf("run", g, "--trace", path, *extra, want=3, timeout=120)
        finally:
            os.environ.clear()
            os.environ.update(old)
        t = load(path, what)
        if not t:
            continue
        structure(t, what)
        why = t.get("otherData", {}).get("failed", "")
        if says not in why:
            fail("%s: otherData.failed is '%s', wanted '%s'" % (what, why, says))
    checks.finish("trace.py")


main()
