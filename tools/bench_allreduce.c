/* bench_allreduce.c - `collfuse bench allreduce`: collfuse's AllReduce
 * against OpenMPI's MPI_Allreduce at the same rank count (bench/README.md).
 *
 * collfuse's side is the executor's own path without a graph: N ranks on
 * the CPU device, each calling cf_coll_run on float32 sum, out of place,
 * 64-byte aligned buffers filled by cf_fill_random. The ranks are threads
 * of this process on the threads world, with --backend mpi the
 * processes of an mpirun job on the MPI world, or with --backend shm
 * processes of this host on the shm world (started here, after the
 * MPI_Allreduce peer has run, or by a launcher); all run the one measuring
 * loop of bench_ar_loop.c (which --device cuda, bench_cuda.c, runs too).
 * Every algorithm is measured (direct, rsag, ring, rd, pool) and AUTO is
 * reported as the one cf_coll_select resolves to, so the table shows where
 * the size thresholds belong.
 *
 * Both sides time the same way: one warm-up loop of K calls, a check of the
 * result, then L timed loops, each K back-to-back calls between two
 * barriers, timed on rank 0; a cell is the median loop divided by K (the
 * columns round-robin, loop by loop). MPI runs first, all sizes in one
 * `mpirun` of bench/mpi_allreduce.c (found next to this executable), so the
 * two never share the cores; with --backend mpi, MPI_Allreduce runs in the
 * same processes as one more column of the loop. algbw = bytes / time and
 * busbw = algbw * 2(n-1)/n, as nccl-tests define them.
 *
 * The bound: in the same run, every rank copies its input to its output
 * (one copy of the cell's size on every rank at once, timed the same way),
 * once with memcpy and once with the device's streaming stores (the ones
 * the collectives write outputs that leave the cache with), and the faster
 * median is the bound. An AllReduce on one machine can go no faster than
 * that: it must read every rank's input once and write every rank's output
 * once, and the copy does exactly that at the machine's rate with all ranks
 * copying at once. Each cell's fraction of the bound is copy time / its
 * time.
 */
#include "tools.h"

#include "../executor/executor.h"
#include "../executor/transports/transports.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

enum { MAX_SIZES = 32, MAX_LOOPS = 100, MAX_RANKS = 64, MAX_COLS = CF_BENCH_MAX_COLS };

static const int64_t default_sizes[] = {8,        64,       512,       4 << 10,   16 << 10,
                                        32 << 10, 64 << 10, 128 << 10, 256 << 10, 1 << 20,
                                        4 << 20,  16 << 20, 64 << 20,  256 << 20};

typedef struct ar_options {
  int ranks;
  int64_t sizes[MAX_SIZES];
  int n_sizes;
  int iters; /* calls per loop; 0: by size */
  int loops; /* timed loops per cell */
  int algo;  /* -1: every algorithm; else only this row's column besides auto (none: auto alone) */
  cf_algo_req columns[MAX_COLS]; /* auto, then every algorithm forced (cf_bench_ar_columns) */
  int n_cols;
  double timeout_s;
  const char *mpi_args; /* extra mpirun arguments, split at spaces */
  bool json, no_mpi;
  bool mpi;      /* --backend mpi: this process is one rank under mpirun */
  bool shm;      /* --backend shm: this process is one rank of the shm world */
  const char *profile; /* --profile FILE */
  bool save_profile;   /* --save-profile: write what was measured into the profile */
  cf_profile *prof;    /* the profile read: auto's measured rules */
  int64_t max_memory; /* 0: what the machine has available */
} ar_options;

/* Calls per loop: enough to move about 128 MiB per rank, 1..1000. */
static int iters_for(const ar_options *o, int64_t bytes) {
  if (o->iters) return o->iters;
  int64_t k = ((int64_t)128 << 20) / bytes;
  return k < 1 ? 1 : k > 1000 ? 1000 : (int)k;
}

/* ---------------- collfuse's side: the measuring loop ---------------- */

/* What the benchmark will hold per rank on n ranks at its largest size:
 * input, output (with the MPI transport also the check's copy) and the
 * largest scratch of any algorithm; a check against the machine's memory
 * (or --max-memory) before any of it is allocated. */
static cf_status check_memory(cf_context *ctx, const ar_options *o, int n, bool zero_copy,
                              cf_mem_need *need) {
  for (int s = 0; s < o->n_sizes; s++) {
    cf_coll_desc d = cf_bench_ar_desc(o->sizes[s] / 4);
    int64_t scratch = 0;
    for (int k = 1; k < o->n_cols; k++) {
      int64_t sb = (int64_t)cf_coll_scratch_bytes(&d, n, o->columns[k].algo, zero_copy);
      if (sb > scratch) scratch = sb;
    }
    int64_t b = (zero_copy ? 2 : 3) * o->sizes[s] + scratch;
    if (b > need->per_rank) need->per_rank = b;
  }
  need->file = "collfuse bench allreduce";
  need->hint = "use fewer ranks or smaller --sizes";
  return cf_mem_check(ctx, need, o->max_memory, "--max-memory");
}

