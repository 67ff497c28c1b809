/* hlo_groups.c - replica_groups of HLO collectives to IR groups.
 *
 * replica_groups in every printed form become device ranks, then IR groups:
 * one per distinct set, partitioned into one part per replica group when
 * there are several ({{0,1},{2,3}}, iota [2,4]<=[8], one axis of a 2-D
 * mesh), so every rank runs the collective with the part that holds it, as
 * XLA does. Replica groups of different sizes (which only all-reduce
 * allows) cannot be an IR group: such a collective is imported as Opaque
 * and a warning goes to the log sink (hlo_eval.c).
 */
#include "hlo_reader.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Growable int list (malloc'd) for parsing. */
typedef struct ivec {
  int *v;
  size_t n, cap;
} ivec;

static bool ivec_push(ivec *a, int x) {
  if (a->n == a->cap) {
    size_t cap = a->cap ? a->cap * 2 : 64;
    int *nv = realloc(a->v, cap * sizeof *nv);
    if (!nv) return false;
    a->v = nv;
    a->cap = cap;
  }
  a->v[a->n++] = x;
  return true;
}

/* Parsed replica groups before the mode is applied. */
typedef struct rgroups {
  bool all;      /* {}: every device */
  ivec ids, off; /* flattened ids, subgroup start offsets (off has n_sub + 1) */
  char axes[CF_MAX_GROUP_NAME + 1];
  int64_t mesh; /* devices of the mesh form */
} rgroups;

#define RG_FAIL(...) return cf_hlo_fail(r, in->line, __VA_ARGS__)

/* {{0,1},{2,3}} or {} */
static cf_status rg_explicit(hlo_reader *r, const hinstr *in, const char *p, const char *e,
                             rgroups *g) {
  p = cf_hlo_skip(p + 1, e);
  if (p < e && *p == '}') {
    g->all = true;
    return cf_hlo_skip(p + 1, e) == e
               ? CF_OK
               : cf_hlo_fail(r, in->line, "instruction '%s': junk after replica_groups={}",
                             in->name);
  }
  for (;;) {
    if (p >= e || *p != '{')
      RG_FAIL("instruction '%s': replica_groups: expected '{' starting a group", in->name);
    p = cf_hlo_skip(p + 1, e);
    if (p < e && *p == '}') RG_FAIL("instruction '%s': replica_groups: an empty group", in->name);
    for (;;) {
      int64_t id;
      cf_span num = cf_hlo_number_at(p, e);
      if (num.n && !cf_hlo_read_int(&p, e, CF_MAX_WORLD - 1, &id))
        RG_FAIL("instruction '%s': replica_groups: device id %s is not in 0..%d", in->name,
                CF_SPAN_QUOTE(num), CF_MAX_WORLD - 1);
      if (!num.n)
        RG_FAIL("instruction '%s': replica_groups: expected a device id in 0..%d", in->name,
                CF_MAX_WORLD - 1);
      if (g->ids.n >= CF_MAX_WORLD)
        RG_FAIL("instruction '%s': replica_groups list more than %d ids", in->name, CF_MAX_WORLD);
      if (!ivec_push(&g->ids, (int)id)) return cf_hlo_oom(r, in->line);
      p = cf_hlo_skip(p, e);
      if (p < e && *p == ',')
        p = cf_hlo_skip(p + 1, e);
      else if (p < e && *p == '}')
        break;
      else
        RG_FAIL("instruction '%s': replica_groups: expected ',' or '}'", in->name);
    }
    if (!ivec_push(&g->off, (int)g->ids.n)) return cf_hlo_oom(r, in->line);
    p = cf_hlo_skip(p + 1, e);
    if (p < e && *p == ',')
      p = cf_hlo_skip(p + 1, e);
    else if (p < e && *p == '}')
      break;
    else
      RG_FAIL("instruction '%s': replica_groups: expected ',' or '}' after a group", in->name);
  }
  if (cf_hlo_skip(p + 1, e) != e) RG_FAIL("instruction '%s': junk after replica_groups", in->name);
  return CF_OK;
}

/* [G,S]<=[d0,d1,...] with an optional T(perm): iota over d, transposed,
 * flattened and cut into G groups of S. */
