/* dtype.c - element types and shapes: names, sizes, parsing, and element /
 * byte counts computed with overflow checks (shapes come from untrusted
 * files, so every product is checked against CF_MAX_ELEMENTS/CF_MAX_BYTES).
 */
#include "ir.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* One row a dtype: every fact about it that is not arithmetic. Integer
 * ranges are what cf_dtype_holds admits (uint64's hi is the largest double
 * below 2^64); float rows give their largest finite value as hi. */
typedef enum dkind { DK_NONE, DK_SINT, DK_UINT, DK_BOOL, DK_FLOAT } dkind;

static const struct {
  const char *name;
  int size;
  dkind kind;
  double lo, hi;
  char npy;             /* numpy's kind code; 0: numpy has none */
  cf_dtype matmul_out;  /* CF_DT_INVALID: MatMul refuses it */
} dtypes[CF_DT_COUNT] = {
    [CF_DT_INVALID] = {"invalid", 0, DK_NONE, 0, 0, 0, CF_DT_INVALID},
    [CF_DT_INT8] = {"int8", 1, DK_SINT, -128.0, 127.0, 'i', CF_DT_INT32},
    [CF_DT_UINT8] = {"uint8", 1, DK_UINT, 0.0, 255.0, 'u', CF_DT_INT32},
    [CF_DT_INT16] = {"int16", 2, DK_SINT, -32768.0, 32767.0, 'i', CF_DT_INT32},
    [CF_DT_INT32] = {"int32", 4, DK_SINT, -2147483648.0, 2147483647.0, 'i', CF_DT_INT32},
    /* hi: the largest double below 2^63 */
    [CF_DT_INT64] = {"int64", 8, DK_SINT, -9223372036854775808.0, 9223372036854774784.0, 'i',
                     CF_DT_INT64},
    [CF_DT_FLOAT16] = {"float16", 2, DK_FLOAT, 0, 65504.0, 'f', CF_DT_FLOAT16},
    [CF_DT_BFLOAT16] = {"bfloat16", 2, DK_FLOAT, 0, 3.3895313892515355e38, 0, CF_DT_BFLOAT16},
    [CF_DT_FLOAT32] = {"float32", 4, DK_FLOAT, 0, 3.4028234663852886e38, 'f', CF_DT_FLOAT32},
    [CF_DT_FLOAT64] = {"float64", 8, DK_FLOAT, 0, 1.7976931348623157e308, 'f', CF_DT_FLOAT64},
    [CF_DT_UINT16] = {"uint16", 2, DK_UINT, 0.0, 65535.0, 'u', CF_DT_UINT32},
    [CF_DT_UINT32] = {"uint32", 4, DK_UINT, 0.0, 4294967295.0, 'u', CF_DT_UINT32},
    [CF_DT_UINT64] = {"uint64", 8, DK_UINT, 0.0, 18446744073709549568.0, 'u', CF_DT_UINT64},
    [CF_DT_BOOL] = {"bool", 1, DK_BOOL, 0.0, 1.0, 'b', CF_DT_INVALID},
};

/* Other spellings found in exported graphs (numpy, XLA, TF, torch). */
static const struct {
  const char *alias;
  cf_dtype dt;
} dtype_aliases[] = {
    {"s8", CF_DT_INT8},       {"u8", CF_DT_UINT8},      {"s16", CF_DT_INT16},
    {"s32", CF_DT_INT32},     {"s64", CF_DT_INT64},     {"f16", CF_DT_FLOAT16},
    {"bf16", CF_DT_BFLOAT16}, {"f32", CF_DT_FLOAT32},   {"f64", CF_DT_FLOAT64},
    {"half", CF_DT_FLOAT16},  {"float", CF_DT_FLOAT32}, {"double", CF_DT_FLOAT64},
    {"fp16", CF_DT_FLOAT16},  {"fp32", CF_DT_FLOAT32},  {"fp64", CF_DT_FLOAT64},
    {"u16", CF_DT_UINT16},    {"u32", CF_DT_UINT32},    {"u64", CF_DT_UINT64},
    {"pred", CF_DT_BOOL},
};

static bool valid(cf_dtype dt) { return dt > CF_DT_INVALID && dt < CF_DT_COUNT; }

cf_dtype cf_dtype_listed(int i) {
  static const cf_dtype listed[CF_DT_COUNT - 1] = {
      CF_DT_INT8,    CF_DT_UINT8,   CF_DT_INT16,   CF_DT_UINT16,   CF_DT_INT32,
      CF_DT_UINT32,  CF_DT_INT64,   CF_DT_UINT64,  CF_DT_FLOAT16,  CF_DT_BFLOAT16,
      CF_DT_FLOAT32, CF_DT_FLOAT64, CF_DT_BOOL};
  return i >= 0 && i < CF_DT_COUNT - 1 ? listed[i] : CF_DT_INVALID;
}

const char *cf_dtype_name(cf_dtype dt) { return valid(dt) ? dtypes[dt].name : "invalid"; }

