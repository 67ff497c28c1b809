/* fuse_matmul_collective.c - `fuse-matmul-collective`: a matrix product and
 * the collective next to it become one op that overlaps the two (torch_npu's
 * MC2 ops, docs/fusion.md).
 *
 * Requires: a verified, inferred graph. In the default pipeline it runs after
 * fuse-allreduce, fuse-allgather and fuse-reducescatter, so bucketing comes
 * first: a collective already in a bucket is never fused with its MatMul.
 * Preserves: every dependency, acyclicity, the value every Output reads and
 * every node it does not replace; leaves the graph verified and inferred.
 * A node that a control edge orders (either end) stays itself: the fused
 * op would run it at another point.
 *
 *   MatMul -> ReduceScatter         MatmulReduceScatter (x1, x2)
 *   QuantMatMul -> ReduceScatter    MatmulReduceScatter (x1, x2, [bias], x1_scale, x2_scale),
 *                                   comm_mode aiv
 *   MatMul -> AllReduce             MatmulAllReduce (x1, x2)
 *   AllGather(concat) -> MatMul x1  AllGatherMatmul (x1, x2_1 .. x2_k): port j-1 is the
 *                                   product of MatMul j, port k the gathered x1
 *
 * One AllGather feeding several MatMuls gives one AllGatherMatmul with one
 * product each; its other users read the gathered x1. Reductions: sum, and
 * mean as the fused sum followed by a Mul with the constant 1/world_size
 * where that is exact (world sizes that are powers of two: scaling by one
 * commutes with rounding, so the result is the unfused mean's, subnormals
 * aside). A MatMul whose product has any user besides its collective
 * (another node, an Output, a second collective) stays unfused: the fused op
 * would compute the product a second time, and a second GEMM costs more
 * than overlapping the collective saves. An AllGatherMatmul duplicates
 * nothing: the MatMuls' other users read its ports, and the gathered x1 is
 * its last port.
 *
 * Every fused node is tried before it is committed: cf_infer_node applies the
 * fused op's own rules (dtypes, zero bias, scale shapes, m % world_size) and,
 * with a target, cf_target_check_node applies its limits. A refusal becomes
 * the --explain reason and the candidate stays as it was, so the pass never
 * builds an op that inference or the target would reject.
 *
 * Acyclicity. A MatmulReduceScatter/AllReduce reads the MatMul's operands and
 * replaces the collective, which adds no path. An AllGatherMatmul contracts
 * an AllGather and its MatMuls into one node that needs every x2 before the
 * gather starts, and several such contractions can close a cycle between
 * them. So take one topological order in which those AllGathers come as late
 * as possible (Kahn's algorithm that pops one only when nothing else is
 * ready), and let a product join only when its x2 comes before the
 * AllGather in that order. Putting every fused node at its AllGather's (or
 * collective's) position is then a topological order of the result, for all
 * fusions together. x2 comes after the AllGather exactly when it depends on
 * that AllGather or on one ordered after it, and --explain names which.
 */
#include "passes.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* MatMul|QuantMatMul -> ReduceScatter|AllReduce (plain, or a bucket member) */
typedef struct mm_cand {
  int coll, mm;    /* original node indices */
  int port;        /* the collective's operand that reads the MatMul */
  int fused;       /* the fused node, -1 when not fused */
  int value;       /* the node holding the collective's value now (fused or its mean Mul) */
  const char *why; /* why not fused (scratch arena) */
} mm_cand;

typedef struct fuser {
  cf_graph *g;
  const cf_pass_options *opt;
  const cf_target *target; /* NULL: no limits beyond the IR's */
  int n0;                  /* nodes before the pass */
  int *ustart, *users;     /* users of each original node, one entry per operand (CSR) */
  cf_ref *repl;            /* per original node: what its result became (node -1: itself) */
  int *claim;              /* per original node: the fused op that took this MatMul away, or -1 */
  bool *ordered;           /* per original node: a control edge ends at it (it stays itself) */
  int *anchor;             /* per node added: the original node it is placed after */
  int n_added, cap_added;
  const char *mc2_group; /* one-communicator targets: the group ai_cpu fused ops use */
  mm_cand *c;
  int nc, cap_c;
  int fused_mm, fused_ag; /* counts for the log */
  cf_arena scratch;
} fuser;

static cf_status oom(fuser *f) {
  return cf_error(f->g->ctx, CF_ERR_NO_MEMORY, f->g->file, 0, "out of memory");
}

