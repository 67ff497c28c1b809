#!/usr/bin/python3
"""AllReduce on processes of one host: collfuse's shm world against gloo.

    bench/shm_vs_gloo.py [--collfuse build/collfuse] [--ranks 2,4] [--sizes 8,64K,1M,16M,64M,256M]
                         [--repeats 3] [--mpi] [--distributed] [--no-bench] [--json]

For each process count, --repeats times, alternating: `collfuse bench
allreduce --backend shm --ranks N --json` (float32 sum, out of place: the
algorithm auto picks, and the memory-traffic bound it measures; with --mpi
also OpenMPI's MPI_Allreduce, which that command runs first) and N Python
processes of torch.distributed's gloo (`all_reduce` of a float32 tensor,
SUM) started here, each size timed the same way: a warm-up, then loops of
K back-to-back calls between two barriers, the median loop divided by K,
on rank 0. The table has each cell's median over the repeats; busbw =
bytes / time * 2(n-1)/n (nccl-tests'), shm/gloo = gloo's time / collfuse's.
With --distributed, gloo's processes also time collfuse.distributed's
all_reduce (in place, on the same tensor: the DDP hook's call, with its
Python layer, its copies into the shm world's memory and out, and
cf_executable_run_rank's per-call work), alternating with gloo's loop by
loop: cfd/gloo = collfuse.distributed's time / gloo's (COLLFUSE_LIBRARY and
PYTHONPATH name the library and the package). --no-bench leaves out
collfuse's own bench (the shm, bound and mpi columns read 0).
gloo needs /usr/bin/python3's torch (Debian's python3-torch).
"""

import argparse
import json
import os
import statistics
import subprocess
import sys

import ports

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_SIZES = "8,64,512,4K,32K,64K,256K,1M,4M,16M,64M,256M"


def parse_size(text):
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    t = text.strip().upper()
    return int(t[:-1]) * mult[t[-1]] if t[-1] in mult else int(t)


