/* passes.h - the pass interface, the ordered registry and pipelines (one
 * header for the passes/ module).
 *
 * A pass is a const struct in its own file; its first comment says what it
 * requires and what it preserves. Passes mutate the graph in place and leave
 * it verified and inferred (the runner re-verifies after every pass when
 * CF_VERIFY_EACH_PASS is on, which it is in every non-Release build).
 */
#ifndef COLLFUSE_PASSES_H
#define COLLFUSE_PASSES_H

#include "../ir/ir.h"

typedef struct cf_pass_options {
  const char *split;   /* --split SPEC for fusion=1 (NULL: auto) */
  bool explain;        /* collect per-collective explanations */
} cf_pass_options;

typedef struct cf_pass {
  const char *name;
  cf_status (*run)(cf_graph *g, const cf_pass_options *opt);
  const char *doc;
} cf_pass;

extern const cf_pass cf_pass_verify;
extern const cf_pass cf_pass_infer;
extern const cf_pass cf_pass_dce;

#define CF_MAX_PIPELINE 32

typedef struct cf_pass_timing {
  const char *name;
  double ms;
} cf_pass_timing;

/* Registry, in pipeline order; NULL-terminated. */
extern const cf_pass *const cf_pass_registry[];
const cf_pass *cf_pass_find(const char *name);
/* The default pipeline (everything) and the -O0 one (no fusion). */
extern const char cf_pipeline_default[];
extern const char cf_pipeline_O0[];

/* Run a comma-separated list of passes; timing (may be NULL) receives up to
 * CF_MAX_PIPELINE entries and *n_timing their count. */
cf_status cf_passes_run(cf_graph *g, const char *list, const cf_pass_options *opt,
                        cf_pass_timing *timing, int *n_timing);

#endif /* COLLFUSE_PASSES_H */
