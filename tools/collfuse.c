/* collfuse.c - the `collfuse` command-line driver (SPEC section 4).
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
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>


int cf_tool_exit_code(cf_status st) {
  switch (st) {
  case CF_OK: return 0;
  case CF_ERR_USAGE: return EXIT_USAGE;
  case CF_ERR_RUNTIME:
  case CF_ERR_NO_MEMORY: return EXIT_RUNTIME;
  default: return EXIT_INVALID;
  }
}

int cf_tool_fail(cf_context *ctx, cf_status st) {
  fprintf(stderr, "%s\n", cf_context_errmsg(ctx));
  return cf_tool_exit_code(st);
}

int cf_tool_usage(const char *cmd, const char *fmt, const char *arg) {
  fprintf(stderr, "collfuse %s: ", cmd);
  fprintf(stderr, fmt, arg);
  fprintf(stderr, "\nTry 'collfuse %s --help'.\n", cmd);
  return EXIT_USAGE;
}

static void log_to_stderr(void *user, cf_log_level lvl, const char *msg) {
  int verbose = *(int *)user;
  if (lvl <= CF_LOG_WARN || verbose) fprintf(stderr, "collfuse: %s\n", msg);
}

/* ---------------- help texts ---------------- */

static const char help_main[] =
    "usage: collfuse COMMAND [options]\n"
    "\n"
    "collfuse compiles graphs with collective operations: it reads them (native\n"
    "XML, GraphML), verifies them against a target profile, runs passes and\n"
    "draws them.\n"
    "\n"
    "commands:\n"
    "  check    FILE... [--target T]      parse + verify, one summary line per file\n"
    "  compile  FILE [-o OUT.xml] ...     run the pass pipeline, write the result\n"
    "  run      FILE [--ranks N] ...      compile and execute on N ranks (--verify, --json)\n"
    "  dot      FILE [-o OUT] [--fused]   draw a graph as DOT, SVG or PNG\n"
    "  ranktable FILE.json               HCCL rank table -> OpenMPI hostfile and rankfile\n"
    "  bench    compile [--sizes N,..]    time parse, verify and passes on 1k..1M nodes\n"
    "  bench    reduce [--quick]          reduction kernels vs memcpy, C loop, MPI_Reduce_local\n"
    "  bench    allreduce [--ranks N]     AllReduce algorithms on rank threads vs MPI_Allreduce\n"
    "  bench    fusion FILE [--ranks N]   a graph unfused, fused and split vs one flat AllReduce\n"
    "  bench    mmrs [--quick]            fused MatmulReduceScatter vs MatMul then ReduceScatter\n"
    "\n"
    "  collfuse --version | --help | COMMAND --help\n"
    "\n"
    "exit codes: 0 ok, 1 invalid input, 2 usage error, 3 runtime failure\n";

static void help_targets(FILE *f) {
  fprintf(f, "targets:");
  for (size_t i = 0; cf_target_name(i); i++) fprintf(f, " %s", cf_target_name(i));
  fprintf(f, "\n");
}

static const char help_check[] =
    "usage: collfuse check FILE... [--target T]\n"
    "\n"
    "Parse and verify each FILE (.xml, .graphml) and print one line per file:\n"
    "nodes, collectives by kind and the bytes they communicate. With --target\n"
    "the graph must also meet that device's documented limits.\n";

