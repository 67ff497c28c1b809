/* hlo_sharding.c - how a sharding cuts an array across the devices.
 *
 * JAX writes a shard_map in the global view: the parameters have the
 * shapes of whole arrays, and the entry into the per-device body is a
 * custom-call that takes each device's block (Shardy:
 * `xla.sdy.GlobalToLocalShape` with `xla.sdy.in_shardings`; GSPMD: a
 * `Sharding` custom-call with `sharding={devices=[...]}` followed by
 * `SPMDFullToShardShape`). hlo_eval.c makes those entries Shard nodes
 * (ir/shard.c); this file reads the two sharding languages into the cut a
 * Shard node holds: blocks per dim (`tiles`) and the device holding each
 * block in row-major block order, replicas consecutive (XLA's tile
 * assignment, which is also what Shard's `devices` means).
 *
 * HLO: `{replicated}`, `{manual}` (no cut), `{devices=[2,4]0,1,...}`,
 * the iota form `{devices=[2,4]<=[8]}` and `<=[4,2]T(1,0)`, and
 * `last_tile_dim_replicate` / `last_tile_dims={replicated}`. Shardy:
 * `<@mesh, [{"a"}, {"b", "c"}, {}]>` against the module's
 * `xla.sdy.meshes` (`mesh = #sdy.mesh<["a"=2, "b"=4]>`): devices are laid
 * out row-major over the mesh axes, a dim's axes are major to minor, and
 * axes no dim names are replicas. Forms this does not run (maximal
 * shardings, sub-axes, open dims, explicit device_ids) leave the entry
 * Opaque, which check reports.
 */
#include "hlo_reader.h"

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define WHY(...) (snprintf(why, why_len, __VA_ARGS__), false)

static const char *skip_sp(const char *p, const char *e) {
  while (p < e && is_space(*p))
    p++;
  return p;
}

static bool lit(const char **pp, const char *e, const char *w) {
  const char *p = skip_sp(*pp, e);
  size_t n = strlen(w);
  if ((size_t)(e - p) < n || memcmp(p, w, n)) return false;
  *pp = p + n;
  return true;
}

/* iota(prod(dims)) reshaped to dims, transposed by perm, flattened */
static bool iota_devices(const int64_t *dims, int nd, const int64_t *perm, int np, int *dev,
                         int count) {
  int64_t total = 1, tdims[CF_MAX_RANK], idx[CF_MAX_RANK] = {0}, stride[CF_MAX_RANK];
  if (nd < 1 || nd > CF_MAX_RANK || (np && np != nd)) return false;
  for (int i = nd - 1; i >= 0; i--) {
    if (dims[i] < 1 || total > CF_MAX_WORLD / dims[i]) return false;
    stride[i] = total;
    total *= dims[i];
  }
  if (total != count) return false;
  bool used[CF_MAX_RANK] = {false};
  for (int i = 0; i < nd; i++) {
    int64_t q = np ? perm[i] : i;
    if (q < 0 || q >= nd || used[q]) return false;
    used[q] = true;
    tdims[i] = dims[q];
  }
  for (int k = 0; k < count; k++) { /* idx: position in the transposed array */
    int64_t v = 0;
    for (int i = 0; i < nd; i++)
      v += idx[i] * stride[np ? perm[i] : i];
    dev[k] = (int)v;
    for (int i = nd - 1; i >= 0; i--) {
      if (++idx[i] < tdims[i]) break;
      idx[i] = 0;
    }
  }
  return true;
}

