/* test_graphml.c - unit tests for the GraphML reader (frontend/graphml.c).
 *
 * Register in tests/CMakeLists.txt as:
 *   add_executable(test_graphml test_graphml.c)
 *   target_link_libraries(test_graphml PRIVATE collfuse_static cmocka)
 *   add_test(NAME test_graphml COMMAND test_graphml)
 *   set_tests_properties(test_graphml PROPERTIES LABELS unit)
 * with CF_SOURCE_DIR defined as the absolute path of the source tree.
 *
 * The real networkx exports in examples/graphml must load and verify; in-memory documents cover
 * what those files do not: key ids that do not follow attr.name, operand
 * order from dst_port, src_port into a multi-output node, op aliases, and
 * the error messages for broken input.
 */
#include "frontend/frontend.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#ifndef CF_SOURCE_DIR
#define CF_SOURCE_DIR "."
#endif

/* networkx-style prologue: key ids deliberately unrelated to attr.name */
#define HEAD                                                                               \
  "<?xml version='1.0' encoding='utf-8'?>\n"                                               \
  "<graphml xmlns=\"http://graphml.graphdrawing.org/xmlns\">\n"                            \
  "<key id=\"k_ws\" for=\"graph\" attr.name=\"world_size\" attr.type=\"long\"/>\n"         \
  "<key id=\"d0\" for=\"node\" attr.name=\"shape\" attr.type=\"string\"/>\n"               \
  "<key id=\"zz\" for=\"node\" attr.name=\"op\" attr.type=\"string\"/>\n"                  \
  "<key id=\"a\" for=\"node\" attr.name=\"dtype\" attr.type=\"string\"/>\n"                \
  "<key id=\"m\" for=\"node\" attr.name=\"members\" attr.type=\"string\"/>\n"              \
  "<key id=\"lay\" for=\"node\" attr.name=\"layout\" attr.type=\"string\"/>\n"             \
  "<key id=\"sp\" for=\"edge\" attr.name=\"src_port\" attr.type=\"long\"/>\n"              \
  "<key id=\"dp\" for=\"edge\" attr.name=\"dst_port\" attr.type=\"long\"/>\n"
#define GRAPH(ws) "<graph edgedefault=\"directed\"><data key=\"k_ws\">" ws "</data>\n"
#define TAIL "</graph></graphml>\n"
#define INPUT(id, dt, sh)                                                                  \
  "<node id=\"" id "\"><data key=\"zz\">Input</data><data key=\"a\">" dt                    \
  "</data><data key=\"d0\">" sh "</data></node>\n"
#define NODE(id, op) "<node id=\"" id "\"><data key=\"zz\">" op "</data></node>\n"
#define EDGE(s, t, sp, dp)                                                                 \
  "<edge source=\"" s "\" target=\"" t "\"><data key=\"sp\">" sp                            \
  "</data><data key=\"dp\">" dp "</data></edge>\n"

typedef struct fixture {
  cf_context *ctx;
  cf_graph *g;
} fixture;

static int setup(void **state) {
  fixture *f = calloc(1, sizeof *f);
  if (!f || cf_context_create(&f->ctx) != CF_OK) return -1;
  *state = f;
  return 0;
}

static int teardown(void **state) {
  fixture *f = *state;
  cf_graph_destroy(f->g);
  cf_context_destroy(f->ctx);
  free(f);
  return 0;
}

static cf_status parse(fixture *f, const char *doc) {
  cf_graph_destroy(f->g);
  f->g = (cf_graph *)0x1; /* must be overwritten, NULL on failure */
  return cf_graph_parse(f->ctx, "t.graphml", doc, strlen(doc), &f->g);
}

static const cf_node *node(const fixture *f, const char *name) {
  int i = cf_graph_find(f->g, name);
  assert_true(i >= 0);
  return &f->g->nodes[i];
}

static void expect_error(void **state, const char *doc, const char *substr) {
  fixture *f = *state;
  assert_int_equal(parse(f, doc), CF_ERR_INVALID);
  assert_null(f->g);
  const char *msg = cf_context_errmsg(f->ctx);
  if (!strstr(msg, substr)) fail_msg("message '%s' lacks '%s'", msg, substr);
  assert_non_null(strstr(msg, "t.graphml:")); /* file:line prefix */
}

