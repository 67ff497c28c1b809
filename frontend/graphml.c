/* graphml.c - reader for networkx / yEd GraphML.
 *
 * GraphML names attributes indirectly: <key id="d3" attr.name="dtype"> and
 * then <data key="d3">. Key ids are arbitrary and differ from file to file,
 * so every key is resolved once to a "slot" per domain (a node attribute id
 * from ops.def, an edge port, a graph attribute) and data is matched through
 * that. Edges carry no order, so operand order comes from the dst_port edge
 * attribute and must be dense (0..k-1, each once). Anything we cannot map
 * onto a DAG of operands (undirected edges, nested graphs, hyperedges) is an
 * error rather than a guess. libxml2 strings are copied into a scratch arena
 * so no path has to pair them with xmlFree.
 */
#include "frontend.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <libxml/tree.h>

enum { DOM_GRAPH, DOM_NODE, DOM_EDGE, DOM_COUNT };
/* node slots are cf_attr_id plus the op; edge and graph slots are below */
enum { SLOT_OP = CF_A_COUNT, N_SLOTS };
enum { E_SRC_PORT, E_DST_PORT };
enum { G_NAME, G_WORLD_SIZE };

typedef struct gml_key {
  const char *id;
  int slot[DOM_COUNT]; /* -1: not for this domain, or an attribute we ignore */
  int line;
} gml_key;

typedef struct gml_edge {
  int dst, dst_port, line;
  cf_ref src;
} gml_edge;

/* the <data> values of one element, defaults filled in */
typedef struct gml_vals {
  const char *v[N_SLOTS];
  int line[N_SLOTS];
  bool given[N_SLOTS]; /* from the element's own <data>, not a key default */
} gml_vals;

typedef struct gml_reader {
  cf_context *ctx;
  cf_graph *g;
  const char *file;
  const xmlChar *ns; /* the root's namespace; foreign elements are skipped */
  cf_arena scratch;
  bool oom;
  gml_key *keys; /* sorted by id */
  size_t n_keys;
  const char *dflt[DOM_COUNT][N_SLOTS];
  int dflt_line[DOM_COUNT][N_SLOTS];
  bool undirected; /* edgedefault="undirected" */
} gml_reader;

static bool is_elem(const gml_reader *r, const xmlNode *n, const char *name) {
  if (n->type != XML_ELEMENT_NODE || strcmp((const char *)n->name, name) != 0) return false;
  if (!n->ns || !n->ns->href) return true;
  return r->ns && xmlStrEqual(n->ns->href, r->ns);
}

/* Copy s with surrounding whitespace removed (pretty-printed data). */
static const char *keep(gml_reader *r, const char *s) {
  while (*s == ' ' || *s == '\t' || *s == '\n' || *s == '\r') s++;
  size_t n = strlen(s);
  while (n && (s[n - 1] == ' ' || s[n - 1] == '\t' || s[n - 1] == '\n' || s[n - 1] == '\r')) n--;
  char *d = cf_arena_strndup(&r->scratch, s, n);
  if (!d) r->oom = true;
  return d;
}

static const char *prop(gml_reader *r, const xmlNode *n, const char *name) {
  xmlChar *v = xmlGetNoNsProp(n, (const xmlChar *)name);
  if (!v) return NULL;
  const char *s = keep(r, (const char *)v);
  xmlFree(v);
  return s;
}

static const char *text(gml_reader *r, const xmlNode *n) {
  xmlChar *v = xmlNodeGetContent(n);
  const char *s = keep(r, v ? (const char *)v : "");
  xmlFree(v);
  return s;
}

