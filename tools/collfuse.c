/* collfuse.c - the `collfuse` command-line driver (docs/cli.md).
 *
 * Each command parses its own options, calls the library and maps cf_status
 * to the documented exit codes: 0 success, 1 invalid input or failed
 * verification, 2 usage error, 3 runtime failure. Diagnostics from the
 * library already read "FILE:LINE: error: ...", so they are printed as is.
 */
#include "tools.h"

#include "../codegen/codegen.h"
#include "../frontend/frontend.h"

#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>


/* ---------------- check ---------------- */

typedef struct check_args {
  cf_opt_list files;
  const char *target;
  bool strict, quiet;
} check_args;

static const cf_opt check_opts[] = {
    {"--target", NULL, "T", CF_OPT_STR, offsetof(check_args, target), .check = cf_opt_check_target,
     .help = "the graph must also meet this device's documented limits"},
    CF_OPT_STRICT(offsetof(check_args, strict)),
    CF_OPT_QUIET(offsetof(check_args, quiet)),
    {0},
};

static int cmd_check(cf_context *ctx, int argc, char **argv);

const cf_command cf_command_check = {
    .name = "check",
    .args = "FILE...",
    .min_args = 1,
    .max_args = -1,
    .missing = "no input file",
    .args_field = offsetof(check_args, files),
    .reads_graph = true,
    .summary = "parse + verify, one summary line per file",
    .about = "Parse and verify each FILE ('-': standard input) and print one line per file:\n"
             "nodes, collectives by kind and the bytes they communicate.\n",
    .opts = check_opts,
    .run = cmd_check,
};

static int cmd_check(cf_context *ctx, int argc, char **argv) {
  check_args a = {0};
  int rc = cf_opts_parse(&cf_command_check, argc, argv, &a);
  if (rc) {
    cf_opts_free(&cf_command_check, &a);
    return rc == CF_OPTS_HELP ? 0 : rc;
  }
  const char *target = a.target, **files = a.files.v;
  int nf = a.files.n;
  for (int k = 0; k < nf; k++) {
    cf_graph *g;
    cf_status st = cf_tool_load(ctx, files[k], &g);
    if (!st) st = cf_graph_verify(g, target);
    cf_phase_end(ctx);
    cf_tool_progress_erase(); /* its verdict follows */
    if (st) {
      int c = cf_tool_fail(ctx, st);
      if (c > rc) rc = c;
      cf_graph_destroy(g);
      continue;
    }
    int c = cf_tool_opaque(g, a.strict);
    if (c) {
      if (c > rc) rc = c;
      cf_graph_destroy(g);
      continue;
    }
    cf_graph_stats s;
    cf_graph_stats_compute(g, &s);
    char kinds[1024] = "", hb[64];
    size_t o = 0;
    for (int op = 1; op < CF_OP_COUNT; op++)
      if (cf_op_is_collective((cf_op)op) && s.by_op[op])
        o += (size_t)snprintf(kinds + o, sizeof kinds - o, "%s%s %d", o ? ", " : "",
                              cf_op_table[op].name, s.by_op[op]);
    cf_bytes_text(s.comm_bytes, hb, sizeof hb);
    char opaque[64] = ""; /* only when there are any: most graphs have none */
    int n_opaque = s.by_op[CF_OP_OPAQUE];
    if (n_opaque) snprintf(opaque, sizeof opaque, ", %d opaque node%s", n_opaque, cf_s(n_opaque));
    printf("%s: ok: %d node%s, %d collective%s%s%s%s, %lld bytes communicated (%s)%s%s%s\n",
           cf_tool_name(files[k]), s.nodes, s.nodes == 1 ? "" : "s", s.collectives,
           s.collectives == 1 ? "" : "s", o ? " (" : "", kinds, o ? ")" : "",
           (long long)s.comm_bytes, hb, opaque, target ? ", target " : "", target ? target : "");
    cf_graph_destroy(g);
  }
  cf_opts_free(&cf_command_check, &a);
  return rc;
}

/* ---------------- dot ---------------- */

static int copy_to_stdout(const char *path) {
  FILE *f = fopen(path, "rb");
  if (!f) return EXIT_RUNTIME;
  char buf[65536];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, f)) > 0) fwrite(buf, 1, n, stdout);
  fclose(f);
  return 0;
}

