/* transports/mpi.c - ranks as MPI processes (`collfuse run --backend mpi`
 * under mpirun).
 *
 * The same two-sided, in-order messages as the threads transport, carried
 * by nonblocking MPI point-to-point calls on a duplicate of MPI_COMM_WORLD,
 * so collfuse's own algorithms and kernels run unchanged (as UCC runs its
 * algorithms over UCX). A message is a header on one tag (the collective's
 * descriptor with its group and node names, the payload size, and the
 * payload itself up to inline_max, so that the message stays below the
 * eager limit of shared memory or TCP and a small message is one eager MPI
 * message)
 * and, for larger payloads, the payload on a second tag, received straight
 * into the caller's staging buffer once the header has been checked (a
 * payload that does not belong is never received). Payloads up to
 * SPLIT_MAX go in eager pieces, which beats the rendezvous a single
 * message would need; larger ones go whole (shared memory's single copy
 * then reads them straight from the sender). Each peer's next header
 * receive is always posted, so headers land without an unexpected-message
 * copy. A send is released when its MPI requests complete: the data then
 * sit in the receiver's staging (or MPI's buffers) and the sender may
 * reuse its buffer.
 *
 * Every wait polls its requests with the run's deadline and watches for an
 * abort: abort() sends the reason to every rank on a third tag, where a
 * receive from any source is always posted, so all ranks stop with the same
 * message. A rank that times out asks along the chain of waits for the
 * rank at its end before it names one (see "asking along the chain").
 * A descriptor mismatch is reported with the lower rank first, so
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
 * A failed rank never hangs in MPI_Finalize: it waits a few seconds for
 * every rank to stop too (a barrier with a deadline), then all finalize, or
 * MPI_Abort ends the job when a rank is gone.
 *
 * A process has one world, whatever the number of creates: a second one
 * (another executable of the C API's cf_executable_run_rank) shares the
 * first's, as the shm world's joins do, so every executable's messages
 * keep one order on one communicator. A new executable's start-up
 * (cf_exec_meet) then meets a peer's repeated run of a kept one at its
 * first message, exit 3 naming both; with a duplicate of MPI_COMM_WORLD
 * each, the new one waited in MPI_Comm_dup, which has no deadline, for a
 * rank that never came. The native slot (MPI's own
 * collectives, --algo mpi-native) lives in mpi_native.c; the abort protocol
 * and the MPI call lock, which both use, in mpi_abort.c.
 */
#define _GNU_SOURCE
#include "mpi_internal.h"

#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* Payloads the header carries: over shared memory header + names + this
 * stay below vader's 4 KiB eager limit; over a network below TCP's 64 KiB
 * one, since there every MPI message costs system calls and a separate
 * payload a second message (or a rendezvous). */
#define INLINE_SHM ((size_t)3584)
#define INLINE_NET ((size_t)63 << 10)
#define PART_MAX ((size_t)1 << 30)   /* MPI counts are int: payloads go in 1 GiB pieces */
#define SPLIT_MAX ((size_t)12 << 10) /* shared memory: payloads up to this go in eager pieces */
/* a piece + MPI's match header < 4 KiB (vader's eager limit) */
#define EAGER_PIECE ((size_t)4032)
#define NET_PIECE ((size_t)63 << 10) /* network: eager pieces (< TCP's 64 KiB eager limit) */
/* network: payloads up to this go in eager pieces; larger ones whole (a
 * rendezvous, pipelined by MPI), measured faster for 1 MiB at 2 ranks */
#define NET_SPLIT_MAX ((size_t)256 << 10)

/* The header of every message; group_len and node_len bytes of the names
 * follow it (no NUL), then the payload when inline is set. */
typedef struct wire_hdr {
  int64_t seq, count, bytes, segment;
  int32_t op, dtype, red, root, layout, algo, chunks;
  uint8_t has_desc, inline_data;
  uint16_t group_len, node_len;
} wire_hdr;
#define HDR_CAP(w) (sizeof(wire_hdr) + GROUP_MAX + NODE_MAX + (w)->inline_max)

/* ---------------- waiting ---------------- */

/* What a rank is waiting for, so a timeout can say so. */
typedef struct wait_what {
  const char *verb;
  int peer;
  const cf_coll_desc *d;
} wait_what;

/* ---- asking along the chain ----
 * A rank that times out waiting for a peer may be one link of a chain: it
 * waits for rank 2 at a barrier while rank 2 waits for rank 1, which
 * stopped. Every rank's timer runs alike, so which one fires first is a
 * matter of timing, and blaming rank 2 would send the user to the wrong
 * process. So before it gives up, the timed-out rank asks its peer whom
 * that one waits for (every wait answers such questions as it polls, on a
 * receive from any source that is always posted), follows the answers to
 * the rank that does not answer, and names that rank; ranks that answer
 * each other in a circle are a deadlock and are named as one. */

