"""collfuse.distributed: collectives between the processes of a job.

Every process of a job (one rank each, started by torchrun, mpirun or srun)
joins once, then calls the same collectives in the same order on its own
numpy arrays or contiguous CPU torch tensors:

    import collfuse.distributed as cfd
    cfd.init()                        # from the launcher's environment
    cfd.all_reduce(grad, op="mean")   # in place, every rank gets the mean
    cfd.all_gather(out, x)            # out: the ranks' x, concatenated
    cfd.reduce_scatter(out, x)        # out: this rank's block of the sum
    cfd.broadcast(t, src=0)           # in place
    cfd.all_to_all(out, x)            # block j of x to rank j
    cfd.matmul_reduce_scatter(out, x1, x2)  # collfuse's fused op: reduce_scatter(x1 @ x2)
    cfd.barrier()

Buffers: numpy arrays (C-contiguous) or torch tensors (strided, contiguous,
on the CPU) of collfuse's dtypes: int8, uint8, int16, uint16, int32,
uint32, int64, uint64, float16, bfloat16, float32, float64, bool (bool's sum
and max are or, its prod and min and; mean is refused). numpy has no
bfloat16: a uint16 array of raw bits is bfloat16 with dtype="bfloat16". Shapes are the callers': a collective
moves the elements in C order, so all_gather's output is the inputs
concatenated along dimension 0, reduce_scatter's input and all_to_all's
buffers are cut into world-size blocks along it. Anything else (a
non-contiguous view, a CUDA tensor, a complex or bool dtype, an output of
the wrong size, a read-only array written to) raises TypeError or
ValueError before anything is sent.

group: None (every rank), a torch.distributed process group or a list of
job ranks in group order; a smaller group runs on the shm world only, as a
world of its own (its members meet under a name drawn at init).

Each (collective, dtype, element count, reduction or root, group) gets a small
collfuse graph of that one collective, compiled once and cached; a call
runs it on this rank with cf_executable_run_rank, reading the caller's
input where it lies and writing the caller's output (all_gather,
reduce_scatter, all_to_all: no copy here). The world copies what its
transport needs: the shm world copies the caller's input into its shared
memory (which the peers read) before the run and the result out after it,
so all_reduce and broadcast, in place on one buffer, give it as both; MPI
reads the input where it lies and stages what a rank receives, so there
all_reduce and broadcast produce the result into a buffer the cached
executable keeps and copy it into the caller's (one copy of the buffer;
last_copies() counts the last collective's copies).

The world (backend()): the shared-memory world of processes on one host
(the C API's backend "shm", when the library has it: has_shm()) for a job
started by torchrun, srun or mpirun on this host, or joined from torch's
default group; MPI when mpirun started a job across hosts (or
init(backend="mpi") under mpirun). A job no world can join is refused,
naming the launcher and the rank seen, rather than run on something slower.
"""

import atexit
import ctypes
import json
import operator
import os
import shutil
import sys
import tempfile
import threading
import time

import numpy as np

from . import DTYPES, CollfuseError, Context, Graph
from ._lib import RUN_DONE_FN, lib

__all__ = ["init", "has_shm", "is_initialized", "last_copies", "get_rank", "get_world_size", "backend", "destroy",
           "all_reduce", "all_gather", "reduce_scatter", "broadcast", "all_to_all", "barrier", "launcher", "set_trace",
           "matmul_reduce_scatter", "register", "unregister", "registered",
           "write_trace", "trace_span", "tracing", "Work"]

# numpy's dtype of each collfuse dtype (the package's table), bfloat16 aside: numpy
# has none, and a uint16 array is uint16 unless a call says dtype="bfloat16"
_NP = {np.dtype(t): name for name, t in DTYPES.items() if name != "bfloat16"}
_SIZES = {name: np.dtype(t).itemsize for name, t in DTYPES.items()}
_NAMES = ", ".join(DTYPES)
_REDUCTIONS = {"sum": "sum", "mean": "mean", "avg": "mean", "max": "max", "min": "min", "prod": "prod",
               "product": "prod"}


def _torch_dtypes():
    import torch
    return {torch.int8: "int8", torch.uint8: "uint8", torch.int16: "int16", torch.int32: "int32",
            torch.int64: "int64", torch.float16: "float16", torch.bfloat16: "bfloat16",
            torch.float32: "float32", torch.float64: "float64", torch.bool: "bool"}


# ---------------- the job ----------------

def _seen(environ=os.environ):
    """(name, rank, size, local, mpi) of the launcher whose variables environ
    has, as the library's shm world finds it (cf_launcher_find: its table of
    launchers is the one place that knows them), or None."""
    env = None
    if environ is not os.environ:  # the library reads the process's own environment otherwise
        items = [("%s=%s" % kv).encode("utf-8", "surrogateescape") for kv in environ.items()]
        env = (ctypes.c_char_p * (len(items) + 1))(*items, None)
    name = ctypes.c_char_p()
    rank, size, local, mpi = ctypes.c_int(), ctypes.c_int(), ctypes.c_int(), ctypes.c_int()
    ctx = Context()
    if lib.cf_launcher_find(ctx._h, env, ctypes.byref(name), ctypes.byref(rank), ctypes.byref(size),
                            ctypes.byref(local), ctypes.byref(mpi)) != 0:
        raise ValueError("collfuse.distributed: %s" % ctx.errmsg())
    if not name.value:
        return None
    return name.value.decode(), rank.value, size.value, local.value if local.value > 0 else None, bool(mpi.value)


def launcher(environ=os.environ):
    """(name, rank, size) of the launcher whose variables this process has
    (collfuse run's COLLFUSE_RANK, torchrun's RANK/WORLD_SIZE, mpirun's
    OMPI_COMM_WORLD_*, mpiexec's PMI_*, srun's SLURM_PROCID/SLURM_NTASKS,
    the first set: the library's table, cf_launcher_find), or None.
    Integers as given."""
    s = _seen(environ)
    return s[:3] if s else None


def _torch_group_view():
    """(rank, size) of an initialized torch.distributed default group, else None."""
    import sys
    dist = sys.modules.get("torch.distributed")
    if dist is None or not dist.is_available() or not dist.is_initialized():
        return None
    return dist.get_rank(), dist.get_world_size()


