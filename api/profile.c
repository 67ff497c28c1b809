/* profile.c - a measured profile: which AllReduce algorithm won at which
 * size, and the alpha/beta of the transport, per transport and rank count
 * (docs/executor.md, "Profiles", gives the format).
 *
 * `collfuse bench allreduce --save-profile` measures and writes it; run,
 * the C API and --split auto read it. The algorithm rules become a
 * request's measured rules (tried before the built-in policy's), alpha and
 * beta the cost model's defaults. A missing profile at the default path
 * means the built-in rules; a profile that is there but malformed is an
 * error naming its file and line, never silently ignored.
 */
#include "api.h"

#include "../executor/algo.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define PROFILE_MAGIC "collfuse-profile 1"
/* A profile is a few hundred bytes (CF_PROFILE_MAX_ENTRIES entries of
 * CF_PROFILE_MAX_RULES lines); this leaves room for any comments. */
#define PROFILE_MAX_BYTES ((size_t)1 << 20)

/* One transport and rank count: its link and its rules. */
typedef struct prof_entry {
  char transport[16];
  int ranks;
  double alpha_us, beta_gbps; /* 0: no link line */
  cf_algo_rule rules[CF_PROFILE_MAX_RULES];
  int n_rules;
} prof_entry;

struct cf_profile {
  prof_entry e[CF_PROFILE_MAX_ENTRIES];
  int n;
  cf_algo_rule flat[CF_PROFILE_MAX_ENTRIES * CF_PROFILE_MAX_RULES]; /* cf_profile_rules' */
};

static bool known_transport(const char *t) {
  return strcmp(t, "threads") == 0 || strcmp(t, "mpi") == 0 || strcmp(t, "shm") == 0;
}

const char *cf_profile_path(const char *given, char *buf, size_t len, bool *explicit_path) {
  const char *env = cf_env(CF_ENV_PROFILE);
  *explicit_path = true;
  if (given) return given;
  if (env && *env) return env;
  *explicit_path = false;
  const char *xdg = cf_env(CF_ENV_XDG_CONFIG), *home = cf_env(CF_ENV_HOME);
  if (xdg && xdg[0] == '/')
    snprintf(buf, len, "%s/collfuse/profile", xdg);
  else if (home && *home)
    snprintf(buf, len, "%s/.config/collfuse/profile", home);
  else
    return NULL;
  return buf;
}

static prof_entry *entry(cf_profile *p, const char *transport, int ranks, bool make) {
  for (int i = 0; i < p->n; i++)
    if (p->e[i].ranks == ranks && strcmp(p->e[i].transport, transport) == 0) return &p->e[i];
  if (!make || p->n == CF_PROFILE_MAX_ENTRIES) return NULL;
  prof_entry *e = &p->e[p->n++];
  *e = (prof_entry){.ranks = ranks};
  snprintf(e->transport, sizeof e->transport, "%s", transport);
  return e;
}

/* ---------------- reading ---------------- */

#define BAD(...) (st = cf_error(ctx, CF_ERR_INVALID, path, line, __VA_ARGS__), false)

/* "TRANSPORT RANKS" at the start of w[]; false with the error set. */
static bool key(cf_context *ctx, const char *path, int line, char **w, int *ranks, cf_status *out) {
  cf_status st = CF_OK;
  int64_t r;
  bool ok = !known_transport(w[1]) ? BAD("profile: unknown transport '%s' (threads, mpi or shm)", w[1])
            : !cf_parse_int(w[2], 2, CF_MAX_WORLD, &r)
                ? BAD("profile: ranks wants 2..%d, got '%s'", CF_MAX_WORLD, w[2])
                : true;
  *ranks = (int)r;
  *out = st;
  return ok;
}

static bool number(const char *s, double *out) {
  char *e;
  errno = 0;
  *out = strtod(s, &e);
  return e != s && !*e && !errno && isfinite(*out);
}

