/* test_fused_matmul.c - numerical tests of the fused MatMul+collective ops
 * as the executor runs them (executor/fused_matmul.c and its chunk cost
 * model; the 8-bit products of executor/compute.c they use).
 *
 * The matrix: MatmulReduceScatter (float32, float16, bfloat16), the
 * quantized MatmulReduceScatter (int8 -> bfloat16 or float16, with and
 * without a zero int32 bias), MatmulAllReduce (float32, float16, bfloat16,
 * and a non-zero bias written directly) and AllGatherMatmul (one AllGather
 * feeding two MatMuls), each on 2, 4 and 8 rank threads. The fused ops come
 * from the pass (the unfused graph compiled by the default pipeline), with
 * comm_turn 0 (automatic), 1, 3 (which divides no row count here: chunks
 * of 5,5,3 rows, 10,10,9 and 4,4,3) and 64 (more than the rows: one row a
 * chunk); MatmulAllReduce and AllGatherMatmul have m not divisible by the
 * rank count. Inputs are random and never zero (int8 over its whole range,
 * and k = 1030 for int8 so the products cross the 1024-column blocks of the
 * sgemm path), lent to the run in caller buffers with guard bytes around
 * them, as are the outputs the run writes in place; afterwards every guard
 * and every input byte must be unchanged. Every output element is checked
 * against a float64 value computed here with a forward error bound for the
 * dtype: (k + ws + 2) float32 roundings of the GEMM and epilogue plus ws + 1
 * roundings of the output type (product and reduction steps), of the sum of
 * the magnitudes of the terms. The unfused graph (default pipeline without
 * fuse-matmul-collective) is checked the same way, and under
 * --deterministic the fused outputs must equal the unfused ones bit for bit
 * for every chunking.
 *
 * Also: the cost model's chunk counts, and the int8/uint8 MatMul is exact
 * (int64 reference, wrapping int32) across k blocks. (A MatmulReduceScatter
 * whose m does not divide by world_size never reaches the executor:
 * test_fuse_matmul.c checks that inference refuses it, fused or not.)
 */
#include "cf_test.h"

#include <math.h>
#include <unistd.h>

#include "api/api.h"
#include "executor/executor.h"
#include "executor/plan.h"
#include "ir/ir.h"
#include "passes/passes.h"

#define GUARD 64

static const char pipeline_sequential[] =
    "verify,infer,dce,fuse-allreduce,fuse-allgather,fuse-reducescatter";

/* ================= guarded caller buffers ================= */

/* A tensor whose data sits between two GUARD-byte runs of a pattern that
 * depends on the position, so a stray write of any byte value shows. */
typedef struct guarded {
  cf_tensor t;
  unsigned char *mem;
  size_t bytes;
} guarded;

static unsigned char guard_at(size_t i) { return (unsigned char)(0x5A ^ (i * 131u)); }

static void guarded_make(guarded *g, cf_dtype dt, int64_t rows, int64_t cols) {
  g->bytes = (size_t)(rows * cols * cf_dtype_size(dt));
  g->mem = malloc(g->bytes + 2 * GUARD);
  assert_non_null(g->mem);
  for (size_t i = 0; i < GUARD; i++) {
    g->mem[i] = guard_at(i);
    g->mem[GUARD + g->bytes + i] = guard_at(i + 1);
  }
  memset(g->mem + GUARD, 0xEE, g->bytes); /* an element nobody wrote shows */
  g->t = (cf_tensor){.data = g->mem + GUARD,
                     .dtype = dt,
                     .shape = {.rank = 2, .dims = {rows, cols}},
                     .count = rows * cols};
}

static void guarded_check(const guarded *g, const char *what, const char *cfg) {
  for (size_t i = 0; i < GUARD; i++) {
    if (g->mem[i] != guard_at(i))
      fail_msg("%s: guard byte %d before %s overwritten", cfg, (int)(i - GUARD), what);
    if (g->mem[GUARD + g->bytes + i] != guard_at(i + 1))
      fail_msg("%s: guard byte +%d after %s overwritten", cfg, (int)i, what);
  }
}

static void guarded_free(guarded *g) {
  free(g->mem);
  g->mem = NULL;
}

/* ================= random data, never zero ================= */

static uint64_t next(uint64_t *s) {
  *s ^= *s << 13;
  *s ^= *s >> 7;
  *s ^= *s << 17;
  return *s;
}

