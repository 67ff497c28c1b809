/* transports/transports.h - the worlds collfuse has (threads, MPI), the
 * wrappers callers use instead of a world's slots, and what only the MPI
 * world answers (runtime.h holds the contract a world and its transport
 * implement). Tools never include mpi.h: these calls are the whole
 * interface.
 */
#ifndef COLLFUSE_EXECUTOR_TRANSPORTS_H
#define COLLFUSE_EXECUTOR_TRANSPORTS_H

#include "../runtime.h"

/* transports/threads.c: size ranks that are threads of this process, over
 * a single-copy transport (recv reads the sender's buffer in place). */
extern const cf_world_ops cf_world_threads;
/* transports/mpi.c: this process is one rank of an MPI job (mpirun), over
 * a duplicate of MPI_COMM_WORLD (size 0: mpirun's); not zero copy (recv
 * fills the staging buffer: plan with cf_run_options.staged). create calls
 * MPI_Init_thread (MPI_THREAD_MULTIPLE, at least SERIALIZED) unless MPI is
 * already initialized; destroy calls MPI_Finalize when create initialized
 * MPI. */
extern const cf_world_ops cf_world_mpi;

/* world.c: the slots, wrapped */
cf_status cf_world_create(cf_context *ctx, const cf_world_ops *ops, int size, double timeout_s,
                          cf_world **out);
cf_comm *cf_world_comm(cf_world *w, int rank);
/* No-op for a world without the slot. */
void cf_world_rank_left(cf_world *w, int rank);
/* Call from each thread that runs rank's work on lane (0: compute, 1:
 * collectives), before it starts. */
void cf_world_rank_thread(cf_world *w, int rank, int lane);
void cf_world_destroy(cf_world *w, int exit_code); /* accepts NULL */

/* transports/mpi.c: what only the MPI world answers. On any other world
 * (or NULL) each gives the answer of a single process: local size 1, host
 * "", AUTO, CF_OK with v unchanged, and no-ops. */
/* Ranks of the job on this node (MPI_COMM_TYPE_SHARED), and its name. */
int cf_mpi_local_size(const cf_world *w);
const char *cf_mpi_host(const cf_world *w);
/* What auto means on this MPI job (the same on every rank):
 * CF_POLICY_AUTO_MPI_SHM when every rank reaches every other through shared
 * memory (one node, and OpenMPI's btl list allows vader/sm), else
 * CF_POLICY_AUTO_MPI_NET. */
cf_algo_policy cf_mpi_auto(const cf_world *w);
/* For --algo mpi-native and CF_POLICY_AUTO_MPI_NET: one MPI communicator per
 * group of plan p's collectives (MPI_Comm_create_group, in plan order, so
 * every rank must call it with the same plan before running it). No-op for
 * other algorithms. */
struct cf_plan;
cf_status cf_mpi_prepare_native(cf_world *w, const struct cf_plan *p);
/* v[i] = the maximum of v[i] over every rank (for combining verification
 * results); honours the timeout and the abort flag. */
cf_status cf_mpi_max(cf_world *w, double *v, int n);
/* Fail every rank with text (e.g. this rank could not even build its plan). */
void cf_mpi_abort(cf_world *w, const char *text);
/* Test hook: this process SIGKILLs itself just before it sends its
 * (k+1)-th collective message (k < 0: off). */
void cf_mpi_test_kill(cf_world *w, int64_t k);

#endif /* COLLFUSE_EXECUTOR_TRANSPORTS_H */
