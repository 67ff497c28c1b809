/* transports/shm.c - ranks as processes of one host (`--backend shm`).
 *
 * The threads transport's single copy, across processes. Every rank owns a
 * heap: a memfd as large as the host's memory (sparse: only what is touched
 * costs pages; in huge pages where Linux gives them: shm_pages.c), mapped
 * by every rank of the job, out of which the world
 * gives the rank its plan's arena (the slot alloc). So the values that
 * collectives read are in memory every peer maps, and a message is an
 * offset into the sender's heap: the receiver reduces or copies straight
 * from the sender's buffer, as a thread of one process would (rsag_put
 * even writes its chunk into the peers' outputs). The executor therefore
 * never hands this world a caller's buffer for a collective: on a world
 * that gives memory it copies caller inputs and buckets into the arena and
 * results out (exec.c's world_memory). What else is sent from outside the
 * heap (the fingerprint table, a benchmark's pointer exchange) is only
 * read: it goes through a bounce buffer of the sender's heap, one per
 * message slot, copied at send (a peer's writes there would be lost).
 * Measured on this machine, 2 processes: memcpy from a peer's shared
 * mapping moves 74/46/16.6/16.4 GB/s at 64K/1M/16M/64M where cross-memory
 * attach (process_vm_readv) moves 11.1/11.7/3.6/3.5, and CMA would need a
 * staging copy before every reduction besides: hence the heaps.
 *
 * The channels, doorbells and the abort word live in one more memfd, the
 * control segment, made by rank 0: the threads transport's cells and
 * spin-then-sleep waits, with shared futexes (FUTEX_WAIT/WAKE without
 * FUTEX_PRIVATE) and sequentially consistent stores on both sides
 * (membarrier's private asymmetric fence does not cross processes; its
 * global expedited one, which does, measured level: docs/executor.md). Descriptors
 * travel with their group and node names inline, so a mismatch names both
 * ranks on every rank (exit 3).
 *
 * Start-up: rank 0 listens on a Unix socket in the abstract namespace
 * named after the user and the job (shm_env.c), the others connect (until
 * the timeout) and send their heap's descriptor with SCM_RIGHTS, their pid
 * and their host's identity (shm_host.c); rank 0 checks each peer's uid
 * (SO_PEERCRED) and, once all have come, that they are on its host (a job
 * that is not is refused by every rank naming the hosts and their ranks;
 * where the launcher gives a TCP address the ranks have met there first,
 * so that a rank on another host is named, not waited for), and sends
 * everyone the control segment,
 * every heap, a random token and the pids. A rank checks the token and the
 * job in the control segment before it uses it. Ranks of different builds
 * (another layout of the control segment and the start-up messages: MAGIC's
 * "CFSHM<version>") fail at once, naming the ranks and both versions: every
 * hello starts with (magic, rank, size, pid) and every welcome with (magic,
 * token, job, ok, code, text), in every version from CFSHM4 on, so rank 0
 * reads a hello's magic before the rest and answers another version with a
 * refusal in the prefix it reads (its own magic echoed: a CFSHM4 rank
 * reports the text), and a joining rank whose hello an older rank 0 closed
 * without a word (CFSHM4 closed what it did not know) says so. memfds have no name: there
 * is nothing in /dev/shm or anywhere else to remove, whatever way the job
 * ends (SIGKILL of every rank included): the kernel frees the memory with
 * the last mapping. The socket is gone once every rank has attached.
 *
 * A rank that dies is seen through a pidfd of every peer (pidfd_open(2)):
 * a wait that has gone to sleep wakes at least every 50 ms, polls them and,
 * when one has ended without leaving (rank_left), aborts the world naming
 * it; a rank that fails sets the shared abort word with its message first.
 * So every other rank stops well within its timeout. A heartbeat would need
 * the dead rank's silence to last a timeout; a robust mutex only tells the
 * rank that next locks it. The timeout itself counts silence, not work:
 * each rank has a counter in the control segment that it bumps while it
 * works through a long local phase (s_beat), and a wait on it starts its
 * count again whenever that moves (a rank still filling 4 GiB of inputs is
 * waited for; one stuck for the timeout is named); a sleeping wait
 * publishes whom it waits for beside it, so a wait on a rank that waits
 * for a third at work follows that chain (cf_chain_pulse) and waits too.
 */
#define _GNU_SOURCE
#include "transports.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/futex.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#ifndef SYS_pidfd_open
#define SYS_pidfd_open 434
#endif

#define CHAN_SLOTS 8
#define EAGER_MAX 104
#define INLINE_BIT (UINT64_C(1) << 63)
#define MAGIC UINT64_C(0x364d48534643) /* "CFSHM6": the layout (beats, waits, regions, probe) */
#define NAME_MAX_SHM 64                /* group and node names a descriptor carries */
#define PAGE 4096

typedef struct scell {
  _Alignas(64) _Atomic uint64_t seq; /* message number + 1; stored last */
  uint64_t key;                      /* cf_coll_desc_key(), 0 without a descriptor */
  uint64_t bytes;                    /* | INLINE_BIT when the payload is in inl */
  union {
    uint64_t off; /* in the sender's heap (ref.region 0) */
    struct {
      uint64_t off;    /* in the region, or the heap */
      uint64_t gen;    /* the region's generation */
      uint32_t region; /* 0: the heap; slot + 1 of the sender's registered memory */
    } ref;
    unsigned char inl[EAGER_MAX];
  } u;
} scell;

typedef struct sdesc { /* a descriptor with its names inline */
  cf_coll_desc d;      /* d.group and d.node are the sender's pointers: never read */
  int32_t has;
  char group[NAME_MAX_SHM], node[NAME_MAX_SHM];
} sdesc;

typedef struct schan { /* sender -> receiver, in the control segment */
  _Alignas(64) _Atomic uint64_t acked; /* messages released by the receiver */
  scell slot[CHAN_SLOTS];
  sdesc desc[CHAN_SLOTS];
} schan;

typedef struct sbell {
  _Alignas(64) _Atomic uint32_t word; /* futex word: bumped on every event for this rank */
  _Atomic int32_t sleeping;
} sbell;

typedef struct shead { /* the control segment's first bytes */
  uint64_t magic, token, job;
  int32_t size;
  _Atomic int32_t attached;
  _Atomic int32_t aborted; /* 0, 1: being written, 2: msg is there */
  char msg[1024];
  _Atomic int32_t left[CF_MAX_WORLD];
  int32_t pid[CF_MAX_WORLD];
  /* cf_world_max: rank r's values in maxv[r], then a counter per round */
  _Atomic uint64_t max_round[CF_MAX_WORLD];
  double maxv[CF_MAX_WORLD][8];
  cf_vital vital[CF_MAX_WORLD];   /* each rank's beats (s_beat) and whom it waits for */
  int32_t probe_fd[CF_MAX_WORLD]; /* start-up: a descriptor each rank holds, for probe_regions */
} shead;

typedef struct extent {
  size_t off, len;
} extent;

typedef struct cf_shm_world {
  cf_world base;
  cf_comm comm; /* this process's rank */
  cf_context *ctx;
  int size, me;
  double timeout_s;
  int spin;               /* polls before a wait sleeps */
  int cores;              /* the CPUs the ranks share (COLLFUSE_SHM_CORES, else this process's) */
  cf_spin_mode spin_mode; /* how they poll */
  char host[256];
  shead *head;
  size_t ctl_bytes;
  sbell *bells;
  schan *ch;              /* [src * size + dst] */
  char **heap;            /* [rank]: every rank's heap as mapped here */
  cf_shm_regions regions; /* the ranks' registered memory (shm_regions.c) */
  cf_shm_hold *hold;      /* [peer * CHAN_SLOTS + slot]: a received message's pages to let go at release */
  char no_regions[512];   /* why a rank cannot open another's memory (probe_regions); "": they can */
  _Atomic bool warned;    /* no_regions was said once (shm_shares) */
  size_t heap_bytes;      /* each heap's size */
  int *pidfd;             /* [rank], -1 for none */
  uint64_t *head_n, *need, *acked_seen, *tail; /* [peer]: this rank's counters */
  size_t *bounce_off, *bounce_cap;            /* [peer * CHAN_SLOTS + slot] */
  uint64_t max_rounds;
  pthread_mutex_t lock; /* the heap's free list and its allocations */
  extent *free_list;
  int n_free, cap_free;
  extent *live; /* shm_alloc's allocations (their sizes, for shm_free): none kept in the heap */
  int n_live, cap_live;
  size_t fresh; /* the heap's bytes from here on were never handed out: still the memfd's zeros */
  int *cpus, lanes;
  char job[160];
  int refs; /* joins of this job by this process (joined, below) */
  bool launched; /* joined from the launcher's variables (shm_create) */
  struct cf_shm_world *next;
} cf_shm_world;

