/* options.c - option values checked once, for cf_options_set and for the
 * driver's option tables alike: the same value is accepted or refused, with
 * the same words, whether it comes as cf_options_set(o, "seed", v) or as
 * `--seed v`; only the name in the message differs ("option seed",
 * "--seed").
 */
#include "api.h"

#include <stdio.h>
#include <stdlib.h>

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
