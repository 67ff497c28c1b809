/* transports/threads.c - ranks as threads of one process (the default).
 *
 * Every ordered pair of ranks has a channel: a small ring of message cells
 * the sender fills (pointer, size, a 64-bit key of the collective
 * descriptor) and publishes by storing the cell's sequence word last; the
 * receiver polls that word, so a small message is one cache line. A message
 * is never copied: the receiver gets the sender's pointer and reduces or
 * copies straight from the sender's buffer (single copy), then releases the
 * cell, which is what the sender's send_wait() waits for before it may
 * touch the buffer again. Eager messages (up to 104 bytes) travel inside
 * the cell instead. The full descriptor sits beside the cell and is read
 * only when the keys differ, to name the difference.
 *
 * Waiting spins briefly and then sleeps on the waiting rank's futex
 * doorbell, so oversubscribed runs (8 ranks on 2 cores) do not burn the
 * cores the other ranks need. A sender posts with a plain store and reads
 * the peer's sleeping flag without a fence; the waiter that goes to sleep
 * pays for both sides with membarrier(2) (an asymmetric fence: every
 * running thread of the process passes a full barrier), so the message
 * path has no locked instruction. Without membarrier, both sides fence.
 * Every wait has the run's timeout and watches the world's abort flag: a
 * rank that fails stops all others promptly, and a wait that times out
 * names the peer it was waiting for. The timeout counts the silence of
 * the work waited for: each rank has a counter it bumps while it works
 * through a long local phase (t_beat: a chunk of its inputs' fill, of a
 * first touch), and a sleeping wait publishes whom it waits for; a wait
 * that sees its peer's counter move, or that of the rank its peer waits
 * for and so on (cf_chain_pulse), starts the count again.
 *
 * Placement. The threads that run a rank's work (its compute and its
 * collectives) bind themselves to a CPU of the process's affinity mask, as
 * mpirun binds a process to a core: one CPU per lane where there are two
 * for every rank (so that compute and collectives still overlap), else one
 * per rank, round robin when there are fewer CPUs than ranks
 * (rank_thread; $COLLFUSE_BIND=none leaves them to the scheduler). Ranks
 * that wake each other through futexes look to the scheduler like a
 * producer and its consumer, and its wake-affine placement put both ranks
 * of a two-rank run on one core in about a third of the runs and kept them
 * there: a run of one 8 MiB AllReduce bucket then took 0.89-0.94 ms an
 * iteration instead of 0.41-0.45. On four ranks sharing two cores, rd at
 * 4 KiB took 3.2-3.6 us bound where it took 3.1-3.3 or 4.9-5.3 us unbound.
 */
#define _GNU_SOURCE
#include "../../ir/trace.h"
#include "transports.h"

#include <errno.h>
#include <linux/futex.h>
#include <linux/membarrier.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define CHAN_SLOTS 8  /* messages in flight per ordered pair */
#define EAGER_MAX 104 /* payload bytes a cell carries itself (send_eager) */
#define INLINE_BIT (UINT64_C(1) << 63)

/* One message: two cache lines. The first holds everything a receiver of a
 * small message needs (the publication word, a key of the collective
 * descriptor, the size and the pointer or the first 40 payload bytes), so
 * an 8-byte exchange costs one cache-line transfer each way. The full
 * descriptor is read only when the keys differ, to name the difference. */
typedef struct cell {
  _Alignas(64) _Atomic uint64_t seq; /* message number + 1; stored last */
  uint64_t key;                      /* cf_coll_desc_key() of the descriptor, 0 without one */
  uint64_t bytes;                    /* | INLINE_BIT when the payload is in inl */
  union {
    const void *ptr;
    unsigned char inl[EAGER_MAX];
  } u;
} cell;

typedef struct chan {
  /* the sender's own line */
  _Alignas(64) uint64_t head; /* messages posted */
  uint64_t need;       /* messages send_wait waits for (up to the last one that was not eager) */
  uint64_t acked_seen; /* the last value of acked the sender read */
  _Alignas(64) _Atomic uint64_t acked; /* messages released by the receiver */
  _Alignas(64) uint64_t tail;          /* messages received (receiver only) */
  cell slot[CHAN_SLOTS];
  bool has_desc[CHAN_SLOTS]; /* the full descriptors, read on a key mismatch */
  cf_coll_desc desc[CHAN_SLOTS];
} chan;

