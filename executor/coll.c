/* coll.c - collective calls: algorithm choice, descriptor checks, the
 * ordered reduction every algorithm uses, and dispatch to algo_*.c.
 *
 * Determinism: every algorithm reduces through cf_coll_reduce, which applies
 * op(src[0], ..., src[k-1]) element by element in the order given (n-ary
 * kernel, then accumulate for sources past CF_MAX_ARITY). The rank-order
 * algorithms (direct, rsag) pass the group's ranks in order, so each element
 * is reduced as ((r0 op r1) op r2) ... whatever the chunking, the bucket it
 * sits in, or the message size: fused and unfused runs are bitwise equal.
 * --deterministic therefore only has to keep ring and recursive doubling
 * (which reduce in neighbour and tree order) out.
 */
#include "executor.h"

#include <stdio.h>
#include <string.h>

static const char *const algo_names[CF_ALGO_AUTO_MPI_NET + 1] = {
    [CF_ALGO_AUTO] = "auto",         [CF_ALGO_DIRECT] = "direct",
    [CF_ALGO_RD] = "rd",             [CF_ALGO_RING] = "ring",
    [CF_ALGO_RSAG] = "rsag",         [CF_ALGO_MPI_NATIVE] = "mpi-native",
    [CF_ALGO_AUTO_MPI_SHM] = "auto", [CF_ALGO_AUTO_MPI_NET] = "auto"};

const char *cf_algo_name(cf_algo a) {
  return a >= 0 && a <= CF_ALGO_AUTO_MPI_NET && algo_names[a] ? algo_names[a] : "?";
}

int cf_algo_parse(const char *s) {
  for (int a = 0; a <= CF_ALGO_MPI_NATIVE; a++)
    if (s && algo_names[a] && strcmp(s, algo_names[a]) == 0) return a;
  if (s && strcmp(s, "recursive-doubling") == 0) return CF_ALGO_RD;
  return -1;
}

/* Above this many bytes per rank AllReduce moves to the bandwidth-optimal
 * algorithms; chosen from `collfuse bench allreduce` (docs/executor.md). */
#define SMALL_BYTES ((int64_t)1 << 20)

/* AUTO on the MPI transport, from `bench allreduce --backend mpi`
 * (docs/executor.md, bench/results/mpi.md). Over shared memory direct
 * (one exchange of whole vectors) led rsag up to 4 MiB on two ranks and
 * up to 128 KiB on four (at 256 KiB, medians of five runs: rsag 0.96,
 * direct 0.92 of MPI's speed). Over a network (TCP) two ranks' direct led
 * up to 256 KiB and rsag above; on four ranks collfuse's direct led below
 * NATIVE_MIN, MPI's own AllReduce was level with collfuse's best (rsag,
 * rd or ring by size) from NATIVE_MIN to NATIVE_MAX bytes per rank, and
 * behind above. Two ranks keep collfuse's algorithms: there they were
 * level with MPI or ahead, and only collfuse's messages carry descriptors
 * (a count that differs between ranks is named instead of truncating
 * inside MPI). */
#define PAIR_DIRECT_SHM ((int64_t)4 << 20)
#define PAIR_DIRECT_NET ((int64_t)256 << 10)
#define MPI_SMALL_SHM ((int64_t)128 << 10) /* direct on 3+ ranks up to here */
#define MPI_SMALL_NET ((int64_t)64 << 10)
#define NATIVE_MIN ((int64_t)64 << 10)
#define NATIVE_MAX ((int64_t)4 << 20)

static bool pow2(int n) { return n > 0 && (n & (n - 1)) == 0; }

