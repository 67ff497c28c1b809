/* bench_fusion_api.c - `collfuse bench fusion FILE --api`: a data-parallel
 * step through the embedding C API, with the caller's separate gradient
 * buffers against gradients that are views into the buckets (PyTorch DDP's
 * gradient_as_bucket_view).
 *
 * Both sides are executables of the same fused graph (default pipeline),
 * run as a framework runs them: one cf_executable_run per step, timed by the
 * caller around the whole call, so the memcpys of separate buffers into the
 * buckets and of the averages out of them count, as do the page faults of
 * the arena's bucket blocks they touch. The two alternate step by step so
 * a change in the machine's load hits both alike; medians are reported,
 * with the copies each step made (cf_executable_last_copies).
 */
#include "tools.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

typedef struct side {
  const char *name;
  cf_executable *e;
  void **in, **out; /* [r * n + k]: what each step passes */
  void **owned;     /* separate buffers this side allocated */
  size_t n_owned;
  double *ms, *cpu_ms; /* every timed step: wall, and the process's CPU (every thread) */
  size_t copies, copy_bytes;
} side;

/* Small floats for float32 gradients; zeros for other dtypes. */
static void fill(void *p, size_t bytes, const char *dtype, int r) {
  if (strcmp(dtype, "float32") != 0) {
    memset(p, 0, bytes);
    return;
  }
  float *f = p;
  for (size_t i = 0; i < bytes / sizeof *f; i++)
    f[i] = (float)((i + (size_t)r) % 7) * 0.25f;
}

/* One side: separate buffers for every input and output (views false), or
 * the executable's own bucket buffers bound and every member passed as
 * its view there (views true; a non-member gets a separate buffer). */
static cf_status make_side(cf_context *ctx, cf_graph *g, const cf_options *opt, bool views,
                           int iters, side *s) {
  cf_status st = cf_executable_create(g, opt, &s->e);
  if (st) return st;
  int R = cf_executable_ranks(s->e);
  size_t n[2] = {cf_executable_io_count(s->e, CF_IO_INPUT),
                 cf_executable_io_count(s->e, CF_IO_OUTPUT)};
  s->in = calloc((size_t)R * n[0] + 1, sizeof *s->in);
  s->out = calloc((size_t)R * n[1] + 1, sizeof *s->out);
  s->owned = calloc((size_t)R * (n[0] + n[1]) + 1, sizeof *s->owned);
  s->ms = calloc((size_t)iters + 1, sizeof *s->ms);
  s->cpu_ms = calloc((size_t)iters + 1, sizeof *s->cpu_ms);
  if (!s->in || !s->out || !s->owned || !s->ms || !s->cpu_ms)
    return cf_error(ctx, CF_ERR_NO_MEMORY, NULL, 0, "out of memory");
  for (int r = 0; r < R && views; r++)
    for (size_t b = 0; b < cf_executable_bucket_count(s->e); b++)
      for (int io = 0; io < 2; io++)
        if ((st = cf_executable_bucket_bind(s->e, r, b, (cf_io)io, NULL))) return st;
  for (int r = 0; r < R; r++)
    for (int io = 0; io < 2; io++)
      for (size_t k = 0; k < n[io]; k++) {
        size_t bytes = cf_executable_io_bytes(s->e, (cf_io)io, k), off = 0;
        int b = views ? cf_executable_io_bucket(s->e, (cf_io)io, k, &off) : -1;
        char *p = b >= 0 ? (char *)cf_executable_bucket_buffer(s->e, r, (size_t)b, (cf_io)io) + off
                         : aligned_alloc(CF_BUFFER_ALIGN,
                                         (bytes / CF_BUFFER_ALIGN + 1) * CF_BUFFER_ALIGN);
        if (!p) return cf_error(ctx, CF_ERR_NO_MEMORY, NULL, 0, "out of memory");
        if (b < 0) s->owned[s->n_owned++] = p;
        if (io == CF_IO_INPUT) fill(p, bytes, cf_executable_io_dtype(s->e, CF_IO_INPUT, k), r);
        (io == CF_IO_INPUT ? s->in : s->out)[(size_t)r * n[io] + k] = p;
      }
  return CF_OK;
}

/* User + system CPU seconds of every thread of this process so far. */
static double cpu_s(void) {
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  return (double)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
         1e-6 * (double)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec);
}

static cf_status step(side *s, double *ms, double *cpu_ms) {
  double t0 = cf_now(), c0 = cpu_s();
  cf_status st = cf_executable_run(s->e, (const void *const *)s->in, (void *const *)s->out);
  *ms = 1e3 * (cf_now() - t0);
  *cpu_ms = 1e3 * (cpu_s() - c0);
  s->copies = cf_executable_last_copies(s->e, &s->copy_bytes);
  return st;
}

static void side_free(side *s) {
  for (size_t i = 0; i < s->n_owned; i++)
    free(s->owned[i]);
  free(s->owned);
  free(s->in);
  free(s->out);
  free(s->ms);
  free(s->cpu_ms);
  cf_executable_destroy(s->e);
}