/* The worlds this process has joined: a second join of the same job, rank
 * and size (another executable of the C API) shares the first's world, so
 * the job meets once and the ranks' messages keep one order. */
static pthread_mutex_t joined_lock = PTHREAD_MUTEX_INITIALIZER;
static cf_shm_world *joined_worlds;

/* ================= the heap: this rank's memfd, first fit ================= */

/* An extent of bytes (a page multiple); *fresh (may be NULL): where the
 * never handed out bytes began before it (cf_shm_world.fresh). */
static size_t heap_alloc(cf_shm_world *w, size_t bytes, size_t *fresh) {
  size_t need = (bytes + PAGE - 1) / PAGE * PAGE, got = SIZE_MAX;
  if (!need) need = PAGE;
  pthread_mutex_lock(&w->lock);
  for (int i = 0; i < w->n_free; i++)
    if (w->free_list[i].len >= need) {
      got = w->free_list[i].off;
      w->free_list[i].off += need;
      w->free_list[i].len -= need;
      if (!w->free_list[i].len) {
        memmove(&w->free_list[i], &w->free_list[i + 1], sizeof *w->free_list * (size_t)(w->n_free - i - 1));
        w->n_free--;
      }
      break;
    }
  if (fresh) *fresh = w->fresh;
  if (got != SIZE_MAX && got + need > w->fresh) w->fresh = got + need;
  pthread_mutex_unlock(&w->lock);
  return got;
}

/* Return the extent to the free list, merged with its neighbours. Its pages
 * stay in the memfd: the C API allocates and frees a plan's arena on every
 * cf_executable_run_rank, and punching them out (MADV_REMOVE) made each call
 * fault in and have the kernel zero the whole arena again (6-8x slower at
 * 25 MiB); shm_alloc zeroes with memset instead. The heap goes with the world. */
static void heap_free(cf_shm_world *w, size_t off, size_t bytes) {
  size_t len = (bytes + PAGE - 1) / PAGE * PAGE;
  if (!len) len = PAGE;
  pthread_mutex_lock(&w->lock);
  int i = 0;
  while (i < w->n_free && w->free_list[i].off < off) i++;
  bool prev = i > 0 && w->free_list[i - 1].off + w->free_list[i - 1].len == off;
  bool next = i < w->n_free && off + len == w->free_list[i].off;
  if (prev && next) {
    w->free_list[i - 1].len += len + w->free_list[i].len;
    memmove(&w->free_list[i], &w->free_list[i + 1], sizeof *w->free_list * (size_t)(w->n_free - i - 1));
    w->n_free--;
  } else if (prev) {
    w->free_list[i - 1].len += len;
  } else if (next) {
    w->free_list[i].off = off;
    w->free_list[i].len += len;
  } else {
    if (w->n_free == w->cap_free) {
      int cap = w->cap_free ? 2 * w->cap_free : 16;
      extent *f = realloc(w->free_list, sizeof *f * (size_t)cap);
      if (!f) { /* the extent is lost to this run, not to the machine: its pages were given back */
        pthread_mutex_unlock(&w->lock);
        return;
      }
      w->free_list = f;
      w->cap_free = cap;
    }
    memmove(&w->free_list[i + 1], &w->free_list[i], sizeof *w->free_list * (size_t)(w->n_free - i));
    w->free_list[i] = (extent){off, len};
    w->n_free++;
  }
  pthread_mutex_unlock(&w->lock);
}

/* The allocation's size is kept in w->live, not in the heap: a page of
 * the heap written for it alone (it was the page before the allocation)
 * cost a whole 2 MiB page of the heap's huge pages for every allocation,
 * most of them arenas a run never touches (an in-place AllReduce of
 * registered memory: its arena's blocks for the caller's buffer; ResNet-18's
 * steps under compile_step kept 12 MiB of such pages per rank). Zeroed, as the
 * slot promises: by memset where the heap handed the bytes out before
 * (heap_free keeps their pages), while bytes never handed out are the
 * memfd's own zeros and cost no page until touched (a run's arena block
 * for a caller buffer that lies in registered memory never is). */
static void *shm_alloc(cf_world *base, size_t bytes) {
  cf_shm_world *w = base->impl;
  size_t fresh, off = heap_alloc(w, bytes, &fresh);
  if (off == SIZE_MAX) return NULL;
  pthread_mutex_lock(&w->lock);
  if (w->n_live == w->cap_live) {
    int cap = w->cap_live ? 2 * w->cap_live : 16;
    extent *l = realloc(w->live, sizeof *l * (size_t)cap);
    if (l) {
      w->live = l;
      w->cap_live = cap;
    }
  }
  bool noted = w->n_live < w->cap_live;
  if (noted) w->live[w->n_live++] = (extent){off, bytes};
  pthread_mutex_unlock(&w->lock);
  if (!noted) {
    heap_free(w, off, bytes);
    return NULL;
  }
  char *p = w->heap[w->me] + off;
  /* zeroed, as the slot promises (heap_free): only the extents handed out
   * before (fresh pages are zero); slow for GiBs, so a beat every 64 MiB */
  size_t used = fresh > off ? fresh - off : 0;
  if (used > bytes) used = bytes;
  for (size_t at = 0, step = (size_t)64 << 20; at < used; at += step) {
    memset(p + at, 0, used - at < step ? used - at : step);
    cf_beat();
  }
  return p;
}

static bool in_heap(const cf_shm_world *w, const void *p) {
  const char *c = p, *h = w->heap[w->me];
  return c >= h && c < h + w->heap_bytes;
}

static bool shm_free(cf_world *base, void *p) {
  cf_shm_world *w = base->impl;
  if (!p || !in_heap(w, p)) return false;
  size_t off = (size_t)((char *)p - w->heap[w->me]), bytes = SIZE_MAX;
  pthread_mutex_lock(&w->lock);
  for (int i = w->n_live - 1; i >= 0; i--) /* newest first: a run's arena is freed soon after its alloc */
    if (w->live[i].off == off) {
      bytes = w->live[i].len;
      w->live[i] = w->live[--w->n_live];
      break;
    }
  pthread_mutex_unlock(&w->lock);
  if (bytes != SIZE_MAX) heap_free(w, off, bytes);
  return true;
}

/* ================= waits, abort, death ================= */

static void ring(cf_shm_world *w, int rank) {
  sbell *b = &w->bells[rank];
  if (atomic_load(&b->sleeping)) {
    atomic_fetch_add(&b->word, 1);
    syscall(SYS_futex, &b->word, FUTEX_WAKE, 1, NULL, NULL, 0);
  }
}

static void world_abort(cf_shm_world *w, const char *text) {
  int32_t zero = 0;
  if (atomic_compare_exchange_strong(&w->head->aborted, &zero, 1)) {
    snprintf(w->head->msg, sizeof w->head->msg, "%s", text);
    atomic_store(&w->head->aborted, 2);
  }
  for (int r = 0; r < w->size; r++)
    ring(w, r);
}

/* The abort message once it is written (a writer that died half way: a
 * word of our own). */
static const char *abort_text(cf_shm_world *w) {
  for (int i = 0; i < 1000 && atomic_load(&w->head->aborted) == 1; i++)
    sched_yield();
  return atomic_load(&w->head->aborted) == 2 ? w->head->msg : "another rank stopped the run";
}

/* A peer whose process has ended without leaving the run: abort naming it. */
static bool check_dead(cf_shm_world *w) {
  for (int r = 0; r < w->size; r++) {
    if (w->pidfd[r] < 0 || atomic_load(&w->head->left[r])) continue;
    struct pollfd pf = {.fd = w->pidfd[r], .events = POLLIN};
    bool dead = w->pidfd[r] >= 0 ? poll(&pf, 1, 0) == 1 : false;
    if (!dead) continue;
    char text[256];
    snprintf(text, sizeof text,
             "rank %d (pid %d) died: its process ended in the middle of the run (killed?)", r,
             (int)w->head->pid[r]);
    world_abort(w, text);
    return true;
  }
  return false;
}

typedef struct wait_what {
  const char *verb;
  int peer;
  const cf_coll_desc *d;
} wait_what;

static bool rank_gone(void *user, int r) {
  cf_shm_world *w = user;
  return atomic_load(&w->head->left[r]) != 0;
}

