#!/usr/bin/env python3
"""gen_random_graphs.py OUTDIR COUNT [SEED]

Writes COUNT random collfuse graphs (native XML) to OUTDIR/rand<i>.xml for the
determinism checks of tests/e2e/run.sh: many AllReduces with random
fusion/fusion_id/dtype/shape/reduction (so the fusion passes and every --split
spec build different buckets), AllGathers in both layouts and ReduceScatters
(some fused by fusion_id), and compute between them: a MatMul feeding a
collective and an AllGather feeding a MatMul (the default pipeline makes them
MatmulAllReduce, MatmulReduceScatter, AllGatherMatmul), Add/Mul of
collective results feeding another AllReduce (chains the combiner must keep
apart). Every collective uses the world group, so
every output is defined on every rank and fused and unfused runs can be
compared byte for byte. Sizes stay small: the whole set runs in seconds.

The same SEED always gives the same graphs (Python's random module only; no
numpy), so a failure can be reproduced from the test log.
"""
import os
import random
import sys

FLOATS = ["float32", "float32", "float32", "float16", "bfloat16", "float64"]
INTS = ["int32", "int8"]
REDUCTIONS = ["sum", "sum", "mean", "max", "min", "prod"]


def shape_text(shape):
    return ",".join(str(d) for d in shape)


def elements(shape):
    n = 1
    for d in shape:
        n *= d
    return n