static cf_status rg_iota(hlo_reader *r, const hinstr *in, const char *p, const char *e,
                         rgroups *g) {
  int64_t gs[2], d[CF_MAX_RANK], perm[CF_MAX_RANK];
  int ng, nd, np;
  if (!(p = cf_hlo_int_list(p, e, ']', CF_MAX_WORLD, gs, 2, &ng)) || ng != 2 || !gs[0] || !gs[1])
    RG_FAIL("instruction '%s': iota replica_groups: expected [groups,size]", in->name);
  p = cf_hlo_skip(p, e);
  if (e - p < 2 || p[0] != '<' || p[1] != '=')
    RG_FAIL("instruction '%s': iota replica_groups: expected '<='", in->name);
  p = cf_hlo_skip(p + 2, e);
  if (p >= e || *p != '[' || !(p = cf_hlo_int_list(p, e, ']', CF_MAX_WORLD, d, CF_MAX_RANK, &nd)) ||
      !nd)
    RG_FAIL("instruction '%s': iota replica_groups: bad reshape dims (1..%d dims of 1..%d)",
            in->name, CF_MAX_RANK, CF_MAX_WORLD);
  for (int i = 0; i < nd; i++)
    if (!d[i]) RG_FAIL("instruction '%s': iota replica_groups: a reshape dim of 0", in->name);
  p = cf_hlo_skip(p, e);
  if (p < e && *p == 'T') {
    p = cf_hlo_skip(p + 1, e);
    if (p >= e || *p != '(' || !(p = cf_hlo_int_list(p, e, ')', nd - 1, perm, CF_MAX_RANK, &np)))
      RG_FAIL("instruction '%s': iota replica_groups: T() must permute 0..%d", in->name, nd - 1);
  } else {
    for (np = 0; np < nd; np++)
      perm[np] = np;
  }
  if (cf_hlo_skip(p, e) != e) RG_FAIL("instruction '%s': junk after iota replica_groups", in->name);
  bool seen[CF_MAX_RANK] = {0};
  for (int i = 0; i < np; i++) {
    if (seen[perm[i]])
      RG_FAIL("instruction '%s': iota replica_groups: T() must permute 0..%d", in->name, nd - 1);
    seen[perm[i]] = true;
  }
  if (np != nd)
    RG_FAIL("instruction '%s': iota replica_groups: T() must permute 0..%d", in->name, nd - 1);
  int64_t total = 1, want;
  for (int i = 0; i < nd; i++)
    if (!cf_mul_i64(total, d[i], &total) || total > CF_MAX_WORLD)
      RG_FAIL("instruction '%s': iota replica_groups: more than %d devices", in->name,
              CF_MAX_WORLD);
  if (!cf_mul_i64(gs[0], gs[1], &want) || want != total)
    RG_FAIL("instruction '%s': iota replica_groups: %lld x %lld groups but %lld devices", in->name,
            (long long)gs[0], (long long)gs[1], (long long)total);
  /* element f of the transposed array: its multi-index j over dims d[perm[k]]
   * is index i over d with i[perm[k]] = j[k]; the value is i row-major. */
  int64_t stride[CF_MAX_RANK];
  for (int k = nd - 1, s = 1; k >= 0; k--) {
    stride[k] = s;
    s *= (int)d[k];
  }
  for (int64_t f = 0; f < total; f++) {
    int64_t rest = f, v = 0;
    for (int k = nd - 1; k >= 0; k--) {
      int64_t dk = d[perm[k]];
      v += (rest % dk) * stride[perm[k]];
      rest /= dk;
    }
    if (!ivec_push(&g->ids, (int)v)) return cf_hlo_oom(r, in->line);
    if ((f + 1) % gs[1] == 0 && !ivec_push(&g->off, (int)(f + 1))) return cf_hlo_oom(r, in->line);
  }
  return CF_OK;
}

/* An axis name, 'quoted' or bare. */
static const char *mesh_axis(const char *p, const char *e, cf_span *out) {
  if (p < e && (*p == '\'' || *p == '"')) {
    const char *q = cf_hlo_past_quoted(p, e);
    out->p = p + 1;
    out->n = q > p + 1 && q[-1] == *p ? (size_t)(q - p - 2) : 0;
    return q;
  }
  return cf_hlo_read_name(p, e, out);
}

