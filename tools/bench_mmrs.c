/* bench_mmrs.c - `collfuse bench mmrs`: the fused MatmulReduceScatter
 * against MatMul followed by ReduceScatter (bench/README.md).
 *
 * For each rank count, dtype and shape (m, k, n) the graph x (m,k) @ w (k,n)
 * -> ReduceScatter(sum) -> Output is built in memory as native XML (for
 * int8: QuantMatMul with x1_scale (m,1) and x2_scale (1,n) -> bfloat16) and
 * compiled twice: by the default pipeline, which fuses it into one
 * MatmulReduceScatter, and by the default pipeline without
 * fuse-matmul-collective (the sequential peer). Two more graphs time the
 * parts alone: the MatMul by itself, and the ReduceScatter of an (m, n)
 * input of the product's dtype. The four run on N rank threads (threads
 * transport, CPU device) through cf_plan_build + cf_exec_run, as `collfuse
 * run` does, on the same caller-owned inputs (borrowed, so no run pays for
 * filling them). Each round runs every variant once, fused and sequential
 * back to back (in turn first), so drifting load on a shared machine hits
 * all four alike; a cell is the median of every timed iteration of every
 * round, "paired" the median over rounds of the fused run's time over
 * the sequential run's next to it, and "min" the fastest fused iteration
 * over the fastest sequential one (what other load disturbs least). overlap = (t_mm + t_rs -
 * t_fused) / min(t_mm, t_rs): 1 when the shorter part is hidden entirely, 0 when nothing overlaps,
 * negative when the fused op is slower than the parts one after the other.
 *
 * Numbers never come from broken runs: the first round's outputs of the
 * fused and the sequential graph are compared element by element, and a
 * sample of elements on every rank is checked against a float64 value
 * computed here from the inputs (tolerance as `run --verify`: 1e-5 of the
 * summed magnitudes for float32, 1e-2 for 16-bit results). A mismatch
 * stops the benchmark with exit 1.
 */
#include "tools.h"

#include "../executor/plan.h"
#include "../ir/trace.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

enum { MAX_SHAPES = 32, MAX_RANK_COUNTS = 4, MAX_DTYPES = 4, MAX_ROUNDS = 50, MAX_ITERS = 50 };
enum { V_FUSED, V_SEQ, V_MM, V_RS, N_VARIANTS };
enum { SAMPLES = 48 }; /* reference-checked elements per rank */

static const char *const variant_names[N_VARIANTS] = {"fused", "sequential", "matmul",
                                                      "reduce_scatter"};

/* Default pipeline without fuse-matmul-collective: MatMul, then ReduceScatter. */
static const char pipeline_sequential[] =
    "verify,infer,dce,fuse-allreduce,fuse-allgather,fuse-reducescatter";

typedef struct mm_shape {
  int64_t m, k, n;
} mm_shape;

/* Spans m 1024..16384, k and n 1024..8192 one dimension at a time: about
 * 70 GFLOP per rank for one pass over the shapes, so three rounds of the
 * three variants that multiply, both rank counts and all three dtypes take
 * a few minutes on two cores. Larger shapes: --shapes. */
static const mm_shape default_shapes[] = {
    {1024, 1024, 1024}, {16384, 1024, 1024}, {1024, 8192, 1024}, {1024, 1024, 8192}};
static const mm_shape quick_shapes[] = {{1024, 512, 512}};

typedef struct mm_options {
  int ranks[MAX_RANK_COUNTS], n_ranks;
  mm_shape shapes[MAX_SHAPES];
  int n_shapes;
  cf_dtype dtypes[MAX_DTYPES]; /* CF_DT_INT8: the quantized form */
  int n_dtypes;
  int iters, warmup, rounds;
  int comm_turn; /* -1: the executor's choice; else set on the fused op */
  uint64_t seed;
  int64_t max_memory; /* 0: what the machine has available */
  const char *trace;  /* --trace FILE.json: FILE.<row>.fused.json and .sequential.json */
  bool json, quick, quiet;
} mm_options;

typedef struct mm_row {
  int index; /* in table order, from 0 (--trace's file names) */
  int ranks;
  cf_dtype dt;
  mm_shape s;
  int chunks;            /* the fused op's pipeline */
  double ms[N_VARIANTS]; /* medians */
  double samples[N_VARIANTS][MAX_ROUNDS * MAX_ITERS];
  int n_samples[N_VARIANTS];
  double run_ms[N_VARIANTS][MAX_ROUNDS]; /* each round's median */
  double paired;      /* median over rounds of fused / sequential of that round */
  double min_ratio;   /* fastest fused / fastest sequential iteration */
  double max_diff;    /* fused vs sequential, over the mean magnitude */
  double max_ref_err; /* either vs float64, over each element's magnitude */
  int64_t checked;    /* elements compared against the reference */
} mm_row;

static const char *dtype_label(cf_dtype dt) {
  return dt == CF_DT_INT8 ? "int8-quant" : cf_dtype_name(dt);
}

