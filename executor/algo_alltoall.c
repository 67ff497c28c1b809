/* algo_alltoall.c - AllToAll and CollectivePermute.
 *
 * AllToAll (XLA): block j of this rank's input goes to the group's rank j,
 * and the block rank i sends lands as block i of the output. segs[j] says
 * where block j starts in the input (in_off) and where the block from rank
 * j starts in the output (out_off), count elements each. A block of the
 * array form is made of rows: in_row elements a row in the input, rows
 * n * in_row apart (cut along split_dimension), out_row / n * out_row in
 * the output (placed along concat_dimension). One row length divides the
 * other, so a block moves in pieces of the shorter one; the tuple form's
 * blocks are one row each.
 *
 * Zero copy (threads): every rank sends its whole input once to each peer
 * and each receiver copies its block straight out of the sender's buffer
 * into place, so each byte is read once where it lies, as in AllGather.
 * Staged (MPI): the sender packs a block that is not contiguous into
 * scratch, the receiver copies out of its staging. Every rank sends to
 * and receives from every rank, so descriptors always meet.
 *
 * CollectivePermute: each source sends its whole input to its target; a
 * rank that is no target writes zeros. Ranks do not all meet, so the call
 * starts with cf_coll_handshake.
 */
#include "algorithms.h"
#include "backends/backends.h"

#include <stdlib.h>
#include <string.h>

static char *at(const void *base, int64_t elems, int es) {
  return (char *)base + elems * (int64_t)es;
}

/* count elements from src (rows of srow, n * srow apart) to dst (rows of
 * drow, n * drow apart); a zero row means one contiguous run. stream: with
 * streaming stores (a large output, which this rank does not read again). */
static void copy_rows(cf_device *dev, void *dst, int64_t drow, const void *src, int64_t srow,
                      int64_t count, int n, int es, bool stream) {
  void (*copy)(cf_device *, void *, const void *, size_t) =
      stream ? cf_device_copy_stream : dev->ops->copy;
  if (srow <= 0) srow = count;
  if (drow <= 0) drow = count;
  int64_t piece = srow < drow ? srow : drow;
  if (piece <= 0) return;
  if (piece == count) {
    copy(dev, dst, src, (size_t)(count * es));
    return;
  }
  for (int64_t k = 0; k < count; k += piece) {
    int64_t s = k / srow * n * srow + k % srow, d = k / drow * n * drow + k % drow;
    copy(dev, at(dst, d, es), at(src, s, es), (size_t)(piece * es));
  }
}

size_t cf_alltoall_scratch_bytes(const cf_coll_desc *d, int n, bool zero_copy) {
  size_t es = (size_t)cf_dtype_size(d->dtype), bytes = (size_t)(d->count > 0 ? d->count : 0) * es;
  if (zero_copy || n <= 1) return 0;
  if (d->op == CF_OP_COLLECTIVEPERMUTE) return 0; /* received straight into the output */
  return 2 * bytes;                               /* packed blocks out, staged blocks in */
}

cf_status cf_algo_alltoall(cf_comm *c, cf_device *dev, const cf_coll_call *call) {
  const cf_coll_desc *d = &call->desc;
  int es = cf_dtype_size(d->dtype), n = call->n, me = call->me;
  bool zc = c->ops->zero_copy;
  const cf_coll_seg *sg = call->segs;
  int64_t blk = n > 0 ? sg[0].count : 0;
  size_t bb = (size_t)(blk * es);
  bool packed = call->in_row > 0 && call->in_row < blk; /* blocks are not contiguous */
  /* the output as a whole is written by streaming stores from
   * CF_STREAM_MIN_OUTPUT */
  bool stream = d->count * es >= CF_STREAM_MIN_OUTPUT;
  char *out_stage = call->scratch, *in_stage = at(call->scratch, d->count, es);
  cf_status st = CF_OK;
  for (int k = 1; k < n && !st; k++) {
    int j = (me + k) % n;
    if (zc) {
      st = c->ops->send(c, call->ranks[j], call->in, (size_t)(d->count * es), d);
      continue;
    }
    const char *b = at(call->in, sg[j].in_off, es);
    if (packed) {
      char *p = at(out_stage, (int64_t)k * blk, es);
      copy_rows(dev, p, 0, b, call->in_row, blk, n, es, false);
      b = p;
    }
    st = c->ops->send(c, call->ranks[j], b, bb, d);
  }
  if (!st)
    copy_rows(dev, at(call->out, sg[me].out_off, es), call->out_row,
              at(call->in, sg[me].in_off, es), call->in_row, blk, n, es, stream);
  for (int k = 1; k < n && !st; k++) {
    int i = (me + n - k) % n;
    const void *p;
    char *place = at(call->out, sg[i].out_off, es);
    bool direct = !zc && (call->out_row <= 0 || call->out_row >= blk); /* lands in place */
    void *stage = zc ? NULL : direct ? place : at(in_stage, (int64_t)k * blk, es);
    st = c->ops->recv(c, call->ranks[i], stage, zc ? (size_t)(d->count * es) : bb, d, &p);
    if (st) break;
    /* zero copy: rank i's whole input, whose block me is ours */
    const void *from = zc ? at(p, sg[me].in_off, es) : p;
    if (from != place)
      copy_rows(dev, place, call->out_row, from, zc ? call->in_row : 0, blk, n, es, stream);
    st = c->ops->release(c, call->ranks[i]);
  }
  if (!st) st = c->ops->send_wait(c);
  return st;
}

cf_status cf_algo_permute(cf_comm *c, cf_device *dev, const cf_coll_call *call) {
  const cf_coll_desc *d = &call->desc;
  int n = call->n, me = call->me;
  int target = call->pairs[me], source = call->pairs[n + me];
  size_t bytes = (size_t)d->count * (size_t)cf_dtype_size(d->dtype);
  cf_status st = cf_coll_handshake(c, call);
  if (!st && target >= 0 && target != me)
    st = c->ops->send(c, call->ranks[target], call->in, bytes, d);
  if (st) return st;
  if (source == me) {
    dev->ops->copy(dev, call->out, call->in, bytes);
  } else if (source >= 0) {
    const void *p;
    st = c->ops->recv(c, call->ranks[source], c->ops->zero_copy ? NULL : call->out, bytes, d, &p);
    if (!st && p != call->out) dev->ops->copy(dev, call->out, p, bytes);
    if (!st) st = c->ops->release(c, call->ranks[source]);
  } else if (cf_device_is_host(dev)) {
    memset(call->out, 0, bytes);
  } else {
    void *zeros = calloc(bytes ? bytes : 1, 1);
    if (!zeros) return cf_error(c->ctx, CF_ERR_NO_MEMORY, NULL, 0, "out of memory");
    st = cf_device_upload(dev, call->out, zeros, bytes);
    free(zeros);
  }
  if (!st) st = c->ops->send_wait(c);
  return st;
}