/* Answer the questions that arrived: whom this rank's wait is for. */
static void answer_questions(cf_mpi_world *w) {
  if (pthread_mutex_trylock(&w->ask_lock) != 0) return; /* the other thread answers */
  for (int k = 0; k < 4 && w->ask_req != MPI_REQUEST_NULL; k++) {
    int done = 0;
    MPI_Status s;
    cf_mpi_lock(w);
    if (MPI_Test(&w->ask_req, &done, &s) == MPI_SUCCESS && done) {
      int src = s.MPI_SOURCE, free_slot = 1;
      if (src >= 0 && src < w->comm.size && src != w->comm.rank) {
        if (w->answer_out[src] != MPI_REQUEST_NULL)
          MPI_Test(&w->answer_out[src], &free_slot, MPI_STATUS_IGNORE);
        if (free_slot) { /* else an earlier answer is still on its way: this one is dropped */
          w->answer[src][0] = w->ask_in;
          w->answer[src][1] = atomic_load(&w->waiting_for);
          MPI_Isend(w->answer[src], 2, MPI_INT, src, TAG_ANSWER, w->world, &w->answer_out[src]);
        }
      }
      if (MPI_Irecv(&w->ask_in, 1, MPI_INT, MPI_ANY_SOURCE, TAG_ASK, w->world, &w->ask_req) !=
          MPI_SUCCESS)
        w->ask_req = MPI_REQUEST_NULL;
    }
    cf_mpi_unlock(w);
    if (!done) break;
  }
  pthread_mutex_unlock(&w->ask_lock);
}

enum { NO_ANSWER = -2, ABORTED = -3 };

/* Ask rank who whom it waits for: a rank, -1 (no one rank), NO_ANSWER within
 * seconds, or ABORTED (another rank's reason arrived meanwhile). */
static int ask(cf_mpi_world *w, int who, double seconds) {
  int got[2] = {0, 0}, done = 0, rc;
  MPI_Request req = MPI_REQUEST_NULL;
  cf_mpi_lock(w);
  if (w->question_out[who] != MPI_REQUEST_NULL) /* an earlier question never left */
    MPI_Test(&w->question_out[who], &done, MPI_STATUS_IGNORE);
  else
    done = 1;
  int q = ++w->questions;
  rc = done ? MPI_Irecv(got, 2, MPI_INT, who, TAG_ANSWER, w->world, &req) : MPI_ERR_OTHER;
  if (rc == MPI_SUCCESS) {
    w->question[who] = q;
    rc = MPI_Isend(&w->question[who], 1, MPI_INT, who, TAG_ASK, w->world, &w->question_out[who]);
  }
  cf_mpi_unlock(w);
  int result = NO_ANSWER;
  double end = cf_now() + seconds;
  while (rc == MPI_SUCCESS && cf_now() < end) {
    done = 0;
    cf_mpi_lock(w);
    rc = MPI_Test(&req, &done, MPI_STATUS_IGNORE);
    if (rc == MPI_SUCCESS && done && got[0] != q) /* a late answer to an earlier question */
      rc = MPI_Irecv(got, 2, MPI_INT, who, TAG_ANSWER, w->world, &req), done = 0;
    cf_mpi_unlock(w);
    if (done) {
      result = got[1] >= 0 && got[1] < w->comm.size ? got[1] : -1;
      break;
    }
    answer_questions(w); /* whoever asks us meanwhile learns we wait too */
    if (cf_mpi_poll_abort(w)) {
      result = ABORTED;
      break;
    }
    struct timespec ts = {0, 100000};
    nanosleep(&ts, NULL);
  }
  if (req != MPI_REQUEST_NULL) { /* no answer: withdraw the receive */
    cf_mpi_lock(w);
    MPI_Cancel(&req);
    MPI_Wait(&req, MPI_STATUS_IGNORE);
    cf_mpi_unlock(w);
  }
  return result;
}

/* Follow the waits from who; append to text what was found. Returns
 * false when another rank's reason arrived meanwhile (that one wins). */
