#!/bin/sh
# run.sh COLLFUSE SRCDIR
#
# End-to-end checks of `collfuse run` (docs/cli.md): every example runs and
# passes --verify at its world size and at other --ranks its groups allow;
# --json is one object with the documented keys; --iters/--warmup; --seed
# changes the outputs and the same seed reproduces them; --save-outputs
# writes DIR/rank<R>/<name>.npy ('/' in a name becomes '_') with a valid
# header; --input NAME=FILE.npy with {rank} feeds the run (the outputs
# follow the files; a wrong shape or name is an error); --deterministic gives
# byte-identical outputs fused (default), unfused (-O0) and with two other
# --split layouts, on the ResNet-50 gradients (examples/graphml) and on
# random graphs from gen_random_graphs.py, every run also verified; exit
# codes (usage 2, invalid graph 1, runtime 3) for bad options, cross-rank
# mismatches (COLLFUSE_TEST_MISMATCH), a failing rank and a vanished rank
# (COLLFUSE_TEST_FAIL), the latter within the --timeout, never a hang.
# Every command runs under `timeout`; a sanitizer report is a failure.
# PART=fast leaves out the --deterministic runs (ctest's e2e/run), PART=long
# runs only them (e2e/run_long, label long); unset, everything runs.
# Prints one line per failure and exits 1 if there was any.
set -u

if [ $# -ne 2 ]; then
  echo "usage: run.sh COLLFUSE SRCDIR" >&2
  exit 2
fi
cf=$1
src=$2
command -v python3 >/dev/null 2>&1 || { echo "run.sh: python3 is needed" >&2; exit 2; }

work=$(mktemp -d "${TMPDIR:-/tmp}/cf-run.XXXXXX") || exit 2
trap 'rm -rf "$work"' EXIT
trap 'exit 130' INT TERM

t_start=$(date +%s)
section() { echo "run.sh: $(($(date +%s) - t_start))s: $*" >&2; }
. "$(dirname "$0")/lib.sh"
CF_SUB=run
LIMIT=60
FAIL_LINES=8

# same DIR1 DIR2 WHAT: the two --save-outputs trees are byte-identical
same() {
  a=$(cd "$1" && find . -type f | sort)
  b=$(cd "$2" && find . -type f | sort)
  if [ "$a" != "$b" ]; then
    fail "$3: different files: $(printf '%s\n%s\n' "$a" "$b" | sort | uniq -u | head -n 3 | tr '\n' ' ')"
    return 1
  fi
  for f in $a; do
    cmp -s "$1/$f" "$2/$f" || { fail "$3: $f differs"; return 1; }
  done
  return 0
}

# ---------------------------------------------------------------- python helpers
cat >"$work/json_check.py" <<'EOF'
import json, sys
# json_check.py FILE RANKS ITERS [WARMUP]: one run --json object with docs/cli.md's keys
with open(sys.argv[1]) as f:
    text = f.read()
try:
    d = json.loads(text)
except ValueError as e:
    sys.exit("not one JSON object: %s" % e)
if not isinstance(d, dict):
    sys.exit("not a JSON object")
num = lambda v: isinstance(v, (int, float)) and not isinstance(v, bool)
for k in ("ranks", "backend", "iters", "time_ms_median", "verified", "max_abs_err", "max_rel_err",
          "collectives_executed"):
    if k not in d:
        sys.exit("missing key %r" % k)
if d["ranks"] != int(sys.argv[2]) or d["iters"] != int(sys.argv[3]):
    sys.exit("ranks/iters are %r/%r, expected %s/%s" % (d["ranks"], d["iters"], sys.argv[2], sys.argv[3]))
if len(sys.argv) > 4 and d.get("warmup") != int(sys.argv[4]):
    sys.exit("warmup is %r, expected %s" % (d.get("warmup"), sys.argv[4]))
if d["backend"] != "threads":
    sys.exit("backend is %r" % d["backend"])
if d["verified"] is not True:
    sys.exit("verified is %r with --verify" % d["verified"])
for k in ("time_ms_median", "max_abs_err", "max_rel_err", "collectives_executed"):
    if not num(d[k]) or d[k] < 0:
        sys.exit("%s is not a non-negative number: %r" % (k, d[k]))
if d["collectives_executed"] < 1 or d["time_ms_median"] <= 0:
    sys.exit("no collectives or no time: %r" % d)
EOF

cat >"$work/npy.py" <<'EOF'
import ast, struct, sys
# npy.py write FILE DESCR SHAPE V0 STEP: a .npy (v1.0) of prod(SHAPE) values V0 + i*STEP
# npy.py check FILE DESCR SHAPE: the header is valid and says DESCR and SHAPE
# npy.py values FILE: the values, one per line (f4/i4/f8/i8 little endian, i1)
def header(path):
    with open(path, "rb") as f:
        data = f.read()
    if data[:6] != b"\x93NUMPY":
        sys.exit("%s: bad magic %r" % (path, data[:6]))
    major = data[6]
    if major == 1:
        hlen, off = struct.unpack("<H", data[8:10])[0], 10
    else:
        hlen, off = struct.unpack("<I", data[8:12])[0], 12
    text = data[off:off + hlen].decode("latin1")
    if (off + hlen) % 16 or not text.endswith("\n"):
        sys.exit("%s: header of %d bytes is not padded to 16 or lacks a newline" % (path, off + hlen))
    h = ast.literal_eval(text.strip())
    return h, data[off + hlen:]

def shape_of(s):
    return tuple(int(x) for x in s.split(",")) if s else ()

cmd = sys.argv[1]
if cmd == "write":
    path, descr, shape, v0, step = sys.argv[2], sys.argv[3], shape_of(sys.argv[4]), float(sys.argv[5]), float(sys.argv[6])
    n = 1
    for d in shape:
        n *= d
    fmt = {"<f4": "f", "<i4": "i", "<f8": "d", "<i8": "q", "|i1": "b"}[descr]
    vals = [v0 + i * step for i in range(n)]
    if fmt in "iqb":
        vals = [int(v) for v in vals]
    body = struct.pack("<%d%s" % (n, fmt), *vals)
    text = "{'descr': '%s', 'fortran_order': False, 'shape': %r, }" % (descr, shape)
    pad = 64 - (10 + len(text) + 1) % 64
    text = text + " " * (pad % 64) + "\n"
    with open(path, "wb") as f:
        f.write(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(text)) + text.encode("latin1") + body)
