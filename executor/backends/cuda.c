/* backends/cuda.c - the CUDA device backend: buffers in GPU memory,
 * reductions by the PTX kernels codegen/ emits, MatMul by cuBLAS.
 *
 * Nothing links CUDA: the driver (libcuda.so.1) is opened with dlopen when
 * a device is created and cuBLAS (libcublas.so.*) at the first MatMul,
 * through the declarations in cuda_api.h, so one binary runs everywhere
 * and says "no CUDA driver" where there is none.
 *
 * Handles. Every cf_device of this backend is a view: one stream on one
 * GPU (its primary context). The device cf_device_cuda_create returns is
 * the root view (the first GPU's stream), which owns the rest: the
 * executor asks it for a view per rank and lane (compute on the rank
 * thread, collectives on its communication thread), so ranks sharing a GPU
 * each have their own streams and a fused MatMul's GEMM (compute lane)
 * overlaps the previous chunk's reduction (collective lane). With several
 * GPUs rank r works on GPU r mod count, with peer access between them;
 * with one, every rank's buffers live in one context and a kernel reads a
 * peer's buffer through its device pointer directly (the threads transport
 * hands those pointers over, single copy as on the CPU).
 *
 * Ordering. The executor's algorithms are written for the CPU device,
 * where a kernel has finished when the call returns, and the transport
 * tells peers a buffer is ready on that basis. So every launch and copy
 * here is followed by a wait on its stream: when a slot returns, the work
 * is done and visible to every stream of every rank. Only time() queues
 * launches without waiting, to measure the kernels alone.
 *
 * Kernels. prepare(key) builds the key's PTX in memory (cf_codegen_ptx,
 * for sm_90 on compute capability 9.x and newer, sm_80 on 8.x), loads it
 * with cuModuleLoadDataEx on every GPU in use (and on GPUs that come into
 * use later) and keeps the CUfunction in a table per GPU; launches only
 * read that table. The n-ary kernels take their source pointers as an
 * array in device memory: each view has a small slot for it, refreshed in
 * stream order only when the pointers change. Launch shape: 256 threads a
 * block, at most as many blocks as fill the GPU once (the kernels walk a
 * grid-stride loop).
 *
 * Errors. Slots that return a status report through it; the void slots
 * (copy, nary, acc, scale, sync) keep their first failure in the view,
 * skip further work on it, and error() reports it.
 *
 * Compute ops (MatMul on cuBLAS, the rest through the host) are in
 * cuda_blas.c; the structures both files use, in cuda_internal.h; the
 * messages of driver results both give, in cuda_error.c.
 */
#define _GNU_SOURCE
#include "cuda_internal.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define BLOCK 256
#define DRIVER_LIB "libcuda.so.1"

static const cf_device_ops cuda_ops;

/* ---------------- driver calls and messages ---------------- */

