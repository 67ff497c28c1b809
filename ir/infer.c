/* infer.c - shape and dtype inference, one case per op, in topological order.
 * Each case checks the op's rules (docs/format.md) on its operands' types,
 * writes the node's output types, and finally the declared dtype/shape of the
 * node (if any) must agree with what was inferred.
 */
#include "ir.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SHAPE_STR(s, buf) cf_shape_format((s), (buf), sizeof(buf))


static const cf_value *operand(const cf_graph *g, const cf_node *n, int j) {
  const cf_node *src = &g->nodes[n->in[j].node];
  return &src->out[n->in[j].port];
}

/* Ranks the collective n spans, or -1 with an error set. */
static int64_t coll_size(cf_graph *g, const cf_node *n) {
  const cf_attr *ws = cf_node_attr(n, CF_A_WORLD_SIZE);
  if (ws) return ws->v.i;
  const cf_attr *rs = cf_node_attr(n, CF_A_RANK_SIZE);
  if (rs) return rs->v.i;
  int64_t s = cf_graph_group_size(g, cf_node_group(n));
  if (s <= 0)
    cf_node_error(g, n, CF_ERR_INVALID,
                  "size of group '%s' unknown: set world_size on the graph or rank_size here",
                  cf_node_group(n));
  return s;
}

static cf_status need_rank(cf_graph *g, cf_node *n, const cf_value *v, int j, int rank) {
  if (v->shape.rank != rank)
    return cf_node_error(g, n, CF_ERR_INVALID, "operand %d must be %d-D, got %d-D", j, rank,
                         v->shape.rank);
  return CF_OK;
}

/* numpy broadcasting of a and b into out */
static cf_status broadcast(cf_graph *g, cf_node *n, const cf_shape *a, const cf_shape *b,
                           cf_shape *out) {
  char ba[160], bb[160];
  int r = a->rank > b->rank ? a->rank : b->rank;
  out->rank = r;
  for (int i = 0; i < r; i++) {
    int ia = a->rank - r + i, ib = b->rank - r + i;
    int64_t da = ia >= 0 ? a->dims[ia] : 1, db = ib >= 0 ? b->dims[ib] : 1;
    if (da != db && da != 1 && db != 1)
      return cf_node_error(g, n, CF_ERR_INVALID, "shapes (%s) and (%s) do not broadcast",
                           SHAPE_STR(a, ba), SHAPE_STR(b, bb));
    out->dims[i] = da == 1 ? db : da;
  }
  return CF_OK;
}

/* (m,k) @ (k,n) -> (m,n) */
static cf_status matmul_shape(cf_graph *g, cf_node *n, const cf_value *x1, const cf_value *x2,
                              cf_shape *out) {
  cf_status st;
  if ((st = need_rank(g, n, x1, 0, 2)) || (st = need_rank(g, n, x2, 1, 2))) return st;
  if (x1->shape.dims[1] != x2->shape.dims[0])
    return cf_node_error(g, n, CF_ERR_INVALID, "matmul k mismatch: x1 is (%lld,%lld), x2 is (%lld,%lld)",
                         (long long)x1->shape.dims[0], (long long)x1->shape.dims[1],
                         (long long)x2->shape.dims[0], (long long)x2->shape.dims[1]);
  out->rank = 2;
  out->dims[0] = x1->shape.dims[0];
  out->dims[1] = x2->shape.dims[1];
  return CF_OK;
}

static cf_status same_dtype(cf_graph *g, cf_node *n, const cf_value *a, const cf_value *b) {
  if (a->dtype != b->dtype)
    return cf_node_error(g, n, CF_ERR_INVALID, "operand dtypes differ: %s and %s",
                         cf_dtype_name(a->dtype), cf_dtype_name(b->dtype));
  return CF_OK;
}

