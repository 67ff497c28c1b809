#!/usr/bin/python3
"""collfuse.torch.compile_step in one process (no job): the tracing of
forward and backward into one graph, the steps against plain torch (the
same dtype bitwise, and a float64 copy within 1e-5 relative), BatchNorm's
buffers updated as eager torch does, the buckets against `collfuse compile
--json` of the exported graph for several --split forms and per-parameter
fusion (compiled for 4 ranks), a bucket's start before the last backward
node that does not feed it, the leaves as graph nodes, and the refusals.
Argument: the collfuse command line. Skips (77) without python3-torch."""

import contextlib
import copy
import ctypes
import gc
import io
import json
import os
import platform
import subprocess
import sys
import tempfile

try:
    import torch
except ImportError:
    print("test_step: no torch (python3-torch): skipped")
    sys.exit(77)

import collfuse.fx as cfx
import collfuse.step as cstep
import collfuse.torch as ct
from checks import expect_raises, fail

CLI = sys.argv[1]


def mlp(seed, dtype=torch.float32):
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(12, 24), torch.nn.BatchNorm1d(24), torch.nn.ReLU(),
                               torch.nn.Linear(24, 24), torch.nn.Tanh(), torch.nn.Linear(24, 3)).to(dtype)


def batch(k):
    g = torch.Generator().manual_seed(100 + k)
    return torch.randn(10, 12, generator=g), torch.randn(10, 3, generator=g)


# ---- steps against plain torch (same dtype: bitwise; float64: 1e-5)
m = mlp(1)
ref, ref64 = copy.deepcopy(m), copy.deepcopy(m).double()
opt = torch.optim.SGD(m.parameters(), lr=0.05, momentum=0.9)
opt_ref = torch.optim.SGD(ref.parameters(), lr=0.05, momentum=0.9)
opt64 = torch.optim.SGD(ref64.parameters(), lr=0.05, momentum=0.9)
step = ct.compile_step(m, torch.nn.functional.mse_loss, batch(0), optimizer=opt, split="bytes:2K")
if step.world_size != 1:
    fail("world size %d without a job" % step.world_size)
for k in range(4):
    x, y = batch(k)
    loss = step(x, y)
    for model, o, xx, yy in ((ref, opt_ref, x, y), (ref64, opt64, x.double(), y.double())):
        o.zero_grad()
        lr = torch.nn.functional.mse_loss(model(xx), yy)
        lr.backward()
        o.step()
        if model is ref:
            if not torch.equal(loss, lr.detach()):
                fail("step %d: loss %r, eager torch %r" % (k, float(loss), float(lr)))
        elif abs(float(loss) - float(lr)) > 1e-5 * abs(float(lr)):
            fail("step %d: loss %r, float64 torch %r" % (k, float(loss), float(lr)))
for (n, p), q in zip(m.state_dict().items(), ref.state_dict().values()):
    if not torch.equal(p, q):
        fail("after 4 steps, %s differs from eager torch's" % n)
# the gradients are views of the buckets
flat_ptrs = [(f.data_ptr(), f.data_ptr() + f.numel() * f.element_size()) for f in step.flat]
for n, p in m.named_parameters():
    if not any(lo <= p.grad.data_ptr() < hi for lo, hi in flat_ptrs):
        fail("%s's gradient is not a view of a bucket" % n)

if step.update_per_bucket or len(step.plan) < 2:  # off unless asked for
    fail("compile_step's default: update per bucket %r (%d buckets)" % (step.update_per_bucket, len(step.plan)))
# the last bucket averaged on the calling thread only where nothing is left to overlap it (one
# bucket, or no update per bucket) and it is at most 4 MiB (compiled for 2 ranks, not run)
for width, per_bucket, split, want in ((64, None, "bytes:64M", True), (1100, None, "bytes:64M", False),
                                       (64, None, "bytes:16K", False), (64, False, "bytes:16K", True)):
    torch.manual_seed(4)
    wide = torch.nn.Sequential(torch.nn.Linear(1000, width), torch.nn.Tanh(), torch.nn.Linear(width, 3))
    s_in = ct.compile_step(wide, torch.nn.functional.mse_loss, (torch.randn(4, 1000), torch.randn(4, 3)),
                           optimizer=torch.optim.SGD(wide.parameters(), lr=0.1), split=split, world_size=2,
                           update_per_bucket=per_bucket)
    if s_in.inline_last != want or (split == "bytes:64M") != (len(s_in.plan) == 1):
        fail("width %d, %s, update_per_bucket=%r: %d buckets of %s bytes, the last inline %r, want %r"
             % (width, split, per_bucket, len(s_in.plan), [f.numel() * 4 for f in s_in.flat], s_in.inline_last, want))

