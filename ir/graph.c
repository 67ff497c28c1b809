/* graph.c - the graph container: nodes with a name index, attributes, groups and compaction.
 */
#include "ir.h"

#include <assert.h>
#include <errno.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

cf_status cf_graph_new(cf_context *ctx, const char *file, cf_graph **out) {
  *out = NULL;
  cf_graph *g = calloc(1, sizeof *g);
  if (!g) return cf_error(ctx, CF_ERR_NO_MEMORY, file, 0, "out of memory");
  g->ctx = ctx;
  g->file = cf_arena_strdup(&g->arena, file ? file : "<memory>");
  g->name = cf_arena_strdup(&g->arena, "graph");
  g->version = 1;
  g->node_limit = CF_MAX_NODES;
  if (!g->file || !g->name) {
    cf_graph_release(g);
    return cf_error(ctx, CF_ERR_NO_MEMORY, file, 0, "out of memory");
  }
  *out = g;
  return CF_OK;
}

static void graph_free(cf_graph *g) {
  free(g->regions);
  free(g->nodes);
  free(g->groups);
  free(g->index);
  free(g->group_index);
  cf_arena_free(&g->arena);
  free(g);
}

void cf_graph_release(cf_graph *g) {
  if (!g) return;
  if (g->holders > 0)
    g->released = true; /* the caller's handle is gone: nothing can change it any more */
  else
    graph_free(g);
}

void cf_graph_hold(cf_graph *g) { g->holders++; }

void cf_graph_unhold(cf_graph *g) {
  if (!g) return;
  assert(g->holders > 0);
  if (--g->holders == 0 && g->released) graph_free(g);
}

/* Name indexes (nodes, groups) are util.h's cf_name_slot tables, at most
 * half full; names are unique, so a put lands on an empty slot. */
static int *slots_build(int cap, const void *items, size_t off, size_t stride, int n) {
  int *slots = calloc((size_t)cap, sizeof(int));
  for (int i = 0; slots && i < n; i++) {
    const char *name;
    memcpy(&name, (const char *)items + (size_t)i * stride + off, sizeof name);
    *cf_name_slot(slots, (size_t)cap, items, off, stride, name) = i + 1;
  }
  return slots;
}

static bool index_rebuild(cf_graph *g, int cap) {
  int *idx = slots_build(cap, g->nodes, offsetof(cf_node, name), sizeof(cf_node), g->n_nodes);
  if (!idx) return false;
  free(g->index);
  g->index = idx;
  g->index_cap = cap;
  return true;
}

int cf_graph_find(const cf_graph *g, const char *name) {
  return cf_name_find(g->index, (size_t)g->index_cap, g->nodes, offsetof(cf_node, name),
                      sizeof(cf_node), name);
}

cf_status cf_graph_add_region(cf_graph *g, const char *op, const char *owner, const char *part,
                              int parent, int line, int *id) {
  if (g->n_regions + 1 >= g->cap_regions) {
    int cap = g->cap_regions ? g->cap_regions * 2 : 8;
    cf_region *v = realloc(g->regions, (size_t)cap * sizeof *v);
    if (!v) return cf_error(g->ctx, CF_ERR_NO_MEMORY, g->file, line, "out of memory");
    if (!g->cap_regions) memset(v, 0, sizeof *v); /* [0]: the top level */
    g->regions = v;
    g->cap_regions = cap;
  }
  if (!g->n_regions) g->n_regions = 1;
  cf_region *rg = &g->regions[g->n_regions];
  *rg = (cf_region){.op = cf_arena_strdup(&g->arena, op),
                    .owner = cf_arena_strdup(&g->arena, owner),
                    .part = cf_arena_strdup(&g->arena, part),
                    .parent = parent,
                    .line = line};
  if (!rg->op || !rg->owner || !rg->part)
    return cf_error(g->ctx, CF_ERR_NO_MEMORY, g->file, line, "out of memory");
  *id = g->n_regions++;
  return CF_OK;
}

const char *cf_region_text(const cf_graph *g, int id, char *buf, size_t len) {
  if (id <= 0 || id >= g->n_regions)
    snprintf(buf, len, "the top level");
  else
    snprintf(buf, len, "%s '%s' %s", g->regions[id].op, g->regions[id].owner, g->regions[id].part);
  return buf;
}

