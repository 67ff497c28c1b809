/* run.c - `collfuse run`: compile a graph and execute it on N ranks.
 *
 * The graph is compiled with the chosen pipeline (the default fuses). Each
 * rank's executor fills its Inputs from --seed in its own arena; --input
 * NAME=FILE.npy (with {rank} in the path) are read once and given both to
 * the executor and, with --verify, to the float64 reference of the unfused
 * graph, so the check compares like with like. The reference regenerates
 * the seeded Inputs from the same counter-based streams (executor/fill.c)
 * and, when every op of the graph is elementwise (a gradient graph of
 * AllReduces), is evaluated and compared a window of elements at a time
 * (check/verify.c cf_verify_streamed), against the outputs where the run
 * left them in its arenas: --verify then needs the run's memory plus a
 * window, not a float64 copy of every tensor. Other graphs get the whole
 * reference, with every rank's Inputs made here. Outputs are matched to the
 * reference by name because passes may reorder nodes.
 *
 * With --backend mpi every process of an mpirun job is one rank (the world
 * is MPI's): each compiles the graph, makes every rank's inputs (the
 * reference needs them all) and runs its own rank over the MPI transport
 * (transports/mpi.c; this file never includes mpi.h). --verify checks each
 * process's own outputs and combines the verdicts, so rank 0 prints the
 * JSON or summary for everyone and every process exits non-zero when any
 * rank failed; --save-outputs writes each process's DIR/rank<R>/.
 */
#include "tools.h"

#include "../check/check.h"
#include "../executor/plan.h"
#include "../ir/trace.h"
#include "../executor/transports/transports.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <malloc.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

typedef struct run_args {
  cf_opt_list file;
  const char *passes, *split, *cost, *target, *save, *backend, *device, *algo, *rank_table;
  const char *profile, *trace;
  int ranks, iters, warmup;
  uint64_t seed;
  int64_t max_memory; /* 0: what the machine has available */
  double timeout;
  bool o0, verify, deterministic, json, verbose, mpi, strict, quiet;
  bool shm;   /* --backend shm */
  bool procs; /* one rank per process: mpi or shm */
  int opaque_nodes;  /* the graph's Opaque nodes as read (check's count) */
  cf_opt_list input; /* NAME=PATH */
} run_args;

static bool check_seed(void *out, const char *v, char *why, size_t len) {
  return cf_option_seed("--seed", v, &((run_args *)out)->seed, why, len);
}

static bool check_timeout(void *out, const char *v, char *why, size_t len) {
  return cf_option_timeout("--timeout", v, &((run_args *)out)->timeout, why, len);
}

static bool check_input(void *out, const char *v, char *why, size_t len) {
  (void)out;
  const char *eq = strchr(v, '=');
  if (eq && eq != v && eq[1]) return true; /* neither NAME nor FILE empty */
  snprintf(why, len, "--input wants NAME=FILE.npy, got '%s'", v);
  return false;
}

#define RUN_FIELD(f) offsetof(run_args, f)
static const cf_opt run_opts[] = {
    {"--ranks", NULL, "N", CF_OPT_INT, RUN_FIELD(ranks), 1, CF_MAX_WORLD,
     .help = "ranks (default: the graph's world_size, else 1; with mpi\n"
             "the number of processes, which --ranks must then equal;\n"
             "with shm the processes this command starts, unless a\n"
             "launcher started it);\n"
             "a graph whose groups or roots need its own world_size\n"
             "is refused at another size (exit 1)"},
    {"--backend", NULL, NULL, CF_OPT_STR, RUN_FIELD(backend), .choices = "threads|mpi|shm",
     .help = "threads of this process (default), or one rank per process\n"
             "of `mpirun -np N collfuse run FILE --backend mpi`, or shm:\n"
             "one rank per process of this host, single copy through\n"
             "shared memory (`--ranks N` starts them; under torchrun,\n"
             "mpirun or srun each process finds its rank)"},
    {"--device", NULL, NULL, CF_OPT_STR, RUN_FIELD(device), .choices = "cpu|cuda",
     .help = "cuda: buffers and reductions on NVIDIA GPUs (threads backend;\n"
             "ranks share a GPU when there are fewer GPUs than ranks)"},
    {"--iters", NULL, "K", CF_OPT_INT, RUN_FIELD(iters), 1, 1000000,
     .help = "timed iterations (default 1)"},
    {"--warmup", NULL, "W", CF_OPT_INT, RUN_FIELD(warmup), 0, 1000000,
     .help = "untimed iterations first (default 0)"},
    {"--seed", NULL, "S", CF_OPT_CALL, 0, .check = check_seed,
     .help = "inputs differ per rank and are reproducible (default 0)"},
    {"-O0", NULL, NULL, CF_OPT_FLAG, RUN_FIELD(o0), .help = "no fusion passes"},
    {"--passes", NULL, "LIST", CF_OPT_STR, RUN_FIELD(passes), .comma_list = true,
     .check = cf_opt_check_passes,
     .help = "comma-separated passes instead of the default pipeline"},
    {"--split", NULL, "SPEC", CF_OPT_STR, RUN_FIELD(split), .comma_list = true,
     .check = cf_opt_check_split,
     .help = "how fusion=1 collectives are bucketed (see compile --help)"},
    {"--cost", NULL, "A,B[,G]", CF_OPT_STR, RUN_FIELD(cost), .comma_list = true,
     .check = cf_opt_check_cost, .help = "--split auto's cost model (see compile --help)"},
    {"--algo", NULL, NULL, CF_OPT_STR, RUN_FIELD(algo), .choices_of = cf_opt_algo_choices,
     .check = cf_opt_check_algo,
     .help = "force the AllReduce algorithm (auto picks by size);\n"
             "mpi-native (--backend mpi): MPI's own collectives, every op"},
    CF_OPT_PROFILE(RUN_FIELD(profile)),
    {"--verify", NULL, NULL, CF_OPT_FLAG, RUN_FIELD(verify),
     .help = "check every output of every rank against a float64\n"
             "reference of the unfused graph (integers exactly)"},
    {"--deterministic", NULL, NULL, CF_OPT_FLAG, RUN_FIELD(deterministic),
     .help = "reduce in rank order: bitwise equal results for any fusion"},
    {"--timeout", NULL, "SEC", CF_OPT_CALL, 0, .check = check_timeout,
     .help = "a wait gives up after SEC seconds without a sign of life\n"
             "from the rank it waits for, or from the rank that one waits\n"
             "for in turn (one still filling its inputs is at work, not\n"
             "silent), a compute step after SEC seconds (default 60): exit 3"},
    {"--input", NULL, "NAME=FILE.npy", CF_OPT_LIST, RUN_FIELD(input), .check = check_input,
     .help = "an Input's data; {rank} in FILE is replaced by the rank (a file,\n"
             "not '-')"},
    {"--save-outputs", NULL, "DIR", CF_OPT_STR, RUN_FIELD(save),
     .help = "write DIR/rank<R>/<output>.npy ('/' in a name becomes '_';\n"
             "a name that meets another's gets ~1, ~2, ...) and\n"
             "DIR/outputs.json, each output's file, dtype and shape"},
    {"--rank-table", NULL, "FILE.json", CF_OPT_STR, RUN_FIELD(rank_table),
     .help = "(mpi) check the job against an HCCL rank table: its size,\n"
             "and that each rank runs on its server"},
    {"--target", NULL, "T", CF_OPT_STR, RUN_FIELD(target), .check = cf_opt_check_target,
     .help = "check the graph against a target profile"},
    CF_OPT_MAX_MEMORY(RUN_FIELD(max_memory)),
    {"--trace", NULL, "FILE.json", CF_OPT_STR, RUN_FIELD(trace),
     .help = "write the run's timeline as a Chrome trace (Perfetto,\n"
             "chrome://tracing): a process per rank, a lane per thread;\n"
             "written even when the run fails (mpi: FILE.rank<R>.json)"},
    {"-v", "--verbose", NULL, CF_OPT_FLAG, RUN_FIELD(verbose),
     .help = "peak memory of the fused and the unfused plan, algorithms,\n"
             "the time of each phase"},
    CF_OPT_JSON(RUN_FIELD(json)),
    CF_OPT_QUIET(RUN_FIELD(quiet)),
    CF_OPT_STRICT(RUN_FIELD(strict)),
    {0},
};

