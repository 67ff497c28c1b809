/* pass_dce.c - `dce`: dead code elimination.
 * Requires: verify. Preserves: every Input (the graph's interface), every
 * Output and every collective with all that feeds them or must run before
 * them (control predecessors); removes the rest.
 *
 * Collectives count as roots even when nothing reads their result: they
 * synchronise ranks, and removing communication the user wrote would change
 * what the graph does across ranks, so only pure compute is ever removed.
 */
#include "passes.h"

#include <stdlib.h>

static cf_status run(cf_graph *g, const cf_pass_options *opt) {
  (void)opt;
  cf_status st = g->topo ? CF_OK : cf_verify_structure(g);
  if (st) return st;
  int n = g->n_nodes, removed = 0;
  bool *live = calloc((size_t)(n ? n : 1), sizeof(bool));
  if (!live) return cf_error(g->ctx, CF_ERR_NO_MEMORY, g->file, 0, "out of memory");
  /* reverse topological order: a node is live if a live node reads it */
  for (int k = n - 1; k >= 0; k--) {
    int i = g->topo[k];
    cf_node *nd = &g->nodes[i];
    if (nd->op == CF_OP_OUTPUT || nd->op == CF_OP_INPUT || cf_op_is_collective(nd->op))
      live[i] = true;
    if (!live[i]) continue;
    for (int j = 0; j < cf_node_n_deps(nd); j++) live[cf_node_dep(nd, j)] = true;
  }
  for (int i = 0; i < n; i++) {
    g->nodes[i].dead = !live[i];
    removed += !live[i];
  }
  free(live);
  if (!removed) return CF_OK;
  cf_log(g->ctx, CF_LOG_INFO, "dce: removed %d unused node%s", removed, removed == 1 ? "" : "s");
  if ((st = cf_graph_compact(g))) return st;
  return cf_verify_structure(g);
}

const cf_pass cf_pass_dce = {"dce", run, "remove compute whose results reach no Output or collective"};
