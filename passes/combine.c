/* combine.c - the dependency-safe collective combiner behind fuse-allreduce,
 * fuse-allgather, fuse-reducescatter and fuse-alltoall.
 *
 * Requires: verified, inferred graph. Preserves: every dependency, acyclicity,
 * every Output; replaces each bucket of two or more collectives with one
 * Fused* node whose port i is member i.
 *
 * A Fused* node in the input (an XLA tuple collective, a bucket of an
 * earlier compile) is a candidate like the plain op, a unit of several
 * members that joins a bucket whole, its ports in order; the splits decide
 * per member, so compiling compile's output again changes nothing.
 *
 * Safety without myopia. Fusing a set of collectives into one node creates a
 * cycle exactly when one member reaches another; fusing several sets at once
 * can also create a cycle between buckets. XLA's combiner avoids both by
 * stopping a bucket at the first dependent op, which splits chains badly
 * (openxla/xla#40135). Here every candidate gets a collective depth: the
 * largest number of candidates on any path from a source to it. Only
 * candidates of equal depth share a bucket. Two candidates of equal depth
 * never reach each other (a path from one to the other would add one to the
 * depth), and every path between buckets climbs in depth, so the result is a
 * DAG; chains a1->a2, b1->b2 give {a1,b1} and {a2,b2}.
 *
 * fusion=2 is the user's explicit request, so it goes first and only other
 * fusion=2 candidates count towards its depth: a fusion_id group is split
 * only by a chain of fusion=2 collectives, never by an unrelated fusion=1
 * one (a tensor-parallel AllReduce in front of some data-parallel
 * gradients). fusion=1 then counts depth on the graph with the fusion_id
 * buckets already contracted (each bucket one node, which is acyclic by the
 * argument above), and every fusion_id bucket and fusion=1 candidate counts,
 * so the two kinds of bucket together still form a DAG. A fusion=2
 * collective left alone counts too: compiled again, a fusion_id bucket is
 * one fused node alone in its fusion_id, and the depths (so the buckets)
 * must come out as they did the first time. Depth is computed
 * in topological sweeps, grouping is a sort: the pass is O(E + n log n).
 *
 * Dependencies are operands and control edges alike (cf_node_dep), so the
 * two ends of a control edge are at different depths and one reaches the
 * other: they never share a bucket. A collective at either end of a
 * control edge stays alone besides, as XLA's combiners leave it
 * (DoNotCombineWithControlDependencies), so no member of a bucket has a
 * control edge for the rewrite to move.
 *
 * Keys are XLA's: group (replica groups), reduction, dtype where the
 * collective reduces (an AllGather or AllToAll bucket moves bytes, so it
 * mixes dtypes unless the split says same_dtype), layout, dim
 * (all_gather_dimension / scatter_dimension), an AllToAll's split and
 * concat dimensions, and combine_key (channel kind, use_global_device_ids,
 * a maximal sharding's device, a user's frontend_attributes key). A key
 * only narrows the classes that depth already made acyclic, so the proof
 * above is unchanged. With the split's any_dim (XLA's combine_by_dim=false)
 * dim leaves the key: a bucket then lists each member's dim (`dims`) and
 * every member is gathered or scattered along its own, which is what XLA's
 * combined op computes after its reshapes. An AllToAll of the tuple form (operand j to rank j)
 * stays alone: its operands are already one exchange. The region
 * (cf_region: the body of a while or a branch of a conditional a node is
 * in, 0 outside any) is a key field too: collectives of one body combine
 * with each other as XLA's combiners combine them inside a while body, and
 * never with one outside it or in another body, since a body may run any
 * number of times, or not at all, for each time the code around it runs
 * once.
 *
 * Beyond equal depth. Depth alone misses collectives that no path joins
 * but that sit at different depths (XLA's CrossCombineGroupCycle: a sum at
 * depth 0 and one at depth 1 on another chain). So the (key, depth) classes
 * of one key (and segment, or fusion_id) are then merged where, in the
 * graph with every class and bucket contracted, neither reaches the other
 * (merge_classes.c, which keeps that reachability closed as merges are
 * made): a merge of two unjoined nodes of a DAG leaves a DAG, since a new
 * cycle through the merged node would be a path between the two before.
 * A merged class takes its shallowest depth as its name, so everything
 * below sees classes as before. The splits then cut each class in ready
 * order (bytes: as XLA's thresholds, ddp: as DDP's reducer); cutting a
 * node of a DAG into parts leaves a DAG (a cycle among the parts would be
 * one through the node).
 */
#include "passes.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Why grouping did what it did, as data: a bucket's rule (why its members
 * share it) or a candidate's reason to stay alone. Grouping only records
 * these; reason_text turns them into --explain's words (and a fusion=2
 * bucket's reason attribute). Names point into the graph's arena, so a
 * reason outlives the rewrite. */
typedef enum reason_kind {
  R_NONE, /* nothing recorded: "no partner" */
  /* a bucket's rule (bucket.rule; a rule's only unit stays alone with it) */
  R_FUSION_ID, /* fusion=2: its fusion_id */
  R_SEGMENT,   /* split size/index: its segment */
  R_AUTO,      /* split auto: buckets, exposed_us (and the profile's cost when measured) */
  R_CAP,       /* split bytes: cap */
  R_DDP,       /* split ddp: the bucket's limit (cap) */
  /* why a candidate stays alone (cand.why) */
  R_FUSION0,       /* fusion=0 */
  R_CONTROL,       /* a control edge orders it (other: the node at the edge's other end) */
  R_TUPLE,         /* an AllToAll of the tuple form */
  R_LOOP,          /* in a while's body or condition, and the split says no_loops (seg: region) */
  R_FID_UNSHARED,  /* no other collective of the kind has its fusion_id */
  R_FID_KEY,       /* fusion_id shared with other, but a key field differs */
  R_FID_CYCLE,     /* fusion_id shared with other, but node depends on collective dep */
  R_AUTO_ALONE,    /* the cost model sends it alone: bucket of buckets, exposed_us */
  R_SEGMENT_ALONE, /* the only fusion=1 one of its kind in its segment */
  R_CAP_NEXT,      /* the bucket's limit (cap) reached: other (bytes) did not fit */
  R_COUNT,         /* the bucket's count of members reached */
  R_OVER_CAP,      /* its bytes alone are more than the cap */
  R_CLASS,         /* no other fusion=1 one shares its group, reduction, dtype and depth */
  R_CLASS_KEY,     /* ... as a key field differs from other */
  R_CLASS_CYCLE,   /* fusing it with other would make a cycle (node depends on collective dep) */
  R_LAST,          /* the last gradient of its class after a full bucket (cap) */
  R_DDP_ALONE,     /* split ddp: alone in its bucket of limit cap */
} reason_kind;

/* The first key field in which two candidates differ (key_diff_of). */
typedef enum key_field {
  KEY_GROUP,
  KEY_DTYPE,
  KEY_REDUCTION,
  KEY_LAYOUT,
  KEY_DIM,
  KEY_COMBINE_KEY,
  KEY_RANK_SIZE,
  KEY_REGION /* dx, dy: the two regions */
} key_field;

typedef struct reason {
  reason_kind kind;
  int64_t fid;               /* R_FUSION_ID, R_FID_* */
  cf_split_kind split;       /* R_SEGMENT*: CF_SPLIT_SIZE or CF_SPLIT_INDEX */
  int seg;                   /* R_SEGMENT* */
  int bucket, buckets;       /* R_AUTO*: this one's bucket (from 1) and how many */
  double exposed_us;         /* R_AUTO*: what the cost model leaves exposed */
  bool measured;             /* R_AUTO: the cost is a profile's (alpha_us, beta_gbps) */
  double alpha_us, beta_gbps;
  int64_t cap, bytes, count; /* R_CAP, R_CAP_NEXT, R_OVER_CAP, R_LAST; R_COUNT */
  const char *other;         /* R_FID_KEY, R_FID_CYCLE, R_CLASS_KEY, R_CAP_NEXT */
  const char *node, *dep;    /* *_CYCLE: node depends on collective dep ("?": unknown) */
  key_field field;           /* *_KEY: the field, */
  const char *mine, *theirs; /* and its two values (none for KEY_RANK_SIZE, */
  int64_t dx, dy;            /* numbers for KEY_DIM, whose attribute's name is in mine) */
} reason;

