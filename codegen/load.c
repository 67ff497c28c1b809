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

cf_status cf_codegen_kernel(cf_context *ctx, const cf_kernel_key *key, void **fn,
                            double *compile_ms) {
  if (fn) *fn = NULL;
  if (compile_ms) *compile_ms = 0;
  if (!ctx) return CF_ERR_USAGE;
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
  const cf_codegen_ops *ops;
  cf_status st = ops_of(ctx, &ops);
  return st ? st : ops->use_target(ctx, t);
}
