#!/bin/sh
# kernel_cache.sh COLLFUSE SRCDIR
#
# The kernel object cache is trusted only when no one but the user could
# have written it (docs/kernels.md, "Trust"): for each hostile cache - a 0777
# directory, one owned by another uid (as root only), a group-writable
# entry, a symbolic link as the directory or as an entry, a FIFO as an entry,
# the key readable by others - `bench reduce` rebuilds every kernel
# ("cached": false) with exactly one warning, and `run --verify` (under
# `timeout`, so a FIFO that blocks fails) gives verified results with one
# warning. An entry another user's key sealed (what a forger without the key
# can offer) is rebuilt without a warning. Prints one line per failure and
# exits 1 if there was any.
set -u

if [ $# -ne 2 ]; then
  echo "usage: kernel_cache.sh COLLFUSE SRCDIR" >&2
  exit 2
fi
cf=$1
src=$2
command -v python3 >/dev/null 2>&1 || { echo "kernel_cache.sh: python3 is needed" >&2; exit 2; }

work=$(mktemp -d "${TMPDIR:-/tmp}/cf-kcache.XXXXXX") || exit 2
trap 'chown -R "$(id -u)" "$work" 2>/dev/null; chmod -R u+rwx "$work" 2>/dev/null; rm -rf "$work"' EXIT
trap 'exit 130' INT TERM
. "$(dirname "$0")/lib.sh"
LIMIT=60

# two ranks, one float32 sum: the kernels bench reduce times below, too
cat >"$work/g.xml" <<'G'
<graph name="sum2" version="1" world_size="2">
  <node name="x" op="Input" dtype="float32" shape="4096"/>
  <node name="ar" op="AllReduce" reduction="sum"><input ref="x"/></node>
  <node name="y" op="Output"><input ref="ar"/></node>
</graph>
G
bench="bench reduce --quick --dtypes float32 --ops sum --sources 2 --reps 1 --min-ms 0 --json"

# cached WANT WHAT: every kernel of the last bench reduce came from the cache
# (WANT true) or was compiled (false)
cached() {
  got=$(python3 -c 'import json, sys
print(" ".join(sorted({str(k["cached"]).lower() for k in json.load(open(sys.argv[1]))["kernels"]})))' "$OUT" 2>/dev/null)
  [ "$got" = "$1" ] || fail "$2: kernels cached: '$got', expected '$1'"
}

# warned N WHY WHAT: the last command warned N times that the cache is
# ignored, naming WHY
warned() {
  n=$(grep -c "the cache is ignored and kernels are built in memory" "$ERR")
  [ "$n" -eq "$1" ] || fail "$3: $n warnings that the cache is ignored, expected $1"
  [ "$1" -eq 0 ] || grep -Fq "$2" "$ERR" || fail "$3: the warning does not say '$2'"
}

# fresh: a sound cache in $c, every kernel of bench and run stored
fresh() {
  c=$work/c$checks
  COLLFUSE_CACHE=$c run $bench
  COLLFUSE_CACHE=$c run run "$work/g.xml" --verify
  # shellcheck disable=SC2086 # $bench is several words
  COLLFUSE_CACHE=$c run $bench && cached true "a sound cache"
  [ "$(stat -c %a "$c/key")" = 600 ] || fail "the key is not mode 0600"
}

# distrusted WHY WHAT: with the cache in $c (or $dirvar), bench rebuilds and
# warns once, run verifies and warns once
distrusted() {
  d=${dirvar:-$c}
  if COLLFUSE_CACHE=$d run $bench; then
    [ "$rc" -eq 0 ] || fail "$2: bench reduce exit $rc"
    cached false "$2"
    warned 1 "$1" "$2 (bench reduce)"
  fi
  if COLLFUSE_CACHE=$d run run "$work/g.xml" --verify --timeout 3; then
    [ "$rc" -eq 0 ] || fail "$2: run --verify exit $rc"
    grep -q "verified" "$OUT" || fail "$2: run --verify did not verify"
    warned 1 "$1" "$2 (run)"
  fi
  dirvar=
}
dirvar=

fresh
chmod 0777 "$c"
distrusted "writable by group or others (mode 0777)" "a 0777 cache directory"

if [ "$(id -u)" -eq 0 ]; then
  fresh
  chown 65534 "$c"
  distrusted "owned by uid 65534, not by this user (uid 0)" "a directory of uid 65534's"
fi

fresh
chmod g+w "$c"/*.o
distrusted "writable by group or others (mode 0" "group-writable entries"

fresh
ln -s "$c" "$work/link"
dirvar=$work/link
distrusted "is a symbolic link" "the directory a symbolic link"

fresh
mkdir "$work/aside$checks"
for e in "$c"/*.o; do
  mv "$e" "$work/aside$checks/" && ln -s "$work/aside$checks/${e##*/}" "$e"
done
distrusted "is a symbolic link" "entries that are symbolic links"

fresh
for e in "$c"/*.o; do
  rm "$e" && mkfifo "$e"
done
distrusted "not a regular file (a FIFO)" "FIFOs as entries"

fresh
chmod 0644 "$c/key"
distrusted "mode 0644, not 0600" "the key readable by others"

# another user's entries (sealed with another key) over ours: each fails
# its MAC and is rebuilt; a bad entry, not a bad cache (no warning)
fresh
mine=$c
fresh
cp "$c"/*.o "$mine"/
if COLLFUSE_CACHE=$mine run $bench; then
  cached false "entries sealed with another key"
  warned 0 "" "entries sealed with another key"
fi
COLLFUSE_CACHE=$mine run $bench && cached true "rewritten with the user's key"

finish kernel_cache.sh
