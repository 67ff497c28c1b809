#!/usr/bin/env python3
"""alltoall.py COLLFUSE [MPIRUN]: AllToAll and CollectivePermute against a
numpy model of XLA's definitions, on random data.

The model (written from the XLA operation semantics, independent of
collfuse's reference and algorithms):
  all-to-all, array form: out[k] = concatenate([split(in[t], n, sd)[k]
      for t in group order], cd)
  all-to-all, tuple form: out[k][t] = in[t][k]
  collective-permute: out[k] = in[s] for the pair {s,k}, zeros when k is no
      target.
Each graph holds one Input per dtype (all of collfuse's), an array-form
AllToAll with random split/concat dims, a tuple-form AllToAll and a
CollectivePermute with random pairs, plus AllReduces that the default
pipeline fuses into a bucket, so the new ops run inside a fused graph. The
array-form AllToAlls are fusion="1": the default pipeline buckets those of
equal split and concat dims (and group) into FusedAllToAll nodes, mixing
dtypes as bytes (one exchange per bucket); `compile --json` must show at
least one such bucket, and its outputs must equal the model all the same.
It runs at 2, 3, 4 and 8 ranks on the world group and on partitioned groups
({{0,1},{2,3}}-style), with the default pipeline and with -O0
--deterministic, on the threads backend and (with MPIRUN) under mpirun; the
outputs (--save-outputs) must equal the model bit for bit and --verify
must pass. Worlds of 2 and 4 ranks add a float32 AllToAll of about 4.7 MiB
a rank, whose output is written with streaming stores (from 4 MiB). A
descriptor that differs on one rank is exit 3 with the mismatch on every
rank. Exits 1 with one line per failure.
"""
import json
import os
import re
import subprocess
import sys
import tempfile
import time

import numpy as np

# time limits stretch on slow builds and busy machines (tests/CMakeLists.txt)
TIME_SCALE = int(os.environ.get("CF_TEST_TIME_SCALE", "1"))

DTYPES = ["int8", "uint8", "int16", "int32", "int64", "float16", "bfloat16", "float32", "float64",
          "uint16", "uint32", "uint64", "bool"]
failures = []


def fail(msg):
    failures.append(msg)
    print("FAIL: " + msg, file=sys.stderr)


def rand(rng, dt, shape):
    if dt == "bfloat16":  # raw 16-bit patterns (npy '<V2'); finite values only
        bits = rng.integers(0, 0x7F00, size=shape, dtype=np.uint16)
        return bits | (rng.integers(0, 2, size=shape, dtype=np.uint16) << 15)
    if dt.startswith("float"):
        return rng.standard_normal(shape).astype(dt)
    if dt == "bool":
        return rng.integers(0, 2, size=shape).astype(np.bool_)
    info = np.iinfo(dt)
    return rng.integers(info.min, info.max, size=shape, dtype=dt, endpoint=True)


def save(path, dt, a):
    if dt == "bfloat16":
        np.save(path, np.ascontiguousarray(a).view(np.dtype("V2")))
    else:
        np.save(path, a)


def bits(a):
    a = np.ascontiguousarray(a)
    return a.view(np.uint8).reshape(a.shape + (a.itemsize,)) if a.size else a


def model_alltoall(ins, sd, cd):
    n = len(ins)
    return [np.concatenate([np.split(ins[t], n, axis=sd)[k] for t in range(n)], axis=cd)
            for k in range(n)]


def model_permute(ins, pairs):
    out = [np.zeros_like(x) for x in ins]
    for s, t in pairs:
        out[t] = ins[s].copy()
    return out