class _World:
    def __init__(self, rank, size, backend, seen, deterministic, timeout):
        self.rank, self.size, self.backend, self.seen = rank, size, backend, seen
        self.options = {"passes": "O0", "deterministic": deterministic, "timeout": timeout}
        self.cache = {}
        self.order = []  # cache keys in creation order: destroyed in reverse
        self.lock = threading.Lock()
        self.failed = None
        self.last_copies = (0, 0)
        self.token = None  # shm: the job's groups meet under names made from it
        self.ptr_in = (ctypes.c_void_p * 1)()
        self.ptr_out = (ctypes.c_void_p * 1)()
        self.trace = None  # set_trace's _Trace
        self.runner = None  # cf_runner of the collectives started with async_op (created by the first)
        self.jobs = {}  # started and not ended: id -> what _done needs
        self.next_job = 0
        self.runs_end = 0  # when tracing: when the runner's last run ended (time.monotonic_ns)


_world = None


def _describe(seen):
    return "%s (rank %d of %d)" % seen if seen[2] >= 0 else "%s (rank %d)" % seen[:2]


def has_shm():
    """Whether the loaded library has the shared-memory world of processes
    (the C API's option backend=shm)."""
    o = ctypes.c_void_p()
    ctx = Context()
    ctx.check(lib.cf_options_create(ctx._h, ctypes.byref(o)))
    try:
        return lib.cf_options_set(o, b"backend", b"shm") == 0
    finally:
        lib.cf_options_destroy(o)


def _choose(backend, seen, local, mpi):
    """The world for this job: "shm" or "mpi", or RuntimeError saying why none."""
    if backend not in (None, "mpi", "shm"):
        raise ValueError("collfuse.distributed: backend %r: 'shm' or 'mpi' (None: the one the job allows)"
                         % (backend,))
    shm = has_shm()
    if backend == "mpi" and not mpi:
        raise RuntimeError("collfuse.distributed: backend 'mpi' needs a job that mpirun started; this one was "
                           "started by %s" % _describe(seen))
    if backend == "shm" and not shm:
        raise RuntimeError("collfuse.distributed: backend 'shm': this libcollfuse has no shared-memory world")
    if backend:
        return backend
    if mpi:
        # on one host the shm world (single copy) beats MPI's shared memory; across hosts, MPI
        return "shm" if shm and local == seen[2] else "mpi"
    if shm and (local is None or local == seen[2]):
        return "shm"
    if shm:  # the shm world is one host's; only mpirun's jobs span hosts through MPI
        raise RuntimeError(
            "collfuse.distributed: this job was started by %s with %d of its %d ranks on this host: the "
            "shared-memory world needs every rank on one host, and MPI needs mpirun to start the job: "
            "not falling back to anything slower" % (_describe(seen), local, seen[2]))
    raise RuntimeError(
        "collfuse.distributed: this job was started by %s; collfuse joins it through its shared-memory "
        "world, which this libcollfuse lacks, or through MPI when mpirun starts the job: not falling "
        "back to anything slower" % _describe(seen))


def _torch_job():
    """A job name every rank of torch's default group agrees on, through
    its store (rank 0 draws it), or None without one."""
    import secrets
    import sys
    dist = sys.modules.get("torch.distributed")
    try:
        store = dist.distributed_c10d._get_default_store()
    except Exception:
        return None
    if dist.get_rank() == 0:
        store.set("collfuse.distributed.job", "torch-" + secrets.token_hex(8))
    return store.get("collfuse.distributed.job").decode()


def init(backend=None, deterministic=False, timeout=None, environ=os.environ):
    """Join the job: rank and size from the launcher's environment (mpirun,
    torchrun, srun) or an initialized torch.distributed default group (they
    must agree). backend: None (the one the job allows: the shared-memory
    world when every rank is on this host and the library has it, MPI when
    mpirun started a job across hosts), "shm" or "mpi". deterministic:
    reductions in a fixed order (bitwise the same results run to run).
    timeout: seconds any wait may take (the library's default otherwise).
    environ: the variables that say rank and size (os.environ; the worlds
    themselves read the process's own). A second call does nothing."""
    global _world
    if _world is not None:
        return
    full = _seen(environ)
    seen, local, mpi = (full[:3], full[3], full[4]) if full else (None, None, False)
    tv = _torch_group_view()
    if seen is None and tv is None:
        raise RuntimeError("collfuse.distributed: no job to join: no launcher's rank and size variables "
                           "are set (launcher() says which it reads) and torch.distributed is not "
                           "initialized; start the processes with mpirun, torchrun or srun")
    if seen is None:
        seen = ("torch.distributed", tv[0], tv[1])
    elif tv is not None and (tv[0], tv[1]) != (seen[1], seen[2]):
        raise RuntimeError("collfuse.distributed: %s says %s, but torch.distributed's default group "
                           "is rank %d of %d" % (seen[0], _describe(seen), tv[0], tv[1]))
    rank, size = seen[1], seen[2]
    if size < 1 or not 0 <= rank < size:
        raise ValueError("collfuse.distributed: %s: a rank out of range" % _describe(seen))
    chosen = _choose(backend, seen, local, mpi)
    w = _World(rank, size, chosen, seen, deterministic, timeout)
    if chosen == "shm":
        w.options["backend"] = "shm"
        if seen[0] == "torch.distributed":  # no launcher's job name: agree on one through the store
            w.options["job"] = _torch_job()
        elif environ is not os.environ:  # the library reads the process's: name the job given here
            w.options["job"] = "environ:%s:%d" % (seen[0], size)
    _world = w
    try:
        barrier()  # joins the world (under MPI the first executable initializes it and is kept to the end)
        if chosen == "shm":  # a name for the groups' worlds, drawn by rank 0
            tok = np.frombuffer(os.urandom(8), dtype=np.uint8).copy()
            broadcast(tok, src=0)
            w.token = "cfd-" + tok.tobytes().hex()
    except BaseException:
        _world = None
        raise


def is_initialized():
    return _world is not None


def _need():
    if _world is None:
        raise RuntimeError("collfuse.distributed: not initialized: call collfuse.distributed.init() first")
    return _world


