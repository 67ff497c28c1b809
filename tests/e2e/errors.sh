#!/bin/sh
# errors.sh COLLFUSE SRCDIR
#
# End-to-end checks that the messages a user acts on say what is wrong, with
# their exit codes: a job sized unlike its graph, --save-outputs names that
# meet in one file, escaped and cut excerpts of bad input, standard input and
# output as `-`, output paths that cannot be written, and one form per kind
# of message (usage errors the library finds, errors that name no file).
# Every command runs under `timeout 20`. Prints one line per failure and
# exits 1 if there was any.
set -u

if [ $# -ne 2 ]; then
  echo "usage: errors.sh COLLFUSE SRCDIR" >&2
  exit 2
fi
cf=$1
src=$2
ex=$src/examples

work=$(mktemp -d "${TMPDIR:-/tmp}/cf-errors.XXXXXX") || exit 2
trap 'rm -rf "$work"' EXIT
trap 'exit 130' INT TERM

. "$(dirname "$0")/lib.sh"

# ---- the job's size against the graph's
run run "$ex/reduce_root.xml" --ranks 2
expect_last 1 "reduce_root.xml: error: the graph is for 4 ranks (world_size=4) and the job has 2 (--ranks 2); run it with 4 ranks" \
  "Reduce root 2 at --ranks 2"
run run "$ex/tp_mlp.xml" --ranks 2
expect_last 1 "tp_mlp.xml: error: the graph is for 4 ranks (world_size=4) and the job has 2 (--ranks 2); run it with 4 ranks" \
  "group of 4 at --ranks 2"
run bench fusion "$ex/tp_mlp.xml" --ranks 2 --quick
expect_last 1 "tp_mlp.xml: error: the graph is for 4 ranks (world_size=4) and the job has 2 (--ranks 2)" \
  "bench fusion at --ranks 2"
# a graph broken at its own size keeps its own message
cat >"$work/oob.xml" <<'X'
<graph name="oob" version="1" world_size="4">
  <node name="x" op="Input" dtype="float32" shape="4"/>
  <node name="r" op="Reduce" root="5"><input ref="x"/></node>
</graph>
X
run run "$work/oob.xml" --ranks 2
expect_last 1 "oob.xml:3: error: node 'r': root=5 out of range: need 0 <= root < 4" "root out of range at any size"
# data parallelism fits any size
run run "$ex/allgather_layouts.xml" --ranks 2
expect_last 0 "" "allgather_layouts.xml at --ranks 2"

# ---- --save-outputs: names that sanitise alike keep apart, deterministically
cat >"$work/names.xml" <<'X'
<graph name="names" version="1" world_size="2">
  <node name="x" op="Input" dtype="float32" shape="3" init="iota"/>
  <node name="y" op="Input" dtype="int32" shape="2,2" init="ones"/>
  <node name="a/b/c" op="Output"><input ref="x"/></node>
  <node name="a_b_c" op="Output"><input ref="y"/></node>
  <node name="a/b_c" op="Output"><input ref="x"/></node>
  <node name="p/q" op="Output"><input ref="y"/></node>
</graph>
X
run run "$work/names.xml" --save-outputs "$work/saved"
if expect_last 0 "collfuse run: output 'a/b/c' saved as a_b_c~1.npy (a_b_c.npy is taken; $work/saved/outputs.json lists every output's file)"   "--save-outputs clash"; then
  grep -Fq "output 'a/b_c' saved as a_b_c~2.npy" "$ERR" || fail "--save-outputs clash: a/b_c not reported"
  [ "$(grep -c 'saved as' "$ERR")" -eq 2 ] || fail "--save-outputs clash: not exactly 2 renames reported"
  for r in 0 1; do
    [ "$(cd "$work/saved/rank$r" && ls | tr '\n' ' ')" = "a_b_c.npy a_b_c~1.npy a_b_c~2.npy p_q.npy " ] ||
      fail "--save-outputs clash: rank$r holds $(ls "$work/saved/rank$r" | tr '\n' ' ')"
  done
  # the int32 ones is a_b_c itself, the float32 iota the renamed ones
  od -An -tx1 -j 128 "$work/saved/rank0/a_b_c.npy" | tr -d ' \n' | grep -q '^01000000' ||
    fail "--save-outputs clash: a_b_c.npy is not output a_b_c"
  python3 - "$work/saved/outputs.json" <<'P' || fail "--save-outputs: outputs.json"
import json, sys
m = json.load(open(sys.argv[1]))
assert m["ranks"] == 2, m
got = [(o["name"], o["file"], o["dtype"], o["shape"]) for o in m["outputs"]]
assert got == [("a/b/c", "a_b_c~1.npy", "float32", [3]), ("a_b_c", "a_b_c.npy", "int32", [2, 2]),
               ("a/b_c", "a_b_c~2.npy", "float32", [3]), ("p/q", "p_q.npy", "int32", [2, 2])], got
P
fi

# ---- messages never echo raw binary, and cut long excerpts
run check "$src/tests/hlo/bad_binary_type.hlo"
expect_last 1 "bad_binary_type.hlo:5: error: expected a shape at '\\x01\\xFFqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqq...'" \
  "binary bytes in HLO"
run check "$src/tests/malformed/xsd_ranks.xml"
expect_last 1 "xsd_ranks.xml:3: error: group 'tp': attribute 'ranks': '0:1' is not a rank list: expected comma-separated ranks such as \"0,1,2,3\", or parts split by '|' such as \"0,1|2,3\"" \
  "bad rank list"
for f in "$src/tests/malformed/binary_garbage.xml" "$src/tests/hlo/binary_garbage.hlo" "$src/tests/hlo/bad_binary_type.hlo" \
  "$src/tests/pbtxt/bad_binary_op.pbtxt" "$src/tests/malformed/not_utf8.xml"; do
  run check "$f"
  if LC_ALL=C grep -q '[^[:print:][:space:]]' "$ERR"; then fail "$(basename "$f"): raw bytes on stderr"; fi
done

# ---- '-' is standard input (format told from the text) and standard output
for f in examples/tp_mlp.xml tests/malformed/gml_cycle.graphml tests/hlo/mesh.hlo tests/pbtxt/ge_ops.pbtxt; do
  IN=$src/$f
  run check -
  case $f in
    *gml_cycle*) expect_last 1 "<stdin>:11: error: node 'a': cycle: 'a' -> 'b' -> 'a'" "check - <$f" ;;
    *) expect_last 0 "" "check - <$f" && { grep -q '^<stdin>: ok: ' "$OUT" || fail "check - <$f: no '<stdin>: ok' line"; } ;;
  esac
