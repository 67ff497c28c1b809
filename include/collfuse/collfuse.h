/* collfuse.h - public C API of collfuse, a graph compiler for collective fusion.
 *
 * Conventions (SQLite/LLVM-C style):
 *  - Objects are opaque handles created by cf_<object>_create/load and released
 *    by cf_<object>_destroy, which accepts NULL.
 *  - Every fallible call returns cf_status (CF_OK == 0) and writes its results
 *    through trailing out-parameters, which are set to NULL/0 on failure.
 *  - The message of the last failure is owned by the context and stays valid
 *    until the next call on that context: cf_context_errmsg(). Messages are
 *    kept per thread: each thread reads the message of its own last failure.
 *  - There is no global state; contexts are independent of each other. One
 *    context and the objects created from it must be used by one thread at a time,
 *    except that threads may each make calls on executables of their own
 *    (cf_executable_*: runs, queries, bucket bindings) at the same time, as
 *    long as no thread meanwhile changes or compiles a graph of that context,
 *    creates an executable or sets its log sink; different contexts may be
 *    used from different threads at the same time.
 *  - Strings passed in are copied; strings returned are owned by the object they
 *    come from and stay valid until it is changed or destroyed, unless a function
 *    says otherwise.
 * docs/api.md is the guide: building graphs, compiling, running with caller
 * buffers, ownership and threading, and the Python package over this API.
 */
#ifndef COLLFUSE_COLLFUSE_H
#define COLLFUSE_COLLFUSE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define CF_VERSION_MAJOR 0
#define CF_VERSION_MINOR 1
#define CF_VERSION_PATCH 0
#define CF_VERSION_STRING "0.1.0"
/* MAJOR * 10000 + MINOR * 100 + PATCH, for #if checks. */
#define CF_VERSION_NUMBER (CF_VERSION_MAJOR * 10000 + CF_VERSION_MINOR * 100 + CF_VERSION_PATCH)
/* Most dimensions a shape has (the IR's own limit: ir/ir.h's CF_MAX_RANK is
 * this constant). */
#define CF_MAX_DIMS 8

typedef enum cf_status {
  CF_OK = 0,
  CF_ERR_INVALID = 1,     /* invalid input: malformed file, failed verification */
  CF_ERR_USAGE = 2,       /* bad argument from the caller */
  CF_ERR_RUNTIME = 3,     /* runtime failure: timeout, rank failure, mismatch */
  CF_ERR_NO_MEMORY = 4,   /* an allocation failed */
  CF_ERR_IO = 5,          /* a file could not be read or written */
  CF_ERR_UNSUPPORTED = 6, /* a feature this build or target does not have */
} cf_status;

typedef enum cf_log_level {
  CF_LOG_ERROR = 0,
  CF_LOG_WARN = 1,
  CF_LOG_INFO = 2,
  CF_LOG_DEBUG = 3,
} cf_log_level;

typedef struct cf_context cf_context; /* error messages, log sink, caches */
typedef struct cf_graph cf_graph;     /* a graph; owns its nodes and strings */

/* Log sink: called with messages the library would otherwise drop (warnings,
 * pass notes). The message is valid only during the call. */
typedef void (*cf_log_fn)(void *user, cf_log_level level, const char *msg);

/* Version of the library actually loaded (may differ from CF_VERSION_*):
 * "MAJOR.MINOR.PATCH" (static storage) and as CF_VERSION_NUMBER computes it. */
const char *cf_version(void);
int cf_version_number(void);

cf_status cf_context_create(cf_context **out);
void cf_context_destroy(cf_context *ctx);
/* Message of the calling thread's last failed call on ctx; a thread that
 * has had no failure on ctx gets the newest message another thread left
 * there (a context handed from one thread to another, one at a time); ""
 * when none. Owned by ctx, valid until this thread's next call on ctx. */
const char *cf_context_errmsg(const cf_context *ctx);
void cf_context_set_log(cf_context *ctx, cf_log_fn fn, void *user);

