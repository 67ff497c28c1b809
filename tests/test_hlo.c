/* test_hlo.c - unit tests for the XLA HLO text reader (frontend/hlo.c).
 *
 * The JAX exports in examples/hlo must import with their collectives,
 * groups and MatMuls where they are; the files in tests/hlo cover every
 * replica_groups form, call inlining, tuples, async collectives, constants
 * and Opaque fallbacks; in-memory modules cover the error messages (each
 * checked for its line and text) and the limits.
 */
#include <math.h>

#include "cf_attr_test.h"
#include "cf_graph_test.h"
#include "passes/passes.h"

/* ---- the JAX exports ---- */

static void test_jax_tp_mlp(void **state) {
  (void)state;
  cf_graph *g = load(CF_SOURCE_DIR "/examples/hlo/jax_tp_mlp.hlo");
  assert_string_equal(g->name, "jit_tp_mlp");
  assert_int_equal(g->world_size, 8);
  assert_group(g, "tp", "0,1,2,3,4,5,6,7");
  const cf_node *ag = node(g, "all_gather.1"), *rs = node(g, "reduce_scatter.5");
  assert_int_equal(ag->op, CF_OP_ALLGATHER);
  assert_int_equal(cf_node_layout(ag), CF_LAYOUT_CONCAT);
  assert_string_equal(cf_node_group(ag), "tp");
  assert_shape(&ag->out[0], CF_DT_BFLOAT16, "1024,512");
  /* the shard_map body was inlined: its parameters are each rank's blocks
   * of the global Inputs (GlobalToLocalShape's in_shardings, as Shard) */
  const cf_node *x = operand(g, ag, 0);
  assert_int_equal(x->op, CF_OP_SHARD);
  assert_string_equal(x->name, "shard_map.14/0");
  assert_string_equal(operand(g, x, 0)->name, "x.1");
  assert_shape(&x->out[0], CF_DT_BFLOAT16, "128,512");
  const cf_node *d2 = node(g, "dot_general.2");
  assert_int_equal(d2->op, CF_OP_MATMUL);
  assert_ptr_equal(operand(g, d2, 0), ag);
  const cf_node *w1 = operand(g, d2, 1);
  assert_int_equal(w1->op, CF_OP_SHARD);
  assert_int_equal(cf_node_attr(w1, CF_A_TILES)->v.shape->dims[1], 8); /* [{}, {"tp"}] */
  assert_int_equal(cf_node_ints(w1, CF_A_DEVICES).n, 8);
  assert_int_equal(cf_node_ints(w1, CF_A_DEVICES).v[7], 7);
  /* dot -> reduce-scatter, as the MatMul fusion wants it */
  assert_int_equal(rs->op, CF_OP_REDUCESCATTER);
  assert_int_equal(cf_node_reduction(rs), CF_RED_SUM);
  assert_int_equal(operand(g, rs, 0)->op, CF_OP_MATMUL);
  assert_string_equal(operand(g, rs, 0)->name, "dot_general.3");
  assert_shape(&rs->out[0], CF_DT_BFLOAT16, "128,512");
  /* sharding annotations and LocalToGlobalShape forward the rank's shard */
  assert_ptr_equal(operand(g, node(g, "output"), 0), rs);
  assert_int_equal(node(g, "tanh.1")->op, CF_OP_OPAQUE);
  assert_int_equal(node(g, "constant.7")->op, CF_OP_CONSTANT);
  cf_graph_destroy(g);
}

static void test_jax_mixed(void **state) {
  (void)state;
  cf_graph *g = load(CF_SOURCE_DIR "/examples/hlo/jax_mixed_reductions.hlo");
  static const struct {
    const char *name;
    cf_reduction red;
    cf_dtype dt;
  } want[] = {{"psum_invariant.10", CF_RED_SUM, CF_DT_FLOAT32},
              {"pmax.5", CF_RED_MAX, CF_DT_INT32},
              {"psum_invariant.11", CF_RED_SUM, CF_DT_BFLOAT16},
              {"pmin.5", CF_RED_MIN, CF_DT_FLOAT32}};
  for (size_t i = 0; i < 4; i++) {
    const cf_node *n = node(g, want[i].name);
    assert_int_equal(n->op, CF_OP_ALLREDUCE);
    assert_int_equal(cf_node_reduction(n), want[i].red);
    assert_int_equal(n->out[0].dtype, want[i].dt);
    assert_string_equal(cf_node_group(n), "dp");
  }
  assert_int_equal(g->n_groups, 1);
  /* the ROOT tuple's four arrays are the outputs; pmean's divide is Opaque */
  assert_ptr_equal(operand(g, node(g, "output.0"), 0), node(g, "psum_invariant.10"));
  assert_ptr_equal(operand(g, node(g, "output.3"), 0), node(g, "pmin.5"));
  assert_string_equal(cf_node_str(operand(g, node(g, "output.2"), 0), CF_A_TYPE, ""), "divide");
  cf_graph_destroy(g);
}

static void test_jax_optimized(void **state) {
  (void)state;
  /* sigils, signatures, FileNames/StackFrames tables, fusions, num_partitions */
  cf_graph *g = load(CF_SOURCE_DIR "/examples/hlo/jax_tp_mlp.optimized.hlo");
  assert_int_equal(g->world_size, 8);
  const cf_node *ag = node(g, "all_gather.3"), *rs = node(g, "reduce_scatter.8");
  assert_int_equal(ag->op, CF_OP_ALLGATHER);
  assert_int_equal(rs->op, CF_OP_REDUCESCATTER);
  assert_shape(&rs->out[0], CF_DT_FLOAT32, "128,512");
  assert_string_equal(cf_node_str(operand(g, rs, 0), CF_A_TYPE, ""), "fusion:kLoop");
  assert_string_equal(cf_node_str(node(g, "ynn_fusion"), CF_A_TYPE, ""), "fusion:kCustom");
  cf_graph_destroy(g);
}

/* ---- tests/hlo ---- */

static void test_replica_group_forms(void **state) {
  (void)state;
  cf_graph *g = load(CF_SOURCE_DIR "/tests/hlo/replica_groups.hlo");
  /* {{0..7}} and [1,8]<=[8] are the same group, declared once */
  assert_string_equal(cf_node_group(node(g, "explicit")), "replica_group_1");
  assert_string_equal(cf_node_group(node(g, "iota1")), "replica_group_1");
  assert_string_equal(cf_node_group(node(g, "rs")), "replica_group_1");
  assert_int_equal(cf_node_reduction(node(g, "same")), CF_RED_MAX);
  assert_group(g, "replica_group_1", "0,1,2,3,4,5,6,7");
  /* several replica groups: one group partitioned into them, a real collective */
  const cf_node *pairs = node(g, "pairs");
  assert_int_equal(pairs->op, CF_OP_ALLREDUCE);
  assert_string_equal(cf_node_group(pairs), "replica_group_2");
  assert_group(g, "replica_group_2", "0,1|2,3|4,5|6,7");
  assert_int_equal(cf_graph_group_size(g, "replica_group_2"), 2);
  assert_int_equal(node(g, "iota24")->op, CF_OP_ALLREDUCE);
  assert_string_equal(cf_node_group(node(g, "iota24")), "replica_group_3");
  assert_group(g, "replica_group_3", "0,1,2,3|4,5,6,7"); /* [2,4]<=[8] */
  assert_string_equal(cf_node_group(node(g, "iotaT")), "replica_group_4");
  assert_group(g, "replica_group_4", "0,2,4,6|1,3,5,7"); /* [2,4]<=[4,2]T(1,0) */
  /* no channel_id: cross-replica within each of 8 partitions, 1 replica each */
  assert_int_equal(node(g, "world")->op, CF_OP_ALLREDUCE);
  assert_group(g, "replica_group_0", "0|1|2|3|4|5|6|7");
  assert_int_equal(g->n_groups, 5);
  cf_graph_destroy(g);
}

static void test_mesh(void **state) {
  (void)state;
  cf_graph *g = load(CF_SOURCE_DIR "/tests/hlo/mesh.hlo");
  assert_int_equal(g->world_size, 8);
  /* one axis of the 2-D mesh: a group partitioned along the other axis */
  assert_group(g, "tp", "0,1,2,3|4,5,6,7");
  assert_group(g, "dp", "0,4|1,5|2,6|3,7");
  assert_group(g, "dp_tp", "0,1,2,3,4,5,6,7");
  assert_group(g, "tp_dp", "0,4,1,5,2,6,3,7");
  assert_int_equal(node(g, "tp")->op, CF_OP_ALLREDUCE);
  assert_string_equal(cf_node_group(node(g, "tp")), "tp");
  assert_string_equal(cf_node_group(node(g, "dp")), "dp");
  assert_int_equal(node(g, "all")->op, CF_OP_ALLREDUCE);
  assert_string_equal(cf_node_group(node(g, "ag")), "dp_tp");
  assert_shape(&node(g, "ag")->out[0], CF_DT_BFLOAT16, "64,32");
  cf_graph_destroy(g);
}

/* Replica ids become ranks r * num_partitions + p by XLA's group modes. */
static void test_group_modes(void **state) {
  (void)state;
  cf_graph *g = load(CF_SOURCE_DIR "/tests/hlo/modes.hlo");
  assert_int_equal(g->world_size, 4);
  /* no channel_id: replicas 0,1 within each partition: {0,2} and {1,3} */
  assert_int_equal(node(g, "cross_replica")->op, CF_OP_ALLREDUCE);
  assert_string_equal(cf_node_group(node(g, "cross_replica")), "replica_group_0");
  assert_group(g, "replica_group_0", "0,2|1,3");
  /* channel_id alone: replicas 0,1 across every partition, one group */
  assert_string_equal(cf_node_group(node(g, "replica_and_partition")), "replica_group_1");
  assert_group(g, "replica_group_1", "0,1,2,3");
  assert_string_equal(cf_node_group(node(g, "flattened")), "replica_group_1");
  cf_graph_destroy(g);
}

/* tests/hlo/partitioned*.hlo: every form on a 2x2 and a 2x4 mesh; one
 * group per distinct set of replica groups, each collective real. */
static void test_partitioned(void **state) {
  (void)state;
  cf_graph *g = load(CF_SOURCE_DIR "/tests/hlo/partitioned.hlo");
  assert_int_equal(g->world_size, 4);
  assert_int_equal(g->n_groups, 2);
  assert_group(g, "replica_group_0", "0,1|2,3"); /* {{0,1},{2,3}} and [2,2]<=[4] */
  assert_group(g, "replica_group_1", "0,2|1,3"); /* {{0,2},{1,3}} and [2,2]<=[2,2]T(1,0) */
  static const struct { const char *node, *group; cf_op op; } want[] = {
      {"rows", "replica_group_0", CF_OP_ALLREDUCE},     {"cols", "replica_group_1", CF_OP_ALLREDUCE},
      {"ag", "replica_group_0", CF_OP_ALLGATHER},       {"rs", "replica_group_1", CF_OP_REDUCESCATTER},
      {"grads#0", "replica_group_0", CF_OP_ALLREDUCE},  {"part", "replica_group_0", CF_OP_REDUCESCATTER},
      {"world", CF_WORLD_GROUP, CF_OP_ALLREDUCE}};
  for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
    assert_int_equal(node(g, want[i].node)->op, want[i].op);
    assert_string_equal(cf_node_group(node(g, want[i].node)), want[i].group);
  }
  /* shapes follow the part's size (2), not the world's */
  assert_shape(&node(g, "ag")->out[0], CF_DT_FLOAT32, "16,16");
  assert_shape(&node(g, "rs")->out[0], CF_DT_FLOAT32, "4,6");
  cf_graph_destroy(g);

  g = load(CF_SOURCE_DIR "/tests/hlo/partitioned8.hlo");
  assert_int_equal(g->world_size, 8);
  assert_group(g, "tp", "0,1,2,3|4,5,6,7");       /* mesh {'tp'}, [2,4]<=[8], explicit */
  assert_group(g, "dp", "0,4|1,5|2,6|3,7");       /* mesh {'dp'}, [4,2]<=[2,4]T(1,0) */
  assert_group(g, "replica_group_0", "0,2,4,6|1,3,5,7"); /* [2,4]<=[4,2]T(1,0) */
  assert_group(g, "replica_group_1", "0|1|2|3|4|5|6|7"); /* cross-replica, one replica */
  assert_int_equal(g->n_groups, 4);
  assert_string_equal(cf_node_group(node(g, "ag")), "tp");
  assert_string_equal(cf_node_group(node(g, "rs")), "tp"); /* inlined from tp_body */
  assert_string_equal(cf_node_group(node(g, "dpT")), "dp");
  assert_string_equal(cf_node_group(node(g, "hx")), "replica_group_0");
  assert_shape(&node(g, "hx")->out[0], CF_DT_BFLOAT16, "96");
  assert_int_equal(node(g, "local")->op, CF_OP_ALLREDUCE);
  cf_graph_destroy(g);
}

