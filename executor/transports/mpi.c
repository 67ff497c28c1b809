/* transports/mpi.c - ranks as MPI processes (`collfuse run --backend mpi`
 * under mpirun).
 *
 * The same two-sided, in-order messages as the threads transport, carried
 * by nonblocking MPI point-to-point calls on a duplicate of MPI_COMM_WORLD,
 * so collfuse's own algorithms and kernels run unchanged (as UCC runs its
 * algorithms over UCX). A message is a header on one tag (the collective's
 * descriptor with its group and node names, the payload size, and the
 * payload itself up to INLINE_BYTES, so that the message stays below the
 * shared memory eager limit and a small message is one eager MPI message)
 * and, for larger payloads, the payload on a second tag, received straight
 * into the caller's staging buffer once the header has been checked (a
 * payload that does not belong is never received). Payloads up to
 * SPLIT_MAX go in eager pieces, which beats the rendezvous a single
 * message would need; larger ones go whole (shared memory's single copy
 * then reads them straight from the sender). Each peer's next header receive is always posted, so headers land
 * without an unexpected-message copy. A send is released when its MPI
 * requests complete: the data then sit in the receiver's staging (or MPI's
 * buffers) and the sender may reuse its buffer.
 *
 * Every wait polls its requests with the run's deadline and watches for an
 * abort: abort() sends the reason to every rank on a third tag, where a
 * receive from any source is always posted, so all ranks stop with the same
 * message. A descriptor mismatch is reported with the lower rank first, so
 * both sides of a mismatch print the same text. Polls spin briefly, then
 * yield, then sleep a little, so oversubscribed runs (4 ranks on 2 cores)
 * leave the cores to the ranks that have work.
 *
 * The rank thread and its communication thread both call the transport,
 * never at the same time for messages (exec.c hands over through a mutex);
 * the rank thread's aborted() and abort() may run while the communication
 * thread waits. With MPI_THREAD_MULTIPLE that is legal as is (the abort
 * receive is tested under its own lock); with MPI_THREAD_SERIALIZED every
 * MPI call takes mpi_lock.
 *
 * `--algo mpi-native` runs MPI's own collectives instead (the native slot):
 * one communicator per graph group, created before the run
 * (cf_mpi_prepare_native); float16/bfloat16 reductions use user-defined
 * MPI_Ops that compute in float32; integer mean sums in int64 as collfuse's
 * kernels do. MPI's collectives block inside MPI, where no deadline or abort
 * check can run: a watchdog thread does it for them, and ends the whole job
 * (MPI_Abort, exit 3) with the reason if a native collective outlives the
 * run's timeout or another rank fails meanwhile. They carry no descriptor
 * (the fingerprint check still runs before them).
 */
#define _GNU_SOURCE
#include "../executor.h"

#include <mpi.h>

#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

enum {
  TAG_HDR = 7101,   /* headers (+ inline payloads) */
  TAG_DATA = 7102,  /* payloads that do not fit in the header message */
  TAG_ABORT = 7103, /* abort reasons */
  TAG_GROUP = 7200, /* + group index: MPI_Comm_create_group */
  GROUP_MAX = 128,  /* group names are at most 127 bytes (SPEC) */
  NODE_MAX = 128,   /* node names in headers (truncated; messages only) */
  MSG_MAX = 1024,   /* abort reasons */
  MAX_PARTS = 16,   /* payload pieces per message */
};
#define INLINE_BYTES ((size_t)3584) /* payloads the header carries (header + names + this < 4 KiB eager) */
#define PART_MAX ((size_t)1 << 30) /* MPI counts are int: payloads go in 1 GiB pieces */
#define SPLIT_MAX ((size_t)12 << 10) /* payloads up to this go in eager pieces */
#define EAGER_PIECE ((size_t)4032)   /* a piece + MPI's match header < 4 KiB (vader's eager limit) */

/* The header of every message; group_len and node_len bytes of the names
 * follow it (no NUL), then the payload when inline is set. */
typedef struct wire_hdr {
  int64_t seq, count, bytes;
  int32_t op, dtype, red, root, layout;
  uint8_t has_desc, inline_data;
  uint16_t group_len, node_len;
} wire_hdr;
#define HDR_CAP (sizeof(wire_hdr) + GROUP_MAX + NODE_MAX + INLINE_BYTES)

typedef struct send_slot {
  MPI_Request req[1 + MAX_PARTS];
  int nreq;
  char *buf; /* header + inline payload (HDR_CAP) */
} send_slot;

typedef struct peer {
  /* sends to this peer: messages [done, posted) are in flight in slots[i % cap] */
  send_slot *slots;
  uint64_t cap, posted, done;
  /* the next header from this peer lands in rbuf */
  MPI_Request hreq;
  char *rbuf;
} peer;

typedef struct native_group {
  char name[GROUP_MAX];
  MPI_Comm comm;
} native_group;

struct cf_mpi_world {
  cf_comm comm;
  MPI_Comm world;       /* our duplicate of MPI_COMM_WORLD */
  int local_size;       /* ranks on this node */
  bool multiple;        /* MPI_THREAD_MULTIPLE (else SERIALIZED: lock every call) */
  bool we_initialized;  /* we called MPI_Init_thread (and finalize) */
  double timeout_s;
  int spin;             /* polls before yielding */
  pthread_mutex_t mpi_lock;   /* around MPI calls when !multiple */
  pthread_mutex_t abort_lock; /* abort_req, msg */
  peer *peers;
  MPI_Request abort_req; /* posted receive from any source */
  char abort_in[MSG_MAX];
  MPI_Request *abort_out;
  char abort_text[MSG_MAX]; /* what we sent (must outlive the sends) */
  _Atomic int aborted;
  _Atomic int drained;  /* a failing wait gave in-flight sends their chance */
  char msg[MSG_MAX];
  int64_t coll_msgs, kill_at; /* test hook: SIGKILL at collective message kill_at */
  native_group *groups;
  int n_groups;
  MPI_Datatype half;    /* 2-byte elements for float16/bfloat16 user ops */
  MPI_Op half_op[2][CF_RED_COUNT]; /* [bf16?][red] */
  char host[MPI_MAX_PROCESSOR_NAME + 1];
  /* the watchdog of native collectives */
  pthread_t dog;
  bool dog_started, dog_stop;
  pthread_mutex_t dog_lock; /* the fields below */
  pthread_cond_t dog_cond;
  double native_deadline;   /* 0: no native collective running */
  char native_what[256];    /* which one, for the timeout message */
};

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void lk(cf_mpi_world *w) {
  if (!w->multiple) pthread_mutex_lock(&w->mpi_lock);
}

