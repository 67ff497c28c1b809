#!/bin/sh
# bench_api.sh COLLFUSE SRCDIR
#
# `collfuse bench fusion FILE --api`: a DP step through the C API with
# separate buffers makes two copies per gradient and rank, with bucket views
# none; the table's header and rows, its JSON, and a job sized unlike the
# graph refused with the library's message. Times are not checked (not a
# timed test). Prints one line per failure and exits 1 if there was any.
set -u

if [ $# -ne 2 ]; then
  echo "usage: bench_api.sh COLLFUSE SRCDIR" >&2
  exit 2
fi
cf=$1
src=$2
ex=$src/examples

work=$(mktemp -d "${TMPDIR:-/tmp}/cf-bench-api.XXXXXX") || exit 2
trap 'rm -rf "$work"' EXIT
trap 'exit 130' INT TERM

. "$(dirname "$0")/lib.sh"
LIMIT=120

# 12 gradients, fused into buckets by the default pipeline
{
  echo '<graph name="ddp" version="1" world_size="3">'
  i=0
  while [ $i -lt 12 ]; do
    echo "  <node name='g$i' op='Input' dtype='float32' shape='$((1000 + i))'/>"
    echo "  <node name='ar$i' op='AllReduce' reduction='mean'><input ref='g$i'/></node>"
    echo "  <node name='o$i' op='Output'><input ref='ar$i'/></node>"
    i=$((i + 1))
  done
  echo '</graph>'
} >"$work/ddp.xml"

if run bench fusion "$work/ddp.xml" --api --quick --ranks 3; then
  expect_last 0 "" "bench fusion --api"
  has "$OUT" "ddp.xml on 3 ranks (C API, threads transport, CPU device)" "header"
  has "$OUT" "12 inputs (47.1 KiB per rank) in 1 bucket; median ms per step (one cf_executable_run) over 2 steps after 1 warm-up" "totals"
  grep -Eq '^separate buffers +72 +2\.00 ' "$OUT" || fail "separate buffers: not 72 copies, 2.00 per input"
  grep -Eq '^bucket views +0 +0\.00 ' "$OUT" || fail "bucket views: not 0 copies"
fi
if run bench fusion "$work/ddp.xml" --api --iters 3 --warmup 0 --ranks 2 --json; then
  expect_last 0 "" "bench fusion --api --json"
  /usr/bin/python3 - "$OUT" <<'P' || fail "bench fusion --api --json: $(cat "$OUT")"
import json, sys
j = json.load(open(sys.argv[1]))
assert j["bench"] == "fusion-api" and j["ranks"] == 2 and j["iters"] == 3 and j["inputs"] == 12, j
sep, views = j["sides"]
assert sep["name"] == "separate buffers" and sep["copies"] == 48 and sep["copies_per_input"] == 2, sep
assert sep["copy_bytes"] == 2 * 2 * sum(4 * (1000 + i) for i in range(12)), sep
assert views["name"] == "bucket views" and views["copies"] == 0 and views["copy_bytes"] == 0, views
assert sep["time_ms"] > 0 and views["time_ms"] > 0 and j["ratio"] > 0 and "cpu_ms" in views and "cpu_ratio" in j, j
P
fi
run bench fusion "$ex/tp_mlp.xml" --api --ranks 2 --quick
expect_last 1 "tp_mlp.xml: error: the graph is for 4 ranks (world_size=4) and the job has 2 (option ranks=2); run it with 4 ranks" \
  "bench fusion --api at --ranks 2"

finish bench_api
