#!/bin/sh
# launch.sh COLLFUSE SRCDIR
#
# `collfuse launch --ranks N [--] PROGRAM [ARGS...]`, collfuse's own
# launcher for programs: each of the N processes gets its rank, the job's
# size and one job name (COLLFUSE_RANK, COLLFUSE_WORLD_SIZE, COLLFUSE_JOB);
# the program's arguments are its own (--help too); the exit code is the
# first failing rank's, 3 for a rank killed by a signal (named), 1 for a
# program that cannot be run, 2 for no program; and a program that joins
# the shm world from those variables (`collfuse run --backend shm`) runs
# as the job's ranks. (Python's collfuse.distributed and compile_step under
# it: tests/python/test_step_dist.py.) Exits 1 if a check failed.
set -u

if [ $# -ne 2 ]; then
  echo "usage: launch.sh COLLFUSE SRCDIR" >&2
  exit 2
fi
cf=$1
src=$2
work=$(mktemp -d "${TMPDIR:-/tmp}/cf-launch.XXXXXX") || exit 2
trap 'rm -rf "$work"' EXIT
trap 'exit 130' INT TERM

. "$(dirname "$0")/lib.sh"

# every rank its own variables, one job
run launch --ranks 3 -- sh -c 'echo "rank=$COLLFUSE_RANK size=$COLLFUSE_WORLD_SIZE job=$COLLFUSE_JOB"' &&
  expect_rc 0 "launch --ranks 3" && {
  [ "$(sort "$OUT" | sed 's/ job=.*//' | tr '\n' ' ')" = "rank=0 size=3 rank=1 size=3 rank=2 size=3 " ] ||
    fail "launch --ranks 3: the ranks said $(tr '\n' ' ' <"$OUT")"
  [ "$(sed 's/.* job=//' "$OUT" | sort -u | wc -l)" -eq 1 ] && ! grep -q 'job=$' "$OUT" ||
    fail "launch --ranks 3: not one job name: $(tr '\n' ' ' <"$OUT")"
}
# the program's arguments are its own, --help and -n among them
run launch --ranks 1 sh -c 'echo "args: $*"' x --help -n 3 && expect_rc 0 "launch: the program's --help" &&
  has "$OUT" "args: --help -n 3" "launch: the program's arguments"
# exit codes: the failing rank's, a killed rank's 3, 1 for no such program, 2 for usage errors
run launch --ranks 2 -- sh -c 'exit "$COLLFUSE_RANK"' && expect_rc 1 "launch: rank 1 exits 1"
run launch --ranks 2 -- sh -c '[ "$COLLFUSE_RANK" = 1 ] && kill -9 $$; exit 0' &&
  expect_last 3 "rank 1 (pid" "launch: rank 1 killed" && has "$ERR" "signal 9" "launch: the signal named"
expect 1 "cannot run 'no-such-program-$$'" launch --ranks 2 no-such-program-$$
expect 2 "no program to start" launch --ranks 2
expect 2 "no program to start" launch --ranks 2 --
expect 2 "--ranks wants an integer" launch --ranks 0 true
expect 2 "unknown option" launch --rank 2 true
# a program that joins the shm world from the launcher's variables
shm_before=$(ls /dev/shm 2>/dev/null | grep -c collfuse)
run launch --ranks 2 -- "$cf" run "$src/examples/allgather_layouts.xml" --backend shm --verify --json &&
  expect_rc 0 "launch --ranks 2 -- collfuse run --backend shm" && {
  [ "$(grep -c '"verified":true' "$OUT")" -ge 1 ] || fail "launch: collfuse run --backend shm did not verify"
}
[ "$(ls /dev/shm 2>/dev/null | grep -c collfuse)" -le "$shm_before" ] || fail "launch: /dev/shm entries left"

finish launch.sh
