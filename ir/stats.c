/* stats.c - graph summaries for `collfuse check` and the JSON reports:
 * node and collective counts and the bytes each collective communicates.
 *
 * "Bytes communicated" is the size of the full tensor a collective works on,
 * per rank: the input of AllReduce/Reduce/Broadcast/ReduceScatter and the
 * gathered output of AllGather, summed over a fused node's ports. It is the
 * quantity nccl-tests' algbw divides by, so the numbers compare across tools.
 *
 * Also the foreign ops a reader imported as Opaque, one record per op type,
 * which the CLI reports (a misspelt collective must not vanish silently).
 */
#include "ir.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int64_t value_bytes(const cf_value *v) {
  int64_t b;
  return cf_value_bytes(v, &b) ? b : 0;
}

int64_t cf_node_comm_bytes(const cf_graph *g, const cf_node *n) {
  int64_t total = 0;
  cf_op coll = cf_op_coll(n->op);
  if (coll == CF_OP_INVALID) return 0;
  if (cf_op_table[n->op].cat == CF_CAT_FUSED_MATMUL) {
    if (coll == CF_OP_ALLGATHER) return value_bytes(&n->out[n->n_out - 1]); /* gathered x1 */
    int64_t b = value_bytes(&n->out[0]);
    if (coll != CF_OP_REDUCESCATTER) return b;
    /* the (m, n) product is what gets reduce-scattered */
    int64_t ws = cf_node_int(n, CF_A_WORLD_SIZE, 1);
    return cf_mul_i64(b, ws, &b) ? b : 0;
  }
  if (coll == CF_OP_ALLGATHER) { /* what it gathers */
    for (int j = 0; j < n->n_out; j++)
      total += value_bytes(&n->out[j]);
    return total;
  }
  for (int j = 0; j < n->n_in; j++)
    total += value_bytes(&g->nodes[n->in[j].node].out[n->in[j].port]);
  return total;
}

void cf_graph_stats_compute(const cf_graph *g, cf_graph_stats *st) {
  *st = (cf_graph_stats){.nodes = g->n_nodes};
  for (int i = 0; i < g->n_nodes; i++) {
    const cf_node *n = &g->nodes[i];
    st->by_op[n->op]++;
    if (!cf_op_is_collective(n->op)) continue;
    st->collectives++;
    if (n->out) st->comm_bytes += cf_node_comm_bytes(g, n);
  }
}

void cf_graph_fingerprint(const cf_graph *g, char buf[17]) {
  /* FNV-1a from this seed (the offset basis less its last digit), kept:
   * compiled files carry the result */
  uint64_t h = 1469598103934665603ull;
  char rec[512];
  for (int k = 0; k < g->n_nodes; k++) {
    const cf_node *n = &g->nodes[g->topo ? g->topo[k] : k];
    if (!cf_op_is_collective(n->op)) continue;
    const cf_value *in = &g->nodes[n->in[0].node].out[n->in[0].port];
    bool red = cf_op_reduces(n->op);
    int len =
        snprintf(rec, sizeof rec, "%s|%s|%s|%s|%lld|%d;", cf_op_table[cf_op_unfused(n->op)].name,
                 cf_node_group(n), cf_dtype_name(in->dtype),
                 red ? cf_reduction_name(cf_node_reduction(n)) : "-",
                 (long long)cf_node_comm_bytes(g, n), n->n_in);
    h = cf_fnv1a(h, rec, (size_t)(len < (int)sizeof rec ? len : (int)sizeof rec - 1));
    /* a partitioned group's parts too: ranks that split one name differently
     * would otherwise wait for peers in other parts */
    const cf_group *gr = cf_graph_group(g, cf_node_group(n));
    for (int j = 0; gr && gr->n_parts > 1 && j < gr->n_parts * gr->n_ranks; j++) {
      len = snprintf(rec, sizeof rec, "%s%d", j % gr->n_ranks ? "," : "|", gr->ranks[j]);
      h = cf_fnv1a(h, rec, (size_t)len);
    }
  }
  snprintf(buf, 17, "%016llx", (unsigned long long)h);
}

cf_status cf_graph_seal(cf_graph *g) {
  char fp[17];
  cf_graph_fingerprint(g, fp);
  if (!(g->fingerprint = cf_arena_strdup(&g->arena, fp)))
    return cf_error(g->ctx, CF_ERR_NO_MEMORY, g->file, 0, "out of memory");
  return CF_OK;
}

static int by_line(const void *a, const void *b) {
  const cf_opaque_op *x = a, *y = b;
  if (x->line != y->line) return (x->line > y->line) - (x->line < y->line);
  return strcmp(x->first, y->first);
}

