/* xml_read.c - reader for collfuse's native XML format (SPEC section 3).
 *
 * The document is parsed by the hardened cf_xml_parse, validated against the
 * XSD compiled into the library (docs/collfuse-graph.xsd), and then walked
 * twice: first every node is created (so operands may refer forward, as a
 * graph written by hand often does), then operands are resolved. Every error
 * names the file, the line and the node.
 */
#include "frontend.h"

#include <stdlib.h>
#include <string.h>

#include <libxml/parser.h>
#include <libxml/tree.h>
#include <libxml/xmlschemas.h>

extern const unsigned char cf_graph_xsd[];
extern const size_t cf_graph_xsd_len;

typedef struct schema_err {
  char msg[512];
  int line;
  char node[160];
  bool set;
} schema_err;

static void on_schema_error(void *user, xmlErrorPtr e) {
  schema_err *se = user;
  if (se->set || !e) return;
  se->set = true;
  se->line = e->line;
  snprintf(se->msg, sizeof se->msg, "%s", e->message ? e->message : "schema violation");
  size_t l = strlen(se->msg);
  while (l && (se->msg[l - 1] == '\n' || se->msg[l - 1] == ' ')) se->msg[--l] = 0;
  /* drop libxml2's "[facet 'pattern'] " tag: it names XSD machinery, not the
   * problem, which the rest of the message states */
  char *fa = strstr(se->msg, "[facet '"), *fe = fa ? strstr(fa, "'] ") : NULL;
  if (fe) memmove(fa, fe + 3, strlen(fe + 3) + 1);
  /* name the graph node the offending element belongs to */
  for (xmlNodePtr n = e->node; n && n->type == XML_ELEMENT_NODE; n = n->parent) {
    if (xmlStrcmp(n->name, BAD_CAST "node") == 0) {
      xmlChar *nm = xmlGetProp(n, BAD_CAST "name");
      if (nm) snprintf(se->node, sizeof se->node, "%s", (const char *)nm);
      xmlFree(nm);
      break;
    }
  }
}

static cf_status validate(cf_context *ctx, const char *name, xmlDocPtr doc) {
  cf_status st = CF_OK;
  schema_err se = {0};
  xmlSchemaParserCtxtPtr pc =
      xmlSchemaNewMemParserCtxt((const char *)cf_graph_xsd, (int)cf_graph_xsd_len);
  xmlSchemaPtr schema = pc ? xmlSchemaParse(pc) : NULL;
  xmlSchemaValidCtxtPtr vc = schema ? xmlSchemaNewValidCtxt(schema) : NULL;
  if (!vc) {
    st = cf_error(ctx, CF_ERR_NO_MEMORY, name, 0, "cannot load the graph schema");
    goto fail;
  }
  xmlSchemaSetValidStructuredErrors(vc, on_schema_error, &se);
  if (xmlSchemaValidateDoc(vc, doc) != 0) {
    if (se.node[0])
      st = cf_error(ctx, CF_ERR_INVALID, name, se.line, "node '%s': %s", se.node, se.msg);
    else
      st = cf_error(ctx, CF_ERR_INVALID, name, se.line, "%s", se.set ? se.msg : "schema violation");
  }
fail:
  xmlSchemaFreeValidCtxt(vc);
  xmlSchemaFree(schema);
  xmlSchemaFreeParserCtxt(pc);
  return st;
}

static bool is_elem(xmlNodePtr n, const char *name) {
  return n->type == XML_ELEMENT_NODE && xmlStrcmp(n->name, BAD_CAST name) == 0;
}

/* xmlGetProp copy -> arena-free temporary; caller xmlFree()s */
static char *prop(xmlNodePtr n, const char *name) { return (char *)xmlGetProp(n, BAD_CAST name); }

/* ranks="0,1,2,3", or parts "0,1|2,3" of a partitioned group. */
static cf_status read_group(cf_graph *g, xmlNodePtr x) {
  char *nm = prop(x, "name"), *rk = prop(x, "ranks");
  int *ranks = NULL, *off = NULL, n = 0, n_parts = 1;
  char why[160];
  cf_status st = CF_OK;
  int line = cf_xml_line(x);
  if (!nm || !rk) {
    st = cf_error(g->ctx, CF_ERR_INVALID, g->file, line, "group needs name and ranks");
    goto done;
  }
  for (const char *c = rk; *c; c++) n_parts += *c == '|';
  if (n_parts > CF_MAX_WORLD) {
    st = cf_error(g->ctx, CF_ERR_INVALID, g->file, line, "group '%s': more than %d parts", nm,
                  CF_MAX_WORLD);
    goto done;
  }
  off = calloc((size_t)n_parts + 1, sizeof *off);
  if (!off) {
    st = cf_error(g->ctx, CF_ERR_NO_MEMORY, g->file, line, "out of memory");
    goto done;
  }
  char *part = rk;
  for (int k = 0; k < n_parts; k++) {
    char *bar = strchr(part, '|');
    if (bar) *bar = '\0';
    int *pr = NULL, pn = 0;
    if (!cf_parse_int_list(part, &pr, &pn, why, sizeof why)) {
      st = cf_error(g->ctx, CF_ERR_INVALID, g->file, line, "group '%s': %s", nm, why);
      goto done;
    }
    if (n > CF_MAX_WORLD - pn) {
      free(pr);
      st = cf_error(g->ctx, CF_ERR_INVALID, g->file, line, "group '%s': more than %d ranks", nm,
                    CF_MAX_WORLD);
      goto done;
    }
    int *nr = pn ? realloc(ranks, (size_t)(n + pn) * sizeof *nr) : ranks;
    if (pn && !nr) {
      free(pr);
      st = cf_error(g->ctx, CF_ERR_NO_MEMORY, g->file, line, "out of memory");
      goto done;
    }
    ranks = nr;
    if (pn) memcpy(ranks + n, pr, (size_t)pn * sizeof *pr);
    free(pr);
    n += pn;
    off[k + 1] = n;
    part = bar ? bar + 1 : part + strlen(part);
  }
  st = cf_graph_add_group_parts(g, nm, ranks, off, n_parts, line);
done:
  free(ranks);
  free(off);
  xmlFree(nm);
  xmlFree(rk);
  return st;
}

