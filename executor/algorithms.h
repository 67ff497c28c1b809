/* algorithms.h - the collective algorithms (algo_allreduce.c,
 * algo_rooted.c, algo_alltoall.c) and what they are written with: the
 * contract between algo.c's table rows and the files that run them (in the
 * manner of ggml's ggml-backend-impl.h).
 *
 * An algorithm sees a transport endpoint, a device and one call
 * (runtime.h), the ordered reduction every algorithm uses (reduce.c) and
 * the row numbers it sizes scratch for; never the table, the policies or
 * the selection (algo.h), which sit above it and list it. algo.h includes
 * this header, so whoever uses the table sees these too.
 */
#ifndef CF_EXECUTOR_ALGORITHMS_H
#define CF_EXECUTOR_ALGORITHMS_H

#include "../ir/trace.h"
#include "runtime.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The rows the selection rules and the tests name: indices into
 * cf_algo_table (a row added at its end needs no constant). */
typedef enum cf_algo {
  CF_ALGO_DIRECT,     /* every rank reduces everything from every peer: 1 step; every kind */
  CF_ALGO_RSAG,       /* direct reduce-scatter + direct all-gather (rank order) */
  CF_ALGO_RING,       /* ring reduce-scatter + ring all-gather */
  CF_ALGO_RD,         /* recursive doubling (powers of two; else direct) */
  CF_ALGO_MPI_NATIVE, /* the transport's own collectives (MPI's, the native slot): every kind */
  CF_ALGO_POOL,       /* rsag in pieces taken from a shared counter by whichever rank runs */
} cf_algo;

/* A large AllReduce runs as segments of this many bytes (coll.c). */
#define CF_ALGO_SEGMENT_BYTES ((int64_t)4 << 20)

/* ---------------- reduce.c: what every algorithm reduces with ---------------- */

/* The kernels any algorithm may launch for d on n ranks (at most max, 16 is
 * enough); the plan prepares them before ranks start. Returns how many. */
int cf_coll_kernels(const cf_coll_desc *d, int n, cf_kernel_key *keys, int max);
/* Whether an AllReduce of d on n ranks writes its outputs with streaming
 * kernels (cf_coll_reduce_to): outputs of CF_STREAM_MIN_OUTPUT or more
 * in a working set (its own n inputs and n outputs, or the larger
 * working_set around it) that cf_streams finds too large for the cache.
 * cf_coll_kernels lists the streaming kernel wherever it may be used,
 * whatever the working set. */
bool cf_coll_streams(const cf_coll_desc *d, int n, int64_t working_set);
/* The bytes an AllReduce of d on n ranks touches, its n inputs and n
 * outputs, or `around` when that is larger. */
int64_t cf_coll_working_set(const cf_coll_desc *d, int n, int64_t around);
/* cf_coll_streams of the call and its working_set. */
bool cf_coll_call_streams(const cf_coll_call *call);
/* dst = op(src[0], ..., src[k-1]) over n elements, in that order (for the
 * algorithms). final: mean divides by the group size (else sums). */
void cf_coll_reduce(cf_device *dev, const cf_coll_call *call, void *dst, const void *const *src,
                    int k, int64_t n, bool final);
/* cf_coll_reduce(..., call->n, n, true) written to dst[0..outs), the
 * sources read once: call->n destinations, or one with stream; with
 * streaming stores when stream (only where cf_coll_streams holds).
 * Bitwise the same result in every destination. dst[outs - 1] is this
 * rank's own: a device without the kernel reduces there and copies. */
void cf_coll_reduce_to(cf_device *dev, const cf_coll_call *call, void *const *dst, int outs,
                       const void *const *src, int64_t n, bool stream);

/* ---------------- algo_allreduce.c: AllReduce algorithms ---------------- */

cf_status cf_algo_direct(cf_comm *c, cf_device *dev, const cf_coll_call *call);
cf_status cf_algo_rsag(cf_comm *c, cf_device *dev, const cf_coll_call *call);
cf_status cf_algo_ring(cf_comm *c, cf_device *dev, const cf_coll_call *call);
cf_status cf_algo_rd(cf_comm *c, cf_device *dev, const cf_coll_call *call);
cf_status cf_algo_pool(cf_comm *c, cf_device *dev, const cf_coll_call *call);
/* Scratch row a needs beyond its own for an in-place call (desc.in_place). */
size_t cf_allreduce_in_place_scratch(const cf_coll_desc *d, int n, int a);

/* ---------------- algo_rooted.c: the other collectives (rank order, direct) ---------------- */

cf_status cf_algo_reduce_scatter(cf_comm *c, cf_device *dev, const cf_coll_call *call);
/* Scratch row a needs beyond its own for an in-place ReduceScatter (desc.in_place). */
size_t cf_rsag_in_place_scratch(const cf_coll_desc *d, int n, int a);
cf_status cf_algo_all_gather(cf_comm *c, cf_device *dev, const cf_coll_call *call);
cf_status cf_algo_reduce(cf_comm *c, cf_device *dev, const cf_coll_call *call);
cf_status cf_algo_broadcast(cf_comm *c, cf_device *dev, const cf_coll_call *call);
/* Each rank shows its descriptor to the next rank of the group (an empty
 * message), for collectives whose ranks do not all meet: a disagreement is
 * then an error naming both, not a wait for a message that never comes. */
cf_status cf_coll_handshake(cf_comm *c, const cf_coll_call *call);

/* ---------------- algo_alltoall.c: AllToAll and CollectivePermute (direct) ---------------- */

cf_status cf_algo_alltoall(cf_comm *c, cf_device *dev, const cf_coll_call *call);
cf_status cf_algo_permute(cf_comm *c, cf_device *dev, const cf_coll_call *call);
/* Their staging (in bytes) when the transport is not zero copy. */
size_t cf_alltoall_scratch_bytes(const cf_coll_desc *d, int n, bool zero_copy);

/* An algorithm's phase for the trace (ir/trace.c), on the calling thread's
 * lane: t = cf_algo_phase_begin() before it, cf_algo_phase(name, t) after;
 * nothing but a test of cf_trace_here when the run is not traced. */
static inline int64_t cf_algo_phase_begin(void) { return cf_trace_here ? cf_trace_clock() : 0; }
static inline void cf_algo_phase(const char *name, int64_t t0) {
  if (!cf_trace_here) return;
  cf_trace_record(cf_trace_here,
                  &(cf_trace_ev){.t0 = t0, .t1 = cf_trace_clock(), .name = name, .cat = "algorithm"});
}

#endif /* CF_EXECUTOR_ALGORITHMS_H */