/* Replica groups of different sizes (all-reduce allows them) are no IR
 * group: the collective stays Opaque, recorded for the CLI's warning. */
static void test_uneven_replica_groups(void **state) {
  (void)state;
  const char *text = "HloModule m, num_partitions=4\n"
                     "sum {\n  a = f32[] parameter(0)\n  b = f32[] parameter(1)\n"
                     "  ROOT c = f32[] add(a, b)\n}\n"
                     "ENTRY e {\n  p = f32[4] parameter(0)\n"
                     "  ROOT a = f32[4] all-reduce(p), channel_id=1, use_global_device_ids=true, "
                     "replica_groups={{0,1,2},{3}}, to_apply=sum\n}\n";
  cf_graph *g = NULL;
  assert_int_equal(cf_graph_parse(ctx, "u.hlo", text, strlen(text), &g), CF_OK);
  assert_int_equal(node(g, "a")->op, CF_OP_OPAQUE);
  assert_string_equal(cf_node_str(node(g, "a"), CF_A_TYPE, ""),
                      "all-reduce over 2 replica groups of different sizes");
  assert_int_equal(g->n_groups, 0);
  assert_int_equal(g->n_opaque, 1);
  char buf[256];
  assert_string_equal(cf_opaque_text(&g->opaque[0], buf, sizeof buf),
                      "1 node of foreign op 'all-reduce over 2 replica groups of different sizes' "
                      "imported as Opaque (first 'a')");
  assert_int_equal(g->opaque[0].line, 9);
  cf_graph_destroy(g);
}

/* A foreign op is offered the collective spelling it is a typo of, and
 * none when it only differs in case or extends one (HLO's own ops). */
static void test_collective_suggest(void **state) {
  (void)state;
  assert_string_equal(cf_collective_suggest("HcomAllReduse"), "HcomAllReduce");
  assert_string_equal(cf_collective_suggest("all-reduse"), "all-reduce");
  assert_string_equal(cf_collective_suggest("AllRedcue"), "AllReduce");
  assert_string_equal(cf_collective_suggest("all-gahter"), "all-gather");
  assert_string_equal(cf_collective_suggest("reduce-scater"), "reduce-scatter");
  const char *none[] = {"reduce",      "broadcast", "BroadcastTo", "all-reduce-done",
                        "exponential", "Relu",      "reduce-window", "AllReduce", NULL};
  for (int i = 0; none[i]; i++)
    if (cf_collective_suggest(none[i]))
      fail_msg("'%s': suggested '%s'", none[i], cf_collective_suggest(none[i]));
  assert_null(cf_collective_suggest(NULL));
}

/* Every op imported as Opaque is recorded once per type (count, first line
 * and node), by first line, with the collective a misspelt one was meant
 * as; --strict's error names the first and how many more. */
static void test_opaque_record(void **state) {
  (void)state;
  const char *text = "HloModule m, num_partitions=2\n"
                     "sum {\n  a = f32[] parameter(0)\n  b = f32[] parameter(1)\n"
                     "  ROOT c = f32[] add(a, b)\n}\n"
                     "ENTRY e {\n  p = f32[4] parameter(0)\n"
                     "  t = f32[4] tanh(p)\n"
                     "  x = f32[4] all-reduse(t), replica_groups={{0,1}}, to_apply=sum\n"
                     "  y = f32[4] tanh(x)\n"
                     "  ROOT r = f32[4] reduce-precision(y), exponent_bits=5, mantissa_bits=10\n}\n";
  cf_graph *g = NULL;
  assert_int_equal(cf_graph_parse(ctx, "t.hlo", text, strlen(text), &g), CF_OK);
  assert_int_equal(g->n_opaque, 3);
  assert_string_equal(g->opaque[0].type, "tanh");
  assert_int_equal(g->opaque[0].count, 2);
  assert_int_equal(g->opaque[0].line, 9);
  assert_string_equal(g->opaque[0].first, "t");
  assert_null(g->opaque[0].suggest);
  assert_string_equal(g->opaque[1].type, "all-reduse");
  assert_int_equal(g->opaque[1].line, 10);
  assert_string_equal(g->opaque[1].suggest, "all-reduce");
  assert_string_equal(g->opaque[2].type, "reduce-precision");
  assert_null(g->opaque[2].suggest);
  assert_int_equal(cf_graph_refuse_opaque(g), CF_ERR_INVALID);
  assert_string_equal(cf_context_errmsg(ctx), "t.hlo:9: error: 2 nodes of foreign op 'tanh' imported "
                                              "as Opaque (first 't') and 2 more foreign ops");
  cf_graph_destroy(g);
}

/* The order of the replica groups themselves means nothing, the order
 * inside a group does (it orders AllGather's blocks): {{2,3},{0,1}} is the
 * group of {{0,1},{2,3}}, {{1,0},{3,2}} is another. */
static void test_replica_group_order(void **state) {
  (void)state;
  const char *text =
      "HloModule m, num_partitions=4\n"
      "sum {\n  a = f32[] parameter(0)\n  b = f32[] parameter(1)\n"
      "  ROOT c = f32[] add(a, b)\n}\n"
      "ENTRY e {\n  p = f32[4] parameter(0)\n"
      "  a = f32[4] all-reduce(p), channel_id=1, use_global_device_ids=true, "
      "replica_groups={{0,1},{2,3}}, to_apply=sum\n"
      "  b = f32[4] all-reduce(p), channel_id=2, use_global_device_ids=true, "
      "replica_groups={{2,3},{0,1}}, to_apply=sum\n"
      "  c = f32[4] all-reduce(p), channel_id=3, use_global_device_ids=true, "
      "replica_groups={{1,0},{3,2}}, to_apply=sum\n"
      "  ROOT t = (f32[4], f32[4], f32[4]) tuple(a, b, c)\n}\n";
  cf_graph *g = NULL;
  assert_int_equal(cf_graph_parse(ctx, "o.hlo", text, strlen(text), &g), CF_OK);
  assert_int_equal(g->n_groups, 2);
  assert_group(g, "replica_group_0", "0,1|2,3");
  assert_group(g, "replica_group_1", "1,0|3,2");
  assert_string_equal(cf_node_group(node(g, "a")), "replica_group_0");
  assert_string_equal(cf_node_group(node(g, "b")), "replica_group_0");
  assert_string_equal(cf_node_group(node(g, "c")), "replica_group_1");
  cf_graph_destroy(g);
}

static void test_structure(void **state) {
  (void)state;
  cf_graph *g = load(CF_SOURCE_DIR "/tests/hlo/structure.hlo");
  assert_int_equal(g->world_size, 4);
  /* a tuple parameter is one Input per array */
  assert_shape(&node(g, "q#0")->out[0], CF_DT_INT32, "4");
  assert_shape(&node(g, "q#1")->out[0], CF_DT_FLOAT32, "8");
  /* %inner is inlined twice through %outer; the second copy is renamed */
  const cf_node *ar = node(g, "ar"), *ar2 = node(g, "ar/1"), *m = node(g, "m");
  assert_int_equal(ar2->op, CF_OP_ALLREDUCE);
  assert_ptr_equal(operand(g, ar2, 0), m);
  assert_ptr_equal(operand(g, m, 0), ar);
  /* while is Opaque with both outputs; the call consumes output 1 */
  const cf_node *loop = node(g, "loop");
  assert_int_equal(loop->op, CF_OP_OPAQUE);
  assert_int_equal(loop->n_out, 2);
  assert_ptr_equal(operand(g, ar, 0), loop);
  assert_int_equal(ar->in[0].port, 1);
  assert_int_equal(node(g, "cv")->op, CF_OP_CAST);
  assert_int_equal(node(g, "rsh")->op, CF_OP_RESHAPE);
  assert_int_equal(node(g, "bc")->op, CF_OP_RESHAPE);
  assert_int_equal(node(g, "d")->op, CF_OP_MATMUL);
  assert_int_equal(node(g, "dt")->op, CF_OP_OPAQUE); /* contracts lhs dim 0 */
  assert_int_equal(node(g, "sub")->op, CF_OP_SUB);
  assert_ptr_equal(operand(g, node(g, "output.1"), 0), node(g, "q#1"));
  cf_graph_destroy(g);
}

static void test_tuple_collectives(void **state) {
  (void)state;
  cf_graph *g = load(CF_SOURCE_DIR "/tests/hlo/tuple_collectives.hlo");
  const cf_node *f = node(g, "fused");
  assert_int_equal(f->op, CF_OP_FUSEDALLREDUCE);
  assert_string_equal(attr_text(f, CF_A_MEMBERS, ""), "fused#0,fused#1");
  assert_int_equal(f->n_out, 2);
  assert_ptr_equal(operand(g, node(g, "output.1"), 0), f);
  assert_int_equal(node(g, "output.1")->in[0].port, 1);
  /* mixed dtypes cannot share a bucket: one AllReduce each */
  assert_int_equal(node(g, "mixed#1")->op, CF_OP_ALLREDUCE);
  assert_int_equal(node(g, "mixed#1")->out[0].dtype, CF_DT_INT32);
  assert_int_equal(cf_node_reduction(node(g, "ip")), CF_RED_PROD);
  assert_null(cf_node_str(node(g, "ip"), CF_A_GROUP, NULL)); /* {} over every device */
  /* cross-replica with 1 replica: every rank alone, 4 parts of one */
  assert_int_equal(node(g, "local")->op, CF_OP_ALLREDUCE);
  assert_group(g, cf_node_group(node(g, "local")), "0|1|2|3");
  /* pred is bool, and its `and` reducer is bool's prod */
  assert_int_equal(node(g, "pr")->op, CF_OP_ALLREDUCE);
  assert_int_equal(node(g, "pr")->out[0].dtype, CF_DT_BOOL);
  assert_int_equal(cf_node_reduction(node(g, "pr")), CF_RED_PROD);
  /* async pairs: -start is the collective, -done forwards it */
  assert_int_equal(node(g, "start")->op, CF_OP_ALLREDUCE);
  const cf_node *ags = node(g, "ags");
  assert_int_equal(ags->op, CF_OP_ALLGATHER);
  assert_ptr_equal(operand(g, ags, 0), node(g, "start"));
  assert_ptr_equal(operand(g, node(g, "output.6"), 0), ags);
  /* dimensions={1}: all_gather_dimension 1, combinable by default as in XLA */
  const cf_node *ag1 = node(g, "ag1");
  assert_int_equal(ag1->op, CF_OP_ALLGATHER);
  assert_int_equal(cf_node_int(ag1, CF_A_DIM, 0), 1);
  assert_int_equal(cf_node_fusion(ag1), 1);
  assert_int_equal(cf_node_fusion(ags), 1);
  assert_int_equal(cf_node_fusion(node(g, "start")), 1);
  assert_int_equal(node(g, "a2a")->op, CF_OP_ALLTOALL);
  assert_int_equal(node(g, "cp")->op, CF_OP_COLLECTIVEPERMUTE);
  cf_graph_destroy(g);
}

/* tests/hlo/alltoall_*.hlo: all-to-all's array form (dimensions={d}: split
 * and concatenated along d) and tuple form (an operand per rank, a result
 * per rank), collective-permute and its async pair; all-to-all's channel_id
 * groups are partitions inside each replica. */
static void test_alltoall_permute(void **state) {
  (void)state;
  cf_graph *g = load(CF_SOURCE_DIR "/tests/hlo/alltoall_permute.hlo");
  assert_int_equal(g->world_size, 4);
  const cf_node *a = node(g, "a2a"), *t = node(g, "t");
  assert_int_equal(a->op, CF_OP_ALLTOALL);
  assert_int_equal(cf_node_int(a, CF_A_SPLIT_DIMENSION, -1), 1);
  assert_int_equal(cf_node_int(a, CF_A_CONCAT_DIMENSION, -1), 1);
  assert_shape(&a->out[0], CF_DT_FLOAT32, "6,8");
  assert_int_equal(t->op, CF_OP_ALLTOALL);
  assert_int_equal(t->n_in, 2);
  assert_int_equal(t->n_out, 2);
  assert_null(cf_node_attr(t, CF_A_SPLIT_DIMENSION));
  assert_group(g, cf_node_group(t), "0,1|2,3");
  assert_ptr_equal(operand(g, node(g, "output.2"), 0), t);
  assert_int_equal(node(g, "output.2")->in[0].port, 1);
  const cf_node *cp = node(g, "cp"), *cps = node(g, "cps");
  assert_int_equal(cp->op, CF_OP_COLLECTIVEPERMUTE);
  assert_string_equal(cf_node_str(cp, CF_A_SOURCE_TARGET_PAIRS, ""), "{{0,1},{1,2},{2,3},{3,0}}");
  assert_string_equal(cf_node_group(cp), CF_WORLD_GROUP);
  assert_int_equal(cps->op, CF_OP_COLLECTIVEPERMUTE);
  assert_ptr_equal(operand(g, cps, 0), cp);
  assert_ptr_equal(operand(g, node(g, "output.3"), 0), cps);
  cf_graph_destroy(g);

  g = load(CF_SOURCE_DIR "/tests/hlo/alltoall_replicas.hlo");
  assert_int_equal(node(g, "a")->op, CF_OP_ALLTOALL);
  assert_group(g, cf_node_group(node(g, "a")), "0,1|2,3");
  /* pairs of partition ids in a module of 2 replicas: no IR group says which */
  assert_int_equal(node(g, "cp")->op, CF_OP_OPAQUE);
  cf_graph_destroy(g);
}