def last_copies():
    """(copies, bytes) of whole buffers the last collective made on this
    rank: the world's (into and out of its memory) and the copy of an
    in-place result into the caller's buffer; (0, 0) before the first."""
    return _need().last_copies


def get_rank():
    return _need().rank


def get_world_size():
    return _need().size


def backend():
    return _need().backend


def destroy():
    """Leave the job: the cached executables are destroyed, newest first
    (the oldest joined MPI, and its destruction ends MPI when collfuse
    started it). Every rank calls it, or none (it runs at exit)."""
    global _world
    w, _world = _world, None
    if w is None:
        return
    if w.trace is not None:
        t, w.trace = w.trace, None
        t.close()
    if w.runner is not None:  # its runs end first (their executables are still here)
        lib.cf_runner_destroy(w.runner)
        w.runner = None
    with w.lock:
        for key in reversed(w.order):
            w.cache.pop(key, None)
        w.order = []
    for ptr in list(_regions):
        _unregister_ptr(ptr)


atexit.register(destroy)


# ---------------- registered memory (the shm world) ----------------

_regions = {}  # storage data_ptr -> the storage, kept alive while the library has it registered
_regions_ctx = None


def _storage_ptr(tensor):
    return tensor.storage().data_ptr()


def register(tensor):
    """Let the shm world use tensor's memory where it lies: a collective on
    a buffer of registered memory makes no copy (last_copies() counts none
    for it; all_reduce runs in place there) instead of copying the buffer
    into the world's memory and back. tensor: a CPU torch tensor; its whole
    storage is registered, moved first into shared memory in place
    (share_memory_(): the same storage, so every view of it, a DDP
    bucket's gradients included, follows; the data are kept) unless it is
    shared already. The peers open that memory through /proc (the same
    user, with ptrace read access: where the ranks cannot, as under Yama's
    ptrace_scope 2, it is copied like any other memory, and the first such
    collective says why on stderr, once) and map it. Returns True, or False where there is nothing to do
    (the world is not shm, or the storage is empty). Keep the tensor
    registered while collectives use it; register(t) again after its
    storage changed, unregister(t) when done (destroy() unregisters all)."""
    import torch
    if not isinstance(tensor, torch.Tensor) or tensor.device.type != "cpu" or tensor.layout != torch.strided:
        raise TypeError("collfuse.distributed.register: give a dense CPU torch tensor, not %s"
                        % type(tensor).__name__)
    if _need().backend != "shm" or tensor.storage().nbytes() == 0:
        return False
    global _regions_ctx
    if not tensor.storage().is_shared():
        tensor.share_memory_()
    st = tensor.storage()
    ptr = st.data_ptr()
    if ptr in _regions:
        return True
    try:
        fd = st._share_fd_cpu_()[0]  # the open descriptor of its (unlinked) file
    except RuntimeError as e:
        raise ValueError("collfuse.distributed.register: the tensor's storage is shared by name, not by "
                         "descriptor (torch.multiprocessing's file_system strategy?): %s" % e) from None
    if _regions_ctx is None:
        _regions_ctx = Context()
    _regions_ctx.check(lib.cf_shm_register(_regions_ctx._h, ptr, st.nbytes(), fd))
    _regions[ptr] = st
    return True


# From this many bytes _shared_zeros makes its memory in 2 MiB pages
# (cf_shm_memory): the peers then hold none of its pages between
# collectives (half of it each on 2 ranks) at the cost of rounding it up to
# 2 MiB pages (at most 2 MiB more of its owner's); below, that costs more
# than it saves.
_HUGE_MIN = 4 << 20


def _shared_zeros(numel, dtype):
    """A new 1-D tensor of zeros made in shared memory from the start (a
    fresh file: no page is touched until written), for register(): no
    anonymous copy to move there and free, so nothing left behind in
    malloc's heap. From _HUGE_MIN bytes in the library's shared memory of
    2 MiB pages (cf_shm_memory), else torch's own. None unless torch
    shares storages by descriptor."""
    import torch
    import torch.multiprocessing as tmp
    if tmp.get_sharing_strategy() != "file_descriptor":
        return None
    itemsize = torch.empty(0, dtype=dtype).element_size()
    nbytes = max(1, numel) * itemsize
    try:  # torch 1.13's storage API; another torch: moved in by register() instead
        st = None
        if nbytes >= _HUGE_MIN:
            global _regions_ctx
            if _regions_ctx is None:
                _regions_ctx = Context()
            fd = ctypes.c_int(-1)
            if lib.cf_shm_memory(_regions_ctx._h, nbytes, ctypes.byref(fd)) == 0:
                try:  # torch maps its own duplicate of the descriptor (and keeps it)
                    st = torch.UntypedStorage._new_shared_fd_cpu(fd.value, nbytes)
                finally:
                    os.close(fd.value)
        if st is None:
            st = torch.UntypedStorage._new_shared(nbytes)
        return torch.empty(0, dtype=dtype).set_(torch.storage.TypedStorage(wrap_storage=st, dtype=dtype))[:numel]
    except (AttributeError, TypeError):
        return None


def _malloc_trim():
    """glibc's malloc hands its free memory back to the kernel (malloc_trim:
    the heap's free pages anywhere in it, not only at its top); nothing
    elsewhere. After a buffer moved into shared memory (register), and
    after compile_step's trace."""
    import platform
    if platform.libc_ver()[0] == "glibc":
        trim = getattr(ctypes.CDLL(None), "malloc_trim", None)
        if trim is not None:
            trim(0)


def _unregister_ptr(ptr):
    if _regions.pop(ptr, None) is not None and _regions_ctx is not None:
        _regions_ctx.check(lib.cf_shm_unregister(_regions_ctx._h, ptr))


def unregister(tensor):
    """Undo register(tensor) (nothing when it is not registered); its
    memory stays shared. Only between collectives that use it."""
    _unregister_ptr(_storage_ptr(tensor))


def registered(tensor):
    """Whether tensor's storage is registered (register)."""
    return _storage_ptr(tensor) in _regions


# ---------------- the trace ----------------