/* Floats +-[1/8, 1) (rounded to the dtype), int8 over -128..127 without 0,
 * scales in [1/256, 1/32): what a wrong index or a lost chunk cannot hide. */
static void fill(cf_tensor *t, uint64_t seed, bool scale) {
  uint64_t s = seed * 0x9E3779B97F4A7C15ull + 1;
  for (int64_t i = 0; i < t->count; i++) {
    uint64_t r = next(&s);
    double u = (double)(r >> 11) / 9007199254740992.0;
    if (t->dtype == CF_DT_INT8) {
      int v = (int)(r % 255) - 127; /* -127..127 */
      cf_store_f64(t->data, t->dtype, i, v ? v : -128);
    } else if (t->dtype == CF_DT_INT32) {
      cf_store_i64(t->data, t->dtype, i, 0); /* the quantized bias: zero, as the op requires */
    } else if (scale) {
      cf_store_f64(t->data, t->dtype, i, (1 + 7 * u) / 256);
    } else {
      cf_store_f64(t->data, t->dtype, i, (r & 1 ? -1 : 1) * (0.125 + 0.875 * u));
    }
  }
}

/* ================= the configurations ================= */

typedef enum op_kind { K_MMRS, K_QMMRS, K_MMAR, K_AGMM } op_kind;

static const char *const op_names[] = {"MatmulReduceScatter", "quantized MatmulReduceScatter",
                                       "MatmulAllReduce", "AllGatherMatmul"};

typedef struct cfg {
  op_kind op;
  cf_dtype dt;     /* x1 and x2 (int8 for the quantized form) */
  cf_dtype out_dt; /* the product's dtype */
  bool bias;       /* MatmulAllReduce: non-zero bias (written fused); quantized: zero bias */
  int ws;
  int64_t m, k, n, n2; /* m: x1 rows (AllGatherMatmul: per rank); n2: its second MatMul */
} cfg;

static const char *cfg_text(const cfg *c, char *buf, size_t len) {
  snprintf(buf, len, "%s %s%s%s on %d ranks (m=%lld k=%lld n=%lld)", op_names[c->op],
           cf_dtype_name(c->dt), c->op == K_QMMRS ? " -> " : "",
           c->op == K_QMMRS ? cf_dtype_name(c->out_dt) : "", c->ws, (long long)c->m,
           (long long)c->k, (long long)c->n);
  if (c->bias) snprintf(buf + strlen(buf), len - strlen(buf), " with bias");
  return buf;
}

/* The graph as a user writes it unfused (the MatmulAllReduce with a bias:
 * fused, since MatMul -> Add -> AllReduce is not a fusion pattern). */
