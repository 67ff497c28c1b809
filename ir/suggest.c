/* suggest.c - "did you mean" for every name a user types: ops, dtypes,
 * reductions, targets, passes, commands and options.
 *
 * A caller feeds the candidates of its own table to a cf_suggest and asks
 * for the closest one. Distance is Damerau-Levenshtein (a swap of two
 * neighbours costs one, as in "AllRedcue"), compared without case, so
 * "allreduce" finds "AllReduce". A candidate is offered only when it is
 * near enough for the user to have meant it: at most a third of the word's
 * length (at least 1, at most 3) edits away.
 */
#include "ir.h"

#include <ctype.h>
#include <stdio.h>
#include <string.h>

enum { SUGGEST_MAX_LEN = 64 }; /* longer words get no suggestion */

int cf_edit_distance(const char *a, const char *b) {
  size_t n = strlen(a), m = strlen(b);
  if (n > SUGGEST_MAX_LEN || m > SUGGEST_MAX_LEN) return (int)(n > m ? n : m);
  int d[SUGGEST_MAX_LEN + 1][SUGGEST_MAX_LEN + 1];
  for (size_t i = 0; i <= n; i++)
    d[i][0] = (int)i;
  for (size_t j = 0; j <= m; j++)
    d[0][j] = (int)j;
  for (size_t i = 1; i <= n; i++)
    for (size_t j = 1; j <= m; j++) {
      int cost = tolower((unsigned char)a[i - 1]) != tolower((unsigned char)b[j - 1]);
      int v = d[i - 1][j] + 1;
      if (d[i][j - 1] + 1 < v) v = d[i][j - 1] + 1;
      if (d[i - 1][j - 1] + cost < v) v = d[i - 1][j - 1] + cost;
      if (i > 1 && j > 1 && tolower((unsigned char)a[i - 1]) == tolower((unsigned char)b[j - 2]) &&
          tolower((unsigned char)a[i - 2]) == tolower((unsigned char)b[j - 1]) &&
          d[i - 2][j - 2] + 1 < v)
        v = d[i - 2][j - 2] + 1;
      d[i][j] = v;
    }
  return d[n][m];
}

void cf_suggest_init(cf_suggest *s, const char *word) {
  size_t n = word ? strlen(word) : 0;
  int limit = (int)(n / 3);
  s->word = word;
  s->best = NULL;
  s->dist = (limit < 1 ? 1 : limit > 3 ? 3 : limit) + 1; /* anything at least this far is refused */
}

void cf_suggest_add(cf_suggest *s, const char *candidate) {
  if (!s->word || !candidate || !*candidate || strcmp(s->word, candidate) == 0) return;
  int d = cf_edit_distance(s->word, candidate);
  if (d < s->dist) {
    s->dist = d;
    s->best = candidate;
  }
}

const char *cf_did_you_mean(const char *best, char *buf, size_t len) {
  if (!len) return buf;
  if (best)
    snprintf(buf, len, "; did you mean '%s'?", best);
  else
    buf[0] = 0;
  return buf;
}

const char *cf_op_suggest(const char *name) {
  cf_suggest s;
  cf_suggest_init(&s, name);
  for (int i = 1; i < CF_OP_COUNT; i++)
    cf_suggest_add(&s, cf_op_table[i].name);
  for (size_t i = 0; cf_op_alias_name(i); i++)
    cf_suggest_add(&s, cf_op_alias_name(i));
  return s.best;
}

const char *cf_dtype_suggest(const char *name) {
  cf_suggest s;
  cf_suggest_init(&s, name);
  for (int i = 1; i < CF_DT_COUNT; i++)
    cf_suggest_add(&s, cf_dtype_name((cf_dtype)i));
  return s.best;
}

const char *cf_reduction_suggest(const char *name) {
  cf_suggest s;
  cf_suggest_init(&s, name);
  for (int i = 0; i < CF_RED_COUNT; i++)
    cf_suggest_add(&s, cf_reduction_name((cf_reduction)i));
  return s.best;
}

/* HLO's collective opcodes (the IR names and ops.def's aliases cover the
 * others): a foreign op close to one of these was probably meant as it. */
static const char *const hlo_collectives[] = {
    "all-reduce",     "all-reduce-start", "all-gather",         "all-gather-start",
    "reduce-scatter", "all-to-all",       "collective-permute", "collective-broadcast",
};

/* StableHLO's and MHLO's (the dialect included, as the StableHLO reader
 * names a foreign op). */
static const char *const mlir_collectives[] = {
    "stablehlo.all_reduce",         "stablehlo.all_gather",         "stablehlo.reduce_scatter",
    "stablehlo.all_to_all",         "stablehlo.collective_permute", "stablehlo.collective_broadcast",
    "mhlo.all_reduce",              "mhlo.all_gather",              "mhlo.reduce_scatter",
    "mhlo.all_to_all",              "mhlo.collective_permute",      "mhlo.collective_broadcast",
};

static bool starts_nocase(const char *s, const char *prefix) {
  for (; *prefix; s++, prefix++)
    if (tolower((unsigned char)*s) != tolower((unsigned char)*prefix)) return false;
  return true;
}

/* a name that only differs in case or that extends a collective's is
 * another op (HLO's reduce and broadcast, all-reduce-done, BroadcastTo),
 * and one that is a collective's in another format is no typo either */
static void add_collective(cf_suggest *s, const char *candidate, bool *exact) {
  if (!starts_nocase(s->word, candidate))
    cf_suggest_add(s, candidate);
  else if (strlen(s->word) == strlen(candidate))
    *exact = true;
}

const char *cf_collective_suggest(const char *name) {
  cf_suggest s;
  bool exact = false;
  if (!name) return NULL;
  cf_suggest_init(&s, name);
  for (int i = 1; i < CF_OP_COUNT; i++)
    if (cf_op_is_collective((cf_op)i)) add_collective(&s, cf_op_table[i].name, &exact);
  for (size_t i = 0; i < cf_op_alias_count; i++)
    if (cf_op_is_collective(cf_op_aliases[i].op)) add_collective(&s, cf_op_aliases[i].name, &exact);
  for (size_t i = 0; i < sizeof hlo_collectives / sizeof hlo_collectives[0]; i++)
    add_collective(&s, hlo_collectives[i], &exact);
  for (size_t i = 0; i < sizeof mlir_collectives / sizeof mlir_collectives[0]; i++)
    add_collective(&s, mlir_collectives[i], &exact);
  return exact ? NULL : s.best;
}