def case(rng, world, parts):
    """A graph over world ranks whose collectives use groups of world/parts
    ranks (one part = the world group); returns (xml, inputs, expected)."""
    n = world // parts
    lines = [f'<graph name="a2a" version="1" world_size="{world}">']
    group = ""
    members = [list(range(world))]
    if parts > 1:
        order = list(rng.permutation(world))
        members = [sorted(order[p * n:(p + 1) * n]) for p in range(parts)]
        ranks = "|".join(",".join(str(r) for r in m) for m in members)
        lines.append(f'  <group name="g" ranks="{ranks}"/>')
        group = ' group="g"'
    inputs, expect = {}, {}
    for i, dt in enumerate(DTYPES):
        rank = int(rng.integers(1, 4))
        shape = [int(rng.integers(1, 4)) for _ in range(rank)]
        sd, cd = int(rng.integers(0, rank)), int(rng.integers(0, rank))
        shape[sd] *= n
        x = f"x{i}"
        data = {r: rand(rng, dt, tuple(shape)) for r in range(world)}
        inputs[x] = data
        sh = ",".join(map(str, shape))
        lines.append(f'  <node name="{x}" op="Input" dtype="{dt}" shape="{sh}"/>')
        lines.append(f'  <node name="a{i}" op="AllToAll" split_dimension="{sd}" '
                     f'concat_dimension="{cd}" fusion="1"{group}><input ref="{x}"/></node>')
        lines.append(f'  <node name="oa{i}" op="Output"><input ref="a{i}"/></node>')
        # tuple form: n operands of one type (the same Input n times is fine)
        ops = "".join(f'<input ref="{x}"/>' for _ in range(n))
        lines.append(f'  <node name="t{i}" op="AllToAll"{group}>{ops}</node>')
        for j in range(n):
            lines.append(f'  <node name="ot{i}_{j}" op="Output"><input ref="t{i}" port="{j}"/></node>')
        # permute: a random partial permutation of the group's positions
        src = list(rng.permutation(n))[:int(rng.integers(0, n + 1))]
        dst = list(rng.permutation(n))[:len(src)]
        pairs = [(int(s), int(t)) for s, t in zip(src, dst)]
        text = ",".join(f"{{{s},{t}}}" for s, t in pairs)
        lines.append(f'  <node name="p{i}" op="CollectivePermute" source_target_pairs="{text}"'
                     f'{group}><input ref="a{i}"/></node>')
        lines.append(f'  <node name="op{i}" op="Output"><input ref="p{i}"/></node>')
        for m in members:
            a = model_alltoall([data[r] for r in m], sd, cd)
            p = model_permute(a, pairs)
            for k, r in enumerate(m):
                expect[(r, f"oa{i}")] = a[k]
                expect[(r, f"op{i}")] = p[k]
                for j in range(n):
                    expect[(r, f"ot{i}_{j}")] = data[m[j]]  # out[k][t] = in[t][k]
    if world <= 4:  # large enough for the streaming copies
        sd, cd = int(rng.integers(0, 2)), int(rng.integers(0, 2))
        shape = [600, 600]
        shape[sd] = 2048 // n * n
        data = {r: rand(rng, "float32", tuple(shape)) for r in range(world)}
        inputs["big"] = data
        lines.append(f'  <node name="big" op="Input" dtype="float32" shape="{shape[0]},{shape[1]}"/>')
        lines.append(f'  <node name="abig" op="AllToAll" split_dimension="{sd}" '
                     f'concat_dimension="{cd}" fusion="1"{group}><input ref="big"/></node>')
        lines.append('  <node name="oabig" op="Output"><input ref="abig"/></node>')
        for m in members:
            a = model_alltoall([data[r] for r in m], sd, cd)
            for k, r in enumerate(m):
                expect[(r, "oabig")] = a[k]
    # AllReduces the default pipeline fuses into one bucket
    lines.append('  <node name="f" op="Input" dtype="float32" shape="64"/>')
    for j in range(3):
        lines.append(f'  <node name="ar{j}" op="AllReduce"><input ref="f"/></node>')
        lines.append(f'  <node name="oar{j}" op="Output"><input ref="ar{j}"/></node>')
    lines.append("</graph>")
    return "\n".join(lines) + "\n", inputs, expect


