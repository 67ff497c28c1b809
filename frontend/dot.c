/* dot.c - draw a graph as DOT (cgraph) or as SVG/PNG (gvc, "dot" layout).
 *
 * The picture answers "what did fusion do?": every node shows its op and the
 * dtype/shape of each output; collectives are filled in one colour family per
 * kind; a fused collective is a cluster with one box per member (port i is
 * member i, so edges enter and leave the member they belong to) whose label
 * gives the bytes the bucket moves and why it exists; a fused matmul is a
 * cluster of its matmul and collective parts. The body of a while or a branch
 * of a conditional (cf_region) is a dashed cluster of its nodes, labelled
 * with the op and the part, inside the cluster of the body around it.
 *
 * "dot" writes the graph before layout, so the file is byte-for-byte
 * reproducible (golden tests). cgraph's default id discipline makes interned
 * string addresses the ids of named objects and agwrite orders clusters by id,
 * i.e. by heap layout; our own discipline numbers names in creation order.
 * DOT goes through cf_out_open's FILE (a temporary beside PATH, renamed over
 * it), so a failure never leaves a partial file. SVG and PNG are rendered
 * into memory (gvRenderData) and then written the same way (cf_write_file):
 * graphviz 2.42 calls exit(1) when a write to its output file comes up
 * short (a full disk, a file size limit), which would end the host process
 * with a temporary left behind; in memory its only failure is an allocation.
 * graphviz keeps process-wide state, see gv_lock below.
 */
#include "frontend.h"

#include <ctype.h>
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <graphviz/cgraph.h>
#include <graphviz/gvc.h>

/* ---- id discipline: named objects get even ids in creation order ---- */

typedef struct dot_ids {
  Agdisc_t disc; /* first member: ids_open gets this pointer back */
  Agiddisc_t id;
  Agraph_t *root; /* its string pool holds the names: agwrite expects agstrdup strings */
  char **names;   /* id / 2 - 1 -> name */
  int n_names, cap_names;
  int *hash;        /* open addressing over names: index + 1, 0 = empty */
  int cap_hash;     /* power of two, more than twice n_names */
  IDTYPE next_anon; /* odd ids for unnamed objects (edges) */
} dot_ids;

static int *ids_probe(dot_ids *t, const char *s) {
  return cf_name_slot(t->hash, (size_t)t->cap_hash, t->names, 0, sizeof *t->names, s);
}

static bool ids_grow(dot_ids *t) {
  if (t->n_names == t->cap_names) {
    int cap = t->cap_names ? 2 * t->cap_names : 64;
    char **nn = realloc(t->names, (size_t)cap * sizeof *nn);
    if (!nn) return false;
    t->names = nn;
    t->cap_names = cap;
  }
  if (2 * (t->n_names + 1) < t->cap_hash) return true;
  int cap = t->cap_hash ? 2 * t->cap_hash : 256, *old = t->hash;
  if (!(t->hash = calloc((size_t)cap, sizeof *t->hash))) {
    t->hash = old;
    return false;
  }
  t->cap_hash = cap;
  for (int i = 0; i < t->n_names; i++)
    *ids_probe(t, t->names[i]) = i + 1;
  free(old);
  return true;
}

static void *ids_open(Agraph_t *g, Agdisc_t *disc) {
  dot_ids *t = (dot_ids *)disc; /* disc is the first member of a dot_ids */
  t->root = g;
  return t;
}

static long ids_map(void *state, int objtype, char *str, IDTYPE *id, int create) {
  dot_ids *t = state;
  (void)objtype; /* one name space for all kinds, like cgraph's default */
  if (!str) {
    *id = t->next_anon;
    t->next_anon += 2;
    return 1;
  }
  int *slot = t->cap_hash ? ids_probe(t, str) : NULL;
  if (!(slot && *slot)) {
    char *copy = create && ids_grow(t) ? agstrdup(t->root, str) : NULL;
    if (!copy) return 0;
    t->names[t->n_names++] = copy;
    *(slot = ids_probe(t, copy)) = t->n_names;
  }
  *id = 2 * (IDTYPE)*slot;
  return 1;
}

static char *ids_print(void *state, int objtype, IDTYPE id) {
  dot_ids *t = state;
  (void)objtype;
  return id % 2 == 0 && id > 0 && id / 2 <= (IDTYPE)t->n_names ? t->names[id / 2 - 1] : NULL;
}

/* Nobody may pick ids (as with cgraph's default); names die with the graph. */
static long ids_alloc(void *st, int k, IDTYPE id) { return (void)st, (void)k, (void)id, 0; }
static void ids_free(void *st, int k, IDTYPE id) { (void)st, (void)k, (void)id; }
static void ids_close(void *st) { (void)st; }
static void ids_register(void *st, int k, void *obj) { (void)st, (void)k, (void)obj; }

