/* bench_reduce.c - `collfuse bench reduce`: collfuse's JIT reduction
 * kernels side by side with their peers (bench/README.md).
 *
 * For float32, float16, bfloat16 and int8, sum and max, 2 and 8 sources, at
 * 256 KiB (in cache) and 64 MiB (DRAM) per buffer, one row holds:
 *   collfuse n-ary  dst = op(src0..srcK-1), one out-of-place pass
 *   collfuse acc    dst = op(dst, src), K-1 calls fold K sources in place
 *   C loop          the n-ary form as a plain loop built -O3 -march=native
 *   MPI             MPI_Reduce_local(in, inout), in place like acc, K-1 calls
 *   memcpy          the memory-bound reference
 * GB/s counts every byte read and written (1 GB = 1e9 B): n-ary and C loop
 * (K+1)*size per call, acc and MPI 3*(K-1)*size per K-1 calls, memcpy
 * 2*size. The ratios set like against like: acc against MPI (both in
 * place), n-ary against the C loop (both out of place), and each kernel
 * against memcpy's rate, the rate of a kernel that only moves its bytes.
 *
 * --dtypes, --ops and --sources pick rows (to rerun the ones that matter
 * on a quiet machine); --sources takes any of 2..8.
 *
 * Every cell is the median of >= 5 samples and >= 50 ms in all; a sample
 * repeats the call often enough to last about 1 ms, so in-cache sizes are
 * not timer noise. Sources hold random nonzero data; every kernel's result
 * is checked against the C loop once before it is timed (int8 exactly,
 * floats within 1e-5 or, for 16-bit floats, 1e-2 of the sum of the
 * sources' magnitudes; see check() for the in-place folds), and a row whose
 * kernel disagrees is an error.
 *
 * MPI runs in a child process: MPI_Init may abort the process it runs in,
 * and OpenMPI's allocations would be reported as leaks under LeakSanitizer.
 * The child starts before anything else (no JIT state is forked), gets one
 * request per row over a pipe, fills the same data, checks its own result
 * against the same C loop, and times MPI_Reduce_local while the parent
 * waits, so the columns are measured one after another on the same
 * machine, never at the same time. When MPI cannot start, the column reads
 * n/a with the reason.
 */
#include "tools.h"

#include "../bench/bench.h"
#include "../codegen/codegen.h"
#include "../executor/executor.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <poll.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* ---------------- what is measured ---------------- */

typedef struct dtype_info {
  cf_dtype dt;
  cf_bench_dtype bdt;
  int size;
  double rtol; /* of the sum of the sources' magnitudes; 0: exact */
  double unit; /* unit roundoff, 2^-(mantissa bits + 1) */
} dtype_info;

static const dtype_info dtypes[] = {
    {CF_DT_FLOAT32, CF_BENCH_F32, 4, 1e-5, 0x1p-24},
    {CF_DT_FLOAT16, CF_BENCH_F16, 2, 1e-2, 0x1p-11},
    {CF_DT_BFLOAT16, CF_BENCH_BF16, 2, 1e-2, 0x1p-8},
    {CF_DT_INT8, CF_BENCH_I8, 1, 0, 0},
};
enum { N_DTYPES = sizeof dtypes / sizeof dtypes[0] };
static const cf_reduction ops[] = {CF_RED_SUM, CF_RED_MAX};
enum { MAX_K = 8, MAX_SIZES = 8, N_OPS = 2 };

typedef struct options {
  int64_t sizes[MAX_SIZES];
  int n_sizes;
  bool dtype[N_DTYPES]; /* rows of these dtypes (index into dtypes[]) */
  bool op[N_OPS];       /* and of these reductions (index into ops[]) */
  int ks[MAX_K];        /* and these numbers of sources */
  int n_ks;
  int min_reps;  /* samples per cell, at least */
  double min_ms; /* time per cell, at least */
  int64_t max_memory; /* 0: what the machine has available */
  bool json;
} options;

static void size_text(int64_t b, char *buf, size_t len) {
  if (b >= (1 << 30) && b % (1 << 30) == 0)
    snprintf(buf, len, "%lld GiB", (long long)(b >> 30));
  else if (b >= (1 << 20) && b % (1 << 20) == 0)
    snprintf(buf, len, "%lld MiB", (long long)(b >> 20));
  else if (b >= 1024 && b % 1024 == 0)
    snprintf(buf, len, "%lld KiB", (long long)(b >> 10));
  else
    snprintf(buf, len, "%lld B", (long long)b);
}

/* ---------------- buffers and data ---------------- */

/* K sources, the destination, the C loop's reference and a scratch buffer
 * for the in-place forms, for one dtype and size. */
typedef struct buffers {
  const dtype_info *d;
  int64_t bytes, n;
  void *src[MAX_K], *dst, *ref;
} buffers;

static void buffers_free(buffers *b) {
  for (int j = 0; j < MAX_K; j++)
    free(b->src[j]);
  free(b->dst);
  free(b->ref);
  memset(b, 0, sizeof *b);
}

