/* timeline.c - what a run's trace says, as `run -v`, `run --json` and
 * `bench fusion` report it: per rank, the compute, the collectives and the
 * exposed communication (the rank thread waiting on a collective, or running
 * one inline, while none of its compute runs) per timed iteration, with the
 * overlap ratio (the share of the collectives' time that compute hid); per
 * plan collective (a bucket or a lone collective), when it started after its
 * last member was produced, how long it ran and how long the rank waited on
 * it. The numbers come from ir/trace.c's cf_trace_summarize over the events.
 */
#include "tools.h"

#include "../executor/plan.h"
#include "../ir/trace.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* cf_trace_summarize's answer, its arrays malloc'd. */
typedef struct summary {
  cf_trace_rank *ranks;
  cf_trace_bucket *buckets;
  int n_ranks, n_colls;
} summary;

/* t over the iterations from first_iter on; false: out of memory. */
static bool summarize(const cf_trace *t, int first_iter, int n_colls, summary *s) {
  s->n_ranks = t->ranks;
  s->n_colls = n_colls;
  s->ranks = calloc((size_t)t->ranks, sizeof *s->ranks);
  s->buckets = calloc((size_t)n_colls + 1, sizeof *s->buckets);
  if (s->ranks && s->buckets && !cf_trace_summarize(t, first_iter, n_colls, s->ranks, s->buckets))
    return true;
  free(s->ranks);
  free(s->buckets);
  return false;
}

static double overlap(const cf_trace_rank *R) {
  return R->comm_us > 0 && R->exposed_us < R->comm_us ? 1 - R->exposed_us / R->comm_us : 0;
}

double cf_tool_exposed_ms(const cf_trace *t, int first_iter, int n_colls) {
  summary s;
  if (!t || !summarize(t, first_iter, n_colls, &s)) return -1;
  double sum = 0;
  int n = 0;
  for (int r = 0; r < s.n_ranks; r++)
    if (s.ranks[r].iters) {
      sum += s.ranks[r].exposed_us / s.ranks[r].iters;
      n++;
    }
  free(s.ranks);
  free(s.buckets);
  return n ? sum / n * 1e-3 : -1;
}

static int members(const cf_trace_bucket *B) {
  cf_strs m = B->node ? cf_node_strs(B->node, CF_A_MEMBERS) : (cf_strs){0};
  return m.n > 0 ? m.n : 1;
}

void cf_tool_timeline_print(FILE *f, const char *who, const cf_trace *t, const cf_plan *p,
                            int first_iter) {
  summary s;
  if (!t || !summarize(t, first_iter, p->n_colls, &s)) return;
  for (int r = 0; r < s.n_ranks; r++) {
    const cf_trace_rank *R = &s.ranks[r];
    if (!R->iters) continue;
    double k = 1e3 * R->iters;
    fprintf(f,
            "%s: rank %d, mean per timed iteration: compute %.3f ms, collectives %.3f ms, exposed "
            "communication %.3f ms (overlap %.0f%%)\n",
            who, r, R->compute_us / k, R->comm_us / k, R->exposed_us / k, 100 * overlap(R));
  }
  for (int c = 0; c < s.n_colls; c++) {
    const cf_trace_bucket *B = &s.buckets[c];
    if (!B->runs) continue;
    char b[32];
    int m = members(B);
    fprintf(f,
            "%s:   '%s' (%d member%s, %s, %s): starts %.3f ms after its last member, runs "
            "%.3f ms, waited on %.3f ms\n",
            who, B->name, m, cf_s(m), cf_bytes_text(B->bytes, b, sizeof b), B->algo ? B->algo : "-",
            B->start_after_us / B->runs * 1e-3, B->duration_us / B->runs * 1e-3,
            B->wait_us / B->runs * 1e-3);
  }
  free(s.ranks);
  free(s.buckets);
}