static cf_status stop(cf_shm_world *w, const wait_what *ww) {
  cf_context *ctx = w->comm.ctx ? w->comm.ctx : w->ctx;
  if (atomic_load(&w->head->aborted) || check_dead(w))
    return cf_error(ctx, CF_ERR_RUNTIME, NULL, 0, "%s", abort_text(w));
  char text[512];
  cf_wait_timeout_text(text, sizeof text, w->me, w->timeout_s, ww->verb, ww->peer, ww->d, w->size,
                       w->head->vital, rank_gone, w);
  world_abort(w, text);
  return cf_error(ctx, CF_ERR_RUNTIME, NULL, 0, "%s", text);
}

/* Wait until *a >= target (threads.c's spin, then sleep on the bell). */
static cf_status wait_ge(cf_shm_world *w, _Atomic uint64_t *a, uint64_t target, const wait_what *ww,
                         bool sleep_now) {
  if (atomic_load_explicit(a, memory_order_acquire) >= target) return CF_OK;
  if (!sleep_now && cf_spin_ge(a, target, w->spin, w->spin_mode)) return CF_OK;
  sbell *b = &w->bells[w->me];
  /* the timeout counts the silence of the work waited for: the peer's
   * beats and, while it waits itself, those down its chain of waits
   * (threads.c's wait_ge) */
  _Atomic int32_t *mine = &w->head->vital[w->me].waits_for;
  atomic_store_explicit(mine, ww->peer + 1, memory_order_relaxed);
  cf_patience pat;
  cf_patience_start(&pat, cf_chain_pulse(w->head->vital, w->size, w->me, ww->peer), cf_now());
  for (;;) {
    atomic_store(&b->sleeping, 1);
    uint32_t v = atomic_load(&b->word);
    if (atomic_load(a) >= target) break;
    double left = cf_patience_left(&pat, cf_chain_pulse(w->head->vital, w->size, w->me, ww->peer),
                                   cf_now(), w->timeout_s);
    if (atomic_load(&w->head->aborted) || check_dead(w) || left <= 0) {
      atomic_store(&b->sleeping, 0);
      cf_status st = stop(w, ww);
      atomic_store_explicit(mine, 0, memory_order_relaxed);
      return st;
    }
    if (left > 0.05) left = 0.05; /* wake up now and then: the clock, and the peers' pidfds */
    struct timespec ts = {.tv_sec = 0, .tv_nsec = (long)(left * 1e9)};
    syscall(SYS_futex, &b->word, FUTEX_WAIT, v, &ts, NULL, 0);
  }
  atomic_store(&b->sleeping, 0);
  atomic_store_explicit(mine, 0, memory_order_relaxed);
  return CF_OK;
}

static schan *channel(cf_shm_world *w, int src, int dst) {
  return &w->ch[(size_t)src * (size_t)w->size + (size_t)dst];
}

static cf_status wait_acked(cf_shm_world *w, int peer, uint64_t target, const wait_what *ww,
                            bool sleep_now) {
  if (w->acked_seen[peer] >= target) return CF_OK;
  cf_status st = wait_ge(w, &channel(w, w->me, peer)->acked, target, ww, sleep_now);
  if (!st) w->acked_seen[peer] = atomic_load(&channel(w, w->me, peer)->acked);
  return st;
}

/* ================= messages ================= */

/* A name into a descriptor's slot, cut to NAME_MAX_SHM - 1 bytes. On
 * every message, so not snprintf: two of them per message were 13% of a
 * 2-process 8-byte AllReduce's profile, more than post, recv and release
 * together (the rest is the polls). */
static void name_in(char dst[NAME_MAX_SHM], const char *src) {
  size_t n = strnlen(src, NAME_MAX_SHM - 1);
  memcpy(dst, src, n);
  dst[n] = 0;
}

static cf_status post(cf_comm *c, int peer, const void *buf, size_t bytes, const cf_coll_desc *d,
                      bool eager) {
  cf_shm_world *w = c->impl;
  schan *ch = channel(w, w->me, peer);
  uint64_t h = w->head_n[peer];
  if (h >= CHAN_SLOTS) {
    wait_what ww = {"a free message slot to", peer, d};
    cf_status st = wait_acked(w, peer, h - CHAN_SLOTS + 1, &ww, false);
    if (st) return st;
  }
  unsigned i = (unsigned)(h % CHAN_SLOTS);
  scell *m = &ch->slot[i];
  sdesc *sd = &ch->desc[i];
  m->key = cf_coll_desc_key(d);
  sd->has = d != NULL;
  if (d) {
    sd->d = *d;
    name_in(sd->group, d->group ? d->group : "");
    name_in(sd->node, d->node ? d->node : "?");
  }
  if (eager) {
    memcpy(m->u.inl, buf, bytes);
    m->bytes = bytes | INLINE_BIT;
  } else {
    uint32_t slot;
    m->u.ref.region = 0;
    if (!in_heap(w, buf) && bytes &&
        cf_shm_regions_name(&w->regions, buf, bytes, &slot, &m->u.ref.gen, &m->u.ref.off)) {
      m->u.ref.region = slot + 1; /* the caller's registered memory: read (and written) in place */
    } else if (!in_heap(w, buf) && bytes) { /* a caller's buffer: through this slot's bounce buffer */
      size_t k = (size_t)peer * CHAN_SLOTS + i;
      if (w->bounce_cap[k] < bytes) {
        if (w->bounce_cap[k]) heap_free(w, w->bounce_off[k], w->bounce_cap[k]);
        w->bounce_cap[k] = 0;
        size_t off = heap_alloc(w, bytes, NULL);
        if (off == SIZE_MAX)
          return cf_error(c->ctx, CF_ERR_NO_MEMORY, NULL, 0,
                          "shm transport: no room in rank %d's heap for a %zu-byte message", w->me,
                          bytes);
        w->bounce_off[k] = off;
        w->bounce_cap[k] = (bytes + PAGE - 1) / PAGE * PAGE;
      }
      memcpy(w->heap[w->me] + w->bounce_off[k], buf, bytes);
      m->u.off = w->bounce_off[k];
    } else {
      m->u.off = bytes ? (uint64_t)((const char *)buf - w->heap[w->me]) : 0;
    }
    m->bytes = bytes;
    w->need[peer] = h + 1;
  }
  w->head_n[peer] = h + 1;
  atomic_store(&m->seq, h + 1);
  ring(w, peer);
  return CF_OK;
}

static cf_status s_send(cf_comm *c, int peer, const void *buf, size_t bytes, const cf_coll_desc *d) {
  return post(c, peer, buf, bytes, d, false);
}

static cf_status s_send_eager(cf_comm *c, int peer, const void *buf, size_t bytes,
                              const cf_coll_desc *d) {
  return post(c, peer, buf, bytes, d, bytes <= EAGER_MAX);
}

static cf_status recv_msg(cf_comm *c, int peer, size_t bytes, const cf_coll_desc *d, const void **data,
                         bool sleep_now) {
  *data = NULL;
  cf_shm_world *w = c->impl;
  schan *ch = channel(w, peer, w->me);
  unsigned i = (unsigned)(w->tail[peer] % CHAN_SLOTS);
  scell *m = &ch->slot[i];
  wait_what ww = {"a message from", peer, d};
  cf_status st = wait_ge(w, &m->seq, w->tail[peer] + 1, &ww, sleep_now);
  if (st) return st;
  char text[768];
  sdesc *sd = &ch->desc[i];
  /* a descriptor on one side only: one rank checks its plan before a run
   * while the other runs a collective (a kept rank skips the checks) */
  /* m->key is 0 exactly when the sender gave no descriptor (sd->has): the
   * check reads only the cell's line, which the wait brought here, and the
   * lines of sd stay in the sender's cache unless something differs */
  if ((d || m->key) && (!d || !m->key || m->key != cf_coll_desc_key(d))) {
    cf_coll_desc theirs = sd->d;
    theirs.group = sd->group;
    theirs.node = sd->node;
    if (cf_coll_desc_mismatch(d, w->me, sd->has ? &theirs : NULL, peer, text, sizeof text)) {
      world_abort(w, text);
      return cf_error(c->ctx, CF_ERR_RUNTIME, NULL, 0, "%s", text);
    }
  }
  size_t got = (size_t)(m->bytes & ~INLINE_BIT);
  bool inl = (m->bytes & INLINE_BIT) != 0;
  bool reg = !inl && m->u.ref.region;
  if (got != bytes || (!inl && !reg && (m->u.off > w->heap_bytes || got > w->heap_bytes - m->u.off))) {
    cf_coll_size_mismatch(text, sizeof text, w->me, bytes, peer, (long long)got, d);
    world_abort(w, text);
    return cf_error(c->ctx, CF_ERR_RUNTIME, NULL, 0, "%s", text);
  }
  const void *p = inl ? (const void *)m->u.inl : (const void *)(w->heap[peer] + m->u.off);
  if (reg) {
    p = cf_shm_regions_peer(&w->regions, peer, m->u.ref.region - 1, m->u.ref.gen, m->u.ref.off, got,
                            &w->hold[(size_t)peer * CHAN_SLOTS + i], text, sizeof text);
    if (!p) {
      world_abort(w, text);
      return cf_error(c->ctx, CF_ERR_RUNTIME, NULL, 0, "%s", text);
    }
  }
  w->tail[peer]++;
  *data = p;
  return CF_OK;
}

