/* test_passes.c - unit tests of passes/ and the public C API around them:
 * the registry and pipelines, per-pass timing, dead code elimination (pure
 * compute goes, Inputs and collectives stay), and the status/message
 * contract of the cf_graph_* entry points. */
#include "cf_test.h"

#include <stdio.h>
#include <string.h>

#include "collfuse/collfuse.h"
#include "passes/passes.h"


static const char dead_code[] =
    "<graph name='dce' world_size='2'>\n"
    "  <node name='x' op='Input' dtype='float32' shape='4'/>\n"
    "  <node name='unused_in' op='Input' dtype='float32' shape='4'/>\n"
    "  <node name='y' op='Add'><input ref='x'/><input ref='x'/></node>\n"
    "  <node name='dead1' op='Mul'><input ref='x'/><input ref='y'/></node>\n"
    "  <node name='dead2' op='Cast' dtype='float16'><input ref='dead1'/></node>\n"
    "  <node name='pre' op='Sub'><input ref='x'/><input ref='x'/></node>\n"
    "  <node name='ar_unread' op='AllReduce'><input ref='pre'/></node>\n"
    "  <node name='out' op='Output'><input ref='y'/></node>\n"
    "</graph>\n";

static cf_graph *parse(const char *text) {
  cf_graph *g;
  if (cf_graph_parse(ctx, "mem.xml", text, strlen(text), &g) != CF_OK)
    fail_msg("%s", cf_context_errmsg(ctx));
  return g;
}

static void test_registry(void **state) {
  (void)state;
  assert_non_null(cf_pass_find("verify"));
  assert_non_null(cf_pass_find("infer"));
  assert_non_null(cf_pass_find("dce"));
  assert_null(cf_pass_find("fuse-everything"));
  for (int i = 0; cf_pass_registry[i]; i++) {
    assert_non_null(cf_pass_registry[i]->run);
    assert_true(strlen(cf_pass_registry[i]->doc) > 10);
  }
  cf_graph *g = parse(dead_code);
  assert_int_equal(cf_passes_run(g, "verify,nope", NULL, NULL, NULL), CF_ERR_USAGE);
  assert_non_null(strstr(cf_context_errmsg(ctx), "unknown pass 'nope' (known: verify, infer, dce"));
  cf_pass_timing t[CF_MAX_PIPELINE];
  int n;
  assert_int_equal(cf_passes_run(g, cf_pipeline_O0, NULL, t, &n), CF_OK);
  assert_int_equal(n, 2);
  assert_string_equal(t[0].name, "verify");
  assert_true(t[1].ms >= 0);
  assert_int_equal(g->n_nodes, 8); /* -O0 removes nothing */
  cf_graph_destroy(g);
}

static void test_dce(void **state) {
  (void)state;
  cf_graph *g = parse(dead_code);
  assert_int_equal(cf_passes_run(g, "dce", NULL, NULL, NULL), CF_OK);
  assert_int_equal(g->n_nodes, 6);
  assert_int_equal(cf_graph_find(g, "dead1"), -1);
  assert_int_equal(cf_graph_find(g, "dead2"), -1);
  assert_true(cf_graph_find(g, "unused_in") >= 0); /* the graph's interface stays */
  assert_true(cf_graph_find(g, "ar_unread") >= 0); /* communication stays */
  assert_true(cf_graph_find(g, "pre") >= 0);
  /* operands were remapped: out still reads y */
  const cf_node *out = &g->nodes[cf_graph_find(g, "out")];
  assert_string_equal(g->nodes[out->in[0].node].name, "y");
  /* and the result is a valid graph */
  assert_int_equal(cf_graph_verify(g, NULL), CF_OK);
  cf_graph_destroy(g);
  /* a control predecessor of a live node runs before it, so it stays (with
   * what feeds it), and its edge is renumbered with the nodes */
  static const char ordered[] =
      "<graph name='dce' world_size='2'>\n"
      "  <node name='x' op='Input' dtype='float32' shape='4'/>\n"
      "  <node name='dead' op='Mul'><input ref='x'/><input ref='x'/></node>\n"
      "  <node name='a' op='Add'><input ref='x'/><input ref='x'/></node>\n"
      "  <node name='side' op='Sub'><input ref='a'/><input ref='x'/></node>\n"
      "  <node name='y' op='Add'><input ref='x'/><input ref='x'/><after ref='side'/></node>\n"
      "  <node name='out' op='Output'><input ref='y'/></node>\n"
      "</graph>\n";
  g = parse(ordered);
  assert_int_equal(cf_passes_run(g, "dce", NULL, NULL, NULL), CF_OK);
  assert_int_equal(g->n_nodes, 5);
  assert_int_equal(cf_graph_find(g, "dead"), -1);
  const cf_node *y = &g->nodes[cf_graph_find(g, "y")];
  assert_int_equal(y->n_ctl, 1);
  assert_string_equal(g->nodes[y->ctl[0]].name, "side");
  assert_true(cf_graph_find(g, "a") >= 0);
  assert_int_equal(cf_graph_verify(g, NULL), CF_OK);
  cf_graph_destroy(g);
}

