#!/usr/bin/python3
"""Graph.compile(...).run_rank under mpirun (tests/e2e/mpi.sh): every
process builds the same DP graph, runs its own rank with its own numpy
arrays, and checks the exact means and that the threads run of all ranks in
this process gives the same bytes. Prints "rank R: ok"."""

import os
import sys

import numpy as np

import collfuse

me = int(os.environ["OMPI_COMM_WORLD_RANK"])
R = int(os.environ["OMPI_COMM_WORLD_SIZE"])

g = collfuse.Graph("dp", world_size=R)
for i in range(12):
    g.input("g%d" % i, "float32", (300 + 37 * i,))
    g.output("o%d" % i, g.all_reduce("g%d" % i, reduction="mean"))
exe = g.compile(split="bytes:4K", deterministic=True)


def grads(r):
    return {"g%d" % i: ((np.arange(300 + 37 * i) * 7 + r * 13 + i) % 41 / 8.0 - 2.5).astype(np.float32)
            for i in range(12)}


mine = exe.run_rank(me, grads(me))
every = exe.run([grads(r) for r in range(R)])
for i in range(12):
    want = sum(grads(r)["g%d" % i].astype(np.float64) for r in range(R)) / R
    np.testing.assert_array_equal(mine["o%d" % i], want.astype(np.float32))
    np.testing.assert_array_equal(mine["o%d" % i], every[me]["o%d" % i])
try:
    exe.run_rank((me + 1) % R, grads(me))
    sys.exit("rank %d: a wrong rank was accepted" % me)
except collfuse.CollfuseError as e:
    assert e.status == "usage" and "this process is rank %d" % me in str(e), str(e)
print("rank %d: ok" % me, flush=True)  # before teardown finalizes MPI
if os.environ.get("CF_OK_DIR"):  # what the test counts: a file per rank that got here
    with open(os.path.join(os.environ["CF_OK_DIR"], "rank%d.ok" % me), "w") as f:
        f.write("ok\n")
