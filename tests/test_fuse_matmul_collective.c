/* test_fuse_matmul_collective.c - unit tests of the fuse-matmul-collective pass
 * (passes/fuse_matmul_collective.c) and of the fused matmul ops' rules it
 * relies on (ir/infer.c, ir/target.c).
 *
 *  - every pattern fused: MatMul -> ReduceScatter/AllReduce (sum, and mean
 *    as sum then an exact scale), QuantMatMul -> ReduceScatter with and
 *    without a zero bias (operand order x1, x2, [bias], x1_scale, x2_scale),
 *    one AllGather feeding several MatMuls as one AllGatherMatmul; the
 *    fused nodes' attributes (world_size, group, members, reason) and the
 *    rewired users.
 *  - every illegal case with its --explain line: reduction max, mean over a
 *    world size whose reciprocal is not exact, a bucketed collective, dtypes
 *    the fused op rejects, a non-zero bias, QuantMatMul -> AllReduce, stack
 *    layout, x2 that depends on the AllGather (or on one ordered after it),
 *    a MatMul claimed by its collective, the Atlas A2 limits (k, dtype,
 *    world_size, one communicator); m not divisible and scales of the wrong
 *    shape are rejected before the pass runs.
 *  - a MatMul whose product has another user (a node, an Output, a second
 *    collective) stays unfused with its collective: no product computed twice.
 *  - the fused graph verifies, round-trips through the XML writer and
 *    reader, and compiling it again changes nothing; compile --json lists
 *    the fused ops.
 *  - 300 random DAGs: the pass keeps the graph acyclic and verified, every
 *    Output's type, one collective per original collective, and gives one
 *    --explain line per candidate.
 */
#include "cf_attr_test.h"
#include "cf_pass_test.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define PASSES "verify,infer,dce,fuse-allreduce,fuse-allgather,fuse-reducescatter,fuse-matmul-collective"

/* ================= helpers ================= */

static bool starts_with(const char *line, const char *prefix) {
  return strncmp(line, prefix, strlen(prefix)) == 0;
}

/* exactly one explain line starts with prefix, and it holds want */
static void expect_line(const lines *l, const char *prefix, const char *want) {
  expect_one_line(l, starts_with, prefix, want);
}

static cf_status fuse(cf_graph *g, const char *passes, const char *target, lines *ex) {
  return run_passes(g, passes ? passes : PASSES, NULL, target, ex);
}

static void fuse_ok(cf_graph *g, const char *target, lines *ex) {
  if (fuse(g, NULL, target, ex) != CF_OK) fail_msg("passes: %s", cf_context_errmsg(ctx));
  /* the result verifies on its own */
  assert_int_equal(cf_verify_structure(g), CF_OK);
  assert_int_equal(cf_infer(g), CF_OK);
}

static void absent(const cf_graph *g, const char *name) {
  if (cf_graph_find(g, name) >= 0) fail_msg("node '%s' is still there", name);
}

/* operand j of node name is port `port` of node `src` */
static void expect_in(const cf_graph *g, const char *name, int j, const char *src, int port) {
  const cf_node *n = node(g, name);
  if (j >= n->n_in) fail_msg("'%s' has %d operands, want operand %d", name, n->n_in, j);
  const char *got = g->nodes[n->in[j].node].name;
  if (strcmp(got, src) || n->in[j].port != port)
    fail_msg("operand %d of '%s' is '%s' port %d, want '%s' port %d", j, name, got, n->in[j].port, src,
             port);
}

static void expect_str(const cf_node *n, cf_attr_id id, const char *want) {
  const char *got = attr_text(n, id, NULL);
  if (!got || strcmp(got, want))
    fail_msg("'%s': %s is '%s', want '%s'", n->name, cf_attr_table[id].name, got ? got : "(none)", want);
}

static void expect_type(const cf_graph *g, const char *name, int port, cf_dtype dt, const char *shape) {
  const cf_node *n = node(g, name);
  char buf[160];
  assert_true(port < n->n_out);
  if (n->out[port].dtype != dt || strcmp(cf_shape_format(&n->out[port].shape, buf, sizeof buf), shape))
    fail_msg("'%s' port %d is %s (%s), want %s (%s)", name, port, cf_dtype_name(n->out[port].dtype), buf,
             cf_dtype_name(dt), shape);
}

/* Write g as XML, read it back: same nodes, ops and members; it verifies, and
 * running the pass again changes nothing. */
static void round_trip(const cf_graph *g) {
  char dir[] = "/tmp/cf-fmc-XXXXXX", path[64];
  if (!mkdtemp(dir)) fail_msg("mkdtemp failed");
  snprintf(path, sizeof path, "%s/g.xml", dir);
  assert_int_equal(cf_graph_write_xml(g, path), CF_OK);
  cf_graph *r = NULL;
  if (cf_graph_load(ctx, path, &r) != CF_OK) fail_msg("reload: %s", cf_context_errmsg(ctx));
  unlink(path);
  rmdir(dir);
  assert_int_equal(cf_graph_verify(r, NULL), CF_OK);
  assert_int_equal(r->n_nodes, g->n_nodes);
  for (int i = 0; i < g->n_nodes; i++) {
    const cf_node *a = &g->nodes[i], *b = node(r, a->name);
    assert_int_equal(a->op, b->op);
    assert_int_equal(a->n_in, b->n_in);
    const char *ma = attr_text(a, CF_A_MEMBERS, ""), *mb = attr_text(b, CF_A_MEMBERS, "");
    assert_string_equal(ma, mb);
  }
  lines ex = {0};
  fuse_ok(r, NULL, &ex);
  assert_int_equal(r->n_nodes, g->n_nodes);
  for (int i = 0; i < g->n_nodes; i++) assert_int_equal(node(r, g->nodes[i].name)->op, g->nodes[i].op);
  lines_free(&ex);
  cf_graph_destroy(r);
}

/* ================= MatMul -> ReduceScatter / AllReduce ================= */

static void test_registered(void **state) {
  (void)state;
  const cf_pass *p = cf_pass_find("fuse-matmul-collective");
  assert_non_null(p);
  assert_ptr_equal(p, &cf_pass_fuse_matmul_collective);
  assert_true(strlen(p->doc) > 10);
  /* runs after the bucketing passes in the registry's (pipeline) order */
  int at = -1, rs = -1;
  for (int i = 0; cf_pass_registry[i]; i++) {
    if (cf_pass_registry[i] == p) at = i;
    if (cf_pass_registry[i] == &cf_pass_fuse_reducescatter) rs = i;
  }
  assert_true(at > rs && rs >= 0);
}

static const char tp_block[] =
    "<graph name='tp_block' world_size='8'>\n"
    "  <group name='tp' ranks='0,1,2,3,4,5,6,7'/>\n"
    "  <node name='x' op='Input' dtype='bfloat16' shape='1024,512'/>\n"
    "  <node name='w' op='Input' dtype='bfloat16' shape='512,256'/>\n"
    "  <node name='mm' op='MatMul'><input ref='x'/><input ref='w'/></node>\n"
    "  <node name='rs' op='ReduceScatter' reduction='sum' group='tp'><input ref='mm'/></node>\n"
    "  <node name='y' op='Output'><input ref='rs'/></node>\n"
    "</graph>\n";

static void test_mmrs(void **state) {
  (void)state;
  cf_graph *g = parse(tp_block);
  lines ex = {0};
  fuse_ok(g, NULL, &ex);
  const cf_node *f = node(g, "mm_rs");
  assert_int_equal(f->op, CF_OP_MATMULREDUCESCATTER);
  assert_int_equal(f->n_in, 2);
  expect_in(g, "mm_rs", 0, "x", 0);
  expect_in(g, "mm_rs", 1, "w", 0);
  assert_int_equal(cf_node_int(f, CF_A_WORLD_SIZE, 0), 8);
  expect_str(f, CF_A_GROUP, "tp");
  expect_str(f, CF_A_MEMBERS, "mm,rs");
  expect_str(f, CF_A_REASON, "MatMul -> ReduceScatter(sum)");
  assert_int_equal(cf_node_reduction(f), CF_RED_SUM);
  assert_null(cf_node_attr(f, CF_A_COMM_MODE)); /* the basic form: ai_cpu, the default */
  expect_type(g, "mm_rs", 0, CF_DT_BFLOAT16, "128,256");
  absent(g, "mm");
  absent(g, "rs");
  expect_in(g, "y", 0, "mm_rs", 0);
  assert_int_equal(g->n_nodes, 4);
  expect_line(&ex, "MatMul 'mm' -> ReduceScatter 'rs'",
              "MatMul 'mm' -> ReduceScatter 'rs' -> 'mm_rs' (MatmulReduceScatter, world_size 8)");
  round_trip(g);
  lines_free(&ex);
  cf_graph_destroy(g);
}