cf_status cf_graph_regions_refuse(const cf_graph *g) {
  int k = 0; /* the first top-level op whose bodies kept a node (dce may drop a dead loop) */
  for (int i = 0; i < g->n_nodes && g->n_regions > 1; i++) {
    int r = g->nodes[i].region;
    while (r > 0 && r < g->n_regions && g->regions[r].parent > 0)
      r = g->regions[r].parent;
    if (r > 0 && r < g->n_regions && (!k || r < k)) k = r;
  }
  if (!k) return CF_OK;
  const cf_region *rg = &g->regions[k];
  bool loop = strstr(rg->op, "while") != NULL;
  return cf_error(g->ctx, CF_ERR_INVALID, g->file, rg->line,
                  "%s '%s': %s are compiled but not run: collfuse's executor runs a graph once, "
                  "in dataflow order, and %s; check, compile and dot take the file",
                  rg->op, rg->owner, loop ? "loop bodies" : "conditional branches",
                  loop ? "cannot repeat a body a number of times known only at run time"
                       : "cannot pick a branch by a value known only at run time");
}

cf_status cf_graph_add_node(cf_graph *g, const char *name, cf_op op, int line, int *idx) {
  if (!name || !*name) return cf_error(g->ctx, CF_ERR_INVALID, g->file, line, "node without a name");
  if (strlen(name) > CF_MAX_NAME)
    return cf_error(g->ctx, CF_ERR_INVALID, g->file, line,
                    "node '%.40s...': name longer than %d bytes", name, CF_MAX_NAME);
  int prev = cf_graph_find(g, name);
  if (prev >= 0) {
    const cf_node *p = &g->nodes[prev];
    if (p->line)
      return cf_error(g->ctx, CF_ERR_INVALID, g->file, line,
                      "node '%s': duplicate node name (first defined at line %d)", name, p->line);
    return cf_error(g->ctx, CF_ERR_INVALID, g->file, line, "node '%s': duplicate node name", name);
  }
  if (g->n_nodes >= g->node_limit)
    return cf_error(g->ctx, CF_ERR_INVALID, g->file, line, "too many nodes (limit %d)",
                    g->node_limit);
  if (g->n_nodes == g->cap_nodes) {
    int cap = g->cap_nodes ? g->cap_nodes * 2 : 64;
    cf_node *n = realloc(g->nodes, (size_t)cap * sizeof *n);
    if (!n) return cf_error(g->ctx, CF_ERR_NO_MEMORY, g->file, line, "out of memory");
    g->nodes = n;
    g->cap_nodes = cap;
  }
  cf_node *n = &g->nodes[g->n_nodes];
  memset(n, 0, sizeof *n);
  n->name = cf_arena_strdup(&g->arena, name);
  if (!n->name) return cf_error(g->ctx, CF_ERR_NO_MEMORY, g->file, line, "out of memory");
  n->op = op;
  n->line = line;
  g->n_nodes++;
  if ((int64_t)g->n_nodes * 2 > g->index_cap) {
    if (!index_rebuild(g, g->index_cap ? g->index_cap * 2 : 128)) {
      g->n_nodes--;
      return cf_error(g->ctx, CF_ERR_NO_MEMORY, g->file, line, "out of memory");
    }
  } else {
    *cf_name_slot(g->index, (size_t)g->index_cap, g->nodes, offsetof(cf_node, name),
                  sizeof(cf_node), n->name) = g->n_nodes;
  }
  if (idx) *idx = g->n_nodes - 1;
  return CF_OK;
}

cf_status cf_node_set_inputs(cf_graph *g, int node, int n, const cf_ref *refs) {
  cf_node *nd = &g->nodes[node];
  if (n > CF_MAX_OPERANDS)
    return cf_node_error(g, nd, CF_ERR_INVALID, "too many operands (%d, limit %d)", n,
                         CF_MAX_OPERANDS);
  cf_ref *in = n ? cf_arena_array(&g->arena, (size_t)n, sizeof *in) : NULL;
  if (n && !in) return cf_node_error(g, nd, CF_ERR_NO_MEMORY, "out of memory");
  if (n) memcpy(in, refs, (size_t)n * sizeof *in);
  nd->in = in;
  nd->n_in = n;
  return CF_OK;
}

