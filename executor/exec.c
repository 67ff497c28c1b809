/* exec.c - running a plan: one thread per rank, one communication thread
 * per rank for collectives that overlap compute.
 *
 * Each rank has its own arena (allocated and first touched by its own
 * thread), its own copy of the collective calls (pointers into its
 * arena), and its own context for error messages
 * (borrowing the main context's JIT, whose kernels the plan already
 * resolved). Before the first iteration the ranks exchange their plan
 * fingerprints; between iterations they meet at a barrier made of transport
 * messages, so a barrier honours the timeout and the abort flag like every
 * other wait. The first rank to fail sets the world's abort flag with its
 * message; the rest stop at their next wait and the run returns that
 * message with CF_ERR_RUNTIME (or the failing rank's own status). A wait
 * times out after --timeout of its peer's silence: a rank's thread beats
 * (cf_beat, through its endpoint's beat slot) while it works through a
 * long local phase (its inputs' fill and copies, its outputs' copies, a
 * first touch), so a peer still filling 4 GiB is waited for.
 */
#define _GNU_SOURCE
#include "../ir/trace.h"
#include "algorithms.h"
#include "plan.h"
#include "transports/transports.h"

#include <assert.h>
#include <cblas.h>
#include <pthread.h>
#include <semaphore.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct rank_run {
  cf_plan *p;
  cf_world *world;
  int rank;
  cf_context *ctx;
  cf_comm *comm;
  cf_device *dev, *cdev; /* p->dev's views for this rank: compute, collectives (own streams on CUDA) */
  char *arena;
  void **vptr;     /* value -> its buffer: arena + addr, or a caller's (cf_plan_binds) */
  cf_coll_call *calls;
  int32_t *algos;  /* check_algorithms' table, alive until the rank is freed (MPI may still send it) */
  const cf_inputs *in;
  cf_run_result *res;
  cf_status st;
  bool solo;       /* the only rank of this process (MPI): records its own times */
  bool kept;       /* the plan keeps it for the next run (opt.keep_rank: p->solo) */
  bool checked;    /* its fingerprints and algorithms matched the peers' (a kept rank's first run) */
  int64_t copies, copy_bytes; /* cf_run_result's, this rank's */
  char *ip_scratch;           /* world memory for calls given one buffer as in and out (in_place_calls) */
  size_t ip_bytes;
  /* communication thread: a FIFO of started collectives */
  pthread_t thread;
  bool has_thread;
  pthread_mutex_t lock;
  pthread_cond_t cond;
  const cf_coll_call **queue; /* ring of started calls */
  int64_t queue_cap;
  int64_t started, completed; /* tickets */
  int64_t *ticket;            /* coll -> its ticket this iteration */
  cf_status comm_st;
  bool stop;
  sem_t *ended; /* posted as rank_main's last act (join_ranks) */
  /* the supervisor's view (join_ranks): when the compute step now running
   * began (cf_now() in microseconds; 0: none; -1: given up, the thread must
   * touch nothing more) and which step it is */
  _Atomic int64_t busy_us;
  _Atomic int busy_step;
  cf_trace_lane *lane, *clane; /* trace.c: the rank thread's and the communication thread's; NULL
                                * when not tracing */
} rank_run;

static cf_status run_call(rank_run *r, const cf_coll_call *call) {
  if (call->me < 0) return CF_OK; /* not in this collective's group */
  cf_status st = cf_coll_run(r->comm, r->cdev, call);
  return st ? st : cf_device_error(r->cdev, r->ctx);
}

/* The trace event of collective call, run from t0 until now on lane l. */
static void trace_call(const rank_run *r, cf_trace_lane *l, const cf_coll_call *call, int64_t t0) {
  const cf_plan *p = r->p;
  /* a plan collective's own call, or a fused op's chunk (a copy) */
  uintptr_t at = (uintptr_t)call, lo = (uintptr_t)r->calls;
  int c = at >= lo && at < lo + (uintptr_t)p->n_colls * sizeof *call ? (int)((at - lo) / sizeof *call) : -1;
  const cf_pcoll *pc = c >= 0 ? &p->colls[c] : NULL;
  int algo = pc ? pc->algo : call->algo;
  cf_trace_record(l, &(cf_trace_ev){.t0 = t0, .t1 = cf_trace_clock(), .name = call->desc.node,
                                    .cat = "collective",
                                    .node = pc ? &p->g->nodes[pc->node] : NULL,
                                    .algo = algo >= 0 ? cf_algo_name(algo) : NULL,
                                    .bytes = call->desc.count * cf_dtype_size(call->desc.dtype),
                                    .arg_name = pc ? "coll" : NULL, .arg = c});
}

static void *comm_main(void *arg) {
  rank_run *r = arg;
  cf_world_rank_thread(r->world, r->rank, 1);
  cf_trace_here = r->clane;
  pthread_mutex_lock(&r->lock);
  for (;;) {
    while (!r->stop && r->completed == r->started) pthread_cond_wait(&r->cond, &r->lock);
    if (r->stop && r->completed == r->started) break;
    const cf_coll_call *call = r->queue[r->completed % r->queue_cap];
    cf_status prev = r->comm_st;
    pthread_mutex_unlock(&r->lock);
    cf_trace_here = r->clane; /* a kept rank's thread serves run after run, each its own trace */
    int64_t t0 = r->clane ? cf_trace_clock() : 0;
    cf_status st = prev ? prev : run_call(r, call);
    if (r->clane) trace_call(r, r->clane, call, t0);
    pthread_mutex_lock(&r->lock);
    if (st && !r->comm_st) r->comm_st = st;
    r->completed++;
    pthread_cond_broadcast(&r->cond);
  }
  pthread_mutex_unlock(&r->lock);
  return NULL;
}

/* Queue a call on the communication thread; its ticket. The queue holds
 * every collective of the plan plus a fused op's chunks in flight (at most
 * two per op: it waits for chunk i-2 before starting chunk i). */
static uint64_t start_call(void *impl, const cf_coll_call *call) {
  rank_run *r = impl;
  pthread_mutex_lock(&r->lock);
  r->queue[r->started % r->queue_cap] = call;
  uint64_t t = (uint64_t)++r->started;
  pthread_cond_broadcast(&r->cond);
  pthread_mutex_unlock(&r->lock);
  return t;
}

static cf_status wait_ticket(void *impl, uint64_t ticket) {
  rank_run *r = impl;
  pthread_mutex_lock(&r->lock);
  while ((uint64_t)r->completed < ticket) pthread_cond_wait(&r->cond, &r->lock);
  cf_status st = r->comm_st;
  pthread_mutex_unlock(&r->lock);
  return st;
}

/* A call on the rank thread itself, after what is in flight (a collective
 * with no compute before its WAIT, or a fused op of one chunk). */
static cf_status run_inline(void *impl, const cf_coll_call *call) {
  rank_run *r = impl;
  cf_status st = wait_ticket(r, (uint64_t)r->started);
  return st ? st : run_call(r, call);
}

/* Dissemination barrier over the transport (log2 n rounds). */
static cf_status barrier(rank_run *r) {
  int n = r->p->ranks, me = r->rank;
  /* a descriptor of its own, so a rank still in a collective says so */
  static const cf_coll_desc bar = {.op = CF_OP_INVALID, .red = -1, .root = -1, .layout = -1,
                                   .group = CF_WORLD_GROUP, .node = "<barrier>"};
  for (int d = 1; d < n; d <<= 1) {
    const void *p;
    cf_status st = r->comm->ops->send(r->comm, (me + d) % n, NULL, 0, &bar);
    if (!st) st = r->comm->ops->recv(r->comm, (me - d + n) % n, NULL, 0, &bar, &p);
    if (!st) st = r->comm->ops->release(r->comm, (me - d + n) % n);
    if (st) return st;
  }
  return r->comm->ops->send_wait(r->comm);
}

