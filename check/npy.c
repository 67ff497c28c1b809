/* npy.c - NumPy .npy files for --input and --save-outputs.
 *
 * The format (numpy/lib/format.py): magic "\x93NUMPY", a version byte pair,
 * a little-endian header length (2 bytes in 1.0, 4 in 2.0/3.0), then a
 * Python dict literal {'descr': '<f4', 'fortran_order': False, 'shape':
 * (3, 4), } padded with spaces and a newline, then the raw C-order data.
 * The header comes from files we did not write, so it is parsed by a small
 * strict scanner (no eval), every length is checked against the file, and
 * every error names the file and what was wrong with it.
 */
#include "check.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define SHAPE_STR(s, buf) cf_shape_format((s), (buf), sizeof(buf))
#define NPY_MAGIC "\x93NUMPY"
#define NPY_MAX_HEADER (1 << 20) /* numpy itself refuses headers above 10000 bytes */

/* ---------------- reading ---------------- */

/* The error of a failed read: a timeout is the run's (exit 3), the rest
 * the file's. */
static cf_status read_error(cf_context *ctx, const char *path, double timeout_s) {
  if (errno == ETIMEDOUT)
    return cf_error(ctx, CF_ERR_RUNTIME, path, 0,
                    "cannot read: no data within the timeout of %g s (a FIFO with no writer?)",
                    timeout_s);
  return cf_error(ctx, CF_ERR_IO, path, 0, "cannot read: %s", strerror(errno));
}

/* What the header says. */
typedef struct npy_header {
  char descr[32];
  int have; /* bit 0 descr, 1 fortran_order, 2 shape */
  bool fortran;
  cf_shape shape;
} npy_header;

typedef struct scan {
  const char *start, *p, *end;
  const char *path;
  cf_context *ctx;
} scan;

static void skip_ws(scan *s) {
  while (s->p < s->end && (*s->p == ' ' || *s->p == '\t' || *s->p == '\n' || *s->p == '\r')) s->p++;
}

static cf_status bad_header(scan *s, const char *what) {
  return cf_error(s->ctx, CF_ERR_INVALID, s->path, 0,
                  "malformed .npy header: %s at offset %td of the header", what,
                  s->p - s->start);
}

static bool eat(scan *s, char c) {
  skip_ws(s);
  if (s->p < s->end && *s->p == c) {
    s->p++;
    return true;
  }
  return false;
}

/* A Python string literal in ' or " quotes, without escapes, into buf. */
static bool string_lit(scan *s, char *buf, size_t len) {
  skip_ws(s);
  if (s->p >= s->end || (*s->p != '\'' && *s->p != '"')) return false;
  char q = *s->p++;
  size_t n = 0;
  while (s->p < s->end && *s->p != q) {
    if (*s->p == '\\' || *s->p == '\n' || n + 1 >= len) return false;
    buf[n++] = *s->p++;
  }
  if (s->p >= s->end) return false;
  s->p++;
  buf[n] = 0;
  return true;
}

static bool word(scan *s, const char *w) {
  size_t n = strlen(w);
  skip_ws(s);
  if ((size_t)(s->end - s->p) < n || memcmp(s->p, w, n)) return false;
  s->p += n;
  return true;
}

/* (), (3,), (3, 4) with optional trailing comma and Python 2's 3L. */
static cf_status shape_lit(scan *s, cf_shape *out) {
  memset(out, 0, sizeof *out);
  if (!eat(s, '(')) return bad_header(s, "'shape' must be a tuple");
  for (;;) {
    if (eat(s, ')')) break;
    skip_ws(s);
    if (s->p >= s->end || *s->p < '0' || *s->p > '9')
      return bad_header(s, "shape entries must be non-negative integers");
    int64_t v = 0;
    while (s->p < s->end && *s->p >= '0' && *s->p <= '9') {
      if (!cf_mul_i64(v, 10, &v) || !cf_add_i64(v, *s->p - '0', &v))
        return bad_header(s, "shape entry out of range");
      s->p++;
    }
    if (s->p < s->end && *s->p == 'L') s->p++;
    if (out->rank >= CF_MAX_RANK)
      return cf_error(s->ctx, CF_ERR_INVALID, s->path, 0, "shape has more than %d dimensions",
                      CF_MAX_RANK);
    out->dims[out->rank++] = v;
    if (eat(s, ',')) continue;
    if (eat(s, ')')) break;
    return bad_header(s, "expected ',' or ')' in the shape");
  }
  return CF_OK;
}

