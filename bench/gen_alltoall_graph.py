#!/usr/bin/env python3
"""gen_alltoall_graph.py KIND [--ranks N] [--bytes SIZE] [--count C]: a graph
of C independent collectives of KIND (alltoall or allgather) that move the
same bytes, for comparing AllToAll's speed with AllGather's.

Every rank receives (N-1)/N of SIZE bytes per collective in both: an AllToAll
of a SIZE-byte float32 input (split and concatenated along dim 0), or an
AllGather (concat) of a SIZE/N-byte input whose output is SIZE bytes. Inputs
are zeros so that filling them costs the same little in both.
"""
import argparse
import sys


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("kind", choices=("alltoall", "allgather"))
    ap.add_argument("--ranks", type=int, default=4)
    ap.add_argument("--bytes", type=int, default=4 << 20, help="bytes each rank ends up with")
    ap.add_argument("--count", type=int, default=16)
    a = ap.parse_args()
    elems = a.bytes // 4 // a.ranks * a.ranks
    shape = elems if a.kind == "alltoall" else elems // a.ranks
    out = [f'<graph name="{a.kind}" version="1" world_size="{a.ranks}">']
    for i in range(a.count):
        out.append(f'  <node name="x{i}" op="Input" dtype="float32" shape="{shape}" init="zeros"/>')
        if a.kind == "alltoall":
            out.append(f'  <node name="c{i}" op="AllToAll"><input ref="x{i}"/></node>')
        else:
            out.append(f'  <node name="c{i}" op="AllGather" layout="concat"><input ref="x{i}"/></node>')
        out.append(f'  <node name="y{i}" op="Output"><input ref="c{i}"/></node>')
    out.append("</graph>")
    sys.stdout.write("\n".join(out) + "\n")


if __name__ == "__main__":
    main()
