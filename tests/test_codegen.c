/* test_codegen.c - unit tests of codegen/: every JIT'd kernel (n-ary at
 * every arity, accumulate, scale, quant epilogue) for every dtype and
 * reduction against a reference computed here in plain C, at lengths 0, 1,
 * lanes-1, lanes, lanes+1 and beyond, aligned and not, with guard bytes
 * around every buffer; the edge values (NaN, Inf, -0.0, integer wrap,
 * 16-bit rounding ties, also inside the vector loops); the vector width of
 * the generated code; NVPTX output; and the on-disk object cache (hit,
 * corruption, switched off). The kernel tests run twice: for the host, and
 * for the host without AVX512_BF16 and AVX512DQ (setup_reduced), so the
 * paths of CPUs without vrangeps and vcvtne2ps2bf16 stay tested here
 * (on a host that has neither, the host group already runs those paths).
 *
 * References (codegen_ref.h): integers exactly (wrapping like the kernels),
 * floats in the same order and precision as the kernels, so results must
 * match bit for bit (any NaN matches any NaN); float16/bfloat16 are computed
 * in float32 and rounded to nearest even.
 */
#define CF_CODEGEN_INTERNAL
#include "cf_test.h"

#include <dirent.h>
#include <fcntl.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <math.h>
#include <sys/stat.h>
#include <unistd.h>

#include "codegen/codegen.h"

/* ---- xorshift64* (the tests' only randomness; fixed seed) ---- */
static uint64_t rng = 0x9e3779b97f4a7c15ull;
static uint64_t xrand(void) {
  rng ^= rng >> 12;
  rng ^= rng << 25;
  rng ^= rng >> 27;
  return rng * 0x2545f4914f6cdd1dull;
}

#include "codegen_ref.h"

/* ---- data ---- */
static const float specials[] = {NAN,   -NAN, INFINITY, -INFINITY, 0.0f,
                                 -0.0f, 1.0f, -1.0f,    3.0e38f,   1.0e-45f};

static uint64_t rand_elem(cf_dtype dt, bool special) {
  if (dt == CF_DT_BOOL) return xrand() >> 63; /* 0 or 1, as bool holds */
  if (!isf(dt)) return wrap(xrand(), dt);
  if (special && xrand() % 32 == 0) {
    float s = specials[xrand() % (sizeof specials / sizeof *specials)];
    return dt == CF_DT_FLOAT64 ? from_d((double)s) : from_f(s, dt);
  }
  double v = (double)(xrand() >> 11) / 9007199254740992.0 * 8.0 - 4.0;
  return dt == CF_DT_FLOAT64 ? from_d(v) : from_f((float)v, dt);
}

/* ---- buffers with guard bytes ---- */
#define GUARD 64
typedef struct gbuf {
  unsigned char *raw, *p;
  size_t bytes;
} gbuf;

static void gbuf_new(gbuf *b, size_t bytes, int off) {
  b->raw = malloc(bytes + 2 * GUARD + 128);
  assert_non_null(b->raw);
  memset(b->raw, 0xa5, bytes + 2 * GUARD + 128);
  uintptr_t a = ((uintptr_t)(b->raw + GUARD) + 63) & ~(uintptr_t)63;
  b->p = (unsigned char *)a + off;
  b->bytes = bytes;
}
static void gbuf_check(const gbuf *b, const char *what) {
  for (int i = 1; i <= GUARD; i++)
    if (b->p[-i] != 0xa5) fail_msg("%s: guard byte %d before the buffer overwritten", what, i);
  for (size_t i = 0; i < GUARD; i++)
    if (b->p[b->bytes + i] != 0xa5)
      fail_msg("%s: guard byte %zu after the buffer overwritten", what, i);
}
static void gbuf_free(gbuf *b) { free(b->raw); }

static void *kernel(cf_context *c, cf_kernel_key k, double *ms) {
  void *fn = NULL;
  double t;
  if (cf_codegen_kernel(c, &k, &fn, ms ? ms : &t) != CF_OK) fail_msg("%s", cf_context_errmsg(c));
  assert_non_null(fn);
  return fn;
}

static void check(const cf_kernel_key *k, int64_t i, uint64_t got, uint64_t want,
                  const char *what) {
  cf_dtype dt = k->dtype;
  if (got == want || (isf(dt) && is_nan_bits(got, dt) && is_nan_bits(want, dt))) return;
  char name[64];
  fail_msg("%s %s: element %lld: got 0x%llx, want 0x%llx", cf_kernel_name(k, name, sizeof name),
           what, (long long)i, (unsigned long long)got, (unsigned long long)want);
}

static cf_codegen_target host;

/* lengths every kernel runs at */
static int lengths(const cf_kernel_key *k, int64_t *out) {
  int64_t w = cf_kernel_lanes(&host, k);
  int64_t l[] = {0, 1, w - 1, w, w + 1, 3 * w + 5};
  memcpy(out, l, sizeof l);
  return 6;
}
/* misalignment of the buffers: none, whole elements, odd bytes */
static int offset(int mode, int buf, cf_dtype dt) {
  if (mode == 0) return 0;
  if (mode == 1) return ((buf + 1) % 3) * esize(dt);
  return (buf % 5) + 1;
}

/* Random elements; beyond 4099 (prime, so sources differ) the first block
 * is repeated, which keeps 1M-element runs fast under the sanitizers. */
#define FILL_BLOCK 4099
static void fill(void *p, int64_t n, cf_dtype dt, bool special) {
  int64_t b = n < FILL_BLOCK ? n : FILL_BLOCK;
  for (int64_t i = 0; i < b; i++)
    st(p, i, dt, rand_elem(dt, special));
  for (int64_t i = b; i < n; i += b)
    memcpy((char *)p + i * esize(dt), p, (size_t)((n - i < b ? n - i : b) * esize(dt)));
}

/* Elements a large run checks: every 97th and the last 4 vectors' worth
 * (the vector loop's end and the scalar tail); small runs check all. */
static bool checked(int64_t i, int64_t n, int lanes) {
  return n <= 20000 || i % 97 == 0 || i >= n - 4 * lanes;
}

/* ---- n-ary ---- */
/* mode 0: every buffer 64-byte aligned; 1: misaligned by whole elements;
 * 2: by odd bytes; 3 (keys with outs): sources as 1, destination d
 * misaligned by d elements, so that no one peel aligns them all. A key with
 * outs writes that many destinations, each checked against the reference
 * and its guards. */
static void run_nary(cf_kernel_key k, int64_t n, int mode, double div, bool special) {
  void *p = kernel(ctx, k, NULL);
  cf_dtype dt = k.dtype;
  size_t bytes = (size_t)n * (size_t)esize(dt);
  int outs = k.outs ? k.outs : 1;
  gbuf src[CF_MAX_ARITY], dst[CF_MAX_ARITY];
  const void *sp[CF_MAX_ARITY];
  void *dp[CF_MAX_ARITY];
  for (int s = 0; s < k.arity; s++) {
    gbuf_new(&src[s], bytes, offset(mode == 3 ? 1 : mode, s + 1, dt));
    fill(src[s].p, n, dt, special);
    sp[s] = src[s].p;
  }
  for (int d = 0; d < outs; d++) {
    gbuf_new(&dst[d], bytes, mode == 3 ? d * esize(dt) % 64 : offset(mode, 0, dt));
    dp[d] = dst[d].p;
  }
  if (k.outs) {
    cf_kernel_nary_to_fn fn;
    memcpy(&fn, &p, sizeof fn);
    fn(dp, sp, n, div);
  } else {
    cf_kernel_nary_fn fn;
    memcpy(&fn, &p, sizeof fn);
    fn(dp[0], sp, n, div);
  }
  for (int d = 0; d < outs; d++)
    gbuf_check(&dst[d], "nary dst");
  for (int s = 0; s < k.arity; s++)
    gbuf_check(&src[s], "nary src");
  uint64_t x[CF_MAX_ARITY];
  int lanes = cf_kernel_lanes(&host, &k);
  for (int64_t i = 0; i < n; i++) {
    if (!checked(i, n, lanes)) continue;
    for (int s = 0; s < k.arity; s++)
      x[s] = ld(src[s].p, i, dt);
    uint64_t want = ref_nary(dt, k.red, k.arity, x, div);
    for (int d = 0; d < outs; d++)
      check(&k, i, ld(dst[d].p, i, dt), want, "nary");
  }
  for (int s = 0; s < k.arity; s++)
    gbuf_free(&src[s]);
  for (int d = 0; d < outs; d++)
    gbuf_free(&dst[d]);
}

