/* test_compute.c - unit tests of the executor's data layer: float16 and
 * bfloat16 conversions (ties to even, NaN, Inf, subnormals, -0.0, checked
 * against a nearest-value search over the format's own values), element
 * loads and stores (saturation, wrap), reproducible fills, every compute op
 * on graphs parsed from XML (MatMul in every dtype against a float64/int64
 * reference with guard bytes, QuantMatMul through the JIT'd epilogue,
 * numpy broadcasting, Cast, Reshape, Opaque), and .npy files: round trips
 * of every dtype and shape, foreign encodings (big endian, bool, bfloat16
 * as '<u2'), and malformed files, each with the message it must give.
 */
#include "cf_test.h"

#include <dirent.h>
#include <math.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check/check.h"

/* ---- xorshift64* (the tests' only randomness; fixed seed) ---- */
static uint64_t rng = 0x9e3779b97f4a7c15ull;
static uint64_t xrand(void) {
  rng ^= rng >> 12;
  rng ^= rng << 25;
  rng ^= rng >> 27;
  return rng * 0x2545f4914f6cdd1dull;
}

static uint32_t fbits(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  return u;
}
static float bitsf(uint32_t u) {
  float f;
  memcpy(&f, &u, 4);
  return f;
}

/* ---- 16-bit floats against a search over every value of the format ---- */

/* The finite non-negative values of a 16-bit format in increasing order
 * (bits 0 .. inf-1), decoded by the conversion under test's inverse, which
 * is checked independently below. */
static double table16[2][0x7f80];
static int table_n[2];

static float to32(int bf, uint16_t h) { return bf ? cf_bf16_to_f32(h) : cf_f16_to_f32(h); }

static void build_tables(void) {
  for (int bf = 0; bf < 2; bf++) {
    int inf = bf ? 0x7f80 : 0x7c00;
    for (int h = 0; h < inf; h++) table16[bf][h] = to32(bf, (uint16_t)h);
    table_n[bf] = inf;
  }
}

/* Nearest 16-bit value to x, ties to the even bit pattern; overflow to Inf
 * at max + half an ulp (IEEE), by binary search over the table. */
static uint16_t nearest16(int bf, float x) {
  double a = fabs((double)x), *t = table16[bf];
  uint16_t sign = signbit(x) ? 0x8000 : 0, inf = bf ? 0x7f80 : 0x7c00;
  int n = table_n[bf], lo = 0, hi = n - 1;
  double maxv = t[n - 1], ulp = maxv - t[n - 2];
  if (a >= maxv + ulp / 2) return sign | inf;
  while (hi - lo > 1) {
    int mid = (lo + hi) / 2;
    if (t[mid] <= a) lo = mid; else hi = mid;
  }
  int pick;
  if (t[hi] <= a) pick = hi;
  else if (a - t[lo] < t[hi] - a) pick = lo;
  else if (a - t[lo] > t[hi] - a) pick = hi;
  else pick = (lo & 1) ? hi : lo;
  return (uint16_t)(sign | pick);
}

static void test_half_decode(void **state) {
  (void)state;
  /* decode independently: sign * 2^(e-bias) * (1.m), subnormals 2^(1-bias) * 0.m */
  for (int h = 0; h < 0x10000; h++) {
    int s = h >> 15, e = (h >> 10) & 31, m = h & 0x3ff;
    double v = e ? ldexp(1.0 + m / 1024.0, e - 15) : ldexp(m / 1024.0, -14);
    float got = cf_f16_to_f32((uint16_t)h);
    if (e == 31) {
      assert_true(m ? isnan(got) : isinf(got));
    } else if ((double)got != (s ? -v : v) || !!signbit(got) != s) {
      fail_msg("f16 0x%04x decodes to %a, want %a", h, (double)got, s ? -v : v);
    }
    if (e < 31) assert_int_equal(cf_f32_to_f16(got), h); /* exact values round trip */
    uint16_t b = (uint16_t)h;
    float bg = cf_bf16_to_f32(b);
    if (!isnan(bg)) assert_int_equal(cf_f32_to_bf16(bg), b);
    else assert_true(isnan(to32(1, cf_f32_to_bf16(bg))));
  }
}

static void test_half_round(void **state) {
  (void)state;
  build_tables();
  /* hand-picked: ties to even, the subnormal ties, the overflow edge */
  assert_int_equal(cf_f32_to_f16(1.0f), 0x3c00);
  assert_int_equal(cf_f32_to_f16(2049.0f), 0x6800);   /* tie between 2048 and 2050: even */
  assert_int_equal(cf_f32_to_f16(2051.0f), 0x6802);   /* tie between 2050 and 2052: even */
  assert_int_equal(cf_f32_to_f16(65504.0f), 0x7bff);
  assert_int_equal(cf_f32_to_f16(65519.996f), 0x7bff);
  assert_int_equal(cf_f32_to_f16(65520.0f), 0x7c00); /* max + half ulp: Inf */
  assert_int_equal(cf_f32_to_f16(-1e9f), 0xfc00);
  assert_int_equal(cf_f32_to_f16(ldexpf(1, -24)), 0x0001);
  assert_int_equal(cf_f32_to_f16(ldexpf(1, -25)), 0x0000);      /* tie: even 0 */
  assert_int_equal(cf_f32_to_f16(ldexpf(1.5f, -25)), 0x0001);
  assert_int_equal(cf_f32_to_f16(ldexpf(3, -25)), 0x0002);      /* 1.5 units: even 2 */
  assert_int_equal(cf_f32_to_f16(ldexpf(1023, -24)), 0x03ff);   /* largest subnormal */
  assert_int_equal(cf_f32_to_f16(ldexpf(2047, -25)), 0x0400);   /* rounds up to the normal */
  assert_int_equal(cf_f32_to_f16(-0.0f), 0x8000);
  assert_int_equal(cf_f32_to_f16(INFINITY), 0x7c00);
  uint16_t hn = cf_f32_to_f16(NAN);
  assert_true((hn & 0x7c00) == 0x7c00 && (hn & 0x3ff));
  assert_true(isnan(cf_f16_to_f32(cf_f32_to_f16(bitsf(0x7f800001))))); /* signalling payload */
  assert_int_equal(cf_f32_to_bf16(1.0f), 0x3f80);
  assert_int_equal(cf_f32_to_bf16(bitsf(0x3f808000)), 0x3f80); /* tie: even */
  assert_int_equal(cf_f32_to_bf16(bitsf(0x3f818000)), 0x3f82);
  assert_int_equal(cf_f32_to_bf16(bitsf(0x3f808001)), 0x3f81);
  assert_int_equal(cf_f32_to_bf16(bitsf(0x7f7fffff)), 0x7f80); /* FLT_MAX: Inf */
  assert_int_equal(cf_f32_to_bf16(bitsf(0x00008000)), 0x0000); /* subnormal tie */
  assert_int_equal(cf_f32_to_bf16(bitsf(0x00018000)), 0x0002);
  assert_int_equal(cf_f32_to_bf16(-0.0f), 0x8000);
  uint16_t bn = cf_f32_to_bf16(bitsf(0x7f800001)); /* payload only in the low bits */
  assert_true((bn & 0x7f80) == 0x7f80 && (bn & 0x7f));
  /* random floats of every magnitude against the search */
  for (int i = 0; i < 400000; i++) {
    float x = bitsf((uint32_t)xrand());
    if (isnan(x)) continue;
    for (int bf = 0; bf < 2; bf++) {
      uint16_t got = bf ? cf_f32_to_bf16(x) : cf_f32_to_f16(x), want = nearest16(bf, x);
      if (got != want)
        fail_msg("%s(%a = 0x%08x) = 0x%04x, want 0x%04x", bf ? "bf16" : "f16", (double)x,
                 fbits(x), got, want);
    }
  }
  /* a float64 rounds once: 1 + 2^-11 + 2^-40 is above the float16 tie, so
   * it rounds up (through float32 it would be a tie and go down) */
  uint16_t h;
  cf_store_f64(&h, CF_DT_FLOAT16, 0, 1.0 + ldexp(1, -11) + ldexp(1, -40));
  assert_int_equal(h, 0x3c01);
  cf_store_f64(&h, CF_DT_BFLOAT16, 0, 1.0 + ldexp(1, -8) + ldexp(1, -40));
  assert_int_equal(h, 0x3f81);
  cf_store_f64(&h, CF_DT_BFLOAT16, 0, 1e300);
  assert_int_equal(h, 0x7f80);
  cf_store_f64(&h, CF_DT_FLOAT16, 0, -1e-300);
  assert_int_equal(h, 0x8000);
}

