/* frontend.h - readers and writers (one header for the frontend/ module).
 *
 * frontend/ is the only module that includes libxml2 and graphviz. Readers
 * turn bytes into a cf_graph, which load.c finishes with cf_verify_graph
 * (ir/: structure, topology, inference); writers never change the graph.
 */
#ifndef COLLFUSE_FRONTEND_H
#define COLLFUSE_FRONTEND_H

#include "../ir/ir.h"

#include <stdarg.h>
#include <stdio.h>

/* ---- load.c: file reading, format dispatch, public load/write API ---- */

/* One input format: the readers' table (help texts list it). */
typedef struct cf_format {
  const char *ext[2]; /* file name endings, the first the usual one; NULL if none */
  const char *name;   /* what it is, for help texts */
  cf_status (*read)(cf_context *ctx, const char *name, const char *data, size_t size,
                    cf_graph **out);
} cf_format;
/* The i-th input format, NULL past the end. */
const cf_format *cf_format_at(size_t i);

/* cf_graph_parse, cf_graph_load and cf_graph_write_xml of the public
 * header (api/ wraps these): a graph from memory or a file, in any of the
 * formats of cf_frontend_load, checked by cf_verify_graph (ir.h); the
 * native XML. */
cf_status cf_frontend_parse(cf_context *ctx, const char *name, const char *data, size_t size,
                            cf_graph **out);
cf_status cf_frontend_load(cf_context *ctx, const char *path, cf_graph **out);
cf_status cf_frontend_write_xml(const cf_graph *g, const char *path);
/* Read path like cf_frontend_load, but a graph that fails verification is
 * kept: every error goes to d with what it refers to (cf_verify_collect),
 * and the graph is returned (unverified, to be drawn) with the first
 * error's status. A file that cannot be read or parsed gives no graph. */
cf_status cf_graph_load_diags(cf_context *ctx, const char *path, cf_graph **out, cf_diags *d);
/* Draw g to path (.dot/.gv, .svg or .png) with the errors of d (NULL:
 * none) marked and the collectives filled by their measured waits (NULL:
 * none; cf_dot_write_waits); cf_graph_write_dot wraps it. */
cf_status cf_graph_write_dot_diags(const cf_graph *g, const char *path, const cf_diags *diags,
                                   const double *wait_ms);

/* ---- text_util.c: helpers of the text readers (hlo*.c, prototext.c, pbtxt.c) ---- */

/* A span is a piece of the input, not NUL-terminated. */
typedef struct cf_span {
  const char *p;
  size_t n;
} cf_span;
bool cf_span_is(cf_span s, const char *lit);
/* s as a message quotes it: its first line through cf_excerpt (escaped, cut
 * after CF_EXCERPT_CHARS characters with "..."); buf holds CF_EXCERPT_BUF
 * bytes. CF_SPAN_QUOTE gives it a buffer that lives to the end of the block. */
const char *cf_span_quote(char *buf, cf_span s);
#define CF_SPAN_QUOTE(s) cf_span_quote((char[CF_EXCERPT_BUF]){0}, (s))
/* A reader's error: "out of memory" once an allocation failed (oom), else
 * "FILE:LINE: error: MESSAGE". Returns the status recorded. */
cf_status cf_reader_verror(cf_context *ctx, bool oom, const char *file, int line, const char *fmt,
                           va_list ap);

/* ---- xml_util.c: hardened libxml2 parsing shared by the XML readers ---- */

struct _xmlDoc;
struct _xmlNode;
/* Parse data without network access, DTDs or entity expansion, with the
 * element-count limit; errors name file and line. */
cf_status cf_xml_parse(cf_context *ctx, const char *name, const char *data, size_t size,
                       struct _xmlDoc **out);
void cf_xml_free(struct _xmlDoc *doc);
/* A libxml2 message as one line: line breaks and runs of spaces become one
 * space, none at the ends (in place). */
void cf_xml_message_line(char *msg);
int cf_xml_line(const struct _xmlNode *n);
/* Split "0,1,2" into ints (malloc'd); false with why on a bad list. */
bool cf_parse_int_list(const char *s, int **out, int *n, char *why, size_t why_len);

/* ---- xml_read.c / xml_write.c: the native format ---- */

cf_status cf_xml_read(cf_context *ctx, const char *name, const char *data, size_t size,
                      cf_graph **out);
/* Write g as native XML to f. Requires inferred types. */
cf_status cf_xml_write(const cf_graph *g, FILE *f);

/* ---- graphml.c: networkx / yEd GraphML ---- */

cf_status cf_graphml_read(cf_context *ctx, const char *name, const char *data, size_t size,
                          cf_graph **out);

/* ---- hlo.c: XLA HLO text (.hlo) ---- */

/* Read an HLO module: ENTRY evaluated with calls inlined, collectives and the
 * ops the IR has imported as such, everything else as Opaque (see
 * docs/format.md). replica_groups become IR groups. */
cf_status cf_hlo_read(cf_context *ctx, const char *name, const char *data, size_t size,
                      cf_graph **out);

/* ---- stablehlo.c: StableHLO MLIR text (.mlir) ---- */

/* Read StableHLO as JAX prints it: the entry function (@main, or the only
 * public one) evaluated with calls and shard_map bodies inlined, through
 * the HLO reader's evaluator (see docs/format.md). */
cf_status cf_stablehlo_read(cf_context *ctx, const char *name, const char *data, size_t size,
                            cf_graph **out);

/* ---- pbtxt.c: TensorFlow / Ascend GE GraphDef in protobuf text (.pbtxt) ---- */

cf_status cf_pbtxt_read(cf_context *ctx, const char *name, const char *data, size_t size,
                        cf_graph **out);

/* ---- dot.c: DOT through cgraph, SVG/PNG through gvc ---- */

/* format: "dot", "svg" or "png". */
cf_status cf_dot_write(const cf_graph *g, const char *path, const char *format);
/* cf_dot_write for a graph that failed verification (cf_graph_load_diags):
 * every node an error is about gets a red border and the message as a label
 * line (and tooltip), the edges of a reported cycle are red, and errors
 * about no node go under the title. Nodes that were never inferred show no
 * types; fused ops with errors are drawn as plain nodes. */
cf_status cf_dot_write_diags(const cf_graph *g, const char *path, const char *format,
                             const cf_diags *diags);
/* ... with the collectives (a fused bucket's cluster, a plain collective)
 * filled by wait_ms[node], the measured wait on each (< 0: none; a trace's,
 * `collfuse dot --trace`): white to deep red for the largest, the wait under
 * the label. wait_ms may be NULL. */
cf_status cf_dot_write_waits(const cf_graph *g, const char *path, const char *format,
                             const cf_diags *diags, const double *wait_ms);

#endif /* COLLFUSE_FRONTEND_H */
