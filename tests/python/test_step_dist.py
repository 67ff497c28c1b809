#!/usr/bin/python3
"""collfuse.torch.compile_step on 2 processes under torchrun (the shm
world), each rank: a small model with BatchNorm trained 3 steps gives the
losses and parameters of the same model under DDP over gloo (1e-5
relative), and two deterministic runs are bitwise the same; each bucket is
started before the backward pass's compute ends; a tensor-parallel MLP
(matmul_reduce_scatter and all_gather leaves, the first weight sharded and
local) matches the single-process model step by step, its
matmul_reduce_scatter run as collfuse's fused op (checked on its own
against float64 too); two leaves of one fusion_id run as one all_reduce
and give gloo's forward; last, a rank whose
model differs makes every rank fail with a cross-rank mismatch. Then the
same under collfuse's own launcher (`collfuse launch --ranks 2`, no
torch.distributed): data parallelism equals one process on the
concatenated batches. Argument: the collfuse command line. Skips (77)
without torch or without the shm world."""

import copy
import os
import subprocess
import sys
import tempfile

try:
    import torch
except ImportError:
    print("test_step_dist: no torch (python3-torch): skipped")
    sys.exit(77)

import collfuse.distributed as cfd
from checks import fail

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bench"))
import ports  # noqa: E402 (bench/ports.py: a run started again when a port was taken meanwhile)

SCALE = int(os.environ.get("COLLFUSE_TEST_TIMEOUT_SCALE", "1") or 1)


def close(a, b, rtol):
    return abs(a - b) <= rtol * max(abs(a), abs(b), 1e-30)


def mlp(seed, hidden=24):
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(12, hidden), torch.nn.BatchNorm1d(hidden), torch.nn.ReLU(),
                               torch.nn.Linear(hidden, hidden), torch.nn.Tanh(), torch.nn.Linear(hidden, 3))


def batch(rank, k):
    g = torch.Generator().manual_seed(1000 * rank + k)
    return torch.randn(10, 12, generator=g), torch.randn(10, 3, generator=g)


def run_step(rank, seed, steps, update_per_bucket=None):
    """update_per_bucket None: SGD steps once per bucket as its average
    ends; False: once after every bucket, and the last bucket is averaged
    on the calling thread (nothing left to overlap it)."""
    import collfuse.torch as ct
    m = mlp(seed + rank)  # different per rank: compile_step starts every rank from rank 0's
    opt = torch.optim.SGD(m.parameters(), lr=0.05, momentum=0.9)
    step = ct.compile_step(m, torch.nn.functional.mse_loss, batch(rank, 0), optimizer=opt, split="bytes:1K",
                           update_per_bucket=update_per_bucket)
    if step.update_per_bucket != (update_per_bucket is None) or step.inline_last != (update_per_bucket is False):
        fail("rank %d, update_per_bucket=%r: per bucket %r, the last bucket inline %r"
             % (rank, update_per_bucket, step.update_per_bucket, step.inline_last))
    # rank 0's parameters came through the buckets, one broadcast per bucket (a broadcast per
    # parameter kept an executable and its arena per shape); the buffers (BatchNorm's) their own
    sizes = {f.numel() for f in step.flat} | {n for b in m.buffers() for n in (b.numel(), b.numel() * b.element_size())}
    per = [k for k in cfd._world.cache if k[0] == "broadcast" and k[2] not in sizes]
    if per:
        fail("rank %d: parameters broadcast one by one (%r), not through the buckets %r" % (rank, per, sorted(sizes)))
    losses = []
    for k in range(steps):
        losses.append(step(*batch(rank, k)).item())
        if len(step.spans) < 2 or not all(s[0] <= step.t_backward_end for s in step.spans) or \
                any(s[1] is None for s in step.spans) or (step.inline_last and step.spans[-1][0] != step.t_backward_end):
            fail("rank %d: buckets %s started after the backward pass ended (%s)"
                 % (rank, step.spans, step.t_backward_end))
    if cfd.backend() == "shm" and (not all(cfd.registered(f) for f in step.flat) or cfd.last_copies() != (0, 0)):
        fail("rank %d: compile_step's buckets on shm: registered %r, the last average's copies %r, want "
             "all registered and (0, 0)" % (rank, [cfd.registered(f) for f in step.flat], cfd.last_copies()))
    return losses, m