const cf_command cf_command_run = {
    .name = "run",
    .args = "FILE",
    .min_args = 1,
    .max_args = 1,
    .missing = "no input file",
    .args_field = RUN_FIELD(file),
    .reads_graph = true,
    .summary = "compile and execute on N ranks (--verify, --json)",
    .about =
        "Compile FILE ('-': standard input, not with --backend mpi; the default pipeline\n"
        "fuses, -O0 does not) and run it on N ranks, threads of this process (the default\n"
        "backend) on the CPU device, or with --backend mpi one rank per process of\n"
        "`mpirun -np N collfuse run FILE --backend mpi`.\n",
    .opts = run_opts,
    .run = cf_cmd_run,
};

/* The outputs that depend on Opaque nodes (check/verify.c), by name, in
 * the reference graph's Output order: they hold synthetic data, and
 * --verify, whose reference runs the same data, does not check them. */
typedef struct opaque_outs {
  const char **names;
  int n;     /* of them */
  int total; /* Output nodes */
} opaque_outs;

/* One run of the command, from its set-up to its report (cf_cmd_run's
 * stages: parse_args, set_up, agree_setup, run, verify, save, agree_result,
 * report). */
typedef struct run_job {
  run_args *a;
  cf_run_setup setup; /* world, profile, memory limit (api/prepare.c) */
  cf_run_options opt;
  int ranks, me;       /* the run's ranks; this process's (MPI) or 0 */
  cf_graph *g, *ref_g; /* compiled; unfused (--verify's reference, -v, --json) */
  cf_plan *plan;
  int64_t peak_unfused; /* the unfused plan's peak, -1: not made */
  opaque_outs opq;
  bool stream, seeded; /* --verify window by window; every rank's Inputs made here */
  cf_inputs in;
  int old_ranks;       /* the ranks an earlier --save-outputs manifest listed */
  bool ran;
  cf_run_result res;
  cf_ref_value *ref;   /* the whole reference (not stream) */
  cf_tensor *got;      /* the outputs in the reference's Output order */
  int n_ref;
  cf_verify_stats vs;
  bool verified;
  char **files;        /* --save-outputs: each output's file name */
  cf_status saved;     /* CF_OK once this process's rank directories are in place */
} run_job;

/* --algo's request (the option table has checked the word); auto when absent. */
static cf_algo_req parse_algo(const char *word) {
  cf_algo_req r = {.policy = CF_POLICY_AUTO};
  if (word) cf_algo_parse(word, true, &r);
  return r;
}

static int parse_args(int argc, char **argv, run_args *a) {
  static const char *cmd = "run";
  a->iters = 1;
  a->timeout = 60;
  int rc = cf_opts_parse(&cf_command_run, argc, argv, a);
  if (rc) return rc;
  const char *file = a->file.v[0];
  for (int j = 0; j < a->input.n; j++)
    if (cf_tool_is_std(strchr(a->input.v[j], '=') + 1))
      return cf_tool_usage(cmd,
                           "--input %s: inputs are .npy files, one per rank ({rank} in the path), "
                           "not standard input",
                           a->input.v[j]);
  if (cf_tool_is_std(a->save))
    return cf_tool_usage(
        cmd, "%s", "--save-outputs wants a directory (one .npy file per output and rank), not '-'");
  if (cf_tool_is_std(a->trace))
    return cf_tool_usage(cmd, "%s", "--trace wants a file (FILE.json), not '-'");
  if (cf_tool_is_std(a->rank_table))
    return cf_tool_usage(cmd, "%s", "--rank-table wants a file every process can read, not '-'");
  if (a->o0 && a->passes) return cf_tool_usage(cmd, "%s", "--passes and -O0 exclude each other");
  a->mpi = a->backend && strcmp(a->backend, "mpi") == 0;
  a->shm = a->backend && strcmp(a->backend, "shm") == 0;
  a->procs = a->mpi || a->shm;
  if (a->procs && cf_tool_is_std(file))
    return cf_tool_usage(cmd,
                         "--backend %s reads FILE in every process: give a file, not '-' (a "
                         "launcher passes standard input to rank 0 only)",
                         a->backend);
  cf_algo_req req;
  bool native = a->algo && cf_algo_parse(a->algo, true, &req) && req.policy == CF_POLICY_FORCED &&
                cf_algo_table[req.algo].native;
  if (native && !a->mpi)
    return cf_tool_usage(cmd, "%s", "--algo mpi-native runs MPI's collectives: it needs --backend mpi");
  if (native && a->deterministic)
    return cf_tool_usage(cmd, "%s",
                         "--algo mpi-native and --deterministic exclude each other (MPI reduces in its own order)");
  if (a->rank_table && !a->mpi)
    return cf_tool_usage(cmd, "%s", "--rank-table checks an MPI job: it needs --backend mpi");
  if (a->device && strcmp(a->device, "cuda") == 0 && a->procs)
    return cf_tool_usage(cmd,
                         "--device cuda needs --backend threads (the %s transport moves host memory)",
                         a->mpi ? "MPI" : "shm");
  return 0;
}

/* Load, size to the run's ranks, verify and compile with pipeline. first:
 * the run's first look at the file, which counts its Opaque nodes and (say:
 * rank 0 of a job) warns of them as `check` does. */
static cf_status compile(cf_context *ctx, run_job *j, const char *pipeline, bool first, bool say,
                         cf_graph **out) {
  run_args *a = j->a;
  cf_graph *g = NULL;
  cf_status st = cf_tool_load(ctx, a->file.v[0], &g);
  if (!st && first) {
    for (int i = 0; i < g->n_nodes; i++) a->opaque_nodes += g->nodes[i].op == CF_OP_OPAQUE;
    if (say && !a->strict) cf_tool_opaque(g, false);
  }
  if (!st) {
    char job[64];
    if (a->mpi)
      snprintf(job, sizeof job, "mpirun -np %d", j->ranks);
    else
      snprintf(job, sizeof job, "--ranks %d", j->ranks);
    if (j->ranks == 0) j->ranks = g->world_size > 0 ? (int)g->world_size : 1;
    cf_cost measured;
    bool have = cf_run_cost(&j->setup, j->ranks, &measured);
    cf_compile_options co = {.pipeline = pipeline,
                             .pass = {.split = a->split,
                                      .cost = a->cost,
                                      .measured_cost = have ? &measured : NULL,
                                      .target = a->target}};
    st = a->strict ? cf_graph_refuse_opaque(g) : CF_OK;
    if (!st) st = cf_graph_size_world(g, j->ranks, job);
    if (!st) st = cf_compile(g, &co);
  }
  if (st) {
    cf_graph_destroy(g);
    g = NULL;
  }
  *out = g;
  return st;
}

static void free_inputs(cf_inputs *in) {
  if (!in->data) return;
  for (int i = 0; i < in->n * in->ranks; i++) free(in->data[i].data);
  free(in->data);
  free(in->names);
}