/* Load a graph from a file ("-": standard input, named <stdin> in
 * messages) in any of five formats: native XML (.xml), GraphML (.graphml),
 * XLA HLO text (.hlo, .hlo.txt), StableHLO MLIR text (.mlir) and
 * TensorFlow/GE GraphDef text (.pbtxt, .pb.txt). The format comes from the
 * extension, else from how the text starts (<graph>, <graphml>, HloModule,
 * module, func.func, node {). The graph is structurally verified (names,
 * refs, arity, cycles) and its types inferred, but not checked against a
 * target: call cf_graph_verify for that. The graph keeps a pointer to ctx. */
cf_status cf_graph_load(cf_context *ctx, const char *path, cf_graph **out);
/* Parse a graph from memory, in the same five formats; name is used in
 * messages and picks the format as cf_graph_load's path does. */
cf_status cf_graph_parse(cf_context *ctx, const char *name, const char *data, size_t size,
                         cf_graph **out);
/* Release the caller's graph. While executables made from g exist, they
 * hold it: it is freed with the last of them, and they keep running (no
 * one can change it any more). */
void cf_graph_destroy(cf_graph *g);

/* Full verification and inference, then the rules of target profile `target`
 * (NULL or "cpu" for the default; see cf_target_name). */
cf_status cf_graph_verify(cf_graph *g, const char *target);

/* Run passes over g: a comma-separated list of passes ("verify,infer,dce"),
 * or a pipeline named as cf_graph_run_pipeline names them: NULL or "default"
 * for the default pipeline, "O0" (also "" and "-O0") for no fusion at all,
 * which verifies and infers types ("verify,infer") as -O0 does on the
 * command line. Unlike cf_graph_run_pipeline it takes no options and does
 * not check a target profile. */
cf_status cf_graph_run_passes(cf_graph *g, const char *passes);

/* Write the graph as native XML. */
cf_status cf_graph_write_xml(const cf_graph *g, const char *path);
/* Draw the graph; the format comes from the extension: .dot, .svg or .png. */
cf_status cf_graph_write_dot(const cf_graph *g, const char *path);

/* Counts for summaries. */
size_t cf_graph_node_count(const cf_graph *g);
size_t cf_graph_collective_count(const cf_graph *g);

/* Target profiles: index 0.. until NULL. */
const char *cf_target_name(size_t i);

/* ================= building a graph in memory (api/build.c) =================
 *
 * A graph is built node by node in operand order: every operand names a node
 * added before. Names are node names, or "NAME:K" for output port K of a
 * multi-output node (a name that exists as given is never split). Ops and
 * attributes are those of the native XML format (docs/format.md): op names and
 * their aliases, attribute names and their text forms, so a built graph is the
 * same graph the XML reader would make. Building checks names, operands and
 * attribute values at once; the op rules (arity, required attributes, shapes,
 * dtypes, groups) are checked by cf_graph_verify, which cf_graph_run_pipeline
 * and cf_executable_create call. Adding to a verified graph makes it unverified
 * again. Errors name the graph and the node: "dp: error: node 'ar3': ...". */

/* Create an empty graph named name (NULL: "graph") for world_size ranks
 * (0: undeclared; cf_graph_set_world_size or the "ranks" option sets it).
 * The caller owns *out (cf_graph_destroy); it keeps a pointer to ctx, which
 * must outlive it. */
cf_status cf_graph_create(cf_context *ctx, const char *name, int world_size, cf_graph **out);
cf_status cf_graph_set_world_size(cf_graph *g, int world_size);
/* Define communicator group name over world ranks ranks[0..n) (copied).
 * "hccl_world_group" is every rank and needs no definition. */
cf_status cf_graph_define_group(cf_graph *g, const char *name, const int *ranks, size_t n);
/* Define a partitioned group: n_parts disjoint parts of part_size ranks
 * each, part k being ranks[k * part_size .. (k + 1) * part_size) (copied).
 * Each part is one communicator (XLA's replica_groups {{0,1},{2,3}}, MPI
 * colours): a collective over the group runs within the part of each rank,
 * and rank_size is part_size. The XML form is ranks="0,1|2,3". */