int cf_bench_fusion_api(cf_context *ctx, const cf_bench_api_options *o) {
  cf_graph *g = NULL;
  cf_options *opt = NULL;
  side s[2] = {{.name = "separate buffers"}, {.name = "bucket views"}};
  char ranks[16];
  snprintf(ranks, sizeof ranks, "%d", o->ranks);
  cf_status st = cf_graph_load(ctx, o->file, &g);
  if (!st) st = cf_options_create(ctx, &opt);
  if (!st) st = cf_options_set(opt, "ranks", ranks);
  if (!st && o->max_memory > 0) {
    char mm[32];
    snprintf(mm, sizeof mm, "%lld", (long long)o->max_memory);
    st = cf_options_set(opt, "max_memory", mm);
  }
  if (!st) st = cf_graph_run_pipeline(g, "default", opt);
  for (int i = 0; i < 2 && !st; i++)
    st = make_side(ctx, g, opt, i == 1, o->iters, &s[i]);
  double ms, cpu;
  for (int it = 0; it < o->warmup + o->iters && !st; it++)
    for (int i = 0; i < 2 && !st; i++) { /* alternate: load changes hit both */
      st = step(&s[i], &ms, &cpu);
      if (it >= o->warmup) {
        s[i].ms[it - o->warmup] = ms;
        s[i].cpu_ms[it - o->warmup] = cpu;
      }
    }
  int rc = 0;
  if (st) {
    rc = cf_tool_fail(ctx, st);
    goto done;
  }
  size_t grads = cf_executable_io_count(s[0].e, CF_IO_INPUT), bytes = 0;
  for (size_t k = 0; k < grads; k++)
    bytes += cf_executable_io_bytes(s[0].e, CF_IO_INPUT, k);
  double med[2], cpu_med[2], per_grad[2];
  for (int i = 0; i < 2; i++) {
    med[i] = cf_bench_median(s[i].ms, o->iters);
    cpu_med[i] = cf_bench_median(s[i].cpu_ms, o->iters);
    per_grad[i] = grads ? (double)s[i].copies / ((double)o->ranks * (double)grads) : 0;
  }
  if (o->json) {
    cJSON *root = cJSON_CreateObject(), *arr;
    cJSON_AddStringToObject(root, "bench", "fusion-api");
    cJSON_AddStringToObject(root, "file", cf_tool_name(o->file));
    cJSON_AddNumberToObject(root, "ranks", o->ranks);
    cJSON_AddNumberToObject(root, "iters", o->iters);
    cJSON_AddNumberToObject(root, "warmup", o->warmup);
    cJSON_AddNumberToObject(root, "inputs", (double)grads);
    cJSON_AddNumberToObject(root, "input_bytes", (double)bytes);
    cJSON_AddNumberToObject(root, "buckets", (double)cf_executable_bucket_count(s[0].e));
    arr = cJSON_AddArrayToObject(root, "sides");
    for (int i = 0; i < 2; i++) {
      cJSON *j = cJSON_CreateObject();
      cJSON_AddStringToObject(j, "name", s[i].name);
      cJSON_AddNumberToObject(j, "copies", (double)s[i].copies);
      cJSON_AddNumberToObject(j, "copy_bytes", (double)s[i].copy_bytes);
      cJSON_AddNumberToObject(j, "copies_per_input", per_grad[i]);
      cJSON_AddNumberToObject(j, "time_ms", med[i]);
      cJSON_AddNumberToObject(j, "cpu_ms", cpu_med[i]);
      cJSON_AddItemToArray(arr, j);
    }
    cJSON_AddNumberToObject(root, "ratio", med[0] > 0 ? med[1] / med[0] : 0);
    cJSON_AddNumberToObject(root, "cpu_ratio", cpu_med[0] > 0 ? cpu_med[1] / cpu_med[0] : 0);
    char *text = cJSON_PrintUnformatted(root);
    if (text) puts(text);
    free(text);
    cJSON_Delete(root);
    goto done;
  }
  char b[32];
  cf_bytes_text((int64_t)bytes, b, sizeof b);
  printf("collfuse bench fusion --api: %s on %d rank%s (C API, threads transport, CPU device)\n",
         cf_tool_name(o->file), o->ranks, cf_s(o->ranks));
  printf("  %zu input%s (%s per rank) in %zu bucket%s; median ms per step (one cf_executable_run) "
         "over %d step%s after %d warm-up\n",
         grads, cf_s((int)grads), b, cf_executable_bucket_count(s[0].e),
         cf_s((int)cf_executable_bucket_count(s[0].e)), o->iters, cf_s(o->iters), o->warmup);
  printf("%-18s %8s %10s %10s %12s %11s %12s\n", "buffers", "copies", "per input", "ms/step",
         "vs separate", "cpu ms/step", "vs separate");
  for (int i = 0; i < 2; i++)
    printf("%-18s %8zu %10.2f %10.3f %11.3fx %11.3f %11.3fx\n", s[i].name, s[i].copies, per_grad[i],
           med[i], med[0] > 0 ? med[i] / med[0] : 0, cpu_med[i],
           cpu_med[0] > 0 ? cpu_med[i] / cpu_med[0] : 0);
done:
  side_free(&s[0]);
  side_free(&s[1]);
  cf_options_destroy(opt);
  cf_graph_destroy(g);
  return rc;
}
