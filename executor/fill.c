/* fill.c - deterministic tensor contents and element conversions.
 *
 * Random data is counter based (splitmix64 at state base + i * gamma, with
 * base hashed from seed, rank and the tensor's name), so element i is the
 * same whichever thread writes it and however a buffer is split (the _at
 * forms write any range of elements: --verify regenerates inputs window by
 * window); the
 * executor and the float64 reference therefore see the same inputs without
 * sharing any state. The element accessors below are the executor's single
 * definition of dtype conversion: float16/bfloat16 round to nearest even
 * (ir/dtype.c's cf_f32_to_f16 and kin), float -> integer truncates toward
 * zero and saturates (NaN -> 0), integer -> integer wraps.
 */
#include "host.h"

#include <math.h>
#include <string.h>

/* d rounded to float with round-to-odd: a float that is never a tie of the
 * 16-bit formats unless d was one, so rounding it again to float16 or
 * bfloat16 (13 and 16 bits narrower) gives d correctly rounded once. */
static float f32_round_odd(double d) {
  float t = (float)d;
  if ((double)t == d || isnan(d)) return t;
  if (fabs((double)t) > fabs(d)) t = nextafterf(t, 0.0f); /* toward zero */
  uint32_t u;
  memcpy(&u, &t, sizeof u);
  u |= 1;
  memcpy(&t, &u, sizeof t);
  return t;
}

/* ---------------- element access ---------------- */

/* Integer element i of data: its bits, widened as cf_dtype_wrap says. */
static uint64_t load_bits(const void *data, int size, int64_t i) {
  const unsigned char *p = (const unsigned char *)data + i * size;
  switch (size) {
  case 1: return *p;
  case 2: { uint16_t v; memcpy(&v, p, 2); return v; }
  case 4: { uint32_t v; memcpy(&v, p, 4); return v; }
  default: { uint64_t v; memcpy(&v, p, 8); return v; }
  }
}

static void store_bits(void *data, int size, int64_t i, uint64_t u) {
  unsigned char *p = (unsigned char *)data + i * size;
  switch (size) {
  case 1: *p = (uint8_t)u; break;
  case 2: { uint16_t v = (uint16_t)u; memcpy(p, &v, 2); break; }
  case 4: { uint32_t v = (uint32_t)u; memcpy(p, &v, 4); break; }
  default: memcpy(p, &u, 8); break;
  }
}

double cf_load_f64(const void *data, cf_dtype dt, int64_t i) {
  switch (dt) {
  case CF_DT_FLOAT16: return cf_f16_to_f32(((const uint16_t *)data)[i]);
  case CF_DT_BFLOAT16: return cf_bf16_to_f32(((const uint16_t *)data)[i]);
  case CF_DT_FLOAT32: return ((const float *)data)[i];
  case CF_DT_FLOAT64: return ((const double *)data)[i];
  case CF_DT_INVALID:
  case CF_DT_COUNT: return 0;
  default: {
    int64_t v = cf_load_i64(data, dt, i);
    return cf_dtype_is_unsigned(dt) ? (double)(uint64_t)v : (double)v;
  }
  }
}

/* v truncated toward zero into integer dtype dt, saturating (NaN -> 0;
 * bool is v != 0, NaN included, as numpy's astype(bool)). */
static void store_int_f64(void *data, cf_dtype dt, int64_t i, double v) {
  int size = cf_dtype_size(dt), bits = size * 8;
  uint64_t u;
  if (dt == CF_DT_BOOL) {
    u = v != 0;
  } else if (isnan(v)) {
    u = 0;
  } else if (cf_dtype_is_unsigned(dt)) { /* [0, 2^bits) */
    double top = ldexp(1.0, bits);
    u = v <= 0 ? 0 : v >= top ? ~0ull : (uint64_t)v;
  } else { /* [-2^(bits-1), 2^(bits-1)) */
    double top = ldexp(1.0, bits - 1);
    int64_t max = (int64_t)(~0ull >> (65 - bits));
    u = (uint64_t)(v >= top ? max : v <= -top ? -max - 1 : (int64_t)v);
  }
  store_bits(data, size, i, u);
}

