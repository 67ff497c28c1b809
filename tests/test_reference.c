/* test_reference.c - unit tests of the float64 reference (check/reference.c)
 * and of the output verifier (check/verify.c).
 *
 * Small graphs parsed from XML run on random inputs (cf_fill_node, some
 * elements set by hand to hit wrap-around, truncation and NaN), and every
 * result is checked against a value computed here from the inputs: each
 * AllReduce reduction on floats and integers (int8/uint8/int32 wrap, integer
 * mean truncating toward zero, NaN winning max/min), AllGather stack and
 * concat, ReduceScatter, Reduce (defined on the root only), Broadcast,
 * groups that are subsets or permutations of the world (ranks outside are
 * undefined), the fused collectives and fused matmul ops against their
 * definitions, QuantMatMul, the compute ops with broadcasting and casts;
 * then cf_verify_outputs on the reference rounded to float32/float16 and
 * its exact messages for a perturbed float, a wrong integer, a NaN and a
 * wrong dtype.
 */
#include "cf_test.h"

#include <math.h>

#include "check/check.h"
#include "ir/ir.h"

#define SEED 42

/* ================= fixture ================= */

typedef struct fx {
  cf_graph *g;
  cf_inputs in;
  cf_ref_value *out;
  int nout;
} fx;

/* Parse xml and fill every Input on ranks 0..ranks-1 like the executor. */
static void fx_init(fx *f, const char *xml, int ranks) {
  *f = (fx){0};
  if (cf_graph_parse(ctx, "mem.xml", xml, strlen(xml), &f->g) != CF_OK)
    fail_msg("parse: %s", cf_context_errmsg(ctx));
  int n = 0;
  for (int i = 0; i < f->g->n_nodes; i++) n += f->g->nodes[i].op == CF_OP_INPUT;
  f->in.n = n;
  f->in.ranks = ranks;
  f->in.names = calloc((size_t)n + 1, sizeof *f->in.names);
  f->in.data = calloc((size_t)n * (size_t)ranks + 1, sizeof *f->in.data);
  assert_non_null(f->in.names);
  assert_non_null(f->in.data);
  for (int i = 0, k = 0; i < f->g->n_nodes; i++) {
    const cf_node *nd = &f->g->nodes[i];
    if (nd->op != CF_OP_INPUT) continue;
    f->in.names[k] = nd->name;
    for (int q = 0; q < ranks; q++) {
      cf_tensor *t = &f->in.data[q * n + k];
      t->dtype = nd->out[0].dtype;
      t->shape = nd->out[0].shape;
      assert_true(cf_shape_elements(&t->shape, &t->count));
      t->data = calloc((size_t)t->count + 1, (size_t)cf_dtype_size(t->dtype));
      assert_non_null(t->data);
      cf_fill_node(nd, t->data, t->dtype, t->count, SEED, q);
    }
    k++;
  }
}

static void fx_run(fx *f) {
  if (cf_reference_run(ctx, f->g, &f->in, SEED, &f->out, &f->nout) != CF_OK)
    fail_msg("reference: %s", cf_context_errmsg(ctx));
}

static void fx_free(fx *f) {
  for (int i = 0; i < f->in.n * f->in.ranks; i++) free(f->in.data[i].data);
  free(f->in.data);
  free((void *)f->in.names);
  cf_ref_free(f->out, f->nout * f->in.ranks);
  cf_graph_destroy(f->g);
}

static cf_tensor *fx_in(fx *f, const char *name, int rank) {
  for (int k = 0; k < f->in.n; k++)
    if (!strcmp(f->in.names[k], name)) return &f->in.data[rank * f->in.n + k];
  fail_msg("no input '%s'", name);
  return NULL;
}

static double in_d(fx *f, const char *name, int rank, int64_t i) {
  cf_tensor *t = fx_in(f, name, rank);
  return cf_load_f64(t->data, t->dtype, i);
}

static int64_t in_i(fx *f, const char *name, int rank, int64_t i) {
  cf_tensor *t = fx_in(f, name, rank);
  return cf_load_i64(t->data, t->dtype, i);
}

static void set_in(fx *f, const char *name, int rank, int64_t i, double v) {
  cf_tensor *t = fx_in(f, name, rank);
  cf_store_f64(t->data, t->dtype, i, v);
}

static int out_index(const cf_graph *g, const char *name) {
  for (int i = 0, j = 0; i < g->n_nodes; i++) {
    if (g->nodes[i].op != CF_OP_OUTPUT) continue;
    if (!strcmp(g->nodes[i].name, name)) return j;
    j++;
  }
  fail_msg("no output '%s'", name);
  return -1;
}

static const cf_ref_value *fx_out(fx *f, const char *name, int rank) {
  return &f->out[rank * f->nout + out_index(f->g, name)];
}

static bool undefined(const cf_ref_value *v) { return !v->val && !v->mag && !v->ival; }

static void near(double got, double want, const char *what, int rank, int64_t i) {
  if (isnan(want) && isnan(got)) return;
  if (!(fabs(got - want) <= 1e-12 * fmax(1, fabs(want))))
    fail_msg("%s rank %d index %lld: got %.17g, want %.17g", what, rank, (long long)i, got, want);
}

/* v is defined with shape s (as text) */
static void has_shape(const cf_ref_value *v, const char *s) {
  char buf[160];
  assert_false(undefined(v));
  assert_string_equal(cf_shape_format(&v->shape, buf, sizeof buf), s);
}

/* exact integer semantics, written independently of reference.c */
static int64_t wrap_to(int64_t v, cf_dtype dt) {
  switch (dt) {
  case CF_DT_INT8: return (int8_t)(uint8_t)((uint64_t)v & 0xff);
  case CF_DT_UINT8: return (int64_t)((uint64_t)v & 0xff);
  case CF_DT_INT16: return (int16_t)(uint16_t)((uint64_t)v & 0xffff);
  case CF_DT_INT32: return (int32_t)(uint32_t)((uint64_t)v & 0xffffffff);
  default: return v;
  }
}

/* ================= AllReduce ================= */

static const char *ar_float_xml =
    "<graph name='t' version='1' world_size='4'>"
    " <node name='x' op='Input' dtype='float32' shape='3,5'/>"
    " <node name='s' op='AllReduce' reduction='sum'><input ref='x'/></node>"
    " <node name='m' op='AllReduce' reduction='mean'><input ref='x'/></node>"
    " <node name='mx' op='AllReduce' reduction='max'><input ref='x'/></node>"
    " <node name='mn' op='AllReduce' reduction='min'><input ref='x'/></node>"
    " <node name='p' op='AllReduce' reduction='prod'><input ref='x'/></node>"
    " <node name='o_s' op='Output'><input ref='s'/></node>"
    " <node name='o_m' op='Output'><input ref='m'/></node>"
    " <node name='o_mx' op='Output'><input ref='mx'/></node>"
    " <node name='o_mn' op='Output'><input ref='mn'/></node>"
    " <node name='o_p' op='Output'><input ref='p'/></node>"
    "</graph>";