cf_status cf_graph_define_group_parts(cf_graph *g, const char *name, const int *ranks,
                                      size_t n_parts, size_t part_size);

/* Add node name running op (e.g. "MatMul", "AllReduce", "HcomAllGather")
 * with operands inputs[0..n_inputs) (strings copied). A node name has 1 to
 * 4096 bytes, as in every input format; a group name (cf_graph_define_group)
 * at most 127. */
cf_status cf_graph_add_op(cf_graph *g, const char *op, const char *name, const char *const *inputs,
                          size_t n_inputs);
/* cf_graph_add_op, then attrs[i] = values[i] for i < n_attrs (NULL values
 * skipped), all or nothing: on failure the graph is as it was. */
cf_status cf_graph_add_op_attrs(cf_graph *g, const char *op, const char *name,
                                const char *const *inputs, size_t n_inputs,
                                const char *const *attrs, const char *const *values,
                                size_t n_attrs);
/* Set attribute attr of node to value in the XML text form ("sum", "7",
 * "1024,512", "bfloat16"); replaces an earlier value. */
cf_status cf_graph_set_attr(cf_graph *g, const char *node, const char *attr, const char *value);
cf_status cf_graph_set_attr_int(cf_graph *g, const char *node, const char *attr, int64_t value);

/* Typed helpers over cf_graph_add_op_attrs (all or nothing). dtype is a dtype
 * name ("float32", "bfloat16", ...), dims[0..rank) the shape (rank 0: a
 * scalar). NULL strings and negative fusion/fusion_id leave the attribute
 * at its default (reduction sum, group hccl_world_group, AllReduce fusion 1,
 * fusion_id -1, layout stack). */
cf_status cf_graph_add_input(cf_graph *g, const char *name, const char *dtype, const int64_t *dims,
                             int rank);
/* A Constant whose every element is value. */
cf_status cf_graph_add_constant(cf_graph *g, const char *name, const char *dtype,
                                const int64_t *dims, int rank, double value);
cf_status cf_graph_add_output(cf_graph *g, const char *name, const char *input);
cf_status cf_graph_add_matmul(cf_graph *g, const char *name, const char *a, const char *b);
cf_status cf_graph_add_allreduce(cf_graph *g, const char *name, const char *input,
                                 const char *reduction, const char *group, int fusion,
                                 int fusion_id);
/* layout: "stack" ([rank_size, ...], the default) or "concat" (dim 0 grows). */
cf_status cf_graph_add_allgather(cf_graph *g, const char *name, const char *input,
                                 const char *group, const char *layout);
cf_status cf_graph_add_reducescatter(cf_graph *g, const char *name, const char *input,
                                     const char *reduction, const char *group);
/* An AllToAll (XLA's): input is cut into rank_size equal blocks along
 * split_dimension, block j goes to rank j of group, and the blocks received
 * are concatenated in rank order along concat_dimension (0 and 0: HCCL's
 * HcclAlltoAll on a flat buffer). */
cf_status cf_graph_add_alltoall(cf_graph *g, const char *name, const char *input,
                                int split_dimension, int concat_dimension, const char *group);
/* A CollectivePermute: for k < n_pairs, rank pairs[2k] of group sends its
 * input to rank pairs[2k + 1]; a rank is at most one source and one
 * target, and a rank that is no target receives zeros (XLA's
 * source_target_pairs). */
cf_status cf_graph_add_collective_permute(cf_graph *g, const char *name, const char *input,
                                          const int *pairs, size_t n_pairs, const char *group);
/* An op the executor does not run (foreign type, kept as a string): it
 * declares its one output's dtype and shape and keeps its dependencies. */
cf_status cf_graph_add_opaque(cf_graph *g, const char *name, const char *type,
                              const char *const *inputs, size_t n_inputs, const char *dtype,
                              const int64_t *dims, int rank);

