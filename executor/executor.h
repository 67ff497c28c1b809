/* executor.h - collfuse's executor as the driver, the benchmarks and the
 * tests use it: data (fill.c), compute ops (compute.c), plans (plan.c) and
 * runs (exec.c) on a world of ranks, and a run's memory (memory.c).
 *
 * The executor's other headers split it by audience: runtime.h is the
 * contract a device backend, transport or world implements;
 * backends/backends.h and transports/transports.h are the ones collfuse
 * has; algo.h the collective algorithms; plan.h the private plan and test
 * hooks. What only checking needs (the float64 reference, verify, .npy) is
 * check/check.h, outside the library.
 */
#ifndef COLLFUSE_EXECUTOR_H
#define COLLFUSE_EXECUTOR_H

#include "backends/backends.h"
#include "runtime.h"
#include "transports/transports.h"

/* ================= fill.c: deterministic data ================= */

/* Pseudo-random, reproducible data: element i depends only on (seed, rank,
 * name, i), never on the buffer layout or the thread that writes it.
 * Floats are uniform in [-1, 1) (never all zeros; float16/bfloat16 values
 * are exactly representable), signed integers in [-8, 8), uint8 in [0, 16):
 * small enough that sums and products over a few ranks stay exact in the
 * type, large enough that a wrong answer shows. */
void cf_fill_random(void *data, cf_dtype dt, int64_t count, uint64_t seed, int rank,
                    const char *name);
/* An Input's or Constant's contents by its `init` (random, default for
 * Input; zeros; ones; iota: element i = i converted to the type) and, for a
 * Constant, `value` (every element = value converted). */
void cf_fill_node(const cf_node *n, void *data, cf_dtype dt, int64_t count, uint64_t seed,
                  int rank);
/* Elements first .. first + count - 1 of what cf_fill_random / cf_fill_node
 * write, into data[0 .. count): any range of a tensor, bitwise as the whole. */
void cf_fill_random_at(void *data, cf_dtype dt, int64_t first, int64_t count, uint64_t seed,
                       int rank, const char *name);
void cf_fill_node_at(const cf_node *n, void *data, cf_dtype dt, int64_t first, int64_t count,
                     uint64_t seed, int rank);
/* Element i of a buffer as double, and a double stored into element i
 * (round to nearest even for float16/bfloat16, saturating float -> int
 * casts, like numpy's astype on in-range values). */
double cf_load_f64(const void *data, cf_dtype dt, int64_t i);
void cf_store_f64(void *data, cf_dtype dt, int64_t i, double v);
/* Integer element i as int64 (integer dtypes only). */
int64_t cf_load_i64(const void *data, cf_dtype dt, int64_t i);
void cf_store_i64(void *data, cf_dtype dt, int64_t i, int64_t v); /* wraps */

/* ================= compute.c: compute ops ================= */

/* Run compute node n (Constant, MatMul, QuantMatMul, Add, Sub, Mul, Cast,
 * Reshape, Opaque) of graph g for one rank: in[0..n->n_in) are its operands
 * (already computed), out[0..n_out) its preallocated outputs with dtype,
 * shape and count set. MatMul: OpenBLAS sgemm/dgemm for float32/float64,
 * float16/bfloat16 through float32, integers exactly (int8 accumulates in
 * int32, wrapping as the type does). QuantMatMul: int8 x int8 -> int32 (+
 * int32 bias), then the codegen QUANT epilogue. Add/Sub/Mul broadcast like
 * numpy. Opaque fills its outputs with cf_fill_random(seed, rank, name of
 * the node + ":" + port). Thread-safe: ranks call it concurrently. */
#define CF_COMPUTE_DETERMINISTIC 1u /* flags: row-invariant float products (slower than BLAS) */
cf_status cf_compute_run(cf_context *ctx, const cf_graph *g, const cf_node *n, const cf_tensor *in,
                         cf_tensor *out, int rank, uint64_t seed, unsigned flags);

/* The product of a MatMul-like node n on blocks of rows (the fused
 * MatMul+collective ops pipeline over them): out (r, n) = x1 (r, k) @ x2
 * (k, n) with MatMul's rules, plus bias (n) on every row when given; with
 * x1_scale (r, 1) and x2_scale (1, n) the quantized form (int8 x int8 ->
 * int32 + int32 bias -> QUANT epilogue -> out's bfloat16/float16). The
 * tensors' shapes describe the blocks; n only names the node in errors.
 * With CF_COMPUTE_DETERMINISTIC a row's result never depends on the rows
 * computed with it. */
cf_status cf_compute_product(cf_context *ctx, const cf_graph *g, const cf_node *n,
                             const cf_tensor *x1, const cf_tensor *x2, const cf_tensor *x1_scale,
                             const cf_tensor *x2_scale, const cf_tensor *bias, cf_tensor *out,
                             unsigned flags);

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
  const struct cf_run_hooks *hooks; /* tests only (plan.h); NULL in production */
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
/* cf_exec_run_world on a threads world of p's ranks made for this run. */
cf_status cf_exec_run(cf_context *ctx, cf_plan *p, const cf_inputs *in, cf_run_result *res);
void cf_run_result_free(cf_run_result *res);
/* Whether a run of p leaves its outputs in the arenas (no copies): asked for
 * (outputs_in_arena), on a host device, and no iteration after the one the
 * outputs come from overwrites them (an in-place plan run more than once
 * returns its first iteration's outputs: those are copied). */
bool cf_run_outputs_in_arena(const cf_plan *p);

#endif /* COLLFUSE_EXECUTOR_H */
