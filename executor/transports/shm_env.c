/* transports/shm_env.c - where this process stands in a job of processes on
 * one host: its rank, the job's size and the name the job meets under, as
 * its launcher says them.
 *
 * The variables are read in one order, the first launcher whose rank and
 * size are both set wins: collfuse's own (COLLFUSE_RANK, set by `collfuse
 * run --backend shm --ranks N` in the processes it forks), torchrun's
 * (RANK, WORLD_SIZE), Open MPI's mpirun (OMPI_COMM_WORLD_*), MPICH's (PMI_*)
 * and srun's (SLURM_*). The job's name is COLLFUSE_JOB, else the launcher's
 * own (MASTER_ADDR:MASTER_PORT, SLURM_JOB_ID.SLURM_STEP_ID, PMIX_NAMESPACE),
 * else the parent process: every launcher above starts a host's ranks as
 * children of one process (torchrun's agent, orted or hydra's proxy,
 * slurmstepd). A launcher that says the job spans hosts (LOCAL_WORLD_SIZE,
 * OMPI_COMM_WORLD_LOCAL_SIZE below the size, SLURM_NNODES above 1) is
 * refused at once with what it said: the shm world needs every rank on
 * this host. The job's TCP rendezvous, where ranks on other hosts are seen
 * and named (shm_host.c), is COLLFUSE_RENDEZVOUS, else torchrun's
 * MASTER_ADDR at MASTER_PORT + 1.
 */
#define _GNU_SOURCE
#include "transports.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Variable v as env says it ("NAME=VALUE" strings ending with NULL), else
 * (env NULL) the process's environment. */
static const char *var(const char *const *env, cf_env_var v) {
  if (!env) return cf_env(v);
  const char *name = cf_env_table[v].name;
  size_t n = strlen(name);
  for (; *env; env++)
    if (strncmp(*env, name, n) == 0 && (*env)[n] == '=') return *env + n + 1;
  return NULL;
}

/* A whole decimal number in lo..hi, else -1. */
static long num(const char *s, long lo, long hi) {
  if (!s || !*s) return -1;
  char *e;
  long x = strtol(s, &e, 10);
  return *e || x < lo || x > hi ? -1 : x;
}

static long env_num(cf_env_var v, long lo, long hi) { return num(cf_env(v), lo, hi); }

typedef struct launcher {
  const char *name;          /* the launcher (cf_launcher_see) */
  const char *by;            /* who started the process, for messages */
  cf_env_var rank, size;     /* the pair that says this launcher started it */
  int local_size;            /* a variable (cf_env_var) saying the processes on this host, or -1 */
  bool mpi;                  /* an MPI launcher: an MPI world can join its job */
} launcher;

/* In this order: the first whose rank and size are both set wins. */
static const launcher launchers[] = {
    {"collfuse run", "collfuse run (COLLFUSE_RANK)", CF_ENV_SHM_RANK, CF_ENV_SHM_SIZE, -1, false},
    {"torchrun", "torchrun (RANK)", CF_ENV_TORCH_RANK, CF_ENV_TORCH_SIZE, CF_ENV_TORCH_LOCAL_SIZE, false},
    {"mpirun", "mpirun (OMPI_COMM_WORLD_RANK)", CF_ENV_OMPI_RANK, CF_ENV_OMPI_SIZE, CF_ENV_OMPI_LOCAL_SIZE,
     true},
    {"mpiexec", "mpiexec (PMI_RANK)", CF_ENV_PMI_RANK, CF_ENV_PMI_SIZE, -1, true},
    {"srun", "srun (SLURM_PROCID)", CF_ENV_SLURM_PROCID, CF_ENV_SLURM_NTASKS, -1, false},
};
#define N_LAUNCHERS (sizeof launchers / sizeof *launchers)

bool cf_shm_launched(void) {
  for (size_t i = 0; i < N_LAUNCHERS; i++)
    if (cf_env(launchers[i].rank) && cf_env(launchers[i].size)) return true;
  return false;
}

void cf_launcher_see(const char *const *env, cf_launcher_seen *out) {
  memset(out, 0, sizeof *out);
  for (size_t i = 0; i < N_LAUNCHERS; i++) {
    const launcher *l = &launchers[i];
    const char *r = var(env, l->rank), *n = var(env, l->size);
    if (!r || !n) continue;
    if (l->mpi) out->mpi = true; /* under mpirun, whichever launcher's variables come first */
    if (out->name) continue;
    *out = (cf_launcher_seen){.name = l->name, .rank = r, .size = n, .mpi = out->mpi,
                              .rank_var = cf_env_table[l->rank].name,
                              .size_var = cf_env_table[l->size].name,
                              .local = l->local_size >= 0 ? var(env, (cf_env_var)l->local_size) : NULL};
  }
}

