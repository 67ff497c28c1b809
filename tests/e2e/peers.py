#!/usr/bin/env python3
"""peers.py COLLFUSE SRCDIR: the hold-out style suite of peers' own cases
(tests/peers/cases.json): XLA's all-reduce, all-gather and reduce-scatter
combiner tests, PyTorch DDP's bucket-assignment tests and Inductor's DDP
bucketing, each with the grouping the peer's test expects.

Each case is read by `check` (exit 0), compiled with `compile --json
--split SPLIT` (its buckets, as sets of member names, must be the peer's
grouping) and run with `run --verify` on its ranks (unless "run": false).
Prints how many cases agree; exits 1 naming every case that does not.
"""
import json
import os
import subprocess
import sys

from grads_graph import grads_xml
from peer_cases import run_cases

CLI, SRC = sys.argv[1], sys.argv[2]
PEERS = os.path.join(SRC, "tests", "peers")
# ctest's CF_TEST_TIME_SCALE (tests/CMakeLists.txt): slow or busy machines
TIME_SCALE = int(os.environ.get("CF_TEST_TIME_SCALE", "1"))


def run_case(case, tmp):
    if "file" in case:
        path = os.path.join(PEERS, case["file"])
    else:
        path = os.path.join(tmp, case["name"] + ".xml")
        with open(path, "w") as f:
            f.write(grads_xml(case["grads"]))
    p = subprocess.run([CLI, "check", path], capture_output=True, text=True)
    if p.returncode:
        return f"check: exit {p.returncode}: {p.stderr.strip()}"
    p = subprocess.run([CLI, "compile", path, "--json", "--split", case["split"]],
                       capture_output=True, text=True)
    if p.returncode:
        return f"compile: exit {p.returncode}: {p.stderr.strip()}"
    got = sorted(sorted(b["members"]) for b in json.loads(p.stdout)["buckets"])
    want = sorted(sorted(b) for b in case["expect"])
    if got != want:
        return f"buckets {got}, the peer's {want}"
    if case.get("run", True):
        p = subprocess.run([CLI, "run", path, "--verify", "--ranks", str(case["ranks"]),
                            "--split", case["split"]], capture_output=True, text=True,
                           timeout=300 * TIME_SCALE)
        if p.returncode:
            return f"run --verify: exit {p.returncode}: {p.stderr.strip()}"
    return None


def main():
    with open(os.path.join(PEERS, "cases.json")) as f:
        cases = json.load(f)["cases"]
    run_cases(cases, run_case, "peers' cases")


main()
