#!/usr/bin/env python3
"""gather_dims.py COLLFUSE [MPIRUN]: AllGather and ReduceScatter along any
dimension (dim=, XLA's all_gather_dimension / scatter_dimension) against a
numpy model, on random data.

The model (XLA's operation semantics, independent of collfuse's reference
and algorithms):
  all-gather along d:     out = concatenate([in[t] for t in group order], d)
  reduce-scatter along d: out[k] = split(reduce(in[t] for all t), n, d)[k]
  all-reduce:             out = reduce(in[t] for all t)
  broadcast from root:    out = in[root]
Reductions are computed in the dtype: integers wrap, numpy's bool add is
or and multiply and (XLA's pred); float sums in float64.
Each graph holds AllGathers, ReduceScatters, AllReduces and Broadcasts of
random ranks (1 to 4 dims) along random dims, several on one dim (so the
default pipeline buckets them: a bucket's members share their dim), with
random dtypes (every one numpy has: the unsigned ones and bool too) and
reductions. It runs at 2, 3 and 4 ranks, with the default pipeline, with
`--split auto,any_dim` (buckets across dimensions, each member gathered or
scattered along its own) and with -O0, on the threads backend and (with MPIRUN) under mpirun; the outputs
(--save-outputs) must equal the model byte for byte (a bool is 0 or 1;
float sums within 1e-5 relative, since the ranks' order of a sum is the
algorithm's) and --verify must pass. The
graphs' errors (dim outside the input, stack layout with a dim, a dim not
divisible by the group) are exit 1 naming the node.
"""
import os
import random
import subprocess
import sys
import tempfile

import numpy as np

CLI = sys.argv[1]
MPIRUN = sys.argv[2] if len(sys.argv) > 2 else None
DTYPES = ["int8", "uint8", "int16", "int32", "int64", "float16", "float32", "float64",
          "uint16", "uint32", "uint64", "bool"]
failures = []
# integers wrap in their dtype; bool's sum is or, its prod and
COMBOS = [(dt, red) for dt in DTYPES
          for red in (["sum", "max", "min"] if dt.startswith("float") else ["sum", "prod", "max", "min"])]
TURN = [0]


def np_dtype(dt):
    return np.dtype(dt)


def make_case(rng, n):
    nodes, outs, model = [], [], []
    for k in range(rng.randint(3, 7)):
        rank = rng.randint(1, 4)
        shape = [rng.randint(1, 4) for _ in range(rank)]
        dim = rng.randrange(rank) if k % 3 else min(1, rank - 1)
        dt = rng.choice(DTYPES)
        kind = rng.choice(["AllGather", "ReduceScatter", "ReduceScatter", "AllReduce", "Broadcast"])
        red = "sum"
        if kind in ("ReduceScatter", "AllReduce"):
            if kind == "ReduceScatter":
                shape[dim] *= n
            # every (dtype, reduction) in turn, so each is met in a run
            dt, red = COMBOS[TURN[0] % len(COMBOS)]
            TURN[0] += 1
        name = f"x{k}"
        nodes.append(f'  <node name="{name}" op="Input" dtype="{dt}" shape="{",".join(map(str, shape))}"/>')
        root = rng.randrange(n)
        attrs = {"AllGather": f'dim="{dim}" layout="concat"',
                 "ReduceScatter": f'dim="{dim}" reduction="{red}"',
                 "AllReduce": f'reduction="{red}"', "Broadcast": f'root="{root}"'}[kind]
        if kind == "Broadcast":
            dim = root  # the model's one number: the root
        fusion = ' fusion="1"' if kind != "Broadcast" else ""
        nodes.append(f'  <node name="c{k}" op="{kind}" {attrs}{fusion}><input ref="{name}"/></node>')
        nodes.append(f'  <node name="o{k}" op="Output"><input ref="c{k}"/></node>')
        model.append((name, kind, dim, dt, red, tuple(shape)))
    xml = ['<?xml version="1.0" encoding="UTF-8"?>', f'<graph name="dims" world_size="{n}">']
    return "\n".join(xml + nodes + ["</graph>"]) + "\n", model


def expected(kind, dim, red, ins, k):
    if kind == "AllGather":
        return np.concatenate(ins, axis=dim)
    if kind == "Broadcast":
        return ins[dim]
    # in the dtype (integers wrap; numpy's bool add is or, multiply and),
    # float sums in float64
    f = {"sum": np.add, "prod": np.multiply, "max": np.maximum, "min": np.minimum}[red]
    wide = red == "sum" and ins[0].dtype.kind == "f"
    acc = ins[0].astype(np.float64) if wide else ins[0]
    with np.errstate(over="ignore"):
        for x in ins[1:]:
            acc = f(acc, x.astype(np.float64) if wide else x)
    return acc if kind == "AllReduce" else np.split(acc, len(ins), axis=dim)[k]


