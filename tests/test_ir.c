/* test_ir.c - unit tests of ir/: dtypes and shapes with overflow-checked
 * sizes, the graph container, structural verification (cycles named),
 * inference rules of every op family, and target profiles. */
#include "cf_test.h"

#include <stdio.h>
#include <string.h>

#include "ir/ir.h"



static void test_dtypes(void **state) {
  (void)state;
  static const struct {
    const char *name;
    int size;
  } want[] = {{"int8", 1},    {"uint8", 1},    {"int16", 2},   {"int32", 4},  {"int64", 8},
              {"float16", 2}, {"bfloat16", 2}, {"float32", 4}, {"float64", 8}};
  for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
    cf_dtype dt = cf_dtype_parse(want[i].name);
    assert_int_not_equal(dt, CF_DT_INVALID);
    assert_int_equal(cf_dtype_size(dt), want[i].size);
    assert_string_equal(cf_dtype_name(dt), want[i].name);
  }
  assert_int_equal(cf_dtype_parse("bf16"), CF_DT_BFLOAT16);
  assert_int_equal(cf_dtype_parse("f32"), CF_DT_FLOAT32);
  assert_int_equal(cf_dtype_parse("complex64"), CF_DT_INVALID);
  assert_true(cf_dtype_is_float(CF_DT_BFLOAT16));
  assert_false(cf_dtype_is_float(CF_DT_INT64));
  /* the unsigned types and bool: XLA's and StableHLO's names too */
  assert_int_equal(cf_dtype_parse("pred"), CF_DT_BOOL);
  assert_int_equal(cf_dtype_parse("u32"), CF_DT_UINT32);
  assert_int_equal(cf_dtype_size(CF_DT_UINT64), 8);
  assert_true(cf_dtype_is_unsigned(CF_DT_UINT16) && cf_dtype_is_unsigned(CF_DT_BOOL));
  assert_false(cf_dtype_is_unsigned(CF_DT_INT32) || cf_dtype_is_unsigned(CF_DT_FLOAT32));
  assert_int_equal(cf_dtype_wrap(CF_DT_UINT16, 0x1fffful), 0xffff);
  assert_int_equal(cf_dtype_wrap(CF_DT_INT16, 0xffffu), -1);
  assert_int_equal(cf_dtype_wrap(CF_DT_BOOL, 2), 1);
  assert_int_equal(cf_dtype_reduction(CF_DT_BOOL, CF_RED_SUM), CF_RED_MAX);
  assert_int_equal(cf_dtype_reduction(CF_DT_BOOL, CF_RED_PROD), CF_RED_MIN);
  assert_int_equal(cf_dtype_reduction(CF_DT_UINT8, CF_RED_SUM), CF_RED_SUM);
  assert_int_equal(cf_dtype_matmul_out(CF_DT_UINT16), CF_DT_UINT32);
  assert_int_equal(cf_dtype_matmul_out(CF_DT_BOOL), CF_DT_INVALID);
  char why[128];
  assert_true(cf_dtype_holds(CF_DT_UINT64, 18446744073709549568.0, why, sizeof why));
  assert_false(cf_dtype_holds(CF_DT_UINT32, -1, why, sizeof why));
  assert_false(cf_dtype_holds(CF_DT_BOOL, 2, why, sizeof why));
}

static void test_shapes(void **state) {
  (void)state;
  cf_shape s;
  char why[256], buf[128];
  assert_true(cf_shape_parse("", &s, why, sizeof why));
  assert_int_equal(s.rank, 0);
  assert_true(cf_shape_parse(" 1024, 512 ", &s, why, sizeof why));
  assert_int_equal(s.rank, 2);
  assert_string_equal(cf_shape_format(&s, buf, sizeof buf), "1024,512");
  assert_true(cf_shape_parse("1,1,1,1,1,1,1,1", &s, why, sizeof why));
  assert_false(cf_shape_parse("1,1,1,1,1,1,1,1,1", &s, why, sizeof why));
  assert_non_null(strstr(why, "more than 8 dimensions"));
  assert_false(cf_shape_parse("1000000,1000000", &s, why, sizeof why)); /* 10^12 */
  assert_non_null(strstr(why, "too many elements"));
  assert_false(cf_shape_parse("4294967296,4294967296,4", &s, why, sizeof why)); /* overflows */
  assert_false(cf_shape_parse("3,-1", &s, why, sizeof why));
  assert_false(cf_shape_parse("3,x", &s, why, sizeof why));
  assert_false(cf_shape_parse("99999999999999999999", &s, why, sizeof why));
  assert_false(cf_shape_parse("3,,4", &s, why, sizeof why));

  cf_value v = {.dtype = CF_DT_FLOAT64};
  int64_t n;
  v.shape.rank = 2;
  v.shape.dims[0] = (int64_t)1 << 30;
  v.shape.dims[1] = 64; /* 2^36 elements, 2^39 bytes: over the byte limit */
  assert_true(cf_shape_elements(&v.shape, &n));
  assert_false(cf_value_bytes(&v, &n));
  v.shape.dims[1] = 2;
  assert_true(cf_value_bytes(&v, &n));
  assert_int_equal(n, ((int64_t)1 << 31) * 8);
  v.shape.dims[0] = INT64_MAX;
  assert_false(cf_shape_elements(&v.shape, &n));
}