/* ================= inspecting a graph (api/build.c) ================= */

/* Name of node i (0 .. cf_graph_node_count - 1) in execution order once
 * the graph is verified (insertion order before); NULL when out of range.
 * Owned by g. */
const char *cf_graph_node_name(const cf_graph *g, size_t i);
/* Name of the i-th collective in execution order (0 ..
 * cf_graph_collective_count - 1): a plain collective, a fused bucket or a
 * fused MatMul+collective op; NULL when out of range. Owned by g. */
const char *cf_graph_collective_name(const cf_graph *g, size_t i);
/* Node's op name (static storage), NULL when there is no such node. */
const char *cf_graph_node_op(const cf_graph *g, const char *node);
/* Attribute attr of node as text into buf[0..len) (truncated, always
 * terminated): a set attribute, else its default ("reduction", "group",
 * "fusion", "fusion_id", "layout"), and the pseudo-attributes "op",
 * "dtype" and "shape" (of output 0, inferred once verified), "bytes" (what a
 * collective communicates: its full tensor, summed over members; else the
 * output's size) and "members" (a bucket's original collectives, comma
 * separated as in the XML, where `\,` is a comma within a name; a plain
 * collective is its own member; a fused MatMul+collective op lists its
 * MatMuls, then its collective). CF_ERR_INVALID with a
 * message when the node or a value for attr does not exist. */
cf_status cf_graph_get_attr(const cf_graph *g, const char *node, const char *attr, char *buf,
                            size_t len);

/* ================= compiling and running (api/api.c) ================= */

/* Options of cf_graph_run_pipeline and cf_executable_create, set by name as
 * the command line spells them (docs/cli.md):
 *   "passes"        "default" (every fusion), "O0" (none) or a comma list
 *   "split"         fusion=1 strategy: auto | bytes:25M[,first=1M][,count=N] |
 *                   ddp:25M[,first=1M][,initial] | size:96.54,3.46 |
 *                   index:20,100,159; any of them ,same_dtype and ,any_dim
 *   "cost"          alpha_us,beta_GBps[,gamma_GBps] of the auto split model
 *   "profile"       a measured profile (docs/executor.md) whose rules auto and
 *                   whose alpha/beta split auto use; "none": the built-in
 *                   ones (default: $COLLFUSE_PROFILE, else the user's
 *                   $XDG_CONFIG_HOME/collfuse/profile when there)
 *   "target"        target profile the graph must meet (see cf_target_name)
 *   "explain"       "1": one line per collective on why it was (not) fused,
 *                   to the context's log sink at CF_LOG_INFO
 *   "ranks"         world size (default: the graph's world_size, else 1); sets
 *                   the graph's world_size, as `collfuse run --ranks` does
 *   "deterministic" "1": reductions add contributions in rank order, so fused
 *                   and unfused graphs give bitwise-identical outputs
 *   "algo"          "auto" or an algorithm row's name, as `collfuse run --algo`
 *                   lists them (docs/executor.md's table; "mpi-native" with
 *                   an MPI world); an unknown one is refused naming the choices
 *   "timeout"       seconds every wait of a run may take (default 60)
 *   "seed"          seed of the data of Inputs the caller does not give
 *   "max_memory"    bytes a run may hold ("512M", "4G"; default: what the
 *                   machine has available): more is refused before allocating
 *   "backend"       cf_executable_run_rank's world: "mpi" (default) or "shm"
 *                   (the job's processes on this host, through shared memory)
 *   "job"           shm: the job's name, the same in every process; rank and
 *                   size are then the call's rank and the executable's ranks
 *                   (default: the launcher's rank, size and job, from
 *                   torchrun's, mpirun's, srun's or collfuse run's variables)
 *   "trace"         FILE.json: each cf_executable_run writes its timeline
 *                   there (a Chrome trace, as `collfuse run --trace`), also
 *                   when it fails; its last run's is what the file holds
 *                   (cf_executable_run_rank: FILE.rank<R>.json, each
 *                   process its own rank's)
 * A bad key or value fails at once with a message. The caller owns *out
 * (cf_options_destroy); it keeps a pointer to ctx. */