static void test_nary(void **state) {
  (void)state;
  double worst = 0;
  for (cf_dtype dt = CF_DT_INT8; dt < CF_DT_COUNT; dt++)
    for (int r = 0; r < CF_RED_COUNT; r++)
      for (int a = 2; a <= CF_MAX_ARITY; a++) {
        cf_kernel_key k = {.kind = CF_K_NARY, .dtype = dt, .red = (cf_reduction)r, .arity = a};
        double ms;
        kernel(ctx, k, &ms);
        if (ms > worst) worst = ms;
        int64_t lens[8];
        int nl = lengths(&k, lens);
        for (int m = 0; m < 3; m++)
          for (int l = 0; l < nl; l++)
            run_nary(k, lens[l], m, a == 3 ? 3.0 : (double)a, true);
      }
  print_message("slowest n-ary kernel compile: %.1f ms\n", worst);
}

/* Plain keys with outs (one read of the sources, the result stored to
 * every destination with ordinary stores): every dtype, sum, max and mean,
 * one destination and as many as sources, every alignment mode, at the
 * vector-width lengths and at 70001 elements. */
static void test_nary_outs(void **state) {
  (void)state;
  static const cf_reduction reds[] = {CF_RED_SUM, CF_RED_MAX, CF_RED_MEAN};
  for (cf_dtype dt = CF_DT_INT8; dt < CF_DT_COUNT; dt++)
    for (int r = 0; r < 3; r++)
      for (int a = 2; a <= CF_MAX_ARITY; a *= 2)
        for (int o = 1; o <= a; o = o == 1 ? a : a + 1) {
          cf_kernel_key k = {.kind = CF_K_NARY, .dtype = dt, .red = reds[r], .arity = a, .outs = o};
          int64_t lens[8];
          int nl = lengths(&k, lens);
          lens[nl++] = 70001;
          for (int m = 0; m < 4; m++)
            for (int l = 0; l < nl; l++)
              run_nary(k, lens[l], m, (double)a, r != 2);
        }
  /* a key with outs is a kernel of its own */
  cf_kernel_key plain = {.kind = CF_K_NARY, .dtype = CF_DT_FLOAT32, .red = CF_RED_SUM, .arity = 2};
  cf_kernel_key two = plain, streamed = plain;
  two.outs = streamed.outs = 2;
  streamed.stream = true;
  void *fp = kernel(ctx, plain, NULL), *f2 = kernel(ctx, two, NULL), *fs = kernel(ctx, streamed, NULL);
  if (fp == f2 || f2 == fs) fail_msg("the kernels with destinations are not their own");
}

/* 1M elements (plus an odd tail) for each dtype, sum at arity 2 and 8 */
static void test_nary_large(void **state) {
  (void)state;
  for (cf_dtype dt = CF_DT_INT8; dt < CF_DT_COUNT; dt++)
    for (int a = 2; a <= CF_MAX_ARITY; a += 6)
      run_nary((cf_kernel_key){.kind = CF_K_NARY, .dtype = dt, .red = CF_RED_SUM, .arity = a},
               (1 << 20) + 3, 0, 1, false);
}

/* ---- accumulate ---- */
static void run_acc(cf_kernel_key k, int64_t n, int mode) {
  cf_kernel_acc_fn fn;
  void *p = kernel(ctx, k, NULL);
  memcpy(&fn, &p, sizeof fn);
  cf_dtype dt = k.dtype;
  size_t bytes = (size_t)n * (size_t)esize(dt);
  gbuf src, dst;
  gbuf_new(&src, bytes, offset(mode, 1, dt));
  gbuf_new(&dst, bytes, offset(mode, 0, dt));
  uint64_t *before = malloc((size_t)(n ? n : 1) * sizeof *before);
  assert_non_null(before);
  for (int64_t i = 0; i < n; i++) {
    st(src.p, i, dt, rand_elem(dt, true));
    st(dst.p, i, dt, before[i] = rand_elem(dt, true));
  }
  fn(dst.p, src.p, n);
  gbuf_check(&dst, "acc dst");
  gbuf_check(&src, "acc src");
  cf_reduction r = k.red == CF_RED_MEAN ? CF_RED_SUM : k.red; /* mean accumulates as sum */
  for (int64_t i = 0; i < n; i++) {
    uint64_t x[2] = {before[i], ld(src.p, i, dt)};
    check(&k, i, ld(dst.p, i, dt), ref_nary(dt, r, 2, x, 1), "acc");
  }
  free(before);
  gbuf_free(&src);
  gbuf_free(&dst);
}

static void test_acc(void **state) {
  (void)state;
  for (cf_dtype dt = CF_DT_INT8; dt < CF_DT_COUNT; dt++)
    for (int r = 0; r < CF_RED_COUNT; r++) {
      cf_kernel_key k = {.kind = CF_K_ACC, .dtype = dt, .red = (cf_reduction)r, .arity = 0};
      int64_t lens[8];
      int nl = lengths(&k, lens);
      for (int m = 0; m < 3; m++)
        for (int l = 0; l < nl; l++)
          run_acc(k, lens[l], m);
      run_acc(k, 20011, 2);
    }
}

/* ---- scale ---- */
static void run_scale(cf_kernel_key k, int64_t n, int mode, double div) {
  cf_kernel_scale_fn fn;
  void *p = kernel(ctx, k, NULL);
  memcpy(&fn, &p, sizeof fn);
  cf_dtype dt = k.dtype;
  gbuf dst;
  gbuf_new(&dst, (size_t)n * (size_t)esize(dt), offset(mode, 0, dt));
  uint64_t *before = malloc((size_t)(n ? n : 1) * sizeof *before);
  assert_non_null(before);
  for (int64_t i = 0; i < n; i++)
    st(dst.p, i, dt, before[i] = rand_elem(dt, true));
  fn(dst.p, n, div);
  gbuf_check(&dst, "scale dst");
  for (int64_t i = 0; i < n; i++)
    check(&k, i, ld(dst.p, i, dt), ref_scale(dt, before[i], div), "scale");
  free(before);
  gbuf_free(&dst);
}

static void test_scale(void **state) {
  (void)state;
  const double divs[] = {1, 3, 8, 7.5, 0, -2};
  for (cf_dtype dt = CF_DT_INT8; dt < CF_DT_COUNT; dt++) {
    cf_kernel_key k = {.kind = CF_K_SCALE, .dtype = dt, .red = CF_RED_SUM, .arity = 0};
    int64_t lens[8];
    int nl = lengths(&k, lens);
    for (int d = 0; d < 6; d++)
      for (int m = 0; m < 3; m++)
        for (int l = 0; l < nl; l++)
          if (isf(dt) ? divs[d] > 0 : true) run_scale(k, lens[l], m, divs[d]);
  }
}

/* integer division truncates toward zero, in scale and in the fused mean */
static void test_int_truncation(void **state) {
  (void)state;
  cf_kernel_scale_fn sc;
  void *p = kernel(
      ctx, (cf_kernel_key){.kind = CF_K_SCALE, .dtype = CF_DT_INT32, .red = CF_RED_SUM, .arity = 0},
      NULL);
  memcpy(&sc, &p, sizeof sc);
  int32_t v[6] = {-7, 7, -1, 5, INT32_MIN, INT32_MAX};
  sc(v, 6, 2);
  int32_t want[6] = {-3, 3, 0, 2, INT32_MIN / 2, INT32_MAX / 2};
  assert_memory_equal(v, want, sizeof v);
  int64_t w[3] = {INT64_MIN, -10, INT64_MAX};
  p = kernel(
      ctx, (cf_kernel_key){.kind = CF_K_SCALE, .dtype = CF_DT_INT64, .red = CF_RED_SUM, .arity = 0},
      NULL);
  memcpy(&sc, &p, sizeof sc);
  sc(w, 3, 3);
  assert_true(w[0] == INT64_MIN / 3 && w[1] == -3 && w[2] == INT64_MAX / 3);
  uint8_t u[2] = {255, 7};
  p = kernel(
      ctx, (cf_kernel_key){.kind = CF_K_SCALE, .dtype = CF_DT_UINT8, .red = CF_RED_SUM, .arity = 0},
      NULL);
  memcpy(&sc, &p, sizeof sc);
  sc(u, 2, 2);
  assert_true(u[0] == 127 && u[1] == 3);
  /* mean = sum / div: (-7 + 0) / 2 = -3, not floor's -4; int8 sums exactly */
  cf_kernel_nary_fn mean;
  p = kernel(
      ctx, (cf_kernel_key){.kind = CF_K_NARY, .dtype = CF_DT_INT8, .red = CF_RED_MEAN, .arity = 2},
      NULL);
  memcpy(&mean, &p, sizeof mean);
  int8_t a[2] = {-7, 127}, b[2] = {0, 127}, out[2];
  const void *src[2] = {a, b};
  mean(out, src, 2, 2);
  assert_true(out[0] == -3 && out[1] == 127);
}

