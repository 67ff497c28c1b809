/* backends/cuda_api.h - the few CUDA driver API and cuBLAS declarations the
 * CUDA backend uses, written out here instead of included from a toolkit.
 *
 * Why: collfuse builds and runs where no CUDA toolkit is installed (CI has
 * none), and loads libcuda.so.1 and libcublas.so.* with dlopen at run
 * time, so it needs the types and signatures only, never the headers or a
 * link. The driver API and cuBLAS's C ABI are stable by NVIDIA's binary
 * compatibility promise: these are the documented signatures (cuda.h,
 * cublas_api.h of CUDA 12/13) of the versioned entry points we resolve by
 * name (cuMemAlloc_v2 and so on, the names cuda.h's macros map to). Only
 * the backend (cuda_internal.h) and its test stand-in (tests/mock_cuda.c)
 * include this file.
 */
#ifndef COLLFUSE_CUDA_API_H
#define COLLFUSE_CUDA_API_H

#include <stddef.h>
#include <stdint.h>

/* ---- driver API (cuda.h) ---- */
typedef int CUresult; /* CUDA_SUCCESS = 0 */
typedef int CUdevice;
typedef unsigned long long CUdeviceptr; /* 64-bit on every platform we run on */
typedef struct CUctx_st *CUcontext;
typedef struct CUmod_st *CUmodule;
typedef struct CUfunc_st *CUfunction;
typedef struct CUstream_st *CUstream;
typedef struct CUevent_st *CUevent;

enum {
  CUDA_SUCCESS = 0,
  CUDA_ERROR_NOT_INITIALIZED = 3,
  CUDA_ERROR_NO_DEVICE = 100,
  CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED = 704,
  /* cuDeviceGetAttribute */
  CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT = 16,
  CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR = 75,
  CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR = 76,
  CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR = 39,
  CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING = 41,
  /* flags */
  CU_STREAM_NON_BLOCKING = 0x1,
  CU_EVENT_DEFAULT = 0x0,
  /* cuModuleLoadDataEx options (CUjit_option) */
  CU_JIT_INFO_LOG_BUFFER = 3,
  CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES = 4,
  CU_JIT_ERROR_LOG_BUFFER = 5,
  CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES = 6
};

/* Every entry point, resolved by name into this table (X-macro: name,
 * return type, parameters). */
