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

#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>

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
/* transports/shm.c: this process is one rank of a job of processes on this
 * host (`--backend shm`), single copy through heaps every rank maps (the
 * world's alloc slot gives the plan's arena from this rank's). create with
 * size 0 takes the job from the launcher's environment (shm_env.c); size > 0
 * must be the launcher's. */
extern const cf_world_ops cf_world_shm;

/* transports/shm_env.c: where this process stands in a job its launcher
 * started (collfuse run --ranks N, torchrun, mpirun, mpiexec, srun). */
typedef struct cf_shm_launch {
  int rank, size;
  char job[160];  /* the name the job's ranks meet under */
  const char *by; /* the launcher, for messages */
  char rdv[300];  /* host:port of the TCP rendezvous (shm_host.c); "": none */
  const char *rdv_by; /* the variables rdv came from, for messages */
} cf_shm_launch;
/* True when some launcher's rank and size variables are set. */
bool cf_shm_launched(void);
/* The launcher whose variables env ("NAME=VALUE" strings ending with NULL;
 * NULL: the process's environment) has, as the shm world finds it: the
 * first of its table (collfuse run, torchrun, mpirun, mpiexec, srun) whose
 * rank and size are both set. The C API's cf_launcher_find. */
typedef struct cf_launcher_seen {
  const char *name;               /* "collfuse run", "torchrun", ...; NULL: none */
  const char *rank, *size;        /* its variables' values, as set */
  const char *rank_var, *size_var; /* and their names */
  const char *local;              /* the processes it says are on this host, or NULL */
  bool mpi;                       /* mpirun's or mpiexec's rank and size are set */
} cf_launcher_seen;
void cf_launcher_see(const char *const *env, cf_launcher_seen *out);
/* The launcher's rank, size and job; CF_ERR_USAGE when none started this
 * process, when its values are out of range, or when it says the job spans
 * hosts. */
cf_status cf_shm_launch_find(cf_context *ctx, cf_shm_launch *out);
/* Join the shm world as l says (the C API's explicit rank, size and job);
 * every rank of the job must call it within timeout_s of the others. */
cf_status cf_world_shm_join(cf_context *ctx, const cf_shm_launch *l, double timeout_s,
                            cf_world **out);

/* transports/shm_pages.c: a file of bytes of shared memory (sparse,
 * zeros), in huge pages where Linux gives shared memory them: a
 * descriptor, or -1 with errno. name: what /proc/<pid>/maps calls it
 * ("/NAME", or "memfd:collfuse-shm-NAME" in 4 KiB pages): "heap" for a
 * rank's heap, "region" for cf_shm_memory's. */
int cf_shm_pages_make(size_t bytes, const char *name);
#define CF_SHM_HUGE_PAGE ((size_t)2 << 20) /* the huge page those files get */
/* bytes, or less under an address-space limit (ulimit -v): each of the n
 * heaps every rank maps gets a share of half the room left, so the job
 * starts and a run that needs more than that fails for want of heap. */
size_t cf_shm_heap_cap(size_t bytes, int n);
/* Map a heap on a 2 MiB boundary (MAP_FAILED with errno). */
void *cf_shm_heap_map(int fd, size_t bytes);

/* transports/shm_host.c: the host each rank is on, compared at start-up. */
typedef struct cf_shm_host {
  char id[128]; /* what ranks compare: "hostid:$COLLFUSE_HOSTID", else name/boot id */
  char name[HOST_NAME_MAX + 1]; /* what messages say: COLLFUSE_HOSTID, else the host's name */
} cf_shm_host;
/* A COLLFUSE_HOSTID that cf_shm_host_id would cut (ranks would compare a
 * prefix of it): a usage error naming it. */
cf_status cf_shm_host_check(cf_context *ctx);
void cf_shm_host_id(cf_shm_host *h);
/* True when hosts[0..n) are one host; else false with text naming each
 * host and its ranks ("... the shm world is one host's; ..."). */
bool cf_shm_one_host(int n, const cf_shm_host *hosts, char *text, size_t len);
/* With l->rdv: the job's ranks meet over TCP there before deadline and
 * every rank fails (naming the hosts and their ranks) unless all are on
 * one host; without: nothing to do. */
cf_status cf_shm_meet(cf_context *ctx, const cf_shm_launch *l, double timeout_s, double deadline);

/* transports/shm_regions.c: the caller's memory that the shm world's peers
 * read and write in place (cf_shm_register, collfuse.h): the process's
 * registrations, and each world's table of them in its control segment. */
