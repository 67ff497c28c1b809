/* c_loop.c - the plain C baseline of `collfuse bench reduce`: the loop a
 * CPU collective library writes by hand and leaves to the compiler (UCC's
 * CPU executor does exactly this), built with -O3 -march=native.
 *
 * One pass over the elements, the k sources combined left to right. Each
 * (dtype, op) has one always-inlined body and a switch on k calls it with a
 * constant, so the compiler sees a fixed number of streams, unrolls the
 * inner loop and vectorises the outer one as far as it can. Nothing here is
 * tuned beyond that: it is the baseline, not a competitor.
 *
 * float16 uses GCC's _Float16 (x86-64 since GCC 12), bfloat16 bit
 * manipulation; both compute in float and round to nearest even once per
 * element, like collfuse's kernels. GCC 12 cannot vectorise the _Float16
 * conversions without AVX512-FP16, so float16 stays scalar: that is what a
 * plain loop gets on this compiler.
 */
#include "bench.h"

#include <string.h>

__extension__ typedef _Float16 half; /* -Wpedantic: _Float16 is ISO TS 18661-3 */

#define INLINE static inline __attribute__((always_inline))

static inline float bf16_to_float(uint16_t h) {
  uint32_t u = (uint32_t)h << 16;
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}

static inline uint16_t float_to_bf16(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40); /* quiet NaN */
  u += 0x7fffu + ((u >> 16) & 1);                                           /* nearest even */
  return (uint16_t)(u >> 16);
}

static inline float max_f(float a, float b) { return b > a ? b : a; }

INLINE bool f32_nary(float *restrict d, const void *const *src, int k, int64_t n, bool max) {
  const float *s[8];
  for (int j = 0; j < k; j++)
    s[j] = src[j];
  for (int64_t i = 0; i < n; i++) {
    float a = s[0][i];
    for (int j = 1; j < k; j++)
      a = max ? max_f(a, s[j][i]) : a + s[j][i];
    d[i] = a;
  }
  return true;
}

INLINE bool f16_nary(half *restrict d, const void *const *src, int k, int64_t n, bool max) {
  const half *s[8];
  for (int j = 0; j < k; j++)
    s[j] = src[j];
  for (int64_t i = 0; i < n; i++) {
    float a = (float)s[0][i];
    for (int j = 1; j < k; j++)
      a = max ? max_f(a, (float)s[j][i]) : a + (float)s[j][i];
    d[i] = (half)a;
  }
  return true;
}

INLINE bool bf16_nary(uint16_t *restrict d, const void *const *src, int k, int64_t n, bool max) {
  const uint16_t *s[8];
  for (int j = 0; j < k; j++)
    s[j] = src[j];
  for (int64_t i = 0; i < n; i++) {
    float a = bf16_to_float(s[0][i]);
    for (int j = 1; j < k; j++) {
      float b = bf16_to_float(s[j][i]);
      a = max ? max_f(a, b) : a + b;
    }
    d[i] = float_to_bf16(a);
  }
  return true;
}

/* int8 sums wrap: add as unsigned, compare as signed */
INLINE bool i8_nary(int8_t *restrict d, const void *const *src, int k, int64_t n, bool max) {
  const int8_t *s[8];
  for (int j = 0; j < k; j++)
    s[j] = src[j];
  for (int64_t i = 0; i < n; i++) {
    int8_t a = s[0][i];
    uint8_t u = (uint8_t)a;
    for (int j = 1; j < k; j++) {
      if (max)
        a = s[j][i] > a ? s[j][i] : a;
      else
        u = (uint8_t)(u + (uint8_t)s[j][i]);
    }
    d[i] = max ? a : (int8_t)u;
  }
  return true;
}

