#!/bin/sh
# buildtree.sh BUILD_DIR SRCDIR: the build tree used as a package without
# installing it. examples/embed is configured on its own with
# CMAKE_PREFIX_PATH=BUILD_DIR (find_package(collfuse) must take the build
# tree's collfuseConfig.cmake and exported collfuse::collfuse) and compiled
# with `PKG_CONFIG_PATH=BUILD_DIR pkg-config --cflags --libs collfuse` (which
# must take collfuse-uninstalled.pc: the source headers, the build's
# library); both builds run.
set -eu
BUILD=$(cd "$1" && pwd)
SRC=$(cd "$2" && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT INT TERM
fail() { echo "buildtree.sh: $*" >&2; exit 1; }

# find_package(collfuse) from the build tree
cmake -S "$SRC/examples/embed" -B "$tmp/ebuild" -DCMAKE_PREFIX_PATH="$BUILD" \
  ${CF_CONSUMER_FLAGS:+-DCMAKE_C_FLAGS="$CF_CONSUMER_FLAGS"} \
  ${CF_CONSUMER_FLAGS:+-DCMAKE_EXE_LINKER_FLAGS="$CF_CONSUMER_FLAGS"} >"$tmp/log" 2>&1 ||
  fail "examples/embed: find_package(collfuse) in the build tree failed: $(cat "$tmp/log")"
dir=$(sed -n 's/^collfuse_DIR:PATH=//p' "$tmp/ebuild/CMakeCache.txt")
[ "$dir" = "$BUILD" ] || fail "find_package(collfuse) took '$dir', not the build tree $BUILD"
cmake --build "$tmp/ebuild" >"$tmp/log" 2>&1 || fail "examples/embed (CMake) build failed: $(cat "$tmp/log")"
# (CMake's build RPATH finds the library: no LD_LIBRARY_PATH)
out=$(env -u LD_LIBRARY_PATH "$tmp/ebuild/collfuse_embed" 2>&1) || fail "examples/embed (CMake) failed: $out"
echo "$out" | grep -q "^ok: " || fail "examples/embed (CMake) printed: $out"

# pkg-config: collfuse-uninstalled.pc
flags=$(PKG_CONFIG_PATH="$BUILD" pkg-config --cflags --libs collfuse) ||
  fail "PKG_CONFIG_PATH=build pkg-config collfuse failed"
case " $flags " in
  *" -I$SRC/include "*"-L$BUILD "*) ;;
  *) fail "pkg-config collfuse did not take collfuse-uninstalled.pc: $flags" ;;
esac
[ "$(PKG_CONFIG_PATH="$BUILD" pkg-config --modversion collfuse)" = \
  "$(sed -n 's/^Version: //p' "$BUILD/collfuse.pc")" ] || fail "collfuse-uninstalled.pc: wrong version"
# shellcheck disable=SC2086
cc ${CF_CONSUMER_FLAGS:-} -o "$tmp/pc_embed" "$SRC/examples/embed/embed.c" $flags ||
  fail "examples/embed (pkg-config) build failed"
out=$(LD_LIBRARY_PATH="$BUILD" "$tmp/pc_embed" 2>&1) || fail "examples/embed (pkg-config) failed: $out"
echo "$out" | grep -q "^ok: " || fail "examples/embed (pkg-config) printed: $out"
echo "buildtree.sh: ok"
