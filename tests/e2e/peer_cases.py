"""The loop of the peer-case suites (peers.py, stablehlo_interpret.py):
run every case in one temporary directory, print each that disagrees with
the peer and a count, exit 1 if any does."""
import sys
import tempfile


def run_cases(cases, run_case, what):
    """run_case(case, tmp) returns None when the case agrees, else why not."""
    bad = []
    with tempfile.TemporaryDirectory() as tmp:
        for case in cases:
            why = run_case(case, tmp)
            if why:
                bad.append(f"{case['name']} ({case['peer']}): {why}")
    for b in bad:
        print("DISAGREE", b)
    print(f"{len(cases) - len(bad)} of {len(cases)} {what} agree")
    sys.exit(1 if bad else 0)
