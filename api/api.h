/* api.h - the api/ module's internal header: what the driver (tools/) and
 * the tests use besides the public header.
 *
 * api/ defines every public cf_* function of include/collfuse/collfuse.h
 * over the internal modules' own names; the compile routine below is the
 * one place that strings verification and passes together, for the C API,
 * the driver's commands, the benchmarks and the tests alike.
 */
#ifndef COLLFUSE_API_H
#define COLLFUSE_API_H

#include "../ir/ir.h"
#include "../passes/passes.h"

/* ================= compile.c: verify -> passes -> verify ================= */

/* How cf_compile runs; all zero: the default pipeline for the cpu target. */
typedef struct cf_compile_options {
  const char *pipeline; /* a pipeline name or pass list (cf_pipeline_list; NULL: default) */
  cf_pass_options pass; /* split, cost, explain, and target: the profile g must meet */
  /* Called once the graph has passed the first verification, before any
   * pass (NULL: none): a status it returns stops the compile with it. */
  cf_status (*verified)(cf_graph *g, void *user);
  void *user;
  cf_pass_timing *timing; /* each pass's time (CF_MAX_PIPELINE entries), or NULL */
  int *n_timing;          /* their count, with timing */
} cf_compile_options;

/* Verify g against the target, run the pipeline's passes over it and verify
 * the result against the target again; g is changed in place. opt may be
 * NULL. */
cf_status cf_compile(cf_graph *g, const cf_compile_options *opt);

/* ================= runner.c: cf_executable_start_rank's thread ================= */

/* (runner.c calls api.c, never the other way.) api.c: e's context, and its
 * count of runs started on a runner and not yet ended (d: +1 or -1;
 * cf_executable_destroy waits for 0); e usable (cf_executable_check) and
 * rank one of its ranks, as cf_executable_run_rank refuses them. */
cf_context *cf_executable_ctx(const cf_executable *e);
void cf_executable_pending(cf_executable *e, int d);
cf_status cf_executable_check_rank(const cf_executable *e, int rank);

/* ================= options.c: option values, checked once ================= */

/* The checks behind both cf_options_set and the driver's options: true with
 * the value in *out, or false with "NAME wants ..., got 'V'" in why (NAME:
 * "option seed" for the API, "--seed" for the driver). */
bool cf_option_seed(const char *name, const char *v, uint64_t *out, char *why, size_t len);
bool cf_option_timeout(const char *name, const char *v, double *out, char *why, size_t len);
/* An integer in lo..hi ("--ranks", "option ranks": 1..CF_MAX_WORLD). */
bool cf_option_int(const char *name, const char *v, int64_t lo, int64_t hi, int64_t *out, char *why,
                   size_t len);
/* A byte count such as 512M or 4G in lo..hi ("--max-memory", "option
 * max_memory": 1..CF_MAX_MEMORY). */
bool cf_option_size(const char *name, const char *v, int64_t lo, int64_t hi, int64_t *out,
                    char *why, size_t len);
/* One of choices ("a|b|c"): "NAME wants a, b or c, got 'V'" and the closest
 * choice ("; did you mean 'b'?"). */
bool cf_option_choice(const char *name, const char *choices, const char *v, char *why, size_t len);
/* An algorithm request by name or alias (executor/algo.h's cf_algo_parse);
 * refused as a choice among the table's names. */
typedef struct cf_algo_req cf_algo_req; /* executor/algo.h */
bool cf_option_algo(const char *name, const char *v, bool with_native, cf_algo_req *out, char *why,
                    size_t len);

/* ================= profile.c: measured algorithm rules and alpha/beta ================= */

typedef struct cf_algo_rule cf_algo_rule; /* executor/algo.h */
typedef struct cf_profile cf_profile;     /* one profile file, parsed */
enum { CF_PROFILE_MAX_ENTRIES = 32, CF_PROFILE_MAX_RULES = 32 };

/* The profile's path: given (--profile, the API's option), else
 * $COLLFUSE_PROFILE, else $XDG_CONFIG_HOME/collfuse/profile, else
 * ~/.config/collfuse/profile (into buf); *explicit_path: given or from the
 * environment. NULL when there is no home to look in. */
const char *cf_profile_path(const char *given, char *buf, size_t len, bool *explicit_path);
/* Read path into *out (the caller destroys it). A missing file gives an
 * empty profile unless must_exist; a malformed one is CF_ERR_INVALID naming
 * "PATH:LINE". */
