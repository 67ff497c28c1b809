#!/bin/sh
# codegen_module.sh COLLFUSE LIBCOLLFUSE MODULE SRC: the LLVM code generator
# is a module loaded on first use (codegen/load.c): neither the driver nor
# libcollfuse links libLLVM, `compile`, `check` and `dot` never load it,
# `run` does unless every kernel is in the disk cache (then it loads
# neither the module nor libLLVM, and runs without the module), the module
# exports its table alone, and a driver without the module (or beside
# another build's) says so and exits 1 when it needs a kernel compiled.
set -eu
cf=$1
lib=$2
mod=$3
src=$4
g=$src/examples/dp_gradients.xml
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT INT TERM
fails=0
fail() { echo "FAIL: $*" >&2; fails=$((fails + 1)); }

for f in "$cf" "$lib"; do
  if ldd "$f" | grep -q libLLVM; then fail "$f links libLLVM: $(ldd "$f" | grep libLLVM)"; fi
done
readelf -d "$mod" | grep -q 'NEEDED.*libLLVM' || fail "$mod does not link libLLVM"
syms=$(nm -D --defined-only "$mod" | awk '$2 ~ /^[TDBRV]$/ && $3 !~ /^_/ { print $3 }')
[ "$syms" = cf_codegen_llvm_ops ] || fail "$mod exports other symbols than its table: $syms"

# loaded: the objects the dynamic loader maps for a command (LD_DEBUG=files)
loaded() {
  LD_DEBUG=files LD_DEBUG_OUTPUT="$tmp/ld" "$@" >"$tmp/out" 2>"$tmp/err" || return 1
  cat "$tmp"/ld.* >"$tmp/ld" && rm -f "$tmp"/ld.*
}
for cmd in "check $g" "compile $g -o $tmp/f.xml" "dot $g -o $tmp/f.dot"; do
  # shellcheck disable=SC2086 # a command and its words
  loaded "$cf" $cmd || { fail "collfuse $cmd: $(head -3 "$tmp/err")"; continue; }
  if grep -Eq 'file=[^ ]*(libLLVM|collfuse-codegen)' "$tmp/ld"; then
    fail "collfuse $cmd loaded $(grep -Eo 'file=[^ ]*(libLLVM|collfuse-codegen)[^ ]*' "$tmp/ld" | sort -u | tr '\n' ' ')"
  fi
done
if COLLFUSE_CACHE=off loaded "$cf" run "$g" --iters 1; then
  grep -q 'file=[^ ]*collfuse-codegen' "$tmp/ld" || fail "collfuse run did not load $mod"
else
  fail "collfuse run: $(head -3 "$tmp/err")"
fi
# a warm kernel cache: the second run links its kernels without LLVM
mkdir -m 700 "$tmp/kc"
COLLFUSE_CACHE=$tmp/kc "$cf" run "$g" --iters 1 >/dev/null 2>"$tmp/err" || fail "cold run: $(head -3 "$tmp/err")"
if COLLFUSE_CACHE=$tmp/kc loaded "$cf" run "$g" --iters 1 --verify; then
  if grep -Eq 'file=[^ ]*(libLLVM|collfuse-codegen)' "$tmp/ld"; then
    fail "a warm run loaded $(grep -Eo 'file=[^ ]*(libLLVM|collfuse-codegen)[^ ]*' "$tmp/ld" | sort -u | tr '\n' ' ')"
  fi
else
  fail "warm run: $(head -3 "$tmp/err")"
fi

# the Python package over libcollfuse by a relative link to it: the module
# is found beside the library the link leads to (not under the sanitizers:
# python3 is not built with them)
if [ -z "${ASAN_OPTIONS:-}" ]; then
  ln -s "$lib" "$tmp/libcollfuse.so"
  out=$(cd "$tmp" && COLLFUSE_LIBRARY=./libcollfuse.so PYTHONPATH="$src/python" PYTHONDONTWRITEBYTECODE=1 \
    /usr/bin/python3 -c '
import collfuse, numpy as np
g = collfuse.Graph("dp", world_size=2)
g.input("x", "float32", (3,))
g.output("y", g.all_reduce("x"))
out = g.compile().run([{"x": np.ones(3, np.float32)}, {"x": np.full(3, 2, np.float32)}])
print(out[1]["y"].tolist())' 2>&1) || true
  [ "$out" = "[3.0, 3.0, 3.0]" ] || fail "python over ./libcollfuse.so (a link): $out"
  rm "$tmp/libcollfuse.so"
fi

# a driver alone: what needs no kernel works, what does fails clearly
cp "$cf" "$tmp/collfuse"
"$tmp/collfuse" compile "$g" -o "$tmp/f.xml" 2>"$tmp/err" || fail "lone compile: $(head -3 "$tmp/err")"
lone() { # lone WHAT ARGS...: exit 1 and a message naming the module and why
  what=$1
  shift
  rc=0
  # (in $tmp: a build tree's driver also looks in the working directory, an
  # empty entry of the run path its libraries give it)
  (cd "$tmp" && COLLFUSE_CACHE=off "$tmp/collfuse" "$@") >/dev/null 2>"$tmp/err" || rc=$?
  if [ "$rc" -ne 1 ]; then
    fail "lone $*: exit $rc, not 1: $(head -3 "$tmp/err")"
  elif ! grep -q "cannot load the LLVM code generator collfuse-codegen.so.*$tmp/collfuse-codegen.so: $what" "$tmp/err"; then
    fail "lone $*: no '$what' for $tmp/collfuse-codegen.so: $(head -3 "$tmp/err")"
  fi
}
lone "not found" run "$g" --iters 1
lone "not found" compile "$g" --emit-llvm "$tmp/k.ll"
# ... but with a warm cache it runs: nothing is compiled
(cd "$tmp" && COLLFUSE_CACHE=$tmp/kc "$tmp/collfuse" run "$g" --iters 1 --verify) >/dev/null 2>"$tmp/err" ||
  fail "a lone driver with a warm cache: $(head -3 "$tmp/err")"
# another build's module beside it is refused
printf 'const unsigned long long cf_codegen_llvm_ops[8] = {1};\n' >"$tmp/fake.c"
if ${CC:-cc} -shared -fPIC -o "$tmp/collfuse-codegen.so" "$tmp/fake.c" 2>"$tmp/err"; then
  lone "from another build of collfuse" run "$g" --iters 1
else
  fail "cannot build a stand-in module: $(head -3 "$tmp/err")"
fi
[ "$fails" -eq 0 ] || exit 1
echo "codegen_module: libLLVM loaded by run only; a missing or foreign module is refused"