/* tests/hlo/alltoall_combine.hlo: every all-to-all is combinable (fusion=1,
 * XLA's keys in combine_key); fuse-alltoall buckets those of one group,
 * dims and key, of two dtypes (a byte bucket). */
static void test_alltoall_combine(void **state) {
  (void)state;
  cf_graph *g = load(CF_SOURCE_DIR "/tests/hlo/alltoall_combine.hlo");
  static const char *names[] = {"a", "b", "c", "d", "e"};
  for (size_t i = 0; i < 5; i++) {
    const cf_node *n = node(g, names[i]);
    assert_int_equal(n->op, CF_OP_ALLTOALL);
    assert_int_equal(cf_node_fusion(n), 1);
  }
  assert_string_equal(cf_node_str(node(g, "a"), CF_A_COMBINE_KEY, ""), "cross_module");
  assert_string_equal(cf_node_str(node(g, "e"), CF_A_COMBINE_KEY, ""), "cross_module,experts");
  cf_pass_options o = {.split = "bytes:1G"};
  assert_int_equal(cf_passes_run(g, "infer,fuse-alltoall", &o, NULL, NULL), CF_OK);
  const cf_node *b = node(g, "alltoall_bucket_0");
  assert_int_equal(b->op, CF_OP_FUSEDALLTOALL);
  assert_string_equal(attr_text(b, CF_A_MEMBERS, ""), "a,b");
  assert_shape(&b->out[1], CF_DT_BFLOAT16, "4,6");
  static const char *alone[] = {"c", "d", "e"};
  for (size_t i = 0; i < 3; i++) assert_int_equal(node(g, alone[i])->op, CF_OP_ALLTOALL);
  assert_int_equal(cf_graph_find(g, "alltoall_bucket_1"), -1);
  cf_graph_destroy(g);
}

static void test_constants(void **state) {
  (void)state;
  cf_graph *g = load(CF_SOURCE_DIR "/tests/hlo/constants.hlo");
  const cf_node *s = node(g, "s"), *splat = node(g, "splat");
  assert_int_equal(s->op, CF_OP_CONSTANT);
  assert_true(cf_node_attr(s, CF_A_VALUE)->v.f == 2.5);
  assert_int_equal(splat->op, CF_OP_CONSTANT);
  assert_true(cf_node_attr(splat, CF_A_VALUE)->v.f == 7);
  assert_string_equal(cf_node_str(node(g, "iota"), CF_A_INIT, ""), "iota");
  static const char *opaque[] = {"other", "nan", "flags", "elided"};
  for (size_t i = 0; i < 4; i++)
    assert_int_equal(node(g, opaque[i])->op, CF_OP_OPAQUE);
  assert_shape(&node(g, "flags")->out[0], CF_DT_BOOL, "2");
  cf_graph_destroy(g);
}

/* integer literals a double cannot hold (int64 near 2^63, 1.5 as s32,
 * 1e300 as s32) stay opaque constants: no rounding, no float-to-int cast */
static void test_integer_constants_out_of_range(void **state) {
  (void)state;
  cf_graph *g = load(CF_SOURCE_DIR "/tests/hlo/int64_const_range.hlo");
  static const char *opaque[] = {"big", "frac", "huge"};
  for (size_t i = 0; i < 3; i++)
    assert_int_equal(node(g, opaque[i])->op, CF_OP_OPAQUE);
  cf_graph_destroy(g);
}

/* ---- in-memory modules ---- */

static cf_status parse(const char *text, cf_graph **g) {
  return cf_graph_parse(ctx, "t.hlo", text, strlen(text), g);
}

#define HDR "HloModule m, num_partitions=4\n"
#define SUM                                                                                        \
  "sum {\n  a = f32[] parameter(0)\n  b = f32[] parameter(1)\n  ROOT c = f32[] add(a, b)\n}\n"

/* XLA's grammar, not lines: an instruction wrapped over lines (after a
 * ',', or with the opcode under its tuple shape), both comment forms, and
 * shapes left out where XLA's parser infers them. Modules written so, and
 * modules whose replica_groups={} span a world the module does not give
 * (XLA's tests), read: the world is what an all-gather's shapes imply, else
 * XLA's default of one replica. */
static void test_grammar(void **state) {
  (void)state;
  cf_graph *g = NULL;
  const char *text =
      "// a module as XLA's tests write it\n"
      "HloModule m\n\n" SUM
      "ENTRY e { // entry\n"
      "  p0 = f32[8] parameter(0)\n"
      "  p1 = s32[8] /* the second */ parameter(1)\n"
      "  ag0 = f32[32] all-gather(p0),\n      replica_groups={}, dimensions={0}\n"
      "  ar = f32[8]\n    all-reduce(p0), replica_groups={}, to_apply=sum\n"
      "  n = negate(ar)\n"
      "  c = compare(n, ar), direction=LT\n"
      "  t = tuple(ag0, p1,\n    c)\n"
      "  g = get-tuple-element(t), index=2\n"
      "  ROOT r = (f32[32], s32[8])\n    tuple(ag0, p1)\n"
      "}\n";
  assert_int_equal(parse(text, &g), CF_OK);
  assert_int_equal(g->world_size, 4); /* from ag0's shapes */
  assert_int_equal(node(g, "ag0")->op, CF_OP_ALLGATHER);
  assert_int_equal(node(g, "ar")->op, CF_OP_ALLREDUCE);
  assert_int_equal(node(g, "ar")->line, 14);
  assert_shape(&node(g, "n")->out[0], CF_DT_FLOAT32, "8");
  assert_shape(&node(g, "c")->out[0], CF_DT_BOOL, "8"); /* pred */
  assert_ptr_equal(operand(g, node(g, "output.0"), 0), node(g, "ag0"));
  cf_graph_destroy(g);
  /* control-predecessors: control edges in the IR; a collective on either
   * end stays alone (XLA's combiners), the others still combine */
  text = "HloModule m\n" SUM
         "ENTRY e {\n  p = f32[4] parameter(0)\n  q = f32[4] parameter(1)\n"
         "  a = f32[4] all-reduce(p), replica_groups={}, to_apply=sum\n"
         "  n = negate(q), control-predecessors={a}\n"
         "  b = f32[4] all-reduce(n), replica_groups={}, to_apply=sum\n"
         "  c = f32[4] all-reduce(q), replica_groups={}, to_apply=sum,\n"
         "      control-predecessors={%n, b}\n"
         "  d = f32[4] all-reduce(q), replica_groups={}, to_apply=sum\n"
         "  e = f32[4] all-reduce(p), replica_groups={}, to_apply=sum\n"
         "  ROOT t = tuple(a, b, c, d, e)\n}\n";
  assert_int_equal(parse(text, &g), CF_OK);
  assert_string_equal(attr_text(node(g, "a"), CF_A_FUSION, "none"), "none");
  assert_int_equal(node(g, "n")->n_ctl, 1);
  assert_ptr_equal(&g->nodes[node(g, "n")->ctl[0]], node(g, "a"));
  const cf_node *cc = node(g, "c");
  assert_int_equal(cc->n_ctl, 2);
  assert_ptr_equal(&g->nodes[cc->ctl[0]], node(g, "n"));
  assert_ptr_equal(&g->nodes[cc->ctl[1]], node(g, "b"));
  cf_pass_options po = {.split = "bytes:1G"};
  assert_int_equal(cf_passes_run(g, "infer,fuse-allreduce,dce", &po, NULL, NULL), CF_OK);
  const cf_node *de = node(g, "allreduce_bucket_0");
  assert_int_equal(de->op, CF_OP_FUSEDALLREDUCE);
  assert_string_equal(attr_text(de, CF_A_MEMBERS, ""), "e,d"); /* ready order: p, then q */
  assert_int_equal(node(g, "a")->op, CF_OP_ALLREDUCE);
  assert_int_equal(node(g, "b")->op, CF_OP_ALLREDUCE);
  cc = node(g, "c");
  assert_int_equal(cc->op, CF_OP_ALLREDUCE);
  assert_int_equal(cc->n_ctl, 2); /* kept through the rewrite */
  assert_ptr_equal(&g->nodes[cc->ctl[1]], node(g, "b"));
  cf_graph_destroy(g);
  /* no all-gather tells the world: one replica, as XLA's default */
  text = "HloModule m\n" SUM
         "ENTRY e {\n  p = f32[4] parameter(0)\n  ROOT a = f32[4] all-reduce(p), "
         "replica_groups={}, to_apply=sum\n}\n";
  assert_int_equal(parse(text, &g), CF_OK);
  assert_int_equal(g->world_size, 1);
  cf_graph_destroy(g);
  /* XLA prints a computation of another thread as `}, execution_thread="T"`
   * (hlo_parser_test's HloComputationWithParallelThreadName): still a
   * computation, so the reducer is found and the ENTRY read; anything else
   * after the body is not */
  text = "HloModule m\n"
         "sum {\n  a = f32[] parameter(0)\n  b = f32[] parameter(1)\n"
         "  ROOT s = f32[] add(a, b)\n}, execution_thread=\"main_thread\"\n"
         "ENTRY e {\n  p = f32[4] parameter(0)\n  ROOT a = f32[4] all-reduce(p), "
         "replica_groups={}, to_apply=sum\n} , execution_thread = \"main_thread\"\n";
  assert_int_equal(parse(text, &g), CF_OK);
  assert_int_equal(node(g, "a")->op, CF_OP_ALLREDUCE);
  assert_string_equal(attr_text(node(g, "a"), CF_A_REDUCTION, ""), "sum");
  cf_graph_destroy(g);
  g = NULL;
  text = "HloModule m\n"
         "ENTRY e {\n  p = f32[4] parameter(0)\n  ROOT n = f32[4] negate(p)\n"
         "}, execution_thread=main_thread\n";
  assert_int_not_equal(parse(text, &g), CF_OK);
  assert_null(g);
  /* copy (hlo_parser_test's AsyncStartWithAliasing copies into and out of
   * another layout around an all-to-all) passes its array through: the
   * collective's input and the output are real values, not Opaque ones */
  text = "HloModule m\n" SUM "ENTRY e {\n  p = f32[4]{0:T(4)} parameter(0)\n"
         "  c0 = f32[4]{0} copy(p)\n"
         "  a = f32[4]{0} all-reduce(c0), replica_groups={}, to_apply=sum\n"
         "  ROOT c1 = f32[4]{0:T(4)} copy(a)\n}\n";
  assert_int_equal(parse(text, &g), CF_OK);
  assert_ptr_equal(operand(g, node(g, "a"), 0), node(g, "p"));
  assert_ptr_equal(operand(g, node(g, "output"), 0), node(g, "a"));
  assert_int_equal(cf_graph_find(g, "c0"), -1);
  cf_graph_destroy(g);
  /* a combined collective-permute (hlo_parser_test's
   * CombinedCollectivePermute[StartAndDone]): one CollectivePermute per
   * operand, NAME#i (was Opaque); the in-place form (buffers, offsets,
   * slice_sizes) stays Opaque */
  text = "HloModule m, replica_count=4\n"
         "ENTRY e {\n  p0 = f32[4] parameter(0)\n  p1 = s32[2,3] parameter(1)\n"
         "  cp = (f32[4], s32[2,3]) collective-permute(p0, p1), source_target_pairs={{0,1},{1,2}}\n"
         "  s = ((f32[4], s32[2,3]), (f32[4], s32[2,3])) collective-permute-start(p0, p1),\n"
         "      source_target_pairs={{3,0}}\n"
         "  d = (f32[4], s32[2,3]) collective-permute-done(s)\n"
         "  z = s32[] constant(0)\n  zz = (s32[]) tuple(z)\n"
         "  f = f32[] constant(0)\n  o = f32[4] broadcast(f), dimensions={}\n"
         "  ip = f32[4] collective-permute(p0, o, zz, zz), source_target_pairs={{0,1}}, "
         "slice_sizes={{2}}\n"
         "  ROOT t = tuple(cp, d, ip)\n}\n";
  assert_int_equal(parse(text, &g), CF_OK);
  const cf_node *cp0 = node(g, "cp#0"), *cp1 = node(g, "cp#1");
  assert_int_equal(cp0->op, CF_OP_COLLECTIVEPERMUTE);
  assert_int_equal(cp1->op, CF_OP_COLLECTIVEPERMUTE);
  assert_ptr_equal(operand(g, cp0, 0), node(g, "p0"));
  assert_ptr_equal(operand(g, cp1, 0), node(g, "p1"));
  assert_shape(&cp1->out[0], CF_DT_INT32, "2,3");
  assert_string_equal(attr_text(cp1, CF_A_SOURCE_TARGET_PAIRS, ""), "{{0,1},{1,2}}");
  assert_ptr_equal(operand(g, node(g, "s#1"), 0), node(g, "p1"));
  assert_ptr_equal(operand(g, node(g, "output.2"), 0), node(g, "s#0"));
  assert_ptr_equal(operand(g, node(g, "output.3"), 0), node(g, "s#1"));
  assert_int_equal(node(g, "ip")->op, CF_OP_OPAQUE);
  cf_graph_destroy(g);
  /* a string over lines (hlo_parser_test's OriginalValueRecoveryTable: a
   * whole module, quoted, in the header) is read, and lines after it are
   * counted right (was "unterminated string") */
  text = "HloModule m, origin_recovery_table={\n  {\"c\"} : {\"c0\"},\n  \"\n"
         "    HloModule r\n    ENTRY e {\n      ROOT x = s32[] parameter(0)\n    }\n  \"\n}\n" SUM
         "ENTRY e {\n  p = f32[4] parameter(0), metadata={op_name=\"a\\\nb\"}\n"
         "  ROOT ar = f32[4] all-reduce(p), replica_groups={}, to_apply=sum\n}\n";
  assert_int_equal(parse(text, &g), CF_OK);
  assert_int_equal(node(g, "ar")->op, CF_OP_ALLREDUCE);
  assert_int_equal(node(g, "ar")->line, 18);
  cf_graph_destroy(g);
}