static void test_allreduce_float(void **state) {
  (void)state;
  fx f;
  fx_init(&f, ar_float_xml, 4);
  set_in(&f, "x", 2, 7, NAN); /* NaN wins max and min, spreads through sum */
  fx_run(&f);
  assert_int_equal(f.nout, 5);
  for (int q = 0; q < 4; q++) {
    const cf_ref_value *s = fx_out(&f, "o_s", q), *m = fx_out(&f, "o_m", q),
                       *mx = fx_out(&f, "o_mx", q), *mn = fx_out(&f, "o_mn", q),
                       *p = fx_out(&f, "o_p", q);
    has_shape(s, "3,5");
    assert_int_equal(s->dtype, CF_DT_FLOAT32);
    assert_null(s->ival);
    for (int64_t i = 0; i < 15; i++) {
      double sum = 0, abs = 0, big = -INFINITY, small = INFINITY, prod = 1, pabs = 1, amax = 0;
      for (int r = 0; r < 4; r++) {
        double x = in_d(&f, "x", r, i);
        sum += x;
        abs += fabs(x);
        big = isnan(x) || isnan(big) ? NAN : fmax(big, x);
        small = isnan(x) || isnan(small) ? NAN : fmin(small, x);
        prod *= x;
        pabs *= fabs(x);
        amax = fmax(amax, fabs(x));
      }
      near(s->val[i], sum, "sum", q, i);
      near(s->mag[i], abs, "sum mag", q, i);
      near(m->val[i], sum / 4, "mean", q, i);
      near(m->mag[i], abs / 4, "mean mag", q, i);
      near(mx->val[i], big, "max", q, i);
      near(mn->val[i], small, "min", q, i);
      if (i != 7) near(mx->mag[i], amax, "max mag", q, i);
      near(p->val[i], prod, "prod", q, i);
      near(p->mag[i], pabs, "prod mag", q, i);
    }
    assert_true(isnan(s->val[7]) && isnan(mx->val[7]) && isnan(mn->val[7]));
  }
  fx_free(&f);
}

static const char *ar_int_xml =
    "<graph name='t' version='1' world_size='4'>"
    " <node name='a' op='Input' dtype='int8' shape='6'/>"
    " <node name='b' op='Input' dtype='int32' shape='6'/>"
    " <node name='u' op='Input' dtype='uint8' shape='6'/>"
    " <node name='a0' op='AllReduce' reduction='sum'><input ref='a'/></node>"
    " <node name='a1' op='AllReduce' reduction='mean'><input ref='a'/></node>"
    " <node name='a2' op='AllReduce' reduction='max'><input ref='a'/></node>"
    " <node name='a3' op='AllReduce' reduction='min'><input ref='a'/></node>"
    " <node name='a4' op='AllReduce' reduction='prod'><input ref='a'/></node>"
    " <node name='b0' op='AllReduce' reduction='sum'><input ref='b'/></node>"
    " <node name='b1' op='AllReduce' reduction='mean'><input ref='b'/></node>"
    " <node name='b4' op='AllReduce' reduction='prod'><input ref='b'/></node>"
    " <node name='u0' op='AllReduce' reduction='sum'><input ref='u'/></node>"
    " <node name='u3' op='AllReduce' reduction='min'><input ref='u'/></node>"
    " <node name='oa0' op='Output'><input ref='a0'/></node>"
    " <node name='oa1' op='Output'><input ref='a1'/></node>"
    " <node name='oa2' op='Output'><input ref='a2'/></node>"
    " <node name='oa3' op='Output'><input ref='a3'/></node>"
    " <node name='oa4' op='Output'><input ref='a4'/></node>"
    " <node name='ob0' op='Output'><input ref='b0'/></node>"
    " <node name='ob1' op='Output'><input ref='b1'/></node>"
    " <node name='ob4' op='Output'><input ref='b4'/></node>"
    " <node name='ou0' op='Output'><input ref='u0'/></node>"
    " <node name='ou3' op='Output'><input ref='u3'/></node>"
    "</graph>";

/* exact reduction of input name's element i over 4 ranks, wrapped to dt */
static int64_t int_red(fx *f, const char *name, cf_reduction red, int64_t i, cf_dtype dt) {
  int64_t acc = in_i(f, name, 0, i);
  for (int r = 1; r < 4; r++) {
    int64_t x = in_i(f, name, r, i);
    acc = red == CF_RED_MAX   ? (x > acc ? x : acc)
          : red == CF_RED_MIN ? (x < acc ? x : acc)
          : red == CF_RED_PROD ? wrap_to(acc * x, dt)
                               : acc + x;
  }
  if (red == CF_RED_MEAN) acc /= 4; /* C division truncates toward zero */
  return wrap_to(acc, dt);
}

static void test_allreduce_int(void **state) {
  (void)state;
  fx f;
  fx_init(&f, ar_int_xml, 4);
  static const int a[4][4] = {{100, -7, 7, -128}, {100, 2, 0, -1}, {100, 0, 0, 5}, {100, 0, 0, 3}};
  for (int r = 0; r < 4; r++) {
    for (int i = 0; i < 4; i++) set_in(&f, "a", r, i, a[r][i]);
    set_in(&f, "b", r, 0, 1 << 30);  /* sum 2^32 wraps to 0 */
    set_in(&f, "b", r, 1, -5 + r);   /* mean of -5..-2 = -14/4 -> -3 */
    set_in(&f, "b", r, 2, 1000);     /* prod 10^12 wraps in int32 */
    set_in(&f, "u", r, 0, 200);      /* 800 wraps to 32 */
  }
  fx_run(&f);
  for (int q = 0; q < 4; q++) {
    const cf_ref_value *s = fx_out(&f, "oa0", q), *m = fx_out(&f, "oa1", q);
    assert_null(s->val);
    assert_null(s->mag);
    assert_int_equal(s->dtype, CF_DT_INT8);
    assert_int_equal(s->ival[0], -112);                 /* 400 wraps in int8 */
    assert_int_equal(m->ival[0], 100);                  /* exact sum / 4, no wrap first */
    assert_int_equal(m->ival[1], -1);                   /* -5 / 4 toward zero */
    assert_int_equal(m->ival[2], 1);                    /* 7 / 4 */
    assert_int_equal(fx_out(&f, "oa4", q)->ival[0], 0); /* 10^8 = 0x5f5e100 */
    assert_int_equal(fx_out(&f, "oa2", q)->ival[3], 5);
    assert_int_equal(fx_out(&f, "oa3", q)->ival[3], -128);
    assert_int_equal(fx_out(&f, "ob0", q)->ival[0], 0);
    assert_int_equal(fx_out(&f, "ob1", q)->ival[1], -3);
    assert_int_equal(fx_out(&f, "ob4", q)->ival[2], (int32_t)(uint32_t)(1000000000000ull & 0xffffffffu));
    assert_int_equal(fx_out(&f, "ou0", q)->ival[0], 32);
    static const struct {
      const char *out, *in;
      cf_reduction red;
      cf_dtype dt;
    } cases[] = {{"oa0", "a", CF_RED_SUM, CF_DT_INT8},   {"oa1", "a", CF_RED_MEAN, CF_DT_INT8},
                 {"oa2", "a", CF_RED_MAX, CF_DT_INT8},   {"oa3", "a", CF_RED_MIN, CF_DT_INT8},
                 {"oa4", "a", CF_RED_PROD, CF_DT_INT8},  {"ob0", "b", CF_RED_SUM, CF_DT_INT32},
                 {"ob1", "b", CF_RED_MEAN, CF_DT_INT32}, {"ob4", "b", CF_RED_PROD, CF_DT_INT32},
                 {"ou0", "u", CF_RED_SUM, CF_DT_UINT8},  {"ou3", "u", CF_RED_MIN, CF_DT_UINT8}};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++)
      for (int64_t i = 0; i < 6; i++)
        if (fx_out(&f, cases[c].out, q)->ival[i] != int_red(&f, cases[c].in, cases[c].red, i, cases[c].dt))
          fail_msg("%s rank %d index %lld: got %lld, want %lld", cases[c].out, q, (long long)i,
                   (long long)fx_out(&f, cases[c].out, q)->ival[i],
                   (long long)int_red(&f, cases[c].in, cases[c].red, i, cases[c].dt));
  }
  fx_free(&f);
}

