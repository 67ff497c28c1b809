/* bench_util.c - what every `collfuse bench` subcommand shares: the clock,
 * medians, byte counts in options and tables, integer options. */
#include "tools.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

double cf_bench_median(double *v, int n) {
  if (n <= 0) return 0;
  qsort(v, (size_t)n, sizeof *v, cmp_double);
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

double cf_bench_gbps(int64_t bytes, double us) { return us > 0 ? (double)bytes / (us * 1e3) : 0; }

void cf_bench_size_text(int64_t b, char *buf, size_t len) {
  static const char *unit[] = {"B", "K", "M", "G"};
  int k = 0;
  while (k < 3 && b >= 1024 && b % 1024 == 0) {
    b /= 1024;
    k++;
  }
  snprintf(buf, len, "%lld%s", (long long)b, unit[k]);
}

bool cf_bench_parse_sizes(const char *v, int64_t limit, int64_t *sizes, int max, int *n) {
  *n = 0;
  for (const char *p = v; *p;) {
    size_t k = strcspn(p, ",");
    if (*n == max || !cf_bytes_parse(p, k, limit, &sizes[*n]) || sizes[(*n)++] % 4) return false;
    p += k + (p[k] == ',');
  }
  return *n > 0;
}

bool cf_bench_parse_int(const char *v, long lo, long hi, int *out) {
  int64_t x;
  if (!cf_parse_int(v, lo, hi, &x)) return false;
  *out = (int)x;
  return true;
}