cf_status cf_hlo_mesh_groups(hlo_reader *r, int line, const int64_t *size, int na, const int *sel,
                             int ns, hrg *out) {
  int64_t stride[HLO_MAX_AXES], gsize = 1, ngroups = 1, total = 1;
  int other[HLO_MAX_AXES], no = 0;
  for (int k = na - 1; k >= 0; k--) {
    stride[k] = total;
    if (size[k] < 1 || !cf_mul_i64(total, size[k], &total) || total > CF_MAX_WORLD)
      return cf_hlo_fail(r, line, "mesh: axis sizes must be >= 1 and multiply to at most %d",
                         CF_MAX_WORLD);
  }
  /* the selected and the other axes are factors of total: no overflow */
  for (int k = 0; k < na; k++) {
    bool is_sel = false;
    for (int j = 0; j < ns; j++)
      is_sel |= sel[j] == k;
    if (!is_sel) {
      other[no++] = k;
      ngroups *= size[k];
    }
  }
  for (int j = 0; j < ns; j++)
    gsize *= size[sel[j]];
  int *off = cf_arena_array(&r->scratch, (size_t)ngroups + 1, sizeof *off);
  int *ids = cf_arena_array(&r->scratch, (size_t)total, sizeof *ids);
  if (!off || !ids) return cf_hlo_oom(r, line);
  int n = 0;
  off[0] = 0;
  for (int64_t gi = 0; gi < ngroups; gi++) {
    int64_t base = 0, rest = gi;
    for (int k = no - 1; k >= 0; k--) {
      base += (rest % size[other[k]]) * stride[other[k]];
      rest /= size[other[k]];
    }
    for (int64_t j = 0; j < gsize; j++) {
      int64_t id = base;
      rest = j;
      for (int k = ns - 1; k >= 0; k--) {
        id += (rest % size[sel[k]]) * stride[sel[k]];
        rest /= size[sel[k]];
      }
      ids[n++] = (int)id;
    }
    off[gi + 1] = n;
  }
  *out = (hrg){.n_sub = (int)ngroups, .off = off, .ids = ids, .mesh = total};
  return CF_OK;
}

/* mesh['a'=2,'b'=4] {'b'}: devices laid out row-major over the mesh; a group
 * is the devices that differ only along the listed axes (in listed order). */
