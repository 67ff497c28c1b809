/* api_mpi.c - cf_executable_run_rank under mpirun, or on the shm world:
 * one rank per process through the public API only (tests/e2e/mpi.sh runs
 * it with 2 and 4 processes, tests/e2e/shm.sh with the shm world).
 *
 *   mpirun -np N collfuse_api_mpi [mpi-native]
 *   COLLFUSE_RANK=R COLLFUSE_WORLD_SIZE=N collfuse_api_mpi shm   (N of them)
 *   API_RANK=R API_SIZE=N API_JOB=NAME collfuse_api_mpi shm-job  (N of them)
 *   COLLFUSE_RANK=R COLLFUSE_WORLD_SIZE=N collfuse_api_mpi shm-repeat
 *   COLLFUSE_RANK=R COLLFUSE_WORLD_SIZE=N collfuse_api_mpi shm-gap|shm-gap0|shm-gap-env
 *   mpirun -np N collfuse_api_mpi gap|gap0
 *   mpirun -np 4 collfuse_api_mpi groups
 *
 * shm sets the option backend to shm (the rank from the launcher's
 * variables); shm-job also the option job (rank and size explicit, no
 * launcher's variables: the size and rank checks below are then the
 * caller's word and are left out).
 *
 * The process learns its rank as a framework's launcher tells it
 * (OMPI_COMM_WORLD_RANK/SIZE); collfuse itself initializes MPI at the first
 * run_rank and finalizes it when that executable is destroyed. Checked:
 *  - a graph with fused gradient AllReduces (mean), an int32 AllReduce, an
 *    AllGather (concat) and MatMul -> ReduceScatter (fused into
 *    MatmulReduceScatter), run twice with the caller's buffers (guard bytes
 *    around every output): every output equals the exact expected value
 *    (the data are multiples of 1/8, so every sum is exact);
 *  - NULL inputs come from the seed as cf_executable_run makes them for
 *    this rank: the outputs equal the threads run's bitwise
 *    (deterministic);
 *  - an executable of another size and a wrong rank are CF_ERR_USAGE;
 *  - a graph that differs on one rank (a count) fails every rank with
 *    CF_ERR_RUNTIME naming both ranks, and the executable refuses more runs.
 * With "mpi-native" the same runs use MPI's own collectives.
 * shm-repeat (repeat_runs): one executable of a single AllReduce run many
 * times, its later runs with no plan checks and no barriers (a kept rank),
 * then runs started on a cf_runner while this thread waits; every result
 * exact. Then the last rank runs another executable, one every rank ran
 * once before, while the others run this one again: neither checks its
 * plan, and its AllReduce of another count meets theirs at the first
 * message; every rank fails with CF_ERR_RUNTIME, "cross-rank mismatch"
 * naming the last rank, within the timeout.
 * shm-gap (kept_vs_new; gap under mpirun): every rank runs one executable twice (kept, its
 * checks passed), then the last rank (shm-gap0: rank 0) runs it a third
 * time, with no checks, while the others start an executable of another
 * count, whose first run checks the job first: the kept run's first
 * message meets the new one's start-up exchange, and every rank fails with
 * CF_ERR_RUNTIME, "cross-rank mismatch" naming the odd rank and another
 * (not a timeout naming the rank each waits for). shm-gap-env: shm-gap
 * with torchrun's variables set before the new executable (COLLFUSE_JOB
 * unset, MASTER_PORT from API_PORT), as DDP sets them under mpirun: it
 * joins the world the first one joined, not a job of that other name.
 * groups (same_name_groups): three executables of the process, each an
 * AllReduce (sum, MPI's own: mpi-native) over a partitioned group of 4
 * ranks: "tp" over {0,1},{2,3}, then "tp" again over {0,2},{1,3}, then
 * "dp" over {0,1},{2,3}, all alive at once; each of random data against
 * the float64 sum over the rank's part (the MPI world is the process's:
 * the second must not reuse the first's communicators for its name).
 * Prints one line per
 * failure; exits 0 when all passed, 77 outside mpirun.
 */
#include <collfuse/collfuse.h>

#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { GRADS = 9, GUARD = 64, M = 16, K = 24, NN = 10, AGN = 5, IN = 33 };

static int me, R, fails;
static const char *algo = "auto";
static bool shm, shm_job; /* backend shm; with the option job */

#define FAIL(...)                                                                                  \
  do {                                                                                             \
    fails++;                                                                                       \
    fprintf(stderr, "api_mpi rank %d: FAIL line %d: ", me, __LINE__);                         \
    fprintf(stderr, __VA_ARGS__);                                                                  \
    fputc('\n', stderr);                                                                           \
  } while (0)

