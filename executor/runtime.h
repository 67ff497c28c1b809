/* runtime.h - the executor's runtime contract: what a new device backend,
 * transport or world implements (in the manner of ggml's
 * ggml-backend-impl.h), and nothing else.
 *
 * A device backend owns buffers and launches the generated reduction
 * kernels; a transport moves bytes between ranks with two-sided, in-order
 * messages; a world makes the ranks exist (threads of this process, or the
 * processes of an MPI job) and hands out each rank's transport endpoint.
 * The collective algorithms (algo.h) are written only against a device and
 * a transport, so the threads transport (single copy: a receiver reads the
 * sender's buffer in place) and the MPI transport (a receiver gets a copy
 * in its staging buffer) run the same algorithms. Each contract is a
 * struct of function pointers plus `void *impl` (STYLE); optional slots are
 * marked and only ever called through wrappers that fall back.
 */
#ifndef COLLFUSE_EXECUTOR_RUNTIME_H
#define COLLFUSE_EXECUTOR_RUNTIME_H

#include "../codegen/codegen.h"
#include "../ir/ir.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* ================= tensors ================= */

typedef struct cf_tensor {
  void *data; /* host memory (CPU device), count * dtype size bytes */
  cf_dtype dtype;
  cf_shape shape;
  int64_t count; /* elements */
} cf_tensor;

/* ================= device backends (backends/) ================= */

typedef struct cf_device cf_device;
/* A device backend: buffers and kernel launches (STYLE: a vtable + impl).
 * The slots up to destroy are required; the rest are optional (NULL on the
 * CPU device, whose buffers are host memory) and only ever called through
 * the cf_device_* wrappers (backends/backends.h), which fall back to host behaviour. */
typedef struct cf_device_ops {
  const char *name;                           /* "cpu", "cuda" */
  void *(*alloc)(cf_device *d, size_t bytes); /* zeroed, 64-aligned; NULL on OOM */
  void (*free)(cf_device *d, void *p);
  void (*copy)(cf_device *d, void *dst, const void *src, size_t bytes);
  /* Make key's kernel launchable (JIT/cache); called before ranks start. */
  cf_status (*prepare)(cf_device *d, const cf_kernel_key *key);
  /* Launch a prepared kernel with its ABI's arguments (codegen.h). */
  void (*nary)(cf_device *d, const cf_kernel_key *key, void *dst, const void *const *src, int64_t n,
               double div);
  void (*acc)(cf_device *d, const cf_kernel_key *key, void *dst, const void *src, int64_t n);
  void (*scale)(cf_device *d, const cf_kernel_key *key, void *dst, int64_t n, double div);
  void (*sync)(cf_device *d);
  void (*destroy)(cf_device *d);
  /* ---- optional ---- */
  /* A copy into a destination this rank does not read again soon (a
   * collective's output, a peer's buffer): streaming stores that skip the
   * cache where the device has them. NULL: copy. */
  void (*copy_stream)(cf_device *d, void *dst, const void *src, size_t bytes);
  /* A prepared n-ary kernel whose key has outs (codegen.h): the reduction
   * of src, written to dst[0..key->outs) (with streaming stores for a
   * stream key). NULL: the device has none (cf_coll_reduce_to reduces once
   * and copies). */
  void (*nary_to)(cf_device *d, const cf_kernel_key *key, void *const *dst,
                  const void *const *src, int64_t n, double div);
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
                       const cf_tensor *in, cf_tensor *out, int rank, uint64_t seed,
                       unsigned flags);
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

/* ================= collectives: what ranks exchange ================= */

/* What a rank says about the collective it is running; every message of a
 * collective carries it and the receiver compares it with its own, so a
 * mismatch is an error naming both ranks and both values, never a hang. */
typedef struct cf_coll_desc {
  int64_t seq; /* collectives of this group so far on this rank */
  cf_op op;    /* base kind: AllReduce, AllGather, ... */
  cf_dtype dtype;
  int64_t count; /* elements per rank's input */
  int red;       /* cf_reduction, -1 when none */
  int root;      /* -1 when none; AllToAll: split_dimension */
  int layout;    /* AllGather layout, -1 otherwise; AllToAll: concat_dimension;
                    CollectivePermute: a hash of its pairs */
  /* How the ranks move the data, so ranks that would exchange different
   * messages (`--algo ring` on one, rsag on another; a profile's choice; a
   * fused op's pipeline) are named, never mixed into wrong sums. The plan
   * resolves all three alike on every rank of one plan (the threads world);
   * ranks of an MPI job each build their own. --deterministic changes no
   * message, only which algorithm runs (algo) and how a rank computes. */
  int algo;        /* the row of cf_algo_table that runs the call (cf_coll_run sets it) */
  int64_t segment; /* AllReduce in segments: elements per segment; 0: one piece */
  int chunks;      /* a fused MatMul op's collective: the pipeline's chunks; 0 otherwise */
  const char *group;
  const char *node; /* node name (for messages only, not compared) */
  /* AllReduce: out is in (the plan gave both one block). The algorithms
   * then write a result only where no peer still reads this rank's input,
   * and scratch bytes count what that needs (not compared between ranks). */
  bool in_place;
} cf_coll_desc;