typedef struct cf_options cf_options;
cf_status cf_options_create(cf_context *ctx, cf_options **out);
cf_status cf_options_set(cf_options *o, const char *key, const char *value);
void cf_options_destroy(cf_options *o);

/* Verify g against the target, run pipeline ("default", "O0" - also "" and
 * "-O0" -, or a comma list of pass names; NULL: the "passes" option, else
 * "default") with the options (opt may be NULL), and verify the result
 * again. g is changed in
 * place (buckets replace the collectives they fuse). */
cf_status cf_graph_run_pipeline(cf_graph *g, const char *pipeline, const cf_options *opt);

/* A compiled graph ready to run: its schedule, memory plan and kernels. */
typedef struct cf_executable cf_executable;

/* Plan g for running with the options' ranks, target, deterministic, algo,
 * timeout, seed and max_memory (opt may be NULL), verifying g first; no
 * passes are run (cf_graph_run_pipeline does that). CF_ERR_INVALID, with the
 * sizes, when one rank's memory exceeds max_memory or what the machine has
 * available (cf_executable_run checks every rank's together). The caller
 * owns *out (cf_executable_destroy), which holds the plan and its kernels.
 *
 * g is held, not copied, and the plan reads it when it runs. Hence:
 *  - Changing g makes *out stale: every call that changes a graph (adding a
 *    node or group, setting an attribute or the world size, running passes
 *    or a pipeline, or creating an executable with another "ranks") bumps
 *    the graph's generation, which the executable recorded when it was
 *    made. A stale executable refuses to run with CF_ERR_USAGE and a
 *    message (cf_executable_check says so without running), its io queries
 *    answer as for an index out of range, and it can only be destroyed.
 *    Verifying g (cf_graph_verify, or creating another executable with the
 *    same ranks) is no change: several executables of one graph may coexist.
 *  - cf_graph_destroy(g) while *out exists releases the caller's handle
 *    only: the graph lives on until the last executable made from it is
 *    destroyed, and those keep running. */
cf_status cf_executable_create(cf_graph *g, const cf_options *opt, cf_executable **out);
void cf_executable_destroy(cf_executable *e);
/* CF_OK while e's graph is as it was when e was made; CF_ERR_USAGE with a
 * message once it has changed (see cf_executable_create). */
cf_status cf_executable_check(const cf_executable *e);
/* Ranks one run has (the world size). */
int cf_executable_ranks(const cf_executable *e);

/* The executable's inputs (its Input nodes) and outputs (its Output nodes),
 * each numbered 0.. in graph order; the k of cf_executable_run's arrays. */
typedef enum cf_io {
  CF_IO_INPUT = 0,
  CF_IO_OUTPUT = 1,
} cf_io;
size_t cf_executable_io_count(const cf_executable *e, cf_io io);
/* Index of the input/output named name, -1 when none. */
int cf_executable_io_find(const cf_executable *e, cf_io io, const char *name);
/* Name (owned by the graph), dtype name (static), shape (writes dims[0..rank)
 * into dims[CF_MAX_DIMS], returns rank, -1 when k is out of range) and size
 * in bytes of input/output k. */
const char *cf_executable_io_name(const cf_executable *e, cf_io io, size_t k);
const char *cf_executable_io_dtype(const cf_executable *e, cf_io io, size_t k);
int cf_executable_io_shape(const cf_executable *e, cf_io io, size_t k, int64_t *dims);
size_t cf_executable_io_bytes(const cf_executable *e, cf_io io, size_t k);
/* 1 when a run uses the caller's buffer of input/output k in place (an input
 * read where it lies; an output produced straight into the caller's buffer),
 * 0 when it copies: an input that is a member of a fused bucket is copied
 * into the bucket (a bucket is one contiguous buffer), an output that is a
 * member of a bucket is copied out of it, as is an output that is directly
 * an Input or Constant or that an earlier output already has. A bucket
 * member is in place once its bucket buffer is bound on every rank
 * (cf_executable_bucket_bind) and the caller's buffer is its view there
 * (cf_executable_io_bucket), or NULL. */
