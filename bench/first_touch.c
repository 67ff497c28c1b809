/* first_touch.c - what the first touch of fresh anonymous memory costs, the
 * way a run's arenas are touched (bench/README.md, "A 4 GiB-per-rank graph").
 *
 *   cc -O2 -pthread bench/first_touch.c -o /tmp/first_touch
 *   /tmp/first_touch GIB MODE THREADS [REPEATS [GAP_S]]
 *
 * Maps GIB GiB (2 MiB aligned) and touches every byte of it on THREADS
 * threads (each its own contiguous share), MODE one of
 *   write     4 KiB pages (MADV_NOHUGEPAGE), faulted in by the writes
 *   populate  4 KiB pages, MADV_POPULATE_WRITE first (the arenas' way), then the writes
 *   huge      MADV_HUGEPAGE, faulted in by the writes (2 MiB at a time)
 *   hugepop   MADV_HUGEPAGE, MADV_POPULATE_WRITE, then the writes
 *   popchunk  4 KiB pages, each 1 MiB populated and written at once (the
 *             writes find the zeroed pages in the cache, not in memory)
 * and prints the wall and the process's system and user time of the touch.
 * With REPEATS > 1 it unmaps, waits GAP_S seconds (default 0) and does it
 * again: memory freed GAP_S seconds before, as a run right after another
 * finds it (a guest whose free pages go back to its host pays for fresh
 * memory in the host too). The writes are 64-byte stores of a pattern, as a
 * fill writes every byte.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif

typedef struct share {
  char *p;
  size_t bytes;
  int mode;
} share;

enum { WRITE, POPULATE, HUGE, HUGEPOP, POPCHUNK };

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static double cpu_s(int sys) {
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  struct timeval t = sys ? ru.ru_stime : ru.ru_utime;
  return (double)t.tv_sec + 1e-6 * (double)t.tv_usec;
}

static void *touch(void *arg) {
  share *s = arg;
  if (s->mode == POPCHUNK) { /* 1 MiB at a time: populated, then written */
    for (size_t at = 0, step = (size_t)1 << 20; at < s->bytes; at += step) {
      size_t k = s->bytes - at < step ? s->bytes - at : step;
      madvise(s->p + at, k, MADV_POPULATE_WRITE);
      share one = {s->p + at, k, WRITE};
      touch(&one);
    }
    return NULL;
  }
  if (s->mode == POPULATE || s->mode == HUGEPOP)
    for (size_t at = 0, step = (size_t)64 << 20; at < s->bytes; at += step)
      madvise(s->p + at, s->bytes - at < step ? s->bytes - at : step, MADV_POPULATE_WRITE);
  uint64_t v = (uint64_t)(uintptr_t)s->p;
  for (size_t at = 0; at < s->bytes; at += 64) {
    uint64_t *q = (uint64_t *)(s->p + at);
    for (int i = 0; i < 8; i++)
      q[i] = v + at + (size_t)i;
  }
  return NULL;
}

int main(int argc, char **argv) {
  if (argc < 4) {
    fprintf(
        stderr,
        "usage: first_touch GIB write|populate|huge|hugepop|popchunk THREADS [REPEATS [GAP_S]]\n");
    return 2;
  }
  double gib = atof(argv[1]);
  const char *names[] = {"write", "populate", "huge", "hugepop", "popchunk"};
  int mode = -1;
  for (int m = 0; m < 5; m++)
    if (!strcmp(argv[2], names[m])) mode = m;
  int threads = atoi(argv[3]), repeats = argc > 4 ? atoi(argv[4]) : 1;
  double gap = argc > 5 ? atof(argv[5]) : 0;
  if (mode < 0 || threads < 1 || threads > 64 || gib <= 0 || repeats < 1) return 2;
  size_t bytes = ((size_t)(gib * (1 << 30)) + (2u << 20) - 1) & ~(size_t)((2u << 20) - 1);
  for (int r = 0; r < repeats; r++) {
    if (r && gap > 0) usleep((useconds_t)(gap * 1e6));
    size_t mapped = bytes + (2u << 20);
    char *m = mmap(NULL, mapped, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED) {
      perror("mmap");
      return 1;
    }
    char *p = (char *)(((uintptr_t)m + (2u << 20) - 1) & ~(uintptr_t)((2u << 20) - 1));
    madvise(p, bytes, mode == HUGE || mode == HUGEPOP ? MADV_HUGEPAGE : MADV_NOHUGEPAGE);
    double t0 = now(), s0 = cpu_s(1), u0 = cpu_s(0);
    pthread_t th[64];
    share sh[64];
    size_t each = (bytes / (size_t)threads) & ~(size_t)((2u << 20) - 1);
    for (int t = 0; t < threads; t++) {
      sh[t] =
          (share){p + (size_t)t * each, t == threads - 1 ? bytes - (size_t)t * each : each, mode};
      pthread_create(&th[t], NULL, touch, &sh[t]);
    }
    for (int t = 0; t < threads; t++)
      pthread_join(th[t], NULL);
    double wall = now() - t0;
    printf("%s %.2f GiB %d thread(s) run %d gap %.1f s: wall %.2f s sys %.2f s user %.2f s "
           "(%.2f s wall/GiB)\n",
           names[mode], (double)bytes / (1 << 30), threads, r, r ? gap : 0.0, wall, cpu_s(1) - s0,
           cpu_s(0) - u0, wall / ((double)bytes / (1 << 30)));
    fflush(stdout);
    munmap(m, mapped);
  }
  return 0;
}
