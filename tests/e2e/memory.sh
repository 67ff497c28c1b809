#!/bin/sh
# memory.sh COLLFUSE
#
# `run` and the benches compute a plan's memory before allocating it and
# refuse (exit 1) what exceeds the memory available or --max-memory, naming
# the sizes. Under an address space limit (RLIMIT_AS, which MemAvailable
# does not see) the check also counts what a run maps but does not hold
# (thread stacks, malloc arenas, OpenBLAS's buffers) and refuses up front,
# exit 1, where a MatMul once spun forever in OpenBLAS's allocation retry;
# and a compute step that does not return (the test hook's stall) ends the
# run at --timeout, exit 3. The graphs are generated in a temporary directory:
#   small.xml  an AllReduce of 4 MiB on 4 ranks (a few MiB per rank)
#   huge.xml   an AllReduce of a 128 GiB Input on 64 ranks: more than any
#              machine has, refused at once, before anything is allocated
#   const.xml  a 1 GiB Constant, for the address space limit
#   input.xml  a 1 GiB Input gathered on 1 rank, likewise (--verify of an
#              AllGather makes the Inputs in run.c: the whole reference)
#   mm.xml     a 1024^3 float32 MatMul on 1 rank (OpenBLAS's buffers)
set -u

if [ $# -ne 1 ]; then
  echo "usage: memory.sh COLLFUSE" >&2
  exit 2
fi
cf=$1
dir=$(mktemp -d "${TMPDIR:-/tmp}/cf-memory.XXXXXX") || exit 2
trap 'rm -rf "$dir"' EXIT
trap 'exit 130' INT TERM
fails=0
pre= # a command the cases run collfuse under

# case WANT_EXIT MAX_MS PATTERN -- ARGS...: collfuse ARGS exits WANT_EXIT
# within MAX_MS milliseconds and its stderr matches the extended regex
# PATTERN.
case_() {
  want=$1 max_ms=$2 pat=$3
  shift 4
  t0=$(date +%s%N)
  # shellcheck disable=SC2086 # $pre is a command prefix, split on purpose
  timeout -k 5 $((60 * ${CF_TEST_TIME_SCALE:-1})) $pre "$cf" "$@" >"$dir/out" 2>"$dir/err"
  rc=$?
  ms=$((($(date +%s%N) - t0) / 1000000))
  problem=
  if [ "$rc" -ne "$want" ]; then
    problem="exit code $rc, expected $want"
  elif [ -n "$pat" ] && ! grep -Eq -- "$pat" "$dir/err"; then
    problem="stderr does not match: $pat"
  elif [ "$ms" -gt $((max_ms * ${CF_TEST_TIME_SCALE:-1})) ]; then
    problem="took $ms ms, more than $max_ms"
  fi
  if [ -n "$problem" ]; then
    echo "FAIL: collfuse $*"
    echo "  $problem"
    sed 's/^/    | /' "$dir/err" | head -n 20
    fails=$((fails + 1))
  fi
}

graph() { # NAME WORLD OPS...
  name=$1 world=$2
  shift 2
  {
    printf '<?xml version="1.0" encoding="UTF-8"?>\n'
    printf '<graph name="%s" version="1" world_size="%s">\n' "$name" "$world"
    for line in "$@"; do printf '  %s\n' "$line"; done
    printf '</graph>\n'
  } >"$dir/$name.xml"
}
graph small 4 '<node name="x" op="Input" dtype="float32" shape="1048576"/>' \
  '<node name="ar" op="AllReduce" reduction="sum"><input ref="x"/></node>' \
  '<node name="y" op="Output"><input ref="ar"/></node>'
graph huge 64 '<node name="x" op="Input" dtype="float32" shape="34359738368"/>' \
  '<node name="ar" op="AllReduce" reduction="sum"><input ref="x"/></node>' \
  '<node name="y" op="Output"><input ref="ar"/></node>'
graph const 1 '<node name="c" op="Constant" dtype="float32" shape="268435456" value="1"/>' \
  '<node name="y" op="Output"><input ref="c"/></node>'
graph mm 1 '<node name="x" op="Input" dtype="float32" shape="1024,1024"/>' \
  '<node name="w" op="Input" dtype="float32" shape="1024,1024"/>' \
  '<node name="m" op="MatMul"><input ref="x"/><input ref="w"/></node>' \
  '<node name="y" op="Output"><input ref="m"/></node>'
graph input 1 '<node name="x" op="Input" dtype="float32" shape="268435456"/>' \
  '<node name="ag" op="AllGather" layout="concat"><input ref="x"/></node>' \
  '<node name="y" op="Output"><input ref="ag"/></node>'
size='[0-9]+\.[0-9] [KMGT]iB'
avail="$size available \((MemAvailable|the cgroup's memory limit)\)"

# --max-memory below the need: the sizes, per rank and in all
case_ 1 3000 "small\.xml: error: 4 ranks need $size \($size per rank\), 8\.0 MiB allowed by --max-memory; use fewer ranks or --backend mpi across machines" \
  -- run "$dir/small.xml" --max-memory 8M
case_ 0 20000 "" -- run "$dir/small.xml" --max-memory 1G
# --verify's float64 reference counts (16 bytes an element, every rank; an
# AllReduce graph's is a window of at most 64 MiB): the run alone fits in
# 80 MiB (4 ranks x 4 MiB, in place, outputs left where they are), with
# --verify it is refused before anything is allocated
case_ 0 20000 "" -- run "$dir/small.xml" --max-memory 80M
case_ 1 3000 "4 ranks need $size \($size per rank, 64\.0 MiB for --verify's float64 reference\), 80\.0 MiB allowed by --max-memory" \
  -- run "$dir/small.xml" --max-memory 80M --verify
case_ 1 3000 "small\.xml: error: 1 rank needs $size \($size of it for --verify's float64 reference\), 1\.0 MiB allowed by --max-memory\$" \
  -- run "$dir/small.xml" --ranks 1 --max-memory 1M --verify
# more than the machine has: refused at once, nothing allocated
case_ 1 3000 "huge\.xml: error: 64 ranks need $size \($size per rank\), $avail; use fewer ranks or --backend mpi across machines" \
  -- run "$dir/huge.xml"
case_ 1 3000 "huge\.xml: error: 1 rank needs 128\.0 GiB, $avail\$" -- run "$dir/huge.xml" --ranks 1
case_ 2 3000 "collfuse run: --max-memory wants a size such as 512M or 4G, got '12X'" \
  -- run "$dir/small.xml" --max-memory 12X
# the benches that execute graphs or allocate rank buffers
case_ 1 3000 "huge\.xml: error: 4 ranks need $size \($size per rank\), $avail; use fewer ranks \(--ranks\)" \
  -- bench fusion "$dir/huge.xml" --ranks 4
case_ 1 3000 "small\.xml: error: 4 ranks need $size \($size per rank\), 1\.0 MiB allowed by --max-memory" \
  -- bench fusion "$dir/small.xml" --quick --max-memory 1M
case_ 1 3000 "collfuse bench mmrs: error: 4 ranks need $size \($size per rank\), $avail; use fewer ranks or smaller --shapes" \
  -- bench mmrs --shapes 1048576x65536x65536 --ranks 4 --dtypes float32
case_ 1 3000 "collfuse bench allreduce: error: 64 ranks need $size \($size per rank\), 1\.0 GiB allowed by --max-memory; use fewer ranks or smaller --sizes" \
  -- bench allreduce --sizes 1G --ranks 64 --no-mpi --max-memory 1G
case_ 1 3000 "collfuse bench reduce: error: 10 buffers of 1\.0 GiB \(8 sources, destination, reference\) need 10\.0 GiB, 4\.0 GiB allowed by --max-memory; use smaller --sizes" \
  -- bench reduce --sizes 1G --max-memory 4G
case_ 2 3000 "collfuse bench fusion: --max-memory wants a size such as 512M or 4G, got '0'" \
  -- bench fusion "$dir/small.xml" --max-memory 0

# an address space limit (MemAvailable does not see it; --max-memory does
# not lift it): what does not fit is refused before anything is allocated,
# exit 1, naming the sizes (it once failed an allocation, exit 3), and a
# MatMul whose OpenBLAS buffers do not fit is refused too (it once spun
# forever in OpenBLAS's allocation retry: here `timeout` would end it, 124):
# 300 MiB leaves the driver (about 85 MiB mapped at start, LLVM not loaded)
# room for the MatMul's tensors, not for OpenBLAS's 128 MiB buffer beside.
# Sanitizers reserve more address space than any such limit leaves, so not
# under them.
if command -v prlimit >/dev/null 2>&1 && [ -z "${ASAN_OPTIONS:-}" ]; then
  reserved="$size of address space \($size of it reserved: thread stacks, malloc arenas and any BLAS buffers\)"
  pre="prlimit --as=$((640 * 1024 * 1024))"
  as_room="$size left under the address-space limit \(ulimit -v: 640\.0 MiB\); raise the limit\$"
  case_ 1 60000 "const\.xml: error: 1 rank needs $reserved, $as_room" -- run "$dir/const.xml" --max-memory 100G
  case_ 1 60000 "input\.xml: error: 1 rank needs $reserved, $as_room" -- run "$dir/input.xml" --max-memory 100G --verify
  pre="env OPENBLAS_NUM_THREADS=1 prlimit --as=$((300 * 1024 * 1024))"
  case_ 1 60000 "mm\.xml: error: 1 rank needs $reserved, $size left under the address-space limit \(ulimit -v: 300\.0 MiB\); raise the limit\$" \
    -- run "$dir/mm.xml" --timeout 5
  pre=
else
  echo "memory.sh: the address space cases are skipped (no prlimit, or sanitizers)"
fi

# a compute step that never returns (COLLFUSE_TEST_FAIL mode 4: as OpenBLAS
# retrying a buffer it cannot map) ends the run at --timeout, naming the
# rank and the node, on one rank and on one rank of four (it once hung)
pre="env COLLFUSE_TEST_FAIL=4:0:0"
case_ 3 60000 "error: rank 0 timed out after 2 s computing MatMul 'm' \(the step did not return: BLAS out of address space under ulimit -v, or more work than --timeout allows\)" \
  -- run "$dir/mm.xml" --timeout 2
pre="env COLLFUSE_TEST_FAIL=4:2:0"
case_ 3 60000 "error: rank 2 timed out after 2 s computing MatMul 'm'" -- run "$dir/mm.xml" --ranks 4 --timeout 2
pre=

if [ "$fails" -ne 0 ]; then
  echo "memory.sh: $fails case(s) failed" >&2
  exit 1
fi
echo "memory.sh: all cases passed"