# this module's lanes in a rank's trace, after the library's compute (0)
# and collectives (1): the thread that calls the DDP hooks (the backward
# pass) and the one that runs the collectives (collfuse's runner thread)
LANE_HOOK, LANE_CALLS = 2, 3
_LANE_NAMES = {0: "compute", 1: "collectives", LANE_HOOK: "DDP hook (backward pass)",
               LANE_CALLS: "collfuse.distributed calls"}
_TRACE_CAP = 1 << 20  # events kept; more are counted as dropped


class _Trace:
    """What set_trace records on this rank: this module's spans and the
    library's timeline of every collective run meanwhile (each run writes
    its own, which is read back and moved onto this trace's clock, the
    library's CLOCK_MONOTONIC, as time.monotonic_ns reads it)."""

    def __init__(self, path, rank, size):
        self.path = "%s.rank%d.json" % (path[:-5] if path.endswith(".json") else path, rank)
        self.rank, self.size = rank, size
        self.t0 = time.monotonic_ns()
        self.events = []
        self.dropped = 0
        self.failed = None
        self.lock = threading.Lock()
        self.wlock = threading.Lock()  # write()'s
        self.tmpdir = tempfile.mkdtemp(prefix="collfuse-trace.")
        self.run_path = os.path.join(self.tmpdir, "run.json")  # each run's, as the library writes it

    def _put(self, e):
        with self.lock:
            if len(self.events) < _TRACE_CAP:
                self.events.append(e)
            else:
                self.dropped += 1

    def span(self, lane, name, t0_ns, t1_ns, cat, args=None):
        t0_ns = max(t0_ns, self.t0)  # a span that began before the trace did (the call that started it)
        self._put({"name": name, "cat": cat, "ph": "X", "pid": self.rank, "tid": lane,
                   "ts": round((t0_ns - self.t0) / 1e3, 3), "dur": round(max(0, t1_ns - t0_ns) / 1e3, 3),
                   "args": args or {}})

    def merge_run(self, me, failed):
        """The library's trace of the run just made (this rank: me of its
        executable's ranks) onto this trace: its ranks' lanes to this rank's,
        its driver to the job's driver (pid: the job's size)."""
        path = os.path.join(self.tmpdir, "run.rank%d.json" % me)
        try:
            with open(path) as f:
                d = json.load(f)
            os.unlink(path)
        except (OSError, ValueError):
            return
        other = d.get("otherData", {})
        shift = other.get("start_us", self.t0 / 1e3) - self.t0 / 1e3
        driver = other.get("ranks")
        with self.lock:
            self.dropped += int(other.get("dropped_events", 0))
        if failed and other.get("failed"):
            self.failed = other["failed"]
        for e in d.get("traceEvents", ()):
            if e.get("ph") != "X":
                continue
            e["pid"] = self.size if e.get("pid") == driver else self.rank
            e["ts"] = round(e["ts"] + shift, 3)
            self._put(e)

    def write(self):
        # one write at a time, each its snapshot: the last file renamed into
        # place holds the newest events (write_trace on the runner thread and
        # set_trace(None) on the main thread may both write)
        with self.wlock:
            self._write()

    def _write(self):
        with self.lock:
            evs = sorted(self.events, key=lambda e: (e["pid"], e["tid"], e["ts"], -e["dur"]))
            meta = [{"name": "process_name", "ph": "M", "pid": self.rank, "args": {"name": "rank %d" % self.rank}}]
            meta += [{"name": "thread_name", "ph": "M", "pid": self.rank, "tid": k, "args": {"name": n}}
                     for k, n in sorted(_LANE_NAMES.items())]
            meta += [{"name": "process_name", "ph": "M", "pid": self.size, "args": {"name": "driver"}},
                     {"name": "thread_name", "ph": "M", "pid": self.size, "tid": 0, "args": {"name": "driver"}}]
            other = {"ranks": self.size, "rank": self.rank, "dropped_events": self.dropped,
                     "events_per_lane": 65536, "clock": "CLOCK_MONOTONIC", "start_us": round(self.t0 / 1e3, 3)}
            if self.failed:
                other["failed"] = self.failed
            doc = {"traceEvents": meta + evs, "displayTimeUnit": "ms", "otherData": other}
        # a name of this write's own: two writes at once (write_trace and
        # set_trace(None) on two threads) must not rename each other's file
        fd, tmp = tempfile.mkstemp(prefix=os.path.basename(self.path) + ".", suffix=".tmp",
                                   dir=os.path.dirname(self.path) or ".")
        try:
            with os.fdopen(fd, "w") as f:
                json.dump(doc, f, separators=(",", ":"))
            os.replace(tmp, self.path)
        except BaseException:
            try:
                os.unlink(tmp)
            except OSError:
                pass
            raise

    def close(self):
        try:
            self.write()
        finally:
            shutil.rmtree(self.tmpdir, ignore_errors=True)


def set_trace(path):
    """Record a timeline of this rank's collectives from now on, written as
    a Chrome trace (the format of `collfuse run --trace`: Perfetto and
    chrome://tracing draw it) to FILE.rank<R>.json for path FILE.json, each
    rank its own: the library's lanes of every run (compute 0, collectives
    1: copies, the collective with its algorithm's phases and the
    transport's waits; the driver's plan building and kernels), and this
    module's: each call (lane 3, with "compile" when it made its executable)
    and collfuse.torch's DDP buckets (lane 2: each hook call on the backward
    pass; lane 3: each bucket from its turn on the runner thread to its future's
    completion, args index, bytes, queued_ms). The file is written by
    write_trace(), set_trace(None) (which stops recording), a later
    set_trace and destroy() (at exit). path None: stop."""
    w = _need()
    with w.lock:
        old, w.trace = w.trace, None
        if path is not None:
            w.trace = _Trace(os.fspath(path), w.rank, w.size)
    if old is not None:
        old.close()


def write_trace():
    """Write what set_trace has recorded so far (recording goes on)."""
    w = _need()
    if w.trace is not None:
        w.trace.write()


def trace_span(lane, name, t0_ns, t1_ns, cat="hook", args=None):
    """A span of time.monotonic_ns() times on lane of this rank's trace
    (LANE_HOOK, LANE_CALLS), when set_trace records; else nothing."""
    t = _world.trace if _world is not None else None
    if t is not None:
        t.span(lane, name, t0_ns, t1_ns, cat, args)