class TP(torch.nn.Module):
    """relu(x @ w1) @ w2 with w1's rows split over the ranks: each rank
    multiplies its columns of x by its rows of w1, reduce-scatters the
    product over the batch, and all-gathers the activations."""

    def __init__(self, w1, w2, rank, n):
        super().__init__()
        d = w1.shape[0] // n
        self.cols = slice(rank * d, (rank + 1) * d)
        self.w1 = torch.nn.Parameter(w1[self.cols].clone())
        self.w2 = torch.nn.Parameter(w2.clone())

    def forward(self, x):
        import collfuse.fx as cfx
        h = torch.relu(cfx.matmul_reduce_scatter(x[:, self.cols].contiguous(), self.w1))
        return cfx.all_gather(h, layout="concat") @ self.w2


class Leaves(torch.nn.Module):
    """Two sum leaves of one fusion_id (one bucket): the first one's
    consumer precedes the second one's operand in the traced order."""

    def __init__(self):
        super().__init__()
        self.a, self.b, self.c = (torch.nn.Parameter(torch.randn(*s) / 3) for s in ((8, 6), (6, 4), (8, 4)))

    def forward(self, x):
        import collfuse.fx as cfx
        h = torch.relu(cfx.all_reduce(x @ self.a, "sum", fusion=2, fusion_id=1)) @ self.b
        return h + cfx.all_reduce(torch.tanh(x @ self.c), "sum", fusion=2, fusion_id=1)