static void ids_init(dot_ids *t) {
  *t = (dot_ids){.next_anon = 1};
  t->id = (Agiddisc_t){ids_open, ids_map, ids_alloc, ids_free, ids_print, ids_close, ids_register};
  t->disc = (Agdisc_t){&AgMemDisc, &t->id, &AgIoDisc};
}

/* ---- growing string buffer: labels can list many ports ---- */

typedef struct sbuf {
  char *s;
  size_t len, cap;
  bool oom;
} sbuf;

static bool sb_reserve(sbuf *b, size_t n) {
  if (b->oom) return false;
  if (b->len + n + 1 <= b->cap) return true;
  size_t cap = (b->len + n + 1) * 2;
  char *s = realloc(b->s, cap);
  if (!s) return !(b->oom = true);
  b->s = s;
  b->cap = cap;
  return true;
}

static void sb_printf(sbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void sb_printf(sbuf *b, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(NULL, 0, fmt, ap);
  va_end(ap);
  if (n < 0) b->oom = true;
  if (n < 0 || !sb_reserve(b, (size_t)n)) return;
  va_start(ap, fmt);
  vsnprintf(b->s + b->len, b->cap - b->len, fmt, ap);
  va_end(ap);
  b->len += (size_t)n;
}

static void sb_reset(sbuf *b) {
  b->len = 0;
  sb_printf(b, "%s", "");
}

/* Label text: graphviz reads backslash escapes (\N, \n, \l) in labels, so a
 * backslash in a name is doubled to show up as itself. */
static void sb_textn(sbuf *b, const char *s, size_t n) {
  if (!sb_reserve(b, 2 * n)) return;
  for (size_t i = 0; i < n; i++) {
    if (s[i] == '\\') b->s[b->len++] = '\\';
    b->s[b->len++] = s[i];
  }
  b->s[b->len] = 0;
}

static void sb_text(sbuf *b, const char *s) { sb_textn(b, s, strlen(s)); }

/* A node id: cgraph takes ids starting with '%' for anonymous ones and, once
 * the graph has a subgraph, leaks their entries (2.42), so those get a '_'. */
static void sb_id(sbuf *b, const char *name, size_t n) {
  sb_reset(b);
  sb_printf(b, "%s%.*s", name[0] == '%' ? "_" : "", (int)n, name);
}

static void sb_value(sbuf *b, const cf_value *v) {
  char shape[CF_MAX_RANK * 21 + 1];
  sb_printf(b, "%s [%s]", cf_dtype_name(v->dtype), cf_shape_format(&v->shape, shape, sizeof shape));
}

/* ---- drawing ---- */

/* ops.def's looks: a plain node's shape and style; a collective's colours
 * (its box, and the cluster and border of a fused one), shared by the ops
 * of one plain collective. */
static const struct {
  char *shape, *style, *node, *cluster, *border;
} looks[CF_LOOK_COUNT] = {
    [CF_LOOK_ELLIPSE] = {"ellipse", "", NULL, NULL, NULL},
    [CF_LOOK_DASHED_ELLIPSE] = {"ellipse", "dashed", NULL, NULL, NULL},
    [CF_LOOK_OCTAGON] = {"doubleoctagon", "", NULL, NULL, NULL},
    [CF_LOOK_ROUNDED_BOX] = {"box", "rounded", NULL, NULL, NULL},
    [CF_LOOK_BLUE] = {"box", "filled", "#9ec5fe", "#e7f1ff", "#0d6efd"},
    [CF_LOOK_GREEN] = {"box", "filled", "#a3cfbb", "#e8f5ee", "#198754"},
    [CF_LOOK_ORANGE] = {"box", "filled", "#fecba1", "#fff3e8", "#fd7e14"},
    [CF_LOOK_PURPLE] = {"box", "filled", "#c5b3e6", "#f1ecf9", "#6f42c1"},
    [CF_LOOK_YELLOW] = {"box", "filled", "#ffe69c", "#fff8e1", "#b8860b"},
    [CF_LOOK_RED] = {"box", "filled", "#f1aeb5", "#fcebec", "#dc3545"},
    [CF_LOOK_TEAL] = {"box", "filled", "#a2e3e3", "#e6f7f7", "#20a0a0"},
    [CF_LOOK_PINK] = {"box", "filled", "#f7b5d9", "#fdebf4", "#d63384"},
};

#define LOOK(n) (&looks[cf_op_table[(n)->op].look])

/* Where a node's edges attach. Plain nodes: head == tail. Fused collectives:
 * member[j] for operand and port j. Fused matmul: operands enter head, results
 * leave tail; AllGatherMatmul gathers x1 first, so head == tail is its gather
 * part (it also yields the gathered x1, the last port) and alt its matmul
 * part, where the x2 operands enter and the products leave. */
typedef struct drawn {
  Agnode_t *head, *tail, *alt;
  Agnode_t **member;
} drawn;

typedef struct dot_state {
  const cf_graph *g;
  const cf_diags *diags; /* a graph that failed verification: what to mark, else NULL */
  Agraph_t *G;
  drawn *d;
  sbuf b, id;  /* label and id being built */
  bool failed; /* a cgraph call or an allocation failed */
  Agraph_t **regions;    /* per region of g, its cluster once made (regions[0]: G) */
  const double *wait_ms; /* per node, the measured wait on it (< 0: none), or NULL */
  double most;           /* the largest of them */
  char heat[16];         /* the fill colour heat_of made */
} dot_state;

/* "waited 1.234 ms" (under 1 ms: "waited 12.3 us") as the label's next line. */
static void wait_line(dot_state *s, double ms) {
  if (ms >= 1)
    sb_printf(&s->b, "\\nwaited %.3f ms", ms);
  else
    sb_printf(&s->b, "\\nwaited %.1f us", ms * 1e3);
}

/* The fill of collective node i by its measured wait: white for none, deep
 * red for the largest; NULL when there is no measure of it. The wait goes
 * under its label. */
static char *heat_of(dot_state *s, int i) {
  if (!s->wait_ms || s->wait_ms[i] < 0) return NULL;
  double f = s->most > 0 ? s->wait_ms[i] / s->most : 0;
  int gb = (int)(255 - 200 * f);
  snprintf(s->heat, sizeof s->heat, "#ff%02x%02x", gb, gb);
  return s->heat;
}

static void set(dot_state *s, void *obj, char *attr, char *value) {
  if (s->failed || !obj || !value || agsafeset(obj, attr, value, "") != 0) s->failed = true;
}

static void style_node(dot_state *s, Agnode_t *an, char *shape, char *style, char *fill) {
  set(s, an, "shape", shape);
  set(s, an, "style", style);
  if (fill) set(s, an, "fillcolor", fill);
}

/* Make s->id unique. Generated ids ("<fused>/<member>") must miss every graph
 * node's name (plain nodes use theirs verbatim) and each other; two fused nodes
 * may sanitize to the same cluster name. */
static void unique_id(dot_state *s, bool cluster) {
  size_t base = s->id.len;
  for (int k = 1; !s->id.oom; k++) {
    bool taken = cluster ? agsubg(s->G, s->id.s, 0) != NULL
                         : cf_graph_find(s->g, s->id.s) >= 0 || agnode(s->G, s->id.s, 0) != NULL;
    if (!taken) return;
    s->id.len = base;
    sb_printf(&s->id, "~%d", k);
  }
  s->failed = true;
}

/* " mean root=0 group=tp": what tells collectives apart; sep goes first. */
static void op_extras(sbuf *b, const cf_node *n, const char *sep) {
  uint32_t allowed = cf_op_table[n->op].allowed;
  size_t start = b->len;
#define SEP (b->len == start ? sep : " ")
  if (allowed & (1u << CF_A_REDUCTION))
    sb_printf(b, "%s%s", SEP, cf_reduction_name(cf_node_reduction(n)));
  if (allowed & (1u << CF_A_LAYOUT)) sb_printf(b, "%s%s", SEP, cf_layout_name(cf_node_layout(n)));
  if (allowed & (1u << CF_A_ROOT))
    sb_printf(b, "%sroot=%lld", SEP, (long long)cf_node_int(n, CF_A_ROOT, 0));
  if ((allowed & (1u << CF_A_SPLIT_DIMENSION)) && !(n->op == CF_OP_ALLTOALL && n->n_in > 1))
    sb_printf(b, "%ssplit=%lld concat=%lld", SEP,
              (long long)cf_node_int(n, CF_A_SPLIT_DIMENSION, 0),
              (long long)cf_node_int(n, CF_A_CONCAT_DIMENSION, 0));
  if (cf_node_str(n, CF_A_SOURCE_TARGET_PAIRS, NULL)) {
    sb_printf(b, "%spairs=", SEP);
    sb_text(b, cf_node_str(n, CF_A_SOURCE_TARGET_PAIRS, ""));
  }
  if (cf_node_str(n, CF_A_TYPE, NULL)) {
    sb_printf(b, "%s(", SEP);
    sb_text(b, cf_node_str(n, CF_A_TYPE, ""));
    sb_printf(b, ")");
  }
  if (cf_op_is_collective(n->op) && strcmp(cf_node_group(n), CF_WORLD_GROUP)) {
    sb_printf(b, "%sgroup=", SEP);
    sb_text(b, cf_node_group(n));
  }
#undef SEP
}

/* One line per port in [from, to): "dtype [shape]", "pK: " first when the
 * node has several outputs. */
static void type_lines(sbuf *b, const cf_node *n, int from, int to) {
  for (int p = from; p < to && n->out; p++) {
    sb_printf(b, "\\n");
    if (n->n_out > 1) sb_printf(b, "p%d: ", p);
    sb_value(b, &n->out[p]);
  }
}

static const cf_value *operand(const cf_graph *g, const cf_node *n, int j) {
  return &g->nodes[n->in[j].node].out[n->in[j].port];
}

/* Outputs allocated as the op has them: inferred, or at least drawable (a
 * graph that failed verification has nodes that never got that far). */
static bool typed(const cf_node *n) {
  return n->n_out == cf_node_n_outputs(n) && (n->out || !n->n_out);
}

/* The message of an error without its "FILE:LINE: error: node 'NAME': "
 * prefix, for a label next to the node it is about. */
static const char *short_msg(const char *msg) {
  const char *e = strstr(msg, "error: ");
  e = e ? e + 7 : msg;
  if (strncmp(e, "node '", 6) == 0) {
    const char *q = strstr(e + 6, "': ");
    if (q) e = q + 3;
  }
  return e;
}

static bool has_error(const dot_state *s, int i) {
  for (int k = 0; s->diags && k < s->diags->n; k++)
    if (s->diags->v[k].node == i) return true;
  return false;
}

/* A node an error is about: a label line per message, a red border, and
 * the whole messages as its tooltip (SVG). */
static void error_lines(dot_state *s, int i) {
  for (int k = 0; s->diags && k < s->diags->n; k++)
    if (s->diags->v[k].node == i) {
      sb_printf(&s->b, "\\nerror: ");
      sb_text(&s->b, short_msg(s->diags->v[k].msg));
    }
}

static void mark_node(dot_state *s, int i, Agnode_t *an) {
  sb_reset(&s->id);
  for (int k = 0; s->diags && k < s->diags->n; k++)
    if (s->diags->v[k].node == i) {
      sb_printf(&s->id, "%s", s->id.len ? "\\n" : "");
      sb_text(&s->id, s->diags->v[k].msg);
    }
  if (!s->id.len) return;
  set(s, an, "tooltip", s->id.s);
  set(s, an, "color", "red");
  set(s, an, "fontcolor", "red");
  set(s, an, "penwidth", "2");
}

/* Is src -> dst an edge of a cycle an error reports? */
static bool on_cycle(const dot_state *s, int src, int dst) {
  for (int k = 0; s->diags && k < s->diags->n; k++) {
    const cf_diag *x = &s->diags->v[k];
    for (int c = 0; c < x->n_cycle; c++)
      if (x->cycle[c] == src && x->cycle[(c + 1) % x->n_cycle] == dst) return true;
  }
  return false;
}

/* The graph a node of region k is drawn in: G, or the cluster of its body
 * (made on first use, inside its parent's). */
static Agraph_t *region_graph(dot_state *s, int k) {
  if (k <= 0 || k >= s->g->n_regions || !s->regions) return s->G;
  if (s->regions[k]) return s->regions[k];
  Agraph_t *up = region_graph(s, s->g->regions[k].parent);
  char id[48], text[CF_MAX_NAME + 128];
  snprintf(id, sizeof id, "cluster_region_%d", k);
  Agraph_t *sub = s->failed || !up ? NULL : agsubg(up, id, 1);
  if (!sub) {
    s->failed = true;
    return s->G;
  }
  sb_reset(&s->b);
  sb_text(&s->b, cf_region_text(s->g, k, text, sizeof text));
  set(s, sub, "label", s->b.s);
  set(s, sub, "style", "dashed,rounded");
  return s->regions[k] = sub;
}

static void draw_plain(dot_state *s, int i) {
  const cf_node *n = &s->g->nodes[i];
  Agraph_t *in = region_graph(s, n->region);
  sb_id(&s->id, n->name, strlen(n->name));
  if (n->name[0] == '%') unique_id(s, false);
  Agnode_t *an = s->failed || s->id.oom ? NULL : agnode(in, s->id.s, 1);
  s->d[i].head = s->d[i].tail = an;
  sb_reset(&s->b);
  sb_text(&s->b, n->name);
  sb_printf(&s->b, "\\n%s", cf_op_table[n->op].name);
  op_extras(&s->b, n, " ");
  bool error = has_error(s, i); /* its types, if any, are what failed */
  const cf_node *src = n->n_in == 1 ? &s->g->nodes[n->in[0].node] : NULL;
  if (n->op == CF_OP_OUTPUT && src) {
    if (!error && typed(src) && n->in[0].port >= 0 && n->in[0].port < src->n_out) {
      sb_printf(&s->b, "\\n");
      sb_value(&s->b, operand(s->g, n, 0));
    }
  } else if (!error) {
    type_lines(&s->b, n, 0, n->n_out);
  }
  error_lines(s, i);
  char *heat = heat_of(s, i);
  if (heat) wait_line(s, s->wait_ms[i]);
  set(s, an, "label", s->b.s);
  style_node(s, an, LOOK(n)->shape, heat ? "filled" : LOOK(n)->style, heat ? heat : LOOK(n)->node);
  mark_node(s, i, an);
}

/* The cluster of a fused node: "Op name: [N members, ]BYTES[, world_size=W]
 * [(reason)]", then the shared reduction/layout/group of a fused collective or
 * the original nodes of a fused matmul. */
static Agraph_t *open_cluster(dot_state *s, const cf_node *n, int members) {
  Agraph_t *sub = NULL, *in = region_graph(s, n->region);
  sb_reset(&s->id);
  sb_printf(&s->id, "cluster_");
  for (const char *p = n->name; *p; p++) /* a plain DOT id: no quoting surprises */
    sb_printf(&s->id, "%c", isalnum((unsigned char)*p) ? *p : '_');
  unique_id(s, true);
  if (s->failed || !(sub = agsubg(in, s->id.s, 1))) return s->failed = true, NULL;
  char bytes[32];
  cf_bytes_text(cf_node_comm_bytes(s->g, n), bytes, sizeof bytes);
  sb_reset(&s->b);
  sb_printf(&s->b, "%s ", cf_op_table[n->op].name);
  sb_text(&s->b, n->name);
  sb_printf(&s->b, ": ");
  if (members > 0) sb_printf(&s->b, "%d member%s, ", members, members == 1 ? "" : "s");
  sb_printf(&s->b, "%s", bytes);
  if (cf_node_attr(n, CF_A_WORLD_SIZE))
    sb_printf(&s->b, ", world_size=%lld", (long long)cf_node_int(n, CF_A_WORLD_SIZE, 0));
  const char *reason = cf_node_str(n, CF_A_REASON, NULL);
  cf_strs from = cf_node_strs(n, CF_A_MEMBERS);
  if (reason) {
    sb_printf(&s->b, " (");
    sb_text(&s->b, reason);
    sb_printf(&s->b, ")");
  } else if (cf_node_int(n, CF_A_FUSION_ID, -1) >= 0) {
    sb_printf(&s->b, " (fusion_id=%lld)", (long long)cf_node_int(n, CF_A_FUSION_ID, -1));
  }
  if (members > 0) {
    op_extras(&s->b, n, "\\n");
  } else if (from.n >= 0) {
    sb_printf(&s->b, "\\nfrom ");
    for (int k = 0; k < from.n; k++) {
      if (k) sb_printf(&s->b, ", ");
      sb_text(&s->b, from.v[k]);
    }
  }
  char *heat = heat_of(s, (int)(n - s->g->nodes));
  if (heat) wait_line(s, s->wait_ms[n - s->g->nodes]);
  set(s, sub, "label", s->b.s);
  set(s, sub, "style", "rounded,filled");
  set(s, sub, "fillcolor", heat ? heat : LOOK(n)->cluster);
  set(s, sub, "color", LOOK(n)->border);
  return sub;
}

/* A box in cluster sub, id "<node>/<part>", labelled with s->b. */
static Agnode_t *part_node(dot_state *s, Agraph_t *sub, const cf_node *n, const char *part,
                           size_t part_len) {
  sb_id(&s->id, n->name, strlen(n->name));
  sb_printf(&s->id, "/%.*s", (int)part_len, part);
  unique_id(s, false);
  Agnode_t *an = s->failed ? NULL : agnode(sub, s->id.s, 1);
  set(s, an, "label", s->b.s);
  style_node(s, an, "box", "filled", LOOK(n)->node);
  return an;
}

static void draw_fused_collective(dot_state *s, int i) {
  const cf_node *n = &s->g->nodes[i];
  Agraph_t *sub = open_cluster(s, n, n->n_in);
  if (!sub || !(s->d[i].member = calloc((size_t)n->n_in, sizeof(Agnode_t *)))) {
    s->failed = true;
    return;
  }
  cf_strs m = cf_node_strs(n, CF_A_MEMBERS); /* port j is member j */
  for (int j = 0; j < n->n_in && !s->failed; j++) {
    const char *name = j < m.n ? m.v[j] : "";
    size_t len = strlen(name);
    char port[32];
    if (len == 0) { /* an empty name or a short list: name the port */
      len = (size_t)snprintf(port, sizeof port, "port%d", j);
      name = port;
    }
    sb_reset(&s->b);
    sb_textn(&s->b, name, len);
    sb_printf(&s->b, "\\n");
    sb_value(&s->b, &n->out[j]);
    s->d[i].member[j] = part_node(s, sub, n, name, len);
  }
}

static void draw_fused_matmul(dot_state *s, int i) {
  const cf_node *n = &s->g->nodes[i];
  Agraph_t *sub = open_cluster(s, n, 0);
  if (!sub) return;
  bool agmm = cf_op_coll(n->op) == CF_OP_ALLGATHER; /* gathers first, then multiplies */
  char a[CF_MAX_RANK * 21 + 1], c[CF_MAX_RANK * 21 + 1];
  sb_reset(&s->b); /* the matmul part */
  sb_printf(&s->b, "MatMul");
  if (agmm)
    type_lines(&s->b, n, 0, n->n_out - 1);
  else
    sb_printf(&s->b, "\\n[%s] @ [%s]", cf_shape_format(&operand(s->g, n, 0)->shape, a, sizeof a),
              cf_shape_format(&operand(s->g, n, 1)->shape, c, sizeof c));
  Agnode_t *mm = part_node(s, sub, n, "matmul", 6);
  set(s, mm, "fillcolor", "white");
  const char *coll = cf_op_table[cf_op_coll(n->op)].name;
  sb_reset(&s->b); /* the collective part */
  sb_printf(&s->b, "%s", coll);
  op_extras(&s->b, n, " ");
  type_lines(&s->b, n, agmm ? n->n_out - 1 : 0, n->n_out);
  Agnode_t *cn = part_node(s, sub, n, coll, strlen(coll));
  Agedge_t *e = s->failed ? NULL
                : agmm    ? agedge(sub, cn, mm, NULL, 1)
                          : agedge(sub, mm, cn, NULL, 1);
  set(s, e, "style", "bold");
  s->d[i] = agmm ? (drawn){.head = cn, .tail = cn, .alt = mm} : (drawn){.head = mm, .tail = cn};
}

static Agnode_t *head_of(const cf_node *n, const drawn *d, int j) {
  if (d->member) return d->member[j];
  return d->alt && j > 0 ? d->alt : d->head;
}

static Agnode_t *tail_of(const cf_node *n, const drawn *d, int p) {
  if (d->member) return p >= 0 && p < n->n_in ? d->member[p] : NULL;
  return d->alt && p < n->n_out - 1 ? d->alt : d->tail;
}

/* Edges in operand order, labelled "pK" when the source has several outputs
 * and "inJ" when the user has more than two operands (where order matters). */
static void draw_edges(dot_state *s, int i) {
  const cf_node *n = &s->g->nodes[i];
  for (int j = 0; j < n->n_in && !s->failed; j++) {
    const cf_node *src = &s->g->nodes[n->in[j].node];
    Agnode_t *t = tail_of(src, &s->d[n->in[j].node], n->in[j].port), *h = head_of(n, &s->d[i], j);
    if (!t && s->diags) t = s->d[n->in[j].node].tail; /* a port the source lacks */
    Agedge_t *e = t && h ? agedge(s->G, t, h, NULL, 1) : NULL;
    sb_reset(&s->b);
    if (src->n_out > 1) sb_printf(&s->b, "p%d", n->in[j].port);
    if (n->n_in > 2) sb_printf(&s->b, "%sin%d", s->b.len ? " " : "", j);
    if (!e)
      s->failed = true;
    else if (s->b.len)
      set(s, e, "label", s->b.s);
    if (e && on_cycle(s, n->in[j].node, i)) {
      set(s, e, "color", "red");
      set(s, e, "penwidth", "2");
    }
  }
  /* control dependencies: dashed, labelled "after" */
  for (int j = 0; j < n->n_ctl && !s->failed; j++) {
    const drawn *d = &s->d[n->ctl[j]];
    Agnode_t *t = d->member ? d->member[0] : d->tail, *h = s->d[i].member ? s->d[i].member[0] : s->d[i].head;
    if (!t || !h) continue; /* an end not drawn (a broken graph's) */
    Agedge_t *e = agedge(s->G, t, h, NULL, 1);
    if (!e) {
      s->failed = true;
      break;
    }
    set(s, e, "style", "dashed");
    set(s, e, "label", "after");
    if (on_cycle(s, n->ctl[j], i)) {
      set(s, e, "color", "red");
      set(s, e, "penwidth", "2");
    }
  }
}

static cf_status build(dot_state *s) {
  const cf_graph *g = s->g;
  /* defaults first, in a fixed order (agwrite prints them); the rest is
   * declared with an empty default by the first agsafeset, in build order */
  static const struct {
    int kind;
    char *name, *def;
  } attrs[] = {{AGRAPH, "rankdir", "TB"},         {AGRAPH, "labelloc", "t"},
               {AGRAPH, "fontname", "Helvetica"}, {AGRAPH, "fontsize", "11"},
               {AGNODE, "fontname", "Helvetica"}, {AGNODE, "fontsize", "10"},
               {AGNODE, "shape", "box"},          {AGEDGE, "fontname", "Helvetica"},
               {AGEDGE, "fontsize", "9"}};
  for (size_t k = 0; k < sizeof attrs / sizeof attrs[0]; k++)
    if (!agattr(s->G, attrs[k].kind, attrs[k].name, attrs[k].def)) s->failed = true;
  sb_reset(&s->b);
  sb_text(&s->b, g->name ? g->name : "graph");
  if (g->world_size > 0) sb_printf(&s->b, " (world_size=%lld)", (long long)g->world_size);
  for (int k = 0; s->diags && k < s->diags->n; k++) /* errors about no node: under the title */
    if (s->diags->v[k].node < 0) {
      sb_printf(&s->b, "\\nerror: ");
      sb_text(&s->b, short_msg(s->diags->v[k].msg));
    }
  set(s, s->G, "label", s->b.s);

  for (int i = 0; i < g->n_nodes; i++) { /* writers never infer: the caller must have */
    const cf_node *n = &g->nodes[i];
    bool ok = typed(n);
    for (int j = 0; ok && j < n->n_in; j++)
      ok = n->in[j].node >= 0 && n->in[j].node < g->n_nodes &&
           n->in[j].port < cf_node_n_outputs(&g->nodes[n->in[j].node]);
    if (!ok && !n->dead && !s->diags)
      return cf_node_error(g, n, CF_ERR_USAGE, "cannot draw: graph not verified and inferred");
    for (int j = 0; !ok && j < n->n_in; j++) /* a broken graph: every edge must still land */
      if (n->in[j].node < 0 || n->in[j].node >= g->n_nodes)
        return cf_node_error(g, n, CF_ERR_INVALID, "cannot draw: operand %d refers to no node", j);
  }
  for (int i = 0; i < g->n_nodes && !s->failed; i++) {
    const cf_node *n = &g->nodes[i];
    if (n->dead) continue;
    if (has_error(s, i) || !typed(n)) { /* drawn plain, with its messages */
      draw_plain(s, i);
      continue;
    }
    switch (cf_op_table[n->op].cat) {
    case CF_CAT_FUSED_COLLECTIVE: draw_fused_collective(s, i); break;
    case CF_CAT_FUSED_MATMUL: draw_fused_matmul(s, i); break;
    default: draw_plain(s, i); break;
    }
  }
  for (int i = 0; i < g->n_nodes && !s->failed; i++)
    if (!g->nodes[i].dead) draw_edges(s, i);
  if (s->failed) return cf_error(g->ctx, CF_ERR_NO_MEMORY, NULL, 0, "out of memory while drawing");
  return CF_OK;
}

/* graphviz 2.42's pango text-layout plugin caches, in a static, a pointer to a
 * font name owned by the GVC context that last measured text (later graphviz
 * copies it): freeing that context and laying out with another reads freed
 * memory. So one context is made on first use and kept for the life of the
 * process. graphviz is not thread-safe either (error level and message file,
 * plugin statics), so every use of it goes through gv_lock. This is collfuse's
 * only process-wide state, and the library forces it on us. */
static pthread_mutex_t gv_lock = PTHREAD_MUTEX_INITIALIZER;
static GVC_t *gv_context; /* guarded by gv_lock; never freed */

/* ": <graphviz's last message>" when it raised an error during this call.
 * graphviz's messages stay in its own buffer (agseterr(AGMAX)), never on
 * stderr; no error function is installed (agseterrf): 2.42 formats a
 * message over 1 KiB for it by reusing a va_list, which crashes. */
static void gv_reason(char *buf, size_t len) {
  char *m = agerrors() >= AGERR ? aglasterr() : NULL;
  size_t n = m ? strlen(m) : 0;
  while (n && (m[n - 1] == '\n' || m[n - 1] == ' '))
    m[--n] = 0;
  snprintf(buf, len, "%s%s", n ? ": " : "", n ? m : "");
  free(m);
}

/* Lay G out and render it as fmt into *data (gvFreeRenderData frees it). */
static cf_status render(const cf_graph *g, Agraph_t *G, const char *path, const char *fmt,
                        char **data, unsigned *size) {
  char why[512];
  *data = NULL;
  *size = 0;
  if (!gv_context && !(gv_context = gvContext()))
    return cf_error(g->ctx, CF_ERR_NO_MEMORY, path, 0, "cannot create a graphviz context");
  if (gvLayout(gv_context, G, "dot") != 0) {
    gv_reason(why, sizeof why);
    return cf_error(g->ctx, CF_ERR_IO, path, 0, "graphviz could not lay out the graph%s", why);
  }
  cf_status st = CF_OK;
  if (gvRenderData(gv_context, G, fmt, data, size) != 0 || !*data) {
    gv_reason(why, sizeof why);
    st = cf_error(g->ctx, CF_ERR_IO, path, 0, "graphviz could not render %s%s", fmt, why);
    if (*data) gvFreeRenderData(*data);
    *data = NULL;
  }
  gvFreeLayout(gv_context, G);
  return st;
}

cf_status cf_dot_write(const cf_graph *g, const char *path, const char *format) {
  return cf_dot_write_diags(g, path, format, NULL);
}

cf_status cf_dot_write_diags(const cf_graph *g, const char *path, const char *format,
                             const cf_diags *diags) {
  return cf_dot_write_waits(g, path, format, diags, NULL);
}

cf_status cf_dot_write_waits(const cf_graph *g, const char *path, const char *format,
                             const cf_diags *diags, const double *wait_ms) {
  if (!g) return CF_ERR_USAGE;
  if (!path || !format)
    return cf_error(g->ctx, CF_ERR_USAGE, NULL, 0, "cf_dot_write: path and format are required");
  bool dot = strcmp(format, "dot") == 0;
  if (!dot && strcmp(format, "svg") && strcmp(format, "png"))
    return cf_error(g->ctx, CF_ERR_USAGE, path, 0, "unknown drawing format '%s' (dot, svg, png)",
                    format);
  cf_status st = CF_OK;
  dot_ids ids;
  dot_state s = {.g = g, .diags = diags && diags->n ? diags : NULL, .wait_ms = wait_ms};
  for (int i = 0; wait_ms && i < g->n_nodes; i++)
    if (wait_ms[i] > s.most) s.most = wait_ms[i];
  cf_outfile out = {0};
  char *drawing = NULL; /* SVG or PNG, rendered */
  unsigned size = 0;
  ids_init(&ids);
  pthread_mutex_lock(&gv_lock);
  agerrlevel_t old_level = agseterr(AGMAX); /* graphviz stays off stderr: we report */
  agreseterrors();

  sb_id(&s.b, g->name ? g->name : "graph", strlen(g->name ? g->name : "graph"));
  if (s.b.oom || !(s.G = agopen(s.b.s, Agdirected, &ids.disc)) ||
      !(s.d = calloc((size_t)g->n_nodes + 1, sizeof *s.d)) ||
      (g->n_regions > 1 && !(s.regions = calloc((size_t)g->n_regions, sizeof *s.regions)))) {
    st = cf_error(g->ctx, CF_ERR_NO_MEMORY, path, 0, "out of memory: cannot create the drawing");
    goto fail;
  }
  if ((st = build(&s))) goto fail;
  if (!dot) { /* written below, once graphviz is done */
    st = render(g, s.G, path, format, &drawing, &size);
  } else if (!(st = cf_out_open(g->ctx, path, false, &out))) {
    if (agwrite(s.G, out.f) != 0)
      st = cf_error(g->ctx, CF_ERR_IO, path, 0, "cannot write: %s", strerror(errno));
    else
      st = cf_out_close(g->ctx, &out, true);
  }

fail:
  cf_out_close(g->ctx, &out, false); /* no-op once closed; removes the temporary */
  if (s.G) agclose(s.G);
  agseterr(old_level);
  pthread_mutex_unlock(&gv_lock);
  if (drawing) {
    if (!st) st = cf_write_file(g->ctx, path, drawing, size);
    gvFreeRenderData(drawing);
  }
  for (int i = 0; s.d && i < g->n_nodes; i++)
    free(s.d[i].member);
  free(s.d);
  free(s.regions);
  free(s.b.s);
  free(s.id.s);
  free(ids.names);
  free(ids.hash);
  return st;
}