/* The --input files read so far in this run, by identity: a file that
 * several ranks (or inputs) name is read once, so a FIFO works for all. */
typedef struct input_file {
  dev_t dev;
  ino_t ino;
  const cf_tensor *t; /* what it held */
} input_file;
typedef struct input_files {
  input_file *v;
  int n, cap;
} input_files;

/* t's data from file: a copy of what an earlier read of the same file gave
 * when it held the same dtype and shape, else read (within timeout_s). */
static cf_status read_input(cf_context *ctx, const char *file, cf_tensor *t, double timeout_s,
                            input_files *seen) {
  struct stat sb;
  bool known = stat(file, &sb) == 0;
  for (int i = 0; known && i < seen->n; i++) {
    const cf_tensor *u = seen->v[i].t;
    if (seen->v[i].dev != sb.st_dev || seen->v[i].ino != sb.st_ino || u->dtype != t->dtype ||
        !cf_shape_equal(&u->shape, &t->shape))
      continue;
    size_t bytes = (size_t)t->count * (size_t)cf_dtype_size(t->dtype);
    if (!(t->data = malloc(bytes ? bytes : 1)))
      return cf_error(ctx, CF_ERR_NO_MEMORY, file, 0, "out of memory");
    memcpy(t->data, u->data, bytes);
    return CF_OK;
  }
  cf_status st = cf_npy_read_timeout(ctx, file, t->dtype, &t->shape, timeout_s, &t->data);
  if (st || !known) return st;
  if (seen->n == seen->cap) {
    int cap = seen->cap ? 2 * seen->cap : 8;
    input_file *v = realloc(seen->v, (size_t)cap * sizeof *v);
    if (!v) return CF_OK; /* only a cache */
    seen->v = v;
    seen->cap = cap;
  }
  seen->v[seen->n++] = (input_file){sb.st_dev, sb.st_ino, t};
  return CF_OK;
}

/* Every Input of g on every rank (only: on that rank alone, when >= 0):
 * from an --input file (waiting at most --timeout for it) or the seed. */
/* Whether data flowing out of node i can reach a collective: Opaque nodes
 * are not executed, so the data stops there. The readers of every node are
 * listed once (CSR over the operand edges), then each node is visited at
 * most once. */
static bool reaches_collective(const cf_graph *g, int i) {
  int n = g->n_nodes;
  size_t edges = 0;
  for (int w = 0; w < n; w++) edges += (size_t)g->nodes[w].n_in;
  int *first = calloc((size_t)n + 2, sizeof *first), *reader = calloc(edges + 1, sizeof *reader);
  int *stack = calloc((size_t)n + 1, sizeof *stack);
  char *seen = calloc((size_t)n + 1, 1);
  bool found = !first || !reader || !stack || !seen; /* out of memory: say nothing */
  for (int w = 0; w < n && !found; w++)
    for (int k = 0; k < g->nodes[w].n_in; k++) first[g->nodes[w].in[k].node + 2]++;
  for (int v = 0; v < n && !found; v++) first[v + 2] += first[v + 1];
  for (int w = 0; w < n && !found; w++)
    for (int k = 0; k < g->nodes[w].n_in; k++) reader[first[g->nodes[w].in[k].node + 1]++] = w;
  /* now first[v] .. first[v + 1] are v's readers */
  int top = 0;
  if (!found) stack[top++] = i, seen[i] = 1;
  while (!found && top > 0) {
    int v = stack[--top];
    for (int e = first[v]; e < first[v + 1] && !found; e++) {
      int w = reader[e];
      if (seen[w] || g->nodes[w].op == CF_OP_OPAQUE) continue;
      found = cf_op_is_collective(g->nodes[w].op);
      seen[w] = 1;
      stack[top++] = w;
    }
  }
  free(first);
  free(reader);
  free(stack);
  free(seen);
  return found;
}

/* The --input file for Input name, NULL when none. */
static const char *input_path(const run_args *a, const char *name) {
  const char *path = NULL;
  for (int j = 0; j < a->input.n; j++) {
    size_t len = (size_t)(strchr(a->input.v[j], '=') - a->input.v[j]);
    if (strlen(name) == len && strncmp(name, a->input.v[j], len) == 0)
      path = a->input.v[j] + len + 1;
  }
  return path;
}

/* The Inputs of g made here: those read from --input files, and with
 * seeded those filled from the seed too (else each rank's executor fills
 * them in its arena). */
static bool made_here(const run_args *a, const cf_node *n, bool seeded) {
  return n->op == CF_OP_INPUT && (seeded || input_path(a, n->name));
}

static cf_status make_inputs(cf_context *ctx, const cf_graph *g, const run_args *a, int ranks,
                             int only, bool seeded, cf_inputs *in) {
  memset(in, 0, sizeof *in);
  in->ranks = ranks;
  for (int i = 0; i < g->n_nodes; i++)
    in->n += made_here(a, &g->nodes[i], seeded);
  in->names = calloc((size_t)in->n + 1, sizeof *in->names);
  in->data = calloc((size_t)in->n * (size_t)ranks + 1, sizeof *in->data);
  if (!in->names || !in->data) return cf_error(ctx, CF_ERR_NO_MEMORY, NULL, 0, "out of memory");
  for (int j = 0; j < a->input.n; j++) {
    size_t len = (size_t)(strchr(a->input.v[j], '=') - a->input.v[j]);
    int found = -1;
    for (int i = 0; i < g->n_nodes && found < 0; i++)
      if (g->nodes[i].op == CF_OP_INPUT && strlen(g->nodes[i].name) == len &&
          strncmp(g->nodes[i].name, a->input.v[j], len) == 0)
        found = i;
    if (found < 0)
      return cf_error(ctx, CF_ERR_USAGE, NULL, 0, "--input %s: the graph has no Input named '%.*s'",
                      a->input.v[j], (int)len, a->input.v[j]);
    if (only <= 0 && !reaches_collective(g, found))
      fprintf(stderr,
              "collfuse run: warning: --input %s: Input '%s' reaches no collective (only Opaque "
              "nodes, which collfuse does not run, or none read it): its data cannot affect "
              "the collectives\n",
              a->input.v[j], g->nodes[found].name);
  }
  int k = 0;
  cf_status st = CF_OK;
  input_files seen = {0};
  for (int i = 0; i < g->n_nodes && !st; i++) {
    const cf_node *n = &g->nodes[i];
    if (!made_here(a, n, seeded)) continue;
    in->names[k] = n->name;
    const char *path = input_path(a, n->name);
    for (int r = 0; r < ranks && !st; r++) {
      cf_tensor *t = &in->data[(size_t)r * (size_t)in->n + (size_t)k];
      t->dtype = n->out[0].dtype;
      t->shape = n->out[0].shape;
      cf_shape_elements(&t->shape, &t->count);
      if (only >= 0 && r != only) continue; /* another process's */
      if (path) {
        char file[4096], *o = file;
        for (const char *s = path; *s && o < file + sizeof file - 16; s++) {
          if (strncmp(s, "{rank}", 6) == 0) {
            o += snprintf(o, 16, "%d", r);
            s += 5;
          } else {
            *o++ = *s;
          }
        }
        *o = 0;
        st = read_input(ctx, file, t, a->timeout, &seen);
      } else {
        size_t bytes = (size_t)t->count * (size_t)cf_dtype_size(t->dtype);
        t->data = malloc(bytes ? bytes : 1);
        if (!t->data) {
          char b[32];
          st = cf_error(ctx, CF_ERR_NO_MEMORY, cf_tool_name(a->file.v[0]), 0,
                        "cannot allocate %s for rank %d's Input '%s': out of memory",
                        cf_bytes_text((int64_t)bytes, b, sizeof b), r, n->name);
        } else {
          cf_fill_node(n, t->data, t->dtype, t->count, a->seed, r);
        }
      }
    }
    k++;
  }
  free(seen.v);
  return st;
}

