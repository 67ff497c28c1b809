#!/usr/bin/env bash
# fuzz/run.sh BUILD_DIR [SECONDS] [TARGET...]
#
# Runs the libFuzzer targets built in BUILD_DIR (cmake -DCOLLFUSE_FUZZ=ON
# with clang, `cmake --build BUILD_DIR --target fuzz`): first every committed
# regression input of fuzz/corpus/<format>/ once, then each target for
# SECONDS (default 60; 0 runs the corpora only), FUZZ_JOBS targets at a
# time (default 1; each target is one process: give it the cores, e.g.
# FUZZ_JOBS=$(nproc), and every target still fuzzes SECONDS). New inputs the
# fuzzer finds go to a scratch corpus, never into the tree. Exits 1 after a
# crash, sanitizer report, leak or timeout, printing the input that caused it
# (save it under fuzz/corpus/<format>/ once fixed); FUZZ_ARTIFACTS=DIR keeps
# such inputs in DIR as well.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
build=${1:?usage: fuzz/run.sh BUILD_DIR [SECONDS] [TARGET...]}
secs=${2:-60}
shift $(($# >= 2 ? 2 : $#))
targets=("$@")
[ ${#targets[@]} -eq 0 ] && targets=(xml graphml hlo stablehlo pbtxt)

work=$(mktemp -d "${TMPDIR:-/tmp}/collfuse-fuzz.XXXXXX")
trap 'rm -rf "$work"' EXIT

# Limits that make an input whose cost is not linear in its size fail: inputs
# up to 256 KiB (enough for thousands of attributes, nodes or groups), and no
# run over 10 s or 1 GiB. The costliest inputs a reader accepts at that size
# (HLO calls and tuples expanded up to their work budget, round trip
# included) take about 3.5 s and 500 MiB in this build; a quadratic reader
# needs minutes and gigabytes. The round trip writes no files; keep
# libFuzzer's own output short.
common=(-timeout=10 -rss_limit_mb=1024 -max_len=262144 -print_final_stats=0)
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1}

report() {
  local t=$1 log=$2
  echo "fuzz_$t FAILED; the last lines of its log:" >&2
  tail -n 40 "$log" >&2
  for a in "$work/$t"-crash-* "$work/$t"-leak-* "$work/$t"-timeout-* "$work/$t"-oom-*; do
    [ -e "$a" ] || continue
    [ -n "${FUZZ_ARTIFACTS:-}" ] && mkdir -p "$FUZZ_ARTIFACTS" && cp "$a" "$FUZZ_ARTIFACTS/"
    echo "--- input $a ($(wc -c <"$a") bytes), base64:" >&2
    base64 "$a" | head -n 40 >&2
  done
  exit 1
}

# fuzz_target T: the corpus of T once, then T for $secs seconds
fuzz_target() {
  local t=$1
  bin=$build/fuzz/fuzz_$t
  corpus=$here/corpus/$t
  [ -x "$bin" ] || { echo "fuzz/run.sh: no $bin (build with --target fuzz)" >&2; exit 2; }
  dict=()
  case $t in
    xml | graphml) dict=(-dict="$here/xml.dict") ;;
    *) dict=(-dict="$here/$t.dict") ;;
  esac
  n=$(find "$corpus" -type f | wc -l)
  echo "== fuzz_$t: $n regression inputs"
  log=$work/$t-regress.log
  "$bin" "${common[@]}" -runs=0 -artifact_prefix="$work/$t-" "$corpus" >"$log" 2>&1 || report "$t" "$log"
  [ "$secs" -gt 0 ] || return 0
  echo "== fuzz_$t: ${secs} s"
  mkdir -p "$work/$t-new"
  log=$work/$t-fuzz.log
  "$bin" "${common[@]}" "${dict[@]}" -max_total_time="$secs" -artifact_prefix="$work/$t-" \
    "$work/$t-new" "$corpus" >"$log" 2>&1 || report "$t" "$log"
  grep -E '^#[0-9]+.*DONE' "$log" | tail -n 1 || true
}

# up to FUZZ_JOBS targets at once, each printing when it is done
jobs_max=${FUZZ_JOBS:-1}
[[ $jobs_max =~ ^[1-9][0-9]*$ ]] || { echo "fuzz/run.sh: FUZZ_JOBS is '$jobs_max'" >&2; exit 2; }
failed=0
running=0
for t in "${targets[@]}"; do
  if [ "$running" -ge "$jobs_max" ]; then
    wait -n || failed=1
    running=$((running - 1))
  fi
  # (its output whole when it ends, so two targets' lines never mix)
  (
    if (fuzz_target "$t") >"$work/$t.out" 2>&1; then rc=0; else rc=$?; fi
    cat "$work/$t.out"
    exit "$rc"
  ) &
  running=$((running + 1))
done
while [ "$running" -gt 0 ]; do
  wait -n || failed=1
  running=$((running - 1))
done
[ "$failed" -eq 0 ] || exit 1
echo "fuzz: all targets passed"
