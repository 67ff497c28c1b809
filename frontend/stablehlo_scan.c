/* stablehlo_scan.c - the scanner of the StableHLO reader: the text cleaned
 * in place (`// comments` and every `loc(...)` become spaces, so line
 * numbers stay, and brackets are checked to pair up), statements (a newline
 * outside brackets ends one, unless a region line such as `cond {`
 * continues it), top-level searches that know `<...>`, attribute values,
 * and SSA uses. stablehlo_attr.c and stablehlo.c build on it.
 *
 * Modules, functions and regions nest, and each level scans its own
 * statements, stepping over the groups inside them. So that a group is not
 * rescanned by every level around it (depth times the text), cleaning
 * records where each large bracket group ends and how many lines it holds
 * (sh_reader.groups): cf_sh_past and cf_sh_count_nl jump over one in
 * O(log n); a small group costs its own length, once per scan of its level.
 */
#include "stablehlo_internal.h"

#include <stdlib.h>
#include <string.h>

static bool is_open(char c) { return c == '(' || c == '[' || c == '{'; }
static bool is_close(char c) { return c == ')' || c == ']' || c == '}'; }

/* ------------------------------------------------------------------ */
/* scanning                                                           */

enum { SH_BIG_GROUP = 64 }; /* bytes from an open bracket past its close: recorded */

/* Blank `// ...` and loc(...) (outside strings) and check that brackets
 * pair up and strings end on their line; record the large groups. */
cf_status cf_sh_clean(sh_reader *s) {
  hlo_reader *r = s->r;
  char *p = r->text, *e = (char *)r->end;
  char open[HLO_MAX_NEST];
  int open_line[HLO_MAX_NEST], depth = 0, line = 1;
  size_t cap = 0, entry[HLO_MAX_NEST]; /* each open group's index in s->groups */
  while (p < e) {
    char c = *p;
    if (c == '\n') {
      line++;
      p++;
    } else if (c == '"') {
      char *q = p + 1;
      while (q < e && *q != '"' && *q != '\n')
        q += (*q == '\\' && e - q >= 2 && q[1] != '\n') ? 2 : 1;
      if (q >= e || *q != '"') return cf_hlo_fail(r, line, "unterminated string");
      p = q + 1;
    } else if (c == '/' && e - p >= 2 && p[1] == '*') {
      return cf_hlo_fail(r, line, "unexpected '/*' (MLIR comments are '//')");
    } else if (c == '/' && e - p >= 2 && p[1] == '/') {
      while (p < e && *p != '\n')
        *p++ = ' ';
    } else if (c == 'l' && e - p >= 4 && !memcmp(p, "loc(", 4) &&
               (p == r->text || !(is_name_char(p[-1]) || p[-1] == '#'))) {
      int d = 0, l0 = line;
      char *q = p + 3;
      memset(p, ' ', 3);
      do { /* blank through the matching ')', strings included */
        if (*q == '"') {
          *q++ = ' ';
          while (q < e && *q != '"' && *q != '\n') {
            if (*q == '\\' && e - q >= 2 && q[1] != '\n') *q++ = ' ';
            *q++ = ' ';
          }
          if (q >= e || *q != '"') return cf_hlo_fail(r, line, "unterminated string");
        } else if (*q == '\n') {
          line++;
          q++;
          continue;
        } else {
          d += (*q == '(') - (*q == ')');
        }
        *q++ = ' ';
      } while (q < e && d > 0);
      if (d > 0) return cf_hlo_fail(r, l0, "'loc(' is never closed");
      p = q;
    } else if (is_open(c)) {
      if (depth == HLO_MAX_NEST)
        return cf_hlo_fail(r, line, "brackets nested deeper than %d", HLO_MAX_NEST);
      /* every open group has an entry, dropped at its close when small:
       * the groups inside a small one are small, so it is the last entry */
      if (s->n_groups == cap) {
        size_t nc = cap ? 2 * cap : 64;
        sh_group *more = realloc(s->groups, nc * sizeof *more);
        if (!more) return cf_hlo_oom(r, line);
        s->groups = more;
        cap = nc;
      }
      entry[depth] = s->n_groups;
      s->groups[s->n_groups++] = (sh_group){.open = (size_t)(p - r->text), .nl = line};
      open[depth] = c;
      open_line[depth++] = line;
      p++;
    } else if (is_close(c)) {
      char want = c == ')' ? '(' : c == ']' ? '[' : '{';
      if (!depth || open[depth - 1] != want) return cf_hlo_fail(r, line, "unbalanced '%c'", c);
      depth--;
      p++;
      sh_group *g = &s->groups[entry[depth]];
      if ((size_t)(p - r->text) - g->open < SH_BIG_GROUP) {
        s->n_groups--; /* small, so the last entry */
      } else {
        g->past = (size_t)(p - r->text);
        g->nl = line - g->nl;
      }
    } else if (c == 0 || c == '\'') {
      return cf_hlo_fail(r, line, c ? "unexpected character '''" : "NUL byte in MLIR text");
    } else {
      p++;
    }
  }
  if (depth) return cf_hlo_fail(r, open_line[depth - 1], "'%c' is never closed", open[depth - 1]);
  return CF_OK;
}

