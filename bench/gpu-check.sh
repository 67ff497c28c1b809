#!/bin/bash
# bench/gpu-check.sh - the CUDA backend's whole check on a GPU machine, in
# one run of a few minutes (every step has a timeout; the whole stays under
# 570 s). Either with a build on that machine:
#
#   CF_BUILD=build bash bench/gpu-check.sh
#
# or, on a GPU machine without collfuse's build dependencies, with a bundle
# made on the build machine and copied there with the source tree:
#
#   sh bench/gpu-pack.sh                          # build machine: .gpu-bundle/bundle.tar.xz
#   bash bench/gpu-check.sh                       # GPU machine
#
# It unpacks the bundle (binaries + their shared libraries) if there is no
# CF_BUILD, then:
#   1. test_cuda on the GPU: every n-ary / accumulate / scale kernel (all
#      dtypes x reductions x arities) against the CPU backend with guard
#      bytes, views, whole graphs against the float64 reference, and
#      --deterministic equal to the CPU byte for byte;
#   2. `collfuse run --device cuda --verify` on every example at 2, 4 and 8
#      ranks (with a CPU run of each as the baseline: a graph whose groups do
#      not fit a rank count fails the same way on both), and the
#      --deterministic outputs of the GPU and the CPU compared byte for byte
#      (collectives run in place where the plan allows, as on the CPU);
#   3. `collfuse bench reduce --device cuda` (every dtype, sum and max, 2 and 8
#      sources, 256 MiB per buffer, against the copy rate of the same run),
#      and torch.sum / amax on the same shapes where PyTorch is there;
#   4. `collfuse bench allreduce --device cuda` (8 ranks on one GPU).
# Results go to $OUT (default gpu-out/ in the source tree): summary.txt,
# env.txt, test_cuda.log, run.tsv, run.log, bench_reduce.txt,
# torch_reduce.txt, bench_allreduce.txt. The summary is printed last.
set -u
src=$(cd "$(dirname "$0")/.." && pwd)
cd "$src"
OUT=${OUT:-$src/gpu-out}
mkdir -p "$OUT"
B=${CF_BUNDLE_DIR:-/tmp/collfuse-bundle}
T0=$(date +%s)
summary=$OUT/summary.txt
: > "$summary"
say() { echo "$*" | tee -a "$summary"; }
elapsed() { echo $(($(date +%s) - T0)); }
# every step checks the clock: the whole check ends within about 10 minutes
budget=${CF_CHECK_BUDGET:-500}
# a step's timeout: its own, cut to what is left before 570 s
tmo() {
  local left=$((570 - $(elapsed)))
  [ "$1" -lt "$left" ] && left=$1
  [ "$left" -lt 5 ] && left=5
  echo "$left"
}
late() {
  [ "$(elapsed)" -lt "$budget" ] && return 1
  say "== $1: skipped, $(elapsed) s of the ${budget} s budget spent"
}

# ---- unpack ----
bundle=$src/.gpu-bundle/bundle.tar.xz
if [ -n "${CF_BUILD:-}" ]; then
  CF_BUILD=$(cd "$CF_BUILD" && pwd) || { say "gpu-check: no build folder $CF_BUILD"; exit 2; }
  [ -x "$CF_BUILD/collfuse" ] && [ -x "$CF_BUILD/tests/test_cuda" ] ||
    { say "gpu-check: $CF_BUILD has no collfuse and tests/test_cuda (build it first)"; exit 2; }
elif [ ! -e "$B/bin/collfuse" ]; then
  [ -e "$bundle" ] || { say "gpu-check: no $bundle (run bench/gpu-pack.sh here and carry .gpu-bundle)"; exit 2; }
  mkdir -p "$B"
  if command -v xz >/dev/null 2>&1; then
    xz -dc "$bundle" | tar -x -C "$B"
  else
    python3 -c "import sys, tarfile; tarfile.open(sys.argv[1], 'r:xz').extractall(sys.argv[2])" "$bundle" "$B"
  fi || { say "gpu-check: cannot unpack $bundle"; exit 2; }
fi

# ---- the driver, cuBLAS, and how to start the binaries ----
drv=
for d in /usr/local/nvidia/lib64 /usr/local/nvidia/lib /usr/lib/x86_64-linux-gnu /usr/lib64 /usr/local/cuda/compat \
  $(ldconfig -p 2>/dev/null | awk '/libcuda\.so\.1 /{print $NF}' | xargs -r -n1 dirname); do
  if [ -e "$d/libcuda.so.1" ]; then drv=$d; break; fi
