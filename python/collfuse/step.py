"""collfuse.step: graph mode for training; collfuse owns the collectives of
a traced training step, torch keeps the compute.

    step = collfuse.torch.compile_step(model, loss_fn, example_inputs=(x, y), optimizer=opt)
    for x, y in data:
        loss = step(x, y)     # forward, backward, gradients averaged, opt.step()

The model is called with every example input but the last, and the loss is
loss_fn(model(*inputs[:-1]), inputs[-1]), a scalar.

Tracing: torch.fx.experimental.proxy_tensor.make_fx over a function of the
parameters, buffers and inputs that calls the model functionally, computes
the loss and torch.autograd.grad of it: one FX graph of aten ops, forward
and backward, where each gradient and each explicit leaf
(collfuse.fx.all_reduce, all_gather, reduce_scatter, matmul_reduce_scatter:
torch.ops.collfuse.*) is a node with its dtype, shape and dependencies.
It traces with real tensors, on copies of the parameters and buffers
(tracing_mode="real", the default), or with fake ones (tracing_mode="fake":
shapes and dtypes only, nothing computed or allocated; where they fail, an
op torch 1.13 has no fake kernel for or a plain tensor attribute of the
model, neither parameter nor buffer, with real ones, which a line on
stderr says); .tracing_mode is the one used. The tracer is
imported without sympy (torch 1.13 imports it for symbolic tracing only:
30 MB resident), which a later import of torch's tracer by the user gets
again.

The collfuse graph: the placeholders are Inputs, every other tensor-valued
aten node an Opaque node of its dtype and shape (its tensor operands kept as
dependencies), the leaves their collectives, and each gradient an AllReduce
(mean) with the parameter's fusion and fusion_id (fusion={name: 0, 1, 2 or
(2, fusion_id)}). It is compiled with the passes and options of `collfuse
compile` (split, cost, profile, deterministic, ...); the fused AllReduces
are the buckets (.buckets, .explain(), .dot(), .graph_xml: the graph before
fusion, for `collfuse compile`).

Running: the traced graph, with one node inserted after the last gradient
of each bucket that starts the average of the bucket's flat buffer on
collfuse's communication thread (collfuse.distributed's runner, as
all_reduce(async_op=True): one thread, buckets in the same order on every
rank, waits that poll briefly and then sleep, leaving the cores to the
compute), so the rest of the backward pass runs meanwhile; each parameter's .grad is
a view of its bucket (set once, kept from step to step). After the
backward pass the buckets are waited for in the order they started, and
the optimizer steps once after every bucket, or with update_per_bucket
once per bucket, over that bucket's parameters, as soon as its average is
done (None: for torch.optim's optimizers that update each parameter on
its own; the results are bitwise one step's), so a rank that waits for
its peer's last buckets updates the parameters of the others meanwhile
and only the last bucket's update follows its average. Where nothing is left to overlap the last bucket (no
compute after its start, and one bucket or no update per bucket), it is
averaged on the calling thread, blocking, if it is at most 4 MiB
(.inline_last). Gradients are produced into their buckets: a
gradient whose last op has an out= kernel that writes its destination
(mm, addmm, bmm, sum, add, sub, mul, div: nn.Linear's weights and biases,
through the views t and view) runs that kernel on its bucket view.
The others (convolution_backward's, the norms' backward, embedding's,
tuple-valued ops: .copied names each parameter and op) are copied once
into the bucket by a node inserted right after the gradient (freed at once,
as autograd's accumulation into .grad frees it), and .copy_bytes counts
those bytes per step. On the shm world the buckets are allocated in shared
memory and registered with it (collfuse.distributed.register): the peers
read and write them where they lie and each average is made in place, with
no copy and no second copy of the gradients in the world's memory;
elsewhere the world copies what it needs (MPI: its staging).
Memory (keep_memory=True, the default): the step's tensors are freed and
allocated again every step, and glibc's malloc, left to itself, hands
freed memory back to the kernel (a free heap top over its trim threshold,
allocations over its mmap threshold mapped one by one) so that the next
step pages it in again: the example GPT's step took about 1700 page faults
(7 MB) per step that eager torch's does not. The first compile_step of
the process sets malloc's mmap threshold to its largest (32 MiB) and its
trim threshold to 1 GiB (process-wide, as MALLOC_MMAP_THRESHOLD_ and
MALLOC_TRIM_THRESHOLD_ would; not where either of those or GLIBC_TUNABLES
is set, or malloc is not glibc's), so that the memory stays mapped from
step to step; the peak is unchanged. A trace with real tensors holds
every intermediate of forward and backward at once, about what a step
holds at its peak (ResNet-18, batch 32, one process: the trace 444 MB,
the steps 441-444 MB); with fake tensors it allocates none (the trace
364 MB there), but fake kernels bring torch's code for them into memory
(shared pages: 4 MB more of rank 0's peak than a real trace, ResNet-18
and the GPT on 2 processes). After the trace and after the compile the trace's garbage is
collected (make_fx leaves reference cycles holding its tensors) and
malloc's free memory handed back (malloc_trim). Rank 0's parameters reach
the others through the buckets, one broadcast per bucket.
The leaves run as the job's collectives, in program order after the
buckets started before them; the AllReduce leaves the compile put into one bucket (fusion=2 with
one fusion_id, or fusion=1 by the split) as one all_reduce of their
concatenation (.fused_leaves), the graph reordered so that the bucket runs
once all its members' operands are made; matmul_reduce_scatter as collfuse's fused MatmulReduceScatter
(collfuse.distributed.matmul_reduce_scatter: float32, float16, bfloat16,
int8, no bias; with a bias or other dtypes, a torch matmul and collfuse's
reduce_scatter).

The job: collfuse.distributed (torchrun's or mpirun's environment, or
torch.distributed's default group); with none, a world of one process where
averaging is the identity. Every rank checks at compile time that all have
the same buckets and shapes: a rank whose graph differs fails every rank
with a cross-rank mismatch error.

Refused, naming the node and the reason: data-dependent control flow (a
tensor's value read while tracing), in-place ops on parameters, gradients
or leaves of a dtype collfuse lacks, leaves over groups other than the
whole job, a loss that is not a scalar.
"""