int cf_dtype_size(cf_dtype dt) { return valid(dt) ? dtypes[dt].size : 0; }

bool cf_dtype_is_float(cf_dtype dt) { return valid(dt) && dtypes[dt].kind == DK_FLOAT; }

bool cf_dtype_is_unsigned(cf_dtype dt) {
  return valid(dt) && (dtypes[dt].kind == DK_UINT || dtypes[dt].kind == DK_BOOL);
}

int64_t cf_dtype_wrap(cf_dtype dt, uint64_t u) {
  int bits = cf_dtype_size(dt) * 8;
  if (valid(dt) && dtypes[dt].kind == DK_BOOL) return u != 0;
  if (bits >= 64 || bits == 0) return (int64_t)u;
  u &= (1ull << bits) - 1;
  if (!cf_dtype_is_unsigned(dt) && (u >> (bits - 1))) u |= ~0ull << bits;
  return (int64_t)u;
}

char cf_dtype_npy_kind(cf_dtype dt) { return valid(dt) ? dtypes[dt].npy : 0; }

cf_dtype cf_dtype_matmul_out(cf_dtype dt) { return valid(dt) ? dtypes[dt].matmul_out : CF_DT_INVALID; }

cf_reduction cf_dtype_reduction(cf_dtype dt, cf_reduction red) {
  if (!valid(dt) || dtypes[dt].kind != DK_BOOL) return red;
  return red == CF_RED_SUM ? CF_RED_MAX : red == CF_RED_PROD ? CF_RED_MIN : red;
}

bool cf_dtype_holds(cf_dtype dt, double v, char *why, size_t len) {
  if (!valid(dt)) return false;
  double lo = dtypes[dt].lo, hi = dtypes[dt].hi;
  if (cf_dtype_is_float(dt)) {
    if (v != v || v - v != 0 || (v <= hi && v >= -hi)) return true;
    snprintf(why, len, "%g is beyond %s's largest value %g", v, cf_dtype_name(dt), hi);
    return false;
  }
  if (v >= lo && v <= hi && v == trunc(v)) return true;
  snprintf(why, len, "%g is not an integer in %s's range %.0f..%.0f", v, cf_dtype_name(dt), lo, hi);
  return false;
}

cf_dtype cf_dtype_parse(const char *s) {
  if (!s) return CF_DT_INVALID;
  for (int i = 1; i < CF_DT_COUNT; i++)
    if (strcasecmp(s, dtypes[i].name) == 0) return (cf_dtype)i;
  for (size_t i = 0; i < sizeof dtype_aliases / sizeof dtype_aliases[0]; i++)
    if (strcasecmp(s, dtype_aliases[i].alias) == 0) return dtype_aliases[i].dt;
  return CF_DT_INVALID;
}

/* Shapes come from untrusted files and may be long: messages quote at most 64
 * bytes of them so the reason is never cut off. */
bool cf_shape_parse(const char *s, cf_shape *out, char *why, size_t why_len) {
  memset(out, 0, sizeof *out);
  const char *p = s;
  while (*p == ' ' || *p == '\t') p++;
  if (*p == 0) return true; /* scalar */
  const char *more = strlen(s) > 64 ? "..." : "";
  /* the product of the non-zero dims is bounded too, so that a zero-sized
   * tensor cannot smuggle in dims whose strides overflow */
  int64_t nonzero = 1;
  bool zero = false;
  for (;;) {
    while (*p == ' ' || *p == '\t') p++;
    if (*p < '0' || *p > '9') {
      snprintf(why, why_len, "bad shape '%.64s%s': expected a non-negative integer at '%.16s'", s,
               more, p);
      return false;
    }
    errno = 0;
    char *end;
    long long d = strtoll(p, &end, 10);
    if (errno == ERANGE) {
      snprintf(why, why_len, "bad shape '%.64s%s': dimension out of range", s, more);
      return false;
    }
    if (out->rank == CF_MAX_RANK) {
      snprintf(why, why_len, "shape '%.64s%s' has more than %d dimensions", s, more, CF_MAX_RANK);
      return false;
    }
    out->dims[out->rank++] = d;
    zero |= d == 0;
    if (d && (!cf_mul_i64(nonzero, d, &nonzero) || nonzero > CF_MAX_ELEMENTS)) {
      snprintf(why, why_len, "shape '%.64s%s' has too many elements (limit %lld%s)", s, more,
               (long long)CF_MAX_ELEMENTS, zero ? ", counting its non-zero dims" : "");
      return false;
    }
    p = end;
    while (*p == ' ' || *p == '\t') p++;
    if (*p == 0) return true;
    if (*p != ',') {
      snprintf(why, why_len, "bad shape '%.64s%s': unexpected '%c'", s, more, *p);
      return false;
    }
    p++;
  }
}

char *cf_shape_format(const cf_shape *s, char *buf, size_t len) {
  size_t o = 0;
  buf[0] = 0;
  for (int i = 0; i < s->rank && o < len; i++)
    o += (size_t)snprintf(buf + o, len - o, i ? ",%lld" : "%lld", (long long)s->dims[i]);
  return buf;
}