static void ulk(cf_mpi_world *w) {
  if (!w->multiple) pthread_mutex_unlock(&w->mpi_lock);
}

static const char *mpi_text(int rc, char *buf) {
  int len = 0;
  if (MPI_Error_string(rc, buf, &len) != MPI_SUCCESS) snprintf(buf, MPI_MAX_ERROR_STRING, "MPI error %d", rc);
  return buf;
}

/* ---------------- abort ---------------- */

/* Record reason (first one wins) and tell every other rank. A reason
 * that is a context's formatted message ("error: M", "FILE: error: M")
 * loses its "error: ": every rank formats it again when it stops. */
static void world_abort(cf_mpi_world *w, const char *text) {
  pthread_mutex_lock(&w->abort_lock);
  if (atomic_load(&w->aborted)) {
    pthread_mutex_unlock(&w->abort_lock);
    return;
  }
  const char *e = strncmp(text, "error: ", 7) == 0 ? text : strstr(text, ": error: ");
  if (e == text)
    snprintf(w->msg, sizeof w->msg, "%s", text + 7);
  else if (e)
    snprintf(w->msg, sizeof w->msg, "%.*s: %s", (int)(e - text), text, e + 9);
  else
    snprintf(w->msg, sizeof w->msg, "%s", text);
  snprintf(w->abort_text, sizeof w->abort_text, "%s", w->msg);
  atomic_store(&w->aborted, 1);
  pthread_mutex_unlock(&w->abort_lock);
  /* under SERIALIZED the other thread may hold mpi_lock in a blocking
   * native collective: then the flag alone has to do */
  if (!w->multiple && pthread_mutex_trylock(&w->mpi_lock) != 0) return;
  int len = (int)strlen(w->abort_text) + 1;
  for (int r = 0; r < w->comm.size; r++)
    if (r != w->comm.rank)
      MPI_Isend(w->abort_text, len, MPI_CHAR, r, TAG_ABORT, w->world, &w->abort_out[r]);
  if (!w->multiple) pthread_mutex_unlock(&w->mpi_lock);
}

/* Has a reason arrived from another rank? (never blocks) */
static bool poll_abort(cf_mpi_world *w) {
  if (atomic_load(&w->aborted)) return true;
  if (pthread_mutex_trylock(&w->abort_lock) != 0) return false; /* the other thread is testing */
  int done = 0;
  if (w->abort_req != MPI_REQUEST_NULL && (w->multiple || pthread_mutex_trylock(&w->mpi_lock) == 0)) {
    MPI_Test(&w->abort_req, &done, MPI_STATUS_IGNORE);
    if (!w->multiple) pthread_mutex_unlock(&w->mpi_lock);
  }
  if (done && !atomic_load(&w->aborted)) {
    w->abort_in[sizeof w->abort_in - 1] = 0;
    snprintf(w->msg, sizeof w->msg, "%s", w->abort_in);
    atomic_store(&w->aborted, 1);
  }
  pthread_mutex_unlock(&w->abort_lock);
  return atomic_load(&w->aborted);
}

/* Before a failing wait returns (and the run frees its buffers), let the
 * sends in flight finish for a moment: a peer that has matched one may be
 * copying out of this process's memory (shared memory's single copy reads
 * it in place), and freeing it under the copy would crash that peer. Sends
 * no peer will receive any more are given up after the moment. Once. */
static void drain(cf_comm *c) {
  cf_mpi_world *w = c->impl;
  if (atomic_exchange(&w->drained, 1)) return;
  double end = now_s() + (w->timeout_s < 2 ? w->timeout_s / 2 : 1.0);
  for (int r = 0; r < c->size; r++) {
    peer *p = &w->peers[r];
    for (uint64_t i = p->done; i < p->posted; i++) {
      send_slot *s = &p->slots[i % p->cap];
      int done = 0;
      while (!done && now_s() < end) {
        lk(w);
        int rc = MPI_Testall(s->nreq, s->req, &done, MPI_STATUSES_IGNORE);
        ulk(w);
        if (rc != MPI_SUCCESS) return;
        if (!done) sched_yield();
      }
      if (!done) return;
    }
  }
}

static cf_status aborted_error(cf_comm *c) {
  cf_mpi_world *w = c->impl;
  drain(c);
  return cf_error(c->ctx, CF_ERR_RUNTIME, NULL, 0, "%s", w->msg); /* msg is final once the flag is set */
}

/* Fail every rank with text; the caller's error. */
static cf_status fail_all(cf_comm *c, const char *text) {
  world_abort(c->impl, text);
  drain(c);
  return cf_error(c->ctx, CF_ERR_RUNTIME, NULL, 0, "%s", text);
}

/* ---------------- waiting ---------------- */

/* What a rank is waiting for, so a timeout can say so. */
typedef struct wait_what {
  const char *verb;
  int peer;
  const cf_coll_desc *d;
} wait_what;

static cf_status timed_out(cf_comm *c, const wait_what *ww) {
  cf_mpi_world *w = c->impl;
  char text[512];
  if (ww->d)
    snprintf(text, sizeof text,
             "rank %d timed out after %g s waiting for %s rank %d in %s '%s' (#%lld of group %s); "
             "rank %d may have failed or stopped",
             c->rank, w->timeout_s, ww->verb, ww->peer, cf_op_table[ww->d->op].name,
             ww->d->node ? ww->d->node : "?", (long long)ww->d->seq, ww->d->group, ww->peer);
  else if (ww->peer >= 0)
    snprintf(text, sizeof text,
             "rank %d timed out after %g s waiting for %s rank %d; rank %d may have failed or stopped",
             c->rank, w->timeout_s, ww->verb, ww->peer, ww->peer);
  else
    snprintf(text, sizeof text, "rank %d timed out after %g s waiting for %s", c->rank, w->timeout_s,
             ww->verb);
  return fail_all(c, text);
}

static cf_status mpi_failed(cf_comm *c, int rc, const wait_what *ww) {
  char e[MPI_MAX_ERROR_STRING], text[768];
  if (ww->peer >= 0)
    snprintf(text, sizeof text, "rank %d: MPI failed while waiting for %s rank %d: %s", c->rank, ww->verb,
             ww->peer, mpi_text(rc, e));
  else
    snprintf(text, sizeof text, "rank %d: MPI failed while waiting for %s: %s", c->rank, ww->verb,
             mpi_text(rc, e));
  return fail_all(c, text);
}

/* Pause between polls: spin, then yield, then sleep a little (a long wait
 * is usually a peer computing; short sleeps keep TCP progressing). */
