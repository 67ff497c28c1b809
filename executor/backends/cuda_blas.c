/* backends/cuda_blas.c - the CUDA backend's compute ops: MatMul on cuBLAS,
 * everything else through the host.
 *
 * cuBLAS is opened with dlopen on first use, like the driver: a file or a
 * folder named by CUBLAS_LIBRARY ("none" turns it off), else
 * libcublas.so.13/.12/.11 by the library path or in the toolkit's folder.
 * Each view gets its own handle on its own stream. A product is the
 * column-major out^T = x2^T x1^T of the row-major out = x1 @ x2, in
 * cublasGemmEx with float32 (float64 for float64) accumulation; a bias row
 * is a second, rank-1 GEMM against a vector of ones. Products cuBLAS does
 * not take (integers, quantized, --deterministic, no cuBLAS) and every
 * other op run on the host: operands downloaded, compute.c, outputs
 * uploaded.
 */
#define _GNU_SOURCE
#include "cuda_internal.h"

#include <dlfcn.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static CUdeviceptr dptr(const void *p) { return (CUdeviceptr)(uintptr_t)p; }

/* cuBLAS: $CUBLAS_LIBRARY (a file, or a folder holding libcublas.so.*),
 * else libcublas.so.* by the library path, else the toolkit's folder. */
