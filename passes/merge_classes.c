/* merge_classes.c - grouping beyond equal depth: which classes of
 * collectives may share buckets without making a cycle.
 *
 * The combiner's classes (the collectives of one key at one collective
 * depth, and the buckets built so far) are antichains, and the graph with
 * every class contracted to one node is a DAG (combine.c's essay). Two
 * classes of one family may become one class when, in that contracted
 * graph (with the merges made so far), neither reaches the other. Then the
 * merged graph is a DAG again: a cycle through the merged node would be a
 * path leaving it and coming back, so a path from one of the two classes to
 * itself or to the other, in the graph before the merge. Any partition of a
 * class into buckets keeps it a DAG too (a cycle among the parts would map
 * to a cycle through the class). This is what XLA's combiners allow (a
 * reachability map: any independent collectives combine), where equal depth
 * alone cannot fuse crs00 with crs11 of XLA's CrossCombineGroupCycle, a
 * depth-0 and a depth-1 all-reduce of one reduction that no path joins.
 *
 * Reachability is kept as bitsets of classes: anc[c], the classes that reach
 * class c. One sweep in topological order gives the classes above every
 * node; Kahn's order over the classes then closes them under contraction (a
 * path into one member of a class leaves from every member). A merge of the
 * set S gives every member of S the union of their ancestors and adds that
 * union and S to the ancestors of every class S reaches, so anc stays the
 * closure of the current contracted graph. Classes are tried in index
 * order, each merged into the first earlier group of its family it is
 * independent of; with the combiner's order (depth within a family) a class
 * joins the shallowest group it can.
 *
 * Cost: nodes x classes bits for the sweep, classes^2 x classes / 64 word
 * operations for the merges. Beyond MAX_CLASSES classes or MAX_SWEEP_BYTES
 * of bits nothing merges: the classes stay those of equal depth.
 */
#include "passes.h"

#include <stdlib.h>
#include <string.h>

enum {
  MAX_CLASSES = 2048,
  MAX_SWEEP_BYTES = 64 << 20,
};

typedef uint64_t word;

static bool has(const word *s, int i) { return (s[i >> 6] >> (i & 63)) & 1; }
static void put(word *s, int i) { s[i >> 6] |= (word)1 << (i & 63); }

static bool meets(const word *a, const word *b, int w) {
  for (int k = 0; k < w; k++)
    if (a[k] & b[k]) return true;
  return false;
}

static void or_into(word *dst, const word *src, int w) {
  for (int k = 0; k < w; k++)
    dst[k] |= src[k];
}

/* anc[c] from the sweep (classes whose members reach a member of c) closed
 * under contraction, in Kahn's order of the class graph. False when the
 * classes are not an acyclic contraction (then nothing merges). */
static bool close_classes(word *anc, int ncls, int w) {
  int *indeg = calloc((size_t)ncls, sizeof(int)), *queue = malloc((size_t)ncls * sizeof(int));
  word *direct = malloc((size_t)ncls * (size_t)w * sizeof(word));
  bool ok = indeg && queue && direct;
  if (ok) memcpy(direct, anc, (size_t)ncls * (size_t)w * sizeof(word));
  for (int c = 0; ok && c < ncls; c++)
    for (int a = 0; a < ncls; a++)
      indeg[c] += has(direct + (size_t)c * w, a);
  int head = 0, tail = 0;
  for (int c = 0; ok && c < ncls; c++)
    if (!indeg[c]) queue[tail++] = c;
  while (ok && head < tail) {
    int c = queue[head++];
    word *ac = anc + (size_t)c * w;
    for (int a = 0; a < ncls; a++) /* every ancestor's own ancestors (final: Kahn) */
      if (has(direct + (size_t)c * w, a)) or_into(ac, anc + (size_t)a * w, w);
    for (int s = 0; s < ncls; s++)
      if (has(direct + (size_t)s * w, c) && --indeg[s] == 0) queue[tail++] = s;
  }
  ok = ok && tail == ncls;
  for (int c = 0; ok && c < ncls; c++)
    ok = !has(anc + (size_t)c * w, c);
  free(indeg), free(queue), free(direct);
  return ok;
}

cf_status cf_merge_classes(cf_graph *g, const int *node_cls, int ncls, const int *family,
                           int *group) {
  for (int c = 0; c < ncls; c++)
    group[c] = c;
  int nn = g->n_nodes, w = (ncls + 63) / 64;
  if (ncls < 2 || ncls > MAX_CLASSES || (size_t)nn * (size_t)w * sizeof(word) > MAX_SWEEP_BYTES)
    return CF_OK;
  word *above = calloc((size_t)nn * (size_t)w, sizeof(word));
  word *anc = calloc((size_t)ncls * (size_t)w, sizeof(word));
  word *mem = calloc((size_t)ncls * (size_t)w, sizeof(word)); /* a group's classes */
  word *s = malloc((size_t)w * sizeof(word)), *up = malloc((size_t)w * sizeof(word));
  if (!above || !anc || !mem || !s || !up) {
    free(above), free(anc), free(mem), free(s), free(up);
    return cf_error(g->ctx, CF_ERR_NO_MEMORY, g->file, 0, "out of memory");
  }
  for (int k = 0; k < nn; k++) {
    int v = g->topo[k];
    const cf_node *n = &g->nodes[v];
    word *a = above + (size_t)v * w;
    for (int j = 0; j < cf_node_n_deps(n); j++) {
      int u = cf_node_dep(n, j);
      or_into(a, above + (size_t)u * w, w);
      if (node_cls[u] >= 0) put(a, node_cls[u]);
    }
    if (node_cls[v] >= 0) or_into(anc + (size_t)node_cls[v] * w, a, w);
  }
  bool ok = close_classes(anc, ncls, w);
  for (int c = 0; c < ncls; c++)
    put(mem + (size_t)c * w, c);
  for (int c = 0; ok && c < ncls; c++) {
    if (family[c] < 0) continue;
    word *ac = anc + (size_t)c * w;
    for (int r = 0; r < c; r++) {
      if (group[r] != r || family[r] != family[c]) continue;
      word *ar = anc + (size_t)r * w, *mr = mem + (size_t)r * w;
      if (has(ar, c) || meets(ac, mr, w)) continue; /* one reaches the other */
      /* merge: S = r's group and c; up = what reaches S */
      put(mr, c);
      group[c] = r;
      memcpy(s, mr, (size_t)w * sizeof(word));
      memcpy(up, ar, (size_t)w * sizeof(word));
      or_into(up, ac, w);
      for (int x = 0; x < ncls; x++) {
        word *ax = anc + (size_t)x * w;
        if (has(s, x))
          memcpy(ax, up, (size_t)w * sizeof(word));
        else if (meets(ax, s, w)) /* S reaches x: so does all that reaches S */
          or_into(ax, up, w), or_into(ax, s, w);
      }
      break;
    }
  }
  free(above), free(anc), free(mem), free(s), free(up);
  return CF_OK;
}