static cf_graph *new_graph(int64_t world) {
  cf_graph *g;
  assert_int_equal(cf_graph_new(ctx, "t.xml", &g), CF_OK);
  g->world_size = world;
  return g;
}

static int add(cf_graph *g, const char *name, const char *op, const char *dtype, const char *shape) {
  int idx;
  int layout;
  cf_op o = cf_op_lookup(op, &layout);
  assert_int_not_equal(o, CF_OP_INVALID);
  assert_int_equal(cf_graph_add_node(g, name, o, g->n_nodes + 1, &idx), CF_OK);
  if (layout >= 0) {
    cf_attr a = {.id = CF_A_LAYOUT, .v.i = layout};
    assert_int_equal(cf_node_set_attr(g, idx, &a), CF_OK);
  }
  if (dtype) assert_int_equal(cf_node_parse_attr(g, idx, CF_A_DTYPE, dtype, 0), CF_OK);
  if (shape) assert_int_equal(cf_node_parse_attr(g, idx, CF_A_SHAPE, shape, 0), CF_OK);
  return idx;
}

static void attr(cf_graph *g, int idx, const char *name, const char *value) {
  cf_attr_id id = cf_attr_lookup(name);
  assert_int_not_equal(id, CF_A_COUNT);
  assert_int_equal(cf_node_parse_attr(g, idx, id, value, 0), CF_OK);
}

static void inputs(cf_graph *g, int idx, int n, ...) {
  cf_ref refs[8];
  va_list ap;
  va_start(ap, n);
  for (int i = 0; i < n; i++) refs[i] = (cf_ref){va_arg(ap, int), 0};
  va_end(ap);
  assert_int_equal(cf_node_set_inputs(g, idx, n, refs), CF_OK);
}

static cf_status finish(cf_graph *g) {
  cf_status st = cf_verify_structure(g);
  return st ? st : cf_infer(g);
}

/* ops.def's columns agree with each other: what a fused op stands for, the
 * attributes its flags imply, one colour per plain collective. */
static void test_op_table(void **state) {
  (void)state;
  assert_int_equal(cf_op_coll(CF_OP_FUSEDALLREDUCE), CF_OP_ALLREDUCE);
  assert_int_equal(cf_op_coll(CF_OP_MATMULREDUCESCATTER), CF_OP_REDUCESCATTER);
  assert_int_equal(cf_op_coll(CF_OP_ALLGATHERMATMUL), CF_OP_ALLGATHER);
  assert_int_equal(cf_op_coll(CF_OP_MATMUL), CF_OP_INVALID);
  assert_int_equal(cf_op_unfused(CF_OP_FUSEDREDUCESCATTER), CF_OP_REDUCESCATTER);
  assert_int_equal(cf_op_unfused(CF_OP_MATMULALLREDUCE), CF_OP_MATMULALLREDUCE);
  assert_int_equal(cf_op_fused(CF_OP_ALLGATHER), CF_OP_FUSEDALLGATHER);
  assert_int_equal(cf_op_fused(CF_OP_BROADCAST), CF_OP_INVALID);
  assert_true(cf_op_reduces(CF_OP_REDUCE) && cf_op_rooted(CF_OP_REDUCE));
  assert_true(!cf_op_reduces(CF_OP_BROADCAST) && cf_op_rooted(CF_OP_BROADCAST));
  assert_true(!cf_op_reduces(CF_OP_ALLGATHERMATMUL) && !cf_op_rooted(CF_OP_ALLREDUCE));
  for (int i = 1; i < CF_OP_COUNT; i++) {
    const cf_op_info *o = &cf_op_table[i];
    cf_op c = o->coll;
    assert_int_equal(cf_op_is_collective((cf_op)i), c != CF_OP_INVALID);
    assert_int_equal(cf_op_reduces((cf_op)i), (o->allowed >> CF_A_REDUCTION) & 1);
    assert_int_equal(cf_op_rooted((cf_op)i), (o->required >> CF_A_ROOT) & 1);
    if (c == CF_OP_INVALID) continue;
    assert_int_equal(cf_op_table[c].cat, CF_CAT_COLLECTIVE);
    assert_int_equal(cf_op_table[c].coll, c);
    if (o->cat != CF_CAT_FUSED_MATMUL) { /* a bucket is drawn as its members' op */
      assert_int_equal(o->look, cf_op_table[c].look);
      assert_int_equal(cf_op_reduces((cf_op)i), cf_op_reduces(c));
    }
    if (o->cat == CF_CAT_FUSED_COLLECTIVE) assert_int_equal(cf_op_fused(c), i);
  }
}

