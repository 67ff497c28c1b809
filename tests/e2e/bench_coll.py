#!/usr/bin/env python3
"""bench_coll.py COLLFUSE SRCDIR - smoke test of `collfuse bench allreduce`,
`collfuse bench fusion` and `collfuse bench mmrs`.

A quick run of each prints its table (exit 0) and, with --json, one JSON
object of the documented shape (bench/README.md); bad options are usage
errors (exit 2). Timings are never checked, nor whether the MPI peer could
run (the table then says why it was not measured). Prints one line per
failure and exits 1 if there was any.
"""
import json
import os
import re
import subprocess
import sys
import tempfile

# time limits stretch on slow builds and busy machines (tests/CMakeLists.txt)
TIME_SCALE = int(os.environ.get("CF_TEST_TIME_SCALE", "1"))

SANITIZER = re.compile(r"ERROR: (Address|Leak|Memory|Thread|UndefinedBehavior)Sanitizer|runtime error:")


def main() -> int:
    if len(sys.argv) != 3:
        print(__doc__.splitlines()[0], file=sys.stderr)
        return 2
    cf, src = sys.argv[1], sys.argv[2]
    failures = []

    def run(want, *args):
        """collfuse ARGS; returns (stdout, stderr), or None after a failure."""
        try:
            p = subprocess.run([cf, *args], capture_output=True, text=True, timeout=120 * TIME_SCALE)
        except subprocess.TimeoutExpired:
            failures.append(f"timed out: collfuse {' '.join(args)}")
            return None
        what = f"collfuse {' '.join(args)}"
        if SANITIZER.search(p.stderr):
            failures.append(f"sanitizer error: {what}\n{p.stderr[-2000:]}")
        elif p.returncode != want:
            failures.append(f"{what}: exit {p.returncode}, expected {want}\n{p.stderr[-2000:]}")
        else:
            return p.stdout, p.stderr
        return None

    def check(cond, what):
        if not cond:
            failures.append(what)

    # ---- bench allreduce
    r = run(0, "bench", "allreduce", "--quick", "--ranks", "2")
    if r:
        for text in ("busbw", "direct", "   64K ", "mpi", "bound us", "frac",
                     "bound: every rank copies its input to its output at once"):
            check(text in r[0], f"bench allreduce --quick: no '{text}' in the table")
    r = run(0, "bench", "allreduce", "--quick", "--ranks", "3", "--no-mpi", "--json")
    if r:
        try:
            d = json.loads(r[0])
            assert d["bench"] == "allreduce" and d["ranks"] == 3, d
            assert d["peers"]["mpi"]["available"] is False, d["peers"]
            assert "--no-mpi" in d["peers"]["mpi"]["reason"], d["peers"]
            assert [x["bytes"] for x in d["results"]] == [8, 65536, 1048576], d["results"]
            for x in d["results"]:
                c = x["collfuse"]
                assert set(c) == {"auto", "direct", "rsag", "ring", "rd", "pool"}, c
                assert c["auto"]["us"] > 0 and c["auto"]["algo_run"] == x["auto_algo"], x
                assert c["rd"]["algo_run"] == "direct", c["rd"]  # 3 ranks: no recursive doubling
                assert x["mpi"] is None and x["ratio_busbw_collfuse_vs_mpi"] is None, x
                b = x["bound"]
                assert b["us"] > 0, b
                # the bound is the faster of memcpy and the streaming copy
                assert b["memcpy_us"] > 0 and b["streaming_us"] > 0, b
                assert b["us"] == min(b["memcpy_us"], b["streaming_us"]), b
                gbps = 2 * 3 * x["bytes"] / (b["us"] * 1e3)
                assert abs(b["copy_gbps"] - gbps) <= 1e-6 * gbps, b
                for k in c:
                    f = c[k]["fraction_of_bound"]
                    assert abs(f - b["us"] / c[k]["us"]) <= 1e-9 * f, (k, c[k], b)
        except (ValueError, KeyError, AssertionError) as e:
            failures.append(f"bench allreduce --json: unexpected object: {e!r}")
    for args, text in ((["--sizes", "3"], "--sizes"),
                       (["--ranks", "1"], "collfuse bench allreduce: --ranks wants an integer in 2..64, got '1'"),
                       (["--bogus"], "unknown option '--bogus'")):
        r = run(2, "bench", "allreduce", *args)
        if r:
            check(text in r[1], f"bench allreduce {' '.join(args)}: no '{text}' in stderr")

    # ---- bench fusion on a small latency-bound graph
    with tempfile.TemporaryDirectory(prefix="cf-bench.") as work:
        graph = os.path.join(work, "latency.xml")
        gen = subprocess.run([sys.executable, os.path.join(src, "bench", "gen_latency_graph.py"), graph,
                              "--count", "40", "--bytes", "1024"], capture_output=True, text=True)
        if gen.returncode != 0:
            failures.append(f"gen_latency_graph.py: exit {gen.returncode}\n{gen.stderr}")
            graph = os.path.join(src, "examples", "allgather_layouts.xml")
        r = run(0, "bench", "fusion", graph, "--quick", "--ranks", "2")
        if r:
            for text in ("unfused (-O0)", "ideal: 1 x", "vs unfused"):
                check(text in r[0], f"bench fusion --quick: no '{text}' in the table")
        r = run(0, "bench", "fusion", graph, "--quick", "--ranks", "2", "--split", "bytes:8K",
                "--split", "size:50,50", "--rounds", "2", "--json")
        if r:
            try:
                d = json.loads(r[0])
                assert d["bench"] == "fusion" and d["ranks"] == 2, d
                assert d["allreduce"]["count"] == 40, d["allreduce"]
                assert d["allreduce"]["bytes"] == 40 * 1024, d["allreduce"]
                v = {x["name"]: x for x in d["variants"]}
                assert v["unfused (-O0)"]["collectives"] == 40, v
                assert v["fused --split bytes:8K"]["collectives"] == 5, v
                for x in d["variants"]:
                    assert "skipped" in x or (x["time_ms"] > 0 and "ratio_vs_unfused" in x), x
                    assert "skipped" in x or len(x["time_ms_rounds"]) == 2, x
                assert d["variants"][-1]["name"].startswith("ideal"), d["variants"]
            except (ValueError, KeyError, AssertionError) as e:
                failures.append(f"bench fusion --json: unexpected object: {e!r}")
        for want, args, text in ((2, [], "no input file"), (2, [graph, "--split", "bogus:1"], "bogus"),
                                 (1, [os.path.join(work, "missing.xml"), "--quick"], "missing.xml")):
            r = run(want, "bench", "fusion", *args)
            if r:
                check(text in r[1], f"bench fusion {' '.join(args)}: no '{text}' in stderr")

    # ---- bench mmrs: fused MatmulReduceScatter vs MatMul then ReduceScatter
    r = run(0, "bench", "mmrs", "--quick", "--ranks", "2", "--dtypes", "float32")
    if r:
        for text in ("fused/seq", "overlap", "float32", " 1024 "):
            check(text in r[0], f"bench mmrs --quick: no '{text}' in the table")
    r = run(0, "bench", "mmrs", "--ranks", "2,4", "--dtypes", "bf16,int8", "--shapes", "64x32x16",
            "--rounds", "2", "--json")
    if r:
        try:
            d = json.loads(r[0])
            assert d["bench"] == "mmrs" and d["rounds"] == 2, d
            rows = d["results"]
            assert [(x["ranks"], x["dtype"]) for x in rows] == \
                [(2, "bfloat16"), (2, "int8"), (4, "bfloat16"), (4, "int8")], rows
            for x in rows:
                assert (x["m"], x["k"], x["n"]) == (64, 32, 16), x
                assert x["quantized"] == (x["dtype"] == "int8") and x["output_dtype"] == "bfloat16", x
                assert x["chunks"] >= 1, x
                for k in ("t_fused_ms", "t_sequential_ms", "t_mm_ms", "t_rs_ms"):
                    assert x[k] > 0, (k, x)
                assert all(len(v) == 2 for v in x["samples_ms"].values()), x
                assert x["ratio_fused_vs_sequential"] > 0 and "overlap_efficiency" in x, x
                assert x["check"]["reference_elements"] == 2 * 48 * x["ranks"], x
        except (ValueError, KeyError, AssertionError) as e:
            failures.append(f"bench mmrs --json: unexpected object: {e!r}")
    r = run(0, "bench", "mmrs", "--ranks", "2", "--dtypes", "float32", "--shapes", "64x32x16",
            "--comm-turn", "3", "--json")
    if r:
        try:
            assert json.loads(r[0])["results"][0]["chunks"] == 3
        except (ValueError, KeyError, IndexError, AssertionError) as e:
            failures.append(f"bench mmrs --comm-turn 3: {e!r}")
    for args, text in ((["--shapes", "10x8x8", "--ranks", "4"], "not divisible"),
                       (["--dtypes", "int4"], "--dtypes"), (["--shapes", "8x8"], "--shapes"),
                       (["--ranks", "1"], "--ranks"), (["--bogus"], "unknown option '--bogus'")):
        r = run(2, "bench", "mmrs", *args)
        if r:
            check(text in r[1], f"bench mmrs {' '.join(args)}: no '{text}' in stderr")

    for f in failures:
        print(f"FAIL: {f}", file=sys.stderr)
    print(f"bench_coll.py: {len(failures)} failure(s)" if failures else "bench_coll.py: ok",
          file=sys.stderr if failures else sys.stdout)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