/* A to_apply is a reduction only when it is exactly one add, multiply,
 * maximum or minimum of its two parameters (either order); (a+b)*(a+b) ran
 * as a product and a+1 as a sum when the root op alone decided. */
static void test_reducers(void **state) {
  (void)state;
  const char *text = HDR
      "sq {\n  a = f32[] parameter(0)\n  b = f32[] parameter(1)\n  s = f32[] add(a, b)\n"
      "  ROOT m = f32[] multiply(s, s)\n}\n"
      "inc {\n  a = f32[] parameter(0)\n  b = f32[] parameter(1)\n  one = f32[] constant(1)\n"
      "  ROOT s = f32[] add(a, one)\n}\n"
      "twice {\n  a = f32[] parameter(0)\n  b = f32[] parameter(1)\n  ROOT s = f32[] add(a, a)\n}\n"
      "extra {\n  a = f32[] parameter(0)\n  b = f32[] parameter(1)\n  one = f32[] constant(1)\n"
      "  ROOT s = f32[] add(a, b)\n}\n"
      "swapped {\n  b = f32[] parameter(1)\n  ROOT m = f32[] maximum(b, a)\n"
      "  a = f32[] parameter(0)\n}\n"
      "ENTRY e {\n  p = f32[4] parameter(0)\n"
      "  sq = f32[4] all-reduce(p), replica_groups={}, channel_id=1, use_global_device_ids=true, "
      "to_apply=sq\n"
      "  inc = f32[4] all-reduce(p), replica_groups={}, channel_id=1, use_global_device_ids=true, "
      "to_apply=inc\n"
      "  twice = f32[4] all-reduce-start(p), replica_groups={}, channel_id=1, "
      "use_global_device_ids=true, to_apply=twice\n"
      "  extra = f32[4] all-reduce(p), replica_groups={}, channel_id=1, "
      "use_global_device_ids=true, "
      "to_apply=extra\n"
      "  rs = f32[1] reduce-scatter(p), replica_groups={}, channel_id=1, "
      "use_global_device_ids=true, dimensions={0}, to_apply=sq\n"
      "  swapped = f32[4] all-reduce(p), replica_groups={}, channel_id=1, "
      "use_global_device_ids=true, to_apply=swapped\n"
      "  ROOT t = (f32[4], f32[4], f32[4], f32[4], f32[1], f32[4]) tuple(sq, inc, twice, extra, "
      "rs, swapped)\n}\n";
  cf_graph *g = NULL;
  if (parse(text, &g)) fail_msg("%s", cf_context_errmsg(ctx));
  static const struct {
    const char *node, *type;
  } opaque[] = {
      {"sq", "all-reduce (reducer other than one 'multiply' of its two parameters)"},
      {"inc", "all-reduce (reducer other than one 'add' of its two parameters)"},
      {"twice", "all-reduce-start (reducer other than one 'add' of its two parameters)"},
      {"extra", "all-reduce (reducer other than one 'add' of its two parameters)"},
      {"rs", "reduce-scatter (reducer other than one 'multiply' of its two parameters)"},
  };
  for (size_t i = 0; i < sizeof opaque / sizeof opaque[0]; i++) {
    assert_int_equal(node(g, opaque[i].node)->op, CF_OP_OPAQUE);
    assert_string_equal(cf_node_str(node(g, opaque[i].node), CF_A_TYPE, ""), opaque[i].type);
  }
  assert_int_equal(node(g, "swapped")->op, CF_OP_ALLREDUCE);
  assert_int_equal(cf_node_reduction(node(g, "swapped")), CF_RED_MAX);
  cf_graph_destroy(g);
}

/* A shard_map entry (xla.sdy.GlobalToLocalShape) over the mesh NAME of
 * the module's meshes, cutting f32[16] along AXES ("" for none). */
static char *sdy_module(const char *meshes, const char *name, const char *axes) {
  const char *fmt =
      "HloModule m, frontend_attributes={xla.sdy.meshes={%s}}\nENTRY e {\n"
      "  p = f32[16] parameter(0)\n"
      "  s = f32[4] custom-call(p), custom_call_target=\"xla.sdy.GlobalToLocalShape\", "
      "frontend_attributes={xla.sdy.in_shardings=\"#sdy.sharding_per_value<[<@%s, [{%s}]>]>\"}\n"
      "  ROOT o = f32[4] custom-call(s), custom_call_target=\"xla.sdy.LocalToGlobalShape\"\n}\n";
  size_t n = strlen(fmt) + strlen(meshes) + strlen(name) + strlen(axes) + 1;
  char *t = malloc(n);
  assert_non_null(t);
  snprintf(t, n, fmt, meshes, name, axes);
  return t;
}

/* Shardy meshes of the HLO reader: products of axis sizes are
 * overflow-checked (256^8 devices wrapped to 0 and the cut was dropped). */
static void test_sdy_meshes(void **state) {
  (void)state;
  cf_graph *g = NULL;
  char *t = sdy_module("mesh = #sdy.mesh<[\"a\"=256, \"b\"=256, \"c\"=256, \"d\"=256, "
                       "\"e\"=256, \"f\"=256, \"g\"=256, \"h\"=256]>",
                       "mesh", "\\\"a\\\"");
  assert_int_equal(parse(t, &g), CF_OK);
  assert_int_equal(node(g, "s")->op, CF_OP_OPAQUE); /* not run: the call stays */
  cf_graph_destroy(g);
  free(t);
  /* every mesh is kept (only 16 were, and a shard_map over the 17th stayed
   * Opaque); a name given twice is the first mesh */
  char meshes[2048];
  size_t o = 0;
  for (int i = 0; i < 40; i++)
    o += (size_t)snprintf(meshes + o, sizeof meshes - o, "%sm%d = #sdy.mesh<[\"x\"=%d]>",
                          i ? ", " : "", i % 30, i < 30 ? 4 : 2);
  t = sdy_module(meshes, "m29", "\\\"x\\\"");
  assert_int_equal(parse(t, &g), CF_OK);
  const cf_node *sh = node(g, "s");
  assert_int_equal(sh->op, CF_OP_SHARD);
  assert_int_equal(cf_node_attr(sh, CF_A_TILES)->v.shape->dims[0], 4);
  assert_int_equal(g->world_size, 4);
  cf_graph_destroy(g);
  free(t);
}

/* frontend_attributes={combine_key="..."} is compared whole: two keys of
 * 300 bytes that differ only in their last byte are two keys (both the
 * reader and the combiner cut it at 200 bytes or less, and fused them). */
static char *keyed_module(char last) {
  char key[301];
  for (int i = 0; i < 299; i++)
    key[i] = (char)('a' + (i * 7) % 26);
  key[299] = last, key[300] = 0;
  const char *fmt = HDR SUM "ENTRY e {\n  p = f32[8] parameter(0)\n  q = f32[4] parameter(1)\n"
                    "  a = f32[8] all-reduce(p), to_apply=sum, frontend_attributes={combine_key=\"%sA\"}\n"
                    "  b = f32[4] all-reduce(q), to_apply=sum, frontend_attributes={combine_key=\"%s%c\"}\n"
                    "  ROOT t = (f32[8], f32[4]) tuple(a, b)\n}\n";
  size_t n = strlen(fmt) + 2 * sizeof key + 8;
  char *t = malloc(n);
  assert_non_null(t);
  key[299] = 0;
  snprintf(t, n, fmt, key, key, last);
  return t;
}

static void test_combine_key_whole(void **state) {
  (void)state;
  for (int same = 0; same < 2; same++) {
    char *t = keyed_module(same ? 'A' : 'B');
    cf_graph *g = NULL;
    assert_int_equal(parse(t, &g), CF_OK);
    assert_int_equal(strlen(cf_node_str(node(g, "a"), CF_A_COMBINE_KEY, "")), 300);
    assert_int_equal(strlen(cf_node_str(node(g, "b"), CF_A_COMBINE_KEY, "")), 300);
    cf_pass_options o = {.split = "bytes:1G"};
    assert_int_equal(cf_passes_run(g, "infer,fuse-allreduce", &o, NULL, NULL), CF_OK);
    int fused = 0, plain = 0;
    for (int i = 0; i < g->n_nodes; i++)
      fused += g->nodes[i].op == CF_OP_FUSEDALLREDUCE, plain += g->nodes[i].op == CF_OP_ALLREDUCE;
    assert_int_equal(fused, same ? 1 : 0);
    assert_int_equal(plain, same ? 0 : 2);
    cf_graph_destroy(g);
    free(t);
  }
}

/* frontend_attributes={collective_group_key="G"} (XLA's
 * side_effect_util.h; reduce_scatter_reassociate_test's
 * DoesNotReassociateDifferentCollectiveGroupKeys and ...KeyedAndUnkeyed...):
 * a keyed collective is combined only with one of the same key, never with
 * an unkeyed one or one of another key; an empty key is no key. */
static void test_collective_group_key(void **state) {
  (void)state;
  static const struct {
    const char *ka, *kb; /* the two all-reduces' frontend_attributes */
    int fused;
  } cases[] = {
      {"{collective_group_key=\"g0\"}", "{collective_group_key=\"g0\"}", 1},
      {"{collective_group_key=\"g0\"}", "{collective_group_key=\"g1\"}", 0},
      {"{collective_group_key=\"g0\"}", "{x=\"1\"}", 0},
      {"{collective_group_key=\"\"}", "{x=\"1\"}", 1},
      {"{collective_group_key=\"g0\",combine_key=\"k\"}",
       "{combine_key=\"k\",collective_group_key=\"g0\"}", 1},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    char t[1024];
    snprintf(t, sizeof t,
             HDR SUM "ENTRY e {\n  p = f32[8] parameter(0)\n  q = f32[4] parameter(1)\n"
                     "  a = f32[8] all-reduce(p), to_apply=sum, frontend_attributes=%s\n"
                     "  b = f32[4] all-reduce(q), to_apply=sum, frontend_attributes=%s\n"
                     "  ROOT t = (f32[8], f32[4]) tuple(a, b)\n}\n",
             cases[i].ka, cases[i].kb);
    cf_graph *g = NULL;
    assert_int_equal(parse(t, &g), CF_OK);
    cf_pass_options o = {.split = "bytes:1G"};
    assert_int_equal(cf_passes_run(g, "infer,fuse-allreduce", &o, NULL, NULL), CF_OK);
    int fused = 0;
    for (int k = 0; k < g->n_nodes; k++)
      fused += g->nodes[k].op == CF_OP_FUSEDALLREDUCE;
    if (fused != cases[i].fused) fail_msg("case %zu: %d fused, want %d", i, fused, cases[i].fused);
    cf_graph_destroy(g);
  }
}

/* An all-gather or reduce-scatter over groups of one device whose shapes
 * are for more (reduce_scatter_reassociate_test's MismatchReplicaGroups:
 * XLA's verifier leaves groups of one unchecked) is Opaque, not refused;
 * the module's devices are then those a collective over {} implies. Shapes
 * that agree keep a group of one a collective. */
/* source_target_pairs={} is no pair at all, as XLA's parser reads it (every
 * rank receives zeros); it was refused with "a rank number expected". */
