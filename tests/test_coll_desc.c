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
#include <sched.h>
#include <stdatomic.h>
#include <sys/syscall.h>
#include <unistd.h>

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

/* Two threads ranks running one cf_coll_run each: rank r runs d with
 * algos[r] on count floats (in place: out is in), through ops when given
 * (the threads transport's slots otherwise). */
typedef struct pair {
  cf_device *dev;
  cf_world *w;
  cf_context *rctx[2];
  rank_job jobs[2];
  float *in[2], *out[2];
  void *scratch[2];
} pair;

static void pair_start(pair *p, cf_coll_desc d, const int *algos, const cf_comm_ops *ops) {
  static const int ranks[2] = {0, 1};
  assert_int_equal(cf_device_cpu_create(ctx, &p->dev), CF_OK);
  cf_kernel_key keys[16];
  int nk = cf_coll_kernels(&d, 2, keys, 16);
  for (int i = 0; i < nk; i++) assert_int_equal(p->dev->ops->prepare(p->dev, &keys[i]), CF_OK);
  assert_int_equal(cf_world_create(ctx, &cf_world_threads, 2, 20, &p->w), CF_OK);
  for (int r = 0; r < 2; r++) {
    assert_int_equal(cf_context_create(&p->rctx[r]), CF_OK);
    p->in[r] = malloc((size_t)d.count * sizeof(float));
    p->out[r] = d.in_place ? p->in[r] : calloc((size_t)d.count, sizeof(float));
    assert_non_null(p->in[r]);
    assert_non_null(p->out[r]);
    size_t sb = cf_coll_scratch_bytes(&d, 2, algos[r], true);
    p->scratch[r] = malloc(sb + 1);
    cf_comm *c = cf_world_comm(p->w, r);
    if (ops) c->ops = ops;
    c->ctx = p->rctx[r];
    p->jobs[r] = (rank_job){.comm = c,
                            .dev = p->dev,
                            .call = {.desc = d, .ranks = ranks, .n = 2, .me = r, .in = p->in[r],
                                     .out = p->out[r], .scratch = p->scratch[r],
                                     .scratch_bytes = sb, .algo = algos[r]}};
  }
}

static void pair_go(pair *p) {
  pthread_t th[2];
  for (int r = 0; r < 2; r++)
    assert_int_equal(pthread_create(&th[r], NULL, rank_main, &p->jobs[r]), 0);
  for (int r = 0; r < 2; r++) pthread_join(th[r], NULL);
}

static void pair_end(pair *p) {
  for (int r = 0; r < 2; r++) {
    if (p->out[r] != p->in[r]) free(p->out[r]);
    free(p->in[r]);
    free(p->scratch[r]);
  }
  cf_world_destroy(p->w, 0);
  for (int r = 0; r < 2; r++) cf_context_destroy(p->rctx[r]);
  p->dev->ops->destroy(p->dev);
}

static void test_ranks_with_different_algorithms_fail(void **state) {
  (void)state;
  const int64_t count = 1 << 20; /* the 1,048,576 sums */
  static const int algos[2] = {CF_ALGO_RING, CF_ALGO_RSAG};
  cf_coll_desc d = base();
  d.count = count;
  pair p;
  pair_start(&p, d, algos, NULL);
  for (int r = 0; r < 2; r++)
    for (int64_t i = 0; i < count; i++) p.in[r][i] = (float)(r + 1);
  pair_go(&p);
  for (int r = 0; r < 2; r++) {
    const char *msg = cf_context_errmsg(p.rctx[r]);
    if (p.jobs[r].st != CF_ERR_RUNTIME)
      fail_msg("rank %d: status %d (%s); 3.0 expected nowhere, got out[0] = %g", r, p.jobs[r].st,
               msg, (double)p.out[r][0]);
    if (!strstr(msg, "algorithm is ring on rank 0 but rsag on rank 1"))
      fail_msg("rank %d: '%s' does not name both algorithms", r, msg);
  }
  pair_end(&p);
}

/* ---- an in-place AllReduce in one piece on a single-copy transport ---- */

/* The threads transport's slots, with send counting each rank's messages
 * and the segment size they carry. */
static cf_comm_ops counting_ops;
static const cf_comm_ops *threads_ops;
static _Atomic int sends[2];
static _Atomic int64_t sent_segment[2];
static _Atomic int sleeps[2]; /* recv_sleep calls */

static cf_status counting_send(cf_comm *c, int peer, const void *buf, size_t bytes,
                               const cf_coll_desc *d) {
  atomic_fetch_add(&sends[c->rank], 1);
  atomic_store(&sent_segment[c->rank], d->segment);
  return threads_ops->send(c, peer, buf, bytes, d);
}