/* The file of each output under DIR/rank<R>/ (SPEC 4: '/' becomes '_', and
 * two outputs never share a file): a name without '/' is its own file name;
 * a sanitised name takes the first of NAME, NAME~1, NAME~2, ... that no
 * other output has, in output order. files[j] is "NAME.npy" (malloc'd). */
static cf_status output_files(cf_context *ctx, const cf_run_result *res, char ***out) {
  int n = res->n_outputs;
  char **files = calloc((size_t)n + 1, sizeof *files);
  if (!files) return cf_error(ctx, CF_ERR_NO_MEMORY, NULL, 0, "out of memory");
  *out = files;
  for (int pass = 0; pass < 2; pass++)
    for (int j = 0; j < n; j++) {
      const char *name = res->output_names[j];
      if ((strchr(name, '/') != NULL) != pass) continue;
      size_t len = strlen(name) + 32;
      char *f = malloc(len);
      if (!f) return cf_error(ctx, CF_ERR_NO_MEMORY, NULL, 0, "out of memory");
      files[j] = f;
      for (int k = 0;; k++) {
        int o = snprintf(f, len, "%s", name);
        for (char *c = f; *c; c++)
          if (*c == '/') *c = '_';
        snprintf(f + o, len - (size_t)o, k ? "~%d.npy" : ".npy", k);
        bool taken = false;
        for (int i = 0; i < n && !taken; i++)
          taken = i != j && files[i] && strcmp(files[i], f) == 0;
        if (!taken) break;
      }
    }
  return CF_OK;
}

static void free_files(char **files, int n) {
  for (int j = 0; files && j < n; j++)
    free(files[j]);
  free(files);
}

/* DIR/outputs.json: every output's name, file, dtype and shape. */
static cf_status write_manifest(cf_context *ctx, const char *dir, const cf_run_result *res,
                                int ranks, char **files) {
  char path[4096];
  if ((size_t)snprintf(path, sizeof path, "%s/outputs.json", dir) >= sizeof path)
    return cf_error(ctx, CF_ERR_IO, dir, 0, "cannot write: path too long");
  cJSON *o = cJSON_CreateObject();
  cJSON_AddNumberToObject(o, "ranks", ranks);
  cJSON *outs = cJSON_AddArrayToObject(o, "outputs");
  for (int j = 0; j < res->n_outputs; j++) {
    const cf_tensor *t = &res->outputs[j];
    cJSON *e = cJSON_CreateObject(), *shape = cJSON_CreateArray();
    cJSON_AddStringToObject(e, "name", res->output_names[j]);
    cJSON_AddStringToObject(e, "file", files[j]);
    cJSON_AddStringToObject(e, "dtype", cf_dtype_name(t->dtype));
    for (int d = 0; d < t->shape.rank; d++)
      cJSON_AddItemToArray(shape, cJSON_CreateNumber((double)t->shape.dims[d]));
    cJSON_AddItemToObject(e, "shape", shape);
    cJSON_AddItemToArray(outs, e);
  }
  char *text = cJSON_Print(o);
  cJSON_Delete(o);
  if (!text) return cf_error(ctx, CF_ERR_NO_MEMORY, NULL, 0, "out of memory");
  /* the printed object and a newline, written as one file */
  size_t len = strlen(text);
  char *line = realloc(text, len + 2);
  cf_status st;
  if (!line) {
    st = cf_error(ctx, CF_ERR_NO_MEMORY, NULL, 0, "out of memory");
  } else {
    text = line;
    memcpy(text + len, "\n", 2);
    st = cf_write_file(ctx, path, text, len + 1);
  }
  free(text);
  return st;
}

/* A run's outputs are published together (SPEC 4's layout): the process
 * with rank 0 removes DIR/outputs.json before the run (drop_manifest, which
 * also notes how many ranks it listed); each rank's DIR/rank<R>/ is written
 * under a temporary name and replaces the old one whole (save_outputs,
 * ir/temp.c); once every rank's is in place, rank 0 removes the rank
 * directories of an earlier run with more ranks and writes the manifest
 * last (publish_manifest). So DIR/outputs.json, when present, describes
 * exactly the rank directories there, and no rank directory is a mix of two
 * runs. SIGTERM or SIGINT removes the temporaries (on_signal). */

/* Remove DIR/outputs.json; *old_ranks: the ranks it listed (0: none). */
static void drop_manifest(const char *dir, int *old_ranks) {
  char path[4096];
  *old_ranks = 0;
  if ((size_t)snprintf(path, sizeof path, "%s/outputs.json", dir) >= sizeof path) return;
  FILE *f = fopen(path, "rb");
  if (f) {
    char text[4096]; /* "ranks" is its first member */
    size_t n = fread(text, 1, sizeof text - 1, f);
    fclose(f);
    text[n] = '\0';
    const char *k = strstr(text, "\"ranks\"");
    const char *colon = k ? strchr(k, ':') : NULL;
    long v = colon ? strtol(colon + 1, NULL, 10) : 0;
    *old_ranks = v > 0 && v <= CF_MAX_WORLD ? (int)v : 0;
  }
  unlink(path);
}

/* DIR/rank<R>/ for ranks lo..hi-1 (an MPI process has only its own), each
 * written aside and then replacing the old one whole; the process with
 * rank 0 names the outputs that were renamed to keep them apart. */
static cf_status save_outputs(cf_context *ctx, const char *dir, const cf_run_result *res, int lo,
                              int hi, char **files) {
  char path[4096], target[4096];
  cf_status st = CF_OK;
  if (mkdir(dir, 0777) != 0 && errno != EEXIST)
    st = cf_error(ctx, CF_ERR_IO, dir, 0, "cannot create directory: %s", strerror(errno));
  for (int r = lo; r < hi && !st; r++) {
    snprintf(target, sizeof target, "%s/rank%d", dir, r);
    cf_tmpdir t;
    if ((st = cf_tmpdir_make(ctx, target, &t))) break;
    for (int j = 0; j < res->n_outputs && !st; j++) {
      if ((size_t)snprintf(path, sizeof path, "%s/%s", t.path, files[j]) >= sizeof path)
        st = cf_error(ctx, CF_ERR_IO, dir, 0, "cannot write: the path of output '%s' is too long",
                      res->output_names[j]);
      const cf_tensor *x = &res->outputs[(size_t)r * (size_t)res->n_outputs + (size_t)j];
      if (!st) st = cf_npy_write(ctx, path, x->dtype, &x->shape, x->data);
    }
    if (!st)
      st = cf_tmpdir_publish(ctx, &t, target);
    else
      cf_tmpdir_discard(&t);
  }
  for (int j = 0; j < res->n_outputs && !st && lo == 0; j++) {
    int n = (int)strlen(res->output_names[j]);
    if (files[j][n] == '~')
      fprintf(
          stderr,
          "collfuse run: output '%s' saved as %s (%.*s.npy is taken; %s/outputs.json lists every "
          "output's file)\n",
          res->output_names[j], files[j], n, files[j], dir);
  }
  return st;
}

/* Rank 0, once every rank's directory is in place: an earlier run's rank
 * directories beyond this run's ranks go, then DIR/outputs.json. */
