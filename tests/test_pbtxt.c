/* test_pbtxt.c - unit tests for the protobuf-text GraphDef reader
 * (frontend/pbtxt.c).
 *
 * The Ascend tf_adapter graph in examples/pbtxt must import as its
 * AllGather of a constant; tests/pbtxt covers every mapped op and the
 * protobuf text spellings; in-memory graphs cover the error messages.
 */
#include "cf_graph_test.h"

static void test_hccl_op(void **state) {
  (void)state;
  cf_graph *g = load(CF_SOURCE_DIR "/examples/pbtxt/hccl_op.pbtxt");
  assert_int_equal(g->world_size, 8);
  assert_int_equal(g->n_nodes, 3);
  /* tensor_content "\000\000 A" twice: two little-endian 10.0f */
  const cf_node *c = node(g, "Const_1");
  assert_int_equal(c->op, CF_OP_CONSTANT);
  assert_true(cf_node_attr(c, CF_A_VALUE)->v.f == 10.0);
  assert_shape(&c->out[0], CF_DT_FLOAT32, "2");
  /* HcomAllGather concatenates; rank_size comes as a string */
  const cf_node *ag = node(g, "HcclOp1_0");
  assert_int_equal(ag->op, CF_OP_ALLGATHER);
  assert_int_equal(cf_node_layout(ag), CF_LAYOUT_CONCAT);
  assert_int_equal(cf_node_int(ag, CF_A_RANK_SIZE, 0), 8);
  assert_shape(&ag->out[0], CF_DT_FLOAT32, "16");
  /* _Retval is defined before what it returns */
  const cf_node *out = node(g, "retval_Add_0_0");
  assert_int_equal(out->op, CF_OP_OUTPUT);
  assert_ptr_equal(operand(g, out, 0), ag);
  cf_graph_destroy(g);
}

/* HcomAllToAll is an AllToAll; HcomAllToAllV one of send_data when its
 * constant counts are equal (the counts are no operands), else Opaque with
 * the reason in its type. */
static void test_alltoall(void **state) {
  (void)state;
  cf_graph *g = load(CF_SOURCE_DIR "/tests/pbtxt/alltoall.pbtxt");
  assert_int_equal(g->world_size, 4);
  const cf_node *a = node(g, "a2a"), *v = node(g, "v");
  assert_int_equal(a->op, CF_OP_ALLTOALL);
  assert_shape(&a->out[0], CF_DT_FLOAT32, "8,2");
  assert_int_equal(v->op, CF_OP_ALLTOALL);
  assert_int_equal(v->n_in, 1);
  assert_ptr_equal(operand(g, v, 0), a);
  assert_int_equal(cf_node_int(v, CF_A_RANK_SIZE, 0), 4);
  assert_int_equal(node(g, "v_uneven")->op, CF_OP_OPAQUE);
  assert_string_equal(cf_node_str(node(g, "v_uneven"), CF_A_TYPE, ""),
                      "HcomAllToAllV (counts or displacements that differ between ranks)");
  assert_string_equal(cf_node_str(node(g, "v_runtime"), CF_A_TYPE, ""),
                      "HcomAllToAllV (counts that are not constants of one length up to 8)");
  cf_graph_destroy(g);
}

/* HcomAllToAllV's counts, displacements and rows are overflow-checked
 * products (UBSan's signed overflow before): counts of 2^62, whose
 * displacements wrap, are Opaque; a send_data shape whose rows overflow is
 * left to the verifier's refusal. */
