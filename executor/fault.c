/* fault.c - the fault-injecting world of the tests (fault.h).
 *
 * A wrapper in the manner of a decorator: the fault world has the ranks of
 * the world it wraps, and each endpoint it hands out forwards every slot to
 * the wrapped endpoint (after giving it the rank's context), except where
 * a fault is due: the rank's aborted() answers "stop" at the step it is to
 * fail at, its send() SIGKILLs the process, its descriptors reach the peers
 * altered, its first beat comes late. A stall is a compute slot that never
 * returns, on a device that is otherwise the plan's own (the same impl and
 * slots). The executor runs on it as on any world and knows nothing of
 * faults.
 */
#include "fault.h"

#include "transports/transports.h"

#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

typedef struct fault_world fault_world;

typedef struct fault_comm {
  cf_comm base;        /* what the rank runs on (impl: this) */
  cf_comm *inner;      /* the wrapped endpoint */
  cf_context *saved;   /* inner's context before the wrap */
  fault_world *w;
  _Atomic int64_t steps, msgs; /* aborted() calls (one per schedule step), collective messages */
  _Atomic int state;   /* 0: running; 1: failed (mode 1); 2: vanished (mode 2) */
  _Atomic int slowed;  /* its first beat has come (slow_rank's is late) */
  _Atomic int64_t asked; /* aborted() calls, for slow_step */
  char text[160];      /* the injected failure's message */
} fault_comm;

struct fault_world {
  cf_world base;
  cf_world *inner;
  const cf_faults *f;
  const cf_plan *p;
  cf_comm_ops ops; /* the wrapped endpoints' slots, forwarded */
  cf_world_ops wops; /* fault_world_ops, with alloc/free where inner gives memory */
  fault_comm *comms; /* [local] */
};

/* The wrapped endpoint, speaking to the rank's current context. */
static cf_comm *in_of(cf_comm *c) {
  fault_comm *fc = c->impl;
  if (fc->inner->ctx != c->ctx) fc->inner->ctx = c->ctx; /* once per run: the rank's threads agree */
  return fc->inner;
}

static bool is_faulty(const fault_comm *fc, int mode) {
  return fc->w->f->fail_mode == mode && fc->w->f->fail_rank == fc->base.rank;
}

/* d as this rank describes it to the others: a copy in *m altered by the
 * test's mutate when d is one of the plan's collectives. */
static const cf_coll_desc *described(fault_comm *fc, const cf_coll_desc *d, cf_coll_desc *m) {
  const cf_faults *f = fc->w->f;
  const cf_plan *p = fc->w->p;
  if (!f->mutate || !d || !d->node) return d;
  for (int c = 0; c < p->n_colls; c++) {
    const char *node = p->colls[c].desc.node;
    if (node != d->node && (!node || strcmp(node, d->node) != 0)) continue;
    *m = *d;
    f->mutate(f->user, fc->base.rank, m, c);
    return m;
  }
  return d;
}

static cf_status f_send(cf_comm *c, int peer, const void *buf, size_t bytes, const cf_coll_desc *d) {
  fault_comm *fc = c->impl;
  cf_comm *in = in_of(c);
  const char *why;
  /* mode 3 is a process's death: only where the ranks are processes (MPI, shm) */
  if (d && is_faulty(fc, 3) && fc->w->base.local < fc->w->base.size && !in->ops->aborted(in, &why) &&
      atomic_fetch_add(&fc->msgs, 1) == fc->w->f->fail_step) {
    fflush(stdout);
    fflush(stderr);
    raise(SIGKILL); /* vanish mid-run */
  }
  cf_coll_desc m;
  return in->ops->send(in, peer, buf, bytes, described(fc, d, &m));
}

static cf_status f_send_eager(cf_comm *c, int peer, const void *buf, size_t bytes,
                              const cf_coll_desc *d) {
  cf_comm *in = in_of(c);
  cf_coll_desc m;
  return in->ops->send_eager(in, peer, buf, bytes, described(c->impl, d, &m));
}

static cf_status f_recv(cf_comm *c, int peer, void *staging, size_t bytes, const cf_coll_desc *d,
                        const void **data) {
  cf_comm *in = in_of(c);
  cf_coll_desc m;
  return in->ops->recv(in, peer, staging, bytes, described(c->impl, d, &m), data);
}