static uint64_t splitmix(uint64_t *s) {
  uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

/* Random nonzero values: floats +-[1, 2) (exact in every format, never
 * subnormal), int8 in -15..15 so that no sum of 8 overflows (OpenMPI's
 * int8 sum saturates where collfuse and the C loop wrap). The same seed
 * gives the same data in the parent and the MPI child. */
static void fill(const dtype_info *d, void *p, int64_t n, uint64_t seed) {
  uint64_t s = seed;
  for (int64_t i = 0; i < n; i++) {
    uint64_t r = splitmix(&s);
    switch (d->bdt) {
    case CF_BENCH_F32:
      ((uint32_t *)p)[i] = (uint32_t)((r >> 63) << 31 | 127u << 23 | (r & 0x7fffff));
      break;
    case CF_BENCH_F16:
      ((uint16_t *)p)[i] = (uint16_t)((r >> 63) << 15 | 15u << 10 | (r & 0x3ff));
      break;
    case CF_BENCH_BF16:
      ((uint16_t *)p)[i] = (uint16_t)((r >> 63) << 15 | 127u << 7 | (r & 0x7f));
      break;
    case CF_BENCH_I8: {
      int v = (int)(r % 30) - 15; /* -15..14, then 0 -> 15 */
      ((int8_t *)p)[i] = (int8_t)(v ? v : 15);
      break;
    }
    }
  }
}

static bool buffers_get(buffers *b, const dtype_info *d, int64_t bytes) {
  if (b->d == d && b->bytes == bytes) return true;
  buffers_free(b);
  b->d = d;
  b->bytes = bytes;
  b->n = bytes / d->size;
  size_t sz = (size_t)bytes;
  for (int j = 0; j < MAX_K; j++) {
    if (posix_memalign(&b->src[j], 64, sz)) return buffers_free(b), false;
    fill(d, b->src[j], b->n, 0x5eed0000ull + (uint64_t)d->bdt * 64 + (uint64_t)j);
  }
  if (posix_memalign(&b->dst, 64, sz) || posix_memalign(&b->ref, 64, sz))
    return buffers_free(b), false;
  memset(b->dst, 0, sz); /* fault the pages in before anything is timed */
  memset(b->ref, 0, sz);
  return true;
}

static double value(const dtype_info *d, const void *p, int64_t i) {
  switch (d->bdt) {
  case CF_BENCH_F32: return ((const float *)p)[i];
  case CF_BENCH_F16: return cf_f16_to_f32(((const uint16_t *)p)[i]);
  case CF_BENCH_BF16: return cf_bf16_to_f32(((const uint16_t *)p)[i]);
  case CF_BENCH_I8: return ((const int8_t *)p)[i];
  }
  return 0;
}

/* got against the C loop's reference; false with the first difference.
 * The C loop rounds once; a fold of K sources by K-1 in-place calls rounds
 * after every call, so its bound grows to K unit roundoffs where that is
 * more (bfloat16 with 8 sources). */
static bool check(const buffers *b, int k, bool fold, const void *got, const char *what, char *why,
                  size_t len) {
  const dtype_info *d = b->d;
  double rtol = fold && k * d->unit > d->rtol ? k * d->unit : d->rtol;
  for (int64_t i = 0; i < b->n; i++) {
    double g = value(d, got, i), r = value(d, b->ref, i);
    if (g == r) continue;
    double mag = 0;
    for (int j = 0; j < k; j++)
      mag += fabs(value(d, b->src[j], i));
    if (rtol > 0 && fabs(g - r) <= rtol * mag) continue;
    snprintf(why, len, "%s differs from the C loop at element %lld: %.9g, expected %.9g", what,
             (long long)i, g, r);
    return false;
  }
  return true;
}

/* ---------------- timing ---------------- */

typedef struct job {
  buffers *b;
  int k;
  cf_bench_op op;
  void *nary;  /* a cf_kernel_nary_fn, or a cf_kernel_nary_to_fn when stream */
  bool stream; /* its key streams: it takes an array of (one) destination */
  cf_kernel_acc_fn acc;
  bool failed; /* MPI: a call failed */
  char why[256];
} job;

/* POSIX: object and function pointers share a representation */
static void run_nary(job *j) {
  const void *const *src = (const void *const *)j->b->src;
  if (j->stream) {
    void *dst[1] = {j->b->dst};
    cf_kernel_nary_to_fn f;
    memcpy(&f, &j->nary, sizeof f);
    f(dst, src, j->b->n, j->k);
    return;
  }
  cf_kernel_nary_fn f;
  memcpy(&f, &j->nary, sizeof f);
  f(j->b->dst, src, j->b->n, j->k);
}

static void run_acc(job *j) {
  for (int s = 1; s < j->k; s++)
    j->acc(j->b->dst, j->b->src[s], j->b->n);
}

static void run_cloop(job *j) {
  cf_cloop_nary(j->b->d->bdt, j->op, j->b->dst, (const void *const *)j->b->src, j->k, j->b->n);
}

static void run_memcpy(job *j) { memcpy(j->b->dst, j->b->src[0], (size_t)j->b->bytes); }

static void run_mpi(job *j) {
  for (int s = 1; s < j->k && !j->failed; s++)
    if (!cf_mpi_reduce_local(j->b->src[s], j->b->dst, j->b->n, j->b->d->bdt, j->op, j->why,
                             sizeof j->why))
      j->failed = true;
}

/* Median seconds of one call of fn (module comment); 0 when out of memory. */
static double median_s(void (*fn)(job *), job *j, int min_reps, double min_ms) {
  enum { MAX_SAMPLES = 2000 };
  double *t = malloc(MAX_SAMPLES * sizeof *t);
  if (!t) return 0;
  fn(j); /* warm up: caches, TLB */
  double t0 = cf_now();
  fn(j);
  double one = cf_now() - t0;
  long inner = 1;
  if (min_ms > 0 && one < 1e-3) inner = one > 1e-8 ? (long)(1e-3 / one) + 1 : 100000;
  int ns = 0;
  double total = 0;
  while (ns < MAX_SAMPLES && (ns < min_reps || total * 1e3 < min_ms)) {
    t0 = cf_now();
    for (long r = 0; r < inner; r++)
      fn(j);
    double dt = cf_now() - t0;
    total += dt;
    t[ns++] = dt / (double)inner;
  }
  double m = cf_bench_median(t, ns);
  free(t);
  return m;
}

/* ---------------- the MPI peer process ---------------- */

typedef struct mpi_req {
  int dtype; /* index into dtypes[] */
  int op;    /* cf_bench_op */
  int k;
  int min_reps;
  int64_t bytes;
  double min_ms;
} mpi_req;

typedef struct mpi_rep {
  int ok;
  double seconds; /* median of K-1 calls */
  char why[256];
} mpi_rep;

typedef struct mpi_hello {
  int ok;
  int int8_sum_saturates;
  char version[160];
  char why[256];
} mpi_hello;

typedef struct mpi_peer {
  pid_t pid;
  int req, rep; /* pipe ends: requests out, replies in */
  FILE *err;    /* the child's stdout and stderr */
  bool up;
  char version[160];
  char short_version[160]; /* up to the first comma: "Open MPI v4.1.4" */
  char why[320];           /* why the column is n/a */
  bool int8_sum_saturates;
} mpi_peer;


/* Read n bytes, waiting at most timeout_s for the first. */
static bool read_all(int fd, void *p, size_t n, int timeout_s) {
  char *c = p;
  while (n) {
    struct pollfd pfd = {.fd = fd, .events = POLLIN};
    int r = poll(&pfd, 1, timeout_s * 1000);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return false;
    ssize_t got = read(fd, c, n);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) return false;
    c += got;
    n -= (size_t)got;
  }
  return true;
}