/* Draw g to out, or DOT to stdout when out is NULL; the errors of d (a
 * graph that failed verification) marked. */
static cf_status draw(cf_context *ctx, cf_graph *g, const char *out, const cf_diags *d,
                      const double *wait_ms) {
  if (out) return cf_graph_write_dot_diags(g, out, d, wait_ms);
  char dir[] = "/tmp/collfuse-dot-XXXXXX";
  if (!mkdtemp(dir)) return cf_error(ctx, CF_ERR_IO, dir, 0, "cannot create: %s", strerror(errno));
  char path[64];
  snprintf(path, sizeof path, "%s/graph.dot", dir);
  cf_status st = cf_graph_write_dot_diags(g, path, d, wait_ms);
  if (!st) copy_to_stdout(path);
  remove(path);
  rmdir(dir);
  return st;
}

/* compile -o -: the graph as XML on stdout */
static cf_status write_xml_stdout(cf_context *ctx, const cf_graph *g) {
  cf_status st = cf_xml_write(g, stdout);
  if (!st && (fflush(stdout) != 0 || ferror(stdout)))
    st = cf_error(ctx, CF_ERR_IO, "<stdout>", 0, "cannot write: %s", strerror(errno ? errno : EIO));
  return st;
}

typedef struct dot_args {
  cf_opt_list file;
  const char *out, *target, *passes, *trace;
  bool fused;
} dot_args;

static const cf_opt dot_opts[] = {
    {"-o", NULL, "OUT.dot|.svg|.png", CF_OPT_STR, offsetof(dot_args, out),
     .help = "write the drawing to OUT; the format comes from its extension\n"
             "(DOT on stdout without -o or with -o -)"},
    {"--fused", NULL, NULL, CF_OPT_FLAG, offsetof(dot_args, fused),
     .help = "run the default pipeline first: draw the fused graph"},
    {"--passes", NULL, "LIST", CF_OPT_STR, offsetof(dot_args, passes), .comma_list = true,
     .check = cf_opt_check_passes, .help = "run these comma-separated passes first instead"},
    {"--target", NULL, "T", CF_OPT_STR, offsetof(dot_args, target), .check = cf_opt_check_target,
     .help = "check the graph against a target profile before drawing\n"
             "(and again after the passes)"},
    {"--trace", NULL, "FILE.json", CF_OPT_STR, offsetof(dot_args, trace),
     .help = "fill each collective (a bucket's cluster) by the wait a run's\n"
             "trace measured on it (run --trace of the same graph and\n"
             "passes): white to red, the mean ms per rank and iteration"},
    {0},
};

static int cmd_dot(cf_context *ctx, int argc, char **argv);

const cf_command cf_command_dot = {
    .name = "dot",
    .args = "FILE",
    .min_args = 1,
    .max_args = 1,
    .missing = "no input file",
    .args_field = offsetof(dot_args, file),
    .reads_graph = true,
    .summary = "draw a graph as DOT, SVG or PNG",
    .about = "Draw FILE ('-': standard input) with graphviz, as read or after passes.\n"
             "A graph that fails verification is drawn as it is, each error marked on\n"
             "its node (a cycle's edges in red); every error is printed and the exit\n"
             "code is 1.\n",
    .opts = dot_opts,
    .run = cmd_dot,
};