static cf_status rg_mesh(hlo_reader *r, const hinstr *in, const char *p, const char *e,
                         rgroups *g) {
  cf_span name[HLO_MAX_AXES];
  int64_t size[HLO_MAX_AXES], total = 1;
  int na = 0, sel[HLO_MAX_AXES], ns = 0;
  p = cf_hlo_skip(p + 4, e);
  if (p >= e || *p != '[') RG_FAIL("instruction '%s': mesh replica_groups: expected '['", in->name);
  for (p = cf_hlo_skip(p + 1, e);;) {
    if (na == HLO_MAX_AXES)
      RG_FAIL("instruction '%s': mesh with more than %d axes", in->name, HLO_MAX_AXES);
    p = cf_hlo_skip(mesh_axis(p, e, &name[na]), e);
    if (!name[na].n || p >= e || *p != '=')
      RG_FAIL("instruction '%s': mesh replica_groups: expected 'axis'=size", in->name);
    p = cf_hlo_skip(p + 1, e);
    if (!cf_hlo_read_int(&p, e, CF_MAX_WORLD, &size[na]) || !size[na] ||
        !cf_mul_i64(total, size[na], &total) || total > CF_MAX_WORLD)
      RG_FAIL("instruction '%s': mesh replica_groups: axis sizes must be >= 1 and multiply to at "
              "most %d",
              in->name, CF_MAX_WORLD);
    for (int k = 0; k < na; k++)
      if (name[k].n == name[na].n && memcmp(name[k].p, name[na].p, name[k].n) == 0)
        RG_FAIL("instruction '%s': mesh axis '%s' given twice", in->name, CF_SPAN_QUOTE(name[na]));
    na++;
    p = cf_hlo_skip(p, e);
    if (p < e && *p == ',')
      p = cf_hlo_skip(p + 1, e);
    else if (p < e && *p == ']')
      break;
    else
      RG_FAIL("instruction '%s': mesh replica_groups: expected ',' or ']'", in->name);
  }
  p = cf_hlo_skip(p + 1, e);
  if (p >= e || *p != '{')
    RG_FAIL("instruction '%s': mesh replica_groups: expected the axes {'axis',...}", in->name);
  for (p = cf_hlo_skip(p + 1, e); p < e && *p != '}';) {
    cf_span ax;
    p = cf_hlo_skip(mesh_axis(p, e, &ax), e);
    if (p < e && *p == ':')
      RG_FAIL("instruction '%s': mesh sub-axes ('axis':(k)n) are not supported", in->name);
    int k = 0;
    while (k < na && !(name[k].n == ax.n && memcmp(name[k].p, ax.p, ax.n) == 0))
      k++;
    if (!ax.n || k == na)
      RG_FAIL("instruction '%s': replica_groups name axis '%s', which the mesh does not have",
              in->name, CF_SPAN_QUOTE(ax));
    for (int j = 0; j < ns; j++)
      if (sel[j] == k)
        RG_FAIL("instruction '%s': replica_groups list axis '%s' twice", in->name,
                CF_SPAN_QUOTE(ax));
    sel[ns++] = k;
    if (p < e && *p == ',')
      p = cf_hlo_skip(p + 1, e);
    else if (p >= e || *p != '}')
      RG_FAIL("instruction '%s': mesh replica_groups: expected ',' or '}'", in->name);
  }
  if (p >= e || cf_hlo_skip(p + 1, e) != e)
    RG_FAIL("instruction '%s': junk after mesh replica_groups", in->name);
  hrg m;
  cf_status st = cf_hlo_mesh_groups(r, in->line, size, na, sel, ns, &m);
  if (st) return st;
  for (int i = 0; i < m.n_sub; i++) {
    for (int j = m.off[i]; j < m.off[i + 1]; j++)
      if (!ivec_push(&g->ids, m.ids[j])) return cf_hlo_oom(r, in->line);
    if (!ivec_push(&g->off, (int)g->ids.n)) return cf_hlo_oom(r, in->line);
  }
  g->mesh = total;
  size_t o = 0;
  for (int j = 0; j < ns && o < sizeof g->axes; j++) {
    int w = snprintf(g->axes + o, sizeof g->axes - o, "%s%.*s", j ? "_" : "", (int)name[sel[j]].n,
                     name[sel[j]].p);
    o = w < 0 ? sizeof g->axes : o + (size_t)w;
  }
  bool ok = o > 0 && o < sizeof g->axes;
  for (size_t i = 0; ok && g->axes[i]; i++)
    ok = is_name_char(g->axes[i]);
  if (!ok) g->axes[0] = 0; /* an unusable name: fall back to replica_group_K */
  return CF_OK;
}

/* Apply the collective's mode (XLA's CollectiveOpGroupMode) to turn ids into
 * ranks: flattened ids (channel_id + use_global_device_ids) are ranks; replica
 * ids of the other modes expand over the partitions. */