static cf_status publish_manifest(cf_context *ctx, const char *dir, const cf_run_result *res,
                                  int ranks, int old_ranks, char **files) {
  char path[4096];
  cf_status st = CF_OK;
  for (int r = ranks; r < old_ranks && !st; r++) {
    snprintf(path, sizeof path, "%s/rank%d", dir, r);
    st = cf_dir_remove(ctx, path);
  }
  return st ? st : write_manifest(ctx, dir, res, ranks, files);
}

/* SIGTERM and SIGINT while outputs are written: their temporaries go
 * (async-signal-safe: ir/temp.c), then the signal does what it would have. */
static void on_signal(int sig) {
  cf_temps_remove();
  signal(sig, SIG_DFL);
  raise(sig);
}

/* on_signal for SIGTERM and SIGINT, unless they are ignored (nohup). */
static void catch_signals(void) {
  static const int sigs[] = {SIGTERM, SIGINT};
  for (size_t i = 0; i < sizeof sigs / sizeof sigs[0]; i++) {
    struct sigaction old, sa = {.sa_handler = on_signal};
    sigemptyset(&sa.sa_mask);
    if (sigaction(sigs[i], NULL, &old) == 0 && old.sa_handler != SIG_IGN) sigaction(sigs[i], &sa, NULL);
  }
}

/* What the run will hold, against what the machine has (or --max-memory),
 * before anything big is allocated: each rank's arena, output copies and
 * inputs, and --verify's reference (with MPI, every rank's inputs too: the
 * reference needs them). */
static cf_status check_memory(cf_context *ctx, const run_job *j) {
  const run_args *a = j->a;
  const cf_graph *g = j->ref_g ? j->ref_g : j->plan->g;
  int64_t inputs = 0, b;
  for (int i = 0; i < g->n_nodes; i++)
    if (made_here(a, &g->nodes[i], j->seeded) && cf_value_bytes(&g->nodes[i].out[0], &b))
      inputs += b;
  cf_mem_need need = {
      .file = cf_tool_name(a->file.v[0]),
      .ranks = j->ranks,
      .per_rank = cf_plan_run_bytes(j->plan, cf_run_outputs_in_arena(j->plan)) + inputs,
      .reserved = cf_plan_reserved_bytes(j->plan, a->procs ? 1 : j->ranks)};
  if (a->verify) {
    if (j->stream)
      cf_verify_window(j->ref_g, j->ranks, &need.shared);
    else
      need.shared = cf_reference_bytes(j->ref_g, j->ranks);
    need.shared_what = "--verify's float64 reference";
  }
  if (a->procs && a->verify) {
    need.shared += (int64_t)(j->ranks - 1) * inputs;
    need.shared_what = "--verify's float64 reference and every rank's inputs";
  } else if (!a->procs && j->ranks > 1) {
    need.hint = "use fewer ranks or --backend mpi across machines";
  }
  return cf_run_check_memory(ctx, &j->setup, &need); /* MPI: this process's share */
}


/* Outputs of the run in the reference graph's Output order (by name). */
static cf_status align_outputs(cf_context *ctx, const cf_graph *ref_g, const cf_run_result *res,
                               cf_tensor *got, int n_ref) {
  int j = 0;
  for (int i = 0; i < ref_g->n_nodes; i++) {
    const cf_node *n = &ref_g->nodes[i];
    if (n->op != CF_OP_OUTPUT) continue;
    int k = -1;
    for (int x = 0; x < res->n_outputs; x++)
      if (strcmp(res->output_names[x], n->name) == 0) k = x;
    if (k < 0) return cf_error(ctx, CF_ERR_INVALID, NULL, 0, "output '%s' is missing after compilation", n->name);
    for (int r = 0; r < res->ranks; r++)
      got[(size_t)r * (size_t)n_ref + (size_t)j] = res->outputs[(size_t)r * (size_t)res->n_outputs + (size_t)k];
    j++;
  }
  return CF_OK;
}

static cf_status find_opaque_outputs(cf_context *ctx, const cf_graph *ref_g, opaque_outs *o) {
  *o = (opaque_outs){0};
  for (int i = 0; i < ref_g->n_nodes; i++) o->total += ref_g->nodes[i].op == CF_OP_OUTPUT;
  bool *dep = calloc((size_t)o->total + 1, sizeof *dep);
  o->names = calloc((size_t)o->total + 1, sizeof *o->names);
  if (!dep || !o->names || cf_verify_opaque_outputs(ref_g, dep, o->total) < 0) {
    free(dep);
    return cf_error(ctx, CF_ERR_NO_MEMORY, NULL, 0, "out of memory");
  }
  for (int i = 0, j = 0; i < ref_g->n_nodes; i++)
    if (ref_g->nodes[i].op == CF_OP_OUTPUT && dep[j++]) o->names[o->n++] = ref_g->nodes[i].name;
  free(dep);
  return CF_OK;
}

/* The summary line's "; not checked: ..." after "verified": at most three
 * names, then how many more. */
static void print_unchecked(const opaque_outs *o) {
  printf("; not checked: %d of %d output%s depend%s on Opaque nodes, which run on synthetic data (",
         o->n, o->total, cf_s(o->total), o->n == 1 ? "s" : "");
  for (int j = 0; j < o->n && j < 3; j++) printf("%s'%s'", j ? ", " : "", o->names[j]);
  if (o->n > 3) printf(" and %d more", o->n - 3);
  printf(")");
}

/* Each phase's seconds (cf_tool_phases), as -v prints them. */
typedef struct phase_times {
  const char *name[CF_PHASES_MAX];
  double secs[CF_PHASES_MAX];
  int n;
} phase_times;

static void print_json(const run_args *a, const cf_run_result *res, bool verified,
                       const cf_verify_stats *vs, const cf_plan *plan, int64_t peak_unfused,
                       const opaque_outs *opq, const phase_times *ph, const cf_trace *trace) {
  cJSON *o = cJSON_CreateObject();
  cJSON_AddNumberToObject(o, "ranks", res->ranks);
  cJSON_AddStringToObject(o, "backend", a->backend ? a->backend : "threads");
  cJSON_AddStringToObject(o, "device", a->device ? a->device : "cpu");
  cJSON_AddNumberToObject(o, "iters", a->iters);
  cJSON_AddNumberToObject(o, "warmup", a->warmup);
  cJSON_AddNumberToObject(o, "time_ms_median", res->time_ms_median);
  cJSON_AddBoolToObject(o, "verified", verified);
  cJSON_AddNumberToObject(o, "max_abs_err", vs->max_abs_err);
  cJSON_AddNumberToObject(o, "max_rel_err", vs->max_rel_err);
  cJSON_AddNumberToObject(o, "collectives_executed", (double)res->collectives_executed);
  cJSON_AddBoolToObject(o, "deterministic", a->deterministic);
  cJSON_AddNumberToObject(o, "seed", (double)a->seed);
  cJSON_AddNumberToObject(o, "peak_bytes", (double)cf_plan_peak_bytes(plan));
  if (peak_unfused >= 0) cJSON_AddNumberToObject(o, "peak_bytes_unfused", (double)peak_unfused);
  cJSON_AddNumberToObject(o, "live_bytes", (double)plan->live_bytes);
  cJSON_AddNumberToObject(o, "in_place_collectives", plan->n_in_place);
  cJSON_AddNumberToObject(o, "copies", plan->n_copies);
  cJSON_AddNumberToObject(o, "copy_bytes", (double)plan->copy_bytes);
  cJSON *outs = cJSON_AddArrayToObject(o, "outputs");
  for (int j = 0; j < res->n_outputs; j++) cJSON_AddItemToArray(outs, cJSON_CreateString(res->output_names[j]));
  cJSON_AddNumberToObject(o, "opaque_nodes", a->opaque_nodes);
  cJSON *unchecked = cJSON_AddArrayToObject(o, "opaque_outputs");
  for (int j = 0; j < opq->n; j++) cJSON_AddItemToArray(unchecked, cJSON_CreateString(opq->names[j]));
  cJSON *phases = cJSON_AddObjectToObject(o, "phase_s");
  for (int k = 0; k < ph->n; k++) cJSON_AddNumberToObject(phases, ph->name[k], ph->secs[k]);
  cf_tool_timeline_json(o, trace, plan, a->warmup);
  char *text = cJSON_PrintUnformatted(o);
  if (text) printf("%s\n", text);
  free(text);
  cJSON_Delete(o);
}

