/* bench.h - the peers `collfuse bench reduce` runs collfuse's kernels
 * against (library collfuse_bench_peers). Only bench/reduce_peers.c sees
 * mpi.h; everything else reaches MPI through these few calls.
 */
#ifndef COLLFUSE_BENCH_H
#define COLLFUSE_BENCH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The element types and ops the peers cover (the peers do not depend on
 * collfuse's IR; tools/bench_reduce.c maps its cf_dtype/cf_reduction). */
typedef enum cf_bench_dtype {
  CF_BENCH_F32,  /* float */
  CF_BENCH_F16,  /* IEEE binary16, as uint16_t bits */
  CF_BENCH_BF16, /* bfloat16, as uint16_t bits */
  CF_BENCH_I8    /* int8_t */
} cf_bench_dtype;

typedef enum cf_bench_op { CF_BENCH_SUM, CF_BENCH_MAX } cf_bench_op;

/* ---- c_loop.c: the plain C loop, built -O3 -march=native ---- */

/* dst[i] = op(src[0][i], ..., src[k-1][i]) for 2 <= k <= 8, out of place,
 * in one pass: the auto-vectorised loop UCC's CPU executor relies on.
 * float16 and bfloat16 are computed in float and rounded to nearest even
 * once; int8 sums wrap. False for k outside 2..8. */
bool cf_cloop_nary(cf_bench_dtype dt, cf_bench_op op, void *dst, const void *const *src, int k,
                   int64_t n);

/* ---- reduce_peers.c: OpenMPI's MPI_Reduce_local ---- */

/* MPI_Init as a singleton (no mpirun). As root, OpenMPI refuses to start
 * unless OMPI_ALLOW_RUN_AS_ROOT and OMPI_ALLOW_RUN_AS_ROOT_CONFIRM are set;
 * they are set here when unset. False with a reason when MPI_Init fails
 * (OpenMPI may also abort the process instead: run this in a child). */
bool cf_mpi_init(char *why, size_t len);
void cf_mpi_finalize(void);
/* The library's version, first line ("Open MPI v4.1.4, ..."). */
void cf_mpi_version(char *buf, size_t len);
/* Whether MPI has a predefined datatype and op for (dt, op). */
bool cf_mpi_supports(cf_bench_dtype dt, cf_bench_op op);
/* MPI_Reduce_local(in, inout, n, dt, op): inout[i] = inout[i] op in[i].
 * Returns false with MPI's message when the call fails. */
bool cf_mpi_reduce_local(const void *in, void *inout, int64_t n, cf_bench_dtype dt, cf_bench_op op,
                         char *why, size_t len);

#endif /* COLLFUSE_BENCH_H */