static cf_status rg_apply_mode(hlo_reader *r, const hinstr *in, rgroups *g) {
  const hattr *ugdi = cf_hlo_attr(in, "use_global_device_ids");
  bool channel = cf_hlo_attr(in, "channel_id") != NULL,
       global = ugdi && cf_span_is(ugdi->val, "true");
  int64_t P = r->partitions ? r->partitions : 1, R = r->replicas ? r->replicas : 1;
  if (global && !channel)
    return cf_hlo_fail(r, in->line,
                       "instruction '%s': use_global_device_ids=true needs a channel_id (in "
                       "StableHLO, a channel_handle with handle > 0)",
                       in->name);
  if (channel && global) return CF_OK;
  /* all-to-all and collective-broadcast have no use_global_device_ids: with
   * a channel_id their groups are partition ids within each replica (XLA's
   * cross-partition mode; with one partition, each replica alone) */
  if (channel && !ugdi &&
      (!strcmp(in->opcode, "all-to-all") || !strcmp(in->opcode, "collective-broadcast"))) {
    if (R == 1) return CF_OK;
    for (size_t i = 0; !g->all && i < g->ids.n; i++)
      if (g->ids.v[i] >= P)
        return cf_hlo_fail(r, in->line,
                           "instruction '%s': partition id %d in replica_groups but "
                           "num_partitions=%lld (with a channel_id, %s groups partitions)",
                           in->name, g->ids.v[i], (long long)P, in->opcode);
    ivec ids = {0}, off = {0};
    size_t nsub = g->all ? 1 : g->off.n - 1;
    bool ok = ivec_push(&off, 0);
    for (int64_t rep = 0; rep < R && ok; rep++)
      for (size_t s = 0; s < nsub && ok; s++) {
        size_t lo = g->all ? 0 : (size_t)g->off.v[s],
               hi = g->all ? (size_t)P : (size_t)g->off.v[s + 1];
        for (size_t i = lo; i < hi && ok; i++)
          ok = ivec_push(&ids, (int)(rep * P + (g->all ? (int64_t)i : g->ids.v[i])));
        ok = ok && ivec_push(&off, (int)ids.n);
      }
    free(g->ids.v);
    free(g->off.v);
    g->ids = ids;
    g->off = off;
    g->all = false;
    return ok ? CF_OK : cf_hlo_oom(r, in->line);
  }
  if (P == 1) return CF_OK;
  /* replica ids: cross-replica (no channel_id) groups replicas within each
   * partition; cross-replica-and-partition groups them across all partitions */
  /* ids below R, each once, expand to at most R * P ranks */
  if (!g->all && (int64_t)g->ids.n > R)
    return cf_hlo_fail(
        r, in->line, "instruction '%s': replica_groups list %zu replica ids but replica_count=%lld",
        in->name, g->ids.n, (long long)R);
  ivec ids = {0}, off = {0};
  cf_status st = CF_OK;
  size_t nsub = g->all ? 1 : g->off.n - 1;
  for (int64_t part = 0; part < (channel ? 1 : P) && !st; part++)
    for (size_t s = 0; s < nsub && !st; s++) {
      size_t lo = g->all ? 0 : (size_t)g->off.v[s],
             hi = g->all ? (size_t)R : (size_t)g->off.v[s + 1];
      for (size_t i = lo; i < hi && !st; i++) {
        int64_t rep = g->all ? (int64_t)i : g->ids.v[i];
        if (rep >= R)
          st = cf_hlo_fail(r, in->line, "instruction '%s': replica id %lld but replica_count=%lld",
                           in->name, (long long)rep, (long long)R);
        for (int64_t q = channel ? 0 : part; q < (channel ? P : part + 1) && !st; q++)
          if (!ivec_push(&ids, (int)(rep * P + q))) st = cf_hlo_oom(r, in->line);
      }
      if (!st && !ivec_push(&off, (int)ids.n)) st = cf_hlo_oom(r, in->line);
    }
  if (!st) {
    free(g->ids.v);
    free(g->off.v);
    g->ids = ids;
    g->off = (ivec){0};
    g->all = false;
    if (!ivec_push(&g->off, 0)) st = cf_hlo_oom(r, in->line);
    for (size_t i = 0; i < off.n && !st; i++)
      if (!ivec_push(&g->off, off.v[i])) st = cf_hlo_oom(r, in->line);
    free(off.v);
    return st;
  }
  free(ids.v);
  free(off.v);
  return st;
}

/* The first id of 0..n-1 that the n ids as written leave out, n when none
 * (or when one is listed twice: the check of the ranks names it). XLA's
 * verifier (CheckReplicaGroups: "Replica N is not named") and StableHLO's
 * ("replica id #N not seen in replica groups") refuse {{0,1,3}}, which
 * would otherwise read as a world of 4 where device 2 never takes part.
 * collective-broadcast is not held to it (StableHLO's interpreter tests
 * broadcast over [[2, 1]]). */
static cf_status rg_missing(hlo_reader *r, const hinstr *in, const rgroups *g, size_t *missing) {
  size_t n = g->ids.n;
  *missing = n;
  if (g->all || !n || !strcmp(in->opcode, "collective-broadcast")) return CF_OK;
  unsigned char *seen = calloc(n, 1);
  if (!seen) return cf_hlo_oom(r, in->line);
  bool dup = false;
  for (size_t i = 0; i < n; i++) {
    size_t id = (size_t)g->ids.v[i];
    if (id < n) {
      dup |= seen[id];
      seen[id] = 1;
    }
  }
  for (size_t i = 0; i < n && !dup && *missing == n; i++)
    if (!seen[i]) *missing = i;
  free(seen);
  return CF_OK;
}

/* The n ids written are every replica, partition or device the mode
 * groups, when the module says how many (XLA's CheckReplicaGroups: "In
 * kCrossReplica mode, replica groups should contain 8 replicas, but found
 * 2"): {{0,1}} with replica_count=8 would leave replicas 2..7 in no group.
 * A count of 1 (or none) is not checked, as XLA does not; nor is
 * collective-broadcast (StableHLO's interpreter broadcasts over 2 of 4). */