static int cmd_dot(cf_context *ctx, int argc, char **argv) {
  dot_args a = {0};
  int rc = cf_opts_parse(&cf_command_dot, argc, argv, &a);
  if (!rc && a.fused && a.passes)
    rc = cf_tool_usage("dot", "%s", "--passes and --fused exclude each other");
  if (rc) {
    cf_opts_free(&cf_command_dot, &a);
    return rc == CF_OPTS_HELP ? 0 : rc;
  }
  /* a graph that fails verification is drawn all the same, its errors
   * marked (a drawing helps most when the graph is wrong), and they are
   * printed, every one; one that cannot be parsed has nothing to draw */
  cf_graph *g;
  cf_diags d = {0};
  double *waits = NULL;
  const char *out = cf_tool_is_std(a.out) ? NULL : a.out;
  cf_status st = cf_graph_load_diags(ctx, a.file.v[0], &g, &d);
  if (st && g) {
    for (int k = 0; k < d.n; k++)
      fprintf(stderr, "%s\n", d.v[k].msg);
    rc = cf_tool_exit_code(st);
    st = draw(ctx, g, out, &d, NULL);
    if (st) cf_tool_fail(ctx, st);
  } else {
    const char *pipeline = a.passes ? a.passes : a.fused ? cf_pipeline_default : NULL;
    cf_compile_options co = {.pipeline = pipeline, .pass = {.target = a.target}};
    if (!st) st = pipeline ? cf_compile(g, &co) : cf_graph_verify(g, a.target);
    if (!st && a.trace) st = cf_tool_trace_waits(ctx, a.trace, g, &waits);
    if (!st) st = draw(ctx, g, out, NULL, waits);
    rc = st ? cf_tool_fail(ctx, st) : 0;
  }
  free(waits);
  cf_diags_free(&d);
  cf_graph_destroy(g);
  cf_opts_free(&cf_command_dot, &a);
  return rc;
}

/* ---------------- compile ---------------- */

static void explain_line(void *user, const char *line) {
  fprintf((FILE *)user, "explain: %s\n", line);
}

enum { N_EMIT = CF_EMIT_PTX + 1 }; /* --emit-* options, indexed by cf_emit_format */

/* The kernels the compiled graph needs: written ahead of time for every
 * --emit-* option, JIT-compiled with one line per kernel for -v. */
static cf_status compile_kernels(cf_context *ctx, const cf_graph *g, const char *file,
                                 const char *const emit[N_EMIT], bool jit, FILE *log) {
  cf_kernel_key *keys;
  int n;
  cf_status st = cf_codegen_graph_kernels(g, &keys, &n);
  for (int f = 0; f < N_EMIT && !st; f++) {
    if (!emit[f]) continue;
    st = cf_codegen_emit(ctx, keys, n, (cf_emit_format)f, emit[f]);
    if (!st && n == 0)
      fprintf(stderr, "collfuse compile: %s has no reducing collectives: %s holds an empty module\n",
              file, emit[f]);
  }
  if (!st && jit && n == 0) fprintf(log, "jit: %s needs no kernels (no reducing collectives)\n", file);
  double total = 0, slowest = 0;
  int cached = 0;
  for (int i = 0; jit && i < n && !st; i++) {
    void *fn;
    double ms = 0;
    char name[96];
    if ((st = cf_codegen_kernel(ctx, &keys[i], &fn, &ms))) break;
    cf_kernel_name(&keys[i], name, sizeof name);
    if (ms > 0) fprintf(log, "jit: %s %.1f ms\n", name, ms);
    else fprintf(log, "jit: %s (cached)\n", name);
    cached += ms == 0;
    total += ms;
    if (ms > slowest) slowest = ms;
  }
  if (!st && jit && n > 0 && cached == n)
    fprintf(log, "jit: %d kernel%s, all cached\n", n, n == 1 ? "" : "s");
  else if (!st && jit && n > 0)
    fprintf(log, "jit: %d kernel%s, %.1f ms in all, slowest %.1f ms%s\n", n, n == 1 ? "" : "s", total,
            slowest, cached ? " (the others cached)" : "");
  free(keys);
  return st;
}

typedef struct compile_args {
  cf_opt_list file;
  const char *out, *passes, *target, *dot, *split, *cost, *profile, *emit[N_EMIT];
  bool json, o0, explain, jit, strict, quiet;
} compile_args;

