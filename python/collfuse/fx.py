"""collfuse.fx: the torch.fx front door.

A model calls the collective leaves below; torch.fx.symbolic_trace keeps them
as call_function nodes (they are torch.fx.wrap'ed, and they also build their
own node when they see a Proxy, so `from collfuse.fx import all_reduce`
works too). compile() turns the traced GraphModule into a collfuse graph,
fuses it and returns a callable that runs every rank with collfuse:

    import collfuse.fx as cfx

    class DP(torch.nn.Module):
        def forward(self, x):
            return [cfx.all_reduce(x @ w, "mean") for w in self.ws]

    gm = torch.fx.symbolic_trace(DP())
    run = cfx.compile(gm, example_inputs=(x0,), world_size=4)
    per_rank = run([(x0,), (x1,), (x2,), (x3,)])   # rank r's result: per_rank[r]

Conversion: placeholders become Inputs (dtype and shape from example_inputs,
the same on every rank); parameters and buffers (get_attr, nn.Linear's) become
Inputs fed with the module's values on every rank; matmul/mm/@ of 2-D tensors
become MatMul; F.linear / nn.Linear become MatMul with the transposed weight
(transposed once per call, on the Python side) plus Add of the bias;
add/sub/mul (tensors or Python scalars) become Add/Sub/Mul; view/reshape/
flatten become Reshape; contiguous/clone/detach pass their input through; the
leaves become AllReduce, AllGather, ReduceScatter and MatmulReduceScatter.
Anything else becomes an Opaque op of the same output dtype and shape, which
keeps its dependencies; the executor fills an Opaque output with reproducible
pseudo-random data, so a model whose results matter must not rely on one.

Outside tracing the leaves compute one rank's view of a world of one rank
(all_reduce(x) is x, all_gather stacks or concatenates x once, ...), so an
untraced model still runs. Shapes for the conversion come from running the
model once on example_inputs with world-aware stand-ins for the leaves.
"""

import inspect
import operator

import numpy as np
import torch
import torch.fx

from . import Graph, _cint

__all__ = ["all_reduce", "all_gather", "reduce_scatter", "matmul_reduce_scatter", "compile", "CompiledModule"]

WORLD = "hccl_world_group"

# ---------------------------------------------------------------- the leaves


def _traced(fn, args, kwargs):
    """When called on Proxies (symbolic tracing without the wrap patch), add
    the call to the graph."""
    for a in list(args) + list(kwargs.values()):
        if isinstance(a, torch.fx.Proxy):
            return a.tracer.create_proxy("call_function", fn, tuple(args), dict(kwargs))
    return None


@torch.fx.wrap
def all_reduce(x, reduction="sum", group=None, fusion=1, fusion_id=-1):
    """AllReduce x over group (default: every rank) with reduction sum, mean,
    max, min or prod; fusion 0 (never fused), 1 (by the split strategy), 2
    (with every AllReduce of the same fusion_id)."""
    p = _traced(_ALL_REDUCE, (x,), dict(reduction=reduction, group=group, fusion=fusion, fusion_id=fusion_id))
    if p is not None:
        return p
    if not _world_group(group):
        _no_group_in_step("all_reduce", group)
    else:
        return torch.ops.collfuse.all_reduce(x, reduction, int(fusion), int(fusion_id))
    return x.clone()


@torch.fx.wrap
def all_gather(x, group=None, layout="stack"):
    """AllGather x in rank order: layout "stack" gives [ranks, *x.shape],
    "concat" concatenates along dim 0."""
    p = _traced(_ALL_GATHER, (x,), dict(group=group, layout=layout))
    if p is not None:
        return p
    if not _world_group(group):
        _no_group_in_step("all_gather", group)
    else:
        return torch.ops.collfuse.all_gather(x, layout)
    return x.unsqueeze(0).clone() if layout == "stack" else x.clone()


@torch.fx.wrap
def reduce_scatter(x, reduction="sum", group=None):
    """ReduceScatter along dim 0: rank r keeps block r of the reduced x."""
    p = _traced(_REDUCE_SCATTER, (x,), dict(reduction=reduction, group=group))
    if p is not None:
        return p
    if not _world_group(group):
        _no_group_in_step("reduce_scatter", group)
    else:
        return torch.ops.collfuse.reduce_scatter(x, reduction)
    return x.clone()


