/* transports/world.c - the world slots, wrapped (STYLE: callers never call
 * a slot directly). How ranks come to exist is the world's business
 * (threads.c, mpi.c); the executor, the API and the tools only ask a world
 * for its endpoints.
 */
#include "transports.h"

#include <stddef.h>

cf_status cf_world_create(cf_context *ctx, const cf_world_ops *ops, int size, double timeout_s,
                          cf_world **out) {
  return ops->create(ctx, size, timeout_s, out);
}

cf_comm *cf_world_comm(cf_world *w, int rank) {
  return w && rank >= w->first && rank < w->first + w->local ? w->ops->comm(w, rank) : NULL;
}

void cf_world_rank_left(cf_world *w, int rank) {
  if (w && w->ops->rank_left) w->ops->rank_left(w, rank);
}

void cf_world_rank_thread(cf_world *w, int rank, int lane) {
  if (w && w->ops->rank_thread) w->ops->rank_thread(w, rank, lane);
}

void cf_world_destroy(cf_world *w, int exit_code) {
  if (w) w->ops->destroy(w, exit_code);
}
