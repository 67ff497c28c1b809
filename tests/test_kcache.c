/* test_kcache.c - kernels linked from the disk cache without LLVM
 * (codegen/load.c's kernel_cached, elfload.c, objcache.c's host record).
 *
 * A process whose kernels are all in the cache must not map libLLVM (a
 * forked child runs an AllReduce from a warm cache and reads its
 * /proc/self/maps: this executable links no LLVM, so the first test runs
 * before anything here loads the module); kernels linked that way compute
 * exactly what the module's JIT links (bit for bit, random data, checked
 * against a float64 reference, guard bytes around every buffer); and a
 * damaged, forged or foreign record or entry, or an object the loader
 * refuses, goes to the module, which rebuilds as objcache's tests expect.
 */
#include "cf_test.h"

#include <dirent.h>
#include <fcntl.h>
#include <math.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "codegen/codegen.h"

static uint64_t rng = 0x6a09e667f3bcc909ull;
static uint64_t xrand(void) {
  rng ^= rng >> 12;
  rng ^= rng << 25;
  rng ^= rng >> 27;
  return rng * 0x2545f4914f6cdd1dull;
}
static double urand(void) { return (double)(xrand() >> 11) / 9007199254740992.0 * 8.0 - 4.0; }

static char dir[] = "/tmp/cf_kcache_XXXXXX";
static char sub[64];


/* the kernel for k in c; *ms its compile time (0: from a cache) */
static void *kernel(cf_context *c, cf_kernel_key k, double *ms) {
  void *fn = NULL;
  double t;
  if (cf_codegen_kernel(c, &k, &fn, ms ? ms : &t) != CF_OK) fail_msg("%s", cf_context_errmsg(c));
  assert_non_null(fn);
  return fn;
}

/* A 4-rank float32 sum AllReduce of n elements on random data, checked
 * against a float64 reference; 0 when right. */
static int allreduce(cf_context *c, int64_t n) {
  cf_graph *g;
  cf_executable *e;
  if (cf_graph_create(c, "kc", 4, &g) || cf_graph_add_input(g, "x", "float32", &n, 1) ||
      cf_graph_add_allreduce(g, "ar", "x", "sum", NULL, -1, -1) ||
      cf_graph_add_output(g, "y", "ar") || cf_executable_create(g, NULL, &e))
    return 1;
  float *in = malloc(sizeof *in * (size_t)n * 4), *out = malloc(sizeof *out * (size_t)n * 4);
  const void *ins[4];
  void *outs[4];
  for (int r = 0; r < 4; r++) {
    ins[r] = in + r * n;
    outs[r] = out + r * n;
    for (int64_t i = 0; i < n; i++)
      in[r * n + i] = (float)urand();
  }
  int bad = cf_executable_run(e, ins, outs) != CF_OK;
  for (int r = 0; r < 4 && !bad; r++)
    for (int64_t i = 0; i < n && !bad; i++) {
      double want = 0;
      for (int s = 0; s < 4; s++)
        want += in[s * n + i];
      bad = fabs(out[r * n + i] - want) > 1e-5 * (1 + fabs(want));
    }
  free(in);
  free(out);
  cf_executable_destroy(e);
  cf_graph_destroy(g);
  return bad ? 2 : 0;
}

static bool maps_llvm(void) {
  FILE *f = fopen("/proc/self/maps", "r");
  char line[1024];
  bool found = false;
  while (f && fgets(line, sizeof line, f))
    if (strstr(line, "libLLVM")) found = true;
  if (f) fclose(f);
  return found;
}

/* the exit status of fn run in a child */
static int in_child(int (*fn)(void)) {
  fflush(NULL);
  pid_t p = fork();
  assert_true(p >= 0);
  if (p == 0) _exit(fn());
  int ws;
  assert_int_equal(waitpid(p, &ws, 0), p);
  return WIFEXITED(ws) ? WEXITSTATUS(ws) : 100 + WTERMSIG(ws);
}