static cf_status read_outputs(cf_graph *g, int idx, xmlNodePtr x) {
  cf_node *n = &g->nodes[idx];
  int count = 0;
  for (xmlNodePtr c = x->children; c; c = c->next) count += is_elem(c, "output");
  if (!count) return CF_OK;
  if (n->n_decl)
    return cf_node_error(g, n, CF_ERR_INVALID,
                         "declare outputs either with dtype/shape attributes or <output> elements");
  n->decl = cf_arena_array(&g->arena, (size_t)count, sizeof(cf_decl));
  if (!n->decl) return cf_node_error(g, n, CF_ERR_NO_MEMORY, "out of memory");
  char why[200];
  for (xmlNodePtr c = x->children; c; c = c->next) {
    if (!is_elem(c, "output")) continue;
    cf_decl *d = &n->decl[n->n_decl++];
    char *dt = prop(c, "dtype"), *sh = prop(c, "shape");
    cf_status st = CF_OK;
    if (!dt || !sh)
      st = cf_node_error(g, n, CF_ERR_INVALID, "<output> needs dtype and shape");
    else if ((d->v.dtype = cf_dtype_parse(dt)) == CF_DT_INVALID)
      st = cf_error(g->ctx, CF_ERR_INVALID, g->file, cf_xml_line(c), "node '%s': unknown dtype '%s'",
                    n->name, dt);
    else if (!cf_shape_parse(sh, &d->v.shape, why, sizeof why))
      st = cf_error(g->ctx, CF_ERR_INVALID, g->file, cf_xml_line(c), "node '%s': %s", n->name, why);
    d->has_dtype = d->has_shape = true;
    xmlFree(dt);
    xmlFree(sh);
    if (st) return st;
  }
  return CF_OK;
}

static cf_status read_node(cf_graph *g, xmlNodePtr x) {
  int line = cf_xml_line(x);
  char *nm = prop(x, "name"), *opname = prop(x, "op");
  cf_status st = CF_OK;
  int idx, layout;
  if (!nm || !*nm) {
    st = cf_error(g->ctx, CF_ERR_INVALID, g->file, line, "node without a name");
    goto done;
  }
  if (!opname) {
    st = cf_error(g->ctx, CF_ERR_INVALID, g->file, line, "node '%s': missing op", nm);
    goto done;
  }
  cf_op op = cf_op_lookup(opname, &layout);
  if (op == CF_OP_INVALID) {
    st = cf_error(g->ctx, CF_ERR_INVALID, g->file, line, "node '%s': unknown op '%s'", nm, opname);
    goto done;
  }
  if ((st = cf_graph_add_node(g, nm, op, line, &idx))) goto done;
  for (xmlAttrPtr a = x->properties; a && !st; a = a->next) {
    const char *an = (const char *)a->name;
    if (strcmp(an, "name") == 0 || strcmp(an, "op") == 0) continue;
    cf_attr_id id = cf_attr_lookup(an);
    if (id == CF_A_COUNT) {
      st = cf_error(g->ctx, CF_ERR_INVALID, g->file, line, "node '%s': unknown attribute '%s'", nm, an);
      break;
    }
    xmlChar *v = xmlNodeListGetString(x->doc, a->children, 1);
    st = cf_node_parse_attr(g, idx, id, v ? (const char *)v : "", line);
    xmlFree(v);
  }
  if (!st && layout >= 0 && !cf_node_attr(&g->nodes[idx], CF_A_LAYOUT)) {
    cf_attr la = {.id = CF_A_LAYOUT, .v.i = layout};
    st = cf_node_set_attr(g, idx, &la);
  }
  if (!st) st = read_outputs(g, idx, x);
done:
  xmlFree(nm);
  xmlFree(opname);
  return st;
}

