/* context.c - the collfuse context (error message, log sink), the arena the
 * graph allocates from, and overflow-checked integer helpers.
 *
 * Errors are formatted once, where they are detected, into the context that
 * owns them; callers only pass the status up (SQLite's errmsg model).
 */
#include "ir.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <errno.h>
#include <unistd.h>

cf_status cf_ctx_create(cf_context **out) {
  if (!out) return CF_ERR_USAGE;
  *out = calloc(1, sizeof(cf_context));
  return *out ? CF_OK : CF_ERR_NO_MEMORY;
}

void cf_ctx_destroy(cf_context *ctx) {
  if (!ctx) return;
  if (ctx->codegen && ctx->codegen_free) ctx->codegen_free(ctx->codegen);
  free(ctx->errmsg);
  free(ctx);
}

const char *cf_errmsg(const cf_context *ctx) { return ctx && ctx->errmsg ? ctx->errmsg : ""; }

void cf_clear_error(cf_context *ctx) {
  if (!ctx) return;
  free(ctx->errmsg);
  ctx->errmsg = NULL;
}

/* Length of the UTF-8 character at s[0..n), 0 when it is not valid UTF-8
 * (overlong forms and surrogates included). */
static size_t utf8_len(const unsigned char *s, size_t n) {
  unsigned char c = s[0];
  size_t k = c < 0x80                 ? 1
             : c >= 0xC2 && c <= 0xDF ? 2
             : c >= 0xE0 && c <= 0xEF ? 3
             : c >= 0xF0 && c <= 0xF4 ? 4
                                      : 0;
  if (k == 0 || k > n) return 0;
  for (size_t i = 1; i < k; i++)
    if ((s[i] & 0xC0) != 0x80) return 0;
  if ((c == 0xE0 && s[1] < 0xA0) || (c == 0xED && s[1] >= 0xA0) || (c == 0xF0 && s[1] < 0x90) ||
      (c == 0xF4 && s[1] >= 0x90))
    return 0;
  return k;
}

/* Copy s[0..n) to out (cap >= 5) with control bytes and bytes that are not
 * UTF-8 written as \xNN (newline and tab kept when keep_lines), stopping
 * after max characters with "..." when more follow. */
static void escape(char *out, size_t cap, const char *s, size_t n, size_t max, bool keep_lines) {
  const unsigned char *u = (const unsigned char *)s;
  size_t o = 0, chars = 0, i = 0;
  while (i < n) {
    size_t k = utf8_len(u + i, n - i);
    bool plain = k > 1 || (k == 1 && u[i] >= 0x20 && u[i] != 0x7F) ||
                 (keep_lines && (u[i] == '\n' || u[i] == '\t'));
    size_t need = plain ? k : 4;
    if (chars == max || o + need + 4 > cap) {
      memcpy(out + o, "...", 4);
      return;
    }
    if (plain)
      memcpy(out + o, s + i, k);
    else
      snprintf(out + o, 5, "\\x%02X", u[i]);
    o += need;
    i += plain ? k : 1;
    chars++;
  }
  out[o] = 0;
}

const char *cf_excerpt(char *buf, size_t len, const char *s, size_t n) {
  escape(buf, len, s, n, CF_EXCERPT_CHARS, false);
  return buf;
}

cf_status cf_verror(cf_context *ctx, cf_status st, const char *file, int line, const char *fmt,
                    va_list ap) {
  char prefix[1024] = "";
  if (!ctx) return st;
  /* sized to the message: one quoting node names of CF_MAX_NAME bytes still
   * ends with what went wrong (up to 64 KiB, then cut with "...") */
  va_list again;
  va_copy(again, ap);
  int len = vsnprintf(NULL, 0, fmt, ap);
  size_t n_raw = len < 0 ? 0 : len > 65536 ? 65536 : (size_t)len;
  char *raw = malloc(n_raw + 1), *msg = malloc(4 * n_raw + 8);
  if (!raw || !msg) {
    va_end(again);
    free(raw);
    free(msg);
    return st; /* keep the old message rather than crash */
  }
  vsnprintf(raw, n_raw + 1, fmt, again);
  va_end(again);
  /* whatever a message quotes, it never carries raw binary to a terminal */
  escape(msg, 4 * n_raw + 8, raw, strlen(raw), SIZE_MAX, true);
  free(raw);
  if (file && line > 0)
    snprintf(prefix, sizeof prefix, "%s:%d: ", file, line);
  else if (file)
    snprintf(prefix, sizeof prefix, "%s: ", file);
  /* a message passed on from another context ("error: ...", or
   * "FILE:LINE: error: ...") keeps its one "error: " */
  const char *tag = "error: ";
  if (!file) {
    const char *e = strstr(msg, ": error: "), *sp = strchr(msg, ' ');
    if (strncmp(msg, "error: ", 7) == 0 || (e && sp == e + 1)) tag = "";
  }
  size_t n = strlen(prefix) + strlen(msg) + strlen(tag) + 1;
  char *s = malloc(n);
  if (s) snprintf(s, n, "%s%s%s", prefix, tag, msg);
  free(msg);
  if (!s) return st; /* keep the old message rather than crash */
  free(ctx->errmsg);
  ctx->errmsg = s;
  return st;
}

