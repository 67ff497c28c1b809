#!/usr/bin/env python3
"""gen_gpt2_grads.py - write GPT-2's gradient graph for `collfuse bench fusion`.

The data-parallel gradient graph of GPT-2 (the 124M model: 12 blocks, width
768, vocabulary 50257, 1024 positions; parameter names as in Hugging Face
transformers, the tied lm_head counted once) in the GraphML conventions of
examples/graphml (one float32 Input, one mean AllReduce with fusion=1 and
one Output per gradient, in backward order): 148 gradients, 124,439,808
parameters (474.7 MiB). --layers writes a deeper or shallower model.

    python3 bench/gen_gpt2_grads.py /tmp/gpt2.dp8.graphml
    build/collfuse bench fusion /tmp/gpt2.dp8.graphml --ranks 4

The output is generated, not committed (about 0.1 MB).
"""
import argparse
import sys


def params(layers, width, vocab, positions):
    p = [("transformer.wte.weight", (vocab, width)), ("transformer.wpe.weight", (positions, width))]
    for i in range(layers):
        h = "transformer.h.%d." % i
        p += [(h + "ln_1.weight", (width,)), (h + "ln_1.bias", (width,)),
              (h + "attn.c_attn.weight", (width, 3 * width)), (h + "attn.c_attn.bias", (3 * width,)),
              (h + "attn.c_proj.weight", (width, width)), (h + "attn.c_proj.bias", (width,)),
              (h + "ln_2.weight", (width,)), (h + "ln_2.bias", (width,)),
              (h + "mlp.c_fc.weight", (width, 4 * width)), (h + "mlp.c_fc.bias", (4 * width,)),
              (h + "mlp.c_proj.weight", (4 * width, width)), (h + "mlp.c_proj.bias", (width,))]
    p += [("transformer.ln_f.weight", (width,)), ("transformer.ln_f.bias", (width,))]
    return p[::-1]  # backward order: the last layer's gradients first


def write_grads(path, graph_name, world_size, grads):
    """Write the gradient graph of grads ((name, shape) in backward order) to
    path: one float32 Input, one mean AllReduce with fusion=1 and one Output
    per gradient, the GraphML keys of examples/graphml. gen_llama_grads.py
    writes with it too."""
    keys = [("d10", "edge", "dst_port", "long"), ("d9", "edge", "src_port", "long"),
            ("d8", "node", "fusion_id", "long"), ("d7", "node", "fusion", "long"),
            ("d6", "node", "group", "string"), ("d5", "node", "reduction", "string"),
            ("d4", "node", "shape", "string"), ("d3", "node", "dtype", "string"),
            ("d2", "node", "op", "string"), ("d1", "graph", "world_size", "long"),
            ("d0", "graph", "name", "string")]
    out = ["<?xml version='1.0' encoding='utf-8'?>",
           '<graphml xmlns="http://graphml.graphdrawing.org/xmlns">']
    out += ['<key id="%s" for="%s" attr.name="%s" attr.type="%s"/>' % k for k in keys]
    out += ['<graph edgedefault="directed"><data key="d0">%s</data>' % graph_name,
            '<data key="d1">%d</data>' % world_size]
    edges = []
    for name, shape in grads:
        g, r, o = "grad/" + name, "allreduce/" + name, "out/" + name
        out += ['<node id="%s">' % g, '  <data key="d2">Input</data>', '  <data key="d3">float32</data>',
                '  <data key="d4">%s</data>' % ",".join(map(str, shape)), "</node>",
                '<node id="%s">' % r, '  <data key="d2">AllReduce</data>', '  <data key="d5">mean</data>',
                '  <data key="d6">hccl_world_group</data>', '  <data key="d7">1</data>',
                '  <data key="d8">-1</data>', "</node>",
                '<node id="%s">' % o, '  <data key="d2">Output</data>', "</node>"]
        edges += [(g, r), (r, o)]
    for s, t in edges:
        out += ['<edge source="%s" target="%s">' % (s, t), '  <data key="d9">0</data>',
                '  <data key="d10">0</data>', "</edge>"]
    out.append("</graph></graphml>")
    with open(path, "w") as f:
        f.write("\n".join(out) + "\n")


def generate(doc, what, layers, name, params_of):
    """The command line both generators share: OUT [--layers N] [--world-size W];
    name(layers, world_size) is the graph's name, params_of(layers) its
    gradients."""
    ap = argparse.ArgumentParser(description=doc.splitlines()[0])
    ap.add_argument("out", help="the .graphml file to write")
    ap.add_argument("--layers", type=int, default=layers, help="%s (default %d)" % (what, layers))
    ap.add_argument("--world-size", type=int, default=8, help="the graph's world_size (default 8)")
    a = ap.parse_args()
    if a.layers < 0 or a.world_size < 1:
        ap.error("--layers >= 0, --world-size >= 1")
    write_grads(a.out, name(a.layers, a.world_size), a.world_size, params_of(a.layers))
    return 0


def main() -> int:
    return generate(__doc__, "transformer blocks", 12, lambda layers, ws: "gpt2_dp%d" % ws,
                    lambda layers: params(layers, 768, 50257, 1024))


if __name__ == "__main__":
    sys.exit(main())
