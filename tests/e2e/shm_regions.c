/* shm_regions.c - the shm world on the caller's registered memory
 * (cf_shm_register), through the public API only.
 *
 *   collfuse_shm_regions N     (forks N processes, ranks of one shm job)
 *
 * Each rank keeps its buffers in a memfd of its own, mapped MAP_SHARED and
 * registered, with guard bytes around every buffer, and checks:
 *  - an AllReduce (sum) of random float32 data, every algorithm the world
 *    size allows (direct, rsag, ring, rd at a power of two, pool, auto), in place
 *    (one buffer as input and output) and out of place, at an odd count
 *    and (auto, in place) a count of several of the algorithms' 4 MiB
 *    segments: every element against the float64 sum of every rank's data
 *    (each rank makes them all from the seed), the guards untouched and
 *    cf_executable_last_copies 0 (the same run on unregistered memory
 *    makes its copies: 2);
 *  - the world's heaps (mapped by every rank) hold no resident page
 *    past their first 2 MiB after in-place AllReduces of registered
 *    memory by executables made one after another (kept, never freed):
 *    such a run reads and writes only the caller's memory, so neither
 *    its arena nor the small messages of its first run (the fingerprints,
 *    through bounce buffers) may cost a page elsewhere in the heap, which
 *    in the heap's 2 MiB pages was a huge page per allocation; and of the
 *    first 2 MiB, where the bounce buffers lie, only a few small pages;
 *  - the region made again at the same address from another memfd and
 *    registered again between runs (a new generation): the peers map the
 *    new file, the results are right;
 *  - memory of cf_shm_memory (2 MiB pages where Linux gives them),
 *    registered: after in-place AllReduces there of random data (each
 *    algorithm the size allows) the results match the float64 sums and no
 *    page of a peer's such memory is resident in this rank's map of it
 *    (its Rss in /proc/self/smaps: the peers let go of the pages a
 *    collective handed them), though the peers' are mapped here; in 4 KiB
 *    pages (no huge pages on this system) only the sums are checked; a
 *    rank's resident memory grows by at most about two 2 MiB pages of each
 *    peer's during an rsag of 24 MB (rsag_put lets go as it goes), not the
 *    24 / N MB of each peer's that it reads and writes; and
 *    cf_shm_memory refuses 0 bytes;
 *  - the last rank registers memory and closes its descriptor, so no peer
 *    can open it: every rank's run fails with CF_ERR_RUNTIME naming the
 *    last rank's registered memory, none hangs (timeout 20 s).
 *
 *   collfuse_shm_regions N unopenable
 *
 * The kernel refuses the peers the last rank's memory: it is made
 * non-dumpable and every rank gives up CAP_SYS_PTRACE before the job
 * starts, so opening /proc/<pid>/fd/<fd> of it fails (EACCES) as under
 * Yama's ptrace_scope 2. The world finds it at start-up and copies
 * registered memory instead: AllReduces in and out of place on registered
 * memory give the right sums with the copies of unregistered memory (2),
 * and each rank's log sink gets one warning naming why.
 * Prints one line per failure; exits 0 when every rank passed.
 */
#define _GNU_SOURCE
#include <collfuse/collfuse.h>

#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <linux/capability.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

enum { GUARD = 256 };

static int me, R, fails;
static char job[64];
static cf_context *ctx;

#define FAIL(...)                                                                                  \
  do {                                                                                             \
    fails++;                                                                                       \
    fprintf(stderr, "shm_regions rank %d/%d: FAIL line %d: ", me, R, __LINE__);                   \
    fprintf(stderr, __VA_ARGS__);                                                                  \
    fputc('\n', stderr);                                                                           \
  } while (0)

