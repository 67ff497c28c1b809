/* bench.c - `collfuse bench`: benchmarks with their peers side by side.
 *
 * bench compile generates data-parallel and tensor-parallel graphs of 1k to
 * 1M nodes as native XML text, then times each stage the way `compile` runs
 * it: parse (libxml2 + XSD + structure + inference), verify against the
 * target, and every pass of the default pipeline, next to the -O0 pipeline
 * as the unfused peer. Each size runs in a child process so the peak RSS it
 * reports belongs to that size alone.
 *
 * Where the benchmarks live. The ~3,600 lines of bench_*.c stay in the
 * collfuse driver rather than a bench/ program of their own: `collfuse
 * bench ...` is a documented command (docs/cli.md, with its synopses and
 * option tables held to --help by e2e/doc_cli, the man page, the bash
 * completion, e2e/bench_coll and e2e/help), and each benchmark measures
 * the installed executor through the same option tables, compile routine
 * and error conventions as `run`, so a result reads as what a user gets.
 * A second program would change that contract (another binary to install,
 * document and complete) for no gain in layering: the benchmarks already
 * sit on the top floor (tools/), use only the executor's and passes'
 * internal headers, and nothing below calls them. bench/ holds what must
 * not be collfuse: the peers (MPI_Allreduce under its own mpirun, a plain C
 * loop, BLAS) that the tables compare against.
 */
#include "tools.h"

#include <cjson/cJSON.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

typedef struct sbuf {
  char *s;
  size_t len, cap;
} sbuf;

