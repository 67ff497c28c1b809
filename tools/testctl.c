/* testctl.c - the driver's fault injection, in test builds only
 * (COLLFUSE_TESTS; a build without tests links testctl_off.c instead, so an
 * installed package ignores these variables).
 *
 * One entry, cf_test_control, as SQLite's sqlite3_test_control: `run` asks
 * it at a few fixed points what the test environment wants, and the
 * answers are plain data (cf_run_hooks for the executor, an element to
 * corrupt, a window size); `run` itself holds no test logic. The variables
 * (tests/e2e only; deliberately not in ir/env.c's table of user knobs):
 *   COLLFUSE_TEST_FAIL=MODE:RANK:STEP  a rank fails (1) or vanishes (2) at
 *     schedule STEP of the first iteration, SIGKILLs itself at collective
 *     message STEP (3, MPI and shm only), or stalls in its first compute step from
 *     STEP on (4);
 *   COLLFUSE_TEST_MISMATCH=RANK:COLL:FIELD  one rank's descriptor of one
 *     collective differs (count, dtype, reduction, root);
 *   COLLFUSE_TEST_CORRUPT=RANK:INDEX:OUTPUT  adds 1 to one element of one
 *     rank's output after the run, before --verify looks at it;
 *   COLLFUSE_TEST_VERIFY_WINDOW=N  --verify's windows are N elements.
 */
#include "tools.h"

#include "../executor/plan.h"
#include "../executor/transports/transports.h"

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

/* The hooks the environment asks for into *o; 1 when any. */
static int run_hooks(cf_run_hooks *o) {
  static mismatch_hook h; /* the process's one run */
  const char *f = getenv("COLLFUSE_TEST_FAIL"), *m = getenv("COLLFUSE_TEST_MISMATCH");
  if (f) sscanf(f, "%d:%d:%d", &o->fail_mode, &o->fail_rank, &o->fail_step);
  if (m && sscanf(m, "%d:%d:%15s", &h.rank, &h.coll, h.field) == 3) {
    o->mutate = mutate;
    o->user = &h;
  }
  return f || o->mutate;
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
  case CF_TESTCTL_RUN_HOOKS: r = run_hooks(va_arg(ap, cf_run_hooks *)); break;
  case CF_TESTCTL_JOINED: { /* mode 3: this process SIGKILLs itself at message STEP */
    cf_run_hooks *h = va_arg(ap, cf_run_hooks *);
    cf_world *w = va_arg(ap, cf_world *);
    int me = va_arg(ap, int);
    if (w && h->fail_mode == 3 && h->fail_rank == me) {
      cf_mpi_test_kill(w, h->fail_step);
      cf_shm_test_kill(w, h->fail_step);
    }
    if (h->fail_mode == 3) h->fail_mode = 0; /* MPI and shm only, and not exec.c's */
    break;
  }
  case CF_TESTCTL_FAILED: { /* mode 2 on MPI: silent until the job is torn down */
    const cf_run_hooks *h = va_arg(ap, const cf_run_hooks *);
    int me = va_arg(ap, int);
    double timeout = va_arg(ap, double);
    if (h->fail_mode == 2 && h->fail_rank == me) {
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
