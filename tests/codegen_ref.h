/* codegen_ref.h - test_codegen's reference semantics, in plain C: elements
 * as raw bits of any dtype, float16/bfloat16 conversions rounding to
 * nearest even, and each reduction computed the way the kernels promise
 * (integers wrap or divide truncating; floats in the kernel's order and
 * precision; NaN wins max/min, -0 < +0). Included by test_codegen.c only.
 */
#ifndef COLLFUSE_TESTS_CODEGEN_REF_H
#define COLLFUSE_TESTS_CODEGEN_REF_H

#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "codegen/codegen.h"

/* ---- 16-bit floats ---- */
/* type punning through unions is defined in C11 */
typedef union pun32 {
  uint32_t u;
  float f;
} pun32;
typedef union pun64 {
  uint64_t u;
  double d;
} pun64;
static float bits_f32(uint32_t u) { return ((pun32){.u = u}).f; }
static uint32_t f32_bits(float f) { return ((pun32){.f = f}).u; }
static float h2f(uint16_t h) {
  uint32_t s = (uint32_t)(h & 0x8000) << 16, e = (h >> 10) & 0x1f, m = h & 0x3ff;
  if (e == 0) {
    float v = ldexpf((float)m, -24);
    return s ? -v : v;
  }
  if (e == 31) return bits_f32(s | 0x7f800000 | m << 13);
  return bits_f32(s | (e - 15 + 127) << 23 | m << 13);
}
static uint16_t f2h(float f) {
  uint32_t x = f32_bits(f), sign = (x >> 16) & 0x8000, ax = x & 0x7fffffff;
  if (ax > 0x7f800000) return (uint16_t)(sign | 0x7e00 | ((ax >> 13) & 0x3ff));
  if (ax >= 0x477ff000) return (uint16_t)(sign | 0x7c00); /* >= 65520 rounds to Inf */
  if (ax < 0x38800000) /* below 2^-14: subnormal, in units of 2^-24, ties to even */
    return (uint16_t)(sign | (uint32_t)nearbyintf(fabsf(f) * 16777216.0f));
  uint32_t h = ((ax >> 23) - 127 + 15) << 10 | ((ax >> 13) & 0x3ff), rem = ax & 0x1fff;
  if (rem > 0x1000 || (rem == 0x1000 && (h & 1))) h++;
  return (uint16_t)(sign | h);
}
static float b2f(uint16_t b) { return bits_f32((uint32_t)b << 16); }
static uint16_t f2b(float f) {
  uint32_t x = f32_bits(f);
  if ((x & 0x7fffffff) > 0x7f800000) return (uint16_t)((x >> 16) | 0x40);
  return (uint16_t)((x + 0x7fff + ((x >> 16) & 1)) >> 16);
}

/* ---- elements as raw bits ---- */
static bool isf(cf_dtype dt) { return cf_dtype_is_float(dt); }
static int esize(cf_dtype dt) { return cf_dtype_size(dt); }

static uint64_t ld(const void *p, int64_t i, cf_dtype dt) {
  uint64_t v = 0;
  memcpy(&v, (const char *)p + i * esize(dt), (size_t)esize(dt)); /* little endian */
  return v;
}
static void st(void *p, int64_t i, cf_dtype dt, uint64_t v) {
  memcpy((char *)p + i * esize(dt), &v, (size_t)esize(dt));
}
static bool isu(cf_dtype dt) {
  return dt == CF_DT_UINT8 || dt == CF_DT_UINT16 || dt == CF_DT_UINT32 || dt == CF_DT_UINT64 ||
         dt == CF_DT_BOOL;
}
/* integer value of raw bits: sign-extended, unsigned types zero-extended */
static int64_t sx(uint64_t v, cf_dtype dt) {
  int bits = esize(dt) * 8;
  if (bits == 64) return (int64_t)v;
  v &= (1ull << bits) - 1;
  if (!isu(dt) && (v >> (bits - 1))) v |= ~0ull << bits;
  return (int64_t)v;
}
static uint64_t wrap(uint64_t v, cf_dtype dt) {
  int bits = esize(dt) * 8;
  return bits == 64 ? v : v & ((1ull << bits) - 1);
}
static float fval(uint64_t v, cf_dtype dt) {
  return dt == CF_DT_FLOAT16    ? h2f((uint16_t)v)
         : dt == CF_DT_BFLOAT16 ? b2f((uint16_t)v)
                                : bits_f32((uint32_t)v);
}
static double dval(uint64_t v) { return ((pun64){.u = v}).d; }
static uint64_t from_f(float f, cf_dtype dt) {
  return dt == CF_DT_FLOAT16 ? f2h(f) : dt == CF_DT_BFLOAT16 ? f2b(f) : f32_bits(f);
}
static uint64_t from_d(double d) { return ((pun64){.d = d}).u; }
static bool is_nan_bits(uint64_t v, cf_dtype dt) {
  return dt == CF_DT_FLOAT64 ? isnan(dval(v)) : isnan(fval(v, dt));
}

