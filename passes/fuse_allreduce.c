/* fuse_allreduce.c - `fuse-allreduce`: bucket AllReduce collectives by fusion/fusion_id.
 * Requires: verify, infer. Preserves: dependencies and acyclicity (see
 * combine.c); every AllReduce with fusion=2 joins the others of its fusion_id,
 * every one with fusion=1 follows the --split strategy, fusion=0 stays.
 */
#include "passes.h"

static cf_status run(cf_graph *g, const cf_pass_options *opt) {
  return cf_combine(g, opt, CF_OP_ALLREDUCE);
}

const cf_pass cf_pass_fuse_allreduce = {"fuse-allreduce", run,
                                  "fuse AllReduce collectives into FusedAllReduce buckets"};
