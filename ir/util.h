/* util.h - the small helpers every module shares, once: FNV-1a hashing,
 * open-addressed name indexes, the monotonic clock and integer parsing.
 * Included by ir.h; it depends on nothing but libc, so a file that needs
 * only these (codegen's object cache) may include it alone.
 */
#ifndef COLLFUSE_IR_UTIL_H
#define COLLFUSE_IR_UTIL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* ---- FNV-1a (64 bit) ---- */
#define CF_FNV_SEED UINT64_C(0xcbf29ce484222325) /* the offset basis */
/* h carried on over p[0..n): cf_fnv1a(CF_FNV_SEED, p, n) hashes p alone. */
uint64_t cf_fnv1a(uint64_t h, const void *p, size_t n);
/* FNV-1a of the NUL-terminated s. */
uint64_t cf_hash_str(const char *s);

/* ---- name indexes ----
 * Open addressing with linear probing over an array of items whose name (a
 * const char *) sits off bytes into each item, items stride bytes apart.
 * slots[0..cap) hold item index + 1, 0 when empty; cap is a power of two
 * and the caller keeps the table at most half full (and grows it by
 * rebuilding). */
/* The slot holding the item named name, or the empty slot where it goes
 * (store i + 1 there to add item i). cap > 0. */
int *cf_name_slot(int *slots, size_t cap, const void *items, size_t off, size_t stride,
                  const char *name);
/* The index of the item named name, -1 when absent (or cap is 0). */
int cf_name_find(const int *slots, size_t cap, const void *items, size_t off, size_t stride,
                 const char *name);

/* ---- clock ---- */
/* Seconds on the monotonic clock (deadlines, timings). */
double cf_now(void);

/* ---- integers ---- */
/* The decimal integer that is the whole of s, in [lo, hi]. */
bool cf_parse_int(const char *s, int64_t lo, int64_t hi, int64_t *out);
/* The decimal integer at *p, in [lo, hi]; *p moves past it. */
bool cf_parse_int_prefix(const char **p, int64_t lo, int64_t hi, int64_t *out);

#endif
