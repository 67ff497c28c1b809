/* options.c - option values checked once, for cf_options_set and for the
 * driver's option tables alike: the same value is accepted or refused, with
 * the same words, whether it comes as cf_options_set(o, "seed", v) or as
 * `--seed v`; only the name in the message differs ("option seed",
 * "--seed").
 */
#include "api.h"

#include "../executor/algo.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

bool cf_option_seed(const char *name, const char *v, uint64_t *out, char *why, size_t len) {
  int64_t x;
  if (!cf_parse_int(v, 0, INT64_MAX, &x)) {
    snprintf(why, len, "%s wants a number >= 0, got '%s'", name, v);
    return false;
  }
  *out = (uint64_t)x;
  return true;
}

bool cf_option_timeout(const char *name, const char *v, double *out, char *why, size_t len) {
  char *e;
  double t = strtod(v, &e);
  if (e == v || *e || !(t > 0) || t > 86400) {
    snprintf(why, len, "%s wants seconds in (0, 86400], got '%s'", name, v);
    return false;
  }
  *out = t;
  return true;
}

bool cf_option_int(const char *name, const char *v, int64_t lo, int64_t hi, int64_t *out, char *why,
                   size_t len) {
  if (cf_parse_int(v, lo, hi, out)) return true;
  snprintf(why, len, "%s wants an integer in %lld..%lld, got '%s'", name, (long long)lo,
           (long long)hi, v);
  return false;
}

bool cf_option_size(const char *name, const char *v, int64_t lo, int64_t hi, int64_t *out,
                    char *why, size_t len) {
  int64_t b;
  if (cf_bytes_parse(v, strlen(v), hi, &b) && b >= lo) {
    *out = b;
    return true;
  }
  snprintf(why, len, "%s wants a size such as 512M or 4G, got '%s'", name, v);
  return false;
}

bool cf_option_choice(const char *name, const char *choices, const char *v, char *why, size_t len) {
  char words[16][32], list[600] = "", dym[96];
  int n = 0;
  for (const char *p = choices; *p && n < 16;) {
    size_t k = strcspn(p, "|");
    if (k == strlen(v) && strncmp(p, v, k) == 0) return true;
    snprintf(words[n++], sizeof words[0], "%.*s", (int)k, p);
    p += k + (p[k] == '|');
  }
  cf_suggest s;
  cf_suggest_init(&s, v);
  size_t used = 0;
  for (int i = 0; i < n && used < sizeof list; i++) {
    cf_suggest_add(&s, words[i]);
    used += (size_t)snprintf(list + used, sizeof list - used, "%s%s",
                             i == 0       ? ""
                             : i == n - 1 ? " or "
                                          : ", ",
                             words[i]);
  }
  snprintf(why, len, "%s wants %s, got '%s'%s", name, list, v,
           cf_did_you_mean(s.best, dym, sizeof dym));
  return false;
}

bool cf_option_algo(const char *name, const char *v, bool with_native, cf_algo_req *out, char *why,
                    size_t len) {
  if (cf_algo_parse(v, with_native, out)) return true; /* a name or an alias */
  char choices[256];
  cf_option_choice(name, cf_algo_choices(with_native, "|", "|", choices, sizeof choices), v, why,
                   len);
  return false;
}