#define CF_SHM_REGIONS 128 /* registrations a process may hold at once */
typedef struct cf_shm_region { /* control segment: [rank * CF_SHM_REGIONS + slot] */
  _Atomic uint64_t gen; /* the registration's generation, 0: free; stored last */
  int32_t fd;           /* in the owner's process: /proc/<pid>/fd/<fd> */
  int32_t pad;
  uint64_t bytes;
} cf_shm_region;
typedef struct cf_shm_regions { /* a world's view of every rank's table */
  cf_shm_region *table;
  const int32_t *pid; /* [rank], in the control segment */
  int size, me;
  pthread_mutex_t lock; /* the maps */
  struct cf_shm_map {
    uint64_t gen;
    void *p;
    size_t bytes;
    bool let_go; /* the file is in 2 MiB pages: its pages here are let go after each message */
  } *map; /* [peer * CF_SHM_REGIONS + slot]: the peers' regions mapped here */
  struct cf_shm_regions *next;
} cf_shm_regions;
cf_status cf_shm_regions_add(cf_context *ctx, void *base, size_t bytes, int fd);
cf_status cf_shm_regions_remove(cf_context *ctx, void *base);
/* Whether [p, p + bytes) lies wholly in one registration of this process. */
bool cf_shm_registered(const void *p, size_t bytes);
/* A world's view (CF_ERR_NO_MEMORY, without a message), and its end. */
cf_status cf_shm_regions_init(cf_shm_regions *rs, cf_shm_region *table, const int32_t *pid, int size,
                              int me);
void cf_shm_regions_fini(cf_shm_regions *rs);
/* A message of [p, p + bytes) names (slot, gen, off) of this rank's table,
 * published there first if need be; false when no registration holds it. */
bool cf_shm_regions_name(cf_shm_regions *rs, const void *p, size_t bytes, uint32_t *slot, uint64_t *gen,
                         uint64_t *off);
/* The pages of a peer's region that a message handed this rank, to let go
 * of once it is released (cf_shm_regions_let_go); lo NULL: none. */
typedef struct cf_shm_hold {
  char *lo, *hi; /* [p, p + bytes) widened to 2 MiB boundaries within the map */
  char *gone;    /* let go of up to here already (cf_shm_regions_let_go_part) */
  int peer;
  uint32_t slot;
  uint64_t gen;
} cf_shm_hold;
/* Where peer's (slot, gen, off) of bytes lies here (mapped on first use),
 * or NULL with text saying why; *hold: its pages to let go of after the
 * message, where the region is in 2 MiB pages (else none). */
const void *cf_shm_regions_peer(cf_shm_regions *rs, int peer, uint32_t slot, uint64_t gen, uint64_t off,
                                size_t bytes, cf_shm_hold *hold, char *text, size_t len);
/* Drop hold's pages from this rank's page tables (the data stay in the
 * peer's file; the next touch maps them again) unless its map was
 * replaced since; hold is emptied. */
void cf_shm_regions_let_go(cf_shm_regions *rs, cf_shm_hold *hold);
/* The 2 MiB pages from the one that holds p to the last one [p, p + bytes)
 * covers whole (in hold's range) dropped from this rank's page tables as
 * cf_shm_regions_let_go does, once each: the receiver is done with them
 * (the let_go slot). */
void cf_shm_regions_let_go_part(cf_shm_regions *rs, cf_shm_hold *hold, const void *p, size_t bytes);

/* world.c: the slots, wrapped */
cf_status cf_world_create(cf_context *ctx, const cf_world_ops *ops, int size, double timeout_s,
                          cf_world **out);
cf_comm *cf_world_comm(cf_world *w, int rank);
/* Host memory for a rank's arena from the world (the shm world's heap,
 * which every rank maps), else from dev (NULL: out of memory); freed by
 * cf_world_free, which hands what the world did not give to dev. */
void *cf_world_alloc(cf_world *w, cf_device *dev, size_t bytes);
void cf_world_free(cf_world *w, cf_device *dev, void *p);
bool cf_world_gives_memory(const cf_world *w);
/* Whether every rank reads [p, p + bytes) of this rank's in place (the shm
 * world: memory the caller registered); false for a world without the slot. */
bool cf_world_shares(const cf_world *w, const void *p, size_t bytes);
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

/* world.c, for the transports: the fields two ranks' descriptors must
 * agree on, mixed into 64 bits (never 0, which stands for no descriptor). */
uint64_t cf_coll_desc_key(const cf_coll_desc *d);
/* The CPUs a world's ranks bind their threads to: the first size * lanes
 * of the process's affinity mask, *lanes 2 (compute, collectives) where it
 * has that many, else 1, round robin when it has fewer than size; NULL
 * (no binding) when $COLLFUSE_BIND is "none". cf_bind_thread binds the
 * calling thread to rank's lane (cpus NULL: no-op). */