cf_status cf_shm_launch_find(cf_context *ctx, cf_shm_launch *out) {
  memset(out, 0, sizeof *out);
  const launcher *l = NULL;
  for (size_t i = 0; i < N_LAUNCHERS && !l; i++)
    if (cf_env(launchers[i].rank) && cf_env(launchers[i].size)) l = &launchers[i];
  if (!l)
    return cf_error(ctx, CF_ERR_USAGE, NULL, 0,
                    "--backend shm: no launcher started this process (no COLLFUSE_RANK, RANK, "
                    "OMPI_COMM_WORLD_RANK, PMI_RANK or SLURM_PROCID with its size): give --ranks N "
                    "to start the ranks, or start them with torchrun, mpirun or srun");
  long size = env_num(l->size, 1, CF_MAX_WORLD), rank = env_num(l->rank, 0, CF_MAX_WORLD - 1);
  if (size < 1 || rank < 0 || rank >= size)
    return cf_error(ctx, CF_ERR_USAGE, NULL, 0,
                    "--backend shm: %s says rank %s of %s processes: want a rank in 0..size-1 and "
                    "a size in 1..%d",
                    l->by, cf_env(l->rank), cf_env(l->size), CF_MAX_WORLD);
  long local = l->local_size >= 0 ? env_num((cf_env_var)l->local_size, 1, CF_MAX_WORLD) : -1;
  long nodes = l->rank == CF_ENV_SLURM_PROCID ? env_num(CF_ENV_SLURM_NNODES, 1, 1 << 20) : -1;
  char host[256] = "?";
  gethostname(host, sizeof host - 1);
  if ((local > 0 && local < size) || nodes > 1)
    return cf_error(ctx, CF_ERR_USAGE, NULL, 0,
                    "--backend shm: %s started %ld processes over %ld hosts (%s on %s): the shm "
                    "world needs every rank on one host; a job across hosts runs with --backend "
                    "mpi under mpirun",
                    l->by, size, nodes > 1 ? nodes : (size + local - 1) / local,
                    nodes > 1 ? "SLURM_NNODES" : "fewer on this host", host);
  out->rank = (int)rank;
  out->size = (int)size;
  out->by = l->by;
  const char *job = cf_env(CF_ENV_SHM_JOB), *addr = cf_env(CF_ENV_MASTER_ADDR),
             *port = cf_env(CF_ENV_MASTER_PORT), *sj = cf_env(CF_ENV_SLURM_JOB_ID),
             *ns = cf_env(CF_ENV_PMIX_NAMESPACE);
  if (job && *job)
    snprintf(out->job, sizeof out->job, "%s", job);
  else if (l->rank == CF_ENV_TORCH_RANK && addr && port)
    snprintf(out->job, sizeof out->job, "torch:%s:%s", addr, port);
  else if (l->rank == CF_ENV_SLURM_PROCID && sj)
    snprintf(out->job, sizeof out->job, "slurm:%s.%s", sj,
             cf_env(CF_ENV_SLURM_STEP_ID) ? cf_env(CF_ENV_SLURM_STEP_ID) : "");
  else if (l->rank == CF_ENV_OMPI_RANK && ns)
    snprintf(out->job, sizeof out->job, "pmix:%s", ns);
  else
    snprintf(out->job, sizeof out->job, "ppid:%ld", (long)getppid());
  /* the TCP rendezvous (shm_host.c): COLLFUSE_RENDEZVOUS, else torchrun's
   * master at MASTER_PORT + 1 (torch's store listens on MASTER_PORT) */
  const char *rdv = cf_env(CF_ENV_RENDEZVOUS);
  long mport = env_num(CF_ENV_MASTER_PORT, 1, 65535);
  if (rdv && *rdv) {
    snprintf(out->rdv, sizeof out->rdv, "%s", rdv);
    out->rdv_by = "COLLFUSE_RENDEZVOUS";
  } else if (l->rank == CF_ENV_TORCH_RANK && addr && *addr && mport > 0) {
    snprintf(out->rdv, sizeof out->rdv, strchr(addr, ':') ? "[%s]:%ld" : "%s:%ld", addr,
             mport < 65535 ? mport + 1 : mport - 1);
    out->rdv_by = "MASTER_ADDR, MASTER_PORT + 1";
  }
  return CF_OK;
}
