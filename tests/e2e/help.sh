#!/bin/sh
# help.sh COLLFUSE SRCDIR
#
# The help cannot disagree with the program: for every command the top-level
# --help lists (and every benchmark `bench --help` lists), each option its
# --help names is accepted by its parser (a flag is passed and the parser
# goes on to the next argument; an option with a value at most complains
# about the value), the synopsis names the same options as the option list,
# and a long option mistyped by one letter is answered with "did you mean"
# that option. Then the messages of issue 16: did-you-mean for options,
# commands, benchmarks, choices, targets, passes, ops, dtypes and
# reductions; singular counts; the rank limit (256) for a graph's world_size
# (exit 1) and for --ranks (exit 2); dot --target and --passes. Then
# issue 17's option values: missing or empty values and empty list items
# are usage errors for every option of every command. Prints one
# line per failure and exits 1 if there was any.
set -u

if [ $# -ne 2 ]; then
  echo "usage: help.sh COLLFUSE SRCDIR" >&2
  exit 2
fi
cf=$1
src=$2

work=$(mktemp -d "${TMPDIR:-/tmp}/cf-help.XXXXXX") || exit 2
trap 'rm -rf "$work"' EXIT
trap 'exit 130' INT TERM

. "$(dirname "$0")/lib.sh"
FAIL_LINES=5
BOGUS=--zz-not-an-option

# ------------------------------------------------ every --help against its parser
run --help || exit 1
cmds=$(sed -n '/^commands:/,/^$/p' "$OUT" | awk 'NR > 1 && NF { print $1 ($1 == "bench" ? " " $2 : "") }')
[ -n "$cmds" ] || fail "--help lists no commands"
run bench --help
for b in $(sed -n '/^benchmarks:/,/^$/p' "$OUT" | awk 'NR > 1 && NF { print $2 }'); do
  echo "$cmds" | grep -qx "bench $b" || fail "bench --help lists '$b', collfuse --help does not"
done
echo "$cmds" >"$work/cmds"
while read -r cmd; do
  # shellcheck disable=SC2086
  run $cmd --help || continue
  [ "$rc" -eq 0 ] || { fail "$cmd --help: exit $rc"; continue; }
  cp "$OUT" "$work/help"
  grep -q "^usage: collfuse $cmd" "$work/help" || fail "$cmd --help: no usage line"
  # the option list: lines "  -x, --long VALUE   text" after "options:"
  sed -n '/^options:/,/^$/p' "$work/help" | grep -E '^  -' >"$work/optlines"
  [ -s "$work/optlines" ] || fail "$cmd --help lists no options"
  # the synopsis names the same options as the list (-h/--help aside)
  sed -n '1,/^$/p' "$work/help" | grep -oE '\[-[-A-Za-z0-9]+' | sed 's/^\[//' | sort >"$work/syn"
  sed 's/^  //; s/,.*//; s/ .*//' "$work/optlines" | grep -vx -- -h | sort >"$work/list"
  cmp -s "$work/syn" "$work/list" || fail "$cmd --help: synopsis and option list differ: $(diff "$work/syn" "$work/list" | tr '\n' ' ')"
  while read -r line; do
    # the left part: up to column 20 when the help follows on the same line
    left=$line
    case $line in ????????????????????"  "?*) left=$(printf '%s' "$line" | cut -c1-20) ;; esac
    # its names (the words up to the first that is no option, without their
    # commas) and the value's name after them, without starting a process
    names=
    value=
    set -f
    # shellcheck disable=SC2086 # the words of the line
    set -- $left
    set +f
    for w in "$@"; do
      case $w in
        -*) names="$names ${w%,}" ;;
        *) value=$w; break ;;
      esac
    done
    for opt in $names; do
      case $opt in -h | --help) continue ;; esac
      if [ -z "$value" ]; then
        # a flag: accepted, so the parser reaches the next argument
        # shellcheck disable=SC2086
        expect 2 "unknown option '$BOGUS'" $cmd "$opt" "$BOGUS"
      else
        # shellcheck disable=SC2086
        run $cmd "$opt" 1 "$BOGUS" || continue
        [ "$rc" -eq 2 ] || fail "$cmd $opt 1 $BOGUS: exit $rc, expected 2"
        if grep -Fq "unknown option '$opt'" "$ERR"; then fail "$cmd --help lists $opt, the parser refuses it"; fi
        # --opt=V is the same option
        # shellcheck disable=SC2086
        run $cmd "$opt=1" "$BOGUS" || continue
        if grep -Fq "unknown option '$opt'" "$ERR"; then fail "$cmd refuses $opt=1"; fi
      fi
      case $opt in
        --??????*) # a long option typed without its last letter gets a suggestion
          short=${opt%?}
          if ! grep -Eq "^ +($short)[ ,]|, ($short)( |$)" "$work/optlines"; then
            # shellcheck disable=SC2086
            expect 2 "unknown option '$short'; did you mean '$opt'?" $cmd "$short"
          fi
          ;;
      esac
    done
  done <"$work/optlines"
