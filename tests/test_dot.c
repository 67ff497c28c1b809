/* test_dot.c - unit tests for frontend/dot.c (cf_dot_write): DOT, SVG and PNG
 * drawings of a graph with plain, fused and fused-matmul collectives, the
 * error paths, and a byte-for-byte golden DOT file.
 *
 * Registered in tests/CMakeLists.txt as `add_executable(test_dot test_dot.c)`,
 * linked to collfuse_static and cmocka, labelled `unit`.
 * Set CF_UPDATE_GOLDEN=1 to rewrite tests/golden/dot/small.dot after an
 * intended change of the drawing (and review the diff).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "frontend/frontend.h"

#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#ifndef CF_SOURCE_DIR
#define CF_SOURCE_DIR "."
#endif

/* Under LeakSanitizer: graphviz 2.42's dot layout, its pango plugin and
 * fontconfig leak on every layout (a bare gvContext/gvLayout/gvRender/free
 * program leaks ~23 KB). Only stacks through those libraries are ignored; a
 * leak of ours in cf_dot_write's own allocations is still reported. */
const char *__lsan_default_suppressions(void);
__attribute__((used)) const char *__lsan_default_suppressions(void) {
  return "leak:libgvc.so\nleak:libgvplugin_pango.so\nleak:libfontconfig.so\nleak:libpango\n";
}

typedef struct fixture {
  cf_context *ctx;
  cf_graph *g;
  char dir[64];
} fixture;

/* ---- graph building ---- */

static int add(cf_graph *g, const char *name, cf_op op) {
  int idx = -1;
  assert_int_equal(cf_graph_add_node(g, name, op, 0, &idx), CF_OK);
  return idx;
}

static void attr(cf_graph *g, int node, cf_attr_id id, const char *text) {
  assert_int_equal(cf_node_parse_attr(g, node, id, text, 0), CF_OK);
}

static int input(cf_graph *g, const char *name, const char *dtype, const char *shape) {
  int n = add(g, name, CF_OP_INPUT);
  attr(g, n, CF_A_DTYPE, dtype);
  attr(g, n, CF_A_SHAPE, shape);
  return n;
}

static void inputs(cf_graph *g, int node, int n, const cf_ref *refs) {
  assert_int_equal(cf_node_set_inputs(g, node, n, refs), CF_OK);
}

static void finish(cf_graph *g) {
  assert_int_equal(cf_verify_structure(g), CF_OK);
  assert_int_equal(cf_infer(g), CF_OK);
}

/* Inputs, an AllReduce, a FusedAllReduce of a and b (fusion_id 7), a
 * MatmulReduceScatter over 2 ranks and an AllGather of its result. */
static cf_graph *build_small(cf_context *ctx) {
  cf_graph *g = NULL;
  assert_int_equal(cf_graph_new(ctx, "small.xml", &g), CF_OK);
  g->name = "small";
  g->world_size = 2;
  int x = input(g, "x", "float32", "4,8");
  int ar = add(g, "ar", CF_OP_ALLREDUCE);
  attr(g, ar, CF_A_REDUCTION, "mean");
  inputs(g, ar, 1, (cf_ref[]){{x, 0}});

  int a = input(g, "grad_a", "float32", "16,32"); /* 2048 bytes */
  int b = input(g, "grad_b", "float32", "256");   /* 1024 bytes */
  int fu = add(g, "bucket_0", CF_OP_FUSEDALLREDUCE);
  attr(g, fu, CF_A_MEMBERS, "a,b");
  attr(g, fu, CF_A_FUSION_ID, "7");
  inputs(g, fu, 2, (cf_ref[]){{a, 0}, {b, 0}});

  int x1 = input(g, "x1", "float32", "8,16");
  int x2 = input(g, "x2", "float32", "16,4");
  int mm = add(g, "mmrs", CF_OP_MATMULREDUCESCATTER);
  attr(g, mm, CF_A_WORLD_SIZE, "2");
  inputs(g, mm, 2, (cf_ref[]){{x1, 0}, {x2, 0}});
  int ag = add(g, "ag", CF_OP_ALLGATHER);
  inputs(g, ag, 1, (cf_ref[]){{mm, 0}});

  const struct {
    const char *name;
    int node, port;
  } outs[] = {{"out_ar", ar, 0}, {"out_a", fu, 0}, {"out_b", fu, 1}, {"out_ag", ag, 0}};
  for (size_t i = 0; i < sizeof outs / sizeof outs[0]; i++) {
    int o = add(g, outs[i].name, CF_OP_OUTPUT);
    inputs(g, o, 1, (cf_ref[]){{outs[i].node, outs[i].port}});
  }
  finish(g);
  return g;
}