/* The recorded group opening at p, NULL when p opens none (or a small one). */
static const sh_group *group_at(const sh_reader *s, const char *p) {
  const char *t = s->r->text;
  if (p < t || p >= s->r->end || !is_open(*p)) return NULL;
  size_t off = (size_t)(p - t), lo = 0, hi = s->n_groups;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    if (s->groups[mid].open < off)
      lo = mid + 1;
    else
      hi = mid;
  }
  return lo < s->n_groups && s->groups[lo].open == off ? &s->groups[lo] : NULL;
}

const char *cf_sh_past(const sh_reader *s, const char *p, const char *e) {
  const sh_group *g = group_at(s, p);
  if (!g) return cf_hlo_past(p, e);
  const char *q = s->r->text + g->past;
  return q <= e ? q : e;
}

int cf_sh_count_nl(const sh_reader *s, const char *p, const char *e) {
  int n = 0;
  while (p < e) {
    const sh_group *g = is_open(*p) ? group_at(s, p) : NULL;
    if (g && s->r->text + g->past <= e) {
      n += g->nl;
      p = s->r->text + g->past;
    } else {
      n += *p++ == '\n';
    }
  }
  return n;
}

/* Past a bracket group or string at p, else one character. */
const char *cf_sh_step(const sh_reader *s, const char *p, const char *e) {
  return is_open(*p) || *p == '"' ? cf_sh_past(s, p, e) : p + 1;
}

const char *cf_sh_find_top(const sh_reader *s, const char *p, const char *e, char ch) {
  int angle = 0;
  const char *prev = NULL;
  while (p < e) {
    if (*p == ch && !angle) return p;
    if (*p == '<') angle++;
    if (*p == '>' && angle && !(prev && *prev == '-')) angle--;
    prev = p;
    p = cf_sh_step(s, p, e);
  }
  return NULL;
}

/* The last top-level ch in [p, e), or NULL. */
const char *cf_sh_find_last_top(const sh_reader *s, const char *p, const char *e, char ch) {
  const char *last = NULL;
  while ((p = cf_sh_find_top(s, p, e, ch))) {
    last = p;
    p++;
  }
  return last;
}

/* A line that continues the op before it with a region: `cond {`, `do {`,
 * `reducer(%a: T, %b: T) {` (a bare word, no dialect, then a brace); or
 * one no statement starts so, as a long op is wrapped: its attributes
 * `{...}` or `<{...}>`, its regions `({...})` or its type `: T` on lines of
 * their own, a type broken at its arrow, `(T, T)\n -> (T, T)` or
 * `(T) ->\n T` (p is the newline between the two lines). */
static bool continues(const sh_reader *s, const char *start, const char *p, const char *e) {
  const char *b = p;
  while (b > start && (b[-1] == ' ' || b[-1] == '\t' || b[-1] == '\r'))
    b--;
  if (b - start >= 2 && b[-2] == '-' && b[-1] == '>') return true;
  p = cf_hlo_skip(p, e);
  if (p < e && ((*p == '{' && !(e - p >= 2 && p[1] == '-')) || *p == '(' || *p == '<' || *p == ':'))
    return true; /* (`{-# dialect_resources ... #-}` starts a statement of its own) */
  if (e - p >= 2 && p[0] == '-' && p[1] == '>') return true;
  const char *w = p;
  while (p < e && (isalnum((unsigned char)*p) || *p == '_'))
    p++;
  if (p == w || (p < e && *p == '.')) return false;
  p = cf_hlo_skip(p, e);
  if (p < e && *p == '(') p = cf_hlo_skip(cf_sh_past(s, p, e), e);
  return p < e && *p == '{';
}

/* The end of the statement at p: the first newline outside brackets that
 * no region line continues. */
const char *cf_sh_stmt_end(const sh_reader *s, const char *p, const char *e) {
  const char *start = p;
  for (;;) {
    while (p < e && *p != '\n')
      p = cf_sh_step(s, p, e);
    if (p >= e || !continues(s, start, p, e)) return p;
    p++;
  }
}

/* word at p, ending at a character that is no part of a name */
bool cf_sh_word_at(const char *p, const char *e, const char *w) {
  size_t n = strlen(w);
  return (size_t)(e - p) >= n && !memcmp(p, w, n) &&
         ((size_t)(e - p) == n || !(isalnum((unsigned char)p[n]) || p[n] == '_' || p[n] == '.'));
}

/* The end of an attribute value at p: a ',' or an unmatched closer. */
static const char *value_end(const sh_reader *s, const char *p, const char *e) {
  int angle = 0;
  for (const char *q = p; q < e; q = cf_sh_step(s, q, e)) {
    if ((*q == ',' && !angle) || is_close(*q)) return q;
    if (*q == '<') angle++;
    if (*q == '>' && q > p && q[-1] != '-' && !angle--) return q;
  }
  return e;
}

