/* test_stablehlo.c - unit tests for the StableHLO reader (frontend/stablehlo*.c).
 *
 * The data-parallel step in examples/stablehlo must import with its
 * collectives, groups and MatMuls where they are, and give the same
 * collectives in the same groups as its HLO twin; in-memory modules cover
 * the op forms (generic and pretty), types, constants, replica group forms,
 * meshes, shardings, calls, and the error messages (each with its line).
 */
#include "cf_graph_test.h"
#include "passes/passes.h"

static cf_graph *parse(const char *name, const char *text) {
  cf_graph *g = NULL;
  cf_status st = cf_graph_parse(ctx, name, text, strlen(text), &g);
  if (st) fail_msg("%s", cf_context_errmsg(ctx));
  return g;
}

static const char *type_of(const cf_node *n) { return cf_node_str(n, CF_A_TYPE, ""); }

/* ---- the example and its twin ---- */

static void test_dp_step(void **state) {
  (void)state;
  cf_graph *g = load(CF_SOURCE_DIR "/examples/stablehlo/jax_dp_step.mlir");
  assert_string_equal(g->name, "jit_step");
  assert_int_equal(g->world_size, 4);
  assert_group(g, "replica_group_0", "0,1,2,3");
  assert_int_equal(g->n_groups, 1);
  /* entry arguments are Inputs named after their SSA names, global shapes */
  assert_int_equal(node(g, "arg0")->op, CF_OP_INPUT);
  assert_shape(&node(g, "arg0")->out[0], CF_DT_FLOAT32, "16,8");
  /* the batch is split over dp: each rank's block of the global argument
   * (a Shard node); the weights are replicated */
  const cf_node *x = node(g, "0.local0");
  assert_int_equal(x->op, CF_OP_SHARD);
  assert_ptr_equal(operand(g, x, 0), node(g, "arg0"));
  assert_int_equal(cf_node_attr(x, CF_A_TILES)->v.shape->dims[0], 4);
  assert_shape(&x->out[0], CF_DT_FLOAT32, "4,8");
  const cf_node *h = node(g, "1");
  assert_int_equal(h->op, CF_OP_MATMUL);
  assert_ptr_equal(operand(g, h, 0), x);
  assert_ptr_equal(operand(g, h, 1), node(g, "arg1"));
  assert_int_equal(node(g, "cst")->op, CF_OP_CONSTANT);
  assert_int_equal(node(g, "3")->op, CF_OP_MUL);
  /* level 1: one all-reduce per gradient; level 2: one variadic all-reduce */
  const cf_node *a5 = node(g, "5"), *a7 = node(g, "7");
  assert_int_equal(a5->op, CF_OP_ALLREDUCE);
  assert_int_equal(cf_node_reduction(a5), CF_RED_SUM);
  assert_string_equal(cf_node_group(a5), "replica_group_0");
  assert_string_equal(type_of(operand(g, a5, 0)), "stablehlo.dot_general"); /* inlined call */
  assert_int_equal(a7->op, CF_OP_FUSEDALLREDUCE);
  cf_strs m7 = cf_node_strs(a7, CF_A_MEMBERS);
  assert_int_equal(m7.n, 2);
  assert_string_equal(m7.v[0], "7#0");
  assert_string_equal(m7.v[1], "7#1");
  /* results in the order of the return */
  assert_ptr_equal(operand(g, node(g, "output.0"), 0), a7);
  assert_int_equal(node(g, "output.0")->in[0].port, 0);
  assert_int_equal(node(g, "output.1")->in[0].port, 1);
  assert_ptr_equal(operand(g, node(g, "output.2"), 0), a5);
  assert_ptr_equal(operand(g, node(g, "output.3"), 0), node(g, "6"));
  /* the pretty stablehlo.reduce keeps both operands */
  const cf_node *red = node(g, "4");
  assert_string_equal(type_of(red), "stablehlo.reduce");
  assert_int_equal(red->n_in, 2);
  cf_graph_destroy(g);
}

/* The collectives of g as text, one line each: op, reduction, group ranks,
 * operand shapes (names differ between the formats). */
static void collectives(const cf_graph *g, char *buf, size_t len) {
  size_t o = 0;
  buf[0] = 0;
  for (int i = 0; i < g->n_nodes && o < len; i++) {
    const cf_node *n = &g->nodes[i];
    if (!cf_op_is_collective(n->op)) continue;
    const cf_group *gr = cf_graph_group(g, cf_node_group(n));
    o += (size_t)snprintf(buf + o, len - o, "%s %s ranks", cf_op_table[n->op].name,
                          cf_reduction_name(cf_node_reduction(n)));
    for (int k = 0; gr && k < gr->n_ranks * gr->n_parts && o < len; k++)
      o += (size_t)snprintf(buf + o, len - o, " %d", gr->ranks[k]);
    for (int k = 0; k < n->n_out && o < len; k++) {
      char s[64];
      o += (size_t)snprintf(buf + o, len - o, " [%s]",
                            cf_shape_format(&n->out[k].shape, s, sizeof s));
    }
    if (o < len) o += (size_t)snprintf(buf + o, len - o, "\n");
  }
}

static void test_hlo_twin(void **state) {
  (void)state;
  cf_graph *m = load(CF_SOURCE_DIR "/examples/stablehlo/jax_dp_step.mlir");
  cf_graph *h = load(CF_SOURCE_DIR "/examples/stablehlo/jax_dp_step.hlo");
  char a[2048], b[2048];
  collectives(m, a, sizeof a);
  collectives(h, b, sizeof b);
  assert_string_equal(a, "AllReduce sum ranks 0 1 2 3 [16,4]\n"
                         "AllReduce sum ranks 0 1 2 3 [4]\n"
                         "FusedAllReduce sum ranks 0 1 2 3 [8,16] [16]\n");
  assert_string_equal(a, b);
  assert_int_equal(m->world_size, h->world_size);
  cf_graph_destroy(m);
  cf_graph_destroy(h);
}

/* ---- op forms ---- */

static const char forms[] =
    "// a module without `module`: found by func.func\n"
    "func.func @main(%arg0: tensor<4xf32>, %arg1: tensor<2x2xbf16>, %p: tensor<4xi1>) -> "
    "(tensor<4xf32>, tensor<4xbf16>) {\n"
    "  %0 = \"stablehlo.add\"(%arg0, %arg0) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>\n"
    "  %1 = stablehlo.subtract %0, %arg0 : tensor<4xf32>\n"
    "  %2 = stablehlo.convert %1 : (tensor<4xf32>) -> tensor<4xf64>\n"
    "  %3 = stablehlo.reshape %arg1 : (tensor<2x2xbf16>) -> tensor<4xbf16>\n"
    "  %c = stablehlo.constant dense<[0, 1, 2, 3]> : tensor<4xi32>\n"
    "  %c_0 = stablehlo.constant dense<\"0x0000803F0000803F0000803F0000803F\"> : tensor<4xf32>\n"
    "  %c_1 = stablehlo.constant dense<0x7FC00000> : tensor<f32>\n"
    "  %c_2 = stablehlo.constant dense<[1.5, 2.5, 1.5, 1.5]> : tensor<4xf32>\n"
    "  %c_3 = \"stablehlo.constant\"() <{value = dense<2> : tensor<2x2xi64>}> : () -> "
    "tensor<2x2xi64>\n"
    "  %4 = stablehlo.multiply %c_0, %c_2 : tensor<4xf32> loc(\"m\")\n"
    "  %5 = stablehlo.not %p : tensor<4xi1>\n"
    "  %6 = sdy.sharding_constraint %4 <@mesh, [{}]> : tensor<4xf32>\n"
    "  %7 = stablehlo.custom_call @Sharding(%6) {mhlo.sharding = \"{replicated}\"} : "
    "(tensor<4xf32>) -> tensor<4xf32>\n"
    "  %8:2 = stablehlo.while(%iterArg = %c, %iterArg_4 = %7) : tensor<4xi32>, tensor<4xf32>\n"
    "   cond {\n"
    "    %9 = stablehlo.compare  LT, %iterArg, %iterArg,  SIGNED : (tensor<4xi32>, "
    "tensor<4xi32>) -> tensor<4xi1>\n"
    "    stablehlo.return %9 : tensor<4xi1>\n"
    "  } do {\n"
    "    %9 = stablehlo.add %iterArg_4, %4 : tensor<4xf32>\n"
    "    stablehlo.return %iterArg, %9 : tensor<4xi32>, tensor<4xf32>\n"
    "  }\n"
    "  return %8#1, %3 : tensor<4xf32>, tensor<4xbf16>\n"
    "}\n";

