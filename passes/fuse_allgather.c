/* fuse_allgather.c - `fuse-allgather`: bucket AllGather collectives by fusion/fusion_id.
 * Requires: verify, infer. Preserves: dependencies and acyclicity (see
 * combine.c); every AllGather with fusion=2 joins the others of its fusion_id,
 * every one with fusion=1 follows the --split strategy, fusion=0 stays.
 */
#include "passes.h"

static cf_status run(cf_graph *g, const cf_pass_options *opt) {
  return cf_combine(g, opt, CF_OP_ALLGATHER);
}

const cf_pass cf_pass_fuse_allgather = {"fuse-allgather", run,
                                  "fuse AllGather collectives into FusedAllGather buckets"};