int cf_executable_io_in_place(const cf_executable *e, cf_io io, size_t k);

/* ================= bucket buffers (api/api.c) ================= */

/* A bucket is a fused collective of several members: one input buffer that
 * holds its member inputs at their byte offsets and one output buffer that
 * holds its member results, each moved in one call. A framework that
 * allocates its gradients as views into the input buffer and reads the
 * averages from views into the output buffer (PyTorch DDP's
 * gradient_as_bucket_view) makes no copies: bind the buckets' buffers, then
 * pass the views (or NULL) as the members' inputs[] and outputs[].
 *
 * Buckets are numbered 0 .. cf_executable_bucket_count - 1 in schedule
 * order; name: the fused node's (owned by the graph); bytes: the whole
 * input (CF_IO_INPUT) or output (CF_IO_OUTPUT) buffer, 0 when out of range. */
size_t cf_executable_bucket_count(const cf_executable *e);
const char *cf_executable_bucket_name(const cf_executable *e, size_t b);
size_t cf_executable_bucket_bytes(const cf_executable *e, size_t b, cf_io io);
/* The bucket whose input (io CF_IO_INPUT) or output buffer holds input /
 * output k, and its byte offset there in *offset (may be NULL); -1 (offset
 * 0) when it lies in none: it is not a member, or its value is copied into
 * a bucket because an earlier bucket holds it. */
int cf_executable_io_bucket(const cf_executable *e, cf_io io, size_t k, size_t *offset);
/* Bind bucket b's input or output buffer on rank to buffer: the caller's,
 * cf_executable_bucket_bytes bytes aligned to 64, which stays the caller's
 * and must outlive the runs (bind another to replace it); or NULL for the
 * executable's own, zeroed, allocated once and freed with the executable.
 * From then on every run keeps that bucket's members there: a member
 * input whose buffer is its view (the buffer plus its offset) or NULL on
 * every rank is read where it lies (not made from the seed), a member
 * output whose buffer is its view or NULL is left there, and any other
 * buffer is copied in or out as before. The run writes the input buffer
 * only by such copies. While every bucket is bound on every rank,
 * cf_executable_run's arenas keep no room for the buckets. CF_ERR_USAGE for a bucket, rank or io
 * out of range or a misaligned buffer. */
cf_status cf_executable_bucket_bind(cf_executable *e, int rank, size_t b, cf_io io, void *buffer);
/* The buffer bound to bucket b's input/output on rank, NULL when none. */
void *cf_executable_bucket_buffer(const cf_executable *e, int rank, size_t b, cf_io io);

/* Run every rank in this process (threads transport) once.
 * inputs[r * n_in + k] is input k on rank r: cf_executable_io_bytes(k) bytes
 * of C-order elements of its dtype (float16/bfloat16 as raw 16-bit words),
 * aligned to the element size. inputs NULL, or NULL for input k on every
 * rank, makes that input's data from the "seed" option (reproducible,
 * different per rank). Inputs are only read, and only during the call.
 * outputs[r * n_out + j] receives output j of rank r (same size rules); a
 * NULL entry (or outputs NULL) skips it. Every output is written before the
 * call returns; while it runs, the contents of output buffers are
 * unspecified. Buffers stay the caller's. An output buffer may not overlap
 * any other buffer; input buffers may be shared (one parameter tensor for
 * every rank). */
