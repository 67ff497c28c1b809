#!/bin/sh
# replay.sh COLLFUSE SRCDIR OUT_DIR - the imported real graphs run.
#
# examples/pbtxt/hccl_op.pbtxt (Ascend tf_adapter) on 8 ranks: verified, and every rank's
# output is the gather of the constant, 16 float32 10.0 (8 ranks x 2). The
# JAX tensor-parallel MLP (as lowered and as optimized) and mixed
# reductions: verified on 8 ranks. tests/hlo's collectives over several
# disjoint replica groups (partitioned IR groups, each rank in its own
# part): verified on 4 and 8 ranks, fused and unfused.
set -eu
cf=$1
src=$2
out=$3
rm -rf "$out"
"$cf" run "$src/examples/pbtxt/hccl_op.pbtxt" --ranks 8 --verify --save-outputs "$out"
python3 - "$out" <<'PY'
import glob, struct, sys
files = sorted(glob.glob(sys.argv[1] + "/rank*/retval_Add_0_0.npy"))
assert len(files) == 8, files
for f in files:
    b = open(f, "rb").read()
    assert b[:6] == b"\x93NUMPY", f
    hl = struct.unpack("<H", b[8:10])[0] if b[6] == 1 else struct.unpack("<I", b[8:12])[0]
    off = 10 if b[6] == 1 else 12
    hdr = b[off:off + hl].decode()
    assert "'<f4'" in hdr and "(16,)" in hdr, (f, hdr)
    vals = struct.unpack("<16f", b[off + hl:])
    assert all(v == 10.0 for v in vals), (f, vals)
print("hccl_op.pbtxt: 8 ranks, each output 16 x 10.0")
PY
"$cf" run "$src/examples/hlo/jax_tp_mlp.hlo" --ranks 8 --verify
"$cf" run "$src/examples/hlo/jax_mixed_reductions.hlo" --ranks 8 --verify
"$cf" run "$src/examples/hlo/jax_tp_mlp.optimized.hlo" --ranks 8 --verify
hlo=$src/tests/hlo
for f in partitioned.hlo:4 partitioned8.hlo:8 mesh.hlo:8 replica_groups.hlo:8 modes.hlo:4; do
  "$cf" run "$hlo/${f%%:*}" --ranks "${f#*:}" --verify
  "$cf" run "$hlo/${f%%:*}" --ranks "${f#*:}" --verify -O0 --deterministic
done
