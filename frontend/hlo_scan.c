/* hlo_scan.c - the bottom of the XLA HLO text reader: its errors, arena
 * strings, name maps, the scanner over brackets, strings and comments, and
 * attribute lookups. hlo.c parses with it, hlo_groups.c and hlo_eval.c read
 * attribute values with it; it calls none of them.
 */
#include "hlo_reader.h"

#include <ctype.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

/* ------------------------------------------------------------------ */
/* errors, strings, maps                                              */

cf_status cf_hlo_fail(hlo_reader *r, int line, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  cf_status st = cf_reader_verror(r->ctx, r->oom, r->file, line, fmt, ap);
  va_end(ap);
  return st;
}

cf_status cf_hlo_oom(hlo_reader *r, int line) {
  r->oom = true;
  return cf_hlo_fail(r, line, "out of memory");
}

const char *cf_hlo_str(hlo_reader *r, const char *p, size_t n) {
  char *s = cf_arena_strndup(&r->scratch, p, n);
  if (!s) r->oom = true;
  return s;
}

bool cf_hlo_map_build(cf_arena *a, strmap *m, const char **keys, int n, int *dup) {
  size_t cap = 16;
  while (cap < (size_t)n * 2)
    cap *= 2;
  m->keys = keys;
  m->cap = cap;
  if (!(m->slot = cf_arena_array(a, cap, sizeof(int)))) return false;
  *dup = -1;
  for (int i = 0; i < n; i++) {
    int *slot = cf_name_slot(m->slot, cap, keys, 0, sizeof *keys, keys[i]);
    if (!*slot)
      *slot = i + 1;
    else if (*dup < 0)
      *dup = i;
  }
  return true;
}

int cf_hlo_map_find(const strmap *m, const char *k) {
  return cf_name_find(m->slot, m->cap, m->keys, 0, sizeof *m->keys, k);
}

/* ------------------------------------------------------------------ */
/* scanning                                                           */

static bool is_open(char c) { return c == '(' || c == '[' || c == '{'; }
static bool is_close(char c) { return c == ')' || c == ']' || c == '}'; }

const char *cf_hlo_comment_end(const char *p, const char *e, int *line) {
  if (p[1] == '/') {
    const char *nl = memchr(p, '\n', (size_t)(e - p));
    return nl ? nl : e;
  }
  const char *q = p + 2;
  int l = *line;
  while (e - q >= 2 && !(q[0] == '*' && q[1] == '/'))
    l += *q++ == '\n';
  if (e - q < 2) return NULL;
  *line = l;
  return q + 2;
}

/* Past spaces, newlines and comments, counting newlines into *line. An
 * unterminated comment is left for scan_stmt to report. */
const char *cf_hlo_skip_nl(const char *p, const char *e, int *line) {
  for (;;) {
    while (p < e && is_space(*p))
      *line += *p++ == '\n';
    if (!at_comment(p, e)) return p;
    const char *q = cf_hlo_comment_end(p, e, line);
    if (!q) return p;
    p = q;
  }
}

const char *cf_hlo_skip(const char *p, const char *e) {
  int line = 0;
  return cf_hlo_skip_nl(p, e, &line);
}

const char *cf_hlo_past_quoted(const char *p, const char *e) {
  char q = *p++;
  while (p < e && *p != q)
    p += (*p == '\\' && e - p >= 2) ? 2 : 1;
  return p < e ? p + 1 : e;
}

/* Just past the bracket group, string or comment that starts at p (inside a
 * statement scan_stmt has checked, so brackets pair up). */
const char *cf_hlo_past(const char *p, const char *e) {
  int depth = 0;
  while (p < e) {
    char c = *p;
    if (c == '"' || c == '\'')
      p = cf_hlo_past_quoted(p, e);
    else if (at_comment(p, e)) {
      int line = 0;
      const char *q = cf_hlo_comment_end(p, e, &line);
      p = q ? q : e;
    } else {
      p++;
      depth += is_open(c) - is_close(c);
    }
    if (depth <= 0) return p;
  }
  return e;
}

bool cf_hlo_at_group(const char *p, const char *e) {
  return is_open(*p) || *p == '"' || *p == '\'' || at_comment(p, e);
}

const char *cf_hlo_find_top(const char *p, const char *e, char ch) {
  while (p < e) {
    if (*p == ch) return p;
    p = cf_hlo_at_group(p, e) ? cf_hlo_past(p, e) : p + 1;
  }
  return NULL;
}

int cf_hlo_count_top(const char *p, const char *e, char ch) {
  int n = 0;
  while ((p = cf_hlo_find_top(p, e, ch))) {
    n++;
    p++;
  }
  return n;
}

/* Whether the text at p (past spaces and comments) starts an instruction:
 * 'ROOT', or a name (maybe after '%') and then '=' (not '=='). */
static bool at_instr_start(const char *p, const char *e) {
  if (cf_hlo_word_at(p, e, "ROOT")) return true;
  if (p < e && *p == '%') p++;
  const char *n = p;
  while (p < e && is_name_char(*p))
    p++;
  if (p == n) return false;
  p = cf_hlo_skip(p, e);
  return p < e && *p == '=' && !(e - p >= 2 && p[1] == '=');
}

/* Whether the statement goes on past a newline outside brackets: last is
 * its last character before it (0 when none), prev the one before that,
 * next the text after it. */
static bool goes_on(char prev, char last, const char *next, const char *e, bool body) {
  if (!last || next >= e) return next < e;
  if (last == ',' || last == '=' || (prev == '-' && last == '>')) return true;
  if (*next == ',' || *next == '{' || (e - next >= 2 && next[0] == '-' && next[1] == '>'))
    return true;
  return body && *next != '}' && !at_instr_start(next, e);
}

