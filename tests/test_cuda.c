/* test_cuda.c - the CUDA device backend (executor/backends/cuda.c) and the
 * in-memory PTX it loads (codegen/aot.c: cf_codegen_ptx).
 *
 * Two groups, two ctest entries of this one executable:
 *
 *   test_cuda --ptx   (label unit, runs everywhere) PTX for sm_80 and sm_90
 *                     of every kernel key, checked for its target and each
 *                     key's entry; the whole set assembled by ptxas when
 *                     /usr/local/cuda/bin/ptxas (or $PTXAS) exists; and the
 *                     backend's answer where the driver cannot be loaded.
 *   test_cuda         (label gpu) every n-ary (dtype x reduction x arity
 *                     2..8), accumulate and scale kernel on the GPU against
 *                     the CPU backend's kernels, bit for bit, on random data
 *                     (NaN, +-0 and +-inf among the floats, full-range
 *                     integers so sums and products wrap) at sizes 0, 1,
 *                     the block size +-1 and beyond a full grid, with guard
 *                     bytes around every destination; peers' buffers read
 *                     across views; whole graphs (MatMul on cuBLAS, fused
 *                     buckets, MatmulReduceScatter, AllGather) against the
 *                     float64 reference, and --deterministic runs equal to
 *                     the CPU device's byte for byte. Without a driver or a
 *                     GPU it prints "skipped: no CUDA driver (...)" and exits
 *                     0; ctest marks it skipped (SKIP_REGULAR_EXPRESSION).
 */
#include "cf_test.h"

#include <dlfcn.h>
#include <math.h>
#include <sys/stat.h>
#include <unistd.h>

#include "api/api.h"
#include "check/check.h"
#include "executor/executor.h"
#include "ir/ir.h"
#include "passes/passes.h"

#define GUARD 256 /* bytes before and after every destination */

static const cf_dtype all_dts[] = {CF_DT_INT8,    CF_DT_UINT8,   CF_DT_INT16,    CF_DT_INT32,  CF_DT_INT64,
                                   CF_DT_FLOAT16, CF_DT_BFLOAT16, CF_DT_FLOAT32, CF_DT_FLOAT64,
                                   CF_DT_UINT16,  CF_DT_UINT32,   CF_DT_UINT64,  CF_DT_BOOL};
enum { N_DTS = sizeof all_dts / sizeof all_dts[0] };

static bool is_float(cf_dtype dt) {
  return dt == CF_DT_FLOAT16 || dt == CF_DT_BFLOAT16 || dt == CF_DT_FLOAT32 || dt == CF_DT_FLOAT64;
}

/* Every valid n-ary, accumulate and scale key (and quant for --ptx). */
static int all_keys(cf_kernel_key *keys, bool quant) {
  int n = 0;
  for (int d = 0; d < N_DTS; d++)
    for (int r = 0; r < CF_RED_COUNT; r++) {
      for (int a = 2; a <= CF_MAX_ARITY; a++)
        keys[n++] = (cf_kernel_key){.kind = CF_K_NARY, .dtype = all_dts[d], .red = (cf_reduction)r, .arity = a};
      keys[n++] = (cf_kernel_key){.kind = CF_K_ACC, .dtype = all_dts[d], .red = (cf_reduction)r};
    }
  for (int d = 0; d < N_DTS; d++) keys[n++] = (cf_kernel_key){.kind = CF_K_SCALE, .dtype = all_dts[d]};
  if (quant) {
    keys[n++] = (cf_kernel_key){.kind = CF_K_QUANT, .dtype = CF_DT_BFLOAT16};
    keys[n++] = (cf_kernel_key){.kind = CF_K_QUANT, .dtype = CF_DT_FLOAT16};
  }
  return n;
}
enum { MAX_KEYS = N_DTS * CF_RED_COUNT * CF_MAX_ARITY + N_DTS + 2 };

/* ================= --ptx: everywhere ================= */

static const char *ptxas_path(void) {
  const char *env = getenv("PTXAS");
  if (env && *env && access(env, X_OK) == 0) return env;
  return access("/usr/local/cuda/bin/ptxas", X_OK) == 0 ? "/usr/local/cuda/bin/ptxas" : NULL;
}

