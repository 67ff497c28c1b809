/* test_executor.c - unit tests of the executor's runtime: the collective
 * algorithms over the threads transport and CPU device (executor/coll.c,
 * algo_*.c, transports/threads.c, backends/cpu.c) and plans run end to end
 * (plan.c, exec.c).
 *
 * The algorithms run as they do under a plan, one pthread per rank calling
 * cf_coll_run, but on buffers made here: every input, output and scratch has
 * guard bytes on both sides, inputs are random (cf_fill_random) and must come
 * back unchanged, outputs start as a fill pattern so an element an algorithm
 * forgot shows, and every element is checked against a float64/int64 value
 * computed here from the inputs (forward error bound for floats, exact for
 * integers; max/min exact). Covered: AllReduce with every algorithm x dtype x
 * reduction on 1..16 ranks and sizes around the vector width and chunk
 * boundaries, integer means whose partial sums overflow the type, fused
 * (several segments) and plain ReduceScatter and AllGather, Reduce to a
 * non-zero root, Broadcast, groups that are permuted subsets of the world
 * (also two disjoint groups running at once), long sequences of calls on
 * one world, and bitwise equality of the rank-order algorithms.
 *
 * Safety: a descriptor that differs on one rank (count, dtype, reduction,
 * root) must fail every rank with CF_ERR_RUNTIME well before the timeout,
 * with a message naming both ranks and both values; a rank that never
 * calls must make the others fail after the timeout, not hang.
 *
 * Plans: small graphs compiled with the default pipeline and with -O0 run
 * through cf_plan_build + cf_exec_run and are checked with the float64
 * reference (cf_reference_run + cf_verify_outputs); --deterministic outputs
 * are bitwise equal across fused, unfused and other --split layouts; the
 * fused plan's peak memory stays within the unfused plan's plus one bucket;
 * the faults of executor/fault.h's world (a mutated descriptor, a rank
 * that fails, a rank that vanishes) give CF_ERR_RUNTIME with the right
 * message, in time.
 */
#define _GNU_SOURCE
#include "cf_test.h"

#include <math.h>
#include <pthread.h>
#include <sys/stat.h>
#include <unistd.h>

#include "api/api.h"
#include "check/check.h"
#include "executor/executor.h"
#include "executor/fault.h"
#include "executor/plan.h"
#include "executor/transports/transports.h"
#include "ir/ir.h"
#include "passes/passes.h"

#define MAXR 16
#define GUARD 64
#define GUARD_BYTE 0xCD
#define FILL_BYTE 0xA5

static cf_device *dev; /* the CPU device every algorithm test launches on */

static char *grads_xml(void);
static const char *plan_xml;
static char *grads;                 /* grads_xml(), made once */
static const char *plan_graphs[2];  /* the graphs every plan test runs */

static int setup_all(void **state) {
  if (setup(state)) return -1;
  grads = grads_xml();
  plan_graphs[0] = plan_xml;
  plan_graphs[1] = grads;
  return cf_device_cpu_create(ctx, &dev) == CF_OK ? 0 : -1;
}

static int teardown_all(void **state) {
  if (dev) dev->ops->destroy(dev);
  dev = NULL;
  free(grads);
  return teardown(state);
}

static const cf_dtype all_dts[] = {CF_DT_FLOAT32, CF_DT_FLOAT16, CF_DT_BFLOAT16,
                                   CF_DT_INT8,    CF_DT_INT32,   CF_DT_FLOAT64};
#define N_DTS ((int)(sizeof all_dts / sizeof all_dts[0]))
static const cf_algo all_algos[] = {CF_ALGO_DIRECT, CF_ALGO_RSAG, CF_ALGO_RING, CF_ALGO_RD,
                                    CF_ALGO_POOL};
#define N_ALGOS ((int)(sizeof all_algos / sizeof all_algos[0]))
#define REQ_AUTO ((cf_algo_req){.policy = CF_POLICY_AUTO})
#define FORCED(a)                                                                                  \
  { .policy = CF_POLICY_FORCED, .algo = (a) }

static bool is_int(cf_dtype dt) { return !cf_dtype_is_float(dt); }

/* ================= guarded buffers ================= */

typedef struct gbuf {
  unsigned char *base;
  size_t off, bytes, total;
} gbuf;

/* bytes usable at the returned pointer, mis bytes past a 64-byte line,
 * GUARD_BYTE guards around, the body set to fill. */
static void *gb_alloc(gbuf *b, size_t bytes, size_t mis, int fill) {
  b->off = GUARD + mis;
  b->bytes = bytes;
  b->total = (b->off + bytes + GUARD + 63) / 64 * 64;
  b->base = aligned_alloc(64, b->total);
  assert_non_null(b->base);
  memset(b->base, GUARD_BYTE, b->total);
  memset(b->base + b->off, fill, bytes);
  return b->base + b->off;
}

static void *gb_ptr(const gbuf *b) { return b->base + b->off; }

static void gb_check(const gbuf *b, const char *what, const char *cfg) {
  for (size_t i = 0; i < b->total; i++) {
    if (i == b->off) i += b->bytes;
    if (i < b->total && b->base[i] != GUARD_BYTE)
      fail_msg("%s: guard byte %+lld of %s overwritten", cfg,
               (long long)i - (long long)(i < b->off ? b->off : b->off + b->bytes), what);
  }
}

static void gb_free(gbuf *b) {
  free(b->base);
  b->base = NULL;
}

/* ================= ranks as threads ================= */

typedef struct world {
  int size;
  cf_world *w;
  cf_context *rctx[MAXR];
} world;

static void world_open(world *W, int size, double timeout_s) {
  assert_true(size >= 1 && size <= MAXR);
  *W = (world){.size = size};
  if (cf_world_create(ctx, &cf_world_threads, size, timeout_s, &W->w) != CF_OK)
    fail_msg("world: %s", cf_context_errmsg(ctx));
  for (int r = 0; r < size; r++) assert_int_equal(cf_context_create(&W->rctx[r]), CF_OK);
}

/* Rank r's endpoint, its messages going to its own context. */
static cf_comm *rank_comm(world *W, int r) {
  cf_comm *c = cf_world_comm(W->w, r);
  c->ctx = W->rctx[r];
  return c;
}

static void world_close(world *W) {
  cf_world_destroy(W->w, 0);
  for (int r = 0; r < W->size; r++) cf_context_destroy(W->rctx[r]);
}

/* One rank's work: calls run in order, stopping at the first error. */
typedef struct job {
  cf_comm *comm;
  const cf_coll_call *calls;
  int n_calls;
  bool vanish;       /* never calls (the rank is gone) */
  cf_world *world;
  int rank;          /* world rank (for vanish) */
  cf_status st;
  int failed_at;     /* index of the call that failed, -1 */
  double t_end;      /* when it returned */
} job;

static void *job_main(void *arg) {
  job *j = arg;
  j->st = CF_OK;
  j->failed_at = -1;
  if (j->vanish) cf_world_rank_left(j->world, j->rank); /* as exec.c does for a rank that stopped */
  for (int i = 0; i < j->n_calls && !j->vanish; i++) {
    j->st = cf_coll_run(j->comm, dev, &j->calls[i]);
    if (j->st) {
      j->failed_at = i;
      break;
    }
  }
  j->t_end = cf_now();
  return NULL;
}

/* Run jobs[0..n) as threads; returns the start time. */
static double run_jobs(job *jobs, int n) {
  pthread_t th[MAXR];
  double t0 = cf_now();
  for (int i = 0; i < n; i++) assert_int_equal(pthread_create(&th[i], NULL, job_main, &jobs[i]), 0);
  for (int i = 0; i < n; i++) pthread_join(th[i], NULL);
  return t0;
}

static void prepare(const cf_coll_desc *d, int n) {
  cf_kernel_key keys[16];
  int k = cf_coll_kernels(d, n, keys, 16);
  for (int i = 0; i < k; i++)
    if (dev->ops->prepare(dev, &keys[i]) != CF_OK) fail_msg("prepare: %s", cf_context_errmsg(ctx));
}

/* ================= the reference ================= */

/* v wrapped to integer type dt, as cf_store_i64 stores it (test_compute
 * checks both) */
static int64_t wrap_to(int64_t v, cf_dtype dt) { return cf_dtype_wrap(dt, (uint64_t)v); }

/* Element i of src: the common dtypes read here (the reference reads every
 * input element once per reduction), the others through cf_load_*. */
static int64_t load_int(const void *src, cf_dtype dt, int64_t i) {
  switch (dt) {
  case CF_DT_INT8: return ((const int8_t *)src)[i];
  case CF_DT_INT32: return ((const int32_t *)src)[i];
  default: return cf_load_i64(src, dt, i);
  }
}

static double load_float(const void *src, cf_dtype dt, int64_t i) {
  switch (dt) {
  case CF_DT_FLOAT32: return ((const float *)src)[i];
  case CF_DT_FLOAT64: return ((const double *)src)[i];
  default: return cf_load_f64(src, dt, i);
  }
}

typedef struct expect {
  double val, mag; /* floats */
  int64_t ival;    /* integers */
} expect;

/* red over k of element i of src[k] (group order). Integer sums, means and
 * products are exact in int64 (products modulo 2^64, which wraps like the
 * type), then wrapped; an integer mean is the exact sum divided toward zero. */
static expect reduce_ref(cf_dtype dt, int red, int n, const void *const *src, int64_t i) {
  expect e = {0};
  if (dt == CF_DT_BOOL) { /* XLA's pred: sum is or, prod is and */
    bool any = false, all = true;
    for (int k = 0; k < n; k++) {
      bool x = ((const uint8_t *)src[k])[i] != 0;
      any |= x, all &= x;
    }
    e.ival = red == CF_RED_SUM || red == CF_RED_MAX ? any : all;
    return e;
  }
  if (dt == CF_DT_UINT16 || dt == CF_DT_UINT32 || dt == CF_DT_UINT64) { /* unsigned order */
    uint64_t acc = (uint64_t)cf_load_i64(src[0], dt, i);
    for (int k = 1; k < n; k++) {
      uint64_t x = (uint64_t)cf_load_i64(src[k], dt, i);
      acc = red == CF_RED_MAX    ? (x > acc ? x : acc)
            : red == CF_RED_MIN  ? (x < acc ? x : acc)
            : red == CF_RED_PROD ? acc * x
                                 : acc + x;
    }
    if (red == CF_RED_MEAN) acc /= (uint64_t)n;
    e.ival = wrap_to((int64_t)acc, dt);
    return e;
  }
  if (is_int(dt)) {
    int64_t acc = load_int(src[0], dt, i);
    for (int k = 1; k < n; k++) {
      int64_t x = load_int(src[k], dt, i);
      switch (red) {
      case CF_RED_MAX: acc = x > acc ? x : acc; break;
      case CF_RED_MIN: acc = x < acc ? x : acc; break;
      case CF_RED_PROD: acc = (int64_t)((uint64_t)acc * (uint64_t)x); break;
      default: acc += x; break;
      }
    }
    if (red == CF_RED_MEAN) acc /= n;
    e.ival = wrap_to(acc, dt);
    return e;
  }
  double v = load_float(src[0], dt, i), m = fabs(v);
  for (int k = 1; k < n; k++) {
    double x = load_float(src[k], dt, i);
    switch (red) {
    case CF_RED_MAX: v = fmax(v, x); break;
    case CF_RED_MIN: v = fmin(v, x); break;
    case CF_RED_PROD: v *= x; m *= fabs(x); break;
    default: v += x; m += fabs(x); break;
    }
  }
  if (red == CF_RED_MEAN) {
    v /= n;
    m /= n;
  }
  e.val = v;
  e.mag = m;
  return e;
}

/* dt's unit roundoff, and an absolute slack (its smallest normal or
 * subnormal step) for products that underflow */
static void float_format(cf_dtype dt, double *u, double *tiny) {
  switch (dt) {
  case CF_DT_FLOAT16: *u = 0x1p-11, *tiny = 0x1p-24; break;
  case CF_DT_BFLOAT16: *u = 0x1p-8, *tiny = 0x1p-126; break;
  case CF_DT_FLOAT32: *u = 0x1p-24, *tiny = 0x1p-126; break;
  default: *u = 0x1p-53, *tiny = 0x1p-1022; break;
  }
}

/* Element gi of got against e: exact for integers, max and min; a forward
 * error bound of n + 2 roundings of the magnitude otherwise. */
static void check_elem(const char *cfg, const char *what, int rank, cf_dtype dt, int red, int n,
                       const void *got, int64_t gi, expect e) {
  if (is_int(dt)) {
    int64_t g = load_int(got, dt, gi);
    if (g != e.ival)
      fail_msg("%s: %s rank %d index %lld: got %lld, expected %lld", cfg, what, rank, (long long)gi,
               (long long)g, (long long)e.ival);
    return;
  }
  double g = load_float(got, dt, gi), u, tiny;
  float_format(dt, &u, &tiny);
  double tol = red == CF_RED_MAX || red == CF_RED_MIN ? 0 : (n + 2) * u * e.mag + n * tiny;
  if (!(fabs(g - e.val) <= tol))
    fail_msg("%s: %s rank %d index %lld: got %.9g, expected %.9g (tolerance %.3g)", cfg, what, rank,
             (long long)gi, g, e.val, tol);
}

/* ================= one collective on a group ================= */

typedef struct cspec {
  cf_op op;
  cf_algo_req algo; /* AllReduce: requested (resolved by cf_coll_select) */
  cf_dtype dt;
  int red;                 /* -1: none */
  int root;                /* group index; Reduce, Broadcast */
  int world;               /* world size (0: n) */
  int n;                   /* group size */
  const int *ranks;        /* world ranks in group order (NULL: 0..n-1) */
  int64_t count;           /* AllReduce, Reduce, Broadcast: elements */
  int n_segs;              /* AllGather, ReduceScatter: members (0: one of count) */
  const int64_t *seg_count;/* block elements per member */
  int64_t pad;             /* elements between members (odd: unaligned members) */
  bool det;
  uint64_t seed;
  size_t mis;              /* misalign every buffer by this many bytes */
  void **keep;             /* receives a malloc'd copy of every rank's output, [me] */
  bool in_place;           /* desc.in_place: AllReduce's out is in; a plain AllGather's in is
                            * block me of out, a plain ReduceScatter's out block me of in */
  int64_t ws;              /* the calls' working_set */
} cspec;

static void describe(const cspec *s, char *cfg, size_t len, cf_algo a) {
  snprintf(cfg, len, "%s %s %s%s%s n=%d count=%lld segs=%d root=%d%s", cf_op_table[s->op].name,
           s->op == CF_OP_ALLREDUCE ? cf_algo_name(a) : "", cf_dtype_name(s->dt),
           s->red >= 0 ? " " : "", s->red >= 0 ? cf_reduction_name((cf_reduction)s->red) : "", s->n,
           (long long)s->count, s->n_segs, s->root, s->det ? " det" : "");
}

