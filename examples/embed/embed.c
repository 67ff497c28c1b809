/* embed.c - collfuse embedded in an application: build a data-parallel
 * gradient graph in memory (20 gradient AllReduces, fusion=1, as a DDP-style
 * framework would emit them), fuse it, run it on 4 ranks with the
 * application's own buffers, print the buckets and check the result.
 *
 *   collfuse_embed [SPLIT]     (default: bytes:512K; any --split spec works)
 *
 * Built by the project (ctest e2e/embed) and, standalone, against an
 * installed collfuse: cmake -S examples/embed -B b && cmake --build b.
 */
#include <collfuse/collfuse.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { RANKS = 4, GRADS = 20 };

/* The framework's view of a status: print the context's message. */
#define CHECK(ctx, expr)                                                                           \
  do {                                                                                             \
    if ((expr) != CF_OK) {                                                                         \
      fprintf(stderr, "embed: %s: %s\n", #expr, cf_context_errmsg(ctx));                           \
      goto done;                                                                                   \
    }                                                                                              \
  } while (0)

static void on_log(void *user, cf_log_level level, const char *msg) {
  (void)user;
  if (level <= CF_LOG_WARN) fprintf(stderr, "collfuse: %s\n", msg);
}

int main(int argc, char **argv) {
  const char *split = argc > 1 ? argv[1] : "bytes:512K";
  cf_context *ctx = NULL;
  cf_graph *g = NULL;
  cf_options *opt = NULL;
  cf_executable *exe = NULL;
  float *grad[RANKS][GRADS] = {{0}}, *avg[RANKS][GRADS] = {{0}};
  const void *in[RANKS * GRADS];
  void *out[RANKS * GRADS];
  int rc = 1;

  printf("collfuse %s (built against %s)\n", cf_version(), CF_VERSION_STRING);
  if (cf_context_create(&ctx) != CF_OK) return 1;
  cf_context_set_log(ctx, on_log, NULL);

  /* 1. the graph: layer l has a weight gradient (l even) or a bias one */
  CHECK(ctx, cf_graph_create(ctx, "dp_gradients", RANKS, &g));
  for (int i = 0; i < GRADS; i++) {
    char gn[32], an[32], on[32];
    int64_t dims[1] = {i % 2 ? 256 : 16384 * (1 + i % 3)};
    snprintf(gn, sizeof gn, "grad%d", i);
    snprintf(an, sizeof an, "allreduce%d", i);
    snprintf(on, sizeof on, "avg%d", i);
    CHECK(ctx, cf_graph_add_input(g, gn, "float32", dims, 1));
    CHECK(ctx, cf_graph_add_allreduce(g, an, gn, "mean", NULL, 1, -1));
    CHECK(ctx, cf_graph_add_output(g, on, an));
  }

  /* 2. fuse: fusion=1 AllReduces are bucketed by the split strategy */
  CHECK(ctx, cf_options_create(ctx, &opt));
  CHECK(ctx, cf_options_set(opt, "split", split));
  size_t before = cf_graph_collective_count(g);
  CHECK(ctx, cf_graph_run_pipeline(g, "default", opt));
  size_t after = cf_graph_collective_count(g);
  printf("%zu AllReduces fused into %zu buckets (split %s)\n", before, after, split);
  for (size_t b = 0; b < after; b++) {
    const char *name = cf_graph_collective_name(g, b);
    char members[4096], bytes[32];
    CHECK(ctx, cf_graph_get_attr(g, name, "members", members, sizeof members));
    CHECK(ctx, cf_graph_get_attr(g, name, "bytes", bytes, sizeof bytes));
    printf("  %s: %s bytes: %s\n", name, bytes, members);
  }

  /* 3. compile and run every rank with the application's buffers */
  CHECK(ctx, cf_executable_create(g, opt, &exe));
  int in_place = 0;
  for (int r = 0; r < RANKS; r++)
    for (int i = 0; i < GRADS; i++) {
      char nm[32];
      snprintf(nm, sizeof nm, "grad%d", i);
      int k = cf_executable_io_find(exe, CF_IO_INPUT, nm);
      snprintf(nm, sizeof nm, "avg%d", i);
      int j = cf_executable_io_find(exe, CF_IO_OUTPUT, nm);
      size_t bytes = cf_executable_io_bytes(exe, CF_IO_INPUT, (size_t)k);
      grad[r][i] = malloc(bytes);
      avg[r][i] = malloc(bytes);
      if (!grad[r][i] || !avg[r][i]) goto done;
      for (size_t x = 0; x < bytes / sizeof(float); x++)
        grad[r][i][x] = (float)((r + 1) * (int)(x % 5 + 1));
      in[r * GRADS + k] = grad[r][i];
      out[r * GRADS + j] = avg[r][i];
      if (r == 0) in_place += cf_executable_io_in_place(exe, CF_IO_INPUT, (size_t)k);
    }
  CHECK(ctx, cf_executable_run(exe, in, out));
  printf("ran %d ranks in %.3f ms; %d of %d gradients read in place (bucket members are copied "
         "into their bucket)\n",
         RANKS, cf_executable_last_time_ms(exe), in_place, GRADS);

  /* 4. check: the mean over ranks of (r + 1) * v is 2.5 * v */
  for (int r = 0; r < RANKS; r++)
    for (int i = 0; i < GRADS; i++) {
      char nm[32];
      snprintf(nm, sizeof nm, "avg%d", i);
      int j = cf_executable_io_find(exe, CF_IO_OUTPUT, nm);
      size_t n = cf_executable_io_bytes(exe, CF_IO_OUTPUT, (size_t)j) / sizeof(float);
      for (size_t x = 0; x < n; x++)
        if (avg[r][i][x] != 2.5f * (float)(x % 5 + 1)) {
          fprintf(stderr, "embed: rank %d avg%d[%zu] = %g, expected %g\n", r, i, x, avg[r][i][x],
                  2.5 * (double)(x % 5 + 1));
          goto done;
        }
    }
  printf("ok: every rank has the mean of every gradient\n");
  rc = 0;
done:
  for (int r = 0; r < RANKS; r++)
    for (int i = 0; i < GRADS; i++) {
      free(grad[r][i]);
      free(avg[r][i]);
    }
  cf_executable_destroy(exe); /* before the graph it borrows */
  cf_options_destroy(opt);
  cf_graph_destroy(g);
  cf_context_destroy(ctx);
  return rc;
}
