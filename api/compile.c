/* compile.c - the one compile routine: verify against the target, run the
 * passes, verify the result against the target again.
 *
 * The C API (cf_graph_run_pipeline), the driver's compile, draw and run, the
 * benchmarks and the tests all compile through cf_compile, so a graph
 * compiles the same way wherever it comes from; what differs between them
 * (a check of Opaque nodes, timings) hangs on the hook after the first
 * verification.
 */
#include "api.h"

cf_status cf_compile(cf_graph *g, const cf_compile_options *opt) {
  static const cf_compile_options none = {0};
  if (!opt) opt = &none;
  const char *target = opt->pass.target;
  cf_phase_begin(g->ctx, "compile", 0);
  cf_status st = cf_verify_for_target(g, target);
  if (!st && opt->verified) st = opt->verified(g, opt->user);
  if (!st)
    st = cf_passes_run(g, cf_pipeline_list(opt->pipeline), &opt->pass, opt->timing, opt->n_timing);
  /* the result must still meet the target after the passes */
  if (!st) st = cf_verify_for_target(g, target);
  return st;
}