/* Each k and op as constants, so every case is its own specialised loop. */
static bool f32_k(void *dst, const void *const *src, int k, int64_t n, bool max) {
  float *d = dst;
  switch (k) {
  case 2: return max ? f32_nary(d, src, 2, n, true) : f32_nary(d, src, 2, n, false);
  case 3: return max ? f32_nary(d, src, 3, n, true) : f32_nary(d, src, 3, n, false);
  case 4: return max ? f32_nary(d, src, 4, n, true) : f32_nary(d, src, 4, n, false);
  case 5: return max ? f32_nary(d, src, 5, n, true) : f32_nary(d, src, 5, n, false);
  case 6: return max ? f32_nary(d, src, 6, n, true) : f32_nary(d, src, 6, n, false);
  case 7: return max ? f32_nary(d, src, 7, n, true) : f32_nary(d, src, 7, n, false);
  case 8: return max ? f32_nary(d, src, 8, n, true) : f32_nary(d, src, 8, n, false);
  }
  return false;
}

static bool f16_k(void *dst, const void *const *src, int k, int64_t n, bool max) {
  half *d = dst;
  switch (k) {
  case 2: return max ? f16_nary(d, src, 2, n, true) : f16_nary(d, src, 2, n, false);
  case 3: return max ? f16_nary(d, src, 3, n, true) : f16_nary(d, src, 3, n, false);
  case 4: return max ? f16_nary(d, src, 4, n, true) : f16_nary(d, src, 4, n, false);
  case 5: return max ? f16_nary(d, src, 5, n, true) : f16_nary(d, src, 5, n, false);
  case 6: return max ? f16_nary(d, src, 6, n, true) : f16_nary(d, src, 6, n, false);
  case 7: return max ? f16_nary(d, src, 7, n, true) : f16_nary(d, src, 7, n, false);
  case 8: return max ? f16_nary(d, src, 8, n, true) : f16_nary(d, src, 8, n, false);
  }
  return false;
}

static bool bf16_k(void *dst, const void *const *src, int k, int64_t n, bool max) {
  uint16_t *d = dst;
  switch (k) {
  case 2: return max ? bf16_nary(d, src, 2, n, true) : bf16_nary(d, src, 2, n, false);
  case 3: return max ? bf16_nary(d, src, 3, n, true) : bf16_nary(d, src, 3, n, false);
  case 4: return max ? bf16_nary(d, src, 4, n, true) : bf16_nary(d, src, 4, n, false);
  case 5: return max ? bf16_nary(d, src, 5, n, true) : bf16_nary(d, src, 5, n, false);
  case 6: return max ? bf16_nary(d, src, 6, n, true) : bf16_nary(d, src, 6, n, false);
  case 7: return max ? bf16_nary(d, src, 7, n, true) : bf16_nary(d, src, 7, n, false);
  case 8: return max ? bf16_nary(d, src, 8, n, true) : bf16_nary(d, src, 8, n, false);
  }
  return false;
}

static bool i8_k(void *dst, const void *const *src, int k, int64_t n, bool max) {
  int8_t *d = dst;
  switch (k) {
  case 2: return max ? i8_nary(d, src, 2, n, true) : i8_nary(d, src, 2, n, false);
  case 3: return max ? i8_nary(d, src, 3, n, true) : i8_nary(d, src, 3, n, false);
  case 4: return max ? i8_nary(d, src, 4, n, true) : i8_nary(d, src, 4, n, false);
  case 5: return max ? i8_nary(d, src, 5, n, true) : i8_nary(d, src, 5, n, false);
  case 6: return max ? i8_nary(d, src, 6, n, true) : i8_nary(d, src, 6, n, false);
  case 7: return max ? i8_nary(d, src, 7, n, true) : i8_nary(d, src, 7, n, false);
  case 8: return max ? i8_nary(d, src, 8, n, true) : i8_nary(d, src, 8, n, false);
  }
  return false;
}

bool cf_cloop_nary(cf_bench_dtype dt, cf_bench_op op, void *dst, const void *const *src, int k,
                   int64_t n) {
  bool max = op == CF_BENCH_MAX;
  switch (dt) {
  case CF_BENCH_F32: return f32_k(dst, src, k, n, max);
  case CF_BENCH_F16: return f16_k(dst, src, k, n, max);
  case CF_BENCH_BF16: return bf16_k(dst, src, k, n, max);
  case CF_BENCH_I8: return i8_k(dst, src, k, n, max);
  }
  return false;
}
