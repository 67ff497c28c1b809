#!/usr/bin/env bash
# make demo: check and compile an example graph, print its JSON report, and
# draw the result as DOT and SVG under BUILD/demo/.
set -euo pipefail
BUILD=${1:-build}
CF="$BUILD/collfuse"
OUT="$BUILD/demo"
mkdir -p "$OUT"
ex=examples/dp_gradients.xml

echo "\$ collfuse check examples/*.xml"
"$CF" check examples/*.xml
echo
echo "\$ collfuse compile $ex -o $OUT/dp_gradients.fused.xml --dot $OUT/dp_gradients.svg --json"
"$CF" compile "$ex" -o "$OUT/dp_gradients.fused.xml" --dot "$OUT/dp_gradients.svg" --json
"$CF" dot "$OUT/dp_gradients.fused.xml" -o "$OUT/dp_gradients.dot"
echo
echo "\$ collfuse run $ex --verify --iters 5 --warmup 1"
"$CF" run "$ex" --verify --iters 5 --warmup 1
echo "\$ collfuse run examples/tp_mlp.xml --verify --deterministic --save-outputs $OUT/tp_mlp.out"
"$CF" run examples/tp_mlp.xml --verify --deterministic --save-outputs "$OUT/tp_mlp.out"
"$CF" dot examples/tp_mlp.xml -o "$OUT/tp_mlp.svg"
"$CF" dot examples/quant_mmrs.xml -o "$OUT/quant_mmrs.svg"
echo
echo "wrote:"
ls -1 "$OUT" | sed "s|^|  $OUT/|"