static char *graph_xml(const cfg *c) {
  char *s = malloc(4096);
  assert_non_null(s);
  const char *d = cf_dtype_name(c->dt);
  long long m = c->m, k = c->k, n = c->n;
  int o = snprintf(s, 4096,
                   "<graph name='fmm' version='1' world_size='%d'>"
                   "<node name='x' op='Input' dtype='%s' shape='%lld,%lld'/>"
                   "<node name='w' op='Input' dtype='%s' shape='%lld,%lld'/>",
                   c->ws, d, m, k, d, k, n);
  switch (c->op) {
  case K_MMRS:
    o += snprintf(s + o, 4096 - o,
                  "<node name='mm' op='MatMul'><input ref='x'/><input ref='w'/></node>"
                  "<node name='rs' op='ReduceScatter' reduction='sum'><input ref='mm'/></node>"
                  "<node name='y' op='Output'><input ref='rs'/></node>");
    break;
  case K_QMMRS:
    if (c->bias) /* zero, as the fused op requires: the pass moves it to operand 2 */
      o += snprintf(s + o, 4096 - o,
                    "<node name='bias' op='Input' dtype='int32' shape='%lld' init='zeros'/>", n);
    o += snprintf(
        s + o, 4096 - o,
        "<node name='x1_scale' op='Input' dtype='float32' shape='%lld,1'/>"
        "<node name='x2_scale' op='Input' dtype='float32' shape='1,%lld'/>"
        "<node name='mm' op='QuantMatMul' output_dtype='%s'><input ref='x'/><input ref='w'/>"
        "<input ref='x1_scale'/><input ref='x2_scale'/>%s</node>"
        "<node name='rs' op='ReduceScatter' reduction='sum'><input ref='mm'/></node>"
        "<node name='y' op='Output'><input ref='rs'/></node>",
        m, n, cf_dtype_name(c->out_dt), c->bias ? "<input ref='bias'/>" : "");
    break;
  case K_MMAR:
    if (c->bias)
      o += snprintf(s + o, 4096 - o,
                    "<node name='bias' op='Input' dtype='%s' shape='%lld'/>"
                    "<node name='mmar' op='MatmulAllReduce' world_size='%d' reduction='sum'>"
                    "<input ref='x'/><input ref='w'/><input ref='bias'/></node>"
                    "<node name='y' op='Output'><input ref='mmar'/></node>",
                    d, n, c->ws);
    else
      o += snprintf(
          s + o, 4096 - o,
          "<node name='mm' op='MatMul'><input ref='x'/><input ref='w'/></node>"
          "<node name='ar' op='AllReduce' reduction='sum' fusion='0'><input ref='mm'/></node>"
          "<node name='y' op='Output'><input ref='ar'/></node>");
    break;
  case K_AGMM:
    o += snprintf(s + o, 4096 - o,
                  "<node name='w2' op='Input' dtype='%s' shape='%lld,%lld'/>"
                  "<node name='ag' op='AllGather' layout='concat'><input ref='x'/></node>"
                  "<node name='mm1' op='MatMul'><input ref='ag'/><input ref='w'/></node>"
                  "<node name='mm2' op='MatMul'><input ref='ag'/><input ref='w2'/></node>"
                  "<node name='y' op='Output'><input ref='mm1'/></node>"
                  "<node name='y2' op='Output'><input ref='mm2'/></node>",
                  d, k, (long long)c->n2);
    break;
  }
  snprintf(s + o, 4096 - o, "</graph>");
  return s;
}

/* ================= inputs, reference ================= */

enum { MAX_IN = 5, MAX_OUT = 2, MAXR = 8 };

typedef struct world_data {
  int n_in, n_out;
  const char *names[MAX_IN];
  guarded in[MAXR * MAX_IN]; /* [rank * n_in + j] */
  unsigned char *pristine[MAXR * MAX_IN];
  cf_tensor in_t[MAXR * MAX_IN];
  double *val[MAXR * MAX_OUT], *mag[MAXR * MAX_OUT]; /* reference [rank * n_out + j] */
  int64_t out_rows[MAX_OUT], out_cols[MAX_OUT];
} world_data;

static const cf_tensor *in_of(const world_data *d, int rank, const char *name) {
  for (int j = 0; j < d->n_in; j++)
    if (!strcmp(d->names[j], name)) return &d->in_t[rank * d->n_in + j];
  return NULL;
}

static double at(const cf_tensor *t, int64_t i) { return cf_load_f64(t->data, t->dtype, i); }

/* sum_p a[i][p] * b[p][j] and sum_p |a[i][p] * b[p][j]| */
static double dot(const cf_tensor *a, int64_t i, const cf_tensor *b, int64_t j, int64_t k,
                  int64_t n, double *mag) {
  double s = 0;
  *mag = 0;
  for (int64_t p = 0; p < k; p++) {
    double t = at(a, i * k + p) * at(b, p * n + j);
    s += t;
    *mag += fabs(t);
  }
  return s;
}

/* Inputs of every rank (with copies to check they stay unchanged) and the
 * float64 reference of every output. */
