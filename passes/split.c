/* split.c - how fusion=1 collectives are split into buckets (SPEC section 5).
 *
 *   bytes:CAP[,first=F][,count=C]  greedy buckets in gradient-ready order up to
 *                                  CAP bytes; the first bucket up to F (DDP's
 *                                  small first bucket); at most C members
 *                                  (XLA's count threshold). K/M/G are binary.
 *   size:P1,P2,...                 HCCL: segments holding P1%, P2%, ... of the
 *                                  gradient bytes; a gradient belongs to the
 *                                  segment in which its last byte falls.
 *   index:I1,I2,...                HCCL: segment k ends at gradient index Ik;
 *                                  the last index is the last gradient.
 *   auto                           bytes:CAP with CAP from the cost model below.
 *
 * The auto cost model. One collective of b bytes costs alpha + b/beta.
 * Buckets are sent as soon as their last member is ready, and the backward
 * pass that produces the gradients is slower than the link (the regime data
 * parallelism is tuned for), so the bandwidth term of every bucket but the
 * last hides behind compute. What stays exposed is alpha for every bucket
 * (they queue on one communication stream) and the whole transfer of the
 * last bucket, which cannot start before the last gradient is ready:
 *     E(C) = N(C) * alpha + last(C) / beta
 * for greedy buckets of cap C, with N and last computed exactly from the
 * real gradient sizes. auto tries caps on a geometric grid (2^(1/4) steps
 * from 64 KiB to the total) and keeps the cheapest, preferring fewer buckets
 * on ties. It therefore ends with a small bucket behind the last-ready
 * gradient, never more than one cap, and packs the rest into few large
 * buckets - the shape of HCCL's own ResNet-50 default, size:96.54,3.46.
 * alpha and beta come from --cost alpha_us,beta_GBps; the defaults describe
 * 8 ranks on a 100 Gb/s network (250 us, 8 GB/s algorithm bandwidth).
 */
#include "passes.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* "25M", "1.5MiB", "4096", "64K" -> bytes */
static bool parse_bytes(const char *s, size_t len, int64_t *out) {
  char buf[64];
  if (len == 0 || len >= sizeof buf) return false;
  memcpy(buf, s, len);
  buf[len] = 0;
  char *end;
  errno = 0;
  double v = strtod(buf, &end);
  if (end == buf || errno || !(v > 0)) return false;
  double mul = 1;
  if (*end == 'K' || *end == 'k') mul = 1024.0, end++;
  else if (*end == 'M' || *end == 'm') mul = 1024.0 * 1024, end++;
  else if (*end == 'G' || *end == 'g') mul = 1024.0 * 1024 * 1024, end++;
  if (mul > 1 && (*end == 'i' || *end == 'I')) end++;
  if (*end == 'B' || *end == 'b') end++;
  if (*end) return false;
  v *= mul;
  if (v < 1 || v > (double)CF_MAX_BYTES) return false;
  *out = (int64_t)v;
  return true;
}

char *cf_split_format_bytes(int64_t b, char *buf, size_t len) {
  static const char units[] = "KMG";
  int u = -1;
  double v = (double)b;
  while (v >= 1024 && u < 2 && fmod(v, 1024) == 0) v /= 1024, u++;
  if (u < 0)
    snprintf(buf, len, "%lld", (long long)b);
  else
    snprintf(buf, len, "%g%c", v, units[u]);
  return buf;
}

/* Split "a,b,c" after a prefix into at most CF_MAX_SEGMENTS numbers. */
static bool parse_list(const char *s, double *vals, int *n, char *why, size_t len) {
  *n = 0;
  if (!*s) {
    snprintf(why, len, "empty list");
    return false;
  }
  while (*s) {
    if (*n == CF_MAX_SEGMENTS) {
      snprintf(why, len, "more than %d segments", CF_MAX_SEGMENTS);
      return false;
    }
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (end == s || errno || (*end && *end != ',') || !isfinite(v)) {
      snprintf(why, len, "bad number at '%.20s'", s);
      return false;
    }
    vals[(*n)++] = v;
    s = *end ? end + 1 : end;
  }
  return true;
}

