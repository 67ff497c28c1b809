#!/bin/sh
# opaque.sh COLLFUSE SRCDIR
#
# Nothing a reader imports as Opaque goes unreported: `check`, `compile` and
# `run` print one warning per foreign op type (count, first FILE:LINE and
# node, and "did you mean" when the name is a typo of a collective), `check`'s
# summary and `run --json` count the Opaque nodes, `run --verify` names the
# outputs that depend on them as not checked, and --strict (check, compile,
# run) makes them errors (exit 1). The native formats have no foreign ops: a misspelt op there
# is an error of its own. Prints one line per failure and exits 1 if any.
set -u

if [ $# -ne 2 ]; then
  echo "usage: opaque.sh COLLFUSE SRCDIR" >&2
  exit 2
fi
cf=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
src=$(cd "$2" && pwd)

work=$(mktemp -d "${TMPDIR:-/tmp}/cf-opaque.XXXXXX") || exit 2
trap 'rm -rf "$work"' EXIT
trap 'exit 130' INT TERM

. "$(dirname "$0")/lib.sh"

cd "$src/tests" || exit 2

# same WHAT FILE TEXT: FILE is exactly TEXT
same() {
  [ "$(cat "$2")" = "$3" ] || {
    fail "$1: got"
    sed 's/^/    | /' "$2" >&2
  }
}

pb=pbtxt/typo_collectives.pbtxt
pb_warn="$pb:7: warning: 3 nodes of foreign op 'HcomAllReduse' imported as Opaque (first 'ar0'); did you mean 'HcomAllReduce'?
$pb:25: warning: 1 node of foreign op 'AllRedcue' imported as Opaque (first 'ar2'); did you mean 'AllReduce'?"
run check "$pb"
expect_rc 0 "check $pb"
same "check $pb (stderr)" "$ERR" "$pb_warn"
same "check $pb (stdout)" "$OUT" \
  "$pb: ok: 7 nodes, 1 collective (AllGather 1), 32 bytes communicated (32 B), 4 opaque nodes"
run compile "$pb"
expect_rc 0 "compile $pb"
same "compile $pb (stderr)" "$ERR" "$pb_warn"
run check --strict "$pb"
expect_rc 1 "check --strict $pb"
same "check --strict $pb (stderr)" "$ERR" "$(echo "$pb_warn" | sed 's/: warning: /: error: /')"
[ -s "$OUT" ] && fail "check --strict $pb: a summary line for a refused graph"
run compile --strict "$pb" -o "$work/out.xml"
expect_rc 1 "compile --strict $pb"
[ -e "$work/out.xml" ] && fail "compile --strict $pb: wrote the graph"
run run --strict "$pb" --ranks 2
expect_last 1 "$pb:7: error: 3 nodes of foreign op 'HcomAllReduse' imported as Opaque (first 'ar0') and 1 more foreign op; did you mean 'HcomAllReduce'?" \
  "run --strict $pb"

# a misspelt collective nothing consumes, whose types nothing gives, is left
# out of the graph, but never without a word (it went by silently, exit 0,
# even under --strict)
sk=pbtxt/typo_sink.pbtxt
sink="$sk:7: warning: 1 node of foreign op 'HcomAllReduse' left out (nothing uses it) (first 'ar'); did you mean 'HcomAllReduce'?"
run check "$sk"
expect_rc 0 "check $sk"
same "check $sk (stderr)" "$ERR" "$sink"
run check --strict "$sk"
expect_rc 1 "check --strict $sk"
same "check --strict $sk (stderr)" "$ERR" "$(echo "$sink" | sed 's/: warning: /: error: /')"
run run --strict "$sk" --ranks 2
expect_last 1 "$(echo "$sink" | sed 's/: warning: /: error: /')" "run --strict $sk"

# a misspelt StableHLO collective is named with its dialect's spelling
sm=stablehlo/typo_collectives.mlir
run check "$sm"
expect_rc 0 "check $sm"
same "check $sm (stderr)" "$ERR" "$sm:2: warning: 1 node of foreign op 'stablehlo.all_reduse' imported as Opaque (first '1'); did you mean 'stablehlo.all_reduce'?
$sm:7: warning: 1 node of foreign op 'stablehlo.al_gather' imported as Opaque (first '2'); did you mean 'stablehlo.all_gather'?"

hlo=hlo/typo_collectives.hlo
hlo_warn="$hlo:11: warning: 1 node of foreign op 'all-reduse' imported as Opaque (first 'ar.1'); did you mean 'all-reduce'?
$hlo:13: warning: 1 node of foreign op 'exponential' imported as Opaque (first 'e.1')"
run check "$hlo"
expect_rc 0 "check $hlo"
same "check $hlo (stderr)" "$ERR" "$hlo_warn"
same "check $hlo (stdout)" "$OUT" \
  "$hlo: ok: 5 nodes, 1 collective (AllReduce 1), 32 bytes communicated (32 B), 2 opaque nodes"
run compile "$hlo"
expect_rc 0 "compile $hlo"
same "compile $hlo (stderr)" "$ERR" "$hlo_warn"
run compile --strict "$hlo"
expect_rc 1 "compile --strict $hlo"
same "compile --strict $hlo (stderr)" "$ERR" "$(echo "$hlo_warn" | sed 's/: warning: /: error: /')"
# run warns as check does (the same lines), counts the Opaque nodes in its
# JSON and lists the outputs they feed; --verify says it did not check
# those (they hold the same synthetic data in the run and the reference)
run run "$hlo" --verify
expect_rc 0 "run $hlo --verify"
same "run $hlo --verify (stderr)" "$ERR" "$hlo_warn"
has "$OUT" "; verified (max rel err 0); not checked: 1 of 1 output depends on Opaque nodes, which run on synthetic data ('output')" \
  "run $hlo --verify"
run run "$hlo" --json
expect_rc 0 "run $hlo --json"
same "run $hlo --json (stderr)" "$ERR" "$hlo_warn"
has "$OUT" '"outputs":["output"],"opaque_nodes":2,"opaque_outputs":["output"]' "run $hlo --json"
run run "$pb" --ranks 2 --json
expect_rc 0 "run $pb --json"
same "run $pb --json (stderr)" "$ERR" "$pb_warn"
has "$OUT" '"opaque_nodes":4,' "run $pb --json"
run run --strict "$hlo"
expect_last 1 "$hlo:11: error: 1 node of foreign op 'all-reduse' imported as Opaque (first 'ar.1') and 1 more foreign op; did you mean 'all-reduce'?" \
  "run --strict $hlo"
# standard input names <stdin>
IN=$hlo
run check --strict -
expect_last 1 "<stdin>:11: error: 1 node of foreign op 'all-reduse'" "check --strict - < $hlo"

# a graph without foreign ops: no warning, no opaque count, --strict passes
run check --strict "$src/examples/pbtxt/hccl_op.pbtxt"
expect_rc 0 "check --strict hccl_op.pbtxt"
[ -s "$ERR" ] && fail "check hccl_op.pbtxt: printed on stderr"
grep -q "opaque node" "$OUT" && fail "check hccl_op.pbtxt: an opaque count"

# the native formats: Opaque is written on purpose (counted, never a
# warning), and a misspelt op is an error with its own suggestion
cat >"$work/o.xml" <<'X'
<graph name="o" version="1">
  <node name="x" op="Input" dtype="float32" shape="4"/>
  <node name="t" op="Opaque" type="tanh" dtype="float32" shape="4"><input ref="x"/></node>
  <node name="y" op="Output"><input ref="t"/></node>
</graph>
X
run check --strict "$work/o.xml"
expect_rc 0 "check --strict o.xml"
[ -s "$ERR" ] && fail "check --strict o.xml: printed on stderr"
has "$OUT" ", 1 opaque node" "check o.xml"
# ... run counts it too, and --verify names the output it feeds
run run "$work/o.xml" --verify --json
expect_rc 0 "run o.xml --verify --json"
[ -s "$ERR" ] && fail "run o.xml: printed on stderr"
has "$OUT" '"opaque_nodes":1,"opaque_outputs":["y"]' "run o.xml --json"
sed 's/op="Opaque" type="tanh"/op="AllRedcue"/' "$work/o.xml" >"$work/typo.xml"
run check "$work/typo.xml"
expect_last 1 "typo.xml:3: error: node 't': unknown op 'AllRedcue'; did you mean 'AllReduce'?" "check typo.xml"

# an output that does not depend on the Opaque node is checked; the one that does is named
cat >"$work/half.xml" <<'X'
<graph name="half" version="1" world_size="2">
  <node name="x" op="Input" dtype="float32" shape="4"/>
  <node name="t" op="Opaque" type="tanh" dtype="float32" shape="4"><input ref="x"/></node>
  <node name="a" op="AllReduce" reduction="sum"><input ref="t"/></node>
  <node name="b" op="AllReduce" reduction="sum"><input ref="x"/></node>
  <node name="ya" op="Output"><input ref="a"/></node>
  <node name="yb" op="Output"><input ref="b"/></node>
</graph>
X
run run "$work/half.xml" --verify
expect_rc 0 "run half.xml --verify"
has "$OUT" "; not checked: 1 of 2 outputs depends on Opaque nodes, which run on synthetic data ('ya')" "run half.xml --verify"
run run "$work/half.xml" --verify --json
has "$OUT" '"opaque_nodes":1,"opaque_outputs":["ya"]' "run half.xml --verify --json"
# no Opaque node: no note, nothing listed
run run "$src/examples/tp_mlp.xml" --verify --json
has "$OUT" '"opaque_nodes":0,"opaque_outputs":[]' "run tp_mlp.xml --json"

# run --input for an Input whose data stops at Opaque nodes: a warning, and
# the run goes on; an Input that reaches a collective gets none
cat >"$work/feed.xml" <<'X'
<graph name="feed" version="1" world_size="2">
  <node name="x" op="Input" dtype="float32" shape="4"/>
  <node name="t" op="Opaque" type="tanh" dtype="float32" shape="4"><input ref="x"/></node>
  <node name="ar" op="AllReduce" reduction="sum"><input ref="t"/></node>
  <node name="z" op="Input" dtype="float32" shape="4"/>
  <node name="r" op="Reshape" shape="2,2"><input ref="z"/></node>
  <node name="ar2" op="AllReduce" reduction="sum"><input ref="r"/></node>
  <node name="y" op="Output"><input ref="ar"/></node>
  <node name="y2" op="Output"><input ref="ar2"/></node>
</graph>
X
if /usr/bin/python3 -c 'import numpy' 2>/dev/null; then
  /usr/bin/python3 -c 'import numpy as np, sys; np.save(sys.argv[1], np.arange(4, dtype=np.float32) + 1)' "$work/x.npy"
  run run "$work/feed.xml" --input "x=$work/x.npy" --input "z=$work/x.npy"
  expect_rc 0 "run feed.xml --input"
  has "$ERR" "collfuse run: warning: --input x=$work/x.npy: Input 'x' reaches no collective (only Opaque nodes, which collfuse does not run, or none read it): its data cannot affect the collectives" "run feed.xml --input x"
  grep -q "Input 'z'" "$ERR" && fail "run feed.xml --input z: warned though z reaches ar2"
fi

finish opaque
