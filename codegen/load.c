/* load.c - the entry points that generate or link kernels, in libcollfuse:
 * each finds the LLVM module (collfuse-codegen.so, codegen.h) on its
 * context's first use and calls through the module's table.
 *
 * The module is looked for, in this order:
 *   1. beside the object this code is in, links resolved: libcollfuse.so
 *      wherever it was loaded from (by an embedder, the Python package's
 *      lookup), or the executable that linked the library statically (the
 *      driver): DIR/collfuse-codegen.so (the build tree),
 *      DIR/collfuse/collfuse-codegen.so (the installed library directory)
 *      and DIR/BIN_TO_LIB/collfuse/collfuse-codegen.so (an installed
 *      driver, BIN_TO_LIB being the way from the install's bin directory to
 *      its lib directory, e.g. ../lib/x86_64-linux-gnu for /usr);
 *   2. the configured install directory, LIBDIR/collfuse/;
 *   3. the system loader by name (LD_LIBRARY_PATH).
 * A module of another build (its table's abi differs) is refused. dlopen
 * keeps one copy however many contexts load it, and it is never closed: a
 * context's JIT state and the kernels it hands out live in it.
 */
#define _GNU_SOURCE /* dladdr1 */
#include "../ir/trace.h"
#include "codegen.h"

#include <dlfcn.h>
#include <limits.h>
#include <pthread.h>
#include <link.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* an address inside the object that holds this code */
static const char anchor;

/* The directory of the object holding this code into dir (len at least
 * PATH_MAX), links resolved; false when unknown. */
static bool own_dir(char *dir, size_t len) {
  Dl_info info;
  struct link_map *map = NULL;
  if (len < PATH_MAX || !dladdr1(&anchor, &info, (void **)&map, RTLD_DL_LINKMAP) || !map)
    return false;
  if (map->l_name && map->l_name[0]) {
    /* a shared library, by the path it was loaded by (relative, when
     * dlopen was given one) */
    if (!realpath(map->l_name, dir)) return false;
  } else {
    /* the main program (its link map has no name): statically linked */
    ssize_t n = readlink("/proc/self/exe", dir, len - 1);
    if (n <= 0) return false;
    dir[n] = '\0';
  }
  char *slash = strrchr(dir, '/');
  if (!slash) return false;
  *slash = '\0';
  return true;
}

/* Try to load path (or a bare name) as the module; on failure append
 * "path: why" to the list in tried. */
static const cf_codegen_ops *try_load(const char *path, char *tried, size_t len) {
  const char *why;
  char buf[512];
  if (strchr(path, '/') && access(path, F_OK) != 0) {
    why = "not found";
  } else {
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
      why = dlerror();
    } else {
      const cf_codegen_ops *ops = dlsym(h, CF_CODEGEN_OPS_SYMBOL);
      if (ops && ops->abi == CF_CODEGEN_ABI) return ops;
      if (ops)
        snprintf(buf, sizeof buf, "from another build of collfuse (abi %016llx, this one %016llx)",
                 (unsigned long long)ops->abi, (unsigned long long)CF_CODEGEN_ABI);
      else
        snprintf(buf, sizeof buf, "no %s in it", CF_CODEGEN_OPS_SYMBOL);
      why = buf;
      dlclose(h);
    }
  }
  size_t used = strlen(tried);
  snprintf(tried + used, len - used, "%s%s: %s", used ? "; " : "",
           strchr(path, '/') ? path : "the system loader", why ? why : "?");
  return NULL;
}

static const cf_codegen_ops *find_module(char *tried, size_t len) {
  char dir[4096], path[4200];
  const cf_codegen_ops *ops = NULL;
  tried[0] = '\0';
  if (own_dir(dir, sizeof dir)) {
    static const char *const below[] = {"", "collfuse/", CF_BIN_TO_LIB "/collfuse/"};
    for (size_t i = 0; i < sizeof below / sizeof *below && !ops; i++) {
      snprintf(path, sizeof path, "%s/%s" CF_CODEGEN_MODULE, dir, below[i]);
      ops = try_load(path, tried, len);
    }
  }
  if (!ops) ops = try_load(CF_INSTALL_LIBDIR "/collfuse/" CF_CODEGEN_MODULE, tried, len);
  if (!ops) ops = try_load(CF_CODEGEN_MODULE, tried, len);
  return ops;
}

