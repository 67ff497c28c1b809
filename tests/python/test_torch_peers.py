#!/usr/bin/python3
"""PyTorch's own distributed tests, transcribed as cases for
collfuse.distributed and collfuse.torch's DDP hooks (issues 30, 31).

Each case names where it comes from (repository, file, test) in its
docstring's first line ("peer:"): the cases are PyTorch's, rewritten here
against collfuse (no code of PyTorch's is copied), on random data.
Two processes, started as torchrun starts them (RANK, WORLD_SIZE,
LOCAL_WORLD_SIZE, MASTER_ADDR/PORT: the shm world), or under mpirun where
the library has no shm world; every rank joins torch's gloo group and
collfuse's world and runs each case with both on the same inputs:

- the collectives (test_c10d_gloo.py's ProcessGroupGlooTest): all_reduce
  with each torch.distributed.ReduceOp against gloo's result (bitwise: two
  ranks' reductions round once) and a float64 reference, on every dtype
  both take; AVG (gloo refuses it) and reduce_scatter (gloo 1.13 has none)
  against the float64 reference only; the ops collfuse lacks (BAND, BOR,
  BXOR, PREMUL_SUM) refused naming the op; broadcast from every root, empty
  tensors, the stress runs (a thousand started all_reduces, a thousand
  broadcasts), all_gather and all_to_all against gloo; the argument checks
  (root out of range, sizes, dtypes, layouts, devices) refused before
  anything is sent, the ranks still in step after;
- DDP with collfuse's allreduce_hook against DDP over gloo without a hook
  (distributed_test.py, test_c10d_common.py, test_c10d_gloo.py's
  DistributedDataParallelTest, test_ddp_hooks.py): gradient accumulation
  under no_sync() (both gradient_as_bucket_view settings, and a user hook
  chaining then() on collfuse's future), find_unused_parameters with unused
  and shared parameters, static_graph, frozen parameters, BatchNorm's
  buffers broadcast, uneven inputs under join() against one process's
  training and with each divide_by_initial_world_size (against torch's
  own allreduce_hook) and throw_on_early_termination, module hooks,
  create_graph, a buffer comm hook summing with collfuse, the hook
  pickled and loaded, activation checkpointing (once, twice, with
  unused and shared weights) against one process's model, a parameter
  shared by two modules, the bf16 hook bitwise against torch's own bf16_compress_hook,
  and the refusals: sparse gradients, a state that is no group, a second
  registration; last, a collective failing under the hook raises from
  DDP's backward pass with collfuse's message.

Argument "all" (the long test): larger sizes in the all_reduce matrix,
and every case again under mpirun on the MPI world; without it (the fast
test) the shm world only (mpirun's MPI world where the library has no shm
world). Exits 77 (skipped) without torch, or without the shm world and
mpirun.
"""

import copy
import importlib.util
import os
import subprocess
import sys
import tempfile

import numpy as np

from checks import expect_raises, fail

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bench"))
import ports  # noqa: E402 (bench/ports.py: a run started again when a port was taken meanwhile)

# the driver only asks whether torch is there (its import is most of a
# process's start); the ranks import it
CHILD = os.environ.get("CF_PEERS_CHILD")
torch = None
if CHILD:
    try:
        import torch
    except ImportError:
        pass
HAVE_TORCH = torch is not None if CHILD else importlib.util.find_spec("torch") is not None

import collfuse.distributed as cfd  # noqa: E402

R = 2  # the processes


def gen(case, rank):
    return torch.Generator().manual_seed(1000 * case + rank)


def rand(dtype, shape, case, rank, op=None):
    """Random values of dtype, the same for (case, rank) on every rank;
    exact in every dtype's sum and product over R ranks."""
    g = gen(case, rank)
    if dtype == torch.bool:
        return torch.randint(0, 2, shape, generator=g).bool()
    if dtype.is_floating_point:
        if op == "PRODUCT":
            v = torch.tensor([-1.5, -1.0, -0.5, 0.5, 1.25, 2.0])[torch.randint(0, 6, shape, generator=g)]
        else:
            v = torch.randint(-64, 64, shape, generator=g).double() / 16
        return v.to(dtype)
    lo, hi = (1, 5) if op == "PRODUCT" else ((0, 60) if dtype == torch.uint8 else (-50, 50))
    return torch.randint(lo, hi, shape, generator=g).to(dtype)


def f64(t):
    return t.double() if t.dtype != torch.bool else t.to(torch.float64)


def same(got, want, what):
    if got.dtype != want.dtype or got.shape != want.shape or not torch.equal(got, want):
        bad = (f64(got) - f64(want)).abs() if got.shape == want.shape else None
        fail("%s: got %s %s, want %s %s%s" % (what, got.dtype, tuple(got.shape), want.dtype, tuple(want.shape),
                                             "" if bad is None else " (max off %g)" % bad.max().item()))


def near(got, want64, what, rtol):
    err = (f64(got) - want64).abs()
    bad = err > rtol * (want64.abs() + 1)
    if bad.any():
        i = int(bad.flatten().nonzero()[0])
        fail("%s: element %d is %r, want %r" % (what, i, f64(got).flatten()[i].item(), want64.flatten()[i].item()))


def in_step(me, what):
    """The ranks are still in step after refusals: an all_reduce agrees."""
    x = torch.full((3,), float(me + 1), dtype=torch.float64)
    cfd.all_reduce(x)
    if not bool((x == R * (R + 1) / 2).all()):
        fail("all_reduce after %s: %r" % (what, x))


# ---------------- the collectives: ProcessGroupGlooTest ----------------

GLOO_DTYPES = ("float32", "float64", "float16", "int8", "uint8", "int32", "int64")  # gloo 1.13's
OPS = ("SUM", "PRODUCT", "MIN", "MAX")


def reduce64(op, xs):
    x = torch.stack([f64(t) for t in xs])
    return {"SUM": x.sum(0), "PRODUCT": x.prod(0), "MIN": x.min(0).values, "MAX": x.max(0).values,
            "AVG": x.sum(0) / len(xs)}[op]