static const char *fmt(fuser *f, const char *format, ...) __attribute__((format(printf, 2, 3)));
static const char *fmt(fuser *f, const char *format, ...) {
  va_list ap, again;
  va_start(ap, format);
  va_copy(again, ap);
  int n = vsnprintf(NULL, 0, format, ap); /* whole: names in it may be CF_MAX_NAME long */
  va_end(ap);
  char *s = n >= 0 ? cf_arena_alloc(&f->scratch, (size_t)n + 1) : NULL;
  if (s) vsnprintf(s, (size_t)n + 1, format, again);
  va_end(again);
  return s ? s : "(out of memory)";
}

/* The context's message without its "FILE:LINE: error: node 'NAME': "
 * prefix, in the scratch arena; the error is cleared (it was only a try). */
static const char *refusal(fuser *f, const char *node) {
  const char *msg = cf_errmsg(f->g->ctx);
  char key[512];
  snprintf(key, sizeof key, "node '%s': ", node);
  const char *p = strstr(msg, key);
  const char *why = fmt(f, "%s", p ? p + strlen(key) : msg);
  cf_clear_error(f->g->ctx);
  return why;
}

/* Ranks a collective spans: its rank_size, else its group's size (the
 * verifier makes them agree). */
static int64_t ranks_of(const cf_graph *g, const cf_node *n) {
  int64_t rs = cf_node_int(n, CF_A_RANK_SIZE, -1);
  return rs > 0 ? rs : cf_graph_group_size(g, cf_node_group(n));
}

/* Name at position port of a fused collective's members list. */
static const char *member(fuser *f, const cf_node *n, int port) {
  cf_strs m = cf_node_strs(n, CF_A_MEMBERS);
  return port < m.n ? m.v[port] : fmt(f, "%s port %d", n->name, port);
}

/* A node named base, or base_K when that is taken, base cut to keep the
 * name within CF_MAX_NAME. */
static cf_status add_node(fuser *f, const char *base, cf_op op, int line, int anchor, int *idx) {
  const char *name = cf_arena_name(&f->scratch, base, "");
  for (int k = 1; name && cf_graph_find(f->g, name) >= 0; k++) {
    char tail[24];
    snprintf(tail, sizeof tail, "_%d", k);
    name = cf_arena_name(&f->scratch, base, tail);
  }
  if (!name) return oom(f);
  cf_status st = cf_graph_add_node(f->g, name, op, line, idx);
  if (st) return st;
  f->g->nodes[*idx].region = f->g->nodes[anchor].region; /* its pair shares it */
  if (f->n_added == f->cap_added) {
    int cap = f->cap_added ? 2 * f->cap_added : 16;
    int *a = realloc(f->anchor, (size_t)cap * sizeof *a);
    if (!a) return oom(f);
    f->anchor = a, f->cap_added = cap;
  }
  f->anchor[f->n_added++] = anchor;
  return CF_OK;
}

static cf_status set_int(cf_graph *g, int idx, cf_attr_id id, int64_t v) {
  cf_attr a = {.id = id, .v.i = v};
  return cf_node_set_attr(g, idx, &a);
}

/* s is copied into the graph's arena */
static cf_status set_str(cf_graph *g, int idx, cf_attr_id id, const char *s) {
  cf_attr a = {.id = id, .v.s = cf_arena_strdup(&g->arena, s)};
  if (!a.v.s) return cf_node_error(g, &g->nodes[idx], CF_ERR_NO_MEMORY, "out of memory");
  return cf_node_set_attr(g, idx, &a);
}

/* The attributes every fused matmul op shares; members: its n original
 * nodes. */
static cf_status set_common(fuser *f, int idx, const cf_node *coll, const char *const *members,
                            int n) {
  cf_graph *g = f->g;
  cf_status st = set_int(g, idx, CF_A_WORLD_SIZE, ranks_of(g, coll));
  const cf_attr *grp = cf_node_attr(coll, CF_A_GROUP);
  if (!st && grp) st = cf_node_set_attr(g, idx, grp);
  if (!st) st = cf_node_set_strs(g, idx, CF_A_MEMBERS, members, n);
  return st;
}

