/* split.c - how fusion=1 collectives are split into buckets (docs/fusion.md).
 *
 *   bytes:CAP[,first=F][,count=C]  greedy buckets in gradient-ready order up to
 *                                  CAP bytes, a hard cap (XLA's combine
 *                                  threshold); the first bucket up to F; at
 *                                  most C members (XLA's count threshold).
 *                                  K/M/G are binary.
 *   ddp:L1[,L2,...][,first=F][,initial]
 *                                  PyTorch DDP's rule
 *                                  (compute_bucket_assignment_by_size in
 *                                  torch/csrc/distributed/c10d/reducer.cpp):
 *                                  a gradient joins the open bucket, which
 *                                  closes once its bytes reach its limit, so
 *                                  the gradient that crosses the limit is in
 *                                  it. Bucket k's limit is Lk (first=F puts F
 *                                  in front), the last repeating. The
 *                                  rebuilt assignment (the default) runs in
 *                                  gradient-ready order; `initial` is DDP's
 *                                  first one, run over the parameters, which
 *                                  DDP takes as the reverse of ready order.
 *   size:P1,P2,...                 HCCL: segments holding P1%, P2%, ... of the
 *                                  gradient bytes; a gradient belongs to the
 *                                  segment in which its last byte falls.
 *   index:I1,I2,...                HCCL: segment k ends at gradient index Ik;
 *                                  the last index is the last gradient.
 *   auto                           bytes:CAP with CAP from the cost model below.
 *   ...,same_dtype                 after any of them: AllGather and AllToAll
 *                                  buckets keep one dtype (XLA's
 *                                  AllGatherCombiner with
 *                                  combine_different_dtypes=false); by
 *                                  default they mix dtypes as bytes.
 *   ...,any_dim                    after any of them (with or without
 *                                  same_dtype, either order): AllGathers and
 *                                  ReduceScatters of different dimensions
 *                                  share buckets (XLA's combine_by_dim=false),
 *                                  each member along its own; by default a
 *                                  bucket has one dim.
 *   ...,no_loops                   after any of them (any order with the
 *                                  others): collectives in a while's body or
 *                                  condition stay alone (XLA's
 *                                  combine_while_loops=false); by default
 *                                  they combine within their body.
 *
 * The auto cost model. One collective of b bytes costs alpha + b/beta on
 * one communication stream. The backward pass produces the gradients in
 * ready order at gamma bytes per second, and a bucket can be sent once its
 * last member is ready. Simulating that queue gives, for any partition, the
 * time the last transfer ends after the last gradient is ready:
 *     exposed = end of the last transfer - S/gamma.
 * A bucket hides behind the production of the next one only if
 * alpha + b/beta <= b_next/gamma, so good partitions grow towards the front:
 * a tail bucket just big enough to amortise alpha, and each earlier bucket
 * as large as the later one can hide (b <= beta*(b_next/gamma - alpha)).
 * auto builds such geometric partitions from the back for tail sizes on a
 * 2^(1/2) grid, also tries plain greedy caps on a 2^(1/4) grid and a single
 * bucket, simulates each and keeps the least exposed one (fewer buckets on
 * a tie within 0.1%). The last bucket - the bytes behind the last-ready
 * gradient - is never more than the tail size it was built for.
 * alpha, beta and gamma come from --cost alpha_us,beta_GBps[,gamma_GBps],
 * else from a measured profile's link for the run's transport and rank
 * count (cf_pass_options.measured_cost: api/profile.c reads the file, the
 * pass only its numbers); the built-in defaults describe 8 ranks on a 100 Gb/s network (250 us, 8
 * GB/s algorithm bandwidth) with a backward pass that takes twice as long as the bare transfer of
 * its gradients (gamma = beta/2).
 */
#include "passes.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

/* A comma list with an empty item (",,", or a comma first or last). */
static bool empty_item(const char *list) {
  size_t n = strlen(list);
  return n == 0 || list[0] == ',' || list[n - 1] == ',' || strstr(list, ",,");
}

static bool split_parse(const char *spec, cf_split *out, char *why, size_t len);