typedef struct bell {
  _Alignas(64) _Atomic uint32_t word; /* futex word: bumped on every event for this rank */
  _Atomic int sleeping;
} bell;

typedef struct rank_state {
  _Alignas(64) cf_comm comm; /* (a whole number of lines each: aligned_alloc) */
  int64_t waits_slept; /* statistics */
  _Atomic int left;    /* the rank's thread has returned */
} rank_state;

typedef struct cf_threads_world {
  cf_world base; /* what callers hold (base.impl is this world) */
  int size;
  double timeout_s;
  int spin;          /* polls before sleeping */
  cf_spin_mode spin_mode; /* how they poll */
  bool asym;         /* membarrier(2) fences for the sleepers (see the top) */
  chan *ch;          /* [src * size + dst] */
  bell *bells;       /* [rank] */
  rank_state *ranks; /* [rank] */
  cf_vital *vital;   /* [rank]: its beats (t_beat) and whom it waits for, read by waits on it */
  _Atomic int aborted;
  pthread_mutex_t lock; /* guards msg */
  char msg[1024];
  int *cpus;  /* the CPUs ranks' threads bind to ([rank * lanes + lane]); NULL: none */
  int lanes;  /* 2: a CPU per lane, 1: one per rank */
} cf_threads_world;

/* Publish an event counter (a single writer's): plain with the
 * sleepers' membarrier, else sequentially consistent. */
static void publish(const cf_threads_world *w, _Atomic uint64_t *a, uint64_t v) {
  if (w->asym)
    atomic_store_explicit(a, v, memory_order_release);
  else
    atomic_store(a, v);
}

/* Wake rank if it sleeps. The event (a counter the waiter polls) was
 * stored before this, and the waiter stores its sleeping flag before it
 * polls again (wait_ge), with a full fence between on both sides (the
 * waiter's membarrier, or seq_cst): one of the two sees the other, so a
 * waiter that missed the event is woken, and a polling one costs the
 * sender no write to its cache line. */
static void ring(cf_threads_world *w, int rank) {
  bell *b = &w->bells[rank];
  /* (the orders must be constants: a variable one compiles as seq_cst) */
  int asleep = w->asym ? atomic_load_explicit(&b->sleeping, memory_order_relaxed)
                       : atomic_load(&b->sleeping);
  if (asleep) {
    atomic_fetch_add(&b->word, 1);
    syscall(SYS_futex, &b->word, FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0);
  }
}

static void world_abort(cf_threads_world *w, const char *text) {
  pthread_mutex_lock(&w->lock);
  if (!atomic_load(&w->aborted)) {
    snprintf(w->msg, sizeof w->msg, "%s", text);
    atomic_store(&w->aborted, 1);
  }
  pthread_mutex_unlock(&w->lock);
  for (int r = 0; r < w->size; r++)
    ring(w, r);
}

/* What a rank is waiting for, so a timeout can say so. */
typedef struct wait_what {
  const char *verb; /* "a message from", "rank %d to release" */
  int peer;
  const cf_coll_desc *d;
} wait_what;

static bool rank_gone(void *user, int r) {
  cf_threads_world *w = user;
  return atomic_load(&w->ranks[r].left) != 0;
}

static cf_status stop(cf_comm *c, const wait_what *ww) {
  cf_threads_world *w = c->impl;
  if (atomic_load(&w->aborted)) {
    pthread_mutex_lock(&w->lock);
    cf_status st = cf_error(c->ctx, CF_ERR_RUNTIME, NULL, 0, "%s", w->msg);
    pthread_mutex_unlock(&w->lock);
    return st;
  }
  char text[512];
  cf_wait_timeout_text(text, sizeof text, c->rank, w->timeout_s, ww->verb, ww->peer, ww->d, w->size,
                       w->vital, rank_gone, w);
  world_abort(w, text);
  return cf_error(c->ctx, CF_ERR_RUNTIME, NULL, 0, "%s", text);
}

/* A wait of the transport on the calling thread's trace lane (ir/trace.c). */
static void trace_wait(const char *how, int64_t t0) {
  if (!cf_trace_here) return;
  cf_trace_record(cf_trace_here, &(cf_trace_ev){.t0 = t0, .t1 = cf_trace_clock(), .name = how,
                                                .cat = "transport"});
}