static void load_example(void **state, const char *file, int nodes, int allreduce) {
  fixture *f = *state;
  char path[1024];
  snprintf(path, sizeof path, "%s/examples/graphml/%s", CF_SOURCE_DIR, file);
  cf_status st = cf_graph_load(f->ctx, path, &f->g);
  if (st) fail_msg("%s: %s", path, cf_context_errmsg(f->ctx));
  cf_graph_stats s;
  cf_graph_stats_compute(f->g, &s);
  assert_int_equal(s.nodes, nodes);
  assert_int_equal(s.by_op[CF_OP_ALLREDUCE], allreduce);
  assert_int_equal(s.by_op[CF_OP_INPUT], allreduce);
  assert_int_equal(s.by_op[CF_OP_OUTPUT], allreduce);
  assert_int_equal(f->g->world_size, 8);
  assert_true(s.comm_bytes > 0);
}

static void test_resnet50(void **state) {
  load_example(state, "resnet50.dp8.graphml", 483, 161);
  assert_string_equal(((fixture *)*state)->g->name, "resnet50_dp8");
}

static void test_bert(void **state) {
  load_example(state, "bert-base-uncased.dp8.graphml", 606, 202);
  assert_string_equal(((fixture *)*state)->g->name, "bert-base-uncased_dp8");
}

/* Key ids are found through attr.name; yEd drawing keys and unknown
 * attributes are skipped, key defaults apply, data is whitespace-trimmed. */
static void test_key_ids_shuffled(void **state) {
  fixture *f = *state;
  const char *doc =
      "<?xml version='1.0'?>\n"
      "<graphml xmlns=\"http://graphml.graphdrawing.org/xmlns\" "
      "xmlns:y=\"http://www.yworks.com/xml/graphml\">\n"
      "<key id=\"d7\" for=\"node\" yfiles.type=\"nodegraphics\"/>\n"
      "<key id=\"d1\" for=\"node\" attr.name=\"label\" attr.type=\"string\"/>\n"
      "<key id=\"d2\" for=\"node\" attr.name=\"dtype\" attr.type=\"string\">"
      "<default>float32</default></key>\n"
      "<key id=\"d3\" for=\"node\" attr.name=\"op\" attr.type=\"string\"/>\n"
      "<key id=\"d0\" for=\"node\" attr.name=\"shape\" attr.type=\"string\"/>\n"
      "<key id=\"g9\" for=\"graph\" attr.name=\"name\" attr.type=\"string\"/>\n"
      "<key id=\"w\" attr.name=\"world_size\"/>\n" /* for="all" by default */
      "<key id=\"r\" for=\"node\" attr.name=\"reduction\"><default>max</default></key>\n"
      "<graph id=\"G\" edgedefault=\"directed\"><data key=\"g9\">shuffled</data>"
      "<data key=\"w\">2</data>\n"
      "<edge source=\"x\" target=\"ar\"/>\n" /* edges may precede their nodes */
      "<node id=\"x\"><data key=\"d0\"> 16,4 </data>\n"
      "  <data key=\"d3\">\n    Input\n  </data><data key=\"d1\">grad</data>\n"
      "  <data key=\"d7\"><y:ShapeNode><y:NodeLabel>x</y:NodeLabel></y:ShapeNode></data>"
      "</node>\n"
      "<node id=\"ar\"><data key=\"d3\">all_reduce</data></node>\n"
      "<node id=\"y\"><data key=\"d3\">Output</data></node>\n"
      "<edge source=\"ar\" target=\"y\"/>\n" TAIL;
  cf_status st = parse(f, doc);
  if (st) fail_msg("%s", cf_context_errmsg(f->ctx));
  assert_string_equal(f->g->name, "shuffled");
  const cf_node *x = node(f, "x"), *ar = node(f, "ar");
  assert_int_equal(x->op, CF_OP_INPUT);
  assert_int_equal(x->out[0].dtype, CF_DT_FLOAT32);
  assert_int_equal(x->out[0].shape.rank, 2);
  assert_int_equal(x->out[0].shape.dims[0], 16);
  assert_int_equal(ar->op, CF_OP_ALLREDUCE);
  assert_int_equal(cf_node_reduction(ar), CF_RED_MAX);
  assert_null(cf_node_attr(x, CF_A_REDUCTION)); /* default only where allowed */
  assert_int_equal(ar->out[0].shape.dims[1], 4);
  assert_int_equal(f->g->world_size, 2);
}