/* A disagreement found before the first iteration: every rank stops with text. */
static cf_status setup_mismatch(rank_run *r, const char *text) {
  r->comm->ops->abort(r->comm, text);
  return cf_error(r->ctx, CF_ERR_RUNTIME, NULL, 0, "%s", text);
}

/* The algorithm of every collective as this rank's plan resolved it (a
 * fused op: the rows of a full chunk and of the last), two per
 * collective. The ranks of an MPI job each resolve their own, from their
 * own options and profile; a rank that runs MPI's own collective never
 * reads the descriptors collfuse's messages carry (whose algo field names
 * every other disagreement), so the rows are compared before the first
 * iteration. */
static cf_status check_algorithms(rank_run *r) {
  const cf_plan *p = r->p;
  int n = p->ranks, me = r->rank;
  size_t bytes = sizeof(int32_t) * 2 * (size_t)p->n_colls;
  if (n < 2 || !bytes) return CF_OK;
  if (!r->algos) r->algos = malloc(bytes); /* a kept rank's: again */
  int32_t *mine = r->algos, *theirs = malloc(bytes);
  cf_status st = mine && theirs ? CF_OK : cf_error(r->ctx, CF_ERR_NO_MEMORY, NULL, 0, "out of memory");
  for (int c = 0; c < p->n_colls && !st; c++) {
    const cf_pcoll *pc = &p->colls[c];
    mine[2 * c] = pc->fused_mm ? pc->chunk_algo[0] : pc->algo;
    mine[2 * c + 1] = pc->fused_mm ? pc->chunk_algo[1] : pc->algo;
  }
  for (int i = 0; i < n && !st; i++)
    if (i != me) st = r->comm->ops->send(r->comm, i, mine, bytes, NULL);
  for (int i = 0; i < n && !st; i++) {
    if (i == me) continue;
    const void *data;
    if ((st = r->comm->ops->recv(r->comm, i, theirs, bytes, NULL, &data))) break;
    const int32_t *t = data;
    for (int k = 0; k < 2 * p->n_colls && !st; k++) {
      if (t[k] == mine[k]) continue;
      cf_coll_desc a = p->colls[k / 2].desc, b = a;
      a.algo = mine[k];
      b.algo = t[k];
      char text[768];
      cf_coll_desc_mismatch(&a, me, &b, i, text, sizeof text);
      st = setup_mismatch(r, text);
    }
    if (!st) st = r->comm->ops->release(r->comm, i);
  }
  if (!st) st = r->comm->ops->send_wait(r->comm);
  free(theirs);
  return st;
}

/* Whether every message of p's collectives carries its descriptor, which
 * the receiver checks (collfuse's own algorithms; not MPI's native
 * collectives, nor a fused op's chunks, which resolve their rows per
 * call): then a mismatch between the ranks' plans is caught at the first
 * message that differs, exit 3 naming both ranks, without the exchange
 * of fingerprints and algorithms before each run. */
static bool messages_checked(const cf_plan *p) {
  for (int c = 0; c < p->n_colls; c++) {
    const cf_pcoll *pc = &p->colls[c];
    if (pc->fused_mm || pc->algo < 0 || cf_algo_table[pc->algo].native) return false;
  }
  return true;
}

/* A kept rank's run after its first (opt.keep_rank, every message checked):
 * the ranks exchanged fingerprints and algorithms at the first run and
 * meet at no barrier since: each collective ends when no peer reads or
 * writes this rank's memory any more (send_wait), so the next run may copy
 * its inputs in at once, and one run is one iteration (nothing to time
 * together). */
static bool repeat_run(const rank_run *r) {
  return r->kept && r->checked && messages_checked(r->p) && r->p->opt.warmup + r->p->opt.iters == 1;
}

/* Every rank of c's world tells every peer the graph it runs (its
 * fingerprint) in a message with no descriptor, then reads theirs: a
 * fingerprint that differs fails the run on every rank naming both; a peer
 * that runs a collective meanwhile fails at the descriptor check. */
static cf_status exchange_fingerprints(cf_context *ctx, cf_comm *c, int me, int n,
                                       const char fingerprint[17]) {
  cf_status st = CF_OK;
  for (int i = 0; i < n && !st; i++)
    if (i != me) st = c->ops->send(c, i, fingerprint, 17, NULL);
  for (int i = 0; i < n && !st; i++) {
    if (i == me) continue;
    char theirs[17];
    const void *data;
    st = c->ops->recv(c, i, theirs, sizeof theirs, NULL, &data);
    if (st) break;
    if (memcmp(data, fingerprint, sizeof theirs) != 0) {
      char text[256];
      snprintf(text, sizeof text,
               "cross-rank mismatch: rank %d's graph has fingerprint %.16s but rank %d's has %.16s "
               "(the ranks compiled different collective sequences)",
               me, fingerprint, i, (const char *)data);
      c->ops->abort(c, text);
      st = cf_error(ctx, CF_ERR_RUNTIME, NULL, 0, "%s", text);
      break;
    }
    st = c->ops->release(c, i);
  }
  if (!st) st = c->ops->send_wait(c);
  return st;
}

static cf_status check_fingerprints(rank_run *r) {
  if (repeat_run(r)) return CF_OK;
  cf_status st = exchange_fingerprints(r->ctx, r->comm, r->rank, r->p->ranks, r->p->fingerprint);
  if (!st) st = check_algorithms(r);
  if (!st) r->checked = true;
  return st;
}

static cf_tensor tensor_of(rank_run *r, int v) {
  const cf_pvalue *pv = &r->p->vals[v];
  return (cf_tensor){.data = r->vptr[v], .dtype = pv->dtype, .shape = pv->shape, .count = pv->count};
}

static cf_status check_caller(rank_run *r, const cf_node *n, const char *what, const cf_tensor *t, int v) {
  const cf_pvalue *pv = &r->p->vals[v];
  if (t->dtype == pv->dtype && t->count == pv->count) return CF_OK;
  return cf_node_error(r->p->g, n, CF_ERR_INVALID, "%s data has %s x %lld, the graph wants %s x %lld", what,
                       cf_dtype_name(t->dtype), (long long)t->count, cf_dtype_name(pv->dtype),
                       (long long)pv->count);
}

/* The caller's whole bucket buffer 2 * c + io on this rank (cf_inputs.buckets), else NULL. */
/* The caller's bucket buffer bound to slot (2 * coll + io), or NULL. */
static char *caller_bucket(const rank_run *r, int slot) {
  const cf_inputs *in = r->in;
  if (slot < 0 || !in || !in->buckets || !cf_device_is_host(r->dev)) return NULL;
  return in->buckets[(size_t)r->rank * 2 * (size_t)r->p->n_colls + (size_t)slot];
}

/* Whether the rank runs in memory its world gives (the shm world: peers
 * read, and rsag writes, this rank's buffers in place, which only that
 * memory allows): caller buffers are then bound only where they lie in
 * memory the world shares (the caller registered it: cf_world_shares);
 * other caller buckets are mirrored in the arena (mirror_buckets) and
 * other inputs and outputs copied. */
static bool world_memory(const rank_run *r) {
  return cf_world_gives_memory(r->world) && cf_device_is_host(r->dev);
}

/* Whether a run may use the caller's host buffer p of bytes where it lies. */
static bool caller_usable(const rank_run *r, const void *p, size_t bytes) {
  return cf_device_is_host(r->dev) && (!world_memory(r) || cf_world_shares(r->world, p, bytes));
}