/* 1..2^32 from a message, 0 for none: whether the ranks' setup errors are one */
static uint32_t msg_hash(const char *s) {
  uint64_t h64 = cf_hash_str(s);
  uint32_t h = (uint32_t)(h64 ^ h64 >> 32);
  return h ? h : 1;
}

/* --backend mpi: the job must match the rank table: its size, and this
 * process's rank on its server. */
static cf_status check_rank_table(cf_context *ctx, const char *path, int rank, int size, const char *host) {
  cf_rank_table t;
  char err[1024];
  int line;
  if (!cf_ranktable_load(path, &t, &line, err, sizeof err)) return cf_error(ctx, CF_ERR_INVALID, path, line, "%s", err);
  cf_status st = CF_OK;
  if (t.n_ranks != size) {
    st = cf_error(ctx, CF_ERR_INVALID, path, 0,
                  "the rank table has %d rank%s but mpirun started %d process%s", t.n_ranks,
                  cf_s(t.n_ranks), size, size == 1 ? "" : "es");
  } else {
    const cf_rank_server *s = &t.servers[t.ranks[rank].server];
    if (!cf_ranktable_host_is_local(s->host, host))
      st = cf_error(ctx, CF_ERR_INVALID, path, 0,
                    "rank %d belongs to server '%s' (host %s, device %d) but runs on '%s' "
                    "(`collfuse ranktable %s` prints the hostfile and rankfile that place it)",
                    rank, s->server_id, s->host, t.ranks[rank].device_id, host, path);
  }
  cf_ranktable_free(&t);
  return st;
}

/* Verify this process's rank only (MPI): the other ranks' references are
 * marked undefined, so messages still name the right rank. */
static cf_status verify_rank(cf_context *ctx, const cf_graph *ref_g, const cf_tensor *got, const cf_ref_value *ref,
                             int ranks, int n_ref, int me, cf_verify_stats *vs) {
  cf_ref_value *mine = calloc((size_t)ranks * (size_t)n_ref + 1, sizeof *mine);
  if (!mine) return cf_error(ctx, CF_ERR_NO_MEMORY, NULL, 0, "out of memory");
  for (int j = 0; j < n_ref; j++) mine[(size_t)me * (size_t)n_ref + (size_t)j] = ref[(size_t)me * (size_t)n_ref + (size_t)j];
  cf_status st = cf_verify_outputs(ctx, ref_g, got, mine, ranks, n_ref, vs);
  free(mine); /* shallow: the values belong to ref */
  return st;
}


/* -v: the plan's memory and each collective's algorithm, on stderr. */
static void print_plan(const run_job *j) {
  const cf_plan *plan = j->plan;
  cf_tool_progress_erase();
  int ranks = j->ranks;
  char b1[32], b2[32], b3[32], b4[32];
  cf_bytes_text(cf_plan_peak_bytes(plan), b1, sizeof b1);
  cf_bytes_text(j->peak_unfused, b2, sizeof b2);
  cf_bytes_text(plan->live_bytes, b3, sizeof b3);
  cf_bytes_text(plan->copy_bytes, b4, sizeof b4);
  fprintf(stderr,
          "run: %d rank%s, %d collective%s (%d in place), %d step%s, %d cop%s (%s); peak memory "
          "per rank %s, tensors live at once %s (unfused plan %s)\n",
          ranks, cf_s(ranks), plan->n_colls, cf_s(plan->n_colls), plan->n_in_place, plan->n_steps,
          cf_s(plan->n_steps), plan->n_copies, plan->n_copies == 1 ? "y" : "ies", b4, b1, b3, b2);
  for (int c = 0; c < plan->n_colls; c++) {
    const cf_pcoll *pc = &plan->colls[c];
    cf_bytes_text(pc->desc.count * cf_dtype_size(pc->desc.dtype), b1, sizeof b1);
    fprintf(stderr, "run:   %s '%s' %s %s over %d rank%s: %s%s%s\n",
            cf_op_table[pc->desc.op].name, pc->desc.node, b1, cf_dtype_name(pc->desc.dtype), pc->n,
            cf_s(pc->n), pc->fused_mm ? cf_algo_req_name(j->opt.algo) : cf_algo_name(pc->algo),
            pc->desc.in_place ? " in place" : "", pc->inline_ok ? "" : " (overlapped)");
  }
}

/* Everything before the run: the world and profile (cf_run_prepare), the
 * job's checks, the compiled and the unfused graph, their plans, the memory
 * check and the inputs. With MPI, a failure here is settled by agree_setup
 * (every process learns of it); only a world that could not be joined
 * (j->setup.world NULL) ends the command at once. */
static cf_status set_up(cf_context *ctx, run_job *j) {
  run_args *a = j->a;
  cf_status st = cf_run_prepare(ctx, &j->setup, &j->opt);
  if (a->procs && !j->setup.world) return st;
  if (a->procs) {
    cf_world *world = j->setup.world;
    j->me = j->setup.me;
    /* this process's long phases (compiling, its inputs, --verify) are its
     * rank's signs of life to the peers that wait for it (agree_setup, agree_result) */
    cf_pulse_here = cf_comm_pulse(cf_world_comm(world, world->first));
    if (!st && a->ranks && a->ranks != world->size)
      st = cf_error(ctx, CF_ERR_USAGE, NULL, 0,
                    "--ranks %d, but the launcher started %d process%s (leave --ranks out with "
                    "--backend %s under a launcher)",
                    a->ranks, world->size, world->size == 1 ? "" : "es", a->backend);
    j->ranks = world->size;
    if (!st && a->rank_table)
      st = check_rank_table(ctx, a->rank_table, j->me, world->size, cf_world_host(world));
  }
  if (!st)
    st = compile(ctx, j, a->o0 ? cf_pipeline_O0 : a->passes ? a->passes : cf_pipeline_default, true,
                 j->me == 0, &j->g);
  j->opt.ranks = j->ranks;
  /* the unfused graph: the reference's input, and -v's memory comparison */
  if (!st && (a->verify || a->verbose || a->json))
    st = compile(ctx, j, cf_pipeline_O0, false, false, &j->ref_g);
  if (!st && j->ref_g && a->opaque_nodes) st = find_opaque_outputs(ctx, j->ref_g, &j->opq);
  if (!st) st = cf_plan_build(ctx, j->g, &j->opt, &j->plan);
  if (!st && j->ref_g) {
    cf_plan *up = NULL;
    cf_run_options uo = j->opt;
    uo.device = CF_DEVICE_CPU; /* only its memory plan is wanted */
    if (cf_plan_build(ctx, j->ref_g, &uo, &up) == CF_OK) j->peak_unfused = cf_plan_peak_bytes(up);
    cf_plan_destroy(up);
  }
  if (!st && a->verbose && j->me == 0) print_plan(j);
  /* --verify window by window (no Input made here but --input's), or the
   * whole reference (every rank's Inputs made here) */
  j->stream = a->verify && j->ref_g && cf_reference_streams(j->ref_g);
  j->seeded = a->verify && !j->stream;
  /* the windows' buffers, allocated and freed window after window, stay
   * in the heap instead of going back to the kernel, which would clear
   * their pages again for the next window */
  if (j->stream) {
    mallopt(M_MMAP_THRESHOLD, 64 << 20);
    mallopt(M_TRIM_THRESHOLD, 512 << 20);
  }
  if (!st) st = check_memory(ctx, j);
  if (!st && (j->seeded || a->input.n)) cf_phase_begin(ctx, "inputs", 0);
  if (!st)
    st = make_inputs(ctx, j->ref_g ? j->ref_g : j->g, a, j->ranks,
                     a->procs && !a->verify ? j->me : -1, j->seeded, &j->in);
  /* the old manifest goes before any rank directory changes (under MPI
   * before the setup agreement, which every process passes first) */
  if (!st && a->save && j->me == 0) drop_manifest(a->save, &j->old_ranks);
  return st;
}