typedef struct cand {
  const char *name; /* the node's name (arena: survives the rewrite) */
  int node;         /* index in g->nodes before the rewrite */
  int ready;        /* graph position of the producer: gradient-ready order */
  int depth;        /* collective depth (fusion=2: among fusion=2 only) */
  int dep;          /* node of the candidate that set the depth, -1 when none */
  int fusion;       /* 0, 1, 2 */
  int64_t fid;      /* fusion_id */
  int64_t bytes;    /* bytes this collective communicates */
  int key;          /* interned (group, reduction, dtype, layout, rank_size) */
  int seg;          /* fusion=1 split segment */
  int bucket;       /* bucket id, -1 when alone */
  int port;         /* its first port in the bucket (a fused unit has nmem) */
  int nmem;         /* members: 1, or the operands of a fused input node */
  cf_op op;         /* the node's op: the plain kind or its fused form */
  reason why;       /* why alone */
} cand;

typedef struct bucket {
  int first, n; /* units: order[first .. first+n) */
  int ports;    /* members: the fused node's operands */
  int fusion;
  int64_t fid, bytes;
  int node;         /* the fused node, once built */
  const char *name; /* its name */
  int last_pos;     /* largest array position among the members */
  bool split;       /* fusion=2: its fusion_id was split by a dependency */
  reason rule;      /* why its members share it */
} bucket;

typedef struct combiner {
  cf_graph *g;
  const cf_pass_options *opt;
  cf_op kind, fused;
  bool mix_dtypes; /* AllGather, AllToAll: dtypes share a bucket (a byte bucket) */
  bool by_dim;     /* dim is in the key (not with the split's any_dim) */
  char prefix[32]; /* the op's name in lower case: allreduce, allgather, ... */
  cand *c;
  int nc;
  int *by_node; /* node -> candidate index or -1 */
  int *order;   /* candidate indices grouped by bucket */
  bucket *b;
  int nb;
  cf_arena scratch;
} combiner;

static const char *kind_name(const combiner *m) { return cf_op_table[m->kind].name; }

static const char *cname(const combiner *m, int ci) { return m->c[ci].name; }

/* ---- keys: collectives fuse only with equal group, reduction, dtype, layout ---- */

/* The ranks a collective spans: its rank_size, else its group's size. The
 * verifier makes the two agree, so a node that states rank_size and one
 * that leaves it to the group are the same communicator. */
static int64_t rank_size_of(const cf_graph *g, const cf_node *n) {
  int64_t rs = cf_node_int(n, CF_A_RANK_SIZE, -1);
  return rs > 0 ? rs : cf_graph_group_size(g, cf_node_group(n));
}

/* Where candidates a and b differ in their key, into r's field, mine
 * (a's value) and theirs (b's). */
static void key_diff_of(const combiner *m, int a, int b, reason *r) {
  const cf_graph *g = m->g;
  const cf_node *x = &g->nodes[m->c[a].node], *y = &g->nodes[m->c[b].node];
  const cf_value *vx = &g->nodes[x->in[0].node].out[x->in[0].port];
  const cf_value *vy = &g->nodes[y->in[0].node].out[y->in[0].port];
  r->mine = r->theirs = NULL;
  if (x->region != y->region) {
    r->field = KEY_REGION;
    r->dx = x->region, r->dy = y->region;
  } else if (strcmp(cf_node_group(x), cf_node_group(y))) {
    r->field = KEY_GROUP;
    r->mine = cf_node_group(x), r->theirs = cf_node_group(y);
  } else if (vx->dtype != vy->dtype && !m->mix_dtypes) {
    r->field = KEY_DTYPE;
    r->mine = cf_dtype_name(vx->dtype), r->theirs = cf_dtype_name(vy->dtype);
  } else if (cf_node_reduction(x) != cf_node_reduction(y)) {
    r->field = KEY_REDUCTION;
    r->mine = cf_reduction_name(cf_node_reduction(x));
    r->theirs = cf_reduction_name(cf_node_reduction(y));
  } else if (cf_node_layout(x) != cf_node_layout(y)) {
    r->field = KEY_LAYOUT;
    r->mine = cf_layout_name(cf_node_layout(x)), r->theirs = cf_layout_name(cf_node_layout(y));
  } else if (strcmp(cf_node_str(x, CF_A_COMBINE_KEY, ""), cf_node_str(y, CF_A_COMBINE_KEY, ""))) {
    r->field = KEY_COMBINE_KEY;
    r->mine = cf_node_str(x, CF_A_COMBINE_KEY, ""), r->theirs = cf_node_str(y, CF_A_COMBINE_KEY, "");
  } else {
    r->field = KEY_RANK_SIZE;
    static const cf_attr_id dims[] = {CF_A_DIM, CF_A_SPLIT_DIMENSION, CF_A_CONCAT_DIMENSION};
    for (size_t k = m->by_dim ? 0 : 1; k < sizeof dims / sizeof dims[0]; k++)
      if (cf_node_int(x, dims[k], 0) != cf_node_int(y, dims[k], 0)) {
        r->field = KEY_DIM;
        r->mine = cf_attr_table[dims[k]].name;
        r->dx = cf_node_int(x, dims[k], 0), r->dy = cf_node_int(y, dims[k], 0);
        break;
      }
  }
}

static int intern_keys(combiner *m) {
  /* key text per candidate, then sort to give equal texts one id */
  const char **txt = cf_arena_array(&m->scratch, (size_t)m->nc + 1, sizeof(char *));
  int *idx = malloc(((size_t)m->nc + 1) * sizeof(int));
  if (!txt || !idx) {
    free(idx);
    return -1;
  }
  for (int i = 0; i < m->nc; i++) {
    const cf_node *n = &m->g->nodes[m->c[i].node];
    const cf_value *v = &m->g->nodes[n->in[0].node].out[n->in[0].port];
    /* the whole key: a combine_key that differs only far in is another key */
    const char *ck = cf_node_str(n, CF_A_COMBINE_KEY, "");
    /* 8 numbers of up to 20 characters and 9 separators */
    size_t len = strlen(cf_node_group(n)) + strlen(ck) + 192;
    char *buf = cf_arena_alloc(&m->scratch, len);
    if (!buf) {
      free(idx);
      return -1;
    }
    snprintf(buf, len, "%d\x1f%s\x1f%d\x1f%d\x1f%d\x1f%lld\x1f%lld\x1f%lld\x1f%lld\x1f%s", n->region,
             cf_node_group(n),
             (int)cf_node_reduction(n), m->mix_dtypes ? -1 : (int)v->dtype, (int)cf_node_layout(n),
             (long long)rank_size_of(m->g, n),
             (long long)(m->by_dim ? cf_node_int(n, CF_A_DIM, 0) : -1),
             (long long)cf_node_int(n, CF_A_SPLIT_DIMENSION, 0),
             (long long)cf_node_int(n, CF_A_CONCAT_DIMENSION, 0), ck);
    txt[i] = buf;
    idx[i] = i;
  }
  /* insertion into a hash table of texts */
  int cap = 16;
  while (cap < 2 * m->nc + 2)
    cap *= 2;
  int *tab = calloc((size_t)cap, sizeof(int));
  if (!tab) {
    free(idx);
    return -1;
  }
  int next = 0;
  for (int i = 0; i < m->nc; i++) {
    int *s = cf_name_slot(tab, (size_t)cap, txt, 0, sizeof *txt, txt[i]);
    if (!*s) {
      *s = i + 1;
      m->c[i].key = next++;
    } else {
      m->c[i].key = m->c[*s - 1].key;
    }
  }
  free(tab);
  free(idx);
  return 0;
}

