#!/bin/sh
# peer_corpus.sh COLLFUSE SRCDIR
#
# Peers' own modules read: every module of tests/hlo/xla/ (transcribed from
# XLA's combiner tests) and tests/stablehlo/peers/ (from openxla/stablehlo's
# tests), each naming its public source on its first line, passes `check`
# and `compile --json` (exit 0, one JSON object): HLO as XLA's parser takes
# it (instructions wrapped over lines, both comment forms, shapes left out,
# replica_groups={} without a replica count), StableHLO in MLIR's generic
# and pretty forms (`T -> T` types, result lists).
# Prints one line per failure and exits 1 if any.
set -u

if [ $# -ne 2 ]; then
  echo "usage: peer_corpus.sh COLLFUSE SRCDIR" >&2
  exit 2
fi
cf=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
src=$(cd "$2" && pwd)

work=$(mktemp -d "${TMPDIR:-/tmp}/cf-peers.XXXXXX") || exit 2
trap 'rm -rf "$work"' EXIT
trap 'exit 130' INT TERM

. "$(dirname "$0")/lib.sh"

cd "$src/tests" || exit 2
n=0
mkdir "$work/json"
for f in hlo/xla/*.hlo stablehlo/peers/*.mlir; do
  n=$((n + 1))
  read -r first <"$f"
  case $first in "// Transcribed from openxla/"*) ;; *) fail "$f: no provenance line" ;; esac
  run check "$f" && expect_rc 0 "check $f" && has "$OUT" "$f: ok:" "check $f"
  # (every output is parsed as JSON below, by one python3 for all)
  if run compile "$f" --json && expect_rc 0 "compile --json $f"; then
    cp "$OUT" "$work/json/$n"
    echo "$f" >"$work/json/$n.name"
  fi
done
[ "$n" -ge 40 ] || fail "only $n peer modules"
python3 - "$work/json" >"$work/notjson" <<'PY'
import json, os, sys
d = sys.argv[1]
for f in sorted(x for x in os.listdir(d) if not x.endswith(".name")):
    try:
        json.load(open(os.path.join(d, f)))
    except ValueError:
        print(open(os.path.join(d, f + ".name")).read().strip())
PY
[ $? -eq 0 ] || fail "peer_corpus.sh: python3 could not check the JSON outputs"
while read -r f; do fail "compile --json $f: not one JSON object"; done <"$work/notjson"

# an op without results (stablehlo.trace) is not imported, but never lost
# without a word: warned about, refused by --strict
t="stablehlo/peers/print_zero_output.mlir:3: warning: 1 node of foreign op 'stablehlo.trace' left out (nothing uses it) (first 'stablehlo.trace')"
run check stablehlo/peers/print_zero_output.mlir
expect_last 0 "$t" "check print_zero_output.mlir"
run check --strict stablehlo/peers/print_zero_output.mlir
expect_last 1 "$(echo "$t" | sed 's/: warning: /: error: /')" "check --strict print_zero_output.mlir"

# the forms of a JAX step as MLIR prints them (chlo.square %70#0 : T -> T,
# reduce ... applies, broadcast_in_dim dims = [], %70:2 = func.call)
run check stablehlo/pretty_forms.mlir
expect_rc 0 "check pretty_forms.mlir" &&
  has "$OUT" "ok: 13 nodes, 1 collective (AllReduce 1)" "check pretty_forms.mlir"
has "$ERR" "warning: 1 node of foreign op 'chlo.square' imported as Opaque (first '71')" \
  "check pretty_forms.mlir"

run check stablehlo/pretty_regions.mlir
expect_rc 0 "check pretty_regions.mlir" &&
  has "$OUT" "ok: 19 nodes, 0 collectives" "check pretty_regions.mlir"
w="stablehlo/while_collective.mlir:4: warning: 1 node of foreign op 'stablehlo.while (1 collective inside, not run)' imported as Opaque (first '0')"
run check stablehlo/while_collective.mlir
expect_last 0 "$w" "check while_collective.mlir"
run check --strict stablehlo/while_collective.mlir
expect_last 1 "$(echo "$w" | sed 's/: warning: /: error: /')" "check --strict while_collective.mlir"

cd hlo/xla || exit 2

# collectives in a while body collfuse cannot run are never hidden: the
# while's warning counts them, and --strict refuses the module
w="ag_while_loop.hlo:22: warning: 1 node of foreign op 'while (2 collectives inside, not run)' imported as Opaque (first 'while_loop')"
run check ag_while_loop.hlo
expect_last 0 "$w" "check ag_while_loop.hlo"
run check --strict ag_while_loop.hlo
expect_last 1 "$(echo "$w" | sed 's/: warning: /: error: /')" "check --strict ag_while_loop.hlo"

# control-predecessors order collectives: none of the three is combined (as
# XLA's DoNotCombineWithControlDependencies expects), where without them
# lead_ar and ar1 would be
run compile ar_control_deps.hlo --json
expect_rc 0 "compile --json ar_control_deps.hlo" &&
  has "$OUT" '"collectives_after":3,' "compile --json ar_control_deps.hlo"
# ... and they are control edges of the IR: --explain names them, the
# compiled graph keeps them (<after>), reads back with the same three
# collectives, and runs verified
run compile ar_control_deps.hlo --explain -o "$work/ctl.xml"
expect_rc 0 "compile --explain -o ar_control_deps.hlo" &&
  has "$OUT" "'lead_ar' stays alone: a control dependency orders it against 'ar1'" "explain ar_control_deps.hlo (lead_ar)" &&
  has "$OUT" "a control dependency orders it against 'lead_ar'" "explain ar_control_deps.hlo (ar1)" &&
  has "$work/ctl.xml" '<after ref="lead_ar"/>' "ar_control_deps.hlo: <after> in compile -o"
run compile "$work/ctl.xml" --json
expect_rc 0 "compile --json ctl.xml" && has "$OUT" '"collectives_after":3,' "compile --json ctl.xml"
run run ar_control_deps.hlo --ranks 1 --verify
expect_rc 0 "run --verify ar_control_deps.hlo"

# all-to-alls read from HLO are combinable: a and b (f32 and bf16) share a
# FusedAllToAll (bytes), c, d and e stay apart by dims, replica groups and
# combine_key, and the bucket runs verified
run compile ../alltoall_combine.hlo --explain
expect_rc 0 "compile --explain alltoall_combine.hlo" &&
  has "$OUT" "AllToAll 'b' -> 'alltoall_bucket_0'" "explain alltoall_combine.hlo (b)" &&
  has "$OUT" "'c' stays alone: split_dimension differs (1 vs 0) from 'a'" "explain alltoall_combine.hlo (c)" &&
  has "$OUT" "'e' stays alone: combine_key differs" "explain alltoall_combine.hlo (e)"
run run ../alltoall_combine.hlo --verify --deterministic --json
expect_rc 0 "run --verify alltoall_combine.hlo" && has "$OUT" '"verified":true' "run --verify alltoall_combine.hlo"
finish peer_corpus