cf_status cf_node_add_control(cf_graph *g, int node, int pred) {
  cf_node *nd = &g->nodes[node];
  if (pred == node) return CF_OK;
  for (int i = 0; i < nd->n_ctl; i++)
    if (nd->ctl[i] == pred) return CF_OK;
  if (nd->n_ctl >= CF_MAX_OPERANDS)
    return cf_node_error(g, nd, CF_ERR_INVALID, "too many control predecessors (limit %d)",
                         CF_MAX_OPERANDS);
  int *ctl = cf_arena_array(&g->arena, (size_t)nd->n_ctl + 1, sizeof *ctl);
  if (!ctl) return cf_node_error(g, nd, CF_ERR_NO_MEMORY, "out of memory");
  if (nd->n_ctl) memcpy(ctl, nd->ctl, (size_t)nd->n_ctl * sizeof *ctl);
  ctl[nd->n_ctl] = pred;
  nd->ctl = ctl;
  nd->n_ctl++;
  return CF_OK;
}

const cf_attr *cf_node_attr(const cf_node *n, cf_attr_id id) {
  for (int i = 0; i < n->n_attr; i++)
    if (n->attr[i].id == id) return &n->attr[i];
  return NULL;
}

int64_t cf_node_int(const cf_node *n, cf_attr_id id, int64_t dflt) {
  const cf_attr *a = cf_node_attr(n, id);
  return a ? a->v.i : dflt;
}

const char *cf_node_str(const cf_node *n, cf_attr_id id, const char *dflt) {
  assert(cf_attr_table[id].kind == CF_AK_STR);
  const cf_attr *a = cf_node_attr(n, id);
  return a ? a->v.s : dflt;
}

cf_strs cf_node_strs(const cf_node *n, cf_attr_id id) {
  const cf_attr *a = cf_node_attr(n, id);
  return a ? a->v.strs : (cf_strs){NULL, -1};
}

cf_ints cf_node_ints(const cf_node *n, cf_attr_id id) {
  const cf_attr *a = cf_node_attr(n, id);
  return a ? a->v.ints : (cf_ints){NULL, -1};
}

cf_status cf_node_set_strs(cf_graph *g, int node, cf_attr_id id, const char *const *v, int n) {
  cf_attr a = {.id = id,
               .v.strs = {cf_arena_array(&g->arena, n > 0 ? (size_t)n : 1, sizeof(char *)), n}};
  bool ok = a.v.strs.v != NULL;
  for (int i = 0; ok && i < n; i++)
    ok = (a.v.strs.v[i] = cf_arena_strdup(&g->arena, v[i])) != NULL;
  if (!ok) return cf_node_error(g, &g->nodes[node], CF_ERR_NO_MEMORY, "out of memory");
  return cf_node_set_attr(g, node, &a);
}

cf_status cf_node_set_ints(cf_graph *g, int node, cf_attr_id id, const int64_t *v, int n) {
  int64_t *c = cf_arena_array(&g->arena, n > 0 ? (size_t)n : 1, sizeof *c);
  if (!c) return cf_node_error(g, &g->nodes[node], CF_ERR_NO_MEMORY, "out of memory");
  if (n > 0) memcpy(c, v, (size_t)n * sizeof *c);
  cf_attr a = {.id = id, .v.ints = {c, n}};
  return cf_node_set_attr(g, node, &a);
}

cf_status cf_node_set_attr(cf_graph *g, int node, const cf_attr *a) {
  cf_node *n = &g->nodes[node];
  for (int i = 0; i < n->n_attr; i++)
    if (n->attr[i].id == a->id) {
      n->attr[i] = *a;
      return CF_OK;
    }
  if (n->n_attr == n->cap_attr) {
    int cap = n->cap_attr ? n->cap_attr * 2 : 4;
    cf_attr *na = cf_arena_array(&g->arena, (size_t)cap, sizeof *na);
    if (!na) return cf_node_error(g, n, CF_ERR_NO_MEMORY, "out of memory");
    if (n->n_attr) memcpy(na, n->attr, (size_t)n->n_attr * sizeof *na);
    n->attr = na;
    n->cap_attr = cap;
  }
  n->attr[n->n_attr++] = *a;
  return CF_OK;
}

