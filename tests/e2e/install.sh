#!/bin/sh
# install.sh BUILD_DIR SRCDIR: `cmake --install` into a temporary prefix, then
# build a small application against it twice, with find_package(collfuse) and
# with pkg-config, and run both on an example graph.
set -eu
BUILD=$1
SRC=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT INT TERM
fail() { echo "install.sh: $*" >&2; exit 1; }

cmake --install "$BUILD" --prefix "$tmp/prefix" >/dev/null || fail "cmake --install failed"
for f in bin/collfuse include/collfuse/collfuse.h share/collfuse/collfuse-graph.xsd \
  share/man/man1/collfuse.1 share/bash-completion/completions/collfuse; do
  [ -e "$tmp/prefix/$f" ] || fail "missing $f after install"
done
lib=$(ls -d "$tmp"/prefix/lib*/ | head -n 1)
[ -e "$lib/pkgconfig/collfuse.pc" ] || fail "missing collfuse.pc"
[ -e "$lib/cmake/collfuse/collfuseConfig.cmake" ] || fail "missing collfuseConfig.cmake"
ls "$lib"/libcollfuse.so* >/dev/null 2>&1 || fail "missing libcollfuse.so"

# the installed driver runs, and finds the LLVM module (codegen/load.c) from
# bin/ in the library directory of this prefix, not the configured one
LD_LIBRARY_PATH="$lib" "$tmp/prefix/bin/collfuse" --version | grep -q "^collfuse " ||
  fail "installed driver does not run"
[ -e "$lib/collfuse/collfuse-codegen.so" ] || fail "missing collfuse/collfuse-codegen.so in $lib"
LD_LIBRARY_PATH="$lib" "$tmp/prefix/bin/collfuse" run "$SRC/examples/tp_block.xml" --iters 1 \
  >/dev/null 2>"$tmp/err" || fail "installed driver cannot run a graph: $(head -3 "$tmp/err")"

# find_package(collfuse) + collfuse::collfuse
cmake -S "$SRC/tests/e2e/consumer" -B "$tmp/cbuild" -DCMAKE_PREFIX_PATH="$tmp/prefix" \
  ${CF_CONSUMER_FLAGS:+-DCMAKE_C_FLAGS="$CF_CONSUMER_FLAGS"} \
  ${CF_CONSUMER_FLAGS:+-DCMAKE_EXE_LINKER_FLAGS="$CF_CONSUMER_FLAGS"} >/dev/null ||
  fail "find_package(collfuse) failed"
cmake --build "$tmp/cbuild" >/dev/null || fail "consumer build (CMake) failed"
out=$(LD_LIBRARY_PATH="$lib" "$tmp/cbuild/consumer" "$SRC/examples/tp_block.xml") ||
  fail "consumer (CMake) failed"
echo "$out" | grep -q ": 8 nodes" || fail "consumer (CMake) printed: $out"

# pkg-config --cflags --libs collfuse
flags=$(PKG_CONFIG_PATH="$lib/pkgconfig" pkg-config --cflags --libs collfuse) ||
  fail "pkg-config collfuse failed"
cc ${CF_CONSUMER_FLAGS:-} -o "$tmp/pc_consumer" "$SRC/tests/e2e/consumer/main.c" $flags ||
  fail "consumer build (pkg-config) failed"
out=$(LD_LIBRARY_PATH="$lib" "$tmp/pc_consumer" "$SRC/examples/tp_block.xml") ||
  fail "consumer (pkg-config) failed"
echo "$out" | grep -q ": 8 nodes" || fail "consumer (pkg-config) printed: $out"

# examples/embed (the C API end to end) builds against the install and runs
cmake -S "$SRC/examples/embed" -B "$tmp/ebuild" -DCMAKE_PREFIX_PATH="$tmp/prefix" \
  ${CF_CONSUMER_FLAGS:+-DCMAKE_C_FLAGS="$CF_CONSUMER_FLAGS"} \
  ${CF_CONSUMER_FLAGS:+-DCMAKE_EXE_LINKER_FLAGS="$CF_CONSUMER_FLAGS"} >/dev/null ||
  fail "examples/embed: find_package(collfuse) failed"