static void test_load_store(void **state) {
  (void)state;
  static const struct {
    cf_dtype dt;
    double in, want;
  } sat[] = {{CF_DT_INT8, 300.7, 127},    {CF_DT_INT8, -300, -128},  {CF_DT_INT8, 3.9, 3},
             {CF_DT_INT8, -3.9, -3},      {CF_DT_INT8, NAN, 0},      {CF_DT_UINT8, -5, 0},
             {CF_DT_UINT8, 255.9, 255},   {CF_DT_INT16, 1e6, 32767}, {CF_DT_INT32, -1e10, INT32_MIN},
             {CF_DT_INT32, INFINITY, INT32_MAX}, {CF_DT_INT64, 1e300, (double)INT64_MAX},
             {CF_DT_INT64, -1e300, (double)INT64_MIN}, {CF_DT_FLOAT32, 0.1, (float)0.1}};
  for (size_t i = 0; i < sizeof sat / sizeof *sat; i++) {
    int64_t buf[2] = {0, 0};
    cf_store_f64(buf, sat[i].dt, 1, sat[i].in);
    if (cf_load_f64(buf, sat[i].dt, 1) != sat[i].want)
      fail_msg("store %s %g: got %g, want %g", cf_dtype_name(sat[i].dt), sat[i].in,
               cf_load_f64(buf, sat[i].dt, 1), sat[i].want);
  }
  int64_t b = 0;
  cf_store_f64(&b, CF_DT_INT64, 0, 9223372036854775807.0); /* 2^63 after rounding */
  assert_true(b == INT64_MAX);
  cf_store_i64(&b, CF_DT_INT8, 0, 200);
  assert_int_equal(cf_load_i64(&b, CF_DT_INT8, 0), -56);
  cf_store_i64(&b, CF_DT_UINT8, 0, -1);
  assert_int_equal(cf_load_i64(&b, CF_DT_UINT8, 0), 255);
  cf_store_i64(&b, CF_DT_INT16, 0, 70000);
  assert_int_equal(cf_load_i64(&b, CF_DT_INT16, 0), 4464);
  cf_store_i64(&b, CF_DT_INT32, 0, INT64_C(0x1ffffffff));
  assert_int_equal(cf_load_i64(&b, CF_DT_INT32, 0), -1);
  cf_store_i64(&b, CF_DT_FLOAT16, 0, 3);
  assert_true(cf_load_f64(&b, CF_DT_FLOAT16, 0) == 3.0);
}

/* ---- fills ---- */

static const cf_dtype all_dt[] = {CF_DT_INT8,    CF_DT_UINT8,    CF_DT_INT16,   CF_DT_INT32,
                                  CF_DT_INT64,   CF_DT_FLOAT16,  CF_DT_BFLOAT16, CF_DT_FLOAT32,
                                  CF_DT_FLOAT64, CF_DT_UINT16,   CF_DT_UINT32,  CF_DT_UINT64,
                                  CF_DT_BOOL};
#define N_DT (sizeof all_dt / sizeof *all_dt)

static void test_fill_random(void **state) {
  (void)state;
  enum { N = 1000 };
  static _Alignas(16) char a[N * 8], b[N * 8];
  for (size_t k = 0; k < N_DT; k++) {
    cf_dtype dt = all_dt[k];
    size_t bytes = (size_t)N * (size_t)cf_dtype_size(dt);
    cf_fill_random(a, dt, N, 42, 3, "w");
    cf_fill_random(b, dt, N, 42, 3, "w");
    assert_memory_equal(a, b, bytes);
    cf_fill_random(b, dt, 37, 42, 3, "w"); /* a prefix is the same prefix */
    assert_memory_equal(a, b, 37 * (size_t)cf_dtype_size(dt));
    cf_fill_random(b + 5 * cf_dtype_size(dt), dt, 1, 42, 3, "w"); /* it is element 0 */
    assert_memory_equal(b + 5 * cf_dtype_size(dt), a, (size_t)cf_dtype_size(dt));
    cf_fill_random(b, dt, N, 42, 4, "w");
    assert_memory_not_equal(a, b, bytes);
    cf_fill_random(b, dt, N, 42, 3, "v");
    assert_memory_not_equal(a, b, bytes);
    cf_fill_random(b, dt, N, 43, 3, "w");
    assert_memory_not_equal(a, b, bytes);
    int distinct = 0;
    for (int i = 0; i < N; i++) {
      double v = cf_load_f64(a, dt, i);
      if (cf_dtype_is_float(dt)) {
        if (!(v >= -1 && v < 1)) fail_msg("%s element %d = %g", cf_dtype_name(dt), i, v);
      } else if (dt == CF_DT_BOOL ? v != 0 && v != 1
                 : cf_dtype_is_unsigned(dt)
                     /* small, or small plus the top bit */
                     ? fmod(v, ldexp(1, 8 * cf_dtype_size(dt) - 1)) >= 16
                     : v < -8 || v >= 8) {
        fail_msg("%s element %d = %g", cf_dtype_name(dt), i, v);
      }
      distinct += i && v != cf_load_f64(a, dt, i - 1);
    }
    assert_true(distinct > (dt == CF_DT_BOOL ? N / 3 : N / 2));
    /* never all zeros: element 0 is non-zero on every stream */
    for (int s = 0; s < 2000; s++) {
      cf_fill_random(b, dt, 1, (uint64_t)s, s % 7, "z");
      if (cf_load_f64(b, dt, 0) == 0) fail_msg("%s seed %d: element 0 is 0", cf_dtype_name(dt), s);
    }
  }
}