/* A node that a control dependency orders stays itself: the fused op would
 * run it elsewhere (the MatMul after an AllReduce; an AllGather that an
 * Opaque runs after) */
static void test_control_order(void **state) {
  (void)state;
  static const char xml[] =
      "<graph name='ctl' world_size='8'>\n"
      "  <node name='x' op='Input' dtype='float32' shape='64,32'/>\n"
      "  <node name='w' op='Input' dtype='float32' shape='32,16'/>\n"
      "  <node name='g' op='Input' dtype='float32' shape='8'/>\n"
      "  <node name='ar' op='AllReduce' fusion='0'><input ref='g'/></node>\n"
      "  <node name='mm' op='MatMul'><input ref='x'/><input ref='w'/><after ref='ar'/></node>\n"
      "  <node name='rs' op='ReduceScatter'><input ref='mm'/></node>\n"
      "  <node name='ag' op='AllGather' layout='concat'><input ref='x'/></node>\n"
      "  <node name='m2' op='MatMul'><input ref='ag'/><input ref='w'/></node>\n"
      "  <node name='k' op='Opaque' type='sync' dtype='float32' shape='8'><input ref='g'/><after ref='ag'/></node>\n"
      "  <node name='o1' op='Output'><input ref='rs'/></node>\n"
      "  <node name='o2' op='Output'><input ref='m2'/></node>\n"
      "  <node name='o3' op='Output'><input ref='ar'/></node>\n"
      "  <node name='o4' op='Output'><input ref='k'/></node>\n"
      "</graph>\n";
  cf_graph *g = parse(xml);
  lines ex = {0};
  fuse_ok(g, NULL, &ex);
  assert_int_equal(node(g, "mm")->op, CF_OP_MATMUL);
  assert_int_equal(node(g, "rs")->op, CF_OP_REDUCESCATTER);
  assert_int_equal(node(g, "ag")->op, CF_OP_ALLGATHER);
  assert_int_equal(node(g, "m2")->op, CF_OP_MATMUL);
  assert_int_equal(count_op(g, CF_OP_MATMULREDUCESCATTER) + count_op(g, CF_OP_ALLGATHERMATMUL), 0);
  expect_line(&ex, "MatMul 'mm' -> ReduceScatter 'rs'", "a control dependency orders 'mm'");
  expect_line(&ex, "AllGather 'ag' -> MatMul 'm2'", "a control dependency orders 'ag'");
  const cf_node *mm = node(g, "mm");
  assert_int_equal(mm->n_ctl, 1);
  assert_ptr_equal(&g->nodes[mm->ctl[0]], node(g, "ar"));
  round_trip(g);
  lines_free(&ex);
  cf_graph_destroy(g);
}

/* MatmulAllReduce for an AllReduce that bucketing leaves alone (fusion=0,
 * or fusion=1 without a partner); a bucketed one stays in its bucket */
static void test_mmar_and_buckets(void **state) {
  (void)state;
  static const char xml[] =
      "<graph name='ar' world_size='4'>\n"
      "  <node name='x' op='Input' dtype='float32' shape='64,128'/>\n"
      "  <node name='w' op='Input' dtype='float32' shape='128,32'/>\n"
      "  <node name='g1' op='Input' dtype='float32' shape='16'/>\n"
      "  <node name='m1' op='MatMul'><input ref='x'/><input ref='w'/></node>\n"
      "  <node name='ar1' op='AllReduce' reduction='sum' fusion='0'><input ref='m1'/></node>\n"
      "  <node name='m2' op='MatMul'><input ref='x'/><input ref='w'/></node>\n"
      "  <node name='ar2' op='AllReduce' reduction='sum'><input ref='m2'/></node>\n"
      "  <node name='ar3' op='AllReduce' reduction='mean'><input ref='g1'/></node>\n"
      "  <node name='m5' op='MatMul'><input ref='x'/><input ref='w'/></node>\n"
      "  <node name='ar5' op='AllReduce' reduction='sum' fusion='2' fusion_id='3'><input ref='m5'/></node>\n"
      "  <node name='m6' op='MatMul'><input ref='x'/><input ref='w'/></node>\n"
      "  <node name='ar6' op='AllReduce' reduction='sum' fusion='2' fusion_id='3'><input ref='m6'/></node>\n"
      "  <node name='o1' op='Output'><input ref='ar1'/></node>\n"
      "  <node name='o2' op='Output'><input ref='ar2'/></node>\n"
      "  <node name='o3' op='Output'><input ref='ar3'/></node>\n"
      "  <node name='o5' op='Output'><input ref='ar5'/></node>\n"
      "  <node name='o6' op='Output'><input ref='ar6'/></node>\n"
      "</graph>\n";
  cf_graph *g = parse(xml);
  lines ex = {0};
  fuse_ok(g, NULL, &ex);
  const cf_node *f1 = node(g, "m1_ar1"), *f2 = node(g, "m2_ar2");
  assert_int_equal(f1->op, CF_OP_MATMULALLREDUCE);
  assert_int_equal(f2->op, CF_OP_MATMULALLREDUCE);
  assert_int_equal(cf_node_int(f1, CF_A_WORLD_SIZE, 0), 4);
  assert_null(cf_node_attr(f1, CF_A_GROUP)); /* the world group, as the AllReduce had it */
  expect_str(f2, CF_A_MEMBERS, "m2,ar2");
  expect_str(f2, CF_A_REASON, "MatMul -> AllReduce(sum)");
  expect_type(g, "m1_ar1", 0, CF_DT_FLOAT32, "64,32");
  expect_in(g, "o1", 0, "m1_ar1", 0);
  expect_in(g, "o2", 0, "m2_ar2", 0);
  /* ar5 and ar6 share fusion_id 3: one FusedAllReduce, MatMuls untouched */
  assert_int_equal(count_op(g, CF_OP_FUSEDALLREDUCE), 1);
  node(g, "m5");
  node(g, "m6");
  expect_line(&ex, "MatMul 'm5' -> AllReduce 'ar5'",
              "not fused: 'ar5' is in bucket 'allreduce_bucket_0' (bucketing comes first)");
  expect_line(&ex, "MatMul 'm6' -> AllReduce 'ar6'", "not fused: 'ar6' is in bucket 'allreduce_bucket_0'");
  expect_line(&ex, "MatMul 'm1' -> AllReduce 'ar1'", "-> 'm1_ar1' (MatmulAllReduce, world_size 4)");
  round_trip(g);
  lines_free(&ex);
  cf_graph_destroy(g);

  /* run before the bucketing passes, the MatMul fusion takes them: the
   * order of the pipeline decides, never both */
  g = parse(xml);
  if (fuse(g, "verify,infer,fuse-matmul-collective,fuse-allreduce", NULL, NULL))
    fail_msg("%s", cf_context_errmsg(ctx));
  assert_int_equal(count_op(g, CF_OP_MATMULALLREDUCE), 4);
  assert_int_equal(count_op(g, CF_OP_FUSEDALLREDUCE), 0);
  cf_graph_destroy(g);
}