static cf_status s_recv(cf_comm *c, int peer, void *staging, size_t bytes, const cf_coll_desc *d,
                        const void **data) {
  (void)staging;
  return recv_msg(c, peer, bytes, d, data, false);
}

static cf_status s_recv_sleep(cf_comm *c, int peer, void *staging, size_t bytes,
                              const cf_coll_desc *d, const void **data) {
  (void)staging;
  return recv_msg(c, peer, bytes, d, data, true);
}

/* The pages of the message of peer's that handed [p, p + bytes) out (the
 * first unreleased one that holds p) may go. */
static void s_let_go(cf_comm *c, int peer, const void *p, size_t bytes) {
  cf_shm_world *w = c->impl;
  for (int i = 0; i < CHAN_SLOTS; i++) {
    cf_shm_hold *h = &w->hold[(size_t)peer * CHAN_SLOTS + (size_t)i];
    if (h->lo && (const char *)p >= h->lo && (const char *)p < h->hi) {
      cf_shm_regions_let_go_part(&w->regions, h, p, bytes);
      return;
    }
  }
}

static cf_status s_release(cf_comm *c, int peer) {
  cf_shm_world *w = c->impl;
  schan *ch = channel(w, peer, w->me);
  /* the message released is the oldest one not released yet */
  uint64_t k = atomic_load_explicit(&ch->acked, memory_order_relaxed) % CHAN_SLOTS;
  cf_shm_regions_let_go(&w->regions, &w->hold[(size_t)peer * CHAN_SLOTS + k]);
  atomic_store(&ch->acked, atomic_load_explicit(&ch->acked, memory_order_relaxed) + 1);
  ring(w, peer);
  return CF_OK;
}

static uint64_t s_sent(cf_comm *c, int peer) {
  cf_shm_world *w = c->impl;
  return w->head_n[peer];
}

static cf_status s_wait_released(cf_comm *c, int peer, uint64_t count) {
  wait_what ww = {"the release of a message by", peer, NULL};
  return wait_acked(c->impl, peer, count, &ww, false);
}

static cf_status send_wait(cf_comm *c, bool sleep_now) {
  cf_shm_world *w = c->impl;
  for (int p = 0; p < w->size; p++) {
    if (p == w->me) continue;
    wait_what ww = {"the release of a message by", p, NULL};
    cf_status st = wait_acked(w, p, w->need[p], &ww, sleep_now);
    if (st) return st;
  }
  return CF_OK;
}

static cf_status s_send_wait(cf_comm *c) { return send_wait(c, false); }

static cf_status s_send_sleep(cf_comm *c) { return send_wait(c, true); }

static void s_abort(cf_comm *c, const char *text) { world_abort(c->impl, text); }

static bool s_aborted(cf_comm *c, const char **text) {
  cf_shm_world *w = c->impl;
  if (!atomic_load(&w->head->aborted)) return false;
  if (text) *text = abort_text(w);
  return true;
}

static void s_beat(cf_comm *c) {
  cf_shm_world *w = c->impl;
  atomic_fetch_add_explicit(&w->head->vital[w->me].beat, 1, memory_order_relaxed);
}

static const cf_comm_ops shm_ops = {
    .name = "shm",
    .zero_copy = true,
    .send = s_send,
    .recv = s_recv,
    .release = s_release,
    .sent = s_sent,
    .wait_released = s_wait_released,
    .send_wait = s_send_wait,
    .send_sleep = s_send_sleep,
    .recv_sleep = s_recv_sleep,
    .send_eager = s_send_eager,
    .eager_max = EAGER_MAX,
    .abort = s_abort,
    .aborted = s_aborted,
    .beat = s_beat,
    .let_go = s_let_go,
};

/* ================= start-up: the rendezvous ================= */

typedef struct hello { /* what a rank tells rank 0; CFSHM4's size and prefix */
  uint64_t magic;
  int32_t rank, size, pid; /* the prefix every version sends (HELLO_PREFIX) */
  cf_shm_host host; /* shm_host.c */
  uint64_t heap_bytes;
} hello;
#define HELLO_PREFIX offsetof(hello, host)

typedef struct welcome { /* what rank 0 answers */
  uint64_t magic, token, job;
  int32_t ok;   /* 0: text says why not */
  int32_t code; /* with ok 0: the cf_status every rank fails with */
  char text[1024]; /* the prefix every version sends (WELCOME_PREFIX) */
  int32_t pid[CF_MAX_WORLD];
  uint64_t ctl_bytes, heap_bytes;
} welcome;
#define WELCOME_PREFIX offsetof(welcome, pid)

/* MAGIC's family: a collfuse shm world of some version ("CFSHM" then a
 * version); layout() names one ("CFSHM4"), or gives it in hex. */
#define MAGIC_FAMILY UINT64_C(0x4d48534643)
static bool same_family(uint64_t m) { return (m & UINT64_C(0xffffffffff)) == MAGIC_FAMILY && !(m >> 56); }
static const char *layout(uint64_t m, char *buf, size_t len) {
  if (!same_family(m)) {
    snprintf(buf, len, "0x%llx", (unsigned long long)m);
    return buf;
  }
  size_t n = 0;
  for (int i = 0; i < 8 && n + 1 < len && (m >> (8 * i)) & 0xff; i++) {
    unsigned char c = (unsigned char)(m >> (8 * i));
    buf[n++] = c >= 0x20 && c < 0x7f ? (char)c : '?';
  }
  buf[n] = 0;
  return buf;
}

static uint64_t fnv(const char *s) {
  uint64_t h = UINT64_C(1469598103934665603);
  for (; *s; s++)
    h = (h ^ (unsigned char)*s) * UINT64_C(1099511628211);
  return h;
}

/* The job's socket address: abstract, named after the uid and the job. */
static socklen_t job_addr(struct sockaddr_un *a, const char *job) {
  memset(a, 0, sizeof *a);
  a->sun_family = AF_UNIX;
  int n = snprintf(a->sun_path + 1, sizeof a->sun_path - 1, "collfuse-shm.%u.%016llx",
                   (unsigned)getuid(), (unsigned long long)fnv(job));
  return (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + (size_t)n);
}

/* Send or receive the whole of buf with fds riding on the first byte; within deadline. */
static bool xfer(int s, bool out, void *buf, size_t len, int *fds, int nfd, double deadline) {
  size_t done = 0;
  while (done < len) {
    struct pollfd pf = {.fd = s, .events = out ? POLLOUT : POLLIN};
    double left = deadline - cf_now();
    if (left <= 0 || poll(&pf, 1, (int)(left * 1000) + 1) <= 0) {
      if (left <= 0) return false;
      continue;
    }
    struct iovec iov = {(char *)buf + done, len - done};
    union {
      char b[CMSG_SPACE(sizeof(int) * 64)];
      struct cmsghdr align;
    } u;
    struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1};
    if (nfd && !done) {
      mh.msg_control = u.b;
      mh.msg_controllen = CMSG_SPACE(sizeof(int) * (size_t)nfd);
      if (out) {
        struct cmsghdr *cm = CMSG_FIRSTHDR(&mh);
        cm->cmsg_level = SOL_SOCKET;
        cm->cmsg_type = SCM_RIGHTS;
        cm->cmsg_len = CMSG_LEN(sizeof(int) * (size_t)nfd);
        memcpy(CMSG_DATA(cm), fds, sizeof(int) * (size_t)nfd);
      }
    }
    ssize_t k = out ? sendmsg(s, &mh, MSG_NOSIGNAL) : recvmsg(s, &mh, MSG_CMSG_CLOEXEC);
    if (k < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (k <= 0) return false;
    if (!out && nfd && !done) {
      int got = 0;
      for (struct cmsghdr *cm = CMSG_FIRSTHDR(&mh); cm; cm = CMSG_NXTHDR(&mh, cm))
        if (cm->cmsg_level == SOL_SOCKET && cm->cmsg_type == SCM_RIGHTS) {
          got = (int)((cm->cmsg_len - CMSG_LEN(0)) / sizeof(int));
          memcpy(fds, CMSG_DATA(cm), sizeof(int) * (size_t)(got < nfd ? got : nfd));
        }
      if (got != nfd) return false;
    }
    done += (size_t)k;
  }
  return true;
}

