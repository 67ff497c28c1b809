#!/usr/bin/python3
"""DDP training step and gradient-sync time: gloo against collfuse's hook and compile_step.

    bench/ddp.py [--models resnet18,gpt] [--hooks none,gloo,collfuse,step,local] [--ranks 2] [--steps 6]
                 [--warmup 2] [--repeats 3] [--peer ROOT] [--peer-hook collfuse|step] [--json]

Runs examples/torch/ddp_train.py (gloo process group) for each model with
  none      DDP's own allreduce over gloo (step time only),
  gloo      torch's allreduce_hook over gloo (the same averaging, timed),
  collfuse  collfuse.torch.allreduce_hook,
  step      collfuse.torch.compile_step (no DDP; collfuse's buckets, --split
            ddp:25M: DDP's rule and cap without its 1 MB first bucket,
            each averaged once its last gradient is made),
interleaved, --repeats times each, started by torchrun when the library
has the shm world (collfuse's hook then joins it), else by mpirun (the hook
joins MPI's world). Per run: the median over the steps after --warmup of the step time
and of the sync time (the time per step during which some bucket is being
averaged, ddp_train.py --json's sync_ms) and of the CPU time (rank 0's
process, all threads, user and system: cpu ms, which other processes on
a busy machine move less than the step time), for step the exposed
communication (the time the step waits for its buckets after the backward
pass's last compute: exposed_ms), the median of exposed_ms / step time
per step (exposed/step: the issue's target is at most 0.10) and the MB of
gradients copied into buckets per step (copy MB: gradients no out= kernel
produced there), and rank 0's peak resident memory (peak MB: ru_maxrss,
every resident page counted, the peers' buckets that the shm world maps
and the shared libraries included) and the same peak with the pages
shared with other processes counted once across them (PSS MB: peak MB
less Rss - Pss of rank 0's /proc/self/smaps_rollup after its last step,
ddp_train.py's peak_pss_mb; other processes on the host that map the same
libraries lower it too, so compare rows of one run); the table shows the
median of the runs' medians and the ratios to gloo's, and, when local
was run, "gone": the share of gloo's exposed sync (gloo's step less
local's, the step without any communication) that the row's step removes,
(gloo step - step) / (gloo step - local step) of those medians (1: at the
floor, 0: as slow as gloo; issue 31 asks at least 0.8 of compile_step).
"slowest ms" is the median over the steps of the slower rank's step
time (ddp_train.py's slowest_step_ms: every rank's step times gathered
after the timed steps, the largest per step), and "gone/slowest" is gone
against local's slowest ms, (gloo step - step) / (gloo step - local's
slowest ms): the fair floor. Every hook that averages, gloo's included,
waits for the slower rank before its step ends, while local's step is
each rank's own, so the step times gone compares (rank 0's) carry the
ranks' skew that local's floor lacks; local's slower rank has that skew
as well. --peer ROOT adds a
row "peer": the collfuse hook of another checkout (its
ROOT/build/libcollfuse.so and ROOT/python, e.g. main's beside a branch's),
in the same rounds (--peer-hook step: its compile_step instead). Each run gets fresh ports (bench/ports.py: MASTER_PORT P with P + 1
free for the shm world's rendezvous, and torchrun's own) and is started
again on others when another process took one before the run bound it.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys

import ports

HERE = os.path.dirname(os.path.abspath(__file__))
EXAMPLE = os.path.join(HERE, "..", "examples", "torch", "ddp_train.py")
HOOKS = ("none", "gloo", "collfuse", "step", "local")


def has_shm():
    """Whether the collfuse library this runs on has the shm world (asked in a child: the
    library stays out of this process)."""
    code = "import collfuse.distributed as d; print(d.has_shm())"
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True).stdout.strip() == "True"


def command(model, hook, args, master_port, rdzv_port):
    """(argv, env) of one run."""
    env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(master_port))
    if hook == "peer":  # the other checkout's library and package (this one's example)
        env.update(COLLFUSE_LIBRARY=os.path.join(args.peer, "build", "libcollfuse.so"),
                   PYTHONPATH=os.path.join(args.peer, "python"))
        hook = args.peer_hook
    tail = [EXAMPLE, "--json", "--model", model, "--hook", hook, "--steps", str(args.warmup + args.steps),
            "--batch", str(args.batch)]
    if args.launcher == "torchrun":
        cmd = [sys.executable, "-m", "torch.distributed.run", "--nnodes", "1", "--rdzv_backend", "c10d",
               "--rdzv_endpoint", "127.0.0.1:%d" % rdzv_port, "--redirects", "2", "--tee", "2",
               "--nproc_per_node", str(args.ranks)] + tail
    else:
        root = ["--allow-run-as-root"] if os.getuid() == 0 else []
        cmd = ["mpirun"] + root + ["--oversubscribe", "--bind-to", "none", "--mca", "btl", "self,vader"]
        for k in ("MASTER_ADDR", "MASTER_PORT", "COLLFUSE_LIBRARY", "PYTHONPATH"):
            if k in env:
                cmd += ["-x", k]
        cmd += ["-np", str(args.ranks), sys.executable] + tail
    return cmd, env


def run(model, hook, args):
    def start(master_port, rdzv_port):
        cmd, env = command(model, hook, args, master_port, rdzv_port)
        return subprocess.run(cmd, env=env, capture_output=True, text=True)
    p = ports.on_free_ports(start, "bench/ddp.py")
    cmd = p.args
    lines = [ln for ln in p.stdout.splitlines() if ln.startswith("{")]
    if p.returncode != 0 or len(lines) != 1:
        sys.exit("bench/ddp.py: %s: exit %d\n%s%s" % (" ".join(cmd), p.returncode, p.stdout[-2000:], p.stderr[-2000:]))
    r = json.loads(lines[0])
    step = statistics.median(r["step_ms"][args.warmup:])
    sync = statistics.median(r["sync_ms"][args.warmup:]) if r["sync_ms"][0] is not None else None
    exposed = statistics.median(r["exposed_ms"][args.warmup:]) if r.get("exposed_ms") else None
    share = statistics.median(e / s for e, s in zip(r["exposed_ms"][args.warmup:], r["step_ms"][args.warmup:])) \
        if r.get("exposed_ms") else None
    copy_mb = statistics.median(r["copy_bytes"][args.warmup:]) / 2**20 if r.get("copy_bytes") else None
    cpu = statistics.median(r["cpu_ms"][args.warmup:]) if r.get("cpu_ms") else None  # a peer's may lack it
    slow = statistics.median(r["slowest_step_ms"][args.warmup:]) if r.get("slowest_step_ms") else None  # or this
    return step, sync, exposed, share, copy_mb, r["peak_mb"], cpu, r.get("peak_pss_mb"), slow, r["params"]


def gone(gloo_step, local_step, step):
    """The share of gloo's exposed gradient sync (its step less local's,
    the step without communication) that a step removes: (gloo - step) /
    (gloo - local); 1: the step is at the floor, 0: gloo's step, below 0:
    slower than gloo. None without local, or where gloo's step is not above
    local's (no sync exposed to remove)."""
    if local_step is None or gloo_step <= local_step:
        return None
    return (gloo_step - step) / (gloo_step - local_step)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--models", default="resnet18,gpt")
    ap.add_argument("--hooks", default=",".join(HOOKS), help="of %s (gloo is the reference)" % ",".join(HOOKS))
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--steps", type=int, default=6, help="timed steps per run")
    ap.add_argument("--warmup", type=int, default=2, help="untimed steps first")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--launcher", choices=("auto", "torchrun", "mpirun"), default="auto",
                    help="auto: torchrun when the library has the shm world, else mpirun")
    ap.add_argument("--peer", metavar="ROOT", help="also the collfuse hook of the checkout at ROOT (row 'peer')")
    ap.add_argument("--peer-hook", choices=("collfuse", "step"), default="collfuse",
                    help="what the peer row runs (default collfuse: the hook)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    if args.launcher == "auto":
        args.launcher = "torchrun" if has_shm() else "mpirun"
    hooks = args.hooks.split(",") + (["peer"] if args.peer else [])
    bad = [h for h in hooks if h not in HOOKS + ("peer",)]
    if bad or "gloo" not in hooks:
        sys.exit("bench/ddp.py: --hooks %s: of %s, gloo among them" % (args.hooks, ",".join(HOOKS)))
    rows = []
    for model in args.models.split(","):
        got = {h: [] for h in hooks}
        params = 0
        for _ in range(args.repeats):
            for h in hooks:
                step, sync, exposed, share, copy_mb, peak, cpu, pss, slow, params = run(model, h, args)
                got[h].append((step, sync, exposed, share, copy_mb, peak, cpu, pss, slow))

        def med(h, i):
            vals = [v[i] for v in got[h] if v[i] is not None]
            return statistics.median(vals) if vals else None
        for h in hooks:
            step, sync, exposed, share, copy_mb, peak, cpu, pss, slow = (med(h, i) for i in range(9))
            local, local_slow = (med("local", 0), med("local", 8)) if "local" in hooks else (None, None)
            rows.append({"model": model, "params": params, "hook": h, "step_ms": step, "slowest_step_ms": slow,
                         "sync_ms": sync,
                         "cpu_ms": cpu, "cpu_vs_gloo": cpu / med("gloo", 6) if cpu is not None else None,
                         "exposed_ms": exposed, "exposed_vs_step": share, "copy_mb": copy_mb, "peak_mb": peak,
                         "peak_pss_mb": pss, "step_vs_gloo": step / med("gloo", 0),
                         "sync_vs_gloo": sync / med("gloo", 1) if sync is not None else None,
                         "exposed_vs_gloo_sync": exposed / med("gloo", 1) if exposed is not None else None,
                         "gone": gone(med("gloo", 0), local, step),
                         "gone_vs_slowest": gone(med("gloo", 0), local_slow, step)})
    if args.json:
        print(json.dumps({"launcher": args.launcher, "ranks": args.ranks, "steps": args.steps, "warmup": args.warmup,
                          "repeats": args.repeats, "batch": args.batch, "rows": rows}))
        return
    print("%s, %d processes, batch %d per rank, median of %d runs of the median of %d steps after %d warm-up"
          % (args.launcher, args.ranks, args.batch, args.repeats, args.steps, args.warmup))
    print("%-9s %9s %-9s %10s %10s %8s %6s %10s %11s %8s %9s %8s %11s %18s %12s %8s %8s %7s" % (
        "model", "params", "hook", "step ms", "sync ms", "step/gloo", "gone", "slowest ms", "gone/slowest",
        "sync/gloo", "cpu ms", "cpu/gloo",
        "exposed ms", "exposed/gloo-sync", "exposed/step", "copy MB", "peak MB", "PSS MB"))
    opt = lambda v, f: "-" if v is None else f % v
    for r in rows:
        print("%-9s %9d %-9s %10.1f %10s %8.2f %6s %10s %11s %9s %9s %8s %11s %18s %12s %8s %8.0f %7s" % (
            r["model"], r["params"], r["hook"], r["step_ms"], opt(r["sync_ms"], "%.1f"), r["step_vs_gloo"],
            opt(r["gone"], "%.2f"), opt(r["slowest_step_ms"], "%.1f"), opt(r["gone_vs_slowest"], "%.2f"),
            opt(r["sync_vs_gloo"], "%.2f"), opt(r["cpu_ms"], "%.1f"), opt(r["cpu_vs_gloo"], "%.2f"),
            opt(r["exposed_ms"], "%.1f"), opt(r["exposed_vs_gloo_sync"], "%.2f"),
            opt(r["exposed_vs_step"], "%.3f"), opt(r["copy_mb"], "%.2f"), r["peak_mb"], opt(r["peak_pss_mb"], "%.0f")))


if __name__ == "__main__":
    main()