/* True when two ranks' descriptors of the same collective differ; text
 * then says so naming both ranks and both values, the lower rank first
 * whichever side asks, so both ranks of a mismatch print the same text.
 * NULL is a message of no collective (the checks before a run): it
 * differs from any descriptor. */
bool cf_coll_desc_mismatch(const cf_coll_desc *mine, int my_rank, const cf_coll_desc *theirs,
                           int their_rank, char *text, size_t len);
/* The text of a receive by rank me of bytes from rank peer, which sent got
 * (a transport's check; d, the collective received for, or NULL). */
void cf_coll_size_mismatch(char *text, size_t len, int me, size_t bytes, int peer, long long got,
                           const cf_coll_desc *d);

/* A member of an AllGather or ReduceScatter call, in elements: its input
 * at in + in_off and output at out + out_off; count is the elements of one
 * rank's block (AllGather: the member's input; ReduceScatter: its output). */
typedef struct cf_coll_seg {
  int64_t in_off, out_off, count;
} cf_coll_seg;

/* A member of an AllToAll of the array form (a plain AllToAll is one, a
 * FusedAllToAll one per member), in elements: block j of its input starts
 * at in_off + j * in_row and is made of rows of in_row elements, n * in_row
 * apart (cut along split_dimension); the block from rank i lands at out_off
 * + i * out_row in rows of out_row, n * out_row apart (placed along
 * concat_dimension). count: the elements of one block. */
typedef struct cf_a2a_part {
  int64_t in_off, out_off, count, in_row, out_row;
} cf_a2a_part;

/* One call of a collective on one rank. AllReduce, Reduce and Broadcast:
 * input and output of desc.count elements (a fused AllReduce bucket is one
 * flat call over the bucket). AllGather and ReduceScatter: the members in
 * segs (one for a plain op): AllGather writes rank p's member block at
 * out_off + p * count, ReduceScatter reads rank p's block me at in_off +
 * me * count. */
typedef struct cf_coll_call {
  cf_coll_desc desc;
  const int *ranks; /* world ranks of the group, in group order */
  int n;            /* group size */
  int me;           /* my index in ranks */
  const void *in;
  void *out;
  const cf_coll_seg *segs; /* AllGather, ReduceScatter; AllToAll's tuple form: one block per rank */
  int n_segs;
  const cf_a2a_part *a2a; /* AllToAll's array form: its members (algo_alltoall.c) */
  int n_a2a;
  const int *pairs;        /* CollectivePermute: target[0..n) then source[0..n), -1 none */
  void *scratch; /* algorithm scratch, scratch_bytes */
  size_t scratch_bytes;
  int algo;           /* resolved: a row of cf_algo_table (algo.h) */
  bool deterministic; /* reduce in rank order */
  int64_t working_set; /* bytes all ranks touch between two runs of this call (a plan's:
                           every rank's arena), which decides what stays in cache
                           (cf_coll_call_streams); 0: the call's own buffers */
} cf_coll_call;

typedef struct cf_comm cf_comm;
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
  const char *name; /* "threads", "mpi" */
  bool zero_copy;   /* recv() returns the sender's memory */
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
  /* Optional (NULL when absent: pool calls send_wait instead): as
   * send_wait, for a rank with nothing to do until its peers are done. It
   * sleeps at once instead of polling first, so that it leaves its CPU to
   * the ranks at work (pool's idle ranks where ranks outnumber cores). */
  cf_status (*send_sleep)(cf_comm *c);
  /* Optional (NULL when absent: pool calls recv instead): as recv, but it
   * sleeps at once instead of polling first, for a message from a rank
   * that shares this rank's CPU (pool's idle ranks where ranks outnumber
   * cores), whose sending the polling only puts off. */
  cf_status (*recv_sleep)(cf_comm *c, int peer, void *staging, size_t bytes, const cf_coll_desc *d,
                          const void **data);
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
  /* Optional (NULL when absent; algo.c's mpi-native row calls it, only for
   * calls whose algo is CF_ALGO_MPI_NATIVE, and reports its absence as an error): run the
   * whole collective with the transport's own implementation (MPI's
   * collectives), within the scratch cf_coll_scratch_bytes gives
   * CF_ALGO_MPI_NATIVE. */
  cf_status (*native)(cf_comm *c, cf_device *dev, const cf_coll_call *call);
  /* Optional (NULL when absent; called through cf_comm_pulse's pulse, from
   * any thread of the rank): a sign of life of this rank in a long local
   * phase (its inputs' fill, a first touch, --verify). It moves a counter
   * of the rank's that its peers read while they wait for it, and a wait
   * counts its timeout from the last move: a peer that works is waited for,
   * one that is silent for the timeout is given up on. */
  void (*beat)(cf_comm *c);
  /* Optional (NULL when absent; algo_allreduce.c's rsag_put calls it): this
   * rank is done, for the rest of the call, with [p, p + bytes) of the
   * memory a message of peer's handed it (recv's *data onwards), so a
   * transport that maps its peers' memory may drop those pages from this
   * rank's page tables now instead of at the message's release (the shm
   * world, on a peer's memory in 2 MiB pages: the whole pages in the
   * range). Called as the work goes, with all of the message done so far,
   * so that a rank holds about a page of each peer's memory at a time. */
  void (*let_go)(cf_comm *c, int peer, const void *p, size_t bytes);
} cf_comm_ops;

