/* bench_fusion.c - `collfuse bench fusion FILE`: what fusion buys on a
 * real graph, against the unfused graph and against the ideal
 * (bench/README.md).
 *
 * The graph runs on N rank threads (its world_size is overridden, as `run
 * --ranks` does) once per variant: unfused (-O0), fused by the default
 * pipeline (split auto), and fused with each --split spec; the ideal is one
 * flat AllReduce of all the graph's AllReduce bytes in its dominant dtype
 * and reduction, built in memory as native XML. Every variant goes through
 * the same cf_plan_build + cf_exec_run as `collfuse run` with the same
 * ranks, iterations and seed, so the difference between two rows is the
 * bucket layout alone: fused/ideal says how close the buckets come to one
 * big message, fused/unfused what fusion saves. A spec that does not fit
 * the graph (size:/index: segments) is skipped with the reason. With
 * --rounds R every variant runs R times, round-robin, and reports the
 * median round, so drifting load on a shared machine hits all rows alike.
 */
#include "tools.h"

#include "../executor/executor.h"
#include "../ir/trace.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { MAX_SPLITS = 16, MAX_ROUNDS = 100 };

static const char *const default_splits[] = {"bytes:25M", "bytes:4M", "size:50,50"};

typedef struct fu_options {
  const char *file;
  int ranks, iters, warmup;
  int rounds; /* every variant runs once per round, round-robin */
  const char *splits[MAX_SPLITS];
  int n_splits;
  int64_t max_memory; /* 0: what the machine has available */
  bool json;
  bool api;          /* --api: bench_fusion_api.c instead of the variants */
  const char *trace; /* --trace FILE.json: each variant's last round, FILE.<variant>.json */
} fu_options;

typedef struct variant {
  char name[64];
  const char *pipeline; /* NULL: the ideal graph */
  const char *split;    /* --split SPEC or NULL */
  cf_graph *g;          /* compiled */
  cf_plan *plan;
  int collectives;             /* per rank per iteration */
  int64_t peak_bytes;          /* memory plan per rank */
  double round_ms[MAX_ROUNDS]; /* median per iteration of each round */
  double ms;                   /* median of the rounds; 0 when skipped */
  double round_exposed[MAX_ROUNDS]; /* exposed communication per iteration (timeline.c) */
  double exposed_ms;                /* median of the rounds; -1: not measured */
  const char *tag;                  /* its --trace file's middle name */
  char skipped[320];
} variant;

/* The graph's AllReduce traffic, for the ideal. */
typedef struct ar_totals {
  int count;     /* AllReduce nodes (members of fused ones included) */
  int64_t bytes; /* all of them */
  int64_t by_dtype[CF_DT_COUNT];
  int64_t by_red[CF_RED_COUNT];
  int other; /* collectives that are not AllReduce */
} ar_totals;

/* Load FILE (or parse text when given), size it to the run's ranks and
 * compile it with pipeline and split. */
static cf_status compile(cf_context *ctx, const fu_options *o, const char *text,
                         const char *pipeline, const char *split, cf_graph **out) {
  cf_graph *g = NULL;
  cf_status st = text ? cf_graph_parse(ctx, "ideal.xml", text, strlen(text), &g)
                      : cf_tool_load(ctx, o->file, &g);
  if (!st) {
    char job[32];
    snprintf(job, sizeof job, "--ranks %d", o->ranks);
    cf_compile_options co = {.pipeline = pipeline, .pass = {.split = split}};
    st = cf_graph_size_world(g, o->ranks, job);
    if (!st) st = cf_compile(g, &co);
  }
  if (st) {
    cf_graph_destroy(g);
    g = NULL;
  }
  *out = g;
  return st;
}

static void totals_of(const cf_graph *g, ar_totals *t) {
  memset(t, 0, sizeof *t);
  for (int i = 0; i < g->n_nodes; i++) {
    const cf_node *n = &g->nodes[i];
    if (cf_op_unfused(n->op) != CF_OP_ALLREDUCE) { /* AllReduce and its buckets */
      t->other += cf_op_is_collective(n->op);
      continue;
    }
    int64_t b = cf_node_comm_bytes(g, n);
    t->count += n->op == CF_OP_ALLREDUCE ? 1 : n->n_in; /* a bucket's members */
    t->bytes += b;
    t->by_dtype[n->out[0].dtype] += b;
    t->by_red[cf_node_reduction(n)] += b;
  }
}