/* Every fd of fds, 64 to a message, after the message itself. */
static bool send_fds(int s, int *fds, int n, double deadline) {
  for (int i = 0; i < n; i += 64) {
    int k = n - i < 64 ? n - i : 64;
    char one = 0;
    if (!xfer(s, true, &one, 1, fds + i, k, deadline)) return false;
  }
  return true;
}

static bool recv_fds(int s, int *fds, int n, double deadline) {
  for (int i = 0; i < n; i += 64) {
    int k = n - i < 64 ? n - i : 64;
    char one;
    if (!xfer(s, false, &one, 1, fds + i, k, deadline)) return false;
  }
  return true;
}

static void shm_destroy(cf_world *base, int exit_code);
static cf_status shm_max(cf_world *base, double *v, int n);

static size_t ctl_size(int n) {
  size_t b = (sizeof(shead) + 63) / 64 * 64;
  b += sizeof(sbell) * (size_t)n;
  b += sizeof(schan) * (size_t)n * (size_t)n;
  b += sizeof(cf_shm_region) * (size_t)n * CF_SHM_REGIONS;
  return (b + PAGE - 1) / PAGE * PAGE;
}

static cf_status map_ctl(cf_shm_world *w, int fd) {
  w->ctl_bytes = ctl_size(w->size);
  void *p = mmap(NULL, w->ctl_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED)
    return cf_error(w->ctx, CF_ERR_NO_MEMORY, NULL, 0, "shm transport: cannot map the control segment: %s",
                    strerror(errno));
  w->head = p;
  w->bells = (sbell *)((char *)p + (sizeof(shead) + 63) / 64 * 64);
  w->ch = (schan *)(w->bells + w->size);
  cf_shm_region *table = (cf_shm_region *)(w->ch + (size_t)w->size * (size_t)w->size);
  if (cf_shm_regions_init(&w->regions, table, w->head->pid, w->size, w->me))
    return cf_error(w->ctx, CF_ERR_NO_MEMORY, NULL, 0, "out of memory");
  return CF_OK;
}

/* Rank 0's no to a rank: welcome's prefix (magic: the rank's version's) with why. */
static void refuse(int s, uint64_t magic, cf_status code, const char *why, double deadline) {
  welcome no = {.magic = magic, .ok = 0, .code = code == CF_ERR_USAGE ? CF_ERR_USAGE : CF_ERR_RUNTIME};
  snprintf(no.text, sizeof no.text, "%s", why);
  xfer(s, true, &no, sizeof no, NULL, 0, deadline);
}

/* Rank 0: take every other rank's hello and heap, answer them all. */
static cf_status host_job(cf_shm_world *w, const char *job, int ctl_fd, int *heap_fd,
                          double deadline) {
  struct sockaddr_un a;
  socklen_t al = job_addr(&a, job);
  int ls = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (ls < 0 || bind(ls, (struct sockaddr *)&a, al) != 0 || listen(ls, CF_MAX_WORLD) != 0) {
    int e = errno;
    if (ls >= 0) close(ls);
    return cf_error(w->ctx, CF_ERR_RUNTIME, NULL, 0,
                    "shm transport: rank 0 cannot listen for job '%s': %s%s", job, strerror(e),
                    e == EADDRINUSE ? " (another rank 0 of this job runs: two processes say they "
                                      "are rank 0, or the job's name is taken; set COLLFUSE_JOB)"
                                    : "");
  }
  int n = w->size, *sock = malloc(sizeof(int) * (size_t)n);
  welcome *wel = calloc(1, sizeof *wel);
  cf_shm_host *hosts = calloc((size_t)n, sizeof *hosts);
  cf_status st = sock && wel && hosts ? CF_OK : cf_error(w->ctx, CF_ERR_NO_MEMORY, NULL, 0, "out of memory");
  if (hosts) cf_shm_host_id(&hosts[0]);
  for (int r = 0; sock && r < n; r++)
    sock[r] = -1;
  int joined = 1;
  char why[1024] = "";
  while (!st && joined < n) {
    struct pollfd pf = {.fd = ls, .events = POLLIN};
    double left = deadline - cf_now();
    if (left <= 0) break;
    if (poll(&pf, 1, left > 0.05 ? 50 : (int)(left * 1000) + 1) <= 0) continue;
    int s = accept4(ls, NULL, NULL, SOCK_CLOEXEC);
    if (s < 0) continue;
    struct ucred cr;
    socklen_t cl = sizeof cr;
    hello h;
    int fd = -1;
    bool ours = getsockopt(s, SOL_SOCKET, SO_PEERCRED, &cr, &cl) == 0 && cr.uid == getuid() &&
                xfer(s, false, &h, HELLO_PREFIX, &fd, 1, deadline); /* the prefix every version sends */
    if (ours && h.magic != MAGIC && same_family(h.magic)) { /* a rank of another build */
      char mine[24], theirs[24];
      snprintf(why, sizeof why,
               "rank %d (pid %d) runs another build of collfuse: its shm layout is %s, rank 0's (pid "
               "%d) is %s (job '%s', socket @%s); start every rank of a job from one build",
               (int)h.rank, (int)h.pid, layout(h.magic, theirs, sizeof theirs), (int)getpid(),
               layout(MAGIC, mine, sizeof mine), job, a.sun_path + 1);
      st = cf_error(w->ctx, CF_ERR_USAGE, NULL, 0, "shm transport: %s", why);
      refuse(s, h.magic, st, why, deadline); /* in its version's prefix */
      close(fd);
      close(s);
      break;
    }
    if (!ours || h.magic != MAGIC ||
        !xfer(s, false, (char *)&h + HELLO_PREFIX, sizeof h - HELLO_PREFIX, NULL, 0, deadline)) {
      if (fd >= 0) close(fd);
      close(s); /* not one of ours */
      continue;
    }
    h.host.id[sizeof h.host.id - 1] = h.host.name[sizeof h.host.name - 1] = 0;
    if (h.size != n || h.rank < 1 || h.rank >= n || sock[h.rank] >= 0) {
      if (!why[0]) {
        if (h.size != n)
          snprintf(why, sizeof why, "rank %d says the job has %d ranks, rank 0 says %d", h.rank, h.size, n);
        else
          snprintf(why, sizeof why, "two processes say they are rank %d", h.rank);
      }
      st = cf_error(w->ctx, CF_ERR_RUNTIME, NULL, 0, "shm transport: %s", why);
      refuse(s, MAGIC, st, why, deadline);
      close(fd);
      close(s);
      break;
    }
    sock[h.rank] = s;
    hosts[h.rank] = h.host;
    heap_fd[h.rank] = fd;
    w->head->pid[h.rank] = h.pid;
    if (h.heap_bytes != w->heap_bytes) w->heap_bytes = h.heap_bytes < w->heap_bytes ? h.heap_bytes : w->heap_bytes;
    joined++;
  }
  close(ls); /* nothing left to find by name */
  if (!st && joined < n) {
    char miss[200] = "";
    size_t m = 0;
    for (int r = 1; r < n && m + 8 < sizeof miss; r++)
      if (sock[r] < 0) m += (size_t)snprintf(miss + m, sizeof miss - m, "%s%d", m ? ", " : "", r);
    snprintf(why, sizeof why,
             "rank 0 timed out after %g s waiting for rank(s) %s of job '%s' to start (were they "
             "started on this host, with the same job? a job across hosts runs with --backend mpi)",
             w->timeout_s, miss, job);
    st = cf_error(w->ctx, CF_ERR_RUNTIME, NULL, 0, "shm transport: %s", why);
  }
  for (int r = 1; st && why[0] && r < n; r++) /* the ranks that came hear why, not that rank 0 went away */
    if (sock[r] >= 0) refuse(sock[r], MAGIC, st, why, cf_now() + 1);
  char other[1024];
  if (!st && !cf_shm_one_host(n, hosts, other, sizeof other)) { /* every rank is told */
    for (int r = 1; r < n; r++)
      refuse(sock[r], MAGIC, CF_ERR_USAGE, other, deadline);
    st = cf_error(w->ctx, CF_ERR_USAGE, NULL, 0, "shm transport: %s", other);
  }
  if (!st) {
    wel->magic = MAGIC;
    wel->ok = 1;
    wel->token = w->head->token;
    wel->job = w->head->job;
    wel->ctl_bytes = w->ctl_bytes;
    wel->heap_bytes = w->heap_bytes;
    memcpy(wel->pid, w->head->pid, sizeof wel->pid);
    int *fds = malloc(sizeof(int) * (size_t)(n + 1));
    fds[0] = ctl_fd;
    memcpy(fds + 1, heap_fd, sizeof(int) * (size_t)n);
    for (int r = 1; r < n && !st; r++)
      if (!xfer(sock[r], true, wel, sizeof *wel, NULL, 0, deadline) || !send_fds(sock[r], fds, n + 1, deadline))
        st = cf_error(w->ctx, CF_ERR_RUNTIME, NULL, 0, "shm transport: rank %d went away during start-up", r);
    free(fds);
  }
  for (int r = 1; sock && r < n; r++)
    if (sock[r] >= 0) close(sock[r]);
  free(sock);
  free(wel);
  free(hosts);
  return st;
}

