/* transports/transports.h - the worlds collfuse has (threads, MPI) and the
 * wrappers callers use instead of a world's slots (runtime.h holds the
 * contract a world and its transport implement). Tools and the API never
 * include mpi.h nor name an MPI call: a world's slots, through these
 * wrappers, are the whole interface.
 */
#ifndef COLLFUSE_EXECUTOR_TRANSPORTS_H
#define COLLFUSE_EXECUTOR_TRANSPORTS_H

#include "../algo.h"
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
/* What only a world of several processes answers (runtime.h's slots). On a
 * world without the slot (or NULL) each gives the answer of a single
 * process: 1, "", CF_POLICY_AUTO, CF_OK with v unchanged, a no-op and
 * CF_OK. The MPI world: the job's processes on this node and its name;
 * CF_POLICY_AUTO_MPI_SHM when every rank reaches every other through shared
 * memory (one node, and OpenMPI's btl list allows vader/sm), else
 * CF_POLICY_AUTO_MPI_NET; an MPI communicator per group (executor.h's
 * cf_exec_prepare hands it a plan's groups). */
int cf_world_host_processes(const cf_world *w);
const char *cf_world_host(const cf_world *w);
cf_algo_policy cf_world_auto(const cf_world *w);
cf_status cf_world_max(cf_world *w, double *v, int n);
void cf_world_abort(cf_world *w, const char *text);
cf_status cf_world_native_groups(cf_world *w, const cf_world_group *groups, int n);

#endif /* COLLFUSE_EXECUTOR_TRANSPORTS_H */