@torch.fx.wrap
def matmul_reduce_scatter(x1, x2, bias=None, group=None, comm_turn=0):
    """reduce_scatter(x1 @ x2 + bias, sum) over the group along dim 0
    (torch_npu.npu_mm_reduce_scatter_base), pipelined by collfuse."""
    p = _traced(_MATMUL_REDUCE_SCATTER, (x1, x2), dict(bias=bias, group=group, comm_turn=comm_turn))
    if p is not None:
        return p
    if not _world_group(group):
        _no_group_in_step("matmul_reduce_scatter", group)
    else:
        return torch.ops.collfuse.matmul_reduce_scatter(x1, x2, bias, int(comm_turn or 0))
    y = x1 @ x2
    return y + bias if bias is not None else y


# ---------------------------------------------------------------- the ops
#
# The leaves as torch operators (torch.ops.collfuse.*, with autograd), so
# that make_fx (collfuse.step's tracing of forward and backward) records
# each call as one node with its real dtype, shape and dependencies. What
# an op computes comes from _runtime: None outside a step (one rank's view
# of a world of one rank, as the leaves above), else the step's object
# (world-aware stand-ins while tracing, the job's collectives while
# running). The gradients are tensor parallelism's (Megatron-LM's f and g):
# the loss is the same on every rank downstream of the leaves, so
# all_reduce's gradient is the incoming one (sum; mean: divided by the
# ranks), all_gather's this rank's block of it, and reduce_scatter's and
# matmul_reduce_scatter's need an all_gather of it.

_runtime = None
_OPLIB = torch.library.Library("collfuse", "DEF")
_OPLIB.define("all_reduce(Tensor x, str reduction, int fusion, int fusion_id) -> Tensor")
_OPLIB.define("all_gather(Tensor x, str layout) -> Tensor")
_OPLIB.define("reduce_scatter(Tensor x, str reduction) -> Tensor")
_OPLIB.define("matmul_reduce_scatter(Tensor x1, Tensor x2, Tensor? bias, int comm_turn) -> Tensor")
_OPLIB.define("own_block(Tensor x) -> Tensor")  # this rank's block of x along dim 0 (all_gather's gradient)


def _own_block(x):
    n, r = (1, 0) if _runtime is None else (_runtime.world_size, _runtime.rank)
    b = x.shape[0] // n
    return x[r * b:(r + 1) * b].clone()


