/* pass_infer.c - `infer`: shape and dtype inference with the op rules.
 * Requires: verify (a topological order). Preserves: structure; fills types.
 */
#include "passes.h"

static cf_status run(cf_graph *g, const cf_pass_options *opt) {
  (void)opt;
  cf_status st = g->topo ? CF_OK : cf_verify_structure(g);
  return st ? st : cf_infer(g);
}

const cf_pass cf_pass_infer = {"infer", run, "infer every value's dtype and shape, check op rules"};
