#!/usr/bin/python3
"""examples/torch/ddp_train.py end to end (ctest label long), 2 processes:
for the small GPT and torchvision's ResNet-18, DDP over gloo with
collfuse's allreduce_hook gives DDP's own losses step by step (within float
tolerance), two collfuse runs with --deterministic give bitwise the same
losses, and the bf16 hook trains close by; --hook step (compile_step, no
DDP) gives DDP's own losses within 1e-5 relative, bitwise the same in two
deterministic runs, under mpirun and torchrun; torchrun starts the example
(DDP's own allreduce), and with the collfuse hook it runs on the shm world
with DDP's own losses (a library without that world refuses it, naming
torchrun). Exits 77 (skipped) without
torch or mpirun; ResNet-18 is skipped, saying so, without torchvision.
"""

import json
import os
import subprocess
import sys

from checks import fail

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "bench"))
import ports  # noqa: E402 (bench/ports.py: a run started again when a port was taken meanwhile)

EXAMPLE = os.path.join(HERE, "..", "..", "examples", "torch", "ddp_train.py")
SCALE = int(os.environ.get("CF_TEST_TIME_SCALE", "1") or 1)


def have(module):
    return subprocess.run([sys.executable, "-c", "import " + module], capture_output=True).returncode == 0


def mpirun(args, np_=2):
    root = ["--allow-run-as-root"] if os.getuid() == 0 else []
    cmd = ["mpirun"] + root + ["--oversubscribe", "--bind-to", "none", "--mca", "btl", "self,vader"]
    for k in ("MASTER_ADDR", "MASTER_PORT", "COLLFUSE_LIBRARY", "PYTHONPATH", "PYTHONDONTWRITEBYTECODE",
              "XDG_CACHE_HOME"):
        if k in ("MASTER_ADDR", "MASTER_PORT") or k in os.environ:
            cmd += ["-x", k]
    cmd += ["-np", str(np_), sys.executable, EXAMPLE, "--json"] + args

    def start(master_port, _):
        env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(master_port),
                   OMPI_MCA_rmaps_base_oversubscribe="1")
        return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600 * SCALE)
    p = ports.on_free_ports(start, "test_ddp_train")
    if p.returncode != 0:
        fail("%s: exit %d\n%s%s" % (" ".join(cmd), p.returncode, p.stdout[-3000:], p.stderr[-3000:]))
    lines = [ln for ln in p.stdout.splitlines() if ln.startswith("{")]
    if len(lines) != 1:
        fail("%s: want one JSON line, got:\n%s" % (" ".join(cmd), p.stdout))
    return json.loads(lines[0])


def torchrun(args):
    def start(_, rdzv_port):
        cmd = [sys.executable, "-m", "torch.distributed.run", "--nnodes", "1", "--rdzv_backend", "c10d",
               "--rdzv_endpoint", "127.0.0.1:%d" % rdzv_port, "--redirects", "2", "--tee", "2",
               "--nproc_per_node", "2", EXAMPLE] + args
        return subprocess.run(cmd, capture_output=True, text=True, timeout=600 * SCALE)
    return ports.on_free_ports(start, "test_ddp_train")


def close(a, b, rtol):
    return len(a) == len(b) and all(abs(x - y) <= rtol * max(abs(x), abs(y), 1e-30) for x, y in zip(a, b))


