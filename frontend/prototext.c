/* prototext.c - protobuf text format parsed without a schema (prototext.h).
 *
 * The text becomes a generic tree of fields, so a reader only looks fields
 * up by name and ignores what it does not know (pbtxt.c reads GraphDefs so:
 * device, versions, library, _class ... pass unread). Scalars keep their
 * tokens; strings are decoded (C escapes, adjacent strings concatenated)
 * only when asked for.
 */
#include "prototext.h"

#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum {
  PB_MAX_NEST = 100, /* messages inside messages */
};

static cf_status fail(pb_text *t, int line, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static cf_status fail(pb_text *t, int line, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  cf_status st = cf_reader_verror(t->ctx, t->oom, t->file, line, fmt, ap);
  va_end(ap);
  return st;
}

static cf_status oom(pb_text *t, int line) {
  t->oom = true;
  return fail(t, line, "out of memory");
}

static bool ident_char(char c) { return isalnum((unsigned char)c) || c == '_'; }
static bool scalar_char(char c) {
  return isalnum((unsigned char)c) || c == '_' || c == '.' || c == '-' || c == '+';
}

/* Past spaces, newlines and # comments. */
static const char *skip(const char *p, const char *e, int *line) {
  for (;;) {
    while (p < e &&
           (*p == ' ' || *p == '\t' || *p == '\r' || *p == '\n' || *p == '\f' || *p == '\v'))
      *line += *p++ == '\n';
    if (p >= e || *p != '#') return p;
    while (p < e && *p != '\n')
      p++;
  }
}

/* p at a quote: just past the string, NULL when unterminated (no newline
 * may appear inside). */
static const char *past_string(const char *p, const char *e) {
  char q = *p++;
  while (p < e && *p != q && *p != '\n')
    p += *p == '\\' && e - p >= 2 && p[1] != '\n' ? 2 : 1;
  return p < e && *p == q ? p + 1 : NULL;
}

static cf_status parse_msg(pb_text *t, const char **pp, int *line, int depth, char closer, pf *out);

/* One scalar value or message after "name:" (or inside a [list]). */
static cf_status parse_value(pb_text *t, const char **pp, int *line, int depth, pf *f) {
  const char *p = *pp, *e = t->end;
  if (p < e && (*p == '{' || *p == '<')) {
    *pp = p + 1;
    return parse_msg(t, pp, line, depth + 1, *p == '{' ? '}' : '>', f);
  }
  f->text.p = p;
  if (p < e && (*p == '"' || *p == '\'')) {
    /* adjacent strings concatenate: "ab" 'cd' */
    const char *last = p;
    int ln = *line;
    while (p < e && (*p == '"' || *p == '\'')) {
      const char *q = past_string(p, e);
      if (!q) return fail(t, *line, "field '%s': unterminated string", CF_SPAN_QUOTE(f->name));
      last = q;
      *line = ln;
      p = skip(q, e, &ln);
    }
    f->text.n = (size_t)(last - f->text.p);
    *pp = last;
    return CF_OK;
  }
  while (p < e && scalar_char(*p))
    p++;
  f->text.n = (size_t)(p - f->text.p);
  if (!f->text.n)
    return fail(t, *line, "field '%s': expected a value, got '%s'", CF_SPAN_QUOTE(f->name),
                CF_SPAN_QUOTE(((cf_span){p, (size_t)(e - p)})));
  *pp = p;
  return CF_OK;
}

static pf *new_field(pb_text *t, cf_span name, int line, pf ***tail) {
  pf *f = cf_arena_alloc(&t->scratch, sizeof *f);
  if (!f) return t->oom = true, NULL;
  f->name = name;
  f->line = line;
  **tail = f;
  *tail = &f->next;
  return f;
}

/* Fields up to closer (0: the end of the text) into out->child. */
static cf_status parse_msg(pb_text *t, const char **pp, int *line, int depth, char closer,
                           pf *out) {
  const char *p = *pp, *e = t->end;
  int open_line = *line;
  pf **tail = &out->child;
  cf_status st;
  out->msg = true;
  if (depth > PB_MAX_NEST) return fail(t, *line, "messages nested deeper than %d", PB_MAX_NEST);
  for (;;) {
    p = skip(p, e, line);
    if (p >= e) {
      if (closer) return fail(t, open_line, "'%c' is never closed", closer == '}' ? '{' : '<');
      break;
    }
    if (closer && *p == closer) {
      p++;
      break;
    }
    cf_span name = {p, 0};
    if (*p == '[') { /* [extension] or [type.googleapis.com/Any] */
      while (p < e && *p != ']' && *p != '\n')
        p++;
      if (p >= e || *p != ']') return fail(t, *line, "unterminated '[' in a field name");
      p++;
    } else {
      while (p < e && ident_char(*p))
        p++;
    }
    name.n = (size_t)(p - name.p);
    if (!name.n) {
      if (*p == 0) return fail(t, *line, "NUL byte in protobuf text");
      return fail(t, *line, "expected a field name, got '%s'",
                  CF_SPAN_QUOTE(((cf_span){p, (size_t)(e - p)})));
    }
    int fline = *line;
    p = skip(p, e, line);
    bool colon = p < e && *p == ':';
    if (colon) p = skip(p + 1, e, line);
    if (p < e && *p == '[' && colon) { /* name: [v, v, ...] */
      p = skip(p + 1, e, line);
      while (p < e && *p != ']') {
        pf *f = new_field(t, name, *line, &tail);
        if (!f) return oom(t, *line);
        if ((st = parse_value(t, &p, line, depth, f))) return st;
        p = skip(p, e, line);
        if (p < e && *p == ',')
          p = skip(p + 1, e, line);
        else if (p >= e || *p != ']')
          return fail(t, *line, "field '%s': expected ',' or ']' in a list", CF_SPAN_QUOTE(name));
      }
      if (p >= e) return fail(t, fline, "field '%s': '[' is never closed", CF_SPAN_QUOTE(name));
      p++;
    } else {
      if (!colon && (p >= e || (*p != '{' && *p != '<')))
        return fail(t, fline, "field '%s': expected ':' or '{'", CF_SPAN_QUOTE(name));
      pf *f = new_field(t, name, fline, &tail);
      if (!f) return oom(t, *line);
      if ((st = parse_value(t, &p, line, depth, f))) return st;
    }
    p = skip(p, e, line);
    if (p < e && (*p == ',' || *p == ';')) p++;
  }
  *pp = p;
  return CF_OK;
}

cf_status cf_pb_parse(pb_text *t, const char *text, size_t size, pf *root) {
  const char *p = text;
  int line = 1;
  t->end = text + size;
  return parse_msg(t, &p, &line, 0, 0, root);
}

const pf *cf_pb_get(const pf *m, const char *name) {
  for (const pf *f = m ? m->child : NULL; f; f = f->next)
    if (cf_span_is(f->name, name)) return f;
  return NULL;
}

const pf *cf_pb_next(const pf *f, const char *name) {
  for (f = f->next; f; f = f->next)
    if (cf_span_is(f->name, name)) return f;
  return NULL;
}

cf_status cf_pb_string(pb_text *t, const pf *f, char **out, size_t *len) {
  if (f->msg || !f->text.n || (f->text.p[0] != '"' && f->text.p[0] != '\''))
    return fail(t, f->line, "field '%s': expected a string", CF_SPAN_QUOTE(f->name));
  char *d = cf_arena_alloc(&t->scratch, f->text.n + 1);
  if (!d) return oom(t, f->line);
  size_t n = 0;
  const char *p = f->text.p, *e = p + f->text.n;
  while (p < e) {
    if (*p != '"' && *p != '\'') {
      p++; /* whitespace or a comment between adjacent strings */
      if (p[-1] == '#')
        while (p < e && *p != '\n')
          p++;
      continue;
    }
    char q = *p++;
    while (p < e && *p != q) {
      if (*p != '\\') {
        d[n++] = *p++;
        continue;
      }
      p++;
      char c = *p++;
      if (c >= '0' && c <= '7') {
        int v = c - '0';
        for (int k = 0; k < 2 && p < e && *p >= '0' && *p <= '7'; k++)
          v = v * 8 + (*p++ - '0');
        d[n++] = (char)(v & 0xff);
      } else if (c == 'x' || c == 'X') {
        int v = 0, k = 0;
        for (; k < 2 && p < e && isxdigit((unsigned char)*p); k++, p++)
          v = v * 16 +
              (isdigit((unsigned char)*p) ? *p - '0' : (tolower((unsigned char)*p) - 'a' + 10));
        if (!k)
          return fail(t, f->line, "field '%s': \\x without hex digits", CF_SPAN_QUOTE(f->name));
        d[n++] = (char)v;
      } else {
        static const char from[] = "ntrabfv\\'\"?", to[] = "\n\t\r\a\b\f\v\\'\"?";
        const char *k = memchr(from, c, sizeof from - 1);
        if (!k)
          return fail(t, f->line, "field '%s': unknown escape '\\%c'", CF_SPAN_QUOTE(f->name),
                      isprint((unsigned char)c) ? c : '?');
        d[n++] = to[k - from];
      }
    }
    p++;
  }
  d[n] = 0;
  *out = d;
  *len = n;
  return CF_OK;
}

cf_status cf_pb_name(pb_text *t, const pf *f, const char **out) {
  char *s;
  size_t n;
  cf_status st = cf_pb_string(t, f, &s, &n);
  if (st) return st;
  for (size_t i = 0; i < n; i++)
    if ((unsigned char)s[i] < 0x20 || (unsigned char)s[i] >= 0x7f)
      return fail(t, f->line, "field '%s': byte 0x%02x in a name (names are printable ASCII)",
                  CF_SPAN_QUOTE(f->name), (unsigned char)s[i]);
  *out = s;
  return CF_OK;
}

bool cf_pb_i64(const char *s, int64_t *out) {
  char *end;
  errno = 0;
  long long v = strtoll(s, &end, 0);
  if (end == s || *end || errno == ERANGE) return false;
  *out = v;
  return true;
}

bool cf_pb_int(pb_text *t, const pf *f, int64_t *out) {
  if (!f || f->msg || !f->text.n) return false;
  char buf[64];
  if (f->text.p[0] == '"' || f->text.p[0] == '\'') {
    char *s;
    size_t n;
    if (cf_pb_string(t, f, &s, &n) || n >= sizeof buf) {
      cf_clear_error(t->ctx);
      return false;
    }
    memcpy(buf, s, n + 1);
  } else {
    if (f->text.n >= sizeof buf) return false;
    memcpy(buf, f->text.p, f->text.n);
    buf[f->text.n] = 0;
  }
  return cf_pb_i64(buf, out);
}

bool cf_pb_double(const pf *f, double *out) {
  char buf[64];
  if (!f || f->msg || !f->text.n || f->text.n >= sizeof buf) return false;
  memcpy(buf, f->text.p, f->text.n);
  buf[f->text.n] = 0;
  size_t n = f->text.n;
  if (n > 1 && (buf[n - 1] == 'f' || buf[n - 1] == 'F') && !strchr(buf, 'x') &&
      strcmp(buf, "inf") && strcmp(buf, "-inf"))
    buf[n - 1] = 0; /* 1.5f */
  char *end;
  errno = 0;
  *out = strtod(buf, &end);
  return end != buf && !*end && errno != ERANGE;
}
