#!/bin/sh
# profile.sh COLLFUSE SRCDIR
#
# A measured profile (docs/executor.md, "Profiles"): `bench allreduce
# --save-profile` writes it (a round trip that keeps other entries), run's
# auto reads its rules and compile's --split auto its alpha/beta, a
# malformed one is refused naming FILE:LINE (exit 1), and without one the
# built-in rules hold. HOME and XDG_CONFIG_HOME point into a scratch
# directory: the user's own profile is never read.
set -u

if [ $# -ne 2 ]; then
  echo "usage: profile.sh COLLFUSE SRCDIR" >&2
  exit 2
fi
cf=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
src=$(cd "$2" && pwd)

work=$(mktemp -d "${TMPDIR:-/tmp}/cf-profile.XXXXXX") || exit 2
trap 'rm -rf "$work"' EXIT
trap 'exit 130' INT TERM

. "$(dirname "$0")/lib.sh"

HOME=$work/home
XDG_CONFIG_HOME=$work/config
export HOME XDG_CONFIG_HOME
unset COLLFUSE_PROFILE
prof=$XDG_CONFIG_HOME/collfuse/profile
ex=$src/examples
LIMIT=120

# algo_of NAME: the algorithm `run -v` printed for collective NAME
algo_of() {
  sed -n "s/^run:   AllReduce '$1' .*: \([a-z-]*\).*/\1/p" "$ERR"
}

# uses WANT NAME WHAT: the last run -v ran NAME with WANT
uses() {
  got=$(algo_of "$2")
  [ "$got" = "$1" ] || fail "$3: '$2' ran '$got', expected '$1'"
}

# two AllReduces for any rank count: 4 KiB and 4 MiB per rank
cat >"$work/two.xml" <<'G'
<graph name="two" version="1" world_size="2">
  <node name="a" op="Input" dtype="float32" shape="1024"/>
  <node name="b" op="Input" dtype="float32" shape="1048576"/>
  <node name="ar_small" op="AllReduce" reduction="sum" fusion="0"><input ref="a"/></node>
  <node name="ar_big" op="AllReduce" reduction="sum" fusion="0"><input ref="b"/></node>
  <node name="oa" op="Output"><input ref="ar_small"/></node>
  <node name="ob" op="Output"><input ref="ar_big"/></node>
  <node name="ia" op="Output"><input ref="a"/></node>
  <node name="ib" op="Output"><input ref="b"/></node>
</graph>
G

# A profile is measured out of place and serves out-of-place calls (an
# Output also reads each input): 48 KiB and 4 MiB on 4 ranks; ar_ip's input
# has no other reader, so it runs in place under the built-in rule.
cat >"$work/four.xml" <<'G'
<graph name="four" version="1" world_size="4">
  <node name="x" op="Input" dtype="float32" shape="12288"/>
  <node name="y" op="Input" dtype="float32" shape="1048576"/>
  <node name="z" op="Input" dtype="float32" shape="12288"/>
  <node name="ar_x" op="AllReduce" reduction="sum" fusion="0"><input ref="x"/></node>
  <node name="ar_y" op="AllReduce" reduction="sum" fusion="0"><input ref="y"/></node>
  <node name="ar_ip" op="AllReduce" reduction="sum" fusion="0"><input ref="z"/></node>
  <node name="ox" op="Output"><input ref="ar_x"/></node>
  <node name="oy" op="Output"><input ref="ar_y"/></node>
  <node name="oz" op="Output"><input ref="ar_ip"/></node>
  <node name="ix" op="Output"><input ref="x"/></node>
  <node name="iy" op="Output"><input ref="y"/></node>
</graph>
G

# ---- no profile: the built-in rules (48 KiB on 4 ranks: rsag)
run run "$work/four.xml" -v
expect_rc 0 "run without a profile"
uses rsag ar_x "run without a profile"
[ ! -e "$prof" ] || fail "run wrote a profile"
run compile "$ex/dp_gradients.xml" --explain
has "$OUT" "split auto: 1 bucket, model exposes 282 us, 3 members" "split auto's built-in cost"
if grep -q "profile's" "$OUT"; then fail "split auto named a profile without one"; fi

# ---- a profile that forces a choice changes run -v's algorithm
mkdir -p "$XDG_CONFIG_HOME/collfuse"
cat >"$prof" <<'P'
collfuse-profile 1
# hand-written: ring everywhere on 4 ranks
link threads 4 5 20
algo threads 4 0 0 ring
link threads 8 5 20
P
run run "$work/four.xml" -v
expect_rc 0 "run with the default profile"
uses ring ar_x "the default profile's rule"
uses ring ar_y "the default profile's rule"
uses rsag ar_ip "an in-place call keeps the built-in rule"
grep -q "AllReduce 'ar_ip' .* in place" "$ERR" || fail "ar_ip should run in place"
run run "$work/four.xml" -v --profile none
uses rsag ar_x "--profile none"
run run "$work/four.xml" -v --algo direct
uses direct ar_x "--algo over the profile"
run run "$work/four.xml" -v --deterministic
uses rsag ar_x "--deterministic passes over ring's rule"
run run "$work/two.xml" -v --ranks 2
uses rd ar_small "no rule for 2 ranks: built-in"
uses rsag ar_big "no rule for 2 ranks: built-in"
run run "$work/four.xml" --verify
expect_rc 0 "run --verify with the profile"
has "$OUT" "verified" "run --verify with the profile"
cp "$prof" "$work/other"
printf 'algo threads 4 0 0 direct\n' >"$work/two"
{ head -n 1 "$prof"; cat "$work/two"; } >"$work/first"
COLLFUSE_PROFILE=$work/first run run "$work/four.xml" -v
unset COLLFUSE_PROFILE
uses direct ar_x "COLLFUSE_PROFILE (every size: direct)"

# ---- split auto reads alpha/beta (the threads link for the graph's 8 ranks)
run compile "$ex/dp_gradients.xml" --explain
has "$OUT" "split auto: 2 buckets, model exposes 18 us, profile's alpha 5 us, beta 20 GB/s" \
  "split auto with the profile's link"
run compile "$ex/dp_gradients.xml" --explain --cost 250,8
if grep -q "profile's" "$OUT"; then fail "--cost should win over the profile"; fi
has "$OUT" "split auto: 1 bucket, model exposes 282 us" "--cost over the profile"

# ---- round trip: bench allreduce --save-profile keeps the other entries
quick="--sizes 8,64K --no-mpi --loops 1 --iters 2"
# shellcheck disable=SC2086 # $quick is several words
run bench allreduce --ranks 2 $quick --save-profile
expect_last 0 "profile of threads on 2 ranks saved to $prof" "bench allreduce --save-profile"
has "$prof" "link threads 2 " "the saved link"
has "$prof" "algo threads 2 0 " "the saved rules start at 0 bytes"
has "$prof" "algo threads 4 0 0 ring" "the hand-written entry kept"
has "$prof" "link threads 8 5 20" "the other link kept"
[ "$(head -n 1 "$prof")" = "collfuse-profile 1" ] || fail "the first line names the format"
n=$(grep -c '^algo threads 2 .* 0 [a-z]*$' "$prof")
[ "$n" -eq 1 ] || fail "exactly one rule runs to no bound, got $n"
cp "$prof" "$work/saved"
run run "$work/two.xml" -v --ranks 2
expect_rc 0 "run reads the saved profile"
# what run picks is what the saved rules say for 4 KiB and 4 MiB
want_small=$(awk '$1 == "algo" && $3 == 2 && $4 <= 4096 && ($5 == 0 || $5 >= 4096) {print $6}' "$prof")
want_big=$(awk '$1 == "algo" && $3 == 2 && $4 <= 4194304 && ($5 == 0 || $5 >= 4194304) {print $6}' "$prof")
uses "$want_small" ar_small "the saved rule at 4 KiB"
uses "$want_big" ar_big "the saved rule at 4 MiB"
# read back and written again: another rank count's entry is added, the
# saved 2-rank lines stay byte for byte, a hand-written entry stays
cp "$work/saved" "$work/merge"
echo "algo threads 16 0 0 rd" >>"$work/merge"
# shellcheck disable=SC2086
run bench allreduce --ranks 4 $quick --save-profile --profile "$work/merge"
expect_last 0 "profile of threads on 4 ranks saved to $work/merge" "--save-profile --profile FILE"
has "$work/merge" "algo threads 16 0 0 rd" "the merged file keeps its entry"
has "$work/merge" "link threads 4 " "the merged file gains the measurement"
if grep -q "^link threads 4 5 20$" "$work/merge"; then fail "the 4-rank entry was not replaced"; fi
grep ' threads 2 ' "$work/saved" >"$work/two.before"
grep ' threads 2 ' "$work/merge" >"$work/two.after"
cmp -s "$work/two.before" "$work/two.after" || fail "the 2-rank entry changed in the round trip"
cmp -s "$prof" "$work/saved" || fail "--profile FILE wrote the default profile"
# bench's auto column reads the profile
printf 'collfuse-profile 1\nalgo threads 2 0 0 ring\n' >"$work/ring2"
run bench allreduce --ranks 2 --sizes 64K --no-mpi --loops 1 --iters 1 --algo ring --profile "$work/ring2"
expect_rc 0 "bench allreduce --profile"
grep -Eq '^ +64K +1 \| +ring ' "$OUT" || fail "bench's auto column should run ring from the profile"
# nowhere to save without a home (and no --profile FILE)
checks=$((checks + 1))
env -u HOME -u XDG_CONFIG_HOME "$cf" bench allreduce --ranks 2 --quick --no-mpi --save-profile \
  >"$OUT" 2>"$ERR"
rc=$?
expect_last 2 "--save-profile: neither XDG_CONFIG_HOME nor HOME is set (give --profile FILE)" \
  "--save-profile without a home"
expect 2 "--save-profile measures every algorithm: leave --algo out" \
  bench allreduce --ranks 2 --quick --no-mpi --algo ring --save-profile

# ---- malformed profiles: FILE:LINE, exit 1, for run, compile, bench and the untouched file
bad() { # bad LINE_NO MESSAGE TEXT...: the profile of TEXT lines is refused at LINE_NO with MESSAGE
  no=$1
  msg=$2
  shift 2
  printf '%s\n' "$@" >"$work/bad"
  cp "$work/bad" "$work/bad.orig"
  expect 1 "$work/bad:$no: error: profile: $msg" run "$ex/fused_buckets.xml" --profile "$work/bad"
  expect 1 "$work/bad:$no: error: profile: $msg" compile "$ex/dp_gradients.xml" --profile "$work/bad"
  expect 1 "$work/bad:$no: error: profile: $msg" \
    bench allreduce --ranks 2 --quick --no-mpi --save-profile --profile "$work/bad"
  cmp -s "$work/bad" "$work/bad.orig" || fail "--save-profile rewrote a malformed profile"
}
bad 1 "expected 'collfuse-profile 1' as the first line" "algo threads 2 0 0 ring"
bad 1 "expected 'collfuse-profile 1' as the first line" "collfuse-profile 2"
bad 3 "unknown algorithm 'rung'" "collfuse-profile 1" "# c" "algo threads 2 0 0 rung"
bad 2 "unknown transport 'tcp' (threads, mpi or shm)" "collfuse-profile 1" "algo tcp 2 0 0 ring"
bad 2 "ranks wants 2..256, got '1'" "collfuse-profile 1" "link threads 1 5 20"
bad 2 "byte range '100 10' wants 0 <= MIN <= MAX (MAX 0: no bound)" "collfuse-profile 1" \
  "algo threads 2 100 10 ring"
bad 2 "'link' wants TRANSPORT RANKS ALPHA_US BETA_GBPS" "collfuse-profile 1" "link threads 2 5"
bad 2 "beta_gbps wants a number > 0, got '0'" "collfuse-profile 1" "link threads 2 5 0"
bad 2 "alpha_us wants a number >= 0, got 'x'" "collfuse-profile 1" "link threads 2 x 1"
bad 2 "unknown line 'rule' (link or algo)" "collfuse-profile 1" "rule threads 2 0 0 ring"
: >"$work/empty"
expect 1 "$work/empty:1: error: profile: expected 'collfuse-profile 1' as the first line" \
  run "$ex/fused_buckets.xml" --profile "$work/empty"
expect 1 "$work/none-here: error: profile: cannot open: No such file or directory" \
  run "$ex/fused_buckets.xml" --profile "$work/none-here"
COLLFUSE_PROFILE=$work/none-here expect 1 "$work/none-here: error: profile: cannot open" \
  run "$ex/fused_buckets.xml"
unset COLLFUSE_PROFILE
# the default profile malformed: refused too, never ignored
printf 'collfuse-profile 1\nalgo threads 2 0 0 rung\n' >"$prof"
expect 1 "$prof:2: error: profile: unknown algorithm 'rung'" run "$ex/fused_buckets.xml"

# ---- lines of any length are read whole. A 5000-byte comment line whose
# tail (past byte 1023, and past each 1023 bytes after: where a 1 KiB line
# buffer would cut it) looks like a directive is a comment all the same.
python3 - "$work" <<'EOF_PY'
import sys
w = sys.argv[1]
line = bytearray(b"#" + b"x" * 4999)
hidden = b"algo threads 4 0 0 direct #"
line[1023:1023 + len(hidden)] = hidden
for cut in range(2046, 5000, 1023):
    line[cut] = ord("#")
with open(w + "/hidden", "wb") as f:
    f.write(b"collfuse-profile 1\n" + bytes(line) + b"\n")
with open(w + "/long", "wb") as f:
    f.write(b"collfuse-profile 1\n# " + b"y" * 5000 + b"\nalgo threads 4 0 0 ring " + b" " * 3000 + b"# ok\n")
with open(w + "/long_bad", "wb") as f:
    f.write(b"collfuse-profile 1\n# " + b"y" * 5000 + b"\nalgo threads 4 0 0 rung\n")
EOF_PY
run run "$work/four.xml" -v --profile "$work/hidden"
expect_rc 0 "a profile with a 5000-byte comment line"
uses rsag ar_x "a directive hidden in a long comment is no rule"
run run "$work/four.xml" -v --profile "$work/long"
expect_rc 0 "a valid profile with long lines"
uses ring ar_x "the rule after a 5000-byte line"
expect 1 "$work/long_bad:3: error: profile: unknown algorithm 'rung'" \
  run "$ex/fused_buckets.xml" --profile "$work/long_bad"

finish profile.sh