/* The product's dtype: the quantized form gives bfloat16. */
static cf_dtype out_dtype(cf_dtype dt) { return dt == CF_DT_INT8 ? CF_DT_BFLOAT16 : dt; }

/* ---------------- graphs ---------------- */

typedef enum graph_kind { G_FULL, G_MM, G_RS } graph_kind;

/* The graph of one variant as native XML (malloc'd). */
static char *graph_xml(graph_kind kind, int ranks, cf_dtype dt, const mm_shape *s) {
  char buf[2048];
  long long m = s->m, k = s->k, n = s->n;
  const char *d = cf_dtype_name(dt);
  int o = snprintf(buf, sizeof buf, "<graph name='bench_mmrs' version='1' world_size='%d'>", ranks);
  if (kind == G_RS) {
    o += snprintf(buf + o, sizeof buf - o,
                  "<node name='p' op='Input' dtype='%s' shape='%lld,%lld'/>"
                  "<node name='rs' op='ReduceScatter' reduction='sum'><input ref='p'/></node>"
                  "<node name='y' op='Output'><input ref='rs'/></node></graph>",
                  cf_dtype_name(out_dtype(dt)), m, n);
    return strdup(buf);
  }
  o += snprintf(buf + o, sizeof buf - o,
                "<node name='x' op='Input' dtype='%s' shape='%lld,%lld'/>"
                "<node name='w' op='Input' dtype='%s' shape='%lld,%lld'/>",
                d, m, k, d, k, n);
  if (dt == CF_DT_INT8)
    o += snprintf(buf + o, sizeof buf - o,
                  "<node name='x1_scale' op='Input' dtype='float32' shape='%lld,1'/>"
                  "<node name='x2_scale' op='Input' dtype='float32' shape='1,%lld'/>"
                  "<node name='mm' op='QuantMatMul' output_dtype='bfloat16'><input ref='x'/>"
                  "<input ref='w'/><input ref='x1_scale'/><input ref='x2_scale'/></node>",
                  m, n);
  else
    o += snprintf(buf + o, sizeof buf - o,
                  "<node name='mm' op='MatMul'><input ref='x'/><input ref='w'/></node>");
  if (kind == G_FULL)
    o += snprintf(buf + o, sizeof buf - o,
                  "<node name='rs' op='ReduceScatter' reduction='sum'><input ref='mm'/></node>"
                  "<node name='y' op='Output'><input ref='rs'/></node></graph>");
  else
    o += snprintf(buf + o, sizeof buf - o,
                  "<node name='y' op='Output'><input ref='mm'/></node></graph>");
  return strdup(buf);
}

static cf_status compile(cf_context *ctx, const char *text, const char *pipeline, cf_graph **out) {
  cf_graph *g = NULL;
  cf_status st = cf_graph_parse(ctx, "bench_mmrs.xml", text, strlen(text), &g);
  cf_compile_options co = {.pipeline = pipeline};
  if (!st) st = cf_compile(g, &co);
  if (st) {
    cf_graph_destroy(g);
    g = NULL;
  }
  *out = g;
  return st;
}

/* The fused graph must hold one MatmulReduceScatter (with comm_turn set
 * when asked); else the benchmark would time something else. */
static cf_status check_fused(cf_context *ctx, cf_graph *g, int comm_turn) {
  const char *name = NULL;
  for (int i = 0; i < g->n_nodes; i++)
    if (g->nodes[i].op == CF_OP_MATMULREDUCESCATTER) name = g->nodes[i].name;
  if (!name)
    return cf_error(ctx, CF_ERR_INVALID, NULL, 0,
                    "bench mmrs: the default pipeline did not fuse MatMul -> ReduceScatter");
  if (comm_turn < 0) return CF_OK;
  cf_status st = cf_graph_set_attr_int(g, name, "comm_turn", comm_turn);
  return st ? st : cf_graph_verify(g, NULL);
}

/* ---------------- inputs ---------------- */

typedef struct mm_data {
  cf_inputs full, rs; /* x, w[, x1_scale, x2_scale]; p */
  const char *names[4], *rs_names[1];
} mm_data;

static void data_free(mm_data *d) {
  cf_inputs *in[2] = {&d->full, &d->rs};
  for (int j = 0; j < 2; j++) {
    if (in[j]->data)
      for (int i = 0; i < in[j]->n * in[j]->ranks; i++)
        free(in[j]->data[i].data);
    free(in[j]->data);
  }
  memset(d, 0, sizeof *d);
}

static cf_status tensor_alloc(cf_context *ctx, cf_tensor *t, cf_dtype dt, int64_t rows,
                              int64_t cols) {
  size_t bytes = (size_t)(rows * cols * cf_dtype_size(dt));
  *t = (cf_tensor){.dtype = dt, .shape = {.rank = 2, .dims = {rows, cols}}, .count = rows * cols};
  t->data = aligned_alloc(64, (bytes + 63) / 64 * 64);
  if (!t->data) {
    char b[32];
    return cf_error(ctx, CF_ERR_NO_MEMORY, NULL, 0,
                    "bench mmrs: cannot allocate %s for an input: out of memory",
                    cf_bytes_text((int64_t)bytes, b, sizeof b));
  }
  return CF_OK;
}