/* Whether OpenMPI's int8 MPI_SUM saturates: 100 + 100 over a full vector. */
static bool probe_int8_saturation(void) {
  int8_t in[256], io[256];
  char why[64];
  memset(in, 100, sizeof in);
  memset(io, 100, sizeof io);
  return cf_mpi_reduce_local(in, io, 256, CF_BENCH_I8, CF_BENCH_SUM, why, sizeof why) &&
         io[0] == 127;
}

static void mpi_serve(int req_fd, int rep_fd) {
  buffers b = {0};
  mpi_req q;
  while (read_all(req_fd, &q, sizeof q, 24 * 3600)) {
    mpi_rep r = {0};
    const dtype_info *d = &dtypes[q.dtype];
    job j = {.b = &b, .k = q.k, .op = (cf_bench_op)q.op};
    if (!buffers_get(&b, d, q.bytes)) {
      snprintf(r.why, sizeof r.why, "out of memory");
    } else {
      cf_cloop_nary(d->bdt, j.op, b.ref, (const void *const *)b.src, q.k, b.n);
      memcpy(b.dst, b.src[0], (size_t)b.bytes);
      run_mpi(&j);
      if (j.failed)
        snprintf(r.why, sizeof r.why, "%s", j.why);
      else if (check(&b, q.k, true, b.dst, "MPI_Reduce_local", r.why, sizeof r.why)) {
        r.seconds = median_s(run_mpi, &j, q.min_reps, q.min_ms);
        r.ok = !j.failed && r.seconds > 0;
        if (j.failed) snprintf(r.why, sizeof r.why, "%s", j.why);
      }
    }
    if (!cf_write_all(rep_fd, &r, sizeof r)) break;
  }
  buffers_free(&b);
}

/* What the child printed, as the reason it failed: its first paragraph,
 * decoration (OpenMPI's "-----" rules) skipped, lines joined. */
static void child_reason(mpi_peer *p, const char *what, int status) {
  char text[240] = "", line[200];
  size_t len = 0;
  if (p->err) {
    rewind(p->err);
    while (len < sizeof text - 1 && fgets(line, sizeof line, p->err)) {
      line[strcspn(line, "\n")] = 0;
      char *t = line + strspn(line, " -*=\t");
      if (!*t && len) break; /* end of the first paragraph */
      if (*t) len += (size_t)snprintf(text + len, sizeof text - len, "%s%s", len ? " " : "", t);
    }
  }
  char st[64] = "";
  if (status >= 0 && WIFEXITED(status))
    snprintf(st, sizeof st, " (exit status %d)", WEXITSTATUS(status));
  else if (status >= 0 && WIFSIGNALED(status))
    snprintf(st, sizeof st, " (signal %d)", WTERMSIG(status));
  snprintf(p->why, sizeof p->why, "%s%s%s%s", what, st, text[0] ? ": " : "", text);
}

