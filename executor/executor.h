/* executor.h - collfuse's executor (one internal header for executor/).
 *
 * A compiled graph becomes a plan: one schedule of steps that every rank runs
 * (compute ops, collective start, collective wait), a memory plan that gives
 * every value a buffer (fused buckets are one contiguous buffer whose
 * members are views at their offsets, so producers write into the bucket and
 * consumers read from it, with no pack/unpack copies), and the kernels the
 * collectives need, resolved before any rank starts.
 *
 * Runtime components are vtables (STYLE, ggml/UCC): a device backend owns
 * buffers and launches the generated reduction kernels; a transport moves
 * bytes between ranks with two-sided, in-order messages. The collective
 * algorithms (algo_*.c) are written only against these two interfaces, so
 * the threads transport (single copy: a receiver reads the sender's buffer
 * in place) and an MPI transport (a receiver gets a copy in its staging
 * buffer) run the same algorithms.
 */
#ifndef COLLFUSE_EXECUTOR_H
#define COLLFUSE_EXECUTOR_H

#include "../codegen/codegen.h"
#include "../ir/ir.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* ================= tensors ================= */

typedef struct cf_tensor {
  void *data;     /* host memory (CPU device), count * dtype size bytes */
  cf_dtype dtype;
  cf_shape shape;
  int64_t count;  /* elements */
} cf_tensor;

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
void cf_fill_node(const cf_node *n, void *data, cf_dtype dt, int64_t count, uint64_t seed, int rank);
/* Element i of a buffer as double, and a double stored into element i
 * (round to nearest even for float16/bfloat16, saturating float -> int
 * casts, like numpy's astype on in-range values). */
double cf_load_f64(const void *data, cf_dtype dt, int64_t i);
void cf_store_f64(void *data, cf_dtype dt, int64_t i, double v);
/* Integer element i as int64 (integer dtypes only). */
int64_t cf_load_i64(const void *data, cf_dtype dt, int64_t i);
void cf_store_i64(void *data, cf_dtype dt, int64_t i, int64_t v); /* wraps */
/* float <-> half/bfloat16 bits, round to nearest even, NaN stays NaN. */
float cf_f16_to_f32(uint16_t h);
uint16_t cf_f32_to_f16(float f);
float cf_bf16_to_f32(uint16_t h);
uint16_t cf_f32_to_bf16(float f);

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
cf_status cf_compute_product(cf_context *ctx, const cf_graph *g, const cf_node *n, const cf_tensor *x1,
                             const cf_tensor *x2, const cf_tensor *x1_scale,
                             const cf_tensor *x2_scale, const cf_tensor *bias, cf_tensor *out,
                             unsigned flags);

/* ================= npy.c: NumPy .npy files ================= */

/* Read a .npy file (format 1.0/2.0/3.0, C order, little or big endian;
 * bool/int8/uint8/int16/int32/int64/float16/float32/float64; for bfloat16,
 * what ml_dtypes' np.save writes ('<V2' or '|V2' raw 2-byte records) and
 * '<u2' raw bits). It must hold exactly dt with shape *shape, else an error
 * naming the file, the expected and the found dtype/shape. *data is
 * malloc'd. */
cf_status cf_npy_read(cf_context *ctx, const char *path, cf_dtype dt, const cf_shape *shape,
                      void **data);
/* cf_npy_read that gives up after timeout_s seconds (> 0; 0 waits forever)
 * with CF_ERR_RUNTIME: a FIFO with no writer does not hang the run. */
cf_status cf_npy_read_timeout(cf_context *ctx, const char *path, cf_dtype dt, const cf_shape *shape,
                              double timeout_s, void **data);
/* Write data as a .npy file (format 1.0, little endian; bfloat16 as '<V2'
 * raw records, which ml_dtypes reads back with .view(bfloat16)) through
 * cf_out_open: a temporary beside path renamed over it. */
cf_status cf_npy_write(cf_context *ctx, const char *path, cf_dtype dt, const cf_shape *shape,
                       const void *data);

/* ================= reference.c, verify.c: float64 reference ================= */

/* The reference value of one output on one rank: val[i] is the float64
 * result, mag[i] a bound on the magnitude of what was summed to get it
 * (sum of |terms| through the graph, so the tolerance scales with the
 * conditioning, as a forward error bound does); integer outputs are exact
 * in ival[] (wrapping as the type does) and val/mag are NULL. */
