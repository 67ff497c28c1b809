#!/usr/bin/env python3
"""name_limit.py COLLFUSE: the node name limit (CF_MAX_NAME, 4096 bytes) holds
for every reader, and what a reader accepts round-trips.

For each input format (native XML, GraphML, HLO, GraphDef text) a graph whose
node names are exactly the limit long (a MatMul feeding an AllReduce, so the
fusion passes make names out of two such names, and, in the GraphDef, an
output made up from the AllReduce's name) must pass `compile -o OUT.xml`
(with and without --target atlas-a2, whose pipeline fuses the pair into a
MatmulAllReduce) and OUT.xml must pass `check`; a graph with one name a byte
over the limit must be refused (exit 1) with a message that names the node
and the limit. A name of 3-byte UTF-8 characters is within the schema's
4096 characters but over 4096 bytes: refused the same way.
"""
import os
import subprocess
import sys
import tempfile

LIMIT = 4096


def name(c, n):
    return c + "x" * (n - 1)


def xml(n, x):
    a, b, mm, ar, y = name("a", n), name("b", n), name("m", n), x, name("y", n)
    return f"""<?xml version="1.0" encoding="UTF-8"?>
<graph name="limit" version="1" world_size="4">
  <node name="{a}" op="Input" dtype="float32" shape="16,8"/>
  <node name="{b}" op="Input" dtype="float32" shape="8,4"/>
  <node name="{mm}" op="MatMul"><input ref="{a}"/><input ref="{b}"/></node>
  <node name="{ar}" op="AllReduce"><input ref="{mm}"/></node>
  <node name="{y}" op="Output"><input ref="{ar}"/></node>
</graph>
"""


def graphml(n, x):
    a, b, mm, ar, y = name("a", n), name("b", n), name("m", n), x, name("y", n)
    nodes = "".join(
        f'<node id="{i}"><data key="op">{op}</data>{extra}</node>\n'
        for i, op, extra in [
            (a, "Input", '<data key="dt">float32</data><data key="sh">16,8</data>'),
            (b, "Input", '<data key="dt">float32</data><data key="sh">8,4</data>'),
            (mm, "MatMul", ""), (ar, "AllReduce", ""), (y, "Output", "")])
    edges = (f'<edge source="{a}" target="{mm}"><data key="p">0</data></edge>\n'
             f'<edge source="{b}" target="{mm}"><data key="p">1</data></edge>\n'
             f'<edge source="{mm}" target="{ar}"/>\n<edge source="{ar}" target="{y}"/>\n')
    return f"""<?xml version="1.0" encoding="UTF-8"?>
<graphml xmlns="http://graphml.graphdrawing.org/xmlns">
<key id="ws" for="graph" attr.name="world_size" attr.type="long"/>
<key id="op" for="node" attr.name="op" attr.type="string"/>
<key id="dt" for="node" attr.name="dtype" attr.type="string"/>
<key id="sh" for="node" attr.name="shape" attr.type="string"/>
<key id="p" for="edge" attr.name="dst_port" attr.type="long"/>
<graph edgedefault="directed"><data key="ws">4</data>
{nodes}{edges}</graph></graphml>
"""


def hlo(n, x):
    # the ENTRY's parameters and the reduction's own names are short: the
    # limit is checked on the instructions that become nodes
    a, b, mm, ar = name("a", n), name("b", n), name("m", n), x
    return f"""HloModule limit, replica_count=4

sum {{
  p = f32[] parameter(0)
  q = f32[] parameter(1)
  ROOT r = f32[] add(p, q)
}}

ENTRY main {{
  {a} = f32[16,8] parameter(0)
  {b} = f32[8,4] parameter(1)
  {mm} = f32[16,4] dot({a}, {b}), lhs_contracting_dims={{1}}, rhs_contracting_dims={{0}}
  ROOT {ar} = f32[16,4] all-reduce({mm}), replica_groups={{{{0,1,2,3}}}}, to_apply=sum
}}
"""