/* ---- depth ---- */

/* fusion=2 depth: one topological sweep in which only fusion=2 candidates
 * count; also the gradient-ready position of every candidate. */
static cf_status compute_depth2(combiner *m) {
  cf_graph *g = m->g;
  size_t nn = g->n_nodes > 0 ? (size_t)g->n_nodes : 1;
  int *dout = malloc(nn * sizeof(int)), *via = malloc(nn * sizeof(int));
  if (!dout || !via) {
    free(dout), free(via);
    return cf_error(g->ctx, CF_ERR_NO_MEMORY, g->file, 0, "out of memory");
  }
  for (int k = 0; k < g->n_nodes; k++) {
    int v = g->topo[k];
    const cf_node *n = &g->nodes[v];
    int din = 0, dv = -1;
    for (int j = 0; j < cf_node_n_deps(n); j++)
      if (dout[cf_node_dep(n, j)] > din) din = dout[cf_node_dep(n, j)], dv = via[cf_node_dep(n, j)];
    int ci = m->by_node[v];
    if (ci >= 0 && m->c[ci].fusion == 2) {
      m->c[ci].depth = din;
      m->c[ci].dep = dv;
      dout[v] = din + 1;
      via[v] = v;
    } else {
      dout[v] = din;
      via[v] = dv;
    }
    /* gradient-ready order is the graph order of the producers */
    if (ci >= 0) m->c[ci].ready = n->in[0].node;
  }
  free(dout), free(via);
  return CF_OK;
}

/* fusion=1 depth on the graph with the fusion_id buckets (m->b[0..nb),
 * built by group_fusion2) contracted: Kahn's algorithm over units, a unit
 * being a bucket (named by its first member's node) or a single node.
 * Buckets and fusion=1 candidates count. */
static cf_status compute_depth1(combiner *m) {
  cf_graph *g = m->g;
  int nn = g->n_nodes;
  size_t nsz = nn > 0 ? (size_t)nn : 1;
  int64_t edges = 0;
  for (int v = 0; v < nn; v++)
    edges += cf_node_n_deps(&g->nodes[v]);
  int *rep = malloc(nsz * sizeof(int)), *unit_b = malloc(nsz * sizeof(int));
  int *indeg = calloc(nsz, sizeof(int)), *start = calloc(nsz + 1, sizeof(int));
  int *fill = calloc(nsz, sizeof(int)), *queue = malloc(nsz * sizeof(int));
  int *dout = calloc(nsz, sizeof(int)), *via = malloc(nsz * sizeof(int));
  int *users = malloc((size_t)(edges > 0 ? edges : 1) * sizeof(int));
  cf_status st = CF_OK;
  if (!rep || !unit_b || !indeg || !start || !fill || !queue || !dout || !via || !users) {
    st = cf_error(g->ctx, CF_ERR_NO_MEMORY, g->file, 0, "out of memory");
    goto done;
  }
  for (int v = 0; v < nn; v++)
    rep[v] = v, unit_b[v] = -1, via[v] = -1;
  for (int k = 0; k < m->nb; k++) {
    int r = m->c[m->order[m->b[k].first]].node;
    unit_b[r] = k;
    for (int i = 0; i < m->b[k].n; i++)
      rep[m->c[m->order[m->b[k].first + i]].node] = r;
  }
  for (int v = 0; v < nn; v++)
    for (int j = 0; j < cf_node_n_deps(&g->nodes[v]); j++) {
      int ru = rep[cf_node_dep(&g->nodes[v], j)];
      if (ru != rep[v]) start[ru + 1]++, indeg[rep[v]]++;
    }
  for (int v = 0; v < nn; v++)
    start[v + 1] += start[v];
  for (int v = 0; v < nn; v++)
    for (int j = 0; j < cf_node_n_deps(&g->nodes[v]); j++) {
      int ru = rep[cf_node_dep(&g->nodes[v], j)];
      if (ru != rep[v]) users[start[ru] + fill[ru]++] = rep[v];
    }
  int head = 0, tail = 0, units = 0;
  for (int v = 0; v < nn; v++)
    if (rep[v] == v) {
      units++;
      if (!indeg[v]) queue[tail++] = v;
    }
  while (head < tail) {
    int r = queue[head++];
    int din = 0, dv = -1;
    const bucket *b = unit_b[r] >= 0 ? &m->b[unit_b[r]] : NULL;
    for (int i = 0; i < (b ? b->n : 1); i++) {
      const cf_node *n = &g->nodes[b ? m->c[m->order[b->first + i]].node : r];
      for (int j = 0; j < cf_node_n_deps(n); j++) {
        int u = cf_node_dep(n, j), ru = rep[u];
        if (dout[ru] <= din) continue;
        int cu = m->by_node[u];
        bool counted = unit_b[ru] >= 0 || (cu >= 0 && m->c[cu].fusion >= 1);
        din = dout[ru];
        dv = counted ? u : via[ru];
      }
    }
    int ci = m->by_node[r];
    if (unit_b[r] >= 0 || (ci >= 0 && m->c[ci].fusion >= 1)) {
      if (unit_b[r] < 0 && m->c[ci].fusion == 1) m->c[ci].depth = din, m->c[ci].dep = dv;
      dout[r] = din + 1;
    } else {
      dout[r] = din;
      via[r] = dv;
    }
    for (int k = start[r]; k < start[r + 1]; k++)
      if (--indeg[users[k]] == 0) queue[tail++] = users[k];
  }
  if (tail != units)
    st = cf_error(g->ctx, CF_ERR_RUNTIME, g->file, 0, "internal: fusion_id buckets form a cycle");
done:
  free(rep), free(unit_b), free(indeg), free(start), free(fill), free(queue), free(dout), free(via);
  free(users);
  return st;
}

/* ---- grouping ---- */

/* C11's qsort takes no user pointer, and a file-level one would be global
 * state: candidates are sorted by a small merge sort that carries the
 * combiner (stable, so ties keep their order). */
typedef int (*cand_cmp)(const combiner *m, int a, int b);

static int cmp_fid(const combiner *m, int ia, int ib) {
  const cand *a = &m->c[ia], *b = &m->c[ib];
  if (a->fid != b->fid) return a->fid < b->fid ? -1 : 1;
  if (a->key != b->key) return a->key - b->key;
  if (a->depth != b->depth) return a->depth - b->depth;
  return a->ready != b->ready ? a->ready - b->ready : a->node - b->node;
}

static int cmp_ready(const combiner *m, int ia, int ib) {
  const cand *a = &m->c[ia], *b = &m->c[ib];
  return a->ready != b->ready ? a->ready - b->ready : a->node - b->node;
}

static int cmp_class(const combiner *m, int ia, int ib) {
  const cand *a = &m->c[ia], *b = &m->c[ib];
  if (a->seg != b->seg) return a->seg - b->seg;
  if (a->key != b->key) return a->key - b->key;
  if (a->depth != b->depth) return a->depth - b->depth;
  return a->ready != b->ready ? a->ready - b->ready : a->node - b->node;
}

static void merge_sort(const combiner *m, int *v, int *tmp, int n, cand_cmp cmp) {
  if (n < 2) return;
  int h = n / 2;
  merge_sort(m, v, tmp, h, cmp);
  merge_sort(m, v + h, tmp, n - h, cmp);
  int i = 0, j = h, k = 0;
  while (i < h && j < n)
    tmp[k++] = cmp(m, v[j], v[i]) < 0 ? v[j++] : v[i++];
  while (i < h)
    tmp[k++] = v[i++];
  while (j < n)
    tmp[k++] = v[j++];
  memcpy(v, tmp, (size_t)n * sizeof(int));
}