/* Close the pipes (the child sees EOF, finalizes and exits), give it
 * wait_s seconds, then kill it. Returns its wait status, -1 if killed or
 * never started. */
static int mpi_stop(mpi_peer *p, int wait_s) {
  if (p->req >= 0) close(p->req);
  if (p->rep >= 0) close(p->rep);
  p->req = p->rep = -1;
  p->up = false;
  if (p->pid <= 0) return -1;
  int status = -1;
  pid_t done = 0;
  struct timespec tick = {0, 100 * 1000 * 1000};
  for (int i = 0; i <= wait_s * 10 && (done = waitpid(p->pid, &status, WNOHANG)) == 0; i++)
    if (i < wait_s * 10) nanosleep(&tick, NULL);
  if (done == 0) {
    kill(p->pid, SIGKILL);
    waitpid(p->pid, NULL, 0);
    status = -1;
  }
  p->pid = 0;
  return status;
}

static void mpi_start(mpi_peer *p) {
  int rq[2], rp[2];
  memset(p, 0, sizeof *p);
  p->req = p->rep = -1;
  p->err = tmpfile();
  if (!p->err || pipe(rq)) {
    snprintf(p->why, sizeof p->why, "cannot start the MPI process: %s", strerror(errno));
    return;
  }
  if (pipe(rp)) {
    snprintf(p->why, sizeof p->why, "cannot start the MPI process: %s", strerror(errno));
    close(rq[0]);
    close(rq[1]);
    return;
  }
  fflush(NULL);
  pid_t pid = fork();
  if (pid == 0) {
    close(rq[1]);
    close(rp[0]);
    dup2(fileno(p->err), STDOUT_FILENO); /* keep stdout one JSON object */
    dup2(fileno(p->err), STDERR_FILENO);
    mpi_hello h = {0};
    h.ok = cf_mpi_init(h.why, sizeof h.why);
    if (h.ok) {
      cf_mpi_version(h.version, sizeof h.version);
      h.int8_sum_saturates = probe_int8_saturation();
    }
    if (cf_write_all(rp[1], &h, sizeof h) && h.ok) mpi_serve(rq[0], rp[1]);
    if (h.ok) cf_mpi_finalize();
    _exit(h.ok ? 0 : 1); /* no atexit handlers: MPI's state is not ours to check */
  }
  close(rq[0]);
  close(rp[1]);
  if (pid < 0) {
    snprintf(p->why, sizeof p->why, "cannot start the MPI process: %s", strerror(errno));
    close(rq[1]);
    close(rp[0]);
    return;
  }
  p->pid = pid;
  p->req = rq[1];
  p->rep = rp[0];
  mpi_hello h;
  if (!read_all(p->rep, &h, sizeof h, 60)) {
    /* EOF: MPI_Init ended the process; a timeout: it hangs */
    int status = mpi_stop(p, 1);
    child_reason(p,
                 status >= 0 ? "MPI_Init ended the process" : "MPI_Init did not finish within 60 s",
                 status);
    return;
  }
  if (!h.ok) {
    snprintf(p->why, sizeof p->why, "%s", h.why);
    mpi_stop(p, 10);
    return;
  }
  p->up = true;
  snprintf(p->version, sizeof p->version, "%s", h.version);
  snprintf(p->short_version, sizeof p->short_version, "%.*s", (int)strcspn(h.version, ","),
           h.version);
  p->int8_sum_saturates = h.int8_sum_saturates;
}

/* Median seconds of MPI's K-1 calls for one row; 0 with p->why or *why. */
static double mpi_measure(mpi_peer *p, int dtype, const job *j, const options *o, char *why,
                          size_t len) {
  if (!p->up) {
    snprintf(why, len, "%s", p->why);
    return 0;
  }
  if (!cf_mpi_supports(dtypes[dtype].bdt, j->op)) {
    snprintf(why, len, "MPI has no %s datatype", cf_dtype_name(dtypes[dtype].dt));
    return 0;
  }
  mpi_req q = {.dtype = dtype,
               .op = j->op,
               .k = j->k,
               .min_reps = o->min_reps,
               .bytes = j->b->bytes,
               .min_ms = o->min_ms};
  mpi_rep r;
  if (!cf_write_all(p->req, &q, sizeof q) || !read_all(p->rep, &r, sizeof r, 600)) {
    child_reason(p, "the MPI process failed", mpi_stop(p, 1));
    snprintf(why, len, "%s", p->why);
    return 0;
  }
  if (!r.ok) snprintf(why, len, "%s", r.why);
  return r.ok ? r.seconds : 0;
}

/* ---------------- rows ---------------- */

typedef struct row {
  int dtype, op, k;
  int64_t bytes;
  double nary, acc, cloop, mpi, memcpy; /* GB/s; 0 when not measured */
  char mpi_why[320];
  char error[320];
} row;

static double ratio(double a, double b) { return a > 0 && b > 0 ? a / b : 0; }