void cf_store_f64(void *data, cf_dtype dt, int64_t i, double v) {
  switch (dt) {
  case CF_DT_FLOAT16: ((uint16_t *)data)[i] = cf_f32_to_f16(f32_round_odd(v)); break;
  case CF_DT_BFLOAT16: ((uint16_t *)data)[i] = cf_f32_to_bf16(f32_round_odd(v)); break;
  case CF_DT_FLOAT32: ((float *)data)[i] = (float)v; break;
  case CF_DT_FLOAT64: ((double *)data)[i] = v; break;
  case CF_DT_INVALID:
  case CF_DT_COUNT: break;
  default: store_int_f64(data, dt, i, v); break;
  }
}

int64_t cf_load_i64(const void *data, cf_dtype dt, int64_t i) {
  if (cf_dtype_is_float(dt)) { /* the saturating, truncating conversion */
    int64_t r;
    cf_store_f64(&r, CF_DT_INT64, 0, cf_load_f64(data, dt, i));
    return r;
  }
  if (cf_dtype_size(dt) == 0) return 0;
  uint64_t u = load_bits(data, cf_dtype_size(dt), i);
  return dt == CF_DT_BOOL ? (int64_t)u : cf_dtype_wrap(dt, u); /* a bool byte as it is: --verify
                                                                   sees one that is not 0 or 1 */
}

void cf_store_i64(void *data, cf_dtype dt, int64_t i, int64_t v) {
  /* through the unsigned type of the same width: two's complement wrap,
   * defined behaviour in C */
  if (cf_dtype_is_float(dt))
    cf_store_f64(data, dt, i, (double)v);
  else if (cf_dtype_size(dt))
    store_bits(data, cf_dtype_size(dt), i, (uint64_t)cf_dtype_wrap(dt, (uint64_t)v));
}

/* ---------------- random data ---------------- */

static uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

#define CF_GOLDEN 0x9e3779b97f4a7c15ull

/* The stream of one (seed, rank, name): FNV-1a of the name, each part mixed
 * so that nearby seeds and ranks give unrelated streams. */
static uint64_t stream_base(uint64_t seed, int rank, const char *name) {
  uint64_t h = cf_hash_str(name ? name : "");
  return mix64(seed ^ mix64(h ^ mix64((uint64_t)(int64_t)rank * CF_GOLDEN + 1)));
}

void cf_fill_random(void *data, cf_dtype dt, int64_t count, uint64_t seed, int rank,
                    const char *name) {
  cf_fill_random_at(data, dt, 0, count, seed, rank, name);
}

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>

/* The low 64 bits of a * c in each lane (AVX2 multiplies 32 x 32 bits). */
__attribute__((target("avx2"))) static inline __m256i mul64(__m256i a, uint64_t c) {
  __m256i clo = _mm256_set1_epi64x((long long)(c & 0xffffffffu));
  __m256i chi = _mm256_set1_epi64x((long long)(c >> 32));
  __m256i lo = _mm256_mul_epu32(a, clo);
  __m256i cross = _mm256_add_epi64(_mm256_mul_epu32(_mm256_srli_epi64(a, 32), clo),
                                   _mm256_mul_epu32(a, chi));
  return _mm256_add_epi64(lo, _mm256_slli_epi64(cross, 32));
}

/* The float32 loop of cf_fill_random_at four elements a step, bit for bit
 * the same: mix64 in 64-bit lanes, r >> 11 (53 bits) converted exactly as
 * its two halves (each through 2^52's exponent), then the same rounded
 * double operations and float conversion. Returns the elements written
 * (a multiple of 4; the caller's loop does the rest). It is most of a big
 * --verify's time: the ranks fill every Input, the reference again. */