static void test_forms(void **state) {
  (void)state;
  char text[sizeof forms + 8];
  snprintf(text, sizeof text, "%s", forms);
  cf_graph *g = parse("forms.mlir", text);
  assert_int_equal(node(g, "0")->op, CF_OP_ADD);
  assert_int_equal(node(g, "1")->op, CF_OP_SUB);
  assert_int_equal(node(g, "2")->op, CF_OP_CAST);
  assert_shape(&node(g, "2")->out[0], CF_DT_FLOAT64, "4");
  assert_int_equal(node(g, "3")->op, CF_OP_RESHAPE);
  /* constants: iota list, a "0x..." blob of one value, a NaN bit pattern
   * (no Constant can hold it), mixed values, a generic-form splat */
  assert_int_equal(node(g, "c")->op, CF_OP_CONSTANT);
  assert_string_equal(cf_node_str(node(g, "c"), CF_A_INIT, ""), "iota");
  const cf_node *c0 = node(g, "c_0");
  assert_int_equal(c0->op, CF_OP_CONSTANT);
  assert_true(cf_node_attr(c0, CF_A_VALUE)->v.f == 1.0);
  assert_int_equal(node(g, "c_1")->op, CF_OP_OPAQUE);
  assert_int_equal(node(g, "c_2")->op, CF_OP_OPAQUE);
  const cf_node *c3 = node(g, "c_3");
  assert_int_equal(c3->op, CF_OP_CONSTANT);
  assert_true(cf_node_attr(c3, CF_A_VALUE)->v.f == 2.0);
  assert_shape(&c3->out[0], CF_DT_INT64, "2,2");
  /* i1 is bool; stablehlo.not has no IR op: Opaque */
  assert_string_equal(type_of(node(g, "5")), "stablehlo.not");
  assert_shape(&node(g, "5")->out[0], CF_DT_BOOL, "4");
  /* sharding ops forward their operand; the while keeps its operands, then
   * takes what its regions end in: the condition's compare (named 9) and
   * the body's add (9 too, so renamed), which uses %4 from around it */
  const cf_node *w = node(g, "8");
  assert_string_equal(type_of(w), "stablehlo.while");
  assert_int_equal(w->n_in, 4);
  assert_ptr_equal(operand(g, w, 0), node(g, "c"));
  assert_ptr_equal(operand(g, w, 1), node(g, "4"));
  const cf_node *cmp = operand(g, w, 2), *add = operand(g, w, 3);
  assert_string_equal(type_of(cmp), "stablehlo.compare");
  assert_int_equal(add->op, CF_OP_ADD);
  assert_ptr_equal(operand(g, add, 1), node(g, "4"));
  assert_true(cmp->region > 0 && add->region > 0 && cmp->region != add->region);
  assert_int_equal(w->region, 0);
  assert_string_equal(g->regions[add->region].part, "body");
  assert_string_equal(g->regions[cmp->region].owner, "8");
  assert_ptr_equal(operand(g, node(g, "output.0"), 0), w);
  assert_int_equal(node(g, "output.0")->in[0].port, 1);
  assert_ptr_equal(operand(g, node(g, "output.1"), 0), node(g, "3"));
  cf_graph_destroy(g);
}

/* stablehlo.while, if and case (issue 32): each region is read into the
 * graph; the collectives of one region combine, never across regions. */
static void test_control_flow(void **state) {
  (void)state;
  cf_graph *g = load(CF_SOURCE_DIR "/tests/stablehlo/control_flow.mlir");
  assert_int_equal(g->n_regions, 1 + 2 + 2 + 2);
  const cf_node *w0 = node(g, "w0"), *t0 = node(g, "t0"), *b1 = node(g, "b1");
  const cf_region *rw = &g->regions[w0->region];
  assert_string_equal(rw->op, "stablehlo.while");
  assert_string_equal(rw->owner, "w");
  assert_string_equal(rw->part, "body");
  assert_int_equal(rw->line, 11);
  assert_string_equal(g->regions[node(g, "c")->region].part, "condition");
  assert_string_equal(g->regions[t0->region].part, "true branch");
  assert_string_equal(g->regions[b1->region].part, "branch 1");
  assert_string_equal(g->regions[b1->region].op, "stablehlo.case");
  /* the body's %it is the while's operand %pre; the condition uses %k from around it */
  assert_ptr_equal(operand(g, w0, 0), node(g, "pre"));
  assert_ptr_equal(operand(g, node(g, "c"), 0), node(g, "k"));
  /* the if's false branch returns %x: the if's node takes t0 and nothing of it */
  const cf_node *i = node(g, "i");
  assert_int_equal(i->n_in, 2);
  assert_ptr_equal(operand(g, i, 1), t0);
  cf_pass_options o = {.split = "bytes:1G"};
  assert_int_equal(cf_passes_run(g, "infer,fuse-allreduce", &o, NULL, NULL), CF_OK);
  int fused = 0;
  for (int k = 0; k < g->n_nodes; k++)
    if (g->nodes[k].op == CF_OP_FUSEDALLREDUCE) {
      cf_strs m = cf_node_strs(&g->nodes[k], CF_A_MEMBERS);
      assert_int_equal(m.n, 2); /* w0 and w1, in either order */
      assert_true((!strcmp(m.v[0], "w0") && !strcmp(m.v[1], "w1")) ||
                  (!strcmp(m.v[0], "w1") && !strcmp(m.v[1], "w0")));
      fused++;
    }
  assert_int_equal(fused, 1);
  for (const char *const *nm = (const char *const[]){"pre", "t0", "b0", "b1", NULL}; *nm; nm++)
    assert_int_equal(node(g, *nm)->op, CF_OP_ALLREDUCE);
  assert_int_equal(cf_graph_regions_refuse(g), CF_ERR_INVALID);
  assert_non_null(strstr(cf_context_errmsg(ctx), "control_flow.mlir:11: error: stablehlo.while "
                                                 "'w': loop bodies are compiled but not run"));
  cf_graph_destroy(g);
}

static void test_captures(void **state) {
  (void)state;
  /* a region's use of an outer value is a dependency */
  cf_graph *g = parse("t.mlir", "func.func @main(%a: tensor<4xf32>, %b: tensor<4xf32>) -> "
                                "tensor<4xf32> {\n"
                                "  %0 = stablehlo.while(%x = %a) : tensor<4xf32>\n"
                                "   cond {\n"
                                "    %c = stablehlo.constant dense<true> : tensor<i1>\n"
                                "    stablehlo.return %c : tensor<i1>\n"
                                "  } do {\n"
                                "    %1 = stablehlo.add %x, %b : tensor<4xf32>\n"
                                "    stablehlo.return %1 : tensor<4xf32>\n"
                                "  }\n"
                                "  return %0 : tensor<4xf32>\n"
                                "}\n");
  const cf_node *w = node(g, "0"), *add = node(g, "1");
  assert_ptr_equal(operand(g, add, 0), node(g, "a"));
  assert_ptr_equal(operand(g, add, 1), node(g, "b"));
  assert_int_equal(w->n_in, 3); /* a, then the condition's constant and the body's add */
  assert_ptr_equal(operand(g, w, 0), node(g, "a"));
  assert_ptr_equal(operand(g, w, 2), add);
  cf_graph_destroy(g);
}