def tracing():
    """Whether set_trace is recording."""
    return _world is not None and _world.trace is not None


# ---------------- buffers ----------------

class _Buf:
    __slots__ = ("ptr", "dtype", "count", "nbytes")

    def __init__(self, ptr, dtype, count):
        self.ptr, self.dtype, self.count = ptr, dtype, count
        self.nbytes = count * _SIZES[dtype]


def _buf(x, what, write, dtype=None):
    """The buffer of x (a numpy array or torch tensor), checked; dtype
    "bfloat16" takes a numpy uint16 array as bfloat16 raw bits."""
    if dtype not in (None, "bfloat16"):
        raise ValueError("collfuse.distributed: dtype=%r: only 'bfloat16' is given this way (for numpy uint16 "
                         "arrays of raw bits); other dtypes come from the buffer" % (dtype,))
    if isinstance(x, np.ndarray):
        dt = _NP.get(x.dtype)
        if dt is None:
            raise TypeError("collfuse.distributed: %s is a numpy %s array; collfuse's dtypes are %s"
                            % (what, x.dtype, _NAMES))
        if dtype == "bfloat16":
            if dt != "uint16":
                raise TypeError("collfuse.distributed: %s: dtype='bfloat16' wants a uint16 array of raw bits, "
                                "got %s" % (what, x.dtype))
            dt = "bfloat16"
        if not x.flags.c_contiguous:
            raise ValueError("collfuse.distributed: %s is not C-contiguous (a strided view): "
                             "give np.ascontiguousarray(...) and copy the result back" % what)
        if write and not x.flags.writeable:
            raise ValueError("collfuse.distributed: %s is read-only, and the collective writes it" % what)
        return _Buf(x.ctypes.data, dt, x.size)
    mod = type(x).__module__ or ""
    if mod.startswith("torch"):
        import torch
        if isinstance(x, torch.Tensor):
            if x.layout != torch.strided:
                raise TypeError("collfuse.distributed: %s is a %s tensor; only dense (strided) tensors "
                                "are supported" % (what, x.layout))
            if x.device.type != "cpu":
                raise ValueError("collfuse.distributed: %s is on device '%s'; collfuse's process world "
                                 "takes CPU tensors (move it with .cpu())" % (what, x.device))
            dt = _torch_dtypes().get(x.dtype)
            if dt is None:
                raise TypeError("collfuse.distributed: %s is %s; collfuse's dtypes are %s" % (what, x.dtype, _NAMES))
            if dtype and dt != dtype:
                raise TypeError("collfuse.distributed: %s is %s, not %s" % (what, x.dtype, dtype))
            if not x.is_contiguous():
                raise ValueError("collfuse.distributed: %s is not contiguous (strides %s for shape %s): "
                                 "give .contiguous() and copy the result back" % (what, x.stride(), tuple(x.shape)))
            if write and x.requires_grad and x.is_leaf and torch.is_grad_enabled():
                raise ValueError("collfuse.distributed: %s is a leaf that requires grad; write it under "
                                 "torch.no_grad() or pass .detach()" % what)
            return _Buf(x.data_ptr(), dt, x.numel())
    raise TypeError("collfuse.distributed: %s is a %s; give a numpy array or a CPU torch tensor"
                    % (what, type(x).__name__))


def _same_dtype(a, b, what):
    if a.dtype != b.dtype:
        raise TypeError("collfuse.distributed: %s: the output is %s but the input is %s" % (what, b.dtype, a.dtype))


def _reduction(op):
    # torch.distributed.ReduceOp.SUM and friends: torch 1.13's ReduceOp
    # objects carry their RedOpType (which has the name) as .op
    name = getattr(op, "name", None) or getattr(getattr(op, "op", None), "name", None)
    if name is None:
        rep = str(op)
        name = rep.split(".")[-1] if rep.startswith("ReduceOp.") else rep
    red = _REDUCTIONS.get(str(name).lower())
    if red is None:
        raise ValueError("collfuse.distributed: reduction %s: collfuse reduces with sum, mean (avg), max, min "
                         "or prod (not torch's BAND, BOR, BXOR or PREMUL_SUM)"
                         % (name if isinstance(name, str) else repr(op)))
    return red


class _Grp:
    """Where a call runs: the members' job ranks (None: every rank), its
    size and this rank's position in it."""
    __slots__ = ("members", "size", "me")

    def __init__(self, members, size, me):
        self.members, self.size, self.me = members, size, me


def _members(group):
    """A group's job ranks in group order: a torch.distributed ProcessGroup
    (torch's own table of it) or a list of ranks."""
    if isinstance(group, (list, tuple)):
        return [int(r) for r in group]
    import sys
    c10d = sys.modules.get("torch.distributed.distributed_c10d")
    table = getattr(c10d, "_pg_group_ranks", None) if c10d else None
    if table is not None and group in table:
        return [g for g, _ in sorted(table[group].items(), key=lambda kv: kv[1])]
    raise TypeError("collfuse.distributed: group %r: give a torch.distributed process group, a list of ranks "
                    "or None (every rank)" % (group,))


def _enter(group):
    """The world and where a call on group runs, checked."""
    w = _need()
    if group is None:
        return w, _Grp(None, w.size, w.rank)
    ranks = _members(group)
    if sorted(ranks) == list(range(w.size)) and ranks == sorted(ranks):
        return w, _Grp(None, w.size, w.rank)  # every rank, in order: the job itself
    if len(set(ranks)) != len(ranks) or any(not 0 <= r < w.size for r in ranks):
        raise ValueError("collfuse.distributed: group %s: ranks of a %d-rank job, each once" % (ranks, w.size))
    if w.rank not in ranks:
        raise ValueError("collfuse.distributed: rank %d is not in group %s" % (w.rank, ranks))
    if w.backend != "shm":
        raise ValueError("collfuse.distributed: group %s: groups smaller than the job run on the shm world "
                         "only (this job is on %s): pass group=None" % (ranks, w.backend))
    return w, _Grp(tuple(ranks), len(ranks), ranks.index(w.rank))


# ---------------- collectives ----------------

