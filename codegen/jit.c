/* jit.c - kernels compiled on first use through ORC LLJIT and cached in the
 * collfuse context (ctx->codegen), and on disk by objcache.c.
 *
 * Every kernel goes the same way: IR in a thread-safe context of its own
 * (one per compile job), default<O3>, an object file from our own target
 * machine (the host's CPU and features, the same ones the cache is keyed
 * by), then LLVMOrcLLJITAddObjectFile. So a kernel loaded from the disk
 * cache is byte for byte what a fresh compile would link, and one module
 * per kernel keeps each compile small (well under 50 ms).
 *
 * Threads that share a context may plan at the same time (runs of different
 * executables of one graph build plans for bound buckets or MPI), and a
 * run's rank contexts borrow the JIT: its slots, disk cache and LLJIT are
 * used under the JIT's own lock, and the context's codegen_lock covers its
 * creation.
 */
#define CF_CODEGEN_INTERNAL
#include "../ir/trace.h"
#include "codegen.h"

#include <llvm-c/Error.h>
#include <llvm-c/LLJIT.h>
#include <llvm-c/Orc.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

typedef struct cf_jit {
  pthread_mutex_t lock; /* held while a kernel is looked up, loaded or compiled */
  LLVMOrcLLJITRef jit;
  LLVMTargetMachineRef tm; /* emits the objects, for target */
  cf_codegen_target target;
  cf_objcache cache;
  /* compiled kernels by (kind, dtype, reduction, arity), and the n-ary ones
   * with destinations by (stream, dtype, reduction, arity, outs); the target
   * is fixed per context, so it needs no slot of its own */
  void *fns[CF_K_QUANT + 1][CF_DT_COUNT][CF_RED_COUNT][CF_MAX_ARITY + 1];
  void *outs[2][CF_DT_COUNT][CF_RED_COUNT][CF_MAX_ARITY + 1][CF_MAX_ARITY + 1];
  char **names; /* the kernels' names its trace events point at (they outlive a run's trace) */
  int n_names, cap_names;
} cf_jit;

/* Turn an LLVMErrorRef into a context error (consuming it). */
static cf_status llvm_error(cf_context *ctx, LLVMErrorRef e, const char *what, const char *name) {
  char *m = LLVMGetErrorMessage(e);
  cf_status st = cf_error(ctx, CF_ERR_RUNTIME, NULL, 0, "codegen: %s %s: %s", what, name, m);
  LLVMDisposeErrorMessage(m);
  return st;
}

static void jit_free(void *p) {
  cf_jit *J = p;
  if (!J) return;
  if (J->jit) {
    LLVMErrorRef e = LLVMOrcDisposeLLJIT(J->jit);
    if (e) LLVMConsumeError(e);
  }
  if (J->tm) LLVMDisposeTargetMachine(J->tm);
  cf_objcache_close(&J->cache);
  pthread_mutex_destroy(&J->lock);
  for (int i = 0; i < J->n_names; i++) free(J->names[i]);
  free(J->names);
  free(J);
}

/* ctx's JIT state, created on first use for target t (NULL: the host);
 * called with ctx->codegen_lock held. */
static cf_status jit_make(cf_context *ctx, const cf_codegen_target *t, cf_jit **out) {
  *out = NULL;
  if (ctx->codegen) {
    *out = ctx->codegen;
    return CF_OK;
  }
  cf_jit *J = calloc(1, sizeof *J);
  if (!J) return cf_error(ctx, CF_ERR_NO_MEMORY, NULL, 0, "codegen: out of memory");
  J->cache.dirfd = -1;
  if (pthread_mutex_init(&J->lock, NULL) != 0) {
    free(J);
    return cf_error(ctx, CF_ERR_NO_MEMORY, NULL, 0, "codegen: cannot create a lock");
  }
  cf_status st = CF_OK;
  if (t)
    J->target = *t;
  else if ((st = cf_llvm_target_host(ctx, &J->target)) != CF_OK)
    goto fail;
  if ((st = cf_codegen_machine(ctx, &J->target, &J->tm)) != CF_OK) goto fail;
  LLVMOrcLLJITBuilderRef jb = LLVMOrcCreateLLJITBuilder();
  LLVMErrorRef e = LLVMOrcCreateLLJIT(&J->jit, jb); /* takes jb */
  if (e) {
    J->jit = NULL;
    st = llvm_error(ctx, e, "creating", "the LLJIT");
    goto fail;
  }
  /* libc/libgcc helpers a kernel may call (memset, half conversions on
   * CPUs without F16C) resolve against the process */
  LLVMOrcDefinitionGeneratorRef gen;
  e = LLVMOrcCreateDynamicLibrarySearchGeneratorForProcess(
      &gen, LLVMOrcLLJITGetGlobalPrefix(J->jit), NULL, NULL);
  if (e) {
    st = llvm_error(ctx, e, "searching", "the process for symbols");
    goto fail;
  }
  LLVMOrcJITDylibAddGenerator(LLVMOrcLLJITGetMainJITDylib(J->jit), gen);
  cf_objcache_open(ctx, &J->cache);
  unsigned lv[3];
  LLVMGetVersion(&lv[0], &lv[1], &lv[2]);
  if (lv[0] != CF_LLVM_VERSION_MAJOR || lv[1] != CF_LLVM_VERSION_MINOR ||
      lv[2] != CF_LLVM_VERSION_PATCH) {
    /* the cache names entries by the LLVM collfuse was built with */
    cf_log(ctx, CF_LOG_WARN,
           "codegen: libLLVM %u.%u.%u is not the %s collfuse was built with; the kernel cache "
           "is off",
           lv[0], lv[1], lv[2], CF_LLVM_VERSION_STRING);
    cf_objcache_close(&J->cache);
  } else if (!t) {
    /* the host's own target: tell libcollfuse's loader which entries are
     * this host's (objcache.c, "the host's target record") */
    cf_objcache_store_host(ctx, &J->cache, &J->target);
  }
  ctx->codegen = J;
  ctx->codegen_free = jit_free;
  *out = J;
  return CF_OK;
fail:
  jit_free(J);
  return st;
}