/* ---- file helpers ---- */

static char *slurp(const char *path, size_t *size) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  char *buf = malloc((size_t)n + 1);
  assert_non_null(buf);
  assert_int_equal(fread(buf, 1, (size_t)n, f), (size_t)n);
  buf[n] = 0;
  fclose(f);
  if (size) *size = (size_t)n;
  return buf;
}

static void join(char *out, size_t len, const char *dir, const char *name) {
  snprintf(out, len, "%s/%s", dir, name);
}

static bool exists(const char *path) {
  struct stat st;
  return stat(path, &st) == 0;
}

static int setup(void **state) {
  fixture *fx = calloc(1, sizeof *fx);
  assert_non_null(fx);
  assert_int_equal(cf_context_create(&fx->ctx), CF_OK);
  fx->g = build_small(fx->ctx);
  snprintf(fx->dir, sizeof fx->dir, "/tmp/cf_test_dot_XXXXXX");
  assert_non_null(mkdtemp(fx->dir));
  *state = fx;
  return 0;
}

static int teardown(void **state) {
  fixture *fx = *state;
  const char *names[] = {"g.dot", "g.svg", "g.png", "g.dot.tmp", "small.dot", "again.dot", "x.bmp"};
  char path[128];
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
    join(path, sizeof path, fx->dir, names[i]);
    remove(path);
  }
  rmdir(fx->dir);
  cf_graph_destroy(fx->g);
  cf_context_destroy(fx->ctx);
  free(fx);
  return 0;
}

/* ---- tests ---- */

static void test_dot_contents(void **state) {
  fixture *fx = *state;
  char path[128];
  join(path, sizeof path, fx->dir, "g.dot");
  assert_int_equal(cf_dot_write(fx->g, path, "dot"), CF_OK);
  char *s = slurp(path, NULL);
  assert_non_null(s);
  assert_non_null(strstr(s, "digraph small {"));
  /* the fused AllReduce is a cluster with its members, bytes and reason */
  assert_non_null(strstr(s, "subgraph cluster_bucket_0 {"));
  assert_non_null(strstr(s, "FusedAllReduce bucket_0: 2 members, 3.0 KiB (fusion_id=7)"));
  assert_non_null(strstr(s, "\"bucket_0/a\""));
  assert_non_null(strstr(s, "\"bucket_0/b\""));
  assert_non_null(strstr(s, "label=\"a\\nfloat32 [16,32]\""));
  assert_non_null(strstr(s, "label=\"b\\nfloat32 [256]\""));
  /* the fused matmul is a cluster of its matmul and collective parts */
  assert_non_null(strstr(s, "subgraph cluster_mmrs {"));
  assert_non_null(strstr(s, "MatmulReduceScatter mmrs: 128 B, world_size=2"));
  assert_non_null(strstr(s, "\"mmrs/matmul\" -> \"mmrs/ReduceScatter\""));
  assert_non_null(strstr(s, "x1 -> \"mmrs/matmul\""));
  assert_non_null(strstr(s, "\"mmrs/ReduceScatter\" -> ag"));
  /* op, dtype and shape of plain nodes; AllReduce colour; member edges and ports */
  assert_non_null(strstr(s, "label=\"ar\\nAllReduce mean\\nfloat32 [4,8]\""));
  assert_non_null(strstr(s, "fillcolor=\"#9ec5fe\""));
  assert_non_null(strstr(s, "label=\"ag\\nAllGather stack\\nfloat32 [2,4,4]\""));
  assert_non_null(strstr(s, "grad_a -> \"bucket_0/a\""));
  assert_non_null(strstr(s, "\"bucket_0/b\" -> out_b"));
  assert_non_null(strstr(s, "label=p1"));
  assert_null(strstr(s, "label=p0\n")); /* single-output sources carry no port label */
  free(s);
  join(path, sizeof path, fx->dir, "g.dot.tmp");
  assert_false(exists(path));
}

