/* load.c - the public load and write entry points: read a file (or
 * standard input, "-") within the size limit, pick the reader by extension
 * (or by sniffing HLO's first word, a GraphDef's first field or the root
 * element), finish the graph (cf_verify_graph: structure + inference), and
 * dispatch the writers.
 */
#include "frontend.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static bool has_ext(const char *name, const char *ext) {
  size_t n = strlen(name), k = strlen(ext);
  return n >= k && strcmp(name + n - k, ext) == 0;
}

typedef cf_status (*reader_fn)(cf_context *, const char *, const char *, size_t, cf_graph **);

/* The readers, by file name ending (.graphml before .xml: both end so) */
static const cf_format formats[] = {
    {{".xml", NULL}, "native XML", cf_xml_read},
    {{".graphml", NULL}, "GraphML", cf_graphml_read},
    {{".hlo", ".hlo.txt"}, "XLA HLO text", cf_hlo_read},
    {{".mlir", NULL}, "StableHLO MLIR text", cf_stablehlo_read},
    {{".pbtxt", ".pb.txt"}, "TensorFlow/GE GraphDef text", cf_pbtxt_read},
};
enum { N_FORMATS = sizeof formats / sizeof formats[0] };

const cf_format *cf_format_at(size_t i) { return i < N_FORMATS ? &formats[i] : NULL; }

static reader_fn pick_reader(const char *name, const char *data, size_t size) {
  const cf_format *best = NULL; /* the longest ending that matches */
  size_t best_len = 0;
  for (size_t i = 0; i < N_FORMATS; i++)
    for (int k = 0; k < 2 && formats[i].ext[k]; k++)
      if (has_ext(name, formats[i].ext[k]) && strlen(formats[i].ext[k]) > best_len) {
        best = &formats[i];
        best_len = strlen(formats[i].ext[k]);
      }
  if (best) return best->read;
  /* no known extension: sniff HLO's first word, else the first element */
  size_t lim = size < 4096 ? size : 4096, i = 0;
  while (i < lim && (data[i] == ' ' || data[i] == '\t' || data[i] == '\r' || data[i] == '\n')) i++;
  if ((lim - i >= 10 && strncmp(data + i, "HloModule ", 10) == 0) ||
      (lim - i >= 6 && strncmp(data + i, "ENTRY ", 6) == 0)) /* HLO without its header */
    return cf_hlo_read;
  if ((lim - i >= 7 && strncmp(data + i, "module ", 7) == 0) ||
      (lim - i >= 5 && strncmp(data + i, "#loc", 4) == 0) ||
      (lim - i >= 10 && strncmp(data + i, "func.func ", 10) == 0))
    return cf_stablehlo_read;
  /* a GraphDef in text form: '#' comments, then node { (or versions, library) */
  while (i < lim && data[i] == '#') {
    while (i < lim && data[i] != '\n')
      i++;
    while (i < lim && (data[i] == ' ' || data[i] == '\t' || data[i] == '\r' || data[i] == '\n'))
      i++;
  }
  static const char *const fields[] = {"node", "versions", "library"};
  for (size_t k = 0; k < sizeof fields / sizeof fields[0]; k++) {
    size_t n = strlen(fields[k]), j = i + n;
    if (lim - i <= n || strncmp(data + i, fields[k], n) != 0) continue;
    while (j < lim && (data[j] == ' ' || data[j] == '\t'))
      j++;
    if (j < lim && data[j] == '{') return cf_pbtxt_read;
  }
  for (i = 0; i + 8 < lim; i++)
    if (data[i] == '<' && data[i + 1] != '?' && data[i + 1] != '!')
      return strncmp(data + i + 1, "graphml", 7) == 0 ? cf_graphml_read
             : strncmp(data + i + 1, "graph", 5) == 0 ? cf_xml_read
                                                     : NULL;
  return NULL;
}