/* The comm_mode of a fused op violates the target's one-communicator rule. */
static const char *group_conflict(fuser *f, const char *mode, const char *group) {
  if (!cf_target_one_mc2_group(f->target) || strcmp(mode, "ai_cpu") != 0 || !f->mc2_group ||
      strcmp(f->mc2_group, group) == 0)
    return NULL;
  return fmt(f,
             "target %s: fused matmul ops in comm_mode ai_cpu must share one communicator, and "
             "they use group '%s' already",
             cf_target_profile_name(f->target), f->mc2_group);
}

/* Try node idx (just built, operands inferred): the fused op's rules, then
 * the target's. NULL when it passes, else why not (and idx is dead). */
static const char *try_node(fuser *f, int idx) {
  cf_graph *g = f->g;
  cf_node *n = &g->nodes[idx];
  const char *why = NULL;
  if (cf_infer_node(g, n))
    why = fmt(f, "%s would reject it: %s", cf_op_table[n->op].name, refusal(f, n->name));
  else if (f->target && cf_target_check_node(g, n, f->target))
    why = refusal(f, n->name);
  if (why) n->dead = true;
  return why;
}

/* ================= MatMul -> ReduceScatter / AllReduce ================= */

static cf_status add_cand(fuser *f, int coll, int mm, int port) {
  if (f->nc == f->cap_c) {
    int cap = f->cap_c ? 2 * f->cap_c : 16;
    mm_cand *c = realloc(f->c, (size_t)cap * sizeof *c);
    if (!c) return oom(f);
    f->c = c, f->cap_c = cap;
  }
  f->c[f->nc++] = (mm_cand){.coll = coll, .mm = mm, .port = port, .fused = -1, .value = -1};
  return CF_OK;
}

/* mean over a power-of-two world: the fused sum, then a Mul with the exact
 * constant 1/world_size (a scalar of the result's dtype). */
static cf_status add_mean(fuser *f, mm_cand *c, int64_t ws) {
  cf_graph *g = f->g;
  char text[64];
  int k, m, line = g->nodes[c->coll].line;
  cf_dtype dt = g->nodes[c->fused].out[0].dtype;
  cf_status st =
      add_node(f, fmt(f, "%s_scale", g->nodes[c->fused].name), CF_OP_CONSTANT, line, c->coll, &k);
  snprintf(text, sizeof text, "%.17g", 1.0 / (double)ws);
  if (!st) st = cf_node_parse_attr(g, k, CF_A_DTYPE, cf_dtype_name(dt), line);
  if (!st) st = cf_node_parse_attr(g, k, CF_A_SHAPE, "", line);
  if (!st) st = cf_node_parse_attr(g, k, CF_A_VALUE, text, line);
  if (!st)
    st = add_node(f, fmt(f, "%s_mean", g->nodes[c->fused].name), CF_OP_MUL, line, c->coll, &m);
  cf_ref in[2] = {{c->fused, 0}, {k, 0}};
  if (!st) st = cf_node_set_inputs(g, m, 2, in);
  if (!st) c->value = m;
  return st;
}

/* The distinct users of mm besides coll: "'y'" / "'a', 'b', 'c'" / "'a', 'b',
 * 'c' and 2 more"; NULL when there are none. A node's users are sorted, so
 * repeats are adjacent. */
static const char *other_users(fuser *f, int mm, int coll) {
  char buf[512];
  size_t o = 0;
  int n = 0;
  for (int k = f->ustart[mm]; k < f->ustart[mm + 1]; k++) {
    int u = f->users[k];
    if (u == coll || (k > f->ustart[mm] && f->users[k - 1] == u)) continue;
    if (n < 3 && o < sizeof buf)
      o += (size_t)snprintf(buf + o, sizeof buf - o, "%s'%s'", n ? ", " : "", f->g->nodes[u].name);
    n++;
  }
  if (!n) return NULL;
  if (n > 3 && o < sizeof buf) snprintf(buf + o, sizeof buf - o, " and %d more", n - 3);
  return fmt(f, "%s", buf);
}

/* Why a MatMul and a collective in two bodies (cf_region) stay apart. */
static const char *other_body(fuser *f, const cf_node *mm, const cf_node *coll) {
  char a[96], b[96];
  return fmt(f, "'%s' is in %s and '%s' in %s (fusing would move it across the body's boundary)",
             mm->name, cf_region_text(f->g, mm->region, a, sizeof a), coll->name,
             cf_region_text(f->g, coll->region, b, sizeof b));
}