/* A void slot's failure: kept (the first one) for error(). */
static void remember(view *v, CUresult r, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void remember(view *v, CUresult r, const char *fmt, ...) {
  if (v->err) return;
  char what[256], err[256];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(what, sizeof what, fmt, ap);
  va_end(ap);
  v->err = r ? r : -1;
  snprintf(v->errmsg, sizeof v->errmsg, "CUDA on GPU %d (rank %d): %s: %s", v->g->ordinal, v->rank, what,
           r ? cf_cuda_text(&v->root->api, r, err, sizeof err) : "failed");
}

static CUdeviceptr dptr(const void *p) { return (CUdeviceptr)(uintptr_t)p; }

static bool current(view *v) {
  CUresult r = v->root->api.cuCtxSetCurrent(v->g->ctx);
  if (r) remember(v, r, "cuCtxSetCurrent");
  return r == CUDA_SUCCESS;
}

/* Wait for the view's stream unless time() is queuing. */
static void settle(view *v, const char *what) {
  if (v->async || v->err) return;
  CUresult r = v->root->api.cuStreamSynchronize(v->stream);
  if (r) remember(v, r, "%s", what);
}

/* ---------------- loading the driver ---------------- */

static void *sym(void *lib, const char *name) { return dlsym(lib, name); }

static cf_status load_driver(cf_context *ctx, cu_api *a) {
  const char *name = cf_env(CF_ENV_CUDA_DRIVER); /* test hook: another library name */
  if (!name || !*name) name = DRIVER_LIB;
  a->lib = dlopen(name, RTLD_NOW | RTLD_LOCAL);
  if (!a->lib) {
    const char *why = dlerror();
    return cf_error(ctx, CF_ERR_UNSUPPORTED, NULL, 0,
                    "no CUDA driver (%s not found); --device cuda needs an NVIDIA GPU and its driver "
                    "(dlopen: %s)",
                    name, why ? why : "failed");
  }
#define X(fname, ret, args)                                                                        \
  {                                                                                                \
    void *p = sym(a->lib, #fname);                                                                 \
    if (!p && strcmp(#fname, "cuEventElapsedTime") == 0) p = sym(a->lib, "cuEventElapsedTime_v2"); \
    if (!p)                                                                                        \
      return cf_error(ctx, CF_ERR_UNSUPPORTED, NULL, 0,                                            \
                      "no usable CUDA driver: %s has no %s (driver too old?)", name, #fname);      \
    memcpy(&a->fname, &p, sizeof p);                                                               \
  }
  CF_CUDA_DRIVER_FUNCS(X)
#undef X
  return CF_OK;
}

/* ---------------- GPUs and kernels ---------------- */

static bool per_red(cf_kernel_kind k) { return k == CF_K_NARY || k == CF_K_ACC; }

/* A stream key shares its plain twin's slot: PTX has no streaming loop
 * (kernels_ir.c), so the two are the same kernel. */
static CUfunction *fn_slot(gpu *g, const cf_kernel_key *k) {
  return &g->fns[k->kind][k->dtype][per_red(k->kind) ? k->red : 0][k->kind == CF_K_NARY ? k->arity : 0];
}

static cf_status load_kernel(cuda_root *r, gpu *g, cf_context *ctx, const cf_kernel_key *key) {
  CUfunction *slot = fn_slot(g, key);
  if (*slot) return CF_OK;
  char name[96];
  cf_kernel_name(key, name, sizeof name);
  char *ptx = NULL;
  cf_status st = cf_codegen_ptx(ctx, key, 1, g->sm, &ptx);
  if (st) return st;
  if (g->n_mods == g->cap_mods) {
    int cap = g->cap_mods ? 2 * g->cap_mods : 32;
    CUmodule *m = realloc(g->mods, sizeof *m * (size_t)cap);
    if (!m) {
      free(ptx);
      return cf_error(ctx, CF_ERR_NO_MEMORY, NULL, 0, "out of memory");
    }
    g->mods = m;
    g->cap_mods = cap;
  }
  char log[2048] = "";
  int opts[2] = {CU_JIT_ERROR_LOG_BUFFER, CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES};
  void *vals[2] = {log, (void *)(uintptr_t)sizeof log};
  CUmodule mod = NULL;
  CUresult res = r->api.cuCtxSetCurrent(g->ctx);
  if (!res) res = r->api.cuModuleLoadDataEx(&mod, ptx, 2, opts, vals);
  free(ptx);
  if (res) {
    log[sizeof log - 1] = '\0';
    char err[256];
    return cf_error(ctx, CF_ERR_RUNTIME, NULL, 0, "CUDA: loading the PTX of %s (%s) on GPU %d: %s%s%s", name,
                    g->sm, g->ordinal, cf_cuda_text(&r->api, res, err, sizeof err), log[0] ? ": " : "", log);
  }
  g->mods[g->n_mods++] = mod;
  if ((res = r->api.cuModuleGetFunction(slot, mod, name))) {
    *slot = NULL;
    return cf_cuda_fail(ctx, &r->api, res, "%s not in its PTX module", name);
  }
  return CF_OK;
}

/* Start using GPU i: its primary context, what it is, the prepared
 * kernels, and peer access with every GPU already in use. */
static cf_status activate(cuda_root *r, int i, cf_context *ctx) {
  gpu *g = &r->gpus[i];
  if (g->active) return CF_OK;
  cu_api *a = &r->api;
  CUresult res = a->cuDevicePrimaryCtxRetain(&g->ctx, g->dev);
  if (res) return cf_cuda_fail(ctx, a, res, "cuDevicePrimaryCtxRetain (GPU %d)", g->ordinal);
  g->active = true;
  a->cuDeviceGetName(g->name, sizeof g->name, g->dev);
  a->cuDeviceGetAttribute(&g->sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, g->dev);
  a->cuDeviceGetAttribute(&g->threads_per_sm, CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR, g->dev);
  a->cuDeviceGetAttribute(&g->cc_major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, g->dev);
  a->cuDeviceGetAttribute(&g->cc_minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, g->dev);
  if (g->sms < 1) g->sms = 1;
  if (g->threads_per_sm < BLOCK) g->threads_per_sm = BLOCK;
  if (g->cc_major < 8)
    return cf_error(ctx, CF_ERR_UNSUPPORTED, NULL, 0,
                    "CUDA: GPU %d (%s) has compute capability %d.%d; collfuse's PTX needs sm_80 or newer",
                    g->ordinal, g->name, g->cc_major, g->cc_minor);
  g->sm = g->cc_major >= 9 ? "sm_90" : "sm_80"; /* newer GPUs JIT the sm_90 PTX */
  for (int k = 0; k < r->n_keys; k++) {
    cf_status st = load_kernel(r, g, ctx, &r->keys[k]);
    if (st) return st;
  }
  for (int j = 0; j < r->n_gpus; j++) {
    gpu *h = &r->gpus[j];
    if (j == i || !h->active) continue;
    int gh = 0, hg = 0;
    a->cuDeviceCanAccessPeer(&gh, g->dev, h->dev);
    a->cuDeviceCanAccessPeer(&hg, h->dev, g->dev);
    if (!gh || !hg)
      return cf_error(ctx, CF_ERR_UNSUPPORTED, NULL, 0,
                      "CUDA: GPUs %d and %d cannot read each other's memory (no peer access); "
                      "run on one GPU (CUDA_VISIBLE_DEVICES) and the ranks share it",
                      g->ordinal, h->ordinal);
    CUresult r1 = a->cuCtxSetCurrent(g->ctx);
    if (!r1) r1 = a->cuCtxEnablePeerAccess(h->ctx, 0);
    if (r1 == CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED) r1 = CUDA_SUCCESS;
    CUresult r2 = r1 ? r1 : a->cuCtxSetCurrent(h->ctx);
    if (!r2) r2 = a->cuCtxEnablePeerAccess(g->ctx, 0);
    if (r2 == CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED) r2 = CUDA_SUCCESS;
    if (r2) return cf_cuda_fail(ctx, a, r2, "peer access between GPUs %d and %d", g->ordinal, h->ordinal);
  }
  return CF_OK;
}

static cf_status new_view(cuda_root *r, int gi, int rank, int lane, cf_context *ctx, view **out) {
  *out = NULL;
  cf_status st = activate(r, gi, ctx);
  if (st) return st;
  if (r->n_views == r->cap_views) {
    int cap = r->cap_views ? 2 * r->cap_views : 16;
    view **vs = realloc(r->views, sizeof *vs * (size_t)cap);
    if (!vs) return cf_error(ctx, CF_ERR_NO_MEMORY, NULL, 0, "out of memory");
    r->views = vs;
    r->cap_views = cap;
  }
  view *v = calloc(1, sizeof *v);
  if (!v) return cf_error(ctx, CF_ERR_NO_MEMORY, NULL, 0, "out of memory");
  v->dev = (cf_device){.ops = &cuda_ops, .ctx = ctx, .impl = v};
  v->root = r;
  v->g = &r->gpus[gi];
  v->rank = rank;
  v->lane = lane;
  pthread_mutex_init(&v->lock, NULL);
  cu_api *a = &r->api;
  CUresult res = a->cuCtxSetCurrent(v->g->ctx);
  if (!res) res = a->cuStreamCreate(&v->stream, CU_STREAM_NON_BLOCKING);
  if (!res) res = a->cuMemAlloc_v2(&v->ptrs, sizeof(CUdeviceptr) * CF_MAX_ARITY);
  if (res) {
    st = cf_cuda_fail(ctx, a, res, "a stream for rank %d on GPU %d", rank, v->g->ordinal);
    if (v->stream) a->cuStreamDestroy_v2(v->stream);
    pthread_mutex_destroy(&v->lock);
    free(v);
    return st;
  }
  r->views[r->n_views++] = v;
  *out = v;
  return CF_OK;
}

static void view_free(cuda_root *r, view *v) {
  cu_api *a = &r->api;
  if (a->cuCtxSetCurrent(v->g->ctx) == CUDA_SUCCESS) {
    if (v->stream) a->cuStreamSynchronize(v->stream);
    if (v->blas) r->blas.cublasDestroy_v2(v->blas);
    if (v->ones) a->cuMemFree_v2(v->ones);
    if (v->ptrs) a->cuMemFree_v2(v->ptrs);
    if (v->stream) a->cuStreamDestroy_v2(v->stream);
  }
  pthread_mutex_destroy(&v->lock);
  free(v);
}

static void root_free(cuda_root *r) {
  if (!r) return;
  for (int i = r->n_views - 1; i >= 0; i--) view_free(r, r->views[i]);
  for (int i = 0; i < r->n_gpus; i++) {
    gpu *g = &r->gpus[i];
    if (!g->active) continue;
    if (r->api.cuCtxSetCurrent(g->ctx) == CUDA_SUCCESS)
      for (int m = 0; m < g->n_mods; m++) r->api.cuModuleUnload(g->mods[m]);
    free(g->mods);
    r->api.cuDevicePrimaryCtxRelease_v2(g->dev);
  }
  if (r->blas.lib) dlclose(r->blas.lib);
  /* libcuda stays loaded: the driver does not expect to be unloaded */
  free(r->gpus);
  free(r->keys);
  free(r->views);
  pthread_mutex_destroy(&r->lock);
  free(r);
}

/* ---------------- the slots ---------------- */

static void *cu_alloc(cf_device *d, size_t bytes) {
  view *v = d->impl;
  size_t rounded = (bytes + 63) & ~(size_t)63;
  if (rounded < bytes) return NULL;
  if (!rounded) rounded = 64;
  CUdeviceptr p = 0;
  cu_api *a = &v->root->api;
  if (!current(v)) return NULL;
  CUresult res = a->cuMemAlloc_v2(&p, rounded);
  if (!res) res = a->cuMemsetD8Async(p, 0, rounded, v->stream);
  if (!res) res = a->cuStreamSynchronize(v->stream);
  if (res) {
    if (p) a->cuMemFree_v2(p);
    return NULL; /* the caller reports out of memory */
  }
  return (void *)(uintptr_t)p;
}

static void cu_free(cf_device *d, void *p) {
  view *v = d->impl;
  if (!p || !current(v)) return;
  v->root->api.cuMemFree_v2(dptr(p));
}

static void cu_copy(cf_device *d, void *dst, const void *src, size_t bytes) {
  view *v = d->impl;
  if (!bytes || dst == src || v->err || !current(v)) return;
  CUresult res = v->root->api.cuMemcpyDtoDAsync_v2(dptr(dst), dptr(src), bytes, v->stream);
  if (res) remember(v, res, "cuMemcpyDtoDAsync (%zu bytes)", bytes);
  settle(v, "copy");
}

static cf_status cu_prepare(cf_device *d, const cf_kernel_key *stream_key) {
  cf_kernel_key plain = *stream_key, *key = &plain;
  plain.stream = false; /* the same kernel (fn_slot) */
  plain.outs = 0;
  view *v = d->impl;
  cuda_root *r = v->root;
  char why[160];
  if (!cf_kernel_key_valid(key, why, sizeof why))
    return cf_error(d->ctx, CF_ERR_USAGE, NULL, 0, "CUDA: kernel: %s", why);
  if (key->kind == CF_K_QUANT) return CF_OK; /* the epilogue runs on the host (compute.c) */
  pthread_mutex_lock(&r->lock);
  cf_status st = CF_OK;
  bool known = false;
  for (int k = 0; k < r->n_keys && !known; k++)
    known = r->keys[k].kind == key->kind && r->keys[k].dtype == key->dtype &&
            r->keys[k].red == key->red && r->keys[k].arity == key->arity;
  if (!known) {
    if (r->n_keys == r->cap_keys) {
      int cap = r->cap_keys ? 2 * r->cap_keys : 32;
      cf_kernel_key *ks = realloc(r->keys, sizeof *ks * (size_t)cap);
      if (!ks) st = cf_error(d->ctx, CF_ERR_NO_MEMORY, NULL, 0, "out of memory");
      else r->keys = ks, r->cap_keys = cap;
    }
    if (!st) r->keys[r->n_keys++] = plain;
  }
  for (int i = 0; i < r->n_gpus && !st; i++)
    if (r->gpus[i].active) st = load_kernel(r, &r->gpus[i], d->ctx, key);
  pthread_mutex_unlock(&r->lock);
  return st;
}

/* The launch grid for n elements: one element per thread per step, at
 * most one full wave of blocks. */
static unsigned blocks_for(const gpu *g, int64_t n) {
  int64_t full = (int64_t)g->sms * (g->threads_per_sm / BLOCK);
  int64_t need = (n + BLOCK - 1) / BLOCK;
  return (unsigned)(need < full ? need : full);
}

static CUfunction kernel(view *v, const cf_kernel_key *key) {
  CUfunction f = *fn_slot(v->g, key);
  if (!f) {
    char name[96];
    remember(v, 0, "kernel %s was not prepared", cf_kernel_name(key, name, sizeof name));
  }
  return f;
}

static void launch(view *v, const cf_kernel_key *key, CUfunction f, int64_t n, void **params) {
  CUresult res = v->root->api.cuLaunchKernel(f, blocks_for(v->g, n), 1, 1, BLOCK, 1, 1, 0, v->stream,
                                             params, NULL);
  if (res) {
    char name[96];
    remember(v, res, "cuLaunchKernel(%s, n=%lld)", cf_kernel_name(key, name, sizeof name), (long long)n);
  }
  settle(v, "a kernel");
}

static void cu_nary(cf_device *d, const cf_kernel_key *key, void *dst, const void *const *src,
                    int64_t n, double div) {
  view *v = d->impl;
  if (n <= 0 || v->err || !current(v)) return;
  CUfunction f = kernel(v, key);
  int k = key->arity;
  if (!f || k < 1 || k > CF_MAX_ARITY) return;
  pthread_mutex_lock(&v->lock); /* the pointer slot and the launch after it */
  bool same = v->last_k == k;
  for (int i = 0; i < k && same; i++) same = v->last[i] == dptr(src[i]);
  if (!same) {
    for (int i = 0; i < k; i++) v->last[i] = dptr(src[i]);
    /* pageable source: staged before the call returns, and the copy runs
     * in stream order, after every launch that read the slot before */
    CUresult res = v->root->api.cuMemcpyHtoDAsync_v2(v->ptrs, v->last, sizeof(CUdeviceptr) * (size_t)k,
                                                     v->stream);
    v->last_k = res ? 0 : k;
    if (res) remember(v, res, "uploading %d source pointers", k);
  }
  if (!v->err) {
    CUdeviceptr pd = dptr(dst), ps = v->ptrs;
    void *params[] = {&pd, &ps, &n, &div};
    launch(v, key, f, n, params);
  }
  pthread_mutex_unlock(&v->lock);
}

static void cu_acc(cf_device *d, const cf_kernel_key *key, void *dst, const void *src, int64_t n) {
  view *v = d->impl;
  if (n <= 0 || v->err || !current(v)) return;
  CUfunction f = kernel(v, key);
  if (!f) return;
  CUdeviceptr pd = dptr(dst), ps = dptr(src);
  void *params[] = {&pd, &ps, &n};
  launch(v, key, f, n, params);
}

static void cu_scale(cf_device *d, const cf_kernel_key *key, void *dst, int64_t n, double div) {
  view *v = d->impl;
  if (n <= 0 || v->err || !current(v)) return;
  CUfunction f = kernel(v, key);
  if (!f) return;
  CUdeviceptr pd = dptr(dst);
  void *params[] = {&pd, &n, &div};
  launch(v, key, f, n, params);
}

static void cu_sync(cf_device *d) {
  view *v = d->impl;
  if (v->err || !current(v)) return;
  CUresult res = v->root->api.cuStreamSynchronize(v->stream);
  if (res) remember(v, res, "cuStreamSynchronize");
}

static void cu_destroy(cf_device *d) {
  if (!d) return;
  view *v = d->impl;
  if (v->root->views[0] == v) root_free(v->root); /* views belong to the root */
}

static cf_status cu_view(cf_device *d, cf_context *ctx, int rank, int lane, cf_device **out) {
  view *v = d->impl;
  cuda_root *r = v->root;
  *out = NULL;
  pthread_mutex_lock(&r->lock);
  cf_status st = CF_OK;
  view *found = NULL;
  for (int i = 1; i < r->n_views && !found; i++)
    if (r->views[i]->rank == rank && r->views[i]->lane == lane) found = r->views[i];
  if (found) { /* a new run: its context, a clean slate */
    found->dev.ctx = ctx;
    found->err = CUDA_SUCCESS;
    found->last_k = 0;
  } else {
    int gi = r->fixed || rank < 0 ? 0 : rank % r->n_gpus;
    st = new_view(r, gi, rank, lane, ctx, &found);
  }
  pthread_mutex_unlock(&r->lock);
  if (!st) *out = &found->dev;
  return st;
}

static cf_status cu_upload(cf_device *d, void *dst, const void *src, size_t bytes) {
  view *v = d->impl;
  if (!bytes) return CF_OK;
  cu_api *a = &v->root->api;
  CUresult res = a->cuCtxSetCurrent(v->g->ctx);
  if (!res) res = a->cuMemcpyHtoDAsync_v2(dptr(dst), src, bytes, v->stream);
  if (!res) res = a->cuStreamSynchronize(v->stream);
  return res ? cf_cuda_fail(d->ctx, a, res, "copying %zu bytes to GPU %d", bytes, v->g->ordinal) : CF_OK;
}

static cf_status cu_download(cf_device *d, void *dst, const void *src, size_t bytes) {
  view *v = d->impl;
  if (!bytes) return CF_OK;
  cu_api *a = &v->root->api;
  CUresult res = a->cuCtxSetCurrent(v->g->ctx);
  if (!res) res = a->cuMemcpyDtoHAsync_v2(dst, dptr(src), bytes, v->stream);
  if (!res) res = a->cuStreamSynchronize(v->stream);
  return res ? cf_cuda_fail(d->ctx, a, res, "copying %zu bytes from GPU %d", bytes, v->g->ordinal) : CF_OK;
}

static cf_status cu_error(cf_device *d, cf_context *ctx) {
  view *v = d->impl;
  if (!v->err) return CF_OK;
  return cf_error(ctx, CF_ERR_RUNTIME, NULL, 0, "%s", v->errmsg);
}

static cf_status cu_time(cf_device *d, void (*fn)(void *arg), void *arg, int reps, double *ms) {
  view *v = d->impl;
  cu_api *a = &v->root->api;
  CUevent e0 = NULL, e1 = NULL;
  float t = 0;
  if (reps < 1) reps = 1;
  CUresult res = a->cuCtxSetCurrent(v->g->ctx);
  if (!res) res = a->cuEventCreate(&e0, CU_EVENT_DEFAULT);
  if (!res) res = a->cuEventCreate(&e1, CU_EVENT_DEFAULT);
  if (!res) res = a->cuEventRecord(e0, v->stream);
  if (!res) {
    v->async = true;
    for (int i = 0; i < reps; i++) fn(arg);
    v->async = false;
    res = a->cuEventRecord(e1, v->stream);
  }
  if (!res) res = a->cuEventSynchronize(e1);
  if (!res) res = a->cuEventElapsedTime(&t, e0, e1);
  if (e0) a->cuEventDestroy_v2(e0);
  if (e1) a->cuEventDestroy_v2(e1);
  if (res) return cf_cuda_fail(d->ctx, a, res, "timing %d calls", reps);
  if (v->err) return cu_error(d, d->ctx);
  *ms = (double)t / reps;
  return CF_OK;
}

static const cf_device_ops cuda_ops = {
    .name = "cuda",
    .alloc = cu_alloc,
    .free = cu_free,
    .copy = cu_copy,
    .prepare = cu_prepare,
    .nary = cu_nary,
    .acc = cu_acc,
    .scale = cu_scale,
    .sync = cu_sync,
    .destroy = cu_destroy,
    .view = cu_view,
    .upload = cu_upload,
    .download = cu_download,
    .compute = cf_cuda_compute,
    .product = cf_cuda_product,
    .error = cu_error,
    .time = cu_time,
};

/* ---------------- creation ---------------- */

cf_status cf_device_cuda_create(cf_context *ctx, int device_index, cf_device **out) {
  *out = NULL;
  cuda_root *r = calloc(1, sizeof *r);
  if (!r) return cf_error(ctx, CF_ERR_NO_MEMORY, NULL, 0, "out of memory");
  pthread_mutex_init(&r->lock, NULL);
  cf_status st = load_driver(ctx, &r->api);
  cu_api *a = &r->api;
  int count = 0;
  CUresult res = CUDA_SUCCESS;
  if (!st && (res = a->cuInit(0)))
    st = cf_error(ctx, CF_ERR_UNSUPPORTED, NULL, 0, "no CUDA device (cuInit: %s)",
                  cf_cuda_text(a, res, (char[256]){0}, 256));
  if (!st && (res = a->cuDeviceGetCount(&count))) st = cf_cuda_fail(ctx, a, res, "cuDeviceGetCount");
  if (!st && count < 1) st = cf_error(ctx, CF_ERR_UNSUPPORTED, NULL, 0, "no CUDA device (the driver sees none)");
  if (!st && device_index >= count)
    st = cf_error(ctx, CF_ERR_USAGE, NULL, 0, "CUDA device %d does not exist (%d visible)", device_index, count);
  if (!st) {
    r->fixed = device_index >= 0;
    r->n_gpus = r->fixed ? 1 : count;
    r->gpus = calloc((size_t)r->n_gpus, sizeof *r->gpus);
    if (!r->gpus) st = cf_error(ctx, CF_ERR_NO_MEMORY, NULL, 0, "out of memory");
  }
  for (int i = 0; !st && i < r->n_gpus; i++) {
    r->gpus[i].ordinal = r->fixed ? device_index : i;
    if ((res = a->cuDeviceGet(&r->gpus[i].dev, r->gpus[i].ordinal)))
      st = cf_cuda_fail(ctx, a, res, "cuDeviceGet(%d)", r->gpus[i].ordinal);
  }
  view *root_view = NULL;
  if (!st) st = new_view(r, 0, -1, 0, ctx, &root_view);
  if (st) {
    if (r->api.lib && r->gpus) root_free(r);
    else {
      free(r->gpus);
      pthread_mutex_destroy(&r->lock);
      free(r);
    }
    return st;
  }
  *out = &root_view->dev;
  return CF_OK;
}

bool cf_device_cuda_info(const cf_device *d, char *name, size_t len, int *cc_major, int *cc_minor,
                         const char **sm) {
  if (!d || d->ops != &cuda_ops) return false;
  const view *v = d->impl;
  if (name && len) snprintf(name, len, "%s", v->g->name);
  if (cc_major) *cc_major = v->g->cc_major;
  if (cc_minor) *cc_minor = v->g->cc_minor;
  if (sm) *sm = v->g->sm;
  return true;
}
