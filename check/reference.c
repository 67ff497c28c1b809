/* reference.c - the float64 reference that `run --verify` checks against.
 *
 * The graph is evaluated node by node in topological order for every rank
 * at once (a collective needs all its ranks' operands), in float64 for
 * float dtypes and exactly in int64 for integer dtypes, wrapping to the
 * dtype at every op output like the kernels do. Each value is freed after
 * its last use, so memory follows the live set, not the graph.
 *
 * Float values carry a magnitude next to the value: the sum of |terms| that
 * produced it (Add/Sub add magnitudes, Mul multiplies them, MatMul sums the
 * products, sum-collectives add them, max/min take the largest), so the
 * verifier's tolerance rtol * mag is a forward error bound that scales with
 * cancellation. Intermediate float16/bfloat16/float32 results are NOT
 * rounded to their dtype (the executor rounds every op's output): the
 * difference is what that tolerance covers. Only Cast rounds, through
 * cf_store_f64/cf_load_f64, because a cast changes the value by design
 * (and float -> integer casts then compare exactly).
 *
 * Undefined values: a rank outside a collective's group does not run it,
 * and Reduce defines its output on the root only. Such a value (and every
 * value computed from it) is a cf_ref_value with dtype, shape and count set
 * and val, mag and ival all NULL; cf_verify_outputs skips it. Opaque is the
 * exception: the executor fills it whatever its operands hold.
 *
 * Inputs come from cf_inputs by name; Constant and Opaque are filled with
 * cf_fill_node and cf_fill_random exactly as the executor fills them.
 *
 * Windows (cf_reference_window): when every op of the graph is elementwise
 * (element e of each output depends on element e of its operands alone:
 * the collectives that reduce, broadcast or permute whole tensors, Add/Sub/
 * Mul without broadcasting, Cast, Reshape; cf_reference_streams says so),
 * the same evaluation runs on elements [lo, hi) of every value (each value
 * clipped to its own size), so memory follows the window instead of the
 * tensors. The arithmetic per element is the same, so the values are
 * bitwise those of the whole run. Inputs without data in cf_inputs are
 * regenerated from the seed (cf_fill_node_at) as the executor fills them.
 */
#include "check.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef cf_ref_value rv;

typedef struct ref_run {
  cf_context *ctx;
  const cf_graph *g;
  const cf_inputs *in;
  uint64_t seed;
  int R;              /* ranks */
  rv **vals;          /* per node: [port * R + rank]; NULL before it runs and after its last use */
  int64_t *base;      /* per node: first index of its ports in uses[] */
  int *uses;          /* per port: operand references not yet evaluated */
  int *live;          /* per node: ports still holding values */
  int *input_of;      /* per node: index into in->names, -1 when none */
  int *world;         /* 0..R-1: the world group's ranks */
  int *out_index;     /* per node: its index among the Output nodes, -1 otherwise */
  bool window;        /* elements [lo, hi) of every value only */
  int64_t lo, hi;
} ref_run;

/* ================= values ================= */

static bool is_int(cf_dtype dt) { return !cf_dtype_is_float(dt); }
static bool defined(const rv *v) { return v->val || v->ival; }

static int64_t wrap(uint64_t u, cf_dtype dt) { return cf_dtype_wrap(dt, u); }

static void val_free(rv *v) {
  free(v->val);
  free(v->mag);
  free(v->ival);
  v->val = v->mag = NULL;
  v->ival = NULL;
}

/* Give v (type already set) storage, zeroed unless the caller writes every
 * element (a window's buffers come back from the heap, where calloc would
 * clear them again); at least one element, so a defined value never has
 * NULL arrays even when empty. */
static cf_status val_alloc_as(ref_run *r, rv *v, bool zero) {
  size_t n = v->count > 0 ? (size_t)v->count : 1;
  if ((uint64_t)v->count > SIZE_MAX / sizeof(double)) goto fail;
  if (is_int(v->dtype)) {
    if (!(v->ival = zero ? calloc(n, sizeof(int64_t)) : malloc(n * sizeof(int64_t)))) goto fail;
  } else {
    v->val = zero ? calloc(n, sizeof(double)) : malloc(n * sizeof(double));
    v->mag = zero ? calloc(n, sizeof(double)) : malloc(n * sizeof(double));
    if (!v->val || !v->mag) goto fail;
  }
  return CF_OK;
fail:
  val_free(v);
  char b[32];
  return cf_error(r->ctx, CF_ERR_NO_MEMORY, r->g->file, 0,
                  "cannot allocate %s for --verify's float64 reference (a value of %lld elements): "
                  "out of memory",
                  cf_bytes_text(v->count * (is_int(v->dtype) ? 8 : 16), b, sizeof b),
                  (long long)v->count);
}

static cf_status val_alloc(ref_run *r, rv *v) { return val_alloc_as(r, v, true); }

/* v's type from t: in a window, the window's part of it, flat. */
static void set_type(const ref_run *r, rv *v, const cf_value *t) {
  v->dtype = t->dtype;
  v->shape = t->shape;
  if (!cf_shape_elements(&t->shape, &v->count)) v->count = 0; /* inference checked it */
  if (!r->window) return;
  int64_t end = v->count < r->hi ? v->count : r->hi;
  v->count = end > r->lo ? end - r->lo : 0;
  v->shape = (cf_shape){1, {v->count}};
}

/* dst (type set, no storage) becomes a copy of src. */
static cf_status val_copy(ref_run *r, rv *dst, const rv *src) {
  if (!defined(src)) return CF_OK;
  cf_status st = val_alloc_as(r, dst, false);
  if (st) return st;
  size_t bytes = (size_t)src->count * sizeof(double);
  if (src->ival) memcpy(dst->ival, src->ival, bytes);
  if (src->val) {
    memcpy(dst->val, src->val, bytes);
    memcpy(dst->mag, src->mag, bytes);
  }
  return CF_OK;
}

