"""collfuse: a graph compiler and executor for collective fusion (Python bindings).

A thin ctypes layer over libcollfuse.so's C API (include/collfuse/collfuse.h),
with numpy arrays in and out; nothing is compiled and nothing comes from PyPI.

    import collfuse, numpy as np
    g = collfuse.Graph("dp", world_size=4)
    for i in range(20):
        g.input("g%d" % i, "float32", (1000,))
        g.output("o%d" % i, g.all_reduce("g%d" % i, reduction="mean"))
    exe = g.compile(split="bytes:16K")           # fuses, then plans
    print(g.buckets())                           # the fused collectives
    outs = exe.run([{"g0": np.ones(1000, np.float32)} for r in range(4)])
    outs[2]["o0"]                                # rank 2's output o0

Every rank of a run is a thread of this process (the threads transport). Data
types map to numpy one to one, except bfloat16, which numpy lacks: a bfloat16
input takes uint16 arrays as raw bits (or any float array, rounded to nearest
even), and a bfloat16 output is a uint16 array of raw bits;
bf16_to_float32()/float32_to_bf16() convert. Each Graph gets its own C
context unless one is passed, so graphs used from different Python threads
are independent (the GIL is released while the library runs); executables
of one Graph may run in several threads at once, each raising its own
errors, while the Graph is not changed or compiled meanwhile. docs/api.md
has the whole story; collfuse.fx is the torch.fx front door.
"""

import ctypes
import operator
import os
import tempfile
import threading

import numpy as np

from . import _lib
from ._lib import lib
from ._version import __version__

__all__ = [
    "CollfuseError", "Context", "Graph", "Executable", "load", "parse", "compile", "version",
    "version_number", "targets", "bf16_to_float32", "float32_to_bf16",
]

_STATUS = {0: "ok", 1: "invalid", 2: "usage", 3: "runtime", 4: "no_memory", 5: "io", 6: "unsupported"}

DTYPES = {
    "int8": np.int8, "uint8": np.uint8, "int16": np.int16, "int32": np.int32, "int64": np.int64,
    "float16": np.float16, "bfloat16": np.uint16, "float32": np.float32, "float64": np.float64,
    "uint16": np.uint16, "uint32": np.uint32, "uint64": np.uint64, "bool": np.bool_,
}


class CollfuseError(Exception):
    """A failed call: .status is the cf_status ("invalid", "usage", "runtime",
    "no_memory", "io", "unsupported"), .code its number, str() the message."""

    def __init__(self, code, message):
        self.code = code
        self.status = _STATUS.get(code, str(code))
        super().__init__(message or ("collfuse: %s error" % self.status))


def version():
    """Version of the loaded library, "MAJOR.MINOR.PATCH"."""
    return lib.cf_version().decode()


def version_number():
    return lib.cf_version_number()


def targets():
    """Target profile names (cpu, atlas-a2, ...)."""
    out, i = [], 0
    while True:
        n = lib.cf_target_name(i)
        if not n:
            return out
        out.append(n.decode())
        i += 1


# What goes to C is checked, never truncated: ctypes cuts a string at its
# first NUL and keeps the low 32 bits of an integer for a C int.

def _nul_free(b, what, orig):
    if b"\0" in b:
        raise ValueError("collfuse: %s %r contains a NUL character (a C string would end there)" % (what, orig))
    return b


def _b(s, what="string"):
    """A C string of s (a str, or bytes as they are)."""
    if s is None:
        return None
    return _nul_free(s if isinstance(s, bytes) else str(s).encode(), what, s)


def _split_list(text):
    """The items of a list attribute's text ("members"): comma-separated,
    "\\," a comma within an item and "\\\\" a backslash before one (the
    form collfuse writes, cf_attr_text)."""
    items, cur, i = [], [], 0
    while i < len(text):
        c = text[i]
        if c == "\\" and text[i + 1:i + 2] in (",", "\\"):
            cur.append(text[i + 1])
            i += 2
            continue
        if c == ",":
            items.append("".join(cur))
            cur = []
        else:
            cur.append(c)
        i += 1
    items.append("".join(cur))
    return items


def _path(p):
    """A C string of a path (str, bytes or os.PathLike), as the file system spells it."""
    return _nul_free(os.fsencode(p), "path", p)