/* MPI: every rank learns whether any could not get ready (usage, input,
 * rank table), so all skip the run and exit alike; the failing ones say
 * why. A failure later, in the run, reaches the others as an abort. Returns
 * the exit code when the run must not start (0: go), *st updated. */
static int agree_setup(cf_context *ctx, run_job *j, cf_status *st) {
  if (!j->a->procs) return 0;
  int ranks = j->ranks, me = j->me, setup_rc = 0;
  /* a message every rank has (the graph's) is printed once, by rank 0 */
  double h = *st ? (double)msg_hash(cf_context_errmsg(ctx)) : 0;
  /* and whether they read the same profile (its MPI rules) */
  double ph = j->setup.prof ? (double)cf_profile_hash(j->setup.prof, cf_run_transport(&j->setup)) : -1;
  double v[6] = {*st ? cf_tool_exit_code(*st) : 0, *st ? (double)(ranks - me) : 0, h, -h, ph, -ph};
  cf_status s2 = cf_world_max(j->setup.world, v, 6);
  bool same = !s2 && v[2] > 0 && v[2] == -v[3];
  if (!s2 && !*st && v[0] == 0 && v[4] != -v[5]) {
    *st = cf_error(ctx, CF_ERR_INVALID, NULL, 0,
                   "profile: the ranks read different profiles (every process must see the same "
                   "file, or give --profile none)");
    same = true; /* every rank has it: rank 0 says it */
  }
  if (*st) setup_rc = same && me != 0 ? cf_tool_exit_code(*st) : cf_tool_fail(ctx, *st);
  if (s2 && !setup_rc) setup_rc = cf_tool_fail(ctx, s2);
  if (!s2 && v[0] > 0 && !setup_rc) {
    setup_rc = (int)v[0];
    if (me == 0)
      fprintf(stderr, "collfuse run: rank %d could not start (its message above)\n",
              ranks - (int)v[1]);
  }
  if (!setup_rc) *st = cf_exec_prepare(ctx, j->setup.world, j->plan);
  return setup_rc;
}

/* The run itself: every rank a thread here, or this process's rank of MPI's world. */
static cf_status run(cf_context *ctx, run_job *j) {
  cf_status st;
  /* (a test build runs it on a world that injects the faults asked for) */
  if (!cf_test_control(CF_TESTCTL_RUN, ctx, j->plan, j->setup.world, &j->in, &j->res, &st))
    st = j->a->procs ? cf_exec_run_world(ctx, j->plan, j->setup.world, &j->in, &j->res)
                     : cf_exec_run(ctx, j->plan, &j->in, &j->res);
  j->ran = !st;
  return st;
}

/* --verify: the outputs, in the reference's Output order, against the
 * float64 reference, window by window or whole (MPI: this process's rank). */
static cf_status verify(cf_context *ctx, run_job *j) {
  const run_args *a = j->a;
  const cf_graph *ref_g = j->ref_g;
  int ranks = j->ranks;
  cf_status st = CF_OK;
  for (int i = 0; i < ref_g->n_nodes; i++) j->n_ref += ref_g->nodes[i].op == CF_OP_OUTPUT;
  j->got = calloc((size_t)j->n_ref * (size_t)ranks + 1, sizeof *j->got);
  if (!j->got) st = cf_error(ctx, CF_ERR_NO_MEMORY, NULL, 0, "out of memory");
  cf_phase_begin(ctx, "verify", 0);
  if (!st) st = align_outputs(ctx, ref_g, &j->res, j->got, j->n_ref);
  if (!st) cf_test_control(CF_TESTCTL_CORRUPT, ref_g, j->got, ranks, j->n_ref);
  int64_t window;
  cf_test_control(CF_TESTCTL_VERIFY_WINDOW, &window);
  if (!st && j->stream)
    st = cf_verify_streamed(ctx, ref_g, &j->in, a->seed, j->got, ranks, j->n_ref,
                            a->procs ? j->me : -1, window, &j->vs);
  else if (!st && !(st = cf_reference_run(ctx, ref_g, &j->in, a->seed, &j->ref, &j->n_ref)))
    st = a->procs ? verify_rank(ctx, ref_g, j->got, j->ref, ranks, j->n_ref, j->me, &j->vs)
                : cf_verify_outputs(ctx, ref_g, j->got, j->ref, ranks, j->n_ref, &j->vs);
  if (!st) j->verified = true;
  return st;
}

/* --save-outputs (even when verification failed: they help find why): this
 * process's rank directories, and with threads the manifest. Returns st, or
 * the first failure of saving when st is CF_OK. */
static cf_status save(cf_context *ctx, run_job *j, cf_status st) {
  const run_args *a = j->a;
  j->saved = CF_ERR_RUNTIME;
  if (!a->save || !j->res.outputs) return st;
  cf_phase_begin(ctx, "save", 0);
  const cf_run_result *res = &j->res;
  j->saved = output_files(ctx, res, &j->files);
  if (!j->saved)
    j->saved = save_outputs(ctx, a->save, res, a->procs ? j->me : 0, a->procs ? j->me + 1 : res->ranks,
                            j->files);
  if (!st) st = j->saved;
  /* threads: every rank's is written; MPI: after every process's (agree_result) */
  if (!j->saved && !a->procs)
    j->saved = publish_manifest(ctx, a->save, res, j->ranks, j->old_ranks, j->files);
  if (!st) st = j->saved;
  return st;
}

/* MPI: every rank that ran learns whether any failed (the lowest one
 * failing, its exit code) and the largest errors, so rank 0 reports for
 * all and every process exits alike. Returns the exit code. */
static int agree_result(cf_context *ctx, run_job *j, int rc) {
  const run_args *a = j->a;
  if (!a->procs || !j->ran) return rc;
  int ranks = j->ranks, me = j->me;
  double v[5] = {rc ? (double)(ranks - me) : 0, rc, j->vs.max_abs_err, j->vs.max_rel_err,
                 a->save && j->saved ? 1 : 0};
  cf_status s3 = cf_world_max(j->setup.world, v, 5);
  if (s3) return rc ? rc : cf_tool_fail(ctx, s3);
  /* every process's rank directory is in place: rank 0 writes the manifest */
  if (a->save && me == 0 && v[4] == 0) {
    cf_status s4 = publish_manifest(ctx, a->save, &j->res, ranks, j->old_ranks, j->files);
    if (s4 && !rc) rc = cf_tool_fail(ctx, s4);
  }
  j->vs.max_abs_err = v[2];
  j->vs.max_rel_err = v[3];
  if (v[0] > 0 && !rc) {
    rc = (int)v[1];
    if (me == 0)
      fprintf(stderr, "collfuse run: rank %d failed (its message above)\n", ranks - (int)v[0]);
  }
  return rc;
}