typedef struct cf_ref_value {
  cf_dtype dtype;
  cf_shape shape;
  int64_t count;
  double *val, *mag; /* float dtypes */
  int64_t *ival;     /* integer dtypes */
} cf_ref_value;

/* The inputs of a run: for every Input node of the graph (by name), one
 * tensor per rank: data[rank * n + k] is Input names[k] on that rank. */
typedef struct cf_inputs {
  int n, ranks;
  const char **names;
  cf_tensor *data;
  /* Caller buffers (the embedding API, executor/api.c). borrow: a run may
   * read data[] in place where cf_plan_binds says so (the data must stay
   * unchanged until the run returns); else it copies them into its arena.
   * outputs (optional): caller-owned buffers [rank * n_outputs + j] for the
   * j-th Output node (graph order), of exactly its dtype and count, or NULL
   * data for an output the caller does not want. A run produces an Output's
   * value straight into its buffer where cf_plan_binds says so and copies
   * the rest there at the end; res->outputs then point at these buffers. */
  bool borrow;
  const cf_tensor *outputs;
} cf_inputs;

/* Evaluate the unfused graph g (verified and inferred; fused ops are
 * evaluated by their definition too) for ranks 0..in->ranks-1 in float64
 * (integers exactly). Collectives follow docs/format.md with groups;
 * Reduce's non-root outputs are undefined and left NaN/0 (verify skips
 * them). out[rank * n_outputs + j] is the j-th Output node (node order) of
 * rank; the caller frees with cf_ref_free(out, count). */
cf_status cf_reference_run(cf_context *ctx, const cf_graph *g, const cf_inputs *in, uint64_t seed,
                           cf_ref_value **out, int *n_outputs);
void cf_ref_free(cf_ref_value *v, int count);
/* The most memory cf_reference_run holds for g on ranks ranks: the live
 * float64 values (value and magnitude, 16 bytes an element; integers 8)
 * of every rank, the Output copies it returns, and the buffers a node uses
 * while it runs (an upper bound for fused MatMul+collective ops). */
int64_t cf_reference_bytes(const cf_graph *g, int ranks);

typedef struct cf_verify_stats {
  double max_abs_err, max_rel_err; /* over every checked element */
  int64_t checked;                 /* elements compared */
} cf_verify_stats;

/* Compare got[rank * n_outputs + j] with ref[...] for every rank and output
 * of g: |got - val| <= tol * mag (float32 1e-5, float16/bfloat16 1e-2,
 * float64 1e-12), NaN only where the reference is NaN; integers exactly.
 * Reduce outputs are checked on the root only. The first mismatch is an
 * error "output 'NAME' rank R index I: got G, expected E" (CF_ERR_INVALID);
 * st is filled either way. */
cf_status cf_verify_outputs(cf_context *ctx, const cf_graph *g, const cf_tensor *got,
                            const cf_ref_value *ref, int ranks, int n_outputs,
                            cf_verify_stats *st);

/* ================= backends/: device backends ================= */

typedef struct cf_device cf_device;
/* A device backend: buffers and kernel launches (STYLE: a vtable + impl).
 * The slots up to destroy are required; the rest are optional (NULL on the
 * CPU device, whose buffers are host memory) and only ever called through
 * the cf_device_* wrappers below, which fall back to host behaviour. */
