/* bench_ar_loop.c - the measuring loop of `collfuse bench allreduce`, once,
 * over a world and a device: the threads world on the CPU device (the
 * default), the MPI world on the CPU device (--backend mpi: this process is
 * one rank of an mpirun job) and the threads world on the CUDA device
 * (--device cuda) are three instantiations of the same code; only the
 * report around it differs (bench_allreduce.c, bench_cuda.c).
 *
 * One size, on every rank of this process (a thread each; the MPI world's
 * one rank runs in the calling thread): buffers from the rank's view of the
 * device, its input from cf_fill_random (seed 1, its rank, "bench"), then
 * per algorithm one warm-up loop of K calls and a check of its output, then
 * L timed loops round-robin (the bound, then every algorithm), so a change
 * of load hits every column alike. A loop is K back-to-back calls between
 * two barriers of all ranks, timed on the process's first rank; a cell is
 * the median loop divided by K. The bound is every rank copying its input
 * to its output at once, timed the same way, twice: with the device's copy
 * (memcpy) and with its streaming copy; the faster median is the bound.
 *
 * The check: when every rank lives in this process, a sample of each
 * rank's output against the float64 sum of every rank's input (any
 * summation order is within (n-1) unit roundoffs of the sum of
 * magnitudes), and so on a world of processes whose transport reads peers'
 * memory in place (shm: the inputs' pointers come as one message from every
 * peer); otherwise (MPI) against the first algorithm's result, the
 * reference (MPI_Allreduce): inputs lie in [-1, 1), so two orders agree
 * within 2 n^2 eps.
 *
 * Barriers: the threads of this process meet at a pthread barrier and
 * processes at cf_world_max. Every rank passes the same barriers whatever
 * happens; a rank whose collective or check fails aborts the world (its
 * peers' calls then fail at once) instead of leaving, so a failure ends the
 * measurement with a message, never a hang.
 */
#include "tools.h"

#include "../executor/executor.h"
#include "../executor/transports/transports.h"

#include <float.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct cf_bench_ar {
  cf_world *w;
  cf_device *dev;    /* the device; each rank works through its view */
  int n;             /* ranks in the world */
  cf_context **rctx; /* per local rank, for its messages */
  int *ranks;        /* 0..n-1: the world group */
  int64_t *seq;      /* per local rank: collectives so far */
  const float **hin; /* per rank: its input on the host, for the check */
  pthread_barrier_t bar;
  pthread_mutex_t lock; /* guards error */
  atomic_int failed;    /* some rank failed: the rest only pass barriers */
  char error[512];      /* the first failure */
  bool ready;           /* bar and lock exist */
  cf_bench_ar_size *s;  /* the size being measured */
  int64_t count;
  double loop_s[CF_BENCH_AR_MAX_ALGOS][CF_BENCH_AR_MAX_LOOPS]; /* seconds per call of each loop */
  double copy_s[2][CF_BENCH_AR_MAX_LOOPS]; /* the bound's: memcpy, streaming copy */
};

/* The AllReduce every rank runs: float32 sum over the world. */
cf_coll_desc cf_bench_ar_desc(int64_t count) {
  return (cf_coll_desc){.op = CF_OP_ALLREDUCE,
                        .dtype = CF_DT_FLOAT32,
                        .count = count,
                        .red = CF_RED_SUM,
                        .root = -1,
                        .layout = -1,
                        .group = CF_WORLD_GROUP,
                        .node = "bench"};
}

cf_status cf_bench_ar_open(cf_context *ctx, cf_world *w, cf_device *dev, cf_bench_ar **out) {
  *out = NULL;
  cf_bench_ar *h = calloc(1, sizeof *h);
  if (!h) return cf_error(ctx, CF_ERR_NO_MEMORY, NULL, 0, "out of memory");
  h->w = w;
  h->dev = dev;
  h->n = w->size;
  h->rctx = calloc((size_t)w->local, sizeof *h->rctx);
  h->seq = calloc((size_t)w->local, sizeof *h->seq);
  h->ranks = calloc((size_t)h->n, sizeof *h->ranks);
  h->hin = calloc((size_t)h->n, sizeof *h->hin);
  cf_status st = CF_OK;
  if (!h->rctx || !h->seq || !h->ranks || !h->hin)
    st = cf_error(ctx, CF_ERR_NO_MEMORY, NULL, 0, "out of memory");
  for (int r = 0; !st && r < h->n; r++)
    h->ranks[r] = r;
  for (int r = 0; !st && r < w->local; r++)
    st = cf_context_create(&h->rctx[r]);
  if (st) {
    cf_bench_ar_close(h);
    return st;
  }
  pthread_barrier_init(&h->bar, NULL, (unsigned)w->local);
  pthread_mutex_init(&h->lock, NULL);
  h->ready = true;
  *out = h;
  return CF_OK;
}

