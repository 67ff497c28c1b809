/* fuse_allreduce.c - `fuse-allreduce`: bucket AllReduce collectives by fusion/fusion_id.
 * Requires: verify, infer. Preserves: dependencies and acyclicity (see
 * combine.c); every AllReduce with fusion=2 joins the others of its fusion_id,
 * every one with fusion=1 follows the --split strategy, fusion=0 stays.
 */
#include "passes.h"

#include <stdio.h>

/* --explain covers every collective: the kinds no pass fuses say so here,
 * once, since fuse-allreduce runs first in every pipeline that fuses. */
static void explain_unfusable(const cf_graph *g, const cf_pass_options *opt) {
  char line[512];
  for (int i = 0; opt->explain && i < g->n_nodes; i++) {
    const cf_node *n = &g->nodes[i];
    if (!cf_op_rooted(n->op)) continue;
    snprintf(line, sizeof line, "%s '%s' stays alone: %s is never fused (rooted collectives have no bucketed form)",
             cf_op_table[n->op].name, n->name, cf_op_table[n->op].name);
    opt->explain(opt->explain_user, line);
  }
}

static cf_status run(cf_graph *g, const cf_pass_options *opt) {
  cf_status st = cf_combine(g, opt, CF_OP_ALLREDUCE);
  if (!st && opt) explain_unfusable(g, opt);
  return st;
}

const cf_pass cf_pass_fuse_allreduce = {"fuse-allreduce", run,
                                        "fuse AllReduce collectives into FusedAllReduce buckets"};
