/* build.c - the public API for building and inspecting graphs in memory.
 *
 * A built graph is the graph the XML reader would make from the same nodes:
 * ops and aliases come from ops.def through cf_op_lookup, attribute text goes
 * through cf_node_parse_attr (same rules, same messages), and the op rules are
 * left to the verifier, which every consumer runs. Each call either succeeds
 * or leaves the graph as it was, so a caller can report the error and go on.
 * Any edit drops the verified state (topological order, sealed fingerprint):
 * the graph is verified again before it is used, and bumps the graph's
 * generation, which makes the executables made from it stale.
 */
#include "api.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void edited(cf_graph *g) {
  g->generation++; /* executables made before refuse to run */
  if (g->topo) /* the first edit after verification: types may change */
    for (int i = 0; i < g->n_nodes; i++) {
      g->nodes[i].out = NULL;
      g->nodes[i].n_out = 0;
    }
  g->topo = NULL;
  g->fingerprint = NULL; /* an intentional edit, not a tampered file */
}

cf_status cf_graph_create(cf_context *ctx, const char *name, int world_size, cf_graph **out) {
  if (!out) return CF_ERR_USAGE;
  *out = NULL;
  if (!ctx) return CF_ERR_USAGE;
  if (!name) name = "graph";
  if (!*name) return cf_error(ctx, CF_ERR_USAGE, NULL, 0, "cf_graph_create: empty graph name");
  if (world_size < 0 || world_size > CF_MAX_WORLD)
    return cf_error(ctx, CF_ERR_USAGE, name, 0, "world_size %d must be in 0..%d", world_size,
                    CF_MAX_WORLD);
  cf_graph *g;
  cf_status st = cf_graph_new(ctx, name, &g);
  if (st) return st;
  if (!(g->name = cf_arena_strdup(&g->arena, name))) {
    cf_graph_release(g);
    return cf_error(ctx, CF_ERR_NO_MEMORY, name, 0, "out of memory");
  }
  g->world_size = world_size;
  *out = g;
  return CF_OK;
}

cf_status cf_graph_set_world_size(cf_graph *g, int world_size) {
  if (!g) return CF_ERR_USAGE;
  if (world_size < 0 || world_size > CF_MAX_WORLD)
    return cf_error(g->ctx, CF_ERR_USAGE, g->file, 0, "world_size %d must be in 0..%d", world_size,
                    CF_MAX_WORLD);
  g->world_size = world_size;
  edited(g);
  return CF_OK;
}

cf_status cf_graph_define_group(cf_graph *g, const char *name, const int *ranks, size_t n) {
  if (!g) return CF_ERR_USAGE;
  if (!name || !*name || (n && !ranks))
    return cf_error(g->ctx, CF_ERR_USAGE, g->file, 0, "cf_graph_define_group: needs a name and %s",
                    "ranks");
  if (n > CF_MAX_WORLD)
    return cf_error(g->ctx, CF_ERR_INVALID, g->file, 0, "group '%s': %zu ranks, above %d", name, n,
                    CF_MAX_WORLD);
  cf_status st = cf_graph_add_group(g, name, ranks, (int)n, 0);
  if (!st) edited(g);
  return st;
}

cf_status cf_graph_define_group_parts(cf_graph *g, const char *name, const int *ranks,
                                      size_t n_parts, size_t part_size) {
  if (!g) return CF_ERR_USAGE;
  if (!name || !*name || !ranks || !n_parts || !part_size)
    return cf_error(g->ctx, CF_ERR_USAGE, g->file, 0,
                    "cf_graph_define_group_parts: needs a name, ranks and non-zero part counts");
  if (n_parts > CF_MAX_WORLD || part_size > CF_MAX_WORLD || n_parts * part_size > CF_MAX_WORLD)
    return cf_error(g->ctx, CF_ERR_INVALID, g->file, 0, "group '%s': %zu parts of %zu ranks, above %d",
                    name, n_parts, part_size, CF_MAX_WORLD);
  int *off = malloc(sizeof *off * (n_parts + 1));
  if (!off) return cf_error(g->ctx, CF_ERR_NO_MEMORY, g->file, 0, "out of memory");
  for (size_t k = 0; k <= n_parts; k++) off[k] = (int)(k * part_size);
  cf_status st = cf_graph_add_group_parts(g, name, ranks, off, (int)n_parts, 0);
  free(off);
  if (!st) edited(g);
  return st;
}