/* ptx lacks its target, version or address size, or does not end in a newline */
static void ptx_header(const char *ptx, const char *target_line, const char *what, const char *sm) {
  size_t len = strlen(ptx);
  if (!strstr(ptx, target_line) || !strstr(ptx, ".version 8.0") || !strstr(ptx, ".address_size 64"))
    fail_msg("%s for %s: PTX lacks its target, version or address size:\n%.400s", what, sm, ptx);
  assert_int_equal(len > 0 && ptx[len - 1] == '\n', 1); /* NUL-terminated text */
}

/* Every key's PTX: all keys as one module (its header, every key's entry
 * once; ptxas assembles it where there is one), and one key a module
 * (cf_codegen_ptx of n = 1: its header and entry) for every kind and
 * dtype, the reductions and arities taken in turn. The keys' code is the
 * same in both (one generator per kernel; aot.c's module only collects
 * them), so a module per key for all 535 would repeat the one-module
 * checks 535 times at twice the code generation. */
static void ptx_for(const char *sm, const char *target_line) {
  cf_kernel_key keys[MAX_KEYS];
  int n = all_keys(keys, true);
  assert_int_equal(n, 535); /* 455 n-ary, 65 acc, 13 scale, 2 quant */
  char *all = NULL;
  if (cf_codegen_ptx(ctx, keys, n, sm, &all) != CF_OK) fail_msg("all kernels for %s: %s", sm, cf_context_errmsg(ctx));
  ptx_header(all, target_line, "all kernels", sm);
  /* the entries in the module's order, then each key's among them */
  static const char entry_tag[] = ".visible .entry ";
  char *names[MAX_KEYS + 1];
  int n_names = 0;
  for (char *p = strstr(all, entry_tag); p; p = strstr(p, entry_tag)) {
    p += sizeof entry_tag - 1;
    char *end = strchr(p, '(');
    assert_non_null(end);
    if (n_names > MAX_KEYS) fail_msg("all kernels for %s: more entries than the %d keys", sm, n);
    names[n_names++] = strndup(p, (size_t)(end - p));
    p = end;
  }
  if (n_names != n) fail_msg("all kernels for %s: %d entries for %d keys", sm, n_names, n);
  for (int i = 0; i < n; i++) {
    char name[96];
    cf_kernel_name(&keys[i], name, sizeof name);
    int found = 0;
    for (int j = 0; j < n_names; j++) found += strcmp(names[j], name) == 0;
    if (found != 1) fail_msg("%s for %s: %d entries in the module of all kernels", name, sm, found);
    /* a module of this key alone for one key of each kind and dtype: of
     * the group's keys (reduction-major, then arity), the one at dtype x 8
     * modulo their number, so the 13 dtypes' picks take every reduction
     * and every arity */
    const cf_kernel_key *k = &keys[i];
    int pos = 0, size = 0;
    for (int j = 0; j < n; j++)
      if (keys[j].kind == k->kind && keys[j].dtype == k->dtype) pos += j < i, size++;
    if (pos != (int)k->dtype * 8 % size) continue;
    char entry[128], *ptx = NULL;
    if (cf_codegen_ptx(ctx, k, 1, sm, &ptx) != CF_OK) fail_msg("%s for %s: %s", name, sm, cf_context_errmsg(ctx));
    ptx_header(ptx, target_line, name, sm);
    snprintf(entry, sizeof entry, ".visible .entry %s(", name);
    if (!strstr(ptx, entry)) fail_msg("%s for %s: PTX lacks its entry:\n%.400s", name, sm, ptx);
    free(ptx);
  }
  for (int j = 0; j < n_names; j++) free(names[j]);
  const char *ptxas = ptxas_path();
  if (!ptxas) {
    print_message("ptxas not found (/usr/local/cuda/bin/ptxas, $PTXAS): PTX for %s not assembled\n", sm);
    free(all);
    return;
  }
  char path[] = "/tmp/cf_test_cuda_XXXXXX";
  int fd = mkstemp(path);
  assert_true(fd >= 0);
  size_t len = strlen(all);
  assert_int_equal(write(fd, all, len), (ssize_t)len);
  close(fd);
  free(all);
  char cmd[512];
  snprintf(cmd, sizeof cmd, "'%s' -arch=%s -o /dev/null '%s'", ptxas, sm, path);
  int rc = system(cmd);
  unlink(path);
  if (rc != 0) fail_msg("ptxas rejected the PTX of all %d kernels for %s (%s)", n, sm, cmd);
}