/* Rank r > 0: connect to rank 0 (until it listens), hello, take the world. */
static cf_status join_job(cf_shm_world *w, const char *job, int *ctl_fd, int *heap_fd,
                          double deadline) {
  struct sockaddr_un a;
  socklen_t al = job_addr(&a, job);
  int s = -1;
  while (cf_now() < deadline) {
    s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (s >= 0 && connect(s, (struct sockaddr *)&a, al) == 0) break;
    if (s >= 0) close(s);
    s = -1;
    struct timespec ts = {0, 10 * 1000 * 1000};
    nanosleep(&ts, NULL);
  }
  if (s < 0)
    return cf_error(w->ctx, CF_ERR_RUNTIME, NULL, 0,
                    "shm transport: rank %d timed out after %g s waiting for rank 0 of job '%s' "
                    "(was it started on this host, with the same job? a job across hosts runs with "
                    "--backend mpi)",
                    w->me, w->timeout_s, job);
  hello h = {.magic = MAGIC, .rank = w->me, .size = w->size, .pid = (int32_t)getpid(),
             .heap_bytes = w->heap_bytes};
  cf_shm_host_id(&h.host);
  welcome *wel = calloc(1, sizeof *wel);
  int n = w->size, *fds = malloc(sizeof(int) * (size_t)(n + 1));
  cf_status st = CF_OK;
  if (!wel || !fds) {
    st = cf_error(w->ctx, CF_ERR_NO_MEMORY, NULL, 0, "out of memory");
  } else if (!xfer(s, true, &h, sizeof h, &heap_fd[w->me], 1, deadline)) {
    st = cf_error(w->ctx, CF_ERR_RUNTIME, NULL, 0,
                  "shm transport: rank 0 of job '%s' went away (or timed out) during start-up", job);
  } else if (!xfer(s, false, wel, WELCOME_PREFIX, NULL, 0, deadline)) {
    /* closed on the hello without a word: what a rank 0 of CFSHM4 did with
     * a hello of another version; this build's rank 0 always answers */
    struct ucred cr = {0};
    socklen_t cl = sizeof cr;
    bool pid = getsockopt(s, SOL_SOCKET, SO_PEERCRED, &cr, &cl) == 0 && cr.pid > 0;
    char mine[24];
    if (cf_now() >= deadline)
      st = cf_error(w->ctx, CF_ERR_RUNTIME, NULL, 0,
                    "shm transport: rank 0 of job '%s' timed out during start-up", job);
    else if (pid && kill(cr.pid, 0) == 0)
      st = cf_error(w->ctx, CF_ERR_USAGE, NULL, 0,
                    "shm transport: rank 0 (pid %d) of job '%s' closed the connection on rank %d's hello "
                    "without an answer: it runs another build of collfuse, whose shm layout is older "
                    "than this rank's %s (socket @%s); start every rank of a job from one build",
                    (int)cr.pid, job, w->me, layout(MAGIC, mine, sizeof mine), a.sun_path + 1);
    else
      st = cf_error(w->ctx, CF_ERR_RUNTIME, NULL, 0,
                    "shm transport: rank 0 of job '%s' went away during start-up", job);
  } else if (wel->magic != MAGIC) {
    char mine[24], theirs[24];
    wel->text[sizeof wel->text - 1] = 0;
    if (!same_family(wel->magic))
      st = cf_error(w->ctx, CF_ERR_RUNTIME, NULL, 0,
                    "shm transport: rank %d of job '%s' got an answer that is not collfuse's from rank "
                    "0's socket @%s",
                    w->me, job, a.sun_path + 1);
    else if (!wel->ok) /* another version's refusal, in the prefix every version reads */
      st = cf_error(w->ctx, CF_ERR_USAGE, NULL, 0, "shm transport: %s", wel->text);
    else
      st = cf_error(w->ctx, CF_ERR_USAGE, NULL, 0,
                    "shm transport: rank 0 of job '%s' runs another build of collfuse: its shm layout "
                    "is %s, rank %d's is %s (socket @%s); start every rank of a job from one build",
                    job, layout(wel->magic, theirs, sizeof theirs), w->me, layout(MAGIC, mine, sizeof mine),
                    a.sun_path + 1);
  } else if (!wel->ok) {
    wel->text[sizeof wel->text - 1] = 0;
    st = cf_error(w->ctx, wel->code == CF_ERR_USAGE ? CF_ERR_USAGE : CF_ERR_RUNTIME, NULL, 0,
                  "shm transport: %s", wel->text);
  } else if (!xfer(s, false, (char *)wel + WELCOME_PREFIX, sizeof *wel - WELCOME_PREFIX, NULL, 0, deadline) ||
             !recv_fds(s, fds, n + 1, deadline)) {
    st = cf_error(w->ctx, CF_ERR_RUNTIME, NULL, 0,
                  "shm transport: rank 0 of job '%s' went away during start-up", job);
  } else {
    *ctl_fd = fds[0];
    for (int r = 0; r < n; r++) {
      if (r == w->me) {
        close(fds[1 + r]); /* our own, come back */
        continue;
      }
      heap_fd[r] = fds[1 + r];
    }
    w->heap_bytes = wel->heap_bytes;
    if ((st = map_ctl(w, *ctl_fd))) {
    } else if (w->head->magic != MAGIC) {
      char mine[24], theirs[24];
      st = cf_error(w->ctx, CF_ERR_USAGE, NULL, 0,
                    "shm transport: rank %d refuses the control segment rank 0 sent for job '%s': its "
                    "layout is %s, this rank's %s; start every rank of a job from one build",
                    w->me, job, layout(w->head->magic, theirs, sizeof theirs), layout(MAGIC, mine, sizeof mine));
    } else if (w->head->token != wel->token || w->head->job != fnv(job) || w->head->size != n) {
      st = cf_error(w->ctx, CF_ERR_RUNTIME, NULL, 0,
                    "shm transport: rank %d refuses the segment rank 0 sent: not job '%s''s (token "
                    "or job differ)",
                    w->me, job);
    }
  }
  close(s);
  free(wel);
  free(fds);
  return st;
}

/* Whether every rank can open every other's memory the way a peer maps
 * registered memory (shm_regions.c: /proc/<pid>/fd/<fd>, which asks the
 * kernel for ptrace read access to the owner). Yama's ptrace_scope 2 or 3,
 * a /proc that hides other processes (hidepid, some containers) or an owner
 * made non-dumpable without CAP_SYS_PTRACE on the opener's side refuse it,
 * and the first collective on registered memory would then fail on every
 * rank. So each rank opens a descriptor each peer holds (the control
 * segment's, fd) at start-up, and the ranks agree on the answer (two rounds
 * of shm_max: the descriptors are published, then every rank has tried).
 * Where any rank cannot, no rank uses registered memory in place
 * (shm_shares): its buffers are copied through the heaps, as unregistered
 * ones are, and the first run that would have used one says so once. One
 * answer for all ranks: a rank that ran an AllReduce in place while its
 * peer copied would fail the call with a descriptor mismatch. */