/* false on no integer; *range set when it is one but outside int64 */
static bool parse_int(const char *s, int64_t *out, bool *range) {
  char *end;
  errno = 0;
  *range = false;
  while (*s == ' ') s++;
  long long v = strtoll(s, &end, 10);
  if (end == s) return false;
  while (*end == ' ') end++;
  if (!*end && errno == ERANGE) *range = true;
  if (errno == ERANGE) return false;
  if (*end) return false;
  *out = v;
  return true;
}

/* ---- list attributes as text ----
 * Items are comma-separated. An item's `,` is `\,`; its `\` is `\\` where a
 * lone one would read as an escape (before `,` or `\`, or last in the item),
 * and itself elsewhere: names without a comma read and write as they did
 * when members were one comma string, byte for byte. */

static bool is_escape(const char *p) { return p[0] == '\\' && (p[1] == ',' || p[1] == '\\'); }

/* text's items into the arena; false when out of memory */
static bool parse_strs(cf_arena *ar, const char *text, cf_strs *out) {
  int n = 1;
  for (const char *p = text; *p; p++) {
    if (is_escape(p))
      p++;
    else
      n += *p == ',';
  }
  char *s = cf_arena_alloc(ar, strlen(text) + 1);
  out->v = cf_arena_array(ar, (size_t)n, sizeof(char *));
  out->n = n;
  if (!s || !out->v) return false;
  int k = 0;
  out->v[0] = s;
  for (const char *p = text; *p; p++) {
    if (is_escape(p)) {
      *s++ = *++p;
    } else if (*p == ',') {
      *s++ = 0;
      out->v[++k] = s;
    } else {
      *s++ = *p;
    }
  }
  *s = 0;
  return true;
}

/* "" is no items; each item an integer strtoll reads whole. *bad set when
 * the text is not such a list, false when out of memory. */
static bool parse_ints(cf_arena *ar, const char *text, cf_ints *out, bool *bad) {
  int n = *text ? 1 : 0;
  for (const char *p = text; *p; p++)
    n += *p == ',';
  int64_t *v = cf_arena_array(ar, n ? (size_t)n : 1, sizeof *v);
  *out = (cf_ints){v, n};
  *bad = false;
  if (!v) return false;
  const char *p = text;
  for (int k = 0; k < n; k++) {
    char *e;
    errno = 0;
    long long x = strtoll(p, &e, 10);
    if (e == p || errno == ERANGE || (*e && *e != ',')) return *bad = true;
    v[k] = x;
    p = *e ? e + 1 : e;
  }
  return true;
}

static void put_char(char *buf, size_t len, size_t *o, char c) {
  if (*o + 1 < len) buf[*o] = c;
  ++*o;
}

static void put_text(char *buf, size_t len, size_t *o, const char *s) {
  while (*s)
    put_char(buf, len, o, *s++);
}

size_t cf_attr_text(const cf_attr *a, char *buf, size_t len) {
  char tmp[64];
  size_t o = 0;
  switch (cf_attr_table[a->id].kind) {
  case CF_AK_INT:
    snprintf(tmp, sizeof tmp, "%lld", (long long)a->v.i);
    put_text(buf, len, &o, tmp);
    break;
  case CF_AK_FLOAT:
    snprintf(tmp, sizeof tmp, "%.17g", a->v.f);
    put_text(buf, len, &o, tmp);
    break;
  case CF_AK_STR: put_text(buf, len, &o, a->v.s); break;
  case CF_AK_DTYPE: put_text(buf, len, &o, cf_dtype_name((cf_dtype)a->v.i)); break;
  case CF_AK_SHAPE: {
    char sh[CF_MAX_RANK * 21 + 1];
    put_text(buf, len, &o, cf_shape_format(a->v.shape, sh, sizeof sh));
    break;
  }
  case CF_AK_RED: put_text(buf, len, &o, cf_reduction_name((cf_reduction)a->v.i)); break;
  case CF_AK_LAYOUT: put_text(buf, len, &o, cf_layout_name((cf_layout)a->v.i)); break;
  case CF_AK_STRS:
    for (int i = 0; i < a->v.strs.n; i++) {
      if (i) put_char(buf, len, &o, ',');
      for (const char *p = a->v.strs.v[i]; *p; p++) {
        if (*p == ',' || (*p == '\\' && (p[1] == ',' || p[1] == '\\' || !p[1])))
          put_char(buf, len, &o, '\\');
        put_char(buf, len, &o, *p);
      }
    }
    break;
  case CF_AK_INTS:
    for (int i = 0; i < a->v.ints.n; i++) {
      snprintf(tmp, sizeof tmp, i ? ",%lld" : "%lld", (long long)a->v.ints.v[i]);
      put_text(buf, len, &o, tmp);
    }
    break;
  }
  if (len) buf[o < len ? o : len - 1] = 0;
  return o;
}