static void test_no_pairs(void **state) {
  (void)state;
  cf_graph *g = NULL;
  assert_int_equal(parse("HloModule m, replica_count=2\nENTRY e {\n  p = f32[4] parameter(0)\n"
                         "  ROOT r = f32[4] collective-permute(p), source_target_pairs={}\n}\n",
                         &g),
                   CF_OK);
  assert_int_equal(node(g, "r")->op, CF_OP_COLLECTIVEPERMUTE);
  assert_int_equal(g->world_size, 2);
  cf_graph_destroy(g);
}

static void test_groups_of_one(void **state) {
  (void)state;
  static const struct {
    const char *text, *opaque, *kept;
    cf_op kept_op;
  } cases[] = {
      {"HloModule m\n" SUM "ENTRY e {\n  p0 = f32[8] parameter(0)\n  p1 = f32[8] parameter(1)\n"
       "  rs0 = f32[4] reduce-scatter(p0), dimensions={0}, replica_groups={{0}}, to_apply=sum\n"
       "  rs1 = f32[4] reduce-scatter(p1), dimensions={0}, replica_groups={}, to_apply=sum\n"
       "  ROOT add = f32[4] add(rs0, rs1)\n}\n",
       "rs0", "rs1", CF_OP_REDUCESCATTER},
      {"HloModule m\nENTRY e {\n  p = f32[4,2] parameter(0)\n"
       "  ag = f32[4,6] all-gather(p), dimensions={1}, replica_groups={{0},{1}}\n"
       "  same = f32[4,2] all-gather(p), dimensions={1}, replica_groups={{0},{1}}\n"
       "  ROOT t = (f32[4,6], f32[4,2]) tuple(ag, same)\n}\n",
       "ag", "same", CF_OP_ALLGATHER},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    cf_graph *g = NULL;
    assert_int_equal(parse(cases[i].text, &g), CF_OK);
    assert_int_equal(node(g, cases[i].opaque)->op, CF_OP_OPAQUE);
    assert_int_equal(node(g, cases[i].kept)->op, cases[i].kept_op);
    assert_int_equal(g->world_size, 2);
    cf_graph_destroy(g);
  }
}

/* A tuple-shaped all-gather over {} in a module that says not how many
 * devices: its first operand and result imply them, as an array one's do
 * (all_gather_decomposer_test's CrossReplicaAllGatherWithTuple was read on
 * one device, its declared results unchecked). */
static void test_tuple_world(void **state) {
  (void)state;
  cf_graph *g = NULL;
  const char *t = "HloModule m\nENTRY e {\n  a = f32[10,20] parameter(0)\n"
                  "  b = f32[10,16] parameter(1)\n"
                  "  ROOT ag = (f32[10,80], f32[10,64]) all-gather(a, b), replica_groups={}, "
                  "dimensions={1}\n}\n";
  assert_int_equal(parse(t, &g), CF_OK);
  assert_int_equal(g->world_size, 4);
  assert_int_equal(node(g, "ag")->op, CF_OP_FUSEDALLGATHER);
  cf_graph_destroy(g);
}

/* A broadcast of a constant of one value is a Constant of that value in
 * the broadcast's type (collective_permute_combiner_test's
 * `broadcast(f64[] constant(42.3))`): the collectives' outputs are then
 * checked by run --verify. A broadcast of anything else, of an iota, or
 * into an integer type that cannot hold the value stays Opaque. */
static void test_splat_broadcast(void **state) {
  (void)state;
  cf_graph *g = NULL;
  const char *t =
      "HloModule m\nENTRY e {\n  c = f64[] constant(42.3)\n"
      "  b = f32[256]{0} broadcast(f64[] c), dimensions={}\n"
      "  p = f32[4] parameter(0)\n  bp = f32[2,4] broadcast(p), dimensions={1}\n"
      "  ci = s32[4] constant({0, 1, 2, 3})\n  bi = s32[2,4] broadcast(ci), dimensions={1}\n"
      "  h = f32[] constant(1.5)\n  bh = s32[8] broadcast(h), dimensions={}\n"
      "  z = s32[] constant(-7)\n  bz = s32[3,2] broadcast(z), dimensions={}\n"
      "  ROOT t = (f32[256], f32[2,4], s32[2,4], s32[8], s32[3,2]) tuple(b, bp, bi, bh, bz)\n}\n";
  assert_int_equal(parse(t, &g), CF_OK);
  const cf_node *b = node(g, "b"), *bz = node(g, "bz");
  assert_int_equal(b->op, CF_OP_CONSTANT);
  assert_true(fabs(cf_node_attr(b, CF_A_VALUE)->v.f - 42.3) < 1e-12);
  assert_shape(&b->out[0], CF_DT_FLOAT32, "256");
  assert_int_equal(bz->op, CF_OP_CONSTANT);
  assert_true(cf_node_attr(bz, CF_A_VALUE)->v.f == -7);
  assert_shape(&bz->out[0], CF_DT_INT32, "3,2");
  assert_int_equal(node(g, "bp")->op, CF_OP_OPAQUE);
  assert_int_equal(node(g, "bi")->op, CF_OP_OPAQUE);
  assert_int_equal(node(g, "bh")->op, CF_OP_OPAQUE);
  cf_graph_destroy(g);
}

/* XLA's parser takes a module without its HloModule line, from its first
 * computation (all_gather_remove_degenerate_dims_test's modules, FileCheck
 * comments inside the body, `%p0` used as `p0`), with a signature or
 * without. */
static void test_headerless(void **state) {
  (void)state;
  static const char *const texts[] = {
      "ENTRY entry {\n  // CHECK: %[[P0:.*]] = f32[1,4,1,128]{3,2,1,0} parameter(0)\n"
      "  %p0 = f32[1,4,1,128] parameter(0)\n"
      "  ROOT %all_gather = f32[1,16,1,128] all-gather(p0), dimensions={1}\n}\n",
      "\n%sum (a: f32[], b: f32[]) -> f32[] {\n  %a = f32[] parameter(0)\n"
      "  %b = f32[] parameter(1)\n  ROOT %c = f32[] add(a, b)\n}\n\n"
      "ENTRY %e (p: f32[8]) -> f32[2] {\n  %p = f32[8] parameter(0)\n"
      "  ROOT %all_gather = f32[2] reduce-scatter(p), dimensions={0}, to_apply=sum\n}\n",
  };
  for (int i = 0; i < 2; i++) {
    cf_graph *g = NULL;
    assert_int_equal(parse(texts[i], &g), CF_OK);
    assert_int_equal(g->world_size, 4);
    assert_int_equal(node(g, "all_gather")->op, i ? CF_OP_REDUCESCATTER : CF_OP_ALLGATHER);
    cf_graph_destroy(g);
  }
}

/* The members of the fused node of g that holds member, sorted and
 * comma-joined into buf ("" when member is not fused). */
static const char *bucket_of(const cf_graph *g, const char *member, char *buf, size_t len) {
  buf[0] = 0;
  for (int i = 0; i < g->n_nodes; i++) {
    cf_strs m = cf_node_strs(&g->nodes[i], CF_A_MEMBERS);
    bool has = false;
    for (int k = 0; k < m.n; k++)
      has |= !strcmp(m.v[k], member);
    if (!has) continue;
    const char *v[16];
    int n = m.n < 16 ? m.n : 16;
    for (int k = 0; k < n; k++)
      v[k] = m.v[k];
    for (int a = 0; a < n; a++) /* sort the few names */
      for (int c = a + 1; c < n; c++)
        if (strcmp(v[c], v[a]) < 0) {
          const char *t = v[a];
          v[a] = v[c], v[c] = t;
        }
    size_t o = 0;
    for (int k = 0; k < n && o < len; k++)
      o += (size_t)snprintf(buf + o, len - o, "%s%s", k ? "," : "", v[k]);
  }
  return buf;
}

/* while and conditional (issue 32): each computation they run is read into
 * a region of the graph, whose collectives combine with each other and
 * never with those outside or in another body; the op's node takes the
 * loop's operands and what its bodies end in; run refuses the graph. */
static void test_control_flow(void **state) {
  (void)state;
  cf_graph *g = load(CF_SOURCE_DIR "/tests/hlo/control_flow.hlo");
  assert_int_equal(g->n_regions, 5); /* condition, body, two branches (and [0]) */
  const cf_node *loop = node(g, "loop"), *pick = node(g, "pick");
  const cf_node *bar0 = node(g, "body_ar0"), *tar0 = node(g, "then_ar0");
  const cf_node *ear = node(g, "else_ar"), *lt = node(g, "lt");
  assert_int_equal(loop->op, CF_OP_OPAQUE);
  assert_int_equal(loop->region, 0);
  assert_int_equal(node(g, "pre")->region, 0);
  const cf_region *rb = &g->regions[bar0->region], *rc = &g->regions[lt->region];
  assert_string_equal(rb->op, "while");
  assert_string_equal(rb->owner, "loop");
  assert_string_equal(rb->part, "body");
  assert_int_equal(rb->line, 51);
  assert_string_equal(rc->part, "condition");
  assert_int_equal(node(g, "body_ar1")->region, bar0->region);
  assert_string_equal(g->regions[tar0->region].part, "true branch");
  assert_string_equal(g->regions[ear->region].part, "false branch");
  assert_string_equal(g->regions[ear->region].owner, "pick");
  /* the body's parameter is the loop's operand: body_ar0 reduces pre */
  assert_ptr_equal(operand(g, bar0, 0), node(g, "pre"));
  /* the loop's node takes init's arrays, then what the bodies end in */
  assert_int_equal(loop->n_in, 3 + 4); /* z, pre, y; lt, next, body_ar0, body_ar1 */
  bool ends_lt = false, ends_ar = false;
  for (int j = 3; j < loop->n_in; j++)
    ends_lt |= operand(g, loop, j) == lt, ends_ar |= operand(g, loop, j) == bar0;
  assert_true(ends_lt && ends_ar);
  assert_int_equal(pick->n_in, 3 + 2); /* p, x, x; then's s, else_ar */
  /* run refuses it, naming the first op and its line */
  assert_int_equal(cf_graph_regions_refuse(g), CF_ERR_INVALID);
  assert_non_null(strstr(cf_context_errmsg(ctx), "control_flow.hlo:51: error: while 'loop': loop "
                                                 "bodies are compiled but not run"));
  /* combined within a body, never across one (the passes move the nodes) */
  int body = bar0->region, branch = tar0->region;
  cf_pass_options o = {.split = "bytes:1G"};
  assert_int_equal(cf_passes_run(g, "infer,fuse-allreduce", &o, NULL, NULL), CF_OK);
  char b[256];
  assert_string_equal(bucket_of(g, "pre", b, sizeof b), "pre,side");
  assert_string_equal(bucket_of(g, "body_ar0", b, sizeof b), "body_ar0,body_ar1");
  assert_string_equal(bucket_of(g, "then_ar0", b, sizeof b), "then_ar0,then_ar1");
  assert_string_equal(bucket_of(g, "else_ar", b, sizeof b), "");
  assert_string_equal(bucket_of(g, "post", b, sizeof b), "");
  for (int i = 0; i < g->n_nodes; i++) /* a bucket is in its members' body */
    if (g->nodes[i].op == CF_OP_FUSEDALLREDUCE) {
      int m = cf_graph_find(g, cf_node_strs(&g->nodes[i], CF_A_MEMBERS).v[0]);
      assert_true(m < 0 || g->nodes[m].region == g->nodes[i].region);
      const char *first = cf_node_strs(&g->nodes[i], CF_A_MEMBERS).v[0];
      int want = !strcmp(first, "pre") || !strcmp(first, "side") ? 0
                 : first[0] == 'b'                                 ? body
                                                                   : branch;
      assert_int_equal(g->nodes[i].region, want);
    }
  cf_graph_destroy(g);
  /* a conditional alone: its own words */
  g = NULL;
  assert_int_equal(parse(HDR SUM "ENTRY e {\n  p = s32[] parameter(0)\n  x = f32[4] parameter(1)\n"
                         "  ROOT c = f32[4] conditional(p, x), branch_computations={b}\n}\n"
                         "b {\n  y = f32[4] parameter(0)\n  ROOT n = f32[4] negate(y)\n}\n",
                         &g),
                   CF_OK);
  assert_int_equal(cf_graph_regions_refuse(g), CF_ERR_INVALID);
  assert_non_null(strstr(cf_context_errmsg(ctx), ":10: error: conditional 'c': conditional "
                                                 "branches are compiled but not run"));
  cf_graph_destroy(g);
  /* a loop nothing uses, without collectives, goes with dce (a collective
   * would keep it: dce keeps every collective), and then nothing is refused */
  g = NULL;
  assert_int_equal(parse(HDR SUM "ENTRY e {\n  p = f32[] parameter(0)\n"
                         "  w = f32[] while(p), condition=t, body=b\n  ROOT q = f32[] negate(p)\n}\n"
                         "t {\n  y = f32[] parameter(0)\n  ROOT c = pred[] constant(true)\n}\n"
                         "b {\n  y = f32[] parameter(0)\n  ROOT n = f32[] negate(y)\n}\n",
                         &g),
                   CF_OK);
  assert_int_equal(cf_graph_regions_refuse(g), CF_ERR_INVALID);
  assert_int_equal(cf_passes_run(g, "dce", &o, NULL, NULL), CF_OK);
  assert_int_equal(cf_graph_find(g, "n"), -1);
  assert_int_equal(cf_graph_regions_refuse(g), CF_OK);
  cf_graph_destroy(g);
}

