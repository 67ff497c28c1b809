#!/bin/sh
# shm.sh COLLFUSE SRCDIR [API_MPI]
#
# End-to-end checks of `collfuse run --backend shm` (ranks as processes of
# this host, single copy through shared memory):
#  - the graph with every collective kind (mixed_graph.sh), AllToAll and
#    CollectivePermute, the fused MatMul ops (tp_mlp) and groups inside a
#    larger world, at 2 and 4 processes (8 for the examples): --verify, and
#    --deterministic outputs bitwise equal to the threads backend's (auto's
#    and pool's); each
#    AllReduce algorithm in place (--iters 3 --warmup 1 saves the first
#    iteration's outputs);
#  - start-up as launchers do it, with a fake launcher here: torchrun's,
#    mpirun's and srun's variables, N processes started by this script; a
#    job that its launcher says spans hosts is refused naming them; real
#    mpirun when it is installed (no MPI used for the bytes);
#  - failures, none of which may hang: a descriptor that differs stops every
#    rank with exit 3 and the message naming both ranks; a rank that
#    SIGKILLs itself in the middle of a collective, and one killed with
#    kill -9 from outside, end the job non-zero within --timeout + a few
#    seconds naming the rank; a rank that never starts times out naming it;
#    a COLLFUSE_HOSTID longer than a host's name can be is refused at once;
#  - COLLFUSE_SHM_SPIN=pause verifies at 4 ranks; another value is refused;
#  - COLLFUSE_SHM_CORES=2 at 4 ranks: pool's large call is reduced by ranks
#    0 and 1 while 2 and 3 sleep (their traces), verified and bitwise the
#    threads backend's; kill -9 of rank 1 stops the sleeping ranks; 0 is
#    refused; auto picks pool for that call with the fewest cores any rank
#    counts (2 on ranks 0-1, 4 on 2-3: every rank agrees), rsag with 4,
#    and pool in place at 8 MiB;
#    bench allreduce's JSON gives the count;
#  - the embedding API's cf_executable_run_rank with the option backend shm
#    (API_MPI, e2e/api_mpi.c) at 2 and 4 processes from the launcher's
#    variables, and at 2 with the option job (rank and size explicit); and
#    (shm-repeat, 2 and 3 processes) one executable run 40 times (a kept
#    rank: no plan checks after its first run), 12 runs started on a
#    cf_runner, then the last rank runs another executable: every rank
#    fails with the mismatch naming it; and (shm-gap, 2 and 3 processes;
#    shm-gap0, 3) one rank repeats a kept executable while the others start
#    a new one: every rank fails with the mismatch naming both, not at the
#    timeout, also when torchrun's variables were set in between
#    (shm-gap-env, 3);
#  - `bench allreduce --backend shm` (long): its JSON;
#  - nothing left behind: no collfuse entry in /dev/shm afterwards.
# Prints one line per failure and exits 1 if there was any.
set -u