/* List attributes read and write the XML's comma form: `\,` is a comma
 * within an item, `\\` a backslash where a lone one would read as an
 * escape; other text (a backslash elsewhere) stands for itself. */
static void test_list_attrs(void **state) {
  (void)state;
  cf_graph *g = NULL;
  int f;
  char buf[64];
  assert_int_equal(cf_graph_new(ctx, "lists.xml", &g), CF_OK);
  assert_int_equal(cf_graph_add_node(g, "f", CF_OP_FUSEDALLREDUCE, 1, &f), CF_OK);
  static const struct {
    const char *text;
    int n;
    const char *items[4];
  } cases[] = {
      {"a,b", 2, {"a", "b"}},       {"", 1, {""}},
      {"a\\,b,c", 2, {"a,b", "c"}}, {"x\\y,z\\\\", 2, {"x\\y", "z\\"}},
      {"p\\\\\\,q", 1, {"p\\,q"}},  {",", 2, {"", ""}},
  };
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
    assert_int_equal(cf_node_parse_attr(g, f, CF_A_MEMBERS, cases[c].text, 1), CF_OK);
    cf_strs m = cf_node_strs(&g->nodes[f], CF_A_MEMBERS);
    assert_int_equal(m.n, cases[c].n);
    for (int k = 0; k < m.n; k++)
      assert_string_equal(m.v[k], cases[c].items[k]);
    /* the text again, and snprintf's contract on a short buffer */
    const cf_attr *a = cf_node_attr(&g->nodes[f], CF_A_MEMBERS);
    assert_int_equal(cf_attr_text(a, buf, sizeof buf), strlen(cases[c].text));
    assert_string_equal(buf, cases[c].text);
    assert_int_equal(cf_attr_text(a, buf, 2), strlen(cases[c].text));
    assert_true(strlen(buf) <= 1 && strncmp(buf, cases[c].text, strlen(buf)) == 0);
  }
  const char *names[] = {"a,b", "c\\"};
  assert_int_equal(cf_node_set_strs(g, f, CF_A_MEMBERS, names, 2), CF_OK);
  cf_attr_text(cf_node_attr(&g->nodes[f], CF_A_MEMBERS), buf, sizeof buf);
  assert_string_equal(buf, "a\\,b,c\\\\");

  assert_int_equal(cf_node_parse_attr(g, f, CF_A_OFFSETS, "0,64, 128", 1), CF_OK);
  cf_ints o = cf_node_ints(&g->nodes[f], CF_A_OFFSETS);
  assert_int_equal(o.n, 3);
  assert_int_equal(o.v[2], 128);
  cf_attr_text(cf_node_attr(&g->nodes[f], CF_A_OFFSETS), buf, sizeof buf);
  assert_string_equal(buf, "0,64,128");
  assert_int_equal(cf_node_parse_attr(g, f, CF_A_OFFSETS, "", 1), CF_OK);
  assert_int_equal(cf_node_ints(&g->nodes[f], CF_A_OFFSETS).n, 0);
  static const char *bad[] = {"0,", "x", "0;64", "1,99999999999999999999", ",0"};
  for (size_t b = 0; b < sizeof bad / sizeof bad[0]; b++)
    ASSERT_ERR(cf_node_parse_attr(g, f, CF_A_OFFSETS, bad[b], 3), CF_ERR_INVALID,
               "is not a comma-separated list of integers");
  assert_int_equal(cf_node_ints(&g->nodes[f], CF_A_OFFSETS).n, 0); /* unchanged */
  cf_graph_destroy(g);
}