/* ================= AllGather, ReduceScatter, Reduce, Broadcast ================= */

static const char *gather_xml =
    "<graph name='t' version='1' world_size='3'>"
    " <node name='x' op='Input' dtype='float32' shape='2,3'/>"
    " <node name='k' op='Input' dtype='int16' shape='2'/>"
    " <node name='st' op='AllGather' layout='stack'><input ref='x'/></node>"
    " <node name='ct' op='AllGather' layout='concat'><input ref='x'/></node>"
    " <node name='ki' op='HcomAllGather'><input ref='k'/></node>"
    " <node name='o_st' op='Output'><input ref='st'/></node>"
    " <node name='o_ct' op='Output'><input ref='ct'/></node>"
    " <node name='o_ki' op='Output'><input ref='ki'/></node>"
    "</graph>";

static void test_allgather(void **state) {
  (void)state;
  fx f;
  fx_init(&f, gather_xml, 3);
  fx_run(&f);
  for (int q = 0; q < 3; q++) {
    const cf_ref_value *st = fx_out(&f, "o_st", q), *ct = fx_out(&f, "o_ct", q),
                       *ki = fx_out(&f, "o_ki", q);
    has_shape(st, "3,2,3");
    has_shape(ct, "6,3");
    has_shape(ki, "6");
    for (int r = 0; r < 3; r++)
      for (int64_t i = 0; i < 6; i++) {
        near(st->val[r * 6 + i], in_d(&f, "x", r, i), "stack", q, r * 6 + i);
        near(ct->val[r * 6 + i], in_d(&f, "x", r, i), "concat", q, r * 6 + i);
        near(st->mag[r * 6 + i], fabs(in_d(&f, "x", r, i)), "stack mag", q, r * 6 + i);
      }
    for (int r = 0; r < 3; r++)
      for (int64_t i = 0; i < 2; i++) assert_int_equal(ki->ival[r * 2 + i], in_i(&f, "k", r, i));
  }
  fx_free(&f);
}

static const char *scatter_xml =
    "<graph name='t' version='1' world_size='4'>"
    " <node name='x' op='Input' dtype='float32' shape='8,3'/>"
    " <node name='n' op='Input' dtype='int32' shape='4'/>"
    " <node name='rs' op='ReduceScatter' reduction='sum'><input ref='x'/></node>"
    " <node name='rn' op='ReduceScatter' reduction='mean'><input ref='n'/></node>"
    " <node name='rd' op='Reduce' reduction='sum' root='2'><input ref='x'/></node>"
    " <node name='after' op='Add'><input ref='rd'/><input ref='x'/></node>"
    " <node name='bc' op='Broadcast' root='1'><input ref='x'/></node>"
    " <node name='o_rs' op='Output'><input ref='rs'/></node>"
    " <node name='o_rn' op='Output'><input ref='rn'/></node>"
    " <node name='o_rd' op='Output'><input ref='rd'/></node>"
    " <node name='o_after' op='Output'><input ref='after'/></node>"
    " <node name='o_bc' op='Output'><input ref='bc'/></node>"
    "</graph>";

static void test_scatter_reduce_broadcast(void **state) {
  (void)state;
  fx f;
  fx_init(&f, scatter_xml, 4);
  fx_run(&f);
  for (int q = 0; q < 4; q++) {
    const cf_ref_value *rs = fx_out(&f, "o_rs", q), *rn = fx_out(&f, "o_rn", q),
                       *rd = fx_out(&f, "o_rd", q), *after = fx_out(&f, "o_after", q),
                       *bc = fx_out(&f, "o_bc", q);
    has_shape(rs, "2,3");
    for (int64_t i = 0; i < 6; i++) {
      double sum = 0;
      for (int r = 0; r < 4; r++) sum += in_d(&f, "x", r, q * 6 + i);
      near(rs->val[i], sum, "reducescatter", q, i);
    }
    has_shape(rn, "1");
    int64_t nsum = 0;
    for (int r = 0; r < 4; r++) nsum += in_i(&f, "n", r, q);
    assert_int_equal(rn->ival[0], nsum / 4);
    /* Reduce: defined on the root (and what is computed from it) only */
    assert_int_equal(rd->count, 24);
    assert_int_equal(rd->dtype, CF_DT_FLOAT32);
    if (q != 2) {
      assert_true(undefined(rd));
      assert_true(undefined(after));
    } else {
      has_shape(after, "8,3");
      for (int64_t i = 0; i < 24; i++) {
        double sum = 0;
        for (int r = 0; r < 4; r++) sum += in_d(&f, "x", r, i);
        near(rd->val[i], sum, "reduce", q, i);
        near(after->val[i], sum + in_d(&f, "x", 2, i), "after", q, i);
      }
    }
    for (int64_t i = 0; i < 24; i++) near(bc->val[i], in_d(&f, "x", 1, i), "broadcast", q, i);
  }
  fx_free(&f);
}

/* ================= groups ================= */

static const char *group_xml =
    "<graph name='t' version='1' world_size='4'>"
    " <group name='pair' ranks='1,3'/>"
    " <group name='rev' ranks='3,2,1,0'/>"
    " <node name='x' op='Input' dtype='float32' shape='4,2'/>"
    " <node name='ar' op='AllReduce' reduction='sum' group='pair'><input ref='x'/></node>"
    " <node name='use' op='Mul'><input ref='ar'/><input ref='x'/></node>"
    " <node name='ag' op='AllGather' layout='concat' group='rev'><input ref='x'/></node>"
    " <node name='rs' op='ReduceScatter' reduction='max' group='pair'><input ref='x'/></node>"
    " <node name='bc' op='Broadcast' root='1' group='pair'><input ref='x'/></node>"
    " <node name='o_ar' op='Output'><input ref='ar'/></node>"
    " <node name='o_use' op='Output'><input ref='use'/></node>"
    " <node name='o_ag' op='Output'><input ref='ag'/></node>"
    " <node name='o_rs' op='Output'><input ref='rs'/></node>"
    " <node name='o_bc' op='Output'><input ref='bc'/></node>"
    "</graph>";

static void test_groups(void **state) {
  (void)state;
  fx f;
  fx_init(&f, group_xml, 4);
  fx_run(&f);
  for (int q = 0; q < 4; q++) {
    bool in_pair = q == 1 || q == 3;
    const cf_ref_value *ar = fx_out(&f, "o_ar", q), *use = fx_out(&f, "o_use", q),
                       *ag = fx_out(&f, "o_ag", q), *rs = fx_out(&f, "o_rs", q),
                       *bc = fx_out(&f, "o_bc", q);
    assert_int_equal(undefined(ar), !in_pair);
    assert_int_equal(undefined(use), !in_pair);
    assert_int_equal(undefined(rs), !in_pair);
    assert_int_equal(undefined(bc), !in_pair);
    has_shape(ag, "16,2");
    for (int k = 0; k < 4; k++) /* group order 3,2,1,0 */
      for (int64_t i = 0; i < 8; i++) near(ag->val[k * 8 + i], in_d(&f, "x", 3 - k, i), "ag", q, i);
    if (!in_pair) continue;
    for (int64_t i = 0; i < 8; i++) {
      double s = in_d(&f, "x", 1, i) + in_d(&f, "x", 3, i);
      near(ar->val[i], s, "pair sum", q, i);
      near(use->val[i], s * in_d(&f, "x", q, i), "pair use", q, i);
      near(bc->val[i], in_d(&f, "x", 3, i), "pair broadcast from index 1 = rank 3", q, i);
    }
    int blk = q == 1 ? 0 : 1; /* rank 1 is index 0 of the group, rank 3 index 1 */
    has_shape(rs, "2,2");
    for (int64_t i = 0; i < 4; i++)
      near(rs->val[i], fmax(in_d(&f, "x", 1, blk * 4 + i), in_d(&f, "x", 3, blk * 4 + i)), "pair rs",
           q, i);
  }
  fx_free(&f);
}