static void print_header(const options *o, const cf_codegen_target *host, const mpi_peer *mpi) {
  printf("collfuse bench reduce: GB/s counts every byte read and written (1 GB = 1e9 B);\n"
         "median of >= %d sample%s and >= %.0f ms per cell; host %s, %d-bit vectors\n",
         o->min_reps, cf_s(o->min_reps), o->min_ms, host->cpu, host->vector_bits);
  printf("  nary   collfuse n-ary, dst = op(src0..srcK-1): (K+1)*size per call\n"
         "  acc    collfuse accumulate, dst = op(dst, src), K-1 calls: 3*(K-1)*size\n"
         "  c_loop plain C n-ary loop, gcc %s -O3 -march=native: (K+1)*size\n"
         "  mpi    MPI_Reduce_local(in, inout) is in place (inout = inout op in), so it is set\n"
         "         against acc and called K-1 times for K sources: 3*(K-1)*size; %s\n"
         "  memcpy 2*size; nary/mem and acc/mem compare with this memory-bound rate\n",
         __VERSION__, mpi->up ? mpi->short_version : "n/a");
  if (!mpi->up) printf("         MPI is not available: %s\n", mpi->why);
  if (mpi->up && mpi->int8_sum_saturates)
    printf(
        "         note: this MPI's int8 MPI_SUM saturates (100+100 = 127) where collfuse and the\n"
        "         C loop wrap; the data keeps every sum in range\n");
  printf("%-8s %-3s %2s %8s | %7s %7s %7s %7s %7s | %7s %7s %8s %7s\n", "dtype", "op", "K", "size",
         "nary", "acc", "c_loop", "mpi", "memcpy", "acc/mpi", "nary/c", "nary/mem", "acc/mem");
}

/* v with fmt, or none when not measured */
static void cell_text(double v, const char *fmt, const char *none, char *buf, size_t len) {
  snprintf(buf, len, v > 0 ? fmt : none, v);
}

static void print_row(const row *r) {
  char sz[32], c[5][16], q[4][16];
  size_text(r->bytes, sz, sizeof sz);
  if (r->error[0]) {
    printf("%-8s %-3s %2d %8s | error: %s\n", cf_dtype_name(dtypes[r->dtype].dt),
           cf_reduction_name(ops[r->op]), r->k, sz, r->error);
    return;
  }
  double v[5] = {r->nary, r->acc, r->cloop, r->mpi, r->memcpy};
  double rt[4] = {ratio(r->acc, r->mpi), ratio(r->nary, r->cloop), ratio(r->nary, r->memcpy),
                  ratio(r->acc, r->memcpy)};
  for (int i = 0; i < 5; i++)
    cell_text(v[i], "%.1f", "n/a", c[i], sizeof c[i]);
  for (int i = 0; i < 4; i++)
    cell_text(rt[i], "%.2f", "-", q[i], sizeof q[i]);
  printf("%-8s %-3s %2d %8s | %7s %7s %7s %7s %7s | %7s %7s %8s %7s\n",
         cf_dtype_name(dtypes[r->dtype].dt), cf_reduction_name(ops[r->op]), r->k, sz, c[0], c[1],
         c[2], c[3], c[4], q[0], q[1], q[2], q[3]);
  fflush(stdout);
}

static void add_number_or_null(cJSON *o, const char *name, double v) {
  if (v > 0)
    cJSON_AddNumberToObject(o, name, v);
  else
    cJSON_AddNullToObject(o, name);
}

static cJSON *row_json(const row *r) {
  cJSON *o = cJSON_CreateObject();
  cJSON_AddStringToObject(o, "dtype", cf_dtype_name(dtypes[r->dtype].dt));
  cJSON_AddStringToObject(o, "op", cf_reduction_name(ops[r->op]));
  cJSON_AddNumberToObject(o, "sources", r->k);
  cJSON_AddNumberToObject(o, "bytes", (double)r->bytes);
  cJSON *g = cJSON_AddObjectToObject(o, "gbps");
  add_number_or_null(g, "collfuse_nary", r->nary);
  add_number_or_null(g, "collfuse_acc", r->acc);
  add_number_or_null(g, "c_loop", r->cloop);
  add_number_or_null(g, "mpi_reduce_local", r->mpi);
  add_number_or_null(g, "memcpy", r->memcpy);
  cJSON *q = cJSON_AddObjectToObject(o, "ratio");
  add_number_or_null(q, "acc_vs_mpi", ratio(r->acc, r->mpi));
  add_number_or_null(q, "nary_vs_c_loop", ratio(r->nary, r->cloop));
  add_number_or_null(q, "nary_vs_memcpy", ratio(r->nary, r->memcpy));
  add_number_or_null(q, "acc_vs_memcpy", ratio(r->acc, r->memcpy));
  if (r->mpi_why[0]) cJSON_AddStringToObject(o, "mpi_unavailable", r->mpi_why);
  if (r->error[0])
    cJSON_AddStringToObject(o, "error", r->error);
  else
    cJSON_AddNullToObject(o, "error");
  return o;
}

