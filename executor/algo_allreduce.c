/* algo_allreduce.c - AllReduce algorithms over the transport interface.
 *
 *   direct  every rank receives every peer's whole input and reduces all of
 *           it in rank order: one exchange, the lowest latency; for small
 *           messages.
 *   rsag    direct reduce-scatter (rank i reduces chunk i from all ranks, in
 *           rank order) then direct all-gather: every byte crosses once each
 *           way, two exchanges; deterministic. On a zero-copy transport the
 *           all-gather writes instead of reading (rsag_put): one exchange,
 *           at the memory bound.
 *   ring    ring reduce-scatter + ring all-gather (2(n-1) neighbour steps),
 *           the classic bandwidth-optimal algorithm across links.
 *   rd      recursive doubling (powers of two): log2(n) pairwise exchanges
 *           of the whole vector.
 *
 * All four are out of place (in is never written) and end with send_wait,
 * so when a call returns no peer still reads this rank's buffers and the
 * memory plan may reuse them. On a zero-copy transport recv() hands out the
 * sender's memory and the reduction reads it in place; otherwise it lands in
 * the call's scratch.
 */
#include "backends/backends.h"

#include <stdlib.h>

/* Chunk i of count elements split n ways, chunk starts on 64-byte lines. */
static void chunk(int64_t count, int n, int es, int i, int64_t *off, int64_t *len) {
  int64_t line = 64 / es, per = (count + n - 1) / n;
  per = (per + line - 1) / line * line;
  int64_t o = per * i;
  if (o > count) o = count;
  *off = o;
  *len = o + per > count ? count - o : per;
}

static char *at(const void *base, int64_t elems, int es) {
  return (char *)base + elems * (int64_t)es;
}

/* Per-call array of n pointers: on the stack for usual group sizes. */
typedef struct ptrs {
  const void *fixed[64];
  const void **p;
} ptrs;

static bool ptrs_init(ptrs *a, int n) {
  a->p = n <= 64 ? a->fixed : malloc(sizeof(void *) * (size_t)n);
  return a->p != NULL;
}

static void ptrs_free(ptrs *a) {
  if (a->p != a->fixed) free(a->p);
}

static cf_status oom(cf_comm *c) { return cf_error(c->ctx, CF_ERR_NO_MEMORY, NULL, 0, "out of memory"); }

static cf_status release_all(cf_comm *c, const cf_coll_call *call) {
  for (int i = 0; i < call->n; i++)
    if (i != call->me) {
      cf_status st = c->ops->release(c, call->ranks[i]);
      if (st) return st;
    }
  return CF_OK;
}

cf_status cf_algo_direct(cf_comm *c, cf_device *dev, const cf_coll_call *call) {
  const cf_coll_desc *d = &call->desc;
  int es = cf_dtype_size(d->dtype), n = call->n, me = call->me;
  size_t bytes = (size_t)d->count * (size_t)es;
  ptrs src;
  if (!ptrs_init(&src, n)) return oom(c);
  cf_status st = CF_OK;
  /* every rank receives from every rank it sends to, so small payloads may
   * go eagerly: no wait for the peers' release (one trip instead of two) */
  bool eager = c->ops->send_eager && bytes <= c->ops->eager_max;
  for (int i = 0; i < n && !st; i++)
    if (i != me)
      st = eager ? c->ops->send_eager(c, call->ranks[i], call->in, bytes, d)
                 : c->ops->send(c, call->ranks[i], call->in, bytes, d);
  for (int i = 0, k = 0; i < n && !st; i++) {
    if (i == me) {
      src.p[i] = call->in;
      continue;
    }
    void *staging = c->ops->zero_copy ? NULL : at(call->scratch, (int64_t)k++ * d->count, es);
    st = c->ops->recv(c, call->ranks[i], staging, bytes, d, &src.p[i]);
  }
  if (!st) {
    cf_coll_reduce(dev, call, call->out, src.p, n, d->count, true);
    st = release_all(c, call);
  }
  if (!st) st = c->ops->send_wait(c);
  ptrs_free(&src);
  return st;
}

/* Bytes of rsag_put's segment: the reduced segment is copied to the peers
 * while it is still in this core's cache (L2 is 1-2 MiB on current cores). */
enum { PUT_SEGMENT = 256 << 10 };

/* rsag on a zero-copy transport (threads): every rank offers its input and
 * its output to each peer in one exchange. Rank me then reduces its chunk
 * one segment at a time from all inputs, in rank order, into its own output
 * and copies the segment, still in cache, into every peer's output. Every
 * input byte is read from memory once and every output byte written once:
 * the memory bound of an AllReduce (bench/README.md), with no wait between
 * ranks until the end. The results are rsag's, bit for bit (same chunks,
 * same order per element). A rank releases a peer's two messages once it
 * has written its chunk there, so when send_wait returns every peer has
 * written this rank's output and read its input. */