static cf_status try_mm_coll(fuser *f, mm_cand *c) {
  cf_graph *g = f->g;
  const cf_node *coll = &g->nodes[c->coll], *mm = &g->nodes[c->mm];
  bool quant = mm->op == CF_OP_QUANTMATMUL, rs = coll->op == CF_OP_REDUCESCATTER;
  cf_reduction red = cf_node_reduction(coll);
  int64_t ws = ranks_of(g, coll);
  const char *mode = quant ? "aiv" : "ai_cpu";
  const char *others = other_users(f, c->mm, c->coll);
  if (f->ordered[c->coll] || f->ordered[c->mm]) {
    c->why = fmt(f, "a control dependency orders '%s' (fusing would move it)",
                 f->ordered[c->coll] ? coll->name : mm->name);
    return CF_OK;
  }
  if (coll->region != mm->region) {
    c->why = other_body(f, mm, coll);
    return CF_OK;
  }
  if (others) {
    c->why =
        fmt(f, "its result is also used by %s (fusing would compute the product twice)", others);
    return CF_OK;
  }
  if (red != CF_RED_SUM && red != CF_RED_MEAN) {
    c->why = fmt(f,
                 "reduction %s does not distribute over the matmul (only sum does, and mean as "
                 "a scaled sum)",
                 cf_reduction_name(red));
    return CF_OK;
  }
  if (red == CF_RED_MEAN && (ws & (ws - 1))) {
    c->why = fmt(f,
                 "reduction mean over %lld ranks: 1/%lld is not exact, so sum-then-scale would "
                 "not give the unfused mean bit for bit",
                 (long long)ws, (long long)ws);
    return CF_OK;
  }
  if (rs && cf_node_int(coll, CF_A_DIM, 0) != 0) {
    c->why = fmt(f, "it scatters along dim %lld, not along m (MatmulReduceScatter scatters dim 0)",
                 (long long)cf_node_int(coll, CF_A_DIM, 0));
    return CF_OK;
  }
  if (quant && !rs) {
    c->why = "MatmulAllReduce has no quantized form (only MatmulReduceScatter takes x1_scale and "
             "x2_scale)";
    return CF_OK;
  }
  if ((c->why = group_conflict(f, mode, cf_node_group(coll)))) return CF_OK;

  /* MatmulReduceScatter operands: x1, x2, [bias], x1_scale, x2_scale;
   * QuantMatMul's are x1, x2, x1_scale, x2_scale, [bias] */
  cf_ref in[5];
  int nin = 2;
  in[0] = mm->in[0], in[1] = mm->in[1];
  if (quant) {
    if (mm->n_in == 5) in[nin++] = mm->in[4];
    in[nin++] = mm->in[2];
    in[nin++] = mm->in[3];
  }
  const char *name = fmt(f, "%s_%s", mm->name, coll->name), *members[2] = {mm->name, coll->name};
  const cf_attr *odt = quant ? cf_node_attr(mm, CF_A_OUTPUT_DTYPE) : NULL;
  cf_attr odt_copy = odt ? *odt : (cf_attr){0};
  int line = coll->line, idx;
  /* coll and mm move when a node is added: copy what is needed first */
  cf_node coll_copy = *coll;
  cf_status st = add_node(f, name, rs ? CF_OP_MATMULREDUCESCATTER : CF_OP_MATMULALLREDUCE, line,
                          c->coll, &idx);
  if (!st) st = cf_node_set_inputs(g, idx, nin, in);
  if (!st) st = set_common(f, idx, &coll_copy, members, 2);
  if (!st) st = set_int(g, idx, CF_A_REDUCTION, CF_RED_SUM);
  if (!st && odt) st = cf_node_set_attr(g, idx, &odt_copy);
  if (!st && quant) st = set_str(g, idx, CF_A_COMM_MODE, "aiv");
  if (st) return st;
  if ((c->why = try_node(f, idx))) return CF_OK;
  c->fused = c->value = idx;
  if (red == CF_RED_MEAN && ws > 1 && (st = add_mean(f, c, ws))) return st;
  f->repl[c->coll] = (cf_ref){c->value, 0};
  g->nodes[c->coll].dead = true;
  if (!f->mc2_group && strcmp(mode, "ai_cpu") == 0) f->mc2_group = cf_node_group(&g->nodes[idx]);
  f->fused_mm++;
  return CF_OK;
}