/* A receive that sleeps at once: counted, then the threads transport's. */
static cf_status counting_recv_sleep(cf_comm *c, int peer, void *staging, size_t bytes,
                                     const cf_coll_desc *d, const void **data) {
  atomic_fetch_add(&sleeps[c->rank], 1);
  return threads_ops->recv(c, peer, staging, bytes, d, data);
}

/* Two threads ranks run algo (rsag or pool) on count random floats, in
 * place or out of place, their comms saying that they share cores cores
 * (0: one each); returns each rank's sends, the segment size its messages
 * carried and its receives that slept at once (n_sleeps, when not NULL),
 * and checks every output against the float64 sum (of two addends:
 * float32's sum is the exact one rounded). */
static void run_algo_on(int algo, bool in_place, int64_t count, int cores, int *n_sends,
                        int64_t *segment, int *n_sleeps) {
  const int algos[2] = {algo, algo};
  cf_coll_desc d = base();
  d.algo = algo;
  d.count = count;
  d.in_place = in_place;
  cf_world *probe = NULL; /* the threads transport's slots, to wrap */
  assert_int_equal(cf_world_create(ctx, &cf_world_threads, 2, 20, &probe), CF_OK);
  threads_ops = cf_world_comm(probe, 0)->ops;
  cf_world_destroy(probe, 0);
  counting_ops = *threads_ops;
  counting_ops.send = counting_send;
  counting_ops.recv_sleep = counting_recv_sleep;
  pair p;
  pair_start(&p, d, algos, &counting_ops);
  for (int r = 0; r < 2; r++) p.jobs[r].comm->cores = cores;
  uint64_t seed = 0x9e3779b97f4a7c15u;
  double *want = malloc((size_t)count * sizeof(double));
  assert_non_null(want);
  for (int r = 0; r < 2; r++) {
    sends[r] = 0;
    sleeps[r] = 0;
    sent_segment[r] = -1;
    for (int64_t i = 0; i < count; i++) {
      seed = seed * 6364136223846793005u + 1442695040888963407u;
      p.in[r][i] = (float)((int64_t)(seed >> 40) - (1 << 23)) / 4096.0f;
    }
  }
  for (int64_t i = 0; i < count; i++) want[i] = (double)p.in[0][i] + (double)p.in[1][i];
  pair_go(&p);
  for (int r = 0; r < 2; r++) {
    if (p.jobs[r].st != CF_OK) fail_msg("rank %d: %s", r, cf_context_errmsg(p.rctx[r]));
    for (int64_t i = 0; i < count; i++)
      if (p.out[r][i] != (float)want[i])
        fail_msg("rank %d element %lld: %.9g, want %.9g", r, (long long)i, (double)p.out[r][i],
                 want[i]);
    n_sends[r] = sends[r];
    segment[r] = sent_segment[r];
    if (n_sleeps) n_sleeps[r] = sleeps[r];
  }
  free(want);
  pair_end(&p);
}

static void run_algo(int algo, bool in_place, int64_t count, int *n_sends, int64_t *segment) {
  run_algo_on(algo, in_place, count, 0, n_sends, segment, NULL);
}

/* In place (a DDP bucket) rsag on a single-copy transport takes no scratch
 * and runs whole: one exchange (its input and output to the peer: two
 * sends) and no segment size in the messages, where 4 MiB segments would
 * make five exchanges of 18 MiB, each with two waits for the peer
 * (coll.c). Out of place the call still runs in segments. The results are
 * the sum either way. */
static void test_in_place_rsag_runs_whole(void **state) {
  (void)state;
  const int64_t count = (int64_t)4500007; /* 18 MiB of float32: 5 segments */
  int n[2];
  int64_t seg[2];
  run_algo(CF_ALGO_RSAG, true, count, n, seg);
  for (int r = 0; r < 2; r++)
    if (n[r] != 2 || seg[r] != 0)
      fail_msg("in place, rank %d: %d sends of segment %lld; one exchange (2 sends) of segment 0 "
               "expected", r, n[r], (long long)seg[r]);
  run_algo(CF_ALGO_RSAG, false, count, n, seg);
  for (int r = 0; r < 2; r++)
    if (n[r] != 10 || seg[r] != (4 << 20) / 4)
      fail_msg("out of place, rank %d: %d sends of segment %lld; 5 segments (10 sends) of 1 Mi "
               "elements expected", r, n[r], (long long)seg[r]);
}

/* pool runs whole in place and out of place (its pieces are its
 * segments): one exchange, the first rank's input, output and counter
 * (three sends), the other's input and output (two), no segment size. */