static bool follow_chain(cf_comm *c, int who, char *text, size_t cap) {
  cf_mpi_world *w = c->impl;
  double hop = w->timeout_s / 3;
  hop = hop < 0.25 ? 0.25 : hop > 2 ? 2 : hop;
  int chain[64], n = 0;
  chain[n++] = who;
  for (;;) {
    int cur = chain[n - 1], next = ask(w, cur, hop);
    if (next == ABORTED) return false;
    size_t len = strlen(text);
    if (next == -1) {
      snprintf(text + len, cap - len, "; rank %d is waiting too, for no one rank", cur);
      return true;
    }
    if (next == NO_ANSWER || n == (int)(sizeof chain / sizeof *chain)) {
      if (n > 1) snprintf(text + len, cap - len, ", which does not answer");
      len = strlen(text);
      snprintf(text + len, cap - len, "; rank %d may have failed or stopped", cur);
      return true;
    }
    len = strlen(text);
    snprintf(text + len, cap - len, "; rank %d waits for rank %d", cur, next);
    int seen = next == c->rank ? 0 : -1;
    for (int i = 0; i < n && seen < 0; i++)
      if (chain[i] == next) seen = i + 1;
    if (seen >= 0) { /* a circle: from next (or this rank) round to it again */
      len = strlen(text);
      snprintf(text + len, cap - len, ": ranks %d", next);
      for (int i = seen ? seen : 0; i < n; i++) {
        len = strlen(text);
        snprintf(text + len, cap - len, ", %d", chain[i]);
      }
      len = strlen(text);
      snprintf(text + len, cap - len, " wait for each other (a deadlock)");
      return true;
    }
    chain[n++] = next;
  }
}

static cf_status timed_out(cf_comm *c, const wait_what *ww) {
  cf_mpi_world *w = c->impl;
  char text[MSG_MAX];
  if (ww->d && ww->d->op == CF_OP_INVALID) /* exec.c's barrier between iterations */
    snprintf(text, sizeof text,
             "rank %d timed out after %g s waiting for %s rank %d at a barrier between iterations",
             c->rank, w->timeout_s, ww->verb, ww->peer);
  else if (ww->d)
    snprintf(text, sizeof text,
             "rank %d timed out after %g s waiting for %s rank %d in %s '%s' (#%lld of group %s)",
             c->rank, w->timeout_s, ww->verb, ww->peer, cf_op_table[ww->d->op].name,
             ww->d->node ? ww->d->node : "?", (long long)ww->d->seq, ww->d->group);
  else if (ww->peer >= 0)
    snprintf(text, sizeof text, "rank %d timed out after %g s waiting for %s rank %d", c->rank,
             w->timeout_s, ww->verb, ww->peer);
  else
    snprintf(text, sizeof text, "rank %d timed out after %g s waiting for %s", c->rank,
             w->timeout_s, ww->verb);
  if (ww->peer >= 0 && !follow_chain(c, ww->peer, text, sizeof text))
    return cf_mpi_aborted_error(c);
  return cf_mpi_fail_all(c, text);
}