static cf_status scale_shapes(cf_graph *g, cf_node *n, const cf_value *s1, const cf_value *s2,
                              int64_t m, int64_t nn) {
  if (s1->dtype != CF_DT_FLOAT32 || s2->dtype != CF_DT_FLOAT32)
    return cf_node_error(g, n, CF_ERR_INVALID, "x1_scale and x2_scale must be float32, got %s and %s",
                         cf_dtype_name(s1->dtype), cf_dtype_name(s2->dtype));
  if (s1->shape.rank != 2 || s1->shape.dims[0] != m || s1->shape.dims[1] != 1)
    return cf_node_error(g, n, CF_ERR_INVALID, "x1_scale must have shape (%lld,1) (per token)",
                         (long long)m);
  if (s2->shape.rank != 2 || s2->shape.dims[0] != 1 || s2->shape.dims[1] != nn)
    return cf_node_error(g, n, CF_ERR_INVALID, "x2_scale must have shape (1,%lld) (per channel)",
                         (long long)nn);
  return CF_OK;
}

static cf_status bias_check(cf_graph *g, cf_node *n, const cf_value *b, cf_dtype want, int64_t nn) {
  if (b->shape.rank != 1 || b->shape.dims[0] != nn)
    return cf_node_error(g, n, CF_ERR_INVALID, "bias must be 1-D of size n=%lld", (long long)nn);
  if (b->dtype != want)
    return cf_node_error(g, n, CF_ERR_INVALID, "bias must be %s, got %s", cf_dtype_name(want),
                         cf_dtype_name(b->dtype));
  return CF_OK;
}

static cf_dtype quant_out_dtype(cf_graph *g, cf_node *n, cf_status *st) {
  cf_dtype od = (cf_dtype)cf_node_int(n, CF_A_OUTPUT_DTYPE, CF_DT_BFLOAT16);
  *st = CF_OK;
  if (od != CF_DT_BFLOAT16 && od != CF_DT_FLOAT16)
    *st = cf_node_error(g, n, CF_ERR_INVALID, "output_dtype must be bfloat16 or float16, got %s",
                        cf_dtype_name(od));
  return od;
}

/* torch_npu's fused op rejects a non-zero bias ("bias input is not supported
 * when non-zero"), so a MatmulReduceScatter bias must be provably zero: an
 * Input or Constant with init="zeros", or a Constant with value 0. */
static cf_status bias_zero(cf_graph *g, cf_node *n, int j) {
  const cf_node *b = &g->nodes[n->in[j].node];
  const char *init = cf_node_str(b, CF_A_INIT, NULL);
  const cf_attr *val = cf_node_attr(b, CF_A_VALUE);
  bool zero = (b->op == CF_OP_INPUT || b->op == CF_OP_CONSTANT) && init && !strcmp(init, "zeros");
  zero |= b->op == CF_OP_CONSTANT && !init && val && val->v.f == 0.0;
  if (!zero)
    return cf_node_error(g, n, CF_ERR_INVALID,
                         "bias '%s' must be absent or zero (an Input/Constant with init=\"zeros\")",
                         b->name);
  return CF_OK;
}

/* MatmulReduceScatter / MatmulAllReduce operands: x1, x2, then
 *   plain:      [bias]
 *   quantized:  x1_scale, x2_scale          (4 operands; x1 int8)
 *               bias, x1_scale, x2_scale    (5 operands) */
