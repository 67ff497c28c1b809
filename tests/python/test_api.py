#!/usr/bin/python3
"""The collfuse Python package over libcollfuse.so (ctest e2e/python_api).

Run with Debian's python3 and python3-numpy: COLLFUSE_LIBRARY points at the
build's library and PYTHONPATH at python/ (tests/CMakeLists.txt sets both).
"""

import os
import pathlib
import resource
import signal
import subprocess
import sys
import tempfile
import threading
import unittest

try:
    import numpy as np
except ImportError:
    sys.exit("test_api.py: numpy is missing: install python3-numpy (scripts/install-deps)")

import collfuse

SRC = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# ctest's CF_TEST_TIME_SCALE (tests/CMakeLists.txt): slow or busy machines
TIME_SCALE = int(os.environ.get("CF_TEST_TIME_SCALE", "1"))


def dp_graph(ranks=4, n=20, elems=1000, reduction="mean"):
    g = collfuse.Graph("dp", world_size=ranks)
    for i in range(n):
        g.input("g%d" % i, "float32", (elems + i,))
        g.output("o%d" % i, g.all_reduce("g%d" % i, reduction=reduction))
    return g


class TestBasics(unittest.TestCase):
    def test_version(self):
        self.assertRegex(collfuse.version(), r"^\d+\.\d+\.\d+$")
        major, minor, patch = (int(x) for x in collfuse.version().split("."))
        self.assertEqual(collfuse.version_number(), major * 10000 + minor * 100 + patch)
        self.assertIn("atlas-a2", collfuse.targets())

    def test_errors_have_messages(self):
        g = collfuse.Graph("bad", world_size=2)
        with self.assertRaises(collfuse.CollfuseError) as e:
            g.op("Frobnicate", (), "f")
        self.assertEqual(e.exception.status, "invalid")
        self.assertIn("node 'f': unknown op 'Frobnicate'", str(e.exception))
        g.input("x", "float32", (4,))
        with self.assertRaises(collfuse.CollfuseError) as e:
            g.all_reduce("x", reduction="median", name="ar")
        self.assertIn("unknown reduction 'median'", str(e.exception))
        self.assertEqual(g.node_count, 1)  # the failed add left nothing behind
        g.all_reduce("x", fusion=2, name="ar")
        g.output("y", "ar")
        with self.assertRaises(collfuse.CollfuseError) as e:
            g.verify()
        self.assertIn("node 'ar': fusion=2 needs fusion_id >= 0", str(e.exception))
        with self.assertRaises(collfuse.CollfuseError) as e:
            g.compile(split="bytes:lots")
        self.assertEqual(e.exception.status, "usage")
        with self.assertRaises(collfuse.CollfuseError) as e:
            collfuse.load("/nonexistent/graph.xml")
        self.assertEqual(e.exception.status, "io")

    def test_load_example(self):
        g = collfuse.load(os.path.join(SRC, "examples", "dp_gradients.xml"))
        before = g.collective_count
        exe = g.compile()  # the graph says world_size 8
        self.assertLess(g.collective_count, before)
        outs = exe.run()
        self.assertEqual(len(outs), 8)
        self.assertEqual(set(outs[0]), {n for n, _, _ in exe.outputs})
        dot = g.to_dot()
        self.assertTrue(dot.startswith("digraph"))
        with tempfile.TemporaryDirectory() as d:
            g.to_dot(os.path.join(d, "g.svg"))
            with open(os.path.join(d, "g.svg")) as f:
                self.assertIn("<svg", f.read())
            g.write_xml(os.path.join(d, "g.xml"))
            back = collfuse.load(os.path.join(d, "g.xml"))
            self.assertEqual(back.collective_count, g.collective_count)
        self.assertIn("<graph", g.to_xml())


    def test_comma_names(self):
        # a bucket's members are a list: names holding ',' (or ending in a backslash)
        # come back whole from buckets(), as `compile --json` lists them
        xml = """<graph name="comma" world_size="2">
  <node name="x" op="Input" dtype="float32" shape="8"/>
  <node name="y" op="Input" dtype="float32" shape="4"/>
  <node name="a" op="Input" dtype="float32" shape="4,8"/>
  <node name="b" op="Input" dtype="float32" shape="8,6"/>
  <node name="grad,1" op="AllReduce"><input ref="x"/></node>
  <node name="grad\\" op="AllReduce"><input ref="y"/></node>
  <node name="mm,1" op="MatMul"><input ref="a"/><input ref="b"/></node>
  <node name="rs,1" op="ReduceScatter"><input ref="mm,1"/></node>
  <node name="ag,1" op="AllGather"><input ref="x"/></node>
  <node name="o1" op="Output"><input ref="grad,1"/></node>
  <node name="o2" op="Output"><input ref="grad\\"/></node>
  <node name="o3" op="Output"><input ref="rs,1"/></node>
  <node name="o4" op="Output"><input ref="ag,1"/></node>
</graph>
"""
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "comma.xml")
            with open(path, "w") as f:
                f.write(xml)
            g = collfuse.load(path)
            g.compile()
            got = sorted((b["members"], b.get("matmuls")) for b in g.buckets())
            self.assertEqual(got, [(["ag,1"], None), (["grad,1", "grad\\"], None),
                                   (["rs,1"], ["mm,1"])])


