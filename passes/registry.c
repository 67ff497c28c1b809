/* registry.c - the ordered table of passes, the named pipelines and the pass
 * runner (with per-pass timing and, outside Release builds, a full verify
 * after every pass so a pass that breaks the graph is caught where it did).
 */
#include "passes.h"

#include <stdio.h>
#include <string.h>

const cf_pass *const cf_pass_registry[] = {
    &cf_pass_verify,
    &cf_pass_infer,
    &cf_pass_dce,
    &cf_pass_fuse_allreduce,
    &cf_pass_fuse_allgather,
    &cf_pass_fuse_reducescatter,
    &cf_pass_fuse_alltoall,
    &cf_pass_fuse_matmul_collective,
    NULL,
};

/* -O0 never has the fusion passes. fuse-matmul-collective runs after the
 * bucketing passes (docs/fusion.md): a collective in a bucket stays there.
 * It runs after the bucketing passes, so it only takes collectives that are still plain. */
const char cf_pipeline_default[] =
    "verify,infer,dce,fuse-allreduce,fuse-allgather,fuse-reducescatter,fuse-alltoall,"
    "fuse-matmul-collective";
const char cf_pipeline_O0[] = "verify,infer";

const char *cf_pipeline_list(const char *name) {
  if (!name || strcmp(name, "default") == 0) return cf_pipeline_default;
  if (!*name || strcmp(name, "O0") == 0 || strcmp(name, "-O0") == 0) return cf_pipeline_O0;
  return name;
}

const cf_pass *cf_pass_find(const char *name) {
  for (int i = 0; cf_pass_registry[i]; i++)
    if (strcmp(cf_pass_registry[i]->name, name) == 0) return cf_pass_registry[i];
  return NULL;
}

const char *cf_pass_unknown(const char *name, char *buf, size_t len) {
  cf_suggest s;
  cf_suggest_init(&s, name);
  for (int i = 0; cf_pass_registry[i]; i++)
    cf_suggest_add(&s, cf_pass_registry[i]->name);
  size_t o = (size_t)snprintf(buf, len, "unknown pass '%s'", name);
  if (s.best) {
    if (o < len) snprintf(buf + o, len - o, "; did you mean '%s'?", s.best);
    return buf;
  }
  for (int i = 0; cf_pass_registry[i] && o < len; i++)
    o += (size_t)snprintf(buf + o, len - o, i ? ", %s" : " (known: %s", cf_pass_registry[i]->name);
  if (o < len) snprintf(buf + o, len - o, ")");
  return buf;
}

bool cf_pass_list_check(const char *list, char *why, size_t len, bool *unknown) {
  char name[64];
  if (unknown) *unknown = false;
  for (const char *p = list; *p;) {
    size_t n = strcspn(p, ",");
    if (n == 0 || n >= sizeof name) {
      snprintf(why, len, "bad pass list '%s'", list);
      return false;
    }
    memcpy(name, p, n);
    name[n] = 0;
    p += n + (p[n] == ',');
    if (!cf_pass_find(name)) {
      cf_pass_unknown(name, why, len);
      if (unknown) *unknown = true;
      return false;
    }
  }
  return true;
}

cf_status cf_passes_run(cf_graph *g, const char *list, const cf_pass_options *opt,
                        cf_pass_timing *timing, int *n_timing) {
  static const cf_pass_options none = {0};
  char name[64];
  if (n_timing) *n_timing = 0;
  if (!opt) opt = &none;
  if (!list) list = cf_pipeline_default;
  const char *p = list;
  while (*p) {
    size_t len = strcspn(p, ",");
    if (len == 0 || len >= sizeof name) {
      if (len == 0 && p[0] == ',') {
        p++;
        continue;
      }
      return cf_error(g->ctx, CF_ERR_USAGE, NULL, 0, "bad pass list '%s'", list);
    }
    memcpy(name, p, len);
    name[len] = 0;
    p += len + (p[len] == ',');
    const cf_pass *pass = cf_pass_find(name);
    if (!pass) {
      char why[640];
      return cf_error(g->ctx, CF_ERR_USAGE, NULL, 0, "%s", cf_pass_unknown(name, why, sizeof why));
    }
    double t0 = 1e3 * cf_now();
    cf_status st = pass->run(g, opt);
    if (st) return st;
#ifdef CF_VERIFY_EACH_PASS
    if ((st = cf_verify_structure(g)) || (st = cf_infer(g))) {
      char msg[1024];
      snprintf(msg, sizeof msg, "%s", cf_errmsg(g->ctx));
      return cf_error(g->ctx, st, NULL, 0, "pass '%s' left an invalid graph: %s", pass->name, msg);
    }
#endif
    if (timing && n_timing && *n_timing < CF_MAX_PIPELINE) {
      timing[*n_timing].name = pass->name;
      timing[*n_timing].ms = 1e3 * cf_now() - t0;
      (*n_timing)++;
    }
  }
  return CF_OK;
}