static cf_status rg_count(hlo_reader *r, const hinstr *in, size_t n) {
  if (!strcmp(in->opcode, "collective-broadcast")) return CF_OK;
  const hattr *ugdi = cf_hlo_attr(in, "use_global_device_ids");
  bool channel = cf_hlo_attr(in, "channel_id") != NULL,
       global = ugdi && cf_span_is(ugdi->val, "true");
  bool by_partition = channel && !ugdi &&
                      (!strcmp(in->opcode, "all-to-all") ||
                       !strcmp(in->opcode, "collective-broadcast"));
  int64_t R = r->replicas ? r->replicas : 1, P = r->partitions ? r->partitions : 1;
  int64_t want = channel && global ? R * P : by_partition ? P : R;
  const char *mode = channel && global ? "flattened device ids"
                     : by_partition    ? "partitions"
                                       : "replicas";
  if (want == 1 || (int64_t)n == want) return CF_OK;
  return cf_hlo_fail(r, in->line,
                     "instruction '%s': replica_groups list %zu ids but the module has %lld %s "
                     "(replica_count=%lld, num_partitions=%lld): each must be in one group",
                     in->name, n, (long long)want, mode, (long long)R, (long long)P);
}

/* Replica groups in the order of their first device: the order of the
 * groups themselves means nothing ({{2,3},{0,1}} is {{0,1},{2,3}}), so
 * collectives that list them differently share one IR group and may fuse.
 * The order inside a group is kept: it orders AllGather's and
 * ReduceScatter's blocks. */
typedef struct rg_part {
  int first, start, len;
} rg_part;

static int rg_part_cmp(const void *a, const void *b) {
  const rg_part *x = a, *y = b;
  return (x->first > y->first) - (x->first < y->first);
}

static cf_status rg_canonical(hlo_reader *r, const hinstr *in, rgroups *g) {
  size_t n = g->off.n ? g->off.n - 1 : 0;
  if (g->all || n < 2) return CF_OK;
  bool sorted = true;
  for (size_t i = 0; i < n; i++) {
    if (g->off.v[i + 1] == g->off.v[i]) return CF_OK; /* an empty group: left as written */
    if (i && g->ids.v[g->off.v[i]] < g->ids.v[g->off.v[i - 1]]) sorted = false;
  }
  if (sorted) return CF_OK;
  rg_part *parts = malloc(n * sizeof *parts);
  int *ids = malloc(g->ids.n * sizeof *ids);
  if (!parts || !ids) {
    free(parts);
    free(ids);
    return cf_hlo_oom(r, in->line);
  }
  for (size_t i = 0; i < n; i++)
    parts[i] = (rg_part){g->ids.v[g->off.v[i]], g->off.v[i], g->off.v[i + 1] - g->off.v[i]};
  qsort(parts, n, sizeof *parts, rg_part_cmp);
  int k = 0;
  for (size_t i = 0; i < n; i++) {
    g->off.v[i] = k;
    memcpy(ids + k, g->ids.v + parts[i].start, (size_t)parts[i].len * sizeof *ids);
    k += parts[i].len;
  }
  g->off.v[n] = k;
  memcpy(g->ids.v, ids, (size_t)k * sizeof *ids);
  free(parts);
  free(ids);
  return CF_OK;
}

static bool gset_equal(const hgset *a, int n_sub, const int *off, const int *ranks) {
  if (a->n_sub != n_sub) return false;
  if (!n_sub) return true;
  return memcmp(a->off, off, (size_t)(n_sub + 1) * sizeof *off) == 0 &&
         memcmp(a->ranks, ranks, (size_t)off[n_sub] * sizeof *ranks) == 0;
}

/* Sets are found by their ranks, and a base's next free suffix by the base,
 * through two hash tables (at most half full), so N collectives with N
 * different groups cost O(N), not a scan of every set (and of every suffix
 * taken) per collective. */
static uint64_t gset_hash(int n_sub, const int *off, const int *ranks) {
  uint64_t h = cf_fnv1a(CF_FNV_SEED, &n_sub, sizeof n_sub);
  if (!n_sub) return h;
  h = cf_fnv1a(h, off, (size_t)(n_sub + 1) * sizeof *off);
  return cf_fnv1a(h, ranks, (size_t)off[n_sub] * sizeof *ranks);
}