/* ================= fused ops = their definitions ================= */

static const char *fused_xml =
    "<graph name='t' version='1' world_size='4'>"
    " <node name='a' op='Input' dtype='float32' shape='4,3'/>"
    " <node name='b' op='Input' dtype='float32' shape='8'/>"
    " <node name='ar_a' op='AllReduce' reduction='mean'><input ref='a'/></node>"
    " <node name='ar_b' op='AllReduce' reduction='mean'><input ref='b'/></node>"
    " <node name='far' op='FusedAllReduce' reduction='mean' members='ar_a,ar_b'>"
    "  <input ref='a'/><input ref='b'/></node>"
    " <node name='ag_a' op='AllGather' layout='concat'><input ref='a'/></node>"
    " <node name='ag_b' op='AllGather' layout='concat'><input ref='b'/></node>"
    " <node name='fag' op='FusedAllGather' layout='concat' members='ag_a,ag_b'>"
    "  <input ref='a'/><input ref='b'/></node>"
    " <node name='rs_a' op='ReduceScatter' reduction='sum'><input ref='a'/></node>"
    " <node name='rs_b' op='ReduceScatter' reduction='sum'><input ref='b'/></node>"
    " <node name='frs' op='FusedReduceScatter' reduction='sum' members='rs_a,rs_b'>"
    "  <input ref='a'/><input ref='b'/></node>"
    " <node name='o_ar_a' op='Output'><input ref='ar_a'/></node>"
    " <node name='o_ar_b' op='Output'><input ref='ar_b'/></node>"
    " <node name='o_far0' op='Output'><input ref='far'/></node>"
    " <node name='o_far1' op='Output'><input ref='far' port='1'/></node>"
    " <node name='o_ag_a' op='Output'><input ref='ag_a'/></node>"
    " <node name='o_ag_b' op='Output'><input ref='ag_b'/></node>"
    " <node name='o_fag0' op='Output'><input ref='fag'/></node>"
    " <node name='o_fag1' op='Output'><input ref='fag' port='1'/></node>"
    " <node name='o_rs_a' op='Output'><input ref='rs_a'/></node>"
    " <node name='o_rs_b' op='Output'><input ref='rs_b'/></node>"
    " <node name='o_frs0' op='Output'><input ref='frs'/></node>"
    " <node name='o_frs1' op='Output'><input ref='frs' port='1'/></node>"
    "</graph>";

/* outputs a and b of f are identical on every rank (value and magnitude) */
static void same(fx *f, const char *a, const char *b, int ranks) {
  for (int q = 0; q < ranks; q++) {
    const cf_ref_value *x = fx_out(f, a, q), *y = fx_out(f, b, q);
    char b1[160], b2[160];
    assert_int_equal(x->dtype, y->dtype);
    assert_string_equal(cf_shape_format(&x->shape, b1, sizeof b1), cf_shape_format(&y->shape, b2, sizeof b2));
    assert_int_equal(undefined(x), undefined(y));
    for (int64_t i = 0; i < x->count && !undefined(x); i++) {
      if (x->ival) {
        assert_int_equal(x->ival[i], y->ival[i]);
        continue;
      }
      if (x->val[i] != y->val[i] || x->mag[i] != y->mag[i])
        fail_msg("%s vs %s rank %d index %lld: %.17g (%.17g) != %.17g (%.17g)", a, b, q,
                 (long long)i, x->val[i], x->mag[i], y->val[i], y->mag[i]);
    }
  }
}

static void test_fused_collectives(void **state) {
  (void)state;
  fx f;
  fx_init(&f, fused_xml, 4);
  fx_run(&f);
  same(&f, "o_ar_a", "o_far0", 4);
  same(&f, "o_ar_b", "o_far1", 4);
  same(&f, "o_ag_a", "o_fag0", 4);
  same(&f, "o_ag_b", "o_fag1", 4);
  same(&f, "o_rs_a", "o_frs0", 4);
  same(&f, "o_rs_b", "o_frs1", 4);
  has_shape(fx_out(&f, "o_frs1", 0), "2");
  fx_free(&f);
}

static const char *mm_xml =
    "<graph name='t' version='1' world_size='4'>"
    " <node name='x' op='Input' dtype='float32' shape='8,5'/>"
    " <node name='w' op='Input' dtype='float32' shape='5,3'/>"
    " <node name='xs' op='Input' dtype='float32' shape='2,5'/>"
    " <node name='mm' op='MatMul'><input ref='x'/><input ref='w'/></node>"
    " <node name='rs' op='ReduceScatter' reduction='sum'><input ref='mm'/></node>"
    " <node name='ar' op='AllReduce' reduction='sum'><input ref='mm'/></node>"
    " <node name='mmrs' op='MatmulReduceScatter' world_size='4'><input ref='x'/><input ref='w'/></node>"
    " <node name='mmar' op='MatmulAllReduce' world_size='4'><input ref='x'/><input ref='w'/></node>"
    " <node name='ag' op='AllGather' layout='concat'><input ref='xs'/></node>"
    " <node name='agmm' op='MatMul'><input ref='ag'/><input ref='w'/></node>"
    " <node name='fagmm' op='AllGatherMatmul' world_size='4'><input ref='xs'/><input ref='w'/></node>"
    " <node name='o_rs' op='Output'><input ref='rs'/></node>"
    " <node name='o_mmrs' op='Output'><input ref='mmrs'/></node>"
    " <node name='o_ar' op='Output'><input ref='ar'/></node>"
    " <node name='o_mmar' op='Output'><input ref='mmar'/></node>"
    " <node name='o_ag' op='Output'><input ref='ag'/></node>"
    " <node name='o_agmm' op='Output'><input ref='agmm'/></node>"
    " <node name='o_fagmm0' op='Output'><input ref='fagmm'/></node>"
    " <node name='o_fagmm1' op='Output'><input ref='fagmm' port='1'/></node>"
    "</graph>";

static void test_matmul_collectives(void **state) {
  (void)state;
  fx f;
  fx_init(&f, mm_xml, 4);
  fx_run(&f);
  for (int q = 0; q < 4; q++) {
    const cf_ref_value *rs = fx_out(&f, "o_rs", q);
    has_shape(rs, "2,3");
    for (int i = 0; i < 2; i++)
      for (int j = 0; j < 3; j++) {
        double v = 0, mag = 0;
        for (int r = 0; r < 4; r++)
          for (int t = 0; t < 5; t++) {
            double a = in_d(&f, "x", r, (q * 2 + i) * 5 + t), b = in_d(&f, "w", r, t * 3 + j);
            v += a * b;
            mag += fabs(a * b);
          }
        near(rs->val[i * 3 + j], v, "matmul+reducescatter", q, i * 3 + j);
        near(rs->mag[i * 3 + j], mag, "matmul+reducescatter mag", q, i * 3 + j);
      }
  }
  same(&f, "o_rs", "o_mmrs", 4);
  same(&f, "o_ar", "o_mmar", 4);
  same(&f, "o_agmm", "o_fagmm0", 4);
  same(&f, "o_ag", "o_fagmm1", 4);
  fx_free(&f);
}

