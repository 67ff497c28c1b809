/* memory.c - what a run will hold in memory, what the machine can give,
 * and the refusal when the first exceeds the second.
 *
 * A run's memory is known before anything big is allocated: the plan fixes
 * every rank's arena, the graph fixes the inputs and outputs, and the
 * reference's live set follows the graph (reference.c). So `run`, the
 * benches and the embedding API compare that need with the memory the
 * process can still get, and refuse with the sizes instead of being killed
 * by the kernel's OOM killer half way (or failing a malloc with no word on
 * what it was for). The memory the process can get is the least of what
 * the kernel reports as available (MemAvailable, which counts reclaimable
 * cache) and what its cgroup still allows (limit minus usage, giving back
 * the inactive file cache the kernel would reclaim first, as the kubelet's
 * working set does); a caller's explicit limit replaces both.
 *
 * An address-space limit (RLIMIT_AS, `ulimit -v`) is a second, separate
 * bound: there a run also maps what it never touches, above all OpenBLAS's
 * buffers (BLAS_BUFFER_BYTES each, one per thread that runs a GEMM, kept
 * for the process's life), whose mmap OpenBLAS retries forever when it
 * fails; so the run's bytes plus what it reserves (cf_plan_reserved_bytes)
 * must fit in what the limit leaves, whatever the explicit limit says.
 */
#define _GNU_SOURCE
#include "plan.h"

#include <cblas.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

/* OpenBLAS's per-thread GEMM buffer on x86-64 (BUFFER_SIZE, 32 << 22 in
 * 0.3.21: the 128 MiB mmap a stuck run retries). */
#define BLAS_BUFFER_BYTES ((int64_t)128 << 20)
/* glibc's malloc arena of a thread that allocates (HEAP_MAX_SIZE, 64-bit;
 * threads share arenas beyond 8 per core, so this is an upper bound) */
#define MALLOC_ARENA_BYTES ((int64_t)64 << 20)

/* The first integer in file path after prefix at the start of a line (the
 * whole file when prefix is NULL); -1 when absent or "max". */
static int64_t read_field(const char *path, const char *prefix) {
  FILE *f = fopen(path, "r");
  if (!f) return -1;
  char line[256];
  int64_t v = -1;
  size_t k = prefix ? strlen(prefix) : 0;
  while (v < 0 && fgets(line, sizeof line, f)) {
    if (prefix && strncmp(line, prefix, k) != 0) continue;
    char *e, *s = line + k;
    long long x = strtoll(s, &e, 10);
    if (e != s && x >= 0) v = x;
    if (!prefix) break;
  }
  fclose(f);
  return v;
}

/* What the cgroup at dir (and each cgroup above it) still allows: limit -
 * usage + inactive file pages; -1 when no limit is set. v2 names the files
 * memory.max / memory.current, v1 memory.limit_in_bytes /
 * memory.usage_in_bytes. */
static int64_t cgroup_room(const char *root, const char *path, bool v2) {
  char dir[1024], file[1100];
  int64_t best = -1;
  snprintf(dir, sizeof dir, "%s%s", root, strcmp(path, "/") == 0 ? "" : path);
  for (;;) {
    snprintf(file, sizeof file, "%s/%s", dir, v2 ? "memory.max" : "memory.limit_in_bytes");
    int64_t limit = read_field(file, NULL);
    snprintf(file, sizeof file, "%s/%s", dir, v2 ? "memory.current" : "memory.usage_in_bytes");
    int64_t usage = read_field(file, NULL);
    /* v1 writes an unset limit as a huge page-rounded number */
    if (limit > 0 && limit < ((int64_t)1 << 60) && usage >= 0) {
      snprintf(file, sizeof file, "%s/memory.stat", dir);
      int64_t inactive = read_field(file, v2 ? "inactive_file " : "total_inactive_file ");
      int64_t room = limit - usage + (inactive > 0 ? inactive : 0);
      if (room < 0) room = 0;
      if (room > limit) room = limit;
      if (best < 0 || room < best) best = room;
    }
    if (strlen(dir) <= strlen(root)) break;
    char *slash = strrchr(dir + strlen(root), '/');
    if (!slash) break;
    *slash = 0;
  }
  return best;
}

