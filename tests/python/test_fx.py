#!/usr/bin/python3
"""collfuse.fx with Debian's python3-torch (ctest e2e/python_fx).

Models traced with torch.fx.symbolic_trace are compiled by collfuse and run
on simulated ranks; their results must equal plain PyTorch computing every
rank and the collectives by hand. Exits 77 (ctest: skipped) without torch.
"""

import sys
import unittest

try:
    import torch
    import torch.fx
except ImportError:
    print("test_fx.py: skipped: torch is missing (Debian: apt-get install python3-torch, "
          "which scripts/install-deps does)")
    sys.exit(77)

import collfuse
import collfuse.fx as cfx
from collfuse.fx import all_reduce as imported_all_reduce  # the unpatched name must trace too

R = 4


class TPMLP(torch.nn.Module):
    """Megatron-style two-layer tensor-parallel MLP: column-parallel first
    layer (w1, b1 column shards), elementwise square as the activation,
    row-parallel second layer (w2 row shard), then the partial sums are
    all-reduced (fusion=0, as Megatron does) and also reduce-scattered for a
    sequence-parallel consumer."""

    def forward(self, x, w1, b1, w2):
        h = torch.matmul(x, w1) + b1
        h = h * h
        y = h @ w2
        full = cfx.all_reduce(y, "sum", fusion=0)
        part = cfx.reduce_scatter(y)
        return full, part * 0.5


class TPMatmulRS(torch.nn.Module):
    """Sequence parallel: the second layer's product goes through the fused
    matmul_reduce_scatter leaf and is gathered back."""

    def forward(self, x, w1, w2):
        h = x @ w1
        y = cfx.matmul_reduce_scatter(h, w2)
        return cfx.all_gather(y, layout="concat")


class DPModel(torch.nn.Module):
    """A data-parallel 'backward': 56 gradients (one per parameter, computed
    from the rank's batch) averaged with all_reduce(mean), fusion=1, as DDP
    buckets them. One more gradient uses fusion=2 buckets by fusion_id."""

    def __init__(self, n=56, d=16):
        super().__init__()
        g = torch.Generator().manual_seed(0)
        self.ws = torch.nn.ParameterList(
            [torch.nn.Parameter(torch.randn(d, 4 + i % 7, generator=g)) for i in range(n)])
        self.lin = torch.nn.Linear(d, 8)

    def forward(self, x):
        grads = []
        for w in self.ws:
            grads.append(cfx.all_reduce(torch.matmul(x, w), "mean"))
        grads.append(imported_all_reduce(self.lin(x), "mean", fusion=2, fusion_id=3))
        grads.append(cfx.all_reduce(x * 2.0, "mean", fusion=2, fusion_id=3))
        return grads


class WithOpaque(torch.nn.Module):
    def forward(self, x):
        y = torch.relu(x)  # not an op collfuse runs: kept as Opaque
        return cfx.all_reduce(y), cfx.all_reduce(x, "max")


def shard(t, r, dim):
    n = t.shape[dim] // R
    return t.narrow(dim, r * n, n).contiguous()


class GradSync(torch.nn.Module):
    """DDP's gradient hook as a module: the gradients come in, their means
    over the ranks go out."""

    def forward(self, g0, g1, g2, g3):
        return [cfx.all_reduce(g, "mean") for g in (g0, g1, g2, g3)]


