/* algo_rooted.c - ReduceScatter, AllGather, Reduce and Broadcast.
 *
 * Each is one direct exchange in rank order, which is bandwidth-optimal on a
 * single-copy transport (every byte is read once where it lies) and keeps
 * reductions in rank order, so they are deterministic by construction.
 * Fused buckets arrive as segments: a fused AllGather sends its whole input
 * bucket once per peer and the receiver scatters the members to their
 * outputs; a fused ReduceScatter reduces block `me` of every member.
 *
 * In place (desc.in_place, the memory plan's choice, NCCL's layouts
 * member by member): each member's input is block me of its output
 * (AllGather), each member's output block me of its input (ReduceScatter);
 * call->in (AllGather) or call->out (ReduceScatter) is then not read.
 * Peers read only their own blocks of my buffer (AllGather: my blocks;
 * ReduceScatter: theirs), so:
 *   AllGather      writes every block but mine and leaves mine alone (it is
 *                  already there), my blocks going out from the output;
 *   ReduceScatter  reduces block me, which no peer reads, but a reduction
 *                  kernel may not write what it reads (noalias): it reduces
 *                  a piece at a time into scratch after the staging and
 *                  copies the piece into place.
 * The same kernels reduce the same operands in the same order as out of
 * place: the results are bitwise the same.
 */
#include "algorithms.h"
#include "backends/backends.h"

#include <stdlib.h>

static char *at(const void *base, int64_t elems, int es) {
  return (char *)base + elems * (int64_t)es;
}

static cf_status oom(cf_comm *c) { return cf_error(c->ctx, CF_ERR_NO_MEMORY, NULL, 0, "out of memory"); }

/* An in-place ReduceScatter reduces pieces of this many bytes into scratch
 * (each copied into place while it is still in cache): what it saves is its
 * output block less one piece. */
enum { RS_PIECE = 64 << 10 };

size_t cf_rsag_in_place_scratch(const cf_coll_desc *d, int n, int a) {
  if (!d->in_place || d->op != CF_OP_REDUCESCATTER || n <= 1 || a != CF_ALGO_DIRECT) return 0;
  size_t block =
      (size_t)(d->count > 0 ? d->count : 0) / (size_t)n * (size_t)cf_dtype_size(d->dtype);
  return (block < RS_PIECE ? block : RS_PIECE) + 64;
}

/* The rank's block of a member, reduced a piece at a time into the end of
 * the scratch and copied into place (in place, the member's output is my
 * block of its input). */
static void reduce_pieces(cf_device *dev, const cf_coll_call *call, const cf_coll_seg *s,
                          const void **src, const void **piece) {
  const cf_coll_desc *d = &call->desc;
  int es = cf_dtype_size(d->dtype), n = call->n;
  size_t extra = cf_rsag_in_place_scratch(d, n, CF_ALGO_DIRECT);
  char *tmp = (char *)call->scratch + call->scratch_bytes - extra;
  int64_t step = (int64_t)(extra - 64) / es;
  for (int64_t o = 0; o < s->count; o += step) {
    int64_t len = s->count - o < step ? s->count - o : step;
    for (int i = 0; i < n; i++)
      piece[i] = at(src[i], o, es);
    cf_coll_reduce(dev, call, tmp, piece, n, len, true);
    dev->ops->copy(dev, at(call->in, s->in_off + call->me * s->count + o, es), tmp,
                   (size_t)(len * es));
  }
}