/* ---- the QuantMatMul epilogue ---- */
static void run_quant(cf_dtype dt, int64_t m, int64_t n, int mode) {
  cf_kernel_key k = {.kind = CF_K_QUANT, .dtype = dt, .red = CF_RED_SUM, .arity = 0};
  cf_kernel_quant_fn fn;
  void *p = kernel(ctx, k, NULL);
  memcpy(&fn, &p, sizeof fn);
  gbuf acc, x1, x2, dst;
  gbuf_new(&acc, (size_t)(m * n) * 4, offset(mode, 1, CF_DT_INT32));
  gbuf_new(&x1, (size_t)m * 4, offset(mode, 2, CF_DT_FLOAT32));
  gbuf_new(&x2, (size_t)n * 4, offset(mode, 3, CF_DT_FLOAT32));
  gbuf_new(&dst, (size_t)(m * n) * 2, offset(mode, 0, dt));
  for (int64_t i = 0; i < m * n; i++)
    st(acc.p, i, CF_DT_INT32, xrand() >> (xrand() % 64));
  /* scales keep most products within float16's range, some specials */
  for (int64_t i = 0; i < m; i++)
    st(x1.p, i, CF_DT_FLOAT32, rand_elem(CF_DT_FLOAT32, true));
  for (int64_t j = 0; j < n; j++) {
    float s = ldexpf(fval(rand_elem(CF_DT_FLOAT32, false), CF_DT_FLOAT32), -20);
    st(x2.p, j, CF_DT_FLOAT32, f32_bits(s));
  }
  fn(dst.p, (const int32_t *)(void *)acc.p, (const float *)(void *)x1.p,
     (const float *)(void *)x2.p, m, n);
  gbuf_check(&dst, "quant dst");
  for (int64_t i = 0; i < m; i++)
    for (int64_t j = 0; j < n; j++) {
      float a = (float)(int32_t)ld(acc.p, i * n + j, CF_DT_INT32);
      float r = a * fval(ld(x1.p, i, CF_DT_FLOAT32), CF_DT_FLOAT32) *
                fval(ld(x2.p, j, CF_DT_FLOAT32), CF_DT_FLOAT32);
      check(&k, i * n + j, ld(dst.p, i * n + j, dt), from_f(r, dt), "quant");
    }
  gbuf_free(&acc);
  gbuf_free(&x1);
  gbuf_free(&x2);
  gbuf_free(&dst);
}

static void test_quant(void **state) {
  (void)state;
  for (cf_dtype dt = CF_DT_FLOAT16; dt <= CF_DT_BFLOAT16; dt++) {
    int64_t w = cf_kernel_lanes(
        &host, &(cf_kernel_key){.kind = CF_K_QUANT, .dtype = dt, .red = CF_RED_SUM, .arity = 0});
    int64_t dims[][2] = {{0, 5}, {3, 0},     {1, 1},         {2, w - 1},
                         {3, w}, {2, w + 1}, {5, 3 * w + 2}, {64, 300}};
    for (int m = 0; m < 3; m++)
      for (size_t d = 0; d < sizeof dims / sizeof *dims; d++)
        run_quant(dt, dims[d][0], dims[d][1], m);
  }
}

/* ---- edge values ---- */

/* every pair of specials through every float n-ary/acc kernel of arity 2 */
/* The streaming (non-temporal) NARY path of a stream key
 * (cf_kernel_key.stream; the executor decides when): 1 to 8 destinations
 * of 4 MiB, aligned, misaligned by whole elements (peeled to 64 bytes), by
 * odd bytes and against each other (the plain loop); with NaN, Inf and
 * signed zeros in the data; and at every length from two lines' worth:
 * below, at, just above, and far above that, with mean's division. A plain
 * key never streams (test_codegen's other tests run it at every size). */
static void test_nary_stream(void **state) {
  (void)state;
  for (cf_dtype dt = CF_DT_INT8; dt < CF_DT_COUNT; dt++) {
    int64_t n = (4 << 20) / esize(dt) + 77;
    for (int m = 0; m < 4; m++) {
      run_nary((cf_kernel_key){.kind = CF_K_NARY, .dtype = dt, .red = CF_RED_SUM, .arity = 3,
                               .stream = true, .outs = 1 + 2 * (m & 1)},
               n, m, 1, true);
      run_nary((cf_kernel_key){.kind = CF_K_NARY,
                               .dtype = dt,
                               .red = m == 1 ? CF_RED_MIN : CF_RED_MAX,
                               .arity = 2 + 2 * m,
                               .stream = true,
                               .outs = 2 + 2 * m},
               n, m, 1, true);
    }
    /* a stream key is a kernel of its own, not its plain twin's, and so is
     * each number of destinations */
    cf_kernel_key plain = {.kind = CF_K_NARY, .dtype = dt, .red = CF_RED_SUM, .arity = 2};
    cf_kernel_key one = plain, two = plain;
    one.stream = two.stream = true;
    one.outs = 1, two.outs = 2;
    void *fp = kernel(ctx, plain, NULL), *f1 = kernel(ctx, one, NULL), *f2 = kernel(ctx, two, NULL);
    if (fp == f1 || f1 == f2) fail_msg("%s: the stream kernels are not their own", cf_dtype_name(dt));
    static const int64_t lens[] = {1, 127, 128, 129, 1000, 70001};
    for (int l = 0; l < 6; l++)
      for (int m = 0; m < 4; m++) {
        cf_kernel_key k = {.kind = CF_K_NARY,
                           .dtype = dt,
                           .red = CF_RED_SUM,
                           .arity = 2,
                           .stream = true,
                           .outs = 1 + (m & 1)};
        run_nary(k, lens[l], m, 1, true);
        k.red = CF_RED_MEAN, k.arity = 8, k.outs = 8;
        run_nary(k, lens[l], m, 8, false);
      }
  }
}

/* The fast float max/min path on blocks without NaN: signed zeros meeting
 * in one lane at every arity (max(-0, +0) = +0, min = -0, in any order),
 * mixed with ordinary values of both signs and infinities. */
static void test_maxmin_zeros(void **state) {
  (void)state;
  static const float vals[] = {0.0f, -0.0f, 0.0f, -0.0f, 1.0f, -1.0f, INFINITY, -INFINITY, 1e-45f};
  const cf_dtype fts[] = {CF_DT_FLOAT16, CF_DT_BFLOAT16, CF_DT_FLOAT32, CF_DT_FLOAT64};
  enum { NV = sizeof vals / sizeof *vals, N = 1000 };
  for (int f = 0; f < 4; f++) {
    cf_dtype dt = fts[f];
    for (int r = CF_RED_MAX; r <= CF_RED_MIN; r++)
      for (int a = 1; a <= CF_MAX_ARITY; a++) {
        /* a == 1: the accumulate kernel */
        cf_kernel_key k =
            a == 1
                ? (cf_kernel_key){.kind = CF_K_ACC, .dtype = dt, .red = (cf_reduction)r, .arity = 0}
                : (cf_kernel_key){
                      .kind = CF_K_NARY, .dtype = dt, .red = (cf_reduction)r, .arity = a};
        int ar = a == 1 ? 2 : a;
        unsigned char in[CF_MAX_ARITY][N * 8], out[N * 8];
        uint64_t x[CF_MAX_ARITY][N];
        for (int s = 0; s < ar; s++)
          for (int i = 0; i < N; i++) {
            /* mostly zeros, so that whole vectors of them meet */
            float v = xrand() % 4 ? vals[xrand() % 4] : vals[xrand() % NV];
            x[s][i] = dt == CF_DT_FLOAT64 ? from_d((double)v) : from_f(v, dt);
            st(in[s], i, dt, x[s][i]);
          }
        void *p = kernel(ctx, k, NULL);
        if (a == 1) {
          cf_kernel_acc_fn fn;
          memcpy(&fn, &p, sizeof fn);
          memcpy(out, in[0], sizeof out);
          fn(out, in[1], N);
        } else {
          cf_kernel_nary_fn fn;
          memcpy(&fn, &p, sizeof fn);
          const void *sp[CF_MAX_ARITY];
          for (int s = 0; s < ar; s++)
            sp[s] = in[s];
          fn(out, sp, N, 1);
        }
        for (int i = 0; i < N; i++) {
          uint64_t xi[CF_MAX_ARITY];
          for (int s = 0; s < ar; s++)
            xi[s] = x[s][i];
          check(&k, i, ld(out, i, dt), ref_nary(dt, (cf_reduction)r, ar, xi, 1), "zeros");
        }
      }
  }
}

/* NaNs as bit patterns, per dtype: signalling, negative, with payloads
 * in the low bits (which a careless narrowing would round into Inf) */
static const uint64_t nan_bits[4][4] = {
    {0x7c01, 0xfc01, 0x7fff, 0xfe00},                 /* float16 */
    {0x7f81, 0xff81, 0x7fff, 0xffc0},                 /* bfloat16 */
    {0x7f800001, 0xff800001, 0x7fffffff, 0xffc00001}, /* float32 */
    {0x7ff0000000000001, 0xfff0000000000001, 0x7fffffffffffffff, 0xfff8000000000001}};