static int argmax(const int64_t *v, int n) {
  int k = 0;
  for (int i = 1; i < n; i++)
    if (v[i] > v[k]) k = i;
  return k;
}

/* One flat AllReduce of all the AllReduce bytes, in the dominant dtype and
 * reduction, as native XML (malloc'd). */
static char *ideal_xml(const ar_totals *t, int ranks, char *label, size_t len) {
  cf_dtype dt = (cf_dtype)argmax(t->by_dtype, CF_DT_COUNT);
  cf_reduction red = (cf_reduction)argmax(t->by_red, CF_RED_COUNT);
  int es = cf_dtype_size(dt);
  long long count = (long long)((t->bytes + es - 1) / es);
  char b[32];
  cf_bytes_text(count * es, b, sizeof b);
  snprintf(label, len, "ideal: 1 x %s %s", b, cf_dtype_name(dt));
  const char *fmt =
      "<graph name='ideal' version='1' world_size='%d'>"
      "<node name='x' op='Input' dtype='%s' shape='%lld'/>"
      "<node name='ar' op='AllReduce' reduction='%s' fusion='0'><input ref='x'/></node>"
      "<node name='y' op='Output'><input ref='ar'/></node></graph>";
  int n = snprintf(NULL, 0, fmt, ranks, cf_dtype_name(dt), count, cf_reduction_name(red));
  char *s = malloc((size_t)n + 1);
  if (s) snprintf(s, (size_t)n + 1, fmt, ranks, cf_dtype_name(dt), count, cf_reduction_name(red));
  return s;
}

/* Compile and plan one variant; a --split spec that does not fit the graph
 * skips the row, any other failure is the benchmark's. */
static cf_status plan_variant(cf_context *ctx, const fu_options *o, const char *text, variant *v) {
  cf_status st = compile(ctx, o, text, v->pipeline ? v->pipeline : cf_pipeline_O0, v->split, &v->g);
  if (st && v->split) {
    snprintf(v->skipped, sizeof v->skipped, "%s", cf_context_errmsg(ctx));
    return CF_OK;
  }
  cf_run_options opt = {
      .ranks = o->ranks, .iters = o->iters, .warmup = o->warmup, .timeout_s = 120};
  if (!st) st = cf_plan_build(ctx, v->g, &opt, &v->plan);
  if (!st) v->peak_bytes = cf_plan_peak_bytes(v->plan);
  return st;
}

/* One round of a planned variant: warm-up and timed iterations, their
 * events recorded for the exposed communication (and, in the last round,
 * --trace's file). */
static cf_status run_variant(cf_context *ctx, const fu_options *o, variant *v, int round) {
  cf_run_result res = {0};
  cf_trace *t = NULL;
  cf_status st = cf_trace_create(o->ranks, CF_TRACE_EVENTS, &t);
  ctx->trace = t;
  if (!st) st = cf_exec_run(ctx, v->plan, NULL, &res);
  ctx->trace = NULL;
  if (!st) {
    v->round_ms[round] = res.time_ms_median;
    v->collectives = (int)res.collectives_executed;
    v->round_exposed[round] = cf_tool_exposed_ms(t, o->warmup, cf_plan_colls(v->plan));
  }
  if (o->trace && (st || round == o->rounds - 1)) {
    char path[4096];
    size_t n = strlen(o->trace);
    bool json = n > 5 && strcmp(o->trace + n - 5, ".json") == 0;
    snprintf(path, sizeof path, "%.*s.%s.json", (int)(json ? n - 5 : n), o->trace, v->tag);
    if (st) cf_trace_fail(t, cf_context_errmsg(ctx));
    cf_status ws = cf_trace_write(ctx, t, path);
    if (!st) st = ws;
  }
  cf_trace_destroy(t);
  cf_run_result_free(&res);
  return st;
}

static double median_of(const double *v, int n) {
  double s[MAX_ROUNDS];
  memcpy(s, v, sizeof *s * (size_t)n);
  return cf_bench_median(s, n);
}

static double ratio(double a, double b) { return a > 0 && b > 0 ? a / b : 0; }

