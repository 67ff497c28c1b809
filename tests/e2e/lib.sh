# lib.sh: what the end-to-end scripts share; sourced (POSIX sh) by cli.sh,
# errors.sh, help.sh, mpi.sh and run.sh after they set:
#   cf        the collfuse executable
#   work      a scratch directory of their own
# and optionally (before a call, read at the call):
#   CF_SUB    a command every `run` prepends (run.sh: "run")
#   LIMIT     seconds `run` allows a command (default 20)
#   IN        `run`'s standard input for the next command (default /dev/null)
#   FAIL_LINES  lines of stderr `fail` shows (default 20)
#   PART      in a script split in two (run.sh): fast runs only the quick
#             checks (ctest's e2e/NAME, `make test`), long only the long
#             runs (e2e/NAME_long, label long, `make check-long`), unset both
# It sets fails=0, checks=0, OUT and ERR (the last command's stdout and
# stderr). `finish NAME` prints the count and exits 1 if anything failed.

fails=0
checks=0
OUT="$work/stdout"
ERR="$work/stderr"
CF_SUB=
LIMIT=20
IN=/dev/null

# part fast|long: whether the checks that follow belong to the part that runs
part() { [ -z "${PART:-}" ] || [ "$PART" = "$1" ]; }

# master_port: a port P free now with P + 1 free too, for a job started
# with torchrun's variables (MASTER_PORT = P; a shm world meets at P + 1): a
# port derived from the pid may be one another process holds on a busy
# machine ("Address already in use"); prints nothing if 200 tries fail
master_port() {
  python3 -c '
import socket
for _ in range(200):
    with socket.socket() as a, socket.socket() as b:
        a.bind(("127.0.0.1", 0))
        p = a.getsockname()[1]
        try:
            b.bind(("127.0.0.1", p + 1))
        except (OSError, OverflowError):
            continue
        print(p)
        break
'
}

# fail WHAT...: count a failure and say what, with the head of the last stderr
fail() {
  fails=$((fails + 1))
  echo "FAIL: $*" >&2
  if [ -s "$ERR" ]; then head -n "${FAIL_LINES:-20}" "$ERR" | sed 's/^/    stderr| /' >&2; fi
}

# sanitized WHAT: fail (and false) when $ERR holds a sanitizer report
sanitized() {
  if [ -s "$ERR" ] && grep -Eq 'ERROR: (Address|Leak|Memory|Thread|UndefinedBehavior)Sanitizer|runtime error:' "$ERR"; then
    fail "sanitizer error: $*"
    return 0
  fi
  return 1
}

# now: whole seconds since boot into $now, without starting a process (the
# scripts start the driver hundreds of times: each `date` costs as much)
now() {
  read -r now _ </proc/uptime
  now=${now%.*}
}

# run ARGS...: `collfuse $CF_SUB ARGS` under `timeout $LIMIT`, standard input
# from $IN (then reset to /dev/null); stdout in $OUT, stderr in $ERR, status
# in $rc, seconds in $secs; false (after reporting) on a timeout, a sanitizer
# report or a crash (an exit code above 3)
run() {
  checks=$((checks + 1))
  now
  t0=$now
  # shellcheck disable=SC2086 # $CF_SUB is a command word or nothing
  # sanitizer builds and busy machines run slower: CF_TEST_TIME_SCALE
  # (tests/CMakeLists.txt: 3 under the sanitizers, times
  # COLLFUSE_TEST_TIMEOUT_SCALE) stretches the limit
  lim=$((LIMIT * ${CF_TEST_TIME_SCALE:-1}))
  timeout -k 5 "$lim" "$cf" $CF_SUB "$@" <"$IN" >"$OUT" 2>"$ERR"
  rc=$?
  now
  secs=$((now - t0))
  IN=/dev/null
  if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then
    fail "timed out after ${lim}s: collfuse $CF_SUB $*"
    return 1
  fi
  sanitized "collfuse $CF_SUB $*" && return 1
  if [ "$rc" -gt 3 ]; then
    fail "crashed (exit $rc): collfuse $CF_SUB $*"
    return 1
  fi
  return 0
}

# expect_rc WANT WHAT: the last command exited WANT
expect_rc() {
  [ "$rc" -eq "$1" ] || { fail "$2: exit $rc, expected $1"; return 1; }
}

# has FILE TEXT WHAT: FILE contains TEXT (a fixed string)
has() {
  grep -Fq -- "$2" "$1" || { fail "$3: no '$2' in $(basename "$1")"; return 1; }
}

# expect_last RC TEXT WHAT: the last command exited RC and its stderr holds
# TEXT (none: "")
expect_last() {
  expect_rc "$1" "$3" || return 1
  [ -z "$2" ] || has "$ERR" "$2" "$3 (stderr)"
}

# expect RC TEXT ARGS...: `run ARGS` exits RC with TEXT on stderr or stdout
expect() {
  want=$1
  text=$2
  shift 2
  run "$@" || return 0
  [ "$rc" -eq "$want" ] || { fail "collfuse $*: exit $rc, expected $want"; return 0; }
  grep -Fq -- "$text" "$ERR" || grep -Fq -- "$text" "$OUT" || fail "collfuse $*: no '$text' in the output"
}

# finish NAME: the summary line; exit 1 if a check failed
finish() {
  if [ "$fails" -ne 0 ]; then
    echo "$1: $fails of $checks checks failed" >&2
    exit 1
  fi
  echo "$1: all $checks checks passed"
  exit 0
}
