#!/bin/sh
# cli.sh COLLFUSE SRCDIR
#
# End-to-end checks of the command line (docs/cli.md) on the examples:
# version and help texts, usage errors (exit 2), `check` on every example,
# `compile -o` round trips (the output is valid input, and compiling it again
# is a byte-identical fixpoint, with names holding ',' in fused ops too),
# `compile --json` (one JSON object with the documented keys), and that a
# failed compile leaves no output file behind.
# Every command runs under `timeout 20`. Prints one line per failure and
# exits 1 if there was any.
set -u

if [ $# -ne 2 ]; then
  echo "usage: cli.sh COLLFUSE SRCDIR" >&2
  exit 2
fi
cf=$1
src=$2
command -v python3 >/dev/null 2>&1 || { echo "cli.sh: python3 is needed" >&2; exit 2; }

work=$(mktemp -d "${TMPDIR:-/tmp}/cf-cli.XXXXXX") || exit 2
trap 'rm -rf "$work"' EXIT
trap 'exit 130' INT TERM

. "$(dirname "$0")/lib.sh"

# ---------------------------------------------------------------- version/help
if run --version; then
  expect_rc 0 "--version"
  [ "$(head -n 1 "$OUT")" = "collfuse 0.1.0" ] || fail "--version printed '$(head -n 1 "$OUT")', expected 'collfuse 0.1.0'"
fi
if run --help; then
  expect_rc 0 "--help" && has "$OUT" "usage: collfuse" "--help" &&
    has "$OUT" "check" "--help lists commands" && has "$OUT" "compile" "--help lists commands"
fi
for sub in check compile dot; do
  if run "$sub" --help; then
    expect_rc 0 "$sub --help" && has "$OUT" "usage: collfuse $sub" "$sub --help"
  fi
done
if run check --help; then has "$OUT" "atlas-a2" "check --help lists the targets"; fi

# ---------------------------------------------------------------- usage errors
if run; then
  expect_rc 2 "no arguments" && has "$ERR" "usage: collfuse" "no arguments"
fi
if run frobnicate; then
  expect_rc 2 "unknown command" && has "$ERR" "unknown command 'frobnicate'" "unknown command"
fi
if run check --bogus "$src/examples/tp_block.xml"; then
  expect_rc 2 "check --bogus" && has "$ERR" "unknown option '--bogus'" "check --bogus"
fi
if run compile "$src/examples/tp_block.xml" --bogus; then
  expect_rc 2 "compile --bogus" && has "$ERR" "unknown option '--bogus'" "compile --bogus"
fi
if run dot --bogus "$src/examples/tp_block.xml"; then
  expect_rc 2 "dot --bogus" && has "$ERR" "unknown option '--bogus'" "dot --bogus"
fi
if run check; then
  expect_rc 2 "check without a file" && has "$ERR" "no input file" "check without a file"
fi
if run compile; then
  expect_rc 2 "compile without a file" && has "$ERR" "no input file" "compile without a file"
fi
if run compile "$src/examples/tp_block.xml" "$src/examples/tp_mlp.xml"; then
  expect_rc 2 "compile with two files" && has "$ERR" "unexpected argument" "compile with two files"
fi
if run compile "$src/examples/tp_block.xml" -O0 --passes dce; then
  expect_rc 2 "compile -O0 --passes"
fi
if run check "$src/examples/tp_block.xml" --target tpu-v9; then
  expect_rc 2 "check --target tpu-v9" && has "$ERR" "unknown target 'tpu-v9'" "check --target tpu-v9"
fi
if run compile "$src/examples/tp_block.xml" --target tpu-v9; then
  expect_rc 2 "compile --target tpu-v9" && has "$ERR" "unknown target 'tpu-v9'" "compile --target tpu-v9"
fi
if run check "$work/does-not-exist.xml"; then
  expect_rc 1 "check of a missing file" && has "$ERR" "does-not-exist.xml: error: cannot open" "check of a missing file"
fi

# ---------------------------------------------------------------- check
n_examples=0
for f in "$src"/examples/*.xml; do
  [ -f "$f" ] || continue
  n_examples=$((n_examples + 1))
  if run check "$f"; then
    expect_rc 0 "check $f" && has "$OUT" "$f: ok:" "check $f"
    [ -s "$ERR" ] && fail "check $f wrote to stderr"
  fi
done
[ "$n_examples" -gt 0 ] || fail "no examples in $src/examples"

# several files at once: one line each; one bad file makes the exit 1 but the
# others are still checked
if run check "$src/examples/tp_block.xml" "$src/tests/malformed/cycle.xml" "$src/examples/tp_mlp.xml"; then
  expect_rc 1 "check good bad good" && has "$OUT" "tp_block.xml: ok:" "check good bad good" &&
    has "$OUT" "tp_mlp.xml: ok:" "check good bad good" &&
    has "$ERR" "cycle.xml:4: error: node 'a': cycle:" "check good bad good"
fi

# the target-profile corpus files are valid graphs: only their target rejects them
for f in "$src"/tests/malformed/target_*.xml; do
  [ -f "$f" ] || continue
  if run check "$f"; then
    expect_rc 0 "check $f (no target)" && has "$OUT" "ok:" "check $f (no target)"
  fi
  if run check "$f" --target cpu; then
    expect_rc 0 "check $f --target cpu" && has "$OUT" "target cpu" "check $f --target cpu"
  fi
done

# ---------------------------------------------------------------- compile -o round trip
for f in "$src"/examples/*.xml; do
  [ -f "$f" ] || continue
  b=$(basename "$f" .xml)
  o1="$work/$b.1.xml"
  o2="$work/$b.2.xml"
  run compile "$f" -o "$o1" || continue
  expect_rc 0 "compile $f -o" || continue
  [ -s "$o1" ] || { fail "compile $f -o wrote no file"; continue; }
  [ -e "$o1.tmp" ] && fail "compile $f -o left $o1.tmp behind"
  if run check "$o1"; then
    expect_rc 0 "check of compiled $b" && has "$OUT" "ok:" "check of compiled $b"
  fi
  run compile "$o1" -o "$o2" || continue
  expect_rc 0 "compile of compiled $b" || continue
  cmp -s "$o1" "$o2" || fail "compile is not a fixpoint on $b: $(diff "$o1" "$o2" | head -n 6 | tr '\n' ' ')"
  # -O0 output is valid input as well
  if run compile "$f" -O0 -o "$work/$b.O0.xml"; then
    expect_rc 0 "compile -O0 $f"
    if run check "$work/$b.O0.xml"; then expect_rc 0 "check of -O0 output of $b"; fi
  fi
done

# ---------------------------------------------------------------- names with ',' in a fused op
# members is a list: the XML writes an item's ',' as '\,' and a '\' that
# would read as an escape as '\\'; the output reads back (a fixpoint), runs
# and verifies, and --json lists the names as they are
cat >"$work/comma.xml" <<'EOF'
<graph name="comma" world_size="2">
  <node name="x" op="Input" dtype="float32" shape="8"/>
  <node name="y" op="Input" dtype="float32" shape="4"/>
  <node name="a" op="Input" dtype="float32" shape="4,8"/>
  <node name="b" op="Input" dtype="float32" shape="8,6"/>
  <node name="grad,1" op="AllReduce"><input ref="x"/></node>
  <node name="grad\" op="AllReduce"><input ref="y"/></node>
  <node name="mm,1" op="MatMul"><input ref="a"/><input ref="b"/></node>
  <node name="rs,1" op="ReduceScatter"><input ref="mm,1"/></node>
  <node name="o1" op="Output"><input ref="grad,1"/></node>
  <node name="o2" op="Output"><input ref="grad\"/></node>
  <node name="o3" op="Output"><input ref="rs,1"/></node>
</graph>
EOF
if run compile "$work/comma.xml" -o "$work/comma.1.xml" && expect_rc 0 "compile comma.xml"; then
  has "$work/comma.1.xml" 'members="grad\,1,grad\\"' "comma.xml's bucket" &&
    has "$work/comma.1.xml" 'members="mm\,1,rs\,1"' "comma.xml's MatmulReduceScatter"
  if run compile "$work/comma.1.xml" -o "$work/comma.2.xml" && expect_rc 0 "compile comma.1.xml"; then
    cmp -s "$work/comma.1.xml" "$work/comma.2.xml" ||
      fail "compile is not a fixpoint on comma.xml: $(diff "$work/comma.1.xml" "$work/comma.2.xml" | head -n 6 | tr '\n' ' ')"
  fi
  if run run "$work/comma.1.xml" --verify; then
    expect_rc 0 "run comma.1.xml --verify" && has "$OUT" "verified" "run comma.1.xml --verify"
  fi
fi
if run compile "$work/comma.xml" --json && expect_rc 0 "compile comma.xml --json"; then
  python3 - "$OUT" <<'EOF' || fail "compile comma.xml --json: the members are not the names"
import json, sys
d = json.load(open(sys.argv[1]))
assert [b["members"] for b in d["buckets"]] == [["grad,1", "grad\\"]], d["buckets"]
assert [m["matmuls"] + [m["collective"]] for m in d["fused_matmul"]] == [["mm,1", "rs,1"]], d
EOF
fi

# ---------------------------------------------------------------- compile --json
cat >"$work/json_check.py" <<'EOF'
import json, sys

path = sys.argv[1]
with open(path) as f:
    text = f.read()
try:
    d = json.loads(text)  # exactly one JSON value: trailing text is an error
except ValueError as e:
    sys.exit("not one JSON object: %s" % e)
if not isinstance(d, dict):
    sys.exit("not a JSON object")
for k in ("nodes", "collectives_before", "collectives_after", "buckets", "fused_matmul", "pass_ms"):
    if k not in d:
        sys.exit("missing key %r" % k)
for k in ("nodes", "collectives_before", "collectives_after"):
    if not isinstance(d[k], int) or isinstance(d[k], bool) or d[k] < 0:
        sys.exit("%s is not a non-negative integer: %r" % (k, d[k]))
if d["collectives_after"] > d["collectives_before"]:
    sys.exit("more collectives after fusion than before")
if not isinstance(d["buckets"], list) or not isinstance(d["fused_matmul"], list):
    sys.exit("buckets and fused_matmul must be arrays")
if not isinstance(d["pass_ms"], dict) or not d["pass_ms"]:
    sys.exit("pass_ms must be a non-empty object")
for name, ms in d["pass_ms"].items():
    if not isinstance(ms, (int, float)) or isinstance(ms, bool) or ms < 0:
        sys.exit("pass_ms[%r] is not a non-negative number" % name)
seen = set()
for b in d["buckets"]:
    for k in ("name", "op", "members", "bytes", "dtype", "reduction", "group", "reason"):
        if k not in b:
            sys.exit("bucket %r lacks %r" % (b.get("name"), k))
    if not isinstance(b["members"], list) or not b["members"]:
        sys.exit("bucket %r: members must be a non-empty array" % b["name"])
    for m in b["members"]:
        if not isinstance(m, str) or m in seen:
            sys.exit("bucket %r: bad or repeated member %r" % (b["name"], m))
        seen.add(m)
    if not isinstance(b["bytes"], int) or b["bytes"] < 0:
        sys.exit("bucket %r: bytes must be a non-negative integer" % b["name"])
    for k in ("name", "op", "dtype", "group", "reason"):
        if not isinstance(b[k], str) or not b[k]:
            sys.exit("bucket %r: %s must be a non-empty string" % (b["name"], k))
for f in d["fused_matmul"]:
    for k in ("name", "op", "matmul", "collective"):
        if k not in f:
            sys.exit("fused_matmul entry %r lacks %r" % (f.get("name"), k))
# every collective left after fusion is a bucket, except the fused matmuls,
# which are listed in fused_matmul
if len(d["buckets"]) + len(d["fused_matmul"]) != d["collectives_after"]:
    sys.exit("%d buckets + %d fused matmuls for %d collectives left after fusion"
             % (len(d["buckets"]), len(d["fused_matmul"]), d["collectives_after"]))
EOF
for f in "$src"/examples/*.xml; do
  [ -f "$f" ] || continue
  if run compile "$f" --json; then
    expect_rc 0 "compile --json $f" || continue
    python3 "$work/json_check.py" "$OUT" 2>"$work/json_err" ||
      { fail "compile --json $f: $(cat "$work/json_err")"; continue; }
  fi
done
# the report counts what it should on a known graph: tp_block has
# 2 collectives (ReduceScatter rs, AllReduce ar0 with fusion_id=7)
if run compile "$src/examples/tp_block.xml" --json && expect_rc 0 "compile --json tp_block"; then
  python3 - "$OUT" 2>"$work/json_err" <<'EOF' || fail "compile --json tp_block: $(tail -n 1 "$work/json_err")"
import json, sys
d = json.load(open(sys.argv[1]))
assert d["collectives_before"] == 2, d["collectives_before"]
members = sorted([m for b in d["buckets"] for m in b["members"]] + [f["collective"] for f in d["fused_matmul"]])
assert members == ["ar0", "rs"], members
ar = [b for b in d["buckets"] if "ar0" in b["members"]][0]
assert ar["op"] in ("AllReduce", "FusedAllReduce"), ar["op"]
assert ar["dtype"] == "float32" and ar["reduction"] == "mean", ar
assert ar["bytes"] == 4096 * 4, ar["bytes"]
EOF
fi

# ---------------------------------------------------------------- fusion
dp="$src/examples/dp_gradients.xml"
if run compile "$dp" --explain; then
  expect_rc 0 "compile --explain" &&
    has "$OUT" "explain: AllReduce 'ar_emb' stays alone: fusion=0" "compile --explain" &&
    has "$OUT" "explain: AllReduce 'ar_q' -> 'allreduce_bucket_0' (fusion_id=1, 3 members, 49152 bytes)" "compile --explain" &&
    has "$OUT" "explain: AllReduce 'ar_fc1' -> 'allreduce_bucket_1' (fusion_id=2" "compile --explain"
fi
if run compile "$dp" --explain --json; then
  expect_rc 0 "compile --explain --json" && has "$ERR" "explain: AllReduce 'ar_step' stays alone: fusion=0" "explain goes to stderr with --json"
  python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); assert d["collectives_after"] == 5, d; assert len(d["fingerprint"]) == 16' "$OUT" ||
    fail "compile --explain --json: stdout is not the JSON object"
fi
# a MatMul whose product has another user stays unfused (no second GEMM)
cat >"$work/shared_mm.xml" <<'EOF'
<graph name="shared_mm" world_size="4">
  <node name="x" op="Input" dtype="float16" shape="64,256"/>
  <node name="w" op="Input" dtype="float16" shape="256,64"/>
  <node name="mm2" op="MatMul"><input ref="x"/><input ref="w"/></node>
  <node name="rs2" op="ReduceScatter"><input ref="mm2"/></node>
  <node name="o2" op="Output"><input ref="rs2"/></node>
  <node name="o3" op="Output"><input ref="mm2"/></node>
</graph>
EOF
if run compile "$work/shared_mm.xml" --explain --json; then
  expect_rc 0 "compile --explain (shared MatMul)" &&
    has "$ERR" "explain: MatMul 'mm2' -> ReduceScatter 'rs2' not fused: its result is also used by 'o3' (fusing would compute the product twice)" "compile --explain (shared MatMul)"
  python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); assert d["fused_matmul"] == [] and d["collectives_after"] == 1, d' "$OUT" ||
    fail "compile --json (shared MatMul): a fused matmul op, or not one collective"
fi
for spec in "bytes:" "size:50,40" "size:10,10,10,10,10,10,10,10,20" "index:5,3" "index:1,5" "index:0,1" "nonsense"; do
  if run compile "$dp" --split "$spec"; then
    expect_rc 2 "compile --split $spec" && has "$ERR" "--split" "compile --split $spec"
  fi
done
for case in "size:96.54,3.46|2" "index:20,100,160|3" "bytes:25M,first=1M|6" "auto|9"; do
  spec=${case%|*}
  want=${case#*|}
  if run compile "$src/examples/graphml/resnet50.dp8.graphml" --split "$spec" --json; then
    expect_rc 0 "resnet50 --split $spec" &&
      python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); assert d["collectives_before"] == 161 and d["collectives_after"] == int(sys.argv[2]), (d["collectives_after"], sys.argv[2]); assert sum(len(b["members"]) for b in d["buckets"]) == 161' "$OUT" "$want" ||
      fail "resnet50 --split $spec: expected 161 -> $want collectives"
  fi
done
# the fused graph reads back, and a tampered one is refused by its fingerprint
fused="$work/dp.fused.xml"
if run compile "$dp" -o "$fused" && run check "$fused"; then
  expect_rc 0 "check of a fused graph" && has "$OUT" "FusedAllReduce 3" "check of a fused graph"
  sed 's/offsets="0,16384,32768"/offsets="0,16384,32768"/; s/members="ar_q,ar_k,ar_v" reason="fusion_id=1"/members="ar_q,ar_k,ar_v" reason="fusion_id=1"/; 0,/reduction="mean" fusion="2" fusion_id="1"/s//reduction="sum" fusion="2" fusion_id="1"/' "$fused" >"$work/tampered.xml"
  if run check "$work/tampered.xml"; then
    expect_rc 1 "check of a tampered fused graph" && has "$ERR" "does not match the graph's collectives" "tampered fingerprint"
  fi
fi
if run bench compile --sizes 1000 --json; then
  expect_rc 0 "bench compile" &&
    python3 -c 'import json,sys; r=json.load(open(sys.argv[1]))["results"]; assert [x["kind"] for x in r] == ["dp", "tp"]; assert all(x["collectives_after"] < x["collectives_before"] and x["peak_rss_kib"] > 0 and "fuse-allreduce" in x["pass_ms"] for x in r), r' "$OUT" ||
    fail "bench compile --json: unexpected results"
fi

# ---------------------------------------------------------------- kernels: AOT, JIT, bench reduce
# dp_gradients needs 7 kernels (codegen/aot.c: n-ary, accumulate, scale for mean)
dp_kernels="cf_nary_max_int32_8 cf_nary_sum_bfloat16_4 cf_nary_mean_float32_8 cf_acc_max_int32 cf_acc_sum_bfloat16 cf_acc_sum_float32 cf_scale_float32"
if run compile "$dp" --emit-llvm "$work/dp.ll" --emit-ptx "$work/dp.ptx"; then
  if expect_rc 0 "compile --emit-llvm --emit-ptx"; then
    for k in $dp_kernels; do
      has "$work/dp.ll" "define void @$k(" "--emit-llvm" && has "$work/dp.ptx" ".entry $k(" "--emit-ptx"
    done
    has "$work/dp.ptx" ".target sm_90" "--emit-ptx"
    if [ -e "$work/dp.ll.tmp" ] || [ -e "$work/dp.ptx.tmp" ]; then fail "--emit-* left a .tmp file behind"; fi
    [ -s "$OUT" ] && fail "compile --emit-* printed on stdout"
  fi
fi
if run compile "$dp" --emit-asm "$work/dp.s" --emit-obj="$work/dp.o"; then
  expect_rc 0 "compile --emit-asm --emit-obj" && has "$work/dp.s" "cf_nary_mean_float32_8:" "--emit-asm"
  python3 -c 'import sys; d=open(sys.argv[1],"rb").read(); assert d[:4] == b"\x7fELF" and b"cf_scale_float32" in d' "$work/dp.o" ||
    fail "--emit-obj did not write an ELF object with the kernels"
fi
if run compile "$src/examples/broadcast.xml" --emit-llvm "$work/empty.ll"; then
  expect_rc 0 "--emit-llvm without reducing collectives" &&
    has "$ERR" "no reducing collectives" "--emit-llvm of an empty kernel list says so" &&
    has "$work/empty.ll" "target triple" "empty module"
  grep -q "define " "$work/empty.ll" && fail "the empty module defines a function"
fi
if run compile "$dp" --emit-llvm; then
  expect_rc 2 "--emit-llvm without a file" && has "$ERR" "--emit-llvm needs a value" "--emit-llvm without a file"
fi
if run compile "$dp" --emit-ptx "$work/no-such-dir/k.ptx"; then
  [ "$rc" -ne 0 ] || fail "--emit-ptx into a missing directory exited 0"
  has "$ERR" "no-such-dir/k.ptx: error: cannot write" "--emit-ptx into a missing directory"
fi
# -v: one line per kernel with its compile time; timings are never checked
export COLLFUSE_CACHE=off
if run compile "$dp" -v; then
  expect_rc 0 "compile -v" && has "$OUT" "jit: 7 kernels" "compile -v"
  for k in $dp_kernels; do
    grep -Eq "^jit: $k [0-9]+\.[0-9] ms\$" "$OUT" || fail "compile -v: no compile time for $k"
  done
fi
unset COLLFUSE_CACHE
if run compile "$dp" -v --json; then
  expect_rc 0 "compile -v --json" && has "$ERR" "jit: cf_scale_float32" "-v goes to stderr with --json"
  python3 -c 'import json,sys; json.load(open(sys.argv[1]))' "$OUT" || fail "compile -v --json: stdout is not one JSON object"
fi
# bench reduce: the JSON shape of a quick run (never its timings)
if run bench reduce --quick --json; then
  expect_rc 0 "bench reduce --quick --json" &&
    python3 - "$OUT" 2>"$work/json_err" <<'EOF' || fail "bench reduce --json: $(tail -n 1 "$work/json_err")"
import json, sys
d = json.load(open(sys.argv[1]))
assert d["bench"] == "reduce", d.get("bench")
r = d["results"]
want = {(t, o, k) for t in ("float32", "float16", "bfloat16", "int8") for o in ("sum", "max") for k in (2, 8)}
assert {(x["dtype"], x["op"], x["sources"]) for x in r} == want and len(r) == 16, r
cols = {"collfuse_nary", "collfuse_acc", "c_loop", "mpi_reduce_local", "memcpy"}
for x in r:
    assert x["bytes"] == 65536 and x["error"] is None, x
    assert set(x["gbps"]) == cols, x["gbps"]
    assert set(x["ratio"]) == {"acc_vs_mpi", "nary_vs_c_loop", "nary_vs_memcpy", "acc_vs_memcpy"}, x
    for c in cols - {"mpi_reduce_local"}:
        assert isinstance(x["gbps"][c], (int, float)) and x["gbps"][c] > 0, (c, x)
    if x["dtype"] in ("float16", "bfloat16"):  # no MPI datatype
        assert x["gbps"]["mpi_reduce_local"] is None and x["mpi_unavailable"], x
mpi = d["peers"]["mpi"]
assert isinstance(mpi["available"], bool) and (mpi["available"] or mpi["reason"]), mpi
assert {k["name"] for k in d["kernels"]} >= {"cf_nary_sum_float32_2", "cf_acc_max_int8"}, d["kernels"]
EOF
fi
if run bench reduce --sizes 3; then
  expect_rc 2 "bench reduce --sizes 3" && has "$ERR" "--sizes" "bench reduce --sizes 3"
fi
if run bench reduce --bogus; then
  expect_rc 2 "bench reduce --bogus" && has "$ERR" "unknown option '--bogus'" "bench reduce --bogus"
fi
if run bench --help; then
  expect_rc 0 "bench --help" && has "$OUT" "bench reduce" "bench --help"
fi
if run compile --help; then
  expect_rc 0 "compile --help" && has "$OUT" "--emit-ptx OUT" "compile --help" && has "$OUT" "-v " "compile --help"
fi

# ---------------------------------------------------------------- failed compile
bad="$src/tests/malformed/cycle.xml"
out="$work/never.xml"
if run compile "$bad" -o "$out"; then
  expect_rc 1 "compile of an invalid graph" && has "$ERR" "cycle.xml:4: error:" "compile of an invalid graph"
  [ -e "$out" ] && fail "a failed compile left $out behind"
  [ -e "$out.tmp" ] && fail "a failed compile left $out.tmp behind"
fi
# a graph that breaks its target: nothing written either
if run compile "$src/tests/malformed/target_a2_int64.xml" --target atlas-a2 -o "$out"; then
  expect_rc 1 "compile against a violated target" && has "$ERR" "target atlas-a2" "compile against a violated target"
  [ -e "$out" ] && fail "a compile rejected by its target left $out behind"
fi
# an unwritable destination is an error, not a silent success
if run compile "$src/examples/tp_block.xml" -o "$work/no-such-dir/out.xml"; then
  [ "$rc" -ne 0 ] || fail "compile -o into a missing directory exited 0"
  has "$ERR" "error:" "compile -o into a missing directory"
fi
# a device or FIFO destination is written in place, never replaced by a file
fifo="$work/out.fifo"
if mkfifo "$fifo" 2>/dev/null; then
  cat "$fifo" >"$work/from_fifo" &
  reader=$!
  if run compile "$src/examples/tp_block.xml" -o "$fifo"; then
    expect_rc 0 "compile -o FIFO"
    wait "$reader"
    [ -p "$fifo" ] || fail "compile -o FIFO replaced the FIFO"
    has "$work/from_fifo" '<graph name="tp_block"' "compile -o FIFO"
  else
    kill "$reader" 2>/dev/null
  fi
fi
if run dot "$src/examples/tp_block.xml" -o "$work/d.dot" && run compile "$src/examples/tp_block.xml" -o /dev/stdout; then
  expect_rc 0 "compile -o /dev/stdout" && has "$OUT" '<graph name="tp_block"' "compile -o /dev/stdout"
fi

if run compile "$bad" --json; then
  expect_rc 1 "compile --json of an invalid graph"
  [ -s "$OUT" ] && fail "compile --json of an invalid graph printed on stdout"
fi

finish cli.sh