bool cf_hlo_sharding_cut(cf_span text, int rank, hcut *out, char *why, size_t why_len) {
  const char *p = text.p, *e = text.p + text.n;
  memset(out, 0, sizeof *out);
  out->rank = rank;
  if (!lit(&p, e, "{")) return WHY("sharding: expected '{'");
  if (lit(&p, e, "replicated") || lit(&p, e, "manual"))
    return lit(&p, e, "}") || WHY("sharding: expected '}'");
  if (!lit(&p, e, "devices=") || (p = skip_sp(p, e)) >= e || *p != '[')
    return WHY("sharding '%.*s' is not one collfuse runs", (int)text.n, text.p);
  int64_t dims[CF_MAX_RANK + 1];
  int nd = 0;
  if (!(p = cf_hlo_int_list(p, e, ']', CF_MAX_WORLD, dims, CF_MAX_RANK + 1, &nd)) || nd < 1)
    return WHY("sharding: bad devices=[...] dims");
  int64_t count = 1;
  for (int i = 0; i < nd; i++) {
    if (dims[i] < 1 || count > CF_MAX_WORLD / dims[i])
      return WHY("sharding: devices=[...] must be positive and at most %d devices", CF_MAX_WORLD);
    count *= dims[i];
  }
  int64_t list[CF_MAX_WORLD];
  int nl = 0;
  if (lit(&p, e, "<=") && (p = skip_sp(p, e)) < e && *p == '[') { /* iota, maybe transposed */
    int64_t rd[CF_MAX_RANK], perm[CF_MAX_RANK];
    int nr = 0, np = 0;
    if (!(p = cf_hlo_int_list(p, e, ']', CF_MAX_WORLD, rd, CF_MAX_RANK, &nr)))
      return WHY("sharding: bad iota <=[...]");
    if (lit(&p, e, "T") && !(p = cf_hlo_int_list(p, e, ')', CF_MAX_RANK, perm, CF_MAX_RANK, &np)))
      return WHY("sharding: bad T(...)");
    if (!iota_devices(rd, nr, perm, np, out->dev, (int)count))
      return WHY("sharding: the iota device list does not match devices=[...]");
  } else {
    p = skip_sp(p, e);
    const char *q = p;
    while (q < e && *q != '}' && !is_space(*q))
      q++;
    int64_t hi = CF_MAX_WORLD - 1;
    /* "0,1,2,3" up to the next space or '}' */
    const char *le = q;
    const char *r0 = p;
    while (r0 < le) {
      int64_t v;
      if (nl == CF_MAX_WORLD || !cf_hlo_read_int(&r0, le, hi, &v))
        return WHY("sharding: bad device list");
      list[nl++] = v;
      if (r0 < le && *r0 == ',') r0++;
    }
    if (nl != count)
      return WHY("sharding: %d devices listed for devices=[...] of %lld", nl, (long long)count);
    for (int i = 0; i < nl; i++)
      out->dev[i] = (int)list[i];
    p = q;
  }
  int tile_dims = nd;
  if (lit(&p, e, "last_tile_dim_replicate") || lit(&p, e, "last_tile_dims={replicated}"))
    tile_dims--;
  if (!lit(&p, e, "}")) return WHY("sharding '%.*s' is not one collfuse runs", (int)text.n, text.p);
  if (tile_dims != rank)
    return WHY("sharding: devices=[...] has %d tile dims for an array of %d dims", tile_dims, rank);
  for (int i = 0; i < rank; i++)
    out->tiles[i] = dims[i];
  out->n_dev = (int)count;
  bool seen[CF_MAX_WORLD] = {false};
  for (int i = 0; i < out->n_dev; i++) {
    if (seen[out->dev[i]]) return WHY("sharding: device %d listed twice", out->dev[i]);
    seen[out->dev[i]] = true;
  }
  return true;
}

/* ---- Shardy ---- */

/* "name" (escapes already removed) */
static bool quoted(const char **pp, const char *e, cf_span *out) {
  const char *p = skip_sp(*pp, e);
  if (p >= e || *p != '"') return false;
  const char *q = ++p;
  while (q < e && *q != '"')
    q++;
  if (q >= e) return false;
  *out = (cf_span){p, (size_t)(q - p)};
  *pp = q + 1;
  return true;
}

/* ---- the module's meshes, by name ---- */

static bool mesh_index(hlo_reader *r, int i) {
  if (2 * ((size_t)i + 1) > r->mesh_slots_cap) { /* at most half full: grow and rebuild */
    size_t cap = r->mesh_slots_cap ? 2 * r->mesh_slots_cap : 64;
    int *slots = calloc(cap, sizeof *slots);
    if (!slots) return false;
    free(r->mesh_slots);
    r->mesh_slots = slots;
    r->mesh_slots_cap = cap;
    for (int k = 0; k < i; k++) {
      int *slot = cf_name_slot(slots, cap, r->meshes, offsetof(hmesh, name), sizeof(hmesh),
                               r->meshes[k].name);
      if (!*slot) *slot = k + 1;
    }
  }
  int *slot = cf_name_slot(r->mesh_slots, r->mesh_slots_cap, r->meshes, offsetof(hmesh, name),
                           sizeof(hmesh), r->meshes[i].name);
  if (!*slot) *slot = i + 1; /* a second mesh of one name is never found */
  return true;
}