if [ $# -lt 2 ] || [ $# -gt 3 ]; then
  echo "usage: shm.sh COLLFUSE SRCDIR [API_MPI]" >&2
  exit 2
fi
cf=$1
src=$2
api=${3:-}
work=$(mktemp -d "${TMPDIR:-/tmp}/cf-shm.XXXXXX") || exit 2
trap 'rm -rf "$work"' EXIT
trap 'exit 130' INT TERM

. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/mixed_graph.sh"
LIMIT=60
scale=${CF_TEST_TIME_SCALE:-1}
shm_before=$(ls /dev/shm 2>/dev/null | grep -c collfuse)

# ---- every collective kind, 2 and 4 processes, against threads bitwise
# (fast: 2 processes; long: 4, --json, and every AllReduce algorithm in place)
for n in 2 4; do
  g="$work/mixed$n.xml"
  gen "$n" "$g"
  [ "$n" = 2 ] || part long || continue
  run run "$g" --ranks "$n" --deterministic --save-outputs "$work/threads$n" &&
    expect_rc 0 "threads reference run of the mixed graph on $n ranks"
  run run "$g" --backend shm --ranks "$n" --deterministic --verify --save-outputs "$work/shm$n" &&
    expect_rc 0 "mixed graph, $n shm ranks, --deterministic --verify" && {
    diff -r "$work/threads$n" "$work/shm$n" >/dev/null ||
      fail "mixed graph, $n shm ranks: --deterministic outputs differ from the threads backend's"
    [ "$(grep -c 'verified' "$OUT")" -eq 1 ] || fail "mixed graph, $n shm ranks: not one summary line"
    has "$OUT" "$n ranks (shm)" "mixed graph, $n shm ranks: summary"
  }
  # pool: its pieces' counter in rank 0's heap, taken by every process
  run run "$g" --backend shm --ranks "$n" --algo pool --deterministic --verify --save-outputs "$work/pool$n" &&
    expect_rc 0 "mixed graph, $n shm ranks, --algo pool --deterministic --verify" && {
    diff -r "$work/threads$n" "$work/pool$n" >/dev/null ||
      fail "mixed graph, $n shm ranks, --algo pool: --deterministic outputs differ from the threads backend's"
  }
  part long || continue
  run run "$g" --backend shm --ranks "$n" --verify --json --iters 2 &&
    expect_rc 0 "mixed graph, $n shm ranks, --json" &&
    has "$OUT" '"backend":"shm"' "mixed graph, $n shm ranks, --json"
  for algo in direct rsag ring rd pool; do
    what="mixed graph, $n shm ranks, --algo $algo in place"
    run run "$g" --backend shm --ranks "$n" --algo "$algo" --save-outputs "$work/ip1_$n$algo" &&
      expect_rc 0 "$what, one iteration" || continue
    run run "$g" --backend shm --ranks "$n" --algo "$algo" --iters 3 --warmup 1 --verify \
      --save-outputs "$work/ip3_$n$algo" &&
      expect_rc 0 "$what, --iters 3 --warmup 1 --verify" &&
      { diff -r "$work/ip1_$n$algo" "$work/ip3_$n$algo" >/dev/null || fail "$what: --iters 3 saved other outputs"; }
  done
done

# ---- AllToAll and CollectivePermute (out of place), groups of 2 inside 4
cat >"$work/a2a.xml" <<'EOF'
<?xml version="1.0" encoding="UTF-8"?>
<graph name="shm_a2a" version="1" world_size="4">
  <group name="pair" ranks="0,2"/>
  <node name="x" op="Input" dtype="float32" shape="8,12"/>
  <node name="y" op="Input" dtype="bfloat16" shape="6,4"/>
  <node name="z" op="Input" dtype="float32" shape="4000"/>
  <node name="a" op="AllToAll" split_dimension="0" concat_dimension="1"><input ref="x"/></node>
  <node name="p" op="CollectivePermute" source_target_pairs="{0,1},{1,2},{2,3},{3,0}"><input ref="a"/></node>
  <node name="b" op="AllToAll" split_dimension="1" concat_dimension="0" group="pair"><input ref="y"/></node>
  <node name="r" op="AllReduce" reduction="sum" group="pair"><input ref="z"/></node>
  <node name="o1" op="Output"><input ref="p"/></node>
  <node name="o2" op="Output"><input ref="b"/></node>
  <node name="o3" op="Output"><input ref="r"/></node>
</graph>
EOF
part fast && run run "$work/a2a.xml" --deterministic --save-outputs "$work/a2a_threads" &&
  expect_rc 0 "AllToAll graph, threads"
part fast && run run "$work/a2a.xml" --backend shm --deterministic --verify --save-outputs "$work/a2a_shm" &&
  expect_rc 0 "AllToAll graph, shm --verify" &&
  { diff -r "$work/a2a_threads" "$work/a2a_shm" >/dev/null || fail "AllToAll graph: shm outputs differ from threads'"; }

# ---- the examples at their sizes: fused MatMul ops (tp_mlp, tp_block),
# groups (dp_gradients: 8 processes), rooted ops
for ex in tp_mlp reduce_root broadcast allgather_layouts dp_gradients quant_mmrs; do
  part long || break
  run run "$src/examples/$ex.xml" --backend shm --verify --deterministic --save-outputs "$work/ex_shm_$ex" &&
    expect_rc 0 "examples/$ex.xml, shm --verify" || continue
  run run "$src/examples/$ex.xml" --deterministic --save-outputs "$work/ex_thr_$ex" &&
    { diff -r "$work/ex_thr_$ex" "$work/ex_shm_$ex" >/dev/null || fail "examples/$ex.xml: shm outputs differ from threads'"; }
done

# ---- start-up as launchers do it (fast: torchrun's; long: the others and
# mpirun): N processes started here with the launcher's variables; rank 0
# prints the one summary line
# launch N KIND FILE ARGS...: start N `collfuse run FILE --backend shm ARGS`
# with KIND's variables (torch, ompi, slurm); stdout of all in $OUT, exit
# codes in $work/rc.R
launch() {
  n=$1 kind=$2 file=$3
  shift 3
  checks=$((checks + 1))
  : >"$OUT"
  : >"$ERR"
  r=0
  port=$(master_port)
  [ -n "$port" ] || { fail "launch: no free pair of ports"; return 1; }
  while [ "$r" -lt "$n" ]; do
    case $kind in
    torch) vars="RANK=$r WORLD_SIZE=$n LOCAL_RANK=$r LOCAL_WORLD_SIZE=${LOCAL_N:-$n} MASTER_ADDR=127.0.0.1 MASTER_PORT=$port" ;;
    ompi) vars="OMPI_COMM_WORLD_RANK=$r OMPI_COMM_WORLD_SIZE=$n OMPI_COMM_WORLD_LOCAL_SIZE=$n PMIX_NAMESPACE=fake.$$" ;;
    slurm) vars="SLURM_PROCID=$r SLURM_NTASKS=$n SLURM_LOCALID=$r SLURM_NNODES=${NODES:-1} SLURM_JOB_ID=$$ SLURM_STEP_ID=0" ;;
    esac
    # HOSTIDS="a b a": rank R plays the host named by the R-th word
    # shellcheck disable=SC2086 # a list of words
    [ -n "${HOSTIDS:-}" ] && vars="$vars COLLFUSE_HOSTID=$(set -- $HOSTIDS; shift "$r"; echo "$1")"
    [ -n "${RDV:-}" ] && vars="$vars COLLFUSE_RENDEZVOUS=$RDV"
    # CORES="2 2 4 4": rank R counts the cores the R-th word says
    # shellcheck disable=SC2086 # a list of words
    [ -n "${CORES:-}" ] && vars="$vars COLLFUSE_SHM_CORES=$(set -- $CORES; shift "$r"; echo "$1")"
    # shellcheck disable=SC2086 # $vars is a list of NAME=VALUE words
    (env -u COLLFUSE_RANK -u COLLFUSE_WORLD_SIZE -u COLLFUSE_JOB $vars \
      timeout -k 5 $((LIMIT * scale)) "$cf" run "$file" --backend shm --timeout 20 "$@" >>"$OUT" 2>>"$ERR"
    echo $? >"$work/rc.$r") &
    r=$((r + 1))
  done
  wait
}
# all_rc N WANT WHAT: every one of N launched ranks exited WANT
all_rc() {
  r=0
  while [ "$r" -lt "$1" ]; do
    got=$(cat "$work/rc.$r" 2>/dev/null || echo none)
    [ "$got" = "$2" ] || { fail "$3: rank $r exited $got, expected $2"; return 1; }
    r=$((r + 1))
  done
}
for kind in torch ompi slurm; do
  if [ "$kind" = torch ]; then part fast || continue; else part long || continue; fi
  launch 4 "$kind" "$work/mixed4.xml" --verify
  all_rc 4 0 "$kind-style launch of 4 ranks, --verify" &&
    { [ "$(grep -c 'verified' "$OUT")" -eq 1 ] || fail "$kind-style launch: not one summary line"; }