def size_text(b):
    for unit, m in (("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if b >= m and b % m == 0:
            return "%d%s" % (b // m, unit)
    return "%dB" % b


def iters_for(b):
    """Calls per loop: about 64 MiB per rank, 1..200 (as the C bench, smaller)."""
    return max(1, min(200, (64 << 20) // max(b, 1)))


def busbw(b, us, n):
    return b / (us * 1e-6) / 1e9 * 2 * (n - 1) / n if us else 0.0


# ---------------- gloo: one worker per rank ----------------

def worker(rank, n, port, sizes, loops, distributed):
    """gloo's all_reduce per size on this rank; with distributed also
    collfuse.distributed.all_reduce (in place, as the DDP hook calls it) in
    the same processes, the two alternating loop by loop."""
    import torch
    import torch.distributed as dist
    import time
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method="tcp://127.0.0.1:%d" % port, rank=rank, world_size=n)
    calls = {"gloo": dist.all_reduce}
    if distributed:
        import collfuse.distributed as cfd
        cfd.init()  # from torch's default group
        calls["cfd"] = cfd.all_reduce
    out = {name: {} for name in calls}
    for b in sizes:
        x = torch.rand(max(1, b // 4), dtype=torch.float32)
        k = iters_for(b)
        for call in calls.values():
            for _ in range(min(k, 3)):
                call(x)
        times = {name: [] for name in calls}
        for _ in range(loops):
            for name, call in calls.items():
                dist.barrier()
                t0 = time.perf_counter()
                for _ in range(k):
                    call(x)
                dist.barrier()
                times[name].append((time.perf_counter() - t0) / k * 1e6)
        for name in calls:
            out[name][str(b)] = statistics.median(times[name])
    if distributed:
        cfd.destroy()
    dist.destroy_process_group()
    if rank == 0:
        print(json.dumps(out))


def run_gloo(n, sizes, loops, distributed):
    """{"gloo": {bytes: us}} and with distributed "cfd" too (worker), the
    workers started again on another port when one was taken meanwhile."""
    arg = ",".join(str(b) for b in sizes)

    def start(port, _):
        procs = [subprocess.Popen([sys.executable, __file__, "--worker", "%d,%d,%d,%d,%d" % (r, n, port, loops,
                                                                                           distributed), arg],
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for r in range(n)]
        outs = [p.communicate() for p in procs]
        rcs = [p.returncode for p in procs]
        return subprocess.CompletedProcess(procs[0].args, next((rc for rc in rcs if rc), 0), outs[0][0],
                                           "".join(err for _, err in outs))
    p = ports.on_free_ports(start, "shm_vs_gloo")
    if p.returncode:
        sys.exit("shm_vs_gloo: a gloo worker failed (exit %d)\n%s" % (p.returncode, p.stderr[-3000:]))
    got = json.loads(p.stdout.strip().splitlines()[-1])
    return {name: {int(b): us for b, us in t.items()} for name, t in got.items()}


# ---------------- collfuse: its own bench ----------------

def run_collfuse(cf, n, sizes, loops, mpi):
    cmd = [cf, "bench", "allreduce", "--backend", "shm", "--ranks", str(n), "--json", "--loops", str(loops),
           "--sizes", ",".join(str(b) for b in sizes)]
    if not mpi:
        cmd.append("--no-mpi")
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode:
        sys.exit("shm_vs_gloo: %s: exit %d\n%s" % (" ".join(cmd), p.returncode, p.stderr))
    d = json.loads([l for l in p.stdout.splitlines() if l.startswith("{")][-1])
    res = {}
    for r in d["results"]:
        auto = r["collfuse"].get("auto") or {}
        res[r["bytes"]] = {"us": auto.get("us", 0), "algo": r.get("auto_algo", "?"),
                           "bound": (r.get("bound") or {}).get("us", 0),
                           "mpi": (r.get("mpi") or {}).get("us", 0)}
    return res


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "--worker":
        r, n, port, loops, distributed = (int(v) for v in sys.argv[2].split(","))
        worker(r, n, port, [int(b) for b in sys.argv[3].split(",")], loops, distributed)
        return
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--collfuse", default=os.path.join(HERE, "..", "build", "collfuse"))
    ap.add_argument("--ranks", default="2,4")
    ap.add_argument("--sizes", default=DEFAULT_SIZES)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--loops", type=int, default=3)
    ap.add_argument("--mpi", action="store_true", help="also OpenMPI's MPI_Allreduce (collfuse's bench)")
    ap.add_argument("--distributed", action="store_true",
                    help="also collfuse.distributed.all_reduce in gloo's processes (in place, as the DDP hook)")
    ap.add_argument("--no-bench", action="store_true", help="leave out collfuse's bench (the shm column)")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    sizes = [parse_size(s) for s in a.sizes.split(",")]
    report = []
    for n in (int(v) for v in a.ranks.split(",")):
        cf_runs, gloo_runs = [], []
        for _ in range(a.repeats):  # alternating, so that load drifts hit both alike
            if not a.no_bench:
                cf_runs.append(run_collfuse(a.collfuse, n, sizes, a.loops, a.mpi))
            gloo_runs.append(run_gloo(n, sizes, a.loops, a.distributed))
        for b in sizes:
            med = lambda key: statistics.median(r[b][key] for r in cf_runs) if cf_runs else 0
            row = {"ranks": n, "bytes": b, "shm_us": med("us"), "shm_algo": cf_runs[-1][b]["algo"] if cf_runs else "-",
                   "bound_us": med("bound"), "mpi_us": med("mpi") if a.mpi else None,
                   "gloo_us": statistics.median(r["gloo"][b] for r in gloo_runs),
                   "cfd_us": statistics.median(r["cfd"][b] for r in gloo_runs) if a.distributed else None}
            report.append(row)
    if a.json:
        print(json.dumps({"bench": "shm_vs_gloo", "repeats": a.repeats, "results": report}))
        return
    print("AllReduce float32 sum, out of place; medians of %d runs; busbw GB/s = bytes/time * 2(n-1)/n"
          % a.repeats)
    head = "%5s %6s | %6s %10s %7s | %10s %7s | %8s | %6s" % (
        "ranks", "size", "auto", "shm us", "busbw", "gloo us", "busbw", "shm/gloo", "bound")
    if a.mpi:
        head += " | %10s %7s %7s" % ("mpi us", "busbw", "shm/mpi")
    if a.distributed:
        head += " | %10s %7s %8s" % ("cfd us", "busbw", "cfd/gloo")
    print(head)
    for r in report:
        n, b = r["ranks"], r["bytes"]
        line = "%5d %6s | %6s %10.1f %7.2f | %10.1f %7.2f | %8.1f | %6.2f" % (
            n, size_text(b), r["shm_algo"], r["shm_us"], busbw(b, r["shm_us"], n), r["gloo_us"],
            busbw(b, r["gloo_us"], n), r["gloo_us"] / r["shm_us"] if r["shm_us"] else 0,
            r["bound_us"] / r["shm_us"] if r["shm_us"] and r["bound_us"] else 0)
        if a.mpi:
            mu = r["mpi_us"] or 0
            line += " | %10.1f %7.2f %7.2f" % (mu, busbw(b, mu, n), mu / r["shm_us"] if r["shm_us"] and mu else 0)
        if a.distributed:
            cu = r["cfd_us"]
            line += " | %10.1f %7.2f %8.3f" % (cu, busbw(b, cu, n), cu / r["gloo_us"] if r["gloo_us"] else 0)
        print(line)


if __name__ == "__main__":
    main()