static void data_make(const cfg *c, const cf_graph *g, world_data *d) {
  memset(d, 0, sizeof *d);
  for (int i = 0; i < g->n_nodes; i++) {
    if (g->nodes[i].op == CF_OP_INPUT) d->names[d->n_in++] = g->nodes[i].name;
    if (g->nodes[i].op == CF_OP_OUTPUT) {
      const cf_node *src = &g->nodes[g->nodes[i].in[0].node];
      const cf_value *v = &src->out[g->nodes[i].in[0].port];
      d->out_rows[d->n_out] = v->shape.dims[0];
      d->out_cols[d->n_out++] = v->shape.dims[1];
    }
  }
  for (int r = 0; r < c->ws; r++)
    for (int j = 0; j < d->n_in; j++) {
      const cf_node *nd = &g->nodes[cf_graph_find(g, d->names[j])];
      const cf_value *v = &nd->out[0];
      int idx = r * d->n_in + j;
      guarded_make(&d->in[idx], v->dtype, v->shape.dims[0],
                   v->shape.rank > 1 ? v->shape.dims[1] : 1);
      d->in[idx].t.shape = v->shape;
      fill(&d->in[idx].t, (uint64_t)(1000 * r + 17 * j + 7 * c->ws + c->op),
           strstr(d->names[j], "scale") != NULL);
      d->in_t[idx] = d->in[idx].t;
      d->pristine[idx] = malloc(d->in[idx].bytes);
      memcpy(d->pristine[idx], d->in[idx].t.data, d->in[idx].bytes);
    }
  int ws = c->ws;
  for (int r = 0; r < ws; r++)
    for (int j = 0; j < d->n_out; j++) {
      int64_t rows = d->out_rows[j], cols = d->out_cols[j];
      double *val = d->val[r * d->n_out + j] = calloc((size_t)(rows * cols), sizeof(double));
      double *mag = d->mag[r * d->n_out + j] = calloc((size_t)(rows * cols), sizeof(double));
      for (int64_t i = 0; i < rows; i++)
        for (int64_t e = 0; e < cols; e++) {
          double *v = &val[i * cols + e], *mg = &mag[i * cols + e], am;
          if (c->op == K_AGMM) { /* row q*m + i of the gathered x1 times this rank's w */
            int q = (int)(i / c->m);
            *v = dot(in_of(d, q, "x"), i % c->m, in_of(d, r, j ? "w2" : "w"), e, c->k, cols, &am);
            *mg = am;
            continue;
          }
          int64_t row = c->op == K_MMAR ? i : r * rows + i; /* the row of every rank's product */
          for (int q = 0; q < ws; q++) {
            double t = dot(in_of(d, q, "x"), row, in_of(d, q, "w"), e, c->k, cols, &am);
            if (c->op == K_QMMRS) {
              double sc = at(in_of(d, q, "x1_scale"), row) * at(in_of(d, q, "x2_scale"), e);
              t *= sc;
              am = fabs(t);
            }
            if (c->op == K_MMAR && c->bias) {
              t += at(in_of(d, q, "bias"), e);
              am += fabs(at(in_of(d, q, "bias"), e));
            }
            *v += t;
            *mg += am;
          }
        }
    }
}

static void data_free(world_data *d, int ws) {
  for (int i = 0; i < ws * d->n_in; i++) {
    guarded_free(&d->in[i]);
    free(d->pristine[i]);
  }
  for (int i = 0; i < ws * d->n_out; i++) {
    free(d->val[i]);
    free(d->mag[i]);
  }
}

/* Unit roundoff of the product's dtype. */
static double unit_roundoff(cf_dtype dt) {
  return dt == CF_DT_FLOAT16 ? ldexp(1, -11) : dt == CF_DT_BFLOAT16 ? ldexp(1, -8) : ldexp(1, -24);
}

/* ================= runs ================= */

/* Compile the graph (pipeline; comm_turn >= 0 set on the fused op, which
 * must be there) and plan it; *rows_out: the fused op's chunk count. */
static cf_graph *compile(const char *xml, const char *pipeline, int comm_turn, const char *what) {
  cf_graph *g = NULL;
  cf_compile_options co = {.pipeline = pipeline};
  if (cf_graph_parse(ctx, "fmm.xml", xml, strlen(xml), &g) || cf_compile(g, &co))
    fail_msg("%s: compile: %s", what, cf_context_errmsg(ctx));
  const cf_node *f = NULL;
  for (int i = 0; i < g->n_nodes; i++)
    if (cf_op_table[g->nodes[i].op].cat == CF_CAT_FUSED_MATMUL) f = &g->nodes[i];
  if (pipeline == pipeline_sequential) {
    if (f) fail_msg("%s: the sequential pipeline fused '%s'", what, f->name);
    return g;
  }
  if (!f) fail_msg("%s: the default pipeline did not fuse", what);
  if (comm_turn >= 0 &&
      (cf_graph_set_attr_int(g, f->name, "comm_turn", comm_turn) || cf_graph_verify(g, NULL)))
    fail_msg("%s: comm_turn=%d: %s", what, comm_turn, cf_context_errmsg(ctx));
  return g;
}

/* Run g on the world's inputs, outputs into guarded caller buffers out[]
 * ([rank * n_out + j]), every guard and input checked afterwards; returns
 * the fused op's chunk count (0 without one). */