static void run_coll(const cspec *s) {
  int n = s->n, world_n = s->world ? s->world : n;
  int es = cf_dtype_size(s->dt);
  int ident[MAXR];
  for (int i = 0; i < MAXR; i++) ident[i] = i;
  const int *ranks = s->ranks ? s->ranks : ident;
  /* members: input and output offsets, in elements */
  int nseg = s->n_segs ? s->n_segs : 1;
  int64_t one = s->count;
  const int64_t *sc = s->n_segs ? s->seg_count : &one;
  cf_coll_seg segs[16];
  assert_true(nseg <= 16);
  int64_t in_n = 0, out_n = 0;
  for (int j = 0; j < nseg; j++) {
    int64_t in_c = s->op == CF_OP_REDUCESCATTER ? sc[j] * n : sc[j];
    int64_t out_c = s->op == CF_OP_ALLGATHER ? sc[j] * n : sc[j];
    segs[j] = (cf_coll_seg){.in_off = in_n, .out_off = out_n, .count = sc[j]};
    in_n += in_c + (j + 1 < nseg ? s->pad : 0);
    out_n += out_c + (j + 1 < nseg ? s->pad : 0);
  }
  bool segmented = s->op == CF_OP_ALLGATHER || s->op == CF_OP_REDUCESCATTER;
  if (!segmented) in_n = out_n = s->count;
  cf_coll_desc d = {.seq = 0, .op = s->op, .dtype = s->dt, .count = in_n, .red = s->red,
                    .root = s->root, .layout = s->op == CF_OP_ALLGATHER ? (int)CF_LAYOUT_CONCAT : -1,
                    .group = "g", .node = "node", .in_place = s->in_place};
  if (s->op != CF_OP_REDUCE && s->op != CF_OP_BROADCAST) d.root = -1;
  int a = cf_coll_select(&d, n, s->det, s->algo);
  assert_true(a >= 0 && a < cf_algo_count);
  char cfg[200];
  describe(s, cfg, sizeof cfg, a);
  prepare(&d, n);
  size_t scratch = cf_coll_scratch_bytes(&d, n, a, true);

  /* in place, AllGather: each member's input is put in its block of the
   * output (in stays unused); ReduceScatter: each member's result is in
   * the rank's block of its input (out stays unused) */
  bool ag_ip = s->in_place && s->op == CF_OP_ALLGATHER,
       rs_ip = s->in_place && s->op == CF_OP_REDUCESCATTER;
  gbuf in[MAXR], out[MAXR], scr[MAXR];
  gbuf *res = s->in_place && !ag_ip ? in : out;
  unsigned char *view[MAXR]; /* rs_ip: each rank's results in out's layout (padding FILL_BYTE) */
  void *orig[MAXR];
  cf_coll_call calls[MAXR];
  job jobs[MAXR];
  world W;
  world_open(&W, world_n, 30);
  for (int k = 0; k < n; k++) {
    size_t ib = (size_t)in_n * (size_t)es, ob = (size_t)out_n * (size_t)es;
    void *ip = gb_alloc(&in[k], ib, s->mis, 0);
    cf_fill_random(ip, s->dt, in_n, s->seed, ranks[k], "x");
    orig[k] = malloc(ib + 1);
    memcpy(orig[k], ip, ib);
    void *op = gb_alloc(&out[k], ob, s->mis, FILL_BYTE);
    gb_alloc(&scr[k], scratch, 0, 0);
    for (int j = 0; j < nseg && ag_ip; j++)
      memcpy((char *)op + (segs[j].out_off + k * segs[j].count) * es,
             (char *)ip + segs[j].in_off * es, (size_t)(segs[j].count * es));
    calls[k] = (cf_coll_call){.desc = d,
                              .ranks = ranks,
                              .n = n,
                              .me = k,
                              .in = ip,
                              .out = s->op == CF_OP_ALLREDUCE && s->in_place ? ip : op,
                              .segs = segs,
                              .n_segs = nseg,
                              .scratch = gb_ptr(&scr[k]),
                              .scratch_bytes = scratch,
                              .algo = a,
                              .deterministic = s->det,
                              .working_set = s->ws};
    jobs[k] = (job){.comm = rank_comm(&W, ranks[k]), .calls = &calls[k],
                    .n_calls = 1};
  }
  run_jobs(jobs, n);
  for (int k = 0; k < n; k++)
    if (jobs[k].st != CF_OK)
      fail_msg("%s: rank %d: status %d: %s", cfg, ranks[k], jobs[k].st, cf_context_errmsg(W.rctx[ranks[k]]));

  const void *src[MAXR];
  for (int k = 0; k < n; k++) {
    gb_check(&in[k], "input", cfg);
    gb_check(&out[k], "output", cfg);
    gb_check(&scr[k], "scratch", cfg);
    if ((!s->in_place || ag_ip) && memcmp(gb_ptr(&in[k]), orig[k], (size_t)in_n * (size_t)es) != 0)
      fail_msg("%s: rank %d's input changed", cfg, ranks[k]);
    if (rs_ip) { /* the results out of the rank's blocks, and nothing else changed */
      const unsigned char *ib = gb_ptr(&in[k]);
      unsigned char *rest = malloc((size_t)in_n * (size_t)es + 1);
      memcpy(rest, orig[k], (size_t)in_n * (size_t)es);
      view[k] = malloc((size_t)out_n * (size_t)es + 1);
      memset(view[k], FILL_BYTE, (size_t)out_n * (size_t)es);
      for (int j = 0; j < nseg; j++) {
        size_t at = (size_t)((segs[j].in_off + k * segs[j].count) * es),
               len = (size_t)(segs[j].count * es);
        memcpy(view[k] + segs[j].out_off * es, ib + at, len);
        memcpy(rest + at, ib + at, len); /* so all the rest must match */
      }
      if (memcmp(ib, rest, (size_t)in_n * (size_t)es) != 0)
        fail_msg("%s: rank %d changed its input outside its blocks", cfg, ranks[k]);
      free(rest);
    }
    if (s->in_place && !ag_ip) /* the output buffer was never touched */
      for (size_t b = 0; b < (size_t)out_n * (size_t)es; b++)
        if (((unsigned char *)gb_ptr(&out[k]))[b] != FILL_BYTE)
          fail_msg("%s: rank %d wrote the unused output", cfg, ranks[k]);
  }
  for (int k = 0; k < n; k++)
    src[k] = orig[k];
  for (int me = 0; me < n; me++) {
    const unsigned char *o = rs_ip ? view[me] : gb_ptr(&res[me]);
    int rank = ranks[me];
    switch (s->op) {
    case CF_OP_ALLREDUCE:
      /* every replica bitwise equal to the first, which is checked against
       * the reference: the others' elements pass or fail as its do, so the
       * reference (n loads per element) is computed once, not per rank,
       * and a replica that differs has its elements checked first, for
       * the message that names the element */
      if (me == 0 || memcmp(o, gb_ptr(&res[0]), (size_t)s->count * (size_t)es) != 0) {
        for (int64_t i = 0; i < s->count; i++)
          check_elem(cfg, "AllReduce", rank, s->dt, s->red, n, o, i, reduce_ref(s->dt, s->red, n, src, i));
        if (me > 0) fail_msg("%s: rank %d's result differs bitwise from rank %d's", cfg, rank, ranks[0]);
      }
      break;
    case CF_OP_REDUCE:
      if (me == s->root)
        for (int64_t i = 0; i < s->count; i++)
          check_elem(cfg, "Reduce", rank, s->dt, s->red, n, o, i, reduce_ref(s->dt, s->red, n, src, i));
      break;
    case CF_OP_BROADCAST:
      if (memcmp(o, orig[s->root], (size_t)s->count * (size_t)es) != 0)
        fail_msg("%s: rank %d did not receive root %d's data", cfg, rank, ranks[s->root]);
      break;
    case CF_OP_REDUCESCATTER:
      for (int j = 0; j < nseg; j++) {
        const void *blk[MAXR];
        for (int k = 0; k < n; k++)
          blk[k] = (const char *)orig[k] + (segs[j].in_off + me * segs[j].count) * es;
        for (int64_t e = 0; e < segs[j].count; e++)
          check_elem(cfg, "ReduceScatter", rank, s->dt, s->red, n, o, segs[j].out_off + e,
                     reduce_ref(s->dt, s->red, n, blk, e));
      }
      break;
    case CF_OP_ALLGATHER:
      for (int j = 0; j < nseg; j++)
        for (int p = 0; p < n; p++)
          if (memcmp(o + (segs[j].out_off + p * segs[j].count) * es,
                     (const char *)orig[p] + segs[j].in_off * es, (size_t)(segs[j].count * es)) != 0)
            fail_msg("%s: rank %d member %d block %d is not rank %d's input", cfg, rank, j, p, ranks[p]);
      break;
    default: fail_msg("bad op");
    }
    if (segmented) /* the padding between members is not the collective's */
      for (int j = 0; j + 1 < nseg; j++) {
        int64_t end = segs[j].out_off + (s->op == CF_OP_ALLGATHER ? n : 1) * segs[j].count;
        for (int64_t b = end * es; b < segs[j + 1].out_off * es; b++)
          if (o[b] != FILL_BYTE) fail_msg("%s: rank %d wrote padding byte %lld", cfg, rank, (long long)b);
      }
  }
  for (int k = 0; k < n; k++) {
    if (s->keep) {
      size_t ob = (size_t)out_n * (size_t)es;
      s->keep[k] = malloc(ob + 1);
      memcpy(s->keep[k], rs_ip ? view[k] : gb_ptr(&res[k]), ob);
    }
    if (rs_ip) free(view[k]);
    gb_free(&in[k]);
    gb_free(&out[k]);
    gb_free(&scr[k]);
    free(orig[k]);
  }
  world_close(&W);
}

static int64_t allreduce_ws; /* allreduce()'s working_set */

static void allreduce(cf_algo algo, cf_dtype dt, int red, int n, int64_t count) {
  cspec s = {.ws = allreduce_ws,
             .op = CF_OP_ALLREDUCE,
             .algo = cf_algo_forced(algo),
             .dt = dt,
             .red = red,
             .n = n,
             .count = count,
             .seed = (uint64_t)count * 31 + (uint64_t)n,
             .mis = (size_t)(count & 1) * (size_t)cf_dtype_size(dt)};
  run_coll(&s);
}

/* ================= the device's streaming copy ================= */

/* The /proc/self/smaps entry of the mapping that holds p: its Rss in
 * bytes, and whether its VmFlags has flag ("hg": advised MADV_HUGEPAGE,
 * "nh": MADV_NOHUGEPAGE); false when no entry holds p. */
static bool smaps_of(const void *p, const char *flag, long long *rss, bool *has_flag) {
  FILE *f = fopen("/proc/self/smaps", "r");
  if (!f) return false;
  char line[512];
  bool in = false, found = false;
  uintptr_t a = (uintptr_t)p;
  while (fgets(line, sizeof line, f)) {
    unsigned long lo, hi;
    long long kb;
    if (sscanf(line, "%lx-%lx ", &lo, &hi) == 2 && strchr(line, '-') < strchr(line, ' ')) {
      if (in) break; /* the entry after ours */
      in = a >= lo && a < hi;
    } else if (in && sscanf(line, "Rss: %lld kB", &kb) == 1) {
      *rss = kb * 1024;
    } else if (in && strncmp(line, "VmFlags:", 8) == 0) {
      char want[8];
      snprintf(want, sizeof want, " %s", flag);
      *has_flag = strstr(line, want) != NULL;
      found = true;
    }
  }
  fclose(f);
  return found;
}

/* The CPU device's buffers (backends/cpu.c): an arena above 512 MiB comes
 * back resident (populated at once) and in 4 KiB pages, a smaller large
 * buffer is advised huge pages and not touched; both read as zeros and
 * hold what is written. */
static void test_cpu_pages(void **state) {
  (void)state;
  struct {
    size_t bytes;
    const char *flag; /* the advice its mapping carries */
    bool resident;
  } cases[] = {{(size_t)513 << 20, "nh", true}, {(size_t)64 << 20, "hg", false}};
  for (int c = 0; c < 2; c++) {
    char *p = dev->ops->alloc(dev, cases[c].bytes);
    assert_non_null(p);
    long long rss = -1;
    bool flag = false;
    if (!smaps_of(p, cases[c].flag, &rss, &flag)) { /* no /proc: nothing to see */
      dev->ops->free(dev, p);
      continue;
    }
    if (!flag)
      fail_msg("%zu MiB buffer: its mapping is not advised '%s'", cases[c].bytes >> 20,
               cases[c].flag);
    if (cases[c].resident && rss < (long long)cases[c].bytes)
      fail_msg("%zu MiB buffer: %lld bytes resident, not populated", cases[c].bytes >> 20, rss);
    if (!cases[c].resident && rss >= (long long)cases[c].bytes)
      fail_msg("%zu MiB buffer: resident before any write", cases[c].bytes >> 20);
    uint64_t x = 0x9e3779b97f4a7c15ull * (uint64_t)(c + 1);
    for (int k = 0; k < 4096; k++) { /* random places: zero, then what was written */
      x ^= x << 13, x ^= x >> 7, x ^= x << 17;
      size_t at = (size_t)(x % cases[c].bytes);
      if (p[at] != 0 && p[at] != (char)(at | 1)) fail_msg("byte %zu: %d, not zero", at, p[at]);
      p[at] = (char)(at | 1);
      assert_int_equal(p[at], (char)(at | 1));
    }
    dev->ops->free(dev, p);
  }
}

/* cf_device_copy_stream equals memcpy at every size around its 4 KiB
 * threshold and every misalignment of either side (the aligned body of
 * streaming stores, a memcpy'd head and tail), writing nothing outside the
 * destination. */
static void test_copy_stream(void **state) {
  (void)state;
  static const size_t sizes[] = {0, 1, 63, 64, 4095, 4096, 4097, 65536 + 64, 100013};
  size_t cap = 100013 + 2 * GUARD + 64;
  unsigned char *src = malloc(cap), *dst = malloc(cap);
  assert_non_null(src);
  assert_non_null(dst);
  for (size_t i = 0; i < cap; i++)
    src[i] = (unsigned char)(i * 131 + 7);
  for (size_t s = 0; s < sizeof sizes / sizeof *sizes; s++)
    for (size_t so = 0; so < 3; so++)
      for (size_t doff = 0; doff < 66; doff += 13) {
        size_t n = sizes[s];
        memset(dst, GUARD_BYTE, cap);
        cf_device_copy_stream(dev, dst + GUARD + doff, src + so, n);
        if (memcmp(dst + GUARD + doff, src + so, n) != 0)
          fail_msg("copy_stream of %zu bytes (src +%zu, dst +%zu) differs", n, so, doff);
        for (size_t i = 0; i < cap; i++)
          if ((i < GUARD + doff || i >= GUARD + doff + n) && dst[i] != GUARD_BYTE)
            fail_msg("copy_stream of %zu bytes (dst +%zu) wrote byte %zu outside", n, doff, i);
      }
  free(src);
  free(dst);
}

/* ================= AllReduce ================= */

static void test_allreduce_algos_dtypes(void **state) {
  (void)state;
  static const int ranks[] = {1, 2, 3, 4, 5, 8};
  static const int64_t counts[] = {0, 1, 7, 63, 64, 65, 1000};
  for (int a = 0; a < N_ALGOS; a++)
    for (int t = 0; t < N_DTS; t++)
      for (int r = 0; r < 6; r++)
        for (int c = 0; c < 7; c++) allreduce(all_algos[a], all_dts[t], CF_RED_SUM, ranks[r], counts[c]);
}

static void test_allreduce_large(void **state) {
  (void)state;
  for (int a = 0; a < N_ALGOS; a++)
    for (int t = 0; t < N_DTS; t++) {
      allreduce(all_algos[a], all_dts[t], t % 2 ? CF_RED_MEAN : CF_RED_SUM, 4, 100003);
      if (all_dts[t] == CF_DT_FLOAT32 || all_dts[t] == CF_DT_INT8) {
        allreduce(all_algos[a], all_dts[t], CF_RED_SUM, 5, 100003);
        allreduce(all_algos[a], all_dts[t], CF_RED_MEAN, 8, 100003);
      }
    }
}

/* rsag on the threads transport writes each rank's chunk into the peers'
 * outputs one 256 KiB segment at a time: chunks of several segments with a
 * partial last one, mean, more ranks than the n-ary kernel takes, against
 * the reference with guard bytes; and bitwise equal to direct (both reduce
 * in rank order). An output of CF_STREAM_MIN_OUTPUT or more in a working
 * set cf_streams finds too large for the cache is written by the streaming
 * kernel (rsag: its chunk in one call, into every output; direct: its own
 * output): whole calls of 4-8 MiB, a segmented call whose last part is
 * below CF_STREAM_MIN_OUTPUT (10 MiB: 4 + 4 + 2), odd element sizes and
 * counts, integer mean, the largest n-ary arity; each with and without
 * streaming ($COLLFUSE_STREAM_MIN 0 and off; a plan's calls have the
 * largest working set, these their own, so a call of 4 MiB streams either
 * way under 0 and never under off). The two modes are two cases (ctest
 * subjects segments and segments_off), so they run side by side. */
static void segments_mode(int m) {
  static const char *const modes[] = {"0", "off"};
  setenv("COLLFUSE_STREAM_MIN", modes[m], 1);
  allreduce_ws = m ? INT64_MAX : 0;
  allreduce(CF_ALGO_RSAG, CF_DT_FLOAT32, CF_RED_SUM, 2, 1500007);
  allreduce(CF_ALGO_RSAG, CF_DT_FLOAT16, CF_RED_MEAN, 3, 3000001);
  allreduce(CF_ALGO_RSAG, CF_DT_BFLOAT16, CF_RED_SUM, 4, 2097152);
  allreduce(CF_ALGO_RSAG, CF_DT_INT8, CF_RED_MEAN, 8, 5000011);
  allreduce(CF_ALGO_RSAG, CF_DT_FLOAT64, CF_RED_MAX, 2, 1310721);
  allreduce(CF_ALGO_DIRECT, CF_DT_FLOAT32, CF_RED_SUM, 3, 1500007);
  allreduce(CF_ALGO_DIRECT, CF_DT_INT8, CF_RED_MEAN, 8, 5000011);
  /* pool: several pieces per rank with a partial last one, the n-ary
   * kernel's arity and one rank past it (reduce, then copy) */
  allreduce(CF_ALGO_POOL, CF_DT_FLOAT32, CF_RED_SUM, 3, 1500007);
  allreduce(CF_ALGO_POOL, CF_DT_BFLOAT16, CF_RED_MEAN, 2, 2100001);
  allreduce(CF_ALGO_POOL, CF_DT_INT8, CF_RED_MEAN, 8, 3000017);
  allreduce(CF_ALGO_POOL, CF_DT_FLOAT64, CF_RED_MAX, 9, 400003);
  static const int ranks[] = {2, 4, 3};
  static const int64_t counts[] = {400009, 400009, 1200007};
  static const cf_algo algos[] = {CF_ALGO_DIRECT, CF_ALGO_RSAG, CF_ALGO_POOL};
  for (int r = 0; r < 3; r++) {
    int n = ranks[r];
    int64_t count = counts[r];
    void *res[3][MAXR];
    for (int v = 0; v < 3; v++) {
      cspec s = {.op = CF_OP_ALLREDUCE,
                 .algo = cf_algo_forced(algos[v]),
                 .dt = CF_DT_FLOAT32,
                 .red = CF_RED_MEAN,
                 .n = n,
                 .count = count,
                 .det = true,
                 .seed = 11,
                 .keep = res[v],
                 .ws = allreduce_ws};
      run_coll(&s);
    }
    for (int k = 0; k < n; k++) {
      for (int v = 1; v < 3; v++)
        if (memcmp(res[0][k], res[v][k], (size_t)count * 4) != 0)
          fail_msg("n=%d count=%lld stream min %s: direct and %s differ bitwise on rank %d", n,
                   (long long)count, modes[m], cf_algo_name(algos[v]), k);
      for (int v = 0; v < 3; v++) free(res[v][k]);
    }
  }
  unsetenv("COLLFUSE_STREAM_MIN");
  allreduce_ws = 0;
}

static void test_allreduce_rsag_segments(void **state) {
  (void)state;
  allreduce(CF_ALGO_RSAG, CF_DT_FLOAT32, CF_RED_SUM, 2, 300007);
  allreduce(CF_ALGO_RSAG, CF_DT_FLOAT64, CF_RED_MEAN, 3, 200003);
  allreduce(CF_ALGO_RSAG, CF_DT_BFLOAT16, CF_RED_SUM, 4, 600001);
  allreduce(CF_ALGO_RSAG, CF_DT_INT32, CF_RED_MEAN, 4, 262145);
  allreduce(CF_ALGO_RSAG, CF_DT_FLOAT32, CF_RED_MAX, 9, 590001);
  segments_mode(0);
}

static void test_allreduce_rsag_segments_off(void **state) {
  (void)state;
  segments_mode(1);
}

/* The threads world's placement: the CPUs a thread of rank r on lane l
 * is bound to after cf_world_rank_thread, as a list of CPU numbers. */
typedef struct placed {
  cf_world *w;
  int rank, lane;
  cpu_set_t got;
} placed;

static void *place_main(void *arg) {
  placed *p = arg;
  cf_world_rank_thread(p->w, p->rank, p->lane);
  assert_int_equal(pthread_getaffinity_np(pthread_self(), sizeof p->got, &p->got), 0);
  return NULL;
}

static void place(cf_world *w, int rank, int lane, cpu_set_t *got) {
  placed p = {.w = w, .rank = rank, .lane = lane};
  pthread_t t;
  assert_int_equal(pthread_create(&t, NULL, place_main, &p), 0);
  pthread_join(t, NULL);
  *got = p.got;
}

/* Ranks that each can have a CPU of the affinity mask get one (both lanes
 * on it, or one CPU per lane where there are two per rank), all different;
 * in an oversubscribed world rank r shares rank (r mod CPUs)'s CPU;
 * $COLLFUSE_BIND=none leaves threads unbound. */
static void test_bind(void **state) {
  (void)state;
  cpu_set_t all;
  assert_int_equal(sched_getaffinity(0, sizeof all, &all), 0);
  int cpus = CPU_COUNT(&all);
  for (int mode = 0; mode < 2; mode++) {
    if (mode) setenv("COLLFUSE_BIND", "none", 1);
    for (int size = 2; size <= cpus + 2 && size <= 8; size++) {
      world W;
      world_open(&W, size, 10);
      int lanes = cpus >= 2 * size ? 2 : 1;
      cpu_set_t seen, lane0, first[8];
      CPU_ZERO(&seen);
      CPU_ZERO(&lane0);
      for (int r = 0; r < size; r++)
        for (int l = 0; l < 2; l++) {
          cpu_set_t got;
          place(W.w, r, l, &got);
          if (mode) {
            assert_true(CPU_EQUAL(&got, &all));
            continue;
          }
          assert_int_equal(CPU_COUNT(&got), 1);
          CPU_AND(&got, &got, &all);
          assert_int_equal(CPU_COUNT(&got), 1);
          if (r >= cpus) { /* oversubscribed: round robin */
            assert_true(CPU_EQUAL(&got, &first[r % cpus]));
            continue;
          }
          if (l == 0) first[r] = got;
          if (l == 0 || lanes == 2) { /* a CPU no other rank or lane has */
            cpu_set_t both;
            CPU_AND(&both, &got, &seen);
            assert_int_equal(CPU_COUNT(&both), 0);
            CPU_OR(&seen, &seen, &got);
            if (l == 0) lane0 = got;
          } else { /* lane 1 shares its rank's lane 0 CPU */
            assert_true(CPU_EQUAL(&got, &lane0));
          }
        }
      world_close(&W);
    }
  }
  unsetenv("COLLFUSE_BIND");
}

