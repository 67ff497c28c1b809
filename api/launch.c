/* launch.c - cf_launcher_find: who started this process, as the shm world
 * reads it (transports/shm_env.c's table of launchers and their variables,
 * the one place that knows them; Python's collfuse.distributed asks here);
 * and the caller's memory the shm world reads in place (cf_shm_register,
 * cf_shm_memory: transports/shm_regions.c, shm_pages.c).
 */
#include "../executor/transports/transports.h"
#include "api.h"

#include <errno.h>
#include <limits.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* A whole decimal number that fits an int into *out. */
static bool whole(const char *s, int *out) {
  if (!s || !*s) return false;
  char *e;
  errno = 0;
  long x = strtol(s, &e, 10);
  if (*e || errno || x < INT_MIN || x > INT_MAX) return false;
  *out = (int)x;
  return true;
}

cf_status cf_launcher_find(cf_context *ctx, const char *const *env, const char **name, int *rank,
                           int *size, int *local, int *mpi) {
  cf_launcher_seen l;
  cf_launcher_see(env, &l);
  *name = NULL;
  *rank = *size = *local = -1;
  *mpi = l.mpi;
  if (!l.name) return CF_OK;
  int r, n;
  if (!whole(l.rank, &r) || !whole(l.size, &n))
    return cf_error(ctx, CF_ERR_USAGE, NULL, 0, "%s=%s, %s=%s are not integers (set by %s)",
                    l.rank_var, l.rank, l.size_var, l.size, l.name);
  int k;
  *name = l.name;
  *rank = r;
  *size = n;
  *local = whole(l.local, &k) && k > 0 ? k : -1;
  return CF_OK;
}

cf_status cf_shm_register(cf_context *ctx, void *base, size_t bytes, int fd) {
  return cf_shm_regions_add(ctx, base, bytes, fd);
}

cf_status cf_shm_unregister(cf_context *ctx, void *base) { return cf_shm_regions_remove(ctx, base); }

cf_status cf_shm_memory(cf_context *ctx, size_t bytes, int *fd) {
  *fd = -1;
  if (!bytes) return cf_error(ctx, CF_ERR_USAGE, NULL, 0, "cf_shm_memory: 0 bytes asked for");
  if (bytes > (size_t)INT64_MAX)
    return cf_error(ctx, CF_ERR_USAGE, NULL, 0, "cf_shm_memory: %zu bytes are more than a file holds",
                    bytes);
  int got = cf_shm_pages_make(bytes, "region");
  if (got < 0)
    return cf_error(ctx, CF_ERR_NO_MEMORY, NULL, 0, "cf_shm_memory: no file of %zu bytes of shared memory: %s",
                    bytes, strerror(errno));
  *fd = got;
  return CF_OK;
}
