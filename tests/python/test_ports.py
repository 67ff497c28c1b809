#!/usr/bin/python3
"""bench/ports.py, which bench/ddp.py, bench/shm_vs_gloo.py and the torch
tests (test_ddp_train, test_step_dist, test_distributed) start their jobs
with: port_pair() gives P, P + 1 and Q free; a run that fails because
another process took its port between port_pair() and the bind (torch's
store, torchrun's rendezvous, gloo's, the shm world's at MASTER_PORT + 1:
"Address already in use") is started again on other ports, at most TRIES
times; any other failure is returned as it is. The runs are stand-ins (no
torch needed); last, a real port taken: a run that binds the port it was
given, started on a port held here, is started again on another."""

import importlib.util
import os
import socket
import subprocess
import sys

from checks import fail

HERE = os.path.dirname(os.path.abspath(__file__))
BENCH = os.path.join(HERE, "..", "..", "bench")
sys.path.insert(0, BENCH)
import ports  # noqa: E402

TAKEN = "RuntimeError: The server socket has failed to bind to [::]:%d (errno: 98 - Address already in use)."


def starts(results):
    """A start() that returns results[k] at its k-th call, recording the ports it got."""
    got = []

    def start(master_port, rdzv_port):
        got.append((master_port, rdzv_port))
        rc, err = results[min(len(got), len(results)) - 1]
        return subprocess.CompletedProcess(["run"], rc, "", err % master_port if "%d" in err else err)
    return start, got


def main():
    for name in ("ddp", "shm_vs_gloo"):  # the bench scripts load with the shared helper
        spec = importlib.util.spec_from_file_location("bench_" + name, os.path.join(BENCH, name + ".py"))
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        if mod.ports is not ports:
            fail("bench/%s.py does not start its runs through bench/ports.py" % name)
    for _ in range(20):
        p, q = ports.port_pair()
        if not 0 < p < 65535 or q in (p, p + 1):
            fail("port_pair: (%d, %d): want P and P + 1 for MASTER_PORT and another for torchrun's" % (p, q))
    # taken once, then the run goes through
    start, got = starts([(1, TAKEN), (0, "")])
    r = ports.on_free_ports(start, "test_ports")
    if r.returncode != 0 or len(got) != 2:
        fail("a port taken once: %d runs, the last exit %d; want 2 and 0" % (len(got), r.returncode))
    # another failure: returned at once
    start, got = starts([(1, "Traceback ... ValueError: bad model")])
    r = ports.on_free_ports(start, "test_ports")
    if r.returncode != 1 or len(got) != 1:
        fail("a failure not of ports: %d runs; want 1, returned as it failed" % len(got))
    # taken every time: TRIES runs, the last failure returned
    start, got = starts([(1, TAKEN)])
    r = ports.on_free_ports(start, "test_ports")
    if r.returncode != 1 or len(got) != ports.TRIES or "Address already in use" not in r.stderr:
        fail("a port taken every time: %d runs (want %d), exit %d" % (len(got), ports.TRIES, r.returncode))
    # a real bind: the first run is given a port this process holds (as another job would)
    held = socket.socket()
    held.bind(("127.0.0.1", 0))
    held.listen()
    tried = []
    bind = "import socket, sys; socket.socket().bind(('127.0.0.1', int(sys.argv[1])))"

    def start(master_port, _):
        port = held.getsockname()[1] if not tried else master_port
        tried.append(port)
        return subprocess.run([sys.executable, "-c", bind, str(port)], capture_output=True, text=True)
    r = ports.on_free_ports(start, "test_ports")
    held.close()
    if r.returncode != 0 or len(tried) != 2:
        fail("a port held by another socket: %d runs, the last exit %d (%s); want 2 and 0"
             % (len(tried), r.returncode, r.stderr.strip()[-300:]))
    print("bench/ports.py: runs started again on other ports when one was taken")


if __name__ == "__main__":
    main()
