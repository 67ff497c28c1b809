#!/usr/bin/python3
"""collfuse.distributed and collfuse.torch's DDP hooks across processes.

Started plainly (argument: the runs, "auto:2" unless given, e.g.
"mpirun:3,mpirun-mpi:3,torchrun:3": launcher and processes; auto is
torchrun where the library has the shm world, else mpirun; mpirun-mpi
forces the MPI world), it checks what needs no job (refusals naming the
launcher seen, calls before init), then starts itself for each run, where
every rank runs: all_reduce (each reduction),
all_gather, reduce_scatter, broadcast and all_to_all for every collfuse
dtype, on numpy arrays and (with torch) CPU torch tensors, against numpy
references computed in float64 from every rank's random data (each rank
makes all ranks' data from the same seeds); bad buffers refused before
anything is sent (the ranks stay in step); float32 at sizes past the
small-message algorithms; all_reduce with async_op=True (several started
at once, a call without it after them, matmul_reduce_scatter after one); groups (shm world; MPI refuses them); and with torch, a small model
under DDP over gloo with collfuse's allreduce_hook against DDP without a
hook, step by step, and its bf16 variant; last, ranks that call different
collectives all raise. Besides: ranks that say they are on two hosts, a
rank killed in the middle of an all_reduce, and registered memory the
kernel does not let the peers open (copied, with a warning). Exits 77 (skipped) without
mpirun; the torch parts say they are skipped without torch.
"""

import importlib.util
import os
import re
import subprocess
import sys
import tempfile

import numpy as np

import collfuse
import collfuse.distributed as cfd
from checks import expect_raises, fail

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bench"))
import ports  # noqa: E402 (bench/ports.py: a run started again when a port was taken meanwhile)

# torch's import is most of a process's start: the driver only asks whether
# it is there, and the ranks of hosts() and killed() touch no tensor of its
CHILD = os.environ.get("CF_DIST_CHILD")
torch = None
if CHILD and CHILD not in ("hosts", "killed"):
    try:
        import torch
    except ImportError:
        pass
HAVE_TORCH = torch is not None if CHILD else importlib.util.find_spec("torch") is not None

DTYPES = tuple(collfuse.DTYPES)  # every collfuse dtype
TORCH_LACKS = ("uint16", "uint32", "uint64")  # torch 1.13 has no such tensors
REDS = ("sum", "mean", "max", "min", "prod")


# ---------------- data and references ----------------

def data(dtype, n, rank, case, red=None):
    """Rank's random values of dtype (as the array collfuse takes: bfloat16
    as uint16 raw bits), small enough that every reduction stays exact in
    range (prod: few distinct magnitudes)."""
    rng = np.random.default_rng([7, case, rank])
    if dtype in ("float16", "bfloat16", "float32", "float64"):
        if red == "prod":
            v = rng.choice([-1.5, -1.0, -0.5, 0.5, 1.0, 1.25, 2.0], n)
        else:
            v = rng.integers(-64, 64, n) / 16.0  # exact in every float dtype
        if dtype == "bfloat16":
            return collfuse.float32_to_bf16(v)
        return v.astype(dtype)
    if dtype == "bool":
        return rng.integers(0, 2, n).astype(bool)
    if dtype.startswith("uint"):
        lo, hi = (1, 4) if red == "prod" else (0, 60)
    else:
        lo, hi = (-3, 4) if red == "prod" else (-9, 10)
    return rng.integers(lo, hi, n).astype(dtype)


def f64(dtype, a):
    return collfuse.bf16_to_float32(a).astype(np.float64) if dtype == "bfloat16" else a.astype(np.float64)


def reduce_ref(dtype, red, arrays):
    x = np.stack([f64(dtype, a) for a in arrays])
    if dtype == "bool":  # or and and
        return {"sum": x.max(0), "max": x.max(0), "min": x.min(0), "prod": x.min(0)}[red]
    r = {"sum": x.sum(0), "max": x.max(0), "min": x.min(0), "prod": x.prod(0), "mean": x.sum(0) / len(arrays)}[red]
    if red == "mean" and dtype not in ("float16", "bfloat16", "float32", "float64"):
        r = np.trunc(r)  # integers truncate toward zero
    return r


def close(dtype, got, want, what, ranks):
    g = f64(dtype, got)
    if dtype in ("float16", "bfloat16"):
        tol = (2.0 ** -7 if dtype == "bfloat16" else 2.0 ** -10) * ranks * (np.abs(want) + 1)
    elif dtype == "float32":
        tol = 1e-6 * ranks * (np.abs(want) + 1)
    else:
        tol = 0 if dtype != "float64" else 1e-13 * (np.abs(want) + 1)
    bad = np.abs(g - want) > tol
    if bad.any():
        i = int(np.argmax(bad))
        fail("%s %s: element %d is %r, want %r" % (what, dtype, i, g.flat[i], want.flat[i]))


# ---------------- under mpirun ----------------

def as_torch(dtype, a):
    if dtype == "bfloat16":
        return torch.from_numpy(collfuse.bf16_to_float32(a)).to(torch.bfloat16)
    return torch.from_numpy(a.copy())


def from_torch(dtype, t):
    if dtype == "bfloat16":
        return collfuse.float32_to_bf16(t.float().numpy())
    return t.numpy()