/* Every rank's inputs, filled as `collfuse run --seed` fills them. */
static cf_status data_make(cf_context *ctx, const cf_graph *g, int ranks, cf_dtype dt,
                           const mm_shape *s, uint64_t seed, mm_data *d) {
  memset(d, 0, sizeof *d);
  int n_in = dt == CF_DT_INT8 ? 4 : 2;
  static const char *const names[4] = {"x", "w", "x1_scale", "x2_scale"};
  d->full = (cf_inputs){.n = n_in, .ranks = ranks, .names = d->names, .borrow = true};
  d->rs = (cf_inputs){.n = 1, .ranks = ranks, .names = d->rs_names, .borrow = true};
  d->rs_names[0] = "p";
  d->full.data = calloc((size_t)(n_in * ranks), sizeof *d->full.data);
  d->rs.data = calloc((size_t)ranks, sizeof *d->rs.data);
  if (!d->full.data || !d->rs.data)
    return cf_error(ctx, CF_ERR_NO_MEMORY, NULL, 0, "out of memory");
  cf_status st = CF_OK;
  for (int k = 0; k < n_in && !st; k++) {
    d->names[k] = names[k];
    int idx = cf_graph_find(g, names[k]);
    if (idx < 0)
      return cf_error(ctx, CF_ERR_INVALID, NULL, 0, "bench mmrs: no input '%s'", names[k]);
    const cf_node *nd = &g->nodes[idx];
    for (int r = 0; r < ranks && !st; r++) {
      cf_tensor *t = &d->full.data[r * n_in + k];
      st = tensor_alloc(ctx, t, nd->out[0].dtype, nd->out[0].shape.dims[0],
                        nd->out[0].shape.dims[1]);
      if (!st) cf_fill_node(nd, t->data, t->dtype, t->count, seed, r);
    }
  }
  for (int r = 0; r < ranks && !st; r++) {
    cf_tensor *t = &d->rs.data[r];
    st = tensor_alloc(ctx, t, out_dtype(dt), s->m, s->n);
    if (!st) cf_fill_random(t->data, t->dtype, t->count, seed, r, "p");
  }
  return st;
}

/* ---------------- checks ---------------- */

/* Element (i, j) of rank's output in float64 from the inputs, and the sum
 * of the magnitudes of its terms. */
static double reference_at(const mm_data *d, int ranks, cf_dtype dt, const mm_shape *s, int rank,
                           int64_t i, int64_t j, double *mag) {
  int64_t row = rank * (s->m / ranks) + i;
  int n_in = d->full.n;
  double sum = 0;
  *mag = 0;
  for (int q = 0; q < ranks; q++) {
    const cf_tensor *x = &d->full.data[q * n_in], *w = &d->full.data[q * n_in + 1];
    double acc = 0, am = 0;
    for (int64_t p = 0; p < s->k; p++) {
      double t = cf_load_f64(x->data, x->dtype, row * s->k + p) *
                 cf_load_f64(w->data, w->dtype, p * s->n + j);
      acc += t;
      am += fabs(t);
    }
    if (dt == CF_DT_INT8) { /* acc is exact; the scales multiply it */
      double sc = cf_load_f64(d->full.data[q * n_in + 2].data, CF_DT_FLOAT32, row) *
                  cf_load_f64(d->full.data[q * n_in + 3].data, CF_DT_FLOAT32, j);
      acc *= sc;
      am = fabs(acc);
    }
    sum += acc;
    *mag += am;
  }
  return sum;
}

static double tolerance(cf_dtype dt) { return out_dtype(dt) == CF_DT_FLOAT32 ? 1e-5 : 1e-2; }

/* The fused and the sequential outputs (first round) against the float64
 * reference on a sample, and against each other everywhere; false with the
 * error in ctx. */