/* Rank 0 of a run that succeeded: the JSON object or the summary line
 * (-v: each phase's time before it, on stderr). */
static void report(cf_context *ctx, const run_job *j) {
  const run_args *a = j->a;
  int ranks = j->ranks;
  phase_times ph;
  ph.n = cf_tool_phases(ctx, ph.name, ph.secs, CF_PHASES_MAX);
  cf_tool_progress_erase();
  if (a->verbose) {
    double total = 0;
    fprintf(stderr, "run: phases:");
    for (int k = 0; k < ph.n; k++) {
      fprintf(stderr, "%s %s %.3f s", k ? "," : "", ph.name[k], ph.secs[k]);
      total += ph.secs[k];
    }
    fprintf(stderr, "; %.3f s in all\n", total);
    cf_tool_timeline_print(stderr, "run", ctx->trace, j->plan, a->warmup);
  }
  if (a->json) {
    print_json(a, &j->res, j->verified, &j->vs, j->plan, j->peak_unfused, &j->opq, &ph, ctx->trace);
    return;
  }
  printf("%s: %d rank%s%s, %lld collective%s per iteration, median %.3f ms over %d iteration%s",
         cf_tool_name(a->file.v[0]), ranks, cf_s(ranks), a->mpi ? " (mpi)" : a->shm ? " (shm)" : "",
         (long long)j->res.collectives_executed, cf_s(j->res.collectives_executed),
         j->res.time_ms_median, a->iters, cf_s(a->iters));
  if (j->verified) printf("; verified (max rel err %.3g)", j->vs.max_rel_err);
  if (j->verified && j->opq.n) print_unchecked(&j->opq);
  printf("\n");
}

/* --trace: the timeline, written whether the run succeeded or not (with the
 * failure's message); with MPI each process writes its own rank's as
 * FILE.rank<R>.json. Returns rc, or the exit code of a trace that could not
 * be written. */
static int write_trace(cf_context *ctx, run_job *j, int rc) {
  const char *path = j->a->trace;
  cf_trace *t = ctx->trace;
  if (!t || !path) return rc;
  cf_phase_end(ctx);
  if (rc) cf_trace_fail(t, cf_context_errmsg(ctx));
  char own[4096];
  if (j->a->procs) {
    size_t n = strlen(path);
    bool json = n > 5 && strcmp(path + n - 5, ".json") == 0;
    snprintf(own, sizeof own, "%.*s.rank%d.json", (int)(json ? n - 5 : n), path, j->me);
    path = own;
  }
  cf_status st = cf_trace_write(ctx, t, path);
  if (st) return rc ? rc : cf_tool_fail(ctx, st);
  int64_t dropped = cf_trace_dropped(t);
  cf_tool_progress_erase();
  if (dropped)
    fprintf(stderr,
            "collfuse run: --trace %s: %lld event%s dropped (each lane keeps its last %lld; the "
            "trace holds the end of the run)\n",
            path, (long long)dropped, cf_s(dropped), (long long)t->lanes[0].cap);
  return rc;
}

static void job_free(run_job *j, int rc) {
  if (j->ref) cf_ref_free(j->ref, j->n_ref * j->ranks);
  free_files(j->files, j->res.n_outputs);
  free(j->opq.names);
  free(j->got);
  cf_run_result_free(&j->res);
  free_inputs(&j->in);
  cf_plan_destroy(j->plan);
  cf_graph_destroy(j->g);
  cf_graph_destroy(j->ref_g);
  cf_opts_free(&cf_command_run, j->a);
  fflush(stdout);
  cf_pulse_here = (cf_pulse){NULL, NULL}; /* the world's endpoint goes with it */
  cf_run_setup_free(&j->setup, rc);
}

static void run_trace_free(cf_context *ctx) {
  cf_trace_here = NULL;
  cf_trace_destroy(ctx->trace);
  ctx->trace = NULL;
}

int cf_cmd_run(cf_context *ctx, int argc, char **argv) {
  run_args a = {0};
  int rc = parse_args(argc, argv, &a);
  if (rc) {
    cf_opts_free(&cf_command_run, &a);
    return rc == CF_OPTS_HELP ? 0 : rc;
  }
  if (a.shm && !cf_shm_launched()) { /* no launcher: start the ranks here */
    int n = a.ranks;
    cf_graph *g = NULL;
    if (!n && cf_tool_load(ctx, a.file.v[0], &g) == CF_OK) n = g->world_size > 0 ? (int)g->world_size : 1;
    cf_graph_destroy(g);
    rc = cf_tool_spawn_ranks("run", n ? n : 1);
    if (rc >= 0) {
      cf_opts_free(&cf_command_run, &a);
      return rc;
    }
  }
  run_job j = {.a = &a,
               .ranks = a.ranks,
               .peak_unfused = -1,
               .setup = {.profile = a.profile,
                         .mpi = a.mpi,
                         .shm = a.shm,
                         .timeout_s = a.timeout,
                         .max_memory = a.max_memory,
                         .max_memory_what = "--max-memory"},
               .opt = {.iters = a.iters,
                       .warmup = a.warmup,
                       .seed = a.seed,
                       .deterministic = a.deterministic,
                       .timeout_s = a.timeout,
                       .algo = parse_algo(a.algo),
                       .verbose = a.verbose,
                       .outputs_in_arena = true,
                       .device = a.device && strcmp(a.device, "cuda") == 0 ? CF_DEVICE_CUDA
                                                                           : CF_DEVICE_CPU}};
  if (a.save) catch_signals();
  cf_trace *trace = NULL; /* --trace's, or -v's own (for its timeline lines) */
  if ((a.trace || a.verbose) && cf_trace_create(CF_MAX_WORLD, CF_TRACE_EVENTS, &trace)) {
    fprintf(stderr, "collfuse run: out of memory\n");
    cf_opts_free(&cf_command_run, &a);
    return EXIT_RUNTIME;
  }
  ctx->trace = trace;
  cf_trace_here = cf_trace_driver(trace);
  cf_status st = set_up(ctx, &j);
  cf_trace_set_ranks(trace, j.ranks);
  if (a.procs && !j.setup.world) { /* MPI's or the shm world could not be joined */
    rc = cf_tool_fail(ctx, st);
    job_free(&j, rc);
    run_trace_free(ctx);
    return rc;
  }
  int setup_rc = agree_setup(ctx, &j, &st);
  if (!st && !setup_rc) st = run(ctx, &j);
  if (j.ran && a.verify) st = verify(ctx, &j);
  st = save(ctx, &j, st);
  if (a.procs && st) cf_test_control(CF_TESTCTL_FAILED, j.me, a.timeout);
  rc = setup_rc ? setup_rc : st ? cf_tool_fail(ctx, st) : 0;
  if (j.plan && j.plan->abandoned) {
    /* a rank's thread is still in a BLAS call the run gave up on: leave
     * now (what it reads must not be freed, and OpenBLAS's exit handler
     * would wait for its busy threads) */
    rc = write_trace(ctx, &j, rc);
    fflush(stdout);
    fflush(stderr);
    cf_world_destroy(j.setup.world, rc);
    _exit(rc);
  }
  rc = agree_result(ctx, &j, rc);
  if (!rc && j.me == 0) report(ctx, &j);
  rc = write_trace(ctx, &j, rc);
  job_free(&j, rc);
  run_trace_free(ctx);
  return rc;
}