static cf_status fused_matmul(cf_graph *g, cf_node *n, cf_value *out) {
  cf_status st;
  const cf_value *x1 = operand(g, n, 0), *x2 = operand(g, n, 1);
  if ((st = matmul_shape(g, n, x1, x2, &out->shape))) return st;
  if ((st = same_dtype(g, n, x1, x2))) return st;
  int64_t m = out->shape.dims[0], nn = out->shape.dims[1];
  bool quant = x1->dtype == CF_DT_INT8;
  if (cf_node_reduction(n) != CF_RED_SUM)
    return cf_node_error(g, n, CF_ERR_INVALID, "reduction must be sum, got %s",
                         cf_reduction_name(cf_node_reduction(n)));
  if (quant) {
    if (n->op != CF_OP_MATMULREDUCESCATTER)
      return cf_node_error(g, n, CF_ERR_INVALID,
                           "%s has no quantized form: int8 operands need a MatmulReduceScatter with "
                           "x1_scale and x2_scale", cf_op_table[n->op].name);
    if (n->n_in < 4)
      return cf_node_error(g, n, CF_ERR_INVALID,
                           "int8 operands need x1_scale and x2_scale (quantized MatmulReduceScatter)");
    if ((st = scale_shapes(g, n, operand(g, n, n->n_in - 2), operand(g, n, n->n_in - 1), m, nn)))
      return st;
    if (n->n_in == 5 && (st = bias_check(g, n, operand(g, n, 2), CF_DT_INT32, nn))) return st;
    if (n->n_in == 5 && (st = bias_zero(g, n, 2))) return st;
    out->dtype = quant_out_dtype(g, n, &st);
    if (st) return st;
  } else {
    if (x1->dtype != CF_DT_FLOAT16 && x1->dtype != CF_DT_BFLOAT16 && x1->dtype != CF_DT_FLOAT32)
      return cf_node_error(g, n, CF_ERR_INVALID,
                           "x1 must be float16, bfloat16, float32 or int8 (quantized), got %s",
                           cf_dtype_name(x1->dtype));
    if (n->n_in > 3)
      return cf_node_error(g, n, CF_ERR_INVALID, "%d operands: only the quantized (int8) form takes scales",
                           n->n_in);
    if (cf_node_attr(n, CF_A_OUTPUT_DTYPE))
      return cf_node_error(g, n, CF_ERR_INVALID, "output_dtype is only allowed with the quantized (int8) form");
    if (n->n_in == 3 && (st = bias_check(g, n, operand(g, n, 2), x1->dtype, nn))) return st;
    if (n->n_in == 3 && n->op == CF_OP_MATMULREDUCESCATTER && (st = bias_zero(g, n, 2))) return st;
    out->dtype = x1->dtype;
  }
  int64_t ws = coll_size(g, n);
  if (ws <= 0) return CF_ERR_INVALID;
  if (n->op == CF_OP_MATMULREDUCESCATTER) {
    if (m % ws)
      return cf_node_error(g, n, CF_ERR_INVALID, "m=%lld is not divisible by world_size=%lld",
                           (long long)m, (long long)ws);
    out->shape.dims[0] = m / ws;
  }
  return CF_OK;
}

/* d, n's gather or scatter dimension: a dimension of v, else an error
 * naming it. */
static cf_status dim_check(cf_graph *g, cf_node *n, const cf_value *v, int64_t d) {
  if (d < 0 || d >= v->shape.rank)
    return cf_node_error(g, n, CF_ERR_INVALID, "dim=%lld is not a dimension of the %d-D input",
                         (long long)d, v->shape.rank);
  return CF_OK;
}

/* One AllGather / ReduceScatter along dim d applied to value v. */
static cf_status gather_shape(cf_graph *g, cf_node *n, const cf_value *v, int64_t rs,
                              cf_layout lay, int64_t d, cf_value *out) {
  char b[160];
  *out = *v;
  if (lay == CF_LAYOUT_STACK) {
    if (d != 0)
      return cf_node_error(g, n, CF_ERR_INVALID,
                           "dim=%lld needs layout=\"concat\" (stack adds a new dim 0)",
                           (long long)d);
    if (v->shape.rank >= CF_MAX_RANK)
      return cf_node_error(g, n, CF_ERR_INVALID,
                           "stack layout needs an input of rank < %d, got rank %d (%s)",
                           CF_MAX_RANK, v->shape.rank, SHAPE_STR(&v->shape, b));
    memmove(out->shape.dims + 1, v->shape.dims, (size_t)v->shape.rank * sizeof(int64_t));
    out->shape.dims[0] = rs;
    out->shape.rank = v->shape.rank + 1;
  } else {
    if (v->shape.rank < 1)
      return cf_node_error(g, n, CF_ERR_INVALID, "concat layout needs an input of rank >= 1");
    cf_status st = dim_check(g, n, v, d);
    if (st) return st;
    if (!cf_mul_i64(v->shape.dims[d], rs, &out->shape.dims[d]))
      return cf_node_error(g, n, CF_ERR_INVALID, "gathered dim %lld overflows", (long long)d);
  }
  return CF_OK;
}

