#!/bin/sh
# python_venv.sh LIBRARY SRC: `pip install` of python/ into a fresh virtual
# environment (Debian's python3 -m venv --system-site-packages, offline, with
# Debian's setuptools), then docs/api.md's Python example run by the venv's
# python from another directory: once with COLLFUSE_LIBRARY, once with the
# library and its LLVM module in the venv's lib/ (the package's
# installed-prefix lookup).
set -eu
LIB=$1
SRC=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT INT TERM
fail() { echo "python_venv.sh: $*" >&2; exit 1; }
/usr/bin/python3 -c 'import ensurepip, setuptools' 2>/dev/null ||
  fail "Debian's python3 lacks venv or setuptools: install python3-venv python3-setuptools (scripts/install-deps)"

# pip builds in the directory it is given: a copy keeps the source tree clean
cp -r "$SRC/python" "$tmp/python"
rm -rf "$tmp/python/collfuse/__pycache__"
/usr/bin/python3 -m venv --system-site-packages "$tmp/venv" || fail "python3 -m venv failed"
out=$("$tmp/venv/bin/pip" install --no-index --no-build-isolation "$tmp/python" 2>&1) ||
  fail "pip install failed: $out"
echo "$out" | tail -n 1
"$tmp/venv/bin/pip" show collfuse | grep -q "^Location: $tmp/venv/lib/python3[.0-9]*/site-packages$" ||
  fail "collfuse not installed in the venv: $("$tmp/venv/bin/pip" show collfuse 2>&1)"

# docs/api.md's Python example: the first ```python block after "## Python"
awk '/^## Python/ { p = 1 } p && /^```python/ { b = 1; next } b && /^```/ { exit } b' \
  "$SRC/docs/api.md" > "$tmp/example.py"
grep -q "import collfuse" "$tmp/example.py" || fail "no Python example found in docs/api.md"
mkdir "$tmp/elsewhere"
cd "$tmp/elsewhere"
out=$(env -u PYTHONPATH COLLFUSE_LIBRARY="$LIB" "$tmp/venv/bin/python" "$tmp/example.py" 2>&1) ||
  fail "docs/api.md's example in the venv failed: $out"
echo "$out" | grep -q "'members'" || fail "docs/api.md's example printed: $out"

# the library and its LLVM module, which it loads from beside itself
cp "$LIB" "$tmp/venv/lib/libcollfuse.so"
cp "$(dirname "$LIB")/collfuse-codegen.so" "$tmp/venv/lib/"
out=$(env -u PYTHONPATH -u COLLFUSE_LIBRARY -u LD_LIBRARY_PATH "$tmp/venv/bin/python" -c '
import collfuse, runpy
runpy.run_path("'"$tmp/example.py"'")
print(collfuse.__file__, collfuse._lib.lib._name)' 2>&1) || fail "the venv's lib/ lookup failed: $out"
case "$out" in
  *"$tmp/venv/lib/python3"*"/site-packages/collfuse/__init__.py $tmp/venv/lib/libcollfuse.so") ;;
  *) fail "the venv's lib/ lookup printed: $out" ;;
esac
echo "python_venv.sh: ok"