static int run(const cfg *c, const cf_graph *g, world_data *d, bool deterministic, guarded *out,
               const char *what) {
  cf_tensor outs[MAXR * MAX_OUT];
  for (int r = 0; r < c->ws; r++)
    for (int j = 0; j < d->n_out; j++) {
      guarded *o = &out[r * d->n_out + j];
      guarded_make(o, c->op == K_AGMM ? c->dt : c->out_dt, d->out_rows[j], d->out_cols[j]);
      outs[r * d->n_out + j] = o->t;
    }
  cf_inputs in = {.n = d->n_in,
                  .ranks = c->ws,
                  .names = d->names,
                  .data = d->in_t,
                  .borrow = true,
                  .outputs = outs};
  cf_run_options opt = {
      .ranks = c->ws, .iters = 1, .timeout_s = 60, .deterministic = deterministic};
  cf_plan *p = NULL;
  if (cf_plan_build(ctx, g, &opt, &p)) fail_msg("%s: plan: %s", what, cf_context_errmsg(ctx));
  int chunks = 0;
  for (int i = 0; i < p->n_colls; i++)
    if (p->colls[i].fused_mm) chunks = p->colls[i].chunks;
  cf_run_result res;
  if (cf_exec_run(ctx, p, &in, &res)) fail_msg("%s: run: %s", what, cf_context_errmsg(ctx));
  assert_true(res.caller_outputs);
  for (int i = 0; i < c->ws * d->n_out; i++)
    assert_ptr_equal(res.outputs[i].data, outs[i].data);
  cf_run_result_free(&res);
  cf_plan_destroy(p);
  for (int i = 0; i < c->ws * d->n_in; i++) {
    guarded_check(&d->in[i], d->names[i % d->n_in], what);
    if (memcmp(d->in[i].t.data, d->pristine[i], d->in[i].bytes))
      fail_msg("%s: input '%s' of rank %d changed", what, d->names[i % d->n_in], i / d->n_in);
  }
  for (int i = 0; i < c->ws * d->n_out; i++)
    guarded_check(&out[i], "an output", what);
  return chunks;
}

static void check_reference(const cfg *c, const world_data *d, const guarded *out,
                            const char *what) {
  double tol = (double)(c->k + c->ws + 2) * ldexp(1, -24) + (c->ws + 1) * unit_roundoff(c->out_dt);
  for (int r = 0; r < c->ws; r++)
    for (int j = 0; j < d->n_out; j++) {
      const cf_tensor *t = &out[r * d->n_out + j].t;
      const double *val = d->val[r * d->n_out + j], *mag = d->mag[r * d->n_out + j];
      for (int64_t i = 0; i < t->count; i++) {
        double got = at(t, i), err = fabs(got - val[i]);
        if (!(err <= tol * mag[i] + 1e-7))
          fail_msg("%s: output %d rank %d index %lld: got %.9g, expected %.9g (float64), error "
                   "%.3g > %.3g",
                   what, j, r, (long long)i, got, val[i], err, tol * mag[i]);
      }
    }
}

static void outputs_free(guarded *out, int count) {
  for (int i = 0; i < count; i++)
    guarded_free(&out[i]);
}

/* rows the pipeline chunks: the rank block (ReduceScatter), else x1's rows */
static int64_t pipeline_rows(const cfg *c) {
  return c->op == K_MMRS || c->op == K_QMMRS ? c->m / c->ws : c->m;
}