/* mean is the fused sum times 1/world_size when that is exact; max never */
static void test_reductions(void **state) {
  (void)state;
  static const char xml[] =
      "<graph name='red' world_size='8'>\n"
      "  <group name='six' ranks='0,1,2,3,4,5'/>\n"
      "  <node name='x' op='Input' dtype='bfloat16' shape='96,256'/>\n"
      "  <node name='w' op='Input' dtype='bfloat16' shape='256,32'/>\n"
      "  <node name='m1' op='MatMul'><input ref='x'/><input ref='w'/></node>\n"
      "  <node name='rs1' op='ReduceScatter' reduction='mean'><input ref='m1'/></node>\n"
      "  <node name='m2' op='MatMul'><input ref='x'/><input ref='w'/></node>\n"
      "  <node name='rs2' op='ReduceScatter' reduction='mean' group='six'><input ref='m2'/></node>\n"
      "  <node name='m3' op='MatMul'><input ref='x'/><input ref='w'/></node>\n"
      "  <node name='rs3' op='ReduceScatter' reduction='max'><input ref='m3'/></node>\n"
      "  <node name='m4' op='MatMul'><input ref='x'/><input ref='w'/></node>\n"
      "  <node name='ar4' op='AllReduce' reduction='mean' fusion='0'><input ref='m4'/></node>\n"
      "  <node name='m5' op='MatMul'><input ref='x'/><input ref='w'/></node>\n"
      "  <node name='ar5' op='AllReduce' reduction='prod' fusion='0'><input ref='m5'/></node>\n"
      "  <node name='o1' op='Output'><input ref='rs1'/></node>\n"
      "  <node name='o2' op='Output'><input ref='rs2'/></node>\n"
      "  <node name='o3' op='Output'><input ref='rs3'/></node>\n"
      "  <node name='o4' op='Output'><input ref='ar4'/></node>\n"
      "  <node name='o5' op='Output'><input ref='ar5'/></node>\n"
      "</graph>\n";
  cf_graph *g = parse(xml);
  lines ex = {0};
  fuse_ok(g, NULL, &ex);
  /* rs1: MatmulReduceScatter(sum), then Mul by the bfloat16 scalar 1/8 */
  const cf_node *f = node(g, "m1_rs1"), *k = node(g, "m1_rs1_scale"), *m = node(g, "m1_rs1_mean");
  assert_int_equal(f->op, CF_OP_MATMULREDUCESCATTER);
  assert_int_equal(cf_node_reduction(f), CF_RED_SUM);
  assert_int_equal(k->op, CF_OP_CONSTANT);
  assert_true(cf_node_attr(k, CF_A_VALUE)->v.f == 0.125);
  expect_type(g, "m1_rs1_scale", 0, CF_DT_BFLOAT16, "");
  assert_int_equal(m->op, CF_OP_MUL);
  expect_in(g, "m1_rs1_mean", 0, "m1_rs1", 0);
  expect_in(g, "m1_rs1_mean", 1, "m1_rs1_scale", 0);
  expect_in(g, "o1", 0, "m1_rs1_mean", 0);
  expect_type(g, "m1_rs1_mean", 0, CF_DT_BFLOAT16, "12,32");
  expect_str(f, CF_A_REASON, "MatMul -> ReduceScatter(mean), scaled by 'm1_rs1_mean'");
  expect_line(&ex, "MatMul 'm1' -> ReduceScatter 'rs1'",
              "-> 'm1_rs1' (MatmulReduceScatter, world_size 8); mean: the sum times 1/world_size in "
              "'m1_rs1_mean'");
  expect_in(g, "o4", 0, "m4_ar4_mean", 0);
  assert_int_equal(node(g, "m4_ar4")->op, CF_OP_MATMULALLREDUCE);
  /* 1/6 is not exact; max and prod do not distribute over the matmul */
  assert_int_equal(node(g, "rs2")->op, CF_OP_REDUCESCATTER);
  expect_line(&ex, "MatMul 'm2' -> ReduceScatter 'rs2'",
              "not fused: reduction mean over 6 ranks: 1/6 is not exact, so sum-then-scale would not "
              "give the unfused mean bit for bit");
  assert_int_equal(node(g, "rs3")->op, CF_OP_REDUCESCATTER);
  expect_line(&ex, "MatMul 'm3' -> ReduceScatter 'rs3'",
              "not fused: reduction max does not distribute over the matmul (only sum does, and mean as "
              "a scaled sum)");
  expect_line(&ex, "MatMul 'm5' -> AllReduce 'ar5'", "not fused: reduction prod does not distribute");
  expect_in(g, "rs3", 0, "m3", 0);
  round_trip(g);
  lines_free(&ex);
  cf_graph_destroy(g);
}

/* A MatMul whose product has any user besides its collective stays unfused
 * with it: the fused op would compute the product a second time. That holds
 * for plain users, Outputs and a second collective alike, and for
 * MatmulAllReduce as for MatmulReduceScatter; a MatMul read only by its
 * collective goes. An AllGatherMatmul duplicates nothing: the product whose
 * ReduceScatter stays unfused joins it, and every reader reads its port. */
static void test_shared_matmul(void **state) {
  (void)state;
  static const char xml[] =
      "<graph name='shared' world_size='4'>\n"
      "  <node name='x' op='Input' dtype='float16' shape='64,128'/>\n"
      "  <node name='w' op='Input' dtype='float16' shape='128,64'/>\n"
      "  <node name='mm' op='MatMul'><input ref='x'/><input ref='w'/></node>\n"
      "  <node name='rs' op='ReduceScatter'><input ref='mm'/></node>\n"
      "  <node name='a' op='Add'><input ref='mm'/><input ref='mm'/></node>\n"
      "  <node name='m2' op='MatMul'><input ref='x'/><input ref='w'/></node>\n"
      "  <node name='rs2' op='ReduceScatter'><input ref='m2'/></node>\n"
      "  <node name='ar2' op='AllReduce' fusion='0'><input ref='m2'/></node>\n"
      "  <node name='m3' op='MatMul'><input ref='x'/><input ref='w'/></node>\n"
      "  <node name='ar3' op='AllReduce' fusion='0'><input ref='m3'/></node>\n"
      "  <node name='m4' op='MatMul'><input ref='x'/><input ref='w'/></node>\n"
      "  <node name='rs4' op='ReduceScatter'><input ref='m4'/></node>\n"
      "  <node name='m5' op='MatMul'><input ref='x'/><input ref='w'/></node>\n"
      "  <node name='rs5' op='ReduceScatter'><input ref='m5'/></node>\n"
      "  <node name='y' op='Output'><input ref='rs'/></node>\n"
      "  <node name='y2' op='Output'><input ref='mm'/></node>\n"
      "  <node name='y3' op='Output'><input ref='a'/></node>\n"
      "  <node name='y4' op='Output'><input ref='rs2'/></node>\n"
      "  <node name='y5' op='Output'><input ref='ar2'/></node>\n"
      "  <node name='y6' op='Output'><input ref='ar3'/></node>\n"
      "  <node name='y7' op='Output'><input ref='m3'/></node>\n"
      "  <node name='y8' op='Output'><input ref='rs4'/></node>\n"
      "  <node name='o1' op='Output'><input ref='m4'/></node>\n"
      "  <node name='o2' op='Output'><input ref='m4'/></node>\n"
      "  <node name='o3' op='Output'><input ref='m4'/></node>\n"
      "  <node name='o4' op='Output'><input ref='m4'/></node>\n"
      "  <node name='y9' op='Output'><input ref='rs5'/></node>\n"
      "</graph>\n";
  cf_graph *g = parse(xml);
  lines ex = {0};
  fuse_ok(g, NULL, &ex);
  /* only m5, read by rs5 alone, fuses */
  assert_int_equal(count_op(g, CF_OP_MATMULREDUCESCATTER), 1);
  assert_int_equal(count_op(g, CF_OP_MATMULALLREDUCE), 0);
  assert_int_equal(count_op(g, CF_OP_MATMUL), 4);
  absent(g, "m5");
  expect_in(g, "y9", 0, "m5_rs5", 0);
  expect_str(node(g, "m5_rs5"), CF_A_REASON, "MatMul -> ReduceScatter(sum)");
  expect_line(&ex, "MatMul 'm5' -> ReduceScatter 'rs5'", "-> 'm5_rs5' (MatmulReduceScatter, world_size 4)");
  /* the others stay as they were, each with its reason */
  expect_in(g, "rs", 0, "mm", 0);
  expect_in(g, "a", 0, "mm", 0);
  expect_in(g, "y2", 0, "mm", 0);
  expect_in(g, "mm", 0, "x", 0);
  expect_line(&ex, "MatMul 'mm' -> ReduceScatter 'rs'",
              "MatMul 'mm' -> ReduceScatter 'rs' not fused: its result is also used by 'a', 'y2' (fusing "
              "would compute the product twice)");
  /* two collectives on one product: fusing both would compute it twice */
  expect_in(g, "rs2", 0, "m2", 0);
  expect_in(g, "ar2", 0, "m2", 0);
  expect_line(&ex, "MatMul 'm2' -> ReduceScatter 'rs2'",
              "not fused: its result is also used by 'ar2' (fusing would compute the product twice)");
  expect_line(&ex, "MatMul 'm2' -> AllReduce 'ar2'",
              "not fused: its result is also used by 'rs2' (fusing would compute the product twice)");
  expect_in(g, "ar3", 0, "m3", 0);
  expect_line(&ex, "MatMul 'm3' -> AllReduce 'ar3'",
              "not fused: its result is also used by 'y7' (fusing would compute the product twice)");
  expect_in(g, "rs4", 0, "m4", 0);
  expect_line(&ex, "MatMul 'm4' -> ReduceScatter 'rs4'",
              "not fused: its result is also used by 'o1', 'o2', 'o3' and 1 more (fusing would compute "
              "the product twice)");
  for (int i = 0; i < ex.n; i++) assert_null(strstr(ex.v[i], "again"));
  round_trip(g);
  lines_free(&ex);
  cf_graph_destroy(g);

  /* an AllGather's MatMul whose product a ReduceScatter and an Output read:
   * the ReduceScatter stays unfused, the product joins the AllGatherMatmul
   * once, and both readers read its port 0 */
  static const char agx[] =
      "<graph name='agshared' world_size='4'>\n"
      "  <node name='x' op='Input' dtype='float16' shape='16,128'/>\n"
      "  <node name='w' op='Input' dtype='float16' shape='128,64'/>\n"
      "  <node name='ag' op='AllGather' layout='concat'><input ref='x'/></node>\n"
      "  <node name='q' op='MatMul'><input ref='ag'/><input ref='w'/></node>\n"
      "  <node name='rs' op='ReduceScatter'><input ref='q'/></node>\n"
      "  <node name='y' op='Output'><input ref='rs'/></node>\n"
      "  <node name='yq' op='Output'><input ref='q'/></node>\n"
      "  <node name='yg' op='Output'><input ref='ag'/></node>\n"
      "</graph>\n";
  g = parse(agx);
  fuse_ok(g, NULL, &ex);
  assert_int_equal(count_op(g, CF_OP_MATMUL), 0);
  assert_int_equal(count_op(g, CF_OP_MATMULREDUCESCATTER), 0);
  assert_int_equal(count_op(g, CF_OP_ALLGATHERMATMUL), 1);
  expect_in(g, "rs", 0, "ag_q", 0);
  expect_in(g, "yq", 0, "ag_q", 0);
  expect_in(g, "yg", 0, "ag_q", 1);
  expect_line(&ex, "MatMul 'q' -> ReduceScatter 'rs'",
              "not fused: its result is also used by 'yq' (fusing would compute the product twice)");
  expect_line(&ex, "AllGather 'ag' -> MatMul 'q'", "-> 'ag_q' port 0 (AllGatherMatmul, 1 product;");
  round_trip(g);
  lines_free(&ex);
  cf_graph_destroy(g);
}

