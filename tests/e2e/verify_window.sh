#!/bin/sh
# verify_window.sh COLLFUSE SRCDIR
#
# `run --verify` window by window (check/verify.c cf_verify_streamed): on
# graphs whose ops are all elementwise the float64 reference is evaluated a
# window of elements at a time, the seeded Inputs regenerated from --seed.
# The verdict, the errors in --json and the first-mismatch message must not
# depend on the window: every streamable example runs with the default
# window and with small ones (COLLFUSE_TEST_VERIFY_WINDOW, elements), and a
# wrong element put in after the run (COLLFUSE_TEST_CORRUPT) fails each the
# same way, also on a graph that needs the whole reference
# (tests/run/hooks.xml: an AllGather and a ReduceScatter), on a fused plan
# run twice in place (--iters 2: the first iteration's outputs, copied) and
# with --input files. bench/gen_llama_grads.py's graph checks to its
# documented size (the 4 GiB run itself is bench/README.md's, not a test).
set -u

if [ $# -ne 2 ]; then
  echo "usage: verify_window.sh COLLFUSE SRCDIR" >&2
  exit 2
fi
cf=$1
src=$2
work=$(mktemp -d "${TMPDIR:-/tmp}/cf-verify-window.XXXXXX") || exit 2
trap 'rm -rf "$work"' EXIT
trap 'exit 130' INT TERM
. "$(dirname "$0")/lib.sh"
CF_SUB=run
LIMIT=60

# errs FILE: the errors of a --json line, as text
errs() { sed -n 's/.*\("max_abs_err":[^,]*,"max_rel_err":[^,]*\).*/\1/p' "$1"; }

# the same verdict at the default window and small ones
for spec in dp_gradients:1000,65536 broadcast:7,4096 reduce_root:1,3; do
  g=${spec%%:*}
  f="$src/examples/$g.xml"
  run "$f" --verify --json || continue
  expect_rc 0 "$g --verify" || continue
  want=$(errs "$OUT")
  [ -n "$want" ] || { fail "$g: no errors in --json"; continue; }
  for w in $(echo "${spec#*:}" | tr , ' '); do
    COLLFUSE_TEST_VERIFY_WINDOW=$w run "$f" --verify --json || continue
    expect_rc 0 "$g --verify, window $w" &&
      { [ "$(errs "$OUT")" = "$want" ] || fail "$g window $w: $(errs "$OUT"), whole: $want"; }
  done
done

# corrupt WANT_TEXT RANK:INDEX:OUTPUT -- ARGS: the default window and
# windows of 1000 and 65536 elements give exit 1 and WANT_TEXT
corrupt() {
  text=$1
  spec=$2
  shift 3
  for w in 0 1000 65536; do
    COLLFUSE_TEST_VERIFY_WINDOW=$w COLLFUSE_TEST_CORRUPT=$spec run "$@" || continue
    expect_last 1 "$text" "corrupt $spec window $w: $*"
  done
}
dp="$src/examples/dp_gradients.xml"
corrupt "collfuse run: error: output 'o_fc1' rank 2 index 5: got" 2:5:o_fc1 -- "$dp" --verify
corrupt "error: output 'o_emb' rank 7 index 1953407: got" 7:1953407:o_emb -- "$dp" --verify
corrupt "error: output 'o_step' rank 0 index 0: got" 0:0:o_step -- "$dp" --verify
# o_fc1 reduces over the even ranks only: rank 3's is undefined, not checked
COLLFUSE_TEST_CORRUPT=3:5:o_fc1 run "$dp" --verify && expect_rc 0 "corrupt undefined o_fc1 rank 3"
# a graph that needs the whole reference fails alike
corrupt "error: output 'o_rs' rank 1 index 3: got" 1:3:o_rs -- "$src/tests/run/hooks.xml" --verify
# an in-place plan run twice: the first iteration's outputs, copied aside
run "$dp" --verify --iters 2 -v && expect_rc 0 "dp_gradients --iters 2 --verify" &&
  has "$ERR" "in place" "dp_gradients -v: in place"
corrupt "error: output 'o_q' rank 1 index 2: got" 1:2:o_q -- "$dp" --verify --iters 2

# --input files next to regenerated Inputs
cat >"$work/g.xml" <<'EOF'
<graph name="g" version="1" world_size="2">
  <node name="x" op="Input" dtype="float32" shape="3,5"/>
  <node name="y" op="Input" dtype="float32" shape="15"/>
  <node name="sx" op="AllReduce" reduction="sum"><input ref="x"/></node>
  <node name="sy" op="AllReduce" reduction="mean"><input ref="y"/></node>
  <node name="o_x" op="Output"><input ref="sx"/></node>
  <node name="o_y" op="Output"><input ref="sy"/></node>
</graph>
EOF
# x on rank R: 15 float32 values R*100 + i (a .npy 1.0 header of 128 bytes)
for r in 0 1; do
  python3 - "$work/x_$r.npy" "$r" <<'EOF'
import struct, sys
h = "{'descr': '<f4', 'fortran_order': False, 'shape': (3, 5), }"
h += " " * (128 - 10 - len(h) - 1) + "\n"
with open(sys.argv[1], "wb") as f:
    f.write(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(h)) + h.encode())
    f.write(struct.pack("<15f", *[int(sys.argv[2]) * 100 + i for i in range(15)]))
EOF
done
for w in 0 4; do
  COLLFUSE_TEST_VERIFY_WINDOW=$w run "$work/g.xml" --verify --input "x=$work/x_{rank}.npy" &&
    expect_rc 0 "--input with --verify, window $w"
  COLLFUSE_TEST_VERIFY_WINDOW=$w COLLFUSE_TEST_CORRUPT=1:14:o_x run "$work/g.xml" --verify \
    --input "x=$work/x_{rank}.npy" &&
    expect_last 1 "error: output 'o_x' rank 1 index 14: got 129, expected 128" "--input corrupt, window $w"
done

# the Llama-7B-sized graph: 39 gradients, 4 GiB per rank
if python3 "$src/bench/gen_llama_grads.py" "$work/llama.graphml" >"$ERR" 2>&1; then
  CF_SUB=
  run check "$work/llama.graphml" && expect_rc 0 "check llama" &&
    has "$OUT" "117 nodes, 39 collectives (AllReduce 39), 4286726144 bytes communicated (4.0 GiB)" "check llama"
  CF_SUB=run
  # too much for the limit given: refused before anything is allocated
  run "$work/llama.graphml" --ranks 4 --verify --max-memory 8G &&
    expect_last 1 "llama.graphml: error: 4 ranks need 16.0 GiB (4.0 GiB per rank, " "llama --max-memory 8G"
else
  fail "gen_llama_grads.py failed"
fi

finish verify_window.sh
