#!/bin/sh
# expect.sh COLLFUSE EXIT SUBSTRING -- ARGS...
#
# Runs `COLLFUSE ARGS...` (under `timeout 20`) and passes only when it exits
# with EXIT and its stderr contains SUBSTRING (a fixed string, grep -F; an
# empty SUBSTRING checks the exit code alone). It also fails when the run
# takes longer than 20 s or when a sanitizer reported an error, since ASan
# and UBSan may exit 1 like an ordinary "invalid input". On failure it prints
# the command, the exit code and the output it got, and exits 1; a bad
# invocation of this script exits 2.
set -u

if [ $# -lt 4 ] || [ "$4" != "--" ]; then
  echo "usage: expect.sh COLLFUSE EXIT SUBSTRING -- ARGS..." >&2
  exit 2
fi
cf=$1
want=$2
sub=$3
shift 4
case $want in
  '' | *[!0-9]*) echo "expect.sh: EXIT must be a number, got '$want'" >&2; exit 2 ;;
esac

tmp=$(mktemp -d "${TMPDIR:-/tmp}/cf-expect.XXXXXX") || exit 2
trap 'rm -rf "$tmp"' EXIT
trap 'exit 130' INT TERM

start=$(date +%s)
timeout -k 5 $((20 * ${CF_TEST_TIME_SCALE:-1})) "$cf" "$@" >"$tmp/out" 2>"$tmp/err"
rc=$?
elapsed=$(($(date +%s) - start))

problem=
limit=$((20 * ${CF_TEST_TIME_SCALE:-1}))
if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ] || [ "$elapsed" -gt "$limit" ]; then
  problem="timed out (ran ${elapsed}s, limit ${limit}s)"
elif grep -Eq 'ERROR: (Address|Leak|Memory|Thread|UndefinedBehavior)Sanitizer|runtime error:' "$tmp/err"; then
  problem="sanitizer error"
elif [ "$rc" -ne "$want" ]; then
  problem="exit code $rc, expected $want"
elif [ -n "$sub" ] && ! grep -Fq -- "$sub" "$tmp/err"; then
  problem="stderr lacks the expected text"
fi

if [ -n "$problem" ]; then
  {
    echo "FAIL: $cf $*"
    echo "  $problem"
    echo "  expected exit $want, stderr containing: $sub"
    echo "  got exit $rc; stderr:"
    head -n 40 "$tmp/err" | sed 's/^/    | /'
    if [ -s "$tmp/out" ]; then
      echo "  stdout:"
      head -n 10 "$tmp/out" | sed 's/^/    | /'
    fi
  } >&2
  exit 1
fi
exit 0
