#!/usr/bin/env python3
"""gen_llama_grads.py - write a Llama-7B-sized gradient graph (4 GiB per rank).

The data-parallel gradient graph of the first layers of Llama 7B (Touvron et
al. 2023, "LLaMA: Open and Efficient Foundation Language Models", table 2:
width 4096, 32 heads, 32 layers; SwiGLU MLP of width 11008; vocabulary 32000;
RMSNorm without bias; embedding and lm_head untied). Parameter names and
shapes are those of Hugging Face transformers' LlamaForCausalLM, whose
Linear weights are (out_features, in_features):

    per decoder layer       self_attn.{q,k,v,o}_proj.weight   4096 x 4096 (x4)
                            mlp.gate_proj.weight, up_proj     11008 x 4096 (x2)
                            mlp.down_proj.weight              4096 x 11008
                            input_layernorm.weight,
                            post_attention_layernorm.weight   4096 (x2)
                            = 202,383,360 parameters
    once                    model.embed_tokens.weight, lm_head.weight
                                                              32000 x 4096 (x2)
                            model.norm.weight                 4096

With the default --layers 4: 39 gradients, 1,071,681,536 parameters, 3.99 GiB
of float32 gradients per rank (the four layers alone are 0.81 G parameters;
the embedding and lm_head make up the rest, as in the real model's first
four layers' data-parallel step). GraphML conventions of examples/graphml,
written by gen_gpt2_grads.py's write_grads: one float32 Input, one mean
AllReduce with fusion=1 and one Output per gradient, in backward order.

    python3 bench/gen_llama_grads.py /tmp/llama4.graphml
    build/collfuse run /tmp/llama4.graphml --ranks 4 --verify

bench/README.md ("A 4 GiB-per-rank graph") has what that run needs and
takes. The output is generated, not committed (about 33 KB).
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gen_gpt2_grads import generate  # noqa: E402


def params(layers, width, mlp, vocab):
    p = [("model.embed_tokens.weight", (vocab, width))]
    for i in range(layers):
        h = "model.layers.%d." % i
        p += [(h + "input_layernorm.weight", (width,))]
        p += [(h + "self_attn.%s_proj.weight" % x, (width, width)) for x in "qkvo"]
        p += [(h + "post_attention_layernorm.weight", (width,)),
              (h + "mlp.gate_proj.weight", (mlp, width)), (h + "mlp.up_proj.weight", (mlp, width)),
              (h + "mlp.down_proj.weight", (width, mlp))]
    p += [("model.norm.weight", (width,)), ("lm_head.weight", (vocab, width))]
    return p[::-1]  # backward order: lm_head's gradient first


def main() -> int:
    return generate(__doc__, "decoder layers", 4,
                    lambda layers, ws: "llama7b_%dlayers_dp%d" % (layers, ws),
                    lambda layers: params(layers, 4096, 11008, 32000))


if __name__ == "__main__":
    sys.exit(main())