done
printf 'garbage\n' >"$work/garbage"
IN=$work/garbage
run check -
expect_last 1 "<stdin>: error: unknown graph format (expected .xml, .graphml, .hlo, .mlir or .pbtxt, or text that starts like one: <graph>, <graphml>, HloModule or ENTRY, module, node {)" \
  "check - <garbage"
IN=$ex/tp_mlp.xml
run compile - -o -
if expect_last 0 "" "compile - -o -"; then
  cp "$OUT" "$work/from_stdin.xml"
  run compile "$ex/tp_mlp.xml" -o "$work/from_file.xml"
  cmp -s "$work/from_stdin.xml" "$work/from_file.xml" || fail "compile - -o -: differs from compile FILE -o FILE"
fi
IN=$ex/tp_mlp.xml
run compile - -o - --json
expect_last 2 "collfuse compile: -o -, --dot -, --emit-* - and --json each write to standard output: give one" "compile -o - --json"
IN=$ex/tp_mlp.xml
run compile - --dot - --explain
expect_last 0 "explain: " "compile --dot - --explain (explain on stderr)" && { head -n 1 "$OUT" | grep -q '^digraph' || fail "compile --dot -: no DOT on stdout"; }
IN=$ex/dp_gradients.xml
run compile - --emit-llvm -
expect_last 0 "" "compile --emit-llvm -" && { grep -q '^define ' "$OUT" || fail "compile --emit-llvm -: no LLVM IR on stdout"; }
IN=$ex/tp_mlp.xml
run dot - -o -
expect_last 0 "" "dot - -o -" && { head -n 1 "$OUT" | grep -q '^digraph tp_mlp' || fail "dot - -o -: no DOT on stdout"; }
IN=$ex/tp_mlp.xml
run run - --verify
expect_last 0 "" "run - --verify" && { grep -q '^<stdin>: 4 ranks, .*verified' "$OUT" || fail "run -: summary does not name <stdin>"; }
run run "$ex/tp_mlp.xml" --input x=-
expect_last 2 "collfuse run: --input x=-: inputs are .npy files, one per rank ({rank} in the path), not standard input" "--input x=-"
run run "$ex/tp_mlp.xml" --save-outputs -
expect_last 2 "collfuse run: --save-outputs wants a directory (one .npy file per output and rank), not '-'" "--save-outputs -"
run run - --backend mpi
expect_last 2 "collfuse run: --backend mpi reads FILE in every process: give a file, not '-' (a launcher passes standard input to rank 0 only)" \
  "run - --backend mpi"