def allreduce_basics(me, dist):
    """peer: pytorch/pytorch test/distributed/test_c10d_gloo.py ProcessGroupGlooTest.test_allreduce_basics
    (simple_reduce_tests): rank + 1 under SUM, PRODUCT, MIN, MAX, AVG
    (collfuse's mean: gloo refuses AVG), the bitwise ops refused by name;
    the fp16 sum of values near the float16 range against gloo's
    all_gather and sum."""
    want = {"SUM": R * (R + 1) / 2, "PRODUCT": float(np.prod(np.arange(1, R + 1))), "MIN": 1.0, "MAX": float(R),
            "AVG": (R + 1) / 2}
    for op, v in want.items():
        x = torch.tensor([me + 1.0])
        cfd.all_reduce(x, op=getattr(dist.ReduceOp, op))
        same(x, torch.tensor([v]), "all_reduce ReduceOp.%s of rank + 1" % op)
    expect_raises(RuntimeError, lambda: dist.all_reduce(torch.ones(1), op=dist.ReduceOp.AVG), "AVG")
    for op in ("BAND", "BOR", "BXOR"):
        x = torch.tensor([me | 1], dtype=torch.int32)
        expect_raises(ValueError, lambda: cfd.all_reduce(x, op=getattr(dist.ReduceOp, op)), "reduction " + op,
                      "sum, mean")
    expect_raises(ValueError, lambda: cfd.all_reduce(torch.ones(1), op=dist.ReduceOp.PREMUL_SUM), "PREMUL_SUM")
    # the convenience form: sum by default
    x = torch.tensor([me + 1.0])
    cfd.all_reduce(x)
    same(x, torch.tensor([R * (R + 1) / 2]), "all_reduce's default op")
    # fp16 numerical correctness: gloo's all_gather then a sum, against collfuse's all_reduce
    t = ((torch.rand(10, 1, generator=gen(1, me)) * 2 - 1) * 65504 / R).to(torch.float16)
    parts = [torch.zeros_like(t) for _ in range(R)]
    dist.all_gather(parts, t)
    total = torch.stack(parts).sum(0)
    x = t.clone()
    cfd.all_reduce(x)
    same(x, total, "float16 all_reduce near the range's end")
    in_step(me, "the refused reductions")


def allreduce_matrix(me, dist, dtypes, sizes):
    """peer: pytorch/pytorch test/distributed/test_c10d_gloo.py ProcessGroupGlooTest.test_allreduce_basics,
    on random data of every dtype gloo takes and each op: collfuse's
    result is gloo's, bitwise, and the float64 reference's; AVG (gloo
    refuses it) against the reference."""
    case = 100
    for name in dtypes:
        dt = getattr(torch, name)
        for n in sizes:
            for op in OPS + ("AVG",):
                if op == "AVG" and not dt.is_floating_point:
                    continue
                case += 1
                every = [rand(dt, (n,), case, r, op) for r in range(R)]
                x = every[me].clone()
                cfd.all_reduce(x, op=getattr(dist.ReduceOp, op))
                what = "all_reduce %s %s of %d" % (op, name, n)
                if op != "AVG":
                    g = every[me].clone()
                    dist.all_reduce(g, op=getattr(dist.ReduceOp, op))
                    same(x, g, what + " (against gloo)")
                    near(x, reduce64(op, every), what, 0)
                else:
                    near(x, reduce64(op, every), what, 2.0 ** -10 if name == "float16" else 0)


def allreduce_stress(me, dist):
    """peer: pytorch/pytorch test/distributed/test_c10d_gloo.py ProcessGroupGlooTest.test_allreduce_stress:
    a thousand all_reduces of [i + rank] started at once (async_op), then
    waited for in order."""
    inputs = [torch.tensor([i + me]) for i in range(1000)]
    works = [cfd.all_reduce(t, async_op=True) for t in inputs]
    for i, w in enumerate(works):
        got = w.wait()
        if got is not inputs[i] or int(got[0]) != i * R + R * (R - 1) // 2:
            fail("all_reduce stress: iteration %d: %r" % (i, got))


def broadcast_basics(me, dist):
    """peer: pytorch/pytorch test/distributed/test_c10d_gloo.py ProcessGroupGlooTest.test_broadcast_basics,
    test_broadcast_stress, test_empty_tensors and test_broadcast_checks:
    every rank is root once; a thousand broadcasts from alternating roots
    started at once (async_op) and waited for in order;
    an empty tensor; a root out of range refused (-1, the world size, not
    an integer, a bool) before anything is sent, numpy's and torch's
    integer scalars taken."""
    for root in range(R):
        x = torch.tensor([me])
        cfd.broadcast(x, src=root)
        same(x, torch.tensor([root]), "broadcast from rank %d" % root)
        x = rand(torch.float32, (37,), 200 + root, me)
        g = x.clone()
        cfd.broadcast(x, src=root)
        dist.broadcast(g, src=root)
        same(x, g, "broadcast of random float32 from rank %d (against gloo)" % root)
    inputs = [torch.tensor([i * R + me]) for i in range(1000)]
    works = [cfd.broadcast(t, src=i % R, async_op=True) for i, t in enumerate(inputs)]
    for i, (t, w) in enumerate(zip(inputs, works)):
        if w.wait() is not t or int(t[0]) != i * R + i % R:
            fail("broadcast stress: iteration %d: %r" % (i, t))
    empty = torch.FloatTensor([])
    if cfd.broadcast(empty, src=0) is not empty or empty.numel() != 0:
        fail("broadcast of an empty tensor: %r" % empty)
    cfd.all_reduce(empty)
    t1 = torch.zeros([1], dtype=torch.float32)
    for bad in (-1, R, 0.0, None, True, np.int64(R), torch.tensor(0.0)):
        expect_raises(ValueError, lambda: cfd.broadcast(t1, src=bad), "broadcast src", "not a rank")
    for root in (np.int64(R - 1), torch.tensor(R - 1)):  # integer scalars, as torch takes them
        x = torch.tensor([me])
        cfd.broadcast(x, src=root)
        same(x, torch.tensor([R - 1]), "broadcast from src %r" % (root,))
    in_step(me, "the refused broadcasts")