static cf_status mpi_failed(cf_comm *c, int rc, const wait_what *ww) {
  char e[MPI_MAX_ERROR_STRING], text[768];
  if (ww->peer >= 0)
    snprintf(text, sizeof text, "rank %d: MPI failed while waiting for %s rank %d: %s", c->rank,
             ww->verb, ww->peer, cf_mpi_error_text(rc, e));
  else
    snprintf(text, sizeof text, "rank %d: MPI failed while waiting for %s: %s", c->rank, ww->verb,
             cf_mpi_error_text(rc, e));
  return cf_mpi_fail_all(c, text);
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
static cf_status wait_all(cf_comm *c, MPI_Request *req, int n, MPI_Status *st0,
                          const wait_what *ww) {
  cf_mpi_world *w = c->impl;
  MPI_Status sts[1 + MAX_PARTS];
  double start = 0;
  for (long i = 0;; i++) {
    int done = 0;
    cf_mpi_lock(w);
    int rc = MPI_Testall(n, req, &done, sts);
    cf_mpi_unlock(w);
    if (rc != MPI_SUCCESS) return mpi_failed(c, rc, ww);
    if (done) {
      if (st0) *st0 = sts[0];
      return CF_OK;
    }
    if ((i & 15) == 15) {
      if (cf_mpi_poll_abort(w)) return cf_mpi_aborted_error(c);
      answer_questions(w);
    }
    if (i == 0) {
      atomic_store(&w->waiting_for, ww->peer);
      start = cf_now();
      continue;
    }
    double waited = i < w->spin && (i & 255) ? 0 : cf_now() - start;
    if (waited > w->timeout_s) return timed_out(c, ww);
    backoff(w, i, waited);
  }
}

/* ---------------- messages ---------------- */

/* How a payload that travels apart is cut (both sides agree by its size). */
/* Eager pieces and whole payloads travel on tags of their own: a receive
 * posted early for pieces can then never match a whole payload (a
 * rendezvous) from a sender whose size differs, which Open MPI's TCP
 * transport does not survive when the receive is the smaller. */
static int data_tag(size_t piece) { return piece == PART_MAX ? TAG_BULK : TAG_DATA; }

static size_t piece_bytes(const cf_mpi_world *w, size_t bytes) {
  if (w->shm) return bytes <= SPLIT_MAX ? EAGER_PIECE : PART_MAX;
  return bytes <= NET_SPLIT_MAX ? NET_PIECE : PART_MAX;
}

static send_slot *next_slot(cf_comm *c, peer *p) {
  if (p->posted - p->done == p->cap) { /* full: double the ring, keep slots in flight at i % cap */
    uint64_t cap = p->cap ? 2 * p->cap : 8;
    send_slot *ns = calloc((size_t)cap, sizeof *ns);
    if (!ns) return NULL;
    for (uint64_t i = p->done; i < p->posted; i++) {
      ns[i % cap] = p->slots[i % p->cap];
      p->slots[i % p->cap].buf = NULL;
    }
    for (uint64_t i = 0; i < p->cap; i++)
      free(p->slots[i].buf); /* free ones, not in flight */
    free(p->slots);
    p->slots = ns;
    p->cap = cap;
  }
  send_slot *s = &p->slots[p->posted % p->cap];
  if (!s->buf && !(s->buf = malloc(HDR_CAP((cf_mpi_world *)c->impl)))) return NULL;
  return s;
}

static cf_status m_send(cf_comm *c, int dst, const void *buf, size_t bytes, const cf_coll_desc *d) {
  cf_mpi_world *w = c->impl;
  if (atomic_load(&w->aborted)) return cf_mpi_aborted_error(c);
  size_t glen = d && d->group ? strnlen(d->group, GROUP_MAX - 1) : 0;
  size_t nlen = d && d->node ? strnlen(d->node, NODE_MAX - 1) : 0;
  size_t head = sizeof(wire_hdr) + glen + nlen;
  bool inl = bytes <= w->inline_max;
  size_t piece = piece_bytes(w, bytes), parts = inl ? 0 : (bytes + piece - 1) / piece;
  if (parts > MAX_PARTS)
    return cf_error(c->ctx, CF_ERR_UNSUPPORTED, NULL, 0,
                    "mpi transport: a message of %zu bytes is too large", bytes);
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
    h.algo = d->algo;
    h.segment = d->segment;
    h.chunks = d->chunks;
    h.group_len = (uint16_t)glen;
    h.node_len = (uint16_t)nlen;
  }
  memcpy(s->buf, &h, sizeof h);
  if (glen) memcpy(s->buf + sizeof h, d->group, glen);
  if (nlen) memcpy(s->buf + sizeof h + glen, d->node, nlen);
  if (inl && bytes) memcpy(s->buf + head, buf, bytes);
  s->nreq = 0;
  cf_mpi_lock(w);
  int rc = MPI_Isend(s->buf, (int)(head + (inl ? bytes : 0)), MPI_BYTE, dst, TAG_HDR, w->world,
                     &s->req[s->nreq++]);
  for (size_t k = 0; k < parts && rc == MPI_SUCCESS; k++) {
    size_t off = k * piece, len = bytes - off < piece ? bytes - off : piece;
    rc = MPI_Isend((const char *)buf + off, (int)len, MPI_BYTE, dst, data_tag(piece), w->world,
                   &s->req[s->nreq++]);
  }
  cf_mpi_unlock(w);
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
  cf_mpi_lock(w);
  int rc = MPI_Irecv(p->rbuf, (int)HDR_CAP(w), MPI_BYTE, src, TAG_HDR, w->world, &p->hreq);
  cf_mpi_unlock(w);
  if (rc != MPI_SUCCESS) {
    wait_what ww = {"a message from", src, NULL};
    return mpi_failed(c, rc, &ww);
  }
  return CF_OK;
}

/* Post the receives of a payload of bytes (not inline) into staging. */
static int post_data(cf_mpi_world *w, int src, void *staging, size_t bytes, MPI_Request *req,
                     int *n) {
  size_t piece = piece_bytes(w, bytes);
  int rc = MPI_SUCCESS;
  *n = 0;
  if ((bytes + piece - 1) / piece > MAX_PARTS) return MPI_ERR_COUNT; /* the sender refuses it too */
  cf_mpi_lock(w);
  for (size_t off = 0; off < bytes && rc == MPI_SUCCESS; off += piece) {
    size_t len = bytes - off < piece ? bytes - off : piece;
    rc = MPI_Irecv((char *)staging + off, (int)len, MPI_BYTE, src, data_tag(piece), w->world,
                   &req[(*n)++]);
  }
  cf_mpi_unlock(w);
  return rc;
}