cf_algo cf_coll_select(const cf_coll_desc *d, int n, bool deterministic, cf_algo forced) {
  if (d->op == CF_OP_ALLTOALL || d->op == CF_OP_COLLECTIVEPERMUTE) return CF_ALGO_DIRECT;
  if (forced == CF_ALGO_MPI_NATIVE) { /* every op, as asked; --deterministic keeps rank order */
    if (n > 1 && !deterministic) return CF_ALGO_MPI_NATIVE;
    forced = CF_ALGO_AUTO;
  }
  if (forced == CF_ALGO_AUTO_MPI_SHM || forced == CF_ALGO_AUTO_MPI_NET) {
    int64_t bytes = d->count * cf_dtype_size(d->dtype);
    bool ar = d->op == CF_OP_ALLREDUCE;
    if (forced == CF_ALGO_AUTO_MPI_NET && ar && n > 2 && !deterministic && bytes >= NATIVE_MIN &&
        bytes <= NATIVE_MAX)
      return CF_ALGO_MPI_NATIVE;
    if (!ar || n <= 1) return CF_ALGO_DIRECT;
    bool net = forced == CF_ALGO_AUTO_MPI_NET;
    int64_t direct_max = n == 2 ? (net ? PAIR_DIRECT_NET : PAIR_DIRECT_SHM)
                                : (net ? MPI_SMALL_NET : MPI_SMALL_SHM);
    forced = bytes <= direct_max || d->count < n ? CF_ALGO_DIRECT : CF_ALGO_RSAG;
  }
  if (d->op != CF_OP_ALLREDUCE || n <= 1) return CF_ALGO_DIRECT;
  cf_algo a = forced;
  if (a == CF_ALGO_AUTO) {
    int64_t bytes = d->count * cf_dtype_size(d->dtype);
    /* measured (bench allreduce, docs/executor.md): on a single-copy
     * transport two ranks reduce each other's whole vector fastest at every
     * size (one exchange; rsag's second one costs more than the halved
     * reduction saves), more ranks up to 1 MiB; above, the two-exchange
     * rsag beats the 2(n-1)-step ring */
    a = n == 2 || bytes <= SMALL_BYTES || d->count < n ? CF_ALGO_DIRECT : CF_ALGO_RSAG;
  }
  /* integer mean sums exactly in int64 inside one n-ary kernel; ring and
   * rd would round partial sums to the type */
  bool int_mean = d->red == CF_RED_MEAN && !cf_dtype_is_float(d->dtype);
  if ((deterministic || int_mean) && a == CF_ALGO_RING) a = CF_ALGO_RSAG;
  if (int_mean && a == CF_ALGO_RD) a = CF_ALGO_DIRECT;
  if ((deterministic || !pow2(n)) && a == CF_ALGO_RD) a = CF_ALGO_DIRECT;
  return a;
}

/* What the transport's native collectives (MPI's, transports/mpi.c) may
 * use: integer mean sums in int64 (like the kernels), a fused AllGather
 * gathers whole input buckets before placing members, a fused
 * ReduceScatter packs every member's block p together. */
static size_t native_scratch(const cf_coll_desc *d, int n) {
  size_t es = (size_t)cf_dtype_size(d->dtype), count = (size_t)(d->count > 0 ? d->count : 0);
  bool int_mean = d->red == CF_RED_MEAN && d->dtype != CF_DT_FLOAT16 && d->dtype != CF_DT_BFLOAT16 &&
                  d->dtype != CF_DT_FLOAT32 && d->dtype != CF_DT_FLOAT64;
  size_t ws = int_mean ? 8 : es;
  switch (d->op) {
  case CF_OP_ALLREDUCE:
  case CF_OP_REDUCE: return int_mean ? 8 * count : 0;
  case CF_OP_ALLGATHER: return (size_t)n * count * es;
  case CF_OP_REDUCESCATTER: return ws * (count + count / (size_t)(n > 0 ? n : 1) + 1);
  default: return 0;
  }
}

size_t cf_coll_scratch_bytes(const cf_coll_desc *d, int n, cf_algo a, bool zero_copy) {
  size_t es = (size_t)cf_dtype_size(d->dtype), bytes = (size_t)d->count * es;
  size_t chunk = ((size_t)d->count + (size_t)n - 1) / (size_t)n * es + 128;
  size_t peers = n > 1 ? (size_t)n - 1 : 0;
  if (a == CF_ALGO_MPI_NATIVE) return native_scratch(d, n);
  if (d->op == CF_OP_ALLTOALL || d->op == CF_OP_COLLECTIVEPERMUTE)
    return cf_alltoall_scratch_bytes(d, n, zero_copy);
  if (d->op != CF_OP_ALLREDUCE) /* staging for what peers send: one buffer or one per peer */
    return zero_copy ? 0 : (d->op == CF_OP_ALLGATHER || d->op == CF_OP_BROADCAST ? bytes : peers * bytes);
  switch (a) {
  case CF_ALGO_RD: return 2 * bytes + (zero_copy ? 0 : bytes);
  case CF_ALGO_RING: return zero_copy ? 0 : 2 * chunk;
  case CF_ALGO_RSAG: return zero_copy ? 0 : peers * chunk;
  default: return zero_copy ? 0 : peers * bytes;
  }
}

static const char *red_text(int red) { return red >= 0 ? cf_reduction_name((cf_reduction)red) : "-"; }

