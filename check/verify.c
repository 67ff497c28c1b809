/* verify.c - `run --verify`: every output of every rank against the float64
 * reference (reference.c).
 *
 * Floats pass when |got - val| <= rtol * mag, rtol by the output's dtype
 * (float32 1e-5, float16/bfloat16 1e-2, float64 1e-12) and mag the sum of
 * |terms| the reference carried, so the bound follows the conditioning of
 * the computation instead of the size of the result. An absolute floor
 * (the dtype's smallest subnormal, at least 1e-30) admits the rounding of a
 * result that lands among float16's subnormals, and a result of exact
 * zeros. NaN must appear exactly where the reference has NaN, an infinity
 * must match exactly (or be the dtype overflowing a finite value beyond its
 * range); integers must match exactly. Values the reference marks undefined
 * (val, mag and ival all NULL: Reduce off the root, ranks outside a group)
 * are skipped.
 *
 * cf_verify_streamed checks the same way against a reference evaluated a
 * window of elements at a time (cf_reference_window): the first mismatch it
 * reports is the one cf_verify_outputs would (lowest rank, then output,
 * then index), found by keeping the least seen while the windows go by.
 * One thread per core takes every T-th window, each with its own context
 * and first mismatch; the least of them is reported, so the result does not
 * depend on the threads.
 */
#include "check.h"

#include <float.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

static double rtol_of(cf_dtype dt) {
  switch (dt) {
  case CF_DT_FLOAT16:
  case CF_DT_BFLOAT16: return 1e-2;
  case CF_DT_FLOAT32: return 1e-5;
  case CF_DT_FLOAT64: return 1e-12;
  default: return 0;
  }
}

static double floor_of(cf_dtype dt) { return dt == CF_DT_FLOAT16 ? 0x1p-24 : 1e-30; }

static double max_finite(cf_dtype dt) {
  switch (dt) {
  case CF_DT_FLOAT16: return 65504.0;
  case CF_DT_BFLOAT16: return 0x1.fep127;
  case CF_DT_FLOAT32: return FLT_MAX;
  default: return DBL_MAX;
  }
}

/* Does got match the reference element (e, m) of dtype dt? *err gets the
 * absolute error (0 for matching NaN/inf). */
static bool float_ok(cf_dtype dt, double got, double e, double m, double *err) {
  *err = 0;
  if (isnan(e) || isnan(got)) return isnan(e) && isnan(got);
  double tol = fmax(rtol_of(dt) * m, floor_of(dt));
  if (isinf(e)) return got == e;
  if (isinf(got)) /* the dtype overflowed where float64 did not */
    return signbit(got) == signbit(e) && fabs(e) + tol >= max_finite(dt);
  *err = fabs(got - e);
  return *err <= tol;
}

/* Whether t can hold a reference of dtype dt and count elements; else the
 * message in msg. */
static bool type_ok(const char *name, int rank, const cf_tensor *t, cf_dtype dt, int64_t count,
                    char *msg, size_t len) {
  if (t->dtype == dt && t->count == count && (count == 0 || t->data)) return true;
  snprintf(msg, len, "output '%s' rank %d: got %s with %lld elements, expected %s with %lld", name,
           rank, cf_dtype_name(t->dtype), (long long)t->count, cf_dtype_name(dt), (long long)count);
  return false;
}

/* Element `at` of t against element k of the reference v, counted in s;
 * false with the message in msg. */