/* reduce-scatter-start / -done (XLA's AsyncReduceScatterCombiner test
 * writes them): the start is the ReduceScatter, combinable, its shape
 * (operands, results); -done forwards the result (both were Opaque). */
static void test_reduce_scatter_async(void **state) {
  (void)state;
  const char *text =
      "HloModule m, is_scheduled=true\n" SUM "ENTRY e {\n  p0 = f32[8] parameter(0)\n"
      "  p1 = f32[8] parameter(1)\n"
      "  rs0 = ((f32[8]), f32[4]) reduce-scatter-start(p0), replica_groups={{0,1}}, dimensions={0}, "
      "to_apply=sum\n"
      "  rs0d = f32[4] reduce-scatter-done(rs0), replica_groups={{0,1}}, dimensions={0}, to_apply=sum\n"
      "  rs1 = ((f32[8]), f32[4]) reduce-scatter-start(p1), replica_groups={{0,1}}, dimensions={0}, "
      "to_apply=sum\n"
      "  rs1d = f32[4] reduce-scatter-done(rs1), replica_groups={{0,1}}, dimensions={0}, to_apply=sum\n"
      "  ROOT t = (f32[4], f32[4]) tuple(rs0d, rs1d)\n}\n";
  cf_graph *g = NULL;
  assert_int_equal(parse(text, &g), CF_OK);
  const cf_node *rs0 = node(g, "rs0");
  assert_int_equal(rs0->op, CF_OP_REDUCESCATTER);
  assert_int_equal(cf_node_fusion(rs0), 1);
  assert_shape(&rs0->out[0], CF_DT_FLOAT32, "4");
  assert_ptr_equal(operand(g, node(g, "output.1"), 0), node(g, "rs1"));
  cf_pass_options o = {.split = "bytes:1G"};
  assert_int_equal(cf_passes_run(g, "infer,fuse-reducescatter", &o, NULL, NULL), CF_OK);
  assert_string_equal(attr_text(node(g, "reducescatter_bucket_0"), CF_A_MEMBERS, ""), "rs0,rs1");
  cf_graph_destroy(g);
}

/* A reducer that works in a wider float type (convert, add, convert back:
 * a bf16 sum in f32) is that reduction, left uncombined (fusion=0): XLA's
 * combiners find no reduction kind in it (DoNotCombineWithoutReductionKind).
 * Converting to a narrower or an integer type is no such reducer. */
static void test_widened_reducer(void **state) {
  (void)state;
  static const char *const body[] = {
      /* bf16 -> f32 -> bf16 max: read */
      "r {\n  a = bf16[] parameter(0)\n  b = bf16[] parameter(1)\n  ca = f32[] convert(a)\n"
      "  cb = f32[] convert(b)\n  m = f32[] maximum(ca, cb)\n  ROOT o = bf16[] convert(m)\n}\n",
      /* f32 -> bf16 -> f32: narrower, Opaque */
      "r {\n  a = f32[] parameter(0)\n  b = f32[] parameter(1)\n  ca = bf16[] convert(a)\n"
      "  cb = bf16[] convert(b)\n  m = bf16[] add(ca, cb)\n  ROOT o = f32[] convert(m)\n}\n",
      /* through an integer: Opaque */
      "r {\n  a = bf16[] parameter(0)\n  b = bf16[] parameter(1)\n  ca = s32[] convert(a)\n"
      "  cb = s32[] convert(b)\n  m = s32[] add(ca, cb)\n  ROOT o = bf16[] convert(m)\n}\n",
  };
  static const char *const type[] = {"bf16", "f32", "bf16"};
  for (int k = 0; k < 3; k++) {
    char text[1024];
    snprintf(text, sizeof text,
             "HloModule m, replica_count=2\n%sENTRY e {\n  p = %s[8] parameter(0)\n"
             "  ROOT rs = %s[4] reduce-scatter(p), replica_groups={}, dimensions={0}, to_apply=r\n}\n",
             body[k], type[k], type[k]);
    cf_graph *g = NULL;
    assert_int_equal(parse(text, &g), CF_OK);
    const cf_node *rs = node(g, "rs");
    if (k == 0) {
      assert_int_equal(rs->op, CF_OP_REDUCESCATTER);
      assert_int_equal(cf_node_reduction(rs), CF_RED_MAX);
      assert_int_equal(cf_node_fusion(rs), 0);
    } else {
      assert_int_equal(rs->op, CF_OP_OPAQUE);
    }
    cf_graph_destroy(g);
  }
}

static void test_sniff_and_names(void **state) {
  (void)state;
  /* no extension: the first word says HLO; names keep their dots and dashes */
  const char *text = "  HloModule m\nENTRY e {\n  %get-tuple-element.1 = f32[2]{0} parameter(0)\n"
                     "  ROOT r = f32[2] negate(get-tuple-element.1)\n}\n";
  cf_graph *g = NULL;
  assert_int_equal(cf_graph_parse(ctx, "noext", text, strlen(text), &g), CF_OK);
  assert_int_equal(node(g, "r")->op, CF_OP_OPAQUE);
  assert_ptr_equal(operand(g, node(g, "r"), 0), node(g, "get-tuple-element.1"));
  cf_graph_destroy(g);
  /* an inlined instruction leaves ENTRY's names to ENTRY's instructions */
  text = HDR SUM "f {\n  x = f32[4] parameter(0)\n  ROOT ar = f32[4] all-reduce(x), "
                 "replica_groups={}, channel_id=1, use_global_device_ids=true, to_apply=sum\n}\n"
                 "ENTRY e {\n  p = f32[4] parameter(0)\n  c = f32[4] call(p), to_apply=f\n"
                 "  ROOT ar = f32[4] all-reduce(c), replica_groups={}, channel_id=2, "
                 "use_global_device_ids=true, to_apply=sum\n}\n";
  assert_int_equal(parse(text, &g), CF_OK);
  assert_ptr_equal(operand(g, node(g, "ar"), 0), node(g, "ar/1"));
  assert_int_equal(g->world_size, 4);
  cf_graph_destroy(g);
}