cf_status cf_hlo_scan_stmt(hlo_reader *r, const char *p, const char *e, bool body, int *line,
                           const char **out) {
  char open[HLO_MAX_NEST], prev = 0, last = 0;
  int open_line[HLO_MAX_NEST], depth = 0;
  for (; p < e; p++) {
    char c = *p;
    if (c == '\n') {
      int l = *line;
      if (!depth && !goes_on(prev, last, cf_hlo_skip_nl(p, e, &l), e, body)) break;
      ++*line;
      continue;
    }
    if (is_space(c)) continue;
    if (c == '"' || c == '\'') {
      /* a string may span lines (XLA prints a module's origin_recovery_table
       * as one); unterminated, it is named at the line it starts on */
      const char *q = p + 1;
      int l = *line;
      while (q < e && *q != c) {
        l += *q == '\n' || (*q == '\\' && e - q >= 2 && q[1] == '\n');
        q += (*q == '\\' && e - q >= 2) ? 2 : 1;
      }
      if (q >= e) return cf_hlo_fail(r, *line, "unterminated string");
      *line = l;
      p = q;
    } else if (at_comment(p, e)) {
      const char *q = cf_hlo_comment_end(p, e, line);
      if (!q) return cf_hlo_fail(r, *line, "unterminated comment");
      p = q - 1;
      continue; /* a comment is not the statement's last character */
    } else if (is_open(c)) {
      if (depth == HLO_MAX_NEST)
        return cf_hlo_fail(r, *line, "brackets nested deeper than %d", HLO_MAX_NEST);
      open[depth] = c;
      open_line[depth++] = *line;
    } else if (is_close(c)) {
      char want = c == ')' ? '(' : c == ']' ? '[' : '{';
      if (!depth || open[depth - 1] != want) return cf_hlo_fail(r, *line, "unbalanced '%c'", c);
      depth--;
    } else if (c == 0) {
      return cf_hlo_fail(r, *line, "NUL byte in HLO text");
    }
    prev = last;
    last = c;
  }
  if (depth) return cf_hlo_fail(r, open_line[depth - 1], "'%c' is never closed", open[depth - 1]);
  *out = p;
  return CF_OK;
}

/* A name at p (a leading % sigil dropped): its cf_span, empty when none. */
const char *cf_hlo_read_name(const char *p, const char *e, cf_span *out) {
  if (p < e && *p == '%') p++;
  out->p = p;
  while (p < e && is_name_char(*p))
    p++;
  out->n = (size_t)(p - out->p);
  return p;
}

bool cf_hlo_word_at(const char *p, const char *e, const char *w) {
  size_t n = strlen(w);
  return (size_t)(e - p) >= n && memcmp(p, w, n) == 0 &&
         ((size_t)(e - p) == n || !is_name_char(p[n]));
}

/* A non-negative decimal at *pp, at most max. */
bool cf_hlo_read_int(const char **pp, const char *e, int64_t max, int64_t *out) {
  const char *p = *pp;
  int64_t v = 0;
  if (p >= e || !isdigit((unsigned char)*p)) return false;
  for (; p < e && isdigit((unsigned char)*p); p++) {
    int d = *p - '0';
    if (d > max || v > (max - d) / 10) return false;
    v = v * 10 + d;
  }
  *pp = p;
  *out = v;
  return true;
}

cf_span cf_hlo_number_at(const char *p, const char *e) {
  const char *q = p < e && *p == '-' ? p + 1 : p;
  while (q < e && isdigit((unsigned char)*q))
    q++;
  return q > p && isdigit((unsigned char)q[-1]) ? (cf_span){p, (size_t)(q - p)} : (cf_span){p, 0};
}

/* A list of at most max integers in 0..hi between the bracket at p and
 * close ("[2,4]", "T(1,0)", "{0}"): the position past close, NULL when
 * malformed. */
const char *cf_hlo_int_list(const char *p, const char *e, char close, int64_t hi, int64_t *v,
                            int max, int *n) {
  *n = 0;
  p = cf_hlo_skip(p + 1, e);
  if (p < e && *p == close) return p + 1;
  for (;;) {
    if (*n == max || !cf_hlo_read_int(&p, e, hi, &v[*n])) return NULL;
    ++*n;
    p = cf_hlo_skip(p, e);
    if (p < e && *p == close) return p + 1;
    if (p >= e || *p != ',') return NULL;
    p = cf_hlo_skip(p + 1, e);
  }
}

const hattr *cf_hlo_attr(const hinstr *in, const char *key) {
  for (int i = 0; i < in->n_attr; i++)
    if (cf_span_is(in->attr[i].key, key)) return &in->attr[i];
  return NULL;
}

/* A computation reference (to_apply=%name): the name without sigil. */
hcomp *cf_hlo_attr_comp(hlo_reader *r, const hinstr *in, const char *key) {
  const hattr *a = cf_hlo_attr(in, key);
  if (!a) return NULL;
  cf_span nm;
  const char *p = cf_hlo_read_name(a->val.p, a->val.p + a->val.n, &nm);
  if (!nm.n || p != a->val.p + a->val.n) return NULL;
  char buf[CF_MAX_NAME + 1];
  if (nm.n > CF_MAX_NAME) return NULL;
  memcpy(buf, nm.p, nm.n);
  buf[nm.n] = 0;
  int k = cf_hlo_map_find(&r->comp_map, buf);
  return k < 0 ? NULL : &r->comps[k];
}