_INT_MIN, _INT_MAX = -(2**31), 2**31 - 1


def _int(v, what):
    """v as a Python int: an integer (Python or numpy), never a float cut short."""
    try:
        return operator.index(v)
    except TypeError:
        raise TypeError("collfuse: %s: an integer is wanted, got %r" % (what, v)) from None


def _dims(shape, what):
    """shape as a C int64_t array and its rank, for the typed builders."""
    dims = [_int(d, "dimension") for d in shape]
    for d in dims:
        if not -(2**63) <= d < 2**63:
            raise OverflowError("collfuse: %s: dimension %d does not fit int64" % (what, d))
    return (ctypes.c_int64 * max(1, len(dims)))(*dims), _cint(len(dims), what)


def _cint(v, what):
    """v for a C int parameter."""
    i = _int(v, what)
    if not _INT_MIN <= i <= _INT_MAX:
        raise OverflowError("collfuse: %s: %d does not fit a C int (%d..%d)" % (what, i, _INT_MIN, _INT_MAX))
    return i


def _attr_text(v):
    """An attribute's XML text: shapes as "4,8", booleans as 1/0."""
    if isinstance(v, (tuple, list)):
        return ",".join(str(_int(d, "dimension")) for d in v)
    if isinstance(v, bool):
        return "1" if v else "0"
    return str(v)


_EMPTY = np.zeros(8, dtype=np.float64)  # a valid, aligned pointer for zero-size inputs


class Context:
    """A collfuse context: error messages and a log sink. log(level, msg) is
    called with the library's warnings and notes (level 0 error .. 3 debug)."""

    def __init__(self, log=None):
        h = ctypes.c_void_p()
        if lib.cf_context_create(ctypes.byref(h)) != 0:
            raise CollfuseError(4, "collfuse: cannot create a context")
        self._h = h
        self._log = None
        if log is not None:
            self.set_log(log)

    def set_log(self, fn):
        if fn is None:
            self._log = None
            lib.cf_context_set_log(self._h, _lib.LOG_FN(), None)
            return
        self._log = _lib.LOG_FN(lambda user, level, msg: fn(level, msg.decode(errors="replace")))
        lib.cf_context_set_log(self._h, self._log, None)

    def errmsg(self):
        return lib.cf_context_errmsg(self._h).decode(errors="replace")

    def check(self, st):
        if st != 0:
            raise CollfuseError(st, self.errmsg())

    def __del__(self):
        h = getattr(self, "_h", None)
        if h:
            lib.cf_context_destroy(h)
            self._h = None


def _check_int_range(lo, hi, want, what):
    """OverflowError unless the Python ints lo..hi fit integer dtype want."""
    info = np.iinfo(want)
    bad = lo if lo < info.min else hi if hi > info.max else None
    if bad is not None:
        raise OverflowError("collfuse: %s: value %d does not fit %s (%d..%d)"
                            % (what, bad, np.dtype(want).name, info.min, info.max))


def _fit_ints(a, want, what):
    """a (an integer array) as dtype want; OverflowError when a value does not fit."""
    if a.size:
        _check_int_range(int(a.min()), int(a.max()), want, what)
    return np.ascontiguousarray(a, dtype=want)


def _overflowed(src, dst, what, dtype_name):
    """Raise OverflowError where a finite value of src became infinite in dst."""
    bad = np.isfinite(src) & ~np.isfinite(dst)
    if bad.any():
        raise OverflowError("collfuse: %s: value %r overflows %s (it would become infinite)"
                            % (what, src[bad].flat[0].item(), dtype_name))


def _fit_floats(a, want, what):
    """a (a float array) as float dtype want; OverflowError when a finite value overflows."""
    if np.dtype(want).itemsize >= a.dtype.itemsize:
        return np.ascontiguousarray(a, dtype=want)
    with np.errstate(over="ignore"):
        out = np.ascontiguousarray(a, dtype=want)
    _overflowed(a, out, what, np.dtype(want).name)
    return out