done
if part fast; then
  LOCAL_N=2 launch 4 torch "$work/mixed4.xml"
  all_rc 4 2 "torchrun-style job over 2 hosts (LOCAL_WORLD_SIZE=2 of 4)" &&
    has "$ERR" "needs every rank on one host" "torchrun-style job over 2 hosts"
  NODES=2 launch 2 slurm "$work/mixed2.xml"
  all_rc 2 2 "srun-style job over 2 nodes" && has "$ERR" "SLURM_NNODES" "srun-style job over 2 nodes"
  # ranks on two hosts (played by COLLFUSE_HOSTID): every rank refuses
  # naming each host and its ranks, met over TCP (torchrun's MASTER_ADDR,
  # MASTER_PORT + 1) or, without an address, on the Unix socket
  for kind in torch ompi; do
    HOSTIDS="hostA hostB hostA hostB" launch 4 $kind "$work/mixed4.xml"
    all_rc 4 2 "$kind-style job whose ranks are on 2 hosts" &&
      { [ "$(grep -c "the job's 4 ranks are on 2 hosts: 'hostA' (ranks 0, 2); 'hostB' (ranks 1, 3): the shm world is one host's; start it with mpirun" "$ERR")" -eq 4 ] ||
        fail "$kind-style job on 2 hosts: not every rank (of 4) names the hosts: $(head -c 600 "$ERR")"; }
  done
  # COLLFUSE_RENDEZVOUS: the job meets there (any launcher)
  RDV=localhost:$(master_port) launch 2 ompi "$work/mixed2.xml" --verify
  all_rc 2 0 "COLLFUSE_RENDEZVOUS=localhost:PORT, 2 ranks" &&
    { [ "$(grep -c 'verified' "$OUT")" -eq 1 ] || fail "COLLFUSE_RENDEZVOUS: not one summary line"; }

  # a rank that never comes: rank 0 gives up within its timeout naming it
  checks=$((checks + 1))
  env RANK=0 WORLD_SIZE=3 MASTER_ADDR=127.0.0.1 MASTER_PORT=$$ timeout -k 5 $((30 * scale)) \
    "$cf" run "$work/mixed2.xml" --backend shm --ranks 3 --timeout 2 >"$OUT" 2>"$ERR"
  rc=$?
  [ "$rc" -ne 0 ] && [ "$rc" -ne 124 ] || fail "a rank that never starts: exit $rc"
  has "$ERR" "rank(s) 1, 2" "a rank that never starts"