static cf_status scatter_shape(cf_graph *g, cf_node *n, const cf_value *v, int64_t rs,
                               int64_t d, cf_value *out) {
  *out = *v;
  if (v->shape.rank < 1)
    return cf_node_error(g, n, CF_ERR_INVALID, "ReduceScatter needs an input of rank >= 1");
  cf_status st = dim_check(g, n, v, d);
  if (st) return st;
  if (v->shape.dims[d] % rs) {
    if (d == 0)
      return cf_node_error(g, n, CF_ERR_INVALID, "dim0=%lld is not divisible by rank_size=%lld",
                           (long long)v->shape.dims[0], (long long)rs);
    return cf_node_error(g, n, CF_ERR_INVALID, "dim %lld (%lld) is not divisible by rank_size=%lld",
                         (long long)d, (long long)v->shape.dims[d], (long long)rs);
  }
  out->shape.dims[d] = v->shape.dims[d] / rs;
  return CF_OK;
}

/* AllToAll (XLA) for operand v: one operand is cut into rs blocks along
 * split_dimension and the rs blocks received are concatenated along
 * concat_dimension; rs operands of one type (the tuple form) are exchanged
 * whole, operand j to rank j, so output i is what rank i sent. A
 * FusedAllToAll's members are each the one operand of the array form. */
static cf_status alltoall_value(cf_graph *g, cf_node *n, const cf_value *v, int64_t rs,
                                cf_value *out) {
  const cf_value *v0 = operand(g, n, 0);
  char b[160];
  int64_t sc = cf_node_int(n, CF_A_SPLIT_COUNT, rs);
  if (sc != rs)
    return cf_node_error(g, n, CF_ERR_INVALID, "split_count=%lld but the group has %lld ranks",
                         (long long)sc, (long long)rs);
  if (n->n_in > 1 && n->op == CF_OP_ALLTOALL) {
    if (n->n_in != rs)
      return cf_node_error(g, n, CF_ERR_INVALID,
                           "AllToAll with %d operands (the tuple form) needs one per rank: the "
                           "group has %lld ranks",
                           n->n_in, (long long)rs);
    if (!cf_shape_equal(&v->shape, &v0->shape))
      return cf_node_error(g, n, CF_ERR_INVALID,
                           "the tuple form's operands must share a shape: (%s) is not operand 0's",
                           SHAPE_STR(&v->shape, b));
    *out = *v;
    return CF_OK;
  }
  int64_t sd = cf_node_int(n, CF_A_SPLIT_DIMENSION, 0),
          cd = cf_node_int(n, CF_A_CONCAT_DIMENSION, 0);
  if (v->shape.rank < 1)
    return cf_node_error(g, n, CF_ERR_INVALID, "AllToAll needs an input of rank >= 1");
  if (sd < 0 || sd >= v->shape.rank || cd < 0 || cd >= v->shape.rank)
    return cf_node_error(g, n, CF_ERR_INVALID,
                         "split_dimension=%lld and concat_dimension=%lld must be dims of the "
                         "%d-D input",
                         (long long)sd, (long long)cd, v->shape.rank);
  if (v->shape.dims[sd] % rs)
    return cf_node_error(g, n, CF_ERR_INVALID,
                         "dim %lld (%lld) is not divisible by split_count=%lld", (long long)sd,
                         (long long)v->shape.dims[sd], (long long)rs);
  *out = *v;
  out->shape.dims[sd] /= rs;
  if (!cf_mul_i64(out->shape.dims[cd], rs, &out->shape.dims[cd]))
    return cf_node_error(g, n, CF_ERR_INVALID, "concatenated dim %lld overflows", (long long)cd);
  return CF_OK;
}

/* The output of plain collective coll for operand j (value v) over rs
 * ranks: a plain collective's rule, and each member's of a fused one. */