/* ================= quantized matmul ================= */

static const char *quant_xml =
    "<graph name='t' version='1' world_size='2'>"
    " <node name='x1' op='Input' dtype='int8' shape='4,6'/>"
    " <node name='x2' op='Input' dtype='int8' shape='6,3'/>"
    " <node name='s1' op='Input' dtype='float32' shape='4,1'/>"
    " <node name='s2' op='Input' dtype='float32' shape='1,3'/>"
    " <node name='bias' op='Input' dtype='int32' shape='3'/>"
    " <node name='zero' op='Input' dtype='int32' shape='3' init='zeros'/>"
    " <node name='qmm' op='QuantMatMul'><input ref='x1'/><input ref='x2'/><input ref='s1'/>"
    "  <input ref='s2'/><input ref='bias'/></node>"
    " <node name='qmm0' op='QuantMatMul' output_dtype='float16'><input ref='x1'/><input ref='x2'/>"
    "  <input ref='s1'/><input ref='s2'/></node>"
    " <node name='rs' op='ReduceScatter' reduction='sum'><input ref='qmm0'/></node>"
    " <node name='mmrs' op='MatmulReduceScatter' world_size='2' output_dtype='float16'>"
    "  <input ref='x1'/><input ref='x2'/><input ref='zero'/><input ref='s1'/><input ref='s2'/></node>"
    " <node name='o_qmm' op='Output'><input ref='qmm'/></node>"
    " <node name='o_rs' op='Output'><input ref='rs'/></node>"
    " <node name='o_mmrs' op='Output'><input ref='mmrs'/></node>"
    "</graph>";

static void test_quant_matmul(void **state) {
  (void)state;
  fx f;
  fx_init(&f, quant_xml, 2);
  set_in(&f, "bias", 1, 2, 100000);
  fx_run(&f);
  for (int q = 0; q < 2; q++) {
    const cf_ref_value *o = fx_out(&f, "o_qmm", q);
    has_shape(o, "4,3");
    assert_int_equal(o->dtype, CF_DT_BFLOAT16);
    for (int i = 0; i < 4; i++)
      for (int j = 0; j < 3; j++) {
        int64_t acc = in_i(&f, "bias", q, j), abs = llabs(acc);
        for (int t = 0; t < 6; t++) {
          int64_t p = in_i(&f, "x1", q, i * 6 + t) * in_i(&f, "x2", q, t * 3 + j);
          acc += p;
          abs += llabs(p);
        }
        double scale = in_d(&f, "s1", q, i) * in_d(&f, "s2", q, j);
        near(o->val[i * 3 + j], (double)acc * scale, "quant", q, i * 3 + j);
        near(o->mag[i * 3 + j], (double)abs * fabs(scale), "quant mag", q, i * 3 + j);
      }
  }
  assert_int_equal(fx_out(&f, "o_mmrs", 0)->dtype, CF_DT_FLOAT16);
  same(&f, "o_rs", "o_mmrs", 2);
  fx_free(&f);
}

/* ================= compute ops ================= */

static const char *compute_xml =
    "<graph name='t' version='1'>"
    " <node name='a' op='Input' dtype='float32' shape='2,3'/>"
    " <node name='b' op='Input' dtype='float32' shape='3'/>"
    " <node name='c' op='Input' dtype='int8' shape='2,3'/>"
    " <node name='d' op='Input' dtype='int8' shape='3,2'/>"
    " <node name='add' op='Add'><input ref='a'/><input ref='b'/></node>"
    " <node name='sub' op='Sub'><input ref='b'/><input ref='a'/></node>"
    " <node name='mul' op='Mul'><input ref='a'/><input ref='a'/></node>"
    " <node name='cadd' op='Add'><input ref='c'/><input ref='c'/></node>"
    " <node name='imm' op='MatMul'><input ref='c'/><input ref='d'/></node>"
    " <node name='h' op='Cast' dtype='float16'><input ref='a'/></node>"
    " <node name='i8' op='Cast' dtype='int8'><input ref='a'/></node>"
    " <node name='rsh' op='Reshape' shape='3,2'><input ref='a'/></node>"
    " <node name='k' op='Constant' dtype='float64' shape='2' value='2.5'/>"
    " <node name='op' op='Opaque' type='Foo' dtype='float32' shape='4'><input ref='a'/></node>"
    " <node name='o_add' op='Output'><input ref='add'/></node>"
    " <node name='o_sub' op='Output'><input ref='sub'/></node>"
    " <node name='o_mul' op='Output'><input ref='mul'/></node>"
    " <node name='o_cadd' op='Output'><input ref='cadd'/></node>"
    " <node name='o_imm' op='Output'><input ref='imm'/></node>"
    " <node name='o_h' op='Output'><input ref='h'/></node>"
    " <node name='o_i8' op='Output'><input ref='i8'/></node>"
    " <node name='o_rsh' op='Output'><input ref='rsh'/></node>"
    " <node name='o_k' op='Output'><input ref='k'/></node>"
    " <node name='o_op' op='Output'><input ref='op'/></node>"
    "</graph>";

static void test_compute(void **state) {
  (void)state;
  fx f;
  fx_init(&f, compute_xml, 2);
  set_in(&f, "a", 0, 0, 0.1);    /* float32 0.1 -> float16 0.0999755859375 */
  set_in(&f, "a", 0, 1, 300.7);  /* -> int8 saturates to 127 */
  set_in(&f, "a", 0, 2, -2.9);   /* -> int8 truncates to -2 */
  set_in(&f, "c", 0, 0, 100);    /* 100 + 100 wraps to -56 */
  fx_run(&f);
  for (int q = 0; q < 2; q++) {
    for (int i = 0; i < 2; i++)
      for (int j = 0; j < 3; j++) {
        int e = i * 3 + j;
        double a = in_d(&f, "a", q, e), b = in_d(&f, "b", q, j);
        near(fx_out(&f, "o_add", q)->val[e], a + b, "add", q, e);
        near(fx_out(&f, "o_add", q)->mag[e], fabs(a) + fabs(b), "add mag", q, e);
        near(fx_out(&f, "o_sub", q)->val[e], b - a, "sub", q, e);
        near(fx_out(&f, "o_mul", q)->val[e], a * a, "mul", q, e);
        assert_int_equal(fx_out(&f, "o_cadd", q)->ival[e], wrap_to(2 * in_i(&f, "c", q, e), CF_DT_INT8));
        near(fx_out(&f, "o_rsh", q)->val[e], a, "reshape", q, e);
        if (q == 1 || e > 2) assert_int_equal(fx_out(&f, "o_i8", q)->ival[e], (int64_t)trunc(a));
      }
    has_shape(fx_out(&f, "o_rsh", q), "3,2");
    const cf_ref_value *imm = fx_out(&f, "o_imm", q);
    assert_int_equal(imm->dtype, CF_DT_INT32);
    for (int i = 0; i < 2; i++)
      for (int j = 0; j < 2; j++) {
        int64_t acc = 0;
        for (int t = 0; t < 3; t++) acc += in_i(&f, "c", q, i * 3 + t) * in_i(&f, "d", q, t * 2 + j);
        assert_int_equal(imm->ival[i * 2 + j], acc);
      }
    const cf_ref_value *k = fx_out(&f, "o_k", q), *op = fx_out(&f, "o_op", q);
    assert_true(k->val[0] == 2.5 && k->val[1] == 2.5);
    float buf[4];
    cf_fill_random(buf, CF_DT_FLOAT32, 4, SEED, q, "op:0");
    for (int i = 0; i < 4; i++) assert_true(op->val[i] == (double)buf[i]);
  }
  const cf_ref_value *h = fx_out(&f, "o_h", 0), *i8 = fx_out(&f, "o_i8", 0);
  assert_true(h->val[0] == 0.0999755859375);
  assert_int_equal(i8->ival[1], 127);
  assert_int_equal(i8->ival[2], -2);
  assert_int_equal(fx_out(&f, "o_cadd", 0)->ival[0], -56);
  fx_free(&f);
}

