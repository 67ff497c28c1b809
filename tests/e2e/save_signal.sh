#!/bin/sh
# save_signal.sh COLLFUSE
#
# `run --save-outputs DIR` publishes a run's outputs together, and SIGTERM or
# SIGINT in the middle of writing them leaves no temporary behind:
#  - DIR/outputs.json, when present, describes exactly the rank directories
#    there (a run over an earlier one of more ranks removes the extra ones);
#  - a run killed while it writes (the signal sent once its first
#    `.cf-XXXXXX` appears under DIR) dies of the signal, leaves no
#    `.cf-*` anywhere under DIR, no manifest of the run before beside its new
#    files, and every rank directory whole: all of one run's files or all of
#    the other's (the outputs of both runs are saved apart first to compare).
# Once, a signal left 10-32 MiB temporaries, and the new .npy files sat
# beside the previous run's outputs.json. Prints one line per failure and
# exits 1 if there was any.
set -u

if [ $# -ne 1 ]; then
  echo "usage: save_signal.sh COLLFUSE" >&2
  exit 2
fi
cf=$1
work=$(mktemp -d "${TMPDIR:-/tmp}/cf-save.XXXXXX") || exit 2
trap 'rm -rf "$work"' EXIT
trap 'exit 130' INT TERM

. "$(dirname "$0")/lib.sh"
LIMIT=120

# four ranks, two 32 MiB outputs each: 256 MiB to write
cat >"$work/g.xml" <<'EOF'
<graph name="big" version="1" world_size="4">
  <node name="x" op="Input" dtype="float32" shape="8388608"/>
  <node name="z" op="Input" dtype="float32" shape="8388608"/>
  <node name="a" op="AllReduce" reduction="sum" fusion="0"><input ref="x"/></node>
  <node name="b" op="AllReduce" reduction="max" fusion="0"><input ref="z"/></node>
  <node name="ya" op="Output"><input ref="a"/></node>
  <node name="yb" op="Output"><input ref="b"/></node>
</graph>
EOF
sed 's/world_size="4"/world_size="2"/' "$work/g.xml" >"$work/g2.xml"

# the outputs of seed 1 and seed 2, each written whole
for s in 1 2; do
  run run "$work/g.xml" --seed "$s" --save-outputs "$work/ref$s"
  expect_rc 0 "run --seed $s --save-outputs" || { finish save_signal; }
done

# same DIR: DIR is exactly ref1 or ref2, or (no manifest) each rank<R>
# exactly one of them; no temporary anywhere
check_dir() { # WHAT
  what=$1
  temps=$(find "$work/out" -name '.cf-*' | head -n 3)
  [ -z "$temps" ] || fail "$what: temporaries left: $temps"
  if [ -e "$work/out/outputs.json" ]; then
    if ! diff -r "$work/out" "$work/ref1" >/dev/null 2>&1 && ! diff -r "$work/out" "$work/ref2" >/dev/null 2>&1; then
      fail "$what: outputs.json beside files of another run"
    fi
  fi
  for d in "$work/out"/rank*; do
    [ -e "$d" ] || continue
    r=$(basename "$d")
    diff -r "$d" "$work/ref1/$r" >/dev/null 2>&1 || diff -r "$d" "$work/ref2/$r" >/dev/null 2>&1 ||
      fail "$what: $r mixes two runs"
  done
}

# a run over an earlier one: the earlier one's files are all replaced
run run "$work/g.xml" --seed 1 --save-outputs "$work/out"
expect_rc 0 "first run into out"
run run "$work/g.xml" --seed 2 --save-outputs "$work/out"
if expect_rc 0 "second run into out"; then
  diff -r "$work/out" "$work/ref2" >/dev/null || fail "second run into out: not exactly its outputs"
fi
# ... of fewer ranks: rank2 and rank3 of the earlier run go
run run "$work/g2.xml" --seed 2 --save-outputs "$work/out"
if expect_rc 0 "two-rank run into out"; then
  [ -e "$work/out/rank2" ] || [ -e "$work/out/rank3" ] && fail "two-rank run into out: rank2/rank3 of the run before are left"
  grep -q '"ranks":	2' "$work/out/outputs.json" || fail "two-rank run into out: outputs.json does not say 2 ranks"
fi

# a signal while the outputs are written: every temporary goes, no mix
for sig in TERM INT; do
  caught=0
  for try in 1 2 3; do
    run run "$work/g.xml" --seed 1 --save-outputs "$work/out"
    expect_rc 0 "run into out before SIG$sig" || break
    checks=$((checks + 1))
    # the signal goes when the first temporary appears (the run is writing);
    # a background job of sh ignores SIGINT unless it is reset
    env --default-signal="$sig" "$cf" run "$work/g.xml" --seed 2 --save-outputs "$work/out" >"$OUT" 2>"$ERR" &
    pid=$!
    n=0
    while [ -z "$(find "$work/out" -name '.cf-*' 2>/dev/null | head -n 1)" ] && kill -0 "$pid" 2>/dev/null &&
      [ "$n" -lt 6000 ]; do
      sleep 0.01
      n=$((n + 1))
    done
    kill -s "$sig" "$pid" 2>/dev/null
    wait "$pid"
    rc=$?
    check_dir "SIG$sig while writing"
    case $sig in TERM) want=143 ;; INT) want=130 ;; esac
    if [ "$rc" -eq "$want" ]; then
      caught=1
      break
    fi
    [ "$rc" -eq 0 ] || fail "SIG$sig while writing: exit $rc, expected $want (killed) or 0 (done first)"
  done
  [ "$caught" -eq 1 ] || echo "save_signal.sh: SIG$sig: the run finished before the signal in 3 tries" >&2
done

finish save_signal