void cf_bench_ar_close(cf_bench_ar *h) {
  if (!h) return;
  if (h->ready) {
    pthread_barrier_destroy(&h->bar);
    pthread_mutex_destroy(&h->lock);
  }
  for (int r = 0; h->rctx && r < h->w->local; r++)
    cf_context_destroy(h->rctx[r]);
  free(h->rctx);
  free(h->seq);
  free(h->ranks);
  free(h->hin);
  free(h);
}

const char *cf_bench_ar_error(const cf_bench_ar *h) { return h->error; }

static void fail(cf_bench_ar *h, const char *text) {
  pthread_mutex_lock(&h->lock);
  if (!h->error[0]) snprintf(h->error, sizeof h->error, "%s", text);
  pthread_mutex_unlock(&h->lock);
  atomic_store(&h->failed, 1);
}

static bool failed(cf_bench_ar *h) { return atomic_load(&h->failed); }

/* This rank failed with text: every other rank's calls fail at once. */
static void fail_world(cf_bench_ar *h, cf_comm *c, const char *text) {
  const char *why;
  if (!c->ops->aborted(c, &why)) c->ops->abort(c, text);
  fail(h, text);
}

/* Every rank of the world meets here: the threads of this process, then
 * the processes (after a failure a process stops meeting the others, whose
 * barriers then fail at once). */
static void sync_ranks(cf_bench_ar *h, cf_comm *c) {
  if (h->w->local > 1) pthread_barrier_wait(&h->bar);
  if (h->w->local < h->n && !failed(h)) {
    double x = 0;
    if (cf_world_max(h->w, &x, 1)) fail(h, cf_context_errmsg(c->ctx));
  }
}

/* Element i of buf, which lives on dev. */
static bool read_at(cf_bench_ar *h, cf_device *dev, const float *buf, int64_t i, float *v) {
  if (cf_device_is_host(dev)) {
    *v = buf[i];
    return true;
  }
  if (!cf_device_download(dev, v, buf + i, sizeof *v)) return true;
  fail(h, cf_context_errmsg(dev->ctx));
  return false;
}

/* A sample of out (at most 2^18 elements on the host, 2^12 on a device,
 * and the last) against the float64 sum of the inputs, or against ref. */
static bool check(cf_bench_ar *h, int me, cf_comm *c, cf_device *dev, const float *out,
                  const float *ref, int algo) {
  int64_t count = h->count, cap = cf_device_is_host(dev) ? 1 << 18 : 1 << 12;
  int64_t stride = count > cap ? (count / cap) | 1 : 1;
  for (int64_t j = 0; j <= count; j += stride) {
    int64_t i = j < count ? j : count - 1;
    float v, r = 0;
    if (!read_at(h, dev, out, i, &v) || (ref && !read_at(h, dev, ref, i, &r))) return false;
    double want = r, tol = 2.0 * h->n * h->n * FLT_EPSILON;
    if (!ref) {
      double mag = 0;
      want = 0;
      for (int q = 0; q < h->n; q++) {
        want += h->hin[q][i];
        mag += fabs(h->hin[q][i]);
      }
      tol = 2.0 * h->n * FLT_EPSILON * mag;
    }
    if (fabs((double)v - want) <= tol) continue;
    char text[256];
    snprintf(text, sizeof text,
             "%s: wrong result on rank %d at %lld bytes, index %lld: %.9g, %s %.9g",
             cf_algo_name(algo), me, (long long)(count * 4), (long long)i, (double)v,
             ref ? h->s->ref : "expected", want);
    fail_world(h, c, text);
    return false;
  }
  return true;
}

