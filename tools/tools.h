/* tools.h - internals of the collfuse command-line driver. */
#ifndef COLLFUSE_TOOLS_H
#define COLLFUSE_TOOLS_H

#include "../ir/ir.h"
#include "../passes/passes.h"

/* json_report.c: the `compile --json` object (SPEC section 4), printed on
 * stdout. before is the collective count of the input graph. */
cf_status cf_report_compile_json(const cf_graph *g, int collectives_before,
                                 const cf_pass_timing *timing, int n_timing);
/* Bucket reason text for a collective left after fusion. */
const char *cf_report_reason(const cf_node *n, char *buf, size_t len);
/* bench.c: `collfuse bench compile [--sizes N,...] [--json]`; returns the
 * exit code. */
int cf_bench_compile(int argc, char **argv);
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
/* bench_cuda.c: `bench reduce --device cuda` and `bench allreduce --device
 * cuda` (the CUDA backend against the GPU's copy rate); return the exit
 * code (1 without a CUDA driver). True when argv asks for --device cuda. */
bool cf_bench_wants_cuda(int argc, char **argv);
int cf_bench_reduce_cuda(cf_context *ctx, int argc, char **argv);
int cf_bench_allreduce_cuda(cf_context *ctx, int argc, char **argv);
/* bench_util.c: what the bench subcommands share. */
double cf_bench_now_s(void);                /* CLOCK_MONOTONIC seconds */
double cf_bench_median(double *v, int n);  /* sorts v; 0 when n <= 0 */
double cf_bench_gbps(int64_t bytes, double us); /* 1e9 bytes/s; 0 when us <= 0 */
/* "8B", "64K", "256M", "1G": the largest unit that divides b. */
void cf_bench_size_text(int64_t b, char *buf, size_t len);
/* "8,64K,1MiB,256M" (K/M/G = KiB/MiB/GiB): at most max sizes, each > 0, a
 * multiple of 4 and at most limit bytes; false otherwise. */
bool cf_bench_parse_sizes(const char *v, int64_t limit, int64_t *sizes, int max, int *n);
/* An option's integer value in [lo, hi] (whole string); false otherwise. */
bool cf_bench_parse_int(const char *v, long lo, long hi, int *out);
/* bench_fusion.c: `collfuse bench fusion FILE [--ranks N] [--iters K]
 * [--warmup W] [--split SPEC].. [--quick] [--json]`: the graph unfused, fused and split
 * several ways, against one flat AllReduce of all its bytes; returns the
 * exit code. */
int cf_bench_fusion(cf_context *ctx, int argc, char **argv);
/* bench_mmrs.c: `collfuse bench mmrs [--ranks N,..] [--shapes MxKxN,..]
 * [--dtypes D,..] [--iters K] [--warmup W] [--rounds R] [--comm-turn T]
 * [--quick] [--json]`: the fused MatmulReduceScatter against MatMul then
 * ReduceScatter, and each part alone; returns the exit code. */
int cf_bench_mmrs(cf_context *ctx, int argc, char **argv);

/* collfuse.c: shared by the commands */
enum { EXIT_INVALID = 1, EXIT_USAGE = 2, EXIT_RUNTIME = 3 };
int cf_tool_exit_code(cf_status st);
/* Print the context's message and return the exit code of st. */
int cf_tool_fail(cf_context *ctx, cf_status st);
/* "collfuse CMD: <fmt with arg>" + a hint; returns EXIT_USAGE. */
int cf_tool_usage(const char *cmd, const char *fmt, const char *arg);
/* Option with a value: "--opt V" or "--opt=V"; "" when V is missing. */
const char *cf_tool_opt(int argc, char **argv, int *i, const char *name);
/* --help/-h among the arguments: print text (+ targets, passes), true. */
bool cf_tool_help(int argc, char **argv, const char *text);
/* --max-memory V into *out (a size: 512M, 4G); 0, or the usage error's
 * exit code. */
int cf_tool_max_memory(const char *cmd, const char *v, int64_t *out);

/* run.c: `collfuse run` (SPEC section 4); returns the exit code. */
extern const char cf_help_run[];
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
extern const char cf_help_ranktable[];
int cf_cmd_ranktable(cf_context *ctx, int argc, char **argv);

/* Base collective name of a node ("AllReduce" for FusedAllReduce). */
const char *cf_report_base_op(cf_op op);

#endif