fi

# real mpirun starts the processes; the bytes go through shm, not MPI
if part long && command -v mpirun >/dev/null 2>&1; then
  root=""
  [ "$(id -u)" -eq 0 ] && root="--allow-run-as-root"
  checks=$((checks + 1))
  timeout -k 5 $((120 * scale)) mpirun $root --oversubscribe --bind-to none -np 2 \
    "$cf" run "$work/mixed2.xml" --backend shm --verify >"$OUT" 2>"$ERR"
  rc=$?
  expect_rc 0 "mpirun -np 2 collfuse run --backend shm --verify" && has "$OUT" "2 ranks (shm)" "mpirun + shm"
fi

# ---- the C API: cf_executable_run_rank on the shm world
# api N MODE VARS: N processes of API_MPI MODE, rank R's variables VARS with
# @R for R and @N for N; every one must print "ok"
api() {
  n=$1 mode=$2 vars=$3
  checks=$((checks + 1))
  : >"$OUT"
  : >"$ERR"
  r=0
  while [ "$r" -lt "$n" ]; do
    v=$(echo "$vars" | sed "s/@R/$r/g; s/@N/$n/g")
    # shellcheck disable=SC2086 # $v is a list of NAME=VALUE words
    env -u COLLFUSE_RANK -u COLLFUSE_WORLD_SIZE -u COLLFUSE_JOB $v \
      timeout -k 5 $((LIMIT * scale)) "$api" "$mode" >>"$OUT" 2>>"$ERR" &
    r=$((r + 1))
  done
  wait
  [ "$(grep -c ': ok$' "$OUT")" -eq "$n" ] || fail "API run_rank, $n processes, $mode: not every rank said ok"
}
if [ -n "$api" ] && part fast; then
  api 2 shm "COLLFUSE_RANK=@R COLLFUSE_WORLD_SIZE=@N COLLFUSE_JOB=api.$$.2"
  api 4 shm "COLLFUSE_RANK=@R COLLFUSE_WORLD_SIZE=@N COLLFUSE_JOB=api.$$.4"
  api 2 shm-job "API_RANK=@R API_SIZE=@N API_JOB=apijob.$$"
  # many runs of one executable (no plan checks after the first), runs
  # started on a cf_runner, then a mismatch: every rank fails naming it
  api 2 shm-repeat "COLLFUSE_RANK=@R COLLFUSE_WORLD_SIZE=@N COLLFUSE_JOB=rep.$$.2"
  api 3 shm-repeat "COLLFUSE_RANK=@R COLLFUSE_WORLD_SIZE=@N COLLFUSE_JOB=rep.$$.3"
  # the last rank (gap0: rank 0) repeats a kept executable while the others
  # start a new one: every rank fails at the start-up's first message, exit
  # 3 naming both ranks (its timeout of 10 s is not what ends it)
  api 2 shm-gap "COLLFUSE_RANK=@R COLLFUSE_WORLD_SIZE=@N COLLFUSE_JOB=gap.$$.2"
  api 3 shm-gap "COLLFUSE_RANK=@R COLLFUSE_WORLD_SIZE=@N COLLFUSE_JOB=gap.$$.3"
  api 3 shm-gap0 "COLLFUSE_RANK=@R COLLFUSE_WORLD_SIZE=@N COLLFUSE_JOB=gap0.$$.3"
  # ... with torchrun's variables set in between (as DDP under mpirun): the
  # new executable joins the world the first one joined
  api 3 shm-gap-env "COLLFUSE_RANK=@R COLLFUSE_WORLD_SIZE=@N COLLFUSE_JOB=gapenv.$$.3 API_PORT=$(master_port)"
