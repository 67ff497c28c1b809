/* keys.c - kernel keys: their names, which keys exist, and the kernels a
 * graph needs. Plain C over ir/: libcollfuse answers these without loading
 * the LLVM module (load.c), and the module links its own copy.
 *
 * Which kernels a reducing collective needs. Every rank ends up combining
 * G contributions (G = the size of its group); the executor does that either
 * in one pass over all the sources it holds, or step by step as chunks
 * arrive (ring and pipelined algorithms), and folds more than CF_MAX_ARITY
 * sources as one 8-ary pass followed by accumulating steps. So for element
 * type dt and reduction r, with G >= 2:
 *
 *   NARY(dt, r, min(G, 8))  the one-pass reduction; when G > 8 and r is mean
 *                           the fold cannot divide yet, so it is NARY(dt, sum, 8)
 *   ACC(dt, r)              the accumulating step (mean accumulates as sum)
 *   SCALE(dt)               mean's final divide, after accumulating steps
 *
 * Reducing collectives are AllReduce, ReduceScatter, Reduce, their Fused*
 * forms, MatmulReduceScatter and MatmulAllReduce (always sum, over the
 * matmul's output type). A quantized MatmulReduceScatter (int8 operands) and
 * a QuantMatMul also need QUANT(output type), the int32 -> bf16/f16
 * epilogue; the quantized MatmulReduceScatter then reduce-scatters that
 * bf16/f16 output. AllGather, Broadcast and AllGatherMatmul combine nothing
 * and a group of one rank has nothing to combine. The list is sorted by
 * kind, dtype, reduction and arity, so a graph and its fused form, which
 * only groups collectives of equal dtype, reduction and group, need the
 * same list.
 */
#include "codegen.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- keys ---- */

static const char *kind_names[] = {"nary", "acc", "scale", "quant"};

static bool dtype_ok(cf_dtype dt) { return dt > CF_DT_INVALID && dt < CF_DT_COUNT; }

char *cf_kernel_name(const cf_kernel_key *key, char *buf, size_t len) {
  if (!buf || len == 0) return buf;
  if (!key || key->kind < CF_K_NARY || key->kind > CF_K_QUANT) {
    snprintf(buf, len, "cf_invalid");
    return buf;
  }
  const char *dt = dtype_ok(key->dtype) ? cf_dtype_name(key->dtype) : "invalid";
  const char *red = cf_reduction_name(key->red);
  switch (key->kind) {
  case CF_K_NARY:
    if (key->stream || key->outs)
      snprintf(buf, len, "cf_nary_%s_%s_%d_%s%d", red, dt, key->arity, key->stream ? "nt" : "x",
               key->outs);
    else
      snprintf(buf, len, "cf_nary_%s_%s_%d", red, dt, key->arity);
    break;
  case CF_K_ACC: snprintf(buf, len, "cf_acc_%s_%s", red, dt); break;
  default: snprintf(buf, len, "cf_%s_%s", kind_names[key->kind], dt); break;
  }
  return buf;
}

bool cf_kernel_key_valid(const cf_kernel_key *key, char *why, size_t len) {
  const char *msg = NULL;
  char tmp[96];
  if (!key)
    msg = "no key";
  else if (key->kind < CF_K_NARY || key->kind > CF_K_QUANT)
    msg = "unknown kernel kind";
  else if (!dtype_ok(key->dtype))
    msg = "invalid dtype";
  else if ((key->kind == CF_K_NARY || key->kind == CF_K_ACC) &&
           (key->red < CF_RED_SUM || key->red >= CF_RED_COUNT))
    msg = "invalid reduction";
  else if (key->kind == CF_K_NARY && (key->arity < 2 || key->arity > CF_MAX_ARITY)) {
    snprintf(tmp, sizeof tmp, "arity %d out of range 2..%d (fold more sources with acc)",
             key->arity, CF_MAX_ARITY);
    msg = tmp;
  } else if (key->kind != CF_K_NARY && key->arity != 0) {
    snprintf(tmp, sizeof tmp, "%s kernels take arity 0, not %d", kind_names[key->kind], key->arity);
    msg = tmp;
  } else if (key->kind != CF_K_NARY && key->stream)
    msg = "only n-ary kernels stream";
  else if (key->kind != CF_K_NARY && key->outs)
    msg = "only n-ary kernels take destinations (outs)";
  else if (key->outs < (key->stream ? 1 : 0) || key->outs > CF_MAX_ARITY) {
    snprintf(tmp, sizeof tmp, "a%s kernel writes %d..%d destinations, not %d",
             key->stream ? " stream" : "n n-ary", key->stream ? 1 : 0, CF_MAX_ARITY, key->outs);
    msg = tmp;
  }
  else if (key->kind == CF_K_QUANT && key->dtype != CF_DT_BFLOAT16 && key->dtype != CF_DT_FLOAT16)
    msg = "quant output dtype must be bfloat16 or float16";
  if (msg && why && len) snprintf(why, len, "%s", msg);
  return msg == NULL;
}

/* ---------------- the kernels a graph needs ---------------- */

typedef struct key_list {
  cf_kernel_key *v;
  int n, cap;
} key_list;

