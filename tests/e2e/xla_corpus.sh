#!/bin/sh
# xla_corpus.sh COLLFUSE SRCDIR
#
# Peers' own HLO modules read: every module of tests/hlo/xla/ (transcribed
# from XLA's combiner tests, each naming its public source on its first
# line) passes `check` and `compile --json` (exit 0, one JSON object), as
# XLA's parser takes them: instructions wrapped over lines, both comment
# forms, shapes left out, replica_groups={} without a replica count.
# Prints one line per failure and exits 1 if any.
set -u

if [ $# -ne 2 ]; then
  echo "usage: xla_corpus.sh COLLFUSE SRCDIR" >&2
  exit 2
fi
cf=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
src=$(cd "$2" && pwd)

work=$(mktemp -d "${TMPDIR:-/tmp}/cf-xla.XXXXXX") || exit 2
trap 'rm -rf "$work"' EXIT
trap 'exit 130' INT TERM

. "$(dirname "$0")/lib.sh"

cd "$src/tests/hlo/xla" || exit 2
n=0
for f in *.hlo; do
  n=$((n + 1))
  head -n 1 "$f" | grep -q '^// Transcribed from openxla/xla ' || fail "$f: no provenance line"
  run check "$f" && expect_rc 0 "check $f" && has "$OUT" "$f: ok:" "check $f"
  run compile "$f" --json && expect_rc 0 "compile --json $f" &&
    python3 -c 'import json,sys; json.load(open(sys.argv[1]))' "$OUT" ||
    fail "compile --json $f: not one JSON object"
done
[ "$n" -ge 30 ] || fail "only $n modules in tests/hlo/xla"

# collectives in a while body collfuse cannot run are never hidden: the
# while's warning counts them, and --strict refuses the module
w="ag_while_loop.hlo:22: warning: 1 node of foreign op 'while (2 collectives inside, not run)' imported as Opaque (first 'while_loop')"
run check ag_while_loop.hlo
expect_last 0 "$w" "check ag_while_loop.hlo"
run check --strict ag_while_loop.hlo
expect_last 1 "$(echo "$w" | sed 's/: warning: /: error: /')" "check --strict ag_while_loop.hlo"

# control-predecessors order collectives: none of the three is combined (as
# XLA's DoNotCombineWithControlDependencies expects), where without them
# lead_ar and ar1 would be
run compile ar_control_deps.hlo --json
expect_rc 0 "compile --json ar_control_deps.hlo" &&
  has "$OUT" '"collectives_after":3,' "compile --json ar_control_deps.hlo"
finish xla_corpus
