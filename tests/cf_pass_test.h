/* cf_pass_test.h - what the tests of the fusion passes share
 * (test_fusion.c, test_fuse_matmul_collective.c): a graph parsed from text,
 * passes run with their --explain lines collected, the one explain line a
 * test is about, and op counts. Nodes are found with cf_graph_test.h's
 * node(). */
#ifndef COLLFUSE_CF_PASS_TEST_H
#define COLLFUSE_CF_PASS_TEST_H

#include "cf_graph_test.h"
#include "ir/ir.h"
#include "passes/passes.h"

#include <stdbool.h>

/* --explain lines, in the order the passes gave them */
typedef struct lines {
  char **v;
  int n;
} lines;

static inline void collect(void *user, const char *line) {
  lines *l = user;
  l->v = realloc(l->v, (size_t)(l->n + 1) * sizeof *l->v);
  if (!l->v) fail_msg("out of memory");
  l->v[l->n++] = strdup(line);
}

static inline void lines_free(lines *l) {
  for (int i = 0; i < l->n; i++)
    free(l->v[i]);
  free(l->v);
  *l = (lines){0};
}

static inline void lines_dump(const lines *l) {
  for (int i = 0; i < l->n; i++)
    print_message("  explain: %s\n", l->v[i]);
}

/* Exactly one line of l is one that match(line, key) accepts, and it holds
 * want; otherwise the test fails, listing every line. */
static inline void expect_one_line(const lines *l, bool (*match)(const char *line, const char *key),
                                   const char *key, const char *want) {
  int hits = 0;
  const char *line = NULL;
  for (int i = 0; i < l->n; i++)
    if (match(l->v[i], key)) hits++, line = l->v[i];
  if (hits != 1) {
    lines_dump(l);
    fail_msg("%d explain lines match \"%s\", want 1", hits, key);
  }
  if (!strstr(line, want)) fail_msg("explain line '%s' lacks '%s'", line, want);
}

/* text as a native XML graph ("mem.xml"); a parse error fails the test */
static inline cf_graph *parse(const char *text) {
  cf_graph *g = NULL;
  if (cf_graph_parse(ctx, "mem.xml", text, strlen(text), &g) != CF_OK)
    fail_msg("parse: %s", cf_context_errmsg(ctx));
  return g;
}

/* Run passes (a comma list) on g with the --split spec and --target (NULL:
 * none), collecting --explain lines into ex (NULL: none). */
static inline cf_status run_passes(cf_graph *g, const char *passes, const char *split,
                                   const char *target, lines *ex) {
  cf_pass_options o = {
      .split = split, .target = target, .explain = ex ? collect : NULL, .explain_user = ex};
  return cf_passes_run(g, passes, &o, NULL, NULL);
}

static inline int count_op(const cf_graph *g, cf_op op) {
  int n = 0;
  for (int i = 0; i < g->n_nodes; i++)
    n += g->nodes[i].op == op;
  return n;
}

#endif