static cf_graph *parse(const char *text) {
  cf_graph *g = NULL;
  if (cf_graph_parse(ctx, "mem.xml", text, strlen(text), &g) != CF_OK)
    fail_msg("parse: %s", cf_context_errmsg(ctx));
  return g;
}

static const cf_node *node(const cf_graph *g, const char *name) {
  int i = cf_graph_find(g, name);
  assert_true(i >= 0);
  return &g->nodes[i];
}

static void test_fill_node(void **state) {
  (void)state;
  cf_graph *g = parse("<graph name='f' version='1'>"
                      "<node name='z' op='Input' dtype='int8' shape='4' init='zeros'/>"
                      "<node name='o' op='Input' dtype='float16' shape='4' init='ones'/>"
                      "<node name='i' op='Input' dtype='int8' shape='300' init='iota'/>"
                      "<node name='r' op='Input' dtype='float32' shape='4'/>"
                      "<node name='c' op='Constant' dtype='int32' shape='4' value='-3'/>"
                      "<node name='d' op='Constant' dtype='bfloat16' shape='4'/>"
                      "</graph>");
  _Alignas(16) char buf[300 * 4], want[16];
  memset(buf, 7, sizeof buf);
  cf_fill_node(node(g, "z"), buf, CF_DT_INT8, 4, 1, 0);
  assert_memory_equal(buf, "\0\0\0\0", 4);
  cf_fill_node(node(g, "o"), buf, CF_DT_FLOAT16, 4, 1, 0);
  for (int i = 0; i < 4; i++) assert_true(cf_load_f64(buf, CF_DT_FLOAT16, i) == 1.0);
  cf_fill_node(node(g, "i"), buf, CF_DT_INT8, 300, 1, 0);
  assert_int_equal(cf_load_i64(buf, CF_DT_INT8, 5), 5);
  assert_int_equal(cf_load_i64(buf, CF_DT_INT8, 200), -56); /* wraps */
  cf_fill_node(node(g, "r"), buf, CF_DT_FLOAT32, 4, 9, 2);
  cf_fill_random(want, CF_DT_FLOAT32, 4, 9, 2, "r");
  assert_memory_equal(buf, want, 16);
  cf_fill_node(node(g, "c"), buf, CF_DT_INT32, 4, 1, 0);
  for (int i = 0; i < 4; i++) assert_int_equal(cf_load_i64(buf, CF_DT_INT32, i), -3);
  memset(buf, 7, sizeof buf);
  cf_fill_node(node(g, "d"), buf, CF_DT_BFLOAT16, 4, 1, 0);
  assert_memory_equal(buf, "\0\0\0\0\0\0\0\0", 8);
  cf_graph_destroy(g);
}

/* ---- compute ops ---- */

/* A buffer with guard bytes on both sides. */
#define GUARD 64
typedef struct gbuf {
  unsigned char *raw, *p;
  size_t bytes;
} gbuf;

static void gbuf_new(gbuf *b, size_t bytes) {
  b->raw = malloc(bytes + 2 * GUARD + 64);
  assert_non_null(b->raw);
  memset(b->raw, 0xa5, bytes + 2 * GUARD + 64);
  b->p = (unsigned char *)(((uintptr_t)(b->raw + GUARD) + 63) & ~(uintptr_t)63);
  b->bytes = bytes;
}
static void gbuf_check(const gbuf *b) {
  for (int i = 1; i <= GUARD; i++)
    if (b->p[-i] != 0xa5) fail_msg("guard byte %d before the buffer overwritten", i);
  for (size_t i = 0; i < GUARD; i++)
    if (b->p[b->bytes + i] != 0xa5) fail_msg("guard byte %zu after the buffer overwritten", i);
}

/* A node's operands and outputs as tensors: operands filled by fill(),
 * outputs in guarded buffers. */
typedef struct run {
  cf_tensor in[5], out[4];
  gbuf ib[5], ob[4];
  int n_in, n_out;
} run;

static cf_tensor tensor_of(const cf_value *v, gbuf *b) {
  cf_tensor t = {.dtype = v->dtype, .shape = v->shape};
  assert_true(cf_shape_elements(&v->shape, &t.count));
  gbuf_new(b, (size_t)t.count * (size_t)cf_dtype_size(v->dtype));
  t.data = b->p;
  return t;
}

static void run_prepare(run *r, const cf_graph *g, const cf_node *n) {
  memset(r, 0, sizeof *r);
  r->n_in = n->n_in;
  r->n_out = n->n_out;
  for (int j = 0; j < n->n_in; j++) {
    const cf_node *src = &g->nodes[n->in[j].node];
    r->in[j] = tensor_of(&src->out[n->in[j].port], &r->ib[j]);
    cf_fill_node(src, r->in[j].data, r->in[j].dtype, r->in[j].count, 5, 1);
  }
  for (int j = 0; j < n->n_out; j++) r->out[j] = tensor_of(&n->out[j], &r->ob[j]);
}

static void run_exec(run *r, const cf_graph *g, const cf_node *n) {
  if (cf_compute_run(ctx, g, n, r->in, r->out, 1, 5, 0) != CF_OK)
    fail_msg("%s: %s", n->name, cf_context_errmsg(ctx));
  for (int j = 0; j < r->n_out; j++) gbuf_check(&r->ob[j]);
  for (int j = 0; j < r->n_in; j++) gbuf_check(&r->ib[j]);
}

