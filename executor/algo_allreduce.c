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
 *   pool    rsag_put in pieces that every rank takes from one shared
 *           counter, so that the ranks that hold a CPU do the work of
 *           those that wait for one; rsag's results, bit for bit.
 *
 * All five end with send_wait, so when a call returns no peer still reads
 * this rank's buffers and the memory plan may reuse them. On a zero-copy
 * transport recv() hands out the sender's memory and the reduction reads it
 * in place; otherwise it lands in the call's scratch.
 *
 * In place (desc.in_place: out is in, the memory plan's choice for a
 * gradient bucket). A peer may read my input until it releases the message
 * (threads: it reads my buffer itself; MPI: the send may still be in
 * flight), and no reduction kernel may write a buffer it reads (they are
 * noalias), so each algorithm writes out only where that holds, at the cost
 * of the scratch cf_allreduce_in_place_scratch adds (an in-place call runs
 * in segments, coll.c, so that is one segment's share):
 *   direct  reduces into scratch and copies to out after send_wait (every
 *           peer reads all of my input until the very end);
 *   rsag    reduces my chunk into scratch and copies it to out (peers read
 *           only their own chunks of my input), and writes a peer's chunk
 *           of the all-gather only after that peer released the chunk of my
 *           input it reduced;
 *   ring    copies each chunk of my input it reduces into scratch first,
 *           and waits for the right neighbour to release my first chunk
 *           before the all-gather overwrites it;
 *   rd      on two ranks reduces into scratch and copies after send_wait;
 *           on more, the last step (which reads only scratch) writes out
 *           after the first step's partner released my input.
 * Each element is reduced by the same kernel from the same operands in the
 * same order as out of place: the results are bitwise the same.
 */
#include "algorithms.h"
#include "backends/backends.h"

#include <stdatomic.h>
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

/* In place: scratch beyond what the row needs out of place (its layout is
 * each algorithm's: the extra bytes come after its own staging). */
size_t cf_allreduce_in_place_scratch(const cf_coll_desc *d, int n, int a) {
  if (!d->in_place || d->op != CF_OP_ALLREDUCE || n <= 1) return 0;
  /* an in-place call runs in segments (coll.c): the largest is 2 segments */
  int64_t es = cf_dtype_size(d->dtype), seg = CF_ALGO_SEGMENT_BYTES / es;
  size_t count = (size_t)(d->count <= 2 * seg ? d->count : seg);
  switch (a) {
  case CF_ALGO_DIRECT: return count * (size_t)es;
  case CF_ALGO_RSAG:
  case CF_ALGO_POOL: /* rsag's, where it runs rsag */
  case CF_ALGO_RING: return (count + (size_t)n - 1) / (size_t)n * (size_t)es + 128;
  default: return 0; /* rd: its own two buffers; MPI's: MPI_IN_PLACE */
  }
}

/* The in-place buffer: the end of the scratch (a segment of a segmented
 * call gets the whole call's scratch; its staging and this fit apart). */
static char *in_place_buf(const cf_coll_call *call, int a) {
  return (char *)call->scratch + call->scratch_bytes -
         cf_allreduce_in_place_scratch(&call->desc, call->n, a);
}

cf_status cf_algo_direct(cf_comm *c, cf_device *dev, const cf_coll_call *call) {
  const cf_coll_desc *d = &call->desc;
  int es = cf_dtype_size(d->dtype), n = call->n, me = call->me;
  size_t bytes = (size_t)d->count * (size_t)es;
  if (d->in_place && n == 1) return CF_OK; /* the sum of one rank is its input */
  /* in place: the result waits in scratch, after the staging */
  void *dst = d->in_place ? in_place_buf(call, CF_ALGO_DIRECT) : call->out;
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
    /* out of place, an output that will not stay in cache (cf_coll_call_streams) is
     * written by streaming stores */
    if (!d->in_place && cf_device_is_host(dev) && cf_coll_call_streams(call))
      cf_coll_reduce_to(dev, call, &dst, 1, src.p, d->count, true);
    else
      cf_coll_reduce(dev, call, dst, src.p, n, d->count, true);
    st = release_all(c, call);
  }
  if (!st) st = c->ops->send_wait(c);
  if (!st && dst != call->out)
    dev->ops->copy(dev, call->out, dst, bytes); /* no peer reads in now */
  ptrs_free(&src);
  return st;
}

