/* executor.h - collfuse's executor as the driver, the benchmarks and the
 * tests use it: plans (plan.c) and runs (exec.c) on a world of ranks, and a
 * run's memory (memory.c), with what they are described in: data and
 * compute ops on the host (host.h), the algorithm table (algo.h) and the
 * device backends (backends/backends.h).
 *
 * The executor's other headers split it by audience: runtime.h is the
 * contract a device backend, transport or world implements;
 * backends/backends.h and transports/transports.h are the ones collfuse
 * has (a caller that makes a world includes transports.h itself);
 * algorithms.h is what an algorithm is written with; plan.h the private
 * plan; fault.h the tests' fault injection (test builds only). What only
 * checking needs (the float64 reference, verify, .npy) is check/check.h,
 * outside the library.
 */
#ifndef COLLFUSE_EXECUTOR_H
#define COLLFUSE_EXECUTOR_H

#include "algo.h"
#include "backends/backends.h"
#include "host.h"
#include "runtime.h"

/* ================= plan.c, exec.c: plans and runs ================= */

typedef struct cf_plan cf_plan; /* private: plan.h */

/* The inputs of a run: for every Input node of the graph (by name), one
 * tensor per rank: data[rank * n + k] is Input names[k] on that rank. */
typedef struct cf_inputs {
  int n, ranks;
  const char **names;
  cf_tensor *data;
  /* Caller buffers (the embedding API, api/api.c). borrow: a run may
   * read data[] in place where cf_plan_binds says so (the data must stay
   * unchanged until the run returns); else it copies them into its arena.
   * outputs (optional): caller-owned buffers [rank * n_outputs + j] for the
   * j-th Output node (graph order), of exactly its dtype and count, or NULL
   * data for an output the caller does not want. A run produces an Output's
   * value straight into its buffer where cf_plan_binds says so and copies
   * the rest there at the end; res->outputs then point at these buffers. */
  bool borrow;
  const cf_tensor *outputs;
  /* Bucket buffers (optional, host devices): buckets[(rank * n_colls + c) * 2
   * + io] is plan coll c's whole input (io 0) or output (io 1) bucket on that
   * rank (plan.h cf_pcoll.bucket_bytes), or NULL to keep it in the arena. A
   * bound bucket's members live there at their offsets: an input whose
   * data[] is that view, or an Input not given at all, is read where it lies
   * (not filled from the seed); an output whose buffer is that view is
   * produced there. Anything else is copied in or out as without buckets. */
  void *const *buckets;
} cf_inputs;

typedef struct cf_run_options {
  int ranks;         /* world size; 0: the graph's world_size */
  int iters, warmup; /* timed and untimed iterations */
  uint64_t seed;
  bool deterministic;
  double timeout_s; /* every wait; default 60 */
  cf_algo_req algo; /* a policy (auto) or a forced algorithm */
  int verbose;
  /* The transport copies into staging (MPI): size the algorithms' scratch
   * for it. False for the threads transport, which reads in place. */
  bool staged;
  /* Every bucket's input and output buffers are given by each run
   * (cf_inputs.buckets, all of them on every rank): the arena keeps no room
   * for them. */
  bool external_buckets;
  /* Where buffers and kernels live: the CPU (default) or CUDA GPUs (ranks
   * spread over every visible GPU: cf_device_cuda_create(ctx, -1)). */
  cf_device_kind device;
  /* Every collective gets an output block of its own (no AllReduce in
   * place): what plans were before in-place collectives, for comparison. */
  bool out_of_place;
  /* The caller lends its Input buffers (cf_inputs.borrow, the C API): a
   * plain AllReduce of an Input stays out of place, so the Input is read
   * where it lies and the result goes to the caller's output, no copy. */
  bool lent_inputs;
  /* The results stay where the run produced them (cf_run_outputs_in_arena):
   * res->outputs point into each rank's arena, which the result keeps until
   * cf_run_result_free (the plan must outlive the result); no copy. */
  bool outputs_in_arena;
  /* A run of one rank per process (a world of processes: the C API's
   * cf_executable_run_rank, whose calls repeat) leaves the rank with the
   * plan for the next run: its arena, which the next run reuses as a later
   * iteration would (inputs copied in again, nothing cleared), its context
   * and its communication thread; cf_plan_destroy frees them. A plan of
   * collectives only then runs on the caller's thread (no thread started
   * or joined per run), and where every message carries its descriptor
   * (collfuse's own algorithms) a run after the first exchanges no
   * fingerprints and meets at no barrier: a rank that runs something else
   * is caught at the first message, exit 3 naming both ranks. Saves every
   * call allocating, clearing and faulting in the arena, two threads and
   * four rounds of messages. */
  bool keep_rank;
} cf_run_options;