static cf_status rsag_put(cf_comm *c, cf_device *dev, const cf_coll_call *call) {
  const cf_coll_desc *d = &call->desc;
  int es = cf_dtype_size(d->dtype), n = call->n, me = call->me;
  size_t bytes = (size_t)d->count * (size_t)es;
  ptrs in, out, seg;
  if (!ptrs_init(&in, n)) return oom(c);
  if (!ptrs_init(&out, n)) {
    ptrs_free(&in);
    return oom(c);
  }
  if (!ptrs_init(&seg, n)) {
    ptrs_free(&in);
    ptrs_free(&out);
    return oom(c);
  }
  cf_status st = CF_OK;
  for (int i = 0; i < n && !st; i++)
    if (i != me) {
      st = c->ops->send(c, call->ranks[i], call->in, bytes, d);
      if (!st) st = c->ops->send(c, call->ranks[i], call->out, bytes, d);
    }
  for (int i = 0; i < n && !st; i++) {
    if (i == me) {
      in.p[i] = call->in;
      out.p[i] = call->out;
      continue;
    }
    st = c->ops->recv(c, call->ranks[i], NULL, bytes, d, &in.p[i]);
    if (!st) st = c->ops->recv(c, call->ranks[i], NULL, bytes, d, &out.p[i]);
  }
  if (!st) {
    int64_t moff, mlen, step = PUT_SEGMENT / es;
    chunk(d->count, n, es, me, &moff, &mlen);
    for (int64_t o = moff; o < moff + mlen; o += step) {
      int64_t len = moff + mlen - o < step ? moff + mlen - o : step;
      for (int i = 0; i < n; i++)
        seg.p[i] = at(in.p[i], o, es);
      cf_coll_reduce(dev, call, at(call->out, o, es), seg.p, n, len, true);
      for (int i = 0; i < n; i++)
        if (i != me)
          dev->ops->copy(dev, at(out.p[i], o, es), at(call->out, o, es), (size_t)(len * es));
    }
    for (int k = 0; k < 2 && !st; k++)
      st = release_all(c, call);
  }
  if (!st) st = c->ops->send_wait(c);
  ptrs_free(&in);
  ptrs_free(&out);
  ptrs_free(&seg);
  return st;
}

cf_status cf_algo_rsag(cf_comm *c, cf_device *dev, const cf_coll_call *call) {
  if (c->ops->zero_copy) return rsag_put(c, dev, call);
  const cf_coll_desc *d = &call->desc;
  int es = cf_dtype_size(d->dtype), n = call->n, me = call->me;
  int64_t off, len, moff, mlen;
  chunk(d->count, n, es, me, &moff, &mlen);
  ptrs src;
  if (!ptrs_init(&src, n)) return oom(c);
  cf_status st = CF_OK;
  /* reduce-scatter: chunk i of my input goes to rank i */
  for (int i = 0; i < n && !st; i++) {
    if (i == me) continue;
    chunk(d->count, n, es, i, &off, &len);
    st = c->ops->send(c, call->ranks[i], at(call->in, off, es), (size_t)(len * es), d);
  }
  int64_t stage = (moff + mlen > 0 ? mlen : 0) + 64 / es;
  for (int i = 0, k = 0; i < n && !st; i++) {
    if (i == me) {
      src.p[i] = at(call->in, moff, es);
      continue;
    }
    void *staging = c->ops->zero_copy ? NULL : at(call->scratch, stage * k++, es);
    st = c->ops->recv(c, call->ranks[i], staging, (size_t)(mlen * es), d, &src.p[i]);
  }
  if (!st) {
    cf_coll_reduce(dev, call, at(call->out, moff, es), src.p, n, mlen, true);
    st = release_all(c, call);
  }
  /* all-gather: my reduced chunk to everyone, theirs into place */
  for (int i = 0; i < n && !st; i++)
    if (i != me) st = c->ops->send(c, call->ranks[i], at(call->out, moff, es), (size_t)(mlen * es), d);
  for (int i = 0; i < n && !st; i++) {
    if (i == me) continue;
    chunk(d->count, n, es, i, &off, &len);
    void *dst = at(call->out, off, es);
    const void *p;
    st = c->ops->recv(c, call->ranks[i], dst, (size_t)(len * es), d, &p);
    if (!st && p != dst) dev->ops->copy(dev, dst, p, (size_t)(len * es));
    if (!st) st = c->ops->release(c, call->ranks[i]);
  }
  if (!st) st = c->ops->send_wait(c);
  ptrs_free(&src);
  return st;
}

