#!/bin/sh
# mpi.sh COLLFUSE SRCDIR [API_MPI]
#
# End-to-end checks of `collfuse run --backend mpi` under mpirun (one rank
# per process) and of `collfuse ranktable`:
#  - a graph with every collective kind, dtype and a sub-group, at 2 and 4
#    processes (oversubscribed on small machines), once over shared memory
#    (btl self,vader) and once over TCP (btl self,tcp): --verify, and
#    --deterministic outputs bitwise equal to the threads backend's; each
#    AllReduce algorithm in place (--iters 3 saves the first iteration's
#    outputs, bitwise one iteration's), and ReduceScatter/AllGather in
#    place over collfuse's and MPI's collectives; the
#    examples at their sizes; --algo mpi-native (MPI's own collectives);
#    an HLO module over partitioned groups ({{0,1},{2,3}}, iota forms);
#    foreign ops imported as Opaque warned of once (rank 0) and named by
#    --verify as not checked;
#  - failures, none of which may hang: graphs that differ between ranks
#    (MPMD), ranks given different --algo (MPMD: ring against rsag and
#    against MPI's own) and a descriptor that differs (count) stop every
#    rank with exit 3 and a message naming both ranks; a rank that SIGKILLs itself, a rank
#    that silently stops (in collfuse's algorithms and in MPI's own
#    collectives), a rank stuck in a compute step and a rank that fails
#    loudly end the job non-zero within --timeout, naming the rank;
#  - the embedding API's cf_executable_run_rank (API_MPI, e2e/api_mpi.c) at
#    2 and 4 processes, over shared memory and TCP, and with MPI's own
#    collectives; and (gap, gap0) a rank that repeats a kept executable
#    while the others start a new one: every rank fails naming both;
#    (groups) executables naming a group alike over other members;
#  - HCCL rank tables (tests/ranktable/): hostfile and rankfile for versions
#    1.0 and 1.2, errors for malformed tables, `run --rank-table` accepting a
#    matching job (placed by the generated files) and refusing others.
# Every mpirun runs under `timeout 120`. Exits 77 (skip) without mpirun;
# prints one line per failure and exits 1 if there was any.
set -u