/* One line (comments stripped); false with the error set. */
static bool parse_line(cf_context *ctx, cf_profile *p, const char *path, int line, char *text,
                       bool *seen_magic, cf_status *out) {
  cf_status st = CF_OK;
  char *w[8], *save = NULL;
  int n = 0;
  for (char *t = strtok_r(text, " \t\r", &save); t; t = strtok_r(NULL, " \t\r", &save))
    if (n < 8)
      w[n++] = t;
    else
      n = 9;
  bool ok = true;
  int ranks = 0;
  if (n == 0) return true;
  if (!*seen_magic) {
    ok = n == 2 && strcmp(w[0], "collfuse-profile") == 0 && strcmp(w[1], "1") == 0
             ? true
             : BAD("profile: expected '%s' as the first line", PROFILE_MAGIC);
    *seen_magic = ok;
  } else if (strcmp(w[0], "link") == 0) {
    double a, b;
    if (n != 5)
      ok = BAD("profile: 'link' wants TRANSPORT RANKS ALPHA_US BETA_GBPS");
    else if (!key(ctx, path, line, w, &ranks, &st))
      ok = false;
    else if (!number(w[3], &a) || a < 0)
      ok = BAD("profile: alpha_us wants a number >= 0, got '%s'", w[3]);
    else if (!number(w[4], &b) || !(b > 0))
      ok = BAD("profile: beta_gbps wants a number > 0, got '%s'", w[4]);
    else {
      prof_entry *e = entry(p, w[1], ranks, true);
      if (!e)
        ok = BAD("profile: more than %d transport and rank entries", CF_PROFILE_MAX_ENTRIES);
      else
        e->alpha_us = a, e->beta_gbps = b;
    }
  } else if (strcmp(w[0], "algo") == 0) {
    int64_t lo, hi;
    cf_algo_req r;
    if (n != 6)
      ok = BAD("profile: 'algo' wants TRANSPORT RANKS MIN_BYTES MAX_BYTES ALGORITHM");
    else if (!key(ctx, path, line, w, &ranks, &st))
      ok = false;
    else if (!cf_parse_int(w[3], 0, INT64_MAX, &lo) || !cf_parse_int(w[4], 0, INT64_MAX, &hi) ||
             (hi && hi < lo))
      ok = BAD("profile: byte range '%s %s' wants 0 <= MIN <= MAX (MAX 0: no bound)", w[3], w[4]);
    else if (!cf_algo_parse(w[5], true, &r) || r.policy != CF_POLICY_FORCED)
      ok = BAD("profile: unknown algorithm '%s'", w[5]);
    else {
      prof_entry *e = entry(p, w[1], ranks, true);
      if (!e)
        ok = BAD("profile: more than %d transport and rank entries", CF_PROFILE_MAX_ENTRIES);
      else if (e->n_rules == CF_PROFILE_MAX_RULES)
        ok = BAD("profile: more than %d rules for %s on %d ranks", CF_PROFILE_MAX_RULES, w[1],
                 ranks);
      else
        e->rules[e->n_rules++] = (cf_algo_rule){.min_ranks = ranks,
                                                .max_ranks = ranks,
                                                .min_bytes = lo,
                                                .max_bytes = hi,
                                                .algo = r.algo,
                                                .in_place = -1};
    }
  } else {
    ok = BAD("profile: unknown line '%s' (link or algo)", w[0]);
  }
  *out = st;
  return ok;
}

cf_status cf_profile_load(cf_context *ctx, const char *path, bool must_exist, cf_profile **out) {
  *out = NULL;
  cf_profile *p = calloc(1, sizeof *p);
  if (!p) return cf_error(ctx, CF_ERR_NO_MEMORY, NULL, 0, "out of memory");
  /* the whole file, so a line of any length is one line */
  char *text;
  size_t size;
  cf_status st = cf_read_file(ctx, path, "profile", PROFILE_MAX_BYTES,
                              must_exist ? 0 : CF_IN_OPTIONAL, &text, &size);
  if (st || !text) {
    if (st) free(p);
    else *out = p; /* missing at the default path: the built-in rules */
    return st;
  }
  int line = 0;
  bool magic = false;
  for (char *at = text; !st && at < text + size; line++) {
    char *end = memchr(at, '\n', (size_t)(text + size - at));
    if (!end) end = text + size;
    *end = '\0';
    at[strcspn(at, "#")] = '\0'; /* a comment ends where the line does */
    parse_line(ctx, p, path, line + 1, at, &magic, &st);
    at = end + 1;
  }
  if (!st && !magic)
    st = cf_error(ctx, CF_ERR_INVALID, path, line ? line : 1,
                  "profile: expected '%s' as the first line", PROFILE_MAGIC);
  free(text);
  if (st) {
    free(p);
    return st;
  }
  *out = p;
  return CF_OK;
}