/* element i as a double and its magnitude (integers: exact values) */
static double ival_f64(const rv *v, int64_t i) {
  return cf_dtype_is_unsigned(v->dtype) ? (double)(uint64_t)v->ival[i] : (double)v->ival[i];
}
static double dv(const rv *v, int64_t i) { return v->val ? v->val[i] : ival_f64(v, i); }
static double mv(const rv *v, int64_t i) { return v->mag ? v->mag[i] : fabs(ival_f64(v, i)); }

/* Load count elements of a tensor (dtype of v) into v's storage from
 * element at on. */
static void load_at(rv *v, int64_t at, const void *data, int64_t count) {
  if (!v->ival && v->dtype == CF_DT_FLOAT32) { /* the common case, as below */
    const float *f = data;
    double *val = v->val + at, *mag = v->mag + at;
    for (int64_t i = 0; i < count; i++) {
      val[i] = f[i];
      mag[i] = fabs(val[i]);
    }
    return;
  }
  for (int64_t i = 0; i < count; i++) {
    if (v->ival) {
      v->ival[at + i] = cf_load_i64(data, v->dtype, i);
    } else {
      v->val[at + i] = cf_load_f64(data, v->dtype, i);
      v->mag[at + i] = fabs(v->val[at + i]);
    }
  }
}

static void load(rv *v, const void *data) { load_at(v, 0, data, v->count); }

static const rv *opnd(const ref_run *r, const cf_node *n, int j, int rank) {
  return &r->vals[n->in[j].node][n->in[j].port * r->R + rank];
}

static rv *result(const ref_run *r, const cf_node *n, int port, int rank) {
  return &r->vals[n - r->g->nodes][port * r->R + rank];
}

/* ================= compute ops ================= */

/* Element strides of x along each dimension of the broadcast shape o (0
 * where x is broadcast). */
static void bstrides(const cf_shape *o, const cf_shape *x, int64_t *st) {
  int64_t s = 1;
  for (int d = o->rank - 1; d >= 0; d--) {
    int xd = x->rank - o->rank + d;
    int64_t dim = xd >= 0 ? x->dims[xd] : 1;
    st[d] = dim == 1 ? 0 : s;
    s *= dim;
  }
}

/* Add, Sub, Mul with numpy broadcasting */
static void binary(cf_op op, const rv *a, const rv *b, rv *o) {
  int64_t sa[CF_MAX_RANK], sb[CF_MAX_RANK], idx[CF_MAX_RANK] = {0}, ia = 0, ib = 0;
  bstrides(&o->shape, &a->shape, sa);
  bstrides(&o->shape, &b->shape, sb);
  for (int64_t e = 0; e < o->count; e++) {
    if (o->ival) {
      uint64_t x = (uint64_t)a->ival[ia], y = (uint64_t)b->ival[ib];
      o->ival[e] = wrap(op == CF_OP_ADD ? x + y : op == CF_OP_SUB ? x - y : x * y, o->dtype);
    } else if (op == CF_OP_MUL) {
      o->val[e] = a->val[ia] * b->val[ib];
      o->mag[e] = a->mag[ia] * b->mag[ib];
    } else {
      o->val[e] = op == CF_OP_ADD ? a->val[ia] + b->val[ib] : a->val[ia] - b->val[ib];
      o->mag[e] = a->mag[ia] + b->mag[ib];
    }
    for (int d = o->shape.rank - 1; d >= 0; d--) {
      ia += sa[d];
      ib += sb[d];
      if (++idx[d] < o->shape.dims[d]) break;
      ia -= sa[d] * o->shape.dims[d];
      ib -= sb[d] * o->shape.dims[d];
      idx[d] = 0;
    }
  }
}

/* o (m,n) = x1 (m,k) @ x2 (k,n) [+ bias (n)], floats in val/mag of o;
 * integer MatMul exactly, wrapping to o's dtype. */
static void matmul(const rv *x1, const rv *x2, const rv *bias, rv *o) {
  int64_t m = x1->shape.dims[0], k = x1->shape.dims[1], n = x2->shape.dims[1];
  for (int64_t i = 0; i < m; i++) {
    if (o->ival) {
      for (int64_t j = 0; j < n; j++) {
        uint64_t acc = 0;
        for (int64_t t = 0; t < k; t++)
          acc += (uint64_t)x1->ival[i * k + t] * (uint64_t)x2->ival[t * n + j];
        o->ival[i * n + j] = wrap(acc, o->dtype);
      }
      continue;
    }
    double *ov = o->val + i * n, *om = o->mag + i * n;
    for (int64_t j = 0; j < n; j++) {
      ov[j] = bias ? dv(bias, j) : 0;
      om[j] = bias ? mv(bias, j) : 0;
    }
    for (int64_t t = 0; t < k; t++) {
      double a = dv(x1, i * k + t), am = mv(x1, i * k + t);
      for (int64_t j = 0; j < n; j++) {
        ov[j] += a * dv(x2, t * n + j);
        om[j] += am * mv(x2, t * n + j);
      }
    }
  }
}

/* Quantized: o = (s1[i] * s2[j]) * (int32 (x1 @ x2 + bias)[i,j]), the int8
 * products accumulated in a wrapping int32 like the kernel's accumulator. */
static void quant_matmul(const rv *x1, const rv *x2, const rv *bias, const rv *s1, const rv *s2,
                         rv *o) {
  int64_t m = x1->shape.dims[0], k = x1->shape.dims[1], n = x2->shape.dims[1];
  for (int64_t i = 0; i < m; i++)
    for (int64_t j = 0; j < n; j++) {
      uint64_t acc = bias ? (uint64_t)bias->ival[j] : 0;
      double sum_abs = bias ? fabs((double)bias->ival[j]) : 0;
      for (int64_t t = 0; t < k; t++) {
        int64_t p = x1->ival[i * k + t] * x2->ival[t * n + j]; /* int8 * int8: exact */
        acc += (uint64_t)p;
        sum_abs += fabs((double)p);
      }
      double scale = dv(s1, i) * dv(s2, j);
      o->val[i * n + j] = (double)wrap(acc, CF_DT_INT32) * scale;
      o->mag[i * n + j] = fabs(scale) * sum_abs;
    }
}

