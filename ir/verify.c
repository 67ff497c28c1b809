/* verify.c - structural verification: arity and attributes against ops.def,
 * attribute ranges, operand references and ports, groups, and a topological
 * order. A cycle is reported with the names of the nodes on it, since "graph
 * has a cycle" alone is useless on a 600-node export. The whole check every
 * caller makes (a reader's result, a graph before and after the passes)
 * ends here too: structure, inference (infer.c), a compiled graph's
 * fingerprint and a target's limits (target.c).
 */
#include "ir.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static cf_status check_attrs(cf_graph *g, cf_node *n) {
  const cf_op_info *oi = &cf_op_table[n->op];
  for (int i = 0; i < n->n_attr; i++)
    if (!(oi->allowed & (1u << n->attr[i].id)))
      return cf_node_error(g, n, CF_ERR_INVALID, "attribute '%s' is not allowed on %s",
                           cf_attr_table[n->attr[i].id].name, oi->name);
  for (int a = 0; a < CF_A_COUNT; a++)
    if ((oi->required & (1u << a)) && !cf_node_attr(n, (cf_attr_id)a))
      return cf_node_error(g, n, CF_ERR_INVALID, "%s needs attribute '%s'", oi->name,
                           cf_attr_table[a].name);
  if (n->op == CF_OP_OPAQUE) {
    if (n->n_decl == 0)
      return cf_node_error(g, n, CF_ERR_INVALID, "Opaque needs its output dtype and shape");
    for (int i = 0; i < n->n_decl; i++)
      if (!n->decl[i].has_dtype || !n->decl[i].has_shape)
        return cf_node_error(g, n, CF_ERR_INVALID,
                             "Opaque output %d needs both dtype and shape", i);
  }

  const char *init = cf_node_str(n, CF_A_INIT, NULL);
  if (init && strcmp(init, "random") && strcmp(init, "zeros") && strcmp(init, "ones") &&
      strcmp(init, "iota"))
    return cf_node_error(g, n, CF_ERR_INVALID, "init='%s' must be random, zeros, ones or iota",
                         init);

  const cf_attr *fu = cf_node_attr(n, CF_A_FUSION);
  if (fu && (fu->v.i < 0 || fu->v.i > 2))
    return cf_node_error(g, n, CF_ERR_INVALID, "fusion=%lld must be 0, 1 or 2",
                         (long long)fu->v.i);
  int64_t fid = cf_node_int(n, CF_A_FUSION_ID, -1);
  if (fid < -1)
    return cf_node_error(g, n, CF_ERR_INVALID, "fusion_id=%lld must be >= -1", (long long)fid);
  if (cf_op_table[n->op].cat == CF_CAT_COLLECTIVE && cf_node_fusion(n) == 2 && fid < 0)
    return cf_node_error(g, n, CF_ERR_INVALID, "fusion=2 needs fusion_id >= 0");

  int64_t gsize = -1;
  if (oi->allowed & (1u << CF_A_GROUP)) {
    const char *gname = cf_node_group(n);
    if (strlen(gname) > CF_MAX_GROUP_NAME)
      return cf_node_error(g, n, CF_ERR_INVALID, "group name longer than %d bytes",
                           CF_MAX_GROUP_NAME);
    gsize = cf_graph_group_size(g, gname);
    const cf_attr *rs = cf_node_attr(n, CF_A_RANK_SIZE);
    if (gsize < 0 && !cf_graph_group(g, gname) && strcmp(gname, CF_WORLD_GROUP) != 0)
      return cf_node_error(g, n, CF_ERR_INVALID, "group '%s' is not defined", gname);
    if (rs && (rs->v.i <= 0 || rs->v.i > CF_MAX_WORLD))
      return cf_node_error(g, n, CF_ERR_INVALID, "rank_size=%lld must be in 1..%d",
                           (long long)rs->v.i, CF_MAX_WORLD);
    if (rs && gsize >= 0 && rs->v.i != gsize)
      return cf_node_error(g, n, CF_ERR_INVALID, "rank_size=%lld but group '%s' has %lld ranks",
                           (long long)rs->v.i, gname, (long long)gsize);
    if (rs) gsize = rs->v.i;
  }
  const cf_attr *ws = cf_node_attr(n, CF_A_WORLD_SIZE);
  if (ws) {
    if (ws->v.i <= 0 || ws->v.i > CF_MAX_WORLD)
      return cf_node_error(g, n, CF_ERR_INVALID, "world_size=%lld must be in 1..%d",
                           (long long)ws->v.i, CF_MAX_WORLD);
    if (gsize >= 0 && ws->v.i != gsize)
      return cf_node_error(g, n, CF_ERR_INVALID, "world_size=%lld but group '%s' has %lld ranks",
                           (long long)ws->v.i, cf_node_group(n), (long long)gsize);
    gsize = ws->v.i;
  }
  static const cf_attr_id bounded[] = {CF_A_ROOT, CF_A_RANK, CF_A_RANK_ROOT};
  for (size_t i = 0; i < sizeof bounded / sizeof bounded[0]; i++) {
    const cf_attr *a = cf_node_attr(n, bounded[i]);
    if (!a) continue;
    if (a->v.i < 0 || (gsize >= 0 && a->v.i >= gsize))
      return cf_node_error(g, n, CF_ERR_INVALID, "%s=%lld out of range: need 0 <= %s < %lld",
                           cf_attr_table[bounded[i]].name, (long long)a->v.i,
                           cf_attr_table[bounded[i]].name, (long long)(gsize >= 0 ? gsize : 0));
  }
  const char *pairs = cf_node_str(n, CF_A_SOURCE_TARGET_PAIRS, NULL);
  if (pairs) {
    int n_ranks = gsize > 0 ? (int)gsize : CF_MAX_WORLD, tgt[CF_MAX_WORLD], src[CF_MAX_WORLD];
    char why[128];
    if (!cf_pairs_parse(pairs, n_ranks, tgt, src, why, sizeof why))
      return cf_node_error(g, n, CF_ERR_INVALID, "source_target_pairs='%s': %s", pairs, why);
  }
  if (n->op == CF_OP_ALLTOALL && n->n_in > 1 &&
      (cf_node_attr(n, CF_A_SPLIT_DIMENSION) || cf_node_attr(n, CF_A_CONCAT_DIMENSION)))
    return cf_node_error(g, n, CF_ERR_INVALID,
                         "AllToAll with %d operands (the tuple form: operand j goes to rank j) "
                         "takes no split_dimension or concat_dimension",
                         n->n_in);
  int64_t ct = cf_node_int(n, CF_A_COMM_TURN, 0);
  if (ct < 0) return cf_node_error(g, n, CF_ERR_INVALID, "comm_turn=%lld must be >= 0", (long long)ct);
  const char *cm = cf_node_str(n, CF_A_COMM_MODE, NULL);
  if (cm && strcmp(cm, "ai_cpu") && strcmp(cm, "aiv"))
    return cf_node_error(g, n, CF_ERR_INVALID, "comm_mode='%s' must be ai_cpu or aiv", cm);
  cf_ints dims = cf_node_ints(n, CF_A_DIMS);
  if (dims.n >= 0 && dims.n != n->n_in)
    return cf_node_error(g, n, CF_ERR_INVALID, "dims lists %d dimensions but the node has %d operands",
                         dims.n, n->n_in);
  if (dims.n >= 0 && cf_node_attr(n, CF_A_DIM))
    return cf_node_error(g, n, CF_ERR_INVALID, "dim and dims together: dims gives every member's");
  cf_strs members = cf_node_strs(n, CF_A_MEMBERS);
  if (members.n >= 0 && oi->cat == CF_CAT_FUSED_COLLECTIVE && members.n != n->n_in)
    return cf_node_error(g, n, CF_ERR_INVALID,
                         "members lists %d names but the node has %d operands", members.n, n->n_in);
  return CF_OK;
}