/* The buffer a run uses for slot: the caller's bucket, unless mirrored. */
static char *bucket_of(const rank_run *r, int slot) {
  char *bk = caller_bucket(r, slot);
  size_t bytes = bk ? (size_t)r->p->colls[slot / 2].bucket_bytes[slot % 2] : 0;
  return bk && caller_usable(r, bk, bytes) ? bk : NULL;
}

static void count_copy(rank_run *r, size_t bytes);

/* World memory: the caller's buckets into the arena's places for them
 * (in), or the arena's back into the caller's (out: inputs first, so that
 * an in-place bucket's results are what stays). */
static void mirror_buckets(rank_run *r, bool in) {
  const cf_plan *p = r->p;
  for (int io = 0; io < 2 && world_memory(r); io++)
    for (int c = 0; c < p->n_colls; c++) {
      const cf_pcoll *pc = &p->colls[c];
      char *bk = pc->fused_mm ? NULL : caller_bucket(r, 2 * c + io);
      size_t bytes = (size_t)pc->bucket_bytes[io];
      if (!bk || !bytes || (in && io == 1) || bucket_of(r, 2 * c + io)) continue;
      char *a = r->arena + (io ? pc->out_addr : pc->in_addr);
      memcpy(in ? a : bk, in ? bk : a, bytes);
      count_copy(r, bytes);
    }
}

static void count_copy(rank_run *r, size_t bytes) {
  r->copies++;
  r->copy_bytes += (int64_t)bytes;
}

/* Every value's buffer on this rank: its place in the arena, its place in
 * a bucket buffer the caller gave, or the caller's buffer where the plan
 * lets the run use it in place. */
static cf_status bind_values(rank_run *r) {
  const cf_plan *p = r->p;
  const cf_graph *g = p->g;
  const cf_inputs *in = r->in;
  bool host = cf_device_is_host(r->dev); /* caller buffers are host memory: a device copies */
  if (!r->vptr) r->vptr = malloc(sizeof *r->vptr * ((size_t)p->n_vals + 1)); /* a kept rank's: again */
  if (!r->vptr) return cf_error(r->ctx, CF_ERR_NO_MEMORY, NULL, 0, "out of memory");
  for (int c = 0; c < p->n_colls && p->opt.external_buckets; c++) /* the plan has no room for them */
    assert(!p->colls[c].bucket_bytes[0] || (bucket_of(r, 2 * c) && bucket_of(r, 2 * c + 1)));
  for (int v = 0; v < p->n_vals; v++) {
    char *bk = bucket_of(r, p->vals[v].bucket);
    r->vptr[v] = (bk ? bk + p->vals[v].boff : r->arena + p->vals[v].addr) +
                 cf_plan_value_shift(p, v, r->rank);
  }
  for (int i = 0, j = 0; i < g->n_nodes; i++) {
    const cf_node *n = &g->nodes[i];
    if (n->op == CF_OP_OUTPUT) {
      const cf_tensor *t = in && in->outputs ? &in->outputs[(size_t)r->rank * (size_t)r->res->n_outputs + (size_t)j] : NULL;
      int v = p->val_base[n->in[0].node] + n->in[0].port;
      j++;
      if (!t || !t->data) continue;
      cf_status st = check_caller(r, n, "output", t, v);
      if (st) return st;
      /* an in-place plan's later iterations would overwrite the first's outputs */
      bool later = p->overwrites_inputs && p->opt.warmup + p->opt.iters > 1;
      if (host && caller_usable(r, t->data, (size_t)p->vals[v].bytes) && cf_plan_binds(p, i) && !later)
        r->vptr[v] = t->data;
    } else if (n->op == CF_OP_INPUT && in && in->borrow && host && cf_plan_binds(p, i)) {
      for (int k = 0; k < in->n; k++)
        if (strcmp(in->names[k], n->name) == 0) {
          const cf_tensor *t = &in->data[(size_t)r->rank * (size_t)in->n + (size_t)k];
          cf_status st = check_caller(r, n, "input", t, p->val_base[i]);
          if (st) return st;
          if (caller_usable(r, t->data, (size_t)p->vals[p->val_base[i]].bytes))
            r->vptr[p->val_base[i]] = t->data; /* read only: Inputs are never written (but see in_place_calls) */
        }
    }
  }
  return CF_OK;
}

/* Bytes a long copy moves between two signs of life (cf_beat): 16 MiB,
 * milliseconds of work, so a peer waiting for this rank sees it move many
 * times a second (cf_fill_node beats as often). */
#define BEAT_BYTES ((size_t)16 << 20)

/* cf_fill_node into a value's buffer (on a device, through a host copy). */
static cf_status fill_value(rank_run *r, const cf_node *n, const cf_tensor *t) {
  if (cf_device_is_host(r->dev)) {
    cf_fill_node(n, t->data, t->dtype, t->count, r->p->opt.seed, r->rank);
    return CF_OK;
  }
  size_t bytes = (size_t)t->count * (size_t)cf_dtype_size(t->dtype);
  void *h = malloc(bytes ? bytes : 1);
  if (!h) {
    char b[32];
    return cf_error(r->ctx, CF_ERR_NO_MEMORY, r->p->g->file, 0,
                    "cannot allocate %s to fill '%s' on rank %d: out of memory",
                    cf_bytes_text((int64_t)bytes, b, sizeof b), n->name, r->rank);
  }
  cf_fill_node(n, h, t->dtype, t->count, r->p->opt.seed, r->rank);
  cf_status st = cf_device_upload(r->dev, t->data, h, bytes);
  free(h);
  cf_beat();
  return st;
}

/* cf_device_upload (up) or cf_device_download of bytes, a beat at every
 * BEAT_BYTES (a copy of GiBs first touches its destination). */
static cf_status copy_beating(rank_run *r, bool up, void *dst, const void *src, size_t bytes) {
  size_t at = 0;
  do {
    size_t k = bytes - at < BEAT_BYTES ? bytes - at : BEAT_BYTES;
    cf_status st = up ? cf_device_upload(r->dev, (char *)dst + at, (const char *)src + at, k)
                      : cf_device_download(r->dev, (char *)dst + at, (const char *)src + at, k);
    if (st) return st;
    cf_beat();
    at += k;
  } while (at < bytes);
  return CF_OK;
}

static cf_status fill_inputs(rank_run *r) {
  const cf_graph *g = r->p->g;
  for (int i = 0; i < g->n_nodes; i++) {
    const cf_node *n = &g->nodes[i];
    if (n->op != CF_OP_INPUT && n->op != CF_OP_CONSTANT) continue;
    cf_tensor t = tensor_of(r, r->p->val_base[i]);
    int k = -1;
    for (int j = 0; r->in && n->op == CF_OP_INPUT && j < r->in->n; j++)
      if (strcmp(r->in->names[j], n->name) == 0) k = j;
    if (k < 0 && caller_bucket(r, r->p->vals[r->p->val_base[i]].bucket)) continue; /* in the caller's bucket (or its mirror) */
    if (k < 0) {
      cf_status st = fill_value(r, n, &t);
      if (st) return st;
      continue;
    }
    const cf_tensor *src = &r->in->data[(size_t)r->rank * (size_t)r->in->n + (size_t)k];
    if (src->dtype != t.dtype || src->count != t.count)
      return cf_node_error(g, n, CF_ERR_INVALID, "input data has %s x %lld, the graph wants %s x %lld",
                           cf_dtype_name(src->dtype), (long long)src->count, cf_dtype_name(t.dtype),
                           (long long)t.count);
    if (t.data == src->data) continue;
    const cf_pvalue *pv = &r->p->vals[r->p->val_base[i]];
    char *bk = world_memory(r) ? caller_bucket(r, pv->bucket) : NULL;
    if (bk && src->data == bk + pv->boff) continue; /* its bucket's mirror has it */
    size_t bytes = (size_t)t.count * (size_t)cf_dtype_size(t.dtype);
    count_copy(r, bytes);
    cf_status st = copy_beating(r, true, t.data, src->data, bytes);
    if (st) return st;
  }
  return CF_OK;
}