static void test_alltoallv_overflow(void **state) {
  (void)state;
  static const char *const cases[][3] = {
      {"4611686018427387904",
       "[0, 4611686018427387904, -9223372036854775808, "
       "-4611686018427387904]",
       "dim { size: 8 } dim { size: 2 }"},
      {"0", "0", "dim { size: 0 } dim { size: 4294967296 } dim { size: 4294967296 }"}};
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    char text[2048];
    snprintf(text, sizeof text,
             "node { name: \"x\" op: \"_Arg\" attr { key: \"T\" value { type: DT_FLOAT } }\n"
             "  attr { key: \"_output_shapes\" value { list { shape { %s } } } } }\n"
             "node { name: \"c\" op: \"Const\" attr { key: \"dtype\" value { type: DT_INT64 } }\n"
             "  attr { key: \"value\" value { tensor { dtype: DT_INT64 tensor_shape { dim { size: "
             "4 } } int64_val: %s } } } }\n"
             "node { name: \"d\" op: \"Const\" attr { key: \"dtype\" value { type: DT_INT64 } }\n"
             "  attr { key: \"value\" value { tensor { dtype: DT_INT64 tensor_shape { dim { size: "
             "4 } } int64_val: %s } } } }\n"
             "node { name: \"v\" op: \"HcomAllToAllV\" input: [\"x\", \"c\", \"d\", \"c\", \"d\"]\n"
             "  attr { key: \"T\" value { type: DT_FLOAT } }\n"
             "  attr { key: \"group\" value { s: \"hccl_world_group\" } }\n"
             "  attr { key: \"_output_shapes\" value { list { shape { %s } } } } }\n"
             "node { name: \"o\" op: \"_Retval\" input: \"v\" }\n",
             cases[i][2], cases[i][0], cases[i][1], cases[i][2]);
    cf_graph *g = NULL;
    cf_status st = cf_graph_parse(ctx, "t.pbtxt", text, strlen(text), &g);
    if (i == 1) { /* the verifier refuses the shape after the reader looked at it */
      ASSERT_ERR(st, CF_ERR_INVALID,
                 "t.pbtxt:1: error: node 'x': shape '0,4294967296,4294967296' "
                 "has too many elements");
      continue;
    }
    if (st) fail_msg("case %zu: %s", i, cf_context_errmsg(ctx));
    assert_int_equal(node(g, "v")->op, CF_OP_OPAQUE);
    assert_non_null(strstr(cf_node_str(node(g, "v"), CF_A_TYPE, ""), "HcomAllToAllV ("));
    cf_graph_destroy(g);
  }
}

static void test_ge_ops(void **state) {
  (void)state;
  cf_graph *g = load(CF_SOURCE_DIR "/tests/pbtxt/ge_ops.pbtxt");
  assert_int_equal(g->world_size, 8);
  assert_int_equal(node(g, "x")->op, CF_OP_INPUT);
  assert_shape(&node(g, "w")->out[0], CF_DT_FLOAT32, "32,16");
  assert_int_equal(node(g, "mm")->op, CF_OP_MATMUL);
  assert_int_equal(node(g, "mm_t")->op, CF_OP_OPAQUE); /* transpose_a */
  assert_true(cf_node_attr(node(g, "bias"), CF_A_VALUE)->v.f == 0.5);
  /* Identity is looked through; its control input is dropped */
  const cf_node *ar = node(g, "ar");
  assert_int_equal(cf_graph_find(g, "id"), -1);
  assert_ptr_equal(operand(g, ar, 0), node(g, "add"));
  assert_int_equal(cf_node_fusion(ar), 2);
  assert_int_equal(cf_node_int(ar, CF_A_FUSION_ID, -1), 7);
  assert_string_equal(cf_node_group(ar), "hccl_world_group"); /* adjacent strings */
  assert_int_equal(cf_node_reduction(node(g, "ar2")), CF_RED_MAX);
  assert_int_equal(cf_node_fusion(node(g, "ar2")), 0); /* fusion: s "0" */
  /* red ^sync, sync (a NoOp, left out) ^ar: red runs after ar, a control edge */
  const cf_node *red0 = node(g, "red");
  assert_int_equal(red0->n_ctl, 1);
  assert_ptr_equal(&g->nodes[red0->ctl[0]], ar);
  /* Reshape takes its shape from the Const's tensor_content (128, 8) */
  const cf_node *rsh = node(g, "rsh");
  assert_int_equal(rsh->op, CF_OP_RESHAPE);
  assert_int_equal(rsh->n_in, 1);
  assert_shape(&rsh->out[0], CF_DT_FLOAT32, "128,8");
  assert_shape(&node(g, "rs")->out[0], CF_DT_FLOAT32, "16,8");
  assert_shape(&node(g, "half")->out[0], CF_DT_FLOAT16, "16,8");
  assert_int_equal(cf_node_int(node(g, "bc"), CF_A_ROOT, -1), 3);
  /* typed value lists: iota, a splat of half_val 0x3c00 (1.0), others Opaque */
  assert_string_equal(cf_node_str(node(g, "iota"), CF_A_INIT, ""), "iota");
  assert_true(cf_node_attr(node(g, "halfs"), CF_A_VALUE)->v.f == 1.0);
  assert_string_equal(cf_node_str(node(g, "table"), CF_A_TYPE, ""), "Const");
  /* a multi-output Opaque from _output_shapes, used through name:1 */
  const cf_node *split = node(g, "split"), *red = node(g, "red");
  assert_int_equal(split->n_out, 2);
  assert_ptr_equal(operand(g, red, 0), split);
  assert_int_equal(red->in[0].port, 1);
  assert_int_equal(red->n_in, 1); /* ^sync is not an operand of a Reduce */
  assert_int_equal(cf_node_reduction(red), CF_RED_PROD);
  /* NoOp and an untyped op nothing uses are not imported */
  assert_int_equal(cf_graph_find(g, "sync"), -1);
  assert_int_equal(cf_graph_find(g, "saver"), -1);
  cf_graph_destroy(g);
}