def _own_block_meta(x):
    n = 1 if _runtime is None else _runtime.world_size
    return x.new_empty((x.shape[0] // n,) + tuple(x.shape[1:]))


_OPLIB.impl("own_block", _own_block, "CPU")
_OPLIB.impl("own_block", _own_block_meta, "Meta")


def _world_of_one(kind, x, a):
    if kind == "all_gather":
        return x.unsqueeze(0).clone() if a["layout"] == "stack" else x.clone()
    if kind == "matmul_reduce_scatter":
        y = x @ a["x2"]
        return y + a["bias"] if a["bias"] is not None else y
    return x.clone()


def _cpu(kind):
    def impl(x, *rest):
        a = dict(zip(_OP_ARGS[kind], rest))
        rt = _runtime
        return _world_of_one(kind, x, a) if rt is None else rt.leaf(kind, x, a)
    return impl


def _meta(kind):
    def impl(x, *rest):
        a = dict(zip(_OP_ARGS[kind], rest))
        n = 1 if _runtime is None else _runtime.world_size
        if kind == "all_gather":
            shape = (n,) + tuple(x.shape) if a["layout"] == "stack" else (x.shape[0] * n,) + tuple(x.shape[1:])
        elif kind == "reduce_scatter":
            shape = (x.shape[0] // n,) + tuple(x.shape[1:])
        elif kind == "matmul_reduce_scatter":
            shape = (x.shape[0] // n, a["x2"].shape[1])
        else:
            shape = tuple(x.shape)
        return x.new_empty(shape)
    return impl


_OP_ARGS = {"all_reduce": ("reduction", "fusion", "fusion_id"), "all_gather": ("layout",),
            "reduce_scatter": ("reduction",), "matmul_reduce_scatter": ("x2", "bias", "comm_turn")}


def _below_autograd(fn, *args):
    guard = torch._C._AutoDispatchBelowAutograd()
    try:
        return fn(*args)
    finally:
        del guard


class _AllReduceFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, reduction, fusion, fusion_id):
        ctx.reduction = reduction
        return _below_autograd(torch.ops.collfuse.all_reduce, x, reduction, fusion, fusion_id)

    @staticmethod
    def backward(ctx, g):
        if ctx.reduction == "sum":
            return g, None, None, None
        if ctx.reduction == "mean":
            return g / (1 if _runtime is None else _runtime.world_size), None, None, None
        raise NotImplementedError("collfuse.fx.all_reduce: no gradient for reduction '%s'" % ctx.reduction)


class _AllGatherFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, layout):
        ctx.layout, ctx.shape = layout, tuple(x.shape)
        return _below_autograd(torch.ops.collfuse.all_gather, x, layout)

    @staticmethod
    def backward(ctx, g):
        if ctx.layout == "stack":
            g = g.reshape((-1,) + ctx.shape[1:]) if ctx.shape else g.reshape(-1)
        return torch.ops.collfuse.own_block(g.contiguous()).reshape(ctx.shape), None


class _ReduceScatterFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, reduction):
        if reduction != "sum":
            raise NotImplementedError("collfuse.fx.reduce_scatter: a gradient only for reduction 'sum'")
        return _below_autograd(torch.ops.collfuse.reduce_scatter, x, reduction)

    @staticmethod
    def backward(ctx, g):
        return torch.ops.collfuse.all_gather(g.contiguous(), "concat"), None


class _MatmulReduceScatterFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x1, x2, bias, comm_turn):
        ctx.save_for_backward(x1, x2)
        ctx.has_bias = bias is not None
        return _below_autograd(torch.ops.collfuse.matmul_reduce_scatter, x1, x2, bias, comm_turn)

    @staticmethod
    def backward(ctx, g):
        x1, x2 = ctx.saved_tensors
        full = torch.ops.collfuse.all_gather(g.contiguous(), "concat")
        return full @ x2.t(), x1.t() @ full, full.sum(0) if ctx.has_bias else None, None


for _k, _fn in (("all_reduce", _AllReduceFn), ("all_gather", _AllGatherFn), ("reduce_scatter", _ReduceScatterFn),
                ("matmul_reduce_scatter", _MatmulReduceScatterFn)):
    _OPLIB.impl(_k, _cpu(_k), "CPU")
    _OPLIB.impl(_k, _meta(_k), "Meta")
    _OPLIB.impl(_k, (lambda f: lambda *a: f.apply(*a))(_fn), "Autograd")


def _world_group(group):
    return group is None or group == WORLD


def _no_group_in_step(leaf, group):
    if _runtime is not None:
        raise NotImplementedError("collfuse.step: collfuse.fx.%s over group %r: a step's leaves run over the "
                                  "whole job only (group=None)" % (leaf, group))


# The functions themselves: while tracing, the module's names are patched.
_LEAVES = _ALL_REDUCE, _ALL_GATHER, _REDUCE_SCATTER, _MATMUL_REDUCE_SCATTER = (
    all_reduce, all_gather, reduce_scatter, matmul_reduce_scatter)


def _bind(fn, args, kwargs):
    b = inspect.signature(fn).bind(*args, **kwargs)
    b.apply_defaults()
    return b.arguments


# ---------------------------------------------------------------- shapes