void cf_tool_timeline_json(void *obj, const cf_trace *t, const cf_plan *p, int first_iter) {
  summary s;
  if (!t || !summarize(t, first_iter, p->n_colls, &s)) return;
  cJSON *o = cJSON_AddObjectToObject(obj, "timeline");
  cJSON *ranks = cJSON_AddArrayToObject(o, "ranks"), *buckets = cJSON_AddArrayToObject(o, "buckets");
  for (int r = 0; r < s.n_ranks; r++) {
    const cf_trace_rank *R = &s.ranks[r];
    if (!R->iters) continue;
    double k = 1e3 * R->iters;
    cJSON *e = cJSON_CreateObject();
    cJSON_AddNumberToObject(e, "rank", r);
    cJSON_AddNumberToObject(e, "iterations", R->iters);
    cJSON_AddNumberToObject(e, "compute_ms", R->compute_us / k);
    cJSON_AddNumberToObject(e, "collectives_ms", R->comm_us / k);
    cJSON_AddNumberToObject(e, "exposed_ms", R->exposed_us / k);
    cJSON_AddNumberToObject(e, "overlap", overlap(R));
    cJSON_AddItemToArray(ranks, e);
  }
  for (int c = 0; c < s.n_colls; c++) {
    const cf_trace_bucket *B = &s.buckets[c];
    if (!B->runs) continue;
    cJSON *e = cJSON_CreateObject(), *m = cJSON_CreateArray();
    cf_strs ms = B->node ? cf_node_strs(B->node, CF_A_MEMBERS) : (cf_strs){0};
    for (int k = 0; k < ms.n; k++) cJSON_AddItemToArray(m, cJSON_CreateString(ms.v[k]));
    if (!ms.n) cJSON_AddItemToArray(m, cJSON_CreateString(B->name));
    cJSON_AddStringToObject(e, "name", B->name);
    cJSON_AddItemToObject(e, "members", m);
    cJSON_AddNumberToObject(e, "bytes", (double)B->bytes);
    cJSON_AddStringToObject(e, "algorithm", B->algo ? B->algo : "");
    cJSON_AddNumberToObject(e, "start_after_ms", B->start_after_us / B->runs * 1e-3);
    cJSON_AddNumberToObject(e, "duration_ms", B->duration_us / B->runs * 1e-3);
    cJSON_AddNumberToObject(e, "wait_ms", B->wait_us / B->runs * 1e-3);
    cJSON_AddItemToArray(buckets, e);
  }
  free(s.ranks);
  free(s.buckets);
}

/* dot --trace: per node of g, the mean milliseconds per rank and iteration the
 * compute lanes of a run's trace waited on it (its WAIT steps, and its runs
 * inline), -1 for nodes the trace never waited on; *out malloc'd. */
cf_status cf_tool_trace_waits(cf_context *ctx, const char *path, const cf_graph *g, double **out) {
  char *text;
  size_t size;
  *out = NULL;
  cf_status st = cf_read_file(ctx, path, "trace", CF_MAX_FILE_BYTES, 0, &text, &size);
  if (st) return st;
  cJSON *t = cJSON_Parse(text);
  free(text);
  cJSON *evs = cJSON_GetObjectItem(t, "traceEvents");
  cJSON *ranks = cJSON_GetObjectItem(cJSON_GetObjectItem(t, "otherData"), "ranks");
  if (!cJSON_IsArray(evs) || !cJSON_IsNumber(ranks)) {
    cJSON_Delete(t);
    return cf_error(ctx, CF_ERR_INVALID, path, 0,
                    "not a trace of collfuse run --trace (no traceEvents and otherData.ranks)");
  }
  double *w = malloc(sizeof *w * ((size_t)g->n_nodes + 1));
  if (!w) {
    cJSON_Delete(t);
    return cf_error(ctx, CF_ERR_NO_MEMORY, NULL, 0, "out of memory");
  }
  for (int i = 0; i < g->n_nodes; i++) w[i] = -1;
  int iterations = 0, matched = 0;
  for (cJSON *e = evs->child; e; e = e->next) {
    const char *ph = cJSON_GetStringValue(cJSON_GetObjectItem(e, "ph"));
    const char *cat = cJSON_GetStringValue(cJSON_GetObjectItem(e, "cat"));
    const char *name = cJSON_GetStringValue(cJSON_GetObjectItem(e, "name"));
    cJSON *pid = cJSON_GetObjectItem(e, "pid"), *tid = cJSON_GetObjectItem(e, "tid");
    cJSON *dur = cJSON_GetObjectItem(e, "dur");
    if (!ph || strcmp(ph, "X") || !cat || !name || !cJSON_IsNumber(pid) || !cJSON_IsNumber(dur) ||
        pid->valuedouble >= ranks->valuedouble || !cJSON_IsNumber(tid) || tid->valuedouble != 0)
      continue;
    iterations += strcmp(cat, "iteration") == 0;
    if (strcmp(cat, "wait") && strcmp(cat, "collective")) continue;
    int i = cf_graph_find(g, name);
    if (i < 0 || !cf_op_is_collective(g->nodes[i].op)) continue;
    matched += w[i] < 0;
    w[i] = (w[i] < 0 ? 0 : w[i]) + dur->valuedouble * 1e-3;
  }
  cJSON_Delete(t);
  for (int i = 0; i < g->n_nodes && iterations; i++)
    if (w[i] > 0) w[i] /= iterations; /* iteration events: one per rank and iteration */
  if (!matched)
    fprintf(stderr,
            "collfuse dot: warning: %s waited on none of the graph's collectives by name (a run "
            "of the same graph with the same passes names them alike)\n",
            path);
  *out = w;
  return CF_OK;
}
