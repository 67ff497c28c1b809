/* testctl.c - the driver's fault injection, in test builds only
 * (COLLFUSE_TESTS; a build without tests links testctl_off.c instead, so an
 * installed package ignores these variables).
 *
 * One entry, cf_test_control, as SQLite's sqlite3_test_control: `run` asks
 * it at a few fixed points what the test environment wants: to run the
 * plan on a world that injects faults (executor/fault.h), to corrupt an
 * element, a window size; `run` itself holds no test logic, and the
 * executor none. The variables
 * (tests/e2e only; deliberately not in ir/env.c's table of user knobs):
 *   COLLFUSE_TEST_FAIL=MODE:RANK:STEP  a rank fails (1) or vanishes (2) at
 *     schedule STEP of the first iteration, SIGKILLs itself at collective
 *     message STEP (3, worlds of processes: MPI, shm), or stalls in its first compute step from
 *     STEP on (4);
 *   COLLFUSE_TEST_MISMATCH=RANK:COLL:FIELD  one rank's descriptor of one
 *     collective differs (count, dtype, reduction, root);
 *   COLLFUSE_TEST_CORRUPT=RANK:INDEX:OUTPUT  adds 1 to one element of one
 *     rank's output after the run, before --verify looks at it;
 *   COLLFUSE_TEST_VERIFY_WINDOW=N  --verify's windows are N elements;
 *   COLLFUSE_TEST_SLOW=RANK:SECONDS[:quiet][:step=S]  one rank's first sign
 *     of life in the run (its first chunk of inputs) comes SECONDS late,
 *     beating meanwhile (a rank still at work), or with quiet silent (a
 *     rank stuck); with step=S that long phase comes at the top of schedule
 *     step S of the first iteration instead (its peers wait in that step's
 *     collective, some through others).
 */
#include "tools.h"

#include "../executor/fault.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct mismatch_hook {
  int rank, coll;
  char field[16];
} mismatch_hook;

static void mutate(void *user, int rank, cf_coll_desc *d, int index) {
  const mismatch_hook *h = user;
  if (rank != h->rank || index != h->coll) return;
  if (strcmp(h->field, "count") == 0) d->count *= 2;
  else if (strcmp(h->field, "dtype") == 0) d->dtype = d->dtype == CF_DT_FLOAT32 ? CF_DT_FLOAT16 : CF_DT_FLOAT32;
  else if (strcmp(h->field, "reduction") == 0) d->red = d->red == CF_RED_SUM ? CF_RED_MAX : CF_RED_SUM;
  else if (strcmp(h->field, "root") == 0) d->root = d->root == 0 ? 1 : 0;
}

/* The faults the environment asks for (the process's one run); NULL when
 * none. */
static const cf_faults *faults(void) {
  static mismatch_hook h;
  static cf_faults f;
  static int read, any;
  if (!read) {
    read = 1;
    const char *fail = getenv("COLLFUSE_TEST_FAIL"), *m = getenv("COLLFUSE_TEST_MISMATCH");
    const char *slow = getenv("COLLFUSE_TEST_SLOW");
    if (fail) any = sscanf(fail, "%d:%d:%d", &f.fail_mode, &f.fail_rank, &f.fail_step) > 0;
    int at = 0;
    if (slow && sscanf(slow, "%d:%lf%n", &f.slow_rank, &f.slow_s, &at) == 2 && f.slow_s > 0) {
      for (const char *o = strchr(slow + at, ':'); o; o = strchr(o + 1, ':')) {
        if (strncmp(o, ":quiet", 6) == 0) f.slow_quiet = true;
        if (sscanf(o, ":step=%d", &f.slow_step) == 1) f.slow_at_step = true;
      }
      any = 1;
    }
    if (m && sscanf(m, "%d:%d:%15s", &h.rank, &h.coll, h.field) == 3) {
      f.mutate = mutate;
      f.user = &h;
      any = 1;
    }
  }
  return any ? &f : NULL;
}

/* COLLFUSE_TEST_CORRUPT's element, when this process has it. */
static void corrupt_output(const cf_graph *ref_g, cf_tensor *got, int ranks, int n_ref) {
  const char *c = getenv("COLLFUSE_TEST_CORRUPT");
  int rank, at = 0;
  long long index;
  if (!c || sscanf(c, "%d:%lld:%n", &rank, &index, &at) != 2 || at == 0 || rank < 0 ||
      rank >= ranks)
    return;
  for (int i = 0, j = 0; i < ref_g->n_nodes; i++) {
    if (ref_g->nodes[i].op != CF_OP_OUTPUT) continue;
    cf_tensor *t = &got[(size_t)rank * (size_t)n_ref + (size_t)j++];
    if (strcmp(ref_g->nodes[i].name, c + at) != 0 || !t->data || index < 0 || index >= t->count)
      continue;
    if (cf_dtype_is_float(t->dtype))
      cf_store_f64(t->data, t->dtype, index, cf_load_f64(t->data, t->dtype, index) + 1);
    else
      cf_store_i64(t->data, t->dtype, index, cf_load_i64(t->data, t->dtype, index) + 1);
  }
}

int cf_test_control(cf_testctl op, ...) {
  va_list ap;
  va_start(ap, op);
  int r = 0;
  switch (op) {
  case CF_TESTCTL_RUN: { /* the run on a world that injects the faults */
    cf_context *ctx = va_arg(ap, cf_context *);
    cf_plan *p = va_arg(ap, cf_plan *);
    cf_world *w = va_arg(ap, cf_world *);
    const cf_inputs *in = va_arg(ap, const cf_inputs *);
    cf_run_result *res = va_arg(ap, cf_run_result *);
    cf_status *st = va_arg(ap, cf_status *);
    const cf_faults *f = faults();
    if (f) {
      *st = cf_fault_run(ctx, p, w, f, in, res);
      r = 1;
    }
    break;
  }
  case CF_TESTCTL_FAILED: { /* mode 2 on MPI: silent until the job is torn down */
    int me = va_arg(ap, int);
    double timeout = va_arg(ap, double);
    const cf_faults *f = faults();
    if (f && f->fail_mode == 2 && f->fail_rank == me) {
      fflush(stdout);
      sleep((unsigned)timeout + 30);
      _exit(EXIT_RUNTIME);
    }
    break;
  }
  case CF_TESTCTL_CORRUPT: {
    const cf_graph *g = va_arg(ap, const cf_graph *);
    cf_tensor *got = va_arg(ap, cf_tensor *);
    int ranks = va_arg(ap, int), n_ref = va_arg(ap, int);
    corrupt_output(g, got, ranks, n_ref);
    break;
  }
  case CF_TESTCTL_VERIFY_WINDOW: {
    const char *w = getenv("COLLFUSE_TEST_VERIFY_WINDOW");
    *va_arg(ap, int64_t *) = w ? atoll(w) : 0;
    break;
  }
  }
  va_end(ap);
  return r;
}