/* A failed receive withdraws the payload receives it posted early: cancel
 * them and give MPI a moment to complete the cancellation (the caller's
 * staging is freed once the run ends). */
static void cancel_data(cf_mpi_world *w, MPI_Request *req, int n) {
  cf_mpi_lock(w);
  for (int k = 0; k < n; k++)
    if (req[k] != MPI_REQUEST_NULL) MPI_Cancel(&req[k]);
  double end = cf_now() + 0.5;
  int done = 0;
  while (!done && cf_now() < end)
    MPI_Testall(n, req, &done, MPI_STATUSES_IGNORE);
  for (int k = 0; k < n && !done; k++)
    if (req[k] != MPI_REQUEST_NULL) MPI_Request_free(&req[k]);
  cf_mpi_unlock(w);
}

/* Wait for src's next header, check it against d and bytes, and receive
 * the payload into staging (into the receives in req[0..*n) when posted
 * early; *n is 0 once they completed). */
static cf_status recv_msg(cf_comm *c, int src, void *staging, size_t bytes, const cf_coll_desc *d,
                          MPI_Request *req, int *n) {
  cf_mpi_world *w = c->impl;
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
      (bool)h.inline_data != ((size_t)h.bytes <= w->inline_max)) {
    snprintf(text, sizeof text, "rank %d received a malformed message (%d bytes) from rank %d",
             c->rank, got, src);
    return cf_mpi_fail_all(c, text);
  }
  memcpy(group, p->rbuf + sizeof h, h.group_len);
  group[h.group_len] = 0;
  memcpy(node, p->rbuf + sizeof h + h.group_len, h.node_len);
  node[h.node_len] = 0;
  if (d || h.has_desc) { /* on one side only: one rank checks its plan, the other runs */
    cf_coll_desc theirs = {.seq = h.seq,
                           .op = (cf_op)h.op,
                           .dtype = (cf_dtype)h.dtype,
                           .count = h.count,
                           .red = h.red,
                           .root = h.root,
                           .layout = h.layout,
                           .algo = h.algo,
                           .segment = h.segment,
                           .chunks = h.chunks,
                           .group = group,
                           .node = node};
    if (h.has_desc && (h.op < 0 || h.op >= CF_OP_COUNT || h.dtype < 0 || h.dtype >= CF_DT_COUNT)) {
      snprintf(text, sizeof text, "rank %d received a malformed header from rank %d", c->rank, src);
      return cf_mpi_fail_all(c, text);
    }
    if (cf_coll_desc_mismatch(d, c->rank, h.has_desc ? &theirs : NULL, src, text, sizeof text))
      return cf_mpi_fail_all(c, text);
  }
  if ((size_t)h.bytes != bytes) {
    cf_coll_size_mismatch(text, sizeof text, c->rank, bytes, src, (long long)h.bytes, d);
    return cf_mpi_fail_all(c, text);
  }
  if (bytes && !staging)
    return cf_error(c->ctx, CF_ERR_RUNTIME, NULL, 0,
                    "mpi transport: a receive of %zu bytes without staging", bytes);
  if (h.inline_data && bytes) memcpy(staging, p->rbuf + head, bytes);
  if ((st = post_header(c, src))) return st;
  if (!h.inline_data) {
    ww.verb = "the data of a message from";
    if (!*n) {
      if (cf_mpi_poll_abort(w))
        return cf_mpi_aborted_error(c); /* never start reading a failed run's data */
      int rc = post_data(w, src, staging, bytes, req, n);
      if (rc != MPI_SUCCESS) return mpi_failed(c, rc, &ww);
    }
    if ((st = wait_all(c, req, *n, NULL, &ww))) return st;
  }
  *n = 0;
  return CF_OK;
}

/* Over a network a payload that travels in eager pieces has its receives
 * posted before its header arrives (the size expected is known), so the
 * pieces land in staging at once instead of as unexpected messages; a
 * header that does not match withdraws them (a piece from a sender with
 * more bytes is truncated or never matched). A payload sent whole, and
 * every payload over shared memory, is received only after its header was
 * checked: a rendezvous larger than the receive must never start. */