static int cold_run(void) {
  cf_context *c;
  if (cf_context_create(&c)) return 10;
  int r = allreduce(c, 3000);
  if (!r && !c->codegen_ops) r = 11; /* the module compiled them */
  cf_context_destroy(c);
  return r;
}
static int warm_run(void) {
  if (maps_llvm()) return 20;
  cf_context *c;
  if (cf_context_create(&c)) return 21;
  int r = allreduce(c, 3000);
  if (!r && c->codegen_ops) r = 22; /* the module was loaded */
  if (!r && maps_llvm()) r = 23;
  cf_context_destroy(c);
  return r;
}

/* A warm cache: an AllReduce runs, right, without libLLVM in the process. */
static void test_warm_no_llvm(void **state) {
  (void)state;
  assert_false(maps_llvm());
  assert_int_equal(in_child(cold_run), 0);
  assert_int_equal(in_child(warm_run), 0);
  assert_false(maps_llvm());
}

/* ---- both ways, bit for bit ---- */
#define GUARD 64
static unsigned char *gbuf(size_t bytes) {
  unsigned char *b = malloc(bytes + 2 * GUARD);
  assert_non_null(b);
  memset(b, 0xa5, bytes + 2 * GUARD);
  return b + GUARD;
}
static void gcheck(unsigned char *p, size_t bytes) {
  for (size_t i = 1; i <= GUARD; i++)
    assert_int_equal(p[-(ptrdiff_t)i], 0xa5);
  for (size_t i = 0; i < GUARD; i++)
    assert_int_equal(p[bytes + i], 0xa5);
  free(p - GUARD);
}

/* n elements of key k (float32 or float64 n-ary, acc or scale) by fa and
 * fb on the same random data: equal bit for bit, and near the float64
 * reference. */
static void both_ways(cf_kernel_key k, void *fa, void *fb, int64_t n) {
  size_t es = k.dtype == CF_DT_FLOAT64 ? 8 : 4, bytes = (size_t)n * es;
  int ar = k.kind == CF_K_NARY ? k.arity : 1, outs = k.outs ? k.outs : 1;
  unsigned char *src[CF_MAX_ARITY], *dst[2][CF_MAX_ARITY];
  double *ref = calloc((size_t)n, sizeof *ref);
  for (int s = 0; s < ar; s++) {
    src[s] = gbuf(bytes);
    for (int64_t i = 0; i < n; i++) {
      double v = urand();
      if (es == 4)
        ((float *)src[s])[i] = (float)v;
      else
        ((double *)src[s])[i] = v;
    }
  }
  for (int w = 0; w < 2; w++)
    for (int o = 0; o < outs; o++) {
      dst[w][o] = gbuf(bytes);
      if (k.kind != CF_K_NARY) memcpy(dst[w][o], src[0], bytes); /* acc, scale: from src 0 */
    }
  for (int64_t i = 0; i < n; i++) {
    double a = es == 4 ? ((float *)src[0])[i] : ((double *)src[0])[i];
    if (k.kind == CF_K_SCALE) a /= 3.0;
    if (k.kind == CF_K_ACC) a += a;
    for (int s = 1; s < ar; s++)
      a += es == 4 ? ((float *)src[s])[i] : ((double *)src[s])[i];
    ref[i] = a;
  }
  for (int w = 0; w < 2; w++) {
    void *f = w ? fb : fa;
    if (k.kind == CF_K_NARY && k.outs) {
      cf_kernel_nary_to_fn fn;
      memcpy(&fn, &f, sizeof fn);
      fn((void *const *)dst[w], (const void *const *)src, n, 1.0);
    } else if (k.kind == CF_K_NARY) {
      cf_kernel_nary_fn fn;
      memcpy(&fn, &f, sizeof fn);
      fn(dst[w][0], (const void *const *)src, n, 1.0);
    } else if (k.kind == CF_K_ACC) {
      cf_kernel_acc_fn fn;
      memcpy(&fn, &f, sizeof fn);
      fn(dst[w][0], src[0], n);
    } else {
      cf_kernel_scale_fn fn;
      memcpy(&fn, &f, sizeof fn);
      fn(dst[w][0], n, 3.0);
    }
  }
  for (int o = 0; o < outs; o++) {
    assert_memory_equal(dst[0][o], dst[1][o], bytes);
    for (int64_t i = 0; i < n; i++) {
      double got = es == 4 ? ((float *)dst[1][o])[i] : ((double *)dst[1][o])[i];
      if (fabs(got - ref[i]) > (es == 4 ? 1e-5 : 1e-12) * (1 + fabs(ref[i])))
        fail_msg("element %lld: %g, want %g", (long long)i, got, ref[i]);
    }
    gcheck(dst[0][o], bytes);
    gcheck(dst[1][o], bytes);
  }
  for (int s = 0; s < ar; s++)
    gcheck(src[s], bytes);
  free(ref);
}

