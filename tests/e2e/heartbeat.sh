#!/bin/sh
# heartbeat.sh COLLFUSE SRCDIR
#
# `run --timeout` counts the silence of the peer a wait is for, not its
# work (issues 34, 30): a rank whose inputs take twice the timeout
# while it beats (COLLFUSE_TEST_SLOW=RANK:SECONDS, the fault world's hook:
# its first sign of life comes that late, beating every 20 ms meanwhile)
# is waited for and the run verifies; a rank as long silent
# (COLLFUSE_TEST_SLOW=RANK:SECONDS:quiet: stuck) is given up on after the
# timeout, naming it, long before its stall would end. Both on the threads
# world and on the shm world (ranks as processes, the counters in the
# control segment). A chain of waits too (issue 34): on 4 ranks with the
# ring, rank 2 busy at the top of its first step (COLLFUSE_TEST_SLOW's
# step=0) makes rank 3 wait for it, rank 0 for rank 3 and rank 1 for rank 0:
# each waits as long as rank 2 beats (before, rank 0 timed out waiting for
# rank 3), and rank 2 stuck is named, directly or at the end of the chain.
# The timeout is CF_TEST_TIME_SCALE seconds (1 on an idle machine), so each
# check takes a few seconds.
set -u

if [ $# -ne 2 ]; then
  echo "usage: heartbeat.sh COLLFUSE SRCDIR" >&2
  exit 2
fi
cf=$1
src=$2
work=$(mktemp -d "${TMPDIR:-/tmp}/cf-heartbeat.XXXXXX") || exit 2
trap 'rm -rf "$work"' EXIT
. "$(dirname "$0")/lib.sh"

to=${CF_TEST_TIME_SCALE:-1}
slow=$((2 * to))
stuck=$((30 * to))
LIMIT=60
g="$src/examples/fused_buckets.xml"
for backend in threads shm; do
  # busy: two timeouts late, beating: waited for, and the outputs right
  if COLLFUSE_TEST_SLOW=1:$slow run run "$g" --backend $backend --timeout $to --verify; then
    expect_rc 0 "$backend: rank 1 busy ${slow}s, --timeout $to" &&
      has "$OUT" "verified" "$backend: rank 1 busy ${slow}s"
    [ "$secs" -ge "$slow" ] || fail "$backend: the run took ${secs}s, less than rank 1's ${slow}s"
  fi
  # stuck: as late and silent: the timeout names it, the stall ends with the abort
  if COLLFUSE_TEST_SLOW=1:$stuck:quiet run run "$g" --backend $backend --timeout $to; then
    expect_rc 3 "$backend: rank 1 silent" &&
      has "$ERR" "timed out after $to s waiting for a message from rank 1" "$backend: rank 1 silent"
    [ "$secs" -lt "$stuck" ] || fail "$backend: rank 1 silent: the run took ${secs}s, as long as its stall"
  fi
  # a chain of waits to a busy rank: waited for, the outputs right
  if COLLFUSE_TEST_SLOW=2:$slow:step=0 run run "$g" --ranks 4 --algo ring --backend $backend \
    --timeout $to --verify; then
    expect_rc 0 "$backend: a chain to rank 2 busy ${slow}s, --timeout $to" &&
      has "$OUT" "verified" "$backend: a chain to rank 2 busy ${slow}s"
    [ "$secs" -ge "$slow" ] || fail "$backend: the chain's run took ${secs}s, less than rank 2's ${slow}s"
  fi
  # the same chain to a stuck rank: given up on after the timeout, naming it
  if COLLFUSE_TEST_SLOW=2:$stuck:quiet:step=0 run run "$g" --ranks 4 --algo ring \
    --backend $backend --timeout $to; then
    expect_rc 3 "$backend: a chain to rank 2 silent" &&
      has "$ERR" "timed out after $to s waiting for" "$backend: a chain to rank 2 silent" &&
      { grep -q -e "from rank 2" -e "for rank 2" "$ERR" ||
        fail "$backend: a chain to rank 2 silent: rank 2 not named: $(cat "$ERR")"; }
    [ "$secs" -lt "$stuck" ] || fail "$backend: a chain to rank 2 silent: the run took ${secs}s, as long as its stall"
  fi
done
finish heartbeat
