/* backends/backends.h - the device backends collfuse has and the wrappers
 * callers use instead of a device's optional slots (runtime.h holds the
 * contract a backend implements).
 */
#ifndef COLLFUSE_EXECUTOR_BACKENDS_H
#define COLLFUSE_EXECUTOR_BACKENDS_H

#include "../runtime.h"

typedef enum cf_device_kind {
  CF_DEVICE_CPU, /* backends/cpu.c */
  CF_DEVICE_CUDA /* backends/cuda.c */
} cf_device_kind;

/* backends/cpu.c */
cf_status cf_device_cpu_create(cf_context *ctx, cf_device **out);

/* backends/cuda.c: an NVIDIA GPU through the CUDA driver API, which is
 * loaded with dlopen("libcuda.so.1") here (nothing links CUDA): without a
 * driver or a GPU, CF_ERR_UNSUPPORTED with a message that says so
 * ("no CUDA driver (libcuda.so.1 not found); ..."). device_index >= 0 uses
 * that GPU for every rank; -1 spreads ranks over every visible GPU (rank r
 * on GPU r mod count, peer access between them), ranks sharing a GPU each
 * with their own streams. Reductions are the codegen's PTX kernels (sm_80
 * or sm_90 by the GPU), MatMul is cuBLAS (dlopen'd: CUBLAS_LIBRARY, else
 * libcublas.so.* on the library path), other compute ops run on the host
 * through copies. */
cf_status cf_device_cuda_create(cf_context *ctx, int device_index, cf_device **out);
/* The GPU behind d (a CUDA device or one of its views) for reports: its
 * name, compute capability and the PTX target; false for other devices. */
bool cf_device_cuda_info(const cf_device *d, char *name, size_t len, int *cc_major, int *cc_minor,
                         const char **sm);

/* backends/device.c: the optional slots, wrapped */
/* True when d's buffers are host memory (no upload slot). */
bool cf_device_is_host(const cf_device *d);
/* d's view for rank and lane, or d itself when it has none. */
cf_status cf_device_view(cf_device *d, cf_context *ctx, int rank, int lane, cf_device **out);
/* Streaming (non-temporal) stores skip the cache: at DRAM sizes they spare
 * the read of every destination line an ordinary store makes first, but a
 * result that would have stayed in cache goes to memory. The executor
 * writes outputs of CF_STREAM_MIN_OUTPUT bytes or more with them (AllGather
 * and AllToAll always; on a graph of eight 4 MiB collectives 1.1-2.6x
 * faster), and an AllReduce only when its working set (the bytes all ranks
 * touch between two runs of it) is at least cf_stream_min_bytes()
 * (cf_streams): the last-level cache's size + 1 (a working set larger
 * than the cache), or $COLLFUSE_STREAM_MIN (bytes, with an optional K, M
 * or G; "off": never, and -1 here). An AllReduce run back to back on its
 * own buffers (bench allreduce) keeps a working set that fits in cache:
 * on the 2-core VM (one 32 MiB L3), two ranks, ordinary stores won at 16
 * MiB, neither at 32 MiB, streaming ones at 48 and 64 MiB
 * (docs/executor.md, "Streaming stores"). */
#define CF_STREAM_MIN_OUTPUT ((int64_t)4 << 20)
int64_t cf_stream_min_bytes(void);
/* The size of the highest-level cache under a sysfs cache directory
 * (/sys/devices/system/cpu/cpuN/cache: index0.., each with level and
 * size), or -1 where there is none. */
int64_t cf_llc_bytes_at(const char *cache_dir);
bool cf_streams(int64_t working_set);
/* copy_stream, else copy. */
void cf_device_copy_stream(cf_device *d, void *dst, const void *src, size_t bytes);
/* memcpy on the host. */
cf_status cf_device_upload(cf_device *d, void *dst, const void *src, size_t bytes);
cf_status cf_device_download(cf_device *d, void *dst, const void *src, size_t bytes);
/* cf_compute_run / cf_compute_product on the host. */
cf_status cf_device_compute(cf_device *d, cf_context *ctx, const cf_graph *g, const cf_node *n,
                            const cf_tensor *in, cf_tensor *out, int rank, uint64_t seed,
                            unsigned flags);
cf_status cf_device_product(cf_device *d, cf_context *ctx, const cf_graph *g, const cf_node *n,
                            const cf_tensor *x1, const cf_tensor *x2, const cf_tensor *x1_scale,
                            const cf_tensor *x2_scale, const cf_tensor *bias, cf_tensor *out,
                            unsigned flags);
/* CF_OK on the host. */
cf_status cf_device_error(cf_device *d, cf_context *ctx);
/* Wall-clock time on the host. */
cf_status cf_device_time(cf_device *d, void (*fn)(void *arg), void *arg, int reps, double *ms);

#endif /* COLLFUSE_EXECUTOR_BACKENDS_H */
