"""grads_graph.py: a native XML graph of gradients, one AllReduce each, in
ready order (what DDP's and Inductor's bucketing see), for ddp_buckets.py
and peers.py."""


def grads_xml(grads, world_size=2):
    """grads: [(dtype, elements), ...] -> XML; gradient i is Input g<i>,
    AllReduce ar<i>, Output o<i>."""
    out = ['<?xml version="1.0" encoding="UTF-8"?>', f'<graph name="grads" world_size="{world_size}">']
    for i, (dt, n) in enumerate(grads):
        out.append(f'  <node name="g{i}" op="Input" dtype="{dt}" shape="{n}"/>')
        out.append(f'  <node name="ar{i}" op="AllReduce"><input ref="g{i}"/></node>')
        out.append(f'  <node name="o{i}" op="Output"><input ref="ar{i}"/></node>')
    return "\n".join(out + ["</graph>"]) + "\n"