/* $COLLFUSE_STREAM_MIN: bytes with an optional K, M or G, "off" (never);
 * anything else, or nothing, is the last-level cache's size + 1 (sysfs, else
 * sysconf, else 32 MiB). cf_streams compares a working set with it. */
static void test_stream_min(void **state) {
  (void)state;
  unsetenv("COLLFUSE_STREAM_MIN");
  int64_t dflt = cf_stream_min_bytes();
  assert_true(dflt > 0);
  static const struct {
    const char *v;
    int64_t want; /* -2: the default */
  } cases[] = {{"0", 0},         {"4096", 4096},     {"64K", 64 << 10}, {"3M", 3 << 20},
               {"2G", (int64_t)2 << 30}, {"off", -1}, {"", -2},         {"12X", -2},
               {"-5", -2},        {"M", -2},          {"5MB", -2},       {"99999999999G", INT64_MAX}};
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    setenv("COLLFUSE_STREAM_MIN", cases[i].v, 1);
    int64_t want = cases[i].want == -2 ? dflt : cases[i].want, got = cf_stream_min_bytes();
    if (got != want)
      fail_msg("COLLFUSE_STREAM_MIN=%s: %lld, want %lld", cases[i].v, (long long)got, (long long)want);
  }
  setenv("COLLFUSE_STREAM_MIN", "64M", 1);
  assert_false(cf_streams((64 << 20) - 1));
  assert_true(cf_streams(64 << 20));
  setenv("COLLFUSE_STREAM_MIN", "off", 1);
  assert_false(cf_streams(INT64_MAX));
  unsetenv("COLLFUSE_STREAM_MIN");
  assert_true(cf_streams(dflt));
  assert_false(cf_streams(dflt - 1));
  /* where the kernel tells the cache, a working set larger than it streams */
  int64_t llc = cf_llc_bytes_at("/sys/devices/system/cpu/cpu0/cache");
  if (llc > 0 && dflt != llc + 1)
    fail_msg("default %lld, want the sysfs last-level cache's %lld", (long long)dflt, (long long)llc);
}

/* Writes text into dir/index<i>/<file> (the directory made first). */
static void put_sysfs(const char *dir, int i, const char *file, const char *text) {
  char path[512];
  snprintf(path, sizeof path, "%s/index%d", dir, i);
  mkdir(path, 0700);
  snprintf(path, sizeof path, "%s/index%d/%s", dir, i, file);
  FILE *f = fopen(path, "w");
  assert_non_null(f);
  fputs(text, f);
  fclose(f);
}

static void rm_sysfs(const char *dir, int n) {
  char path[512];
  static const char *const files[] = {"level", "size"};
  for (int i = 0; i < n; i++) {
    for (int k = 0; k < 2; k++) {
      snprintf(path, sizeof path, "%s/index%d/%s", dir, i, files[k]);
      remove(path);
    }
    snprintf(path, sizeof path, "%s/index%d", dir, i);
    rmdir(path);
  }
  rmdir(dir);
}

/* The last-level cache from a sysfs cache directory: the size of the
 * highest level (as the AMD EPYC VM's cpu0 reads, where glibc's sysconf
 * says ten times more), K/M/G suffixes, a level without a size skipped,
 * the indices read up to the first gap; -1 without any. */
static void test_llc_sysfs(void **state) {
  (void)state;
  char dir[] = "/tmp/cf_llc_XXXXXX";
  assert_non_null(mkdtemp(dir));
  assert_int_equal(cf_llc_bytes_at(dir), -1);
  static const char *const rows[][2] = {
      {"1\n", "32K\n"}, {"1\n", "32K\n"}, {"2\n", "1024K\n"}, {"3\n", "32768K\n"}};
  for (int i = 0; i < 4; i++) {
    put_sysfs(dir, i, "level", rows[i][0]);
    put_sysfs(dir, i, "size", rows[i][1]);
  }
  assert_int_equal(cf_llc_bytes_at(dir), (int64_t)32 << 20);
  put_sysfs(dir, 3, "size", "2M"); /* no newline, M */
  assert_int_equal(cf_llc_bytes_at(dir), (int64_t)2 << 20);
  put_sysfs(dir, 3, "size", "lots\n"); /* unreadable: the level below */
  assert_int_equal(cf_llc_bytes_at(dir), (int64_t)1 << 20);
  put_sysfs(dir, 3, "size", "1G\n");
  put_sysfs(dir, 5, "level", "4\n"); /* after the gap at index4: not read */
  put_sysfs(dir, 5, "size", "8G\n");
  assert_int_equal(cf_llc_bytes_at(dir), (int64_t)1 << 30);
  rm_sysfs(dir, 6);
  char none[] = "/tmp/cf_llc_none_XXXXXX/cache";
  assert_int_equal(cf_llc_bytes_at(none), -1);
}

static void test_allreduce_reductions(void **state) {
  (void)state;
  static const int ranks[] = {3, 4, 8};
  for (int red = 0; red < CF_RED_COUNT; red++)
    for (int a = 0; a < N_ALGOS; a++)
      for (int t = 0; t < N_DTS; t++)
        for (int r = 0; r < 3; r++) allreduce(all_algos[a], all_dts[t], red, ranks[r], r == 1 ? 65 : 1000);
}

/* The unsigned dtypes and bool (cf_fill_random sets the top bit of half
 * the unsigned elements, so a signed compare or division shows) through
 * every algorithm and reduction, with more ranks than the widest kernel. */
static void test_allreduce_unsigned_bool(void **state) {
  (void)state;
  static const cf_dtype dts[] = {CF_DT_UINT16, CF_DT_UINT32, CF_DT_UINT64, CF_DT_BOOL};
  static const int ranks[] = {3, 4, 9};
  for (int red = 0; red < CF_RED_COUNT; red++)
    for (int a = 0; a < N_ALGOS; a++)
      for (int t = 0; t < 4; t++)
        for (int r = 0; r < 3; r++)
          if (red != CF_RED_MEAN || dts[t] != CF_DT_BOOL)
            allreduce(all_algos[a], dts[t], red, ranks[r], r == 1 ? 65 : 333);
}

/* More ranks than the widest kernel (CF_MAX_ARITY): n-ary then accumulate. */
static void test_allreduce_many_ranks(void **state) {
  (void)state;
  static const int ranks[] = {9, 16};
  for (int red = 0; red < CF_RED_COUNT; red++)
    for (int a = 0; a < N_ALGOS; a++)
      for (int t = 0; t < N_DTS; t++)
        for (int r = 0; r < 2; r++)
          if (r == 0 || red <= CF_RED_MEAN) allreduce(all_algos[a], all_dts[t], red, ranks[r], 333);
}

/* Integer mean is the exact sum divided (docs/format.md, reference.c): partial sums
 * of an algorithm must not wrap in the type before the division. */
static void test_allreduce_int_mean_no_wrap(void **state) {
  (void)state;
  static const cf_dtype dts[] = {CF_DT_INT8, CF_DT_INT32};
  static const int ranks[] = {2, 4, 8, 9};
  const int64_t count = 200;
  char fails[4096] = "";
  for (int t = 0; t < 2; t++)
    for (int a = 0; a < N_ALGOS; a++)
      for (int r = 0; r < 4; r++) {
        cf_dtype dt = dts[t];
        int n = ranks[r];
        cf_coll_desc d = {.op = CF_OP_ALLREDUCE, .dtype = dt, .count = count, .red = CF_RED_MEAN,
                          .root = -1, .layout = -1, .group = "g", .node = "m"};
        cf_algo al = cf_coll_select(&d, n, false, cf_algo_forced(all_algos[a]));
        prepare(&d, n);
        int es = cf_dtype_size(dt);
        char *in[MAXR], *out[MAXR], *scr[MAXR];
        size_t sb = cf_coll_scratch_bytes(&d, n, al, true);
        cf_coll_call calls[MAXR];
        job jobs[MAXR];
        world W;
        world_open(&W, n, 30);
        int64_t big = dt == CF_DT_INT8 ? 100 : 2000000000;
        for (int k = 0; k < n; k++) {
          in[k] = calloc((size_t)count, (size_t)es);
          out[k] = calloc((size_t)count, (size_t)es);
          for (int64_t i = 0; i < count; i++) /* same sign everywhere: sums leave the type */
            cf_store_i64(in[k], dt, i, (i % 2 ? -big : big) + (int64_t)((k * 7 + i) % 5));
          scr[k] = malloc(sb + 1);
          calls[k] = (cf_coll_call){.desc = d, .ranks = NULL, .n = n, .me = k, .in = in[k],
                                    .out = out[k], .scratch = scr[k], .scratch_bytes = sb, .algo = al};
          jobs[k] = (job){.comm = rank_comm(&W, k), .calls = &calls[k], .n_calls = 1};
        }
        int ident[MAXR];
        for (int k = 0; k < MAXR; k++) ident[k] = k;
        for (int k = 0; k < n; k++) calls[k].ranks = ident;
        run_jobs(jobs, n);
        char cfg[96];
        snprintf(cfg, sizeof cfg, "AllReduce %s (as %s) %s mean n=%d", cf_algo_name(all_algos[a]),
                 cf_algo_name(al), cf_dtype_name(dt), n);
        const void *src[MAXR];
        for (int k = 0; k < n; k++) {
          if (jobs[k].st) fail_msg("%s: %s", cfg, cf_context_errmsg(W.rctx[k]));
          src[k] = in[k];
        }
        bool reported = false;
        for (int k = 0; k < n && !reported; k++)
          for (int64_t i = 0; i < count && !reported; i++) {
            expect e = reduce_ref(dt, CF_RED_MEAN, n, src, i);
            int64_t g = cf_load_i64(out[k], dt, i);
            if (g != e.ival) { /* collect every failing case for one message */
              size_t l = strlen(fails);
              snprintf(fails + l, sizeof fails - l, "\n  %s: rank %d index %lld: got %lld, expected %lld", cfg, k,
                       (long long)i, (long long)g, (long long)e.ival);
              reported = true;
            }
          }
        for (int k = 0; k < n; k++) {
          free(in[k]);
          free(out[k]);
          free(scr[k]);
        }
        world_close(&W);
      }
  if (fails[0]) {
    fprintf(stderr, "integer mean wraps before dividing:%s\n", fails);
    fail_msg("integer mean: partial sums wrap in the type (list above)");
  }
}

/* direct and rsag reduce every element in rank order whatever the chunking,
 * so they agree bitwise (the --deterministic guarantee); deterministic mode
 * never picks ring or recursive doubling. */
static void test_allreduce_deterministic(void **state) {
  (void)state;
  static const cf_dtype dts[] = {CF_DT_FLOAT32, CF_DT_FLOAT16, CF_DT_BFLOAT16, CF_DT_FLOAT64};
  static const int64_t counts[] = {1, 7, 63, 64, 65, 1000, 100003};
  static const int ranks[] = {3, 5, 8, 9};
  static const int reds[] = {CF_RED_SUM, CF_RED_MEAN};
  for (int t = 0; t < 4; t++)
    for (int c = 0; c < 7; c++)
      for (int r = 0; r < 4; r++)
        for (int q = 0; q < 2; q++) {
          if (counts[c] == 100003 && (ranks[r] != 5 || q)) continue; /* time */
          if (counts[c] == 1000 && ranks[r] == 9 && t) continue;
          int n = ranks[r];
          void *res[2][MAXR];
          for (int v = 0; v < 2; v++) {
            cspec s = {.op = CF_OP_ALLREDUCE,
                       .algo = cf_algo_forced(v ? CF_ALGO_RSAG : CF_ALGO_DIRECT),
                       .dt = dts[t],
                       .red = reds[q],
                       .n = n,
                       .count = counts[c],
                       .det = true,
                       .seed = 7,
                       .keep = res[v]};
            run_coll(&s);
          }
          size_t bytes = (size_t)counts[c] * (size_t)cf_dtype_size(dts[t]);
          for (int k = 0; k < n; k++) {
            if (memcmp(res[0][k], res[1][k], bytes) != 0)
              fail_msg("%s %s n=%d count=%lld: direct and rsag differ bitwise on rank %d",
                       cf_dtype_name(dts[t]), cf_reduction_name((cf_reduction)reds[q]), n,
                       (long long)counts[c], k);
            free(res[0][k]);
            free(res[1][k]);
          }
        }
  cf_coll_desc d = {.op = CF_OP_ALLREDUCE, .dtype = CF_DT_FLOAT32, .count = 1 << 20, .red = CF_RED_SUM,
                    .root = -1, .layout = -1, .group = "g"};
  for (int a = -1; a < N_ALGOS; a++) /* auto, then each algorithm forced */
    for (int n = 1; n <= 16; n++) {
      cf_algo_req req = a < 0 ? REQ_AUTO : cf_algo_forced(all_algos[a]);
      int got = cf_coll_select(&d, n, true, req);
      assert_true(got == CF_ALGO_DIRECT || got == CF_ALGO_RSAG || got == CF_ALGO_POOL);
      got = cf_coll_select(&d, n, false, req);
      assert_true(got >= 0 && got < cf_algo_count && !cf_algo_table[got].native);
      if (got == CF_ALGO_RD) assert_true((n & (n - 1)) == 0);
    }
}

/* auto on the threads and shm worlds: pool out of place from 16 MiB per
 * rank on 3 ranks or more and from 64 MiB on two (and under
 * --deterministic: it reduces in rank order), rsag just below and in
 * place; a forced pool on one rank, or an MPI policy, is not pool's. */
static void test_select_pool(void **state) {
  (void)state;
  cf_coll_desc d = {.op = CF_OP_ALLREDUCE, .dtype = CF_DT_FLOAT32, .red = CF_RED_SUM, .root = -1,
                    .layout = -1, .group = "g"};
  for (int n = 2; n <= 9; n++) {
    int64_t from = n == 2 ? 16 << 20 : 4 << 20; /* float32 elements: 64 or 16 MiB */
    d.count = from, d.in_place = false;
    assert_int_equal(cf_coll_select(&d, n, false, REQ_AUTO), CF_ALGO_POOL);
    assert_int_equal(cf_coll_select(&d, n, true, REQ_AUTO), CF_ALGO_POOL);
    d.count = from - 1;
    assert_int_equal(cf_coll_select(&d, n, false, REQ_AUTO), CF_ALGO_RSAG);
    d.count = 64 << 20, d.in_place = true;
    assert_int_equal(cf_coll_select(&d, n, false, REQ_AUTO), CF_ALGO_RSAG);
  }
  d.count = 4 << 20, d.in_place = false, d.dtype = CF_DT_INT8;
  assert_int_equal(cf_coll_select(&d, 4, false, REQ_AUTO), CF_ALGO_RSAG); /* 4 MiB */
  d.count = 16 << 20;
  assert_int_equal(cf_coll_select(&d, 4, false, REQ_AUTO), CF_ALGO_POOL);
  assert_int_equal(cf_coll_select(&d, 1, false, cf_algo_forced(CF_ALGO_POOL)), CF_ALGO_DIRECT);
  assert_int_equal(cf_coll_select(&d, 4, false, (cf_algo_req){.policy = CF_POLICY_AUTO_MPI_SHM}),
                   CF_ALGO_RSAG);
}

/* A profile's measured rules come before the policy's: first match wins, a
 * rank count or size they do not cover keeps the built-in rule, a rule
 * whose row may not run the call (ring under --deterministic, rd on 3
 * ranks) is passed over, and a forced row ignores them. */
static void test_select_measured(void **state) {
  (void)state;
  static const cf_algo_rule rules[] = {
      {.min_ranks = 4, .max_ranks = 4, .min_bytes = 0, .max_bytes = 1000, .algo = CF_ALGO_RING},
      {.min_ranks = 4, .max_ranks = 4, .min_bytes = 1001, .max_bytes = 0, .algo = CF_ALGO_RD},
      {.min_ranks = 3, .max_ranks = 3, .min_bytes = 0, .max_bytes = 0, .algo = CF_ALGO_RD},
  };
  cf_algo_req req = {.policy = CF_POLICY_AUTO, .measured = rules, .n_measured = 3};
  cf_coll_desc d = {.op = CF_OP_ALLREDUCE,
                    .dtype = CF_DT_FLOAT32,
                    .count = 250,
                    .red = CF_RED_SUM,
                    .root = -1,
                    .layout = -1,
                    .group = "g"};
  assert_int_equal(cf_coll_select(&d, 4, false, req), CF_ALGO_RING);
  assert_int_equal(cf_coll_select(&d, 4, false, REQ_AUTO), CF_ALGO_DIRECT);
  assert_int_equal(cf_coll_select(&d, 4, true, req), CF_ALGO_DIRECT);  /* ring: not rank order */
  assert_int_equal(cf_coll_select(&d, 2, false, req), CF_ALGO_RD); /* no rule for 2 ranks: built-in */
  assert_int_equal(cf_coll_select(&d, 3, false, req), CF_ALGO_DIRECT); /* rd needs a power of 2 */
  d.count = 251;                                                       /* 1004 bytes */
  assert_int_equal(cf_coll_select(&d, 4, false, req), CF_ALGO_RD);
  cf_algo_req forced = cf_algo_forced(CF_ALGO_RSAG);
  forced.measured = rules, forced.n_measured = 3;
  assert_int_equal(cf_coll_select(&d, 4, false, forced), CF_ALGO_RSAG);
  /* rules for out-of-place calls only (a profile's) pass an in-place call
   * to the built-in in-place rule: rsag at every size and rank count */
  static const cf_algo_rule oop[] = {{.algo = CF_ALGO_RING, .in_place = -1}};
  cf_algo_req prof = {.policy = CF_POLICY_AUTO, .measured = oop, .n_measured = 1};
  assert_int_equal(cf_coll_select(&d, 4, false, prof), CF_ALGO_RING);
  d.in_place = true;
  for (int n = 2; n <= 9; n++) {
    assert_int_equal(cf_coll_select(&d, n, false, prof), CF_ALGO_RSAG);
    assert_int_equal(cf_coll_select(&d, n, true, REQ_AUTO), CF_ALGO_RSAG);
  }
  d.count = 1;
  assert_int_equal(cf_coll_select(&d, 2, false, REQ_AUTO), CF_ALGO_RSAG);
  /* MPI's policies keep their rules in place (not measured there) */
  cf_algo_req shm = {.policy = CF_POLICY_AUTO_MPI_SHM};
  assert_int_equal(cf_coll_select(&d, 2, false, shm), CF_ALGO_DIRECT);
}

/* Run s out of place and in place (a: the algorithm index for the
 * message): the results must be bitwise the same. */