/* Wait until *a >= target. */
static cf_status wait_ge(cf_comm *c, _Atomic uint64_t *a, uint64_t target, const wait_what *ww) {
  cf_threads_world *w = c->impl;
  if (atomic_load_explicit(a, memory_order_acquire) >= target) return CF_OK;
  int64_t t0 = cf_trace_here ? cf_trace_clock() : 0; /* the wait, for the trace */
  /* every rank has a core: poll (a message is usually microseconds away)
   * before sleeping; oversubscribed: yield the core to the rank we wait for */
  bool came = cf_spin_ge(a, target, w->spin, w->spin_mode);
  trace_wait("spin", t0);
  if (came) return CF_OK;
  t0 = cf_trace_here ? cf_trace_clock() : 0;
  bell *b = &w->bells[c->rank];
  /* the timeout counts the silence of the work waited for: a peer still at
   * work (filling its inputs, say) beats, and so does the rank at the end
   * of the chain when the peer itself waits (published here), and their
   * beats start the count again */
  _Atomic int32_t *mine = &w->vital[c->rank].waits_for;
  atomic_store_explicit(mine, ww->peer + 1, memory_order_relaxed);
  cf_patience pat;
  cf_patience_start(&pat, cf_chain_pulse(w->vital, w->size, c->rank, ww->peer), cf_now());
  for (;;) {
    atomic_store(&b->sleeping, 1);
    /* the senders' half of the fence (see the top) */
    if (w->asym) syscall(__NR_membarrier, MEMBARRIER_CMD_PRIVATE_EXPEDITED, 0, 0);
    uint32_t v = atomic_load(&b->word);
    if (atomic_load(a) >= target) break;
    if (atomic_load(&w->aborted)) {
      atomic_store(&b->sleeping, 0);
      atomic_store_explicit(mine, 0, memory_order_relaxed);
      return stop(c, ww);
    }
    double left = cf_patience_left(&pat, cf_chain_pulse(w->vital, w->size, c->rank, ww->peer),
                                   cf_now(), w->timeout_s);
    if (left <= 0) {
      atomic_store(&b->sleeping, 0);
      cf_status st = stop(c, ww);
      atomic_store_explicit(mine, 0, memory_order_relaxed);
      return st;
    }
    if (left > 0.05) left = 0.05; /* wake up now and then to check the clock */
    struct timespec ts = {.tv_sec = 0, .tv_nsec = (long)(left * 1e9)};
    syscall(SYS_futex, &b->word, FUTEX_WAIT_PRIVATE, v, &ts, NULL, 0);
    rank_state *rs = &w->ranks[c->rank];
    rs->waits_slept++;
  }
  atomic_store(&b->sleeping, 0);
  atomic_store_explicit(mine, 0, memory_order_relaxed);
  trace_wait("sleep", t0);
  return CF_OK;
}

static chan *channel(cf_threads_world *w, int src, int dst) {
  return &w->ch[(size_t)src * w->size + dst];
}

/* Wait until the peer released the first target messages of ch (sender
 * side). The last value read is kept, so a sender that is not waiting does
 * not pull the receiver's line over for every message. */
static cf_status wait_acked(cf_comm *c, chan *ch, uint64_t target, const wait_what *ww) {
  if (ch->acked_seen >= target) return CF_OK;
  cf_status st = wait_ge(c, &ch->acked, target, ww);
  if (!st) ch->acked_seen = atomic_load_explicit(&ch->acked, memory_order_acquire);
  return st;
}

/* Post a message to peer: the sender's pointer, or (eager) a copy in the cell. */
static cf_status post(cf_comm *c, int peer, const void *buf, size_t bytes, const cf_coll_desc *d,
                      bool eager) {
  cf_threads_world *w = c->impl;
  chan *ch = channel(w, c->rank, peer);
  uint64_t h = ch->head;
  if (h >= CHAN_SLOTS) {
    wait_what ww = {"a free message slot to", peer, d};
    cf_status st = wait_acked(c, ch, h - CHAN_SLOTS + 1, &ww);
    if (st) return st;
  }
  unsigned i = (unsigned)(h % CHAN_SLOTS);
  cell *m = &ch->slot[i];
  m->key = cf_coll_desc_key(d);
  ch->has_desc[i] = d != NULL;
  if (d) ch->desc[i] = *d;
  if (eager) {
    memcpy(m->u.inl, buf, bytes);
    m->bytes = bytes | INLINE_BIT;
  } else {
    m->u.ptr = buf;
    m->bytes = bytes;
    ch->need = h + 1;
  }
  ch->head = h + 1;
  publish(w, &m->seq, h + 1);
  ring(w, peer);
  return CF_OK;
}