/* One row: check the kernels against the C loop, then time every column. */
static void measure_row(row *r, buffers *b, void *nary, bool stream, cf_kernel_acc_fn acc,
                        mpi_peer *mpi, const options *o) {
  job j = {.b = b,
           .k = r->k,
           .op = ops[r->op] == CF_RED_MAX ? CF_BENCH_MAX : CF_BENCH_SUM,
           .nary = nary,
           .stream = stream,
           .acc = acc};
  double kb = (double)b->bytes / 1e9;
  cf_cloop_nary(b->d->bdt, j.op, b->ref, (const void *const *)b->src, r->k, b->n);
  memset(b->dst, 0, (size_t)b->bytes);
  run_nary(&j);
  if (!check(b, r->k, false, b->dst, "collfuse n-ary", r->error, sizeof r->error)) return;
  memcpy(b->dst, b->src[0], (size_t)b->bytes);
  run_acc(&j);
  if (!check(b, r->k, true, b->dst, "collfuse acc", r->error, sizeof r->error)) return;

  double t = median_s(run_nary, &j, o->min_reps, o->min_ms);
  r->nary = t > 0 ? (r->k + 1) * kb / t : 0;
  t = median_s(run_acc, &j, o->min_reps, o->min_ms);
  r->acc = t > 0 ? 3.0 * (r->k - 1) * kb / t : 0;
  t = median_s(run_cloop, &j, o->min_reps, o->min_ms);
  r->cloop = t > 0 ? (r->k + 1) * kb / t : 0;
  t = mpi_measure(mpi, r->dtype, &j, o, r->mpi_why, sizeof r->mpi_why);
  r->mpi = t > 0 ? 3.0 * (r->k - 1) * kb / t : 0;
  t = median_s(run_memcpy, &j, o->min_reps, o->min_ms);
  r->memcpy = t > 0 ? 2 * kb / t : 0;
}

/* The kernels of one row, JIT-compiled once; their compile times go to
 * the JSON report. */
static cf_status row_kernels(cf_context *ctx, cJSON *kernels, const row *r, void **nary, bool *stream,
                             cf_kernel_acc_fn *acc) {
  /* the n-ary kernel streams its stores where an AllReduce run back to
   * back would: a large destination, and k sources and it too large for the
   * cache (cf_streams) */
  bool streams = r->bytes >= CF_STREAM_MIN_OUTPUT && cf_streams((r->k + 1) * r->bytes);
  cf_kernel_key keys[2] = {
      {.kind = CF_K_NARY, .dtype = dtypes[r->dtype].dt, .red = ops[r->op], .arity = r->k,
       .stream = streams, .outs = streams},
      {.kind = CF_K_ACC, .dtype = dtypes[r->dtype].dt, .red = ops[r->op]},
  };
  void *fn[2];
  for (int i = 0; i < 2; i++) {
    double ms = 0;
    cf_status st = cf_codegen_kernel(ctx, &keys[i], &fn[i], &ms);
    if (st) return st;
    char name[96];
    cf_kernel_name(&keys[i], name, sizeof name);
    bool seen = false;
    for (cJSON *k = kernels->child; k && !seen; k = k->next)
      seen = strcmp(cJSON_GetObjectItem(k, "name")->valuestring, name) == 0;
    if (!seen) {
      cJSON *k = cJSON_CreateObject();
      cJSON_AddStringToObject(k, "name", name);
      cJSON_AddNumberToObject(k, "compile_ms", ms);
      cJSON_AddBoolToObject(k, "cached", ms == 0); /* from the context or the object cache */
      cJSON_AddItemToArray(kernels, k);
    }
  }
  *nary = fn[0];
  *stream = keys[0].stream;
  memcpy(acc, &fn[1], sizeof *acc);
  return CF_OK;
}

/* ---------------- options ---------------- */

static int usage(const char *fmt, const char *arg) {
  return cf_tool_usage("bench reduce", fmt, arg);
}

/* A comma-separated list of names into want[0..n) (names[i] for want[i]);
 * false on an unknown or empty one. */
static bool parse_names(const char *v, const char *const *names, int n, bool *want) {
  memset(want, 0, (size_t)n * sizeof *want);
  bool any = false;
  for (const char *p = v; *p;) {
    size_t len = strcspn(p, ",");
    int i = 0;
    while (i < n && (strlen(names[i]) != len || strncmp(p, names[i], len) != 0))
      i++;
    if (i == n) return false;
    want[i] = any = true;
    p += len + (p[len] == ',');
  }
  return any;
}

static const cf_opt red_opts[] = {
    {"--quick", NULL, NULL, CF_OPT_FLAG, offsetof(cf_red_args, quick),
     .help = "64 KiB with one sample: a smoke test"},
    {"--sizes", NULL, "S,S,...", CF_OPT_STR, offsetof(cf_red_args, sizes), .comma_list = true,
     .help = "bytes per buffer such as 256K,64M (multiples of 4, at most 1G;\n"
             "--device cuda 4G; default 256K,64M, --device cuda 256M)"},
    {"--reps", NULL, "N", CF_OPT_INT, offsetof(cf_red_args, reps), 1, 100000,
     .help = "samples per cell, at least (1..1000, default 5); --device cuda:\n"
             "calls per sample (default 10)"},
    {"--min-ms", NULL, "MS", CF_OPT_STR, offsetof(cf_red_args, min_ms),
     .help = "time per cell, at least (0..60000, default 50)"},
    {"--dtypes", NULL, "D,..", CF_OPT_STR, offsetof(cf_red_args, dtypes), .comma_list = true,
     .help = "rows of these dtypes: float32, float16, bfloat16, int8 (default all)"},
    {"--ops", NULL, "sum,max", CF_OPT_STR, offsetof(cf_red_args, ops), .comma_list = true,
     .help = "rows of these reductions (default both)"},
    {"--sources", NULL, "K,..", CF_OPT_STR, offsetof(cf_red_args, sources), .comma_list = true,
     .help = "rows of these numbers of sources, 2..8 (default 2,8)"},
    {"--device", NULL, NULL, CF_OPT_STR, offsetof(cf_red_args, device), .choices = "cpu|cuda",
     .help = "cuda: the CUDA backend's kernels against the GPU's copy rate"},
    {"--samples", NULL, "N", CF_OPT_INT, offsetof(cf_red_args, samples), 1, 100,
     .help = "(--device cuda) samples per cell (default 7)"},
    CF_OPT_MAX_MEMORY(offsetof(cf_red_args, max_memory)),
    CF_OPT_JSON(offsetof(cf_red_args, json)),
    {0},
};