static cf_status f_recv_sleep(cf_comm *c, int peer, void *staging, size_t bytes,
                              const cf_coll_desc *d, const void **data) {
  cf_comm *in = in_of(c);
  cf_coll_desc m;
  return in->ops->recv_sleep(in, peer, staging, bytes, described(c->impl, d, &m), data);
}

static cf_status f_release(cf_comm *c, int peer) {
  cf_comm *in = in_of(c);
  return in->ops->release(in, peer);
}

static void f_let_go(cf_comm *c, int peer, const void *p, size_t bytes) {
  cf_comm *in = in_of(c);
  in->ops->let_go(in, peer, p, bytes);
}

static uint64_t f_sent(cf_comm *c, int peer) {
  cf_comm *in = in_of(c);
  return in->ops->sent(in, peer);
}

static cf_status f_wait_released(cf_comm *c, int peer, uint64_t count) {
  cf_comm *in = in_of(c);
  return in->ops->wait_released(in, peer, count);
}

static cf_status f_send_wait(cf_comm *c) {
  cf_comm *in = in_of(c);
  return in->ops->send_wait(in);
}

static cf_status f_send_sleep(cf_comm *c) {
  cf_comm *in = in_of(c);
  return in->ops->send_sleep(in);
}

static void f_abort(cf_comm *c, const char *msg) {
  fault_comm *fc = c->impl;
  cf_comm *in = in_of(c);
  if (atomic_load(&fc->state) != 2) in->ops->abort(in, msg); /* a vanished rank says nothing */
}

/* exec.c asks once at the top of every schedule step: the faulty rank's
 * (fail_step+1)-th question is that step of the first iteration. */
static void late(fault_comm *fc, cf_comm *in);

static bool f_aborted(cf_comm *c, const char **msg) {
  fault_comm *fc = c->impl;
  cf_comm *in = in_of(c);
  const cf_faults *f = fc->w->f;
  if (f->slow_s > 0 && f->slow_at_step && f->slow_rank == c->rank &&
      atomic_fetch_add(&fc->asked, 1) == f->slow_step)
    late(fc, in);
  if (atomic_load(&fc->state) == 2) /* vanished: stopped, the world's reason once there is one */
    return in->ops->aborted(in, msg) || (*msg = fc->text, true);
  if ((is_faulty(fc, 1) || is_faulty(fc, 2)) && f->fail_step < fc->w->p->n_steps &&
      atomic_fetch_add(&fc->steps, 1) == f->fail_step) {
    if (f->fail_mode == 1) {
      snprintf(fc->text, sizeof fc->text, "rank %d failed at step %d (injected failure)", c->rank,
               f->fail_step);
      in->ops->abort(in, fc->text);
    } else {
      snprintf(fc->text, sizeof fc->text, "rank %d vanished at step %d (injected)", c->rank,
               f->fail_step);
    }
    atomic_store(&fc->state, f->fail_mode);
    *msg = fc->text;
    return true;
  }
  return in->ops->aborted(in, msg);
}

static cf_status f_native(cf_comm *c, cf_device *dev, const cf_coll_call *call) {
  cf_comm *in = in_of(c);
  cf_coll_call copy = *call;
  copy.desc = *described(c->impl, &call->desc, &copy.desc);
  return in->ops->native(in, dev, &copy);
}

/* slow_rank's long phase: slow_s, beating every 20 ms unless slow_quiet,
 * until the world aborts. */
static void late(fault_comm *fc, cf_comm *in) {
  const cf_faults *f = fc->w->f;
  const char *why;
  double end = cf_now() + f->slow_s;
  while (cf_now() < end && !in->ops->aborted(in, &why)) {
    struct timespec ts = {0, 20 * 1000 * 1000};
    nanosleep(&ts, NULL);
    if (!f->slow_quiet && in->ops->beat) in->ops->beat(in);
  }
}

/* A sign of life: slow_rank's first comes after its long phase (unless
 * that comes at a step). */
static void f_beat(cf_comm *c) {
  fault_comm *fc = c->impl;
  cf_comm *in = in_of(c);
  const cf_faults *f = fc->w->f;
  if (f->slow_s > 0 && !f->slow_at_step && f->slow_rank == c->rank &&
      !atomic_exchange(&fc->slowed, 1))
    late(fc, in);
  if (in->ops->beat) in->ops->beat(in);
}