static void backoff(const cf_mpi_world *w, long i, double waited) {
  if (i < w->spin) return;
  if (waited < 0.005) {
    sched_yield();
    return;
  }
  struct timespec ts = {0, waited < 0.1 ? 20000 : 200000};
  nanosleep(&ts, NULL);
}

/* Wait until every request in req[0..n) completes; status of req[0] in *st0. */
static cf_status wait_all(cf_comm *c, MPI_Request *req, int n, MPI_Status *st0, const wait_what *ww) {
  cf_mpi_world *w = c->impl;
  MPI_Status sts[1 + MAX_PARTS];
  double start = 0;
  for (long i = 0;; i++) {
    int done = 0;
    lk(w);
    int rc = MPI_Testall(n, req, &done, sts);
    ulk(w);
    if (rc != MPI_SUCCESS) return mpi_failed(c, rc, ww);
    if (done) {
      if (st0) *st0 = sts[0];
      return CF_OK;
    }
    if ((i & 15) == 15 && poll_abort(w)) return aborted_error(c);
    if (i == 0) {
      start = now_s();
      continue;
    }
    double waited = i < w->spin && (i & 255) ? 0 : now_s() - start;
    if (waited > w->timeout_s) return timed_out(c, ww);
    backoff(w, i, waited);
  }
}

/* ---------------- messages ---------------- */

/* How a payload that travels apart is cut (both sides agree by its size). */
static size_t piece_bytes(size_t bytes) { return bytes <= SPLIT_MAX ? EAGER_PIECE : PART_MAX; }

static send_slot *next_slot(cf_comm *c, peer *p) {
  if (p->posted - p->done == p->cap) { /* full: double the ring, keep slots in flight at i % cap */
    uint64_t cap = p->cap ? 2 * p->cap : 8;
    send_slot *ns = calloc((size_t)cap, sizeof *ns);
    if (!ns) return NULL;
    for (uint64_t i = p->done; i < p->posted; i++) {
      ns[i % cap] = p->slots[i % p->cap];
      p->slots[i % p->cap].buf = NULL;
    }
    for (uint64_t i = 0; i < p->cap; i++) free(p->slots[i].buf); /* free ones, not in flight */
    free(p->slots);
    p->slots = ns;
    p->cap = cap;
  }
  send_slot *s = &p->slots[p->posted % p->cap];
  if (!s->buf && !(s->buf = malloc(HDR_CAP))) return NULL;
  (void)c;
  return s;
}

static cf_status m_send(cf_comm *c, int dst, const void *buf, size_t bytes, const cf_coll_desc *d) {
  cf_mpi_world *w = c->impl;
  if (atomic_load(&w->aborted)) return aborted_error(c);
  if (d && w->kill_at >= 0 && w->coll_msgs++ == w->kill_at) {
    fflush(stdout);
    fflush(stderr);
    raise(SIGKILL); /* test hook: vanish mid-run */
  }
  size_t glen = d && d->group ? strnlen(d->group, GROUP_MAX - 1) : 0;
  size_t nlen = d && d->node ? strnlen(d->node, NODE_MAX - 1) : 0;
  size_t head = sizeof(wire_hdr) + glen + nlen;
  bool inl = bytes <= INLINE_BYTES;
  size_t piece = piece_bytes(bytes), parts = inl ? 0 : (bytes + piece - 1) / piece;
  if (parts > MAX_PARTS)
    return cf_error(c->ctx, CF_ERR_UNSUPPORTED, NULL, 0, "mpi transport: a message of %zu bytes is too large",
                    bytes);
  peer *p = &w->peers[dst];
  send_slot *s = next_slot(c, p);
  if (!s) return cf_error(c->ctx, CF_ERR_NO_MEMORY, NULL, 0, "mpi transport: out of memory");
  wire_hdr h;
  memset(&h, 0, sizeof h);
  h.bytes = (int64_t)bytes;
  h.inline_data = inl;
  if (d) {
    h.has_desc = 1;
    h.seq = d->seq;
    h.count = d->count;
    h.op = (int32_t)d->op;
    h.dtype = (int32_t)d->dtype;
    h.red = d->red;
    h.root = d->root;
    h.layout = d->layout;
    h.group_len = (uint16_t)glen;
    h.node_len = (uint16_t)nlen;
  }
  memcpy(s->buf, &h, sizeof h);
  if (glen) memcpy(s->buf + sizeof h, d->group, glen);
  if (nlen) memcpy(s->buf + sizeof h + glen, d->node, nlen);
  if (inl && bytes) memcpy(s->buf + head, buf, bytes);
  s->nreq = 0;
  lk(w);
  int rc = MPI_Isend(s->buf, (int)(head + (inl ? bytes : 0)), MPI_BYTE, dst, TAG_HDR, w->world, &s->req[s->nreq++]);
  for (size_t k = 0; k < parts && rc == MPI_SUCCESS; k++) {
    size_t off = k * piece, len = bytes - off < piece ? bytes - off : piece;
    rc = MPI_Isend((const char *)buf + off, (int)len, MPI_BYTE, dst, TAG_DATA, w->world, &s->req[s->nreq++]);
  }
  ulk(w);
  p->posted++;
  if (rc != MPI_SUCCESS) {
    wait_what ww = {"a send to", dst, d};
    return mpi_failed(c, rc, &ww);
  }
  return CF_OK;
}

static cf_status post_header(cf_comm *c, int src) {
  cf_mpi_world *w = c->impl;
  peer *p = &w->peers[src];
  lk(w);
  int rc = MPI_Irecv(p->rbuf, (int)HDR_CAP, MPI_BYTE, src, TAG_HDR, w->world, &p->hreq);
  ulk(w);
  if (rc != MPI_SUCCESS) {
    wait_what ww = {"a message from", src, NULL};
    return mpi_failed(c, rc, &ww);
  }
  return CF_OK;
}