def child():
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP
    import collfuse.torch as ct
    dist.init_process_group("gloo")
    rank, n = dist.get_rank(), dist.get_world_size()
    cfd.init(deterministic=True)
    torch.set_num_threads(1)

    # against DDP over gloo
    losses, m = run_step(rank, 5, 3)
    ref = DDP(mlp(5), broadcast_buffers=False)
    opt = torch.optim.SGD(ref.parameters(), lr=0.05, momentum=0.9)
    for k in range(3):
        x, y = batch(rank, k)
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(ref(x), y)
        loss.backward()
        opt.step()
        if not close(losses[k], loss.item(), 1e-5):
            fail("rank %d step %d: compile_step's loss %r, DDP's %r" % (rank, k, losses[k], loss.item()))
    for (name, p), q in zip(m.named_parameters(), ref.module.parameters()):
        if not torch.allclose(p, q, rtol=1e-5, atol=1e-6):
            fail("rank %d: after 3 steps %s differs from DDP's by %g" % (rank, name, (p - q).abs().max()))
    # deterministic: bitwise the same run to run, and the same with one optimizer step after every
    # bucket (the last bucket averaged on the calling thread) as with a step per bucket
    again, m2 = run_step(rank, 5, 3)
    if again != losses or any(not torch.equal(p, q) for p, q in zip(m.parameters(), m2.parameters())):
        fail("rank %d: two deterministic runs differ: %r vs %r" % (rank, losses, again))
    whole, m3 = run_step(rank, 5, 3, update_per_bucket=False)
    if whole != losses or any(not torch.equal(p, q) for p, q in zip(m.parameters(), m3.parameters())):
        fail("rank %d: one optimizer step after every bucket (the last inline) %r, a step per bucket %r"
             % (rank, whole, losses))

    # tensor parallelism against one process
    torch.manual_seed(9)
    w1, w2 = torch.randn(8, 16) / 3, torch.randn(16, 5) / 4
    single = torch.nn.Sequential()
    single.w1, single.w2 = torch.nn.Parameter(w1.clone()), torch.nn.Parameter(w2.clone())
    tp = TP(w1, w2, rank, n)
    opt_tp = torch.optim.SGD(tp.parameters(), lr=0.1)
    opt_1 = torch.optim.SGD([single.w1, single.w2], lr=0.1)
    g = torch.Generator().manual_seed(77)  # the same data on every rank
    xs = [(torch.randn(6, 8, generator=g), torch.randn(6, 5, generator=g)) for _ in range(3)]
    step = ct.compile_step(tp, torch.nn.functional.mse_loss, xs[0], optimizer=opt_tp, local={"w1"})
    for k, (x, y) in enumerate(xs):
        got = step(x, y).item()
        opt_1.zero_grad()
        want = torch.nn.functional.mse_loss(torch.relu(x @ single.w1) @ single.w2, y)
        want.backward()
        opt_1.step()
        if not close(got, want.item(), 1e-5):
            fail("rank %d tensor-parallel step %d: loss %r, one process %r" % (rank, k, got, want.item()))
    if not torch.allclose(tp.w1, single.w1[tp.cols], rtol=1e-5, atol=1e-6) or \
            not torch.allclose(tp.w2, single.w2, rtol=1e-5, atol=1e-6):
        fail("rank %d: tensor-parallel weights differ from one process's" % rank)

    # matmul_reduce_scatter ran as collfuse's fused MatmulReduceScatter, and
    # that op on its own gives the float64 reference within 1e-5
    if ("matmul_reduce_scatter", "float32", 6, 4, 16, 0) not in cfd._world.cache:
        fail("rank %d: the step's matmul_reduce_scatter did not run the fused op (cached: %s)"
             % (rank, [k for k in cfd._world.cache if k[0] != "all_reduce"]))
    g = torch.Generator().manual_seed(300 + rank)
    for m_, k_, n_ in ((8, 5, 3), (64, 48, 40), (2, 1, 7)):
        x1, x2 = torch.randn(m_, k_, generator=g), torch.randn(k_, n_, generator=g)
        out = torch.empty(m_ // n, n_)
        cfd.matmul_reduce_scatter(out, x1, x2)
        full = x1.double() @ x2.double()
        dist.all_reduce(full)
        want = full[rank * (m_ // n):(rank + 1) * (m_ // n)]
        err = (out.double() - want).abs().max().item() / want.abs().max().item()
        if err > 1e-5:
            fail("rank %d: matmul_reduce_scatter %dx%dx%d: relative error %g" % (rank, m_, k_, n_, err))

    # explicit leaves the compile fused run as one all_reduce of 5x6 + 5x4 elements
    torch.manual_seed(11)
    lv = Leaves()
    g = torch.Generator().manual_seed(500 + rank)
    x, y = torch.randn(5, 8, generator=g), torch.randn(5, 4, generator=g)
    step = ct.compile_step(lv, torch.nn.functional.mse_loss, (x, y))
    got = step(x, y).item()
    with torch.no_grad():
        h1, h2 = x @ lv.a, torch.tanh(x @ lv.c)
        dist.all_reduce(h1)
        dist.all_reduce(h2)
        want = torch.nn.functional.mse_loss(torch.relu(h1) @ lv.b + h2, y).item()
    if len(step.fused_leaves) != 1 or not close(got, want, 1e-5):
        fail("rank %d: fused leaves %s: loss %r, gloo's %r" % (rank, step.fused_leaves, got, want))
    if not any(k[:3] == ("all_reduce", "float32", 50) for k in cfd._world.cache):
        fail("rank %d: no all_reduce of the 50 elements of the fused leaves" % rank)

    # a rank whose graph differs: every rank fails, naming the mismatch
    other = mlp(1, hidden=24 if rank == 0 else 20)
    try:
        ct.compile_step(other, torch.nn.functional.mse_loss, batch(rank, 0))
    except RuntimeError as e:
        if "cross-rank mismatch" not in str(e):
            fail("rank %d: mismatch error %r" % (rank, str(e)))
    else:
        fail("rank %d: ranks with different models compiled" % rank)
    open(os.path.join(os.environ["CF_OK_DIR"], str(rank)), "w").close()


def launched():
    """A rank started by `collfuse launch` (no torch.distributed): the step
    joins the job from COLLFUSE_RANK; an MLP trained 3 steps on per-rank
    batches equals one process trained on their concatenation."""
    import collfuse.torch as ct
    rank, n = int(os.environ["COLLFUSE_RANK"]), int(os.environ["COLLFUSE_WORLD_SIZE"])
    torch.set_num_threads(1)
    mk = lambda: torch.nn.Sequential(torch.nn.Linear(12, 16), torch.nn.Tanh(), torch.nn.Linear(16, 3))
    torch.manual_seed(21 + rank)
    m = mk()  # rank 0's is broadcast
    torch.manual_seed(21)
    one = mk()
    opt, opt1 = torch.optim.SGD(m.parameters(), lr=0.1), torch.optim.SGD(one.parameters(), lr=0.1)
    step = ct.compile_step(m, torch.nn.functional.mse_loss, batch(rank, 0), optimizer=opt, split="bytes:512")
    if not cfd.is_initialized() or cfd.launcher()[0] != "collfuse run" or step.world_size != n:
        fail("rank %d: compile_step under collfuse launch: world %d, launcher %s" % (rank, step.world_size,
                                                                                    cfd.launcher()))
    for k in range(3):
        step(*batch(rank, k))
        xs, ys = zip(*(batch(r, k) for r in range(n)))
        opt1.zero_grad()
        torch.nn.functional.mse_loss(one(torch.cat(xs)), torch.cat(ys)).backward()
        opt1.step()
    for (name, p), q in zip(m.named_parameters(), one.parameters()):
        if not torch.allclose(p, q, rtol=1e-5, atol=1e-6):
            fail("rank %d under collfuse launch: %s differs from one process's by %g" % (rank, name, (p - q).abs().max()))
    open(os.path.join(os.environ["CF_OK_DIR"], "launched%d" % rank), "w").close()


def main():
    if not cfd.has_shm():
        print("test_step_dist: this libcollfuse has no shm world for torchrun's processes: skipped")
        sys.exit(77)
    with tempfile.TemporaryDirectory(prefix="test_step_dist") as ok:
        env = dict(os.environ, CF_STEP_CHILD="1", CF_OK_DIR=ok)

        def start(_, rdzv_port):
            for f in os.listdir(ok):  # a run started again: the ranks of the one before say nothing
                os.unlink(os.path.join(ok, f))
            cmd = [sys.executable, "-m", "torch.distributed.run", "--nnodes", "1", "--rdzv_backend", "c10d",
                   "--rdzv_endpoint", "127.0.0.1:%d" % rdzv_port, "--redirects", "2", "--tee", "2",
                   "--nproc_per_node", "2", os.path.abspath(__file__)]
            return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300 * SCALE)
        p = ports.on_free_ports(start, "test_step_dist")
        done = sorted(os.listdir(ok))
        if p.returncode != 0 or len(done) != 2:
            fail("torchrun, 2 processes: exit %d, ranks done %s\n%s%s" % (p.returncode, done, p.stdout[-4000:],
                                                                          p.stderr[-4000:]))
        # collfuse's own launcher
        env = dict(os.environ, CF_STEP_LAUNCHED="1", CF_OK_DIR=ok)
        cmd = [sys.argv[1], "launch", "--ranks", "2", "--", sys.executable, os.path.abspath(__file__)]
        p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300 * SCALE)
        done = sorted(f for f in os.listdir(ok) if f.startswith("launched"))
        if p.returncode != 0 or len(done) != 2:
            fail("%s: exit %d, ranks done %s\n%s%s" % (" ".join(cmd), p.returncode, done, p.stdout[-4000:],
                                                       p.stderr[-4000:]))
    print("test_step_dist: ok")


if __name__ == "__main__":
    if os.environ.get("CF_STEP_LAUNCHED"):
        launched()
    elif os.environ.get("CF_STEP_CHILD"):
        child()
    else:
        main()
