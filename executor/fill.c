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

static double sat_trunc(double v, double lo, double hi) {
  if (isnan(v)) return 0;
  v = trunc(v);
  return v < lo ? lo : v > hi ? hi : v;
}

double cf_load_f64(const void *data, cf_dtype dt, int64_t i) {
  switch (dt) {
  case CF_DT_INT8: return ((const int8_t *)data)[i];
  case CF_DT_UINT8: return ((const uint8_t *)data)[i];
  case CF_DT_INT16: return ((const int16_t *)data)[i];
  case CF_DT_INT32: return ((const int32_t *)data)[i];
  case CF_DT_INT64: return (double)((const int64_t *)data)[i];
  case CF_DT_FLOAT16: return cf_f16_to_f32(((const uint16_t *)data)[i]);
  case CF_DT_BFLOAT16: return cf_bf16_to_f32(((const uint16_t *)data)[i]);
  case CF_DT_FLOAT32: return ((const float *)data)[i];
  case CF_DT_FLOAT64: return ((const double *)data)[i];
  default: return 0;
  }
}

void cf_store_f64(void *data, cf_dtype dt, int64_t i, double v) {
  switch (dt) {
  case CF_DT_INT8: ((int8_t *)data)[i] = (int8_t)sat_trunc(v, INT8_MIN, INT8_MAX); break;
  case CF_DT_UINT8: ((uint8_t *)data)[i] = (uint8_t)sat_trunc(v, 0, UINT8_MAX); break;
  case CF_DT_INT16: ((int16_t *)data)[i] = (int16_t)sat_trunc(v, INT16_MIN, INT16_MAX); break;
  case CF_DT_INT32: ((int32_t *)data)[i] = (int32_t)sat_trunc(v, INT32_MIN, INT32_MAX); break;
  case CF_DT_INT64: {
    /* 2^63 is the first double above INT64_MAX */
    int64_t r = isnan(v)                        ? 0
                : v >= 9223372036854775808.0    ? INT64_MAX
                : v <= -9223372036854775808.0   ? INT64_MIN
                                                : (int64_t)v;
    ((int64_t *)data)[i] = r;
    break;
  }
  case CF_DT_FLOAT16: ((uint16_t *)data)[i] = cf_f32_to_f16(f32_round_odd(v)); break;
  case CF_DT_BFLOAT16: ((uint16_t *)data)[i] = cf_f32_to_bf16(f32_round_odd(v)); break;
  case CF_DT_FLOAT32: ((float *)data)[i] = (float)v; break;
  case CF_DT_FLOAT64: ((double *)data)[i] = v; break;
  default: break;
  }
}

int64_t cf_load_i64(const void *data, cf_dtype dt, int64_t i) {
  switch (dt) {
  case CF_DT_INT8: return ((const int8_t *)data)[i];
  case CF_DT_UINT8: return ((const uint8_t *)data)[i];
  case CF_DT_INT16: return ((const int16_t *)data)[i];
  case CF_DT_INT32: return ((const int32_t *)data)[i];
  case CF_DT_INT64: return ((const int64_t *)data)[i];
  default: { /* a float: the saturating, truncating conversion */
    int64_t r;
    cf_store_f64(&r, CF_DT_INT64, 0, cf_load_f64(data, dt, i));
    return r;
  }
  }
}

void cf_store_i64(void *data, cf_dtype dt, int64_t i, int64_t v) {
  /* through the unsigned type of the same width: two's complement wrap,
   * defined behaviour in C */
  uint64_t u = (uint64_t)v;
  switch (dt) {
  case CF_DT_INT8:
  case CF_DT_UINT8: ((uint8_t *)data)[i] = (uint8_t)u; break;
  case CF_DT_INT16: ((uint16_t *)data)[i] = (uint16_t)u; break;
  case CF_DT_INT32: ((uint32_t *)data)[i] = (uint32_t)u; break;
  case CF_DT_INT64: ((uint64_t *)data)[i] = u; break;
  default: cf_store_f64(data, dt, i, (double)v); break;
  }
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

void cf_fill_random_at(void *data, cf_dtype dt, int64_t first, int64_t count, uint64_t seed,
                       int rank, const char *name) {
  uint64_t base = stream_base(seed, rank, name);
  /* float32 and float64, the common cases, without the per-element
   * dispatch (the same values: a float64 in (-1, 1) never rounds to 0 in
   * either, and float32's rounding up to 1 wraps to -1) */
  if (dt == CF_DT_FLOAT32) {
    float *o = data;
    for (int64_t i = 0; i < count; i++) {
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
    switch (dt) {
    case CF_DT_UINT8: ((uint8_t *)data)[i] = (uint8_t)(head && !small ? 1 : small); break;
    case CF_DT_INT8:
    case CF_DT_INT16:
    case CF_DT_INT32:
    case CF_DT_INT64: cf_store_i64(data, dt, i, head && small == 8 ? 1 : small - 8); break;
    default: {
      /* (k + 1/2) * 2^-52 - 1 for k in [0, 2^53): in (-1, 1), never 0 */
      double v = ((double)(r >> 11) + 0.5) * 0x1p-52 - 1.0;
      cf_store_f64(data, dt, i, v);
      /* Rounding may reach 1 (float32 and the 16-bit types) or 0 (float16
       * below 2^-25): 1 wraps around to -1, as if [-1, 1) were a circle;
       * element 0 stays non-zero. */
      double got = cf_load_f64(data, dt, i);
      if (got >= 1.0) cf_store_f64(data, dt, i, -1.0);
      if (head && got == 0) cf_store_f64(data, dt, i, 0.5);
      break;
    }
    }
  }
}

void cf_fill_node(const cf_node *n, void *data, cf_dtype dt, int64_t count, uint64_t seed,
                  int rank) {
  cf_fill_node_at(n, data, dt, 0, count, seed, rank);
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