#define CF_CUDA_DRIVER_FUNCS(X)                                                                    \
  X(cuInit, CUresult, (unsigned flags))                                                            \
  X(cuDriverGetVersion, CUresult, (int *version))                                                  \
  X(cuGetErrorString, CUresult, (CUresult err, const char **str))                                  \
  X(cuGetErrorName, CUresult, (CUresult err, const char **str))                                    \
  X(cuDeviceGetCount, CUresult, (int *count))                                                      \
  X(cuDeviceGet, CUresult, (CUdevice *dev, int ordinal))                                           \
  X(cuDeviceGetName, CUresult, (char *name, int len, CUdevice dev))                                \
  X(cuDeviceGetAttribute, CUresult, (int *value, int attrib, CUdevice dev))                        \
  X(cuDeviceCanAccessPeer, CUresult, (int *can, CUdevice dev, CUdevice peer))                      \
  X(cuDevicePrimaryCtxRetain, CUresult, (CUcontext *ctx, CUdevice dev))                            \
  X(cuDevicePrimaryCtxRelease_v2, CUresult, (CUdevice dev))                                        \
  X(cuCtxSetCurrent, CUresult, (CUcontext ctx))                                                    \
  X(cuCtxEnablePeerAccess, CUresult, (CUcontext peer, unsigned flags))                             \
  X(cuMemAlloc_v2, CUresult, (CUdeviceptr *p, size_t bytes))                                       \
  X(cuMemFree_v2, CUresult, (CUdeviceptr p))                                                       \
  X(cuMemGetInfo_v2, CUresult, (size_t *free_bytes, size_t *total))                               \
  X(cuMemcpyHtoD_v2, CUresult, (CUdeviceptr dst, const void *src, size_t bytes))                   \
  X(cuMemcpyDtoH_v2, CUresult, (void *dst, CUdeviceptr src, size_t bytes))                         \
  X(cuMemcpyDtoD_v2, CUresult, (CUdeviceptr dst, CUdeviceptr src, size_t bytes))                   \
  X(cuMemcpyHtoDAsync_v2, CUresult, (CUdeviceptr dst, const void *src, size_t bytes, CUstream s))  \
  X(cuMemcpyDtoHAsync_v2, CUresult, (void *dst, CUdeviceptr src, size_t bytes, CUstream s))        \
  X(cuMemcpyDtoDAsync_v2, CUresult, (CUdeviceptr dst, CUdeviceptr src, size_t bytes, CUstream s))  \
  X(cuMemsetD8_v2, CUresult, (CUdeviceptr dst, unsigned char v, size_t n))                         \
  X(cuMemsetD8Async, CUresult, (CUdeviceptr dst, unsigned char v, size_t n, CUstream s))           \
  X(cuModuleLoadDataEx, CUresult,                                                                  \
    (CUmodule * mod, const void *image, unsigned n_opts, int *opts, void **values))                \
  X(cuModuleGetFunction, CUresult, (CUfunction * fn, CUmodule mod, const char *name))              \
  X(cuModuleUnload, CUresult, (CUmodule mod))                                                      \
  X(cuLaunchKernel, CUresult,                                                                      \
    (CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,   \
     unsigned shared_bytes, CUstream s, void **params, void **extra))                              \
  X(cuStreamCreate, CUresult, (CUstream * s, unsigned flags))                                      \
  X(cuStreamDestroy_v2, CUresult, (CUstream s))                                                    \
  X(cuStreamSynchronize, CUresult, (CUstream s))                                                   \
  X(cuEventCreate, CUresult, (CUevent * e, unsigned flags))                                        \
  X(cuEventDestroy_v2, CUresult, (CUevent e))                                                      \
  X(cuEventRecord, CUresult, (CUevent e, CUstream s))                                              \
  X(cuEventSynchronize, CUresult, (CUevent e))                                                     \
  X(cuEventElapsedTime, CUresult, (float *ms, CUevent start, CUevent end))

/* ---- cuBLAS (cublas_api.h), column-major ---- */
typedef struct cublasContext *cublasHandle_t;
typedef int cublasStatus_t; /* CUBLAS_STATUS_SUCCESS = 0 */
enum {
  CUBLAS_STATUS_SUCCESS = 0,
  CUBLAS_OP_N = 0,
  /* cudaDataType (library_types.h) */
  CUDA_R_16F = 2,
  CUDA_R_32F = 0,
  CUDA_R_64F = 1,
  CUDA_R_16BF = 14,
  /* cublasComputeType_t */
  CUBLAS_COMPUTE_32F = 68,
  CUBLAS_COMPUTE_64F = 70,
  /* cublasGemmAlgo_t */
  CUBLAS_GEMM_DEFAULT = -1
};

#define CF_CUBLAS_FUNCS(X)                                                                         \
  X(cublasCreate_v2, cublasStatus_t, (cublasHandle_t * h))                                         \
  X(cublasDestroy_v2, cublasStatus_t, (cublasHandle_t h))                                          \
  X(cublasSetStream_v2, cublasStatus_t, (cublasHandle_t h, CUstream s))                            \
  X(cublasGemmEx, cublasStatus_t,                                                                  \
    (cublasHandle_t h, int transa, int transb, int m, int n, int k, const void *alpha,             \
     const void *A, int a_type, int lda, const void *B, int b_type, int ldb, const void *beta,     \
     void *C, int c_type, int ldc, int compute_type, int algo))

#endif /* COLLFUSE_CUDA_API_H */