static void run_free(run *r) {
  for (int j = 0; j < r->n_in; j++) free(r->ib[j].raw);
  for (int j = 0; j < r->n_out; j++) free(r->ob[j].raw);
}

/* Full-range integers (so products wrap), random floats otherwise. */
static void fill_wide(cf_tensor *t) {
  for (int64_t i = 0; i < t->count; i++) {
    if (cf_dtype_is_float(t->dtype))
      cf_store_f64(t->data, t->dtype, i, (double)(xrand() >> 11) * 0x1p-52 - 1.0);
    else
      cf_store_i64(t->data, t->dtype, i, (int64_t)xrand());
  }
}

static void check_matmul(cf_dtype dt, int64_t m, int64_t k, int64_t nn) {
  char xml[1024];
  snprintf(xml, sizeof xml,
           "<graph name='mm' version='1'>"
           "<node name='a' op='Input' dtype='%s' shape='%lld,%lld'/>"
           "<node name='b' op='Input' dtype='%s' shape='%lld,%lld'/>"
           "<node name='mm' op='MatMul'><input ref='a'/><input ref='b'/></node>"
           "<node name='y' op='Output'><input ref='mm'/></node></graph>",
           cf_dtype_name(dt), (long long)m, (long long)k, cf_dtype_name(dt), (long long)k,
           (long long)nn);
  cf_graph *g = parse(xml);
  const cf_node *n = node(g, "mm");
  run r;
  run_prepare(&r, g, n);
  fill_wide(&r.in[0]);
  fill_wide(&r.in[1]);
  memset(r.out[0].data, 0x5a, r.ob[0].bytes); /* every element must be written */
  run_exec(&r, g, n);
  cf_dtype od = r.out[0].dtype;
  assert_int_equal(od, cf_dtype_is_float(dt) || cf_dtype_size(dt) >= 4 ? dt
                      : dt == CF_DT_UINT16                            ? CF_DT_UINT32
                                                                      : CF_DT_INT32);
  for (int64_t i = 0; i < m; i++)
    for (int64_t j = 0; j < nn; j++) {
      double got = cf_load_f64(r.out[0].data, od, i * nn + j);
      if (!cf_dtype_is_float(dt)) {
        uint64_t s = 0;
        for (int64_t p = 0; p < k; p++)
          s += (uint64_t)cf_load_i64(r.in[0].data, dt, i * k + p) *
               (uint64_t)cf_load_i64(r.in[1].data, dt, p * nn + j);
        int64_t want;
        cf_store_i64(&want, od, 0, (int64_t)s);
        want = cf_load_i64(&want, od, 0);
        if (cf_load_i64(r.out[0].data, od, i * nn + j) != want)
          fail_msg("%s matmul %lldx%lldx%lld [%lld,%lld]: got %lld, want %lld", cf_dtype_name(dt),
                   (long long)m, (long long)k, (long long)nn, (long long)i, (long long)j,
                   (long long)cf_load_i64(r.out[0].data, od, i * nn + j), (long long)want);
        continue;
      }
      double s = 0, mag = 0;
      for (int64_t p = 0; p < k; p++) {
        double t = cf_load_f64(r.in[0].data, dt, i * k + p) * cf_load_f64(r.in[1].data, dt, p * nn + j);
        s += t;
        mag += fabs(t);
      }
      /* float32 accumulation, then one rounding to the 16-bit type */
      /* k roundings of the accumulation (float32 for the 16-bit types),
       * then one rounding to the 16-bit type */
      double acc = (double)k * (dt == CF_DT_FLOAT64 ? 0x1p-53 : 0x1p-24) * mag;
      double tol = dt == CF_DT_FLOAT16    ? acc + ldexp(fabs(s), -11) + 0x1p-25
                   : dt == CF_DT_BFLOAT16 ? acc + ldexp(fabs(s), -8) + 0x1p-134
                                          : acc;
      if (!(fabs(got - s) <= tol))
        fail_msg("%s matmul %lldx%lldx%lld [%lld,%lld]: got %.17g, want %.17g (tol %g)",
                 cf_dtype_name(dt), (long long)m, (long long)k, (long long)nn, (long long)i,
                 (long long)j, got, s, tol);
    }
  run_free(&r);
  cf_graph_destroy(g);
}

static void test_matmul(void **state) {
  (void)state;
  static const int64_t sizes[][3] = {{7, 13, 5}, {1, 1, 1}, {1, 9, 1}, {65, 130, 33},
                                     {0, 5, 3},  {4, 0, 3}, {3, 4, 0}};
  for (size_t k = 0; k < N_DT; k++)
    for (size_t s = 0; s < sizeof sizes / sizeof *sizes && all_dt[k] != CF_DT_BOOL; s++)
      check_matmul(all_dt[k], sizes[s][0], sizes[s][1], sizes[s][2]);
  /* bool has no MatMul: inference says so */
  cf_graph *g = NULL;
  const char *bx = "<graph name='mm' version='1'>"
                   "<node name='a' op='Input' dtype='bool' shape='2,2'/>"
                   "<node name='mm' op='MatMul'><input ref='a'/><input ref='a'/></node>"
                   "<node name='y' op='Output'><input ref='mm'/></node></graph>";
  ASSERT_ERR(cf_graph_parse(ctx, "mem.xml", bx, strlen(bx), &g), CF_ERR_INVALID,
             "node 'mm': MatMul of bool is not supported");
  cf_graph_destroy(g);
  /* nor a mean (its sum is or) */
  const char *mx = "<graph name='m' version='1' world_size='2'>"
                   "<node name='a' op='Input' dtype='bool' shape='2,2'/>"
                   "<node name='ar' op='AllReduce' reduction='mean'><input ref='a'/></node>"
                   "<node name='y' op='Output'><input ref='ar'/></node></graph>";
  g = NULL;
  ASSERT_ERR(cf_graph_parse(ctx, "mem.xml", mx, strlen(mx), &g), CF_ERR_INVALID,
             "node 'ar': reduction mean is not defined on bool");
  cf_graph_destroy(g);
}