/* K calls of call; false (the world aborted) on a failure. */
static bool calls(cf_bench_ar *h, int local, cf_comm *c, cf_device *dev, cf_coll_call *call) {
  for (int k = 0; k < h->s->iters; k++) {
    if (failed(h)) return false;
    call->desc.seq = h->seq[local]++;
    cf_status st = cf_coll_run(c, dev, call);
    if (!st) st = cf_device_error(dev, c->ctx);
    if (st) {
      fail_world(h, c, cf_context_errmsg(c->ctx));
      return false;
    }
  }
  return true;
}

/* K copies of in to out: with the device's plain copy (memcpy), or (stream)
 * its streaming stores, which the collectives use for outputs that leave
 * the cache. */
static void copies(cf_bench_ar *h, cf_device *dev, void *out, const void *in, size_t bytes,
                   bool stream) {
  for (int k = 0; k < h->s->iters && !failed(h); k++)
    (stream ? cf_device_copy_stream : dev->ops->copy)(dev, out, in, bytes);
}

typedef struct rank_arg {
  cf_bench_ar *h;
  int local; /* index among this process's ranks */
} rank_arg;

static void *rank_main(void *arg) {
  rank_arg *R = arg;
  cf_bench_ar *h = R->h;
  cf_bench_ar_size *s = h->s;
  int local = R->local, me = h->w->first + local, n = h->n;
  cf_world_rank_thread(h->w, me, 1); /* the rank's collectives */
  cf_comm *c = cf_world_comm(h->w, me);
  c->ctx = h->rctx[local];
  size_t bytes = (size_t)h->count * sizeof(float), scratch_bytes = 64;
  cf_coll_desc desc = cf_bench_ar_desc(h->count);
  for (int a = 0; a < s->n_algos; a++) {
    size_t sb = cf_coll_scratch_bytes(&desc, n, s->algos[a], c->ops->zero_copy);
    if (sb > scratch_bytes) scratch_bytes = sb;
  }
  /* allocated and first touched by the rank's own thread */
  cf_device *dev = NULL;
  float *in = NULL, *out = NULL, *ref = NULL, *host = NULL;
  void *scratch = NULL;
  if (cf_device_view(h->dev, c->ctx, me, 1, &dev)) {
    fail_world(h, c, cf_context_errmsg(c->ctx));
  } else {
    /* (from the world's memory where it has its own: the shm world's peers
     * read and write them in place) */
    in = cf_world_alloc(h->w, dev, bytes);
    out = cf_world_alloc(h->w, dev, bytes);
    ref = s->ref ? cf_world_alloc(h->w, dev, bytes) : NULL;
    scratch = cf_world_alloc(h->w, dev, scratch_bytes);
    host = cf_device_is_host(dev) ? in : malloc(bytes + 4);
    if (!in || !out || (s->ref && !ref) || !scratch || !host) {
      char text[128];
      snprintf(text, sizeof text, "rank %d: out of %smemory for %zu-byte buffers", me,
               cf_device_is_host(dev) ? "" : "GPU ", bytes);
      fail_world(h, c, text);
    } else {
      cf_fill_random(host, CF_DT_FLOAT32, h->count, 1, me, "bench");
      if (host != in && cf_device_upload(dev, in, host, bytes))
        fail_world(h, c, cf_context_errmsg(c->ctx));
    }
  }
  h->hin[me] = host;
  sync_ranks(h, c);
  /* a world of processes whose transport reads peers' memory in place
   * (shm) and no reference: every peer's input, as the transport hands it
   * (inputs never change: released at once, read until the last barrier) */
  if (!s->ref && h->w->local < n && c->ops->zero_copy && !failed(h)) {
    cf_status st = CF_OK;
    for (int q = 0; q < n && !st; q++)
      if (q != me) st = c->ops->send(c, q, in, bytes, NULL);
    for (int q = 0; q < n && !st; q++) {
      const void *p = NULL;
      if (q == me) continue;
      st = c->ops->recv(c, q, NULL, bytes, NULL, &p);
      if (!st) st = c->ops->release(c, q);
      h->hin[q] = (float *)p;
    }
    if (!st) st = c->ops->send_wait(c);
    if (st) fail_world(h, c, cf_context_errmsg(c->ctx));
    sync_ranks(h, c);
  }
  cf_coll_call call[CF_BENCH_AR_MAX_ALGOS];
  for (int a = 0; a < s->n_algos; a++) {
    call[a] = (cf_coll_call){.desc = desc,
                             .ranks = h->ranks,
                             .n = n,
                             .me = me,
                             .in = in,
                             .out = out,
                             .scratch = scratch,
                             .scratch_bytes = scratch_bytes,
                             .algo = s->algos[a]};
    if (!failed(h) && host == in) memset(out, 0, bytes);
    calls(h, local, c, dev, &call[a]); /* warm-up */
    sync_ranks(h, c);
    if (!failed(h)) {
      if (s->ref && a == 0)
        dev->ops->copy(dev, ref, out, bytes);
      else
        check(h, me, c, dev, out, s->ref ? ref : NULL, s->algos[a]);
    }
    sync_ranks(h, c);
  }
  /* the bound's warm-up (both copies, where the device has two), then the
   * timed loops round-robin */
  int kinds = s->bound ? dev && dev->ops->copy_stream ? 2 : 1 : 0;
  for (int k = 0; k < kinds; k++)
    copies(h, dev, out, in, bytes, k == 1);
  for (int l = 0; l < s->loops; l++) {
    double t0;
    for (int k = 0; k < kinds; k++) {
      sync_ranks(h, c);
      t0 = cf_now();
      copies(h, dev, out, in, bytes, k == 1);
      sync_ranks(h, c);
      if (local == 0) h->copy_s[k][l] = (cf_now() - t0) / s->iters;
    }
    for (int a = 0; a < s->n_algos; a++) {
      sync_ranks(h, c);
      t0 = cf_now();
      calls(h, local, c, dev, &call[a]);
      sync_ranks(h, c);
      if (local == 0) h->loop_s[a][l] = (cf_now() - t0) / s->iters;
    }
  }
  /* every call ended with send_wait and the checks are behind a barrier: no
   * peer reads these buffers any more */
  if (dev) {
    cf_world_free(h->w, dev, in);
    cf_world_free(h->w, dev, out);
    cf_world_free(h->w, dev, ref);
    cf_world_free(h->w, dev, scratch);
  }
  if (host != in) free(host);
  return NULL;
}