def _constant_fits(name, dtype, value):
    """Refuse a Constant value its dtype would saturate, truncate or make infinite."""
    if dtype not in DTYPES:
        return  # the library names the unknown dtype
    what = "constant '%s'" % name
    want = np.dtype(DTYPES[dtype])
    if dtype != "bfloat16" and want.kind in "iu":
        if isinstance(value, (int, np.integer)):
            iv = int(value)
        else:
            fv = float(value)
            if not np.isfinite(fv) or fv != int(fv):
                raise ValueError("collfuse: %s is %s: value %r is not an integer" % (what, dtype, value))
            iv = int(fv)
        _check_int_range(iv, iv, want, what)
    elif dtype == "bfloat16":
        float32_to_bf16(np.array([float(value)]), what)
    else:
        _fit_floats(np.array([float(value)]), want, what)


def bf16_to_float32(bits):
    """float32 values of bfloat16 raw bits (a uint16 array, or integers in 0..65535)."""
    b = np.asarray(bits)
    if b.dtype != np.uint16:
        if b.dtype.kind not in "iu":
            raise TypeError("collfuse: bfloat16 raw bits are integers, got a %s array" % b.dtype)
        b = _fit_ints(b, np.uint16, "bfloat16 raw bits")
    return (b.astype(np.uint32) << 16).view(np.float32)


def float32_to_bf16(a, what="value"):
    """bfloat16 raw bits (uint16) of float values, rounded to nearest even;
    OverflowError for a finite value beyond bfloat16's range."""
    src = np.asarray(a)
    with np.errstate(over="ignore"):
        f = np.ascontiguousarray(src, dtype=np.float32)
    u = f.view(np.uint32)
    rounded = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
    bits = np.where(np.isnan(f), np.uint16(0x7FC0), rounded).astype(np.uint16)
    if src.dtype.kind in "fiu":
        _overflowed(src, bf16_to_float32(bits).reshape(src.shape), what, "bfloat16")
    return bits