def allgather_alltoall(me, dist, sizes):
    """peer: pytorch/pytorch test/distributed/test_c10d_gloo.py ProcessGroupGlooTest.test_allgather_basics,
    test_allgather_checks, test_alltoall_basics (all_to_all_single with
    equal splits) and test_reduce_scatter_basics (gloo 1.13 has no
    reduce_scatter: against the float64 reference, each op): random data
    of every dtype gloo takes against gloo, bitwise, and of those it lacks
    (int16, bfloat16, bool) against the float64 reference; each started
    with async_op, several at once, then waited for; a 0-dim tensor
    and a contiguous view into a larger tensor (only the view written);
    the checks: output sizes, dtypes, layouts, devices and torch's list
    forms refused before anything is sent."""
    case = 300
    for name in GLOO_DTYPES + ("int16", "bfloat16", "bool"):
        dt = getattr(torch, name)
        gloo = name in GLOO_DTYPES
        for n in sizes:
            case += 1
            every = [rand(dt, (n, 3), case, r) for r in range(R)]
            out = torch.empty(R * n, 3, dtype=dt)
            cfd.all_gather(out, every[me])
            what = "all_gather %s of %d x 3" % (name, n)
            if gloo:
                parts = [torch.empty(n, 3, dtype=dt) for _ in range(R)]
                dist.all_gather(parts, every[me])
                same(out, torch.cat(parts), what + " (against gloo)")
            same(out, torch.cat(every), what)
            xs = [rand(dt, (R * n, 3), case + 1000, r) for r in range(R)]
            out = torch.empty_like(xs[me])
            cfd.all_to_all(out, xs[me])
            what = "all_to_all %s of %d x 3" % (name, n)
            if gloo:
                g = torch.empty_like(xs[me])
                dist.all_to_all_single(g, xs[me])
                same(out, g, what + " (against gloo's all_to_all_single)")
            same(out, torch.cat([x[me * n:(me + 1) * n] for x in xs]), what)
            for op in OPS:
                xs = [rand(dt, (R * n, 3), case + 2000 + len(op), r, op) for r in range(R)]
                out = torch.empty(n, 3, dtype=dt)
                cfd.reduce_scatter(out, xs[me], op=getattr(dist.ReduceOp, op))
                want = reduce64(op, xs)
                if name == "bool":
                    want = {"SUM": want.clamp(max=1), "PRODUCT": want}.get(op, want)  # or, and
                near(out, want[me * n:(me + 1) * n], "reduce_scatter %s %s of %d x 3" % (op, name, n), 0)
    # started at once (async_op, as ProcessGroupGlooTest's work handles), then waited for
    n = 1001
    xs = [rand(torch.float32, (R * n,), 390 + k, r) for k in range(3) for r in range(R)]
    outs = (torch.empty(R * R * n), torch.empty(n), torch.empty(R * n), torch.empty(R * n))
    mine = [xs[k * R + me] for k in range(3)]
    ar = mine[2].clone()
    works = [cfd.all_gather(outs[0], mine[0], async_op=True), cfd.reduce_scatter(outs[1], mine[1], async_op=True),
             cfd.all_to_all(outs[2], mine[2], async_op=True), cfd.all_reduce(ar, async_op=True),
             cfd.broadcast(outs[3].copy_(mine[0]), src=R - 1, async_op=True)]
    if [w.wait() is o for w, o in zip(works, outs[:3] + (ar, outs[3]))] != [True] * 5:
        fail("async_op: a Work's wait() is not its output")
    same(outs[0], torch.cat(xs[0:R]), "all_gather (async_op)")
    near(outs[1], reduce64("SUM", xs[R:2 * R])[me * n:(me + 1) * n], "reduce_scatter (async_op)", 0)
    same(outs[2], torch.cat([x[me * n:(me + 1) * n] for x in xs[2 * R:3 * R]]), "all_to_all (async_op)")
    near(ar, reduce64("SUM", xs[2 * R:3 * R]), "all_reduce (async_op) after them", 1e-6)
    same(outs[3], xs[R - 1], "broadcast (async_op)")
    for dt in (torch.float64, torch.int64):
        x = torch.tensor(me + 1, dtype=dt)  # 0-dim
        cfd.all_reduce(x)
        same(x, torch.tensor(R * (R + 1) // 2, dtype=dt), "all_reduce of a 0-dim %s tensor" % dt)
    big = torch.arange(40, dtype=torch.float32) + 100 * me
    view = big[10:20]
    cfd.all_reduce(view)
    want = torch.arange(40, dtype=torch.float32) + 100 * me
    want[10:20] = sum(torch.arange(10, 20, dtype=torch.float32) + 100 * r for r in range(R))
    same(big, want, "all_reduce of a contiguous view at offset 10 of a 40-element tensor")
    expect_raises(TypeError, lambda: cfd.all_gather([torch.zeros(1)] * R, torch.zeros(1)), "output is a list")
    expect_raises(TypeError, lambda: cfd.all_reduce([torch.zeros(1)]), "a list")
    expect_raises(RuntimeError, lambda: dist.reduce_scatter(torch.empty(1), [torch.ones(1)] * R),
                  "does not support reduce_scatter")
    t1 = torch.zeros(1, dtype=torch.float32)
    t2 = torch.zeros(R, dtype=torch.float64)
    t3 = torch.zeros(R + 1, dtype=torch.float32)
    expect_raises(TypeError, lambda: cfd.all_gather(t2, t1), "all_gather", "float64", "float32")
    expect_raises(ValueError, lambda: cfd.all_gather(t3, t1), "all_gather", "want %d" % R)
    expect_raises(ValueError, lambda: cfd.all_gather(torch.zeros(R, 2).t(), torch.zeros(2)), "not contiguous")
    expect_raises(TypeError, lambda: cfd.all_gather(torch.zeros(R, 2).to_sparse(), torch.zeros(2)), "sparse")
    expect_raises(ValueError, lambda: cfd.all_gather(torch.zeros(R, device="meta"), t1), "device 'meta'")
    expect_raises(ValueError, lambda: cfd.all_to_all(torch.zeros(R), torch.zeros(2 * R)), "all_to_all")
    expect_raises(ValueError, lambda: cfd.reduce_scatter(torch.zeros(2), torch.zeros(2 * R + 1)), "reduce_scatter")
    expect_raises(ValueError, lambda: cfd.all_reduce(torch.zeros(2 * R, 2).t()), "not contiguous")
    expect_raises(TypeError, lambda: cfd.all_reduce(torch.sparse_coo_tensor([[0]], [1.0], size=(2,))), "sparse")
    in_step(me, "the refused collectives")


# ---------------- DDP with collfuse's hook ----------------

def grads(model):
    return [p.grad.detach().clone() if p.grad is not None else None for p in model.parameters()]


def params(model):
    return [p.detach().clone() for p in model.state_dict().values()]


def agree(got, want, what, rtol=1e-5, atol=1e-7):
    if len(got) != len(want):
        fail("%s: %d tensors, want %d" % (what, len(got), len(want)))
    for i, (a, b) in enumerate(zip(got, want)):
        if (a is None) != (b is None):
            fail("%s: tensor %d is %s, DDP's own is %s" % (what, i, a is None and "None", b is None and "None"))
        if a is not None and not torch.allclose(a.double(), b.double(), rtol=rtol, atol=atol):
            fail("%s: tensor %d is off DDP's own by %g" % (what, i, (a.double() - b.double()).abs().max().item()))


def no_sync(me, dist, DDP, cft):
    """peer: pytorch/pytorch torch/testing/_internal/distributed/distributed_test.py
    test_accumulate_gradients_no_sync, ..._grad_is_view and
    ..._allreduce_with_then_hook: gradients accumulated locally under
    no_sync() (a forward under no_grad first), synced every other
    iteration: equal to one process's model on the whole batch after each
    synced iteration, not before; with collfuse's hook, both
    gradient_as_bucket_view settings, a user hook chaining then() on
    collfuse's future (times 2, then halved), and the two user hooks of
    torch's tests written on collfuse.distributed's Work.get_future()."""
    def chained(state, bucket):
        return cft.allreduce_hook(state, bucket).then(lambda f: 2 * f.value()).then(lambda f: f.value() / 2)

    def user_allreduce(state, bucket):  # ..._allreduce_hook's, on collfuse's Work.get_future()
        return cfd.all_reduce(bucket.buffer() / R, async_op=True).get_future().then(lambda f: f.value()[0])

    def user_then(state, bucket):  # ..._allreduce_with_then_hook's
        fut = cfd.all_reduce(bucket.buffer(), async_op=True).get_future()
        return fut.then(lambda f: 2 * f.wait()[0]).then(lambda f: f.wait() / (2 * R))

    for hook, view in ((cft.allreduce_hook, False), (cft.allreduce_hook, True), (chained, False),
                       (user_allreduce, False), (user_then, True)):
        torch.manual_seed(5)
        model = torch.nn.Sequential(torch.nn.Linear(2, 10, bias=False), torch.nn.ReLU(), torch.nn.Linear(10, 4))
        ddp = DDP(copy.deepcopy(model), gradient_as_bucket_view=view, bucket_cap_mb=0.0001)
        ddp.register_comm_hook(None, hook)
        inp = torch.randn(R, 2, generator=gen(400, 0))
        target = torch.randn(R, 4, generator=gen(401, 0))
        with torch.no_grad():
            with ddp.no_sync():
                ddp(inp)
        for it in range(4):
            torch.nn.functional.mse_loss(model(inp), target).backward()
            step = lambda: torch.nn.functional.mse_loss(ddp(inp[me:me + 1]), target[me:me + 1]).backward()
            if it % 2 == 0:
                with ddp.no_sync():
                    step()
            else:
                step()
            what = "no_sync (%s, gradient_as_bucket_view=%s) iteration %d" % (hook.__name__, view, it)
            for a, b in zip(model.parameters(), ddp.parameters()):
                equal = torch.allclose(a.grad, b.grad, rtol=1e-5, atol=1e-7)
                if equal != (it % 2 == 1):
                    fail("%s: DDP's gradients %s the local model's" % (what, "equal" if equal else "differ from"))
            perm = torch.randperm(R, generator=gen(402 + it, 0))
            inp, target = inp[perm], target[perm]


def train(DDP, make, hook, steps, me, ddp_kw, loss_fn=None, inputs=None, state=None):
    """A model (make()) under DDP with hook (None: DDP's own allreduce over
    gloo) for steps SGD steps on this rank's random batches; the gradients
    of each step and the parameters and buffers at the end."""
    torch.manual_seed(11)
    model = DDP(make(), **ddp_kw)
    if hook is not None:
        model.register_comm_hook(state, hook)
    opt = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=0.05)
    g = gen(500, me)
    seen = []
    for s in range(steps):
        opt.zero_grad()
        x = inputs(s, g) if inputs else torch.randn(6, 8, generator=g)
        out = model(x)
        loss = loss_fn(out, s) if loss_fn else out.square().mean()
        loss.backward()
        seen.append(grads(model.module))
        opt.step()
    return [t for step in seen for t in step], params(model.module)


def ddp_scenarios(me, dist, DDP, cft):
    """DDP with collfuse's allreduce_hook against DDP's own allreduce over
    gloo, step by step (gradients) and at the end (parameters, buffers)."""

    class Unused(torch.nn.Module):
        """peer: pytorch/pytorch torch/testing/_internal/distributed/distributed_test.py
        test_ddp_shared_grad_acc_unused_params (net1, bias and net1.bias
        unused, bias shared by two names; static_graph both ways), and
        without static_graph a layer used every other step."""

        def __init__(self, alternate=False):
            super().__init__()
            self.alternate = alternate
            self.net1 = torch.nn.Linear(8, 5, bias=False)
            self.bias = torch.nn.Parameter(torch.zeros(5))
            self.net1.bias = self.bias
            self.net2 = torch.nn.Linear(8, 5)
            self.net3 = torch.nn.Linear(8, 5)
            self.step = 0

        def forward(self, x):
            self.step += 1
            y = self.net2(x)
            return y + self.net3(x) if self.step % 2 or not self.alternate else y

    class Shared(torch.nn.Module):
        """A model with tied weights (one parameter used twice): the
        encoder's weight is the decoder's, transposed."""

        def __init__(self):
            super().__init__()
            self.enc = torch.nn.Linear(8, 4, bias=False)
            self.mid = torch.nn.Linear(4, 4)

        def forward(self, x):
            return torch.nn.functional.linear(torch.tanh(self.mid(self.enc(x))), self.enc.weight.t())

    class RankFlow(torch.nn.Module):
        """peer: pytorch/pytorch torch/testing/_internal/distributed/distributed_test.py
        test_ddp_control_flow_different_across_ranks: the second layer
        is used on rank 1 only, on odd steps (find_unused_parameters: DDP
        learns which ranks used it through its own group)."""

        def __init__(self):
            super().__init__()
            self.lin1 = torch.nn.Linear(8, 8, bias=False)
            self.lin2 = torch.nn.Linear(8, 8, bias=False)
            self.step = 0

        def forward(self, x):
            self.step += 1
            y = torch.relu(self.lin1(x))
            return self.lin2(y) if me == 1 and self.step % 2 == 0 else y

    def frozen():
        """peer: pytorch/pytorch torch/testing/_internal/distributed/distributed_test.py _FC2
        (fc.bias.requires_grad = False) and test_ddp_build_debug_param_to_name_mapping_requires_grad:
        frozen parameters are in no bucket."""
        m = torch.nn.Sequential(torch.nn.Linear(8, 50), torch.nn.ReLU(), torch.nn.Linear(50, 3))
        m[0].bias.requires_grad = False
        m[2].weight.requires_grad_(False)
        return m

    def bn():
        """peer: pytorch/pytorch torch/testing/_internal/distributed/distributed_test.py
        test_ddp_broadcast_buffer and the BatchNorm models (broadcast_buffers: rank 0's
        running statistics to every rank at each forward, over gloo)."""
        return torch.nn.Sequential(torch.nn.Linear(8, 6), torch.nn.BatchNorm1d(6), torch.nn.ReLU(),
                                   torch.nn.Linear(6, 2))

    class Mixed(torch.nn.Module):
        """float64 and float32 parameters: DDP buckets each dtype apart."""

        def __init__(self):
            super().__init__()
            self.a = torch.nn.Linear(8, 16).double()
            self.b = torch.nn.Linear(16, 3)

        def forward(self, x):
            return self.b(torch.tanh(self.a(x.double())).float())

    plain = lambda: torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 3))
    cases = [
        # peer: test_c10d_common.py / test_c10d_gloo.py DistributedDataParallelTest
        # test_ddp_comm_hook_allreduce_hook, with gradient_as_bucket_view both ways
        ("gradient_as_bucket_view=False", plain, {"gradient_as_bucket_view": False}),
        ("gradient_as_bucket_view=True", plain, {"gradient_as_bucket_view": True}),
        # peer: distributed_test.py test_static_graph_api_cpu
        ("static_graph", plain, {"static_graph": True}),
        ("unused and shared parameters, find_unused_parameters", lambda: Unused(True),
         {"find_unused_parameters": True}),
        ("unused and shared parameters, find_unused_parameters, static_graph", Unused,
         {"find_unused_parameters": True, "static_graph": True}),
        ("control flow different across ranks, find_unused_parameters", RankFlow,
         {"find_unused_parameters": True}),
        ("tied weights", Shared, {}),
        ("float64 and float32 buckets", Mixed, {"gradient_as_bucket_view": True}),
        ("frozen parameters", frozen, {}),
        ("BatchNorm buffers broadcast", bn, {"broadcast_buffers": True}),
    ]
    for what, make, kw in cases:
        kw = dict(kw, bucket_cap_mb=0.0005)  # several buckets
        ref_g, ref_p = train(DDP, make, None, 4, me, kw)
        got_g, got_p = train(DDP, make, cft.allreduce_hook, 4, me, kw)
        agree(got_g, ref_g, "DDP %s: gradients" % what)
        agree(got_p, ref_p, "DDP %s: parameters and buffers" % what)