/* Element x of rank r's data in case c: random in [-1, 1) (splitmix64). */
static float val(int c, int r, int64_t x) {
  uint64_t z = ((uint64_t)c << 48) ^ ((uint64_t)r << 40) ^ (uint64_t)x;
  z += UINT64_C(0x9e3779b97f4a7c15);
  z = (z ^ (z >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
  z = (z ^ (z >> 27)) * UINT64_C(0x94d049bb133111eb);
  z ^= z >> 31;
  return (float)((double)(z >> 11) / 9007199254740992.0 * 2.0 - 1.0);
}

typedef struct region {
  int fd;
  unsigned char *base;
  size_t bytes;
} region;

/* A memfd of bytes mapped at want (NULL: anywhere), filled with guard bytes. */
static bool region_make(region *g, size_t bytes, void *want) {
  g->fd = memfd_create("shm_regions", MFD_CLOEXEC);
  if (g->fd < 0 || ftruncate(g->fd, (off_t)bytes) != 0) return false;
  void *p = mmap(want, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | (want ? MAP_FIXED : 0), g->fd, 0);
  if (p == MAP_FAILED) return false;
  g->base = p;
  g->bytes = bytes;
  memset(p, 0xA5, bytes);
  return true;
}

static cf_executable *make_exe(int64_t count, const char *algo) {
  cf_graph *g = NULL;
  cf_options *o = NULL;
  cf_executable *e = NULL;
  char ranks[16];
  snprintf(ranks, sizeof ranks, "%d", R);
  cf_status st = cf_graph_create(ctx, "regions", R, &g);
  if (!st) st = cf_graph_add_input(g, "x", "float32", &count, 1);
  if (!st) st = cf_graph_add_allreduce(g, "ar", "x", "sum", NULL, -1, -1);
  if (!st) st = cf_graph_add_output(g, "y", "ar");
  if (!st) st = cf_options_create(ctx, &o);
  if (!st) st = cf_options_set(o, "ranks", ranks);
  if (!st) st = cf_options_set(o, "algo", algo);
  if (!st) st = cf_options_set(o, "backend", "shm");
  if (!st) st = cf_options_set(o, "job", job);
  if (!st) st = cf_options_set(o, "timeout", "20");
  if (!st) st = cf_executable_create(g, o, &e);
  if (st) FAIL("%s x %lld: %s", algo, (long long)count, cf_context_errmsg(ctx));
  cf_options_destroy(o);
  cf_graph_destroy(g);
  return e;
}

static bool guards_ok(const unsigned char *p, size_t n) {
  for (size_t i = 0; i < n; i++)
    if (p[i] != 0xA5) return false;
  return true;
}

/* One AllReduce of count elements, case c, in x (and y unless in place),
 * each GUARD bytes inside the region with guards around it; copies: what
 * cf_executable_last_copies should say. */
static void check_run(cf_executable *e, int c, int64_t count, float *x, float *y, size_t copies,
                      const char *what) {
  for (int64_t i = 0; i < count; i++) x[i] = val(c, me, i);
  float *out = y ? y : x;
  const void *in[1] = {x};
  void *outs[1] = {out};
  if (cf_executable_run_rank(e, me, in, outs)) {
    FAIL("%s: %s", what, cf_context_errmsg(ctx));
    return;
  }
  int64_t bad = 0, first = -1;
  double want = 0;
  for (int64_t i = 0; i < count; i++) {
    double s = 0;
    for (int r = 0; r < R; r++) s += val(c, r, i);
    if (fabs(out[i] - s) > 1e-5 * (1 + fabs(s)) && bad++ == 0) first = i, want = s;
  }
  if (bad)
    FAIL("%s: %lld of %lld elements wrong, first [%lld] = %g, want %g", what, (long long)bad, (long long)count,
         (long long)first, out[first], want);
  size_t b = 0, n = cf_executable_last_copies(e, &b);
  if (n != copies) FAIL("%s: %zu copies (%zu bytes), want %zu", what, n, b, copies);
}

/* Pages of the shm world's heaps (every rank's, as mapped here: a memfd
 * named collfuse-shm-heap, or the file "heap" of a tmpfs of its own,
 * shm_pages.c) resident in each heap's first 2 MiB (*first) and past it
 * (the result), from mincore (the file's pages, whoever touched them); -1
 * when not every heap is found or mincore fails. */
static long heap_pages(long *first) {
  *first = 0;
  FILE *f = fopen("/proc/self/maps", "r");
  if (!f) return -1;
  char line[512];
  long pages = 0;
  int heaps = 0;
  unsigned char *v = malloc((size_t)1 << 18);
  while (v && pages >= 0 && fgets(line, sizeof line, f)) {
    unsigned long a, b, off;
    char path[256] = "";
    if (sscanf(line, "%lx-%lx %*s %lx %*s %*s %255s", &a, &b, &off, path) < 3) continue;
    if (strcmp(path, "/heap") != 0 && !strstr(path, "collfuse-shm-heap")) continue;
    heaps += off == 0; /* a heap may be mapped as several areas (its first 2 MiB in small pages) */
    size_t lead = ((size_t)2 << 20) / 4096; /* the pages of the first 2 MiB */
    for (size_t at = 0, n = (b - a) / 4096; at < n; at += (size_t)1 << 18) {
      size_t k = n - at < ((size_t)1 << 18) ? n - at : ((size_t)1 << 18);
      if (mincore((void *)(a + at * 4096), k * 4096, v) != 0) {
        pages = -1;
        break;
      }
      for (size_t i = 0; i < k; i++)
        if (v[i] & 1) {
          if (off / 4096 + at + i < lead)
            ++*first;
          else
            pages++;
        }
    }
  }
  free(v);
  fclose(f);
  return heaps == R ? pages : -1;
}

static bool guards_around(const void *p, size_t bytes);

/* The kB resident in this process's maps of the peers' cf_shm_memory
 * files ("/region" on a tmpfs of 2 MiB pages, "memfd:collfuse-shm-region"
 * in 4 KiB pages), every such map but the one at own; *maps: how many. */
static long peer_region_kb(const void *own, int *maps) {
  *maps = 0;
  FILE *f = fopen("/proc/self/smaps", "r");
  if (!f) return -1;
  char line[512];
  long kb = 0;
  bool in = false;
  while (fgets(line, sizeof line, f)) {
    unsigned long a, b, k;
    char path[256] = "";
    if (sscanf(line, "%lx-%lx %*s %*s %*s %*s %255s", &a, &b, path) >= 2) { /* a map's first line */
      in = (strcmp(path, "/region") == 0 || strstr(path, "collfuse-shm-region")) && (void *)a != own;
      *maps += in;
    } else if (in && sscanf(line, "Rss: %lu kB", &k) == 1) {
      kb += (long)k;
    }
  }
  fclose(f);
  return kb;
}

/* The kB of a line of /proc/self/status ("VmRSS:"), -1 when missing. */
static long status_kb(const char *key) {
  FILE *f = fopen("/proc/self/status", "r");
  if (!f) return -1;
  char line[256];
  long kb = -1;
  while (kb < 0 && fgets(line, sizeof line, f))
    if (strncmp(line, key, strlen(key)) == 0) kb = atol(line + strlen(key));
  fclose(f);
  return kb;
}

/* In-place AllReduces on registered memory of cf_shm_memory; c: the
 * first case number, returns the next. */
static int let_go_check(int c) {
  int fd = -2;
  if (cf_shm_memory(ctx, 0, &fd) != CF_ERR_USAGE || fd != -1 || !strstr(cf_context_errmsg(ctx), "0 bytes"))
    FAIL("cf_shm_memory of 0 bytes: fd %d, message '%s'; want CF_ERR_USAGE, fd -1", fd,
         cf_context_errmsg(ctx));
  /* 6 MB: a chunk of each rank spans 2 MiB pages; rsag's 24 MB: a peer's chunk here is
   * 8-12 MB, which rsag_put lets go of 2 MiB at a time as it goes */
  const int64_t count = 1500001, big = 6000001;
  size_t bytes = ((size_t)big * 4 + 2 * (size_t)GUARD + 4095) / 4096 * 4096;
  if (cf_shm_memory(ctx, bytes, &fd)) {
    FAIL("cf_shm_memory: %s", cf_context_errmsg(ctx));
    return c;
  }
  struct stat sb;
  bool huge = fstat(fd, &sb) == 0 && sb.st_blksize >= (2 << 20);
  unsigned char *base = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (base == MAP_FAILED) {
    FAIL("mmap of cf_shm_memory's file: %s", strerror(errno));
    close(fd);
    return c;
  }
  memset(base, 0xA5, bytes);
  if (cf_shm_register(ctx, base, bytes, fd)) FAIL("register cf_shm_memory's: %s", cf_context_errmsg(ctx));
  float *x = (float *)(base + GUARD);
  const char *algos[] = {"pool", "direct", "ring", "rsag"}; /* rsag's (24 MB) guards last */
  for (size_t a = 0; a < sizeof algos / sizeof *algos; a++) {
    bool is_rsag = strcmp(algos[a], "rsag") == 0;
    int64_t n = is_rsag ? big : count;
    cf_executable *e = make_exe(n, algos[a]);
    if (!e) continue;
    char what[96];
    snprintf(what, sizeof what, "%s in place, cf_shm_memory", algos[a]);
    check_run(e, c++, n, x, NULL, 0, what);
    /* the second run's peak of resident memory (VmHWM from here: clear_refs 5) */
    long before = status_kb("VmRSS:"), grew = -1;
    FILE *cr = fopen("/proc/self/clear_refs", "w");
    bool reset = cr && fputs("5", cr) >= 0;
    if (cr) reset = fclose(cr) == 0 && reset;
    check_run(e, c++, n, x, NULL, 0, what);
    if (reset && before > 0) grew = status_kb("VmHWM:") - before;
    /* a rank reads and writes 24 / R MB of each peer's (2 ranks: 12 MB), but holds at most two
     * of each peer's 2 MiB pages at once (the one it is in and the next; 4 MiB measured) */
    if (is_rsag && huge && grew > (long)(R - 1) * 6 * 1024)
      FAIL("%s: resident memory grew by %ld kB during an in-place AllReduce of %lld bytes (-1: VmHWM "
           "not reset); want at most %d kB: about 2 MiB pages of each peer's at a time", what, grew,
           (long long)n * 4, (R - 1) * 6 * 1024);
    int maps;
    long kb = peer_region_kb(base, &maps);
    /* each a new world (the last one went with its executable): ring reads only its left neighbour's */
    int want = strcmp(algos[a], "ring") == 0 ? 1 : R - 1;
    if (maps != want)
      FAIL("%s: %d maps of the peers' cf_shm_memory here; want %d", what, maps, want);
    else if (huge && kb != 0)
      FAIL("%s: %ld kB of the peers' registered memory (2 MiB pages) resident here after the runs; want 0",
           what, kb);
    if (!guards_around(x, (size_t)n * 4)) FAIL("%s: a guard byte changed", what);
    cf_executable_destroy(e);
  }
  if (cf_shm_unregister(ctx, base)) FAIL("unregister: %s", cf_context_errmsg(ctx));
  munmap(base, bytes);
  close(fd);
  return c;
}

static bool guards_around(const void *p, size_t bytes) {
  const unsigned char *c = p;
  return guards_ok(c - GUARD, GUARD) && guards_ok(c + bytes, GUARD);
}

static int rank_main(void) {
  if (cf_context_create(&ctx)) return 1;
  const char *algos[] = {"direct", "rsag", "ring", "rd", "pool", "auto"};
  const int64_t count = 100003, big = 2500001; /* big: 10 MB, 3 segments in place */
  size_t cb = (size_t)count * 4, bigb = (size_t)big * 4;
  size_t region_bytes = ((size_t)GUARD * 3 + cb * 2 + (size_t)GUARD + bigb + 4095) / 4096 * 4096;
  region g;
  if (!region_make(&g, region_bytes, NULL)) {
    FAIL("no memfd: %s", strerror(errno));
    return 1;
  }
  if (cf_shm_register(ctx, g.base, g.bytes, g.fd)) FAIL("register: %s", cf_context_errmsg(ctx));
  float *x = (float *)(g.base + GUARD), *y = (float *)(g.base + 2 * GUARD + cb);
  int c = 1;
  /* in place on registered memory: no page of the heaps past their first 2 MiB */
  float *z = (float *)(g.base + 3 * GUARD + 2 * cb);
  cf_executable *kept[2] = {make_exe(big, "auto"), make_exe(count, "auto")};
  for (int k = 0; k < 2; k++)
    if (kept[k]) {
      check_run(kept[k], c++, k ? count : big, k ? x : z, NULL, 0, "in place, the heaps' pages");
      check_run(kept[k], c++, k ? count : big, k ? x : z, NULL, 0, "in place again, the heaps' pages");
    }
  long first, past = heap_pages(&first);
  if (past != 0)
    FAIL("%ld pages of the world's heaps resident past their first 2 MiB after in-place runs on registered "
         "memory (-1: the heaps not found); want 0", past);
  /* the bounce buffers' few KiB there in small pages, not a 2 MiB page per heap */
  if (first >= (long)R * 512 / 4)
    FAIL("%ld pages resident in the first 2 MiB of the %d heaps; want the bounce buffers' few", first, R);
  for (int k = 0; k < 2; k++) cf_executable_destroy(kept[k]);
  c = let_go_check(c);
  for (size_t a = 0; a < sizeof algos / sizeof *algos; a++) {
    if (strcmp(algos[a], "rd") == 0 && (R & (R - 1))) continue; /* powers of two */
    cf_executable *e = make_exe(count, algos[a]);
    if (!e) continue;
    char what[64];
    snprintf(what, sizeof what, "%s in place", algos[a]);
    check_run(e, c++, count, x, NULL, 0, what);
    snprintf(what, sizeof what, "%s out of place", algos[a]);
    check_run(e, c++, count, x, y, 0, what);
    snprintf(what, sizeof what, "%s in place again", algos[a]);
    check_run(e, c++, count, x, NULL, 0, what);
    if (!guards_around(x, cb) || !guards_around(y, cb)) FAIL("%s: a guard byte changed", algos[a]);
    cf_executable_destroy(e);
  }
  /* several segments in place */
  cf_executable *e = make_exe(big, "auto");
  if (e) check_run(e, c++, big, z, NULL, 0, "auto in place, 10 MB");
  if (e && !guards_around(z, bigb)) FAIL("10 MB in place: a guard byte changed");
  cf_executable_destroy(e);
  /* unregistered memory: the world copies in and out */
  e = make_exe(count, "auto");
  float *plain = malloc(cb);
  if (e) check_run(e, c++, count, x, NULL, 0, "auto in place"); /* the peers map the region */
  if (e && plain) check_run(e, c++, count, plain, NULL, 2, "auto in place, unregistered memory");
  free(plain);
  /* a new file at the same address, registered again: the peers map it anew */
  int old_fd = g.fd;
  if (!region_make(&g, region_bytes, g.base)) FAIL("no second memfd: %s", strerror(errno));
  close(old_fd);
  if (cf_shm_register(ctx, g.base, g.bytes, g.fd)) FAIL("register again: %s", cf_context_errmsg(ctx));
  if (e) check_run(e, c++, count, x, NULL, 0, "in place after registering again");
  if (e) check_run(e, c++, count, x, y, 0, "out of place after registering again");
  if (!guards_around(x, cb) || !guards_around(y, cb)) FAIL("after registering again: a guard byte changed");
  /* the last rank's memory cannot be opened by its peers */
  if (me == R - 1) {
    region h;
    if (!region_make(&h, region_bytes, NULL)) FAIL("no third memfd: %s", strerror(errno));
    if (cf_shm_register(ctx, h.base, h.bytes, h.fd)) FAIL("register: %s", cf_context_errmsg(ctx));
    close(h.fd); /* registered, but gone from /proc/<pid>/fd */
    x = (float *)(h.base + GUARD);
  }
  if (e) {
    for (int64_t i = 0; i < count; i++) x[i] = val(c, me, i);
    const void *in[1] = {x};
    void *outs[1] = {x};
    char want[64];
    snprintf(want, sizeof want, "rank %d's registered memory", R - 1);
    cf_status st = cf_executable_run_rank(e, me, in, outs);
    const char *msg = cf_context_errmsg(ctx);
    if (st != CF_ERR_RUNTIME || !msg || !strstr(msg, want))
      FAIL("a region no peer can open: status %d, message '%s', want CF_ERR_RUNTIME naming %s", (int)st,
           msg ? msg : "", want);
  }
  cf_executable_destroy(e);
  cf_context_destroy(ctx);
  return fails ? 1 : 0;
}

/* The log sink: the warnings this rank's context got, counted and kept. */
static int warnings;
static char warning[1024];
static void on_log(void *user, cf_log_level lvl, const char *msg) {
  (void)user;
  if (lvl != CF_LOG_WARN) return;
  warnings++;
  snprintf(warning, sizeof warning, "%s", msg);
}

/* Drop CAP_SYS_PTRACE from this thread's effective and permitted sets (the
 * threads it starts inherit it): root would open any /proc/<pid>/fd. */
static bool drop_ptrace_cap(void) {
  struct __user_cap_header_struct h = {_LINUX_CAPABILITY_VERSION_3, 0};
  struct __user_cap_data_struct d[2];
  if (syscall(SYS_capget, &h, d) != 0) return false;
  d[CAP_SYS_PTRACE / 32].effective &= ~(1u << (CAP_SYS_PTRACE % 32));
  d[CAP_SYS_PTRACE / 32].permitted &= ~(1u << (CAP_SYS_PTRACE % 32));
  return syscall(SYS_capset, &h, d) == 0;
}

static int unopenable_main(void) {
  if (!drop_ptrace_cap()) FAIL("capset: %s", strerror(errno));
  if (me == R - 1 && prctl(PR_SET_DUMPABLE, 0) != 0) FAIL("PR_SET_DUMPABLE: %s", strerror(errno));
  if (cf_context_create(&ctx)) return 1;
  cf_context_set_log(ctx, on_log, NULL);
  const int64_t count = 100003;
  size_t cb = (size_t)count * 4;
  region g;
  if (!region_make(&g, ((size_t)GUARD * 3 + cb * 2 + 4095) / 4096 * 4096, NULL)) {
    FAIL("no memfd: %s", strerror(errno));
    return 1;
  }
  if (cf_shm_register(ctx, g.base, g.bytes, g.fd)) FAIL("register: %s", cf_context_errmsg(ctx));
  float *x = (float *)(g.base + GUARD), *y = (float *)(g.base + 2 * GUARD + cb);
  cf_executable *e = make_exe(count, "auto");
  if (e) check_run(e, 1, count, x, NULL, 2, "in place, memory the peers cannot open");
  if (e) check_run(e, 2, count, x, y, 2, "out of place, memory the peers cannot open");
  if (!guards_around(x, cb) || !guards_around(y, cb)) FAIL("unopenable: a guard byte changed");
  if (warnings != 1 || !strstr(warning, "cannot open rank") ||
      !strstr(warning, "copied through the world's memory instead of used in place"))
    FAIL("%d warnings, the last '%s'; want one saying registered memory is copied, and why", warnings,
         warning);
  cf_executable_destroy(e);
  cf_context_destroy(ctx);
  return fails ? 1 : 0;
}

int main(int argc, char **argv) {
  R = argc > 1 ? atoi(argv[1]) : 2;
  bool unopenable = argc > 2 && strcmp(argv[2], "unopenable") == 0;
  if (R < 2 || R > 8) {
    fprintf(stderr, "usage: collfuse_shm_regions N [unopenable]   (N: 2..8)\n");
    return 2;
  }
  snprintf(job, sizeof job, "regions-%d-%d", (int)getpid(), R);
  pid_t pid[8];
  for (int r = 0; r < R; r++) {
    pid[r] = fork();
    if (pid[r] == 0) {
      me = r;
      alarm(300); /* never a hang: the runs' own timeout is 20 s */
      _exit(unopenable ? unopenable_main() : rank_main());
    }
  }
  int bad = 0;
  for (int r = 0; r < R; r++) {
    int ws = 0;
    if (pid[r] < 0 || waitpid(pid[r], &ws, 0) != pid[r] || !WIFEXITED(ws) || WEXITSTATUS(ws)) {
      fprintf(stderr, "shm_regions: rank %d failed (status 0x%x)\n", r, ws);
      bad = 1;
    }
  }
  if (!bad) printf("shm_regions: %d ranks passed\n", R);
  return bad;
}