done
if [ -z "${CUBLAS_LIBRARY:-}" ]; then
  for f in $(python3 -c "import nvidia.cublas, os; print(os.path.join(list(nvidia.cublas.__path__)[0], 'lib'))" 2>/dev/null) \
    /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib; do
    c=$(ls "$f"/libcublas.so.1[0-9]* 2>/dev/null | sort -V | tail -1)
    if [ -n "$c" ]; then export CUBLAS_LIBRARY=$c; break; fi
  done
fi
export COLLFUSE_CACHE=/tmp/collfuse-cache XDG_CACHE_HOME=/tmp/collfuse-xdg
if [ -n "${CF_BUILD:-}" ]; then
  mode="the build in $CF_BUILD"
  libpath=${drv}${LD_LIBRARY_PATH:+${drv:+:}$LD_LIBRARY_PATH}
  X=(env ${libpath:+"LD_LIBRARY_PATH=$libpath"})
  CF=$CF_BUILD/collfuse
  TC=$CF_BUILD/tests/test_cuda
else
  libpath=$B/lib${drv:+:$drv}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  if LD_LIBRARY_PATH=$libpath "$B/bin/collfuse" --version >/dev/null 2>&1; then
    mode="the machine's loader, LD_LIBRARY_PATH=bundle/lib"
    X=(env "LD_LIBRARY_PATH=$libpath")
  else
    mode="the carried loader (this machine's glibc is older than the bundle's)"
    X=("$B/sys/ld-linux-x86-64.so.2" --library-path "$B/sys:$libpath")
  fi
  CF=$B/bin/collfuse
  TC=$B/bin/test_cuda
fi
quick=()
[ -n "${CF_CHECK_QUICK:-}" ] && quick=(--quick) # a dry run (e.g. with tests/mock_cuda.c), not a measurement

{
  echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem --format=csv 2>&1
  echo "libcuda.so.1: ${drv:-not found}"
  echo "CUBLAS_LIBRARY: ${CUBLAS_LIBRARY:-not found}"
  echo "started with: $mode"
  cat "$B/MANIFEST" 2>/dev/null | head -5
  "${X[@]}" "$CF" --version 2>&1
  python3 -c "import torch; print('torch', torch.__version__, torch.cuda.get_device_name(0))" 2>&1 | tail -1
} > "$OUT/env.txt"
say "== collfuse CUDA check: $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -1);" \
  "libcuda in ${drv:-none}; $mode"
say "   cuBLAS: ${CUBLAS_LIBRARY:-not found (MatMul on the host)}"

# ---- 1. test_cuda ----
timeout $(tmo 300) "${X[@]}" "$TC" > "$OUT/test_cuda.log" 2>&1
rc=$?
say "== 1. test_cuda: exit $rc after $(elapsed) s: $(grep -E '^\[  (PASSED|FAILED)  \]|^skipped' "$OUT/test_cuda.log" | tr '\n' ' ')"
grep -E "FAILED|ERROR|differs|guard" "$OUT/test_cuda.log" | head -20 | tee -a "$summary"