typedef struct ar_row {
  int64_t bytes;
  int iters;
  int run[MAX_COLS];   /* the algorithm each column ran (auto resolved) */
  double us[MAX_COLS]; /* median microseconds per call; 0: not measured */
  double min_us[MAX_COLS]; /* the fastest loop's (--save-profile: least disturbed by load) */
  double mpi_us;       /* 0: not measured */
  double copy_us;      /* the bound: every rank's copy of bytes at once, the faster; 0: not measured */
  double copy_kind_us[2]; /* memcpy's and the streaming copy's; 0: not measured */
} ar_row;

/* With --backend mpi, direct and rd stage every peer's whole vector (the
 * transport copies): above 64 MiB they are left out, as the memory would be
 * n times the vector. */
static bool stages_whole(int algo, const cf_coll_desc *d) {
  return d->count * 4 > ((int64_t)64 << 20) && (algo == CF_ALGO_DIRECT || algo == CF_ALGO_RD);
}

/* Measure one size on every selected column and the bound; with --backend
 * mpi also MPI_Allreduce (the transport's native collective, as --algo
 * mpi-native runs it) in the same processes, first: its result is the one
 * every algorithm's is checked against (bench_ar_loop.c). False with the
 * loop's error. */
static bool measure_size(cf_bench_ar *h, const ar_options *o, cf_world *w, ar_row *row) {
  cf_coll_desc desc = cf_bench_ar_desc(row->bytes / 4);
  cf_bench_ar_size s = {.bytes = row->bytes, .iters = row->iters, .loops = o->loops, .bound = true};
  cf_algo_req cols[MAX_COLS];
  memcpy(cols, o->columns, sizeof cols);
  if (o->mpi) {
    s.algos[s.n_algos++] = CF_ALGO_MPI_NATIVE;
    s.ref = "MPI_Allreduce gave";
    cols[0].policy = cf_world_auto(w); /* what `run --backend mpi` picks here */
  }
  int slot[MAX_COLS];
  s.n_algos = cf_bench_ar_slots(cols, o->n_cols, o->algo, &desc, w->size,
                                o->mpi ? stages_whole : NULL, row->run, slot, s.algos, s.n_algos);
  if (!cf_bench_ar_measure(h, &s)) return false;
  for (int k = 0; k < o->n_cols; k++) {
    row->us[k] = slot[k] < 0 ? 0 : s.us[slot[k]];
    row->min_us[k] = slot[k] < 0 ? 0 : s.min_us[slot[k]];
  }
  if (o->mpi) row->mpi_us = s.us[0];
  row->copy_us = s.copy_us;
  memcpy(row->copy_kind_us, s.copy_kind_us, sizeof row->copy_kind_us);
  return true;
}

/* --save-profile measures every size this many times, each on fresh rank
 * threads, and keeps the median of each column: where the scheduler
 * places the threads changes from one start to the next, and with it
 * which small-size algorithm leads (4 ranks, 4 KiB: `rd` took 3.0 us or
 * 5.0 us from run to run where `direct` took 3.5-4.2). */
enum { PROFILE_ROUNDS = 3 };

/* rows[s] measured `rounds` times (1..PROFILE_ROUNDS): every time and the
 * bound as their median. False with the loop's error. */
static bool measure_rounds(cf_bench_ar *h, const ar_options *o, cf_world *w, ar_row *row, int rounds) {
  ar_row r[PROFILE_ROUNDS];
  for (int k = 0; k < rounds; k++) {
    r[k] = *row;
    if (!measure_size(h, o, w, &r[k])) return false;
  }
  *row = r[0];
  double a[PROFILE_ROUNDS], b[PROFILE_ROUNDS];
  for (int c = 0; c < o->n_cols; c++) {
    for (int k = 0; k < rounds; k++)
      a[k] = r[k].us[c], b[k] = r[k].min_us[c];
    row->us[c] = cf_bench_median(a, rounds);
    row->min_us[c] = cf_bench_median(b, rounds);
  }
  for (int k = 0; k < rounds; k++)
    a[k] = r[k].mpi_us, b[k] = r[k].copy_us;
  row->mpi_us = cf_bench_median(a, rounds);
  row->copy_us = cf_bench_median(b, rounds);
  for (int c = 0; c < 2; c++) {
    for (int k = 0; k < rounds; k++)
      a[k] = r[k].copy_kind_us[c];
    row->copy_kind_us[c] = cf_bench_median(a, rounds);
    if (row->copy_kind_us[c] > 0 && row->copy_kind_us[c] < row->copy_us) row->copy_us = row->copy_kind_us[c];
  }
  return true;
}

/* ---------------- the MPI peer ---------------- */

typedef struct mpi_peer {
  bool up;
  char why[512];
  char library[128];
  char command[256]; /* for the header */
} mpi_peer;