static void test_specials(void **state) {
  (void)state;
  const cf_dtype fts[] = {CF_DT_FLOAT16, CF_DT_BFLOAT16, CF_DT_FLOAT32, CF_DT_FLOAT64};
  enum { NF = sizeof specials / sizeof *specials, NS = NF + 4 };
  for (int f = 0; f < 4; f++) {
    cf_dtype dt = fts[f];
    uint64_t sp[NS], a[NS * NS], b[NS * NS], out[NS * NS];
    unsigned char ab[NS * NS * 8], bb[NS * NS * 8], ob[NS * NS * 8];
    for (int i = 0; i < NS; i++)
      sp[i] = i >= NF               ? nan_bits[f][i - NF]
              : dt == CF_DT_FLOAT64 ? from_d(specials[i])
                                    : from_f(specials[i], dt);
    for (int i = 0; i < NS; i++)
      for (int j = 0; j < NS; j++) {
        a[i * NS + j] = sp[i];
        b[i * NS + j] = sp[j];
        st(ab, i * NS + j, dt, a[i * NS + j]);
        st(bb, i * NS + j, dt, b[i * NS + j]);
      }
    for (int r = 0; r < CF_RED_COUNT; r++) {
      cf_kernel_key k = {.kind = CF_K_NARY, .dtype = dt, .red = (cf_reduction)r, .arity = 2};
      cf_kernel_nary_fn fn;
      void *p = kernel(ctx, k, NULL);
      memcpy(&fn, &p, sizeof fn);
      const void *src[2] = {ab, bb};
      fn(ob, src, NS * NS, 2);
      for (int i = 0; i < NS * NS; i++) {
        uint64_t x[2] = {a[i], b[i]};
        out[i] = ld(ob, i, dt);
        check(&k, i, out[i], ref_nary(dt, (cf_reduction)r, 2, x, 2), "specials");
      }
      /* spelled out: NaN wins max/min, -0 < +0, Inf - Inf is NaN */
      if (r == CF_RED_MAX || r == CF_RED_MIN) {
        assert_true(is_nan_bits(out[0 * NS + 6], dt) && is_nan_bits(out[6 * NS + 0], dt));
        uint64_t pz = ld(bb, 4, dt), nz = ld(bb, 5, dt); /* specials 4, 5: +0, -0 */
        assert_true(out[4 * NS + 5] == (r == CF_RED_MAX ? pz : nz));
        assert_true(out[5 * NS + 4] == (r == CF_RED_MAX ? pz : nz));
      }
      if (r == CF_RED_SUM) assert_true(is_nan_bits(out[2 * NS + 3], dt));
      /* the accumulate kernel on the same pairs */
      k = (cf_kernel_key){.kind = CF_K_ACC, .dtype = dt, .red = (cf_reduction)r, .arity = 0};
      cf_kernel_acc_fn acc;
      p = kernel(ctx, k, NULL);
      memcpy(&acc, &p, sizeof acc);
      memcpy(ob, ab, sizeof ob);
      acc(ob, bb, NS * NS);
      for (int i = 0; i < NS * NS; i++) {
        uint64_t x[2] = {a[i], b[i]};
        check(&k, i, ld(ob, i, dt),
              ref_nary(dt, r == CF_RED_MEAN ? CF_RED_SUM : (cf_reduction)r, 2, x, 1), "specials");
      }
    }
  }
}

/* float16/bfloat16 rounding in the vector loops (not only the scalar
 * tails): ties to even, carries into the exponent, overflow to Inf, NaNs
 * with payloads, signed zeros, and subnormal results, which the native
 * bfloat16 conversion (vcvtne2ps2bf16 flushes them to zero) must leave to
 * the integer rounding. Pairs (a, b) of cases fill every third element of
 * 4 vectors and a tail, random values the rest; a second run leaves out
 * the cases with subnormal results, so that whole blocks take the fast
 * conversion. Sum, product and mean of 2 and 3 sources (the third +0),
 * accumulate, and scale by 2 and 3, against the reference. */
typedef struct case16 {
  uint16_t a, b;
  bool sub; /* a subnormal sum, product, mean or quotient */
} case16;

static const case16 bf16_cases[] = {
    {0x3f80, 0x3b80, 0}, /* 1 + 2^-8: tie, down to even 1.0 */
    {0x3f81, 0x3b80, 0}, /* tie, up to even 0x3f82 */
    {0x3fff, 0x3b80, 0}, /* carries into the exponent: 2.0 */
    {0xbf81, 0xbb80, 0}, /* negative tie */
    {0x7f7f, 0x7f7f, 0}, /* overflows to Inf */
    {0x7f80, 0xff80, 0}, /* Inf - Inf = NaN */
    {0x7f81, 0x3f80, 0}, /* signalling NaN */
    {0xffff, 0x3f80, 0}, /* NaN, all payload bits */
    {0x8000, 0x8000, 0}, /* -0 */
    {0x0040, 0x0001, 1}, /* subnormal sum */
    {0x8040, 0x0001, 1}, /* negative subnormal sum */
    {0x0080, 0x8001, 1}, /* smallest normal - subnormal */
    {0x0041, 0x3fc0, 1}, /* 65 * 1.5 = 97.5 units: a subnormal tie (product, mean) */
    {0x0043, 0x3fc0, 1}, /* 100.5 units */
    {0x4000, 0x3f81, 0}, /* 2 * 1.0078125: exact product */
    {0x3f81, 0x3f81, 0}, /* 1.0078125^2: rounds */
};

static const case16 f16_cases[] = {
    {0x3c00, 0x1000, 0}, /* 1 + 2^-11: tie, down to even */
    {0x3c01, 0x1000, 0}, /* tie, up */
    {0x7bff, 0x4c00, 0}, /* 65504 + 16: halfway to 65536, to Inf */
    {0x7c01, 0x3c00, 0}, /* signalling NaN */
    {0xfc01, 0x3c00, 0}, /* negative signalling NaN */
    {0x7c00, 0xfc00, 0}, /* Inf - Inf */
    {0x8000, 0x8000, 0}, /* -0 */
    {0x0001, 0x0001, 1}, /* subnormals */
    {0x0003, 0x3800, 1}, /* 3 * 0.5 = 1.5 units: tie (product) */
    {0x0400, 0x8001, 1}, /* smallest normal - subnormal */
    {0x3555, 0x3555, 0}, /* 1/3 * 1/3 rounds */
};

static void run_cases16(cf_dtype dt, bool with_sub) {
  const case16 *cs = dt == CF_DT_BFLOAT16 ? bf16_cases : f16_cases;
  int nc = dt == CF_DT_BFLOAT16 ? (int)(sizeof bf16_cases / sizeof *bf16_cases)
                                : (int)(sizeof f16_cases / sizeof *f16_cases);
  cf_kernel_key probe = {.kind = CF_K_NARY, .dtype = dt, .red = CF_RED_SUM, .arity = 2};
  int lanes = cf_kernel_lanes(&host, &probe), n = 4 * lanes + 7;
  uint16_t a[1024], b[1024], z[1024], o[1024];
  assert_true(n <= 1024);
  int c = 0;
  for (int i = 0; i < n; i++) {
    if (i % 3 == 0) {
      while (cs[c % nc].sub && !with_sub)
        c++;
      a[i] = cs[c % nc].a;
      b[i] = cs[c % nc].b;
      c++;
    } else {
      a[i] = (uint16_t)rand_elem(dt, false);
      b[i] = (uint16_t)rand_elem(dt, false);
    }
    z[i] = 0;
  }
  const cf_reduction reds[] = {CF_RED_SUM, CF_RED_PROD, CF_RED_MEAN, CF_RED_MAX, CF_RED_MIN};
  for (int r = 0; r < 5; r++)
    for (int ar = 2; ar <= 3; ar++) {
      cf_kernel_key k = {.kind = CF_K_NARY, .dtype = dt, .red = reds[r], .arity = ar};
      cf_kernel_nary_fn fn;
      void *p = kernel(ctx, k, NULL);
      memcpy(&fn, &p, sizeof fn);
      fn(o, (const void *[]){a, b, z}, n, ar);
      for (int i = 0; i < n; i++) {
        uint64_t x[3] = {a[i], b[i], z[i]};
        check(&k, i, o[i], ref_nary(dt, reds[r], ar, x, ar), "cases");
      }
      if (ar == 3 || reds[r] == CF_RED_MEAN) continue;
      k = (cf_kernel_key){.kind = CF_K_ACC, .dtype = dt, .red = reds[r], .arity = 0};
      cf_kernel_acc_fn acc;
      p = kernel(ctx, k, NULL);
      memcpy(&acc, &p, sizeof acc);
      memcpy(o, a, sizeof o);
      acc(o, b, n);
      for (int i = 0; i < n; i++) {
        uint64_t x[2] = {a[i], b[i]};
        check(&k, i, o[i], ref_nary(dt, reds[r], 2, x, 1), "cases");
      }
    }
  cf_kernel_key k = {.kind = CF_K_SCALE, .dtype = dt, .red = CF_RED_SUM, .arity = 0};
  cf_kernel_scale_fn sc;
  void *p = kernel(ctx, k, NULL);
  memcpy(&sc, &p, sizeof sc);
  for (int d = 2; d <= 3; d++) {
    memcpy(o, a, sizeof o);
    sc(o, n, d);
    for (int i = 0; i < n; i++)
      check(&k, i, o[i], ref_scale(dt, a[i], d), "cases");
  }
}

