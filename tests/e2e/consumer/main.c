/* An application built against an installed collfuse: loads a graph,
 * verifies it and prints its node count. */
#include <collfuse/collfuse.h>
#include <stdio.h>

int main(int argc, char **argv) {
  cf_context *ctx;
  cf_graph *g;
  if (argc < 2 || cf_context_create(&ctx) != CF_OK) return 2;
  if (cf_graph_load(ctx, argv[1], &g) != CF_OK || cf_graph_verify(g, "cpu") != CF_OK) {
    fprintf(stderr, "%s\n", cf_context_errmsg(ctx));
    cf_context_destroy(ctx);
    return 1;
  }
  printf("collfuse %s (header %s): %zu nodes\n", cf_version(), CF_VERSION_STRING,
         cf_graph_node_count(g));
  cf_graph_destroy(g);
  cf_context_destroy(ctx);
  return 0;
}