done <"$work/cmds"

# ------------------------------------------------ did you mean
expect 2 "collfuse run: unknown option '--rank'; did you mean '--ranks'?" run "$src/examples/tp_mlp.xml" --rank 2
expect 2 "Try 'collfuse run --help'." run "$src/examples/tp_mlp.xml" --rank 2
expect 2 "collfuse: unknown command 'chek'; did you mean 'check'?" chek x.xml
expect 2 "collfuse bench: unknown benchmark 'reduc'; did you mean 'reduce'?" bench reduc
expect 2 "collfuse check: --target: unknown target 'atlas-a22'; did you mean 'atlas-a2'?" check "$src/examples/tp_block.xml" --target atlas-a22
expect 2 "unknown target 'tpu-v9' (one of: cpu, atlas-a2" compile "$src/examples/tp_block.xml" --target tpu-v9
expect 2 "collfuse compile: --passes: unknown pass 'fuse-allreduc'; did you mean 'fuse-allreduce'?" compile "$src/examples/tp_block.xml" --passes dce,fuse-allreduc
expect 2 "collfuse run: --backend wants threads, mpi or shm, got 'mpii'; did you mean 'mpi'?" run "$src/examples/tp_mlp.xml" --backend mpii
expect 2 "collfuse run: --algo wants auto, direct, pool, rd, ring, rsag or mpi-native, got 'rign'; did you mean 'ring'?" run "$src/examples/tp_mlp.xml" --algo rign
expect 0 "median" run "$src/examples/tp_mlp.xml" --algo recursive-doubling   # rd's alias, as the C API takes it
cat >"$work/typo.xml" <<'EOF'
<?xml version="1.0" encoding="UTF-8"?>
<graph name="typo" version="1" world_size="2">
  <node name="x" op="Input" dtype="float32" shape="4"/>
  <node name="ar" op="AllReduse" reduction="sum"><input ref="x"/></node>
  <node name="y" op="Output"><input ref="ar"/></node>
</graph>
EOF
expect 1 "typo.xml:4: error: node 'ar': unknown op 'AllReduse'; did you mean 'AllReduce'?" check "$work/typo.xml"
# GraphML: op, dtype and reduction go through the IR's own parsers
graphml() { # graphml FILE OP DTYPE REDUCTION
  cat >"$1" <<EOF
<?xml version="1.0" encoding="UTF-8"?>
<graphml xmlns="http://graphml.graphdrawing.org/xmlns">
  <key id="d0" for="node" attr.name="op" attr.type="string"/>
  <key id="d1" for="node" attr.name="dtype" attr.type="string"/>
  <key id="d2" for="node" attr.name="shape" attr.type="string"/>
  <key id="d3" for="node" attr.name="reduction" attr.type="string"/>
  <key id="g0" for="graph" attr.name="world_size" attr.type="int"/>
  <graph edgedefault="directed">
    <data key="g0">2</data>
    <node id="x"><data key="d0">Input</data><data key="d1">$3</data><data key="d2">4</data></node>
    <node id="ar"><data key="d0">$2</data><data key="d3">$4</data></node>
    <node id="y"><data key="d0">Output</data></node>
    <edge source="x" target="ar"/>
    <edge source="ar" target="y"/>
  </graph>
</graphml>
EOF
}
graphml "$work/op.graphml" AllReduse float32 sum
expect 1 "node 'ar': unknown op 'AllReduse'; did you mean 'AllReduce'?" check "$work/op.graphml"
graphml "$work/dtype.graphml" AllReduce flaot32 sum
expect 1 "node 'x': unknown dtype dtype='flaot32'; did you mean 'float32'?" check "$work/dtype.graphml"
graphml "$work/red.graphml" AllReduce float32 summ
expect 1 "node 'ar': unknown reduction 'summ'; did you mean 'sum'?" check "$work/red.graphml"
graphml "$work/far.graphml" AllReduce float32 average
expect 1 "node 'ar': unknown reduction 'average' (sum, mean, max, min, prod)" check "$work/far.graphml"

# ------------------------------------------------ singular and plural
cat >"$work/one.xml" <<'EOF'
<?xml version="1.0" encoding="UTF-8"?>
<graph name="one" version="1" world_size="1">
  <node name="x" op="Input" dtype="float32" shape="4"/>
  <node name="ar" op="AllReduce" reduction="sum" fusion="0"><input ref="x"/></node>
  <node name="y" op="Output"><input ref="ar"/></node>
</graph>
EOF
cat >"$work/node.xml" <<'EOF'
<?xml version="1.0" encoding="UTF-8"?>
<graph name="node" version="1">
  <node name="x" op="Input" dtype="float32" shape="4"/>