cf_status cf_node_parse_attr(cf_graph *g, int node, cf_attr_id id, const char *text, int line) {
  cf_node *n = &g->nodes[node];
  const char *an = cf_attr_table[id].name;
  cf_attr a = {.id = id};
  char why[256];
  switch (cf_attr_table[id].kind) {
  case CF_AK_INT: {
    bool range;
    if (!parse_int(text, &a.v.i, &range))
      return cf_error(g->ctx, CF_ERR_INVALID, g->file, line,
                      "node '%s': attribute %s='%.64s' is %s", n->name, an, text,
                      range ? "out of the 64-bit integer range" : "not an integer");
    break;
  }
  case CF_AK_FLOAT: {
    char *end;
    errno = 0;
    a.v.f = strtod(text, &end);
    if (end == text || *end || errno == ERANGE || !isfinite(a.v.f))
      return cf_error(g->ctx, CF_ERR_INVALID, g->file, line,
                      "node '%s': attribute %s='%s' is not a finite number", n->name, an, text);
    break;
  }
  case CF_AK_STR:
    if (!(a.v.s = cf_arena_strdup(&g->arena, text)))
      return cf_error(g->ctx, CF_ERR_NO_MEMORY, g->file, line, "out of memory");
    break;
  case CF_AK_DTYPE:
    a.v.i = cf_dtype_parse(text);
    if (a.v.i == CF_DT_INVALID && cf_dtype_suggest(text))
      return cf_error(g->ctx, CF_ERR_INVALID, g->file, line, "node '%s': unknown dtype %s='%s'%s",
                      n->name, an, text, cf_did_you_mean(cf_dtype_suggest(text), why, sizeof why));
    if (a.v.i == CF_DT_INVALID)
      return cf_error(g->ctx, CF_ERR_INVALID, g->file, line,
                      "node '%s': unknown dtype %s='%s' (int8, uint8, int16, int32, int64, "
                      "float16, bfloat16, float32, float64)",
                      n->name, an, text);
    break;
  case CF_AK_SHAPE:
    a.v.shape = cf_arena_alloc(&g->arena, sizeof(cf_shape));
    if (!a.v.shape) return cf_error(g->ctx, CF_ERR_NO_MEMORY, g->file, line, "out of memory");
    if (!cf_shape_parse(text, a.v.shape, why, sizeof why))
      return cf_error(g->ctx, CF_ERR_INVALID, g->file, line, "node '%s': %s", n->name, why);
    break;
  case CF_AK_RED:
    a.v.i = cf_reduction_parse(text);
    if (a.v.i < 0 && cf_reduction_suggest(text))
      return cf_error(g->ctx, CF_ERR_INVALID, g->file, line, "node '%s': unknown reduction '%s'%s",
                      n->name, text, cf_did_you_mean(cf_reduction_suggest(text), why, sizeof why));
    if (a.v.i < 0)
      return cf_error(g->ctx, CF_ERR_INVALID, g->file, line,
                      "node '%s': unknown reduction '%s' (sum, mean, max, min, prod)", n->name,
                      text);
    break;
  case CF_AK_LAYOUT:
    a.v.i = cf_layout_parse(text);
    if (a.v.i < 0)
      return cf_error(g->ctx, CF_ERR_INVALID, g->file, line,
                      "node '%s': unknown layout '%s' (stack, concat)", n->name, text);
    break;
  case CF_AK_STRS:
    if (!parse_strs(&g->arena, text, &a.v.strs))
      return cf_error(g->ctx, CF_ERR_NO_MEMORY, g->file, line, "out of memory");
    break;
  case CF_AK_INTS: {
    bool bad;
    if (!parse_ints(&g->arena, text, &a.v.ints, &bad) && !bad)
      return cf_error(g->ctx, CF_ERR_NO_MEMORY, g->file, line, "out of memory");
    if (bad)
      return cf_error(g->ctx, CF_ERR_INVALID, g->file, line,
                      "node '%s': attribute %s='%.64s' is not a comma-separated list of integers",
                      n->name, an, text);
    break;
  }
  }
  /* dtype and shape are the node's declared output type */
  if (id == CF_A_DTYPE || id == CF_A_SHAPE) {
    if (!n->n_decl) {
      n->decl = cf_arena_alloc(&g->arena, sizeof(cf_decl));
      if (!n->decl) return cf_error(g->ctx, CF_ERR_NO_MEMORY, g->file, line, "out of memory");
      n->n_decl = 1;
    }
    if (id == CF_A_DTYPE) {
      n->decl[0].has_dtype = true;
      n->decl[0].v.dtype = (cf_dtype)a.v.i;
    } else {
      n->decl[0].has_shape = true;
      n->decl[0].v.shape = *a.v.shape;
    }
  }
  return cf_node_set_attr(g, node, &a);
}