hmesh *cf_hlo_mesh_add(hlo_reader *r, const char *name) {
  if (r->n_meshes == r->cap_meshes) {
    int cap = r->cap_meshes ? 2 * r->cap_meshes : 16;
    hmesh *more = cap > r->cap_meshes ? realloc(r->meshes, (size_t)cap * sizeof *more) : NULL;
    if (!more) {
      r->oom = true;
      return NULL;
    }
    r->meshes = more;
    r->cap_meshes = cap;
  }
  hmesh *m = &r->meshes[r->n_meshes];
  memset(m, 0, sizeof *m);
  if (!(m->name = cf_hlo_str(r, name, strlen(name))) || !mesh_index(r, r->n_meshes)) {
    r->oom = true;
    return NULL;
  }
  r->n_meshes++;
  return m;
}

const hmesh *cf_hlo_mesh_find(const hlo_reader *r, cf_span name) {
  char key[CF_MAX_NAME + 1];
  if (name.n > CF_MAX_NAME) return NULL; /* no mesh has such a name */
  memcpy(key, name.p, name.n);
  key[name.n] = 0;
  int i = cf_name_find(r->mesh_slots, r->mesh_slots_cap, r->meshes, offsetof(hmesh, name),
                       sizeof(hmesh), key);
  return i < 0 ? NULL : &r->meshes[i];
}

bool cf_hlo_mesh_set_axes(hlo_reader *r, hmesh *m, const cf_span *axis, const int64_t *size,
                          int n) {
  m->n = n;
  m->total = 1;
  for (int k = 0; k < n && m->total; k++)
    if (!cf_mul_i64(m->total, size[k], &m->total) || m->total > CF_MAX_WORLD) m->total = 0;
  if (!n) return true;
  m->axis = cf_arena_array(&r->scratch, (size_t)n, sizeof *m->axis);
  m->size = cf_arena_array(&r->scratch, (size_t)n, sizeof *m->size);
  if (!m->axis || !m->size) {
    r->oom = true;
    return false;
  }
  memcpy(m->axis, axis, (size_t)n * sizeof *axis);
  memcpy(m->size, size, (size_t)n * sizeof *size);
  return true;
}

/* The module's meshes (`{name = #sdy.mesh<["a"=2, ...]>, ...}`), read once
 * into r->meshes, so a lookup never rescans the text. */
static bool load_meshes(hlo_reader *r, cf_span meshes, char *why, size_t why_len) {
  const char *p = meshes.p, *e = meshes.p + meshes.n;
  r->meshes_loaded = true;
  while (p < e) {
    const char *at = p;
    while (at < e && (is_space(*at) || *at == '{' || *at == ',' || *at == '}'))
      at++;
    if (at == e) break;
    const char *ne = at;
    while (ne < e && is_name_char(*ne))
      ne++;
    p = ne;
    if (!lit(&p, e, "=") || !lit(&p, e, "#sdy.mesh<"))
      return WHY("xla.sdy.meshes: expected NAME = #sdy.mesh<...>");
    if (ne - at > CF_MAX_NAME)
      return WHY("xla.sdy.meshes: a mesh name longer than %d bytes", CF_MAX_NAME);
    cf_span axis[HLO_MAX_AXES];
    int64_t size[HLO_MAX_AXES];
    int n = 0;
    if (!lit(&p, e, "[")) return WHY("xla.sdy.meshes: expected '['");
    if (!lit(&p, e, "]")) {
      do {
        if (n == HLO_MAX_AXES) return WHY("mesh with more than %d axes", HLO_MAX_AXES);
        if (!quoted(&p, e, &axis[n]) || !lit(&p, e, "=") ||
            !cf_hlo_read_int(&p, e, CF_MAX_WORLD, &size[n]) || size[n] < 1)
          return WHY("xla.sdy.meshes: expected \"axis\"=size");
        p = skip_sp(p, e);
        n++;
      } while (lit(&p, e, ","));
      if (!lit(&p, e, "]")) return WHY("xla.sdy.meshes: expected ']'");
    }
    char name[CF_MAX_NAME + 1];
    memcpy(name, at, (size_t)(ne - at));
    name[ne - at] = 0;
    hmesh *m = cf_hlo_mesh_add(r, name);
    if (!m || !cf_hlo_mesh_set_axes(r, m, axis, size, n)) return WHY("out of memory");
    m->device_ids = lit(&p, e, ",");
    while (p < e && *p != '>') /* device_ids=[...] */
      p++;
    if (!lit(&p, e, ">")) return WHY("xla.sdy.meshes: expected '>'");
  }
  return true;
}