static const cf_opt compile_opts[] = {
    {"-o", NULL, "OUT.xml", CF_OPT_STR, offsetof(compile_args, out),
     .help = "write the result as native XML (valid collfuse input)"},
    {"--passes", NULL, "LIST", CF_OPT_STR, offsetof(compile_args, passes), .comma_list = true,
     .check = cf_opt_check_passes,
     .help = "comma-separated passes instead of the default pipeline"},
    {"-O0", NULL, NULL, CF_OPT_FLAG, offsetof(compile_args, o0), .help = "no fusion passes"},
    {"--split", NULL, "SPEC", CF_OPT_STR, offsetof(compile_args, split), .comma_list = true,
     .check = cf_opt_check_split,
     .help = "how fusion=1 collectives are bucketed:\n"
             "  auto (default; cost model), bytes:25M[,first=1M][,count=256]\n"
             "  (hard cap, as XLA), ddp:25M[,first=1M][,initial] (DDP's rule),\n"
             "  size:96.54,3.46 (HCCL percentages), index:20,100,159 (HCCL);\n"
             "  any of them ,same_dtype (AllGather/AllToAll buckets keep one\n"
             "  dtype), ,any_dim (gathers/scatters of any dims share) and\n"
             "  ,no_loops (a while body's collectives stay alone)"},
    {"--cost", NULL, "A,B[,G]", CF_OPT_STR, offsetof(compile_args, cost), .comma_list = true,
     .check = cf_opt_check_cost,
     .help = "auto's model: A us per collective, B GB/s link, G GB/s\n"
             "gradients (default: the profile's threads link for the\n"
             "graph's world_size, else 250,8,4)"},
    CF_OPT_PROFILE(offsetof(compile_args, profile)),
    {"--target", NULL, "T", CF_OPT_STR, offsetof(compile_args, target),
     .check = cf_opt_check_target, .help = "check the graph against a target profile"},
    {"--dot", NULL, "OUT", CF_OPT_STR, offsetof(compile_args, dot),
     .help = "also draw the result (.dot, .svg or .png)"},
    {"--emit-llvm", NULL, "OUT.ll", CF_OPT_STR, offsetof(compile_args, emit[CF_EMIT_LLVM]),
     .help = "write the reduction kernels the graph needs as LLVM IR (host)"},
    {"--emit-asm", NULL, "OUT.s", CF_OPT_STR, offsetof(compile_args, emit[CF_EMIT_ASM]),
     .help = "... as assembly for this host"},
    {"--emit-obj", NULL, "OUT.o", CF_OPT_STR, offsetof(compile_args, emit[CF_EMIT_OBJ]),
     .help = "... as an ELF object file for this host"},
    {"--emit-ptx", NULL, "OUT.ptx", CF_OPT_STR, offsetof(compile_args, emit[CF_EMIT_PTX]),
     .help = "... as PTX for nvptx64-nvidia-cuda sm_90 (grid-stride kernels)"},
    {"-v", "--verbose", NULL, CF_OPT_FLAG, offsetof(compile_args, jit),
     .help = "JIT those kernels for this host and print one line per kernel\n"
             "with its compile time, or (cached)"},
    {"--explain", NULL, NULL, CF_OPT_FLAG, offsetof(compile_args, explain),
     .help = "say for every collective which bucket it joined, or why not"},
    {"--json", NULL, NULL, CF_OPT_FLAG, offsetof(compile_args, json),
     .help = "print one JSON object with counts, buckets and pass times\n"
             "(-v and --explain then print on stderr)"},
    CF_OPT_STRICT(offsetof(compile_args, strict)),
    CF_OPT_QUIET(offsetof(compile_args, quiet)),
    {0},
};

static int cmd_compile(cf_context *ctx, int argc, char **argv);

const cf_command cf_command_compile = {
    .name = "compile",
    .args = "FILE",
    .min_args = 1,
    .max_args = 1,
    .missing = "no input file",
    .args_field = offsetof(compile_args, file),
    .reads_graph = true,
    .summary = "run the pass pipeline, write the result",
    .about = "Verify FILE, run the pass pipeline and write the compiled graph.\n",
    .opts = compile_opts,
    .after = "FILE '-' reads standard input; an output '-' (-o, --dot, --emit-*) writes\n"
             "standard output, one of them and not with --json.\n"
             "The kernels of --emit-*: for each reducing collective over G ranks the n-ary\n"
             "reduction of min(G,8) sources, the accumulate step, and the scale for mean;\n"
             "quantized matmuls add their int32 epilogue. A graph without reducing\n"
             "collectives gets an empty module.\n",
    .run = cmd_compile,
};

/* compile's look at the verified graph, before the passes: its Opaque nodes
 * (refused under --strict) and its collectives */
typedef struct compile_check {
  bool strict, refused;
  int before; /* collectives before the passes */
} compile_check;

static cf_status compile_verified(cf_graph *g, void *user) {
  compile_check *c = user;
  if (cf_tool_opaque(g, c->strict)) {
    c->refused = true;
    return CF_ERR_INVALID;
  }
  c->before = (int)cf_graph_collective_count(g);
  return CF_OK;
}