static const char quant_xml[] =
    "<graph name='quant' world_size='4'>\n"
    "  <group name='tp' ranks='0,1,2,3'/>\n"
    "  <node name='x1' op='Input' dtype='int8' shape='64,256'/>\n"
    "  <node name='x2' op='Input' dtype='int8' shape='256,32'/>\n"
    "  <node name='s1' op='Input' dtype='float32' shape='64,1'/>\n"
    "  <node name='s2' op='Input' dtype='float32' shape='1,32'/>\n"
    "  <node name='bz' op='Input' dtype='int32' shape='32' init='zeros'/>\n"
    "  <node name='br' op='Input' dtype='int32' shape='32' init='random'/>\n"
    "  <node name='q1' op='QuantMatMul' output_dtype='float16'>"
    "<input ref='x1'/><input ref='x2'/><input ref='s1'/><input ref='s2'/></node>\n"
    "  <node name='rs1' op='ReduceScatter' group='tp'><input ref='q1'/></node>\n"
    "  <node name='q2' op='QuantMatMul'>"
    "<input ref='x1'/><input ref='x2'/><input ref='s1'/><input ref='s2'/><input ref='bz'/></node>\n"
    "  <node name='rs2' op='ReduceScatter' group='tp'><input ref='q2'/></node>\n"
    "  <node name='q3' op='QuantMatMul'>"
    "<input ref='x1'/><input ref='x2'/><input ref='s1'/><input ref='s2'/><input ref='br'/></node>\n"
    "  <node name='rs3' op='ReduceScatter' group='tp'><input ref='q3'/></node>\n"
    "  <node name='q4' op='QuantMatMul'>"
    "<input ref='x1'/><input ref='x2'/><input ref='s1'/><input ref='s2'/></node>\n"
    "  <node name='ar4' op='AllReduce' fusion='0' group='tp'><input ref='q4'/></node>\n"
    "  <node name='o1' op='Output'><input ref='rs1'/></node>\n"
    "  <node name='o2' op='Output'><input ref='rs2'/></node>\n"
    "  <node name='o3' op='Output'><input ref='rs3'/></node>\n"
    "  <node name='o4' op='Output'><input ref='ar4'/></node>\n"
    "</graph>\n";

/* QuantMatMul (x1, x2, x1_scale, x2_scale, [bias]) -> ReduceScatter becomes
 * MatmulReduceScatter (x1, x2, [bias], x1_scale, x2_scale) in comm_mode aiv */
static void test_quant(void **state) {
  (void)state;
  cf_graph *g = parse(quant_xml);
  lines ex = {0};
  fuse_ok(g, NULL, &ex);
  const cf_node *f = node(g, "q1_rs1");
  assert_int_equal(f->op, CF_OP_MATMULREDUCESCATTER);
  assert_int_equal(f->n_in, 4);
  const char *want1[] = {"x1", "x2", "s1", "s2"};
  for (int j = 0; j < 4; j++) expect_in(g, "q1_rs1", j, want1[j], 0);
  assert_int_equal(cf_node_int(f, CF_A_OUTPUT_DTYPE, 0), CF_DT_FLOAT16);
  expect_str(f, CF_A_COMM_MODE, "aiv");
  expect_str(f, CF_A_GROUP, "tp");
  expect_str(f, CF_A_REASON, "QuantMatMul -> ReduceScatter(sum)");
  expect_type(g, "q1_rs1", 0, CF_DT_FLOAT16, "16,32");
  expect_line(&ex, "QuantMatMul 'q1' -> ReduceScatter 'rs1'",
              "-> 'q1_rs1' (quantized MatmulReduceScatter, world_size 4)");
  /* a zero bias moves to operand 2 */
  const char *want2[] = {"x1", "x2", "bz", "s1", "s2"};
  assert_int_equal(node(g, "q2_rs2")->n_in, 5);
  for (int j = 0; j < 5; j++) expect_in(g, "q2_rs2", j, want2[j], 0);
  expect_type(g, "q2_rs2", 0, CF_DT_BFLOAT16, "16,32"); /* output_dtype's default */
  /* a bias that may be non-zero: torch_npu's fused op refuses it */
  assert_int_equal(node(g, "rs3")->op, CF_OP_REDUCESCATTER);
  expect_line(&ex, "QuantMatMul 'q3' -> ReduceScatter 'rs3'",
              "not fused: MatmulReduceScatter would reject it: bias 'br' must be absent or zero (an "
              "Input/Constant with init=\"zeros\")");
  assert_int_equal(node(g, "ar4")->op, CF_OP_ALLREDUCE);
  expect_line(&ex, "QuantMatMul 'q4' -> AllReduce 'ar4'",
              "not fused: MatmulAllReduce has no quantized form (only MatmulReduceScatter takes x1_scale "
              "and x2_scale)");
  absent(g, "q1");
  absent(g, "q2");
  round_trip(g);
  lines_free(&ex);
  cf_graph_destroy(g);

  /* quantized scales of the wrong shape never reach the pass: the
   * QuantMatMul itself is rejected, as a MatmulReduceScatter would be */
  char *bad = strdup(quant_xml);
  memcpy(strstr(bad, "shape='64,1'"), "shape='64,2'", 12);
  g = (cf_graph *)1;
  ASSERT_ERR(cf_graph_parse(ctx, "q.xml", bad, strlen(bad), &g), CF_ERR_INVALID,
             "q.xml:9: error: node 'q1': x1_scale must have shape (64,1) (per token)");
  assert_null(g);
  free(bad);
  bad = strdup(quant_xml);
  memcpy(strstr(bad, "shape='1,32'"), "shape='32,1'", 12);
  ASSERT_ERR(cf_graph_parse(ctx, "q.xml", bad, strlen(bad), &g), CF_ERR_INVALID,
             "node 'q1': x2_scale must have shape (1,32) (per channel)");
  free(bad);
}