def two_models(me, dist, DDP, cft):
    """Two DDP models in one process, each with collfuse's hook (a GAN's
    generator and discriminator; peer: pytorch/pytorch
    torch/testing/_internal/distributed/distributed_test.py
    test_ddp_multiple_nested_unused_params_err_ignore_params' nested DDP
    models, and DDP's bucket indices, which start at 0 in each model):
    stepped one after the other, and under one loss whose backward pass
    runs both models' hooks in turn; against DDP's own, both
    gradient_as_bucket_view settings, and a process group of every rank
    (new_group) as the hook's state."""
    every = dist.new_group(list(range(R)))
    for view in (False, True):
        for joint in (False, True):
            runs = []
            for hook in (None, cft.allreduce_hook):
                torch.manual_seed(71)
                kw = {"bucket_cap_mb": 0.0005, "gradient_as_bucket_view": view}
                a = DDP(torch.nn.Sequential(torch.nn.Linear(8, 24), torch.nn.Tanh(), torch.nn.Linear(24, 8)), **kw)
                b = DDP(torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1)), **kw)
                if hook:
                    a.register_comm_hook(None, hook)
                    b.register_comm_hook(every, hook)
                opt = torch.optim.SGD(list(a.parameters()) + list(b.parameters()), lr=0.05)
                g = gen(1600, me)
                seen = []
                for _ in range(4):
                    opt.zero_grad()
                    x = torch.randn(5, 8, generator=g)
                    if joint:
                        (b(a(x)).square().mean() + a(x).abs().mean()).backward()
                    else:
                        a(x).abs().mean().backward()
                        b(x).square().mean().backward()
                    seen += grads(a.module) + grads(b.module)
                    opt.step()
                runs.append(seen)
            agree(runs[1], runs[0], "two DDP models (%s backward passes, view %s)" % (
                "one loss's" if joint else "separate", view))