/* ctx's table, loading the module on first use. */
static cf_status ops_of(cf_context *ctx, const cf_codegen_ops **out) {
  pthread_mutex_lock(&ctx->codegen_lock);
  cf_status st = CF_OK;
  if (!ctx->codegen_ops) {
    char tried[4096];
    ctx->codegen_ops = find_module(tried, sizeof tried);
    if (!ctx->codegen_ops)
      st = cf_error(ctx, CF_ERR_UNSUPPORTED, NULL, 0,
                    "codegen: cannot load the LLVM code generator %s, which generates and links "
                    "kernels (looked at %s)",
                    CF_CODEGEN_MODULE, tried);
  }
  *out = ctx->codegen_ops;
  pthread_mutex_unlock(&ctx->codegen_lock);
  return st;
}

cf_status cf_codegen_target_host(cf_context *ctx, cf_codegen_target *t) {
  const cf_codegen_ops *ops;
  cf_status st = ops_of(ctx, &ops);
  return st ? st : ops->target_host(ctx, t);
}

cf_status cf_codegen_target_nvptx(cf_context *ctx, const char *sm, cf_codegen_target *t) {
  const cf_codegen_ops *ops;
  cf_status st = ops_of(ctx, &ops);
  return st ? st : ops->target_nvptx(ctx, sm, t);
}

/* ---------------- kernels from the disk cache, without LLVM ----------------
 *
 * A context's first kernel need not load the module: when the host's
 * record (objcache.c) gives the target hash, an entry of the disk cache is
 * verified exactly as the module would (objcache.c is the one copy of the
 * trust code) and linked by elfload.c. Anything that does not work out -
 * no record, no entry, a stale one, an object elfload refuses - goes to the
 * module as before, which logs, rebuilds and rewrites. Once this context's
 * JIT exists (the module compiled or linked something, or a test set its
 * target), the module answers every kernel this code has not linked yet. */
typedef struct kl_kernel {
  cf_kernel_key key;
  void *fn;
  char name[64];
  cf_elf_image img;
} kl_kernel;

typedef struct cf_kload {
  pthread_mutex_t lock; /* held while a kernel is looked up or linked */
  cf_objcache cache;
  bool have_target; /* the host record was read */
  uint64_t th;      /* its target hash */
  kl_kernel **v;    /* the kernels linked here, each allocated alone: trace events point
                       at their names for as long as the context lives */
  int n, cap;
} cf_kload;

static void kload_free(void *p) {
  cf_kload *L = p;
  if (!L) return;
  for (int i = 0; i < L->n; i++)
    cf_elf_unmap(&L->v[i]->img), free(L->v[i]);
  free(L->v);
  cf_objcache_close(&L->cache);
  pthread_mutex_destroy(&L->lock);
  free(L);
}

/* ctx's state, made on first use (NULL: out of memory, or the cache has no
 * record for this host: the module links every kernel); codegen_lock held */
static cf_kload *kload_get(cf_context *ctx) {
  if (ctx->kload) return ctx->kload;
  cf_kload *L = calloc(1, sizeof *L);
  if (!L) return NULL;
  if (pthread_mutex_init(&L->lock, NULL) != 0) {
    free(L);
    return NULL;
  }
  cf_objcache_open_as(ctx, &L->cache, true); /* the module warns, if it comes to that */
  L->have_target = cf_objcache_load_host(ctx, &L->cache, &L->th);
  if (!L->have_target) cf_objcache_close(&L->cache);
  ctx->kload = L;
  ctx->kload_free = kload_free;
  return L;
}

static bool same_key(const cf_kernel_key *a, const cf_kernel_key *b) {
  return a->kind == b->kind && a->dtype == b->dtype && a->red == b->red && a->arity == b->arity &&
         a->stream == b->stream && a->outs == b->outs;
}

/* key's kernel from the cache without the module: true with *fn (and an
 * event on the caller's trace lane, args.cache 1 or 2 as the module's);
 * false: ask the module. */