/* Edges listed in reverse still give operands in dst_port order. */
static void test_dst_port_order(void **state) {
  fixture *f = *state;
  const char *doc = HEAD GRAPH("0") INPUT("a", "float32", "4,8") INPUT("b", "float32", "8,2")
      NODE("mm", "MatMul") NODE("out", "Output") EDGE("mm", "out", "0", "0")
          EDGE("b", "mm", "0", "1") EDGE("a", "mm", "0", "0") TAIL;
  cf_status st = parse(f, doc);
  if (st) fail_msg("%s", cf_context_errmsg(f->ctx));
  const cf_node *mm = node(f, "mm");
  assert_int_equal(mm->n_in, 2);
  assert_string_equal(f->g->nodes[mm->in[0].node].name, "a");
  assert_string_equal(f->g->nodes[mm->in[1].node].name, "b");
  assert_int_equal(mm->out[0].shape.dims[0], 4);
  assert_int_equal(mm->out[0].shape.dims[1], 2);
}

/* src_port picks an output of a multi-output (fused) node. */
static void test_src_port(void **state) {
  fixture *f = *state;
  const char *doc = HEAD GRAPH("2") INPUT("a", "float32", "4") INPUT("b", "float32", "8")
      "<node id=\"far\"><data key=\"zz\">FusedAllReduce</data>"
      "<data key=\"m\">a,b</data></node>\n" NODE("o0", "Output") NODE("o1", "Output")
          EDGE("b", "far", "0", "1") EDGE("a", "far", "0", "0") EDGE("far", "o0", "1", "0")
              EDGE("far", "o1", "0", "0") TAIL;
  cf_status st = parse(f, doc);
  if (st) fail_msg("%s", cf_context_errmsg(f->ctx));
  const cf_node *far = node(f, "far"), *o0 = node(f, "o0"), *o1 = node(f, "o1");
  assert_int_equal(far->n_out, 2);
  assert_int_equal(o0->in[0].port, 1);
  assert_int_equal(o1->in[0].port, 0);
  /* Output is a sink: check what each one consumes */
  assert_int_equal(far->out[o0->in[0].port].shape.dims[0], 8);
  assert_int_equal(far->out[o1->in[0].port].shape.dims[0], 4);
}

/* HcomAllGather concatenates unless the node says otherwise. */
static void test_hcom_allgather_alias(void **state) {
  fixture *f = *state;
  const char *doc = HEAD GRAPH("4") INPUT("x", "float16", "2,3") NODE("ag", "HcomAllGather")
      "<node id=\"st\"><data key=\"zz\">HcomAllGather</data><data key=\"lay\">stack</data>"
      "</node>\n" NODE("o", "Output") NODE("p", "Output") EDGE("x", "ag", "0", "0")
          EDGE("x", "st", "0", "0") EDGE("ag", "o", "0", "0") EDGE("st", "p", "0", "0") TAIL;
  cf_status st = parse(f, doc);
  if (st) fail_msg("%s", cf_context_errmsg(f->ctx));
  const cf_node *ag = node(f, "ag"), *sn = node(f, "st");
  assert_int_equal(ag->op, CF_OP_ALLGATHER);
  assert_int_equal(cf_node_layout(ag), CF_LAYOUT_CONCAT);
  assert_int_equal(ag->out[0].shape.rank, 2);
  assert_int_equal(ag->out[0].shape.dims[0], 8);
  assert_int_equal(cf_node_layout(sn), CF_LAYOUT_STACK);
  assert_int_equal(sn->out[0].shape.rank, 3);
  assert_int_equal(sn->out[0].shape.dims[0], 4);
}

/* AllToAll (array and tuple form) and CollectivePermute with their
 * attributes as GraphML keys. */
