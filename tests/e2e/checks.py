"""checks.py: what the Python end-to-end tests share: counting failures and
running the collfuse driver with an expected exit code (a sanitizer report
in its stderr is a failure too)."""
import os
import subprocess
import sys

# time limits stretch on slow builds and busy machines (tests/CMakeLists.txt)
TIME_SCALE = int(os.environ.get("CF_TEST_TIME_SCALE", "1"))

CF = None  # the driver, set by the test from its argv
fails = 0


def fail(msg):
    global fails
    fails += 1
    print("FAIL:", msg)


def cf(*args, want=0, timeout=300):
    p = subprocess.run([CF, *args], capture_output=True, text=True, timeout=timeout * TIME_SCALE)
    if p.returncode != want:
        fail(f"collfuse {' '.join(args)}: exit {p.returncode}, expected {want}\n{p.stderr}")
    if "runtime error:" in p.stderr or "Sanitizer" in p.stderr:
        fail(f"collfuse {' '.join(args)}: sanitizer error\n{p.stderr}")
    return p


def finish(name):
    print(f"{name}: {fails} failure(s)")
    sys.exit(1 if fails else 0)
