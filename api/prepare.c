/* prepare.c - a run's one set-up, shared by `collfuse run` (tools/run.c)
 * and the embedding API's executables (api.c).
 *
 * Before a graph is planned and run, the same few things are decided for
 * every job, in one order: which world the ranks live in (MPI's, joined
 * here, or threads of this process), the profile that auto's measured rules
 * and --split auto's costs come from (read once per run), how many BLAS
 * threads this process's GEMMs get when it shares its host with the job's
 * other processes, and, once the plan is known, whether its memory fits
 * (cf_run_check_memory). The driver adds only what a command line has
 * (usage checks, the rank table, reports); the API only what an embedder
 * has (caller buffers).
 */
#include "../executor/executor.h"
#include "../executor/transports/transports.h"

#include "api.h"

#include <stdio.h>

cf_status cf_run_prepare(cf_context *ctx, cf_run_setup *s, cf_run_options *ro) {
  cf_status st = CF_OK;
  if ((s->mpi || s->shm) && !s->world) {
    if (s->shm && s->shm_job) {
      cf_shm_launch l = {.rank = s->shm_rank, .size = s->shm_size, .by = "the caller"};
      snprintf(l.job, sizeof l.job, "%s", s->shm_job);
      st = cf_world_shm_join(ctx, &l, s->timeout_s, &s->world);
    } else {
      st = cf_world_create(ctx, s->mpi ? &cf_world_mpi : &cf_world_shm, 0, s->timeout_s, &s->world);
    }
    if (st) return st;
    s->me = s->world->first;
    /* the host's cores are shared by the job's processes there: so are
     * BLAS threads */
    cf_exec_blas_share(cf_world_host_processes(s->world));
  }
  /* the cores the ranks share, a fact of the world: auto's choice */
  if (s->world) ro->algo.cores = cf_world_comm(s->world, s->world->first)->cores;
  if (!s->prof) {
    char path[4096];
    if ((st = cf_profile_find(ctx, s->profile, &s->prof, path, sizeof path))) return st;
  }
  if (s->mpi) {
    ro->staged = true; /* MPI's recv fills the staging buffer */
    if (ro->algo.policy == CF_POLICY_AUTO)
      ro->algo.policy = cf_world_auto(s->world); /* as measured on MPI */
  }
  /* a profile measures the CPU's algorithms */
  if (ro->algo.policy != CF_POLICY_FORCED && ro->device == CF_DEVICE_CPU)
    ro->algo.n_measured = cf_profile_rules(s->prof, cf_run_transport(s), &ro->algo.measured);
  return CF_OK;
}

const char *cf_run_transport(const cf_run_setup *s) {
  return s->mpi ? "mpi" : s->shm ? "shm" : "threads";
}

bool cf_run_cost(const cf_run_setup *s, int ranks, cf_cost *out) {
  return cf_profile_cost(s->prof, cf_run_transport(s), ranks, out);
}

cf_status cf_run_check_memory(cf_context *ctx, const cf_run_setup *s, cf_mem_need *need) {
  if (s->world) {
    need->ranks = 1;
    need->rank = s->me;
    need->processes = cf_world_host_processes(s->world);
    if (need->processes > 1) need->hint = "start fewer processes on each host";
  }
  return cf_mem_check(ctx, need, s->max_memory, s->max_memory_what);
}

void cf_run_setup_free(cf_run_setup *s, int exit_code) {
  cf_world_destroy(s->world, exit_code);
  cf_profile_destroy(s->prof);
  s->world = NULL;
  s->prof = NULL;
}