static cf_status m_recv(cf_comm *c, int src, void *staging, size_t bytes, const cf_coll_desc *d,
                        const void **data) {
  cf_mpi_world *w = c->impl;
  *data = NULL;
  peer *p = &w->peers[src];
  wait_what ww = {"a message from", src, d};
  MPI_Status ms;
  cf_status st = wait_all(c, &p->hreq, 1, &ms, &ww);
  if (st) return st;
  int got = 0;
  MPI_Get_count(&ms, MPI_BYTE, &got);
  wire_hdr h;
  char text[768], group[GROUP_MAX], node[NODE_MAX];
  if (got >= (int)sizeof h) memcpy(&h, p->rbuf, sizeof h);
  size_t head = sizeof h + (got >= (int)sizeof h ? (size_t)h.group_len + h.node_len : 0);
  if (got < (int)sizeof h || h.group_len >= GROUP_MAX || h.node_len >= NODE_MAX || h.bytes < 0 ||
      (size_t)got != head + (h.inline_data ? (size_t)h.bytes : 0) ||
      (bool)h.inline_data != ((size_t)h.bytes <= INLINE_BYTES)) {
    snprintf(text, sizeof text, "rank %d received a malformed message (%d bytes) from rank %d", c->rank, got, src);
    return fail_all(c, text);
  }
  memcpy(group, p->rbuf + sizeof h, h.group_len);
  group[h.group_len] = 0;
  memcpy(node, p->rbuf + sizeof h + h.group_len, h.node_len);
  node[h.node_len] = 0;
  if (d && h.has_desc) {
    cf_coll_desc theirs = {.seq = h.seq, .op = (cf_op)h.op, .dtype = (cf_dtype)h.dtype, .count = h.count,
                           .red = h.red, .root = h.root, .layout = h.layout, .group = group, .node = node};
    if (h.op < 0 || h.op >= CF_OP_COUNT || h.dtype < 0 || h.dtype >= CF_DT_COUNT) {
      snprintf(text, sizeof text, "rank %d received a malformed header from rank %d", c->rank, src);
      return fail_all(c, text);
    }
    /* the lower rank first, so both sides of a mismatch print the same text */
    bool differ = c->rank < src ? cf_coll_desc_mismatch(d, c->rank, &theirs, src, text, sizeof text)
                                : cf_coll_desc_mismatch(&theirs, src, d, c->rank, text, sizeof text);
    if (differ) return fail_all(c, text);
  }
  if ((size_t)h.bytes != bytes) {
    snprintf(text, sizeof text,
             "cross-rank mismatch: rank %d expected %zu bytes from rank %d, which sent %lld%s%s%s", c->rank,
             bytes, src, (long long)h.bytes, d ? " (in '" : "", d && d->node ? d->node : "", d ? "')" : "");
    return fail_all(c, text);
  }
  if (bytes && !staging)
    return cf_error(c->ctx, CF_ERR_RUNTIME, NULL, 0, "mpi transport: a receive of %zu bytes without staging", bytes);
  if (h.inline_data && bytes) memcpy(staging, p->rbuf + head, bytes);
  if ((st = post_header(c, src))) return st;
  if (!h.inline_data) {
    if (poll_abort(w)) return aborted_error(c); /* never start reading a failed run's data */
    MPI_Request req[MAX_PARTS];
    size_t piece = piece_bytes(bytes);
    int n = 0, rc = MPI_SUCCESS;
    lk(w);
    for (size_t off = 0; off < bytes && rc == MPI_SUCCESS; off += piece) {
      size_t len = bytes - off < piece ? bytes - off : piece;
      rc = MPI_Irecv((char *)staging + off, (int)len, MPI_BYTE, src, TAG_DATA, w->world, &req[n++]);
    }
    ulk(w);
    ww.verb = "the data of a message from";
    if (rc != MPI_SUCCESS) return mpi_failed(c, rc, &ww);
    if ((st = wait_all(c, req, n, NULL, &ww))) return st;
  }
  *data = staging;
  return CF_OK;
}

/* The data are in the receiver's staging: nothing to give back. */
static cf_status m_release(cf_comm *c, int src) {
  (void)c;
  (void)src;
  return CF_OK;
}

static uint64_t m_sent(cf_comm *c, int dst) {
  cf_mpi_world *w = c->impl;
  return w->peers[dst].posted;
}

static cf_status m_wait_released(cf_comm *c, int dst, uint64_t count) {
  cf_mpi_world *w = c->impl;
  peer *p = &w->peers[dst];
  wait_what ww = {"the delivery of a message to", dst, NULL};
  while (p->done < count && p->done < p->posted) {
    send_slot *s = &p->slots[p->done % p->cap];
    cf_status st = wait_all(c, s->req, s->nreq, NULL, &ww);
    if (st) return st;
    p->done++;
  }
  return CF_OK;
}

static cf_status m_send_wait(cf_comm *c) {
  for (int r = 0; r < c->size; r++) {
    if (r == c->rank) continue;
    cf_status st = m_wait_released(c, r, ((cf_mpi_world *)c->impl)->peers[r].posted);
    if (st) return st;
  }
  return CF_OK;
}

static void m_abort(cf_comm *c, const char *text) { world_abort(c->impl, text); }

static bool m_aborted(cf_comm *c, const char **text) {
  cf_mpi_world *w = c->impl;
  if (!poll_abort(w)) return false;
  if (text) *text = w->msg;
  return true;
}

/* ---------------- mpi-native: MPI's own collectives ---------------- */

static float half_load(uint16_t h, bool bf) { return bf ? cf_bf16_to_f32(h) : cf_f16_to_f32(h); }
static uint16_t half_store(float f, bool bf) { return bf ? cf_f32_to_bf16(f) : cf_f32_to_f16(f); }

/* inout[i] = in[i] op inout[i] in float32, rounded once to the type. */
static void half_reduce(const void *in, void *inout, int len, bool bf, int red) {
  const uint16_t *a = in;
  uint16_t *b = inout;
  for (int i = 0; i < len; i++) {
    float x = half_load(a[i], bf), y = half_load(b[i], bf), r;
    switch (red) {
    case CF_RED_MAX: r = isnan(x) || isnan(y) ? x + y : x > y ? x : y; break;
    case CF_RED_MIN: r = isnan(x) || isnan(y) ? x + y : x < y ? x : y; break;
    case CF_RED_PROD: r = x * y; break;
    default: r = x + y; break; /* sum; mean sums and scales after */
    }
    b[i] = half_store(r, bf);
  }
}

static void f16_sum(void *in, void *io, int *n, MPI_Datatype *t) { (void)t; half_reduce(in, io, *n, false, CF_RED_SUM); }
static void f16_max(void *in, void *io, int *n, MPI_Datatype *t) { (void)t; half_reduce(in, io, *n, false, CF_RED_MAX); }
static void f16_min(void *in, void *io, int *n, MPI_Datatype *t) { (void)t; half_reduce(in, io, *n, false, CF_RED_MIN); }
static void f16_prod(void *in, void *io, int *n, MPI_Datatype *t) { (void)t; half_reduce(in, io, *n, false, CF_RED_PROD); }
static void bf16_sum(void *in, void *io, int *n, MPI_Datatype *t) { (void)t; half_reduce(in, io, *n, true, CF_RED_SUM); }
static void bf16_max(void *in, void *io, int *n, MPI_Datatype *t) { (void)t; half_reduce(in, io, *n, true, CF_RED_MAX); }
static void bf16_min(void *in, void *io, int *n, MPI_Datatype *t) { (void)t; half_reduce(in, io, *n, true, CF_RED_MIN); }
static void bf16_prod(void *in, void *io, int *n, MPI_Datatype *t) { (void)t; half_reduce(in, io, *n, true, CF_RED_PROD); }