static cf_status compute(rank_run *r, const cf_node *n, cf_tensor *tin, cf_tensor *tout) {
  const cf_plan *p = r->p;
  for (int j = 0; j < n->n_in; j++) tin[j] = tensor_of(r, p->val_base[n->in[j].node] + n->in[j].port);
  int node = (int)(n - p->g->nodes);
  for (int k = 0; k < n->n_out; k++) tout[k] = tensor_of(r, p->val_base[node] + k);
  return cf_device_compute(r->dev, r->ctx, p->g, n, tin, tout, r->rank, p->opt.seed,
                           p->opt.deterministic ? CF_COMPUTE_DETERMINISTIC : 0);
}

/* A compute step begins: the step join_ranks can give up on (BLAS watches
 * no deadline and cannot be interrupted). */
static void busy(rank_run *r, int s) {
  atomic_store(&r->busy_step, s);
  atomic_store(&r->busy_us, (int64_t)(cf_now() * 1e6) | 1);
}

/* ... and ends; a rank given up on meanwhile ends its thread here, touching
 * nothing else (what it holds was left to it). */
static void idle(rank_run *r) {
  if (atomic_exchange(&r->busy_us, 0) < 0) pthread_exit(NULL);
}

/* busy and idle for a fused op's products (cf_rank_io), in its step */
static void io_busy(void *impl) {
  rank_run *r = impl;
  busy(r, atomic_load(&r->busy_step));
}

static void io_idle(void *impl) { idle(impl); }

/* The trace event of step s, run from t0 until now (trace.c; the rank's lane). */
static void trace_step(rank_run *r, int s, int64_t t0) {
  const cf_plan *p = r->p;
  const cf_step *sp = &p->steps[s];
  if ((sp->kind == CF_STEP_START || sp->kind == CF_STEP_WAIT) && p->colls[sp->coll].inline_ok) {
    if (sp->kind == CF_STEP_START) trace_call(r, r->lane, &r->calls[sp->coll], t0); /* ran here */
    return; /* its WAIT had nothing to wait for */
  }
  static const char *const cat[] = {[CF_STEP_COMPUTE] = "compute", [CF_STEP_COPY] = "copy",
                                    [CF_STEP_START] = "start", [CF_STEP_WAIT] = "wait",
                                    [CF_STEP_FUSED] = "fused"};
  const cf_node *n = &p->g->nodes[sp->kind == CF_STEP_COMPUTE ? sp->node : p->colls[sp->coll].node];
  cf_trace_record(r->lane, &(cf_trace_ev){.t0 = t0, .t1 = cf_trace_clock(), .name = n->name,
                                          .cat = cat[sp->kind], .node = n,
                                          .bytes = sp->kind == CF_STEP_COPY ? sp->bytes : 0,
                                          .arg_name = sp->kind == CF_STEP_COMPUTE ? NULL : "coll",
                                          .arg = sp->coll});
}

static cf_status iteration(rank_run *r, cf_tensor *tin, cf_tensor *tout) {
  const cf_plan *p = r->p;
  for (int s = 0; s < p->n_steps; s++) {
    const cf_step *sp = &p->steps[s];
    cf_status st = CF_OK;
    const char *why;
    if (r->comm->ops->aborted(r->comm, &why)) return cf_error(r->ctx, CF_ERR_RUNTIME, NULL, 0, "%s", why);
    int64_t t0 = r->lane ? cf_trace_clock() : 0;
    switch (sp->kind) {
    case CF_STEP_COMPUTE:
      busy(r, s);
      st = compute(r, &p->g->nodes[sp->node], tin, tout);
      idle(r);
      break;
    case CF_STEP_COPY: {
      const cf_pcoll *pc = &p->colls[sp->coll];
      char *bk = bucket_of(r, 2 * sp->coll), *dst = bk ? bk + (sp->dst - pc->in_addr) : r->arena + sp->dst;
      count_copy(r, (size_t)sp->bytes);
      r->dev->ops->copy(r->dev, dst, r->vptr[sp->val], (size_t)sp->bytes);
      break;
    }
    case CF_STEP_START:
      if (p->colls[sp->coll].inline_ok) { /* after what is in flight, on this thread */
        st = run_inline(r, &r->calls[sp->coll]);
        r->ticket[sp->coll] = 0; /* its WAIT has nothing to wait for */
      } else {
        r->ticket[sp->coll] = (int64_t)start_call(r, &r->calls[sp->coll]);
      }
      break;
    case CF_STEP_WAIT: st = wait_ticket(r, (uint64_t)r->ticket[sp->coll]); break;
    case CF_STEP_FUSED: { /* its products are watched, not its collective waits */
      cf_rank_io io = {.ctx = r->ctx, .rank = r->rank, .arena = r->arena, .vptr = r->vptr, .dev = r->dev, .impl = r,
                       .start = start_call, .wait = wait_ticket, .run = run_inline,
                       .busy = io_busy, .idle = io_idle};
      atomic_store(&r->busy_step, s);
      st = cf_fused_matmul_run(p, sp->coll, &io, &r->calls[sp->coll]);
      break;
    }
    }
    if (r->lane) trace_step(r, s, t0);
    if (st) return st;
  }
  return cf_device_error(r->dev, r->ctx); /* the copies' */
}

static int max_ports(const cf_graph *g) {
  int m = 1;
  for (int i = 0; i < g->n_nodes; i++) {
    if (g->nodes[i].n_in > m) m = g->nodes[i].n_in;
    if (g->nodes[i].n_out > m) m = g->nodes[i].n_out;
  }
  return m;
}

static cf_status collect_outputs(rank_run *r);

/* World memory: a plain AllReduce whose input and output are one caller
 * buffer the world shares (cf_executable_run_rank's in-place collective,
 * collfuse.distributed's all_reduce on registered memory) runs in place
 * there, with no copy: its peers read the buffer that it writes, so it runs
 * as the plan's in-place calls do (algo_allreduce.c), with their scratch.
 * Every rank that gives one buffer decides so; a rank that gave two (or
 * unshared memory) runs out of place, and the first message between them
 * fails both with the descriptors' mismatch. */
static cf_status in_place_calls(rank_run *r) {
  const cf_plan *p = r->p;
  for (int c = 0; c < p->n_colls && world_memory(r); c++) {
    const cf_pcoll *pc = &p->colls[c];
    cf_coll_call *call = &r->calls[c];
    if (pc->desc.op != CF_OP_ALLREDUCE || pc->desc.in_place || pc->fused_mm || pc->in_val < 0 ||
        pc->out_val < 0 || call->me < 0 || call->in != call->out)
      continue;
    call->desc.in_place = true;
    size_t extra = 0;
    for (int a = 0; a < cf_algo_count; a++) {
      size_t x = cf_allreduce_in_place_scratch(&call->desc, call->n, a);
      if (x > extra) extra = x;
    }
    size_t need = (size_t)pc->scratch_bytes + extra;
    if (r->ip_bytes < need) {
      cf_world_free(r->world, r->dev, r->ip_scratch);
      r->ip_bytes = 0;
      r->ip_scratch = cf_world_alloc(r->world, r->dev, need);
      if (!r->ip_scratch) {
        char b[32];
        return cf_error(r->ctx, CF_ERR_NO_MEMORY, p->g->file, 0,
                        "cannot allocate %s of scratch for rank %d's in-place '%s': out of memory",
                        cf_bytes_text((int64_t)need, b, sizeof b), r->rank, p->g->nodes[pc->node].name);
      }
      r->ip_bytes = need;
    }
    call->scratch = r->ip_scratch;
    call->scratch_bytes = need;
  }
  return CF_OK;
}

