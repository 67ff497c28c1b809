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
 */
#include "plan.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
  if (total <= limit) return CF_OK;
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
