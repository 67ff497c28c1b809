#!/bin/sh
# deb.sh BUILD_DIR SRCDIR VERSION: build the Debian package with cpack (as
# `make deb` does, into a temporary directory), check its control fields and
# that it holds exactly what `cmake --install` installs, under /usr, then
# extract it with dpkg-deb -x and run what it holds: the driver on an
# example, the version everywhere it shows, and `import collfuse` from the
# extracted Python directory with the library found by the package itself.
# Exits 77 (skipped) without cpack, dpkg-deb, dpkg-shlibdeps or file.
set -eu
BUILD=$1
SRC=$2
VERSION=$3
for t in cpack dpkg-deb dpkg-shlibdeps file readelf; do
  command -v "$t" >/dev/null 2>&1 || { echo "deb.sh: skipped: no $t (scripts/install-deps installs it)"; exit 77; }
done
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT INT TERM
fail() { echo "deb.sh: $*" >&2; exit 1; }

arch=$(dpkg --print-architecture)
cpack --config "$BUILD/CPackConfig.cmake" -G DEB -B "$tmp/out" >"$tmp/cpack.log" 2>&1 ||
  { cat "$tmp/cpack.log" >&2; fail "cpack -G DEB failed"; }
deb="$tmp/out/collfuse_${VERSION}_${arch}.deb"
[ -f "$deb" ] || fail "no collfuse_${VERSION}_${arch}.deb; cpack made: $(ls "$tmp/out")"

# control fields
field() { dpkg-deb -f "$deb" "$1"; }
[ "$(field Package)" = collfuse ] || fail "Package: $(field Package)"
[ "$(field Version)" = "$VERSION" ] || fail "Version: $(field Version), expected $VERSION"
[ "$(field Architecture)" = "$arch" ] || fail "Architecture: $(field Architecture), expected $arch"
deps=", $(field Depends),"
for d in python3 python3-numpy 'libxml2 (>= *)' libllvm19 libgvc6 libcgraph6 libopenblas0 \
  'libcjson1 (>= *)' 'libopenmpi3 (>= *)' 'libssl3 (>= *)' 'libc6 (>= *)'; do
  case "$deps" in
    *", "$d","*) ;;
    *) fail "Depends lacks $d: $(field Depends)" ;;
  esac
done
dpkg-deb -I "$deb" shlibs | grep -qx "libcollfuse 0 collfuse (>= $VERSION)" ||
  fail "shlibs: $(dpkg-deb -I "$deb" shlibs)"

# the file list is what cmake --install installs, moved to /usr
cmake --install "$BUILD" --prefix "$tmp/inst" >/dev/null || fail "cmake --install failed"
(cd "$tmp/inst" && find . ! -type d | sed 's|^\./|./usr/|' | sort) >"$tmp/installed"
dpkg-deb -c "$deb" >"$tmp/contents" || fail "dpkg-deb -c failed"
awk '$1 !~ /^d/ { print $6 }' "$tmp/contents" | sort >"$tmp/packaged"
diff "$tmp/installed" "$tmp/packaged" >"$tmp/diff" ||
  fail "the package's files differ from cmake --install's (< installed only, > packaged only):
$(cat "$tmp/diff")"
lib=$(awk '$6 ~ /\/libcollfuse\.so$/ { print $6 }' "$tmp/contents")
[ -n "$lib" ] || fail "no libcollfuse.so in the package"
libdir=${lib%/libcollfuse.so}
for want in "$libdir/libcollfuse.so -> libcollfuse.so.0" "$libdir/libcollfuse.so.0 -> libcollfuse.so.$VERSION"; do
  grep -q -- " $want\$" "$tmp/contents" || fail "no version symlink '$want': $(grep libcollfuse "$tmp/contents")"
done
libdir=${libdir#.}
for f in ./usr/bin/collfuse ./usr/include/collfuse/collfuse.h ".$libdir/pkgconfig/collfuse.pc" \
  ".$libdir/cmake/collfuse/collfuseConfig.cmake" ".$libdir/cmake/collfuse/collfuseConfigVersion.cmake"; do
  grep -qx "$f" "$tmp/packaged" || fail "the package lacks $f"
done
initpy=$(grep '/collfuse/__init__\.py$' "$tmp/packaged") || fail "the package lacks the Python package"

# extracted: SONAME, no RPATH (ld.so finds the libraries as any package's)
x="$tmp/x"
dpkg-deb -x "$deb" "$x" || fail "dpkg-deb -x failed"
readelf -d "$x$libdir/libcollfuse.so.$VERSION" | grep -q 'Library soname: \[libcollfuse.so.0\]' ||
  fail "libcollfuse.so.$VERSION has no SONAME libcollfuse.so.0"
for f in "$x$libdir/libcollfuse.so.$VERSION" "$x/usr/bin/collfuse"; do
  if readelf -d "$f" | grep -Eq 'R(UN)?PATH'; then fail "$f has an RPATH: $(readelf -d "$f" | grep PATH)"; fi
done

# the version everywhere it shows
out=$(LD_LIBRARY_PATH="$x$libdir" "$x/usr/bin/collfuse" --version | head -n 1)
[ "$out" = "collfuse $VERSION" ] || fail "collfuse --version printed '$out', expected 'collfuse $VERSION'"
grep -qx "Version: $VERSION" "$x$libdir/pkgconfig/collfuse.pc" || fail "collfuse.pc's Version is not $VERSION"
grep -q "set(PACKAGE_VERSION \"$VERSION\")" "$x$libdir/cmake/collfuse/collfuseConfigVersion.cmake" ||
  fail "collfuseConfigVersion.cmake's PACKAGE_VERSION is not $VERSION"

# the driver runs on an example
out=$(LD_LIBRARY_PATH="$x$libdir" "$x/usr/bin/collfuse" check "$SRC/examples/dp_gradients.xml") ||
  fail "extracted collfuse check failed: $out"
[ "$out" = "$SRC/examples/dp_gradients.xml: ok: 30 nodes, 10 collectives (AllReduce 10), 8184836 bytes communicated (7.8 MiB)" ] ||
  fail "extracted collfuse check printed: $out"

# import collfuse from the extracted package, from another directory, with no
# COLLFUSE_LIBRARY: the package finds the extracted library by itself
if /usr/bin/python3 -c "import numpy" 2>/dev/null; then
  pydir="$x/${initpy#./}"
  pydir=${pydir%/collfuse/__init__.py}
  out=$(cd "$tmp" && env -u COLLFUSE_LIBRARY PYTHONPATH="$pydir" PYTHONDONTWRITEBYTECODE=1 /usr/bin/python3 -c '
import collfuse, numpy as np
g = collfuse.Graph("dp", world_size=2)
g.input("x", "float32", (3,))
g.output("y", g.all_reduce("x"))
out = g.compile().run([{"x": np.ones(3, np.float32)}, {"x": np.full(3, 2, np.float32)}])
print(collfuse.__version__, collfuse.version(), collfuse._lib.lib._name, out[1]["y"].tolist())') ||
    fail "import collfuse from the extracted package failed: $out"
  case "$out" in
    "$VERSION $VERSION $x$libdir/libcollfuse.so"*" [3.0, 3.0, 3.0]") ;;
    *) fail "the extracted Python package printed: $out" ;;
  esac
fi
echo "deb.sh: ok: $(basename "$deb")"
