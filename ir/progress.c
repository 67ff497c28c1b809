/* progress.c - a job's phases and how far the running one has got.
 *
 * A job (the driver's `run`, a benchmark, `check` of a large file) passes
 * through phases: reading, compiling, planning, generating inputs, the
 * iterations, verifying. Whoever does one says so on the context
 * (cf_phase_begin: the next phase begins, the one before ends) and, when it
 * has countable units (iterations, windows), how many are done. The record
 * (cf_progress) belongs to the caller that put it on the context; rank and
 * worker threads reach it through their own contexts' copy of the pointer.
 * It keeps each phase's seconds (run -v, --json) and what a progress line
 * reads (cf_progress_peek, from another thread). With no record on the
 * context every call returns at once. With a trace on the context too
 * (trace.c) each phase is an event on the driver's lane. The calling
 * thread's pulse (cf_beat) lives here too: the sign of life a rank's
 * peers wait on, which each unit of a phase also gives.
 */
#include "trace.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

struct cf_progress {
  pthread_mutex_t lock;            /* guards all but done and total */
  const char *name[CF_PHASES_MAX]; /* the phases in first-begun order */
  double secs[CF_PHASES_MAX];      /* each one's seconds, over every time it ran */
  int n;
  int cur;                     /* the running phase, -1: none */
  double t0;                   /* when it began (cf_now) */
  _Atomic int64_t done, total; /* its units */
};

cf_status cf_progress_create(cf_progress **out) {
  cf_progress *p = calloc(1, sizeof *p);
  if (!p || pthread_mutex_init(&p->lock, NULL) != 0) {
    free(p);
    return *out = NULL, CF_ERR_NO_MEMORY;
  }
  p->cur = -1;
  *out = p;
  return CF_OK;
}

void cf_progress_destroy(cf_progress *p) {
  if (!p) return;
  pthread_mutex_destroy(&p->lock);
  free(p);
}

/* End the running phase (lock held): its seconds are added to its row. */
static void end_locked(cf_context *ctx, cf_progress *p, double now) {
  if (p->cur < 0) return;
  p->secs[p->cur] += now - p->t0;
  if (ctx->trace)
    cf_trace_record(cf_trace_driver(ctx->trace),
                    &(cf_trace_ev){.t0 = cf_trace_ns(ctx->trace, p->t0),
                                   .t1 = cf_trace_ns(ctx->trace, now),
                                   .name = p->name[p->cur],
                                   .cat = "phase"});
  p->cur = -1;
}

void cf_phase_begin(cf_context *ctx, const char *name, int64_t total) {
  cf_progress *p = ctx ? ctx->progress : NULL;
  if (!p) return;
  double now = cf_now();
  pthread_mutex_lock(&p->lock);
  end_locked(ctx, p, now);
  int k = 0;
  while (k < p->n && strcmp(p->name[k], name) != 0)
    k++;
  if (k == p->n && p->n < CF_PHASES_MAX) p->name[p->n++] = name;
  if (k < p->n) {
    p->cur = k;
    p->t0 = now;
    atomic_store(&p->done, 0);
    atomic_store(&p->total, total);
  }
  pthread_mutex_unlock(&p->lock);
}

_Thread_local cf_pulse cf_pulse_here;

void cf_beat(void) {
  if (cf_pulse_here.fn) cf_pulse_here.fn(cf_pulse_here.user);
}

/* a unit of a phase done is a sign of life too */
void cf_phase_done(cf_context *ctx, int64_t done) {
  cf_beat();
  if (ctx && ctx->progress) atomic_store(&ctx->progress->done, done);
}

void cf_phase_add(cf_context *ctx, int64_t units) {
  cf_beat();
  if (ctx && ctx->progress) atomic_fetch_add(&ctx->progress->done, units);
}

void cf_phase_end(cf_context *ctx) {
  cf_progress *p = ctx ? ctx->progress : NULL;
  if (!p) return;
  pthread_mutex_lock(&p->lock);
  end_locked(ctx, p, cf_now());
  pthread_mutex_unlock(&p->lock);
}

bool cf_progress_peek(cf_progress *p, const char **name, double *elapsed, int64_t *done,
                      int64_t *total) {
  pthread_mutex_lock(&p->lock);
  bool on = p->cur >= 0;
  if (on) {
    *name = p->name[p->cur];
    *elapsed = cf_now() - p->t0;
    *done = atomic_load(&p->done);
    *total = atomic_load(&p->total);
  }
  pthread_mutex_unlock(&p->lock);
  return on;
}

int cf_progress_phases(cf_progress *p, const char **names, double *secs, int max) {
  if (!p) return 0;
  pthread_mutex_lock(&p->lock);
  int n = p->n < max ? p->n : max;
  for (int k = 0; k < n; k++) {
    names[k] = p->name[k];
    secs[k] = p->secs[k] + (k == p->cur ? cf_now() - p->t0 : 0);
  }
  pthread_mutex_unlock(&p->lock);
  return n;
}
