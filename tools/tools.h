/* tools.h - internals of the collfuse command-line driver. */
#ifndef COLLFUSE_TOOLS_H
#define COLLFUSE_TOOLS_H

#include "../api/api.h"
#include "../executor/algo.h"
#include "../ir/ir.h"
#include "../passes/passes.h"

#include <stdio.h>

/* json_report.c: the `compile --json` object (docs/cli.md), printed on
 * stdout. before is the collective count of the input graph. */
cf_status cf_report_compile_json(const cf_graph *g, int collectives_before,
                                 const cf_pass_timing *timing, int n_timing);
/* Bucket reason text for a collective left after fusion. */
const char *cf_report_reason(const cf_node *n, char *buf, size_t len);
/* bench.c: `collfuse bench compile [--sizes N,...] [--json]`; returns the
 * exit code. */
int cf_bench_compile(cf_context *ctx, int argc, char **argv);
/* bench_reduce.c: `collfuse bench reduce [--quick] [--sizes S,..] [--reps N]
 * [--min-ms MS] [--json]`: collfuse's JIT kernels against memcpy, a plain C
 * loop and MPI_Reduce_local; returns the exit code. */
int cf_bench_reduce(cf_context *ctx, int argc, char **argv);
/* bench_allreduce.c: `collfuse bench allreduce [--ranks N] [--sizes S,..]
 * [--algo A] [--iters K] [--loops L] [--quick] [--no-mpi] [--mpi-args ARGS]
 * [--json]`:
 * collfuse's AllReduce algorithms on rank threads against MPI_Allreduce
 * under mpirun; returns the exit code. */
int cf_bench_allreduce(cf_context *ctx, int argc, char **argv);
/* The options of bench reduce and bench allreduce as their tables read
 * them (bench_reduce.c, bench_allreduce.c); each device's run checks and
 * converts them to its own ranges. 0 / NULL: not given. */
typedef struct cf_red_args {
  const char *sizes, *dtypes, *ops, *sources, *min_ms, *device;
  int reps, samples;
  int64_t max_memory; /* --max-memory (the CPU run only) */
  bool quick, json;
} cf_red_args;
typedef struct cf_ar_args {
  const char *sizes, *algo, *mpi_args, *backend, *device;
  const char *profile; /* --profile FILE: read by auto, written by --save-profile */
  int ranks, iters, loops;
  int64_t max_memory; /* --max-memory (the CPU run only) */
  bool quick, json, no_mpi, save_profile;
} cf_ar_args;
/* bench_cuda.c: `bench reduce --device cuda` and `bench allreduce --device
 * cuda` (the CUDA backend against the GPU's copy rate); return the exit
 * code (1 without a CUDA driver). */
int cf_bench_reduce_cuda(cf_context *ctx, const cf_red_args *a);
int cf_bench_allreduce_cuda(cf_context *ctx, const cf_ar_args *a);
/* bench_util.c: what the bench subcommands share. */
double cf_bench_median(double *v, int n);  /* sorts v; 0 when n <= 0 */
double cf_bench_gbps(int64_t bytes, double us); /* 1e9 bytes/s; 0 when us <= 0 */
/* "8B", "64K", "256M", "1G": the largest unit that divides b. */
void cf_bench_size_text(int64_t b, char *buf, size_t len);
/* "8,64K,1MiB,256M" (K/M/G = KiB/MiB/GiB): at most max sizes, each > 0, a
 * multiple of 4 and at most limit bytes; false otherwise. */
bool cf_bench_parse_sizes(const char *v, int64_t limit, int64_t *sizes, int max, int *n);
/* An option's integer value in [lo, hi] (whole string); false otherwise. */
bool cf_bench_parse_int(const char *v, long lo, long hi, int *out);
/* bench allreduce's columns, read off the algorithm table: auto, then
 * each of collfuse's own algorithms (not the transport's) forced, in table
 * order; at most max. Returns how many. */