static void run_matrix(const cfg *c) {
  static const int turns[] = {0, 1, 3, 64};
  char what[256], base[160];
  cfg_text(c, base, sizeof base);
  char *xml = graph_xml(c);
  cf_graph *seq = compile(
      xml, c->bias && c->op == K_MMAR ? cf_pipeline_default : pipeline_sequential, -1, base);
  world_data d;
  data_make(c, seq, &d);
  guarded out[MAXR * MAX_OUT], ref_out[MAXR * MAX_OUT];
  int n_out = c->ws * d.n_out;
  /* the unfused graph against the reference too: the bound is not too tight */
  bool unfused = !(c->bias && c->op == K_MMAR);
  if (unfused) {
    snprintf(what, sizeof what, "%s, unfused", base);
    run(c, seq, &d, false, out, what);
    check_reference(c, &d, out, what);
    outputs_free(out, n_out);
    run(c, seq, &d, true, ref_out, what); /* deterministic: the bits the fused op must give */
  }
  int64_t rows = pipeline_rows(c);
  for (size_t t = 0; t < sizeof turns / sizeof *turns; t++) {
    snprintf(what, sizeof what, "%s, comm_turn=%d", base, turns[t]);
    cf_graph *g = compile(xml, cf_pipeline_default, turns[t], what);
    int chunks = run(c, g, &d, false, out, what);
    if (turns[t] > 0) { /* ceil(rows / ceil(rows / turn)) chunks */
      int64_t turn = turns[t] < rows ? turns[t] : rows, cr = (rows + turn - 1) / turn;
      assert_int_equal(chunks, (rows + cr - 1) / cr);
    } else {
      assert_true(chunks >= 1);
    }
    check_reference(c, &d, out, what);
    outputs_free(out, n_out);
    if (unfused && (turns[t] == 0 || turns[t] == 3)) { /* bitwise fused == unfused */
      run(c, g, &d, true, out, what);
      for (int i = 0; i < n_out; i++)
        if (memcmp(out[i].t.data, ref_out[i].t.data, out[i].bytes))
          fail_msg("%s, deterministic: rank %d output %d differs from the unfused graph's bits",
                   what, i / d.n_out, i % d.n_out);
      outputs_free(out, n_out);
    }
    cf_graph_destroy(g);
  }
  if (unfused) outputs_free(ref_out, n_out);
  data_free(&d, c->ws);
  cf_graph_destroy(seq);
  free(xml);
}

/* The matrix, one row per op and dtype, each run on 2, 4 and 8 ranks; m
 * of a MatmulReduceScatter is 13 rows per rank. */
static const cfg matrix[] = {
    {K_MMRS, CF_DT_FLOAT32, CF_DT_FLOAT32, false, 0, 13, 37, 19, 0},
    {K_MMRS, CF_DT_FLOAT16, CF_DT_FLOAT16, false, 0, 13, 37, 19, 0},
    {K_MMRS, CF_DT_BFLOAT16, CF_DT_BFLOAT16, false, 0, 13, 37, 19, 0},
    {K_QMMRS, CF_DT_INT8, CF_DT_BFLOAT16, false, 0, 13, 1030, 19, 0},
    {K_QMMRS, CF_DT_INT8, CF_DT_FLOAT16, false, 0, 13, 1030, 19, 0},
    {K_QMMRS, CF_DT_INT8, CF_DT_BFLOAT16, true, 0, 13, 1030, 19, 0},
    {K_MMAR, CF_DT_FLOAT32, CF_DT_FLOAT32, false, 0, 29, 37, 19, 0},
    {K_MMAR, CF_DT_FLOAT16, CF_DT_FLOAT16, false, 0, 29, 37, 19, 0},
    {K_MMAR, CF_DT_BFLOAT16, CF_DT_BFLOAT16, false, 0, 29, 37, 19, 0},
    {K_MMAR, CF_DT_FLOAT32, CF_DT_FLOAT32, true, 0, 29, 37, 19, 0},
    {K_AGMM, CF_DT_FLOAT32, CF_DT_FLOAT32, false, 0, 11, 37, 19, 8},
    {K_AGMM, CF_DT_FLOAT16, CF_DT_FLOAT16, false, 0, 11, 37, 19, 8},
    {K_AGMM, CF_DT_BFLOAT16, CF_DT_BFLOAT16, false, 0, 11, 37, 19, 8},
};

static void run_op(op_kind op) {
  static const int world_sizes[] = {2, 4, 8};
  for (size_t i = 0; i < sizeof matrix / sizeof *matrix; i++)
    for (int w = 0; w < 3 && matrix[i].op == op; w++) {
      cfg c = matrix[i];
      c.ws = world_sizes[w];
      if (op == K_MMRS || op == K_QMMRS) c.m *= c.ws;
      run_matrix(&c);
    }
}

/* state: the op_kind */
static void test_op(void **state) { run_op(*(const op_kind *)*state); }

/* ================= the cost model, the rules, exact int8 ================= */

