/* compute.c - the executor's compute ops on host memory, for one rank.
 *
 * Floats go through OpenBLAS (float16/bfloat16 widened to float32 and
 * rounded back to nearest even); integer products are exact in unsigned
 * arithmetic of the accumulator's width, so they wrap as two's complement
 * int32 (int64 for int64 operands) do, with no undefined overflow. The
 * quantized matmul accumulates int8 x int8 in int32 and hands the epilogue
 * to the generated CF_K_QUANT kernel, so the executor and the fused op share
 * one definition of it. Elementwise ops broadcast like numpy by walking the
 * output a row at a time with per-operand strides (0 on broadcast dims).
 *
 * Ranks run this concurrently: nothing here writes shared state, and errors
 * go to the caller's (per-rank) context rather than the graph's.
 */
#include "host.h"

#include <cblas.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SHAPE_STR(s, buf) cf_shape_format((s), (buf), sizeof(buf))

/* A size for a message, by value (C11 keeps the temporary alive through
 * the call it is an argument of). */
typedef struct size_text {
  char s[32];
} size_text;
static size_text bytes_text(int64_t bytes) {
  size_text t;
  cf_bytes_text(bytes, t.s, sizeof t.s);
  return t;
}

/* cf_node_error's message, but in ctx: g->ctx is shared by every rank. */
__attribute__((format(printf, 5, 6))) static cf_status node_err(cf_context *ctx, const cf_graph *g,
                                                                  const cf_node *n, cf_status st,
                                                                  const char *fmt, ...) {
  char msg[1536];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  return cf_error(ctx, st, g->file, n->line, "node '%s': %s", n->name, msg);
}

/* malloc of count elements of size bytes, NULL on overflow or OOM (never
 * NULL for 0 elements, so a NULL always means failure). */
static void *alloc_n(int64_t count, int64_t size) {
  int64_t bytes;
  if (count < 0 || !cf_mul_i64(count, size, &bytes) || (uint64_t)bytes > SIZE_MAX) return NULL;
  return malloc(bytes ? (size_t)bytes : 1);
}

/* The tensors must be what inference says: a wrong plan is an internal
 * error named here rather than a wild read or write later. */
static cf_status check_tensor(cf_context *ctx, const cf_graph *g, const cf_node *n,
                              const char *what, int j, const cf_tensor *t, const cf_value *want) {
  char b1[160], b2[160];
  int64_t count;
  if (t->dtype != want->dtype || !cf_shape_equal(&t->shape, &want->shape))
    return node_err(ctx, g, n, CF_ERR_INVALID, "internal: %s %d is %s (%s), expected %s (%s)", what,
                    j, cf_dtype_name(t->dtype), SHAPE_STR(&t->shape, b1),
                    cf_dtype_name(want->dtype), SHAPE_STR(&want->shape, b2));
  if (!cf_shape_elements(&t->shape, &count) || count != t->count || (count && !t->data))
    return node_err(ctx, g, n, CF_ERR_INVALID, "internal: %s %d has %lld elements for shape (%s)",
                    what, j, (long long)t->count, SHAPE_STR(&t->shape, b1));
  return CF_OK;
}

static cf_status check_io(cf_context *ctx, const cf_graph *g, const cf_node *n, const cf_tensor *in,
                          const cf_tensor *out) {
  cf_status st;
  if (n->n_out && !n->out) return node_err(ctx, g, n, CF_ERR_INVALID, "internal: types not inferred");
  for (int j = 0; j < n->n_in; j++) {
    const cf_node *src = &g->nodes[n->in[j].node];
    if ((st = check_tensor(ctx, g, n, "operand", j, &in[j], &src->out[n->in[j].port]))) return st;
  }
  for (int j = 0; j < n->n_out; j++)
    if ((st = check_tensor(ctx, g, n, "output", j, &out[j], &n->out[j]))) return st;
  return CF_OK;
}

/* ---------------- matrix products ---------------- */

/* The elements of t as uint32 (two's complement of the sign-extended
 * value): t's own data for int32, else a malloc'd copy in *owned. */
