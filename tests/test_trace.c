/* test_trace.c - unit tests of a run's timeline (ir/trace.c): the ring
 * buffers keep the newest events and count the rest, and cf_trace_summarize
 * computes exposed communication, overlap and each collective's start, run
 * and wait from events laid out by hand as a plan's steps would leave them
 * (the numbers below are worked out from the layout, not from the code).
 */
#include "cf_test.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <unistd.h>

#include "ir/ir.h"
#include "ir/trace.h"

enum { US = 1000 }; /* events are in nanoseconds */

static void ev(cf_trace_lane *l, int64_t t0, int64_t t1, const char *cat, const char *name, int coll) {
  cf_trace_record(l, &(cf_trace_ev){.t0 = t0 * US, .t1 = t1 * US, .name = name, .cat = cat,
                                     .arg_name = coll >= 0 ? "coll" : NULL, .arg = coll});
}

static void iteration(cf_trace_lane *l, int64_t t0, int64_t t1, int k) {
  cf_trace_record(l, &(cf_trace_ev){.t0 = t0 * US, .t1 = t1 * US, .name = "iteration",
                                     .cat = "iteration", .arg_name = "iteration", .arg = k});
}

/* Rank 0 of two: a warmup iteration and a timed one. In the timed one,
 * compute a, START c0 (to the communication thread), compute b while c0
 * runs, WAIT c0, then c1 inline (no compute to hide it). */
static void test_exposed_communication(void **state) {
  (void)state;
  cf_trace *t;
  assert_int_equal(cf_trace_create(2, 64, &t), CF_OK);
  cf_trace_lane *rk = cf_trace_lane_of(t, 0, 0), *cm = cf_trace_lane_of(t, 0, 1);
  /* warmup: everything twice as long, must not count */
  iteration(rk, 0, 200, 0);
  ev(rk, 0, 100, "compute", "a", -1);
  ev(rk, 100, 102, "start", "c0", 0);
  ev(cm, 110, 190, "collective", "c0", 0);
  ev(rk, 102, 180, "compute", "b", -1);
  ev(rk, 180, 190, "wait", "c0", 0);
  ev(rk, 190, 200, "collective", "c1", 1);
  /* timed */
  iteration(rk, 300, 400, 1);
  ev(rk, 300, 350, "compute", "a", -1);
  ev(rk, 350, 351, "start", "c0", 0);
  ev(cm, 355, 390, "collective", "c0", 0); /* starts 4 us after its START, runs 35 */
  ev(rk, 351, 370, "compute", "b", -1);   /* hides 15 us of it */
  ev(rk, 370, 390, "wait", "c0", 0);      /* 20 us exposed */
  ev(rk, 390, 400, "collective", "c1", 1); /* 10 us inline: exposed */
  cf_trace_rank ranks[2];
  cf_trace_bucket b[2];
  assert_int_equal(cf_trace_summarize(t, 1, 2, ranks, b), CF_OK);
  assert_int_equal(ranks[0].iters, 1);
  assert_true(fabs(ranks[0].iter_us - 100) < 1e-9);
  assert_true(fabs(ranks[0].compute_us - 69) < 1e-9);
  assert_true(fabs(ranks[0].comm_us - 45) < 1e-9);
  assert_true(fabs(ranks[0].exposed_us - 30) < 1e-9);
  assert_int_equal(ranks[1].iters, 0);
  assert_true(fabs(ranks[1].exposed_us) < 1e-9);
  assert_string_equal(b[0].name, "c0");
  assert_int_equal(b[0].runs, 1);
  assert_true(fabs(b[0].start_after_us - 4) < 1e-9);
  assert_true(fabs(b[0].duration_us - 35) < 1e-9);
  assert_true(fabs(b[0].wait_us - 20) < 1e-9);
  assert_int_equal(b[1].runs, 1);
  assert_true(fabs(b[1].start_after_us) < 1e-9);
  assert_true(fabs(b[1].duration_us - 10) < 1e-9);
  assert_true(fabs(b[1].wait_us - 10) < 1e-9);
  /* from iteration 0 on, both count */
  assert_int_equal(cf_trace_summarize(t, 0, 2, ranks, b), CF_OK);
  assert_int_equal(ranks[0].iters, 2);
  assert_true(fabs(ranks[0].exposed_us - 50) < 1e-9);
  assert_true(fabs(b[0].start_after_us - 12) < 1e-9);
  assert_int_equal(cf_trace_dropped(t), 0);
  cf_trace_destroy(t);
}

/* A lane keeps its last cap events, oldest first, and counts the rest. */
static void test_ring_keeps_newest(void **state) {
  (void)state;
  cf_trace *t;
  assert_int_equal(cf_trace_create(1, 4, &t), CF_OK);
  cf_trace_lane *l = cf_trace_lane_of(t, 0, 1);
  for (int k = 0; k < 6; k++) ev(l, 10 * k, 10 * k + 5, "collective", "c", 0);
  const cf_trace_ev *v;
  int64_t start, kept = cf_trace_events(l, &v, &start);
  assert_int_equal(kept, 4);
  for (int i = 0; i < 4; i++) assert_int_equal(v[(start + i) % l->cap].t0, 10 * (i + 2) * US);
  assert_int_equal(cf_trace_dropped(t), 2);
  assert_null(cf_trace_lane_of(t, 1, 0));
  cf_trace_record(NULL, &(cf_trace_ev){0}); /* not tracing: nothing */
  cf_trace_destroy(t);
}

/* The written file is JSON with the names escaped and the failure said. */
static void test_write(void **state) {
  (void)state;
  cf_trace *t;
  assert_int_equal(cf_trace_create(2, 8, &t), CF_OK);
  ev(cf_trace_lane_of(t, 1, 0), 1, 2, "compute", "a \"quoted\"\n\\name", -1);
  cf_trace_fail(t, "rank 1 failed");
  char path[] = "/tmp/cf_test_trace_XXXXXX";
  int fd = mkstemp(path);
  assert_true(fd >= 0);
  close(fd);
  assert_int_equal(cf_trace_write(ctx, t, path), CF_OK);
  FILE *f = fopen(path, "rb");
  char buf[8192];
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  fclose(f);
  unlink(path);
  buf[n] = 0;
  cJSON *o = cJSON_Parse(buf);
  assert_non_null(o);
  cJSON *evs = cJSON_GetObjectItem(o, "traceEvents");
  bool found = false;
  for (cJSON *e = evs ? evs->child : NULL; e; e = e->next)
    if (!strcmp(cJSON_GetObjectItem(e, "ph")->valuestring, "X")) {
      assert_string_equal(cJSON_GetObjectItem(e, "name")->valuestring, "a \"quoted\"\n\\name");
      assert_int_equal(cJSON_GetObjectItem(e, "pid")->valueint, 1);
      found = true;
    }
  assert_true(found);
  cJSON *other = cJSON_GetObjectItem(o, "otherData");
  assert_string_equal(cJSON_GetObjectItem(other, "failed")->valuestring, "rank 1 failed");
  assert_int_equal(cJSON_GetObjectItem(other, "ranks")->valueint, 2);
  /* ts 0 on the clock, so that traces of several processes or runs line up */
  cJSON *start = cJSON_GetObjectItem(other, "start_us");
  assert_non_null(start);
  assert_true(fabs(start->valuedouble - (double)t->t0 / 1e3) < 0.01);
  cJSON_Delete(o);
  cf_trace_destroy(t);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_exposed_communication),
      cmocka_unit_test(test_ring_keeps_newest),
      cmocka_unit_test(test_write),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