static bool element_ok(const char *name, int rank, const cf_tensor *t, int64_t at,
                       const cf_ref_value *v, int64_t k, cf_verify_stats *s, char *msg,
                       size_t len) {
  s->checked++;
  if (v->ival) {
    int64_t gi = cf_load_i64(t->data, t->dtype, at), e = v->ival[k];
    if (gi == e) return true;
    double d = fabs((double)gi - (double)e);
    s->max_abs_err = fmax(s->max_abs_err, d);
    s->max_rel_err = fmax(s->max_rel_err, d / fmax(fabs((double)e), 1));
    if (cf_dtype_is_unsigned(t->dtype))
      snprintf(msg, len, "output '%s' rank %d index %lld: got %llu, expected %llu", name, rank,
               (long long)at, (unsigned long long)gi, (unsigned long long)e);
    else
      snprintf(msg, len, "output '%s' rank %d index %lld: got %lld, expected %lld", name, rank,
               (long long)at, (long long)gi, (long long)e);
    return false;
  }
  double gv = cf_load_f64(t->data, t->dtype, at), err;
  bool ok = float_ok(t->dtype, gv, v->val[k], v->mag[k], &err);
  s->max_abs_err = fmax(s->max_abs_err, err);
  s->max_rel_err = fmax(s->max_rel_err, err / fmax(v->mag[k], floor_of(t->dtype)));
  if (!ok)
    snprintf(msg, len, "output '%s' rank %d index %lld: got %.9g, expected %.9g", name, rank,
             (long long)at, gv, v->val[k]);
  return ok;
}

/* The arguments both verifiers take: n_outputs Output nodes on ranks > 0. */
static cf_status check_counts(cf_context *ctx, const cf_graph *g, int ranks, int n_outputs,
                              bool given) {
  int found = 0;
  for (int i = 0; i < g->n_nodes; i++)
    found += g->nodes[i].op == CF_OP_OUTPUT;
  if (found == n_outputs && ranks > 0 && (n_outputs == 0 || given)) return CF_OK;
  return cf_error(ctx, CF_ERR_USAGE, NULL, 0,
                  "verify: %d output%s on %d rank%s given, the graph has %d Output node%s",
                  n_outputs, cf_s(n_outputs), ranks, cf_s(ranks), found, cf_s(found));
}

cf_status cf_verify_outputs(cf_context *ctx, const cf_graph *g, const cf_tensor *got,
                            const cf_ref_value *ref, int ranks, int n_outputs,
                            cf_verify_stats *st) {
  cf_verify_stats s = {0, 0, 0};
  char msg[1024];
  cf_status status = check_counts(ctx, g, ranks, n_outputs, got && ref);
  if (status) goto fail;
  for (int rank = 0; rank < ranks; rank++) {
    int j = 0;
    for (int i = 0; i < g->n_nodes; i++) {
      const cf_node *n = &g->nodes[i];
      if (n->op != CF_OP_OUTPUT) continue;
      const cf_tensor *t = &got[(int64_t)rank * n_outputs + j];
      const cf_ref_value *v = &ref[(int64_t)rank * n_outputs + j];
      j++;
      if (!v->val && !v->ival) continue; /* undefined on this rank */
      bool ok = type_ok(n->name, rank, t, v->dtype, v->count, msg, sizeof msg);
      for (int64_t k = 0; ok && k < v->count; k++)
        ok = element_ok(n->name, rank, t, k, v, k, &s, msg, sizeof msg);
      if (!ok) {
        status = cf_error(ctx, CF_ERR_INVALID, NULL, 0, "%s", msg);
        goto fail;
      }
    }
  }
fail:
  if (st) *st = s;
  return status;
}

int cf_verify_opaque_outputs(const cf_graph *g, bool *dep, int n_outputs) {
  bool *tainted = calloc((size_t)g->n_nodes + 1, sizeof *tainted);
  if (!tainted) return -1;
  for (int t = 0; t < g->n_nodes; t++) { /* operands before readers */
    const cf_node *n = &g->nodes[g->topo[t]];
    bool d = n->op == CF_OP_OPAQUE;
    for (int k = 0; k < n->n_in && !d; k++) d = tainted[n->in[k].node];
    tainted[g->topo[t]] = d;
  }
  int j = 0, count = 0;
  for (int i = 0; i < g->n_nodes && j < n_outputs; i++) {
    if (g->nodes[i].op != CF_OP_OUTPUT) continue;
    count += dep[j++] = tainted[i];
  }
  free(tainted);
  return count;
}

/* ================= window by window ================= */

/* The first mismatch so far, by (rank, output, index); index -1: the type. */
typedef struct first_bad {
  bool any;
  int rank, j;
  int64_t index;
  char msg[1024];
} first_bad;

