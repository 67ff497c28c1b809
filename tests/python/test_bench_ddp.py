#!/usr/bin/python3
"""bench/ddp.py's ports: a run that fails because another process took its
port between port_pair() and the bind (torch's store, torchrun's
rendezvous, the shm world's at MASTER_PORT + 1: "Address already in use")
is started again on other ports, at most TRIES times; any other failure is
returned as it is. The runs are stand-ins (no torch needed)."""

import importlib.util
import os
import subprocess
import sys

from checks import fail

HERE = os.path.dirname(os.path.abspath(__file__))
spec = importlib.util.spec_from_file_location("bench_ddp", os.path.join(HERE, "..", "..", "bench", "ddp.py"))
ddp = importlib.util.module_from_spec(spec)
spec.loader.exec_module(ddp)

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
    for _ in range(20):
        p, q = ddp.port_pair()
        if not 0 < p < 65535 or q in (p, p + 1):
            fail("port_pair: (%d, %d): want P and P + 1 for MASTER_PORT and another for torchrun's" % (p, q))
    # taken once, then the run goes through
    start, got = starts([(1, TAKEN), (0, "")])
    r = ddp.on_free_ports(start)
    if r.returncode != 0 or len(got) != 2:
        fail("a port taken once: %d runs, the last exit %d; want 2 and 0" % (len(got), r.returncode))
    # another failure: returned at once
    start, got = starts([(1, "Traceback ... ValueError: bad model")])
    r = ddp.on_free_ports(start)
    if r.returncode != 1 or len(got) != 1:
        fail("a failure not of ports: %d runs; want 1, returned as it failed" % len(got))
    # taken every time: TRIES runs, the last failure returned
    start, got = starts([(1, TAKEN)])
    r = ddp.on_free_ports(start)
    if r.returncode != 1 or len(got) != ddp.TRIES or "Address already in use" not in r.stderr:
        fail("a port taken every time: %d runs (want %d), exit %d" % (len(got), ddp.TRIES, r.returncode))
    print("bench/ddp.py: runs started again on other ports when one was taken")


if __name__ == "__main__":
    main()