/* ================= errors ================= */

static void test_errors(void **state) {
  (void)state;
  fx f;
  cf_ref_value dummy, *out = &dummy;
  int n = 7;
  fx_init(&f, ar_float_xml, 4);
  cf_inputs none = {.n = 0, .ranks = 4};
  ASSERT_ERR(cf_reference_run(ctx, f.g, &none, SEED, &out, &n), CF_ERR_USAGE,
             "node 'x': reference: no data given for this Input");
  assert_null(out);
  assert_int_equal(n, 0);
  cf_inputs fewer = f.in;
  fewer.ranks = 2;
  ASSERT_ERR(cf_reference_run(ctx, f.g, &fewer, SEED, &out, &n), CF_ERR_USAGE,
             "group 'hccl_world_group' spans 4 ranks but the run has 2");
  fx_in(&f, "x", 3)->shape.dims[1] = 4;
  ASSERT_ERR(cf_reference_run(ctx, f.g, &f.in, SEED, &out, &n), CF_ERR_USAGE,
             "rank 3's data is float32 (3,4), the Input is float32 (3,5)");
  fx_in(&f, "x", 3)->shape.dims[1] = 5;
  fx_free(&f);

  fx_init(&f, group_xml, 3);
  ASSERT_ERR(cf_reference_run(ctx, f.g, &f.in, SEED, &out, &n), CF_ERR_USAGE,
             "node 'ar': reference: group 'pair' has rank 3 but the run has 3 ranks");
  fx_free(&f);
}

/* ================= verify ================= */

/* what an executor would produce: the reference rounded to each dtype,
 * undefined values as NaN */
static cf_tensor *rounded(const fx *f, int ranks) {
  int total = f->nout * ranks;
  cf_tensor *got = calloc((size_t)total, sizeof *got);
  assert_non_null(got);
  for (int e = 0; e < total; e++) {
    const cf_ref_value *v = &f->out[e];
    got[e] = (cf_tensor){.dtype = v->dtype, .shape = v->shape, .count = v->count};
    got[e].data = calloc((size_t)v->count + 1, (size_t)cf_dtype_size(v->dtype));
    assert_non_null(got[e].data);
    for (int64_t i = 0; i < v->count; i++) {
      if (v->ival)
        cf_store_i64(got[e].data, v->dtype, i, v->ival[i]);
      else
        cf_store_f64(got[e].data, v->dtype, i, v->val ? v->val[i] : NAN);
    }
  }
  return got;
}

static const char *verify_xml =
    "<graph name='t' version='1' world_size='4'>"
    " <node name='x' op='Input' dtype='float32' shape='3,4'/>"
    " <node name='h' op='Input' dtype='float16' shape='6'/>"
    " <node name='n' op='Input' dtype='int32' shape='5'/>"
    " <node name='y' op='AllReduce' reduction='sum'><input ref='x'/></node>"
    " <node name='z' op='AllReduce' reduction='mean'><input ref='h'/></node>"
    " <node name='w' op='AllReduce' reduction='sum'><input ref='n'/></node>"
    " <node name='r' op='Reduce' reduction='sum' root='3'><input ref='x'/></node>"
    " <node name='o_y' op='Output'><input ref='y'/></node>"
    " <node name='o_z' op='Output'><input ref='z'/></node>"
    " <node name='o_w' op='Output'><input ref='w'/></node>"
    " <node name='o_r' op='Output'><input ref='r'/></node>"
    "</graph>";

static void test_verify(void **state) {
  (void)state;
  fx f;
  fx_init(&f, verify_xml, 4);
  fx_run(&f);
  /* undefined values (Reduce off the root) hold NaN */
  int total = f.nout * 4;
  cf_tensor *got = rounded(&f, 4);
  cf_verify_stats st;
  assert_int_equal(cf_verify_outputs(ctx, f.g, got, f.out, 4, f.nout, &st), CF_OK);
  assert_int_equal(st.checked, 4 * (12 + 6 + 5) + 12); /* o_r on rank 3 only */
  assert_true(st.max_rel_err > 0 && st.max_rel_err < 1e-2);

  /* within float32's tolerance: accepted */
  int y2 = 2 * f.nout + out_index(f.g, "o_y");
  const cf_ref_value *ry = &f.out[y2];
  float *gy = got[y2].data, keep = gy[5];
  gy[5] = (float)(ry->val[5] + 0.5e-5 * ry->mag[5]);
  assert_int_equal(cf_verify_outputs(ctx, f.g, got, f.out, 4, f.nout, &st), CF_OK);
  /* beyond it: the first mismatch, named by output, rank and index */
  gy[5] = (float)(ry->val[5] + 3e-5 * ry->mag[5]);
  char want[256];
  snprintf(want, sizeof want, "error: output 'o_y' rank 2 index 5: got %.9g, expected %.9g",
           (double)gy[5], ry->val[5]);
  ASSERT_ERR(cf_verify_outputs(ctx, f.g, got, f.out, 4, f.nout, &st), CF_ERR_INVALID, want);
  assert_string_equal(cf_context_errmsg(ctx), want);
  assert_true(st.max_rel_err > 1e-5);
  gy[5] = keep;

  /* integers exactly */
  int w1 = 1 * f.nout + out_index(f.g, "o_w");
  int32_t *gw = got[w1].data;
  gw[3] += 1;
  snprintf(want, sizeof want, "output 'o_w' rank 1 index 3: got %d, expected %lld", gw[3],
           (long long)f.out[w1].ival[3]);
  ASSERT_ERR(cf_verify_outputs(ctx, f.g, got, f.out, 4, f.nout, &st), CF_ERR_INVALID, want);
  gw[3] -= 1;

  /* NaN only where the reference has NaN */
  int z0 = out_index(f.g, "o_z");
  uint16_t *gz = got[z0].data, hz = gz[0];
  gz[0] = 0x7e00;
  snprintf(want, sizeof want, "output 'o_z' rank 0 index 0: got nan, expected %.9g", f.out[z0].val[0]);
  ASSERT_ERR(cf_verify_outputs(ctx, f.g, got, f.out, 4, f.nout, &st), CF_ERR_INVALID, want);
  gz[0] = hz;

  /* the wrong dtype */
  got[y2].dtype = CF_DT_FLOAT64;
  ASSERT_ERR(cf_verify_outputs(ctx, f.g, got, f.out, 4, f.nout, &st), CF_ERR_INVALID,
             "output 'o_y' rank 2: got float64 with 12 elements, expected float32 with 12");
  got[y2].dtype = CF_DT_FLOAT32;
  assert_int_equal(cf_verify_outputs(ctx, f.g, got, f.out, 4, f.nout, NULL), CF_OK);
  ASSERT_ERR(cf_verify_outputs(ctx, f.g, got, f.out, 4, f.nout - 1, &st), CF_ERR_USAGE,
             "3 outputs on 4 ranks given, the graph has 4 Output nodes");

  for (int e = 0; e < total; e++) free(got[e].data);
  free(got);
  fx_free(&f);
}

