/* mock_cuda.c - a stand-in for libcuda.so.1, so the CUDA backend's code
 * runs in CI, where there is no GPU (ctest test_cuda_mock: test_cuda with
 * COLLFUSE_CUDA_DRIVER pointing here).
 *
 * It implements the driver entry points cuda_api.h lists on host memory:
 * device pointers are host pointers, copies are memcpy, streams and events
 * are synchronous (an event records the host clock). Modules are the PTX
 * text the backend generated; cuModuleGetFunction checks that the text
 * declares the entry and targets the architecture the mock's compute
 * capability calls for, and cuLaunchKernel runs the kernel's documented
 * semantics element by element (tests/codegen_ref.h, test_codegen's
 * reference). So what it checks is the backend's plumbing and the
 * executor's device path (uploads, views, pointer arrays, launch
 * parameters, host fallbacks, errors), not the PTX itself: that is what
 * test_cuda does on a real GPU.
 *
 * It also stands in for cuBLAS (CUBLAS_LIBRARY=this file): cublasGemmEx
 * as a plain column-major triple loop, so the backend's row-major to
 * column-major mapping and its bias product are checked too.
 *
 * Knobs (environment): CF_MOCK_GPUS (visible GPUs, default 1), CF_MOCK_CC
 * (compute capability x 10, default 90), CF_MOCK_FAIL_LAUNCH=N (launch N,
 * counting from 1, fails with CUDA_ERROR_LAUNCH_FAILED).
 */
#include "codegen_ref.h"
#include "executor/backends/cuda_api.h"
#include "ir/ir.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#define EXPORT __attribute__((visibility("default")))

enum { CUDA_ERROR_INVALID_VALUE = 1, CUDA_ERROR_OUT_OF_MEMORY = 2, CUDA_ERROR_INVALID_IMAGE = 200,
       CUDA_ERROR_NOT_FOUND = 500, CUDA_ERROR_LAUNCH_FAILED = 719 };

static int env_int(const char *name, int dflt) {
  const char *v = getenv(name);
  return v && *v ? atoi(v) : dflt;
}

static atomic_int launches;

typedef struct mock_fn {
  cf_kernel_key key;
  struct mock_fn *next; /* the module's functions */
} mock_fn;

typedef struct mock_module {
  char *ptx;
  mock_fn *fns;
} mock_module;

typedef struct mock_event {
  double ms;
} mock_event;

static char ctx_tag[16]; /* a context is a pointer into this */

EXPORT CUresult cuInit(unsigned flags) { return flags ? CUDA_ERROR_INVALID_VALUE : CUDA_SUCCESS; }
EXPORT CUresult cuDriverGetVersion(int *v) {
  *v = 13000;
  return CUDA_SUCCESS;
}
EXPORT CUresult cuGetErrorString(CUresult e, const char **s) {
  *s = e == CUDA_ERROR_LAUNCH_FAILED ? "unspecified launch failure (mock)" : "mock driver error";
  return CUDA_SUCCESS;
}
EXPORT CUresult cuGetErrorName(CUresult e, const char **s) {
  *s = e == CUDA_ERROR_LAUNCH_FAILED ? "CUDA_ERROR_LAUNCH_FAILED" : "CUDA_ERROR_MOCK";
  return CUDA_SUCCESS;
}
EXPORT CUresult cuDeviceGetCount(int *n) {
  *n = env_int("CF_MOCK_GPUS", 1);
  return CUDA_SUCCESS;
}
EXPORT CUresult cuDeviceGet(CUdevice *d, int ordinal) {
  if (ordinal < 0 || ordinal >= env_int("CF_MOCK_GPUS", 1)) return CUDA_ERROR_INVALID_VALUE;
  *d = ordinal;
  return CUDA_SUCCESS;
}
EXPORT CUresult cuDeviceGetName(char *name, int len, CUdevice d) {
  snprintf(name, (size_t)len, "collfuse mock GPU %d", d);
  return CUDA_SUCCESS;
}
EXPORT CUresult cuDeviceGetAttribute(int *v, int attr, CUdevice d) {
  (void)d;
  int cc = env_int("CF_MOCK_CC", 90);
  switch (attr) {
  case CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT: *v = 4; break;
  case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR: *v = 2048; break;
  case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR: *v = cc / 10; break;
  case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR: *v = cc % 10; break;
  default: *v = 1; break;
  }
  return CUDA_SUCCESS;
}
EXPORT CUresult cuDeviceCanAccessPeer(int *can, CUdevice a, CUdevice b) {
  *can = a != b;
  return CUDA_SUCCESS;
}
EXPORT CUresult cuDevicePrimaryCtxRetain(CUcontext *c, CUdevice d) {
  *c = (CUcontext)(void *)&ctx_tag[d & 15];
  return CUDA_SUCCESS;
}
EXPORT CUresult cuDevicePrimaryCtxRelease_v2(CUdevice d) { return d >= 0 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE; }
EXPORT CUresult cuCtxSetCurrent(CUcontext c) { return c ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE; }
EXPORT CUresult cuCtxEnablePeerAccess(CUcontext c, unsigned flags) {
  return c && !flags ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}