static const uint32_t *widen_u32(const cf_tensor *t, uint32_t **owned) {
  *owned = NULL;
  if (t->dtype == CF_DT_INT32 || t->dtype == CF_DT_UINT32) return t->data;
  if (!(*owned = alloc_n(t->count, 4))) return NULL;
  for (int64_t i = 0; i < t->count; i++) (*owned)[i] = (uint32_t)cf_load_i64(t->data, t->dtype, i);
  return *owned;
}

/* c (m,n) = a (m,k) @ b (k,n) modulo 2^32: i-p-j order, so the inner loop
 * streams one row of b into one row of c and vectorizes. */
static void gemm_u32(int64_t m, int64_t k, int64_t n, const uint32_t *restrict a,
                     const uint32_t *restrict b, uint32_t *restrict c) {
  for (int64_t i = 0; i < m; i++) {
    uint32_t *restrict row = c + i * n;
    memset(row, 0, (size_t)n * sizeof *row);
    for (int64_t p = 0; p < k; p++) {
      uint32_t x = a[i * k + p];
      const uint32_t *restrict brow = b + p * n;
      if (x)
        for (int64_t j = 0; j < n; j++) row[j] += x * brow[j];
    }
  }
}

/* The same modulo 2^64 for int64 operands (their loads and stores are
 * bit for bit uint64): rare, so a plain dot product per element. */
static void gemm_u64(int64_t m, int64_t k, int64_t n, const uint64_t *a, const uint64_t *b,
                     uint64_t *c) {
  for (int64_t i = 0; i < m; i++)
    for (int64_t j = 0; j < n; j++) {
      uint64_t s = 0;
      for (int64_t p = 0; p < k; p++) s += a[i * k + p] * b[p * n + j];
      c[i * n + j] = s;
    }
}

static void u8_to_f32(const void *src, cf_dtype dt, int64_t off, int64_t count, float *dst) {
  if (dt == CF_DT_INT8)
    for (int64_t i = 0; i < count; i++) dst[i] = ((const int8_t *)src)[off + i];
  else
    for (int64_t i = 0; i < count; i++) dst[i] = ((const uint8_t *)src)[off + i];
}

/* 8-bit operands through sgemm, exactly: a product is at most 2^14 (int8)
 * or 2^16 (uint8) in magnitude, so float32 sums of KB = 2^24 / that many
 * products are exact integers in any order (FMA or not); sgemm sums blocks
 * of KB columns of a and rows of b, and each block is added into c in
 * uint32, wrapping like gemm_u32. Rows of a go through in slices of about
 * 4 Mi elements to bound the float copies. gemm_u32's loop is not
 * vectorized at -O2: a 1024^3 QuantMatMul on 2 rank threads went from 345
 * to 128 ms (most of the rest is page faults of the temporaries). */

static bool imatmul8(const cf_tensor *a, const cf_tensor *b, uint32_t *c, int64_t m, int64_t k,
                     int64_t nn) {
  int64_t kb = a->dtype == CF_DT_UINT8 ? 256 : 1024;
  int64_t rb = k * m <= ((int64_t)4 << 20) ? m : ((int64_t)4 << 20) / k;
  if (rb < 16) rb = 16;
  if (rb > m) rb = m;
  /* one block of k: sgemm writes its floats over c itself */
  float *fa = alloc_n(rb * k, 4), *fb = alloc_n(k * nn, 4);
  float *fc = k > kb ? alloc_n(rb * nn, 4) : NULL;
  bool ok = fa && fb && (fc || k <= kb);
  if (ok) u8_to_f32(b->data, b->dtype, 0, k * nn, fb);
  for (int64_t i0 = 0; ok && i0 < m; i0 += rb) {
    int64_t r = m - i0 < rb ? m - i0 : rb;
    uint32_t *crow = c + i0 * nn;
    float *out = fc ? fc : (float *)(void *)crow;
    u8_to_f32(a->data, a->dtype, i0 * k, r * k, fa);
    for (int64_t p0 = 0; p0 < k; p0 += kb) {
      int64_t kk = k - p0 < kb ? k - p0 : kb;
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (blasint)r, (blasint)nn, (blasint)kk,
                  1.0f, fa + p0, (blasint)k, fb + p0 * nn, (blasint)nn, 0.0f, out, (blasint)nn);
      for (int64_t e = 0; e < r * nn; e++) {
        float f;
        memcpy(&f, &out[e], sizeof f); /* in place: the same bytes as crow[e] */
        crow[e] = (p0 ? crow[e] : 0) + (uint32_t)(int32_t)f;
      }
    }
  }
  free(fa);
  free(fb);
  free(fc);
  return ok;
}