static MPI_Datatype mpi_type(const cf_mpi_world *w, cf_dtype dt) {
  switch (dt) {
  case CF_DT_INT8: return MPI_INT8_T;
  case CF_DT_UINT8: return MPI_UINT8_T;
  case CF_DT_INT16: return MPI_INT16_T;
  case CF_DT_INT32: return MPI_INT32_T;
  case CF_DT_INT64: return MPI_INT64_T;
  case CF_DT_FLOAT32: return MPI_FLOAT;
  case CF_DT_FLOAT64: return MPI_DOUBLE;
  case CF_DT_FLOAT16:
  case CF_DT_BFLOAT16: return w->half;
  default: return MPI_DATATYPE_NULL;
  }
}

static MPI_Op mpi_op(const cf_mpi_world *w, cf_dtype dt, int red) {
  if (dt == CF_DT_FLOAT16 || dt == CF_DT_BFLOAT16)
    return w->half_op[dt == CF_DT_BFLOAT16][red == CF_RED_MEAN ? CF_RED_SUM : red];
  switch (red) {
  case CF_RED_MAX: return MPI_MAX;
  case CF_RED_MIN: return MPI_MIN;
  case CF_RED_PROD: return MPI_PROD;
  default: return MPI_SUM;
  }
}

static bool is_int(cf_dtype dt) { return dt != CF_DT_FLOAT16 && dt != CF_DT_BFLOAT16 && dt != CF_DT_FLOAT32 && dt != CF_DT_FLOAT64; }

/* Integer mean sums exactly in int64 (like collfuse's kernels) and truncates. */
static bool wide_mean(const cf_coll_desc *d) { return d->red == CF_RED_MEAN && is_int(d->dtype); }

static void widen(int64_t *dst, const void *src, cf_dtype dt, int64_t n) {
  for (int64_t i = 0; i < n; i++) dst[i] = cf_load_i64(src, dt, i);
}

static void narrow_mean(void *dst, const int64_t *src, cf_dtype dt, int64_t n, int ranks) {
  for (int64_t i = 0; i < n; i++) cf_store_i64(dst, dt, i, src[i] / ranks);
}

static void scale_mean(cf_device *dev, const cf_coll_call *call, void *buf, int64_t n) {
  cf_kernel_key k = {.kind = CF_K_SCALE, .dtype = call->desc.dtype};
  if (n > 0 && call->n > 1) dev->ops->scale(dev, &k, buf, n, (double)call->n);
}

static char *at(const void *base, int64_t elems, int es) { return (char *)base + elems * (int64_t)es; }

static MPI_Comm group_comm(const cf_mpi_world *w, const cf_coll_call *call) {
  for (int i = 0; i < w->n_groups; i++)
    if (strcmp(w->groups[i].name, call->desc.group) == 0) return w->groups[i].comm;
  bool identity = call->n == w->comm.size;
  for (int i = 0; i < call->n && identity; i++) identity = call->ranks[i] == i;
  return identity ? w->world : MPI_COMM_NULL;
}

static int native_call(cf_mpi_world *w, cf_device *dev, const cf_coll_call *call, MPI_Comm comm) {
  const cf_coll_desc *d = &call->desc;
  int es = cf_dtype_size(d->dtype), n = call->n, me = call->me;
  MPI_Datatype t = mpi_type(w, d->dtype);
  MPI_Op op = d->red >= 0 ? mpi_op(w, d->dtype, d->red) : MPI_OP_NULL;
  int count = (int)d->count;
  bool wide = wide_mean(d);
  int64_t *wbuf = call->scratch;
  switch (d->op) {
  case CF_OP_ALLREDUCE:
    if (wide) {
      widen(wbuf, call->in, d->dtype, d->count);
      int rc = MPI_Allreduce(MPI_IN_PLACE, wbuf, count, MPI_INT64_T, MPI_SUM, comm);
      if (rc == MPI_SUCCESS) narrow_mean(call->out, wbuf, d->dtype, d->count, n);
      return rc;
    } else {
      int rc = MPI_Allreduce(call->in == call->out ? MPI_IN_PLACE : call->in, call->out, count, t, op, comm);
      if (rc == MPI_SUCCESS && d->red == CF_RED_MEAN) scale_mean(dev, call, call->out, d->count);
      return rc;
    }
  case CF_OP_REDUCE: {
    bool root = me == d->root;
    if (wide) {
      widen(wbuf, call->in, d->dtype, d->count);
      int rc = MPI_Reduce(root ? MPI_IN_PLACE : wbuf, root ? wbuf : NULL, count, MPI_INT64_T, MPI_SUM, d->root, comm);
      if (rc == MPI_SUCCESS && root) narrow_mean(call->out, wbuf, d->dtype, d->count, n);
      return rc;
    }
    int rc = MPI_Reduce(call->in, root ? call->out : NULL, count, t, op, d->root, comm);
    if (rc == MPI_SUCCESS && root && d->red == CF_RED_MEAN) scale_mean(dev, call, call->out, d->count);
    return rc;
  }
  case CF_OP_BROADCAST:
    if (me == d->root) dev->ops->copy(dev, call->out, call->in, (size_t)d->count * (size_t)es);
    return MPI_Bcast(call->out, count * es, MPI_BYTE, d->root, comm);
  case CF_OP_ALLGATHER: {
    const cf_coll_seg *s = call->segs;
    size_t bytes = (size_t)d->count * (size_t)es;
    if (call->n_segs == 1 && s->in_off == 0 && s->out_off == 0 && s->count == d->count)
      return MPI_Allgather(call->in, (int)bytes, MPI_BYTE, call->out, (int)bytes, MPI_BYTE, comm);
    /* a fused bucket: gather whole input buckets, then place the members */
    int rc = MPI_Allgather(call->in, (int)bytes, MPI_BYTE, call->scratch, (int)bytes, MPI_BYTE, comm);
    for (int p = 0; p < n && rc == MPI_SUCCESS; p++)
      for (int j = 0; j < call->n_segs; j++)
        dev->ops->copy(dev, at(call->out, call->segs[j].out_off + p * call->segs[j].count, es),
                       at(call->scratch, p * d->count + call->segs[j].in_off, es),
                       (size_t)call->segs[j].count * (size_t)es);
    return rc;
  }
  case CF_OP_REDUCESCATTER: {
    const cf_coll_seg *s = call->segs;
    if (call->n_segs == 1 && !wide) {
      int rc = MPI_Reduce_scatter_block(at(call->in, s->in_off, es), at(call->out, s->out_off, es),
                                        (int)s->count, t, op, comm);
      if (rc == MPI_SUCCESS && d->red == CF_RED_MEAN) scale_mean(dev, call, at(call->out, s->out_off, es), s->count);
      return rc;
    }
    /* pack every member's block p together (widened for integer mean),
     * reduce-scatter once, unpack */
    int64_t per = 0;
    for (int j = 0; j < call->n_segs; j++) per += s[j].count;
    int ws = wide ? 8 : es;
    char *packed = call->scratch, *mine = at(packed, (int64_t)n * per, ws);
    for (int p = 0; p < n; p++) {
      int64_t o = (int64_t)p * per;
      for (int j = 0; j < call->n_segs; j++) {
        const void *from = at(call->in, s[j].in_off + p * s[j].count, es);
        if (wide) widen((int64_t *)packed + o, from, d->dtype, s[j].count);
        else dev->ops->copy(dev, at(packed, o, es), from, (size_t)s[j].count * (size_t)es);
        o += s[j].count;
      }
    }
    int rc = MPI_Reduce_scatter_block(packed, mine, (int)per, wide ? MPI_INT64_T : t, wide ? MPI_SUM : op, comm);
    int64_t o = 0;
    for (int j = 0; j < call->n_segs && rc == MPI_SUCCESS; j++) {
      void *to = at(call->out, s[j].out_off, es);
      if (wide) narrow_mean(to, (int64_t *)mine + o, d->dtype, s[j].count, n);
      else {
        dev->ops->copy(dev, to, at(mine, o, es), (size_t)s[j].count * (size_t)es);
        if (d->red == CF_RED_MEAN) scale_mean(dev, call, to, s[j].count);
      }
      o += s[j].count;
    }
    return rc;
  }
  default: return MPI_ERR_OP;
  }
}

