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

# the long part (PART=long, lib.sh; ctest's e2e/peer_corpus_long): every
# module of hlo/xla/verify.txt runs on the ranks it implies, verified
# against the float64 reference
if part long; then
  v=0
  while read -r f; do
    case $f in '#'* | '') continue ;; esac
    v=$((v + 1))
    LIMIT=60
    run run "hlo/xla/$f" --verify --json
    expect_rc 0 "run --verify $f" && has "$OUT" '"verified":true' "run --verify $f"
  done <hlo/xla/verify.txt
  LIMIT=20
  [ "$v" -ge 50 ] || fail "only $v modules in hlo/xla/verify.txt"
  [ "${PART:-}" = long ] && finish peer_corpus_long
fi

n=0
mkdir "$work/json"
# one `check` reads them all (a process each cost as much as the rest)
LIMIT=120
run check hlo/xla/*.hlo stablehlo/peers/*.mlir
expect_rc 0 "check of every peer module"
LIMIT=20
cp "$OUT" "$work/checked"
for f in hlo/xla/*.hlo stablehlo/peers/*.mlir; do
  n=$((n + 1))
  read -r first <"$f"
  case $first in "// Transcribed from openxla/"*) ;; *) fail "$f: no provenance line" ;; esac
  has "$work/checked" "$f: ok:" "check $f"
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
  has "$OUT" "ok: 21 nodes, 0 collectives" "check pretty_regions.mlir"
# collectives in a while body are read into a region of the graph: seen,
# counted and compiled; the while stays Opaque (the warning, --strict), and
# run refuses the module, naming the op and its line
w="stablehlo/while_collective.mlir:4: warning: 1 node of foreign op 'stablehlo.while' imported as Opaque (first '0')"
run check stablehlo/while_collective.mlir
expect_rc 0 "check while_collective.mlir" &&
  has "$OUT" "ok: 6 nodes, 1 collective (AllReduce 1)" "check while_collective.mlir" &&
  has "$ERR" "$w" "check while_collective.mlir"
run check --strict stablehlo/while_collective.mlir
expect_rc 1 "check --strict while_collective.mlir" &&
  has "$ERR" "$(echo "$w" | sed 's/: warning: /: error: /')" "check --strict while_collective.mlir"
run run stablehlo/while_collective.mlir --ranks 2
expect_last 1 "stablehlo/while_collective.mlir:4: error: stablehlo.while '0': loop bodies are compiled but not run" \
  "run while_collective.mlir"
run check stablehlo/control_flow.mlir
expect_rc 0 "check control_flow.mlir" && has "$OUT" "ok: 18 nodes, 6 collectives (AllReduce 6)" "check control_flow.mlir"
run compile stablehlo/control_flow.mlir --json --split bytes:1G
expect_rc 0 "compile --json control_flow.mlir" &&
  has "$OUT" '"collectives_before":6,"collectives_after":5,' "compile --json control_flow.mlir"
run run stablehlo/control_flow.mlir --ranks 2
expect_last 1 "stablehlo/control_flow.mlir:11: error: stablehlo.while 'w': loop bodies are compiled but not run" \
  "run control_flow.mlir"
run run hlo/control_flow.hlo --ranks 4
expect_last 1 "hlo/control_flow.hlo:51: error: while 'loop': loop bodies are compiled but not run" \
  "run control_flow.hlo"
# combined within a body, never across its boundary (XLA's combiners, whose
# combine_while_loops is true by default, combine inside a while body too)
run compile hlo/control_flow.hlo --json --split bytes:1G
expect_rc 0 "compile --json control_flow.hlo" &&
  has "$OUT" '"collectives_before":8,"collectives_after":5,' "compile --json control_flow.hlo" &&
  has "$OUT" '"members":["body_ar1","body_ar0"]' "compile --json control_flow.hlo (body)" &&
  has "$OUT" '"members":["then_ar0","then_ar1"],"bytes":64,"dtype":"float32","reduction":"sum","group":"hccl_world_group","reason":"split","region":"conditional '"'pick'"' true branch"}' "compile --json control_flow.hlo (branch)"
run compile hlo/control_flow.hlo --explain --split bytes:1G
expect_rc 0 "compile --explain control_flow.hlo" &&
  has "$OUT" "AllReduce 'else_ar' stays alone: body differs (conditional 'pick' false branch vs the top level) from 'pre'" \
    "compile --explain control_flow.hlo"
# compile -o keeps the regions (<region>, region="K"): the written graph
# reads back with the same buckets and run still refuses it
run compile hlo/control_flow.hlo --split bytes:1G -o "$work/cf.xml"
expect_rc 0 "compile -o control_flow.hlo" &&
  has "$work/cf.xml" '<region id="2" op="while" owner="loop" part="body" parent="0"/>' "control_flow.hlo: <region> in compile -o"
run compile "$work/cf.xml" --json --split bytes:1G
expect_rc 0 "compile --json cf.xml" && has "$OUT" '"collectives_before":5,"collectives_after":5,' "compile --json cf.xml"
run run "$work/cf.xml" --ranks 4
expect_last 1 "cf.xml:3: error: while 'loop': loop bodies are compiled but not run" "run cf.xml"
run dot hlo/control_flow.hlo -o "$work/cf.dot"
expect_rc 0 "dot control_flow.hlo" &&
  has "$work/cf.dot" "cluster_region_2" "dot control_flow.hlo: the while body is a cluster"

cd hlo/xla || exit 2

# XLA's AllGatherCombiner DoNotCombineInWhileLoop module: with XLA's default
# combine_while_loops=true the two all-gathers of the body combine (the test
# turns it off); the while's warning stays, and --strict refuses the module
w="ag_while_loop.hlo:22: warning: 1 node of foreign op 'while' imported as Opaque (first 'while_loop')"
run check ag_while_loop.hlo
expect_last 0 "$w" "check ag_while_loop.hlo"
run check --strict ag_while_loop.hlo
expect_last 1 "$(echo "$w" | sed 's/: warning: /: error: /')" "check --strict ag_while_loop.hlo"
run compile ag_while_loop.hlo --json
expect_rc 0 "compile --json ag_while_loop.hlo" &&
  has "$OUT" '"collectives_before":2,"collectives_after":1,' "compile --json ag_while_loop.hlo"

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
