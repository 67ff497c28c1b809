/* test_exec_watch.c - unit tests of what ends a run whose rank is stuck in
 * a compute step (executor/exec.c join_ranks) and of the address space a
 * run reserves (executor/memory.c cf_plan_reserved_bytes, cf_mem_check).
 *
 * A rank in BLAS watches no deadline: OpenBLAS retries a buffer it cannot
 * map forever (under `ulimit -v`), and a run of one rank, or the join of
 * every rank, then hung. Here the test hook's stall (mode 4) stands for
 * that call: cf_exec_run returns CF_ERR_RUNTIME naming the rank and the
 * node after the timeout, and the plan is marked abandoned (its stalled
 * thread may still use it; cf_plan_destroy leaves it). The memory check
 * counts OpenBLAS's buffers against RLIMIT_AS for a plan with a MatMul and
 * not for one without, and refuses naming the address space. A wait's
 * timeout counts its peer's silence: a rank whose inputs take longer than
 * the timeout but which beats (cf_beat) is waited for, and one that is
 * silent as long is named (the fault world's slow_* hook).
 */
#define _GNU_SOURCE
#include "cf_test.h"

#include <math.h>
#include <sys/resource.h>
#include <unistd.h>

#include "api/api.h"
#include "executor/executor.h"
#include "executor/fault.h"
#include "executor/plan.h"
#include "ir/ir.h"

static const char *graph_xml(bool matmul, int ranks, char *buf, size_t len) {
  snprintf(buf, len,
           "<graph name='w' version='1' world_size='%d'>"
           "<node name='x' op='Input' dtype='float32' shape='64,64'/>"
           "<node name='v' op='Input' dtype='float32' shape='64,64'/>"
           "<node name='m' op='%s'><input ref='x'/><input ref='v'/></node>"
           "<node name='y' op='Output'><input ref='m'/></node></graph>",
           ranks, matmul ? "MatMul" : "Add");
  return buf;
}

static cf_plan *plan_of(bool matmul, int ranks, const cf_run_options *opt, cf_graph **g) {
  char xml[1024];
  graph_xml(matmul, ranks, xml, sizeof xml);
  assert_int_equal(cf_graph_parse(ctx, "w.xml", xml, strlen(xml), g), CF_OK);
  cf_compile_options co = {.pipeline = cf_pipeline_O0};
  assert_int_equal(cf_compile(*g, &co), CF_OK);
  cf_plan *p = NULL;
  if (cf_plan_build(ctx, *g, opt, &p) != CF_OK) fail_msg("plan: %s", cf_context_errmsg(ctx));
  return p;
}

/* rank `stuck` of `ranks` never returns from its MatMul: the run ends
 * after the timeout, naming it */
static void stalled_run(int ranks, int stuck) {
  cf_faults f = {.fail_mode = 4, .fail_rank = stuck, .fail_step = 0};
  cf_run_options opt = {.ranks = ranks, .iters = 1, .timeout_s = 1};
  cf_graph *g = NULL;
  cf_plan *p = plan_of(true, ranks, &opt, &g);
  cf_run_result res;
  char want[128];
  snprintf(want, sizeof want, "rank %d timed out after 1 s computing MatMul 'm'", stuck);
  ASSERT_ERR(cf_fault_run(ctx, p, NULL, &f, NULL, &res), CF_ERR_RUNTIME, want);
  assert_true(p->abandoned);
  cf_plan_destroy(p); /* leaves it: the stalled thread may still read it */
  (void)g;            /* nor the graph the plan points into */
}

static void test_stalled_rank_alone(void **state) {
  (void)state;
  stalled_run(1, 0);
}

static void test_stalled_rank_of_four(void **state) {
  (void)state;
  stalled_run(4, 2);
}

/* An AllReduce (sum) of a random Input x of n float32 over `ranks` ranks
 * as threads, rank `slow` slowed as f says (cf_faults.slow_*): its first
 * sign of life, in its inputs' fill, comes slow_s late. */
static cf_status slowed_run_algo(int ranks, const cf_faults *f, double timeout_s, int64_t n,
                                 cf_algo_req algo, cf_run_result *res, cf_plan **pp, cf_graph **g) {
  char xml[512];
  snprintf(xml, sizeof xml,
           "<graph name='h' version='1' world_size='%d'>"
           "<node name='x' op='Input' dtype='float32' shape='%lld'/>"
           "<node name='s' op='AllReduce' reduction='sum'><input ref='x'/></node>"
           "<node name='y' op='Output'><input ref='s'/></node></graph>",
           ranks, (long long)n);
  assert_int_equal(cf_graph_parse(ctx, "h.xml", xml, strlen(xml), g), CF_OK);
  cf_compile_options co = {.pipeline = cf_pipeline_O0};
  assert_int_equal(cf_compile(*g, &co), CF_OK);
  cf_run_options opt = {
      .ranks = ranks, .iters = 1, .seed = 7, .timeout_s = timeout_s, .algo = algo};
  if (cf_plan_build(ctx, *g, &opt, pp) != CF_OK) fail_msg("plan: %s", cf_context_errmsg(ctx));
  return cf_fault_run(ctx, *pp, NULL, f, NULL, res);
}