/* 8- to 32-bit integer operands into a 32-bit c (m,n), wrapping. */
static cf_status imatmul32(cf_context *ctx, const cf_graph *g, const cf_node *n, const cf_tensor *a,
                           const cf_tensor *b, uint32_t *c, int64_t m, int64_t k, int64_t nn) {
  if ((a->dtype == CF_DT_INT8 || a->dtype == CF_DT_UINT8) && a->dtype == b->dtype && m > 0 &&
      k > 0 && nn > 0) {
    if (!imatmul8(a, b, c, m, k, nn))
      return node_err(
          ctx, g, n, CF_ERR_NO_MEMORY,
          "cannot allocate %s for the float copies of the 8-bit operands: out of memory",
          bytes_text((a->count + b->count) * 4).s);
    return CF_OK;
  }
  uint32_t *oa, *ob;
  const uint32_t *wa = widen_u32(a, &oa), *wb = widen_u32(b, &ob);
  cf_status st = CF_OK;
  if (!wa || !wb)
    st = node_err(ctx, g, n, CF_ERR_NO_MEMORY,
                  "cannot allocate %s widening the int operands: out of memory",
                  bytes_text((a->count + b->count) * 4).s);
  else
    gemm_u32(m, k, nn, wa, wb, c);
  free(oa);
  free(ob);
  return st;
}

/* float16/bfloat16 operands: float32 copies, sgemm, rounded back. */
static void to_f32(const cf_tensor *t, float *dst) {
  const uint16_t *s = t->data;
  for (int64_t i = 0; i < t->count; i++)
    dst[i] = t->dtype == CF_DT_FLOAT16 ? cf_f16_to_f32(s[i]) : cf_bf16_to_f32(s[i]);
}

/* Row-invariant products for --deterministic: every c[i][j] is
 * sum_p a[i][p] * b[p][j] accumulated in p order with one multiply and one
 * add per term (this file is built with -ffp-contract=off), whatever rows
 * are computed together, so a fused op that multiplies a block of rows
 * gets the bits the whole MatMul gets. OpenBLAS picks kernels (and small-
 * matrix paths) by shape, which changes the rounding of a row with the
 * number of rows around it. Four rows and 16 columns at a time reuse each
 * b row from registers. */
#define DET_GEMM(NAME, T)                                                                          \
  static void NAME(int64_t m, int64_t k, int64_t n, const T *restrict a, const T *restrict b,     \
                   T *restrict c) {                                                               \
    for (int64_t i = 0; i < m; i += 4) {                                                          \
      int rows = m - i < 4 ? (int)(m - i) : 4;                                                    \
      for (int64_t j0 = 0; j0 < n; j0 += 16) {                                                    \
        int w = n - j0 < 16 ? (int)(n - j0) : 16;                                                 \
        T acc[4][16] = {{0}};                                                                     \
        for (int64_t p = 0; p < k; p++) {                                                         \
          const T *brow = b + p * n + j0;                                                         \
          for (int r = 0; r < rows; r++) {                                                        \
            T x = a[(i + r) * k + p];                                                             \
            for (int j = 0; j < w; j++) acc[r][j] = acc[r][j] + x * brow[j];                      \
          }                                                                                       \
        }                                                                                         \
        for (int r = 0; r < rows; r++) memcpy(c + (i + r) * n + j0, acc[r], sizeof(T) * (size_t)w); \
      }                                                                                           \
    }                                                                                             \
  }
DET_GEMM(det_sgemm, float)
DET_GEMM(det_dgemm, double)

static void sgemm(int64_t m, int64_t k, int64_t n, const float *a, const float *b, float *c,
                  unsigned flags) {
  if (flags & CF_COMPUTE_DETERMINISTIC) {
    det_sgemm(m, k, n, a, b, c);
    return;
  }
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (blasint)m, (blasint)n, (blasint)k, 1.0f,
              a, (blasint)k, b, (blasint)n, 0.0f, c, (blasint)n);
}

