#!/usr/bin/env python3
"""progress.py COLLFUSE: the progress line and the phase times of `run`.

An --input that is a FIFO holds the "inputs" phase until this test writes
the file, two seconds later: longer than the second after which a terminal
shows the line, whatever the machine's speed. On a pseudo-terminal stderr
then carries "collfuse run: generating inputs, N s" (redrawn, and erased
before the summary); with --quiet, or with stderr a pipe, it carries
nothing of the kind. `run -v` names every phase with its seconds, and
`--json`'s phase_s holds the same phases (their seconds add up to no more
than the test measured around the process).
"""
import json
import os
import pty
import select
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import checks  # noqa: E402
from checks import cf, fail  # noqa: E402

checks.CF = sys.argv[1]
GRAPH = """<graph name="p" version="1" world_size="2">
<node name="x" op="Input" dtype="float32" shape="64"/>
<node name="ar" op="AllReduce" reduction="sum"><input ref="x"/></node>
<node name="y" op="Output"><input ref="ar"/></node>
</graph>
"""


def npy(path, values):
    header = "{'descr': '<f4', 'fortran_order': False, 'shape': (%d,), }" % len(values)
    header += " " * (63 - (10 + len(header)) % 64) + "\n"
    import struct
    with open(path, "wb") as f:
        f.write(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header.encode())
        f.write(struct.pack("<%df" % len(values), *values))


def feed_later(fifo, data, delay):
    def go():
        time.sleep(delay)
        with open(fifo, "wb") as f:
            f.write(data)
    t = threading.Thread(target=go)
    t.start()
    return t


def on_terminal(args, timeout):
    master, slave = pty.openpty()
    p = subprocess.Popen([checks.CF, *args], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                         stderr=slave)
    os.close(slave)
    err, deadline = b"", time.monotonic() + timeout * checks.TIME_SCALE
    while time.monotonic() < deadline:
        if not select.select([master], [], [], 1)[0]:
            if p.poll() is not None:
                break
            continue
        try:
            data = os.read(master, 4096)
        except OSError:
            break
        if not data:
            break
        err += data
    out = p.communicate(timeout=timeout * checks.TIME_SCALE)[0]
    os.close(master)
    return p.returncode, out.decode(), err.decode("utf-8", "replace")


def main():
    tmp = tempfile.mkdtemp()
    g = os.path.join(tmp, "p.xml")
    with open(g, "w") as f:
        f.write(GRAPH)
    src = os.path.join(tmp, "x.npy")
    npy(src, [float(i % 7) + 0.5 for i in range(64)])
    with open(src, "rb") as f:
        data = f.read()
    fifo = os.path.join(tmp, "x.fifo")
    os.mkfifo(fifo)
    for quiet in (False, True):
        t = feed_later(fifo, data, 2.0)
        rc, out, err = on_terminal(["run", g, "--input", "x=" + fifo, "--verify"] +
                                   (["--quiet"] if quiet else []), 120)
        t.join()
        if rc != 0:
            fail("run on a terminal%s: exit %d\n%s" % (" --quiet" if quiet else "", rc, err))
        shown = "collfuse run: generating inputs" in err
        if shown == quiet:
            fail("on a terminal%s the progress line is %s: %r" %
                 (" with --quiet" if quiet else "", "shown" if shown else "missing", err))
        if not quiet and not err.endswith("\r\x1b[K"):
            fail("the progress line is not erased at the end: %r" % err[-40:])
        if "verified" not in out:
            fail("the summary is missing: %r" % out)
    # a pipe: no line
    t = feed_later(fifo, data, 2.0)
    p = cf("run", g, "--input", "x=" + fifo, timeout=120)
    t.join()
    if "generating inputs" in p.stderr or "\x1b" in p.stderr:
        fail("stderr a pipe, yet a progress line: %r" % p.stderr)
    # phases: -v lines and --json's phase_s
    p = cf("run", g, "-v", "--verify")
    line = [ln for ln in p.stderr.splitlines() if ln.startswith("run: phases:")]
    if not line:
        fail("run -v prints no phases line: %r" % p.stderr)
    else:
        for ph in ("read", "compile", "plan", "kernels", "inputs", "iterations", "verify"):
            if " %s " % ph not in line[0]:
                fail("run -v's phases lack '%s': %s" % (ph, line[0]))
    t0 = time.monotonic()
    p = cf("run", g, "--json", "--verify", "--iters", "3")
    wall = time.monotonic() - t0
    ph = json.loads(p.stdout).get("phase_s", {}) if p.returncode == 0 else {}
    if list(ph)[:3] != ["read", "compile", "plan"] or "iterations" not in ph or "verify" not in ph:
        fail("phase_s: %s" % ph)
    if any(v < 0 for v in ph.values()) or sum(ph.values()) > wall:
        fail("phase_s %s: negative, or more than the %.3f s the process ran" % (ph, wall))
    checks.finish("progress.py")


main()