/* float16 outputs: a float16 AllReduce sum whose float64 result is rounded */
static void test_verify_float16(void **state) {
  (void)state;
  fx f;
  fx_init(&f,
          "<graph name='t' version='1' world_size='8'>"
          " <node name='h' op='Input' dtype='float16' shape='64'/>"
          " <node name='s' op='AllReduce' reduction='sum'><input ref='h'/></node>"
          " <node name='o' op='Output'><input ref='s'/></node>"
          "</graph>",
          8);
  fx_run(&f);
  cf_tensor got[8];
  uint16_t data[8][64];
  for (int q = 0; q < 8; q++) {
    const cf_ref_value *v = &f.out[q];
    got[q] = (cf_tensor){.data = data[q], .dtype = CF_DT_FLOAT16, .shape = v->shape, .count = 64};
    for (int i = 0; i < 64; i++) cf_store_f64(data[q], CF_DT_FLOAT16, i, v->val[i]);
  }
  cf_verify_stats st;
  assert_int_equal(cf_verify_outputs(ctx, f.g, got, f.out, 8, 1, &st), CF_OK);
  assert_int_equal(st.checked, 8 * 64);
  assert_true(st.max_rel_err <= 0x1p-11);
  /* one float16 ulp off is within 1e-2; a 3% error is not */
  data[6][9] = (uint16_t)(data[6][9] + 1);
  assert_int_equal(cf_verify_outputs(ctx, f.g, got, f.out, 8, 1, &st), CF_OK);
  cf_store_f64(data[6], CF_DT_FLOAT16, 9, f.out[6].val[9] + 0.03 * f.out[6].mag[9]);
  char want[160];
  snprintf(want, sizeof want, "output 'o' rank 6 index 9: got %.9g, expected %.9g",
           cf_load_f64(data[6], CF_DT_FLOAT16, 9), f.out[6].val[9]);
  ASSERT_ERR(cf_verify_outputs(ctx, f.g, got, f.out, 8, 1, &st), CF_ERR_INVALID, want);
  fx_free(&f);
}

/* ================= window by window ================= */

/* cf_fill_random_at / cf_fill_node_at: any range is bitwise that range of
 * the whole, element 0's special cases included */
static void test_fill_at(void **state) {
  (void)state;
  static const cf_dtype dts[] = {CF_DT_FLOAT32, CF_DT_FLOAT16, CF_DT_BFLOAT16, CF_DT_FLOAT64,
                                 CF_DT_INT8,    CF_DT_UINT8,   CF_DT_INT32,    CF_DT_INT64};
  enum { N = 300 };
  for (size_t d = 0; d < sizeof dts / sizeof *dts; d++)
    for (int seed = 0; seed < 40; seed++) {
      int sz = cf_dtype_size(dts[d]);
      unsigned char whole[N * 8], part[N * 8];
      cf_fill_random(whole, dts[d], N, (uint64_t)seed, seed % 3, "t");
      for (int64_t lo = 0; lo < N; lo += 37) {
        int64_t cnt = lo + 50 < N ? 50 : N - lo;
        cf_fill_random_at(part, dts[d], lo, cnt, (uint64_t)seed, seed % 3, "t");
        assert_memory_equal(part, whole + lo * sz, (size_t)(cnt * sz));
      }
      /* one element at a time (no vector loop: fill.c's AVX2 float32 path
       * must give the scalar loop's bits) */
      for (int64_t i = 0; i < N; i++) {
        cf_fill_random_at(part, dts[d], i, 1, (uint64_t)seed, seed % 3, "t");
        if (memcmp(part, whole + i * sz, (size_t)sz) != 0)
          fail_msg("%s seed %d element %lld: filled alone it differs from the whole fill",
                   cf_dtype_name(dts[d]), seed, (long long)i);
      }
    }
}

/* elementwise ops only: reduce, broadcast, permute, fused, groups,
 * integers, casts, a Constant iota, Add/Sub/Mul, Reshape */
static const char *stream_xml =
    "<graph name='t' version='1' world_size='4'>"
    " <group name='even' ranks='0,2'/>"
    " <node name='a' op='Input' dtype='float32' shape='5,7'/>"
    " <node name='b' op='Input' dtype='float16' shape='10'/>"
    " <node name='n' op='Input' dtype='int32' shape='13'/>"
    " <node name='u' op='Input' dtype='uint8' shape='9'/>"
    " <node name='c' op='Constant' dtype='int32' shape='13' init='iota'/>"
    " <node name='nc' op='Add'><input ref='n'/><input ref='c'/></node>"
    " <node name='am' op='Mul'><input ref='a'/><input ref='a'/></node>"
    " <node name='ar' op='Reshape' shape='35'><input ref='am'/></node>"
    " <node name='s1' op='AllReduce' reduction='sum'><input ref='ar'/></node>"
    " <node name='s2' op='AllReduce' reduction='mean' group='even'><input ref='b'/></node>"
    " <node name='s3' op='AllReduce' reduction='max'><input ref='nc'/></node>"
    " <node name='s4' op='Reduce' reduction='sum' root='2'><input ref='u'/></node>"
    " <node name='s5' op='Broadcast' root='1'><input ref='a'/></node>"
    " <node name='s6' op='CollectivePermute' source_target_pairs='{0,1},{1,2},{2,0}'>"
    "  <input ref='b'/></node>"
    " <node name='f' op='FusedAllReduce' reduction='sum' members='x1,x2'>"
    "  <input ref='a'/><input ref='ar'/></node>"
    " <node name='d' op='Sub'><input ref='s1'/><input ref='ar'/></node>"
    " <node name='h' op='Cast' dtype='bfloat16'><input ref='d'/></node>"
    " <node name='o_h' op='Output'><input ref='h'/></node>"
    " <node name='o_s2' op='Output'><input ref='s2'/></node>"
    " <node name='o_s3' op='Output'><input ref='s3'/></node>"
    " <node name='o_s4' op='Output'><input ref='s4'/></node>"
    " <node name='o_s5' op='Output'><input ref='s5'/></node>"
    " <node name='o_s6' op='Output'><input ref='s6'/></node>"
    " <node name='o_f0' op='Output'><input ref='f'/></node>"
    " <node name='o_f1' op='Output'><input ref='f' port='1'/></node>"
    "</graph>";

/* cf_verify_streamed at several windows, with the Inputs given and
 * regenerated, gives cf_verify_outputs' status, message and (on success)
 * stats */