cf_status cf_error(cf_context *ctx, cf_status st, const char *file, int line, const char *fmt,
                   ...) {
  va_list ap;
  va_start(ap, fmt);
  cf_verror(ctx, st, file, line, fmt, ap);
  va_end(ap);
  return st;
}

void cf_log(cf_context *ctx, cf_log_level lvl, const char *fmt, ...) {
  if (!ctx || !ctx->log_fn) return;
  va_list ap;
  va_start(ap, fmt);
  char raw[2048], msg[2048];
  vsnprintf(raw, sizeof raw, fmt, ap);
  va_end(ap);
  escape(msg, sizeof msg, raw, strlen(raw), SIZE_MAX, true);
  ctx->log_fn(ctx->log_user, lvl, msg);
}

/* ---- arena: a list of chunks, freed all at once ---- */

struct cf_arena_chunk {
  cf_arena_chunk *next;
  size_t used, size;
  _Alignas(16) unsigned char data[];
};

#define CF_CHUNK_MIN ((size_t)64 << 10)

void *cf_arena_alloc(cf_arena *a, size_t size) {
  size = (size + 15) & ~(size_t)15;
  if (size == 0) size = 16;
  cf_arena_chunk *c = a->head;
  if (!c || c->size - c->used < size) {
    size_t cap = size > CF_CHUNK_MIN ? size : CF_CHUNK_MIN;
    if (cap > SIZE_MAX - sizeof(cf_arena_chunk)) return NULL;
    c = malloc(sizeof(cf_arena_chunk) + cap);
    if (!c) return NULL;
    c->size = cap;
    c->used = 0;
    /* a big one-off block goes behind the current chunk so the rest of the
     * current chunk stays usable */
    if (a->head && size > CF_CHUNK_MIN) {
      c->next = a->head->next;
      a->head->next = c;
    } else {
      c->next = a->head;
      a->head = c;
    }
  }
  void *p = c->data + c->used;
  c->used += size;
  memset(p, 0, size);
  return p;
}

void *cf_arena_array(cf_arena *a, size_t n, size_t elem) {
  if (elem && n > SIZE_MAX / elem) return NULL;
  return cf_arena_alloc(a, n * elem);
}

char *cf_arena_strndup(cf_arena *a, const char *s, size_t n) {
  if (n == SIZE_MAX) return NULL;
  char *d = cf_arena_alloc(a, n + 1);
  if (!d) return NULL;
  memcpy(d, s, n);
  d[n] = 0;
  return d;
}

char *cf_arena_strdup(cf_arena *a, const char *s) { return cf_arena_strndup(a, s, strlen(s)); }

char *cf_arena_name(cf_arena *a, const char *base, const char *tail) {
  size_t nb = strlen(base), nt = strlen(tail);
  if (nt > CF_MAX_NAME / 2) nt = CF_MAX_NAME / 2; /* callers pass short tails */
  if (nb + nt > CF_MAX_NAME) {
    nb = CF_MAX_NAME - nt;
    while (nb && ((unsigned char)base[nb] & 0xc0) == 0x80)
      nb--; /* not inside a character */
  }
  char *d = cf_arena_alloc(a, nb + nt + 1);
  if (!d) return NULL;
  memcpy(d, base, nb);
  memcpy(d + nb, tail, nt);
  d[nb + nt] = 0;
  return d;
}

void cf_arena_free(cf_arena *a) {
  cf_arena_chunk *c = a->head;
  while (c) {
    cf_arena_chunk *n = c->next;
    free(c);
    c = n;
  }
  a->head = NULL;
}

bool cf_mul_i64(int64_t a, int64_t b, int64_t *out) { return !__builtin_mul_overflow(a, b, out); }
bool cf_add_i64(int64_t a, int64_t b, int64_t *out) { return !__builtin_add_overflow(a, b, out); }

bool cf_write_all(int fd, const void *p, size_t n) {
  const unsigned char *c = p;
  while (n) {
    ssize_t w = write(fd, c, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    c += w;
    n -= (size_t)w;
  }
  return true;
}