typedef struct cf_device_ops {
  const char *name;                                      /* "cpu", "cuda" */
  void *(*alloc)(cf_device *d, size_t bytes);            /* zeroed, 64-aligned; NULL on OOM */
  void (*free)(cf_device *d, void *p);
  void (*copy)(cf_device *d, void *dst, const void *src, size_t bytes);
  /* Make key's kernel launchable (JIT/cache); called before ranks start. */
  cf_status (*prepare)(cf_device *d, const cf_kernel_key *key);
  /* Launch a prepared kernel with its ABI's arguments (codegen.h). */
  void (*nary)(cf_device *d, const cf_kernel_key *key, void *dst, const void *const *src,
               int64_t n, double div);
  void (*acc)(cf_device *d, const cf_kernel_key *key, void *dst, const void *src, int64_t n);
  void (*scale)(cf_device *d, const cf_kernel_key *key, void *dst, int64_t n, double div);
  void (*sync)(cf_device *d);
  void (*destroy)(cf_device *d);
  /* ---- optional ---- */
  /* The handle rank's lane (0: its compute, 1: its collectives) works
   * through: on CUDA its own stream on the rank's GPU. Owned by d; its
   * messages go to ctx (the rank's) until the next view() call for it. */
  cf_status (*view)(cf_device *d, cf_context *ctx, int rank, int lane, cf_device **out);
  /* Buffers that are not host memory: host -> device and device -> host. */
  cf_status (*upload)(cf_device *d, void *dst, const void *src, size_t bytes);
  cf_status (*download)(cf_device *d, void *dst, const void *src, size_t bytes);
  /* cf_compute_run / cf_compute_product on device buffers (ctx gets the
   * message). */
  cf_status (*compute)(cf_device *d, cf_context *ctx, const cf_graph *g, const cf_node *n,
                       const cf_tensor *in, cf_tensor *out, int rank, uint64_t seed, unsigned flags);
  cf_status (*product)(cf_device *d, cf_context *ctx, const cf_graph *g, const cf_node *n,
                       const cf_tensor *x1, const cf_tensor *x2, const cf_tensor *x1_scale,
                       const cf_tensor *x2_scale, const cf_tensor *bias, cf_tensor *out,
                       unsigned flags);
  /* The first failure of a void slot (copy, nary, acc, scale, sync) since
   * d was made, as a status with its message in ctx; CF_OK when none. */
  cf_status (*error)(cf_device *d, cf_context *ctx);
  /* Milliseconds per call of fn(arg), called reps times back to back with
   * the device's launches queued without waiting (timed by device events). */
  cf_status (*time)(cf_device *d, void (*fn)(void *arg), void *arg, int reps, double *ms);
} cf_device_ops;

struct cf_device {
  const cf_device_ops *ops;
  cf_context *ctx;
  void *impl;
};

typedef enum cf_device_kind {
  CF_DEVICE_CPU,  /* backends/cpu.c */
  CF_DEVICE_CUDA  /* backends/cuda.c */
} cf_device_kind;

/* backends/cpu.c */
cf_status cf_device_cpu_create(cf_context *ctx, cf_device **out);

/* backends/cuda.c: an NVIDIA GPU through the CUDA driver API, which is
 * loaded with dlopen("libcuda.so.1") here (nothing links CUDA): without a
 * driver or a GPU, CF_ERR_UNSUPPORTED with a message that says so
 * ("no CUDA driver (libcuda.so.1 not found); ..."). device_index >= 0 uses
 * that GPU for every rank; -1 spreads ranks over every visible GPU (rank r
 * on GPU r mod count, peer access between them), ranks sharing a GPU each
 * with their own streams. Reductions are the codegen's PTX kernels (sm_80
 * or sm_90 by the GPU), MatMul is cuBLAS (dlopen'd: CUBLAS_LIBRARY, else
 * libcublas.so.* on the library path), other compute ops run on the host
 * through copies. */
cf_status cf_device_cuda_create(cf_context *ctx, int device_index, cf_device **out);
/* The GPU behind d (a CUDA device or one of its views) for reports: its
 * name, compute capability and the PTX target; false for other devices. */
bool cf_device_cuda_info(const cf_device *d, char *name, size_t len, int *cc_major, int *cc_minor,
                         const char **sm);

/* backends/device.c: the optional slots, wrapped */
/* True when d's buffers are host memory (no upload slot). */
bool cf_device_is_host(const cf_device *d);
/* d's view for rank and lane, or d itself when it has none. */
cf_status cf_device_view(cf_device *d, cf_context *ctx, int rank, int lane, cf_device **out);
/* memcpy on the host. */
cf_status cf_device_upload(cf_device *d, void *dst, const void *src, size_t bytes);
cf_status cf_device_download(cf_device *d, void *dst, const void *src, size_t bytes);
/* cf_compute_run / cf_compute_product on the host. */
cf_status cf_device_compute(cf_device *d, cf_context *ctx, const cf_graph *g, const cf_node *n,
                            const cf_tensor *in, cf_tensor *out, int rank, uint64_t seed, unsigned flags);