enum { CF_BENCH_MAX_COLS = 16 };
int cf_bench_ar_columns(cf_algo_req *cols, int max);
/* bench allreduce --algo WORD: the row whose column alone is kept besides
 * auto's; -1 (no WORD: every column) or cf_algo_count (auto: auto alone). */
int cf_bench_ar_only(const char *word);
/* What one size of bench allreduce measures: column k's request resolved
 * for d on n ranks (run[k]) and the slot of algos that times it (slot[k];
 * -1 when only, a cf_bench_ar_only row, keeps another column or skip says
 * the algorithm sits this size out). Columns that resolve to one algorithm
 * share its slot. algos holds n_algos entries already (the MPI run's
 * reference); returns how many it holds after. */
int cf_bench_ar_slots(const cf_algo_req *cols, int n_cols, int only, const cf_coll_desc *d, int n,
                      bool (*skip)(int algo, const cf_coll_desc *d), int *run, int *slot,
                      int *algos, int n_algos);
/* bench_profile.c: one size of bench allreduce as --save-profile reads it:
 * column k (0: auto) ran algorithm run[k] in us[k] microseconds per call,
 * its fastest loop's (0: not measured): preemption on a loaded machine only
 * ever adds time, so the fastest loop says best which algorithm is faster. */
typedef struct cf_bench_ar_cell {
  int64_t bytes;
  int run[CF_BENCH_MAX_COLS];
  double us[CF_BENCH_MAX_COLS];
} cf_bench_ar_cell;
/* The fastest forced column per size and the alpha/beta line through the
 * table's ends, as transport's entry for ranks, merged into the profile at
 * cf_profile_path(given) (made when absent); path receives where. */
cf_status cf_bench_ar_save_profile(cf_context *ctx, const char *given, const char *transport,
                                   int ranks, const cf_bench_ar_cell *cells, int n_sizes,
                                   int n_cols, char *path, size_t len);
/* bench_ar_loop.c: bench allreduce's measuring loop over any world and
 * device (the threads and MPI worlds on the CPU device, the threads world
 * on CUDA): open it on a world and a device (neither is owned; the kernels
 * every algorithm may launch are prepared), then measure each size on every
 * rank of this process. */
enum {
  CF_BENCH_AR_MAX_ALGOS = CF_BENCH_MAX_COLS + 1, /* every column and the MPI reference */
  CF_BENCH_AR_MAX_LOOPS = 100,
  CF_BENCH_AR_MAX_RANKS = 64 /* of this process */
};
typedef struct cf_bench_ar cf_bench_ar;
typedef struct cf_bench_ar_size {
  int64_t bytes;
  int iters, loops;                 /* calls per loop, timed loops */
  int algos[CF_BENCH_AR_MAX_ALGOS]; /* distinct algorithms, timed round-robin */
  int n_algos;
  /* NULL: every output is checked against the float64 sum of every rank's
   * input (every rank in this process); else algos[0]'s result is the
   * reference, named so in a message (MPI: "MPI_Allreduce gave") */
  const char *ref;
  bool bound;                           /* also time every rank's copy of its input */
  double us[CF_BENCH_AR_MAX_ALGOS];     /* out: median microseconds per call */
  double min_us[CF_BENCH_AR_MAX_ALGOS]; /* out: the fastest loop's */
  double copy_us;                       /* out: the bound's median (the faster copy's); 0 without */
  double copy_kind_us[2];               /* out: memcpy's and the streaming copy's medians; 0: not run */
} cf_bench_ar_size;
struct cf_world;
/* The AllReduce every rank runs: float32 sum of count elements over the world. */
cf_coll_desc cf_bench_ar_desc(int64_t count);
cf_status cf_bench_ar_open(cf_context *ctx, struct cf_world *w, cf_device *dev, cf_bench_ar **out);
/* One size; false when a rank failed (cf_bench_ar_error says why; every
 * rank of the world has stopped). */