fi

# ---- bench allreduce --backend shm (long): the table's JSON, every column
# checked against the float64 sum of every rank's input by the bench itself
if part long; then
  run bench allreduce --backend shm --ranks 2 --quick --no-mpi --json &&
    expect_rc 0 "bench allreduce --backend shm --quick" &&
    python3 - "$OUT" <<'EOF' || fail "bench allreduce --backend shm: JSON"
import json, sys
d = json.loads(open(sys.argv[1]).read().strip().splitlines()[-1])
assert d["transport"] == "shm" and d["ranks"] == 2 and len(d["results"]) == 3, d
for r in d["results"]:
    assert r["collfuse"]["auto"]["us"] > 0 and r["bound"]["us"] > 0, r
EOF
  # auto's own profile for the shm world: --save-profile writes `shm` entries,
  # which run --backend shm reads (and the threads world does not)
  run bench allreduce --backend shm --ranks 2 --quick --no-mpi --save-profile --profile "$work/prof" &&
    expect_rc 0 "bench allreduce --backend shm --save-profile" && {
    grep -q '^algo shm 2 ' "$work/prof" || fail "--save-profile on shm: no 'algo shm 2' rule in the profile"
    grep -q '^link shm 2 ' "$work/prof" || fail "--save-profile on shm: no 'link shm 2' line in the profile"
  }
  run run "$work/mixed2.xml" --backend shm --profile "$work/prof" --verify &&
    expect_rc 0 "run --backend shm with its saved profile"
fi

# ---- failures (fast)
part fast || { finish shm_long; }
# a descriptor that differs: exit 3 on every rank, naming both ranks, well
# before the timeout
COLLFUSE_TEST_MISMATCH=1:0:count run run "$src/examples/tp_mlp.xml" --backend shm --timeout 60 && {
  expect_rc 3 "a descriptor that differs"
  [ "$(grep -c 'cross-rank mismatch' "$ERR")" -eq 4 ] || fail "a descriptor that differs: not every rank (of 4) says so"
  # rank 1's count is doubled; which of its 3 peers meets it first depends
  # on scheduling, so each message names rank 1 and one other rank, the
  # lower first, with rank 1's count twice the other's
  named=$(grep -Eo "count is [0-9]+ on rank [0-9]+ but [0-9]+ on rank [0-9]+" "$ERR")
  [ -n "$named" ] || fail "a descriptor that differs: both ranks not named"
  while read -r _ _ a _ _ ra _ b _ _ rb; do
    [ -n "$ra" ] && [ "$ra" -lt "$rb" ] && [ "$rb" -le 3 ] &&
      { { [ "$ra" -eq 1 ] && [ "$a" -eq $((2 * b)) ]; } || { [ "$rb" -eq 1 ] && [ "$b" -eq $((2 * a)) ]; }; } ||
      fail "a descriptor that differs: names ranks $ra and $rb, not rank 1 (count doubled) and another"
  done <<EOF
$named
EOF
  [ "$secs" -le $((15 * scale)) ] || fail "a descriptor that differs: took ${secs}s (a timeout, not the check)"
}
# COLLFUSE_HOSTID: one of the longest a host's name can be (64 characters)
# runs; one longer, which ranks could only compare in part, is refused at
# once naming it
hid=$(printf 'h%.0s' $(seq 64))
COLLFUSE_HOSTID=$hid run run "$work/mixed2.xml" --backend shm --verify &&
  expect_rc 0 "COLLFUSE_HOSTID of 64 characters"
COLLFUSE_HOSTID=${hid}x run run "$work/mixed2.xml" --backend shm --timeout 60 &&
  expect_last 2 "COLLFUSE_HOSTID is 65 characters long: at most 64" "COLLFUSE_HOSTID of 65 characters" &&
  { [ "$secs" -le $((15 * scale)) ] || fail "COLLFUSE_HOSTID of 65 characters: took ${secs}s (a timeout, not the check)"; }