static void same_in_place(cspec s, int a) {
  void *res[2][MAXR];
  int nseg = s.n_segs ? s.n_segs : 1;
  int64_t one = s.count, out = 0;
  const int64_t *sc = s.n_segs ? s.seg_count : &one;
  for (int j = 0; j < nseg; j++)
    out += sc[j] * (s.op == CF_OP_ALLGATHER ? s.n : 1) + (j + 1 < nseg ? s.pad : 0);
  for (int v = 0; v < 2; v++) {
    s.keep = res[v];
    s.in_place = v;
    run_coll(&s);
  }
  size_t bytes = (size_t)out * (size_t)cf_dtype_size(s.dt);
  for (int k = 0; k < s.n; k++) {
    if (memcmp(res[0][k], res[1][k], bytes) != 0)
      fail_msg("%s %s %s n=%d count=%lld segs=%d algo %d%s: in place differs bitwise from out of "
               "place on rank %d",
               cf_op_table[s.op].name, cf_dtype_name(s.dt),
               s.red >= 0 ? cf_reduction_name((cf_reduction)s.red) : "-", s.n, (long long)sc[0],
               nseg, a, s.det ? " det" : "", k);
    free(res[0][k]);
    free(res[1][k]);
  }
}

/* Every algorithm (auto, then each row forced), dtype, group of 1 to 8
 * ranks, count of counts[] and mode: op's call in place is bitwise the
 * same call out of place, writes nothing past its buffers (guard bytes,
 * run_coll) and leaves the unused buffer (and the blocks of the input that
 * are not its own) alone. AllReduce: counts are the elements; AllGather
 * and ReduceScatter: one member, counts are a rank's block, and every row
 * resolves to direct (the forced rows run the small sizes only). The
 * sizes above 1000 under a forced AllReduce row are the long part (subject
 * in_place_large, label long): large says which part runs. */
static void in_place_sweep(cf_op op, const int64_t *counts, int n_counts, bool large) {
  static const int ranks[] = {1, 2, 3, 4, 5, 8};
  for (int a = -1; a < N_ALGOS; a++)
    for (int t = 0; t < N_DTS; t++)
      for (int r = 0; r < 6; r++)
        for (int c = 0; c < n_counts; c++)
          for (int det = 0; det < 2; det++) {
            int n = ranks[r];
            int64_t count = counts[c];
            if ((count > 1000 &&
                 (det || n == 1 || n == 8 ||
                  (count > 100003 && all_dts[t] != CF_DT_INT8 && all_dts[t] != CF_DT_FLOAT32))) ||
                (op != CF_OP_ALLREDUCE && a >= 0 && (count > 1000 || det)))
              continue; /* time: the big sizes once per algorithm and dtype */
            if (large != (op == CF_OP_ALLREDUCE && a >= 0 && count > 1000))
              continue; /* the other part's */
            int red = op == CF_OP_ALLGATHER   ? -1
                      : op == CF_OP_ALLREDUCE ? ((t + r + c) % 2 ? CF_RED_MEAN : CF_RED_SUM)
                                              : (t + r + c) % CF_RED_COUNT;
            cspec s = {.op = op,
                       .algo = a < 0 ? REQ_AUTO : cf_algo_forced(all_algos[a]),
                       .dt = all_dts[t],
                       .red = red,
                       .n = n,
                       .count = count,
                       .n_segs = op == CF_OP_ALLREDUCE ? 0 : 1,
                       .seg_count = &count,
                       .det = det,
                       .seed = (uint64_t)count + 11,
                       .mis = (size_t)(c & 1) * (size_t)cf_dtype_size(all_dts[t])};
            same_in_place(s, a);
          }
}

/* In place (out is in, as the plan gives a gradient bucket), small to
 * segmented sizes (3M int8: segmented). */
static const int64_t ar_in_place_counts[] = {0, 1, 7, 65, 1000, 100003, (int64_t)3 << 20};

static void test_allreduce_in_place(void **state) {
  (void)state;
  in_place_sweep(CF_OP_ALLREDUCE, ar_in_place_counts, 7, false);
}

/* ... and its sizes above 1000 under every forced row (label long) */
static void test_allreduce_in_place_large(void **state) {
  (void)state;
  in_place_sweep(CF_OP_ALLREDUCE, ar_in_place_counts, 7, true);
}

/* ReduceScatter and AllGather in place (NCCL's layouts, member by member:
 * the AllGather's input is block me of its output, the ReduceScatter's
 * output block me of its input), every reduction, blocks of 0 to 300000
 * elements (several of the in-place ReduceScatter's 64 KiB pieces), odd
 * and unaligned, plain and fused (mpi-native: tests/e2e/mpi.sh). */
static void test_rsag_in_place(void **state) {
  (void)state;
  static const int64_t counts[] = {0, 1, 7, 65, 1000, 100003, 300000};
  in_place_sweep(CF_OP_REDUCESCATTER, counts, 7, false);
  in_place_sweep(CF_OP_ALLGATHER, counts, 7, false);
  /* fused buckets: five members (one empty, one past a piece), packed and
   * with odd padding between them */
  static const int64_t fused[] = {7, 1, 20000, 0, 100};
  static const int ranks[] = {1, 2, 3, 4, 8};
  for (int o = 0; o < 2; o++)
    for (int t = 0; t < N_DTS; t++)
      for (int r = 0; r < 5; r++)
        for (int pad = 0; pad < 6; pad += 5) {
          cf_op op = o ? CF_OP_ALLGATHER : CF_OP_REDUCESCATTER;
          cspec s = {.op = op,
                     .algo = REQ_AUTO,
                     .dt = all_dts[t],
                     .red = o ? -1 : (t + r) % CF_RED_COUNT,
                     .n = ranks[r],
                     .n_segs = 5,
                     .seg_count = fused,
                     .pad = pad,
                     .seed = 17,
                     .mis = pad ? (size_t)cf_dtype_size(all_dts[t]) : 0};
          same_in_place(s, -1);
        }
}

/* ================= the other collectives ================= */

static void test_reduce_scatter(void **state) {
  (void)state;
  static const int64_t fused[] = {7, 1, 64, 0, 100};
  static const int ranks[] = {1, 2, 3, 4, 8};
  for (int t = 0; t < N_DTS; t++)
    for (int r = 0; r < 5; r++)
      for (int red = 0; red < CF_RED_COUNT; red++) {
        /* one member (a plain ReduceScatter), then a fused bucket of five,
         * packed and with odd padding between the members */
        int64_t c1 = 33;
        cspec s = {.op = CF_OP_REDUCESCATTER, .dt = all_dts[t], .red = red, .n = ranks[r],
                   .n_segs = 1, .seg_count = &c1, .seed = 3};
        run_coll(&s);
        s.n_segs = 5;
        s.seg_count = fused;
        run_coll(&s);
        s.pad = 5;
        s.mis = (size_t)cf_dtype_size(all_dts[t]);
        run_coll(&s);
      }
}

static void test_all_gather(void **state) {
  (void)state;
  static const int64_t fused[] = {7, 1, 64, 0, 100, 3};
  static const int ranks[] = {1, 2, 3, 4, 8};
  for (int t = 0; t < N_DTS; t++)
    for (int r = 0; r < 5; r++) {
      int64_t c1 = 1000;
      cspec s = {.op = CF_OP_ALLGATHER, .dt = all_dts[t], .red = -1, .n = ranks[r], .n_segs = 1,
                 .seg_count = &c1, .seed = 4};
      run_coll(&s);
      s.n_segs = 6;
      s.seg_count = fused;
      run_coll(&s);
      s.pad = 3;
      run_coll(&s);
    }
  /* outputs from CF_STREAM_MIN_OUTPUT are written by streaming copies:
   * one member, and a fused bucket with odd member sizes */
  static const int64_t big[] = {300007, 5, 1 << 18};
  for (int r = 2; r <= 4; r++) {
    int64_t c1 = 600001;
    cspec s = {.op = CF_OP_ALLGATHER, .dt = r == 3 ? CF_DT_FLOAT16 : CF_DT_FLOAT32, .red = -1,
               .n = r, .n_segs = 1, .seg_count = &c1, .seed = 9};
    run_coll(&s);
    s.n_segs = 3, s.seg_count = big, s.pad = 1;
    run_coll(&s);
  }
}

/* (group size, root, count) of the rooted tests: a middle, the last, the
 * only, and a root past CF_MAX_ARITY ranks */
static const struct rooted { int n, root; int64_t count; } rooted[] = {
    {4, 2, 1001}, {5, 4, 1}, {1, 0, 64}, {9, 3, 100}, {3, 1, 777}, {8, 7, 0}, {8, 5, 100003}};

static void test_reduce_root(void **state) {
  (void)state;
  static const int reds[] = {CF_RED_SUM, CF_RED_PROD, CF_RED_MAX, CF_RED_MIN};
  for (int t = 0; t < N_DTS; t++)
    for (int q = 0; q < 4; q++)
      for (int k = 0; k < 4; k++) {
        cspec s = {.op = CF_OP_REDUCE, .dt = all_dts[t], .red = reds[q], .n = rooted[k].n,
                   .root = rooted[k].root, .count = rooted[k].count, .seed = 5};
        run_coll(&s);
      }
}

static void test_broadcast(void **state) {
  (void)state;
  for (int t = 0; t < N_DTS; t++)
    for (int k = 0; k < (int)(sizeof rooted / sizeof rooted[0]); k++) {
      cspec s = {.op = CF_OP_BROADCAST, .dt = all_dts[t], .red = -1, .n = rooted[k].n,
                 .root = rooted[k].root, .count = rooted[k].count, .seed = 6};
      run_coll(&s);
    }
}

/* A group that is a permuted subset of a bigger world: group order, not
 * rank order, decides blocks and roots; the ranks outside never call. */
static void test_group_subset(void **state) {
  (void)state;
  static const int g31[] = {3, 1}, g402[] = {4, 0, 2};
  static const int64_t segs[] = {5, 64, 1};
  for (int t = 0; t < N_DTS; t++) {
    for (int a = 0; a < N_ALGOS; a++) {
      cspec s = {.op = CF_OP_ALLREDUCE,
                 .algo = cf_algo_forced(all_algos[a]),
                 .dt = all_dts[t],
                 .red = CF_RED_SUM,
                 .world = 4,
                 .n = 2,
                 .ranks = g31,
                 .count = 1000,
                 .seed = 8};
      run_coll(&s);
      s.world = 5;
      s.n = 3;
      s.ranks = g402;
      s.red = CF_RED_MAX;
      run_coll(&s);
    }
    cspec rs = {.op = CF_OP_REDUCESCATTER, .dt = all_dts[t], .red = CF_RED_SUM, .world = 4, .n = 2,
                .ranks = g31, .n_segs = 3, .seg_count = segs, .seed = 9};
    run_coll(&rs);
    rs.world = 5, rs.n = 3, rs.ranks = g402;
    run_coll(&rs);
    cspec ag = {.op = CF_OP_ALLGATHER, .dt = all_dts[t], .red = -1, .world = 4, .n = 2, .ranks = g31,
                .n_segs = 3, .seg_count = segs, .seed = 10};
    run_coll(&ag);
    ag.world = 5, ag.n = 3, ag.ranks = g402;
    run_coll(&ag);
    for (int root = 0; root < 2; root++) {
      cspec re = {.op = CF_OP_REDUCE, .dt = all_dts[t], .red = CF_RED_SUM, .world = 4, .n = 2,
                  .ranks = g31, .root = root, .count = 99, .seed = 11};
      run_coll(&re);
      cspec bc = {.op = CF_OP_BROADCAST, .dt = all_dts[t], .red = -1, .world = 4, .n = 2, .ranks = g31,
                  .root = root, .count = 99, .seed = 12};
      run_coll(&bc);
    }
  }
}

/* Many calls in a row on one world (channel slots wrap, tickets grow), and
 * two disjoint groups running at the same time on it. */
static void test_sequences(void **state) {
  (void)state;
  enum { N = 4, CALLS = 40, COUNT = 300 };
  static const int world4[] = {0, 1, 2, 3}, ga[] = {3, 1}, gb[] = {0, 2};
  world W;
  world_open(&W, N, 30);
  cf_coll_call calls[N][CALLS];
  float *in[N], *out[N][CALLS];
  void *scr[N][CALLS];
  int ncalls[N] = {0};
  for (int r = 0; r < N; r++) {
    in[r] = malloc(sizeof(float) * COUNT * N);
    cf_fill_random(in[r], CF_DT_FLOAT32, COUNT * N, 1, r, "seq");
  }
  static cf_coll_seg seg_rs = {0, 0, COUNT}, seg_ag = {0, 0, COUNT};
  int64_t seq_w = 0, seq_a = 0, seq_b = 0;
  for (int i = 0; i < CALLS; i++) {
    int kind = i % 5; /* AllReduce (cycling algorithms), RS, AG, pair groups, Broadcast */
    cf_coll_desc d = {.op = CF_OP_ALLREDUCE, .dtype = CF_DT_FLOAT32, .count = COUNT, .red = CF_RED_SUM,
                      .root = -1, .layout = -1, .group = "world", .node = "s"};
    if (kind == 1) d.op = CF_OP_REDUCESCATTER, d.count = COUNT * N;
    if (kind == 2) d.op = CF_OP_ALLGATHER, d.red = -1, d.layout = CF_LAYOUT_CONCAT;
    if (kind == 4) d.op = CF_OP_BROADCAST, d.red = -1, d.root = i % N;
    prepare(&d, N);
    prepare(&d, 2);
    for (int r = 0; r < N; r++) {
      const int *ranks = world4;
      int n = N, me = r;
      cf_coll_desc dr = d;
      if (kind == 3) {
        bool in_a = r == 3 || r == 1;
        ranks = in_a ? ga : gb;
        n = 2;
        me = (r == 3 || r == 0) ? 0 : 1;
        dr.group = in_a ? "a" : "b";
        dr.seq = in_a ? seq_a : seq_b;
      } else {
        dr.seq = seq_w;
      }
      out[r][i] = calloc(COUNT * N, sizeof(float));
      cf_algo a = cf_coll_select(&dr, n, false, cf_algo_forced(all_algos[(i / 5) % N_ALGOS]));
      size_t sb = cf_coll_scratch_bytes(&dr, n, a, true);
      scr[r][i] = malloc(sb + 1);
      cf_coll_call *c = &calls[r][ncalls[r]++];
      *c = (cf_coll_call){.desc = dr, .ranks = ranks, .n = n, .me = me, .in = in[r], .out = out[r][i],
                          .segs = kind == 1 ? &seg_rs : &seg_ag, .n_segs = 1, .scratch = scr[r][i],
                          .scratch_bytes = sb, .algo = a};
    }
    if (kind == 3) seq_a++, seq_b++;
    else seq_w++;
  }
  job jobs[N];
  for (int r = 0; r < N; r++)
    jobs[r] = (job){.comm = rank_comm(&W, r), .calls = calls[r], .n_calls = ncalls[r]};
  run_jobs(jobs, N);
  for (int r = 0; r < N; r++)
    if (jobs[r].st) fail_msg("rank %d call %d: %s", r, jobs[r].failed_at, cf_context_errmsg(W.rctx[r]));
  for (int i = 0; i < CALLS; i++) {
    int kind = i % 5;
    for (int r = 0; r < N; r++) {
      const float *o = out[r][i];
      for (int e = 0; e < COUNT; e++) {
        double want = 0;
        if (kind == 0) want = (double)in[0][e] + in[1][e] + in[2][e] + in[3][e];
        if (kind == 1) want = (double)in[0][r * COUNT + e] + in[1][r * COUNT + e] + in[2][r * COUNT + e] + in[3][r * COUNT + e];
        if (kind == 3) want = (double)in[r][e] + in[r == 3 ? 1 : r == 1 ? 3 : r == 0 ? 2 : 0][e];
        if (kind == 4) want = in[i % N][e];
        if (kind == 2) {
          for (int p = 0; p < N; p++)
            if (o[p * COUNT + e] != in[p][e]) fail_msg("call %d AllGather rank %d block %d index %d", i, r, p, e);
          continue;
        }
        if (!(fabs(o[e] - want) <= 1e-6 * 4))
          fail_msg("call %d (kind %d) rank %d index %d: got %g, expected %g", i, kind, r, e, o[e], want);
      }
      free(out[r][i]);
      free(scr[r][i]);
    }
  }
  for (int r = 0; r < N; r++) free(in[r]);
  world_close(&W);
}

/* ================= safety: mismatches and vanished ranks ================= */

typedef enum mfield { M_COUNT, M_DTYPE, M_RED, M_ROOT, M_DIMS, M_PAIRS } mfield;

/* "FIELD is A on rank X but B on rank Y" somewhere in msg, with {A, B} the
 * good and bad values and the bad value on the bad rank. */
static void check_mismatch_text(const char *msg, const char *field, const char *good, const char *bad,
                                int bad_rank, const char *cfg) {
  char key[32], a[64], b[64];
  int ra, rb;
  snprintf(key, sizeof key, "%s is ", field);
  const char *p = strstr(msg, key);
  if (!p || !strstr(msg, "mismatch"))
    fail_msg("%s: message '%s' does not report a %s mismatch", cfg, msg, field);
  p += strlen(key);
  if (sscanf(p, "%63s on rank %d but %63s on rank %d", a, &ra, b, &rb) != 4)
    fail_msg("%s: message '%s' does not name both values and ranks", cfg, msg);
  bool ok = (!strcmp(a, good) && !strcmp(b, bad) && rb == bad_rank && ra != bad_rank) ||
            (!strcmp(a, bad) && !strcmp(b, good) && ra == bad_rank && rb != bad_rank);
  if (!ok) fail_msg("%s: message '%s' names the wrong values or ranks", cfg, msg);
}

/* The failure cases' time bounds. A mismatch or a loud failure must stop
 * every rank well before the world's timeout (FAST_TIMEOUT_S, then under
 * WELL_BEFORE_S), and a vanished rank be given up on after it (within
 * GIVE_UP_S of the start). Generous: on a busy machine (other jobs, busy
 * loops beside the suite) a thread can wait seconds for a core, and the
 * messages, checked too, already tell a mismatch from a timeout. */
#define FAST_TIMEOUT_S 30.0
#define WELL_BEFORE_S 10.0
#define GIVE_UP_S 30.0

/* n ranks run op; bad_rank's descriptor differs in field (its own buffers
 * sized to its own descriptor, as a real rank's would be). Every rank must
 * fail with CF_ERR_RUNTIME well before the timeout. */