bool cf_split_parse(const char *spec, cf_split *out, char *why, size_t len) {
  /* the flags that may follow any spec, each at most once */
  static const char *const tails[] = {",same_dtype", ",any_dim", ",no_loops"};
  enum { N_TAILS = sizeof tails / sizeof tails[0] };
  bool on[N_TAILS] = {false};
  char head[256];
  size_t n = spec ? strlen(spec) : 0;
  if (n >= sizeof head) {
    snprintf(why, len, "%.64s...: too long", spec);
    return false;
  }
  if (spec) memcpy(head, spec, n + 1);
  for (bool cut = true; cut && spec;) {
    cut = false;
    for (int k = 0; k < N_TAILS; k++) {
      size_t t = strlen(tails[k]);
      if (!on[k] && n > t && strcmp(head + n - t, tails[k]) == 0) {
        head[n -= t] = 0;
        on[k] = cut = true;
      }
    }
  }
  if (!split_parse(spec ? head : NULL, out, why, len)) return false;
  out->same_dtype = on[0];
  out->any_dim = on[1];
  out->no_loops = on[2];
  return true;
}

static bool split_parse(const char *spec, cf_split *out, char *why, size_t len) {
  memset(out, 0, sizeof *out);
  if (!spec || strcmp(spec, "auto") == 0) return true;
  const char *colon = strchr(spec, ':');
  if (colon && colon[1] && empty_item(colon + 1)) {
    snprintf(why, len, "%s: an empty item (separate items with one comma)", spec);
    return false;
  }
  double vals[CF_MAX_SEGMENTS];
  if (strncmp(spec, "bytes:", 6) == 0) {
    out->kind = CF_SPLIT_BYTES;
    const char *p = spec + 6;
    bool have_cap = false;
    while (*p) {
      size_t k = strcspn(p, ",");
      if (!have_cap) {
        if (!cf_bytes_parse(p, k, CF_MAX_BYTES, &out->cap)) {
          snprintf(why, len, "%s: bad cap '%.*s' (e.g. 25M, 64K, 1G)", spec, (int)k, p);
          return false;
        }
        have_cap = true;
      } else if (strncmp(p, "first=", 6) == 0) {
        if (!cf_bytes_parse(p + 6, k - 6, CF_MAX_BYTES, &out->first)) {
          snprintf(why, len, "%s: bad first bucket size '%.*s'", spec, (int)k, p);
          return false;
        }
      } else if (strncmp(p, "count=", 6) == 0) {
        char *end;
        long long c = strtoll(p + 6, &end, 10);
        if (end != p + k || c < 1 || c > CF_MAX_OPERANDS) {
          snprintf(why, len, "%s: count must be in 1..%d", spec, CF_MAX_OPERANDS);
          return false;
        }
        out->count = c;
      } else {
        snprintf(why, len, "%s: unknown option '%.*s' (first=, count=)", spec, (int)k, p);
        return false;
      }
      p += k + (p[k] == ',');
    }
    if (!have_cap) {
      snprintf(why, len, "%s: missing the byte cap", spec);
      return false;
    }
    return true;
  }
  if (strncmp(spec, "ddp:", 4) == 0) {
    out->kind = CF_SPLIT_DDP;
    int64_t first = 0;
    for (const char *p = spec + 4; *p;) {
      size_t k = strcspn(p, ",");
      if (k == 7 && strncmp(p, "initial", 7) == 0) {
        out->initial = true;
      } else if (strncmp(p, "first=", 6) == 0) {
        if (!cf_bytes_parse(p + 6, k - 6, CF_MAX_BYTES, &first) || first < 1) {
          snprintf(why, len, "%s: bad first bucket limit '%.*s'", spec, (int)k, p);
          return false;
        }
      } else if (out->n + (first > 0) == CF_MAX_SEGMENTS) {
        snprintf(why, len, "%s: more than %d limits", spec, CF_MAX_SEGMENTS);
        return false;
      } else if (!cf_bytes_parse(p, k, CF_MAX_BYTES, &out->limit[out->n]) ||
                 out->limit[out->n] < 1) {
        snprintf(why, len, "%s: bad limit '%.*s' (e.g. 25M, 64K, 1G; first=, initial)", spec,
                 (int)k, p);
        return false;
      } else {
        out->n++;
      }
      p += k + (p[k] == ',');
    }
    if (!out->n) {
      snprintf(why, len, "%s: missing the bucket limit (ddp:25M)", spec);
      return false;
    }
    if (first) {
      memmove(out->limit + 1, out->limit, (size_t)out->n * sizeof out->limit[0]);
      out->limit[0] = first;
      out->n++;
    }
    out->cap = out->limit[out->n - 1];
    return true;
  }
  if (strncmp(spec, "size:", 5) == 0) {
    out->kind = CF_SPLIT_SIZE;
    char w[128];
    if (!parse_list(spec + 5, vals, &out->n, w, sizeof w)) {
      snprintf(why, len, "%s: %s", spec, w);
      return false;
    }
    double sum = 0;
    for (int i = 0; i < out->n; i++) {
      if (!(vals[i] > 0)) {
        snprintf(why, len, "%s: percentages must be positive", spec);
        return false;
      }
      out->pct[i] = vals[i];
      sum += vals[i];
    }
    if (fabs(sum - 100.0) > 1e-6) {
      snprintf(why, len, "%s: percentages sum to %g, not 100", spec, sum);
      return false;
    }
    return true;
  }
  if (strncmp(spec, "index:", 6) == 0) {
    out->kind = CF_SPLIT_INDEX;
    char w[128];
    if (!parse_list(spec + 6, vals, &out->n, w, sizeof w)) {
      snprintf(why, len, "%s: %s", spec, w);
      return false;
    }
    for (int i = 0; i < out->n; i++) {
      if (vals[i] < 0 || vals[i] != floor(vals[i]) || vals[i] > CF_MAX_NODES) {
        snprintf(why, len, "%s: indices must be non-negative integers", spec);
        return false;
      }
      out->idx[i] = (int64_t)vals[i];
      if (i && out->idx[i] <= out->idx[i - 1]) {
        snprintf(why, len, "%s: indices must be strictly ascending (%lld after %lld)", spec,
                 (long long)out->idx[i], (long long)out->idx[i - 1]);
        return false;
      }
    }
    return true;
  }
  snprintf(why, len,
           "%s: expected auto, bytes:CAP[,first=F][,count=C], ddp:CAP[,first=F][,initial], "
           "size:P1,P2,... or index:I1,I2,...",
           spec);
  return false;
}