static void test_no_retval(void **state) {
  (void)state;
  cf_graph *g = load(CF_SOURCE_DIR "/tests/pbtxt/no_retval.pbtxt");
  /* a group other than the world: its first rank_size ranks */
  const cf_group *tp = cf_graph_group(g, "tp");
  assert_non_null(tp);
  assert_int_equal(tp->n_ranks, 4);
  assert_int_equal(tp->ranks[3], 3);
  assert_int_equal(g->world_size, 8);
  assert_ptr_equal(operand(g, node(g, "allreduce_1:output"), 0), node(g, "allreduce_1"));
  assert_ptr_equal(operand(g, node(g, "gather:output"), 0), node(g, "gather"));
  cf_graph_destroy(g);
}

/* int64 values beyond what a double holds exactly (written as int64_val
 * and as tensor_content): Opaque, not a rounded Constant value */
static void test_int64_const_range(void **state) {
  (void)state;
  cf_graph *g = load(CF_SOURCE_DIR "/tests/pbtxt/int64_const_range.pbtxt");
  assert_int_equal(node(g, "big")->op, CF_OP_OPAQUE);
  assert_int_equal(node(g, "bytes")->op, CF_OP_OPAQUE);
  cf_graph_destroy(g);
}

static void test_control_inputs_of_opaque(void **state) {
  (void)state;
  const char *text =
      "node { name: 'a' op: 'Placeholder' attr { key: 'dtype' value { type: DT_INT8 } }\n"
      "  attr { key: 'shape' value { shape { dim { size: 4 } } } } }\n"
      "node { name: 'b' op: 'Placeholder' attr { key: 'dtype' value { type: 6 } }\n"
      "  attr { key: 'shape' value { shape { } } } }\n"
      "node { name: 'op' op: 'Custom' input: 'a' input: '^b'\n"
      "  attr { key: 'T' value { type: DT_INT8 } }\n"
      "  attr { key: '_output_shapes' value { list { shape { dim { size: 4 } } } } } }\n"
      "node { name: 'r' op: '_Retval' input: 'op' }\n";
  cf_graph *g = NULL;
  assert_int_equal(cf_graph_parse(ctx, "t.pb.txt", text, strlen(text), &g), CF_OK);
  const cf_node *op = node(g, "op");
  assert_int_equal(op->n_in, 2); /* Opaque keeps its dependencies */
  assert_ptr_equal(operand(g, op, 1), node(g, "b"));
  assert_shape(&node(g, "b")->out[0], CF_DT_INT8, "");
  cf_graph_destroy(g);
}