cf_status cf_device_product(cf_device *d, cf_context *ctx, const cf_graph *g, const cf_node *n,
                            const cf_tensor *x1, const cf_tensor *x2, const cf_tensor *x1_scale,
                            const cf_tensor *x2_scale, const cf_tensor *bias, cf_tensor *out,
                            unsigned flags);
/* CF_OK on the host. */
cf_status cf_device_error(cf_device *d, cf_context *ctx);
/* Wall-clock time on the host. */
cf_status cf_device_time(cf_device *d, void (*fn)(void *arg), void *arg, int reps, double *ms);

/* ================= transports/: moving bytes between ranks ================= */

/* What a rank says about the collective it is running; every message of a
 * collective carries it and the receiver compares it with its own, so a
 * mismatch is an error naming both ranks and both values, never a hang. */
typedef struct cf_coll_desc {
  int64_t seq;        /* collectives of this group so far on this rank */
  cf_op op;           /* base kind: AllReduce, AllGather, ... */
  cf_dtype dtype;
  int64_t count;      /* elements per rank's input */
  int red;            /* cf_reduction, -1 when none */
  int root;           /* -1 when none; AllToAll: split_dimension */
  int layout;         /* AllGather layout, -1 otherwise; AllToAll: concat_dimension;
                         CollectivePermute: a hash of its pairs */
  const char *group;
  const char *node;   /* node name (for messages only, not compared) */
} cf_coll_desc;

/* True when two ranks' descriptors of the same collective differ; text
 * then says so naming both ranks and both values. */
bool cf_coll_desc_mismatch(const cf_coll_desc *mine, int my_rank, const cf_coll_desc *theirs,
                           int their_rank, char *text, size_t len);

typedef struct cf_comm cf_comm;
struct cf_coll_call; /* below: one call of a collective */
struct cf_plan;      /* below: a plan */
/* A transport endpoint of one rank: two-sided, in-order messages per
 * (sender, receiver) pair. send() is nonblocking; the sender must not
 * change buf until send_wait() says the receiver is done with it. recv()
 * gives a pointer to the data: the sender's own buffer (threads: single
 * copy) or staging (MPI: filled by the receive; staging may be NULL when the
 * transport reads in place, see ops->zero_copy); the receiver calls
 * release() when it has read it. Every blocking call honours the deadline
 * and the abort flag: it returns CF_ERR_RUNTIME with the reason in the
 * context. Ranks here are world ranks. */
typedef struct cf_comm_ops {
  const char *name;    /* "threads", "mpi" */
  bool zero_copy;      /* recv() returns the sender's memory */
  cf_status (*send)(cf_comm *c, int peer, const void *buf, size_t bytes, const cf_coll_desc *d);
  cf_status (*recv)(cf_comm *c, int peer, void *staging, size_t bytes, const cf_coll_desc *d,
                    const void **data);
  cf_status (*release)(cf_comm *c, int peer);
  /* Messages this rank has sent to peer so far (a ticket for wait_released). */
  uint64_t (*sent)(cf_comm *c, int peer);
  /* Wait until the first count messages this rank sent to peer have been
   * released (their buffers may then change). */
  cf_status (*wait_released)(cf_comm *c, int peer, uint64_t count);
  /* Wait until every message this rank sent has been released (eager
   * messages excepted: their buffers were free at once). */
  cf_status (*send_wait)(cf_comm *c);
  /* Optional (NULL when absent): send bytes <= eager_max by copying them
   * into the message, so buf is free when it returns and neither send_wait
   * nor wait_released waits for the peer to read it. The peer still
   * recv()s and release()s it. Only for exchanges where every rank also
   * receives from every rank it sends to, so a descriptor mismatch is still
   * seen by both sides (a sender no longer learns of it from the release). */
  cf_status (*send_eager)(cf_comm *c, int peer, const void *buf, size_t bytes,
                          const cf_coll_desc *d);
  size_t eager_max;
  /* Fail every rank (sets the shared abort flag with msg; first one wins). */
  void (*abort)(cf_comm *c, const char *msg);
  /* True when another rank aborted; its message goes to *msg. */
  bool (*aborted)(cf_comm *c, const char **msg);
  /* Optional (NULL when absent; coll.c calls it only for calls whose algo
   * is CF_ALGO_MPI_NATIVE and reports its absence as an error): run the
   * whole collective with the transport's own implementation (MPI's
   * collectives), within the scratch cf_coll_scratch_bytes gives
   * CF_ALGO_MPI_NATIVE. */
  cf_status (*native)(cf_comm *c, cf_device *dev, const struct cf_coll_call *call);
} cf_comm_ops;

