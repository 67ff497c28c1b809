#!/usr/bin/env python3
"""refuse.py COLLFUSE SRCDIR: fusing what is already fused.

- An XLA CPU-optimised dump of a data-parallel step (written here: 136
  gradient all-reduces that XLA packed into 68 tuple all-reduces with
  `to_apply` add, in two dependency levels: the second level's gradients are
  computed from the first level's reduced ones) compiles with
  `--split bytes:25M` to one FusedAllReduce per level, every tuple joining a
  bucket whole (`--explain` says which ports), and runs with --verify.
- compile is idempotent: over 25 random graphs of gen_random_graphs.py and
  several --split specs, compiling compile's own output again writes the same
  file and the same --json (node and collective counts, bytes, buckets,
  fingerprint); only collectives_before and the pass times may differ (the
  second input is already fused).
- fusion=0 on a fused input node keeps it alone, and --explain says so; a
  fusion=2 one joins only its fusion_id.
"""
import json
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from checks import cf, fail  # noqa: E402
import checks  # noqa: E402

SPLITS = ["auto", "bytes:4K", "bytes:2K,count=3", "bytes:1K,first=512", "size:60,40"]


def tuple_dump(levels=2, tuples=34, world=4):
    """An HLO module like XLA's CPU dump after its all-reduce combiner: per
    level `tuples` tuple all-reduces of two f32 gradients each."""
    lines = [f"HloModule dp_step, replica_count={world}", "",
             "%add.f32 {", "  %x = f32[] parameter(0)", "  %y = f32[] parameter(1)",
             "  ROOT %s = f32[] add(%x, %y)", "}", "", "ENTRY %main {"]
    groups = "{{" + ",".join(str(r) for r in range(world)) + "}}"
    outs, prev, chan = [], [], 1
    for lv in range(levels):
        cur = []
        for t in range(tuples):
            ops = []
            for k in range(2):
                i = 2 * t + k
                shape = f"f32[{64 + 8 * (i % 5)},32]"
                if lv == 0:
                    lines.append(f"  %p{lv}.{i} = {shape}{{1,0}} parameter({i})")
                    ops.append((f"%p{lv}.{i}", shape))
                else:
                    # the next layer's gradient needs the reduced one
                    src, sshape = prev[i]
                    lines.append(f"  %d{lv}.{i} = {sshape}{{1,0}} multiply({src}, {src})")
                    ops.append((f"%d{lv}.{i}", sshape))
            ty = "(" + ", ".join(s + "{1,0}" for _, s in ops) + ")"
            lines.append(f"  %all-reduce.{lv}.{t} = {ty} all-reduce({', '.join(n for n, _ in ops)}), "
                         f"channel_id={chan}, replica_groups={groups}, to_apply=%add.f32")
            chan += 1
            for k, (_, s) in enumerate(ops):
                g = f"%gte.{lv}.{t}.{k}"
                lines.append(f"  {g} = {s}{{1,0}} get-tuple-element(%all-reduce.{lv}.{t}), index={k}")
                cur.append((g, s))
        prev = cur
        outs += cur
    # every reduced gradient is a result of the step
    lines.append(f"  ROOT %out = ({', '.join(s + '{1,0}' for _, s in outs)}) "
                 f"tuple({', '.join(g for g, _ in outs)})")
    lines.append("}")
    return "\n".join(lines) + "\n"


def counts(path, *extra):
    p = cf("compile", path, "--json", *extra)
    return json.loads(p.stdout) if p.returncode == 0 else None


def test_xla_dump(d):
    path = os.path.join(d, "dp_step.hlo")
    with open(path, "w") as f:
        f.write(tuple_dump())
    j = counts(path, "--split", "bytes:25M")
    if j is None:
        return
    print(f"68-tuple dump: collectives_before={j['collectives_before']} "
          f"collectives_after={j['collectives_after']}")
    if (j["collectives_before"], j["collectives_after"]) != (68, 2):
        fail(f"XLA dump: {j['collectives_before']} -> {j['collectives_after']} collectives, expected 68 -> 2")
    sizes = sorted(len(b["members"]) for b in j["buckets"])
    if sizes != [68, 68]:
        fail(f"XLA dump: bucket member counts {sizes}, expected [68, 68]")
    if not all(m.startswith("all-reduce.") and "#" in m for b in j["buckets"] for m in b["members"]):
        fail("XLA dump: members are not the tuple elements NAME#i")
    p = cf("compile", path, "--split", "bytes:25M", "--explain")
    want = "explain: FusedAllReduce 'all-reduce.1.0' -> 'allreduce_bucket_1' as ports 0-1 (split bytes cap=25M, 68 members,"
    if want not in p.stdout:
        fail(f"XLA dump --explain: no line '{want}'\n{p.stdout[:2000]}")
    # a smaller cap cuts a level between tuples, never inside one
    j = counts(path, "--split", "bytes:100K")
    if j and any(len(b["members"]) % 2 for b in j["buckets"]):
        fail("bytes:100K split a tuple: " + str([len(b["members"]) for b in j["buckets"]]))
    cf("run", path, "--split", "bytes:25M", "--verify", "--ranks", "4")
    out = os.path.join(d, "dp_step.xml")
    cf("compile", path, "--split", "bytes:25M", "-o", out)
    cf("run", out, "--verify", "--ranks", "4")