/* The cgroup limit's room for this process: its own cgroup from
 * /proc/self/cgroup (v2 "0::PATH", v1 "N:...memory...:PATH"), under the
 * usual mount points. */
static int64_t cgroup_available(void) {
  FILE *f = fopen("/proc/self/cgroup", "r");
  if (!f) return -1;
  char line[1024], v2_path[1024] = "", v1_path[1024] = "";
  while (fgets(line, sizeof line, f)) {
    line[strcspn(line, "\n")] = 0;
    char *c1 = strchr(line, ':'), *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
    if (!c2) continue;
    *c2 = 0;
    if (strcmp(line, "0") == 0 && c1[1] == 0) snprintf(v2_path, sizeof v2_path, "%s", c2 + 1);
    for (char *t = strtok(c1 + 1, ","); t; t = strtok(NULL, ","))
      if (strcmp(t, "memory") == 0) snprintf(v1_path, sizeof v1_path, "%s", c2 + 1);
  }
  fclose(f);
  int64_t best = -1;
  if (v1_path[0]) best = cgroup_room("/sys/fs/cgroup/memory", v1_path, false);
  if (v2_path[0]) {
    int64_t r = cgroup_room("/sys/fs/cgroup", v2_path, true);
    if (r < 0) r = cgroup_room("/sys/fs/cgroup/unified", v2_path, true);
    if (r >= 0 && (best < 0 || r < best)) best = r;
  }
  return best;
}

int64_t cf_mem_available(const char **source) {
  int64_t kib = read_field("/proc/meminfo", "MemAvailable:");
  int64_t avail = kib >= 0 ? kib * 1024 : -1;
  const char *src = "MemAvailable";
  int64_t cg = cgroup_available();
  if (cg >= 0 && (avail < 0 || cg < avail)) {
    avail = cg;
    src = "the cgroup's memory limit";
  }
  if (source) *source = avail >= 0 ? src : NULL;
  return avail;
}

/* What RLIMIT_AS still leaves this process: the soft limit less what is
 * mapped now (/proc/self/statm's size); -1 when there is no limit. *limit
 * gets the limit. */
static int64_t address_room(int64_t *limit) {
  struct rlimit rl;
  if (getrlimit(RLIMIT_AS, &rl) != 0 || rl.rlim_cur == RLIM_INFINITY) return -1;
  *limit = rl.rlim_cur > (rlim_t)INT64_MAX ? INT64_MAX : (int64_t)rl.rlim_cur;
  int64_t pages = read_field("/proc/self/statm", NULL);
  long page = sysconf(_SC_PAGESIZE);
  int64_t used = pages > 0 && page > 0 ? pages * page : 0;
  return *limit > used ? *limit - used : 0;
}

int64_t cf_plan_reserved_bytes(const cf_plan *p, int ranks) {
  size_t stack = 8 << 20;
  pthread_attr_t a;
  if (pthread_getattr_default_np(&a) == 0) {
    pthread_attr_getstacksize(&a, &stack);
    pthread_attr_destroy(&a);
  }
  /* each rank: its thread and its communication thread, each with a stack
   * and (both allocate) a malloc arena */
  int64_t b = (int64_t)ranks * 2 * ((int64_t)stack + MALLOC_ARENA_BYTES);
  bool blas = false;
  for (int i = 0; i < p->g->n_nodes && !blas && cf_device_is_host(p->dev); i++) {
    cf_op op = p->g->nodes[i].op;
    blas = op == CF_OP_MATMUL || op == CF_OP_QUANTMATMUL ||
           cf_op_table[op].cat == CF_CAT_FUSED_MATMUL;
  }
  /* OpenBLAS maps its own threads' buffers when it starts (counted in what
   * is mapped now), then one for each thread that calls a GEMM, and with
   * several callers at once a further one per thread of a call (measured
   * with OpenBLAS 0.3.21: a 1024^3 MatMul needed 193 MiB more than an Add of
   * the same tensors on one rank, 1 or 2 BLAS threads; 645 MiB on four
   * ranks of one thread, 770 MiB of two) */
  int threads = cf_exec_blas_threads(ranks);
  if (blas) b += BLAS_BUFFER_BYTES * (ranks + (ranks > 1 && threads > 1 ? threads - 1 : 0));
  return b;
}