static bool check_outputs(cf_context *ctx, const mm_data *d, const cf_run_result *fused,
                          const cf_run_result *seq, mm_row *row) {
  int ranks = row->ranks;
  const mm_shape *s = &row->s;
  double tol = tolerance(row->dt), mag_sum = 0;
  int64_t mb = s->m / ranks, count = mb * s->n;
  const cf_run_result *res[2] = {fused, seq};
  row->max_ref_err = 0;
  row->checked = 0;
  uint64_t h = 0x9E3779B97F4A7C15ull;
  for (int r = 0; r < ranks; r++)
    for (int k = 0; k < SAMPLES; k++) {
      /* the corners, then spread pseudo-randomly */
      int64_t e =
          k == 0 ? 0
          : k == 1
              ? count - 1
              : (int64_t)((h = h * 6364136223846793005ull + 1442695040888963407ull) >> 17) % count;
      double mag, want = reference_at(d, ranks, row->dt, s, r, e / s->n, e % s->n, &mag);
      mag_sum += mag;
      for (int v = 0; v < 2; v++) {
        const cf_tensor *t = &res[v]->outputs[r];
        double got = cf_load_f64(t->data, t->dtype, e), err = fabs(got - want);
        if (!(err <= tol * mag)) {
          cf_error(ctx, CF_ERR_INVALID, NULL, 0,
                   "bench mmrs: %s %s %lldx%lldx%lld on %d ranks: rank %d index %lld: got %.9g, "
                   "expected %.9g (float64), tolerance %.3g",
                   variant_names[v], dtype_label(row->dt), (long long)s->m, (long long)s->k,
                   (long long)s->n, ranks, r, (long long)e, got, want, tol * mag);
          return false;
        }
        if (mag > 0 && err / mag > row->max_ref_err) row->max_ref_err = err / mag;
        row->checked++;
      }
    }
  /* fused == sequential within both their error bounds, everywhere */
  double mean_mag = mag_sum / (ranks * SAMPLES);
  row->max_diff = 0;
  for (int r = 0; r < ranks; r++) {
    const cf_tensor *a = &fused->outputs[r], *b = &seq->outputs[r];
    for (int64_t e = 0; e < count; e++) {
      double diff = fabs(cf_load_f64(a->data, a->dtype, e) - cf_load_f64(b->data, b->dtype, e));
      if (!(diff <= 2 * tol * mean_mag)) {
        cf_error(
            ctx, CF_ERR_INVALID, NULL, 0,
            "bench mmrs: %s %lldx%lldx%lld on %d ranks: fused and sequential differ at rank %d "
            "index %lld: %.9g vs %.9g",
            dtype_label(row->dt), (long long)s->m, (long long)s->k, (long long)s->n, ranks, r,
            (long long)e, cf_load_f64(a->data, a->dtype, e), cf_load_f64(b->data, b->dtype, e));
        return false;
      }
      if (mean_mag > 0 && diff / mean_mag > row->max_diff) row->max_diff = diff / mean_mag;
    }
  }
  return true;
}

/* ---------------- measuring ---------------- */

/* A row's memory against the machine's (or --max-memory), before its data
 * exists: every rank's inputs (of both graphs), the two results kept for
 * the check, and the largest variant's run (its arena and output copies). */
static cf_status check_memory(cf_context *ctx, const mm_options *o, cf_graph *const *g,
                              cf_plan *const *p, int ranks) {
  int64_t run = 0;
  for (int v = 0; v < N_VARIANTS; v++)
    if (cf_plan_run_bytes(p[v], false) > run) run = cf_plan_run_bytes(p[v], false);
  cf_mem_need need = {
      .file = "collfuse bench mmrs", .ranks = ranks, .hint = "use fewer ranks or smaller --shapes"};
  need.per_rank = cf_graph_io_bytes(g[V_SEQ], CF_OP_INPUT) +
                  cf_graph_io_bytes(g[V_RS], CF_OP_INPUT) +
                  2 * cf_graph_io_bytes(g[V_FUSED], CF_OP_OUTPUT) + run;
  return cf_mem_check(ctx, &need, o->max_memory, "--max-memory");
}

/* One row: compile and plan the four variants, run them round-robin,
 * check the first round's results. */
