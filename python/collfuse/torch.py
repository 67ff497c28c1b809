"""collfuse.torch: DDP communication hooks over collfuse.distributed.

    model = DDP(net, gradient_as_bucket_view=True)
    model.register_comm_hook(None, collfuse.torch.allreduce_hook)

allreduce_hook averages each gradient bucket over the job's ranks through
collfuse (collfuse.distributed.all_reduce with "mean", in place on the
bucket's flat buffer) and returns the completed torch.futures.Future DDP
expects, holding that buffer; the future completes when the bucket is
averaged. bf16_compress_hook is torch's
bf16_compress_hook done by collfuse: the bucket is rounded to bfloat16,
averaged in bfloat16 and written back into the bucket's buffer.

Refused in the hook, on every rank before anything is sent (the backward
pass raises it): a bucket of sparse gradients (an embedding with
sparse=True), a state that is none of the below. A collective that fails
reaches DDP's backward pass as an error with collfuse's message (_value).

state: None (the hook joins the job from the launcher's environment and
the initialized torch.distributed default group, collfuse.distributed.init
with its defaults; call init yourself first for other options, e.g.
deterministic=True), a process group of every rank, or a HookState
(group, and trace: a Chrome trace of the buckets, see HookState). The hook
starts each bucket's average (collfuse.distributed.all_reduce with
async_op=True) and returns: the buckets are averaged by collfuse's own
thread (the world's cf_runner), in the order DDP hands them over (the same
on every rank), so the backward pass goes on meanwhile, as with gloo; that
thread completes each bucket's future as its average ends, and DDP waits
for every future before the optimizer step. Don't call
collfuse.distributed from another thread while a backward pass is running.

Copies: with gradient_as_bucket_view=True the gradients are the bucket and
DDP copies nothing, since the future holds the bucket itself. On the shm
world allreduce_hook makes none either: the first time it sees a bucket's
buffer (DDP rebuilds its buckets after the first iteration: a bucket is
known by its storage) it moves the buffer's storage into shared memory in
place (collfuse.distributed.register; the gradients, views of it, follow)
and unregisters the buckets it replaces (those that held its parameters'
gradients before, once their collectives have ended; several DDP models,
each numbering its buckets from 0, keep theirs apart); the peers then read
and write the bucket where it lies and the average is made in place
(collfuse.distributed.last_copies() is (0, 0)). Memory: a bucket seen for
the first time is registered for that backward pass only (_share), so that
DDP's first buckets, which it replaces after the first iteration, are not
held beside the new ones; and compile_step is imported on first use (its
tracer is resident memory the hooks do not need). Under MPI the copies are
the world's (its staging and one copy of the average into the bucket).
bf16_compress_hook rounds into a new buffer per call, which the world
copies into its memory and back. Without gradient_as_bucket_view, DDP
copies the gradients into the bucket and back, as with any hook.
"""

import threading
import time
import weakref

import torch

from . import distributed as _cfd

__all__ = ["allreduce_hook", "bf16_compress_hook", "HookState"]


def __getattr__(name):
    """compile_step (graph mode: collfuse.step), imported on first use: its
    tracer (torch.fx.experimental.proxy_tensor: 3 MB resident, imported
    without sympy's 30) is memory the hooks do not need."""
    if name == "compile_step":
        from .step import compile_step
        return compile_step
    raise AttributeError("module %r has no attribute %r" % (__name__, name))


class HookState:
    """A hook's state: group (None: every rank; a process group of every
    rank) and trace: FILE.json, where each rank writes its timeline of the
    buckets as FILE.rank<R>.json (collfuse.distributed.set_trace, started
    at the first bucket: each hook call on the backward pass, each bucket's
    turn on the runner thread with its collective, the library's copies, algorithm
    phases and waits). The file is rewritten after each backward pass's
    last bucket (bucket.is_last(): DDP's highest index) and at exit, so it
    is whole between steps. Pickled (torch.save of a checkpoint): group
    and trace; a process group, which pickles not, is saved as None
    (every rank), as torch's PowerSGDState leaves its process_group out;
    the loaded state starts its trace again."""

    def __init__(self, group=None, trace=None):
        self.group, self.trace = group, trace
        self._started = False

    def __getstate__(self):
        group = self.group if self.group is None or isinstance(self.group, (list, tuple)) else None
        return {"group": group, "trace": self.trace}

    def __setstate__(self, state):
        self.__init__(state["group"], state["trace"])