static bool try_blas(blas_api *b, const char *path) {
  void *lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (!lib) return false;
  bool ok = true;
#define X(fname, ret, args)                                                                        \
  {                                                                                                \
    void *p = dlsym(lib, #fname);                                                                    \
    if (p)                                                                                         \
      memcpy(&b->fname, &p, sizeof p);                                                             \
    else                                                                                           \
      ok = false;                                                                                  \
  }
  CF_CUBLAS_FUNCS(X)
#undef X
  if (!ok) {
    dlclose(lib);
    return false;
  }
  b->lib = lib;
  snprintf(b->path, sizeof b->path, "%s", path);
  return true;
}

static bool load_blas(cuda_root *r) {
  if (r->blas_tried) return r->blas_ok;
  r->blas_tried = true;
  static const char *const names[] = {"libcublas.so.13", "libcublas.so.12", "libcublas.so.11",
                                      "libcublas.so"};
  static const char *const dirs[] = {"/usr/local/cuda/lib64", "/usr/local/cuda/targets/x86_64-linux/lib"};
  char path[600];
  const char *env = cf_env(CF_ENV_CUBLAS);
  struct stat sb;
  if (env && (!strcmp(env, "none") || !strcmp(env, "off"))) {
    snprintf(r->blas_why, sizeof r->blas_why, "CUBLAS_LIBRARY=%s", env);
    return false;
  }
  if (env && *env) {
    if (stat(env, &sb) == 0 && S_ISDIR(sb.st_mode)) {
      for (size_t i = 0; i < sizeof names / sizeof *names && !r->blas_ok; i++) {
        snprintf(path, sizeof path, "%s/%s", env, names[i]);
        r->blas_ok = try_blas(&r->blas, path);
      }
    } else {
      r->blas_ok = try_blas(&r->blas, env);
    }
  }
  for (size_t i = 0; i < sizeof names / sizeof *names && !r->blas_ok; i++)
    r->blas_ok = try_blas(&r->blas, names[i]);
  for (size_t d = 0; d < sizeof dirs / sizeof *dirs && !r->blas_ok; d++)
    for (size_t i = 0; i < sizeof names / sizeof *names && !r->blas_ok; i++) {
      snprintf(path, sizeof path, "%s/%s", dirs[d], names[i]);
      r->blas_ok = try_blas(&r->blas, path);
    }
  if (!r->blas_ok)
    snprintf(r->blas_why, sizeof r->blas_why,
             "cuBLAS not found (CUBLAS_LIBRARY%s%s, libcublas.so.13/.12/.11 on the library path, "
             "/usr/local/cuda/lib64)",
             env && *env ? "=" : " unset", env && *env ? env : "");
  return r->blas_ok;
}


static cf_status host_buffers(cf_context *ctx, const cf_tensor *dev, cf_tensor *host, int n) {
  for (int i = 0; i < n; i++) {
    host[i] = dev[i];
    host[i].data = NULL;
    size_t bytes = (size_t)dev[i].count * (size_t)cf_dtype_size(dev[i].dtype);
    if (!dev[i].data) continue;
    if (!(host[i].data = malloc(bytes ? bytes : 1))) return cf_error(ctx, CF_ERR_NO_MEMORY, NULL, 0, "out of memory");
  }
  return CF_OK;
}

static size_t tbytes(const cf_tensor *t) { return (size_t)t->count * (size_t)cf_dtype_size(t->dtype); }

/* Any op on device buffers: its operands copied to the host, cf_compute_run
 * there, its outputs copied back. An output that is an operand's buffer
 * (Reshape in place) shares the operand's host copy. */
static cf_status host_compute(cf_device *d, cf_context *ctx, const cf_graph *g, const cf_node *n,
                              const cf_tensor *in, cf_tensor *out, int rank, uint64_t seed, unsigned flags) {
  int ni = n->n_in, no = n->n_out;
  cf_tensor *hin = calloc((size_t)ni + 1, sizeof *hin), *hout = calloc((size_t)no + 1, sizeof *hout);
  bool *shared = calloc((size_t)no + 1, sizeof *shared);
  cf_status st = hin && hout && shared ? CF_OK : cf_error(ctx, CF_ERR_NO_MEMORY, NULL, 0, "out of memory");
  if (!st) st = host_buffers(ctx, in, hin, ni);
  for (int i = 0; i < ni && !st; i++) st = cf_device_download(d, hin[i].data, in[i].data, tbytes(&in[i]));
  for (int k = 0; k < no && !st; k++) {
    hout[k] = out[k];
    hout[k].data = NULL;
    for (int i = 0; i < ni && !hout[k].data; i++)
      if (in[i].data == out[k].data) hout[k].data = hin[i].data, shared[k] = true;
    if (!shared[k] && !(hout[k].data = malloc(tbytes(&out[k]) ? tbytes(&out[k]) : 1)))
      st = cf_error(ctx, CF_ERR_NO_MEMORY, NULL, 0, "out of memory");
  }
  if (!st) st = cf_compute_run(ctx, g, n, hin, hout, rank, seed, flags);
  for (int k = 0; k < no && !st; k++) st = cf_device_upload(d, out[k].data, hout[k].data, tbytes(&out[k]));
  for (int k = 0; hout && k < no; k++)
    if (!shared[k]) free(hout[k].data);
  for (int i = 0; hin && i < ni; i++) free(hin[i].data);
  free(hin);
  free(hout);
  free(shared);
  return st;
}

static cf_status host_product(cf_device *d, cf_context *ctx, const cf_graph *g, const cf_node *n,
                              const cf_tensor *x1, const cf_tensor *x2, const cf_tensor *x1s,
                              const cf_tensor *x2s, const cf_tensor *bias, cf_tensor *out, unsigned flags) {
  const cf_tensor *dev[5] = {x1, x2, x1s, x2s, bias};
  cf_tensor host[5] = {{0}}, hout = *out;
  cf_status st = CF_OK;
  for (int i = 0; i < 5 && !st; i++) {
    if (!dev[i]) continue;
    if ((st = host_buffers(ctx, dev[i], &host[i], 1))) break;
    st = cf_device_download(d, host[i].data, dev[i]->data, tbytes(dev[i]));
  }
  hout.data = st ? NULL : malloc(tbytes(out) ? tbytes(out) : 1);
  if (!st && !hout.data) st = cf_error(ctx, CF_ERR_NO_MEMORY, NULL, 0, "out of memory");
  if (!st)
    st = cf_compute_product(ctx, g, n, &host[0], &host[1], x1s ? &host[2] : NULL, x2s ? &host[3] : NULL,
                            bias ? &host[4] : NULL, &hout, flags);
  if (!st) st = cf_device_upload(d, out->data, hout.data, tbytes(out));
  free(hout.data);
  for (int i = 0; i < 5; i++) free(host[i].data);
  return st;
}

static bool gemm_dtype(cf_dtype dt, int *type, int *compute) {
  switch (dt) {
  case CF_DT_FLOAT32: *type = CUDA_R_32F, *compute = CUBLAS_COMPUTE_32F; return true;
  case CF_DT_FLOAT64: *type = CUDA_R_64F, *compute = CUBLAS_COMPUTE_64F; return true;
  case CF_DT_FLOAT16: *type = CUDA_R_16F, *compute = CUBLAS_COMPUTE_32F; return true;
  case CF_DT_BFLOAT16: *type = CUDA_R_16BF, *compute = CUBLAS_COMPUTE_32F; return true;
  default: return false;
  }
}

/* Whether cuBLAS takes this product: float types, no quantization, not
 * --deterministic (cuBLAS picks kernels by shape, so a row's rounding
 * could depend on the rows around it; the host's row-invariant product
 * keeps fused and unfused results bitwise equal). */
static bool blas_takes(view *v, cf_context *ctx, const cf_tensor *x1, const cf_tensor *x2,
                       const cf_tensor *out, unsigned flags) {
  int type, compute;
  if ((flags & CF_COMPUTE_DETERMINISTIC) || !gemm_dtype(x1->dtype, &type, &compute)) return false;
  if (x2->dtype != x1->dtype || out->dtype != x1->dtype || x1->shape.rank != 2 || x2->shape.rank != 2)
    return false;
  cuda_root *r = v->root;
  pthread_mutex_lock(&r->lock);
  bool had = r->blas_tried, ok = load_blas(r);
  pthread_mutex_unlock(&r->lock);
  if (!ok && !had) cf_log(ctx, CF_LOG_WARN, "CUDA: MatMul runs on the host: %s", r->blas_why);
  if (!ok || v->no_blas) return false;
  if (v->blas) return true;
  /* this view's handle, on its stream */
  cublasStatus_t bs = CUBLAS_STATUS_SUCCESS;
  if (r->api.cuCtxSetCurrent(v->g->ctx) == CUDA_SUCCESS && !(bs = r->blas.cublasCreate_v2(&v->blas)) &&
      !(bs = r->blas.cublasSetStream_v2(v->blas, v->stream)))
    return true;
  if (v->blas) r->blas.cublasDestroy_v2(v->blas);
  v->blas = NULL;
  v->no_blas = true;
  cf_log(ctx, CF_LOG_WARN, "CUDA: MatMul of rank %d runs on the host: %s: cublasCreate/SetStream gave status %d",
         v->rank, r->blas.path, (int)bs);
  return false;
}

static cf_status blas_fail(cf_context *ctx, const char *what, cublasStatus_t s, const gpu *g) {
  return cf_error(ctx, CF_ERR_RUNTIME, NULL, 0, "cuBLAS: %s failed with status %d on GPU %d", what, (int)s,
                  g->ordinal);
}

/* ones_n >= m ones of dt in v->ones (the bias product's right factor). */
static cf_status ones(view *v, cf_context *ctx, cf_dtype dt, int64_t m) {
  if (v->ones && v->ones_dt == dt && v->ones_n >= m) return CF_OK;
  cu_api *a = &v->root->api;
  if (v->ones) a->cuMemFree_v2(v->ones);
  v->ones = 0;
  size_t es = (size_t)cf_dtype_size(dt);
  void *h = malloc((size_t)m * es);
  if (!h) return cf_error(ctx, CF_ERR_NO_MEMORY, NULL, 0, "out of memory");
  for (int64_t i = 0; i < m; i++) cf_store_f64(h, dt, i, 1.0);
  CUresult res = a->cuMemAlloc_v2(&v->ones, (size_t)m * es);
  if (!res) res = a->cuMemcpyHtoDAsync_v2(v->ones, h, (size_t)m * es, v->stream);
  if (!res) res = a->cuStreamSynchronize(v->stream);
  free(h);
  if (res) {
    if (v->ones) a->cuMemFree_v2(v->ones);
    v->ones = 0;
    return cf_cuda_fail(ctx, a, res, "a vector of ones");
  }
  v->ones_n = m;
  v->ones_dt = dt;
  return CF_OK;
}

/* out (m,n) = x1 (m,k) @ x2 (k,n) [+ bias (n) on every row], row-major,
 * as the column-major out^T = x2^T x1^T, and out^T += bias^T ones^T. */
static cf_status blas_product(view *v, cf_context *ctx, const cf_graph *g, const cf_node *n,
                              const cf_tensor *x1, const cf_tensor *x2, const cf_tensor *bias, cf_tensor *out) {
  int64_t m = x1->shape.dims[0], k = x1->shape.dims[1], nn = x2->shape.dims[1];
  if (m > INT_MAX || k > INT_MAX || nn > INT_MAX)
    return cf_node_error(g, n, CF_ERR_INVALID, "matmul (%lld,%lld) @ (%lld,%lld): dimensions above %d are not supported",
                         (long long)m, (long long)k, (long long)k, (long long)nn, INT_MAX);
  if (!m || !nn) return CF_OK;
  cuda_root *r = v->root;
  cu_api *a = &r->api;
  CUresult res = a->cuCtxSetCurrent(v->g->ctx);
  if (res) return cf_cuda_fail(ctx, a, res, "cuCtxSetCurrent");
  if (!k) { /* an empty sum */
    res = a->cuMemsetD8Async(dptr(out->data), 0, tbytes(out), v->stream);
    if (!res) res = a->cuStreamSynchronize(v->stream);
    return res ? cf_cuda_fail(ctx, a, res, "zeroing a product") : CF_OK;
  }
  cublasStatus_t s;
  int type = CUDA_R_32F, compute = CUBLAS_COMPUTE_32F;
  gemm_dtype(x1->dtype, &type, &compute);
  float f1 = 1, f0 = 0;
  double d1 = 1, d0 = 0;
  const void *one = compute == CUBLAS_COMPUTE_64F ? (const void *)&d1 : (const void *)&f1;
  const void *zero = compute == CUBLAS_COMPUTE_64F ? (const void *)&d0 : (const void *)&f0;
  s = r->blas.cublasGemmEx(v->blas, CUBLAS_OP_N, CUBLAS_OP_N, (int)nn, (int)m, (int)k, one, x2->data, type,
                           (int)nn, x1->data, type, (int)k, zero, out->data, type, (int)nn, compute,
                           CUBLAS_GEMM_DEFAULT);
  if (s) return blas_fail(ctx, "cublasGemmEx", s, v->g);
  if (bias) {
    if (bias->dtype != out->dtype) return cf_node_error(g, n, CF_ERR_INVALID, "bias dtype differs from the product's");
    cf_status st = ones(v, ctx, out->dtype, m);
    if (st) return st;
    s = r->blas.cublasGemmEx(v->blas, CUBLAS_OP_N, CUBLAS_OP_N, (int)nn, (int)m, 1, one, bias->data, type,
                             (int)nn, (const void *)(uintptr_t)v->ones, type, 1, one, out->data, type, (int)nn,
                             compute, CUBLAS_GEMM_DEFAULT);
    if (s) return blas_fail(ctx, "cublasGemmEx (bias)", s, v->g);
  }
  res = a->cuStreamSynchronize(v->stream);
  return res ? cf_cuda_fail(ctx, a, res, "a cuBLAS product") : CF_OK;
}

cf_status cf_cuda_compute(cf_device *d, cf_context *ctx, const cf_graph *g, const cf_node *n,
                            const cf_tensor *in, cf_tensor *out, int rank, uint64_t seed, unsigned flags) {
  view *v = d->impl;
  if (n->op == CF_OP_MATMUL && n->n_in == 2 && blas_takes(v, ctx, &in[0], &in[1], &out[0], flags))
    return blas_product(v, ctx, g, n, &in[0], &in[1], NULL, &out[0]);
  return host_compute(d, ctx, g, n, in, out, rank, seed, flags);
}

cf_status cf_cuda_product(cf_device *d, cf_context *ctx, const cf_graph *g, const cf_node *n,
                            const cf_tensor *x1, const cf_tensor *x2, const cf_tensor *x1_scale,
                            const cf_tensor *x2_scale, const cf_tensor *bias, cf_tensor *out, unsigned flags) {
  view *v = d->impl;
  if (!x1_scale && blas_takes(v, ctx, x1, x2, out, flags)) return blas_product(v, ctx, g, n, x1, x2, bias, out);
  return host_product(d, ctx, g, n, x1, x2, x1_scale, x2_scale, bias, out, flags);
}
