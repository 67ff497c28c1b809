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
#    outputs, bitwise those of a single iteration, for every algorithm.
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
for algo in auto direct rsag ring rd; do
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

finish in_place.sh