/* Cast element by element through the executor's own conversions, so the
 * reference rounds and saturates exactly where the cast does. */
static void cast(const rv *x, rv *o) {
  unsigned char tmp[8];
  for (int64_t i = 0; i < o->count; i++) {
    if (x->ival && !o->ival) {
      cf_store_f64(tmp, o->dtype, 0, ival_f64(x, i)); /* uint64 above 2^63 stays positive */
    } else if (x->ival) {
      cf_store_i64(tmp, o->dtype, 0, x->ival[i]);
    } else {
      cf_store_f64(tmp, o->dtype, 0, x->val[i]);
    }
    if (o->ival) {
      o->ival[i] = cf_load_i64(tmp, o->dtype, 0);
    } else {
      o->val[i] = cf_load_f64(tmp, o->dtype, 0);
      o->mag[i] = fmax(x->ival ? 0 : x->mag[i], fabs(o->val[i]));
    }
  }
}

/* Fill v with fill_node (Constant) or fill_random under name, loaded a
 * chunk at a time through a buffer that stays in the cache (the _at fills
 * write any range of elements alike). */
static cf_status fill(ref_run *r, const cf_node *n, rv *v, int rank, const char *name) {
  enum { CHUNK = 2048 };                 /* elements */
  _Alignas(64) unsigned char buf[CHUNK * 8]; /* 8 bytes: the widest dtype */
  int64_t first = r->window ? r->lo : 0;
  for (int64_t at = 0; at < v->count; at += CHUNK) {
    int64_t count = v->count - at < CHUNK ? v->count - at : CHUNK;
    if (name)
      cf_fill_random_at(buf, v->dtype, first + at, count, r->seed, rank, name);
    else
      cf_fill_node_at(n, buf, v->dtype, first + at, count, r->seed, rank);
    load_at(v, at, buf, count);
  }
  return CF_OK;
}

static cf_status input(ref_run *r, const cf_node *n, rv *v, int rank) {
  int k = r->input_of[n - r->g->nodes];
  if (k < 0 && r->window) return fill(r, n, v, rank, NULL); /* the executor's fill */
  if (k < 0)
    return cf_node_error(r->g, n, CF_ERR_USAGE, "reference: no data given for this Input");
  const cf_tensor *t = &r->in->data[(int64_t)rank * r->in->n + k];
  const cf_value *want = &n->out[0];
  int64_t count = r->window ? 0 : v->count;
  if (r->window && !cf_shape_elements(&want->shape, &count)) count = 0;
  if (t->dtype != want->dtype || !cf_shape_equal(&t->shape, &want->shape) || t->count != count ||
      (v->count > 0 && !t->data)) {
    char b1[160], b2[160];
    return cf_node_error(r->g, n, CF_ERR_USAGE,
                         "reference: rank %d's data is %s (%s), the Input is %s (%s)", rank,
                         cf_dtype_name(t->dtype), cf_shape_format(&t->shape, b1, sizeof b1),
                         cf_dtype_name(want->dtype), cf_shape_format(&want->shape, b2, sizeof b2));
  }
  load(v, (const char *)t->data + (r->window ? r->lo * cf_dtype_size(t->dtype) : 0));
  return CF_OK;
}

/* One compute node (or Input, Constant) on one rank. */
static cf_status compute(ref_run *r, const cf_node *n, int rank) {
  cf_status st;
  if (n->op != CF_OP_OPAQUE)
    for (int j = 0; j < n->n_in; j++)
      if (!defined(opnd(r, n, j, rank))) return CF_OK; /* undefined in, undefined out */
  if (n->op == CF_OP_RESHAPE) return val_copy(r, result(r, n, 0, rank), opnd(r, n, 0, rank));
  /* these write every element of theirs */
  bool whole = n->op == CF_OP_INPUT || n->op == CF_OP_CONSTANT || n->op == CF_OP_OPAQUE ||
               n->op == CF_OP_ADD || n->op == CF_OP_SUB || n->op == CF_OP_MUL;
  for (int p = 0; p < n->n_out; p++)
    if ((st = val_alloc_as(r, result(r, n, p, rank), !whole))) return st;
  rv *o = result(r, n, 0, rank);
  const rv *a = n->n_in > 0 ? opnd(r, n, 0, rank) : NULL;
  const rv *b = n->n_in > 1 ? opnd(r, n, 1, rank) : NULL;
  switch (n->op) {
  case CF_OP_INPUT: return input(r, n, o, rank);
  case CF_OP_CONSTANT: return fill(r, n, o, rank, NULL);
  case CF_OP_OPAQUE:
    for (int p = 0; p < n->n_out; p++) {
      size_t len = strlen(n->name) + 16;
      char *name = malloc(len);
      if (!name) return cf_node_error(r->g, n, CF_ERR_NO_MEMORY, "reference: out of memory");
      snprintf(name, len, "%s:%d", n->name, p);
      st = fill(r, n, result(r, n, p, rank), rank, name);
      free(name);
      if (st) return st;
    }
    return CF_OK;
  case CF_OP_MATMUL: matmul(a, b, NULL, o); return CF_OK;
  case CF_OP_QUANTMATMUL:
    quant_matmul(a, b, n->n_in == 5 ? opnd(r, n, 4, rank) : NULL, opnd(r, n, 2, rank),
                 opnd(r, n, 3, rank), o);
    return CF_OK;
  case CF_OP_ADD:
  case CF_OP_SUB:
  case CF_OP_MUL: binary(n->op, a, b, o); return CF_OK;
  case CF_OP_CAST: cast(a, o); return CF_OK;
  case CF_OP_SHARD: {
    cf_shape local;
    int64_t origin[CF_MAX_RANK];
    if ((st = cf_shard_block(r->g, n, &a->shape, rank, &local, origin))) return st;
    if (a->ival) cf_copy_block(a->ival, &a->shape, origin, &local, sizeof *a->ival, o->ival);
    if (a->val) {
      cf_copy_block(a->val, &a->shape, origin, &local, sizeof *a->val, o->val);
      cf_copy_block(a->mag, &a->shape, origin, &local, sizeof *a->mag, o->mag);
    }
    return CF_OK;
  }
  default:
    return cf_node_error(r->g, n, CF_ERR_INVALID, "reference: %s is not a compute op",
                         cf_op_table[n->op].name);
  }
}