/* the fused op's dtype rules decide: a refusal is explained, nothing built */
static void test_dtype_rules(void **state) {
  (void)state;
  static const char xml[] =
      "<graph name='dt' world_size='2'>\n"
      "  <node name='a' op='Input' dtype='float64' shape='8,16'/>\n"
      "  <node name='b' op='Input' dtype='float64' shape='16,4'/>\n"
      "  <node name='c' op='Input' dtype='int8' shape='8,16'/>\n"
      "  <node name='d' op='Input' dtype='int8' shape='16,4'/>\n"
      "  <node name='m64' op='MatMul'><input ref='a'/><input ref='b'/></node>\n"
      "  <node name='r64' op='ReduceScatter'><input ref='m64'/></node>\n"
      "  <node name='mi8' op='MatMul'><input ref='c'/><input ref='d'/></node>\n"
      "  <node name='ri8' op='ReduceScatter'><input ref='mi8'/></node>\n"
      "  <node name='o1' op='Output'><input ref='r64'/></node>\n"
      "  <node name='o2' op='Output'><input ref='ri8'/></node>\n"
      "</graph>\n";
  cf_graph *g = parse(xml);
  lines ex = {0};
  int before = g->n_nodes;
  fuse_ok(g, NULL, &ex);
  assert_int_equal(g->n_nodes, before);
  assert_int_equal(count_op(g, CF_OP_MATMULREDUCESCATTER), 0);
  expect_line(&ex, "MatMul 'm64' -> ReduceScatter 'r64'",
              "not fused: MatmulReduceScatter would reject it: x1 must be float16, bfloat16, float32 or "
              "int8 (quantized), got float64");
  expect_line(&ex, "MatMul 'mi8' -> ReduceScatter 'ri8'",
              "not fused: MatmulReduceScatter would reject it: int8 operands need x1_scale and x2_scale");
  expect_in(g, "o1", 0, "r64", 0);
  expect_in(g, "r64", 0, "m64", 0);
  lines_free(&ex);
  cf_graph_destroy(g);
}

/* m % world_size: a ReduceScatter already needs it, so such a graph is
 * rejected before any pass; a MatmulReduceScatter written directly too. An
 * AllReduce has no such rule, and MatmulAllReduce neither. */
static void test_m_not_divisible(void **state) {
  (void)state;
  static const char xml[] =
      "<graph name='m' world_size='8'>\n"
      "  <node name='x' op='Input' dtype='float16' shape='1004,256'/>\n"
      "  <node name='w' op='Input' dtype='float16' shape='256,64'/>\n"
      "  <node name='mm' op='MatMul'><input ref='x'/><input ref='w'/></node>\n"
      "  <node name='c' op='ReduceScatter'><input ref='mm'/></node>\n"
      "</graph>\n";
  cf_graph *g = NULL;
  ASSERT_ERR(cf_graph_parse(ctx, "m.xml", xml, strlen(xml), &g), CF_ERR_INVALID,
             "node 'c': dim0=1004 is not divisible by rank_size=8");
  char *t = strdup(xml);
  memcpy(strstr(t, "'ReduceScatter'>"), "'AllReduce'    >", 16);
  g = parse(t);
  fuse_ok(g, NULL, NULL);
  assert_int_equal(node(g, "mm_c")->op, CF_OP_MATMULALLREDUCE);
  cf_graph_destroy(g);
  free(t);
  static const char direct[] =
      "<graph name='d' world_size='8'>\n"
      "  <node name='x' op='Input' dtype='float16' shape='1004,256'/>\n"
      "  <node name='w' op='Input' dtype='float16' shape='256,64'/>\n"
      "  <node name='f' op='MatmulReduceScatter' world_size='8'><input ref='x'/><input ref='w'/></node>\n"
      "</graph>\n";
  ASSERT_ERR(cf_graph_parse(ctx, "d.xml", direct, strlen(direct), &g), CF_ERR_INVALID,
             "node 'f': m=1004 is not divisible by world_size=8");
}

/* with a target the pass builds only what the target accepts */
static void test_target(void **state) {
  (void)state;
  static const char xml[] =
      "<graph name='a2' world_size='16'>\n"
      "  <group name='g8' ranks='0,1,2,3,4,5,6,7'/>\n"
      "  <node name='xb' op='Input' dtype='bfloat16' shape='256,512'/>\n"
      "  <node name='wb' op='Input' dtype='bfloat16' shape='512,64'/>\n"
      "  <node name='xk' op='Input' dtype='bfloat16' shape='256,128'/>\n"
      "  <node name='wk' op='Input' dtype='bfloat16' shape='128,64'/>\n"
      "  <node name='xf' op='Input' dtype='float32' shape='256,512'/>\n"
      "  <node name='wf' op='Input' dtype='float32' shape='512,64'/>\n"
      "  <node name='m16' op='MatMul'><input ref='xb'/><input ref='wb'/></node>\n"
      "  <node name='r16' op='ReduceScatter'><input ref='m16'/></node>\n"
      "  <node name='mk' op='MatMul'><input ref='xk'/><input ref='wk'/></node>\n"
      "  <node name='rk' op='ReduceScatter' group='g8'><input ref='mk'/></node>\n"
      "  <node name='mf' op='MatMul'><input ref='xf'/><input ref='wf'/></node>\n"
      "  <node name='rf' op='ReduceScatter' group='g8'><input ref='mf'/></node>\n"
      "  <node name='ok' op='MatMul'><input ref='xb'/><input ref='wb'/></node>\n"
      "  <node name='rok' op='ReduceScatter' group='g8'><input ref='ok'/></node>\n"
      "  <node name='o1' op='Output'><input ref='r16'/></node>\n"
      "  <node name='o2' op='Output'><input ref='rk'/></node>\n"
      "  <node name='o3' op='Output'><input ref='rf'/></node>\n"
      "  <node name='o4' op='Output'><input ref='rok'/></node>\n"
      "</graph>\n";
  const cf_target *a2 = cf_target_find("atlas-a2");
  assert_non_null(a2);
  cf_graph *g = parse(xml);
  lines ex = {0};
  fuse_ok(g, "atlas-a2", &ex);
  assert_int_equal(count_op(g, CF_OP_MATMULREDUCESCATTER), 1);
  assert_int_equal(node(g, "ok_rok")->op, CF_OP_MATMULREDUCESCATTER);
  expect_line(&ex, "MatMul 'm16' -> ReduceScatter 'r16'",
              "not fused: target atlas-a2: world_size=16 not in {2,4,8} (torch_npu.npu_mm_reduce_scatter_base)");
  expect_line(&ex, "MatMul 'mk' -> ReduceScatter 'rk'", "not fused: target atlas-a2: k=128 outside [256, 65535)");
  expect_line(&ex, "MatMul 'mf' -> ReduceScatter 'rf'",
              "not fused: target atlas-a2: MatmulReduceScatter does not support dtype float32");
  assert_int_equal(cf_target_check(g, a2), CF_OK);
  lines_free(&ex);
  cf_graph_destroy(g);

  /* without the target all four fuse, and the result breaks atlas-a2 */
  g = parse(xml);
  fuse_ok(g, NULL, NULL);
  assert_int_equal(count_op(g, CF_OP_MATMULREDUCESCATTER), 4);
  ASSERT_ERR(cf_target_check(g, a2), CF_ERR_INVALID, "target atlas-a2:");
  cf_graph_destroy(g);

  /* an unknown target is a usage error */
  g = parse(xml);
  ASSERT_ERR(fuse(g, NULL, "tpu-v9", NULL), CF_ERR_USAGE, "unknown target 'tpu-v9'");
  cf_graph_destroy(g);
}

/* Atlas A2 runs the ai_cpu fused ops of one graph on one communicator; the
 * quantized form (comm_mode aiv) is exempt. */