import ctypes
import gc
import hashlib
import heapq
import itertools
import operator
import os
import platform
import sys
import time
import weakref

import numpy as np
import torch
import torch.fx
from torch.nn.utils.stateless import functional_call


def _import_make_fx():
    """torch's make_fx, imported without sympy where neither it nor sympy
    is imported yet: torch 1.13's symbolic_shapes imports sympy (30 MB
    resident) for tracing_mode="symbolic" only, which the step does not
    use; sympy is unimportable for this one import. The tracer's two
    modules (imported without it) then leave sys.modules, so that a later
    import of them (the user's own symbolic tracing) runs them anew, with
    sympy."""
    tracer, shapes = "torch.fx.experimental.proxy_tensor", "torch.fx.experimental.symbolic_shapes"
    if tracer in sys.modules or shapes in sys.modules or "sympy" in sys.modules:
        from torch.fx.experimental.proxy_tensor import make_fx
        return make_fx
    sys.modules["sympy"] = None  # import sympy raises ImportError
    try:
        from torch.fx.experimental.proxy_tensor import make_fx
    finally:
        del sys.modules["sympy"]
        pkg = sys.modules.get("torch.fx.experimental")
        for name in (tracer, shapes):
            sys.modules.pop(name, None)
            if pkg is not None:
                pkg.__dict__.pop(name.rsplit(".", 1)[1], None)
    return make_fx


make_fx = _import_make_fx()

from . import Context, Graph
from . import distributed as _cfd
from . import fx as _cfx

__all__ = ["compile_step", "CompiledStep"]

_ATEN = torch.ops.aten
# Gradients produced into their bucket views: the aten ops whose out=
# kernels (torch 1.13, CPU) write the destination they are given, strided
# views included (mm's writes a transposed destination as the transposed
# product), and the out= overload the step calls instead. Other ops'
# gradients (convolution_backward's, the norms' backward, embedding's:
# tuple-valued or with generated out= variants that compute and copy
# anyway) are copied into their buckets.
_INTO = {_ATEN.mm.default: _ATEN.mm.out, _ATEN.addmm.default: _ATEN.addmm.out, _ATEN.bmm.default: _ATEN.bmm.out,
         _ATEN.sum.dim_IntList: _ATEN.sum.IntList_out, _ATEN.add.Tensor: _ATEN.add.out,
         _ATEN.sub.Tensor: _ATEN.sub.out, _ATEN.mul.Tensor: _ATEN.mul.out, _ATEN.div.Tensor: _ATEN.div.out}
# views between that op and the gradient (nn.Linear's weight gradient is
# t(mm), its bias gradient view(sum)): the destination is the bucket view
# seen through their inverses
_VIEWS = {_ATEN.t.default, _ATEN.view.default, _ATEN._unsafe_view.default}
# ops that compute nothing (views, detach): what may follow the last bucket's start when it is
# averaged on the calling thread
_NO_COMPUTE = _VIEWS | {_ATEN.detach.default, _ATEN._reshape_alias.default, _ATEN.transpose.int, operator.getitem}
_INLINE_MAX = 4 << 20  # the largest last bucket averaged on the calling thread (see _emit)
_DT = dict(_cfx._TORCH_DT)
_DT[torch.bool] = "bool"
_LEAF_OPS = {}  # torch.ops.collfuse.X.default -> X
for _k in ("all_reduce", "all_gather", "reduce_scatter", "matmul_reduce_scatter"):
    _LEAF_OPS[getattr(torch.ops.collfuse, _k).default] = _k