static cf_status fuse_mm_coll(fuser *f) {
  cf_graph *g = f->g;
  cf_status st;
  for (int v = 0; v < f->n0; v++) {
    const cf_node *n = &g->nodes[v];
    cf_op u = cf_op_unfused(n->op); /* a bucket's members too */
    if (u != CF_OP_REDUCESCATTER && u != CF_OP_ALLREDUCE) continue;
    for (int j = 0; j < n->n_in; j++) {
      cf_op p = g->nodes[n->in[j].node].op;
      if (p == CF_OP_MATMUL || p == CF_OP_QUANTMATMUL)
        if ((st = add_cand(f, v, n->in[j].node, j))) return st;
    }
  }
  for (int i = 0; i < f->nc; i++) {
    mm_cand *c = &f->c[i];
    const cf_node *coll = &g->nodes[c->coll];
    if (cf_op_table[coll->op].cat == CF_CAT_FUSED_COLLECTIVE)
      c->why = fmt(f, "'%s' is in bucket '%s' (bucketing comes first)", member(f, coll, c->port),
                   coll->name);
    else if ((st = try_mm_coll(f, c)))
      return st;
  }
  /* a fused MatMul had no other user: it goes */
  for (int i = 0; i < f->nc; i++) {
    mm_cand *c = &f->c[i];
    const cf_node *coll = &g->nodes[c->coll], *mm = &g->nodes[c->mm];
    bool bucket = cf_op_table[coll->op].cat == CF_CAT_FUSED_COLLECTIVE;
    const char *collname = bucket ? member(f, coll, c->port) : coll->name;
    const char *kind = cf_op_table[cf_op_unfused(coll->op)].name;
    if (c->fused < 0) {
      cf_pass_explain(f->opt, "%s '%s' -> %s '%s' not fused: %s", cf_op_table[mm->op].name,
                      mm->name, kind, collname, c->why);
      continue;
    }
    const cf_node *fn = &g->nodes[c->fused];
    bool mean = c->value != c->fused;
    char reason[1024], line[1536];
    size_t o = (size_t)snprintf(reason, sizeof reason, "%s -> %s(%s)", cf_op_table[mm->op].name,
                                kind, cf_reduction_name(cf_node_reduction(coll)));
    if (mean && o < sizeof reason)
      snprintf(reason + o, sizeof reason - o, ", scaled by '%s'", g->nodes[c->value].name);
    o = (size_t)snprintf(line, sizeof line, "%s '%s' -> %s '%s' -> '%s' (%s%s, world_size %lld)",
                         cf_op_table[mm->op].name, mm->name, kind, coll->name, fn->name,
                         mm->op == CF_OP_QUANTMATMUL ? "quantized " : "", cf_op_table[fn->op].name,
                         (long long)cf_node_int(fn, CF_A_WORLD_SIZE, 0));
    if (mean && o < sizeof line)
      snprintf(line + o, sizeof line - o, "; mean: the sum times 1/world_size in '%s'",
               g->nodes[c->value].name);
    if ((st = set_str(g, c->fused, CF_A_REASON, reason))) return st;
    g->nodes[c->mm].dead = true;
    f->claim[c->mm] = c->fused;
    cf_pass_explain(f->opt, "%s", line);
  }
  return CF_OK;
}

/* ================= AllGather -> MatMul ================= */

/* The topological order in which the AllGathers in late[] come as late as
 * possible (pos), and for every node the latest such AllGather among itself
 * and its ancestors (last, -1 when none). */
static cf_status late_order(fuser *f, const bool *late, int *pos, int *last) {
  cf_graph *g = f->g;
  int n = f->n0;
  size_t nsz = n > 0 ? (size_t)n : 1;
  int *indeg = malloc(nsz * sizeof(int)), *q = malloc(nsz * sizeof(int)),
      *dq = malloc(nsz * sizeof(int));
  if (!indeg || !q || !dq) {
    free(indeg), free(q), free(dq);
    return oom(f);
  }
  int qh = 0, qt = 0, dh = 0, dt = 0, next = 0;
  for (int v = 0; v < n; v++) {
    indeg[v] = g->nodes[v].n_in;
    last[v] = -1;
    if (indeg[v]) continue;
    if (late[v])
      dq[dt++] = v;
    else
      q[qt++] = v;
  }
  while (qh < qt || dh < dt) {
    int v = qh < qt ? q[qh++] : dq[dh++];
    pos[v] = next++;
    if (late[v]) last[v] = v;
    for (int k = f->ustart[v]; k < f->ustart[v + 1]; k++) {
      int u = f->users[k];
      if (last[v] >= 0 && (last[u] < 0 || pos[last[u]] < pos[last[v]])) last[u] = last[v];
      if (--indeg[u]) continue;
      if (late[u])
        dq[dt++] = u;
      else
        q[qt++] = u;
    }
  }
  free(indeg), free(q), free(dq);
  return next == n ? CF_OK
                   : cf_error(g->ctx, CF_ERR_RUNTIME, g->file, 0, "internal: graph has a cycle");
}