class Graph:
    """A collfuse graph: built node by node, or loaded (load(), parse()).

    Builder methods return the new node's name, which later nodes take as an
    operand ("name", or "name:K" for port K of a multi-output node). Attribute
    values are the XML format's (docs/format.md)."""

    def __init__(self, name="graph", world_size=0, context=None, _handle=None):
        self.ctx = context if context is not None else Context()
        self._count = 0
        if _handle is not None:
            self._h = _handle
            return
        h = ctypes.c_void_p()
        self.ctx.check(lib.cf_graph_create(self.ctx._h, _b(name, "graph name"), _cint(world_size, "world_size"),
                                           ctypes.byref(h)))
        self._h = h

    def __del__(self):
        h = getattr(self, "_h", None)
        if h:
            lib.cf_graph_destroy(h)
            self._h = None

    # ---- building ----

    def _name(self, name, op):
        if name is not None:
            return str(name)
        self._count += 1
        return "%s_%d" % (op.lower(), self._count)

    def set_world_size(self, n):
        self.ctx.check(lib.cf_graph_set_world_size(self._h, _cint(n, "world_size")))

    def define_group(self, name, ranks):
        """A communicator group over world ranks [0, 2, ...], or partitioned
        into disjoint parts of one size [[0, 1], [2, 3]] (one communicator
        per part, as XLA's replica_groups)."""
        ranks = list(ranks)
        what = "group %r: rank" % name
        if ranks and isinstance(ranks[0], (list, tuple)):
            flat = [_cint(r, what) for part in ranks for r in part]
            size = len(ranks[0])
            if any(len(part) != size for part in ranks):
                raise ValueError("define_group %r: parts of different sizes" % name)
            arr = (ctypes.c_int * max(1, len(flat)))(*flat)
            self.ctx.check(lib.cf_graph_define_group_parts(self._h, _b(name, "group name"), arr, len(ranks), size))
            return
        arr = (ctypes.c_int * max(1, len(ranks)))(*[_cint(r, what) for r in ranks])
        self.ctx.check(lib.cf_graph_define_group(self._h, _b(name, "group name"), arr, len(ranks)))

    def op(self, op, inputs=(), name=None, **attrs):
        """Add a node of any op with operands and attributes (None skipped)."""
        name = self._name(name, op)
        ins = [_b(i, "operand") for i in inputs]
        kv = [(_b(k, "attribute name"), _b(_attr_text(v), "attribute %s" % k)) for k, v in attrs.items()
              if v is not None]
        arr = (ctypes.c_char_p * max(1, len(ins)))(*ins)
        keys = (ctypes.c_char_p * max(1, len(kv)))(*[k for k, _ in kv])
        vals = (ctypes.c_char_p * max(1, len(kv)))(*[v for _, v in kv])
        self.ctx.check(lib.cf_graph_add_op_attrs(self._h, _b(op, "op"), _b(name, "node name"), arr, len(ins), keys,
                                                 vals, len(kv)))
        return name

    def set_attr(self, node, attr, value):
        self.ctx.check(lib.cf_graph_set_attr(self._h, _b(node, "node name"), _b(attr, "attribute name"),
                                             _b(_attr_text(value), "attribute %s" % attr)))

    def input(self, name, dtype, shape, init=None):
        return self.op("Input", (), name, dtype=dtype, shape=tuple(shape), init=init)

    def constant(self, name, dtype, shape, value):
        """A Constant whose every element is value, which must be exact in
        dtype: an integer in range for an integer dtype, a value that does
        not overflow a float dtype."""
        name = self._name(name, "Constant")
        _constant_fits(name, dtype, value)
        dims, rank = _dims(shape, "shape of '%s'" % name)
        self.ctx.check(lib.cf_graph_add_constant(self._h, _b(name, "node name"), _b(dtype, "dtype"), dims, rank,
                                                 float(value)))
        return name

    def output(self, name, x):
        return self.op("Output", (x,), name)

    def matmul(self, a, b, name=None):
        return self.op("MatMul", (a, b), name)

    def add(self, a, b, name=None):
        return self.op("Add", (a, b), name)

    def sub(self, a, b, name=None):
        return self.op("Sub", (a, b), name)

    def mul(self, a, b, name=None):
        return self.op("Mul", (a, b), name)

    def cast(self, x, dtype, name=None):
        return self.op("Cast", (x,), name, dtype=dtype)

    def reshape(self, x, shape, name=None):
        return self.op("Reshape", (x,), name, shape=tuple(shape))

    def opaque(self, type, inputs, dtype, shape, name=None):
        """An op collfuse does not run (type: its foreign name): one output
        of dtype and shape, its inputs kept as dependencies."""
        name = self._name(name, "Opaque")
        ins = [_b(i, "operand") for i in inputs]
        arr = (ctypes.c_char_p * max(1, len(ins)))(*ins)
        dims, rank = _dims(shape, "shape of '%s'" % name)
        self.ctx.check(lib.cf_graph_add_opaque(self._h, _b(name, "node name"), _b(type, "type"), arr, len(ins),
                                               _b(dtype, "dtype"), dims, rank))
        return name

    def all_reduce(self, x, reduction="sum", group=None, fusion=None, fusion_id=None, name=None):
        return self.op("AllReduce", (x,), name, reduction=reduction, group=group, fusion=fusion, fusion_id=fusion_id)

    def all_gather(self, x, group=None, layout=None, name=None):
        return self.op("AllGather", (x,), name, group=group, layout=layout)

    def reduce_scatter(self, x, reduction="sum", group=None, name=None):
        return self.op("ReduceScatter", (x,), name, reduction=reduction, group=group)

    def all_to_all(self, x, split_dimension=0, concat_dimension=0, group=None, name=None):
        """XLA's AllToAll: x cut into rank_size blocks along split_dimension,
        block j to rank j, the blocks received concatenated in rank order
        along concat_dimension. A list of rank_size operands is the tuple
        form (operand j to rank j; result i, "NAME:i", came from rank i)."""
        if isinstance(x, (list, tuple)):
            return self.op("AllToAll", tuple(x), name, group=group)
        return self.op("AllToAll", (x,), name, split_dimension=split_dimension,
                       concat_dimension=concat_dimension, group=group)

    def collective_permute(self, x, source_target_pairs, group=None, name=None):
        """XLA's CollectivePermute: for each (s, t) in source_target_pairs,
        rank s of the group sends x to rank t; a rank that is no target
        receives zeros."""
        pairs = ",".join("{%d,%d}" % (_cint(s, "source rank"), _cint(t, "target rank"))
                         for s, t in source_target_pairs)
        return self.op("CollectivePermute", (x,), name, source_target_pairs=pairs, group=group)

    # root is required: HcclReduce/HcclBroadcast (like torch.distributed's
    # dst/src) have no default
    def reduce(self, x, root, reduction="sum", group=None, name=None):
        return self.op("Reduce", (x,), name, reduction=reduction, root=root, group=group)

    def broadcast(self, x, root, group=None, name=None):
        return self.op("Broadcast", (x,), name, root=root, group=group)

    def matmul_reduce_scatter(self, x1, x2, world_size, bias=None, group=None, name=None):
        ins = (x1, x2) if bias is None else (x1, x2, bias)
        return self.op("MatmulReduceScatter", ins, name, world_size=world_size, group=group)

    # ---- inspecting ----

    @property
    def node_count(self):
        return lib.cf_graph_node_count(self._h)

    @property
    def collective_count(self):
        return lib.cf_graph_collective_count(self._h)

    def nodes(self):
        """Node names in execution order (insertion order before verification)."""
        return [lib.cf_graph_node_name(self._h, i).decode() for i in range(self.node_count)]

    def collectives(self):
        return [lib.cf_graph_collective_name(self._h, i).decode() for i in range(self.collective_count)]

    def op_of(self, node):
        o = lib.cf_graph_node_op(self._h, _b(node, "node name"))
        return o.decode() if o else None

    def attr(self, node, attr):
        """An attribute as text (defaults applied; "op", "dtype", "shape",
        "bytes" and "members" too, see cf_graph_get_attr)."""
        buf = ctypes.create_string_buffer(1 << 16)
        self.ctx.check(lib.cf_graph_get_attr(self._h, _b(node, "node name"), _b(attr, "attribute name"), buf,
                                             len(buf)))
        return buf.value.decode()

    def _try_attr(self, node, attr):
        try:
            return self.attr(node, attr)
        except CollfuseError:
            return None

    FUSED_MATMUL_OPS = ("MatmulReduceScatter", "MatmulAllReduce", "AllGatherMatmul")

    def buckets(self):
        """Every collective in execution order, as `compile --json` lists
        them: name, op, members (the original collectives it stands for),
        bytes, dtype, reduction (None when the op has none), group; a fused
        MatMul+collective op also has "matmuls", the MatMuls it absorbed."""
        out = []
        for c in self.collectives():
            op, members = self.op_of(c), _split_list(self.attr(c, "members"))
            b = {"name": c, "op": op, "members": members, "bytes": int(self.attr(c, "bytes")),
                 "dtype": self._try_attr(c, "dtype"), "reduction": self._try_attr(c, "reduction"),
                 "group": self._try_attr(c, "group")}
            if op in self.FUSED_MATMUL_OPS:  # members: the MatMuls, then the collective
                b["members"], b["matmuls"] = members[-1:], members[:-1]
            out.append(b)
        return out

    # ---- checking, compiling, writing ----

    def verify(self, target=None):
        self.ctx.check(lib.cf_graph_verify(self._h, _b(target, "target")))

    def run_pipeline(self, pipeline="default", **options):
        """Fuse in place: pipeline "default", "O0" or a comma list of
        passes; options as Graph.compile's."""
        opts = _Options(self.ctx, options)
        self.ctx.check(lib.cf_graph_run_pipeline(self._h, _b(pipeline, "pipeline"), opts._h))

    def compile(self, passes="default", **options):
        """Run the pipeline (passes="default" fuses, "O0" does not, or a
        comma list), then plan: an Executable. options: split, cost,
        target, explain, ranks, deterministic, algo, timeout, seed (the
        command line's meanings). The graph is fused in place and the
        Executable keeps it alive; changing the graph afterwards (another
        compile or run_pipeline, set_attr, a new node) invalidates the
        Executable: its run() then raises CollfuseError (status "usage")."""
        opts = _Options(self.ctx, options)
        if passes is not None:
            self.ctx.check(lib.cf_graph_run_pipeline(self._h, _b(passes, "passes"), opts._h))
        return Executable(self, opts)

    def write_xml(self, path):
        self.ctx.check(lib.cf_graph_write_xml(self._h, _path(path)))

    def write_dot(self, path):
        """Draw into path: .dot, .svg or .png (verify the graph first)."""
        self.ctx.check(lib.cf_graph_write_dot(self._h, _path(path)))

    def to_dot(self, path=None):
        """The graph as DOT text, or drawn into path (.dot, .svg, .png)."""
        if path is not None:
            self.write_dot(path)
            return None
        with tempfile.TemporaryDirectory(prefix="collfuse") as d:
            p = os.path.join(d, "graph.dot")
            self.write_dot(p)
            with open(p) as f:
                return f.read()

    def to_xml(self):
        with tempfile.TemporaryDirectory(prefix="collfuse") as d:
            p = os.path.join(d, "graph.xml")
            self.write_xml(p)
            with open(p) as f:
                return f.read()