static void test_16bit_vectors(void **state) {
  (void)state;
  for (int sub = 0; sub < 2; sub++) {
    run_cases16(CF_DT_BFLOAT16, sub);
    run_cases16(CF_DT_FLOAT16, sub);
  }
}

/* integer sums and products wrap (two's complement) */
static void test_int_wrap(void **state) {
  (void)state;
  cf_kernel_nary_fn fn;
  void *p = kernel(
      ctx, (cf_kernel_key){.kind = CF_K_NARY, .dtype = CF_DT_INT8, .red = CF_RED_SUM, .arity = 2},
      NULL);
  memcpy(&fn, &p, sizeof fn);
  int8_t a8[2] = {127, -128}, b8[2] = {1, -1}, o8[2];
  fn(o8, (const void *[]){a8, b8}, 2, 1);
  assert_true(o8[0] == -128 && o8[1] == 127);
  p = kernel(
      ctx, (cf_kernel_key){.kind = CF_K_NARY, .dtype = CF_DT_UINT8, .red = CF_RED_SUM, .arity = 3},
      NULL);
  memcpy(&fn, &p, sizeof fn);
  uint8_t u[1] = {255}, v[1] = {1}, w[1] = {2}, ou[1];
  fn(ou, (const void *[]){u, v, w}, 1, 1);
  assert_int_equal(ou[0], 2);
  p = kernel(
      ctx, (cf_kernel_key){.kind = CF_K_NARY, .dtype = CF_DT_INT32, .red = CF_RED_PROD, .arity = 2},
      NULL);
  memcpy(&fn, &p, sizeof fn);
  int32_t a32[1] = {65536}, b32[1] = {65536}, o32[1];
  fn(o32, (const void *[]){a32, b32}, 1, 1);
  assert_int_equal(o32[0], 0);
  cf_kernel_acc_fn acc;
  p = kernel(ctx,
             (cf_kernel_key){.kind = CF_K_ACC, .dtype = CF_DT_INT64, .red = CF_RED_SUM, .arity = 0},
             NULL);
  memcpy(&acc, &p, sizeof acc);
  int64_t d64[1] = {INT64_MAX}, s64[1] = {1};
  acc(d64, s64, 1);
  assert_true(d64[0] == INT64_MIN);
}

/* round to nearest, ties to even, in float16 and bfloat16; NaN stays NaN */
static void test_16bit_ties(void **state) {
  (void)state;
  cf_kernel_nary_fn fn;
  void *p = kernel(
      ctx,
      (cf_kernel_key){.kind = CF_K_NARY, .dtype = CF_DT_BFLOAT16, .red = CF_RED_SUM, .arity = 2},
      NULL);
  memcpy(&fn, &p, sizeof fn);
  /* 1 + 2^-8 is halfway between bfloat16 1.0 and 1.0078125: even is 1.0;
   * 1.0078125 + 2^-8 goes up to the even 1.015625; 1.9921875 + 2^-8 carries
   * into the exponent; bfloat16 NaN (signalling) + 1 is NaN */
  uint16_t a[4] = {0x3f80, 0x3f81, 0x3fff, 0x7f81}, b[4] = {0x3b80, 0x3b80, 0x3b80, 0x3f80}, o[4];
  fn(o, (const void *[]){a, b}, 4, 1);
  assert_int_equal(o[0], 0x3f80);
  assert_int_equal(o[1], 0x3f82);
  assert_int_equal(o[2], 0x4000);
  assert_true((o[3] & 0x7fff) > 0x7f80);
  p = kernel(
      ctx,
      (cf_kernel_key){.kind = CF_K_NARY, .dtype = CF_DT_FLOAT16, .red = CF_RED_SUM, .arity = 2},
      NULL);
  memcpy(&fn, &p, sizeof fn);
  /* float16: 1 + 2^-11 ties to 1.0; (1 + 2^-10) + 2^-11 to 1 + 2^-9;
   * 65504 + 16 (halfway to 65536) rounds to Inf */
  uint16_t c[3] = {0x3c00, 0x3c01, 0x7bff}, d[3] = {0x1000, 0x1000, 0x4c00}, q[3];
  fn(q, (const void *[]){c, d}, 3, 1);
  assert_int_equal(q[0], 0x3c00);
  assert_int_equal(q[1], 0x3c02);
  assert_int_equal(q[2], 0x7c00);
  /* a NaN scale makes a NaN; rounding its low payload bits as if it were
   * a number would give Inf (0x7f800001) or carry into the sign (0x7fffffff) */
  cf_kernel_quant_fn qf;
  p = kernel(
      ctx,
      (cf_kernel_key){.kind = CF_K_QUANT, .dtype = CF_DT_BFLOAT16, .red = CF_RED_SUM, .arity = 0},
      NULL);
  memcpy(&qf, &p, sizeof qf);
  int32_t acc[2] = {3, 3};
  float x1[2] = {bits_f32(0x7f800001), bits_f32(0x7fffffff)}, x2[1] = {1};
  uint16_t out[2];
  qf(out, acc, x1, x2, 2, 1);
  assert_true((out[0] & 0x7fff) > 0x7f80);
  assert_true((out[1] & 0x7fff) > 0x7f80);
}

/* ---- keys, names, errors ---- */
static void test_keys(void **state) {
  (void)state;
  char buf[64], why[128];
  static const struct {
    cf_kernel_key k;
    const char *name, *why; /* why: NULL for a valid key */
  } keys[] = {
      {{.kind = CF_K_NARY, .dtype = CF_DT_FLOAT32, .red = CF_RED_SUM, .arity = 4},
       "cf_nary_sum_float32_4",
       NULL},
      {{.kind = CF_K_ACC, .dtype = CF_DT_BFLOAT16, .red = CF_RED_MAX, .arity = 0},
       "cf_acc_max_bfloat16",
       NULL},
      {{.kind = CF_K_SCALE, .dtype = CF_DT_INT8, .red = CF_RED_SUM, .arity = 0},
       "cf_scale_int8",
       NULL},
      {{.kind = CF_K_QUANT, .dtype = CF_DT_BFLOAT16, .red = CF_RED_SUM, .arity = 0},
       "cf_quant_bfloat16",
       NULL},
      {{.kind = CF_K_NARY, .dtype = CF_DT_FLOAT32, .red = CF_RED_SUM, .arity = 9},
       "cf_nary_sum_float32_9",
       "arity 9 out of range 2..8"},
      {{.kind = CF_K_QUANT, .dtype = CF_DT_FLOAT32, .red = CF_RED_SUM, .arity = 0},
       "cf_quant_float32",
       "bfloat16 or float16"},
      {{.kind = CF_K_ACC, .dtype = CF_DT_INVALID, .red = CF_RED_SUM, .arity = 0},
       "cf_acc_sum_invalid",
       "invalid dtype"},
      {{.kind = CF_K_ACC, .dtype = CF_DT_INT8, .red = CF_RED_SUM, .arity = 2},
       "cf_acc_sum_int8",
       "acc kernels take arity 0, not 2"},
      {{.kind = CF_K_NARY, .dtype = CF_DT_FLOAT32, .red = CF_RED_SUM, .arity = 4, .stream = true,
        .outs = 4},
       "cf_nary_sum_float32_4_nt4",
       NULL},
      {{.kind = CF_K_NARY, .dtype = CF_DT_FLOAT32, .red = CF_RED_SUM, .arity = 4, .stream = true},
       "cf_nary_sum_float32_4_nt0",
       "writes 1..8 destinations, not 0"},
      {{.kind = CF_K_NARY, .dtype = CF_DT_FLOAT32, .red = CF_RED_SUM, .arity = 2, .stream = true,
        .outs = 9},
       "cf_nary_sum_float32_2_nt9",
       "writes 1..8 destinations, not 9"},
      {{.kind = CF_K_NARY, .dtype = CF_DT_FLOAT32, .red = CF_RED_SUM, .arity = 2, .outs = 2},
       "cf_nary_sum_float32_2_x2",
       NULL},
      {{.kind = CF_K_NARY, .dtype = CF_DT_FLOAT32, .red = CF_RED_SUM, .arity = 2, .outs = -1},
       "cf_nary_sum_float32_2_x-1",
       "writes 0..8 destinations, not -1"},
      {{.kind = CF_K_ACC, .dtype = CF_DT_FLOAT32, .red = CF_RED_SUM, .outs = 2},
       "cf_acc_sum_float32",
       "only n-ary kernels take destinations"},
  };
  for (size_t i = 0; i < sizeof keys / sizeof *keys; i++) {
    assert_string_equal(cf_kernel_name(&keys[i].k, buf, sizeof buf), keys[i].name);
    assert_int_equal(cf_kernel_key_valid(&keys[i].k, why, sizeof why), keys[i].why == NULL);
    if (keys[i].why && !strstr(why, keys[i].why)) fail_msg("'%s' lacks '%s'", why, keys[i].why);
  }
  void *fn = (void *)1;
  double ms = 5;
  ASSERT_ERR(
      cf_codegen_kernel(
          ctx,
          &(cf_kernel_key){.kind = CF_K_NARY, .dtype = CF_DT_INT32, .red = CF_RED_MAX, .arity = 1},
          &fn, &ms),
      CF_ERR_USAGE, "cf_nary_max_int32_1: arity 1 out of range");
  assert_null(fn);
  ASSERT_ERR(cf_codegen_kernel(
                 ctx,
                 &(cf_kernel_key){
                     .kind = CF_K_QUANT, .dtype = CF_DT_FLOAT32, .red = CF_RED_SUM, .arity = 0},
                 &fn, &ms),
             CF_ERR_USAGE, "bfloat16 or float16");
  cf_codegen_target t;
  ASSERT_ERR(cf_codegen_target_nvptx(ctx, "sm90", &t), CF_ERR_USAGE,
             "'sm90' is not of the form sm_NN");
  /* a kernel is compiled once per context */
  cf_kernel_key k = {.kind = CF_K_ACC, .dtype = CF_DT_FLOAT64, .red = CF_RED_PROD, .arity = 0};
  void *f1 = kernel(ctx, k, NULL), *f2 = kernel(ctx, k, &ms);
  assert_ptr_equal(f1, f2);
  assert_true(ms == 0);
}