static bool sort_cands(const combiner *m, int *v, int n, cand_cmp cmp) {
  int *tmp = malloc(((size_t)n + 1) * sizeof(int));
  if (!tmp) return false;
  merge_sort(m, v, tmp, n, cmp);
  free(tmp);
  return true;
}

/* Grouping beyond equal depth (merge_classes.c): the (family, depth) runs
 * of v[0..n), sorted by cmp, are the classes (family: seg and key for
 * fusion=1, fusion_id and key for fusion=2), the buckets built so far
 * units of no family. A run merged into an earlier one takes its depth
 * (the earlier run's, so one depth names one class again), and v is
 * sorted again. */
static cf_status merge_depths(combiner *m, int *v, int n, bool by_seg, cand_cmp cmp) {
  cf_graph *g = m->g;
  size_t nn = g->n_nodes > 0 ? (size_t)g->n_nodes : 1, nk = (size_t)(n + m->nb) + 1;
  int *node_cls = malloc(nn * sizeof(int)), *family = malloc(nk * sizeof(int));
  int *group = malloc(nk * sizeof(int)), *first = malloc(nk * sizeof(int));
  cf_status st = CF_OK;
  if (!node_cls || !family || !group || !first) {
    st = cf_error(g->ctx, CF_ERR_NO_MEMORY, g->file, 0, "out of memory");
    goto done;
  }
  for (int u = 0; u < g->n_nodes; u++)
    node_cls[u] = -1;
  int ncls = 0, fam = -1;
  for (int k = 0; k < n; k++) {
    const cand *c = &m->c[v[k]], *p = k ? &m->c[v[k - 1]] : NULL;
    bool same = p && p->key == c->key && (by_seg ? p->seg == c->seg : p->fid == c->fid);
    if (!same) fam++;
    if (!same || p->depth != c->depth) first[ncls] = k, family[ncls++] = fam;
    node_cls[c->node] = ncls - 1;
  }
  for (int b = 0; b < m->nb; b++, ncls++) {
    family[ncls] = -1;
    for (int i = 0; i < m->b[b].n; i++)
      node_cls[m->c[m->order[m->b[b].first + i]].node] = ncls;
  }
  if ((st = cf_merge_classes(g, node_cls, ncls, family, group))) goto done;
  bool merged = false;
  for (int k = 0; k < n; k++) {
    int x = node_cls[m->c[v[k]].node];
    if (group[x] == x) continue;
    m->c[v[k]].depth = m->c[v[first[group[x]]]].depth;
    merged = true;
  }
  if (merged && !sort_cands(m, v, n, cmp))
    st = cf_error(g->ctx, CF_ERR_NO_MEMORY, NULL, 0, "out of memory");
done:
  free(node_cls), free(family), free(group), free(first);
  return st;
}

static cf_status add_bucket(combiner *m, int first, int n, int fusion, const reason *rule) {
  /* a node takes at most CF_MAX_OPERANDS operands: larger buckets are cut
   * into consecutive chunks (parts of a class: see the essay) */
  int units = 0, mem = 0;
  while (units < n && mem + m->c[m->order[first + units]].nmem <= CF_MAX_OPERANDS)
    mem += m->c[m->order[first + units++]].nmem;
  if (units < n) {
    add_bucket(m, first, units ? units : 1, fusion, rule);
    return add_bucket(m, first + (units ? units : 1), n - (units ? units : 1), fusion, rule);
  }
  if (n < 2) {
    if (n == 1 && !m->c[m->order[first]].why.kind) m->c[m->order[first]].why = *rule;
    return CF_OK;
  }
  bucket *b = &m->b[m->nb];
  *b = (bucket){.first = first, .n = n, .fusion = fusion, .rule = *rule, .last_pos = -1};
  for (int i = 0, port = 0; i < n; i++) {
    cand *c = &m->c[m->order[first + i]];
    c->bucket = m->nb;
    c->port = port;
    port += c->nmem;
    b->ports = port;
    b->bytes += c->bytes;
    b->fid = c->fid;
    if (c->node > b->last_pos) b->last_pos = c->node;
  }
  m->nb++;
  return CF_OK;
}

/* fusion=2: equal fusion_id, key and depth (merged across depths where no
 * path joins them). A fusion_id whose ops are still at several depths is
 * split, one bucket per depth, and --explain says why. */
static void why_alone_fid(combiner *m, int *v, int lo, int hi, int self) {
  const cand *s = &m->c[self];
  reason r = {.kind = R_FID_UNSHARED, .fid = s->fid};
  for (int k = lo; k < hi; k++) {
    int o = v[k];
    if (o == self) continue;
    const cand *x = &m->c[o];
    r.other = cname(m, o);
    if (x->key != s->key) {
      r.kind = R_FID_KEY;
      key_diff_of(m, self, o, &r);
    } else {
      const cand *deep = x->depth > s->depth ? x : s;
      r.kind = R_FID_CYCLE;
      r.node = m->g->nodes[deep->node].name;
      r.dep = deep->dep >= 0 ? m->g->nodes[deep->dep].name : "?";
    }
    break;
  }
  m->c[self].why = r;
}

static cf_status group_fusion2(combiner *m, int *v, int n) {
  if (!sort_cands(m, v, n, cmp_fid))
    return cf_error(m->g->ctx, CF_ERR_NO_MEMORY, NULL, 0, "out of memory");
  cf_status st = merge_depths(m, v, n, false, cmp_fid);
  if (st) return st;
  int at = 0;
  for (int lo = 0; lo < n;) {
    int hi = lo;
    while (hi < n && m->c[v[hi]].fid == m->c[v[lo]].fid)
      hi++;
    /* [lo,hi) share a fusion_id; split by key, then by depth */
    for (int ks = lo; ks < hi;) {
      int ke = ks;
      while (ke < hi && m->c[v[ke]].key == m->c[v[ks]].key)
        ke++;
      /* sorted by depth within a key: split when the ends differ */
      bool split = m->c[v[ks]].depth != m->c[v[ke - 1]].depth;
      for (int s = ks; s < ke;) {
        int e = s;
        while (e < ke && m->c[v[e]].depth == m->c[v[s]].depth)
          e++;
        for (int k = s; k < e; k++)
          m->order[at + k - s] = v[k];
        if (e - s == 1) why_alone_fid(m, v, lo, hi, v[s]);
        reason rule = {.kind = R_FUSION_ID, .fid = m->c[v[s]].fid};
        int nb = m->nb;
        add_bucket(m, at, e - s, 2, &rule);
        if (m->nb > nb) m->b[nb].split = split;
        at += e - s;
        s = e;
      }
      ks = ke;
    }
    lo = hi;
  }
  return CF_OK;
}

/* fusion=1: the split strategy. size/index segments are global over the
 * kind's fusion=1 gradients in ready order; buckets never cross a key or a
 * class (depth, merged across depths where no path joins them); bytes/auto
 * pack greedily within each (key, class). */
/* The splits decide per gradient: the units v[0..n) expanded to their
 * members' bytes (a fused unit's bytes shared by its operands' sizes), with
 * first[k] the index of unit k's first member. Splitting members and then
 * keeping each unit whole in its first member's part gives back an
 * earlier compile's buckets: compile is idempotent. NULL when out of memory. */