struct cf_dropped {
  const char *type, *name;
  int line;
  struct cf_dropped *next;
};

cf_status cf_graph_note_dropped(cf_graph *g, const char *type, const char *name, int line) {
  struct cf_dropped *d = cf_arena_alloc(&g->arena, sizeof *d);
  if (!d || !(d->type = cf_arena_strdup(&g->arena, type)) ||
      !(d->name = cf_arena_strdup(&g->arena, name)))
    return cf_error(g->ctx, CF_ERR_NO_MEMORY, g->file, line, "out of memory");
  d->line = line;
  d->next = g->dropped;
  g->dropped = d;
  return CF_OK;
}

/* Count a node of type (name, line) into the entries ops[0..*n) (dropped
 * ones and imported ones apart), growing the malloc'd array at powers of
 * two; *last is a hint, the entry of the previous call. false when out of
 * memory (ops freed). */
static bool count_op(cf_opaque_op **ops, int *n, int *last, const char *type, const char *name,
                     int line, bool dropped) {
  cf_opaque_op *o = *ops;
  int k = *last >= 0 && o[*last].dropped == dropped && strcmp(o[*last].type, type) == 0 ? *last
                                                                                         : -1;
  for (int j = 0; j < *n && k < 0; j++)
    if (o[j].dropped == dropped && strcmp(o[j].type, type) == 0) k = j;
  if (k < 0) {
    if ((*n & (*n - 1)) == 0) { /* grow at powers of two */
      cf_opaque_op *more = realloc(o, (size_t)(*n ? 2 * *n : 1) * sizeof *o);
      if (!more) {
        free(o);
        *ops = NULL;
        return false;
      }
      *ops = o = more;
    }
    k = (*n)++;
    o[k] = (cf_opaque_op){.type = type, .line = line, .first = name, .dropped = dropped};
  } else if (line && (!o[k].line || line < o[k].line)) {
    o[k].line = line;
    o[k].first = name;
  }
  o[k].count++;
  *last = k;
  return true;
}

cf_status cf_graph_note_opaque(cf_graph *g) {
  int n = 0, last = -1;
  cf_opaque_op *ops = NULL;
  g->opaque = NULL;
  g->n_opaque = 0;
  bool ok = true;
  for (int i = 0; i < g->n_nodes && ok; i++) {
    const cf_node *nd = &g->nodes[i];
    if (nd->op == CF_OP_OPAQUE)
      ok = count_op(&ops, &n, &last, cf_node_str(nd, CF_A_TYPE, "Opaque"), nd->name, nd->line,
                    false);
  }
  for (const struct cf_dropped *d = g->dropped; d && ok; d = d->next)
    ok = count_op(&ops, &n, &last, d->type, d->name, d->line, true);
  if (!ok) return cf_error(g->ctx, CF_ERR_NO_MEMORY, g->file, 0, "out of memory");
  if (!n) return CF_OK;
  qsort(ops, (size_t)n, sizeof *ops, by_line);
  g->opaque = cf_arena_array(&g->arena, (size_t)n, sizeof *ops);
  if (!g->opaque) {
    free(ops);
    return cf_error(g->ctx, CF_ERR_NO_MEMORY, g->file, 0, "out of memory");
  }
  for (int k = 0; k < n; k++) {
    ops[k].suggest = cf_collective_suggest(ops[k].type);
    g->opaque[k] = ops[k];
  }
  g->n_opaque = n;
  free(ops);
  return CF_OK;
}

/* The text of o; more > 0 adds how many other foreign op types there are. */
static const char *opaque_text(const cf_opaque_op *o, int more, char *buf, size_t len) {
  char dym[128], others[64] = "";
  if (more)
    snprintf(others, sizeof others, " and %d more foreign op%s", more, more == 1 ? "" : "s");
  snprintf(buf, len, "%d node%s of foreign op '%s' %s (first '%s')%s%s", o->count,
           o->count == 1 ? "" : "s", o->type,
           o->dropped ? "left out (nothing uses it)" : "imported as Opaque",
           o->first, others, cf_did_you_mean(o->suggest, dym, sizeof dym));
  return buf;
}

const char *cf_opaque_text(const cf_opaque_op *o, char *buf, size_t len) {
  return opaque_text(o, 0, buf, len);
}

cf_status cf_graph_refuse_opaque(const cf_graph *g) {
  if (!g->n_opaque) return CF_OK;
  char text[512];
  return cf_error(g->ctx, CF_ERR_INVALID, g->file, g->opaque[0].line, "%s",
                  opaque_text(&g->opaque[0], g->n_opaque - 1, text, sizeof text));
}
