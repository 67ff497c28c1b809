/* xml_read.c - reader for collfuse's native XML format (docs/format.md).
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

/* What the values of the format look like, by XSD type (docs/collfuse-graph.xsd):
 * a value the schema refuses is said in these words, not in libxml2's, which
 * quote the schema's regular expressions. dtype, reduction and layout list
 * the IR's names. */
typedef struct xsd_type {
  const char *type, *what, *expected;
} xsd_type;
static const xsd_type xsd_types[] = {
    {"shape", "a shape",
     "comma-separated non-negative integers such as \"1024,512\" (\"\" for a scalar)"},
    {"dtype", "a dtype", NULL},
    {"reduction", "a reduction", NULL},
    {"layout", "a layout", NULL},
    {"init", "an init", "random, zeros, ones or iota"},
    {"ranks", "a rank list",
     "comma-separated ranks such as \"0,1,2,3\", or parts split by '|' such as \"0,1|2,3\""},
    {"name", "a name", NULL},
    {"integer", "an integer", "a whole number such as \"7\" or \"-1\""},
    {"nonNegativeInteger", "a non-negative integer", "a whole number >= 0 such as \"0\" or \"8\""},
    {"positiveInteger", "a positive integer", "a whole number >= 1 such as \"1\""},
    {"double", "a number", "a decimal number such as \"0.5\", \"-2\" or \"1e-3\""},
    {"fingerprint", "a fingerprint", "16 lowercase hexadecimal digits, as compile writes them"},
};
static bool is_xs(const xmlNode *n, const char *kind, const char *name) {
  if (n->type != XML_ELEMENT_NODE || xmlStrcmp(n->name, BAD_CAST kind) != 0) return false;
  xmlChar *v = xmlGetProp(n, BAD_CAST "name");
  bool same = v && strcmp((const char *)v, name) == 0;
  xmlFree(v);
  return same;
}

/* The xs:attribute attr below x, not inside a nested xs:element. */
static const xmlNode *find_xs_attr(const xmlNode *x, const char *attr) {
  for (const xmlNode *c = x->children; c; c = c->next) {
    if (is_xs(c, "attribute", attr)) return c;
    if (c->type != XML_ELEMENT_NODE || xmlStrcmp(c->name, BAD_CAST "element") == 0) continue;
    const xmlNode *a = find_xs_attr(c, attr);
    if (a) return a;
  }
  return NULL;
}

static const xmlNode *find_xs_elem(const xmlNode *x, const char *elem) {
  for (const xmlNode *c = x->children; c; c = c->next) {
    if (is_xs(c, "element", elem)) return c;
    const xmlNode *e = c->type == XML_ELEMENT_NODE ? find_xs_elem(c, elem) : NULL;
    if (e) return e;
  }
  return NULL;
}

/* Words for attribute attr of <elem>, by its type in the schema itself (an
 * anonymous type goes by the attribute's name); NULL for a plain string. */
static const xsd_type *attr_type(const char *elem, const char *attr) {
  xmlDocPtr d =
      xmlReadMemory((const char *)cf_graph_xsd, (int)cf_graph_xsd_len, "collfuse-graph.xsd", NULL,
                    XML_PARSE_NONET | XML_PARSE_NOERROR | XML_PARSE_NOWARNING);
  const xmlNode *root = d ? xmlDocGetRootElement(d) : NULL,
                *e = root ? find_xs_elem(root, elem) : NULL;
  const xmlNode *a = e ? find_xs_attr(e, attr) : NULL;
  xmlChar *type = a ? xmlGetProp(a, BAD_CAST "type") : NULL;
  const char *name = type ? (const char *)type : attr, *colon = strchr(name, ':');
  if (colon) name = colon + 1;
  const xsd_type *t = NULL;
  for (size_t k = 0; a && !t && k < sizeof xsd_types / sizeof xsd_types[0]; k++)
    if (strcmp(xsd_types[k].type, name) == 0) t = &xsd_types[k];
  xmlFree(type);
  xmlFreeDoc(d);
  return t;
}

/* "one of a, b or c" for the types whose values are IR names; a name's length */
static const char *expected_text(const xsd_type *t, char *buf, size_t len) {
  if (t->expected) return t->expected;
  if (strcmp(t->type, "name") == 0) { /* the schema's maxLength, which the build checks */
    snprintf(buf, len, "1 to %d characters", CF_MAX_NAME);
    return buf;
  }
  const char *names[CF_DT_COUNT + CF_RED_COUNT + 2];
  int n = 0;
  if (strcmp(t->type, "dtype") == 0)
    for (int d = 0; d + 1 < CF_DT_COUNT; d++)
      names[n++] = cf_dtype_name(cf_dtype_listed(d));
  else if (strcmp(t->type, "reduction") == 0)
    for (int r = 0; r < CF_RED_COUNT; r++)
      names[n++] = cf_reduction_name((cf_reduction)r);
  else
    for (int l = CF_LAYOUT_STACK; l <= CF_LAYOUT_CONCAT; l++)
      names[n++] = cf_layout_name((cf_layout)l);
  size_t o = (size_t)snprintf(buf, len, n > 2 ? "one of " : "");
  for (int i = 0; i < n && o < len; i++)
    o += (size_t)snprintf(buf + o, len - o, "%s%s",
                          i == 0       ? ""
                          : i == n - 1 ? " or "
                                       : ", ",
                          names[i]);
  return buf;
}

