/* fuse_alltoall.c - `fuse-alltoall`: bucket AllToAll collectives by fusion/fusion_id.
 * Requires: verify, infer. Preserves: dependencies and acyclicity (see
 * combine.c); every AllToAll with fusion=2 joins the others of its fusion_id,
 * every one with fusion=1 follows the --split strategy, fusion=0 and the
 * tuple form stay. A bucket is one exchange: each rank sends each peer the
 * concatenation of every member's block for that peer.
 */
#include "passes.h"

static cf_status run(cf_graph *g, const cf_pass_options *opt) {
  return cf_combine(g, opt, CF_OP_ALLTOALL);
}

const cf_pass cf_pass_fuse_alltoall = {"fuse-alltoall", run,
                                       "fuse AllToAll collectives into FusedAllToAll buckets"};