/* Every rank of a group once (in one part, at one place), inside the world;
 * the world group is every rank and is never partitioned. */
static cf_status check_groups(cf_graph *g) {
  int *where = NULL; /* world rank -> 1 + its index in the group being checked */
  cf_status st = CF_OK;
  for (int i = 0; i < g->n_groups && !st; i++) {
    const cf_group *gr = &g->groups[i];
    int total = gr->n_ranks * gr->n_parts;
    if (gr->n_ranks == 0) {
      st = cf_error(g->ctx, CF_ERR_INVALID, g->file, gr->line, "group '%s' has no ranks", gr->name);
      break;
    }
    if (!where && !(where = calloc(CF_MAX_WORLD, sizeof *where))) {
      st = cf_error(g->ctx, CF_ERR_NO_MEMORY, g->file, gr->line, "out of memory");
      break;
    }
    for (int j = 0; j < total && !st; j++) {
      int rk = gr->ranks[j];
      if (rk < 0 || rk >= CF_MAX_WORLD || (g->world_size > 0 && rk >= g->world_size)) {
        st = cf_error(g->ctx, CF_ERR_INVALID, g->file, gr->line,
                      "group '%s': rank %d outside the world (world_size=%lld)", gr->name, rk,
                      (long long)g->world_size);
      } else if (where[rk]) {
        int a = (where[rk] - 1) / gr->n_ranks, b = j / gr->n_ranks;
        if (a == b)
          st = cf_error(g->ctx, CF_ERR_INVALID, g->file, gr->line,
                        "group '%s': rank %d listed twice", gr->name, rk);
        else
          st = cf_error(g->ctx, CF_ERR_INVALID, g->file, gr->line,
                        "group '%s': rank %d is in parts %d and %d (parts must be disjoint)",
                        gr->name, rk, a, b);
      } else {
        where[rk] = j + 1;
      }
    }
    for (int j = 0; j < total; j++)
      if (gr->ranks[j] >= 0 && gr->ranks[j] < CF_MAX_WORLD) where[gr->ranks[j]] = 0;
    if (st) break;
    if (strcmp(gr->name, CF_WORLD_GROUP) == 0 && gr->n_parts > 1)
      st = cf_error(g->ctx, CF_ERR_INVALID, g->file, gr->line,
                    "group '%s' is every rank and cannot be partitioned", gr->name);
    else if (strcmp(gr->name, CF_WORLD_GROUP) == 0 && g->world_size > 0 &&
             gr->n_ranks != g->world_size)
      st = cf_error(g->ctx, CF_ERR_INVALID, g->file, gr->line,
                    "group '%s' must have all %lld ranks", gr->name, (long long)g->world_size);
  }
  free(where);
  return st;
}

