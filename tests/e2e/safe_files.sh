#!/bin/sh
# safe_files.sh COLLFUSE SRCDIR
#
# End-to-end checks that writing and reading files cannot be turned against
# the user: every writer (compile -o/--dot/--emit-*, dot -o, ranktable
# --hostfile/--rankfile, run --save-outputs and its outputs.json) leaves a
# file named OUT.tmp (--save-outputs: removes it with the rank directory it
# replaces whole, never writes it) and the target of a symlink OUT.tmp alone, replaces a
# symlink at OUT itself instead of writing through it, leaves no temporary
# behind on success or failure, and handles names at the file system's
# 255-byte limit; run --input from a FIFO with no writer gives up after
# --timeout (exit 3, naming the file), and one FIFO named for several ranks
# is read once; every other input (graph, profile, rank table) that is a
# FIFO or a device is refused before anything blocks on it. Every command runs under `timeout 30`. Prints one line per
# failure and exits 1 if there was any.
set -u

if [ $# -ne 2 ]; then
  echo "usage: safe_files.sh COLLFUSE SRCDIR" >&2
  exit 2
fi
cf=$1
src=$2
ex=$src/examples
command -v python3 >/dev/null 2>&1 || { echo "safe_files.sh: python3 is needed" >&2; exit 2; }

work=$(mktemp -d "${TMPDIR:-/tmp}/cf-safe.XXXXXX") || exit 2
trap 'chmod -R u+w "$work" 2>/dev/null; rm -rf "$work"' EXIT
trap 'exit 130' INT TERM

fails=0
checks=0
ERR="$work/stderr"

fail() {
  fails=$((fails + 1))
  echo "FAIL: $*" >&2
  if [ -s "$ERR" ]; then head -n 10 "$ERR" | sed 's/^/    stderr| /' >&2; fi
}

# run ARGS...: collfuse, stdout discarded, stderr in $ERR, status in $rc
run() {
  checks=$((checks + 1))
  timeout -k 5 30 "$cf" "$@" </dev/null >/dev/null 2>"$ERR"
  rc=$?
  if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then
    fail "timed out: collfuse $*"
    return 1
  fi
  if grep -Eq 'ERROR: (Address|Leak|Memory|Thread|UndefinedBehavior)Sanitizer|runtime error:' "$ERR"; then
    fail "sanitizer error: collfuse $*"
    return 1
  fi
  return 0
}

# no_temps DIR WHAT: no temporary (.cf-*) left in DIR
no_temps() {
  set -- "$1"/.cf-* "$2"
  [ -e "$1" ] && fail "$2: temporary $1 left behind"
}

# ---- each writer: OUT.tmp, a symlink OUT.tmp, a symlink at OUT
# writer NAME OUT ARGS...: collfuse ARGS (which write OUT) in a fresh
# directory, three times
writer() {
  name=$1 out=$2
  shift 2
  d="$work/w_$name"
  mkdir -p "$d"
  # 1. a file that happens to be called OUT.tmp
  echo "user data" >"$d/$out.tmp"
  if run "$@"; then
    [ "$rc" -eq 0 ] || fail "$name: exit $rc"
    # (--save-outputs replaces DIR/rank<R> whole: there OUT.tmp goes with
    # it, but is never written)
    if [ -e "$d/$out.tmp" ] || [ "$name" != npy ]; then
      [ "$(cat "$d/$out.tmp")" = "user data" ] || fail "$name: $out.tmp was overwritten"
    fi
    [ -s "$d/$out" ] || fail "$name: $out not written"
    no_temps "$d" "$name"
  fi
  # 2. OUT.tmp a symlink to a victim
  rm -f "$d/$out.tmp" "$d/$out"
  echo "victim" >"$work/victim_$name"
  ln -s "$work/victim_$name" "$d/$out.tmp"
  if run "$@"; then
    [ "$rc" -eq 0 ] || fail "$name (OUT.tmp a symlink): exit $rc"
    [ "$(cat "$work/victim_$name")" = "victim" ] || fail "$name: written through the symlink $out.tmp"
  fi
  # 3. OUT itself a symlink: replaced, its target untouched
  rm -f "$d/$out.tmp" "$d/$out"
  ln -s "$work/victim_$name" "$d/$out"
  if run "$@"; then
    [ "$rc" -eq 0 ] || fail "$name (OUT a symlink): exit $rc"
    [ "$(cat "$work/victim_$name")" = "victim" ] || fail "$name: written through the symlink $out"
    { [ -f "$d/$out" ] && [ ! -L "$d/$out" ]; } || fail "$name: the symlink $out was not replaced by a file"
  fi
}

g=$ex/dp_gradients.xml
rt=$src/tests/ranktable/v1.0_two_servers.json
writer compile_o out.xml compile "$g" -o "$work/w_compile_o/out.xml"
writer compile_dot out.dot compile "$g" --dot "$work/w_compile_dot/out.dot"
writer emit_llvm k.ll compile "$g" --emit-llvm "$work/w_emit_llvm/k.ll"
writer emit_asm k.s compile "$g" --emit-asm "$work/w_emit_asm/k.s"
writer emit_obj k.o compile "$g" --emit-obj "$work/w_emit_obj/k.o"
writer emit_ptx k.ptx compile "$g" --emit-ptx "$work/w_emit_ptx/k.ptx"
writer dot_svg g.svg dot "$g" -o "$work/w_dot_svg/g.svg"
writer dot_dot g.dot dot "$g" -o "$work/w_dot_dot/g.dot"
writer hostfile hosts ranktable "$rt" --hostfile "$work/w_hostfile/hosts" --rankfile /dev/null
writer rankfile ranks ranktable "$rt" --rankfile "$work/w_rankfile/ranks" --hostfile /dev/null

# --save-outputs: DIR/rank0/NAME.npy and DIR/outputs.json
gr=$ex/reduce_root.xml
out_name=$(sed -n 's/.*name="\([^"]*\)" *op="Output".*/\1/p' "$gr" | head -n 1)
[ -n "$out_name" ] || fail "no Output in $gr"
mkdir -p "$work/w_npy/so/rank0" "$work/w_manifest/so"
writer npy "so/rank0/$out_name.npy" run "$gr" --save-outputs "$work/w_npy/so"
writer manifest "so/outputs.json" run "$gr" --save-outputs "$work/w_manifest/so"
no_temps "$work/w_npy/so/rank0" "run --save-outputs"

# ---- a name at the file system's limit (255 bytes with .npy)
long=$(printf 'n%.0s' $(seq 1 251))
sed "s/name=\"$out_name\" *op=\"Output\"/name=\"$long\" op=\"Output\"/" "$gr" >"$work/long.xml"
if run run "$work/long.xml" --save-outputs "$work/long"; then
  [ "$rc" -eq 0 ] || fail "--save-outputs with a 251-byte output name: exit $rc"
  [ -s "$work/long/rank0/$long.npy" ] || fail "--save-outputs with a 251-byte output name: no file"
fi

# ---- devices are written in place
if run compile "$g" -o /dev/null --emit-llvm /dev/null; then
  [ "$rc" -eq 0 ] || fail "compile -o /dev/null: exit $rc"
fi

# ---- a failed write leaves the target as it was and no temporary
mkdir "$work/full"
echo "old" >"$work/full/out.xml"
# a file size limit of 0: the temporary is created, the write fails (EFBIG)
checks=$((checks + 1))
# (stderr through a pipe: the limit would stop a message written to a file)
rc=$( (trap '' XFSZ; ulimit -f 0; timeout 30 "$cf" compile "$g" -o "$work/full/out.xml" 2>&1 >/dev/null
  echo "rc=$?") | tee "$ERR" | sed -n 's/^rc=//p')
[ "$rc" -eq 1 ] || fail "compile -o with a write that fails: exit $rc, expected 1"
grep -Fq "$work/full/out.xml: error: cannot write: File too large" "$ERR" ||
  fail "compile -o with a write that fails: no 'cannot write: File too large' naming the file"
[ "$(cat "$work/full/out.xml")" = "old" ] || fail "a failed write changed the target"
no_temps "$work/full" "a failed write"
# a read-only directory (not for root, who may write anyway)
if [ "$(id -u)" -ne 0 ]; then
  mkdir "$work/ro" && chmod a-w "$work/ro"
  if run compile "$g" -o "$work/ro/out.xml"; then
    [ "$rc" -eq 1 ] || fail "compile -o into a read-only directory: exit $rc, expected 1"
    grep -Fq "$work/ro/out.xml: error: cannot write: Permission denied" "$ERR" ||
      fail "compile -o into a read-only directory: no message naming the file"
  fi
  chmod u+w "$work/ro"
  no_temps "$work/ro" "compile -o into a read-only directory"
fi

# ---- --input from a FIFO
gi=$src/tests/run/input.xml # x: float32 4x3, y: int32 5; world_size 3
python3 - "$work" <<'EOF'
import struct, sys
def npy(path, descr, shape, fmt, values):
    h = "{'descr': '%s', 'fortran_order': False, 'shape': (%s), }" % (descr, ", ".join(map(str, shape)) + ("," if len(shape) == 1 else ""))
    h += " " * ((64 - (10 + len(h) + 1) % 64) % 64) + "\n"
    with open(path, "wb") as f:
        f.write(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(h)) + h.encode())
        f.write(struct.pack("<%d%s" % (len(values), fmt), *values))