typedef struct cf_run_result {
  double time_ms_median;        /* per iteration, over iters */
  double *time_ms;              /* every timed iteration (malloc'd) */
  int64_t collectives_executed; /* per rank per iteration */
  int64_t peak_bytes;           /* memory plan peak per rank */
  int ranks, n_outputs;
  cf_tensor *outputs; /* [rank * n_outputs + j], j-th Output node */
  const char **output_names;
  bool caller_outputs; /* outputs[].data are cf_inputs.outputs' buffers (not freed) */
  /* memcpys of whole values this process's ranks made, over every iteration:
   * caller data into the arena or a bucket, values into a bucket (plan
   * COPY steps), results out to the caller's buffers; and their bytes */
  int64_t copies, copy_bytes;
  /* the arenas outputs[] point into (cf_run_options.outputs_in_arena), per
   * rank of this process, freed by cf_run_result_free through arena_dev */
  void **arenas;
  cf_device *arena_dev;
} cf_run_result;

/* ================= memory.c: a run's memory against the machine's ================= */

/* Bytes this process can still get: the least of MemAvailable
 * (/proc/meminfo) and its cgroup's room (v2 memory.max - memory.current,
 * v1 memory.limit_in_bytes - memory.usage_in_bytes, each plus the inactive
 * file cache, over its cgroup and those above); -1 when neither is known.
 * *source (optional) names the one that set it ("MemAvailable", "the
 * cgroup's memory limit"). */
int64_t cf_mem_available(const char **source);
/* Host bytes one rank holds while plan p runs once: its arena (on a host
 * device; a GPU's is device memory) and the copies of its outputs unless
 * the caller gives output buffers. */
int64_t cf_plan_run_bytes(const cf_plan *p, bool caller_outputs);
/* Address space a run of p with `ranks` rank threads in this process maps
 * beyond the bytes it holds: the threads' stacks and malloc arenas and,
 * when the plan calls BLAS on the CPU, OpenBLAS's buffers (one per calling
 * rank and per other thread of a call). For cf_mem_need.reserved. */
int64_t cf_plan_reserved_bytes(const cf_plan *p, int ranks);
/* Bytes per rank of g's Input nodes (op CF_OP_INPUT) or of what its Output
 * nodes read (CF_OP_OUTPUT). */
int64_t cf_graph_io_bytes(const cf_graph *g, cf_op op);

/* What a run will hold, for cf_mem_check. */
typedef struct cf_mem_need {
  const char *file;        /* the graph, for the message (may be NULL) */
  int ranks;               /* rank threads in this process (threads backend) */
  int world;               /* the run's ranks when this checks fewer (1: "each of its N ranks") */
  int64_t per_rank;        /* host bytes each rank holds */
  int64_t shared;          /* bytes held once besides (e.g. the reference), 0: none */
  const char *shared_what; /* what shared is for ("--verify's float64 reference") */
  int processes;           /* MPI: this host's processes, each per_rank + shared; 0: threads */
  int rank;                /* MPI: this process's rank (for the message) */
  const char *hint;        /* what to do instead (NULL: none) */
  const char *who;         /* subject and verb instead of "N ranks need" (no breakdown) */
  int64_t reserved; /* address space mapped beyond the bytes held (cf_plan_reserved_bytes):
                     * counted against the address-space limit (RLIMIT_AS) only */
} cf_mem_need;
/* CF_OK when need fits in limit bytes (limit <= 0: cf_mem_available; when
 * that is unknown, CF_OK) and, under an address-space limit (RLIMIT_AS),
 * its bytes and need->reserved fit in what that limit leaves (else "FILE:
 * error: 1 rank needs 590.2 MiB of address space (...), 150.3 MiB left
 * under the address-space limit (ulimit -v: 390.6 MiB); raise the limit"). Else CF_ERR_INVALID with the sizes: "FILE: error:
 * 4 ranks need 34.3 GiB (8.6 GiB per rank), 21.9 GiB available
 * (MemAvailable); HINT", limit_what naming an explicit limit ("--max-memory":
 * "512.0 MiB allowed by --max-memory"). */