static void print_table(const fu_options *o, const ar_totals *t, const variant *v, int nv,
                        const variant *ideal, const variant *unfused) {
  char b[32];
  cf_bytes_text(t->bytes, b, sizeof b);
  printf("collfuse bench fusion: %s on %d rank%s (threads transport, CPU device)\n", cf_tool_name(o->file),
         o->ranks, cf_s(o->ranks));
  printf("  %d AllReduce%s, %s in all%s; median ms per iteration over %d iteration%s after %d "
         "warm-up",
         t->count, cf_s(t->count), b,
         t->other ? " (the graph has other collectives too: the ideal leaves them out)" : "",
         o->iters, cf_s(o->iters), o->warmup);
  if (o->rounds > 1) printf(", median of %d rounds (variants round-robin)", o->rounds);
  printf("\n");
  printf("%-34s %6s %10s %10s %10s %9s %11s\n", "variant", "colls", "ms/iter", "exposed",
         "peak/rank", "vs ideal", "vs unfused");
  for (int i = 0; i < nv; i++) {
    if (v[i].skipped[0]) {
      printf("%-34s skipped: %s\n", v[i].name, v[i].skipped);
      continue;
    }
    char pk[32], qi[16] = "-", qu[16] = "-";
    cf_bytes_text(v[i].peak_bytes, pk, sizeof pk);
    if (ratio(v[i].ms, ideal->ms) > 0) snprintf(qi, sizeof qi, "%.2fx", ratio(v[i].ms, ideal->ms));
    if (ratio(v[i].ms, unfused->ms) > 0)
      snprintf(qu, sizeof qu, "%.3fx", ratio(v[i].ms, unfused->ms));
    printf("%-34s %6d %10.3f %10.3f %10s %9s %11s\n", v[i].name, v[i].collectives, v[i].ms,
           v[i].exposed_ms, pk, qi, qu);
  }
}

static void print_json(const fu_options *o, const char *graph_name, const ar_totals *t,
                       const variant *v, int nv, const variant *ideal, const variant *unfused) {
  cJSON *root = cJSON_CreateObject();
  cJSON_AddStringToObject(root, "bench", "fusion");
  cJSON_AddStringToObject(root, "file", cf_tool_name(o->file));
  cJSON_AddStringToObject(root, "graph", graph_name ? graph_name : "");
  cJSON_AddNumberToObject(root, "ranks", o->ranks);
  cJSON_AddNumberToObject(root, "iters", o->iters);
  cJSON_AddNumberToObject(root, "warmup", o->warmup);
  cJSON_AddNumberToObject(root, "rounds", o->rounds);
  cJSON *a = cJSON_AddObjectToObject(root, "allreduce");
  cJSON_AddNumberToObject(a, "count", t->count);
  cJSON_AddNumberToObject(a, "bytes", (double)t->bytes);
  cJSON_AddNumberToObject(a, "other_collectives", t->other);
  cJSON *arr = cJSON_AddArrayToObject(root, "variants");
  for (int i = 0; i < nv; i++) {
    cJSON *j = cJSON_CreateObject();
    cJSON_AddStringToObject(j, "name", v[i].name);
    if (v[i].split) cJSON_AddStringToObject(j, "split", v[i].split);
    if (v[i].skipped[0]) {
      cJSON_AddStringToObject(j, "skipped", v[i].skipped);
    } else {
      cJSON_AddNumberToObject(j, "collectives", v[i].collectives);
      cJSON_AddNumberToObject(j, "time_ms", v[i].ms);
      cJSON_AddNumberToObject(j, "exposed_ms", v[i].exposed_ms);
      cJSON_AddItemToObject(j, "time_ms_rounds", cJSON_CreateDoubleArray(v[i].round_ms, o->rounds));
      cJSON_AddNumberToObject(j, "peak_bytes", (double)v[i].peak_bytes);
      if (ratio(v[i].ms, ideal->ms) > 0)
        cJSON_AddNumberToObject(j, "ratio_vs_ideal", ratio(v[i].ms, ideal->ms));
      if (ratio(v[i].ms, unfused->ms) > 0)
        cJSON_AddNumberToObject(j, "ratio_vs_unfused", ratio(v[i].ms, unfused->ms));
    }
    cJSON_AddItemToArray(arr, j);
  }
  char *text = cJSON_PrintUnformatted(root);
  if (text) puts(text);
  free(text);
  cJSON_Delete(root);
}

/* What the table fills; parse_options turns it into fu_options. */
typedef struct fu_args {
  cf_opt_list file, split;
  int ranks, iters, warmup, rounds;
  int64_t max_memory;
  const char *trace;
  bool quick, json, api, quiet;
} fu_args;