# a rank that SIGKILLs itself at its 3rd collective message
COLLFUSE_TEST_FAIL=3:1:2 run run "$src/examples/fused_buckets.xml" --backend shm --timeout 10 --iters 3 && {
  [ "$rc" -ne 0 ] || fail "rank 1 killed itself: exit 0"
  [ "$secs" -le $((15 * scale)) ] || fail "rank 1 killed itself: took ${secs}s (--timeout 10)"
  has "$ERR" "rank 1 (pid" "rank 1 killed itself"
  has "$ERR" "killed by signal 9" "rank 1 killed itself"
}
# kill -9 from outside in the middle of a long AllReduce (64 MiB, many iterations)
cat >"$work/big.xml" <<'EOF'
<?xml version="1.0" encoding="UTF-8"?>
<graph name="shm_big" version="1" world_size="2">
  <node name="x" op="Input" dtype="float32" shape="16777216"/>
  <node name="r" op="AllReduce" reduction="sum"><input ref="x"/></node>
  <node name="o" op="Output"><input ref="r"/></node>
</graph>
EOF
# the names a descriptor carries across processes: a node's name longer
# than the 63 characters the control segment holds is cut there in the
# peer's copy; the rank that finds the mismatch first names the lower
# rank's node, its own (in full) or its peer's copy (63 characters), and
# nothing else
long=$(printf 'n%.0s' $(seq 80)) cut=$(printf 'n%.0s' $(seq 63))
sed "s/16777216/1000/; s/\"r\"/\"$long\"/g" "$work/big.xml" >"$work/longname.xml"
COLLFUSE_TEST_MISMATCH=1:0:count run run "$work/longname.xml" --backend shm --ranks 2 --timeout 60 && {
  expect_rc 3 "a descriptor that differs, long node name"
  grep -Eq "AllReduce '($cut|$long)' \(collective #0" "$ERR" ||
    fail "long node name: the mismatch does not name the node (in full or its first 63 characters)"
}
# kill9 GRAPH WHAT [ARGS...]: run GRAPH on the shm world with ARGS, many
# iterations, kill -9 rank 1 after 2 s: the others stop within --timeout
# naming it
kill9() {
  g=$1
  what=$2
  shift 2
  checks=$((checks + 1))
  t0=$(date +%s)
  timeout -k 5 $((120 * scale)) "$cf" run "$g" --backend shm --iters 100000 --timeout 10 "$@" >"$OUT" 2>"$ERR" &
  job=$!
  victim=""
  i=0
  while [ -z "$victim" ] && [ "$i" -lt 300 ]; do # the ranks are grandchildren (timeout, collfuse, ranks)
    for p in $(pgrep -f "$g" 2>/dev/null); do # spawn.c names rank R's process collfuse.rR
      [ "$(cat "/proc/$p/comm" 2>/dev/null)" = collfuse.r1 ] && victim=$p
    done
    [ -n "$victim" ] || sleep 0.1
    i=$((i + 1))
  done
  if [ -z "$victim" ]; then
    fail "kill -9 ($what): rank 1's process not found"
    kill "$job" 2>/dev/null
    return
  fi
  sleep 2 # in the middle of the AllReduces
  # the heaps are in 2 MiB pages where this machine gives shared memory
  # huge pages: shmem_enabled other than never/deny, or (never) a tmpfs
  # mounted huge=always in namespaces of one's own (executor.md, "The shm world")
  thp=$(sed -n 's/.*\[\([a-z_]*\)\].*/\1/p' /sys/kernel/mm/transparent_hugepage/shmem_enabled 2>/dev/null)
  pmd=$(awk '/^ShmemPmdMapped:/ { k += $2 } END { print k + 0 }' "/proc/$victim/smaps" 2>/dev/null)
  case $thp in
  "" | deny) ;;
  never) if unshare -Urm true 2>/dev/null; then
    [ "${pmd:-0}" -gt 0 ] || fail "rank 1's heap is not in huge pages (shmem_enabled=never, namespaces allowed)"
  fi ;;
  *) [ "${pmd:-0}" -gt 0 ] || fail "rank 1's heap is not in huge pages (shmem_enabled=$thp)" ;;
  esac
  t0=$(date +%s)
  kill -9 "$victim"
  wait "$job"
  rc=$?
  took=$(($(date +%s) - t0))
  [ "$rc" -ne 0 ] && [ "$rc" -ne 124 ] || fail "kill -9 of rank 1 ($what): exit $rc"
  [ "$took" -le $((11 * scale + 2)) ] || fail "kill -9 of rank 1 ($what): the others took ${took}s to stop (--timeout 10)"
  has "$ERR" "rank 1 (pid $victim) died" "kill -9 of rank 1 ($what)"
}
kill9 "$work/big.xml" "64 MiB, 2 ranks"