class _Tracing:
    """_runtime while tracing: the leaves' world-aware stand-ins."""

    def __init__(self, world_size, rank):
        self.world_size, self.rank = world_size, rank

    def leaf(self, kind, x, a):
        n = self.world_size
        if kind == "all_gather":
            return torch.stack([x] * n) if a["layout"] == "stack" else torch.cat([x] * n, 0)
        if kind == "reduce_scatter":
            return x[: x.shape[0] // n].clone()
        if kind == "matmul_reduce_scatter":
            y = x @ a["x2"]
            if a["bias"] is not None:
                y = y + a["bias"]
            return y[: y.shape[0] // n].clone()
        return x.clone()


class _Running:
    """_runtime while a step runs: the leaves are the job's collectives, run
    by the calling thread after the buckets started before them (each call
    of collfuse.distributed waits for the runs its runner has)."""

    def __init__(self, world_size, rank):
        self.world_size, self.rank = world_size, rank

    def leaf(self, kind, x, a):
        n = self.world_size
        if n == 1:
            return _cfx._world_of_one(kind, x, a)
        x = x.contiguous()
        if kind == "all_reduce":
            out = x.clone()
            _cfd.all_reduce(out, op=a["reduction"])
        elif kind == "all_gather":
            out = x.new_empty(((n,) + tuple(x.shape)) if a["layout"] == "stack" else
                              ((x.shape[0] * n,) + tuple(x.shape[1:])))
            _cfd.all_gather(out, x)
        elif kind == "matmul_reduce_scatter" and _fused(x, a["x2"], a["bias"]):
            x2 = a["x2"].contiguous()
            out = x.new_empty((x.shape[0] // n, x2.shape[1]))
            _cfd.matmul_reduce_scatter(out, x, x2, comm_turn=a["comm_turn"])
        else:
            if kind == "matmul_reduce_scatter":  # a dtype or a bias the fused op does not take
                x = x @ a["x2"]
                if a["bias"] is not None:
                    x = x + a["bias"]
                x = x.contiguous()
                red = "sum"
            else:
                red = a["reduction"]
            out = x.new_empty((x.shape[0] // n,) + tuple(x.shape[1:]))
            _cfd.reduce_scatter(out, x, op=red)
        return out


def _fused(x1, x2, bias):
    """Whether collfuse's fused MatmulReduceScatter takes these operands
    (no bias: the fused op takes one only as zeros)."""
    return bias is None and x1.dtype in _cfx._TORCH_DT and _cfx._TORCH_DT[x1.dtype] in _cfd._FUSED_DTYPES and \
        x2.dtype == x1.dtype and x1.dim() == 2 and x2.dim() == 2


def _user_frame(e):
    """ at FILE:LINE of the innermost frame of e's traceback outside torch and collfuse, or ''."""
    import traceback
    for fr in reversed(traceback.extract_tb(e.__traceback__)):
        if "/torch/" not in fr.filename and "/collfuse/" not in fr.filename:
            return " (at %s:%d: %s)" % (fr.filename, fr.lineno, fr.line)
    return ""


def _node_where(node):
    st = node.meta.get("stack_trace")
    if st:
        lines = [l.strip() for l in st.strip().splitlines() if l.strip().startswith("File")]
        if lines:
            return " (%s)" % lines[-1]
    return ""


def _op_name(node):
    """The aten op that makes node's value (a tuple's, for an element of one)."""
    if node.op != "call_function":
        return node.op
    if node.target is operator.getitem:
        return _op_name(node.args[0])
    return str(node.target)


def _meta_of(node):
    tm = node.meta.get("tensor_meta")
    return tm if hasattr(tm, "dtype") else None


class CompiledStep:
    """A training step compiled by compile_step; call it with the inputs.
    After a call, .exposed_ms is the time the step waited for the buckets
    after the backward pass's last compute (the optimizer's updates of the
    buckets done before the last not counted) and .sync_ms the time during
    which some bucket was being averaged (overlapping ones counted once),
    .copy_bytes the bytes of gradients copied into buckets (those not
    produced there: .produced_into and .copied list (parameter, op)).
    .tracing_mode: "fake" or "real", the tensors the step was traced with.
    .update_per_bucket: whether the optimizer steps bucket by bucket."""

    def __init__(self, model, loss_fn, example_inputs, optimizer, world_size, fusion, local, passes, options,
                 tracing_mode="real", update_per_bucket=False):
        self.model, self.loss_fn, self.optimizer = model, loss_fn, optimizer
        if update_per_bucket is None:
            update_per_bucket = type(optimizer) in _PER_PARAMETER
        self.update_per_bucket = bool(update_per_bucket) and optimizer is not None
        self._subsets_key = None
        self.world_size = world_size
        self.rank = _cfd.get_rank() if _cfd.is_initialized() and _cfd.get_world_size() == world_size else 0
        self.n_inputs = len(example_inputs)
        named = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
        self.param_names = [n for n, _ in named]
        self.params = [p for _, p in named]
        self.buffer_names = [n for n, _ in model.named_buffers()]
        fusion = dict(fusion or {})
        unknown = sorted(set(fusion) - set(self.param_names))
        if unknown:
            raise ValueError("collfuse.step: fusion names %s, which are not parameters of the model (%s...)"
                             % (unknown, ", ".join(self.param_names[:4])))
        self.fusion = fusion
        self.local = set(local or ())
        unknown = sorted(self.local - set(self.param_names))
        if unknown:
            raise ValueError("collfuse.step: local names %s, which are not parameters of the model" % unknown)
        self._trace(example_inputs, tracing_mode)
        _release()  # before the buckets and the broadcast: the trace's heap is not the steps' peak
        self._check()
        self._build(passes, options)
        self._plan()
        self._emit()
        self._agree()

    # ---------------- tracing

    def _trace(self, example_inputs, tracing_mode):
        pnames, bnames, model, loss_fn = self.param_names, self.buffer_names, self.model, self.loss_fn

        def step_fn(params, buffers, *inputs):
            state = dict(zip(pnames, params))
            state.update(zip(bnames, buffers))
            loss = loss_fn(functional_call(model, state, tuple(inputs[:-1])), inputs[-1])
            if not isinstance(loss, torch.Tensor) or loss.dim() != 0:
                raise ValueError("collfuse.step: loss_fn returned %s, not a scalar tensor"
                                 % ("shape %s" % (tuple(loss.shape),) if isinstance(loss, torch.Tensor)
                                    else type(loss).__name__))
            grads = torch.autograd.grad(loss, params, allow_unused=True)
            return [loss.detach()] + list(grads)

        saved = _cfx._runtime
        _cfx._runtime = _Tracing(self.world_size, self.rank)
        try:
            fake_error = None
            if tracing_mode == "fake":
                try:
                    self.gm = self._traced(step_fn, "fake", example_inputs)
                except (ValueError, NotImplementedError) as e:
                    if str(e).startswith("collfuse."):  # the step's own refusals: the same with real tensors
                        raise
                    fake_error = e
                except Exception as e:  # an op fake tensors lack in torch 1.13, a real tensor the model holds...
                    fake_error = e
            self.tracing_mode = "fake" if tracing_mode == "fake" and fake_error is None else "real"
            if self.tracing_mode == "real":
                self.gm = self._traced(step_fn, "real", example_inputs)
            if fake_error is not None:
                sys.stderr.write("collfuse.step: traced with real tensors (forward and backward computed once): "
                                 "fake tensors failed: %s: %s\n" % (type(fake_error).__name__,
                                                                   str(fake_error).strip().split("\n")[0][:300]))
        finally:
            _cfx._runtime = saved
        ph = [n for n in self.gm.graph.nodes if n.op == "placeholder"]
        np_, nb = len(self.params), len(self.buffer_names)
        self.param_nodes, self.buffer_nodes, self.input_nodes = ph[:np_], ph[np_:np_ + nb], ph[np_ + nb:]
        out = [n for n in self.gm.graph.nodes if n.op == "output"][0]
        outs = list(out.args[0])
        self.loss_node, self.grad_nodes = outs[0], outs[1:]
        self.output_node = out

    def _traced(self, step_fn, mode, example_inputs):
        """step_fn traced by make_fx: "fake" with fake tensors (shapes and
        dtypes only, nothing computed: no activation of forward and
        backward is allocated), "real" with copies of the parameters and
        buffers (the trace computes every op once and updates the
        copies)."""
        if mode == "fake":
            params = [p.detach().requires_grad_(True) for p in self.params]  # only their fakes are used
            buffers = [b.detach() for _, b in self.model.named_buffers()]
        else:
            params = [p.detach().clone().requires_grad_(True) for p in self.params]
            buffers = [b.detach().clone() for _, b in self.model.named_buffers()]  # the trace updates copies
        try:
            gm = make_fx(step_fn, tracing_mode=mode)(params, buffers, *example_inputs)
        except RuntimeError as e:
            if mode == "fake":
                raise
            if "get value out of a tracing tensor" in str(e) or "data-dependent" in str(e):
                raise NotImplementedError(
                    "collfuse.step: the step reads a tensor's value while tracing (data-dependent control flow, "
                    ".item() or a Python bool of a tensor): it cannot be one graph; %s" % str(e).split("\n")[0]) \
                    from None
            if "leaf Variable that requires grad is being used in an in-place operation" in str(e):
                raise NotImplementedError(
                    "collfuse.step: the step writes a parameter in place%s; the step takes the parameters as "
                    "inputs and the optimizer updates them: write a copy instead" % _user_frame(e)) from None
            raise
        if mode == "fake":  # a constant the trace made is a fake tensor: the graph could not run
            from torch._subclasses import FakeTensor
            held = list(vars(gm).values()) + list(gm._buffers.values()) + list(gm._parameters.values())
            if any(isinstance(v, FakeTensor) for v in held):
                raise RuntimeError("a constant of the graph is a fake tensor")
        return gm

    def _check(self):
        pset = set(self.param_nodes)
        for n in self.gm.graph.nodes:
            if n.op != "call_function":
                continue
            schema = getattr(n.target, "_schema", None)
            if schema is None:
                continue
            for i, arg in enumerate(schema.arguments):
                if arg.alias_info is not None and arg.alias_info.is_write:
                    v = n.args[i] if i < len(n.args) else n.kwargs.get(arg.name)
                    if v in pset:
                        k = self.param_nodes.index(v)
                        raise NotImplementedError(
                            "collfuse.step: node '%s' (%s) writes parameter '%s' in place%s; the step takes the "
                            "parameters as inputs and the optimizer updates them: write a copy instead"
                            % (n.name, n.target, self.param_names[k], _node_where(n)))
            if n.target in _LEAF_OPS:
                tm = _meta_of(n)
                if tm is None or tm.dtype not in _cfx._TORCH_DT:
                    raise NotImplementedError("collfuse.step: node '%s' (collfuse.fx.%s) is %s, a dtype collfuse "
                                              "does not have%s" % (n.name, _LEAF_OPS[n.target],
                                                                   tm.dtype if tm else "not a tensor", _node_where(n)))
        for k, g in enumerate(self.grad_nodes):
            if g is None:
                continue
            tm = _meta_of(g)
            if tm is None or tm.dtype not in _cfx._TORCH_DT or tm.dtype == torch.bool:
                raise NotImplementedError("collfuse.step: the gradient of parameter '%s' (node '%s') is %s, a dtype "
                                          "collfuse does not average" % (self.param_names[k], g.name,
                                                                         tm.dtype if tm else "not a tensor"))

    # ---------------- the collfuse graph

    def _build(self, passes, options):
        self.explain_lines = []

        def log(level, msg):
            if msg.startswith("explain: "):
                self.explain_lines.append(msg[len("explain: "):])
        self.ctx = Context(log=log)
        g = self.graph = Graph(type(self.model).__name__ + "_step", world_size=self.world_size, context=self.ctx)
        env = {}
        used = set()

        def fresh(base):
            name, k = base, 0
            while name in used:
                k += 1
                name = "%s_%d" % (base, k)
            used.add(name)
            return name

        def deps(node):
            found = []
            torch.fx.node.map_arg((node.args, node.kwargs), lambda a: found.extend(
                v for v in env.get(a, ()) if v not in found))
            return found

        leaf_names = {}
        for n in self.gm.graph.nodes:
            tm = _meta_of(n)
            if n.op == "placeholder":
                env[n] = [g.input(fresh(n.name), _DT.get(tm.dtype, "uint8"), tuple(tm.shape) if tm.dtype in _DT
                                  else (tm.dtype.itemsize * int(np.prod(tm.shape)),))]
            elif n.op == "call_function" and n.target in _LEAF_OPS:
                kind = _LEAF_OPS[n.target]
                a = dict(zip(("x",) + _cfx._OP_ARGS[kind], n.args))
                x = env[n.args[0]][0]
                name = fresh(n.name)
                if kind == "all_reduce":
                    g.all_reduce(x, reduction=a["reduction"], fusion=a["fusion"],
                                 fusion_id=a["fusion_id"] if a["fusion_id"] >= 0 else None, name=name)
                elif kind == "all_gather":
                    g.all_gather(x, layout=a["layout"], name=name)
                elif kind == "reduce_scatter":
                    g.reduce_scatter(x, reduction=a["reduction"], name=name)
                else:
                    ins = [x, env[a["x2"]][0]] + ([env[a["bias"]][0]] if a.get("bias") is not None else [])
                    g.op("MatmulReduceScatter", ins, name, world_size=self.world_size,
                         comm_turn=a["comm_turn"] or None)
                leaf_names[n] = name
                env[n] = [name]
            elif n.op == "call_function":
                if tm is None:  # tuples and the like: they stand for their operands
                    env[n] = deps(n)
                    continue
                dt = _DT.get(tm.dtype)
                shape = tuple(tm.shape) if dt else (tm.dtype.itemsize * int(np.prod(tm.shape)),)
                name = str(n.target).replace("aten.", "").split(".")[0]
                env[n] = [g.opaque(name, deps(n), dt or "uint8", shape, name=fresh(n.name))]
        self.leaf_names = leaf_names
        g.output("loss", env[self.loss_node][0])
        self.grad_ar = {}  # parameter index -> AllReduce name
        for k, gn in enumerate(self.grad_nodes):
            if gn is None or self.param_names[k] in self.local:
                continue
            pname = self.param_names[k]
            f = self.fusion.get(pname, 1)
            fid = None
            if isinstance(f, tuple):
                f, fid = f
            name = fresh("grad." + pname)
            g.all_reduce(env[gn][0], reduction="mean", fusion=f, fusion_id=fid, name=name)
            g.output(fresh("avg." + pname), name)
            self.grad_ar[k] = name
        g.verify()
        self.graph_xml = g.to_xml()
        self.collectives_before = g.collective_count
        self.options = dict(options)
        self.executable = g.compile(passes=passes, explain=True, **options)
        self.dot_text = None

    def _plan(self):
        """The buckets of the gradients: [(AllReduce bucket name, [parameter indices])] in schedule order."""
        owner = {v: k for k, v in self.grad_ar.items()}
        leaf_of = {v: n for n, v in self.leaf_names.items()}
        self.buckets = self.graph.buckets()
        plan = []
        self.leaf_buckets = []  # (bucket name, [leaf fx nodes]): leaves the compile fused, run as one
        for b in self.buckets:
            ks = [owner[m] for m in b["members"] if m in owner]
            if not ks:
                if len(b["members"]) > 1 and b["op"] == "FusedAllReduce":
                    self.leaf_buckets.append((b["name"], [leaf_of[m] for m in b["members"]]))
                continue
            if len(ks) != len(b["members"]):
                others = [m for m in b["members"] if m not in owner]
                raise NotImplementedError("collfuse.step: bucket '%s' fuses gradients with the leaves %s; fuse "
                                          "leaves only with leaves (fusion=0 or their own fusion_id)"
                                          % (b["name"], others))
            plan.append((b["name"], ks))
        self.plan = plan
        self.flat = []
        self.grad_views = {}
        for bname, ks in plan:
            dtype = self.params[ks[0]].dtype
            total = sum(self.params[k].numel() for k in ks)
            shm = self.world_size > 1 and _cfd.is_initialized() and _cfd.backend() == "shm"
            # on the shm world made in shared memory (zeros), not moved there: no transient
            # second copy, nothing of it left in malloc's heap
            flat = _cfd._shared_zeros(total, dtype) if shm else None
            if flat is None:
                flat = torch.zeros(total, dtype=dtype)
            if self.world_size > 1 and _cfd.is_initialized() and _cfd.register(flat):
                # shm: shared in place, read where it lies (no copy); unregistered with the step
                weakref.finalize(self, _cfd._unregister_ptr, flat.storage().data_ptr())
            off = 0
            for k in ks:
                p = self.params[k]
                self.grad_views[k] = flat[off:off + p.numel()].view(p.shape)
                off += p.numel()
            self.flat.append(flat)

    # ---------------- the torch graph that runs

    def _fuse_leaves(self):
        """Each bucket of leaves (AllReduces of one reduction and dtype the
        compile fused: fusion=2 with one fusion_id, or fusion=1 by the split)
        becomes one node that all-reduces them together, its members' values
        taken from it; the graph is then put back in an order torch can run:
        the compile keeps no member depending on another, and the nodes
        that do not depend on the bucket keep their places."""
        graph = self.gm.graph
        order = {n: i for i, n in enumerate(graph.nodes)}
        self.fused_leaves = []
        for b, (bname, members) in enumerate(self.leaf_buckets):
            members = sorted(members, key=lambda n: order[n])
            reds = {n.args[1] for n in members}
            dts = {_meta_of(n).dtype for n in members}
            if len(reds) != 1 or len(dts) != 1:  # the compile fuses neither: kept as it is
                continue
            last = members[-1]
            with graph.inserting_after(last):
                fused = graph.call_function(_fused_leaves, (self.key, reds.pop(), [n.args[0] for n in members]))
            order[fused] = order[last] + 0.5
            for i, n in enumerate(members):
                with graph.inserting_after(fused):
                    item = graph.call_function(operator.getitem, (fused, i))
                item.meta = dict(n.meta)
                order[item] = order[last] + 0.5 + (i + 1) / (len(members) + 2)
                n.replace_all_uses_with(item)
                graph.erase_node(n)
            self.fused_leaves.append((bname, [self.leaf_names[n] for n in members]))
        if not self.fused_leaves:
            return
        # stable topological order: each node at its old place unless an operand now comes later
        nodes = list(graph.nodes)
        pos = {n: k for k, n in enumerate(nodes)}
        waiting = {n: len(set(n.all_input_nodes)) for n in nodes}
        ready = [(order[n], pos[n], n) for n in nodes if not waiting[n]]
        heapq.heapify(ready)
        seq = []
        while ready:
            _, _, n = heapq.heappop(ready)
            seq.append(n)
            for u in n.users:
                waiting[u] -= 1
                if not waiting[u]:
                    heapq.heappush(ready, (order[u], pos[u], u))
        assert len(seq) == len(nodes), "the fused leaves made a cycle the compile should have refused"
        at = seq[0]
        for n in seq[1:]:
            if at.next is not n:
                at.append(n)
            at = n
        graph.lint()

    def _produce_into(self):
        """Each bucketed gradient whose last op is one of _INTO's (through
        _VIEWS) is made by its out= overload straight into its bucket view;
        .produced_into and .copied list the parameters and ops either way."""
        self.dests = {}  # parameter index -> (destination: a view of its bucket, the out= overload)
        self.produced_into, self.copied = [], []
        taken = set()
        for _, ks in self.plan:
            for k in ks:
                op = self._into_one(k, taken)
                (self.produced_into if k in self.dests else self.copied).append((self.param_names[k], op))
        self.gm.graph.lint()

    def _into_one(self, k, taken):
        """Rewrite parameter k's gradient to be produced into its bucket; the
        producing op's name (rewritten or not)."""
        g = self.grad_nodes[k]
        chain = [g]
        while chain[-1].op == "call_function" and chain[-1].target in _VIEWS:
            chain.append(chain[-1].args[0])
        prod = chain[-1]
        what = _op_name(prod)
        tm = _meta_of(prod)
        if prod.op != "call_function" or prod.target not in _INTO or tm is None or \
                tm.dtype != self.params[k].dtype or g in taken:
            return what
        # the gradient feeds only the graph's output, each node before it only the next
        if any(len(n.users) != 1 for n in chain) or list(g.users) != [self.output_node]:
            return what
        dest = self.grad_views[k]
        try:
            for n in chain[:-1]:  # from the gradient toward its producer: the views' inverses
                dest = dest.t() if n.target is _ATEN.t.default else dest.view(tuple(_meta_of(n.args[0]).shape))
        except RuntimeError:  # a view the bucket's layout cannot give
            return what
        # the layout the op makes its result in, so that its kernel runs as it
        # would (a transposed destination gives mm another summation order)
        if tuple(dest.shape) != tuple(tm.shape) or tuple(dest.stride()) != tuple(tm.stride):
            return what
        taken.add(g)
        self.dests[k] = (dest, _INTO[prod.target])
        graph = self.gm.graph
        with graph.inserting_before(prod):
            new = graph.call_function(_into, (self.key, k, prod.args, dict(prod.kwargs)))
        new.meta = dict(prod.meta)
        prod.replace_all_uses_with(new)
        graph.erase_node(prod)
        if prod is g:
            self.grad_nodes[k] = new
        return what

    def _emit(self):
        gm, graph = self.gm, self.gm.graph
        self.key = next(_KEYS)
        _STEPS[self.key] = self
        self._fuse_leaves()
        self._produce_into()
        # the gradients not produced into their buckets are copied there as soon
        # as they are made, as autograd accumulates into .grad: each is freed at
        # once (its memory reused by the next layer's, not held to the bucket's
        # start: a bucket's worth of gradients held and freed together is paged
        # back in from the kernel every step), and copied while in cache
        members_of = {}
        for _, ks in self.plan:
            for k in ks:
                g = self.grad_nodes[k]
                if k in self.dests:
                    members_of[k] = g
                    continue
                with graph.inserting_after(g):
                    members_of[k] = graph.call_function(_to_bucket, (self.key, k, g))
                members_of[k].meta = dict(g.meta)
        order = {n: i for i, n in enumerate(graph.nodes)}
        self.starts = []  # (bucket index, start node name, last member node name)
        for b, (bname, ks) in enumerate(self.plan):
            members = [members_of[k] for k in ks]
            last = max(members, key=lambda n: order[n])
            with graph.inserting_after(last):
                node = graph.call_function(_start_bucket, (self.key, b, members))
            self.starts.append((b, node, last))
        # the last bucket averaged on the calling thread, blocking, where nothing is left to
        # overlap it: no compute after its start (views and detaches only) and no update of
        # other buckets' parameters to make meanwhile (one bucket, or update_per_bucket off);
        # no hand-over to collfuse's thread and back (b40g: 0.18 ms against 0.28 for the GPT's
        # 2 MiB bucket through the runner). Up to _INLINE_MAX bytes: the caller's waits poll
        # longer than the runner's before they sleep, and ResNet-18's 15 MiB last bucket took
        # 8% longer steps inline on a busy machine (bench/results/ddp.md, b41g)
        after = []
        if self.starts:
            at = self.starts[-1][1].next
            while at.op != "root":
                after.append(at)
                at = at.next
        last_bytes = self.flat[-1].numel() * self.flat[-1].element_size() if self.flat else 0
        self.inline_last = bool(self.starts) and (len(self.plan) == 1 or not self.update_per_bucket) and \
            last_bytes <= _INLINE_MAX and all(
            n.op == "output" or (n.op == "call_function" and n.target in _NO_COMPUTE) for n in after)
        # the graph returns no gradient that lies in a bucket: each one is freed
        # once copied into its bucket (no second copy of the gradients lives on)
        bucketed = {k for _, ks in self.plan for k in ks}
        self.output_node.args = ([self.loss_node] + [None if k in bucketed else g
                                                      for k, g in enumerate(self.grad_nodes)],)
        gm.recompile()

    def start_precedes(self):
        """For each bucket: (bucket name, index of its start node, index of
        the last node of the graph that does not feed the bucket) in the
        order torch runs the graph."""
        order = {n: i for i, n in enumerate(self.gm.graph.nodes)}
        out = []
        for b, node, last in self.starts:
            feeds = set()
            stack = list(node.all_input_nodes)
            while stack:
                n = stack.pop()
                if n not in feeds:
                    feeds.add(n)
                    stack.extend(n.all_input_nodes)
            rest = [order[n] for n in self.gm.graph.nodes
                    if n.op == "call_function" and n not in feeds and n.target is not _start_bucket]
            out.append((self.plan[b][0], order[node], max(rest) if rest else -1))
        return out

    def _agree(self):
        """Every rank the same buckets and shapes, or every rank fails."""
        desc = repr([(bname, [(self.param_names[k], tuple(self.params[k].shape), str(self.params[k].dtype))
                              for k in ks]) for bname, ks in self.plan] +
                    [(self.leaf_names[n], tuple(_meta_of(n).shape)) for n in self.leaf_names])
        self.descriptor = desc
        if self.world_size == 1 or not (_cfd.is_initialized() and _cfd.get_world_size() == self.world_size):
            return  # no job (compiled for a world size given): checked when run (refused)
        h = np.frombuffer(hashlib.sha256(desc.encode()).digest()[:8], dtype=np.int64).copy()
        mine = torch.from_numpy(np.repeat(h, 1))
        everyone = torch.empty(self.world_size, dtype=torch.int64)
        _cfd.all_gather(everyone, mine)
        differ = [r for r in range(self.world_size) if everyone[r] != everyone[0]]
        if differ:
            raise RuntimeError("collfuse.step: cross-rank mismatch: the step's graph (buckets, shapes, leaves) of "
                               "rank(s) %s differs from rank 0's; this rank (%d) has %d buckets: %s"
                               % (differ, _cfd.get_rank(), len(self.plan), desc[:400]))
        with torch.no_grad():  # every rank starts from rank 0's parameters (local ones aside) and buffers, as DDP
            # the bucketed parameters through their buckets (one broadcast each, in the shared
            # memory the buckets already are on the shm world): a broadcast per parameter kept an
            # executable per shape and its arena in the world's memory (ResNet-18: 44 MB more
            # resident on rank 0, as much of it mapped by the peers)
            sent = set()
            for flat, (_, ks) in zip(self.flat, self.plan):
                for k in ks:
                    self.grad_views[k].copy_(self.params[k])
                _cfd.broadcast(flat, src=0)
                for k in ks:
                    self.params[k].copy_(self.grad_views[k])
                    sent.add(k)
                flat.zero_()
            shared = [p for k, (n, p) in enumerate(zip(self.param_names, self.params))
                      if n not in self.local and k not in sent]
            for t in shared + [b for _, b in self.model.named_buffers()]:
                if t.is_contiguous() and t.numel():
                    _cfd.broadcast(t.data, src=0)

    # ---------------- running

    def __call__(self, *inputs):
        if len(inputs) != self.n_inputs:
            raise ValueError("collfuse.step: %d inputs, the step was traced with %d" % (len(inputs), self.n_inputs))
        if self.world_size > 1 and not (_cfd.is_initialized() and _cfd.get_world_size() == self.world_size):
            raise RuntimeError("collfuse.step: compiled for %d ranks, but this process is not in a job of %d "
                               "ranks (collfuse.distributed)" % (self.world_size, self.world_size))
        self.pending = [None] * len(self.plan)
        self.spans = []
        self.inline = None
        self.copy_bytes = 0
        buffers = [b for _, b in self.model.named_buffers()]
        saved = _cfx._runtime
        _cfx._runtime = _Running(self.world_size, self.rank)
        try:
            with torch.no_grad():
                outs = self.gm(self.params, buffers, *inputs)  # no autograd: no detached copies needed
            t_end = self.t_backward_end = time.perf_counter()
            waited = 0.0
            if self.inline is not None:  # the last bucket, on this thread (after the graph's return, whose
                span = [t_end, None]     # ~0.1 ms of unwinding a faster rank then makes while it waits)
                self.spans.append(span)
                _cfd.all_reduce(self.flat[self.inline], op="mean")  # after the buckets started before it
                span[1] = time.perf_counter()
                waited = span[1] - t_end
            for k, p in enumerate(self.params):
                v = self.grad_views.get(k)
                if v is not None:
                    p.grad = v
                elif self.grad_nodes[k] is not None:  # a local (sharded) parameter: this rank's gradient
                    p.grad = outs[1 + k]
            subsets = self._update_subsets()
            for b, work in enumerate(self.pending):
                if work is not None:
                    t = time.perf_counter()
                    work.wait()
                    waited += time.perf_counter() - t
                if subsets is not None:  # this bucket's parameters updated while later ones are averaged
                    _step_on(self.optimizer, subsets[b])
        finally:
            _cfx._runtime = saved
            self.pending = None
        self.exposed_ms = waited * 1e3
        self.sync_ms = _union_ms(self.spans)
        if self.optimizer is not None and subsets is None:
            self.optimizer.step()
        return outs[0]

    def _update_subsets(self):
        """Per bucket, in the order they start, the optimizer's param_groups'
        parameter lists cut to the bucket's parameters (the last also takes
        every parameter in no bucket), when the optimizer is updated bucket
        by bucket (see compile_step's update_per_bucket); else None."""
        opt = self.optimizer
        if opt is None or not self.update_per_bucket or len(self.plan) < 2:
            return None
        groups = opt.param_groups
        key = tuple((id(g), id(g["params"]), len(g["params"])) for g in groups)
        if self._subsets_key != key:  # first step, or the user changed the groups
            bucket_of = {id(self.params[k]): b for b, (_, ks) in enumerate(self.plan) for k in ks}
            last = len(self.plan) - 1
            self._subsets = [[[p for p in g["params"] if bucket_of.get(id(p), last) == b] for g in groups]
                             for b in range(len(self.plan))]
            self._subsets_key = key
        return self._subsets

    # ---------------- what the compile said

    def explain(self):
        """The compile's explanation: per collective, the bucket it joined or why not."""
        return "\n".join(self.explain_lines)

    def dot(self, path=None):
        """The fused collfuse graph as DOT text (or drawn into path)."""
        return self.graph.to_dot(path)

    def bucket_params(self):
        """[(bucket name, [parameter names])] in schedule order."""
        return [(b, [self.param_names[k] for k in ks]) for b, ks in self.plan]


_STEPS = weakref.WeakValueDictionary()  # the traced graphs name their step by key
_KEYS = itertools.count(1)


def _fused_leaves(key, reduction, xs):
    """A bucket of leaves: the tensors all-reduced as one flat buffer (one
    copy in), each result a view of it."""
    step = _STEPS[key]
    if step.world_size == 1:
        return [x.clone() for x in xs]
    flat = torch.cat([x.reshape(-1) for x in xs])
    _cfd.all_reduce(flat, op=reduction)
    out, off = [], 0
    for x in xs:
        out.append(flat[off:off + x.numel()].view(x.shape))
        off += x.numel()
    return out


def _into(key, k, args, kwargs):
    """Parameter k's gradient, made by its op's out= overload into its bucket view."""
    dest, op = _STEPS[key].dests[k]
    return op(*args, **kwargs, out=dest)


def _to_bucket(key, k, grad):
    """Inserted after a gradient no out= kernel made in its bucket: copy it
    into its bucket view (the view is the node's value)."""
    step = _STEPS[key]
    v = step.grad_views[k]
    v.copy_(grad)
    step.copy_bytes += v.numel() * v.element_size()
    return v


def _start_bucket(key, b, grads):
    """Inserted after a bucket's last gradient (each in its bucket view by
    now): start the bucket's average on collfuse's thread (the world's
    runner, async_op: its waits poll briefly and then sleep, leaving the
    cores to the backward pass); the last bucket, where .inline_last,
    is left to the caller, which averages it once the graph has returned."""
    step = _STEPS[key]
    if step.world_size > 1:
        if step.inline_last and b == len(step.plan) - 1:  # nothing left to overlap: the caller averages it
            step.inline = b
            return
        span = [time.perf_counter(), None]
        step.spans.append(span)
        work = step.pending[b] = _cfd.all_reduce(step.flat[b], op="mean", async_op=True)
        work.then(lambda w: span.__setitem__(1, time.perf_counter()))


# torch.optim's optimizers whose step updates each parameter from its own
# gradient and state alone (none reads another parameter, a norm over all
# of them or a closure): a step over some parameters then over the others
# computes what one step over all of them does, bit for bit
_PER_PARAMETER = {getattr(torch.optim, n) for n in ("SGD", "Adam", "AdamW", "Adagrad", "Adadelta", "Adamax",
                                                     "ASGD", "NAdam", "RAdam", "RMSprop", "Rprop")
                  if hasattr(torch.optim, n)}


def _step_on(optimizer, lists):
    """optimizer.step() over some of its parameters: each param_group's
    list replaced by lists' for the call, then put back."""
    groups = optimizer.param_groups
    saved = [g["params"] for g in groups]
    try:
        for g, ps in zip(groups, lists):
            g["params"] = ps
        optimizer.step()
    finally:
        for g, ps in zip(groups, saved):
            g["params"] = ps


def _union_ms(spans):
    """The time covered by any (start, end) span, in ms."""
    total, end = 0.0, None
    for a, b in sorted(s for s in spans if s[1] is not None):
        if end is None or a > end:
            total, end = total + b - a, b
        elif b > end:
            total, end = total + b - end, b
    return total * 1e3


_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3  # glibc's malloc.h
_KEEP_TRIM, _KEEP_MMAP = 1 << 30, 32 << 20  # 32 MiB: glibc's largest mmap threshold on 64-bit
_kept = None  # whether keep_memory's setting is in force in this process (None: not tried)


def _keep_memory():
    """glibc's malloc keeps freed memory mapped (see the module's doc);
    whether it does so now."""
    global _kept
    if _kept is not None:
        return _kept
    _kept = False
    if platform.libc_ver()[0] != "glibc" or any(
            k in os.environ for k in ("MALLOC_TRIM_THRESHOLD_", "MALLOC_MMAP_THRESHOLD_", "MALLOC_TOP_PAD_")) or \
            "malloc." in os.environ.get("GLIBC_TUNABLES", ""):
        return _kept  # not glibc's, or the user's own settings
    mallopt = getattr(ctypes.CDLL(None), "mallopt", None)
    if mallopt is not None:
        _kept = bool(mallopt(_M_MMAP_THRESHOLD, _KEEP_MMAP)) & bool(mallopt(_M_TRIM_THRESHOLD, _KEEP_TRIM))
    return _kept


def compile_step(model, loss_fn, example_inputs, optimizer=None, split=None, deterministic=None, fusion=None,
                 local=None, passes="default", world_size=None, keep_memory=True, tracing_mode="real",
                 update_per_bucket=False, **options):
    """Trace, fuse and plan a training step (see the module's doc).
    split, cost, profile, target, algo, timeout, seed: as `collfuse compile`
    and Graph.compile. deterministic: reductions in a fixed order (the job's
    collfuse.distributed world is joined with it). fusion: {parameter name:
    0, 1, 2 or (2, fusion_id)}. local: names of parameters whose gradients
    are not averaged (each rank's shard of a tensor-parallel weight). world_size: the job's (joined from the
    launcher's environment or torch.distributed); given without a job, the
    step compiles for that many ranks but runs only with one. keep_memory:
    malloc keeps the memory the steps free mapped (process-wide; see the
    module's doc); False leaves malloc as it is. tracing_mode: "real" (the
    trace computes forward and backward once, on copies of the parameters
    and buffers) or "fake" (fake tensors: nothing computed; real where they
    fail, said on stderr; see the module's doc). update_per_bucket: with
    more than one bucket, the optimizer steps once per bucket, over that
    bucket's parameters, as soon as its average is done, while the later
    buckets are still being averaged (the parameters in no bucket with the
    last); None: for torch.optim's optimizers that update each parameter on
    its own (SGD, Adam, AdamW, Adagrad, Adadelta, Adamax, ASGD, NAdam,
    RAdam, RMSprop, Rprop; the results bitwise one step's), True for any
    optimizer, False (the default): one optimizer.step() after every
    bucket (on a busy 2-core machine the per-bucket updates were not shown
    to pay: bench/results/ddp.md, b41g)."""
    if tracing_mode not in ("real", "fake"):
        raise ValueError("collfuse.step: tracing_mode %r: 'real' or 'fake'" % (tracing_mode,))
    if keep_memory:
        _keep_memory()
    if not isinstance(example_inputs, (tuple, list)) or len(example_inputs) < 1:
        raise ValueError("collfuse.step: example_inputs: a tuple of the model's inputs and the loss's target")
    if world_size is None:
        if not _cfd.is_initialized() and (_cfd.launcher() is not None or _cfd._torch_group_view() is not None):
            _cfd.init(deterministic=bool(deterministic))
        world_size = _cfd.get_world_size() if _cfd.is_initialized() else 1
    if deterministic is not None:
        options["deterministic"] = bool(deterministic)
    if split is not None:
        options["split"] = split
    step = CompiledStep(model, loss_fn, tuple(example_inputs), optimizer, int(world_size), fusion, local, passes,
                        options, tracing_mode, update_per_bucket)
    _release()
    return step


def _release():
    """After a compile: the tracing's garbage freed now (make_fx leaves
    reference cycles that hold its tensors: ResNet-18's 43 MB, otherwise
    alive until the cyclic collector's next full pass) and malloc's free
    memory handed back to the kernel (the trace ran forward and backward
    with every intermediate of both alive: the steps' own peak is lower, and
    with keep_memory's trim threshold that heap would stay mapped)."""
    gc.collect()
    _cfd._malloc_trim()