/* Report one cycle among the nodes Kahn's algorithm could not order; its
 * nodes along the edges go to d (with the message) when d is given. */
static cf_status report_cycle(cf_graph *g, const int *indeg, cf_diags *d) {
  int start = -1;
  for (int i = 0; i < g->n_nodes && start < 0; i++)
    if (indeg[i] > 0) start = i;
  /* walk backwards through unordered operands until a node repeats */
  size_t nsz = g->n_nodes > 0 ? (size_t)g->n_nodes : 1;
  int *seen = calloc(nsz, sizeof(int));
  int *path = malloc(nsz * sizeof(int));
  bool *after = calloc(nsz, sizeof(bool)); /* path[i] reached its next by a control edge */
  if (!seen || !path || !after) {
    free(seen);
    free(path);
    free(after);
    return cf_error(g->ctx, CF_ERR_NO_MEMORY, g->file, 0, "out of memory");
  }
  int len = 0, cur = start;
  while (!seen[cur]) {
    seen[cur] = len + 1;
    path[len++] = cur;
    const cf_node *n = &g->nodes[cur];
    int next = -1;
    for (int j = 0; j < cf_node_n_deps(n) && next < 0; j++)
      if (indeg[cf_node_dep(n, j)] > 0) next = cf_node_dep(n, j), after[len - 1] = j >= n->n_in;
    cur = next;
  }
  /* path[first .. len-1] is the cycle walked against the edges; print it
   * along the edges, starting at the node that comes first in the file */
  char buf[1024];
  size_t o = 0;
  int first = seen[cur] - 1, clen = len - first, rot = 0;
  for (int k = 0; k < clen; k++)
    if (path[len - 1 - k] < path[len - 1 - rot]) rot = k;
  /* an edge that is a control dependency is written -(after)-> */
  for (int k = 0; k <= clen && o < sizeof buf - 64; k++) {
    int at = len - 1 - (rot + k) % clen;
    o += (size_t)snprintf(buf + o, sizeof buf - o, !k ? "'%s'" : after[at] ? " -(after)-> '%s'" : " -> '%s'",
                          g->nodes[path[at]].name);
  }
  for (int k = 0; k < clen; k++) /* reuse seen[] for the cycle in edge order */
    seen[k] = path[len - 1 - (rot + k) % clen];
  const cf_node *n = &g->nodes[path[len - 1 - rot]];
  cf_status st = cf_node_error(g, n, CF_ERR_INVALID, "cycle: %s", buf);
  if (d) cf_diags_add(d, cf_errmsg(g->ctx), (int)(n - g->nodes), seen, clen);
  free(seen);
  free(path);
  free(after);
  return st;
}