struct cf_comm {
  const cf_comm_ops *ops;
  cf_context *ctx;     /* this rank's context for messages */
  int rank, size;      /* world */
  void *impl;
};

/* transports/threads.c: a world of size ranks that are threads of this
 * process. The world is shared; each rank gets its own cf_comm. */
typedef struct cf_threads_world cf_threads_world;
cf_status cf_threads_world_create(cf_context *ctx, int size, double timeout_s,
                                  cf_threads_world **out);
cf_comm *cf_threads_comm(cf_threads_world *w, int rank, cf_context *rank_ctx);
/* Rank's thread has returned (so a timeout can name who is gone). */
void cf_threads_rank_left(cf_threads_world *w, int rank);
void cf_threads_world_destroy(cf_threads_world *w);

/* transports/mpi.c: this process is one rank of an MPI job (mpirun), over
 * a duplicate of MPI_COMM_WORLD; not zero copy (recv fills the staging
 * buffer: plan with cf_run_options.staged). Tools never include mpi.h:
 * these calls are the whole interface. */
typedef struct cf_mpi_world cf_mpi_world;
/* MPI_Init_thread (MPI_THREAD_MULTIPLE, at least SERIALIZED) unless MPI is
 * already initialized, and the transport; every wait gives up after
 * timeout_s (exit 3). */
cf_status cf_mpi_world_create(cf_context *ctx, double timeout_s, cf_mpi_world **out);
/* This process's endpoint (rank and size are MPI's). */
cf_comm *cf_mpi_comm(cf_mpi_world *w);
/* Ranks of the job on this node (MPI_COMM_TYPE_SHARED), and its name. */
int cf_mpi_local_size(const cf_mpi_world *w);
const char *cf_mpi_host(const cf_mpi_world *w);
/* For --algo mpi-native and CF_ALGO_AUTO_MPI_NET: one MPI communicator per
 * group of plan p's collectives (MPI_Comm_create_group, in plan order, so
 * every rank must call it with the same plan before cf_exec_run_comm).
 * No-op for other algorithms. */
cf_status cf_mpi_prepare_native(cf_mpi_world *w, const struct cf_plan *p);
/* v[i] = the maximum of v[i] over every rank (for combining verification
 * results); honours the timeout and the abort flag. */
cf_status cf_mpi_max(cf_mpi_world *w, double *v, int n);
/* Fail every rank with text (e.g. this rank could not even build its plan). */
void cf_mpi_abort(cf_mpi_world *w, const char *text);
/* Test hook: this process SIGKILLs itself just before it sends its
 * (k+1)-th collective message (k < 0: off). */
void cf_mpi_test_kill(cf_mpi_world *w, int64_t k);
/* Free the transport and MPI_Finalize (when cf_mpi_world_create
 * initialized MPI). exit_code != 0: this rank failed and printed why; the
 * process then ends with exit_code within a few seconds even if a peer
 * never finalizes. */
void cf_mpi_world_destroy(cf_mpi_world *w, int exit_code);

/* ================= coll.c, algo_*.c: collective algorithms ================= */

typedef enum cf_algo {
  CF_ALGO_AUTO,   /* by size and mode */
  CF_ALGO_DIRECT, /* every rank reduces everything from every peer: 1 step */
  CF_ALGO_RD,     /* recursive doubling (powers of two; else direct) */
  CF_ALGO_RING,   /* ring reduce-scatter + ring all-gather */
  CF_ALGO_RSAG,   /* direct reduce-scatter + direct all-gather (rank order) */
  CF_ALGO_COUNT,  /* collfuse's own algorithms (every transport runs them) are below */
  CF_ALGO_MPI_NATIVE = CF_ALGO_COUNT + 1, /* the transport's own collectives (MPI's, the
                                           * native slot): every op, for comparison */
  /* AUTO as measured on the MPI transport (coll.c; picked by cf_mpi_auto) */
  CF_ALGO_AUTO_MPI_SHM, /* every rank reaches every other through shared memory */
  CF_ALGO_AUTO_MPI_NET  /* some ranks talk over a network: MPI's own AllReduce where it won */
} cf_algo;
/* transports/mpi.c: what AUTO means on this MPI job (the same on every
 * rank): CF_ALGO_AUTO_MPI_SHM when every rank reaches every other through
 * shared memory (one node, and OpenMPI's btl list allows vader/sm), else
 * CF_ALGO_AUTO_MPI_NET. */