# under an address-space limit (ulimit -v) the heaps share half the room
# left (each rank maps every rank's heap; sized to the host's memory they
# could not be mapped): the job runs, and a run too large for the room is
# refused naming the limit. Sanitizers reserve more than such a limit.
if command -v prlimit >/dev/null 2>&1 && [ -z "${ASAN_OPTIONS:-}" ]; then
  checks=$((checks + 1))
  timeout -k 5 $((LIMIT * scale)) prlimit --as=$((3 * 1024 * 1024 * 1024)) "$cf" run "$work/mixed4.xml" \
    --backend shm --ranks 4 --verify --timeout 20 >"$OUT" 2>"$ERR"
  rc=$?
  [ "$rc" -eq 0 ] || fail "4 ranks under ulimit -v 3 GiB: exit $rc"
  sed 's/shape="16777216"/shape="268435456"/' "$work/big.xml" >"$work/huge.xml"
  checks=$((checks + 1))
  timeout -k 5 $((LIMIT * scale)) prlimit --as=$((3 * 1024 * 1024 * 1024)) "$cf" run "$work/huge.xml" \
    --backend shm --ranks 2 --timeout 20 >"$OUT" 2>"$ERR"
  rc=$?
  [ "$rc" -eq 1 ] || fail "a 1 GiB AllReduce under ulimit -v 3 GiB: exit $rc, expected 1"
  has "$ERR" "under the address-space limit (ulimit -v: 3.0 GiB)" "a 1 GiB AllReduce under ulimit -v 3 GiB"
fi

# COLLFUSE_SHM_SPIN: pause-then-sleep waits (4 ranks: more than this
# machine's cores on CI) verify as the default's do; another value is refused
COLLFUSE_SHM_SPIN=pause run run "$work/mixed4.xml" --backend shm --ranks 4 --verify --timeout 60 &&
  expect_rc 0 "COLLFUSE_SHM_SPIN=pause, 4 ranks"
COLLFUSE_SHM_SPIN=spin run run "$work/mixed2.xml" --backend shm --timeout 60 &&
  expect_last 2 "COLLFUSE_SHM_SPIN=spin: expected yield or pause" "COLLFUSE_SHM_SPIN=spin"

# COLLFUSE_SHM_CORES: 4 ranks on 2 cores (forced, whatever this machine
# has): pool's 6 MiB call is reduced by ranks 0 and 1 alone while 2 and 3
# sleep (the phases of their traces); random inputs, against the float64
# reference (--verify) and bitwise the threads backend's; a value that is
# not a count of cores is refused
cat >"$work/pool_idle.xml" <<'EOF'
<graph name="pool_idle" version="1" world_size="4">
<node name="x" op="Input" dtype="float32" shape="1536,1024"/>
<node name="ar" op="AllReduce" reduction="sum"><input ref="x"/></node>
<node name="o" op="Output"><input ref="ar"/></node>
</graph>
EOF
run run "$work/pool_idle.xml" --ranks 4 --deterministic --save-outputs "$work/idle_threads" &&
  expect_rc 0 "threads reference run of a 6 MiB AllReduce on 4 ranks"