EXPORT CUresult cuMemAlloc_v2(CUdeviceptr *p, size_t bytes) {
  void *m = bytes ? aligned_alloc(256, (bytes + 255) & ~(size_t)255) : NULL;
  if (!m) return CUDA_ERROR_OUT_OF_MEMORY;
  *p = (CUdeviceptr)(uintptr_t)m;
  return CUDA_SUCCESS;
}
EXPORT CUresult cuMemFree_v2(CUdeviceptr p) {
  free((void *)(uintptr_t)p);
  return CUDA_SUCCESS;
}
EXPORT CUresult cuMemGetInfo_v2(size_t *f, size_t *t) {
  *f = *t = (size_t)80 << 30;
  return CUDA_SUCCESS;
}
static CUresult copy(void *d, const void *s, size_t n) {
  if (n && (!d || !s)) return CUDA_ERROR_INVALID_VALUE;
  if (n) memmove(d, s, n);
  return CUDA_SUCCESS;
}
EXPORT CUresult cuMemcpyHtoD_v2(CUdeviceptr d, const void *s, size_t n) { return copy((void *)(uintptr_t)d, s, n); }
EXPORT CUresult cuMemcpyDtoH_v2(void *d, CUdeviceptr s, size_t n) { return copy(d, (void *)(uintptr_t)s, n); }
EXPORT CUresult cuMemcpyDtoD_v2(CUdeviceptr d, CUdeviceptr s, size_t n) {
  return copy((void *)(uintptr_t)d, (void *)(uintptr_t)s, n);
}
EXPORT CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr d, const void *s, size_t n, CUstream st) {
  (void)st;
  return copy((void *)(uintptr_t)d, s, n);
}
EXPORT CUresult cuMemcpyDtoHAsync_v2(void *d, CUdeviceptr s, size_t n, CUstream st) {
  (void)st;
  return copy(d, (void *)(uintptr_t)s, n);
}
EXPORT CUresult cuMemcpyDtoDAsync_v2(CUdeviceptr d, CUdeviceptr s, size_t n, CUstream st) {
  (void)st;
  return copy((void *)(uintptr_t)d, (void *)(uintptr_t)s, n);
}
EXPORT CUresult cuMemsetD8_v2(CUdeviceptr d, unsigned char v, size_t n) {
  if (n) memset((void *)(uintptr_t)d, v, n);
  return CUDA_SUCCESS;
}
EXPORT CUresult cuMemsetD8Async(CUdeviceptr d, unsigned char v, size_t n, CUstream st) {
  (void)st;
  return cuMemsetD8_v2(d, v, n);
}

/* ---- modules and kernels ---- */