static cf_status matmul_half(cf_context *ctx, const cf_graph *g, const cf_node *n,
                             const cf_tensor *a, const cf_tensor *b, cf_tensor *c, int64_t m,
                             int64_t k, int64_t nn, unsigned flags) {
  float *fa = alloc_n(a->count, 4), *fb = alloc_n(b->count, 4), *fc = alloc_n(c->count, 4);
  cf_status st = CF_OK;
  if (!fa || !fb || !fc) {
    st = node_err(ctx, g, n, CF_ERR_NO_MEMORY,
                  "cannot allocate %s for the float32 copies: out of memory",
                  bytes_text((a->count + b->count + c->count) * 4).s);
    goto fail;
  }
  to_f32(a, fa);
  to_f32(b, fb);
  sgemm(m, k, nn, fa, fb, fc, flags);
  uint16_t *dst = c->data;
  for (int64_t i = 0; i < c->count; i++)
    dst[i] = c->dtype == CF_DT_FLOAT16 ? cf_f32_to_f16(fc[i]) : cf_f32_to_bf16(fc[i]);
fail:
  free(fa);
  free(fb);
  free(fc);
  return st;
}

/* (m,k) @ (k,n) dimensions of a MatMul-like node, checked for BLAS's int. */
static cf_status mm_dims(cf_context *ctx, const cf_graph *g, const cf_node *n, const cf_tensor *a,
                         const cf_tensor *b, int64_t *m, int64_t *k, int64_t *nn) {
  *m = a->shape.dims[0];
  *k = a->shape.dims[1];
  *nn = b->shape.dims[1];
  if (*m > INT_MAX || *k > INT_MAX || *nn > INT_MAX)
    return node_err(ctx, g, n, CF_ERR_INVALID,
                    "matmul (%lld,%lld) @ (%lld,%lld): dimensions above %d are not supported",
                    (long long)*m, (long long)*k, (long long)*k, (long long)*nn, INT_MAX);
  return CF_OK;
}

static cf_status run_matmul(cf_context *ctx, const cf_graph *g, const cf_node *n,
                            const cf_tensor *in, cf_tensor *out, unsigned flags) {
  const cf_tensor *a = &in[0], *b = &in[1];
  int64_t m, k, nn;
  cf_status st = mm_dims(ctx, g, n, a, b, &m, &k, &nn);
  if (st) return st;
  if (!out->count) return CF_OK;
  if (!k) { /* an empty sum (BLAS rejects lda = 0) */
    memset(out->data, 0, (size_t)(out->count * cf_dtype_size(out->dtype)));
    return CF_OK;
  }
  switch (a->dtype) {
  case CF_DT_FLOAT32: sgemm(m, k, nn, a->data, b->data, out->data, flags); return CF_OK;
  case CF_DT_FLOAT64:
    if (flags & CF_COMPUTE_DETERMINISTIC) {
      det_dgemm(m, k, nn, a->data, b->data, out->data);
      return CF_OK;
    }
    cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (blasint)m, (blasint)nn, (blasint)k, 1.0,
                a->data, (blasint)k, b->data, (blasint)nn, 0.0, out->data, (blasint)nn);
    return CF_OK;
  case CF_DT_FLOAT16:
  case CF_DT_BFLOAT16: return matmul_half(ctx, g, n, a, b, out, m, k, nn, flags);
  case CF_DT_INT64:
  case CF_DT_UINT64: gemm_u64(m, k, nn, a->data, b->data, out->data); return CF_OK;
  case CF_DT_INT8:
  case CF_DT_UINT8:
  case CF_DT_INT16:
  case CF_DT_UINT16:
  case CF_DT_INT32:
  case CF_DT_UINT32: return imatmul32(ctx, g, n, a, b, out->data, m, k, nn);
  default:
    return node_err(ctx, g, n, CF_ERR_INVALID, "MatMul of %s is not supported",
                    cf_dtype_name(a->dtype));
  }
}

/* x1 int8 (m,k), x2 int8 (k,n), x1_scale float32 (m,1), x2_scale float32
 * (1,n) [, bias int32 (n)]: acc = x1 @ x2 + bias in int32 (wrapping), then
 * out = (dtype)(acc * x1_scale[i] * x2_scale[j]) by the QUANT kernel. */
