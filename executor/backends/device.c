/* backends/device.c - the optional slots of cf_device_ops, wrapped.
 *
 * STYLE: callers never call an optional slot directly. Each wrapper here
 * calls the slot when the device has it and otherwise does what the CPU
 * device means by it: buffers are host memory, so an upload is a memcpy,
 * compute is cf_compute_run on the buffers themselves, and time is the
 * host's clock. That keeps the executor's CPU path exactly what it was.
 */
#include "../host.h"
#include "backends.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

bool cf_device_is_host(const cf_device *d) { return !d || !d->ops->upload; }

/* One whole-number sysfs file (a cache index's level) or size ("32768K"):
 * its value in bytes, or -1. */
static int64_t sysfs_num(const char *dir, const char *file) {
  char path[512], buf[64];
  if (snprintf(path, sizeof path, "%s/%s", dir, file) >= (int)sizeof path) return -1;
  FILE *f = fopen(path, "r");
  if (!f) return -1;
  size_t len = fread(buf, 1, sizeof buf - 1, f);
  fclose(f);
  buf[len] = '\0';
  char *end;
  long long v = strtoll(buf, &end, 10);
  if (end == buf || v < 0 || v > (INT64_MAX >> 30)) return -1;
  int shift = *end == 'K' ? 10 : *end == 'M' ? 20 : *end == 'G' ? 30 : 0;
  end += shift != 0;
  return *end == '\0' || *end == '\n' ? (int64_t)v << shift : -1;
}

int64_t cf_llc_bytes_at(const char *cache_dir) {
  int64_t best = -1, best_level = 0;
  for (int i = 0; i < 16; i++) {
    char dir[480];
    if (snprintf(dir, sizeof dir, "%s/index%d", cache_dir, i) >= (int)sizeof dir) break;
    int64_t level = sysfs_num(dir, "level"), size = sysfs_num(dir, "size");
    if (level < 0) break; /* the indices are numbered from 0 without gaps */
    if (size > 0 && level > best_level) best = size, best_level = level;
  }
  return best;
}

/* The last-level cache: the kernel's figure for cpu0 (sysfs: the size of
 * the one instance that core shares), else sysconf's L3, else L2 (glibc
 * reads CPUID; 0 or -1 where it cannot tell), else 32 MiB. The kernel's
 * first: on the 2-core AMD EPYC VM glibc says 320 MiB (the host's, by its
 * look) where the kernel and lscpu say 32 MiB, and the streaming stores'
 * crossover lay at 32 MiB (executor.md, "Streaming stores"). */
static int64_t llc_bytes(void) {
  int64_t sys = cf_llc_bytes_at("/sys/devices/system/cpu/cpu0/cache");
  if (sys > 0) return sys;
#ifdef _SC_LEVEL3_CACHE_SIZE
  long l3 = sysconf(_SC_LEVEL3_CACHE_SIZE);
  if (l3 > 0) return l3;
#endif
#ifdef _SC_LEVEL2_CACHE_SIZE
  long l2 = sysconf(_SC_LEVEL2_CACHE_SIZE);
  if (l2 > 0) return l2;
#endif
  return (int64_t)32 << 20;
}

int64_t cf_stream_min_bytes(void) {
  const char *env = cf_env(CF_ENV_STREAM_MIN);
  if (env && *env) {
    if (!strcmp(env, "off")) return -1;
    char *end;
    long long v = strtoll(env, &end, 10);
    int shift = *end == 'K' ? 10 : *end == 'M' ? 20 : *end == 'G' ? 30 : 0;
    if (v >= 0 && end != env && (shift ? end[1] == '\0' : *end == '\0'))
      return v > (INT64_MAX >> shift) ? INT64_MAX : (int64_t)v << shift;
  }
  static _Atomic int64_t llc; /* sysconf once */
  int64_t c = llc;
  if (!c) llc = c = llc_bytes();
  return c + 1; /* a working set larger than the cache */
}

bool cf_streams(int64_t working_set) {
  int64_t min = cf_stream_min_bytes();
  return min >= 0 && working_set >= min;
}

void cf_device_copy_stream(cf_device *d, void *dst, const void *src, size_t bytes) {
  (d->ops->copy_stream ? d->ops->copy_stream : d->ops->copy)(d, dst, src, bytes);
}

cf_status cf_device_view(cf_device *d, cf_context *ctx, int rank, int lane, cf_device **out) {
  *out = d;
  if (!d || !d->ops->view) return CF_OK;
  return d->ops->view(d, ctx, rank, lane, out);
}

cf_status cf_device_upload(cf_device *d, void *dst, const void *src, size_t bytes) {
  if (d && d->ops->upload) return d->ops->upload(d, dst, src, bytes);
  if (bytes && dst != src) memcpy(dst, src, bytes);
  return CF_OK;
}

cf_status cf_device_download(cf_device *d, void *dst, const void *src, size_t bytes) {
  if (d && d->ops->download) return d->ops->download(d, dst, src, bytes);
  if (bytes && dst != src) memcpy(dst, src, bytes);
  return CF_OK;
}

cf_status cf_device_compute(cf_device *d, cf_context *ctx, const cf_graph *g, const cf_node *n,
                            const cf_tensor *in, cf_tensor *out, int rank, uint64_t seed, unsigned flags) {
  if (d && d->ops->compute) return d->ops->compute(d, ctx, g, n, in, out, rank, seed, flags);
  return cf_compute_run(ctx, g, n, in, out, rank, seed, flags);
}

cf_status cf_device_product(cf_device *d, cf_context *ctx, const cf_graph *g, const cf_node *n,
                            const cf_tensor *x1, const cf_tensor *x2, const cf_tensor *x1_scale,
                            const cf_tensor *x2_scale, const cf_tensor *bias, cf_tensor *out,
                            unsigned flags) {
  if (d && d->ops->product) return d->ops->product(d, ctx, g, n, x1, x2, x1_scale, x2_scale, bias, out, flags);
  return cf_compute_product(ctx, g, n, x1, x2, x1_scale, x2_scale, bias, out, flags);
}

cf_status cf_device_error(cf_device *d, cf_context *ctx) {
  if (d && d->ops->error) return d->ops->error(d, ctx);
  return CF_OK;
}

cf_status cf_device_time(cf_device *d, void (*fn)(void *arg), void *arg, int reps, double *ms) {
  if (d && d->ops->time) return d->ops->time(d, fn, arg, reps, ms);
  if (reps < 1) reps = 1;
  double t0 = 1e3 * cf_now();
  for (int i = 0; i < reps; i++) fn(arg);
  *ms = (1e3 * cf_now() - t0) / reps;
  return CF_OK;
}