static void test_graph_container(void **state) {
  (void)state;
  cf_graph *g = new_graph(2);
  int idx;
  for (int i = 0; i < 1000; i++) {
    char name[32];
    snprintf(name, sizeof name, "n%d", i);
    assert_int_equal(cf_graph_add_node(g, name, CF_OP_INPUT, i + 1, &idx), CF_OK);
    assert_int_equal(idx, i);
  }
  assert_int_equal(cf_graph_find(g, "n0"), 0);
  assert_int_equal(cf_graph_find(g, "n999"), 999);
  assert_int_equal(cf_graph_find(g, "n1000"), -1);
  ASSERT_ERR(cf_graph_add_node(g, "n5", CF_OP_INPUT, 2000, &idx), CF_ERR_INVALID,
             "t.xml:2000: error: node 'n5': duplicate node name (first defined at line 6)");
  ASSERT_ERR(cf_node_parse_attr(g, 0, CF_A_FUSION, "abc", 7), CF_ERR_INVALID,
             "t.xml:7: error: node 'n0': attribute fusion='abc' is not an integer");
  ASSERT_ERR(cf_node_parse_attr(g, 0, CF_A_REDUCTION, "avg", 7), CF_ERR_INVALID, "unknown reduction 'avg'");
  /* compaction keeps names findable */
  for (int i = 0; i < 1000; i += 2) g->nodes[i].dead = true;
  assert_int_equal(cf_graph_compact(g), CF_OK);
  assert_int_equal(g->n_nodes, 500);
  assert_int_equal(cf_graph_find(g, "n1"), 0);
  assert_int_equal(cf_graph_find(g, "n0"), -1);
  assert_int_equal(cf_graph_find(g, "n999"), 499);
  cf_graph_destroy(g);
  cf_graph_destroy(NULL);
}

static void test_cycle_named(void **state) {
  (void)state;
  cf_graph *g = new_graph(2);
  int x = add(g, "x", "Input", "float32", "4");
  int a = add(g, "a", "Add", NULL, NULL);
  int b = add(g, "b", "Add", NULL, NULL);
  int c = add(g, "c", "Add", NULL, NULL);
  inputs(g, a, 2, x, c);
  inputs(g, b, 2, a, x);
  inputs(g, c, 2, b, x);
  ASSERT_ERR(cf_verify_structure(g), CF_ERR_INVALID, "cycle: 'a' -> 'b' -> 'c' -> 'a'");
  cf_graph_destroy(g);
}

static void test_structure_errors(void **state) {
  (void)state;
  cf_graph *g = new_graph(2);
  int x = add(g, "x", "Input", "float32", "4");
  int mm = add(g, "mm", "MatMul", NULL, NULL);
  inputs(g, mm, 1, x);
  ASSERT_ERR(cf_verify_structure(g), CF_ERR_INVALID, "node 'mm': MatMul takes 2 operands, got 1");
  cf_graph_destroy(g);

  g = new_graph(2);
  x = add(g, "x", "Input", "float32", "4");
  int ar = add(g, "ar", "AllReduce", NULL, NULL);
  inputs(g, ar, 1, x);
  attr(g, ar, "fusion", "2");
  ASSERT_ERR(cf_verify_structure(g), CF_ERR_INVALID, "fusion=2 needs fusion_id >= 0");
  attr(g, ar, "fusion_id", "3");
  attr(g, ar, "group", "nope");
  ASSERT_ERR(cf_verify_structure(g), CF_ERR_INVALID, "group 'nope' is not defined");
  attr(g, ar, "group", "hccl_world_group");
  attr(g, ar, "rank_size", "4");
  ASSERT_ERR(cf_verify_structure(g), CF_ERR_INVALID, "rank_size=4 but group 'hccl_world_group' has 2 ranks");
  attr(g, ar, "rank_size", "2");
  attr(g, ar, "layout", "stack");
  ASSERT_ERR(cf_verify_structure(g), CF_ERR_INVALID, "attribute 'layout' is not allowed on AllReduce");
  cf_graph_destroy(g);

  g = new_graph(2);
  x = add(g, "x", "Input", "float32", "4");
  int o = add(g, "o", "Output", NULL, NULL);
  int y = add(g, "y", "Add", NULL, NULL);
  inputs(g, o, 1, x);
  inputs(g, y, 2, o, x);
  ASSERT_ERR(cf_verify_structure(g), CF_ERR_INVALID, "refers to 'o', an Output with no result");
  cf_graph_destroy(g);

  g = new_graph(2);
  x = add(g, "x", "Input", "float32", "4");
  y = add(g, "y", "Add", NULL, NULL);
  cf_ref r[2] = {{x, 1}, {x, 0}};
  assert_int_equal(cf_node_set_inputs(g, y, 2, r), CF_OK);
  ASSERT_ERR(cf_verify_structure(g), CF_ERR_INVALID, "refers to port 1 of 'x', which has 1 output");
  cf_graph_destroy(g);
}