static cf_status rank_body(rank_run *r, cf_tensor *tin, cf_tensor *tout) {
  cf_plan *p = r->p;
  cf_status st;
  int64_t t_in = r->lane ? cf_trace_clock() : 0;
  cf_phase_begin(r->ctx, "inputs", 0);
  if (!r->arena) /* a kept rank keeps its arena from run to run, as later iterations do */
    r->arena = cf_world_alloc(r->world, r->dev, (size_t)p->arena_bytes);
  if (!r->arena) {
    char b[32];
    return cf_error(r->ctx, CF_ERR_NO_MEMORY, p->g->file, 0,
                    "cannot allocate %s for rank %d's memory plan (its tensors, buckets and "
                    "scratch): out of memory",
                    cf_bytes_text(p->arena_bytes, b, sizeof b), r->rank);
  }
  if ((st = bind_values(r))) return st;
  for (int c = 0; c < p->n_colls; c++) {
    const cf_pcoll *pc = &p->colls[c];
    cf_coll_call *call = &r->calls[c];
    char *bin = pc->fused_mm ? NULL : bucket_of(r, 2 * c), *bout = pc->fused_mm ? NULL : bucket_of(r, 2 * c + 1);
    *call = (cf_coll_call){.desc = pc->desc, .ranks = pc->ranks, .n = pc->n, .me = -1,
                           .in = pc->in_val >= 0 ? r->vptr[pc->in_val] : bin ? bin : r->arena + pc->in_addr,
                           .out = pc->out_val >= 0 ? r->vptr[pc->out_val] : bout ? bout : r->arena + pc->out_addr,
                           .segs = pc->segs, .n_segs = pc->n_segs,
                           .a2a = pc->a2a, .n_a2a = pc->n_a2a, .pairs = pc->pairs,
                           .scratch = r->arena + pc->scratch_addr, .scratch_bytes = pc->scratch_bytes,
                           .algo = pc->algo, .deterministic = p->opt.deterministic,
                           /* between two runs of a call the rest of the step (other
                            * collectives, compute, inputs and outputs) passes through the
                            * cache too, which the plan does not model: as large */
                           .working_set = INT64_MAX};
    for (int i = 0; i < pc->n * pc->n_parts; i++)
      if (pc->ranks[i] == r->rank) { /* the part that holds this rank is its communicator */
        call->ranks = pc->ranks + i / pc->n * pc->n;
        call->me = i % pc->n;
      }
  }
  if ((st = in_place_calls(r))) return st;
  mirror_buckets(r, true);
  if ((st = fill_inputs(r))) return st;
  if (r->lane)
    cf_trace_record(r->lane, &(cf_trace_ev){.t0 = t_in, .t1 = cf_trace_clock(), .name = "inputs",
                                          .cat = "phase"});
  if ((st = check_fingerprints(r))) return st;
  int total = p->opt.warmup + p->opt.iters;
  cf_phase_begin(r->ctx, "iterations", total);
  bool repeat = repeat_run(r);
  for (int it = 0; it < total; it++) {
    if (!repeat && (st = barrier(r))) return st;
    double t0 = 1e3 * cf_now();
    int64_t ti = r->lane ? cf_trace_clock() : 0;
    st = iteration(r, tin, tout);
    if (r->lane)
      cf_trace_record(r->lane, &(cf_trace_ev){.t0 = ti, .t1 = cf_trace_clock(), .name = "iteration",
                                            .cat = "iteration", .arg_name = "iteration", .arg = it});
    if (st) return st;
    if (!repeat && (st = barrier(r))) return st;
    cf_phase_done(r->ctx, it + 1);
    if ((r->rank == 0 || r->solo) && it >= p->opt.warmup)
      r->res->time_ms[it - p->opt.warmup] = 1e3 * cf_now() - t0;
    /* an iteration after the first of a plan that reduces its Inputs in
     * place reduces the results of the one before (nccl-tests' in-place
     * mode: the same work each time): the run returns the first's */
    if ((it == 0 && p->overwrites_inputs) || (it == total - 1 && !p->overwrites_inputs)) {
      mirror_buckets(r, false);
      if ((st = collect_outputs(r))) return st;
    }
  }
  if (r->res->arenas) { /* the result keeps the arena its outputs point into */
    r->res->arenas[r->solo ? 0 : r->rank] = r->arena;
    r->arena = NULL;
  }
  return CF_OK;
}

bool cf_run_outputs_in_arena(const cf_plan *p) {
  return p->opt.outputs_in_arena && cf_device_is_host(p->dev) &&
         !(p->overwrites_inputs && p->opt.warmup + p->opt.iters > 1);
}

/* The outputs of this iteration, into the caller's buffers or new ones. */
static cf_status collect_outputs(rank_run *r) {
  const cf_plan *p = r->p;
  const cf_graph *g = p->g;
  cf_status st;
  int j = 0;
  for (int i = 0; i < g->n_nodes; i++) {
    const cf_node *n = &g->nodes[i];
    if (n->op != CF_OP_OUTPUT) continue;
    cf_tensor src = tensor_of(r, p->val_base[n->in[0].node] + n->in[0].port);
    size_t at = (size_t)r->rank * (size_t)r->res->n_outputs + (size_t)j++;
    cf_tensor *dst = &r->res->outputs[at];
    *dst = src;
    if (r->res->arenas && !(r->in && r->in->outputs)) continue; /* left where it is */
    size_t bytes = (size_t)src.count * (size_t)cf_dtype_size(src.dtype);
    if (r->in && r->in->outputs) { /* the caller's buffer, unless it was produced there */
      dst->data = r->in->outputs[at].data;
      if (!dst->data || dst->data == src.data) continue;
      count_copy(r, bytes);
      if ((st = copy_beating(r, false, dst->data, src.data, bytes))) return st;
      continue;
    }
    dst->data = malloc(bytes ? bytes : 1);
    if (!dst->data) {
      char b[32];
      return cf_error(r->ctx, CF_ERR_NO_MEMORY, g->file, 0,
                      "cannot allocate %s for rank %d's copy of output '%s': out of memory",
                      cf_bytes_text((int64_t)bytes, b, sizeof b), r->rank, n->name);
    }
    if ((st = copy_beating(r, false, dst->data, src.data, bytes))) return st;
  }
  return CF_OK;
}

/* One run of rank r on the calling thread; its status in r->st. */
static void rank_go(rank_run *r) {
  int ports = max_ports(r->p->g);
  cf_tensor *tin = calloc((size_t)ports, sizeof *tin), *tout = calloc((size_t)ports, sizeof *tout);
  if (!r->calls) r->calls = calloc((size_t)r->p->n_colls + 1, sizeof *r->calls); /* a kept rank's: again */
  if (!tin || !tout || !r->calls) {
    r->st = cf_error(r->ctx, CF_ERR_NO_MEMORY, NULL, 0, "out of memory");
  } else {
    r->st = rank_body(r, tin, tout);
  }
  if (r->st) {
    const char *why;
    if (!r->comm->ops->aborted(r->comm, &why)) r->comm->ops->abort(r->comm, cf_errmsg(r->ctx));
  }
  if (r->st) cf_world_rank_left(r->world, r->rank);
  free(tin);
  free(tout);
}