/* ================= collectives ================= */

/* The world ranks of n's group, in group order and part after part, the
 * size of one part (docs/format.md: world_size, else rank_size, else the group's
 * size; hccl_world_group without a definition is ranks 0..size-1) and the
 * number of parts (each part reduces on its own). */
static cf_status group_of(ref_run *r, const cf_node *n, const int **ranks, int *size, int *parts) {
  const char *name = cf_node_group(n);
  const cf_group *gr = cf_graph_group(r->g, name);
  int64_t s = cf_node_int(n, CF_A_WORLD_SIZE, cf_node_int(n, CF_A_RANK_SIZE, -1));
  if (s < 0) s = cf_graph_group_size(r->g, name);
  if (gr && s != gr->n_ranks)
    return cf_node_error(r->g, n, CF_ERR_INVALID, "reference: size %lld but group '%s' has %d rank%s",
                         (long long)s, name, gr->n_ranks, cf_s(gr->n_ranks));
  if (s <= 0 || s > r->R)
    return cf_node_error(r->g, n, CF_ERR_USAGE,
                         "reference: group '%s' spans %lld rank%s but the run has %d", name,
                         (long long)s, cf_s(s), r->R);
  *ranks = gr ? gr->ranks : r->world;
  *size = (int)s;
  *parts = gr ? gr->n_parts : 1;
  for (int i = 0; i < *size * *parts; i++)
    if ((*ranks)[i] >= r->R)
      return cf_node_error(r->g, n, CF_ERR_USAGE,
                           "reference: group '%s' has rank %d but the run has %d rank%s", name,
                           (*ranks)[i], r->R, cf_s(r->R));
  return CF_OK;
}

/* max/min with NaN winning and -0 < +0, as the kernels do */
static double red_max(double a, double b) {
  if (isnan(a) || isnan(b)) return NAN;
  if (a == b) return signbit(a) ? b : a;
  return a > b ? a : b;
}
static double red_min(double a, double b) {
  if (isnan(a) || isnan(b)) return NAN;
  if (a == b) return signbit(a) ? a : b;
  return a < b ? a : b;
}

/* dst[doff + e] = red over src[0..s)[off + e], e < cnt. Integer sums wrap
 * (in int64, then the dtype), integer mean is the sum truncated by s;
 * unsigned dtypes compare and divide unsigned, bool reduces by
 * cf_dtype_reduction (or, and). */
static void reduce_into(cf_reduction red, const rv *const *src, int s, int64_t off, rv *dst,
                        int64_t doff, int64_t cnt) {
  red = cf_dtype_reduction(dst->dtype, red);
  bool u = cf_dtype_is_unsigned(dst->dtype);
  if (!dst->ival && (red == CF_RED_SUM || red == CF_RED_MEAN)) { /* the common case, as below */
    for (int64_t e = 0; e < cnt; e++) {
      int64_t i = off + e;
      double v = src[0]->val[i], m = src[0]->mag[i];
      for (int k = 1; k < s; k++) {
        v += src[k]->val[i];
        m += src[k]->mag[i];
      }
      dst->val[doff + e] = red == CF_RED_MEAN ? v / s : v;
      dst->mag[doff + e] = red == CF_RED_MEAN ? m / s : m;
    }
    return;
  }
  for (int64_t e = 0; e < cnt; e++) {
    int64_t i = off + e;
    if (dst->ival) {
      uint64_t acc = (uint64_t)src[0]->ival[i];
      for (int k = 1; k < s; k++) {
        uint64_t x = (uint64_t)src[k]->ival[i];
        int64_t a = (int64_t)acc, b = (int64_t)x;
        bool gt = u ? acc > x : a > b;
        acc = red == CF_RED_PROD  ? acc * x
              : red == CF_RED_MAX ? (gt ? acc : x)
              : red == CF_RED_MIN ? (gt ? x : acc)
                                  : acc + x;
      }
      if (red == CF_RED_MEAN) acc = u ? acc / (uint64_t)s : (uint64_t)((int64_t)acc / s);
      dst->ival[doff + e] = wrap(acc, dst->dtype);
      continue;
    }
    double v = src[0]->val[i], m = src[0]->mag[i];
    for (int k = 1; k < s; k++) {
      double x = src[k]->val[i], xm = src[k]->mag[i];
      switch (red) {
      case CF_RED_PROD: v *= x; m *= xm; break;
      case CF_RED_MAX: v = red_max(v, x); m = fmax(m, xm); break;
      case CF_RED_MIN: v = red_min(v, x); m = fmax(m, xm); break;
      default: v += x; m += xm; break;
      }
    }
    if (red == CF_RED_MEAN) {
      v /= s;
      m /= s;
    }
    dst->val[doff + e] = v;
    dst->mag[doff + e] = m;
  }
}

/* Copy cnt elements of src at off into dst at doff. */
static void copy_into(const rv *src, int64_t off, rv *dst, int64_t doff, int64_t cnt) {
  size_t bytes = (size_t)cnt * sizeof(double);
  if (dst->ival) {
    memcpy(dst->ival + doff, src->ival + off, bytes);
  } else {
    memcpy(dst->val + doff, src->val + off, bytes);
    memcpy(dst->mag + doff, src->mag + off, bytes);
  }
}

