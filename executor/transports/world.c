/* transports/world.c - the world slots, wrapped (STYLE: callers never call
 * a slot directly). How ranks come to exist is the world's business
 * (threads.c, mpi.c); the executor, the API and the tools only ask a world
 * for its endpoints.
 */
#define _GNU_SOURCE
#include "transports.h"
#include "../backends/backends.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

cf_status cf_world_create(cf_context *ctx, const cf_world_ops *ops, int size, double timeout_s,
                          cf_world **out) {
  return ops->create(ctx, size, timeout_s, out);
}

cf_comm *cf_world_comm(cf_world *w, int rank) {
  return w && rank >= w->first && rank < w->first + w->local ? w->ops->comm(w, rank) : NULL;
}

void cf_world_rank_left(cf_world *w, int rank) {
  if (w && w->ops->rank_left) w->ops->rank_left(w, rank);
}

void cf_world_rank_thread(cf_world *w, int rank, int lane) {
  if (w && w->ops->rank_thread) w->ops->rank_thread(w, rank, lane);
}

void cf_world_destroy(cf_world *w, int exit_code) {
  if (w) w->ops->destroy(w, exit_code);
}

int cf_world_host_processes(const cf_world *w) {
  return w && w->ops->host_processes ? w->ops->host_processes(w) : 1;
}

const char *cf_world_host(const cf_world *w) {
  return w && w->ops->host ? w->ops->host(w) : "";
}

cf_algo_policy cf_world_auto(const cf_world *w) {
  return w && w->ops->auto_policy ? (cf_algo_policy)w->ops->auto_policy(w) : CF_POLICY_AUTO;
}

cf_status cf_world_max(cf_world *w, double *v, int n) {
  return w && w->ops->max ? w->ops->max(w, v, n) : CF_OK;
}

void cf_world_abort(cf_world *w, const char *text) {
  if (w && w->ops->abort) w->ops->abort(w, text);
}

cf_status cf_world_native_groups(cf_world *w, const cf_world_group *groups, int n) {
  return w && w->ops->native_groups ? w->ops->native_groups(w, groups, n) : CF_OK;
}

void *cf_world_alloc(cf_world *w, cf_device *dev, size_t bytes) {
  if (w && w->ops->alloc && cf_device_is_host(dev)) return w->ops->alloc(w, bytes);
  return dev->ops->alloc(dev, bytes);
}

void cf_world_free(cf_world *w, cf_device *dev, void *p) {
  if (!p) return;
  if (w && w->ops->free && w->ops->free(w, p)) return;
  dev->ops->free(dev, p);
}

bool cf_world_gives_memory(const cf_world *w) { return w && w->ops->alloc; }

bool cf_world_shares(const cf_world *w, const void *p, size_t bytes) {
  return w && w->ops->shares && w->ops->shares(w, p, bytes);
}

static uint64_t mix(uint64_t h, uint64_t v) {
  h = (h ^ v) * UINT64_C(0xff51afd7ed558ccd);
  return h ^ (h >> 33);
}

/* Equal keys are taken as equal descriptors; a chance collision of two
 * different ones is 2^-64. */
uint64_t cf_coll_desc_key(const cf_coll_desc *d) {
  if (!d) return 0;
  uint64_t g = cf_hash_str(d->group ? d->group : ""); /* the group's name */
  uint64_t h = mix(UINT64_C(0x9e3779b97f4a7c15), (uint64_t)d->seq);
  h = mix(h, (uint64_t)d->count);
  h = mix(h, (uint64_t)(uint32_t)d->op | (uint64_t)(uint32_t)d->dtype << 32);
  h = mix(h, (uint64_t)(uint32_t)d->red | (uint64_t)(uint32_t)d->root << 32);
  h = mix(h, (uint64_t)(uint32_t)d->layout | (uint64_t)(uint32_t)d->algo << 32);
  h = mix(h, (uint64_t)d->segment);
  h = mix(h, (uint64_t)(uint32_t)d->chunks);
  h = mix(h, g);
  return h ? h : 1;
}

int cf_cpu_count(void) {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) >= 1) return CPU_COUNT(&set);
  long n = sysconf(_SC_NPROCESSORS_ONLN);
  return n >= 1 ? (int)n : 1;
}