static const hmesh *find_mesh(const hlo_reader *r, cf_span name, char *why, size_t why_len) {
  const hmesh *m = cf_hlo_mesh_find(r, name);
  if (m && !m->device_ids) return m;
  if (m)
    snprintf(why, why_len, "mesh '%.*s' lists device_ids, which collfuse does not run", (int)name.n,
             name.p);
  else
    snprintf(why, why_len, "mesh '%.*s' is not declared in the module's xla.sdy.meshes",
             (int)name.n, name.p);
  return NULL;
}

/* One value's sharding `<@mesh, [{"a"}, {}]>` into a cut of an array of rank dims. */
static bool sdy_cut(const hlo_reader *r, const char **pp, const char *e, int rank, hcut *out,
                    char *why, size_t why_len) {
  const char *p = *pp;
  memset(out, 0, sizeof *out);
  out->rank = rank;
  if (!lit(&p, e, "<") || !lit(&p, e, "@")) return WHY("sdy sharding: expected <@mesh, [...]>");
  const char *ns = p;
  while (p < e && is_name_char(*p))
    p++;
  cf_span name = {ns, (size_t)(p - ns)};
  const hmesh *mp = find_mesh(r, name, why, why_len);
  if (!mp) return false;
  const hmesh m = *mp;
  if (!lit(&p, e, ",") || !lit(&p, e, "[")) return WHY("sdy sharding: expected [dims]");
  int axis_dim[HLO_MAX_AXES], axis_pos[HLO_MAX_AXES], d = 0;
  for (int k = 0; k < m.n; k++)
    axis_dim[k] = -1;
  if (!lit(&p, e, "]")) {
    do {
      if (d == rank) return WHY("sdy sharding: more dims than the array's %d", rank);
      if (!lit(&p, e, "{")) return WHY("sdy sharding: expected '{'");
      int pos = 0;
      if (!lit(&p, e, "}")) {
        do {
          cf_span ax;
          if (!quoted(&p, e, &ax))
            return WHY("sdy sharding: expected \"axis\" (open dims '?' are not run)");
          int k = 0;
          while (k < m.n && !(m.axis[k].n == ax.n && !memcmp(m.axis[k].p, ax.p, ax.n)))
            k++;
          if (k == m.n)
            return WHY("sdy sharding: axis '%.*s' is not in mesh '%.*s'", (int)ax.n, ax.p,
                       (int)name.n, name.p);
          if (axis_dim[k] >= 0) return WHY("sdy sharding: axis '%.*s' used twice", (int)ax.n, ax.p);
          axis_dim[k] = d;
          axis_pos[k] = pos++;
        } while (lit(&p, e, ","));
        if (!lit(&p, e, "}")) return WHY("sdy sharding: expected '}' (sub-axes are not run)");
      }
      p = skip_sp(p, e);
      if (p < e && *p == 'p') /* a priority: p0, p1 ... */
        for (p++; p < e && *p >= '0' && *p <= '9'; p++) {
        }
      d++;
    } while (lit(&p, e, ","));
    if (!lit(&p, e, "]")) return WHY("sdy sharding: expected ']'");
  }
  if (d != rank) return WHY("sdy sharding: %d dims for an array of %d", d, rank);
  while (p < e && *p != '>') /* replicated={...} and the like name no cut */
    p = *p == '{' || *p == '[' || *p == '"' ? cf_hlo_past(p, e) : p + 1;
  if (!lit(&p, e, ">")) return WHY("sdy sharding: expected '>'");
  *pp = p;
  /* devices row-major over the mesh; per dim its axes major to minor */
  int64_t world = m.total, replicas = 1;
  if (!world) /* the product of its sizes is checked (256^8 wrapped to 0) */
    return WHY("mesh '%.*s' has more than %d devices", (int)name.n, name.p, CF_MAX_WORLD);
  for (int i = 0; i < rank; i++)
    out->tiles[i] = 1;
  for (int k = 0; k < m.n; k++) { /* factors of world, each axis once: no overflow */
    if (axis_dim[k] >= 0)
      out->tiles[axis_dim[k]] *= m.size[k];
    else
      replicas *= m.size[k];
  }
  for (int64_t dv = 0; dv < world; dv++) {
    int64_t coord[HLO_MAX_AXES], rest = dv;
    for (int k = m.n - 1; k >= 0; k--) {
      coord[k] = rest % m.size[k];
      rest /= m.size[k];
    }
    int64_t block = 0, rep = 0;
    for (int i = 0; i < rank; i++) { /* dim i's index: its axes in their order */
      int64_t idx = 0;
      for (int q = 0;; q++) {
        int k = 0;
        while (k < m.n && !(axis_dim[k] == i && axis_pos[k] == q))
          k++;
        if (k == m.n) break;
        idx = idx * m.size[k] + coord[k];
      }
      block = block * out->tiles[i] + idx;
    }
    for (int k = 0; k < m.n; k++)
      if (axis_dim[k] < 0) rep = rep * m.size[k] + coord[k];
    out->dev[block * replicas + rep] = (int)dv;
  }
  out->n_dev = (int)world;
  return true;
}