bool cf_split_parse(const char *spec, cf_split *out, char *why, size_t len) {
  memset(out, 0, sizeof *out);
  if (!spec || strcmp(spec, "auto") == 0) return true;
  double vals[CF_MAX_SEGMENTS];
  if (strncmp(spec, "bytes:", 6) == 0) {
    out->kind = CF_SPLIT_BYTES;
    const char *p = spec + 6;
    bool have_cap = false;
    while (*p) {
      size_t k = strcspn(p, ",");
      if (!have_cap) {
        if (!parse_bytes(p, k, &out->cap)) {
          snprintf(why, len, "--split %s: bad cap '%.*s' (e.g. 25M, 64K, 1G)", spec, (int)k, p);
          return false;
        }
        have_cap = true;
      } else if (strncmp(p, "first=", 6) == 0) {
        if (!parse_bytes(p + 6, k - 6, &out->first)) {
          snprintf(why, len, "--split %s: bad first bucket size '%.*s'", spec, (int)k, p);
          return false;
        }
      } else if (strncmp(p, "count=", 6) == 0) {
        char *end;
        long long c = strtoll(p + 6, &end, 10);
        if (end != p + k || c < 1 || c > CF_MAX_OPERANDS) {
          snprintf(why, len, "--split %s: count must be in 1..%d", spec, CF_MAX_OPERANDS);
          return false;
        }
        out->count = c;
      } else {
        snprintf(why, len, "--split %s: unknown option '%.*s' (first=, count=)", spec, (int)k, p);
        return false;
      }
      p += k + (p[k] == ',');
    }
    if (!have_cap) {
      snprintf(why, len, "--split %s: missing the byte cap", spec);
      return false;
    }
    return true;
  }
  if (strncmp(spec, "size:", 5) == 0) {
    out->kind = CF_SPLIT_SIZE;
    char w[128];
    if (!parse_list(spec + 5, vals, &out->n, w, sizeof w)) {
      snprintf(why, len, "--split %s: %s", spec, w);
      return false;
    }
    double sum = 0;
    for (int i = 0; i < out->n; i++) {
      if (!(vals[i] > 0)) {
        snprintf(why, len, "--split %s: percentages must be positive", spec);
        return false;
      }
      out->pct[i] = vals[i];
      sum += vals[i];
    }
    if (fabs(sum - 100.0) > 1e-6) {
      snprintf(why, len, "--split %s: percentages sum to %g, not 100", spec, sum);
      return false;
    }
    return true;
  }
  if (strncmp(spec, "index:", 6) == 0) {
    out->kind = CF_SPLIT_INDEX;
    char w[128];
    if (!parse_list(spec + 6, vals, &out->n, w, sizeof w)) {
      snprintf(why, len, "--split %s: %s", spec, w);
      return false;
    }
    for (int i = 0; i < out->n; i++) {
      if (vals[i] < 0 || vals[i] != floor(vals[i]) || vals[i] > CF_MAX_NODES) {
        snprintf(why, len, "--split %s: indices must be non-negative integers", spec);
        return false;
      }
      out->idx[i] = (int64_t)vals[i];
      if (i && out->idx[i] <= out->idx[i - 1]) {
        snprintf(why, len, "--split %s: indices must be strictly ascending (%lld after %lld)", spec,
                 (long long)out->idx[i], (long long)out->idx[i - 1]);
        return false;
      }
    }
    return true;
  }
  snprintf(why, len, "--split %s: expected auto, bytes:CAP[,first=F][,count=C], size:P1,P2,... or index:I1,I2,...",
           spec);
  return false;
}

bool cf_cost_parse(const char *spec, cf_cost *out, char *why, size_t len) {
  out->alpha_us = CF_COST_DEFAULT_ALPHA_US;
  out->beta_gbps = CF_COST_DEFAULT_BETA_GBPS;
  if (!spec) return true;
  char *end;
  errno = 0;
  double a = strtod(spec, &end);
  if (end == spec || *end != ',') goto bad;
  const char *p = end + 1;
  double b = strtod(p, &end);
  if (end == p || *end || errno || !(a >= 0) || !(b > 0) || !isfinite(a) || !isfinite(b)) goto bad;
  out->alpha_us = a;
  out->beta_gbps = b;
  return true;
bad:
  snprintf(why, len, "--cost %s: expected alpha_us,beta_GBps (e.g. 250,8)", spec);
  return false;
}