typedef struct coll {
  const cf_node *n;
  const int *ranks; /* world ranks, group order */
  int size;
  const rv **src;   /* per member: its operand */
} coll;

/* c->src[k] = operand j of member k; false when any is undefined (then the
 * collective's output is undefined on every member). */
static bool gather_src(const ref_run *r, coll *c, int j) {
  for (int k = 0; k < c->size; k++) {
    c->src[k] = opnd(r, c->n, j, c->ranks[k]);
    if (!defined(c->src[k])) return false;
  }
  return true;
}

/* One plain collective of kind op: operand j to output port p. */
static cf_status coll_port(ref_run *r, coll *c, cf_op op, int j, int p) {
  cf_status st;
  const cf_node *n = c->n;
  cf_reduction red = cf_node_reduction(n);
  int64_t root = cf_node_int(n, CF_A_ROOT, 0);
  if (root < 0 || root >= c->size)
    return cf_node_error(r->g, n, CF_ERR_INVALID, "reference: root=%lld outside the group",
                         (long long)root);
  if (op == CF_OP_BROADCAST) {
    const rv *s = opnd(r, n, j, c->ranks[root]);
    for (int k = 0; k < c->size; k++)
      if ((st = val_copy(r, result(r, n, p, c->ranks[k]), s))) return st;
    return CF_OK;
  }
  if (!gather_src(r, c, j)) return CF_OK;
  int64_t cnt = c->src[0]->count;
  /* along dim d: rows of the dims before d, a block of the dims from d on
   * per row (all_gather_dimension / scatter_dimension) */
  int64_t rows = 1, d = cf_node_member_dim(n, j);
  for (int64_t k = 0; k < d && k < c->src[0]->shape.rank; k++) rows *= c->src[0]->shape.dims[k];
  if (rows <= 0) rows = 1;
  for (int k = 0; k < c->size; k++) {
    if (op == CF_OP_REDUCE && k != root) continue;
    rv *o = result(r, n, p, c->ranks[k]);
    if ((st = val_alloc_as(r, o, false))) return st; /* each case writes all of o */
    switch (op) {
    case CF_OP_ALLREDUCE: /* every member's is the first's: a copy reads 2 arrays, not 2n */
      if (k > 0) {
        copy_into(result(r, n, p, c->ranks[0]), 0, o, 0, cnt);
        break;
      }
      reduce_into(red, c->src, c->size, 0, o, 0, cnt);
      break;
    case CF_OP_REDUCE: reduce_into(red, c->src, c->size, 0, o, 0, cnt); break;
    case CF_OP_ALLGATHER: /* stack and concat: in each row, rank blocks one after another */
      for (int64_t q = 0; q < rows; q++)
        for (int t = 0; t < c->size; t++)
          copy_into(c->src[t], q * (cnt / rows), o, (q * c->size + t) * (cnt / rows), cnt / rows);
      break;
    default: /* ReduceScatter: block k of each row of the reduced tensor */
      for (int64_t q = 0; q < rows; q++)
        reduce_into(red, c->src, c->size, (q * c->size + k) * (o->count / rows), o,
                    q * (o->count / rows), o->count / rows);
      break;
    }
  }
  return CF_OK;
}

/* The matmul product of a fused MatmulReduceScatter / MatmulAllReduce on
 * one rank, (m,n) in float64; false when an operand is undefined. */
static cf_status fused_product(ref_run *r, const cf_node *n, int rank, rv *p, bool *ok) {
  *ok = false;
  for (int j = 0; j < n->n_in; j++)
    if (!defined(opnd(r, n, j, rank))) return CF_OK;
  const rv *x1 = opnd(r, n, 0, rank), *x2 = opnd(r, n, 1, rank);
  cf_value t = {CF_DT_FLOAT64, {2, {x1->shape.dims[0], x2->shape.dims[1]}}};
  set_type(r, p, &t);
  cf_status st = val_alloc(r, p);
  if (st) return st;
  if (x1->dtype == CF_DT_INT8) /* x1, x2, [bias], x1_scale, x2_scale */
    quant_matmul(x1, x2, n->n_in == 5 ? opnd(r, n, 2, rank) : NULL, opnd(r, n, n->n_in - 2, rank),
                 opnd(r, n, n->n_in - 1, rank), p);
  else
    matmul(x1, x2, n->n_in == 3 ? opnd(r, n, 2, rank) : NULL, p);
  *ok = true;
  return CF_OK;
}

/* MatmulReduceScatter / MatmulAllReduce: every member's product, then a
 * sum (scattered along m for MatmulReduceScatter). */
static cf_status fused_matmul(ref_run *r, coll *c) {
  cf_status st = CF_OK;
  const cf_node *n = c->n;
  rv *prod = calloc((size_t)c->size, sizeof *prod);
  if (!prod) return cf_node_error(r->g, n, CF_ERR_NO_MEMORY, "reference: out of memory");
  bool all = true;
  for (int k = 0; k < c->size && all && !st; k++) {
    st = fused_product(r, n, c->ranks[k], &prod[k], &all);
    c->src[k] = &prod[k];
  }
  for (int k = 0; k < c->size && all && !st; k++) {
    rv *o = result(r, n, 0, c->ranks[k]);
    if ((st = val_alloc(r, o))) break;
    int64_t off = cf_op_coll(n->op) == CF_OP_REDUCESCATTER ? k * o->count : 0;
    reduce_into(CF_RED_SUM, c->src, c->size, off, o, 0, o->count);
  }
  for (int k = 0; k < c->size; k++) val_free(&prod[k]);
  free(prod);
  return st;
}

/* AllGatherMatmul: x1 gathered along dim0 (port n_in-1), then gathered @
 * x2_j on each member for ports j-1. */