/* ---- the world: every slot forwarded to the wrapped world ---- */

static fault_world *fw_of(const cf_world *w) { return w->impl; }

/* The wrapped endpoints speak to their ranks' contexts (world slots such as
 * max report through them). */
static cf_world *inner_of(const cf_world *w) {
  fault_world *fw = fw_of(w);
  for (int i = 0; i < w->local; i++)
    if (fw->comms[i].inner->ctx != fw->comms[i].base.ctx) fw->comms[i].inner->ctx = fw->comms[i].base.ctx;
  return fw->inner;
}

static cf_status fw_create(cf_context *ctx, int size, double timeout_s, cf_world **out) {
  (void)size, (void)timeout_s;
  *out = NULL;
  return cf_error(ctx, CF_ERR_UNSUPPORTED, NULL, 0, "a fault world wraps another (cf_fault_world)");
}

static cf_comm *fw_comm(cf_world *w, int rank) { return &fw_of(w)->comms[rank - w->first].base; }

static void fw_destroy(cf_world *w, int exit_code) {
  (void)exit_code;
  if (!w) return;
  fault_world *fw = fw_of(w);
  for (int i = 0; i < w->local; i++) fw->comms[i].inner->ctx = fw->comms[i].saved;
  free(fw->comms);
  free(fw);
}

static void fw_rank_left(cf_world *w, int rank) { cf_world_rank_left(inner_of(w), rank); }
static void fw_rank_thread(cf_world *w, int rank, int lane) { cf_world_rank_thread(inner_of(w), rank, lane); }
static int fw_host_processes(const cf_world *w) { return cf_world_host_processes(fw_of(w)->inner); }
static const char *fw_host(const cf_world *w) { return cf_world_host(fw_of(w)->inner); }
static int fw_auto_policy(const cf_world *w) { return (int)cf_world_auto(fw_of(w)->inner); }
static cf_status fw_max(cf_world *w, double *v, int n) { return cf_world_max(inner_of(w), v, n); }
static void fw_abort(cf_world *w, const char *text) { cf_world_abort(inner_of(w), text); }

static cf_status fw_native_groups(cf_world *w, const cf_world_group *groups, int n) {
  return cf_world_native_groups(inner_of(w), groups, n);
}

/* The inner world's own memory (the shm world's heap), where it has it. */
static void *fw_alloc(cf_world *w, size_t bytes) {
  cf_world *in = fw_of(w)->inner;
  return in->ops->alloc(in, bytes);
}

static bool fw_free(cf_world *w, void *p) {
  cf_world *in = fw_of(w)->inner;
  return in->ops->free(in, p);
}

static bool fw_shares(const cf_world *w, const void *p, size_t bytes) {
  return cf_world_shares(fw_of(w)->inner, p, bytes);
}

static const cf_world_ops fault_world_ops = {
    .name = "fault",
    .create = fw_create,
    .comm = fw_comm,
    .destroy = fw_destroy,
    .rank_left = fw_rank_left,
    .rank_thread = fw_rank_thread,
    .host_processes = fw_host_processes,
    .host = fw_host,
    .auto_policy = fw_auto_policy,
    .max = fw_max,
    .abort = fw_abort,
    .native_groups = fw_native_groups,
};

/* ---- mode 4: a device whose compute never returns for one rank's node ---- */

typedef struct stall_dev {
  cf_device base; /* first: the slots get &base; impl and ctx are the plan device's */
  cf_device_ops ops;
  cf_device *inner;
  int rank;
  const cf_node *node;
} stall_dev;

static cf_status stall_compute(cf_device *d, cf_context *ctx, const cf_graph *g, const cf_node *n,
                               const cf_tensor *in, cf_tensor *out, int rank, uint64_t seed,
                               unsigned flags) {
  stall_dev *s = (stall_dev *)d;
  if (rank == s->rank && n == s->node) /* as OpenBLAS retrying a buffer it cannot map */
    for (;;) sleep(1000);
  return cf_device_compute(s->inner, ctx, g, n, in, out, rank, seed, flags);
}