static cf_status fail(gml_reader *r, int line, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static cf_status fail(gml_reader *r, int line, const char *fmt, ...) {
  if (r->oom) return cf_error(r->ctx, CF_ERR_NO_MEMORY, r->file, line, "out of memory");
  va_list ap;
  va_start(ap, fmt);
  cf_verror(r->ctx, CF_ERR_INVALID, r->file, line, fmt, ap);
  va_end(ap);
  return CF_ERR_INVALID;
}

static int key_cmp(const void *a, const void *b) {
  return strcmp(((const gml_key *)a)->id, ((const gml_key *)b)->id);
}

static int slot_of(int dom, const char *name) {
  if (dom == DOM_NODE) {
    if (strcmp(name, "op") == 0) return SLOT_OP;
    cf_attr_id id = cf_attr_lookup(name);
    return id < CF_A_COUNT ? (int)id : -1; /* labels, yEd descriptions... */
  }
  if (dom == DOM_EDGE)
    return strcmp(name, "src_port") == 0   ? E_SRC_PORT
           : strcmp(name, "dst_port") == 0 ? E_DST_PORT
                                           : -1;
  return strcmp(name, "name") == 0 ? G_NAME : strcmp(name, "world_size") == 0 ? G_WORLD_SIZE : -1;
}

static cf_status read_keys(gml_reader *r, const xmlNode *root) {
  size_t n = 0;
  for (const xmlNode *c = root->children; c; c = c->next) n += is_elem(r, c, "key");
  r->keys = n ? cf_arena_array(&r->scratch, n, sizeof *r->keys) : NULL;
  if (n && !r->keys) return fail(r, 0, "out of memory");
  for (const xmlNode *c = root->children; c; c = c->next) {
    if (!is_elem(r, c, "key")) continue;
    gml_key *k = &r->keys[r->n_keys++];
    k->line = cf_xml_line(c);
    const char *dom = prop(r, c, "for"), *aname = prop(r, c, "attr.name");
    if (!(k->id = prop(r, c, "id"))) return fail(r, k->line, "<key> without an id");
    if (!dom) dom = "all"; /* the GraphML default */
    for (int d = 0; d < DOM_COUNT; d++) {
      static const char *names[DOM_COUNT] = {"graph", "node", "edge"};
      bool applies = strcmp(dom, "all") == 0 || strcmp(dom, names[d]) == 0;
      /* yfiles.type keys hold drawing data (nodegraphics, resources) */
      k->slot[d] = applies && aname && !xmlHasProp(c, (const xmlChar *)"yfiles.type")
                       ? slot_of(d, aname)
                       : -1;
    }
    for (const xmlNode *dc = c->children; dc; dc = dc->next) {
      if (!is_elem(r, dc, "default")) continue;
      const char *dv = text(r, dc);
      for (int d = 0; d < DOM_COUNT; d++)
        if (k->slot[d] >= 0) {
          r->dflt[d][k->slot[d]] = dv;
          r->dflt_line[d][k->slot[d]] = cf_xml_line(dc);
        }
    }
    if (r->oom) return fail(r, k->line, "out of memory");
  }
  if (n) qsort(r->keys, n, sizeof *r->keys, key_cmp);
  for (size_t i = 1; i < n; i++)
    if (strcmp(r->keys[i - 1].id, r->keys[i].id) == 0) {
      const gml_key *a = &r->keys[i - 1], *b = &r->keys[i];
      return fail(r, a->line > b->line ? a->line : b->line, "key id '%s' declared twice", a->id);
    }
  return CF_OK;
}

/* Gather the <data> children of elem for domain dom; what names elem in messages. */
static cf_status collect(gml_reader *r, const xmlNode *elem, int dom, const char *what,
                         gml_vals *out) {
  memset(out, 0, sizeof *out);
  for (const xmlNode *c = elem->children; c; c = c->next) {
    if (!is_elem(r, c, "data")) continue;
    int line = cf_xml_line(c);
    gml_key probe = {.id = prop(r, c, "key")};
    if (!probe.id) return fail(r, line, "%s: <data> without a key", what);
    const gml_key *k =
        r->n_keys ? bsearch(&probe, r->keys, r->n_keys, sizeof *r->keys, key_cmp) : NULL;
    if (!k) return fail(r, line, "%s: <data> refers to undeclared key '%s'", what, probe.id);
    int s = k->slot[dom];
    if (s < 0) continue;
    if (out->given[s])
      return fail(r, line, "%s: attribute given twice (lines %d and %d)", what, out->line[s], line);
    if (!(out->v[s] = text(r, c))) return fail(r, line, "out of memory");
    out->line[s] = line;
    out->given[s] = true;
  }
  for (int s = 0; s < N_SLOTS; s++)
    if (!out->v[s] && r->dflt[dom][s]) {
      out->v[s] = r->dflt[dom][s];
      out->line[s] = r->dflt_line[dom][s];
    }
  return CF_OK;
}

static cf_status no_nesting(gml_reader *r, const xmlNode *elem, const char *what) {
  for (const xmlNode *c = elem->children; c; c = c->next)
    if (is_elem(r, c, "graph"))
      return fail(r, cf_xml_line(c), "%s: nested graphs are not supported", what);
  return CF_OK;
}

static cf_status read_graph_attrs(gml_reader *r, const xmlNode *gr) {
  cf_graph *g = r->g;
  gml_vals v;
  cf_status st = collect(r, gr, DOM_GRAPH, "graph", &v);
  if (st) return st;
  if (v.v[G_NAME] && !(g->name = cf_arena_strdup(&g->arena, v.v[G_NAME])))
    return fail(r, v.line[G_NAME], "out of memory");
  if (v.v[G_WORLD_SIZE] && !cf_parse_int(v.v[G_WORLD_SIZE], 0, CF_MAX_WORLD, &g->world_size))
    return fail(r, v.line[G_WORLD_SIZE], "graph: world_size='%s' must be an integer in 0..%d",
                CF_QUOTE(v.v[G_WORLD_SIZE]), CF_MAX_WORLD);
  return CF_OK;
}

static cf_status read_node(gml_reader *r, const xmlNode *xn) {
  cf_graph *g = r->g;
  int line = cf_xml_line(xn), idx, layout;
  const char *id = prop(r, xn, "id");
  if (!id) return fail(r, line, "<node> without an id");
  char what[160];
  snprintf(what, sizeof what, "node '%.120s'", id);
  gml_vals v;
  cf_status st = no_nesting(r, xn, what);
  if (!st) st = collect(r, xn, DOM_NODE, what, &v);
  if (st) return st;
  if (!v.v[SLOT_OP])
    return fail(r, line, "%s: missing op attribute (a <data> whose key has attr.name=\"op\")",
                what);
  cf_op op = cf_op_lookup(v.v[SLOT_OP], &layout);
  if (op == CF_OP_INVALID) {
    char dym[96];
    return fail(r, v.line[SLOT_OP], "node '%s': unknown op '%s'%s", id, CF_QUOTE(v.v[SLOT_OP]),
                cf_did_you_mean(cf_op_suggest(v.v[SLOT_OP]), dym, sizeof dym));
  }
  if ((st = cf_graph_add_node(g, id, op, line, &idx))) return st;
  for (int a = 0; a < CF_A_COUNT; a++) {
    if (!v.v[a]) continue;
    /* A key default is file-wide (say reduction=sum): apply it only where the
     * op takes the attribute, so it does not break Inputs and Outputs. */
    if (!v.given[a] && !(cf_op_table[op].allowed & (1u << a))) continue;
    if ((st = cf_node_parse_attr(g, idx, (cf_attr_id)a, v.v[a], v.line[a]))) return st;
  }
  /* an alias's layout (HcomAllGather concatenates) beats a key default but
   * not the node's own layout */
  if (layout >= 0 && !v.given[CF_A_LAYOUT]) {
    cf_attr la = {.id = CF_A_LAYOUT, .v.i = layout};
    if ((st = cf_node_set_attr(g, idx, &la))) return st;
  }
  return CF_OK;
}

static cf_status read_edge(gml_reader *r, const xmlNode *xe, gml_edge *e) {
  cf_graph *g = r->g;
  int line = cf_xml_line(xe);
  const char *src = prop(r, xe, "source"), *dst = prop(r, xe, "target");
  const char *dir = prop(r, xe, "directed");
  if (!src || !dst) return fail(r, line, "<edge> needs source and target");
  char what[300];
  snprintf(what, sizeof what, "edge '%.120s' -> '%.120s'", src, dst);
  if (dir && strcmp(dir, "true") && strcmp(dir, "false"))
    return fail(r, line, "%s: directed='%s' must be true or false", what, CF_QUOTE(dir));
  if (dir ? strcmp(dir, "false") == 0 : r->undirected)
    return fail(r, line,
                "%s is undirected: operands need directed edges (edgedefault=\"directed\" or "
                "directed=\"true\")",
                what);
  gml_vals v;
  cf_status st = no_nesting(r, xe, what);
  if (!st) st = collect(r, xe, DOM_EDGE, what, &v);
  if (st) return st;
  e->line = line;
  e->src.node = cf_graph_find(g, src);
  e->dst = cf_graph_find(g, dst);
  if (e->src.node < 0) return fail(r, line, "%s: dangling source '%s' (no such node)", what, src);
  if (e->dst < 0) return fail(r, line, "%s: dangling target '%s' (no such node)", what, dst);
  int64_t sp = 0, dp = 0;
  /* no node has more outputs than CF_MAX_OPERANDS, nor more operands */
  if (v.v[E_SRC_PORT] && !cf_parse_int(v.v[E_SRC_PORT], 0, CF_MAX_OPERANDS - 1, &sp))
    return fail(r, v.line[E_SRC_PORT], "%s: src_port='%s' must be an integer in 0..%d", what,
                CF_QUOTE(v.v[E_SRC_PORT]), CF_MAX_OPERANDS - 1);
  if (v.v[E_DST_PORT] && !cf_parse_int(v.v[E_DST_PORT], 0, CF_MAX_OPERANDS - 1, &dp))
    return fail(r, v.line[E_DST_PORT], "%s: dst_port='%s' must be an integer in 0..%d", what,
                CF_QUOTE(v.v[E_DST_PORT]), CF_MAX_OPERANDS - 1);
  e->src.port = (int)sp;
  e->dst_port = (int)dp;
  return CF_OK;
}

static int edge_cmp(const void *a, const void *b) {
  const gml_edge *x = a, *y = b;
  if (x->dst != y->dst) return x->dst < y->dst ? -1 : 1;
  if (x->dst_port != y->dst_port) return x->dst_port < y->dst_port ? -1 : 1;
  return (x->line > y->line) - (x->line < y->line);
}

/* Sort edges by (target, dst_port) and hand each target its operand list. */
static cf_status set_operands(gml_reader *r, gml_edge *e, size_t n) {
  cf_graph *g = r->g;
  if (n) qsort(e, n, sizeof *e, edge_cmp);
  cf_ref *refs = n ? cf_arena_array(&r->scratch, n, sizeof *refs) : NULL;
  if (n && !refs) return fail(r, 0, "out of memory");
  for (size_t i = 0; i < n; i++) refs[i] = e[i].src;
  size_t start = 0;
  while (start < n) {
    size_t end = start;
    const cf_node *nd = &g->nodes[e[start].dst];
    for (; end < n && e[end].dst == e[start].dst; end++) {
      int want = (int)(end - start);
      if (end > start && e[end].dst_port == e[end - 1].dst_port)
        return fail(r, e[end].line, "node '%s': two edges into dst_port %d (lines %d and %d)",
                    nd->name, e[end].dst_port, e[end - 1].line, e[end].line);
      if (e[end].dst_port != want)
        return fail(r, e[end].line, "node '%s': no edge into dst_port %d (the next is %d)",
                    nd->name, want, e[end].dst_port);
    }
    cf_status st = cf_node_set_inputs(g, e[start].dst, (int)(end - start), refs + start);
    if (st) return st;
    start = end;
  }
  return CF_OK;
}

static cf_status read_doc(gml_reader *r, const xmlNode *root) {
  cf_status st;
  if (strcmp((const char *)root->name, "graphml") != 0)
    return fail(r, cf_xml_line(root), "root element is <%s>, expected <graphml>", root->name);
  r->ns = root->ns ? root->ns->href : NULL;
  if ((st = read_keys(r, root))) return st;
  const xmlNode *gr = NULL;
  for (const xmlNode *c = root->children; c; c = c->next) {
    if (!is_elem(r, c, "graph")) continue;
    if (gr)
      return fail(r, cf_xml_line(c), "a second <graph>: one graph per file is supported");
    gr = c;
  }
  if (!gr) return fail(r, cf_xml_line(root), "no <graph> element");
  const char *ed = prop(r, gr, "edgedefault");
  if (ed && strcmp(ed, "directed") && strcmp(ed, "undirected"))
    return fail(r, cf_xml_line(gr), "edgedefault='%s' must be directed or undirected",
                CF_QUOTE(ed));
  r->undirected = ed && strcmp(ed, "undirected") == 0;
  if ((st = no_nesting(r, gr, "graph")) || (st = read_graph_attrs(r, gr))) return st;

  /* nodes first: GraphML lets an edge precede the nodes it joins */
  size_t n_edges = 0;
  for (const xmlNode *c = gr->children; c; c = c->next) {
    if (is_elem(r, c, "hyperedge"))
      return fail(r, cf_xml_line(c), "hyperedges are not supported");
    if (is_elem(r, c, "node") && (st = read_node(r, c))) return st;
    n_edges += is_elem(r, c, "edge"); /* bounded by CF_MAX_XML_ELEMENTS */
  }
  gml_edge *edges = n_edges ? cf_arena_array(&r->scratch, n_edges, sizeof *edges) : NULL;
  if (n_edges && !edges) return fail(r, 0, "out of memory");
  size_t k = 0;
  for (const xmlNode *c = gr->children; c; c = c->next)
    if (is_elem(r, c, "edge") && (st = read_edge(r, c, &edges[k++]))) return st;
  return set_operands(r, edges, k);
}

cf_status cf_graphml_read(cf_context *ctx, const char *name, const char *data, size_t size,
                          cf_graph **out) {
  *out = NULL;
  struct _xmlDoc *doc = NULL;
  gml_reader r = {.ctx = ctx, .file = name};
  cf_status st = cf_xml_parse(ctx, name, data, size, &doc);
  if (st) return st;
  if ((st = cf_graph_new(ctx, name, &r.g))) goto fail;
  r.file = r.g->file;
  if ((st = read_doc(&r, xmlDocGetRootElement(doc)))) goto fail;
  cf_arena_free(&r.scratch);
  cf_xml_free(doc);
  *out = r.g;
  return CF_OK;
fail:
  cf_arena_free(&r.scratch);
  cf_xml_free(doc);
  cf_graph_release(r.g);
  return st;
}