static void *rank_main(void *arg) {
  rank_run *r = arg;
  cf_world_rank_thread(r->world, r->rank, 0);
  cf_trace_here = r->lane;
  cf_pulse_here = cf_comm_pulse(r->comm); /* its long phases' signs of life reach its peers */
  rank_go(r);
  /* stop the communication thread (it finishes what was started) */
  pthread_mutex_lock(&r->lock);
  r->stop = true;
  pthread_cond_broadcast(&r->cond);
  pthread_mutex_unlock(&r->lock);
  if (r->ended) sem_post(r->ended);
  return NULL;
}

static cf_status rank_setup(rank_run *x, cf_context *ctx, cf_plan *p, int rank, const cf_inputs *in,
                            cf_run_result *res) {
  x->p = p;
  x->rank = rank;
  x->in = in;
  x->res = res;
  pthread_mutex_init(&x->lock, NULL);
  pthread_cond_init(&x->cond, NULL);
  x->queue_cap = p->n_colls + 2;
  x->queue = calloc((size_t)x->queue_cap, sizeof *x->queue);
  x->ticket = calloc((size_t)p->n_colls + 1, sizeof *x->ticket);
  cf_status st = cf_ctx_create(&x->ctx);
  if (st == CF_OK) {
    x->ctx->codegen = ctx->codegen; /* borrowed: kernels already resolved */
    x->ctx->codegen_free = NULL;
    x->ctx->codegen_ops = ctx->codegen_ops;
    x->ctx->kload = ctx->kload; /* borrowed too */
    x->ctx->kload_free = NULL;
    x->ctx->log_fn = ctx->log_fn;
    x->ctx->log_user = ctx->log_user;
    x->ctx->progress = rank == 0 ? ctx->progress : NULL; /* rank 0 reports the phases */
    x->ctx->trace = ctx->trace;
    x->lane = cf_trace_lane_of(ctx->trace, rank, 0);
    x->clane = cf_trace_lane_of(ctx->trace, rank, 1);
  }
  if (!x->queue || !x->ticket || st) return cf_error(ctx, CF_ERR_NO_MEMORY, NULL, 0, "out of memory");
  if ((st = cf_device_view(p->dev, x->ctx, rank, 0, &x->dev)) ||
      (st = cf_device_view(p->dev, x->ctx, rank, 1, &x->cdev)))
    return cf_error(ctx, st, NULL, 0, "%s", cf_errmsg(x->ctx));
  return CF_OK;
}

static void rank_free(rank_run *x) {
  if (x->arena) cf_world_free(x->world, x->dev, x->arena);
  cf_world_free(x->world, x->dev, x->ip_scratch);
  free(x->vptr);
  free(x->calls);
  free(x->algos);
  free(x->queue);
  free(x->ticket);
  cf_ctx_destroy(x->ctx);
  if (x->p) {
    pthread_mutex_destroy(&x->lock);
    pthread_cond_destroy(&x->cond);
  }
}

static cf_status result_init(cf_context *ctx, const cf_plan *p, const cf_inputs *in, cf_run_result *res) {
  const cf_graph *g = p->g;
  memset(res, 0, sizeof *res);
  res->ranks = p->ranks;
  res->caller_outputs = in && in->outputs;
  for (int i = 0; i < g->n_nodes; i++) res->n_outputs += g->nodes[i].op == CF_OP_OUTPUT;
  res->time_ms = calloc((size_t)p->opt.iters, sizeof *res->time_ms);
  res->outputs = calloc((size_t)p->ranks * (size_t)res->n_outputs + 1, sizeof *res->outputs);
  res->output_names = calloc((size_t)res->n_outputs + 1, sizeof *res->output_names);
  if (cf_run_outputs_in_arena(p) && !(in && in->outputs)) {
    res->arenas = calloc((size_t)p->ranks + 1, sizeof *res->arenas);
    res->arena_dev = p->dev;
    if (!res->arenas) return cf_error(ctx, CF_ERR_NO_MEMORY, NULL, 0, "out of memory");
  }
  if (!res->time_ms || !res->outputs || !res->output_names)
    return cf_error(ctx, CF_ERR_NO_MEMORY, NULL, 0, "out of memory");
  for (int i = 0, j = 0; i < g->n_nodes; i++)
    if (g->nodes[i].op == CF_OP_OUTPUT) res->output_names[j++] = g->nodes[i].name;
  return CF_OK;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static void result_finish(const cf_plan *p, cf_run_result *res) {
  res->collectives_executed = p->n_colls;
  res->peak_bytes = p->arena_bytes;
  double *sorted = malloc(sizeof *sorted * (size_t)p->opt.iters);
  if (!sorted) return;
  memcpy(sorted, res->time_ms, sizeof *sorted * (size_t)p->opt.iters);
  qsort(sorted, (size_t)p->opt.iters, sizeof *sorted, cmp_double);
  int k = p->opt.iters;
  res->time_ms_median = k % 2 ? sorted[k / 2] : 0.5 * (sorted[k / 2 - 1] + sorted[k / 2]);
  free(sorted);
}

/* Join the rank threads th[0..n) of rr. Every wait of a rank honours the
 * run's deadline and the abort flag, but a compute step cannot: BLAS
 * neither returns early nor can be interrupted, and OpenBLAS retries a
 * buffer it cannot map forever (under `ulimit -v`). So the joining thread
 * watches the ranks' compute steps (busy/idle): a step that has run longer
 * than the run's timeout is given up. The world is aborted with a message
 * naming the rank and the node (every other rank stops at its next wait),
 * the rank's communication thread is stopped, its thread is detached and
 * left what it may still touch (its rank_run and arena; the plan, marked
 * abandoned, is never freed), and it ends itself should the call ever
 * return (idle). The joining thread waits on `ended`, which every rank
 * posts as it ends, so a run that ends well is joined at once. Returns how
 * many ranks were given up, with the message in text. */
static int join_ranks(rank_run *rr, const pthread_t *th, int n, sem_t *ended, char *text,
                      size_t len) {
  const cf_plan *p = rr[0].p;
  char *gone_r = calloc((size_t)n, 1);
  int left = n, gone = 0; /* ranks that neither ended nor were given up */
  while (left > 0) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_nsec += 50 * 1000 * 1000;
    if (ts.tv_nsec >= 1000000000L) ts.tv_sec++, ts.tv_nsec -= 1000000000L;
    if (sem_timedwait(ended, &ts) == 0) { /* a rank ended (rank_main's last act) */
      left--;
      continue;
    }
    int64_t now = (int64_t)(cf_now() * 1e6);
    for (int r = 0; r < n && gone_r; r++) {
      int64_t since = atomic_load(&rr[r].busy_us);
      if (gone_r[r] || since <= 0 || (double)(now - since) < p->opt.timeout_s * 1e6) continue;
      /* the rank may be leaving the step right now: whoever swaps first decides */
      if (!atomic_compare_exchange_strong(&rr[r].busy_us, &since, -1)) continue;
      const cf_step *sp = &p->steps[atomic_load(&rr[r].busy_step)];
      const cf_node *nd = &p->g->nodes[sp->kind == CF_STEP_FUSED ? p->colls[sp->coll].node : sp->node];
      if (!gone)
        snprintf(text, len,
                 "rank %d timed out after %g s computing %s '%s' (the step did not return: BLAS "
                 "out of address space under ulimit -v, or more work than --timeout allows)",
                 rr[r].rank, p->opt.timeout_s, cf_op_table[nd->op].name, nd->name);
      rr[r].comm->ops->abort(rr[r].comm, text);
      pthread_mutex_lock(&rr[r].lock); /* its communication thread ends (the abort stops a call) */
      rr[r].stop = true;
      pthread_cond_broadcast(&rr[r].cond);
      pthread_mutex_unlock(&rr[r].lock);
      pthread_detach(th[r]);
      gone_r[r] = 1;
      left--;
      gone++;
    }
  }
  for (int r = 0; r < n; r++)
    if (!gone_r || !gone_r[r]) pthread_join(th[r], NULL);
  free(gone_r);
  return gone;
}