bool cf_sh_attr(const sh_reader *s, const char *p, const char *e, const char *key, cf_span *val) {
  size_t n = strlen(key);
  for (const char *q = p; q < e;) {
    if (!cf_sh_word_at(q, e, key) || (q > p && (is_name_char(q[-1]) || q[-1] == '#'))) {
      /* past strings, and regions `({ ... })`: an op's attributes are
       * outside them (a nested op's are inside) */
      bool region = *q == '(' && *cf_hlo_skip(q + 1, e) == '{';
      q = *q == '"' || region ? cf_sh_past(s, q, e) : q + 1;
      continue;
    }
    const char *v = cf_hlo_skip(q + n, e);
    if (v < e && *v == '=') {
      v = cf_hlo_skip(v + 1, e);
      /* a bracketed value ends with its bracket (pretty attributes such as
       * in_shardings=[...] out_shardings=[...] are separated by spaces) */
      const char *ve = v < e && (*v == '[' || *v == '{') ? cf_sh_past(s, v, e) : value_end(s, v, e);
      while (ve > v && is_space(ve[-1]))
        ve--;
      *val = (cf_span){v, (size_t)(ve - v)};
      return true;
    }
    if (v >= e || *v == ',' || *v == '}' || *v == '>') { /* a unit attribute */
      *val = (cf_span){q, 0};
      return true;
    }
    q += n;
  }
  return false;
}

/* An SSA use at p (%name or %name#k): its name without '%'. */
const char *cf_sh_read_use(const char *p, const char *e, cf_span *out) {
  out->p = ++p;
  while (p < e && (isalnum((unsigned char)*p) || *p == '_' || *p == '$' || *p == '.' || *p == '-'))
    p++;
  if (p < e && *p == '#' && p + 1 < e && isdigit((unsigned char)p[1]))
    for (p++; p < e && isdigit((unsigned char)*p); p++) {
    }
  out->n = (size_t)(p - out->p);
  return p;
}

/* Is the % token ending at qe a definition: a block argument `%a: T`, a
 * result count `%0:2`, or followed by '='? (`%b : T` is a use.) */
static bool is_def(const char *qe, const char *e) {
  if (qe < e && *qe == ':') return true;
  qe = cf_hlo_skip(qe, e);
  return qe < e && *qe == '=';
}

/* The %uses in [p, e): top level and inside (...) / [...] groups; brace
 * groups (regions, attribute dicts) only when deep. */
cf_status cf_sh_collect_uses(sh_reader *s, int line, const char *p, const char *e, bool deep,
                             const char ***out, int *n, int *cap) {
  while (p < e) {
    if (*p == '"') {
      p = cf_sh_past(s, p, e);
    } else if (*p == '{' && !deep) {
      p = cf_sh_past(s, p, e);
    } else if (*p == '%') {
      cf_span u;
      const char *q = cf_sh_read_use(p, e, &u);
      if (u.n && !is_def(q, e)) {
        if (*n == CF_MAX_OPERANDS)
          return cf_hlo_fail(s->r, line, "op with more than %d operands", CF_MAX_OPERANDS);
        if (*n == *cap) {
          int nc = *cap ? 2 * *cap : 8;
          const char **more = realloc(*out, (size_t)nc * sizeof *more);
          if (!more) return cf_hlo_oom(s->r, line);
          *out = more;
          *cap = nc;
        }
        if (u.n > CF_MAX_NAME)
          return cf_hlo_fail(s->r, line, "value name longer than %d bytes", CF_MAX_NAME);
        if (!((*out)[(*n)++] = cf_hlo_str(s->r, u.p, u.n))) return cf_hlo_oom(s->r, line);
      }
      p = q > p + 1 ? q : p + 1;
    } else {
      p++;
    }
  }
  return CF_OK;
}

/* The end of the types at p: the end, or a region or keyword after them
 * (stablehlo.while's `cond {...} do {...}`). */
const char *cf_sh_types_end(const sh_reader *s, const char *p, const char *e) {
  int angle = 0;
  for (const char *q = p; q < e; q = cf_sh_step(s, q, e)) {
    if (*q == '<') angle++;
    if (*q == '>' && angle && q[-1] != '-') angle--;
    if (angle) continue;
    if (*q == '{' && q > p && is_space(q[-1])) return q;
    if (isalpha((unsigned char)*q) && q > p && is_space(q[-1])) {
      const char *w = q;
      while (w < e && (isalnum((unsigned char)*w) || *w == '_' || *w == '.'))
        w++;
      bool type = w < e && *w == '<'; /* tensor<...>, tuple<...> */
      type |= w - q <= 4 && (*q == 'f' || *q == 'i' || *q == 'u' || *q == 'b') &&
              isdigit((unsigned char)w[-1]); /* a bare element type */
      if (!type) return q;
    }
  }
  return e;
}