cf_span cf_hlo_sub_value(hlo_reader *r, cf_span attrs, const char *key) {
  if (!attrs.p) return (cf_span){NULL, 0}; /* no such attribute (no offset on NULL) */
  const char *p = attrs.p, *e = attrs.p + attrs.n;
  size_t kl = strlen(key);
  if (p < e && *p == '{') p++; /* inside the braces */
  while (p < e) {
    if ((size_t)(e - p) > kl && !memcmp(p, key, kl) && p[kl] == '=' &&
        (p == attrs.p || p[-1] == '{' || p[-1] == ',' || is_space(p[-1]))) {
      const char *v = p + kl + 1, *ve = cf_hlo_past(v, e);
      if (v < ve && *v == '"') { /* a quoted string: without its quotes */
        v++;
        if (ve > v && ve[-1] == '"') ve--;
      }
      char *buf = (char *)cf_hlo_str(r, v, (size_t)(ve - v));
      if (!buf) return (cf_span){NULL, 0};
      size_t n = 0;
      for (const char *q = v; q < ve; q++) /* \" -> " and \\ -> \ */
        buf[n++] = *q == '\\' && q + 1 < ve ? *++q : *q;
      buf[n] = 0;
      return (cf_span){buf, n};
    }
    p = *p == '"' || *p == '{' || *p == '[' || *p == '<' ? cf_hlo_past(p, e) : p + 1;
  }
  return (cf_span){NULL, 0};
}

bool cf_hlo_sdy_cuts(hlo_reader *r, const hinstr *in, const int *ranks, int n, hcut *out, char *why,
                     size_t why_len) {
  const hattr *fa = cf_hlo_attr(in, "frontend_attributes");
  cf_span v = fa ? cf_hlo_sub_value(r, fa->val, "xla.sdy.in_shardings") : (cf_span){NULL, 0};
  if (!v.p) return WHY("no xla.sdy.in_shardings");
  if (!r->meshes_loaded) {
    cf_span meshes = cf_hlo_sub_value(r, r->module_attrs, "xla.sdy.meshes");
    if (meshes.p && !load_meshes(r, meshes, why, why_len)) {
      r->mesh_slots_cap = 0; /* every lookup fails alike */
      return false;
    }
  }
  const char *p = v.p, *e = v.p + v.n;
  if (!lit(&p, e, "#sdy.sharding_per_value<") || !lit(&p, e, "["))
    return WHY("xla.sdy.in_shardings: expected #sdy.sharding_per_value<[...]>");
  for (int i = 0; i < n; i++) {
    if (i && !lit(&p, e, ",")) return WHY("xla.sdy.in_shardings: fewer shardings than operands");
    if (!sdy_cut(r, &p, e, ranks[i], &out[i], why, why_len)) return false;
  }
  if (!lit(&p, e, "]")) return WHY("xla.sdy.in_shardings: more shardings than operands");
  return true;
}