/* Whether p's steps are collectives and copies only: no compute step that
 * join_ranks would have to watch (BLAS cannot be interrupted). */
static bool only_collectives(const cf_plan *p) {
  for (int s = 0; s < p->n_steps; s++)
    if (p->steps[s].kind == CF_STEP_COMPUTE || p->steps[s].kind == CF_STEP_FUSED) return false;
  return true;
}

/* A kept rank's next run: this run's inputs, result and the caller's
 * context's settings (its trace may be new). */
static void rank_again(rank_run *x, cf_context *ctx, const cf_inputs *in, cf_run_result *res) {
  x->in = in;
  x->res = res;
  x->st = CF_OK;
  x->copies = x->copy_bytes = 0;
  x->stop = false;
  x->ctx->log_fn = ctx->log_fn;
  x->ctx->log_user = ctx->log_user;
  x->ctx->progress = ctx->progress;
  x->ctx->trace = ctx->trace;
  x->lane = cf_trace_lane_of(ctx->trace, x->rank, 0);
  x->clane = cf_trace_lane_of(ctx->trace, x->rank, 1);
}

/* A kept rank's run of a plan of collectives only, on the calling thread:
 * no thread started or joined per run (a collective that overlaps goes to
 * the rank's communication thread, started once and kept with it). */
static cf_status run_here(cf_context *ctx, rank_run *x) {
  const cf_plan *p = x->p;
  bool overlaps = false;
  for (int c = 0; c < p->n_colls; c++) overlaps |= !p->colls[c].inline_ok;
  if (overlaps && !x->has_thread) {
    if (pthread_create(&x->thread, NULL, comm_main, x) != 0)
      return cf_error(ctx, CF_ERR_RUNTIME, NULL, 0, "cannot start the communication thread");
    x->has_thread = true;
  }
  cf_trace_lane *here = cf_trace_here;
  cf_pulse pulse = cf_pulse_here;
  cf_trace_here = x->lane;
  cf_pulse_here = cf_comm_pulse(x->comm);
  rank_go(x);
  cf_trace_here = here;
  cf_pulse_here = pulse;
  return x->st;
}

/* A plan's solo_free, which cf_plan_destroy calls: the rank it kept
 * (opt.keep_rank), its communication thread stopped. */
static void solo_free(rank_run *x) {
  if (x->has_thread) {
    pthread_mutex_lock(&x->lock);
    x->stop = true;
    pthread_cond_broadcast(&x->cond);
    pthread_mutex_unlock(&x->lock);
    pthread_join(x->thread, NULL);
  }
  rank_free(x);
  free(x);
}

/* This process's one rank of world w (an MPI or shm process): a kept rank
 * (opt.keep_rank) of a plan of collectives only runs on the calling
 * thread (run_here); otherwise on a thread of its own that join_ranks
 * watches. */
static cf_status run_solo(cf_context *ctx, cf_plan *p, cf_world *w, const cf_inputs *in,
                          cf_run_result *res) {
  cf_comm *comm = cf_world_comm(w, w->first);
  rank_run *x = p->solo; /* left to the rank's thread if it is given up */
  cf_status st = result_init(ctx, p, in, res);
  if (!st && x) {
    rank_again(x, ctx, in, res);
  } else if (!st) {
    x = calloc(1, sizeof *x);
    st = x ? rank_setup(x, ctx, p, w->first, in, res)
           : cf_error(ctx, CF_ERR_NO_MEMORY, NULL, 0, "out of memory");
    if (!st) {
      x->solo = true;
      x->ctx->progress = ctx->progress; /* this process's one rank reports its phases */
      x->world = w;
      x->comm = comm;
      if (p->opt.keep_rank) {
        x->kept = true;
        p->solo = x;
        p->solo_free = solo_free;
      }
    }
  }
  int gone = 0;
  if (!st) {
    cf_context *saved = comm->ctx;
    comm->ctx = x->ctx;
    pthread_t th;
    char text[512];
    sem_t ended;
    sem_init(&ended, 0, 0);
    x->ended = &ended;
    if (x->kept && only_collectives(p)) {
      st = run_here(ctx, x);
    } else if (pthread_create(&x->thread, NULL, comm_main, x) != 0) {
      st = cf_error(ctx, CF_ERR_RUNTIME, NULL, 0, "cannot start the communication thread");
    } else {
      if (pthread_create(&th, NULL, rank_main, x) != 0) {
        x->st = cf_error(x->ctx, CF_ERR_RUNTIME, NULL, 0, "cannot start the rank's thread");
        pthread_mutex_lock(&x->lock);
        x->stop = true;
        pthread_cond_broadcast(&x->cond);
        pthread_mutex_unlock(&x->lock);
      } else {
        gone = join_ranks(x, &th, 1, &ended, text, sizeof text);
      }
      pthread_join(x->thread, NULL);
      st = gone ? CF_ERR_RUNTIME : x->st;
    }
    if (gone) {
      cf_error(ctx, CF_ERR_RUNTIME, NULL, 0, "%s", text);
    } else if (st && x->st) { /* the rank's own failure (not one to start a thread) */
      const char *why = NULL;
      if (st == CF_ERR_RUNTIME && comm->ops->aborted(comm, &why))
        cf_error(ctx, CF_ERR_RUNTIME, NULL, 0, "%s", why);
      else
        cf_error(ctx, st, NULL, 0, "%s", cf_errmsg(x->ctx));
    }
    if (!gone) x->ended = NULL;
    comm->ctx = saved;
    sem_destroy(&ended); /* a rank given up never posts it */
  }
  if (!st) {
    res->copies = x->copies;
    res->copy_bytes = x->copy_bytes;
    result_finish(p, res);
  }
  if (gone) {
    p->abandoned = true;
  } else if (x && !x->kept) {
    rank_free(x);
    free(x);
  }
  if (st) cf_run_result_free(res);
  return st;
}

int cf_exec_blas_threads(int ranks) {
  int now = openblas_get_num_threads();
  long cores = sysconf(_SC_NPROCESSORS_ONLN);
  /* one rank (an MPI process: cf_exec_blas_share sets cores / processes)
   * keeps the setting */
  if (cf_env(CF_ENV_BLAS_THREADS) || cores <= 0 || ranks <= 1) return now;
  return cores / ranks > 1 ? (int)(cores / ranks) : 1;
}

void cf_exec_blas_share(int processes) {
  long cores = sysconf(_SC_NPROCESSORS_ONLN);
  if (cf_env(CF_ENV_BLAS_THREADS) || cores <= 0) return; /* an explicit setting wins */
  openblas_set_num_threads(cores / processes > 1 ? (int)(cores / processes) : 1);
}