cf_status cf_mem_check(cf_context *ctx, const cf_mem_need *need, int64_t limit,
                       const char *limit_what);

/* Plan compiled graph g (verified, inferred, passes already run) for opt. */
cf_status cf_plan_build(cf_context *ctx, const cf_graph *g, const cf_run_options *opt,
                        cf_plan **out);
int64_t cf_plan_peak_bytes(const cf_plan *p);
/* Caller buffers (cf_inputs.borrow / .outputs): true when a run uses the
 * caller's buffer of Input or Output node `node` in place (an Input read
 * where it lies; an Output's value produced straight into it), false when
 * it copies (the value sits in a fused bucket, feeds an Output directly
 * from an Input or Constant, or an earlier Output already has it). */
bool cf_plan_binds(const cf_plan *p, int node);
/* Buckets (cf_inputs.buckets): the plan's collective count, collective c's
 * node, and its input (io 0) / output (io 1) bucket's bytes, 0 when c is
 * no bucket (a plain or fused MatMul collective). */
int cf_plan_colls(const cf_plan *p);
int cf_plan_coll_node(const cf_plan *p, int c);
int64_t cf_plan_bucket_bytes(const cf_plan *p, int c, int io);
/* The bucket slot (2 * coll + io) whose buffer holds output port of node,
 * with its byte offset in *off; -1 when none. */
int cf_plan_value_bucket(const cf_plan *p, int node, int port, int64_t *off);
void cf_plan_destroy(cf_plan *p);

/* Run p on world w's ranks in this process with inputs in (NULL: every
 * Input filled by cf_fill_node with opt->seed): one thread per rank when w
 * holds every rank here (threads), else this process's one rank (MPI),
 * whose outputs alone are filled in res and whose own iteration times are
 * recorded; a failure is also signalled to the other ranks through the
 * transport's abort. Outputs of the last iteration go to res; free with
 * cf_run_result_free. */
cf_status cf_exec_run_world(cf_context *ctx, cf_plan *p, cf_world *w, const cf_inputs *in,
                            cf_run_result *res);
/* The start-up of a new executable on a world of processes (the C API's
 * first cf_executable_run_rank of graph g), before anything else of it:
 * this process's rank sends every peer g's fingerprint on the channels the
 * collectives use, in a message with no descriptor, and reads theirs. A
 * peer that repeats a kept executable meanwhile (whose runs send nothing
 * before their first collective message: keep_rank) meets it there, and the
 * descriptor check fails on both sides, exit 3 naming both ranks; without
 * it the two waited in different places (the start-up's cf_world_max, the
 * collective's next message) until the timeout. A fingerprint that differs
 * fails every rank the same way. Nothing on a world of threads. Errors go
 * to ctx. */
cf_status cf_exec_meet(cf_context *ctx, cf_world *w, const cf_graph *g);
/* Before p first runs on world w, by every process with the same plan:
 * when p runs the transport's own collectives (a forced native row such as
 * --algo mpi-native, or the policy of MPI over a network), the world makes
 * what they need for p's groups (cf_world_native_groups, in plan order);
 * otherwise nothing. Errors go to ctx. */
cf_status cf_exec_prepare(cf_context *ctx, cf_world *w, const cf_plan *p);
/* This process is one of `processes` on its host (an MPI job's), which
 * share the cores: its BLAS calls get cores/processes threads (at least 1)
 * for the rest of the process, unless OPENBLAS_NUM_THREADS set them. */
void cf_exec_blas_share(int processes);
/* cf_exec_run_world on a threads world of p's ranks made for this run. */
cf_status cf_exec_run(cf_context *ctx, cf_plan *p, const cf_inputs *in, cf_run_result *res);
void cf_run_result_free(cf_run_result *res);
/* Whether a run of p leaves its outputs in the arenas (no copies): asked for
 * (outputs_in_arena), on a host device, and no iteration after the one the
 * outputs come from overwrites them (an in-place plan run more than once
 * returns its first iteration's outputs: those are copied). */
bool cf_run_outputs_in_arena(const cf_plan *p);

#endif /* COLLFUSE_EXECUTOR_H */