static cf_status quant_core(cf_context *ctx, const cf_graph *g, const cf_node *n, const cf_tensor *a,
                            const cf_tensor *b, const cf_tensor *x1s, const cf_tensor *x2s,
                            const cf_tensor *bias, cf_tensor *out) {
  int64_t m, k, nn;
  uint32_t *acc = NULL;
  cf_status st = mm_dims(ctx, g, n, a, b, &m, &k, &nn);
  if (st) return st;
  if (out->dtype != CF_DT_BFLOAT16 && out->dtype != CF_DT_FLOAT16)
    return node_err(ctx, g, n, CF_ERR_INVALID, "QuantMatMul output must be bfloat16 or float16, not %s",
                    cf_dtype_name(out->dtype));
  /* The plan resolves this kernel before the ranks start, so here it is a
   * lookup in the context's cache (cf_codegen_kernel would compile on a
   * miss, under the JIT's lock, while every rank waited for it). */
  void *p;
  cf_kernel_quant_fn fn;
  cf_kernel_key key = {.kind = CF_K_QUANT, .dtype = out->dtype, .red = CF_RED_SUM, .arity = 0};
  if ((st = cf_codegen_kernel(ctx, &key, &p, NULL)))
    return node_err(ctx, g, n, st, "quantized epilogue: %s", cf_errmsg(ctx));
  memcpy(&fn, &p, sizeof fn); /* ISO C has no object -> function pointer cast */
  if (!out->count) return CF_OK;
  if (!(acc = alloc_n(out->count, 4)))
    return node_err(ctx, g, n, CF_ERR_NO_MEMORY,
                    "cannot allocate %s for the int32 accumulator: out of memory",
                    bytes_text(out->count * 4).s);
  if ((st = imatmul32(ctx, g, n, a, b, acc, m, k, nn))) goto fail;
  if (bias) {
    const uint32_t *bv = bias->data;
    for (int64_t i = 0; i < m; i++)
      for (int64_t j = 0; j < nn; j++) acc[i * nn + j] += bv[j];
  }
  fn(out->data, (const int32_t *)acc, x1s->data, x2s->data, m, nn);
fail:
  free(acc);
  return st;
}

static cf_status run_quant(cf_context *ctx, const cf_graph *g, const cf_node *n,
                           const cf_tensor *in, cf_tensor *out) {
  return quant_core(ctx, g, n, &in[0], &in[1], &in[2], &in[3], n->n_in == 5 ? &in[4] : NULL, out);
}

cf_status cf_compute_product(cf_context *ctx, const cf_graph *g, const cf_node *n, const cf_tensor *x1,
                             const cf_tensor *x2, const cf_tensor *x1_scale,
                             const cf_tensor *x2_scale, const cf_tensor *bias, cf_tensor *out,
                             unsigned flags) {
  if (x1_scale) return quant_core(ctx, g, n, x1, x2, x1_scale, x2_scale, bias, out);
  cf_tensor in[2] = {*x1, *x2};
  cf_status st = run_matmul(ctx, g, n, in, out, flags);
  if (st || !bias) return st;
  int64_t cols = out->shape.dims[1];
  for (int64_t i = 0; cols && i < out->count; i++)
    cf_store_f64(out->data, out->dtype, i,
                 cf_load_f64(out->data, out->dtype, i) + cf_load_f64(bias->data, bias->dtype, i % cols));
  return CF_OK;
}

/* ---------------- elementwise ---------------- */

static double op_f64(cf_op op, double x, double y) {
  return op == CF_OP_ADD ? x + y : op == CF_OP_SUB ? x - y : x * y;
}

static float op_f32(cf_op op, float x, float y) {
  return op == CF_OP_ADD ? x + y : op == CF_OP_SUB ? x - y : x * y;
}

static uint64_t op_u64(cf_op op, uint64_t x, uint64_t y) {
  return op == CF_OP_ADD ? x + y : op == CF_OP_SUB ? x - y : x * y;
}

static float ld_half(const void *p, cf_dtype dt, int64_t i) {
  uint16_t h = ((const uint16_t *)p)[i];
  return dt == CF_DT_FLOAT16 ? cf_f16_to_f32(h) : cf_bf16_to_f32(h);
}

/* One output row: z[zo + j] = op(x[xo + j*sx], y[yo + j*sy]) for j < len. */
typedef struct row_args {
  cf_op op;
  cf_dtype dt;
  void *z;
  const void *x, *y;
  int64_t zo, xo, yo, sx, sy, len;
} row_args;