#define OK(ctx, expr)                                                                              \
  do {                                                                                             \
    if ((expr) != CF_OK) {                                                                         \
      FAIL("%s: %s", #expr, cf_context_errmsg(ctx));                                              \
      goto done;                                                                                   \
    }                                                                                              \
  } while (0)

static int64_t grad_len(int i) { return 100 + 77 * i; }

/* The value of element x of input k on rank r in call `call`: a multiple
 * of 1/8 in [-6, 6], different per rank, input and call. */
static double val(int call, int r, int k, int64_t x) {
  return (double)((r * 131 + k * 17 + x * 7 + call * 29) % 97) / 8.0 - 6.0;
}

static cf_status build(cf_context *ctx, int ranks, int grad0_extra, cf_graph **out) {
  cf_graph *g = NULL;
  cf_status st = cf_graph_create(ctx, "api_mpi", ranks, &g);
  for (int i = 0; i < GRADS && !st; i++) {
    char gn[16], an[16], on[16];
    int64_t d[1] = {grad_len(i) + (i == 0 ? grad0_extra : 0)};
    snprintf(gn, sizeof gn, "g%d", i);
    snprintf(an, sizeof an, "ar%d", i);
    snprintf(on, sizeof on, "o%d", i);
    st = cf_graph_add_input(g, gn, "float32", d, 1);
    if (!st) st = cf_graph_add_allreduce(g, an, gn, "mean", NULL, 1, -1);
    if (!st) st = cf_graph_add_output(g, on, an);
  }
  int64_t di[1] = {IN}, dag[2] = {3, AGN}, dx[2] = {(int64_t)M * ranks, K}, dw[2] = {K, NN};
  if (!st) st = cf_graph_add_input(g, "iv", "int32", di, 1);
  if (!st) st = cf_graph_add_allreduce(g, "iar", "iv", "sum", NULL, 0, -1);
  if (!st) st = cf_graph_add_output(g, "io", "iar");
  if (!st) st = cf_graph_add_input(g, "agv", "float32", dag, 2);
  if (!st) st = cf_graph_add_allgather(g, "ag", "agv", NULL, "concat");
  if (!st) st = cf_graph_add_output(g, "ago", "ag");
  if (!st) st = cf_graph_add_input(g, "x", "float32", dx, 2);
  if (!st) st = cf_graph_add_input(g, "w", "float32", dw, 2);
  if (!st) st = cf_graph_add_matmul(g, "mm", "x", "w");
  if (!st) st = cf_graph_add_reducescatter(g, "rs", "mm", "sum", NULL);
  if (!st) st = cf_graph_add_output(g, "rso", "rs");
  if (st) {
    cf_graph_destroy(g);
    return st;
  }
  *out = g;
  return CF_OK;
}

static cf_status make_options(cf_context *ctx, const char *a, bool timeout_short, cf_options **o) {
  cf_status st = cf_options_create(ctx, o);
  if (!st) st = cf_options_set(*o, "deterministic", strcmp(a, "mpi-native") ? "1" : "0");
  if (!st) st = cf_options_set(*o, "algo", a);
  if (!st) st = cf_options_set(*o, "seed", "11");
  if (!st && timeout_short) st = cf_options_set(*o, "timeout", "10");
  if (!st && shm) st = cf_options_set(*o, "backend", "shm");
  if (!st && shm_job) st = cf_options_set(*o, "job", getenv("API_JOB"));
  return st;
}

/* Input k's value for rank r, call c, as the graph's element type. */
static void fill(cf_executable *e, size_t k, int c, int r, void *buf) {
  size_t n = cf_executable_io_bytes(e, CF_IO_INPUT, k);
  if (strcmp(cf_executable_io_dtype(e, CF_IO_INPUT, k), "int32") == 0) {
    for (size_t x = 0; x < n / 4; x++) ((int32_t *)buf)[x] = (int32_t)(val(c, r, (int)k, (int64_t)x) * 8);
  } else {
    for (size_t x = 0; x < n / 4; x++) ((float *)buf)[x] = (float)val(c, r, (int)k, (int64_t)x);
  }
}

/* The expected element x of output name (the graph above) in call c. */
static double expect(cf_executable *e, const char *name, int c, int64_t x) {
  int ki;
  if (name[0] == 'o') { /* mean of gradient i */
    ki = cf_executable_io_find(e, CF_IO_INPUT, (char[]){'g', name[1], 0});
    double s = 0;
    for (int r = 0; r < R; r++) s += val(c, r, ki, x);
    return s / R;
  }
  if (strcmp(name, "io") == 0) {
    ki = cf_executable_io_find(e, CF_IO_INPUT, "iv");
    double s = 0;
    for (int r = 0; r < R; r++) s += val(c, r, ki, x) * 8;
    return s;
  }
  if (strcmp(name, "ago") == 0) { /* rank x / (3*AGN)'s block */
    ki = cf_executable_io_find(e, CF_IO_INPUT, "agv");
    return val(c, (int)(x / (3 * AGN)), ki, x % (3 * AGN));
  }
  /* rso: rows [me*M, me*M+M) of sum_r x_r @ w_r */
  int kx = cf_executable_io_find(e, CF_IO_INPUT, "x"), kw = cf_executable_io_find(e, CF_IO_INPUT, "w");
  int64_t i = me * M + x / NN, j = x % NN;
  double s = 0;
  for (int r = 0; r < R; r++)
    for (int t = 0; t < K; t++) s += val(c, r, kx, i * K + t) * val(c, r, kw, t * NN + j);
  return s;
}

/* Run the executable's rank `me` twice with the caller's data, checking
 * every output exactly and the guard bytes around it. */
static void run_checked(cf_context *ctx, cf_executable *e) {
  size_t ni = cf_executable_io_count(e, CF_IO_INPUT), no = cf_executable_io_count(e, CF_IO_OUTPUT);
  void **in = calloc(ni, sizeof *in);
  unsigned char **ob = calloc(no, sizeof *ob);
  void **out = calloc(no, sizeof *out);
  if (!in || !ob || !out) {
    FAIL("out of memory");
    goto done;
  }
  for (size_t k = 0; k < ni; k++)
    if (!(in[k] = malloc(cf_executable_io_bytes(e, CF_IO_INPUT, k)))) goto done;
  for (size_t j = 0; j < no; j++) {
    size_t bytes = cf_executable_io_bytes(e, CF_IO_OUTPUT, j);
    if (!(ob[j] = malloc(bytes + 2 * GUARD))) goto done;
    out[j] = ob[j] + GUARD;
  }
  for (int c = 0; c < 2; c++) {
    for (size_t k = 0; k < ni; k++) fill(e, k, c, me, in[k]);
    for (size_t j = 0; j < no; j++) memset(ob[j], 0xA5, cf_executable_io_bytes(e, CF_IO_OUTPUT, j) + 2 * GUARD);
    OK(ctx, cf_executable_run_rank(e, me, (const void *const *)in, out));
    for (size_t j = 0; j < no; j++) {
      const char *name = cf_executable_io_name(e, CF_IO_OUTPUT, j);
      size_t bytes = cf_executable_io_bytes(e, CF_IO_OUTPUT, j);
      for (int q = 0; q < GUARD; q++)
        if (ob[j][q] != 0xA5 || ob[j][GUARD + bytes + q] != 0xA5) {
          FAIL("call %d: output '%s': guard byte %d overwritten", c, name, q);
          break;
        }
      bool i32 = strcmp(cf_executable_io_dtype(e, CF_IO_OUTPUT, j), "int32") == 0;
      for (size_t x = 0; x < bytes / 4; x++) {
        double got = i32 ? ((int32_t *)out[j])[x] : ((float *)out[j])[x];
        double want = expect(e, name, c, (int64_t)x);
        if (got != (double)(float)want) {
          FAIL("call %d: output '%s'[%zu] = %.9g, expected %.9g", c, name, x, got, want);
          break;
        }
      }
    }
  }
  if (cf_executable_last_time_ms(e) <= 0) FAIL("no run time recorded");
done:
  for (size_t k = 0; in && k < ni; k++) free(in[k]);
  for (size_t j = 0; ob && j < no; j++) free(ob[j]);
  free(in);
  free(ob);
  free(out);
}

/* Bucket views on this rank: the executable's own bucket buffers bound,
 * every member input written into its view and passed as it, every member
 * output left in its view (NULL); the others are separate buffers. The
 * run makes `separate` (what a run with separate buffers made) minus one
 * copy per member, and the results are exact. */
static void run_views(cf_context *ctx, cf_graph *g, const cf_options *o, size_t separate) {
  cf_executable *e = NULL;
  size_t ni = 0, no = 0, members = 0;
  void **in = NULL, **out = NULL, **view = NULL;
  OK(ctx, cf_executable_create(g, o, &e));
  if (!e) return;
  ni = cf_executable_io_count(e, CF_IO_INPUT);
  no = cf_executable_io_count(e, CF_IO_OUTPUT);
  in = calloc(ni + 1, sizeof *in);
  out = calloc(no + 1, sizeof *out);
  view = calloc(no + 1, sizeof *view);
  if (!in || !out || !view) {
    FAIL("out of memory");
    goto done;
  }
  for (size_t b = 0; b < cf_executable_bucket_count(e); b++)
    for (int io = 0; io < 2; io++)
      OK(ctx, cf_executable_bucket_bind(e, me, b, (cf_io)io, NULL));
  for (size_t k = 0; k < ni; k++) {
    size_t off;
    int b = cf_executable_io_bucket(e, CF_IO_INPUT, k, &off);
    in[k] = b >= 0 ? (char *)cf_executable_bucket_buffer(e, me, (size_t)b, CF_IO_INPUT) + off
                   : malloc(cf_executable_io_bytes(e, CF_IO_INPUT, k));
    members += b >= 0;
    fill(e, k, 0, me, in[k]);
  }
  for (size_t j = 0; j < no; j++) {
    size_t off;
    int b = cf_executable_io_bucket(e, CF_IO_OUTPUT, j, &off);
    if (b >= 0)
      view[j] = (char *)cf_executable_bucket_buffer(e, me, (size_t)b, CF_IO_OUTPUT) + off;
    else
      out[j] = malloc(cf_executable_io_bytes(e, CF_IO_OUTPUT, j));
    members += b >= 0;
  }
  if (!members) FAIL("no input or output lies in a bucket");
  OK(ctx, cf_executable_run_rank(e, me, (const void *const *)in, out));
  size_t copies = cf_executable_last_copies(e, NULL);
  /* the shm world copies caller buckets into its own memory and back */
  if (!shm && copies != separate - members)
    FAIL("bucket views: %zu copies, expected %zu - %zu members", copies, separate, members);
  for (size_t j = 0; j < no; j++) {
    const char *name = cf_executable_io_name(e, CF_IO_OUTPUT, j);
    const void *p = view[j] ? view[j] : out[j];
    bool i32 = strcmp(cf_executable_io_dtype(e, CF_IO_OUTPUT, j), "int32") == 0;
    for (size_t x = 0; x < cf_executable_io_bytes(e, CF_IO_OUTPUT, j) / 4; x++) {
      double got = i32 ? ((const int32_t *)p)[x] : ((const float *)p)[x];
      double want = expect(e, name, 0, (int64_t)x);
      if (got != (double)(float)want) {
        FAIL("bucket views: output '%s'[%zu] = %.9g, expected %.9g", name, x, got, want);
        break;
      }
    }
  }
done:
  for (size_t k = 0; in && k < ni; k++)
    if (cf_executable_io_bucket(e, CF_IO_INPUT, k, NULL) < 0) free(in[k]);
  for (size_t j = 0; out && j < no; j++)
    free(out[j]);
  free(in);
  free(out);
  free(view);
  cf_executable_destroy(e);
}

/* NULL inputs: seeded data, the same as the threads run of ref (e itself,
 * or one of the same graph with collfuse's algorithms) makes for this rank. */
static void run_seeded(cf_context *ctx, cf_executable *e, cf_executable *ref) {
  size_t no = cf_executable_io_count(e, CF_IO_OUTPUT);
  void **mine = calloc(no, sizeof *mine), **all = calloc(no * (size_t)R, sizeof *all);
  if (!mine || !all) {
    FAIL("out of memory");
    goto done;
  }
  for (size_t j = 0; j < no; j++) {
    size_t bytes = cf_executable_io_bytes(e, CF_IO_OUTPUT, j);
    if (!(mine[j] = malloc(bytes))) goto done;
    for (int r = 0; r < R; r++)
      if (!(all[(size_t)r * no + j] = malloc(bytes))) goto done;
  }
  OK(ctx, cf_executable_run_rank(e, me, NULL, mine));
  OK(ctx, cf_executable_run(ref, NULL, all)); /* every rank in this process */
  for (size_t j = 0; j < no; j++) {
    size_t bytes = cf_executable_io_bytes(e, CF_IO_OUTPUT, j);
    bool exact = strcmp(algo, "mpi-native") != 0; /* MPI reduces in its own order */
    const float *a = mine[j], *b = all[(size_t)me * no + j];
    for (size_t x = 0; x < bytes / 4; x++)
      if (exact ? memcmp(&a[x], &b[x], 4) != 0
                : fabs((double)a[x] - (double)b[x]) > 1e-4 * (1 + fabs((double)b[x]))) {
        FAIL("seeded output '%s'[%zu]: MPI %.9g, threads %.9g",
             cf_executable_io_name(e, CF_IO_OUTPUT, j), x, (double)a[x], (double)b[x]);
        break;
      }
  }
done:
  for (size_t j = 0; mine && j < no; j++) free(mine[j]);
  for (size_t q = 0; all && q < no * (size_t)R; q++) free(all[q]);
  free(mine);
  free(all);
}

static bool has(const cf_context *ctx, const char *text) {
  return strstr(cf_context_errmsg(ctx), text) != NULL;
}

enum { REPEAT_N = 1000, REPEATS = 40, STARTED = 12 };

/* One AllReduce (sum) of REPEAT_N + extra float32 elements, compiled. */
static cf_status one_allreduce(cf_context *ctx, const cf_options *o, int extra, cf_graph **g,
                               cf_executable **e) {
  int64_t d[1] = {REPEAT_N + extra};
  cf_status st = cf_graph_create(ctx, "repeat", R, g);
  if (!st) st = cf_graph_add_input(*g, "x", "float32", d, 1);
  if (!st) st = cf_graph_add_allreduce(*g, "ar", "x", "sum", NULL, 0, -1);
  if (!st) st = cf_graph_add_output(*g, "y", "ar");
  if (!st) st = cf_executable_create(*g, o, e);
  return st;
}

/* Whether y holds the sum over the ranks of call c's inputs (exact). */
static bool summed(const float *y, int c) {
  for (int64_t x = 0; x < REPEAT_N; x++) {
    double want = 0;
    for (int r = 0; r < R; r++) want += val(c, r, 0, x);
    if ((double)y[x] != want) {
      FAIL("call %d: y[%lld] = %.9g, expected %.9g", c, (long long)x, (double)y[x], want);
      return false;
    }
  }
  return true;
}

typedef struct started {
  int calls;         /* done's calls */
  cf_status st;
  char message[256];
} started;

static void done_fn(void *user, cf_status st, const char *message) {
  started *s = user;
  s->calls++;
  s->st = st;
  snprintf(s->message, sizeof s->message, "%s", message ? message : "");
}

/* The two executables of repeat_runs and kept_vs_new, newest first. */
static void two_free(cf_options *o, cf_graph *g, cf_executable *e, cf_graph *g2, cf_executable *e2) {
  cf_executable_destroy(e2);
  cf_executable_destroy(e);
  cf_graph_destroy(g2);
  cf_graph_destroy(g);
  cf_options_destroy(o);
}

static void repeat_runs(cf_context *ctx) {
  cf_options *o = NULL;
  cf_graph *g = NULL, *g2 = NULL;
  cf_executable *e = NULL, *e2 = NULL;
  cf_runner *runner = NULL;
  float *in = malloc(sizeof *in * STARTED * REPEAT_N), *out = malloc(sizeof *out * STARTED * REPEAT_N);
  started s[STARTED];
  memset(s, 0, sizeof s);
  if (!in || !out) {
    FAIL("out of memory");
    goto done;
  }
  OK(ctx, make_options(ctx, "auto", true, &o));
  OK(ctx, one_allreduce(ctx, o, 0, &g, &e));
  /* every rank runs the other executable once: its plan checks passed */
  OK(ctx, one_allreduce(ctx, o, 8, &g2, &e2));
  OK(ctx, cf_executable_run_rank(e2, me, NULL, NULL));
  for (int c = 0; c < REPEATS; c++) { /* in place, as collfuse.distributed's all_reduce */
    for (int64_t x = 0; x < REPEAT_N; x++) in[x] = (float)val(c, me, 0, x);
    void *io[1] = {in};
    OK(ctx, cf_executable_run_rank(e, me, (const void *const *)io, io));
    if (!summed(in, c)) goto done;
  }
  OK(ctx, cf_runner_create(ctx, &runner));
  for (int k = 0; k < STARTED; k++) { /* all started before any is waited for */
    float *x = in + (size_t)k * REPEAT_N, *y = out + (size_t)k * REPEAT_N;
    for (int64_t i = 0; i < REPEAT_N; i++) x[i] = (float)val(REPEATS + k, me, 0, i);
    const void *ins[1] = {x};
    void *outs[1] = {y};
    OK(ctx, cf_executable_start_rank(e, runner, me, ins, outs, done_fn, &s[k]));
  }
  cf_runner_wait(runner);
  /* The last rank then runs the other executable: every rank fails, naming
   * it. Ranks meet at no barrier between runs, so a rank still finishing
   * the last started run (its final wait for its peers' releases) when a
   * faster one finds the mismatch fails that run with the mismatch instead. */
  char last[32];
  snprintf(last, sizeof last, "rank %d", R - 1);
  bool seen = false; /* the mismatch, as this rank's first failure */
  for (int k = 0; k < STARTED; k++) {
    if (s[k].calls != 1) {
      FAIL("started run %d: done called %d times", k, s[k].calls);
    } else if (s[k].st != CF_OK) {
      seen = k == STARTED - 1 && s[k].st == CF_ERR_RUNTIME && strstr(s[k].message, "cross-rank mismatch") &&
             strstr(s[k].message, last);
      if (!seen) FAIL("started run %d: status %d: %s", k, s[k].st, s[k].message);
    } else if (!summed(out + (size_t)k * REPEAT_N, REPEATS + k)) {
      break;
    }
  }
  cf_status st = cf_executable_run_rank(me == R - 1 ? e2 : e, me, NULL, NULL);
  if (getenv("API_MPI_SHOW")) fprintf(stderr, "rank %d: %s\n", me, cf_context_errmsg(ctx));
  if (st != CF_ERR_RUNTIME || !(seen ? has(ctx, "failed and stopped the job's ranks")
                                     : has(ctx, "cross-rank mismatch") && has(ctx, last)))
    FAIL("mismatch after %d runs: status %d: %s", REPEATS + STARTED, st, cf_context_errmsg(ctx));
done:
  cf_runner_destroy(runner);
  two_free(o, g, e, g2, e2);
  free(in);
  free(out);
}

/* Whether ctx's message is a cross-rank mismatch naming rank odd and
 * another ("rank N" followed by no digit). */
static bool mismatch_named(const cf_context *ctx, int odd) {
  int named = 0, odd_named = 0;
  for (int r = 0; r < R; r++) {
    char x[32];
    int len = snprintf(x, sizeof x, "rank %d", r);
    for (const char *at = cf_context_errmsg(ctx); (at = strstr(at, x)) != NULL; at += len)
      if (at[len] < '0' || at[len] > '9') {
        named++;
        odd_named += r == odd;
        break;
      }
  }
  return has(ctx, "cross-rank mismatch") && odd_named && named >= 2;
}

static void kept_vs_new(cf_context *ctx, int odd, bool reread) {
  cf_options *o = NULL;
  cf_graph *g = NULL, *g2 = NULL;
  cf_executable *e = NULL, *e2 = NULL;
  float *in = malloc(sizeof *in * (REPEAT_N + 8));
  bool seen = false; /* the mismatch, found by a faster rank while this one still ran e */
  if (!in) {
    FAIL("out of memory");
    goto done;
  }
  OK(ctx, make_options(ctx, "auto", true, &o));
  OK(ctx, one_allreduce(ctx, o, 0, &g, &e));
  void *io[1] = {in};
  for (int c = 0; c < 2 && !seen; c++) {
    for (int64_t x = 0; x < REPEAT_N; x++) in[x] = (float)val(c, me, 0, x);
    cf_status st = cf_executable_run_rank(e, me, (const void *const *)io, io);
    /* no barrier after a kept run: a fast rank may start the next while
     * this one still ends its second, which then fails with the mismatch */
    seen = c == 1 && st == CF_ERR_RUNTIME && mismatch_named(ctx, odd);
    if (st != CF_OK && !seen) {
      FAIL("run %d of the kept executable: status %d: %s", c, st, cf_context_errmsg(ctx));
      goto done;
    }
    if (!seen && !summed(in, c)) goto done;
  }
  if (reread) { /* as DDP under mpirun: torchrun's variables, which come first, name another job */
    char v[16];
    unsetenv("COLLFUSE_JOB");
    snprintf(v, sizeof v, "%d", me);
    setenv("RANK", v, 1);
    snprintf(v, sizeof v, "%d", R);
    setenv("WORLD_SIZE", v, 1);
    setenv("MASTER_ADDR", "127.0.0.1", 1);
    setenv("MASTER_PORT", getenv("API_PORT") ? getenv("API_PORT") : "29500", 1);
  }
  if (me != odd) OK(ctx, one_allreduce(ctx, o, 8, &g2, &e2)); /* new: its start-up checks the job */
  for (int64_t x = 0; x < REPEAT_N + 8; x++) in[x] = (float)val(2, me, 0, x);
  cf_status st = cf_executable_run_rank(me == odd ? e : e2, me, (const void *const *)io, io);
  if (getenv("API_MPI_SHOW")) fprintf(stderr, "rank %d: %s\n", me, cf_context_errmsg(ctx));
  if (st != CF_ERR_RUNTIME || !(seen || mismatch_named(ctx, odd))) /* seen: the world has stopped */
    FAIL("rank %d repeats a kept executable while the others start a new one: status %d: %s", odd, st,
         cf_context_errmsg(ctx));
done:
  two_free(o, g, e, g2, e2);
  free(in);
}

/* Random in [-1, 1) for element x of rank r in case c (splitmix64). */
static double rnd(int c, int r, int64_t x) {
  uint64_t z = ((uint64_t)c << 48) ^ ((uint64_t)r << 40) ^ (uint64_t)x;
  z += UINT64_C(0x9e3779b97f4a7c15);
  z = (z ^ (z >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
  z = (z ^ (z >> 27)) * UINT64_C(0x94d049bb133111eb);
  z ^= z >> 31;
  return (double)(z >> 11) / 9007199254740992.0 * 2.0 - 1.0;
}

static void same_name_groups(cf_context *ctx) {
  enum { N = 1001, CASES = 3 };
  static const int parts[CASES][4] = {{0, 1, 2, 3}, {0, 2, 1, 3}, {0, 1, 2, 3}};
  static const char *const names[CASES] = {"tp", "tp", "dp"};
  cf_graph *g[CASES] = {0};
  cf_executable *e[CASES] = {0};
  cf_options *o = NULL;
  float *x = malloc(sizeof(float) * N), *y = malloc(sizeof(float) * N);
  if (R != 4) {
    FAIL("groups: run it with 4 processes, not %d", R);
    goto done;
  }
  if (!x || !y) goto done;
  OK(ctx, make_options(ctx, "mpi-native", false, &o));
  for (int k = 0; k < CASES; k++) {
    int64_t d[1] = {N};
    OK(ctx, cf_graph_create(ctx, "groups", R, &g[k]));
    OK(ctx, cf_graph_define_group_parts(g[k], names[k], parts[k], 2, 2));
    OK(ctx, cf_graph_add_input(g[k], "x", "float32", d, 1));
    OK(ctx, cf_graph_add_allreduce(g[k], "ar", "x", "sum", names[k], 0, -1));
    OK(ctx, cf_graph_add_output(g[k], "y", "ar"));
    OK(ctx, cf_executable_create(g[k], o, &e[k]));
    for (int64_t i = 0; i < N; i++) x[i] = (float)rnd(k, me, i);
    const void *in[1] = {x};
    void *out[1] = {y};
    OK(ctx, cf_executable_run_rank(e[k], me, in, out));
    const int *part = parts[k] + (parts[k][0] == me || parts[k][1] == me ? 0 : 2);
    int64_t bad = 0, first = -1;
    double want = 0;
    for (int64_t i = 0; i < N; i++) {
      double s = (double)(float)rnd(k, part[0], i) + (double)(float)rnd(k, part[1], i);
      if (fabs(y[i] - s) > 1e-6 * (1 + fabs(s)) && bad++ == 0) first = i, want = s;
    }
    if (bad)
      FAIL("group '%s' over {%d,%d},{%d,%d}: %lld of %d elements are not the sum over ranks %d and %d, "
           "first [%lld] = %g, want %g",
           names[k], parts[k][0], parts[k][1], parts[k][2], parts[k][3], (long long)bad, N, part[0], part[1],
           (long long)first, y[first], want);
  }
done:
  for (int k = CASES - 1; k >= 0; k--) {
    cf_executable_destroy(e[k]);
    cf_graph_destroy(g[k]);
  }
  cf_options_destroy(o);
  free(x);
  free(y);
}

int main(int argc, char **argv) {
  if (argc > 1) algo = argv[1];
  shm = strncmp(algo, "shm", 3) == 0;
  shm_job = strcmp(algo, "shm-job") == 0;
  const char *r = getenv(shm_job ? "API_RANK" : shm ? "COLLFUSE_RANK" : "OMPI_COMM_WORLD_RANK"),
             *n = getenv(shm_job ? "API_SIZE" : shm ? "COLLFUSE_WORLD_SIZE" : "OMPI_COMM_WORLD_SIZE");
  if (!r || !n || (shm_job && !getenv("API_JOB"))) {
    fprintf(stderr, "api_mpi: run it under mpirun (or with the shm variables): skipped\n");
    return 77;
  }
  me = atoi(r);
  R = atoi(n);
  bool repeat = strcmp(algo, "shm-repeat") == 0;
  int gap = strcmp(algo, "shm-gap") == 0 || strcmp(algo, "gap") == 0 ||
                    strcmp(algo, "shm-gap-env") == 0
                ? R - 1
            : strcmp(algo, "shm-gap0") == 0 || strcmp(algo, "gap0") == 0 ? 0
                                                                         : -1;
  bool reread = strstr(algo, "-env") != NULL;
  if (shm) algo = "auto";
  cf_context *ctx = NULL;
  cf_graph *g = NULL, *g2 = NULL, *g3 = NULL;
  cf_options *o = NULL;
  cf_executable *e = NULL, *e2 = NULL, *e3 = NULL;
  if (cf_context_create(&ctx) != CF_OK) return 1;
  if (repeat) {
    repeat_runs(ctx);
    goto done;
  }
  if (gap >= 0) {
    kept_vs_new(ctx, gap, reread);
    goto done;
  }
  if (strcmp(algo, "groups") == 0) {
    same_name_groups(ctx);
    goto done;
  }
  OK(ctx, build(ctx, R, 0, &g));
  OK(ctx, make_options(ctx, algo, false, &o));
  size_t before = cf_graph_collective_count(g);
  OK(ctx, cf_graph_run_pipeline(g, "default", o));
  if (cf_graph_collective_count(g) >= before) FAIL("nothing fused (%zu collectives)", before);
  OK(ctx, cf_executable_create(g, o, &e));
  if (cf_executable_ranks(e) != R) FAIL("executable has %d ranks", cf_executable_ranks(e));
  run_checked(ctx, e); /* joins the job: MPI initialized here */
  run_views(ctx, g, o, cf_executable_last_copies(e, NULL));
  if (strcmp(algo, "mpi-native") == 0) { /* the threads transport has no MPI_Allreduce */
    cf_options *oa = NULL;
    cf_status st = make_options(ctx, "auto", false, &oa);
    if (!st) st = cf_executable_create(g, oa, &e2);
    cf_options_destroy(oa);
    OK(ctx, st);
  }
  run_seeded(ctx, e, e2 ? e2 : e);
  cf_executable_destroy(e2);
  e2 = NULL;

  /* usage errors: the job's size, the process's rank */
  if (shm_job) goto mismatch;
  OK(ctx, build(ctx, R + 1, 0, &g2));
  OK(ctx, cf_executable_create(g2, o, &e2));
  if (cf_executable_run_rank(e2, me, NULL, NULL) != CF_ERR_USAGE ||
      !has(ctx, shm ? "this shm job has" : "this MPI job has"))
    FAIL("size mismatch: %s", cf_context_errmsg(ctx));
  cf_executable_destroy(e2);
  e2 = NULL;
  OK(ctx, cf_executable_create(g, o, &e2));
  if (cf_executable_run_rank(e2, (me + 1) % R, NULL, NULL) != CF_ERR_USAGE ||
      !has(ctx, "this process is rank"))
    FAIL("wrong rank: %s", cf_context_errmsg(ctx));
  cf_executable_destroy(e2);
  e2 = NULL;

mismatch:
  /* a graph that differs on the last rank: every rank fails, none hangs */
  if (strcmp(algo, "mpi-native") != 0) {
    cf_options *os = NULL;
    OK(ctx, make_options(ctx, algo, true, &os));
    cf_status st = build(ctx, R, me == R - 1 ? 8 : 0, &g3);
    if (!st) st = cf_graph_run_pipeline(g3, "O0", os);
    if (!st) st = cf_executable_create(g3, os, &e3);
    cf_options_destroy(os);
    OK(ctx, st);
    st = cf_executable_run_rank(e3, me, NULL, NULL);
    if (getenv("API_MPI_SHOW")) fprintf(stderr, "rank %d: %s\n", me, cf_context_errmsg(ctx));
    char last[32];
    snprintf(last, sizeof last, "rank %d", R - 1);
    if (st != CF_ERR_RUNTIME || !has(ctx, "cross-rank mismatch") || !has(ctx, last))
      FAIL("mismatch: status %d: %s", st, cf_context_errmsg(ctx));
    if (cf_executable_run_rank(e3, me, NULL, NULL) != CF_ERR_RUNTIME || !has(ctx, "destroy it"))
      FAIL("run after a failure: %s", cf_context_errmsg(ctx));
  }
done:
  cf_executable_destroy(e3);
  cf_executable_destroy(e2);
  cf_executable_destroy(e); /* MPI_Finalize: collfuse initialized it */
  cf_options_destroy(o);
  cf_graph_destroy(g3);
  cf_graph_destroy(g2);
  cf_graph_destroy(g);
  cf_context_destroy(ctx);
  if (!fails) printf("api_mpi rank %d of %d (%s): ok\n", me, R, algo);
  return fails ? 1 : 0;
}