static cf_status m_recv(cf_comm *c, int src, void *staging, size_t bytes, const cf_coll_desc *d,
                        const void **data) {
  cf_mpi_world *w = c->impl;
  *data = NULL;
  MPI_Request req[MAX_PARTS];
  int n = 0;
  if (!w->shm && staging && bytes > w->inline_max && bytes <= NET_SPLIT_MAX) {
    if (cf_mpi_poll_abort(w)) return cf_mpi_aborted_error(c);
    int rc = post_data(w, src, staging, bytes, req, &n);
    if (rc != MPI_SUCCESS) {
      wait_what ww = {"the data of a message from", src, d};
      cancel_data(w, req, n);
      return mpi_failed(c, rc, &ww);
    }
  }
  cf_status st = recv_msg(c, src, staging, bytes, d, req, &n);
  if (st) {
    if (n) cancel_data(w, req, n);
    return st;
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

static void m_abort(cf_comm *c, const char *text) { cf_mpi_world_abort(c->impl, text); }

static bool m_aborted(cf_comm *c, const char **text) {
  cf_mpi_world *w = c->impl;
  if (!cf_mpi_poll_abort(w)) return false;
  if (text) *text = w->msg;
  return true;
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
    .native = cf_mpi_native,
};

/* ---------------- the world ---------------- */

static cf_status mpi_error(cf_context *ctx, const char *what, int rc) {
  char e[MPI_MAX_ERROR_STRING];
  return cf_error(ctx, CF_ERR_RUNTIME, NULL, 0, "mpi transport: %s: %s", what,
                  cf_mpi_error_text(rc, e));
}

/* Does OpenMPI's btl list (mpirun --mca btl ...) allow shared memory? */
static bool btl_allows_shm(const char *list) {
  if (!list || !*list) return true;
  bool excl = list[0] == '^', named = false;
  char buf[256];
  snprintf(buf, sizeof buf, "%s", list + excl);
  for (char *save = NULL, *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save))
    named |= strcmp(t, "vader") == 0 || strcmp(t, "sm") == 0;
  return excl ? !named : named;
}

static void world_free(cf_mpi_world *w, int exit_code);

/* This process's world (see above), and how many creates hold it. */
static pthread_mutex_t joined_lock = PTHREAD_MUTEX_INITIALIZER;
static cf_mpi_world *joined;

static cf_status mpi_make(cf_context *ctx, double timeout_s, cf_world **out);

/* The world's create slot: size is mpirun's (the argument is not used). */
static cf_status mpi_create(cf_context *ctx, int size, double timeout_s, cf_world **out) {
  (void)size;
  pthread_mutex_lock(&joined_lock);
  cf_status st = CF_OK;
  if (joined) {
    joined->refs++;
    *out = &joined->base;
  } else if (!(st = mpi_make(ctx, timeout_s, out))) {
    joined = (*out)->impl;
    joined->refs = 1;
  }
  pthread_mutex_unlock(&joined_lock);
  return st;
}

static cf_status mpi_make(cf_context *ctx, double timeout_s, cf_world **out) {
  *out = NULL;
  cf_mpi_world *w = calloc(1, sizeof *w);
  if (!w) return cf_error(ctx, CF_ERR_NO_MEMORY, NULL, 0, "mpi transport: out of memory");
  pthread_mutex_init(&w->mpi_lock, NULL);
  pthread_mutex_init(&w->abort_lock, NULL);
  pthread_mutex_init(&w->ask_lock, NULL);
  w->ask_req = MPI_REQUEST_NULL;
  atomic_store(&w->waiting_for, -1);
  pthread_mutex_init(&w->dog_lock, NULL);
  pthread_cond_init(&w->dog_cond, NULL);
  w->timeout_s = timeout_s > 0 ? timeout_s : 60;
  w->world = MPI_COMM_NULL;
  w->abort_req = MPI_REQUEST_NULL;
  w->half = MPI_DATATYPE_NULL;
  int inited = 0, provided = 0, rc;
  MPI_Initialized(&inited);
  if (!inited) {
    rc = MPI_Init_thread(NULL, NULL, MPI_THREAD_MULTIPLE, &provided);
    if (rc != MPI_SUCCESS) {
      free(w);
      return cf_error(ctx, CF_ERR_RUNTIME, NULL, 0, "mpi transport: MPI_Init_thread failed (%d)",
                      rc);
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
    world_free(w, 0);
    return st;
  }
  w->multiple = provided >= MPI_THREAD_MULTIPLE;
  if ((rc = MPI_Comm_dup(MPI_COMM_WORLD, &w->world)) != MPI_SUCCESS) {
    cf_status st = mpi_error(ctx, "MPI_Comm_dup", rc);
    world_free(w, 0);
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
  if (MPI_Comm_split_type(w->world, MPI_COMM_TYPE_SHARED, w->comm.rank, MPI_INFO_NULL, &node) ==
      MPI_SUCCESS) {
    MPI_Comm_size(node, &w->local_size);
    MPI_Comm_free(&node);
  }
  /* the same answer on every rank: AUTO must pick alike everywhere */
  int shm = w->local_size == w->comm.size && btl_allows_shm(cf_env(CF_ENV_OMPI_BTL));
  MPI_Allreduce(MPI_IN_PLACE, &shm, 1, MPI_INT, MPI_MIN, w->world);
  w->shm = shm;
  w->inline_max = shm ? INLINE_SHM : INLINE_NET;
  long cpus = sysconf(_SC_NPROCESSORS_ONLN);
  w->spin = w->local_size <= cpus ? 64 : 16; /* then yield: a peer may share this core */
  cf_mpi_native_init(w);
  int n = w->comm.size;
  w->peers = calloc((size_t)n, sizeof *w->peers);
  w->abort_out = calloc((size_t)n, sizeof *w->abort_out);
  w->answer = calloc((size_t)n, sizeof *w->answer);
  w->answer_out = calloc((size_t)n, sizeof *w->answer_out);
  w->question = calloc((size_t)n, sizeof *w->question);
  w->question_out = calloc((size_t)n, sizeof *w->question_out);
  if (!w->peers || !w->abort_out || !w->answer || !w->answer_out || !w->question ||
      !w->question_out)
    goto oom;
  for (int r = 0; r < n; r++) {
    w->peers[r].hreq = MPI_REQUEST_NULL;
    w->abort_out[r] = w->answer_out[r] = w->question_out[r] = MPI_REQUEST_NULL;
    if (r == w->comm.rank) continue;
    if (!(w->peers[r].rbuf = malloc(HDR_CAP(w)))) goto oom;
    cf_status st = post_header(&w->comm, r);
    if (st) {
      world_free(w, 0);
      return st;
    }
  }
  rc = MPI_Irecv(w->abort_in, (int)sizeof w->abort_in, MPI_CHAR, MPI_ANY_SOURCE, TAG_ABORT,
                 w->world, &w->abort_req);
  if (rc == MPI_SUCCESS)
    rc = MPI_Irecv(&w->ask_in, 1, MPI_INT, MPI_ANY_SOURCE, TAG_ASK, w->world, &w->ask_req);
  if (rc != MPI_SUCCESS) {
    cf_status st = mpi_error(ctx, "MPI_Irecv", rc);
    world_free(w, 0);
    return st;
  }
  w->base = (cf_world){
      .ops = &cf_world_mpi, .size = w->comm.size, .first = w->comm.rank, .local = 1, .impl = w};
  *out = &w->base;
  return CF_OK;
oom:
  world_free(w, 0);
  return cf_error(ctx, CF_ERR_NO_MEMORY, NULL, 0, "mpi transport: out of memory");
}

static cf_comm *mpi_comm(cf_world *base, int rank) {
  cf_mpi_world *w = base->impl;
  return rank == w->comm.rank ? &w->comm : NULL;
}

static int mpi_host_processes(const cf_world *base) {
  const cf_mpi_world *w = base->impl;
  return w->local_size;
}

static int mpi_auto_policy(const cf_world *base) {
  const cf_mpi_world *w = base->impl;
  return w->shm ? CF_POLICY_AUTO_MPI_SHM : CF_POLICY_AUTO_MPI_NET;
}

static const char *mpi_host(const cf_world *base) {
  const cf_mpi_world *w = base->impl;
  return w->host;
}

static cf_status mpi_max(cf_world *base, double *v, int n) {
  cf_mpi_world *w = base->impl;
  MPI_Request req;
  cf_mpi_lock(w);
  int rc = MPI_Iallreduce(MPI_IN_PLACE, v, n, MPI_DOUBLE, MPI_MAX, w->world, &req);
  cf_mpi_unlock(w);
  wait_what ww = {"every rank's results", -1, NULL};
  if (rc != MPI_SUCCESS) return mpi_failed(&w->comm, rc, &ww);
  return wait_all(&w->comm, &req, 1, NULL, &ww);
}

static void mpi_abort(cf_world *base, const char *text) {
  cf_mpi_world_abort(base->impl, text);
}

static cf_status mpi_native_groups(cf_world *base, const cf_world_group *groups, int n) {
  return cf_mpi_native_groups(base->impl, groups, n);
}

/* After a failure: do all ranks get here (each has printed its message)
 * within a few seconds? A barrier with a deadline, no abort check. */
static bool all_stopped(cf_mpi_world *w) {
  MPI_Request req;
  if (MPI_Ibarrier(w->world, &req) != MPI_SUCCESS) return false;
  double end = cf_now() + (w->timeout_s < 5 ? w->timeout_s : 5);
  for (;;) {
    int done = 0;
    if (MPI_Test(&req, &done, MPI_STATUS_IGNORE) != MPI_SUCCESS) return false;
    if (done) return true;
    if (cf_now() > end) return false; /* the request is left to MPI_Abort */
    struct timespec ts = {0, 100000};
    nanosleep(&ts, NULL);
  }
}

/* A failed run must end even if a peer never reaches MPI_Finalize. */
typedef struct watchdog {
  double seconds;
  int code;
} watchdog;

static void *watchdog_main(void *arg) {
  const watchdog *wd = arg;
  struct timespec ts = {(time_t)wd->seconds,
                        (long)((wd->seconds - (double)(time_t)wd->seconds) * 1e9)};
  nanosleep(&ts, NULL);
  fflush(stdout);
  fflush(stderr);
  _exit(wd->code);
  return NULL;
}

static void world_free(cf_mpi_world *w, int exit_code) {
  if (!w) return;
  cf_mpi_native_stop(w);
  if (exit_code && w->we_initialized) {
    fflush(stdout);
    fflush(stderr);
    if (atomic_load(&w->aborted) && !all_stopped(w)) {
      /* a rank is gone or stuck: MPI_Finalize would wait for it forever;
       * MPI_Abort ends the whole job with our code */
      MPI_Abort(w->world, exit_code);
      _exit(exit_code);
    }
    /* every rank has stopped and said why: finalize, but never hang in it
     * (the watchdog owns wd until the process ends) */
    watchdog *wd = malloc(sizeof *wd);
    pthread_t t;
    if (wd) {
      wd->seconds = w->timeout_s < 5 ? w->timeout_s : 5;
      wd->code = exit_code;
      if (pthread_create(&t, NULL, watchdog_main, wd) == 0)
        pthread_detach(t);
      else
        free(wd);
    }
  }
  int fin = 0;
  MPI_Finalized(&fin);
  if (!fin && w->world != MPI_COMM_NULL) {
    cf_mpi_lock(w);
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
    pthread_mutex_lock(&w->ask_lock);
    if (w->ask_req != MPI_REQUEST_NULL) {
      MPI_Cancel(&w->ask_req);
      MPI_Wait(&w->ask_req, MPI_STATUS_IGNORE);
    }
    pthread_mutex_unlock(&w->ask_lock);
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
    for (int r = 0; w->answer_out && w->question_out && r < w->comm.size; r++) {
      if (w->answer_out[r] != MPI_REQUEST_NULL) MPI_Request_free(&w->answer_out[r]);
      if (w->question_out[r] != MPI_REQUEST_NULL) MPI_Request_free(&w->question_out[r]);
    }
    cf_mpi_native_free(w);
    MPI_Comm_free(&w->world);
    cf_mpi_unlock(w);
  }
  if (!fin && w->we_initialized) MPI_Finalize();
  for (int r = 0; w->peers && r < w->comm.size; r++) {
    peer *p = &w->peers[r];
    for (uint64_t i = 0; i < p->cap; i++)
      free(p->slots[i].buf);
    free(p->slots);
    free(p->rbuf);
  }
  free(w->peers);
  free(w->abort_out);
  free(w->answer);
  free(w->answer_out);
  free(w->question);
  free(w->question_out);
  free(w->groups);
  pthread_mutex_destroy(&w->mpi_lock);
  pthread_mutex_destroy(&w->abort_lock);
  pthread_mutex_destroy(&w->ask_lock);
  pthread_mutex_destroy(&w->dog_lock);
  pthread_cond_destroy(&w->dog_cond);
  free(w);
}

static void mpi_destroy(cf_world *base, int exit_code) {
  if (!base) return;
  cf_mpi_world *w = base->impl;
  pthread_mutex_lock(&joined_lock);
  bool last = --w->refs <= 0;
  if (last && joined == w) joined = NULL;
  pthread_mutex_unlock(&joined_lock);
  if (last) world_free(w, exit_code);
}

const cf_world_ops cf_world_mpi = {
    .name = "mpi",
    .create = mpi_create,
    .comm = mpi_comm,
    .destroy = mpi_destroy,
    .host_processes = mpi_host_processes,
    .host = mpi_host,
    .auto_policy = mpi_auto_policy,
    .max = mpi_max,
    .abort = mpi_abort,
    .native_groups = mpi_native_groups,
};
