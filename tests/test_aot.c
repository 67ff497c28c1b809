/* test_aot.c - unit tests of codegen/aot.c: the exact list of kernels each
 * example graph needs (and the same list after fusion), the rule for
 * groups above 8 ranks, of one rank and for quantized matmuls; and the
 * four emitters, checked by content (IR "define"s, assembly labels, ELF
 * magic and symbols, PTX ".entry" for sm_90, assembled by ptxas when it
 * is installed), on an empty list too, with atomic replacement and clean
 * failures. */
#include "cf_test.h"

#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "codegen/codegen.h"
#include "ir/ir.h"
#include "passes/passes.h"

#define K_NARY(dt, r, a)                                                                           \
  { .kind = CF_K_NARY, .dtype = CF_DT_##dt, .red = CF_RED_##r, .arity = a }
#define K_ACC(dt, r)                                                                               \
  { .kind = CF_K_ACC, .dtype = CF_DT_##dt, .red = CF_RED_##r }
#define K_SCALE(dt)                                                                                \
  { .kind = CF_K_SCALE, .dtype = CF_DT_##dt, .red = CF_RED_SUM }
#define K_QUANT(dt)                                                                                \
  { .kind = CF_K_QUANT, .dtype = CF_DT_##dt, .red = CF_RED_SUM }

static cf_graph *load_example(const char *name) {
  char path[1024];
  snprintf(path, sizeof path, "%s/examples/%s", CF_SOURCE_DIR, name);
  cf_graph *g;
  if (cf_graph_load(ctx, path, &g) != CF_OK) fail_msg("%s", cf_context_errmsg(ctx));
  if (cf_graph_verify(g, NULL) != CF_OK) fail_msg("%s", cf_context_errmsg(ctx));
  return g;
}

static cf_graph *parse(const char *text) {
  cf_graph *g;
  if (cf_graph_parse(ctx, "mem.xml", text, strlen(text), &g) != CF_OK)
    fail_msg("%s", cf_context_errmsg(ctx));
  return g;
}

static void print_keys(const char *what, const cf_kernel_key *k, int n) {
  char name[96];
  print_message("%s (%d):", what, n);
  for (int i = 0; i < n; i++)
    print_message(" %s", cf_kernel_name(&k[i], name, sizeof name));
  print_message("\n");
}

/* g needs exactly want[0..n) in that order */
static void expect_keys(cf_graph *g, const cf_kernel_key *want, int n) {
  cf_kernel_key *keys = (cf_kernel_key *)1;
  int got = -1;
  if (cf_codegen_graph_kernels(g, &keys, &got) != CF_OK) fail_msg("%s", cf_context_errmsg(ctx));
  bool same = got == n;
  for (int i = 0; same && i < n; i++)
    same = keys[i].kind == want[i].kind && keys[i].dtype == want[i].dtype &&
           keys[i].red == want[i].red && keys[i].arity == want[i].arity;
  if (!same) {
    print_keys("expected", want, n);
    print_keys("got", keys, got);
    free(keys);
    fail_msg("%s: kernel list differs", g->name);
  }
  if (n == 0) assert_null(keys);
  free(keys);
}

static void test_examples(void **state) {
  (void)state;
  /* world 8: float32 means, bfloat16 sums over the 4 even ranks, an int32 max */
  static const cf_kernel_key dp[] = {
      K_NARY(INT32, MAX, 8), K_NARY(BFLOAT16, SUM, 4), K_NARY(FLOAT32, MEAN, 8), K_ACC(INT32, MAX),
      K_ACC(BFLOAT16, SUM),  K_ACC(FLOAT32, SUM),      K_SCALE(FLOAT32)};
  static const cf_kernel_key tp_block[] = {K_NARY(BFLOAT16, SUM, 8), K_NARY(FLOAT32, MEAN, 8),
                                           K_ACC(BFLOAT16, SUM), K_ACC(FLOAT32, SUM),
                                           K_SCALE(FLOAT32)};
  static const cf_kernel_key tp_mlp[] = {K_NARY(FLOAT32, SUM, 4), K_ACC(FLOAT32, SUM)};
  static const cf_kernel_key quant[] = {K_NARY(BFLOAT16, SUM, 8), K_ACC(BFLOAT16, SUM),
                                        K_QUANT(BFLOAT16)};
  static const cf_kernel_key fused[] = {K_NARY(BFLOAT16, SUM, 4), K_NARY(FLOAT32, MEAN, 4),
                                        K_ACC(BFLOAT16, SUM), K_ACC(FLOAT32, SUM),
                                        K_SCALE(FLOAT32)};
  static const cf_kernel_key reduce[] = {K_NARY(FLOAT32, SUM, 4), K_ACC(FLOAT32, SUM)};
  static const struct {
    const char *file;
    const cf_kernel_key *keys;
    int n;
  } cases[] = {
      {"dp_gradients.xml", dp, 7},     {"tp_block.xml", tp_block, 5},
      {"tp_mlp.xml", tp_mlp, 2},       {"quant_mmrs.xml", quant, 3},
      {"fused_buckets.xml", fused, 5}, {"reduce_root.xml", reduce, 2},
      {"broadcast.xml", NULL, 0},      {"allgather_layouts.xml", NULL, 0},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    cf_graph *g = load_example(cases[i].file);
    expect_keys(g, cases[i].keys, cases[i].n);
    /* fusion groups only equal dtype, reduction and group: same kernels */
    assert_int_equal(cf_passes_run(g, cf_pipeline_default, NULL, NULL, NULL), CF_OK);
    expect_keys(g, cases[i].keys, cases[i].n);
    cf_graph_destroy(g);
  }
}

static void test_rule(void **state) {
  (void)state;
  /* above 8 ranks: fold with one 8-ary pass, so a mean's fold is a sum */
  cf_graph *g =
      parse("<graph name='w16' world_size='16'>\n"
            "<node name='x' op='Input' dtype='float32' shape='8'/>\n"
            "<node name='y' op='Input' dtype='int8' shape='32'/>\n"
            "<node name='a' op='AllReduce' reduction='mean'><input ref='x'/></node>\n"
            "<node name='b' op='ReduceScatter' reduction='max'><input ref='y'/></node>\n"
            "<node name='c' op='Reduce' reduction='prod' root='3'><input ref='y'/></node>\n"
            "<node name='o1' op='Output'><input ref='a'/></node>\n"
            "<node name='o2' op='Output'><input ref='b'/></node>\n"
            "<node name='o3' op='Output'><input ref='c'/></node>\n"
            "</graph>\n");
  static const cf_kernel_key w16[] = {
      K_NARY(INT8, MAX, 8), K_NARY(INT8, PROD, 8), K_NARY(FLOAT32, SUM, 8), K_ACC(INT8, MAX),
      K_ACC(INT8, PROD),    K_ACC(FLOAT32, SUM),   K_SCALE(FLOAT32)};
  expect_keys(g, w16, 7);
  cf_graph_destroy(g);

  /* a group of one rank combines nothing; rank_size picks the arity;
   * AllGather and Broadcast never reduce */
  g = parse("<graph name='small' world_size='8'>\n"
            "<group name='solo' ranks='5'/>\n"
            "<node name='x' op='Input' dtype='float16' shape='8'/>\n"
            "<node name='a' op='AllReduce' group='solo'><input ref='x'/></node>\n"
            "<node name='b' op='AllReduce' reduction='min' rank_size='8'><input ref='x'/></node>\n"
            "<node name='c' op='AllGather'><input ref='x'/></node>\n"
            "<node name='d' op='Broadcast' root='0'><input ref='x'/></node>\n"
            "<node name='o1' op='Output'><input ref='a'/></node>\n"
            "<node name='o2' op='Output'><input ref='b'/></node>\n"
            "<node name='o3' op='Output'><input ref='c'/></node>\n"
            "<node name='o4' op='Output'><input ref='d'/></node>\n"
            "</graph>\n");
  static const cf_kernel_key small[] = {K_NARY(FLOAT16, MIN, 8), K_ACC(FLOAT16, MIN)};
  expect_keys(g, small, 2);
  cf_graph_destroy(g);

  /* a QuantMatMul needs its epilogue; a float MatmulAllReduce sums */
  g = parse("<graph name='mm' world_size='2'>\n"
            "<node name='x1' op='Input' dtype='int8' shape='4,16'/>\n"
            "<node name='x2' op='Input' dtype='int8' shape='16,8'/>\n"
            "<node name='s1' op='Input' dtype='float32' shape='4,1'/>\n"
            "<node name='s2' op='Input' dtype='float32' shape='1,8'/>\n"
            "<node name='q' op='QuantMatMul' output_dtype='float16'>"
            "<input ref='x1'/><input ref='x2'/><input ref='s1'/><input ref='s2'/></node>\n"
            "<node name='a' op='Input' dtype='float16' shape='4,16'/>\n"
            "<node name='b' op='Input' dtype='float16' shape='16,8'/>\n"
            "<node name='mar' op='MatmulAllReduce' world_size='2'>"
            "<input ref='a'/><input ref='b'/></node>\n"
            "<node name='o1' op='Output'><input ref='q'/></node>\n"
            "<node name='o2' op='Output'><input ref='mar'/></node>\n"
            "</graph>\n");
  static const cf_kernel_key mm[] = {K_NARY(FLOAT16, SUM, 2), K_ACC(FLOAT16, SUM),
                                     K_QUANT(FLOAT16)};
  expect_keys(g, mm, 3);
  cf_graph_destroy(g);
}

static void test_graph_kernels_args(void **state) {
  (void)state;
  cf_kernel_key *keys = (cf_kernel_key *)1;
  int n = 7;
  assert_int_equal(cf_codegen_graph_kernels(NULL, &keys, &n), CF_ERR_USAGE);
  assert_null(keys);
  assert_int_equal(n, 0);
  cf_graph *g = load_example("tp_mlp.xml");
  assert_int_equal(cf_codegen_graph_kernels(g, NULL, &n), CF_ERR_USAGE);
  assert_int_equal(cf_codegen_graph_kernels(g, &keys, NULL), CF_ERR_USAGE);
  cf_graph_destroy(g);
}

/* ---- emitters ---- */

typedef struct file {
  char *data;
  size_t size;
} file;

static file slurp(const char *path) {
  file f = {0};
  FILE *fp = fopen(path, "rb");
  if (!fp) fail_msg("cannot read %s", path);
  fseek(fp, 0, SEEK_END);
  long n = ftell(fp);
  rewind(fp);
  f.data = malloc((size_t)n + 1);
  assert_non_null(f.data);
  f.size = fread(f.data, 1, (size_t)n, fp);
  f.data[f.size] = 0;
  fclose(fp);
  return f;
}

static bool contains(const file *f, const char *s) {
  size_t n = strlen(s);
  for (size_t i = 0; i + n <= f->size; i++)
    if (memcmp(f->data + i, s, n) == 0) return true;
  return false;
}

static void expect_contains(const file *f, const char *path, const char *s) {
  if (!contains(f, s)) fail_msg("%s lacks '%s'", path, s);
}

static const char *ptxas_path(void) {
  static const char *const cands[] = {"/usr/local/cuda/bin/ptxas", "/usr/bin/ptxas"};
  for (size_t i = 0; i < sizeof cands / sizeof cands[0]; i++)
    if (access(cands[i], X_OK) == 0) return cands[i];
  return NULL;
}

/* ptxas assembles path for sm_90; false with its output on failure */
static bool ptxas_ok(const char *ptxas, const char *dir, const char *path) {
  char cmd[4096];
  snprintf(cmd, sizeof cmd, "'%s' -arch=sm_90 '%s' -o '%s/out.cubin' >'%s/ptxas.log' 2>&1", ptxas,
           path, dir, dir);
  int rc = system(cmd);
  if (rc != 0) {
    char log[1100];
    snprintf(log, sizeof log, "%s/ptxas.log", dir);
    file f = slurp(log);
    print_message("ptxas: %s\n", f.data);
    free(f.data);
  }
  char cubin[1100];
  snprintf(cubin, sizeof cubin, "%s/out.cubin", dir);
  remove(cubin);
  snprintf(cubin, sizeof cubin, "%s/ptxas.log", dir);
  remove(cubin);
  return rc == 0;
}

typedef struct emit_fixture {
  char dir[64];
} emit_fixture;

static int emit_setup(void **state) {
  emit_fixture *fx = calloc(1, sizeof *fx);
  if (!fx) return -1;
  snprintf(fx->dir, sizeof fx->dir, "/tmp/cf-aot-XXXXXX");
  if (!mkdtemp(fx->dir)) return free(fx), -1;
  *state = fx;
  return 0;
}

static int emit_teardown(void **state) {
  emit_fixture *fx = *state;
  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", fx->dir);
  int rc = system(cmd);
  free(fx);
  return rc == 0 ? 0 : -1;
}

static void test_emit_formats(void **state) {
  emit_fixture *fx = *state;
  cf_graph *g = load_example("dp_gradients.xml");
  cf_kernel_key *keys;
  int n;
  assert_int_equal(cf_codegen_graph_kernels(g, &keys, &n), CF_OK);
  assert_int_equal(n, 7);
  static const char *const ext[] = {"ll", "s", "o", "ptx"};
  for (int fmt = CF_EMIT_LLVM; fmt <= CF_EMIT_PTX; fmt++) {
    char path[256], tmp[264], name[96];
    snprintf(path, sizeof path, "%s/dp.%s", fx->dir, ext[fmt]);
    if (cf_codegen_emit(ctx, keys, n, (cf_emit_format)fmt, path) != CF_OK)
      fail_msg("%s: %s", path, cf_context_errmsg(ctx));
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    assert_int_equal(access(tmp, F_OK), -1); /* renamed into place */
    file f = slurp(path);
    switch (fmt) {
    case CF_EMIT_LLVM:
      expect_contains(&f, path, "define ");
      expect_contains(&f, path, "target triple");
      break;
    case CF_EMIT_OBJ:
      assert_true(f.size > 4 && memcmp(f.data,
                                       "\x7f"
                                       "ELF",
                                       4) == 0);
      break;
    case CF_EMIT_PTX:
      expect_contains(&f, path, ".target sm_90");
      expect_contains(&f, path, ".entry");
      expect_contains(&f, path, ".address_size 64");
      break;
    default: break;
    }
    /* every kernel, by name, in every format (the object's symbol table) */
    for (int i = 0; i < n; i++)
      expect_contains(&f, path, cf_kernel_name(&keys[i], name, sizeof name));
    free(f.data);
  }
  free(keys);
  cf_graph_destroy(g);
}

/* A graph without reducing collectives: every format is a valid empty module. */
static void test_emit_empty(void **state) {
  emit_fixture *fx = *state;
  static const char *const ext[] = {"ll", "s", "o", "ptx"};
  for (int fmt = CF_EMIT_LLVM; fmt <= CF_EMIT_PTX; fmt++) {
    char path[256];
    snprintf(path, sizeof path, "%s/empty.%s", fx->dir, ext[fmt]);
    if (cf_codegen_emit(ctx, NULL, 0, (cf_emit_format)fmt, path) != CF_OK)
      fail_msg("%s: %s", path, cf_context_errmsg(ctx));
    file f = slurp(path);
    if (fmt == CF_EMIT_LLVM) {
      expect_contains(&f, path, "target triple");
      assert_false(contains(&f, "define "));
    }
    if (fmt == CF_EMIT_OBJ)
      assert_true(f.size > 4 && memcmp(f.data,
                                       "\x7f"
                                       "ELF",
                                       4) == 0);
    if (fmt == CF_EMIT_PTX) {
      expect_contains(&f, path, ".target sm_90");
      assert_false(contains(&f, ".entry"));
    }
    free(f.data);
  }
}

/* ptxas (CUDA's assembler, no GPU needed) accepts the PTX for sm_90: every
 * kernel dp_gradients and quant_mmrs need, and the empty module. */
static void test_ptxas(void **state) {
  emit_fixture *fx = *state;
  const char *ptxas = ptxas_path();
  if (!ptxas) {
    print_message("ptxas not found (/usr/local/cuda/bin/ptxas): PTX not assembled\n");
    skip();
  }
  static const char *const graphs[] = {"dp_gradients.xml", "quant_mmrs.xml", NULL};
  for (int i = 0; i < 3; i++) {
    cf_kernel_key *keys = NULL;
    int n = 0;
    cf_graph *g = graphs[i] ? load_example(graphs[i]) : NULL;
    if (g) assert_int_equal(cf_codegen_graph_kernels(g, &keys, &n), CF_OK);
    char path[256];
    snprintf(path, sizeof path, "%s/k%d.ptx", fx->dir, i);
    if (cf_codegen_emit(ctx, keys, n, CF_EMIT_PTX, path) != CF_OK)
      fail_msg("%s: %s", path, cf_context_errmsg(ctx));
    if (!ptxas_ok(ptxas, fx->dir, path))
      fail_msg("ptxas rejected the PTX for %s", graphs[i] ? graphs[i] : "no kernels");
    free(keys);
    cf_graph_destroy(g);
  }
}

static void test_emit_errors(void **state) {
  emit_fixture *fx = *state;
  char path[256], tmp[264];
  cf_kernel_key bad = {.kind = CF_K_NARY, .dtype = CF_DT_FLOAT32, .red = CF_RED_SUM, .arity = 9};
  snprintf(path, sizeof path, "%s/bad.ll", fx->dir);
  ASSERT_ERR(cf_codegen_emit(ctx, &bad, 1, CF_EMIT_LLVM, path), CF_ERR_USAGE, "arity 9");
  assert_int_equal(access(path, F_OK), -1);
  ASSERT_ERR(cf_codegen_emit(ctx, NULL, 2, CF_EMIT_LLVM, path), CF_ERR_USAGE, "bad arguments");
  ASSERT_ERR(cf_codegen_emit(ctx, NULL, 0, (cf_emit_format)7, path), CF_ERR_USAGE, "bad arguments");
  assert_int_equal(cf_codegen_emit(NULL, NULL, 0, CF_EMIT_LLVM, path), CF_ERR_USAGE);

  /* a missing directory: an error naming the file, nothing left behind */
  cf_kernel_key k = {.kind = CF_K_ACC, .dtype = CF_DT_FLOAT32, .red = CF_RED_SUM};
  snprintf(path, sizeof path, "%s/no-such-dir/k.o", fx->dir);
  ASSERT_ERR(cf_codegen_emit(ctx, &k, 1, CF_EMIT_OBJ, path), CF_ERR_IO, "cannot write");
  assert_non_null(strstr(cf_context_errmsg(ctx), "no-such-dir/k.o"));
  /* a directory in the way */
  ASSERT_ERR(cf_codegen_emit(ctx, &k, 1, CF_EMIT_ASM, fx->dir), CF_ERR_IO, "is a directory");

  /* an existing file is replaced whole */
  snprintf(path, sizeof path, "%s/old.ll", fx->dir);
  FILE *f = fopen(path, "w");
  assert_non_null(f);
  fputs("old contents\n", f);
  fclose(f);
  assert_int_equal(cf_codegen_emit(ctx, &k, 1, CF_EMIT_LLVM, path), CF_OK);
  file got = slurp(path);
  assert_false(contains(&got, "old contents"));
  expect_contains(&got, path, "cf_acc_sum_float32");
  free(got.data);
  snprintf(tmp, sizeof tmp, "%s.tmp", path);
  assert_int_equal(access(tmp, F_OK), -1);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_examples),
      cmocka_unit_test(test_rule),
      cmocka_unit_test(test_graph_kernels_args),
      cmocka_unit_test_setup_teardown(test_emit_formats, emit_setup, emit_teardown),
      cmocka_unit_test_setup_teardown(test_emit_empty, emit_setup, emit_teardown),
      cmocka_unit_test_setup_teardown(test_ptxas, emit_setup, emit_teardown),
      cmocka_unit_test_setup_teardown(test_emit_errors, emit_setup, emit_teardown),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
