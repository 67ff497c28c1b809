"""Ports for the jobs that bench/ and tests/python start on loopback
(torchrun, mpirun with MASTER_PORT, gloo's tcp:// init), and starting a
job again on other ports when another process took one of its ports in
the moment between choosing it and the job binding it: a port free when
it was chosen (a bind to port 0) may be taken before the job binds it, on
a busy machine with other jobs starting (the job then fails with
EADDRINUSE: "Address already in use").

    import ports
    p = ports.on_free_ports(lambda master, rdzv: subprocess.run(...), "bench/ddp.py")

Imported by bench/ddp.py and bench/shm_vs_gloo.py (their folder is on
their path) and by the tests in tests/python (which put this folder on
theirs).
"""

import socket
import sys

TRIES = 5  # runs started on fresh ports when one was taken meanwhile


def port_pair():
    """(P, Q): ports free now, P + 1 too. MASTER_PORT is P: torch's store
    listens there and the shm world (collfuse's hook) meets at P + 1
    (COLLFUSE_RENDEZVOUS's default); torchrun's own rendezvous at Q."""
    for _ in range(200):
        with socket.socket() as a, socket.socket() as b, socket.socket() as c:
            a.bind(("127.0.0.1", 0))
            c.bind(("127.0.0.1", 0))
            p = a.getsockname()[1]
            try:
                b.bind(("127.0.0.1", p + 1))
            except (OSError, OverflowError):
                continue
            return p, c.getsockname()[1]
    sys.exit("ports: no free ports P, P + 1 in 200 tries")


def port_taken(p):
    """Whether a finished run p (returncode, stdout, stderr as text: a
    subprocess.CompletedProcess) failed for a port another process took
    between port_pair() and its bind (torch's store, torchrun's
    rendezvous, gloo's, the shm world's: each says EADDRINUSE's text)."""
    return p.returncode != 0 and "address already in use" in ((p.stdout or "") + (p.stderr or "")).lower()


def on_free_ports(start, who):
    """start(master_port, rdzv_port) -> a finished run (port_taken's p),
    started again on other ports (port_pair()) while it fails for a port
    taken meanwhile, at most TRIES runs; the last run. who names the
    caller in the note on stderr for each run started again."""
    for k in range(TRIES):
        p = start(*port_pair())
        if not port_taken(p) or k == TRIES - 1:
            return p
        print("%s: a port was taken before the run bound it: started again on others" % who, file=sys.stderr)