bool cf_bench_ar_measure(cf_bench_ar *h, cf_bench_ar_size *s);
const char *cf_bench_ar_error(const cf_bench_ar *h);
void cf_bench_ar_close(cf_bench_ar *h); /* accepts NULL; the world and device stay */
/* bench_fusion.c: `collfuse bench fusion FILE [--ranks N] [--iters K]
 * [--warmup W] [--split SPEC].. [--quick] [--json]`: the graph unfused, fused and split
 * several ways, against one flat AllReduce of all its bytes; returns the
 * exit code. */
int cf_bench_fusion(cf_context *ctx, int argc, char **argv);
/* bench_fusion_api.c: `bench fusion FILE --api`: a DP step through the C
 * API with separate buffers against bucket views; returns the exit code. */
typedef struct cf_bench_api_options {
  const char *file;
  int ranks, iters, warmup;
  int64_t max_memory; /* 0: what the machine has available */
  bool json;
} cf_bench_api_options;
int cf_bench_fusion_api(cf_context *ctx, const cf_bench_api_options *o);
/* bench_mmrs.c: `collfuse bench mmrs [--ranks N,..] [--shapes MxKxN,..]
 * [--dtypes D,..] [--iters K] [--warmup W] [--rounds R] [--comm-turn T]
 * [--quick] [--json]`: the fused MatmulReduceScatter against MatMul then
 * ReduceScatter, and each part alone; returns the exit code. */
int cf_bench_mmrs(cf_context *ctx, int argc, char **argv);

/* options.c: one table per command drives its parser and its --help. */
typedef enum cf_opt_kind {
  CF_OPT_FLAG, /* no value: sets a bool */
  CF_OPT_STR,  /* one value: sets a const char * (the last one given wins) */
  CF_OPT_INT,  /* one integer in [lo, hi]: sets an int */
  CF_OPT_SIZE, /* one size in bytes ("512M", "4G") in [lo, hi]: sets an int64_t */
  CF_OPT_LIST, /* a value, repeatable: appends to a cf_opt_list */
  CF_OPT_CALL, /* one value given only to check (which converts and stores it) */
} cf_opt_kind;
typedef struct cf_opt_list {
  const char **v; /* the values in order (argv's strings); freed by cf_opts_free */
  int n;
} cf_opt_list;
typedef struct cf_opt {
  const char *name;  /* "--ranks", "-o" */
  const char *alias; /* another spelling ("--verbose" for -v) or NULL */
  const char *value; /* the value's name in help ("N"); NULL: choices, or a flag */
  cf_opt_kind kind;
  size_t field;        /* offsetof the field it sets in the command's struct */
  long long lo, hi;    /* CF_OPT_INT's and CF_OPT_SIZE's range */
  const char *choices; /* "threads|mpi": the only values accepted (unless check decides), or NULL */
  /* Choices kept in a table of their own (--algo's: executor/algo.h):
   * writes "a|b|c" into buf (CF_OPT_CHOICES_MAX bytes) and returns it; NULL
   * when the row has none or its choices are a string. */
  const char *(*choices_of)(char *buf, size_t len);
  /* Checks (and may convert and store) the value once the kind has stored
   * it; false with why (a usage error). out is the command's struct. A row
   * with choices and a check: the check alone decides (--algo takes an
   * alias its choices do not list). */
  bool (*check)(void *out, const char *v, char *why, size_t len);
  const char *help; /* one line, or lines joined by '\n' */
  bool comma_list;  /* the value is items joined by commas: an empty item is a usage error */
} cf_opt;
enum { CF_OPT_CHOICES_MAX = 256 };
/* o's choices ("a|b|c"), from its string or its table (into buf of
 * CF_OPT_CHOICES_MAX bytes); NULL when it has none. */
