/* fault.h - fault injection for tests: a world that wraps another world's
 * ranks (and a plan's device) and makes one rank fail, vanish, die, stall
 * or describe a collective differently. Built into test builds only
 * (COLLFUSE_TESTS: the library collfuse_fault); the tests and the driver's
 * one test-control entry (tools/testctl.c, cf_test_control) are its only
 * callers, so no production run carries a hook and exec.c's step loop has
 * no test branch.
 *
 * The wrapper sees what a rank does only through the contract (runtime.h):
 * exec.c asks its endpoint aborted() once at the top of every schedule
 * step, so the rank's (k+1)-th call is step k of the first iteration; every
 * collective message passes send()/recv() with its descriptor; every
 * compute step is one device compute() call naming the node; every sign
 * of life of a rank's threads is one beat() call.
 */
#ifndef COLLFUSE_EXECUTOR_FAULT_H
#define COLLFUSE_EXECUTOR_FAULT_H

#include "plan.h"

/* What to inject (all zero: nothing). */
typedef struct cf_faults {
  /* Called on a copy of each collective descriptor rank `rank` sends or
   * receives for plan collective `index` (and on a native call's), after
   * the fingerprint check, so a test can make one rank differ. */
  void (*mutate)(void *user, int rank, cf_coll_desc *d, int index);
  void *user;
  /* Rank fail_rank stops at schedule step fail_step of the first
   * iteration, either failing loudly (mode 1: "rank R failed at step S
   * (injected failure)", which stops everyone) or vanishing without a word
   * (mode 2: the others must notice by their timeout); or SIGKILLs its
   * process just before its (fail_step+1)-th collective message (mode 3,
   * a world of several processes only: MPI); or its first compute step
   * from fail_step on never returns (mode 4, on a host device: as BLAS
   * stuck in OpenBLAS's allocation retry; the run gives it up after its
   * timeout). Mode 0: off. */
  int fail_mode, fail_rank, fail_step;
  /* Rank slow_rank's first sign of life (cf_beat: its first chunk of
   * inputs, in a run) comes slow_s seconds late: meanwhile it beats every
   * 20 ms, as a rank busy with a long phase does (its peers wait for it),
   * or, with slow_quiet, not at all, as a rank stuck in one (its peers
   * time out naming it). Either ends early once the world aborts. slow_s
   * 0: off. With slow_at_step that long phase comes instead at the top of
   * schedule step slow_step of its first iteration (after the fingerprints
   * and the barrier: its peers wait for it in that step's collective, some
   * through a peer that waits for it, as in a ring). */
  int slow_rank;
  double slow_s;
  bool slow_quiet;
  bool slow_at_step;
  int slow_step;
} cf_faults;

/* Wrap world inner for runs of plan p: a world of the same ranks whose
 * endpoints inject f's faults (f and p must outlive it); inner stays its
 * owner's. Destroying the wrapper frees it alone (inner's endpoints get
 * back the contexts they had). Mode 4 also wraps p's device for good (the
 * plan then owns the wrapper; a plan whose device is wrapped already keeps
 * it). */
cf_status cf_fault_world(cf_context *ctx, cf_world *inner, cf_plan *p, const cf_faults *f,
                         cf_world **out);
/* cf_exec_run_world of p on world w (NULL: a threads world of p's ranks,
 * as cf_exec_run) wrapped by cf_fault_world with f. */
cf_status cf_fault_run(cf_context *ctx, cf_plan *p, cf_world *w, const cf_faults *f,
                       const cf_inputs *in, cf_run_result *res);

#endif /* COLLFUSE_EXECUTOR_FAULT_H */