static void binary_row(const row_args *r) {
  int64_t len = r->len, xo = r->xo, yo = r->yo, zo = r->zo, sx = r->sx, sy = r->sy;
  switch (r->dt) {
  case CF_DT_FLOAT32: {
    const float *x = r->x, *y = r->y;
    float *z = r->z;
    for (int64_t j = 0; j < len; j++) z[zo + j] = op_f32(r->op, x[xo + j * sx], y[yo + j * sy]);
    break;
  }
  case CF_DT_FLOAT64: {
    const double *x = r->x, *y = r->y;
    double *z = r->z;
    for (int64_t j = 0; j < len; j++) z[zo + j] = op_f64(r->op, x[xo + j * sx], y[yo + j * sy]);
    break;
  }
  case CF_DT_FLOAT16:
  case CF_DT_BFLOAT16: {
    uint16_t *z = r->z;
    for (int64_t j = 0; j < len; j++) {
      float v = op_f32(r->op, ld_half(r->x, r->dt, xo + j * sx), ld_half(r->y, r->dt, yo + j * sy));
      z[zo + j] = r->dt == CF_DT_FLOAT16 ? cf_f32_to_f16(v) : cf_f32_to_bf16(v);
    }
    break;
  }
  default: /* integers: unsigned arithmetic, stored back wrapping */
    for (int64_t j = 0; j < len; j++) {
      uint64_t v = op_u64(r->op, (uint64_t)cf_load_i64(r->x, r->dt, xo + j * sx),
                          (uint64_t)cf_load_i64(r->y, r->dt, yo + j * sy));
      int64_t s;
      memcpy(&s, &v, sizeof s);
      cf_store_i64(r->z, r->dt, zo + j, s);
    }
    break;
  }
}

/* Element strides of operand shape s inside an output of rank r, numpy
 * style: leading dims s lacks and dims of size 1 get stride 0. */
static void bcast_strides(const cf_shape *s, int r, int64_t *strides) {
  int64_t step = 1;
  for (int d = r - 1; d >= 0; d--) {
    int ds = s->rank - r + d;
    strides[d] = ds < 0 || s->dims[ds] == 1 ? 0 : step;
    if (ds >= 0) step *= s->dims[ds];
  }
}

static cf_status run_binary(cf_context *ctx, const cf_graph *g, const cf_node *n,
                            const cf_tensor *in, cf_tensor *out) {
  const cf_shape *os = &out->shape;
  int r = os->rank;
  int64_t sx[CF_MAX_RANK], sy[CF_MAX_RANK], idx[CF_MAX_RANK] = {0};
  char b1[160], b2[160], b3[160];
  for (int d = 0; d < r; d++) { /* out must be the broadcast of the operands */
    int da = in[0].shape.rank - r + d, db = in[1].shape.rank - r + d;
    int64_t xa = da >= 0 ? in[0].shape.dims[da] : 1, xb = db >= 0 ? in[1].shape.dims[db] : 1;
    if ((xa != 1 && xa != os->dims[d]) || (xb != 1 && xb != os->dims[d]) || in[0].shape.rank > r ||
        in[1].shape.rank > r)
      return node_err(ctx, g, n, CF_ERR_INVALID, "internal: (%s) and (%s) do not broadcast to (%s)",
                      SHAPE_STR(&in[0].shape, b1), SHAPE_STR(&in[1].shape, b2),
                      SHAPE_STR(os, b3));
  }
  if (!out->count) return CF_OK;
  bcast_strides(&in[0].shape, r, sx);
  bcast_strides(&in[1].shape, r, sy);
  row_args ra = {.op = n->op, .dt = out->dtype, .z = out->data, .x = in[0].data, .y = in[1].data,
                 .sx = r ? sx[r - 1] : 0, .sy = r ? sy[r - 1] : 0, .len = r ? os->dims[r - 1] : 1};
  for (ra.zo = 0; ra.zo < out->count; ra.zo += ra.len) {
    binary_row(&ra);
    /* odometer over the outer dims; xo/yo follow their strides */
    for (int d = r - 2; d >= 0; d--) {
      ra.xo += sx[d];
      ra.yo += sy[d];
      if (++idx[d] < os->dims[d]) break;
      ra.xo -= sx[d] * os->dims[d];
      ra.yo -= sy[d] * os->dims[d];
      idx[d] = 0;
    }
  }
  return CF_OK;
}

