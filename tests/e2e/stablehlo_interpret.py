#!/usr/bin/env python3
"""stablehlo_interpret.py COLLFUSE SRCDIR: openxla/stablehlo's interpreter
tests for the collectives (tests/stablehlo/peers/interpret.json), run with
the peer's own data.

Each case's file is the peer module's collective function; the case lists
every rank's arguments (process (replica r, partition p) is rank
r * partitions + p, as the peer's run_parallel grid) and the results the
peer's check.expect_eq_const lines expect. The file runs on its ranks with
those inputs (--input, numpy files) through the default pipeline, and
every rank's outputs (--save-outputs) must equal the expected values
exactly, dtype and shape included. An "opaque" case is one collfuse cannot
run: `check` must warn with that text and `check --strict` exit 1, so it is
never run silently wrong.

Prints how many cases agree; exits 1 naming every case that does not.
"""
import json
import os
import subprocess
import sys

import numpy as np

from peer_cases import run_cases

CLI, SRC = sys.argv[1], sys.argv[2]
PEERS = os.path.join(SRC, "tests", "stablehlo", "peers")
# ctest's CF_TEST_TIME_SCALE (tests/CMakeLists.txt): slow or busy machines
TIME_SCALE = int(os.environ.get("CF_TEST_TIME_SCALE", "1"))


def run_case(case, tmp):
    path = os.path.join(PEERS, case["file"])
    if "opaque" in case:
        p = subprocess.run([CLI, "check", path], capture_output=True, text=True)
        if p.returncode or case["opaque"] not in p.stderr:
            return f"check: exit {p.returncode}, no warning '{case['opaque']}': {p.stderr.strip()}"
        p = subprocess.run([CLI, "check", "--strict", path], capture_output=True, text=True)
        if p.returncode != 1:
            return f"check --strict: exit {p.returncode}, not 1"
        return None
    ranks = case["ranks"]
    d = os.path.join(tmp, case["name"])
    os.makedirs(d)
    cmd = [CLI, "run", path, "--ranks", str(ranks), "--iters", "1", "--warmup", "0",
           "--save-outputs", os.path.join(d, "out")]
    for a, (name, dtype) in enumerate(case["args"]):
        for rank in range(ranks):
            np.save(os.path.join(d, f"{name}.{rank}.npy"),
                    np.array(case["inputs"][rank][a], dtype=dtype))
        cmd += ["--input", f"{name}={d}/{name}.{{rank}}.npy"]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=300 * TIME_SCALE)
    if p.returncode:
        return f"run: exit {p.returncode}: {p.stderr.strip()}"
    results = case["results"]
    for rank in range(ranks):
        for k, dtype in enumerate(results):
            out = "output" if len(results) == 1 else f"output.{k}"
            got = np.load(os.path.join(d, "out", f"rank{rank}", out + ".npy"))
            want = np.array(case["expect"][rank][k], dtype=dtype)
            if got.dtype != want.dtype or got.shape != want.shape or not np.array_equal(got, want):
                return (f"rank {rank} {out}: {got.dtype}{list(got.shape)} {got.tolist()}, "
                        f"expected {want.dtype}{list(want.shape)} {want.tolist()}")
    return None


def main():
    with open(os.path.join(PEERS, "interpret.json")) as f:
        cases = json.load(f)["cases"]
    run_cases(cases, run_case, "StableHLO interpreter cases")


main()