int *cf_bind_cpus(int size, int *lanes) {
  const char *env = cf_env(CF_ENV_BIND);
  cpu_set_t set;
  if (size < 2 || (env && !strcmp(env, "none")) || sched_getaffinity(0, sizeof set, &set) != 0 ||
      CPU_COUNT(&set) < 1)
    return NULL;
  *lanes = CPU_COUNT(&set) >= 2 * size ? 2 : 1;
  int n = size * *lanes, *cpus = malloc(sizeof *cpus * (size_t)n);
  for (int k = 0; cpus && k < n;) /* round robin when oversubscribed */
    for (int c = 0; c < CPU_SETSIZE && k < n; c++)
      if (CPU_ISSET(c, &set)) cpus[k++] = c;
  return cpus;
}

void cf_bind_thread(const int *cpus, int lanes, int rank, int lane) {
  if (!cpus || rank < 0 || lane < 0 || lane > 1) return;
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpus[lanes == 2 ? 2 * rank + lane : rank], &set);
  pthread_setaffinity_np(pthread_self(), sizeof set, &set); /* refused: stays unbound */
}

/* The next link of the chain of waits after rank r (-1: none). */
static int waits_for(const cf_vital *v, int size, int r) {
  int q = atomic_load_explicit(&v[r].waits_for, memory_order_relaxed) - 1;
  return q >= 0 && q < size ? q : -1;
}

uint64_t cf_chain_pulse(const cf_vital *v, int size, int me, int peer) {
  uint64_t h = 0;
  for (int r = peer, k = 0; r >= 0 && r != me && k < size; r = waits_for(v, size, r), k++)
    h = (h ^ ((uint64_t)r << 56 | atomic_load_explicit(&v[r].beat, memory_order_relaxed))) *
        UINT64_C(0x100000001b3); /* FNV-1a's prime over (rank, beats) */
  return h;
}

void cf_wait_timeout_text(char *text, size_t len, int me, double timeout_s, const char *verb,
                          int peer, const cf_coll_desc *d, int size, const cf_vital *v,
                          bool (*left)(void *, int), void *user) {
  char gone[160] = "", chain[160] = "";
  /* name the ranks that have already left the run: the likely culprits */
  size_t g = 0;
  for (int r = 0; r < size && g + 16 < sizeof gone; r++)
    if (left(user, r))
      g += (size_t)snprintf(gone + g, sizeof gone - g, "%s%d", g ? ", " : "; rank(s) that stopped: ", r);
  /* and where the peer's own wait leads: the silent rank is at its end */
  size_t c = 0;
  for (int r = peer, k = 0, q; v && r != me && k < size && c + 32 < sizeof chain; r = q, k++) {
    if ((q = waits_for(v, size, r)) < 0) break;
    c += (size_t)snprintf(chain + c, sizeof chain - c,
                          c ? ", rank %d for rank %d" : "; rank %d waits for rank %d", r, q);
  }
  if (d)
    snprintf(
        text, len,
        "rank %d timed out after %g s waiting for %s rank %d in %s '%s' (#%lld of group %s)%s%s",
        me, timeout_s, verb, peer, cf_op_table[d->op].name, d->node ? d->node : "?",
        (long long)d->seq, d->group, chain, gone);
  else
    snprintf(text, len, "rank %d timed out after %g s waiting for %s rank %d%s%s", me, timeout_s,
             verb, peer, chain, gone);
}

_Thread_local bool cf_spin_brief;

bool cf_spin_ge(_Atomic uint64_t *a, uint64_t target, int spin, cf_spin_mode mode) {
  bool brief = cf_spin_brief && spin > CF_SPIN_BRIEF;
  if (brief) spin = CF_SPIN_BRIEF;
  for (int i = 0; i < spin; i++) {
    if (atomic_load_explicit(a, memory_order_acquire) >= target) return true;
    bool yield = mode == CF_SPIN_YIELD || (mode == CF_SPIN_CORE && i >= 256 && !(i & 63));
    if (brief || !yield)
      __builtin_ia32_pause();
    else
      sched_yield();
  }
  return atomic_load_explicit(a, memory_order_acquire) >= target;
}

static void comm_beat(void *c) {
  cf_comm *comm = c;
  comm->ops->beat(comm);
}

cf_pulse cf_comm_pulse(cf_comm *c) {
  return c && c->ops->beat ? (cf_pulse){comm_beat, c} : (cf_pulse){NULL, NULL};
}

void cf_patience_start(cf_patience *p, uint64_t beat, double now) {
  p->seen = beat;
  p->since = now;
}

double cf_patience_left(cf_patience *p, uint64_t beat, double now, double timeout_s) {
  if (beat != p->seen) { /* the peer works: the silence starts again */
    p->seen = beat;
    p->since = now;
  }
  return p->since + timeout_s - now;
}
