/* runner.c - cf_runner: a thread that runs cf_executable_start_rank's runs
 * one after another, in the order they were started, and tells each run's
 * end to its callback.
 *
 * A process of a job (a DDP rank) hands its collectives over as they
 * become ready and goes on computing; every rank starts the same runs in
 * the same order, so one FIFO per caller keeps the ranks' messages paired.
 * A run is cf_executable_run_rank on this thread: with a kept rank
 * (executor.h's keep_rank) nothing more is started per run, so a run
 * costs the caller one wake-up of this thread and the completion one
 * callback, where a thread of the caller's own plus the run's threads
 * cost several. The runner is the caller's (no state of the library's
 * own): whoever needs order across executables starts them on one runner.
 */
#include "api.h"
#include "../executor/transports/transports.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

typedef struct run_job {
  cf_executable *e;
  int rank;
  const void **in; /* copies of the caller's arrays (their buffers are the caller's) */
  void **out;
  cf_run_done_fn done;
  void *user;
  struct run_job *next;
} run_job;

struct cf_runner {
  pthread_t thread;
  pthread_mutex_t lock;
  pthread_cond_t work, idle;
  run_job *head, *tail;
  int pending; /* queued or running */
  bool stop;
};

static void *runner_main(void *arg) {
  cf_runner *r = arg;
  cf_spin_brief = true; /* the caller computes meanwhile: waits leave it the cores */
  pthread_mutex_lock(&r->lock);
  for (;;) {
    while (!r->head && !r->stop) pthread_cond_wait(&r->work, &r->lock);
    run_job *j = r->head;
    if (!j) break; /* stopped, nothing left */
    r->head = j->next;
    if (!r->head) r->tail = NULL;
    pthread_mutex_unlock(&r->lock);
    cf_status st = cf_executable_run_rank(j->e, j->rank, j->in, j->out);
    /* the message is this thread's (messages are kept per thread) */
    j->done(j->user, st, st ? cf_errmsg(cf_executable_ctx(j->e)) : NULL);
    cf_executable_pending(j->e, -1);
    free(j->in);
    free(j->out);
    free(j);
    pthread_mutex_lock(&r->lock);
    if (--r->pending == 0) pthread_cond_broadcast(&r->idle);
  }
  pthread_mutex_unlock(&r->lock);
  return NULL;
}

cf_status cf_runner_create(cf_context *ctx, cf_runner **out) {
  if (!out) return CF_ERR_USAGE;
  *out = NULL;
  if (!ctx) return CF_ERR_USAGE;
  cf_runner *r = calloc(1, sizeof *r);
  if (!r) return cf_error(ctx, CF_ERR_NO_MEMORY, NULL, 0, "out of memory");
  pthread_mutex_init(&r->lock, NULL);
  pthread_cond_init(&r->work, NULL);
  pthread_cond_init(&r->idle, NULL);
  if (pthread_create(&r->thread, NULL, runner_main, r) != 0) {
    pthread_mutex_destroy(&r->lock);
    pthread_cond_destroy(&r->work);
    pthread_cond_destroy(&r->idle);
    free(r);
    return cf_error(ctx, CF_ERR_RUNTIME, NULL, 0, "cf_runner_create: cannot start its thread");
  }
  *out = r;
  return CF_OK;
}

void cf_runner_wait(cf_runner *r) {
  if (!r) return;
  pthread_mutex_lock(&r->lock);
  while (r->pending) pthread_cond_wait(&r->idle, &r->lock);
  pthread_mutex_unlock(&r->lock);
}

void cf_runner_destroy(cf_runner *r) {
  if (!r) return;
  pthread_mutex_lock(&r->lock);
  r->stop = true;
  pthread_cond_broadcast(&r->work);
  pthread_mutex_unlock(&r->lock);
  pthread_join(r->thread, NULL); /* after every run started (the queue drains first) */
  pthread_mutex_destroy(&r->lock);
  pthread_cond_destroy(&r->work);
  pthread_cond_destroy(&r->idle);
  free(r);
}

/* Queue cf_executable_run_rank(e, rank, inputs, outputs) on r (the arrays
 * copied: n_in and n_out pointers); done is called on r's thread when it
 * has ended. */
static cf_status runner_put(cf_runner *r, cf_executable *e, int rank, const void *const *inputs,
                            int n_in, void *const *outputs, int n_out, cf_run_done_fn done,
                            void *user) {
  cf_context *ctx = cf_executable_ctx(e);
  run_job *j = calloc(1, sizeof *j);
  if (j) {
    j->in = calloc((size_t)n_in + 1, sizeof *j->in);
    j->out = calloc((size_t)n_out + 1, sizeof *j->out);
  }
  if (!j || !j->in || !j->out) {
    if (j) {
      free(j->in);
      free(j->out);
    }
    free(j);
    return cf_error(ctx, CF_ERR_NO_MEMORY, NULL, 0, "out of memory");
  }
  for (int k = 0; k < n_in; k++) j->in[k] = inputs ? inputs[k] : NULL;
  for (int k = 0; k < n_out; k++) j->out[k] = outputs ? outputs[k] : NULL;
  /* NULL arrays stay NULL, as cf_executable_run_rank reads them */
  if (!inputs) {
    free(j->in);
    j->in = NULL;
  }
  if (!outputs) {
    free(j->out);
    j->out = NULL;
  }
  *j = (run_job){.e = e, .rank = rank, .in = j->in, .out = j->out, .done = done, .user = user};
  cf_executable_pending(e, +1);
  pthread_mutex_lock(&r->lock);
  if (r->tail)
    r->tail->next = j;
  else
    r->head = j;
  r->tail = j;
  r->pending++;
  pthread_cond_signal(&r->work);
  pthread_mutex_unlock(&r->lock);
  return CF_OK;
}

cf_status cf_executable_start_rank(cf_executable *e, cf_runner *r, int rank,
                                   const void *const *inputs, void *const *outputs,
                                   cf_run_done_fn done, void *user) {
  cf_status st = cf_executable_check(e);
  if (st) return st;
  if (!r || !done)
    return cf_error(cf_executable_ctx(e), CF_ERR_USAGE, NULL, 0,
                    "cf_executable_start_rank: a runner and a done callback are required");
  if ((st = cf_executable_check_rank(e, rank))) return st;
  return runner_put(r, e, rank, inputs, (int)cf_executable_io_count(e, CF_IO_INPUT), outputs,
                    (int)cf_executable_io_count(e, CF_IO_OUTPUT), done, user);
}