static cf_status t_send(cf_comm *c, int peer, const void *buf, size_t bytes,
                        const cf_coll_desc *d) {
  return post(c, peer, buf, bytes, d, false);
}

static cf_status t_send_eager(cf_comm *c, int peer, const void *buf, size_t bytes,
                              const cf_coll_desc *d) {
  return post(c, peer, buf, bytes, d, bytes <= EAGER_MAX);
}

static cf_status t_recv(cf_comm *c, int peer, void *staging, size_t bytes, const cf_coll_desc *d,
                        const void **data) {
  (void)staging;
  *data = NULL;
  cf_threads_world *w = c->impl;
  chan *ch = channel(w, peer, c->rank);
  unsigned i = (unsigned)(ch->tail % CHAN_SLOTS);
  cell *m = &ch->slot[i];
  wait_what ww = {"a message from", peer, d};
  cf_status st = wait_ge(c, &m->seq, ch->tail + 1, &ww);
  if (st) return st;
  char text[768];
  if (d && m->key && m->key != cf_coll_desc_key(d) && ch->has_desc[i] &&
      cf_coll_desc_mismatch(d, c->rank, &ch->desc[i], peer, text, sizeof text)) {
    world_abort(w, text);
    return cf_error(c->ctx, CF_ERR_RUNTIME, NULL, 0, "%s", text);
  }
  size_t got = (size_t)(m->bytes & ~INLINE_BIT);
  if (got != bytes) {
    cf_coll_size_mismatch(text, sizeof text, c->rank, bytes, peer, (long long)got, d);
    world_abort(w, text);
    return cf_error(c->ctx, CF_ERR_RUNTIME, NULL, 0, "%s", text);
  }
  ch->tail++;
  *data = m->bytes & INLINE_BIT ? (const void *)m->u.inl : m->u.ptr;
  return CF_OK;
}

static cf_status t_release(cf_comm *c, int peer) {
  cf_threads_world *w = c->impl;
  chan *ch = channel(w, peer, c->rank);
  /* the receiver is the only writer of acked */
  uint64_t a = atomic_load_explicit(&ch->acked, memory_order_relaxed);
  publish(w, &ch->acked, a + 1);
  ring(w, peer);
  return CF_OK;
}

static uint64_t t_sent(cf_comm *c, int peer) {
  cf_threads_world *w = c->impl;
  return channel(w, c->rank, peer)->head;
}

static cf_status t_wait_released(cf_comm *c, int peer, uint64_t count) {
  cf_threads_world *w = c->impl;
  wait_what ww = {"the release of a message by", peer, NULL};
  return wait_acked(c, channel(w, c->rank, peer), count, &ww);
}

static cf_status t_send_wait(cf_comm *c) {
  cf_threads_world *w = c->impl;
  for (int p = 0; p < w->size; p++) {
    if (p == c->rank) continue;
    chan *ch = channel(w, c->rank, p);
    wait_what ww = {"the release of a message by", p, NULL};
    cf_status st = wait_acked(c, ch, ch->need, &ww);
    if (st) return st;
  }
  return CF_OK;
}

static void t_abort(cf_comm *c, const char *text) { world_abort(c->impl, text); }

static bool t_aborted(cf_comm *c, const char **text) {
  cf_threads_world *w = c->impl;
  if (!atomic_load(&w->aborted)) return false;
  if (text) *text = w->msg; /* written once, before the flag */
  return true;
}

static void t_beat(cf_comm *c) {
  cf_threads_world *w = c->impl;
  atomic_fetch_add_explicit(&w->vital[c->rank].beat, 1, memory_order_relaxed);
}

static const cf_comm_ops threads_ops = {
    .name = "threads",
    .zero_copy = true,
    .send = t_send,
    .recv = t_recv,
    .release = t_release,
    .sent = t_sent,
    .wait_released = t_wait_released,
    .send_wait = t_send_wait,
    .send_eager = t_send_eager,
    .eager_max = EAGER_MAX,
    .abort = t_abort,
    .aborted = t_aborted,
    .beat = t_beat,
};