static void test_target_one_group(void **state) {
  (void)state;
  static const char xml[] =
      "<graph name='groups' world_size='8'>\n"
      "  <group name='a' ranks='0,1,2,3'/>\n"
      "  <group name='b' ranks='4,5,6,7'/>\n"
      "  <node name='x' op='Input' dtype='float16' shape='64,512'/>\n"
      "  <node name='w' op='Input' dtype='float16' shape='512,512'/>\n"
      "  <node name='x1' op='Input' dtype='int8' shape='64,512'/>\n"
      "  <node name='x2' op='Input' dtype='int8' shape='512,64'/>\n"
      "  <node name='s1' op='Input' dtype='float32' shape='64,1'/>\n"
      "  <node name='s2' op='Input' dtype='float32' shape='1,64'/>\n"
      "  <node name='ma' op='MatMul'><input ref='x'/><input ref='w'/></node>\n"
      "  <node name='ra' op='ReduceScatter' group='a'><input ref='ma'/></node>\n"
      "  <node name='mb' op='MatMul'><input ref='x'/><input ref='w'/></node>\n"
      "  <node name='rb' op='ReduceScatter' group='b'><input ref='mb'/></node>\n"
      "  <node name='q' op='QuantMatMul'><input ref='x1'/><input ref='x2'/><input ref='s1'/><input ref='s2'/></node>\n"
      "  <node name='rq' op='ReduceScatter' group='b'><input ref='q'/></node>\n"
      "  <node name='ag' op='AllGather' layout='concat' group='b'><input ref='x'/></node>\n"
      "  <node name='mg' op='MatMul'><input ref='ag'/><input ref='w'/></node>\n"
      "  <node name='o1' op='Output'><input ref='ra'/></node>\n"
      "  <node name='o2' op='Output'><input ref='rb'/></node>\n"
      "  <node name='o3' op='Output'><input ref='rq'/></node>\n"
      "  <node name='o4' op='Output'><input ref='mg'/></node>\n"
      "</graph>\n";
  cf_graph *g = parse(xml);
  lines ex = {0};
  fuse_ok(g, "atlas-a2", &ex);
  assert_int_equal(node(g, "ma_ra")->op, CF_OP_MATMULREDUCESCATTER);
  assert_int_equal(node(g, "q_rq")->op, CF_OP_MATMULREDUCESCATTER);
  assert_int_equal(node(g, "rb")->op, CF_OP_REDUCESCATTER);
  assert_int_equal(node(g, "ag")->op, CF_OP_ALLGATHER);
  expect_line(&ex, "MatMul 'mb' -> ReduceScatter 'rb'",
              "not fused: target atlas-a2: fused matmul ops in comm_mode ai_cpu must share one "
              "communicator, and they use group 'a' already");
  expect_line(&ex, "AllGather 'ag' -> MatMul 'mg'", "not fused: target atlas-a2: fused matmul ops in comm_mode "
                                                    "ai_cpu must share one communicator");
  assert_int_equal(cf_target_check(g, cf_target_find("atlas-a2")), CF_OK);
  /* atlas-a3 has no such rule */
  cf_graph_destroy(g);
  g = parse(xml);
  fuse_ok(g, "atlas-a3", NULL);
  assert_int_equal(count_op(g, CF_OP_MATMULREDUCESCATTER), 3);
  assert_int_equal(count_op(g, CF_OP_ALLGATHERMATMUL), 1);
  /* ... and cf_target_check enforces the rule on a2 */
  ASSERT_ERR(cf_target_check(g, cf_target_find("atlas-a2")), CF_ERR_INVALID,
             "must share one communicator: group 'b' here, 'a' on 'ma_ra'");
  lines_free(&ex);
  cf_graph_destroy(g);
}

/* ================= AllGather -> MatMul ================= */

/* one AllGather feeding q, k and v: one AllGatherMatmul with three products;
 * the other users of the gathered value read its last port */
static void test_agmm_shared(void **state) {
  (void)state;
  static const char xml[] =
      "<graph name='qkv' world_size='4'>\n"
      "  <group name='tp' ranks='0,1,2,3'/>\n"
      "  <node name='x' op='Input' dtype='float16' shape='16,64'/>\n"
      "  <node name='wq' op='Input' dtype='float16' shape='64,32'/>\n"
      "  <node name='wk' op='Input' dtype='float16' shape='64,32'/>\n"
      "  <node name='wv' op='Input' dtype='float16' shape='64,16'/>\n"
      "  <node name='wt' op='Input' dtype='float16' shape='8,64'/>\n"
      "  <node name='ag' op='AllGather' layout='concat' group='tp'><input ref='x'/></node>\n"
      "  <node name='q' op='MatMul'><input ref='ag'/><input ref='wq'/></node>\n"
      "  <node name='k' op='MatMul'><input ref='ag'/><input ref='wk'/></node>\n"
      "  <node name='v' op='MatMul'><input ref='ag'/><input ref='wv'/></node>\n"
      "  <node name='p' op='MatMul'><input ref='wt'/><input ref='ag'/></node>\n"
      "  <node name='qk' op='Add'><input ref='q'/><input ref='k'/></node>\n"
      "  <node name='oq' op='Output'><input ref='qk'/></node>\n"
      "  <node name='ov' op='Output'><input ref='v'/></node>\n"
      "  <node name='og' op='Output'><input ref='ag'/></node>\n"
      "  <node name='op' op='Output'><input ref='p'/></node>\n"
      "</graph>\n";
  cf_graph *g = parse(xml);
  lines ex = {0};
  fuse_ok(g, NULL, &ex);
  const cf_node *f = node(g, "ag_matmul");
  assert_int_equal(f->op, CF_OP_ALLGATHERMATMUL);
  assert_int_equal(f->n_in, 4);
  assert_int_equal(f->n_out, 4);
  const char *want[] = {"x", "wq", "wk", "wv"};
  for (int j = 0; j < 4; j++) expect_in(g, "ag_matmul", j, want[j], 0);
  expect_str(f, CF_A_MEMBERS, "q,k,v,ag");
  expect_str(f, CF_A_GROUP, "tp");
  expect_str(f, CF_A_REASON, "AllGather(concat) -> 3 MatMuls");
  assert_int_equal(cf_node_int(f, CF_A_WORLD_SIZE, 0), 4);
  expect_type(g, "ag_matmul", 0, CF_DT_FLOAT16, "64,32");
  expect_type(g, "ag_matmul", 2, CF_DT_FLOAT16, "64,16");
  expect_type(g, "ag_matmul", 3, CF_DT_FLOAT16, "64,64");
  expect_in(g, "qk", 0, "ag_matmul", 0);
  expect_in(g, "qk", 1, "ag_matmul", 1);
  expect_in(g, "ov", 0, "ag_matmul", 2);
  expect_in(g, "og", 0, "ag_matmul", 3);
  expect_in(g, "p", 1, "ag_matmul", 3);
  absent(g, "ag");
  absent(g, "q");
  expect_line(&ex, "AllGather 'ag' -> MatMul 'q'",
              "-> 'ag_matmul' port 0 (AllGatherMatmul, 3 products; the gathered x1 is port 3)");
  expect_line(&ex, "AllGather 'ag' -> MatMul 'v'", "-> 'ag_matmul' port 2");
  expect_line(&ex, "AllGather 'ag' -> MatMul 'p'",
              "not fused: 'ag' is x2 of the MatMul (AllGatherMatmul gathers x1)");
  round_trip(g);
  lines_free(&ex);
  cf_graph_destroy(g);
}

