/* test_api.c - the embedding C API through the public header only:
 * building graphs (every typed builder, and every way that fails, with its
 * message, leaving the graph as it was), options, pipelines, inspection,
 * executables run with caller buffers (results, which buffers are used in
 * place, bad buffers),
 * stale executables (their graph changed since) refused and executables
 * keeping a destroyed graph alive, the log sink, versions, NULL-safe
 * destructors, two contexts compiling and running different graphs from
 * two threads at once, and eight threads sharing one context. */
#include "cf_test.h"

#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <unistd.h>

#define OK(expr)                                                                                   \
  do {                                                                                             \
    cf_status st_ = (expr);                                                                        \
    if (st_ != CF_OK) fail_msg("%s: status %d: %s", #expr, st_, cf_context_errmsg(ctx));           \
  } while (0)

/* ---- graphs ---- */

/* DP gradients: n Inputs g<i> of `elems` float32 each, AllReduce (mean or
 * sum, fusion=1), Output o<i>. */
static cf_graph *dp_graph(cf_context *c, int ranks, int n, int64_t elems, const char *red) {
  cf_graph *g;
  if (cf_graph_create(c, "dp", ranks, &g)) return NULL;
  for (int i = 0; i < n; i++) {
    char gn[32], an[32], on[32];
    snprintf(gn, sizeof gn, "g%d", i);
    snprintf(an, sizeof an, "ar%d", i);
    snprintf(on, sizeof on, "o%d", i);
    int64_t d[1] = {elems + i};
    if (cf_graph_add_input(g, gn, "float32", d, 1) ||
        cf_graph_add_allreduce(g, an, gn, red, NULL, 1, -1) || cf_graph_add_output(g, on, an)) {
      cf_graph_destroy(g);
      return NULL;
    }
  }
  return g;
}

/* Tensor-parallel MLP on `ranks` ranks: y = ReduceScatter(x @ w1) and
 * z = AllGather(y, concat) @ w2, outputs y and z. x (m,k) w1 (k,n) w2 (n,p). */
static cf_graph *tp_graph(cf_context *c, int ranks, int64_t m, int64_t k, int64_t n, int64_t p) {
  cf_graph *g;
  int64_t dx[2] = {m, k}, d1[2] = {k, n}, d2[2] = {n, p};
  if (cf_graph_create(c, "tp", ranks, &g)) return NULL;
  if (cf_graph_add_input(g, "x", "float32", dx, 2) ||
      cf_graph_add_input(g, "w1", "float32", d1, 2) ||
      cf_graph_add_input(g, "w2", "float32", d2, 2) || cf_graph_add_matmul(g, "mm1", "x", "w1") ||
      cf_graph_add_reducescatter(g, "rs", "mm1", "sum", NULL) ||
      cf_graph_add_allgather(g, "ag", "rs", NULL, "concat") ||
      cf_graph_add_matmul(g, "mm2", "ag", "w2") || cf_graph_add_output(g, "y", "rs") ||
      cf_graph_add_output(g, "z", "mm2")) {
    cf_graph_destroy(g);
    return NULL;
  }
  return g;
}

static void test_version(void **state) {
  (void)state;
  assert_int_equal(cf_version_number(), CF_VERSION_NUMBER);
  char v[32];
  snprintf(v, sizeof v, "%d.%d.%d", CF_VERSION_MAJOR, CF_VERSION_MINOR, CF_VERSION_PATCH);
  assert_string_equal(cf_version(), v);
  assert_string_equal(CF_VERSION_STRING, v);
}

static void test_null_safety(void **state) {
  (void)state;
  cf_context_destroy(NULL);
  cf_graph_destroy(NULL);
  cf_options_destroy(NULL);
  cf_executable_destroy(NULL);
  assert_string_equal(cf_context_errmsg(NULL), "");
  cf_graph *g = (cf_graph *)&g;
  assert_int_equal(cf_graph_create(NULL, "x", 2, &g), CF_ERR_USAGE);
  assert_null(g);
  assert_int_equal(cf_graph_create(ctx, "x", 2, NULL), CF_ERR_USAGE);
  assert_int_equal(cf_graph_add_op(NULL, "Input", "x", NULL, 0), CF_ERR_USAGE);
  cf_executable *e = (cf_executable *)&e;
  assert_int_equal(cf_executable_create(NULL, NULL, &e), CF_ERR_USAGE);
  assert_null(e);
  assert_int_equal(cf_executable_run(NULL, NULL, NULL), CF_ERR_USAGE);
  assert_null(cf_graph_node_name(NULL, 0));
  assert_int_equal(cf_executable_io_count(NULL, CF_IO_INPUT), 0);
}

/* The AllToAll and CollectivePermute helpers write XLA's attributes; the
 * verifier checks them; a permute of more pairs than ranks is refused. */
static void test_build_alltoall_permute(void **state) {
  (void)state;
  cf_graph *g;
  char buf[64];
  OK(cf_graph_create(ctx, "moe", 4, &g));
  int64_t d[2] = {8, 2};
  OK(cf_graph_add_input(g, "x", "float32", d, 2));
  OK(cf_graph_add_alltoall(g, "a", "x", 0, 1, NULL));
  int pairs[] = {0, 1, 1, 2, 2, 3, 3, 0};
  OK(cf_graph_add_collective_permute(g, "p", "a", pairs, 4, NULL));
  OK(cf_graph_add_output(g, "y", "p"));
  OK(cf_graph_verify(g, NULL));
  OK(cf_graph_get_attr(g, "a", "shape", buf, sizeof buf));
  assert_string_equal(buf, "2,8");
  OK(cf_graph_get_attr(g, "p", "source_target_pairs", buf, sizeof buf));
  assert_string_equal(buf, "{0,1},{1,2},{2,3},{3,0}");
  OK(cf_graph_add_collective_permute(g, "q", "x", pairs, 0, NULL)); /* no pairs: zeros */
  int dup[] = {0, 1, 2, 1};
  OK(cf_graph_add_collective_permute(g, "r", "x", dup, 2, NULL));
  ASSERT_ERR(cf_graph_verify(g, NULL), CF_ERR_INVALID,
             "node 'r': source_target_pairs='{0,1},{2,1}': rank 1 is a target twice");
  ASSERT_ERR(cf_graph_add_collective_permute(g, "s", "x", pairs, 300, NULL), CF_ERR_USAGE,
             "moe: error: node 's': 300 source-target pairs: at most 256, one per rank");
  cf_graph_destroy(g);
}

static void test_build_errors(void **state) {
  (void)state;
  cf_graph *g = (cf_graph *)&g;
  ASSERT_ERR(cf_graph_create(ctx, "big", -1, &g), CF_ERR_USAGE, "world_size -1 must be in 0..");
  assert_null(g);
  OK(cf_graph_create(ctx, "b", 2, &g));
  int64_t d[2] = {4, 8};
  OK(cf_graph_add_input(g, "x", "float32", d, 2));
  ASSERT_ERR(cf_graph_add_op(g, "Frobnicate", "f", NULL, 0), CF_ERR_INVALID,
             "b: error: node 'f': unknown op 'Frobnicate'");
  ASSERT_ERR(cf_graph_add_input(g, "x", "float32", d, 2), CF_ERR_INVALID,
             "node 'x': duplicate node name");
  const char *in[] = {"x", "nope"};
  ASSERT_ERR(cf_graph_add_op(g, "Add", "a", in, 2), CF_ERR_INVALID,
             "node 'a': input 1 refers to unknown node 'nope'");
  ASSERT_ERR(cf_graph_add_input(g, "h", "float33", d, 2), CF_ERR_INVALID,
             "node 'h': unknown dtype dtype='float33'");
  int64_t neg[1] = {-3};
  ASSERT_ERR(cf_graph_add_input(g, "n", "float32", neg, 1), CF_ERR_INVALID,
             "node 'n': dimension 0 is negative");
  ASSERT_ERR(cf_graph_add_input(g, "r9", "float32", d, 9), CF_ERR_USAGE,
             "shape rank 9 must be in 0..8");
  ASSERT_ERR(cf_graph_add_allreduce(g, "ar", "x", "median", NULL, 1, -1), CF_ERR_INVALID,
             "node 'ar': unknown reduction 'median'");
  ASSERT_ERR(cf_graph_set_attr(g, "ghost", "fusion", "1"), CF_ERR_INVALID, "no node named 'ghost'");
  ASSERT_ERR(cf_graph_set_attr(g, "x", "colour", "red"), CF_ERR_INVALID,
             "node 'x': unknown attribute 'colour'");
  ASSERT_ERR(cf_graph_set_attr(g, "x", "fusion", "lots"), CF_ERR_INVALID,
             "attribute fusion='lots' is not an integer");
  ASSERT_ERR(cf_graph_set_attr(g, "x", NULL, "1"), CF_ERR_USAGE,
             "node, attr and value are required");
  /* every failure left the graph as it was: one node, still valid */
  assert_int_equal(cf_graph_node_count(g), 1);
  OK(cf_graph_verify(g, NULL));

  /* op rules are the verifier's, with the node named */
  OK(cf_graph_add_allreduce(g, "ar", "x", "sum", NULL, 2, -1));
  ASSERT_ERR(cf_graph_verify(g, NULL), CF_ERR_INVALID, "node 'ar': fusion=2 needs fusion_id >= 0");
  OK(cf_graph_set_attr_int(g, "ar", "fusion_id", 7));
  OK(cf_graph_add_output(g, "y", "ar"));
  OK(cf_graph_verify(g, NULL));
  OK(cf_graph_set_attr(g, "ar", "reduction", "prod"));
  OK(cf_graph_set_attr(g, "x", "dtype", "bfloat16"));
  ASSERT_ERR(cf_graph_verify(g, "atlas-a2"), CF_ERR_INVALID,
             "node 'ar': target atlas-a2: AllReduce does not support prod on bfloat16");
  ASSERT_ERR(cf_graph_verify(g, "tpu-v9"), CF_ERR_USAGE, "unknown target 'tpu-v9'");
  /* ports: "NAME:K" */
  ASSERT_ERR(cf_graph_add_output(g, "p", "ar:1"), CF_ERR_INVALID,
             "node 'p': input 0 refers to port 1 of 'ar', which has 1 output");
  OK(cf_graph_add_output(g, "p", "ar:0"));
  OK(cf_graph_verify(g, NULL));
  assert_int_equal(cf_graph_node_count(g), 4);
  cf_graph_destroy(g);

  /* a group of the graph, and one the graph does not define */
  OK(cf_graph_create(ctx, "grp", 4, &g));
  int ranks[2] = {0, 2};
  OK(cf_graph_define_group(g, "pair", ranks, 2));
  ASSERT_ERR(cf_graph_define_group(g, "pair", ranks, 2), CF_ERR_INVALID,
             "group 'pair' defined twice");
  OK(cf_graph_add_input(g, "x", "float32", d, 2));
  OK(cf_graph_add_allreduce(g, "a1", "x", "sum", "pair", 0, -1));
  OK(cf_graph_add_allreduce(g, "a2", "x", "sum", "elsewhere", 0, -1));
  OK(cf_graph_add_output(g, "y1", "a1"));
  OK(cf_graph_add_output(g, "y2", "a2"));
  ASSERT_ERR(cf_graph_verify(g, NULL), CF_ERR_INVALID, "'elsewhere'");
  cf_graph_destroy(g);

  /* Reduce and Broadcast have no default root (HcclReduce, HcclBroadcast) */
  OK(cf_graph_create(ctx, "rooted", 4, &g));
  OK(cf_graph_add_input(g, "x", "float32", d, 2));
  const char *x[] = {"x"};
  OK(cf_graph_add_op(g, "HcomReduce", "red", x, 1));
  ASSERT_ERR(cf_graph_verify(g, NULL), CF_ERR_INVALID, "node 'red': Reduce needs attribute 'root'");
  OK(cf_graph_set_attr_int(g, "red", "root", 3));
  OK(cf_graph_add_op(g, "Broadcast", "bc", x, 1));
  ASSERT_ERR(cf_graph_verify(g, NULL), CF_ERR_INVALID,
             "node 'bc': Broadcast needs attribute 'root'");
  OK(cf_graph_set_attr_int(g, "bc", "root", 0));
  OK(cf_graph_verify(g, NULL));
  /* the "ranks" option on a graph whose root needs its 4 ranks: the job is named */
  OK(cf_graph_set_attr_int(g, "red", "root", 3));
  cf_options *o;
  OK(cf_options_create(ctx, &o));
  OK(cf_options_set(o, "ranks", "2"));
  ASSERT_ERR(
      cf_graph_run_pipeline(g, "O0", o), CF_ERR_INVALID,
      "rooted: error: the graph is for 4 ranks (world_size=4) and the job has 2 (option ranks=2); "
      "run it with 4 ranks");
  cf_options_destroy(o);
  cf_graph_destroy(g);

  /* names: 4096 bytes as in every input format (docs/collfuse-graph.xsd),
   * groups 127; what the builder takes, compile -o writes and reads back */
  static char name[4098];
  memset(name, 'n', 4097);
  OK(cf_graph_create(ctx, "names", 4, &g));
  ASSERT_ERR(cf_graph_add_input(g, name, "float32", d, 2), CF_ERR_INVALID,
             "node 'nnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnn...': name longer than 4096 bytes");
  name[4096] = 0;
  OK(cf_graph_add_input(g, name, "float32", d, 2));
  /* a message quoting such a name still says what is wrong */
  ASSERT_ERR(cf_graph_set_attr(g, name, "fusion", "lots"), CF_ERR_INVALID,
             "nnnn': attribute fusion='lots' is not an integer");
  const char *nx[] = {name};
  OK(cf_graph_add_op(g, "AllReduce", "ar", nx, 1));
  OK(cf_graph_add_output(g, "y", "ar"));
  char group[129];
  memset(group, 'g', 128);
  group[128] = 0;
  ASSERT_ERR(cf_graph_define_group(g, group, ranks, 2), CF_ERR_INVALID,
             "name longer than 127 bytes");
  ASSERT_ERR(cf_graph_define_group(g, "", ranks, 2), CF_ERR_USAGE, "needs a name");
  group[127] = 0;
  OK(cf_graph_define_group(g, group, ranks, 2));
  OK(cf_graph_set_attr(g, "ar", "group", group));
  char path[64];
  snprintf(path, sizeof path, "/tmp/cf_names_%ld.xml", (long)getpid());
  OK(cf_graph_write_xml(g, path));
  cf_graph_destroy(g);
  OK(cf_graph_load(ctx, path, &g));
  OK(cf_graph_verify(g, NULL));
  assert_string_equal(cf_graph_node_name(g, 0), name);
  cf_graph_destroy(g);
  unlink(path);
}

/* The typed builders of a Constant and an Opaque node: the attributes
 * they set, a run that uses the Constant's value, and their refusals. */
static void test_build_constant_opaque(void **state) {
  (void)state;
  cf_graph *g;
  char buf[64];
  OK(cf_graph_create(ctx, "co", 2, &g));
  int64_t d[2] = {2, 3};
  OK(cf_graph_add_input(g, "x", "float32", d, 2));
  OK(cf_graph_add_constant(g, "half", "float32", d, 2, 0.5));
  OK(cf_graph_add_constant(g, "seven", "int8", NULL, 0, 7));
  const char *xc[] = {"x", "half"};
  OK(cf_graph_add_op(g, "Add", "sum", xc, 2));
  const char *in[] = {"sum"};
  OK(cf_graph_add_opaque(g, "act", "Gelu", in, 1, "bfloat16", d, 2));
  OK(cf_graph_add_opaque(g, "rng", "RandomSeed", NULL, 0, "int32", NULL, 0));
  OK(cf_graph_add_allreduce(g, "ar", "sum", "sum", NULL, 0, -1));
  OK(cf_graph_add_output(g, "y", "ar"));
  OK(cf_graph_add_output(g, "z", "act"));
  OK(cf_graph_verify(g, NULL));
  assert_string_equal(cf_graph_node_op(g, "half"), "Constant");
  OK(cf_graph_get_attr(g, "half", "value", buf, sizeof buf));
  assert_string_equal(buf, "0.5");
  OK(cf_graph_get_attr(g, "half", "shape", buf, sizeof buf));
  assert_string_equal(buf, "2,3");
  OK(cf_graph_get_attr(g, "seven", "dtype", buf, sizeof buf));
  assert_string_equal(buf, "int8");
  OK(cf_graph_get_attr(g, "seven", "shape", buf, sizeof buf));
  assert_string_equal(buf, "");
  assert_string_equal(cf_graph_node_op(g, "act"), "Opaque");
  OK(cf_graph_get_attr(g, "act", "type", buf, sizeof buf));
  assert_string_equal(buf, "Gelu");
  OK(cf_graph_get_attr(g, "act", "dtype", buf, sizeof buf));
  assert_string_equal(buf, "bfloat16");
  OK(cf_graph_get_attr(g, "rng", "shape", buf, sizeof buf));
  assert_string_equal(buf, "");

  /* y = AllReduce(x + 0.5) over two ranks */
  cf_executable *e;
  OK(cf_executable_create(g, NULL, &e));
  float x[2][6], y[2][6];
  uint16_t z[2][6];
  for (int r = 0; r < 2; r++)
    for (int i = 0; i < 6; i++) x[r][i] = (float)(r * 10 + i);
  int ky = cf_executable_io_find(e, CF_IO_OUTPUT, "y"), kz = cf_executable_io_find(e, CF_IO_OUTPUT, "z");
  assert_true(ky >= 0 && kz >= 0);
  const void *ins[2] = {x[0], x[1]};
  void *outs[4];
  outs[0 * 2 + ky] = y[0], outs[0 * 2 + kz] = z[0];
  outs[1 * 2 + ky] = y[1], outs[1 * 2 + kz] = z[1];
  OK(cf_executable_run(e, ins, outs));
  for (int r = 0; r < 2; r++)
    for (int i = 0; i < 6; i++)
      if (y[r][i] != (float)(10 + 2 * i) + 1.0f)
        fail_msg("rank %d y[%d] = %g, want %g", r, i, y[r][i], (double)(10 + 2 * i) + 1.0);
  cf_executable_destroy(e);

  /* refusals name the node and leave the graph as it was */
  size_t nodes = cf_graph_node_count(g);
  int64_t neg[1] = {-2};
  ASSERT_ERR(cf_graph_add_constant(g, "c", "float32", neg, 1, 1.0), CF_ERR_INVALID,
             "co: error: node 'c': dimension 0 is negative (-2)");
  ASSERT_ERR(cf_graph_add_constant(g, "c", "float33", d, 2, 1.0), CF_ERR_INVALID,
             "node 'c': unknown dtype dtype='float33'");
  ASSERT_ERR(cf_graph_add_constant(g, "c", "float32", d, 9, 1.0), CF_ERR_USAGE,
             "node 'c': shape rank 9 must be in 0..8");
  const char *ghost[] = {"ghost"};
  ASSERT_ERR(cf_graph_add_opaque(g, "o", "Gelu", ghost, 1, "float32", d, 2), CF_ERR_INVALID,
             "node 'o': input 0 refers to unknown node 'ghost'");
  ASSERT_ERR(cf_graph_add_opaque(g, "o", "Gelu", in, 1, "float32", neg, 1), CF_ERR_INVALID,
             "node 'o': dimension 0 is negative (-2)");
  ASSERT_ERR(cf_graph_add_opaque(g, "act", "Gelu", in, 1, "float32", d, 2), CF_ERR_INVALID,
             "node 'act': duplicate node name");
  assert_int_equal(cf_graph_node_count(g), nodes);
  OK(cf_graph_verify(g, NULL));
  cf_graph_destroy(g);
}

static void test_options(void **state) {
  (void)state;
  cf_options *o = (cf_options *)&o;
  assert_int_equal(cf_options_create(NULL, &o), CF_ERR_USAGE);
  assert_null(o);
  OK(cf_options_create(ctx, &o));
  ASSERT_ERR(cf_options_set(o, "colour", "red"), CF_ERR_USAGE, "unknown option 'colour'");
  /* the API names its option, not the driver's flag */
  ASSERT_ERR(cf_options_set(o, "split", "bytes:lots"), CF_ERR_USAGE,
             "option split: bytes:lots: bad cap 'lots'");
  ASSERT_ERR(cf_options_set(o, "cost", "fast"), CF_ERR_USAGE,
             "option cost: fast: expected alpha_us,beta_GBps");
  ASSERT_ERR(cf_options_set(o, "target", "tpu"), CF_ERR_USAGE,
             "unknown target 'tpu'; did you mean 'cpu'?");
  ASSERT_ERR(cf_options_set(o, "passes", "verify,fuse-all"), CF_ERR_USAGE,
             "unknown pass 'fuse-all'");
  ASSERT_ERR(cf_options_set(o, "deterministic", "maybe"), CF_ERR_USAGE,
             "option deterministic wants 1 or 0");
  ASSERT_ERR(cf_options_set(o, "algo", "tree"), CF_ERR_USAGE, "option algo wants auto");
  ASSERT_ERR(cf_options_set(o, "timeout", "-1"), CF_ERR_USAGE, "option timeout wants seconds");
  /* the driver's --seed, --timeout, --passes, --ranks, --algo and
   * --max-memory checks, with the API's names */
  static const struct {
    const char *key, *value, *message;
  } refused[] = {
      {"ranks", "0", "option ranks wants an integer in 1..256, got '0'"},
      {"ranks", "257", "option ranks wants an integer in 1..256, got '257'"},
      {"algo", "rign",
       "option algo wants auto, direct, pool, rd, ring, rsag or mpi-native, got 'rign'; did you mean "
       "'ring'?"},
      {"max_memory", "0", "option max_memory wants a size such as 512M or 4G, got '0'"},
      {"timeout", "1e9", "option timeout wants seconds in (0, 86400], got '1e9'"},
      {"seed", "-3", "option seed wants a number >= 0, got '-3'"},
  };
  for (size_t i = 0; i < sizeof refused / sizeof *refused; i++)
    ASSERT_ERR(cf_options_set(o, refused[i].key, refused[i].value), CF_ERR_USAGE,
               refused[i].message);
  OK(cf_options_set(o, "algo", "recursive-doubling")); /* rd's alias, as --algo takes it */
  OK(cf_options_set(o, "algo", "auto"));
  ASSERT_ERR(cf_options_set(o, "passes", "dce,,fuse-allreduce"), CF_ERR_USAGE,
             "option passes: bad pass list 'dce,,fuse-allreduce'");
  ASSERT_ERR(cf_options_set(o, "passes", "dce,fuse-all"), CF_ERR_USAGE,
             "option passes: unknown pass 'fuse-all' (known: verify, infer, dce, fuse-allreduce, "
             "fuse-allgather, fuse-reducescatter, fuse-alltoall, fuse-matmul-collective); or the pipelines "
             "default, O0");
  OK(cf_options_set(o, "split", "bytes:25M,first=1M"));
  OK(cf_options_set(o, "split", "size:96.54,3.46"));
  OK(cf_options_set(o, "target", "atlas-a2"));
  OK(cf_options_set(o, "passes", "O0"));
  OK(cf_options_set(o, "passes", "verify,infer,dce,fuse-allreduce"));
  OK(cf_options_set(o, "deterministic", "1"));
  OK(cf_options_set(o, "algo", "ring"));
  OK(cf_options_set(o, "seed", "42"));
  cf_options_destroy(o);
}

/* The profile option reads the file when it is set: a malformed one names
 * its line, a missing one is refused, "none" is the built-in rules; a
 * profile's link changes what split auto makes of the same gradients. */
static void test_options_profile(void **state) {
  (void)state;
  char bad[64], good[64], msg[160];
  snprintf(bad, sizeof bad, "/tmp/cf_profile_bad_%ld", (long)getpid());
  snprintf(good, sizeof good, "/tmp/cf_profile_good_%ld", (long)getpid());
  FILE *f = fopen(bad, "w");
  assert_non_null(f);
  fputs("collfuse-profile 1\nalgo threads 4 0 0 rung\n", f);
  fclose(f);
  f = fopen(good, "w");
  assert_non_null(f);
  fputs("collfuse-profile 1\nlink threads 4 5 20\nalgo threads 4 0 0 ring\n", f);
  fclose(f);
  cf_options *o;
  OK(cf_options_create(ctx, &o));
  snprintf(msg, sizeof msg, "%s:2: error: profile: unknown algorithm 'rung'", bad);
  ASSERT_ERR(cf_options_set(o, "profile", bad), CF_ERR_INVALID, msg);
  ASSERT_ERR(cf_options_set(o, "profile", "/nonexistent/cf-profile"), CF_ERR_IO,
             "/nonexistent/cf-profile: error: profile: cannot open");
  OK(cf_options_set(o, "profile", "none"));
  cf_graph *g = dp_graph(ctx, 4, 20, 1000, "mean");
  assert_non_null(g);
  OK(cf_graph_run_pipeline(g, NULL, o));
  size_t builtin = cf_graph_collective_count(g);
  cf_graph_destroy(g);
  OK(cf_options_set(o, "profile", good));
  g = dp_graph(ctx, 4, 20, 1000, "mean");
  assert_non_null(g);
  OK(cf_graph_run_pipeline(g, NULL, o));
  size_t measured = cf_graph_collective_count(g);
  if (measured <= builtin)
    fail_msg("a 5 us link should split into more buckets than 250 us: %zu vs %zu", measured,
             builtin);
  cf_executable *e;
  OK(cf_executable_create(g, o, &e));
  cf_executable_destroy(e);
  cf_graph_destroy(g);
  cf_options_destroy(o);
  unlink(bad);
  unlink(good);
}

/* Fused buckets as the API shows them. */
static void test_pipeline_and_inspection(void **state) {
  (void)state;
  cf_graph *g = dp_graph(ctx, 4, 20, 1000, "mean");
  assert_non_null(g);
  assert_int_equal(cf_graph_collective_count(g), 20);
  cf_options *o;
  OK(cf_options_create(ctx, &o));
  OK(cf_options_set(o, "split", "bytes:16K"));
  OK(cf_graph_run_pipeline(g, NULL, o));
  size_t nc = cf_graph_collective_count(g);
  assert_true(nc > 1 && nc < 20);
  char buf[4096], op[64], bytes[32];
  size_t members = 0;
  int64_t total = 0;
  for (size_t i = 0; i < nc; i++) {
    const char *b = cf_graph_collective_name(g, i);
    assert_non_null(b);
    OK(cf_graph_get_attr(g, b, "members", buf, sizeof buf));
    OK(cf_graph_get_attr(g, b, "op", op, sizeof op));
    OK(cf_graph_get_attr(g, b, "bytes", bytes, sizeof bytes));
    for (char *c = buf; *c; c++)
      members += *c == ',';
    members++;
    total += atoll(bytes);
    assert_true(atoll(bytes) <= 16 * 1024 || strchr(buf, ',') == NULL);
    OK(cf_graph_get_attr(g, b, "reduction", buf, sizeof buf));
    assert_string_equal(buf, "mean");
    OK(cf_graph_get_attr(g, b, "group", buf, sizeof buf));
    assert_string_equal(buf, "hccl_world_group");
  }
  assert_null(cf_graph_collective_name(g, nc));
  assert_int_equal(members, 20);
  assert_int_equal(total, 4 * (20 * 1000 + 190));
  OK(cf_graph_get_attr(g, "g3", "shape", buf, sizeof buf));
  assert_string_equal(buf, "1003");
  OK(cf_graph_get_attr(g, "g3", "dtype", buf, sizeof buf));
  assert_string_equal(buf, "float32");
  assert_string_equal(cf_graph_node_op(g, "o3"), "Output");
  assert_null(cf_graph_node_op(g, "nobody"));
  ASSERT_ERR(cf_graph_get_attr(g, "g3", "members", buf, sizeof buf), CF_ERR_INVALID,
             "node 'g3': not a collective");
  ASSERT_ERR(cf_graph_get_attr(g, "g3", "root", buf, sizeof buf), CF_ERR_INVALID,
             "node 'g3': has no attribute 'root'");
  ASSERT_ERR(cf_graph_get_attr(g, "g3", "wat", buf, sizeof buf), CF_ERR_INVALID,
             "unknown attribute 'wat'");
  /* a short buffer truncates but terminates */
  OK(cf_graph_get_attr(g, "g3", "dtype", buf, 4));
  assert_string_equal(buf, "flo");
  /* nodes in execution order: every Input comes before what reads it */
  assert_string_equal(cf_graph_node_name(g, 0) ? "ok" : "", "ok");
  assert_null(cf_graph_node_name(g, cf_graph_node_count(g)));

  /* written, drawn and read back */
  char dir[] = "/tmp/cf_api_XXXXXX", path[256];
  assert_non_null(mkdtemp(dir));
  snprintf(path, sizeof path, "%s/dp.xml", dir);
  OK(cf_graph_write_xml(g, path));
  cf_graph *back;
  OK(cf_graph_load(ctx, path, &back));
  assert_int_equal(cf_graph_collective_count(back), nc);
  cf_graph_destroy(back);
  remove(path);
  snprintf(path, sizeof path, "%s/dp.dot", dir);
  OK(cf_graph_write_dot(g, path));
  remove(path);
  rmdir(dir);
  cf_graph_destroy(g);
  cf_options_destroy(o);
}

/* -O0 is one thing whichever call names it: "O0", "-O0" and "" run
 * verification and inference without fusing, through cf_graph_run_passes as
 * through cf_graph_run_pipeline; NULL and "default" fuse through both. */
static void test_o0_agrees(void **state) {
  (void)state;
  static const char *o0[] = {"O0", "-O0", ""};
  for (int i = 0; i < 3; i++)
    for (int via_pipeline = 0; via_pipeline < 2; via_pipeline++) {
      cf_graph *g = dp_graph(ctx, 4, 20, 1000, "sum");
      assert_non_null(g);
      OK(via_pipeline ? cf_graph_run_pipeline(g, o0[i], NULL) : cf_graph_run_passes(g, o0[i]));
      assert_int_equal(cf_graph_collective_count(g), 20);
      /* it verifies: a built graph with an unknown group is refused */
      OK(cf_graph_set_attr(g, "ar3", "group", "nobody"));
      cf_status st =
          via_pipeline ? cf_graph_run_pipeline(g, o0[i], NULL) : cf_graph_run_passes(g, o0[i]);
      assert_int_equal(st, CF_ERR_INVALID);
      assert_non_null(strstr(cf_context_errmsg(ctx), "node 'ar3'"));
      cf_graph_destroy(g);
    }
  static const char *fused[] = {NULL, "default"};
  for (int i = 0; i < 2; i++)
    for (int via_pipeline = 0; via_pipeline < 2; via_pipeline++) {
      cf_graph *g = dp_graph(ctx, 4, 20, 1000, "sum");
      assert_non_null(g);
      OK(via_pipeline ? cf_graph_run_pipeline(g, fused[i], NULL)
                      : cf_graph_run_passes(g, fused[i]));
      assert_int_equal(cf_graph_collective_count(g), 1);
      cf_graph_destroy(g);
    }
}

/* ---- runs ---- */

/* All ranks of a DP graph with caller buffers: every output is the mean
 * over ranks, exactly (small integers in float32). */
/* A cf_run_done_fn that counts its calls in *(int *)user. */
static void count_done(void *user, cf_status status, const char *message) {
  (void)status;
  (void)message;
  ++*(int *)user;
}

static void test_run_dp(void **state) {
  (void)state;
  enum { R = 4, N = 20, E = 300 };
  cf_graph *g = dp_graph(ctx, R, N, E, "sum");
  assert_non_null(g);
  OK(cf_graph_run_pipeline(g, "default", NULL));
  assert_true(cf_graph_collective_count(g) < N);
  cf_executable *e;
  OK(cf_executable_create(g, NULL, &e));
  assert_int_equal(cf_executable_ranks(e), R);
  assert_int_equal(cf_executable_io_count(e, CF_IO_INPUT), N);
  assert_int_equal(cf_executable_io_count(e, CF_IO_OUTPUT), N);
  float *in[R * N], *out[R * N];
  for (int r = 0; r < R; r++)
    for (int i = 0; i < N; i++) {
      char nm[16];
      snprintf(nm, sizeof nm, "g%d", i);
      int ki = cf_executable_io_find(e, CF_IO_INPUT, nm);
      snprintf(nm, sizeof nm, "o%d", i);
      int ko = cf_executable_io_find(e, CF_IO_OUTPUT, nm);
      assert_true(ki >= 0 && ko >= 0);
      size_t bytes = cf_executable_io_bytes(e, CF_IO_INPUT, (size_t)ki);
      assert_int_equal(bytes, (E + i) * sizeof(float));
      assert_string_equal(cf_executable_io_dtype(e, CF_IO_INPUT, (size_t)ki), "float32");
      int64_t dims[CF_MAX_DIMS];
      assert_int_equal(cf_executable_io_shape(e, CF_IO_OUTPUT, (size_t)ko, dims), 1);
      assert_int_equal(dims[0], E + i);
      /* buckets are one contiguous buffer: members are copied in and out */
      assert_int_equal(cf_executable_io_in_place(e, CF_IO_INPUT, (size_t)ki), 0);
      assert_int_equal(cf_executable_io_in_place(e, CF_IO_OUTPUT, (size_t)ko), 0);
      in[r * N + ki] = malloc(bytes);
      out[r * N + ko] = malloc(bytes);
      for (int x = 0; x < E + i; x++)
        in[r * N + ki][x] = (float)(r + 1) * (float)(x % 7 + i);
    }
  assert_int_equal(cf_executable_io_find(e, CF_IO_INPUT, "o1"), -1);
  assert_null(cf_executable_io_name(e, CF_IO_INPUT, N));
  assert_int_equal(cf_executable_io_shape(e, CF_IO_INPUT, N, (int64_t[8]){0}), -1);
  for (int rep = 0; rep < 2; rep++) {
    for (int r = 0; r < R * N; r++)
      memset(out[r], 0xff, cf_executable_io_bytes(e, CF_IO_OUTPUT, (size_t)(r % N)));
    OK(cf_executable_run(e, (const void *const *)in, (void *const *)out));
    for (int r = 0; r < R; r++)
      for (int i = 0; i < N; i++) {
        char nm[16];
        snprintf(nm, sizeof nm, "o%d", i);
        int ko = cf_executable_io_find(e, CF_IO_OUTPUT, nm);
        for (int x = 0; x < E + i; x++)
          if (out[r * N + ko][x] != 10.0f * (float)(x % 7 + i))
            fail_msg("rank %d o%d[%d] = %g, want %g", r, i, x, out[r * N + ko][x],
                     10.0 * (x % 7 + i));
      }
  }
  assert_true(cf_executable_last_time_ms(e) > 0);
  /* the caller's inputs are unchanged */
  for (int r = 0; r < R; r++)
    for (int i = 0; i < N; i++) {
      char nm[16];
      snprintf(nm, sizeof nm, "g%d", i);
      int ki = cf_executable_io_find(e, CF_IO_INPUT, nm);
      assert_true(in[r * N + ki][1] == (float)(r + 1) * (float)(1 + i));
    }

  /* an input given for some ranks only; a misaligned buffer */
  float *keep = in[2 * N + 0];
  in[2 * N + 0] = NULL;
  ASSERT_ERR(cf_executable_run(e, (const void *const *)in, (void *const *)out), CF_ERR_USAGE,
             "no buffer for rank 2");
  in[2 * N + 0] = (float *)((char *)keep + 1);
  ASSERT_ERR(cf_executable_run(e, (const void *const *)in, (void *const *)out), CF_ERR_USAGE,
             "on rank 2: the buffer is not aligned to its 4-byte float32 elements");
  in[2 * N + 0] = keep;
  /* MPI: one rank per process (run under mpirun by tests/e2e/api_mpi.c);
   * a rank out of range is refused before MPI is touched */
  ASSERT_ERR(cf_executable_run_rank(e, R, NULL, NULL), CF_ERR_USAGE,
             "rank 4 is not a rank of this 4-rank executable");
  /* and so is a start on a runner (runner.c): without a runner or a
   * callback, or a rank out of range; nothing is queued, nothing called */
  cf_runner *runner;
  int calls = 0;
  OK(cf_runner_create(ctx, &runner));
  ASSERT_ERR(cf_executable_start_rank(e, NULL, 0, NULL, NULL, count_done, &calls), CF_ERR_USAGE,
             "cf_executable_start_rank: a runner and a done callback are required");
  ASSERT_ERR(cf_executable_start_rank(e, runner, 0, NULL, NULL, NULL, NULL), CF_ERR_USAGE,
             "a runner and a done callback are required");
  ASSERT_ERR(cf_executable_start_rank(e, runner, R, NULL, NULL, count_done, &calls), CF_ERR_USAGE,
             "rank 4 is not a rank of this 4-rank executable");
  cf_runner_wait(runner);
  cf_runner_destroy(runner);
  assert_int_equal(calls, 0);
  for (int r = 0; r < R * N; r++) {
    free(in[r]);
    free(out[r]);
  }
  cf_executable_destroy(e);
  cf_graph_destroy(g);
}

/* The plan uses the caller's buffers in place where a value has a buffer
 * of its own; results equal a plain C computation of the ranks. */
static void test_run_tp_in_place(void **state) {
  (void)state;
  enum { R = 4, M = 16, K = 8, N = 12, P = 5 };
  cf_graph *g = tp_graph(ctx, R, M, K, N, P);
  assert_non_null(g);
  cf_options *o;
  OK(cf_options_create(ctx, &o));
  OK(cf_options_set(o, "deterministic", "1"));
  OK(cf_graph_run_pipeline(g, NULL, o));
  cf_executable *e;
  OK(cf_executable_create(g, o, &e));
  int kx = cf_executable_io_find(e, CF_IO_INPUT, "x"),
      k1 = cf_executable_io_find(e, CF_IO_INPUT, "w1"),
      k2 = cf_executable_io_find(e, CF_IO_INPUT, "w2");
  int ky = cf_executable_io_find(e, CF_IO_OUTPUT, "y"),
      kz = cf_executable_io_find(e, CF_IO_OUTPUT, "z");
  for (int k = 0; k < 3; k++)
    assert_int_equal(cf_executable_io_in_place(e, CF_IO_INPUT, (size_t)k), 1);
  assert_int_equal(cf_executable_io_in_place(e, CF_IO_OUTPUT, (size_t)ky), 1);
  assert_int_equal(cf_executable_io_in_place(e, CF_IO_OUTPUT, (size_t)kz), 1);
  static float x[R][M * K], w1[R][K * N], w2[R][N * P], y[R][M / R * N], z[R][M * P];
  const void *in[R * 3];
  void *out[R * 2];
  for (int r = 0; r < R; r++) {
    for (int i = 0; i < M * K; i++)
      x[r][i] = (float)((i * 3 + r) % 5) - 2;
    for (int i = 0; i < K * N; i++)
      w1[r][i] = (float)((i + 2 * r) % 3) - 1;
    for (int i = 0; i < N * P; i++)
      w2[r][i] = (float)((i * 7 + r) % 4) - 1;
    in[r * 3 + kx] = x[r];
    in[r * 3 + k1] = w1[r];
    in[r * 3 + k2] = w2[r];
    out[r * 2 + ky] = y[r];
    out[r * 2 + kz] = z[r];
  }
  OK(cf_executable_run(e, in, out));
  /* reference: mm1 summed over ranks, block r to rank r; ag = the whole sum */
  static float sum[M * N];
  memset(sum, 0, sizeof sum);
  for (int r = 0; r < R; r++)
    for (int i = 0; i < M; i++)
      for (int j = 0; j < N; j++)
        for (int t = 0; t < K; t++)
          sum[i * N + j] += x[r][i * K + t] * w1[r][t * N + j];
  for (int r = 0; r < R; r++) {
    for (int i = 0; i < M / R * N; i++)
      assert_true(y[r][i] == sum[r * (M / R) * N + i]);
    for (int i = 0; i < M; i++)
      for (int j = 0; j < P; j++) {
        float want = 0;
        for (int t = 0; t < N; t++)
          want += sum[i * N + t] * w2[r][t * P + j];
        if (fabsf(z[r][i * P + j] - want) > 1e-4f * (1 + fabsf(want)))
          fail_msg("rank %d z[%d,%d] = %g, want %g", r, i, j, z[r][i * P + j], want);
      }
  }
  /* inputs not given come from the seed; unwanted outputs are skipped */
  void *only_z[R * 2] = {0};
  for (int r = 0; r < R; r++)
    only_z[r * 2 + kz] = z[r];
  OK(cf_executable_run(e, NULL, only_z));
  cf_executable_destroy(e);
  cf_graph_destroy(g);

  /* the fused MatMul+ReduceScatter op reads and writes the caller's buffers */
  int64_t dx[2] = {M, K}, dw[2] = {K, N};
  const char *mm_in[] = {"x", "w1"}, *attr[] = {"world_size", "comm_turn"}, *val[] = {"4", "2"};
  OK(cf_graph_create(ctx, "mmrs", R, &g));
  OK(cf_graph_add_input(g, "x", "float32", dx, 2));
  OK(cf_graph_add_input(g, "w1", "float32", dw, 2));
  ASSERT_ERR(cf_graph_add_op_attrs(g, "MatmulReduceScatter", "mmrs", mm_in, 2, attr,
                                   (const char *[]){"4", "x"}, 2),
             CF_ERR_INVALID, "comm_turn='x' is not an integer");
  assert_int_equal(cf_graph_node_count(g), 2);
  OK(cf_graph_add_op_attrs(g, "MatmulReduceScatter", "mmrs", mm_in, 2, attr, val, 2));
  OK(cf_graph_add_output(g, "y", "mmrs"));
  OK(cf_executable_create(g, o, &e));
  assert_int_equal(cf_executable_io_in_place(e, CF_IO_OUTPUT, 0), 1);
  for (int r = 0; r < R; r++) {
    in[r * 2 + cf_executable_io_find(e, CF_IO_INPUT, "x")] = x[r];
    in[r * 2 + cf_executable_io_find(e, CF_IO_INPUT, "w1")] = w1[r];
    out[r] = y[r];
  }
  OK(cf_executable_run(e, in, out));
  for (int r = 0; r < R; r++)
    for (int i = 0; i < M / R * N; i++)
      assert_true(y[r][i] == sum[r * (M / R) * N + i]);
  cf_executable_destroy(e);
  cf_graph_destroy(g);
  cf_options_destroy(o);
}

/* An Output straight from an Input is copied; the same value as two Outputs
 * is produced in the first one's buffer and copied to the second. */
static void test_run_copies(void **state) {
  (void)state;
  cf_graph *g;
  int64_t d[1] = {64};
  OK(cf_graph_create(ctx, "copies", 2, &g));
  OK(cf_graph_add_input(g, "x", "int32", d, 1));
  OK(cf_graph_add_allreduce(g, "ar", "x", "max", NULL, 0, -1));
  OK(cf_graph_add_output(g, "echo", "x"));
  OK(cf_graph_add_output(g, "m1", "ar"));
  OK(cf_graph_add_output(g, "m2", "ar"));
  cf_executable *e;
  OK(cf_executable_create(g, NULL, &e));
  assert_int_equal(cf_executable_io_in_place(e, CF_IO_INPUT, 0), 1);
  assert_int_equal(cf_executable_io_in_place(e, CF_IO_OUTPUT, 0), 0);
  assert_int_equal(cf_executable_io_in_place(e, CF_IO_OUTPUT, 1), 1);
  assert_int_equal(cf_executable_io_in_place(e, CF_IO_OUTPUT, 2), 0);
  int32_t x[2][64], o[2][3][64];
  for (int r = 0; r < 2; r++)
    for (int i = 0; i < 64; i++)
      x[r][i] = r ? i : 63 - i;
  const void *in[2] = {x[0], x[1]};
  void *out[6] = {o[0][0], o[0][1], o[0][2], o[1][0], o[1][1], o[1][2]};
  OK(cf_executable_run(e, in, out));
  for (int r = 0; r < 2; r++)
    for (int i = 0; i < 64; i++) {
      assert_int_equal(o[r][0][i], x[r][i]);
      assert_int_equal(o[r][1][i], i > 63 - i ? i : 63 - i);
      assert_int_equal(o[r][2][i], o[r][1][i]);
    }
  cf_executable_destroy(e);
  /* editing the graph drops its verified state; it verifies again */
  OK(cf_graph_set_attr(g, "ar", "reduction", "min"));
  OK(cf_executable_create(g, NULL, &e));
  OK(cf_executable_run(e, in, out));
  assert_int_equal(o[1][1][0], 0);
  cf_executable_destroy(e);
  cf_graph_destroy(g);
}

/* Bucket buffers (DDP's gradient_as_bucket_view): the layout of every
 * bucket, runs with the caller's whole bucket buffers (guard bytes around
 * them, random data against a float64 reference) and with the
 * executable's own, with views (no copies, every member in place), NULL
 * members, and separate buffers copied in and out as before. */
enum { BR = 3, BN = 12, BE = 257, GUARD = 64 };

static uint64_t rng_state = 0x9e3779b97f4a7c15u;
static float rnd(void) {
  rng_state ^= rng_state << 13;
  rng_state ^= rng_state >> 7;
  rng_state ^= rng_state << 17;
  return (float)((double)(rng_state >> 11) / 9007199254740992.0 * 2.0 - 1.0);
}

/* Every output j on every rank against the float64 mean of the ranks'
 * inputs (in[r][k] is the data input k had). */
static void check_means(cf_executable *e, float *const *in, float *const *out) {
  size_t n = cf_executable_io_count(e, CF_IO_OUTPUT);
  for (size_t j = 0; j < n; j++) {
    const char *name = cf_executable_io_name(e, CF_IO_OUTPUT, j);
    char gname[16];
    snprintf(gname, sizeof gname, "g%s", name + 1);
    int k = cf_executable_io_find(e, CF_IO_INPUT, gname);
    assert_true(k >= 0);
    size_t count = cf_executable_io_bytes(e, CF_IO_OUTPUT, j) / sizeof(float);
    for (size_t x = 0; x < count; x++) {
      double want = 0;
      for (int r = 0; r < BR; r++)
        want += in[r * BN + k][x];
      want /= BR;
      for (int r = 0; r < BR; r++) {
        double got = out[r * BN + (int)j][x];
        if (fabs(got - want) > 1e-6 * (1 + fabs(want)))
          fail_msg("rank %d %s[%zu] = %.9g, want %.9g", r, name, x, got, want);
      }
    }
  }
}

static void check_guards(unsigned char *const *base, const size_t *bytes, int n) {
  for (int i = 0; i < n; i++)
    for (int x = 0; x < GUARD; x++)
      if (base[i][x] != 0xa5 || base[i][GUARD + bytes[i] + (size_t)x] != 0xa5)
        fail_msg("bucket buffer %d: guard byte %d overwritten", i, x);
}

/* Every member's view in e's bound buckets: view_in / view_out[r * BN + k]
 * for gradient k's input and output on rank r; the inputs get data's. */
static void views_of(cf_executable *e, float *const *data, float **view_in, float **view_out) {
  for (int r = 0; r < BR; r++)
    for (int k = 0; k < BN; k++) {
      size_t oi, oo;
      int bi = cf_executable_io_bucket(e, CF_IO_INPUT, (size_t)k, &oi);
      int bo = cf_executable_io_bucket(e, CF_IO_OUTPUT, (size_t)k, &oo);
      assert_true(bi >= 0 && bo >= 0);
      view_in[r * BN + k] =
          (float *)((char *)cf_executable_bucket_buffer(e, r, (size_t)bi, CF_IO_INPUT) + oi);
      view_out[r * BN + k] =
          (float *)((char *)cf_executable_bucket_buffer(e, r, (size_t)bo, CF_IO_OUTPUT) + oo);
      memcpy(view_in[r * BN + k], data[r * BN + k],
             cf_executable_io_bytes(e, CF_IO_INPUT, (size_t)k));
    }
}

static void test_bucket_views(void **state) {
  (void)state;
  cf_graph *g = dp_graph(ctx, BR, BN, BE, "mean");
  assert_non_null(g);
  OK(cf_graph_run_pipeline(g, "default", NULL));
  cf_executable *e;
  OK(cf_executable_create(g, NULL, &e));
  size_t nb = cf_executable_bucket_count(e);
  assert_true(nb >= 1);
  assert_int_equal(nb, cf_graph_collective_count(g)); /* every AllReduce is in a bucket */
  assert_null(cf_executable_bucket_name(e, nb));
  assert_int_equal(cf_executable_bucket_bytes(e, nb, CF_IO_INPUT), 0);
  /* layout: every gradient and every average lies in a bucket, at an
   * aligned offset, the members of one bucket apart */
  size_t off_in[BN], off_out[BN];
  int b_in[BN], b_out[BN];
  for (size_t k = 0; k < BN; k++) {
    b_in[k] = cf_executable_io_bucket(e, CF_IO_INPUT, k, &off_in[k]);
    b_out[k] = cf_executable_io_bucket(e, CF_IO_OUTPUT, k, &off_out[k]);
    assert_true(b_in[k] >= 0 && b_out[k] >= 0);
    assert_true(off_in[k] % sizeof(float) == 0);
    assert_true(off_in[k] + cf_executable_io_bytes(e, CF_IO_INPUT, k) <=
                cf_executable_bucket_bytes(e, (size_t)b_in[k], CF_IO_INPUT));
    assert_true(off_out[k] + cf_executable_io_bytes(e, CF_IO_OUTPUT, k) <=
                cf_executable_bucket_bytes(e, (size_t)b_out[k], CF_IO_OUTPUT));
    for (size_t j = 0; j < k; j++)
      if (b_in[j] == b_in[k])
        assert_true(off_in[j] + cf_executable_io_bytes(e, CF_IO_INPUT, j) <= off_in[k] ||
                    off_in[k] + cf_executable_io_bytes(e, CF_IO_INPUT, k) <= off_in[j]);
    assert_int_equal(cf_executable_io_in_place(e, CF_IO_INPUT, k), 0);
  }
  size_t off;
  assert_int_equal(cf_executable_io_bucket(e, CF_IO_INPUT, BN, &off), -1);
  assert_int_equal(off, 0);

  /* separate buffers: one copy in and one out per gradient and rank */
  float *sep_in[BR * BN], *sep_out[BR * BN], *view_in[BR * BN], *view_out[BR * BN];
  for (int r = 0; r < BR; r++)
    for (int k = 0; k < BN; k++) {
      size_t bytes = cf_executable_io_bytes(e, CF_IO_INPUT, (size_t)k);
      sep_in[r * BN + k] = malloc(bytes);
      sep_out[r * BN + k] = malloc(bytes);
      for (size_t x = 0; x < bytes / sizeof(float); x++)
        sep_in[r * BN + k][x] = rnd();
    }
  OK(cf_executable_run(e, (const void *const *)sep_in, (void *const *)sep_out));
  size_t copy_bytes, all_bytes = 0;
  for (int k = 0; k < BN; k++)
    all_bytes += 2 * BR * cf_executable_io_bytes(e, CF_IO_INPUT, (size_t)k);
  assert_int_equal(cf_executable_last_copies(e, &copy_bytes), 2 * BR * BN);
  assert_int_equal(copy_bytes, all_bytes);
  check_means(e, sep_in, sep_out);

  /* the caller's bucket buffers, guard bytes around them */
  unsigned char *base[BR * 2 * BN];
  size_t bbytes[BR * 2 * BN];
  int nbuf = 0;
  for (int r = 0; r < BR; r++)
    for (size_t b = 0; b < nb; b++)
      for (int io = 0; io < 2; io++) {
        bbytes[nbuf] = cf_executable_bucket_bytes(e, b, (cf_io)io);
        base[nbuf] = aligned_alloc(GUARD, bbytes[nbuf] + 2 * GUARD);
        memset(base[nbuf], 0xa5, bbytes[nbuf] + 2 * GUARD);
        OK(cf_executable_bucket_bind(e, r, b, (cf_io)io, base[nbuf] + GUARD));
        assert_ptr_equal(cf_executable_bucket_buffer(e, r, b, (cf_io)io), base[nbuf] + GUARD);
        nbuf++;
      }
  views_of(e, sep_in, view_in, view_out);
  for (size_t k = 0; k < BN; k++) {
    assert_int_equal(cf_executable_io_in_place(e, CF_IO_INPUT, k), 1);
    assert_int_equal(cf_executable_io_in_place(e, CF_IO_OUTPUT, k), 1);
  }
  for (int rep = 0; rep < 2; rep++) { /* views: no copy at all, inputs unchanged */
    OK(cf_executable_run(e, (const void *const *)view_in, (void *const *)view_out));
    assert_int_equal(cf_executable_last_copies(e, &copy_bytes), 0);
    assert_int_equal(copy_bytes, 0);
    check_means(e, view_in, view_out);
    for (int i = 0; i < BR * BN; i++)
      assert_memory_equal(view_in[i], sep_in[i],
                          cf_executable_io_bytes(e, CF_IO_INPUT, (size_t)(i % BN)));
  }
  check_guards(base, bbytes, nbuf);
  /* NULL members: read from and left in the buckets */
  for (int i = 0; i < BR * BN; i++)
    memset(view_out[i], 0, cf_executable_io_bytes(e, CF_IO_OUTPUT, (size_t)(i % BN)));
  OK(cf_executable_run(e, NULL, NULL));
  assert_int_equal(cf_executable_last_copies(e, NULL), 0);
  check_means(e, view_in, view_out);
  /* separate buffers with bound buckets: copied in and out, as before */
  for (int i = 0; i < BR * BN; i++) {
    for (size_t x = 0; x < cf_executable_io_bytes(e, CF_IO_INPUT, (size_t)(i % BN)) / 4; x++)
      sep_in[i][x] = rnd();
    memset(sep_out[i], 0, cf_executable_io_bytes(e, CF_IO_OUTPUT, (size_t)(i % BN)));
  }
  OK(cf_executable_run(e, (const void *const *)sep_in, (void *const *)sep_out));
  assert_int_equal(cf_executable_last_copies(e, NULL), 2 * BR * BN);
  check_means(e, sep_in, sep_out);
  check_means(e, view_in, view_out); /* the buckets hold the same */
  check_guards(base, bbytes, nbuf);

  /* bad binds */
  ASSERT_ERR(cf_executable_bucket_bind(e, 0, nb, CF_IO_INPUT, NULL), CF_ERR_USAGE,
             "cf_executable_bucket_bind: no bucket");
  ASSERT_ERR(cf_executable_bucket_bind(e, BR, 0, CF_IO_OUTPUT, NULL), CF_ERR_USAGE,
             "output on rank 3 (the executable has");
  ASSERT_ERR(cf_executable_bucket_bind(e, 0, 0, CF_IO_INPUT, base[0] + GUARD + 4), CF_ERR_USAGE,
             "on rank 0: the buffer is not aligned to 64 bytes");
  assert_null(cf_executable_bucket_buffer(e, BR, 0, CF_IO_INPUT));
  cf_executable_destroy(e); /* the caller's buffers stay the caller's */
  check_guards(base, bbytes, nbuf);
  for (int i = 0; i < nbuf; i++)
    free(base[i]);

  /* the executable's own buffers: zeroed, stable, freed with it */
  OK(cf_executable_create(g, NULL, &e));
  for (int r = 0; r < BR; r++)
    for (size_t b = 0; b < nb; b++)
      for (int io = 0; io < 2; io++) {
        OK(cf_executable_bucket_bind(e, r, b, (cf_io)io, NULL));
        void *p = cf_executable_bucket_buffer(e, r, b, (cf_io)io);
        assert_non_null(p);
        assert_true((uintptr_t)p % 64 == 0);
        OK(cf_executable_bucket_bind(e, r, b, (cf_io)io, NULL)); /* the same again */
        assert_ptr_equal(cf_executable_bucket_buffer(e, r, b, (cf_io)io), p);
        unsigned char *c = p;
        for (size_t x = 0; x < cf_executable_bucket_bytes(e, b, (cf_io)io); x++)
          assert_int_equal(c[x], 0);
      }
  views_of(e, sep_in, view_in, view_out);
  OK(cf_executable_run(e, (const void *const *)view_in, NULL));
  assert_int_equal(cf_executable_last_copies(e, NULL), 0);
  check_means(e, view_in, view_out);
  cf_executable_destroy(e);

  /* every AllReduce algorithm reads the input bucket and writes the output
   * bucket where they lie, deterministic or not */
  static const char *const algos[] = {"direct", "rd", "ring", "rsag"};
  for (int a = 0; a < 8; a++) {
    cf_options *o;
    OK(cf_options_create(ctx, &o));
    OK(cf_options_set(o, "algo", algos[a % 4]));
    OK(cf_options_set(o, "deterministic", a < 4 ? "0" : "1"));
    OK(cf_executable_create(g, o, &e));
    for (int r = 0; r < BR; r++)
      for (size_t b = 0; b < nb; b++) {
        OK(cf_executable_bucket_bind(e, r, b, CF_IO_INPUT, NULL));
        OK(cf_executable_bucket_bind(e, r, b, CF_IO_OUTPUT, NULL));
      }
    views_of(e, sep_in, view_in, view_out);
    OK(cf_executable_run(e, NULL, NULL));
    assert_int_equal(cf_executable_last_copies(e, NULL), 0);
    check_means(e, view_in, view_out);
    for (int i = 0; i < BR * BN; i++) /* the gradients are only read */
      assert_memory_equal(view_in[i], sep_in[i],
                          cf_executable_io_bytes(e, CF_IO_INPUT, (size_t)(i % BN)));
    cf_executable_destroy(e);
    cf_options_destroy(o);
  }
  for (int i = 0; i < BR * BN; i++) {
    free(sep_in[i]);
    free(sep_out[i]);
  }
  cf_graph_destroy(g);
}

/* The memory an executable needs against the max_memory option (and the
 * machine's): cf_executable_create refuses when one rank does not fit,
 * cf_executable_run when its ranks do not fit together, before allocating. */
/* An executable made from a graph that changed since refuses to run (the
 * plan reads the graph's nodes); one whose graph was destroyed keeps it. */
static cf_status change(cf_graph *g, int how) {
  int64_t d[1] = {8};
  int ranks[2] = {0, 1};
  cf_executable *e2 = NULL;
  cf_options *o = NULL;
  cf_status st;
  switch (how) {
  case 0: return cf_graph_add_input(g, "extra", "float32", d, 1);
  case 1: return cf_graph_set_attr(g, "o0", "shape", "16");
  case 2: return cf_graph_set_attr_int(g, cf_graph_collective_name(g, 0), "fusion_id", 3);
  case 3: return cf_graph_run_pipeline(g, "default", NULL); /* compiling again */
  case 4: return cf_graph_run_passes(g, "verify,infer");
  case 5: return cf_graph_set_world_size(g, 2);
  case 6: return cf_graph_define_group(g, "pair", ranks, 2);
  default: /* another executable for another world size resizes the graph */
    if ((st = cf_options_create(ctx, &o)) || (st = cf_options_set(o, "ranks", "4")) ||
        (st = cf_executable_create(g, o, &e2))) {
      cf_options_destroy(o);
      return st;
    }
    cf_executable_destroy(e2);
    cf_options_destroy(o);
    return CF_OK;
  }
}

static void test_stale_executable(void **state) {
  (void)state;
  enum { R = 2, N = 3, E = 16 };
  static float in[R * N][E + N], out[R * N][E + N];
  const void *ip[R * N];
  void *op[R * N];
  for (int k = 0; k < R * N; k++) {
    ip[k] = in[k];
    op[k] = out[k];
    for (int x = 0; x < E + N; x++) in[k][x] = (float)(k / N + 1);
  }
  for (int how = 0; how <= 7; how++) {
    cf_graph *g = dp_graph(ctx, R, N, E, "sum");
    assert_non_null(g);
    cf_executable *e, *same;
    OK(cf_graph_run_pipeline(g, "default", NULL));
    OK(cf_executable_create(g, NULL, &e));
    /* verifying changes nothing: a second executable leaves the first valid */
    OK(cf_graph_verify(g, NULL));
    OK(cf_executable_create(g, NULL, &same));
    OK(cf_executable_run(e, ip, op));
    OK(cf_executable_check(e));
    if (change(g, how) != CF_OK) fail_msg("change %d: %s", how, cf_context_errmsg(ctx));
    for (int i = 0; i < 2; i++) {
      cf_executable *x = i ? same : e;
      ASSERT_ERR(cf_executable_run(x, ip, op), CF_ERR_USAGE,
                 "error: graph 'dp' was changed after this executable was made from it (a node "
                 "added, an attribute set, passes run or the world resized); make the executable "
                 "again");
      ASSERT_ERR(cf_executable_run_rank(x, 0, NULL, NULL), CF_ERR_USAGE, "graph 'dp' was changed");
      ASSERT_ERR(cf_executable_check(x), CF_ERR_USAGE, "graph 'dp' was changed");
      /* the io queries answer as for an index out of range, never from the old nodes */
      assert_int_equal(cf_executable_io_count(x, CF_IO_INPUT), 0);
      assert_int_equal(cf_executable_io_find(x, CF_IO_OUTPUT, "o0"), -1);
      assert_null(cf_executable_io_name(x, CF_IO_INPUT, 0));
      assert_null(cf_executable_io_dtype(x, CF_IO_OUTPUT, 0));
      assert_int_equal(cf_executable_io_shape(x, CF_IO_INPUT, 0, (int64_t[CF_MAX_DIMS]){0}), -1);
      assert_int_equal(cf_executable_io_bytes(x, CF_IO_INPUT, 0), 0);
      assert_int_equal(cf_executable_io_in_place(x, CF_IO_OUTPUT, 0), 0);
    }
    cf_executable_destroy(e);
    cf_executable_destroy(same);
    /* made again, it runs (the changes above leave a valid graph) */
    if (how != 0 && how != 1) {
      OK(cf_executable_create(g, NULL, &e));
      OK(cf_executable_run(e, NULL, NULL));
      cf_executable_destroy(e);
    }
    cf_graph_destroy(g);
  }

  /* the graph destroyed first: its executables hold it and keep running */
  cf_graph *g = dp_graph(ctx, R, N, E, "sum");
  assert_non_null(g);
  cf_executable *e1, *e2;
  OK(cf_graph_run_pipeline(g, "default", NULL));
  OK(cf_executable_create(g, NULL, &e1));
  OK(cf_executable_create(g, NULL, &e2));
  cf_graph_destroy(g);
  for (int i = 0; i < 2; i++) {
    cf_executable *x = i ? e2 : e1;
    OK(cf_executable_check(x));
    assert_string_equal(cf_executable_io_name(x, CF_IO_OUTPUT, 2), "o2");
    memset(out, 0, sizeof out);
    OK(cf_executable_run(x, ip, op));
    for (int k = 0; k < R * N; k++)
      assert_true(out[k][E - 1] == 3.0f); /* 1 + 2 */
    if (!i) cf_executable_destroy(e1); /* e2 still holds the graph */
  }
  cf_executable_destroy(e2); /* frees the graph: ASan checks it is freed once */
}

static void test_memory(void **state) {
  (void)state;
  cf_options *o;
  OK(cf_options_create(ctx, &o));
  ASSERT_ERR(cf_options_set(o, "max_memory", "lots"), CF_ERR_USAGE,
             "option max_memory wants a size such as 512M or 4G, got 'lots'");
  cf_graph *g = dp_graph(ctx, 4, 1, 1 << 20, "sum"); /* 4 MiB in and out per rank */
  assert_non_null(g);
  cf_executable *e = (cf_executable *)&e;
  OK(cf_options_set(o, "max_memory", "1M"));
  ASSERT_ERR(cf_executable_create(g, o, &e), CF_ERR_INVALID, "each of its 4 ranks needs ");
  assert_null(e);
  assert_non_null(strstr(cf_context_errmsg(ctx), ", 1.0 MiB allowed by the max_memory option"));
  /* one rank fits in 20 MiB, four do not: the run refuses, naming both */
  OK(cf_options_set(o, "max_memory", "20M"));
  OK(cf_executable_create(g, o, &e));
  ASSERT_ERR(cf_executable_run(e, NULL, NULL), CF_ERR_INVALID, "4 ranks need ");
  const char *msg = cf_context_errmsg(ctx);
  assert_non_null(strstr(msg,
                         " per rank), 20.0 MiB allowed by the max_memory option; use fewer ranks, "
                         "or one rank per process with cf_executable_run_rank"));
  cf_executable_destroy(e);
  OK(cf_options_set(o, "max_memory", "1G"));
  OK(cf_executable_create(g, o, &e));
  OK(cf_executable_run(e, NULL, NULL));
  cf_executable_destroy(e);
  cf_graph_destroy(g);
  /* more than the machine has: refused by what it has available */
  cf_graph *h;
  int64_t d[1] = {(int64_t)1 << 36}; /* 256 GiB of float32 */
  OK(cf_graph_create(ctx, "huge", 1, &h));
  OK(cf_graph_add_input(h, "x", "float32", d, 1));
  OK(cf_graph_add_allreduce(h, "ar", "x", "sum", NULL, 0, -1));
  OK(cf_graph_add_output(h, "y", "ar"));
  ASSERT_ERR(cf_executable_create(h, NULL, &e), CF_ERR_INVALID, "1 rank needs ");
  assert_non_null(strstr(cf_context_errmsg(ctx), " available ("));
  assert_null(e);
  cf_graph_destroy(h);
  cf_options_destroy(o);
}

/* A partitioned group built through the API: {0,2} and {1,3} of 4 ranks,
 * an int32 sum and a concat AllGather within each part; its errors. */
static void test_run_partitioned_group(void **state) {
  (void)state;
  cf_graph *g;
  int64_t d[1] = {16};
  int cols[4] = {0, 2, 1, 3};
  OK(cf_graph_create(ctx, "parts", 4, &g));
  ASSERT_ERR(cf_graph_define_group_parts(g, "none", cols, 0, 2), CF_ERR_USAGE, "non-zero part");
  OK(cf_graph_define_group_parts(g, "cols", cols, 2, 2));
  OK(cf_graph_add_input(g, "x", "int32", d, 1));
  OK(cf_graph_add_allreduce(g, "ar", "x", "sum", "cols", 0, -1));
  OK(cf_graph_add_allgather(g, "ag", "x", "cols", "concat"));
  OK(cf_graph_add_output(g, "s", "ar"));
  OK(cf_graph_add_output(g, "all", "ag"));
  cf_executable *e;
  OK(cf_executable_create(g, NULL, &e));
  size_t ks = (size_t)cf_executable_io_find(e, CF_IO_OUTPUT, "s");
  size_t ka = (size_t)cf_executable_io_find(e, CF_IO_OUTPUT, "all");
  int64_t dims[4];
  assert_int_equal(cf_executable_io_shape(e, CF_IO_OUTPUT, ka, dims), 1);
  assert_int_equal(dims[0], 32); /* rank_size is the part's size */
  int32_t x[4][16], sum[4][16], all[4][32];
  for (int r = 0; r < 4; r++)
    for (int i = 0; i < 16; i++) x[r][i] = (r + 1) * 1000 + i * 7 - 50;
  const void *in[4] = {x[0], x[1], x[2], x[3]};
  void *out[8];
  for (int r = 0; r < 4; r++) {
    out[r * 2 + (int)ks] = sum[r];
    out[r * 2 + (int)ka] = all[r];
  }
  OK(cf_executable_run(e, in, out));
  for (int r = 0; r < 4; r++) {
    int lo = r % 2, hi = lo + 2; /* the part: {0,2} or {1,3} */
    for (int i = 0; i < 16; i++) {
      assert_int_equal(sum[r][i], x[lo][i] + x[hi][i]);
      assert_int_equal(all[r][i], x[lo][i]);
      assert_int_equal(all[r][16 + i], x[hi][i]);
    }
  }
  cf_executable_destroy(e);
  cf_graph_destroy(g);
  /* parts that overlap are the verifier's error */
  int bad[4] = {0, 1, 1, 2};
  OK(cf_graph_create(ctx, "overlap", 4, &g));
  OK(cf_graph_define_group_parts(g, "o", bad, 2, 2));
  OK(cf_graph_add_input(g, "x", "int32", d, 1));
  OK(cf_graph_add_allreduce(g, "ar", "x", "sum", "o", 0, -1));
  OK(cf_graph_add_output(g, "s", "ar"));
  ASSERT_ERR(cf_graph_verify(g, NULL), CF_ERR_INVALID, "rank 1 is in parts 0 and 1");
  cf_graph_destroy(g);
}

/* --deterministic: fused and unfused runs are bitwise equal. */
static void test_deterministic(void **state) {
  (void)state;
  enum { R = 3, N = 12 };
  float *res[2][R * N];
  for (int pass = 0; pass < 2; pass++) {
    cf_graph *g = dp_graph(ctx, R, N, 777, "mean");
    cf_options *o;
    OK(cf_options_create(ctx, &o));
    OK(cf_options_set(o, "deterministic", "1"));
    OK(cf_options_set(o, "seed", "5"));
    OK(cf_options_set(o, "passes", pass ? "default" : "O0"));
    OK(cf_graph_run_pipeline(g, NULL, o));
    assert_true(pass ? cf_graph_collective_count(g) < N : cf_graph_collective_count(g) == N);
    cf_executable *e;
    OK(cf_executable_create(g, o, &e));
    for (int r = 0; r < R; r++)
      for (int i = 0; i < N; i++) {
        char nm[16];
        snprintf(nm, sizeof nm, "o%d", i);
        int k = cf_executable_io_find(e, CF_IO_OUTPUT, nm);
        res[pass][r * N + i] = malloc(cf_executable_io_bytes(e, CF_IO_OUTPUT, (size_t)k));
      }
    void *out[R * N];
    for (int r = 0; r < R; r++)
      for (int i = 0; i < N; i++) {
        char nm[16];
        snprintf(nm, sizeof nm, "o%d", i);
        out[r * N + cf_executable_io_find(e, CF_IO_OUTPUT, nm)] = res[pass][r * N + i];
      }
    OK(cf_executable_run(e, NULL, out));
    cf_executable_destroy(e);
    cf_graph_destroy(g);
    cf_options_destroy(o);
  }
  for (int r = 0; r < R; r++)
    for (int i = 0; i < N; i++) {
      assert_memory_equal(res[0][r * N + i], res[1][r * N + i], (777 + i) * sizeof(float));
      free(res[0][r * N + i]);
      free(res[1][r * N + i]);
    }
}

/* ---- the log sink ---- */

typedef struct log_sink {
  int lines, explain;
  char last[512]; /* the last explain line */
} log_sink;

static void on_log(void *user, cf_log_level level, const char *msg) {
  log_sink *s = user;
  s->lines++;
  if (level == CF_LOG_INFO && strncmp(msg, "explain: ", 9) == 0) {
    s->explain++;
    snprintf(s->last, sizeof s->last, "%s", msg);
  }
}

static void test_log(void **state) {
  (void)state;
  log_sink s = {0};
  cf_context_set_log(ctx, on_log, &s);
  cf_graph *g = dp_graph(ctx, 2, 6, 64, "sum");
  cf_options *o;
  OK(cf_options_create(ctx, &o));
  OK(cf_options_set(o, "explain", "1"));
  OK(cf_graph_run_pipeline(g, NULL, o));
  assert_int_equal(s.explain, 6); /* one line per collective */
  if (!strstr(s.last, "AllReduce 'ar")) fail_msg("last log line: %s", s.last);
  cf_context_set_log(ctx, NULL, NULL);
  cf_graph_destroy(g);
  cf_options_destroy(o);
}

/* ---- two contexts, two threads ---- */

typedef struct job {
  bool tp;
  int iters;
  int explain_lines, foreign_lines;
  char err[512];
  log_sink sink;
} job;

static void *worker(void *arg) {
  job *j = arg;
  cf_context *c;
  cf_graph *g = NULL;
  cf_options *o = NULL;
  cf_executable *e = NULL;
  if (cf_context_create(&c)) {
    snprintf(j->err, sizeof j->err, "no context");
    return NULL;
  }
  cf_context_set_log(c, on_log, &j->sink);
  enum { R = 4, M = 32, K = 16, N = 24, P = 8, DN = 30 };
  if (j->tp)
    g = tp_graph(c, R, M, K, N, P);
  else
    g = dp_graph(c, R, DN, 500, "sum");
  cf_status st = g ? CF_OK : CF_ERR_INVALID;
  if (!st) st = cf_options_create(c, &o);
  if (!st && !j->tp) st = cf_options_set(o, "explain", "1");
  if (!st) st = cf_graph_run_pipeline(g, NULL, o);
  if (!st) st = cf_executable_create(g, o, &e);
  int ni = (int)cf_executable_io_count(e, CF_IO_INPUT),
      no = (int)cf_executable_io_count(e, CF_IO_OUTPUT);
  void **in = calloc((size_t)(R * ni + R * no) + 1, sizeof *in), **out = in + R * ni;
  for (int r = 0; r < R && !st; r++) {
    for (int k = 0; k < ni; k++) {
      size_t b = cf_executable_io_bytes(e, CF_IO_INPUT, (size_t)k);
      float *p = malloc(b);
      for (size_t x = 0; x < b / 4; x++)
        p[x] = (float)((x + (size_t)k + (size_t)r) % 3);
      in[r * ni + k] = p;
    }
    for (int k = 0; k < no; k++)
      out[r * no + k] = malloc(cf_executable_io_bytes(e, CF_IO_OUTPUT, (size_t)k));
  }
  for (int it = 0; it < j->iters && !st; it++) {
    st = cf_executable_run(e, (const void *const *)in, out);
    if (st) break;
    /* check rank 1 against a direct computation */
    if (!j->tp) {
      for (int k = 0; k < no && !st; k++) {
        const char *nm = cf_executable_io_name(e, CF_IO_OUTPUT, (size_t)k);
        char gn[16];
        snprintf(gn, sizeof gn, "g%s", nm + 1);
        int ki = cf_executable_io_find(e, CF_IO_INPUT, gn);
        size_t cnt = cf_executable_io_bytes(e, CF_IO_OUTPUT, (size_t)k) / 4;
        for (size_t x = 0; x < cnt; x++) {
          float want = 0;
          for (int r = 0; r < R; r++)
            want += ((float *)in[r * ni + ki])[x];
          if (((float *)out[1 * no + k])[x] != want) {
            snprintf(j->err, sizeof j->err, "dp %s[%zu] = %g, want %g", nm, x,
                     ((float *)out[no + k])[x], want);
            st = CF_ERR_RUNTIME;
            break;
          }
        }
      }
    } else {
      int kx = cf_executable_io_find(e, CF_IO_INPUT, "x"),
          k1 = cf_executable_io_find(e, CF_IO_INPUT, "w1");
      int ky = cf_executable_io_find(e, CF_IO_OUTPUT, "y");
      for (int i = 0; i < M / R && !st; i++)
        for (int jj = 0; jj < N && !st; jj++) {
          float want = 0;
          for (int r = 0; r < R; r++)
            for (int t = 0; t < K; t++)
              want += ((float *)in[r * ni + kx])[(M / R + i) * K + t] *
                      ((float *)in[r * ni + k1])[t * N + jj];
          float got = ((float *)out[1 * no + ky])[i * N + jj];
          if (fabsf(got - want) > 1e-4f * (1 + fabsf(want))) {
            snprintf(j->err, sizeof j->err, "tp y[%d,%d] = %g, want %g", i, jj, got, want);
            st = CF_ERR_RUNTIME;
          }
        }
    }
  }
  if (st && !j->err[0]) snprintf(j->err, sizeof j->err, "status %d: %s", st, cf_context_errmsg(c));
  /* an error on this context leaves the message here, and only here */
  if (!st && j->tp) {
    if (cf_graph_add_op(g, "Nope", "bad", NULL, 0) != CF_ERR_INVALID ||
        !strstr(cf_context_errmsg(c), "unknown op 'Nope'"))
      snprintf(j->err, sizeof j->err, "tp context lost its message: '%s'", cf_context_errmsg(c));
  }
  for (int k = 0; in && k < R * (ni + no); k++)
    free(in[k]);
  free(in);
  cf_executable_destroy(e);
  cf_graph_destroy(g);
  cf_options_destroy(o);
  j->explain_lines = j->sink.explain;
  j->foreign_lines = j->sink.lines - j->sink.explain;
  cf_context_destroy(c);
  return NULL;
}

static void test_two_contexts_two_threads(void **state) {
  (void)state;
  job a = {.tp = false, .iters = 6}, b = {.tp = true, .iters = 6};
  pthread_t ta, tb;
  assert_int_equal(pthread_create(&ta, NULL, worker, &a), 0);
  assert_int_equal(pthread_create(&tb, NULL, worker, &b), 0);
  pthread_join(ta, NULL);
  pthread_join(tb, NULL);
  if (a.err[0]) fail_msg("dp thread: %s", a.err);
  if (b.err[0]) fail_msg("tp thread: %s", b.err);
  /* each context's log sink heard its own graph only */
  assert_int_equal(a.explain_lines, 30);
  assert_int_equal(b.explain_lines, 0);
}

/* ---- one context, eight threads ----
 * Eight threads run their own executables of one graph at the same time
 * (plain runs, runs with bound buckets, which plan and look up kernels
 * while they run, and failing runs) and each reads the message of its own
 * failure; a thread with no failure of its own reads the one another thread
 * left (a context handed over, the rank threads' messages after a run).
 * Also clean under ThreadSanitizer (a tree configured with CMAKE_C_FLAGS,
 * CMAKE_EXE_LINKER_FLAGS and CMAKE_SHARED_LINKER_FLAGS -fsanitize=thread). */

enum { SR = 2, SN = 3, SE = 64, ST = 8, SITERS = 20, SFAILS = 200 };

static atomic_int shared_log_lines;

static void count_log(void *user, cf_log_level lvl, const char *msg) {
  (void)user, (void)lvl, (void)msg;
  atomic_fetch_add(&shared_log_lines, 1);
}

typedef struct runner {
  int id;
  cf_executable *e;      /* this thread's own */
  cf_executable *greedy; /* needs more memory than allowed for two ranks: every run fails */
  char err[512];
} runner;

static void *run_own(void *arg) {
  runner *w = arg;
  float in[SR * SN][SE + SN], out[SR * SN][SE + SN];
  const void *ip[SR * SN];
  void *op[SR * SN];
  for (int k = 0; k < SR * SN; k++) {
    ip[k] = in[k];
    op[k] = out[k];
    for (int x = 0; x < SE + SN; x++)
      in[k][x] = (float)(w->id + k / SN);
  }
  /* odd threads run with their buckets bound: the run plans for them */
  for (int r = 0; w->id % 2 && r < SR; r++)
    for (size_t b = 0; b < cf_executable_bucket_count(w->e); b++)
      for (int io = 0; io < 2; io++)
        if (cf_executable_bucket_bind(w->e, r, b, (cf_io)io, NULL)) {
          snprintf(w->err, sizeof w->err, "bind: %s", cf_context_errmsg(ctx));
          return NULL;
        }
  char want[128];
  snprintf(want, sizeof want, "error: rank %d is not a rank of this %d-rank executable",
           1000 + w->id, SR);
  for (int it = 0; it < SITERS; it++) {
    cf_status st = cf_executable_run(w->e, ip, op);
    if (st) {
      snprintf(w->err, sizeof w->err, "run %d: status %d: %s", it, st, cf_context_errmsg(ctx));
      return NULL;
    }
    float sum = (float)(2 * w->id + 1); /* rank 0 gives id, rank 1 id + 1 */
    for (int k = 0; k < SR * SN; k++)
      if (out[k][SE - 1] != sum) {
        snprintf(w->err, sizeof w->err, "run %d: out[%d] = %g, want %g", it, k, out[k][SE - 1], sum);
        return NULL;
      }
    /* failures of this thread's: its message, not another thread's */
    for (int f = 0; f < SFAILS; f++) {
      st = cf_executable_run_rank(w->e, 1000 + w->id, NULL, NULL);
      const char *msg = cf_context_errmsg(ctx);
      if (st != CF_ERR_USAGE || strcmp(msg, want) != 0) {
        snprintf(w->err, sizeof w->err, "run_rank %d: status %d, message '%s', want '%s'", it, st,
                 msg, want);
        return NULL;
      }
    }
    st = cf_executable_run(w->greedy, NULL, NULL);
    const char *msg = cf_context_errmsg(ctx);
    if (st != CF_ERR_INVALID || !strstr(msg, "allowed by the max_memory option")) {
      snprintf(w->err, sizeof w->err, "greedy run %d: status %d, message '%s'", it, st, msg);
      return NULL;
    }
  }
  return NULL;
}

static void test_threads_share_a_context(void **state) {
  (void)state;
  cf_context_set_log(ctx, count_log, NULL);
  cf_graph *g = dp_graph(ctx, SR, SN, SE, "sum");
  assert_non_null(g);
  cf_options *o, *small;
  OK(cf_options_create(ctx, &o));
  OK(cf_options_set(o, "explain", "1")); /* log lines while compiling */
  OK(cf_graph_run_pipeline(g, "default", o));
  OK(cf_options_create(ctx, &small));
  runner w[ST];
  pthread_t th[ST];
  for (int t = 0; t < ST; t++) {
    w[t] = (runner){.id = t};
    OK(cf_executable_create(g, o, &w[t].e));
    /* one rank fits in the limit, two do not */
    int64_t need = 0;
    for (int k = 0; k < SN; k++)
      need += 2 * (int64_t)cf_executable_io_bytes(w[t].e, CF_IO_INPUT, (size_t)k);
    char lim[32];
    snprintf(lim, sizeof lim, "%lld", (long long)(need + need / 2));
    OK(cf_options_set(small, "max_memory", lim));
    OK(cf_executable_create(g, small, &w[t].greedy));
  }
  assert_true(atomic_load(&shared_log_lines) > 0);
  for (int t = 0; t < ST; t++)
    assert_int_equal(pthread_create(&th[t], NULL, run_own, &w[t]), 0);
  for (int t = 0; t < ST; t++)
    pthread_join(th[t], NULL);
  for (int t = 0; t < ST; t++) {
    if (w[t].err[0]) fail_msg("thread %d: %s", t, w[t].err);
    cf_executable_destroy(w[t].e);
    cf_executable_destroy(w[t].greedy);
  }
  cf_options_destroy(o);
  cf_options_destroy(small);
  cf_graph_destroy(g);
  cf_context_set_log(ctx, NULL, NULL);
}

/* ---- a message read by a thread that did not fail ---- */

typedef struct failer {
  cf_context *c;
  const char *op;
} failer;

static void *fail_once(void *arg) {
  failer *f = arg;
  cf_graph *g = NULL;
  if (!cf_graph_create(f->c, "h", 1, &g)) cf_graph_add_op(g, f->op, "x", NULL, 0);
  cf_graph_destroy(g);
  return NULL;
}

/* cf_launcher_find: the shm world's launcher table, from given variables */
static void test_launcher_find(void **state) {
  (void)state;
  cf_context *c;
  assert_int_equal(cf_context_create(&c), CF_OK);
  const char *name;
  int rank, size, local, mpi;
  const char *none[] = {"RANK=1", "PATH=/bin", NULL}; /* no size: no launcher */
  assert_int_equal(cf_launcher_find(c, none, &name, &rank, &size, &local, &mpi), CF_OK);
  assert_null(name);
  assert_int_equal(mpi, 0);
  const char *slurm[] = {"SLURM_PROCID=3", "SLURM_NTASKS=4", NULL};
  assert_int_equal(cf_launcher_find(c, slurm, &name, &rank, &size, &local, &mpi), CF_OK);
  assert_string_equal(name, "srun");
  assert_int_equal(rank, 3);
  assert_int_equal(size, 4);
  assert_int_equal(local, -1);
  /* torch's variables set from mpirun's (as ddp_train.py does): torchrun
   * comes first in the table, and an MPI world can still join */
  const char *both[] = {"RANKS=9", "OMPI_COMM_WORLD_RANK=1", "OMPI_COMM_WORLD_SIZE=2", "RANK=1",
                        "WORLD_SIZE=2", "LOCAL_WORLD_SIZE=2", NULL};
  assert_int_equal(cf_launcher_find(c, both, &name, &rank, &size, &local, &mpi), CF_OK);
  assert_string_equal(name, "torchrun");
  assert_int_equal(rank, 1);
  assert_int_equal(local, 2);
  assert_int_equal(mpi, 1);
  const char *bad[] = {"PMI_RANK=x", "PMI_SIZE=2", NULL};
  assert_int_equal(cf_launcher_find(c, bad, &name, &rank, &size, &local, &mpi), CF_ERR_USAGE);
  assert_null(name);
  assert_non_null(strstr(cf_context_errmsg(c), "PMI_RANK=x, PMI_SIZE=2 are not integers (set by mpiexec)"));
  cf_context_destroy(c);
}

static void test_handed_over(void **state) {
  (void)state;
  cf_context *c;
  assert_int_equal(cf_context_create(&c), CF_OK);
  assert_string_equal(cf_context_errmsg(c), "");
  pthread_t t;
  failer a = {c, "Nope"}, b = {c, "Neither"};
  assert_int_equal(pthread_create(&t, NULL, fail_once, &a), 0);
  pthread_join(t, NULL);
  /* this thread has not failed on c: it reads the other thread's message */
  assert_non_null(strstr(cf_context_errmsg(c), "unknown op 'Nope'"));
  assert_int_equal(pthread_create(&t, NULL, fail_once, &b), 0);
  pthread_join(t, NULL);
  assert_non_null(strstr(cf_context_errmsg(c), "unknown op 'Neither'")); /* the newest */
  /* once it fails itself, its own message is what it reads */
  cf_graph *g;
  assert_int_equal(cf_graph_create(c, "mine", 1, &g), CF_OK);
  assert_int_equal(cf_graph_add_op(g, "Mine", "x", NULL, 0), CF_ERR_INVALID);
  assert_int_equal(pthread_create(&t, NULL, fail_once, &a), 0);
  pthread_join(t, NULL);
  assert_non_null(strstr(cf_context_errmsg(c), "unknown op 'Mine'"));
  cf_graph_destroy(g);
  cf_context_destroy(c);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_version),
      cmocka_unit_test(test_null_safety),
      cmocka_unit_test(test_build_errors),
      cmocka_unit_test(test_build_alltoall_permute),
      cmocka_unit_test(test_build_constant_opaque),
      cmocka_unit_test(test_options),
      cmocka_unit_test(test_options_profile),
      cmocka_unit_test(test_pipeline_and_inspection),
      cmocka_unit_test(test_o0_agrees),
      cmocka_unit_test(test_run_dp),
      cmocka_unit_test(test_run_tp_in_place),
      cmocka_unit_test(test_run_copies),
      cmocka_unit_test(test_bucket_views),
      cmocka_unit_test(test_stale_executable),
      cmocka_unit_test(test_memory),
      cmocka_unit_test(test_run_partitioned_group),
      cmocka_unit_test(test_deterministic),
      cmocka_unit_test(test_log),
      cmocka_unit_test(test_two_contexts_two_threads),
      cmocka_unit_test(test_threads_share_a_context),
      cmocka_unit_test(test_handed_over),
      cmocka_unit_test(test_launcher_find),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