def _join(state):
    """The group of the hook's state, checked here, in the hook: a bad one
    raises from the backward pass on every rank before anything is sent."""
    if not _cfd.is_initialized():
        _cfd.init()
    group = state.group if isinstance(state, HookState) else state
    try:
        _cfd._enter(group)
    except (TypeError, ValueError) as e:
        raise type(e)("collfuse.torch: the hook's state %r: want None, a HookState or a process group (%s)"
                      % (state, e)) from None
    if isinstance(state, HookState) and state.trace is not None and not state._started:
        _cfd.set_trace(state.trace)
        state._started = True
    return group


def _value(fut):
    """The returned future's then() callback: the bucket, or the error
    raised. A future completed with set_exception holds the exception as
    its value, which DDP's C++ side takes for the bucket ("Unable to cast
    ... to Tensor"); a callback that raises completes its future with an
    error, which DDP's backward pass raises with the message."""
    return fut.value()


def _submit(bucket, buf, t0, state, start, finish=None):
    """The future DDP waits on for bucket: start() starts its collective
    (collfuse.distributed's async_op Work), finish() runs once it has ended
    well, on collfuse's thread, before the future completes (holding buf;
    or the error: _value). t0: the hook's call (time.monotonic_ns), for
    the trace."""
    fut = torch.futures.Future()
    done = fut.then(_value)
    info = None
    if _cfd.tracing():
        info = {"index": bucket.index(), "bytes": buf.numel() * buf.element_size(), "dtype": str(buf.dtype)}
    # the backward pass's last bucket (DDP's highest index, handed over last) rewrites the trace
    rewrite = isinstance(state, HookState) and state.trace is not None and bucket.is_last()
    queued = time.monotonic_ns()
    try:
        work = start()
    except BaseException as e:  # the future carries it to DDP's wait
        fut.set_exception(e)
        return done

    def end(w):
        err = w.exception()
        if err is None and finish is not None:
            try:
                finish()
            except BaseException as e:
                err = e
        if info is not None:  # the bucket's turn on collfuse's thread, up to its future's completion
            info["queued_ms"] = round(max(0, w.began_ns - queued) / 1e6, 3)
            _cfd.trace_span(_cfd.LANE_CALLS, "bucket %d" % info["index"], max(w.began_ns, queued),
                            time.monotonic_ns(), "bucket", info)
        if err is None:
            fut.set_result(buf)
        else:
            fut.set_exception(err)
        if rewrite and info is not None:
            _cfd.write_trace()
    work.then(end)
    if info is not None:
        _cfd.trace_span(_cfd.LANE_HOOK, "hook %d" % info["index"], t0, time.monotonic_ns(), "hook", dict(info))
    return done


class _Held:
    """A bucket storage registered by allreduce_hook (_share)."""
    __slots__ = ("params", "uses", "fresh", "drop")

    def __init__(self, params, fresh):
        self.params = [weakref.ref(p) for p in params]  # the parameters whose gradients it holds
        self.uses = 0  # its collectives started and not ended
        self.fresh = fresh  # registered first in this backward pass (_release)
        self.drop = False  # unregister once its collectives have ended


_lock = threading.Lock()  # _share runs on the backward pass's thread, _ended and _release on collfuse's
_held = {}  # registered storage pointer -> _Held
_owner = {}  # id of a parameter -> the storage pointer registered with its gradient
_seen = set()  # pointers of the buckets a backward pass has ended with (kept registered when seen again)


def _drop(ptr):
    """Unregister ptr now, or once its started collectives have ended (a
    peer may read it until then). Under _lock."""
    h = _held.get(ptr)
    if h is None:
        return
    if h.uses:
        h.drop = True
        return
    del _held[ptr]
    for r in h.params:
        p = r()
        if p is not None and _owner.get(id(p)) == ptr:
            del _owner[id(p)]
    _cfd._unregister_ptr(ptr)