cf_status cf_algo_ring(cf_comm *c, cf_device *dev, const cf_coll_call *call) {
  const cf_coll_desc *d = &call->desc;
  int es = cf_dtype_size(d->dtype), n = call->n, me = call->me;
  int left = call->ranks[(me + n - 1) % n], right = call->ranks[(me + 1) % n];
  int64_t soff, slen, roff, rlen, half = (int64_t)(call->scratch_bytes / 2) / es;
  uint64_t *ticket = malloc(sizeof *ticket * (size_t)n);
  if (!ticket) return oom(c);
  cf_status st = CF_OK;
  /* reduce-scatter: after step s, out[chunk me-s-1] holds s+2 ranks' sum */
  for (int s = 0; s < n - 1 && !st; s++) {
    chunk(d->count, n, es, ((me - s) % n + n) % n, &soff, &slen);
    chunk(d->count, n, es, ((me - s - 1) % n + n) % n, &roff, &rlen);
    const void *sbuf = at(s == 0 ? call->in : call->out, soff, es);
    st = c->ops->send(c, right, sbuf, (size_t)(slen * es), d);
    ticket[s] = c->ops->sent(c, right);
    const void *p = NULL;
    void *staging = c->ops->zero_copy ? NULL : at(call->scratch, (s & 1) * half, es);
    if (!st) st = c->ops->recv(c, left, staging, (size_t)(rlen * es), d, &p);
    if (st) break;
    const void *src[2] = {p, at(call->in, roff, es)};
    cf_coll_reduce(dev, call, at(call->out, roff, es), src, 2, rlen, s == n - 2);
    st = c->ops->release(c, left);
  }
  /* all-gather: pass the finished chunks around the ring */
  for (int s = 0; s < n - 1 && !st; s++) {
    chunk(d->count, n, es, ((me + 1 - s) % n + n) % n, &soff, &slen);
    chunk(d->count, n, es, ((me - s) % n + n) % n, &roff, &rlen);
    st = c->ops->send(c, right, at(call->out, soff, es), (size_t)(slen * es), d);
    /* out[chunk me-s] went right at reduce-scatter step s: wait until read */
    if (!st && s >= 1) st = c->ops->wait_released(c, right, ticket[s]);
    void *dst = at(call->out, roff, es);
    const void *p = NULL;
    if (!st) st = c->ops->recv(c, left, dst, (size_t)(rlen * es), d, &p);
    if (st) break;
    if (p != dst) dev->ops->copy(dev, dst, p, (size_t)(rlen * es));
    st = c->ops->release(c, left);
  }
  if (!st) st = c->ops->send_wait(c);
  free(ticket);
  return st;
}

cf_status cf_algo_rd(cf_comm *c, cf_device *dev, const cf_coll_call *call) {
  const cf_coll_desc *d = &call->desc;
  int es = cf_dtype_size(d->dtype), n = call->n, me = call->me, steps = 0;
  while ((1 << steps) < n) steps++;
  size_t bytes = (size_t)d->count * (size_t)es;
  char *buf[2] = {call->scratch, at(call->scratch, d->count, es)};
  void *staging = c->ops->zero_copy ? NULL : at(call->scratch, 2 * d->count, es);
  const void *src = call->in;
  uint64_t last_ticket = 0;
  int last_peer = -1;
  cf_status st = CF_OK;
  for (int k = 0; k < steps && !st; k++) {
    int partner = me ^ (1 << k), peer = call->ranks[partner];
    void *dst = k == steps - 1 ? call->out : buf[k & 1];
    st = c->ops->send(c, peer, src, bytes, d);
    uint64_t ticket = c->ops->sent(c, peer);
    const void *p = NULL;
    if (!st) st = c->ops->recv(c, peer, staging, bytes, d, &p);
    /* dst was this rank's message of the step before: wait until it was read */
    if (!st && k >= 2 && dst != call->out) st = c->ops->wait_released(c, last_peer, last_ticket);
    if (st) break;
    const void *pair[2] = {me < partner ? src : p, me < partner ? p : src};
    cf_coll_reduce(dev, call, dst, pair, 2, d->count, k == steps - 1);
    st = c->ops->release(c, peer);
    src = dst;
    last_ticket = ticket;
    last_peer = peer;
  }
  if (!st && steps == 0) dev->ops->copy(dev, call->out, call->in, bytes);
  if (!st) st = c->ops->send_wait(c);
  return st;
}