static cf_status slowed_run(int ranks, const cf_faults *f, double timeout_s, int64_t n,
                            cf_run_result *res, cf_plan **pp, cf_graph **g) {
  return slowed_run_algo(ranks, f, timeout_s, n, (cf_algo_req){0}, res, pp, g);
}

/* every rank's output of a slowed run against a float64 sum of every
 * rank's fill of x */
static void check_sums(const cf_run_result *res, int ranks, int n) {
  float *x = malloc(sizeof *x * (size_t)n);
  double *want = calloc((size_t)n, sizeof *want);
  assert_non_null(x);
  assert_non_null(want);
  for (int r = 0; r < ranks; r++) {
    cf_fill_random(x, CF_DT_FLOAT32, n, 7, r, "x");
    for (int i = 0; i < n; i++)
      want[i] += x[i];
  }
  for (int r = 0; r < ranks; r++) {
    const float *got = res->outputs[r].data;
    assert_int_equal(res->outputs[r].count, n);
    for (int i = 0; i < n; i++)
      if (fabs(got[i] - want[i]) > 1e-6 * (1 + fabs(want[i])))
        fail_msg("rank %d element %d: %g, want %g", r, i, got[i], want[i]);
  }
  free(x);
  free(want);
}

/* A rank whose inputs take 3x the timeout, beating meanwhile, is waited
 * for (before: its peers timed out at the fingerprints' exchange), and the
 * sums are right (against a float64 sum of every rank's fill) */
static void test_busy_rank_is_waited_for(void **state) {
  (void)state;
  enum { RANKS = 3, N = 3001 };
  cf_faults f = {.slow_rank = 1, .slow_s = 3};
  cf_run_result res;
  cf_plan *p = NULL;
  cf_graph *g = NULL;
  cf_status st = slowed_run(RANKS, &f, 1, N, &res, &p, &g);
  if (st) fail_msg("a busy rank was given up on: %s", cf_context_errmsg(ctx));
  check_sums(&res, RANKS, N);
  cf_run_result_free(&res);
  cf_plan_destroy(p);
  cf_graph_destroy(g);
}

/* A rank silent in its inputs (stuck: no sign of life) is still given up
 * on after the timeout, named; its stall ends with the abort */
static void test_silent_rank_times_out(void **state) {
  (void)state;
  cf_faults f = {.slow_rank = 1, .slow_s = 30, .slow_quiet = true};
  cf_run_result res;
  cf_plan *p = NULL;
  cf_graph *g = NULL;
  ASSERT_ERR(slowed_run(3, &f, 1, 1000, &res, &p, &g), CF_ERR_RUNTIME,
             "timed out after 1 s waiting for a message from rank 1");
  cf_plan_destroy(p);
  cf_graph_destroy(g);
}

/* The timeout of the chain cases: CF_TEST_TIME_SCALE seconds (1 on an idle
 * machine; more where ctest scales its limits) */
static double scaled_timeout(void) {
  const char *s = getenv("CF_TEST_TIME_SCALE");
  int k = s ? atoi(s) : 1;
  return k >= 1 ? k : 1;
}

/* A chain of waits (issue 34): on 4 ranks with the ring, rank 2 busy at the
 * top of its first step (beating) 2 timeouts long; rank 3 waits for it,
 * rank 0 for rank 3, rank 1 for rank 0. Each waits as long as the rank at
 * the end of its chain beats (before: rank 0 timed out after 1 timeout
 * waiting for rank 3, which sent nothing while it waited itself), and the
 * sums are right. */
static void test_chain_to_busy_rank_is_waited_for(void **state) {
  (void)state;
  enum { RANKS = 4, N = 4099 };
  double to = scaled_timeout();
  cf_faults f = {.slow_rank = 2, .slow_s = 2 * to, .slow_at_step = true, .slow_step = 0};
  cf_run_result res;
  cf_plan *p = NULL;
  cf_graph *g = NULL;
  cf_status st = slowed_run_algo(RANKS, &f, to, N, cf_algo_forced(CF_ALGO_RING), &res, &p, &g);
  if (st) fail_msg("a chain to a busy rank was given up on: %s", cf_context_errmsg(ctx));
  check_sums(&res, RANKS, N);
  cf_run_result_free(&res);
  cf_plan_destroy(p);
  cf_graph_destroy(g);
}

/* The same chain with rank 2 stuck (silent): given up on after the timeout,
 * the message naming rank 2, waited for directly or at the end of the
 * chain ("...rank 3; rank 3 waits for rank 2") */