static void test_pool_runs_whole(void **state) {
  (void)state;
  const int64_t count = (int64_t)4500007; /* 18 MiB of float32: 18 pieces */
  int n[2];
  int64_t seg[2];
  for (int ip = 0; ip < 2; ip++) {
    run_algo(CF_ALGO_POOL, ip, count, n, seg);
    for (int r = 0; r < 2; r++)
      if (n[r] != 3 - r || seg[r] != 0)
        fail_msg("pool %s, rank %d: %d sends of segment %lld; one exchange (%d sends) of segment 0 "
                 "expected", ip ? "in place" : "out of place", r, n[r], (long long)seg[r], 3 - r);
  }
}

/* Two ranks on one core: pool leaves rank 1 idle, and every message
 * between the worker and the idle rank is waited for asleep at once
 * (recv_sleep): rank 0 sleeps for rank 1's input and output, rank 1 for
 * rank 0's input, output and counter. Below 4 MiB both ranks work and
 * poll. The sums are right either way. */
static void test_pool_waits_for_idle_ranks_asleep(void **state) {
  (void)state;
  int n[2], slept[2];
  int64_t seg[2];
  run_algo_on(CF_ALGO_POOL, false, (int64_t)1500007, 1, n, seg, slept); /* 6 MiB */
  for (int r = 0; r < 2; r++)
    if (slept[r] != 2 + r)
      fail_msg("6 MiB on 1 core, rank %d: %d receives slept at once, %d expected", r, slept[r],
               2 + r);
  run_algo_on(CF_ALGO_POOL, false, (int64_t)250007, 1, n, seg, slept); /* 1 MiB */
  for (int r = 0; r < 2; r++)
    if (slept[r] != 0) fail_msg("1 MiB, rank %d: %d receives slept at once, none expected", r, slept[r]);
}

/* A thread marked cf_spin_brief (a cf_runner's) polls CF_SPIN_BRIEF times
 * before it gives up spinning, whatever the spin asked for: a wait of 2^30
 * polls (about 45 s here) ends at once; an unmarked thread's spin is its
 * own. */
static void *brief_main(void *arg) {
  _Atomic uint64_t *a = arg;
  cf_spin_brief = true;
  bool came = cf_spin_ge(a, 1, 1 << 30, CF_SPIN_CORE);
  return came ? a : NULL;
}

static void test_brief_spin(void **state) {
  (void)state;
  _Atomic uint64_t a = 0;
  assert_false(cf_spin_brief); /* this thread's: unmarked */
  pthread_t th;
  void *ret = &a;
  assert_int_equal(pthread_create(&th, NULL, brief_main, &a), 0);
  pthread_join(th, &ret);
  assert_null(ret); /* gave up: the target never came */
  assert_false(cf_spin_brief);
  assert_false(cf_spin_ge(&a, 1, 1000, CF_SPIN_CORE));
  a = 1;
  assert_true(cf_spin_ge(&a, 1, 1 << 30, CF_SPIN_CORE));
}

/* Every sched_yield of this test program (the library is linked in
 * statically, so its calls come here), counted, then made. */
static _Atomic int yields;
int sched_yield(void) {
  atomic_fetch_add(&yields, 1);
  return (int)syscall(SYS_sched_yield);
}

/* How each mode polls a word that never comes: CF_SPIN_PAUSE (the shm
 * world's with COLLFUSE_SHM_SPIN=pause) never yields, whatever the spin (a
 * yield puts the rank behind every other task: transports.h); oversubscribed
 * ranks yield every poll; a core per rank every 64 polls after 256. */
static void test_spin_modes(void **state) {
  (void)state;
  _Atomic uint64_t a = 0;
  struct {
    cf_spin_mode mode;
    int spin, yields;
  } cases[] = {{CF_SPIN_PAUSE, CF_SPIN_BRIEF, 0},
               {CF_SPIN_PAUSE, 5000, 0},
               {CF_SPIN_YIELD, 64, 64},
               {CF_SPIN_CORE, 1000, 12},
               {CF_SPIN_CORE, 256, 0}};
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    atomic_store(&yields, 0);
    assert_false(cf_spin_ge(&a, 1, cases[i].spin, cases[i].mode));
    if (atomic_load(&yields) != cases[i].yields)
      fail_msg("mode %d, spin %d: %d yields, %d expected", (int)cases[i].mode, cases[i].spin,
               atomic_load(&yields), cases[i].yields);
  }
  a = 1; /* a word that has come: no poll, no yield */
  atomic_store(&yields, 0);
  assert_true(cf_spin_ge(&a, 1, 64, CF_SPIN_YIELD));
  assert_int_equal(atomic_load(&yields), 0);
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
      cmocka_unit_test(test_in_place_rsag_runs_whole),
      cmocka_unit_test(test_pool_runs_whole),
      cmocka_unit_test(test_pool_waits_for_idle_ranks_asleep),
      cmocka_unit_test(test_brief_spin),
      cmocka_unit_test(test_spin_modes),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