static void check_quant(cf_dtype od, bool bias, int64_t m, int64_t k, int64_t nn) {
  char xml[1500];
  snprintf(xml, sizeof xml,
           "<graph name='q' version='1'>"
           "<node name='x1' op='Input' dtype='int8' shape='%lld,%lld'/>"
           "<node name='x2' op='Input' dtype='int8' shape='%lld,%lld'/>"
           "<node name='s1' op='Input' dtype='float32' shape='%lld,1'/>"
           "<node name='s2' op='Input' dtype='float32' shape='1,%lld'/>"
           "<node name='b' op='Input' dtype='int32' shape='%lld'/>"
           "<node name='q' op='QuantMatMul' output_dtype='%s'><input ref='x1'/><input ref='x2'/>"
           "<input ref='s1'/><input ref='s2'/>%s</node>"
           "<node name='y' op='Output'><input ref='q'/></node></graph>",
           (long long)m, (long long)k, (long long)k, (long long)nn, (long long)m, (long long)nn,
           (long long)nn, cf_dtype_name(od), bias ? "<input ref='b'/>" : "");
  cf_graph *g = parse(xml);
  const cf_node *n = node(g, "q");
  run r;
  run_prepare(&r, g, n);
  fill_wide(&r.in[0]);
  fill_wide(&r.in[1]);
  for (int64_t i = 0; i < m; i++) ((float *)r.in[2].data)[i] = ldexpf((float)(xrand() % 1000) + 1, -10);
  for (int64_t j = 0; j < nn; j++) ((float *)r.in[3].data)[j] = ldexpf((float)(xrand() % 1000) + 1, -12);
  if (bias)
    for (int64_t j = 0; j < nn; j++) ((int32_t *)r.in[4].data)[j] = (int32_t)(xrand() % 20001) - 10000;
  run_exec(&r, g, n);
  assert_int_equal(r.out[0].dtype, od);
  for (int64_t i = 0; i < m; i++)
    for (int64_t j = 0; j < nn; j++) {
      int32_t acc = bias ? ((int32_t *)r.in[4].data)[j] : 0;
      for (int64_t p = 0; p < k; p++)
        acc += ((int8_t *)r.in[0].data)[i * k + p] * ((int8_t *)r.in[1].data)[p * nn + j];
      float v = (float)acc * ((float *)r.in[2].data)[i] * ((float *)r.in[3].data)[j];
      uint16_t want = od == CF_DT_FLOAT16 ? cf_f32_to_f16(v) : cf_f32_to_bf16(v);
      uint16_t got = ((uint16_t *)r.out[0].data)[i * nn + j];
      if (got != want)
        fail_msg("quant %s [%lld,%lld]: got 0x%04x, want 0x%04x", cf_dtype_name(od), (long long)i,
                 (long long)j, got, want);
    }
  run_free(&r);
  cf_graph_destroy(g);
}

static void test_quant_matmul(void **state) {
  (void)state;
  for (int b = 0; b < 2; b++) {
    check_quant(CF_DT_BFLOAT16, b, 7, 13, 5);
    check_quant(CF_DT_FLOAT16, b, 7, 13, 5);
    check_quant(CF_DT_BFLOAT16, b, 33, 257, 17);
    check_quant(CF_DT_FLOAT16, b, 1, 1, 1);
    check_quant(CF_DT_FLOAT16, b, 0, 4, 3);
  }
}

/* Binary op on shapes sa and sb against index arithmetic done here. */
static void check_binary(const char *op, cf_dtype dt, const char *sa, const char *sb) {
  char xml[1024];
  snprintf(xml, sizeof xml,
           "<graph name='e' version='1'>"
           "<node name='a' op='Input' dtype='%s' shape='%s'/>"
           "<node name='b' op='Input' dtype='%s' shape='%s'/>"
           "<node name='e' op='%s'><input ref='a'/><input ref='b'/></node>"
           "<node name='y' op='Output'><input ref='e'/></node></graph>",
           cf_dtype_name(dt), sa, cf_dtype_name(dt), sb, op);
  cf_graph *g = parse(xml);
  const cf_node *n = node(g, "e");
  run r;
  run_prepare(&r, g, n);
  fill_wide(&r.in[0]);
  fill_wide(&r.in[1]);
  run_exec(&r, g, n);
  const cf_shape *os = &r.out[0].shape;
  for (int64_t i = 0; i < r.out[0].count; i++) {
    int64_t ia = 0, ib = 0, rem = i, idx[CF_MAX_RANK];
    for (int d = os->rank - 1; d >= 0; d--) {
      idx[d] = rem % os->dims[d];
      rem /= os->dims[d];
    }
    for (int t = 0; t < 2; t++) {
      const cf_shape *s = &r.in[t].shape;
      int64_t off = 0;
      for (int d = 0; d < s->rank; d++)
        off = off * s->dims[d] + (s->dims[d] == 1 ? 0 : idx[os->rank - s->rank + d]);
      *(t ? &ib : &ia) = off;
    }
    char want[8], got[8];
    if (cf_dtype_is_float(dt)) {
      double x = cf_load_f64(r.in[0].data, dt, ia), y = cf_load_f64(r.in[1].data, dt, ib);
      double v = op[0] == 'A' ? x + y : op[0] == 'S' ? x - y : x * y;
      if (dt != CF_DT_FLOAT64) v = (float)v; /* exact for 16-bit operands; float32's own op */
      cf_store_f64(want, dt, 0, v);
    } else {
      uint64_t x = (uint64_t)cf_load_i64(r.in[0].data, dt, ia);
      uint64_t y = (uint64_t)cf_load_i64(r.in[1].data, dt, ib);
      cf_store_i64(want, dt, 0, (int64_t)(op[0] == 'A' ? x + y : op[0] == 'S' ? x - y : x * y));
    }
    memcpy(got, (char *)r.out[0].data + i * cf_dtype_size(dt), (size_t)cf_dtype_size(dt));
    if (memcmp(got, want, (size_t)cf_dtype_size(dt)))
      fail_msg("%s %s (%s) (%s) element %lld: got %g, want %g", op, cf_dtype_name(dt), sa, sb,
               (long long)i, cf_load_f64(got, dt, 0), cf_load_f64(want, dt, 0));
  }
  run_free(&r);
  cf_graph_destroy(g);
}