static bool kernel_cached(cf_context *ctx, const cf_kernel_key *key, void **fn) {
  char why[160];
  if (!cf_kernel_key_valid(key, why, sizeof why)) return false; /* the module says why */
  pthread_mutex_lock(&ctx->codegen_lock);
  bool jit = ctx->codegen != NULL; /* then only what this context linked already */
  cf_kload *L = jit ? ctx->kload : kload_get(ctx);
  pthread_mutex_unlock(&ctx->codegen_lock);
  if (!L || !L->have_target) return false;
  int64_t t0 = cf_trace_here ? cf_trace_clock() : 0;
  int cache = 2;
  const char *name = NULL;
  pthread_mutex_lock(&L->lock);
  for (int i = 0; i < L->n && !*fn; i++)
    if (same_key(&L->v[i]->key, key)) *fn = L->v[i]->fn, name = L->v[i]->name;
  if (!*fn && !jit && L->cache.enabled) {
    cache = 1;
    void *data;
    size_t size;
    kl_kernel k = {.key = *key};
    cf_kernel_name(key, k.name, sizeof k.name);
    if (L->n == L->cap) {
      int cap = L->cap ? 2 * L->cap : 16;
      kl_kernel **v = realloc(L->v, sizeof *v * (size_t)cap);
      if (v) L->v = v, L->cap = cap;
    }
    if (L->n < L->cap && cf_objcache_load_hash(ctx, &L->cache, L->th, key, &data, &size)) {
      if (cf_elf_link(data, size, k.name, &k.img, &k.fn, why, sizeof why)) {
        kl_kernel *kept = malloc(sizeof *kept);
        if (kept) {
          *kept = k;
          L->v[L->n++] = kept;
          *fn = k.fn;
          name = kept->name;
        } else {
          cf_elf_unmap(&k.img);
        }
      } else {
        cf_log(ctx, CF_LOG_INFO,
               "codegen: cached %s is not linked without LLVM (%s); the LLVM module links it",
               k.name, why);
      }
      free(data);
    }
  }
  pthread_mutex_unlock(&L->lock);
  if (*fn && cf_trace_here)
    cf_trace_record(cf_trace_here, &(cf_trace_ev){.t0 = t0, .t1 = cf_trace_clock(), .name = name,
                                                  .cat = "kernel", .arg_name = "cache",
                                                  .arg = cache});
  return *fn != NULL;
}

cf_status cf_codegen_kernel(cf_context *ctx, const cf_kernel_key *key, void **fn,
                            double *compile_ms) {
  if (fn) *fn = NULL;
  if (compile_ms) *compile_ms = 0;
  if (!ctx) return CF_ERR_USAGE;
  if (key && fn && kernel_cached(ctx, key, fn)) return CF_OK; /* compile_ms stays 0 */
  const cf_codegen_ops *ops;
  cf_status st = ops_of(ctx, &ops);
  return st ? st : ops->kernel(ctx, key, fn, compile_ms, cf_trace_here);
}

cf_status cf_codegen_emit(cf_context *ctx, const cf_kernel_key *keys, int n, cf_emit_format fmt,
                          const char *path) {
  if (!ctx) return CF_ERR_USAGE;
  const cf_codegen_ops *ops;
  cf_status st = ops_of(ctx, &ops);
  return st ? st : ops->emit(ctx, keys, n, fmt, path);
}

cf_status cf_codegen_ptx(cf_context *ctx, const cf_kernel_key *keys, int n, const char *sm,
                         char **ptx) {
  if (ptx) *ptx = NULL;
  if (!ctx) return CF_ERR_USAGE;
  const cf_codegen_ops *ops;
  cf_status st = ops_of(ctx, &ops);
  return st ? st : ops->ptx(ctx, keys, n, sm, ptx);
}

cf_status cf_codegen_use_target(cf_context *ctx, const cf_codegen_target *t) {
  if (!ctx) return CF_ERR_USAGE;
  pthread_mutex_lock(&ctx->codegen_lock);
  cf_kload *L = ctx->kload;
  pthread_mutex_unlock(&ctx->codegen_lock);
  if (L) {
    pthread_mutex_lock(&L->lock);
    int n = L->n;
    pthread_mutex_unlock(&L->lock);
    if (n)
      return cf_error(ctx, CF_ERR_USAGE, NULL, 0,
                      "codegen: the context has linked kernels already; set its target first");
  }
  const cf_codegen_ops *ops;
  cf_status st = ops_of(ctx, &ops);
  return st ? st : ops->use_target(ctx, t);
}