def _warn(level, msg):
    """The log sink of this module's executables: the library's warnings
    (a slower path it had to take, e.g. registered memory the peers cannot
    open, copied instead) on stderr, as the CLI prints them."""
    if level <= 1:
        sys.stderr.write("collfuse: %s\n" % msg)
        sys.stderr.flush()


class _Coll:
    """One collective's executable on this rank, and the output buffer it
    keeps for the in-place ones."""

    def __init__(self, w, grp, kind, dtype, count, arg):
        g = Graph("cfd_%s" % kind, world_size=grp.size, context=Context(log=_warn))
        if kind == "all_gather":
            g.input("x", dtype, (count,))
            y = g.all_gather("x")
        elif kind == "reduce_scatter":
            g.input("x", dtype, (count * grp.size,))
            y = g.reduce_scatter("x", reduction=arg)
        elif kind == "all_to_all":
            g.input("x", dtype, (count,))
            y = g.all_to_all("x")
        elif kind == "broadcast":
            g.input("x", dtype, (count,))
            y = g.broadcast("x", root=arg)
        else:
            g.input("x", dtype, (count,))
            y = g.all_reduce("x", reduction=arg)
        g.output("y", y)
        options = dict(w.options)
        if grp.members:  # the group's own world: its members meet under a name of their own
            options["job"] = "%s.g%s" % (w.token, "-".join(map(str, grp.members)))
        self.exe = g.compile(**options)
        self.me = grp.me
        self.traced = None  # where the library writes this executable's runs' timelines
        self.own = None
        if kind in ("all_reduce", "broadcast") and w.backend != "shm":
            self.own = np.empty(count * _SIZES[dtype] + 64, dtype=np.uint8)
            # 64-byte aligned start, as the library's own buffers
            self.own_ptr = (self.own.ctypes.data + 63) & ~63

    def run(self, w, inp, out):
        w.ptr_in[0], w.ptr_out[0] = inp, out
        self.exe.ctx.check(lib.cf_executable_run_rank(self.exe._h, self.me, w.ptr_in, w.ptr_out))


def _ready(w, grp, kind, dtype, count, arg):
    """The cached executable of the collective (compiled on first use), its
    trace file set; (executable, trace, t0). Under w.lock."""
    if w.failed:
        raise CollfuseError(3, "collfuse.distributed: an earlier collective failed (%s); the job's "
                               "collfuse world has stopped" % w.failed)
    t = w.trace
    t0 = time.monotonic_ns() if t else 0
    key = (kind, dtype, count, arg, grp.members)
    c = w.cache.get(key)
    if c is None:
        c = w.cache[key] = _Coll(w, grp, kind, dtype, count, arg)
        w.order.append(key)
        if t:
            t.span(LANE_CALLS, "compile", t0, time.monotonic_ns(), "compile", {"collective": kind})
    if c.traced != (t.run_path if t else None):  # the library writes each run's timeline there
        if w.runner is not None:
            lib.cf_runner_wait(w.runner)  # its runs of c write where they were told
        c.exe.ctx.check(lib.cf_executable_set_trace(c.exe._h, t.run_path.encode() if t else None))
        c.traced = t.run_path if t else None
    return c, t, t0


def _ended(w, c, t, t0, kind, dtype, count, grp, in_place, out, err):
    """A run of c has ended (err: its CollfuseError, or None): the MPI
    world's in-place copy out, the trace, last_copies."""
    if err is not None:
        w.failed = str(err)
        if t:
            t.merge_run(c.me, True)
            t.span(LANE_CALLS, kind, t0, time.monotonic_ns(), "collective",
                   {"dtype": dtype, "bytes": count * _SIZES[dtype], "failed": str(err)})
        return
    if in_place and w.backend != "shm":
        ctypes.memmove(out, c.own_ptr, count * _SIZES[dtype])
    if t:
        t.merge_run(c.me, False)
        t.span(LANE_CALLS, kind, t0, time.monotonic_ns(), "collective",
               {"dtype": dtype, "bytes": count * _SIZES[dtype], "group": list(grp.members or ())})
    n, b = c.exe.last_copies
    if in_place and w.backend != "shm":
        n, b = n + 1, b + count * _SIZES[dtype]
    w.last_copies = (n, b)


def _run(w, grp, kind, dtype, count, arg, inp, out, in_place):
    """Run collective kind on this rank of grp; in_place: the result goes
    to the executable's own buffer, then is copied to out (MPI; the shm
    world copies the inputs into its memory before the run and the results
    out after it, so one buffer may be both: collfuse.h)."""
    with w.lock:
        c, t, t0 = _ready(w, grp, kind, dtype, count, arg)
        if w.runner is not None:
            lib.cf_runner_wait(w.runner)  # after the runs started before, in order
        dst = c.own_ptr if in_place and w.backend != "shm" else out
        try:
            c.run(w, inp, dst)
        except CollfuseError as e:
            _ended(w, c, t, t0, kind, dtype, count, grp, in_place, out, e)
            raise
        _ended(w, c, t, t0, kind, dtype, count, grp, in_place, out, None)


class Work:
    """A collective started with async_op=True: it runs on this process's
    collfuse thread (the world's cf_runner: collectives run in the order
    they were started, which must be the same on every rank) while the
    caller goes on. wait() returns once it has ended (and raises its
    CollfuseError), is_completed() says whether it has; then(fn) calls
    fn(work) once it has ended, on collfuse's thread (at once if it
    already has): keep it short, the next collective waits for it. The
    buffers must stay untouched until it has ended."""

    def __init__(self, result):
        self._result = result
        self._event = threading.Event()
        self._err = None
        self._then = []
        self._lock = threading.Lock()
        self.began_ns = 0  # when tracing: when its run began (time.monotonic_ns)

    def _end(self, err):
        with self._lock:
            self._err = err
            self._event.set()
            fns, self._then = self._then, []
        for fn in fns:
            fn(self)

    def then(self, fn):
        with self._lock:
            if not self._event.is_set():
                self._then.append(fn)
                return
        fn(self)

    def is_completed(self):
        return self._event.is_set()

    def wait(self):
        self._event.wait()
        if self._err is not None:
            raise self._err
        return self._result

    def exception(self):
        """The collective's CollfuseError once it has ended, or None."""
        return self._err

    def result(self):
        """The buffer the collective wrote (what wait() returns)."""
        return self.wait()

    def get_future(self):
        """A torch.futures.Future completed, on collfuse's thread, once the
        collective has ended, as torch's Work.get_future(): its value is a
        list holding the buffer (DDP comm hooks written for torch's
        collectives end with .then(lambda f: f.value()[0])), or the
        CollfuseError, raised as the future's error (which DDP raises)."""
        import torch
        fut = torch.futures.Future()
        done = fut.then(_future_value)
        self.then(fut.set_result)
        return done