int64_t cf_plan_run_bytes(const cf_plan *p, bool caller_outputs) {
  int64_t b = cf_device_is_host(p->dev) ? p->arena_bytes : 0;
  if (!caller_outputs) b += cf_graph_io_bytes(p->g, CF_OP_OUTPUT);
  return b;
}

int64_t cf_graph_io_bytes(const cf_graph *g, cf_op op) {
  int64_t sum = 0, b;
  for (int i = 0; i < g->n_nodes; i++) {
    const cf_node *n = &g->nodes[i];
    if (n->op != op) continue;
    const cf_value *v =
        op == CF_OP_OUTPUT ? &g->nodes[n->in[0].node].out[n->in[0].port] : &n->out[0];
    if (cf_value_bytes(v, &b)) sum += b;
  }
  return sum;
}

cf_status cf_mem_check(cf_context *ctx, const cf_mem_need *need, int64_t limit,
                       const char *limit_what) {
  const char *source = NULL;
  if (limit <= 0) limit = cf_mem_available(&source);
  if (limit < 0) return CF_OK; /* nothing known: nothing to refuse */
  int units = need->processes > 0 ? need->processes : need->ranks;
  int64_t each = need->processes > 0 ? need->per_rank + need->shared : need->per_rank;
  int64_t total = need->processes > 0 ? each * need->processes : each * need->ranks + need->shared;
  int64_t as_limit = 0, as_room = address_room(&as_limit);
  if (total <= limit && (as_room < 0 || total + need->reserved <= as_room)) return CF_OK;
  char t[32], e[32], s[32], l[32], who[96], detail[192] = "", room[160];
  cf_bytes_text(total, t, sizeof t);
  cf_bytes_text(each, e, sizeof e);
  cf_bytes_text(need->shared, s, sizeof s);
  cf_bytes_text(limit, l, sizeof l);
  bool shared = need->shared > 0 && need->shared_what;
  bool mpi = need->processes > 0;
  if (need->who)
    snprintf(who, sizeof who, "%s", need->who);
  else if (mpi && units > 1)
    snprintf(who, sizeof who, "rank %d: %d processes on this host need", need->rank, units);
  else if (mpi)
    snprintf(who, sizeof who, "rank %d needs", need->rank);
  else if (units == 1 && need->world > 1)
    snprintf(who, sizeof who, "each of its %d ranks needs", need->world);
  else
    snprintf(who, sizeof who, "%d rank%s need%s", units, units == 1 ? "" : "s",
             units == 1 ? "s" : "");
  /* the breakdown: each unit's share, and what is held once besides */
  if (total <= limit) { /* the address space is what does not fit */
    char r[32];
    cf_bytes_text(total + need->reserved, t, sizeof t);
    cf_bytes_text(need->reserved, r, sizeof r);
    cf_bytes_text(as_room, e, sizeof e);
    cf_bytes_text(as_limit, l, sizeof l);
    return cf_error(ctx, CF_ERR_INVALID, need->file, 0,
                    "%s %s of address space (%s of it reserved: thread stacks, malloc arenas and "
                    "any BLAS buffers), %s left under the address-space limit (ulimit -v: %s); "
                    "raise the limit%s%s",
                    who, t, r, e, l, need->hint ? ", or " : "", need->hint ? need->hint : "");
  }
  if (need->who)
    ;
  else if (units > 1 && shared)
    snprintf(detail, sizeof detail, " (%s %s, %s %s %s)", e, mpi ? "each" : "per rank", s,
             mpi ? "of it for" : "for", need->shared_what);
  else if (units > 1)
    snprintf(detail, sizeof detail, " (%s %s)", e, mpi ? "each" : "per rank");
  else if (shared)
    snprintf(detail, sizeof detail, " (%s of it for %s)", s, need->shared_what);
  if (source)
    snprintf(room, sizeof room, "%s available (%s)", l, source);
  else
    snprintf(room, sizeof room, "%s allowed by %s", l,
             limit_what ? limit_what : "the memory limit");
  return cf_error(ctx, CF_ERR_INVALID, need->file, 0, "%s %s%s, %s%s%s", who, t, detail, room,
                  need->hint ? "; " : "", need->hint ? need->hint : "");
}