/* g->topo, by Kahn's algorithm. On a cycle, *partial (when given) is the
 * order of the n_partial nodes no cycle holds back (in the graph's arena). */
static cf_status topo_sort(cf_graph *g, cf_diags *d, int **partial, int *n_partial) {
  int nn = g->n_nodes;
  size_t nsz = nn > 0 ? (size_t)nn : 1;
  cf_status st = CF_OK;
  int *indeg = calloc(nsz, sizeof(int));
  int *start = calloc(nsz + 1, sizeof(int));
  int *users = NULL;
  int *topo = cf_arena_array(&g->arena, nsz, sizeof(int));
  int64_t edges = 0;
  for (int i = 0; i < nn; i++) edges += cf_node_n_deps(&g->nodes[i]);
  if (edges > INT32_MAX) {
    st = cf_error(g->ctx, CF_ERR_INVALID, g->file, 0, "too many edges");
    goto fail;
  }
  users = malloc((size_t)(edges ? edges : 1) * sizeof(int));
  if (!indeg || !start || !users || !topo) {
    st = cf_error(g->ctx, CF_ERR_NO_MEMORY, g->file, 0, "out of memory");
    goto fail;
  }
  for (int i = 0; i < nn; i++)
    for (int j = 0; j < cf_node_n_deps(&g->nodes[i]); j++) start[cf_node_dep(&g->nodes[i], j) + 1]++;
  for (int i = 0; i < nn; i++) start[i + 1] += start[i];
  {
    int *fill = calloc(nsz, sizeof(int));
    if (!fill) {
      st = cf_error(g->ctx, CF_ERR_NO_MEMORY, g->file, 0, "out of memory");
      goto fail;
    }
    for (int i = 0; i < nn; i++)
      for (int j = 0; j < cf_node_n_deps(&g->nodes[i]); j++) {
        int s = cf_node_dep(&g->nodes[i], j);
        users[start[s] + fill[s]++] = i;
      }
    free(fill);
  }
  for (int i = 0; i < nn; i++) indeg[i] = cf_node_n_deps(&g->nodes[i]);
  /* Kahn's algorithm; the queue lives in topo itself and keeps file order
   * among ready nodes */
  int head = 0, tail = 0;
  for (int i = 0; i < nn; i++)
    if (!indeg[i]) topo[tail++] = i;
  while (head < tail) {
    int v = topo[head++];
    for (int k = start[v]; k < start[v + 1]; k++)
      if (--indeg[users[k]] == 0) topo[tail++] = users[k];
  }
  if (tail != nn) {
    st = report_cycle(g, indeg, d);
    if (partial) *partial = topo, *n_partial = tail;
    goto fail;
  }
  g->topo = topo;
fail:
  free(indeg);
  free(start);
  free(users);
  return st;
}