static void test_alltoall_permute(void **state) {
  fixture *f = *state;
  const char *doc =
      "<?xml version='1.0' encoding='utf-8'?>\n"
      "<graphml xmlns=\"http://graphml.graphdrawing.org/xmlns\">\n"
      "<key id=\"w\" for=\"graph\" attr.name=\"world_size\" attr.type=\"long\"/>\n"
      "<key id=\"o\" for=\"node\" attr.name=\"op\" attr.type=\"string\"/>\n"
      "<key id=\"t\" for=\"node\" attr.name=\"dtype\" attr.type=\"string\"/>\n"
      "<key id=\"s\" for=\"node\" attr.name=\"shape\" attr.type=\"string\"/>\n"
      "<key id=\"sd\" for=\"node\" attr.name=\"split_dimension\" attr.type=\"long\"/>\n"
      "<key id=\"cd\" for=\"node\" attr.name=\"concat_dimension\" attr.type=\"long\"/>\n"
      "<key id=\"pp\" for=\"node\" attr.name=\"source_target_pairs\" attr.type=\"string\"/>\n"
      "<key id=\"fu\" for=\"node\" attr.name=\"fusion\" attr.type=\"long\"/>\n"
      "<key id=\"sp\" for=\"edge\" attr.name=\"src_port\" attr.type=\"long\"/>\n"
      "<key id=\"dp\" for=\"edge\" attr.name=\"dst_port\" attr.type=\"long\"/>\n"
      "<graph edgedefault=\"directed\"><data key=\"w\">2</data>\n"
      "<node id=\"x\"><data key=\"o\">Input</data><data key=\"t\">float16</data>"
      "<data key=\"s\">4,6</data></node>\n"
      "<node id=\"a\"><data key=\"o\">AllToAll</data><data key=\"sd\">0</data>"
      "<data key=\"cd\">1</data><data key=\"fu\">1</data></node>\n"
      "<node id=\"tu\"><data key=\"o\">AllToAll</data></node>\n"
      "<node id=\"p\"><data key=\"o\">CollectivePermute</data>"
      "<data key=\"pp\">{0,1},{1,0}</data></node>\n"
      "<node id=\"y\"><data key=\"o\">Output</data></node>\n"
      "<node id=\"z\"><data key=\"o\">Output</data></node>\n" EDGE("x", "a", "0", "0")
          EDGE("x", "tu", "0", "0") EDGE("x", "tu", "0", "1") EDGE("a", "p", "0", "0")
              EDGE("p", "y", "0", "0") EDGE("tu", "z", "1", "0") TAIL;
  cf_status st = parse(f, doc);
  if (st) fail_msg("%s", cf_context_errmsg(f->ctx));
  const cf_node *a = node(f, "a"), *tu = node(f, "tu"), *p = node(f, "p");
  assert_int_equal(a->op, CF_OP_ALLTOALL);
  assert_int_equal(a->out[0].shape.dims[0], 2);
  assert_int_equal(a->out[0].shape.dims[1], 12);
  /* GE's default fusion=0, and a fusion attribute asks for buckets */
  assert_int_equal(cf_node_fusion(a), 1);
  assert_int_equal(cf_node_fusion(tu), 0);
  assert_int_equal(tu->n_out, 2);
  assert_int_equal(node(f, "z")->in[0].port, 1);
  assert_int_equal(p->op, CF_OP_COLLECTIVEPERMUTE);
  assert_string_equal(cf_node_str(p, CF_A_SOURCE_TARGET_PAIRS, ""), "{0,1},{1,0}");
}

static void test_err_unknown_op(void **state) {
  expect_error(state, HEAD GRAPH("8") NODE("n1", "Foo") TAIL,
               "t.graphml:12: error: node 'n1': unknown op 'Foo'");
}

static void test_err_dangling(void **state) {
  expect_error(state, HEAD GRAPH("8") INPUT("a", "float32", "4") NODE("o", "Output")
                   EDGE("a", "zz", "0", "0") TAIL,
               "dangling target 'zz'");
}