/* Bytes of rsag_put's segment: the reduced segment is copied to the peers
 * while it is still in this core's cache (L2 is 1-2 MiB on current cores). */
enum { PUT_SEGMENT = 256 << 10 };

/* What rsag_put and pool hold during a call: every rank's input and
 * output as this rank reaches them, and the sources of one range. */
typedef struct put_bufs {
  ptrs in, out, seg;
} put_bufs;

static bool put_init(put_bufs *b, int n) {
  bool in = ptrs_init(&b->in, n), out = in && ptrs_init(&b->out, n),
       seg = out && ptrs_init(&b->seg, n);
  if (!seg && out) ptrs_free(&b->out);
  if (!seg && in) ptrs_free(&b->in);
  return seg;
}

static void put_free(put_bufs *b) {
  ptrs_free(&b->in);
  ptrs_free(&b->out);
  ptrs_free(&b->seg);
}

/* c's recv, or its recv_sleep where asleep and the transport has one. */
static cf_status recv_from(cf_comm *c, bool asleep, int peer, size_t bytes, const cf_coll_desc *d,
                           const void **data) {
  return (asleep && c->ops->recv_sleep ? c->ops->recv_sleep : c->ops->recv)(c, peer, NULL, bytes, d,
                                                                            data);
}

/* Every rank offers its input and its output to each peer (and, extra,
 * one more message of extra_bytes at extra when not NULL), and takes
 * theirs into b. The group's ranks from idle on (n: none) are pool's idle
 * ranks, which share a CPU with a worker: a message from one, or any
 * message to one, is waited for asleep at once (recv_sleep), since the
 * rank waited for runs only when this one leaves the CPU (polling, or
 * yielding 64 times, put the exchange at 1.6-2.6 ms of a 3 ms call at 16
 * MiB on 4 ranks: bench/results/shm.md). */
static cf_status put_exchange(cf_comm *c, const cf_coll_call *call, put_bufs *b, const void *extra,
                              size_t extra_bytes, int idle) {
  const cf_coll_desc *d = &call->desc;
  size_t bytes = (size_t)d->count * (size_t)cf_dtype_size(d->dtype);
  int n = call->n, me = call->me;
  cf_status st = CF_OK;
  for (int i = 0; i < n && !st; i++)
    if (i != me) {
      st = c->ops->send(c, call->ranks[i], call->in, bytes, d);
      if (!st) st = c->ops->send(c, call->ranks[i], call->out, bytes, d);
      if (!st && extra) st = c->ops->send(c, call->ranks[i], extra, extra_bytes, d);
    }
  for (int i = 0; i < n && !st; i++) {
    if (i == me) {
      b->in.p[i] = call->in;
      b->out.p[i] = call->out;
      continue;
    }
    bool asleep = i >= idle || me >= idle;
    st = recv_from(c, asleep, call->ranks[i], bytes, d, &b->in.p[i]);
    if (!st) st = recv_from(c, asleep, call->ranks[i], bytes, d, &b->out.p[i]);
  }
  return st;
}

/* Elements [moff, moff + mlen) of every input reduced, in rank order, into
 * every output: in one kernel call that writes them all (spread; stream:
 * with streaming stores), or 256 KiB at a time into this rank's output and
 * copied to the peers', letting go of the peers' memory as it goes (the
 * let_go slot). */