EXPORT CUresult cuModuleLoadDataEx(CUmodule *m, const void *image, unsigned n, int *opts, void **vals) {
  (void)n, (void)opts, (void)vals;
  const char *ptx = image;
  if (!ptx || !strstr(ptx, ".version ") || !strstr(ptx, ".target ")) return CUDA_ERROR_INVALID_IMAGE;
  mock_module *mod = calloc(1, sizeof *mod);
  if (!mod || !(mod->ptx = strdup(ptx))) {
    free(mod);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  *m = (CUmodule)(void *)mod;
  return CUDA_SUCCESS;
}

EXPORT CUresult cuModuleUnload(CUmodule m) {
  mock_module *mod = (mock_module *)(void *)m;
  for (mock_fn *f = mod->fns, *next; f; f = next) next = f->next, free(f);
  free(mod->ptx);
  free(mod);
  return CUDA_SUCCESS;
}

/* The key whose documented name (docs/kernels.md) is name. */
static bool parse_name(const char *name, cf_kernel_key *k) {
  static const char *const red_names[CF_RED_COUNT] = {"sum", "mean", "max", "min", "prod"}; /* cf_reduction */
  char buf[96];
  for (int d = CF_DT_INVALID + 1; d < CF_DT_COUNT; d++) {
    const char *dt = cf_dtype_name((cf_dtype)d);
    snprintf(buf, sizeof buf, "cf_scale_%s", dt);
    if (!strcmp(buf, name)) return *k = (cf_kernel_key){.kind = CF_K_SCALE, .dtype = (cf_dtype)d}, true;
    for (int r = 0; r < CF_RED_COUNT; r++) {
      const char *red = red_names[r];
      snprintf(buf, sizeof buf, "cf_acc_%s_%s", red, dt);
      if (!strcmp(buf, name))
        return *k = (cf_kernel_key){.kind = CF_K_ACC, .dtype = (cf_dtype)d, .red = (cf_reduction)r}, true;
      for (int a = 2; a <= CF_MAX_ARITY; a++) {
        snprintf(buf, sizeof buf, "cf_nary_%s_%s_%d", red, dt, a);
        if (!strcmp(buf, name))
          return *k = (cf_kernel_key){.kind = CF_K_NARY, .dtype = (cf_dtype)d, .red = (cf_reduction)r, .arity = a},
                 true;
      }
    }
  }
  return false;
}

EXPORT CUresult cuModuleGetFunction(CUfunction *f, CUmodule m, const char *name) {
  mock_module *mod = (mock_module *)(void *)m;
  char entry[128], target[32];
  int cc = env_int("CF_MOCK_CC", 90);
  snprintf(entry, sizeof entry, ".entry %s(", name);
  snprintf(target, sizeof target, ".target sm_%d\n", cc >= 90 ? 90 : 80);
  mock_fn *fn = calloc(1, sizeof *fn);
  if (!fn) return CUDA_ERROR_OUT_OF_MEMORY;
  if (!strstr(mod->ptx, entry) || !strstr(mod->ptx, target) || !parse_name(name, &fn->key)) {
    free(fn); /* the real driver would say CUDA_ERROR_NOT_FOUND too */
    return CUDA_ERROR_NOT_FOUND;
  }
  fn->next = mod->fns;
  mod->fns = fn;
  *f = (CUfunction)(void *)fn;
  return CUDA_SUCCESS;
}

EXPORT CUresult cuLaunchKernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                               unsigned bz, unsigned shared, CUstream s, void **params, void **extra) {
  (void)s;
  int n_launch = atomic_fetch_add(&launches, 1) + 1;
  if (n_launch == env_int("CF_MOCK_FAIL_LAUNCH", 0)) return CUDA_ERROR_LAUNCH_FAILED;
  if (!f || !params || extra || gx == 0 || gy != 1 || gz != 1 || bx == 0 || bx > 1024 || by != 1 || bz != 1 ||
      shared)
    return CUDA_ERROR_INVALID_VALUE;
  const cf_kernel_key *k = &((mock_fn *)(void *)f)->key;
  cf_dtype dt = k->dtype;
  uint64_t x[CF_MAX_ARITY];
  void *dst = (void *)(uintptr_t) * (CUdeviceptr *)params[0];
  switch (k->kind) {
  case CF_K_NARY: {
    const void *const *src = (const void *const *)(uintptr_t) * (CUdeviceptr *)params[1];
    int64_t n = *(int64_t *)params[2];
    double div = *(double *)params[3];
    for (int64_t i = 0; i < n; i++) {
      for (int j = 0; j < k->arity; j++) x[j] = ld(src[j], i, dt);
      st(dst, i, dt, ref_nary(dt, k->red, k->arity, x, div));
    }
    break;
  }
  case CF_K_ACC: {
    const void *src = (const void *)(uintptr_t) * (CUdeviceptr *)params[1];
    int64_t n = *(int64_t *)params[2];
    cf_reduction r = k->red == CF_RED_MEAN ? CF_RED_SUM : k->red;
    for (int64_t i = 0; i < n; i++) {
      x[0] = ld(dst, i, dt), x[1] = ld(src, i, dt);
      st(dst, i, dt, ref_nary(dt, r, 2, x, 1));
    }
    break;
  }
  case CF_K_SCALE: {
    int64_t n = *(int64_t *)params[1];
    double div = *(double *)params[2];
    for (int64_t i = 0; i < n; i++) st(dst, i, dt, ref_scale(dt, ld(dst, i, dt), div));
    break;
  }
  default: return CUDA_ERROR_INVALID_VALUE;
  }
  return CUDA_SUCCESS;
}

/* ---- streams and events: everything already happened ---- */