bool cf_coll_desc_mismatch(const cf_coll_desc *a, int ra, const cf_coll_desc *b, int rb, char *text,
                           size_t len) {
  char va[128], vb[128];
  const char *what = NULL;
  if (a->op == CF_OP_INVALID || b->op == CF_OP_INVALID) { /* exec.c's barriers */
    if (a->op == b->op) return false;
    snprintf(text, len,
             "cross-rank mismatch: rank %d is at %s but rank %d is at %s (the ranks run different "
             "collective sequences)",
             ra, a->op == CF_OP_INVALID ? "an iteration barrier" : a->node ? a->node : "a collective", rb,
             b->op == CF_OP_INVALID ? "an iteration barrier" : b->node ? b->node : "a collective");
    return true;
  }
  if (a->op != b->op || strcmp(a->group, b->group) != 0 || a->seq != b->seq) {
    what = "collective";
    snprintf(va, sizeof va, "%s #%lld of group '%s'", cf_op_table[a->op].name, (long long)a->seq,
             a->group);
    snprintf(vb, sizeof vb, "%s #%lld of group '%s'", cf_op_table[b->op].name, (long long)b->seq,
             b->group);
  } else if (a->dtype != b->dtype) {
    what = "dtype";
    snprintf(va, sizeof va, "%s", cf_dtype_name(a->dtype));
    snprintf(vb, sizeof vb, "%s", cf_dtype_name(b->dtype));
  } else if (a->count != b->count) {
    what = "count";
    snprintf(va, sizeof va, "%lld", (long long)a->count);
    snprintf(vb, sizeof vb, "%lld", (long long)b->count);
  } else if (a->red != b->red) {
    what = "reduction";
    snprintf(va, sizeof va, "%s", red_text(a->red));
    snprintf(vb, sizeof vb, "%s", red_text(b->red));
  } else if (a->op == CF_OP_ALLTOALL && (a->root != b->root || a->layout != b->layout)) {
    what = "split/concat dimensions";
    snprintf(va, sizeof va, "%d/%d", a->root, a->layout);
    snprintf(vb, sizeof vb, "%d/%d", b->root, b->layout);
  } else if (a->op == CF_OP_COLLECTIVEPERMUTE && a->layout != b->layout) {
    what = "source_target_pairs";
    snprintf(va, sizeof va, "#%08x", (unsigned)a->layout);
    snprintf(vb, sizeof vb, "#%08x", (unsigned)b->layout);
  } else if (a->root != b->root) {
    what = "root";
    snprintf(va, sizeof va, "%d", a->root);
    snprintf(vb, sizeof vb, "%d", b->root);
  } else if (a->layout != b->layout) {
    what = "layout";
    snprintf(va, sizeof va, "%s", a->layout >= 0 ? cf_layout_name((cf_layout)a->layout) : "-");
    snprintf(vb, sizeof vb, "%s", b->layout >= 0 ? cf_layout_name((cf_layout)b->layout) : "-");
  }
  if (!what) return false;
  snprintf(text, len,
           "cross-rank mismatch in %s '%s' (collective #%lld of group '%s'): %s is %s on rank %d "
           "but %s on rank %d",
           cf_op_table[a->op].name, a->node ? a->node : "?", (long long)a->seq, a->group, what, va,
           ra, vb, rb);
  return true;
}

static cf_kernel_key key_of(cf_kernel_kind kind, cf_dtype dt, int red, int arity) {
  return (cf_kernel_key){.kind = kind, .dtype = dt, .red = (cf_reduction)red, .arity = arity};
}

int cf_coll_kernels(const cf_coll_desc *d, int n, cf_kernel_key *keys, int max) {
  int k = 0;
  if (d->red < 0 || n <= 1) return 0;
  int reds[2] = {d->red, CF_RED_SUM};
  int nred = d->red == CF_RED_MEAN ? 2 : 1;
  int top = n < CF_MAX_ARITY ? n : CF_MAX_ARITY;
  for (int r = 0; r < nred && k + 3 <= max; r++) {
    keys[k++] = key_of(CF_K_NARY, d->dtype, reds[r], 2);
    if (top > 2) keys[k++] = key_of(CF_K_NARY, d->dtype, reds[r], top);
    if (n > CF_MAX_ARITY) keys[k++] = key_of(CF_K_NARY, d->dtype, reds[r], CF_MAX_ARITY);
    keys[k++] = key_of(CF_K_ACC, d->dtype, reds[r], 0);
  }
  if (d->red == CF_RED_MEAN && k < max) keys[k++] = key_of(CF_K_SCALE, d->dtype, 0, 0);
  return k;
}