static void test_broadcast(void **state) {
  (void)state;
  static const char *shapes[][2] = {{"3,4", "3,4"}, {"3,4", ""},      {"", "3,4"},
                                    {"3,4", "4"},   {"3,4", "3,1"},   {"3,1", "1,4"},
                                    {"2,1,4", "3,1"}, {"5", "2,3,5"}, {"2,3,1,5", "3,4,1"},
                                    {"", ""},       {"0,4", "4"},     {"1", "4,1"}};
  static const char *ops[] = {"Add", "Sub", "Mul"};
  for (size_t k = 0; k < N_DT; k++)
    for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++)
      check_binary(ops[(k + s) % 3], all_dt[k], shapes[s][0], shapes[s][1]);
  /* the wrap itself, by hand */
  cf_graph *g = parse("<graph name='w' version='1'>"
                      "<node name='a' op='Input' dtype='int8' shape='2'/>"
                      "<node name='b' op='Input' dtype='int8' shape=''/>"
                      "<node name='e' op='Add'><input ref='a'/><input ref='b'/></node>"
                      "<node name='y' op='Output'><input ref='e'/></node></graph>");
  int8_t a[2] = {100, -100}, b = 100, y[2];
  cf_tensor in[2] = {{a, CF_DT_INT8, {1, {2}}, 2}, {&b, CF_DT_INT8, {0, {0}}, 1}};
  cf_tensor out = {y, CF_DT_INT8, {1, {2}}, 2};
  assert_int_equal(cf_compute_run(ctx, g, node(g, "e"), in, &out, 0, 0, 0), CF_OK);
  assert_int_equal(y[0], -56);
  assert_int_equal(y[1], 0);
  /* a plan that hands the wrong tensor is named, not trusted */
  in[1].dtype = CF_DT_UINT8;
  ASSERT_ERR(cf_compute_run(ctx, g, node(g, "e"), in, &out, 0, 0, 0), CF_ERR_INVALID,
             "node 'e': internal: operand 1 is uint8 (), expected int8 ()");
  in[1].dtype = CF_DT_INT8;
  in[0].count = 3;
  ASSERT_ERR(cf_compute_run(ctx, g, node(g, "e"), in, &out, 0, 0, 0), CF_ERR_INVALID,
             "operand 0 has 3 elements for shape (2)");
  cf_graph_destroy(g);
}

static void test_cast_reshape_opaque(void **state) {
  (void)state;
  cf_graph *g = parse("<graph name='c' version='1'>"
                      "<node name='f' op='Input' dtype='float32' shape='8'/>"
                      "<node name='i' op='Input' dtype='int32' shape='8'/>"
                      "<node name='ci8' op='Cast' dtype='int8'><input ref='f'/></node>"
                      "<node name='cu8' op='Cast' dtype='uint8'><input ref='f'/></node>"
                      "<node name='cw' op='Cast' dtype='int8'><input ref='i'/></node>"
                      "<node name='ch' op='Cast' dtype='float16'><input ref='i'/></node>"
                      "<node name='cb' op='Cast' dtype='bfloat16'><input ref='f'/></node>"
                      "<node name='r' op='Reshape' shape='2,4'><input ref='i'/></node>"
                      "<node name='op' op='Opaque' type='Foo'><input ref='f'/>"
                      "<output dtype='float16' shape='3'/><output dtype='int32' shape='2,2'/></node>"
                      "<node name='y' op='Output'><input ref='op' port='1'/></node></graph>");
  float f[8] = {300.5f, -300.f, 3.99f, -3.99f, NAN, INFINITY, -1.f, 1.00390625f};
  int32_t i[8] = {200, -129, 2049, 2051, 65519, 65520, -7, 0};
  int8_t i8[8];
  uint8_t u8[8];
  uint16_t h[8];
  int32_t rs[8];
  cf_tensor tf = {f, CF_DT_FLOAT32, {1, {8}}, 8}, ti = {i, CF_DT_INT32, {1, {8}}, 8};
  cf_tensor o8 = {i8, CF_DT_INT8, {1, {8}}, 8}, ou = {u8, CF_DT_UINT8, {1, {8}}, 8};
  cf_tensor oh = {h, CF_DT_FLOAT16, {1, {8}}, 8};
  assert_int_equal(cf_compute_run(ctx, g, node(g, "ci8"), &tf, &o8, 0, 0, 0), CF_OK);
  assert_memory_equal(i8, ((int8_t[]){127, -128, 3, -3, 0, 127, -1, 1}), 8);
  assert_int_equal(cf_compute_run(ctx, g, node(g, "cu8"), &tf, &ou, 0, 0, 0), CF_OK);
  assert_memory_equal(u8, ((uint8_t[]){255, 0, 3, 0, 0, 255, 0, 1}), 8);
  assert_int_equal(cf_compute_run(ctx, g, node(g, "cw"), &ti, &o8, 0, 0, 0), CF_OK);
  assert_memory_equal(i8, ((int8_t[]){-56, 127, 1, 3, -17, -16, -7, 0}), 8);
  assert_int_equal(cf_compute_run(ctx, g, node(g, "ch"), &ti, &oh, 0, 0, 0), CF_OK);
  assert_memory_equal(h, ((uint16_t[]){0x5a40, 0xd808, 0x6800, 0x6802, 0x7bff, 0x7c00, 0xc700, 0}), 16);
  oh.dtype = CF_DT_BFLOAT16;
  assert_int_equal(cf_compute_run(ctx, g, node(g, "cb"), &tf, &oh, 0, 0, 0), CF_OK);
  assert_int_equal(h[7], 0x3f80); /* 1 + 2^-8 is a tie: even */
  assert_true(isnan(cf_bf16_to_f32(h[4])));
  cf_tensor orr = {rs, CF_DT_INT32, {2, {2, 4}}, 8};
  assert_int_equal(cf_compute_run(ctx, g, node(g, "r"), &ti, &orr, 0, 0, 0), CF_OK);
  assert_memory_equal(rs, i, sizeof i);
  orr.data = i; /* in place: nothing to copy */
  assert_int_equal(cf_compute_run(ctx, g, node(g, "r"), &ti, &orr, 0, 0, 0), CF_OK);

  uint16_t p0[3], w0[3];
  int32_t p1[4], w1[4];
  cf_tensor oo[2] = {{p0, CF_DT_FLOAT16, {1, {3}}, 3}, {p1, CF_DT_INT32, {2, {2, 2}}, 4}};
  assert_int_equal(cf_compute_run(ctx, g, node(g, "op"), &tf, oo, 3, 77, 0), CF_OK);
  cf_fill_random(w0, CF_DT_FLOAT16, 3, 77, 3, "op:0");
  cf_fill_random(w1, CF_DT_INT32, 4, 77, 3, "op:1");
  assert_memory_equal(p0, w0, sizeof w0);
  assert_memory_equal(p1, w1, sizeof w1);
  /* Output is no compute op */
  ASSERT_ERR(cf_compute_run(ctx, g, node(g, "y"), oo + 1, NULL, 0, 0, 0), CF_ERR_INVALID,
             "node 'y': Output is not a compute op");
  cf_graph_destroy(g);
}