def join(me, dist, DDP, cft):
    """peer: pytorch/pytorch torch/testing/_internal/distributed/distributed_test.py
    test_ddp_join_model_equivalence (on CPUs): rank r trains 2 (r + 1)
    iterations under DDP's join(), the joined rank's buckets averaged as
    zeros through collfuse's hook (DDP calls it for them), with the
    learning rate times the world size: the same model as one process
    training for every rank's iterations."""
    batch, dim, lr = 3, 10, 0.03
    torch.manual_seed(21)
    model = torch.nn.Linear(dim, dim, bias=False)
    inp = torch.rand(batch, dim, generator=gen(600, 0))
    local = copy.deepcopy(model)
    opt = torch.optim.SGD(local.parameters(), lr=lr)
    for _ in range(sum(2 * (r + 1) for r in range(R))):
        opt.zero_grad()
        local(inp).sum().backward()
        opt.step()
    net = DDP(model, bucket_cap_mb=0.0001)
    net.register_comm_hook(None, cft.allreduce_hook)
    opt = torch.optim.SGD(model.parameters(), lr=lr * R)
    with net.join():
        for _ in range(2 * (me + 1)):
            opt.zero_grad()
            net(inp).sum().backward()
            opt.step()
    for (k, a), b in zip(local.state_dict().items(), net.module.state_dict().values()):
        if not torch.allclose(a, b, rtol=1e-5, atol=1e-6):
            fail("join: %s off the local model's by %g" % (k, (a - b).abs().max().item()))


def join_division(me, dist, DDP, cft):
    """peer: pytorch/pytorch torch/testing/_internal/distributed/distributed_test.py
    test_ddp_grad_div_uneven_inputs and test_ddp_uneven_input_exception
    (throw_on_early_termination): rank 0 trains 3 iterations, the others
    5; the gradient of sum(x @ W) with x all 50. Under
    join(divide_by_initial_world_size=True) collfuse's hook gives DDP's
    expected gradients (50 times the active ranks over the world size);
    with False, torch's own Python allreduce_hook (default_hooks) and
    collfuse's both divide by the world size (a hook decides the division:
    DDP's effective world size applies to its built-in allreduce only):
    collfuse's gives torch's hook's gradients. throw_on_early_termination:
    every rank raises once rank 0 runs out, nothing hangs."""
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
    dim, scale = 5, 50.0
    inp = torch.ones(1, dim) * scale
    n_iters = 3 if me == 0 else 5

    def torch_allreduce(state, bucket):  # torch's own hook, over gloo
        return default_hooks.allreduce_hook(state, bucket)

    got = {}
    for hook in (cft.allreduce_hook, torch_allreduce):
        for initial in (True, False):
            torch.manual_seed(61)
            net = DDP(torch.nn.Linear(dim, dim, bias=False), bucket_cap_mb=1)
            net.register_comm_hook(None, hook)
            seen = []
            with net.join(divide_by_initial_world_size=initial):
                for i in range(n_iters):
                    net(inp).sum().backward()
                    seen.append(net.module.weight.grad.clone())
                    net.zero_grad()
            got[hook, initial] = seen
            if initial:
                for i, g in enumerate(seen):
                    active = R - (1 if i >= 3 else 0)
                    same(g, torch.ones(dim, dim) * scale * active / R,
                         "join(divide_by_initial_world_size=True) %s, iteration %d" % (hook.__name__, i))
    for initial in (True, False):
        agree(got[cft.allreduce_hook, initial], got[torch_allreduce, initial],
              "join(divide_by_initial_world_size=%s): collfuse's hook against torch's allreduce_hook" % initial)
    net = DDP(torch.nn.Linear(dim, dim, bias=False))
    net.register_comm_hook(None, cft.allreduce_hook)
    try:
        with net.join(throw_on_early_termination=True):
            for i in range(n_iters):
                net(inp).sum().backward()
        fail("rank %d: join(throw_on_early_termination=True) raised nothing" % me)
    except RuntimeError as e:
        if "exhausted" not in str(e):
            fail("rank %d: join(throw_on_early_termination=True) raised %r" % (me, str(e)))
    in_step(me, "the early termination")