/* A new empty graph of world ranks in a new context (*ctx). */
static cf_graph *new_graph(cf_context **ctx, int world) {
  cf_graph *g = NULL;
  assert_int_equal(cf_context_create(ctx), CF_OK);
  assert_int_equal(cf_graph_new(*ctx, NULL, &g), CF_OK);
  g->world_size = world;
  return g;
}

/* cf_dot_write g as DOT to dir/file (dir a mkdtemp template, created here);
 * the file's text, to free. */
static char *draw(cf_graph *g, char *dir, const char *file) {
  char path[128];
  assert_non_null(mkdtemp(dir));
  join(path, sizeof path, dir, file);
  assert_int_equal(cf_dot_write(g, path, "dot"), CF_OK);
  char *s = slurp(path, NULL);
  assert_non_null(s);
  return s;
}

/* AllToAll and CollectivePermute: their own colours, their dims and pairs
 * in the label. */
static void test_alltoall_permute(void **state) {
  (void)state;
  cf_context *ctx = NULL;
  cf_graph *g = new_graph(&ctx, 2);
  char dir[] = "/tmp/cf_test_dot_XXXXXX", path[128];
  int x = input(g, "x", "float32", "4,2");
  int a = add(g, "a", CF_OP_ALLTOALL), p = add(g, "p", CF_OP_COLLECTIVEPERMUTE);
  attr(g, a, CF_A_SPLIT_DIMENSION, "0");
  attr(g, a, CF_A_CONCAT_DIMENSION, "1");
  attr(g, p, CF_A_SOURCE_TARGET_PAIRS, "{0,1}");
  inputs(g, a, 1, (cf_ref[]){{x, 0}});
  inputs(g, p, 1, (cf_ref[]){{a, 0}});
  int y = add(g, "y", CF_OP_OUTPUT);
  inputs(g, y, 1, (cf_ref[]){{p, 0}});
  finish(g);
  char *s = draw(g, dir, "a2a.dot");
  assert_non_null(strstr(s, "label=\"a\\nAllToAll split=0 concat=1\\nfloat32 [2,4]\""));
  assert_non_null(strstr(s, "label=\"p\\nCollectivePermute pairs={0,1}\\nfloat32 [2,4]\""));
  assert_non_null(strstr(s, "fillcolor=\"#a2e3e3\""));
  assert_non_null(strstr(s, "fillcolor=\"#f7b5d9\""));
  assert_null(strstr(s, "dashed"));
  free(s);
  /* a control dependency: a dashed edge labelled after */
  assert_int_equal(cf_node_add_control(g, y, a), CF_OK);
  finish(g);
  join(path, sizeof path, dir, "a2a.dot");
  assert_int_equal(cf_dot_write(g, path, "dot"), CF_OK);
  s = slurp(path, NULL);
  assert_non_null(s);
  assert_non_null(strstr(s, "a -> y\t[label=after,\n\t\tstyle=dashed]"));
  free(s);
  join(path, sizeof path, dir, "a2a.dot");
  remove(path);
  rmdir(dir);
  cf_graph_destroy(g);
  cf_context_destroy(ctx); /* new_graph makes another */
  /* a FusedAllToAll: a cluster of its members, with the dims they share */
  g = new_graph(&ctx, 2);
  x = input(g, "x", "float32", "4,2");
  int z = input(g, "z", "int8", "2,3");
  int f = add(g, "f", CF_OP_FUSEDALLTOALL);
  attr(g, f, CF_A_MEMBERS, "a,b");
  attr(g, f, CF_A_REASON, "split");
  attr(g, f, CF_A_CONCAT_DIMENSION, "1");
  inputs(g, f, 2, (cf_ref[]){{x, 0}, {z, 0}});
  y = add(g, "y", CF_OP_OUTPUT);
  inputs(g, y, 1, (cf_ref[]){{f, 1}});
  finish(g);
  char dir2[] = "/tmp/cf_test_dot_XXXXXX";
  s = draw(g, dir2, "fa2a.dot");
  assert_non_null(strstr(s, "FusedAllToAll f: 2 members, 38 B (split)\\nsplit=0 concat=1"));
  assert_non_null(strstr(s, "label=\"b\\nint8 [1,6]\""));
  free(s);
  join(path, sizeof path, dir2, "fa2a.dot");
  remove(path);
  rmdir(dir2);
  cf_graph_destroy(g);
  cf_context_destroy(ctx);
}