cf_status cf_profile_find(cf_context *ctx, const char *given, cf_profile **out, char *path,
                          size_t len) {
  bool explicit_path;
  char buf[4096];
  path[0] = '\0';
  *out = NULL;
  const char *at = given && strcmp(given, "none") == 0
                       ? NULL
                       : cf_profile_path(given, buf, sizeof buf, &explicit_path);
  if (!at) {
    *out = calloc(1, sizeof **out);
    return *out ? CF_OK : cf_error(ctx, CF_ERR_NO_MEMORY, NULL, 0, "out of memory");
  }
  snprintf(path, len, "%s", at);
  return cf_profile_load(ctx, at, explicit_path, out);
}

void cf_profile_destroy(cf_profile *p) { free(p); }

cf_status cf_profile_compile_cost(cf_context *ctx, const char *given, const cf_graph *g,
                                  cf_cost *cost, const cf_cost **measured) {
  cf_profile *prof = NULL;
  char path[4096];
  *measured = NULL;
  cf_status st = cf_profile_find(ctx, given, &prof, path, sizeof path);
  if (!st && cf_profile_cost(prof, "threads", g->world_size > 0 ? (int)g->world_size : 1, cost))
    *measured = cost;
  cf_profile_destroy(prof);
  return st;
}

uint32_t cf_profile_hash(const cf_profile *p, const char *transport) {
  uint32_t h = 2166136261u;
  bool any = false;
  for (int i = 0; p && i < p->n; i++) {
    const prof_entry *e = &p->e[i];
    if (strcmp(e->transport, transport) != 0) continue;
    any = true;
    int64_t v[3 + 3 * CF_PROFILE_MAX_RULES] = {e->ranks, llround(e->alpha_us * 1000),
                                               llround(e->beta_gbps * 1000)};
    int n = 3;
    for (int k = 0; k < e->n_rules; k++) {
      v[n++] = e->rules[k].min_bytes;
      v[n++] = e->rules[k].max_bytes;
      v[n++] = e->rules[k].algo;
    }
    for (int k = 0; k < n; k++)
      for (int b = 0; b < 64; b += 8)
        h = (h ^ (uint32_t)((uint64_t)v[k] >> b & 0xff)) * 16777619u;
  }
  return any ? (h ? h : 1) : 0;
}


int cf_profile_rules(cf_profile *p, const char *transport, const cf_algo_rule **rules) {
  int n = 0;
  for (int i = 0; p && i < p->n; i++)
    if (strcmp(p->e[i].transport, transport) == 0)
      for (int k = 0; k < p->e[i].n_rules; k++)
        p->flat[n++] = p->e[i].rules[k];
  *rules = n ? p->flat : NULL;
  return n;
}

bool cf_profile_cost(const cf_profile *p, const char *transport, int ranks, cf_cost *out) {
  for (int i = 0; p && i < p->n; i++) {
    const prof_entry *e = &p->e[i];
    if (e->ranks == ranks && e->beta_gbps > 0 && strcmp(e->transport, transport) == 0) {
      *out = (cf_cost){
          .alpha_us = e->alpha_us, .beta_gbps = e->beta_gbps, .gamma_gbps = e->beta_gbps / 2};
      return true;
    }
  }
  return false;
}

/* ---------------- measuring and writing ---------------- */