static const cf_kernel_key keys[] = {
    {.kind = CF_K_NARY, .dtype = CF_DT_FLOAT32, .red = CF_RED_SUM, .arity = 3},
    {.kind = CF_K_NARY, .dtype = CF_DT_FLOAT64, .red = CF_RED_SUM, .arity = 8},
    {.kind = CF_K_NARY, .dtype = CF_DT_FLOAT32, .red = CF_RED_SUM, .arity = 2, .outs = 2},
    {.kind = CF_K_NARY,
     .dtype = CF_DT_FLOAT32,
     .red = CF_RED_SUM,
     .arity = 4,
     .stream = true,
     .outs = 1},
    {.kind = CF_K_ACC, .dtype = CF_DT_FLOAT32, .red = CF_RED_SUM},
    {.kind = CF_K_SCALE, .dtype = CF_DT_FLOAT64, .red = CF_RED_SUM},
};
#define NKEYS (int)(sizeof keys / sizeof *keys)

static void test_both_ways(void **state) {
  (void)state;
  cf_context *cold, *m, *f;
  double ms;
  assert_int_equal(cf_context_create(&cold), CF_OK); /* fills the cache */
  for (int i = 0; i < NKEYS; i++)
    kernel(cold, keys[i], &ms);
  cf_context_destroy(cold);
  setenv("COLLFUSE_CACHE", "off", 1); /* m: the module's JIT, compiling */
  assert_int_equal(cf_context_create(&m), CF_OK);
  void *fa[NKEYS];
  for (int i = 0; i < NKEYS; i++) {
    fa[i] = kernel(m, keys[i], &ms);
    assert_true(ms > 0);
  }
  setenv("COLLFUSE_CACHE", sub, 1);
  assert_int_equal(cf_context_create(&f), CF_OK);
  for (int i = 0; i < NKEYS; i++) {
    void *a = fa[i];
    void *b = kernel(f, keys[i], &ms);
    assert_true(ms == 0);
    for (int64_t n = 0; n < 1200; n = n * 3 + 1)
      both_ways(keys[i], a, b, n);
  }
  assert_null(f->codegen_ops); /* f never loaded the module */
  assert_null(f->codegen);
  cf_context_destroy(m);
  cf_context_destroy(f);
}

/* ---- damaged, forged and refused ---- */
static void path_of(const char *prefix, char *out, size_t len) {
  DIR *d = opendir(sub);
  assert_non_null(d);
  out[0] = '\0';
  for (struct dirent *e; (e = readdir(d));)
    if (!strncmp(e->d_name, prefix, strlen(prefix))) snprintf(out, len, "%s/%s", sub, e->d_name);
  closedir(d);
  assert_true(out[0] != '\0');
}
static unsigned char *slurp(const char *p, size_t *n) {
  FILE *f = fopen(p, "rb");
  assert_non_null(f);
  unsigned char *b = malloc(1 << 20);
  *n = fread(b, 1, 1 << 20, f);
  fclose(f);
  return b;
}
static void spill(const char *p, const unsigned char *b, size_t n) {
  FILE *f = fopen(p, "wb");
  assert_non_null(f);
  assert_int_equal(fwrite(b, 1, n, f), n);
  fclose(f);
}
/* flip byte at of path, and with the user's key seal it again (mac_at:
 * where its MAC is) */