def main():
    if not have("torch"):
        print("test_ddp_train: torch is missing (Debian: python3-torch): skipped")
        sys.exit(77)
    if subprocess.run(["sh", "-c", "command -v mpirun"], capture_output=True).returncode != 0:
        print("test_ddp_train: mpirun not found: skipped")
        sys.exit(77)
    models = ["gpt"]
    if have("torchvision"):
        models.append("resnet18")
    else:
        print("test_ddp_train: torchvision is missing (Debian: python3-torchvision): ResNet-18 skipped")
    for model in models:
        base = ["--model", model, "--steps", "4"]
        ref = mpirun(base + ["--hook", "none"])
        got = mpirun(base + ["--hook", "collfuse", "--deterministic"])
        again = mpirun(base + ["--hook", "collfuse", "--deterministic"])
        bf = mpirun(base + ["--hook", "collfuse-bf16"])
        if len(ref["losses"]) != 4 or len(set(ref["losses"])) < 2:
            fail("%s: the losses do not change: %r" % (model, ref["losses"]))
        if not close(ref["losses"], got["losses"], 1e-4):
            fail("%s: collfuse hook losses %r, DDP's own %r" % (model, got["losses"], ref["losses"]))
        if got["losses"] != again["losses"]:
            fail("%s: two deterministic collfuse runs differ: %r vs %r" % (model, got["losses"], again["losses"]))
        # bf16 gradients (8 bits of mantissa) after one update, then drifting apart
        if not (close(ref["losses"][:2], bf["losses"][:2], 2e-3) and close(ref["losses"], bf["losses"], 5e-2)):
            fail("%s: bf16 hook losses %r, DDP's own %r" % (model, bf["losses"], ref["losses"]))
        if any(s is None or s <= 0 for s in got["sync_ms"]):
            fail("%s: sync times %r" % (model, got["sync_ms"]))
        # compile_step: DDP's own losses within 1e-5, bitwise the same run to run
        st = mpirun(base + ["--hook", "step", "--deterministic"])
        st2 = mpirun(base + ["--hook", "step", "--deterministic"])
        if not close(ref["losses"], st["losses"], 1e-5):
            fail("%s: compile_step losses %r, DDP's own %r" % (model, st["losses"], ref["losses"]))
        if st["losses"] != st2["losses"]:
            fail("%s: two deterministic compile_step runs differ: %r vs %r" % (model, st["losses"], st2["losses"]))
        if any(e is None or e < 0 for e in st["exposed_ms"]) or any(s is None or s <= 0 for s in st["sync_ms"]):
            fail("%s: compile_step's exposed %r / sync %r times" % (model, st["exposed_ms"], st["sync_ms"]))
        print("%s: ok (losses %s)" % (model, " ".join("%.6f" % x for x in got["losses"])))
    p = torchrun(["--model", "gpt", "--steps", "2"])
    if p.returncode != 0 or "step 1 loss" not in p.stdout:
        fail("torchrun: exit %d\n%s%s" % (p.returncode, p.stdout[-3000:], p.stderr[-3000:]))
    shm = subprocess.run([sys.executable, "-c", "import collfuse.distributed as d; print(d.has_shm())"],
                         capture_output=True, text=True).stdout.strip() == "True"
    p = torchrun(["--model", "gpt", "--steps", "3", "--hook", "collfuse", "--json"])
    if not shm:  # no world for a torchrun job: refused by name
        if p.returncode == 0 or "started by torchrun (rank" not in p.stdout + p.stderr:
            fail("torchrun with the collfuse hook: exit %d, want a refusal naming torchrun\n%s%s"
                 % (p.returncode, p.stdout[-3000:], p.stderr[-3000:]))
    else:  # the shm world: DDP's own losses
        lines = [ln for ln in p.stdout.splitlines() if ln.startswith("{")]
        if p.returncode != 0 or len(lines) != 1:
            fail("torchrun with the collfuse hook: exit %d\n%s%s" % (p.returncode, p.stdout[-3000:], p.stderr[-3000:]))
        ref = mpirun(["--model", "gpt", "--steps", "3", "--hook", "none"])
        got = json.loads(lines[0])
        if not close(ref["losses"], got["losses"], 1e-4):
            fail("torchrun with the collfuse hook: losses %s, DDP's own %r" % (lines[0], ref["losses"]))
        # the peak with shared pages counted once: below ru_maxrss (the libraries and the
        # peer's bucket are shared), above nothing
        if os.path.exists("/proc/self/smaps_rollup") and not 0 < got["peak_pss_mb"] < got["peak_mb"]:
            fail("torchrun with the collfuse hook: peak_pss_mb %r, peak_mb %r" % (got["peak_pss_mb"], got["peak_mb"]))
        p = torchrun(["--model", "gpt", "--steps", "3", "--hook", "step", "--json"])
        lines = [ln for ln in p.stdout.splitlines() if ln.startswith("{")]
        if p.returncode != 0 or len(lines) != 1 or not close(ref["losses"], json.loads(lines[0])["losses"], 1e-5):
            fail("torchrun with compile_step: exit %d, losses %s, DDP's own %r\n%s%s"
                 % (p.returncode, lines, ref["losses"], p.stdout[-3000:], p.stderr[-3000:]))
    print("torchrun: ok")


if __name__ == "__main__":
    main()