static cf_status jit_get(cf_context *ctx, const cf_codegen_target *t, cf_jit **out) {
  pthread_mutex_lock(&ctx->codegen_lock);
  cf_status st = jit_make(ctx, t, out);
  pthread_mutex_unlock(&ctx->codegen_lock);
  return st;
}

/* Link an object file into the JIT and find name in it. On failure nothing
 * of the object stays behind (its resource tracker is removed), so a bad
 * cached object can be replaced by a fresh one of the same symbols. */
static cf_status link_object(cf_context *ctx, cf_jit *J, const void *obj, size_t size,
                             const char *name, void **fn) {
  *fn = NULL;
  LLVMMemoryBufferRef mb = LLVMCreateMemoryBufferWithMemoryRangeCopy(obj, size, name);
  if (!mb) return cf_error(ctx, CF_ERR_NO_MEMORY, NULL, 0, "codegen: out of memory");
  LLVMOrcResourceTrackerRef rt =
      LLVMOrcJITDylibCreateResourceTracker(LLVMOrcLLJITGetMainJITDylib(J->jit));
  cf_status st = CF_OK;
  LLVMErrorRef e = LLVMOrcLLJITAddObjectFileWithRT(J->jit, rt, mb); /* takes mb */
  if (e) {
    st = llvm_error(ctx, e, "linking", name);
    goto done;
  }
  LLVMOrcExecutorAddress addr = 0;
  e = LLVMOrcLLJITLookup(J->jit, &addr, name);
  if (e || !addr) {
    st = e ? llvm_error(ctx, e, "looking up", name)
           : cf_error(ctx, CF_ERR_RUNTIME, NULL, 0, "codegen: %s resolved to address 0", name);
    LLVMErrorRef e2 = LLVMOrcResourceTrackerRemove(rt);
    if (e2) LLVMConsumeError(e2);
    goto done;
  }
  *fn = (void *)(uintptr_t)addr;
done:
  LLVMOrcReleaseResourceTracker(rt);
  return st;
}

/* Compile key to an object file: a thread-safe context for this job alone,
 * one module, default<O3>, the object from J->tm. */
static cf_status compile_object(cf_context *ctx, cf_jit *J, const cf_kernel_key *key,
                                LLVMMemoryBufferRef *obj) {
  *obj = NULL;
  LLVMOrcThreadSafeContextRef tsc = LLVMOrcCreateNewThreadSafeContext();
  LLVMContextRef lc = LLVMOrcThreadSafeContextGetContext(tsc);
  LLVMModuleRef mod;
  cf_status st = cf_codegen_module_tm(ctx, &J->target, J->tm, key, 1, lc, &mod);
  if (st == CF_OK) {
    char *err = NULL;
    if (LLVMTargetMachineEmitToMemoryBuffer(J->tm, mod, LLVMObjectFile, &err, obj)) {
      *obj = NULL;
      st = cf_error(ctx, CF_ERR_RUNTIME, NULL, 0, "codegen: emitting an object: %s",
                    err ? err : "unknown error");
    }
    LLVMDisposeMessage(err);
    LLVMDisposeModule(mod);
  }
  LLVMOrcDisposeThreadSafeContext(tsc);
  return st;
}

static cf_status kernel_locked(cf_context *ctx, cf_jit *J, const cf_kernel_key *key,
                               const char *name, void **fn, double *compile_ms, cf_trace_lane *l);

