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

/* ================= options.c: option values, checked once ================= */

/* The checks behind both cf_options_set and the driver's options: true with
 * the value in *out, or false with "NAME wants ..., got 'V'" in why (NAME:
 * "option seed" for the API, "--seed" for the driver). */
bool cf_option_seed(const char *name, const char *v, uint64_t *out, char *why, size_t len);
bool cf_option_timeout(const char *name, const char *v, double *out, char *why, size_t len);

#endif /* COLLFUSE_API_H */