static void test_agmm_illegal(void **state) {
  (void)state;
  static const char xml[] =
      "<graph name='agx' world_size='4'>\n"
      "  <node name='xs' op='Input' dtype='float32' shape='64'/>\n"
      "  <node name='x' op='Input' dtype='float32' shape='16,64'/>\n"
      "  <node name='xa' op='Input' dtype='float32' shape='16,64'/>\n"
      "  <node name='xb' op='Input' dtype='float32' shape='16,64'/>\n"
      "  <node name='w' op='Input' dtype='float32' shape='64,64'/>\n"
      "  <node name='c' op='Input' dtype='int8' shape='16,64'/>\n"
      "  <node name='d' op='Input' dtype='int8' shape='64,64'/>\n"
      "  <node name='s1' op='Input' dtype='float32' shape='64,1'/>\n"
      "  <node name='s2' op='Input' dtype='float32' shape='1,64'/>\n"
      /* stack: a new leading dimension, not m */
      "  <node name='ags' op='AllGather' layout='stack'><input ref='xs'/></node>\n"
      "  <node name='ms' op='MatMul'><input ref='ags'/><input ref='w'/></node>\n"
      /* x2 computed from the gathered value */
      "  <node name='ag1' op='AllGather' layout='concat'><input ref='x'/></node>\n"
      "  <node name='w1' op='Opaque' type='f' dtype='float32' shape='64,64'><input ref='ag1'/></node>\n"
      "  <node name='m1' op='MatMul'><input ref='ag1'/><input ref='w1'/></node>\n"
      /* each x2 depends on the other AllGather: only one can fuse */
      "  <node name='ag_a' op='AllGather' layout='concat'><input ref='xa'/></node>\n"
      "  <node name='ag_b' op='AllGather' layout='concat'><input ref='xb'/></node>\n"
      "  <node name='wa' op='Opaque' type='f' dtype='float32' shape='64,64'><input ref='ag_b'/></node>\n"
      "  <node name='wb' op='Opaque' type='f' dtype='float32' shape='64,64'><input ref='ag_a'/></node>\n"
      "  <node name='ma' op='MatMul'><input ref='ag_a'/><input ref='wa'/></node>\n"
      "  <node name='mb' op='MatMul'><input ref='ag_b'/><input ref='wb'/></node>\n"
      /* the MatMul goes with its ReduceScatter instead */
      "  <node name='agc' op='AllGather' layout='concat'><input ref='x'/></node>\n"
      "  <node name='mc' op='MatMul'><input ref='agc'/><input ref='w'/></node>\n"
      "  <node name='rsc' op='ReduceScatter'><input ref='mc'/></node>\n"
      /* no quantized AllGatherMatmul; no int8 one */
      "  <node name='agq' op='AllGather' layout='concat'><input ref='c'/></node>\n"
      "  <node name='mq' op='QuantMatMul'><input ref='agq'/><input ref='d'/><input ref='s1'/><input "
      "ref='s2'/></node>\n"
      "  <node name='mi' op='MatMul'><input ref='agq'/><input ref='d'/></node>\n"
      /* ag @ ag */
      "  <node name='agg' op='AllGather' layout='concat'><input ref='x'/></node>\n"
      "  <node name='m2' op='MatMul'><input ref='agg'/><input ref='agg'/></node>\n"
      "  <node name='o1' op='Output'><input ref='ms'/></node>\n"
      "  <node name='o2' op='Output'><input ref='m1'/></node>\n"
      "  <node name='o3' op='Output'><input ref='ma'/></node>\n"
      "  <node name='o4' op='Output'><input ref='mb'/></node>\n"
      "  <node name='o5' op='Output'><input ref='rsc'/></node>\n"
      "  <node name='o6' op='Output'><input ref='mq'/></node>\n"
      "  <node name='o7' op='Output'><input ref='mi'/></node>\n"
      "  <node name='o8' op='Output'><input ref='m2'/></node>\n"
      "</graph>\n";
  cf_graph *g = parse(xml);
  lines ex = {0};
  fuse_ok(g, NULL, &ex);
  expect_line(&ex, "AllGather 'ags' -> MatMul 'ms'",
              "not fused: layout stack gathers along a new leading dimension, not along m");
  expect_line(&ex, "AllGather 'ag1' -> MatMul 'm1'",
              "not fused: x2 'w1' depends on 'ag1' (AllGatherMatmul needs x2 before the gather starts)");
  expect_line(&ex, "AllGather 'ag_b' -> MatMul 'mb'", "-> 'ag_b_mb' port 0 (AllGatherMatmul, 1 product");
  expect_line(&ex, "AllGather 'ag_a' -> MatMul 'ma'",
              "not fused: x2 'wa' depends on AllGather 'ag_b', which comes after 'ag_a'");
  expect_line(&ex, "AllGather 'agc' -> MatMul 'mc'", "not fused: 'mc' is fused into 'mc_rsc' with its collective");
  expect_line(&ex, "AllGather 'agq' -> QuantMatMul 'mq'", "not fused: AllGatherMatmul has no quantized form");
  expect_line(&ex, "AllGather 'agq' -> MatMul 'mi'",
              "not fused: AllGatherMatmul would reject it: x1 must be float16, bfloat16 or float32, got int8");
  expect_line(&ex, "AllGather 'agg' -> MatMul 'm2'", "not fused: x2 is the gathered value itself");
  assert_int_equal(count_op(g, CF_OP_ALLGATHERMATMUL), 1);
  assert_int_equal(node(g, "ag_a")->op, CF_OP_ALLGATHER);
  expect_in(g, "wa", 0, "ag_b_mb", 1); /* the gathered x1 of the fused ag_b */
  expect_in(g, "wb", 0, "ag_a", 0);
  expect_in(g, "mc_rsc", 0, "agc", 0);
  assert_int_equal(node(g, "agc")->op, CF_OP_ALLGATHER);
  round_trip(g);
  lines_free(&ex);
  cf_graph_destroy(g);
}

/* ================= compile --json ================= */

/* The driver next to this test (build/collfuse), or NULL. */
static const char *cli_path(char *buf, size_t len) {
  char self[512];
  ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
  if (n <= 0) return NULL;
  self[n] = 0;
  char *slash = strrchr(self, '/');
  if (!slash) return NULL;
  *slash = 0;
  snprintf(buf, len, "%s/../collfuse", self);
  return access(buf, X_OK) == 0 ? buf : NULL;
}

static char *run_cmd(const char *cmd) {
  FILE *p = popen(cmd, "r");
  if (!p) fail_msg("popen failed");
  size_t cap = 1 << 16, n = 0;
  char *s = malloc(cap);
  size_t k;
  while ((k = fread(s + n, 1, cap - 1 - n, p)) > 0) n += k;
  s[n] = 0;
  int rc = pclose(p);
  if (rc != 0) fail_msg("'%s' exited with %d: %s", cmd, rc, s);
  return s;
}

static void test_json_report(void **state) {
  (void)state;
  char cli[600];
  if (!cli_path(cli, sizeof cli)) {
    print_message("collfuse driver not found next to the test: skipped\n");
    skip();
  }
  static const char xml[] =
      "<graph name='js' world_size='4'>\n"
      "  <node name='x' op='Input' dtype='float16' shape='16,64'/>\n"
      "  <node name='wq' op='Input' dtype='float16' shape='64,64'/>\n"
      "  <node name='wk' op='Input' dtype='float16' shape='64,64'/>\n"
      "  <node name='ag' op='AllGather' layout='concat'><input ref='x'/></node>\n"
      "  <node name='q' op='MatMul'><input ref='ag'/><input ref='wq'/></node>\n"
      "  <node name='k' op='MatMul'><input ref='ag'/><input ref='wk'/></node>\n"
      "  <node name='mm' op='MatMul'><input ref='q'/><input ref='wk'/></node>\n"
      "  <node name='rs' op='ReduceScatter'><input ref='mm'/></node>\n"
      "  <node name='ok' op='Output'><input ref='k'/></node>\n"
      "  <node name='y' op='Output'><input ref='rs'/></node>\n"
      "</graph>\n";
  char dir[] = "/tmp/cf-fmj-XXXXXX", path[64], cmd[1600];
  if (!mkdtemp(dir)) fail_msg("mkdtemp failed");
  snprintf(path, sizeof path, "%s/g.xml", dir);
  FILE *f = fopen(path, "w");
  assert_non_null(f);
  fputs(xml, f);
  fclose(f);
  snprintf(cmd, sizeof cmd, "'%s' compile '%s' --passes %s --json --explain 2>'%s/err'", cli, path, PASSES, dir);
  char *out = run_cmd(cmd);
  static const char *want[] = {
      "\"collectives_before\":2,\"collectives_after\":2",
      "\"buckets\":[]",
      "{\"name\":\"ag_matmul\",\"op\":\"AllGatherMatmul\",\"matmul\":\"q,k\",\"collective\":\"ag\","
      "\"matmuls\":[\"q\",\"k\"]}",
      "{\"name\":\"mm_rs\",\"op\":\"MatmulReduceScatter\",\"matmul\":\"mm\",\"collective\":\"rs\","
      "\"matmuls\":[\"mm\"]}",
      "\"fuse-matmul-collective\":",
  };
  for (size_t i = 0; i < sizeof want / sizeof want[0]; i++)
    if (!strstr(out, want[i])) fail_msg("compile --json: '%s' lacks '%s'", out, want[i]);
  free(out);
  snprintf(cmd, sizeof cmd, "cat '%s/err'", dir);
  char *err = run_cmd(cmd);
  if (!strstr(err, "explain: AllGather 'ag' -> MatMul 'k' -> 'ag_matmul' port 1 (AllGatherMatmul, 2 products"))
    fail_msg("--explain on stderr: '%s'", err);
  free(err);
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  free(run_cmd(cmd));
}