class TestFx(unittest.TestCase):
    def test_gradients_as_bucket_views(self):
        torch.manual_seed(5)
        shapes = [(64, 3), (17,), (5, 5, 4), (129,)]
        grads = [[torch.randn(*s) for s in shapes] for _ in range(R)]
        run = cfx.compile(torch.fx.symbolic_trace(GradSync()), grads[0], world_size=R)
        self.assertLess(run.collectives_after, 4)
        plain = run(grads)
        self.assertEqual(run.executable.last_copies[0], 2 * 4 * R)
        views = run.bucket_views()
        self.assertEqual(len(views), R)
        args = []
        for r in range(R):
            vs = [views[r][n] for n in run._conv.placeholders]
            for v, gr in zip(vs, grads[r]):
                self.assertEqual(tuple(v.shape), tuple(gr.shape))
                v.copy_(gr)  # a framework's backward writes here
            args.append(tuple(vs))
        got = run(args)
        self.assertEqual(run.executable.last_copies, (0, 0))
        for i in range(4):
            want = sum(g[i].double() for g in grads) / R
            for r in range(R):
                torch.testing.assert_close(got[r][i].double(), want, rtol=1e-6, atol=1e-6)
                torch.testing.assert_close(plain[r][i], got[r][i])
    def test_tp_mlp(self):
        torch.manual_seed(1)
        m, d, h = 16, 32, 64
        gm = torch.fx.symbolic_trace(TPMLP())
        x = torch.randn(m, d)
        w1, b1, w2 = torch.randn(d, h), torch.randn(h), torch.randn(h, d) / 8
        per_rank = [(x, shard(w1, r, 1), shard(b1, r, 0), shard(w2, r, 0)) for r in range(R)]
        run = cfx.compile(gm, per_rank[0], world_size=R)
        got = run(per_rank)
        # plain PyTorch, every rank by hand
        partial = [((x @ w1s + b1s) ** 2) @ w2s for (x, w1s, b1s, w2s) in per_rank]
        total = sum(partial)
        for r in range(R):
            full, part = got[r]
            torch.testing.assert_close(full, total, rtol=1e-5, atol=1e-4)
            torch.testing.assert_close(part, shard(total, r, 0) * 0.5, rtol=1e-5, atol=1e-4)
        # the unsharded model agrees too
        ref = ((x @ w1 + b1) ** 2) @ w2
        torch.testing.assert_close(got[0][0], ref, rtol=1e-4, atol=1e-3)
        self.assertEqual(run.collectives_before, 2)
        self.assertEqual(run.opaque, [])

    def test_tp_matmul_reduce_scatter(self):
        torch.manual_seed(2)
        m, d, h = 32, 16, 24
        gm = torch.fx.symbolic_trace(TPMatmulRS())
        x = torch.randn(m, d)
        w1, w2 = torch.randn(d, h), torch.randn(h, d)
        per_rank = [(x, shard(w1, r, 1), shard(w2, r, 0)) for r in range(R)]
        run = cfx.compile(gm, per_rank[0], world_size=R, deterministic=True)
        self.assertIn("MatmulReduceScatter", [run.graph.op_of(c) for c in run.graph.collectives()])
        got = run(per_rank)
        total = sum((x @ a) @ b for (x, a, b) in per_rank)
        for r in range(R):
            torch.testing.assert_close(got[r], total, rtol=1e-5, atol=1e-4)

    def test_dp_many_allreduces_fused(self):
        model = DPModel()
        gm = torch.fx.symbolic_trace(model)
        self.assertGreaterEqual(sum(1 for n in gm.graph.nodes if n.op == "call_function"
                                    and n.target is cfx.all_reduce), 50)
        torch.manual_seed(3)
        xs = [torch.randn(8, 16) for _ in range(R)]
        run = cfx.compile(gm, (xs[0],), world_size=R, split="bytes:4K")
        self.assertEqual(run.collectives_before, 58)
        self.assertLess(run.collectives_after, run.collectives_before)
        buckets = run.graph.buckets()
        self.assertEqual(sum(len(b["members"]) for b in buckets), 58)
        self.assertTrue(any(len(b["members"]) > 1 for b in buckets))
        got = run([(x,) for x in xs])
        with torch.no_grad():
            per_rank = [model(x) for x in xs]  # eager: each rank's local gradients
        for i in range(len(per_rank[0])):
            want = sum(p[i] for p in per_rank) / R
            for r in range(R):
                torch.testing.assert_close(got[r][i], want, rtol=1e-5, atol=1e-5)
        self.assertIn("digraph", run.to_dot())

    def test_dp_deterministic_bitwise(self):
        """With deterministic=True the fused graph gives exactly the unfused
        graph's bits."""
        model = DPModel(n=12)
        gm = torch.fx.symbolic_trace(model)
        xs = [torch.randn(8, 16) for _ in range(R)]
        fused = cfx.compile(gm, (xs[0],), world_size=R, deterministic=True, split="bytes:2K")
        plain = cfx.compile(gm, (xs[0],), world_size=R, deterministic=True, passes="O0")
        self.assertLess(fused.collectives_after, plain.collectives_after)
        a, b = fused([(x,) for x in xs]), plain([(x,) for x in xs])
        for r in range(R):
            for i in range(len(a[r])):
                self.assertTrue(torch.equal(a[r][i], b[r][i]))

    def test_opaque_kept(self):
        gm = torch.fx.symbolic_trace(WithOpaque())
        x = torch.randn(4, 4)
        run = cfx.compile(gm, (x,), world_size=2)
        self.assertEqual(run.opaque, [("relu", "relu")])
        self.assertEqual(run.graph.op_of("relu"), "Opaque")
        self.assertEqual(run.graph.attr("relu", "type"), "relu")
        got = run([(x,), (-x,)])
        torch.testing.assert_close(got[0][1], x.abs())  # max(x, -x); the Opaque branch is not compared

    def test_bfloat16(self):
        class M(torch.nn.Module):
            def forward(self, x):
                return cfx.all_reduce(x, fusion=0)

        gm = torch.fx.symbolic_trace(M())
        xs = [torch.tensor([1.0, 2.0, -3.5, 0.25]).to(torch.bfloat16) * (r + 1) for r in range(R)]
        run = cfx.compile(gm, (xs[0],), world_size=R)
        got = run([(x,) for x in xs])
        self.assertEqual(got[0].dtype, torch.bfloat16)
        torch.testing.assert_close(got[2], sum(xs))

    def test_eager_leaves(self):
        x = torch.randn(4, 3)
        self.assertTrue(torch.equal(cfx.all_reduce(x), x))
        self.assertEqual(tuple(cfx.all_gather(x).shape), (1, 4, 3))
        self.assertTrue(torch.equal(cfx.reduce_scatter(x), x))

    def test_undefined_group(self):
        class M(torch.nn.Module):
            def forward(self, x):
                return cfx.all_reduce(x, group="tp")

        gm = torch.fx.symbolic_trace(M())
        with self.assertRaises(ValueError) as e:
            cfx.compile(gm, (torch.randn(4),), world_size=4)
        self.assertIn("group 'tp' is not defined", str(e.exception))
        run = cfx.compile(gm, (torch.randn(4),), world_size=4, groups={"tp": [0, 1]})
        xs = [torch.full((4,), float(r)) for r in range(4)]
        got = run([(x,) for x in xs])
        torch.testing.assert_close(got[1], torch.full((4,), 1.0))


if __name__ == "__main__":
    unittest.main(verbosity=2)