static void test_ptx_sm90(void **state) {
  (void)state;
  ptx_for("sm_90", ".target sm_90");
}

static void test_ptx_sm80(void **state) {
  (void)state;
  ptx_for("sm_80", ".target sm_80");
}

static void test_ptx_refuses(void **state) {
  (void)state;
  cf_kernel_key k = {.kind = CF_K_NARY, .dtype = CF_DT_FLOAT32, .red = CF_RED_SUM, .arity = 2};
  char *ptx = (char *)"x";
  ASSERT_ERR(cf_codegen_ptx(ctx, &k, 1, "sm_70", &ptx), CF_ERR_UNSUPPORTED, "sm_80 and sm_90");
  assert_null(ptx);
  k.arity = 9;
  ASSERT_ERR(cf_codegen_ptx(ctx, &k, 1, "sm_90", &ptx), CF_ERR_USAGE, "arity 9 out of range");
  assert_null(ptx);
  ASSERT_ERR(cf_codegen_ptx(ctx, NULL, 1, NULL, &ptx), CF_ERR_USAGE, "bad arguments");
  /* no kernels: a valid, empty module */
  assert_int_equal(cf_codegen_ptx(ctx, NULL, 0, "sm_80", &ptx), CF_OK);
  assert_non_null(strstr(ptx, ".target sm_80"));
  free(ptx);
}

/* The driver cannot be loaded: a clear message, no device. */
static void test_no_driver(void **state) {
  (void)state;
  cf_device *d = (cf_device *)0x1;
  setenv("COLLFUSE_CUDA_DRIVER", "libcollfuse-no-such-driver.so.1", 1);
  ASSERT_ERR(cf_device_cuda_create(ctx, 0, &d), CF_ERR_UNSUPPORTED,
             "no CUDA driver (libcollfuse-no-such-driver.so.1 not found)");
  assert_null(d);
  unsetenv("COLLFUSE_CUDA_DRIVER");
  void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (lib) {
    dlclose(lib);
    print_message("libcuda.so.1 is here: the default name's failure path is not reachable\n");
    return;
  }
  ASSERT_ERR(cf_device_cuda_create(ctx, -1, &d), CF_ERR_UNSUPPORTED, "no CUDA driver (libcuda.so.1 not found)");
  assert_null(d);
  /* a plan on the CUDA device says so too */
  const char *xml = "<graph name='g' world_size='2'><node name='x' op='Input' dtype='float32' shape='4'/>"
                    "<node name='a' op='AllReduce'><input ref='x'/></node>"
                    "<node name='y' op='Output'><input ref='a'/></node></graph>";
  cf_graph *g = NULL;
  assert_int_equal(cf_graph_parse(ctx, "g.xml", xml, strlen(xml), &g), CF_OK);
  assert_int_equal(cf_graph_verify(g, NULL), CF_OK);
  cf_plan *p = (cf_plan *)0x1;
  cf_run_options opt = {.ranks = 2, .iters = 1, .device = CF_DEVICE_CUDA};
  ASSERT_ERR(cf_plan_build(ctx, g, &opt, &p), CF_ERR_UNSUPPORTED, "no CUDA driver (libcuda.so.1 not found)");
  assert_null(p);
  cf_graph_destroy(g);
}

/* ================= on a GPU ================= */

static cf_device *gpu, *cpu; /* the device under test and the reference */