# ---- 2. collfuse run --device cuda --verify on the examples ----
printf "example\tranks\tcpu_rc\tcuda_rc\tverified\tmax_rel_err\tcpu_ms\tcuda_ms\tdet_equal\n" > "$OUT/run.tsv"
: > "$OUT/run.log"
field() { python3 -c "import json,sys; d=json.loads(sys.stdin.read() or '{}'); print(d.get('$1', '-'))" 2>/dev/null || echo -; }
pass=0 fail=0 skip=0
for f in examples/*.xml; do
  for n in 2 4 8; do
    late "run $f at $n ranks" && continue
    name=$(basename "$f" .xml)
    cj=$(timeout $(tmo 120) "${X[@]}" "$CF" run "$f" --ranks $n --verify --json --iters 3 --warmup 1 2>>"$OUT/run.log")
    crc=$?
    gj=$(timeout $(tmo 120) "${X[@]}" "$CF" run "$f" --ranks $n --device cuda --verify --json --iters 3 --warmup 1 \
      2>>"$OUT/run.log")
    grc=$?
    det=-
    if [ $crc -eq 0 ] && [ $grc -eq 0 ]; then
      rm -rf /tmp/cf-det-cpu /tmp/cf-det-cuda
      if timeout $(tmo 120) "${X[@]}" "$CF" run "$f" --ranks $n --deterministic --save-outputs /tmp/cf-det-cpu \
          >/dev/null 2>>"$OUT/run.log" &&
        timeout $(tmo 120) "${X[@]}" "$CF" run "$f" --ranks $n --deterministic --device cuda --save-outputs /tmp/cf-det-cuda \
          >/dev/null 2>>"$OUT/run.log" && diff -r /tmp/cf-det-cpu /tmp/cf-det-cuda >/dev/null; then
        det=yes
      else
        det=NO
      fi
    fi
    printf "%s\t%d\t%d\t%d\t%s\t%s\t%s\t%s\t%s\n" "$name" "$n" $crc $grc "$(echo "$gj" | field verified)" \
      "$(echo "$gj" | field max_rel_err)" "$(echo "$cj" | field time_ms_median)" "$(echo "$gj" | field time_ms_median)" \
      "$det" >> "$OUT/run.tsv"
    if [ $crc -ne 0 ] && [ $grc -eq $crc ]; then skip=$((skip + 1))
    elif [ $crc -eq 0 ] && [ $grc -eq 0 ] && [ "$det" = yes ]; then pass=$((pass + 1))
    else fail=$((fail + 1)); fi
  done
done
say "== 2. run --device cuda --verify: $pass passed (verified, deterministic outputs equal to the CPU's), $fail failed," \
  "$skip not runnable at that rank count on the CPU either; after $(elapsed) s"
column -t -s "$(printf '\t')" "$OUT/run.tsv" | tee -a "$summary"

# ---- 3. bench reduce --device cuda, and torch.sum ----
late "bench reduce" ||
timeout $(tmo 240) "${X[@]}" "$CF" bench reduce --device cuda "${quick[@]}" > "$OUT/bench_reduce.txt" 2>&1
say "== 3. bench reduce --device cuda: exit $? after $(elapsed) s"
cat "$OUT/bench_reduce.txt" 2>/dev/null | tee -a "$summary"
late "torch peer" ||
timeout $(tmo 120) python3 - ${CF_CHECK_QUICK:+quick} > "$OUT/torch_reduce.txt" 2>&1 <<'EOF'
# torch.sum / amax over K stacked buffers of 256 MiB, the peer of bench reduce
import sys, torch
torch.manual_seed(0)
MiB = 1 << 20
size = (1 if sys.argv[1:] == ["quick"] else 256) * MiB
def ms(fn, reps=10, samples=7):
    fn(); torch.cuda.synchronize()
    t = []
    for _ in range(samples):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        for _ in range(reps): fn()
        b.record(); b.synchronize()
        t.append(a.elapsed_time(b) / reps)
    t.sort(); return t[len(t) // 2]
src = torch.empty(size, dtype=torch.uint8, device="cuda"); dst = torch.empty_like(src)
copy = 2 * size / ms(lambda: dst.copy_(src)) / 1e6
print(f"torch {torch.__version__} on {torch.cuda.get_device_name(0)}: GB/s = (K+1)*256 MiB per call (1e9 B/s); copy {copy:.1f} GB/s")
print(f"{'dtype':10s} {'op':4s} {'K':>2s} | {'torch':>8s} {'/copy':>6s}")
for dt in [torch.float32, torch.float16, torch.bfloat16, torch.float64, torch.int8, torch.uint8, torch.int16, torch.int32, torch.int64]:
    n = size // torch.tensor([], dtype=dt).element_size()
    for op in ["sum", "max"]:
        for k in [2, 8]:
            if dt.is_floating_point: x = torch.randn(k, n, device="cuda").to(dt)
            else: x = torch.randint(-100, 100, (k, n), device="cuda").to(dt)
            out = torch.empty(n, dtype=dt, device="cuda")
            f = (lambda: torch.sum(x, 0, dtype=dt, out=out)) if op == "sum" else (lambda: torch.amax(x, 0, out=out))
            g = (k + 1) * size / ms(f) / 1e6
            print(f"{str(dt)[6:]:10s} {op:4s} {k:2d} | {g:8.1f} {g / copy:6.3f}", flush=True)
            del x, out
            torch.cuda.empty_cache()
EOF
say "== 3b. torch.sum / amax peer: exit $?"
cat "$OUT/torch_reduce.txt" 2>/dev/null | tee -a "$summary"

# ---- 4. bench allreduce --device cuda ----
late "bench allreduce" ||
timeout $(tmo 240) "${X[@]}" "$CF" bench allreduce --device cuda --ranks 8 "${quick[@]}" > "$OUT/bench_allreduce.txt" 2>&1
say "== 4. bench allreduce --device cuda --ranks 8: exit $? after $(elapsed) s"
cat "$OUT/bench_allreduce.txt" 2>/dev/null | tee -a "$summary"
say "== done in $(elapsed) s; files in $OUT"
