#!/usr/bin/env python3
"""sharding.py COLLFUSE SRCDIR: sharding custom-calls are data movement.

A JAX shard_map in HLO enters its per-device body through a custom-call
that takes each device's block of a global array (xla.sdy.GlobalToLocalShape
with Shardy in_shardings, or Sharding + SPMDFullToShardShape with an HLO
sharding). collfuse imports that entry as Shard nodes, so the data a user
passes with --input is what reaches the collectives. This test runs three
such modules on 4 ranks with random global inputs and compares every rank's
outputs with a numpy model written from XLA's definitions (the mesh is
row-major over its axes; a dim's axes are major to minor; an HLO tile
assignment lists the device of each block, replicas last), independent of
collfuse's own code. It also checks the Shard op's errors in the native
format and that a sharding collfuse does not run stays Opaque with a
warning.
"""
import os
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from checks import cf, fail  # noqa: E402
import checks  # noqa: E402

CF, SRC = sys.argv[1], sys.argv[2]
checks.CF = CF


def run(path, inputs, tmp):
    args = ["run", path, "--verify", "--save-outputs", os.path.join(tmp, "out")]
    for name, arr in inputs.items():
        f = os.path.join(tmp, name + ".npy")
        np.save(f, arr)
        args += ["--input", f"{name}={f}"]
    p = cf(*args)
    if "verified" not in p.stdout:
        fail(f"{path}: not verified: {p.stdout}")


def load(tmp, rank, name):
    return np.load(os.path.join(tmp, "out", f"rank{rank}", name + ".npy"))


def close(got, want, what):
    if got.shape != want.shape or not np.allclose(got, want, rtol=1e-5, atol=1e-5):
        fail(f"{what}: got {got.tolist()}, want {want.tolist()}")


rng = np.random.default_rng(7)

# ---- Shardy: mesh ["dp"=2, "tp"=2], device = dp * 2 + tp
with tempfile.TemporaryDirectory() as tmp:
    X = rng.standard_normal((8, 6)).astype(np.float32)
    W = rng.standard_normal((6, 4)).astype(np.float32)
    B = rng.standard_normal((8, 4)).astype(np.float32)
    run(os.path.join(SRC, "tests/hlo/shard_map_sdy.hlo"), {"x.1": X, "w.1": W, "b.1": B}, tmp)
    x = lambda dp: X[4 * dp:4 * dp + 4, :]                          # [{"dp"}, {}]
    w = lambda tp: W[:, 2 * tp:2 * tp + 2]                          # [{}, {"tp"}]
    b = lambda dp, tp: B[4 * dp:4 * dp + 4, 2 * tp:2 * tp + 2]      # [{"dp"}, {"tp"}]
    z = lambda dp, tp: x(dp).astype(np.float64) @ w(tp) + b(dp, tp)
    for d in range(4):
        tp = d % 2
        s = z(0, tp) + z(1, tp)                  # all-reduce over dp
        close(load(tmp, d, "output"), np.concatenate([s, s]), f"sdy rank {d}")  # all-gather over dp