cf_status cf_algo_reduce_scatter(cf_comm *c, cf_device *dev, const cf_coll_call *call) {
  const cf_coll_desc *d = &call->desc;
  int es = cf_dtype_size(d->dtype), n = call->n, me = call->me;
  bool zc = c->ops->zero_copy;
  size_t bytes = (size_t)d->count * (size_t)es;
  if (d->in_place && n == 1) return CF_OK; /* the reduction of one rank is its block */
  /* base[i]: rank i's input bucket as this rank sees it (zero copy), or
   * this rank's staging of what rank i sent */
  const void **base = calloc((size_t)n, sizeof *base), **src = calloc((size_t)n, sizeof *src),
             **piece = calloc((size_t)n, sizeof *piece);
  if (!base || !src || !piece) {
    free(base);
    free(src);
    free(piece);
    return oom(c);
  }
  cf_status st = CF_OK;
  for (int i = 0; i < n && !st; i++) {
    if (i == me) continue;
    if (zc) {
      st = c->ops->send(c, call->ranks[i], call->in, bytes, d);
      continue;
    }
    for (int j = 0; j < call->n_segs && !st; j++) {
      const cf_coll_seg *s = &call->segs[j];
      st = c->ops->send(c, call->ranks[i], at(call->in, s->in_off + i * s->count, es),
                        (size_t)(s->count * es), d);
    }
  }
  for (int i = 0, k = 0; i < n && !st; i++) {
    if (i == me) {
      base[i] = call->in;
      continue;
    }
    if (zc) {
      st = c->ops->recv(c, call->ranks[i], NULL, bytes, d, &base[i]);
      continue;
    }
    /* staging: rank i's blocks land where they sit in the bucket */
    char *stage = at(call->scratch, (int64_t)k++ * d->count, es);
    base[i] = stage;
    for (int j = 0; j < call->n_segs && !st; j++) {
      const cf_coll_seg *s = &call->segs[j];
      void *slot = at(stage, s->in_off + me * s->count, es);
      const void *p;
      st = c->ops->recv(c, call->ranks[i], slot, (size_t)(s->count * es), d, &p);
      if (!st && p != slot) dev->ops->copy(dev, slot, p, (size_t)(s->count * es));
      if (!st) st = c->ops->release(c, call->ranks[i]);
    }
  }
  for (int j = 0; j < call->n_segs && !st; j++) {
    const cf_coll_seg *s = &call->segs[j];
    for (int i = 0; i < n; i++) src[i] = at(base[i], s->in_off + me * s->count, es);
    if (d->in_place)
      reduce_pieces(dev, call, s, src, piece);
    else
      cf_coll_reduce(dev, call, at(call->out, s->out_off, es), src, n, s->count, true);
  }
  for (int i = 0; i < n && !st && zc; i++)
    if (i != me) st = c->ops->release(c, call->ranks[i]);
  if (!st) st = c->ops->send_wait(c);
  free(base);
  free(src);
  free(piece);
  return st;
}

/* stream: with streaming stores (an output of CF_STREAM_MIN_OUTPUT or
 * more, which this rank does not read again during the call). */
static void scatter_members(cf_device *dev, const cf_coll_call *call, const void *from, int rank,
                            int es, bool stream) {
  void (*copy)(cf_device *, void *, const void *, size_t) =
      stream ? cf_device_copy_stream : dev->ops->copy;
  for (int j = 0; j < call->n_segs; j++) {
    const cf_coll_seg *s = &call->segs[j];
    copy(dev, at(call->out, s->out_off + rank * s->count, es), at(from, s->in_off, es),
         (size_t)(s->count * es));
  }
}

/* In place: member j's input is my block of member j's output, which is
 * all a peer reads of my output while I write the others. Zero copy: one
 * message of my whole output per peer; staged: one per member, received
 * straight into its block. stream: as scatter_members. */
static cf_status all_gather_in_place(cf_comm *c, cf_device *dev, const cf_coll_call *call,
                                     bool stream) {
  const cf_coll_desc *d = &call->desc;
  int es = cf_dtype_size(d->dtype), n = call->n, me = call->me;
  bool zc = c->ops->zero_copy;
  size_t end = 0; /* bytes of the output the members span */
  for (int j = 0; j < call->n_segs; j++) {
    size_t e = (size_t)((call->segs[j].out_off + n * call->segs[j].count) * es);
    if (e > end) end = e;
  }
  cf_status st = CF_OK;
  for (int i = 0; i < n && !st; i++)
    for (int j = 0; j < (zc ? 1 : call->n_segs) && i != me && !st; j++) {
      const cf_coll_seg *s = &call->segs[j];
      st = zc ? c->ops->send(c, call->ranks[i], call->out, end, d)
              : c->ops->send(c, call->ranks[i], at(call->out, s->out_off + me * s->count, es),
                             (size_t)(s->count * es), d);
    }
  for (int i = 0; i < n && !st; i++) {
    if (i == me) continue;
    const void *p = NULL;
    if (zc && !(st = c->ops->recv(c, call->ranks[i], NULL, end, d, &p))) {
      for (int j = 0; j < call->n_segs; j++) {
        const cf_coll_seg *s = &call->segs[j];
        int64_t o = s->out_off + i * s->count;
        (stream ? cf_device_copy_stream : dev->ops->copy)(dev, at(call->out, o, es), at(p, o, es),
                                                          (size_t)(s->count * es));
      }
      st = c->ops->release(c, call->ranks[i]);
    }
    for (int j = 0; j < call->n_segs && !zc && !st; j++) {
      const cf_coll_seg *s = &call->segs[j];
      char *dst = at(call->out, s->out_off + i * s->count, es);
      st = c->ops->recv(c, call->ranks[i], dst, (size_t)(s->count * es), d, &p);
      if (!st && p != dst) dev->ops->copy(dev, dst, p, (size_t)(s->count * es));
      if (!st) st = c->ops->release(c, call->ranks[i]);
    }
  }
  if (!st) st = c->ops->send_wait(c);
  return st;
}

