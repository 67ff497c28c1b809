/* util.c - the small helpers every module shares (util.h): one FNV-1a, one
 * open-addressed name index, one clock, one integer parser, instead of a
 * copy per file.
 */
#include "util.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

uint64_t cf_fnv1a(uint64_t h, const void *p, size_t n) {
  const unsigned char *b = p;
  for (size_t i = 0; i < n; i++)
    h = (h ^ b[i]) * UINT64_C(0x100000001b3);
  return h;
}

uint64_t cf_hash_str(const char *s) { return cf_fnv1a(CF_FNV_SEED, s, strlen(s)); }

static const char *item_name(const void *items, size_t off, size_t stride, int i) {
  const char *name;
  memcpy(&name, (const char *)items + (size_t)i * stride + off, sizeof name);
  return name;
}

int *cf_name_slot(int *slots, size_t cap, const void *items, size_t off, size_t stride,
                  const char *name) {
  size_t h = (size_t)cf_hash_str(name) & (cap - 1);
  while (slots[h] && strcmp(item_name(items, off, stride, slots[h] - 1), name) != 0)
    h = (h + 1) & (cap - 1);
  return &slots[h];
}

int cf_name_find(const int *slots, size_t cap, const void *items, size_t off, size_t stride,
                 const char *name) {
  if (!cap) return -1;
  return *cf_name_slot((int *)slots, cap, items, off, stride, name) - 1;
}

double cf_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

bool cf_parse_int_prefix(const char **p, int64_t lo, int64_t hi, int64_t *out) {
  char *e;
  errno = 0;
  long long x = strtoll(*p, &e, 10);
  if (errno || e == *p || x < lo || x > hi) return false;
  *out = x;
  *p = e;
  return true;
}

bool cf_parse_int(const char *s, int64_t lo, int64_t hi, int64_t *out) {
  const char *p = s;
  int64_t x;
  if (!cf_parse_int_prefix(&p, lo, hi, &x) || *p) return false;
  *out = x;
  return true;
}