/* numpy astype: integer -> integer wraps, float -> integer truncates toward
 * zero and saturates (NaN -> 0), -> float16/bfloat16 rounds to nearest even
 * once (int64 beyond 2^53 rounds twice: through float64 first). */
static void run_cast(const cf_tensor *x, cf_tensor *y) {
  cf_dtype from = x->dtype, to = y->dtype;
  if (from == to) {
    if (y->data != x->data) memmove(y->data, x->data, (size_t)(x->count * cf_dtype_size(from)));
    return;
  }
  bool fi = !cf_dtype_is_float(from), ti = !cf_dtype_is_float(to);
  for (int64_t i = 0; i < x->count; i++) {
    if (fi && ti) {
      cf_store_i64(y->data, to, i, cf_load_i64(x->data, from, i));
    } else if (fi && to == CF_DT_FLOAT32) { /* one rounding */
      int64_t v = cf_load_i64(x->data, from, i);
      ((float *)y->data)[i] = cf_dtype_is_unsigned(from) ? (float)(uint64_t)v : (float)v;
    } else if (fi) {
      cf_store_f64(y->data, to, i, cf_load_f64(x->data, from, i));
    } else {
      cf_store_f64(y->data, to, i, cf_load_f64(x->data, from, i));
    }
  }
}

/* Opaque port p: random data named "NODE:p". */
static cf_status run_opaque(cf_context *ctx, const cf_graph *g, const cf_node *n, cf_tensor *out,
                            int rank, uint64_t seed) {
  size_t len = strlen(n->name) + 16;
  char *name = malloc(len);
  if (!name) return node_err(ctx, g, n, CF_ERR_NO_MEMORY, "out of memory");
  for (int p = 0; p < n->n_out; p++) {
    snprintf(name, len, "%s:%d", n->name, p);
    cf_fill_random(out[p].data, out[p].dtype, out[p].count, seed, rank, name);
  }
  free(name);
  return CF_OK;
}

cf_status cf_compute_run(cf_context *ctx, const cf_graph *g, const cf_node *n, const cf_tensor *in,
                         cf_tensor *out, int rank, uint64_t seed, unsigned flags) {
  cf_status st = check_io(ctx, g, n, in, out);
  if (st) return st;
  switch (n->op) {
  case CF_OP_INPUT:
  case CF_OP_CONSTANT:
    cf_fill_node(n, out[0].data, out[0].dtype, out[0].count, seed, rank);
    return CF_OK;
  case CF_OP_MATMUL: return run_matmul(ctx, g, n, in, out, flags);
  case CF_OP_QUANTMATMUL: return run_quant(ctx, g, n, in, out);
  case CF_OP_ADD:
  case CF_OP_SUB:
  case CF_OP_MUL:
    if (in[0].dtype != in[1].dtype || in[0].dtype != out->dtype)
      return node_err(ctx, g, n, CF_ERR_INVALID, "operand dtypes differ: %s and %s",
                      cf_dtype_name(in[0].dtype), cf_dtype_name(in[1].dtype));
    return run_binary(ctx, g, n, in, out);
  case CF_OP_CAST: run_cast(&in[0], &out[0]); return CF_OK;
  case CF_OP_RESHAPE:
    if (out->data != in->data)
      memmove(out->data, in->data, (size_t)(in->count * cf_dtype_size(in->dtype)));
    return CF_OK;
  case CF_OP_SHARD: {
    cf_shape local;
    int64_t origin[CF_MAX_RANK];
    if ((st = cf_shard_block(g, n, &in->shape, rank, &local, origin))) return st;
    cf_copy_block(in->data, &in->shape, origin, &local, (size_t)cf_dtype_size(in->dtype),
                  out->data);
    return CF_OK;
  }
  case CF_OP_OPAQUE: return run_opaque(ctx, g, n, out, rank, seed);
  default:
    return node_err(ctx, g, n, CF_ERR_INVALID, "%s is not a compute op the executor runs here",
                    cf_op_table[n->op].name);
  }
}