def test_idempotent(d):
    rd = os.path.join(d, "rand")
    subprocess.run([sys.executable, os.path.join(SRC, "tests/e2e/gen_random_graphs.py"), rd, "25", "19"],
                   check=True)
    checked = 0
    for i in GRAPHS:
        src = os.path.join(rd, f"rand{i}.xml")
        for sp in SPLITS:
            a, b = os.path.join(d, "a.xml"), os.path.join(d, "b.xml")
            if cf("compile", src, "--split", sp, "-o", a).returncode:
                continue
            if cf("compile", a, "--split", sp, "-o", b).returncode:
                continue
            with open(a) as fa, open(b) as fb:
                if fa.read() != fb.read():
                    fail(f"rand{i}.xml --split {sp}: compiling the output again changed it")
            ja, jb = counts(src, "--split", sp), counts(a, "--split", sp)
            if ja is None or jb is None:
                continue
            for k in ("pass_ms", "collectives_before"):
                ja.pop(k, None), jb.pop(k, None)
            if ja != jb:
                diff = [k for k in ja if ja[k] != jb.get(k)]
                fail(f"rand{i}.xml --split {sp}: --json of the second compile differs in {diff}")
            checked += 1
    if checked < 4 * len(GRAPHS):  # most of the 5 splits of each graph
        fail(f"only {checked} idempotence cases ran")


FUSED_INPUT = """<?xml version="1.0" encoding="UTF-8"?>
<graph name="refuse" version="1" world_size="2">
  <node name="a" op="Input" dtype="float32" shape="16"/>
  <node name="b" op="Input" dtype="float32" shape="8"/>
  <node name="c" op="Input" dtype="float32" shape="4"/>
  <node name="e" op="Input" dtype="float32" shape="4"/>
  <node name="keep" op="FusedAllReduce" fusion="0" members="k0,k1"><input ref="a"/><input ref="b"/></node>
  <node name="ar" op="AllReduce"><input ref="c"/></node>
  <node name="tup" op="FusedAllReduce" members="t0,t1"><input ref="a"/><input ref="b"/></node>
  <node name="pin" op="FusedAllReduce" fusion="2" fusion_id="3" members="p0,p1"><input ref="c"/><input ref="e"/></node>
  <node name="ar2" op="AllReduce" fusion="2" fusion_id="3"><input ref="e"/></node>
  <node name="o0" op="Output"><input ref="keep" port="1"/></node>
  <node name="o1" op="Output"><input ref="ar"/></node>
  <node name="o2" op="Output"><input ref="tup" port="1"/></node>
  <node name="o3" op="Output"><input ref="pin" port="1"/></node>
  <node name="o4" op="Output"><input ref="ar2"/></node>
</graph>
"""


def test_fusion_attrs(d):
    path = os.path.join(d, "fused_input.xml")
    with open(path, "w") as f:
        f.write(FUSED_INPUT)
    p = cf("compile", path, "--split", "bytes:25M", "--explain")
    for want in [
        "explain: FusedAllReduce 'keep' stays alone: fusion=0",
        "explain: FusedAllReduce 'tup' -> 'allreduce_bucket_1' as ports 0-1 (split bytes cap=25M, 3 members, 112 bytes)",
        "explain: AllReduce 'ar' -> 'allreduce_bucket_1' (split bytes cap=25M, 3 members, 112 bytes)",
        "explain: FusedAllReduce 'pin' -> 'allreduce_bucket_0' as ports 0-1 (fusion_id=3, 3 members, 48 bytes)",
        "explain: AllReduce 'ar2' -> 'allreduce_bucket_0' (fusion_id=3, 3 members, 48 bytes)",
    ]:
        if want not in p.stdout:
            fail(f"fused input --explain: no line '{want}'\n{p.stdout}")
    out = os.path.join(d, "fused_out.xml")
    cf("compile", path, "--split", "bytes:25M", "-o", out)
    with open(out) as f:
        text = f.read()
    if 'members="t0,t1,ar"' not in text or 'offsets="0,64,128"' not in text:
        fail("fused input: the bucket of 'tup' and 'ar' does not list members t0,t1,ar at 0,64,128\n" + text)
    if 'members="p0,p1,ar2"' not in text:
        fail("fused input: the fusion_id=3 bucket does not list members p0,p1,ar2\n" + text)
    if '<node name="keep" op="FusedAllReduce" fusion="0" members="k0,k1"' not in text:
        fail("fused input: the fusion=0 node changed\n" + text)
    cf("run", path, "--split", "bytes:25M", "--verify")


CF, SRC = sys.argv[1], sys.argv[2]
checks.CF = CF
# PART (tests/e2e/lib.sh): fast checks 5 of the random graphs for
# idempotence (ctest's e2e/refuse), long only the other 20
# (e2e/refuse_long, label long); unset, everything runs
PART = os.environ.get("PART", "")
GRAPHS = {"fast": range(5), "long": range(5, 25)}.get(PART, range(25))
with tempfile.TemporaryDirectory(prefix="cf-refuse.") as tmp:
    if PART != "long":
        test_xla_dump(tmp)
        test_fusion_attrs(tmp)
    test_idempotent(tmp)
checks.finish("refuse.py")