# ---- GSPMD: Sharding + SPMDFullToShardShape
with tempfile.TemporaryDirectory() as tmp:
    P0 = rng.standard_normal((4, 8)).astype(np.float32)
    P1 = rng.standard_normal((6,)).astype(np.float32)
    run(os.path.join(SRC, "tests/hlo/shard_map_gspmd.hlo"), {"p0": P0, "p1": P1}, tmp)
    # devices=[2,2]<=[2,2]T(1,0): iota(4).reshape(2,2).T lists blocks' devices
    dev0 = np.arange(4).reshape(2, 2).T.reshape(-1)
    blk0 = {int(dev0[k]): (k // 2, k % 2) for k in range(4)}
    m0 = {d: P0[2 * i:2 * i + 2, 4 * j:4 * j + 4] for d, (i, j) in blk0.items()}
    # devices=[2,2]3,1,2,0 last_tile_dim_replicate: block k held by entries 2k, 2k+1
    dev1 = [3, 1, 2, 0]
    m1 = {dev1[p]: P1[3 * (p // 2):3 * (p // 2) + 3] for p in range(4)}
    r0 = sum(m0[d].astype(np.float64) for d in range(4))
    for d in range(4):
        close(load(tmp, d, "output.0"), r0, f"gspmd rank {d} output.0")
        peer = {0: 3, 3: 0, 1: 2, 2: 1}[d]      # replica_groups={{0,3},{1,2}}
        close(load(tmp, d, "output.1"), m1[d].astype(np.float64) + m1[peer], f"gspmd rank {d} output.1")

# ---- StableHLO: sdy.manual_computation's in_shardings, mesh ["dp"=2, "tp"=2]
with tempfile.TemporaryDirectory() as tmp:
    X = rng.standard_normal((8, 6)).astype(np.float32)
    W = rng.standard_normal((6, 4)).astype(np.float32)
    run(os.path.join(SRC, "tests/stablehlo/shard_input.mlir"), {"arg0": X, "arg1": W}, tmp)
    for d in range(4):
        tp = d % 2                                # all_reduce over {0,2},{1,3}: the dp pair
        want = sum(X[4 * dp:4 * dp + 4].astype(np.float64) @ W[:, 2 * tp:2 * tp + 2] for dp in (0, 1))
        close(load(tmp, d, "output"), want, f"stablehlo rank {d}")

# ---- the Shard op's checks, in the native format
SHARD = """<graph name="s" version="1"{ws}>
  <node name="x" op="Input" dtype="float32" shape="8,6"/>
  <node name="xs" op="Shard" {attrs}><input ref="x"/></node>
  <node name="o" op="Output"><input ref="xs"/></node>
</graph>
"""
bad = [
    (' world_size="4"', 'tiles="3,1"', "tiles (3,1) must cut each dim of the operand (8,6) into whole blocks: dim 0"),
    (' world_size="4"', 'tiles="2"', "tiles (2) must have one entry per dim of the operand (8,6)"),
    (' world_size="4"', 'tiles="2,1" devices="0,1,1,2"', "devices lists rank 1 twice"),
    (' world_size="4"', 'tiles="2,1" devices="0,1,2"', "devices lists 3 ranks; every one of world_size 4 must appear once"),
    (' world_size="4"', 'tiles="2,1" devices="0,1,2,7"', "devices: rank 7 is not below world_size 4"),
    (' world_size="3"', 'tiles="2,1"', "2 blocks cannot be shared evenly by world_size 3 ranks"),
    ('', 'tiles="2,1"', "Shard needs the graph's world_size"),
]
with tempfile.TemporaryDirectory() as tmp:
    for ws, attrs, msg in bad:
        f = os.path.join(tmp, "bad.xml")
        with open(f, "w") as fh:
            fh.write(SHARD.format(ws=ws, attrs=attrs))
        p = cf("check", f, want=1)
        if f"bad.xml:3: error: node 'xs': {msg}" not in p.stderr:
            fail(f"Shard {attrs}{ws}: expected '{msg}', got: {p.stderr}")
    # a good one, with replicas: 2 blocks over 4 ranks, ranks 3,1 hold block 0
    f = os.path.join(tmp, "good.xml")
    with open(f, "w") as fh:
        fh.write(SHARD.format(ws=' world_size="4"', attrs='tiles="1,2" devices="3,1,2,0"'))
    X = rng.standard_normal((8, 6)).astype(np.float32)
    run(f, {"x": X}, tmp)
    for d in range(4):
        k = [3, 1, 2, 0].index(d) // 2
        close(load(tmp, d, "o"), X[:, 3 * k:3 * k + 3].astype(np.float64), f"Shard rank {d}")

    # a sharding collfuse does not run keeps the entry Opaque, and says so
    src = open(os.path.join(SRC, "tests/hlo/shard_map_gspmd.hlo")).read()
    f = os.path.join(tmp, "maximal.hlo")
    with open(f, "w") as fh:
        fh.write(src.replace('s0 = f32[4,8]{1,0} custom-call(p0), custom_call_target="Sharding", '
                             'sharding={devices=[2,2]<=[2,2]T(1,0)}',
                             's0 = f32[4,8]{1,0} custom-call(p0), custom_call_target="Sharding", '
                             'sharding={maximal device=0}'))
    p = cf("check", f)
    if "warning: 1 node of foreign op 'custom-call:SPMDFullToShardShape' imported as Opaque (first 'm0')" not in p.stderr:
        fail(f"maximal sharding: no Opaque warning: {p.stderr}")
    cf("check", f, "--strict", want=1)

checks.finish("sharding.py")