class _ShapeProp(torch.fx.Interpreter):
    """Runs the module on one rank's example inputs with world-aware
    stand-ins for the leaves, recording each node's value in meta["cf"]."""

    def __init__(self, gm, group_size):
        super().__init__(gm)
        self.group_size = group_size

    def call_function(self, target, args, kwargs):
        if target in _LEAVES:
            a = _bind(target, args, kwargs)
            n = self.group_size(a.get("group"))
            if target is _ALL_REDUCE:
                return a["x"].clone()
            if target is _ALL_GATHER:
                x = a["x"]
                return torch.stack([x] * n) if a["layout"] == "stack" else torch.cat([x] * n, 0)
            if target is _REDUCE_SCATTER:
                x = a["x"]
                return x[: x.shape[0] // n].clone()
            y = a["x1"] @ a["x2"]
            if a["bias"] is not None:
                y = y + a["bias"]
            return y[: y.shape[0] // n].clone()
        return super().call_function(target, args, kwargs)

    def run_node(self, n):
        v = super().run_node(n)
        n.meta["cf"] = v
        return v


# ---------------------------------------------------------------- conversion

_TORCH_DT = {
    torch.float32: "float32", torch.float64: "float64", torch.float16: "float16", torch.bfloat16: "bfloat16",
    torch.int8: "int8", torch.uint8: "uint8", torch.int16: "int16", torch.int32: "int32", torch.int64: "int64",
}

_MATMUL_FNS = {torch.matmul, torch.mm, operator.matmul}
_MATMUL_METHODS = {"matmul", "mm", "__matmul__"}
_BINARY = {
    operator.add: "Add", torch.add: "Add", operator.iadd: "Add",
    operator.sub: "Sub", torch.sub: "Sub", operator.isub: "Sub",
    operator.mul: "Mul", torch.mul: "Mul", operator.imul: "Mul",
}
_BINARY_METHODS = {"add": "Add", "sub": "Sub", "mul": "Mul", "add_": "Add", "sub_": "Sub", "mul_": "Mul"}
_PASS_METHODS = {"contiguous", "clone", "detach"}
_RESHAPE_METHODS = {"view", "reshape", "flatten"}
_RESHAPE_FNS = {torch.reshape, torch.flatten}


def _dtype_of(t, where):
    if t.dtype not in _TORCH_DT:
        raise NotImplementedError("collfuse.fx: %s has dtype %s, which collfuse does not have" % (where, t.dtype))
    return _TORCH_DT[t.dtype]


def _to_numpy(t):
    t = t.detach().cpu().contiguous()
    if t.dtype == torch.bfloat16:
        return t.view(torch.int16).numpy().view(np.uint16)
    return t.numpy()


def _to_torch(a, dtype):
    if dtype == "bfloat16":
        return torch.from_numpy(np.ascontiguousarray(a).view(np.int16)).view(torch.bfloat16)
    return torch.from_numpy(a)


def _fetch_attr(gm, target):
    obj = gm
    for part in target.split("."):
        obj = getattr(obj, part)
    return obj


class _Converter:
    def __init__(self, gm, world_size, groups, name):
        self.gm = gm
        self.world = world_size
        self.groups = dict(groups or {})
        self.g = Graph(name, world_size=world_size)
        for gname, ranks in self.groups.items():
            self.g.define_group(gname, ranks)
        self.env = {}            # fx node -> collfuse value name (None: not a tensor)
        self.placeholders = []   # collfuse Input names, in placeholder order
        self.feeds = {}          # collfuse Input name -> (fn(rank_args) -> tensor, per_rank)
        self.used = set()        # collfuse names given so far
        self.own = None          # the fx node being converted
        self.fx_names = {n.name for n in gm.graph.nodes}
        self.opaque = []         # (fx node name, type) of ops collfuse does not run

    def group_size(self, group):
        if group is None or group == WORLD:
            return self.world
        if group not in self.groups:
            raise ValueError("collfuse.fx: group '%s' is not defined; pass groups={'%s': [ranks...]}" % (group, group))
        return len(self.groups[group])

    def fresh(self, base):
        """A collfuse name: the fx node being converted keeps its own name;
        anything else made for it is base_K, clashing with no fx name and no
        name given before."""
        name, k = base, 0
        while name in self.used or (name in self.fx_names and name != self.own):
            k += 1
            name = "%s_%d" % (base, k)
        self.used.add(name)
        return name

    def tensor_in(self, node, arg):
        if not isinstance(arg, torch.fx.Node):
            raise NotImplementedError("collfuse.fx: node '%s': operand %r is not a tensor" % (node.name, arg))
        v = self.env.get(arg)
        if v is None:
            raise NotImplementedError(
                "collfuse.fx: node '%s' uses '%s', which is not a tensor collfuse can hold" % (node.name, arg.name))
        return v

    def scalar_or_tensor(self, node, arg, dtype):
        if isinstance(arg, torch.fx.Node):
            return self.tensor_in(node, arg)
        if isinstance(arg, (int, float, bool)):
            return self.g.constant(self.fresh(node.name + "_const"), dtype, (), float(arg))
        raise NotImplementedError("collfuse.fx: node '%s': operand %r" % (node.name, arg))

    def feed_input(self, base, value_fn, per_rank, example):
        """An Input collfuse gets from the Python side: a parameter (the
        same on every rank), or made from a rank's arguments."""
        name = self.fresh(base)
        self.g.input(name, _dtype_of(example, base), tuple(example.shape))
        self.feeds[name] = (value_fn, per_rank)
        return name

    def opaque_node(self, node, type_name):
        val = node.meta.get("cf")
        if not isinstance(val, torch.Tensor):
            return None  # metadata (sizes, tuples): only an error if a tensor op needs it
        ins, flat = [], []
        torch.fx.node.map_arg((node.args, node.kwargs), lambda n: flat.append(n))
        for a in flat:
            v = self.env.get(a)
            if v is not None and v not in ins:
                ins.append(v)
        self.opaque.append((node.name, type_name))
        return self.g.opaque(type_name, ins, _dtype_of(val, node.name), tuple(val.shape), name=self.fresh(node.name))

    def linear(self, node, x, b, weight, per_rank):
        """x @ W.T (+ b): collfuse has no transpose, so W.T is an Input made
        on the Python side, weight(rank_args) giving W (None: the example)."""
        wt = self.feed_input(node.name + "_weight_t", lambda a: weight(a).t().contiguous(), per_rank,
                             weight(None).t())
        y = self.g.matmul(self.tensor_in(node, x), wt, name=self.fresh(node.name if b is None else node.name + "_mm"))
        if b is None:
            return y
        bv = b if isinstance(b, str) else self.tensor_in(node, b)
        return self.g.add(y, bv, name=self.fresh(node.name))

    def weight_fn(self, w):
        """(fn(rank_args) -> W, per_rank) for a linear's weight collfuse can
        transpose on the way in: a parameter or a placeholder; else None."""
        if w.op == "get_attr":
            t = _fetch_attr(self.gm, w.target).detach()
            return (lambda rank_args: t), False
        if w.op == "placeholder":
            k, ex = self.ph_index[w], w.meta["cf"]
            return (lambda rank_args: ex if rank_args is None else rank_args[k]), True
        return None

    def convert(self):
        gm, g = self.gm, self.g
        self.ph_index = {}
        outputs = None
        for node in gm.graph.nodes:
            self.own = node.name
            val = node.meta.get("cf")
            if node.op == "placeholder":
                if not isinstance(val, torch.Tensor):
                    raise NotImplementedError("collfuse.fx: placeholder '%s' is not a tensor" % node.name)
                self.ph_index[node] = len(self.placeholders)
                name = g.input(self.fresh(node.name), _dtype_of(val, node.name), tuple(val.shape))
                self.placeholders.append(name)
                self.env[node] = name
            elif node.op == "get_attr":
                t = _fetch_attr(gm, node.target)
                if isinstance(t, torch.Tensor):
                    name = g.input(self.fresh(node.name), _dtype_of(t, node.target), tuple(t.shape))
                    self.feeds[name] = ((lambda t: lambda rank_args: t)(t.detach()), False)
                    self.env[node] = name
                else:
                    self.env[node] = None
            elif node.op == "output":
                outputs = node.args[0]
            elif node.op == "call_module":
                mod = gm.get_submodule(node.target)
                if isinstance(mod, torch.nn.Linear) and len(node.args) == 1 and not node.kwargs:
                    w, b = mod.weight.detach(), None
                    if mod.bias is not None:
                        bias = mod.bias.detach()
                        b = self.feed_input(node.name + "_bias", (lambda t: lambda rank_args: t)(bias), False, bias)
                    self.env[node] = self.linear(node, node.args[0], b, lambda rank_args, w=w: w, False)
                else:
                    self.env[node] = self.opaque_node(node, type(mod).__name__)
            elif node.op in ("call_function", "call_method"):
                self.env[node] = self.call(node, val)
            else:
                raise NotImplementedError("collfuse.fx: node '%s': op %s" % (node.name, node.op))
        self.out_names = []
        self.out_spec = torch.fx.node.map_arg(outputs, lambda n: self.output_of(n))
        return g

    def output_of(self, n):
        v = self.env.get(n)
        if v is None:
            raise NotImplementedError("collfuse.fx: output '%s' is not a tensor" % n.name)
        name = "output.%d" % len(self.out_names)
        self.g.output(name, v)
        self.out_names.append(name)
        return _OutRef(name)

    def call(self, node, val):
        g, t, args, kwargs = self.g, node.target, node.args, node.kwargs
        is_fn = node.op == "call_function"
        if is_fn and t in _LEAVES:
            a = _bind(t, args, kwargs)
            group = a.get("group")
            if group is not None and group != WORLD and group not in self.groups:
                self.group_size(group)  # raises with the fix
            if t is _ALL_REDUCE:
                return g.all_reduce(self.tensor_in(node, a["x"]), reduction=a["reduction"], group=group,
                                    fusion=a["fusion"], fusion_id=a["fusion_id"] if a["fusion_id"] >= 0 else None,
                                    name=self.fresh(node.name))
            if t is _ALL_GATHER:
                return g.all_gather(self.tensor_in(node, a["x"]), group=group, layout=a["layout"],
                                    name=self.fresh(node.name))
            if t is _REDUCE_SCATTER:
                return g.reduce_scatter(self.tensor_in(node, a["x"]), reduction=a["reduction"], group=group,
                                        name=self.fresh(node.name))
            ins = [self.tensor_in(node, a["x1"]), self.tensor_in(node, a["x2"])]
            if a["bias"] is not None:
                ins.append(self.tensor_in(node, a["bias"]))
            return g.op("MatmulReduceScatter", ins, self.fresh(node.name), world_size=self.group_size(group),
                        group=group, comm_turn=a["comm_turn"] or None)
        if not isinstance(val, torch.Tensor):
            return None
        out_dt = _dtype_of(val, node.name)
        two_d = lambda a: isinstance(a, torch.fx.Node) and isinstance(a.meta.get("cf"), torch.Tensor) and a.meta["cf"].dim() == 2
        # matmul / mm / @
        if ((is_fn and t in _MATMUL_FNS) or (not is_fn and t in _MATMUL_METHODS)) and len(args) == 2 and not kwargs:
            if two_d(args[0]) and two_d(args[1]):
                return g.matmul(self.tensor_in(node, args[0]), self.tensor_in(node, args[1]), name=self.fresh(node.name))
        # linear
        if is_fn and t is torch.nn.functional.linear:
            a = _bind(lambda input, weight, bias=None: None, args, kwargs)
            w = a["weight"]
            wf = self.weight_fn(w) if isinstance(w, torch.fx.Node) else None
            b = a["bias"]
            if wf is not None and two_d(a["input"]) and two_d(w) and (b is None or isinstance(b, torch.fx.Node)):
                return self.linear(node, a["input"], b, wf[0], wf[1])
        # add / sub / mul
        kind = _BINARY.get(t) if is_fn else _BINARY_METHODS.get(t)
        if kind and len(args) == 2 and not kwargs:
            if any(isinstance(a, torch.fx.Node) for a in args):
                a0 = self.scalar_or_tensor(node, args[0], out_dt)
                a1 = self.scalar_or_tensor(node, args[1], out_dt)
                return g.op(kind, (a0, a1), self.fresh(node.name))
        # view / reshape / flatten
        if ((is_fn and t in _RESHAPE_FNS) or (not is_fn and t in _RESHAPE_METHODS)) and isinstance(args[0], torch.fx.Node):
            return g.reshape(self.tensor_in(node, args[0]), tuple(val.shape), name=self.fresh(node.name))
        if not is_fn and t in _PASS_METHODS and len(args) == 1 and not kwargs:
            return self.tensor_in(node, args[0])
        type_name = t if isinstance(t, str) else getattr(t, "__name__", str(t))
        return self.opaque_node(node, type_name)


class _OutRef:
    __slots__ = ("name",)

    def __init__(self, name):
        self.name = name


def _rebuild(spec, values):
    if isinstance(spec, _OutRef):
        return values[spec.name]
    if isinstance(spec, tuple):
        return tuple(_rebuild(s, values) for s in spec)
    if isinstance(spec, list):
        return [_rebuild(s, values) for s in spec]
    if isinstance(spec, dict):
        return {k: _rebuild(s, values) for k, s in spec.items()}
    return spec


class CompiledModule:
    """A traced module compiled by collfuse. Call it with one tuple of
    inputs (the module's placeholders, in order) per rank; it returns one
    result per rank, shaped like the module's output, computed by collfuse.

    .graph is the fused collfuse Graph, .collectives_before/_after the
    collective counts before and after fusion, .opaque the (node, type) of
    ops collfuse kept as Opaque."""

    def __init__(self, conv, exe, before):
        self._conv = conv
        self.graph = conv.g
        self.executable = exe
        self.world_size = exe.ranks
        self.collectives_before = before
        self.collectives_after = conv.g.collective_count
        self.opaque = list(conv.opaque)

    def to_dot(self, path=None):
        return self.graph.to_dot(path)

    def bucket_views(self):
        """PyTorch DDP's gradient_as_bucket_view: per rank, {placeholder
        name: torch tensor} viewing where that input (a gradient) lies in
        its fused bucket (Executable.bucket_views). Write gradients into
        these tensors (or make them the module's gradient tensors) and pass
        them as the inputs: the call then copies nothing in, and the results
        that lie in a bucket come back as tensors viewing the bucket's output
        (overwritten by the next call) instead of being copied out."""
        views = self.executable.bucket_views()
        dtypes = {n: dt for n, dt, _ in self.executable.inputs}
        return [{n: _to_torch(v[n], dtypes[n]) for n in self._conv.placeholders if n in v} for v in views]

    def __call__(self, inputs_per_rank):
        conv, exe = self._conv, self.executable
        if len(inputs_per_rank) != self.world_size:
            raise ValueError("collfuse.fx: %d ranks of inputs for world_size %d" % (len(inputs_per_rank), self.world_size))
        feeds = []
        shared = {name: _to_numpy(fn(None)) for name, (fn, per_rank) in conv.feeds.items() if not per_rank}
        for r, args in enumerate(inputs_per_rank):
            args = tuple(args) if isinstance(args, (tuple, list)) else (args,)
            if len(args) != len(conv.placeholders):
                raise ValueError("collfuse.fx: rank %d gives %d inputs, the module takes %d" % (r, len(args), len(conv.placeholders)))
            d = {name: _to_numpy(a) for name, a in zip(conv.placeholders, args)}
            for name, (fn, per_rank) in conv.feeds.items():
                d[name] = _to_numpy(fn(args)) if per_rank else shared[name]
            feeds.append(d)
        outs = exe.run(feeds)
        dtypes = {n: dt for n, dt, _ in exe.outputs}
        return [_rebuild(conv.out_spec, {n: _to_torch(o[n], dtypes[n]) for n in conv.out_names}) for o in outs]


def compile(graph_module, example_inputs, world_size, groups=None, passes="default", name=None, **options):
    """Convert a traced GraphModule to a collfuse graph, fuse it (passes:
    "default", "O0" or a list; options: split, cost, target, deterministic,
    algo, timeout, seed, explain) and plan it for world_size ranks.
    example_inputs: one rank's inputs (shapes and dtypes are the same on
    every rank). groups: {name: [world ranks]} for collectives that name a
    group other than hccl_world_group."""
    if not isinstance(graph_module, torch.fx.GraphModule):
        graph_module = torch.fx.symbolic_trace(graph_module)
    conv = _Converter(graph_module, _cint(world_size, "world_size"), groups,
                      name or type(graph_module).__name__.replace("GraphModule", "") or "fx")
    with torch.no_grad():
        _ShapeProp(graph_module, conv.group_size).run(*example_inputs)
    g = conv.convert()
    for n in graph_module.graph.nodes:  # the example values are no longer needed
        n.meta.pop("cf", None)
    g.verify()
    before = g.collective_count
    exe = g.compile(passes=passes, **options)
    return CompiledModule(conv, exe, before)