</graph>
EOF
expect 0 "node.xml: ok: 1 node, 0 collectives," check "$work/node.xml"
expect 0 "one.xml: ok: 3 nodes, 1 collective (AllReduce 1)," check "$work/one.xml"
expect 0 "one.xml: 3 nodes, 1 collective before, 1 after" compile "$work/one.xml"
expect 0 "one.xml: 1 rank, 1 collective per iteration, median" run "$work/one.xml"
expect 0 "over 1 iteration;" run "$work/one.xml" --verify
expect 0 "over 2 iterations" run "$work/one.xml" --iters 2
expect 0 "run: 1 rank, 1 collective (1 in place), " run "$work/one.xml" -v
expect 0 "over 1 rank: " run "$work/one.xml" -v

# ------------------------------------------------ the rank limit
sed 's/world_size="1"/world_size="300"/' "$work/one.xml" >"$work/ws300.xml"
expect 1 "ws300.xml:2: error: world_size='300' must be an integer in 0..256" check "$work/ws300.xml"
expect 1 "ws300.xml:2: error: world_size='300' must be an integer in 0..256" run "$work/ws300.xml"
sed 's/world_size="1"/world_size="256"/' "$work/one.xml" >"$work/ws256.xml"
expect 0 "ws256.xml: ok:" check "$work/ws256.xml"
expect 2 "collfuse run: --ranks wants an integer in 1..256, got '300'" run "$work/one.xml" --ranks 300
expect 2 "collfuse run: --ranks wants an integer in 1..256, got '257'" run "$work/one.xml" --ranks=257
expect 2 "collfuse bench fusion: --ranks wants an integer in 1..256, got '300'" bench fusion "$work/one.xml" --ranks 300

# ------------------------------------------------ dot --target, --passes
expect 0 "digraph" dot "$src/examples/tp_block.xml" --target atlas-a2
expect 2 "collfuse dot: --target: unknown target 'atlas-a22'; did you mean 'atlas-a2'?" dot "$src/examples/tp_block.xml" --target atlas-a22
expect 1 "target atlas-a2: AllReduce does not support dtype int64" dot "$src/tests/malformed/target_a2_int64.xml" --target atlas-a2
expect 2 "collfuse dot: --passes and --fused exclude each other" dot "$src/examples/tp_block.xml" --fused --passes dce
expect 2 "collfuse dot: --passes: unknown pass 'dcee'; did you mean 'dce'?" dot "$src/examples/tp_block.xml" --passes dcee
if run dot "$src/examples/tp_block.xml" --passes fuse-matmul-collective; then
  [ "$rc" -eq 0 ] || fail "dot --passes fuse-matmul-collective: exit $rc"
  grep -q MatmulReduceScatter "$OUT" || fail "dot --passes fuse-matmul-collective: no MatmulReduceScatter drawn"
fi
if run dot "$src/examples/tp_block.xml"; then
  grep -q MatmulReduceScatter "$OUT" && fail "dot without passes draws a MatmulReduceScatter"
fi

# ------------------------------------------------ option values (issue 17)
# Every option with a value, as each command's --help lists it: a missing
# value (the option last on the line), an empty one and an empty --opt= are
# usage errors, never a default; a comma list (a value name with a comma,
# LIST or SPEC) refuses empty items.
while read -r cmd; do
  run $cmd --help || continue
  sed -n '/^options:/,/^$/p' "$OUT" | grep '^  -' | sed 's/^  //; s/   */\t/' | cut -f1 |
    sed 's/, / /' >"$work/opts"
  while read -r name rest; do
    value=${rest##* }
    case $value in -* | "") continue ;; esac # a flag
    expect 2 "collfuse $cmd: $name needs a value" $cmd "$name"
    expect 2 "collfuse $cmd: $name needs a value" $cmd "$name" ''
    expect 2 "collfuse $cmd: $name needs a value" $cmd "$name="
    case $value in
    *,* | LIST | SPEC)
      for v in ,,, a,,b a, ,a; do
        expect 2 "collfuse $cmd: $name has an empty item in '$v' (separate items with one comma)" \
          $cmd "$name" "$v"
      done
      ;;
    esac
  done <"$work/opts"
done <"$work/cmds"
expect 2 "collfuse run: --input wants NAME=FILE.npy, got 'x='" run "$src/examples/tp_mlp.xml" --input x=
expect 0 "over 1 iteration" run "$src/examples/tp_mlp.xml" --passes verify,dce

# ------------------------------------------------ input formats from the readers
for cmd in check compile run dot; do
  if run "$cmd" --help; then
    for ext in .xml .graphml .hlo .pbtxt; do
      grep -q "input formats:.*$ext\|^  .*$ext (" "$OUT" || fail "$cmd --help does not list $ext"
    done
  fi
done
if run --help; then
  for ext in .xml .graphml .hlo .pbtxt; do grep -Fq "$ext" "$OUT" || fail "--help does not list $ext"; done
fi

finish help.sh