/* End the job from the watchdog: this rank's message, then MPI_Abort (the
 * blocked collective can neither return nor be interrupted). */
static void dog_bite(cf_mpi_world *w, const char *text) {
  fprintf(stderr, "error: %s\n", text);
  fflush(stdout);
  fflush(stderr);
  MPI_Abort(w->world, 3);
  _exit(3);
}

static void *dog_main(void *arg) {
  cf_mpi_world *w = arg;
  pthread_mutex_lock(&w->dog_lock);
  for (;;) {
    while (!w->dog_stop && w->native_deadline == 0) pthread_cond_wait(&w->dog_cond, &w->dog_lock);
    if (w->dog_stop) break;
    double deadline = w->native_deadline;
    char what[sizeof w->native_what];
    snprintf(what, sizeof what, "%s", w->native_what);
    pthread_mutex_unlock(&w->dog_lock);
    struct timespec ts = {0, 20 * 1000 * 1000};
    nanosleep(&ts, NULL);
    bool gone = poll_abort(w), late = now_s() > deadline;
    pthread_mutex_lock(&w->dog_lock);
    if (w->native_deadline != deadline) continue; /* that call has returned */
    if (gone) dog_bite(w, w->msg);
    if (late) {
      char text[512];
      snprintf(text, sizeof text,
               "rank %d timed out after %g s in %s: a rank of the group did not join (or has failed)",
               w->comm.rank, w->timeout_s, what);
      world_abort(w, text);
      dog_bite(w, text);
    }
  }
  pthread_mutex_unlock(&w->dog_lock);
  return NULL;
}

/* Arm (what != NULL) or disarm the watchdog around a native collective. */
static bool dog_watch(cf_mpi_world *w, const char *what) {
  pthread_mutex_lock(&w->dog_lock);
  if (what && !w->dog_started) w->dog_started = pthread_create(&w->dog, NULL, dog_main, w) == 0;
  bool ok = !what || w->dog_started;
  if (what) snprintf(w->native_what, sizeof w->native_what, "%s", what);
  w->native_deadline = what ? now_s() + w->timeout_s : 0;
  pthread_cond_broadcast(&w->dog_cond);
  pthread_mutex_unlock(&w->dog_lock);
  return ok;
}

static cf_status m_native(cf_comm *c, cf_device *dev, const cf_coll_call *call) {
  cf_mpi_world *w = c->impl;
  const cf_coll_desc *d = &call->desc;
  if (atomic_load(&w->aborted)) return aborted_error(c);
  if (call->me < 0) return CF_OK;
  MPI_Comm comm = group_comm(w, call);
  if (comm == MPI_COMM_NULL)
    return cf_error(c->ctx, CF_ERR_RUNTIME, NULL, 0,
                    "mpi-native: group '%s' has no MPI communicator (cf_mpi_prepare_native was not called)",
                    d->group);
  int64_t bytes = d->count * cf_dtype_size(d->dtype);
  if (d->count > INT32_MAX / 8 || bytes > INT32_MAX)
    return cf_error(c->ctx, CF_ERR_UNSUPPORTED, NULL, 0,
                    "mpi-native: %s '%s' moves %lld bytes, more than one MPI call can count (2 GiB)",
                    cf_op_table[d->op].name, d->node ? d->node : "?", (long long)bytes);
  if (call->scratch_bytes < cf_coll_scratch_bytes(d, call->n, CF_ALGO_MPI_NATIVE, false))
    return cf_error(c->ctx, CF_ERR_RUNTIME, NULL, 0, "mpi-native: %s '%s': the plan gave too little scratch",
                    cf_op_table[d->op].name, d->node ? d->node : "?");
  char what[256];
  snprintf(what, sizeof what, "MPI's %s '%s' (#%lld of group %s, mpi-native)", cf_op_table[d->op].name,
           d->node ? d->node : "?", (long long)d->seq, d->group);
  if (!dog_watch(w, what))
    return cf_error(c->ctx, CF_ERR_RUNTIME, NULL, 0, "mpi-native: cannot start the watchdog thread");
  lk(w);
  int rc = native_call(w, dev, call, comm);
  ulk(w);
  dog_watch(w, NULL);
  if (rc != MPI_SUCCESS) {
    char e[MPI_MAX_ERROR_STRING], text[768];
    snprintf(text, sizeof text, "rank %d: MPI's %s failed in '%s' (group %s): %s", c->rank,
             cf_op_table[d->op].name, d->node ? d->node : "?", d->group, mpi_text(rc, e));
    return fail_all(c, text);
  }
  return CF_OK;
}