static void test_infer_collectives(void **state) {
  (void)state;
  cf_graph *g = new_graph(4);
  int x = add(g, "x", "Input", "bfloat16", "6,3");
  int st = add(g, "st", "AllGather", NULL, NULL);
  int ct = add(g, "ct", "HcomAllGather", NULL, NULL);
  int rs = add(g, "rs", "ReduceScatter", NULL, NULL);
  int ar = add(g, "ar", "AllReduce", NULL, NULL);
  int fa = add(g, "fa", "FusedAllReduce", NULL, NULL);
  inputs(g, st, 1, x);
  inputs(g, ct, 1, x);
  inputs(g, rs, 1, ct);
  inputs(g, ar, 1, x);
  inputs(g, fa, 2, x, rs);
  attr(g, fa, "members", "p,q");
  assert_int_equal(finish(g), CF_OK);
  char b[64];
  assert_string_equal(cf_shape_format(&g->nodes[st].out[0].shape, b, sizeof b), "4,6,3");
  assert_string_equal(cf_shape_format(&g->nodes[ct].out[0].shape, b, sizeof b), "24,3");
  assert_string_equal(cf_shape_format(&g->nodes[rs].out[0].shape, b, sizeof b), "6,3");
  assert_int_equal(g->nodes[fa].n_out, 2);
  assert_int_equal(g->nodes[ar].out[0].dtype, CF_DT_BFLOAT16);
  /* bytes: AllGather counts the gathered tensor */
  assert_int_equal(cf_node_comm_bytes(g, &g->nodes[st]), 4 * 6 * 3 * 2);
  assert_int_equal(cf_node_comm_bytes(g, &g->nodes[fa]), 2 * 6 * 3 * 2);
  cf_graph_stats s;
  cf_graph_stats_compute(g, &s);
  assert_int_equal(s.collectives, 5);
  assert_int_equal(s.by_op[CF_OP_ALLGATHER], 2);
  cf_graph_destroy(g);

  g = new_graph(4);
  x = add(g, "x", "Input", "float32", "6,3");
  rs = add(g, "rs", "ReduceScatter", NULL, NULL);
  inputs(g, rs, 1, x);
  ASSERT_ERR(finish(g), CF_ERR_INVALID, "dim0=6 is not divisible by rank_size=4");
  cf_graph_destroy(g);

  g = new_graph(2);
  x = add(g, "x", "Input", "float32", "1,1,1,1,1,1,1,1");
  st = add(g, "st", "AllGather", NULL, NULL);
  inputs(g, st, 1, x);
  ASSERT_ERR(finish(g), CF_ERR_INVALID, "stack layout needs an input of rank < 8");
  cf_graph_destroy(g);

  g = new_graph(0); /* world size unknown */
  x = add(g, "x", "Input", "float32", "4");
  ar = add(g, "ar", "AllReduce", NULL, NULL);
  inputs(g, ar, 1, x);
  ASSERT_ERR(finish(g), CF_ERR_INVALID, "size of group 'hccl_world_group' unknown");
  cf_graph_destroy(g);
}