/* Node n's arity, attributes and operand references. */
static cf_status verify_node(cf_graph *g, cf_node *n) {
  const cf_op_info *oi = &cf_op_table[n->op];
  cf_status st;
  if (n->op <= CF_OP_INVALID || n->op >= CF_OP_COUNT)
    return cf_node_error(g, n, CF_ERR_INVALID, "unknown op");
  if (n->n_in < oi->min_in || (oi->max_in >= 0 && n->n_in > oi->max_in)) {
    if (oi->min_in == oi->max_in)
      return cf_node_error(g, n, CF_ERR_INVALID, "%s takes %d operand%s, got %d", oi->name,
                           oi->min_in, oi->min_in == 1 ? "" : "s", n->n_in);
    if (oi->max_in < 0)
      return cf_node_error(g, n, CF_ERR_INVALID, "%s takes at least %d operands, got %d", oi->name,
                           oi->min_in, n->n_in);
    return cf_node_error(g, n, CF_ERR_INVALID, "%s takes %d to %d operands, got %d", oi->name,
                         oi->min_in, oi->max_in, n->n_in);
  }
  if (n->n_decl > 1 && n->op != CF_OP_OPAQUE)
    return cf_node_error(g, n, CF_ERR_INVALID, "only Opaque declares several outputs");
  if ((st = check_attrs(g, n))) return st;
  for (int j = 0; j < n->n_ctl; j++)
    if (n->ctl[j] < 0 || n->ctl[j] >= g->n_nodes || n->ctl[j] == (int)(n - g->nodes))
      return cf_node_error(g, n, CF_ERR_INVALID, "control predecessor %d refers to no other node", j);
  for (int j = 0; j < n->n_in; j++) {
    cf_ref r = n->in[j];
    if (r.node < 0 || r.node >= g->n_nodes)
      return cf_node_error(g, n, CF_ERR_INVALID, "operand %d refers to no node", j);
    const cf_node *src = &g->nodes[r.node];
    int nout = cf_node_n_outputs(src);
    if (nout == 0)
      return cf_node_error(g, n, CF_ERR_INVALID, "operand %d refers to '%s', an %s with no result",
                           j, src->name, cf_op_table[src->op].name);
    if (r.port < 0 || r.port >= nout)
      return cf_node_error(g, n, CF_ERR_INVALID,
                           "operand %d refers to port %d of '%s', which has %d output%s", j, r.port,
                           src->name, nout, nout == 1 ? "" : "s");
  }
  return CF_OK;
}

static cf_status verify_world(cf_graph *g) {
  if (g->world_size < 0 || g->world_size > CF_MAX_WORLD)
    return cf_error(g->ctx, CF_ERR_INVALID, g->file, 0, "world_size=%lld must be in 0..%d",
                    (long long)g->world_size, CF_MAX_WORLD);
  return check_groups(g);
}

cf_status cf_verify_structure(cf_graph *g) {
  cf_status st;
  if ((st = verify_world(g))) return st;
  for (int i = 0; i < g->n_nodes; i++)
    if ((st = verify_node(g, &g->nodes[i]))) return st;
  return topo_sort(g, NULL, NULL, NULL);
}

/* ---- every error at once ---- */

void cf_diags_add(cf_diags *d, const char *msg, int node, const int *cycle, int n_cycle) {
  if (d->n == d->cap) {
    int cap = d->cap ? 2 * d->cap : 8;
    cf_diag *nv = realloc(d->v, sizeof *nv * (size_t)cap);
    if (!nv) return; /* the message is lost, not the run */
    d->v = nv;
    d->cap = cap;
  }
  cf_diag *x = &d->v[d->n];
  *x = (cf_diag){.msg = strdup(msg ? msg : ""), .node = node};
  if (!x->msg) return;
  if (cycle && n_cycle > 0 && (x->cycle = malloc(sizeof *x->cycle * (size_t)n_cycle))) {
    memcpy(x->cycle, cycle, sizeof *x->cycle * (size_t)n_cycle);
    x->n_cycle = n_cycle;
  }
  d->n++;
}

void cf_diags_free(cf_diags *d) {
  for (int i = 0; d && i < d->n; i++) {
    free(d->v[i].msg);
    free(d->v[i].cycle);
  }
  if (d) free(d->v);
  if (d) *d = (cf_diags){0};
}