static const cf_comm_ops mpi_ops = {
    .name = "mpi",
    .zero_copy = false,
    .send = m_send,
    .recv = m_recv,
    .release = m_release,
    .sent = m_sent,
    .wait_released = m_wait_released,
    .send_wait = m_send_wait,
    .abort = m_abort,
    .aborted = m_aborted,
    .native = m_native,
};

/* ---------------- the world ---------------- */

static cf_status mpi_error(cf_context *ctx, const char *what, int rc) {
  char e[MPI_MAX_ERROR_STRING];
  return cf_error(ctx, CF_ERR_RUNTIME, NULL, 0, "mpi transport: %s: %s", what, mpi_text(rc, e));
}

cf_status cf_mpi_world_create(cf_context *ctx, double timeout_s, cf_mpi_world **out) {
  *out = NULL;
  cf_mpi_world *w = calloc(1, sizeof *w);
  if (!w) return cf_error(ctx, CF_ERR_NO_MEMORY, NULL, 0, "mpi transport: out of memory");
  pthread_mutex_init(&w->mpi_lock, NULL);
  pthread_mutex_init(&w->abort_lock, NULL);
  pthread_mutex_init(&w->dog_lock, NULL);
  pthread_cond_init(&w->dog_cond, NULL);
  w->timeout_s = timeout_s > 0 ? timeout_s : 60;
  w->kill_at = -1;
  w->world = MPI_COMM_NULL;
  w->abort_req = MPI_REQUEST_NULL;
  w->half = MPI_DATATYPE_NULL;
  int inited = 0, provided = 0, rc;
  MPI_Initialized(&inited);
  if (!inited) {
    rc = MPI_Init_thread(NULL, NULL, MPI_THREAD_MULTIPLE, &provided);
    if (rc != MPI_SUCCESS) {
      free(w);
      return cf_error(ctx, CF_ERR_RUNTIME, NULL, 0, "mpi transport: MPI_Init_thread failed (%d)", rc);
    }
    w->we_initialized = true;
  } else {
    MPI_Query_thread(&provided);
  }
  if (provided < MPI_THREAD_SERIALIZED) {
    cf_status st = cf_error(ctx, CF_ERR_UNSUPPORTED, NULL, 0,
                            "mpi transport: this MPI gives thread level %d; collfuse needs "
                            "MPI_THREAD_SERIALIZED or MPI_THREAD_MULTIPLE",
                            provided);
    cf_mpi_world_destroy(w, 0);
    return st;
  }
  w->multiple = provided >= MPI_THREAD_MULTIPLE;
  if ((rc = MPI_Comm_dup(MPI_COMM_WORLD, &w->world)) != MPI_SUCCESS) {
    cf_status st = mpi_error(ctx, "MPI_Comm_dup", rc);
    cf_mpi_world_destroy(w, 0);
    return st;
  }
  MPI_Comm_set_errhandler(w->world, MPI_ERRORS_RETURN);
  MPI_Comm_rank(w->world, &w->comm.rank);
  MPI_Comm_size(w->world, &w->comm.size);
  w->comm.ops = &mpi_ops;
  w->comm.ctx = ctx;
  w->comm.impl = w;
  int len = 0;
  MPI_Get_processor_name(w->host, &len);
  w->host[len < 0 ? 0 : len] = 0;
  MPI_Comm node;
  w->local_size = 1;
  if (MPI_Comm_split_type(w->world, MPI_COMM_TYPE_SHARED, w->comm.rank, MPI_INFO_NULL, &node) == MPI_SUCCESS) {
    MPI_Comm_size(node, &w->local_size);
    MPI_Comm_free(&node);
  }
  long cpus = sysconf(_SC_NPROCESSORS_ONLN);
  w->spin = w->local_size <= cpus ? 64 : 16; /* then yield: a peer may share this core */
  MPI_Type_contiguous(2, MPI_BYTE, &w->half);
  MPI_Type_commit(&w->half);
  MPI_User_function *fns[2][CF_RED_COUNT] = {
      {f16_sum, f16_sum, f16_max, f16_min, f16_prod}, {bf16_sum, bf16_sum, bf16_max, bf16_min, bf16_prod}};
  for (int b = 0; b < 2; b++)
    for (int r = 0; r < CF_RED_COUNT; r++) MPI_Op_create(fns[b][r], 1, &w->half_op[b][r]);
  int n = w->comm.size;
  w->peers = calloc((size_t)n, sizeof *w->peers);
  w->abort_out = calloc((size_t)n, sizeof *w->abort_out);
  if (!w->peers || !w->abort_out) goto oom;
  for (int r = 0; r < n; r++) {
    w->peers[r].hreq = MPI_REQUEST_NULL;
    w->abort_out[r] = MPI_REQUEST_NULL;
    if (r == w->comm.rank) continue;
    if (!(w->peers[r].rbuf = malloc(HDR_CAP))) goto oom;
    cf_status st = post_header(&w->comm, r);
    if (st) {
      cf_mpi_world_destroy(w, 0);
      return st;
    }
  }
  rc = MPI_Irecv(w->abort_in, (int)sizeof w->abort_in, MPI_CHAR, MPI_ANY_SOURCE, TAG_ABORT, w->world,
                 &w->abort_req);
  if (rc != MPI_SUCCESS) {
    cf_status st = mpi_error(ctx, "MPI_Irecv", rc);
    cf_mpi_world_destroy(w, 0);
    return st;
  }
  *out = w;
  return CF_OK;
oom:
  cf_mpi_world_destroy(w, 0);
  return cf_error(ctx, CF_ERR_NO_MEMORY, NULL, 0, "mpi transport: out of memory");
}

cf_comm *cf_mpi_comm(cf_mpi_world *w) { return w ? &w->comm : NULL; }

int cf_mpi_local_size(const cf_mpi_world *w) { return w ? w->local_size : 1; }

const char *cf_mpi_host(const cf_mpi_world *w) { return w ? w->host : ""; }

void cf_mpi_test_kill(cf_mpi_world *w, int64_t k) {
  if (w) w->kill_at = k;
}