static cf_status fuse_ag(fuser *f, int ag, const int *pos, const int *last, int *prod,
                         const char **why, int *stamp) {
  cf_graph *g = f->g;
  cf_status st;
  const cf_node *a = &g->nodes[ag];
  int np = 0, nok = 0;
  /* candidates in the order of their users, each MatMul once */
  for (int k = f->ustart[ag]; k < f->ustart[ag + 1]; k++) {
    int u = f->users[k];
    const cf_node *mm = &g->nodes[u];
    if ((mm->op != CF_OP_MATMUL && mm->op != CF_OP_QUANTMATMUL) || stamp[u] == ag) continue;
    stamp[u] = ag;
    const char *w = NULL;
    int x2 = mm->in[1].node;
    if (mm->in[0].node != ag)
      w = fmt(f, "'%s' is x2 of the MatMul (AllGatherMatmul gathers x1)", a->name);
    else if (f->ordered[ag] || f->ordered[u])
      w = fmt(f, "a control dependency orders '%s' (fusing would move it)",
              f->ordered[ag] ? a->name : mm->name);
    else if (a->region != mm->region)
      w = other_body(f, mm, a);
    else if (mm->op == CF_OP_QUANTMATMUL)
      w = "AllGatherMatmul has no quantized form";
    else if (cf_node_layout(a) != CF_LAYOUT_CONCAT)
      w = "layout stack gathers along a new leading dimension, not along m (AllGatherMatmul needs "
          "layout concat)";
    else if (cf_node_int(a, CF_A_DIM, 0) != 0)
      w = fmt(f, "it gathers along dim %lld, not along m (AllGatherMatmul gathers dim 0)",
              (long long)cf_node_int(a, CF_A_DIM, 0));
    else if (f->claim[u] >= 0)
      w = fmt(f, "'%s' is fused into '%s' with its collective", mm->name,
              g->nodes[f->claim[u]].name);
    else if (x2 == ag)
      w = "x2 is the gathered value itself";
    else if (pos[x2] > pos[ag] && last[x2] == ag)
      w = fmt(f, "x2 '%s' depends on '%s' (AllGatherMatmul needs x2 before the gather starts)",
              g->nodes[x2].name, a->name);
    else if (pos[x2] > pos[ag])
      w = fmt(f,
              "x2 '%s' depends on AllGather '%s', which comes after '%s' (AllGatherMatmul needs x2 "
              "before the gather starts)",
              g->nodes[x2].name, g->nodes[last[x2]].name, a->name);
    else
      w = group_conflict(f, "ai_cpu", cf_node_group(a));
    prod[np] = u;
    why[np++] = w;
    nok += !w;
  }
  if (!np) return CF_OK;
  int idx = -1;
  const char *fail = NULL;
  if (nok) {
    /* x1, then one x2 per product; members: the MatMuls, then the AllGather */
    cf_ref *in = malloc((size_t)(nok + 1) * sizeof *in);
    const char **members = cf_arena_array(&f->scratch, (size_t)nok + 1, sizeof *members);
    if (!in || !members) {
      free(in);
      return oom(f);
    }
    in[0] = a->in[0];
    int k = 1;
    for (int i = 0; i < np; i++) {
      if (why[i]) continue;
      members[k - 1] = g->nodes[prod[i]].name;
      in[k++] = g->nodes[prod[i]].in[1];
    }
    members[nok] = a->name;
    int first = 0;
    while (why[first])
      first++;
    const char *name = nok == 1 ? fmt(f, "%s_%s", a->name, g->nodes[prod[first]].name)
                                : fmt(f, "%s_matmul", a->name);
    cf_node a_copy = *a;
    st = add_node(f, name, CF_OP_ALLGATHERMATMUL, a->line, ag, &idx);
    if (!st) st = cf_node_set_inputs(g, idx, nok + 1, in);
    free(in);
    if (!st) st = set_common(f, idx, &a_copy, members, nok + 1);
    if (!st)
      st = set_str(g, idx, CF_A_REASON,
                   fmt(f, "AllGather(concat) -> %d MatMul%s", nok, nok == 1 ? "" : "s"));
    if (st) return st;
    a = &g->nodes[ag];
    if ((fail = try_node(f, idx))) {
      nok = 0;
    } else {
      int port = 0;
      for (int i = 0; i < np; i++) {
        if (why[i]) continue;
        f->repl[prod[i]] = (cf_ref){idx, port++};
        g->nodes[prod[i]].dead = true;
      }
      f->repl[ag] = (cf_ref){idx, port};
      g->nodes[ag].dead = true;
      if (!f->mc2_group) f->mc2_group = cf_node_group(&g->nodes[idx]);
      f->fused_ag++;
    }
  }
  for (int i = 0, port = 0; i < np; i++) {
    const cf_node *mm = &g->nodes[prod[i]];
    if (why[i] || fail)
      cf_pass_explain(f->opt, "AllGather '%s' -> %s '%s' not fused: %s", a->name,
                      cf_op_table[mm->op].name, mm->name, why[i] ? why[i] : fail);
    else
      cf_pass_explain(
          f->opt,
          "AllGather '%s' -> MatMul '%s' -> '%s' port %d (AllGatherMatmul, %d product%s; the "
          "gathered x1 is port %d)",
          a->name, mm->name, g->nodes[idx].name, port++, nok, nok == 1 ? "" : "s", nok);
  }
  return CF_OK;
}