/* Second walk: operands, now that every name is known. */
static cf_status read_inputs(cf_graph *g, int idx, xmlNodePtr x) {
  cf_node *n = &g->nodes[idx];
  int count = 0;
  for (xmlNodePtr c = x->children; c; c = c->next) count += is_elem(c, "input");
  if (!count) return CF_OK;
  if (count > CF_MAX_OPERANDS)
    return cf_node_error(g, n, CF_ERR_INVALID, "too many operands (%d, limit %d)", count,
                         CF_MAX_OPERANDS);
  cf_ref *refs = malloc((size_t)count * sizeof *refs);
  if (!refs) return cf_node_error(g, n, CF_ERR_NO_MEMORY, "out of memory");
  cf_status st = CF_OK;
  int k = 0;
  for (xmlNodePtr c = x->children; c && !st; c = c->next) {
    if (!is_elem(c, "input")) continue;
    int line = cf_xml_line(c);
    char *ref = prop(c, "ref"), *port = prop(c, "port");
    if (!ref) {
      st = cf_error(g->ctx, CF_ERR_INVALID, g->file, line, "node '%s': <input> without ref", n->name);
    } else if ((refs[k].node = cf_graph_find(g, ref)) < 0) {
      st = cf_error(g->ctx, CF_ERR_INVALID, g->file, line,
                    "node '%s': input %d refers to unknown node '%s'", n->name, k, ref);
    } else {
      char *end = NULL;
      long p = port ? strtol(port, &end, 10) : 0;
      if (port && (end == port || *end || p < 0 || p > CF_MAX_OPERANDS))
        st = cf_error(g->ctx, CF_ERR_INVALID, g->file, line, "node '%s': bad port '%s'", n->name,
                      port);
      refs[k++].port = (int)p;
    }
    xmlFree(ref);
    xmlFree(port);
  }
  if (!st) st = cf_node_set_inputs(g, idx, k, refs);
  free(refs);
  return st;
}

static cf_status graph_attrs(cf_graph *g, xmlNodePtr root) {
  char *nm = prop(root, "name"), *ws = prop(root, "world_size"), *ver = prop(root, "version");
  char *fp = prop(root, "fingerprint");
  cf_status st = CF_OK;
  if (fp && !(g->fingerprint = cf_arena_strdup(&g->arena, fp)))
    st = cf_error(g->ctx, CF_ERR_NO_MEMORY, g->file, 0, "out of memory");
  xmlFree(fp);
  if (nm && !(g->name = cf_arena_strdup(&g->arena, nm)))
    st = cf_error(g->ctx, CF_ERR_NO_MEMORY, g->file, 0, "out of memory");
  if (!st && ws) {
    char *end;
    long long v = strtoll(ws, &end, 10);
    if (end == ws || *end || v < 0 || v > CF_MAX_WORLD)
      st = cf_error(g->ctx, CF_ERR_INVALID, g->file, cf_xml_line(root),
                    "world_size='%s' must be an integer in 0..%d", ws, CF_MAX_WORLD);
    g->world_size = v;
  }
  if (!st && ver && strcmp(ver, "1") != 0)
    st = cf_error(g->ctx, CF_ERR_INVALID, g->file, cf_xml_line(root),
                  "unsupported format version '%s' (this collfuse reads version 1)", ver);
  xmlFree(nm);
  xmlFree(ws);
  xmlFree(ver);
  return st;
}

cf_status cf_xml_read(cf_context *ctx, const char *name, const char *data, size_t size,
                      cf_graph **out) {
  xmlDocPtr doc = NULL;
  cf_graph *g = NULL;
  *out = NULL;
  cf_status st = cf_xml_parse(ctx, name, data, size, &doc);
  if (st) return st;
  xmlNodePtr root = xmlDocGetRootElement(doc);
  if (!is_elem(root, "graph")) {
    st = cf_error(ctx, CF_ERR_INVALID, name, cf_xml_line(root),
                  "root element is <%s>, expected <graph>%s", (const char *)root->name,
                  xmlStrcmp(root->name, BAD_CAST "graphml") == 0 ? " (name GraphML files .graphml)" : "");
    goto fail;
  }
  if ((st = validate(ctx, name, doc))) goto fail;
  if ((st = cf_graph_new(ctx, name, &g))) goto fail;
  if ((st = graph_attrs(g, root))) goto fail;
  for (xmlNodePtr c = root->children; c && !st; c = c->next) {
    if (is_elem(c, "group"))
      st = read_group(g, c);
    else if (is_elem(c, "node"))
      st = read_node(g, c);
    else if (c->type == XML_ELEMENT_NODE)
      st = cf_error(ctx, CF_ERR_INVALID, name, cf_xml_line(c), "unexpected element <%s>",
                    (const char *)c->name);
  }
  if (st) goto fail;
  int idx = 0;
  for (xmlNodePtr c = root->children; c && !st; c = c->next)
    if (is_elem(c, "node")) st = read_inputs(g, idx++, c);
  if (st) goto fail;
  cf_xml_free(doc);
  doc = NULL;
  *out = g;
  return CF_OK;
fail:
  cf_xml_free(doc);
  cf_graph_destroy(g);
  return st;
}