static const char collectives_module[] =
    "#loc1 = loc(\"p\")\n"
    "module @c attributes {mhlo.num_partitions = 8 : i32, mhlo.num_replicas = 1 : i32} {\n"
    "  sdy.mesh @mesh = <[\"dp\"=2, \"tp\"=4]>\n"
    "  func.func public @main(%arg0: tensor<8x4xf32> loc(\"p\")) -> (tensor<8x4xf32>) {\n"
    "    %0 = \"stablehlo.all_reduce\"(%arg0) <{channel_handle = "
    "#stablehlo.channel_handle<handle = 1, type = 1>, replica_groups = "
    "#stablehlo.replica_group_mesh_axes<mesh = @mesh, axes = [\"tp\"]>, "
    "use_global_device_ids}> ({\n"
    "    ^bb0(%a: tensor<f32>, %b: tensor<f32>):\n"
    "      %m = stablehlo.maximum %a, %b : tensor<f32>\n"
    "      stablehlo.return %m : tensor<f32>\n"
    "    }) : (tensor<8x4xf32>) -> tensor<8x4xf32>\n"
    "    %1 = \"stablehlo.all_gather\"(%0) <{all_gather_dim = 0 : i64, channel_handle = "
    "#stablehlo.channel_handle<handle = 2, type = 1>, replica_groups = dense<[[0, 4], [1, 5], "
    "[2, 6], [3, 7]]> : tensor<4x2xi64>, use_global_device_ids}> : (tensor<8x4xf32>) -> "
    "tensor<16x4xf32>\n"
    "    %2 = \"stablehlo.reduce_scatter\"(%1) <{channel_handle = "
    "#stablehlo.channel_handle<handle = 3, type = 1>, replica_groups = dense<[[0, 4], [1, 5], "
    "[2, 6], [3, 7]]> : tensor<4x2xi64>, scatter_dimension = 0 : i64, use_global_device_ids}> "
    "({\n"
    "    ^bb0(%a: tensor<f32>, %b: tensor<f32>):\n"
    "      %s = stablehlo.add %a, %b : tensor<f32>\n"
    "      stablehlo.return %s : tensor<f32>\n"
    "    }) : (tensor<16x4xf32>) -> tensor<8x4xf32>\n"
    "    %3 = \"stablehlo.collective_broadcast\"(%2) <{channel_handle = "
    "#stablehlo.channel_handle<handle = 4, type = 1>, replica_groups = dense<[[0, 1, 2, 3, 4, "
    "5, 6, 7]]> : tensor<1x8xi64>}> : (tensor<8x4xf32>) -> tensor<8x4xf32>\n"
    "    %4 = \"stablehlo.all_gather\"(%3) <{all_gather_dim = 1 : i64, channel_handle = "
    "#stablehlo.channel_handle<handle = 6, type = 1>, use_global_device_ids, replica_groups = "
    "dense<[[0, 1, 2, 3, 4, 5, 6, 7]]> : tensor<1x8xi64>}> : (tensor<8x4xf32>) -> "
    "tensor<8x32xf32>\n"
    "    %5:2 = \"stablehlo.all_to_all\"(%3, %3) <{channel_handle = "
    "#stablehlo.channel_handle<handle = 7, type = 1>, concat_dimension = 0 : i64, "
    "split_count = 8 : i64, split_dimension = 0 : i64}> : (tensor<8x4xf32>, tensor<8x4xf32>) -> "
    "(tensor<8x4xf32>, tensor<8x4xf32>)\n"
    "    %6 = \"stablehlo.all_reduce\"(%5#0) <{channel_handle = #stablehlo.channel_handle<handle = "
    "5, type = 1>, replica_groups = dense<[[0, 1, 2, 3, 4], [5, 6, 7, -1, -1]]> : tensor<2x5xi64>, "
    "use_global_device_ids}> ({\n"
    "    ^bb0(%a: tensor<f32>, %b: tensor<f32>):\n"
    "      %s = stablehlo.add %a, %b : tensor<f32>\n"
    "      stablehlo.return %s : tensor<f32>\n"
    "    }) : (tensor<8x4xf32>) -> tensor<8x4xf32>\n"
    "    %7:2 = \"mhlo.all_reduce\"(%6, %4) <{channel_handle = #mhlo.channel_handle<handle = 6, "
    "type = 1>, replica_groups = dense<[[0, 1], [2, 3], [4, 5], [6, 7]]> : tensor<4x2xi64>, "
    "use_global_device_ids}> ({\n"
    "    ^bb0(%a: tensor<f32>, %b: tensor<f32>):\n"
    "      %s = mhlo.multiply %a, %b : tensor<f32>\n"
    "      mhlo.return %s : tensor<f32>\n"
    "    }) : (tensor<8x4xf32>, tensor<8x32xf32>) -> (tensor<8x4xf32>, tensor<8x32xf32>)\n"
    "    return %7#0 : tensor<8x4xf32>\n"
    "  }\n"
    "}\n";

static void test_collectives(void **state) {
  (void)state;
  cf_graph *g = parse("c.mlir", collectives_module);
  assert_int_equal(g->world_size, 8);
  /* a mesh axis: one part per dp coordinate, named after the axis */
  const cf_node *ar = node(g, "0");
  assert_int_equal(ar->op, CF_OP_ALLREDUCE);
  assert_int_equal(cf_node_reduction(ar), CF_RED_MAX);
  assert_string_equal(cf_node_group(ar), "tp");
  assert_group(g, "tp", "0,1,2,3|4,5,6,7");
  const cf_node *ag = node(g, "1"), *rs = node(g, "2"), *bc = node(g, "3");
  assert_int_equal(ag->op, CF_OP_ALLGATHER);
  assert_int_equal(cf_node_layout(ag), CF_LAYOUT_CONCAT);
  assert_group(g, cf_node_group(ag), "0,4|1,5|2,6|3,7");
  assert_int_equal(rs->op, CF_OP_REDUCESCATTER);
  assert_string_equal(cf_node_group(rs), cf_node_group(ag));
  assert_int_equal(bc->op, CF_OP_BROADCAST);
  assert_int_equal(cf_node_attr(bc, CF_A_ROOT)->v.i, 0);
  /* along dimension 1 (all_gather_dim) */
  const cf_node *ag1 = node(g, "4");
  assert_int_equal(ag1->op, CF_OP_ALLGATHER);
  assert_int_equal(cf_node_int(ag1, CF_A_DIM, 0), 1);
  assert_int_equal(cf_node_fusion(ag1), 1); /* combinable, as in XLA */
  assert_int_equal(ag1->out[0].shape.dims[1], 32);
  /* a variadic all_to_all: each operand split, exchanged and concatenated
   * on its own, one AllToAll each */
  for (int k = 0; k < 2; k++) {
    const cf_node *a2a = node(g, k ? "5#1" : "5#0");
    assert_int_equal(a2a->op, CF_OP_ALLTOALL);
    assert_int_equal(a2a->n_in, 1);
    assert_int_equal(cf_node_attr(a2a, CF_A_SPLIT_DIMENSION)->v.i, 0);
    assert_int_equal(cf_node_attr(a2a, CF_A_CONCAT_DIMENSION)->v.i, 0);
    assert_int_equal(a2a->out[0].shape.dims[0], 8);
  }
  /* groups of different sizes: Opaque */
  assert_string_equal(type_of(node(g, "6")), "all-reduce over 2 replica groups of different sizes");
  /* a variadic all-reduce: one fused node (mhlo. reads like stablehlo.) */
  const cf_node *f = node(g, "7");
  assert_int_equal(f->op, CF_OP_FUSEDALLREDUCE);
  assert_int_equal(cf_node_reduction(f), CF_RED_PROD);
  cf_strs members = cf_node_strs(f, CF_A_MEMBERS);
  assert_int_equal(members.n, 2);
  assert_string_equal(members.v[0], "7#0");
  assert_string_equal(members.v[1], "7#1");
  cf_graph_destroy(g);
}

static void test_alltoall_permute(void **state) {
  (void)state;
  cf_graph *g = load(CF_SOURCE_DIR "/tests/stablehlo/alltoall_permute.mlir");
  const cf_node *a0 = node(g, "0"), *a1 = node(g, "1"), *cp = node(g, "2");
  assert_int_equal(a0->op, CF_OP_ALLTOALL);
  assert_int_equal(cf_node_fusion(a0), 1); /* combinable, as every collective read from StableHLO */
  assert_int_equal(cf_node_attr(a0, CF_A_SPLIT_DIMENSION)->v.i, 0);
  assert_group(g, cf_node_group(a0), "0,1,2,3");
  /* split along 1, concatenated along 0, in two groups of two */
  assert_int_equal(a1->op, CF_OP_ALLTOALL);
  assert_int_equal(cf_node_attr(a1, CF_A_SPLIT_DIMENSION)->v.i, 1);
  assert_int_equal(cf_node_attr(a1, CF_A_CONCAT_DIMENSION)->v.i, 0);
  assert_group(g, cf_node_group(a1), "0,1|2,3");
  assert_shape(&a1->out[0], CF_DT_FLOAT32, "16,2");
  assert_int_equal(cp->op, CF_OP_COLLECTIVEPERMUTE);
  assert_string_equal(cf_node_str(cp, CF_A_SOURCE_TARGET_PAIRS, ""), "{0,1},{1,2},{2,3},{3,0}");
  assert_ptr_equal(operand(g, cp, 0), a0);
  cf_graph_destroy(g);
}

/* A signature wrapped at its arrow, as openxla/stablehlo's tests write long
 * ones: `(T, T)\n -> (T, T) {` on a function, `(T) ->\n T` on an op. */
