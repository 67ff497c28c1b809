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

#include <cjson/cJSON.h>
#include <stdlib.h>

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