static cf_status fuse_allgathers(fuser *f) {
  cf_graph *g = f->g;
  int n = f->n0;
  size_t nsz = n > 0 ? (size_t)n : 1;
  bool *late = calloc(nsz, sizeof(bool));
  bool any = false;
  if (!late) return oom(f);
  for (int v = 0; v < n; v++) {
    const cf_node *mm = &g->nodes[v];
    if (mm->op != CF_OP_MATMUL && mm->op != CF_OP_QUANTMATMUL) continue;
    const cf_node *a = &g->nodes[mm->in[0].node];
    if (a->op == CF_OP_ALLGATHER) any = true, late[mm->in[0].node] = true;
    if (g->nodes[mm->in[1].node].op == CF_OP_ALLGATHER) any = true;
    if (a->op == CF_OP_FUSEDALLGATHER)
      cf_pass_explain(
          f->opt,
          "AllGather '%s' -> %s '%s' not fused: '%s' is in bucket '%s' (bucketing comes first)",
          member(f, a, mm->in[0].port), cf_op_table[mm->op].name, mm->name,
          member(f, a, mm->in[0].port), a->name);
  }
  if (!any) {
    free(late);
    return CF_OK;
  }
  int *pos = malloc(nsz * sizeof(int)), *last = malloc(nsz * sizeof(int));
  int *prod = malloc(nsz * sizeof(int)), *stamp = malloc(nsz * sizeof(int));
  const char **why = malloc(nsz * sizeof(char *));
  cf_status st = CF_OK;
  if (!pos || !last || !prod || !stamp || !why) st = oom(f);
  if (!st) st = late_order(f, late, pos, last);
  for (int v = 0; !st && v < n; v++)
    stamp[v] = -1;
  for (int v = 0; !st && v < n; v++)
    if (g->nodes[v].op == CF_OP_ALLGATHER) st = fuse_ag(f, v, pos, last, prod, why, stamp);
  free(late), free(pos), free(last), free(prod), free(stamp), free(why);
  return st;
}

/* ================= rewrite ================= */

/* Readers of replaced results read the fused node; every fused node sits at
 * the position of the node it replaces (see the acyclicity note above). */
static cf_status rewrite(fuser *f) {
  cf_graph *g = f->g;
  for (int v = 0; v < g->n_nodes; v++) {
    cf_node *n = &g->nodes[v];
    for (int j = 0; !n->dead && j < n->n_in; j++) {
      int u = n->in[j].node;
      if (u < f->n0 && f->repl[u].node >= 0) n->in[j] = f->repl[u];
    }
  }
  size_t nsz = (size_t)g->n_nodes + 1;
  int *head = malloc(nsz * sizeof(int)), *next = malloc(nsz * sizeof(int)),
      *order = malloc(nsz * sizeof(int));
  int *tail = malloc(nsz * sizeof(int));
  if (!head || !next || !order || !tail) {
    free(head), free(next), free(order), free(tail);
    return oom(f);
  }
  for (int v = 0; v < f->n0; v++)
    head[v] = tail[v] = -1;
  for (int i = 0; i < f->n_added; i++) {
    int a = f->anchor[i], idx = f->n0 + i;
    next[idx] = -1;
    if (tail[a] < 0)
      head[a] = idx;
    else
      next[tail[a]] = idx;
    tail[a] = idx;
  }
  int no = 0;
  for (int v = 0; v < f->n0; v++) {
    if (!g->nodes[v].dead) order[no++] = v;
    for (int k = head[v]; k >= 0; k = next[k])
      if (!g->nodes[k].dead) order[no++] = k;
  }
  cf_status st = cf_graph_permute(g, order, no);
  free(head), free(next), free(order), free(tail);
  if (!st) st = cf_verify_structure(g);
  if (!st) st = cf_infer(g);
  return st;
}