static void mismatch_case(cf_op op, cf_algo_req algo, int n, int bad_rank, mfield f) {
  static const char *fname[] = {"count", "dtype", "reduction", "root", "split/concat dimensions",
                                "source_target_pairs"};
  int ident[MAXR];
  for (int i = 0; i < MAXR; i++) ident[i] = i;
  cf_coll_desc good = {.op = op, .dtype = CF_DT_FLOAT32, .count = 8, .red = CF_RED_SUM, .root = -1,
                       .layout = -1, .group = "g", .node = "mm"};
  if (op == CF_OP_REDUCE || op == CF_OP_BROADCAST) good.root = 0;
  if (op == CF_OP_BROADCAST || op == CF_OP_ALLGATHER) good.red = -1;
  if (op == CF_OP_ALLGATHER) good.layout = CF_LAYOUT_CONCAT;
  if (op == CF_OP_REDUCESCATTER || op == CF_OP_ALLTOALL) good.count = 8 * n;
  if (op == CF_OP_ALLTOALL) good.root = good.layout = 0; /* split and concat dims */
  if (op == CF_OP_ALLTOALL || op == CF_OP_COLLECTIVEPERMUTE) good.red = -1;
  if (op == CF_OP_COLLECTIVEPERMUTE) good.layout = 1234; /* a hash of the pairs */
  cf_coll_desc bad = good;
  char gv[32], bv[32];
  switch (f) {
  case M_COUNT: bad.count = good.count * 2; break;
  case M_DTYPE: bad.dtype = CF_DT_FLOAT16; break;
  case M_RED: bad.red = CF_RED_MAX; break;
  case M_ROOT: bad.root = n - 1; break;
  case M_DIMS: bad.root = 1; break;
  case M_PAIRS: bad.layout = 4321; break;
  }
  switch (f) {
  case M_COUNT:
    snprintf(gv, sizeof gv, "%lld", (long long)good.count);
    snprintf(bv, sizeof bv, "%lld", (long long)bad.count);
    break;
  case M_DTYPE:
    snprintf(gv, sizeof gv, "%s", cf_dtype_name(good.dtype));
    snprintf(bv, sizeof bv, "%s", cf_dtype_name(bad.dtype));
    break;
  case M_RED:
    snprintf(gv, sizeof gv, "%s", cf_reduction_name((cf_reduction)good.red));
    snprintf(bv, sizeof bv, "%s", cf_reduction_name((cf_reduction)bad.red));
    break;
  case M_ROOT:
    snprintf(gv, sizeof gv, "%d", good.root);
    snprintf(bv, sizeof bv, "%d", bad.root);
    break;
  case M_DIMS:
    snprintf(gv, sizeof gv, "%d/%d", good.root, good.layout);
    snprintf(bv, sizeof bv, "%d/%d", bad.root, bad.layout);
    break;
  case M_PAIRS:
    snprintf(gv, sizeof gv, "#%08x", (unsigned)good.layout);
    snprintf(bv, sizeof bv, "#%08x", (unsigned)bad.layout);
    break;
  }
  /* CollectivePermute: a ring {k, k+1}; the bad rank of M_PAIRS thinks there
   * are no pairs, so without the handshake its neighbours would wait for it */
  int pairs[MAXR][2 * MAXR];
  cf_coll_seg a2a[MAXR][MAXR];
  char cfg[128];
  snprintf(cfg, sizeof cfg, "%s %s n=%d: %s differs on rank %d", cf_op_table[op].name,
           cf_algo_req_name(algo), n, fname[f], bad_rank);
  world W;
  world_open(&W, n, FAST_TIMEOUT_S);
  cf_coll_call calls[MAXR];
  job jobs[MAXR];
  cf_coll_seg segs[MAXR];
  void *in[MAXR], *out[MAXR], *scr[MAXR];
  for (int k = 0; k < n; k++) {
    cf_coll_desc d = k == bad_rank ? bad : good;
    prepare(&d, n);
    int64_t es = cf_dtype_size(d.dtype);
    int64_t out_count = op == CF_OP_ALLGATHER ? d.count * n : op == CF_OP_REDUCESCATTER ? d.count / n : d.count;
    segs[k] = (cf_coll_seg){0, 0, op == CF_OP_REDUCESCATTER ? d.count / n : d.count};
    for (int j = 0; j < n; j++) {
      a2a[k][j] = (cf_coll_seg){j * d.count / n, j * d.count / n, d.count / n};
      pairs[k][j] = f == M_PAIRS && k == bad_rank ? -1 : (j + 1) % n;
      pairs[k][n + j] = f == M_PAIRS && k == bad_rank ? -1 : (j + n - 1) % n;
    }
    in[k] = calloc((size_t)(d.count * es) + 1, 1);
    out[k] = calloc((size_t)(out_count * es) + 1, 1);
    cf_algo a = cf_coll_select(&d, n, false, algo);
    size_t sb = cf_coll_scratch_bytes(&d, n, a, true);
    scr[k] = calloc(sb + 1, 1);
    calls[k] = (cf_coll_call){.desc = d, .ranks = ident, .n = n, .me = k, .in = in[k], .out = out[k],
                              .segs = &segs[k], .n_segs = 1, .scratch = scr[k], .scratch_bytes = sb,
                              .algo = a, .pairs = pairs[k]};
    if (op == CF_OP_ALLTOALL) calls[k].segs = a2a[k], calls[k].n_segs = n;
    jobs[k] = (job){.comm = rank_comm(&W, k), .calls = &calls[k], .n_calls = 1};
  }
  double t0 = run_jobs(jobs, n);
  int root = op == CF_OP_REDUCE || op == CF_OP_BROADCAST ? good.root : -1;
  for (int k = 0; k < n; k++) {
    /* a Broadcast receiver whose data matched the root's has done its part */
    bool bystander = op == CF_OP_BROADCAST && f != M_ROOT && k != root && root != bad_rank && k != bad_rank;
    if (bystander && jobs[k].st == CF_OK) {
      free(in[k]);
      free(out[k]);
      free(scr[k]);
      continue;
    }
    if (jobs[k].st != CF_ERR_RUNTIME)
      fail_msg("%s: rank %d returned %d, expected CF_ERR_RUNTIME (%s)", cfg, k, jobs[k].st,
               cf_context_errmsg(W.rctx[k]));
    if (jobs[k].t_end - t0 > WELL_BEFORE_S)
      fail_msg("%s: rank %d took %.2f s: a timeout (%s), not a mismatch", cfg, k, jobs[k].t_end - t0,
               cf_context_errmsg(W.rctx[k]));
    check_mismatch_text(cf_context_errmsg(W.rctx[k]), fname[f], gv, bv, bad_rank, cfg);
    free(in[k]);
    free(out[k]);
    free(scr[k]);
  }
  world_close(&W);
}

static void test_mismatch_allreduce(void **state) {
  (void)state;
  for (int a = 0; a < N_ALGOS; a++)
    for (int n = 2; n <= 4; n++)
      for (int f = M_COUNT; f <= M_RED; f++)
        for (int bad = 0; bad < n; bad += n - 1)
          mismatch_case(CF_OP_ALLREDUCE, cf_algo_forced(all_algos[a]), n, bad, (mfield)f);
}

static void test_mismatch_other(void **state) {
  (void)state;
  static const cf_op ops[] = {CF_OP_REDUCESCATTER, CF_OP_ALLGATHER, CF_OP_REDUCE, CF_OP_BROADCAST};
  for (int o = 0; o < 4; o++)
    for (int n = 2; n <= 3; n++)
      for (int bad = 0; bad < n; bad++) {
        mismatch_case(ops[o], REQ_AUTO, n, bad, M_COUNT);
        mismatch_case(ops[o], REQ_AUTO, n, bad, M_DTYPE);
        if (ops[o] == CF_OP_REDUCESCATTER || ops[o] == CF_OP_REDUCE)
          mismatch_case(ops[o], REQ_AUTO, n, bad, M_RED);
      }
}

/* Ranks that disagree on the root of a Reduce or Broadcast: each side sends
 * to or waits for a different rank, so only an explicit check of the
 * descriptor turns this into an error instead of a timeout. */
static void test_mismatch_root(void **state) {
  (void)state;
  for (int n = 2; n <= 3; n++) {
    mismatch_case(CF_OP_REDUCE, REQ_AUTO, n, n - 1, M_ROOT);
    mismatch_case(CF_OP_BROADCAST, REQ_AUTO, n, n - 1, M_ROOT);
  }
}

/* AllToAll and CollectivePermute: a count, dtype, split/concat dims or
 * pairs that differ on one rank fail every rank at once. */
static void test_mismatch_alltoall_permute(void **state) {
  (void)state;
  for (int n = 2; n <= 4; n++)
    for (int bad = 0; bad < n; bad++) {
      mismatch_case(CF_OP_ALLTOALL, (cf_algo_req){0}, n, bad, M_COUNT);
      mismatch_case(CF_OP_ALLTOALL, (cf_algo_req){0}, n, bad, M_DTYPE);
      mismatch_case(CF_OP_ALLTOALL, (cf_algo_req){0}, n, bad, M_DIMS);
      mismatch_case(CF_OP_COLLECTIVEPERMUTE, (cf_algo_req){0}, n, bad, M_COUNT);
      mismatch_case(CF_OP_COLLECTIVEPERMUTE, (cf_algo_req){0}, n, bad, M_DTYPE);
      mismatch_case(CF_OP_COLLECTIVEPERMUTE, (cf_algo_req){0}, n, bad, M_PAIRS);
    }
}

/* A FusedAllToAll's one exchange (algo_alltoall.c) on 2, 3 and 4 ranks:
 * members of several element sizes (a byte bucket, as the combiner makes
 * one of mixed dtypes), each with its own shape, split and concat dims, at
 * 64-byte lines with gaps; every rank's output must be each member's XLA
 * all-to-all byte for byte (out[k] = concat over t of block k of in[t]),
 * the gaps and the guard bytes around in, out and scratch untouched, the
 * input unchanged. */
static void a2a_parts_case(int n, int nm, uint64_t seed) {
  int ident[MAXR];
  for (int i = 0; i < MAXR; i++) ident[i] = i;
  uint64_t r = seed * 0x9E3779B97F4A7C15ull + 1;
#define RND(k) ((int)((r = r * 6364136223846793005ull + 1442695040888963407ull) >> 33) % (k))
  cf_shape shp[8];
  int es[8], sd[8], cd[8];
  cf_a2a_part part[8];
  int64_t in_b = 0, out_b = 0;
  assert_true(nm <= 8);
  for (int m = 0; m < nm; m++) {
    static const int sizes[] = {1, 2, 4, 8};
    es[m] = sizes[RND(4)];
    shp[m].rank = 1 + RND(3);
    for (int d = 0; d < shp[m].rank; d++) shp[m].dims[d] = 1 + RND(3);
    sd[m] = RND(shp[m].rank), cd[m] = RND(shp[m].rank);
    shp[m].dims[sd[m]] *= n;
    int64_t count = es[m], in_row = es[m], out_row = es[m], elems = 1;
    for (int d = shp[m].rank - 1; d >= 0; d--) {
      int64_t b = d == sd[m] ? shp[m].dims[d] / n : shp[m].dims[d];
      count *= b, elems *= shp[m].dims[d];
      if (d >= sd[m]) in_row *= b;
      if (d >= cd[m]) out_row *= b;
    }
    in_b = (in_b + 63) / 64 * 64 + 64 * RND(2), out_b = (out_b + 63) / 64 * 64 + 64 * RND(2);
    part[m] = (cf_a2a_part){in_b, out_b, count, in_row, out_row};
    in_b += elems * es[m], out_b += elems * es[m];
  }
#undef RND
  cf_coll_desc d = {.op = CF_OP_ALLTOALL, .dtype = CF_DT_UINT8, .count = in_b, .red = -1,
                    .root = 0, .layout = 0, .group = "g", .node = "fa"};
  cf_algo a = cf_coll_select(&d, n, false, (cf_algo_req){0});
  size_t sb = cf_coll_scratch_bytes(&d, n, a, true);
  char cfg[96];
  snprintf(cfg, sizeof cfg, "FusedAllToAll n=%d members=%d seed=%llu", n, nm,
           (unsigned long long)seed);
  world W;
  world_open(&W, n, 30);
  gbuf in[MAXR], out[MAXR], scr[MAXR];
  cf_coll_call calls[MAXR];
  job jobs[MAXR];
  for (int k = 0; k < n; k++) {
    void *ip = gb_alloc(&in[k], (size_t)in_b, 0, 0);
    cf_fill_random(ip, CF_DT_UINT8, in_b, seed, k, "x");
    gb_alloc(&out[k], (size_t)out_b, 0, FILL_BYTE);
    gb_alloc(&scr[k], sb, 0, 0);
    calls[k] = (cf_coll_call){.desc = d, .ranks = ident, .n = n, .me = k, .in = ip,
                              .out = gb_ptr(&out[k]), .a2a = part, .n_a2a = nm,
                              .scratch = gb_ptr(&scr[k]), .scratch_bytes = sb, .algo = a};
    jobs[k] = (job){.comm = rank_comm(&W, k), .calls = &calls[k], .n_calls = 1};
  }
  run_jobs(jobs, n);
  unsigned char *want = malloc((size_t)out_b + 1);
  for (int k = 0; k < n; k++) {
    if (jobs[k].st != CF_OK)
      fail_msg("%s: rank %d: status %d: %s", cfg, k, jobs[k].st, cf_context_errmsg(W.rctx[k]));
    gb_check(&in[k], "input", cfg);
    gb_check(&out[k], "output", cfg);
    gb_check(&scr[k], "scratch", cfg);
    unsigned char *orig = malloc((size_t)in_b + 1);
    cf_fill_random(orig, CF_DT_UINT8, in_b, seed, k, "x");
    if (memcmp(orig, gb_ptr(&in[k]), (size_t)in_b)) fail_msg("%s: rank %d's input changed", cfg, k);
    free(orig);
    memset(want, FILL_BYTE, (size_t)out_b);
    for (int m = 0; m < nm; m++) {
      const cf_shape *s = &shp[m];
      cf_shape os = *s;
      os.dims[sd[m]] /= n;
      int64_t bcd = os.dims[cd[m]], bsd = os.dims[sd[m]], elems = 1;
      os.dims[cd[m]] *= n;
      for (int q = 0; q < os.rank; q++) elems *= os.dims[q];
      for (int64_t e = 0; e < elems; e++) {
        int64_t idx[CF_MAX_RANK] = {0}, rest = e, f = 0;
        for (int q = os.rank - 1; q >= 0; q--) idx[q] = rest % os.dims[q], rest /= os.dims[q];
        int t = (int)(idx[cd[m]] / bcd);
        idx[cd[m]] %= bcd;
        idx[sd[m]] += k * bsd;
        for (int q = 0; q < s->rank; q++) f = f * s->dims[q] + idx[q];
        const unsigned char *src = (const unsigned char *)gb_ptr(&in[t]) + part[m].in_off;
        memcpy(want + part[m].out_off + e * es[m], src + f * es[m], (size_t)es[m]);
      }
    }
    const unsigned char *got = gb_ptr(&out[k]);
    for (int64_t b = 0; b < out_b; b++)
      if (got[b] != want[b]) {
        fail_msg("%s: rank %d: output byte %lld is %d, expected %d", cfg, k, (long long)b, got[b],
                 want[b]);
        break;
      }
  }
  free(want);
  for (int k = 0; k < n; k++) gb_free(&in[k]), gb_free(&out[k]), gb_free(&scr[k]);
  world_close(&W);
}

static void test_alltoall_bucket(void **state) {
  (void)state;
  for (int n = 2; n <= 4; n++)
    for (uint64_t seed = 1; seed <= 6; seed++) a2a_parts_case(n, 1 + (int)(seed % 5), seed + 10 * n);
}

/* A rank that never calls: the others give up after the timeout, naming
 * it. The cases wait out their timeouts side by side (each its own world
 * and threads): vanish_start starts one, vanish_finish joins and checks it. */
typedef struct vanish {
  cf_op op;
  int n, gone, ident[MAXR];
  cf_coll_desc d;
  cf_coll_seg seg;
  char cfg[96];
  world W;
  cf_coll_call calls[MAXR];
  job jobs[MAXR];
  pthread_t th[MAXR];
  float *buf[MAXR][3];
  double t0;
} vanish;

static vanish *vanish_start(cf_op op, cf_algo_req algo, int n, int gone) {
  vanish *v = calloc(1, sizeof *v);
  assert_non_null(v);
  v->op = op, v->n = n, v->gone = gone;
  for (int i = 0; i < MAXR; i++) v->ident[i] = i;
  cf_coll_desc *d = &v->d;
  *d = (cf_coll_desc){.op = op, .dtype = CF_DT_FLOAT32, .count = 4096, .red = CF_RED_SUM, .root = -1,
                      .layout = -1, .group = "g", .node = "v"};
  if (op == CF_OP_BROADCAST || op == CF_OP_REDUCE) d->root = gone == 0 ? 1 : 0;
  if (op == CF_OP_BROADCAST) d->red = -1;
  prepare(d, n);
  cf_algo a = cf_coll_select(d, n, false, algo);
  snprintf(v->cfg, sizeof v->cfg, "%s %s n=%d, rank %d never calls", cf_op_table[op].name, cf_algo_name(a), n, gone);
  world_open(&v->W, n, 1.0);
  v->seg = (cf_coll_seg){0, 0, d->count / n};
  size_t sb = cf_coll_scratch_bytes(d, n, a, true);
  for (int k = 0; k < n; k++) {
    v->buf[k][0] = calloc((size_t)d->count, sizeof(float));
    v->buf[k][1] = calloc((size_t)d->count, sizeof(float));
    v->buf[k][2] = malloc(sb + 1);
    v->calls[k] = (cf_coll_call){.desc = *d, .ranks = v->ident, .n = n, .me = k, .in = v->buf[k][0],
                                 .out = v->buf[k][1], .segs = &v->seg, .n_segs = 1, .scratch = v->buf[k][2],
                                 .scratch_bytes = sb, .algo = a};
    v->jobs[k] = (job){.comm = rank_comm(&v->W, k), .calls = &v->calls[k], .n_calls = 1,
                       .vanish = k == gone, .world = v->W.w, .rank = k};
  }
  v->t0 = cf_now();
  for (int k = 0; k < n; k++) assert_int_equal(pthread_create(&v->th[k], NULL, job_main, &v->jobs[k]), 0);
  return v;
}

static void vanish_finish(vanish *v) {
  for (int k = 0; k < v->n; k++) pthread_join(v->th[k], NULL);
  const cf_coll_desc *d = &v->d;
  const char *cfg = v->cfg;
  int gone = v->gone;
  char rk[32];
  snprintf(rk, sizeof rk, "rank %d", gone);
  for (int k = 0; k < v->n; k++) {
    if (k == gone) continue;
    /* a Broadcast non-root that got the root's data is done, whoever is gone */
    if (v->op == CF_OP_BROADCAST && k != d->root && gone != d->root && v->jobs[k].st == CF_OK) continue;
    double dt = v->jobs[k].t_end - v->t0;
    const char *msg = cf_context_errmsg(v->W.rctx[k]);
    if (v->jobs[k].st != CF_ERR_RUNTIME) fail_msg("%s: rank %d returned %d (%s)", cfg, k, v->jobs[k].st, msg);
    if (dt < 0.8 || dt > GIVE_UP_S) fail_msg("%s: rank %d gave up after %.2f s (timeout 1 s)", cfg, k, dt);
    if (!strstr(msg, "timed out")) fail_msg("%s: rank %d's message '%s' does not say it timed out", cfg, k, msg);
    /* a Reduce to a live root: the non-roots are done once the root has their data */
    char gone_list[48];
    snprintf(gone_list, sizeof gone_list, "stopped: %d", gone);
    if (v->op != CF_OP_REDUCE && !strstr(msg, rk) && !strstr(msg, gone_list)) fail_msg("%s: rank %d's message '%s' does not name %s", cfg, k, msg, rk);
  }
  for (int k = 0; k < v->n; k++) {
    free(v->buf[k][0]);
    free(v->buf[k][1]);
    free(v->buf[k][2]);
  }
  world_close(&v->W);
  free(v);
}

