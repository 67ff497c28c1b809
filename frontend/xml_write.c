/* xml_write.c - writer for the native XML format.
 *
 * Nodes are written in the graph's order with their attributes in ops.def
 * order, and every single-output node carries its inferred dtype and shape,
 * so a written graph documents itself and reading it back re-checks every
 * type (read -> write -> read gives the same graph).
 */
#include "frontend.h"

#include <stdlib.h>
#include <string.h>

static void put_escaped(FILE *f, const char *s) {
  for (; *s; s++) {
    switch (*s) {
    case '&': fputs("&amp;", f); break;
    case '<': fputs("&lt;", f); break;
    case '>': fputs("&gt;", f); break;
    case '"': fputs("&quot;", f); break;
    case '\n': fputs("&#10;", f); break;
    case '\t': fputs("&#9;", f); break;
    case '\r': fputs("&#13;", f); break;
    default: fputc(*s, f);
    }
  }
}

static void put_attr(FILE *f, const char *name, const char *value) {
  fprintf(f, " %s=\"", name);
  put_escaped(f, value);
  fputc('"', f);
}

/* false when out of memory */
static bool put_value(FILE *f, const cf_attr *a) {
  char buf[256], *text = buf;
  size_t need = cf_attr_text(a, buf, sizeof buf);
  if (need >= sizeof buf) { /* a long string or list */
    if (!(text = malloc(need + 1))) return false;
    cf_attr_text(a, text, need + 1);
  }
  put_attr(f, cf_attr_table[a->id].name, text);
  if (text != buf) free(text);
  return true;
}

cf_status cf_xml_write(const cf_graph *g, FILE *f) {
  char buf[256];
  fputs("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<graph", f);
  put_attr(f, "name", g->name);
  fprintf(f, " version=\"1\"");
  if (g->world_size > 0) fprintf(f, " world_size=\"%lld\"", (long long)g->world_size);
  if (g->fingerprint) fprintf(f, " fingerprint=\"%s\"", g->fingerprint);
  fputs(">\n", f);
  for (int i = 0; i < g->n_groups; i++) {
    const cf_group *gr = &g->groups[i];
    fputs("  <group", f);
    put_attr(f, "name", gr->name);
    fputs(" ranks=\"", f);
    for (int j = 0; j < gr->n_ranks * gr->n_parts; j++)
      fprintf(f, !j ? "%d" : j % gr->n_ranks ? ",%d" : "|%d", gr->ranks[j]);
    fputs("\"/>\n", f);
  }
  for (int k = 1; k < g->n_regions; k++) { /* bodies of control-flow ops (cf_region) */
    const cf_region *rg = &g->regions[k];
    fprintf(f, "  <region id=\"%d\"", k);
    put_attr(f, "op", rg->op);
    put_attr(f, "owner", rg->owner);
    put_attr(f, "part", rg->part);
    fprintf(f, " parent=\"%d\"/>\n", rg->parent);
  }
  for (int i = 0; i < g->n_nodes; i++) {
    const cf_node *n = &g->nodes[i];
    const cf_op_info *oi = &cf_op_table[n->op];
    fputs("  <node", f);
    put_attr(f, "name", n->name);
    put_attr(f, "op", oi->name);
    if (n->region) fprintf(f, " region=\"%d\"", n->region);
    bool typed = (oi->allowed & (1u << CF_A_DTYPE)) && n->n_out == 1 && n->out;
    bool multi_decl = n->op == CF_OP_OPAQUE && n->n_decl > 1;
    if (typed && !multi_decl) {
      put_attr(f, "dtype", cf_dtype_name(n->out[0].dtype));
      put_attr(f, "shape", cf_shape_format(&n->out[0].shape, buf, sizeof buf));
    } else if (n->n_decl && !multi_decl) { /* an Output, or a graph not inferred yet */
      if (n->decl[0].has_dtype) put_attr(f, "dtype", cf_dtype_name(n->decl[0].v.dtype));
      if (n->decl[0].has_shape)
        put_attr(f, "shape", cf_shape_format(&n->decl[0].v.shape, buf, sizeof buf));
    }
    for (int id = 0; id < CF_A_COUNT; id++) {
      if (id == CF_A_DTYPE || id == CF_A_SHAPE) continue;
      const cf_attr *a = cf_node_attr(n, (cf_attr_id)id);
      if (a && !put_value(f, a))
        return cf_error(g->ctx, CF_ERR_NO_MEMORY, g->file, 0, "out of memory");
    }
    if (!n->n_in && !n->n_ctl && !multi_decl) {
      fputs("/>\n", f);
      continue;
    }
    fputs(">\n", f);
    for (int j = 0; j < n->n_in; j++) {
      fputs("    <input", f);
      put_attr(f, "ref", g->nodes[n->in[j].node].name);
      if (n->in[j].port) fprintf(f, " port=\"%d\"", n->in[j].port);
      fputs("/>\n", f);
    }
    for (int j = 0; j < n->n_ctl; j++) {
      fputs("    <after", f);
      put_attr(f, "ref", g->nodes[n->ctl[j]].name);
      fputs("/>\n", f);
    }
    for (int j = 0; multi_decl && j < n->n_decl; j++) {
      fprintf(f, "    <output dtype=\"%s\"", cf_dtype_name(n->decl[j].v.dtype));
      put_attr(f, "shape", cf_shape_format(&n->decl[j].v.shape, buf, sizeof buf));
      fputs("/>\n", f);
    }
    fputs("  </node>\n", f);
  }
  fputs("</graph>\n", f);
  if (ferror(f)) return cf_error(g->ctx, CF_ERR_IO, g->file, 0, "write error");
  return CF_OK;
}