/* Same graph, same bytes: the id discipline keeps cluster order fixed. */
static void test_dot_deterministic(void **state) {
  fixture *fx = *state;
  char p1[128], p2[128];
  join(p1, sizeof p1, fx->dir, "g.dot");
  join(p2, sizeof p2, fx->dir, "again.dot");
  assert_int_equal(cf_dot_write(fx->g, p1, "dot"), CF_OK);
  void *noise[64]; /* disturb the heap between the two writes */
  for (int i = 0; i < 64; i++)
    noise[i] = malloc((size_t)(i * 37 % 200 + 1));
  for (int i = 0; i < 64; i += 2)
    free(noise[i]);
  assert_int_equal(cf_dot_write(fx->g, p2, "dot"), CF_OK);
  for (int i = 1; i < 64; i += 2)
    free(noise[i]);
  size_t n1, n2;
  char *a = slurp(p1, &n1), *b = slurp(p2, &n2);
  assert_non_null(a);
  assert_non_null(b);
  assert_int_equal(n1, n2);
  assert_memory_equal(a, b, n1);
  free(a);
  free(b);
}

static void test_svg(void **state) {
  fixture *fx = *state;
  char path[128];
  join(path, sizeof path, fx->dir, "g.svg");
  assert_int_equal(cf_dot_write(fx->g, path, "svg"), CF_OK);
  char *s = slurp(path, NULL);
  assert_non_null(s);
  assert_memory_equal(s, "<?xml", 5);
  assert_non_null(strstr(s, "<svg"));
  assert_non_null(strstr(s, "bucket_0/a"));
  assert_non_null(strstr(s, "cluster_bucket_0"));
  assert_non_null(strstr(s, "fill=\"#9ec5fe\""));
  free(s);
}