bool cf_bench_ar_measure(cf_bench_ar *h, cf_bench_ar_size *s) {
  h->s = s;
  h->count = s->bytes / 4;
  h->error[0] = 0;
  atomic_store(&h->failed, 0);
  /* the kernels every algorithm may launch at this size (streaming ones
   * from a footprint: cf_streams), resolved before ranks start */
  cf_coll_desc desc = cf_bench_ar_desc(h->count);
  cf_kernel_key keys[16];
  int nk = cf_coll_kernels(&desc, h->n, keys, 16);
  for (int k = 0; k < nk; k++)
    if (h->dev->ops->prepare(h->dev, &keys[k])) {
      snprintf(h->error, sizeof h->error, "cannot prepare the kernels: %s", cf_errmsg(h->dev->ctx));
      return false;
    }
  int local = h->w->local;
  rank_arg R[CF_BENCH_AR_MAX_RANKS];
  if (local == 1) {
    R[0] = (rank_arg){.h = h, .local = 0};
    rank_main(&R[0]);
  } else {
    pthread_t th[CF_BENCH_AR_MAX_RANKS];
    for (int r = 0; r < local; r++) {
      R[r] = (rank_arg){.h = h, .local = r};
      if (pthread_create(&th[r], NULL, rank_main, &R[r]) != 0) {
        /* cannot happen in practice; the started ranks would wait forever */
        fprintf(stderr, "collfuse bench allreduce: cannot start %d threads\n", local);
        exit(EXIT_RUNTIME);
      }
    }
    for (int r = 0; r < local; r++)
      pthread_join(th[r], NULL);
  }
  if (failed(h)) return false;
  for (int a = 0; a < s->n_algos; a++) {
    s->us[a] = 1e6 * cf_bench_median(h->loop_s[a], s->loops);
    s->min_us[a] = 1e6 * h->loop_s[a][0]; /* sorted by the median */
  }
  /* the bound: the faster of the two copies (in cache memcpy's, beyond it the
   * streaming one's, which writes without first reading the line) */
  s->copy_us = 0;
  for (int k = 0; k < 2; k++) {
    double us = !s->bound || (k == 1 && !h->dev->ops->copy_stream)
                    ? 0
                    : 1e6 * cf_bench_median(h->copy_s[k], s->loops);
    s->copy_kind_us[k] = us;
    if (us > 0 && (!s->copy_us || us < s->copy_us)) s->copy_us = us;
  }
  return true;
}