__attribute__((target("avx2"))) static int64_t fill_f32_avx2(float *o, int64_t first,
                                                             int64_t count, uint64_t base) {
  const __m256i exp52 = _mm256_set1_epi64x(0x4330000000000000ll);
  const __m256d two52 = _mm256_set1_pd(0x1p52), two32 = _mm256_set1_pd(0x1p32);
  const __m256d half = _mm256_set1_pd(0.5), scale = _mm256_set1_pd(0x1p-52), one = _mm256_set1_pd(1.0);
  const __m256i step = _mm256_set1_epi64x((long long)(4 * CF_GOLDEN));
  const __m128 onef = _mm_set1_ps(1.0f), minus1 = _mm_set1_ps(-1.0f);
  uint64_t z0 = base + (uint64_t)first * CF_GOLDEN;
  __m256i z = _mm256_set_epi64x((long long)(z0 + 3 * CF_GOLDEN), (long long)(z0 + 2 * CF_GOLDEN),
                                (long long)(z0 + CF_GOLDEN), (long long)z0);
  int64_t i = 0;
  for (; i + 4 <= count; i += 4, z = _mm256_add_epi64(z, step)) {
    __m256i r = mul64(_mm256_xor_si256(z, _mm256_srli_epi64(z, 30)), 0xbf58476d1ce4e5b9ull);
    r = mul64(_mm256_xor_si256(r, _mm256_srli_epi64(r, 27)), 0x94d049bb133111ebull);
    r = _mm256_srli_epi64(_mm256_xor_si256(r, _mm256_srli_epi64(r, 31)), 11);
    __m256d lo = _mm256_sub_pd(
        _mm256_castsi256_pd(_mm256_or_si256(_mm256_and_si256(r, _mm256_set1_epi64x(0xffffffffll)), exp52)),
        two52);
    __m256d hi = _mm256_sub_pd(_mm256_castsi256_pd(_mm256_or_si256(_mm256_srli_epi64(r, 32), exp52)), two52);
    __m256d k = _mm256_add_pd(_mm256_mul_pd(hi, two32), lo); /* exact: below 2^53 */
    __m256d v = _mm256_sub_pd(_mm256_mul_pd(_mm256_add_pd(k, half), scale), one);
    __m128 f = _mm256_cvtpd_ps(v);
    f = _mm_blendv_ps(f, minus1, _mm_cmpge_ps(f, onef));
    _mm_storeu_ps(o + i, f);
  }
  return i;
}

static int64_t fill_f32_fast(float *o, int64_t first, int64_t count, uint64_t base) {
  return __builtin_cpu_supports("avx2") ? fill_f32_avx2(o, first, count, base) : 0;
}
#else
static int64_t fill_f32_fast(float *o, int64_t first, int64_t count, uint64_t base) { return 0; }
#endif