def pbtxt(n, x):
    # no _Retval: the reader makes an Output named '<AllReduce>:output'
    a, b, mm, ar = name("a", n), name("b", n), name("m", n), x

    def ph(nm, dims):
        d = " ".join(f"dim {{ size: {k} }}" for k in dims)
        return (f'node {{ name: "{nm}" op: "Placeholder" attr {{ key: "dtype" value {{ type: '
                f'DT_FLOAT }} }} attr {{ key: "shape" value {{ shape {{ {d} }} }} }} }}\n')

    return (ph(a, [16, 8]) + ph(b, [8, 4]) +
            f'node {{ name: "{mm}" op: "MatMul" input: "{a}" input: "{b}" '
            f'attr {{ key: "T" value {{ type: DT_FLOAT }} }} }}\n'
            f'node {{ name: "{ar}" op: "HcomAllReduce" input: "{mm}" '
            f'attr {{ key: "T" value {{ type: DT_FLOAT }} }} '
            f'attr {{ key: "reduction" value {{ s: "sum" }} }} '
            f'attr {{ key: "rank_size" value {{ i: 4 }} }} }}\n')


def run(cf, *args):
    p = subprocess.run([cf, *args], capture_output=True, text=True, errors="replace")
    return p.returncode, p.stderr


def main():
    cf = sys.argv[1]
    fails = 0

    def bad(what, rc, err):
        nonlocal fails
        fails += 1
        print(f"FAIL {what}: exit {rc}\n{err[-1500:]}", file=sys.stderr)

    with tempfile.TemporaryDirectory() as d:
        for ext, gen in [("xml", xml), ("graphml", graphml), ("hlo", hlo), ("pbtxt", pbtxt)]:
            src = os.path.join(d, f"limit.{ext}")
            with open(src, "w") as f:
                f.write(gen(LIMIT, name("r", LIMIT)))
            for target in [[], ["--target", "atlas-a2"]]:
                out = os.path.join(d, f"out.{ext}.xml")
                what = f"{ext} {' '.join(target)}: names of {LIMIT} bytes"
                rc, err = run(cf, "compile", src, "-o", out, *target)
                if rc != 0:
                    bad(what + ": compile", rc, err)
                    continue
                rc, err = run(cf, "check", out, *target)
                if rc != 0:
                    bad(what + ": check of the written XML", rc, err)
                    continue
                if ext == "xml" or not target:
                    continue
                # the fused node's name is made of two names of the limit
                with open(out) as f:
                    text = f.read()
                if "MatmulAllReduce" not in text:
                    bad(what + ": no MatmulAllReduce in the written XML", 0, text[:300])

            over = name("r", LIMIT + 1)
            with open(src, "w") as f:
                f.write(gen(LIMIT, over))
            rc, err = run(cf, "check", src)
            # the schema speaks of characters, the other readers of bytes
            want = (f"is not a name: expected 1 to {LIMIT} characters" if ext == "xml" else
                    f"'{over[:40]}...': name longer than {LIMIT} bytes")
            if rc != 1 or want not in err or not err.startswith(f"{src}:"):
                bad(f"{ext}: a name of {LIMIT + 1} bytes (want exit 1 and '{want}')", rc, err)

        # characters within the schema's 4096, bytes over the limit
        wide = "\u00e9" * 2049  # 4098 bytes, 2049 characters
        src = os.path.join(d, "wide.xml")
        with open(src, "w", encoding="utf-8") as f:
            f.write(xml(8, wide))
        rc, err = run(cf, "check", src)
        want = f"node '{wide[:20]}...': name longer than {LIMIT} bytes"
        if rc != 1 or want not in err:
            bad(f"xml: a name of 2049 two-byte characters (want exit 1 and '{want}')", rc, err)

    if fails:
        print(f"name_limit.py: {fails} case(s) failed", file=sys.stderr)
        return 1
    print("name_limit.py: all cases passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