static void put_range(cf_comm *c, cf_device *dev, const cf_coll_call *call, put_bufs *b, int64_t moff,
                      int64_t mlen, bool spread, bool stream) {
  int es = cf_dtype_size(call->desc.dtype), n = call->n, me = call->me;
  int64_t step = (PUT_SEGMENT / es + 63) / 64 * 64;
  if (spread) { /* the peers' outputs first, this rank's last */
    void *dst[CF_MAX_ARITY];
    for (int i = 0; i < n; i++) {
      b->seg.p[i] = at(b->in.p[i], moff, es);
      dst[i] = at(b->out.p[(me + 1 + i) % n], moff, es);
    }
    cf_coll_reduce_to(dev, call, dst, n, b->seg.p, mlen, stream);
    return;
  }
  for (int64_t o = moff; o < moff + mlen; o += step) {
    int64_t len = moff + mlen - o < step ? moff + mlen - o : step;
    for (int i = 0; i < n; i++)
      b->seg.p[i] = at(b->in.p[i], o, es);
    cf_coll_reduce(dev, call, at(call->out, o, es), b->seg.p, n, len, true);
    for (int i = 0; i < n; i++)
      if (i != me)
        dev->ops->copy(dev, at(b->out.p[i], o, es), at(call->out, o, es), (size_t)(len * es));
    /* the peers' memory of the range so far may go (in place: out is in) */
    for (int i = 0; i < n && c->ops->let_go; i++)
      if (i != me) {
        size_t done = (size_t)((o + len - moff) * es);
        c->ops->let_go(c, call->ranks[i], at(b->in.p[i], moff, es), done);
        if (b->out.p[i] != b->in.p[i]) c->ops->let_go(c, call->ranks[i], at(b->out.p[i], moff, es), done);
      }
  }
}

/* rsag on a zero-copy transport (threads): every rank offers its input and
 * its output to each peer in one exchange. Rank me then reduces its chunk
 * from all inputs, in rank order, in one kernel call that reads each
 * source line once and stores the result to every rank's output (its
 * own last). Every input byte is read from memory once and every output
 * byte written once: the memory bound of an AllReduce (bench/README.md),
 * with no wait between ranks until the end. The results are rsag's, bit
 * for bit (same chunks, same order per element). A rank releases a peer's
 * two messages once it has written its chunk there, so when send_wait
 * returns every peer has written this rank's output and read its input.
 *
 * Where the data will not stay in cache (cf_coll_call_streams) the kernel
 * stores with streaming stores: an ordinary store reads each destination
 * line from memory first (read-for-ownership), so that an output costs
 * three memory passes where a streaming store costs one. One call, because
 * the streaming kernel's store fence waits for every streaming store to
 * reach memory: a call per 8 KiB of each output took about 1.4x the time
 * at 256 MiB on four ranks. In cache, one call into every output replaced
 * reducing 256 KiB into this rank's output and copying it to the peers
 * (two ranks, 4 and 16 MiB: 0.95-0.98 of the bound against 0.90-0.92, 3
 * alternating runs).
 *
 * In place the outputs are the sources, so the segment is reduced once,
 * into this rank's output (the input lines just read, in cache), and
 * copied to the peers with ordinary stores (streaming copies measured
 * 0.70x there); so is a group larger than the n-ary kernel's arity. */