static const char help_compile[] =
    "usage: collfuse compile FILE [-o OUT.xml] [--passes LIST | -O0] [--split SPEC]\n"
    "                        [--cost ALPHA_US,BETA_GBPS[,GAMMA]] [--target T]\n"
    "                        [--dot OUT.dot|.svg|.png] [--emit-llvm OUT.ll] [--emit-asm OUT.s]\n"
    "                        [--emit-obj OUT.o] [--emit-ptx OUT.ptx] [-v] [--explain] [--json]\n"
    "\n"
    "Verify FILE, run the pass pipeline and write the compiled graph.\n"
    "  -o OUT.xml       write the result as native XML (valid collfuse input)\n"
    "  --passes LIST    comma-separated passes instead of the default pipeline\n"
    "  -O0              no fusion passes\n"
    "  --split SPEC     how fusion=1 collectives are bucketed:\n"
    "                     auto (default; cost model), bytes:25M[,first=1M][,count=256],\n"
    "                     size:96.54,3.46 (HCCL percentages), index:20,100,159 (HCCL)\n"
    "  --cost A,B[,G]   auto's model: A us per collective, B GB/s link, G GB/s gradients (250,8,4)\n"
    "  --target T       check the graph against a target profile\n"
    "  --dot OUT        also draw the result (.dot, .svg or .png)\n"
    "  --emit-llvm OUT  write the reduction kernels the graph needs as LLVM IR (host)\n"
    "  --emit-asm OUT   ... as assembly for this host\n"
    "  --emit-obj OUT   ... as an ELF object file for this host\n"
    "  --emit-ptx OUT   ... as PTX for nvptx64-nvidia-cuda sm_90 (grid-stride kernels)\n"
    "                   kernels: for each reducing collective over G ranks the n-ary\n"
    "                   reduction of min(G,8) sources, the accumulate step, and the\n"
    "                   scale for mean; quantized matmuls add their int32 epilogue.\n"
    "                   A graph without reducing collectives gets an empty module.\n"
    "  -v               JIT those kernels for this host and print one line per kernel\n"
    "                   with its compile time, or (cached)\n"
    "  --explain        say for every collective which bucket it joined, or why not\n"
    "                   (-v and --explain print on stderr when --json is given)\n"
    "  --json           print one JSON object with counts, buckets and pass times\n";

static const char help_dot[] =
    "usage: collfuse dot FILE [-o OUT.dot|.svg|.png] [--fused]\n"
    "\n"
    "Draw FILE with graphviz; the format comes from the extension of OUT\n"
    "(DOT on stdout without -o). --fused runs the default pipeline first.\n"
    "A graph that fails verification is drawn as it is, each error marked on\n"
    "its node (a cycle's edges in red); every error is printed and the exit\n"
    "code is 1.\n";

static const char help_bench[] =
    "usage: collfuse bench compile [--sizes N,N,...] [--json]\n"
    "       collfuse bench reduce [--quick] [--sizes S,S,...] [--reps N] [--min-ms MS]\n"
    "                             [--dtypes D,..] [--ops sum,max] [--sources K,..]\n"
    "                             [--max-memory SIZE] [--json]\n"
    "       collfuse bench reduce --device cuda [--sizes S,..] [--samples N] [--reps N] [--quick]\n"
    "                             [--json]\n"
    "       collfuse bench allreduce [--ranks N] [--sizes S,S,...] [--algo A] [--iters K]\n"
    "                                [--loops L] [--quick] [--no-mpi] [--mpi-args ARGS]\n"
    "                                [--max-memory SIZE] [--json]\n"
    "       mpirun -np N collfuse bench allreduce --backend mpi [--sizes S,..] [--algo A] "
    "[--json]\n"
    "       collfuse bench allreduce --device cuda [--ranks N] [--sizes S,..] [--loops L]\n"
    "                                [--iters K] [--algo A] [--quick] [--json]\n"
    "       collfuse bench fusion FILE [--ranks N] [--iters K] [--warmup W] [--split SPEC]...\n"
    "                                [--quick] [--max-memory SIZE] [--json]\n"
    "       collfuse bench mmrs [--ranks N,..] [--shapes MxKxN,..] [--dtypes D,..] [--iters K]\n"
    "                           [--warmup W] [--rounds R] [--comm-turn T] [--quick]\n"
    "                           [--max-memory SIZE] [--json]\n"
    "\n";