static cf_status run(cf_graph *g, const cf_pass_options *opt) {
  static const cf_pass_options none = {0};
  if (!opt) opt = &none;
  cf_status st = CF_OK;
  fuser f = {.g = g, .opt = opt, .n0 = g->n_nodes};
  char why[256];
  if (opt->target && !(f.target = cf_target_find(opt->target)))
    return cf_error(g->ctx, CF_ERR_USAGE, NULL, 0, "%s",
                    cf_target_unknown(opt->target, why, sizeof why));
  if (!g->topo && ((st = cf_verify_structure(g)) || (st = cf_infer(g)))) return st;
  int limit = g->node_limit;
  g->node_limit = INT_MAX; /* briefly both the fused nodes and what they replace */
  size_t nsz = f.n0 > 0 ? (size_t)f.n0 : 1;
  int64_t edges = 0;
  for (int v = 0; v < f.n0; v++)
    edges += g->nodes[v].n_in;
  f.ustart = calloc(nsz + 1, sizeof(int));
  f.users = malloc((size_t)(edges ? edges : 1) * sizeof(int));
  f.repl = malloc(nsz * sizeof(cf_ref));
  f.claim = malloc(nsz * sizeof(int));
  f.ordered = calloc(nsz, sizeof(bool));
  int *fill = calloc(nsz, sizeof(int));
  if (!f.ustart || !f.users || !f.repl || !f.claim || !f.ordered || !fill) {
    st = oom(&f);
    goto done;
  }
  for (int v = 0; v < f.n0; v++) {
    g->nodes[v].dead = false;
    f.repl[v] = (cf_ref){-1, 0};
    f.claim[v] = -1;
    for (int j = 0; j < g->nodes[v].n_ctl; j++)
      f.ordered[v] = f.ordered[g->nodes[v].ctl[j]] = true;
    for (int j = 0; j < g->nodes[v].n_in; j++)
      f.ustart[g->nodes[v].in[j].node + 1]++;
  }
  for (int v = 0; v < f.n0; v++)
    f.ustart[v + 1] += f.ustart[v];
  for (int v = 0; v < f.n0; v++)
    for (int j = 0; j < g->nodes[v].n_in; j++) {
      int s = g->nodes[v].in[j].node;
      f.users[f.ustart[s] + fill[s]++] = v;
    }
  /* an existing fused op in comm_mode ai_cpu fixes the communicator */
  for (int v = 0; v < f.n0 && cf_target_one_mc2_group(f.target) && !f.mc2_group; v++)
    if (cf_op_table[g->nodes[v].op].cat == CF_CAT_FUSED_MATMUL &&
        strcmp(cf_node_comm_mode(&g->nodes[v]), "ai_cpu") == 0)
      f.mc2_group = cf_node_group(&g->nodes[v]);
  if ((st = fuse_mm_coll(&f)) || (st = fuse_allgathers(&f))) goto done;
  if (f.n_added) st = rewrite(&f);
  if (!st && (f.fused_mm || f.fused_ag))
    cf_log(g->ctx, CF_LOG_INFO, "fuse-matmul-collective: %d MatMul+collective, %d AllGather+MatMul",
           f.fused_mm, f.fused_ag);
done:
  g->node_limit = limit > g->n_nodes ? limit : g->n_nodes;
  free(fill), free(f.ustart), free(f.users), free(f.repl), free(f.claim), free(f.ordered), free(f.anchor), free(f.c);
  cf_arena_free(&f.scratch);
  return st;
}

const cf_pass cf_pass_fuse_matmul_collective = {
    "fuse-matmul-collective", run,
    "fuse MatMul -> ReduceScatter/AllReduce and AllGather -> MatMul into overlapped fused ops"};
