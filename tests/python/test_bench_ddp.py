#!/usr/bin/python3
"""bench/ddp.py's "gone" column: (gloo step - step) / (gloo step - local
step) of the medians, and "gone/slowest" against local's slower rank's
step (the median of ddp_train.py's slowest_step_ms), in the JSON rows and
the table, only where local ran; the peer row's hook (--peer-hook).
The runs are stand-ins (no torch needed); bench/ddp.py's ports are
test_ports.py's."""

import contextlib
import importlib.util
import io
import json
import os
import random
import sys

from checks import fail

HERE = os.path.dirname(os.path.abspath(__file__))
BENCH = os.path.join(HERE, "..", "..", "bench")
sys.path.insert(0, BENCH)  # bench/ddp.py imports bench/ports.py
spec = importlib.util.spec_from_file_location("bench_ddp", os.path.join(BENCH, "ddp.py"))
ddp = importlib.util.module_from_spec(spec)
spec.loader.exec_module(ddp)


def check_gone():
    """gone() and the column bench/ddp.py prints from stand-in runs: random
    step times per hook and run, checked against the medians' formula."""
    rnd = random.Random(31)
    if ddp.gone(40.0, None, 35.0) is not None or ddp.gone(30.0, 33.0, 31.0) is not None:
        fail("gone: a value without local, or with gloo's step not above local's")
    if ddp.gone(43.3, 33.2, 33.2) != 1.0 or ddp.gone(43.3, 33.2, 43.3) != 0.0:
        fail("gone: at the floor %r (want 1), at gloo's step %r (want 0)"
             % (ddp.gone(43.3, 33.2, 33.2), ddp.gone(43.3, 33.2, 43.3)))
    times = {h: [rnd.uniform(lo, lo + 6) for _ in range(3)]
             for h, lo in (("gloo", 40.0), ("local", 30.0), ("collfuse", 34.0), ("step", 32.0))}
    slowest = {h: [v + rnd.uniform(0.5, 3) for v in vs] for h, vs in times.items()}  # the slower rank's
    calls = {h: 0 for h in times}

    def fake_run(model, hook, args):  # step, sync, exposed, share, copy MB, peak, cpu, pss, slowest, params
        v, w = times[hook][calls[hook]], slowest[hook][calls[hook]]
        calls[hook] += 1
        return v, 1.0, None, None, None, 100.0, v, 90.0, w, 1234
    med = lambda h: sorted(times[h])[1]
    med_slowest = lambda h: sorted(slowest[h])[1]
    for hooks, with_local in (("gloo,local,collfuse,step", True), ("gloo,collfuse,step", False)):
        def bench(*extra):
            for h in calls:
                calls[h] = 0
            saved = ddp.run, sys.argv
            ddp.run, sys.argv = fake_run, ["ddp.py", "--models", "gpt", "--hooks", hooks, "--launcher", "torchrun"] + \
                list(extra)
            out = io.StringIO()
            try:
                with contextlib.redirect_stdout(out):
                    ddp.main()
            finally:
                ddp.run, sys.argv = saved
            return out.getvalue()
        rows = {r["hook"]: r for r in json.loads(bench("--json"))["rows"]}
        table = bench().splitlines()
        step_line = [ln for ln in table if ln.split()[2:3] == ["step"]]
        head = table[1].split()
        if head[8:12] != ["gone", "slowest", "ms", "gone/slowest"] or len(step_line) != 1 or \
                step_line[0].split()[6:9] != [("%.2f" % rows["step"]["gone"] if with_local else "-"),
                                              "%.1f" % med_slowest("step"),
                                              ("%.2f" % rows["step"]["gone_vs_slowest"] if with_local else "-")]:
            fail("--hooks %s: the table's gone, slowest ms and gone/slowest columns:\n%s" % (hooks, "\n".join(table)))
        for h, r in rows.items():
            want = (med("gloo") - med(h)) / (med("gloo") - med("local")) if with_local else None
            if (want is None) != (r["gone"] is None) or (want is not None and abs(r["gone"] - want) > 1e-12):
                fail("--hooks %s: %s's gone %r, want %r" % (hooks, h, r["gone"], want))
            fair = (med("gloo") - med(h)) / (med("gloo") - med_slowest("local")) if with_local else None
            if (fair is None) != (r["gone_vs_slowest"] is None) or \
                    (fair is not None and abs(r["gone_vs_slowest"] - fair) > 1e-12):
                fail("--hooks %s: %s's gone against local's slower rank %r, want %r"
                     % (hooks, h, r["gone_vs_slowest"], fair))
            if abs(r["slowest_step_ms"] - med_slowest(h)) > 1e-12:
                fail("--hooks %s: %s's slowest_step_ms %r, want %r" % (hooks, h, r["slowest_step_ms"],
                                                                     med_slowest(h)))


def check_peer():
    """The peer row runs the other checkout's library and package with the
    collfuse hook, or with --peer-hook step its compile_step."""
    import argparse
    for peer_hook in ("collfuse", "step"):
        args = argparse.Namespace(peer="/else/where", peer_hook=peer_hook, warmup=1, steps=2, batch=4, ranks=2,
                                  launcher="torchrun")
        cmd, env = ddp.command("gpt", "peer", args, 29600, 29602)
        hook = cmd[cmd.index("--hook") + 1]
        if hook != peer_hook or env.get("COLLFUSE_LIBRARY") != "/else/where/build/libcollfuse.so" or \
                env.get("PYTHONPATH") != "/else/where/python":
            fail("--peer-hook %s: the peer runs --hook %s with %s, %s" % (peer_hook, hook, env.get("COLLFUSE_LIBRARY"),
                                                                        env.get("PYTHONPATH")))
        cmd, env = ddp.command("gpt", "step", args, 29600, 29602)
        if cmd[cmd.index("--hook") + 1] != "step" or env.get("PYTHONPATH") == "/else/where/python":
            fail("--peer-hook %s: this checkout's step row runs %s with PYTHONPATH %s"
                 % (peer_hook, cmd, env.get("PYTHONPATH")))


def main():
    check_gone()
    check_peer()
    print("bench/ddp.py: the gone, slowest ms and gone/slowest columns from stand-in runs; the peer's hook")


if __name__ == "__main__":
    main()