static cf_status measure(cf_context *ctx, const mm_options *o, mm_row *row) {
  cf_graph *g[N_VARIANTS] = {0};
  cf_plan *p[N_VARIANTS] = {0};
  char *text[3] = {graph_xml(G_FULL, row->ranks, row->dt, &row->s),
                   graph_xml(G_MM, row->ranks, row->dt, &row->s),
                   graph_xml(G_RS, row->ranks, row->dt, &row->s)};
  mm_data d = {0};
  cf_run_result keep[2] = {0}; /* fused, sequential: first round */
  cf_status st = CF_OK;
  if (!text[0] || !text[1] || !text[2])
    st = cf_error(ctx, CF_ERR_NO_MEMORY, NULL, 0, "out of memory");
  if (!st) st = compile(ctx, text[0], cf_pipeline_default, &g[V_FUSED]);
  if (!st) st = check_fused(ctx, g[V_FUSED], o->comm_turn);
  if (!st) st = compile(ctx, text[0], pipeline_sequential, &g[V_SEQ]);
  if (!st) st = compile(ctx, text[1], cf_pipeline_default, &g[V_MM]);
  if (!st) st = compile(ctx, text[2], cf_pipeline_default, &g[V_RS]);
  cf_run_options opt = {.ranks = row->ranks,
                        .iters = o->iters,
                        .warmup = o->warmup,
                        .seed = o->seed,
                        .timeout_s = 600};
  for (int v = 0; v < N_VARIANTS && !st; v++)
    st = cf_plan_build(ctx, g[v], &opt, &p[v]);
  if (!st) st = check_memory(ctx, o, g, p, row->ranks);
  if (!st) st = data_make(ctx, g[V_SEQ], row->ranks, row->dt, &row->s, o->seed, &d);
  row->chunks = 0;
  for (int c = 0; !st && c < p[V_FUSED]->n_colls; c++)
    if (p[V_FUSED]->colls[c].fused_mm) row->chunks = p[V_FUSED]->colls[c].chunks;
  memset(row->n_samples, 0, sizeof row->n_samples);
  /* one untimed MatMul first: whatever is cold at a new shape (the BLAS
   * library, the allocator's sizes) would otherwise land on round 0's
   * first variant */
  if (!st) {
    cf_run_result res = {0};
    st = cf_exec_run(ctx, p[V_MM], &d.full, &res);
    cf_run_result_free(&res);
  }
  /* fused and sequential back to back, first one then the other */
  static const int order[2][N_VARIANTS] = {{V_FUSED, V_SEQ, V_MM, V_RS},
                                           {V_SEQ, V_FUSED, V_RS, V_MM}};
  for (int r = 0; r < o->rounds && !st; r++)
    for (int j = 0; j < N_VARIANTS && !st; j++) {
      int v = order[r & 1][j];
      cf_run_result res = {0};
      /* --trace: the last round's fused and sequential runs */
      bool traced = o->trace && r == o->rounds - 1 && (v == V_FUSED || v == V_SEQ);
      cf_trace *t = NULL;
      if (traced && (st = cf_trace_create(row->ranks, CF_TRACE_EVENTS, &t))) break;
      ctx->trace = t;
      st = cf_exec_run(ctx, p[v], v == V_RS ? &d.rs : &d.full, &res);
      ctx->trace = NULL;
      if (t) {
        char path[4096];
        size_t n = strlen(o->trace);
        bool json = n > 5 && strcmp(o->trace + n - 5, ".json") == 0;
        snprintf(path, sizeof path, "%.*s.%d.%s.json", (int)(json ? n - 5 : n), o->trace, row->index,
                 v == V_FUSED ? "fused" : "sequential");
        if (st) cf_trace_fail(t, cf_context_errmsg(ctx));
        cf_status ws = cf_trace_write(ctx, t, path);
        if (!st) st = ws;
        cf_trace_destroy(t);
      }
      if (!st) {
        for (int i = 0; i < o->iters; i++)
          row->samples[v][row->n_samples[v]++] = res.time_ms[i];
        row->run_ms[v][r] = res.time_ms_median;
      }
      if (!st && r == 0 && v <= V_SEQ)
        keep[v] = res;
      else
        cf_run_result_free(&res);
    }
  if (!st && !check_outputs(ctx, &d, &keep[V_FUSED], &keep[V_SEQ], row)) st = CF_ERR_INVALID;
  for (int v = 0; v < N_VARIANTS && !st; v++) {
    double tmp[MAX_ROUNDS * MAX_ITERS];
    memcpy(tmp, row->samples[v], sizeof *tmp * (size_t)row->n_samples[v]);
    row->ms[v] = cf_bench_median(tmp, row->n_samples[v]);
  }
  double pr[MAX_ROUNDS];
  for (int r = 0; r < o->rounds && !st; r++)
    pr[r] = row->run_ms[V_SEQ][r] > 0 ? row->run_ms[V_FUSED][r] / row->run_ms[V_SEQ][r] : 0;
  if (!st) row->paired = cf_bench_median(pr, o->rounds);
  double lo[2] = {0, 0};
  for (int v = 0; v < 2 && !st; v++)
    for (int i = 0; i < row->n_samples[v]; i++)
      if (!lo[v] || row->samples[v][i] < lo[v]) lo[v] = row->samples[v][i];
  row->min_ratio = lo[1] > 0 ? lo[0] / lo[1] : 0;
  cf_run_result_free(&keep[0]);
  cf_run_result_free(&keep[1]);
  for (int v = 0; v < N_VARIANTS; v++) {
    cf_plan_destroy(p[v]);
    cf_graph_destroy(g[v]);
  }
  data_free(&d);
  for (int i = 0; i < 3; i++)
    free(text[i]);
  return st;
}

static double ratio(const mm_row *r) {
  return r->ms[V_SEQ] > 0 ? r->ms[V_FUSED] / r->ms[V_SEQ] : 0;
}

static double overlap(const mm_row *r) {
  double lo = r->ms[V_MM] < r->ms[V_RS] ? r->ms[V_MM] : r->ms[V_RS];
  return lo > 0 ? (r->ms[V_MM] + r->ms[V_RS] - r->ms[V_FUSED]) / lo : 0;
}

/* ---------------- report ---------------- */