static cf_status parse_header(cf_context *ctx, const char *path, const char *h, size_t len,
                              npy_header *out) {
  scan s = {h, h, h + len, path, ctx};
  cf_status st;
  memset(out, 0, sizeof *out);
  if (!eat(&s, '{')) return bad_header(&s, "expected '{'");
  for (;;) {
    if (eat(&s, '}')) break;
    char key[32];
    if (!string_lit(&s, key, sizeof key)) return bad_header(&s, "expected a quoted key");
    if (!eat(&s, ':')) return bad_header(&s, "expected ':' after a key");
    int bit;
    if (!strcmp(key, "descr")) {
      bit = 1;
      if (!string_lit(&s, out->descr, sizeof out->descr))
        return bad_header(&s, "'descr' must be a dtype string (structured dtypes are not supported)");
    } else if (!strcmp(key, "fortran_order")) {
      bit = 2;
      if (word(&s, "True"))
        out->fortran = true;
      else if (!word(&s, "False"))
        return bad_header(&s, "'fortran_order' must be True or False");
    } else if (!strcmp(key, "shape")) {
      bit = 4;
      if ((st = shape_lit(&s, &out->shape))) return st;
    } else {
      return cf_error(ctx, CF_ERR_INVALID, path, 0, "malformed .npy header: unknown key '%s'", key);
    }
    if (out->have & bit)
      return cf_error(ctx, CF_ERR_INVALID, path, 0, "malformed .npy header: key '%s' repeated", key);
    out->have |= bit;
    if (eat(&s, ',')) continue;
    if (eat(&s, '}')) break;
    return bad_header(&s, "expected ',' or '}'");
  }
  skip_ws(&s);
  if (s.p != s.end) return bad_header(&s, "text after the dict");
  static const char *const names[] = {"descr", "fortran_order", "shape"};
  for (int i = 0; i < 3; i++)
    if (!(out->have & (1 << i)))
      return cf_error(ctx, CF_ERR_INVALID, path, 0, "malformed .npy header: no '%s' key", names[i]);
  return CF_OK;
}

/* Whether descr ('<f4', '|b1', '>i8', '<V2', ...) holds dt; *swap when the
 * data is big endian. */
static bool descr_matches(const char *descr, cf_dtype dt, bool *swap) {
  char order = descr[0];
  const char *t = descr + 1;
  if (order != '<' && order != '>' && order != '|' && order != '=') return false;
  int size = cf_dtype_size(dt);
  *swap = order == '>' && size > 1;
  if (dt == CF_DT_BFLOAT16) {
    if (!strcmp(t, "V2")) { /* raw records: no byte order */
      *swap = false;
      return true;
    }
    return !strcmp(t, "u2");
  }
  char want[8];
  if (!cf_dtype_npy_kind(dt)) return false;
  snprintf(want, sizeof want, "%c%d", cf_dtype_npy_kind(dt), size);
  return !strcmp(t, want) || (size == 1 && !strcmp(t, "b1")); /* bools read as bytes too */
}

static void byteswap(void *data, int64_t count, int size) {
  unsigned char *p = data;
  for (int64_t i = 0; i < count; i++, p += size)
    for (int a = 0, b = size - 1; a < b; a++, b--) {
      unsigned char t = p[a];
      p[a] = p[b];
      p[b] = t;
    }
}

/* Check the header against what the caller wants. */
static cf_status check_header(cf_context *ctx, const char *path, const npy_header *h, cf_dtype dt,
                              const cf_shape *shape, bool *swap) {
  char b1[160], b2[160];
  if (!descr_matches(h->descr, dt, swap))
    return cf_error(ctx, CF_ERR_INVALID, path, 0, "expected dtype %s, found '%s'", cf_dtype_name(dt),
                    h->descr);
  if (h->fortran)
    return cf_error(ctx, CF_ERR_INVALID, path, 0,
                    "fortran_order True is not supported: save a C-order array "
                    "(np.ascontiguousarray)");
  if (!cf_shape_equal(&h->shape, shape))
    return cf_error(ctx, CF_ERR_INVALID, path, 0, "expected shape (%s), found (%s)",
                    SHAPE_STR(shape, b1), SHAPE_STR(&h->shape, b2));
  return CF_OK;
}

cf_status cf_npy_read(cf_context *ctx, const char *path, cf_dtype dt, const cf_shape *shape,
                      void **data) {
  return cf_npy_read_timeout(ctx, path, dt, shape, 0, data);
}

