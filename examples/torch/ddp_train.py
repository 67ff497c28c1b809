#!/usr/bin/python3
"""Data-parallel training with PyTorch DDP, gloo as the process group, with
or without collfuse's comm hook.

Start it the way training jobs start (one process per rank):

    torchrun --redirects 2 --tee 2 --nproc_per_node 2 examples/torch/ddp_train.py --model gpt --hook collfuse
    python3 -m torch.distributed.run --redirects 2 --tee 2 --nproc_per_node 2 examples/torch/ddp_train.py
    mpirun -np 2 -x MASTER_PORT=29533 python3 examples/torch/ddp_train.py --hook collfuse

(Debian's torch 1.13 under Python 3.11 needs torchrun's --redirects 2 --tee
2: its default 0 is lost by Std.from_str and the launcher fails in to_map.)
The collfuse hooks join the job through collfuse.distributed: the shm world
for the ranks of one host, MPI for an mpirun job across hosts.

Models: torchvision's ResNet-18 (Debian's python3-torchvision), or a small
GPT-style transformer written below. Each rank trains on its own synthetic
batches (random data from --seed and the rank), the model starts the same on
every rank (DDP broadcasts rank 0's parameters), SGD with momentum.

--hook none: DDP's own allreduce over gloo. --hook gloo: torch's
allreduce_hook (the same averaging over gloo, as a hook, so its time can be
measured). --hook collfuse / collfuse-bf16: collfuse.torch's allreduce_hook /
bf16_compress_hook. --hook local: no communication at all (each rank
keeps its own gradients, so the models drift apart): the step time
without any gradient sync, the floor for every other hook. --hook step: no DDP; collfuse.torch.compile_step
traces forward and backward into one graph, collfuse decides the buckets
(--split; by default ddp:25M, DDP's rule and cap without its 1 MB first
bucket: ddp:25M,first=1M is DDP's own) and averages each one as soon as its last
gradient is produced. Rank 0 prints each step's loss (the mean over ranks) or,
with --json, one JSON object: losses, step_ms (rank 0's step times),
slowest_step_ms (per step, the slowest rank's step time: every rank's
step_ms gathered after the last step), sync_ms (the time per
step during which some bucket is being averaged: from each hook call to its
future's completion, overlapping buckets counted once; null for --hook
none), exposed_ms (--hook step: the time each step waited for the buckets
after the backward pass's last compute), cpu_ms (the CPU time each step
took in rank 0's process, all its threads, user and system: less moved
by other processes than step_ms on a busy machine), copy_bytes (--hook step: the
bytes of gradients each step copied into buckets, those no out= kernel
produced there), peak_mb (rank 0's peak resident memory, ru_maxrss) and
peak_pss_mb (that peak with the pages rank 0 shares with other processes
counted once across them: ru_maxrss less what its resident pages at the
end share, Rss - Pss of /proc/self/smaps_rollup after the last step, the
libraries and, on the shm world, the peers' buckets it maps; other
processes on the host that map the same libraries lower it as well; null
where smaps_rollup is missing).
"""

import argparse
import json
import math
import os
import sys
import time

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP

HOOKS = ("none", "gloo", "collfuse", "collfuse-bf16", "step", "local")


# ---------------- a small GPT-style transformer ----------------