static void print_header(const mm_options *o) {
  printf("collfuse bench mmrs: MatMul -> ReduceScatter(sum), fused (MatmulReduceScatter) vs "
         "sequential\n");
  printf(
      "  rank threads (threads transport, CPU device, %ld cores); median ms per iteration over %d "
      "round(s) x %d iteration(s) after %d warm-up, variants interleaved; comm_turn %s\n",
      sysconf(_SC_NPROCESSORS_ONLN), o->rounds, o->iters, o->warmup,
      o->comm_turn < 0 ? "as compiled (0 = auto)" : "forced");
  printf("%5s %-10s %6s %5s %5s %6s %10s %10s %9s %9s %9s %7s %7s %8s\n", "ranks", "dtype", "m",
         "k", "n", "chunks", "fused_ms", "seq_ms", "mm_ms", "rs_ms", "fused/seq", "paired", "min",
         "overlap");
  fflush(stdout);
}

static void print_row(const mm_row *r) {
  printf("%5d %-10s %6lld %5lld %5lld %6d %10.2f %10.2f %9.2f %9.2f %8.3fx %6.3fx %6.3fx %8.2f\n",
         r->ranks, dtype_label(r->dt), (long long)r->s.m, (long long)r->s.k, (long long)r->s.n,
         r->chunks, r->ms[V_FUSED], r->ms[V_SEQ], r->ms[V_MM], r->ms[V_RS], ratio(r), r->paired,
         r->min_ratio, overlap(r));
  fflush(stdout);
}

static cJSON *row_json(const mm_row *r) {
  cJSON *j = cJSON_CreateObject();
  cJSON_AddNumberToObject(j, "ranks", r->ranks);
  cJSON_AddStringToObject(j, "dtype", cf_dtype_name(r->dt));
  cJSON_AddBoolToObject(j, "quantized", r->dt == CF_DT_INT8);
  cJSON_AddStringToObject(j, "output_dtype", cf_dtype_name(out_dtype(r->dt)));
  cJSON_AddNumberToObject(j, "m", (double)r->s.m);
  cJSON_AddNumberToObject(j, "k", (double)r->s.k);
  cJSON_AddNumberToObject(j, "n", (double)r->s.n);
  cJSON_AddNumberToObject(j, "chunks", r->chunks);
  cJSON_AddNumberToObject(j, "t_fused_ms", r->ms[V_FUSED]);
  cJSON_AddNumberToObject(j, "t_sequential_ms", r->ms[V_SEQ]);
  cJSON_AddNumberToObject(j, "t_mm_ms", r->ms[V_MM]);
  cJSON_AddNumberToObject(j, "t_rs_ms", r->ms[V_RS]);
  cJSON_AddNumberToObject(j, "ratio_fused_vs_sequential", ratio(r));
  cJSON_AddNumberToObject(j, "ratio_paired_median", r->paired);
  cJSON_AddNumberToObject(j, "ratio_min", r->min_ratio);
  cJSON_AddNumberToObject(j, "overlap_efficiency", overlap(r));
  cJSON *s = cJSON_AddObjectToObject(j, "samples_ms");
  for (int v = 0; v < N_VARIANTS; v++)
    cJSON_AddItemToObject(s, variant_names[v],
                          cJSON_CreateDoubleArray(r->samples[v], r->n_samples[v]));
  cJSON *c = cJSON_AddObjectToObject(j, "check");
  cJSON_AddNumberToObject(c, "reference_elements", (double)r->checked);
  cJSON_AddNumberToObject(c, "max_rel_err_vs_float64", r->max_ref_err);
  cJSON_AddNumberToObject(c, "max_diff_fused_vs_sequential", r->max_diff);
  return j;
}

/* ---------------- options ---------------- */

static bool fail(char *why, size_t len, const char *fmt, const char *v) {
  snprintf(why, len, fmt, v);
  return false;
}

static bool check_shapes(void *out, const char *v, char *why, size_t len) {
  mm_options *o = out;
  const char *p = v;
  o->n_shapes = 0;
  while (*p) {
    mm_shape s;
    if (o->n_shapes == MAX_SHAPES)
      return fail(why, len, "--shapes takes at most 32 shapes, got '%s'", v);
    if (!cf_parse_int_prefix(&p, 1, 1 << 20, &s.m) || *p++ != 'x' ||
        !cf_parse_int_prefix(&p, 1, 1 << 20, &s.k) || *p++ != 'x' ||
        !cf_parse_int_prefix(&p, 1, 1 << 20, &s.n) || (*p && *p != ','))
      return fail(why, len,
                  "--shapes wants MxKxN[,MxKxN...] with dimensions in 1..1048576, got '%s'", v);
    o->shapes[o->n_shapes++] = s;
    if (*p == ',') p++;
  }
  return o->n_shapes ? true : fail(why, len, "--shapes wants at least one MxKxN, got '%s'", v);
}

