#!/bin/sh
# plot.sh COLLFUSE SRC: bench/plot.py draws a run's trace, a bench fusion
# --json and a bench allreduce --json as SVG and PNG files (Debian's
# python3-matplotlib; skipped, exit 77, without it), and refuses what it
# cannot draw with a message and a non-zero exit.
set -u
cf=$1
src=$2
py=/usr/bin/python3
"$py" -c 'import matplotlib' 2>/dev/null || { echo "plot.sh: no matplotlib: skipped"; exit 77; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT INT TERM
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
# a drawn file: the format's magic at its start, and more than a header
drawn() {
  case $1 in
  *.png) head -c 8 "$1" | od -An -c | grep -q 'P   N   G' ;;
  *.svg) grep -q '<svg' "$1" ;;
  esac || { fail "$1 is not a drawing"; return; }
  [ "$(wc -c <"$1")" -gt 2000 ] || fail "$1 is nearly empty"
}
"$cf" run "$src/examples/fused_buckets.xml" --warmup 1 --iters 2 --trace "$work/t.json" >/dev/null || fail "run --trace"
"$cf" bench fusion "$src/examples/fused_buckets.xml" --quick --json >"$work/f.json" 2>/dev/null || fail "bench fusion"
"$cf" bench allreduce --quick --no-mpi --json >"$work/a.json" 2>/dev/null || fail "bench allreduce"
for f in t f a; do
  for ext in svg png; do
    "$py" "$src/bench/plot.py" "$work/$f.json" -o "$work/$f.$ext" >"$work/out" 2>&1 || fail "plot.py $f.json -o $f.$ext: $(cat "$work/out")"
    drawn "$work/$f.$ext"
  done
done
"$py" "$src/bench/plot.py" "$work/t.json" --all -o "$work/all.svg" >/dev/null || fail "plot.py --all"
drawn "$work/all.svg"
# what it cannot draw
echo '{"bench":"reduce"}' >"$work/r.json"
"$py" "$src/bench/plot.py" "$work/r.json" -o "$work/r.svg" 2>"$work/err" && fail "a bench reduce --json was drawn"
grep -q "neither a trace nor bench allreduce/fusion" "$work/err" || fail "no reason: $(cat "$work/err")"
"$py" "$src/bench/plot.py" "$work/t.json" -o "$work/t.pdf" 2>"$work/err" && fail "a .pdf was written"
grep -q "the output is .svg or .png" "$work/err" || fail "no reason: $(cat "$work/err")"
[ "$fails" -eq 0 ] || { echo "plot.sh: $fails failure(s)"; exit 1; }
echo "plot.sh: all passed"
