/* algo.h - the collective algorithms (coll.c, algo_*.c): which ones exist,
 * how AUTO picks one, and how a collective call runs on one rank. They are
 * written only against the runtime contract (runtime.h: a device and a
 * transport endpoint), so every transport runs every algorithm.
 */
#ifndef COLLFUSE_EXECUTOR_ALGO_H
#define COLLFUSE_EXECUTOR_ALGO_H

#include "../codegen/codegen.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

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
const char *cf_algo_name(cf_algo a);
int cf_algo_parse(const char *s); /* -1 when unknown */

/* The runtime contract's types (runtime.h, which includes this header for
 * cf_algo). */
typedef struct cf_comm cf_comm;
typedef struct cf_device cf_device;
typedef struct cf_coll_desc cf_coll_desc;
typedef struct cf_coll_call cf_coll_call;

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

#endif /* COLLFUSE_EXECUTOR_ALGO_H */