def _future_value(fut):
    """get_future's then(): the Work's buffer in a list, or its error raised
    (a callback's exception completes the future with an error; one set
    with set_exception is a value DDP cannot cast)."""
    work = fut.value()
    if work._err is not None:
        raise work._err
    return [work._result]


def _done(user, status, message):
    """cf_run_done_fn: a started collective has ended (on collfuse's thread)."""
    w = _world_of_runs
    job = w.jobs.pop(user)
    c, t, t0, kind, dtype, count, grp, in_place, out, work, hold = job
    err = None
    if status:
        err = CollfuseError(status, message.decode("utf-8", "replace") if message else None)
    # its run began when the one before it ended (the runner runs them one by one)
    work.began_ns = max(t0, w.runs_end) if t else 0
    try:
        _ended(w, c, t, work.began_ns, kind, dtype, count, grp, in_place, out, err)
    finally:
        work._end(err)
        w.runs_end = time.monotonic_ns() if t else 0


_done_c = RUN_DONE_FN(_done)  # kept alive: the library calls it until the runner is gone
_world_of_runs = None  # the world whose runner calls _done


def _start(w, grp, kind, dtype, count, arg, inp, out, in_place, result, hold):
    """Start collective kind on the world's runner; a Work. hold: what must
    stay alive until it has ended (the caller's buffers)."""
    global _world_of_runs
    with w.lock:
        c, t, t0 = _ready(w, grp, kind, dtype, count, arg)
        if w.runner is None:
            h = ctypes.c_void_p()
            c.exe.ctx.check(lib.cf_runner_create(c.exe.ctx._h, ctypes.byref(h)))
            w.runner = h
            _world_of_runs = w
        work = Work(result)
        w.next_job += 1
        jid = w.next_job
        w.jobs[jid] = (c, t, t0, kind, dtype, count, grp, in_place, out, work, hold)
        w.ptr_in[0] = inp
        w.ptr_out[0] = c.own_ptr if in_place and w.backend != "shm" else out
        st = lib.cf_executable_start_rank(c.exe._h, w.runner, c.me, w.ptr_in, w.ptr_out, _done_c, jid)
        if st:
            del w.jobs[jid]
            c.exe.ctx.check(st)
    return work


def all_reduce(tensor, op="sum", group=None, dtype=None, async_op=False):
    """Reduce tensor over the group's ranks (None: every rank), in place:
    afterwards each one's tensor holds the reduction (op: "sum",
    "mean"/"avg", "max", "min", "prod", or a torch.distributed.ReduceOp:
    SUM, AVG, MAX, MIN, PRODUCT; BAND, BOR, BXOR and PREMUL_SUM raise).
    async_op=True: start it on collfuse's thread and return a Work at once
    (its wait() returns tensor); the tensor must stay untouched until then.
    A later call without async_op runs after the started ones."""
    w, grp = _enter(group)
    red = _reduction(op)
    b = _buf(tensor, "all_reduce's tensor", True, dtype)
    return _go(w, grp, "all_reduce", b.dtype, b.count, red, b.ptr, b.ptr, True, tensor, (tensor,), async_op)


def _go(w, grp, kind, dtype, count, arg, inp, out, in_place, result, hold, async_op):
    """Run the checked collective kind (count elements: none, nothing to
    do) and return result, or with async_op start it and return its
    Work (hold: the buffers kept alive until it has ended)."""
    if async_op:
        if not count:
            work = Work(result)
            work._end(None)
            return work
        return _start(w, grp, kind, dtype, count, arg, inp, out, in_place, result, hold)
    if count:
        _run(w, grp, kind, dtype, count, arg, inp, out, in_place)
    return result


def broadcast(tensor, src, group=None, dtype=None, async_op=False):
    """Rank src's tensor (src: a job rank, as torch's) to the group's
    ranks, in place. async_op: as all_reduce's."""
    w, grp = _enter(group)
    ranks = grp.members or range(w.size)
    try:  # an integer (numpy's and torch's integer scalars too), not a bool
        rank = None if isinstance(src, bool) else operator.index(src)
    except TypeError:
        rank = None
    if rank is None or rank not in ranks:
        raise ValueError("collfuse.distributed: broadcast src %r is not a rank of %s" % (
            src, "this %d-rank job" % w.size if grp.members is None else "group %s" % list(grp.members)))
    src = rank
    b = _buf(tensor, "broadcast's tensor", True, dtype)
    return _go(w, grp, "broadcast", b.dtype, b.count, list(ranks).index(src), b.ptr, b.ptr, True, tensor,
               (tensor,), async_op)


def _pair(output, input, what, dtype):
    o = _buf(output, "%s's output" % what, True, dtype)
    i = _buf(input, "%s's input" % what, False, dtype)
    _same_dtype(i, o, what)
    if o.ptr < i.ptr + i.nbytes and i.ptr < o.ptr + o.nbytes and o.nbytes and i.nbytes:
        raise ValueError("collfuse.distributed: %s: the output overlaps the input (give separate buffers)" % what)
    return o, i


def _world_times(grp, what, big, big_name, small, small_name):
    """big must hold group size times small's elements."""
    if big.count != small.count * grp.size:
        raise ValueError("collfuse.distributed: %s: the %s has %d elements, %d ranks x %d %s elements want %d"
                         % (what, big_name, big.count, grp.size, small.count, small_name, small.count * grp.size))


def all_gather(output, input, group=None, dtype=None, async_op=False):
    """output = every rank's input concatenated in rank order (along
    dimension 0 of output: it has world size times input's elements).
    async_op: as all_reduce's (its Work's wait() returns output)."""
    w, grp = _enter(group)
    o, i = _pair(output, input, "all_gather", dtype)
    _world_times(grp, "all_gather", o, "output", i, "input")
    return _go(w, grp, "all_gather", i.dtype, i.count, None, i.ptr, o.ptr, False, output, (output, input), async_op)