cmake --build "$tmp/ebuild" >/dev/null || fail "examples/embed: build against the install failed"
out=$(LD_LIBRARY_PATH="$lib" "$tmp/ebuild/collfuse_embed") || fail "examples/embed failed: $out"
echo "$out" | grep -q "^ok: " || fail "examples/embed printed: $out"

# The Python package goes where the build's interpreter (COLLFUSE_PYTHON)
# imports from for the configured prefix: cmake/python_dir.py's answer for
# /usr and /usr/local is on that interpreter's sys.path (for Debian's python3:
# lib/python3/dist-packages and lib/python3.X/dist-packages), and the install
# used the answer for the build's prefix.
cache() { sed -n "s/^$1:[A-Z]*=//p" "$BUILD/CMakeCache.txt"; }
python=$(cache COLLFUSE_PYTHON)
pydir=$(cache COLLFUSE_PYTHON_DIR)
configured=$(cache CMAKE_INSTALL_PREFIX)
[ -n "$python" ] && [ -n "$pydir" ] || fail "COLLFUSE_PYTHON or COLLFUSE_PYTHON_DIR missing from the cache"
path=$("$python" -c 'import sys; print("\n".join(sys.path))')
for prefix in /usr /usr/local "$configured"; do
  dir=$("$python" "$SRC/cmake/python_dir.py" "$prefix") || fail "cmake/python_dir.py $prefix failed"
  # (unless COLLFUSE_PYTHON_DIR was set by hand)
  [ "$prefix" = "$configured" ] && [ "$pydir" = "$(cache cf_python_dir_auto)" ] && [ "$dir" != "$pydir" ] &&
    fail "COLLFUSE_PYTHON_DIR is $pydir, $python says $dir for $prefix"
  case "$prefix" in /usr | /usr/local) ;; *) continue ;; esac
  echo "$path" | grep -qx "$prefix/$dir" || fail "$python does not import from $prefix/$dir: $path"
done
if "$python" -c 'import sysconfig, sys; sys.exit("deb_system" not in sysconfig.get_scheme_names())'; then
  v=$("$python" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
  [ "$("$python" "$SRC/cmake/python_dir.py" /usr)" = lib/python3/dist-packages ] ||
    fail "Debian's python3: /usr should give lib/python3/dist-packages"
  [ "$("$python" "$SRC/cmake/python_dir.py" /usr/local)" = "lib/python$v/dist-packages" ] ||
    fail "Debian's python3: /usr/local should give lib/python$v/dist-packages"
fi

# the Python package is installed there and finds the installed library by
# itself (not in sanitizer builds: an ASan library cannot load into python3)
py="$tmp/prefix/$pydir"
for f in __init__.py _lib.py _version.py fx.py; do
  [ -e "$py/collfuse/$f" ] || fail "missing $pydir/collfuse/$f"
done
if [ -z "${CF_CONSUMER_FLAGS:-}" ] && /usr/bin/python3 -c "import numpy" 2>/dev/null; then
  out=$(cd "$tmp" && env -u COLLFUSE_LIBRARY PYTHONPATH="$py" /usr/bin/python3 -c '
import collfuse, numpy as np
g = collfuse.Graph("dp", world_size=2)
g.input("x", "float32", (3,))
g.output("y", g.all_reduce("x"))
out = g.compile().run([{"x": np.ones(3, np.float32)}, {"x": np.full(3, 2, np.float32)}])
print(collfuse.__file__, collfuse._lib.lib._name, out[1]["y"].tolist())') || fail "installed Python package failed: $out"
  case "$out" in
    "$py/collfuse/__init__.py $lib"*"[3.0, 3.0, 3.0]") ;;
    *) fail "installed Python package printed: $out" ;;
  esac
fi
echo "install.sh: ok"
