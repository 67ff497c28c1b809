/* reduce.c - the ordered reduction every algorithm uses, and the kernels it
 * may launch (so the plan can prepare them before ranks start).
 *
 * cf_coll_reduce applies op(src[0], ..., src[k-1]) element by element in
 * the order given: the n-ary kernel for up to CF_MAX_ARITY sources, then
 * accumulate for the rest, then scale for mean. The algorithms decide the
 * order (algo.c: rank order is what --deterministic keeps); this file only
 * keeps it. cf_coll_reduce_to is the final n-ary step of all call->n ranks
 * into one or more destinations (its own output and its peers'), with
 * streaming stores for data that leaves the cache: the same kernel body, so
 * the same bits. It sits below every algorithm and calls none of them.
 */
#include "algorithms.h"
#include "backends/backends.h"
#include "host.h"

static cf_kernel_key key_of(cf_kernel_kind kind, cf_dtype dt, int red, int arity) {
  return (cf_kernel_key){.kind = kind, .dtype = dt, .red = (cf_reduction)red, .arity = arity};
}

/* The n-ary kernel of arity ranks into outs destinations. */
static cf_kernel_key to_key(cf_dtype dt, int red, int arity, int outs, bool stream) {
  cf_kernel_key k = key_of(CF_K_NARY, dt, red, arity);
  k.stream = stream;
  k.outs = outs;
  return k;
}

/* An AllReduce one kernel call may reduce into several outputs */
static bool may_spread(const cf_coll_desc *d, int n) {
  return d->op == CF_OP_ALLREDUCE && d->red >= 0 && n > 1 && n <= CF_MAX_ARITY;
}

/* An AllReduce whose outputs the streaming kernel may write */
static bool may_stream(const cf_coll_desc *d, int n) {
  return may_spread(d, n) && d->count * cf_dtype_size(d->dtype) >= CF_STREAM_MIN_OUTPUT;
}

int64_t cf_coll_working_set(const cf_coll_desc *d, int n, int64_t around) {
  int64_t footprint; /* n inputs and n outputs */
  if (!cf_mul_i64(d->count * cf_dtype_size(d->dtype), 2 * (int64_t)n, &footprint))
    footprint = INT64_MAX;
  return footprint > around ? footprint : around;
}

bool cf_coll_streams(const cf_coll_desc *d, int n, int64_t working_set) {
  return may_stream(d, n) && cf_streams(cf_coll_working_set(d, n, working_set));
}

bool cf_coll_call_streams(const cf_coll_call *call) {
  return cf_coll_streams(&call->desc, call->n, call->working_set);
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
  /* into all n outputs (rsag_put); streaming into one (direct) and all n */
  if (may_spread(d, n) && k < max) keys[k++] = to_key(d->dtype, d->red, n, n, false);
  for (int outs = 1; may_stream(d, n) && outs <= n && k < max; outs = outs == 1 ? n : n + 1)
    keys[k++] = to_key(d->dtype, d->red, n, outs, true);
  return k;
}

void cf_coll_reduce_to(cf_device *dev, const cf_coll_call *call, void *const *dst, int outs,
                       const void *const *src, int64_t n, bool stream) {
  if (n <= 0 || outs <= 0) return;
  cf_kernel_key nk = to_key(call->desc.dtype, call->desc.red, call->n, outs, stream);
  if (dev->ops->nary_to) {
    dev->ops->nary_to(dev, &nk, dst, src, n, (double)call->n);
    return;
  }
  /* no such kernel on this device: the plain one into this rank's own
   * destination (the last), then copies */
  void *own = dst[outs - 1];
  cf_coll_reduce(dev, call, own, src, call->n, n, true);
  for (int i = 0; i < outs - 1; i++)
    dev->ops->copy(dev, dst[i], own, (size_t)n * (size_t)cf_dtype_size(call->desc.dtype));
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
  if (mean && !cf_dtype_is_float(dt)) { /* exact: sum in 64 bits, divide, truncate */
    bool u = cf_dtype_is_unsigned(dt); /* uint64: its bits, divided unsigned */
    for (int64_t i = 0; i < n; i++) {
      uint64_t sum = 0; /* wraps like the kernels' int64 sum, without overflow */
      for (int j = 0; j < k; j++)
        sum += (uint64_t)cf_load_i64(src[j], dt, i);
      uint64_t q = !final ? sum
                   : u    ? sum / (uint64_t)call->n
                          : (uint64_t)((int64_t)sum / (int64_t)call->n);
      cf_store_i64(dst, dt, i, (int64_t)q);
    }
    return;
  }
  int base = mean ? CF_RED_SUM : red;
  cf_kernel_key nk = key_of(CF_K_NARY, dt, base, CF_MAX_ARITY);
  cf_kernel_key ak = key_of(CF_K_ACC, dt, base, 0);
  dev->ops->nary(dev, &nk, dst, src, n, 1.0);
  for (int i = CF_MAX_ARITY; i < k; i++)
    dev->ops->acc(dev, &ak, dst, src[i], n);
  if (mean && final) {
    cf_kernel_key sk = key_of(CF_K_SCALE, dt, 0, 0);
    dev->ops->scale(dev, &sk, dst, n, div);
  }
}
