#!/usr/bin/env python3
"""ddp_buckets.py CLI - `--split ddp:...` makes PyTorch DDP's buckets.

DDP's bucket assignment is torch.distributed._compute_bucket_assignment_by_size
(reducer.cpp): this test builds random gradient lists (every dtype mix, limit
lists of one to three limits), asks torch for its buckets and compiles the
same gradients as AllReduces with `collfuse compile --json --split ddp:...`:
the buckets must be the same sets. Both of DDP's assignments are checked:

- rebuilt (the default): DDP rebuilds its buckets after the first iteration
  in gradient-ready order, passing tensor_indices; collfuse's ready order is
  the graph order of the gradients;
- initial (`,initial`): DDP's first assignment runs over the parameters,
  which DDP assumes are the reverse of gradient-ready order (so its small
  first bucket holds the last gradients to be ready).

Exit 77 (skipped) when Debian's torch is absent.
"""
import json
import os
import random
import subprocess
import sys
import tempfile

from grads_graph import grads_xml

try:
    import torch
    import torch.distributed as dist
except ImportError:
    print("torch is not installed: skipped")
    sys.exit(77)

CLI = sys.argv[1]
DTYPES = {
    "float32": torch.float32, "float64": torch.float64, "float16": torch.float16,
    "bfloat16": torch.bfloat16, "int32": torch.int32, "int64": torch.int64,
    "int8": torch.int8, "uint8": torch.uint8, "int16": torch.int16,
}


def fmt_limit(b):
    return str(b)


def collfuse_buckets(path, spec):
    r = subprocess.run([CLI, "compile", path, "--json", "--split", spec,
                        "--passes", "fuse-allreduce"],
                       capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"FAIL: compile --split {spec}: exit {r.returncode}: {r.stderr}")
    out = json.loads(r.stdout)
    return sorted(sorted(int(m[2:]) for m in b["members"]) for b in out["buckets"])


def torch_buckets(grads, limits, initial):
    n = len(grads)
    tensors = [torch.empty([k], dtype=DTYPES[dt]) for dt, k in grads]
    if initial:
        # the parameters: reverse of ready order; indices back to ready order
        params = list(reversed(tensors))
        res, _ = dist._compute_bucket_assignment_by_size(params, limits)
        res = [[n - 1 - p for p in b] for b in res]
    else:
        res, _ = dist._compute_bucket_assignment_by_size(tensors, limits, [], list(range(n)))
    return sorted(sorted(b) for b in res)


def check(grads, limits, initial, tmp, what):
    spec = "ddp:" + ",".join(fmt_limit(x) for x in limits) + (",initial" if initial else "")
    # the first limit as first= once in a while (the same list)
    if len(limits) == 2 and random.random() < 0.5:
        spec = f"ddp:{limits[1]},first={limits[0]}" + (",initial" if initial else "")
    path = os.path.join(tmp, "g.xml")
    with open(path, "w") as f:
        f.write(grads_xml(grads))
    want = torch_buckets(grads, limits, initial)
    got = collfuse_buckets(path, spec)
    if want != got:
        sys.exit(f"FAIL {what}: --split {spec} on {grads}:\n  torch    {want}\n  collfuse {got}")


def main():
    random.seed(int(os.environ.get("CF_TEST_SEED", "32")))
    cases = 0
    with tempfile.TemporaryDirectory() as tmp:
        # torch's own cases (test_c10d_common.py ComputeBucketAssignmentTest)
        own = [
            ([("float32", 100), ("float32", 200), ("float32", 100), ("float32", 50)], [400]),
            ([("float32", 50), ("float64", 25)] * 3, [400]),
            ([("float32", 10)] * 4, [40, 80]),
            ([("float32", 50), ("float64", 25)] * 3, [200, 400]),
        ]
        for grads, limits in own:
            for initial in (False, True):
                check(grads, limits, initial, tmp, "torch's case")
                cases += 1
        names = list(DTYPES)
        for k in range(60):
            mix = random.sample(names, random.randint(1, 4))
            grads = [(random.choice(mix), random.choice([1, 3, 16, 100, 257, 1000, 4096]))
                     for _ in range(random.randint(1, 24))]
            limits = [random.choice([1, 64, 500, 1024, 4000, 16384])
                      for _ in range(random.randint(1, 3))]
            for initial in (False, True):
                check(grads, limits, initial, tmp, f"random case {k}")
                cases += 1
    print(f"ok: {cases} gradient lists give DDP's buckets")


main()