static void test_chain_to_silent_rank_times_out(void **state) {
  (void)state;
  double to = scaled_timeout();
  cf_faults f = {.slow_rank = 2, .slow_s = 30 * to, .slow_quiet = true, .slow_at_step = true};
  cf_run_result res;
  cf_plan *p = NULL;
  cf_graph *g = NULL;
  cf_status st = slowed_run_algo(4, &f, to, 1000, cf_algo_forced(CF_ALGO_RING), &res, &p, &g);
  assert_int_equal(st, CF_ERR_RUNTIME);
  const char *m = cf_context_errmsg(ctx);
  char direct[96], chained[96];
  snprintf(direct, sizeof direct, "timed out after %g s waiting for a message from rank 2", to);
  snprintf(chained, sizeof chained,
           "for rank 2"); /* "rank 3 waits for rank 2", "rank 3 for rank 2" */
  if (!strstr(m, direct) && !(strstr(m, "timed out after") && strstr(m, chained)))
    fail_msg("the message names no stuck rank 2: %s", m);
  cf_plan_destroy(p);
  cf_graph_destroy(g);
}

/* what this process has mapped now (/proc/self/statm's size) */
static int64_t mapped_bytes(void) {
  FILE *f = fopen("/proc/self/statm", "r");
  assert_non_null(f);
  long long pages = 0;
  assert_int_equal(fscanf(f, "%lld", &pages), 1);
  fclose(f);
  return (int64_t)pages * sysconf(_SC_PAGESIZE);
}

/* OpenBLAS's buffers count for a plan that calls BLAS, and only for it */
static void test_reserved_counts_blas(void **state) {
  (void)state;
  cf_run_options opt = {.ranks = 1, .iters = 1, .timeout_s = 10};
  cf_graph *ga = NULL, *gm = NULL;
  cf_plan *pa = plan_of(false, 1, &opt, &ga), *pm = plan_of(true, 1, &opt, &gm);
  int64_t ra = cf_plan_reserved_bytes(pa, 1), rm = cf_plan_reserved_bytes(pm, 1);
  assert_true(ra > 0);
  assert_int_equal(rm - ra, (int64_t)128 << 20); /* one buffer: one rank calls */
  /* an address-space limit that leaves less than that: refused up front.
   * Another thread of the process (OpenBLAS's, started when it loaded) may
   * map its malloc arena between the reading and the checks on a busy
   * machine; then the room was not what was set, and the test sets it again */
  struct rlimit old;
  assert_int_equal(getrlimit(RLIMIT_AS, &old), 0);
  cf_mem_need need = {.file = "w.xml", .ranks = 1, .per_rank = 1 << 20};
  cf_status st_m = CF_OK, st_a = CF_OK;
  char msg[1024], msg_a[1024];
  for (int attempt = 0;; attempt++) {
    int64_t before = mapped_bytes();
    struct rlimit tight = old;
    tight.rlim_cur = (rlim_t)(before + ra + (64 << 20)); /* room for the Add's, not the MatMul's */
    if (old.rlim_max != RLIM_INFINITY && tight.rlim_cur > old.rlim_max) skip();
    assert_int_equal(setrlimit(RLIMIT_AS, &tight), 0);
    need.reserved = rm;
    st_m = cf_mem_check(ctx, &need, 0, NULL);
    snprintf(msg, sizeof msg, "%s", cf_context_errmsg(ctx));
    need.reserved = ra;
    st_a = cf_mem_check(ctx, &need, 0, NULL);
    snprintf(msg_a, sizeof msg_a, "%s", st_a == CF_OK ? "" : cf_context_errmsg(ctx));
    int64_t after = mapped_bytes();
    assert_int_equal(setrlimit(RLIMIT_AS, &old), 0);
    if (after == before || attempt == 20) break;
  }
  assert_int_equal(st_m, CF_ERR_INVALID);
  if (!strstr(msg, "w.xml: error: 1 rank needs") || !strstr(msg, "of address space (") ||
      !strstr(msg, "left under the address-space limit (ulimit -v: "))
    fail_msg("'%s' does not name the address space", msg);
  if (st_a != CF_OK) fail_msg("without BLAS: %s", msg_a);
  cf_plan_destroy(pa);
  cf_plan_destroy(pm);
  cf_graph_destroy(ga);
  cf_graph_destroy(gm);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_reserved_counts_blas),
      cmocka_unit_test(test_stalled_rank_alone),
      cmocka_unit_test(test_stalled_rank_of_four),
      cmocka_unit_test(test_busy_rank_is_waited_for),
      cmocka_unit_test(test_silent_rank_times_out),
      cmocka_unit_test(test_chain_to_busy_rank_is_waited_for),
      cmocka_unit_test(test_chain_to_silent_rank_times_out),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
