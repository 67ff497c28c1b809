/* plan.h - the executor's private plan: what plan.c builds and exec.c and
 * fused_matmul.c run (steps, values, collectives), and fault.c wraps for
 * the tests. Outside executor/ only `run -v` and the tests read it.
 *
 * A compiled graph becomes a plan: one schedule of steps that every rank
 * runs (compute ops, collective start, collective wait), a memory plan that
 * gives every value a buffer (fused buckets are one contiguous buffer whose
 * members are views at their offsets, so producers write into the bucket
 * and consumers read from it, with no pack/unpack copies), and the kernels
 * the collectives need, resolved before any rank starts.
 */
#ifndef COLLFUSE_EXECUTOR_PLAN_H
#define COLLFUSE_EXECUTOR_PLAN_H

#include "executor.h"

typedef enum cf_step_kind {
  CF_STEP_COMPUTE, /* a compute node on this rank */
  CF_STEP_COPY,    /* a value into its place in a bucket it could not be produced in */
  CF_STEP_START,   /* hand a collective to the rank's communication thread */
  CF_STEP_WAIT,    /* wait for it before its first consumer */
  CF_STEP_FUSED    /* a fused MatMul+collective op, pipelined (fused_matmul.c) */
} cf_step_kind;

typedef struct cf_step {
  cf_step_kind kind;
  int node;         /* COMPUTE */
  int coll;         /* START, WAIT: index into plan colls */
  int64_t src, dst; /* COPY: byte addresses in the rank's arena */
  int64_t bytes;    /* COPY */
  int val;          /* COPY: the value copied (src is its arena address) */
} cf_step;

typedef struct cf_pvalue {
  int64_t addr; /* byte offset in the rank's arena (plus cf_plan_value_shift); -1 when not placed */
  cf_dtype dtype;
  cf_shape shape;
  int64_t count, bytes;
  bool own; /* alone in its buffer (no bucket around it): may live in a caller's buffer */
  int bucket;   /* 2 * coll + io when it lies in that bucket's input (io 0) or output (io 1)
                 * buffer (a run may be given that buffer: cf_inputs.buckets), else -1 */
  int64_t boff; /* its byte offset there */
  /* A view at the rank's block of a collective's buffer (an in-place
   * AllGather's input, an in-place ReduceScatter's output): on the rank at
   * position q of plan coll stride_coll's group it lies q * rank_stride
   * bytes past addr. 0 for every other value. */
  int64_t rank_stride;
  int stride_coll;
} cf_pvalue;

typedef struct cf_pcoll {
  int node;
  cf_coll_desc desc; /* seq is per group; same on every rank */
  const int *ranks;  /* group's world ranks, part after part (graph arena or plan) */
  int n;             /* ranks in one part: the communicator size */
  int n_parts;       /* a partitioned group's parts; each rank runs with its own */
  int64_t in_addr, out_addr, scratch_addr;
  size_t scratch_bytes;
  cf_coll_seg *segs;
  int n_segs;
  cf_a2a_part *a2a;         /* AllToAll's array form (cf_coll_call), owned */
  int n_a2a;
  int *pairs;              /* CollectivePermute (cf_coll_call), owned */
  int algo; /* resolved row of cf_algo_table; fused MatMul ops: -1 (each chunk resolves the
             * plan's opt.algo) */
  int in_val, out_val; /* the value the call reads / writes when its buffer is exactly that value,
                          else -1 */
  bool inline_ok;      /* START is followed by its WAIT: run on the rank thread */
  int64_t bucket_bytes[2]; /* a bucket (several members): its input and output buffers'
                            * bytes, which a run may be given whole; 0 and 0 otherwise */
  /* fused MatMul+collective ops: desc is one chunk's collective (count of
   * the whole product), chunks of chunk_rows rows, double-buffered stage */
  bool fused_mm;
  int chunk_algo[2]; /* the rows a full chunk and the last chunk resolve to (for the ranks'
                      * comparison before the first iteration; fused_matmul.c resolves them
                      * again per call) */
  int chunks;
  int64_t chunk_rows;
  int64_t stage_addr, stage_bytes; /* two buffers of stage_bytes */
} cf_pcoll;