static void test_png(void **state) {
  fixture *fx = *state;
  char path[128];
  static const unsigned char sig[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
  join(path, sizeof path, fx->dir, "g.png");
  assert_int_equal(cf_dot_write(fx->g, path, "png"), CF_OK);
  size_t n;
  char *s = slurp(path, &n);
  assert_non_null(s);
  assert_true(n > 8);
  assert_memory_equal(s, sig, 8);
  free(s);
}

static void test_unwritable(void **state) {
  fixture *fx = *state;
  const char *formats[] = {"dot", "svg", "png"};
  for (size_t i = 0; i < 3; i++) {
    cf_status st = cf_dot_write(fx->g, "/nonexistent/dir/x.dot", formats[i]);
    assert_int_equal(st, CF_ERR_IO);
    const char *msg = cf_context_errmsg(fx->ctx);
    assert_non_null(strstr(msg, "/nonexistent/dir/x.dot"));
    assert_non_null(strstr(msg, "cannot write"));
    assert_false(exists("/nonexistent/dir/x.dot.tmp"));
  }
}

/* The final rename fails (a directory is in the way): an error naming the
 * path, and neither the target nor the temporary file is left behind. */
static void test_rename_fails(void **state) {
  fixture *fx = *state;
  char path[128], tmp[160];
  join(path, sizeof path, fx->dir, "sub.dot");
  assert_int_equal(mkdir(path, 0700), 0);
  snprintf(tmp, sizeof tmp, "%s.tmp", path);
  assert_int_equal(cf_dot_write(fx->g, path, "dot"), CF_ERR_IO);
  assert_non_null(strstr(cf_context_errmsg(fx->ctx), path));
  assert_false(exists(tmp));
  assert_int_equal(rmdir(path), 0);
}

/* A full disk, as a file size limit of 256 bytes with SIGXFSZ ignored (a
 * write past it fails with EFBIG) in a child process: every format is an
 * error naming the file, never graphviz's exit(1) (the child would end
 * with status 1 at the first SVG), and no temporary or partial file stays.
 * The child reports by exit status: 0 all as wanted, 10 + the format's
 * index a wrong status or message. */
static void test_full_disk(void **state) {
  fixture *fx = *state;
  const char *formats[] = {"dot", "svg", "png"};
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    signal(SIGXFSZ, SIG_IGN);
    struct rlimit rl = {256, 256};
    if (setrlimit(RLIMIT_FSIZE, &rl) != 0) _exit(2);
    for (int i = 0; i < 3; i++) {
      char path[128], want[200];
      snprintf(path, sizeof path, "%s/g.%s", fx->dir, formats[i]);
      snprintf(want, sizeof want, "%s: error: cannot write: %s", path, strerror(EFBIG));
      if (cf_dot_write(fx->g, path, formats[i]) != CF_ERR_IO ||
          strcmp(cf_context_errmsg(fx->ctx), want) != 0) {
        fprintf(stderr, "%s: '%s'\n", formats[i], cf_context_errmsg(fx->ctx));
        _exit(10 + i);
      }
    }
    _exit(0);
  }
  int status;
  assert_int_equal(waitpid(pid, &status, 0), pid);
  assert_true(WIFEXITED(status));
  assert_int_equal(WEXITSTATUS(status), 0);
  DIR *d = opendir(fx->dir);
  assert_non_null(d);
  for (struct dirent *e; (e = readdir(d));)
    if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) fail_msg("%s left behind", e->d_name);
  closedir(d);
}

static void test_bad_format(void **state) {
  fixture *fx = *state;
  char path[128];
  join(path, sizeof path, fx->dir, "x.bmp");
  assert_int_equal(cf_dot_write(fx->g, path, "bmp"), CF_ERR_USAGE);
  assert_non_null(strstr(cf_context_errmsg(fx->ctx), "bmp"));
  assert_false(exists(path));
}

/* A node name that looks like DOT syntax, backslashes and a '%' prefix (HLO)
 * must neither break the file nor collide with generated ids. */
static void test_odd_names(void **state) {
  (void)state;
  cf_context *ctx = NULL;
  cf_graph *g = new_graph(&ctx, 4);
  char dir[] = "/tmp/cf_test_dot_XXXXXX", path[128];
  int a = input(g, "%p.1", "float16", "8");
  int b = input(g, "a\\b \"q\" -> {x}", "float16", "8");
  int c = input(g, "f/m", "float16", "8"); /* the id a member box would get */
  int f = add(g, "f", CF_OP_FUSEDALLGATHER);
  attr(g, f, CF_A_MEMBERS, "m,m,n");
  attr(g, f, CF_A_REASON, "split");
  attr(g, f, CF_A_LAYOUT, "concat");
  inputs(g, f, 3, (cf_ref[]){{a, 0}, {b, 0}, {c, 0}});
  int o = add(g, "o", CF_OP_OUTPUT);
  inputs(g, o, 1, (cf_ref[]){{f, 2}});
  finish(g);
  char *s = draw(g, dir, "odd.dot");
  assert_non_null(strstr(s, "FusedAllGather f: 3 members, 192 B (split)\\nconcat"));
  assert_non_null(strstr(s, "\"f/m~1\""));
  assert_non_null(strstr(s, "\"f/m~2\""));
  assert_non_null(strstr(s, "\"f/n\""));
  /* cgraph leaks map entries of '%' ids (2.42): such names get a '_' prefix */
  assert_non_null(strstr(s, "\"_%p.1\" -> \"f/m~1\"\t[label=in0]"));
  assert_non_null(strstr(s, "label=\"%p.1\\nInput\\nfloat16 [8]\""));
  assert_non_null(strstr(s, "\"f/n\" -> o\t[label=p2]"));
  free(s);
  join(path, sizeof path, dir, "odd.svg"); /* graphviz must accept it too */
  assert_int_equal(cf_dot_write(g, path, "svg"), CF_OK);
  remove(path);
  join(path, sizeof path, dir, "odd.dot");
  remove(path);
  rmdir(dir);
  cf_graph_destroy(g);
  cf_context_destroy(ctx);
}