void cf_coll_reduce(cf_device *dev, const cf_coll_call *call, void *dst, const void *const *src,
                    int k, int64_t n, bool final) {
  cf_dtype dt = call->desc.dtype;
  int red = call->desc.red;
  double div = (double)call->n;
  bool mean = red == CF_RED_MEAN;
  if (n <= 0) return;
  if (k == 1) {
    dev->ops->copy(dev, dst, src[0], (size_t)n * (size_t)cf_dtype_size(dt));
    if (mean && final && call->n > 1) {
      cf_kernel_key sk = key_of(CF_K_SCALE, dt, 0, 0);
      dev->ops->scale(dev, &sk, dst, n, div);
    }
    return;
  }
  if (k <= CF_MAX_ARITY) {
    cf_kernel_key nk = key_of(CF_K_NARY, dt, mean && !final ? CF_RED_SUM : red, k);
    dev->ops->nary(dev, &nk, dst, src, n, div);
    return;
  }
  if (mean && !cf_dtype_is_float(dt)) { /* exact: sum in int64, divide, truncate */
    for (int64_t i = 0; i < n; i++) {
      int64_t sum = 0;
      for (int j = 0; j < k; j++) sum += cf_load_i64(src[j], dt, i);
      cf_store_i64(dst, dt, i, final ? sum / (int64_t)call->n : sum);
    }
    return;
  }
  int base = mean ? CF_RED_SUM : red;
  cf_kernel_key nk = key_of(CF_K_NARY, dt, base, CF_MAX_ARITY);
  cf_kernel_key ak = key_of(CF_K_ACC, dt, base, 0);
  dev->ops->nary(dev, &nk, dst, src, n, 1.0);
  for (int i = CF_MAX_ARITY; i < k; i++) dev->ops->acc(dev, &ak, dst, src[i], n);
  if (mean && final) {
    cf_kernel_key sk = key_of(CF_K_SCALE, dt, 0, 0);
    dev->ops->scale(dev, &sk, dst, n, div);
  }
}

/* The transport's own collective (an optional slot: absent on threads). */
static cf_status coll_native(cf_comm *c, cf_device *dev, const cf_coll_call *call) {
  if (!c->ops->native)
    return cf_error(c->ctx, CF_ERR_UNSUPPORTED, NULL, 0,
                    "--algo mpi-native: the %s transport has no native collectives (use --backend mpi)",
                    c->ops->name);
  return c->ops->native(c, dev, call);
}

static cf_status allreduce(cf_comm *c, cf_device *dev, const cf_coll_call *call) {
    switch (call->algo) {
    case CF_ALGO_RING: return cf_algo_ring(c, dev, call);
    case CF_ALGO_RD: return cf_algo_rd(c, dev, call);
    case CF_ALGO_RSAG: return cf_algo_rsag(c, dev, call);
    default: return cf_algo_direct(c, dev, call);
    }
}

/* A large AllReduce runs as segments of SEGMENT_BYTES, one after the
 * other: what a peer reads in the all-gather was written moments before
 * and is still in the shared cache, where one pass over 100 MiB would
 * fetch it from DRAM twice (bench fusion: one 97 MiB call was slower than
 * four 25 MiB buckets). Each element's reduction is unchanged. */
#define SEGMENT_BYTES ((int64_t)4 << 20)

static cf_status allreduce_segments(cf_comm *c, cf_device *dev, const cf_coll_call *call) {
  int64_t es = cf_dtype_size(call->desc.dtype), seg = SEGMENT_BYTES / es;
  if (call->algo == CF_ALGO_DIRECT || call->desc.count <= 2 * seg) return allreduce(c, dev, call);
  cf_coll_call part = *call;
  cf_status st = CF_OK;
  for (int64_t off = 0; off < call->desc.count && !st; off += seg) {
    part.desc.count = call->desc.count - off < seg ? call->desc.count - off : seg;
    part.in = (const char *)call->in + off * es;
    part.out = (char *)call->out + off * es;
    st = allreduce(c, dev, &part);
  }
  return st;
}

cf_status cf_coll_run(cf_comm *c, cf_device *dev, const cf_coll_call *call) {
  if (cf_op_rooted(call->desc.op) && (call->desc.root < 0 || call->desc.root >= call->n))
    return cf_error(c->ctx, CF_ERR_INVALID, NULL, 0,
                    "%s '%s': root %d is not a rank of group '%s' (%d rank%s)",
                    cf_op_table[call->desc.op].name, call->desc.node ? call->desc.node : "?",
                    call->desc.root, call->desc.group, call->n, cf_s(call->n));
  if (call->algo == CF_ALGO_MPI_NATIVE) return coll_native(c, dev, call);
  switch (call->desc.op) {
  case CF_OP_ALLREDUCE: return allreduce_segments(c, dev, call);
  case CF_OP_REDUCESCATTER: return cf_algo_reduce_scatter(c, dev, call);
  case CF_OP_ALLGATHER: return cf_algo_all_gather(c, dev, call);
  case CF_OP_REDUCE: return cf_algo_reduce(c, dev, call);
  case CF_OP_BROADCAST: return cf_algo_broadcast(c, dev, call);
  case CF_OP_ALLTOALL: return cf_algo_alltoall(c, dev, call);
  case CF_OP_COLLECTIVEPERMUTE: return cf_algo_permute(c, dev, call);
  default:
    return cf_error(c->ctx, CF_ERR_UNSUPPORTED, NULL, 0, "no algorithm for %s",
                    cf_op_table[call->desc.op].name);
  }
}