/* ---- .npy ---- */

static char tmpdir[] = "/tmp/cf_npy_XXXXXX";

static const char *tpath(const char *name) {
  static char p[512];
  snprintf(p, sizeof p, "%s/%s", tmpdir, name);
  return p;
}

static void put(const char *name, const void *data, size_t n) {
  FILE *f = fopen(tpath(name), "wb");
  assert_non_null(f);
  assert_int_equal(fwrite(data, 1, n, f), n);
  fclose(f);
}

/* A file of version major.0 with the given header text and data bytes. */
static void put_npy(const char *name, int major, const char *hdr, const void *data, size_t n) {
  unsigned char buf[4096];
  size_t hl = strlen(hdr), pre = major == 1 ? 10 : 12;
  memcpy(buf, "\x93NUMPY", 6);
  buf[6] = (unsigned char)major;
  buf[7] = 0;
  for (size_t b = 0; b < pre - 8; b++) buf[8 + b] = (unsigned char)(hl >> (8 * b));
  memcpy(buf + pre, hdr, hl);
  memcpy(buf + pre + hl, data, n);
  put(name, buf, pre + hl + n);
}

static void test_npy_round_trip(void **state) {
  (void)state;
  static const char *shapes[] = {"", "0", "3", "2,3", "2,0,4", "1,2,3,1,2,1,2,1"};
  for (size_t k = 0; k < N_DT; k++)
    for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++) {
      cf_dtype dt = all_dt[k];
      cf_shape sh;
      char why[128];
      int64_t count;
      assert_true(cf_shape_parse(shapes[s], &sh, why, sizeof why));
      assert_true(cf_shape_elements(&sh, &count));
      size_t bytes = (size_t)count * (size_t)cf_dtype_size(dt);
      char data[512], *back = NULL;
      cf_fill_random(data, dt, count, 1, 0, shapes[s]);
      if (cf_npy_write(ctx, tpath("rt.npy"), dt, &sh, data) != CF_OK)
        fail_msg("%s", cf_context_errmsg(ctx));
      struct stat sb;
      assert_int_equal(stat(tpath("rt.npy"), &sb), 0);
      assert_int_equal(((size_t)sb.st_size - bytes) % 64, 0); /* data 64-aligned */
      if (cf_npy_read(ctx, tpath("rt.npy"), dt, &sh, (void **)&back) != CF_OK)
        fail_msg("%s", cf_context_errmsg(ctx));
      if (bytes) assert_memory_equal(back, data, bytes);
      free(back);
    }
  /* the header numpy would write, and no temporary left behind */
  cf_shape sh = {2, {2, 3}};
  float z[6] = {0};
  assert_int_equal(cf_npy_write(ctx, tpath("h.npy"), CF_DT_BFLOAT16, &sh, z), CF_OK);
  char buf[128];
  FILE *f = fopen(tpath("h.npy"), "rb");
  assert_non_null(f);
  assert_int_equal(fread(buf, 1, 128, f), 128);
  fclose(f);
  const char *want = "{'descr': '<V2', 'fortran_order': False, 'shape': (2, 3), }";
  assert_memory_equal(buf + 10, want, strlen(want));
  assert_int_equal(buf[8] + 10, 128);
  assert_int_equal(buf[127], '\n');
  DIR *d = opendir(tmpdir);
  struct dirent *e;
  while ((e = readdir(d)))
    if (strstr(e->d_name, ".tmp")) fail_msg("temporary file %s left behind", e->d_name);
  closedir(d);
  ASSERT_ERR(cf_npy_write(ctx, "/nonexistent-dir/x.npy", CF_DT_INT8, &sh, z), CF_ERR_IO,
             "/nonexistent-dir/x.npy: error: cannot write");
}

static void test_npy_foreign(void **state) {
  (void)state;
  void *p;
  cf_shape s3 = {1, {3}};
  /* big endian float32 and int16, numpy's version 2.0 and 3.0 */
  const unsigned char be[12] = {0x3f, 0x80, 0, 0, 0xc0, 0, 0, 0, 0x7f, 0x80, 0, 0};
  put_npy("be.npy", 2, "{'descr': '>f4', 'fortran_order': False, 'shape': (3,), }\n", be, 12);
  assert_int_equal(cf_npy_read(ctx, tpath("be.npy"), CF_DT_FLOAT32, &s3, &p), CF_OK);
  assert_true(((float *)p)[0] == 1.0f && ((float *)p)[1] == -2.0f && isinf(((float *)p)[2]));
  free(p);
  put_npy("be2.npy", 3, "{\"shape\": (3L,), \"fortran_order\": False, \"descr\": \">i2\"}", be, 6);
  assert_int_equal(cf_npy_read(ctx, tpath("be2.npy"), CF_DT_INT16, &s3, &p), CF_OK);
  assert_int_equal(((int16_t *)p)[0], 0x3f80);
  assert_int_equal(((int16_t *)p)[1], 0);
  assert_int_equal(((int16_t *)p)[2], (int16_t)0xc000);
  free(p);
  /* bool into uint8 and int8 */
  const unsigned char bools[3] = {1, 0, 1};
  put_npy("b.npy", 1, "{'descr': '|b1', 'fortran_order': False, 'shape': (3,), }\n", bools, 3);
  assert_int_equal(cf_npy_read(ctx, tpath("b.npy"), CF_DT_UINT8, &s3, &p), CF_OK);
  assert_memory_equal(p, bools, 3);
  free(p);
  assert_int_equal(cf_npy_read(ctx, tpath("b.npy"), CF_DT_INT8, &s3, &p), CF_OK);
  free(p);
  /* bfloat16 as ml_dtypes writes it and as raw uint16 bits */
  const uint16_t bf[3] = {0x3f80, 0xc000, 0x7fc0};
  put_npy("v.npy", 1, "{'descr': '|V2', 'fortran_order': False, 'shape': (3,), }\n", bf, 6);
  assert_int_equal(cf_npy_read(ctx, tpath("v.npy"), CF_DT_BFLOAT16, &s3, &p), CF_OK);
  assert_memory_equal(p, bf, 6);
  free(p);
  put_npy("u.npy", 1, "{'descr': '<u2', 'fortran_order': False, 'shape': (3,), }\n", bf, 6);
  assert_int_equal(cf_npy_read(ctx, tpath("u.npy"), CF_DT_BFLOAT16, &s3, &p), CF_OK);
  assert_memory_equal(p, bf, 6);
  free(p);
  ASSERT_ERR(cf_npy_read(ctx, tpath("u.npy"), CF_DT_FLOAT16, &s3, &p), CF_ERR_INVALID,
             "u.npy: error: expected dtype float16, found '<u2'");
  assert_null(p);
}