#define PH(n)                                                                                      \
  "node { name: '" n "' op: 'Placeholder' attr { key: 'dtype' value { type: DT_FLOAT } } attr { "  \
  "key: 'shape' value { shape { dim { size: 8 } } } } }\n"

static const cf_bad_input bad_graphs[] = {
    {"", "t.pbtxt:1: error: no node { ... } in the GraphDef"},
    {"versions { producer: 1 }\n", "t.pbtxt:1: error: no node { ... } in the GraphDef"},
    {"node {\n  name: \"a\"\n", "t.pbtxt:1: error: '{' is never closed"},
    {"node {\n  name: \"a\n}\n", "t.pbtxt:2: error: field 'name': unterminated string"},
    {"node {\n  name \"a\"\n}\n", "t.pbtxt:2: error: field 'name': expected ':' or '{'"},
    {"node {\n  name: }\n", "t.pbtxt:2: error: field 'name': expected a value"},
    {"node {\n  = 3\n}\n", "t.pbtxt:2: error: expected a field name"},
    {"node { op: 'X' }\n", "t.pbtxt:1: error: node without a name"},
    {"node { name: 'x' }\n", "t.pbtxt:1: error: node without an op"},
    {"node: 3\n", "t.pbtxt:1: error: node without a body"},
    {"node { name: 'a\\tb' op: 'NoOp' }\n",
     "t.pbtxt:1: error: field 'name': byte 0x09 in a name (names are printable ASCII)"},
    {"node { name: 'a\\q' op: 'NoOp' }\n", "t.pbtxt:1: error: field 'name': unknown escape"},
    {"node { name: 'a' op: 'NoOp' input: '\\303\\251' }\n",
     "t.pbtxt:1: error: field 'input': byte 0xc3 in a name"},
    {PH("a") PH("a"), "t.pbtxt:2: error: node 'a': duplicate node name (first defined at line 1)"},
    {PH("a") "node {\n name: 'r' op: '_Retval' input: 'b' }\n",
     "t.pbtxt:3: error: node 'r': input 'b' names no node of the graph"},
    {PH("a") "node {\n name: 'r' op: '_Retval' input: 'a:x' }\n",
     "t.pbtxt:3: error: node 'r': input 'a:x': bad output port"},
    {PH("a") "node {\n name: 'r' op: '_Retval' input: 'a:1' }\n",
     "t.pbtxt:2: error: node 'r': operand 0 refers to port 1 of 'a', which has 1 output"},
    {"node {\n name: 'p' op: 'Placeholder' attr { key: 'dtype' value { type: DT_STRING } } }\n",
     "t.pbtxt:1: error: node 'p': Placeholder needs a dtype (attr T or dtype) with an IR dtype"},
    {"node {\n name: 'p' op: 'Placeholder' attr { key: 'dtype' value { type: DT_FLOAT } } }\n",
     "t.pbtxt:1: error: node 'p': Placeholder needs a shape"},
    {"node { name: 'p' op: 'Placeholder' attr { key: 'dtype' value { type: DT_FLOAT } }\n attr { "
     "key: 'shape' value { shape { dim { size: -1 } } } } }\n",
     "t.pbtxt:2: error: node 'p': unknown dimension (size -1): collfuse needs static shapes"},
    {"node { name: 'p' op: 'Placeholder' attr { key: 'dtype' value { type: DT_FLOAT } }\n attr { "
     "key: 'shape' value { shape { unknown_rank: true } } } }\n",
     "t.pbtxt:2: error: node 'p': a shape of unknown rank"},
    {"node {\n name: 'c' op: 'Const' attr { key: 'value' value { tensor { dtype: DT_FLOAT "
     "tensor_shape { dim { size: 2 } }\n tensor_content: '\\000\\000' } } } }\n",
     "t.pbtxt:3: error: node 'c': tensor_content has 2 bytes, 2 elements of DT_FLOAT need 8"},
    {"node {\n name: 'c' op: 'Const' attr { key: 'value' value { tensor { dtype: DT_INT32 "
     "tensor_shape { dim { size: 1 } }\n int_val: 1 int_val: 2 } } } }\n",
     "t.pbtxt:3: error: node 'c': more int_val values than the 1 elements"},
    {"node {\n name: 'c' op: 'Const' }\n",
     "t.pbtxt:1: error: node 'c': Const needs attr value { tensor { ... } }"},
    {PH("a") "node {\n name: 'u' op: 'Unknown' input: 'a' }\nnode { name: 'r' op: '_Retval' input: "
             "'u' }\n",
     "t.pbtxt:2: error: node 'u': cannot import op 'Unknown': it has no _output_shapes"},
    {PH("a") "node {\n name: 'i' op: 'Identity' input: 'j' }\nnode { name: 'j' op: 'Identity' "
             "input: 'i' }\nnode { name: 'r' op: '_Retval' input: 'i' }\n",
     "error: node 'r': a cycle of Identity nodes through"},
    {PH("a") "node {\n name: 'ar' op: 'HcomAllReduce' input: 'a' attr { key: 'group' value { s: "
             "'g1' } } }\n",
     "t.pbtxt:2: error: node 'ar': group 'g1' needs attr rank_size"},
    {PH("a") "node {\n name: 'ar' op: 'HcomAllReduce' input: 'a' }\n",
     "t.pbtxt:2: error: node 'ar': size of group 'hccl_world_group' unknown"},
    {PH("a") "node {\n name: 'ar' op: 'HcomAllReduce' input: 'a' attr { key: 'reduction' value { "
             "s: 'avg' } } attr { key: 'rank_size' value { i: 2 } } }\n",
     "t.pbtxt:3: error: node 'ar': unknown reduction 'avg'"},
    {PH("a") "node {\n name: 'ar' op: 'HcomAllReduce' input: 'a' attr { key: 'rank_size' value { "
             "s: 'eight' } } }\n",
     "t.pbtxt:3: error: node 'ar': attr rank_size must be an integer"},
    {PH("a") "node {\n name: 'ag' op: 'HcomAllGather' input: 'a' attr { key: 'rank_size' value { "
             "i: 70000 } } }\n",
     "t.pbtxt:2: error: node 'ag': rank_size=70000 must be in 1..256"},
    {PH("a") "node {\n name: 'c' op: 'Cast' input: 'a' }\n",
     "t.pbtxt:2: error: node 'c': Cast needs attr DstT"},
    {PH("a") PH("b") "node {\n name: 'm' op: 'MatMul' input: 'a' input: 'b' }\n",
     "t.pbtxt:3: error: node 'm': operand 0 must be 2-D, got 1-D"},
};