static cf_status probe_regions(cf_shm_world *w, int fd) {
  w->head->probe_fd[w->me] = fd;
  double v = 0;
  cf_status st = shm_max(&w->base, &v, 1);
  for (int r = 0; !st && r < w->size && v == 0; r++) {
    if (r == w->me) continue;
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/fd/%d", (int)w->head->pid[r], (int)w->head->probe_fd[r]);
    int f = open(path, O_RDWR | O_CLOEXEC);
    if (f >= 0)
      close(f);
    else /* opener, owner and errno in one value: the largest comes back */
      v = 1 + ((double)w->me * CF_MAX_WORLD + r) * 4096 + (errno & 4095);
  }
  if (!st) st = shm_max(&w->base, &v, 1);
  if (st || v == 0) return st;
  int64_t code = (int64_t)v - 1, e = code % 4096, pair = code / 4096;
  int opener = (int)(pair / CF_MAX_WORLD), owner = (int)(pair % CF_MAX_WORLD);
  char scope[16] = "";
  FILE *f = fopen("/proc/sys/kernel/yama/ptrace_scope", "r");
  if (f) {
    if (!fgets(scope, sizeof scope, f)) scope[0] = 0;
    scope[strcspn(scope, "\n")] = 0;
    fclose(f);
  }
  char why[200];
  if (e == EACCES || e == EPERM)
    snprintf(why, sizeof why,
             "the ranks need ptrace read access to each other: the same user with Yama's "
             "ptrace_scope 0 or 1 (it is %s here), or CAP_SYS_PTRACE, and an owner that is dumpable",
             scope[0] ? scope : "not set");
  else
    snprintf(why, sizeof why, "this /proc does not show the peers' descriptors (hidepid, or a container's)");
  snprintf(w->no_regions, sizeof w->no_regions,
           "rank %d cannot open rank %d's memory through /proc/%d/fd (%s; %s): memory registered with "
           "cf_shm_register is copied through the world's memory instead of used in place (a copy in "
           "and one out per buffer)",
           opener, owner, (int)w->head->pid[owner], strerror((int)e), why);
  return CF_OK;
}

/* The world's ranks share cpus cores: how its waits poll. Oversubscribed
 * (4 processes on 2 cores), a wait yields 64 times and then sleeps.
 * Pausing 256 polls and sleeping (CF_SPIN_PAUSE) took 0.22-0.37x the time
 * of a 16 MiB pool call at load 7-13, where EEVDF leaves a yielding rank
 * behind the other tasks, but on a quiet machine it made 8 B 5x slower,
 * 64 KiB 4x and 1 MiB 1.6x (a futex wake per message) and 16 MiB level:
 * bench/results/shm.md. COLLFUSE_SHM_SPIN=pause chooses it for a machine
 * busy with other work. */
static void set_cores(cf_shm_world *w, long cpus, bool pause_spin) {
  int n = w->size;
  w->cores = (int)cpus;
  w->spin = n <= cpus ? 40000 : pause_spin ? CF_SPIN_BRIEF : 64;
  w->spin_mode = n <= cpus ? CF_SPIN_CORE : pause_spin ? CF_SPIN_PAUSE : CF_SPIN_YIELD;
}

static cf_status shm_join(cf_context *ctx, const cf_shm_launch *l, double timeout_s, cf_world **out) {
  *out = NULL;
  pthread_mutex_lock(&joined_lock);
  for (cf_shm_world *j = joined_worlds; j; j = j->next)
    if (j->me == l->rank && j->size == l->size && strcmp(j->job, l->job) == 0) {
      j->refs++;
      *out = &j->base;
    }
  pthread_mutex_unlock(&joined_lock);
  if (*out) return CF_OK;
  cf_status hst = cf_shm_host_check(ctx);
  if (hst) return hst;
  const char *spin_knob = cf_env(CF_ENV_SHM_SPIN);
  if (spin_knob && *spin_knob && strcmp(spin_knob, "yield") != 0 && strcmp(spin_knob, "pause") != 0)
    return cf_error(ctx, CF_ERR_USAGE, NULL, 0, "COLLFUSE_SHM_SPIN=%s: expected yield or pause",
                    spin_knob);
  bool pause_spin = spin_knob && strcmp(spin_knob, "pause") == 0;
  long cpus = 0;
  const char *cores_knob = cf_env(CF_ENV_SHM_CORES);
  if (cores_knob && *cores_knob) {
    char *end;
    errno = 0;
    cpus = strtol(cores_knob, &end, 10);
    if (errno || *end || cpus < 1 || cpus > 65536)
      return cf_error(ctx, CF_ERR_USAGE, NULL, 0,
                      "COLLFUSE_SHM_CORES=%s: expected a number of cores from 1 to 65536", cores_knob);
  } else {
    cpus = cf_cpu_count();
  }
  cf_shm_world *w = calloc(1, sizeof *w);
  if (!w) return cf_error(ctx, CF_ERR_NO_MEMORY, NULL, 0, "out of memory");
  int n = l->size;
  w->base = (cf_world){.ops = &cf_world_shm, .size = n, .first = l->rank, .local = 1, .impl = w};
  w->ctx = ctx;
  w->size = n;
  w->me = l->rank;
  w->timeout_s = timeout_s > 0 ? timeout_s : 60;
  set_cores(w, cpus, pause_spin);
  gethostname(w->host, sizeof w->host - 1);
  pthread_mutex_init(&w->lock, NULL);
  long pages = sysconf(_SC_PHYS_PAGES), psz = sysconf(_SC_PAGESIZE);
  w->heap_bytes = pages > 0 && psz > 0 ? (size_t)pages * (size_t)psz : (size_t)1 << 34;
  w->heap_bytes = cf_shm_heap_cap(w->heap_bytes, n);
  int ctl_fd = -1, *heap_fd = malloc(sizeof(int) * (size_t)n);
  w->heap = calloc((size_t)n, sizeof *w->heap);
  w->pidfd = malloc(sizeof(int) * (size_t)n);
  w->head_n = calloc((size_t)n * 4, sizeof(uint64_t));
  w->bounce_off = calloc((size_t)n * CHAN_SLOTS * 2, sizeof(size_t));
  w->hold = calloc((size_t)n * CHAN_SLOTS, sizeof *w->hold);
  cf_status st = CF_OK;
  if (!heap_fd || !w->heap || !w->pidfd || !w->head_n || !w->bounce_off || !w->hold) {
    free(heap_fd);
    shm_destroy(&w->base, 0);
    return cf_error(ctx, CF_ERR_NO_MEMORY, NULL, 0, "out of memory");
  }
  w->need = w->head_n + n;
  w->acked_seen = w->head_n + 2 * n;
  w->tail = w->head_n + 3 * n;
  w->bounce_cap = w->bounce_off + (size_t)n * CHAN_SLOTS;
  for (int r = 0; r < n; r++)
    heap_fd[r] = w->pidfd[r] = -1;
  double deadline = cf_now() + w->timeout_s;
  /* over TCP first where the launcher gives an address: ranks on other
   * hosts are named, not waited for (shm_host.c) */
  st = cf_shm_meet(ctx, l, w->timeout_s, deadline);
  /* this rank's heap */
  if (!st) heap_fd[w->me] = cf_shm_pages_make(w->heap_bytes, "heap");
  if (!st && heap_fd[w->me] < 0)
    st = cf_error(ctx, CF_ERR_RUNTIME, NULL, 0, "shm transport: cannot make rank %d's heap: %s", w->me,
                  strerror(errno));
  if (!st && w->me == 0) {
    ctl_fd = (int)syscall(SYS_memfd_create, "collfuse-shm-control", MFD_CLOEXEC);
    if (ctl_fd < 0 || ftruncate(ctl_fd, (off_t)ctl_size(n)) != 0)
      st = cf_error(ctx, CF_ERR_RUNTIME, NULL, 0, "shm transport: cannot make the control segment: %s",
                    strerror(errno));
    if (!st) st = map_ctl(w, ctl_fd);
    if (!st) {
      uint64_t tok = 0;
      if (getrandom(&tok, sizeof tok, 0) != (ssize_t)sizeof tok || !tok)
        tok = fnv(l->job) ^ (uint64_t)getpid() ^ (uint64_t)(cf_now() * 1e9) ^ 1;
      w->head->magic = MAGIC;
      w->head->token = tok;
      w->head->job = fnv(l->job);
      w->head->size = n;
      w->head->pid[0] = (int32_t)getpid();
      if (n > 1) st = host_job(w, l->job, ctl_fd, heap_fd, deadline);
    }
  } else if (!st) {
    st = join_job(w, l->job, &ctl_fd, heap_fd, deadline);
  }
  /* map every heap */
  for (int r = 0; r < n && !st; r++) {
    void *p = cf_shm_heap_map(heap_fd[r], w->heap_bytes);
    if (p == MAP_FAILED)
      st = cf_error(ctx, CF_ERR_NO_MEMORY, NULL, 0, "shm transport: cannot map rank %d's heap: %s", r,
                    strerror(errno));
    else
      w->heap[r] = p;
  }
  if (!st) {
    w->free_list = malloc(sizeof *w->free_list * 16);
    w->cap_free = 16;
    if (w->free_list) w->free_list[w->n_free++] = (extent){0, w->heap_bytes};
    /* a page of bounce buffer for every message slot, side by side at the
     * heap's start: the small messages sent from outside the heap (a new
     * run's fingerprints, 8-17 bytes) then share the heap's first 2 MiB
     * page, where each one's own allocation at the heap's frontier took a
     * huge page of its own (8 MiB of the ResNet-18 steps' heap per rank) */
    size_t k = (size_t)n * CHAN_SLOTS, off = heap_alloc(w, k * PAGE, NULL);
    for (size_t i = 0; off != SIZE_MAX && i < k; i++) {
      w->bounce_off[i] = off + i * PAGE;
      w->bounce_cap[i] = PAGE;
    }
    for (int r = 0; r < n; r++)
      if (r != w->me) w->pidfd[r] = (int)syscall(SYS_pidfd_open, w->head->pid[r], 0);
    w->head->pid[w->me] = (int32_t)getpid();
    atomic_fetch_add(&w->head->attached, 1);
    if (n > 1) st = probe_regions(w, ctl_fd);
  }
  /* the cores are a fact of the world, the fewest any rank counts: pool's
   * idle ranks and auto's choice (cf_algo_req.cores) must be the same on
   * every rank, whatever each process's affinity mask or knob says */
  if (!st && n > 1) {
    double fewest = -(double)cpus;
    st = shm_max(&w->base, &fewest, 1);
    if (!st) set_cores(w, (long)-fewest, pause_spin);
  }
  for (int r = 0; r < n; r++)
    if (heap_fd[r] >= 0) close(heap_fd[r]); /* the mappings keep them */
  if (ctl_fd >= 0) close(ctl_fd);
  free(heap_fd);
  if (st) {
    shm_destroy(&w->base, 1);
    return st;
  }
  snprintf(w->job, sizeof w->job, "%s", l->job);
  w->refs = 1;
  pthread_mutex_lock(&joined_lock);
  w->next = joined_worlds;
  joined_worlds = w;
  pthread_mutex_unlock(&joined_lock);
  w->comm = (cf_comm){.ops = &shm_ops, .ctx = ctx, .rank = w->me, .size = n, .impl = w};
  w->comm.cores = n > w->cores ? w->cores : 0;
  w->cpus = cf_bind_cpus(n, &w->lanes);
  *out = &w->base;
  return CF_OK;
}

