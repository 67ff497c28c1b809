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

state: None (the hook joins the job from the launcher's environment and
the initialized torch.distributed default group, collfuse.distributed.init
with its defaults; call init yourself first for other options, e.g.
deterministic=True), or a process group of every rank. The buckets are
averaged by one thread of collfuse's, in the order DDP hands them over
(the same on every rank), so the backward pass goes on meanwhile, as with
gloo; DDP waits for every future before the optimizer step. Don't call
collfuse.distributed from another thread while a backward pass is running.

Copies: with gradient_as_bucket_view=True the gradients are the bucket and
DDP copies nothing, since the future holds the bucket itself; the copies
are the world's (collfuse.distributed says which: shm, the bucket into its
memory and the average back; MPI, its staging and one copy of the average
into the bucket). Without it, DDP copies the gradients into the
bucket and back, as with any hook.
"""

import queue
import threading

import torch

from . import distributed as _cfd
from .step import compile_step  # noqa: F401 (graph mode: collfuse.step)

__all__ = ["allreduce_hook", "bf16_compress_hook"]


def _join(state):
    if not _cfd.is_initialized():
        _cfd.init()
    return state  # a process group (checked by the collective) or None


class _Worker:
    """One thread that runs the hooks' collectives in the order DDP hands
    the buckets over (the same order on every rank), so the backward pass
    goes on while a bucket is averaged; each future completes (or fails)
    when its bucket is done. Started on first use; a daemon thread."""

    def __init__(self):
        self.q = queue.SimpleQueue()
        self.t = threading.Thread(target=self._main, name="collfuse-ddp", daemon=True)
        self.t.start()

    def _main(self):
        while True:
            fn, fut = self.q.get()
            try:
                fut.set_result(fn())
            except BaseException as e:  # the future carries it to DDP's wait
                fut.set_exception(e)


_worker = None
_worker_lock = threading.Lock()


def _submit(fn):
    global _worker
    with _worker_lock:
        if _worker is None:
            _worker = _Worker()
    fut = torch.futures.Future()
    _worker.q.put((fn, fut))
    return fut


def allreduce_hook(state, bucket):
    """DDP comm hook: the bucket averaged over every rank, in place."""
    group = _join(state)
    buf = bucket.buffer()

    def run():
        _cfd.all_reduce(buf, op="mean", group=group)
        return buf
    return _submit(run)


# Not named bf16_compress_hook: torch 1.13's DDP refuses a hook of that
# name unless CUDA and NCCL are there (it takes it for its own).
def collfuse_bf16_compress_hook(state, bucket):
    """DDP comm hook: the bucket rounded to bfloat16, averaged over every
    rank in bfloat16, written back into the bucket."""
    group = _join(state)
    buf = bucket.buffer()

    def run():
        half = buf.to(torch.bfloat16)
        _cfd.all_reduce(half, op="mean", group=group)
        buf.copy_(half)
        return buf
    return _submit(run)


bf16_compress_hook = collfuse_bf16_compress_hook