static cf_status coll_value(cf_graph *g, cf_node *n, cf_op coll, int j, const cf_value *v,
                            int64_t rs, cf_value *out) {
  switch (coll) {
  case CF_OP_ALLGATHER:
    return gather_shape(g, n, v, rs, cf_node_layout(n), cf_node_member_dim(n, j), out);
  case CF_OP_REDUCESCATTER: return scatter_shape(g, n, v, rs, cf_node_member_dim(n, j), out);
  case CF_OP_ALLREDUCE:
  case CF_OP_REDUCE:
  case CF_OP_BROADCAST:
  case CF_OP_COLLECTIVEPERMUTE: *out = *v; return CF_OK;
  case CF_OP_ALLTOALL: return alltoall_value(g, n, v, rs, out);
  default:
    return cf_node_error(g, n, CF_ERR_INVALID, "no inference rule for %s", cf_op_table[coll].name);
  }
}

static cf_status infer_node(cf_graph *g, cf_node *n) {
  cf_status st = CF_OK;
  cf_value *out = n->out;
  int64_t rs;
  cf_category cat = cf_op_table[n->op].cat;
  if (cat == CF_CAT_COLLECTIVE || cat == CF_CAT_FUSED_COLLECTIVE) { /* one value per operand */
    if ((rs = coll_size(g, n)) <= 0) return CF_ERR_INVALID;
    for (int j = 0; j < n->n_in; j++) {
      const cf_value *v = operand(g, n, j);
      /* data that is not reduced may mix dtypes (a byte bucket, as XLA's
       * AllGatherCombiner and Inductor's bucketing make) */
      if (v->dtype != operand(g, n, 0)->dtype && cf_op_coll(n->op) != CF_OP_ALLGATHER &&
          n->op != CF_OP_FUSEDALLTOALL)
        return cf_node_error(g, n, CF_ERR_INVALID,
                             "fused operands must share a dtype: %d is %s, 0 is %s", j,
                             cf_dtype_name(v->dtype), cf_dtype_name(operand(g, n, 0)->dtype));
      if ((st = coll_value(g, n, cf_op_coll(n->op), j, v, rs, &out[j]))) return st;
    }
    /* bool sums by or (XLA's pred add); a mean of truth values is nothing */
    if (n->n_in && operand(g, n, 0)->dtype == CF_DT_BOOL && cf_op_reduces(cf_op_coll(n->op)) &&
        cf_node_reduction(n) == CF_RED_MEAN)
      return cf_node_error(g, n, CF_ERR_INVALID,
                           "reduction mean is not defined on bool (sum is or, prod is and)");
    return CF_OK;
  }
  switch (n->op) {
  case CF_OP_CONSTANT: {
    /* the value must fit the dtype: a saturated or rounded-away constant
     * would be a silent change */
    const cf_attr *val = cf_node_attr(n, CF_A_VALUE);
    char why[160];
    if (val && !cf_dtype_holds(n->decl[0].v.dtype, val->v.f, why, sizeof why))
      return cf_node_error(g, n, CF_ERR_INVALID, "value %s", why);
  }
    /* fall through */
  case CF_OP_INPUT:
  case CF_OP_OPAQUE:
    for (int i = 0; i < n->n_out; i++) out[i] = n->decl[i].v;
    return CF_OK;
  case CF_OP_OUTPUT:
    return CF_OK;
  case CF_OP_MATMUL: {
    const cf_value *x1 = operand(g, n, 0), *x2 = operand(g, n, 1);
    if ((st = matmul_shape(g, n, x1, x2, &out->shape)) || (st = same_dtype(g, n, x1, x2))) return st;
    /* integer products accumulate exactly in a wider type */
    if ((out->dtype = cf_dtype_matmul_out(x1->dtype)) == CF_DT_INVALID)
      return cf_node_error(g, n, CF_ERR_INVALID, "MatMul of %s is not supported",
                           cf_dtype_name(x1->dtype));
    return CF_OK;
  }
  case CF_OP_QUANTMATMUL: {
    const cf_value *x1 = operand(g, n, 0), *x2 = operand(g, n, 1);
    if ((st = matmul_shape(g, n, x1, x2, &out->shape))) return st;
    if (x1->dtype != CF_DT_INT8 || x2->dtype != CF_DT_INT8)
      return cf_node_error(g, n, CF_ERR_INVALID, "QuantMatMul needs int8 x1 and x2, got %s and %s",
                           cf_dtype_name(x1->dtype), cf_dtype_name(x2->dtype));
    if ((st = scale_shapes(g, n, operand(g, n, 2), operand(g, n, 3), out->shape.dims[0],
                           out->shape.dims[1])))
      return st;
    if (n->n_in == 5 && (st = bias_check(g, n, operand(g, n, 4), CF_DT_INT32, out->shape.dims[1])))
      return st;
    out->dtype = quant_out_dtype(g, n, &st);
    return st;
  }
  case CF_OP_ADD:
  case CF_OP_SUB:
  case CF_OP_MUL: {
    const cf_value *a = operand(g, n, 0), *b = operand(g, n, 1);
    if ((st = same_dtype(g, n, a, b))) return st;
    out->dtype = a->dtype;
    return broadcast(g, n, &a->shape, &b->shape, &out->shape);
  }
  case CF_OP_CAST:
    out->shape = operand(g, n, 0)->shape;
    out->dtype = (cf_dtype)cf_node_int(n, CF_A_DTYPE, CF_DT_INVALID);
    return CF_OK;
  case CF_OP_RESHAPE: {
    const cf_value *x = operand(g, n, 0);
    int64_t e1, e2;
    char b1[160], b2[160];
    out->dtype = x->dtype;
    out->shape = n->decl[0].v.shape;
    if (!cf_shape_elements(&x->shape, &e1) || !cf_shape_elements(&out->shape, &e2) || e1 != e2)
      return cf_node_error(g, n, CF_ERR_INVALID, "cannot reshape (%s) to (%s): element counts differ",
                           SHAPE_STR(&x->shape, b1), SHAPE_STR(&out->shape, b2));
    return CF_OK;
  }
  case CF_OP_SHARD:
    out->dtype = operand(g, n, 0)->dtype;
    return cf_shard_block(g, n, &operand(g, n, 0)->shape, -1, &out->shape, NULL);
  case CF_OP_MATMULREDUCESCATTER:
  case CF_OP_MATMULALLREDUCE:
    return fused_matmul(g, n, out);
  case CF_OP_ALLGATHERMATMUL: {
    const cf_value *x1 = operand(g, n, 0);
    if ((rs = coll_size(g, n)) <= 0) return CF_ERR_INVALID;
    if ((st = need_rank(g, n, x1, 0, 2))) return st;
    if (x1->dtype != CF_DT_FLOAT16 && x1->dtype != CF_DT_BFLOAT16 && x1->dtype != CF_DT_FLOAT32)
      return cf_node_error(g, n, CF_ERR_INVALID, "x1 must be float16, bfloat16 or float32, got %s",
                           cf_dtype_name(x1->dtype));
    cf_value gathered;
    if ((st = gather_shape(g, n, x1, rs, CF_LAYOUT_CONCAT, 0, &gathered))) return st;
    for (int j = 1; j < n->n_in; j++) {
      const cf_value *x2 = operand(g, n, j);
      if ((st = same_dtype(g, n, x1, x2))) return st;
      out[j - 1].dtype = x1->dtype;
      if ((st = matmul_shape(g, n, &gathered, x2, &out[j - 1].shape))) return st;
    }
    out[n->n_in - 1] = gathered;
    return CF_OK;
  }
  default:
    return cf_node_error(g, n, CF_ERR_INVALID, "no inference rule for %s", cf_op_table[n->op].name);
  }
}

