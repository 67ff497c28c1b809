#!/bin/sh
# dot_errors.sh COLLFUSE SOURCE_DIR
#
# `collfuse dot` on a graph that fails verification still draws it (.dot and
# .svg), with the errors marked, prints every error as FILE:LINE: error: ...
# and exits 1; a graph that does not parse is not drawn (exit 1, the parse
# error, no file written). The drawings' contents are checked byte for byte
# by test_dot's goldens (tests/golden/dot/cycle.dot, several_errors.dot).
set -u

if [ $# -ne 2 ]; then
  echo "usage: dot_errors.sh COLLFUSE SOURCE_DIR" >&2
  exit 2
fi
cf=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
mal=$2/tests/malformed
dir=$(mktemp -d "${TMPDIR:-/tmp}/cf-dot.XXXXXX") || exit 2
trap 'rm -rf "$dir"' EXIT
trap 'exit 130' INT TERM
fails=0

fail() {
  echo "FAIL: $*"
  sed 's/^/    | /' "$dir/err"
  fails=$((fails + 1))
}

# run FILE OUT: collfuse dot $mal/FILE -o $dir/OUT (stderr in $dir/err)
run() {
  (cd "$mal" && timeout -k 5 $((60 * ${CF_TEST_TIME_SCALE:-1})) "$cf" dot "$1" -o "$dir/$2") >"$dir/out" 2>"$dir/err"
  rc=$?
}

several="several_errors.xml:7: error: node 'b': attribute 'reduction' is not allowed on Input
several_errors.xml:9: error: node 'ar': fusion=2 needs fusion_id >= 0
several_errors.xml:12: error: node 'mm': matmul k mismatch: x1 is (8,4), x2 is (5,6)"
for out in several.dot several.svg; do
  run several_errors.xml "$out"
  [ "$rc" -eq 1 ] || fail "dot several_errors.xml -o $out: exit $rc, expected 1"
  [ "$(cat "$dir/err")" = "$several" ] || fail "dot several_errors.xml -o $out: stderr is not the three errors"
  [ -s "$dir/$out" ] || fail "dot several_errors.xml -o $out: no drawing written"
done
grep -q 'label="mm\\nMatMul\\nerror: matmul k mismatch' "$dir/several.dot" ||
  fail "several.dot does not mark mm with its error"
grep -q '<svg' "$dir/several.svg" || fail "several.svg is not SVG"
grep -q 'matmul k mismatch' "$dir/several.svg" || fail "several.svg does not show the error"

run cycle.xml cycle.svg
[ "$rc" -eq 1 ] || fail "dot cycle.xml -o cycle.svg: exit $rc, expected 1"
[ "$(cat "$dir/err")" = "cycle.xml:4: error: node 'a': cycle: 'a' -> 'b' -> 'c' -> 'a'" ] ||
  fail "dot cycle.xml: stderr"
[ -s "$dir/cycle.svg" ] || fail "dot cycle.xml -o cycle.svg: no drawing written"
grep -q 'stroke="red"' "$dir/cycle.svg" || fail "cycle.svg draws no red edge"

# to stdout: the DOT there, the errors on stderr; --fused cannot fuse a
# broken graph and draws it as it is
(cd "$mal" && "$cf" dot cycle.xml --fused) >"$dir/out" 2>"$dir/err"
rc=$?
[ "$rc" -eq 1 ] || fail "dot cycle.xml --fused: exit $rc, expected 1"
grep -q 'c -> a	\[color=red' "$dir/out" || fail "dot cycle.xml --fused: no red cycle edge on stdout"

# a file that does not parse: nothing to draw
run truncated.xml truncated.svg
[ "$rc" -eq 1 ] || fail "dot truncated.xml: exit $rc, expected 1"
grep -q '^truncated.xml:[0-9]*: error: ' "$dir/err" || fail "dot truncated.xml: no parse error"
[ ! -e "$dir/truncated.svg" ] || fail "dot truncated.xml wrote a drawing"
[ -z "$(ls "$dir" | grep -v '^\(out\|err\|several\.dot\|several\.svg\|cycle\.svg\)$')" ] ||
  fail "dot truncated.xml left a file behind: $(ls "$dir")"

# a valid graph is unchanged: drawn, exit 0, nothing on stderr
(cd "$2" && "$cf" dot examples/tp_block.xml -o "$dir/tp.dot") >"$dir/out" 2>"$dir/err"
rc=$?
[ "$rc" -eq 0 ] && [ ! -s "$dir/err" ] && [ -s "$dir/tp.dot" ] || fail "dot examples/tp_block.xml: exit $rc"

if [ "$fails" -ne 0 ]; then
  echo "dot_errors.sh: $fails case(s) failed" >&2
  exit 1
fi
echo "dot_errors.sh: all cases passed"
