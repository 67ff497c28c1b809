/* test_coll_desc.c - unit tests of what ranks compare before they exchange
 * data (executor/coll.c cf_coll_desc_mismatch, and cf_coll_run, which
 * stamps the algorithm that runs and its segmenting into every message).
 *
 * Two ranks that move the same data by different algorithms (ring on one,
 * rsag on the other) exchange messages that do not belong together: before
 * the descriptor carried the algorithm, they summed the wrong chunks and
 * returned CF_OK. Here the comparison names the algorithm, the segment size
 * and a fused op's chunks, with both ranks and both values, and two threads
 * ranks calling cf_coll_run with different rows both fail with that message
 * well before their timeout. (Ranks of one plan cannot disagree: they share
 * it; ranks of an MPI job are tested in e2e/mpi.sh.)
 */
#define _GNU_SOURCE
#include "cf_test.h"

#include <pthread.h>

#include "executor/backends/backends.h"
#include "executor/executor.h"
#include "executor/transports/transports.h"

static cf_coll_desc base(void) {
  return (cf_coll_desc){.seq = 3, .op = CF_OP_ALLREDUCE, .dtype = CF_DT_FLOAT32, .count = 1 << 20,
                        .red = CF_RED_SUM, .root = -1, .layout = -1, .algo = CF_ALGO_RSAG,
                        .group = "g", .node = "ar"};
}

/* a and b differ: the text names both ranks and what is said */
static void expect_mismatch(const cf_coll_desc *a, const cf_coll_desc *b, const char *want) {
  char text[768];
  assert_true(cf_coll_desc_mismatch(a, 0, b, 1, text, sizeof text));
  if (!strstr(text, want)) fail_msg("'%s' lacks '%s'", text, want);
  if (!strstr(text, "AllReduce 'ar' (collective #3 of group 'g')"))
    fail_msg("'%s' does not name the collective", text);
}

static void test_same_descriptors_agree(void **state) {
  (void)state;
  cf_coll_desc a = base(), b = base();
  char text[768];
  b.node = "other name"; /* names are for messages only */
  b.in_place = true;     /* a rank's own memory plan */
  assert_false(cf_coll_desc_mismatch(&a, 0, &b, 1, text, sizeof text));
}

/* Either side of a mismatch says it with the lower rank first, so both
 * ranks print one text (the transports and exec.c pass their own first). */
static void test_lower_rank_first_either_side(void **state) {
  (void)state;
  cf_coll_desc a = base(), b = base();
  a.algo = CF_ALGO_RING;
  char low[768], high[768];
  assert_true(cf_coll_desc_mismatch(&a, 2, &b, 5, low, sizeof low));
  assert_true(cf_coll_desc_mismatch(&b, 5, &a, 2, high, sizeof high));
  assert_string_equal(low, high);
  if (!strstr(low, "algorithm is ring on rank 2 but rsag on rank 5"))
    fail_msg("'%s' does not name rank 2 first", low);
}

/* A receive of another size than was sent: both ranks and sizes, and the
 * node when the collective is known. */
static void test_size_mismatch_text(void **state) {
  (void)state;
  cf_coll_desc d = base();
  char text[768];
  cf_coll_size_mismatch(text, sizeof text, 3, 4096, 1, 1024, &d);
  assert_string_equal(text, "cross-rank mismatch: rank 3 expected 4096 bytes from rank 1, which "
                            "sent 1024 (in 'ar')");
  cf_coll_size_mismatch(text, sizeof text, 0, 8, 2, 16, NULL);
  assert_string_equal(text, "cross-rank mismatch: rank 0 expected 8 bytes from rank 2, which sent 16");
}

static void test_algorithm_named(void **state) {
  (void)state;
  cf_coll_desc a = base(), b = base();
  a.algo = CF_ALGO_RING;
  expect_mismatch(&a, &b, "algorithm is ring on rank 0 but rsag on rank 1");
  b.algo = CF_ALGO_MPI_NATIVE;
  expect_mismatch(&a, &b, "algorithm is ring on rank 0 but mpi-native on rank 1");
}