static void test_wrapped_signature(void **state) {
  (void)state;
  cf_graph *g =
      parse("w.mlir", "module @w {\n"
                      "  func.func @f(%data0: tensor<1x2xi64>,\n"
                      "               %data1: tensor<3xi32>)\n"
                      "      -> (tensor<1x2xi64>, tensor<3xi32>) {\n"
                      "    %0 = \"stablehlo.all_reduce\"(%data0) ({\n"
                      "      ^bb0(%a: tensor<i64>, %b: tensor<i64>):\n"
                      "        %s = stablehlo.add %a, %b : tensor<i64>\n"
                      "        stablehlo.return %s : tensor<i64>\n"
                      "    }) : (tensor<1x2xi64>) ->\n"
                      "        tensor<1x2xi64>\n"
                      "    %1 = \"stablehlo.all_gather\"(%data1) {all_gather_dim = 0 : i64} : "
                      "(tensor<3xi32>)\n"
                      "        -> tensor<3xi32>\n"
                      "    func.return %0, %1 : tensor<1x2xi64>, tensor<3xi32>\n"
                      "  }\n"
                      "}\n"
                      "{-#\n  dialect_resources: {\n    builtin: {\n    }\n  }\n#-}\n");
  assert_int_equal(node(g, "0")->op, CF_OP_ALLREDUCE);
  assert_int_equal(node(g, "0")->line, 5);
  assert_int_equal(node(g, "1")->op, CF_OP_ALLGATHER);
  assert_int_equal(node(g, "1")->line, 11);
  assert_shape(&node(g, "data1")->out[0], CF_DT_INT32, "3");
  cf_graph_destroy(g);
}

/* A private function declared without a body (an external symbol, as
 * openxla/stablehlo's verify_replica_groups_mesh_axes.mlir writes one) is
 * nothing to read; a public one without a body is an error. */
static void test_external_declaration(void **state) {
  (void)state;
  cf_graph *g = parse("d.mlir", "func.func private @mesh()\n"
                                "func.func @main(%a: tensor<4xf32>) -> tensor<4xf32> {\n"
                                "  return %a : tensor<4xf32>\n"
                                "}\n");
  assert_int_equal(g->n_nodes, 2);
  cf_graph_destroy(g);
  cf_graph *bad = NULL;
  const char *text = "func.func @pub(%a: tensor<4xf32>) -> tensor<4xf32>\n";
  assert_int_equal(cf_graph_parse(ctx, "d.mlir", text, strlen(text), &bad), CF_ERR_INVALID);
  assert_null(bad);
  assert_string_equal(cf_context_errmsg(ctx),
                      "d.mlir:1: error: function 'pub': expected a body '{ ... }'");
}

/* collective_broadcast with a channel_handle groups partition ids inside
 * each replica (XLA's cross-partition mode), as openxla/stablehlo's
 * interpreter tests expect. */
static void test_broadcast_cross_partition(void **state) {
  (void)state;
  static const char *const grid[][3] = {
      /* replicas, partitions, replica_groups -> the IR group */
      {"2", "2", "[[1, 0]]"},
      {"4", "1", "[[0]]"},
      {"1", "4", "[[2, 1]]"},
  };
  static const char *const want[] = {"1,0|3,2", "0|1|2|3", "2,1"};
  for (int i = 0; i < 3; i++) {
    char t[1024];
    snprintf(t, sizeof t,
             "module @b attributes {mhlo.num_replicas = %s : i32, mhlo.num_partitions = %s : "
             "i32} {\n"
             "  func.func @main(%%a: tensor<1x2xi64>) -> tensor<1x2xi64> {\n"
             "    %%0 = \"stablehlo.collective_broadcast\"(%%a) {replica_groups = dense<%s> : "
             "tensor<1x2xi64>, channel_handle = #stablehlo.channel_handle<handle = 1, type = "
             "0>} : (tensor<1x2xi64>) -> tensor<1x2xi64>\n"
             "    return %%0 : tensor<1x2xi64>\n  }\n}\n",
             grid[i][0], grid[i][1], grid[i][2]);
    cf_graph *g = parse("b.mlir", t);
    const cf_node *bc = node(g, "0");
    assert_int_equal(bc->op, CF_OP_BROADCAST);
    assert_group(g, cf_node_group(bc), want[i]);
    cf_graph_destroy(g);
  }
}

/* StableHLO's replica_group_mesh_axes over an inline #stablehlo.mesh, a
 * generic "sdy.mesh"() declaration and #stablehlo.axis_ref axes: the
 * groups the peer's CHECK lines expect (openxla/stablehlo's
 * mesh_axes_replica_group_compatibility.mlir, transcribed). */