cf_status cf_npy_read_timeout(cf_context *ctx, const char *path, cf_dtype dt, const cf_shape *shape,
                              double timeout_s, void **data) {
  unsigned char pre[12];
  char *hdr = NULL;
  void *buf = NULL;
  cf_status st = CF_OK;
  *data = NULL;
  double deadline = timeout_s > 0 ? cf_now() + timeout_s : 0;
  /* a FIFO only with a deadline, which every read then waits for at most */
  int fd;
  if ((st = cf_in_open(ctx, path, NULL, deadline > 0 ? CF_IN_FIFO : 0, &fd))) return st;
  /* the size of a regular file bounds every length; a FIFO is read up to
   * the bytes the header promises, and one more */
  struct stat sb;
  int64_t fsize = fstat(fd, &sb) == 0 && S_ISREG(sb.st_mode) ? (int64_t)sb.st_size : -1;
  ssize_t got = cf_read_full(fd, pre, 10, deadline);
  if (got < 0) {
    st = read_error(ctx, path, timeout_s);
    goto fail;
  }
  if (got < 6 || memcmp(pre, NPY_MAGIC, 6)) {
    st = cf_error(ctx, CF_ERR_INVALID, path, 0, "not a .npy file (bad magic; expected \\x93NUMPY)");
    goto fail;
  }
  if (got < 8) {
    st = cf_error(ctx, CF_ERR_INVALID, path, 0, "truncated: the file ends inside the preamble");
    goto fail;
  }
  int major = pre[6], minor = pre[7];
  if (major < 1 || major > 3 || minor != 0) {
    st = cf_error(ctx, CF_ERR_INVALID, path, 0, "unsupported .npy format version %d.%d", major, minor);
    goto fail;
  }
  size_t pre_len = major == 1 ? 10 : 12;
  if (major > 1 && got == 10) {
    ssize_t more = cf_read_full(fd, pre + 10, 2, deadline);
    if (more < 0) {
      st = read_error(ctx, path, timeout_s);
      goto fail;
    }
    got += more;
  }
  if ((size_t)got < pre_len) {
    st = cf_error(ctx, CF_ERR_INVALID, path, 0, "truncated: the file ends inside the preamble");
    goto fail;
  }
  size_t hlen = major == 1 ? (size_t)pre[8] | (size_t)pre[9] << 8
                           : (size_t)pre[8] | (size_t)pre[9] << 8 | (size_t)pre[10] << 16 |
                                 (size_t)pre[11] << 24;
  if (hlen == 0 || hlen > NPY_MAX_HEADER) {
    st = cf_error(ctx, CF_ERR_INVALID, path, 0, "header length %zu out of range (1..%d)", hlen,
                  NPY_MAX_HEADER);
    goto fail;
  }
  if (fsize >= 0 && (int64_t)(pre_len + hlen) > fsize) {
    st = cf_error(ctx, CF_ERR_INVALID, path, 0,
                  "header length %zu goes beyond the end of the file (%lld bytes)", hlen,
                  (long long)fsize);
    goto fail;
  }
  if (!(hdr = malloc(hlen))) {
    st = cf_error(ctx, CF_ERR_NO_MEMORY, path, 0, "out of memory");
    goto fail;
  }
  if ((got = cf_read_full(fd, hdr, hlen, deadline)) < 0) {
    st = read_error(ctx, path, timeout_s);
    goto fail;
  }
  if ((size_t)got < hlen) {
    st = cf_error(ctx, CF_ERR_INVALID, path, 0, "truncated: header length %zu goes beyond the end "
                  "of the file", hlen);
    goto fail;
  }
  npy_header h;
  bool swap = false;
  if ((st = parse_header(ctx, path, hdr, hlen, &h)) ||
      (st = check_header(ctx, path, &h, dt, shape, &swap)))
    goto fail;
  int64_t count, bytes;
  if (!cf_shape_elements(shape, &count) || !cf_mul_i64(count, cf_dtype_size(dt), &bytes) ||
      bytes > CF_MAX_BYTES || (uint64_t)bytes > SIZE_MAX) {
    st = cf_error(ctx, CF_ERR_INVALID, path, 0, "array too large");
    goto fail;
  }
  int64_t data_len = fsize - (int64_t)(pre_len + hlen);
  if (fsize >= 0 && data_len != bytes) {
    st = cf_error(ctx, CF_ERR_INVALID, path, 0,
                  "data is %lld bytes, expected %lld (%lld elements of %s)", (long long)data_len,
                  (long long)bytes, (long long)count, h.descr);
    goto fail;
  }
  if (!(buf = malloc(bytes ? (size_t)bytes : 1))) {
    char b[32];
    st = cf_error(ctx, CF_ERR_NO_MEMORY, path, 0,
                  "cannot allocate %s for the array's data: out of memory",
                  cf_bytes_text(bytes, b, sizeof b));
    goto fail;
  }
  unsigned char extra;
  got = cf_read_full(fd, buf, (size_t)bytes, deadline);
  ssize_t tail = got == bytes ? cf_read_full(fd, &extra, 1, deadline) : 0;
  if (got < 0 || tail < 0) {
    st = read_error(ctx, path, timeout_s);
    goto fail;
  }
  if (got != bytes || tail) {
    st = cf_error(ctx, CF_ERR_INVALID, path, 0, "data is %s than the %lld bytes expected",
                  tail ? "longer" : "shorter", (long long)bytes);
    goto fail;
  }
  if (swap) byteswap(buf, count, cf_dtype_size(dt));
  if (!strcmp(h.descr + 1, "b1")) /* numpy bools are 0/1; be exact about it */
    for (int64_t i = 0; i < count; i++) ((unsigned char *)buf)[i] = ((unsigned char *)buf)[i] != 0;
  close(fd);
  free(hdr);
  *data = buf;
  return CF_OK;
fail:
  close(fd);
  free(hdr);
  free(buf);
  return st;
}

