#!/bin/sh
# in_place.sh COLLFUSE SRCDIR
#
# In-place collectives end to end (docs/executor.md, "In-place
# collectives"), on the threads backend:
#  - ResNet-50's gradient graph (examples/graphml) on 4 ranks: every bucket
#    reduces in place, no copies, and the peak per rank is at most 1.1x the
#    gradient bytes (out of place it was 2x); the tensors live at once
#    (run --json's live_bytes) still count input and output apart;
#  - --iters: a run of 3 iterations after a warmup (the later ones reduce
#    the results before them) saves and verifies the first iteration's
#    outputs, bitwise those of a single iteration, for every algorithm;
#  - a plain ReduceScatter of an Input and an AllGather of a product, and
#    the same as fused buckets, each in place (NCCL's layouts), in run -v
#    and --json, with the same --iters rule, bitwise -O0 --deterministic
#    (tests/e2e/mpi.sh runs the same graphs over MPI);
#  - with CF_IN_PLACE_CUDA_DRIVER set (ctest: the stand-in driver,
#    tests/mock_cuda.c; on a GPU machine libcuda.so.1), the same on
#    --device cuda: in place in run -v, and the saved outputs of 3
#    iterations (--verify) bitwise the CPU's one iteration, every algorithm.
set -u

if [ $# -ne 2 ]; then
  echo "usage: in_place.sh COLLFUSE SRCDIR" >&2
  exit 2
fi
cf=$1
src=$2
work=$(mktemp -d "${TMPDIR:-/tmp}/cf-in-place.XXXXXX") || exit 1
trap 'rm -rf "$work"' EXIT INT TERM
. "$src/tests/e2e/lib.sh"
LIMIT=120

g="$src/examples/graphml/resnet50.dp8.graphml"
if run run "$g" --ranks 4 --json && expect_rc 0 "resnet50 --json"; then
  python3 - "$OUT" "$g" >>"$ERR" 2>&1 <<'PY' || fail "resnet50 on 4 ranks: peak per rank above 1.1x the gradients (above)"
import json, sys, xml.etree.ElementTree as ET
d = json.load(open(sys.argv[1]))
ns = {"g": "http://graphml.graphdrawing.org/xmlns"}
keys = {k.get("attr.name"): k.get("id") for k in ET.parse(sys.argv[2]).getroot().findall("g:key", ns)}
grad = 0
for n in ET.parse(sys.argv[2]).getroot().iter("{http://graphml.graphdrawing.org/xmlns}node"):
    data = {e.get("key"): e.text for e in n.findall("g:data", ns)}
    if data.get(keys["op"]) == "Input":
        count = 1
        for s in data[keys["shape"]].split(","):
            count *= int(s)
        grad += 4 * count
assert grad > 90 << 20, grad
assert d["in_place_collectives"] == d["collectives_executed"] == 9, d
assert d["copies"] == 0 and d["copy_bytes"] == 0, d
assert d["peak_bytes"] <= 1.1 * grad, (d["peak_bytes"], grad, d["peak_bytes"] / grad)
assert d["live_bytes"] >= 2 * grad, (d["live_bytes"], grad)
print("peak %.3fx the gradients" % (d["peak_bytes"] / grad))
PY
fi
expect 0 "rsag in place" run "$g" --ranks 4 -v

# --iters: the first iteration's outputs, whatever runs after it
ex="$src/examples/dp_gradients.xml"
for algo in auto direct rsag ring rd pool; do
  run run "$ex" --algo "$algo" --save-outputs "$work/one_$algo" && expect_rc 0 "$algo, one iteration"
  run run "$ex" --algo "$algo" --iters 3 --warmup 1 --verify --save-outputs "$work/three_$algo"
  if expect_rc 0 "$algo, --iters 3 --warmup 1 --verify"; then
    has "$OUT" "verified" "$algo --verify"
    diff -r "$work/one_$algo" "$work/three_$algo" >/dev/null ||
      fail "$algo: --iters 3 saved other outputs than one iteration (not the first iteration's)"
  fi
done
# --deterministic: in place and fused, bitwise the unfused graph's
run run "$ex" --deterministic --iters 2 --save-outputs "$work/det_fused" && expect_rc 0 "--deterministic fused"
run run "$ex" --deterministic -O0 --save-outputs "$work/det_o0" && expect_rc 0 "--deterministic -O0"
diff -r "$work/det_fused" "$work/det_o0" >/dev/null || fail "--deterministic: fused in place differs from -O0"

# ReduceScatter and AllGather in place
rg="$src/tests/run/rsag_in_place.xml"
if run run "$rg" -v && expect_rc 0 "rsag_in_place.xml -v"; then
  has "$ERR" "2 collectives (2 in place)" "rsag_in_place.xml -v: both in place"
  has "$ERR" "ReduceScatter 'rs' 1.0 MiB int32 over 4 ranks: direct in place" "rsag_in_place.xml -v: ReduceScatter line"
  has "$ERR" "AllGather 'ag' 128.0 KiB bfloat16 over 4 ranks: direct in place" "rsag_in_place.xml -v: AllGather line"
fi
if run run "$rg" --json && expect_rc 0 "rsag_in_place.xml --json"; then
  python3 - "$OUT" >>"$ERR" 2>&1 <<'PY' || fail "rsag_in_place.xml --json: counts or peak (above)"
import json, sys
d = json.load(open(sys.argv[1]))
assert d["in_place_collectives"] == d["collectives_executed"] == 2, d
# out of place the ReduceScatter's 256 KiB output and the product's 128 KiB
# block would be apart; in place they cost one 64 KiB piece of scratch
assert d["peak_bytes"] <= d["live_bytes"] - (256 << 10) - (128 << 10) + (64 << 10) + 64, d
PY
fi
rf="$src/tests/run/rsag_fused_in_place.xml"
if run run "$rf" -v && expect_rc 0 "rsag_fused_in_place.xml -v"; then
  has "$ERR" "2 collectives (2 in place)" "rsag_fused_in_place.xml -v: both buckets in place"
  has "$ERR" "AllGather 'allgather_bucket_0' 256.0 KiB bfloat16 over 4 ranks: direct in place" \
    "rsag_fused_in_place.xml -v: AllGather bucket line"
fi
for f in "$rg" "$rf"; do
  b=$(basename "$f" .xml)
  run run "$f" --save-outputs "$work/${b}_one" && expect_rc 0 "$b, one iteration"
  run run "$f" --iters 3 --warmup 1 --verify --save-outputs "$work/${b}_three"
  if expect_rc 0 "$b --iters 3 --warmup 1 --verify"; then
    has "$OUT" "verified" "$b --verify"
    diff -r "$work/${b}_one" "$work/${b}_three" >/dev/null ||
      fail "$b: --iters 3 saved other outputs than one iteration (not the first iteration's)"
  fi
  run run "$f" --deterministic -O0 --save-outputs "$work/${b}_det" && expect_rc 0 "$b --deterministic -O0"
  diff -r "$work/${b}_one" "$work/${b}_det" >/dev/null || fail "$b: --deterministic -O0 differs"
done

# the CUDA backend: the same plans, in place, on device memory
if [ -n "${CF_IN_PLACE_CUDA_DRIVER:-}" ]; then
  export COLLFUSE_CUDA_DRIVER="$CF_IN_PLACE_CUDA_DRIVER"
  for algo in auto direct rsag ring rd pool; do
    if run run "$ex" --device cuda --algo "$algo" -v && expect_rc 0 "cuda $algo -v"; then
      has "$ERR" "5 collectives (5 in place)" "cuda $algo -v: every collective in place"
    fi
    run run "$ex" --device cuda --algo "$algo" --iters 3 --warmup 1 --verify \
      --save-outputs "$work/cuda_$algo"
    if expect_rc 0 "cuda $algo, --iters 3 --warmup 1 --verify"; then
      has "$OUT" "verified" "cuda $algo --verify"
      diff -r "$work/one_$algo" "$work/cuda_$algo" >/dev/null ||
        fail "cuda $algo: in place on the device saved other outputs than the CPU's"
    fi
  done
  for f in "$rg" "$rf"; do
    b=$(basename "$f" .xml)
    if run run "$f" --device cuda -v && expect_rc 0 "cuda $b -v"; then
      has "$ERR" "2 collectives (2 in place)" "cuda $b -v: both in place"
    fi
    run run "$f" --device cuda --iters 3 --warmup 1 --verify --save-outputs "$work/${b}_cuda"
    if expect_rc 0 "cuda $b --iters 3 --warmup 1 --verify"; then
      has "$OUT" "verified" "cuda $b --verify"
      diff -r "$work/${b}_one" "$work/${b}_cuda" >/dev/null ||
        fail "cuda $b: in place on the device saved other outputs than the CPU's"
    fi
  done
  unset COLLFUSE_CUDA_DRIVER
fi

finish in_place.sh