/* Node index of an operand: a node name, or "NAME:K" for port K. */
static cf_status resolve(cf_graph *g, const char *node, size_t k, const char *s, cf_ref *r) {
  if (!s)
    return cf_error(g->ctx, CF_ERR_USAGE, g->file, 0, "node '%s': input %zu is NULL", node, k);
  r->port = 0;
  if ((r->node = cf_graph_find(g, s)) >= 0) return CF_OK;
  const char *c = strrchr(s, ':');
  if (c && c > s && c[1] && strlen(c + 1) <= 5) {
    bool digits = true;
    for (const char *d = c + 1; *d; d++)
      digits = digits && isdigit((unsigned char)*d);
    char *base = digits ? malloc((size_t)(c - s) + 1) : NULL;
    if (base) {
      memcpy(base, s, (size_t)(c - s));
      base[c - s] = 0;
      r->node = cf_graph_find(g, base);
      r->port = atoi(c + 1);
      free(base);
      if (r->node >= 0) return CF_OK;
    }
  }
  return cf_error(g->ctx, CF_ERR_INVALID, g->file, 0,
                  "node '%s': input %zu refers to unknown node '%s'", node, k, s);
}

static cf_status check_port(cf_graph *g, const char *node, size_t k, const cf_ref *r) {
  const cf_node *src = &g->nodes[r->node];
  int n = cf_node_n_outputs(src);
  if (r->port < n) return CF_OK;
  return cf_error(g->ctx, CF_ERR_INVALID, g->file, 0,
                  "node '%s': input %zu refers to port %d of '%s', which has %d output%s", node, k,
                  r->port, src->name, n, n == 1 ? "" : "s");
}

/* Take back the node just added (nothing refers to it yet); the message of
 * the failure that made us stays. */
static void undo_last(cf_graph *g) {
  g->nodes[g->n_nodes - 1].dead = true;
  cf_graph_compact(g);
}

cf_status cf_graph_add_op(cf_graph *g, const char *op, const char *name, const char *const *inputs,
                          size_t n_inputs) {
  if (!g) return CF_ERR_USAGE;
  if (!name || !*name) return cf_error(g->ctx, CF_ERR_USAGE, g->file, 0, "node without a name");
  if (!op) return cf_error(g->ctx, CF_ERR_USAGE, g->file, 0, "node '%s': missing op", name);
  if (n_inputs && !inputs)
    return cf_error(g->ctx, CF_ERR_USAGE, g->file, 0, "node '%s': inputs is NULL", name);
  int layout;
  cf_op o = cf_op_lookup(op, &layout);
  if (o == CF_OP_INVALID) {
    char dym[96];
    return cf_error(g->ctx, CF_ERR_INVALID, g->file, 0, "node '%s': unknown op '%s'%s", name, op,
                    cf_did_you_mean(cf_op_suggest(op), dym, sizeof dym));
  }
  if (n_inputs > CF_MAX_OPERANDS)
    return cf_error(g->ctx, CF_ERR_INVALID, g->file, 0,
                    "node '%s': too many operands (%zu, limit %d)", name, n_inputs,
                    CF_MAX_OPERANDS);
  if (cf_graph_find(g, name) >= 0)
    return cf_error(g->ctx, CF_ERR_INVALID, g->file, 0, "node '%s': duplicate node name", name);
  cf_ref *refs = malloc(sizeof *refs * (n_inputs + 1));
  if (!refs) return cf_error(g->ctx, CF_ERR_NO_MEMORY, g->file, 0, "out of memory");
  cf_status st = CF_OK;
  for (size_t k = 0; k < n_inputs && !st; k++) {
    st = resolve(g, name, k, inputs[k], &refs[k]);
    if (!st) st = check_port(g, name, k, &refs[k]);
  }
  int idx = -1;
  if (!st) st = cf_graph_add_node(g, name, o, 0, &idx);
  if (!st) st = cf_node_set_inputs(g, idx, (int)n_inputs, refs);
  if (!st && layout >= 0) {
    cf_attr la = {.id = CF_A_LAYOUT, .v.i = layout};
    st = cf_node_set_attr(g, idx, &la);
  }
  free(refs);
  if (st && idx >= 0) undo_last(g);
  if (!st) edited(g);
  return st;
}