cf_status cf_executable_run(cf_executable *e, const void *const *inputs, void *const *outputs);
/* Run one rank of a multi-process run (the MPI transport, or with the
 * option backend "shm" the shm world, docs/api.md): every process
 * of an MPI job (mpirun -np RANKS) creates the same executable and calls
 * this with its own rank of MPI_COMM_WORLD; inputs[k] / outputs[j] are that
 * rank's buffers, with cf_executable_run's rules (NULL inputs come from the
 * seed as they would for that rank there, so both runs agree). Calls on the
 * ranks pair up in order: every rank makes the same calls.
 * The first call joins the job: when MPI is not initialized yet, collfuse
 * initializes it (MPI_THREAD_MULTIPLE) and finalizes it when this
 * executable is destroyed; a process that runs more than one executable
 * over MPI, or uses MPI itself, initializes MPI before (at least
 * MPI_THREAD_SERIALIZED) and finalizes it after, as frameworks do.
 * CF_ERR_USAGE when the job's size is not the executable's rank count or
 * rank is not this process's. A failure (a mismatch between ranks, a rank
 * that stops, the "timeout" option) stops every rank's call with
 * CF_ERR_RUNTIME and the same message; the executable then refuses further
 * runs. Waits inside MPI's own collectives (algo "mpi-native") cannot be
 * interrupted: there a timeout ends the job with MPI_Abort. On the shm
 * world the caller's inputs are copied into the world's memory before the
 * run and the results out after it, so there an output may be the same
 * buffer as an input (an in-place collective); under MPI it may not. */
cf_status cf_executable_run_rank(cf_executable *e, int rank, const void *const *inputs,
                                 void *const *outputs);
/* A thread of the caller's that runs cf_executable_start_rank's runs one
 * after another, in the order they were started, while the caller goes on
 * (a DDP rank hands each gradient bucket over as the backward pass makes
 * it). Every rank starts the same runs in the same order, as with
 * cf_executable_run_rank; runs that must keep an order between them
 * (several executables of one job) go to one runner. ctx is for the
 * error only. cf_runner_wait returns once every run started on r has
 * ended (its callback returned); cf_runner_destroy waits so too, then
 * ends the thread. */
typedef struct cf_runner cf_runner;
cf_status cf_runner_create(cf_context *ctx, cf_runner **out);
void cf_runner_wait(cf_runner *r);
void cf_runner_destroy(cf_runner *r);
/* A run's end: status is cf_executable_run_rank's, message its failure's
 * text (NULL on success; valid during the call only). Called on the
 * runner's thread: what it does delays the runs queued after it. */
typedef void (*cf_run_done_fn)(void *user, cf_status status, const char *message);
/* cf_executable_run_rank(e, rank, inputs, outputs) on r's thread, after
 * the runs started on r before it; returns at once. CF_OK: queued, and
 * done(user, ...) is called exactly once when the run has ended (outputs
 * written); the arrays are copied, the buffers they point to must stay
 * untouched until then. Anything else (a changed graph, a rank out of
 * range, no memory): nothing was queued and done is not called. Don't call
 * cf_executable_run_rank on e while runs of it are queued (cf_runner_wait
 * first); cf_executable_destroy waits for them (so neither it nor
 * cf_runner_wait/_destroy may be called from done). Under MPI the runner's
 * thread makes the MPI calls: MPI at least MPI_THREAD_SERIALIZED (what
 * collfuse initializes is MPI_THREAD_MULTIPLE). */
cf_status cf_executable_start_rank(cf_executable *e, cf_runner *r, int rank,
                                   const void *const *inputs, void *const *outputs,
                                   cf_run_done_fn done, void *user);
/* Wall time of the last successful run in milliseconds (rank 0's, or this
 * rank's for cf_executable_run_rank); 0 before the first. */
double cf_executable_last_time_ms(const cf_executable *e);
/* Copies of whole tensors the last successful run made (every rank of
 * cf_executable_run, this rank of cf_executable_run_rank): caller inputs
 * copied in, values copied into a bucket, results copied out; their bytes
 * in *bytes (may be NULL). 0 before the first run, and 0 for a DP step
 * whose gradients and averages are bucket views. */