static bool check_split(void *out, const char *v, char *why, size_t len) {
  if (((fu_args *)out)->split.n > MAX_SPLITS) {
    snprintf(why, len, "at most %d --split specs, got '%s'", MAX_SPLITS, v);
    return false;
  }
  return cf_opt_check_split(out, v, why, len);
}

static const cf_opt fu_opts[] = {
    {"--ranks", NULL, "N", CF_OPT_INT, offsetof(fu_args, ranks), 1, CF_MAX_WORLD,
     .help = "rank threads (default 4; the graph's world_size is overridden)"},
    {"--iters", NULL, "K", CF_OPT_INT, offsetof(fu_args, iters), 1, 100000,
     .help = "timed iterations per variant (default 10; --quick 2)"},
    {"--warmup", NULL, "W", CF_OPT_INT, offsetof(fu_args, warmup), 0, 100000,
     .help = "untimed iterations first (default 2; --quick 1)"},
    {"--rounds", NULL, "R", CF_OPT_INT, offsetof(fu_args, rounds), 1, MAX_ROUNDS,
     .help = "run every variant once per round, round-robin (default 1)"},
    {"--split", NULL, "SPEC", CF_OPT_LIST, offsetof(fu_args, split), .comma_list = true,
     .check = check_split,
     .help = "a fused variant with this split (default bytes:25M, bytes:4M,\n"
             "size:50,50)"},
    {"--quick", NULL, NULL, CF_OPT_FLAG, offsetof(fu_args, quick),
     .help = "2 iterations, no extra splits: a smoke test"},
    {"--api", NULL, NULL, CF_OPT_FLAG, offsetof(fu_args, api),
     .help = "instead: a DP step through the C API, separate buffers vs\n"
             "bucket views (copies, ms per step, ratio)"},
    CF_OPT_MAX_MEMORY(offsetof(fu_args, max_memory)),
    {"--trace", NULL, "FILE.json", CF_OPT_STR, offsetof(fu_args, trace),
     .help = "each variant's last round as a Chrome trace (run --trace),\n"
             "FILE.unfused.json, FILE.fused.json, FILE.split1.json, ...,\n"
             "FILE.ideal.json"},
    CF_OPT_JSON(offsetof(fu_args, json)),
    CF_OPT_QUIET(offsetof(fu_args, quiet)),
    {0},
};

const cf_command cf_command_bench_fusion = {
    .name = "bench fusion",
    .args = "FILE",
    .min_args = 1,
    .max_args = 1,
    .missing = "no input file",
    .args_field = offsetof(fu_args, file),
    .reads_graph = true,
    .summary = "a graph unfused, fused and split vs one flat AllReduce",
    .about = "Run FILE on N rank threads unfused (-O0), fused by the default pipeline\n"
             "(--split auto) and with each --split SPEC, next to one flat AllReduce of all\n"
             "the graph's AllReduce bytes (the ideal): median ms per iteration and the\n"
             "ratios to the ideal and to the unfused graph. See bench/README.md.\n",
    .opts = fu_opts,
    .run = cf_bench_fusion,
};

static int parse_options(int argc, char **argv, fu_options *o) {
  fu_args a = {.ranks = 4, .iters = -1, .warmup = -1, .rounds = 1};
  int rc = cf_opts_parse(&cf_command_bench_fusion, argc, argv, &a);
  *o = (fu_options){.ranks = a.ranks,
                    .iters = a.iters,
                    .warmup = a.warmup,
                    .rounds = a.rounds,
                    .json = a.json,
                    .max_memory = a.max_memory,
                    .api = a.api,
                    .trace = a.trace};
  if (!rc) {
    o->file = a.file.v[0];
    for (int k = 0; k < a.split.n; k++)
      o->splits[o->n_splits++] = a.split.v[k];
    if (o->iters < 0) o->iters = a.quick ? 2 : 10;
    if (o->warmup < 0) o->warmup = a.quick ? 1 : 2;
    if (!a.quick && !o->n_splits) /* --quick: a smoke test, no extra splits */
      for (size_t k = 0; k < sizeof default_splits / sizeof *default_splits; k++)
        o->splits[o->n_splits++] = default_splits[k];
  }
  cf_opts_free(&cf_command_bench_fusion, &a);
  return rc;
}