def _share(bucket, buf):
    """Register bucket's buffer with the shm world when it is not (copies:
    the module's head), unregistering the buckets it replaces, and count
    the collective about to start on it (_ended). A bucket is known by its
    storage and replaces the buckets that held its parameters' gradients
    before (DDP's rebuild after the first iteration), not by its index:
    each DDP model numbers its buckets from 0, and two models' hooks may
    take turns in one backward pass (a GAN's generator and
    discriminator). A buffer seen for the first time is registered for
    this backward pass only (_release ends it): DDP replaces its first
    buckets after the first iteration, and a registration holds a storage
    alive, so the old buckets would stay beside the new ones (ResNet-18:
    42 MB more at DDP's rebuild, the process's peak); one seen again is
    kept. Returns the pointer counted, or None (not the shm world)."""
    if _cfd.backend() != "shm":
        return None
    with _lock:
        ptr = buf.storage().data_ptr()
        h = _held.get(ptr)
        if h is None or not _cfd.registered(buf):
            moved = not buf.storage().is_shared()
            _cfd.register(buf)
            ptr = buf.storage().data_ptr()
            params = bucket.parameters()
            # the buckets this one replaces, and those whose parameters are all gone (their models)
            for old in {_owner.get(id(p)) for p in params} - {None, ptr}:
                _drop(old)
            for old, o in list(_held.items()):
                if old != ptr and all(r() is None for r in o.params):
                    _drop(old)
            h = _held.get(ptr)
            if h is None:
                h = _held[ptr] = _Held(params, ptr not in _seen)
            for p in params:
                _owner[id(p)] = ptr
            if moved:  # the bucket's old memory is free: back to the kernel, not kept in malloc's heap
                _cfd._malloc_trim()
        h.uses += 1
        return ptr


def _ended(ptr, last):
    """A bucket's collective has ended well (on collfuse's thread: every
    peer is done with this rank's memory): its storage may be unregistered
    (_drop); after a backward pass's last bucket, _release."""
    with _lock:
        h = _held.get(ptr)
        if h is not None:
            h.uses -= 1
            if h.drop:
                _drop(ptr)
        if last:
            _release()


def _release():
    """After a backward pass's last bucket: the buckets registered first in
    this pass are unregistered (each once its collectives have ended), the
    storages no longer held here (DDP frees the ones it replaces); the next
    pass registers again those it still uses, for good. Under _lock."""
    for ptr, h in list(_held.items()):
        if h.fresh:
            h.fresh = False
            _seen.add(ptr)
            _drop(ptr)


def _dense(bucket, hook):
    """The bucket's buffer, refused (before anything is sent, the same on
    every rank: DDP's buckets are) unless it is a dense tensor: DDP hands a
    parameter's sparse gradient (nn.Embedding or nn.EmbeddingBag with
    sparse=True) to the hook as a bucket of its own."""
    buf = bucket.buffer()
    if buf.layout != torch.strided:
        raise TypeError("collfuse.torch.%s: DDP's bucket %d holds a %s gradient of shape %s (an nn.Embedding or "
                        "nn.EmbeddingBag with sparse=True?): collfuse averages dense buckets only; make the "
                        "gradient dense (sparse=False) or leave this model to DDP's own allreduce"
                        % (hook, bucket.index(), buf.layout, tuple(buf.shape)))
    return buf


def allreduce_hook(state, bucket):
    """DDP comm hook: the bucket averaged over every rank, in place."""
    t0 = time.monotonic_ns()
    group = _join(state)
    buf = _dense(bucket, "allreduce_hook")
    ptr = _share(bucket, buf)
    last = bucket.is_last()
    return _submit(bucket, buf, t0, state, lambda: _cfd.all_reduce(buf, op="mean", group=group, async_op=True),
                   None if ptr is None else lambda: _ended(ptr, last))


# Not named bf16_compress_hook: torch 1.13's DDP refuses a hook of that
# name unless CUDA and NCCL are there (it takes it for its own).
def collfuse_bf16_compress_hook(state, bucket):
    """DDP comm hook: the bucket rounded to bfloat16, averaged over every
    rank in bfloat16, written back into the bucket."""
    t0 = time.monotonic_ns()
    group = _join(state)
    buf = _dense(bucket, "bf16_compress_hook")
    half = buf.to(torch.bfloat16)
    return _submit(bucket, buf, t0, state, lambda: _cfd.all_reduce(half, op="mean", group=group, async_op=True),
                   lambda: buf.copy_(half))


bf16_compress_hook = collfuse_bf16_compress_hook