static void test_public_api(void **state) {
  (void)state;
  cf_context *c2;
  assert_int_equal(cf_context_create(&c2), CF_OK);
  assert_string_equal(cf_context_errmsg(c2), "");
  assert_int_equal(cf_context_create(NULL), CF_ERR_USAGE);
  cf_graph *g = (cf_graph *)1;
  assert_int_equal(cf_graph_parse(c2, "mem.xml", "<graph/>", 8, NULL), CF_ERR_USAGE);
  assert_int_equal(cf_graph_parse(c2, "bad.xml", "<graph><node/></graph>", 22, &g), CF_ERR_INVALID);
  assert_null(g);
  assert_non_null(strstr(cf_context_errmsg(c2), "bad.xml:1: error:"));
  /* the other context is untouched */
  assert_string_equal(cf_context_errmsg(ctx), cf_context_errmsg(ctx));
  assert_null(strstr(cf_context_errmsg(ctx), "bad.xml"));

  g = parse(dead_code);
  assert_int_equal(cf_graph_verify(g, "tpu-v5"), CF_ERR_USAGE);
  assert_non_null(strstr(cf_context_errmsg(ctx), "unknown target 'tpu-v5' (one of: cpu, atlas-a2"));
  assert_int_equal(cf_graph_verify(g, "atlas-a2"), CF_OK);
  assert_int_equal(cf_graph_run_passes(g, NULL), CF_OK);
  assert_int_equal(cf_graph_node_count(g), 6);
  assert_int_equal(cf_graph_collective_count(g), 1);
  assert_int_equal(cf_graph_write_dot(g, "x.bmp"), CF_ERR_USAGE);
  assert_int_equal(cf_graph_write_xml(NULL, "x.xml"), CF_ERR_USAGE);
  assert_string_equal(cf_version(), CF_VERSION_STRING);
  assert_string_equal(cf_target_name(0), "cpu");
  assert_null(cf_target_name(100));
  cf_graph_destroy(g);
  cf_graph_destroy(NULL);
  cf_context_destroy(c2);
  cf_context_destroy(NULL);
}

static int logged;
static void count_log(void *user, cf_log_level lvl, const char *msg) {
  (void)user;
  if (lvl == CF_LOG_INFO && strstr(msg, "dce: removed 2 unused nodes")) logged++;
}

static void test_log_sink(void **state) {
  (void)state;
  cf_context_set_log(ctx, count_log, NULL);
  cf_graph *g = parse(dead_code);
  assert_int_equal(cf_graph_run_passes(g, "dce"), CF_OK);
  assert_int_equal(logged, 1);
  cf_context_set_log(ctx, NULL, NULL);
  cf_graph_destroy(g);
}

/* A bucket larger than a node's operand limit is cut into chunks. */
static void test_bucket_operand_limit(void **state) {
  (void)state;
  enum { N = CF_MAX_OPERANDS + 2 };
  cf_graph *g;
  assert_int_equal(cf_graph_new(ctx, "big.xml", &g), CF_OK);
  g->world_size = 2;
  char name[32];
  for (int i = 0; i < N; i++) {
    int in, ar, out;
    snprintf(name, sizeof name, "g%d", i);
    assert_int_equal(cf_graph_add_node(g, name, CF_OP_INPUT, 0, &in), CF_OK);
    assert_int_equal(cf_node_parse_attr(g, in, CF_A_DTYPE, "float32", 0), CF_OK);
    assert_int_equal(cf_node_parse_attr(g, in, CF_A_SHAPE, "2", 0), CF_OK);
    snprintf(name, sizeof name, "ar%d", i);
    assert_int_equal(cf_graph_add_node(g, name, CF_OP_ALLREDUCE, 0, &ar), CF_OK);
    assert_int_equal(cf_node_parse_attr(g, ar, CF_A_FUSION, "2", 0), CF_OK);
    assert_int_equal(cf_node_parse_attr(g, ar, CF_A_FUSION_ID, "0", 0), CF_OK);
    cf_ref r = {in, 0};
    assert_int_equal(cf_node_set_inputs(g, ar, 1, &r), CF_OK);
    snprintf(name, sizeof name, "o%d", i);
    assert_int_equal(cf_graph_add_node(g, name, CF_OP_OUTPUT, 0, &out), CF_OK);
    r.node = ar;
    assert_int_equal(cf_node_set_inputs(g, out, 1, &r), CF_OK);
  }
  assert_int_equal(cf_graph_verify(g, NULL), CF_OK);
  assert_int_equal(cf_graph_run_passes(g, "fuse-allreduce"), CF_OK);
  int fused = 0, sizes = 0;
  for (int i = 0; i < g->n_nodes; i++)
    if (g->nodes[i].op == CF_OP_FUSEDALLREDUCE) fused++, sizes += g->nodes[i].n_in;
  assert_int_equal(fused, 2);
  assert_int_equal(sizes, N);
  assert_int_equal(cf_graph_collective_count(g), 2);
  cf_graph_destroy(g);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_registry),
      cmocka_unit_test(test_dce),
      cmocka_unit_test(test_public_api),
      cmocka_unit_test(test_log_sink),
      cmocka_unit_test(test_bucket_operand_limit),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