static bool check_dtypes(void *out, const char *v, char *why, size_t len) {
  mm_options *o = out;
  char buf[128];
  snprintf(buf, sizeof buf, "%s", v);
  o->n_dtypes = 0;
  for (char *save = NULL, *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
    cf_dtype dt;
    if (!strcmp(t, "float32") || !strcmp(t, "f32"))
      dt = CF_DT_FLOAT32;
    else if (!strcmp(t, "float16") || !strcmp(t, "f16"))
      dt = CF_DT_FLOAT16;
    else if (!strcmp(t, "bfloat16") || !strcmp(t, "bf16"))
      dt = CF_DT_BFLOAT16;
    else if (!strcmp(t, "int8") || !strcmp(t, "int8-quant"))
      dt = CF_DT_INT8;
    else {
      char dym[96];
      snprintf(why, len,
               "--dtypes takes float32, float16, bfloat16 and int8 (quantized), got '%s'%s", t,
               cf_did_you_mean(cf_dtype_suggest(t), dym, sizeof dym));
      return false;
    }
    if (o->n_dtypes == MAX_DTYPES)
      return fail(why, len, "--dtypes takes at most 4 dtypes, got '%s'", v);
    o->dtypes[o->n_dtypes++] = dt;
  }
  return o->n_dtypes ? true : fail(why, len, "--dtypes wants at least one dtype, got '%s'", v);
}

static bool check_ranks(void *out, const char *v, char *why, size_t len) {
  mm_options *o = out;
  const char *p = v;
  o->n_ranks = 0;
  while (*p) {
    int64_t r;
    if (o->n_ranks == MAX_RANK_COUNTS || !cf_parse_int_prefix(&p, 2, 64, &r) || (*p && *p != ','))
      return fail(why, len, "--ranks wants up to 4 rank counts in 2..64 (e.g. 2,4), got '%s'", v);
    o->ranks[o->n_ranks++] = (int)r;
    if (*p == ',') p++;
  }
  return o->n_ranks ? true : fail(why, len, "--ranks wants a rank count, got '%s'", v);
}

static bool check_seed(void *out, const char *v, char *why, size_t len) {
  int s;
  if (!cf_bench_parse_int(v, 0, 1 << 30, &s))
    return fail(why, len, "--seed wants 0..2^30, got '%s'", v);
  ((mm_options *)out)->seed = (uint64_t)s;
  return true;
}

static const cf_opt mm_opts[] = {
    {"--ranks", NULL, "N,..", CF_OPT_CALL, 0, .comma_list = true, .check = check_ranks,
     .help = "rank counts, each 2..64 (default 2,4)"},
    {"--shapes", NULL, "MxKxN,..", CF_OPT_CALL, 0, .comma_list = true, .check = check_shapes,
     .help = "x (m,k) @ w (k,n) (default 1024x1024x1024, 16384x1024x1024,\n"
             "1024x8192x1024, 1024x1024x8192)"},
    {"--dtypes", NULL, "D,..", CF_OPT_CALL, 0, .comma_list = true, .check = check_dtypes,
     .help = "float32, float16, bfloat16, int8 (quantized)\n"
             "(default float32,bfloat16,int8)"},
    {"--iters", NULL, "K", CF_OPT_INT, offsetof(mm_options, iters), 1, MAX_ITERS,
     .help = "timed iterations per round (default 1)"},
    {"--warmup", NULL, "W", CF_OPT_INT, offsetof(mm_options, warmup), 0, 100,
     .help = "untimed iterations first (default 0)"},
    {"--rounds", NULL, "R", CF_OPT_INT, offsetof(mm_options, rounds), 1, MAX_ROUNDS,
     .help = "round-robin rounds (default 3; --quick 1)"},
    {"--comm-turn", NULL, "T", CF_OPT_INT, offsetof(mm_options, comm_turn), 0, 1 << 20,
     .help = "the fused op's chunks (0 = auto)"},
    {"--seed", NULL, "S", CF_OPT_CALL, 0, .check = check_seed, .help = "inputs' seed (default 0)"},
    {"--quick", NULL, NULL, CF_OPT_FLAG, offsetof(mm_options, quick),
     .help = "1024x512x512, one round: a smoke test"},
    CF_OPT_MAX_MEMORY(offsetof(mm_options, max_memory)),
    {"--trace", NULL, "FILE.json", CF_OPT_STR, offsetof(mm_options, trace),
     .help = "the last round's fused and sequential runs of each row as\n"
             "Chrome traces (run --trace): FILE.<row>.fused.json and\n"
             "FILE.<row>.sequential.json, rows numbered from 0 in table order"},
    CF_OPT_JSON(offsetof(mm_options, json)),
    CF_OPT_QUIET(offsetof(mm_options, quiet)),
    {0},
};