const char *cf_opt_choices(const cf_opt *o, char *buf);
typedef struct cf_command {
  const char *name;       /* "run", "bench mmrs": as typed after collfuse */
  const char *args;       /* positional arguments in the synopsis ("FILE"); NULL: none */
  int min_args, max_args; /* how many (max -1: any) */
  const char *missing;    /* the usage error when fewer are given ("no input file") */
  size_t args_field;      /* offsetof the cf_opt_list that gets them */
  bool reads_graph;       /* FILE is a graph: help lists the input formats */
  const char *summary;    /* one line for the list of commands */
  const char *about;      /* prose between the synopsis and the options */
  const cf_opt *opts;     /* ends with a row whose name is NULL */
  const char *after;      /* prose after the options, or NULL */
  int (*run)(cf_context *ctx, int argc, char **argv); /* argv after the name */
} cf_command;
enum { CF_OPTS_HELP = -1 }; /* cf_opts_parse printed the help: exit 0 */
/* Parse argv (after the command's name) into out, whose fields the table
 * names: 0, CF_OPTS_HELP when -h/--help was given (help printed), or the
 * exit code of a usage error (printed, with a suggestion for a mistyped
 * option). Call cf_opts_free(c, out) after either. */
int cf_opts_parse(const cf_command *c, int argc, char **argv, void *out);
void cf_opts_free(const cf_command *c, void *out);
void cf_opts_help(const cf_command *c, FILE *f);
/* The words of text from column col, wrapped at 80 columns with indent. */
void cf_opts_wrap(FILE *f, const char *text, int col, int indent);
/* Checks of values the tables share: --target, --passes, --split, --cost. */
bool cf_opt_check_target(void *out, const char *v, char *why, size_t len);
bool cf_opt_check_passes(void *out, const char *v, char *why, size_t len);
bool cf_opt_check_split(void *out, const char *v, char *why, size_t len);
bool cf_opt_check_cost(void *out, const char *v, char *why, size_t len);
/* --algo's choices, read off the algorithm table (executor/algo.h): auto
 * and every algorithm (run), or auto and collfuse's own (bench allreduce). */
const char *cf_opt_algo_choices(char *buf, size_t len);
const char *cf_opt_algo_choices_own(char *buf, size_t len);
/* --algo's check (cf_option_algo: a name or an alias), with and without
 * the transport's own rows; the row's choices_of lists the names. */
bool cf_opt_check_algo(void *out, const char *v, char *why, size_t len);
bool cf_opt_check_algo_own(void *out, const char *v, char *why, size_t len);
/* The commands: collfuse.c (check, compile, dot), run.c, ranktable.c, launch.c, and
 * bench.c with the bench subcommands (cf_bench_commands, NULL-terminated). */
extern const cf_command cf_command_check, cf_command_compile, cf_command_dot, cf_command_run,
    cf_command_ranktable, cf_command_launch, cf_command_bench_compile, cf_command_bench_reduce,
    cf_command_bench_allreduce, cf_command_bench_fusion, cf_command_bench_mmrs;
extern const cf_command *const cf_commands[];       /* collfuse.c: every command, in help order */
extern const cf_command *const cf_bench_commands[]; /* bench.c: the benchmarks */
/* tool.c: what collfuse does (the formats it reads), one paragraph for
 * `collfuse --help` and the man page; and what '-' means as a file. */
void cf_tool_about(char *text, size_t len);
extern const char cf_tool_std_note[];

/* tool.c: shared by the commands */
enum { EXIT_INVALID = 1, EXIT_USAGE = 2, EXIT_RUNTIME = 3 };
int cf_tool_exit_code(cf_status st);
/* The command running ("run", "bench fusion"), for messages; set by main. */
extern const char *cf_tool_command;
/* Print the context's message and return the exit code of st. A usage error
 * (CF_ERR_USAGE) reads as cf_tool_usage's: "collfuse CMD: MESSAGE" and the
 * hint; a message that names no file reads "collfuse CMD: error: MESSAGE". */