def gen(rng, index):
    world = rng.choice([2, 3, 4, 4])
    lines = []
    outputs = []
    nodes = set()
    fid_space = rng.randint(1, 3)

    def name(prefix):
        k = len(nodes)
        while True:
            # some names have '/' like exported gradients: --save-outputs maps it to '_'
            n = "%s%d" % (prefix, k) if rng.random() < 0.8 else "grad/%s.%d" % (prefix, k)
            if n not in nodes:
                nodes.add(n)
                return n
            k += 1

    def node(op, ins=(), **attrs):
        n = name({"Input": "g", "AllReduce": "ar", "AllGather": "ag", "ReduceScatter": "rs",
                  "MatMul": "mm", "Add": "add", "Mul": "mul"}.get(op, "n"))
        a = "".join(" %s='%s'" % (k, v) for k, v in attrs.items())
        body = "".join("<input ref='%s'/>" % i for i in ins)
        lines.append("  <node name='%s' op='%s'%s>%s</node>" % (n, op, a, body))
        return n

    def fusion_attrs():
        r = rng.random()
        if r < 0.2:
            return {"fusion": "0"}
        if r < 0.55:
            return {"fusion": "2", "fusion_id": str(rng.randrange(fid_space))}
        return {"fusion": "1"} if r < 0.75 else {}  # AllReduce's default is fusion=1

    def rand_shape(max_elems=3000):
        rank = rng.choice([1, 1, 2, 2, 3])
        while True:
            s = [rng.choice([1, 2, 3, 5, 7, 8, 16, 33, 64, 100, 129]) for _ in range(rank)]
            if elements(s) <= max_elems:
                return s

    def allreduce(src, dtype, shape):
        red = rng.choice(REDUCTIONS)
        if dtype in ("float16", "bfloat16") and red == "prod" and world > 3:
            red = "max"
        attrs = {"reduction": red}
        attrs.update(fusion_attrs())
        return node("AllReduce", [src], **attrs)

    values = []  # (name, dtype, shape) of float32 collective results for chains
    n_grads = rng.randint(8, 20)
    for _ in range(n_grads):
        dtype = rng.choice(FLOATS + INTS) if rng.random() < 0.9 else "int32"
        shape = rand_shape()
        g = node("Input", dtype=dtype, shape=shape_text(shape))
        src = g
        if dtype == "float32" and rng.random() < 0.25:  # a MatMul makes the gradient
            m, k, n = rng.choice([2, 4, 8, 12]), rng.choice([3, 16, 31]), rng.choice([1, 5, 32])
            a = node("Input", dtype="float32", shape="%d,%d" % (m, k))
            b = node("Input", dtype="float32", shape="%d,%d" % (k, n))
            src = node("MatMul", [a, b])
            shape = [m, n]
            if rng.random() < 0.3:
                outputs.append(src)
        ar = allreduce(src, dtype, shape)
        outputs.append(ar)
        if dtype == "float32":
            values.append((ar, shape))

    # chains: compute on collective results feeding another AllReduce
    for _ in range(rng.randint(0, 3)):
        if len(values) < 2:
            break
        (x, sx) = rng.choice(values)
        same = [v for v in values if v[1] == sx and v[0] != x]
        y = rng.choice(same)[0] if same else x
        c = node(rng.choice(["Add", "Mul"]), [x, y])
        ar = node("AllReduce", [c], reduction=rng.choice(["sum", "mean", "max"]))
        outputs.append(ar)
        values.append((ar, sx))

    # AllGather, both layouts, some fused by fusion_id
    for _ in range(rng.randint(0, 4)):
        dtype = rng.choice(FLOATS + INTS)
        shape = rand_shape(500)
        g = node("Input", dtype=dtype, shape=shape_text(shape))
        attrs = {"layout": rng.choice(["concat", "stack"])}
        if rng.random() < 0.6:
            attrs.update({"fusion": "2", "fusion_id": str(rng.randrange(2))})
        outputs.append(node("AllGather", [g], **attrs))

    # AllGather (concat) feeding a MatMul: AllGatherMatmul after fusion
    for _ in range(rng.randint(0, 2)):
        k = rng.choice([3, 16, 40])
        x = node("Input", dtype="float32", shape="%d,%d" % (rng.choice([1, 2, 5, 8]), k))
        w = node("Input", dtype="float32", shape="%d,%d" % (k, rng.choice([1, 4, 17])))
        ag = node("AllGather", [x], layout="concat")
        outputs.append(node("MatMul", [ag, w]))

    # ReduceScatter: dim0 divisible by the world; sometimes of a MatMul
    for _ in range(rng.randint(0, 4)):
        dtype = rng.choice(["float32", "float32", "float16", "int32", "float64"])
        rows = world * rng.choice([1, 2, 3, 8])
        if dtype == "float32" and rng.random() < 0.4:
            k = rng.choice([4, 16, 40])
            a = node("Input", dtype="float32", shape="%d,%d" % (rows, k))
            b = node("Input", dtype="float32", shape="%d,%d" % (k, rng.choice([2, 8, 17])))
            src = node("MatMul", [a, b])
        else:
            src = node("Input", dtype=dtype, shape="%d,%d" % (rows, rng.choice([1, 3, 16])))
        attrs = {"reduction": rng.choice(["sum", "max", "min"] if dtype != "float16" else ["sum", "max"])}
        if rng.random() < 0.6:
            attrs.update({"fusion": "2", "fusion_id": str(rng.randrange(2))})
        outputs.append(node("ReduceScatter", [src], **attrs))

    for o in outputs:
        lines.append("  <node name='out/%s' op='Output'><input ref='%s'/></node>" % (o, o))
    head = ("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
            "<!-- generated by tests/e2e/gen_random_graphs.py, graph %d -->\n"
            "<graph name=\"rand%d\" version=\"1\" world_size=\"%d\">\n" % (index, index, world))
    return head + "\n".join(lines) + "\n</graph>\n"


def main():
    if len(sys.argv) not in (3, 4):
        sys.stderr.write(__doc__)
        return 2
    out, count = sys.argv[1], int(sys.argv[2])
    seed = int(sys.argv[3]) if len(sys.argv) == 4 else 1
    rng = random.Random(seed)
    os.makedirs(out, exist_ok=True)
    for i in range(count):
        with open(os.path.join(out, "rand%d.xml" % i), "w") as f:
            f.write(gen(rng, i))
    return 0


if __name__ == "__main__":
    sys.exit(main())