static void test_vanished_rank(void **state) {
  (void)state;
  vanish *v[N_ALGOS + 5];
  int nv = 0;
  for (int a = 0; a < N_ALGOS; a++)
    v[nv++] = vanish_start(CF_OP_ALLREDUCE, cf_algo_forced(all_algos[a]), 4, 2);
  v[nv++] = vanish_start(CF_OP_ALLREDUCE, cf_algo_forced(CF_ALGO_RING), 3, 0);
  v[nv++] = vanish_start(CF_OP_REDUCESCATTER, REQ_AUTO, 3, 1);
  v[nv++] = vanish_start(CF_OP_ALLGATHER, REQ_AUTO, 3, 2);
  v[nv++] = vanish_start(CF_OP_BROADCAST, REQ_AUTO, 3, 2);
  v[nv++] = vanish_start(CF_OP_BROADCAST, REQ_AUTO, 3, 0); /* the root itself */
  for (int i = 0; i < nv; i++) vanish_finish(v[i]);
}

/* ================= plans and runs ================= */

/* A data/tensor-parallel mix on 4 ranks: fusion=2 buckets (one member made
 * by a MatMul straight into the bucket), fusion=1 gradients of several
 * dtypes, fusion=0, one input in two buckets (a COPY), a chain (an
 * AllReduce of an Add of AllReduce results; collectives that read a bucket
 * member in place at its offset), a permuted subgroup, fused AllGather and
 * ReduceScatter, Reduce and Broadcast, and outputs that read inputs and
 * bucket members directly. */
static const char *plan_xml =
    "<graph name='p' version='1' world_size='4'>"
    " <group name='pair' ranks='3,1'/>"
    " <node name='a' op='Input' dtype='float32' shape='33'/>"
    " <node name='b' op='Input' dtype='float32' shape='7,9'/>"
    " <node name='w' op='Input' dtype='float32' shape='9,16'/>"
    " <node name='c' op='Input' dtype='float16' shape='100'/>"
    " <node name='c2' op='Input' dtype='float16' shape='3,5'/>"
    " <node name='d' op='Input' dtype='bfloat16' shape='64'/>"
    " <node name='e' op='Input' dtype='int32' shape='5'/>"
    " <node name='r1' op='Input' dtype='float32' shape='8,3'/>"
    " <node name='r2' op='Input' dtype='float32' shape='4'/>"
    " <node name='mm' op='MatMul'><input ref='b'/><input ref='w'/></node>"
    " <node name='ar_a' op='AllReduce' reduction='sum' fusion='2' fusion_id='1'><input ref='a'/></node>"
    " <node name='ar_mm' op='AllReduce' reduction='sum' fusion='2' fusion_id='1'><input ref='mm'/></node>"
    " <node name='ar_b' op='AllReduce' reduction='sum'><input ref='b'/></node>"
    " <node name='ar_a2' op='AllReduce' reduction='sum'><input ref='a'/></node>"
    " <node name='ar_c' op='AllReduce' reduction='mean'><input ref='c'/></node>"
    " <node name='ar_c2' op='AllReduce' reduction='mean'><input ref='c2'/></node>"
    " <node name='ar_d' op='AllReduce' reduction='max' fusion='2' fusion_id='3'><input ref='d'/></node>"
    " <node name='ar_dp' op='AllReduce' reduction='min' group='pair'><input ref='d'/></node>"
    " <node name='ar_e' op='AllReduce' reduction='sum' fusion='0'><input ref='e'/></node>"
    " <node name='sum' op='Add'><input ref='ar_a'/><input ref='ar_a2'/></node>"
    " <node name='ar_sum' op='AllReduce' reduction='mean'><input ref='sum'/></node>"
    " <node name='ag1' op='AllGather' layout='concat' fusion='2' fusion_id='5'><input ref='a'/></node>"
    " <node name='ag2' op='AllGather' layout='concat' fusion='2' fusion_id='5'><input ref='mm'/></node>"
    " <node name='rs1' op='ReduceScatter' reduction='sum' fusion='2' fusion_id='6'><input ref='r1'/></node>"
    " <node name='rs2' op='ReduceScatter' reduction='sum' fusion='2' fusion_id='6'><input ref='r2'/></node>"
    " <node name='bc' op='Broadcast' root='1' group='pair'><input ref='c2'/></node>"
    " <node name='mul' op='Mul'><input ref='ar_mm'/><input ref='mm'/></node>"
    " <node name='ar_chain' op='AllReduce' reduction='max' fusion='0'><input ref='ar_mm'/></node>"
    " <node name='ag_chain' op='AllGather' layout='stack'><input ref='ar_mm'/></node>"
    " <node name='red' op='Reduce' reduction='sum' root='2'><input ref='b'/></node>"
    " <node name='o_a' op='Output'><input ref='ar_a'/></node>"
    " <node name='o_mm' op='Output'><input ref='ar_mm'/></node>"
    " <node name='o_b' op='Output'><input ref='ar_b'/></node>"
    " <node name='o_a2' op='Output'><input ref='ar_a2'/></node>"
    " <node name='o_c' op='Output'><input ref='ar_c'/></node>"
    " <node name='o_c2' op='Output'><input ref='ar_c2'/></node>"
    " <node name='o_d' op='Output'><input ref='ar_d'/></node>"
    " <node name='o_dp' op='Output'><input ref='ar_dp'/></node>"
    " <node name='o_e' op='Output'><input ref='ar_e'/></node>"
    " <node name='o_sum' op='Output'><input ref='ar_sum'/></node>"
    " <node name='o_ag1' op='Output'><input ref='ag1'/></node>"
    " <node name='o_ag2' op='Output'><input ref='ag2'/></node>"
    " <node name='o_rs1' op='Output'><input ref='rs1'/></node>"
    " <node name='o_rs2' op='Output'><input ref='rs2'/></node>"
    " <node name='o_bc' op='Output'><input ref='bc'/></node>"
    " <node name='o_mul' op='Output'><input ref='mul'/></node>"
    " <node name='o_chain' op='Output'><input ref='ar_chain'/></node>"
    " <node name='o_agc' op='Output'><input ref='ag_chain'/></node>"
    " <node name='o_red' op='Output'><input ref='red'/></node>"
    " <node name='o_rawa' op='Output'><input ref='a'/></node>"
    " <node name='o_rawmm' op='Output'><input ref='mm'/></node>"
    "</graph>";

/* Many float gradients (and two fusion_id buckets) of uneven sizes, so
 * different split specs give different bucket layouts. */
static char *grads_xml(void) {
  size_t cap = 1 << 16, len = 0;
  char *s = malloc(cap);
  assert_non_null(s);
  len += (size_t)snprintf(s + len, cap - len, "<graph name='grads' version='1' world_size='4'>");
  static const int sizes[] = {1, 1000, 17, 4096, 64, 65, 3000, 7, 250, 128, 999, 2, 5000, 33, 640, 100};
  for (int i = 0; i < 16; i++) {
    const char *dt = i % 5 == 3 ? "float16" : i % 7 == 5 ? "bfloat16" : "float32";
    const char *red = i % 3 == 1 ? "mean" : "sum";
    char fus[64] = "";
    if (i % 6 == 2) snprintf(fus, sizeof fus, " fusion='2' fusion_id='%d'", i % 4);
    len += (size_t)snprintf(s + len, cap - len,
                            " <node name='g%d' op='Input' dtype='%s' shape='%d'/>"
                            " <node name='ar%d' op='AllReduce' reduction='%s'%s><input ref='g%d'/></node>"
                            " <node name='o%d' op='Output'><input ref='ar%d'/></node>",
                            i, dt, sizes[i], i, red, fus, i, i, i);
  }
  snprintf(s + len, cap - len, "</graph>");
  return s;
}

static cf_graph *compile_graph(const char *xml, const char *pipeline, const char *split) {
  cf_graph *g = NULL;
  if (cf_graph_parse(ctx, "plan.xml", xml, strlen(xml), &g) != CF_OK) fail_msg("parse: %s", cf_context_errmsg(ctx));
  cf_compile_options co = {.pipeline = pipeline, .pass = {.split = split}};
  if (cf_compile(g, &co) != CF_OK)
    fail_msg("compile (%s, split %s): %s", pipeline, split ? split : "auto", cf_context_errmsg(ctx));
  return g;
}

static int count_op(const cf_graph *g, cf_op op) {
  int k = 0;
  for (int i = 0; i < g->n_nodes; i++) k += g->nodes[i].op == op;
  return k;
}

/* Run g with opt (inputs from the seed); the outputs stay in res. */
static cf_status run_plan(const cf_graph *g, const cf_run_options *opt, cf_run_result *res, int64_t *peak) {
  cf_plan *p = NULL;
  cf_status st = cf_plan_build(ctx, g, opt, &p);
  if (st) fail_msg("plan: %s", cf_context_errmsg(ctx));
  if (peak) *peak = cf_plan_peak_bytes(p);
  st = cf_exec_run(ctx, p, NULL, res);
  cf_plan_destroy(p);
  return st;
}

/* run_plan on a world that injects f's faults (executor/fault.h) */
static cf_status run_faulty(const cf_graph *g, const cf_run_options *opt, const cf_faults *f,
                            cf_run_result *res) {
  cf_plan *p = NULL;
  cf_status st = cf_plan_build(ctx, g, opt, &p);
  if (st) fail_msg("plan: %s", cf_context_errmsg(ctx));
  st = cf_fault_run(ctx, p, NULL, f, NULL, res);
  cf_plan_destroy(p);
  return st;
}

/* Check res (from any compilation of xml) against the reference of the
 * unfused graph, matching outputs by name. */
static void verify_run(const char *xml, const cf_run_result *res, uint64_t seed, const char *what) {
  cf_graph *ug = compile_graph(xml, cf_pipeline_O0, NULL);
  int ranks = res->ranks;
  cf_inputs in = {.ranks = ranks};
  for (int i = 0; i < ug->n_nodes; i++) in.n += ug->nodes[i].op == CF_OP_INPUT;
  in.names = calloc((size_t)in.n + 1, sizeof *in.names);
  in.data = calloc((size_t)in.n * (size_t)ranks + 1, sizeof *in.data);
  for (int i = 0, k = 0; i < ug->n_nodes; i++) {
    const cf_node *nd = &ug->nodes[i];
    if (nd->op != CF_OP_INPUT) continue;
    in.names[k] = nd->name;
    for (int r = 0; r < ranks; r++) {
      cf_tensor *t = &in.data[r * in.n + k];
      t->dtype = nd->out[0].dtype;
      t->shape = nd->out[0].shape;
      assert_true(cf_shape_elements(&t->shape, &t->count));
      t->data = calloc((size_t)t->count + 1, (size_t)cf_dtype_size(t->dtype));
      cf_fill_node(nd, t->data, t->dtype, t->count, seed, r);
    }
    k++;
  }
  cf_ref_value *ref = NULL;
  int nref = 0;
  if (cf_reference_run(ctx, ug, &in, seed, &ref, &nref) != CF_OK) fail_msg("%s: reference: %s", what, cf_context_errmsg(ctx));
  assert_int_equal(nref, res->n_outputs);
  cf_tensor *got = calloc((size_t)nref * (size_t)ranks + 1, sizeof *got);
  for (int i = 0, j = 0; i < ug->n_nodes; i++) {
    if (ug->nodes[i].op != CF_OP_OUTPUT) continue;
    int k = -1;
    for (int x = 0; x < res->n_outputs; x++)
      if (!strcmp(res->output_names[x], ug->nodes[i].name)) k = x;
    if (k < 0) fail_msg("%s: output '%s' missing", what, ug->nodes[i].name);
    for (int r = 0; r < ranks; r++) got[r * nref + j] = res->outputs[r * res->n_outputs + k];
    j++;
  }
  cf_verify_stats vs;
  if (cf_verify_outputs(ctx, ug, got, ref, ranks, nref, &vs) != CF_OK)
    fail_msg("%s: %s", what, cf_context_errmsg(ctx));
  assert_true(vs.checked > 0);
  free(got);
  cf_ref_free(ref, nref * ranks);
  for (int i = 0; i < in.n * ranks; i++) free(in.data[i].data);
  free(in.data);
  free(in.names);
  cf_graph_destroy(ug);
}

static void test_plan_matches_reference(void **state) {
  (void)state;
  const char *const *xmls = plan_graphs;
  static const char *pipes[] = {cf_pipeline_default, cf_pipeline_O0};
  for (int x = 0; x < 2; x++)
    for (int p = 0; p < 2; p++)
      for (int a = -1; a < N_ALGOS; a++) /* auto, then each algorithm forced */
        for (int det = 0; det < 2; det++) {
          cf_graph *g = compile_graph(xmls[x], pipes[p], NULL);
          if (p == 0) assert_true(count_op(g, CF_OP_FUSEDALLREDUCE) > 0);
          cf_algo_req req = a < 0 ? REQ_AUTO : cf_algo_forced(all_algos[a]);
          cf_run_options opt = {.seed = 17,
                                .iters = a < 0 ? 3 : 1,
                                .warmup = a < 0,
                                .timeout_s = 30,
                                .algo = req,
                                .deterministic = det};
          cf_run_result res;
          char what[96];
          snprintf(what, sizeof what, "graph %d %s algo %s%s", x, p ? "-O0" : "fused",
                   cf_algo_req_name(req), det ? " det" : "");
          if (run_plan(g, &opt, &res, NULL) != CF_OK) fail_msg("%s: run: %s", what, cf_context_errmsg(ctx));
          assert_int_equal(res.ranks, 4);
          assert_true(res.collectives_executed > 0);
          assert_true(res.time_ms_median >= 0);
          verify_run(xmls[x], &res, 17, what);
          cf_run_result_free(&res);
          cf_graph_destroy(g);
        }
}

/* --deterministic: fused, unfused and other bucket layouts agree bitwise. */
static void test_plan_deterministic_bitwise(void **state) {
  (void)state;
  const char *const *xmls = plan_graphs;
  static const struct { const char *pipe, *split; } cfgs[] = {
      {NULL, NULL}, {"O0", NULL}, {NULL, "bytes:4K"}, {NULL, "size:50,50"}, {NULL, "bytes:1K,first=256"},
      {NULL, "size:30,30,40"}};
  for (int x = 0; x < 2; x++) {
    cf_run_result base = {0};
    cf_graph *base_g = NULL; /* owns base's output names */
    for (int c = 0; c < 6; c++) {
      cf_graph *g = compile_graph(xmls[x], cfgs[c].pipe ? cf_pipeline_O0 : cf_pipeline_default, cfgs[c].split);
      cf_run_options opt = {.seed = 5,
                            .iters = 1,
                            .timeout_s = 30,
                            .deterministic = true,
                            .algo = c % 2 ? cf_algo_forced(CF_ALGO_RING) : REQ_AUTO};
      cf_run_result res;
      if (run_plan(g, &opt, &res, NULL) != CF_OK) fail_msg("run: %s", cf_context_errmsg(ctx));
      if (c == 0) {
        base = res;
        base_g = g;
        continue;
      }
      {
        assert_int_equal(res.n_outputs, base.n_outputs);
        for (int j = 0; j < res.n_outputs; j++) {
          int k = -1;
          for (int q = 0; q < base.n_outputs; q++)
            if (!strcmp(base.output_names[q], res.output_names[j])) k = q;
          assert_true(k >= 0);
          for (int r = 0; r < res.ranks; r++) {
            const cf_tensor *t1 = &res.outputs[r * res.n_outputs + j], *t0 = &base.outputs[r * base.n_outputs + k];
            if ((!strcmp(res.output_names[j], "o_dp") || !strcmp(res.output_names[j], "o_bc")) && r != 1 &&
                r != 3)
              continue; /* not in the group: undefined */
            if (!strcmp(res.output_names[j], "o_red") && r != 2) continue; /* Reduce: the root only */
            assert_int_equal(t1->count, t0->count);
            if (memcmp(t1->data, t0->data, (size_t)t1->count * (size_t)cf_dtype_size(t1->dtype)) != 0)
              fail_msg("graph %d: output '%s' rank %d differs bitwise between the default compile and %s %s",
                       x, res.output_names[j], r, cfgs[c].pipe ? "-O0" : "split", cfgs[c].split ? cfgs[c].split : "");
          }
        }
        cf_run_result_free(&res);
      }
      cf_graph_destroy(g);
    }
    cf_run_result_free(&base);
    cf_graph_destroy(base_g);
  }
}

/* In-place plans: for fused and unfused graphs, every algorithm, with and
 * without --deterministic, the outputs are bitwise those of the same plan
 * kept out of place; after three iterations (the later ones reduce the
 * results before them) a run returns the first's. */
/* A control dependency on a collective (<after>): the node after it runs
 * once the collective has finished, so its WAIT comes before that node (a
 * data consumer alone would let it wait until the Output), and the run
 * still matches the reference. */
static void test_plan_control_order(void **state) {
  (void)state;
  const char *xml = "<graph world_size='2'>\n"
                    "<node name='x' op='Input' dtype='float32' shape='64' init='random'/>\n"
                    "<node name='ar' op='AllReduce'><input ref='x'/></node>\n"
                    "<node name='y' op='Input' dtype='float32' shape='64' init='random'/>\n"
                    "<node name='m' op='Mul'><input ref='y'/><input ref='y'/>%s</node>\n"
                    "<node name='o1' op='Output'><input ref='m'/></node>\n"
                    "<node name='o2' op='Output'><input ref='ar'/></node>\n"
                    "<node name='z' op='Input' dtype='float32' shape='64' init='random'/>\n"
                    "<node name='ar2' op='AllReduce'><input ref='z'/>%s</node>\n"
                    "<node name='o3' op='Output'><input ref='ar2'/></node>\n</graph>\n";
  for (int ordered = 0; ordered < 2; ordered++) {
    char text[1024];
    snprintf(text, sizeof text, xml, ordered ? "<after ref='ar'/>" : "", ordered ? "<after ref='m'/>" : "");
    cf_graph *g = compile_graph(text, cf_pipeline_O0, NULL);
    cf_run_options opt = {.seed = 9, .iters = 1, .timeout_s = 30};
    cf_plan *pl = NULL;
    if (cf_plan_build(ctx, g, &opt, &pl) != CF_OK) fail_msg("plan: %s", cf_context_errmsg(ctx));
    int wait = -1, mul = -1, start2 = -1;
    for (int i = 0; i < pl->n_steps; i++) {
      const cf_step *sp = &pl->steps[i];
      const char *cn = sp->kind == CF_STEP_WAIT || sp->kind == CF_STEP_START
                           ? g->nodes[pl->colls[sp->coll].node].name : "";
      if (sp->kind == CF_STEP_WAIT && !strcmp(cn, "ar")) wait = i;
      if (sp->kind == CF_STEP_START && !strcmp(cn, "ar2")) start2 = i;
      if (sp->kind == CF_STEP_COMPUTE && !strcmp(g->nodes[sp->node].name, "m")) mul = i;
    }
    assert_true(wait >= 0 && mul >= 0 && start2 >= 0);
    /* ordered: ar ends before m, and ar2 (after m) starts after it; else
     * ar waits for its Output and ar2 starts as soon as its input is there */
    if (ordered) assert_true(wait < mul && start2 > mul);
    else assert_true(wait > mul && start2 < mul);
    cf_run_result res;
    assert_int_equal(cf_exec_run(ctx, pl, NULL, &res), CF_OK);
    verify_run(text, &res, 9, ordered ? "control order" : "no control order");
    cf_run_result_free(&res);
    cf_plan_destroy(pl);
    cf_graph_destroy(g);
  }
}