/* A fused collective's offsets place each member in one flat bucket buffer:
 * one offset per member, aligned to the element size, members not
 * overlapping. */
static cf_status check_offsets(cf_graph *g, cf_node *n) {
  cf_ints offs = cf_node_ints(n, CF_A_OFFSETS);
  if (offs.n < 0) return CF_OK;
  int64_t end = 0;
  for (int k = 0; k < offs.n && k < n->n_in; k++) {
    int64_t off = offs.v[k];
    const cf_value *v = operand(g, n, k);
    int64_t bytes = 0;
    cf_value_bytes(v, &bytes);
    if (off < end || off % cf_dtype_size(v->dtype))
      return cf_node_error(
          g, n, CF_ERR_INVALID,
          "offset %lld of member %d overlaps the previous member or is not aligned to %d bytes",
          (long long)off, k, cf_dtype_size(v->dtype));
    if (!cf_add_i64(off, bytes, &end) || end > CF_MAX_BYTES)
      return cf_node_error(g, n, CF_ERR_INVALID, "bucket larger than %lld bytes",
                           (long long)CF_MAX_BYTES);
  }
  if (offs.n > n->n_in) {
    char text[80];
    cf_attr_text(cf_node_attr(n, CF_A_OFFSETS), text, sizeof text);
    return cf_node_error(g, n, CF_ERR_INVALID, "offsets='%.64s' must list %d byte offsets", text,
                         n->n_in);
  }
  if (offs.n < n->n_in)
    return cf_node_error(g, n, CF_ERR_INVALID, "offsets lists %d offsets for %d members", offs.n,
                         n->n_in);
  return CF_OK;
}