/* ---- reference semantics ---- */
/* NaN wins, -0 < +0; exact for float too (the result is an operand) */
static double maxd_(double a, double b) {
  if (isnan(a) || isnan(b)) return NAN;
  if (a == b) return signbit(a) ? b : a;
  return a > b ? a : b;
}
static double mind_(double a, double b) {
  if (isnan(a) || isnan(b)) return NAN;
  if (a == b) return signbit(a) ? a : b;
  return a < b ? a : b;
}
static float opf(cf_reduction r, float a, float b) {
  switch (r) {
  case CF_RED_PROD: return a * b;
  case CF_RED_MAX: return (float)maxd_(a, b);
  case CF_RED_MIN: return (float)mind_(a, b);
  default: return a + b;
  }
}
static double opd(cf_reduction r, double a, double b) {
  switch (r) {
  case CF_RED_PROD: return a * b;
  case CF_RED_MAX: return maxd_(a, b);
  case CF_RED_MIN: return mind_(a, b);
  default: return a + b;
  }
}
static int64_t opi(cf_reduction r, int64_t a, int64_t b, cf_dtype dt) {
  if (dt == CF_DT_BOOL) /* XLA's pred: add is or, multiply is and */
    return r == CF_RED_SUM || r == CF_RED_MAX ? (a || b) : (a && b);
  if (isu(dt)) { /* compare as unsigned (uint64 above 2^63 included) */
    uint64_t ua = (uint64_t)a, ub = (uint64_t)b;
    if (r == CF_RED_MAX) return ua > ub ? a : b;
    if (r == CF_RED_MIN) return ua < ub ? a : b;
  }
  switch (r) {
  case CF_RED_PROD: return sx((uint64_t)a * (uint64_t)b, dt);
  case CF_RED_MAX: return a > b ? a : b;
  case CF_RED_MIN: return a < b ? a : b;
  default: return sx((uint64_t)a + (uint64_t)b, dt);
  }
}
static int64_t int_div(double div) {
  return div >= 1 && div < 9007199254740992.0 ? (int64_t)div : 1;
}

static uint64_t ref_nary(cf_dtype dt, cf_reduction r, int k, const uint64_t *x, double div) {
  if (!isf(dt)) {
    if (r == CF_RED_MEAN) {
      uint64_t s = 0;
      for (int i = 0; i < k; i++)
        s += (uint64_t)sx(x[i], dt);
      if (isu(dt)) return wrap(s / (uint64_t)int_div(div), dt);
      return wrap((uint64_t)((int64_t)s / int_div(div)), dt);
    }
    int64_t a = sx(x[0], dt);
    for (int i = 1; i < k; i++)
      a = opi(r, a, sx(x[i], dt), dt);
    return wrap((uint64_t)a, dt);
  }
  if (dt == CF_DT_FLOAT64) {
    double a = dval(x[0]);
    for (int i = 1; i < k; i++)
      a = opd(r, a, dval(x[i]));
    if (r == CF_RED_MEAN) a *= 1.0 / div;
    return from_d(a);
  }
  float a = fval(x[0], dt);
  for (int i = 1; i < k; i++)
    a = opf(r, a, fval(x[i], dt));
  if (r == CF_RED_MEAN) a *= (float)(1.0 / div);
  return from_f(a, dt);
}

static uint64_t ref_scale(cf_dtype dt, uint64_t x, double div) {
  if (!isf(dt) && isu(dt)) return wrap((uint64_t)sx(x, dt) / (uint64_t)int_div(div), dt);
  if (!isf(dt)) return wrap((uint64_t)(sx(x, dt) / int_div(div)), dt);
  if (dt == CF_DT_FLOAT64) return from_d(dval(x) * (1.0 / div));
  return from_f(fval(x, dt) * (float)(1.0 / div), dt);
}

#endif
