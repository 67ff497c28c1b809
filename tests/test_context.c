/* test_context.c - one context shared by threads, through the public header:
 * eight threads run their own executables of one graph at the same time
 * (plain runs, runs with bound buckets, which plan and look up kernels
 * while they run, and failing runs) and each reads the message of its own
 * failure; a thread with no failure of its own reads the one another thread
 * left (a context handed over, the rank threads' messages after a run).
 * CI runs it under ASan+UBSan; it is also clean under ThreadSanitizer (a
 * tree configured with CMAKE_C_FLAGS, CMAKE_EXE_LINKER_FLAGS and
 * CMAKE_SHARED_LINKER_FLAGS set to -fsanitize=thread). */
#include "cf_test.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>

enum { R = 2, N = 3, E = 64, T = 8, ITERS = 20, FAILS = 200 };

#define OK(expr)                                                                                   \
  do {                                                                                             \
    cf_status st_ = (expr);                                                                        \
    if (st_ != CF_OK) fail_msg("%s: status %d: %s", #expr, st_, cf_context_errmsg(ctx));           \
  } while (0)

/* N Inputs g<i> of E float32, AllReduce sum fusion=1, Output o<i>: the
 * default pipeline fuses them into buckets. */
static cf_graph *dp_graph(void) {
  cf_graph *g;
  if (cf_graph_create(ctx, "dp", R, &g)) return NULL;
  for (int i = 0; i < N; i++) {
    char gn[8], an[8], on[8];
    snprintf(gn, sizeof gn, "g%d", i);
    snprintf(an, sizeof an, "ar%d", i);
    snprintf(on, sizeof on, "o%d", i);
    int64_t d[1] = {E};
    if (cf_graph_add_input(g, gn, "float32", d, 1) ||
        cf_graph_add_allreduce(g, an, gn, "sum", NULL, 1, -1) || cf_graph_add_output(g, on, an)) {
      cf_graph_destroy(g);
      return NULL;
    }
  }
  return g;
}

static atomic_int log_lines;

static void on_log(void *user, cf_log_level lvl, const char *msg) {
  (void)user, (void)lvl, (void)msg;
  atomic_fetch_add(&log_lines, 1);
}

typedef struct worker {
  int id;
  cf_executable *e;      /* this thread's own */
  cf_executable *greedy; /* needs more memory than allowed for two ranks: every run fails */
  char err[512];
} worker;

static void *work(void *arg) {
  worker *w = arg;
  float in[R * N][E], out[R * N][E];
  const void *ip[R * N];
  void *op[R * N];
  for (int k = 0; k < R * N; k++) {
    ip[k] = in[k];
    op[k] = out[k];
    for (int x = 0; x < E; x++)
      in[k][x] = (float)(w->id + k / N);
  }
  /* odd threads run with their buckets bound: the run plans for them */
  for (int r = 0; w->id % 2 && r < R; r++)
    for (size_t b = 0; b < cf_executable_bucket_count(w->e); b++)
      for (int io = 0; io < 2; io++)
        if (cf_executable_bucket_bind(w->e, r, b, (cf_io)io, NULL)) {
          snprintf(w->err, sizeof w->err, "bind: %s", cf_context_errmsg(ctx));
          return NULL;
        }
  char want[128];
  snprintf(want, sizeof want, "error: rank %d is not a rank of this %d-rank executable",
           1000 + w->id, R);
  for (int it = 0; it < ITERS; it++) {
    cf_status st = cf_executable_run(w->e, ip, op);
    if (st) {
      snprintf(w->err, sizeof w->err, "run %d: status %d: %s", it, st, cf_context_errmsg(ctx));
      return NULL;
    }
    float sum = (float)(2 * w->id + 1); /* rank 0 gives id, rank 1 id + 1 */
    for (int k = 0; k < R * N; k++)
      if (out[k][E - 1] != sum) {
        snprintf(w->err, sizeof w->err, "run %d: out[%d] = %g, want %g", it, k, out[k][E - 1], sum);
        return NULL;
      }
    /* failures of this thread's: its message, not another thread's */
    for (int f = 0; f < FAILS; f++) {
      st = cf_executable_run_rank(w->e, 1000 + w->id, NULL, NULL);
      const char *msg = cf_context_errmsg(ctx);
      if (st != CF_ERR_USAGE || strcmp(msg, want) != 0) {
        snprintf(w->err, sizeof w->err, "run_rank %d: status %d, message '%s', want '%s'", it, st,
                 msg, want);
        return NULL;
      }
    }
    st = cf_executable_run(w->greedy, NULL, NULL);
    const char *msg = cf_context_errmsg(ctx);
    if (st != CF_ERR_INVALID || !strstr(msg, "allowed by the max_memory option")) {
      snprintf(w->err, sizeof w->err, "greedy run %d: status %d, message '%s'", it, st, msg);
      return NULL;
    }
  }
  return NULL;
}

static void test_threads_share_a_context(void **state) {
  (void)state;
  cf_context_set_log(ctx, on_log, NULL);
  cf_graph *g = dp_graph();
  assert_non_null(g);
  cf_options *o, *small;
  OK(cf_options_create(ctx, &o));
  OK(cf_options_set(o, "explain", "1")); /* log lines while compiling */
  OK(cf_graph_run_pipeline(g, "default", o));
  OK(cf_options_create(ctx, &small));
  worker w[T];
  pthread_t th[T];
  for (int t = 0; t < T; t++) {
    w[t] = (worker){.id = t};
    OK(cf_executable_create(g, o, &w[t].e));
    /* one rank fits in 4 KiB, two do not */
    int64_t need = 0;
    for (int k = 0; k < N; k++)
      need += 2 * (int64_t)cf_executable_io_bytes(w[t].e, CF_IO_INPUT, (size_t)k);
    char lim[32];
    snprintf(lim, sizeof lim, "%lld", (long long)(need + need / 2));
    OK(cf_options_set(small, "max_memory", lim));
    OK(cf_executable_create(g, small, &w[t].greedy));
  }
  assert_true(atomic_load(&log_lines) > 0);
  for (int t = 0; t < T; t++)
    assert_int_equal(pthread_create(&th[t], NULL, work, &w[t]), 0);
  for (int t = 0; t < T; t++)
    pthread_join(th[t], NULL);
  for (int t = 0; t < T; t++) {
    if (w[t].err[0]) fail_msg("thread %d: %s", t, w[t].err);
    cf_executable_destroy(w[t].e);
    cf_executable_destroy(w[t].greedy);
  }
  cf_options_destroy(o);
  cf_options_destroy(small);
  cf_graph_destroy(g);
  cf_context_set_log(ctx, NULL, NULL);
}

/* ---- a message read by a thread that did not fail ---- */

typedef struct failer {
  cf_context *c;
  const char *op;
} failer;

static void *fail_once(void *arg) {
  failer *f = arg;
  cf_graph *g = NULL;
  if (!cf_graph_create(f->c, "h", 1, &g)) cf_graph_add_op(g, f->op, "x", NULL, 0);
  cf_graph_destroy(g);
  return NULL;
}

static void test_handed_over(void **state) {
  (void)state;
  cf_context *c;
  assert_int_equal(cf_context_create(&c), CF_OK);
  assert_string_equal(cf_context_errmsg(c), "");
  pthread_t t;
  failer a = {c, "Nope"}, b = {c, "Neither"};
  assert_int_equal(pthread_create(&t, NULL, fail_once, &a), 0);
  pthread_join(t, NULL);
  /* this thread has failed on c not once: it reads the thread's message */
  assert_non_null(strstr(cf_context_errmsg(c), "unknown op 'Nope'"));
  assert_int_equal(pthread_create(&t, NULL, fail_once, &b), 0);
  pthread_join(t, NULL);
  assert_non_null(strstr(cf_context_errmsg(c), "unknown op 'Neither'")); /* the newest */
  /* once it fails itself, its own message is what it reads */
  cf_graph *g;
  assert_int_equal(cf_graph_create(c, "mine", 1, &g), CF_OK);
  assert_int_equal(cf_graph_add_op(g, "Mine", "x", NULL, 0), CF_ERR_INVALID);
  assert_int_equal(pthread_create(&t, NULL, fail_once, &a), 0);
  pthread_join(t, NULL);
  assert_non_null(strstr(cf_context_errmsg(c), "unknown op 'Mine'"));
  cf_graph_destroy(g);
  cf_context_destroy(c);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_threads_share_a_context),
      cmocka_unit_test(test_handed_over),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