struct cf_comm {
  const cf_comm_ops *ops;
  cf_context *ctx; /* this rank's context for messages: set by whoever runs the rank */
  int rank, size;  /* world */
  /* the cores the world's ranks share where they are fewer than its ranks
   * (shm: 4 processes on 2 cores), else 0 */
  int cores;
  void *impl;
};

/* ================= worlds: how ranks come to exist (transports/) ================= */

typedef struct cf_world cf_world;

/* A group of ranks a run's collectives use (cf_world_ops.native_groups). */
typedef struct cf_world_group {
  const char *name; /* the graph's group (cf_coll_desc.group) */
  const int *ranks; /* world ranks in group order, part after part */
  int n;            /* ranks in one part */
  int n_parts;      /* a partitioned group's parts; each rank is in one */
} cf_world_group;

/* A world: the ranks of a run and their endpoints. The threads world holds
 * every rank as a thread of this process; the MPI world is this process as
 * one rank of an mpirun job. Callers go through the cf_world_* wrappers
 * (transports/transports.h). */
typedef struct cf_world_ops {
  const char *name; /* "threads", "mpi" */
  /* A world of size ranks whose every wait gives up after timeout_s
   * seconds; messages go to ctx. A world whose size is not the caller's to
   * choose (MPI: mpirun's) takes size 0. */
  cf_status (*create)(cf_context *ctx, int size, double timeout_s, cf_world **out);
  /* Rank's endpoint (owned by w; rank in first .. first + local - 1). Its
   * messages go to comm->ctx, which whoever runs the rank sets. */
  cf_comm *(*comm)(cf_world *w, int rank);
  /* Free the world. exit_code != 0: this process failed and printed why
   * (MPI: it then ends within a few seconds even if a peer never
   * finalizes). Accepts NULL. */
  void (*destroy)(cf_world *w, int exit_code);
  /* ---- optional ---- */
  /* Rank's runner has returned (so a timeout can name who is gone). */
  void (*rank_left)(cf_world *w, int rank);
  /* The calling thread will run rank's work on lane (0: its compute, 1:
   * its collectives): the world may place it (threads: on CPUs of the
   * rank's own, see threads.c). */
  void (*rank_thread)(cf_world *w, int rank, int lane);
  /* What only a world of several processes answers (the wrappers give a
   * single process's answer where a slot is NULL). */
  /* Processes of the world on this process's host, this one included
   * (MPI: MPI_COMM_TYPE_SHARED): they share its memory and cores. */
  int (*host_processes)(const cf_world *w);
  /* This process's host name (a rank table is checked against it). */
  const char *(*host)(const cf_world *w);
  /* What `auto` means on this world, the same on every rank: a
   * cf_algo_policy (algo.h, which this contract does not include). */
  int (*auto_policy)(const cf_world *w);
  /* v[i] = the maximum of v[i] over every process (how the processes learn
   * what each found: a failed set-up, the largest errors); honours the
   * timeout and the abort flag. */
  cf_status (*max)(cf_world *w, double *v, int n);
  /* Fail every rank with text (this process could not even start its
   * rank, e.g. its plan failed). */
  void (*abort)(cf_world *w, const char *text);
  /* Make what the native comm slot needs for these groups (MPI: one
   * communicator each, made with MPI_Comm_create_group by its ranks): every
   * process calls it before the run with the same groups in the same
   * order; a group seen before, or the whole world, needs nothing. */
  cf_status (*native_groups)(cf_world *w, const cf_world_group *groups, int n);
  /* Host memory every rank of the world reads in place (zeroed, 64-aligned;
   * NULL: none left), for a rank's arena; free returns false for memory it
   * did not give. */
  void *(*alloc)(cf_world *w, size_t bytes);
  bool (*free)(cf_world *w, void *p);
  /* Whether every rank reads (and writes) [p, p + bytes) of this rank's in
   * place although alloc did not give it (the caller's memory, registered:
   * shm.c), so a run may use the caller's buffer there. */
  bool (*shares)(const cf_world *w, const void *p, size_t bytes);
} cf_world_ops;

struct cf_world {
  const cf_world_ops *ops;
  int size;         /* ranks in the world */
  int first, local; /* this process's ranks: first .. first + local - 1 */
  void *impl;
};

#endif /* COLLFUSE_EXECUTOR_RUNTIME_H */
