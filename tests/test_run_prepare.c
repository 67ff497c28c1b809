/* test_run_prepare.c - unit tests of a run's one set-up (api/prepare.c),
 * which `collfuse run` and the C API's executables share: the profile is
 * read once and gives auto its measured rules for the transport (none for
 * a forced algorithm or the CUDA device) and --split auto its costs; a
 * missing explicit profile is refused naming it; the memory check applies
 * the caller's limit under the caller's name for it. (Joining MPI's world
 * is run by the mpi-labelled e2e tests.)
 */
#include "cf_test.h"

#include <unistd.h>

#include "api/api.h"
#include "executor/executor.h"

/* A profile file with threads rules and link for 4 ranks; path into buf. */
static const char *profile_file(char *buf, size_t len) {
  snprintf(buf, len, "/tmp/cf_prepare_profile_%ld", (long)getpid());
  FILE *f = fopen(buf, "w");
  assert_non_null(f);
  fputs("collfuse-profile 1\nlink threads 4 5 20\nalgo threads 4 0 0 ring\n", f);
  fclose(f);
  return buf;
}

static void test_no_profile(void **state) {
  (void)state;
  cf_run_setup s = {.profile = "none", .timeout_s = 60};
  cf_run_options ro = {.algo = {.policy = CF_POLICY_AUTO}};
  assert_int_equal(cf_run_prepare(ctx, &s, &ro), CF_OK);
  assert_non_null(s.prof); /* empty: the built-in rules */
  assert_null(s.world);
  assert_int_equal(s.me, 0);
  assert_false(ro.staged);
  assert_int_equal(ro.algo.policy, CF_POLICY_AUTO);
  assert_int_equal(ro.algo.n_measured, 0);
  assert_string_equal(cf_run_transport(&s), "threads");
  cf_cost c;
  assert_false(cf_run_cost(&s, 4, &c));
  cf_run_setup_free(&s, 0);
  assert_null(s.prof);
  cf_run_setup_free(&s, 0); /* twice: nothing left */
}

static void test_profile_read_once(void **state) {
  (void)state;
  char path[64];
  cf_run_setup s = {.profile = profile_file(path, sizeof path)};
  cf_run_options ro = {.algo = {.policy = CF_POLICY_AUTO}};
  assert_int_equal(cf_run_prepare(ctx, &s, &ro), CF_OK);
  assert_int_equal(ro.algo.n_measured, 1);
  assert_non_null(ro.algo.measured);
  assert_int_equal(ro.algo.measured[0].min_ranks, 4);
  cf_cost c;
  assert_true(cf_run_cost(&s, 4, &c));
  assert_false(cf_run_cost(&s, 8, &c));
  /* a second call (the API's for another plan) keeps what it read */
  cf_profile *first = s.prof;
  unlink(path);
  cf_run_options again = {.algo = {.policy = CF_POLICY_AUTO}};
  assert_int_equal(cf_run_prepare(ctx, &s, &again), CF_OK);
  assert_ptr_equal(s.prof, first);
  assert_int_equal(again.algo.n_measured, 1);
  /* no measured rules where a profile does not apply */
  cf_run_options forced = {.algo = cf_algo_forced(0)};
  assert_int_equal(cf_run_prepare(ctx, &s, &forced), CF_OK);
  assert_int_equal(forced.algo.n_measured, 0);
  cf_run_options cuda = {.algo = {.policy = CF_POLICY_AUTO}, .device = CF_DEVICE_CUDA};
  assert_int_equal(cf_run_prepare(ctx, &s, &cuda), CF_OK);
  assert_int_equal(cuda.algo.n_measured, 0);
  cf_run_setup_free(&s, 0);
}

static void test_missing_profile(void **state) {
  (void)state;
  cf_run_setup s = {.profile = "/nonexistent/cf-prepare-profile"};
  cf_run_options ro = {.algo = {.policy = CF_POLICY_AUTO}};
  ASSERT_ERR(cf_run_prepare(ctx, &s, &ro), CF_ERR_IO,
             "/nonexistent/cf-prepare-profile: error: profile: cannot open");
  assert_null(s.prof);
  cf_run_setup_free(&s, 0);
}

static void test_memory_limit(void **state) {
  (void)state;
  cf_run_setup s = {.profile = "none", .max_memory = 1 << 20, .max_memory_what = "--max-memory"};
  cf_run_options ro = {0};
  assert_int_equal(cf_run_prepare(ctx, &s, &ro), CF_OK);
  cf_mem_need need = {.file = "p.xml", .ranks = 2, .per_rank = 1 << 20};
  ASSERT_ERR(cf_run_check_memory(ctx, &s, &need), CF_ERR_INVALID, "allowed by --max-memory");
  ASSERT_ERR(cf_run_check_memory(ctx, &s, &need), CF_ERR_INVALID, "p.xml: error: 2 ranks need");
  need.per_rank = 1024;
  assert_int_equal(cf_run_check_memory(ctx, &s, &need), CF_OK);
  cf_run_setup_free(&s, 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_no_profile),
      cmocka_unit_test(test_profile_read_once),
      cmocka_unit_test(test_missing_profile),
      cmocka_unit_test(test_memory_limit),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