/* AllGatherMatmul gathers x1 first: x1 enters the gather part, x2 the matmul
 * part, products leave the matmul part and the gathered x1 the gather part.
 * A graph that was never inferred is refused, and nothing is written. */
static void test_allgather_matmul(void **state) {
  (void)state;
  cf_context *ctx = NULL;
  cf_graph *g = NULL;
  char dir[] = "/tmp/cf_test_dot_XXXXXX", path[128];
  assert_int_equal(cf_context_create(&ctx), CF_OK);
  assert_int_equal(cf_graph_new(ctx, NULL, &g), CF_OK);
  g->world_size = 4;
  int x1 = input(g, "x1", "bfloat16", "2,8"), x2 = input(g, "x2", "bfloat16", "8,4");
  int mm = add(g, "agmm", CF_OP_ALLGATHERMATMUL);
  attr(g, mm, CF_A_WORLD_SIZE, "4");
  attr(g, mm, CF_A_MEMBERS, "ag,mm");
  inputs(g, mm, 2, (cf_ref[]){{x1, 0}, {x2, 0}});
  int y = add(g, "y", CF_OP_OUTPUT), z = add(g, "z", CF_OP_OUTPUT);
  inputs(g, y, 1, (cf_ref[]){{mm, 0}});
  inputs(g, z, 1, (cf_ref[]){{mm, 1}});
  assert_non_null(mkdtemp(dir));
  join(path, sizeof path, dir, "agmm.dot");
  assert_int_equal(cf_dot_write(g, path, "dot"), CF_ERR_USAGE);
  assert_non_null(strstr(cf_context_errmsg(ctx), "not verified and inferred"));
  assert_false(exists(path));
  finish(g);
  assert_int_equal(cf_dot_write(g, path, "dot"), CF_OK);
  char *s = slurp(path, NULL);
  assert_non_null(s);
  assert_non_null(strstr(s, "AllGatherMatmul agmm: 128 B, world_size=4\\nfrom ag, mm"));
  assert_non_null(strstr(s, "x1 -> \"agmm/AllGather\""));
  assert_non_null(strstr(s, "x2 -> \"agmm/matmul\""));
  assert_non_null(strstr(s, "\"agmm/AllGather\" -> \"agmm/matmul\""));
  assert_non_null(strstr(s, "\"agmm/matmul\" -> y\t[label=p0]"));
  assert_non_null(strstr(s, "\"agmm/AllGather\" -> z\t[label=p1]"));
  assert_non_null(strstr(s, "label=\"MatMul\\np0: bfloat16 [8,4]\""));
  free(s);
  remove(path);
  rmdir(dir);
  cf_graph_destroy(g);
  cf_context_destroy(ctx);
}

/* The file at path is byte for byte the golden file. */
static void same_as_golden(const char *path, const char *golden) {
  size_t n_got, n_want;
  char *got = slurp(path, &n_got), *want = slurp(golden, &n_want);
  assert_non_null(got);
  if (!want) fail_msg("cannot read %s: %s", golden, strerror(errno));
  if (n_got != n_want || memcmp(got, want, n_got))
    fail_msg("%s differs from %s (CF_UPDATE_GOLDEN=1 rewrites it)", path, golden);
  free(got);
  free(want);
}

static bool updating_golden(void) {
  const char *update = getenv("CF_UPDATE_GOLDEN");
  return update && *update && strcmp(update, "0");
}

static void test_golden(void **state) {
  fixture *fx = *state;
  const char *golden = CF_SOURCE_DIR "/tests/golden/dot/small.dot";
  char path[128];
  join(path, sizeof path, fx->dir, "small.dot");
  if (updating_golden()) assert_int_equal(cf_dot_write(fx->g, golden, "dot"), CF_OK);
  assert_int_equal(cf_dot_write(fx->g, path, "dot"), CF_OK);
  same_as_golden(path, golden);
}

