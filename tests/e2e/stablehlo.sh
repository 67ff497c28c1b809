#!/bin/sh
# stablehlo.sh COLLFUSE SRCDIR
#
# JAX's StableHLO export of a data-parallel step (examples/stablehlo) and the
# HLO text XLA makes from it: `check` finds the same collectives in the same
# groups with the same bytes, `compile` fuses both to the same collectives
# and buckets, `run --verify` passes on the .mlir (4 ranks, as its module
# says), as do its AllToAll and CollectivePermute, and its foreign ops are reported like every reader's (--strict
# refuses them). A file without extension that starts with `module` is
# StableHLO. Prints one line per failure and exits 1 if any.
set -u

if [ $# -ne 2 ]; then
  echo "usage: stablehlo.sh COLLFUSE SRCDIR" >&2
  exit 2
fi
cf=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
src=$(cd "$2" && pwd)

work=$(mktemp -d "${TMPDIR:-/tmp}/cf-stablehlo.XXXXXX") || exit 2
trap 'rm -rf "$work"' EXIT
trap 'exit 130' INT TERM

. "$(dirname "$0")/lib.sh"

cd "$src/examples/stablehlo" || exit 2
mlir=jax_dp_step.mlir
hlo=jax_dp_step.hlo

# the check summaries, without the file name and the Opaque count
run check "$mlir"
expect_rc 0 "check $mlir"
a=$(sed -e 's/^[^:]*: ok: [0-9]* nodes, //' -e 's/, [0-9]* opaque nodes$//' "$OUT")
has "$ERR" "$mlir:37: warning: 3 nodes of foreign op 'stablehlo.dot_general' imported as Opaque (first '0')" "check $mlir"
run check "$hlo"
expect_rc 0 "check $hlo"
b=$(sed -e 's/^[^:]*: ok: [0-9]* nodes, //' -e 's/, [0-9]* opaque nodes$//' "$OUT")
[ "$a" = "3 collectives (AllReduce 2, FusedAllReduce 1), 848 bytes communicated (848 B)" ] ||
  fail "check $mlir: '$a'"
[ "$a" = "$b" ] || fail "check: $mlir has '$a', $hlo has '$b'"

# the same collectives in the same groups: the compiled graphs' collective
# nodes (op, reduction, group ranks, shapes), and the same fused buckets
for f in "$mlir" "$hlo"; do
  run compile -O0 "$f" -o "$work/$f.xml"
  expect_rc 0 "compile -O0 $f"
  grep -E '<group |op="(AllReduce|FusedAllReduce)"' "$work/$f.xml" |
    sed -e 's/ name="[^"]*"//' -e 's/ members="[^"]*"//' >"$work/$f.coll"
  run compile "$f" --json
  expect_rc 0 "compile $f --json"
  sed -e 's/.*"collectives_before":\([0-9]*\),"collectives_after":\([0-9]*\),"bytes_communicated":\([0-9]*\).*"buckets":\[\(.*\)\],"fused_matmul.*/\1 \2 \3/' \
    "$OUT" >"$work/$f.counts"
done
cmp -s "$work/$mlir.coll" "$work/$hlo.coll" || {
  fail "collectives differ between $mlir and $hlo"
  diff "$work/$mlir.coll" "$work/$hlo.coll" >&2
}
[ "$(cat "$work/$mlir.counts")" = "3 1 848" ] || fail "compile $mlir: $(cat "$work/$mlir.counts")"
cmp -s "$work/$mlir.counts" "$work/$hlo.counts" ||
  fail "compile: $mlir gives $(cat "$work/$mlir.counts"), $hlo $(cat "$work/$hlo.counts")"

run run "$mlir" --verify
expect_rc 0 "run $mlir --verify"
has "$OUT" "$mlir: 4 ranks, 1 collective per iteration" "run $mlir --verify"
has "$OUT" "verified" "run $mlir --verify"

run check --strict "$mlir"
expect_last 1 "$mlir:38: error: 2 nodes of foreign op 'stablehlo.reduce' imported as Opaque (first '1/2')" "check --strict $mlir"

# AllToAll (split and concatenated along different dimensions, partitioned
# groups) and CollectivePermute (a ring) against the float64 reference
a2a=$src/tests/stablehlo/alltoall_permute.mlir
run run "$a2a" --verify
expect_rc 0 "run alltoall_permute.mlir --verify"
has "$OUT" "4 ranks, 3 collectives per iteration" "run alltoall_permute.mlir --verify"
has "$OUT" "verified" "run alltoall_permute.mlir --verify"

# pred / i1 (bool: or, and) and the unsigned dtypes, read by both readers
# as IR dtypes (no Opaque stand-ins), give the same collectives and pass
# --verify on 2 ranks
for f in "$src/tests/hlo/pred_unsigned.hlo" "$src/tests/stablehlo/pred_unsigned.mlir"; do
  b=$(basename "$f")
  run check "$f"
  expect_rc 0 "check $b" &&
    has "$OUT" "ok: 16 nodes, 6 collectives (AllReduce 4, AllGather 1, ReduceScatter 1), 208 bytes" "check $b"
  run compile -O0 "$f" -o "$work/$b.xml"
  expect_rc 0 "compile -O0 $b"
  grep -E 'op="(AllReduce|AllGather|ReduceScatter)"' "$work/$b.xml" |
    sed -e 's/ name="[^"]*"//' -e 's/ group="[^"]*"//' >"$work/$b.coll"
  run run "$f" --verify --ranks 2
  expect_rc 0 "run $b --verify" && has "$OUT" "verified" "run $b --verify"
done
grep -q 'dtype="bool" shape="16" reduction="prod"' "$work/pred_unsigned.hlo.coll" ||
  fail "pred_unsigned.hlo: no bool AllReduce with reduction prod (and)"
cmp -s "$work/pred_unsigned.hlo.coll" "$work/pred_unsigned.mlir.coll" || {
  fail "collectives differ between pred_unsigned.hlo and pred_unsigned.mlir"
  diff "$work/pred_unsigned.hlo.coll" "$work/pred_unsigned.mlir.coll" >&2
}

# told from how it starts
IN=$mlir
run check -
expect_rc 0 "check - < $mlir"
has "$OUT" "<stdin>: ok: 21 nodes, 3 collectives" "check - < $mlir"

# an error names the .mlir line
printf 'module {\n  func.func @main(%%a: tensor<4xf32>) -> tensor<4xf32> {\n    %%0 = stablehlo.add %%a, %%b : tensor<4xf32>\n    return %%0 : tensor<4xf32>\n  }\n}\n' >"$work/bad.mlir"
run check "$work/bad.mlir"
expect_last 1 "bad.mlir:3: error: instruction '0': operand 'b' is not defined in computation 'main'" "check bad.mlir"

finish stablehlo
