/* cf_graph_test.h - what the reader tests that look inside a graph share:
 * loading a file (failing the test with the reader's message), finding a
 * node and an operand by name, and checking a value's type or a group's
 * ranks. */
#ifndef COLLFUSE_CF_GRAPH_TEST_H
#define COLLFUSE_CF_GRAPH_TEST_H

#include "cf_test.h"
#include "frontend/frontend.h"

#ifndef CF_SOURCE_DIR
#define CF_SOURCE_DIR "." /* the source tree; tests/CMakeLists.txt defines it */
#endif

static inline cf_graph *load(const char *path) {
  cf_graph *g = NULL;
  if (cf_graph_load(ctx, path, &g)) fail_msg("%s: %s", path, cf_context_errmsg(ctx));
  return g;
}

static inline const cf_node *node(const cf_graph *g, const char *name) {
  int i = cf_graph_find(g, name);
  if (i < 0) fail_msg("no node '%s'", name);
  return &g->nodes[i];
}

static inline const cf_node *operand(const cf_graph *g, const cf_node *n, int j) {
  assert_true(j < n->n_in);
  return &g->nodes[n->in[j].node];
}

static inline void assert_shape(const cf_value *v, cf_dtype dt, const char *shape) {
  char buf[200];
  assert_int_equal(v->dtype, dt);
  assert_string_equal(cf_shape_format(&v->shape, buf, sizeof buf), shape);
}

/* ranks: "0,1,2" */
static inline void assert_group(const cf_graph *g, const char *name, const char *ranks) {
  const cf_group *gr = cf_graph_group(g, name);
  if (!gr) fail_msg("no group '%s'", name);
  char buf[512] = "";
  size_t o = 0;
  for (int i = 0; i < gr->n_ranks * gr->n_parts && o < sizeof buf; i++) /* parts "0,1|2,3" */
    o += (size_t)snprintf(buf + o, sizeof buf - o, !i ? "%d" : i % gr->n_ranks ? ",%d" : "|%d",
                          gr->ranks[i]);
  assert_string_equal(buf, ranks);
}

/* An input a reader must refuse, and a substring of its message. */
typedef struct cf_bad_input {
  const char *text;
  const char *msg;
} cf_bad_input;

/* Parse each case as file name (the extension picks the reader); every one
 * must fail with CF_ERR_INVALID, no graph and its message. Lists them all. */
static inline void assert_refused(const char *name, const cf_bad_input *cases, size_t n) {
  int failed = 0;
  for (size_t i = 0; i < n; i++) {
    cf_graph *g = (cf_graph *)0x1;
    cf_status st = cf_graph_parse(ctx, name, cases[i].text, strlen(cases[i].text), &g);
    if (st != CF_ERR_INVALID || g || !strstr(cf_context_errmsg(ctx), cases[i].msg)) {
      print_error("case %zu: status %d, message '%s', expected '%s'\n", i, st,
                  cf_context_errmsg(ctx), cases[i].msg);
      failed++;
    }
  }
  assert_int_equal(failed, 0);
}

#endif