static int64_t *member_bytes(const combiner *m, const int *v, int n, int **first, int *total) {
  int nm = 0;
  for (int k = 0; k < n; k++)
    nm += m->c[v[k]].nmem;
  int64_t *b = malloc(((size_t)nm + 1) * sizeof(int64_t));
  *first = malloc(((size_t)n + 1) * sizeof(int));
  if (!b || !*first) {
    free(b), free(*first);
    *first = NULL;
    return NULL;
  }
  for (int k = 0, at = 0; k < n; k++) {
    const cand *c = &m->c[v[k]];
    const cf_node *nd = &m->g->nodes[c->node];
    (*first)[k] = at;
    if (c->nmem == 1) {
      b[at++] = c->bytes;
      continue;
    }
    int64_t in = 0, sz[CF_MAX_OPERANDS], left = c->bytes;
    for (int i = 0; i < nd->n_in; i++) {
      sz[i] = 0;
      cf_value_bytes(&m->g->nodes[nd->in[i].node].out[nd->in[i].port], &sz[i]);
      in += sz[i];
    }
    for (int i = 0; i < nd->n_in; i++) {
      int64_t x = i + 1 < nd->n_in && in > 0
                      ? (int64_t)((double)c->bytes * (double)sz[i] / (double)in)
                      : left;
      b[at++] = x;
      left -= x;
    }
  }
  *total = nm;
  return b;
}

/* auto on one (key, depth) class v[lo..hi) in ready order: the simulated
 * overlap model of split.c picks the bucket boundaries between gradients. */
static cf_status group_auto(combiner *m, const int *v, int lo, int hi, int at,
                            const cf_cost *cost) {
  int n = hi - lo, nm = 0, *first = NULL;
  int64_t *sizes = member_bytes(m, v + lo, n, &first, &nm);
  int *part = sizes ? malloc((size_t)nm * sizeof(int)) : NULL;
  if (!part) {
    free(sizes), free(first);
    return cf_error(m->g->ctx, CF_ERR_NO_MEMORY, m->g->file, 0, "out of memory");
  }
  cf_split_auto_partition(cost, sizes, nm, part, NULL);
  /* units whole: every member in its unit's first member's part, numbered again */
  int nb = 0;
  for (int k = 0; k < n; k++) {
    int p = part[first[k]], e = k + 1 < n ? first[k + 1] : nm;
    if (k == 0 || p != part[first[k - 1]]) nb++;
    for (int i = first[k]; i < e; i++)
      part[i] = p;
  }
  double exposed = cf_split_exposed(cost, sizes, nm, part);
  reason rule = {.kind = R_AUTO,
                 .buckets = nb,
                 .exposed_us = exposed,
                 .measured = m->opt->measured_cost && !m->opt->cost,
                 .alpha_us = cost->alpha_us,
                 .beta_gbps = cost->beta_gbps};
  int start = 0, b = 0;
  for (int k = 0; k < n; k++) {
    m->order[at + k] = v[lo + k];
    if (k + 1 < n && part[first[k + 1]] == part[first[k]]) continue;
    b++;
    if (k == start)
      m->c[v[lo + k]].why =
          (reason){.kind = R_AUTO_ALONE, .bucket = b, .buckets = nb, .exposed_us = exposed};
    add_bucket(m, at + start, k - start + 1, 1, &rule);
    start = k + 1;
  }
  free(sizes), free(part), free(first);
  return CF_OK;
}

/* ddp on one (key, depth) class v[lo..hi) in ready order: DDP's rule
 * (split.c) decides per member, units stay whole as in group_auto. */
static cf_status group_ddp(combiner *m, const int *v, int lo, int hi, int at, const cf_split *sp) {
  int n = hi - lo, nm = 0, *first = NULL;
  int64_t *sizes = member_bytes(m, v + lo, n, &first, &nm);
  int *part = sizes ? malloc(((size_t)nm + 1) * sizeof(int)) : NULL;
  if (!part) {
    free(sizes), free(first);
    return cf_error(m->g->ctx, CF_ERR_NO_MEMORY, m->g->file, 0, "out of memory");
  }
  int nb = cf_split_ddp_partition(sp, sizes, nm, part);
  /* bucket k's limit: the initial assignment numbers buckets from the end */
  int start = 0;
  for (int k = 0; k < n; k++) {
    m->order[at + k] = v[lo + k];
    if (k + 1 < n && part[first[k + 1]] == part[first[k]]) continue;
    int b = sp->initial ? nb - 1 - part[first[k]] : part[first[k]];
    reason rule = {.kind = R_DDP, .cap = sp->limit[b < sp->n ? b : sp->n - 1]};
    if (k == start) m->c[v[lo + k]].why = (reason){.kind = R_DDP_ALONE, .cap = rule.cap};
    add_bucket(m, at + start, k - start + 1, 1, &rule);
    start = k + 1;
  }
  free(sizes), free(part), free(first);
  return CF_OK;
}

static cf_status group_fusion1(combiner *m, int *v, int n, int at0, const cf_split *sp,
                               const cf_cost *cost) {
  cf_graph *g = m->g;
  cf_status st;
  char why[256];
  if (!sort_cands(m, v, n, cmp_ready))
    return cf_error(g->ctx, CF_ERR_NO_MEMORY, NULL, 0, "out of memory");
  if (sp->kind == CF_SPLIT_SIZE || sp->kind == CF_SPLIT_INDEX) {
    int nm = 0, *first = NULL;
    int64_t *bytes = member_bytes(m, v, n, &first, &nm);
    int *seg = bytes ? malloc(((size_t)nm + 1) * sizeof(int)) : NULL;
    if (!seg) {
      free(bytes), free(first);
      return cf_error(g->ctx, CF_ERR_NO_MEMORY, g->file, 0, "out of memory");
    }
    bool ok = cf_split_segments(sp, bytes, nm, seg, why, sizeof why);
    for (int i = 0; ok && i < n; i++)
      m->c[v[i]].seg = seg[first[i]];
    free(bytes), free(seg), free(first);
    if (!ok) return cf_error(g->ctx, CF_ERR_USAGE, g->file, 0, "%s (%s)", why, kind_name(m));
  }
  if (!sort_cands(m, v, n, cmp_class))
    return cf_error(g->ctx, CF_ERR_NO_MEMORY, NULL, 0, "out of memory");
  if ((st = merge_depths(m, v, n, true, cmp_class))) return st;
  int at = at0;
  for (int lo = 0; lo < n;) {
    int hi = lo;
    const cand *c0 = &m->c[v[lo]];
    int64_t total = 0;
    while (hi < n && m->c[v[hi]].seg == c0->seg && m->c[v[hi]].key == c0->key &&
           m->c[v[hi]].depth == c0->depth)
      total += m->c[v[hi++]].bytes;
    if (sp->kind == CF_SPLIT_SIZE || sp->kind == CF_SPLIT_INDEX) {
      reason rule = {.kind = R_SEGMENT, .split = sp->kind, .seg = c0->seg};
      for (int k = lo; k < hi; k++)
        m->order[at + k - lo] = v[k];
      if (hi - lo == 1)
        m->c[v[lo]].why = (reason){.kind = R_SEGMENT_ALONE, .split = sp->kind, .seg = c0->seg};
      add_bucket(m, at, hi - lo, 1, &rule);
      at += hi - lo;
      lo = hi;
      continue;
    }
    if (sp->kind == CF_SPLIT_DDP) {
      if ((st = group_ddp(m, v, lo, hi, at, sp))) return st;
      at += hi - lo;
      lo = hi;
      continue;
    }
    if (sp->kind == CF_SPLIT_AUTO && hi - lo > 1) {
      if ((st = group_auto(m, v, lo, hi, at, cost))) return st;
      at += hi - lo;
      lo = hi;
      continue;
    }
    int64_t cap = sp->kind == CF_SPLIT_AUTO ? total : sp->cap;
    int64_t first = sp->kind == CF_SPLIT_BYTES && sp->first ? sp->first : cap;
    int64_t count = sp->count;
    reason rule = {.kind = R_CAP, .cap = cap};
    int start = at, nmem = 0, nbuckets = 0, ports = 0; /* units and members in the open bucket */
    int64_t cur = 0;
    for (int k = lo; k < hi; k++) {
      cand *c = &m->c[v[k]];
      int64_t limit = nbuckets == 0 ? first : cap;
      bool full = nmem > 0 && (cur + c->bytes > limit || (count && ports + c->nmem > count));
      if (full || (c->bytes > cap && nmem > 0)) {
        if (nmem == 1)
          m->c[m->order[start]].why =
              count && ports + c->nmem > count
                  ? (reason){.kind = R_COUNT, .count = count}
                  : (reason){.kind = R_CAP_NEXT, .cap = limit, .other = cname(m, v[k]),
                             .bytes = c->bytes};
        add_bucket(m, start, nmem, 1, &rule);
        start += nmem;
        nmem = ports = 0;
        cur = 0;
        nbuckets++;
      }
      m->order[start + nmem++] = v[k];
      ports += c->nmem;
      cur += c->bytes;
      if (c->bytes > cap) {
        c->why = (reason){.kind = R_OVER_CAP, .bytes = c->bytes, .cap = cap};
        add_bucket(m, start, 1, 1, &rule);
        start += 1;
        nmem = ports = 0;
        cur = 0;
        nbuckets++;
      }
    }
    if (nmem == 1 && hi - lo == 1) {
      const cand *s = &m->c[m->order[start]];
      /* the only member of its class: a collective of its key that a path
       * keeps apart (it depends on one, or one on it, or both sit on a
       * cycle through a bucket), else the field that differs from another */
      reason r = {.kind = R_CLASS};
      for (int k = 0; k < n; k++) {
        const cand *x = &m->c[v[k]];
        if (x == s || x->seg != s->seg || x->key != s->key) continue;
        const cand *deep = x->depth > s->depth ? x : s;
        r = (reason){.kind = R_CLASS_CYCLE,
                     .other = cname(m, v[k]),
                     .node = g->nodes[deep->node].name,
                     .dep = deep->dep >= 0 ? g->nodes[deep->dep].name : "?"};
        break;
      }
      for (int k = 0; k < n && r.kind == R_CLASS; k++) {
        const cand *x = &m->c[v[k]];
        if (x == s || x->seg != s->seg) continue;
        r = (reason){.kind = R_CLASS_KEY, .other = cname(m, v[k])};
        key_diff_of(m, m->order[start], v[k], &r);
      }
      m->c[m->order[start]].why = r;
    } else if (nmem == 1 && !m->c[m->order[start]].why.kind) {
      m->c[m->order[start]].why = (reason){.kind = R_LAST, .cap = cap};
    }
    add_bucket(m, start, nmem, 1, &rule);
    at = start + nmem;
    lo = hi;
  }
  return CF_OK;
}