cf_status cf_graph_set_attr(cf_graph *g, const char *node, const char *attr, const char *value) {
  if (!g) return CF_ERR_USAGE;
  if (!node || !attr || !value)
    return cf_error(g->ctx, CF_ERR_USAGE, g->file, 0,
                    "cf_graph_set_attr: node, attr and value are required");
  int idx = cf_graph_find(g, node);
  if (idx < 0) return cf_error(g->ctx, CF_ERR_INVALID, g->file, 0, "no node named '%s'", node);
  cf_attr_id id = cf_attr_lookup(attr);
  if (id == CF_A_COUNT)
    return cf_error(g->ctx, CF_ERR_INVALID, g->file, 0, "node '%s': unknown attribute '%s'", node,
                    attr);
  /* parse into a scratch copy of the node so a bad value changes nothing */
  cf_node keep = g->nodes[idx];
  cf_status st = cf_node_parse_attr(g, idx, id, value, 0);
  if (st)
    g->nodes[idx] = keep;
  else
    edited(g);
  return st;
}

cf_status cf_graph_set_attr_int(cf_graph *g, const char *node, const char *attr, int64_t value) {
  char buf[32];
  snprintf(buf, sizeof buf, "%lld", (long long)value);
  return cf_graph_set_attr(g, node, attr, buf);
}

/* ---- typed helpers ---- */

static cf_status shape_text(cf_graph *g, const char *name, const int64_t *dims, int rank, char *buf,
                            size_t len) {
  if (rank < 0 || rank > CF_MAX_RANK || (rank && !dims))
    return cf_error(g->ctx, CF_ERR_USAGE, g->file, 0, "node '%s': shape rank %d must be in 0..%d",
                    name, rank, CF_MAX_RANK);
  size_t o = 0;
  buf[0] = 0;
  for (int i = 0; i < rank; i++) {
    if (dims[i] < 0)
      return cf_error(g->ctx, CF_ERR_INVALID, g->file, 0,
                      "node '%s': dimension %d is negative (%lld)", name, i, (long long)dims[i]);
    o += (size_t)snprintf(buf + o, len - o, i ? ",%lld" : "%lld", (long long)dims[i]);
  }
  return CF_OK;
}

cf_status cf_graph_add_op_attrs(cf_graph *g, const char *op, const char *name,
                                const char *const *inputs, size_t n_inputs,
                                const char *const *attrs, const char *const *values,
                                size_t n_attrs) {
  if (g && n_attrs && (!attrs || !values))
    return cf_error(g->ctx, CF_ERR_USAGE, g->file, 0, "node '%s': attrs or values is NULL",
                    name ? name : "");
  cf_status st = cf_graph_add_op(g, op, name, inputs, n_inputs);
  if (st) return st;
  for (size_t i = 0; i < n_attrs && !st; i++)
    if (values[i]) st = cf_graph_set_attr(g, name, attrs[i], values[i]);
  if (st) undo_last(g);
  return st;
}

static cf_status add_with(cf_graph *g, const char *op, const char *name, const char *const *inputs,
                          size_t n, const char *const *attrs, const char *const *vals,
                          int n_attrs) {
  return cf_graph_add_op_attrs(g, op, name, inputs, n, attrs, vals, (size_t)n_attrs);
}

cf_status cf_graph_add_input(cf_graph *g, const char *name, const char *dtype, const int64_t *dims,
                             int rank) {
  if (!g) return CF_ERR_USAGE;
  char shape[CF_MAX_RANK * 24 + 1];
  cf_status st = shape_text(g, name ? name : "", dims, rank, shape, sizeof shape);
  if (st) return st;
  const char *attrs[] = {"dtype", "shape"}, *vals[] = {dtype ? dtype : "", shape};
  return add_with(g, "Input", name, NULL, 0, attrs, vals, 2);
}

cf_status cf_graph_add_constant(cf_graph *g, const char *name, const char *dtype,
                                const int64_t *dims, int rank, double value) {
  if (!g) return CF_ERR_USAGE;
  char shape[CF_MAX_RANK * 24 + 1], v[64];
  cf_status st = shape_text(g, name ? name : "", dims, rank, shape, sizeof shape);
  if (st) return st;
  snprintf(v, sizeof v, "%.17g", value);
  const char *attrs[] = {"dtype", "shape", "value"}, *vals[] = {dtype ? dtype : "", shape, v};
  return add_with(g, "Constant", name, NULL, 0, attrs, vals, 3);
}