static int cmd_compile(cf_context *ctx, int argc, char **argv) {
  compile_args a = {0};
  int rc = cf_opts_parse(&cf_command_compile, argc, argv, &a);
  if (!rc && a.o0 && a.passes)
    rc = cf_tool_usage("compile", "%s", "--passes and -O0 exclude each other");
  if (rc) {
    cf_opts_free(&cf_command_compile, &a);
    return rc == CF_OPTS_HELP ? 0 : rc;
  }
  const char *file = a.file.v[0], *out = a.out, *passes = a.passes, *target = a.target,
             *dot = a.dot;
  const char **emit = a.emit;
  bool json = a.json, o0 = a.o0, explain = a.explain, jit = a.jit, any_emit = false;
  for (int f = 0; f < N_EMIT; f++)
    any_emit |= emit[f] != NULL;
  /* "-" writes to stdout: one output there at a time, and the logs go to stderr */
  int to_stdout = cf_tool_is_std(out) + cf_tool_is_std(dot) + json;
  for (int f = 0; f < N_EMIT; f++)
    to_stdout += cf_tool_is_std(emit[f]);
  if (to_stdout > 1) {
    cf_opts_free(&cf_command_compile, &a);
    return cf_tool_usage(
        "compile", "%s",
        "-o -, --dot -, --emit-* - and --json each write to standard output: give one");
  }
  cf_pass_options popt = {.split = a.split, .cost = a.cost, .target = target};
  if (explain) {
    popt.explain = explain_line;
    popt.explain_user = to_stdout ? stderr : stdout;
  }
  cf_graph *g = NULL;
  cf_pass_timing timing[CF_MAX_PIPELINE];
  int n_timing = 0;
  compile_check check = {.strict = a.strict};
  cf_compile_options co = {.pipeline = o0 ? cf_pipeline_O0 : passes,
                           .pass = popt,
                           .verified = compile_verified,
                           .user = &check,
                           .timing = timing,
                           .n_timing = &n_timing};
  cf_cost measured;
  cf_status st = cf_tool_load(ctx, file, &g);
  if (!st) st = cf_profile_compile_cost(ctx, a.profile, g, &measured, &co.pass.measured_cost);
  if (!st) st = cf_compile(g, &co);
  if (check.refused) {
    cf_graph_destroy(g);
    cf_opts_free(&cf_command_compile, &a);
    return EXIT_INVALID;
  }
  int before = check.before;
  if (!st) st = cf_graph_seal(g);
  cf_phase_end(ctx);
  cf_tool_progress_erase(); /* the output follows */
  if (!st && out) st = cf_tool_is_std(out) ? write_xml_stdout(ctx, g) : cf_graph_write_xml(g, out);
  if (!st && dot) st = draw(ctx, g, cf_tool_is_std(dot) ? NULL : dot, NULL, NULL);
  /* LLVM's emitters write to a path: the standard output's, for "-" */
  for (int f = 0; f < N_EMIT; f++)
    if (cf_tool_is_std(emit[f])) emit[f] = "/dev/stdout";
  if (!st && (any_emit || jit))
    st = compile_kernels(ctx, g, cf_tool_name(file), emit, jit, to_stdout ? stderr : stdout);
  if (!st && json) st = cf_report_compile_json(g, before, timing, n_timing);
  if (!st && !json && !out && !dot && !any_emit)
    printf("%s: %d node%s, %d collective%s before, %zu after\n", cf_tool_name(file), g->n_nodes, cf_s(g->n_nodes),
           before, cf_s(before), cf_graph_collective_count(g));
  rc = st ? cf_tool_fail(ctx, st) : 0;
  cf_graph_destroy(g);
  cf_opts_free(&cf_command_compile, &a);
  return rc;
}

/* ---------------- the commands ---------------- */

const cf_command *const cf_commands[] = {
    &cf_command_check,
    &cf_command_compile,
    &cf_command_run,
    &cf_command_dot,
    &cf_command_ranktable,
    &cf_command_launch,
    &cf_command_bench_compile,
    &cf_command_bench_reduce,
    &cf_command_bench_allreduce,
    &cf_command_bench_fusion,
    &cf_command_bench_mmrs,
    NULL,
};