static cf_status rsag_put(cf_comm *c, cf_device *dev, const cf_coll_call *call) {
  const cf_coll_desc *d = &call->desc;
  put_bufs b;
  if (!put_init(&b, call->n)) return oom(c);
  int64_t t = cf_algo_phase_begin();
  cf_status st = put_exchange(c, call, &b, NULL, 0, call->n);
  cf_algo_phase("exchange buffers", t);
  if (!st) {
    t = cf_algo_phase_begin();
    bool spread = !d->in_place && call->n <= CF_MAX_ARITY;
    int64_t moff, mlen;
    chunk(d->count, call->n, cf_dtype_size(d->dtype), call->me, &moff, &mlen);
    put_range(c, dev, call, &b, moff, mlen, spread,
              spread && cf_device_is_host(dev) && cf_coll_call_streams(call));
    cf_algo_phase("reduce-scatter + put", t);
    t = cf_algo_phase_begin();
    for (int k = 0; k < 2 && !st; k++)
      st = release_all(c, call);
    cf_algo_phase("wait for peers", t);
  }
  if (!st) st = c->ops->send_wait(c);
  put_free(&b);
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
  /* in place: each peer's ticket for the chunk of my input it reduces */
  uint64_t *ticket = d->in_place ? malloc(sizeof *ticket * (size_t)n) : NULL;
  if (d->in_place && !ticket) {
    ptrs_free(&src);
    return oom(c);
  }
  cf_status st = CF_OK;
  /* reduce-scatter: chunk i of my input goes to rank i */
  for (int i = 0; i < n && !st; i++) {
    if (i == me) continue;
    chunk(d->count, n, es, i, &off, &len);
    st = c->ops->send(c, call->ranks[i], at(call->in, off, es), (size_t)(len * es), d);
    if (ticket) ticket[i] = c->ops->sent(c, call->ranks[i]);
  }
  int64_t stage = (moff + mlen > 0 ? mlen : 0) + 64 / es;
  /* in place: my chunk is reduced after the staging, then copied to out */
  char *mine = d->in_place ? in_place_buf(call, CF_ALGO_RSAG) : at(call->out, moff, es);
  for (int i = 0, k = 0; i < n && !st; i++) {
    if (i == me) {
      src.p[i] = at(call->in, moff, es);
      continue;
    }
    void *staging = c->ops->zero_copy ? NULL : at(call->scratch, stage * k++, es);
    st = c->ops->recv(c, call->ranks[i], staging, (size_t)(mlen * es), d, &src.p[i]);
  }
  if (!st) {
    cf_coll_reduce(dev, call, mine, src.p, n, mlen, true);
    if (d->in_place && mlen > 0)
      dev->ops->copy(dev, at(call->out, moff, es), mine, (size_t)(mlen * es));
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
    /* in place: dst is the chunk of my input rank i reduced */
    if (ticket) st = c->ops->wait_released(c, call->ranks[i], ticket[i]);
    if (!st) st = c->ops->recv(c, call->ranks[i], dst, (size_t)(len * es), d, &p);
    if (!st && p != dst) dev->ops->copy(dev, dst, p, (size_t)(len * es));
    if (!st) st = c->ops->release(c, call->ranks[i]);
  }
  if (!st) st = c->ops->send_wait(c);
  free(ticket);
  ptrs_free(&src);
  return st;
}

/* Bytes of every rank's buffer one piece of pool covers: on four ranks 8
 * MiB of memory traffic, well under a millisecond, far shorter than a
 * scheduler slice, long enough that the store fence and the counter cost
 * nothing next to it (256 KiB and 4 MiB measured level with it; one piece
 * per rank, 0.67-0.83x its fraction of the bound: docs/executor.md). */
enum { POOL_PIECE = 1 << 20 };

/* Bytes of a call from which pool leaves the ranks beyond the cores idle
 * (cf_algo_pool): auto runs pool from 16 MiB on 3 or more ranks. */
enum { POOL_IDLE_MIN = 4 << 20 };

/* pool: rsag_put whose chunks are not dealt out in advance. The call is cut
 * into pieces, and every rank takes the next piece from one counter (in
 * the scratch of the group's first rank, which every peer reaches through
 * the exchange) until none is left: each piece is reduced from every
 * rank's input, in rank order, into every rank's output, as rsag_put
 * reduces its chunk. Where ranks outnumber the CPUs (4 ranks on 2 cores)
 * or share them with other work, a rank that the scheduler takes off its
 * CPU holds back only the piece it holds, and the ranks that run take the
 * rest; with rsag's fixed chunks every rank waited for the slowest chunk,
 * and the scheduler's slices (milliseconds) are as long as a whole call of
 * 16 MiB. It runs unsegmented (the pieces are the segments, and there is
 * one exchange per call, not one per 4 MiB), in place too (coll.c, as
 * rsag_put). Each element is reduced by the same kernel from the
 * same operands in the same order as rsag: the results are rsag's, bit for
 * bit. Not zero copy, or not host memory (the counter is a host atomic):
 * rsag.
 *
 * Where the world's ranks outnumber its cores (c->cores: 4 processes of
 * the shm world on 2 cores), a call of POOL_IDLE_MIN or more is reduced by
 * the group's first c->cores ranks alone (in a world's group, one per core:
 * cf_bind_cpus deals the ranks to the CPUs round robin): the others exchange their
 * buffers, release the peers' at once (they read none) and sleep until
 * the workers have released theirs (send_sleep), so the cores are not
 * shared between four ranks that each poll the counter, yield and wait for
 * a slice: at 16 MiB two ranks did all 16 pieces while the two others,
 * which had yielded through their waits, did not run again until the call
 * ended (bench/results/shm.md). Who reduces a piece changes nothing in
 * its result. */