int cf_tool_fail(cf_context *ctx, cf_status st);
/* "collfuse CMD: <fmt with arg>" + a hint; returns EXIT_USAGE. */
int cf_tool_usage(const char *cmd, const char *fmt, const char *arg);
/* spawn.c: start n processes as the ranks of a shm world (each child gets
 * COLLFUSE_RANK, COLLFUSE_WORLD_SIZE and COLLFUSE_JOB and returns -1, to go
 * on with the command as that rank); the parent waits for them all and
 * returns the exit code of the command (cmd: its name in messages). */
int cf_tool_spawn_ranks(const char *cmd, int n);
/* cf_graph_load, where "-" is standard input, read once however often it is
 * loaded (`run -` compiles the graph twice); cf_tool_stdin_free at exit. */
cf_status cf_tool_load(cf_context *ctx, const char *path, cf_graph **out);
void cf_tool_stdin_free(void);
/* Print one line per foreign op type g's reader imported as Opaque on
 * stderr, "FILE:LINE: warning: ..." (error: when strict); returns
 * EXIT_INVALID when strict and there is one, else 0. */
int cf_tool_opaque(const cf_graph *g, bool strict);
/* The --strict row, for a command whose struct has bool field f. */
#define CF_OPT_STRICT(f)                                                                            \
  {"--strict", NULL, NULL, CF_OPT_FLAG, (f),                                                        \
   .help = "foreign ops imported as Opaque are errors (exit 1), not warnings"}
/* progress.c: the phase record every command runs with (ctx->progress)
 * and, when standard error is a terminal, the thread that draws the
 * progress line; stop erases the line and frees the record. */
cf_status cf_tool_progress_start(cf_context *ctx);
void cf_tool_progress_stop(cf_context *ctx);
void cf_tool_progress_quiet(void); /* --quiet: no line from now on */
/* Before the command's own output (either stream, which may share the
 * terminal): the line goes, and comes back only with the next phase. */
void cf_tool_progress_erase(void);
/* The phases so far with their seconds (the running one ends): how many. */
int cf_tool_phases(cf_context *ctx, const char **names, double *secs, int max);
bool cf_opt_check_quiet(void *out, const char *v, char *why, size_t len);
/* The --quiet row, for a command whose struct has bool field f. */
#define CF_OPT_QUIET(f)                                                                             \
  {"--quiet", NULL, NULL, CF_OPT_FLAG, (f), .check = cf_opt_check_quiet,                           \
   .help = "no progress line on standard error (shown on a terminal\n"                             \
           "once a phase takes over a second)"}
/* The --json row of a command that prints one JSON object of its results,
 * for a command whose struct has bool field f. */
#define CF_OPT_JSON(f) {"--json", NULL, NULL, CF_OPT_FLAG, (f), .help = "one JSON object on stdout"}
/* timeline.c: what a run's trace says (exposed communication, overlap,
 * each plan collective's start, run and wait), over the iterations from
 * first_iter on: as `run -v` lines prefixed who, into cJSON object obj as
 * "timeline" (run --json), and the mean over ranks of the exposed
 * milliseconds per iteration (-1: none). */
struct cf_plan;
void cf_tool_timeline_print(FILE *f, const char *who, const cf_trace *t, const struct cf_plan *p,
                            int first_iter);
void cf_tool_timeline_json(void *obj, const cf_trace *t, const struct cf_plan *p, int first_iter);
double cf_tool_exposed_ms(const cf_trace *t, int first_iter, int n_colls);
/* `dot --trace FILE.json`: per node of g the mean ms per rank and
 * iteration a run's trace (the file) waited on it, -1 where it never did
 * (*out malloc'd); a trace that names none of g's collectives is a warning. */