size_t cf_executable_last_copies(const cf_executable *e, size_t *bytes);
/* Where cf_executable_run writes each run's timeline from now on (a Chrome
 * trace, as the "trace" option; NULL: nowhere). A copy of path is kept. */
cf_status cf_executable_set_trace(cf_executable *e, const char *path);

/* The launcher that started this process, as the "backend" shm world
 * finds it: the first of collfuse run (COLLFUSE_RANK, COLLFUSE_WORLD_SIZE),
 * torchrun (RANK, WORLD_SIZE), mpirun (OMPI_COMM_WORLD_RANK, _SIZE),
 * mpiexec (PMI_RANK, PMI_SIZE) and srun (SLURM_PROCID, SLURM_NTASKS) whose
 * rank and size variables are both set. *name is that launcher's name
 * ("collfuse run", "torchrun", "mpirun", "mpiexec", "srun"; a static
 * string), NULL when none is; *rank and *size what it says (not checked
 * against each other), *local the processes it says are on this host
 * (LOCAL_WORLD_SIZE, OMPI_COMM_WORLD_LOCAL_SIZE; -1 when it does not say),
 * *mpi 1 when mpirun's or mpiexec's rank and size are set, whichever comes
 * first (an MPI world can join the job), else 0. env: "NAME=VALUE" strings
 * ending with NULL, read instead of the process's environment (NULL: the
 * environment). CF_ERR_USAGE, naming the variables, when the rank or size
 * is not a whole number. */
cf_status cf_launcher_find(cf_context *ctx, const char *const *env, const char **name, int *rank,
                           int *size, int *local, int *mpi);

/* Memory of this process's that the shm world's peers may read and write
 * in place (docs/executor.md): bytes at base, the start of a mapping of
 * the shareable file fd (a memfd, or an unlinked /dev/shm file such as the
 * one torch's share_memory_() moves a CPU tensor's storage into) from its
 * offset 0, MAP_SHARED. From then on a cf_executable_run_rank on the shm
 * world uses a caller buffer (input, output or bound bucket) that lies
 * wholly in registered memory where it lies instead of copying it into the
 * world's memory and back (cf_executable_last_copies counts none for it),
 * and a plain AllReduce given one such buffer as input and output runs in
 * place there. The peers open the file as /proc/<pid>/fd/<fd> on first use
 * (the same user: ptrace read access) and map it; one that cannot fails
 * every rank's run with CF_ERR_RUNTIME naming both ranks. fd and the
 * mapping must stay open until cf_shm_unregister(base), which waits for
 * nothing: unregister between runs. Registering base again (a new file, or
 * a new size) replaces the old registration; the peers map the new one
 * when they next meet it. The registrations are the process's (every
 * world it joins), at most 128 at once. CF_ERR_USAGE for no memory, a
 * descriptor that is no file of at least bytes, too many registrations,
 * or (unregister) a base not registered. */
cf_status cf_shm_register(cf_context *ctx, void *base, size_t bytes, int fd);
cf_status cf_shm_unregister(cf_context *ctx, void *base);
/* A new shareable file of bytes of shared memory for memory to register
 * (cf_shm_register): zeros, sparse (a page costs memory once touched), in
 * 2 MiB pages where Linux gives shared memory them, as the shm world's
 * heaps get them (docs/executor.md). Map it MAP_SHARED from offset 0.
 * Registered memory in 2 MiB pages costs the peers no resident memory
 * between collectives: a peer maps the pages a collective hands it and
 * lets them go when it is done with them (in 4 KiB pages they stay mapped
 * in every peer that used them). *fd: the descriptor, the caller's to
 * close (-1 on failure). CF_ERR_USAGE for 0 bytes, CF_ERR_NO_MEMORY (the
 * system's reason in the message) when no file could be made. */
cf_status cf_shm_memory(cf_context *ctx, size_t bytes, int *fd);

#ifdef __cplusplus
}
#endif
#endif /* COLLFUSE_COLLFUSE_H */