cf_status cf_graph_add_group(cf_graph *g, const char *name, const int *ranks, int n, int line) {
  int off[2] = {0, n};
  return cf_graph_add_group_parts(g, name, ranks, off, 1, line);
}

cf_status cf_graph_add_group_parts(cf_graph *g, const char *name, const int *ranks,
                                   const int *off, int n_parts, int line) {
  if (!*name) /* the format's name type has at least one character */
    return cf_error(g->ctx, CF_ERR_INVALID, g->file, line, "group with an empty name");
  if (strlen(name) > CF_MAX_GROUP_NAME)
    return cf_error(g->ctx, CF_ERR_INVALID, g->file, line,
                    "group '%.40s...': name longer than %d bytes", name, CF_MAX_GROUP_NAME);
  if (cf_graph_group(g, name))
    return cf_error(g->ctx, CF_ERR_INVALID, g->file, line, "group '%s' defined twice", name);
  if (n_parts < 1 || n_parts > CF_MAX_WORLD)
    return cf_error(g->ctx, CF_ERR_INVALID, g->file, line, "group '%s': %d parts, need 1..%d",
                    name, n_parts, CF_MAX_WORLD);
  int size = off[1] - off[0], n = off[n_parts] - off[0];
  for (int k = 0; k < n_parts && n_parts > 1; k++) {
    int sk = off[k + 1] - off[k];
    if (sk <= 0)
      return cf_error(g->ctx, CF_ERR_INVALID, g->file, line, "group '%s': part %d is empty", name,
                      k);
    if (sk != size)
      return cf_error(g->ctx, CF_ERR_INVALID, g->file, line,
                      "group '%s': part %d has %d rank%s but part 0 has %d (the parts of a group "
                      "are communicators of one size)",
                      name, k, sk, cf_s(sk), size);
  }
  if (n < 0 || n > CF_MAX_WORLD)
    return cf_error(g->ctx, CF_ERR_INVALID, g->file, line, "group '%s': %d ranks, above %d", name,
                    n, CF_MAX_WORLD);
  if ((int64_t)(g->n_groups + 1) * 2 > g->group_index_cap) {
    int cap = g->group_index_cap ? g->group_index_cap * 2 : 16;
    int *idx = slots_build(cap, g->groups, offsetof(cf_group, name), sizeof(cf_group), g->n_groups);
    if (!idx) return cf_error(g->ctx, CF_ERR_NO_MEMORY, g->file, line, "out of memory");
    free(g->group_index);
    g->group_index = idx;
    g->group_index_cap = cap;
  }
  if (g->n_groups == g->cap_groups) {
    int cap = g->cap_groups ? g->cap_groups * 2 : 8;
    cf_group *ng = realloc(g->groups, (size_t)cap * sizeof *ng);
    if (!ng) return cf_error(g->ctx, CF_ERR_NO_MEMORY, g->file, line, "out of memory");
    g->groups = ng;
    g->cap_groups = cap;
  }
  cf_group *gr = &g->groups[g->n_groups];
  gr->name = cf_arena_strdup(&g->arena, name);
  gr->ranks = n ? cf_arena_array(&g->arena, (size_t)n, sizeof(int)) : NULL;
  if (!gr->name || (n && !gr->ranks))
    return cf_error(g->ctx, CF_ERR_NO_MEMORY, g->file, line, "out of memory");
  if (n) memcpy(gr->ranks, ranks + off[0], (size_t)n * sizeof(int));
  gr->n_ranks = size;
  gr->n_parts = n_parts;
  gr->line = line;
  *cf_name_slot(g->group_index, (size_t)g->group_index_cap, g->groups, offsetof(cf_group, name),
                sizeof(cf_group), gr->name) = ++g->n_groups;
  return CF_OK;
}

