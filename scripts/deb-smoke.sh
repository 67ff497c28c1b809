#!/usr/bin/env bash
# deb-smoke.sh [BUILD_DIR]: `make deb`, then install the package with apt-get
# as a user would, run the README's tour commands with /usr/bin/collfuse,
# use the library through pkg-config and the Python package through Debian's
# python3 from another directory, and remove the package again, checking
# that every file it installed is gone. Needs root and changes the system:
# .ci/run runs it only in CI (a throwaway machine). Refuses to run when a
# collfuse package is already installed.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build-deb}
fail() { echo "deb-smoke: $*" >&2; exit 1; }
[ "$(id -u)" -eq 0 ] || fail "needs root (it installs and removes the collfuse package)"
if dpkg-query -W -f='${Status}' collfuse 2>/dev/null | grep -q 'install ok installed'; then
  fail "a collfuse package is installed already; remove it first (apt-get remove collfuse)"
fi

make deb DEB_BUILD="$BUILD"
version=$(sed -n 's/^set(CPACK_PACKAGE_VERSION "\(.*\)")$/\1/p' "$BUILD/CPackConfig.cmake")
deb="$BUILD/collfuse_${version}_$(dpkg --print-architecture).deb"
[ -f "$deb" ] || fail "make deb made no $deb"
echo "== apt-get install ./$deb"
export DEBIAN_FRONTEND=noninteractive
apt-get install -y -qq "./$deb" >/dev/null
trap 'apt-get remove -y -qq collfuse >/dev/null 2>&1 || true' EXIT
files=$(dpkg -L collfuse)
tmp=$(mktemp -d)

run() { echo "\$ $*"; "$@"; }
echo "== the tour with /usr/bin/collfuse"
[ "$(command -v collfuse)" = /usr/bin/collfuse ] || fail "collfuse on PATH is $(command -v collfuse), not /usr/bin/collfuse"
out=$(run collfuse --version) && echo "$out"
[ "$(echo "$out" | sed -n 2p)" = "collfuse $version" ] || fail "collfuse --version: $out"
out=$(run collfuse check examples/dp_gradients.xml examples/graphml/resnet50.dp8.graphml) && echo "$out"
echo "$out" | grep -qx 'examples/graphml/resnet50.dp8.graphml: ok: 483 nodes, 161 collectives (AllReduce 161), 102228128 bytes communicated (97.5 MiB)' ||
  fail "collfuse check printed: $out"
run collfuse check examples/quant_mmrs.xml --target atlas-a2
out=$(run collfuse compile examples/tp_block.xml -o "$tmp/tp.fused.xml" --dot "$tmp/tp.svg" --json) && echo "$out"
echo "$out" | grep -q '^{"graph":"tp_block","nodes":7,"collectives_before":2,"collectives_after":2,' ||
  fail "collfuse compile --json printed: $out"
run collfuse check "$tmp/tp.fused.xml"
out=$(run collfuse compile examples/dp_gradients.xml --explain -o "$tmp/dp.fused.xml") && echo "$out" | head -n 3
echo "$out" | grep -qx "explain: AllReduce 'ar_emb' stays alone: fusion=0" || fail "collfuse compile --explain printed: $out"
out=$(run collfuse run examples/dp_gradients.xml --verify --iters 2 --warmup 1) && echo "$out"
echo "$out" | grep -q '; verified (max rel err' || fail "collfuse run --verify printed: $out"

echo "== pkg-config and the Python package"
[ "$(pkg-config --modversion collfuse)" = "$version" ] || fail "pkg-config --modversion collfuse: $(pkg-config --modversion collfuse)"
out=$(cd "$tmp" && env -u COLLFUSE_LIBRARY -u PYTHONPATH /usr/bin/python3 -c '
import collfuse, numpy as np
g = collfuse.Graph("dp", world_size=2)
g.input("x", "float32", (3,))
g.output("y", g.all_reduce("x"))
out = g.compile().run([{"x": np.ones(3, np.float32)}, {"x": np.full(3, 2, np.float32)}])
print(collfuse.__version__, collfuse.__file__, out[1]["y"].tolist())')
echo "$out"
case "$out" in
  "$version /usr/lib/"*"/collfuse/__init__.py [3.0, 3.0, 3.0]") ;;
  *) fail "python3 -c 'import collfuse' from $tmp printed: $out" ;;
esac

echo "== apt-get remove collfuse"
apt-get remove -y -qq collfuse >/dev/null
trap - EXIT
[ ! -e /usr/bin/collfuse ] || fail "/usr/bin/collfuse is still there after apt-get remove"
left=$(for f in $files; do [ -d "$f" ] || [ ! -e "$f" ] || echo "$f"; done)
[ -z "$left" ] || fail "left after apt-get remove: $left"
pydir=$(echo "$files" | sed -n 's|/collfuse/__init__\.py$||p')
[ ! -e "$pydir/collfuse" ] || fail "left after apt-get remove: $(find "$pydir/collfuse")"
rm -rf "$tmp"
echo "deb-smoke: ok: $deb installed, ran and removed"