/* (two literals: C99 compilers need only take 4095 characters in one) */
static const char help_bench_about[] =
    "compile: generate data-parallel and tensor-parallel graphs (default 1k, 10k,\n"
    "100k and 1M nodes) and time parse, verify and each pass of the default\n"
    "pipeline next to the unfused -O0 pipeline, with the peak memory of each size.\n"
    "\n"
    "reduce: time collfuse's JIT reduction kernels (n-ary and accumulate) for\n"
    "float32, float16, bfloat16 and int8, sum and max, 2 and 8 sources, at 256 KiB\n"
    "and 64 MiB per buffer (--sizes 256K,64M), side by side with memcpy, a plain C\n"
    "loop built -O3 -march=native and OpenMPI's MPI_Reduce_local (in place, so set\n"
    "against the accumulate form). GB/s counts every byte read and written; each\n"
    "cell is the median of >= 5 samples (--reps) and >= 50 ms (--min-ms). --quick\n"
    "runs 64 KiB with one sample, as a smoke test. --dtypes (float32, float16,\n"
    "bfloat16, int8), --ops and --sources (2..8) pick rows. --device cuda: the\n"
    "CUDA backend's kernels against the GPU's copy rate.\n"
    "\n"
    "allreduce: float32 sum on N rank threads (default 4) for sizes 8 B..256 MiB:\n"
    "microseconds per call, algbw = bytes/time and busbw = algbw*2(n-1)/n for the\n"
    "algorithm AUTO picks and for each forced one (direct, rsag, ring, rd; --algo A\n"
    "keeps only A), next to OpenMPI's MPI_Allreduce on N processes under mpirun\n"
    "(collfuse-mpi-allreduce; --no-mpi skips it, --mpi-args adds mpirun options\n"
    "such as '--mca coll basic,self,libnbc'). Each cell is the median of L\n"
    "loops (--loops, default 5) of K calls (--iters; default about 32 MiB per loop).\n"
    "--quick: 8 B, 64 KiB and 1 MiB, short loops, as a smoke test. Under mpirun\n"
    "with --backend mpi every process is one rank and MPI_Allreduce runs in the\n"
    "same processes; --device cuda: the ranks on the CUDA backend.\n"
    "\n"
    "fusion: run FILE on N rank threads (default 4; the graph's world_size is\n"
    "overridden) unfused (-O0), fused by the default pipeline (--split auto) and\n"
    "with each --split SPEC (default bytes:25M, bytes:4M, size:50,50), next to one\n"
    "flat AllReduce of all the graph's AllReduce bytes (the ideal): median ms per\n"
    "iteration (--iters, default 10, after --warmup, default 2) and the ratios to\n"
    "the ideal and to the unfused graph. --quick: 2 iterations, no extra splits.\n"
    "\n"
    "mmrs: x (m,k) @ w (k,n) -> ReduceScatter(sum) on N rank threads (default 2\n"
    "and 4), compiled fused (MatmulReduceScatter) and sequential (the default\n"
    "pipeline without fuse-matmul-collective), next to the MatMul alone and the\n"
    "ReduceScatter alone, round-robin (--rounds, default 3, of --iters 1 after\n"
    "--warmup 0): median ms, fused/sequential (also paired per round and fastest\n"
    "vs fastest) and the overlap efficiency (mm + rs - fused) / min(mm, rs).\n"
    "Shapes MxKxN (default 1024^3, 16384x1024x1024, 1024x8192x1024 and\n"
    "1024x1024x8192); dtypes float32, float16, bfloat16, int8 (quantized:\n"
    "QuantMatMul with x1_scale (m,1) and x2_scale (1,n) -> bfloat16; default\n"
    "float32,bfloat16,int8). --comm-turn T sets the fused op's chunks (0 = auto).\n"
    "Every row is checked (fused vs sequential, both vs float64 on a sample); a\n"
    "mismatch exits 1. --quick: 1024x512x512, one round.\n"
    "\n"
    "reduce, allreduce, fusion and mmrs compute the memory their buffers and plans\n"
    "need before allocating them and refuse (exit 1) what exceeds the memory\n"
    "available (MemAvailable or the cgroup's limit) or --max-memory SIZE (512M, 4G).\n"
    "See bench/README.md.\n";

bool cf_tool_help(int argc, char **argv, const char *text) {
  for (int i = 0; i < argc; i++)
    if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
      fputs(text, stdout);
      help_targets(stdout);
      printf("passes:");
      for (int k = 0; cf_pass_registry[k]; k++) printf(" %s", cf_pass_registry[k]->name);
      printf("\n");
      return true;
    }
  return false;
}

int cf_tool_max_memory(const char *cmd, const char *v, int64_t *out) {
  if (cf_bytes_parse(v, strlen(v), CF_MAX_MEMORY, out)) return 0;
  return cf_tool_usage(cmd, "--max-memory wants a size such as 512M or 4G, got '%s'", v);
}

/* Option with a value: "--opt V" or "--opt=V". */
const char *cf_tool_opt(int argc, char **argv, int *i, const char *name) {
  size_t n = strlen(name);
  if (strncmp(argv[*i], name, n) != 0) return NULL;
  if (argv[*i][n] == '=') return argv[*i] + n + 1;
  if (argv[*i][n] != 0) return NULL;
  if (*i + 1 >= argc) return "";
  return argv[++*i];
}

/* ---------------- check ---------------- */

