/* context.c - the collfuse context (error messages, log sink), the arena the
 * graph allocates from, and overflow-checked integer helpers.
 *
 * Errors are formatted once, where they are detected, into the context that
 * owns them; callers only pass the status up (SQLite's errmsg model).
 *
 * Messages are kept per thread: threads that share a context (each running
 * its own executables of one graph, Python threads over one Graph) each
 * read the message of their own last failure, and one thread's next error
 * never frees the message another is reading. A context keeps one slot per
 * thread that recorded an error on it (or read one), freed with the
 * context; a thread only ever replaces its own slot's strings, so the
 * pointer cf_errmsg returns stays valid until that thread's next error (or
 * read of another thread's message) on the context. A thread with no error
 * of its own reads a copy of the context's newest message: that is how a
 * run's caller reads the message its rank threads left in their contexts
 * once they have been joined, and how one thread reads what another
 * recorded on a context handed over to it.
 */
#include "ir.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <errno.h>
#include <unistd.h>

/* One thread's messages on a context. */
struct cf_errslot {
  cf_errslot *next;
  pthread_t thread;
  char *msg;    /* the thread's last error, NULL when none */
  uint64_t seq; /* when msg was recorded: the context's err_seq then */
  char *copy;   /* what cf_errmsg last lent a thread with no msg of its own */
};

cf_status cf_ctx_create(cf_context **out) {
  if (!out) return CF_ERR_USAGE;
  cf_context *ctx = calloc(1, sizeof(cf_context));
  if (!ctx) return *out = NULL, CF_ERR_NO_MEMORY;
  if (pthread_mutex_init(&ctx->err_lock, NULL) != 0) {
    free(ctx);
    return *out = NULL, CF_ERR_NO_MEMORY;
  }
  if (pthread_mutex_init(&ctx->codegen_lock, NULL) != 0) {
    pthread_mutex_destroy(&ctx->err_lock);
    free(ctx);
    return *out = NULL, CF_ERR_NO_MEMORY;
  }
  *out = ctx;
  return CF_OK;
}

void cf_ctx_destroy(cf_context *ctx) {
  if (!ctx) return;
  if (ctx->codegen && ctx->codegen_free) ctx->codegen_free(ctx->codegen);
  if (ctx->kload && ctx->kload_free) ctx->kload_free(ctx->kload);
  for (cf_errslot *e = ctx->errs, *next; e; e = next) {
    next = e->next;
    free(e->msg);
    free(e->copy);
    free(e);
  }
  pthread_mutex_destroy(&ctx->err_lock);
  pthread_mutex_destroy(&ctx->codegen_lock);
  free(ctx);
}

/* The calling thread's slot on ctx, made when create (NULL: none, or out
 * of memory). Called with err_lock held. */
static cf_errslot *own_slot(cf_context *ctx, bool create) {
  pthread_t self = pthread_self();
  for (cf_errslot *e = ctx->errs; e; e = e->next)
    if (pthread_equal(e->thread, self)) return e;
  cf_errslot *e = create ? calloc(1, sizeof *e) : NULL;
  if (!e) return NULL;
  e->thread = self;
  e->next = ctx->errs;
  ctx->errs = e;
  return e;
}

/* msg (heap, may be NULL) as the calling thread's message; false when it
 * cannot be stored (out of memory: msg is freed, the old message kept). */
static bool set_own(cf_context *ctx, char *msg) {
  pthread_mutex_lock(&ctx->err_lock);
  cf_errslot *e = own_slot(ctx, msg != NULL);
  if (e) {
    free(e->msg);
    e->msg = msg;
    e->seq = msg ? ++ctx->err_seq : 0;
  }
  pthread_mutex_unlock(&ctx->err_lock);
  if (!e) free(msg);
  return e != NULL || msg == NULL;
}

const char *cf_errmsg(const cf_context *cctx) {
  if (!cctx) return "";
  cf_context *ctx = (cf_context *)cctx; /* the slots are behind err_lock */
  const char *m = "";
  pthread_mutex_lock(&ctx->err_lock);
  cf_errslot *self = own_slot(ctx, false), *newest = NULL;
  if (self && self->msg) {
    m = self->msg;
  } else {
    for (cf_errslot *e = ctx->errs; e; e = e->next)
      if (e->msg && (!newest || e->seq > newest->seq)) newest = e;
    if (newest && (self || (self = own_slot(ctx, true)))) {
      /* a copy the reader owns: the writer may replace its own meanwhile */
      free(self->copy);
      self->copy = strdup(newest->msg);
      m = self->copy ? self->copy : "";
    }
  }
  pthread_mutex_unlock(&ctx->err_lock);
  return m;
}

void cf_clear_error(cf_context *ctx) {
  if (ctx) set_own(ctx, NULL);
}

char *cf_error_take(cf_context *ctx) {
  if (!ctx) return NULL;
  pthread_mutex_lock(&ctx->err_lock);
  cf_errslot *e = own_slot(ctx, false);
  char *m = e ? e->msg : NULL;
  if (e) e->msg = NULL;
  pthread_mutex_unlock(&ctx->err_lock);
  return m;
}

void cf_error_put(cf_context *ctx, char *msg) {
  if (ctx)
    set_own(ctx, msg);
  else
    free(msg);
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
  set_own(ctx, s);
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