int *cf_bind_cpus(int size, int *lanes);
/* The CPUs this process may run on (its affinity mask; else those online). */
int cf_cpu_count(void);
/* A rank's signs of life as the waits on it read them (threads.c keeps one
 * per rank, shm.c one per rank in its control segment): its heartbeat and
 * whom its sleeping wait waits for. */
typedef struct cf_vital {
  _Atomic uint64_t beat;     /* bumped through a long local phase (the beat slot) */
  _Atomic int32_t waits_for; /* 1 + the rank its sleeping wait is for; 0: none (it works) */
} cf_vital;
/* The signs of life a wait of rank me on peer watches: a hash of the beats
 * of peer and, while peer sleeps in a wait of its own, of the rank that
 * waits for, and so on down the chain (at most size links, stopping at me
 * or a rank that waits for nobody); it changes whenever a rank of the
 * chain beats or the chain changes (a link moved on). So rank 0 waiting
 * for rank 1, which waits for rank 2 at work, waits as long as rank 2
 * beats. v has size entries. */
uint64_t cf_chain_pulse(const cf_vital *v, int size, int me, int peer);
/* A wait's timeout message into text: "rank ME timed out after T s waiting
 * for VERB rank PEER in OP 'node' (#seq of group g); rank P waits for rank
 * Q, rank Q for rank R; rank(s) that stopped: ..." (d may be NULL; the
 * chain of waits from peer as v has it, v NULL: none); left(user, r) says
 * whether rank r of size has left. */
void cf_wait_timeout_text(char *text, size_t len, int me, double timeout_s, const char *verb,
                          int peer, const cf_coll_desc *d, int size, const cf_vital *v,
                          bool (*left)(void *, int), void *user);
/* The pulse (ir.h's cf_pulse) whose beats are c's beat slot (a pulse of
 * no one where c has none); c must outlive the threads that hold it. */
cf_pulse cf_comm_pulse(cf_comm *c);
/* A wait's patience (threads.c, shm.c): the timeout counts the silence of
 * the work waited for (cf_chain_pulse), from the wait's start or the
 * pulse's last change. cf_patience_left: the seconds left at now given the
 * pulse beat (<= 0: silent too long). */
typedef struct cf_patience {
  uint64_t seen; /* the pulse when last read */
  double since;  /* when it last changed (or the wait began) */
} cf_patience;
void cf_patience_start(cf_patience *p, uint64_t beat, double now);
double cf_patience_left(cf_patience *p, uint64_t beat, double now, double timeout_s);
/* The spin before a wait sleeps (threads.c, shm.c): true once *a >= target
 * within spin polls, polling as mode says. */
typedef enum cf_spin_mode {
  /* a core per rank: it pauses, giving the core away every 64 polls after
   * the first 256 (a pause takes ~140 cycles on recent Intel cores: 256
   * are ~15 us) in case the rank waited for shares it (polling 8192 times
   * first made every wait ~0.4 ms then, 8x an AllReduce of 1 MiB on 2
   * ranks) */
  CF_SPIN_CORE,
  CF_SPIN_YIELD, /* oversubscribed ranks (threads.c, shm.c): it yields every poll */
  /* oversubscribed processes with COLLFUSE_SHM_SPIN=pause (shm.c): it
   * pauses and never yields. On a machine busy with other work Linux's
   * scheduler (EEVDF) moves a task that yields a slice later each time, so
   * a rank that yielded through its waits (64 polls) fell behind every
   * other task for milliseconds (a 16 MiB pool call 3-4x slower at load
   * 7-13); on a quiet machine the sleeps cost more (8 B 4-5x slower):
   * bench/results/shm.md */
  CF_SPIN_PAUSE,
} cf_spin_mode;
bool cf_spin_ge(_Atomic uint64_t *a, uint64_t target, int spin, cf_spin_mode mode);
/* Set on a thread whose runs overlap its own process's work (a cf_runner's:
 * a DDP bucket averaged while the backward pass computes): its waits poll
 * CF_SPIN_BRIEF times, pausing (~11 us on the 2-core AMD EPYC VM), then
 * sleep, whatever the world's spin. A spin of 40000 polls (~1.7 ms) on a
 * core per rank takes the core from the process's compute, or from the
 * peer the wait is for: 25 MiB averaged in place in one piece took 5-17
 * ms with it against 3-8 ms with no spin (medians of 20 calls in 2-3 runs
 * each, two processes on two cores, each with a thread computing beside
 * its runner; load 5-9). */
extern _Thread_local bool cf_spin_brief;
#define CF_SPIN_BRIEF 256
void cf_bind_thread(const int *cpus, int lanes, int rank, int lane);

#endif /* COLLFUSE_EXECUTOR_TRANSPORTS_H */