static void test_npy_malformed(void **state) {
  (void)state;
  static const struct {
    int major;     /* 0: hdr is the whole file, data bytes of it */
    const char *hdr;
    size_t data;   /* bytes of data after the header (major 0: file size) */
    const char *want;
  } bad[] = {
      {0, "", 0, "not a .npy file (bad magic"},
      {0, "GARBAGE-NOT-NPY-AT-ALL", 22, "not a .npy file (bad magic"},
      {0, "\x93NUMPY\x04\x00\x10\x00", 10, "unsupported .npy format version 4.0"},
      {0, "\x93NUMPY\x01", 7, "truncated: the file ends inside the preamble"},
      {0, "\x93NUMPY\x01\x00\x10", 9, "truncated: the file ends inside the preamble"},
      {0, "\x93NUMPY\x02\x00\x10\x00\x00", 11, "truncated: the file ends inside the preamble"},
      {0, "\x93NUMPY\x01\x00\x00\x00", 10, "header length 0 out of range"},
      {0, "\x93NUMPY\x01\x00\x40\x00{'descr'", 18,
       "header length 64 goes beyond the end of the file (18 bytes)"},
      {1, "{'descr': '<f4', 'fortran_order': False}", 12, "no 'shape' key"},
      {1, "{'descr': '<f4', 'fortran_order': True, 'shape': (3,)}", 12,
       "fortran_order True is not supported"},
      {1, "{'descr': '<f4', 'fortran_order': maybe, 'shape': (3,)}", 12,
       "'fortran_order' must be True or False"},
      {1, "{'descr': '<f4', 'fortran_order': False, 'shape': (3,), 'foo': 1}", 12, "unknown key 'foo'"},
      {1, "{'descr': '<f4', 'descr': '<f4', 'fortran_order': False, 'shape': (3,)}", 12,
       "key 'descr' repeated"},
      {1, "{'descr': '<f4', 'fortran_order': False, 'shape': (3, -1)}", 12, "non-negative integers"},
      {1, "{'descr': '<f4', 'fortran_order': False, 'shape': (3 4)}", 12, "expected ',' or ')'"},
      {1, "{'descr': '<f4', 'fortran_order': False, 'shape': 3}", 12, "'shape' must be a tuple"},
      {1, "{'descr': '<f4', 'fortran_order': False, 'shape': (1,1,1,1,1,1,1,1,3)}", 12,
       "more than 8 dimensions"},
      {1, "{'descr': '<f4', 'fortran_order': False, 'shape': (99999999999999999999,)}", 12,
       "shape entry out of range"},
      {1, "{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (3,)}", 12,
       "structured dtypes are not supported"},
      {1, "{'descr': '<f4', 'fortran_order': False, 'shape': (3,)}{", 12, "text after the dict"},
      {1, "{'descr': '<f4 , 'fortran_order': False, 'shape': (3,)}", 12, "expected ',' or '}'"},
      {1, "{'descr' '<f4', 'fortran_order': False, 'shape': (3,)}", 12, "expected ':' after a key"},
      {1, "'descr': '<f4'", 12, "expected '{'"},
      {1, "{'descr': '<f8', 'fortran_order': False, 'shape': (3,)}", 24,
       "expected dtype float32, found '<f8'"},
      {1, "{'descr': 'f4', 'fortran_order': False, 'shape': (3,)}", 12,
       "expected dtype float32, found 'f4'"},
      {1, "{'descr': '<f4', 'fortran_order': False, 'shape': (1, 3)}", 12,
       "expected shape (3), found (1,3)"},
      {1, "{'descr': '<f4', 'fortran_order': False, 'shape': (3,)}", 8,
       "data is 8 bytes, expected 12 (3 elements of <f4)"},
      {1, "{'descr': '<f4', 'fortran_order': False, 'shape': (3,)}", 16,
       "data is 16 bytes, expected 12"},
  };
  cf_shape s3 = {1, {3}};
  char zero[64] = {0};
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
    char name[32];
    snprintf(name, sizeof name, "bad%zu.npy", i);
    if (bad[i].major)
      put_npy(name, bad[i].major, bad[i].hdr, zero, bad[i].data);
    else
      put(name, bad[i].hdr, bad[i].data);
    void *p = (void *)1;
    cf_status st = cf_npy_read(ctx, tpath(name), CF_DT_FLOAT32, &s3, &p);
    if (st != CF_ERR_INVALID || !strstr(cf_context_errmsg(ctx), bad[i].want) ||
        !strstr(cf_context_errmsg(ctx), name))
      fail_msg("case %zu: status %d, message '%s', want '%s'", i, st, cf_context_errmsg(ctx),
               bad[i].want);
    assert_null(p);
  }
  void *p;
  ASSERT_ERR(cf_npy_read(ctx, tpath("absent.npy"), CF_DT_FLOAT32, &s3, &p), CF_ERR_IO,
             "absent.npy: error: cannot open: No such file or directory");
  ASSERT_ERR(cf_npy_read(ctx, tmpdir, CF_DT_FLOAT32, &s3, &p), CF_ERR_IO, "is a directory");
}

static int npy_setup(void **state) {
  if (!mkdtemp(tmpdir)) return -1;
  return setup(state);
}

static int npy_teardown(void **state) {
  DIR *d = opendir(tmpdir);
  struct dirent *e;
  while (d && (e = readdir(d)))
    if (e->d_name[0] != '.') unlink(tpath(e->d_name));
  if (d) closedir(d);
  rmdir(tmpdir);
  return teardown(state);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_half_decode),        cmocka_unit_test(test_half_round),
      cmocka_unit_test(test_load_store),         cmocka_unit_test(test_fill_random),
      cmocka_unit_test(test_fill_node),          cmocka_unit_test(test_matmul),
      cmocka_unit_test(test_quant_matmul),       cmocka_unit_test(test_broadcast),
      cmocka_unit_test(test_cast_reshape_opaque), cmocka_unit_test(test_npy_round_trip),
      cmocka_unit_test(test_npy_foreign),        cmocka_unit_test(test_npy_malformed),
  };
  return cmocka_run_group_tests(tests, npy_setup, npy_teardown);
}