# nn.Linear's gradients (t(mm), view(sum)) are produced into their buckets;
# only BatchNorm's (a tuple of native_batch_norm_backward) are copied
into = sorted(n for n, _ in step.produced_into)
if into != ["0.bias", "0.weight", "3.bias", "3.weight", "5.bias", "5.weight"] or \
        sorted(step.copied) != [("1.bias", "aten.native_batch_norm_backward.default"),
                                ("1.weight", "aten.native_batch_norm_backward.default")]:
    fail("produced into the buckets %s, copied %s" % (step.produced_into, step.copied))
if step.copy_bytes != 2 * 24 * 4:
    fail("%d bytes copied into the buckets in a step, want BatchNorm's 192" % step.copy_bytes)
# each copied gradient is copied right after it is made and feeds nothing
# else (freed at once, as autograd's accumulation into .grad frees it; not
# held until its bucket's start)
copies = [n for n in step.gm.graph.nodes if n.target is getattr(cstep, "_to_bucket", None)]
if len(copies) != len(step.copied):
    fail("%d copies into buckets in the graph for the copied gradients %s" % (len(copies), step.copied))
for c in copies:
    grad = c.args[2]
    if c.prev is not grad or list(grad.users) != [c]:
        fail("the copy %s of gradient %s is not its only use right after it (users %s)"
             % (c.name, grad.name, list(grad.users)))

# ---- tracing_mode="fake": traced with fake tensors (nothing computed), the steps bitwise as
# eager torch's; a model fake tensors cannot trace (a plain tensor attribute, neither parameter
# nor buffer: torch 1.13's FakeTensorMode refuses real operands) is traced with real ones, said
# on stderr, and runs as eager torch does
if step.tracing_mode != "real":
    fail("the MLP was traced with %s tensors, want real ones (the default)" % step.tracing_mode)
fm = mlp(1)
fm_ref = copy.deepcopy(fm)
fm_step = ct.compile_step(fm, torch.nn.functional.mse_loss, batch(0), split="bytes:2K", tracing_mode="fake",
                          optimizer=torch.optim.SGD(fm.parameters(), lr=0.05, momentum=0.9))
fm_opt = torch.optim.SGD(fm_ref.parameters(), lr=0.05, momentum=0.9)
if fm_step.tracing_mode != "fake":
    fail("tracing_mode='fake': the MLP was traced with %s tensors" % fm_step.tracing_mode)


def against_eager(step, ref, opt, steps, what):
    """steps of step and of eager torch on ref with opt: the losses bitwise equal."""
    for k in range(steps):
        x, y = batch(k)
        loss = step(x, y)
        opt.zero_grad()
        lr = torch.nn.functional.mse_loss(ref(x), y)
        lr.backward()
        opt.step()
        if not torch.equal(loss, lr.detach()):
            fail("%s, step %d: loss %r, eager torch %r" % (what, k, float(loss), float(lr)))


against_eager(fm_step, fm_ref, fm_opt, 3, "traced with fake tensors")
for (n, p), q in zip(fm.state_dict().items(), fm_ref.state_dict().values()):
    if not torch.equal(p, q):
        fail("traced with fake tensors, after 3 steps, %s differs from eager torch's" % n)
expect_raises(ValueError, lambda: ct.compile_step(mlp(1), torch.nn.functional.mse_loss, batch(0),
                                                  tracing_mode="symbolic"), "tracing_mode", "'real' or 'fake'")

# ---- the optimizer updated bucket by bucket (update_per_bucket): one step per bucket, over that
# bucket's parameters, in the buckets' order; the results bitwise one step's (eager torch's), for
# SGD with momentum and Adam (foreach and not); one step over every parameter with False, or with
# an optimizer collfuse does not know to update each parameter on its own (a subclass)
class OwnSGD(torch.optim.SGD):
    pass


