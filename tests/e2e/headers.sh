#!/bin/sh
# headers.sh CC SRC [INCLUDE_DIR...]: every internal header of the library
# (ir/, frontend/, passes/, codegen/, executor/, check/, api/, tools/ and the
# public include/) compiles alone and twice in one unit (it includes what it
# uses and has its guard), with the build's warnings as errors; and the
# layering the contracts promise holds in what they pull in: the executor's
# contract (runtime.h) none of the algorithms (algo.h), transports or MPI,
# ir.h not the trace API (ir/trace.h), executor.h no world or MPI.
# INCLUDE_DIRs: MPI's, for the one header that includes mpi.h.
set -eu
CC=$1
SRC=$2
shift 2
inc="-I$SRC -I$SRC/include"
for d in "$@"; do inc="$inc -I$d"; done
flags="-std=gnu11 -D_POSIX_C_SOURCE=200809L -Wall -Wextra -Wpedantic -Wshadow -Wno-unused-parameter -Werror"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT INT TERM
fail() { echo "headers.sh: $*" >&2; exit 1; }

# a control: a header that uses what it does not include must fail here
printf 'static inline size_t f(void) { return 0; }\n' >"$tmp/bad.h"
printf '#include "bad.h"\n' >"$tmp/bad.c"
# shellcheck disable=SC2086
if $CC $flags -fsyntax-only -I"$tmp" "$tmp/bad.c" 2>/dev/null; then
  fail "a header using size_t without <stddef.h> compiled: the check checks nothing"
fi

n=0
for h in $(cd "$SRC" && find ir frontend passes codegen executor check api tools include -name '*.h' | sort); do
  n=$((n + 1))
  printf '#include "%s"\n#include "%s"\n' "$h" "$h" >"$tmp/h$n.c"
  # shellcheck disable=SC2086
  $CC $flags $inc -fsyntax-only "$tmp/h$n.c" 2>"$tmp/err" ||
    fail "$h does not compile alone (or twice): $(head -n 3 "$tmp/err" | tr '\n' ' ')"
done
[ "$n" -gt 20 ] || fail "only $n headers found under $SRC"

# what a header pulls in, as the compiler sees it (-MM: ours only)
pulls() { # HEADER PATTERN WHAT
  printf '#include "%s"\n' "$1" >"$tmp/dep.c"
  # shellcheck disable=SC2086
  $CC $flags $inc -MM "$tmp/dep.c" | tr -s ' \\\\' '\n' >"$tmp/deps"
  if grep -E "$2" "$tmp/deps"; then fail "$1 pulls in $3"; fi
}
pulls executor/runtime.h '(/algo\.h$|/algorithms\.h$|/transports/[^/]*$|/mpi[^/]*\.h$)' "the algorithms, a transport or MPI"
pulls executor/executor.h '(/transports/[^/]*$|/mpi[^/]*\.h$)' "a world or MPI"
pulls ir/ir.h '/trace\.h$' "the trace API"
echo "headers: $n compile alone; the contracts include no more than they promise"