static cf_status allgather_matmul(ref_run *r, coll *c) {
  cf_status st;
  const cf_node *n = c->n;
  int last = n->n_in - 1;
  if ((st = coll_port(r, c, CF_OP_ALLGATHER, 0, last))) return st;
  for (int k = 0; k < c->size; k++) {
    const rv *gx = result(r, n, last, c->ranks[k]);
    if (!defined(gx)) return CF_OK;
    for (int j = 1; j < n->n_in; j++) {
      rv *o = result(r, n, j - 1, c->ranks[k]);
      if (!defined(opnd(r, n, j, c->ranks[k]))) continue;
      if ((st = val_alloc(r, o))) return st;
      matmul(gx, opnd(r, n, j, c->ranks[k]), NULL, o);
    }
  }
  return CF_OK;
}

/* AllToAll by its definition, element by element, for operand j and
 * output port j (a FusedAllToAll's member j is an AllToAll of its own):
 * output element idx of rank k lies in the block that rank t = idx[cd] /
 * block[cd] sent, which is block k of t's input along sd (the tuple form:
 * output port t of rank k is operand k of rank t). */
static cf_status alltoall(ref_run *r, coll *c, int j) {
  cf_status st;
  const cf_node *n = c->n;
  if (n->op == CF_OP_ALLTOALL && n->n_in > 1) {
    for (int k = 0; k < c->size; k++)
      for (int t = 0; t < c->size; t++) {
        const rv *s = opnd(r, n, k, c->ranks[t]);
        if (defined(s) && (st = val_copy(r, result(r, n, t, c->ranks[k]), s))) return st;
      }
    return CF_OK;
  }
  if (!gather_src(r, c, j)) return CF_OK;
  int sd = (int)cf_node_int(n, CF_A_SPLIT_DIMENSION, 0),
      cd = (int)cf_node_int(n, CF_A_CONCAT_DIMENSION, 0);
  const cf_shape *in = &c->src[0]->shape, *os = &n->out[j].shape;
  int64_t bsplit = in->dims[sd] / c->size, bconcat = os->dims[cd] / c->size;
  for (int k = 0; k < c->size; k++) {
    rv *o = result(r, n, j, c->ranks[k]);
    if ((st = val_alloc(r, o))) return st;
    for (int64_t e = 0; e < o->count; e++) {
      int64_t idx[CF_MAX_RANK], rest = e;
      for (int d = os->rank - 1; d >= 0; d--) {
        idx[d] = rest % os->dims[d];
        rest /= os->dims[d];
      }
      int t = (int)(idx[cd] / bconcat);
      idx[cd] %= bconcat;
      idx[sd] += k * bsplit;
      int64_t f = 0;
      for (int d = 0; d < in->rank; d++) f = f * in->dims[d] + idx[d];
      copy_into(c->src[t], f, o, e, 1);
    }
  }
  return CF_OK;
}

/* CollectivePermute: a target gets its source's input, a rank that is no
 * target zeros (val_alloc's). */
static cf_status permute(ref_run *r, coll *c) {
  cf_status st;
  const cf_node *n = c->n;
  int target[CF_MAX_WORLD], source[CF_MAX_WORLD];
  char why[128];
  if (!cf_pairs_parse(cf_node_str(n, CF_A_SOURCE_TARGET_PAIRS, ""), c->size, target, source, why,
                      sizeof why))
    return cf_node_error(r->g, n, CF_ERR_INVALID, "reference: source_target_pairs: %s", why);
  for (int k = 0; k < c->size; k++) {
    rv *o = result(r, n, 0, c->ranks[k]);
    if (source[k] < 0) {
      if ((st = val_alloc(r, o))) return st;
      continue;
    }
    const rv *s = opnd(r, n, 0, c->ranks[source[k]]);
    if (defined(s) && (st = val_copy(r, o, s))) return st;
  }
  return CF_OK;
}

/* One part of n's group (the whole group when it has one). */
static cf_status collective_part(ref_run *r, coll *c) {
  const cf_node *n = c->n;
  cf_op kind = cf_op_coll(n->op);
  switch (cf_op_table[n->op].cat) {
  case CF_CAT_FUSED_COLLECTIVE: { /* each member as its plain collective */
    cf_status st = CF_OK;
    for (int j = 0; j < n->n_in && !st; j++)
      st = kind == CF_OP_ALLTOALL ? alltoall(r, c, j) : coll_port(r, c, kind, j, j);
    return st;
  }
  case CF_CAT_FUSED_MATMUL:
    return kind == CF_OP_ALLGATHER ? allgather_matmul(r, c) : fused_matmul(r, c);
  default:
    if (kind == CF_OP_ALLTOALL) return alltoall(r, c, 0);
    if (kind == CF_OP_COLLECTIVEPERMUTE) return permute(r, c);
    return coll_port(r, c, kind, 0, 0);
  }
}

static cf_status collective(ref_run *r, const cf_node *n) {
  cf_status st;
  coll c = {.n = n};
  const int *ranks = NULL;
  int parts = 1;
  if ((st = group_of(r, n, &ranks, &c.size, &parts))) return st;
  c.src = calloc((size_t)c.size, sizeof *c.src);
  if (!c.src) return cf_node_error(r->g, n, CF_ERR_NO_MEMORY, "reference: out of memory");
  for (int k = 0; k < parts && !st; k++) {
    c.ranks = ranks + (size_t)k * (size_t)c.size;
    st = collective_part(r, &c);
  }
  free(c.src);
  return st;
}

/* ================= the run ================= */