/* ---- --explain: the reasons in words ---- */

/* r as --explain says it, into buf (and returns buf). Each text is cut
 * where it always was (192 bytes for the cost model's, 256 for the rest;
 * a key difference at 160), so long names read as before. */
static const char *reason_text(const combiner *m, const reason *r, char *buf, size_t len) {
  char d[160] = "", from[96] = "", b1[32];
  size_t cut = r->kind == R_AUTO || r->kind == R_AUTO_ALONE ? 192 : 256;
  if (len > cut) len = cut;
  const char *seg = r->split == CF_SPLIT_SIZE ? "size" : "index";
  if (r->kind == R_FID_KEY || r->kind == R_CLASS_KEY) {
    static const char *const field[] = {"group", "dtype", "reduction", "layout"};
    char ra[96], rb[96];
    if (r->field == KEY_RANK_SIZE)
      snprintf(d, sizeof d, "rank_size differs");
    else if (r->field == KEY_REGION)
      snprintf(d, sizeof d, "body differs (%s vs %s)",
               cf_region_text(m->g, (int)r->dx, ra, sizeof ra),
               cf_region_text(m->g, (int)r->dy, rb, sizeof rb));
    else if (r->field == KEY_COMBINE_KEY)
      snprintf(d, sizeof d, "combine_key differs ('%.40s' vs '%.40s')", r->mine, r->theirs);
    else if (r->field == KEY_DIM)
      snprintf(d, sizeof d, "%s differs (%lld vs %lld)", r->mine, (long long)r->dx,
               (long long)r->dy);
    else
      snprintf(d, sizeof d, "%s differs (%s vs %s)", field[r->field], r->mine, r->theirs);
  }
  if (r->kind == R_CAP || r->kind == R_CAP_NEXT || r->kind == R_OVER_CAP || r->kind == R_LAST ||
      r->kind == R_DDP || r->kind == R_DDP_ALONE)
    cf_split_format_bytes(r->cap, b1, sizeof b1);
  switch (r->kind) {
  case R_NONE: snprintf(buf, len, "no partner"); break;
  case R_FUSION_ID: snprintf(buf, len, "fusion_id=%lld", (long long)r->fid); break;
  case R_SEGMENT: snprintf(buf, len, "split %s segment %d", seg, r->seg); break;
  case R_AUTO:
    if (r->measured)
      snprintf(from, sizeof from, ", profile's alpha %.3g us, beta %.3g GB/s", r->alpha_us,
               r->beta_gbps);
    snprintf(buf, len, "split auto: %d bucket%s, model exposes %.0f us%s", r->buckets,
             r->buckets == 1 ? "" : "s", r->exposed_us, from);
    break;
  case R_CAP: snprintf(buf, len, "split bytes cap=%s", b1); break;
  case R_DDP: snprintf(buf, len, "split ddp limit=%s", b1); break;
  case R_DDP_ALONE: snprintf(buf, len, "split ddp: alone in its bucket (limit %s)", b1); break;
  case R_FUSION0: snprintf(buf, len, "fusion=0"); break;
  case R_LOOP: {
    char where[96];
    snprintf(buf, len, "it is in %s and the split says no_loops (XLA's combine_while_loops=false)",
             cf_region_text(m->g, r->seg, where, sizeof where));
    break;
  }
  case R_TUPLE:
    snprintf(buf, len, "the tuple form (operand j to rank j) is one exchange already");
    break;
  case R_CONTROL:
    snprintf(buf, len, "a control dependency orders it against '%s' (XLA's combiners leave such a one alone)",
             r->other);
    break;
  case R_FID_UNSHARED:
    snprintf(buf, len, "no other %s has fusion_id=%lld", kind_name(m), (long long)r->fid);
    break;
  case R_FID_KEY:
    snprintf(buf, len, "fusion_id=%lld is shared with '%s', but %s", (long long)r->fid, r->other,
             d);
    break;
  case R_FID_CYCLE:
    snprintf(buf, len,
             "fusion_id=%lld is shared with '%s', but '%s' depends on collective '%s' (fusing "
             "them would make a cycle)",
             (long long)r->fid, r->other, r->node, r->dep);
    break;
  case R_AUTO_ALONE:
    snprintf(buf, len,
             "split auto: the cost model sends it alone (bucket %d of %d, model exposes %.0f us)",
             r->bucket, r->buckets, r->exposed_us);
    break;
  case R_SEGMENT_ALONE:
    snprintf(buf, len, "the only fusion=1 %s of its kind in %s segment %d", kind_name(m), seg,
             r->seg);
    break;
  case R_CAP_NEXT:
    snprintf(buf, len, "bucket cap %s reached: the next gradient '%s' (%lld bytes) did not fit", b1,
             r->other, (long long)r->bytes);
    break;
  case R_COUNT: snprintf(buf, len, "count=%lld reached", (long long)r->count); break;
  case R_OVER_CAP:
    snprintf(buf, len, "cap reached: %lld bytes is more than the cap %s", (long long)r->bytes, b1);
    break;
  case R_CLASS:
    snprintf(buf, len, "no other fusion=1 %s shares its group, reduction, dtype and depth",
             kind_name(m));
    break;
  case R_CLASS_KEY: snprintf(buf, len, "%s from '%s'", d, r->other); break;
  case R_CLASS_CYCLE:
    snprintf(buf, len, "fusing it with '%s' would make a cycle ('%s' depends on collective '%s')",
             r->other, r->node, r->dep);
    break;
  case R_LAST:
    snprintf(buf, len, "last gradient of its class after a full bucket (cap %s)", b1);
    break;
  }
  return buf;
}