def reduce_scatter(output, input, op="sum", group=None, dtype=None, async_op=False):
    """output = this rank's block of the reduction of every rank's input
    (input: world size blocks of output's size, in rank order). async_op:
    as all_gather's."""
    w, grp = _enter(group)
    red = _reduction(op)
    o, i = _pair(output, input, "reduce_scatter", dtype)
    _world_times(grp, "reduce_scatter", i, "input", o, "output")
    return _go(w, grp, "reduce_scatter", i.dtype, o.count, red, i.ptr, o.ptr, False, output, (output, input),
               async_op)


def all_to_all(output, input, group=None, dtype=None, async_op=False):
    """Block j of input (world size equal blocks) to rank j; output's block
    i came from rank i (torch's all_to_all_single with equal splits).
    async_op: as all_gather's."""
    w, grp = _enter(group)
    o, i = _pair(output, input, "all_to_all", dtype)
    if o.count != i.count:
        raise ValueError("collfuse.distributed: all_to_all: the output has %d elements, the input %d"
                         % (o.count, i.count))
    if i.count % grp.size:
        raise ValueError("collfuse.distributed: all_to_all: %d elements do not cut into %d equal blocks"
                         % (i.count, grp.size))
    return _go(w, grp, "all_to_all", i.dtype, i.count, None, i.ptr, o.ptr, False, output, (output, input), async_op)


_TOKEN = np.zeros(1, dtype=np.int32)


def barrier(group=None):
    """Return when every rank of the group has called it."""
    w, grp = _enter(group)
    _run(w, grp, "all_reduce", "int32", 1, "sum", _TOKEN.ctypes.data, _TOKEN.ctypes.data, True)


# ---------------- compute fused with a collective ----------------

_FUSED_DTYPES = ("float32", "float16", "bfloat16", "int8")  # MatmulReduceScatter's (SPEC: collfuse adds float32)


class _MatmulRS:
    """One shape's MatmulReduceScatter on this rank: a graph of that one
    fused op, compiled with the world's options (the product of chunk i+1
    computed while chunk i is reduce-scattered, as the plan decides)."""

    def __init__(self, w, dtype, m, k, n, comm_turn):
        g = Graph("cfd_matmul_reduce_scatter", world_size=w.size, context=Context(log=_warn))
        ins = [g.input("x1", dtype, (m, k)), g.input("x2", dtype, (k, n))]
        g.output("y", g.op("MatmulReduceScatter", ins, "mmrs", world_size=w.size, comm_turn=comm_turn or None))
        self.exe = g.compile(**w.options)
        self.inputs = (ctypes.c_void_p * 2)()
        self.outputs = (ctypes.c_void_p * 1)()


def matmul_reduce_scatter(output, x1, x2, comm_turn=0, dtype=None):
    """output = this rank's block of rows of the sum over the ranks of
    x1 @ x2: x1 (m, k), x2 (k, n), output (m / world size, n); float32,
    float16, bfloat16 or int8 (a bias, which the fused op takes only as
    zeros, is the caller's to add). Runs
    collfuse's fused MatmulReduceScatter (torch_npu's
    npu_mm_reduce_scatter_base), one executable per shape, cached as the
    collectives' are; comm_turn: chunks (0: the plan's choice). Every rank
    of the job (group None only) calls it with the same shapes."""
    w, grp = _enter(None)
    o = _buf(output, "matmul_reduce_scatter's output", True, dtype)
    a = _buf(x1, "matmul_reduce_scatter's x1", False, dtype)
    b = _buf(x2, "matmul_reduce_scatter's x2", False, dtype)
    for t in (b, o):
        _same_dtype(a, t, "matmul_reduce_scatter")
    if a.dtype not in _FUSED_DTYPES:
        raise TypeError("collfuse.distributed: matmul_reduce_scatter: %s; the fused op takes %s"
                        % (a.dtype, ", ".join(_FUSED_DTYPES)))
    shape = lambda t: tuple(getattr(t, "shape", ()))
    if len(shape(x1)) != 2 or len(shape(x2)) != 2 or shape(x1)[1] != shape(x2)[0]:
        raise ValueError("collfuse.distributed: matmul_reduce_scatter: x1 %s @ x2 %s: want (m, k) @ (k, n)"
                         % (shape(x1), shape(x2)))
    m, k = shape(x1)
    n = shape(x2)[1]
    if m % w.size or o.count != m // w.size * n:
        raise ValueError("collfuse.distributed: matmul_reduce_scatter: %d rows over %d ranks into an output of %d "
                         "elements (want %d rows of %d)" % (m, w.size, o.count, m // w.size, n))
    if o.ptr < a.ptr + a.nbytes and a.ptr < o.ptr + o.nbytes and o.nbytes and a.nbytes:
        raise ValueError("collfuse.distributed: matmul_reduce_scatter: the output overlaps x1")
    with w.lock:
        if w.failed:
            raise CollfuseError(3, "collfuse.distributed: an earlier collective failed (%s); the job's "
                                   "collfuse world has stopped" % w.failed)
        key = ("matmul_reduce_scatter", a.dtype, m, k, n, int(comm_turn or 0))
        f = w.cache.get(key)
        if f is None:
            f = w.cache[key] = _MatmulRS(w, a.dtype, m, k, n, int(comm_turn or 0))
            w.order.append(key)
        f.inputs[0], f.inputs[1] = a.ptr, b.ptr
        f.outputs[0] = o.ptr
        if w.runner is not None:
            lib.cf_runner_wait(w.runner)  # after the collectives started before, in order
        t0 = time.monotonic_ns()
        try:
            f.exe.ctx.check(lib.cf_executable_run_rank(f.exe._h, w.rank, f.inputs, f.outputs))
        except CollfuseError as e:
            w.failed = str(e)
            raise
        if w.trace is not None:
            w.trace.span(LANE_CALLS, "matmul_reduce_scatter", t0, time.monotonic_ns(), "collective",
                         {"dtype": a.dtype, "shape": [m, k, n]})
        w.last_copies = f.exe.last_copies
    return output