static void test_infer_compute(void **state) {
  (void)state;
  char b[64];
  cf_graph *g = new_graph(2);
  int a = add(g, "a", "Input", "float32", "4,1,3");
  int c = add(g, "c", "Input", "float32", "5,1");
  int s = add(g, "s", "Add", NULL, NULL);
  int r = add(g, "r", "Reshape", NULL, "20,3");
  int k = add(g, "k", "Cast", "float16", NULL);
  inputs(g, s, 2, a, c);
  inputs(g, r, 1, s);
  inputs(g, k, 1, r);
  assert_int_equal(finish(g), CF_OK);
  assert_string_equal(cf_shape_format(&g->nodes[s].out[0].shape, b, sizeof b), "4,5,3");
  assert_int_equal(g->nodes[k].out[0].dtype, CF_DT_FLOAT16);
  cf_graph_destroy(g);

  g = new_graph(2);
  int x1 = add(g, "x1", "Input", "int8", "8,16");
  int x2 = add(g, "x2", "Input", "int8", "16,4");
  int s1 = add(g, "s1", "Input", "float32", "8,1");
  int s2 = add(g, "s2", "Input", "float32", "1,4");
  int q = add(g, "q", "QuantMatMul", NULL, NULL);
  int mm = add(g, "mm", "MatMul", NULL, NULL);
  inputs(g, q, 4, x1, x2, s1, s2);
  inputs(g, mm, 2, x1, x2);
  assert_int_equal(finish(g), CF_OK);
  assert_int_equal(g->nodes[q].out[0].dtype, CF_DT_BFLOAT16);
  assert_int_equal(g->nodes[mm].out[0].dtype, CF_DT_INT32); /* exact int8 products */
  attr(g, q, "output_dtype", "float32");
  ASSERT_ERR(finish(g), CF_ERR_INVALID, "output_dtype must be bfloat16 or float16");
  attr(g, q, "output_dtype", "float16");
  inputs(g, q, 4, x1, x2, s2, s1);
  ASSERT_ERR(finish(g), CF_ERR_INVALID, "x1_scale must have shape (8,1)");
  cf_graph_destroy(g);
}

static void test_infer_fused_matmul(void **state) {
  (void)state;
  char b[64];
  cf_graph *g = new_graph(4);
  int x1 = add(g, "x1", "Input", "float16", "8,256");
  int x2 = add(g, "x2", "Input", "float16", "256,32");
  int w2 = add(g, "w2", "Input", "float16", "256,16");
  int bias = add(g, "bias", "Input", "float16", "32");
  attr(g, bias, "init", "zeros");
  int mrs = add(g, "mrs", "MatmulReduceScatter", NULL, NULL);
  int mar = add(g, "mar", "MatmulAllReduce", NULL, NULL);
  int agm = add(g, "agm", "AllGatherMatmul", NULL, NULL);
  attr(g, mrs, "world_size", "4");
  attr(g, mar, "world_size", "4");
  attr(g, agm, "world_size", "4");
  inputs(g, mrs, 3, x1, x2, bias);
  inputs(g, mar, 2, x1, x2);
  inputs(g, agm, 3, x1, x2, w2);
  assert_int_equal(finish(g), CF_OK);
  assert_string_equal(cf_shape_format(&g->nodes[mrs].out[0].shape, b, sizeof b), "2,32");
  assert_string_equal(cf_shape_format(&g->nodes[mar].out[0].shape, b, sizeof b), "8,32");
  assert_int_equal(g->nodes[agm].n_out, 3);
  assert_string_equal(cf_shape_format(&g->nodes[agm].out[0].shape, b, sizeof b), "32,32");
  assert_string_equal(cf_shape_format(&g->nodes[agm].out[1].shape, b, sizeof b), "32,16");
  assert_string_equal(cf_shape_format(&g->nodes[agm].out[2].shape, b, sizeof b), "32,256");

  /* target rules: world size and k range on atlas-a2, nothing on cpu */
  assert_int_equal(cf_target_check(g, cf_target_find("cpu")), CF_OK);
  assert_int_equal(cf_target_check(g, cf_target_find("atlas-a2")), CF_OK);
  attr(g, bias, "init", "ones");
  ASSERT_ERR(finish(g), CF_ERR_INVALID, "node 'mrs': bias 'bias' must be absent or zero");
  attr(g, bias, "init", "zeros");
  attr(g, mrs, "output_dtype", "bfloat16");
  ASSERT_ERR(finish(g), CF_ERR_INVALID, "output_dtype is only allowed with the quantized (int8) form");
  cf_graph_destroy(g);

  g = new_graph(16);
  x1 = add(g, "x1", "Input", "float16", "32,128");
  x2 = add(g, "x2", "Input", "float16", "128,32");
  mrs = add(g, "mrs", "MatmulReduceScatter", NULL, NULL);
  attr(g, mrs, "world_size", "16");
  inputs(g, mrs, 2, x1, x2);
  assert_int_equal(finish(g), CF_OK);
  ASSERT_ERR(cf_target_check(g, cf_target_find("atlas-a2")), CF_ERR_INVALID,
             "node 'mrs': target atlas-a2: world_size=16 not in {2,4,8}");
  ASSERT_ERR(cf_target_check(g, cf_target_find("atlas-a3")), CF_ERR_INVALID, "k=128 outside [256, 65535)");
  ASSERT_ERR(cf_target_check(g, cf_target_find("atlas-910")), CF_ERR_INVALID,
             "MatmulReduceScatter is not supported");
  attr(g, mrs, "world_size", "3");
  ASSERT_ERR(finish(g), CF_ERR_INVALID, "world_size=3 but group 'hccl_world_group' has 16 ranks");
  cf_graph_destroy(g);

  g = new_graph(3);
  x1 = add(g, "x1", "Input", "float16", "32,128");
  x2 = add(g, "x2", "Input", "float16", "128,32");
  mrs = add(g, "mrs", "MatmulReduceScatter", NULL, NULL);
  attr(g, mrs, "world_size", "3");
  inputs(g, mrs, 2, x1, x2);
  ASSERT_ERR(finish(g), CF_ERR_INVALID, "m=32 is not divisible by world_size=3");
  cf_graph_destroy(g);
}