elif cmd == "check":
    h, body = header(sys.argv[2])
    want = shape_of(sys.argv[4])
    if h.get("descr") != sys.argv[3] or tuple(h.get("shape")) != want or h.get("fortran_order") is not False:
        sys.exit("%s: header %r, expected descr %s shape %r" % (sys.argv[2], h, sys.argv[3], want))
    size = int(sys.argv[3][2:])  # '<f4' -> 4, '|i1' -> 1
    n = 1
    for d in want:
        n *= d
    if len(body) != n * size:
        sys.exit("%s: %d data bytes, expected %d" % (sys.argv[2], len(body), n * size))
elif cmd == "values":
    h, body = header(sys.argv[2])
    fmt = {"<f4": "f", "<i4": "i", "<f8": "d", "<i8": "q", "|i1": "b"}[h["descr"]]
    n = len(body) // struct.calcsize(fmt)
    for v in struct.unpack("<%d%s" % (n, fmt), body):
        print(repr(v))
EOF
npy() { python3 "$work/npy.py" "$@"; }

# the fast part (PART=fast, lib.sh), up to --input; the exit codes and
# runtime failures after the long part are fast too
if part fast; then
# ---------------------------------------------------------------- examples
section examples
# world size from the file; ranks other than it where the groups allow;
# MatmulReduceScatter either runs and verifies or is refused by name (exit 1)
for f in "$src"/examples/*.xml; do
  [ -f "$f" ] || continue
  b=$(basename "$f" .xml)
  if run "$f" --verify; then
    if [ "$rc" -eq 1 ] && grep -q 'MatmulReduceScatter' "$f"; then
      has "$ERR" "MatmulReduceScatter" "run $b (refused)"
    else
      expect_rc 0 "run $b --verify" && has "$OUT" "verified" "run $b --verify"
    fi
  fi
done
for spec in reduce_root:3 reduce_root:8 tp_mlp:5 tp_mlp:8 broadcast:4 broadcast:5; do
  b=${spec%%:*}
  n=${spec#*:}
  if run "$src/examples/$b.xml" --verify --ranks "$n"; then
    expect_rc 0 "run $b --ranks $n --verify" && has "$OUT" "$n ranks" "run $b --ranks $n"
  fi
done
# ranks the graph's groups or attributes do not allow: exit 1, naming the file
for spec in tp_mlp:3 dp_gradients:5 allgather_layouts:3 reduce_root:2; do
  b=${spec%%:*}
  n=${spec#*:}
  if run "$src/examples/$b.xml" --ranks "$n"; then
    expect_rc 1 "run $b --ranks $n" && has "$ERR" "$b.xml" "run $b --ranks $n" && has "$ERR" "error:" "run $b --ranks $n"
  fi
done

# ---------------------------------------------------------------- --json, --iters, --warmup
section json
if run "$src/tests/run/hooks.xml" --verify --json --iters 3 --warmup 2; then
  expect_rc 0 "run --json" &&
    { python3 "$work/json_check.py" "$OUT" 4 3 2 2>"$work/why" || fail "run --json: $(cat "$work/why")"; }
fi
if run "$src/examples/tp_mlp.xml" --verify --json --ranks 5; then
  expect_rc 0 "run --json --ranks 5" &&
    { python3 "$work/json_check.py" "$OUT" 5 1 0 2>"$work/why" || fail "run --json --ranks 5: $(cat "$work/why")"; }
fi
if run "$src/examples/tp_mlp.xml" --iters 4 --warmup 1; then
  expect_rc 0 "run --iters 4 --warmup 1" && has "$OUT" "over 4 iterations" "run --iters 4"
fi

# ---------------------------------------------------------------- --seed, --save-outputs
section seed
g="$src/tests/run/hooks.xml"
if run "$g" --seed 1 --save-outputs "$work/s1a"; then expect_rc 0 "run --seed 1"; fi
if run "$g" --seed 1 --save-outputs "$work/s1b" --iters 2; then expect_rc 0 "run --seed 1 again"; fi
if run "$g" --seed 2 --save-outputs "$work/s2"; then expect_rc 0 "run --seed 2"; fi
same "$work/s1a" "$work/s1b" "the same --seed twice"
for o in o_b o_c o_sq o_ag o_rs; do
  if cmp -s "$work/s1a/rank3/$o.npy" "$work/s2/rank3/$o.npy"; then
    fail "--seed 1 and --seed 2 gave the same $o on rank 3"
  fi
done
# the layout: DIR/rank<R>/<output>.npy for every rank and output, valid headers
for r in 0 1 2 3; do
  for o in o_b o_c o_sq o_ag o_rs; do
    [ -f "$work/s1a/rank$r/$o.npy" ] || fail "--save-outputs: no rank$r/$o.npy"
  done
  npy check "$work/s1a/rank$r/o_b.npy" '<f4' 100 2>"$work/why" || fail "o_b.npy: $(cat "$work/why")"
  npy check "$work/s1a/rank$r/o_c.npy" '<i4' 7 2>"$work/why" || fail "o_c.npy: $(cat "$work/why")"
  npy check "$work/s1a/rank$r/o_ag.npy" '<f2' 32,4 2>"$work/why" || fail "o_ag.npy: $(cat "$work/why")"
  npy check "$work/s1a/rank$r/o_rs.npy" '<f2' 2,4 2>"$work/why" || fail "o_rs.npy: $(cat "$work/why")"
done
[ "$(find "$work/s1a" -name '*.npy' | wc -l)" -eq 20 ] || fail "--save-outputs wrote $(find "$work/s1a" -name '*.npy' | wc -l) .npy files, expected 20"
[ -f "$work/s1a/outputs.json" ] || fail "--save-outputs wrote no outputs.json"
od -An -c -N 6 "$work/s1a/rank2/o_sq.npy" | grep -q 'N   U   M   P   Y' || fail "o_sq.npy lacks the NumPy magic"

# ---------------------------------------------------------------- --input with {rank}
section input
gi="$src/tests/run/input.xml"
for r in 0 1 2; do
  npy write "$work/x_$r.npy" '<f4' 4,3 "$r" 0.5
  npy write "$work/y_$r.npy" '<i4' 5 $((r * 10)) -3
  npy write "$work/x2_$r.npy" '<f4' 4,3 "$((r + 7))" 0.25
done
npy write "$work/bad_shape.npy" '<f4' 3,4 0 1
if run "$gi" --verify --input "x=$work/x_{rank}.npy" --input "y=$work/y_{rank}.npy" --save-outputs "$work/in1"; then
  expect_rc 0 "run --input"
  # x: rank r holds r + 0.5 i, so the sum is 3 + 1.5 i; y: max over ranks of 10 r - 3 i is 20 - 3 i
  want_x=$(python3 -c 'print("\n".join(repr(float(3 + 1.5 * i)) for i in range(12)))')
  want_y=$(python3 -c 'print("\n".join(repr(20 - 3 * i) for i in range(5)))')
  for r in 0 1 2; do
    [ "$(npy values "$work/in1/rank$r/res_x.npy")" = "$want_x" ] || fail "--input: res/x on rank $r is not the sum of the files"
    [ "$(npy values "$work/in1/rank$r/ymax.npy")" = "$want_y" ] || fail "--input: ymax on rank $r is not the max of the files"
  done
fi
if run "$gi" --verify --input "x=$work/x2_{rank}.npy" --save-outputs "$work/in2"; then
  expect_rc 0 "run --input (other files)"
  cmp -s "$work/in1/rank1/res_x.npy" "$work/in2/rank1/res_x.npy" && fail "--input: other files, same output"
fi
if run "$gi" --input "x=$work/bad_shape.npy"; then
  expect_rc 1 "run --input with a wrong shape" && has "$ERR" "bad_shape.npy" "run --input with a wrong shape"
fi
if run "$gi" --input "x=$work/missing_{rank}.npy"; then
  expect_rc 1 "run --input of a missing file" && has "$ERR" "missing_0.npy" "run --input of a missing file"
fi
if run "$gi" --input "nosuch=$work/x_{rank}.npy"; then
  [ "$rc" -eq 1 ] || [ "$rc" -eq 2 ] || fail "run --input of an unknown Input: exit $rc, expected 1 or 2"
  has "$ERR" "nosuch" "run --input of an unknown Input"
fi

# an int8 mean of values near 100 on 4 ranks (the sum leaves int8): exact with
# every algorithm and at 9 ranks (past the widest kernel)
for r in 0 1 2 3 4 5 6 7 8; do npy write "$work/q_$r.npy" '|i1' 16 $((90 + r)) 1; done
for args in "--algo direct" "--algo rsag" "--algo ring" "--algo rd" "--ranks 9"; do
  # shellcheck disable=SC2086
  if run "$src/tests/run/int_mean.xml" --verify --input "q=$work/q_{rank}.npy" $args; then
    expect_rc 0 "int8 mean of large values, $args"
  fi
done

fi # part fast

# ---------------------------------------------------------------- --deterministic
# det NAME VERIFY FILE [ARGS...]: fused, -O0, --split bytes:4K and --split
# size:50,50 outputs are byte-identical; the fused and -O0 runs are verified,
# and the others too unless VERIFY is "some" (their bytes equal verified ones)
det() {
  dn=$1
  dv=$2
  df=$3
  shift 3
  i=0
  for cfg in "" "-O0" "--split bytes:4K" "--split size:50,50"; do
    i=$((i + 1))
    v=--verify
    [ "$dv" = some ] && [ "$i" -gt 2 ] && v=
    # shellcheck disable=SC2086
    if run "$df" --deterministic $v "$@" $cfg --save-outputs "$work/det_$dn.$i"; then
      expect_rc 0 "run $dn --deterministic $cfg" || return 1
    else
      return 1
    fi
  done
  for i in 2 3 4; do same "$work/det_$dn.1" "$work/det_$dn.$i" "$dn --deterministic (layout $i vs fused)"; done
  rm -rf "$work/det_$dn".*
}
# the long part (PART=long, lib.sh): ResNet-50 and 20 random graphs, each
# in four layouts
if part long; then
  section deterministic
  LIMIT=120
  det resnet50 some "$src/examples/graphml/resnet50.dp8.graphml" --ranks 2
  LIMIT=60
  section random graphs
  python3 "$src/tests/e2e/gen_random_graphs.py" "$work/rand" 20 7 || fail "gen_random_graphs.py failed"
  for f in "$work"/rand/rand*.xml; do
    det "$(basename "$f" .xml)" all "$f"
  done
fi
if ! part fast; then
  echo "run.sh: $checks runs, $fails failures, $(($(date +%s) - t_start))s"
  [ "$fails" -eq 0 ]
  exit
fi

# ---------------------------------------------------------------- exit codes
section exit codes
for bad in "--ranks 0" "--ranks 257" "--ranks abc" "--bogus" "--backend bogus" "--device bogus" \
  "--iters 0" "--timeout -1" "--split bogus:1" "--input noequals"; do
  # shellcheck disable=SC2086
  if run "$src/examples/tp_mlp.xml" $bad; then expect_rc 2 "run $bad"; fi
done
if run; then expect_rc 2 "run without a file"; fi
# the driver names its flag (the C API names its option: test_api)
if run "$src/examples/tp_mlp.xml" --split bytes:lots; then
  expect_rc 2 "run --split bytes:lots" &&
    has "$ERR" "--split bytes:lots: bad cap 'lots'" "run --split bytes:lots"
fi
if run "$src/examples/tp_mlp.xml" --cost fast; then
  expect_rc 2 "run --cost fast" && has "$ERR" "--cost fast: expected alpha_us,beta_GBps" "run --cost fast"
fi
if run "$src/tests/run/invalid.xml"; then
  expect_rc 1 "run of an invalid graph" && has "$ERR" "invalid.xml:5: error:" "run of an invalid graph"
fi
if run "$work/does-not-exist.xml"; then expect_rc 1 "run of a missing file"; fi

# ---------------------------------------------------------------- runtime failures
section runtime failures
# mismatch FILE RANK:COLL:FIELD [ARGS...]: exit 3, "cross-rank mismatch",
# "FIELD is", the mutated rank and another one, long before the timeout (a
# long one: a busy machine may take seconds to run the ranks, while a
# mismatch seen only by the timeout would take all 60)
mismatch() {
  mf=$1
  ms=$2
  shift 2
  COLLFUSE_TEST_MISMATCH=$ms run "$mf" --timeout 60 "$@" || return
  what="COLLFUSE_TEST_MISMATCH=$ms on $(basename "$mf") $*"
  expect_rc 3 "$what" || return
  has "$ERR" "cross-rank mismatch" "$what" || return
  has "$ERR" "${ms##*:} is" "$what" || return
  has "$ERR" "rank ${ms%%:*}" "$what" || return
  [ "$(grep -o 'rank [0-9]*' "$ERR" | sort -u | wc -l)" -ge 2 ] || fail "$what: names one rank only"
  [ "$secs" -le $((15 * ${CF_TEST_TIME_SCALE:-1})) ] || fail "$what: took ${secs}s (a timeout, not a mismatch check)"
}
hooks="$src/tests/run/hooks.xml"
ex="$src/examples"
# FILE SPEC [ARGS]; tp_mlp's collectives are plain with -O0 and inside
# AllGatherMatmul / MatmulReduceScatter by default
while read -r file spec extra; do
  # shellcheck disable=SC2086
  mismatch "$file" "$spec" $extra
done <<EOF
$hooks 3:0:count
$hooks 0:1:dtype
$hooks 2:5:reduction
$hooks 1:2:reduction
$hooks 1:3:count
$hooks 3:4:dtype
$ex/tp_mlp.xml 1:1:count -O0
$ex/tp_mlp.xml 2:0:dtype -O0
$ex/tp_mlp.xml 1:1:count
$ex/tp_mlp.xml 3:0:count
$ex/tp_mlp.xml 2:0:dtype
$ex/reduce_root.xml 1:0:count
$ex/reduce_root.xml 1:0:root
$ex/broadcast.xml 2:0:root
$ex/broadcast.xml 0:0:count
$src/tests/run/reduce_last.xml 0:0:root
EOF

# a rank that fails loudly (mode 1): everyone stops at once (well before a
# 60 s timeout), the message names it; a rank that vanishes (mode 2): the
# others notice by the timeout (2 s), not much later. MODE:RANK:STEP, steps
# of hooks.xml's schedule.
for spec in 1:2:0 1:0:4 1:3:12 2:1:0 2:3:2 2:0:5 2:2:12; do
  r=$(echo "$spec" | cut -d: -f2)
  want="rank $r"
  to=60
  [ "${spec%%:*}" = 2 ] && want="timed out" && to=2
  if COLLFUSE_TEST_FAIL=$spec run "$hooks" --iters 2 --timeout $to; then
    expect_rc 3 "COLLFUSE_TEST_FAIL=$spec" && has "$ERR" "$want" "COLLFUSE_TEST_FAIL=$spec"
    [ "$secs" -le $((15 * ${CF_TEST_TIME_SCALE:-1})) ] || fail "COLLFUSE_TEST_FAIL=$spec --timeout $to: took ${secs}s"
  fi
done
# every step can fail: reduce_root's schedule is START, WAIT of one Reduce
# that runs inline, so step 1 is a WAIT the rank thread folds into START
if COLLFUSE_TEST_FAIL=1:0:1 run "$src/examples/reduce_root.xml" --timeout 20; then
  expect_rc 3 "COLLFUSE_TEST_FAIL=1:0:1 on reduce_root (the WAIT step)" && has "$ERR" "rank 0" "COLLFUSE_TEST_FAIL=1:0:1"
fi

echo "run.sh: $checks runs, $fails failures, $(($(date +%s) - t_start))s"
[ "$fails" -eq 0 ]