cf_status cf_algo_pool(cf_comm *c, cf_device *dev, const cf_coll_call *call) {
  if (!c->ops->zero_copy || !cf_device_is_host(dev)) return cf_algo_rsag(c, dev, call);
  const cf_coll_desc *d = &call->desc;
  int es = cf_dtype_size(d->dtype), n = call->n, me = call->me;
  put_bufs b;
  if (!put_init(&b, n)) return oom(c);
  /* the counter: the first line of the first rank's scratch (pool_scratch),
   * the first rank's third message to each peer */
  _Atomic int64_t *next = (_Atomic int64_t *)(((uintptr_t)call->scratch + 63) & ~(uintptr_t)63);
  if (me == 0) atomic_store(next, 0);
  /* the group's ranks from workers on sleep while the first ones reduce */
  int workers = c->cores > 0 && c->cores < n && d->count * es >= POOL_IDLE_MIN ? c->cores : n;
  bool idle = me >= workers;
  int64_t t = cf_algo_phase_begin();
  cf_status st =
      put_exchange(c, call, &b, me == 0 ? (const void *)next : NULL, sizeof *next, workers);
  const void *p = NULL;
  if (!st && me != 0)
    st = recv_from(c, idle, call->ranks[0], sizeof *next, d, &p);
  if (!st && me != 0) next = (_Atomic int64_t *)p;
  cf_algo_phase("exchange buffers", t);
  if (!st && idle) {
    for (int k = 0; k < 2 && !st; k++)
      st = release_all(c, call);
    if (!st && me != 0) st = c->ops->release(c, call->ranks[0]); /* the counter */
    t = cf_algo_phase_begin();
    if (!st) st = c->ops->send_sleep ? c->ops->send_sleep(c) : c->ops->send_wait(c);
    cf_algo_phase("sleep while the workers reduce", t);
    put_free(&b);
    return st;
  }
  if (!st) {
    t = cf_algo_phase_begin();
    bool spread = !d->in_place && n <= CF_MAX_ARITY, stream = spread && cf_coll_call_streams(call);
    /* a piece: POOL_PIECE, or less so that every rank gets at least one */
    int64_t line = 64 / es, piece = POOL_PIECE / es, per = (d->count + n - 1) / n;
    per = (per + line - 1) / line * line;
    if (piece > per) piece = per;
    int64_t pieces = piece > 0 ? (d->count + piece - 1) / piece : 0;
    for (int64_t k; (k = atomic_fetch_add(next, 1)) < pieces;)
      put_range(c, dev, call, &b, k * piece, d->count - k * piece < piece ? d->count - k * piece : piece,
                spread, stream);
    cf_algo_phase("reduce pieces", t);
    t = cf_algo_phase_begin();
    for (int k = 0; k < 2 && !st; k++)
      st = release_all(c, call);
    if (!st && me != 0) st = c->ops->release(c, call->ranks[0]); /* the counter */
    cf_algo_phase("wait for peers", t);
  }
  if (!st) st = c->ops->send_wait(c);
  put_free(&b);
  return st;
}