cf_status cf_profile_set(cf_context *ctx, cf_profile *p, const char *transport, int ranks,
                         const int64_t *bytes, const int *best, int n, double alpha_us,
                         double beta_gbps) {
  prof_entry *e = entry(p, transport, ranks, true);
  if (!e)
    return cf_error(ctx, CF_ERR_INVALID, NULL, 0,
                    "profile: more than %d transport and rank entries", CF_PROFILE_MAX_ENTRIES);
  e->alpha_us = alpha_us;
  e->beta_gbps = beta_gbps;
  e->n_rules = 0;
  /* size i's winner holds from the geometric middle after size i-1 to the
   * one before size i+1; neighbours with the same winner merge */
  for (int i = 0; i < n; i++) {
    int64_t hi = i + 1 < n ? (int64_t)sqrt((double)bytes[i] * (double)bytes[i + 1]) : 0;
    if (e->n_rules && e->rules[e->n_rules - 1].algo == best[i]) {
      e->rules[e->n_rules - 1].max_bytes = hi;
      continue;
    }
    if (e->n_rules == CF_PROFILE_MAX_RULES) break;
    int64_t lo = e->n_rules ? e->rules[e->n_rules - 1].max_bytes + 1 : 0;
    e->rules[e->n_rules++] = (cf_algo_rule){.min_ranks = ranks,
                                            .max_ranks = ranks,
                                            .min_bytes = lo,
                                            .max_bytes = hi,
                                            .algo = best[i],
                                            .in_place = -1};
  }
  return CF_OK;
}

static int by_key(const void *a, const void *b) {
  const prof_entry *x = a, *y = b;
  int c = strcmp(x->transport, y->transport);
  return c ? c : x->ranks - y->ranks;
}

/* mkdir -p of path's directory. */
static cf_status make_parent(cf_context *ctx, const char *path) {
  char dir[4096];
  if (snprintf(dir, sizeof dir, "%s", path) >= (int)sizeof dir)
    return cf_error(ctx, CF_ERR_IO, path, 0, "profile: path too long");
  char *slash = strrchr(dir, '/');
  if (!slash || slash == dir) return CF_OK;
  *slash = '\0';
  for (char *s = dir + 1;; s++) {
    bool end = *s == '\0';
    if (*s == '/' || end) {
      *s = '\0';
      if (mkdir(dir, 0755) != 0 && errno != EEXIST)
        return cf_error(ctx, CF_ERR_IO, path, 0, "profile: cannot create directory %s: %s", dir,
                        strerror(errno));
      if (end) break;
      *s = '/';
    }
  }
  return CF_OK;
}

cf_status cf_profile_save(cf_context *ctx, cf_profile *p, const char *path) {
  qsort(p->e, (size_t)p->n, sizeof p->e[0], by_key);
  size_t cap = 512 + (size_t)p->n * (128 + CF_PROFILE_MAX_RULES * 96), used = 0;
  char *text = malloc(cap);
  if (!text) return cf_error(ctx, CF_ERR_NO_MEMORY, NULL, 0, "out of memory");
  used +=
      (size_t)snprintf(text + used, cap - used,
                       "%s\n"
                       "# written by collfuse bench allreduce --save-profile (docs/executor.md)\n"
                       "# link TRANSPORT RANKS ALPHA_US BETA_GBPS\n"
                       "# algo TRANSPORT RANKS MIN_BYTES MAX_BYTES ALGORITHM (MAX 0: no bound)\n",
                       PROFILE_MAGIC);
  for (int i = 0; i < p->n; i++) {
    const prof_entry *e = &p->e[i];
    if (e->beta_gbps > 0)
      used += (size_t)snprintf(text + used, cap - used, "link %s %d %.6g %.6g\n", e->transport,
                               e->ranks, e->alpha_us, e->beta_gbps);
    for (int k = 0; k < e->n_rules; k++)
      used += (size_t)snprintf(text + used, cap - used, "algo %s %d %lld %lld %s\n", e->transport,
                               e->ranks, (long long)e->rules[k].min_bytes,
                               (long long)e->rules[k].max_bytes, cf_algo_name(e->rules[k].algo));
  }
  cf_status st = make_parent(ctx, path);
  if (!st) st = cf_write_file(ctx, path, text, used);
  free(text);
  return st;
}