/* ---------------- writing ---------------- */

/* What numpy writes for dt ("<f4", "|b1"; bfloat16 as raw "<V2"), in
 * buf[8]; NULL when there is none. */
static const char *descr_of(cf_dtype dt, char *buf) {
  int size = cf_dtype_size(dt);
  if (dt == CF_DT_BFLOAT16) return "<V2";
  if (!cf_dtype_npy_kind(dt)) return NULL;
  snprintf(buf, 8, "%c%c%d", size == 1 ? '|' : '<', cf_dtype_npy_kind(dt), size);
  return buf;
}

/* The version 1.0 preamble and header, padded with spaces so the data
 * starts on a 64-byte boundary (what numpy writes). Returns its length. */
static size_t format_header(char *buf, size_t len, cf_dtype dt, const cf_shape *shape) {
  char dims[CF_MAX_RANK * 24 + 8];
  size_t n = 0;
  dims[0] = 0;
  for (int d = 0; d < shape->rank; d++)
    n += (size_t)snprintf(dims + n, sizeof dims - n, "%s%lld", d ? ", " : "",
                          (long long)shape->dims[d]);
  if (shape->rank == 1) snprintf(dims + n, sizeof dims - n, ",");
  memcpy(buf, NPY_MAGIC "\x01\x00", 8);
  char d[8];
  int h = snprintf(buf + 10, len - 10, "{'descr': '%s', 'fortran_order': False, 'shape': (%s), }",
                   descr_of(dt, d), dims);
  size_t total = 10 + (size_t)h + 1;
  size_t padded = (total + 63) / 64 * 64;
  memset(buf + 10 + h, ' ', padded - total);
  buf[padded - 1] = '\n';
  size_t hlen = padded - 10;
  buf[8] = (char)(hlen & 0xff);
  buf[9] = (char)(hlen >> 8);
  return padded;
}

cf_status cf_npy_write(cf_context *ctx, const char *path, cf_dtype dt, const cf_shape *shape,
                       const void *data) {
  char hdr[512], d[8];
  int64_t count, bytes;
  if (!descr_of(dt, d))
    return cf_error(ctx, CF_ERR_USAGE, path, 0, "cannot write dtype %s as .npy", cf_dtype_name(dt));
  if (!cf_shape_elements(shape, &count) || !cf_mul_i64(count, cf_dtype_size(dt), &bytes))
    return cf_error(ctx, CF_ERR_USAGE, path, 0, "array too large");
  size_t hn = format_header(hdr, sizeof hdr, dt, shape);
  /* a regular file is replaced atomically, a device or FIFO written in place */
  cf_outfile o;
  cf_status st = cf_out_open(ctx, path, true, &o);
  if (st) return st;
  errno = 0;
  bool ok = fwrite(hdr, 1, hn, o.f) == hn &&
            (bytes == 0 || fwrite(data, 1, (size_t)bytes, o.f) == (size_t)bytes);
  int err = errno ? errno : EIO;
  st = cf_out_close(ctx, &o, ok);
  return ok ? st : cf_error(ctx, CF_ERR_IO, path, 0, "cannot write: %s", strerror(err));
}
