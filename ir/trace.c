/* trace.c - a run's timeline: events on lanes of ring buffers, written as a
 * Chrome trace (the `traceEvents` JSON that Perfetto and chrome://tracing
 * draw).
 *
 * Each rank has two lanes, its rank thread's (compute, copies, the waits on
 * collectives, collectives run inline) and its communication thread's (the
 * collectives it runs, their algorithm phases, the transport's waits); the
 * driver has one (phases, plan building, kernels). A lane is written by its
 * one thread only, so recording takes no lock: an event goes into the
 * lane's ring buffer (allocated on its first event), overwriting the oldest
 * when the buffer is full, and the count of events lost so is written with
 * the trace. Every event is complete (begin and end, Chrome's "X"), so a
 * trace cut short by a failed run still pairs every begin with its end.
 *
 * Code that knows its lane records on it; code deep in a call (a transport
 * waiting, an algorithm's phases, the JIT) records on cf_trace_here, the
 * calling thread's lane, which the thread sets when it starts (NULL: not
 * tracing, and the record is one test of a thread-local pointer). The clock
 * is CLOCK_MONOTONIC in nanoseconds (cf_now's), for every lane and rank.
 */
#include "trace.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

_Thread_local cf_trace_lane *cf_trace_here;

int64_t cf_trace_clock(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

int64_t cf_trace_ns(const cf_trace *t, double secs) {
  (void)t;
  return (int64_t)(secs * 1e9);
}

cf_status cf_trace_create(int ranks, int64_t events_per_lane, cf_trace **out) {
  cf_trace *t = calloc(1, sizeof *t);
  int n = 2 * ranks + 1; /* the driver's, then two per rank */
  if (t) t->lanes = calloc((size_t)n, sizeof *t->lanes);
  if (!t || !t->lanes || ranks < 1 || events_per_lane < 1) {
    if (t) free(t->lanes);
    free(t);
    return *out = NULL, ranks < 1 || events_per_lane < 1 ? CF_ERR_USAGE : CF_ERR_NO_MEMORY;
  }
  t->ranks = ranks;
  t->n_lanes = n;
  t->t0 = cf_trace_clock();
  for (int k = 0; k < n; k++)
    t->lanes[k] = (cf_trace_lane){.cap = events_per_lane, .pid = k ? (k - 1) / 2 : -1, .tid = k ? (k - 1) % 2 : 0};
  *out = t;
  return CF_OK;
}

void cf_trace_destroy(cf_trace *t) {
  if (!t) return;
  for (int k = 0; k < t->n_lanes; k++)
    free(t->lanes[k].v);
  free(t->lanes);
  free(t->failed);
  free(t);
}

cf_trace_lane *cf_trace_lane_of(cf_trace *t, int rank, int thread) {
  if (!t || rank < 0 || rank >= t->ranks) return NULL;
  return &t->lanes[1 + 2 * rank + (thread ? 1 : 0)];
}

cf_trace_lane *cf_trace_driver(cf_trace *t) { return t ? &t->lanes[0] : NULL; }

void cf_trace_set_ranks(cf_trace *t, int ranks) {
  if (t && ranks >= 1 && 2 * ranks + 1 <= t->n_lanes) t->ranks = ranks;
}

void cf_trace_put(cf_trace_lane *l, const cf_trace_ev *e) {
  if (!l->v && !l->failed_alloc) {
    l->v = malloc((size_t)l->cap * sizeof *l->v);
    l->failed_alloc = !l->v;
  }
  if (l->v) l->v[l->n % l->cap] = *e;
  l->n++;
}

int64_t cf_trace_dropped(const cf_trace *t) {
  int64_t d = 0;
  for (int k = 0; t && k < 2 * t->ranks + 1; k++) {
    const cf_trace_lane *l = &t->lanes[k];
    d += !l->v ? l->n : l->n > l->cap ? l->n - l->cap : 0;
  }
  return d;
}

int64_t cf_trace_events(const cf_trace_lane *l, const cf_trace_ev **first, int64_t *start) {
  int64_t kept = !l->v ? 0 : l->n < l->cap ? l->n : l->cap;
  *first = l->v;
  *start = l->n - kept; /* the oldest kept is event start, at v[start % cap] */
  return kept;
}

void cf_trace_fail(cf_trace *t, const char *why) {
  if (!t || t->failed) return;
  t->failed = strdup(why && *why ? why : "the run failed");
}

/* ---------------- writing ---------------- */

/* s as a JSON string's contents (quotes, backslashes and control bytes escaped). */
static void put_str(FILE *f, const char *s) {
  fputc('"', f);
  for (const unsigned char *p = (const unsigned char *)(s ? s : ""); *p; p++) {
    if (*p == '"' || *p == '\\')
      fprintf(f, "\\%c", *p);
    else if (*p < 0x20)
      fprintf(f, "\\u%04x", *p);
    else
      fputc(*p, f);
  }
  fputc('"', f);
}

static void put_meta(FILE *f, bool *first, const char *what, int pid, int tid, const char *name) {
  fprintf(f, "%s\n{\"name\":\"%s\",\"ph\":\"M\",\"pid\":%d", *first ? "" : ",", what, pid);
  if (tid >= 0) fprintf(f, ",\"tid\":%d", tid);
  fprintf(f, ",\"args\":{\"name\":");
  put_str(f, name);
  fprintf(f, "}}");
  *first = false;
}

static void put_event(FILE *f, const cf_trace *t, const cf_trace_lane *l, const cf_trace_ev *e) {
  fprintf(f, ",\n{\"name\":");
  put_str(f, e->name);
  fprintf(f, ",\"cat\":\"%s\",\"ph\":\"X\",\"pid\":%d,\"tid\":%d,\"ts\":%.3f,\"dur\":%.3f",
          e->cat ? e->cat : "other", l->pid < 0 ? t->ranks : l->pid, l->tid, (double)(e->t0 - t->t0) * 1e-3,
          (double)(e->t1 > e->t0 ? e->t1 - e->t0 : 0) * 1e-3);
  const cf_node *n = e->node;
  if (!n && !e->algo && !e->bytes && !e->arg_name) {
    fputc('}', f);
    return;
  }
  const char *sep = "";
  fprintf(f, ",\"args\":{");
  if (n) {
    fprintf(f, "\"op\":\"%s\"", cf_op_table[n->op].name);
    sep = ",";
    const char *group = cf_node_str(n, CF_A_GROUP, NULL);
    if (group && cf_op_is_collective(n->op)) {
      fprintf(f, ",\"group\":");
      put_str(f, group);
    }
    cf_strs m = cf_node_strs(n, CF_A_MEMBERS);
    if (m.n > 0) {
      fprintf(f, ",\"members\":[");
      for (int k = 0; k < m.n; k++) {
        if (k) fputc(',', f);
        put_str(f, m.v[k]);
      }
      fprintf(f, "]");
    }
  }
  if (e->algo) {
    fprintf(f, "%s\"algorithm\":", sep);
    put_str(f, e->algo);
    sep = ",";
  }
  if (e->bytes) {
    fprintf(f, "%s\"bytes\":%lld", sep, (long long)e->bytes);
    sep = ",";
  }
  if (e->arg_name) fprintf(f, "%s\"%s\":%lld", sep, e->arg_name, (long long)e->arg);
  fprintf(f, "}}");
}

cf_status cf_trace_write(cf_context *ctx, const cf_trace *t, const char *path) {
  char *text = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&text, &len);
  if (!f) return cf_error(ctx, CF_ERR_NO_MEMORY, path, 0, "cannot write the trace: out of memory");
  bool first = true;
  fprintf(f, "{\"traceEvents\":[");
  for (int r = 0; r < t->ranks; r++) {
    char name[32];
    snprintf(name, sizeof name, "rank %d", r);
    put_meta(f, &first, "process_name", r, -1, name);
    put_meta(f, &first, "thread_name", r, 0, "compute");
    put_meta(f, &first, "thread_name", r, 1, "collectives");
  }
  put_meta(f, &first, "process_name", t->ranks, -1, "driver");
  put_meta(f, &first, "thread_name", t->ranks, 0, "driver");
  for (int k = 0; k < 2 * t->ranks + 1; k++) {
    const cf_trace_lane *l = &t->lanes[k];
    const cf_trace_ev *v;
    int64_t start, kept = cf_trace_events(l, &v, &start);
    for (int64_t i = 0; i < kept; i++)
      put_event(f, t, l, &v[(start + i) % l->cap]);
  }
  fprintf(f, "\n],\"displayTimeUnit\":\"ms\",\"otherData\":{\"ranks\":%d,\"dropped_events\":%lld,"
             "\"events_per_lane\":%lld,\"clock\":\"CLOCK_MONOTONIC\",\"start_us\":%.3f",
          t->ranks, (long long)cf_trace_dropped(t), (long long)t->lanes[0].cap, (double)t->t0 / 1e3);
  if (t->failed) {
    fprintf(f, ",\"failed\":");
    put_str(f, t->failed);
  }
  fprintf(f, "}}\n");
  bool bad = ferror(f) != 0;
  fclose(f);
  cf_status st = bad || !text ? cf_error(ctx, CF_ERR_NO_MEMORY, path, 0,
                                         "cannot write the trace: out of memory")
                              : cf_write_file(ctx, path, text, len);
  free(text);
  return st;
}