cf_status cf_world_shm_join(cf_context *ctx, const cf_shm_launch *l, double timeout_s,
                            cf_world **out) {
  return shm_join(ctx, l, timeout_s, out);
}

/* A join from the launcher's variables shares the world an earlier one
 * joined that way while that lives, at the same rank and size, even when
 * the job's name reads differently now: a framework may set a launcher's
 * variables of its own meanwhile (DDP under mpirun sets torch's RANK,
 * WORLD_SIZE and MASTER_* from mpirun's, and torchrun's come first), and a
 * world of another name would be a second job of the same processes, whose
 * messages no check of the first could see. */
static cf_status shm_create(cf_context *ctx, int size, double timeout_s, cf_world **out) {
  *out = NULL;
  cf_shm_launch l;
  cf_status st = cf_shm_launch_find(ctx, &l);
  if (st) return st;
  if (size > 0 && size != l.size)
    return cf_error(ctx, CF_ERR_USAGE, NULL, 0,
                    "--backend shm: %d ranks asked for, but %s started %d process%s", size, l.by,
                    l.size, l.size == 1 ? "" : "es");
  pthread_mutex_lock(&joined_lock);
  for (cf_shm_world *j = joined_worlds; j && !*out; j = j->next)
    if (j->launched && j->me == l.rank && j->size == l.size) {
      j->refs++;
      *out = &j->base;
    }
  pthread_mutex_unlock(&joined_lock);
  if (*out) return CF_OK;
  if ((st = shm_join(ctx, &l, timeout_s, out))) return st;
  pthread_mutex_lock(&joined_lock);
  ((cf_shm_world *)(*out)->impl)->launched = true;
  pthread_mutex_unlock(&joined_lock);
  return CF_OK;
}

static cf_comm *shm_comm(cf_world *base, int rank) {
  cf_shm_world *w = base->impl;
  return rank == w->me ? &w->comm : NULL;
}

static void shm_rank_left(cf_world *base, int rank) {
  cf_shm_world *w = base->impl;
  if (rank < 0 || rank >= w->size) return;
  atomic_store(&w->head->left[rank], 1);
  for (int r = 0; r < w->size; r++)
    ring(w, r);
}

static void shm_rank_thread(cf_world *base, int rank, int lane) {
  cf_shm_world *w = base->impl;
  cf_bind_thread(w->cpus, w->lanes, rank, lane);
}

static int shm_host_processes(const cf_world *base) { return base->size; }

static const char *shm_host(const cf_world *base) {
  const cf_shm_world *w = base->impl;
  return w->host;
}

/* v = the maximum over the ranks, 8 values a round: every rank posts its
 * values and marks the round posted (2 * round - 1), reads the others'
 * once they have posted, then marks it read (2 * round); a rank writes the
 * next round's values only when every rank has read this one's. */
static cf_status shm_max(cf_world *base, double *v, int n) {
  cf_shm_world *w = base->impl;
  for (int at = 0; at < n; at += 8) {
    int k = n - at < 8 ? n - at : 8;
    uint64_t round = ++w->max_rounds;
    double m[8];
    memcpy(m, v + at, sizeof(double) * (size_t)k);
    memcpy(w->head->maxv[w->me], m, sizeof(double) * (size_t)k);
    for (uint64_t phase = 2 * round - 1; phase <= 2 * round; phase++) {
      atomic_store(&w->head->max_round[w->me], phase);
      for (int r = 0; r < w->size; r++)
        ring(w, r);
      for (int r = 0; r < w->size; r++) {
        if (r == w->me) continue;
        wait_what ww = {"the start-up values of", r, NULL};
        cf_status st = wait_ge(w, &w->head->max_round[r], phase, &ww, false);
        if (st) return st;
        for (int i = 0; i < k && phase & 1; i++)
          if (w->head->maxv[r][i] > m[i]) m[i] = w->head->maxv[r][i];
      }
    }
    memcpy(v + at, m, sizeof(double) * (size_t)k);
  }
  return CF_OK;
}

static void shm_abort_world(cf_world *base, const char *text) { world_abort(base->impl, text); }

/* Registered memory, where every rank can open every other's
 * (probe_regions); the first time it cannot, a warning says why. */
static bool shm_shares(const cf_world *base, const void *p, size_t bytes) {
  cf_shm_world *w = base->impl;
  if (!cf_shm_registered(p, bytes)) return false;
  if (!w->no_regions[0]) return true;
  if (!atomic_exchange(&w->warned, true))
    cf_log(w->comm.ctx ? w->comm.ctx : w->ctx, CF_LOG_WARN, "shm transport: %s", w->no_regions);
  return false;
}

static void shm_destroy(cf_world *base, int exit_code) {
  (void)exit_code;
  if (!base) return;
  cf_shm_world *w = base->impl;
  pthread_mutex_lock(&joined_lock);
  bool last = --w->refs <= 0;
  for (cf_shm_world **at = &joined_worlds; last && *at; at = &(*at)->next)
    if (*at == w) {
      *at = w->next;
      break;
    }
  pthread_mutex_unlock(&joined_lock);
  if (!last) return;
  if (w->head) {
    atomic_store(&w->head->left[w->me], 1);
    for (int r = 0; r < w->size; r++)
      ring(w, r);
  }
  cf_shm_regions_fini(&w->regions);
  for (int r = 0; w->heap && r < w->size; r++)
    if (w->heap[r]) munmap(w->heap[r], w->heap_bytes);
  for (int r = 0; w->pidfd && r < w->size; r++)
    if (w->pidfd[r] >= 0) close(w->pidfd[r]);
  if (w->head) munmap(w->head, w->ctl_bytes);
  free(w->heap);
  free(w->pidfd);
  free(w->head_n);
  free(w->bounce_off);
  free(w->hold);
  free(w->free_list);
  free(w->live);
  free(w->cpus);
  pthread_mutex_destroy(&w->lock);
  free(w);
}

const cf_world_ops cf_world_shm = {
    .name = "shm",
    .create = shm_create,
    .comm = shm_comm,
    .destroy = shm_destroy,
    .rank_left = shm_rank_left,
    .rank_thread = shm_rank_thread,
    .host_processes = shm_host_processes,
    .host = shm_host,
    .max = shm_max,
    .abort = shm_abort_world,
    .alloc = shm_alloc,
    .free = shm_free,
    .shares = shm_shares,
};