static bool find_on_path(const char *name, char *out, size_t len) {
  const char *path = cf_env(CF_ENV_PATH);
  if (!path) path = "/usr/bin:/bin";
  while (*path) {
    size_t n = strcspn(path, ":");
    if (n && (size_t)snprintf(out, len, "%.*s/%s", (int)n, path, name) < len &&
        access(out, X_OK) == 0)
      return true;
    path += n + (path[n] == ':');
  }
  return false;
}

/* collfuse-mpi-allreduce next to this executable. */
static bool find_peer(char *out, size_t len) {
  char self[4096];
  ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
  if (n <= 0) return false;
  self[n] = 0;
  char *slash = strrchr(self, '/');
  if (!slash) return false;
  *slash = 0;
  return (size_t)snprintf(out, len, "%s/collfuse-mpi-allreduce", self) < len &&
         access(out, X_OK) == 0;
}

/* "a,b,c" of n numbers */
static char *join(const int64_t *v, int n) {
  size_t cap = (size_t)n * 24 + 1;
  char *s = malloc(cap);
  if (!s) return NULL;
  size_t o = 0;
  s[0] = 0;
  for (int i = 0; i < n; i++)
    o += (size_t)snprintf(s + o, cap - o, "%s%lld", i ? "," : "", (long long)v[i]);
  return s;
}

/* The last non-empty line of f (the child's stderr) into buf. */
static void last_line(FILE *f, char *buf, size_t len) {
  char line[512];
  buf[0] = 0;
  rewind(f);
  while (fgets(line, sizeof line, f)) {
    line[strcspn(line, "\n")] = 0;
    if (line[0]) snprintf(buf, len, "%.300s", line);
  }
}