/* ---------------- what the events say ---------------- */

/* The timed iterations of one rank: [lo[k], hi[k]) on its compute lane. */
typedef struct windows {
  int64_t *lo, *hi;
  int n;
} windows;

static bool inside(const windows *w, const cf_trace_ev *e) {
  int a = 0, b = w->n; /* the last window that begins at or before e */
  while (b - a > 1) {
    int m = (a + b) / 2;
    if (w->lo[m] <= e->t0) a = m;
    else b = m;
  }
  return w->n > 0 && w->lo[a] <= e->t0 && e->t1 <= w->hi[a];
}

static int coll_of(const cf_trace_ev *e, int n_colls) {
  bool has = e->arg_name && strcmp(e->arg_name, "coll") == 0;
  return has && e->arg >= 0 && e->arg < n_colls ? (int)e->arg : -1;
}

cf_status cf_trace_summarize(const cf_trace *t, int first_iter, int n_colls, cf_trace_rank *ranks,
                             cf_trace_bucket *buckets) {
  memset(ranks, 0, sizeof *ranks * (size_t)t->ranks);
  memset(buckets, 0, sizeof *buckets * (size_t)n_colls);
  /* per collective, the ends of its START steps not yet matched to a run on
   * the communication thread (the k-th START goes with the k-th run) */
  int64_t **starts = calloc((size_t)n_colls + 1, sizeof *starts);
  int *n_start = calloc((size_t)n_colls + 1, sizeof *n_start), *used = calloc((size_t)n_colls + 1, sizeof *used);
  int64_t cap = 0;
  for (int k = 0; k < t->n_lanes; k++) cap = t->lanes[k].n > cap ? t->lanes[k].n : cap;
  windows w = {calloc((size_t)cap + 1, sizeof *w.lo), calloc((size_t)cap + 1, sizeof *w.hi), 0};
  cf_status st = starts && n_start && used && w.lo && w.hi ? CF_OK : CF_ERR_NO_MEMORY;
  for (int c = 0; c < n_colls && !st; c++)
    if (!(starts[c] = malloc(sizeof **starts * (size_t)(cap + 1)))) st = CF_ERR_NO_MEMORY;
  for (int r = 0; r < t->ranks && !st; r++) {
    cf_trace_rank *R = &ranks[r];
    const cf_trace_lane *lane[2] = {&t->lanes[1 + 2 * r], &t->lanes[2 + 2 * r]};
    const cf_trace_ev *v;
    int64_t s0, kept = cf_trace_events(lane[0], &v, &s0);
    w.n = 0;
    for (int64_t i = 0; i < kept; i++) { /* iteration events end in order */
      const cf_trace_ev *e = &v[(s0 + i) % lane[0]->cap];
      if (strcmp(e->cat, "iteration") != 0 || e->arg < first_iter) continue;
      w.lo[w.n] = e->t0;
      w.hi[w.n++] = e->t1;
      R->iters++;
      R->iter_us += (double)(e->t1 - e->t0) * 1e-3;
    }
    memset(n_start, 0, sizeof *n_start * (size_t)n_colls);
    memset(used, 0, sizeof *used * (size_t)n_colls);
    for (int l = 0; l < 2; l++) {
      kept = cf_trace_events(lane[l], &v, &s0);
      for (int64_t i = 0; i < kept; i++) {
        const cf_trace_ev *e = &v[(s0 + i) % lane[l]->cap];
        if (!inside(&w, e)) continue;
        double us = (double)(e->t1 - e->t0) * 1e-3;
        int c = coll_of(e, n_colls);
        cf_trace_bucket *B = c >= 0 ? &buckets[c] : NULL;
        if (!strcmp(e->cat, "collective")) {
          R->comm_us += us;
          if (l == 0) R->exposed_us += us; /* run inline: the rank does nothing else */
          if (B) {
            B->name = e->name;
            B->node = e->node;
            B->bytes = e->bytes;
            B->algo = e->algo;
            B->runs++;
            B->duration_us += us;
            if (l == 0) B->wait_us += us;
            if (l == 1 && used[c] < n_start[c])
              B->start_after_us += (double)(e->t0 - starts[c][used[c]++]) * 1e-3;
          }
        } else if (!strcmp(e->cat, "wait")) {
          R->exposed_us += us;
          if (B) B->wait_us += us;
        } else if (!strcmp(e->cat, "start")) {
          if (B) starts[c][n_start[c]++] = e->t1;
        } else if (!strcmp(e->cat, "compute") || !strcmp(e->cat, "copy") ||
                   !strcmp(e->cat, "fused")) {
          R->compute_us += us;
        }
      }
    }
  }
  for (int c = 0; starts && c < n_colls; c++) free(starts[c]);
  free(starts);
  free(n_start);
  free(used);
  free(w.lo);
  free(w.hi);
  return st;
}