npy(sys.argv[1] + "/x.npy", "<f4", (4, 3), "f", [float(i) for i in range(12)])
npy(sys.argv[1] + "/y.npy", "<i4", (5,), "i", [3, 1, 4, 1, 5])
EOF
mkfifo "$work/fifo" || fail "mkfifo"
# no writer: gives up after --timeout, naming the file
checks=$((checks + 1))
start=$(date +%s)
timeout -k 5 $((30 * ${CF_TEST_TIME_SCALE:-1})) "$cf" run "$gi" --input "x=$work/fifo" --timeout 2 >/dev/null 2>"$ERR"
rc=$?
took=$(($(date +%s) - start))
[ "$rc" -eq 3 ] || fail "run --input FIFO without a writer: exit $rc, expected 3"
grep -Fq "$work/fifo: error: cannot read: no data within the timeout of 2 s" "$ERR" ||
  fail "run --input FIFO without a writer: no message naming the FIFO"
[ "$took" -le $((15 * ${CF_TEST_TIME_SCALE:-1})) ] || fail "run --input FIFO without a writer: took ${took}s with --timeout 2"
# a writer: every rank (3, no {rank}) gets its data from one read
cat "$work/x.npy" >"$work/fifo" &
wpid=$!
if run run "$gi" --input "x=$work/fifo" --input "y=$work/y.npy" --timeout 20 --save-outputs "$work/ff"; then
  [ "$rc" -eq 0 ] || fail "run --input FIFO for 3 ranks: exit $rc"