const cf_command cf_command_bench_reduce = {
    .name = "bench reduce",
    .summary = "reduction kernels vs memcpy, C loop, MPI_Reduce_local",
    .about = "Time collfuse's JIT reduction kernels (n-ary and accumulate) for float32,\n"
             "float16, bfloat16 and int8, sum and max, 2 and 8 sources, side by side with\n"
             "memcpy, a plain C loop built -O3 -march=native and OpenMPI's MPI_Reduce_local\n"
             "(in place, so set against the accumulate form). GB/s counts every byte read\n"
             "and written; each cell is the median of its samples. See bench/README.md.\n",
    .opts = red_opts,
    .run = cf_bench_reduce,
};

/* The CPU run's options from the table's; 0 or a usage error. */
static int parse_options(const cf_red_args *a, options *o) {
  *o = (options){.sizes = {256 << 10, 64 << 20},
                 .n_sizes = 2,
                 .min_reps = 5,
                 .min_ms = 50,
                 .ks = {2, 8},
                 .n_ks = 2,
                 .json = a->json};
  for (int d = 0; d < N_DTYPES; d++)
    o->dtype[d] = true;
  for (int op = 0; op < N_OPS; op++)
    o->op[op] = true;
  if (a->samples) return usage("%s", "--samples needs --device cuda");
  o->max_memory = a->max_memory;
  if (a->quick) {
    o->sizes[0] = 64 << 10;
    o->n_sizes = 1;
    o->min_reps = 1;
    o->min_ms = 0;
  }
  /* at most 1 GiB per buffer */
  if (a->sizes &&
      !cf_bench_parse_sizes(a->sizes, (int64_t)1 << 30, o->sizes, MAX_SIZES, &o->n_sizes))
    return usage("--sizes takes up to 8 byte counts such as 256K,64M (multiples of 4, at "
                 "most 1G), got '%s'",
                 a->sizes);
  if (a->dtypes) {
    const char *names[N_DTYPES];
    for (int d = 0; d < N_DTYPES; d++)
      names[d] = cf_dtype_name(dtypes[d].dt);
    if (!parse_names(a->dtypes, names, N_DTYPES, o->dtype))
      return usage("--dtypes takes float32, float16, bfloat16, int8 separated by commas, got '%s'",
                   a->dtypes);
  }
  if (a->ops) {
    const char *names[N_OPS] = {cf_reduction_name(ops[0]), cf_reduction_name(ops[1])};
    if (!parse_names(a->ops, names, N_OPS, o->op))
      return usage("--ops takes sum, max or sum,max, got '%s'", a->ops);
  }
  if (a->sources) {
    const char *names[MAX_K - 1] = {"2", "3", "4", "5", "6", "7", "8"};
    bool want[MAX_K - 1];
    if (!parse_names(a->sources, names, MAX_K - 1, want))
      return usage("--sources takes numbers of sources 2..8 separated by commas, got '%s'",
                   a->sources);
    o->n_ks = 0;
    for (int k = 0; k < MAX_K - 1; k++)
      if (want[k]) o->ks[o->n_ks++] = k + 2;
  }
  if (a->reps > 1000) {
    char got[16];
    snprintf(got, sizeof got, "%d", a->reps);
    return usage("--reps takes 1..1000, got '%s'", got);
  }
  if (a->reps) o->min_reps = a->reps;
  if (a->min_ms) {
    char *e;
    double ms = strtod(a->min_ms, &e);
    if (*e || e == a->min_ms || !(ms >= 0 && ms <= 60000))
      return usage("--min-ms takes 0..60000, got '%s'", a->min_ms);
    o->min_ms = ms;
  }
  return 0;
}

/* ---------------- the benchmark ---------------- */