static void test_mesh_axes_compat(void **state) {
  (void)state;
  static const char *const cases[][2] = {
      {"all_reduce_rgv3", "0,2|1,3"},   {"all_gather_rgv3", "0,1|2,3"},
      {"all_to_all_rgv3", "0,2|1,3"},   {"all_reduce_sdy_mesh", "0,2|1,3"},
      {"all_reduce_sdy_mesh_max", "0"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    char path[512];
    snprintf(path, sizeof path, "%s/tests/stablehlo/peers/compat_%s.mlir", CF_SOURCE_DIR,
             cases[i][0]);
    cf_graph *g = load(path);
    const cf_node *c = node(g, "0");
    assert_true(cf_op_is_collective(c->op));
    assert_group(g, cf_node_group(c), cases[i][1]);
    cf_graph_destroy(g);
  }
}

static void test_permute_ring(void **state) {
  (void)state;
  /* a ring over every device: 256 pairs, 512 ids */
  size_t cap = 16384, n = 0;
  char *t = malloc(cap);
  assert_non_null(t);
  n += (size_t)snprintf(t + n, cap - n,
                        "module @r attributes {mhlo.num_partitions = 256 : i32} {\n"
                        "  func.func public @main(%%a: tensor<4xf32>) -> tensor<4xf32> {\n"
                        "    %%0 = \"stablehlo.collective_permute\"(%%a) <{channel_handle = "
                        "#stablehlo.channel_handle<handle = 1, type = 1>, source_target_pairs = "
                        "dense<[");
  for (int i = 0; i < 256; i++)
    n += (size_t)snprintf(t + n, cap - n, "%s[%d, %d]", i ? ", " : "", i, (i + 1) % 256);
  n += (size_t)snprintf(t + n, cap - n,
                        "]> : tensor<256x2xi64>}> : (tensor<4xf32>) -> tensor<4xf32>\n"
                        "    return %%0 : tensor<4xf32>\n  }\n}\n");
  cf_graph *g = parse("ring.mlir", t);
  const cf_node *cp = node(g, "0");
  assert_int_equal(cp->op, CF_OP_COLLECTIVEPERMUTE);
  assert_non_null(strstr(cf_node_str(cp, CF_A_SOURCE_TARGET_PAIRS, ""), "{254,255},{255,0}"));
  assert_int_equal(g->world_size, 256);
  cf_graph_destroy(g);
  free(t);
}

static void test_calls_and_manual(void **state) {
  (void)state;
  cf_graph *g =
      parse("m.mlir",
            "module @m {\n"
            "  sdy.mesh @mesh = <[\"x\"=2, \"y\"=2]>\n"
            "  func.func private @f(%a: tensor<2x4xf32>) -> tensor<2x4xf32> {\n"
            "    %0 = call @g(%a) : (tensor<2x4xf32>) -> tensor<2x4xf32>\n"
            "    return %0 : tensor<2x4xf32>\n"
            "  }\n"
            "  func.func private @g(%a: tensor<2x4xf32>) -> tensor<2x4xf32> {\n"
            "    %0 = stablehlo.multiply %a, %a : tensor<2x4xf32>\n"
            "    return %0 : tensor<2x4xf32>\n"
            "  }\n"
            "  func.func public @step(%arg0: tensor<4x8xf32>) -> tensor<4x8xf32> {\n"
            "    %0 = sdy.manual_computation(%arg0) in_shardings=[<@mesh, [{\"x\"}, {\"y\", ?}]>] "
            "out_shardings=[<@mesh, [{\"x\"}, {\"y\"}]>] manual_axes={\"x\", \"y\"} "
            "(%arg1: tensor<2x4xf32>) {\n"
            "      %1 = func.call @f(%arg1) : (tensor<2x4xf32>) -> tensor<2x4xf32>\n"
            "      %2 = func.call @f(%1) : (tensor<2x4xf32>) -> tensor<2x4xf32>\n"
            "      sdy.return %2 : tensor<2x4xf32>\n"
            "    } : (tensor<4x8xf32>) -> tensor<4x8xf32>\n"
            "    return %0 : tensor<4x8xf32>\n"
            "  }\n"
            "}\n");
  /* the only public function is the entry; the world is the mesh */
  assert_int_equal(g->world_size, 4);
  const cf_node *l = node(g, "0.local0");
  assert_shape(&l->out[0], CF_DT_FLOAT32, "2,4");
  /* two inlined copies of @g's multiply, renamed: the entry has a %0 */
  const cf_node *m1 = node(g, "0/1"), *m2 = node(g, "0/2");
  assert_int_equal(m1->op, CF_OP_MUL);
  assert_ptr_equal(operand(g, m1, 0), l);
  assert_ptr_equal(operand(g, m2, 0), m1);
  assert_ptr_equal(operand(g, node(g, "output"), 0), m2);
  cf_graph_destroy(g);
}

static void test_sniff(void **state) {
  (void)state;
  const char text[] = "module {\n  func.func @main(%arg0: tensor<2xf32>) -> tensor<2xf32> {\n"
                      "    return %arg0 : tensor<2xf32>\n  }\n}\n";
  cf_graph *g = parse("graph.txt", text);
  assert_int_equal(node(g, "arg0")->op, CF_OP_INPUT);
  assert_ptr_equal(operand(g, node(g, "output"), 0), node(g, "arg0"));
  cf_graph_destroy(g);
}

/* A reducer region is a reduction only when it is exactly one add,
 * multiply, maximum or minimum of its two arguments (either order), as in
 * HLO: (a+b)*(a+b) and a+1 are Opaque, not a product and a sum. */
static void test_reducers(void **state) {
  (void)state;
  static const char *const ops[][3] = {
      /* name, op, reducer body */
      {"sq", "all_reduce",
       "    %s = stablehlo.add %x, %y : tensor<f32>\n"
       "    %m = stablehlo.multiply %s, %s : tensor<f32>\n    stablehlo.return %m : tensor<f32>\n"},
      {"inc", "all_reduce",
       "    %c = stablehlo.constant dense<1.0> : tensor<f32>\n"
       "    %s = stablehlo.add %x, %c : tensor<f32>\n    stablehlo.return %s : tensor<f32>\n"},
      {"swapped", "all_reduce",
       "    %s = stablehlo.minimum %y, %x : tensor<f32>\n    stablehlo.return %s : tensor<f32>\n"},
      {"rs", "reduce_scatter",
       "    %s = stablehlo.add %x, %y : tensor<f32>\n"
       "    %m = stablehlo.multiply %s, %s : tensor<f32>\n    stablehlo.return %m : tensor<f32>\n"},
  };
  char text[4096];
  size_t o = (size_t)snprintf(text, sizeof text,
                              "func.func @main(%%a: tensor<4xf32>) -> (tensor<4xf32>, "
                              "tensor<4xf32>, tensor<4xf32>, tensor<2xf32>) {\n");
  for (size_t i = 0; i < sizeof ops / sizeof ops[0]; i++) {
    bool rs = !strcmp(ops[i][1], "reduce_scatter");
    o += (size_t)snprintf(text + o, sizeof text - o,
                          "  %%%s = \"stablehlo.%s\"(%%a) <{replica_groups = dense<[[0, 1]]> : "
                          "tensor<1x2xi64>%s}> ({\n  ^bb0(%%x: tensor<f32>, %%y: tensor<f32>):\n"
                          "%s  }) : (tensor<4xf32>) -> tensor<%dxf32>\n",
                          ops[i][0], ops[i][1], rs ? ", scatter_dimension = 0 : i64" : "",
                          ops[i][2], rs ? 2 : 4);
  }
  snprintf(text + o, sizeof text - o,
           "  return %%sq, %%inc, %%swapped, %%rs : tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, "
           "tensor<2xf32>\n}\n");
  cf_graph *g = parse("t.mlir", text);
  assert_int_equal(node(g, "sq")->op, CF_OP_OPAQUE);
  assert_string_equal(type_of(node(g, "sq")),
                      "all-reduce (reducer other than one 'multiply' of its two parameters)");
  assert_int_equal(node(g, "inc")->op, CF_OP_OPAQUE);
  assert_string_equal(type_of(node(g, "inc")),
                      "all-reduce (reducer other than one 'add' of its two parameters)");
  assert_int_equal(node(g, "rs")->op, CF_OP_OPAQUE);
  assert_int_equal(node(g, "swapped")->op, CF_OP_ALLREDUCE);
  assert_int_equal(cf_node_reduction(node(g, "swapped")), CF_RED_MIN);
  cf_graph_destroy(g);
}

/* A quantized element type (openxla/stablehlo's ops_stablehlo.mlir,
 * @all_reduce_with_promotable_quantized_types) stands in as its storage
 * type for Opaque data: the collective over it is Opaque, not the module
 * refused ("unknown element type ''" before); a per-axis one too. */
static void test_quantized_types(void **state) {
  (void)state;
  const char *text =
      "func.func @main(%a: tensor<4x!quant.uniform<i8:f32, 2.000000e+00:15>>, %b: "
      "tensor<1x2x!quant.uniform<i8<-128:127>:f32:1, {0.1:-30, 0.5:-20}>>) -> "
      "tensor<4x!quant.uniform<i16:f32, 2.000000e+00:15>> {\n"
      "  %r = \"stablehlo.all_reduce\"(%a) ({\n  ^bb0(%x: tensor<!quant.uniform<i16:f32, "
      "2.000000e+00:15>>, %y: tensor<!quant.uniform<i16:f32, 2.000000e+00:15>>):\n"
      "    %s = stablehlo.add %x, %y : tensor<!quant.uniform<i16:f32, 2.000000e+00:15>>\n"
      "    stablehlo.return %s : tensor<!quant.uniform<i16:f32, 2.000000e+00:15>>\n"
      "  }) {replica_groups = dense<[[0, 1]]> : tensor<1x2xi64>} : (tensor<4x!quant.uniform<i8:f32, "
      "2.000000e+00:15>>) -> tensor<4x!quant.uniform<i16:f32, 2.000000e+00:15>>\n"
      "  return %r : tensor<4x!quant.uniform<i16:f32, 2.000000e+00:15>>\n}\n";
  cf_graph *g = parse("t.mlir", text);
  const cf_node *r = node(g, "r");
  assert_int_equal(r->op, CF_OP_OPAQUE);
  assert_string_equal(type_of(r), "all-reduce (element type without an IR dtype)");
  assert_shape(&r->out[0], CF_DT_INT16, "4");
  cf_graph_destroy(g);
}

/* A quoted op name may hold '-' (openxla/stablehlo's legalize_deprecated_ops
 * test, @op_cross_replica_sum): the deprecated op is a foreign op, Opaque
 * with the warning ("expected an op name" before). */
static void test_dashed_op_name(void **state) {
  (void)state;
  cf_graph *g = parse("t.mlir",
                      "func.func @main(%a: tensor<f32>) -> tensor<f32> {\n"
                      "  %0 = \"stablehlo.cross-replica-sum\"(%a) {replica_groups = dense<[[0], "
                      "[1]]> : tensor<2x1xi64>} : (tensor<f32>) -> tensor<f32>\n"
                      "  return %0 : tensor<f32>\n}\n");
  assert_int_equal(node(g, "0")->op, CF_OP_OPAQUE);
  assert_string_equal(type_of(node(g, "0")), "stablehlo.cross-replica-sum");
  cf_graph_destroy(g);
}

/* StableHLO's async_start (its region run as a call; the value a
 * !stablehlo.future) and async_done (openxla/stablehlo's verify_async_ops.mlir):
 * the wrapped collective is read ("unsupported type '!stablehlo.future'"
 * before). */
static void test_async_ops(void **state) {
  (void)state;
  cf_graph *g = parse(
      "t.mlir",
      "func.func @main(%a: tensor<4x4xf32>) -> tensor<4x4xf32> {\n"
      "  %0 = \"stablehlo.async_start\"(%a) ({\n  ^bb0(%b: tensor<4x4xf32>):\n"
      "    %1 = \"stablehlo.all_reduce\"(%b) ({\n    ^bb1(%x: tensor<f32>, %y: tensor<f32>):\n"
      "      %2 = \"stablehlo.add\"(%x, %y) : (tensor<f32>, tensor<f32>) -> tensor<f32>\n"
      "      \"stablehlo.return\"(%2) : (tensor<f32>) -> ()\n"
      "    }) {replica_groups = dense<[[0, 1]]> : tensor<1x2xi64>} : (tensor<4x4xf32>) -> "
      "tensor<4x4xf32>\n    \"stablehlo.return\"(%1) : (tensor<4x4xf32>) -> ()\n"
      "  }) : (tensor<4x4xf32>) -> !stablehlo.future<tensor<4x4xf32>>\n"
      "  %3 = \"stablehlo.async_done\"(%0) : (!stablehlo.future<tensor<4x4xf32>>) -> "
      "tensor<4x4xf32>\n  return %3 : tensor<4x4xf32>\n}\n");
  int n_ar = 0;
  for (int i = 0; i < g->n_nodes; i++)
    n_ar += g->nodes[i].op == CF_OP_ALLREDUCE;
  assert_int_equal(n_ar, 1);
  assert_int_equal(g->world_size, 2);
  cf_graph_destroy(g);
}

/* Every sdy.mesh reaches the evaluator (only the first 16 did: a manual
 * computation over the 17th stayed Opaque and ran on synthetic data). */
static void test_many_meshes(void **state) {
  (void)state;
  char text[4096];
  size_t o = 0;
  for (int i = 0; i < 40; i++)
    o += (size_t)snprintf(text + o, sizeof text - o, "sdy.mesh @m%d = <[\"x\"=%d]>\n", i,
                          i == 39 ? 4 : 2);
  snprintf(text + o, sizeof text - o,
           "func.func @main(%%a: tensor<4xf32>) -> tensor<4xf32> {\n"
           "  %%0 = sdy.manual_computation(%%a) in_shardings=[<@m39, [{\"x\"}]>] "
           "out_shardings=[<@m39, [{\"x\"}]>] manual_axes={\"x\"} (%%b: tensor<1xf32>) {\n"
           "    sdy.return %%b : tensor<1xf32>\n  } : (tensor<4xf32>) -> tensor<4xf32>\n"
           "  return %%0 : tensor<4xf32>\n}\n");
  cf_graph *g = parse("t.mlir", text);
  const cf_node *x = node(g, "0.local0");
  assert_int_equal(x->op, CF_OP_SHARD);
  assert_int_equal(cf_node_attr(x, CF_A_TILES)->v.shape->dims[0], 4);
  assert_int_equal(g->world_size, 4);
  cf_graph_destroy(g);
}

/* ---- errors ---- */

#define FN "func.func @main(%a: tensor<4xf32>) -> tensor<4xf32> {\n"

static const cf_bad_input bad_modules[] = {
    {"module {\n}\n", "t.mlir:1: error: not StableHLO text: no func.func in the module"},
    {"", "no func.func"},
    {FN "  return %a : tensor<4xf32>\n}\n"
        "func.func @g(%a: tensor<4xf32>) -> tensor<4xf32> {\n  return %a : tensor<4xf32>\n}\n"
        "func.func @g(%a: tensor<4xf32>) -> tensor<4xf32> {\n  return %a : tensor<4xf32>\n}\n",
     "t.mlir:7: error: function '@g' defined twice (first at line 4)"},
    {"func.func @g(%a: tensor<4xf32>) -> tensor<4xf32> {\n  return %a : tensor<4xf32>\n}\n"
     "func.func @h(%a: tensor<4xf32>) -> tensor<4xf32> {\n  return %a : tensor<4xf32>\n}\n",
     "t.mlir:1: error: no entry function: 2 public functions and none named @main"},
    {FN "  %0 = stablehlo.add %a, %a) : tensor<4xf32>\n}\n", "t.mlir:2: error: unbalanced ')'"},
    {FN "  %0 = stablehlo.add %a, %a : tensor<4xf32> loc(\"x)\n}\n",
     "t.mlir:2: error: unterminated string"},
    {FN "  %0 = stablehlo.add %a, %a : tensor<4xf32>\n", "t.mlir:1: error: '{' is never closed"},
    {FN "  /* a */ return %a : tensor<4xf32>\n}\n", "t.mlir:2: error: unexpected '/*'"},
    {FN "  %0 = stablehlo.add %a, %b : tensor<4xf32>\n  return %0 : tensor<4xf32>\n}\n",
     "t.mlir:2: error: instruction '0': operand 'b' is not defined in computation 'main'"},
    {FN "  %0 = stablehlo.add %a, %a : tensor<?xf32>\n  return %0 : tensor<4xf32>\n}\n",
     "t.mlir:2: error: dynamic dimension '?' in a tensor type"},
    {FN "  %0 = stablehlo.add %a, %a : tensor<4xq7>\n  return %0 : tensor<4xf32>\n}\n",
     "t.mlir:2: error: unknown element type 'q7'"},
    {FN "  %0 = \"stable\xa6hlo.abs\"(%a) : (tensor<4xf32>) -> tensor<4xf32>\n  return %0 : "
        "tensor<4xf32>\n}\n",
     "t.mlir:2: error: value '%0': expected an op name"},
    {FN "  %0 = stablehlo.add %a, %a\n  return %0 : tensor<4xf32>\n}\n",
     "t.mlir:2: error: op 'stablehlo.add': expected ': TYPE' after the op"},
    {FN "  %0 = stablehlo.add %a, %a : tensor<4xf32>\n}\n",
     "t.mlir:1: error: function 'main' has no return"},
    {FN "  return %z : tensor<4xf32>\n}\n",
     "t.mlir:2: error: function 'main' returns '%z', which it does not define"},
    {FN "  %0 = stablehlo.add %a, %a : tensor<4xf32>\n  %0 = stablehlo.add %a, %a : "
        "tensor<4xf32>\n  return %0 : tensor<4xf32>\n}\n",
     "t.mlir:3: error: function 'main': value '%0' defined twice (first at line 2)"},
    {FN "  %0 = call @main(%a) : (tensor<4xf32>) -> tensor<4xf32>\n  return %0 : "
        "tensor<4xf32>\n}\n",
     "t.mlir:1: error: computation 'main' calls itself"},
    {FN "  %0 = call @nope(%a) : (tensor<4xf32>) -> tensor<4xf32>\n  return %0 : "
        "tensor<4xf32>\n}\n",
     "t.mlir:2: error: instruction '0': call needs to_apply=COMPUTATION of the module"},
    {"sdy.mesh @m = <[\"x\"=2]>\n" FN
     "  %0 = sdy.manual_computation(%a) in_shardings=[<@m, [{\"x\"}]>] out_shardings=[<@m, "
     "[{\"x\"}]>] manual_axes={\"x\"} (%b: tensor<4xf32>) {\n    sdy.return %b : "
     "tensor<4xf32>\n  } : (tensor<4xf32>) -> tensor<4xf32>\n  return %0 : tensor<4xf32>\n}\n",
     "t.mlir:3: error: sdy.manual_computation: operand 0's sharding gives a local shape that is "
     "not the type of the body's argument 0"},
    {FN "  %0 = sdy.manual_computation(%a) in_shardings=[<@m, [{\"x\"}]>] out_shardings=[<@m, "
        "[{\"x\"}]>] manual_axes={\"x\"} (%b: tensor<2xf32>) {\n    sdy.return %b : "
        "tensor<2xf32>\n  } : (tensor<4xf32>) -> tensor<4xf32>\n  return %0 : tensor<4xf32>\n}\n",
     "t.mlir:2: error: mesh '@m' is not declared (sdy.mesh @m = <[...]>)"},
    {"sdy.mesh @m = <[\"x\"=2]>\n" FN "  %0 = \"stablehlo.all_reduce\"(%a) <{replica_groups = "
     "#stablehlo.replica_group_mesh_axes<mesh = @m, axes = [\"z\"]>}> ({\n  ^bb0(%x: "
     "tensor<f32>, %y: tensor<f32>):\n    %s = stablehlo.add %x, %y : tensor<f32>\n"
     "    stablehlo.return %s : tensor<f32>\n  }) : (tensor<4xf32>) -> tensor<4xf32>\n"
     "  return %0 : tensor<4xf32>\n}\n",
     "t.mlir:3: error: op '0': replica groups name axis 'z', which mesh 'm' does not have"},
    {FN "  %0 = \"stablehlo.all_reduce\"(%a) <{replica_groups = dense<[[0, 1], [1, 2]]> : "
        "tensor<2x2xi64>}> ({\n  ^bb0(%x: tensor<f32>, %y: tensor<f32>):\n    %s = "
        "stablehlo.add %x, %y : tensor<f32>\n    stablehlo.return %s : tensor<f32>\n  }) : "
        "(tensor<4xf32>) -> tensor<4xf32>\n  return %0 : tensor<4xf32>\n}\n",
     "t.mlir:2: error: instruction '0': replica_groups list device 1 twice"},
    {FN "  %0 = \"stablehlo.all_reduce\"(%a) <{replica_groups = dense<[[0, 1]]> : "
        "tensor<1x2xi64>}> : (tensor<4xf32>) -> tensor<4xf32>\n  return %0 : tensor<4xf32>\n}\n",
     "t.mlir:2: error: op '%0': all-reduce needs its reduction region '({ ... })'"},
    {FN "  %0 = \"stablehlo.all_gather\"(%a) <{replica_groups = dense<[[0, 1]]> : "
        "tensor<1x2xi64>}> : (tensor<4xf32>) -> tensor<8xf32>\n  return %a : tensor<4xf32>\n}\n",
     "t.mlir:2: error: op '0': all-gather needs all_gather_dim = N"},
    {FN "  %0, %1 = stablehlo.add %a, %a : tensor<4xf32>\n  return %0 : tensor<4xf32>\n}\n",
     "t.mlir:2: error: op '0:2': 2 results but 1 result types"},
    {FN "  %0, = stablehlo.add %a, %a : tensor<4xf32>\n  return %0 : tensor<4xf32>\n}\n",
     "t.mlir:2: error: expected '%NAME, %NAME, ... = ...'"},
    {FN "  %0 = \"stablehlo.all_reduce\"(%a) <{replica_groups = dense<[[0, 1]]> : "
        "tensor<1x2xi64>}> ({\n    stablehlo.return %z : tensor<f32>\n  }) : (tensor<4xf32>) -> "
        "tensor<4xf32>\n  return %0 : tensor<4xf32>\n}\n",
     "t.mlir:3: error: region returns '%z', which it does not define"},
    {FN "  %0 = constant dense<1.0> : tensor<4xf32>\n  return %0 : tensor<4xf32>\n}\n",
     "t.mlir:2: error: value '%0': op 'constant' has no dialect (stablehlo.constant?)"},
    {FN "  = 3\n  return %a : tensor<4xf32>\n}\n",
     "t.mlir:2: error: function 'main': expected an op at '= 3'"},
    {FN "  ^bb1:\n  return %a : tensor<4xf32>\n}\n",
     "t.mlir:2: error: function 'main': several blocks (a control-flow graph) are not supported"},
    {"module attributes {mhlo.num_partitions = 4 : i32} {\n" FN
     "  %0 = \"stablehlo.all_to_all\"(%a) <{channel_handle = #stablehlo.channel_handle<handle = "
     "1, type = 1>, concat_dimension = 0 : i64, replica_groups = dense<[[0, 1, 2, 3]]> : "
     "tensor<1x4xi64>, split_count = 2 : i64, split_dimension = 0 : i64, "
     "use_global_device_ids}> : (tensor<4xf32>) -> tensor<4xf32>\n  return %0 : "
     "tensor<4xf32>\n}\n}\n",
     "t.mlir:3: error: instruction '0': split_count=2 but its replica groups have 4 devices"},
    {"module attributes {mhlo.num_partitions = 2 : i32, mhlo.num_replicas = 2 : i32} {\n" FN
     "  %0 = \"stablehlo.collective_broadcast\"(%a) {channel_handle = "
     "#stablehlo.channel_handle<handle = 1, type = 0>, replica_groups = dense<[[0, 2]]> : "
     "tensor<1x2xi64>} : (tensor<4xf32>) -> tensor<4xf32>\n  return %0 : tensor<4xf32>\n}\n}\n",
     "t.mlir:3: error: instruction '0': partition id 2 in replica_groups but num_partitions=2 "
     "(with a channel_id, collective-broadcast groups partitions)"},
    /* transcribed from openxla/stablehlo's ops_stablehlo.mlir: @all_reduce_c3 ("replica id
     * #2 not seen in replica groups"), @all_reduce_c5 (the reduction region's signature),
     * @reduce_scatter_c9 (a promoted reduction's result type) */
    {FN "  %0 = \"stablehlo.all_reduce\"(%a) ({\n  ^bb0(%x: tensor<f32>, %y: tensor<f32>):\n"
        "    %m = stablehlo.maximum %x, %y : tensor<f32>\n    \"stablehlo.return\"(%m) : "
        "(tensor<f32>) -> ()\n  }) {replica_groups = dense<[[0, 1, 3]]> : tensor<1x3xi64>} : "
        "(tensor<4xf32>) -> tensor<4xf32>\n  return %0 : tensor<4xf32>\n}\n",
     "t.mlir:2: error: instruction '0': replica_groups list 3 ids but not 2 (they must be 0..2, "
     "each once)"},
    {FN "  %0 = \"stablehlo.all_reduce\"(%a) ({\n  ^bb0(%x: tensor<f32>, %y: tensor<f32>, %z: "
        "tensor<f32>):\n    %m = stablehlo.maximum %x, %y : tensor<f32>\n    "
        "\"stablehlo.return\"(%m) : (tensor<f32>) -> ()\n  }) {replica_groups = dense<[[0, 1]]> "
        ": tensor<1x2xi64>} : (tensor<4xf32>) -> tensor<4xf32>\n  return %0 : tensor<4xf32>\n}\n",
     "t.mlir:2: error: instruction '0': all-reduce's reducer takes 3 parameters, not 2"},
    {FN "  %0 = \"stablehlo.all_reduce\"(%a) ({\n  ^bb0(%x: tensor<f32>, %y: tensor<f32>):\n"
        "    %m = stablehlo.maximum %x, %y : tensor<f32>\n    \"stablehlo.return\"() : () -> ()\n"
        "  }) {replica_groups = dense<[[0, 1]]> : tensor<1x2xi64>} : (tensor<4xf32>) -> "
        "tensor<4xf32>\n  return %0 : tensor<4xf32>\n}\n",
     "t.mlir:2: error: instruction '0': all-reduce's reducer returns 0 values, not 1"},
    {"func.func @main(%a: tensor<4x16xf32>) -> tensor<4x4xf32> {\n"
     "  %0 = \"stablehlo.reduce_scatter\"(%a) ({\n  ^bb0(%x: tensor<f64>, %y: tensor<f64>):\n"
     "    %m = stablehlo.add %x, %y : tensor<f64>\n    \"stablehlo.return\"(%m) : "
     "(tensor<f64>) -> ()\n  }) {replica_groups = dense<[[0, 1, 2, 3]]> : tensor<1x4xi64>, "
     "scatter_dimension = 1 : i64} : (tensor<4x16xf32>) -> tensor<4x4xf32>\n  return %0 : "
     "tensor<4x4xf32>\n}\n",
     "t.mlir:2: error: instruction '0': reduce-scatter reduces in float64, so its result 0 must be "
     "float64, not float32"},
    /* @all_to_all_c9_mismatch_count and @collective_broadcast_c4_*: were Opaque */
    {"func.func @main(%a: tensor<4x16xf32>, %b: tensor<4x16xf32>) -> tensor<16x4xf32> {\n"
     "  %0 = \"stablehlo.all_to_all\"(%a, %b) {split_dimension = 1 : i64, concat_dimension = 0 : "
     "i64, split_count = 4 : i64, replica_groups = dense<[[0, 1, 2, 3]]> : tensor<1x4xi64>} : "
     "(tensor<4x16xf32>, tensor<4x16xf32>) -> tensor<16x4xf32>\n  return %0 : tensor<16x4xf32>\n}\n",
     "t.mlir:2: error: instruction '0': all-to-all has 2 operands but 1 result"},
    {"func.func @main(%a: tensor<4xf32>, %r: tensor<1xf32>) -> tensor<4xf32> {\n"
     "  %0 = \"stablehlo.collective_broadcast\"(%a, %r) {replica_groups = dense<[[0, 1]]> : "
     "tensor<1x2xi64>, has_dynamic_root} : (tensor<4xf32>, tensor<1xf32>) -> tensor<4xf32>\n"
     "  return %0 : tensor<4xf32>\n}\n",
     "t.mlir:2: error: instruction '0': collective-broadcast's root operand (the last, with "
     "has_dynamic_root) must be a rank-1 i32 tensor"},
    {"func.func @main(%a: tensor<4xf32>, %b: tensor<4xf32>, %r: tensor<1xi32>) -> (tensor<4xf32>, "
     "tensor<4xf32>) {\n  %0:2 = \"stablehlo.collective_broadcast\"(%a, %b, %r) {replica_groups "
     "= dense<[[0, 1]]> : tensor<1x2xi64>, has_dynamic_root} : (tensor<4xf32>, tensor<4xf32>, "
     "tensor<1xi32>) -> (tensor<4xf32>, tensor<4xf32>)\n  return %0#0, %0#1 : tensor<4xf32>, "
     "tensor<4xf32>\n}\n",
     "t.mlir:2: error: instruction '0': collective-broadcast's root operand has 1 element but "
     "there are 2 data operands"},
    {"func.func @main(%a: tensor<4xf32>) -> tensor<4xi32> {\n  %0 = \"stablehlo.async_start\"(%a) "
     "({\n  ^bb0(%b: tensor<4xf32>):\n    \"stablehlo.return\"(%b) : (tensor<4xf32>) -> ()\n  }) "
     ": (tensor<4xf32>) -> !stablehlo.future<tensor<4xf32>>\n  %1 = \"stablehlo.async_done\"(%0) "
     ": (!stablehlo.future<tensor<4xf32>>) -> tensor<4xi32>\n  return %1 : tensor<4xi32>\n}\n",
     "t.mlir:6: error: op '%1': stablehlo.async_done gives tensor<4xi32> but its future holds "
     "tensor<4xf32>"},
    {"func.func @main(%a: tensor<4xf32>) -> tensor<8xf32> {\n  %0 = \"stablehlo.async_start\"(%a) "
     "({\n  ^bb0(%b: tensor<4xf32>):\n    \"stablehlo.return\"(%b) : (tensor<4xf32>) -> ()\n  }) "
     ": (tensor<4xf32>) -> !stablehlo.future<tensor<8xf32>>\n  return %0 : tensor<8xf32>\n}\n",
     "t.mlir:2: error: instruction '0': declares float32[8] but its region gives float32[4]"},
    {"func.func @main(%a: tensor<4xf32>) -> tensor<4xf32> {\n  %0 = \"stablehlo.async_start\"(%a) "
     "({\n  ^bb0(%b: tensor<4xf32>):\n    \"stablehlo.return\"(%b) : (tensor<4xf32>) -> ()\n  }, "
     "{\n  ^bb0(%c: tensor<4xf32>):\n    \"stablehlo.return\"(%c) : (tensor<4xf32>) -> ()\n  }) "
     ": (tensor<4xf32>) -> !stablehlo.future<tensor<4xf32>>\n  return %0 : tensor<4xf32>\n}\n",
     "t.mlir:2: error: op '%0': stablehlo.async_start takes one region"},
    {"func.func @main(%a: tensor<4x!foo.bar<3>>) -> tensor<4xf32> {\n}\n",
     "t.mlir:1: error: unknown element type '!foo.bar<3'"},
    {"func.func @main(%a: tensor<4x!quant.uniform<f32:f32, 2.0>>) -> tensor<4xf32> {\n}\n",
     "t.mlir:1: error: unsupported quantized type '!quant.uniform<f32:f32, 2.0>'"},
    {FN "  %0 = \"stablehlo.collective_permute\"(%a) <{source_target_pairs = dense<[[0, 1, "
        "2]]> : tensor<1x3xi64>}> : (tensor<4xf32>) -> tensor<4xf32>\n  return %0 : "
        "tensor<4xf32>\n}\n",
     "t.mlir:2: error: op '0': source_target_pairs: every pair is [source, target]"},
    {FN "  %0 = \"stablehlo.collective_permute\"(%a) <{source_target_pairs = dense<[[0, "
        "4294967297]]> : tensor<1x2xi64>}> : (tensor<4xf32>) -> tensor<4xf32>\n  return %0 : "
        "tensor<4xf32>\n}\n",
     "t.mlir:2: error: op '0': source_target_pairs: device id 4294967297 is not in 0..255"},
    {FN "  %0 = \"stablehlo.all_gather\"(%a) <{all_gather_dim = 0 : i64, replica_groups = "
        "dense<[[0, -3]]> : tensor<1x2xi64>}> : (tensor<4xf32>) -> tensor<8xf32>\n  return %a : "
        "tensor<4xf32>\n}\n",
     "t.mlir:2: error: op '0': replica_groups: device id -3 is not in 0..255"},
    {FN "  %0 = stablehlo.real %a : (tensor<4xcomplex<complex<f32>>>) -> tensor<4xf32>\n"
        "  return %a : tensor<4xf32>\n}\n",
     "t.mlir:2: error: complex of a complex type"},
    {"sdy.mesh @m = <[\"x\"=2]>\n" FN
     "  %0 = sdy.manual_computation(%a) in_shardings=<@m, [{\"x\"}]> out_shardings=[<@m, "
     "[{\"x\"}]>] manual_axes={\"x\"} (%b: tensor<2xf32>) {\n    sdy.return %b : "
     "tensor<2xf32>\n  } : (tensor<4xf32>) -> tensor<4xf32>\n  return %0 : tensor<4xf32>\n}\n",
     "t.mlir:3: error: sdy.manual_computation: in_shardings and out_shardings are lists"},
    {"sdy.mesh @m = <[\"x\"=2]>\n" FN
     "  %0 = sdy.manual_computation(%a) in_shardings=[] out_shardings=[<@m, [{\"x\"}]>] "
     "manual_axes={\"x\"} (%b: tensor<2xf32>) {\n    sdy.return %b : tensor<2xf32>\n  } : "
     "(tensor<4xf32>) -> tensor<4xf32>\n  return %0 : tensor<4xf32>\n}\n",
     "t.mlir:3: error: sdy.manual_computation: in_shardings has fewer than 1 entries"},
    /* an axis repeated in one dimension (eight times 256 overflowed the
     * part count to 0: SIGFPE), or in two */
    {"sdy.mesh @m = <[\"x\"=256]>\n" FN
     "  %0 = sdy.manual_computation(%a) in_shardings=[<@m, [{\"x\", \"x\", \"x\", \"x\", "
     "\"x\", \"x\", \"x\", \"x\"}]>] out_shardings=[<@m, [{}]>] manual_axes={\"x\"} (%b: "
     "tensor<4xf32>) {\n    sdy.return %b : tensor<4xf32>\n  } : (tensor<4xf32>) -> "
     "tensor<4xf32>\n  return %0 : tensor<4xf32>\n}\n",
     "t.mlir:3: error: sharding: axis 'x' used twice"},
    {"sdy.mesh @m = <[\"x\"=2]>\nfunc.func @main(%a: tensor<4x4xf32>) -> tensor<4x4xf32> {\n"
     "  %0 = sdy.manual_computation(%a) in_shardings=[<@m, [{\"x\"}, {\"x\"}]>] "
     "out_shardings=[<@m, [{}, {}]>] manual_axes={\"x\"} (%b: tensor<2x2xf32>) {\n    sdy.return "
     "%b : tensor<2x2xf32>\n  } : (tensor<4x4xf32>) -> tensor<4x4xf32>\n  return %0 : "
     "tensor<4x4xf32>\n}\n",
     "t.mlir:3: error: sharding: axis 'x' used twice"},
    /* result types are those of the returned values */
    {"func.func @main(%a: tensor<4xf32>) -> tensor<8xi32> {\n  return %a : tensor<4xf32>\n}\n",
     "t.mlir:2: error: function 'main': result 0 ('%a') is tensor<4xf32> but tensor<8xi32> is "
     "declared"},
    {FN "  return %a : tensor<4xf32>\n}\nfunc.func private @f(%a: tensor<4xf32>) -> "
        "(tensor<4xf32>, tensor<4xf32> {jax.result_info = \"x\"}) {\n  %0 = stablehlo.add %a, %a "
        ": tensor<4xf32>\n  return %0 : tensor<4xf32>\n}\n",
     "t.mlir:6: error: function 'f' returns 1 value but declares 2"},
    {FN "  %0:2 = func.call @f(%a) : (tensor<4xf32>) -> (tensor<4xf32>, tensor<4xi32>)\n"
        "  return %0#0 : tensor<4xf32>\n}\nfunc.func private @f(%a: tensor<4xf32>) -> "
        "(tensor<4xf32>, tensor<4xi32>) {\n  return %a, %a : tensor<4xf32>, tensor<4xf32>\n}\n",
     "t.mlir:6: error: function 'f': result 1 ('%a') is tensor<4xf32> but tensor<4xi32> is "
     "declared"},
    {"sdy.mesh @m = <[\"x\"=2]>\n" FN
     "  %0 = sdy.manual_computation(%a) in_shardings=[<@m, [{\"x\"}]>] out_shardings=[<@m, "
     "[{\"x\"}]>] manual_axes={\"x\"} (%b: tensor<2xf32>) {\n    %c = stablehlo.convert %b : "
     "(tensor<2xf32>) -> tensor<2xi32>\n    sdy.return %c : tensor<2xi32>\n  } : (tensor<4xf32>) "
     "-> tensor<4xf32>\n  return %0 : tensor<4xf32>\n}\n",
     "t.mlir:5: error: sdy.manual_computation body: result 0 ('%c') is tensor<2xi32> but "
     "tensor<2xf32> is declared"},
    {"module attributes {mhlo.num_partitions = 0 : i32} {\n" FN
     "  return %a : tensor<4xf32>\n}\n}\n",
     "t.mlir:1: error: module: mhlo.num_partitions = '0 : i32' must be an integer in 1..256"},
};

static void test_errors(void **state) {
  (void)state;
  assert_refused("t.mlir", bad_modules, sizeof bad_modules / sizeof bad_modules[0]);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_dp_step),
      cmocka_unit_test(test_hlo_twin),
      cmocka_unit_test(test_forms),
      cmocka_unit_test(test_captures),
      cmocka_unit_test(test_control_flow),
      cmocka_unit_test(test_collectives),
      cmocka_unit_test(test_alltoall_permute),
      cmocka_unit_test(test_permute_ring),
      cmocka_unit_test(test_calls_and_manual),
      cmocka_unit_test(test_wrapped_signature),
      cmocka_unit_test(test_broadcast_cross_partition),
      cmocka_unit_test(test_mesh_axes_compat),
      cmocka_unit_test(test_external_declaration),
      cmocka_unit_test(test_sniff),
      cmocka_unit_test(test_errors),
      cmocka_unit_test(test_reducers),
      cmocka_unit_test(test_quantized_types),
      cmocka_unit_test(test_dashed_op_name),
      cmocka_unit_test(test_async_ops),
      cmocka_unit_test(test_many_meshes),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