const cf_group *cf_graph_group(const cf_graph *g, const char *name) {
  int i = cf_name_find(g->group_index, (size_t)g->group_index_cap, g->groups,
                       offsetof(cf_group, name), sizeof(cf_group), name);
  return i >= 0 ? &g->groups[i] : NULL;
}

const int *cf_group_part_of(const cf_group *gr, int rank, int *index) {
  int64_t n = (int64_t)gr->n_ranks * gr->n_parts;
  for (int64_t i = 0; i < n; i++)
    if (gr->ranks[i] == rank) {
      if (index) *index = (int)(i % gr->n_ranks);
      return gr->ranks + (i / gr->n_ranks) * gr->n_ranks;
    }
  return NULL;
}

int64_t cf_graph_group_size(const cf_graph *g, const char *name) {
  const cf_group *gr = cf_graph_group(g, name);
  if (gr) return gr->n_ranks;
  if (strcmp(name, CF_WORLD_GROUP) == 0) return g->world_size > 0 ? g->world_size : -1;
  return -1;
}

cf_status cf_graph_permute(cf_graph *g, const int *order, int n) {
  size_t nsz = g->n_nodes > 0 ? (size_t)g->n_nodes : 1;
  int *map = malloc(nsz * sizeof(int));
  cf_node *nodes = malloc((n > 0 ? (size_t)n : 1) * sizeof(cf_node));
  if (!map || !nodes) {
    free(map);
    free(nodes);
    return cf_error(g->ctx, CF_ERR_NO_MEMORY, g->file, 0, "out of memory");
  }
  for (int i = 0; i < g->n_nodes; i++) map[i] = -1;
  for (int k = 0; k < n; k++) map[order[k]] = k;
  for (int k = 0; k < n; k++) {
    nodes[k] = g->nodes[order[k]];
    for (int j = 0; j < nodes[k].n_in; j++) {
      int to = map[nodes[k].in[j].node];
      if (to < 0) {
        cf_status st = cf_node_error(g, &nodes[k], CF_ERR_RUNTIME, "internal: operand %d was removed", j);
        free(map);
        free(nodes);
        return st;
      }
      nodes[k].in[j].node = to;
    }
    /* a removed control predecessor no longer runs: its edge goes (a pass
     * that replaces a node moves the edges first) */
    int nc = 0;
    for (int j = 0; j < nodes[k].n_ctl; j++)
      if (map[nodes[k].ctl[j]] >= 0) nodes[k].ctl[nc++] = map[nodes[k].ctl[j]];
    nodes[k].n_ctl = nc;
  }
  free(map);
  free(g->nodes);
  g->nodes = nodes;
  g->n_nodes = g->cap_nodes = n;
  g->topo = NULL;
  int cap = 128;
  while (cap < 2 * n) cap *= 2;
  if (!index_rebuild(g, cap)) return cf_error(g->ctx, CF_ERR_NO_MEMORY, g->file, 0, "out of memory");
  return CF_OK;
}

cf_status cf_graph_compact(cf_graph *g) {
  int *order = malloc((g->n_nodes > 0 ? (size_t)g->n_nodes : 1) * sizeof(int));
  if (!order) return cf_error(g->ctx, CF_ERR_NO_MEMORY, g->file, 0, "out of memory");
  int k = 0;
  for (int i = 0; i < g->n_nodes; i++)
    if (!g->nodes[i].dead) order[k++] = i;
  cf_status st = cf_graph_permute(g, order, k);
  free(order);
  return st;
}