/* Graphs that fail verification are drawn with their errors marked: a
 * cycle's edges in red, each node an error is about with a red border and
 * the message (cf_graph_load_diags collects every error, not the first). The
 * files are read from tests/malformed by their plain names, so the messages
 * in the drawing do not depend on where the checkout is. */
static void test_golden_errors(void **state) {
  fixture *fx = *state;
  static const struct {
    const char *file;
    int n_errors;
    const char *first; /* the first error, as `check` prints it */
  } cases[] = {
      {"cycle.xml", 1, "cycle.xml:4: error: node 'a': cycle: 'a' -> 'b' -> 'c' -> 'a'"},
      {"several_errors.xml", 3,
       "several_errors.xml:7: error: node 'b': attribute 'reduction' is not allowed on Input"},
  };
  char cwd[4096];
  assert_non_null(getcwd(cwd, sizeof cwd));
  assert_int_equal(chdir(CF_SOURCE_DIR "/tests/malformed"), 0);
  for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
    cf_graph *g = NULL;
    cf_diags d = {0};
    assert_int_equal(cf_graph_load_diags(fx->ctx, cases[k].file, &g, &d), CF_ERR_INVALID);
    assert_non_null(g);
    assert_int_equal(d.n, cases[k].n_errors);
    assert_string_equal(d.v[0].msg, cases[k].first);
    assert_string_equal(cf_context_errmsg(fx->ctx), cases[k].first);
    char golden[512], name[64], path[192];
    snprintf(name, sizeof name, "%.*s.dot", (int)(strlen(cases[k].file) - 4), cases[k].file);
    snprintf(golden, sizeof golden, "%s/tests/golden/dot/%s", CF_SOURCE_DIR, name);
    join(path, sizeof path, fx->dir, name);
    if (updating_golden()) assert_int_equal(cf_graph_write_dot_diags(g, golden, &d, NULL), CF_OK);
    assert_int_equal(cf_graph_write_dot_diags(g, path, &d, NULL), CF_OK);
    same_as_golden(path, golden);
    remove(path);
    cf_diags_free(&d);
    cf_graph_destroy(g);
  }
  /* the cycle's nodes along its edges, for the drawing */
  cf_graph *g = NULL;
  cf_diags d = {0};
  assert_int_equal(cf_graph_load_diags(fx->ctx, "cycle.xml", &g, &d), CF_ERR_INVALID);
  assert_int_equal(d.v[0].n_cycle, 3);
  assert_string_equal(g->nodes[d.v[0].cycle[0]].name, "a");
  assert_string_equal(g->nodes[d.v[0].cycle[1]].name, "b");
  assert_string_equal(g->nodes[d.v[0].cycle[2]].name, "c");
  assert_string_equal(g->nodes[d.v[0].node].name, "a");
  cf_diags_free(&d);
  cf_graph_destroy(g);
  /* a file that does not parse gives no graph and no drawing */
  assert_int_equal(cf_graph_load_diags(fx->ctx, "truncated.xml", &g, &d), CF_ERR_INVALID);
  assert_null(g);
  assert_int_equal(chdir(cwd), 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_dot_contents, setup, teardown),
      cmocka_unit_test_setup_teardown(test_dot_deterministic, setup, teardown),
      cmocka_unit_test_setup_teardown(test_svg, setup, teardown),
      cmocka_unit_test_setup_teardown(test_png, setup, teardown),
      cmocka_unit_test_setup_teardown(test_unwritable, setup, teardown),
      cmocka_unit_test_setup_teardown(test_rename_fails, setup, teardown),
      cmocka_unit_test_setup_teardown(test_full_disk, setup, teardown),
      cmocka_unit_test_setup_teardown(test_bad_format, setup, teardown),
      cmocka_unit_test(test_odd_names),
      cmocka_unit_test(test_allgather_matmul),
      cmocka_unit_test(test_alltoall_permute),
      cmocka_unit_test_setup_teardown(test_golden, setup, teardown),
      cmocka_unit_test_setup_teardown(test_golden_errors, setup, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