/* Count operand uses per port and map Inputs and Outputs. */
static cf_status prepare(ref_run *r, int *n_outputs) {
  const cf_graph *g = r->g;
  size_t nn = g->n_nodes > 0 ? (size_t)g->n_nodes : 1;
  r->vals = calloc(nn, sizeof *r->vals);
  r->base = calloc(nn + 1, sizeof *r->base);
  r->live = calloc(nn, sizeof *r->live);
  r->input_of = malloc(nn * sizeof *r->input_of);
  r->out_index = malloc(nn * sizeof *r->out_index);
  r->world = malloc((size_t)r->R * sizeof *r->world);
  if (!r->vals || !r->base || !r->live || !r->input_of || !r->out_index || !r->world) goto oom;
  for (int i = 0; i < g->n_nodes; i++) r->base[i + 1] = r->base[i] + g->nodes[i].n_out;
  r->uses = calloc(r->base[g->n_nodes] > 0 ? (size_t)r->base[g->n_nodes] : 1, sizeof *r->uses);
  if (!r->uses) goto oom;
  *n_outputs = 0;
  for (int i = 0; i < g->n_nodes; i++) {
    const cf_node *n = &g->nodes[i];
    for (int j = 0; j < n->n_in; j++) r->uses[r->base[n->in[j].node] + n->in[j].port]++;
    r->input_of[i] = -1;
    r->out_index[i] = n->op == CF_OP_OUTPUT ? (*n_outputs)++ : -1;
  }
  for (int q = 0; q < r->R; q++) r->world[q] = q;
  for (int k = 0; k < r->in->n; k++) {
    int i = cf_graph_find(g, r->in->names[k]);
    if (i < 0) continue; /* not in this graph (e.g. removed as dead): unused */
    if (g->nodes[i].op != CF_OP_INPUT)
      return cf_node_error(g, &g->nodes[i], CF_ERR_USAGE, "reference: data given for a %s, not an Input",
                           cf_op_table[g->nodes[i].op].name);
    if (r->input_of[i] >= 0)
      return cf_node_error(g, &g->nodes[i], CF_ERR_USAGE, "reference: data given twice");
    r->input_of[i] = k;
  }
  return CF_OK;
oom:
  return cf_error(r->ctx, CF_ERR_NO_MEMORY, NULL, 0, "reference: out of memory");
}

/* Free the values of node i's port p on every rank. */
static void drop_port(ref_run *r, int i, int p) {
  for (int q = 0; q < r->R; q++) val_free(&r->vals[i][p * r->R + q]);
  if (--r->live[i] == 0) {
    free(r->vals[i]);
    r->vals[i] = NULL;
  }
}

static cf_status run_node(ref_run *r, int i, cf_ref_value *out, int n_outputs) {
  cf_status st = CF_OK;
  const cf_graph *g = r->g;
  const cf_node *n = &g->nodes[i];
  if (n->op == CF_OP_OUTPUT) {
    /* the operand's last use takes its storage instead of a copy of it */
    bool last = r->uses[r->base[n->in[0].node] + n->in[0].port] == 1;
    for (int q = 0; q < r->R && !st; q++) {
      rv *o = &out[(int64_t)q * n_outputs + r->out_index[i]];
      rv *s = &r->vals[n->in[0].node][n->in[0].port * r->R + q];
      set_type(r, o, &g->nodes[n->in[0].node].out[n->in[0].port]);
      if (!last) {
        st = val_copy(r, o, s);
        continue;
      }
      o->val = s->val;
      o->mag = s->mag;
      o->ival = s->ival;
      s->val = s->mag = NULL;
      s->ival = NULL;
    }
  } else if (n->n_out > 0) {
    r->vals[i] = calloc((size_t)n->n_out * (size_t)r->R, sizeof(rv));
    if (!r->vals[i]) return cf_node_error(g, n, CF_ERR_NO_MEMORY, "reference: out of memory");
    r->live[i] = n->n_out;
    for (int p = 0; p < n->n_out; p++)
      for (int q = 0; q < r->R; q++)
        set_type(r, result(r, n, p, q), &n->out[p]);
    if (cf_op_is_collective(n->op))
      st = collective(r, n);
    else
      for (int q = 0; q < r->R && !st; q++) st = compute(r, n, q);
    if (st) return st;
    for (int p = 0; p < n->n_out; p++)
      if (r->uses[r->base[i] + p] == 0) drop_port(r, i, p);
  }
  for (int j = 0; j < n->n_in && !st; j++) {
    cf_ref in = n->in[j];
    if (--r->uses[r->base[in.node] + in.port] == 0) drop_port(r, in.node, in.port);
  }
  return st;
}

/* The storage of one value on every rank: float64 value and magnitude, or
 * int64 (at least one element each, as val_alloc gives), of at most clip
 * elements (a window's). */
static int64_t value_bytes(const cf_value *v, int ranks, int64_t clip) {
  int64_t n;
  if (!cf_shape_elements(&v->shape, &n)) return 0;
  if (n > clip) n = clip;
  return (n > 0 ? n : 1) * (cf_dtype_is_float(v->dtype) ? 16 : 8) * ranks;
}

/* The peak of run_node's live values over g's order, each value clipped to
 * clip elements (INT64_MAX: the whole run). */
static int64_t ref_bytes(const cf_graph *g, int ranks, int64_t clip) {
  int64_t base = 0, live = 0, peak = 0;
  int *first = calloc((size_t)g->n_nodes + 2, sizeof *first), *uses = NULL;
  if (!first) return 0;
  for (int i = 0; i < g->n_nodes; i++)
    first[i + 1] = first[i] + g->nodes[i].n_out;
  uses = calloc((size_t)first[g->n_nodes] + 1, sizeof *uses);
  if (!uses) {
    free(first);
    return 0;
  }
  for (int i = 0; i < g->n_nodes; i++)
    for (int j = 0; j < g->nodes[i].n_in; j++)
      uses[first[g->nodes[i].in[j].node] + g->nodes[i].in[j].port]++;
  /* run_node's order: a node's results appear, unused ones go at once, then
   * its operands' last uses free them; Output copies stay to the end */
  for (int k = 0; k < g->n_nodes; k++) {
    const cf_node *n = &g->nodes[g->topo[k]];
    int64_t extra = 0; /* freed within the node: fused products (fills go through a small buffer) */
    if (n->op == CF_OP_OUTPUT) {
      base += value_bytes(&g->nodes[n->in[0].node].out[n->in[0].port], ranks, clip);
    } else {
      for (int p = 0; p < n->n_out; p++)
        live += value_bytes(&n->out[p], ranks, clip);
      /* a fused matmul op: every rank's product, at most world x the output */
      if (cf_op_table[n->op].cat == CF_CAT_FUSED_MATMUL)
        extra = value_bytes(&n->out[0], ranks, clip) * ranks;
    }
    if (base + live + extra > peak) peak = base + live + extra;
    for (int p = 0; p < n->n_out; p++)
      if (n->op != CF_OP_OUTPUT && uses[first[g->topo[k]] + p] == 0)
        live -= value_bytes(&n->out[p], ranks, clip);
    for (int j = 0; j < n->n_in; j++) {
      const cf_ref in = n->in[j];
      if (--uses[first[in.node] + in.port] == 0)
        live -= value_bytes(&g->nodes[in.node].out[in.port], ranks, clip);
    }
  }
  free(uses);
  free(first);
  return peak;
}