/* The slot of the set with these ranks, or the empty slot where it goes. */
static hgset **by_ranks_slot(hlo_reader *r, uint64_t h, int n_sub, const int *off,
                             const int *ranks) {
  size_t i = h & (r->sets_cap - 1);
  while (r->by_ranks[i] &&
         (r->by_ranks[i]->hash != h || !gset_equal(r->by_ranks[i], n_sub, off, ranks)))
    i = (i + 1) & (r->sets_cap - 1);
  return &r->by_ranks[i];
}

/* The slot of the set that took base last, or the empty slot for it. */
static hgset **by_base_slot(hlo_reader *r, const char *base) {
  size_t i = cf_hash_str(base) & (r->sets_cap - 1);
  while (r->by_base[i] && strcmp(r->by_base[i]->base, base))
    i = (i + 1) & (r->sets_cap - 1);
  return &r->by_base[i];
}

/* Room for one more set in both tables. */
static bool sets_reserve(hlo_reader *r) {
  if ((r->n_sets + 1) * 2 <= r->sets_cap) return true;
  size_t cap = r->sets_cap ? r->sets_cap * 2 : 64;
  hgset **a = cf_arena_array(&r->scratch, cap, sizeof *a),
        **b = cf_arena_array(&r->scratch, cap, sizeof *b);
  if (!a || !b) return false;
  r->by_ranks = a;
  r->by_base = b;
  r->sets_cap = cap;
  for (hgset *c = r->sets; c; c = c->next) { /* newest first: the first per base is its last */
    *by_ranks_slot(r, c->hash, c->n_sub, c->off, c->ranks) = c;
    hgset **bs = c->base ? by_base_slot(r, c->base) : NULL;
    if (bs && !*bs) *bs = c;
  }
  return true;
}

/* Name the set's IR group and declare it: one rank list, or one part per
 * replica group when there are several (each part is a communicator); a
 * name already taken gets _2, _3, ... Replica groups of different sizes
 * cannot be one IR group: the set gets no name and its collectives stay
 * Opaque. */
static cf_status gset_declare(hlo_reader *r, hgset *s, const char *axes) {
  cf_graph *g = r->g;
  for (int i = 1; i < s->n_sub; i++)
    if (s->off[i + 1] - s->off[i] != s->off[1] - s->off[0]) return CF_OK;
  char base[CF_MAX_GROUP_NAME + 1], cand[CF_MAX_GROUP_NAME + 16];
  if (axes && *axes)
    snprintf(base, sizeof base, "%s", axes);
  else
    snprintf(base, sizeof base, "replica_group_%d", r->n_anon++);
  size_t bl = strlen(base);
  hgset **last = by_base_slot(r, base);
  int k = *last ? (*last)->suffix + 1 : 1; /* the suffixes below are taken */
  for (;; k++) {
    if (k == 1)
      snprintf(cand, sizeof cand, "%s", base);
    else
      snprintf(cand, sizeof cand, "%.*s_%d", (int)(bl > 100 ? 100 : bl), base, k);
    if (strlen(cand) <= CF_MAX_GROUP_NAME && !cf_graph_group(g, cand) &&
        strcmp(cand, CF_WORLD_GROUP))
      break;
  }
  if (!(s->name = cf_hlo_str(r, cand, strlen(cand))) || !(s->base = cf_hlo_str(r, base, bl)))
    return cf_hlo_oom(r, s->line);
  s->suffix = k;
  *last = s;
  return cf_graph_add_group_parts(g, s->name, s->ranks, s->off, s->n_sub, s->line);
}

/* The collective's replica groups as ranks, declared as IR groups (cached on
 * the instruction, shared by every instruction with the same groups). */
