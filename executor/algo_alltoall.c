/* algo_alltoall.c - AllToAll and CollectivePermute.
 *
 * AllToAll (XLA): block j of this rank's input goes to the group's rank j,
 * and the block rank i sends lands as block i of the output. The array
 * form is a list of members (call->a2a: one for a plain AllToAll, one per
 * member for a FusedAllToAll bucket): block j of a member is made of rows
 * (in_row elements a row in the input, rows n * in_row apart: cut along
 * split_dimension; out_row / n * out_row in the output: placed along
 * concat_dimension). One row length divides the other, so a block moves in
 * pieces of the shorter one. A bucket is one exchange: what a rank sends a
 * peer is the concatenation of every member's block for that peer, in
 * member order, and the receiver places each member's part. The tuple
 * form's blocks are whole operands (call->segs: block j at in_off, the one
 * from rank i at out_off).
 *
 * Zero copy (threads): every rank sends its whole input once to each peer
 * and each receiver copies its blocks straight out of the sender's buffer
 * into place, so each byte is read once where it lies, as in AllGather.
 * Staged (MPI): the sender packs what is not one contiguous block into
 * scratch, the receiver copies out of its staging (or receives in place
 * when its one block is contiguous there). Every rank sends to and
 * receives from every rank, so descriptors always meet.
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

/* Where block j of the call lies: member m's block j of the array form,
 * the tuple form's operand j (m is 0). */
static const char *block_in(const cf_coll_call *call, int m, int j, int es, const char *in) {
  if (call->n_a2a) return at(in, call->a2a[m].in_off + j * call->a2a[m].in_row, es);
  return at(in, call->segs[j].in_off, es);
}

/* The members of the call: the array form's, or the tuple form's one block
 * a rank (rows 0: contiguous). */
static cf_a2a_part member(const cf_coll_call *call, int m) {
  if (call->n_a2a) return call->a2a[m];
  return (cf_a2a_part){0, 0, call->segs[0].count, 0, 0};
}

/* Copy the blocks every member sends rank i (from, laid out as in the
 * sender's input when rows, else packed one after the other) into their
 * places in the output. */
static void place_blocks(cf_device *dev, const cf_coll_call *call, int nm, int i, const char *from,
                         bool rows, int es, bool stream) {
  int64_t pos = 0;
  for (int m = 0; m < nm; m++) {
    cf_a2a_part a = member(call, m);
    char *place = at(call->out, call->n_a2a ? a.out_off + i * a.out_row : call->segs[i].out_off, es);
    const char *src = rows ? block_in(call, m, call->me, es, from) : at(from, pos, es);
    if (src != place) copy_rows(dev, place, a.out_row, src, rows ? a.in_row : 0, a.count, call->n,
                                es, stream);
    pos += a.count;
  }
}

cf_status cf_algo_alltoall(cf_comm *c, cf_device *dev, const cf_coll_call *call) {
  const cf_coll_desc *d = &call->desc;
  int es = cf_dtype_size(d->dtype), n = call->n, me = call->me;
  int nm = call->n_a2a ? call->n_a2a : 1;
  bool zc = c->ops->zero_copy;
  int64_t blk = 0; /* elements a rank sends each peer */
  for (int m = 0; m < nm; m++) blk += member(call, m).count;
  size_t bb = (size_t)(blk * es);
  cf_a2a_part a0 = member(call, 0);
  /* one contiguous block a peer: sent from the input, received in place */
  bool one_in = nm == 1 && (a0.in_row <= 0 || a0.in_row >= a0.count);
  bool one_out = nm == 1 && (a0.out_row <= 0 || a0.out_row >= a0.count);
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
    const char *b = block_in(call, 0, j, es, call->in);
    if (!one_in) {
      char *p = at(out_stage, (int64_t)k * blk, es);
      int64_t pos = 0;
      for (int m = 0; m < nm; m++) {
        cf_a2a_part a = member(call, m);
        copy_rows(dev, at(p, pos, es), 0, block_in(call, m, j, es, call->in), a.in_row, a.count, n,
                  es, false);
        pos += a.count;
      }
      b = p;
    }
    st = c->ops->send(c, call->ranks[j], b, bb, d);
  }
  if (!st) place_blocks(dev, call, nm, me, call->in, true, es, stream);
  for (int k = 1; k < n && !st; k++) {
    int i = (me + n - k) % n;
    const void *p;
    char *place = call->n_a2a ? at(call->out, a0.out_off + i * a0.out_row, es)
                              : at(call->out, call->segs[i].out_off, es);
    void *stage = zc ? NULL : one_out ? place : at(in_stage, (int64_t)k * blk, es);
    st = c->ops->recv(c, call->ranks[i], stage, zc ? (size_t)(d->count * es) : bb, d, &p);
    if (st) break;
    /* zero copy: rank i's whole input, whose blocks me are ours */
    place_blocks(dev, call, nm, i, p, zc, es, stream);
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