static uint64_t splitmix(uint64_t *s) {
  uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

/* Random data: integers over their whole range, bool 0 or 1; floats in
 * [-4, 4) with NaN, +-0 and +-inf sprinkled in. */
static void fill(void *p, cf_dtype dt, int64_t n, uint64_t seed) {
  uint64_t s = seed;
  int es = cf_dtype_size(dt);
  for (int64_t i = 0; i < n; i++) {
    uint64_t r = splitmix(&s);
    if (dt == CF_DT_BOOL) { /* 0 or 1, as a bool holds */
      ((uint8_t *)p)[i] = (uint8_t)(r >> 63);
      continue;
    }
    if (!is_float(dt)) {
      memcpy((char *)p + i * es, &r, (size_t)es); /* little endian: the low bytes */
      continue;
    }
    double v = (double)(int64_t)(r >> 40) / (double)(1 << 21); /* [-4, 4) */
    switch (r % 101) {
    case 3: v = NAN; break;
    case 7: v = -0.0; break;
    case 11: v = 0.0; break;
    case 13: v = (r >> 8) & 1 ? INFINITY : -INFINITY; break;
    default: break;
    }
    cf_store_f64(p, dt, i, v);
  }
}

static bool same_elem(cf_dtype dt, const void *a, const void *b, int64_t i) {
  int es = cf_dtype_size(dt);
  if (!memcmp((const char *)a + i * es, (const char *)b + i * es, (size_t)es)) return true;
  return is_float(dt) && isnan(cf_load_f64(a, dt, i)) && isnan(cf_load_f64(b, dt, i));
}

static void *dalloc(size_t bytes) {
  void *p = gpu->ops->alloc(gpu, bytes);
  if (!p) fail_msg("cannot allocate %zu bytes on the GPU", bytes);
  return p;
}

static void up(void *dst, const void *src, size_t bytes) {
  if (cf_device_upload(gpu, dst, src, bytes) != CF_OK) fail_msg("upload: %s", cf_context_errmsg(ctx));
}

static void down(void *dst, const void *src, size_t bytes) {
  if (cf_device_download(gpu, dst, src, bytes) != CF_OK) fail_msg("download: %s", cf_context_errmsg(ctx));
}

/* One kernel on the GPU against the CPU: hsrc/dsrc are CF_MAX_ARITY
 * sources on the host and the device; dst starts as init (ACC, SCALE). */
static int check_kernel(const cf_kernel_key *k, int64_t n, void *const *hsrc, void *const *dsrc, const void *init,
                        char *dguard, unsigned char *hbuf, void *want) {
  cf_dtype dt = k->dtype;
  size_t bytes = (size_t)n * (size_t)cf_dtype_size(dt), total = bytes + 2 * GUARD;
  void *ddst = dguard + GUARD;
  memset(hbuf, 0xa5, total);
  if (k->kind != CF_K_NARY) memcpy(hbuf + GUARD, init, bytes);
  up(dguard, hbuf, total);
  if (k->kind != CF_K_NARY) memcpy(want, init, bytes);
  double div = k->kind == CF_K_SCALE ? 3.0 : (double)k->arity;
  switch (k->kind) {
  case CF_K_NARY:
    cpu->ops->nary(cpu, k, want, (const void *const *)hsrc, n, div);
    gpu->ops->nary(gpu, k, ddst, (const void *const *)dsrc, n, div);
    break;
  case CF_K_ACC:
    cpu->ops->acc(cpu, k, want, hsrc[1], n);
    gpu->ops->acc(gpu, k, ddst, dsrc[1], n);
    break;
  default:
    cpu->ops->scale(cpu, k, want, n, div);
    gpu->ops->scale(gpu, k, ddst, n, div);
    break;
  }
  if (cf_device_error(gpu, ctx) != CF_OK) fail_msg("launch: %s", cf_context_errmsg(ctx));
  down(hbuf, dguard, total);
  char name[96];
  cf_kernel_name(k, name, sizeof name);
  for (size_t b = 0; b < GUARD; b++)
    if (hbuf[b] != 0xa5 || hbuf[GUARD + bytes + b] != 0xa5) {
      print_error("%s n=%lld: guard byte %zu changed\n", name, (long long)n, b);
      return 1;
    }
  for (int64_t i = 0; i < n; i++)
    if (!same_elem(dt, hbuf + GUARD, want, i)) {
      print_error("%s n=%lld: element %lld is %.17g on the GPU, %.17g on the CPU\n", name, (long long)n, (long long)i,
                  cf_load_f64(hbuf + GUARD, dt, i), cf_load_f64(want, dt, i));
      return 1;
    }
  return 0;
}

static void test_kernels_against_cpu(void **state) {
  (void)state;
  static const int64_t sizes[] = {0, 1, 3, 255, 256, 257, 65541};
  enum { N_SIZES = sizeof sizes / sizeof sizes[0] };
  int64_t big = ((int64_t)1 << 22) + 7; /* beyond one full grid: the grid-stride loop */
  char gname[128] = "";
  cf_device_cuda_info(gpu, gname, sizeof gname, NULL, NULL, NULL);
  if (strstr(gname, "mock")) big = 70001; /* tests/mock_cuda.c runs kernels as plain C on the host */
  cf_kernel_key keys[MAX_KEYS];
  int nk = all_keys(keys, false);
  for (int i = 0; i < nk; i++) {
    char name[96];
    if (cpu->ops->prepare(cpu, &keys[i]) != CF_OK || gpu->ops->prepare(gpu, &keys[i]) != CF_OK)
      fail_msg("prepare %s: %s", cf_kernel_name(&keys[i], name, sizeof name), cf_context_errmsg(ctx));
  }
  int failed = 0, checked = 0;
  for (int d = 0; d < N_DTS; d++) {
    cf_dtype dt = all_dts[d];
    size_t es = (size_t)cf_dtype_size(dt), cap = (size_t)big * es;
    void *hsrc[CF_MAX_ARITY], *dsrc[CF_MAX_ARITY];
    for (int j = 0; j < CF_MAX_ARITY; j++) {
      hsrc[j] = malloc(cap);
      dsrc[j] = dalloc(cap);
      fill(hsrc[j], dt, big, 0x1000u + (uint64_t)d * 16 + (uint64_t)j);
      up(dsrc[j], hsrc[j], cap);
    }
    void *init = malloc(cap), *want = malloc(cap);
    unsigned char *hbuf = malloc(cap + 2 * GUARD);
    char *dguard = dalloc(cap + 2 * GUARD);
    fill(init, dt, big, 0x2000u + (uint64_t)d);
    for (int s = 0; s <= N_SIZES; s++)
      for (int i = 0; i < nk; i++) {
        const cf_kernel_key *k = &keys[i];
        if (k->dtype != dt) continue;
        /* the large size: the 2- and 8-ary kernels, accumulate and scale */
        if (s == N_SIZES && k->kind == CF_K_NARY && k->arity != 2 && k->arity != CF_MAX_ARITY) continue;
        failed += check_kernel(k, s < N_SIZES ? sizes[s] : big, hsrc, dsrc, init, dguard, hbuf, want);
        checked++;
      }
    for (int j = 0; j < CF_MAX_ARITY; j++) {
      free(hsrc[j]);
      gpu->ops->free(gpu, dsrc[j]);
    }
    free(init);
    free(want);
    free(hbuf);
    gpu->ops->free(gpu, dguard);
  }
  print_message("%d kernel runs checked against the CPU backend\n", checked);
  assert_int_equal(failed, 0);
}

typedef struct timed_call {
  cf_device *d;
  const cf_kernel_key *k;
  void *dst;
  const void *const *src;
  int64_t n;
} timed_call;

static void timed(void *arg) {
  timed_call *t = arg;
  t->d->ops->nary(t->d, t->k, t->dst, t->src, t->n, 2);
}

/* Views: rank 1's collective lane reduces rank 0's buffers (one context,
 * device pointers valid on every stream); copies cross views. */
static void test_views_read_peers(void **state) {
  (void)state;
  cf_device *v0, *v1;
  assert_int_equal(cf_device_view(gpu, ctx, 0, 0, &v0), CF_OK);
  assert_int_equal(cf_device_view(gpu, ctx, 1, 1, &v1), CF_OK);
  assert_ptr_not_equal(v0, v1);
  cf_device *again;
  assert_int_equal(cf_device_view(gpu, ctx, 1, 1, &again), CF_OK);
  assert_ptr_equal(again, v1);
  enum { N = 1000 };
  float a[N], b[N], got[N];
  for (int i = 0; i < N; i++) a[i] = (float)i, b[i] = 0.5f * (float)i;
  float *da = v0->ops->alloc(v0, sizeof a), *db = v0->ops->alloc(v0, sizeof b), *dc = v1->ops->alloc(v1, sizeof a);
  assert_non_null(da);
  assert_int_equal(cf_device_upload(v0, da, a, sizeof a), CF_OK);
  assert_int_equal(cf_device_upload(v0, db, b, sizeof b), CF_OK);
  cf_kernel_key k = {.kind = CF_K_NARY, .dtype = CF_DT_FLOAT32, .red = CF_RED_SUM, .arity = 2};
  assert_int_equal(gpu->ops->prepare(gpu, &k), CF_OK);
  const void *src[2] = {da, db};
  v1->ops->nary(v1, &k, dc, src, N, 2);
  assert_int_equal(cf_device_error(v1, ctx), CF_OK);
  assert_int_equal(cf_device_download(v0, got, dc, sizeof got), CF_OK);
  for (int i = 0; i < N; i++) assert_true(got[i] == 1.5f * (float)i);
  v0->ops->copy(v0, da, dc, sizeof a); /* a view copying another's buffer */
  assert_int_equal(cf_device_download(v1, got, da, sizeof got), CF_OK);
  assert_true(got[N - 1] == 1.5f * (float)(N - 1));
  /* a kernel that was never prepared (on a second device): an error, not a crash */
  cf_device *fresh = NULL, *fv = NULL;
  assert_int_equal(cf_device_cuda_create(ctx, 0, &fresh), CF_OK);
  assert_int_equal(cf_device_view(fresh, ctx, 1, 1, &fv), CF_OK);
  cf_kernel_key missing = {.kind = CF_K_ACC, .dtype = CF_DT_FLOAT64, .red = CF_RED_PROD};
  fv->ops->acc(fv, &missing, dc, da, N);
  ASSERT_ERR(cf_device_error(fv, ctx), CF_ERR_RUNTIME, "cf_acc_prod_float64 was not prepared");
  assert_int_equal(cf_device_view(fresh, ctx, 1, 1, &again), CF_OK); /* a fresh run: clean again */
  assert_ptr_equal(again, fv);
  assert_int_equal(cf_device_error(again, ctx), CF_OK);
  fresh->ops->destroy(fresh);
  /* time(): launches queued back to back, timed by events */
  timed_call tc = {.d = v1, .k = &k, .dst = dc, .src = src, .n = N};
  double ms = -1;
  assert_int_equal(cf_device_time(v1, timed, &tc, 10, &ms), CF_OK);
  assert_true(ms > 0 && ms < 1000);
  v0->ops->free(v0, da);
  v0->ops->free(v0, db);
  v1->ops->free(v1, dc);
}

/* ---- whole graphs ---- */

static const char *graph_xml =
    "<graph name='cuda' world_size='4'>"
    " <group name='pair' ranks='2,0'/>"
    " <node name='x' op='Input' dtype='float32' shape='64,48'/>"
    " <node name='w' op='Input' dtype='float32' shape='48,40'/>"
    " <node name='mm' op='MatMul'><input ref='x'/><input ref='w'/></node>"
    " <node name='rs' op='ReduceScatter' reduction='sum'><input ref='mm'/></node>"
    " <node name='hx' op='Input' dtype='bfloat16' shape='16,32'/>"
    " <node name='hw' op='Input' dtype='bfloat16' shape='32,8'/>"
    " <node name='hm' op='MatMul'><input ref='hx'/><input ref='hw'/></node>"
    " <node name='har' op='AllReduce' reduction='sum' fusion='0'><input ref='hm'/></node>"
    " <node name='a' op='Input' dtype='bfloat16' shape='1000'/>"
    " <node name='b' op='Input' dtype='bfloat16' shape='3001'/>"
    " <node name='ara' op='AllReduce' reduction='mean' fusion='2' fusion_id='1'><input ref='a'/></node>"
    " <node name='arb' op='AllReduce' reduction='mean' fusion='2' fusion_id='1'><input ref='b'/></node>"
    " <node name='c' op='Input' dtype='int32' shape='777'/>"
    " <node name='arc' op='AllReduce' reduction='max' group='pair'><input ref='c'/></node>"
    " <node name='e' op='Input' dtype='float16' shape='300000'/>"
    " <node name='are' op='AllReduce' reduction='sum' fusion='0'><input ref='e'/></node>"
    " <node name='d' op='Input' dtype='float16' shape='5,7'/>"
    " <node name='ag' op='AllGather'><input ref='d'/></node>"
    " <node name='add' op='Add'><input ref='rs'/><input ref='rs'/></node>"
    " <node name='o1' op='Output'><input ref='add'/></node>"
    " <node name='o2' op='Output'><input ref='har'/></node>"
    " <node name='o3' op='Output'><input ref='ara'/></node>"
    " <node name='o4' op='Output'><input ref='arb'/></node>"
    " <node name='o5' op='Output'><input ref='arc'/></node>"
    " <node name='o6' op='Output'><input ref='ag'/></node>"
    " <node name='o7' op='Output'><input ref='are'/></node>"
    "</graph>";

static cf_graph *compile_graph(const char *pipeline) {
  cf_graph *g = NULL;
  if (cf_graph_parse(ctx, "cuda.xml", graph_xml, strlen(graph_xml), &g) != CF_OK)
    fail_msg("parse: %s", cf_context_errmsg(ctx));
  cf_compile_options co = {.pipeline = pipeline};
  if (cf_compile(g, &co) != CF_OK) fail_msg("compile: %s", cf_context_errmsg(ctx));
  return g;
}

static void run_graph(const cf_graph *g, cf_device_kind device, bool det, cf_run_result *res) {
  cf_run_options opt = {.ranks = 4, .iters = 2, .warmup = 1, .seed = 7, .deterministic = det, .device = device};
  cf_plan *p = NULL;
  if (cf_plan_build(ctx, g, &opt, &p) != CF_OK) fail_msg("plan: %s", cf_context_errmsg(ctx));
  if (cf_exec_run(ctx, p, NULL, res) != CF_OK) fail_msg("run: %s", cf_context_errmsg(ctx));
  cf_plan_destroy(p);
}

static void graph_vs_reference(void) {
  cf_graph *g = compile_graph(cf_pipeline_default), *ug = compile_graph(cf_pipeline_O0);
  int fused = 0;
  for (int i = 0; i < g->n_nodes; i++) fused += g->nodes[i].op == CF_OP_MATMULREDUCESCATTER;
  assert_int_equal(fused, 1); /* the pipelined GEMM + reduce-scatter runs too */
  cf_run_result res;
  run_graph(g, CF_DEVICE_CUDA, false, &res);
  cf_inputs in = {.ranks = 4};
  for (int i = 0; i < ug->n_nodes; i++) in.n += ug->nodes[i].op == CF_OP_INPUT;
  in.names = calloc((size_t)in.n + 1, sizeof *in.names);
  in.data = calloc((size_t)in.n * 4 + 1, sizeof *in.data);
  for (int i = 0, k = 0; i < ug->n_nodes; i++) {
    const cf_node *nd = &ug->nodes[i];
    if (nd->op != CF_OP_INPUT) continue;
    in.names[k] = nd->name;
    for (int r = 0; r < 4; r++) {
      cf_tensor *t = &in.data[r * in.n + k];
      t->dtype = nd->out[0].dtype;
      t->shape = nd->out[0].shape;
      assert_true(cf_shape_elements(&t->shape, &t->count));
      t->data = calloc((size_t)t->count + 1, (size_t)cf_dtype_size(t->dtype));
      cf_fill_node(nd, t->data, t->dtype, t->count, 7, r);
    }
    k++;
  }
  cf_ref_value *ref = NULL;
  int nref = 0;
  if (cf_reference_run(ctx, ug, &in, 7, &ref, &nref) != CF_OK) fail_msg("reference: %s", cf_context_errmsg(ctx));
  assert_int_equal(nref, res.n_outputs);
  cf_verify_stats vs;
  if (cf_verify_outputs(ctx, ug, res.outputs, ref, 4, nref, &vs) != CF_OK) fail_msg("%s", cf_context_errmsg(ctx));
  assert_true(vs.checked > 0);
  cf_ref_free(ref, nref * 4);
  for (int i = 0; i < in.n * 4; i++) free(in.data[i].data);
  free(in.data);
  free(in.names);
  cf_run_result_free(&res);
  cf_graph_destroy(g);
  cf_graph_destroy(ug);
}

/* MatMul on cuBLAS (as found), then on the host (CUBLAS_LIBRARY=none). */
static void test_graph_matches_reference(void **state) {
  (void)state;
  const char *env = getenv("CUBLAS_LIBRARY");
  char *saved = env ? strdup(env) : NULL;
  graph_vs_reference();
  setenv("CUBLAS_LIBRARY", "none", 1);
  graph_vs_reference();
  if (saved)
    setenv("CUBLAS_LIBRARY", saved, 1);
  else
    unsetenv("CUBLAS_LIBRARY");
  free(saved);
}

/* --deterministic: rank-order reductions by the same kernels and
 * row-invariant host products, so the GPU gives the CPU's bytes. */
static void test_graph_deterministic_equals_cpu(void **state) {
  (void)state;
  cf_graph *g = compile_graph(cf_pipeline_default);
  cf_run_result a, b;
  run_graph(g, CF_DEVICE_CPU, true, &a);
  run_graph(g, CF_DEVICE_CUDA, true, &b);
  assert_int_equal(a.n_outputs, b.n_outputs);
  for (int i = 0; i < a.ranks * a.n_outputs; i++) {
    size_t bytes = (size_t)a.outputs[i].count * (size_t)cf_dtype_size(a.outputs[i].dtype);
    if (strcmp(a.output_names[i % a.n_outputs], "o5") == 0 && (i / a.n_outputs == 1 || i / a.n_outputs == 3))
      continue; /* ranks outside group 'pair': undefined */
    if (memcmp(a.outputs[i].data, b.outputs[i].data, bytes) != 0)
      fail_msg("output %s of rank %d differs between the CPU and the GPU", a.output_names[i % a.n_outputs],
               i / a.n_outputs);
  }
  cf_run_result_free(&a);
  cf_run_result_free(&b);
  cf_graph_destroy(g);
}

static int gpu_setup(void **state) {
  (void)state;
  return cf_device_cpu_create(ctx, &cpu) == CF_OK ? 0 : -1;
}

static int gpu_teardown(void **state) {
  (void)state;
  if (gpu) gpu->ops->destroy(gpu);
  if (cpu) cpu->ops->destroy(cpu);
  return 0;
}

int main(int argc, char **argv) {
  if (getenv("CF_TEST_FILTER")) cmocka_set_test_filter(getenv("CF_TEST_FILTER"));
  /* --ptx [sm_90|sm_80]: the PTX tests, or the half of them with that
   * architecture's kernels (ctest runs the halves side by side) */
  if (argc > 1 && strcmp(argv[1], "--ptx") == 0) {
    const char *half = argc > 2 ? argv[2] : NULL;
    if (half && strcmp(half, "sm_90") != 0 && strcmp(half, "sm_80") != 0) {
      fprintf(stderr, "test_cuda: --ptx takes sm_90 or sm_80, not '%s'\n", half);
      return 2;
    }
    const struct CMUnitTest sm90[] = {
        cmocka_unit_test(test_ptx_sm90),
        cmocka_unit_test(test_ptx_refuses),
        cmocka_unit_test(test_no_driver),
    };
    const struct CMUnitTest sm80[] = {cmocka_unit_test(test_ptx_sm80)};
    int failed = 0;
    if (!half || !strcmp(half, "sm_90")) failed += cmocka_run_group_tests_name("cuda_ptx", sm90, setup, teardown);
    if (!half || !strcmp(half, "sm_80")) failed += cmocka_run_group_tests_name("cuda_ptx_sm80", sm80, setup, teardown);
    return failed;
  }
  if (setup(NULL)) return 1;
  cf_status st = cf_device_cuda_create(ctx, 0, &gpu);
  if (st == CF_ERR_UNSUPPORTED) {
    /* no driver or no GPU: nothing to test here (ctest: skipped) */
    const char *msg = cf_context_errmsg(ctx);
    if (!strncmp(msg, "error: ", 7)) msg += 7;
    printf("skipped: %s\n", msg);
    teardown(NULL);
    return 0;
  }
  if (st) {
    fprintf(stderr, "test_cuda: %s\n", cf_context_errmsg(ctx));
    teardown(NULL);
    return 1;
  }
  char name[128];
  int major = 0, minor = 0;
  const char *sm = "?";
  cf_device_cuda_info(gpu, name, sizeof name, &major, &minor, &sm);
  printf("test_cuda: %s, compute capability %d.%d, PTX for %s\n", name, major, minor, sm);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_kernels_against_cpu),
      cmocka_unit_test(test_views_read_peers),
      cmocka_unit_test(test_graph_matches_reference),
      cmocka_unit_test(test_graph_deterministic_equals_cpu),
  };
  int rc = cmocka_run_group_tests_name("cuda", tests, gpu_setup, gpu_teardown);
  teardown(NULL);
  return rc;
}