cf_algo cf_mpi_auto(const cf_mpi_world *w);
const char *cf_algo_name(cf_algo a);
int cf_algo_parse(const char *s); /* -1 when unknown */

/* A member of an AllGather or ReduceScatter call, in elements: its input
 * at in + in_off and output at out + out_off; count is the elements of one
 * rank's block (AllGather: the member's input; ReduceScatter: its output). */
typedef struct cf_coll_seg {
  int64_t in_off, out_off, count;
} cf_coll_seg;

/* One call of a collective on one rank. AllReduce, Reduce and Broadcast:
 * input and output of desc.count elements (a fused AllReduce bucket is one
 * flat call over the bucket). AllGather and ReduceScatter: the members in
 * segs (one for a plain op): AllGather writes rank p's member block at
 * out_off + p * count, ReduceScatter reads rank p's block me at in_off +
 * me * count. */
typedef struct cf_coll_call {
  cf_coll_desc desc;
  const int *ranks;    /* world ranks of the group, in group order */
  int n;               /* group size */
  int me;              /* my index in ranks */
  const void *in;
  void *out;
  const cf_coll_seg *segs; /* AllGather, ReduceScatter; AllToAll: one block per rank */
  int n_segs;
  int64_t in_row, out_row; /* AllToAll: a block's rows, n * row elements apart (algo_alltoall.c) */
  const int *pairs;        /* CollectivePermute: target[0..n) then source[0..n), -1 none */
  void *scratch;       /* algorithm scratch, scratch_bytes */
  size_t scratch_bytes;
  cf_algo algo;        /* resolved: never AUTO */
  bool deterministic;  /* reduce in rank order */
} cf_coll_call;

/* Scratch bytes an algorithm needs for a call (so the plan can size it);
 * zero_copy: the transport's recv() reads in place (no staging). */
size_t cf_coll_scratch_bytes(const cf_coll_desc *d, int n, cf_algo a, bool zero_copy);
/* The algorithm AUTO picks for desc on n ranks (a pure function of desc, n
 * and the mode, so every rank picks the same). */
cf_algo cf_coll_select(const cf_coll_desc *d, int n, bool deterministic, cf_algo forced);
/* Run one collective call on this rank. */
cf_status cf_coll_run(cf_comm *c, cf_device *dev, const cf_coll_call *call);
/* The kernels any algorithm may launch for d on n ranks (at most max, 8 is
 * enough); the plan prepares them before ranks start. Returns how many. */
int cf_coll_kernels(const cf_coll_desc *d, int n, cf_kernel_key *keys, int max);
/* dst = op(src[0], ..., src[k-1]) over n elements, in that order (for the
 * algorithms). final: mean divides by the group size (else sums). */
void cf_coll_reduce(cf_device *dev, const cf_coll_call *call, void *dst, const void *const *src,
                    int k, int64_t n, bool final);

/* algo_allreduce.c: AllReduce algorithms */
cf_status cf_algo_direct(cf_comm *c, cf_device *dev, const cf_coll_call *call);
cf_status cf_algo_rsag(cf_comm *c, cf_device *dev, const cf_coll_call *call);
cf_status cf_algo_ring(cf_comm *c, cf_device *dev, const cf_coll_call *call);
cf_status cf_algo_rd(cf_comm *c, cf_device *dev, const cf_coll_call *call);
/* algo_rooted.c: the other collectives (rank-order, direct) */
cf_status cf_algo_reduce_scatter(cf_comm *c, cf_device *dev, const cf_coll_call *call);
cf_status cf_algo_all_gather(cf_comm *c, cf_device *dev, const cf_coll_call *call);
cf_status cf_algo_reduce(cf_comm *c, cf_device *dev, const cf_coll_call *call);
cf_status cf_algo_broadcast(cf_comm *c, cf_device *dev, const cf_coll_call *call);
/* Each rank shows its descriptor to the next rank of the group (an empty
 * message), for collectives whose ranks do not all meet: a disagreement is
 * then an error naming both, not a wait for a message that never comes. */