int cf_bench_reduce(cf_context *ctx, int argc, char **argv) {
  cf_red_args a = {0};
  int rc = cf_opts_parse(&cf_command_bench_reduce, argc, argv, &a);
  cf_opts_free(&cf_command_bench_reduce, &a);
  if (rc) return rc == CF_OPTS_HELP ? 0 : rc;
  if (a.device && strcmp(a.device, "cuda") == 0)
    return cf_bench_reduce_cuda(ctx, &a); /* bench_cuda.c */
  options o;
  if ((rc = parse_options(&a, &o))) return rc;
  /* the buffers of the largest size, before any exists */
  int64_t most = 0;
  for (int s = 0; s < o.n_sizes; s++)
    if (o.sizes[s] > most) most = o.sizes[s];
  char who[96], mb[32];
  snprintf(who, sizeof who, "%d buffers of %s (%d sources, destination, reference) need", MAX_K + 2,
           cf_bytes_text(most, mb, sizeof mb), MAX_K);
  cf_mem_need need = {.file = "collfuse bench reduce",
                      .ranks = 1,
                      .per_rank = (MAX_K + 2) * most,
                      .who = who,
                      .hint = "use smaller --sizes"};
  cf_status mst = cf_mem_check(ctx, &need, o.max_memory, "--max-memory");
  if (mst) return cf_tool_fail(ctx, mst);
  void (*old_pipe)(int) = signal(SIGPIPE, SIG_IGN); /* a dead MPI child is not our death */
  mpi_peer mpi;
  mpi_start(&mpi); /* first: nothing of the JIT gets forked */

  cf_codegen_target host;
  cf_status st = cf_codegen_target_host(ctx, &host);
  cJSON *root = cJSON_CreateObject(), *kernels = NULL, *rows = NULL;
  if (!root) st = CF_ERR_NO_MEMORY;
  if (!st && !o.json) print_header(&o, &host, &mpi);
  if (!st) {
    cJSON_AddStringToObject(root, "bench", "reduce");
    cJSON_AddStringToObject(root, "unit", "GB/s (1e9 bytes read + written per second)");
    cJSON_AddStringToObject(root, "host_cpu", host.cpu);
    cJSON_AddNumberToObject(root, "vector_bits", host.vector_bits);
    cJSON_AddNumberToObject(root, "min_reps", o.min_reps);
    cJSON_AddNumberToObject(root, "min_ms", o.min_ms);
    cJSON *bc = cJSON_AddObjectToObject(root, "bytes_counted");
    cJSON_AddStringToObject(bc, "collfuse_nary", "(K+1)*bytes per call");
    cJSON_AddStringToObject(bc, "collfuse_acc", "3*(K-1)*bytes per K-1 calls");
    cJSON_AddStringToObject(bc, "c_loop", "(K+1)*bytes per call");
    cJSON_AddStringToObject(bc, "mpi_reduce_local",
                            "3*(K-1)*bytes per K-1 calls (in place, like acc)");
    cJSON_AddStringToObject(bc, "memcpy", "2*bytes per call");
    cJSON *peers = cJSON_AddObjectToObject(root, "peers");
    cJSON_AddStringToObject(peers, "c_loop", "gcc " __VERSION__ " -O3 -march=native");
    cJSON *m = cJSON_AddObjectToObject(peers, "mpi");
    cJSON_AddBoolToObject(m, "available", mpi.up);
    if (mpi.up)
      cJSON_AddStringToObject(m, "library", mpi.version);
    else
      cJSON_AddStringToObject(m, "reason", mpi.why);
    if (mpi.up) cJSON_AddBoolToObject(m, "int8_sum_saturates", mpi.int8_sum_saturates);
    kernels = cJSON_AddArrayToObject(root, "kernels");
    rows = cJSON_AddArrayToObject(root, "results");
  }

  buffers b = {0};
  bool failed_row = false;
  for (int s = 0; !st && s < o.n_sizes; s++)
    for (int d = 0; !st && d < N_DTYPES; d++) {
      if (!o.dtype[d]) continue;
      if (!buffers_get(&b, &dtypes[d], o.sizes[s])) {
        st = cf_error(ctx, CF_ERR_NO_MEMORY, NULL, 0,
                      "bench reduce: out of memory for %lld-byte buffers", (long long)o.sizes[s]);
        break;
      }
      for (int op = 0; !st && op < N_OPS; op++)
        for (int k = 0; !st && o.op[op] && k < o.n_ks; k++) {
          row r = {.dtype = d, .op = op, .k = o.ks[k], .bytes = o.sizes[s]};
          void *nary;
          bool stream;
          cf_kernel_acc_fn acc;
          if ((st = row_kernels(ctx, kernels, &r, &nary, &stream, &acc))) break;
          measure_row(&r, &b, nary, stream, acc, &mpi, &o);
          if (r.error[0]) {
            failed_row = true;
            fprintf(stderr, "collfuse bench reduce: %s %s K=%d %lld bytes: %s\n",
                    cf_dtype_name(dtypes[d].dt), cf_reduction_name(ops[op]), r.k,
                    (long long)r.bytes, r.error);
          }
          if (!o.json) print_row(&r);
          cJSON_AddItemToArray(rows, row_json(&r));
        }
    }
  buffers_free(&b);
  mpi_stop(&mpi, 10);
  if (mpi.err) fclose(mpi.err);
  signal(SIGPIPE, old_pipe);

  if (st) {
    cf_tool_fail(ctx, st);
    rc = 3;
  } else if (o.json) {
    char *text = cJSON_PrintUnformatted(root);
    if (text) puts(text);
    free(text);
  }
  cJSON_Delete(root);
  return rc ? rc : failed_row ? 3 : 0;
}