class _Options:
    _KEYS = ("passes", "split", "cost", "profile", "target", "explain", "ranks", "deterministic", "algo", "timeout", "seed")

    def __init__(self, ctx, options):
        self.ctx = ctx
        h = ctypes.c_void_p()
        ctx.check(lib.cf_options_create(ctx._h, ctypes.byref(h)))
        self._h = h
        for k, v in options.items():
            if v is None:
                continue
            if isinstance(v, bool):
                v = "1" if v else "0"
            ctx.check(lib.cf_options_set(self._h, _b(k, "option name"), _b(v, "option %s" % k)))

    def __del__(self):
        h = getattr(self, "_h", None)
        if h:
            lib.cf_options_destroy(h)
            self._h = None


class Executable:
    """A compiled graph ready to run on every rank of this process. It keeps
    its Graph alive, and is invalid once the graph changes (the library
    checks the graph's generation): run(), run_rank() and in_place() then
    raise CollfuseError with status "usage". Executables of one Graph may
    run in several threads at once; the runs of one Executable take turns."""

    def __init__(self, graph, opts):
        self.graph = graph  # the C executable holds it too: kept alive here
        self.ctx = graph.ctx
        h = ctypes.c_void_p()
        self.ctx.check(lib.cf_executable_create(graph._h, opts._h, ctypes.byref(h)))
        self._h = h
        self.ranks = lib.cf_executable_ranks(h)
        self.inputs = self._io(_lib.CF_IO_INPUT)
        self.outputs = self._io(_lib.CF_IO_OUTPUT)
        self._views = None  # bucket_views(), once bound
        self._lock = threading.RLock()  # one run (or binding) of this executable at a time

    def __del__(self):
        h = getattr(self, "_h", None)
        if h:
            lib.cf_executable_destroy(h)
            self._h = None

    def _io(self, io):
        out = []
        dims = (ctypes.c_int64 * _lib.MAX_DIMS)()
        for k in range(lib.cf_executable_io_count(self._h, io)):
            rank = lib.cf_executable_io_shape(self._h, io, k, dims)
            out.append((lib.cf_executable_io_name(self._h, io, k).decode(),
                        lib.cf_executable_io_dtype(self._h, io, k).decode(),
                        tuple(dims[i] for i in range(rank))))
        return out

    def in_place(self, name):
        """Whether a run uses the caller's buffer of input or output `name`
        in place (else it copies: into or out of a fused bucket)."""
        self.ctx.check(lib.cf_executable_check(self._h))
        for io, lst in ((_lib.CF_IO_INPUT, self.inputs), (_lib.CF_IO_OUTPUT, self.outputs)):
            for k, (n, _, _) in enumerate(lst):
                if n == name:
                    return bool(lib.cf_executable_io_in_place(self._h, io, k))
        raise KeyError(name)

    @property
    def last_time_ms(self):
        return lib.cf_executable_last_time_ms(self._h)

    @property
    def last_copies(self):
        """(copies, bytes) of whole tensors the last run made: inputs copied
        into the plan's buffers or a bucket, results copied out."""
        b = ctypes.c_size_t()
        n = lib.cf_executable_last_copies(self._h, ctypes.byref(b))
        return n, b.value

    def buckets(self):
        """Each bucket's layout, in schedule order: a dict with its name,
        input_bytes and output_bytes (its two buffers) and inputs / outputs,
        {name: byte offset} of the executable's inputs and outputs that lie
        there."""
        self.ctx.check(lib.cf_executable_check(self._h))
        out = []
        for b in range(lib.cf_executable_bucket_count(self._h)):
            out.append({"name": lib.cf_executable_bucket_name(self._h, b).decode(),
                        "input_bytes": lib.cf_executable_bucket_bytes(self._h, b, _lib.CF_IO_INPUT),
                        "output_bytes": lib.cf_executable_bucket_bytes(self._h, b, _lib.CF_IO_OUTPUT),
                        "inputs": {}, "outputs": {}})
        off = ctypes.c_size_t()
        for io, lst, key in ((_lib.CF_IO_INPUT, self.inputs, "inputs"), (_lib.CF_IO_OUTPUT, self.outputs, "outputs")):
            for k, (n, _, _) in enumerate(lst):
                b = lib.cf_executable_io_bucket(self._h, io, k, ctypes.byref(off))
                if b >= 0:
                    out[b][key][n] = off.value
        return out

    def bucket_views(self):
        """PyTorch DDP's gradient_as_bucket_view: bind the executable's own
        bucket buffers (once; they live as long as the executable and the
        arrays) and return, per rank, {name: numpy array} viewing where each
        input and output that lies in a bucket sits in them. Write the
        gradients into the input views; run() then reads them where they lie
        (a view given as the input, or the input not given at all, is no
        copy and is not made from the seed) and leaves the results in the
        output views, which run() returns for those outputs (overwritten by
        the next run). Other inputs and outputs work as before."""
        with self._lock:
            return self._bind_views()

    def _bind_views(self):
        if self._views is not None:
            return self._views
        self.ctx.check(lib.cf_executable_check(self._h))
        layout = self.buckets()
        dtypes = {n: (d, s) for n, d, s in self.inputs + self.outputs}
        views = []
        for r in range(self.ranks):
            mine = {}
            for b, bk in enumerate(layout):
                for io, key in ((_lib.CF_IO_INPUT, "inputs"), (_lib.CF_IO_OUTPUT, "outputs")):
                    self.ctx.check(lib.cf_executable_bucket_bind(self._h, r, b, io, None))
                    size = bk["input_bytes" if io == _lib.CF_IO_INPUT else "output_bytes"]
                    buf = (ctypes.c_char * max(1, size)).from_address(lib.cf_executable_bucket_buffer(self._h, r, b, io))
                    buf._owner = self  # the buffer is the executable's: keep it alive with every view
                    for n, at in bk[key].items():
                        d, shape = dtypes[n]
                        dt = np.dtype(DTYPES[d])
                        count = int(np.prod(shape, dtype=np.int64))
                        mine[n] = np.frombuffer(buf, dtype=dt, count=count, offset=at).reshape(shape)
            views.append(mine)
        self._views = views
        return views

    def _array(self, name, dtype, shape, value):
        a = np.asarray(value)
        if tuple(a.shape) != tuple(shape):
            raise ValueError("collfuse: input '%s' has shape %s, the graph wants %s" % (name, tuple(a.shape), tuple(shape)))
        what = "input '%s'" % name
        if dtype == "bfloat16" and a.dtype != np.uint16:
            if a.dtype.kind != "f":
                raise TypeError("collfuse: input '%s' is bfloat16: give uint16 raw bits or floats" % name)
            return float32_to_bf16(a, what)
        want = np.dtype(DTYPES[dtype])
        if a.dtype != want and a.dtype.kind != want.kind and not (a.dtype.kind in "iu" and want.kind in "iu"):
            raise TypeError("collfuse: input '%s' is %s, got a %s array" % (name, dtype, a.dtype))
        if a.dtype == want:
            return np.ascontiguousarray(a)
        if want.kind in "iu":
            return _fit_ints(a, want, what)
        return _fit_floats(a, want, what)

    def _inputs(self, per_rank, ranks):
        """Arrays by [rank][k]; None where the input comes from the seed."""
        names = [n for n, _, _ in self.inputs]
        table = [[None] * len(names) for _ in range(ranks)]
        if per_rank is None:
            return table
        if len(per_rank) != ranks:
            raise ValueError("collfuse: %d ranks of inputs for a %d-rank executable" % (len(per_rank), ranks))
        for r, given in enumerate(per_rank):
            if given is None:
                continue
            items = given.items() if isinstance(given, dict) else zip(names, given)
            for n, v in items:
                if n not in names:
                    raise KeyError("collfuse: the graph has no input '%s' (inputs: %s)" % (n, ", ".join(names)))
                k = names.index(n)
                table[r][k] = None if v is None else self._array(n, self.inputs[k][1], self.inputs[k][2], v)
        return table

    def run(self, inputs_per_rank=None, trace=None):
        """Run every rank once. inputs_per_rank: one entry per rank, each a
        dict name -> array or a sequence in input order; an input given for
        no rank is made from the seed (or, after bucket_views(), read where
        it lies in its bucket). trace: a FILE.json path where this run's
        timeline is written as a Chrome trace (`collfuse run --trace`), even
        when the run fails. Returns one dict name -> numpy array per rank."""
        with self._lock:
            if trace is None:
                return self._run(inputs_per_rank)
            self.ctx.check(lib.cf_executable_set_trace(self._h, _b(os.fspath(trace), "trace")))
            try:
                return self._run(inputs_per_rank)
            finally:
                lib.cf_executable_set_trace(self._h, None)

    def _run(self, inputs_per_rank):
        R, ni, no = self.ranks, len(self.inputs), len(self.outputs)
        table = self._inputs(inputs_per_rank, R)
        views = self._views or [{}] * R  # bucket_views(): results stay in the buckets
        outs = [{n: views[r][n] if n in views[r] else np.empty(s, dtype=DTYPES[d]) for n, d, s in self.outputs}
                for r in range(R)]
        in_ptrs = (ctypes.c_void_p * max(1, R * ni))()
        out_ptrs = (ctypes.c_void_p * max(1, R * no))()
        for r in range(R):
            for k in range(ni):
                a = table[r][k]
                in_ptrs[r * ni + k] = None if a is None else a.ctypes.data if a.size else _EMPTY.ctypes.data
            for j, (n, _, _) in enumerate(self.outputs):
                a = outs[r][n]
                out_ptrs[r * no + j] = a.ctypes.data if a.size else None
        self.ctx.check(lib.cf_executable_run(self._h, in_ptrs, out_ptrs))
        return outs

    def run_rank(self, rank, inputs):
        """One rank of a multi-process run under mpirun (the MPI transport):
        every process calls it with its own rank of MPI_COMM_WORLD and its
        inputs only; returns its outputs. collfuse initializes MPI at the
        first call unless the process did (cf_executable_run_rank)."""
        with self._lock:
            return self._run_rank(rank, inputs)

    def _run_rank(self, rank, inputs):
        rank = _cint(rank, "rank")
        if not 0 <= rank < self.ranks:  # the library's usage error
            self.ctx.check(lib.cf_executable_run_rank(self._h, rank, None, None))
        names = [n for n, _, _ in self.inputs]
        table = self._inputs([inputs if r == rank else None for r in range(self.ranks)], self.ranks)[rank]
        outs = {n: np.empty(s, dtype=DTYPES[d]) for n, d, s in self.outputs}
        in_ptrs = (ctypes.c_void_p * max(1, len(names)))(*[a.ctypes.data if a is not None else None for a in table])
        out_ptrs = (ctypes.c_void_p * max(1, len(self.outputs)))(*[outs[n].ctypes.data for n, _, _ in self.outputs])
        self.ctx.check(lib.cf_executable_run_rank(self._h, rank, in_ptrs, out_ptrs))
        return outs


def load(path, context=None):
    """Load a graph file (.xml, .graphml, .hlo, .mlir, .pbtxt), structurally
    verified and inferred."""
    ctx = context if context is not None else Context()
    h = ctypes.c_void_p()
    ctx.check(lib.cf_graph_load(ctx._h, _path(path), ctypes.byref(h)))
    return Graph(context=ctx, _handle=h)


def parse(text, name="graph.xml", context=None):
    """A graph from text; name's extension picks the format."""
    ctx = context if context is not None else Context()
    data = text.encode() if isinstance(text, str) else bytes(text)
    h = ctypes.c_void_p()
    ctx.check(lib.cf_graph_parse(ctx._h, _b(name, "name"), data, len(data), ctypes.byref(h)))
    return Graph(context=ctx, _handle=h)


def compile(graph, passes="default", **options):
    """graph.compile(passes, **options): fuse and plan; an Executable."""
    return graph.compile(passes=passes, **options)