class Block(nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(d)
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        self.ln2 = nn.LayerNorm(d)
        self.fc = nn.Linear(d, 4 * d)
        self.out = nn.Linear(4 * d, d)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=2)
        q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
        att = (q @ k.transpose(-2, -1)) / math.sqrt(d // self.heads)
        mask = torch.ones(t, t, dtype=torch.bool, device=x.device).tril()
        att = att.masked_fill(~mask, float("-inf")).softmax(dim=-1)
        x = x + self.proj((att @ v).transpose(1, 2).reshape(b, t, d))
        return x + self.out(F.gelu(self.fc(self.ln2(x))))


class GPT(nn.Module):
    def __init__(self, vocab=512, d=128, layers=2, heads=4, ctx=64):
        super().__init__()
        self.tok = nn.Embedding(vocab, d)
        self.pos = nn.Parameter(torch.zeros(1, ctx, d))
        self.blocks = nn.Sequential(*[Block(d, heads) for _ in range(layers)])
        self.ln = nn.LayerNorm(d)
        self.head = nn.Linear(d, vocab, bias=False)

    def forward(self, idx):
        x = self.tok(idx) + self.pos[:, :idx.shape[1]]
        return self.head(self.ln(self.blocks(x)))


def make_model(name):
    if name == "gpt":
        return GPT()
    try:
        import torchvision
    except ImportError:
        sys.exit("ddp_train: --model resnet18 needs torchvision (Debian's python3-torchvision; "
                 "scripts/install-deps installs it)")
    return torchvision.models.resnet18(num_classes=10)


def batch(name, gen, size):
    """One synthetic batch (inputs, targets) for the model."""
    if name == "gpt":
        idx = torch.randint(0, 512, (size, 65), generator=gen)
        return idx[:, :-1], idx[:, 1:]
    return torch.randn(size, 3, 32, 32, generator=gen), torch.randint(0, 10, (size,), generator=gen)


def loss_of(name, out, target):
    if name == "gpt":
        return F.cross_entropy(out.reshape(-1, out.shape[-1]), target.reshape(-1))
    return F.cross_entropy(out, target)


# ---------------- the job ----------------

def join_from_launcher():
    """torchrun sets RANK/WORLD_SIZE/MASTER_*; under mpirun (or srun) take the rank from
    the launcher's variables and rendezvous on this host."""
    if "RANK" not in os.environ:
        for rank, size, local in (("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK"),
                                  ("SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID")):
            if rank in os.environ:
                os.environ["RANK"], os.environ["WORLD_SIZE"] = os.environ[rank], os.environ[size]
                os.environ.setdefault("LOCAL_RANK", os.environ.get(local, os.environ[rank]))
                break
        else:
            sys.exit("ddp_train: no launcher environment (RANK, OMPI_COMM_WORLD_RANK, SLURM_PROCID): "
                     "start it with torchrun --nproc_per_node N, mpirun or srun")
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29533")
    dist.init_process_group("gloo")


class Timed:
    """A comm hook wrapped to time it: each call's span (call to its future's
    completion) goes to .spans; ms() is the time covered by any span."""

    def __init__(self, hook):
        self.hook, self.spans = hook, []

        def timed_hook(state, bucket):  # DDP wants a function (it reads __name__)
            span = [time.perf_counter(), None]
            self.spans.append(span)

            def done(f):
                span[1] = time.perf_counter()
                return f.value()
            return self.hook(state, bucket).then(done)
        self.fn = timed_hook

    def ms(self):
        """The union of the spans in ms (overlapping buckets counted once)."""
        total, end = 0.0, None
        for a, b in sorted(self.spans):
            b = b if b is not None else a
            if end is None or a > end:
                total += b - a
                end = b
            elif b > end:
                total += b - end
                end = b
        return total * 1e3


def local_hook(state, bucket):
    """No averaging: each rank keeps its own gradients (the step without
    communication, the floor any hook's step time can reach; the ranks'
    models drift apart)."""
    fut = torch.futures.Future()
    fut.set_result(bucket.buffer())
    return fut


def hook_of(name):
    if name == "local":
        return local_hook
    if name == "gloo":
        from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
        return default_hooks.allreduce_hook
    import collfuse.torch
    return collfuse.torch.allreduce_hook if name == "collfuse" else collfuse.torch.bf16_compress_hook


def main(argv=None):
    ap = argparse.ArgumentParser(description="DDP training on synthetic data, gloo with or without collfuse's hook")
    ap.add_argument("--model", choices=("resnet18", "gpt"), default="gpt")
    ap.add_argument("--hook", choices=HOOKS, default="none")
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--batch", type=int, default=8, help="per-rank batch size")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--lr", type=float, default=0.01)
    ap.add_argument("--threads", type=int, default=0,
                    help="torch threads per rank (0: the cores divided among this host's ranks)")
    ap.add_argument("--bucket-mb", type=float, default=25, help="DDP's bucket_cap_mb")
    ap.add_argument("--deterministic", action="store_true",
                    help="collfuse hooks: reductions in a fixed order (bitwise the same run to run)")
    ap.add_argument("--split", default=None,
                    help="--hook step: collfuse's split (default: ddp:BUCKET_MB M, DDP's rule without its 1 MB first bucket)")
    ap.add_argument("--json", action="store_true", help="rank 0 prints one JSON object")
    ap.add_argument("--trace", metavar="FILE.json",
                    help="collfuse hooks: each rank's timeline of the buckets as a Chrome trace, FILE.rank<R>.json")
    args = ap.parse_args(argv)

    join_from_launcher()
    rank, world = dist.get_rank(), dist.get_world_size()
    local = int(os.environ.get("LOCAL_WORLD_SIZE", os.environ.get("OMPI_COMM_WORLD_LOCAL_SIZE", world)))
    torch.set_num_threads(args.threads or max(1, (os.cpu_count() or 1) // local))
    torch.manual_seed(args.seed)
    if args.hook == "step":
        return train_step(args, rank, world)
    model = DDP(make_model(args.model), bucket_cap_mb=args.bucket_mb, gradient_as_bucket_view=True)
    timed = None
    if args.hook.startswith("collfuse"):
        import collfuse.distributed
        collfuse.distributed.init(deterministic=args.deterministic)
    if args.trace and not args.hook.startswith("collfuse"):
        ap.error("--trace: with --hook collfuse or collfuse-bf16")
    if args.hook != "none":
        timed = Timed(hook_of(args.hook))
        state = None
        if args.trace:
            import collfuse.torch
            state = collfuse.torch.HookState(trace=args.trace)
        model.register_comm_hook(state, timed.fn)
    opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    gen = torch.Generator().manual_seed(args.seed * 1000 + rank)
    losses, step_ms, sync_ms, cpu_ms = [], [], [], []
    for _ in range(args.steps):
        x, y = batch(args.model, gen, args.batch)
        if timed:
            timed.spans = []
        t0, c0 = time.perf_counter(), cpu_s()
        opt.zero_grad(set_to_none=False)
        loss = loss_of(args.model, model(x), y)
        loss.backward()
        opt.step()
        step_ms.append((time.perf_counter() - t0) * 1e3)
        cpu_ms.append((cpu_s() - c0) * 1e3)
        sync_ms.append(timed.ms() if timed else None)
        mean = loss.detach().clone()
        dist.all_reduce(mean)  # for printing only: the mean loss over ranks
        losses.append(mean.item() / world)
        if rank == 0 and not args.json:
            print("step %d loss %.6f" % (len(losses) - 1, losses[-1]), flush=True)
    finish(args, rank, world, model, losses, step_ms, sync_ms, cpu_ms, None)


def cpu_s():
    """This process's CPU time so far (all threads, user and system), in s."""
    import resource
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def shared_mb():
    """MB of this process's resident pages counted in other processes too
    (Rss - Pss of /proc/self/smaps_rollup), or None where it is missing."""
    try:
        with open("/proc/self/smaps_rollup") as f:
            kb = {k: int(v.split()[0]) for k, v in (ln.split(":", 1) for ln in f if ":" in ln)
                  if k in ("Rss", "Pss")}
        return (kb["Rss"] - kb["Pss"]) / 1024
    except (OSError, KeyError, ValueError):
        return None


_KEPT = []  # finish's gathered tensors (see there)


def finish(args, rank, world, model, losses, step_ms, sync_ms, cpu_ms, exposed_ms, copy_bytes=None):
    # every rank's step times, gathered after the timed steps: the slower rank's per step. The
    # tensors are kept to the end of the process: dropped by Python before a gloo worker thread
    # drops its reference, that thread frees them, which needs the GIL, and at exit the
    # interpreter joins the thread while holding it (all_gather_object's own tensors hung 2
    # runs in about 40 so)
    mine = torch.tensor(step_ms, dtype=torch.float64)
    everyone = [torch.empty_like(mine) for _ in range(world)]
    _KEPT.append((mine, everyone))
    dist.all_gather(everyone, mine)
    slowest_ms = torch.stack(everyone).max(0).values.tolist()
    if rank == 0 and args.json:
        import resource
        peak, shared = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, shared_mb()
        print(json.dumps({"model": args.model, "hook": args.hook, "ranks": world, "steps": args.steps,
                          "batch": args.batch, "losses": losses, "step_ms": step_ms,
                          "slowest_step_ms": slowest_ms, "sync_ms": sync_ms,
                          "cpu_ms": cpu_ms, "exposed_ms": exposed_ms, "copy_bytes": copy_bytes, "peak_mb": peak,
                          "peak_pss_mb": None if shared is None else peak - shared,
                          "params": sum(p.numel() for p in model.parameters())}), flush=True)
    dist.barrier()
    dist.destroy_process_group()


def train_step(args, rank, world):
    """--hook step: collfuse.torch.compile_step, no DDP."""
    import collfuse.torch
    model = make_model(args.model)
    opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    example = batch(args.model, torch.Generator().manual_seed(12345), args.batch)
    step = collfuse.torch.compile_step(model, lambda out, y: loss_of(args.model, out, y), example, optimizer=opt,
                                       split=args.split or "ddp:%gM" % args.bucket_mb,
                                       deterministic=args.deterministic)
    gen = torch.Generator().manual_seed(args.seed * 1000 + rank)
    losses, step_ms, sync_ms, cpu_ms, exposed_ms, copy_bytes = [], [], [], [], [], []
    for _ in range(args.steps):
        x, y = batch(args.model, gen, args.batch)
        t0, c0 = time.perf_counter(), cpu_s()
        loss = step(x, y)
        step_ms.append((time.perf_counter() - t0) * 1e3)
        cpu_ms.append((cpu_s() - c0) * 1e3)
        sync_ms.append(step.sync_ms)
        exposed_ms.append(step.exposed_ms)
        copy_bytes.append(step.copy_bytes)
        mean = loss.detach().clone()
        dist.all_reduce(mean)  # for printing only: the mean loss over ranks
        losses.append(mean.item() / world)
        if rank == 0 and not args.json:
            print("step %d loss %.6f" % (len(losses) - 1, losses[-1]), flush=True)
    finish(args, rank, world, model, losses, step_ms, sync_ms, cpu_ms, exposed_ms, copy_bytes)


if __name__ == "__main__":
    main()