IN=$src/tests/ranktable/v1.0_two_servers.json
run ranktable - --hostfile - --rankfile "$work/ranks"
expect_last 0 "" "ranktable - --hostfile -" && { grep -q '^# OpenMPI hostfile (mpirun --hostfile): 2 servers, from <stdin>' "$OUT" || fail "ranktable -: hostfile header"; }
IN=$src/tests/ranktable/bad_duplicate_rank.json
run ranktable -
expect_last 1 "<stdin>: error: server_list[0].device[1]: rank_id 0 is also given to device 0 of server" "ranktable - <bad table"

# ---- outputs that cannot be written name the path and the reason, exit 1
nd=$work/no-such-dir
for o in "compile:-o:x.xml" "compile:--dot:x.svg" "compile:--dot:x.dot" "compile:--emit-llvm:x.ll" "compile:--emit-obj:x.o" "dot:-o:x.png"; do
  cmd=${o%%:*}
  rest=${o#*:}
  run "$cmd" "$ex/dp_gradients.xml" "${rest%%:*}" "$nd/${rest#*:}"
  expect_last 1 "$nd/${rest#*:}: error: cannot write: No such file or directory" "$cmd ${rest%%:*} into a missing directory"
done
run compile "$ex/tp_mlp.xml" -o "$work"
expect_last 1 "$work: error: cannot write: is a directory" "compile -o DIR"
run run "$ex/tp_mlp.xml" --save-outputs "$nd/out"
expect_last 1 "$nd/out: error: cannot create directory: No such file or directory" "--save-outputs in a missing directory"
for opt in --hostfile --rankfile; do
  run ranktable "$src/tests/ranktable/v1.0_two_servers.json" $opt "$nd/f"
  expect_last 1 "$nd/f: error: cannot write: No such file or directory" "ranktable $opt into a missing directory"
  run ranktable "$src/tests/ranktable/v1.0_two_servers.json" --json $opt "$nd/f"
  expect_last 1 "$nd/f: error: cannot write: No such file or directory" "ranktable --json $opt into a missing directory"
done

# ---- one form per kind of message: a usage error the library finds reads
# like the parser's (collfuse CMD: ..., the hint, exit 2); an error that
# names no file says which command (collfuse CMD: error: ..., exit 1)
run run "$ex/tp_mlp.xml" --input nope=x.npy
expect_rc 2 "--input of no Input" && [ "$(cat "$ERR")" = "collfuse run: --input nope=x.npy: the graph has no Input named 'nope'
Try 'collfuse run --help'." ] || fail "--input of no Input: not the usage error"
run dot "$ex/tp_mlp.xml" -o "$work/x.gif"
expect_last 2 "collfuse dot: $work/x.gif: unknown drawing format (use .dot, .svg or .png)" "dot -o x.gif"
has "$ERR" "Try 'collfuse dot --help'." "dot -o x.gif (hint)"
export COLLFUSE_CUDA_DRIVER=libcollfuse-no-such-driver.so.1
run run "$ex/tp_mlp.xml" --device cuda
expect_last 1 "collfuse run: error: no CUDA driver (libcollfuse-no-such-driver.so.1 not found); --device cuda needs an NVIDIA GPU and its driver" \
  "run --device cuda without a driver"
run bench allreduce --device cuda --quick
expect_last 1 "collfuse bench allreduce: error: no CUDA driver (libcollfuse-no-such-driver.so.1 not found)" \
  "bench allreduce --device cuda without a driver"
unset COLLFUSE_CUDA_DRIVER

finish errors.sh