cf_status cf_hlo_coll_groups(hlo_reader *r, hinstr *in, const hgset **out) {
  if (in->groups) {
    *out = in->groups;
    return CF_OK;
  }
  rgroups g = {0};
  cf_status st = CF_OK;
  const hattr *a = cf_hlo_attr(in, "replica_groups");
  const char *p = a ? a->val.p : "{}", *e = a ? a->val.p + a->val.n : p + 2;
  if (!ivec_push(&g.off, 0)) return cf_hlo_oom(r, in->line);
  if (in->rg) { /* parsed by another reader */
    g.all = in->rg->all;
    g.mesh = in->rg->mesh;
    snprintf(g.axes, sizeof g.axes, "%s", in->rg->axes ? in->rg->axes : "");
    for (int i = 0; i < in->rg->n_sub && !st; i++) {
      for (int j = in->rg->off[i]; j < in->rg->off[i + 1] && !st; j++)
        if (!ivec_push(&g.ids, in->rg->ids[j])) st = cf_hlo_oom(r, in->line);
      if (!st && !ivec_push(&g.off, (int)g.ids.n)) st = cf_hlo_oom(r, in->line);
    }
  } else if (*p == '{')
    st = rg_explicit(r, in, p, e, &g);
  else if (*p == '[')
    st = rg_iota(r, in, p, e, &g);
  else if (cf_hlo_word_at(p, e, "mesh"))
    st = rg_mesh(r, in, p, e, &g);
  else
    st = cf_hlo_fail(r, in->line, "instruction '%s': unsupported replica_groups '%s'", in->name,
                     CF_SPAN_QUOTE(a->val));
  size_t n_written = g.ids.n, missing = 0;
  if (!st) st = rg_missing(r, in, &g, &missing);
  if (!st) st = rg_apply_mode(r, in, &g);
  if (!st) st = rg_canonical(r, in, &g);
  int n_sub = g.all ? 0 : (int)g.off.n - 1;
  /* ranks: each once, inside the module's devices when it says how many */
  int64_t world = r->partitions || r->replicas
                      ? (r->partitions ? r->partitions : 1) * (r->replicas ? r->replicas : 1)
                      : 0;
  if (!st && !r->seen && !(r->seen = calloc(CF_MAX_WORLD, 1))) st = cf_hlo_oom(r, in->line);
  unsigned char *seen = r->seen;
  for (size_t i = 0; !st && i < g.ids.n; i++) {
    int id = g.ids.v[i];
    if (world && id >= world)
      st = cf_hlo_fail(r, in->line,
                       "instruction '%s': replica_groups name device %d but the module has %lld",
                       in->name, id, (long long)world);
    else if (seen[id]++)
      st = cf_hlo_fail(r, in->line, "instruction '%s': replica_groups list device %d twice",
                       in->name, id);
    else if (id > r->max_rank)
      r->max_rank = id;
  }
  for (size_t i = 0; seen && i < g.ids.n; i++)
    seen[g.ids.v[i]] = 0;
  if (!st && missing < n_written)
    st = cf_hlo_fail(r, in->line,
                     "instruction '%s': replica_groups list %zu ids but not %zu (they must be "
                     "0..%zu, each once)",
                     in->name, n_written, missing, n_written - 1);
  if (!st && n_written && !g.mesh) st = rg_count(r, in, n_written); /* a mesh names its own */
  if (!st && g.mesh > r->mesh_world) r->mesh_world = g.mesh;
  if (!st && g.all && !r->world_line) r->world_line = in->line;
  hgset *s = NULL, **slot = NULL;
  uint64_t h = st ? 0 : gset_hash(n_sub, g.off.v, g.ids.v);
  if (!st && !sets_reserve(r)) st = cf_hlo_oom(r, in->line);
  if (!st) s = *(slot = by_ranks_slot(r, h, n_sub, g.off.v, g.ids.v));
  if (!st && !s) {
    if (!(s = cf_arena_alloc(&r->scratch, sizeof *s))) st = cf_hlo_oom(r, in->line);
    if (!st && n_sub) {
      s->off = cf_arena_array(&r->scratch, (size_t)n_sub + 1, sizeof(int));
      s->ranks = g.ids.n ? cf_arena_array(&r->scratch, g.ids.n, sizeof(int)) : NULL;
      if (!s->off || (g.ids.n && !s->ranks)) st = cf_hlo_oom(r, in->line);
    }
    if (!st) {
      s->n_sub = n_sub;
      s->hash = h;
      s->line = in->line;
      if (n_sub) {
        memcpy(s->off, g.off.v, ((size_t)n_sub + 1) * sizeof(int));
        if (g.ids.n) memcpy(s->ranks, g.ids.v, g.ids.n * sizeof(int));
        st = gset_declare(r, s, g.axes);
      }
      s->next = r->sets;
      r->sets = s;
      *slot = s;
      r->n_sets++;
    }
  }
  free(g.ids.v);
  free(g.off.v);
  if (!st) *out = in->groups = s;
  return st;
}