static bool before(const first_bad *f, int rank, int j, int64_t index) {
  if (!f->any) return true;
  if (rank != f->rank) return rank < f->rank;
  if (j != f->j) return j < f->j;
  return index < f->index;
}

static void note_bad(first_bad *f, int rank, int j, int64_t index, const char *msg) {
  if (!before(f, rank, j, index)) return;
  *f = (first_bad){.any = true, .rank = rank, .j = j, .index = index};
  snprintf(f->msg, sizeof f->msg, "%s", msg);
}

/* The largest element count of any value of g. */
static int64_t largest_value(const cf_graph *g) {
  int64_t most = 0, c;
  for (int i = 0; i < g->n_nodes; i++)
    for (int p = 0; p < g->nodes[i].n_out; p++)
      if (cf_shape_elements(&g->nodes[i].out[p].shape, &c) && c > most) most = c;
  return most;
}

/* Windows of `window` elements over values of at most `most`: at least one. */
static int64_t n_windows(int64_t most, int64_t window) {
  return most > window ? most / window + (most % window != 0) : 1;
}

/* The threads that check windows at once: one per core, at most 8. */
static int verify_threads(void) {
  long cores = sysconf(_SC_NPROCESSORS_ONLN);
  return cores < 1 ? 1 : cores > 8 ? 8 : (int)cores;
}

int64_t cf_verify_window(const cf_graph *g, int ranks, int64_t *bytes) {
  int64_t most = largest_value(g), w = 1, t = verify_threads();
  while (w < most && w <= INT64_MAX / 4 &&
         cf_reference_window_bytes(g, ranks, 2 * w) * t <= CF_VERIFY_WINDOW_BYTES)
    w *= 2;
  int64_t used = n_windows(most, w) < t ? n_windows(most, w) : t;
  if (bytes) *bytes = cf_reference_window_bytes(g, ranks, w) * used;
  return w;
}

/* element_ok over a float32 output from element lo on, while the elements
 * are finite and within tolerance (the common case, in a loop the compiler
 * vectorises); returns how many it checked, element_ok takes the rest. */
static int64_t float32_run(const cf_tensor *t, int64_t lo, const cf_ref_value *v,
                           cf_verify_stats *s) {
  if (v->ival || t->dtype != CF_DT_FLOAT32) return 0;
  const float *got = (const float *)t->data + lo;
  double rtol = rtol_of(CF_DT_FLOAT32), fl = floor_of(CF_DT_FLOAT32);
  double abs_err = s->max_abs_err, rel_err = s->max_rel_err;
  int64_t k = 0;
#if defined(__SSE2__)
  /* Blocks of two elements a step with no branch per element (the same
   * IEEE operations, so the same errors): a block with an element that is
   * not fine is left to the loop below, which stops at it. max_pd(a, b)
   * is a > b ? a : b, the loop's own selects. */
  enum { BLOCK = 256 };
  const __m128d vrtol = _mm_set1_pd(rtol), vfl = _mm_set1_pd(fl), sign = _mm_set1_pd(-0.0);
  for (; k + BLOCK <= v->count; k += BLOCK) {
    __m128d bad = _mm_setzero_pd(), amax = _mm_set1_pd(abs_err), rmax = _mm_set1_pd(rel_err);
    for (int64_t i = k; i < k + BLOCK; i += 2) {
      __m128d g = _mm_cvtps_pd(_mm_castsi128_ps(_mm_loadl_epi64((const __m128i *)(got + i))));
      __m128d e = _mm_loadu_pd(v->val + i), m = _mm_loadu_pd(v->mag + i);
      __m128d err = _mm_andnot_pd(sign, _mm_sub_pd(g, e));
      __m128d tol = _mm_max_pd(_mm_mul_pd(vrtol, m), vfl);
      bad = _mm_or_pd(bad, _mm_cmpnle_pd(err, tol)); /* !(err <= tol): NaN too */
      __m128d rel = _mm_div_pd(err, _mm_max_pd(m, vfl));
      amax = _mm_max_pd(err, amax);
      rmax = _mm_max_pd(rel, rmax);
    }
    if (_mm_movemask_pd(bad)) break;
    double a[2], r[2];
    _mm_storeu_pd(a, amax);
    _mm_storeu_pd(r, rmax);
    abs_err = a[0] > a[1] ? a[0] : a[1];
    rel_err = r[0] > r[1] ? r[0] : r[1];
  }
#endif
  for (; k < v->count; k++) {
    double e = v->val[k], m = v->mag[k], err = fabs((double)got[k] - e);
    double tol = rtol * m > fl ? rtol * m : fl;
    if (!(err <= tol)) break; /* NaN, infinity or a mismatch: element_ok says */
    double rel = err / (m > fl ? m : fl);
    abs_err = err > abs_err ? err : abs_err;
    rel_err = rel > rel_err ? rel : rel_err;
  }
  s->checked += k;
  s->max_abs_err = abs_err;
  s->max_rel_err = rel_err;
  return k;
}