static void test_targets(void **state) {
  (void)state;
  static const struct {
    const char *target, *dtype, *red, *op, *msg;
  } cases[] = {
      {"atlas-a2", "bfloat16", "prod", "AllReduce", "does not support prod on bfloat16"},
      {"atlas-a3", "int64", "sum", "AllReduce", "does not support dtype int64"},
      {"atlas-310p", "int16", "max", "AllReduce", "supports only sum on int16"},
      {"ascend-950", "float32", "prod", "Reduce", "does not support reduction prod"},
      {"atlas-910", "float32", NULL, "AllGather", "AllGather is not supported"},
      {"atlas-310p", "float32", "sum", "Reduce", "Reduce is not supported"},
      {"atlas-a2", "int16", "prod", "Reduce", "does not support prod on int16"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    cf_graph *g = new_graph(2);
    int x = add(g, "x", "Input", cases[i].dtype, "4");
    int c = add(g, "c", cases[i].op, NULL, NULL);
    if (cases[i].red) attr(g, c, "reduction", cases[i].red);
    if (strcmp(cases[i].op, "Reduce") == 0) attr(g, c, "root", "0");
    inputs(g, c, 1, x);
    assert_int_equal(finish(g), CF_OK);
    assert_int_equal(cf_target_check(g, cf_target_find("cpu")), CF_OK);
    ASSERT_ERR(cf_target_check(g, cf_target_find(cases[i].target)), CF_ERR_INVALID, cases[i].msg);
    assert_non_null(strstr(cf_context_errmsg(ctx), cases[i].target));
    cf_graph_destroy(g);
  }
  assert_null(cf_target_find("tpu-v5"));
  assert_string_equal(cf_target_name(0), "cpu");
}

/* Partitioned groups: parts of one size, disjoint, inside the world; the
 * group's size is a part's, and a rank finds its own part. */
static void test_partitioned_groups(void **state) {
  (void)state;
  cf_graph *g = new_graph(8);
  static const int r8[] = {0, 4, 1, 5, 2, 6, 3, 7}, off4[] = {0, 2, 4, 6, 8};
  assert_int_equal(cf_graph_add_group_parts(g, "dp", r8, off4, 4, 3), CF_OK);
  const cf_group *dp = cf_graph_group(g, "dp");
  assert_int_equal(dp->n_parts, 4);
  assert_int_equal(cf_graph_group_size(g, "dp"), 2);
  int at;
  for (int r = 0; r < 8; r++) {
    const int *part = cf_group_part_of(dp, r, &at);
    assert_non_null(part);
    assert_int_equal(part[at], r);
    assert_int_equal(part - dp->ranks, (r % 4) * 2);
  }
  assert_null(cf_group_part_of(dp, 8, &at));
  int ar = add(g, "ar", "AllReduce", NULL, NULL);
  inputs(g, ar, 1, add(g, "x", "Input", "float32", "4"));
  attr(g, ar, "group", "dp");
  attr(g, ar, "rank_size", "2");
  assert_int_equal(finish(g), CF_OK);
  /* the parts are part of the fingerprint: splitting them differently differs */
  char fp1[17], fp2[17];
  cf_graph_fingerprint(g, fp1);
  ((cf_group *)dp)->ranks[1] = 2, ((cf_group *)dp)->ranks[4] = 4;
  cf_graph_fingerprint(g, fp2);
  assert_string_not_equal(fp1, fp2);
  cf_graph_destroy(g);

  /* at construction: parts of one size, none empty */
  g = new_graph(8);
  static const int off_uneven[] = {0, 3, 5}, off_empty[] = {0, 2, 2, 4};
  ASSERT_ERR(cf_graph_add_group_parts(g, "u", r8, off_uneven, 2, 7), CF_ERR_INVALID,
             ":7: error: group 'u': part 1 has 2 ranks but part 0 has 3");
  ASSERT_ERR(cf_graph_add_group_parts(g, "e", r8, off_empty, 3, 9), CF_ERR_INVALID,
             ":9: error: group 'e': part 1 is empty");
  ASSERT_ERR(cf_graph_add_group_parts(g, "z", r8, off4, 0, 9), CF_ERR_INVALID, "group 'z': 0 parts");
  assert_null(cf_graph_group(g, "u"));
  cf_graph_destroy(g);

  /* in the verifier: disjoint parts inside the world */
  static const int overlap[] = {0, 1, 1, 2}, outside[] = {0, 1, 2, 9}, off2[] = {0, 2, 4};
  g = new_graph(8);
  assert_int_equal(cf_graph_add_group_parts(g, "o", overlap, off2, 2, 4), CF_OK);
  ASSERT_ERR(cf_verify_structure(g), CF_ERR_INVALID,
             ":4: error: group 'o': rank 1 is in parts 0 and 1 (parts must be disjoint)");
  cf_graph_destroy(g);
  g = new_graph(8);
  assert_int_equal(cf_graph_add_group_parts(g, "w", outside, off2, 2, 5), CF_OK);
  ASSERT_ERR(cf_verify_structure(g), CF_ERR_INVALID,
             ":5: error: group 'w': rank 9 outside the world (world_size=8)");
  cf_graph_destroy(g);
}

/* Messages never carry raw binary: excerpts are escaped and cut, and so is
 * every message (without the cut). */
static void test_excerpts(void **state) {
  (void)state;
  char buf[CF_EXCERPT_BUF], long_in[200];
  assert_string_equal(cf_excerpt(buf, sizeof buf,
                                 "a\x01"
                                 "b\xff\x00"
                                 "c",
                                 6),
                      "a\\x01b\\xFF\\x00c");
  /* UTF-8 stays; a lone continuation byte, an overlong form and a surrogate do not */
  assert_string_equal(cf_excerpt(buf, sizeof buf, "caf\xc3\xa9 \xe5\x9b\xbe", 9),
                      "caf\xc3\xa9 \xe5\x9b\xbe");
  assert_string_equal(cf_excerpt(buf, sizeof buf, "\x80\xc0\xaf\xed\xa0\x80", 6),
                      "\\x80\\xC0\\xAF\\xED\\xA0\\x80");
  memset(long_in, 'z', sizeof long_in);
  cf_excerpt(buf, sizeof buf, long_in, sizeof long_in);
  assert_int_equal(strlen(buf), CF_EXCERPT_CHARS + 3);
  assert_string_equal(buf + CF_EXCERPT_CHARS, "...");
  cf_excerpt(buf, sizeof buf, long_in, CF_EXCERPT_CHARS);
  assert_int_equal(strlen(buf), CF_EXCERPT_CHARS);
  /* 60 characters that each need 4 bytes still fit */
  memset(long_in, 1, sizeof long_in);
  cf_excerpt(buf, sizeof buf, long_in, sizeof long_in);
  assert_int_equal(strlen(buf), CF_EXCERPT_CHARS * 4 + 3);
  assert_string_equal(CF_QUOTE("ok"), "ok");
  ASSERT_ERR(
      cf_error(ctx, CF_ERR_INVALID, "f.xml", 3, "node 'n\x01': op '%s'\tnext\nline", "\x7f\xfe"),
      CF_ERR_INVALID, "f.xml:3: error: node 'n\\x01': op '\\x7F\\xFE'\tnext\nline");
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_excerpts),
      cmocka_unit_test(test_dtypes),
      cmocka_unit_test(test_shapes),
      cmocka_unit_test(test_op_table),
      cmocka_unit_test(test_list_attrs),
      cmocka_unit_test(test_graph_container),
      cmocka_unit_test(test_cycle_named),
      cmocka_unit_test(test_structure_errors),
      cmocka_unit_test(test_infer_collectives),
      cmocka_unit_test(test_infer_compute),
      cmocka_unit_test(test_infer_fused_matmul),
      cmocka_unit_test(test_targets),
      cmocka_unit_test(test_partitioned_groups),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
