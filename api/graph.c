/* graph.c - the public header's calls on whole graphs: loading, verifying,
 * running passes, writing and counting, over the frontend's, the passes'
 * and the IR's own names.
 */
#include "api.h"

#include "../frontend/frontend.h"

cf_status cf_graph_load(cf_context *ctx, const char *path, cf_graph **out) {
  cf_phase_begin(ctx, "read", 0);
  return cf_frontend_load(ctx, path, out);
}

cf_status cf_graph_parse(cf_context *ctx, const char *name, const char *data, size_t size,
                         cf_graph **out) {
  cf_phase_begin(ctx, "read", 0);
  return cf_frontend_parse(ctx, name, data, size, out);
}

void cf_graph_destroy(cf_graph *g) { cf_graph_release(g); }

cf_status cf_graph_verify(cf_graph *g, const char *target) { return cf_verify_for_target(g, target); }

cf_status cf_graph_run_passes(cf_graph *g, const char *passes) {
  if (!g) return CF_ERR_USAGE;
  g->generation++; /* passes rewrite the graph: executables made before are stale */
  return cf_passes_run(g, cf_pipeline_list(passes), NULL, NULL, NULL);
}

cf_status cf_graph_write_xml(const cf_graph *g, const char *path) {
  return cf_frontend_write_xml(g, path);
}

cf_status cf_graph_write_dot(const cf_graph *g, const char *path) {
  return cf_graph_write_dot_diags(g, path, NULL, NULL);
}

size_t cf_graph_node_count(const cf_graph *g) { return g ? (size_t)g->n_nodes : 0; }

size_t cf_graph_collective_count(const cf_graph *g) {
  size_t c = 0;
  for (int i = 0; g && i < g->n_nodes; i++)
    c += cf_op_is_collective(g->nodes[i].op);
  return c;
}

const char *cf_target_name(size_t i) { return cf_target_at(i); }