/* The reader alone: the graph as the file says, not finished. */
static cf_status parse_raw(cf_context *ctx, const char *name, const char *data, size_t size,
                           cf_graph **out) {
  if (!out) return CF_ERR_USAGE;
  *out = NULL;
  if (!ctx || !name || (!data && size)) return CF_ERR_USAGE;
  cf_clear_error(ctx);
  /* a UTF-8 byte order mark says nothing the readers need (and hid the
   * first word from them and from the sniffing): skipped for every format */
  if (data && size >= 3 && !memcmp(data, "\xEF\xBB\xBF", 3)) {
    data += 3;
    size -= 3;
  }
  reader_fn rd = pick_reader(name, data ? data : "", size);
  if (!rd) {
    char list[128] = "";
    size_t o = 0;
    for (size_t i = 0; i < N_FORMATS && o < sizeof list; i++)
      o += (size_t)snprintf(list + o, sizeof list - o, "%s%s",
                            i == 0              ? ""
                            : i + 1 < N_FORMATS ? ", "
                                                : " or ",
                            formats[i].ext[0]);
    return cf_error(ctx, CF_ERR_INVALID, name, 0,
                    "unknown graph format (expected %s, or text that starts like one: "
                    "<graph>, <graphml>, HloModule or ENTRY, module, node {)",
                    list);
  }
  cf_status st = rd(ctx, name, data ? data : "", size, out);
  /* in the native formats Opaque is written on purpose; elsewhere it is
   * what became of every op the reader does not know */
  if (!st && rd != cf_xml_read && rd != cf_graphml_read && (st = cf_graph_note_opaque(*out))) {
    cf_graph_release(*out);
    *out = NULL;
  }
  return st;
}

static cf_status load_raw(cf_context *ctx, const char *path, cf_graph **out) {
  if (!out) return CF_ERR_USAGE;
  *out = NULL;
  if (!ctx || !path) return CF_ERR_USAGE;
  char *data;
  size_t size;
  cf_status st = cf_read_file(ctx, path, NULL, CF_MAX_FILE_BYTES, CF_IN_STDIN, &data, &size);
  if (st) return st;
  st = parse_raw(ctx, strcmp(path, "-") == 0 ? CF_STDIN_NAME : path, data, size, out);
  free(data);
  return st;
}

/* A read graph, finished; on failure destroyed. */
static cf_status finished(cf_status st, cf_graph **out) {
  if (!st && (st = cf_verify_graph(*out))) {
    cf_graph_release(*out);
    *out = NULL;
  }
  return st;
}

cf_status cf_frontend_parse(cf_context *ctx, const char *name, const char *data, size_t size,
                            cf_graph **out) {
  return finished(parse_raw(ctx, name, data, size, out), out);
}

cf_status cf_frontend_load(cf_context *ctx, const char *path, cf_graph **out) {
  return finished(load_raw(ctx, path, out), out);
}

cf_status cf_graph_load_diags(cf_context *ctx, const char *path, cf_graph **out, cf_diags *d) {
  cf_status st = load_raw(ctx, path, out);
  if (st) return st;
  st = cf_verify_collect(*out, d);
  if (!st && (*out)->fingerprint) st = cf_verify_graph(*out); /* the fingerprint's check */
  if (st && d->n == 0) cf_diags_add(d, cf_errmsg(ctx), -1, NULL, 0);
  return st;
}

cf_status cf_frontend_write_xml(const cf_graph *g, const char *path) {
  if (!g || !path) return CF_ERR_USAGE;
  cf_outfile o;
  cf_status st = cf_out_open(g->ctx, path, false, &o);
  if (st) return st;
  st = cf_xml_write(g, o.f);
  cf_status cst = cf_out_close(g->ctx, &o, st == CF_OK);
  return st ? st : cst;
}

cf_status cf_graph_write_dot_diags(const cf_graph *g, const char *path, const cf_diags *diags,
                                   const double *wait_ms) {
  if (!g || !path) return CF_ERR_USAGE;
  const char *fmt = has_ext(path, ".svg")   ? "svg"
                    : has_ext(path, ".png") ? "png"
                    : has_ext(path, ".dot") || has_ext(path, ".gv") ? "dot"
                                                                    : NULL;
  if (!fmt)
    return cf_error(g->ctx, CF_ERR_USAGE, path, 0, "unknown drawing format (use .dot, .svg or .png)");
  return cf_dot_write_waits(g, path, fmt, diags, wait_ms);
}