/* ================= random graphs ================= */

static uint32_t rnd(uint64_t *s, uint32_t n) {
  *s ^= *s << 13;
  *s ^= *s >> 7;
  *s ^= *s << 17;
  return (uint32_t)(*s % n);
}

/* A random DAG over (m,8) activations and (8,8) weights, world 4: AllGather
 * (concat, now and then stack), MatMul, ReduceScatter (sum/mean/max),
 * AllReduce (sum/mean), and weights computed by Opaque nodes from anything
 * before them (so x2 may depend on an AllGather). */
static char *random_graph(uint64_t seed) {
  enum { MAXV = 64 };
  char *text = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&text, &len);
  char a[MAXV][16], w[MAXV][16], all[2 * MAXV][16];
  int am[MAXV], na = 0, nw = 0, nall = 0, id = 0;
  bool used[2 * MAXV] = {0};
  fprintf(f, "<graph name='r' world_size='4'>\n");
  for (int i = 0; i < 2; i++) {
    am[na] = i ? 32 : 8;
    snprintf(a[na], 16, "a%d", id++);
    fprintf(f, "<node name='%s' op='Input' dtype='float32' shape='%d,8'/>\n", a[na], am[na]);
    strcpy(all[nall++], a[na++]);
    snprintf(w[nw], 16, "w%d", id++);
    fprintf(f, "<node name='%s' op='Input' dtype='float32' shape='8,8'/>\n", w[nw]);
    strcpy(all[nall++], w[nw++]);
  }
  int steps = 6 + (int)rnd(&seed, 16);
  for (int s = 0; s < steps && na < MAXV - 1 && nw < MAXV - 1; s++) {
    int k = (int)rnd(&seed, 7), x = (int)rnd(&seed, (uint32_t)na), y = (int)rnd(&seed, (uint32_t)nw);
    char name[16];
    snprintf(name, sizeof name, "n%d", id++);
    if (k == 0 && am[x] * 4 <= 128) {
      fprintf(f, "<node name='%s' op='AllGather' layout='concat'><input ref='%s'/></node>\n", name, a[x]);
      am[na] = am[x] * 4;
    } else if (k == 1 && am[x] == 8 && rnd(&seed, 4) == 0) { /* (8,8) stacked from a row of 8 */
      fprintf(f, "<node name='%s_v' op='Opaque' type='row' dtype='float32' shape='8'><input ref='%s'/></node>\n",
              name, a[x]);
      fprintf(f, "<node name='%s' op='AllGather' layout='stack'><input ref='%s_v'/></node>\n", name, name);
      am[na] = 4;
    } else if ((k == 2 && am[x] % 4 == 0) || (k == 3 && am[x] % 4 == 0)) {
      static const char *red[] = {"sum", "mean", "max"};
      fprintf(f, "<node name='%s' op='ReduceScatter' reduction='%s'><input ref='%s'/></node>\n", name,
              red[rnd(&seed, 3)], a[x]);
      am[na] = am[x] / 4;
    } else if (k == 4) {
      fprintf(f, "<node name='%s' op='AllReduce' reduction='%s' fusion='0'><input ref='%s'/></node>\n", name,
              rnd(&seed, 2) ? "sum" : "mean", a[x]);
      am[na] = am[x];
    } else if (k == 5) {
      int p = (int)rnd(&seed, (uint32_t)nall), q = (int)rnd(&seed, (uint32_t)nall);
      fprintf(f, "<node name='%s' op='Opaque' type='w' dtype='float32' shape='8,8'><input ref='%s'/><input "
                 "ref='%s'/></node>\n", name, all[p], all[q]);
      used[p] = used[q] = true;
      strcpy(w[nw++], name);
      strcpy(all[nall++], name);
      continue;
    } else {
      fprintf(f, "<node name='%s' op='MatMul'><input ref='%s'/><input ref='%s'/></node>\n", name, a[x], w[y]);
      for (int i = 0; i < nall; i++) used[i] |= !strcmp(all[i], w[y]);
      am[na] = am[x];
    }
    for (int i = 0; i < nall; i++) used[i] |= !strcmp(all[i], a[x]);
    strcpy(a[na++], name);
    strcpy(all[nall++], name);
  }
  for (int i = 0; i < nall; i++)
    if (!used[i] || rnd(&seed, 3) == 0) fprintf(f, "<node name='o_%s' op='Output'><input ref='%s'/></node>\n", all[i], all[i]);
  fprintf(f, "</graph>\n");
  fclose(f);
  return text;
}

static int n_collectives(const cf_graph *g) {
  int n = 0;
  for (int i = 0; i < g->n_nodes; i++) n += cf_op_is_collective(g->nodes[i].op);
  return n;
}

static void test_random(void **state) {
  (void)state;
  int fused_total = 0, agmm_total = 0;
  for (int t = 0; t < 300; t++) {
    char *text = random_graph(0x9E3779B97F4A7C15ull ^ ((uint64_t)(t + 1) * 0x100000001B3ull));
    cf_graph *g = parse(text);
    if (fuse(g, "verify,infer", NULL, NULL)) fail_msg("graph %d: %s\n%s", t, cf_context_errmsg(ctx), text);
    /* candidates: MatMul -> RS/AR edges, and distinct MatMul users of AllGathers */
    int cands = 0, before = n_collectives(g), n_out = 0;
    cf_value outs[256];
    for (int i = 0; i < g->n_nodes; i++) {
      const cf_node *n = &g->nodes[i];
      if ((n->op == CF_OP_REDUCESCATTER || n->op == CF_OP_ALLREDUCE) && g->nodes[n->in[0].node].op == CF_OP_MATMUL)
        cands++;
      if (n->op == CF_OP_MATMUL) {
        bool a0 = g->nodes[n->in[0].node].op == CF_OP_ALLGATHER, a1 = g->nodes[n->in[1].node].op == CF_OP_ALLGATHER;
        cands += a0 + (a1 && !(a0 && n->in[0].node == n->in[1].node));
      }
      if (n->op == CF_OP_OUTPUT) outs[n_out++] = g->nodes[n->in[0].node].out[n->in[0].port];
    }
    lines ex = {0};
    if (fuse(g, "verify,infer,fuse-matmul-collective", NULL, &ex))
      fail_msg("graph %d: %s\n%s", t, cf_context_errmsg(ctx), text);
    assert_int_equal(cf_verify_structure(g), CF_OK); /* acyclic */
    assert_int_equal(cf_infer(g), CF_OK);
    if (ex.n != cands) {
      lines_dump(&ex);
      fail_msg("graph %d: %d explain lines for %d candidates\n%s", t, ex.n, cands, text);
    }
    /* every original collective is one collective of the result */
    assert_int_equal(n_collectives(g), before);
    int k = 0;
    for (int i = 0; i < g->n_nodes; i++) {
      const cf_node *n = &g->nodes[i];
      fused_total += cf_op_table[n->op].cat == CF_CAT_FUSED_MATMUL;
      agmm_total += n->op == CF_OP_ALLGATHERMATMUL;
      if (n->op != CF_OP_OUTPUT) continue;
      const cf_value *v = &g->nodes[n->in[0].node].out[n->in[0].port];
      if (v->dtype != outs[k].dtype || !cf_shape_equal(&v->shape, &outs[k].shape))
        fail_msg("graph %d: Output '%s' changed type", t, n->name);
      k++;
    }
    assert_int_equal(k, n_out);
    if (t % 25 == 0) round_trip(g);
    lines_free(&ex);
    cf_graph_destroy(g);
    free(text);
  }
  /* the generator exercises the pass */
  assert_true(fused_total > 100);
  assert_true(agmm_total > 20);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_registered),      cmocka_unit_test(test_mmrs),
      cmocka_unit_test(test_mmar_and_buckets), cmocka_unit_test(test_reductions),
      cmocka_unit_test(test_shared_matmul),     cmocka_unit_test(test_quant),
      cmocka_unit_test(test_dtype_rules),     cmocka_unit_test(test_m_not_divisible),
      cmocka_unit_test(test_target),          cmocka_unit_test(test_target_one_group),
      cmocka_unit_test(test_agmm_shared),     cmocka_unit_test(test_agmm_illegal),
      cmocka_unit_test(test_json_report),     cmocka_unit_test(test_random),
      cmocka_unit_test(test_control_order),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