int cf_split_ddp_partition(const cf_split *s, const int64_t *bytes, int n, int *part) {
  /* the initial assignment walks the parameters, the reverse of ready
   * order, and numbers its buckets from the far end */
  int nb = 0, lim = 0;
  int64_t cur = 0;
  for (int k = 0; k < n; k++) {
    int i = s->initial ? n - 1 - k : k;
    part[i] = nb;
    if (cur > INT64_MAX - bytes[i]) cur = INT64_MAX - bytes[i];
    cur += bytes[i];
    if (cur >= s->limit[lim] && k + 1 < n) {
      nb++;
      cur = 0;
      if (lim + 1 < s->n) lim++;
    }
  }
  if (n == 0) return 0;
  if (s->initial)
    for (int i = 0; i < n; i++)
      part[i] = nb - part[i];
  return nb + 1;
}

bool cf_cost_parse(const char *spec, cf_cost *out, char *why, size_t len) {
  out->alpha_us = CF_COST_DEFAULT_ALPHA_US;
  out->beta_gbps = CF_COST_DEFAULT_BETA_GBPS;
  out->gamma_gbps = CF_COST_DEFAULT_BETA_GBPS / 2;
  if (!spec) return true;
  char *end;
  errno = 0;
  double a = strtod(spec, &end), gm = 0;
  if (end == spec || *end != ',') goto bad;
  const char *p = end + 1;
  double b = strtod(p, &end);
  if (end == p || errno || !(a >= 0) || !(b > 0) || !isfinite(a) || !isfinite(b)) goto bad;
  if (*end == ',') {
    p = end + 1;
    gm = strtod(p, &end);
    if (end == p || errno || !(gm > 0) || !isfinite(gm)) goto bad;
  }
  if (*end) goto bad;
  out->alpha_us = a;
  out->beta_gbps = b;
  out->gamma_gbps = gm > 0 ? gm : b / 2;
  return true;
bad:
  snprintf(why, len, "%s: expected alpha_us,beta_GBps[,gamma_GBps] (e.g. 250,8)", spec);
  return false;
}