cf_status cf_coll_handshake(cf_comm *c, const cf_coll_call *call);
/* algo_alltoall.c: AllToAll and CollectivePermute (direct) */
cf_status cf_algo_alltoall(cf_comm *c, cf_device *dev, const cf_coll_call *call);
cf_status cf_algo_permute(cf_comm *c, cf_device *dev, const cf_coll_call *call);
/* Their staging (in bytes) when the transport is not zero copy. */
size_t cf_alltoall_scratch_bytes(const cf_coll_desc *d, int n, bool zero_copy);

/* ================= plan.c, exec.c: plans and runs ================= */

typedef struct cf_run_options {
  int ranks;            /* world size; 0: the graph's world_size */
  int iters, warmup;    /* timed and untimed iterations */
  uint64_t seed;
  bool deterministic;
  double timeout_s;     /* every wait; default 60 */
  cf_algo algo;         /* forced algorithm or AUTO */
  int verbose;
  /* Test hook: called on every rank's copy of the plan after the
   * fingerprint check, so a test can make one rank differ. */
  void (*test_mutate)(void *user, int rank, cf_coll_desc *d, int index);
  void *test_user;
  /* Test hook: rank test_fail_rank stops at schedule step test_fail_step
   * of the first iteration, either failing loudly (mode 1: an error that
   * stops everyone) or vanishing without a word (mode 2: the others must
   * notice by their timeout). Mode 0: off. */
  int test_fail_mode, test_fail_rank, test_fail_step;
  /* The transport copies into staging (MPI): size the algorithms' scratch
   * for it. False for the threads transport, which reads in place. */
  bool staged;
  /* Where buffers and kernels live: the CPU (default) or CUDA GPUs (ranks
   * spread over every visible GPU: cf_device_cuda_create(ctx, -1)). */
  cf_device_kind device;
} cf_run_options;

typedef struct cf_run_result {
  double time_ms_median;     /* per iteration, over iters */
  double *time_ms;           /* every timed iteration (malloc'd) */
  int64_t collectives_executed; /* per rank per iteration */
  int64_t peak_bytes;        /* memory plan peak per rank */
  int ranks, n_outputs;
  cf_tensor *outputs;        /* [rank * n_outputs + j], j-th Output node */
  const char **output_names;
  bool caller_outputs;       /* outputs[].data are cf_inputs.outputs' buffers (not freed) */
} cf_run_result;

/* ---- plan internals (plan.c builds, exec.c runs) ---- */

typedef enum cf_step_kind {
  CF_STEP_COMPUTE, /* a compute node on this rank */
  CF_STEP_COPY,    /* a value into its place in a bucket it could not be produced in */
  CF_STEP_START,   /* hand a collective to the rank's communication thread */
  CF_STEP_WAIT,    /* wait for it before its first consumer */
  CF_STEP_FUSED    /* a fused MatMul+collective op, pipelined (fused_matmul.c) */
} cf_step_kind;

typedef struct cf_step {
  cf_step_kind kind;
  int node;            /* COMPUTE */
  int coll;            /* START, WAIT: index into plan colls */
  int64_t src, dst;    /* COPY: byte addresses in the rank's arena */
  int64_t bytes;       /* COPY */
  int val;             /* COPY: the value copied (src is its arena address) */
} cf_step;

typedef struct cf_pvalue {
  int64_t addr;        /* byte offset in the rank's arena; -1 when not placed */
  cf_dtype dtype;
  cf_shape shape;
  int64_t count, bytes;
  bool own;            /* alone in its buffer (no bucket around it): may live in a caller's buffer */
} cf_pvalue;