int64_t cf_reference_bytes(const cf_graph *g, int ranks) { return ref_bytes(g, ranks, INT64_MAX); }

int64_t cf_reference_window_bytes(const cf_graph *g, int ranks, int64_t window) {
  return ref_bytes(g, ranks, window > 0 ? window : 1);
}

/* Element e of each output of n depends on element e of its operands only
 * (and on nothing else of theirs), and their sizes agree. */
static bool elementwise(const cf_graph *g, const cf_node *n) {
  switch (n->op) {
  case CF_OP_INPUT:
  case CF_OP_CONSTANT:
  case CF_OP_OPAQUE: /* filled whatever its operands hold */
  case CF_OP_OUTPUT: return true;
  case CF_OP_ADD:
  case CF_OP_SUB:
  case CF_OP_MUL:
  case CF_OP_CAST:
  case CF_OP_RESHAPE:
  case CF_OP_ALLREDUCE:
  case CF_OP_REDUCE:
  case CF_OP_BROADCAST:
  case CF_OP_COLLECTIVEPERMUTE:
  case CF_OP_FUSEDALLREDUCE: break;
  default: return false;
  }
  bool per_port = n->op == CF_OP_FUSEDALLREDUCE; /* operand j to port j */
  for (int j = 0; j < n->n_in; j++) {
    const cf_value *a = &g->nodes[n->in[j].node].out[n->in[j].port], *o = &n->out[per_port ? j : 0];
    int64_t ca, co;
    if (!cf_shape_elements(&a->shape, &ca) || !cf_shape_elements(&o->shape, &co) || ca != co)
      return false; /* broadcasting */
  }
  return true;
}

bool cf_reference_streams(const cf_graph *g) {
  for (int i = 0; i < g->n_nodes; i++)
    if (!elementwise(g, &g->nodes[i])) return false;
  return true;
}
void cf_ref_free(cf_ref_value *v, int count) {
  if (!v) return;
  for (int i = 0; i < count; i++) val_free(&v[i]);
  free(v);
}

/* cf_reference_run, or with window its part [lo, hi) */
static cf_status evaluate(cf_context *ctx, const cf_graph *g, const cf_inputs *in, uint64_t seed,
                          bool window, int64_t lo, int64_t hi, cf_ref_value **out, int *n_outputs) {
  cf_status st;
  ref_run r = {.ctx = ctx,
               .g = g,
               .in = in,
               .seed = seed,
               .R = in ? in->ranks : 0,
               .window = window,
               .lo = lo,
               .hi = hi};
  cf_ref_value *res = NULL;
  int nout = 0;
  if (out) *out = NULL;
  if (n_outputs) *n_outputs = 0;
  if (!g || !in || !out || !n_outputs || in->ranks <= 0 || in->n < 0 ||
      (in->n > 0 && (!in->names || !in->data)) || !g->topo) {
    st = cf_error(ctx, CF_ERR_USAGE, NULL, 0, "reference: needs a verified graph, ranks > 0 and inputs");
    goto fail;
  }
  if ((st = prepare(&r, &nout))) goto fail;
  if ((int64_t)nout * r.R > INT32_MAX) {
    st = cf_error(ctx, CF_ERR_USAGE, NULL, 0, "reference: %d outputs on %d ranks are too many",
                  nout, r.R);
    goto fail;
  }
  res = calloc((size_t)nout * (size_t)r.R + 1, sizeof *res);
  if (!res) {
    st = cf_error(ctx, CF_ERR_NO_MEMORY, NULL, 0, "reference: out of memory");
    goto fail;
  }
  for (int k = 0; k < g->n_nodes; k++)
    if ((st = run_node(&r, g->topo[k], res, nout))) goto fail;
  *out = res;
  *n_outputs = nout;
  res = NULL;
fail:
  cf_ref_free(res, res ? nout * r.R : 0);
  for (int i = 0; r.vals && i < g->n_nodes; i++) {
    if (!r.vals[i]) continue;
    for (int p = 0; p < g->nodes[i].n_out * r.R; p++) val_free(&r.vals[i][p]);
    free(r.vals[i]);
  }
  free(r.vals);
  free(r.base);
  free(r.uses);
  free(r.live);
  free(r.input_of);
  free(r.out_index);
  free(r.world);
  return st;
}

cf_status cf_reference_run(cf_context *ctx, const cf_graph *g, const cf_inputs *in, uint64_t seed,
                           cf_ref_value **out, int *n_outputs) {
  return evaluate(ctx, g, in, seed, false, 0, 0, out, n_outputs);
}

cf_status cf_reference_window(cf_context *ctx, const cf_graph *g, const cf_inputs *in,
                              uint64_t seed, int64_t lo, int64_t hi, cf_ref_value **out,
                              int *n_outputs) {
  if (lo < 0 || hi <= lo) {
    if (out) *out = NULL;
    if (n_outputs) *n_outputs = 0;
    return cf_error(ctx, CF_ERR_USAGE, NULL, 0,
                    "reference: window [%lld, %lld) is empty or negative", (long long)lo,
                    (long long)hi);
  }
  return evaluate(ctx, g, in, seed, true, lo, hi, out, n_outputs);
}