cf_status cf_algo_all_gather(cf_comm *c, cf_device *dev, const cf_coll_call *call) {
  const cf_coll_desc *d = &call->desc;
  int es = cf_dtype_size(d->dtype), n = call->n, me = call->me;
  size_t bytes = (size_t)d->count * (size_t)es;
  bool stream = (int64_t)bytes * n >= CF_STREAM_MIN_OUTPUT;
  if (d->in_place) return all_gather_in_place(c, dev, call, stream);
  cf_status st = CF_OK;
  for (int i = 0; i < n && !st; i++)
    if (i != me) st = c->ops->send(c, call->ranks[i], call->in, bytes, d);
  for (int i = 0; i < n && !st; i++) {
    if (i == me) continue;
    const void *p;
    st = c->ops->recv(c, call->ranks[i], c->ops->zero_copy ? NULL : call->scratch, bytes, d, &p);
    if (st) break;
    scatter_members(dev, call, p, i, es, stream);
    st = c->ops->release(c, call->ranks[i]);
  }
  /* my own block last: only a descriptor the peers agreed with sizes it
   * (a rank whose count or dtype differs writes nothing) */
  if (!st) scatter_members(dev, call, call->in, me, es, stream);
  if (!st) st = c->ops->send_wait(c);
  return st;
}

/* Rooted collectives send along different pairs on different ranks when
 * the ranks disagree on the root, so the descriptors would never meet and
 * the mismatch would end as a timeout: cf_coll_handshake first. */
cf_status cf_coll_handshake(cf_comm *c, const cf_coll_call *call) {
  int n = call->n, me = call->me;
  if (n < 2) return CF_OK;
  const void *p;
  cf_status st = c->ops->send(c, call->ranks[(me + 1) % n], NULL, 0, &call->desc);
  if (!st) st = c->ops->recv(c, call->ranks[(me + n - 1) % n], NULL, 0, &call->desc, &p);
  if (!st) st = c->ops->release(c, call->ranks[(me + n - 1) % n]);
  return st;
}

cf_status cf_algo_reduce(cf_comm *c, cf_device *dev, const cf_coll_call *call) {
  const cf_coll_desc *d = &call->desc;
  int es = cf_dtype_size(d->dtype), n = call->n, me = call->me, root = d->root;
  size_t bytes = (size_t)d->count * (size_t)es;
  cf_status hs = cf_coll_handshake(c, call);
  if (hs) return hs;
  if (me != root) {
    cf_status st = c->ops->send(c, call->ranks[root], call->in, bytes, d);
    return st ? st : c->ops->send_wait(c);
  }
  const void **src = calloc((size_t)n, sizeof *src);
  if (!src) return oom(c);
  cf_status st = CF_OK;
  for (int i = 0, k = 0; i < n && !st; i++) {
    if (i == me) {
      src[i] = call->in;
      continue;
    }
    void *staging = c->ops->zero_copy ? NULL : at(call->scratch, (int64_t)k++ * d->count, es);
    st = c->ops->recv(c, call->ranks[i], staging, bytes, d, &src[i]);
  }
  if (!st) cf_coll_reduce(dev, call, call->out, src, n, d->count, true);
  for (int i = 0; i < n && !st; i++)
    if (i != me) st = c->ops->release(c, call->ranks[i]);
  free(src);
  return st;
}

cf_status cf_algo_broadcast(cf_comm *c, cf_device *dev, const cf_coll_call *call) {
  const cf_coll_desc *d = &call->desc;
  int es = cf_dtype_size(d->dtype), n = call->n, me = call->me, root = d->root;
  size_t bytes = (size_t)d->count * (size_t)es;
  cf_status st = cf_coll_handshake(c, call);
  if (st) return st;
  if (me == root) {
    for (int i = 0; i < n && !st; i++)
      if (i != me) st = c->ops->send(c, call->ranks[i], call->in, bytes, d);
    if (!st) st = c->ops->send_wait(c);
    /* only now, when every receiver has accepted this descriptor: a root
     * whose count or dtype disagrees with the others writes nothing */
    if (!st) dev->ops->copy(dev, call->out, call->in, bytes);
    return st;
  }
  const void *p;
  st = c->ops->recv(c, call->ranks[root], call->out, bytes, d, &p);
  if (st) return st;
  if (p != call->out) dev->ops->copy(dev, call->out, p, bytes);
  (void)es;
  return c->ops->release(c, call->ranks[root]);
}
