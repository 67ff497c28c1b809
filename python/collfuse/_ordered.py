"""One thread that runs callables in the order they are handed over.

collfuse.torch's DDP hooks and collfuse.step's compiled steps both hand
their collectives to such a thread, in the same order on every rank, so
the ranks meet in the same collective while the caller goes on computing
(the backward pass's next layers). A thread of each name is started on
first use and lives, a daemon, as long as the process.
"""

import queue
import threading
import time

_threads = {}
_lock = threading.Lock()


class _Ordered:
    def __init__(self, name):
        self._q = queue.SimpleQueue()
        self._t = threading.Thread(target=self._main, name=name, daemon=True)
        self._t.start()

    def _main(self):
        while True:
            fn, done = self._q.get()
            t0 = time.monotonic_ns()
            try:
                res, err = fn(), None
            except BaseException as e:  # done carries it to the waiter
                res, err = None, e
            done(res, err, t0)


def submit(name, fn, done):
    """fn() on the thread called name, after all handed to it before; then,
    on that thread, done(result, None, t0) or done(None, exception, t0),
    t0 being fn's start (time.monotonic_ns)."""
    with _lock:
        t = _threads.get(name)
        if t is None:
            t = _threads[name] = _Ordered(name)
    t._q.put((fn, done))