cf_status cf_tool_trace_waits(cf_context *ctx, const char *path, const cf_graph *g, double **out);
/* A file argument as messages name it: "<stdin>" for "-". */
const char *cf_tool_name(const char *path);
/* "-" names standard input or output. */
bool cf_tool_is_std(const char *path);
/* The --max-memory row of a command whose struct has int64_t field f: a
 * size that replaces the memory the machine has available. */
#define CF_OPT_MAX_MEMORY(f)                                                                        \
  {"--max-memory", NULL, "SIZE", CF_OPT_SIZE, (f), 1, CF_MAX_MEMORY,                                \
   .help = "refuse (exit 1) what needs more memory than SIZE (512M, 4G;\n"                         \
           "default: what the machine has available, MemAvailable or\n"                            \
           "the cgroup's limit)"}

/* The --profile row of a command whose struct has const char * field f:
 * the measured profile to read (api/profile.c; docs/executor.md). */
#define CF_OPT_PROFILE(f)                                                                          \
  {                                                                                                \
    "--profile", NULL, "FILE", CF_OPT_STR, (f),                                                    \
        .help = "the measured profile auto and --split auto read (default:\n"                      \
                "$COLLFUSE_PROFILE, else $XDG_CONFIG_HOME/collfuse/profile or\n"                   \
                "~/.config/collfuse/profile when there; none: the built-in rules)"                 \
  }

/* testctl.c (test builds; testctl_off.c otherwise): the one entry to the
 * driver's fault injection, as SQLite's sqlite3_test_control. Its
 * arguments by op:
 *   RUN (cf_context *ctx, cf_plan *p, cf_world *w, const cf_inputs *in,
 *     cf_run_result *res, cf_status *st): when the environment asks for
 *     faults, run p as cf_exec_run_world on w (NULL: a threads world) wrapped
 *     in a world that injects them (executor/fault.h), *st its status, and
 *     return 1; else 0 (the caller runs p itself)
 *   FAILED (int me, double timeout_s): this MPI process's run failed
 *   CORRUPT (const cf_graph *ref_g, cf_tensor *got, int ranks, int n_ref):
 *     the outputs before --verify
 *   VERIFY_WINDOW (int64_t *out): --verify's window (0: its own)
 * Returns 0 unless an op says otherwise; without tests every op is a no-op. */
typedef enum cf_testctl {
  CF_TESTCTL_RUN,
  CF_TESTCTL_FAILED,
  CF_TESTCTL_CORRUPT,
  CF_TESTCTL_VERIFY_WINDOW
} cf_testctl;
int cf_test_control(cf_testctl op, ...);

/* run.c: `collfuse run` (docs/cli.md); returns the exit code. */
int cf_cmd_run(cf_context *ctx, int argc, char **argv);

/* ranktable.c: HCCL rank tables (versions 1.0 and 1.2). */
typedef struct cf_rank_server {
  char *server_id, *host; /* host: host_ip when given, else server_id */
  int devices;            /* its devices: OpenMPI slots */
} cf_rank_server;
typedef struct cf_rank_entry {
  int server;    /* index into servers; -1 while unassigned */
  int device_id; /* the device's id on its server */
  int local;     /* its position among the server's devices (rankfile slot) */
} cf_rank_entry;
typedef struct cf_rank_table {
  char version[8];
  int n_servers, n_ranks;
  cf_rank_server *servers;
  cf_rank_entry *ranks; /* [rank_id], rank_ids are 0..n_ranks-1 */
} cf_rank_table;
/* Parse and check the table at path; false with what is wrong in err (and
 * the line in *line for JSON syntax errors, else 0). */
bool cf_ranktable_load(const char *path, cf_rank_table *t, int *line, char *err, size_t len);
void cf_ranktable_free(cf_rank_table *t);
/* host names this machine (hostname, loopback or an interface address). */
bool cf_ranktable_host_is_local(const char *host, const char *hostname);
/* `collfuse ranktable FILE.json`: hostfile and rankfile; the exit code. */
int cf_cmd_ranktable(cf_context *ctx, int argc, char **argv);

#endif