cf_status cf_graph_add_output(cf_graph *g, const char *name, const char *input) {
  return cf_graph_add_op(g, "Output", name, &input, 1);
}

cf_status cf_graph_add_matmul(cf_graph *g, const char *name, const char *a, const char *b) {
  const char *in[] = {a, b};
  return cf_graph_add_op(g, "MatMul", name, in, 2);
}

cf_status cf_graph_add_allreduce(cf_graph *g, const char *name, const char *input,
                                 const char *reduction, const char *group, int fusion,
                                 int fusion_id) {
  char f[16], fid[16];
  snprintf(f, sizeof f, "%d", fusion);
  snprintf(fid, sizeof fid, "%d", fusion_id);
  const char *attrs[] = {"reduction", "group", "fusion", "fusion_id"};
  const char *vals[] = {reduction, group, fusion >= 0 ? f : NULL, fusion_id >= 0 ? fid : NULL};
  return add_with(g, "AllReduce", name, &input, 1, attrs, vals, 4);
}

cf_status cf_graph_add_allgather(cf_graph *g, const char *name, const char *input,
                                 const char *group, const char *layout) {
  const char *attrs[] = {"group", "layout"}, *vals[] = {group, layout};
  return add_with(g, "AllGather", name, &input, 1, attrs, vals, 2);
}

cf_status cf_graph_add_reducescatter(cf_graph *g, const char *name, const char *input,
                                     const char *reduction, const char *group) {
  const char *attrs[] = {"reduction", "group"}, *vals[] = {reduction, group};
  return add_with(g, "ReduceScatter", name, &input, 1, attrs, vals, 2);
}

cf_status cf_graph_add_alltoall(cf_graph *g, const char *name, const char *input,
                                int split_dimension, int concat_dimension, const char *group) {
  char sd[16], cd[16];
  snprintf(sd, sizeof sd, "%d", split_dimension);
  snprintf(cd, sizeof cd, "%d", concat_dimension);
  const char *attrs[] = {"split_dimension", "concat_dimension", "group"}, *vals[] = {sd, cd, group};
  return add_with(g, "AllToAll", name, &input, 1, attrs, vals, 3);
}

cf_status cf_graph_add_collective_permute(cf_graph *g, const char *name, const char *input,
                                          const int *pairs, size_t n_pairs, const char *group) {
  if (!g) return CF_ERR_USAGE;
  if (n_pairs > CF_MAX_WORLD || (n_pairs && !pairs))
    return cf_error(g->ctx, CF_ERR_USAGE, g->file, 0,
                    "node '%s': %zu source-target pairs: at most %d, one per rank",
                    name ? name : "", n_pairs, CF_MAX_WORLD);
  char text[CF_MAX_WORLD * 26 + 1];
  size_t o = 0;
  for (size_t k = 0; k < n_pairs; k++)
    o += (size_t)snprintf(text + o, sizeof text - o, "%s{%d,%d}", k ? "," : "", pairs[2 * k],
                          pairs[2 * k + 1]);
  text[o] = 0;
  const char *attrs[] = {"source_target_pairs", "group"}, *vals[] = {text, group};
  return add_with(g, "CollectivePermute", name, &input, 1, attrs, vals, 2);
}

cf_status cf_graph_add_opaque(cf_graph *g, const char *name, const char *type,
                              const char *const *inputs, size_t n_inputs, const char *dtype,
                              const int64_t *dims, int rank) {
  if (!g) return CF_ERR_USAGE;
  char shape[CF_MAX_RANK * 24 + 1];
  cf_status st = shape_text(g, name ? name : "", dims, rank, shape, sizeof shape);
  if (st) return st;
  const char *attrs[] = {"type", "dtype", "shape"}, *vals[] = {type, dtype ? dtype : "", shape};
  return add_with(g, "Opaque", name, inputs, n_inputs, attrs, vals, 3);
}

/* ---- inspection ---- */

static const cf_node *node_at(const cf_graph *g, size_t i) {
  if (!g || i >= (size_t)g->n_nodes) return NULL;
  return &g->nodes[g->topo ? g->topo[i] : (int)i];
}