struct cf_plan {
  cf_context *ctx;
  const cf_graph *g;
  cf_run_options opt;
  int ranks;
  int *val_base; /* node -> first value index */
  cf_pvalue *vals;
  int n_vals;
  cf_step *steps;
  int n_steps;
  cf_pcoll *colls;
  int n_colls;
  int *world_ranks;       /* 0..ranks-1 for the world group */
  int64_t arena_bytes;    /* per rank: the peak of the memory plan */
  int64_t naive_bytes;    /* every value its own buffer (for -v) */
  int64_t live_bytes;     /* per rank: the most bytes of tensors live at one step, each in a buffer
                           * of its own (no bucket, nothing in place): what the plan is measured by */
  int n_copies;           /* COPY steps per iteration */
  int64_t copy_bytes;     /* the bytes they copy */
  int n_in_place;         /* collectives whose output shares their input's block (desc.in_place) */
  bool overwrites_inputs; /* one of them reduces an Input in place: an iteration after the first
                           * runs on the one before's results; a run returns the first's outputs */
  char fingerprint[17];
  cf_device *dev; /* the CPU device, kernels prepared */
  bool abandoned; /* a run gave up on a rank stuck in a compute step (exec.c join_ranks): its
                   * thread may still use the plan, which cf_plan_destroy then leaves */
  bool *binds;    /* node -> cf_plan_binds */
  struct rank_run *solo; /* opt.keep_rank: this process's rank, kept from run to run (exec.c);
                          * cf_plan_destroy frees it with solo_free before the world goes */
  void (*solo_free)(struct rank_run *solo); /* exec.c's, set with solo: stops its threads */
};

/* exec.c: the BLAS threads each rank's GEMMs get with `ranks` rank threads
 * in this process: cores/ranks (at least 1), or OpenBLAS's setting for one
 * rank or when OPENBLAS_NUM_THREADS gave it. */
int cf_exec_blas_threads(int ranks);

/* Bytes past vals[v].addr where value v lies on world rank `rank` (0
 * unless it is a per-rank view, cf_pvalue.rank_stride). */
int64_t cf_plan_value_shift(const cf_plan *p, int v, int rank);

/* What a fused op needs of its rank (exec.c provides it). */
typedef struct cf_rank_io {
  cf_context *ctx;
  int rank;
  char *arena;
  void *const *vptr; /* value -> its buffer on this rank (arena or a caller's) */
  cf_device *dev;
  void *impl;
  /* queue call on the rank's communication thread; returns its ticket */
  uint64_t (*start)(void *impl, const cf_coll_call *call);
  cf_status (*wait)(void *impl, uint64_t ticket);
  /* run call on this thread after every call queued before it (a fused op
   * of one chunk has nothing to overlap: it runs as MatMul then the
   * collective would, with no hand-off) */
  cf_status (*run)(void *impl, const cf_coll_call *call);
  /* around each product (BLAS, which watches no deadline): the run gives up
   * a rank stuck in one after its timeout (exec.c join_ranks); NULL: none */
  void (*busy)(void *impl);
  void (*idle)(void *impl);
} cf_rank_io;

/* fused_matmul.c: run fused op plan coll c on one rank: the product of
 * chunk i+1 is computed while chunk i is reduce-scattered / all-reduced
 * (or, for AllGatherMatmul, chunk i+1 gathered while chunk i multiplies).
 * tmpl is the rank's call for c (group, scratch, algorithm). */
cf_status cf_fused_matmul_run(const cf_plan *p, int c, cf_rank_io *io, const cf_coll_call *tmpl);

/* plan.c: how many chunks a fused op's pipeline gets (the plan lays them
 * out; fused_matmul.c only runs them). The chunks for node n of rows rows
 * per block: comm_turn when set; else 1 when min_rows is 0, and otherwise
 * enough that each chunk's collective moves >= 512 KiB, at most 8, each of
 * >= min_rows rows. */
int cf_fused_matmul_chunks(const cf_node *n, int64_t rows, int64_t row_bytes, int64_t min_rows);
/* The cost model's question: can a chunk's collective run while the next
 * chunk multiplies, for a plan of opt on ranks ranks? Not on the CPU device
 * with the threads transport when the ranks' GEMMs take every core (the
 * default: each rank gets cores/ranks BLAS threads); yes on a GPU and under
 * MPI (where every process must decide alike, so local facts cannot). */
bool cf_fused_matmul_overlaps(const cf_run_options *opt, int ranks);
/* The rows an automatic chunk needs at the least for a fused op whose x1
 * has dtype dt: 0 (do not chunk) unless cf_fused_matmul_overlaps; 256 for
 * CPU products that convert x2 on every call (float16, bfloat16, int8);
 * else 32. */
int64_t cf_fused_matmul_min_rows(const cf_run_options *opt, int ranks, cf_dtype dt);

#endif /* COLLFUSE_EXECUTOR_PLAN_H */