static void test_chunk_model(void **state) {
  (void)state;
  static const char *xml = "<graph name='c' version='1' world_size='2'>"
                           "<node name='x' op='Input' dtype='float32' shape='64,8'/>"
                           "<node name='w' op='Input' dtype='float32' shape='8,4'/>"
                           "<node name='f0' op='MatmulReduceScatter' world_size='2' "
                           "reduction='sum'><input ref='x'/><input ref='w'/></node>"
                           "<node name='f5' op='MatmulReduceScatter' world_size='2' "
                           "reduction='sum' comm_turn='5'><input ref='x'/><input ref='w'/></node>"
                           "<node name='y0' op='Output'><input ref='f0'/></node>"
                           "<node name='y5' op='Output'><input ref='f5'/></node></graph>";
  cf_graph *g = NULL;
  assert_int_equal(cf_graph_parse(ctx, "c.xml", xml, strlen(xml), &g), CF_OK);
  const cf_node *f0 = &g->nodes[cf_graph_find(g, "f0")], *f5 = &g->nodes[cf_graph_find(g, "f5")];
  /* comm_turn wins, clamped to the rows */
  assert_int_equal(cf_fused_matmul_chunks(f5, 4096, 64, 0), 5);
  assert_int_equal(cf_fused_matmul_chunks(f5, 4096, 64, 32), 5);
  assert_int_equal(cf_fused_matmul_chunks(f5, 3, 64, 32), 3);
  /* automatic: one chunk when the communication cannot overlap */
  assert_int_equal(cf_fused_matmul_chunks(f0, 4096, 8192, 0), 1);
  /* else >= 512 KiB per chunk, at most 8, each of >= min_rows rows */
  assert_int_equal(cf_fused_matmul_chunks(f0, 4096, 8192, 32), 8);
  assert_int_equal(cf_fused_matmul_chunks(f0, 4096, 256, 32), 2);
  assert_int_equal(cf_fused_matmul_chunks(f0, 100, 1 << 20, 32), 3);
  assert_int_equal(cf_fused_matmul_chunks(f0, 1000, 1 << 20, 256), 3);
  assert_int_equal(cf_fused_matmul_chunks(f0, 16, 1 << 20, 32), 1);
  assert_int_equal(cf_fused_matmul_chunks(f0, 0, 64, 32), 1);
  /* overlap: on a GPU and under MPI yes; rank threads on the CPU only with
   * a core no rank's GEMM uses */
  cf_run_options gpu = {.device = CF_DEVICE_CUDA}, mpi = {.staged = true}, cpu = {0};
  assert_true(cf_fused_matmul_overlaps(&gpu, 8));
  assert_true(cf_fused_matmul_overlaps(&mpi, 8));
  /* products that convert x2 on every call need taller chunks on the CPU */
  assert_int_equal(cf_fused_matmul_min_rows(&gpu, 8, CF_DT_BFLOAT16), 32);
  assert_int_equal(cf_fused_matmul_min_rows(&mpi, 8, CF_DT_FLOAT32), 32);
  assert_int_equal(cf_fused_matmul_min_rows(&mpi, 8, CF_DT_BFLOAT16), 256);
  assert_int_equal(cf_fused_matmul_min_rows(&mpi, 8, CF_DT_INT8), 256);
  long cores = sysconf(_SC_NPROCESSORS_ONLN);
  char *saved = getenv("OPENBLAS_NUM_THREADS") ? strdup(getenv("OPENBLAS_NUM_THREADS")) : NULL;
  unsetenv("OPENBLAS_NUM_THREADS");
  for (int r = 1; r <= 8; r++) { /* each rank gets cores / r BLAS threads (at least 1) */
    long blas = cores / r > 1 ? cores / r : 1;
    if (cf_fused_matmul_overlaps(&cpu, r) != (cores - r * blas >= 1))
      fail_msg("%ld cores, %d ranks: overlaps says %d", cores, r, !(cores - r * blas >= 1));
  }
  assert_false(cf_fused_matmul_overlaps(&cpu, (int)cores));
  assert_int_equal(cf_fused_matmul_min_rows(&cpu, (int)cores, CF_DT_FLOAT32), 0);
  setenv("OPENBLAS_NUM_THREADS", "1", 1); /* one BLAS thread each: cores - ranks are free */
  assert_int_equal(cf_fused_matmul_overlaps(&cpu, 1), cores >= 2);
  assert_false(cf_fused_matmul_overlaps(&cpu, (int)cores));
  if (saved)
    setenv("OPENBLAS_NUM_THREADS", saved, 1);
  else
    unsetenv("OPENBLAS_NUM_THREADS");
  free(saved);
  cf_graph_destroy(g);
}