const cf_command cf_command_bench_mmrs = {
    .name = "bench mmrs",
    .summary = "fused MatmulReduceScatter vs MatMul then ReduceScatter",
    .about = "x (m,k) @ w (k,n) -> ReduceScatter(sum) on N rank threads, compiled fused\n"
             "(MatmulReduceScatter) and sequential (the default pipeline without\n"
             "fuse-matmul-collective), next to the MatMul alone and the ReduceScatter alone,\n"
             "round-robin: median ms, fused/sequential (also paired per round and fastest vs\n"
             "fastest) and the overlap efficiency (mm + rs - fused) / min(mm, rs). int8 is\n"
             "quantized: QuantMatMul with x1_scale (m,1) and x2_scale (1,n) -> bfloat16.\n"
             "Every row is checked (fused vs sequential, both vs float64 on a sample); a\n"
             "mismatch exits 1. See bench/README.md.\n",
    .opts = mm_opts,
    .run = cf_bench_mmrs,
};

static int parse_options(int argc, char **argv, mm_options *o) {
  *o = (mm_options){.ranks = {2, 4},
                    .n_ranks = 2,
                    .dtypes = {CF_DT_FLOAT32, CF_DT_BFLOAT16, CF_DT_INT8},
                    .n_dtypes = 3,
                    .iters = 1,
                    .warmup = 0,
                    .rounds = -1,
                    .comm_turn = -1};
  int rc = cf_opts_parse(&cf_command_bench_mmrs, argc, argv, o);
  cf_opts_free(&cf_command_bench_mmrs, o);
  if (rc) return rc;
  if (cf_tool_is_std(o->trace))
    return cf_tool_usage("bench mmrs", "%s", "--trace wants a file (FILE.json), not '-'");
  const mm_shape *def = o->quick ? quick_shapes : default_shapes;
  size_t n_def = o->quick ? sizeof quick_shapes / sizeof *def : sizeof default_shapes / sizeof *def;
  if (!o->n_shapes)
    for (size_t i = 0; i < n_def; i++)
      o->shapes[o->n_shapes++] = def[i];
  if (o->rounds < 0) o->rounds = o->quick ? 1 : 3; /* a smoke test: one round of one iteration */
  for (int s = 0; s < o->n_shapes; s++)
    for (int r = 0; r < o->n_ranks; r++)
      if (o->shapes[s].m % o->ranks[r]) {
        char b[96];
        snprintf(b, sizeof b, "--shapes: m=%lld is not divisible by %d ranks",
                 (long long)o->shapes[s].m, o->ranks[r]);
        return cf_tool_usage("bench mmrs", "%s", b);
      }
  return 0;
}

int cf_bench_mmrs(cf_context *ctx, int argc, char **argv) {
  mm_options o;
  int rc = parse_options(argc, argv, &o);
  if (rc) return rc == CF_OPTS_HELP ? 0 : rc;
  int total = o.n_ranks * o.n_dtypes * o.n_shapes;
  mm_row *rows = calloc((size_t)total, sizeof *rows);
  if (!rows) return cf_tool_fail(ctx, cf_error(ctx, CF_ERR_NO_MEMORY, NULL, 0, "out of memory"));
  if (!o.json) print_header(&o);
  cf_status st = CF_OK;
  int done = 0;
  for (int r = 0; r < o.n_ranks && !st; r++)
    for (int t = 0; t < o.n_dtypes && !st; t++)
      for (int s = 0; s < o.n_shapes && !st; s++) {
        mm_row *row = &rows[done];
        *row = (mm_row){.ranks = o.ranks[r], .dt = o.dtypes[t], .s = o.shapes[s], .index = done};
        st = measure(ctx, &o, row);
        if (st) break;
        done++;
        if (!o.json) print_row(row);
      }
  if (st) {
    rc = cf_tool_fail(ctx, st);
  } else if (o.json) {
    cJSON *root = cJSON_CreateObject();
    cJSON_AddStringToObject(root, "bench", "mmrs");
    cJSON_AddStringToObject(root, "backend", "threads");
    cJSON_AddStringToObject(root, "device", "cpu");
    cJSON_AddNumberToObject(root, "cores", (double)sysconf(_SC_NPROCESSORS_ONLN));
    cJSON_AddNumberToObject(root, "iters", o.iters);
    cJSON_AddNumberToObject(root, "warmup", o.warmup);
    cJSON_AddNumberToObject(root, "rounds", o.rounds);
    if (o.comm_turn >= 0)
      cJSON_AddNumberToObject(root, "comm_turn", o.comm_turn);
    else
      cJSON_AddNullToObject(root, "comm_turn");
    cJSON *arr = cJSON_AddArrayToObject(root, "results");
    for (int i = 0; i < done; i++)
      cJSON_AddItemToArray(arr, row_json(&rows[i]));
    char *s = cJSON_PrintUnformatted(root);
    if (s) puts(s);
    free(s);
    cJSON_Delete(root);
  } else {
    printf("fused/seq: ratio of the medians; paired: median over rounds of fused / sequential run\n"
           "back to back; min: fastest fused / fastest sequential iteration;\n"
           "overlap = (mm_ms + rs_ms - fused_ms) / min(mm_ms, rs_ms). Every row is checked: fused\n"
           "vs sequential everywhere, both vs float64 on %d elements per rank.\n",
           SAMPLES);
  }
  free(rows);
  return rc;
}