/* ---- generated code ---- */
static char *emit(cf_context *c, const cf_codegen_target *t, const cf_kernel_key *keys, int n) {
  LLVMContextRef lc = LLVMContextCreate();
  LLVMModuleRef mod;
  LLVMTargetMachineRef tm;
  if (cf_codegen_module(c, t, keys, n, lc, &mod) != CF_OK || cf_codegen_machine(c, t, &tm) != CF_OK)
    fail_msg("%s", cf_context_errmsg(c));
  LLVMMemoryBufferRef mb;
  char *err = NULL;
  if (LLVMTargetMachineEmitToMemoryBuffer(tm, mod, LLVMAssemblyFile, &err, &mb))
    fail_msg("%s", err);
  size_t len = LLVMGetBufferSize(mb);
  char *s = malloc(len + 1);
  assert_non_null(s);
  memcpy(s, LLVMGetBufferStart(mb), len);
  s[len] = '\0';
  LLVMDisposeMemoryBuffer(mb);
  LLVMDisposeModule(mod);
  LLVMDisposeTargetMachine(tm);
  LLVMContextDispose(lc);
  return s;
}

/* the float32 sum adds in the host's widest vector registers */
static void test_vector_width(void **state) {
  (void)state;
  const char *reg = host.vector_bits >= 512 ? "%zmm" : host.vector_bits >= 256 ? "%ymm" : "%xmm";
  assert_int_equal(cf_kernel_lanes(&host, &(cf_kernel_key){.kind = CF_K_NARY,
                                                           .dtype = CF_DT_FLOAT32,
                                                           .red = CF_RED_SUM,
                                                           .arity = 2}),
                   host.vector_bits / 32);
  cf_kernel_key k = {.kind = CF_K_NARY, .dtype = CF_DT_FLOAT32, .red = CF_RED_SUM, .arity = 2};
  char *s = emit(ctx, &host, &k, 1);
  if (strncmp(host.triple, "x86_64", 6) == 0) {
    bool found = false;
    for (char *line = strtok(s, "\n"); line && !found; line = strtok(NULL, "\n"))
      found = strstr(line, "addps") && strstr(line, reg);
    if (!found)
      fail_msg("no vector add on %s registers (host %s, %d bits)", reg, host.cpu, host.vector_bits);
  }
  free(s);
  /* only a stream key stores with movnt (the executor chooses it) and
   * prefetches its sources, not a plain one with or without outs */
  if (strncmp(host.triple, "x86_64", 6) == 0)
    for (int v = 0; v < 3; v++) {
      int st = v == 1;
      k.stream = st;
      k.outs = v ? 4 : 0;
      s = emit(ctx, &host, &k, 1);
      if (!strstr(s, "movnt") != !st)
        fail_msg("the %s kernel %s streaming stores", st ? "stream" : "plain", st ? "lacks" : "has");
      if (!strstr(s, "prefetch") != !st)
        fail_msg("the %s kernel %s prefetches", st ? "stream" : "plain", st ? "lacks" : "has");
      free(s);
    }
}

/* NVPTX: kernels are .entry points with a grid-stride loop */
static void test_nvptx(void **state) {
  (void)state;
  cf_codegen_target t;
  assert_int_equal(cf_codegen_target_nvptx(ctx, NULL, &t), CF_OK);
  assert_string_equal(t.cpu, "sm_90");
  cf_kernel_key keys[3] = {
      {.kind = CF_K_NARY, .dtype = CF_DT_BFLOAT16, .red = CF_RED_SUM, .arity = 4},
      {.kind = CF_K_SCALE, .dtype = CF_DT_FLOAT32, .red = CF_RED_SUM, .arity = 0},
      {.kind = CF_K_QUANT, .dtype = CF_DT_FLOAT16, .red = CF_RED_SUM, .arity = 0}};
  char *s = emit(ctx, &t, keys, 3);
  const char *want[] = {".target sm_90",
                        ".entry cf_nary_sum_bfloat16_4",
                        ".entry cf_scale_float32",
                        ".entry cf_quant_float16",
                        "%tid.x",
                        "%ntid.x",
                        "%ctaid.x",
                        "%nctaid.x"};
  for (size_t i = 0; i < sizeof want / sizeof *want; i++)
    if (!strstr(s, want[i])) fail_msg("PTX lacks '%s'", want[i]);
  free(s);
}

/* ---- the object cache ---- */
/* Entries (every name but ".", ".." and the key: temporaries count) in dir;
 * *first gets the path of the first "*.o". */
/* The entries of dir but its key; first gets the path of the 3-ary float32
 * sum's entry (the kernel a fresh compile times first), whatever order the
 * directory lists them in (their names hold the generator's hash). */
static int count_objects(const char *dir, char *first, size_t len) {
  DIR *d = opendir(dir);
  if (!d) return 0;
  int n = 0;
  bool found = false;
  const char *want = "cf_nary_sum_float32_3-";
  for (struct dirent *e; (e = readdir(d));) {
    if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..") || !strcmp(e->d_name, "key")) continue;
    size_t nl = strlen(e->d_name); /* the host's target record (objcache.c) */
    if (!strncmp(e->d_name, "host-", 5) && nl > 2 && !strcmp(e->d_name + nl - 2, ".t")) continue;
    n++;
    size_t l = strlen(e->d_name);
    if (!found && first && l > 2 && !strcmp(e->d_name + l - 2, ".o") &&
        !strncmp(e->d_name, want, strlen(want))) {
      snprintf(first, len, "%s/%s", dir, e->d_name);
      found = true;
    }
  }
  closedir(d);
  return n;
}

static void rm_tree(const char *dir) {
  char sub[512], path[1024];
  snprintf(sub, sizeof sub, "%s/collfuse", dir);
  DIR *d = opendir(sub);
  if (d) {
    for (struct dirent *e; (e = readdir(d));)
      if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) {
        snprintf(path, sizeof path, "%s/%s", sub, e->d_name);
        unlink(path);
      }
    closedir(d);
    rmdir(sub);
  }
  rmdir(dir);
}


/* a fresh context's compile time for the 3-ary float32 sum, checking the
 * kernel computes (and with second, then the 2-ary float32 max in the same
 * context); *log gets what the context logged */