cf_status cf_mpi_prepare_native(cf_mpi_world *w, const struct cf_plan *p) {
  cf_context *ctx = w->comm.ctx;
  if (p->opt.algo != CF_ALGO_MPI_NATIVE && p->opt.algo != CF_ALGO_AUTO_NATIVE) return CF_OK;
  MPI_Group world_group;
  MPI_Comm_group(w->world, &world_group);
  cf_status st = CF_OK;
  for (int c = 0; c < p->n_colls && !st; c++) {
    const cf_pcoll *pc = &p->colls[c];
    bool seen = false, member = false, identity = pc->n == w->comm.size;
    for (int i = 0; i < w->n_groups && !seen; i++) seen = strcmp(w->groups[i].name, pc->desc.group) == 0;
    for (int i = 0; i < pc->n; i++) {
      member |= pc->ranks[i] == w->comm.rank;
      identity &= pc->ranks[i] == i;
    }
    if (seen || identity) continue;
    native_group *ng = realloc(w->groups, sizeof *ng * (size_t)(w->n_groups + 1));
    if (!ng) {
      st = cf_error(ctx, CF_ERR_NO_MEMORY, NULL, 0, "mpi transport: out of memory");
      break;
    }
    w->groups = ng;
    native_group *g = &w->groups[w->n_groups++];
    snprintf(g->name, sizeof g->name, "%s", pc->desc.group);
    g->comm = MPI_COMM_NULL;
    if (!member) continue; /* only the group's ranks create it */
    MPI_Group grp;
    int rc = MPI_Group_incl(world_group, pc->n, pc->ranks, &grp);
    if (rc == MPI_SUCCESS) {
      rc = MPI_Comm_create_group(w->world, grp, TAG_GROUP + w->n_groups, &g->comm);
      MPI_Group_free(&grp);
    }
    if (rc != MPI_SUCCESS) st = mpi_error(ctx, "MPI_Comm_create_group", rc);
    else MPI_Comm_set_errhandler(g->comm, MPI_ERRORS_RETURN);
  }
  MPI_Group_free(&world_group);
  return st;
}

cf_status cf_mpi_max(cf_mpi_world *w, double *v, int n) {
  MPI_Request req;
  lk(w);
  int rc = MPI_Iallreduce(MPI_IN_PLACE, v, n, MPI_DOUBLE, MPI_MAX, w->world, &req);
  ulk(w);
  wait_what ww = {"every rank's results", -1, NULL};
  if (rc != MPI_SUCCESS) return mpi_failed(&w->comm, rc, &ww);
  return wait_all(&w->comm, &req, 1, NULL, &ww);
}

void cf_mpi_abort(cf_mpi_world *w, const char *text) {
  if (w) world_abort(w, text);
}

/* A failed run must end even if a peer never reaches MPI_Finalize. */
typedef struct watchdog {
  double seconds;
  int code;
} watchdog;

static void *watchdog_main(void *arg) {
  const watchdog *wd = arg;
  struct timespec ts = {(time_t)wd->seconds, (long)((wd->seconds - (double)(time_t)wd->seconds) * 1e9)};
  nanosleep(&ts, NULL);
  fflush(stdout);
  fflush(stderr);
  _exit(wd->code);
  return NULL;
}

void cf_mpi_world_destroy(cf_mpi_world *w, int exit_code) {
  if (!w) return;
  pthread_mutex_lock(&w->dog_lock);
  w->dog_stop = true;
  pthread_cond_broadcast(&w->dog_cond);
  pthread_mutex_unlock(&w->dog_lock);
  if (w->dog_started) pthread_join(w->dog, NULL);
  if (exit_code && w->we_initialized) {
    fflush(stdout);
    fflush(stderr);
    /* the others stop at their next wait, which reads our abort (or they
     * are already failing): give them a moment to print and finalize. The
     * watchdog owns wd until the process ends. */
    watchdog *wd = malloc(sizeof *wd);
    pthread_t t;
    if (wd) {
      wd->seconds = w->timeout_s < 5 ? w->timeout_s : 5;
      wd->code = exit_code;
      if (pthread_create(&t, NULL, watchdog_main, wd) == 0) pthread_detach(t);
      else free(wd);
    }
  }
  int fin = 0;
  MPI_Finalized(&fin);
  if (!fin && w->world != MPI_COMM_NULL) {
    lk(w);
    /* posted receives: cancel them (a cancelled receive completes at once) */
    for (int r = 0; w->peers && r < w->comm.size; r++)
      if (w->peers[r].hreq != MPI_REQUEST_NULL) {
        MPI_Cancel(&w->peers[r].hreq);
        MPI_Wait(&w->peers[r].hreq, MPI_STATUS_IGNORE);
      }
    pthread_mutex_lock(&w->abort_lock);
    if (w->abort_req != MPI_REQUEST_NULL) {
      MPI_Cancel(&w->abort_req);
      MPI_Wait(&w->abort_req, MPI_STATUS_IGNORE);
    }
    pthread_mutex_unlock(&w->abort_lock);
    /* sends: complete ones are freed; after a failure the rest are left to MPI */
    for (int r = 0; w->peers && r < w->comm.size; r++) {
      peer *p = &w->peers[r];
      for (uint64_t i = p->done; i < p->posted; i++) {
        send_slot *s = &p->slots[i % p->cap];
        for (int k = 0; k < s->nreq; k++)
          if (s->req[k] != MPI_REQUEST_NULL) MPI_Request_free(&s->req[k]);
      }
    }
    for (int r = 0; w->abort_out && r < w->comm.size; r++)
      if (w->abort_out[r] != MPI_REQUEST_NULL) MPI_Request_free(&w->abort_out[r]);
    for (int i = 0; i < w->n_groups; i++)
      if (w->groups[i].comm != MPI_COMM_NULL) MPI_Comm_free(&w->groups[i].comm);
    for (int b = 0; b < 2; b++)
      for (int r = 0; r < CF_RED_COUNT; r++)
        if (w->half_op[b][r] != MPI_OP_NULL && w->half_op[b][r]) MPI_Op_free(&w->half_op[b][r]);
    if (w->half != MPI_DATATYPE_NULL) MPI_Type_free(&w->half);
    MPI_Comm_free(&w->world);
    ulk(w);
  }
  if (!fin && w->we_initialized) MPI_Finalize();
  for (int r = 0; w->peers && r < w->comm.size; r++) {
    peer *p = &w->peers[r];
    for (uint64_t i = 0; i < p->cap; i++) free(p->slots[i].buf);
    free(p->slots);
    free(p->rbuf);
  }
  free(w->peers);
  free(w->abort_out);
  free(w->groups);
  pthread_mutex_destroy(&w->mpi_lock);
  pthread_mutex_destroy(&w->abort_lock);
  pthread_mutex_destroy(&w->dog_lock);
  pthread_cond_destroy(&w->dog_cond);
  free(w);
}