cf_status cf_algo_ring(cf_comm *c, cf_device *dev, const cf_coll_call *call) {
  const cf_coll_desc *d = &call->desc;
  int es = cf_dtype_size(d->dtype), n = call->n, me = call->me;
  int left = call->ranks[(me + n - 1) % n], right = call->ranks[(me + 1) % n];
  size_t stage = call->scratch_bytes - cf_allreduce_in_place_scratch(d, n, CF_ALGO_RING);
  int64_t soff, slen, roff, rlen, half = (int64_t)(stage / 2) / es;
  uint64_t *ticket = malloc(sizeof *ticket * (size_t)n);
  if (!ticket) return oom(c);
  cf_status st = CF_OK;
  int64_t t = cf_algo_phase_begin();
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
    if (d->in_place) { /* out[roff] is in[roff]: the kernel reads a copy */
      void *copy = in_place_buf(call, CF_ALGO_RING);
      dev->ops->copy(dev, copy, src[1], (size_t)(rlen * es));
      src[1] = copy;
    }
    cf_coll_reduce(dev, call, at(call->out, roff, es), src, 2, rlen, s == n - 2);
    st = c->ops->release(c, left);
  }
  cf_algo_phase("reduce-scatter", t);
  t = cf_algo_phase_begin();
  /* all-gather: pass the finished chunks around the ring */
  for (int s = 0; s < n - 1 && !st; s++) {
    chunk(d->count, n, es, ((me + 1 - s) % n + n) % n, &soff, &slen);
    chunk(d->count, n, es, ((me - s) % n + n) % n, &roff, &rlen);
    st = c->ops->send(c, right, at(call->out, soff, es), (size_t)(slen * es), d);
    /* out[chunk me-s] went right at reduce-scatter step s (in place, at
     * step 0 too, as in[chunk me]): wait until read */
    if (!st && (s >= 1 || d->in_place)) st = c->ops->wait_released(c, right, ticket[s]);
    void *dst = at(call->out, roff, es);
    const void *p = NULL;
    if (!st) st = c->ops->recv(c, left, dst, (size_t)(rlen * es), d, &p);
    if (st) break;
    if (p != dst) dev->ops->copy(dev, dst, p, (size_t)(rlen * es));
    st = c->ops->release(c, left);
  }
  cf_algo_phase("all-gather", t);
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
  uint64_t last_ticket = 0, first_ticket = 0;
  int last_peer = -1, first_peer = -1;
  /* in place on two ranks the partner reads my input until the end: the
   * result waits in scratch */
  void *out = d->in_place && steps == 1 ? buf[0] : call->out;
  cf_status st = CF_OK;
  for (int k = 0; k < steps && !st; k++) {
    int partner = me ^ (1 << k), peer = call->ranks[partner];
    void *dst = k == steps - 1 ? out : buf[k & 1];
    st = c->ops->send(c, peer, src, bytes, d);
    uint64_t ticket = c->ops->sent(c, peer);
    if (k == 0) first_ticket = ticket, first_peer = peer;
    const void *p = NULL;
    if (!st) st = c->ops->recv(c, peer, staging, bytes, d, &p);
    /* dst was this rank's message of the step before: wait until it was read */
    if (!st && k >= 2 && dst != call->out) st = c->ops->wait_released(c, last_peer, last_ticket);
    /* in place, dst is my input, which the first step's partner read */
    if (!st && k >= 1 && dst == call->in) st = c->ops->wait_released(c, first_peer, first_ticket);
    if (st) break;
    const void *pair[2] = {me < partner ? src : p, me < partner ? p : src};
    cf_coll_reduce(dev, call, dst, pair, 2, d->count, k == steps - 1);
    st = c->ops->release(c, peer);
    src = dst;
    last_ticket = ticket;
    last_peer = peer;
  }
  if (!st && steps == 0 && call->out != call->in) dev->ops->copy(dev, call->out, call->in, bytes);
  if (!st) st = c->ops->send_wait(c);
  if (!st && out != call->out) dev->ops->copy(dev, call->out, out, bytes);
  return st;
}