static void test_err_duplicate_dst_port(void **state) {
  expect_error(state, HEAD GRAPH("8") INPUT("a", "float32", "4") INPUT("b", "float32", "4")
                   NODE("s", "Add") EDGE("a", "s", "0", "0") EDGE("b", "s", "0", "0") TAIL,
               "node 's': two edges into dst_port 0");
}

static void test_err_dst_port_gap(void **state) {
  expect_error(state, HEAD GRAPH("8") INPUT("a", "float32", "4") INPUT("b", "float32", "4")
                   NODE("s", "Add") EDGE("a", "s", "0", "0") EDGE("b", "s", "0", "2") TAIL,
               "node 's': no edge into dst_port 1");
}

static void test_err_missing_op(void **state) {
  expect_error(state,
               HEAD GRAPH("8") "<node id=\"q\"><data key=\"a\">float32</data></node>\n" TAIL,
               "node 'q': missing op");
}

static void test_err_bad_shape(void **state) {
  expect_error(state, HEAD GRAPH("8") INPUT("a", "float32", "3,x") TAIL, "bad shape '3,x'");
}

static void test_err_world_size(void **state) {
  expect_error(state, HEAD GRAPH("-8") TAIL, "world_size='-8'");
}

static void test_err_undirected(void **state) {
  expect_error(state,
               "<graphml><key id=\"o\" for=\"node\" attr.name=\"op\"/>"
               "<graph edgedefault=\"undirected\">"
               "<node id=\"a\"><data key=\"o\">Input</data></node>"
               "<node id=\"b\"><data key=\"o\">Output</data></node>"
               "<edge source=\"a\" target=\"b\"/></graph></graphml>",
               "undirected");
}

static void test_err_nested_and_hyperedge(void **state) {
  expect_error(state,
               HEAD GRAPH("8") "<node id=\"n\"><graph edgedefault=\"directed\"/></node>" TAIL,
               "nested graphs");
  expect_error(state, HEAD GRAPH("8") "<hyperedge/>" TAIL, "hyperedges");
}

static void test_err_hostile(void **state) {
  expect_error(state, "<graphml><graph>", "malformed");
  expect_error(state, "<graph/>", "expected <graphml>");
  expect_error(state, "<graphml/>", "no <graph>");
  expect_error(state, HEAD GRAPH("8") "<node id=\"n\"><data key=\"nope\">x</data></node>" TAIL,
               "undeclared key 'nope'");
  expect_error(state, HEAD GRAPH("8") INPUT("a", "float32", "4") NODE("o", "Output")
                   EDGE("a", "o", "0", "99999999999999999999") TAIL,
               "dst_port='99999999999999999999'");
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_resnet50, setup, teardown),
      cmocka_unit_test_setup_teardown(test_bert, setup, teardown),
      cmocka_unit_test_setup_teardown(test_key_ids_shuffled, setup, teardown),
      cmocka_unit_test_setup_teardown(test_dst_port_order, setup, teardown),
      cmocka_unit_test_setup_teardown(test_src_port, setup, teardown),
      cmocka_unit_test_setup_teardown(test_hcom_allgather_alias, setup, teardown),
      cmocka_unit_test_setup_teardown(test_alltoall_permute, setup, teardown),
      cmocka_unit_test_setup_teardown(test_err_unknown_op, setup, teardown),
      cmocka_unit_test_setup_teardown(test_err_dangling, setup, teardown),
      cmocka_unit_test_setup_teardown(test_err_duplicate_dst_port, setup, teardown),
      cmocka_unit_test_setup_teardown(test_err_dst_port_gap, setup, teardown),
      cmocka_unit_test_setup_teardown(test_err_missing_op, setup, teardown),
      cmocka_unit_test_setup_teardown(test_err_bad_shape, setup, teardown),
      cmocka_unit_test_setup_teardown(test_err_world_size, setup, teardown),
      cmocka_unit_test_setup_teardown(test_err_undirected, setup, teardown),
      cmocka_unit_test_setup_teardown(test_err_nested_and_hyperedge, setup, teardown),
      cmocka_unit_test_setup_teardown(test_err_hostile, setup, teardown),
  };
  return cmocka_run_group_tests_name("graphml", tests, NULL, NULL);
}