def run_env(mpirun):
    """The environment of a run: under the sanitizers, OpenMPI keeps
    allocations until exit, so runs under mpirun check everything but leaks
    (tests/e2e/mpi.sh leak-checks one run with OpenMPI's suppressions)."""
    env = dict(os.environ)
    if mpirun and "ASAN_OPTIONS" in env:
        env["ASAN_OPTIONS"] += ":detect_leaks=0"
    return env


def dtype_of(name):
    """x3, oa3, ot3_1, op3: DTYPES[3]; big, oabig: float32."""
    if name.endswith("big"):
        return "float32"
    return DTYPES[int(name[2 if name.startswith("o") else 1:].split("_")[0])]


def load_output(path, dt):
    a = np.load(path)
    if dt == "bfloat16":
        return a.view(np.uint16)
    return a


def check(cf, mpirun, world, parts, flags, rng, work, tag):
    xml, inputs, expect = case(rng, world, parts)
    d = os.path.join(work, tag)
    os.makedirs(d)
    gpath = os.path.join(d, "g.xml")
    with open(gpath, "w") as f:
        f.write(xml)
    args = []
    for x, data in inputs.items():
        dt = dtype_of(x)
        for r, a in data.items():
            save(os.path.join(d, f"{x}_{r}.npy"), dt, a)
        args += ["--input", f"{x}={os.path.join(d, x)}_{{rank}}.npy"]
    if "-O0" not in flags:  # the AllToAlls that share dims share a bucket
        p = subprocess.run([cf, "compile", gpath, "--json"] + flags, capture_output=True, text=True,
                           timeout=300 * TIME_SCALE, env=run_env(None))
        buckets = json.loads(p.stdout)["buckets"] if p.returncode == 0 else []
        if not any(b["op"] == "AllToAll" and len(b["members"]) > 1 and
                   all(m.startswith("a") for m in b["members"]) for b in buckets):
            fail(f"{tag}: no AllToAll bucket of several members: {p.stdout.strip()[:300]}"
                 f"{p.stderr.strip()[:300]}")
    outdir = os.path.join(d, "out")
    cmd = [cf, "run", gpath, "--verify", "--save-outputs", outdir] + args + flags
    if mpirun:
        cmd = ["timeout", "120", mpirun, "--allow-run-as-root", "--oversubscribe", "--bind-to", "none",
               "-np", str(world)] + cmd + ["--backend", "mpi"]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=300 * TIME_SCALE, env=run_env(mpirun))
    if p.returncode != 0:
        fail(f"{tag}: exit {p.returncode}: {p.stderr.strip()[:400]}")
        return
    if "verified" not in p.stdout:
        fail(f"{tag}: no 'verified' in {p.stdout.strip()!r}")
    with open(os.path.join(outdir, "outputs.json")) as f:
        meta = json.load(f)
    files = {}
    for o in meta["outputs"] if isinstance(meta, dict) and "outputs" in meta else meta:
        files[o["name"]] = o
    for (r, name), want in expect.items():
        dt = dtype_of(name)
        path = os.path.join(outdir, f"rank{r}", f"{name}.npy")
        if not os.path.exists(path):
            fail(f"{tag}: rank {r}: {name}.npy missing")
            continue
        got = load_output(path, dt)
        if got.shape != want.shape or not np.array_equal(bits(got), bits(want)):
            fail(f"{tag}: rank {r}: {name} ({dt}) differs from the model: got shape {got.shape}, "
                 f"want {want.shape}")


MISMATCH_XML = """<graph name="mm" version="1" world_size="4">
  <node name="x" op="Input" dtype="float32" shape="8,4"/>
  <node name="a" op="AllToAll" split_dimension="0" concat_dimension="1"><input ref="x"/></node>
  <node name="p" op="CollectivePermute" source_target_pairs="{0,1},{1,2}"><input ref="a"/></node>
  <node name="o" op="Output"><input ref="p"/></node>
</graph>
"""


