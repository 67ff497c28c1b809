/* shard.c - Shard: a rank's block of a global tensor.
 *
 * Frameworks write SPMD programs in the global view: a parameter has the
 * shape of the whole tensor and a sharding says how it is cut across the
 * devices (XLA's `sharding={devices=[8,1]<=[8]}`, Shardy's
 * `#sdy.sharding<@mesh, [{"tp"}, {}]>`). Where the program enters a
 * per-device region (a shard_map body: `xla.sdy.GlobalToLocalShape`,
 * `SPMDFullToShardShape`, `sdy.manual_computation`), each device continues
 * with its own block. collfuse runs the per-rank program, so that entry is
 * a Shard node: the global tensor in, the rank's block out, which is what
 * XLA's partitioner makes of it (a dynamic-slice by partition id).
 *
 * The cut is XLA's tile assignment: `tiles` says how many blocks each dim
 * is cut into, `devices` lists the rank that holds each block, blocks in
 * row-major order; when there are k times as many ranks as blocks, k
 * consecutive entries hold the same block (XLA's last_tile_dim_replicate).
 * Without `devices` the ranks hold the blocks in world order.
 *
 * One routine checks a node and finds a rank's block (the verifier, the
 * executor and the float64 reference all call it), and one copies a block
 * out of a row-major tensor, for any element size.
 */
#include "ir.h"

#include <stdlib.h>
#include <string.h>

cf_status cf_shard_block(const cf_graph *g, const cf_node *n, const cf_shape *global, int rank,
                         cf_shape *local, int64_t *origin) {
  const cf_attr *ta = cf_node_attr(n, CF_A_TILES);
  const cf_shape *tiles = ta ? ta->v.shape : NULL;
  char b1[160], b2[160];
  if (!tiles) return cf_node_error(g, n, CF_ERR_INVALID, "Shard needs tiles");
  if (tiles->rank != global->rank)
    return cf_node_error(
        g, n, CF_ERR_INVALID, "tiles (%s) must have one entry per dim of the operand (%s)",
        cf_shape_format(tiles, b1, sizeof b1), cf_shape_format(global, b2, sizeof b2));
  int64_t blocks = 1;
  *local = *global;
  for (int d = 0; d < tiles->rank; d++) {
    int64_t t = tiles->dims[d];
    if (t < 1 || global->dims[d] % t)
      return cf_node_error(g, n, CF_ERR_INVALID,
                           "tiles (%s) must cut each dim of the operand (%s) into whole blocks: "
                           "dim %d",
                           cf_shape_format(tiles, b1, sizeof b1),
                           cf_shape_format(global, b2, sizeof b2), d);
    local->dims[d] = global->dims[d] / t;
    if (blocks > CF_MAX_WORLD / t)
      return cf_node_error(g, n, CF_ERR_INVALID, "tiles (%s) make more than %d blocks",
                           cf_shape_format(tiles, b1, sizeof b1), CF_MAX_WORLD);
    blocks *= t;
  }
  int64_t world = g->world_size;
  if (world < 1)
    return cf_node_error(g, n, CF_ERR_INVALID,
                         "Shard needs the graph's world_size (how many ranks share the blocks)");
  if (world % blocks)
    return cf_node_error(g, n, CF_ERR_INVALID,
                         "%lld blocks cannot be shared evenly by world_size %lld ranks",
                         (long long)blocks, (long long)world);
  int dev[CF_MAX_WORLD], nd = (int)world;
  cf_ints ds = cf_node_ints(n, CF_A_DEVICES);
  if (ds.n >= 0) {
    if (ds.n != world)
      return cf_node_error(g, n, CF_ERR_INVALID,
                           "devices lists %d ranks; every one of world_size %lld must appear once",
                           ds.n, (long long)world);
    bool seen[CF_MAX_WORLD] = {false};
    for (int i = 0; i < nd; i++) {
      if (ds.v[i] < 0 || ds.v[i] >= world)
        return cf_node_error(g, n, CF_ERR_INVALID, "devices: rank %lld is not below world_size %lld",
                             (long long)ds.v[i], (long long)world);
      if (seen[ds.v[i]])
        return cf_node_error(g, n, CF_ERR_INVALID, "devices lists rank %lld twice",
                             (long long)ds.v[i]);
      seen[ds.v[i]] = true;
      dev[i] = (int)ds.v[i];
    }
  } else {
    for (int i = 0; i < nd; i++)
      dev[i] = i;
  }
  if (rank < 0) return CF_OK; /* checking only */
  int pos = 0;
  while (pos < nd && dev[pos] != rank)
    pos++;
  if (pos == nd)
    return cf_node_error(g, n, CF_ERR_INVALID, "rank %d holds no block (world_size %lld)", rank,
                         (long long)world);
  int64_t block = pos / (world / blocks); /* replicas are consecutive */
  for (int d = tiles->rank - 1; d >= 0; d--) {
    origin[d] = block % tiles->dims[d] * local->dims[d];
    block /= tiles->dims[d];
  }
  return CF_OK;
}

void cf_copy_block(const void *src, const cf_shape *global, const int64_t *origin,
                   const cf_shape *local, size_t esize, void *dst) {
  int r = global->rank;
  int64_t count;
  if (!cf_shape_elements(local, &count) || count == 0) return;
  if (r == 0) {
    memcpy(dst, src, esize);
    return;
  }
  /* rows along the last dim are contiguous: walk the other dims' indices */
  size_t row = (size_t)local->dims[r - 1] * esize;
  int64_t idx[CF_MAX_RANK] = {0};
  char *out = dst;
  for (int64_t done = 0; done < count; done += local->dims[r - 1]) {
    int64_t off = 0;
    for (int d = 0; d < r; d++)
      off = off * global->dims[d] + origin[d] + (d < r - 1 ? idx[d] : 0);
    memcpy(out, (const char *)src + (size_t)off * esize, row);
    out += row;
    for (int d = r - 2; d >= 0; d--) {
      if (++idx[d] < local->dims[d]) break;
      idx[d] = 0;
    }
  }
}