cf_status cf_llvm_kernel(cf_context *ctx, const cf_kernel_key *key, void **fn,
                            double *compile_ms, cf_trace_lane *lane) {
  if (fn) *fn = NULL;
  if (compile_ms) *compile_ms = 0;
  if (!ctx) return CF_ERR_USAGE;
  if (!key || !fn) return cf_error(ctx, CF_ERR_USAGE, NULL, 0, "codegen: no kernel key or result");
  char why[128], name[64];
  cf_kernel_name(key, name, sizeof name);
  if (!cf_kernel_key_valid(key, why, sizeof why))
    return cf_error(ctx, CF_ERR_USAGE, NULL, 0, "codegen: kernel %s: %s", name, why);
  cf_jit *J;
  cf_status st = jit_get(ctx, NULL, &J);
  if (st != CF_OK) return st;
  pthread_mutex_lock(&J->lock);
  st = kernel_locked(ctx, J, key, name, fn, compile_ms, lane);
  pthread_mutex_unlock(&J->lock);
  return st;
}

/* name kept in J for as long as J lives (lock held); NULL when out of memory */
static const char *keep_name(cf_jit *J, const char *name) {
  for (int i = 0; i < J->n_names; i++)
    if (!strcmp(J->names[i], name)) return J->names[i];
  if (J->n_names == J->cap_names) {
    int cap = J->cap_names ? 2 * J->cap_names : 16;
    char **nn = realloc(J->names, sizeof *nn * (size_t)cap);
    if (!nn) return NULL;
    J->names = nn;
    J->cap_names = cap;
  }
  char *k = strdup(name);
  if (k) J->names[J->n_names++] = k;
  return k;
}

/* kernel_locked, and with a trace lane l (the caller's: this module has a
 * cf_trace_here of its own) the lookup as an event on it: cat "kernel", the kernel's name, args.cache 0 when it was
 * generated now, 1 when it came from the object cache on disk, 2 when this
 * context had it already. */
static cf_status kernel_find(cf_context *ctx, cf_jit *J, const cf_kernel_key *key,
                             const char *name, void **fn, double *compile_ms, int *cache);

static cf_status kernel_locked(cf_context *ctx, cf_jit *J, const cf_kernel_key *key,
                               const char *name, void **fn, double *compile_ms, cf_trace_lane *l) {
  int64_t t0 = l ? cf_trace_clock() : 0;
  int cache = 0;
  cf_status st = kernel_find(ctx, J, key, name, fn, compile_ms, &cache);
  const char *kept = l && !st ? keep_name(J, name) : NULL;
  if (kept)
    cf_trace_record(l, &(cf_trace_ev){.t0 = t0, .t1 = cf_trace_clock(), .name = kept,
                                      .cat = "kernel", .arg_name = "cache", .arg = cache});
  return st;
}

static cf_status kernel_find(cf_context *ctx, cf_jit *J, const cf_kernel_key *key,
                             const char *name, void **fn, double *compile_ms, int *cache) {
  cf_status st;
  bool per_red = key->kind == CF_K_NARY || key->kind == CF_K_ACC;
  void **slot = key->outs ? &J->outs[key->stream][key->dtype][key->red][key->arity][key->outs]
                          : &J->fns[key->kind][key->dtype][per_red ? key->red : 0][key->arity];
  if (*slot) {
    *fn = *slot;
    *cache = 2;
    return CF_OK;
  }

  double t0 = 1e3 * cf_now();
  void *data;
  size_t size;
  if (cf_objcache_load(ctx, &J->cache, &J->target, key, &data, &size)) {
    st = link_object(ctx, J, data, size, name, slot);
    free(data);
    if (st == CF_OK) {
      *fn = *slot;
      *cache = 1;
      return CF_OK; /* compile_ms stays 0 */
    }
    cf_log(ctx, CF_LOG_INFO, "codegen: cached %s did not link (%s); rebuilding", name,
           cf_errmsg(ctx));
    cf_clear_error(ctx);
  }

  LLVMMemoryBufferRef obj;
  if ((st = compile_object(ctx, J, key, &obj)) != CF_OK) return st;
  const void *bytes = LLVMGetBufferStart(obj);
  size = LLVMGetBufferSize(obj);
  cf_objcache_store(ctx, &J->cache, &J->target, key, bytes, size);
  st = link_object(ctx, J, bytes, size, name, slot);
  LLVMDisposeMemoryBuffer(obj);
  if (st != CF_OK) return st;
  *fn = *slot;
  if (compile_ms) {
    *compile_ms = 1e3 * cf_now() - t0;
    if (*compile_ms <= 0) *compile_ms = 1e-6; /* 0 means "from a cache" */
  }
  return CF_OK;
}

cf_status cf_llvm_use_target(cf_context *ctx, const cf_codegen_target *t) {
  if (!ctx) return CF_ERR_USAGE;
  if (!t || t->arch != CF_ARCH_HOST)
    return cf_error(ctx, CF_ERR_USAGE, NULL, 0, "codegen: JIT targets must be host targets");
  pthread_mutex_lock(&ctx->codegen_lock);
  cf_jit *J;
  cf_status st = ctx->codegen ? cf_error(ctx, CF_ERR_USAGE, NULL, 0,
                                         "codegen: the context has compiled kernels already; set "
                                         "its target first")
                              : jit_make(ctx, t, &J);
  pthread_mutex_unlock(&ctx->codegen_lock);
  return st;
}