/* ---- rewriting ---- */

/* Member i of a unit: the node itself, or item i of a fused input node's
 * `members` (what XLA or an earlier compile fused; the verifier made the
 * list as long as the operands). */
static const char *unit_member(const combiner *m, int ci, int i) {
  const cand *c = &m->c[ci];
  if (c->op == m->kind) return c->name;
  return cf_node_strs(&m->g->nodes[c->node], CF_A_MEMBERS).v[i];
}

/* The bucket's members and their offsets, one per port (arrays of b->ports).
 * Offsets are recomputed over all members: a fused unit's own layout is
 * replaced by its place in the new bucket. */
static void layout_of(combiner *m, const bucket *b, const char **names, int64_t *offs) {
  int64_t off = 0;
  int k = 0;
  for (int u = 0; u < b->n; u++) {
    int ci = m->order[b->first + u];
    const cf_node *n = &m->g->nodes[m->c[ci].node];
    for (int i = 0; i < n->n_in; i++, k++) {
      int64_t bytes = 0;
      cf_value_bytes(&m->g->nodes[n->in[i].node].out[n->in[i].port], &bytes);
      off = (off + CF_BUFFER_ALIGN - 1) / CF_BUFFER_ALIGN * CF_BUFFER_ALIGN;
      names[k] = unit_member(m, ci, i);
      offs[k] = off;
      off += bytes;
    }
  }
}

/* The fused node's dim: each member's own (a fused unit's members' too),
 * as `dim` when they agree (and are not 0), else as `dims`, one a member. */
static cf_status set_dims(combiner *m, const bucket *b, int idx) {
  cf_graph *g = m->g;
  int64_t *d = malloc((size_t)b->ports * sizeof *d);
  if (!d) return cf_error(g->ctx, CF_ERR_NO_MEMORY, g->file, 0, "out of memory");
  bool same = true;
  for (int u = 0, k = 0; u < b->n; u++) {
    const cf_node *n = &g->nodes[m->c[m->order[b->first + u]].node];
    for (int i = 0; i < n->n_in; i++, k++) {
      d[k] = cf_node_member_dim(n, i);
      same &= d[k] == d[0];
    }
  }
  cf_status st = CF_OK;
  cf_attr a = {.id = CF_A_DIM, .v.i = d[0]};
  if (same && d[0] != 0)
    st = cf_node_set_attr(g, idx, &a);
  else if (!same)
    st = cf_node_set_ints(g, idx, CF_A_DIMS, d, b->ports);
  free(d);
  return st;
}

static cf_status build_node(combiner *m, bucket *b, int *serial) {
  cf_graph *g = m->g;
  char name[96];
  do
    snprintf(name, sizeof name, "%s_bucket_%d", m->prefix, (*serial)++);
  while (cf_graph_find(g, name) >= 0);
  const cf_node *proto = &g->nodes[m->c[m->order[b->first]].node];
  int line = proto->line, region = proto->region, idx;
  cf_attr copy[CF_A_COUNT];
  int ncopy = 0;
  static const cf_attr_id keep[] = {CF_A_REDUCTION,       CF_A_GROUP,
                                    CF_A_RANK_SIZE,       CF_A_LAYOUT,
                                    CF_A_COMBINE_KEY,     CF_A_SPLIT_DIMENSION,
                                    CF_A_CONCAT_DIMENSION, CF_A_SPLIT_COUNT};
  for (size_t k = 0; k < sizeof keep / sizeof keep[0]; k++) {
    const cf_attr *a = cf_node_attr(proto, keep[k]);
    if (a) copy[ncopy++] = *a;
  }
  cf_ref *refs = malloc((size_t)b->ports * sizeof(cf_ref));
  if (!refs) return cf_error(g->ctx, CF_ERR_NO_MEMORY, g->file, 0, "out of memory");
  for (int u = 0, k = 0; u < b->n; u++) {
    const cf_node *n = &g->nodes[m->c[m->order[b->first + u]].node];
    for (int i = 0; i < n->n_in; i++)
      refs[k++] = n->in[i];
  }
  cf_status st = cf_graph_add_node(g, name, m->fused, line, &idx);
  if (!st) g->nodes[idx].region = region; /* members share it: a key field */
  if (!st) st = cf_node_set_inputs(g, idx, b->ports, refs);
  free(refs);
  for (int k = 0; !st && k < ncopy; k++)
    st = cf_node_set_attr(g, idx, &copy[k]);
  cf_attr a = {.id = CF_A_FUSION, .v.i = b->fusion};
  if (!st) st = cf_node_set_attr(g, idx, &a);
  if (!st && b->fusion == 2) {
    a = (cf_attr){.id = CF_A_FUSION_ID, .v.i = b->fid};
    st = cf_node_set_attr(g, idx, &a);
  }
  const char **names = st ? NULL : malloc((size_t)b->ports * sizeof *names);
  int64_t *offs = st ? NULL : malloc((size_t)b->ports * sizeof *offs);
  if (!st && (!names || !offs))
    st = cf_error(g->ctx, CF_ERR_NO_MEMORY, g->file, 0, "out of memory");
  if (!st) layout_of(m, b, names, offs);
  if (!st) st = cf_node_set_strs(g, idx, CF_A_MEMBERS, names, b->ports);
  if (!st) {
    /* the graph keeps the pointer: the text must live in its arena, not in
     * the combiner's scratch arena that is freed when the pass ends */
    char rule[96];
    const char *text =
        b->fusion == 2 ? cf_arena_strdup(&g->arena, reason_text(m, &b->rule, rule, sizeof rule))
                       : "split";
    a = (cf_attr){.id = CF_A_REASON, .v.s = text};
    st = text ? cf_node_set_attr(g, idx, &a)
                : cf_error(g->ctx, CF_ERR_NO_MEMORY, g->file, 0, "out of memory");
  }
  if (!st) st = cf_node_set_ints(g, idx, CF_A_OFFSETS, offs, b->ports);
  if (!st) st = set_dims(m, b, idx);
  free(names);
  free(offs);
  b->node = idx;
  b->name = g->nodes[idx].name;
  return st;
}

static cf_status rewrite(combiner *m) {
  cf_graph *g = m->g;
  int old_n = g->n_nodes, serial = 0, limit = g->node_limit;
  cf_status st = CF_OK;
  /* the members leave once the fused nodes exist: the graph only shrinks,
   * but briefly holds both */
  g->node_limit = old_n + m->nb > limit ? old_n + m->nb : limit;
  for (int k = 0; k < m->nb && !st; k++)
    st = build_node(m, &m->b[k], &serial);
  g->node_limit = limit;
  if (st) return st;
  /* users of member i now read port i of the fused node */
  for (int v = 0; v < g->n_nodes; v++) {
    cf_node *n = &g->nodes[v];
    for (int j = 0; j < n->n_in; j++) {
      int u = n->in[j].node;
      int ci = u < old_n ? m->by_node[u] : -1;
      if (ci < 0 || m->c[ci].bucket < 0) continue;
      n->in[j] = (cf_ref){m->b[m->c[ci].bucket].node, m->c[ci].port + n->in[j].port};
    }
  }
  /* the fused node takes the place of its last member */
  int *at_pos = malloc((size_t)old_n * sizeof(int) + 1);
  int *order = malloc((size_t)g->n_nodes * sizeof(int) + 1);
  if (!at_pos || !order) {
    free(at_pos), free(order);
    return cf_error(g->ctx, CF_ERR_NO_MEMORY, g->file, 0, "out of memory");
  }
  for (int v = 0; v < old_n; v++)
    at_pos[v] = -1;
  for (int k = 0; k < m->nb; k++)
    at_pos[m->b[k].last_pos] = m->b[k].node;
  int no = 0;
  for (int v = 0; v < old_n; v++) {
    int ci = m->by_node[v];
    if (ci >= 0 && m->c[ci].bucket >= 0) {
      if (at_pos[v] >= 0) order[no++] = at_pos[v];
      continue;
    }
    order[no++] = v;
  }
  st = cf_graph_permute(g, order, no);
  free(at_pos), free(order);
  if (!st) st = cf_verify_structure(g);
  if (!st) st = cf_infer(g);
  return st;
}