typedef struct cf_pcoll {
  int node;
  cf_coll_desc desc;   /* seq is per group; same on every rank */
  const int *ranks;    /* group's world ranks, part after part (graph arena or plan) */
  int n;               /* ranks in one part: the communicator size */
  int n_parts;         /* a partitioned group's parts; each rank runs with its own */
  int64_t in_addr, out_addr, scratch_addr;
  size_t scratch_bytes;
  cf_coll_seg *segs;
  int n_segs;
  int64_t in_row, out_row; /* AllToAll (cf_coll_call) */
  int *pairs;              /* CollectivePermute (cf_coll_call), owned */
  cf_algo algo;
  int in_val, out_val; /* the value the call reads / writes when its buffer is exactly that value, else -1 */
  bool inline_ok;      /* START is followed by its WAIT: run on the rank thread */
  /* fused MatMul+collective ops: desc is one chunk's collective (count of
   * the whole product), chunks of chunk_rows rows, double-buffered stage */
  bool fused_mm;
  int chunks;
  int64_t chunk_rows;
  int64_t stage_addr, stage_bytes; /* two buffers of stage_bytes */
} cf_pcoll;

struct cf_plan {
  cf_context *ctx;
  const cf_graph *g;
  cf_run_options opt;
  int ranks;
  int *val_base;       /* node -> first value index */
  cf_pvalue *vals;
  int n_vals;
  cf_step *steps;
  int n_steps;
  cf_pcoll *colls;
  int n_colls;
  int *world_ranks;    /* 0..ranks-1 for the world group */
  int64_t arena_bytes; /* per rank: the peak of the memory plan */
  int64_t naive_bytes; /* every value its own buffer (for -v) */
  char fingerprint[17];
  cf_device *dev;      /* the CPU device, kernels prepared */
  bool *binds;         /* node -> cf_plan_binds */
};

/* What a fused op needs of its rank (exec.c provides it). */
typedef struct cf_rank_io {
  cf_context *ctx;
  int rank;
  char *arena;
  void *const *vptr;   /* value -> its buffer on this rank (arena or a caller's) */
  cf_device *dev;
  void *impl;
  /* queue call on the rank's communication thread; returns its ticket */
  uint64_t (*start)(void *impl, const cf_coll_call *call);
  cf_status (*wait)(void *impl, uint64_t ticket);
  /* run call on this thread after every call queued before it (a fused op
   * of one chunk has nothing to overlap: it runs as MatMul then the
   * collective would, with no hand-off) */
  cf_status (*run)(void *impl, const cf_coll_call *call);
} cf_rank_io;

typedef struct cf_plan cf_plan;
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
} cf_mem_need;
/* CF_OK when need fits in limit bytes (limit <= 0: cf_mem_available; when
 * that is unknown, CF_OK). Else CF_ERR_INVALID with the sizes: "FILE: error:
 * 4 ranks need 34.3 GiB (8.6 GiB per rank), 21.9 GiB available
 * (MemAvailable); HINT", limit_what naming an explicit limit ("--max-memory":
 * "512.0 MiB allowed by --max-memory"). */
cf_status cf_mem_check(cf_context *ctx, const cf_mem_need *need, int64_t limit,
                       const char *limit_what);

/* fused_matmul.c: run fused op plan coll c on one rank: the product of
 * chunk i+1 is computed while chunk i is reduce-scattered / all-reduced
 * (or, for AllGatherMatmul, chunk i+1 gathered while chunk i multiplies).
 * tmpl is the rank's call for c (group, scratch, algorithm). */
cf_status cf_fused_matmul_run(const cf_plan *p, int c, cf_rank_io *io, const cf_coll_call *tmpl);
/* Chunks the pipeline uses for node n of rows rows per block: comm_turn
 * when set; else 1 when min_rows is 0, and otherwise enough that each
 * chunk's collective moves >= 512 KiB, at most 8, each of >= min_rows rows. */
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

typedef struct cf_plan cf_plan;
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
void cf_plan_destroy(cf_plan *p);

/* Run p on the threads transport and CPU device with inputs in (NULL: every
 * Input filled by cf_fill_node with opt->seed). Outputs of the last
 * iteration go to res; free with cf_run_result_free. */
cf_status cf_exec_run(cf_context *ctx, cf_plan *p, const cf_inputs *in, cf_run_result *res);
/* Run this process's one rank (comm->rank of comm->size, e.g. an MPI
 * process) of p over comm; only that rank's outputs are filled in res and
 * its own iteration times are recorded. A failure is also signalled to the
 * other ranks through comm->ops->abort. */
cf_status cf_exec_run_comm(cf_context *ctx, cf_plan *p, cf_comm *comm, const cf_inputs *in,
                           cf_run_result *res);
void cf_run_result_free(cf_run_result *res);

#endif /* COLLFUSE_EXECUTOR_H */
