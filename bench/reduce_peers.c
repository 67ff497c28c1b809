/* reduce_peers.c - OpenMPI's MPI_Reduce_local, the peer `collfuse bench
 * reduce` sets against collfuse's accumulate kernels. The only file of the
 * benchmarks that includes mpi.h (STYLE: MPI stays behind a small C API).
 *
 * The bench is a plain process, so MPI starts as a singleton. Errors return
 * instead of aborting once MPI is up (MPI_ERRORS_RETURN); a failing
 * MPI_Init may still end the process, which is why the bench calls this in
 * a child process of its own.
 */
#include "bench.h"

#include <limits.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void mpi_message(int rc, const char *what, char *why, size_t len) {
  char msg[MPI_MAX_ERROR_STRING];
  int n = 0;
  if (MPI_Error_string(rc, msg, &n) != MPI_SUCCESS) snprintf(msg, sizeof msg, "error %d", rc);
  snprintf(why, len, "%s: %s", what, msg);
}

bool cf_mpi_init(char *why, size_t len) {
  int done = 0;
  MPI_Initialized(&done);
  if (done) return true;
  /* OpenMPI refuses to run as root without both; the caller's values win */
  setenv("OMPI_ALLOW_RUN_AS_ROOT", "1", 0);
  setenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1", 0);
  int rc = MPI_Init(NULL, NULL);
  if (rc != MPI_SUCCESS) {
    mpi_message(rc, "MPI_Init failed", why, len);
    return false;
  }
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  return true;
}

void cf_mpi_finalize(void) {
  int init = 0, fin = 0;
  MPI_Initialized(&init);
  MPI_Finalized(&fin);
  if (init && !fin) MPI_Finalize();
}

void cf_mpi_version(char *buf, size_t len) {
  char v[MPI_MAX_LIBRARY_VERSION_STRING];
  int n = 0;
  if (MPI_Get_library_version(v, &n) != MPI_SUCCESS) v[0] = 0;
  v[strcspn(v, "\n")] = 0;
  snprintf(buf, len, "%s", v);
}

static bool mpi_type(cf_bench_dtype dt, cf_bench_op op, MPI_Datatype *t, MPI_Op *o) {
  switch (dt) {
  case CF_BENCH_F32: *t = MPI_FLOAT; break;
  case CF_BENCH_I8: *t = MPI_INT8_T; break;
  default: return false; /* MPI 3.1 has no float16 or bfloat16 */
  }
  *o = op == CF_BENCH_MAX ? MPI_MAX : MPI_SUM;
  return true;
}

bool cf_mpi_supports(cf_bench_dtype dt, cf_bench_op op) {
  MPI_Datatype t;
  MPI_Op o;
  return mpi_type(dt, op, &t, &o);
}

bool cf_mpi_reduce_local(const void *in, void *inout, int64_t n, cf_bench_dtype dt, cf_bench_op op,
                         char *why, size_t len) {
  MPI_Datatype t;
  MPI_Op o;
  if (!mpi_type(dt, op, &t, &o)) {
    snprintf(why, len, "MPI has no datatype for this element type");
    return false;
  }
  int size = 0;
  MPI_Type_size(t, &size);
  /* counts are int: larger buffers go in INT_MAX-element pieces */
  for (int64_t i = 0; i < n;) {
    int count = n - i > INT_MAX ? INT_MAX : (int)(n - i);
    int rc = MPI_Reduce_local((const char *)in + i * size, (char *)inout + i * size, count, t, o);
    if (rc != MPI_SUCCESS) {
      mpi_message(rc, "MPI_Reduce_local failed", why, len);
      return false;
    }
    i += count;
  }
  return true;
}