/* One mpirun for every size; rows[s].mpi_us from its lines "BYTES MED MIN". */
static void run_mpi(const ar_options *o, ar_row *rows, mpi_peer *m) {
  char mpirun[4096], peer[4096];
  memset(m, 0, sizeof *m);
  if (o->no_mpi) {
    snprintf(m->why, sizeof m->why, "--no-mpi");
    return;
  }
  if (!find_on_path("mpirun", mpirun, sizeof mpirun)) {
    snprintf(m->why, sizeof m->why, "mpirun is not on PATH (Debian: apt-get install openmpi-bin)");
    return;
  }
  if (!find_peer(peer, sizeof peer)) {
    snprintf(m->why, sizeof m->why,
             "collfuse-mpi-allreduce is not next to this executable (build its CMake target)");
    return;
  }
  int64_t sizes[MAX_SIZES], iters[MAX_SIZES];
  for (int s = 0; s < o->n_sizes; s++) {
    sizes[s] = rows[s].bytes;
    iters[s] = rows[s].iters;
  }
  char np[16], loops[16], *sz = join(sizes, o->n_sizes), *it = join(iters, o->n_sizes);
  snprintf(np, sizeof np, "%d", o->ranks);
  snprintf(loops, sizeof loops, "%d", o->loops);
  enum { MAX_EXTRA = 32 };
  const char *argv[16 + MAX_EXTRA];
  char extra[1024];
  int a = 0;
  argv[a++] = mpirun;
  if (geteuid() == 0) argv[a++] = "--allow-run-as-root";
  argv[a++] = "--oversubscribe";
  argv[a++] = "--bind-to";
  argv[a++] = "none";
  snprintf(extra, sizeof extra, "%s", o->mpi_args ? o->mpi_args : "");
  for (char *save = NULL, *w = strtok_r(extra, " \t", &save); w && a < 6 + MAX_EXTRA;
       w = strtok_r(NULL, " \t", &save))
    argv[a++] = w;
  argv[a++] = "-np";
  argv[a++] = np;
  argv[a++] = peer;
  argv[a++] = "--sizes";
  argv[a++] = sz ? sz : "";
  argv[a++] = "--iters";
  argv[a++] = it ? it : "";
  argv[a++] = "--loops";
  argv[a++] = loops;
  argv[a] = NULL;
  snprintf(m->command, sizeof m->command, "mpirun%s --oversubscribe --bind-to none%s%.120s -np %d",
           geteuid() == 0 ? " --allow-run-as-root" : "", o->mpi_args ? " " : "",
           o->mpi_args ? o->mpi_args : "", o->ranks);
  int fd[2] = {-1, -1};
  FILE *err = tmpfile();
  pid_t pid = -1;
  if (sz && it && err && pipe(fd) == 0) pid = fork();
  if (pid == 0) {
    setpgid(0, 0); /* so a timeout can stop mpirun and its processes */
    dup2(fd[1], 1);
    dup2(fileno(err), 2);
    close(fd[0]);
    close(fd[1]);
    execv(mpirun, (char *const *)argv);
    _exit(127);
  }
  free(sz);
  free(it);
  if (fd[1] >= 0) close(fd[1]);
  if (pid < 0) {
    snprintf(m->why, sizeof m->why, "cannot start mpirun: %s", strerror(errno));
    if (fd[0] >= 0) close(fd[0]);
    if (err) fclose(err);
    return;
  }
  /* read its lines, giving up after 30 minutes */
  FILE *f = fdopen(fd[0], "r");
  char line[512];
  int got = 0;
  bool timed_out = false;
  double deadline = cf_now() + 1800;
  while (f) {
    struct pollfd p = {.fd = fd[0], .events = POLLIN};
    int left = (int)((deadline - cf_now()) * 1000);
    if (left <= 0 || poll(&p, 1, left) == 0) {
      timed_out = true;
      kill(-pid, SIGKILL);
      break;
    }
    if (!fgets(line, sizeof line, f)) break;
    long long b;
    double med;
    if (strncmp(line, "# library ", 10) == 0) {
      line[strcspn(line, "\n")] = 0;
      snprintf(m->library, sizeof m->library, "%.100s", line + 10);
    } else if (sscanf(line, "%lld %lf", &b, &med) == 2) {
      for (int s = 0; s < o->n_sizes; s++)
        if (rows[s].bytes == b && rows[s].mpi_us == 0) {
          rows[s].mpi_us = med;
          got++;
          break;
        }
    }
  }
  if (f)
    fclose(f);
  else
    close(fd[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  char tail[400];
  last_line(err, tail, sizeof tail);
  fclose(err);
  if (timed_out)
    snprintf(m->why, sizeof m->why, "mpirun did not finish within 30 minutes");
  else if (!WIFEXITED(status) || WEXITSTATUS(status) != 0 || got < o->n_sizes)
    snprintf(m->why, sizeof m->why, "mpirun %s %d after %d of %d sizes%s%s",
             WIFEXITED(status) ? "exited with" : "was killed by signal",
             WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status), got, o->n_sizes,
             tail[0] ? ": " : "", tail);
  m->up = got > 0;
}

/* ---------------- report ---------------- */

static double busbw_factor(int n) { return 2.0 * (n - 1) / n; }

/* The bound's copy rate: read + written bytes of all n ranks per second, GB/s. */
static double copy_gbps(const ar_row *r, int n) {
  return r->copy_us > 0 ? 2.0 * n * (double)r->bytes / (r->copy_us * 1e3) : 0;
}

/* A time's fraction of the bound (bound time / its time); 0: unknown. */
static double of_bound(const ar_row *r, double us) {
  return r->copy_us > 0 && us > 0 ? r->copy_us / us : 0;
}

static void print_header(const ar_options *o, const mpi_peer *m) {
  printf("collfuse bench allreduce: %d ranks (%s, CPU device), float32 sum, out of "
         "place\n",
         o->ranks,
         o->mpi   ? "MPI transport, one process per rank"
         : o->shm ? "shm transport, one process per rank"
                  : "threads transport");
  printf("  us: median over %d loop%s of K back-to-back calls, per call; algbw = bytes / time,\n"
         "  busbw = algbw * 2(n-1)/n = algbw * %.2f (GB/s, 1 GB = 1e9 B); auto = cf_coll_select's "
         "choice\n",
         o->loops, cf_s(o->loops), busbw_factor(o->ranks));
  if (m->up)
    printf("  mpi: MPI_Allreduce, %s, %s\n", m->library[0] ? m->library : "OpenMPI", m->command);
  if (m->why[0]) printf("  mpi: %s%s\n", m->up ? "partial results: " : "not measured: ", m->why);
  printf("  bound: every rank copies its input to its output at once, the faster of memcpy and\n"
         "  streaming stores (copy GB/s = read + written bytes of all ranks / time); frac = bound\n"
         "  us / auto us (1 = at the memory limit)\n");
  if (o->ranks & (o->ranks - 1))
    printf("  rd needs a power-of-two rank count: its column (*) is what ran instead (direct)\n");
  printf("%6s %5s | %6s %9s %7s %7s |", "size", "K", "auto", "us", "algbw", "busbw");
  for (int k = 1; k < o->n_cols; k++)
    printf(" %9s", cf_algo_req_name(o->columns[k]));
  printf(" | %9s %7s | %6s | %9s %7s %5s\n", "mpi us", "busbw", "cf/mpi", "bound us", "copy",
         "frac");
}

static void cell(double v, const char *fmt, char *buf, size_t len) {
  if (v > 0)
    snprintf(buf, len, fmt, v);
  else
    snprintf(buf, len, "-");
}

static void print_row(const ar_options *o, const ar_row *r) {
  char sz[16], c[MAX_COLS][16], ab[16], bb[16], mu[16], mb[16], q[16], bu[16], cg[16], fr[16];
  double f = busbw_factor(o->ranks);
  cf_bench_size_text(r->bytes, sz, sizeof sz);
  for (int k = 0; k < o->n_cols; k++) /* '*': the algorithm fell back to another */
    cell(r->us[k], k && r->run[k] != o->columns[k].algo ? "%.1f*" : "%.1f", c[k], sizeof c[k]);
  cell(cf_bench_gbps(r->bytes, r->us[0]), "%.2f", ab, sizeof ab);
  cell(cf_bench_gbps(r->bytes, r->us[0]) * f, "%.2f", bb, sizeof bb);
  cell(r->mpi_us, "%.1f", mu, sizeof mu);
  cell(cf_bench_gbps(r->bytes, r->mpi_us) * f, "%.2f", mb, sizeof mb);
  cell(r->us[0] > 0 && r->mpi_us > 0 ? r->mpi_us / r->us[0] : 0, "%.2f", q, sizeof q);
  cell(r->copy_us, "%.1f", bu, sizeof bu);
  cell(copy_gbps(r, o->ranks), "%.1f", cg, sizeof cg);
  cell(of_bound(r, r->us[0]), "%.2f", fr, sizeof fr);
  printf("%6s %5d | %6s %9s %7s %7s |", sz, r->iters, cf_algo_name(r->run[0]), c[0], ab, bb);
  for (int k = 1; k < o->n_cols; k++)
    printf(" %9s", c[k]);
  printf(" | %9s %7s | %6s | %9s %7s %5s\n", mu, mb, q, bu, cg, fr);
  fflush(stdout);
}

static cJSON *timing_json(const ar_row *r, double us, int n) {
  if (us <= 0) return cJSON_CreateNull();
  cJSON *t = cJSON_CreateObject();
  cJSON_AddNumberToObject(t, "us", us);
  cJSON_AddNumberToObject(t, "algbw_gbps", cf_bench_gbps(r->bytes, us));
  cJSON_AddNumberToObject(t, "busbw_gbps", cf_bench_gbps(r->bytes, us) * busbw_factor(n));
  if (r->copy_us > 0)
    cJSON_AddNumberToObject(t, "fraction_of_bound", of_bound(r, us));
  else
    cJSON_AddNullToObject(t, "fraction_of_bound");
  return t;
}

static cJSON *row_json(const ar_options *o, const ar_row *r) {
  cJSON *j = cJSON_CreateObject();
  cJSON_AddNumberToObject(j, "bytes", (double)r->bytes);
  cJSON_AddNumberToObject(j, "iters", r->iters);
  cJSON_AddStringToObject(j, "auto_algo", cf_algo_name(r->run[0]));
  cJSON *c = cJSON_AddObjectToObject(j, "collfuse");
  for (int k = 0; k < o->n_cols; k++) {
    cJSON *t = timing_json(r, r->us[k], o->ranks);
    if (cJSON_IsObject(t)) cJSON_AddStringToObject(t, "algo_run", cf_algo_name(r->run[k]));
    cJSON_AddItemToObject(c, cf_algo_req_name(o->columns[k]), t);
  }
  cJSON_AddItemToObject(j, "mpi", timing_json(r, r->mpi_us, o->ranks));
  if (r->copy_us > 0) {
    cJSON *b = cJSON_AddObjectToObject(j, "bound");
    cJSON_AddNumberToObject(b, "us", r->copy_us);
    cJSON_AddNumberToObject(b, "copy_gbps", copy_gbps(r, o->ranks));
    static const char *const kind[2] = {"memcpy_us", "streaming_us"};
    for (int q = 0; q < 2; q++)
      if (r->copy_kind_us[q] > 0)
        cJSON_AddNumberToObject(b, kind[q], r->copy_kind_us[q]);
      else
        cJSON_AddNullToObject(b, kind[q]);
  } else {
    cJSON_AddNullToObject(j, "bound");
  }
  if (r->us[0] > 0 && r->mpi_us > 0)
    cJSON_AddNumberToObject(j, "ratio_busbw_collfuse_vs_mpi", r->mpi_us / r->us[0]);
  else
    cJSON_AddNullToObject(j, "ratio_busbw_collfuse_vs_mpi");
  return j;
}

/* ---------------- options ---------------- */

static int usage(const char *fmt, const char *arg) {
  return cf_tool_usage("bench allreduce", fmt, arg);
}

static const cf_opt ar_opts[] = {
    {"--ranks", NULL, "N", CF_OPT_INT, offsetof(cf_ar_args, ranks), 1, MAX_RANKS,
     .help = "rank threads, 2..64 (default 4; --device cuda 1..64, default 8)"},
    {"--sizes", NULL, "S,S,...", CF_OPT_STR, offsetof(cf_ar_args, sizes), .comma_list = true,
     .help = "byte counts such as 8,64K,1M (multiples of 4, at most 1G;\n"
             "--device cuda 4G; default 8 B..256 MiB)"},
    {"--algo", NULL, NULL, CF_OPT_STR, offsetof(cf_ar_args, algo),
     .choices_of = cf_opt_algo_choices_own, .check = cf_opt_check_algo_own,
     .help = "keep only this algorithm's column (and auto's)"},
    {"--iters", NULL, "K", CF_OPT_INT, offsetof(cf_ar_args, iters), 1, 1000000,
     .help = "calls per loop (default about 128 MiB per loop)"},
    {"--loops", NULL, "L", CF_OPT_INT, offsetof(cf_ar_args, loops), 1, MAX_LOOPS,
     .help = "timed loops per cell, the median is reported (default 5)"},
    {"--quick", NULL, NULL, CF_OPT_FLAG, offsetof(cf_ar_args, quick),
     .help = "8 B, 64 KiB and 1 MiB, short loops: a smoke test"},
    {"--no-mpi", NULL, NULL, CF_OPT_FLAG, offsetof(cf_ar_args, no_mpi),
     .help = "skip MPI_Allreduce"},
    {"--mpi-args", NULL, "ARGS", CF_OPT_STR, offsetof(cf_ar_args, mpi_args),
     .help = "more mpirun options for the MPI_Allreduce peer,\n"
             "such as '--mca coll basic,self,libnbc'"},
    {"--backend", NULL, NULL, CF_OPT_STR, offsetof(cf_ar_args, backend), .choices = "threads|mpi|shm",
     .help = "shm: N processes of this host on the shm world (started\n"
             "here; MPI_Allreduce's peer runs first, as for threads);\n"
             "mpi: under `mpirun -np N`, every process is one rank and\n"
             "MPI_Allreduce runs in the same processes"},
    {"--device", NULL, NULL, CF_OPT_STR, offsetof(cf_ar_args, device), .choices = "cpu|cuda",
     .help = "cuda: the ranks on the CUDA backend, against the GPU's copy rate"},
    CF_OPT_MAX_MEMORY(offsetof(cf_ar_args, max_memory)),
    CF_OPT_PROFILE(offsetof(cf_ar_args, profile)),
    {"--save-profile", NULL, NULL, CF_OPT_FLAG, offsetof(cf_ar_args, save_profile),
     .help = "write each size's fastest algorithm and the transport's\n"
             "alpha/beta into the profile (--profile's file, else the\n"
             "default one; other rank counts and transports kept);\n"
             "every size is measured 3 times, on fresh rank threads,\n"
             "and the medians are kept (and shown)"},
    CF_OPT_JSON(offsetof(cf_ar_args, json)),
    {0},
};

const cf_command cf_command_bench_allreduce = {
    .name = "bench allreduce",
    .summary = "AllReduce algorithms on rank threads vs MPI_Allreduce",
    .about = "float32 sum on N rank threads for sizes 8 B..256 MiB: microseconds per call,\n"
             "algbw = bytes/time and busbw = algbw*2(n-1)/n for the algorithm AUTO picks and\n"
             "for each forced one (direct, rsag, ring, rd, pool), next to OpenMPI's\n"
             "MPI_Allreduce on N processes under mpirun (collfuse-mpi-allreduce). Each cell\n"
             "is the median of L loops of K calls. See bench/README.md.\n",
    .opts = ar_opts,
    .run = cf_bench_allreduce,
};

/* The CPU run's options from the table's; 0 or a usage error. */
static int parse_options(const cf_ar_args *a, ar_options *o) {
  *o = (ar_options){.ranks = 4, .loops = 5, .algo = -1, .timeout_s = 120};
  o->n_sizes = (int)(sizeof default_sizes / sizeof default_sizes[0]);
  memcpy(o->sizes, default_sizes, sizeof default_sizes);
  char why[128], given[16];
  int64_t x;
  snprintf(given, sizeof given, "%d", a->ranks);
  if (a->ranks && !cf_option_int("--ranks", given, 2, MAX_RANKS, &x, why, sizeof why))
    return usage("%s", why); /* the table allows 1 for --device cuda */
  if (a->ranks) o->ranks = a->ranks;
  if (a->loops) o->loops = a->loops;
  o->iters = a->iters;
  o->n_cols = cf_bench_ar_columns(o->columns, MAX_COLS);
  o->algo = cf_bench_ar_only(a->algo);
  if (a->sizes &&
      !cf_bench_parse_sizes(a->sizes, (int64_t)1 << 30, o->sizes, MAX_SIZES, &o->n_sizes))
    return usage("--sizes wants up to 32 byte counts such as 8,64K,1M (multiples of 4, at most "
                 "1G), got '%s'",
                 a->sizes);
  o->mpi_args = a->mpi_args;
  o->max_memory = a->max_memory;
  o->json = a->json;
  o->no_mpi = a->no_mpi;
  o->mpi = a->backend && strcmp(a->backend, "mpi") == 0;
  o->shm = a->backend && strcmp(a->backend, "shm") == 0;
  o->profile = a->profile;
  o->save_profile = a->save_profile;
  if (a->save_profile && a->algo)
    return usage("%s", "--save-profile measures every algorithm: leave --algo out");
  if (a->quick) { /* a smoke test: three sizes, short loops */
    static const int64_t q[] = {8, 64 << 10, 1 << 20};
    o->n_sizes = 3;
    memcpy(o->sizes, q, sizeof q);
    if (!o->iters) o->iters = 4;
    if (!a->loops) o->loops = 2;
  }
  return 0;
}

/* ---------------- the profile ---------------- */

/* The transport as profiles name it. */
static const char *transport_of(const ar_options *o) {
  return o->mpi ? "mpi" : o->shm ? "shm" : "threads";
}

/* Read the profile auto's column uses (--save-profile: the file it will
 * update, which need not exist yet); 0 or the exit code. */
static int read_profile(cf_context *ctx, ar_options *o) {
  char path[4096], buf[4096];
  bool explicit_path;
  const char *at = cf_profile_path(o->profile, buf, sizeof buf, &explicit_path);
  cf_status st = o->save_profile && at
                     ? cf_profile_load(ctx, at, false, &o->prof)
                     : cf_profile_find(ctx, o->profile, &o->prof, path, sizeof path);
  if (st) return cf_tool_fail(ctx, st);
  o->columns[0].n_measured =
      cf_profile_rules(o->prof, transport_of(o), &o->columns[0].measured);
  return 0;
}

/* --save-profile: what rows measured into the profile; the exit code. */
static int save_profile(cf_context *ctx, const ar_options *o, const ar_row *rows) {
  cf_bench_ar_cell cells[MAX_SIZES];
  for (int s = 0; s < o->n_sizes; s++) {
    cells[s] = (cf_bench_ar_cell){.bytes = rows[s].bytes};
    memcpy(cells[s].run, rows[s].run, sizeof cells[s].run);
    memcpy(cells[s].us, rows[s].min_us, sizeof cells[s].us);
  }
  char path[4096];
  const char *transport = transport_of(o);
  cf_status st = cf_bench_ar_save_profile(ctx, o->profile, transport, o->ranks, cells, o->n_sizes,
                                          o->n_cols, path, sizeof path);
  if (st) return cf_tool_fail(ctx, st);
  fprintf(stderr, "collfuse bench allreduce: profile of %s on %d ranks saved to %s\n", transport,
          o->ranks, path);
  return 0;
}

/* ---------------- the benchmark ---------------- */

/* The run on a world of rank threads (the default: MPI_Allreduce is
 * measured first, all sizes in one `mpirun` of the peer, before any thread
 * or JIT state exists, so the two never share the cores) or, with
 * --backend mpi, as one rank of an mpirun job (every process one rank,
 * MPI_Allreduce in the same processes; rank 0 prints); the exit code. */
static int bench(cf_context *ctx, ar_options *o, ar_row *rows, mpi_peer *peer) {
  mpi_peer m = {.up = true};
  cf_mem_need need = {.ranks = o->ranks};
  cf_status st;
  if (peer) { /* shm: measured before the ranks were started */
    m = *peer;
  } else if (o->mpi) {
    snprintf(m.library, sizeof m.library,
             "in the same processes (the transport's native collective)");
    snprintf(m.command, sizeof m.command, "MPI_Allreduce on MPI_COMM_WORLD's duplicate");
  } else {
    if ((st = check_memory(ctx, o, o->ranks, true, &need))) return cf_tool_fail(ctx, st);
    if (!o->json && !o->no_mpi) {
      printf("collfuse bench allreduce: running MPI_Allreduce on %d processes first...\n",
             o->ranks);
      fflush(stdout);
    }
    run_mpi(o, rows, &m);
  }
  cf_world *w = NULL;
  cf_device *dev = NULL;
  cf_bench_ar *h = NULL;
  bool procs = o->mpi || o->shm; /* one rank per process */
  st = cf_world_create(ctx, o->mpi ? &cf_world_mpi : o->shm ? &cf_world_shm : &cf_world_threads,
                       procs ? 0 : o->ranks, o->timeout_s, &w);
  if (st) return cf_tool_fail(ctx, st);
  int me = w->first, rc = 0;
  o->ranks = w->size;
  int cores = cf_world_comm(w, me)->cores; /* the world's, agreed by its ranks */
  o->columns[0].cores = cores;
  if (o->mpi && w->size < 2) {
    if (me == 0)
      fprintf(stderr, "collfuse bench allreduce: --backend mpi runs one rank per process: start it as "
                      "`mpirun -np N collfuse bench allreduce --backend mpi` with N >= 2\n");
    cf_world_destroy(w, EXIT_USAGE);
    return EXIT_USAGE;
  }
  st = cf_device_cpu_create(ctx, &dev);
  if (!st) st = cf_bench_ar_open(ctx, w, dev, &h);
  if (!st && procs) {
    need = (cf_mem_need){.processes = cf_world_host_processes(w), .rank = me};
    st = check_memory(ctx, o, w->size, cf_world_comm(w, me)->ops->zero_copy, &need);
  }
  cJSON *root = NULL, *results = NULL;
  if (st) {
    rc = cf_tool_fail(ctx, st);
    cf_world_abort(w, cf_context_errmsg(ctx));
  } else if (me == 0) {
    if (!o->json) print_header(o, &m);
    root = cJSON_CreateObject();
    cJSON_AddStringToObject(root, "bench", "allreduce");
    cJSON_AddNumberToObject(root, "ranks", o->ranks);
    cJSON_AddStringToObject(root, "transport", w->ops->name);
    cJSON_AddStringToObject(root, "device", "cpu");
    if (procs) {
      cJSON_AddNumberToObject(root, "local_ranks", cf_world_host_processes(w));
      if (cores) cJSON_AddNumberToObject(root, "cores", cores);
    }
    if (!o->mpi) {
      cJSON_AddStringToObject(root, "dtype", "float32");
      cJSON_AddStringToObject(root, "reduction", "sum");
    }
    cJSON_AddNumberToObject(root, "loops", o->loops);
    cJSON_AddNumberToObject(root, "busbw_factor", busbw_factor(o->ranks));
    if (!o->mpi)
      cJSON_AddStringToObject(root, "units",
                              "us: median microseconds per call; *bw_gbps: 1e9 bytes/s");
    cJSON *mj = cJSON_AddObjectToObject(cJSON_AddObjectToObject(root, "peers"), "mpi");
    cJSON_AddBoolToObject(mj, "available", m.up);
    if (m.library[0]) cJSON_AddStringToObject(mj, "library", m.library);
    if (m.command[0] && !o->mpi) cJSON_AddStringToObject(mj, "command", m.command);
    if (m.why[0]) cJSON_AddStringToObject(mj, "reason", m.why);
    results = cJSON_AddArrayToObject(root, "results");
  }
  for (int s = 0; s < o->n_sizes && !rc; s++) {
    if (!measure_rounds(h, o, w, &rows[s], o->save_profile ? PROFILE_ROUNDS : 1)) {
      if (procs)
        fprintf(stderr, "collfuse bench allreduce: rank %d: %lld bytes: %s\n", me,
                (long long)rows[s].bytes, cf_bench_ar_error(h));
      else
        fprintf(stderr, "collfuse bench allreduce: %lld bytes: %s\n", (long long)rows[s].bytes,
                cf_bench_ar_error(h));
      rc = EXIT_RUNTIME;
    } else if (me == 0) {
      if (!o->json) print_row(o, &rows[s]);
      cJSON_AddItemToArray(results, row_json(o, &rows[s]));
    }
  }
  if (!rc && root && o->json) {
    char *text = cJSON_PrintUnformatted(root);
    if (text) puts(text);
    free(text);
  }
  cJSON_Delete(root);
  if (!rc && me == 0 && o->save_profile) rc = save_profile(ctx, o, rows);
  cf_bench_ar_close(h);
  if (dev) dev->ops->destroy(dev);
  fflush(stdout);
  cf_world_destroy(w, procs ? rc : 0);
  return rc;
}

/* --backend shm: MPI_Allreduce's peer first (all sizes in one mpirun, as
 * for threads), then the ranks as processes of this host, started here
 * (each inherits the peer's results) unless a launcher started this one. */
static int bench_shm(cf_context *ctx, ar_options *o, ar_row *rows) {
  mpi_peer m = {.up = true};
  if (cf_shm_launched()) {
    m.up = false;
    snprintf(m.why, sizeof m.why, "a launcher started the ranks (run it without one to compare)");
    return bench(ctx, o, rows, &m);
  }
  cf_mem_need need = {.ranks = o->ranks};
  cf_status st = check_memory(ctx, o, o->ranks, true, &need);
  if (st) return cf_tool_fail(ctx, st);
  if (!o->json && !o->no_mpi) {
    printf("collfuse bench allreduce: running MPI_Allreduce on %d processes first...\n", o->ranks);
    fflush(stdout);
  }
  run_mpi(o, rows, &m);
  int rc = cf_tool_spawn_ranks("bench allreduce", o->ranks);
  return rc >= 0 ? rc : bench(ctx, o, rows, &m);
}

int cf_bench_allreduce(cf_context *ctx, int argc, char **argv) {
  cf_ar_args a = {0};
  int rc = cf_opts_parse(&cf_command_bench_allreduce, argc, argv, &a);
  cf_opts_free(&cf_command_bench_allreduce, &a);
  if (rc) return rc == CF_OPTS_HELP ? 0 : rc;
  if (a.device && strcmp(a.device, "cuda") == 0)
    return cf_bench_allreduce_cuda(ctx, &a); /* bench_cuda.c */
  ar_options o;
  if ((rc = parse_options(&a, &o)) || (rc = read_profile(ctx, &o))) return rc;
  ar_row rows[MAX_SIZES];
  for (int s = 0; s < o.n_sizes; s++)
    rows[s] = (ar_row){.bytes = o.sizes[s], .iters = iters_for(&o, o.sizes[s])};
  rc = o.shm ? bench_shm(ctx, &o, rows) : bench(ctx, &o, rows, NULL);
  cf_profile_destroy(o.prof);
  return rc;
}