typedef struct schema_err {
  char msg[768];
  int line;
  char where[200]; /* "node 'x': ", "group 'tp': ", "graph: " or "" */
  bool set;
} schema_err;

/* The quoted name after `key '` in libxml2's message ("attribute 'shape'") */
static bool quoted_after(const char *msg, const char *key, char *out, size_t len) {
  const char *p = strstr(msg, key), *q;
  if (!p || !(q = strchr(p += strlen(key), '\'')) || (size_t)(q - p) >= len) return false;
  memcpy(out, p, (size_t)(q - p));
  out[q - p] = 0;
  return true;
}

static void on_schema_error(void *user, xmlErrorPtr e) {
  schema_err *se = user;
  if (se->set || !e) return;
  se->set = true;
  se->line = e->line;
  char raw[512];
  snprintf(raw, sizeof raw, "%s", e->message ? e->message : "schema violation");
  cf_xml_message_line(raw);
  xmlNodePtr el = e->node && ((xmlNodePtr)e->node)->type == XML_ELEMENT_NODE ? e->node : NULL;
  /* name the graph node (or group) the offending element belongs to */
  for (xmlNodePtr n = el; n && n->type == XML_ELEMENT_NODE; n = n->parent) {
    bool node = xmlStrcmp(n->name, BAD_CAST "node") == 0,
         group = xmlStrcmp(n->name, BAD_CAST "group") == 0;
    if (node || group) {
      xmlChar *nm = xmlGetProp(n, BAD_CAST "name");
      if (nm && *nm)
        snprintf(se->where, sizeof se->where, "%s '%s': ", node ? "node" : "group",
                 CF_QUOTE((char *)nm));
      xmlFree(nm);
      break;
    }
    if (n == el && xmlStrcmp(n->name, BAD_CAST "graph") == 0)
      snprintf(se->where, sizeof se->where, "graph: ");
  }
  const char *elem = el ? (const char *)el->name : "";
  const char *sub = strcmp(elem, "input") == 0    ? "<input> "
                    : strcmp(elem, "output") == 0 ? "<output> "
                                                  : "";
  char attr[64];
  bool has_attr = quoted_after(raw, "attribute '", attr, sizeof attr);
  if (!has_attr && strcmp(se->where, "graph: ") == 0) se->where[0] = 0; /* libxml2 names it */
  const xsd_type *t = has_attr && el ? attr_type(elem, attr) : NULL;
  xmlChar *val = t ? xmlGetProp(el, BAD_CAST attr) : NULL;
  char list[256];
  if (val &&
      (e->code == XML_SCHEMAV_CVC_PATTERN_VALID || e->code == XML_SCHEMAV_CVC_ENUMERATION_VALID ||
       e->code == XML_SCHEMAV_CVC_DATATYPE_VALID_1_2_1 ||
       e->code == XML_SCHEMAV_CVC_MINLENGTH_VALID || e->code == XML_SCHEMAV_CVC_MAXLENGTH_VALID))
    snprintf(se->msg, sizeof se->msg, "%sattribute '%s': '%s' is not %s: expected %s", sub, attr,
             CF_QUOTE((char *)val), t->what, expected_text(t, list, sizeof list));
  else if (has_attr && e->code == XML_SCHEMAV_CVC_COMPLEX_TYPE_3_2_1)
    snprintf(se->msg, sizeof se->msg, "attribute '%s' is not allowed on <%s>", attr, elem);
  else if (e->code == XML_SCHEMAV_CVC_COMPLEX_TYPE_4 &&
           quoted_after(raw, "The attribute '", attr, sizeof attr))
    snprintf(se->msg, sizeof se->msg, "<%s> needs attribute '%s'", elem, attr);
  else
    snprintf(se->msg, sizeof se->msg, "%s", raw);
  xmlFree(val);
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
    st = cf_error(ctx, CF_ERR_INVALID, name, se.line, "%s%s", se.where,
                  se.set ? se.msg : "schema violation");
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

/* <region id="K" op="while" owner="loop" part="body" parent="P"/>: the
 * body of a control-flow op (cf_region), declared in order (K = 1, 2, ...)
 * before the nodes in it, inside an earlier one (P < K; 0: the top level).
 * Its line is the element's, so messages point into this file. */
static cf_status read_region(cf_graph *g, xmlNodePtr x) {
  int line = cf_xml_line(x);
  char *id = prop(x, "id"), *op = prop(x, "op"), *owner = prop(x, "owner"),
       *part = prop(x, "part"), *parent = prop(x, "parent");
  cf_status st = CF_OK;
  int want = g->n_regions ? g->n_regions : 1, k;
  char *end;
  long pa = parent ? strtol(parent, &end, 10) : 0;
  if (!id || !op || !owner || !part)
    st = cf_error(g->ctx, CF_ERR_INVALID, g->file, line, "region needs id, op, owner and part");
  else if (strtol(id, &end, 10) != want || *end)
    st = cf_error(g->ctx, CF_ERR_INVALID, g->file, line, "region '%s': regions are numbered 1, 2, "
                  "... in order: expected id=\"%d\"", CF_QUOTE(id), want);
  else if (pa < 0 || pa >= want || (parent && *end))
    st = cf_error(g->ctx, CF_ERR_INVALID, g->file, line,
                  "region %d: parent=\"%s\" is not an earlier region (0 is the top level)", want,
                  CF_QUOTE(parent));
  else
    st = cf_graph_add_region(g, op, owner, part, (int)pa, line, &k);
  xmlFree(id);
  xmlFree(op);
  xmlFree(owner);
  xmlFree(part);
  xmlFree(parent);
  return st;
}

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
      st = cf_error(g->ctx, CF_ERR_INVALID, g->file, cf_xml_line(c),
                    "node '%s': unknown dtype '%s'%s", n->name, CF_QUOTE(dt),
                    cf_did_you_mean(cf_dtype_suggest(dt), why, sizeof why));
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
    char dym[96];
    st = cf_error(g->ctx, CF_ERR_INVALID, g->file, line, "node '%s': unknown op '%s'%s", nm, CF_QUOTE(opname),
                  cf_did_you_mean(cf_op_suggest(opname), dym, sizeof dym));
    goto done;
  }
  if ((st = cf_graph_add_node(g, nm, op, line, &idx))) goto done;
  for (xmlAttrPtr a = x->properties; a && !st; a = a->next) {
    const char *an = (const char *)a->name;
    if (strcmp(an, "name") == 0 || strcmp(an, "op") == 0) continue;
    if (strcmp(an, "region") == 0) { /* the body it is in: a <region> before it */
      xmlChar *v = xmlNodeListGetString(x->doc, a->children, 1);
      char *end;
      long k = v ? strtol((const char *)v, &end, 10) : -1;
      if (k <= 0 || k >= g->n_regions || *end)
        st = cf_error(g->ctx, CF_ERR_INVALID, g->file, line,
                      "node '%s': region=\"%s\" is no <region> declared before it", nm,
                      CF_QUOTE(v ? (const char *)v : ""));
      else
        g->nodes[idx].region = (int)k;
      xmlFree(v);
      continue;
    }
    cf_attr_id id = cf_attr_lookup(an);
    if (id == CF_A_COUNT) {
      st = cf_error(g->ctx, CF_ERR_INVALID, g->file, line, "node '%s': unknown attribute '%s'", nm,
                    CF_QUOTE(an));
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
      int64_t p = 0;
      if (port && !cf_parse_int(port, 0, CF_MAX_OPERANDS, &p))
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

/* <after ref="NAME"/>: control predecessors. */
static cf_status read_after(cf_graph *g, int idx, xmlNodePtr x) {
  const cf_node *n = &g->nodes[idx];
  cf_status st = CF_OK;
  for (xmlNodePtr c = x->children; c && !st; c = c->next) {
    if (!is_elem(c, "after")) continue;
    char *ref = prop(c, "ref");
    int pred = ref ? cf_graph_find(g, ref) : -1;
    if (pred < 0 || pred == idx)
      st = cf_error(g->ctx, CF_ERR_INVALID, g->file, cf_xml_line(c),
                    "node '%s': <after> %s%s%s", n->name, !ref ? "without ref" : "refers to ",
                    !ref ? "" : pred == idx ? "the node itself: " : "unknown node ", ref ? ref : "");
    else
      st = cf_node_add_control(g, idx, pred);
    xmlFree(ref);
  }
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
    if (!cf_parse_int(ws, 0, CF_MAX_WORLD, &g->world_size))
      st = cf_error(g->ctx, CF_ERR_INVALID, g->file, cf_xml_line(root),
                    "world_size='%s' must be an integer in 0..%d", CF_QUOTE(ws), CF_MAX_WORLD);
  }
  if (!st && ver && strcmp(ver, "1") != 0)
    st = cf_error(g->ctx, CF_ERR_INVALID, g->file, cf_xml_line(root),
                  "unsupported format version '%s' (this collfuse reads version 1)", CF_QUOTE(ver));
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
    else if (is_elem(c, "region"))
      st = read_region(g, c);
    else if (is_elem(c, "node"))
      st = read_node(g, c);
    else if (c->type == XML_ELEMENT_NODE)
      st = cf_error(ctx, CF_ERR_INVALID, name, cf_xml_line(c), "unexpected element <%s>",
                    (const char *)c->name);
  }
  if (st) goto fail;
  int idx = 0;
  for (xmlNodePtr c = root->children; c && !st; c = c->next)
    if (is_elem(c, "node")) {
      st = read_inputs(g, idx, c);
      if (!st) st = read_after(g, idx, c);
      idx++;
    }
  if (st) goto fail;
  cf_xml_free(doc);
  doc = NULL;
  *out = g;
  return CF_OK;
fail:
  cf_xml_free(doc);
  cf_graph_release(g);
  return st;
}