const char *cf_graph_node_name(const cf_graph *g, size_t i) {
  const cf_node *n = node_at(g, i);
  return n ? n->name : NULL;
}

const char *cf_graph_collective_name(const cf_graph *g, size_t i) {
  for (size_t k = 0, c = 0; g && k < (size_t)g->n_nodes; k++) {
    const cf_node *n = node_at(g, k);
    if (cf_op_is_collective(n->op) && c++ == i) return n->name;
  }
  return NULL;
}

const char *cf_graph_node_op(const cf_graph *g, const char *node) {
  int i = g && node ? cf_graph_find(g, node) : -1;
  return i < 0 ? NULL : cf_op_table[g->nodes[i].op].name;
}

static bool allows(const cf_node *n, cf_attr_id id) {
  return (cf_op_table[n->op].allowed >> id) & 1u;
}

static void put(char *buf, size_t len, const char *s) { snprintf(buf, len, "%s", s); }

cf_status cf_graph_get_attr(const cf_graph *g, const char *node, const char *attr, char *buf,
                            size_t len) {
  if (!g) return CF_ERR_USAGE;
  if (!node || !attr || !buf || !len)
    return cf_error(g->ctx, CF_ERR_USAGE, g->file, 0,
                    "cf_graph_get_attr: node, attr and a buffer are required");
  buf[0] = 0;
  int idx = cf_graph_find(g, node);
  if (idx < 0) return cf_error(g->ctx, CF_ERR_INVALID, g->file, 0, "no node named '%s'", node);
  const cf_node *n = &g->nodes[idx];
  bool inferred = g->topo && n->n_out > 0 && n->out;
  if (strcmp(attr, "op") == 0) {
    put(buf, len, cf_op_table[n->op].name);
    return CF_OK;
  }
  if (strcmp(attr, "members") == 0) {
    const cf_attr *m = cf_node_attr(n, CF_A_MEMBERS);
    if (!m && !cf_op_is_collective(n->op))
      return cf_node_error(g, n, CF_ERR_INVALID, "not a collective: it has no members");
    const char *self[1] = {n->name}; /* a plain collective: the list of itself */
    cf_attr_text(m ? m : &(cf_attr){.id = CF_A_MEMBERS, .v.strs = {self, 1}}, buf, len);
    return CF_OK;
  }
  if (strcmp(attr, "bytes") == 0) {
    int64_t b = 0;
    if (!inferred)
      return cf_node_error(g, n, CF_ERR_INVALID, "its size is known once the graph is verified");
    if (cf_op_is_collective(n->op))
      b = cf_node_comm_bytes(g, n);
    else
      cf_value_bytes(&n->out[0], &b);
    snprintf(buf, len, "%lld", (long long)b);
    return CF_OK;
  }
  cf_attr_id id = cf_attr_lookup(attr);
  if (id == CF_A_COUNT) return cf_node_error(g, n, CF_ERR_INVALID, "unknown attribute '%s'", attr);
  const cf_attr *a = cf_node_attr(n, id);
  if (!a && (id == CF_A_DTYPE || id == CF_A_SHAPE) && inferred) {
    if (id == CF_A_DTYPE)
      put(buf, len, cf_dtype_name(n->out[0].dtype));
    else
      cf_shape_format(&n->out[0].shape, buf, len);
    return CF_OK;
  }
  if (!a) {
    if (!allows(n, id)) return cf_node_error(g, n, CF_ERR_INVALID, "has no attribute '%s'", attr);
    switch (id) {
    case CF_A_REDUCTION: put(buf, len, cf_reduction_name(cf_node_reduction(n))); return CF_OK;
    case CF_A_GROUP: put(buf, len, cf_node_group(n)); return CF_OK;
    case CF_A_FUSION: snprintf(buf, len, "%lld", (long long)cf_node_fusion(n)); return CF_OK;
    case CF_A_FUSION_ID: put(buf, len, "-1"); return CF_OK;
    case CF_A_LAYOUT: put(buf, len, cf_layout_name(cf_node_layout(n))); return CF_OK;
    default: return cf_node_error(g, n, CF_ERR_INVALID, "attribute '%s' is not set", attr);
    }
  }
  cf_attr_text(a, buf, len);
  return CF_OK;
}