cf_status cf_node_error(const cf_graph *g, const cf_node *n, cf_status st, const char *fmt, ...) {
  char msg[1536];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  return cf_error(g->ctx, st, g->file, n->line, "node '%s': %s", n->name, msg);
}

cf_reduction cf_node_reduction(const cf_node *n) {
  return (cf_reduction)cf_node_int(n, CF_A_REDUCTION, CF_RED_SUM);
}

cf_layout cf_node_layout(const cf_node *n) {
  return (cf_layout)cf_node_int(n, CF_A_LAYOUT, CF_LAYOUT_STACK);
}

const char *cf_node_group(const cf_node *n) { return cf_node_str(n, CF_A_GROUP, CF_WORLD_GROUP); }

static const char *skip_space(const char *s) {
  while (*s == ' ' || *s == '\t' || *s == '\n')
    s++;
  return s;
}

/* A rank of a pair: digits, 0..n-1. A rank out of range is named as
 * written (clamping it to CF_MAX_WORLD + 1 made 4294967297 "rank 257"). */
static bool pair_rank(const char **p, int n, int *out, char *why, size_t len) {
  const char *s = skip_space(*p), *digits = s;
  long v = 0;
  if (*s < '0' || *s > '9') return snprintf(why, len, "a rank number expected"), false;
  for (; *s >= '0' && *s <= '9'; s++)
    if ((v = v * 10 + (*s - '0')) > CF_MAX_WORLD) v = CF_MAX_WORLD + 1;
  if (v >= n) {
    int w = s - digits > 40 ? 40 : (int)(s - digits);
    snprintf(why, len, "rank %.*s%s is outside the group's %d ranks", w, digits,
             s - digits > w ? "..." : "", n);
    return false;
  }
  *out = (int)v;
  *p = skip_space(s);
  return true;
}

bool cf_pairs_parse(const char *s, int n, int *target, int *source, char *why, size_t len) {
  for (int i = 0; i < n; i++)
    target[i] = source[i] = -1;
  s = skip_space(s);
  /* {} is no pair at all (XLA's parser takes it): every rank receives zeros */
  if (*s == '{' && *skip_space(s + 1) == '}') {
    s = skip_space(skip_space(s + 1) + 1);
    return *s ? (snprintf(why, len, "unexpected text after the pairs"), false) : true;
  }
  bool outer = *s == '{' && *skip_space(s + 1) == '{';
  if (outer) s = skip_space(s + 1);
  for (bool first = true; *s && *s != '}'; first = false) {
    int a, b;
    if (!first && *s++ != ',') return snprintf(why, len, "',' expected between pairs"), false;
    s = skip_space(s);
    if (*s++ != '{') return snprintf(why, len, "a pair is written {source,target}"), false;
    if (!pair_rank(&s, n, &a, why, len)) return false;
    if (*s++ != ',') return snprintf(why, len, "a pair is written {source,target}"), false;
    if (!pair_rank(&s, n, &b, why, len)) return false;
    if (*s++ != '}') return snprintf(why, len, "a pair is written {source,target}"), false;
    if (target[a] >= 0) return snprintf(why, len, "rank %d is a source twice", a), false;
    if (source[b] >= 0) return snprintf(why, len, "rank %d is a target twice", b), false;
    target[a] = b;
    source[b] = a;
    s = skip_space(s);
  }
  if (outer && *s++ != '}') return snprintf(why, len, "'}' expected at the end"), false;
  if (*skip_space(s)) return snprintf(why, len, "unexpected text after the pairs"), false;
  return true;
}

int64_t cf_node_member_dim(const cf_node *n, int j) {
  cf_ints d = cf_node_ints(n, CF_A_DIMS);
  if (d.n == n->n_in && j >= 0 && j < d.n) return d.v[j];
  return cf_node_int(n, CF_A_DIM, 0);
}

int64_t cf_node_fusion(const cf_node *n) {
  return cf_node_int(n, CF_A_FUSION,
                     n->op == CF_OP_ALLREDUCE || n->op == CF_OP_FUSEDALLREDUCE ? 1 : 0);
}