def collectives(me, R, kinds):
    """Every collective on every dtype for each kind ('numpy', 'torch')."""
    case = 0
    n = 6 * R  # divisible into R blocks
    for kind in kinds:
        wrap = (lambda d, a: a) if kind == "numpy" else as_torch
        unwrap = (lambda d, a: a) if kind == "numpy" else from_torch
        for dt in DTYPES:
            if kind == "torch" and dt in TORCH_LACKS:
                continue
            bits = "bfloat16" if dt == "bfloat16" and kind == "numpy" else None  # uint16 raw bits
            for red in REDS:
                case += 1
                every = [data(dt, n, r, case, red) for r in range(R)]
                x = wrap(dt, every[me].copy())
                if dt == "bool" and red == "mean":
                    expect_raises(collfuse.CollfuseError, lambda: cfd.all_reduce(x, op=red), "mean")
                    continue
                cfd.all_reduce(x, op=red, dtype=bits)
                close(dt, unwrap(dt, x), reduce_ref(dt, red, every), "%s all_reduce %s" % (kind, red), R)
            case += 1
            every = [data(dt, n, r, case) for r in range(R)]
            out = wrap(dt, np.zeros(n * R, every[0].dtype))
            cfd.all_gather(out, wrap(dt, every[me]), dtype=bits)
            close(dt, unwrap(dt, out), f64(dt, np.concatenate(every)), kind + " all_gather", R)

            out = wrap(dt, np.zeros(n // R, every[0].dtype))
            cfd.reduce_scatter(out, wrap(dt, every[me]), op="sum", dtype=bits)
            want = reduce_ref(dt, "sum", every)[me * (n // R):(me + 1) * (n // R)]
            close(dt, unwrap(dt, out), want, kind + " reduce_scatter", R)

            root = (case + 1) % R
            x = wrap(dt, every[me].copy())
            cfd.broadcast(x, src=root, dtype=bits)
            close(dt, unwrap(dt, x), f64(dt, every[root]), kind + " broadcast", R)

            out = wrap(dt, np.zeros(n, every[0].dtype))
            cfd.all_to_all(out, wrap(dt, every[me]), dtype=bits)
            b = n // R
            want = np.concatenate([f64(dt, every[r][me * b:(me + 1) * b]) for r in range(R)])
            close(dt, unwrap(dt, out), want, kind + " all_to_all", R)


def large(me, R):
    """Sizes past the small-message algorithms (rsag, ring, pipelined chunks):
    float32 sum and mean, and the other collectives, against the references."""
    for case, n in enumerate((R * 40000 + R, R * (1 << 19))):
        every = [data("float32", n, r, 1000 + case) for r in range(R)]
        for red in ("sum", "mean"):
            x = every[me].copy()
            cfd.all_reduce(x, op=red)
            close("float32", x, reduce_ref("float32", red, every), "large all_reduce %s, %d elements" % (red, n), R)
        out = np.empty(n * R, np.float32)
        cfd.all_gather(out, every[me])
        close("float32", out, f64("float32", np.concatenate(every)), "large all_gather", R)
        out = np.empty(n // R, np.float32)
        cfd.reduce_scatter(out, every[me])
        close("float32", out, reduce_ref("float32", "sum", every)[me * (n // R):(me + 1) * (n // R)],
              "large reduce_scatter", R)
        x = every[me].copy()
        cfd.broadcast(x, src=R - 1)
        close("float32", x, f64("float32", every[R - 1]), "large broadcast", R)
        out = np.empty(n, np.float32)
        cfd.all_to_all(out, every[me])
        b = n // R
        close("float32", out, np.concatenate([f64("float32", every[r][me * b:(me + 1) * b]) for r in range(R)]),
              "large all_to_all", R)


def started(me, R):
    """all_reduce(async_op=True): several started back to back on collfuse's
    thread (sizes past the small-message algorithms, sum and mean, float32
    and float64), a call without async_op after them, then each Work's
    result against the float64 reference; then() runs once each has ended,
    at once when it already has."""
    sizes = (7, R * 40000 + 3, 1000, R * (1 << 17))
    every, xs, works, ended = [], [], [], []
    for k, n in enumerate(sizes):
        dt, red = ("float32", "sum") if k % 2 == 0 else ("float64", "mean")
        e = [data(dt, n, r, 3000 + k) for r in range(R)]
        x = e[me].copy()
        w = cfd.all_reduce(x, op=red, async_op=True)
        w.then(lambda wk, k=k: ended.append(k))
        every.append((dt, red, e))
        xs.append(x)
        works.append(w)
    y = data("float32", 33, me, 3100)
    want_y = reduce_ref("float32", "sum", [data("float32", 33, r, 3100) for r in range(R)])
    cfd.all_reduce(y)  # after the started ones (same order on every rank)
    close("float32", y, want_y, "all_reduce after started ones", R)
    for k, w in enumerate(works):
        if w.wait() is not xs[k] or not w.is_completed() or w.exception() is not None:
            fail("started all_reduce %d: wait() %r, completed %r, exception %r"
                 % (k, type(w.wait()), w.is_completed(), w.exception()))
        dt, red, e = every[k]
        close(dt, xs[k], reduce_ref(dt, red, e), "started all_reduce %s, %d elements" % (red, sizes[k]), R)
    if sorted(ended) != list(range(len(sizes))):
        fail("started all_reduce: then() ran for %r" % ended)
    now = []
    works[0].then(lambda wk: now.append(wk))
    if now != [works[0]]:
        fail("then() on an ended Work did not run at once: %r" % now)
    # matmul_reduce_scatter right after a started all_reduce: it runs after
    # it (the fused op on this thread, the all_reduce on collfuse's), not
    # beside it in the same world
    n, m, k, c = R * (1 << 18), R * 32, 64, 48
    e = [data("float32", n, r, 3200) for r in range(R)]
    x = e[me].copy()
    w = cfd.all_reduce(x, async_op=True)
    x1s = [data("float32", m * k, r, 3201).reshape(m, k) for r in range(R)]
    x2s = [data("float32", k * c, r, 3202).reshape(k, c) for r in range(R)]
    out = np.empty((m // R, c), dtype=np.float32)
    cfd.matmul_reduce_scatter(out, x1s[me], x2s[me])
    want = sum(a.astype(np.float64) @ b.astype(np.float64) for a, b in zip(x1s, x2s))[me * (m // R):(me + 1) * (m // R)]
    close("float32", out, want, "matmul_reduce_scatter after a started all_reduce", R)
    w.wait()
    close("float32", x, reduce_ref("float32", "sum", e), "the all_reduce started before matmul_reduce_scatter", R)


def groups(me, R):
    """Collectives over groups (lists of job ranks, in group order): the job
    reversed, pairs, a rank alone; on the shm world only (MPI refuses)."""
    rev = list(range(R))[::-1]
    x = data("float32", 4 * R, me, 500)
    if cfd.backend() != "shm":
        expect_raises(ValueError, lambda: cfd.all_reduce(x, group=rev), "shm world only")
        return
    every = [data("float32", 4 * R, r, 500) for r in range(R)]
    pair = [r for r in range(R) if r // 2 == me // 2]
    for grp in (rev, pair, [me]):
        y = every[me].copy()
        cfd.all_reduce(y, group=grp)
        close("float32", y, reduce_ref("float32", "sum", [every[r] for r in grp]), "group %s all_reduce" % grp, R)
        out = np.empty(4 * R * len(grp), np.float32)
        cfd.all_gather(out, every[me], group=grp)
        close("float32", out, f64("float32", np.concatenate([every[r] for r in grp])), "group %s all_gather" % grp, R)
        y = every[me].copy()
        cfd.broadcast(y, src=grp[-1], group=grp)
        close("float32", y, f64("float32", every[grp[-1]]), "group %s broadcast" % grp, R)
    expect_raises(ValueError, lambda: cfd.all_reduce(x, group=[r for r in range(R) if r != me]), "not in group")
    expect_raises(ValueError, lambda: cfd.broadcast(x, src=(me + 1) % R, group=[me]), "not a rank of group")


def refusals(me, R):
    """Bad buffers raise on every rank before anything is sent: the ranks
    stay in step (the all_reduce after them agrees)."""
    a = np.arange(4 * R, dtype=np.float32).reshape(2 * R, 2)
    expect_raises(ValueError, lambda: cfd.all_reduce(a.T), "not C-contiguous")
    expect_raises(TypeError, lambda: cfd.all_reduce(np.zeros(3, np.complex64)), "complex64")
    expect_raises(TypeError, lambda: cfd.all_reduce([1.0, 2.0]), "a list")
    expect_raises(TypeError, lambda: cfd.all_reduce(np.zeros(3, np.float32), dtype="bfloat16"), "uint16 array")
    expect_raises(ValueError, lambda: cfd.all_reduce(np.zeros(3, np.int32), dtype="int64"), "only 'bfloat16'")
    ro = np.ones(4, np.float32)
    ro.flags.writeable = False
    expect_raises(ValueError, lambda: cfd.all_reduce(ro), "read-only")
    expect_raises(ValueError, lambda: cfd.all_gather(np.zeros(3, np.float32), np.zeros(2, np.float32)),
                  "all_gather", "want %d" % (2 * R))
    expect_raises(TypeError, lambda: cfd.all_gather(np.zeros(2 * R, np.float64), np.zeros(2, np.float32)),
                  "float64", "float32")
    expect_raises(ValueError, lambda: cfd.reduce_scatter(np.zeros(2, np.int32), np.zeros(2, np.int32)),
                  "reduce_scatter")
    expect_raises(ValueError, lambda: cfd.all_to_all(np.zeros(R + 1, np.int8), np.zeros(R + 1, np.int8)),
                  "equal blocks")
    expect_raises(ValueError, lambda: cfd.broadcast(np.zeros(2, np.int8), src=R), "not a rank")
    expect_raises(ValueError, lambda: cfd.all_reduce(np.zeros(2), op="avgmax"), "reduction")
    buf = np.zeros(4 * R, np.float32)
    expect_raises(ValueError, lambda: cfd.all_gather(buf, buf[:4]), "overlaps")
    if torch is not None:
        t = torch.arange(4 * R, dtype=torch.float32).reshape(2 * R, 2)
        expect_raises(ValueError, lambda: cfd.all_reduce(t.t()), "not contiguous")
        expect_raises(ValueError, lambda: cfd.all_reduce(torch.empty(4, device="meta")), "device 'meta'")
        expect_raises(TypeError, lambda: cfd.all_reduce(torch.zeros(4), dtype="bfloat16"), "not bfloat16")
        expect_raises(TypeError, lambda: cfd.all_reduce(torch.zeros(4, dtype=torch.complex64)), "complex64")
        expect_raises(TypeError, lambda: cfd.all_reduce(torch.zeros(4).to_sparse()), "sparse")
        leaf = torch.ones(4, requires_grad=True)
        expect_raises(ValueError, lambda: cfd.all_reduce(leaf), "requires grad")
    x = np.full(5, me + 1, np.float64)
    cfd.all_reduce(x)
    if not (x == R * (R + 1) / 2).all():
        fail("all_reduce after the refusals: %r" % x)


def ddp(me, R):
    """A small model under DDP over gloo: collfuse's hooks against DDP's own
    allreduce, step by step."""
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP
    import collfuse.torch as cft
    os.environ.setdefault("RANK", str(me))
    os.environ.setdefault("WORLD_SIZE", str(R))
    dist.init_process_group("gloo")
    torch.set_num_threads(1)

    seen_copies, kept = [], []

    def train(hook, steps=4):
        torch.manual_seed(3)
        net = torch.nn.Sequential(torch.nn.Linear(17, 32), torch.nn.Tanh(), torch.nn.Linear(32, 5))
        model = DDP(net, gradient_as_bucket_view=True, bucket_cap_mb=0.001)  # several buckets
        if hook:
            model.register_comm_hook(None, hook)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        gen = torch.Generator().manual_seed(100 + me)
        losses, grads = [], []
        for _ in range(steps):
            opt.zero_grad()
            loss = model(torch.randn(8, 17, generator=gen)).square().mean()
            loss.backward()
            if hook:
                seen_copies.append(cfd.last_copies())
            if hook is cft.allreduce_hook:
                kept.append(all(cfd.registered(p.grad) for p in model.parameters()))
            grads.append(torch.cat([p.grad.flatten() for p in model.parameters()]).clone())
            opt.step()
            losses.append(loss.item())
        return losses, grads

    ref, ref_g = train(None)
    got, got_g = train(cft.allreduce_hook)
    if cfd.backend() == "shm" and any(c != (0, 0) for c in seen_copies):
        fail("allreduce_hook on shm: copies %r after each step's last bucket, want (0, 0) (the buckets "
             "registered)" % seen_copies)
    # DDP's first buckets (replaced after the first step) stay registered, so held, only through
    # that step; buckets a later step uses again stay registered
    if cfd.backend() == "shm" and (kept[0] or not kept[-1]):
        fail("allreduce_hook on shm: buckets registered after each step %r, want the first step's let go "
             "and the last step's kept" % kept)
    for s, (a, b) in enumerate(zip(ref_g, got_g)):
        if not torch.allclose(a, b, rtol=1e-5, atol=1e-7):
            fail("allreduce_hook: step %d's averaged gradients differ from DDP's own (max %g)"
                 % (s, (a - b).abs().max().item()))
    if not np.allclose(ref, got, rtol=1e-5):
        fail("allreduce_hook: losses %r, DDP's own %r" % (got, ref))
    bf, bf_g = train(cft.bf16_compress_hook)
    for s, (a, b) in enumerate(zip(ref_g, bf_g)):
        if not torch.equal(b, b.to(torch.bfloat16).float()):
            fail("bf16_compress_hook: step %d's gradients are not bfloat16 values" % s)
        if not torch.allclose(a, b, rtol=2 ** -6, atol=1e-3):
            fail("bf16_compress_hook: step %d's gradients are far from DDP's own (max %g)"
                 % (s, (a - b).abs().max().item()))
    traced(me, R, train, cft)
    dist.destroy_process_group()


def nest(evs, what):
    """The spans of one lane nest: each lies inside the one open before it,
    or starts after it ended (Chrome's complete events, as drawn)."""
    open_ = []
    for e in sorted(evs, key=lambda e: (e["ts"], -e["dur"])):
        while open_ and e["ts"] >= open_[-1]["ts"] + open_[-1]["dur"] - 0.002:
            open_.pop()
        if open_ and e["ts"] + e["dur"] > open_[-1]["ts"] + open_[-1]["dur"] + 0.002:
            fail("%s: '%s' at %.3f us (%.3f long) overlaps '%s' at %.3f us (%.3f long) without nesting"
                 % (what, e["name"], e["ts"], e["dur"], open_[-1]["name"], open_[-1]["ts"], open_[-1]["dur"]))
        open_.append(e)


def traced(me, R, train, cft):
    """HookState(trace=...): each rank's Chrome trace of the DDP buckets,
    the hook's calls and the library's runs on one clock."""
    import json
    calls = []
    warm = [True]  # untraced passes first: DDP's buckets before and after its rebuild compiled (on the
    # hook's thread, while the runner may still average the bucket before: not a span of lane 3's)

    def counted(state, bucket):
        if warm[0]:
            return cft.allreduce_hook(None, bucket)
        calls.append((bucket.index(), bucket.buffer().numel() * 4))
        return cft.allreduce_hook(state, bucket)
    with tempfile.TemporaryDirectory(prefix="cf-trace") as d:
        state = cft.HookState(trace=os.path.join(d, "ddp.json"))
        # the last layer's gradients (1.3 MB) fill DDP's first bucket (1 MB): after DDP's first
        # pass, each has two buckets, the last one (bucket.is_last()) handed over last
        net = torch.nn.Sequential(torch.nn.Linear(17, 64), torch.nn.Tanh(), torch.nn.Linear(64, 5000))
        from torch.nn.parallel import DistributedDataParallel as DDP
        model = DDP(net, gradient_as_bucket_view=True, bucket_cap_mb=0.001)
        model.register_comm_hook(state, counted)
        for _ in range(2):
            model(torch.randn(8, 17)).square().mean().backward()
        warm[0] = False
        for _ in range(3):
            model(torch.randn(8, 17)).square().mean().backward()
        cfd.barrier()  # after the runner's callbacks: the rewrite after the last bucket is done
        with open(os.path.join(d, "ddp.rank%d.json" % me)) as f:
            between = json.load(f)
        cfd.set_trace(None)  # stops and writes
        with open(os.path.join(d, "ddp.rank%d.json" % me)) as f:
            t = json.load(f)
    # rewritten after each backward pass's last bucket (bucket.is_last()): every bucket so far is there
    got = sorted(e["args"]["index"] for e in between["traceEvents"] if e.get("cat") == "bucket")
    if len(set(i for i, _ in calls)) < 2 or got != sorted(i for i, _ in calls):
        fail("trace: between steps, buckets %r in the file, want every one handed over %r"
             % (got, sorted(i for i, _ in calls)))
    other = t["otherData"]
    if other.get("ranks") != R or other.get("rank") != me or other.get("dropped_events") != 0 \
            or not isinstance(other.get("start_us"), float):
        fail("trace: otherData %r" % other)
    names = {(e["pid"], e.get("tid")): e["args"]["name"] for e in t["traceEvents"] if e["ph"] == "M"}
    for lane in range(4):
        if (me, lane) not in names:
            fail("trace: rank %d has no lane %d (%r)" % (me, lane, names))
    evs = [e for e in t["traceEvents"] if e["ph"] == "X"]
    for e in evs:
        if e["pid"] not in (me, R) or e["ts"] < 0 or e["dur"] < 0 or e.get("tid") not in range(4):
            fail("trace: event %r" % e)
    lanes = {}
    for e in evs:
        lanes.setdefault((e["pid"], e["tid"]), []).append(e)
    for k, v in lanes.items():
        nest(v, "trace lane %r" % (k,))
    hooks = [(e["args"]["index"], e["args"]["bytes"]) for e in lanes.get((me, 2), ()) if e["cat"] == "hook"]
    buckets = [e for e in lanes.get((me, 3), ()) if e["cat"] == "bucket"]
    if sorted(hooks) != sorted(calls) or sorted((b["args"]["index"], b["args"]["bytes"]) for b in buckets) \
            != sorted(calls) or len(calls) < 3:
        fail("trace: hook calls %r, hook events %r, bucket events %r" % (calls, hooks, len(buckets)))
    reds = [e for e in lanes[(me, 3)] if e["name"] == "all_reduce"]
    for b in buckets:  # each bucket's turn holds its collective
        if not any(b["ts"] <= a["ts"] and a["ts"] + a["dur"] <= b["ts"] + b["dur"] + 0.002 for a in reds):
            fail("trace: bucket %r holds no all_reduce" % b)
    runs = [e for e in lanes.get((me, 0), ()) if e["name"] == "iteration"]
    if len(runs) != len(reds):
        fail("trace: %d collective calls but %d library runs" % (len(reds), len(runs)))
    for r in runs:  # the library's events on the same clock: inside the call that ran them
        if not any(a["ts"] - 0.002 <= r["ts"] and r["ts"] + r["dur"] <= a["ts"] + a["dur"] + 0.002 for a in reds):
            fail("trace: the library's run at %.3f us lies in no all_reduce call" % r["ts"])


def copies(me, R):
    """The copies collfuse.distributed says it made: under MPI one of an
    in-place result into the caller's buffer, none out of place; on the shm
    world the input into its memory and the result out, nothing more."""
    x = np.full(1000, me + 1.0, np.float32)
    cfd.all_reduce(x)
    got = cfd.last_copies()
    o = np.empty(1000 * R, np.float32)
    cfd.all_gather(o, x)
    want = {"mpi": ((1, 4000), (0, 0)),  # the in-place result into the caller's buffer
            "shm": ((2, 8000), (2, 4000 * (1 + R)))}[cfd.backend()]  # into the world's memory and out
    if (got, cfd.last_copies()) != want:
        fail("copies on %s: all_reduce %r, all_gather %r; want %r" % (cfd.backend(), got, cfd.last_copies(), want))
    if not (o == R * (R + 1) / 2).all():
        fail("all_gather of the all_reduce: %r" % o[:4])
    if torch is not None:
        registered(me, R)


def registered(me, R):
    """Torch tensors registered with the shm world (cfd.register): no copy,
    all_reduce in place, a view inside the storage too, and async; against
    the float64 sum of every rank's random data. Elsewhere register says
    there is nothing to do."""
    n = 70001
    t = torch.from_numpy(np.random.default_rng([11, me]).standard_normal(2 * n).astype(np.float32))
    if not cfd.register(t):
        if cfd.backend() == "shm":
            fail("register on shm: nothing done")
        return
    if not t.is_shared() or not cfd.registered(t[n:]):
        fail("register: the storage is not shared, or a view of it not registered")
    ref = sum(np.random.default_rng([11, r]).standard_normal(2 * n).astype(np.float32).astype(np.float64)
              for r in range(R))
    cfd.all_reduce(t[:n])
    if cfd.last_copies() != (0, 0):
        fail("all_reduce of a registered tensor: copies %r, want (0, 0)" % (cfd.last_copies(),))
    cfd.all_reduce(t[n:], async_op=True).wait()
    if cfd.last_copies() != (0, 0):
        fail("async all_reduce of a registered view: copies %r, want (0, 0)" % (cfd.last_copies(),))
    err = np.abs(t.numpy().astype(np.float64) - ref).max()
    if err > 1e-5 * R:
        fail("all_reduce of a registered tensor: off the float64 sum by %g" % err)
    plain = torch.ones(n)
    cfd.all_reduce(plain)
    if cfd.last_copies() != (2, 8 * n) or not (plain == R).all():
        fail("all_reduce of an unregistered tensor after: copies %r" % (cfd.last_copies(),))
    cfd.unregister(t)
    if cfd.registered(t):
        fail("unregister: still registered")
    # compile_step's buckets: zeros made in shared memory (nothing to move), registered as they are
    z = cfd._shared_zeros(n, torch.float64)
    if z is not None:
        ptr = z.storage().data_ptr()
        if not z.is_shared() or z.shape != (n,) or z.dtype != torch.float64 or z.abs().max() != 0:
            fail("_shared_zeros: shared %s, shape %s, %s, max %s" % (z.is_shared(), z.shape, z.dtype, z.abs().max()))
        z[:] = torch.from_numpy(np.random.default_rng([12, me]).standard_normal(n))
        if not cfd.register(z) or z.storage().data_ptr() != ptr:
            fail("_shared_zeros: register moved it or refused it")
        cfd.all_reduce(z)
        want = sum(np.random.default_rng([12, r]).standard_normal(n) for r in range(R))
        if cfd.last_copies() != (0, 0) or np.abs(z.numpy() - want).max() > 1e-12 * R:
            fail("_shared_zeros: all_reduce copies %r, off the float64 sum by %g"
                 % (cfd.last_copies(), np.abs(z.numpy() - want).max()))
        cfd.unregister(z)
    # from 4 MiB: in the library's memory of 2 MiB pages (cf_shm_memory), whose pages the
    # peers let go of once the collective is done with them
    nb = cfd._HUGE_MIN // 8 + 1001
    z = cfd._shared_zeros(nb, torch.float64)
    if z is not None and cfd.backend() == "shm":
        z[:] = torch.from_numpy(np.random.default_rng([13, me]).standard_normal(nb))
        base = z.storage().data_ptr()
        with open("/proc/self/maps") as m:
            own = [ln for ln in m if ln.startswith("%x-" % base)]
        if not own or not (own[0].split()[5:6] == ["/region"] or "collfuse-shm-region" in own[0]):
            fail("_shared_zeros of %d bytes: not in cf_shm_memory's file: %r" % (8 * nb, own))
        if not cfd.register(z):
            fail("_shared_zeros of %d bytes: register refused it" % (8 * nb))
        cfd.all_reduce(z)
        want = sum(np.random.default_rng([13, r]).standard_normal(nb) for r in range(R))
        if cfd.last_copies() != (0, 0) or np.abs(z.numpy() - want).max() > 1e-12 * R:
            fail("_shared_zeros of %d bytes: all_reduce copies %r, off the float64 sum by %g"
                 % (8 * nb, cfd.last_copies(), np.abs(z.numpy() - want).max()))
        # the peers' such memory mapped here, none of it resident (where it is in 2 MiB pages)
        maps, kb, cur = 0, 0, False
        with open("/proc/self/smaps") as m:
            lines = list(m)
        for line in lines:
            f = line.split()
            if len(f) >= 5 and "-" in f[0] and not f[0].endswith(":"):
                cur = int(f[0].split("-")[0], 16) != base and f[5:6] == ["/region"]
                maps += cur
            elif cur and f[0] == "Rss:":
                kb += int(f[1])
        if os.fstat(z.storage()._share_fd_cpu_()[0]).st_blksize >= 2 << 20 and (maps != R - 1 or kb != 0):
            fail("_shared_zeros of %d bytes: %d kB of the peers' memory of 2 MiB pages resident here in %d "
                 "maps after all_reduce; want 0 kB in %d" % (8 * nb, kb, maps, R - 1))
        cfd.unregister(z)


def mismatch(me, R):
    """Ranks that call different collectives all raise, naming the other
    rank; the world then refuses further calls. (Last: it stops the world.)
    The last rank repeats a kept executable (started() made a 7-element
    one: its run checks nothing before its first message) while the others
    start a new one (1001 elements, the same on each: its first run checks
    the job first): the two meet at the first message, on every world, well
    before the timeout. (The world is the one init joined: ddp() set
    torchrun's variables meanwhile, which the library reads first.)"""
    x = np.ones(7 if me == R - 1 else 1001, np.float32)
    try:
        # a kept barrier meets no barrier after it: a slow rank may still
        # finish it when a fast one finds the mismatch, and fails there
        cfd.barrier()
        cfd.all_reduce(x)
        fail("rank %d: ranks of %s elements each made no error" % (me, [1001] * (R - 1) + [7]))
    except collfuse.CollfuseError as e:
        named = {int(w) for w in re.findall(r"rank (\d+)", str(e))}
        if "mismatch" not in str(e) or len(named) < 2 or R - 1 not in named:
            fail("rank %d: the mismatch error does not name the last rank and another: %s" % (me, e))
    expect_raises(collfuse.CollfuseError, lambda: cfd.all_reduce(np.ones(3)), "an earlier collective failed")


def hosts_child():
    """A rank of a job whose ranks say they are on two hosts (COLLFUSE_HOSTID):
    init raises the library's message naming each host and its ranks."""
    expect_raises(Exception, lambda: cfd.init(), "the job's 2 ranks are on 2 hosts: 'hostA' (rank 0); "
                  "'hostB' (rank 1)", "start it with mpirun")
    if cfd.is_initialized():
        fail("a refused init left the module initialized")
    with open(os.path.join(os.environ["CF_OK_DIR"], "rank%s.ok" % os.environ["RANK"]), "w") as f:
        f.write("ok\n")


def hosts(ok, scale):
    """Two processes as torchrun starts them on one host, each told it is on
    another (COLLFUSE_HOSTID): both refuse, having met over TCP at
    MASTER_ADDR:MASTER_PORT+1."""
    port = ports.port_pair()[0]
    procs = []
    for r in range(2):
        env = dict(os.environ, CF_DIST_CHILD="hosts", CF_OK_DIR=ok, RANK=str(r), WORLD_SIZE="2",
                   LOCAL_RANK=str(r), LOCAL_WORLD_SIZE="2", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port),
                   COLLFUSE_HOSTID="host" + "AB"[r])
        procs.append(subprocess.Popen([sys.executable, os.path.abspath(__file__)], env=env,
                                      stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
    outs = [p.communicate(timeout=120 * scale)[0] for p in procs]
    done = sorted(os.listdir(ok))
    if any(p.returncode for p in procs) or len(done) != 2:
        fail("ranks on two hosts: exits %s, ranks done %s\n%s" % ([p.returncode for p in procs], done,
                                                                  "".join(outs)))
    print("ranks on two hosts: refused by both, naming the hosts")


def unopenable_child():
    """A rank of a 2-rank shm job whose peers the kernel refuses each
    other's memory through /proc (as Yama's ptrace_scope 2 does): rank 1
    is made non-dumpable and both give up CAP_SYS_PTRACE before init.
    register() still registers; all_reduce of the registered tensor gives
    the float64 sum, copying it through the world's memory (2 copies), and
    the library's warning saying so reaches stderr (the driver counts it)."""
    import ctypes
    libc = ctypes.CDLL(None, use_errno=True)
    hdr = (ctypes.c_uint32 * 2)(0x20080522, 0)  # _LINUX_CAPABILITY_VERSION_3, this thread
    caps = (ctypes.c_uint32 * 6)()  # 2 x {effective, permitted, inheritable}
    if libc.capget(hdr, caps) != 0:
        fail("capget: errno %d" % ctypes.get_errno())
    caps[0] &= ~(1 << 19)  # CAP_SYS_PTRACE, effective
    caps[1] &= ~(1 << 19)  # and permitted
    if libc.capset(hdr, caps) != 0:
        fail("capset: errno %d" % ctypes.get_errno())
    if os.environ["RANK"] == "1" and libc.prctl(4, 0, 0, 0, 0) != 0:  # PR_SET_DUMPABLE 0
        fail("prctl: errno %d" % ctypes.get_errno())
    cfd.init(timeout=20)
    me = cfd.get_rank()
    n = 50001
    t = torch.from_numpy(np.random.default_rng([13, me]).standard_normal(n).astype(np.float32))
    if not cfd.register(t):
        fail("register on shm: nothing done")
    cfd.all_reduce(t)
    ref = sum(np.random.default_rng([13, r]).standard_normal(n).astype(np.float32).astype(np.float64)
              for r in range(2))
    err = np.abs(t.numpy().astype(np.float64) - ref).max()
    if cfd.last_copies() != (2, 8 * n) or err > 1e-5 * 2:
        fail("all_reduce of registered memory the peer cannot open: copies %r, off the sum by %g"
             % (cfd.last_copies(), err))
    cfd.all_reduce(t)  # the warning was said once
    with open(os.path.join(os.environ["CF_OK_DIR"], "rank%d.ok" % me), "w") as f:
        f.write("ok\n")


def unopenable(ok, scale):
    """unopenable_child's two processes, as torchrun starts them: both
    right, each saying once on stderr why registered memory is copied."""
    port = ports.port_pair()[0]
    procs = []
    for r in range(2):
        env = dict(os.environ, CF_DIST_CHILD="unopenable", CF_OK_DIR=ok, RANK=str(r), WORLD_SIZE="2",
                   LOCAL_RANK=str(r), LOCAL_WORLD_SIZE="2", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
        procs.append(subprocess.Popen([sys.executable, os.path.abspath(__file__)], env=env,
                                      stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
    outs = [p.communicate(timeout=120 * scale)[0] for p in procs]
    said = [len(re.findall(r"cannot open rank \d+'s memory through /proc/", o)) for o in outs]
    if any(p.returncode for p in procs) or len(os.listdir(ok)) != 2 or said != [1, 1] or \
            any("copied through the world's memory" not in o for o in outs):
        fail("registered memory the peers cannot open: exits %s, warnings %s\n%s"
             % ([p.returncode for p in procs], said, "".join(outs)))
    print("registered memory the peers cannot open: copied, with one warning on each rank")


def killed_child():
    """A rank of a 2-rank shm job: both average a tensor with
    all_reduce(async_op=True); then rank 1 SIGKILLs itself while rank 0 has
    started the next one, whose Work must fail naming rank 1 (its process
    died), well within the timeout; the world then refuses more calls.
    CF_KILLED "run": the next one is the same average (a run of the kept
    rank); "setup": a sum, whose executable joins the job first."""
    import signal
    cfd.init(timeout=20)
    me = cfd.get_rank()
    every = [data("float32", 4096, r, 4000) for r in range(2)]
    x = every[me].copy()
    cfd.all_reduce(x, op="mean", async_op=True).wait()
    close("float32", x, reduce_ref("float32", "mean", every), "all_reduce before the kill", 2)
    if me == 1:
        os.kill(os.getpid(), signal.SIGKILL)
    w = cfd.all_reduce(x, op="mean" if os.environ["CF_KILLED"] == "run" else "sum", async_op=True)
    expect_raises(collfuse.CollfuseError, w.wait, "rank 1", "died")
    expect_raises(collfuse.CollfuseError, lambda: cfd.all_reduce(x, async_op=True), "an earlier collective failed")
    with open(os.path.join(os.environ["CF_OK_DIR"], "rank0.ok"), "w") as f:
        f.write("ok\n")


def killed(ok, scale, where):
    """killed_child's two processes, as torchrun starts them: rank 1 ends by
    SIGKILL, rank 0 with the error naming it (no hang on the runner)."""
    port = ports.port_pair()[0]
    procs = []
    for r in range(2):
        env = dict(os.environ, CF_DIST_CHILD="killed", CF_KILLED=where, CF_OK_DIR=ok, RANK=str(r), WORLD_SIZE="2",
                   LOCAL_RANK=str(r), LOCAL_WORLD_SIZE="2", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
        procs.append(subprocess.Popen([sys.executable, os.path.abspath(__file__)], env=env,
                                      stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
    outs = [p.communicate(timeout=120 * scale)[0] for p in procs]
    if procs[0].returncode or procs[1].returncode != -9 or sorted(os.listdir(ok)) != ["rank0.ok"]:
        fail("a rank killed with a started all_reduce (%s): exits %s\n%s" % (where, [p.returncode for p in procs],
                                                                             "".join(outs)))
    print("a rank killed: the other's started all_reduce fails naming it (%s)" % where)


def child():
    if os.environ.get("CF_DIST_CHILD") == "hosts":
        return hosts_child()
    if os.environ.get("CF_DIST_CHILD") == "killed":
        return killed_child()
    if os.environ.get("CF_DIST_CHILD") == "unopenable":
        return unopenable_child()
    forced = os.environ.get("CF_DIST_BACKEND") or None
    cfd.init(deterministic=True, backend=forced)
    me, R = cfd.get_rank(), cfd.get_world_size()
    want = forced or ("shm" if cfd.has_shm() else "mpi")
    if cfd.backend() != want:
        fail("backend %r, want %r" % (cfd.backend(), want))
    expect_raises(TypeError, lambda: cfd.all_reduce(np.zeros(2), group=object()), "a list of ranks")
    collectives(me, R, ("numpy", "torch") if torch is not None else ("numpy",))
    large(me, R)
    started(me, R)
    groups(me, R)
    refusals(me, R)
    copies(me, R)
    if torch is not None:
        ddp(me, R)
    mismatch(me, R)
    with open(os.path.join(os.environ["CF_OK_DIR"], "rank%d.ok" % me), "w") as f:
        f.write("ok\n")


# ---------------- the driver ----------------

def start(how, R, ok, scale):
    """Run this file's child() on R processes: how is "mpirun" (the world
    init chooses), "mpirun-mpi" (backend "mpi" forced) or "torchrun"."""
    def run(master_port, rdzv_port):
        for f in os.listdir(ok):  # a run started again: the ranks of the one before say nothing
            os.unlink(os.path.join(ok, f))
        env = dict(os.environ, CF_DIST_CHILD="1", CF_OK_DIR=ok, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(master_port),
                   OMPI_MCA_rmaps_base_oversubscribe="1", CF_DIST_BACKEND="mpi" if how == "mpirun-mpi" else "")
        if how == "torchrun":
            cmd = [sys.executable, "-m", "torch.distributed.run", "--nnodes", "1", "--rdzv_backend", "c10d",
                   "--rdzv_endpoint", "127.0.0.1:%d" % rdzv_port, "--redirects", "2", "--tee", "2",
                   "--nproc_per_node", str(R), os.path.abspath(__file__)]
        else:
            root = ["--allow-run-as-root"] if os.getuid() == 0 else []
            cmd = ["mpirun"] + root + ["--oversubscribe", "--bind-to", "none", "--mca", "btl", "self,vader"]
            for k in ("CF_DIST_CHILD", "CF_DIST_BACKEND", "CF_OK_DIR", "MASTER_ADDR", "MASTER_PORT",
                      "COLLFUSE_LIBRARY", "PYTHONPATH", "PYTHONDONTWRITEBYTECODE", "XDG_CACHE_HOME"):
                if k in env:
                    cmd += ["-x", k]
            cmd += ["-np", str(R), sys.executable, os.path.abspath(__file__)]
        return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300 * scale)
    p = ports.on_free_ports(run, "test_distributed")
    done = sorted(os.listdir(ok))
    if p.returncode != 0 or len(done) != R:
        fail("%s, %d processes: exit %d, ranks done %s\n%s%s" % (how, R, p.returncode, done, p.stdout, p.stderr))
    print("%s, %d processes: ok" % (how, R))


def driver():
    shm = cfd.has_shm()
    # no job, or one collfuse cannot join: refused with what was seen
    expect_raises(RuntimeError, lambda: cfd.get_rank(), "not initialized")
    expect_raises(RuntimeError, lambda: cfd.init(environ={}), "no job to join", "mpirun, torchrun or srun")
    torchrun_env = {"RANK": "1", "WORLD_SIZE": "2", "LOCAL_WORLD_SIZE": "2"}
    if not shm:
        expect_raises(RuntimeError, lambda: cfd.init(environ=torchrun_env),
                      "started by torchrun (rank 1 of 2)", "not falling back")
        expect_raises(RuntimeError, lambda: cfd.init(environ={"SLURM_PROCID": "0", "SLURM_NTASKS": "4"}),
                      "started by srun (rank 0 of 4)")
    else:
        expect_raises(RuntimeError, lambda: cfd.init(backend="mpi", environ=torchrun_env),
                      "backend 'mpi' needs a job that mpirun started", "torchrun (rank 1 of 2)")
    expect_raises(ValueError, lambda: cfd.init(backend="nccl", environ=torchrun_env), "backend 'nccl'")
    expect_raises(ValueError, lambda: cfd.init(environ={"OMPI_COMM_WORLD_RANK": "x", "OMPI_COMM_WORLD_SIZE": "2"}),
                  "not integers")
    expect_raises(ValueError, lambda: cfd.init(environ={"OMPI_COMM_WORLD_RANK": "2", "OMPI_COMM_WORLD_SIZE": "2"}),
                  "out of range")
    if cfd.is_initialized():
        fail("a refused init left the module initialized")
    # the launchers as the library's table has them (cf_launcher_find), the first whose rank and size are set
    both = {"RANK": "0", "WORLD_SIZE": "2", "LOCAL_WORLD_SIZE": "2", "OMPI_COMM_WORLD_RANK": "0",
            "OMPI_COMM_WORLD_SIZE": "2"}  # mpirun's, and torch's set from them (ddp_train.py does)
    for env, want in (({"COLLFUSE_RANK": "1", "COLLFUSE_WORLD_SIZE": "3"}, ("collfuse run", 1, 3, None, False)),
                      ({"PMI_RANK": "0", "PMI_SIZE": "2"}, ("mpiexec", 0, 2, None, True)),
                      ({"SLURM_PROCID": "3", "SLURM_NTASKS": "4"}, ("srun", 3, 4, None, False)),
                      ({"OMPI_COMM_WORLD_RANK": "1", "OMPI_COMM_WORLD_SIZE": "4", "OMPI_COMM_WORLD_LOCAL_SIZE": "2"},
                       ("mpirun", 1, 4, 2, True)),
                      (both, ("torchrun", 0, 2, 2, True)), ({"RANK": "1"}, None), ({}, None)):
        if cfd._seen(env) != want or cfd.launcher(env) != (want[:3] if want else None):
            fail("launcher %r: %r, want %r" % (env, cfd._seen(env), want))
    # the runs: "auto" is torchrun where the library has the shm world, else mpirun
    runs = []
    for item in (sys.argv[1] if len(sys.argv) > 1 else "auto:2").split(","):
        how, R = item.split(":")
        if how == "auto":
            how = "torchrun" if shm else "mpirun"
        if how != "mpirun" and not shm:
            print("test_distributed: %s: this library has no shm world: run under mpirun only" % how)
            how = "mpirun"
        runs.append((how, int(R)))
    if any(h.startswith("mpirun") for h, _ in runs) and \
            subprocess.run(["sh", "-c", "command -v mpirun"], capture_output=True).returncode != 0:
        print("test_distributed: mpirun not found: the collectives across processes are skipped")
        sys.exit(77)
    if not HAVE_TORCH:
        if any(h == "torchrun" for h, _ in runs):
            print("test_distributed: no torch (python3-torch) for torchrun: skipped")
            sys.exit(77)
        print("test_distributed: no torch (python3-torch): torch tensors and the DDP hooks are skipped")
    scale = int(os.environ.get("CF_TEST_TIME_SCALE", "1") or 1)
    if shm:
        with tempfile.TemporaryDirectory(prefix="cf-dist") as ok:
            hosts(ok, scale)
        for where in ("run", "setup"):
            with tempfile.TemporaryDirectory(prefix="cf-dist") as ok:
                killed(ok, scale, where)
        if HAVE_TORCH:
            with tempfile.TemporaryDirectory(prefix="cf-dist") as ok:
                unopenable(ok, scale)
    for how, R in runs:
        with tempfile.TemporaryDirectory(prefix="cf-dist") as ok:
            start(how, R, ok, scale)


if __name__ == "__main__":
    if CHILD:
        child()
    else:
        driver()
