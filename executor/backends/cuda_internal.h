/* backends/cuda_internal.h - what the CUDA backend's files share:
 * cuda.c (driver, GPUs, kernels, views, the slots), cuda_blas.c (MatMul
 * on cuBLAS, every other compute op through the host) and cuda_error.c (the
 * messages of driver results). Only they include it.
 */
#ifndef COLLFUSE_CUDA_INTERNAL_H
#define COLLFUSE_CUDA_INTERNAL_H

#include "../host.h"
#include "backends.h"
#include "cuda_api.h"

#include <pthread.h>

typedef struct cu_api {
  void *lib;
#define X(name, ret, args) ret(*name) args;
  CF_CUDA_DRIVER_FUNCS(X)
#undef X
} cu_api;

typedef struct blas_api {
  void *lib;
  char path[512];
#define X(name, ret, args) ret(*name) args;
  CF_CUBLAS_FUNCS(X)
#undef X
} blas_api;

typedef struct gpu {
  int ordinal;
  CUdevice dev;
  CUcontext ctx;       /* primary context, retained while active */
  bool active;
  int sms, threads_per_sm, cc_major, cc_minor;
  const char *sm;      /* "sm_80", "sm_90" */
  char name[128];
  CUfunction fns[4][CF_DT_COUNT][CF_RED_COUNT][CF_MAX_ARITY + 1];
  CUmodule *mods;
  int n_mods, cap_mods;
} gpu;

typedef struct cuda_root cuda_root;

typedef struct view {
  cf_device dev;       /* the handle; dev.impl points here */
  cuda_root *root;
  gpu *g;
  int rank, lane;
  CUstream stream;
  CUdeviceptr ptrs;    /* CF_MAX_ARITY source pointers for n-ary launches */
  CUdeviceptr last[CF_MAX_ARITY]; /* what ptrs holds */
  int last_k;
  bool async;          /* time(): do not wait after each launch */
  pthread_mutex_t lock;
  cublasHandle_t blas;
  bool no_blas;        /* cublasCreate failed here: MatMul on the host */
  CUdeviceptr ones;    /* ones_n ones of ones_dt: bias rows for cuBLAS */
  int64_t ones_n;
  cf_dtype ones_dt;
  CUresult err;        /* first failure of a void slot */
  char errmsg[512];
} view;

struct cuda_root {
  cu_api api;
  blas_api blas;
  bool blas_tried, blas_ok;
  char blas_why[512];
  gpu *gpus;
  int n_gpus;
  int fixed;           /* device_index >= 0: every rank on gpus[0] */
  cf_kernel_key *keys; /* prepared, for GPUs activated later */
  int n_keys, cap_keys;
  view **views;        /* views[0] is the root */
  int n_views, cap_views;
  pthread_mutex_t lock;
};

/* cuda_error.c */
/* "CUDA_ERROR_X: text" of a driver result. */
const char *cf_cuda_text(const cu_api *a, CUresult r, char *buf, size_t len);
/* An error "CUDA: WHAT: CUDA_ERROR_X: text" in ctx (CF_ERR_RUNTIME). */
cf_status cf_cuda_fail(cf_context *ctx, const cu_api *a, CUresult r, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* cuda_blas.c: the compute and product slots; cuBLAS is loaded on first
 * use (r->lock held by the caller of load). */
cf_status cf_cuda_compute(cf_device *d, cf_context *ctx, const cf_graph *g, const cf_node *n,
                          const cf_tensor *in, cf_tensor *out, int rank, uint64_t seed, unsigned flags);
cf_status cf_cuda_product(cf_device *d, cf_context *ctx, const cf_graph *g, const cf_node *n,
                          const cf_tensor *x1, const cf_tensor *x2, const cf_tensor *x1_scale,
                          const cf_tensor *x2_scale, const cf_tensor *bias, cf_tensor *out, unsigned flags);

#endif /* COLLFUSE_CUDA_INTERNAL_H */