static int cmd_check(cf_context *ctx, int argc, char **argv) {
  const char *target = NULL;
  const char **files = calloc((size_t)argc + 1, sizeof *files);
  int nf = 0, rc = 0;
  if (!files) return EXIT_RUNTIME;
  for (int i = 0; i < argc; i++) {
    const char *v;
    if ((v = cf_tool_opt(argc, argv, &i, "--target"))) {
      if (!*v) return free(files), cf_tool_usage("check", "%s needs a value", "--target");
      target = v;
    } else if (argv[i][0] == '-' && argv[i][1]) {
      free(files);
      return cf_tool_usage("check", "unknown option '%s'", argv[i]);
    } else {
      files[nf++] = argv[i];
    }
  }
  if (!nf) return free(files), cf_tool_usage("check", "%s", "no input file");
  if (target && !cf_target_find(target)) {
    free(files);
    fprintf(stderr, "collfuse check: unknown target '%s'\n", target);
    help_targets(stderr);
    return EXIT_USAGE;
  }
  for (int k = 0; k < nf; k++) {
    cf_graph *g;
    cf_status st = cf_graph_load(ctx, files[k], &g);
    if (!st) st = cf_graph_verify(g, target);
    if (st) {
      fprintf(stderr, "%s\n", cf_context_errmsg(ctx));
      int c = cf_tool_exit_code(st);
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
    printf("%s: ok: %d nodes, %d collective%s%s%s%s, %lld bytes communicated (%s)%s%s\n",
           files[k], s.nodes, s.collectives, s.collectives == 1 ? "" : "s", o ? " (" : "", kinds,
           o ? ")" : "", (long long)s.comm_bytes, hb, target ? ", target " : "",
           target ? target : "");
    cf_graph_destroy(g);
  }
  free(files);
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
static cf_status draw(cf_context *ctx, cf_graph *g, const char *out, const cf_diags *d) {
  if (out) return cf_graph_write_dot_diags(g, out, d);
  char dir[] = "/tmp/collfuse-dot-XXXXXX";
  if (!mkdtemp(dir)) return cf_error(ctx, CF_ERR_IO, dir, 0, "cannot create: %s", strerror(errno));
  char path[64];
  snprintf(path, sizeof path, "%s/graph.dot", dir);
  cf_status st = cf_graph_write_dot_diags(g, path, d);
  if (!st) copy_to_stdout(path);
  remove(path);
  rmdir(dir);
  return st;
}

static int cmd_dot(cf_context *ctx, int argc, char **argv) {
  const char *file = NULL, *out = NULL;
  bool fused = false;
  for (int i = 0; i < argc; i++) {
    const char *v;
    if ((v = cf_tool_opt(argc, argv, &i, "-o"))) {
      if (!*v) return cf_tool_usage("dot", "%s needs a value", "-o");
      out = v;
    } else if (strcmp(argv[i], "--fused") == 0) {
      fused = true;
    } else if (argv[i][0] == '-' && argv[i][1]) {
      return cf_tool_usage("dot", "unknown option '%s'", argv[i]);
    } else if (file) {
      return cf_tool_usage("dot", "unexpected argument '%s'", argv[i]);
    } else {
      file = argv[i];
    }
  }
  if (!file) return cf_tool_usage("dot", "%s", "no input file");
  /* a graph that fails verification is drawn all the same, its errors
   * marked (a drawing helps most when the graph is wrong), and they are
   * printed, every one; one that cannot be parsed has nothing to draw */
  cf_graph *g;
  cf_diags d = {0};
  cf_status st = cf_graph_load_diags(ctx, file, &g, &d);
  int rc = 0;
  if (st && g) {
    for (int k = 0; k < d.n; k++)
      fprintf(stderr, "%s\n", d.v[k].msg);
    rc = cf_tool_exit_code(st);
    st = draw(ctx, g, out, &d);
    if (st) cf_tool_fail(ctx, st);
  } else {
    if (!st) st = cf_graph_verify(g, NULL);
    if (!st && fused) st = cf_passes_run(g, cf_pipeline_default, NULL, NULL, NULL);
    if (!st) st = draw(ctx, g, out, NULL);
    rc = st ? cf_tool_fail(ctx, st) : 0;
  }
  cf_diags_free(&d);
  cf_graph_destroy(g);
  return rc;
}

/* ---------------- compile ---------------- */

static void explain_line(void *user, const char *line) {
  fprintf((FILE *)user, "explain: %s\n", line);
}

/* --emit-* options, indexed by cf_emit_format */
static const char *const emit_flags[] = {"--emit-llvm", "--emit-asm", "--emit-obj", "--emit-ptx"};
enum { N_EMIT = sizeof emit_flags / sizeof emit_flags[0] };

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

static int cmd_compile(cf_context *ctx, int argc, char **argv) {
  const char *file = NULL, *out = NULL, *passes = NULL, *target = NULL, *dot = NULL;
  const char *split = NULL, *cost = NULL, *emit[N_EMIT] = {NULL};
  bool json = false, o0 = false, explain = false, jit = false, any_emit = false;
  for (int i = 0; i < argc; i++) {
    const char *v = NULL;
    int ef = -1;
    for (int f = 0; f < N_EMIT && ef < 0; f++)
      if ((v = cf_tool_opt(argc, argv, &i, emit_flags[f]))) ef = f;
    if (ef >= 0) {
      if (!*v) return cf_tool_usage("compile", "%s needs a value", emit_flags[ef]);
      emit[ef] = v;
      any_emit = true;
    } else if ((v = cf_tool_opt(argc, argv, &i, "-o"))) {
      if (!*v) return cf_tool_usage("compile", "%s needs a value", "-o");
      out = v;
    } else if ((v = cf_tool_opt(argc, argv, &i, "--passes"))) {
      passes = v;
    } else if ((v = cf_tool_opt(argc, argv, &i, "--target"))) {
      if (!*v) return cf_tool_usage("compile", "%s needs a value", "--target");
      target = v;
    } else if ((v = cf_tool_opt(argc, argv, &i, "--dot"))) {
      if (!*v) return cf_tool_usage("compile", "%s needs a value", "--dot");
      dot = v;
    } else if ((v = cf_tool_opt(argc, argv, &i, "--split"))) {
      split = v;
    } else if ((v = cf_tool_opt(argc, argv, &i, "--cost"))) {
      cost = v;
    } else if (strcmp(argv[i], "-O0") == 0) {
      o0 = true;
    } else if (strcmp(argv[i], "--json") == 0) {
      json = true;
    } else if (strcmp(argv[i], "--explain") == 0) {
      explain = true;
    } else if (strcmp(argv[i], "-v") == 0 || strcmp(argv[i], "--verbose") == 0) {
      jit = true;
    } else if (argv[i][0] == '-' && argv[i][1]) {
      return cf_tool_usage("compile", "unknown option '%s'", argv[i]);
    } else if (file) {
      return cf_tool_usage("compile", "unexpected argument '%s'", argv[i]);
    } else {
      file = argv[i];
    }
  }
  if (!file) return cf_tool_usage("compile", "%s", "no input file");
  if (o0 && passes) return cf_tool_usage("compile", "%s", "--passes and -O0 exclude each other");
  char why[256];
  cf_split sp;
  cf_cost cm;
  if (split && !cf_split_parse(split, &sp, why, sizeof why)) return cf_tool_usage("compile", "%s", why);
  if (cost && !cf_cost_parse(cost, &cm, why, sizeof why)) return cf_tool_usage("compile", "%s", why);
  cf_pass_options popt = {.split = split, .cost = cost, .target = target};
  if (explain) {
    popt.explain = explain_line;
    popt.explain_user = json ? stderr : stdout;
  }
  if (target && !cf_target_find(target)) {
    fprintf(stderr, "collfuse compile: unknown target '%s'\n", target);
    help_targets(stderr);
    return EXIT_USAGE;
  }
  cf_graph *g = NULL;
  cf_pass_timing timing[CF_MAX_PIPELINE];
  int n_timing = 0;
  cf_status st = cf_graph_load(ctx, file, &g);
  if (!st) st = cf_graph_verify(g, target);
  int before = st ? 0 : (int)cf_graph_collective_count(g);
  if (!st)
    st = cf_passes_run(g, o0 ? cf_pipeline_O0 : passes ? passes : cf_pipeline_default, &popt,
                       timing, &n_timing);
  /* the result must still meet the target after the passes */
  if (!st) st = cf_graph_verify(g, target);
  if (!st) st = cf_graph_seal(g);
  if (!st && out) st = cf_graph_write_xml(g, out);
  if (!st && dot) st = cf_graph_write_dot(g, dot);
  if (!st && (any_emit || jit)) st = compile_kernels(ctx, g, file, emit, jit, json ? stderr : stdout);
  if (!st && json) st = cf_report_compile_json(g, before, timing, n_timing);
  if (!st && !json && !out && !dot && !any_emit)
    printf("%s: %d nodes, %d collectives before, %zu after\n", file, g->n_nodes, before,
           cf_graph_collective_count(g));
  int rc = st ? cf_tool_fail(ctx, st) : 0;
  cf_graph_destroy(g);
  return rc;
}

int main(int argc, char **argv) {
  if (argc < 2) {
    fputs(help_main, stderr);
    return EXIT_USAGE;
  }
  const char *cmd = argv[1];
  if (strcmp(cmd, "--version") == 0 || strcmp(cmd, "version") == 0) {
    printf("collfuse %s\n", cf_version());
    return 0;
  }
  if (strcmp(cmd, "--help") == 0 || strcmp(cmd, "-h") == 0 || strcmp(cmd, "help") == 0) {
    fputs(help_main, stdout);
    return 0;
  }
  cf_context *ctx;
  if (cf_context_create(&ctx)) {
    fprintf(stderr, "collfuse: out of memory\n");
    return EXIT_RUNTIME;
  }
  int verbose = getenv("COLLFUSE_VERBOSE") != NULL;
  cf_context_set_log(ctx, log_to_stderr, &verbose);
  int rc;
  int sub_argc = argc - 2;
  char **sub_argv = argv + 2;
  if (strcmp(cmd, "check") == 0)
    rc = cf_tool_help(sub_argc, sub_argv, help_check) ? 0 : cmd_check(ctx, sub_argc, sub_argv);
  else if (strcmp(cmd, "compile") == 0)
    rc = cf_tool_help(sub_argc, sub_argv, help_compile) ? 0 : cmd_compile(ctx, sub_argc, sub_argv);
  else if (strcmp(cmd, "run") == 0)
    rc = cf_tool_help(sub_argc, sub_argv, cf_help_run) ? 0 : cf_cmd_run(ctx, sub_argc, sub_argv);
  else if (strcmp(cmd, "bench") == 0) {
    char help_bench_all[sizeof help_bench + sizeof help_bench_about];
    snprintf(help_bench_all, sizeof help_bench_all, "%s%s", help_bench, help_bench_about);
    if (sub_argc > 0 && strcmp(sub_argv[0], "compile") == 0)
      rc = cf_tool_help(sub_argc - 1, sub_argv + 1, help_bench_all)
               ? 0
               : cf_bench_compile(sub_argc - 1, sub_argv + 1);
    else if (sub_argc > 0 && strcmp(sub_argv[0], "reduce") == 0)
      rc = cf_tool_help(sub_argc - 1, sub_argv + 1, help_bench_all)
               ? 0
               : cf_bench_reduce(ctx, sub_argc - 1, sub_argv + 1);
    else if (sub_argc > 0 && strcmp(sub_argv[0], "allreduce") == 0)
      rc = cf_tool_help(sub_argc - 1, sub_argv + 1, help_bench_all)
               ? 0
               : cf_bench_allreduce(ctx, sub_argc - 1, sub_argv + 1);
    else if (sub_argc > 0 && strcmp(sub_argv[0], "fusion") == 0)
      rc = cf_tool_help(sub_argc - 1, sub_argv + 1, help_bench_all)
               ? 0
               : cf_bench_fusion(ctx, sub_argc - 1, sub_argv + 1);
    else if (sub_argc > 0 && strcmp(sub_argv[0], "mmrs") == 0)
      rc = cf_tool_help(sub_argc - 1, sub_argv + 1, help_bench_all)
               ? 0
               : cf_bench_mmrs(ctx, sub_argc - 1, sub_argv + 1);
    else if (cf_tool_help(sub_argc, sub_argv, help_bench_all))
      rc = 0;
    else {
      fprintf(stderr,
              "collfuse bench: expected a benchmark name: compile, reduce, allreduce, fusion, mmrs\n");
      rc = EXIT_USAGE;
    }
  } else if (strcmp(cmd, "ranktable") == 0)
    rc = cf_tool_help(sub_argc, sub_argv, cf_help_ranktable) ? 0 : cf_cmd_ranktable(ctx, sub_argc, sub_argv);
  else if (strcmp(cmd, "dot") == 0)
    rc = cf_tool_help(sub_argc, sub_argv, help_dot) ? 0 : cmd_dot(ctx, sub_argc, sub_argv);
  else {
    fprintf(stderr, "collfuse: unknown command '%s'\n\n", cmd);
    fputs(help_main, stderr);
    rc = EXIT_USAGE;
  }
  cf_context_destroy(ctx);
  return rc;
}