static void test_plan_in_place(void **state) {
  (void)state;
  const char *const *xmls = plan_graphs;
  static const char *pipes[] = {cf_pipeline_default, cf_pipeline_O0};
  for (int x = 0; x < 2; x++)
    for (int p = 0; p < 2; p++)
      for (int a = -1; a < N_ALGOS; a++)
        for (int det = 0; det < 2; det++) {
          cf_graph *g = compile_graph(xmls[x], pipes[p], NULL);
          cf_run_result res[2];
          int in_place[2];
          for (int v = 0; v < 2; v++) {
            cf_run_options opt = {.seed = 5,
                                  .iters = v ? 1 : 3,
                                  .warmup = v ? 0 : 1,
                                  .timeout_s = 30,
                                  .algo = a < 0 ? REQ_AUTO : cf_algo_forced(all_algos[a]),
                                  .deterministic = det,
                                  .out_of_place = v};
            cf_plan *pl = NULL;
            if (cf_plan_build(ctx, g, &opt, &pl) != CF_OK)
              fail_msg("plan: %s", cf_context_errmsg(ctx));
            in_place[v] = pl->n_in_place;
            if (cf_exec_run(ctx, pl, NULL, &res[v]) != CF_OK)
              fail_msg("run: %s", cf_context_errmsg(ctx));
            cf_plan_destroy(pl);
          }
          assert_true(in_place[0] > 0);
          assert_int_equal(in_place[1], 0);
          for (int o = 0; o < res[0].ranks * res[0].n_outputs; o++) {
            const cf_tensor *t0 = &res[0].outputs[o], *t1 = &res[1].outputs[o];
            assert_int_equal(t0->count, t1->count);
            if (memcmp(t0->data, t1->data, (size_t)t0->count * (size_t)cf_dtype_size(t0->dtype)) !=
                0)
              fail_msg("graph %d %s algo %d%s: output '%s' rank %d differs bitwise in place", x,
                       p ? "-O0" : "fused", a, det ? " det" : "",
                       res[0].output_names[o % res[0].n_outputs], o / res[0].n_outputs);
          }
          cf_run_result_free(&res[0]);
          cf_run_result_free(&res[1]);
          cf_graph_destroy(g);
        }
}

/* Two products all-gathered in one bucket (test_plan_rsag_in_place). */
#define FUSED_AG                                                                                   \
  "<graph name='p' version='1' world_size='4'>"                                                    \
  " <node name='x' op='Input' dtype='bfloat16' shape='300,64'/>"                                   \
  " <node name='p1' op='Mul'><input ref='x'/><input ref='x'/></node>"                              \
  " <node name='p2' op='Add'><input ref='x'/><input ref='x'/></node>"                              \
  " <node name='ag1' op='AllGather' layout='concat' fusion='2' fusion_id='1'><input "              \
  "ref='p1'/></node>"                                                                              \
  " <node name='ag2' op='AllGather' layout='concat' fusion='2' fusion_id='1'><input "              \
  "ref='p2'/></node>"

/* ReduceScatter/AllGather in place (plan.c): which of them go in place, on
 * small graphs of 4 ranks, plain and fused; each runs bitwise like its out-of-place
 * plan (three iterations after a warmup return the first's outputs), with
 * a peak no higher. */
static void test_plan_rsag_in_place(void **state) {
  (void)state;
  static const struct {
    const char *what, *xml;
    const char *coll; /* the collective asked about (a prefix: a bucket's name is the combiner's) */
    bool in_place;
  } cases[] = {
      {"an AllGather of a product nothing else reads: in place",
       "<graph name='p' version='1' world_size='4'>"
       " <node name='x' op='Input' dtype='float32' shape='1000'/>"
       " <node name='p' op='Mul'><input ref='x'/><input ref='x'/></node>"
       " <node name='ag' op='AllGather' layout='concat'><input ref='p'/></node>"
       " <node name='y' op='Output'><input ref='ag'/></node></graph>",
       "ag", true},
      {"an AllGather whose input is read after it: out of place",
       "<graph name='p' version='1' world_size='4'>"
       " <node name='x' op='Input' dtype='float32' shape='1000'/>"
       " <node name='p' op='Mul'><input ref='x'/><input ref='x'/></node>"
       " <node name='ag' op='AllGather' layout='concat'><input ref='p'/></node>"
       " <node name='q' op='Add'><input ref='p'/><input ref='x'/></node>"
       " <node name='y' op='Output'><input ref='ag'/></node>"
       " <node name='z' op='Output'><input ref='q'/></node></graph>",
       "ag", false},
      {"an AllGather over a group of 2 of the 4 ranks: out of place",
       "<graph name='p' version='1' world_size='4'>"
       " <group name='pair' ranks='3,1'/>"
       " <node name='x' op='Input' dtype='float32' shape='1000'/>"
       " <node name='p' op='Mul'><input ref='x'/><input ref='x'/></node>"
       " <node name='ag' op='AllGather' layout='concat' group='pair'><input ref='p'/></node>"
       " <node name='y' op='Output'><input ref='ag'/></node></graph>",
       "ag", false},
      {"an AllGather over partitioned groups that cover every rank: in place",
       "<graph name='p' version='1' world_size='4'>"
       " <group name='dp' ranks='0,2|3,1'/>"
       " <node name='x' op='Input' dtype='int32' shape='1000'/>"
       " <node name='p' op='Mul'><input ref='x'/><input ref='x'/></node>"
       " <node name='ag' op='AllGather' layout='concat' group='dp'><input ref='p'/></node>"
       " <node name='y' op='Output'><input ref='ag'/></node></graph>",
       "ag", true},
      {"a ReduceScatter of an Input: in place",
       "<graph name='p' version='1' world_size='4'>"
       " <node name='g' op='Input' dtype='bfloat16' shape='512,1024'/>"
       " <node name='rs' op='ReduceScatter' reduction='mean'><input ref='g'/></node>"
       " <node name='y' op='Output'><input ref='rs'/></node></graph>",
       "rs", true},
      {"a ReduceScatter of an Input an Output reads: out of place",
       "<graph name='p' version='1' world_size='4'>"
       " <node name='g' op='Input' dtype='float32' shape='4000'/>"
       " <node name='rs' op='ReduceScatter' reduction='sum'><input ref='g'/></node>"
       " <node name='y' op='Output'><input ref='rs'/></node>"
       " <node name='z' op='Output'><input ref='g'/></node></graph>",
       "rs", false},
      {"a fused ReduceScatter of two Inputs: in place, each member's output its block of its input",
       "<graph name='p' version='1' world_size='4'>"
       " <node name='g1' op='Input' dtype='float32' shape='1000,256'/>"
       " <node name='g2' op='Input' dtype='float32' shape='36,3'/>"
       " <node name='rs1' op='ReduceScatter' reduction='sum' fusion='2' fusion_id='1'><input "
       "ref='g1'/></node>"
       " <node name='rs2' op='ReduceScatter' reduction='sum' fusion='2' fusion_id='1'><input "
       "ref='g2'/></node>"
       " <node name='y1' op='Output'><input ref='rs1'/></node>"
       " <node name='y2' op='Output'><input ref='rs2'/></node></graph>",
       "reducescatter", true},
      {"a fused AllGather of two products: in place, each member's input its block of its output",
       FUSED_AG " <node name='y1' op='Output'><input ref='ag1'/></node>"
                " <node name='y2' op='Output'><input ref='ag2'/></node></graph>",
       "allgather", true},
      {"a fused AllGather with one member read after it: out of place",
       FUSED_AG " <node name='q' op='Add'><input ref='ag2'/><input ref='ag1'/></node>"
                " <node name='r' op='Mul'><input ref='p2'/><input ref='x'/></node>"
                " <node name='y1' op='Output'><input ref='q'/></node>"
                " <node name='y2' op='Output'><input ref='r'/></node></graph>",
       "allgather", false},
      {"a ReduceScatter whose input is read after it: out of place",
       "<graph name='p' version='1' world_size='4'>"
       " <node name='a' op='Input' dtype='float32' shape='4000'/>"
       " <node name='s' op='Add'><input ref='a'/><input ref='a'/></node>"
       " <node name='rs' op='ReduceScatter' reduction='sum'><input ref='s'/></node>"
       " <node name='t' op='Mul'><input ref='rs'/><input ref='rs'/></node>"
       " <node name='u' op='Add'><input ref='s'/><input ref='a'/></node>"
       " <node name='y' op='Output'><input ref='t'/></node>"
       " <node name='z' op='Output'><input ref='u'/></node></graph>",
       "rs", false},
      {"a small ReduceScatter: out of place (its piece of scratch is as big as its output)",
       "<graph name='p' version='1' world_size='4'>"
       " <node name='g' op='Input' dtype='float32' shape='4000'/>"
       " <node name='rs' op='ReduceScatter' reduction='sum'><input ref='g'/></node>"
       " <node name='y' op='Output'><input ref='rs'/></node></graph>",
       "rs", false},
      {"a ReduceScatter whose output outlives big tensors made after it: out of place (in place "
       "would keep its whole input as long)",
       "<graph name='p' version='1' world_size='4'>"
       " <node name='a' op='Input' dtype='float32' shape='1024,256'/>"
       " <node name='s' op='Add'><input ref='a'/><input ref='a'/></node>"
       " <node name='rs' op='ReduceScatter' reduction='sum'><input ref='s'/></node>"
       " <node name='ag' op='AllGather' layout='concat'><input ref='rs'/></node>"
       " <node name='u' op='Add'><input ref='ag'/><input ref='a'/></node>"
       " <node name='y' op='Output'><input ref='rs'/></node>"
       " <node name='z' op='Output'><input ref='u'/></node></graph>",
       "rs", false},
  };
  for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
    cf_graph *g = compile_graph(cases[k].xml, cf_pipeline_default, NULL);
    cf_run_result res[2];
    int64_t peak[2];
    for (int v = 0; v < 2; v++) {
      cf_run_options opt = {
          .seed = 9, .iters = v ? 1 : 3, .warmup = v ? 0 : 1, .timeout_s = 30, .out_of_place = v};
      cf_plan *pl = NULL;
      if (cf_plan_build(ctx, g, &opt, &pl) != CF_OK) fail_msg("plan: %s", cf_context_errmsg(ctx));
      peak[v] = cf_plan_peak_bytes(pl);
      int asked = 0;
      for (int c = 0; c < pl->n_colls; c++) {
        const cf_node *n = &g->nodes[pl->colls[c].node];
        if (v || strncmp(n->name, cases[k].coll, strlen(cases[k].coll)) != 0) continue;
        asked++;
        if (pl->colls[c].desc.in_place != cases[k].in_place)
          fail_msg("%s: the plan has it %s", cases[k].what,
                   pl->colls[c].desc.in_place ? "in place" : "out of place");
        if (!strcmp(cases[k].coll, "allgather") || !strcmp(cases[k].coll, "reducescatter"))
          assert_true(n->n_in > 1); /* the bucket */
      }
      if (!v && asked != 1)
        fail_msg("%s: %d collectives named %s*", cases[k].what, asked, cases[k].coll);
      if (cf_exec_run(ctx, pl, NULL, &res[v]) != CF_OK) fail_msg("run: %s", cf_context_errmsg(ctx));
      cf_plan_destroy(pl);
    }
    if (cases[k].in_place ? peak[0] >= peak[1] : peak[0] != peak[1])
      fail_msg("%s: peak %lld in place, %lld out of place", cases[k].what, (long long)peak[0],
               (long long)peak[1]);
    for (int o = 0; o < res[0].ranks * res[0].n_outputs; o++) {
      const cf_tensor *t0 = &res[0].outputs[o], *t1 = &res[1].outputs[o];
      assert_int_equal(t0->count, t1->count);
      if (memcmp(t0->data, t1->data, (size_t)t0->count * (size_t)cf_dtype_size(t0->dtype)) != 0)
        fail_msg("%s: output '%s' rank %d differs bitwise from out of place", cases[k].what,
                 res[0].output_names[o % res[0].n_outputs], o / res[0].n_outputs);
    }
    cf_run_result_free(&res[0]);
    cf_run_result_free(&res[1]);
    cf_graph_destroy(g);
  }
}

/* A caller that lends its Inputs (the C API) keeps a plain AllReduce of an
 * Input out of place, the Input and the Output bound to its buffers; the
 * buckets still reduce in place. */
static void test_plan_lent_inputs(void **state) {
  (void)state;
  for (int p = 0; p < 2; p++) {
    cf_graph *g = compile_graph(grads, p ? cf_pipeline_O0 : cf_pipeline_default, NULL);
    cf_run_options opt = {.iters = 1, .timeout_s = 30, .lent_inputs = true};
    cf_plan *pl = NULL;
    if (cf_plan_build(ctx, g, &opt, &pl) != CF_OK) fail_msg("plan: %s", cf_context_errmsg(ctx));
    int plain = 0, bound = 0;
    for (int c = 0; c < pl->n_colls; c++) {
      const cf_node *n = &g->nodes[pl->colls[c].node];
      if (n->n_in != 1 || g->nodes[n->in[0].node].op != CF_OP_INPUT) {
        assert_true(pl->colls[c].desc.in_place);
        continue;
      }
      plain++;
      assert_false(pl->colls[c].desc.in_place);
      bound += cf_plan_binds(pl, n->in[0].node);
    }
    assert_int_equal(bound, plain);
    if (p) assert_true(plain > 0);
    cf_plan_destroy(pl);
    cf_graph_destroy(g);
  }
}

static void test_plan_peak_memory(void **state) {
  (void)state;
  const char *const *xmls = plan_graphs;
  for (int x = 0; x < 2; x++) {
    int64_t peak[2];
    int64_t biggest = 0, apart = 0;
    for (int p = 0; p < 2; p++) {
      cf_graph *g = compile_graph(xmls[x], p ? cf_pipeline_O0 : cf_pipeline_default, NULL);
      cf_run_options opt = {.iters = 1, .timeout_s = 30};
      cf_plan *pl = NULL;
      if (cf_plan_build(ctx, g, &opt, &pl) != CF_OK) fail_msg("plan: %s", cf_context_errmsg(ctx));
      peak[p] = cf_plan_peak_bytes(pl);
      assert_true(peak[p] > 0);
      for (int c = 0; c < pl->n_colls && !p; c++) {
        int64_t b = pl->colls[c].desc.count * cf_dtype_size(pl->colls[c].desc.dtype);
        if (b > biggest) biggest = b;
        /* a bucket with one member read after it stays out of place, where
         * the unfused plan reduces its other members in place */
        if (!pl->colls[c].desc.in_place) apart += b;
      }
      cf_plan_destroy(pl);
      cf_graph_destroy(g);
    }
    if (peak[0] > peak[1] + biggest + apart)
      fail_msg("graph %d: fused plan peak %lld > unfused %lld + largest bucket %lld + out of place %lld", x,
               (long long)peak[0], (long long)peak[1], (long long)biggest, (long long)apart);
  }
}

/* A backward-pass-like chain: layer i's gradient g_i = h_i @ v_i goes to a
 * fused AllReduce, the next activation h_{i+1} = h_i @ w_i feeds the next
 * layer. A bucket STARTs right after its last member is produced, before
 * the compute that does not feed it (the layers after), and WAITs no
 * earlier than its first consumer that computes (Outputs: after all the
 * compute); the run matches the float64 reference. */
static void test_plan_starts_early(void **state) {
  (void)state;
  enum { L = 6 };
  char xml[4096];
  int len = snprintf(xml, sizeof xml, "<graph name=\"chain\" version=\"1\" world_size=\"4\">\n"
                                      "<node name=\"h0\" op=\"Input\" dtype=\"float32\" shape=\"8,8\"/>\n");
  for (int i = 0; i < L; i++)
    len += snprintf(xml + len, sizeof xml - (size_t)len,
                    "<node name=\"w%d\" op=\"Input\" dtype=\"float32\" shape=\"8,8\"/>"
                    "<node name=\"v%d\" op=\"Input\" dtype=\"float32\" shape=\"8,8\"/>"
                    "<node name=\"g%d\" op=\"MatMul\"><input ref=\"h%d\"/><input ref=\"v%d\"/></node>"
                    "<node name=\"ar%d\" op=\"AllReduce\" reduction=\"sum\" fusion=\"1\"><input ref=\"g%d\"/></node>"
                    "<node name=\"o%d\" op=\"Output\"><input ref=\"ar%d\"/></node>"
                    "<node name=\"h%d\" op=\"MatMul\"><input ref=\"h%d\"/><input ref=\"w%d\"/></node>\n",
                    i, i, i, i, i, i, i, i, i, i + 1, i, i);
  snprintf(xml + len, sizeof xml - (size_t)len,
           "<node name=\"out\" op=\"Output\"><input ref=\"h%d\"/></node></graph>\n", L);
  cf_graph *g = compile_graph(xml, cf_pipeline_default, "bytes:512");
  cf_run_options opt = {.seed = 3, .iters = 1, .timeout_s = 30, .deterministic = true};
  cf_plan *pl = NULL;
  if (cf_plan_build(ctx, g, &opt, &pl) != CF_OK) fail_msg("plan: %s", cf_context_errmsg(ctx));
  assert_int_equal(pl->n_colls, 3);
  int overlapped = 0;
  for (int s = 0; s < pl->n_steps; s++) {
    if (pl->steps[s].kind != CF_STEP_START) continue;
    const cf_node *bucket = &g->nodes[pl->colls[pl->steps[s].coll].node];
    /* the compute just before the START produces one of its members */
    int k = s - 1;
    while (k >= 0 && pl->steps[k].kind != CF_STEP_COMPUTE) k--;
    assert_true(k >= 0);
    bool feeds = false;
    for (int j = 0; j < bucket->n_in; j++) feeds |= bucket->in[j].node == pl->steps[k].node;
    if (!feeds)
      fail_msg("'%s' starts after '%s', which does not feed it", bucket->name, g->nodes[pl->steps[k].node].name);
    /* and the compute between its START and its WAIT does not */
    for (k = s + 1; k < pl->n_steps && !(pl->steps[k].kind == CF_STEP_WAIT && pl->steps[k].coll == pl->steps[s].coll);
         k++)
      if (pl->steps[k].kind == CF_STEP_COMPUTE) {
        overlapped++;
        for (int j = 0; j < bucket->n_in; j++) assert_int_not_equal(bucket->in[j].node, pl->steps[k].node);
      }
    assert_true(k < pl->n_steps);
  }
  /* every bucket but the last has the next layers' MatMuls to overlap (the
   * last one: h_L) */
  assert_true(overlapped >= 2 * (L - 2) + 1);
  cf_plan_destroy(pl);
  cf_run_result res;
  if (run_plan(g, &opt, &res, NULL) != CF_OK) fail_msg("run: %s", cf_context_errmsg(ctx));
  verify_run(xml, &res, 3, "chain");
  cf_run_result_free(&res);
  cf_graph_destroy(g);
}

typedef struct mutation {
  int rank, coll;
  mfield field;
} mutation;