static cf_status check_decl(cf_graph *g, cf_node *n) {
  char b1[160], b2[160];
  if (n->op == CF_OP_OUTPUT) {
    if (!n->n_decl) return CF_OK;
    const cf_value *v = operand(g, n, 0);
    if (n->decl[0].has_dtype && n->decl[0].v.dtype != v->dtype)
      return cf_node_error(g, n, CF_ERR_INVALID, "declared dtype %s but the value is %s",
                           cf_dtype_name(n->decl[0].v.dtype), cf_dtype_name(v->dtype));
    if (n->decl[0].has_shape && !cf_shape_equal(&n->decl[0].v.shape, &v->shape))
      return cf_node_error(g, n, CF_ERR_INVALID, "declared shape (%s) but the value has shape (%s)",
                           SHAPE_STR(&n->decl[0].v.shape, b1), SHAPE_STR(&v->shape, b2));
    return CF_OK;
  }
  for (int i = 0; i < n->n_decl && i < n->n_out; i++) {
    const cf_decl *d = &n->decl[i];
    if (d->has_dtype && d->v.dtype != n->out[i].dtype)
      return cf_node_error(g, n, CF_ERR_INVALID, "declared dtype %s but inferred %s",
                           cf_dtype_name(d->v.dtype), cf_dtype_name(n->out[i].dtype));
    if (d->has_shape && !cf_shape_equal(&d->v.shape, &n->out[i].shape))
      return cf_node_error(g, n, CF_ERR_INVALID, "declared shape (%s) but inferred (%s)",
                           SHAPE_STR(&d->v.shape, b1), SHAPE_STR(&n->out[i].shape, b2));
  }
  for (int i = 0; i < n->n_out; i++) {
    int64_t bytes;
    if (!cf_value_bytes(&n->out[i], &bytes))
      return cf_node_error(g, n, CF_ERR_INVALID,
                           "output %d of shape (%s) is too large (limits: %lld elements, %lld bytes)",
                           i, SHAPE_STR(&n->out[i].shape, b1), (long long)CF_MAX_ELEMENTS,
                           (long long)CF_MAX_BYTES);
  }
  return CF_OK;
}

cf_status cf_infer_node(cf_graph *g, cf_node *n) {
  cf_status st;
  int nout = cf_node_n_outputs(n);
  if (n->n_out != nout || !n->out) {
    n->out = nout ? cf_arena_array(&g->arena, (size_t)nout, sizeof(cf_value)) : NULL;
    if (nout && !n->out) return cf_node_error(g, n, CF_ERR_NO_MEMORY, "out of memory");
    n->n_out = nout;
  }
  if ((st = infer_node(g, n)) || (st = check_decl(g, n)) || (st = check_offsets(g, n))) return st;
  return CF_OK;
}

cf_status cf_infer(cf_graph *g) {
  cf_status st;
  if (!g->topo) return cf_error(g->ctx, CF_ERR_INVALID, g->file, 0, "internal: infer before verify");
  for (int k = 0; k < g->n_nodes; k++)
    if ((st = cf_infer_node(g, &g->nodes[g->topo[k]]))) return st;
  return CF_OK;
}