cf_status cf_profile_load(cf_context *ctx, const char *path, bool must_exist, cf_profile **out);
/* The profile a run reads: given "none" or no path at all: empty; else
 * cf_profile_path's, which must exist when it was explicit. path receives
 * the path read ("" when none). */
cf_status cf_profile_find(cf_context *ctx, const char *given, cf_profile **out, char *path,
                          size_t len);
void cf_profile_destroy(cf_profile *p);
/* A 32-bit hash of transport's rules and links (0: none), for ranks to
 * check that they read the same profile. */
uint32_t cf_profile_hash(const cf_profile *p, const char *transport);
/* Every measured rule for transport ("threads" or "mpi"), all rank counts,
 * valid until p changes; returns how many (0: *rules NULL). */
int cf_profile_rules(cf_profile *p, const char *transport, const cf_algo_rule **rules);
/* The measured alpha/beta of transport on ranks (gamma = beta/2); false
 * when the profile has none. */
bool cf_profile_cost(const cf_profile *p, const char *transport, int ranks, cf_cost *out);
/* What a compile of g (`compile`, the API's pipeline) takes from the profile
 * given (cf_profile_find): its threads link at g's world size into *cost,
 * and *measured pointing at it, NULL when the profile has none. */
cf_status cf_profile_compile_cost(cf_context *ctx, const char *given, const cf_graph *g,
                                  cf_cost *cost, const cf_cost **measured);
/* Replace transport's entry for ranks with what a measurement found: the
 * fastest row best[i] at bytes[i] (ascending, n sizes), and the link. */
cf_status cf_profile_set(cf_context *ctx, cf_profile *p, const char *transport, int ranks,
                         const int64_t *bytes, const int *best, int n, double alpha_us,
                         double beta_gbps);
/* Write p to path (its directories made as needed) through cf_write_file. */
cf_status cf_profile_save(cf_context *ctx, cf_profile *p, const char *path);

/* ================= prepare.c: a run's one set-up (driver and C API) ================= */

typedef struct cf_world cf_world;             /* executor/runtime.h */
typedef struct cf_run_options cf_run_options; /* executor/executor.h */
typedef struct cf_mem_need cf_mem_need;       /* executor/executor.h */

/* What a run is set up with (the caller fills the first block, zero for
 * the defaults) and what cf_run_prepare found (cf_run_setup_free releases
 * it). */
typedef struct cf_run_setup {
  const char *profile;         /* --profile, the profile option (NULL: $COLLFUSE_PROFILE or the
                                * user's; "none": the built-in rules) */
  bool mpi;                    /* this process is one rank of MPI's world (mpirun) */
  bool shm;                    /* this process is one rank of a shm world (--backend shm) */
  const char *shm_job;         /* shm: the job's name, with shm_rank and shm_size (NULL: the
                                * launcher's, from the environment) */
  int shm_rank, shm_size;
  double timeout_s;            /* the world's waits */
  int64_t max_memory;          /* the memory a run may hold (0: what the machine has) */
  const char *max_memory_what; /* its name in messages ("--max-memory") */
  cf_profile *prof;            /* the profile read (empty: none) */
  cf_world *world;             /* MPI's or the shm world (mpi, shm), else NULL */
  int me;                      /* this process's rank of it (0 without one) */
} cf_run_setup;

/* Set a run up, each step once however often it is called: with mpi, join
 * MPI's world (initializing MPI unless the application did; a failure
 * leaves s->world NULL) and give this process's BLAS calls its share of the
 * host's cores (cf_exec_blas_share); read the profile (cf_profile_find);
 * then make ro fit: with mpi staged, and auto the world's policy; auto's
 * measured rules for the transport from the profile (CPU device only: a
 * profile measures the CPU's algorithms). */
cf_status cf_run_prepare(cf_context *ctx, cf_run_setup *s, cf_run_options *ro);
/* "mpi", "shm" or "threads": the transport s runs on, as profiles name it. */
const char *cf_run_transport(const cf_run_setup *s);
/* --split auto's measured alpha/beta on ranks from s's profile; false when
 * it has none. */
bool cf_run_cost(const cf_run_setup *s, int ranks, cf_cost *out);
/* cf_mem_check of need against s's limit; on MPI's world need is this
 * process's (one rank, the host's processes named, and their hint). */
cf_status cf_run_check_memory(cf_context *ctx, const cf_run_setup *s, cf_mem_need *need);
/* Leave the world (exit_code: as cf_world_destroy) and drop the profile. */
void cf_run_setup_free(cf_run_setup *s, int exit_code);

#endif /* COLLFUSE_API_H */
