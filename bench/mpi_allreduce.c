/* mpi_allreduce.c - collfuse-mpi-allreduce, the OpenMPI peer of
 * `collfuse bench allreduce` (bench/README.md).
 *
 * Started by the benchmark as `mpirun -np N collfuse-mpi-allreduce --sizes
 * B1,B2,.. --iters K1,K2,.. [--loops L]`, it times MPI_Allreduce (float32,
 * MPI_SUM, out of place) the way the benchmark times collfuse: for each size
 * one warm-up loop of K calls, then L timed loops, each K back-to-back calls
 * between two barriers, timed on rank 0; the result is the median loop
 * divided by K. Before timing, every rank checks the sum once (the data are
 * small integers, so the sum is exact in any order). Rank 0 prints one line
 * per size, "BYTES MEDIAN_US MIN_US", after a "# library ..." line; errors go
 * to stderr and end the job with MPI_Abort.
 *
 * It exits with _exit after MPI_Finalize so that LeakSanitizer (the
 * sanitizer build) does not report OpenMPI's own allocations.
 */
#include <mpi.h>

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

enum { MAX_SIZES = 64, MAX_LOOPS = 1000 };

static void die(int rank, const char *fmt, const char *arg) {
  fprintf(stderr, "collfuse-mpi-allreduce: rank %d: ", rank);
  fprintf(stderr, fmt, arg);
  fprintf(stderr, "\n");
  MPI_Abort(MPI_COMM_WORLD, 2);
  _exit(2);
}

/* "a,b,c" into out[]; false on anything but positive integers. */
static int parse_list(const char *s, long long *out, int max) {
  int n = 0;
  while (*s) {
    char *e;
    errno = 0;
    long long v = strtoll(s, &e, 10);
    if (e == s || errno || v <= 0 || n == max || (*e && *e != ',')) return -1;
    out[n++] = v;
    s = *e ? e + 1 : e;
  }
  return n;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* Element i of rank r: a small integer, so every sum is exact. */
static float value(int64_t i, int r) { return (float)((i * 7 + r * 3) % 17 - 8); }

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  int rank, size;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  long long sizes[MAX_SIZES], iters[MAX_SIZES];
  int n_sizes = -1, n_iters = -1, loops = 5;
  for (int i = 1; i < argc; i++) {
    const char *v = i + 1 < argc ? argv[i + 1] : "";
    if (strcmp(argv[i], "--sizes") == 0) {
      n_sizes = parse_list(v, sizes, MAX_SIZES);
      i++;
    } else if (strcmp(argv[i], "--iters") == 0) {
      n_iters = parse_list(v, iters, MAX_SIZES);
      i++;
    } else if (strcmp(argv[i], "--loops") == 0) {
      loops = atoi(v);
      i++;
    } else {
      die(rank, "unknown argument '%s'", argv[i]);
    }
  }
  if (n_sizes <= 0 || n_iters != n_sizes || loops < 1 || loops > MAX_LOOPS)
    die(rank, "%s",
        "usage: collfuse-mpi-allreduce --sizes B1,B2,.. --iters K1,K2,.. [--loops L] "
        "(one K per size, L in 1..1000)");

  if (rank == 0) {
    char lib[MPI_MAX_LIBRARY_VERSION_STRING];
    int len;
    MPI_Get_library_version(lib, &len);
    lib[strcspn(lib, ",\n")] = 0;
    printf("# library %s\n", lib);
    fflush(stdout);
  }
  double times[MAX_LOOPS];
  for (int s = 0; s < n_sizes; s++) {
    if (sizes[s] % 4) die(rank, "%s", "sizes must be multiples of 4 bytes (float32)");
    int64_t count = sizes[s] / 4;
    float *in = NULL, *out = NULL;
    if (posix_memalign((void **)&in, 64, (size_t)sizes[s]) ||
        posix_memalign((void **)&out, 64, (size_t)sizes[s]))
      die(rank, "%s", "out of memory");
    for (int64_t i = 0; i < count; i++)
      in[i] = value(i, rank);
    memset(out, 0, (size_t)sizes[s]);
    int c = (int)count;
    if ((int64_t)c != count) die(rank, "%s", "size too large for an int count");
    /* warm-up loop, then check the sum once */
    for (long long k = 0; k < iters[s]; k++)
      MPI_Allreduce(in, out, c, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    for (int64_t i = 0; i < count; i++) {
      float want = 0;
      for (int r = 0; r < size; r++)
        want += value(i, r);
      if (out[i] != want) {
        char text[128];
        snprintf(text, sizeof text, "wrong sum at %lld bytes, index %lld: %g, expected %g",
                 sizes[s], (long long)i, (double)out[i], (double)want);
        die(rank, "%s", text);
      }
    }
    for (int l = 0; l < loops; l++) {
      MPI_Barrier(MPI_COMM_WORLD);
      double t0 = MPI_Wtime();
      for (long long k = 0; k < iters[s]; k++)
        MPI_Allreduce(in, out, c, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
      MPI_Barrier(MPI_COMM_WORLD);
      times[l] = (MPI_Wtime() - t0) / (double)iters[s];
    }
    if (rank == 0) {
      qsort(times, (size_t)loops, sizeof *times, cmp_double);
      double med = loops % 2 ? times[loops / 2] : 0.5 * (times[loops / 2 - 1] + times[loops / 2]);
      printf("%lld %.3f %.3f\n", sizes[s], med * 1e6, times[0] * 1e6);
      fflush(stdout);
    }
    free(in);
    free(out);
  }
  MPI_Finalize();
  fflush(stdout);
  _exit(0);
}