fi
kill "$wpid" 2>/dev/null
wait "$wpid" 2>/dev/null
if run run "$gi" --input "x=$work/x.npy" --input "y=$work/y.npy" --save-outputs "$work/fr"; then
  [ "$rc" -eq 0 ] || fail "run --input file for 3 ranks: exit $rc"
  for r in 0 1 2; do
    cmp -s "$work/ff/rank$r/res_x.npy" "$work/fr/rank$r/res_x.npy" ||
      fail "run --input FIFO: rank $r's result differs from the same data read from a file"
  done
fi

# ---- every input is a regular file, read with a bound: a FIFO with no
# writer or a device is refused before anything blocks on it (exit 1, naming
# the file and what it is); run --input alone reads FIFOs, within --timeout
# (above). Under `timeout 30`, so a reader that blocks or spins fails.
g=$ex/tp_block.xml
mkdir -p "$work/xdg/collfuse"
for dev in "$work/fifo" /dev/zero; do
  [ -p "$work/fifo" ] || mkfifo "$work/fifo" || fail "mkfifo"
  case $dev in */fifo) what="a FIFO" ;; *) what="a character device" ;; esac
  # refused_as WHAT-IT-IS NAME ARGS...: exit 1 naming $dev as not a regular file
  refused() {
    name=$1
    shift
    if run "$@"; then
      [ "$rc" -eq 1 ] || fail "$name: exit $rc, expected 1"
      grep -Fq "$dev: error: ${prefix}not a regular file ($what)" "$ERR" ||
        fail "$name: no 'not a regular file ($what)' naming $dev"
    fi
  }
  prefix=
  refused "check $dev" check "$dev"
  refused "ranktable $dev" ranktable "$dev"
  [ "$dev" = /dev/zero ] && refused "run --input x=$dev" run "$gi" --input "x=$dev" \
    --input "y=$work/y.npy"
  prefix="profile: "
  refused "run --profile $dev" run "$g" --profile "$dev"
  COLLFUSE_PROFILE=$dev refused "COLLFUSE_PROFILE=$dev" run "$g"
  if [ "$dev" = /dev/zero ]; then
    ln -sf /dev/zero "$work/xdg/collfuse/profile"
  else
    rm -f "$work/xdg/collfuse/profile"
    mkfifo "$work/xdg/collfuse/profile" || fail "mkfifo"
  fi
  dev=$work/xdg/collfuse/profile
  XDG_CONFIG_HOME=$work/xdg COLLFUSE_PROFILE='' refused "the default profile as $what" run "$g"
  rm -f "$work/xdg/collfuse/profile"
done
# standard input stays allowed, up to the same bound as a file
checks=$((checks + 1))
timeout -k 5 30 "$cf" ranktable - </dev/zero >/dev/null 2>"$ERR"
rc=$?
[ "$rc" -eq 1 ] && grep -Fq "<stdin>: error: file is larger than the limit" "$ERR" ||
  fail "ranktable - </dev/zero: exit $rc, expected 1 naming the limit"

echo "safe_files.sh: $checks checks, $fails failures"
[ "$fails" -eq 0 ]
