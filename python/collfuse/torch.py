"""collfuse.torch: DDP communication hooks over collfuse.distributed.

    model = DDP(net, gradient_as_bucket_view=True)
    model.register_comm_hook(None, collfuse.torch.allreduce_hook)

allreduce_hook averages each gradient bucket over the job's ranks through
collfuse (collfuse.distributed.all_reduce with "mean", in place on the
bucket's flat buffer) and returns the completed torch.futures.Future DDP
expects, holding that buffer. bf16_compress_hook is torch's
bf16_compress_hook done by collfuse: the bucket is rounded to bfloat16,
averaged in bfloat16 and written back into the bucket's buffer.

state: None (the hook joins the job from the launcher's environment and
the initialized torch.distributed default group, collfuse.distributed.init
with its defaults; call init yourself first for other options, e.g.
deterministic=True), or a process group of every rank. The hook runs on the
autograd thread and returns when the bucket is averaged (the future is
already complete), so the backward pass waits for each bucket while the
bytes move.

Copies: with gradient_as_bucket_view=True the gradients are the bucket, so
the allreduce reads them where they lie, and its result is copied once into
the bucket (collfuse.distributed's in-place all_reduce); DDP then copies
nothing, since the future holds the bucket itself. Without it, DDP copies
the gradients into the bucket and back, as with any hook. The world copies
what its transport needs (collfuse.distributed says which).
"""

import torch

from . import distributed as _cfd

__all__ = ["allreduce_hook", "bf16_compress_hook"]


def _join(state):
    if not _cfd.is_initialized():
        _cfd.init()
    return state  # a process group (checked by the collective) or None


def _done(t):
    fut = torch.futures.Future()
    fut.set_result(t)
    return fut


def allreduce_hook(state, bucket):
    """DDP comm hook: the bucket averaged over every rank, in place."""
    group = _join(state)
    buf = bucket.buffer()
    _cfd.all_reduce(buf, op="mean", group=group)
    return _done(buf)


# Not named bf16_compress_hook: torch 1.13's DDP refuses a hook of that
# name unless CUDA and NCCL are there (it takes it for its own).
def collfuse_bf16_compress_hook(state, bucket):
    """DDP comm hook: the bucket rounded to bfloat16, averaged over every
    rank in bfloat16, written back into the bucket."""
    group = _join(state)
    buf = bucket.buffer()
    half = buf.to(torch.bfloat16)
    _cfd.all_reduce(half, op="mean", group=group)
    buf.copy_(half)
    return _done(buf)


bf16_compress_hook = collfuse_bf16_compress_hook