bool cf_shape_equal(const cf_shape *a, const cf_shape *b) {
  if (a->rank != b->rank) return false;
  for (int i = 0; i < a->rank; i++)
    if (a->dims[i] != b->dims[i]) return false;
  return true;
}

bool cf_shape_elements(const cf_shape *s, int64_t *out) {
  int64_t n = 1;
  for (int i = 0; i < s->rank; i++)
    if (s->dims[i] < 0 || !cf_mul_i64(n, s->dims[i], &n)) return false;
  if (n > CF_MAX_ELEMENTS) return false;
  *out = n;
  return true;
}

bool cf_value_bytes(const cf_value *v, int64_t *out) {
  int64_t n;
  if (!cf_shape_elements(&v->shape, &n)) return false;
  if (!cf_mul_i64(n, cf_dtype_size(v->dtype), &n) || n > CF_MAX_BYTES) return false;
  *out = n;
  return true;
}

char *cf_bytes_text(int64_t bytes, char *buf, size_t len) {
  static const char *unit[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = (double)bytes;
  int u = 0;
  while (v >= 1024 && u < 4)
    v /= 1024, u++;
  if (u == 0)
    snprintf(buf, len, "%lld B", (long long)bytes);
  else
    snprintf(buf, len, "%.1f %s", v, unit[u]);
  return buf;
}

bool cf_bytes_parse(const char *s, size_t len, int64_t max, int64_t *out) {
  char buf[64];
  if (len == 0 || len >= sizeof buf) return false;
  memcpy(buf, s, len);
  buf[len] = 0;
  char *end;
  errno = 0;
  double v = strtod(buf, &end);
  if (end == buf || errno || !(v > 0)) return false;
  static const char units[] = "KMGT";
  const char *u = *end ? strchr(units, toupper((unsigned char)*end)) : NULL;
  double mul = 1;
  if (u) {
    for (const char *k = units; k <= u; k++)
      mul *= 1024;
    end++;
    if (*end == 'i' || *end == 'I') end++;
  }
  if (*end == 'B' || *end == 'b') end++;
  if (*end) return false;
  v *= mul;
  if (v < 1 || v > (double)max || v >= 0x1p63) return false; /* (int64_t)v is defined */
  *out = (int64_t)v;
  return true;
}

/* ---- float16 / bfloat16: round to nearest even, NaN stays NaN ---- */

static uint32_t f32_bits(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  return u;
}

static float bits_f32(uint32_t u) {
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}

float cf_f16_to_f32(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000) << 16, e = (h >> 10) & 0x1f, m = h & 0x3ff;
  if (e == 0) { /* zero or subnormal: m * 2^-24, exact in float */
    float v = ldexpf((float)m, -24);
    return sign ? -v : v;
  }
  if (e == 31) return bits_f32(sign | 0x7f800000 | m << 13); /* Inf, NaN keeps its payload */
  return bits_f32(sign | (e - 15 + 127) << 23 | m << 13);
}

uint16_t cf_f32_to_f16(float f) {
  uint32_t x = f32_bits(f), sign = (x >> 16) & 0x8000, ax = x & 0x7fffffff;
  if (ax > 0x7f800000) /* NaN: quiet, keep the payload's top bits */
    return (uint16_t)(sign | 0x7e00 | ((ax >> 13) & 0x3ff));
  if (ax >= 0x477ff000) return (uint16_t)(sign | 0x7c00); /* >= 65520 rounds to Inf */
  if (ax < 0x38800000) { /* below 2^-14: a float16 subnormal in units of 2^-24 */
    if (ax <= 0x33000000) return (uint16_t)sign; /* <= 2^-25: the tie goes to even 0 */
    uint32_t e = ax >> 23, m = (ax & 0x7fffff) | 0x800000;
    uint32_t shift = 126 - e; /* 14..24: value = m * 2^(e-150) = (m >> shift) * 2^-24 */
    uint32_t r = m >> shift, rem = m & ((1u << shift) - 1), half = 1u << (shift - 1);
    if (rem > half || (rem == half && (r & 1))) r++;
    return (uint16_t)(sign | r);
  }
  uint32_t h = ((ax >> 23) - 127 + 15) << 10 | ((ax >> 13) & 0x3ff), rem = ax & 0x1fff;
  if (rem > 0x1000 || (rem == 0x1000 && (h & 1))) h++; /* a carry moves into the exponent */
  return (uint16_t)(sign | h);
}

float cf_bf16_to_f32(uint16_t h) { return bits_f32((uint32_t)h << 16); }

uint16_t cf_f32_to_bf16(float f) {
  uint32_t x = f32_bits(f);
  if ((x & 0x7fffffff) > 0x7f800000) return (uint16_t)((x >> 16) | 0x40); /* quiet NaN */
  return (uint16_t)((x + 0x7fff + ((x >> 16) & 1)) >> 16); /* overflow carries to Inf */
}
