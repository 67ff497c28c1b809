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

int cf_world_host_processes(const cf_world *w) {
  return w && w->ops->host_processes ? w->ops->host_processes(w) : 1;
}

const char *cf_world_host(const cf_world *w) {
  return w && w->ops->host ? w->ops->host(w) : "";
}

cf_algo_policy cf_world_auto(const cf_world *w) {
  return w && w->ops->auto_policy ? (cf_algo_policy)w->ops->auto_policy(w) : CF_POLICY_AUTO;
}

cf_status cf_world_max(cf_world *w, double *v, int n) {
  return w && w->ops->max ? w->ops->max(w, v, n) : CF_OK;
}

void cf_world_abort(cf_world *w, const char *text) {
  if (w && w->ops->abort) w->ops->abort(w, text);
}

cf_status cf_world_native_groups(cf_world *w, const cf_world_group *groups, int n) {
  return w && w->ops->native_groups ? w->ops->native_groups(w, groups, n) : CF_OK;
}