/* Add a key unless the list has it (a graph needs a few dozen at most). */
static bool push(key_list *l, cf_kernel_kind kind, cf_dtype dt, cf_reduction red, int arity) {
  for (int i = 0; i < l->n; i++)
    if (l->v[i].kind == kind && l->v[i].dtype == dt && l->v[i].red == red && l->v[i].arity == arity)
      return true;
  if (l->n == l->cap) {
    int cap = l->cap ? l->cap * 2 : 16;
    cf_kernel_key *v = realloc(l->v, (size_t)cap * sizeof *v);
    if (!v) return false;
    l->v = v;
    l->cap = cap;
  }
  l->v[l->n++] = (cf_kernel_key){.kind = kind, .dtype = dt, .red = red, .arity = arity};
  return true;
}

/* Ranks a collective combines: world_size of a fused matmul, else
 * rank_size, else the size of its group. */
static int64_t group_size(const cf_graph *g, const cf_node *n) {
  const cf_attr *a = cf_node_attr(n, CF_A_WORLD_SIZE);
  if (a) return a->v.i;
  if ((a = cf_node_attr(n, CF_A_RANK_SIZE))) return a->v.i;
  return cf_graph_group_size(g, cf_node_group(n));
}

static cf_dtype operand_dtype(const cf_graph *g, const cf_node *n, int j) {
  const cf_node *src = &g->nodes[n->in[j].node];
  if (!src->out || n->in[j].port >= src->n_out) return CF_DT_INVALID;
  return src->out[n->in[j].port].dtype;
}

/* The reduction keys of one collective over G ranks (module comment). */
static bool push_reduce(key_list *l, cf_dtype dt, cf_reduction r, int64_t G) {
  if (G < 2) return true;
  cf_reduction fold = r == CF_RED_MEAN ? CF_RED_SUM : r;
  int arity = G < CF_MAX_ARITY ? (int)G : CF_MAX_ARITY;
  return push(l, CF_K_NARY, dt, G <= CF_MAX_ARITY ? r : fold, arity) &&
         push(l, CF_K_ACC, dt, fold, 0) &&
         (r != CF_RED_MEAN || push(l, CF_K_SCALE, dt, CF_RED_SUM, 0));
}

static int key_cmp(const void *pa, const void *pb) {
  const cf_kernel_key *a = pa, *b = pb;
  if (a->kind != b->kind) return (int)a->kind - (int)b->kind;
  if (a->dtype != b->dtype) return (int)a->dtype - (int)b->dtype;
  if (a->red != b->red) return (int)a->red - (int)b->red;
  return a->arity - b->arity;
}

cf_status cf_codegen_graph_kernels(const cf_graph *g, cf_kernel_key **keys, int *n) {
  if (keys) *keys = NULL;
  if (n) *n = 0;
  if (!g || !keys || !n) return CF_ERR_USAGE;
  key_list l = {0};
  cf_status st = CF_OK;
  int from = 0; /* keys before l.v[from] are checked */
  for (int i = 0; i < g->n_nodes && !st; i++) {
    const cf_node *nd = &g->nodes[i];
    if (nd->dead) continue;
    /* a reducing op reduces with a kernel (a fused matmul op always sums,
     * verified); quantized matmuls (QuantMatMul, a reducing fused matmul op
     * on int8) dequantize with one */
    bool fused_mm = cf_op_table[nd->op].cat == CF_CAT_FUSED_MATMUL;
    bool reducing = cf_op_reduces(nd->op), quant = nd->op == CF_OP_QUANTMATMUL;
    if (reducing && fused_mm) quant = nd->n_in > 0 && operand_dtype(g, nd, 0) == CF_DT_INT8;
    if (!reducing && !quant) continue;
    cf_reduction red = reducing && !fused_mm ? cf_node_reduction(nd) : CF_RED_SUM;
    if (nd->n_out < 1 || !nd->out || nd->out[0].dtype == CF_DT_INVALID) {
      st = cf_node_error(g, nd, CF_ERR_USAGE, "no inferred output type: verify the graph first");
      break;
    }
    cf_dtype dt = nd->out[0].dtype;
    bool ok = (!quant || push(&l, CF_K_QUANT, dt, CF_RED_SUM, 0)) &&
              (!reducing || push_reduce(&l, dt, red, group_size(g, nd)));
    if (!ok) {
      st = cf_error(g->ctx, CF_ERR_NO_MEMORY, NULL, 0, "out of memory");
      break;
    }
    for (; from < l.n; from++) {
      char why[160], name[96];
      if (!cf_kernel_key_valid(&l.v[from], why, sizeof why)) {
        st = cf_node_error(g, nd, CF_ERR_UNSUPPORTED, "no kernel %s: %s",
                           cf_kernel_name(&l.v[from], name, sizeof name), why);
        break;
      }
    }
  }
  if (st) {
    free(l.v);
    return st;
  }
  if (l.n == 0) {
    free(l.v);
    return CF_OK;
  }
  qsort(l.v, (size_t)l.n, sizeof *l.v, key_cmp);
  *keys = l.v;
  *n = l.n;
  return CF_OK;
}