/* int8 x int8 (whole range) and uint8 x uint8 MatMuls equal the int64 sum
 * wrapped to int32, with k inside one sgemm block, across two and three. */
static void test_int8_matmul_exact(void **state) {
  (void)state;
  static const struct {
    const char *dt;
    int64_t m, k, n;
  } cases[] = {{"int8", 5, 1030, 7}, {"int8", 3, 2100, 5}, {"int8", 4, 1024, 3}, {"int8", 1, 1, 1},
               {"uint8", 4, 300, 6}, {"uint8", 2, 256, 9}, {"int8", 70, 40, 33}};
  for (size_t ci = 0; ci < sizeof cases / sizeof *cases; ci++) {
    char xml[512];
    snprintf(xml, sizeof xml,
             "<graph name='i' version='1' world_size='1'>"
             "<node name='a' op='Input' dtype='%s' shape='%lld,%lld'/>"
             "<node name='b' op='Input' dtype='%s' shape='%lld,%lld'/>"
             "<node name='mm' op='MatMul'><input ref='a'/><input ref='b'/></node>"
             "<node name='y' op='Output'><input ref='mm'/></node></graph>",
             cases[ci].dt, (long long)cases[ci].m, (long long)cases[ci].k, cases[ci].dt,
             (long long)cases[ci].k, (long long)cases[ci].n);
    cf_graph *g = NULL;
    if (cf_graph_parse(ctx, "i.xml", xml, strlen(xml), &g)) fail_msg("%s", cf_context_errmsg(ctx));
    const cf_node *mm = &g->nodes[cf_graph_find(g, "mm")];
    cf_dtype dt = g->nodes[cf_graph_find(g, "a")].out[0].dtype;
    int64_t m = cases[ci].m, k = cases[ci].k, n = cases[ci].n;
    guarded a, b, c;
    guarded_make(&a, dt, m, k);
    guarded_make(&b, dt, k, n);
    guarded_make(&c, CF_DT_INT32, m, n);
    uint64_t s = 99 + ci;
    for (int64_t i = 0; i < a.t.count + b.t.count; i++) { /* the extremes first, then random */
      cf_tensor *t = i < a.t.count ? &a.t : &b.t;
      int64_t e = i < a.t.count ? i : i - a.t.count;
      int64_t lo = dt == CF_DT_INT8 ? -128 : 0, hi = dt == CF_DT_INT8 ? 127 : 255;
      int64_t v = e < 3 ? (e == 1 ? hi : lo) : lo + (int64_t)(next(&s) % (uint64_t)(hi - lo + 1));
      cf_store_i64(t->data, dt, e, v);
    }
    cf_tensor in[2] = {a.t, b.t};
    for (unsigned flags = 0; flags < 2; flags++) {
      if (cf_compute_run(ctx, g, mm, in, &c.t, 0, 0, flags)) fail_msg("%s", cf_context_errmsg(ctx));
      for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < n; j++) {
          int64_t want = 0;
          for (int64_t p = 0; p < k; p++)
            want += cf_load_i64(a.t.data, dt, i * k + p) * cf_load_i64(b.t.data, dt, p * n + j);
          int32_t got = ((const int32_t *)c.t.data)[i * n + j];
          if (got != (int32_t)(uint32_t)want)
            fail_msg("%s (%lld,%lld,%lld) flags %u: c[%lld][%lld] = %d, expected %lld",
                     cases[ci].dt, (long long)m, (long long)k, (long long)n, flags, (long long)i,
                     (long long)j, got, (long long)want);
        }
      guarded_check(&a, "a", cases[ci].dt);
      guarded_check(&b, "b", cases[ci].dt);
      guarded_check(&c, "c", cases[ci].dt);
    }
    guarded_free(&a);
    guarded_free(&b);
    guarded_free(&c);
    cf_graph_destroy(g);
  }
}

int main(void) {
  static const op_kind ops[] = {K_MMRS, K_QMMRS, K_MMAR, K_AGMM};
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_chunk_model),
      cmocka_unit_test(test_int8_matmul_exact),
      {"test_mmrs", test_op, NULL, NULL, (void *)&ops[0]},
      {"test_quant_mmrs", test_op, NULL, NULL, (void *)&ops[1]},
      {"test_mmar", test_op, NULL, NULL, (void *)&ops[2]},
      {"test_agmm", test_op, NULL, NULL, (void *)&ops[3]},
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