static void stall_destroy(cf_device *d) {
  stall_dev *s = (stall_dev *)d;
  s->inner->ops->destroy(s->inner);
  free(s);
}

/* Wrap p's device when f stalls a compute step of p's. */
static cf_status stall_plan(cf_context *ctx, cf_plan *p, const cf_faults *f) {
  if (f->fail_mode != 4 || p->dev->ops->compute == stall_compute) return CF_OK;
  const cf_node *node = NULL;
  for (int s = f->fail_step < 0 ? 0 : f->fail_step; s < p->n_steps && !node; s++)
    if (p->steps[s].kind == CF_STEP_COMPUTE) node = &p->g->nodes[p->steps[s].node];
  if (!node) return CF_OK;
  stall_dev *s = calloc(1, sizeof *s);
  if (!s) return cf_error(ctx, CF_ERR_NO_MEMORY, NULL, 0, "out of memory");
  s->inner = p->dev;
  s->ops = *p->dev->ops;
  s->ops.compute = stall_compute;
  s->ops.destroy = stall_destroy;
  s->base = (cf_device){.ops = &s->ops, .ctx = p->dev->ctx, .impl = p->dev->impl};
  s->rank = f->fail_rank;
  s->node = node;
  p->dev = &s->base;
  return CF_OK;
}

cf_status cf_fault_world(cf_context *ctx, cf_world *inner, cf_plan *p, const cf_faults *f,
                         cf_world **out) {
  *out = NULL;
  cf_status st = stall_plan(ctx, p, f);
  if (st) return st;
  fault_world *fw = calloc(1, sizeof *fw);
  fault_comm *comms = calloc((size_t)inner->local + 1, sizeof *comms);
  if (!fw || !comms) {
    free(fw);
    free(comms);
    return cf_error(ctx, CF_ERR_NO_MEMORY, NULL, 0, "out of memory");
  }
  *fw = (fault_world){.base = *inner, .inner = inner, .f = f, .p = p, .comms = comms};
  fw->wops = fault_world_ops;
  if (cf_world_gives_memory(inner)) { /* the arenas must come from it */
    fw->wops.alloc = fw_alloc;
    fw->wops.free = fw_free;
    fw->wops.shares = fw_shares;
  }
  fw->base.ops = &fw->wops;
  fw->base.impl = fw;
  const cf_comm_ops *io = cf_world_comm(inner, inner->first)->ops;
  fw->ops = (cf_comm_ops){.name = io->name, .zero_copy = io->zero_copy, .eager_max = io->eager_max,
                          .send = f_send, .recv = f_recv, .release = f_release, .sent = f_sent,
                          .wait_released = f_wait_released, .send_wait = f_send_wait,
                          .abort = f_abort, .aborted = f_aborted,
                          .send_sleep = io->send_sleep ? f_send_sleep : NULL,
                          .recv_sleep = io->recv_sleep ? f_recv_sleep : NULL,
                          .send_eager = io->send_eager ? f_send_eager : NULL,
                          .native = io->native ? f_native : NULL, .beat = f_beat,
                          .let_go = io->let_go ? f_let_go : NULL};
  for (int i = 0; i < inner->local; i++) {
    fault_comm *fc = &comms[i];
    fc->inner = cf_world_comm(inner, inner->first + i);
    fc->saved = fc->inner->ctx;
    fc->w = fw;
    fc->base = (cf_comm){.ops = &fw->ops, .ctx = fc->inner->ctx, .rank = fc->inner->rank,
                         .size = fc->inner->size, .cores = fc->inner->cores, .impl = fc};
  }
  *out = &fw->base;
  return CF_OK;
}

cf_status cf_fault_run(cf_context *ctx, cf_plan *p, cf_world *w, const cf_faults *f,
                       const cf_inputs *in, cf_run_result *res) {
  cf_world *own = NULL, *fw = NULL;
  memset(res, 0, sizeof *res);
  cf_status st = w ? CF_OK : cf_world_create(ctx, &cf_world_threads, p->ranks, p->opt.timeout_s, &own);
  if (!st) st = cf_fault_world(ctx, w ? w : own, p, f, &fw);
  if (!st) st = cf_exec_run_world(ctx, p, fw, in, res);
  cf_world_destroy(fw, 0);
  cf_world_destroy(own, 0);
  return st;
}