/* One window's reference against got: every rank (or only) and output. */
static void check_window(const cf_graph *g, const cf_tensor *got, const cf_ref_value *ref,
                         int ranks, int n_outputs, int only, int64_t lo, cf_verify_stats *s,
                         first_bad *bad) {
  char msg[1024];
  for (int rank = 0; rank < ranks; rank++) {
    if ((only >= 0 && rank != only) || (bad->any && rank > bad->rank)) continue;
    for (int i = 0, j = -1; i < g->n_nodes; i++) {
      const cf_node *n = &g->nodes[i];
      if (n->op != CF_OP_OUTPUT) continue;
      j++;
      if (!before(bad, rank, j, lo)) break; /* nothing here comes first */
      const cf_tensor *t = &got[(int64_t)rank * n_outputs + j];
      const cf_ref_value *v = &ref[(int64_t)rank * n_outputs + j];
      if (!v->val && !v->ival) continue; /* undefined on this rank */
      const cf_value *whole = &g->nodes[n->in[0].node].out[n->in[0].port];
      int64_t count = 0;
      cf_shape_elements(&whole->shape, &count);
      if (lo == 0 && !type_ok(n->name, rank, t, v->dtype, count, msg, sizeof msg)) {
        note_bad(bad, rank, j, -1, msg);
        continue;
      }
      if (!type_ok(n->name, rank, t, v->dtype, count, msg, sizeof msg)) continue; /* noted */
      int64_t k = float32_run(t, lo, v, s);
      for (; k < v->count; k++)
        if (!element_ok(n->name, rank, t, lo + k, v, k, s, msg, sizeof msg)) {
          note_bad(bad, rank, j, lo + k, msg);
          break;
        }
    }
  }
}

/* One thread's share: windows t, t + T, t + 2T, ... */
typedef struct stream_job {
  const cf_graph *g;
  const cf_inputs *in;
  uint64_t seed;
  const cf_tensor *got;
  int ranks, n_outputs, only;
  int64_t window, most, first, step; /* windows first, first + step, ... */
  cf_context *ctx;                   /* the thread's own, for the reference's errors */
  cf_context *main;                  /* the caller's: each window done is a unit of its phase */
  cf_pulse pulse;                    /* the caller's cf_pulse_here: each window is a beat */
  cf_status status;
  int64_t failed_at; /* the window whose reference failed */
  cf_verify_stats s;
  first_bad bad;
} stream_job;

static void *stream_main(void *arg) {
  stream_job *j = arg;
  cf_pulse_here = j->pulse;
  int64_t n = n_windows(j->most, j->window);
  for (int64_t k = j->first; k < n; k += j->step) {
    int64_t lo = k * j->window;
    int64_t hi = j->most - lo > j->window ? lo + j->window : (j->most > lo ? j->most : lo + 1);
    cf_ref_value *ref = NULL;
    int nr = 0;
    j->status = cf_reference_window(j->ctx, j->g, j->in, j->seed, lo, hi, &ref, &nr);
    if (j->status) {
      j->failed_at = k;
      break;
    }
    check_window(j->g, j->got, ref, j->ranks, j->n_outputs, j->only, lo, &j->s, &j->bad);
    cf_ref_free(ref, nr * j->ranks);
    cf_phase_add(j->main, 1);
    /* nothing later comes before the first output of the first rank checked */
    if (j->bad.any && j->bad.rank == (j->only >= 0 ? j->only : 0) && j->bad.j == 0) break;
  }
  return NULL;
}