int cf_bench_fusion(cf_context *ctx, int argc, char **argv) {
  fu_options o;
  int rc = parse_options(argc, argv, &o);
  if (rc) return rc == CF_OPTS_HELP ? 0 : rc;
  if (cf_tool_is_std(o.trace))
    return cf_tool_usage("bench fusion", "%s", "--trace wants a file (FILE.json), not '-'");
  if (o.api)
    return cf_bench_fusion_api(ctx, &(cf_bench_api_options){.file = o.file,
                                                            .ranks = o.ranks,
                                                            .iters = o.iters,
                                                            .warmup = o.warmup,
                                                            .max_memory = o.max_memory,
                                                            .json = o.json});
  variant v[MAX_SPLITS + 3];
  int nv = 0;
  memset(v, 0, sizeof v);
  static const char *const split_tags[MAX_SPLITS] = {
      "split1", "split2", "split3",  "split4",  "split5",  "split6",  "split7",  "split8",
      "split9", "split10", "split11", "split12", "split13", "split14", "split15", "split16"};
  v[nv++] = (variant){.name = "unfused (-O0)", .pipeline = cf_pipeline_O0, .tag = "unfused"};
  v[nv++] = (variant){
      .name = "fused (default: --split auto)", .pipeline = cf_pipeline_default, .tag = "fused"};
  for (int k = 0; k < o.n_splits; k++) {
    variant *x = &v[nv++];
    *x = (variant){.pipeline = cf_pipeline_default, .split = o.splits[k], .tag = split_tags[k]};
    snprintf(x->name, sizeof x->name, "fused --split %s", o.splits[k]);
  }
  variant *ideal = &v[nv++], *unfused = &v[0];
  ideal->tag = "ideal";

  /* the AllReduce traffic of the unfused graph sizes the ideal */
  cf_graph *g = NULL;
  ar_totals t;
  char *graph_name = NULL, *text = NULL;
  cf_status st = compile(ctx, &o, NULL, cf_pipeline_O0, NULL, &g);
  if (st) return cf_tool_fail(ctx, st);
  totals_of(g, &t);
  graph_name = g->name ? strdup(g->name) : NULL;
  cf_graph_destroy(g);
  if (t.bytes > 0) {
    text = ideal_xml(&t, o.ranks, ideal->name, sizeof ideal->name);
    if (!text) st = cf_error(ctx, CF_ERR_NO_MEMORY, NULL, 0, "out of memory");
  } else {
    snprintf(ideal->name, sizeof ideal->name, "ideal");
    snprintf(ideal->skipped, sizeof ideal->skipped, "the graph has no AllReduce");
  }
  for (int i = 0; i < nv && !st; i++)
    if (!v[i].skipped[0]) st = plan_variant(ctx, &o, &v[i] == ideal ? text : NULL, &v[i]);
  /* the variants run one after the other: the largest must fit */
  cf_mem_need need = {
      .file = o.file, .ranks = o.ranks, .hint = o.ranks > 1 ? "use fewer ranks (--ranks)" : NULL};
  for (int i = 0; i < nv && !st; i++)
    if (v[i].plan && cf_plan_run_bytes(v[i].plan, false) > need.per_rank)
      need.per_rank = cf_plan_run_bytes(v[i].plan, false);
  if (!st) st = cf_mem_check(ctx, &need, o.max_memory, "--max-memory");
  /* round-robin, so a change in the machine's load hits every variant alike */
  for (int r = 0; r < o.rounds && !st; r++)
    for (int i = 0; i < nv && !st; i++) {
      if (v[i].skipped[0]) continue;
      if (!o.json) {
        cf_tool_progress_erase();
        fprintf(stderr, "bench fusion: round %d: %s...\n", r + 1, v[i].name);
        fflush(stderr);
      }
      st = run_variant(ctx, &o, &v[i], r);
    }
  for (int i = 0; i < nv && !st; i++)
    if (!v[i].skipped[0]) {
      v[i].ms = median_of(v[i].round_ms, o.rounds);
      v[i].exposed_ms = median_of(v[i].round_exposed, o.rounds);
    }
  cf_tool_progress_erase();
  if (st) {
    rc = cf_tool_fail(ctx, st);
  } else if (o.json) {
    print_json(&o, graph_name, &t, v, nv, ideal, unfused);
  } else {
    print_table(&o, &t, v, nv, ideal, unfused);
  }
  for (int i = 0; i < nv; i++) {
    cf_plan_destroy(v[i].plan);
    cf_graph_destroy(v[i].g);
  }
  free(text);
  free(graph_name);
  return rc;
}