static double fresh_compile_in(cf_logbuf *log, bool second) {
  cf_context *c;
  assert_int_equal(cf_context_create(&c), CF_OK);
  if (log) {
    log->text[0] = '\0';
    cf_context_set_log(c, cf_logbuf_sink, log);
  }
  double ms = -1;
  cf_kernel_nary_fn fn;
  void *p = kernel(
      c, (cf_kernel_key){.kind = CF_K_NARY, .dtype = CF_DT_FLOAT32, .red = CF_RED_SUM, .arity = 3},
      &ms);
  memcpy(&fn, &p, sizeof fn);
  float a[40], b[40], d[40], o[40];
  for (int i = 0; i < 40; i++)
    a[i] = (float)i, b[i] = 0.5f, d[i] = -1;
  fn(o, (const void *[]){a, b, d}, 40, 1);
  for (int i = 0; i < 40; i++)
    assert_true(o[i] == (float)i - 0.5f);
  if (second) {
    p = kernel(
        c, (cf_kernel_key){.kind = CF_K_NARY, .dtype = CF_DT_FLOAT32, .red = CF_RED_MAX, .arity = 2},
        NULL);
    memcpy(&fn, &p, sizeof fn);
    fn(o, (const void *[]){a, d}, 40, 1);
    for (int i = 0; i < 40; i++)
      assert_true(o[i] == (float)i);
  }
  cf_context_destroy(c);
  return ms;
}

static double fresh_compile(cf_logbuf *log) { return fresh_compile_in(log, false); }

static void corrupt(const char *path, long at, bool truncate_it) {
  struct stat sb;
  assert_int_equal(stat(path, &sb), 0);
  if (truncate_it) {
    assert_int_equal(truncate(path, sb.st_size / 2), 0);
    return;
  }
  FILE *f = fopen(path, "r+b");
  assert_non_null(f);
  if (at < 0) at = (long)sb.st_size / 2;
  fseek(f, at, SEEK_SET);
  int ch = fgetc(f);
  fseek(f, at, SEEK_SET);
  fputc(ch ^ 0x10, f);
  fclose(f);
}

/* The entry's key, DIR/key beside it. */
static void cache_key(const char *entry, unsigned char key[32]) {
  char path[600];
  snprintf(path, sizeof path, "%s", entry);
  snprintf(strrchr(path, '/') + 1, 4, "key");
  FILE *f = fopen(path, "rb");
  assert_non_null(f);
  assert_int_equal(fread(key, 1, 32, f), 32);
  fclose(f);
}

/* The whole file at path, *n bytes. */
static unsigned char *slurp(const char *path, size_t *n) {
  struct stat sb;
  assert_int_equal(stat(path, &sb), 0);
  unsigned char *b = malloc((size_t)sb.st_size);
  FILE *f = fopen(path, "rb");
  assert_true(b && f);
  assert_int_equal(fread(b, 1, (size_t)sb.st_size, f), (size_t)sb.st_size);
  fclose(f);
  *n = (size_t)sb.st_size;
  return b;
}

static void spill(const char *path, const unsigned char *b, size_t n) {
  FILE *f = fopen(path, "r+b");
  assert_non_null(f);
  assert_int_equal(fwrite(b, 1, n, f), n);
  fclose(f);
}

/* Flip a header byte at `at` and seal the entry anew with the user's key
 * (HMAC-SHA256 over the header, its MAC taken as zero, and the payload): a
 * well-formed entry that differs in that field alone. */
static void reseal(const char *path, long at) {
  size_t n;
  unsigned char *b = slurp(path, &n), key[32], mac[32];
  unsigned len = 0;
  cache_key(path, key);
  b[at] ^= 0x10;
  memset(b + 64, 0, 32);
  assert_non_null(HMAC(EVP_sha256(), key, 32, b, n, mac, &len));
  memcpy(b + 64, mac, 32);
  spill(path, b, n);
  free(b);
}

static void test_object_cache(void **state) {
  (void)state;
  char dir[] = "/tmp/cf_cgtest_XXXXXX", sub[64], file[512];
  assert_non_null(mkdtemp(dir));
  snprintf(sub, sizeof sub, "%s/collfuse", dir);
  setenv("XDG_CACHE_HOME", dir, 1);
  unsetenv("COLLFUSE_CACHE");
  cf_logbuf log;

  assert_true(fresh_compile(NULL) > 0); /* compiled and stored */
  assert_int_equal(count_objects(sub, file, sizeof file), 1);
  assert_true(fresh_compile(NULL) == 0); /* a second "process" compiles nothing */

  corrupt(file, -1, false); /* a flipped payload byte */
  assert_true(fresh_compile(&log) > 0);
  assert_non_null(strstr(log.text, "stale kernel cache entry (MAC mismatch"));
  assert_true(fresh_compile(NULL) == 0); /* rewritten */

  corrupt(file, 0, true); /* truncated */
  assert_true(fresh_compile(&log) > 0);
  assert_non_null(strstr(log.text, "stale kernel cache entry"));
  assert_true(fresh_compile(NULL) == 0);

  char other[600]; /* an entry under another kernel's name */
  snprintf(other, sizeof other, "%s", file);
  memcpy(strstr(other, "float32_3-"), "float32_2-", 10);
  assert_int_equal(rename(file, other), 0);
  cf_context *c;
  assert_int_equal(cf_context_create(&c), CF_OK);
  cf_context_set_log(c, cf_logbuf_sink, &log);
  log.text[0] = '\0';
  double ms = 0;
  kernel(c,
         (cf_kernel_key){.kind = CF_K_NARY, .dtype = CF_DT_FLOAT32, .red = CF_RED_SUM, .arity = 2},
         &ms);
  assert_true(ms > 0);
  assert_non_null(strstr(log.text, "holds another kernel"));
  cf_context_destroy(c);
  assert_true(fresh_compile(NULL) > 0);
  assert_true(fresh_compile(NULL) == 0);

  corrupt(file, 20, false); /* header: the LLVM version */
  assert_true(fresh_compile(&log) > 0);
  assert_non_null(strstr(log.text, "MAC mismatch"));
  assert_true(fresh_compile(NULL) == 0);

  /* a sound entry of another target or generator (the target hash takes in
   * CF_GENERATOR_HASH, the build's hash of the generator's sources) */
  reseal(file, 50);
  assert_true(fresh_compile(&log) > 0);
  assert_non_null(strstr(log.text, "built for another target or by another generator"));
  assert_true(fresh_compile(NULL) == 0);
  assert_int_equal(count_objects(sub, NULL, 0), 2); /* no temporary files left */

  char dir2[] = "/tmp/cf_cgtest_XXXXXX", sub2[64];
  assert_non_null(mkdtemp(dir2));
  snprintf(sub2, sizeof sub2, "%s/collfuse", dir2);
  setenv("XDG_CACHE_HOME", dir2, 1);
  setenv("COLLFUSE_CACHE", "off", 1);
  assert_true(fresh_compile(NULL) > 0);
  assert_true(fresh_compile(NULL) > 0); /* nothing cached across contexts */
  struct stat sb;
  assert_int_not_equal(stat(sub2, &sb), 0); /* and nothing written */

  rm_tree(dir);
  rm_tree(dir2);
}

/* A fresh context's compile time for the 3-ary float32 sum (checked as
 * fresh_compile does) after which it compiles a second kernel, the 2-ary
 * float32 max; *warnings gets the warnings it logged, log the text. */
static double compile_two(cf_logbuf *log, int *warnings) {
  double ms = fresh_compile_in(log, true);
  *warnings = 0;
  for (const char *p = log->text; (p = strstr(p, "the cache is ignored")); p++) ++*warnings;
  return ms;
}

/* The trust rule: a cache that someone else could have written is not read
 * (nor written), with one warning per context and kernels built in memory;
 * an entry forged without the user's key is rebuilt. */