cf_status cf_verify_collect(cf_graph *g, cf_diags *d) {
  cf_status first = CF_OK, st;
  char *first_msg = NULL;
#define NOTE(expr, node)                                                                           \
  do {                                                                                             \
    if ((st = (expr))) {                                                                           \
      cf_diags_add(d, cf_errmsg(g->ctx), (node), NULL, 0);                                         \
      if (!first) {                                                                                \
        first = st;                                                                                \
        first_msg = strdup(cf_errmsg(g->ctx));                                                     \
      }                                                                                            \
    }                                                                                              \
  } while (0)
  g->topo = NULL;
  NOTE(verify_world(g), -1);
  bool *bad = calloc((size_t)g->n_nodes + 1, sizeof *bad), refs_ok = true;
  if (!bad) return cf_error(g->ctx, CF_ERR_NO_MEMORY, g->file, 0, "out of memory");
  for (int i = 0; i < g->n_nodes; i++) {
    NOTE(verify_node(g, &g->nodes[i]), i);
    bad[i] = st != CF_OK;
    for (int j = 0; j < g->nodes[i].n_in; j++)
      refs_ok &= g->nodes[i].in[j].node >= 0 && g->nodes[i].in[j].node < g->n_nodes;
  }
  /* the order needs every reference; inference needs the order, and skips
   * what a broken node feeds (its types would only repeat its error) */
  int *order = NULL, n_order = 0; /* behind a cycle: what comes before it */
  if (refs_ok && (st = topo_sort(g, d, &order, &n_order)) && !first) {
    first = st;
    first_msg = strdup(cf_errmsg(g->ctx));
  }
  if (g->topo) order = g->topo, n_order = g->n_nodes;
  for (int k = 0; order && k < n_order; k++) {
    int i = order[k];
    for (int j = 0; j < g->nodes[i].n_in; j++)
      bad[i] |= bad[g->nodes[i].in[j].node];
    if (bad[i]) continue;
    NOTE(cf_infer_node(g, &g->nodes[i]), i);
    bad[i] = st != CF_OK;
  }
#undef NOTE
  free(bad);
  if (first) {
    g->topo = NULL; /* not verified: nothing may take it for a valid graph */
    cf_error(g->ctx, first, NULL, 0, "%s", first_msg ? first_msg : "invalid graph");
  }
  free(first_msg);
  return first;
}

static cf_status verify_at(cf_graph *g, int64_t world) {
  g->world_size = world;
  cf_status st = cf_verify_structure(g);
  return st ? st : cf_infer(g);
}

cf_status cf_graph_size_world(cf_graph *g, int ranks, const char *job) {
  int64_t declared = g->world_size;
  cf_status st = verify_at(g, ranks);
  if (!st || declared <= 0 || declared == ranks) return st;
  /* the job, not the file, is wrong when the graph holds at its own size */
  cf_context *ctx = g->ctx;
  char *why = cf_error_take(ctx);
  if (verify_at(g, declared) != CF_OK) {
    cf_error_put(ctx, why); /* broken at either size: keep the job's message */
    g->world_size = ranks;
    return st;
  }
  free(why);
  g->world_size = ranks;
  return cf_error(ctx, CF_ERR_INVALID, g->file, 0,
                  "the graph is for %lld rank%s (world_size=%lld) and the job has %d (%s); run it "
                  "with %lld rank%s",
                  (long long)declared, declared == 1 ? "" : "s", (long long)declared, ranks, job,
                  (long long)declared, declared == 1 ? "" : "s");
}

cf_status cf_verify_graph(cf_graph *g) {
  cf_status st = cf_verify_structure(g);
  if (!st) st = cf_infer(g);
  if (!st && g->fingerprint) {
    /* a compiled graph carries the fingerprint of its collectives; a graph
     * edited since would make the ranks' cross-check meaningless */
    char fp[17];
    cf_graph_fingerprint(g, fp);
    if (strcmp(fp, g->fingerprint) != 0)
      st = cf_error(g->ctx, CF_ERR_INVALID, g->file, 0,
                    "fingerprint %s does not match the graph's collectives (%s): the graph was "
                    "changed after it was compiled",
                    g->fingerprint, fp);
  }
  return st;
}

cf_status cf_verify_for_target(cf_graph *g, const char *target) {
  if (!g) return CF_ERR_USAGE;
  const cf_target *t = cf_target_find(target);
  if (!t) {
    char why[256];
    return cf_error(g->ctx, CF_ERR_USAGE, NULL, 0, "%s",
                    cf_target_unknown(target, why, sizeof why));
  }
  cf_status st = cf_verify_graph(g);
  if (!st) st = cf_target_check(g, t);
  return st;
}