static void same_verdict(fx *f, const cf_tensor *got, int ranks, int only) {
  cf_verify_stats want, st;
  cf_status ws;
  if (only < 0) {
    ws = cf_verify_outputs(ctx, f->g, got, f->out, ranks, f->nout, &want);
  } else { /* other ranks' references undefined, as run.c's verify_rank */
    cf_ref_value *mine = calloc((size_t)(ranks * f->nout), sizeof *mine);
    assert_non_null(mine);
    for (int j = 0; j < f->nout; j++)
      mine[only * f->nout + j] = f->out[only * f->nout + j];
    ws = cf_verify_outputs(ctx, f->g, got, mine, ranks, f->nout, &want);
    free(mine);
  }
  char msg[1024];
  snprintf(msg, sizeof msg, "%s", ws ? cf_context_errmsg(ctx) : "");
  static const int64_t windows[] = {1, 2, 3, 7, 16, 1000, 0};
  cf_inputs none = {.ranks = ranks};
  for (int given = 0; given < 2; given++)
    for (size_t w = 0; w < sizeof windows / sizeof *windows; w++) {
      cf_status s = cf_verify_streamed(ctx, f->g, given ? &f->in : &none, SEED, got, ranks, f->nout,
                                       only, windows[w], &st);
      if (s != ws || strcmp(ws ? cf_context_errmsg(ctx) : "", msg) != 0)
        fail_msg("window %lld, inputs %s: status %d '%s', the whole reference %d '%s'",
                 (long long)windows[w], given ? "given" : "regenerated", s,
                 s ? cf_context_errmsg(ctx) : "", ws, msg);
      if (ws) continue;
      assert_int_equal(st.checked, want.checked);
      assert_true(st.max_abs_err == want.max_abs_err);
      assert_true(st.max_rel_err == want.max_rel_err);
    }
}

/* f from xml on 4 ranks, its reference rounded to the outputs' dtypes
 * (returned: the outputs a run would give), checked window by window
 * against the whole reference on every rank and on rank only alone. */
static cf_tensor *streamed_fixture(fx *f, const char *xml, int only) {
  fx_init(f, xml, 4);
  fx_run(f);
  assert_true(cf_reference_streams(f->g));
  cf_tensor *got = rounded(f, 4);
  same_verdict(f, got, 4, -1);
  same_verdict(f, got, 4, only);
  return got;
}

static void got_free(cf_tensor *got, int n) {
  for (int e = 0; e < n; e++)
    free(got[e].data);
  free(got);
}

static void test_verify_streamed(void **state) {
  (void)state;
  fx f;
  cf_tensor *got = streamed_fixture(&f, stream_xml, 3);
  /* wrong elements: the first by rank, output, index is named whatever
   * window finds which first */
  struct {
    const char *out;
    int rank;
    int64_t i;
  } bad[] = {{"o_f0", 1, 30}, {"o_s3", 1, 12}, {"o_h", 2, 3},  {"o_s6", 1, 9}, {"o_h", 1, 34},
             {"o_s2", 0, 2},  {"o_s4", 2, 0},  {"o_f1", 0, 0}, {"o_h", 0, 0}};
  for (size_t k = 0; k < sizeof bad / sizeof *bad; k++) {
    cf_tensor *t = &got[bad[k].rank * f.nout + out_index(f.g, bad[k].out)];
    double v = cf_load_f64(t->data, t->dtype, bad[k].i);
    cf_store_f64(t->data, t->dtype, bad[k].i, v + 3);
    same_verdict(&f, got, 4, -1);
    same_verdict(&f, got, 4, bad[k].rank);
    same_verdict(&f, got, 4, 3);
  }
  /* and the dtype */
  got[2 * f.nout + 1].dtype = CF_DT_FLOAT32;
  same_verdict(&f, got, 4, -1);
  ASSERT_ERR(cf_verify_streamed(ctx, f.g, &f.in, SEED, got, 4, f.nout, -1, 5, NULL), CF_ERR_INVALID,
             "output 'o_h' rank 0 index 0: got");
  got_free(got, f.nout * 4);
  /* a graph that does not stream is refused, not checked wrongly */
  ASSERT_ERR(cf_verify_streamed(ctx, f.g, &f.in, SEED, NULL, 4, f.nout, -1, 5, NULL), CF_ERR_USAGE,
             "verify: 8 outputs on 4 ranks given, the graph has 8 Output nodes");
  fx_free(&f);
  fx_init(&f, fused_xml, 4);
  assert_false(cf_reference_streams(f.g));
  cf_tensor dummy[64] = {{0}};
  ASSERT_ERR(cf_verify_streamed(ctx, f.g, &f.in, SEED, dummy, 4, 12, -1, 5, NULL), CF_ERR_USAGE,
             "not elementwise");
  fx_free(&f);
  /* windows of a value near its whole: the reference holds at most what
   * cf_reference_window_bytes says, and the picked window fits the budget */
  fx_init(&f, stream_xml, 4);
  int64_t bytes, w = cf_verify_window(f.g, 4, &bytes);
  assert_int_equal(w, 64); /* the largest value, 35 elements, in one window */
  assert_true(bytes <= cf_reference_bytes(f.g, 4));
  assert_true(cf_reference_window_bytes(f.g, 4, 1) < cf_reference_window_bytes(f.g, 4, 8));
  fx_free(&f);
}

/* Float32 outputs long enough for verify.c's blocks of 256 (and a tail):
 * the streamed check gives the whole reference's statistics bit for bit,
 * and a wrong element anywhere in a block (its first, its middle, the
 * tail, a NaN, one just out of tolerance) is the mismatch both report. */
static const char *blocks_xml =
    "<graph name='t' version='1' world_size='4'>"
    " <node name='a' op='Input' dtype='float32' shape='1500'/>"
    " <node name='b' op='Input' dtype='float32' shape='3,300'/>"
    " <node name='br' op='Reshape' shape='900'><input ref='b'/></node>"
    " <node name='s' op='AllReduce' reduction='sum'><input ref='a'/></node>"
    " <node name='m' op='AllReduce' reduction='mean'><input ref='br'/></node>"
    " <node name='o_s' op='Output'><input ref='s'/></node>"
    " <node name='o_m' op='Output'><input ref='m'/></node>"
    "</graph>";

static void test_verify_streamed_blocks(void **state) {
  (void)state;
  fx f;
  cf_tensor *got = streamed_fixture(&f, blocks_xml, 2);
  struct {
    const char *out;
    int rank;
    int64_t i;
    double by; /* the element times (1 + by), or NaN */
  } bad[] = {{"o_s", 3, 1499, 1e-3}, {"o_m", 2, 300, NAN}, {"o_s", 1, 700, 2e-5},
             {"o_s", 1, 512, 1.0},   {"o_m", 0, 899, -1.0}, {"o_s", 0, 255, 1e-4}};
  for (size_t k = 0; k < sizeof bad / sizeof *bad; k++) {
    float *d = got[bad[k].rank * f.nout + out_index(f.g, bad[k].out)].data;
    d[bad[k].i] = isnan(bad[k].by) ? NAN : d[bad[k].i] * (float)(1 + bad[k].by) + (float)bad[k].by;
    same_verdict(&f, got, 4, -1);
    same_verdict(&f, got, 4, bad[k].rank);
  }
  ASSERT_ERR(cf_verify_streamed(ctx, f.g, &f.in, SEED, got, 4, f.nout, -1, 0, NULL), CF_ERR_INVALID,
             "output 'o_s' rank 0 index 255: got");
  got_free(got, f.nout * 4);
  fx_free(&f);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_allreduce_float),
      cmocka_unit_test(test_allreduce_int),
      cmocka_unit_test(test_allgather),
      cmocka_unit_test(test_scatter_reduce_broadcast),
      cmocka_unit_test(test_groups),
      cmocka_unit_test(test_fused_collectives),
      cmocka_unit_test(test_matmul_collectives),
      cmocka_unit_test(test_quant_matmul),
      cmocka_unit_test(test_compute),
      cmocka_unit_test(test_errors),
      cmocka_unit_test(test_verify),
      cmocka_unit_test(test_verify_float16),
      cmocka_unit_test(test_fill_at),
      cmocka_unit_test(test_verify_streamed),
      cmocka_unit_test(test_verify_streamed_blocks),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