double cf_split_exposed(const cf_cost *c, const int64_t *bytes, int n, const int *part) {
  const double alpha = c->alpha_us * 1e-6, beta = c->beta_gbps * 1e9, gamma = c->gamma_gbps * 1e9;
  double cum = 0, end = 0, size = 0;
  for (int i = 0; i < n; i++) {
    cum += (double)bytes[i];
    size += (double)bytes[i];
    if (i + 1 < n && part[i + 1] == part[i]) continue;
    double ready = cum / gamma, start = ready > end ? ready : end;
    end = start + alpha + size / beta;
    size = 0;
  }
  return n ? (end - cum / gamma) * 1e6 : 0;
}

/* Greedy forward packing with one cap (a tensor above it is alone). */
static int part_greedy(const int64_t *bytes, int n, int64_t cap, int *part) {
  int b = 0, mem = 0;
  int64_t cur = 0;
  for (int i = 0; i < n; i++) {
    if (mem && (cur + bytes[i] > cap || bytes[i] > cap)) b++, cur = 0, mem = 0;
    part[i] = b;
    cur += bytes[i];
    mem++;
  }
  return n ? b + 1 : 0;
}

/* Geometric packing from the back: the last bucket up to tail bytes, each
 * earlier one as large as the later one can hide. */
static int part_geometric(const cf_cost *c, const int64_t *bytes, int n, double tail, int *part) {
  const double alpha = c->alpha_us * 1e-6, beta = c->beta_gbps * 1e9, gamma = c->gamma_gbps * 1e9;
  double cap = tail, cur = 0;
  int b = 0, mem = 0;
  for (int i = n - 1; i >= 0; i--) {
    if (mem && cur + (double)bytes[i] > cap) {
      double hide = beta * (cur / gamma - alpha);
      cap = hide > cur ? hide : cur;
      b++, cur = 0, mem = 0;
    }
    part[i] = b;
    cur += (double)bytes[i];
    mem++;
  }
  int nb = n ? b + 1 : 0;
  for (int i = 0; i < n; i++) part[i] = nb - 1 - part[i]; /* number from the front */
  return nb;
}

int cf_split_auto_partition(const cf_cost *c, const int64_t *bytes, int n, int *part,
                            double *exposed_us) {
  int64_t total = 0;
  for (int i = 0; i < n; i++) total += bytes[i];
  int *tmp = malloc(((size_t)n + 1) * sizeof(int));
  for (int i = 0; i < n; i++) part[i] = 0; /* one bucket */
  int best_n = n ? 1 : 0;
  double best = cf_split_exposed(c, bytes, n, part);
  if (!tmp) {
    if (exposed_us) *exposed_us = best;
    return best_n;
  }
  for (int pass = 0; pass < 2; pass++) {
    double step = pass ? 1.189207115002721 : 1.4142135623730951;
    for (double cap = 64.0 * 1024; cap < (double)total; cap *= step) {
      int nb = pass ? part_greedy(bytes, n, (int64_t)cap, tmp) : part_geometric(c, bytes, n, cap, tmp);
      double e = cf_split_exposed(c, bytes, n, tmp);
      if (e < best * 0.999 || (e <= best * 1.001 && nb < best_n)) {
        best = e;
        best_n = nb;
        memcpy(part, tmp, (size_t)n * sizeof(int));
      }
    }
  }
  free(tmp);
  if (exposed_us) *exposed_us = best;
  return best_n;
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
