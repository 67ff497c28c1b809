/* pass_verify.c - `verify`: structural verification and a topological order.
 * Requires: nothing. Preserves: the graph unchanged; sets g->topo.
 */
#include "passes.h"

static cf_status run(cf_graph *g, const cf_pass_options *opt) {
  (void)opt;
  return cf_verify_structure(g);
}

const cf_pass cf_pass_verify = {"verify", run,
                                "check arity, attributes, references, groups and acyclicity"};