static void test_object_cache_trust(void **state) {
  (void)state;
  char dir[] = "/tmp/cf_cgtrust_XXXXXX", sub[64], file[512], key[600], aside[600];
  assert_non_null(mkdtemp(dir));
  snprintf(sub, sizeof sub, "%s/collfuse", dir);
  snprintf(aside, sizeof aside, "%s/aside.o", dir);
  setenv("XDG_CACHE_HOME", dir, 1);
  unsetenv("COLLFUSE_CACHE");
  cf_logbuf log;
  int warns;
  struct stat sb;

  assert_true(compile_two(&log, &warns) > 0 && warns == 0); /* compiled and stored */
  assert_true(compile_two(&log, &warns) == 0 && warns == 0); /* from the cache */
  assert_int_equal(count_objects(sub, file, sizeof file), 2);
  snprintf(key, sizeof key, "%s/key", sub);
  assert_int_equal(stat(key, &sb), 0); /* the user's secret, 0600 */
  assert_int_equal(sb.st_mode & 0777, 0600);
  assert_int_equal(sb.st_size, 32);

#define DISTRUSTED(what)                                                                           \
  do {                                                                                             \
    assert_true(compile_two(&log, &warns) > 0);                                                    \
    if (warns != 1 || !strstr(log.text, what))                                                     \
      fail_msg("expected one warning '%s', got %d:\n%s", what, warns, log.text);                   \
    assert_true(compile_two(&log, &warns) > 0); /* and off again: never trusted since */        \
  } while (0)
#define TRUSTED()                                                                                  \
  do {                                                                                             \
    assert_true(compile_two(&log, &warns) == 0);                                                   \
    assert_int_equal(warns, 0);                                                                    \
  } while (0)

  /* a directory anyone may write */
  assert_int_equal(chmod(sub, 0777), 0);
  DISTRUSTED("writable by group or others (mode 0777)");
  assert_int_equal(chmod(sub, 0700), 0);
  TRUSTED();

  /* a directory of another user's (only root can make one here) */
  if (geteuid() == 0) {
    assert_int_equal(chown(sub, 65534, 65534), 0);
    DISTRUSTED("owned by uid 65534, not by this user (uid 0)");
    assert_int_equal(chown(sub, 0, 0), 0);
    TRUSTED();
  }

  /* an entry the group may write */
  assert_int_equal(chmod(file, 0620), 0);
  DISTRUSTED("writable by group or others (mode 0620)");
  assert_int_equal(chmod(file, 0600), 0);
  TRUSTED();

  /* the directory a symbolic link (to a sound cache) */
  char dir2[] = "/tmp/cf_cgtrust_XXXXXX", link[64];
  assert_non_null(mkdtemp(dir2));
  snprintf(link, sizeof link, "%s/collfuse", dir2);
  assert_int_equal(symlink(sub, link), 0);
  setenv("XDG_CACHE_HOME", dir2, 1);
  DISTRUSTED("is a symbolic link");
  setenv("XDG_CACHE_HOME", dir, 1);
  unlink(link);
  rmdir(dir2);
  TRUSTED();

  /* an entry a symbolic link (to a sound entry) */
  assert_int_equal(rename(file, aside), 0);
  assert_int_equal(symlink(aside, file), 0);
  DISTRUSTED("is a symbolic link");
  unlink(file);
  assert_int_equal(rename(aside, file), 0);
  TRUSTED();

  /* a FIFO as the entry: not opened blocking (alarm: a hang fails) */
  assert_int_equal(rename(file, aside), 0);
  assert_int_equal(mkfifo(file, 0600), 0);
  alarm(120);
  DISTRUSTED("not a regular file (a FIFO)");
  alarm(0);
  unlink(file);
  assert_int_equal(rename(aside, file), 0);
  TRUSTED();

  /* the key readable by others */
  assert_int_equal(chmod(key, 0644), 0);
  DISTRUSTED("mode 0644, not 0600");
  assert_int_equal(chmod(key, 0600), 0);
  TRUSTED();

  /* a forged entry: a payload byte changed where the linker does not look
   * (the object's ELF header padding, e_ident[9]) and the checksums an
   * unkeyed format would have (FNV-1a of the payload at 64, of header bytes
   * 0..71 at 72) recomputed: rebuilt, never loaded */
  size_t n;
  unsigned char *b = slurp(file, &n);
  uint32_t hdr = (uint32_t)b[12] | (uint32_t)b[13] << 8;
  assert_true(hdr >= 80 && n > hdr + 16 && memcmp(b + hdr, "\x7f" "ELF", 4) == 0);
  b[hdr + 9] ^= 0x5a;
  uint64_t sum = cf_fnv1a(CF_FNV_SEED, b + hdr, n - hdr);
  for (int i = 0; i < 8; i++)
    b[64 + i] = (unsigned char)(sum >> (8 * i));
  sum = cf_fnv1a(CF_FNV_SEED, b, 72);
  for (int i = 0; i < 8; i++)
    b[72 + i] = (unsigned char)(sum >> (8 * i));
  spill(file, b, n);
  free(b);
  assert_true(compile_two(&log, &warns) > 0);
  assert_int_equal(warns, 0); /* a bad entry, not a bad cache */
  assert_non_null(strstr(log.text, "MAC mismatch: damaged, or not written with this user's key"));
  TRUSTED(); /* rewritten */
#undef DISTRUSTED
#undef TRUSTED

  rm_tree(dir);
}

/* The second group's context: kernels for the host without AVX512_BF16
 * and AVX512DQ, so that the paths other x86 CPUs take (integer bfloat16
 * rounding, llvm.maximum and the vmaxps fast path instead of vrangeps) are
 * tested here too. On a host without either feature it would be the host
 * (main runs only this set-up's checks then). */
static int reduced_target(cf_codegen_target *t) {
  *t = host;
  const char *off[] = {"+avx512bf16,", "+avx512dq,"};
  size_t len = strlen(t->features);
  int turned = 0;
  if (len + 1 < sizeof t->features) {
    t->features[len] = ','; /* every entry ends in a comma while we look */
    t->features[len + 1] = '\0';
  }
  for (int i = 0; i < 2; i++) {
    char *f = strstr(t->features, off[i]);
    if (f && (f == t->features || f[-1] == ',')) f[0] = '-', turned++;
  }
  t->features[len] = '\0';
  return turned;
}

static int setup_reduced(void **state) {
  (void)state;
  cf_codegen_target t;
  reduced_target(&t);
  if (cf_context_create(&ctx) != CF_OK) return -1;
  if (cf_codegen_use_target(ctx, &t) != CF_OK) return -1;
  /* and only before the first kernel */
  cf_kernel_key k = {.kind = CF_K_ACC, .dtype = CF_DT_FLOAT32, .red = CF_RED_SUM, .arity = 0};
  void *fn;
  if (cf_codegen_kernel(ctx, &k, &fn, NULL) != CF_OK) return -1;
  if (cf_codegen_use_target(ctx, &t) != CF_ERR_USAGE ||
      !strstr(cf_context_errmsg(ctx), "set its target first"))
    return -1;
  return 0;
}

/* argv[1]: the group to run (host, reduced; ctest runs each as a test of
 * its own: test_codegen/GROUP); none: both */
int main(int argc, char **argv) {
  /* the bulk of the tests must not read or fill the user's cache */
  setenv("COLLFUSE_CACHE", "off", 1);
  cf_context *c;
  if (cf_context_create(&c) != CF_OK || cf_codegen_target_host(c, &host) != CF_OK) return 1;
  cf_context_destroy(c);
  const struct CMUnitTest reduced[] = {
      cmocka_unit_test(test_nary),        cmocka_unit_test(test_acc),
      cmocka_unit_test(test_scale),       cmocka_unit_test(test_specials),
      cmocka_unit_test(test_16bit_ties),  cmocka_unit_test(test_16bit_vectors),
      cmocka_unit_test(test_nary_stream), cmocka_unit_test(test_nary_outs), cmocka_unit_test(test_maxmin_zeros),
  };
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_keys),          cmocka_unit_test(test_vector_width),
      cmocka_unit_test(test_nvptx),         cmocka_unit_test(test_nary),
      cmocka_unit_test(test_nary_large),    cmocka_unit_test(test_acc),
      cmocka_unit_test(test_scale),         cmocka_unit_test(test_int_truncation),
      cmocka_unit_test(test_quant),         cmocka_unit_test(test_specials),
      cmocka_unit_test(test_int_wrap),      cmocka_unit_test(test_16bit_ties),
      cmocka_unit_test(test_nary_stream), cmocka_unit_test(test_nary_outs),   cmocka_unit_test(test_maxmin_zeros),
      cmocka_unit_test(test_16bit_vectors), cmocka_unit_test(test_object_cache),
      cmocka_unit_test(test_object_cache_trust),
  };
  const char *group = argc > 1 ? argv[1] : NULL;
  if (group && strcmp(group, "host") != 0 && strcmp(group, "reduced") != 0) {
    fprintf(stderr, "test_codegen: no group '%s' (host, reduced)\n", group);
    return 2;
  }
  int failed = 0;
  if (!group || strcmp(group, "host") == 0)
    failed += cmocka_run_group_tests_name("host", tests, setup, teardown);
  cf_codegen_target t;
  if ((!group || strcmp(group, "reduced") == 0) && reduced_target(&t) == 0) {
    /* nothing to turn off: the group's kernels would be the host group's,
     * compiled and run again for the same machine code; its context's
     * checks (a target set before the first kernel, refused after) run */
    ctx = NULL;
    if (setup_reduced(NULL) != 0) {
      fprintf(stderr, "test_codegen: reduced: the target's set-up failed: %s\n", cf_context_errmsg(ctx));
      failed++;
    } else {
      printf("test_codegen: reduced: this CPU has neither avx512bf16 nor avx512dq, so its kernels are "
             "test_codegen/host's; the target's set-up checked\n");
    }
    teardown(NULL);
  } else if (!group || strcmp(group, "reduced") == 0) {
    failed += cmocka_run_group_tests_name("no avx512bf16/avx512dq", reduced, setup_reduced, teardown);
  }
  return failed;
}