static void threads_destroy(cf_world *base, int exit_code);

static cf_status threads_create(cf_context *ctx, int size, double timeout_s, cf_world **out) {
  *out = NULL;
  if (size < 1 || size > CF_MAX_WORLD)
    return cf_error(ctx, CF_ERR_USAGE, NULL, 0, "threads transport: %d ranks (1..%d)", size,
                    CF_MAX_WORLD);
  cf_threads_world *w = calloc(1, sizeof *w);
  if (!w) goto oom;
  w->base =
      (cf_world){.ops = &cf_world_threads, .size = size, .first = 0, .local = size, .impl = w};
  w->size = size;
  w->timeout_s = timeout_s > 0 ? timeout_s : 60;
  long cpus = sysconf(_SC_NPROCESSORS_ONLN);
  w->spin =
      size <= cpus ? 40000 : 64; /* ~1-2 ms of polling; oversubscribed: get off the core soon */
  /* oversubscribed, a wait yields: pausing 256 polls and then sleeping, as
   * COLLFUSE_SHM_SPIN=pause does in the shm world (CF_SPIN_PAUSE), took
   * 13x the time of an 8-byte AllReduce and 2.5x at 64 KiB on 4 ranks and
   * 2 cores (a sleep here pays a membarrier), though 0.6-0.7x at 16-64 MiB
   * (3 alternating runs, load 8-10) */
  w->spin_mode = size <= cpus ? CF_SPIN_CORE : CF_SPIN_YIELD;
  w->asym = syscall(__NR_membarrier, MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED, 0, 0) == 0;
  w->cpus = cf_bind_cpus(size, &w->lanes);
  pthread_mutex_init(&w->lock, NULL);
  w->ch = aligned_alloc(64, sizeof(chan) * (size_t)size * (size_t)size);
  w->bells = aligned_alloc(64, sizeof(bell) * (size_t)size);
  w->ranks = aligned_alloc(64, sizeof(rank_state) * (size_t)size);
  w->vital = calloc((size_t)size, sizeof *w->vital);
  if (!w->ch || !w->bells || !w->ranks || !w->vital) goto oom;
  memset(w->ch, 0, sizeof(chan) * (size_t)size * (size_t)size);
  memset(w->ranks, 0, sizeof(rank_state) * (size_t)size);
  memset(w->bells, 0, sizeof(bell) * (size_t)size);
  for (int r = 0; r < size; r++) {
    cf_comm *c = &w->ranks[r].comm;
    c->ops = &threads_ops;
    c->ctx = ctx;
    c->rank = r;
    c->size = size;
    c->impl = w;
  }
  *out = &w->base;
  return CF_OK;
oom:
  threads_destroy(w ? &w->base : NULL, 0);
  return cf_error(ctx, CF_ERR_NO_MEMORY, NULL, 0, "threads transport: out of memory");
}

static void threads_rank_thread(cf_world *base, int rank, int lane) {
  cf_threads_world *w = base->impl;
  if (rank >= 0 && rank < w->size) cf_bind_thread(w->cpus, w->lanes, rank, lane);
}

static cf_comm *threads_comm(cf_world *base, int rank) {
  cf_threads_world *w = base->impl;
  return rank < 0 || rank >= w->size ? NULL : &w->ranks[rank].comm;
}

static void threads_rank_left(cf_world *base, int rank) {
  cf_threads_world *w = base->impl;
  if (rank < 0 || rank >= w->size) return;
  atomic_store(&w->ranks[rank].left, 1);
  for (int r = 0; r < w->size; r++)
    ring(w, r);
}

static void threads_destroy(cf_world *base, int exit_code) {
  if (!base) return;
  cf_threads_world *w = base->impl;
  free(w->ch);
  free(w->bells);
  free(w->ranks);
  free(w->vital);
  free(w->cpus);
  pthread_mutex_destroy(&w->lock);
  free(w);
}

const cf_world_ops cf_world_threads = {
    .name = "threads",
    .create = threads_create,
    .comm = threads_comm,
    .destroy = threads_destroy,
    .rank_left = threads_rank_left,
    .rank_thread = threads_rank_thread,
};