cf_status cf_verify_streamed(cf_context *ctx, const cf_graph *g, const cf_inputs *in, uint64_t seed,
                             const cf_tensor *got, int ranks, int n_outputs, int only,
                             int64_t window, cf_verify_stats *st) {
  cf_verify_stats s = {0, 0, 0};
  cf_status status = check_counts(ctx, g, ranks, n_outputs, got != NULL);
  if (!status && !cf_reference_streams(g))
    status = cf_error(ctx, CF_ERR_USAGE, NULL, 0,
                      "verify: the graph has ops that are not elementwise: it cannot be checked "
                      "window by window");
  if (!status && in && in->ranks != ranks)
    status = cf_error(ctx, CF_ERR_USAGE, NULL, 0, "verify: inputs for %d rank%s, %d checked",
                      in->ranks, cf_s(in->ranks), ranks);
  if (window <= 0 && !status) window = cf_verify_window(g, ranks, NULL);
  int64_t most = largest_value(g), n = status ? 0 : n_windows(most, window);
  int T = verify_threads() < n ? verify_threads() : (int)n;
  cf_inputs none = {.ranks = ranks};
  stream_job *jobs = T > 0 ? calloc((size_t)T, sizeof *jobs) : NULL;
  pthread_t th[8];
  bool started[8] = {false};
  if (!status && !jobs) status = cf_error(ctx, CF_ERR_NO_MEMORY, NULL, 0, "out of memory");
  for (int t = 0; t < T && !status; t++) {
    jobs[t] = (stream_job){.g = g,
                           .in = in ? in : &none,
                           .seed = seed,
                           .got = got,
                           .ranks = ranks,
                           .n_outputs = n_outputs,
                           .only = only,
                           .window = window,
                           .most = most,
                           .first = t,
                           .step = T,
                           .main = ctx,
                           .pulse = cf_pulse_here};
    if (cf_ctx_create(&jobs[t].ctx))
      status = cf_error(ctx, CF_ERR_NO_MEMORY, NULL, 0, "out of memory");
  }
  cf_phase_begin(ctx, "verify", n);
  for (int t = 1; t < T && !status; t++) /* t = 0 runs on this thread */
    started[t] = pthread_create(&th[t], NULL, stream_main, &jobs[t]) == 0;
  if (!status && T > 0) stream_main(&jobs[0]);
  for (int t = 1; t < T; t++)
    if (started[t]) {
      pthread_join(th[t], NULL);
    } else if (!status) { /* no thread: its windows here */
      stream_main(&jobs[t]);
    }
  /* a failed reference first (by window), else the first mismatch (by
   * rank, output, index), and the stats of every window */
  first_bad *bad = NULL;
  const stream_job *failed = NULL;
  for (int t = 0; t < T && !status; t++) {
    const stream_job *j = &jobs[t];
    if (j->status && (!failed || j->failed_at < failed->failed_at)) failed = j;
    if (j->bad.any && (!bad || before(bad, j->bad.rank, j->bad.j, j->bad.index)))
      bad = &jobs[t].bad;
    s.checked += j->s.checked;
    s.max_abs_err = fmax(s.max_abs_err, j->s.max_abs_err);
    s.max_rel_err = fmax(s.max_rel_err, j->s.max_rel_err);
  }
  if (failed)
    status = cf_error(ctx, failed->status, NULL, 0, "%s", cf_errmsg(failed->ctx));
  else if (!status && bad)
    status = cf_error(ctx, CF_ERR_INVALID, NULL, 0, "%s", bad->msg);
  for (int t = 0; jobs && t < T; t++)
    cf_ctx_destroy(jobs[t].ctx);
  free(jobs);
  if (st) *st = s;
  return status;
}