void cf_fill_random_at(void *data, cf_dtype dt, int64_t first, int64_t count, uint64_t seed,
                       int rank, const char *name) {
  uint64_t base = stream_base(seed, rank, name);
  /* float32 and float64, the common cases, without the per-element
   * dispatch (the same values: a float64 in (-1, 1) never rounds to 0 in
   * either, and float32's rounding up to 1 wraps to -1) */
  if (dt == CF_DT_FLOAT32) {
    float *o = data;
    for (int64_t i = fill_f32_fast(o, first, count, base); i < count; i++) {
      uint64_t r = mix64(base + (uint64_t)(first + i) * CF_GOLDEN);
      float f = (float)(((double)(r >> 11) + 0.5) * 0x1p-52 - 1.0);
      o[i] = f >= 1.0f ? -1.0f : f;
    }
    return;
  }
  if (dt == CF_DT_FLOAT64) {
    double *o = data;
    for (int64_t i = 0; i < count; i++) {
      uint64_t r = mix64(base + (uint64_t)(first + i) * CF_GOLDEN);
      o[i] = ((double)(r >> 11) + 0.5) * 0x1p-52 - 1.0;
    }
    return;
  }
  for (int64_t i = 0; i < count; i++) {
    uint64_t r = mix64(base + (uint64_t)(first + i) * CF_GOLDEN);
    bool head = first + i == 0;         /* the tensor's element 0 */
    int64_t small = (int64_t)(r >> 60); /* 0..15 */
    int bits = cf_dtype_size(dt) * 8;
    if (dt == CF_DT_BOOL) {
      ((uint8_t *)data)[i] = (uint8_t)(head || (r >> 63));
    } else if (dt == CF_DT_UINT8) {
      ((uint8_t *)data)[i] = (uint8_t)(head && !small ? 1 : small);
    } else if (cf_dtype_is_unsigned(dt)) {
      /* small, or small plus the top bit: above every signed range, so a
       * signed compare or conversion anywhere shows */
      uint64_t top = (r >> 59 & 1) << (bits - 1);
      cf_store_i64(data, dt, i, (int64_t)((uint64_t)(head && !small ? 1 : small) | top));
    } else if (!cf_dtype_is_float(dt)) {
      cf_store_i64(data, dt, i, head && small == 8 ? 1 : small - 8);
    } else {
      /* (k + 1/2) * 2^-52 - 1 for k in [0, 2^53): in (-1, 1), never 0 */
      double v = ((double)(r >> 11) + 0.5) * 0x1p-52 - 1.0;
      cf_store_f64(data, dt, i, v);
      /* Rounding may reach 1 (float32 and the 16-bit types) or 0 (float16
       * below 2^-25): 1 wraps around to -1, as if [-1, 1) were a circle;
       * element 0 stays non-zero. */
      double got = cf_load_f64(data, dt, i);
      if (got >= 1.0) cf_store_f64(data, dt, i, -1.0);
      if (head && got == 0) cf_store_f64(data, dt, i, 0.5);
    }
  }
}

/* A whole tensor 4 Mi elements at a time (16 MiB of float32, milliseconds),
 * with a sign of life after each (cf_beat): a rank filling GiBs of inputs
 * is at work, and the peers that wait for it meanwhile see it move. */
void cf_fill_node(const cf_node *n, void *data, cf_dtype dt, int64_t count, uint64_t seed,
                  int rank) {
  const int64_t chunk = (int64_t)1 << 22;
  size_t size = (size_t)cf_dtype_size(dt);
  for (int64_t at = 0; at < count; at += chunk) {
    cf_fill_node_at(n, (char *)data + (size_t)at * size, dt, at, count - at < chunk ? count - at : chunk,
                    seed, rank);
    cf_beat();
  }
}

void cf_fill_node_at(const cf_node *n, void *data, cf_dtype dt, int64_t first, int64_t count,
                     uint64_t seed, int rank) {
  const char *init = cf_node_str(n, CF_A_INIT, NULL);
  const cf_attr *value = cf_node_attr(n, CF_A_VALUE);
  if (!init) init = n->op == CF_OP_CONSTANT ? (value ? "value" : "zeros") : "random";
  int size = cf_dtype_size(dt);
  if (!strcmp(init, "random")) {
    cf_fill_random_at(data, dt, first, count, seed, rank, n->name);
  } else if (!strcmp(init, "iota")) {
    for (int64_t i = 0; i < count; i++)
      cf_store_i64(data, dt, i, first + i);
  } else if (!strcmp(init, "ones") || !strcmp(init, "value")) {
    if (count <= 0) return;
    cf_store_f64(data, dt, 0, !strcmp(init, "ones") ? 1.0 : value->v.f);
    for (int64_t i = 1; i < count; i++)
      memcpy((char *)data + i * size, data, (size_t)size);
  } else { /* zeros (the verifier admits no other init) */
    memset(data, 0, (size_t)(count * size));
  }
}