static const cf_bad_input bad_modules[] = {
    {"p = f32[] parameter(0)\n",
     "t.hlo:1: error: not HLO text: expected 'HloModule NAME' or a computation at the start"},
    {"\n\n%c = f32[] parameter(0)\n",
     "t.hlo:3: error: not HLO text: expected 'HloModule NAME' or a computation at the start"},
    {"", "not HLO text"},
    {"HloModule m\n", "t.hlo:2: error: no computations in the module"},
    {"HloModule m\nENTRY e {\n  p = f32[] parameter(0)\n  ROOT r = f32[] negate(p))\n}\n",
     "t.hlo:4: error: unbalanced ')'"},
    {"HloModule m\nENTRY e {\n  p = f32[] parameter(0), metadata={op_name=\"x}\n}\n",
     "t.hlo:3: error: unterminated string"},
    /* a computation with more than execution_thread after its body was
     * skipped without a word (the call to it then "not of the module") */
    {"HloModule m\nc {\n  ROOT p = f32[] parameter(0)\n}, execution_thread=\"t\", x=1\n"
     "ENTRY e {\n  q = f32[] parameter(0)\n  ROOT r = f32[] call(q), to_apply=c\n}\n",
     "t.hlo:2: error: computation 'c': only execution_thread=\"NAME\" may follow its body"},
    {"HloModule m\nENTRY e {\n  p = f32[] parameter(0)\n", "t.hlo:2: error: '{' is never closed"},
    {"HloModule m\nENTRY e {\n  p = f32[] parameter(0) /* note\n}\n",
     "t.hlo:3: error: unterminated comment"},
    {"HloModule m\nENTRY e {\n  p = f32[] parameter(0)\n  ROOT r = f32[] negate(q)\n}\n",
     "t.hlo:4: error: instruction 'r': operand 'q' is not defined in computation 'e'"},
    {"HloModule m\nENTRY e {\n  ROOT r = f32[] negate(p)\n  p = f32[] parameter(0)\n}\n",
     "t.hlo:3: error: instruction 'r': operand 'p' is defined after it (line 4)"},
    {"HloModule m\nENTRY e {\n  p = f32[] parameter(0)\n  p = f32[] parameter(1)\n}\n",
     "t.hlo:4: error: computation 'e': instruction 'p' defined twice (first at line 3)"},
    {"HloModule m\nENTRY e {\n  ROOT p = f32[] parameter(0)\n  ROOT q = f32[] parameter(1)\n}\n",
     "t.hlo:4: error: computation 'e': a second ROOT (the first is 'p' at line 3)"},
    {"HloModule m\nf {\n  ROOT p = f32[] parameter(0)\n}\nf {\n  ROOT p = f32[] parameter(0)\n}\n",
     "t.hlo:5: error: computation 'f' defined twice (first at line 2)"},
    {"HloModule m\nf {\n  p = f32[] parameter(0)\n  ROOT c = f32[] call(p), to_apply=f\n}\nENTRY e "
     "{\n"
     "  p = f32[] parameter(0)\n  ROOT c = f32[] call(p), to_apply=f\n}\n",
     "t.hlo:2: error: computation 'f' calls itself"},
    {"HloModule m\nENTRY e {\n  p = f32[] parameter(0)\n  ROOT c = f32[] call(p), "
     "to_apply=nowhere\n}\n",
     "t.hlo:4: error: instruction 'c': call needs to_apply=COMPUTATION of the module"},
    {"HloModule m\nf {\n  ROOT p = f32[] parameter(1)\n}\nENTRY e {\n  p = f32[] parameter(0)\n"
     "  ROOT c = f32[] call(p), to_apply=f\n}\n",
     "t.hlo:3: error: instruction 'p': parameter(1) but the call passes 1 operands"},
    {"HloModule m\nENTRY e {\n  p = f32[] parameter(0)\n  ROOT g = f32[] get-tuple-element(p), "
     "index=0\n}\n",
     "t.hlo:4: error: instruction 'g': get-tuple-element index=0 of an array"},
    {"HloModule m\nENTRY e {\n  p = (f32[], f32[]) parameter(0)\n  ROOT g = f32[] "
     "get-tuple-element(p), index=2\n}\n",
     "t.hlo:4: error: instruction 'g': get-tuple-element index=2 of a shorter tuple"},
    {"HloModule m\nENTRY e {\n  p = (f32[], f32[]) parameter(0)\n  ROOT g = f32[] "
     "get-tuple-element(p)\n}\n",
     "t.hlo:4: error: instruction 'g': get-tuple-element needs index=N"},
    {"HloModule m\nENTRY e {\n  ROOT p = f32[1,1,1,1,1,1,1,1,1] parameter(0)\n}\n",
     "t.hlo:3: error: shape has more than 8 dimensions"},
    {"HloModule m\nENTRY e {\n  ROOT p = q32[2] parameter(0)\n}\n",
     "t.hlo:3: error: unknown element type 'q32'"},
    {"HloModule m\nENTRY e {\n  ROOT p = f32[?] parameter(0)\n}\n",
     "t.hlo:3: error: unbounded dynamic dimension"},
    {"HloModule m\nENTRY e {\n  ROOT p = f32[99999999999999999999] parameter(0)\n}\n",
     "t.hlo:3: error: bad dimension"},
    {"HloModule m\nENTRY e {\n  ROOT p = f32[4096,4096,4096,4096] parameter(0)\n}\n",
     "t.hlo:3: error: node 'p': shape '4096,4096,4096,4096' has too many elements"},
    {"HloModule m\nENTRY e {\n  ROOT p = f32[2] parameter(0) junk\n}\n",
     "t.hlo:3: error: instruction 'p': expected ', key=value'"},
    {"HloModule m\nENTRY e {\n  p = f32[2]\n}\n",
     "t.hlo:3: error: instruction 'p': expected an opcode"},
    {"HloModule m\nENTRY e {\n  hello world\n}\n",
     "t.hlo:3: error: expected an instruction 'NAME = SHAPE OPCODE(OPERANDS)'"},
    {"HloModule m, num_partitions=0\nENTRY e {\n  ROOT p = f32[] parameter(0)\n}\n",
     "t.hlo:1: error: HloModule: num_partitions='0' must be an integer in 1..256"},
    {"HloModule m, num_partitions=256, replica_count=2\nENTRY e {\n  ROOT p = f32[] "
     "parameter(0)\n}\n",
     "t.hlo:1: error: HloModule: num_partitions * replica_count is above 256 devices"},
    /* collectives */
    {"HloModule m\nENTRY e {\n  p = f32[4] parameter(0)\n  ROOT a = f32[4] all-reduce(p), "
     "replica_groups={{0,1}}\n}\n",
     "t.hlo:4: error: instruction 'a': all-reduce needs to_apply=COMPUTATION of the module"},
    {HDR SUM "ENTRY e {\n  p = f32[4] parameter(0)\n  ROOT a = f32[4] all-reduce(p), channel_id=1, "
             "use_global_device_ids=true, replica_groups={{0,1},{1,2}}, to_apply=sum\n}\n",
     "t.hlo:9: error: instruction 'a': replica_groups list device 1 twice"},
    {HDR SUM "ENTRY e {\n  p = f32[4] parameter(0)\n  ROOT a = f32[4] all-reduce(p), channel_id=1, "
             "use_global_device_ids=true, replica_groups={{0,4}}, to_apply=sum\n}\n",
     "t.hlo:9: error: instruction 'a': replica_groups name device 4 but the module has 4"},
    {HDR SUM "ENTRY e {\n  p = f32[4] parameter(0)\n  ROOT a = f32[4] all-reduce(p), channel_id=1, "
             "use_global_device_ids=true, replica_groups={{0,1},{}}, to_apply=sum\n}\n",
     "t.hlo:9: error: instruction 'a': replica_groups: an empty group"},
    {HDR SUM "ENTRY e {\n  p = f32[4] parameter(0)\n  ROOT a = f32[4] all-reduce(p), channel_id=1, "
             "use_global_device_ids=true, replica_groups=[2,4]<=[6], to_apply=sum\n}\n",
     "t.hlo:9: error: instruction 'a': iota replica_groups: 2 x 4 groups but 6 devices"},
    {HDR SUM "ENTRY e {\n  p = f32[4] parameter(0)\n  ROOT a = f32[4] all-reduce(p), channel_id=1, "
             "use_global_device_ids=true, replica_groups=[2,2]<=[2,2]T(1,1), to_apply=sum\n}\n",
     "t.hlo:9: error: instruction 'a': iota replica_groups: T() must permute 0..1"},
    {HDR SUM "ENTRY e {\n  p = f32[4] parameter(0)\n  ROOT a = f32[4] all-reduce(p), channel_id=1, "
             "use_global_device_ids=true, replica_groups=[2,2]<=[2,2]T(1,5), to_apply=sum\n}\n",
     "t.hlo:9: error: instruction 'a': iota replica_groups: T() must permute 0..1"},
    {HDR SUM "ENTRY e {\n  p = f32[4] parameter(0)\n  ROOT a = f32[4] all-reduce(p), channel_id=1, "
             "use_global_device_ids=true, replica_groups=mesh['x'=4] {'y'}, to_apply=sum\n}\n",
     "t.hlo:9: error: instruction 'a': replica_groups name axis 'y', which the mesh does not have"},
    {HDR SUM "ENTRY e {\n  p = f32[4] parameter(0)\n  ROOT a = f32[4] all-reduce(p), channel_id=1, "
             "use_global_device_ids=true, replica_groups=mesh['x'=4] {'x':(1)2}, to_apply=sum\n}\n",
     "t.hlo:9: error: instruction 'a': mesh sub-axes ('axis':(k)n) are not supported"},
    {HDR SUM "ENTRY e {\n  p = f32[4] parameter(0)\n  ROOT a = f32[4] all-reduce(p), channel_id=1, "
             "use_global_device_ids=true, replica_groups=devices, to_apply=sum\n}\n",
     "t.hlo:9: error: instruction 'a': unsupported replica_groups 'devices'"},
    /* shapes left out where XLA cannot infer them (or collfuse does not) */
    {HDR "ENTRY e {\n  p = f32[4] parameter(0)\n  ROOT b = broadcast(p), dimensions={0}\n}\n",
     "t.hlo:4: error: instruction 'b': the shape of 'broadcast' is left out; collfuse infers it "
     "only for tuple, get-tuple-element, compare and elementwise ops"},
    {HDR "ENTRY e {\n  p = f32[4] parameter(0)\n  ROOT t = tuple(p, q)\n  q = f32[4] parameter(1)\n}\n",
     "t.hlo:4: error: instruction 't': its shape is left out, and operand 'q' is defined after it"},
    {HDR "ENTRY e {\n  p = f32[4] parameter(0) /* never closed\n}\n", "unterminated comment"},
    {HDR "ENTRY e {\n  p = f32[4] parameter(0), control-predecessors={q}\n"
         "  q = f32[4] parameter(1)\n}\n",
     "t.hlo:3: error: instruction 'p': control predecessor 'q' is defined after it in computation "
     "'e'"},
    {HDR "ENTRY e {\n  p = f32[4] parameter(0), control-predecessors={x}\n}\n",
     "t.hlo:3: error: instruction 'p': control predecessor 'x' is not an instruction of "
     "computation 'e'"},
    {HDR "ENTRY e {\n  q = f32[4] parameter(1)\n  p = f32[4] parameter(0), "
         "control-predecessors=q\n}\n",
     "t.hlo:4: error: instruction 'p': control-predecessors must be {NAME, ...}"},
    {"HloModule m, num_partitions=2, replica_count=2\n" SUM
     "ENTRY e {\n  p = f32[4] parameter(0)\n  ROOT a = f32[4] all-reduce(p), "
     "replica_groups={{0,1,1}}, to_apply=sum\n}\n",
     "t.hlo:9: error: instruction 'a': replica_groups list 3 replica ids but replica_count=2"},
    {"HloModule m, num_partitions=2, replica_count=2\n" SUM
     "ENTRY e {\n  p = f32[4] parameter(0)\n  ROOT a = f32[4] all-reduce(p), "
     "replica_groups={{0,2}}, to_apply=sum\n}\n",
     "t.hlo:9: error: instruction 'a': replica id 2 but replica_count=2"},
    /* ids as written are 0..n-1 (XLA's CheckReplicaGroups); a gap would
     * leave a device of the world out of every group */
    {SUM "ENTRY e {\n  p = f32[4] parameter(0)\n  ROOT a = f32[4] all-reduce(p), "
         "replica_groups={{0,1,3}}, to_apply=sum\n}\n",
     "t.hlo:8: error: instruction 'a': replica_groups list 3 ids but not 2 (they must be 0..2, "
     "each once)"},
    {SUM "ENTRY e {\n  p = f32[4] parameter(0)\n  ROOT a = f32[8] all-gather(p), "
         "replica_groups={{0,2},{1,4}}, dimensions={0}\n}\n",
     "t.hlo:8: error: instruction 'a': replica_groups list 4 ids but not 3 (they must be 0..3, "
     "each once)"},
    /* an X-done takes its X-start itself (XLA's verifier, AllReduceDoneWithoutStart):
     * the tuple was passed through as the done's result */
    {"HloModule test\nENTRY entry {\n  p0 = f32[2,3] parameter(0)\n  p1 = u32[] parameter(1)\n"
     "  tuple = (f32[2,3], f32[2,3], u32[], u32[]) tuple(p0, p0, p1, p1)\n  ROOT done = f32[2,3] "
     "all-reduce-done(tuple)\n}\n",
     "t.hlo:6: error: instruction 'done': the operand of all-reduce-done must be its "
     "all-reduce-start, not tuple 'tuple'"},
    {"HloModule test\nENTRY entry {\n  p0 = f32[4] parameter(0)\n  t = ((f32[4]), f32[4]) "
     "tuple(p0, p0)\n  ROOT d = f32[4] async-done(t)\n}\n",
     "t.hlo:5: error: instruction 'd': the operand of async-done must be its async-start, not "
     "tuple 't'"},
    /* every replica (partition, device) of the module in one group (XLA's
     * AllReduce_NotEnougReplicasInGroupConfig; all-to-all's cross-partition mode) */
    {"HloModule m, replica_count=8\n" SUM "ENTRY e {\n  p = f32[4] parameter(0)\n  ROOT a = "
     "f32[4] all-reduce(p), replica_groups={{0,1}}, to_apply=sum\n}\n",
     "t.hlo:9: error: instruction 'a': replica_groups list 2 ids but the module has 8 replicas "
     "(replica_count=8, num_partitions=1): each must be in one group"},
    {HDR "ENTRY e {\n  p = f32[8] parameter(0)\n  ROOT a = f32[8] all-to-all(p), channel_id=1, "
         "replica_groups={{0,1}}, dimensions={0}\n}\n",
     "t.hlo:4: error: instruction 'a': replica_groups list 2 ids but the module has 4 partitions "
     "(replica_count=1, num_partitions=4): each must be in one group"},
    /* an X-done's declared type is the start's result: it was passed on as the start's */
    {"HloModule m, replica_count=2\nENTRY e {\n  p0 = f32[8] parameter(0)\n  s = (f32[8], f32[8], "
     "u32[], u32[]) collective-permute-start(p0), source_target_pairs={{0,1},{1,0}}\n  ROOT d = "
     "f32[4] collective-permute-done(s)\n}\n",
     "t.hlo:5: error: instruction 'd': declares float32[4] but its operand gives float32[8]"},
    {"HloModule m, replica_count=2\n" SUM "ar {\n  p = f32[8] parameter(0)\n  ROOT a = f32[8] "
     "all-reduce(p), replica_groups={{0,1}}, to_apply=sum\n}\nENTRY e {\n  p0 = f32[8] "
     "parameter(0)\n  s = ((f32[8]), f32[8]) async-start(p0), calls=ar\n  ROOT d = s32[8] "
     "async-done(s), calls=ar\n}\n",
     "t.hlo:14: error: instruction 'd': declares int32[8] but its operand gives float32[8]"},
    {"HloModule m\n" SUM "ENTRY e {\n  p = f32[4] parameter(0)\n  ROOT a = f32[4] all-reduce(p, "
     "p), replica_groups={{0,1}}, to_apply=sum\n}\n",
     "t.hlo:9: error: instruction 'a': all-reduce has 2 operands but 1 result"},
    /* a reducer is (T, T) -> T of scalars, or no reduction at all */
    {"HloModule m\nbad {\n  x = f32[] parameter(0)\n  y = f32[] parameter(1)\n  z = f32[] "
     "parameter(2)\n  ROOT s = f32[] add(x, y)\n}\nENTRY e {\n  p = f32[4] parameter(0)\n  ROOT "
     "a = f32[4] all-reduce(p), replica_groups={{0,1}}, to_apply=bad\n}\n",
     "t.hlo:10: error: instruction 'a': all-reduce's reducer takes 3 parameters, not 2"},
    {"HloModule m\nbad {\n  x = f32[] parameter(0)\n  y = f32[] parameter(1)\n  ROOT s = "
     "(f32[], f32[]) tuple(x, y)\n}\nENTRY e {\n  p = f32[4] parameter(0)\n  ROOT "
     "a = f32[2] reduce-scatter(p), replica_groups={{0,1}}, dimensions={0}, to_apply=bad\n}\n",
     "t.hlo:9: error: instruction 'a': reduce-scatter's reducer returns 2 values, not 1"},
    {"HloModule m\nbad {\n  x = f32[] parameter(0)\n  y = s32[] parameter(1)\n  ROOT s = "
     "f32[] add(x, x)\n}\nENTRY e {\n  p = f32[4] parameter(0)\n  ROOT "
     "a = f32[4] all-reduce(p), replica_groups={{0,1}}, to_apply=bad\n}\n",
     "t.hlo:9: error: instruction 'a': all-reduce's reducer parameters are of two element types"},
    {"HloModule m\nbad {\n  x = f32[] parameter(0)\n  y = f32[] parameter(1)\n  m = f32[] "
     "maximum(x, y)\n  ROOT s = s32[] convert(m)\n}\nENTRY e {\n  p = f32[4] parameter(0)\n  "
     "ROOT a = f32[4] all-reduce(p), replica_groups={{0,1}}, to_apply=bad\n}\n",
     "t.hlo:10: error: instruction 'a': all-reduce's reducer returns int32 but its parameters are "
     "float32"},
    /* all-to-all and collective-permute */
    {HDR "ENTRY e {\n  p = f32[8] parameter(0)\n  ROOT a = f32[8] all-to-all(p), channel_id=1, "
         "replica_groups={{0,1,2,3}}\n}\n",
     "t.hlo:4: error: instruction 'a': all-to-all needs dimensions={d} with one operand and none "
     "with a tuple of operands"},
    {HDR "ENTRY e {\n  p = f32[8] parameter(0)\n  ROOT a = (f32[8], f32[8]) all-to-all(p, p), "
         "channel_id=1, replica_groups={{0,1},{2,3}}, dimensions={0}\n}\n",
     "t.hlo:4: error: instruction 'a': all-to-all needs dimensions={d} with one operand and none "
     "with a tuple of operands"},
    {HDR "ENTRY e {\n  p = f32[6] parameter(0)\n  ROOT a = f32[6] all-to-all(p), channel_id=1, "
         "replica_groups={{0,1,2,3}}, dimensions={0}\n}\n",
     "t.hlo:4: error: node 'a': dim 0 (6) is not divisible by split_count=4"},
    {HDR
     "ENTRY e {\n  p = f32[8] parameter(0)\n  ROOT a = (f32[8], f32[8], f32[8]) all-to-all(p, p, "
     "p), channel_id=1, replica_groups={{0,1,2,3}}\n}\n",
     "t.hlo:4: error: node 'a': AllToAll with 3 operands (the tuple form) needs one per rank: the "
     "group has 4 ranks"},
    {HDR "ENTRY e {\n  p = f32[8] parameter(0)\n  ROOT c = f32[8] collective-permute(p), "
         "channel_id=1\n}\n",
     "t.hlo:4: error: instruction 'c': collective-permute needs source_target_pairs"},
    {HDR "ENTRY e {\n  p = f32[8] parameter(0)\n  ROOT c = f32[8] collective-permute(p), "
         "channel_id=1, source_target_pairs={{0,1},{0,2}}\n}\n",
     "t.hlo:4: error: instruction 'c': source_target_pairs: rank 0 is a source twice"},
    {HDR "ENTRY e {\n  p = f32[8] parameter(0)\n  ROOT c = f32[8] collective-permute(p), "
         "channel_id=1, source_target_pairs={{0,7}}\n}\n",
     "t.hlo:4: error: node 'c': source_target_pairs='{{0,7}}': rank 7 is outside the group's 4 "
     "ranks"},
    /* numbers out of range are named as written (the pair's was "rank 257") */
    {HDR "ENTRY e {\n  p = f32[8] parameter(0)\n  ROOT c = f32[8] collective-permute(p), "
         "channel_id=1, source_target_pairs={{0,4294967297}}\n}\n",
     "t.hlo:4: error: instruction 'c': source_target_pairs: rank 4294967297 is outside the group's "
     "256 ranks"},
    {HDR SUM "ENTRY e {\n  p = f32[8] parameter(0)\n  ROOT a = f32[8] all-reduce(p), channel_id=1, "
             "use_global_device_ids=true, replica_groups={{0,18446744073709551617}}, "
             "to_apply=sum\n}\n",
     "t.hlo:9: error: instruction 'a': replica_groups: device id 18446744073709551617 is not in "
     "0..255"},
    /* the IR checks the declared types: gathering 4 ranks cannot give 6 rows */
    {HDR "ENTRY e {\n  p = f32[2] parameter(0)\n  ROOT a = f32[6] all-gather(p), channel_id=1, "
         "use_global_device_ids=true, replica_groups={{0,1,2,3}}, dimensions={0}\n}\n",
     "t.hlo:4: error: node 'a': declared shape (6) but inferred (8)"},
    {HDR SUM
     "ENTRY e {\n  p = f32[6] parameter(0)\n  ROOT a = f32[1] reduce-scatter(p), channel_id=1, "
     "use_global_device_ids=true, replica_groups={{0,1,2,3}}, dimensions={0}, to_apply=sum\n}\n",
     "t.hlo:9: error: node 'a': dim0=6 is not divisible by rank_size=4"},
    /* a tuple without a shape whose fourth operand is not defined (fuzz) */
    {"HloModule m\nENTRY e {\n  a = f32[2] parameter(0)\n"
     "  ROOT t = tuple(a, a, a,\n      b)\n}\n",
     "t.hlo:4: error: instruction 't': its shape is left out, and operand 'b' is not defined"},
    /* control flow: every computation a while or conditional runs must be there */
    {HDR SUM "ENTRY e {\n  p = f32[4] parameter(0)\n  ROOT w = f32[4] while(p), condition=sum\n}\n",
     "t.hlo:9: error: instruction 'w': while needs body=COMPUTATION"},
    {HDR SUM "ENTRY e {\n  p = f32[4] parameter(0)\n"
     "  ROOT w = f32[4] while(p), condition=sum, body=nope\n}\n",
     "t.hlo:9: error: instruction 'w': body=nope is not a computation of the module"},
    {HDR SUM "ENTRY e {\n  p = s32[] parameter(0)\n  x = f32[4] parameter(1)\n"
     "  ROOT c = f32[4] conditional(p, x, x), branch_computations={sum, gone}\n}\n",
     "t.hlo:10: error: instruction 'c': branch_computations=gone is not a computation of the module"},
    {HDR SUM "ENTRY e {\n  p = s32[] parameter(0)\n  x = f32[4] parameter(1)\n"
     "  ROOT c = f32[4] conditional(p, x), true_computation=sum, false_computation=sum\n}\n",
     "t.hlo:10: error: instruction 'c': conditional with 2 branches takes 3 operands, not 2"},
    {HDR SUM "ENTRY e {\n  p = s32[] parameter(0)\n  x = f32[4] parameter(1)\n"
     "  ROOT c = f32[4] conditional(p, x, x), branch_computations={}\n}\n",
     "t.hlo:10: error: instruction 'c': branch_computations names no computation"},
    /* a body whose parameter the while does not pass */
    {HDR SUM "ENTRY e {\n  p = f32[] parameter(0)\n"
     "  ROOT w = f32[] while(p), condition=sum, body=sum\n}\n",
     "t.hlo:4: error: instruction 'b': parameter(1) but the call passes 1 operands"},
    /* a tuple collective's results (one fused node, which declares none)
     * against its operands on the module's devices: they were not checked,
     * so the node ran what the operands make and the module said otherwise */
    {"HloModule m\nENTRY e {\n  a = f32[10,20] parameter(0)\n  b = f32[10,16] parameter(1)\n"
     "  ROOT ag = (f32[10,80], f32[10,60]) all-gather(a, b), replica_groups={}, "
     "dimensions={1}\n}\n",
     "t.hlo:5: error: node 'ag#1': declared shape (10,60) but inferred (10,64)"},
    {"HloModule m\n"
     "ENTRY e {\n  a = f32[10,20] parameter(0)\n  b = f32[10,16] parameter(1)\n"
     "  ROOT ag = (f32[10,80], s32[10,64]) all-gather(a, b), replica_groups={}, "
     "dimensions={1}\n}\n",
     "t.hlo:5: error: node 'ag#1': declared dtype int32 but inferred float32"},
    {"HloModule m\n" SUM "ENTRY e {\n  a = f32[8] parameter(0)\n  b = f32[6] parameter(1)\n"
     "  ROOT rs = (f32[2], f32[2]) reduce-scatter(a, b), replica_groups={}, dimensions={0}, "
     "to_apply=sum\n}\n",
     "t.hlo:10: error: node 'rs#1': declared shape (2) but inferred (none: not a multiple of the "
     "group)"},
    {"HloModule m\n" SUM "ENTRY e {\n  a = f32[8] parameter(0)\n  b = f32[6] parameter(1)\n"
     "  ROOT ar = (f32[8], f32[8]) all-reduce(a, b), replica_groups={}, to_apply=sum\n}\n",
     "t.hlo:10: error: node 'ar#1': declared shape (8) but inferred (6)"},
};