def run_case(tmp, rng, n, seed, mpi):
    xml, model = make_case(rng, n)
    path = os.path.join(tmp, "g.xml")
    with open(path, "w") as f:
        f.write(xml)
    ins, args = {}, []
    for name, kind, dim, dt, red, shape in model:
        ins[name] = []
        for r in range(n):
            if dt.startswith("float"):
                a = np.random.default_rng(seed * 100 + r).standard_normal(shape).astype(dt)
            elif dt == "bool":
                a = np.random.default_rng(seed * 100 + r).integers(0, 2, shape).astype(np.bool_)
            else:
                info = np.iinfo(dt)
                a = np.random.default_rng(seed * 100 + r).integers(info.min, info.max, shape, dtype=dt)
            np.save(os.path.join(tmp, f"{name}_{r}.npy"), a)
            ins[name].append(a)
        args += ["--input", f"{name}={os.path.join(tmp, name)}_{{rank}}.npy"]
    for extra in ([], ["--split", "auto,any_dim"], ["-O0"]):
        out = os.path.join(tmp, "out")
        cmd = [CLI, "run", path, "--verify", "--save-outputs", out] + args + extra
        if mpi:
            cmd = [mpi, "--allow-run-as-root", "--oversubscribe", "-n", str(n)] + cmd + ["--backend", "mpi"]
        else:
            cmd += ["--ranks", str(n)]
        # under the sanitizers OpenMPI keeps allocations until exit: runs
        # under mpirun check everything but leaks (as tests/e2e/alltoall.py)
        env = dict(os.environ)
        if mpi and "ASAN_OPTIONS" in env:
            env["ASAN_OPTIONS"] += ":detect_leaks=0"
        p = subprocess.run(cmd, capture_output=True, text=True, env=env,
                           timeout=300 * int(os.environ.get("CF_TEST_TIME_SCALE", "1")))
        if p.returncode:
            failures.append(f"{' '.join(cmd)}: exit {p.returncode}: {p.stderr.strip()}\n{xml}")
            return
        for k, (name, kind, dim, dt, red, shape) in enumerate(model):
            for r in range(n):
                got = np.load(os.path.join(out, f"rank{r}", f"o{k}.npy"))
                want = expected(kind, dim, red, ins[name], r)
                ok = got.shape == want.shape and (
                    np.allclose(got.astype(np.float64), want, rtol=1e-5 if dt != "float16" else 1e-2,
                                atol=1e-6 if dt != "float16" else 1e-2)
                    if red == "sum" and kind in ("ReduceScatter", "AllReduce") and dt.startswith("float")
                    else np.array_equal(got.view(np.uint8), np.ascontiguousarray(want).view(np.uint8)))
                if not ok:
                    failures.append(f"{kind} dim={dim} {dt} {red} on {n} ranks {extra}: rank {r} "
                                    f"differs from the model\n{xml}")
                    return


def errors(tmp):
    cases = [
        ('<node name="ag" op="AllGather" layout="concat" dim="2"><input ref="x"/></node>',
         "node 'ag': dim=2 is not a dimension of the 2-D input"),
        ('<node name="ag" op="AllGather" dim="1"><input ref="x"/></node>',
         "node 'ag': dim=1 needs layout=\"concat\""),
        ('<node name="rs" op="ReduceScatter" dim="1"><input ref="x"/></node>',
         "node 'rs': dim 1 (3) is not divisible by rank_size=2"),
    ]
    for node, want in cases:
        path = os.path.join(tmp, "bad.xml")
        with open(path, "w") as f:
            f.write('<?xml version="1.0"?>\n<graph name="bad" world_size="2">\n'
                    '  <node name="x" op="Input" dtype="float32" shape="4,3"/>\n'
                    f'  {node}\n</graph>\n')
        p = subprocess.run([CLI, "check", path], capture_output=True, text=True)
        if p.returncode != 1 or want not in p.stderr or "bad.xml:4:" not in p.stderr:
            failures.append(f"check {node}: exit {p.returncode}, stderr {p.stderr!r}, want {want!r}")


def main():
    rng = random.Random(int(os.environ.get("CF_TEST_SEED", "7")))
    runs = 0
    with tempfile.TemporaryDirectory() as tmp:
        errors(tmp)
        for seed in range(6):
            for n in (2, 3, 4):
                run_case(tmp, rng, n, seed, None)
                runs += 1
        if MPIRUN:
            for n in (2, 4):
                run_case(tmp, rng, n, 99 + n, MPIRUN)
                runs += 1
    for f in failures:
        print("FAIL", f)
    if failures:
        sys.exit(1)
    print(f"ok: {runs} graphs gather and scatter along any dimension as numpy does")


main()
