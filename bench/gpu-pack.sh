#!/bin/sh
# bench/gpu-pack.sh - build here the bundle that bench/gpu-check.sh runs on a
# GPU machine which lacks collfuse's build dependencies (no Debian packages,
# perhaps no network).
#
#   sh bench/gpu-pack.sh            -> .gpu-bundle/bundle.tar.xz (git-ignored)
#
# The bundle is the collfuse driver, test_cuda and the mock driver, built
# here (Release), stripped, plus every shared library they load, found with
# ldd: LLVM 19 (the binary generates its PTX in memory, as it does for a
# user), libxml2 and ICU, graphviz, OpenBLAS, OpenMPI's libraries (linked,
# never initialized by the --device cuda paths), cJSON, cmocka, z3, ...
# Everything is one tar, xz -9: about 52 MiB (docs/executor.md, "Checking a
# GPU").
# glibc's own libraries and the C++ runtime (ld-linux, libc, libm,
# libpthread, libdl, librt, libstdc++, libgcc_s) go to sys/, apart: the
# check runs the binaries with the machine's loader and libraries from lib/
# when that works (a glibc at least as new as this one's), else through the
# carried loader with sys/ first. CUDA itself is never carried: libcuda.so.1
# comes with the machine's driver and cuBLAS with its toolkit or PyTorch.
set -eu
src=$(cd "$(dirname "$0")/.." && pwd)
build=${BUILD:-$src/build-gpu}
out=$src/.gpu-bundle
jobs=$(nproc 2>/dev/null || echo 2)

cmake -S "$src" -B "$build" -DCMAKE_BUILD_TYPE=Release -DCOLLFUSE_SANITIZE=OFF >/dev/null
cmake --build "$build" -j"$jobs" --target collfuse_cli test_cuda cf_mock_cuda

stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/bin" "$stage/lib" "$stage/sys"
cp "$build/collfuse" "$build/tests/test_cuda" "$build/tests/libcf_mock_cuda.so" "$stage/bin/"
strip --strip-unneeded "$stage/bin/"* 2>/dev/null || true

is_sys() {
  case "$1" in
  ld-linux*|libc.so.*|libm.so.*|libpthread.so.*|libdl.so.*|librt.so.*|libresolv.so.*|libutil.so.*|\
  libstdc++.so.*|libgcc_s.so.*|libmvec.so.*) return 0 ;;
  esac
  return 1
}

# every library the binaries load, under the name they ask for
libs=$(for b in "$stage/bin/collfuse" "$stage/bin/test_cuda"; do
  ldd "$b" | awk '$2 == "=>" && $3 ~ /^\// {print $3} $1 ~ /^\// {print $1}'
done | sort -u)
libc_dir=
for path in $libs; do
  name=$(basename "$path")
  case "$name" in libcuda.so*|libcublas*) continue ;; esac
  if is_sys "$name"; then
    cp -L "$path" "$stage/sys/$name"
    case "$name" in libc.so.*) libc_dir=$(dirname "$path") ;; esac
  else
    cp -L "$path" "$stage/lib/$name"
  fi
done
# what libcuda.so.1 and cuBLAS ask for besides: glibc's compatibility
# stubs, so that the carried loader never mixes two glibcs
for stub in libpthread.so.0 libdl.so.2 librt.so.1 libresolv.so.2 libutil.so.1; do
  [ -n "$libc_dir" ] && [ -e "$libc_dir/$stub" ] && [ ! -e "$stage/sys/$stub" ] && cp -L "$libc_dir/$stub" "$stage/sys/"
done
[ -e "$stage/sys/ld-linux-x86-64.so.2" ] || { echo "gpu-pack: no ld-linux-x86-64.so.2 among the libraries" >&2; exit 1; }

{
  echo "collfuse GPU bundle"
  echo "made: $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(uname -m), $(. /etc/os-release 2>/dev/null && echo "$PRETTY_NAME")"
  echo "commit: $(git -C "$src" rev-parse --short HEAD 2>/dev/null || echo unknown)$(git -C "$src" diff --quiet 2>/dev/null || echo ' (with local changes)')"
  echo "glibc: $(ldd --version | head -1)"
  (cd "$stage" && find bin lib sys -type f -exec ls -l {} + | awk '{printf "%10d %s\n", $5, $9}')
} > "$stage/MANIFEST"

mkdir -p "$out"
echo "gpu-pack: compressing $(du -sh "$stage" | cut -f1) (xz -9, a few minutes on 2 cores)..."
tar -C "$stage" -cf - MANIFEST bin lib sys | xz -T"$jobs" -9 > "$out/bundle.tar.xz.tmp"
mv "$out/bundle.tar.xz.tmp" "$out/bundle.tar.xz"
size=$(stat -c %s "$out/bundle.tar.xz")
echo "gpu-pack: $out/bundle.tar.xz, $((size / 1048576)) MiB"