static void report(combiner *m) {
  if (!m->opt->explain) return;
  /* in gradient-ready order of the original collectives */
  int *v = malloc((size_t)m->nc * sizeof(int) + 1);
  if (!v) return;
  for (int i = 0; i < m->nc; i++)
    v[i] = i;
  if (!sort_cands(m, v, m->nc, cmp_ready)) {
    free(v);
    return;
  }
  for (int k = 0; k < m->nc; k++) {
    const cand *c = &m->c[v[k]];
    const char *nm = cname(m, v[k]), *op = cf_op_table[c->op].name;
    char why[256];
    if (c->bucket >= 0) {
      const bucket *b = &m->b[c->bucket];
      const char *split = "";
      if (b->fusion == 2 && b->split) split = ", fusion_id split by dependency";
      char unit[48] = "";
      if (c->op != m->kind)
        snprintf(unit, sizeof unit, " as ports %d-%d", c->port, c->port + c->nmem - 1);
      cf_pass_explain(m->opt, "%s '%s' -> '%s'%s (%s, %d member%s, %lld bytes%s)", op, nm, b->name,
                      unit, reason_text(m, &b->rule, why, sizeof why), b->ports, cf_s(b->ports),
                      (long long)b->bytes, split);
    } else {
      cf_pass_explain(m->opt, "%s '%s' stays alone: %s", op, nm,
                      reason_text(m, &c->why, why, sizeof why));
    }
  }
  free(v);
}

cf_status cf_combine(cf_graph *g, const cf_pass_options *opt, cf_op kind) {
  static const cf_pass_options none = {0};
  cf_status st = CF_OK;
  char why[256];
  cf_split sp;
  cf_cost cost;
  if (!opt) opt = &none;
  if (!cf_split_parse(opt->split, &sp, why, sizeof why))
    return cf_error(g->ctx, CF_ERR_USAGE, NULL, 0, "--split %s", why);
  if (!cf_cost_parse(opt->cost, &cost, why, sizeof why))
    return cf_error(g->ctx, CF_ERR_USAGE, NULL, 0, "--cost %s", why);
  if (!opt->cost && opt->measured_cost) cost = *opt->measured_cost;
  /* HCCL's size and index splits describe the gradient AllReduces; a
   * fusion=1 AllGather or ReduceScatter is bucketed by the cost model */
  if (kind != CF_OP_ALLREDUCE && (sp.kind == CF_SPLIT_SIZE || sp.kind == CF_SPLIT_INDEX))
    sp = (cf_split){.kind = CF_SPLIT_AUTO};
  if (!g->topo && (st = cf_verify_structure(g))) return st;
  /* data that is not reduced is moved as bytes: AllGather and AllToAll
   * buckets mix dtypes as XLA's AllGatherCombiner (combine_different_dtypes)
   * and Inductor's bucketing do, unless the split says same_dtype */
  combiner m = {.g = g,
                .opt = opt,
                .kind = kind,
                .mix_dtypes = (kind == CF_OP_ALLGATHER || kind == CF_OP_ALLTOALL) && !sp.same_dtype,
                .by_dim = !sp.any_dim};
  m.fused = cf_op_fused(kind);
  for (size_t i = 0; i + 1 < sizeof m.prefix && cf_op_table[kind].name[i]; i++)
    m.prefix[i] = (char)tolower((unsigned char)cf_op_table[kind].name[i]);
  size_t nn = g->n_nodes > 0 ? (size_t)g->n_nodes : 1;
  m.by_node = malloc(nn * sizeof(int));
  m.c = malloc(nn * sizeof(cand));
  m.order = malloc(nn * sizeof(int));
  m.b = malloc(nn * sizeof(bucket));
  int *v2 = malloc(nn * sizeof(int)), *v1 = malloc(nn * sizeof(int));
  int *tied = malloc(nn * sizeof(int)); /* the node a control edge ties v to, or -1 */
  if (!m.by_node || !m.c || !m.order || !m.b || !v2 || !v1 || !tied) {
    st = cf_error(g->ctx, CF_ERR_NO_MEMORY, g->file, 0, "out of memory");
    goto done;
  }
  /* XLA's combiners leave a collective with control predecessors or
   * successors alone (all_reduce_combiner_test's
   * DoNotCombineWithControlDependencies); depth would only keep the two
   * ends of an edge apart */
  for (int v = 0; v < g->n_nodes; v++)
    tied[v] = -1;
  for (int v = 0; v < g->n_nodes; v++)
    for (int j = 0; j < g->nodes[v].n_ctl; j++)
      tied[v] = g->nodes[v].ctl[j], tied[g->nodes[v].ctl[j]] = v;
  for (int v = 0; v < g->n_nodes; v++) {
    const cf_node *n = &g->nodes[v];
    m.by_node[v] = -1;
    /* a fused input node (an XLA tuple collective, an earlier compile's
     * bucket) is a candidate like the plain op and joins a bucket whole */
    if (n->op != kind && n->op != m.fused) continue;
    cand *c = &m.c[m.nc];
    *c = (cand){.name = n->name,
                .node = v,
                .dep = -1,
                .bucket = -1,
                .fusion = (int)cf_node_fusion(n),
                .fid = cf_node_int(n, CF_A_FUSION_ID, -1),
                .bytes = cf_node_comm_bytes(g, n),
                .nmem = n->op == kind ? 1 : n->n_in,
                .op = n->op};
    if (c->fusion == 0) c->why = (reason){.kind = R_FUSION0};
    else if (n->op == CF_OP_ALLTOALL && n->n_in > 1)
      c->fusion = 0, c->why = (reason){.kind = R_TUPLE};
    else if (tied[v] >= 0)
      c->fusion = 0, c->why = (reason){.kind = R_CONTROL, .other = g->nodes[tied[v]].name};
    else if (sp.no_loops && n->region && strstr(g->regions[n->region].op, "while"))
      c->fusion = 0, c->why = (reason){.kind = R_LOOP, .seg = n->region}; /* its own body's op */
    m.by_node[v] = m.nc++;
  }
  if (intern_keys(&m) < 0 || (st = compute_depth2(&m))) {
    if (!st) st = cf_error(g->ctx, CF_ERR_NO_MEMORY, g->file, 0, "out of memory");
    goto done;
  }
  int n2 = 0, n1 = 0;
  for (int i = 0; i < m.nc; i++) {
    if (m.c[i].fusion == 2) v2[n2++] = i;
    if (m.c[i].fusion == 1) v1[n1++] = i;
  }
  if ((st = group_fusion2(&m, v2, n2))) goto done;
  if (n1 && (st = compute_depth1(&m))) goto done;
  if ((st = group_fusion1(&m, v1, n1, n2, &sp, &cost))) goto done;
  if (m.nb) {
    int before = m.nc, buckets = m.nb;
    if ((st = rewrite(&m))) goto done;
    report(&m);
    int fused = 0;
    for (int k = 0; k < buckets; k++)
      fused += m.b[k].n;
    cf_log(g->ctx, CF_LOG_INFO, "fuse-%s: %d %s%s into %d bucket%s, %d left alone", m.prefix, fused,
           kind_name(&m), cf_s(fused), buckets, cf_s(buckets), before - fused);
  } else {
    report(&m);
  }
done:
  free(m.by_node), free(m.c), free(m.order), free(m.b), free(v1), free(v2), free(tied);
  cf_arena_free(&m.scratch);
  return st;
}