static void mutate(void *user, int rank, cf_coll_desc *d, int index) {
  const mutation *m = user;
  if (rank != m->rank || index != m->coll) return;
  switch (m->field) {
  case M_COUNT: d->count *= 2; break;
  case M_DTYPE: d->dtype = d->dtype == CF_DT_FLOAT32 ? CF_DT_FLOAT64 : CF_DT_FLOAT32; break;
  case M_RED: d->red = d->red == CF_RED_SUM ? CF_RED_MAX : CF_RED_SUM; break;
  case M_ROOT: d->root = (d->root + 1) % 2; break;
  case M_DIMS: d->root ^= 1; break;
  case M_PAIRS: d->layout ^= 1; break;
  }
}

static void test_plan_hooks(void **state) {
  (void)state;
  cf_graph *g = compile_graph(grads, cf_pipeline_O0, NULL);
  static const char *what[] = {"count is", "dtype is", "reduction is"};
  for (int f = M_COUNT; f <= M_RED; f++)
    for (int coll = 0; coll < 16; coll += 5) {
      mutation m = {.rank = 2, .coll = coll, .field = (mfield)f};
      cf_faults faults = {.mutate = mutate, .user = &m};
      cf_run_options opt = {.iters = 2, .timeout_s = FAST_TIMEOUT_S};
      cf_run_result res;
      double t0 = cf_now();
      cf_status st = run_faulty(g, &opt, &faults, &res);
      double dt = cf_now() - t0;
      const char *msg = cf_context_errmsg(ctx);
      if (st != CF_ERR_RUNTIME) fail_msg("mutated %s of coll %d: status %d (%s)", what[f], coll, st, msg);
      if (!strstr(msg, "cross-rank mismatch") || !strstr(msg, what[f]) || !strstr(msg, "rank 2"))
        fail_msg("mutated %s of coll %d: message '%s'", what[f], coll, msg);
      if (dt > WELL_BEFORE_S) fail_msg("mutated %s: took %.2f s (a timeout, not a mismatch)", what[f], dt);
      assert_null(res.outputs);
    }
  /* mode 1: rank 3 fails loudly, everyone stops at once; mode 2: rank 1
   * vanishes, the others notice by the 2 s timeout */
  for (int mode = 1; mode <= 2; mode++)
    for (int step = 0; step < 3; step++) {
      int rank = mode == 1 ? 3 : 1;
      cf_faults f = {.fail_mode = mode, .fail_rank = rank, .fail_step = step};
      cf_run_options opt = {.iters = 1, .timeout_s = mode == 1 ? FAST_TIMEOUT_S : 2};
      cf_run_result res;
      double t0 = cf_now();
      ASSERT_ERR(run_faulty(g, &opt, &f, &res), CF_ERR_RUNTIME, mode == 1 ? "failed at step" : "timed out");
      double dt = cf_now() - t0;
      char rk[16];
      snprintf(rk, sizeof rk, mode == 1 ? "rank %d" : "%d", rank);
      if (!strstr(cf_context_errmsg(ctx), rk))
        fail_msg("mode %d: message '%s' does not name rank %d", mode, cf_context_errmsg(ctx), rank);
      if (mode == 1 ? dt > WELL_BEFORE_S : dt < 1.5 || dt > GIVE_UP_S)
        fail_msg("mode %d step %d: the run took %.2f s with a %g s timeout", mode, step, dt,
                 opt.timeout_s);
    }
  cf_graph_destroy(g);

  /* every step of the schedule can fail, also the WAIT of a collective the
   * rank thread runs inline (START + WAIT, here steps 0 and 1) */
  static const char *one =
      "<graph name='one' version='1' world_size='3'>"
      " <node name='x' op='Input' dtype='float32' shape='10'/>"
      " <node name='r' op='Reduce' reduction='sum' root='1'><input ref='x'/></node>"
      " <node name='o' op='Output'><input ref='r'/></node>"
      "</graph>";
  g = compile_graph(one, cf_pipeline_default, NULL);
  for (int step = 0; step < 2; step++) {
    cf_faults f = {.fail_mode = 1, .fail_rank = 2, .fail_step = step};
    cf_run_options opt = {.iters = 1, .timeout_s = 30};
    cf_run_result res;
    cf_status st = run_faulty(g, &opt, &f, &res);
    if (st == CF_OK) {
      cf_run_result_free(&res);
      fail_msg("fail_step %d (of START, WAIT): the injected failure never happened", step);
    }
    ASSERT_ERR(st, CF_ERR_RUNTIME, "rank 2 failed at step");
  }
  cf_graph_destroy(g);
}

/* A rank count that is not the graph's world_size is refused; a graph that
 * arrives already fused (FusedAllReduce without offsets, a
 * MatmulReduceScatter) runs and matches the reference. */
static void test_plan_refuses_and_prefused(void **state) {
  (void)state;
  static const char *mmrs =
      "<graph name='u' version='1' world_size='2'>"
      " <node name='x' op='Input' dtype='float32' shape='4,8'/>"
      " <node name='w' op='Input' dtype='float32' shape='8,2'/>"
      " <node name='mm_rs' op='MatmulReduceScatter' world_size='2' reduction='sum' members='mm,rs'>"
      "  <input ref='x'/><input ref='w'/></node>"
      " <node name='y' op='Output'><input ref='mm_rs'/></node>"
      "</graph>";
  cf_graph *g = compile_graph(mmrs, cf_pipeline_O0, NULL);
  cf_run_options opt = {.iters = 1, .timeout_s = 30, .ranks = 3};
  cf_plan *p = NULL;
  ASSERT_ERR(cf_plan_build(ctx, g, &opt, &p), CF_ERR_USAGE, "world_size 2");
  assert_null(p);
  opt.ranks = 0;
  cf_run_result r0;
  if (run_plan(g, &opt, &r0, NULL) != CF_OK) fail_msg("MatmulReduceScatter: %s", cf_context_errmsg(ctx));
  verify_run(mmrs, &r0, 0, "MatmulReduceScatter");
  cf_run_result_free(&r0);
  cf_graph_destroy(g);

  static const char *prefused =
      "<graph name='f' version='1' world_size='3'>"
      " <node name='q' op='Input' dtype='float32' shape='5,3'/>"
      " <node name='k' op='Input' dtype='float32' shape='17'/>"
      " <node name='v' op='Input' dtype='float32' shape='1'/>"
      " <node name='b0' op='FusedAllReduce' reduction='mean' fusion='2' fusion_id='1' members='ar_q,ar_k,ar_v'>"
      "  <input ref='q'/><input ref='k'/><input ref='v'/></node>"
      " <node name='o_q' op='Output'><input ref='b0' port='0'/></node>"
      " <node name='o_k' op='Output'><input ref='b0' port='1'/></node>"
      " <node name='o_v' op='Output'><input ref='b0' port='2'/></node>"
      "</graph>";
  for (int pipe = 0; pipe < 2; pipe++) {
    g = compile_graph(prefused, pipe ? cf_pipeline_O0 : cf_pipeline_default, NULL);
    cf_run_options o2 = {.iters = 2, .timeout_s = 30, .seed = 3};
    cf_run_result res;
    if (run_plan(g, &o2, &res, NULL) != CF_OK) fail_msg("prefused: %s", cf_context_errmsg(ctx));
    verify_run(prefused, &res, 3, "prefused");
    cf_run_result_free(&res);
    cf_graph_destroy(g);
  }
}

/* A graph whose collectives run over partitioned group g (ranks, parts
 * split by '|'): AllReduce buckets of several dtypes and reductions, fused
 * AllGathers and ReduceScatters, MatMul -> ReduceScatter (fused into a
 * MatmulReduceScatter by the default pipeline), Reduce and Broadcast with a
 * root in each part, and one world AllReduce between them. Dim0s of 12 and
 * 24 divide by part sizes 2, 3 and 4. */
static char *partitioned_xml(int n_ranks, const char *ranks) {
  char *s = malloc(1 << 13);
  assert_non_null(s);
  snprintf(s, 1 << 13,
           "<graph name='parts' version='1' world_size='%d'>"
           " <group name='g' ranks='%s'/>"
           " <node name='a' op='Input' dtype='float32' shape='37'/>"
           " <node name='b' op='Input' dtype='float32' shape='5,6'/>"
           " <node name='c' op='Input' dtype='float16' shape='40'/>"
           " <node name='d' op='Input' dtype='bfloat16' shape='16'/>"
           " <node name='e' op='Input' dtype='int32' shape='9'/>"
           " <node name='x1' op='Input' dtype='float32' shape='12,16'/>"
           " <node name='w' op='Input' dtype='float32' shape='16,10'/>"
           " <node name='r1' op='Input' dtype='float32' shape='12,3'/>"
           " <node name='r2' op='Input' dtype='float32' shape='24'/>"
           " <node name='ar_a' op='AllReduce' reduction='sum' group='g'><input ref='a'/></node>"
           " <node name='ar_b' op='AllReduce' reduction='mean' group='g'><input ref='b'/></node>"
           " <node name='ar_a2' op='AllReduce' reduction='max' group='g'><input ref='a'/></node>"
           " <node name='ar_c' op='AllReduce' reduction='sum' group='g'><input ref='c'/></node>"
           " <node name='ar_c2' op='AllReduce' reduction='sum' group='g'><input ref='c'/></node>"
           " <node name='ar_d' op='AllReduce' reduction='min' group='g' fusion='2' fusion_id='4'><input ref='d'/></node>"
           " <node name='ar_e' op='AllReduce' reduction='sum' group='g' fusion='0'><input ref='e'/></node>"
           " <node name='ar_w' op='AllReduce' reduction='sum'><input ref='ar_a'/></node>"
           " <node name='ag1' op='AllGather' layout='concat' group='g' fusion='2' fusion_id='1'><input ref='a'/></node>"
           " <node name='ag2' op='AllGather' layout='concat' group='g' fusion='2' fusion_id='1'><input ref='b'/></node>"
           " <node name='ag3' op='AllGather' layout='stack' group='g'><input ref='d'/></node>"
           " <node name='rs1' op='ReduceScatter' reduction='sum' group='g' fusion='2' fusion_id='2'><input ref='r1'/></node>"
           " <node name='rs2' op='ReduceScatter' reduction='sum' group='g' fusion='2' fusion_id='2'><input ref='r2'/></node>"
           " <node name='mm' op='MatMul'><input ref='x1'/><input ref='w'/></node>"
           " <node name='rs_mm' op='ReduceScatter' reduction='sum' group='g'><input ref='mm'/></node>"
           " <node name='red' op='Reduce' reduction='sum' root='1' group='g'><input ref='b'/></node>"
           " <node name='bc' op='Broadcast' root='1' group='g'><input ref='c'/></node>"
           " <node name='o_a' op='Output'><input ref='ar_a'/></node>"
           " <node name='o_b' op='Output'><input ref='ar_b'/></node>"
           " <node name='o_a2' op='Output'><input ref='ar_a2'/></node>"
           " <node name='o_c' op='Output'><input ref='ar_c'/></node>"
           " <node name='o_c2' op='Output'><input ref='ar_c2'/></node>"
           " <node name='o_d' op='Output'><input ref='ar_d'/></node>"
           " <node name='o_e' op='Output'><input ref='ar_e'/></node>"
           " <node name='o_w' op='Output'><input ref='ar_w'/></node>"
           " <node name='o_ag1' op='Output'><input ref='ag1'/></node>"
           " <node name='o_ag2' op='Output'><input ref='ag2'/></node>"
           " <node name='o_ag3' op='Output'><input ref='ag3'/></node>"
           " <node name='o_rs1' op='Output'><input ref='rs1'/></node>"
           " <node name='o_rs2' op='Output'><input ref='rs2'/></node>"
           " <node name='o_rsmm' op='Output'><input ref='rs_mm'/></node>"
           " <node name='o_red' op='Output'><input ref='red'/></node>"
           " <node name='o_bc' op='Output'><input ref='bc'/></node>"
           "</graph>",
           n_ranks, ranks);
  return s;
}

/* Collectives over a partitioned group: every rank runs with its own part
 * (fused or not, every algorithm), as the float64 reference says; and,
 * independently of the reference, an int32 sum is exactly the sum over the
 * rank's part. Ranks outside every part skip the group's collectives. */
static void test_plan_partitioned_groups(void **state) {
  (void)state;
  static const struct { int world; const char *ranks; } cfgs[] = {
      {4, "0,1|2,3"}, {4, "0,2|1,3"}, {8, "0,1,2,3|4,5,6,7"}, {8, "0,4|1,5|2,6|3,7"},
      {6, "0,2,4|1,3,5"}, {6, "5,1|2,0"}};
  static const cf_algo_req algos[] = {{.policy = CF_POLICY_AUTO},
                                      FORCED(CF_ALGO_DIRECT),
                                      FORCED(CF_ALGO_RD),
                                      FORCED(CF_ALGO_RING),
                                      FORCED(CF_ALGO_RSAG)};
  for (size_t k = 0; k < sizeof cfgs / sizeof cfgs[0]; k++) {
    char *xml = partitioned_xml(cfgs[k].world, cfgs[k].ranks);
    for (int p = 0; p < 2; p++)
      for (size_t a = 0; a < sizeof algos / sizeof algos[0]; a++) {
        cf_graph *g = compile_graph(xml, p ? cf_pipeline_O0 : cf_pipeline_default, NULL);
        if (!p) { /* the passes fuse over the partitioned group as over any other */
          assert_true(count_op(g, CF_OP_FUSEDALLREDUCE) > 0);
          assert_int_equal(count_op(g, CF_OP_FUSEDALLGATHER), 1);
          assert_int_equal(count_op(g, CF_OP_FUSEDREDUCESCATTER), 1);
          assert_int_equal(count_op(g, CF_OP_MATMULREDUCESCATTER), 1);
          for (int i = 0; i < g->n_nodes; i++)
            if (g->nodes[i].op == CF_OP_MATMULREDUCESCATTER)
              assert_string_equal(cf_node_group(&g->nodes[i]), "g");
        }
        cf_run_options opt = {.seed = 11, .iters = 1, .timeout_s = 30, .algo = algos[a],
                              .deterministic = a % 2 == 1};
        cf_run_result res;
        char what[128];
        snprintf(what, sizeof what, "%d ranks, group %s, %s, algo %s", cfgs[k].world, cfgs[k].ranks,
                 p ? "-O0" : "fused", cf_algo_req_name(algos[a]));
        if (run_plan(g, &opt, &res, NULL) != CF_OK) fail_msg("%s: run: %s", what, cf_context_errmsg(ctx));
        assert_int_equal(res.ranks, cfgs[k].world);
        verify_run(xml, &res, 11, what);
        /* o_e: each rank's sum is over its own part, exactly */
        const cf_group *gr = cf_graph_group(g, "g");
        int oe = -1;
        for (int j = 0; j < res.n_outputs; j++)
          if (!strcmp(res.output_names[j], "o_e")) oe = j;
        assert_true(oe >= 0);
        const cf_node *e = &g->nodes[cf_graph_find(g, "e")];
        for (int r = 0; r < res.ranks; r++) {
          const int *part = cf_group_part_of(gr, r, NULL);
          if (!part) continue; /* outside every part: undefined */
          int32_t want[9] = {0}, v[9];
          for (int m = 0; m < gr->n_ranks; m++) {
            cf_fill_node(e, v, CF_DT_INT32, 9, 11, part[m]);
            for (int i = 0; i < 9; i++) want[i] += v[i];
          }
          if (memcmp(res.outputs[r * res.n_outputs + oe].data, want, sizeof want) != 0)
            fail_msg("%s: rank %d's int32 sum is not the sum over its part", what, r);
        }
        cf_run_result_free(&res);
        cf_graph_destroy(g);
      }
    free(xml);
  }
}

/* The cases by subject: ctest runs each subject as a test of its own
 * (test_executor/SUBJECT, tests/CMakeLists.txt), so they run side by side;
 * no argument runs them all. */
#define T(f) cmocka_unit_test(f)
static const struct CMUnitTest s_streams[] = {
    T(test_copy_stream), T(test_stream_min), T(test_llc_sysfs), T(test_bind), T(test_select_measured), T(test_select_pool),
    T(test_cpu_pages),
};
static const struct CMUnitTest s_allreduce[] = {
    T(test_allreduce_algos_dtypes), T(test_allreduce_large), T(test_allreduce_reductions),
    T(test_allreduce_many_ranks),   T(test_allreduce_int_mean_no_wrap),
    T(test_allreduce_deterministic), T(test_allreduce_unsigned_bool),
};
static const struct CMUnitTest s_in_place[] = {T(test_allreduce_in_place)};
static const struct CMUnitTest s_rsag_in_place[] = {T(test_rsag_in_place)};
static const struct CMUnitTest s_in_place_large[] = {T(test_allreduce_in_place_large)};
static const struct CMUnitTest s_segments[] = {T(test_allreduce_rsag_segments)};
static const struct CMUnitTest s_segments_off[] = {T(test_allreduce_rsag_segments_off)};
static const struct CMUnitTest s_collectives[] = {
    T(test_reduce_scatter), T(test_all_gather),   T(test_reduce_root),
    T(test_broadcast),      T(test_group_subset), T(test_sequences),
    T(test_alltoall_bucket),
};
static const struct CMUnitTest s_failures[] = {
    T(test_mismatch_allreduce), T(test_mismatch_other), T(test_mismatch_root),
    T(test_mismatch_alltoall_permute), T(test_vanished_rank),
};
static const struct CMUnitTest s_plan[] = {
    T(test_plan_matches_reference), T(test_plan_deterministic_bitwise), T(test_plan_in_place),
    T(test_plan_rsag_in_place),     T(test_plan_lent_inputs),           T(test_plan_peak_memory),
    T(test_plan_starts_early),
    T(test_plan_hooks),             T(test_plan_refuses_and_prefused),  T(test_plan_partitioned_groups),
    T(test_plan_control_order),
};
#undef T
#define SUBJECT(a) {#a, s_##a, sizeof s_##a / sizeof s_##a[0]}
static const struct {
  const char *name;
  const struct CMUnitTest *tests;
  size_t n;
} subjects[] = {SUBJECT(streams),        SUBJECT(allreduce),   SUBJECT(segments),
                SUBJECT(segments_off),   SUBJECT(in_place),    SUBJECT(rsag_in_place),
                SUBJECT(in_place_large), SUBJECT(collectives), SUBJECT(failures),
                SUBJECT(plan)};

int main(int argc, char **argv) {
  if (getenv("CF_TEST_FILTER")) cmocka_set_test_filter(getenv("CF_TEST_FILTER")); /* debugging one test */
  int rc = 0;
  bool found = false;
  for (size_t i = 0; i < sizeof subjects / sizeof subjects[0]; i++) {
    if (argc > 1 && strcmp(argv[1], subjects[i].name) != 0) continue;
    found = true;
    rc |= _cmocka_run_group_tests(subjects[i].name, subjects[i].tests, subjects[i].n, setup_all,
                                  teardown_all);
  }
  if (!found) {
    fprintf(stderr, "test_executor: no subject '%s' (streams, allreduce, segments, in_place, "
                    "in_place_large, collectives, failures, plan)\n", argv[1]);
    return 2;
  }
  return rc;
}
