#!/bin/sh
# full_disk.sh COLLFUSE SRCDIR
#
# A full disk while writing a drawing or a graph: each writer exits 1 with
# "OUT: error: cannot write: File too large" and leaves neither OUT nor a
# temporary (.cf-*) behind. The disk fills up as a file size limit of 256
# bytes with SIGXFSZ ignored (a write past it fails with EFBIG, as one on a
# full disk fails with ENOSPC): graphviz used to call exit(1) there, with no
# message and the temporary left. Prints one line per failure, exits 1 if
# there was any.
set -u

if [ $# -ne 2 ]; then
  echo "usage: full_disk.sh COLLFUSE SRCDIR" >&2
  exit 2
fi
cf=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
ex=$(cd "$2" && pwd)/examples/tp_mlp.xml
command -v python3 >/dev/null 2>&1 || { echo "full_disk.sh: python3 is needed" >&2; exit 2; }
dir=$(mktemp -d "${TMPDIR:-/tmp}/cf-full.XXXXXX") || exit 2
trap 'rm -rf "$dir"' EXIT
trap 'exit 130' INT TERM
fails=0

# limited OUT ARGS...: collfuse ARGS in $dir under the limit; expects exit 1,
# the one message about OUT and an empty $dir
limited() {
  out=$1
  shift
  mkdir "$dir/w"
  (cd "$dir/w" && timeout -k 5 $((60 * ${CF_TEST_TIME_SCALE:-1})) python3 -c '
import os, resource, signal, sys
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
resource.setrlimit(resource.RLIMIT_FSIZE, (256, 256))
os.execv(sys.argv[1], sys.argv[1:])' "$cf" "$@") >/dev/null 2>"$dir/err"
  rc=$?
  [ "$rc" -eq 1 ] || { echo "FAIL: collfuse $*: exit $rc, expected 1"; fails=$((fails + 1)); }
  want="$out: error: cannot write: File too large"
  [ "$(cat "$dir/err")" = "$want" ] ||
    { echo "FAIL: collfuse $*: stderr is not '$want':"; sed 's/^/    | /' "$dir/err"; fails=$((fails + 1)); }
  left=$(ls -A "$dir/w")
  [ -z "$left" ] || { echo "FAIL: collfuse $*: left behind: $left"; fails=$((fails + 1)); }
  rm -rf "$dir/w"
}

limited x.svg dot "$ex" -o x.svg
limited x.png dot "$ex" -o x.png
limited x.dot dot "$ex" -o x.dot
limited x.png compile "$ex" --dot x.png
limited x.svg compile "$ex" --dot x.svg
limited x.xml compile "$ex" -o x.xml

if [ "$fails" -ne 0 ]; then
  echo "full_disk.sh: $fails case(s) failed" >&2
  exit 1
fi
echo "full_disk.sh: all cases passed"