COLLFUSE_SHM_CORES=2 run run "$work/pool_idle.xml" --backend shm --ranks 4 --algo pool --deterministic \
  --verify --save-outputs "$work/idle_shm" --trace "$work/idle.json" --timeout 60 &&
  expect_rc 0 "COLLFUSE_SHM_CORES=2, 4 ranks, --algo pool --verify" && {
  diff -r "$work/idle_threads" "$work/idle_shm" >/dev/null ||
    fail "COLLFUSE_SHM_CORES=2, --algo pool: --deterministic outputs differ from the threads backend's"
  for r in 0 1; do
    has "$work/idle.rank$r.json" '"reduce pieces"' "COLLFUSE_SHM_CORES=2, pool: rank $r reduces"
  done
  for r in 2 3; do
    has "$work/idle.rank$r.json" '"sleep while the workers reduce"' "COLLFUSE_SHM_CORES=2, pool: rank $r sleeps"
    ! grep -Fq '"reduce pieces"' "$work/idle.rank$r.json" ||
      fail "COLLFUSE_SHM_CORES=2, pool: rank $r took pieces (only ranks 0 and 1 should)"
  done
}
# auto, with the world's core count, the fewest any rank counts: ranks 0-1
# count 2 and ranks 2-3 count 4, and every rank picks pool for the 6 MiB
# call out of place (x is an output too) (ranks that each went by their own count picked pool and rsag:
# exit 3), ranks 2-3 asleep; with 4 cores, rsag; bench allreduce's JSON
# gives the count
sed 's|</graph>|<node name="ox" op="Output"><input ref="x"/></node></graph>|' "$work/pool_idle.xml" >"$work/pool_auto.xml"
CORES="2 2 4 4" launch 4 torch "$work/pool_auto.xml" --deterministic --verify --trace "$work/agree.json"
all_rc 4 0 "COLLFUSE_SHM_CORES=2 on ranks 0-1 and 4 on ranks 2-3, auto --verify" && {
  for r in 0 1; do
    has "$work/agree.rank$r.json" '"reduce pieces"' "cores 2,2,4,4, auto at 6 MiB: rank $r reduces pool's pieces"
  done
  for r in 2 3; do
    has "$work/agree.rank$r.json" '"sleep while the workers reduce"' "cores 2,2,4,4, auto at 6 MiB: rank $r sleeps"
  done
}
# in place (a bucket) from 8 MiB
sed 's|1536,1024|2048,1024|' "$work/pool_idle.xml" >"$work/pool_8m.xml"
COLLFUSE_SHM_CORES=2 run run "$work/pool_8m.xml" --backend shm --ranks 4 --verify --trace "$work/ip8.json" \
  --timeout 60 && expect_rc 0 "COLLFUSE_SHM_CORES=2, 4 ranks, 8 MiB in place, auto --verify" && {
  has "$work/ip8.rank0.json" '"reduce pieces"' "COLLFUSE_SHM_CORES=2, auto at 8 MiB in place: pool"
  has "$work/ip8.rank3.json" '"sleep while the workers reduce"' "COLLFUSE_SHM_CORES=2, auto at 8 MiB in place: rank 3 sleeps"
}
COLLFUSE_SHM_CORES=4 run run "$work/pool_auto.xml" --backend shm --ranks 4 --verify --trace "$work/four.json" \
  --timeout 60 && expect_rc 0 "COLLFUSE_SHM_CORES=4, 4 ranks, auto --verify" && {
  has "$work/four.rank0.json" '"reduce-scatter + put"' "COLLFUSE_SHM_CORES=4, auto at 6 MiB: rsag"
  ! grep -Fq '"reduce pieces"' "$work/four.rank0.json" || fail "COLLFUSE_SHM_CORES=4, auto at 6 MiB: pool ran"
}
COLLFUSE_SHM_CORES=2 run bench allreduce --backend shm --ranks 4 --sizes 6M --algo rsag --iters 2 --loops 1 \
  --no-mpi --json && expect_rc 0 "COLLFUSE_SHM_CORES=2 bench allreduce at 6 MiB" &&
  python3 - "$OUT" <<'EOF' || fail "COLLFUSE_SHM_CORES=2 bench allreduce at 6 MiB: JSON without cores 2 and auto pool"
import json, sys
d = json.loads(open(sys.argv[1]).read().strip().splitlines()[-1])
assert d["cores"] == 2 and d["results"][0]["auto_algo"] == "pool", d
EOF
# a worker killed while the idle ranks sleep: they see it die
COLLFUSE_SHM_CORES=2 kill9 "$work/pool_idle.xml" "pool, 4 ranks on 2 cores" --ranks 4 --algo pool
COLLFUSE_SHM_CORES=0 run run "$work/mixed2.xml" --backend shm --timeout 60 &&
  expect_last 2 "COLLFUSE_SHM_CORES=0: expected a number of cores from 1" "COLLFUSE_SHM_CORES=0"

# usage: standard input, CUDA
run run - --backend shm --ranks 2 && expect_rc 2 "--backend shm with FILE '-'"
run run "$work/mixed2.xml" --backend shm --device cuda && expect_rc 2 "--backend shm --device cuda" &&
  has "$ERR" "shm transport moves host memory" "--backend shm --device cuda"

# ---- nothing left behind
shm_after=$(ls /dev/shm 2>/dev/null | grep -c collfuse)
[ "$shm_after" -le "$shm_before" ] || fail "/dev/shm holds collfuse entries after the runs: $(ls /dev/shm | grep collfuse)"

finish shm