static void test_errors(void **state) {
  (void)state;
  assert_refused("t.pbtxt", bad_graphs, sizeof bad_graphs / sizeof bad_graphs[0]);
}

static void test_limits(void **state) {
  (void)state;
  size_t cap = 4096, n = 0;
  char *t = malloc(cap);
  assert_non_null(t);
  cf_graph *g;
  for (int i = 0; i < 150; i++)
    n += (size_t)snprintf(t + n, cap - n, "a {");
  ASSERT_ERR(cf_graph_parse(ctx, "t.pbtxt", t, n, &g), CF_ERR_INVALID,
             "t.pbtxt:1: error: messages nested deeper than 100");
  const char nul[] = "node { name: 'a' op: 'NoOp' }\n\0";
  ASSERT_ERR(cf_graph_parse(ctx, "t.pbtxt", nul, sizeof nul - 1, &g), CF_ERR_INVALID,
             "t.pbtxt:2: error: NUL byte");
  free(t);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_hccl_op),
      cmocka_unit_test(test_ge_ops),
      cmocka_unit_test(test_alltoall),
      cmocka_unit_test(test_alltoallv_overflow),
      cmocka_unit_test(test_no_retval),
      cmocka_unit_test(test_control_inputs_of_opaque),
      cmocka_unit_test(test_int64_const_range),
      cmocka_unit_test(test_errors),
      cmocka_unit_test(test_limits),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