/* Every rank of world w as a thread of this process. */
static cf_status run_threads(cf_context *ctx, cf_plan *p, cf_world *w, const cf_inputs *in,
                             cf_run_result *res) {
  int n = p->ranks;
  rank_run *rr = calloc((size_t)n, sizeof *rr);
  pthread_t *th = calloc((size_t)n, sizeof *th);
  cf_context **saved = calloc((size_t)n, sizeof *saved);
  int gone = 0; /* ranks join_ranks gave up on */
  sem_t ended;   /* posted by each rank as it ends */
  sem_init(&ended, 0, 0);
  cf_status st = result_init(ctx, p, in, res);
  if (!st && (!rr || !th || !saved)) st = cf_error(ctx, CF_ERR_NO_MEMORY, NULL, 0, "out of memory");
  if (st) goto done;
  /* n ranks share the cores: each rank's GEMMs get cores/n BLAS threads
   * (OpenBLAS' setting is per process: restored below; an explicit
   * OPENBLAS_NUM_THREADS wins) */
  int blas_threads = openblas_get_num_threads(), share = cf_exec_blas_threads(n);
  bool set_blas = share != blas_threads;
  if (set_blas) openblas_set_num_threads(share);
  int started = 0;
  for (int r = 0; r < n && !st; r++) {
    st = rank_setup(&rr[r], ctx, p, r, in, res);
    rr[r].world = w;
    rr[r].ended = &ended;
    if (!st) {
      rr[r].comm = cf_world_comm(w, r);
      saved[r] = rr[r].comm->ctx;
      rr[r].comm->ctx = rr[r].ctx;
    }
  }
  for (int r = 0; r < n && !st; r++) {
    if (pthread_create(&rr[r].thread, NULL, comm_main, &rr[r]) != 0) {
      st = cf_error(ctx, CF_ERR_RUNTIME, NULL, 0, "cannot start a thread for rank %d", r);
      break;
    }
    rr[r].has_thread = true;
  }
  for (int r = 0; r < n && !st; r++, started++)
    if (pthread_create(&th[r], NULL, rank_main, &rr[r]) != 0) {
      st = cf_error(ctx, CF_ERR_RUNTIME, NULL, 0, "cannot start a thread for rank %d", r);
      rr[0].comm->ops->abort(rr[0].comm, "could not start every rank");
    }
  char text[512];
  if (started) gone = join_ranks(rr, th, started, &ended, text, sizeof text);
  for (int r = 0; r < n; r++)
    if (rr[r].has_thread) {
      if (started <= r) { /* rank never ran: stop its comm thread */
        pthread_mutex_lock(&rr[r].lock);
        rr[r].stop = true;
        pthread_cond_broadcast(&rr[r].cond);
        pthread_mutex_unlock(&rr[r].lock);
      }
      pthread_join(rr[r].thread, NULL);
    }
  if (set_blas && !gone) openblas_set_num_threads(blas_threads);
  if (gone) {
    p->abandoned = true;
    st = cf_error(ctx, CF_ERR_RUNTIME, NULL, 0, "%s", text);
  }
  if (!st) {
    /* report the rank that failed first: a non-runtime status beats the
     * runtime errors it caused elsewhere */
    int who = -1;
    for (int r = 0; r < n; r++)
      if (rr[r].st && (who < 0 || (rr[who].st == CF_ERR_RUNTIME && rr[r].st != CF_ERR_RUNTIME)))
        who = r;
    if (who >= 0) {
      const char *why = NULL;
      cf_comm *c0 = rr[who].comm;
      if (rr[who].st == CF_ERR_RUNTIME && c0->ops->aborted(c0, &why))
        st = cf_error(ctx, CF_ERR_RUNTIME, NULL, 0, "%s", why);
      else
        st = cf_error(ctx, rr[who].st, NULL, 0, "%s", cf_errmsg(rr[who].ctx));
    }
  }
  for (int r = 0; r < n && !st; r++) {
    res->copies += rr[r].copies;
    res->copy_bytes += rr[r].copy_bytes;
  }
  if (!st) result_finish(p, res);
done:
  for (int r = 0; rr && r < n; r++) {
    if (rr[r].comm) rr[r].comm->ctx = saved[r];
    if (atomic_load(&rr[r].busy_us) >= 0) rank_free(&rr[r]); /* else left to its thread */
  }
  if (!gone) free(rr);
  free(th);
  free(saved);
  sem_destroy(&ended); /* a rank given up never posts it */
  if (st) cf_run_result_free(res);
  return st;
}

cf_status cf_exec_meet(cf_context *ctx, cf_world *w, const cf_graph *g) {
  cf_comm *c = w->local == 1 && w->size > 1 ? cf_world_comm(w, w->first) : NULL;
  if (!c) return CF_OK;
  char fingerprint[17];
  cf_graph_fingerprint(g, fingerprint);
  /* errors to ctx: the world may be another executable's, whose context
   * its comm reports to otherwise */
  cf_context *was = c->ctx;
  c->ctx = ctx;
  cf_status st = exchange_fingerprints(ctx, c, w->first, w->size, fingerprint);
  c->ctx = was;
  return st;
}

cf_status cf_exec_prepare(cf_context *ctx, cf_world *w, const cf_plan *p) {
  const cf_algo_req *r = &p->opt.algo;
  bool forced = r->policy == CF_POLICY_FORCED && cf_algo_table[r->algo].native;
  if (!forced && r->policy != CF_POLICY_AUTO_MPI_NET) return CF_OK;
  cf_world_group *groups = calloc((size_t)p->n_colls + 1, sizeof *groups);
  if (!groups) return cf_error(ctx, CF_ERR_NO_MEMORY, NULL, 0, "out of memory");
  for (int c = 0; c < p->n_colls; c++) {
    const cf_pcoll *pc = &p->colls[c];
    groups[c] = (cf_world_group){
        .name = pc->desc.group, .ranks = pc->ranks, .n = pc->n, .n_parts = pc->n_parts};
  }
  cf_status st = cf_world_native_groups(w, groups, p->n_colls);
  free(groups);
  return st;
}

cf_status cf_exec_run_world(cf_context *ctx, cf_plan *p, cf_world *w, const cf_inputs *in,
                            cf_run_result *res) {
  if (p->opt.iters < 1) p->opt.iters = 1;
  if (p->opt.warmup < 0) p->opt.warmup = 0;
  if (w->size != p->ranks)
    return cf_error(ctx, CF_ERR_USAGE, NULL, 0, "the transport has %d rank%s, the plan %d", w->size,
                    cf_s(w->size), p->ranks);
  cf_comm *comm = cf_world_comm(w, w->first);
  /* arenas from the world's memory go back to it before the world goes:
   * outputs are copied out of them */
  if (cf_world_gives_memory(w)) p->opt.outputs_in_arena = false;
  if (!cf_device_is_host(p->dev) && !comm->ops->zero_copy)
    return cf_error(ctx, CF_ERR_UNSUPPORTED, NULL, 0,
                    "the %s transport moves host memory: --device %s needs the threads transport",
                    comm->ops->name, p->dev->ops->name);
  return w->local == w->size ? run_threads(ctx, p, w, in, res) : run_solo(ctx, p, w, in, res);
}

cf_status cf_exec_run(cf_context *ctx, cf_plan *p, const cf_inputs *in, cf_run_result *res) {
  cf_world *w = NULL;
  memset(res, 0, sizeof *res);
  cf_status st = cf_world_create(ctx, &cf_world_threads, p->ranks, p->opt.timeout_s, &w);
  if (!st) st = cf_exec_run_world(ctx, p, w, in, res);
  cf_world_destroy(w, 0);
  return st;
}

void cf_run_result_free(cf_run_result *res) {
  if (!res) return;
  if (res->arenas) {
    for (int r = 0; r < res->ranks; r++)
      if (res->arenas[r]) res->arena_dev->ops->free(res->arena_dev, res->arenas[r]);
    free(res->arenas);
  } else if (res->outputs && !res->caller_outputs) {
    for (int i = 0; i < res->ranks * res->n_outputs; i++) free(res->outputs[i].data);
  }
  free(res->outputs);
  free(res->output_names);
  free(res->time_ms);
  memset(res, 0, sizeof *res);
}