for make, per_bucket, want_per_bucket in (
        (lambda ps: torch.optim.SGD(ps, lr=0.05, momentum=0.9, weight_decay=1e-3), None, True),
        (lambda ps: torch.optim.Adam(ps, lr=1e-2), None, True),
        (lambda ps: torch.optim.Adam(ps, lr=1e-2, foreach=True, weight_decay=1e-2), None, True),
        (lambda ps: torch.optim.Adam(ps, lr=1e-2), False, False),
        (lambda ps: OwnSGD(ps, lr=0.05, momentum=0.9), None, False)):
    pm = mlp(3)
    pm_ref = copy.deepcopy(pm)
    p_opt, p_opt_ref = make(pm.parameters()), make(pm_ref.parameters())
    what = "%s, update_per_bucket=%r" % (type(p_opt).__name__, per_bucket)
    p_step = ct.compile_step(pm, torch.nn.functional.mse_loss, batch(0), optimizer=p_opt, split="bytes:1K",
                             update_per_bucket=per_bucket)
    calls = []
    p_opt.step = (lambda real: lambda: (calls.append([id(q) for g in p_opt.param_groups for q in g["params"]]),
                                        real())[1])(p_opt.step)
    against_eager(p_step, pm_ref, p_opt_ref, 3, what)
    for (n, q), r in zip(pm.state_dict().items(), pm_ref.state_dict().values()):
        if not torch.equal(q, r):
            fail("%s: after 3 steps, %s differs from eager torch's" % (what, n))
    names = {id(q): n for n, q in pm.named_parameters()}
    got = [[names[i] for i in c] for c in calls[:len(calls) // 3]]
    want = [ps for _, ps in p_step.bucket_params()] if want_per_bucket else [[n for n, _ in pm.named_parameters()]]
    if len(p_step.plan) < 3 or len(calls) != 3 * len(want) or list(map(sorted, got)) != list(map(sorted, want)) \
            or p_step.update_per_bucket != want_per_bucket:
        fail("%s: %d buckets, the optimizer stepped over %s in a step, want %s" % (what, len(p_step.plan), got, want))


class Scaled(torch.nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(7)
        self.lin = torch.nn.Linear(12, 3)
        self.scale = torch.tensor([2.0, -1.5, 0.5])  # a plain attribute

    def forward(self, x):
        return self.lin(x) * self.scale


sm = Scaled()
sm_ref = copy.deepcopy(sm)
said = io.StringIO()
with contextlib.redirect_stderr(said):
    sm_step = ct.compile_step(sm, torch.nn.functional.mse_loss, batch(0), tracing_mode="fake",
                              optimizer=torch.optim.SGD(sm.parameters(), lr=0.05))
sm_opt = torch.optim.SGD(sm_ref.parameters(), lr=0.05)
if sm_step.tracing_mode != "real" or "traced with real tensors" not in said.getvalue() or \
        "fake tensors failed" not in said.getvalue():
    fail("a model fake tensors cannot trace: traced with %s tensors, stderr %r" % (sm_step.tracing_mode,
                                                                               said.getvalue()))
against_eager(sm_step, sm_ref, sm_opt, 2, "traced with real tensors")

# ---- the trace's garbage is freed by compile_step itself: make_fx leaves reference cycles that
# hold the traced activations (here a convolution's 460 KB; ResNet-18's 43 MB), which waited for
# the cyclic collector's next full pass
if platform.libc_ver()[0] == "glibc" and hasattr(ctypes.CDLL(None), "mallinfo2"):
    class _MallInfo2(ctypes.Structure):
        _fields_ = [(n, ctypes.c_size_t) for n in ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks",
                                                   "fsmblks", "uordblks", "fordblks", "keepcost")]
    _mi = ctypes.CDLL(None).mallinfo2
    _mi.restype = _MallInfo2
    in_use = lambda: _mi().uordblks + _mi().hblkhd
    gc.collect()
    conv = torch.nn.Sequential(torch.nn.Conv2d(3, 16, 3), torch.nn.BatchNorm2d(16), torch.nn.ReLU(), torch.nn.Flatten(),
                               torch.nn.Linear(16 * 30 * 30, 10))
    conv_step = ct.compile_step(conv, torch.nn.functional.cross_entropy,
                                (torch.randn(8, 3, 32, 32), torch.randint(0, 10, (8,))))
    before = in_use()
    gc.collect()
    if before - in_use() > 64 << 10:
        fail("compile_step left %d KiB of the trace for the cyclic collector" % ((before - in_use()) >> 10))
    del conv_step, conv

# ---- the hooks' module imports no tracer (proxy_tensor) until
# compile_step is asked for; the step's tracer comes without sympy (30 MB), and
# the user's symbolic tracing afterwards still gets it; with fake tensors the trace of a
# step whose activations are 64 MB each adds no peak (with real ones: 200 MB)
LAZY = """
import json, resource, sys, torch
import collfuse.torch as ct
before = sorted(m for m in ("collfuse.step", "torch.fx.experimental.proxy_tensor") if m in sys.modules)
import collfuse.step
m = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.BatchNorm1d(8), torch.nn.Linear(8, 2))
step = ct.compile_step(m, torch.nn.functional.mse_loss, (torch.randn(5, 4), torch.randn(5, 2)))
step(torch.randn(5, 4), torch.randn(5, 2))
sympy = "sympy" in sys.modules
from torch.fx.experimental.proxy_tensor import make_fx
g = make_fx(lambda x: x.sum(0) * x.shape[0], tracing_mode="symbolic")(torch.randn(3, 4))
class Wide(torch.nn.Module):
    def forward(self, x):
        return torch.tanh(x.repeat(1, 4096))
wide = torch.nn.Sequential(torch.nn.Linear(256, 256), Wide())
ex = (torch.randn(16, 256), torch.randn(16))
peak = lambda: resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
p0 = peak()
ct.compile_step(wide, lambda out, y: (out.mean(1) - y).pow(2).mean(), ex, tracing_mode="fake")
print(json.dumps({"before": before, "same": ct.compile_step is collfuse.step.compile_step, "sympy": sympy,
                  "symbolic": float(g(torch.ones(5, 4))[0]), "trace_peak_mb": round(peak() - p0)}))
"""
r = subprocess.run([sys.executable, "-c", LAZY], capture_output=True, text=True)
got = json.loads(r.stdout.strip().splitlines()[-1]) if not r.returncode else {}
if got.pop("trace_peak_mb", 1e9) >= 32 or got != {"before": [], "same": True, "sympy": False, "symbolic": 25.0}:
    fail("import collfuse.torch, then compile_step: %s%s" % (r.stdout[-1000:], r.stderr[-2000:]))

# ---- keep_memory: glibc's malloc keeps what a step frees mapped, so the
# next step's tensors take no page faults (a process of its own: the
# setting is process-wide); 24 MiB freed, then allocated and written again
KEEP = """
import json, resource, sys, torch
import collfuse.torch as ct, collfuse.step as cstep
ct.compile_step(torch.nn.Linear(3, 2), torch.nn.functional.mse_loss, (torch.randn(4, 3), torch.randn(4, 2)),
                keep_memory=sys.argv[1] == "1")
flt = lambda: resource.getrusage(resource.RUSAGE_SELF).ru_minflt
a = torch.empty(6 << 20)
a.fill_(1.0)
del a
f0 = flt()
# 1 MiB less: it fits where the first one was even where a small allocation made meanwhile
# lies above it (its chunk then a hole, not the heap's top, which torch's 64-byte-aligned
# allocation of the same size does not fit)
b = torch.empty((6 << 20) - (1 << 18))
b.fill_(2.0)
print(json.dumps({"kept": cstep._kept, "faults": flt() - f0}))
"""
env = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_") and k != "GLIBC_TUNABLES"}
# (with "0", keep_memory=False, the same run takes about 6000 faults: the
# 24 MiB mapped and unmapped, then 23 MiB mapped anew)
r = subprocess.run([sys.executable, "-c", KEEP, "1"], capture_output=True, text=True, env=env)
if r.returncode:
    fail("keep_memory: %s" % r.stderr[-2000:])
got = json.loads(r.stdout.strip().splitlines()[-1])
if got["kept"] is not True:
    import platform
    if platform.libc_ver()[0] == "glibc":
        fail("keep_memory=True did not set glibc malloc's thresholds: %s" % got)
elif got["faults"] > (24 << 20) // 4096 // 4:
    fail("keep_memory: 24 MiB freed and allocated again took %d page faults (memory handed back to the kernel)"
         % got["faults"])

# ---- the traced graph: every gradient a node, one AllReduce (mean) each
g = step.graph
if step.collectives_before != 8:
    fail("%d AllReduces before fusion for 8 parameters" % step.collectives_before)
if sum(len(ks) for _, ks in step.plan) != 8:
    fail("the buckets hold %s" % step.bucket_params())

# ---- the buckets against `collfuse compile --json` of the exported graph (4 ranks)
FUSION = {"0.weight": 0, "3.weight": (2, 7), "5.weight": (2, 7)}
with tempfile.TemporaryDirectory(prefix="test_step") as d:
    for split, fusion in (("bytes:2K", None), ("bytes:1K,first=256", None), ("ddp:3K,first=1K", None),
                          ("auto", None), ("bytes:64K", FUSION), (None, None)):
        m4 = mlp(2)
        s4 = ct.compile_step(m4, torch.nn.functional.mse_loss, batch(0), split=split, fusion=fusion, world_size=4)
        path = os.path.join(d, "step.xml")
        with open(path, "w") as f:
            f.write(s4.graph_xml)
        cmd = [CLI, "compile", path, "--json", "--quiet"] + (["--split", split] if split else [])
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode:
            fail("%s: %s" % (" ".join(cmd), r.stderr))
        want = [(b["name"], b["members"], b["bytes"]) for b in json.loads(r.stdout)["buckets"]]
        got = [(b["name"], b["members"], b["bytes"]) for b in s4.buckets]
        if want != got:
            fail("split %s fusion %s: compile_step's buckets %s, collfuse compile --json %s" % (split, fusion, got, want))
        if fusion:
            by = dict((n, ps) for n, ps in [(b, tuple(p)) for b, p in s4.bucket_params()])
            alone = [b for b, ps in by.items() if ps == ("0.weight",)]
            pair = [b for b, ps in by.items() if set(ps) == {"3.weight", "5.weight"}]
            if not alone or not pair:
                fail("fusion %s: buckets %s" % (fusion, s4.bucket_params()))
            if "0.weight" not in s4.explain() or "grad.0.weight" not in s4.dot():
                fail("explain/dot do not name the parameter: %s" % s4.explain())

# ---- overlap: each bucket but the last starts before backward's last node that does not feed it
m5 = mlp(3)
s5 = ct.compile_step(m5, torch.nn.functional.mse_loss, batch(0), split="bytes:1K")
starts = s5.start_precedes()
if len(starts) < 3:
    fail("bytes:1K gave %d buckets" % len(starts))
early = [s for s in starts if s[1] < s[2]]
if len(early) < len(starts) - 1:
    fail("buckets start after the backward pass's other nodes: %s" % starts)
code = s5.gm.code
if code.count("_start_bucket(") != len(starts):
    fail("the torch graph starts %d buckets, the plan has %d" % (code.count("_start_bucket("), len(starts)))


mse = torch.nn.functional.mse_loss


# ---- leaves: nodes of the graph, their collectives compiled
class TP(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.w1 = torch.nn.Parameter(torch.randn(8, 16) / 4)
        self.w2 = torch.nn.Parameter(torch.randn(16, 8) / 4)

    def forward(self, x):
        h = cfx.all_gather(cfx.matmul_reduce_scatter(x, self.w1), layout="concat")
        return cfx.all_reduce(torch.relu(h) @ self.w2, "sum", fusion=0)


torch.manual_seed(4)
tp = TP()
xt, yt = torch.randn(6, 8), torch.randn(6, 8)
s6 = ct.compile_step(tp, torch.nn.functional.mse_loss, (xt, yt), world_size=2)
ops = sorted(b["op"] for b in s6.buckets)
if ops.count("AllGather") != 2 or "MatmulReduceScatter" not in ops or "AllReduce" not in ops:
    fail("the tensor-parallel step's collectives %s: want the leaves and the AllGather of the backward" % ops)
s7 = ct.compile_step(TP(), torch.nn.functional.mse_loss, (xt, yt))  # one rank: the leaves are identities
tp1 = TP()
tp1.load_state_dict(s7.model.state_dict())
loss7 = s7(xt, yt)
ref7 = torch.nn.functional.mse_loss(torch.relu(xt @ tp1.w1) @ tp1.w2, yt)
ref7.backward()
if abs(float(loss7) - float(ref7)) > 1e-6 * abs(float(ref7)) or not torch.allclose(s7.model.w1.grad, tp1.w1.grad):
    fail("one-rank leaves: loss %r, want %r" % (float(loss7), float(ref7)))


# ---- leaves the compile fused (fusion=2, one fusion_id) run as one node, the
# graph reordered: the first leaf's consumers come after the second leaf's operand
class TwoLeaves(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.w1 = torch.nn.Parameter(torch.randn(8, 6) / 3)
        self.w2 = torch.nn.Parameter(torch.randn(6, 4) / 3)
        self.w3 = torch.nn.Parameter(torch.randn(4, 8).t() / 3)  # column-major

    def forward(self, x):
        h = torch.relu(cfx.all_reduce(x @ self.w1, "sum", fusion=2, fusion_id=3)) @ self.w2
        return h + cfx.all_reduce(torch.tanh(x @ self.w3), "sum", fusion=2, fusion_id=3)


torch.manual_seed(6)
two = TwoLeaves()
eager = copy.deepcopy(two)
x8, y8 = torch.randn(5, 8), torch.randn(5, 4)
s8 = ct.compile_step(two, mse, (x8, y8), world_size=2)
if len(s8.fused_leaves) != 1 or len(s8.fused_leaves[0][1]) != 2 or s8.gm.code.count("_fused_leaves(") != 1 or \
        "collfuse.all_reduce" in s8.gm.code:
    fail("two leaves of fusion_id 3: fused %s, torch graph\n%s" % (s8.fused_leaves, s8.gm.code))
s9 = ct.compile_step(two, mse, (x8, y8), optimizer=torch.optim.SGD(two.parameters(), lr=0.1))
opt_e = torch.optim.SGD(eager.parameters(), lr=0.1)
for k in range(2):
    got = s9(x8, y8)
    opt_e.zero_grad()
    want = mse(eager(x8), y8)
    want.backward()
    opt_e.step()
    if not torch.equal(got, want.detach()) or any(not torch.equal(p, q) for p, q in zip(two.parameters(),
                                                                                        eager.parameters())):
        fail("fused leaves, step %d: loss %r, eager %r" % (k, float(got), float(want)))
if len(s9.fused_leaves) != 1:
    fail("fused leaves in a world of one: %s" % s9.fused_leaves)
# w3 is column-major, and so is its gradient, t(mm): mm into the transpose of
# its (row-major) bucket view would sum in another order than eager torch's
# mm: it is copied instead
if s9.copied != [("w3", "aten.mm.default")] or sorted(n for n, _ in s9.produced_into) != ["w1", "w2"]:
    fail("produced into the buckets %s, copied %s" % (s9.produced_into, s9.copied))


# ---- refusals
class DataDependent(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)

    def forward(self, x):
        y = self.lin(x)
        return y * 2 if y.sum() > 0 else y


class InPlace(torch.nn.Module):
    def __init__(self, quiet):
        super().__init__()
        self.quiet = quiet
        self.w = torch.nn.Parameter(torch.randn(4, 4))

    def forward(self, x):
        if self.quiet:
            with torch.no_grad():
                self.w.mul_(0.5)
        else:
            self.w.mul_(0.5)
        return x @ self.w


class Complex(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.randn(4, 4, dtype=torch.complex64))

    def forward(self, x):
        return (x.to(torch.complex64) @ self.w).abs()


class Grouped(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)

    def forward(self, x):
        return cfx.all_reduce(self.lin(x), "sum", group="tp")


x4, y4 = torch.randn(3, 4), torch.randn(3, 4)
expect_raises(NotImplementedError, lambda: ct.compile_step(Grouped(), mse, (x4, y4)),
              "collfuse.fx.all_reduce over group 'tp'", "whole job only")
expect_raises(NotImplementedError, lambda: ct.compile_step(DataDependent(), mse, (x4, y4)),
              "data-dependent control flow")
expect_raises(NotImplementedError, lambda: ct.compile_step(InPlace(False), mse, (x4, y4)),
              "writes a parameter in place", "self.w.mul_(0.5)")
expect_raises(NotImplementedError, lambda: ct.compile_step(InPlace(True), mse, (x4, y4)),
              "writes parameter 'w' in place", "mul_")
expect_raises(NotImplementedError, lambda: ct.compile_step(Complex(), mse, (x4, y4)),
              "parameter 'w'", "complex64")
expect_raises(ValueError, lambda: ct.compile_step(torch.nn.Linear(4, 4), lambda o, y: o - y, (x4, y4)),
              "not a scalar")
expect_raises(ValueError, lambda: ct.compile_step(torch.nn.Linear(4, 4), mse, (x4, y4), fusion={"nope": 0}),
              "nope")
expect_raises(RuntimeError, lambda: s6(xt, yt), "compiled for 2 ranks")
print("test_step: ok")