class TestRun(unittest.TestCase):
    def test_dp_fused_mean(self):
        R, n = 4, 20
        g = dp_graph(R, n)
        exe = g.compile(split="bytes:16K")
        buckets = g.buckets()
        self.assertLess(len(buckets), n)
        self.assertEqual(sum(len(b["members"]) for b in buckets), n)
        for b in buckets:
            self.assertEqual(b["reduction"], "mean")
            self.assertEqual(b["op"], "FusedAllReduce" if len(b["members"]) > 1 else "AllReduce")
        rng = np.random.default_rng(1)
        ins = [{"g%d" % i: rng.integers(-8, 8, 1000 + i).astype(np.float32) for i in range(n)} for _ in range(R)]
        outs = exe.run(ins)
        for i in range(n):
            want = sum(ins[r]["g%d" % i] for r in range(R)) / R
            for r in range(R):
                np.testing.assert_array_equal(outs[r]["o%d" % i], want.astype(np.float32))
        self.assertFalse(exe.in_place("g0"))  # bucket members are copied into the bucket
        self.assertGreater(exe.last_time_ms, 0)

    def test_run_trace(self):
        """run(trace=FILE) writes that run's timeline (a Chrome trace: a
        process per rank, the buckets' events naming their members), and
        the next run without trace= writes nothing."""
        import json
        R, n = 4, 12
        g = dp_graph(R, n, reduction="sum")
        exe = g.compile(split="bytes:16K")
        rng = np.random.default_rng(3)
        ins = [{"g%d" % i: rng.standard_normal(1000 + i).astype(np.float32) for i in range(n)} for _ in range(R)]
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "step.json")
            outs = exe.run(ins, trace=path)
            want = sum(ins[r]["g0"].astype(np.float64) for r in range(R))
            np.testing.assert_allclose(outs[1]["o0"], want, rtol=1e-5, atol=1e-5)
            with open(path) as f:
                t = json.load(f)
            procs = {e["pid"] for e in t["traceEvents"] if e["ph"] == "M" and e["name"] == "process_name"}
            self.assertEqual(procs, set(range(R + 1)))  # the ranks and the driver
            colls = [e for e in t["traceEvents"] if e["ph"] == "X" and e["cat"] == "collective"]
            self.assertEqual(len(colls), R * len(g.buckets()))
            mine = [e for e in colls if e["pid"] == 1]  # each gradient in one bucket of rank 1's
            self.assertEqual(sum(len(e["args"].get("members", [e["name"]])) for e in mine), n)
            self.assertEqual(sorted(e["name"] for e in mine), sorted(b["name"] for b in g.buckets()))
            os.unlink(path)
            exe.run(ins)
            self.assertFalse(os.path.exists(path))
        with self.assertRaises(collfuse.CollfuseError):
            exe.run(ins, trace="-")

    def test_sequence_inputs_and_seed(self):
        g = dp_graph(2, 3, 16, "sum")
        exe = g.compile(seed=7)
        a = exe.run()
        b = exe.run([None, None])
        for r in range(2):
            for k in a[r]:
                np.testing.assert_array_equal(a[r][k], b[r][k])
        names = [n for n, _, _ in exe.inputs]
        seq = [[np.full(s, r + 1, np.float32) for (_, _, s) in exe.inputs] for r in range(2)]
        c = exe.run(seq)
        np.testing.assert_array_equal(c[1]["o0"], np.full(16, 3, np.float32))
        self.assertEqual(names[0], "g0")
        with self.assertRaises(ValueError):
            exe.run([{"g0": np.zeros(5, np.float32)}, None])
        with self.assertRaises(KeyError):
            exe.run([{"nope": np.zeros(16, np.float32)}, None])
        with self.assertRaises(collfuse.CollfuseError) as e:
            exe.run([{"g0": np.zeros(16, np.float32)}, None])  # one rank only
        self.assertIn("no buffer for rank 1", str(e.exception))

    def test_tp_in_place_and_dtypes(self):
        R, m, k, n = 4, 8, 6, 4
        g = collfuse.Graph("tp", world_size=R)
        g.input("x", "float64", (m, k))
        g.input("w", "float64", (k, n))
        y = g.reduce_scatter(g.matmul("x", "w", name="mm"), name="rs")
        z = g.all_gather(y, layout="concat", name="ag")
        g.output("y", y)
        g.output("z", z)
        exe = g.compile(deterministic=True)
        for name in ("x", "w", "y", "z"):
            self.assertTrue(exe.in_place(name), name)
        rng = np.random.default_rng(3)
        xs = [rng.standard_normal((m, k)) for _ in range(R)]
        ws = [rng.standard_normal((k, n)) for _ in range(R)]
        outs = exe.run([{"x": xs[r], "w": ws[r]} for r in range(R)])
        total = sum(xs[r] @ ws[r] for r in range(R))
        for r in range(R):
            np.testing.assert_allclose(outs[r]["y"], total[r * m // R:(r + 1) * m // R], rtol=1e-12, atol=1e-12)
            np.testing.assert_allclose(outs[r]["z"], total, rtol=1e-12, atol=1e-12)

    def test_all_to_all_and_permute(self):
        """XLA's definitions, as numpy: all_to_all(x, sd, cd) on rank k is the
        concatenation along cd of block k (along sd) of every rank's x; the
        tuple form's result i on rank k is operand k of rank i; a permute
        target gets its source's x, other ranks zeros."""
        R = 4
        g = collfuse.Graph("a2a", world_size=R)
        g.define_group("pairs", [[0, 1], [2, 3]])
        g.input("x", "float32", (8, 3))
        g.input("t0", "int16", (5,))
        g.input("t1", "int16", (5,))
        g.output("a", g.all_to_all("x", split_dimension=0, concat_dimension=1, name="a2a"))
        tup = g.all_to_all(["t0", "t1"], group="pairs", name="tup")
        g.output("u0", tup + ":0")
        g.output("u1", tup + ":1")
        g.output("p", g.collective_permute("x", [(0, 1), (1, 3), (3, 0)], name="perm"))
        self.assertEqual(g.attr("perm", "source_target_pairs"), "{0,1},{1,3},{3,0}")
        exe = g.compile()
        rng = np.random.default_rng(19)
        xs = [rng.standard_normal((8, 3)).astype(np.float32) for _ in range(R)]
        ts = [[rng.integers(-999, 999, 5).astype(np.int16) for _ in range(2)] for _ in range(R)]
        outs = exe.run([{"x": xs[r], "t0": ts[r][0], "t1": ts[r][1]} for r in range(R)])
        parts = [[0, 1], [2, 3]]
        for k in range(R):
            want = np.concatenate([np.split(xs[t], R, axis=0)[k] for t in range(R)], axis=1)
            np.testing.assert_array_equal(outs[k]["a"], want)
            part = parts[k // 2]
            me = part.index(k)
            np.testing.assert_array_equal(outs[k]["u0"], ts[part[0]][me])
            np.testing.assert_array_equal(outs[k]["u1"], ts[part[1]][me])
        src = {1: 0, 3: 1, 0: 3}
        for k in range(R):
            want = xs[src[k]] if k in src else np.zeros((8, 3), np.float32)
            np.testing.assert_array_equal(outs[k]["p"], want)

    def test_bfloat16_and_ints(self):
        g = collfuse.Graph("types", world_size=2)
        g.input("b", "bfloat16", (5,))
        g.input("i", "int8", (5,))
        g.output("bs", g.all_reduce("b", fusion=0))
        g.output("im", g.all_reduce("i", reduction="max", fusion=0))
        exe = g.compile()
        vals = np.array([1.0, -2.5, 3.0, 0.5, 100.0], np.float32)
        outs = exe.run([{"b": vals, "i": np.arange(5, dtype=np.int8)},
                        {"b": collfuse.float32_to_bf16(vals), "i": -np.arange(5, dtype=np.int8)}])
        self.assertEqual(outs[0]["bs"].dtype, np.uint16)  # bfloat16 raw bits
        np.testing.assert_array_equal(collfuse.bf16_to_float32(outs[0]["bs"]), 2 * vals)
        np.testing.assert_array_equal(outs[1]["im"], np.arange(5, dtype=np.int8))

    def test_partitioned_group(self):
        """define_group with parts: each part is its own communicator."""
        g = collfuse.Graph("parts", world_size=4)
        g.define_group("cols", [[0, 2], [1, 3]])
        g.input("x", "int32", (5,))
        g.output("s", g.all_reduce("x", reduction="sum", group="cols", fusion=0))
        exe = g.compile()
        xs = [np.arange(5, dtype=np.int32) * (r + 1) + 100 * r for r in range(4)]
        outs = exe.run([{"x": x} for x in xs])
        for r in range(4):
            np.testing.assert_array_equal(outs[r]["s"], xs[r % 2] + xs[r % 2 + 2])
        with self.assertRaises(ValueError):
            g.define_group("bad", [[0, 1], [2]])

    def test_run_rank_range(self):
        """run_rank under mpirun is tested by tests/e2e/api_mpi.c; a rank out
        of range is refused before MPI is touched."""
        g = dp_graph(2, 2, 8, "sum")
        exe = g.compile()
        with self.assertRaises(collfuse.CollfuseError) as cm:
            exe.run_rank(2, {"g0": np.ones(8, np.float32), "g1": np.ones(9, np.float32)})
        self.assertEqual(cm.exception.status, "usage")
        self.assertIn("rank 2 is not a rank of this 2-rank executable", str(cm.exception))

    def test_two_threads(self):
        """Graphs in two Python threads (two contexts) compile and run at once."""
        errors = []

        def work(kind):
            try:
                for _ in range(3):
                    if kind == "dp":
                        g = dp_graph(4, 30, 300, "sum")
                        exe = g.compile(explain=True)
                        ins = [{"g%d" % i: np.full(300 + i, r, np.float32) for i in range(30)} for r in range(4)]
                        outs = exe.run(ins)
                        for r in range(4):
                            np.testing.assert_array_equal(outs[r]["o7"], np.full(307, 6, np.float32))
                    else:
                        g = collfuse.Graph("tp", world_size=4)
                        g.input("x", "float32", (16, 8))
                        g.input("w", "float32", (8, 4))
                        g.output("y", g.reduce_scatter(g.matmul("x", "w")))
                        exe = g.compile()
                        xs = [np.ones((16, 8), np.float32) * (r + 1) for r in range(4)]
                        outs = exe.run([{"x": xs[r], "w": np.ones((8, 4), np.float32)} for r in range(4)])
                        np.testing.assert_array_equal(outs[3]["y"], np.full((4, 4), 80, np.float32))
            except Exception as e:  # reported by the main thread
                errors.append("%s: %r" % (kind, e))

        ts = [threading.Thread(target=work, args=(k,)) for k in ("dp", "tp")]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        self.assertEqual(errors, [])

    def test_log_callback(self):
        lines = []
        ctx = collfuse.Context(log=lambda level, msg: lines.append((level, msg)))
        g = collfuse.Graph("dp", world_size=2, context=ctx)
        for i in range(4):
            g.input("g%d" % i, "float32", (8,))
            g.output("o%d" % i, g.all_reduce("g%d" % i))
        g.run_pipeline(explain=True)
        explain = [m for lv, m in lines if m.startswith("explain: ")]
        self.assertEqual(len(explain), 4)


STALE = "graph 'dp' was changed after this executable was made from it"


class TestBucketViews(unittest.TestCase):
    """DDP's gradient_as_bucket_view with numpy views into the buckets."""

    def test_views_make_no_copies(self):
        R, N = 3, 10
        exe = dp_graph(ranks=R, n=N, elems=301).compile()
        layout = exe.buckets()
        self.assertGreaterEqual(len(layout), 1)
        members = [n for b in layout for n in b["inputs"]]
        self.assertEqual(sorted(members), sorted("g%d" % i for i in range(N)))
        for b in layout:
            self.assertEqual(len(b["outputs"]), len(b["inputs"]))
            for n, at in b["inputs"].items():
                self.assertLessEqual(at + 4 * (301 + int(n[1:])), b["input_bytes"])
        rng = np.random.default_rng(7)
        grads = [{"g%d" % i: rng.standard_normal(301 + i).astype(np.float32) for i in range(N)} for _ in range(R)]
        # separate arrays: one copy in and one out per gradient and rank
        outs = exe.run(grads)
        self.assertEqual(exe.last_copies[0], 2 * R * N)
        self.assertFalse(exe.in_place("g0"))
        views = exe.bucket_views()
        self.assertIs(exe.bucket_views(), views)
        self.assertTrue(all(exe.in_place(n) for n in ["g%d" % i for i in range(N)] + ["o%d" % i for i in range(N)]))
        for r in range(R):
            for n, a in grads[r].items():
                self.assertEqual(views[r][n].shape, a.shape)
                views[r][n][...] = a
        for feed in (None, [{n: views[r][n] for n in grads[r]} for r in range(R)]):
            res = exe.run(feed)
            self.assertEqual(exe.last_copies, (0, 0))
            for i in range(N):
                want = np.mean([grads[r]["g%d" % i].astype(np.float64) for r in range(R)], axis=0)
                for r in range(R):
                    got = res[r]["o%d" % i]
                    self.assertTrue(np.shares_memory(got, views[r]["o%d" % i]))
                    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)
                    np.testing.assert_allclose(outs[r]["o%d" % i], want, rtol=1e-6, atol=1e-6)
            for r in range(R):  # the gradients are only read
                for n, a in grads[r].items():
                    np.testing.assert_array_equal(views[r][n], a)
        # other arrays still work with the buckets bound: copied in, results in the views
        res = exe.run([{n: -a for n, a in grads[r].items()} for r in range(R)])
        self.assertEqual(exe.last_copies[0], R * N)
        np.testing.assert_allclose(res[1]["o0"], -outs[1]["o0"], rtol=1e-6, atol=1e-6)
        # the views keep the executable's buffers alive
        v = views[0]["g3"]
        del exe, views, res
        import gc
        gc.collect()
        np.testing.assert_array_equal(v[:5], -grads[0]["g3"][:5])


class TestMisuse(unittest.TestCase):
    """API misuse gives a clean exception, never a crash or a silent conversion."""

    def test_stale_executable(self):
        """Compile changes the graph in place: an executable made before any
        change to its graph refuses to run instead of reading freed nodes."""
        changes = {
            "compile again": lambda g: g.compile(),
            "run_pipeline": lambda g: g.run_pipeline("O0"),
            "set_attr": lambda g: g.set_attr("o0", "shape", (9,)),
            "a new node": lambda g: g.input("extra", "float32", (3,)),
            "set_world_size": lambda g: g.set_world_size(2),
            "define_group": lambda g: g.define_group("pair", [0, 1]),
            "compile for other ranks": lambda g: g.compile(passes=None, ranks=4),
        }
        for what, change in changes.items():
            with self.subTest(change=what):
                g = dp_graph(2, 3, 8, "sum")
                exe = g.compile()
                exe.run()
                change(g)
                for call in (lambda: exe.run(), lambda: exe.in_place("g0"), lambda: exe.run_rank(0, {})):
                    with self.assertRaises(collfuse.CollfuseError) as cm:
                        call()
                    self.assertEqual(cm.exception.status, "usage")
                    self.assertIn(STALE, str(cm.exception))
                    self.assertIn("make the executable again", str(cm.exception))
                if what not in ("set_attr", "a new node"):  # those leave a graph that runs
                    g.compile(passes=None).run()

    def test_executables_of_an_unchanged_graph(self):
        """Verifying and planning change nothing: two executables coexist."""
        g = dp_graph(2, 3, 8, "sum")
        e1 = g.compile()
        g.verify()
        e2 = g.compile(passes=None, algo="ring")
        ones = [{"g0": np.ones(8, np.float32)}] * 2
        for e in (e1, e2):
            np.testing.assert_array_equal(e.run(ones)[1]["o0"], np.full(8, 2, np.float32))

    def test_graph_deleted(self):
        """An executable keeps its graph: deleting the Graph (even its C
        handle) leaves the executable running."""
        exe = dp_graph(2, 3, 8, "sum").compile()
        g = exe.graph
        del exe.graph
        g.__del__()  # the C graph released: the executable still holds it
        del g
        outs = exe.run([{"g0": np.full(8, r + 1, np.float32)} for r in range(2)])
        np.testing.assert_array_equal(outs[0]["o0"], np.full(8, 3, np.float32))
        self.assertFalse(exe.in_place("g0"))

    def test_input_values_must_fit(self):
        g = collfuse.Graph("types", world_size=1)
        for n, dt in (("i8", "int8"), ("i32", "int32"), ("u8", "uint8"), ("f16", "float16"),
                      ("f32", "float32"), ("bf", "bfloat16")):
            g.input(n, dt, (2,))
            g.output("o_" + n, n)
        exe = g.compile()
        bad = [("i8", np.array([1, 128]), OverflowError, "input 'i8': value 128 does not fit int8 (-128..127)"),
               ("i8", [-129, 0], OverflowError, "value -129 does not fit int8"),
               ("i32", np.array([2**31, 0], np.int64), OverflowError, "value 2147483648 does not fit int32"),
               ("u8", np.array([-1, 0], np.int8), OverflowError, "value -1 does not fit uint8 (0..255)"),
               ("i32", np.array([2**64 - 1, 0], np.uint64), OverflowError, "value 18446744073709551615 does"),
               ("f16", np.array([1.0, 70000.0]), OverflowError,
                "input 'f16': value 70000.0 overflows float16 (it would become infinite)"),
               ("f32", np.array([1e39, 0.0]), OverflowError, "value 1e+39 overflows float32"),
               ("bf", np.array([3.4e38, 0.0], np.float32), OverflowError, "overflows bfloat16"),
               ("bf", np.array([1e39, 0.0]), OverflowError, "value 1e+39 overflows bfloat16"),
               ("i8", np.array([1.0, 2.0]), TypeError, "input 'i8' is int8, got a float64 array")]
        for name, value, exc, msg in bad:
            with self.subTest(input=name, value=value):
                with self.assertRaises(exc) as cm:
                    exe.run([{name: value}])
                self.assertIn(msg, str(cm.exception))
        # what fits goes through: narrower or wider integers, infinities, NaN, rounding
        outs = exe.run([{"i8": np.array([-128, 127], np.int64), "i32": np.array([2**31 - 1, 0], np.uint64),
                         "f16": np.array([np.inf, 65504.0]), "f32": np.array([np.nan, 0.1]),
                         "bf": np.array([-np.inf, 1.0])}])[0]
        np.testing.assert_array_equal(outs["o_i8"], [-128, 127])
        np.testing.assert_array_equal(outs["o_i32"], [2**31 - 1, 0])
        np.testing.assert_array_equal(outs["o_f16"], np.array([np.inf, 65504], np.float16))
        self.assertTrue(np.isnan(outs["o_f32"][0]))
        self.assertEqual(outs["o_f32"][1], np.float32(0.1))
        np.testing.assert_array_equal(collfuse.bf16_to_float32(outs["o_bf"]), [-np.inf, 1.0])
        with self.assertRaises(OverflowError) as cm:
            collfuse.bf16_to_float32(np.array([70000]))
        self.assertIn("bfloat16 raw bits: value 70000 does not fit uint16 (0..65535)", str(cm.exception))
        with self.assertRaises(OverflowError):
            collfuse.float32_to_bf16([1e39])

    def test_constant_values_must_fit(self):
        g = collfuse.Graph("c", world_size=1)
        for dt, v, exc, msg in (("int8", 300, OverflowError, "constant 'c': value 300 does not fit int8 (-128..127)"),
                                ("int32", 2**40, OverflowError, "value 1099511627776 does not fit int32"),
                                ("int8", 2.5, ValueError, "constant 'c' is int8: value 2.5 is not an integer"),
                                ("int64", float("nan"), ValueError, "value nan is not an integer"),
                                ("float16", 70000.0, OverflowError, "value 70000.0 overflows float16"),
                                ("float32", 1e39, OverflowError, "value 1e+39 overflows float32"),
                                ("bfloat16", 1e39, OverflowError, "overflows bfloat16")):
            with self.subTest(dtype=dt, value=v):
                with self.assertRaises(exc) as cm:
                    g.constant("c", dt, (2,), v)
                self.assertIn(msg, str(cm.exception))
        self.assertEqual(g.node_count, 0)
        g.constant("c", "int8", (2,), -128.0)
        g.constant("d", "float16", (2,), 65504.0)
        self.assertEqual(g.node_count, 2)

    def test_constant_and_opaque_builders(self):
        """Graph.constant and Graph.opaque are the C API's typed builders
        (cf_graph_add_constant, cf_graph_add_opaque): their refusals are its."""
        g = collfuse.Graph("co", world_size=2)
        g.input("x", "float32", (2, 3))
        self.assertEqual(g.constant("half", "float32", (2, 3), 0.5), "half")
        s = g.add("x", "half", name="s")
        self.assertEqual(g.opaque("Gelu", (s,), "bfloat16", (2, 3), name="act"), "act")
        self.assertEqual(g.opaque("RandomSeed", (), "int32", ()), "opaque_1")
        g.output("y", g.all_reduce(s, fusion=0, name="ar"))
        g.output("z", "act")
        self.assertEqual((g.op_of("half"), g.attr("half", "value"), g.attr("half", "shape")),
                         ("Constant", "0.5", "2,3"))
        self.assertEqual((g.op_of("act"), g.attr("act", "type"), g.attr("act", "dtype"), g.attr("act", "shape")),
                         ("Opaque", "Gelu", "bfloat16", "2,3"))
        self.assertEqual(g.attr("opaque_1", "shape"), "")
        x = [np.arange(6, dtype=np.float32).reshape(2, 3) * (r + 1) for r in range(2)]
        outs = g.compile(passes="O0").run([{"x": x[0]}, {"x": x[1]}])
        for r in range(2):
            np.testing.assert_array_equal(outs[r]["y"], x[0] + x[1] + 1.0)
        n = g.node_count
        for build, msg in ((lambda: g.constant("c", "float32", (-2,), 1.0), "node 'c': dimension 0 is negative (-2)"),
                           (lambda: g.constant("c", "float32", (1,) * 9, 1.0), "node 'c': shape rank 9 must be in 0..8"),
                           (lambda: g.opaque("Gelu", ("ghost",), "float32", (2,), name="o"),
                            "node 'o': input 0 refers to unknown node 'ghost'"),
                           (lambda: g.opaque("Gelu", (), "float32", (-1, 2), name="o"),
                            "node 'o': dimension 0 is negative (-1)")):
            with self.subTest(msg=msg):
                with self.assertRaises(collfuse.CollfuseError) as cm:
                    build()
                self.assertIn(msg, str(cm.exception))
        with self.assertRaises(OverflowError) as cm:
            g.opaque("Gelu", (), "float32", (2**70,), name="o")
        self.assertIn("shape of 'o': dimension 1180591620717411303424 does not fit int64", str(cm.exception))
        self.assertEqual(g.node_count, n)

    def test_integers_for_c_ints(self):
        """ctypes keeps the low 32 bits of an int for a C int: checked first."""
        with self.assertRaises(OverflowError) as cm:
            collfuse.Graph(world_size=2**40)
        self.assertIn("world_size: 1099511627776 does not fit a C int", str(cm.exception))
        with self.assertRaises(TypeError) as cm:
            collfuse.Graph(world_size=2.0)
        self.assertIn("world_size: an integer is wanted, got 2.0", str(cm.exception))
        g = collfuse.Graph("g", world_size=np.int64(2))  # numpy integers are integers
        with self.assertRaises(OverflowError) as cm:
            g.set_world_size(2**32 + 2)
        self.assertIn("world_size: 4294967298 does not fit a C int", str(cm.exception))
        with self.assertRaises(OverflowError) as cm:
            g.define_group("big", [0, 2**40])
        self.assertIn("group 'big': rank: 1099511627776 does not fit a C int", str(cm.exception))
        with self.assertRaises(OverflowError):
            g.define_group("parts", [[0, 1], [2**32, 2**32 + 1]])  # would be [[0, 1], [0, 1]]
        with self.assertRaises(TypeError):
            g.define_group("half", [0.5, 1])
        with self.assertRaises(TypeError) as cm:
            g.input("x", "float32", (4.5,))  # not cut to 4
        self.assertIn("dimension: an integer is wanted, got 4.5", str(cm.exception))
        self.assertEqual(g.node_count, 0)
        g.input("x", "float32", (4,))
        g.output("y", g.all_reduce("x"))
        exe = g.compile()
        with self.assertRaises(OverflowError):
            exe.run_rank(2**32, {})  # would be rank 0
        with self.assertRaises(TypeError):
            exe.run_rank(0.0, {})

    def test_no_embedded_nul(self):
        """A C string ends at a NUL: a name or path holding one is refused,
        not cut short (load("/tmp/a\\0b.xml") would open /tmp/a)."""
        with tempfile.TemporaryDirectory() as d:
            stub = os.path.join(d, "a")
            dp_graph(2, 1, 4).write_xml(stub)  # a graph where the cut path would lead
            for call in (lambda: collfuse.load(stub + "\0b.xml"),
                         lambda: dp_graph(2, 1, 4).write_xml(stub + "\0.xml"),
                         lambda: dp_graph(2, 1, 4).write_dot(stub.encode() + b"\0.dot")):
                with self.assertRaises(ValueError) as cm:
                    call()
                self.assertIn("contains a NUL character (a C string would end there)", str(cm.exception))
            # bytes and PathLike paths are paths, not "b'...'"
            g = dp_graph(2, 1, 4)
            g.verify()
            g.write_xml(os.fsencode(os.path.join(d, "bytes.xml")))
            self.assertEqual(collfuse.load(pathlib.Path(d) / "bytes.xml").node_count, g.node_count)
        g = collfuse.Graph("g", world_size=2)
        g.input("x", "float32", (4,))
        for call, what in ((lambda: collfuse.Graph("a\0b"), "graph name 'a\\x00b'"),
                           (lambda: g.input("x\0y", "float32", (4,)), "node name 'x\\x00y'"),
                           (lambda: g.all_reduce("x\0", name="ar"), "operand 'x\\x00'"),
                           (lambda: g.all_reduce("x", group="hccl_world_group\0x", name="ar"), "attribute group"),
                           (lambda: g.define_group("p\0q", [0, 1]), "group name"),
                           (lambda: g.attr("x", "dtype\0"), "attribute name"),
                           (lambda: g.verify("cpu\0"), "target"),
                           (lambda: g.compile(split="auto\0junk"), "option split"),
                           (lambda: collfuse.parse("<graph/>", name="g\0.xml"), "name")):
            with self.subTest(what=what):
                with self.assertRaises(ValueError) as cm:
                    call()
                self.assertIn(what, str(cm.exception))
                self.assertIn("contains a NUL character", str(cm.exception))
        self.assertEqual(g.nodes(), ["x"])


class TestHostSurvives(unittest.TestCase):
    """Nothing the library meets ends or corrupts the Python process."""

    def test_write_dot_on_a_full_disk(self):
        """A full disk (a 256-byte file size limit, SIGXFSZ ignored, in a child
        python3) is a CollfuseError for every format, the finally clause runs,
        the process goes on, and nothing is left in the directory: graphviz
        used to call exit(1) inside write_dot."""
        script = (
            "import collfuse, os, sys\n"
            "g = collfuse.Graph('dp', world_size=2)\n"
            "for i in range(8):\n"
            "    g.output('o%d' % i, g.all_reduce(g.input('g%d' % i, 'float32', (1000,))))\n"
            "g.verify()\n"
            "for ext in ('svg', 'png', 'dot'):\n"
            "    try:\n"
            "        g.write_dot(os.path.join(sys.argv[1], 'g.' + ext))\n"
            "        print('written', ext)\n"
            "    except collfuse.CollfuseError as e:\n"
            "        print('error', ext, e.status, str(e).replace(sys.argv[1], 'DIR'))\n"
            "    finally:\n"
            "        print('finally', ext)\n"
            "print('alive')\n")

        def limit():
            signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
            resource.setrlimit(resource.RLIMIT_FSIZE, (256, 256))

        with tempfile.TemporaryDirectory(prefix="cf_full_") as d:
            p = subprocess.run([sys.executable, "-c", script, d], preexec_fn=limit, restore_signals=False,
                               capture_output=True, text=True, timeout=120 * TIME_SCALE)
            self.assertEqual(p.returncode, 0, p.stderr)
            want = []
            for ext in ("svg", "png", "dot"):
                want += ["error %s io DIR/g.%s: error: cannot write: File too large" % (ext, ext), "finally " + ext]
            self.assertEqual(p.stdout.splitlines(), want + ["alive"])
            self.assertEqual(os.listdir(d), [])

    def test_threads_run_executables_of_one_graph(self):
        """Eight threads run their own executables of one Graph (one context)
        at once, with failing runs in between: each gets its own error
        messages; results stay right (the threads used to race on the
        context's one message: heap corruption, "free(): unaligned chunk")."""
        g = dp_graph(2, 3, 64, "sum")
        exes = [g.compile()] + [g.compile(passes=None) for _ in range(7)]
        need = sum(2 * 4 * (64 + i) for i in range(3))  # one rank's inputs and outputs
        greedy = g.compile(passes=None, max_memory=str(need + need // 2))  # one rank fits, two do not
        errors = []

        def work(t):
            try:
                exe = exes[t]
                if t % 2:
                    exe.bucket_views()  # its runs plan for the bound buckets
                ins = [{"g%d" % i: np.full(64 + i, t + r, np.float32) for i in range(3)} for r in range(2)]
                for _ in range(10):
                    outs = exe.run(ins)
                    np.testing.assert_array_equal(outs[1]["o2"], np.full(66, 2 * t + 1, np.float32))
                    for _ in range(200):
                        with self.assertRaises(collfuse.CollfuseError) as cm:
                            exe.run_rank(1000 + t, {})
                        self.assertEqual(str(cm.exception),
                                         "error: rank %d is not a rank of this 2-rank executable" % (1000 + t))
                    with self.assertRaises(collfuse.CollfuseError) as cm:
                        greedy.run()
                    self.assertIn("allowed by the max_memory option", str(cm.exception))
            except Exception as e:  # reported by the main thread
                errors.append("thread %d: %r" % (t, e))

        ts = [threading.Thread(target=work, args=(t,)) for t in range(8)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        self.assertEqual(errors, [])


if __name__ == "__main__":
    unittest.main(verbosity=2)