static void flip(const char *path, size_t at, long mac_at) {
  size_t n;
  unsigned char *b = slurp(path, &n), key[32], mac[32];
  b[at] ^= 0x10;
  if (mac_at >= 0) {
    char kp[128];
    snprintf(kp, sizeof kp, "%s/key", sub);
    FILE *f = fopen(kp, "rb");
    assert_non_null(f);
    assert_int_equal(fread(key, 1, 32, f), 32);
    fclose(f);
    unsigned len = 0;
    memset(b + mac_at, 0, 32);
    assert_non_null(HMAC(EVP_sha256(), key, 32, b, n, mac, &len));
    memcpy(b + mac_at, mac, 32);
  }
  spill(path, b, n);
  free(b);
}

/* A fresh context's 3-ary float32 sum: its compile time, whether it loaded
 * the module, and its log. */
static double fresh(cf_logbuf *log, bool *module) {
  cf_context *c;
  assert_int_equal(cf_context_create(&c), CF_OK);
  log->text[0] = '\0';
  cf_context_set_log(c, cf_logbuf_sink, log);
  double ms;
  kernel(c, keys[0], &ms);
  *module = c->codegen_ops != NULL;
  cf_context_destroy(c);
  return ms;
}

static void test_fallback(void **state) {
  (void)state;
  cf_logbuf log;
  bool module;
  char rec[600], entry[600];
  assert_true(fresh(&log, &module) == 0 && !module); /* warm from the tests before */
  path_of("host-", rec, sizeof rec);
  path_of("cf_nary_sum_float32_3-", entry, sizeof entry);

  flip(rec, 30, -1); /* a damaged record: the module links from the cache, and rewrites it */
  assert_true(fresh(&log, &module) == 0 && module);
  assert_non_null(strstr(log.text, "stale kernel cache record (MAC mismatch"));
  assert_true(fresh(&log, &module) == 0 && !module);

  flip(rec, 24, 48); /* a sealed record of another target: its entries are not there */
  assert_true(fresh(&log, &module) == 0 && module);
  assert_true(fresh(&log, &module) == 0 && !module);

  flip(rec, 16, 48); /* a sealed record of another host's key */
  assert_true(fresh(&log, &module) == 0 && module);
  assert_non_null(strstr(log.text, "made for another host"));
  assert_true(fresh(&log, &module) == 0 && !module);

  flip(entry, 200, -1); /* a damaged entry: both refuse it, the module rebuilds */
  assert_true(fresh(&log, &module) > 0 && module);
  assert_non_null(strstr(log.text, "stale kernel cache entry (MAC mismatch"));
  assert_true(fresh(&log, &module) == 0 && !module);

  flip(entry, 96 + 18, 64); /* sealed, but no x86-64 object: the loader refuses it */
  assert_true(fresh(&log, &module) > 0 && module);
  assert_non_null(strstr(log.text, "not linked without LLVM (not an ELF64"));
  assert_true(fresh(&log, &module) == 0 && !module);
}

static void rm_tree(const char *d) {
  DIR *dd = opendir(d);
  char p[600];
  for (struct dirent *e; dd && (e = readdir(dd));) {
    if (e->d_name[0] == '.' && (!e->d_name[1] || (e->d_name[1] == '.' && !e->d_name[2]))) continue;
    snprintf(p, sizeof p, "%s/%s", d, e->d_name);
    struct stat sb;
    if (lstat(p, &sb) == 0 && S_ISDIR(sb.st_mode))
      rm_tree(p);
    else
      unlink(p);
  }
  if (dd) closedir(dd);
  rmdir(d);
}

int main(void) {
#if !defined(__x86_64__)
  return 0; /* other hosts have no host record: the module links every kernel */
#endif
  if (!mkdtemp(dir)) return 1;
  snprintf(sub, sizeof sub, "%s/collfuse", dir);
  setenv("COLLFUSE_CACHE", sub, 1);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_warm_no_llvm),
      cmocka_unit_test(test_both_ways),
      cmocka_unit_test(test_fallback),
  };
  int r = cmocka_run_group_tests(tests, setup, teardown);
  rm_tree(dir);
  return r;
}