static void test_segments_named(void **state) {
  (void)state;
  cf_coll_desc a = base(), b = base();
  a.segment = 1 << 20;
  expect_mismatch(&a, &b, "segment size is 1048576 elements on rank 0 but none (one piece) on rank 1");
}

static void test_chunks_named(void **state) {
  (void)state;
  cf_coll_desc a = base(), b = base();
  a.chunks = 4;
  b.chunks = 1;
  expect_mismatch(&a, &b, "pipeline chunks is 4 on rank 0 but 1 on rank 1");
}

/* ---- two threads ranks, rank 0 forced to ring, rank 1 to rsag ---- */

typedef struct rank_job {
  cf_comm *comm;
  cf_device *dev;
  cf_coll_call call;
  cf_status st;
} rank_job;

static void *rank_main(void *arg) {
  rank_job *j = arg;
  j->st = cf_coll_run(j->comm, j->dev, &j->call);
  return NULL;
}

static void test_ranks_with_different_algorithms_fail(void **state) {
  (void)state;
  enum { N = 2 };
  const int64_t count = 1 << 20; /* the 1,048,576 sums */
  static const int algos[N] = {CF_ALGO_RING, CF_ALGO_RSAG};
  static const int ranks[N] = {0, 1};
  cf_coll_desc d = base();
  d.count = count;
  cf_device *dev = NULL;
  assert_int_equal(cf_device_cpu_create(ctx, &dev), CF_OK);
  cf_kernel_key keys[16];
  int nk = cf_coll_kernels(&d, N, keys, 16);
  for (int i = 0; i < nk; i++) assert_int_equal(dev->ops->prepare(dev, &keys[i]), CF_OK);
  cf_world *w = NULL;
  assert_int_equal(cf_world_create(ctx, &cf_world_threads, N, 20, &w), CF_OK);
  cf_context *rctx[N];
  rank_job jobs[N];
  float *in[N], *out[N];
  void *scratch[N];
  for (int r = 0; r < N; r++) {
    assert_int_equal(cf_context_create(&rctx[r]), CF_OK);
    in[r] = malloc((size_t)count * sizeof(float));
    out[r] = calloc((size_t)count, sizeof(float));
    assert_non_null(in[r]);
    assert_non_null(out[r]);
    for (int64_t i = 0; i < count; i++) in[r][i] = (float)(r + 1);
    size_t sb = cf_coll_scratch_bytes(&d, N, algos[r], true);
    scratch[r] = malloc(sb + 1);
    cf_comm *c = cf_world_comm(w, r);
    c->ctx = rctx[r];
    jobs[r] = (rank_job){.comm = c,
                         .dev = dev,
                         .call = {.desc = d, .ranks = ranks, .n = N, .me = r, .in = in[r],
                                  .out = out[r], .scratch = scratch[r], .scratch_bytes = sb,
                                  .algo = algos[r]}};
  }
  pthread_t th[N];
  for (int r = 0; r < N; r++) assert_int_equal(pthread_create(&th[r], NULL, rank_main, &jobs[r]), 0);
  for (int r = 0; r < N; r++) pthread_join(th[r], NULL);
  for (int r = 0; r < N; r++) {
    const char *msg = cf_context_errmsg(rctx[r]);
    if (jobs[r].st != CF_ERR_RUNTIME)
      fail_msg("rank %d: status %d (%s); 3.0 expected nowhere, got out[0] = %g", r, jobs[r].st, msg,
               (double)out[r][0]);
    if (!strstr(msg, "algorithm is ring on rank 0 but rsag on rank 1"))
      fail_msg("rank %d: '%s' does not name both algorithms", r, msg);
  }
  for (int r = 0; r < N; r++) {
    free(in[r]);
    free(out[r]);
    free(scratch[r]);
  }
  cf_world_destroy(w, 0);
  for (int r = 0; r < N; r++) cf_context_destroy(rctx[r]);
  dev->ops->destroy(dev);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_same_descriptors_agree),
      cmocka_unit_test(test_algorithm_named),
      cmocka_unit_test(test_lower_rank_first_either_side),
      cmocka_unit_test(test_size_mismatch_text),
      cmocka_unit_test(test_segments_named),
      cmocka_unit_test(test_chunks_named),
      cmocka_unit_test(test_ranks_with_different_algorithms_fail),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