EXPORT CUresult cuStreamCreate(CUstream *s, unsigned flags) {
  (void)flags;
  *s = (CUstream)(void *)calloc(1, 1);
  return *s ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
}
EXPORT CUresult cuStreamDestroy_v2(CUstream s) {
  free((void *)s);
  return CUDA_SUCCESS;
}
EXPORT CUresult cuStreamSynchronize(CUstream s) { return s ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE; }
EXPORT CUresult cuEventCreate(CUevent *e, unsigned flags) {
  (void)flags;
  *e = (CUevent)(void *)calloc(1, sizeof(mock_event));
  return *e ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
}
EXPORT CUresult cuEventDestroy_v2(CUevent e) {
  free((void *)e);
  return CUDA_SUCCESS;
}
EXPORT CUresult cuEventRecord(CUevent e, CUstream s) {
  (void)s;
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  ((mock_event *)(void *)e)->ms = (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
  return CUDA_SUCCESS;
}
EXPORT CUresult cuEventSynchronize(CUevent e) { return e ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE; }
EXPORT CUresult cuEventElapsedTime(float *ms, CUevent a, CUevent b) {
  *ms = (float)(((mock_event *)(void *)b)->ms - ((mock_event *)(void *)a)->ms);
  if (*ms <= 0) *ms = 1e-6f;
  return CUDA_SUCCESS;
}

/* ---- cuBLAS (CUBLAS_LIBRARY=this file): column-major GEMM on the host ---- */

struct cublasContext {
  CUstream stream;
};

EXPORT cublasStatus_t cublasCreate_v2(cublasHandle_t *h) {
  *h = calloc(1, sizeof **h);
  return *h ? CUBLAS_STATUS_SUCCESS : 3; /* CUBLAS_STATUS_ALLOC_FAILED */
}
EXPORT cublasStatus_t cublasDestroy_v2(cublasHandle_t h) {
  free(h);
  return CUBLAS_STATUS_SUCCESS;
}
EXPORT cublasStatus_t cublasSetStream_v2(cublasHandle_t h, CUstream s) {
  h->stream = s;
  return CUBLAS_STATUS_SUCCESS;
}

static double gemm_ld(const void *p, int type, int64_t i) {
  switch (type) {
  case CUDA_R_32F: return ((const float *)p)[i];
  case CUDA_R_64F: return ((const double *)p)[i];
  case CUDA_R_16F: return h2f(((const uint16_t *)p)[i]);
  default: return b2f(((const uint16_t *)p)[i]);
  }
}

static void gemm_st(void *p, int type, int64_t i, double v) {
  switch (type) {
  case CUDA_R_32F: ((float *)p)[i] = (float)v; break;
  case CUDA_R_64F: ((double *)p)[i] = v; break;
  case CUDA_R_16F: ((uint16_t *)p)[i] = f2h((float)v); break;
  default: ((uint16_t *)p)[i] = f2b((float)v); break;
  }
}

EXPORT cublasStatus_t cublasGemmEx(cublasHandle_t h, int transa, int transb, int m, int n, int k, const void *alpha,
                                   const void *A, int a_type, int lda, const void *B, int b_type, int ldb,
                                   const void *beta, void *C, int c_type, int ldc, int compute, int algo) {
  (void)algo;
  bool types = (a_type == CUDA_R_32F || a_type == CUDA_R_64F || a_type == CUDA_R_16F || a_type == CUDA_R_16BF) &&
               b_type == a_type && c_type == a_type;
  bool comp = compute == (a_type == CUDA_R_64F ? CUBLAS_COMPUTE_64F : CUBLAS_COMPUTE_32F);
  if (!h || transa != CUBLAS_OP_N || transb != CUBLAS_OP_N || !types || !comp || m < 0 || n < 0 || k < 0 ||
      lda < (m > 1 ? m : 1) || ldb < (k > 1 ? k : 1) || ldc < (m > 1 ? m : 1))
    return 7; /* CUBLAS_STATUS_INVALID_VALUE */
  double al = compute == CUBLAS_COMPUTE_64F ? *(const double *)alpha : *(const float *)alpha;
  double be = compute == CUBLAS_COMPUTE_64F ? *(const double *)beta : *(const float *)beta;
  for (int j = 0; j < n; j++)
    for (int i = 0; i < m; i++) {
      double acc = 0;
      for (int p = 0; p < k; p++)
        acc += gemm_ld(A, a_type, (int64_t)p * lda + i) * gemm_ld(B, b_type, (int64_t)j * ldb + p);
      double c = be != 0 ? be * gemm_ld(C, c_type, (int64_t)j * ldc + i) : 0;
      gemm_st(C, c_type, (int64_t)j * ldc + i, al * acc + c);
    }
  return CUBLAS_STATUS_SUCCESS;
}
