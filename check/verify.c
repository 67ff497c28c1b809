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
 */
#include "check.h"

#include <float.h>
#include <math.h>

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

static cf_status mismatch_type(cf_context *ctx, const char *name, int rank, const cf_tensor *t,
                               const cf_ref_value *v) {
  return cf_error(ctx, CF_ERR_INVALID, NULL, 0,
                  "output '%s' rank %d: got %s with %lld elements, expected %s with %lld", name,
                  rank, cf_dtype_name(t->dtype), (long long)t->count, cf_dtype_name(v->dtype),
                  (long long)v->count);
}

cf_status cf_verify_outputs(cf_context *ctx, const cf_graph *g, const cf_tensor *got,
                            const cf_ref_value *ref, int ranks, int n_outputs,
                            cf_verify_stats *st) {
  cf_verify_stats s = {0, 0, 0};
  cf_status status = CF_OK;
  int found = 0;
  for (int i = 0; i < g->n_nodes; i++) found += g->nodes[i].op == CF_OP_OUTPUT;
  if (found != n_outputs || ranks <= 0 || (n_outputs > 0 && (!got || !ref))) {
    status = cf_error(ctx, CF_ERR_USAGE, NULL, 0,
                      "verify: %d output%s on %d rank%s given, the graph has %d Output node%s",
                      n_outputs, cf_s(n_outputs), ranks, cf_s(ranks), found, cf_s(found));
    goto fail;
  }
  for (int rank = 0; rank < ranks; rank++) {
    int j = 0;
    for (int i = 0; i < g->n_nodes; i++) {
      const cf_node *n = &g->nodes[i];
      if (n->op != CF_OP_OUTPUT) continue;
      const cf_tensor *t = &got[(int64_t)rank * n_outputs + j];
      const cf_ref_value *v = &ref[(int64_t)rank * n_outputs + j];
      j++;
      if (!v->val && !v->ival) continue; /* undefined on this rank */
      if (t->dtype != v->dtype || t->count != v->count || (v->count > 0 && !t->data)) {
        status = mismatch_type(ctx, n->name, rank, t, v);
        goto fail;
      }
      for (int64_t k = 0; k < v->count; k++) {
        s.checked++;
        if (v->ival) {
          int64_t gi = cf_load_i64(t->data, t->dtype, k), e = v->ival[k];
          if (gi == e) continue;
          double d = fabs((double)gi - (double)e);
          s.max_abs_err = fmax(s.max_abs_err, d);
          s.max_rel_err = fmax(s.max_rel_err, d / fmax(fabs((double)e), 1));
          status = cf_error(ctx, CF_ERR_INVALID, NULL, 0,
                            "output '%s' rank %d index %lld: got %lld, expected %lld", n->name,
                            rank, (long long)k, (long long)gi, (long long)e);
          goto fail;
        }
        double gv = cf_load_f64(t->data, t->dtype, k), err;
        bool ok = float_ok(t->dtype, gv, v->val[k], v->mag[k], &err);
        s.max_abs_err = fmax(s.max_abs_err, err);
        s.max_rel_err = fmax(s.max_rel_err, err / fmax(v->mag[k], floor_of(t->dtype)));
        if (!ok) {
          status = cf_error(ctx, CF_ERR_INVALID, NULL, 0,
                            "output '%s' rank %d index %lld: got %.9g, expected %.9g", n->name,
                            rank, (long long)k, gv, v->val[k]);
          goto fail;
        }
      }
    }
  }
fail:
  if (st) *st = s;
  return status;
}