def mismatch(cf, mpirun, work):
    """One rank's descriptor differs (the COLLFUSE_TEST_MISMATCH hook): every
    rank stops with exit 3 and the mismatch, well before the timeout. Rank 3
    is neither source nor target of the permute: only the handshake shows
    it its neighbours' descriptors."""
    gpath = os.path.join(work, "mismatch.xml")
    with open(gpath, "w") as f:
        f.write(MISMATCH_XML)
    # (which pair of ranks meets first varies: the text names the bad rank)
    cases = [("1:0:count", "AllToAll 'a'", r"count is (32|64) on rank \d but (32|64) on rank \d", 1),
             ("2:0:root", "AllToAll 'a'",
              r"split/concat dimensions is [01]/1 on rank \d but [01]/1 on rank \d", 2),
             ("3:1:count", "CollectivePermute 'p'", r"count is (32|64) on rank \d but (32|64) on rank \d", 3)]
    for hook, op, what, bad in cases:
        tag = f"{'mpi' if mpirun else 'threads'} mismatch {hook}"
        # a long timeout: a busy machine may take seconds to run the ranks,
        # while a mismatch seen only by the timeout would take all 60
        cmd = [cf, "run", gpath, "-O0", "--timeout", "60"]
        env = dict(run_env(mpirun), COLLFUSE_TEST_MISMATCH=hook)
        if mpirun:
            cmd = ["timeout", "120", mpirun, "--allow-run-as-root", "--oversubscribe", "--bind-to",
                   "none", "-x", "COLLFUSE_TEST_MISMATCH", "-np", "4"] + cmd + ["--backend", "mpi"]
        t0 = time.monotonic()
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=300 * TIME_SCALE, env=env)
        took = time.monotonic() - t0
        pat = re.compile(r"error: cross-rank mismatch in " + re.escape(op) + r" \(collective #\d+ of group "
                         r"'hccl_world_group'\): " + what)
        said = [m.group(0) for m in pat.finditer(p.stderr)]
        if p.returncode != 3:
            fail(f"{tag}: exit {p.returncode}, want 3: {p.stderr.strip()[:300]}")
        elif not said or not all(f"rank {bad}" in m for m in said):
            fail(f"{tag}: stderr does not name the mismatch at rank {bad}: {p.stderr.strip()[:300]}")
        elif mpirun and len(said) != 4:
            fail(f"{tag}: {len(said)} of 4 ranks said why: {p.stderr.strip()[:300]}")
        if took > 30 * TIME_SCALE:
            fail(f"{tag}: took {took:.1f} s: a timeout, not a mismatch")


def main():
    if len(sys.argv) not in (2, 3):
        print("usage: alltoall.py COLLFUSE [MPIRUN]", file=sys.stderr)
        return 2
    cf = os.path.abspath(sys.argv[1])
    mpirun = sys.argv[2] if len(sys.argv) == 3 else None
    rng = np.random.default_rng(19)
    with tempfile.TemporaryDirectory(prefix="cf-a2a.") as work:
        if mpirun:
            for world, parts in ((2, 1), (4, 2)):
                check(cf, mpirun, world, parts, [], rng, work, f"mpi-{world}x{parts}")
            check(cf, mpirun, 4, 1, ["-O0", "--deterministic"], rng, work, "mpi-4-O0-det")
            mismatch(cf, mpirun, work)
        else:
            for world, parts in ((2, 1), (3, 1), (4, 1), (8, 1), (4, 2), (8, 2), (8, 4)):
                check(cf, None, world, parts, [], rng, work, f"threads-{world}x{parts}")
                check(cf, None, world, parts, ["-O0", "--deterministic"], rng, work,
                      f"threads-{world}x{parts}-O0-det")
            mismatch(cf, None, work)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