if [ $# -lt 2 ] || [ $# -gt 3 ]; then
  echo "usage: mpi.sh COLLFUSE SRCDIR [API_MPI]" >&2
  exit 2
fi
cf=$1
src=$2
api=${3:-}
command -v mpirun >/dev/null 2>&1 || { echo "mpi.sh: mpirun not found: skipped" >&2; exit 77; }
command -v python3 >/dev/null 2>&1 || { echo "mpi.sh: python3 is needed" >&2; exit 2; }

work=$(mktemp -d "${TMPDIR:-/tmp}/cf-mpi.XXXXXX") || exit 2
trap 'rm -rf "$work"' EXIT
trap 'exit 130' INT TERM

root=""
[ "$(id -u)" -eq 0 ] && root="--allow-run-as-root"
export OMPI_MCA_rmaps_base_oversubscribe=1
# Sanitizer builds: OpenMPI keeps allocations until exit, and its libraries
# have no frame pointers, so its leaks only get stacks (and suppressions,
# below) with the slow unwinder, which costs ~15 s a run: one run is
# leak-checked that way ($leak_env), the others check everything but leaks
run_env=""
leak_env=""
if [ -n "${ASAN_OPTIONS:-}" ]; then
  supp="$work/lsan.supp"
  cat "$src/tests/lsan.supp" >"$supp" 2>/dev/null
  printf 'leak:libmpi.so\nleak:libopen-pal.so\nleak:libopen-rte.so\nleak:libpmix.so\nleak:libhwloc.so\nleak:libevent\nleak:mca_\nleak:libucs\nleak:libucp\nleak:libfabric\n' >>"$supp"
  leak_env="ASAN_OPTIONS=$ASAN_OPTIONS:detect_leaks=1:fast_unwind_on_malloc=0 LSAN_OPTIONS=suppressions=$supp:print_suppressions=0:fast_unwind_on_malloc=0"
  export ASAN_OPTIONS="$ASAN_OPTIONS:detect_leaks=0"
fi

. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/mixed_graph.sh"
FAIL_LINES=12
SHM="--mca btl self,vader"
TCP="--mca btl self,tcp"

# mpi ARGS...: `timeout 120 mpirun` with ARGS; stdout in $OUT, stderr in
# $ERR, exit status in $rc, seconds in $took
mpi() {
  checks=$((checks + 1))
  t0=$(date +%s)
  env $run_env timeout -k 5 $((120 * ${CF_TEST_TIME_SCALE:-1})) mpirun $root --oversubscribe --bind-to none "$@" >"$OUT" 2>"$ERR"
  rc=$?
  took=$(($(date +%s) - t0))
  sanitized "mpirun $*"
}

# cf ARGS...: collfuse without mpirun, like mpi()
cf() {
  checks=$((checks + 1))
  timeout -k 5 $((60 * ${CF_TEST_TIME_SCALE:-1})) "$cf" "$@" >"$OUT" 2>"$ERR"
  rc=$?
}

# json_ok N: $OUT is exactly one JSON line (rank 0's) for N verified mpi ranks
json_ok() {
  python3 - "$OUT" "$1" 2>>"$ERR" <<'EOF'
import json, sys
lines = [l for l in open(sys.argv[1]) if l.strip()]
assert len(lines) == 1, "%d lines on stdout" % len(lines)
d = json.loads(lines[0])
assert d["ranks"] == int(sys.argv[2]) and d["backend"] == "mpi" and d["verified"] is True, d
assert d["collectives_executed"] > 0 and d["time_ms_median"] > 0, d
EOF
}

# ---- the graph with every collective, 2 and 4 ranks, shared memory and TCP
for n in 2 4; do
  g="$work/mixed$n.xml"
  gen "$n" "$g"
  cf run "$g" --ranks "$n" --deterministic --save-outputs "$work/threads$n"
  expect_rc 0 "threads reference run of the mixed graph on $n ranks"
  for net in shm tcp; do
    if [ "$net" = shm ]; then btl=$SHM; else btl=$TCP; fi
    what="mixed graph, $n ranks, $net"
    [ "$n$net" = 2shm ] && run_env=$leak_env
    mpi $btl -np "$n" "$cf" run "$g" --backend mpi --verify --json --iters 2
    run_env=""
    expect_rc 0 "$what --verify --json" && { json_ok "$n" || fail "$what: --json output"; }
    mpi $btl -np "$n" "$cf" run "$g" --backend mpi --deterministic --verify --save-outputs "$work/mpi$n$net"
    if expect_rc 0 "$what --deterministic"; then
      diff -r "$work/threads$n" "$work/mpi$n$net" >/dev/null ||
        fail "$what: --deterministic outputs differ from the threads backend's"
      [ "$(grep -c 'verified' "$OUT")" -eq 1 ] || fail "$what: not exactly one summary line (rank 0 only)"
    fi
  done
  mpi $SHM -np "$n" "$cf" run "$g" --backend mpi --algo mpi-native --verify
  expect_rc 0 "mixed graph, $n ranks, --algo mpi-native --verify"
done

# ---- in place (the mixed graph's AllReduce buckets reduce their Inputs in
# place): every algorithm over MPI's staging, three iterations after a
# warmup save the first iteration's outputs, bitwise one iteration's
for n in 2 4; do
  for algo in direct rsag ring rd; do
    what="mixed graph, $n ranks, --algo $algo in place"
    mpi $SHM -np "$n" "$cf" run "$work/mixed$n.xml" --backend mpi --algo "$algo" --save-outputs "$work/ip1_$n$algo"
    expect_rc 0 "$what, one iteration" || continue
    mpi $SHM -np "$n" "$cf" run "$work/mixed$n.xml" --backend mpi --algo "$algo" --iters 3 --warmup 1 --verify \
      --save-outputs "$work/ip3_$n$algo"
    expect_rc 0 "$what, --iters 3 --warmup 1 --verify" &&
      { diff -r "$work/ip1_$n$algo" "$work/ip3_$n$algo" >/dev/null || fail "$what: --iters 3 saved other outputs"; }
  done
done

# ---- ReduceScatter and AllGather in place, plain and fused (NCCL's
# layouts, e2e/in_place's graphs, exact int32 sums): over MPI's staging
# and MPI's own collectives (MPI_IN_PLACE), bitwise the threads backend's,
# and three iterations after a warmup save the first iteration's outputs
for b in rsag_in_place rsag_fused_in_place; do
  cf run "$src/tests/run/$b.xml" --ranks 4 -v --save-outputs "$work/${b}_t"
  if expect_rc 0 "$b.xml on threads"; then
    grep -q "(2 in place)" "$ERR" || fail "$b.xml: not both in place on threads"
  fi
  for algo in direct mpi-native; do
    what="$b.xml, 4 processes, --algo $algo in place"
    mpi $SHM -np 4 "$cf" run "$src/tests/run/$b.xml" --backend mpi --algo "$algo" --iters 3 --warmup 1 \
      --verify --save-outputs "$work/${b}_$algo"
    expect_rc 0 "$what, --iters 3 --warmup 1 --verify" &&
      { diff -r "$work/${b}_t" "$work/${b}_$algo" >/dev/null || fail "$what: outputs differ from threads"; }
  done
done

# ---- the examples at their sizes (shared memory), bitwise against threads
for ex in allgather_layouts:2 fused_buckets:4 reduce_root:4 tp_mlp:4; do
  name=${ex%:*}
  n=${ex#*:}
  cf run "$src/examples/$name.xml" --ranks "$n" --deterministic --save-outputs "$work/ex_t_$name"
  expect_rc 0 "threads run of $name" || continue
  mpi $SHM -np "$n" "$cf" run "$src/examples/$name.xml" --backend mpi --verify --deterministic \
    --save-outputs "$work/ex_m_$name"
  expect_rc 0 "examples/$name.xml on $n processes --verify --deterministic" &&
    { diff -r "$work/ex_t_$name" "$work/ex_m_$name" >/dev/null || fail "$name: outputs differ from threads"; }
done

# ---- collectives over partitioned groups (several disjoint replica groups
# of an HLO module): every process runs them with its own part, over
# collfuse's algorithms and over MPI's (one communicator per part)
for algo in auto mpi-native; do
  mpi $SHM -np 4 "$cf" run "$src/tests/hlo/partitioned.hlo" --backend mpi --algo "$algo" --verify
  expect_rc 0 "tests/hlo/partitioned.hlo on 4 processes --algo $algo --verify"
done

# ---- an AllToAll bucket of two dtypes (tests/hlo/alltoall_combine.hlo):
# the sender packs each peer's blocks of both members into one message
mpi $SHM -np 4 "$cf" run "$src/tests/hlo/alltoall_combine.hlo" --backend mpi --verify
expect_rc 0 "tests/hlo/alltoall_combine.hlo on 4 processes --verify"

# ---- foreign ops imported as Opaque: rank 0 alone warns (as check does),
# and --verify names the output it could not check
mpi $SHM -np 2 "$cf" run "$src/tests/pbtxt/typo_collectives.pbtxt" --backend mpi --verify
if expect_rc 0 "typo_collectives.pbtxt on 2 processes --verify"; then
  [ "$(grep -c "imported as Opaque" "$ERR")" -eq 2 ] || fail "typo_collectives.pbtxt: not one warning per foreign op (rank 0 only)"
  has "$OUT" "not checked: 1 of 1 output depends on Opaque nodes" "typo_collectives.pbtxt --verify"
fi

# ---- failures: nothing hangs, every rank stops, the message names the ranks
mk() { # NAME COUNT: a two-rank graph whose second AllReduce has COUNT elements
  cat >"$work/$1.xml" <<EOF
<?xml version="1.0" encoding="UTF-8"?>
<graph name="mm" version="1" world_size="2">
  <node name="a" op="Input" dtype="float32" shape="4096"/>
  <node name="b" op="Input" dtype="float32" shape="$2"/>
  <node name="ra" op="AllReduce" reduction="sum" fusion="0"><input ref="a"/></node>
  <node name="rb" op="AllReduce" reduction="sum" fusion="0"><input ref="b"/></node>
  <node name="oa" op="Output"><input ref="ra"/></node>
  <node name="ob" op="Output"><input ref="rb"/></node>
</graph>
EOF
}
mk ga 1024
mk gb 2048
# MPMD: rank 0 and rank 1 compiled different graphs
mpi $SHM -np 1 "$cf" run "$work/ga.xml" --backend mpi --timeout 10 : -np 1 "$cf" run "$work/gb.xml" --backend mpi --timeout 10
if expect_rc 3 "MPMD graphs that differ"; then
  has "$ERR" "cross-rank mismatch" "MPMD graphs that differ" &&
    has "$ERR" "rank 0" "MPMD graphs that differ" && has "$ERR" "rank 1" "MPMD graphs that differ"
  [ "$(grep -c 'cross-rank mismatch' "$ERR")" -ge 2 ] || fail "MPMD graphs that differ: not every rank said why"
  [ "$took" -le $((25 * ${CF_TEST_TIME_SCALE:-1})) ] || fail "MPMD graphs that differ: took $took s (--timeout 10)"
fi
# MPMD: the same graph, another --algo on each rank (the issue's 1,048,576
# sums): the algorithm is part of what the ranks compare, so every rank
# stops naming both ranks and both algorithms (it once summed the wrong
# chunks and exited 0); MPI's own collectives against collfuse's too (a
# rank in MPI_Allreduce reads no descriptor: the ranks compare their
# plans' algorithms before the first iteration)
cat >"$work/ar1m.xml" <<EOF
<?xml version="1.0" encoding="UTF-8"?>
<graph name="ar1m" version="1" world_size="2">
  <node name="x" op="Input" dtype="float32" shape="1048576"/>
  <node name="ar" op="AllReduce" reduction="sum" fusion="0"><input ref="x"/></node>
  <node name="y" op="Output"><input ref="ar"/></node>
</graph>
EOF
for pair in ring:rsag ring:mpi-native; do
  a0=${pair%:*}
  a1=${pair#*:}
  mpi $SHM -np 1 "$cf" run "$work/ar1m.xml" --backend mpi --algo "$a0" --timeout 10 : \
    -np 1 "$cf" run "$work/ar1m.xml" --backend mpi --algo "$a1" --timeout 10
  if expect_rc 3 "MPMD --algo $a0 : --algo $a1"; then
    msg="cross-rank mismatch in AllReduce 'ar' (collective #0 of group 'hccl_world_group'): algorithm is $a0 on rank 0 but $a1 on rank 1"
    [ "$(grep -cF "$msg" "$ERR")" -eq 2 ] || fail "MPMD --algo $a0 : --algo $a1: not the same message from both ranks"
  fi
done
# one rank's descriptor differs after the fingerprint check: both name count and both ranks, alike
for net in shm tcp; do
  if [ "$net" = shm ]; then btl=$SHM; else btl=$TCP; fi
  mpi $btl -x COLLFUSE_TEST_MISMATCH=1:1:count -np 2 "$cf" run "$work/ga.xml" --backend mpi --timeout 10
  if expect_rc 3 "descriptor mismatch ($net)"; then
    msg="cross-rank mismatch in AllReduce 'rb' (collective #1 of group 'hccl_world_group'): count is 1024 on rank 0 but 2048 on rank 1"
    [ "$(grep -cF "$msg" "$ERR")" -eq 2 ] || fail "descriptor mismatch ($net): not the same message from both ranks"
  fi
done
# ... with payloads that travel apart from their header over TCP: eager
# pieces whose receives were posted before the header came (80 KB), and a
# rendezvous that must not start (400 KB)
for count in 20000 100000; do
  mk "gl$count" "$count"
  mpi $TCP -x COLLFUSE_TEST_MISMATCH=1:1:count -np 2 "$cf" run "$work/gl$count.xml" --backend mpi --timeout 10
  if expect_rc 3 "descriptor mismatch (tcp, $count elements)"; then
    msg="count is $count on rank 0 but $((2 * count)) on rank 1"
    [ "$(grep -cF "$msg" "$ERR")" -eq 2 ] || fail "descriptor mismatch (tcp, $count elements): not the same message from both ranks"
  fi
done
# a rank SIGKILLs itself at its 3rd collective message: the job ends, naming it
for net in shm tcp; do
  if [ "$net" = shm ]; then btl=$SHM; else btl=$TCP; fi
  mpi $btl -x COLLFUSE_TEST_FAIL=3:1:2 -np 4 "$cf" run "$src/examples/fused_buckets.xml" --backend mpi --timeout 10 --iters 3
  [ "$rc" -ne 0 ] || fail "rank 1 killed ($net): exit 0"
  [ "$rc" -ne 124 ] && [ "$took" -le $((25 * ${CF_TEST_TIME_SCALE:-1})) ] || fail "rank 1 killed ($net): took $took s (--timeout 10)"
  grep -Eq 'rank 1( |$|\))' "$ERR" || fail "rank 1 killed ($net): no message names rank 1"
done
# a rank that stops without a word: the others time out naming it
mpi $SHM -x COLLFUSE_TEST_FAIL=2:1:3 -np 4 "$cf" run "$src/examples/fused_buckets.xml" --backend mpi --timeout 3
if expect_rc 3 "rank 1 stops silently"; then
  has "$ERR" "timed out after 3 s waiting for" "rank 1 stops silently" &&
    has "$ERR" "rank 1 may have failed" "rank 1 stops silently"
  # a rank that timed out waiting for another waiting rank follows the
  # chain of waits to rank 1: no live rank is blamed
  ! grep -Eq 'rank [023] may have failed' "$ERR" || fail "rank 1 stops silently: a live rank is blamed"
  [ "$took" -le $((20 * ${CF_TEST_TIME_SCALE:-1})) ] || fail "rank 1 stops silently: took $took s (--timeout 3)"
fi
# ... also inside MPI's own blocking collectives (the watchdog of mpi-native)
mpi $SHM -x COLLFUSE_TEST_FAIL=2:1:3 -np 4 "$cf" run "$work/mixed4.xml" --backend mpi --algo mpi-native --timeout 3
if expect_rc 3 "rank 1 stops silently (mpi-native)"; then
  has "$ERR" "timed out after 3 s in MPI's" "rank 1 stops silently (mpi-native)"
  [ "$took" -le $((20 * ${CF_TEST_TIME_SCALE:-1})) ] || fail "rank 1 stops silently (mpi-native): took $took s (--timeout 3)"
fi
# a rank that fails loudly: every rank stops with its message
mpi $SHM -x COLLFUSE_TEST_FAIL=1:2:1 -np 4 "$cf" run "$work/mixed4.xml" --backend mpi --timeout 10
if expect_rc 3 "rank 2 fails"; then
  [ "$(grep -c 'rank 2 failed at step 1 (injected failure)' "$ERR")" -eq 4 ] ||
    fail "rank 2 fails: not every rank printed its message"
fi
# a rank whose compute step never returns (test hook mode 4, as a BLAS call
# in OpenBLAS's allocation retry): the job ends at --timeout naming it
cat >"$work/mm2.xml" <<EOF
<graph name="mm2" version="1" world_size="2">
  <node name="x" op="Input" dtype="float32" shape="64,64"/>
  <node name="m" op="MatMul"><input ref="x"/><input ref="x"/></node>
  <node name="y" op="Output"><input ref="m"/></node>
</graph>
EOF
mpi $SHM -x COLLFUSE_TEST_FAIL=4:1:0 -np 2 "$cf" run "$work/mm2.xml" --backend mpi --timeout 3
if expect_rc 3 "rank 1 stalls in a compute step"; then
  has "$ERR" "rank 1 timed out after 3 s computing MatMul 'm'" "rank 1 stalls in a compute step"
fi
# --ranks must match the job; mpi-native needs MPI and excludes --deterministic
mpi $SHM -np 2 "$cf" run "$work/ga.xml" --backend mpi --ranks 4
expect_rc 2 "--ranks 4 under mpirun -np 2" && has "$ERR" "--ranks 4, but the launcher started 2 processes" "--ranks 4 under -np 2"
# a graph for 4 ranks under -np 2: the job is named, once, exit 1
mpi $SHM -np 2 "$cf" run "$src/examples/tp_mlp.xml" --backend mpi
if expect_rc 1 "tp_mlp.xml under -np 2"; then
  msg="tp_mlp.xml: error: the graph is for 4 ranks (world_size=4) and the job has 2 (mpirun -np 2); run it with 4 ranks"
  has "$ERR" "$msg" "tp_mlp.xml under -np 2"
  [ "$(grep -cF -- "$msg" "$ERR")" -eq 1 ] || fail "tp_mlp.xml under -np 2: not printed once"
fi
cf run "$work/ga.xml" --algo mpi-native
expect_rc 2 "--algo mpi-native on threads" && has "$ERR" "needs --backend mpi" "--algo mpi-native on threads"
cf run "$work/ga.xml" --backend mpi --algo mpi-native --deterministic
expect_rc 2 "--algo mpi-native --deterministic"

# ---- the embedding API: cf_executable_run_rank, one rank per process
if [ -n "$api" ]; then
  # api_run NP ALGO BTL...: every rank prints "ok"
  api_run() {
    np=$1
    a=$2
    shift 2
    mpi "$@" -np "$np" "$api" "$a"
    if expect_rc 0 "api run_rank -np $np $* $a"; then
      [ "$(grep -c ': ok$' "$OUT")" -eq "$np" ] || fail "api run_rank -np $np $* $a: not every rank said ok"
    fi
  }
  api_run 2 auto $SHM
  api_run 4 auto $SHM
  api_run 4 mpi-native $SHM
  api_run 2 auto $TCP
  # a rank that repeats a kept executable while the others start a new one
  # (gap0: rank 0 repeats): every rank fails at once naming both, not at the
  # timeout nor in MPI_Comm_dup (one world per process, mpi.c)
  api_run 2 gap $SHM
  api_run 3 gap $SHM
  api_run 3 gap0 $SHM
  # two executables of a process name a group alike over other members
  # (MPI's own collectives): each gets its own communicator
  api_run 4 groups $SHM
fi
# ... and from Python (Graph.compile().run_rank), where the package and the
# library are given (not in sanitizer builds)
if [ -n "${COLLFUSE_LIBRARY:-}" ] && /usr/bin/python3 -c 'import numpy' 2>/dev/null; then
  # each rank also leaves a file: mpirun can drop the last line a rank
  # prints as it exits (seen once under load with exit 0)
  mkdir -p "$work/pyok"
  mpi $SHM -x COLLFUSE_LIBRARY -x PYTHONPATH="$src/python" -x PYTHONDONTWRITEBYTECODE=1 \
    -x CF_OK_DIR="$work/pyok" -np 2 /usr/bin/python3 "$src/tests/python/mpi_run_rank.py"
  if expect_rc 0 "python run_rank -np 2"; then
    [ "$(ls "$work/pyok" | grep -c '^rank[01]\.ok$')" -eq 2 ] || fail "python run_rank -np 2: not every rank said ok"
  fi
fi

# ---- HCCL rank tables
rt="$src/tests/ranktable"
cf ranktable "$rt/v1.0_two_servers.json"
if expect_rc 0 "ranktable v1.0"; then
  grep -v '^#' "$OUT" >"$work/got"
  printf '192.0.2.10 slots=2\n192.0.2.11 slots=2\nrank 0=192.0.2.10 slot=0\nrank 1=192.0.2.10 slot=1\nrank 2=192.0.2.11 slot=0\nrank 3=192.0.2.11 slot=1\n' >"$work/want"
  cmp -s "$work/got" "$work/want" || fail "ranktable v1.0: unexpected hostfile/rankfile: $(tr '\n' ';' <"$work/got")"
fi
cf ranktable "$rt/v1.2_super_pod.json" --hostfile "$work/h" --rankfile "$work/r"
if expect_rc 0 "ranktable v1.2"; then
  printf '172.16.0.100 slots=3\n172.16.0.101 slots=3\n' | cmp -s - "$work/h" || fail "ranktable v1.2: hostfile"
  printf 'rank 0=172.16.0.100 slot=0\nrank 1=172.16.0.101 slot=0\nrank 2=172.16.0.100 slot=1\nrank 3=172.16.0.101 slot=1\nrank 4=172.16.0.100 slot=2\nrank 5=172.16.0.101 slot=2\n' |
    cmp -s - "$work/r" || fail "ranktable v1.2: rankfile (host_ip, ranks interleaved)"
fi
cf ranktable "$rt/v1.2_super_pod.json" --json
expect_rc 0 "ranktable --json" && python3 -c '
import json, sys
d = json.load(open(sys.argv[1]))
assert d["version"] == "1.2" and d["ranks"] == 6 and len(d["servers"]) == 2, d
assert [r["rank_id"] for r in d["servers"][1]["ranks"]] == [1, 3, 5], d
assert d["servers"][1]["ranks"][2]["device_id"] == 3, d
' "$OUT" || fail "ranktable --json: unexpected object"
for bad in "bad_duplicate_rank:rank_id 0 is also given" "bad_missing_rank_id:device[1]: no rank_id" \
  "bad_version:version '2.0' is not supported" "bad_status:status is 'initializing'" \
  "bad_server_count:server_count is 3 but server_list has 1" "bad_rank_gap:rank_id 5" \
  "bad_json:bad_json.json:2: error: not valid JSON" "bad_rank_text:rank_id \"zero\" is not a rank number" \
  "missing:cannot open"; do
  f=${bad%%:*}
  cf ranktable "$rt/$f.json"
  expect_rc 1 "ranktable $f" && has "$ERR" "$f.json" "ranktable $f" && has "$ERR" "${bad#*:}" "ranktable $f"
done
cf ranktable
expect_rc 2 "ranktable without a file"
# a job placed by the generated hostfile and rankfile matches its table
cf ranktable "$rt/v1.0_local_2.json" --hostfile "$work/h2" --rankfile "$work/r2"
if expect_rc 0 "ranktable v1.0_local_2"; then
  mpi --hostfile "$work/h2" --rankfile "$work/r2" -np 2 "$cf" run "$work/ga.xml" --backend mpi \
    --rank-table "$rt/v1.0_local_2.json" --verify
  expect_rc 0 "run --rank-table with the generated hostfile and rankfile"
fi
mpi $SHM -np 2 "$cf" run "$work/ga.xml" --backend mpi --rank-table "$rt/v1.2_local_4.json"
expect_rc 1 "run --rank-table of 4 ranks on 2 processes" &&
  has "$ERR" "the rank table has 4 ranks but mpirun started 2 processes" "--rank-table size"
mpi $SHM -np 2 "$cf" run "$work/ga.xml" --backend mpi --rank-table "$rt/remote_rank1.json"
expect_rc 1 "run --rank-table with rank 1 elsewhere" &&
  has "$ERR" "rank 1 belongs to server '192.0.2.1'" "--rank-table placement"

if [ "$fails" -ne 0 ]; then
  echo "mpi.sh: $fails of $checks checks failed" >&2
  exit 1
fi
echo "mpi.sh: $checks checks ok"