static bool sb_printf(sbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static bool sb_printf(sbuf *b, const char *fmt, ...) {
  for (;;) {
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(b->s ? b->s + b->len : NULL, b->s ? b->cap - b->len : 0, fmt, ap);
    va_end(ap);
    if (n < 0) return false;
    if (b->s && b->len + (size_t)n < b->cap) {
      b->len += (size_t)n;
      return true;
    }
    size_t cap = b->cap ? b->cap * 2 : 1 << 20;
    while (cap < b->len + (size_t)n + 1) cap *= 2;
    char *s = realloc(b->s, cap);
    if (!s) return false;
    b->s = s;
    b->cap = cap;
  }
}

/* Data parallel: per gradient an Input, an AllReduce (fusion 1, every 8th
 * fusion=2 in one of 4 fusion_ids, every 50th fusion=0) and an Output. */
static bool gen_dp(sbuf *b, int nodes) {
  int grads = nodes / 3;
  bool ok = sb_printf(b, "<graph name='dp_%d' world_size='8'>\n", nodes);
  for (int i = 0; ok && i < grads; i++) {
    int len = 256 << (i % 7); /* 1 KiB .. 64 KiB float32 */
    int fusion = i % 50 == 0 ? 0 : i % 8 == 0 ? 2 : 1;
    ok = sb_printf(b, "<node name='g%d' op='Input' dtype='float32' shape='%d'/>\n", i, len) &&
         sb_printf(b, "<node name='ar%d' op='AllReduce' reduction='mean' fusion='%d' fusion_id='%d'>"
                      "<input ref='g%d'/></node>\n",
                   i, fusion, fusion == 2 ? i % 4 : -1, i) &&
         sb_printf(b, "<node name='o%d' op='Output'><input ref='ar%d'/></node>\n", i, i);
  }
  return ok && sb_printf(b, "</graph>\n");
}

/* Tensor parallel: four micro-batch streams of layers AllGather -> MatMul ->
 * MatMul -> ReduceScatter. Within a stream each layer feeds the next, so the
 * collectives form chains the combiner must not fuse along; across streams
 * the same layer fuses (AllGathers by fusion_id, ReduceScatters by split). */
static bool gen_tp(sbuf *b, int nodes) {
  enum { STREAMS = 4 };
  int layers = nodes / (7 * STREAMS);
  bool ok = sb_printf(b, "<graph name='tp_%d' world_size='8'>\n<group name='tp' ranks='0,1,2,3,4,5,6,7'/>\n",
                      nodes);
  for (int s = 0; ok && s < STREAMS; s++)
    ok = sb_printf(b, "<node name='x%d' op='Input' dtype='bfloat16' shape='16,64'/>\n", s);
  for (int l = 0; ok && l < layers; l++)
    for (int s = 0; ok && s < STREAMS; s++) {
      char prev[32];
      if (l) snprintf(prev, sizeof prev, "rs%d_%d", l - 1, s);
      else snprintf(prev, sizeof prev, "x%d", s);
      ok = sb_printf(b, "<node name='wu%d_%d' op='Input' dtype='bfloat16' shape='64,128'/>\n", l, s) &&
           sb_printf(b, "<node name='wd%d_%d' op='Input' dtype='bfloat16' shape='128,64'/>\n", l, s) &&
           sb_printf(b, "<node name='ag%d_%d' op='AllGather' layout='concat' group='tp' fusion='2' "
                        "fusion_id='%d'><input ref='%s'/></node>\n", l, s, l % 3, prev) &&
           sb_printf(b, "<node name='up%d_%d' op='MatMul'><input ref='ag%d_%d'/><input ref='wu%d_%d'/></node>\n",
                     l, s, l, s, l, s) &&
           sb_printf(b, "<node name='dn%d_%d' op='MatMul'><input ref='up%d_%d'/><input ref='wd%d_%d'/></node>\n",
                     l, s, l, s, l, s) &&
           sb_printf(b, "<node name='rs%d_%d' op='ReduceScatter' group='tp' fusion='1'><input ref='dn%d_%d'/></node>\n",
                     l, s, l, s) &&
           (l + 1 < layers || sb_printf(b, "<node name='y%d' op='Output'><input ref='rs%d_%d'/></node>\n", s, l, s));
    }
  return ok && sb_printf(b, "</graph>\n");
}

typedef struct compile_result {
  int nodes, coll_before, coll_after;
  double parse_ms, verify_ms, pass_ms[CF_MAX_PIPELINE], total_ms, o0_ms;
  int n_pass;
  long peak_kb;
  char pass_names[CF_MAX_PIPELINE][24];
  char err[256];
} compile_result;

/* when the first verification ended, and the graph it passed */
typedef struct compile_mark {
  compile_result *r;
  double verified_ms;
} compile_mark;

static cf_status compile_verified(cf_graph *g, void *user) {
  compile_mark *m = user;
  m->verified_ms = cf_now() * 1e3;
  m->r->nodes = g->n_nodes;
  m->r->coll_before = (int)cf_graph_collective_count(g);
  return CF_OK;
}

static void measure(const char *kind, int nodes, compile_result *r) {
  memset(r, 0, sizeof *r);
  sbuf b = {0};
  if (!(strcmp(kind, "dp") == 0 ? gen_dp(&b, nodes) : gen_tp(&b, nodes))) {
    snprintf(r->err, sizeof r->err, "out of memory generating the graph");
    return;
  }
  cf_context *ctx;
  cf_graph *g;
  cf_pass_timing t[CF_MAX_PIPELINE];
  if (cf_context_create(&ctx)) return;
  double t0 = (cf_now() * 1e3);
  cf_status st = cf_graph_parse(ctx, "bench.xml", b.s, b.len, &g);
  double t1 = (cf_now() * 1e3);
  compile_mark m = {.r = r, .verified_ms = t1};
  cf_compile_options co = {
      .verified = compile_verified, .user = &m, .timing = t, .n_timing = &r->n_pass};
  if (!st) st = cf_compile(g, &co);
  double t2 = m.verified_ms, t3 = (cf_now() * 1e3);
  if (!st) {
    r->coll_after = (int)cf_graph_collective_count(g);
    for (int i = 0; i < r->n_pass; i++) {
      r->pass_ms[i] = t[i].ms;
      snprintf(r->pass_names[i], sizeof r->pass_names[i], "%s", t[i].name);
    }
  }
  r->parse_ms = t1 - t0;
  r->verify_ms = t2 - t1;
  r->total_ms = t3 - t0;
  cf_graph_destroy(g);
  if (!st) { /* the unfused peer: parse + verify + -O0 */
    double u0 = (cf_now() * 1e3);
    st = cf_graph_parse(ctx, "bench.xml", b.s, b.len, &g);
    cf_compile_options o0 = {.pipeline = cf_pipeline_O0};
    if (!st) st = cf_compile(g, &o0);
    r->o0_ms = (cf_now() * 1e3) - u0;
    cf_graph_destroy(g);
  }
  if (st) snprintf(r->err, sizeof r->err, "%s", cf_context_errmsg(ctx));
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  r->peak_kb = ru.ru_maxrss;
  cf_context_destroy(ctx);
  free(b.s);
}

/* One size in a child, so ru_maxrss is that size's own peak. */
static int run_child(const char *kind, int nodes, compile_result *r) {
  int fd[2];
  if (pipe(fd)) return -1;
  pid_t pid = fork();
  if (pid < 0) return -1;
  if (pid == 0) {
    close(fd[0]);
    compile_result res;
    measure(kind, nodes, &res);
    ssize_t w = write(fd[1], &res, sizeof res);
    _exit(w == (ssize_t)sizeof res ? 0 : 1);
  }
  close(fd[1]);
  size_t got = 0;
  while (got < sizeof *r) {
    ssize_t n = read(fd[0], (char *)r + got, sizeof *r - got);
    if (n <= 0) break;
    got += (size_t)n;
  }
  close(fd[0]);
  int status;
  waitpid(pid, &status, 0);
  return got == sizeof *r && WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : -1;
}

typedef struct compile_bench_args {
  int sizes[8], ns;
  bool json;
} compile_bench_args;

static bool check_sizes(void *out, const char *v, char *why, size_t len) {
  compile_bench_args *a = out;
  a->ns = 0;
  for (const char *p = v; *p;) {
    int64_t n;
    if (a->ns == 8 || !cf_parse_int_prefix(&p, 9, CF_MAX_NODES, &n) || (*p && *p != ',')) {
      snprintf(why, len, "--sizes takes up to 8 node counts in 9..%d, got '%s'", CF_MAX_NODES, v);
      return false;
    }
    a->sizes[a->ns++] = (int)n;
    p += *p == ',';
  }
  return true;
}

static const cf_opt compile_bench_opts[] = {
    {"--sizes", NULL, "N,N,...", CF_OPT_CALL, 0, .comma_list = true, .check = check_sizes,
     .help = "node counts of the generated graphs (default 1000,10000,100000,1000000)"},
    {"--json", NULL, NULL, CF_OPT_FLAG, offsetof(compile_bench_args, json),
     .help = "one JSON object, with the time of each pass"},
    {0},
};

const cf_command cf_command_bench_compile = {
    .name = "bench compile",
    .summary = "time parse, verify and passes on 1k..1M nodes",
    .about = "Generate data-parallel and tensor-parallel graphs (default 1k, 10k, 100k and\n"
             "1M nodes) and time parse, verify and each pass of the default pipeline next\n"
             "to the unfused -O0 pipeline, with the peak memory of each size.\n",
    .opts = compile_bench_opts,
    .run = cf_bench_compile,
};

const cf_command *const cf_bench_commands[] = {
    &cf_command_bench_compile, &cf_command_bench_reduce, &cf_command_bench_allreduce,
    &cf_command_bench_fusion,  &cf_command_bench_mmrs,   NULL,
};

int cf_bench_compile(cf_context *ctx, int argc, char **argv) {
  compile_bench_args a = {.sizes = {1000, 10000, 100000, 1000000}, .ns = 4};
  (void)ctx;
  int rc = cf_opts_parse(&cf_command_bench_compile, argc, argv, &a);
  cf_opts_free(&cf_command_bench_compile, &a);
  if (rc) return rc == CF_OPTS_HELP ? 0 : rc;
  int *sizes = a.sizes, ns = a.ns;
  bool json = a.json;
  static const char *kinds[] = {"dp", "tp"};
  cJSON *root = cJSON_CreateObject(), *rows = cJSON_AddArrayToObject(root, "results");
  if (!json)
    printf("%-4s %9s %6s %6s %10s %10s %10s %10s %10s %9s %9s\n", "kind", "nodes", "coll", "after",
           "parse_ms", "verify_ms", "passes_ms", "total_ms", "us/node", "-O0_ms", "peak_MiB");
  for (int k = 0; k < 2; k++)
    for (int s = 0; s < ns; s++) {
      compile_result r;
      if (run_child(kinds[k], sizes[s], &r) || r.err[0]) {
        fprintf(stderr, "collfuse bench compile: %s %d: %s\n", kinds[k], sizes[s],
                r.err[0] ? r.err : "the measuring process failed");
        rc = 3;
        continue;
      }
      double passes = 0;
      for (int i = 0; i < r.n_pass; i++) passes += r.pass_ms[i];
      if (!json)
        printf("%-4s %9d %6d %6d %10.1f %10.1f %10.1f %10.1f %10.3f %9.1f %9.1f\n", kinds[k], r.nodes,
               r.coll_before, r.coll_after, r.parse_ms, r.verify_ms, passes, r.total_ms,
               r.total_ms * 1e3 / r.nodes, r.o0_ms, r.peak_kb / 1024.0);
      cJSON *o = cJSON_CreateObject();
      cJSON_AddStringToObject(o, "kind", kinds[k]);
      cJSON_AddNumberToObject(o, "nodes", r.nodes);
      cJSON_AddNumberToObject(o, "collectives_before", r.coll_before);
      cJSON_AddNumberToObject(o, "collectives_after", r.coll_after);
      cJSON_AddNumberToObject(o, "parse_ms", r.parse_ms);
      cJSON_AddNumberToObject(o, "verify_ms", r.verify_ms);
      cJSON *pm = cJSON_AddObjectToObject(o, "pass_ms");
      for (int i = 0; i < r.n_pass; i++) cJSON_AddNumberToObject(pm, r.pass_names[i], r.pass_ms[i]);
      cJSON_AddNumberToObject(o, "total_ms", r.total_ms);
      cJSON_AddNumberToObject(o, "unfused_O0_ms", r.o0_ms);
      cJSON_AddNumberToObject(o, "peak_rss_kib", (double)r.peak_kb);
      cJSON_AddItemToArray(rows, o);
    }
  if (json) {
    char *t = cJSON_PrintUnformatted(root);
    if (t) puts(t);
    free(t);
  } else {
    printf("(per-pass times: --json)\n");
  }
  cJSON_Delete(root);
  return rc;
}