static void test_errors(void **state) {
  (void)state;
  assert_refused("t.hlo", bad_modules, sizeof bad_modules / sizeof bad_modules[0]);
}

/* Nesting, size and blow-up limits fail cleanly. */
static void test_limits(void **state) {
  (void)state;
  size_t cap = 1 << 20, n = 0;
  char *t = malloc(cap);
  assert_non_null(t);
  cf_graph *g;
  /* 300 nested brackets in one attribute */
  n = (size_t)snprintf(t, cap, "HloModule m\nENTRY e {\n  ROOT p = f32[] parameter(0), x=");
  for (int i = 0; i < 300; i++)
    t[n++] = '{';
  for (int i = 0; i < 300; i++)
    t[n++] = '}';
  n += (size_t)snprintf(t + n, cap - n, "\n}\n");
  ASSERT_ERR(cf_graph_parse(ctx, "t.hlo", t, n, &g), CF_ERR_INVALID,
             "t.hlo:3: error: brackets nested deeper than 256");
  /* tuple shapes 40 deep */
  n = (size_t)snprintf(t, cap, "HloModule m\nENTRY e {\n  ROOT p = ");
  for (int i = 0; i < 40; i++)
    t[n++] = '(';
  n += (size_t)snprintf(t + n, cap - n, "f32[]");
  for (int i = 0; i < 40; i++)
    t[n++] = ')';
  n += (size_t)snprintf(t + n, cap - n, " parameter(0)\n}\n");
  ASSERT_ERR(cf_graph_parse(ctx, "t.hlo", t, n, &g), CF_ERR_INVALID,
             "t.hlo:3: error: tuple shapes nested deeper than 32");
  /* 40 computations each calling the next twice: 2^40 inlined instructions */
  n = (size_t)snprintf(t, cap, "HloModule m\nc0 {\n  ROOT p = f32[] parameter(0)\n}\n");
  for (int i = 1; i < 40; i++)
    n += (size_t)snprintf(t + n, cap - n,
                          "c%d {\n  p = f32[] parameter(0)\n  a = f32[] call(p), to_apply=c%d\n"
                          "  ROOT b = f32[] call(a), to_apply=c%d\n}\n",
                          i, i - 1, i - 1);
  n += (size_t)snprintf(
      t + n, cap - n,
      "ENTRY e {\n  p = f32[] parameter(0)\n  ROOT c = f32[] call(p), to_apply=c39\n}\n");
  ASSERT_ERR(cf_graph_parse(ctx, "t.hlo", t, n, &g), CF_ERR_INVALID,
             "instructions and operands (the limit is 8 per byte of the module, at least 65536 "
             "and at most 4000000)");
  /* calls 70 deep */
  n = (size_t)snprintf(t, cap, "HloModule m\nc0 {\n  ROOT p = f32[] parameter(0)\n}\n");
  for (int i = 1; i < 70; i++)
    n += (size_t)snprintf(
        t + n, cap - n,
        "c%d {\n  p = f32[] parameter(0)\n  ROOT a = f32[] call(p), to_apply=c%d\n}\n", i, i - 1);
  n += (size_t)snprintf(
      t + n, cap - n,
      "ENTRY e {\n  p = f32[] parameter(0)\n  ROOT c = f32[] call(p), to_apply=c69\n}\n");
  ASSERT_ERR(cf_graph_parse(ctx, "t.hlo", t, n, &g), CF_ERR_INVALID, "calls nested deeper than 64");
  /* tuples built 40 deep by tuple instructions */
  n = (size_t)snprintf(t, cap, "HloModule m\nENTRY e {\n  t0 = f32[] parameter(0)\n");
  for (int i = 1; i <= 40; i++)
    n += (size_t)snprintf(t + n, cap - n, "  t%d = (f32[]) tuple(t%d)\n", i, i - 1);
  n += (size_t)snprintf(t + n, cap - n, "}\n");
  ASSERT_ERR(cf_graph_parse(ctx, "t.hlo", t, n, &g), CF_ERR_INVALID,
             "instruction 't33': tuples nested deeper than 32");
  /* a NUL byte */
  const char nul[] = "HloModule m\nENTRY e {\n  ROOT p = f32[] parameter(0)\0\n}\n";
  ASSERT_ERR(cf_graph_parse(ctx, "t.hlo", nul, sizeof nul - 1, &g), CF_ERR_INVALID,
             "t.hlo:3: error: NUL byte");
  free(t);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_jax_tp_mlp),
      cmocka_unit_test(test_jax_mixed),
      cmocka_unit_test(test_jax_optimized),
      cmocka_unit_test(test_replica_group_forms),
      cmocka_unit_test(test_mesh),
      cmocka_unit_test(test_group_modes),
      cmocka_unit_test(test_structure),
      cmocka_unit_test(test_tuple_collectives),
      cmocka_unit_test(test_alltoall_permute),
      cmocka_unit_test(test_alltoall_combine),
      cmocka_unit_test(test_widened_reducer),
      cmocka_unit_test(test_constants),
      cmocka_unit_test(test_integer_constants_out_of_range),
      cmocka_unit_test(test_sniff_and_names),
      cmocka_unit_test(test_sdy_meshes),
      cmocka_unit_test(test_reducers),
      cmocka_unit_test(test_grammar),
      cmocka_unit_test(test_errors),
      cmocka_unit_test(test_limits),
      cmocka_unit_test(test_partitioned),
      cmocka_unit_test(test_uneven_replica_groups),
      cmocka_unit_test(test_opaque_record),
      cmocka_unit_test(test_collective_suggest),
      cmocka_unit_test(test_replica_group_order),
      cmocka_unit_test(test_combine_key_whole),
      cmocka_unit_test(test_collective_group_key),
      cmocka_unit_test(test_groups_of_one),
      cmocka_unit_test(test_no_pairs),
      cmocka_unit_test(test_tuple_world),
      cmocka_unit_test(test_splat_broadcast),
      cmocka_unit_test(test_headerless),
      cmocka_unit_test(test_reduce_scatter_async),
      cmocka_unit_test(test_control_flow),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