def more_ddp(me, dist, DDP, cft):
    """peer: pytorch/pytorch torch/testing/_internal/distributed/distributed_test.py
    test_ddp_forward_backward_hook (module forward, pre-forward and
    backward hooks: the averaged gradients of the same input on every rank
    are the local model's), test_ddp_create_graph (backward with
    create_graph=True six times: the parameters still require grad, the
    gradients DDP's own), _test_ddp_buffer_hook_allreduce (a buffer comm
    hook, before and after the forward pass, summing the buffers with
    collfuse.distributed.all_reduce, or returning their Works' futures
    (return_futures): the buffers of a model whose buffers gloo sums)
    and _test_hook_pickling (collfuse's hook and its HookState saved with
    torch.save and loaded, its process group as None, as PowerSGDState's:
    the loaded hook trains as the one saved)."""
    class Dummy(torch.nn.Module):
        def __init__(self):
            super().__init__()
            torch.manual_seed(0)
            self.fc = torch.nn.Linear(2, 2)

        def forward(self, x):
            return self.fc(x)

    local, model = Dummy(), Dummy()
    for m in (local, model):
        m.fc.register_forward_pre_hook(lambda module, input: torch.nn.functional.relu(input[0]))
        m.fc.register_forward_hook(lambda module, _input, output: torch.nn.functional.gelu(output))
        m.fc.register_backward_hook(lambda module, _input, output: (torch.nn.functional.celu(output[0]),))
    ddp = DDP(model)
    ddp.register_comm_hook(None, cft.allreduce_hook)
    x = torch.rand(5, 2, generator=gen(1100, 0))
    out_local, out_ddp = local(x), ddp(x)
    same(out_ddp, out_local, "forward/backward hooks: the outputs")
    out_local.sum().backward()
    out_ddp.sum().backward()
    agree(grads(ddp.module), grads(local), "forward/backward hooks: gradients against the local model's")

    class Pow(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.p = torch.nn.Parameter(torch.tensor(1.0 + me))

        def forward(self):
            return self.p.pow(2)

    runs = []
    for hook in (None, cft.allreduce_hook):
        ddp = DDP(Pow())
        if hook:
            ddp.register_comm_hook(None, hook)
        for _ in range(6):
            ddp().backward(create_graph=True)
            if not all(p.requires_grad for p in ddp.parameters()):
                fail("create_graph: a parameter no longer requires grad")
        runs.append(grads(ddp.module))
    agree(runs[1], runs[0], "create_graph=True")

    class NetWithBuffers(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.a = torch.nn.Linear(10, 10, bias=False)
            self.b = torch.nn.Linear(10, 1, bias=False)
            self.register_buffer("buffer", torch.randn(1, 2, generator=gen(1200, me)))

        def forward(self, x):
            self.buffer.add_(1)
            return self.b(self.a(x))

    def buffer_hook(ddp, named_buffers):
        for b in named_buffers.values():
            cfd.all_reduce(b)

    def buffer_futures(ddp, named_buffers):  # return_futures=True: DDP waits for them after the backward pass
        return [cfd.all_reduce(b, async_op=True).get_future() for b in named_buffers.values()]

    where = torch.nn.parallel.distributed._BufferCommHookLocation
    for hook, at in ((buffer_hook, where.PRE_FORWARD), (buffer_hook, where.POST_FORWARD),
                     (buffer_futures, where.POST_FORWARD)):
        torch.manual_seed(me)
        model = NetWithBuffers()
        hooked = DDP(model)
        hooked._register_buffer_comm_hook(hooked, hook, at)
        plain = DDP(copy.deepcopy(model), broadcast_buffers=False)
        inp = torch.randn(2, 10, generator=gen(1201, me))
        for i in range(2):
            loss_hook = hooked(inp).sum()
            if at == where.PRE_FORWARD:
                for b in plain.module.buffers():
                    dist.all_reduce(b)
            loss_plain = plain(inp).sum()
            if at == where.POST_FORWARD:
                for b in plain.module.buffers():
                    dist.all_reduce(b)
            if hook is buffer_hook:
                for a, b in zip(hooked.module.buffers(), plain.module.buffers()):
                    same(a, b, "buffer comm hook (%s) iteration %d" % (at, i))
            loss_hook.backward()
            loss_plain.backward()
            for a, b in zip(hooked.module.buffers(), plain.module.buffers()):
                same(a, b, "buffer comm hook %s (%s) iteration %d, after backward" % (hook.__name__, at, i))

    path = os.path.join(os.environ["CF_OK_DIR"], "hook%d.pt" % me)
    traced = cft.HookState(group=dist.new_group(list(range(R))), trace="peers.json")
    traced._started = True  # as after its first bucket: the loaded state starts its trace again
    state = cft.HookState(group=list(range(R)))
    net = torch.nn.Linear(1, 5)
    torch.save({"comm_hook": cft.allreduce_hook, "comm_hook_state": state, "traced": traced}, path)
    saved = torch.load(path)
    os.unlink(path)
    st = saved["traced"]
    if saved["comm_hook"] is not cft.allreduce_hook or not isinstance(st, cft.HookState) or st.group is not None \
            or st.trace != "peers.json" or st._started or saved["comm_hook_state"].group != list(range(R)):
        fail("pickling: loaded %r (%r)" % (saved, getattr(st, "__dict__", None)))
    results = []
    for hook, st in ((cft.allreduce_hook, state), (saved["comm_hook"], saved["comm_hook_state"])):
        ddp = DDP(copy.deepcopy(net))
        ddp.register_comm_hook(st, hook)
        opt = torch.optim.SGD(ddp.parameters(), lr=0.01)
        g = gen(1300, me)
        for _ in range(3):
            opt.zero_grad()
            torch.nn.functional.mse_loss(ddp(torch.randn(7, 1, generator=g)), torch.randn(7, 5, generator=g)).backward()
            opt.step()
        results.append(params(ddp.module))
    agree(results[1], results[0], "pickling: the loaded hook's training", rtol=0, atol=0)


def checkpointing(me, dist, DDP, cft, size):
    """peer: pytorch/pytorch test/distributed/test_c10d_nccl.py DistributedDataParallelTest (the 1.13 era:
    NCCL's there, on CPUs here; later moved to test_c10d_common.py)
    test_ddp_checkpointing_once, _unused_params, _twice and
    _weight_sharing (activation checkpointing, torch.utils.checkpoint:
    the layer's forward runs again in the backward pass), with collfuse's
    hook: each rank's half of the batch gives, averaged, the gradients of
    one process's model on the whole batch, both gradient_as_bucket_view
    settings; checkpointing twice and unused parameters need
    static_graph (DDP's own "mark a variable ready only once" otherwise,
    raised on every rank). And test_ddp_weight_sharing: one parameter of
    size elements in two modules, each times rank + 1: its gradient is
    2 (world + 1) / 2 (zero_grad to zeros or to None)."""
    from torch.utils.checkpoint import checkpoint

    class Once(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.l1 = torch.nn.Linear(20, 20)
            self.l2 = torch.nn.Linear(20, 20)

        def forward(self, inp):
            return checkpoint(self.l2, self.l1(inp))

    class Twice(Once):
        def forward(self, inp):
            return checkpoint(self.l2, checkpoint(self.l2, self.l1(inp)))

    def shared():
        l1, l2 = torch.nn.Linear(20, 20), torch.nn.Linear(20, 20)
        l1.weight = l2.weight
        return torch.nn.Sequential(l1, l2)

    def run(make, view, static=False, unused=False, whole=False):
        torch.manual_seed(31415)
        base = make()
        model, ddp = copy.deepcopy(base), DDP(copy.deepcopy(base), bucket_cap_mb=1, gradient_as_bucket_view=view,
                                              find_unused_parameters=unused)
        if static:
            ddp._set_static_graph()
        ddp.register_comm_hook(None, cft.allreduce_hook)
        g = gen(1400, 0)
        inp = torch.rand(16 * R, 20, generator=g, requires_grad=True)
        target = torch.randn(16 * R, 20, generator=g)
        mine = slice(16 * me, 16 * (me + 1))
        for i in range(5):
            model.zero_grad(set_to_none=False)
            ddp.zero_grad(set_to_none=False)
            for m, x, y in ((model, inp, target), (ddp, inp[mine], target[mine])):
                m.train()
                out = checkpoint(m, x) if whole else m(x)
                torch.nn.functional.mse_loss(out, y).backward()
            agree(grads(ddp.module), grads(model), "checkpointing %s (view %s, static_graph %s) iteration %d"
                  % (make.__name__, view, static, i))

    for view in (False, True):
        for static in (False, True):
            run(Once, view, static)
            run(shared, view, static, whole=True)
        run(Once, view, static=True, unused=True)
        run(Twice, view, static=True)
        expect_raises(RuntimeError, lambda: run(Twice, view), "mark a variable ready only once")
        expect_raises(RuntimeError, lambda: run(Once, view, unused=True), "mark a variable ready only once")
    in_step(me, "DDP's refusals of checkpointing without static_graph")

    class AcceptsParam(torch.nn.Module):
        def __init__(self, p, factor):
            super().__init__()
            self.a, self.f = p, factor

        def forward(self, x):
            return x + self.a * self.f

    p = torch.nn.Parameter(torch.randn(size, generator=gen(1500, 0)))
    for to_none in (False, True):
        for view in (False, True):
            m = DDP(torch.nn.Sequential(AcceptsParam(p, me + 1), AcceptsParam(p, me + 1)), bucket_cap_mb=1,
                    gradient_as_bucket_view=view)
            m.register_comm_hook(None, cft.allreduce_hook)
            for i in range(3):
                m.zero_grad(set_to_none=to_none)
                m(1).sum().backward()
                for name, q in m.named_parameters():
                    same(q.grad, torch.full_like(q, 2.0 * (R * (R + 1) / 2) / R),
                         "weight sharing: %s.grad (set_to_none %s, view %s) iteration %d" % (name, to_none, view, i))


def bf16(me, dist, DDP, cft):
    """peer: pytorch/pytorch test/distributed/algorithms/ddp_comm_hooks/test_ddp_hooks.py
    (the compression hooks' results) and test_c10d_gloo.py
    test_ddp_comm_hook_allreduce_hook / bf16_compress_hook: collfuse's
    bf16 hook's gradients are bfloat16 values near DDP's own, and
    torch's bf16_compress_hook's, bitwise (two ranks: each rounds to
    bfloat16, halving is exact, the sum rounds once), through DDP step by
    step and on buckets of 1 to 40001 elements. torch's hook itself needs
    a bfloat16 all_reduce, which gloo 1.13 lacks (and DDP 1.13 takes a
    hook of that name for NCCL's): it is computed as it computes, its sum
    through gloo's all_gather."""
    make = lambda: torch.nn.Sequential(torch.nn.Linear(8, 32), torch.nn.Tanh(), torch.nn.Linear(32, 3))
    for view in (False, True):
        kw = {"bucket_cap_mb": 0.0005, "gradient_as_bucket_view": view}
        # torch's own hook over gloo needs a bfloat16 all_reduce, which gloo 1.13 lacks: its
        # result here is computed as the hook does, from every rank's gradients gathered by gloo
        ref_g, _ = train(DDP, make, None, 3, me, kw)
        got_g, _ = train(DDP, make, cft.bf16_compress_hook, 3, me, kw)
        for s, g in enumerate(got_g):
            if not torch.equal(g, g.to(torch.bfloat16).float()):
                fail("bf16 hook: gradient %d holds values that are not bfloat16's" % s)
        agree(got_g, ref_g, "bf16 hook (gradient_as_bucket_view=%s) against DDP's own" % view, rtol=2 ** -7,
              atol=2e-3)
    # and through DDP, step by step: torch's hook as it computes (the bucket to bfloat16, divided
    # by the world size, summed, rounded once, written back), its sum over gloo's all_gather
    def torch_bf16(state, bucket):
        buf = bucket.buffer()
        half = buf.to(torch.bfloat16).div_(R)
        parts = [torch.empty(half.numel()) for _ in range(R)]
        dist.all_gather(parts, half.float())
        buf.copy_(torch.stack(parts).double().sum(0).to(torch.bfloat16))
        fut = torch.futures.Future()
        fut.set_result(buf)
        return fut

    for view in (False, True):
        kw = {"bucket_cap_mb": 0.0005, "gradient_as_bucket_view": view}
        want, _ = train(DDP, make, torch_bf16, 3, me, kw)
        got, _ = train(DDP, make, cft.bf16_compress_hook, 3, me, kw)
        agree(got, want, "bf16 hook (gradient_as_bucket_view=%s) against torch's bf16_compress_hook" % view,
              rtol=0, atol=0)
    # torch's own hook: the bucket divided by the world size in bfloat16, then summed; gloo 1.13
    # has no bfloat16 sum, so the sum of torch's compressed buckets is made here through
    # gloo's all_gather (as float32: exact), and compared bitwise with collfuse's hook on the same buckets
    torch.manual_seed(31)
    for n in (1, 7, 1000, 40001):
        buf = torch.randn(n, generator=gen(700 + n, me)) * 3
        torch_half = buf.to(torch.bfloat16).div_(R)
        parts = [torch.empty(n) for _ in range(R)]
        dist.all_gather(parts, torch_half.float())  # bfloat16 to float32 is exact
        torch_sum = torch.stack(parts).double().sum(0).to(torch.bfloat16)
        want = buf.clone().copy_(torch_sum)
        got = buf.clone()

        class Bucket:  # the two calls of GradBucket the hook makes, on got
            def buffer(self):
                return got

            def index(self):
                return 0

            def is_last(self):
                return True

        cft.bf16_compress_hook(None, Bucket()).wait()
        same(got, want, "bf16 hook of %d against torch's bf16_compress_hook" % n)


def refusals(me, dist, DDP, cft):
    """peer: pytorch/pytorch test/distributed/test_c10d_gloo.py DistributedDataParallelTest
    test_ddp_comm_hook_sparse_gradients (an EmbeddingBag with sparse
    gradients: collfuse's hooks refuse the sparse bucket by name, on every
    rank, before anything is sent), test_ddp_invalid_comm_hook_init (a
    state that is no process group: refused naming it) and
    test_ddp_comm_hook_register_just_once (torch refuses a second hook;
    the first trains)."""
    torch.manual_seed(41)
    for hook in (cft.allreduce_hook, cft.bf16_compress_hook):
        model = DDP(torch.nn.EmbeddingBag(10, 10, sparse=True))
        model.register_comm_hook(None, hook)
        idx = torch.randint(0, 10, (4, 3), generator=gen(800, me))
        expect_raises(RuntimeError, lambda: model(idx).sum().backward(), "collfuse", "sparse", "bucket")
    in_step(me, "the sparse buckets refused")
    model = DDP(torch.nn.Linear(4, 2))
    model.register_comm_hook("not a group", cft.allreduce_hook)
    expect_raises(RuntimeError, lambda: model(torch.randn(3, 4)).sum().backward(),
                  "collfuse.torch: the hook's state 'not a group'", "process group")
    in_step(me, "a state that is no group")
    model = DDP(torch.nn.Linear(4, 2))
    model.register_comm_hook(None, cft.allreduce_hook)
    expect_raises(RuntimeError, lambda: model.register_comm_hook(None, cft.allreduce_hook), "only be called once")
    x = torch.randn(3, 4, generator=gen(801, me))
    model(x).sum().backward()
    want = torch.stack([torch.ones(2, 1) @ xs.sum(0, keepdim=True) for xs in
                        [torch.randn(3, 4, generator=gen(801, r)) for r in range(R)]]).mean(0)
    if not torch.allclose(model.module.weight.grad, want, rtol=1e-5, atol=1e-6):
        fail("the hook registered once: gradient off by %g" % (model.module.weight.grad - want).abs().max().item())


def failed(me, dist, DDP, cft):
    """collfuse's own, after PyTorch's hook error cases: a collective that
    fails under a hook (a user hook on Work.get_future() averages a bucket
    one element short on the last rank: the ranks' all_reduces differ)
    raises from DDP's backward pass on every rank with collfuse's message
    (not torch's "Unable to cast ... to Tensor" for an exception set on
    the future), and the next backward pass's allreduce_hook says the
    world has stopped (its error carried to DDP the same way). Last: it
    stops collfuse's world."""
    def short_future(state, bucket):  # a user hook on Work.get_future(): its error reaches DDP too
        b = bucket.buffer()
        return cfd.all_reduce(b[:b.numel() - (me == R - 1)], async_op=True).get_future().then(lambda f: f.value()[0])

    for hook, words in ((short_future, "mismatch"), (cft.allreduce_hook, "an earlier collective failed")):
        model = DDP(torch.nn.Linear(7, 9))
        model.register_comm_hook(None, hook)
        try:
            model(torch.randn(2, 7, generator=gen(900, me))).sum().backward()
            fail("rank %d: a collective that failed under the hook raised nothing" % me)
        except RuntimeError as e:
            if words not in str(e) or "Unable to cast" in str(e):
                fail("rank %d: DDP's backward pass raised %r, want collfuse's error saying %r" % (me, str(e), words))


# ---------------- the ranks and the driver ----------------

def child():
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP
    import collfuse.torch as cft
    long_part = os.environ["CF_PEERS_PART"] == "all"
    for k, v in (("RANK", "OMPI_COMM_WORLD_RANK"), ("WORLD_SIZE", "OMPI_COMM_WORLD_SIZE")):
        if k not in os.environ:  # under mpirun: torch's variables from mpirun's
            os.environ[k] = os.environ[v]
    dist.init_process_group("gloo")
    cfd.init(backend=os.environ.get("CF_PEERS_BACKEND") or None)
    torch.set_num_threads(1)
    me = cfd.get_rank()
    allreduce_basics(me, dist)
    if long_part:
        allreduce_matrix(me, dist, GLOO_DTYPES, (1, 13, 4099, 65537))
    else:
        allreduce_matrix(me, dist, GLOO_DTYPES, (1, 13))
    allreduce_stress(me, dist)
    broadcast_basics(me, dist)
    allgather_alltoall(me, dist, (1, 5, 1000) if long_part else (1, 5))
    no_sync(me, dist, DDP, cft)
    ddp_scenarios(me, dist, DDP, cft)
    two_models(me, dist, DDP, cft)
    join(me, dist, DDP, cft)
    join_division(me, dist, DDP, cft)
    more_ddp(me, dist, DDP, cft)
    checkpointing(me, dist, DDP, cft, 2048 * 2048 if long_part else 100003)
    bf16(me, dist, DDP, cft)
    refusals(me, dist, DDP, cft)
    failed(me, dist, DDP, cft)
    dist.destroy_process_group()
    with open(os.path.join(os.environ["CF_OK_DIR"], "rank%d.ok" % me), "w") as f:
        f.write("ok\n")


def start(ok, part, scale, how):
    """The two ranks, as torchrun starts them ("torchrun": the shm world) or
    under mpirun ("mpirun": the world init chooses; "mpirun-mpi": MPI's)."""
    def run(master_port, _):
        for f in os.listdir(ok):
            os.unlink(os.path.join(ok, f))
        base = dict(os.environ, CF_PEERS_CHILD="1", CF_PEERS_PART=part, CF_OK_DIR=ok, MASTER_ADDR="127.0.0.1",
                    MASTER_PORT=str(master_port), CF_PEERS_BACKEND="mpi" if how == "mpirun-mpi" else "")
        if how != "torchrun":
            root = ["--allow-run-as-root"] if os.getuid() == 0 else []
            cmd = ["mpirun"] + root + ["--oversubscribe", "--bind-to", "none", "--mca", "btl", "self,vader"]
            for k in ("CF_PEERS_CHILD", "CF_PEERS_PART", "CF_PEERS_BACKEND", "CF_OK_DIR", "MASTER_ADDR", "MASTER_PORT",
                      "COLLFUSE_LIBRARY", "PYTHONPATH", "PYTHONDONTWRITEBYTECODE", "XDG_CACHE_HOME"):
                if k in base:
                    cmd += ["-x", k]
            cmd += ["-np", str(R), sys.executable, os.path.abspath(__file__)]
            return subprocess.run(cmd, env=dict(base, OMPI_MCA_rmaps_base_oversubscribe="1"), capture_output=True,
                                  text=True, timeout=300 * scale)
        procs = []
        for r in range(R):
            env = dict(base, RANK=str(r), WORLD_SIZE=str(R), LOCAL_RANK=str(r), LOCAL_WORLD_SIZE=str(R))
            procs.append(subprocess.Popen([sys.executable, os.path.abspath(__file__)], env=env,
                                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
        outs = []
        for p in procs:
            try:
                outs.append(p.communicate(timeout=300 * scale))
            except subprocess.TimeoutExpired:
                for q in procs:
                    q.kill()
                outs.append(p.communicate())
        return subprocess.CompletedProcess([], max(abs(p.returncode) for p in procs),
                                           "".join(o[0] for o in outs), "".join(o[1] for o in outs))
    p = ports.on_free_ports(run, "test_torch_peers")
    done = sorted(os.listdir(ok))
    if p.returncode != 0 or len(done) != R:
        fail("%d processes (%s): exit %d, ranks done %s\n%s%s" % (R, how, p.returncode, done, p.stdout, p.stderr))
    print("PyTorch's distributed cases (%s part): ok on %d processes (%s)" % (part, R, how))


def driver():
    if not HAVE_TORCH:
        print("test_torch_peers: no torch (python3-torch): skipped")
        sys.exit(77)
    shm = cfd.has_shm()
    mpi = subprocess.run(["sh", "-c", "command -v mpirun"], capture_output=True).returncode == 0
    part = sys.argv[1] if len(sys.argv) > 1 else "fast"
    if part not in ("fast", "all"):
        sys.exit("usage: test_torch_peers.py [fast|all]")
    runs = (["torchrun"] if shm else []) + (["mpirun-mpi"] if mpi and (part == "all" or not shm) else [])
    if not runs:
        print("test_torch_peers: neither the shm world nor mpirun: skipped")
        sys.exit(77)
    scale = int(os.environ.get("CF_TEST_TIME_SCALE", "1") or 1)
    for how in runs:
        with tempfile.TemporaryDirectory(prefix="cf-peers") as ok:
            start(ok, part, scale, how)


if __name__ == "__main__":
    if CHILD:
        child()
    else:
        driver()