/* Greedy buckets of cap over bytes[0..n): the count and the last bucket. */
static void greedy(const int64_t *bytes, int n, int64_t cap, int64_t *count, int64_t *last) {
  int64_t nb = 0, cur = 0;
  int mem = 0;
  for (int i = 0; i < n; i++) {
    if (mem && (cur + bytes[i] > cap || bytes[i] > cap)) nb++, cur = 0, mem = 0;
    cur += bytes[i];
    mem++;
    if (bytes[i] > cap) nb++, cur = 0, mem = 0;
  }
  if (mem) nb++;
  *count = nb;
  *last = mem ? cur : (n ? bytes[n - 1] : 0);
}

double cf_split_auto_cost(const cf_cost *c, const int64_t *bytes, int n, int64_t cap,
                          int64_t *buckets) {
  int64_t nb, last;
  greedy(bytes, n, cap, &nb, &last);
  if (buckets) *buckets = nb;
  return (double)nb * c->alpha_us * 1e-6 + (double)last / (c->beta_gbps * 1e9);
}

/* Keep cap when it is cheaper, or as cheap (within 0.1%) with fewer buckets. */
static void try_cap(const cf_cost *c, const int64_t *bytes, int n, int64_t cap, int64_t *best,
                    double *best_e, int64_t *best_n) {
  if (cap < 1) return;
  int64_t nb;
  double e = cf_split_auto_cost(c, bytes, n, cap, &nb);
  if (e < *best_e * 0.999 || (e <= *best_e * 1.001 && nb < *best_n))
    *best = cap, *best_e = e, *best_n = nb;
}

int64_t cf_split_auto_cap(const cf_cost *c, const int64_t *bytes, int n) {
  int64_t total = 0;
  for (int i = 0; i < n; i++) total += bytes[i];
  int64_t best = total > 0 ? total : 1, best_n;
  double best_e = cf_split_auto_cost(c, bytes, n, best, &best_n);
  for (double cap = 64.0 * 1024; cap < (double)total; cap *= 1.189207115002721)
    try_cap(c, bytes, n, (int64_t)cap, &best, &best_e, &best_n);
  /* The grid can miss the caps that leave exactly the last k gradients for
   * the exposed tail: try "everything before them" in one, two or three
   * buckets for the last 16 splits. */
  int64_t suffix = 0;
  for (int k = 1; k <= 16 && k < n; k++) {
    suffix += bytes[n - k];
    int64_t head = total - suffix;
    for (int parts = 1; parts <= 3; parts++) try_cap(c, bytes, n, (head + parts - 1) / parts, &best, &best_e, &best_n);
  }
  return best;
}

bool cf_split_segments(const cf_split *s, const int64_t *bytes, int n, int *seg, char *why,
                       size_t len) {
  if (s->kind == CF_SPLIT_INDEX) {
    if (n == 0) return true;
    for (int k = 0; k < s->n; k++)
      if (s->idx[k] > n - 1) {
        snprintf(why, len, "--split index: index %lld is past the last gradient (%d gradients, last index %d)",
                 (long long)s->idx[k], n, n - 1);
        return false;
      }
    if (s->idx[s->n - 1] != n - 1) {
      snprintf(why, len, "--split index: the last index must be the last gradient, %d (got %lld)",
               n - 1, (long long)s->idx[s->n - 1]);
      return false;
    }
    int k = 0;
    for (int i = 0; i < n; i++) {
      while (i > s->idx[k]) k++;
      seg[i] = k;
    }
    return true;
  }
  if (s->kind == CF_SPLIT_SIZE) {
    double total = 0, cum = 0;
    for (int i = 0; i < n; i++) total += (double)bytes[i];
    int k = 0;
    double bound = total * s->pct[0] / 100.0;
    for (int i = 0; i < n; i++) {
      cum += (double)bytes[i];
      while (k < s->n - 1 && cum > bound * (1 + 1e-12)) bound += total * s->pct[++k] / 100.0;
      seg[i] = k;
    }
    return true;
  }
  for (int i = 0; i < n; i++) seg[i] = 0;
  return true;
}
