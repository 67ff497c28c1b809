/* stablehlo_attr.c - the attribute grammars of the StableHLO reader: tensor
 * types, dense<...> literals of constants, replica groups (dense<[[...]]>
 * and mesh axes), sdy meshes and sdy shardings.
 *
 * Each is a small recursive-descent reader over a span the scanner in
 * stablehlo.c has cut out; errors name the op's line.
 */
#include "stablehlo_internal.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SKIP(p, e) ((p) = cf_hlo_skip((p), (e)))

/* ------------------------------------------------------------------ */
/* types                                                              */

static const struct {
  const char *name;
  cf_dtype dt;
  bool exact;
} sh_types[] = {
    {"f32", CF_DT_FLOAT32, true},
    {"f16", CF_DT_FLOAT16, true},
    {"bf16", CF_DT_BFLOAT16, true},
    {"f64", CF_DT_FLOAT64, true},
    {"i8", CF_DT_INT8, true},
    {"si8", CF_DT_INT8, true},
    {"i16", CF_DT_INT16, true},
    {"si16", CF_DT_INT16, true},
    {"i32", CF_DT_INT32, true},
    {"si32", CF_DT_INT32, true},
    {"i64", CF_DT_INT64, true},
    {"si64", CF_DT_INT64, true},
    {"ui8", CF_DT_UINT8, true},
    {"i1", CF_DT_BOOL, true},
    {"ui16", CF_DT_UINT16, true},
    {"ui32", CF_DT_UINT32, true},
    {"ui64", CF_DT_UINT64, true},
    /* no IR dtype: a stand-in of the same element size, only for Opaque data */
    {"i4", CF_DT_INT8, false},
    {"si4", CF_DT_INT8, false},
    {"ui4", CF_DT_UINT8, false},
    {"i2", CF_DT_INT8, false},
    {"ui2", CF_DT_UINT8, false},
    {"index", CF_DT_INT64, false},
};

static bool is_word_char(char c) { return isalnum((unsigned char)c) || c == '_'; }

/* The element type at *pp (f32, complex<f32>, f8E4M3FN, ...). */
static cf_status elem_type(sh_reader *s, const char **pp, const char *e, int line, hshape *out) {
  hlo_reader *r = s->r;
  const char *p = *pp;
  cf_span ty = {p, 0};
  while (p < e && is_word_char(*p))
    p++;
  ty.n = (size_t)(p - ty.p);
  out->n = -1;
  if (cf_span_is(ty, "complex")) { /* (re, im) pairs */
    hshape part;
    memset(&part, 0, sizeof part);
    if (p >= e || *p != '<') return cf_hlo_fail(r, line, "expected 'complex<TYPE>'");
    p++;
    if (cf_hlo_word_at(p, e, "complex")) return cf_hlo_fail(r, line, "complex of a complex type");
    cf_status st = elem_type(s, &p, e, line, &part);
    if (st) return st;
    if (p >= e || *p != '>') return cf_hlo_fail(r, line, "expected '>' closing 'complex<'");
    out->dt = part.dt;
    out->exact = false;
    out->s.rank = -1; /* marks complex for the caller */
    *pp = p + 1;
    return CF_OK;
  }
  size_t k = 0, nt = sizeof sh_types / sizeof sh_types[0];
  if (!ty.n && e - p > 15 && !memcmp(p, "!quant.uniform<", 15)) {
    /* !quant.uniform<i8<-128:127>:f32:1, {0.1:-30, ...}>: a quantized type,
     * stood in for by its storage type, only for Opaque data (the scales
     * are no IR dtype's) */
    const char *q = p + 15, *w = q;
    while (q < e && is_word_char(*q))
      q++;
    cf_span st = {w, (size_t)(q - w)};
    while (k < nt && !cf_span_is(st, sh_types[k].name))
      k++;
    int depth = 1;
    for (q = p + 15; q < e && depth; q++)
      depth += *q == '<' ? 1 : *q == '>' ? -1 : 0;
    if (k == nt || depth || cf_dtype_is_float(sh_types[k].dt))
      return cf_hlo_fail(r, line, "unsupported quantized type '%.*s'",
                         (int)(q - p > 60 ? 60 : q - p), p);
    out->dt = sh_types[k].dt;
    out->exact = false;
    *pp = q;
    return CF_OK;
  }
  while (k < nt && !cf_span_is(ty, sh_types[k].name))
    k++;
  if (k < nt) {
    out->dt = sh_types[k].dt;
    out->exact = sh_types[k].exact;
  } else if (ty.n > 2 && (memcmp(ty.p, "f8", 2) == 0 || memcmp(ty.p, "f4", 2) == 0 ||
                          memcmp(ty.p, "f6", 2) == 0)) {
    out->dt = CF_DT_UINT8; /* float8 / float6 / float4 variants */
    out->exact = false;
  } else {
    /* a dialect's type (!foo.bar<...>) has no word to name: its text is quoted */
    while (!ty.n && p < e && p - ty.p < 60 && *p != '>' && *p != ',' && *p != ')' && *p != '\n')
      p++;
    if (!ty.n) ty.n = (size_t)(p - ty.p);
    return cf_hlo_fail(r, line, "unknown element type '%s'", CF_SPAN_QUOTE(ty));
  }
  *pp = p;
  return CF_OK;
}

static cf_status type_at(sh_reader *s, const char **pp, const char *e, int line, int nest,
                         int64_t *leaves, hshape *out) {
  hlo_reader *r = s->r;
  const char *p = cf_hlo_skip(*pp, e);
  memset(out, 0, sizeof *out);
  cf_status st;
  /* !stablehlo.future<T, ...>, an async_start's value: read as the tuple
   * of what its async_done gives, one type as itself (below) */
  bool future = e - p > 18 && !memcmp(p, "!stablehlo.future<", 18);
  if (future || (cf_hlo_word_at(p, e, "tuple") && p + 5 < e && p[5] == '<')) {
    if (nest >= HLO_MAX_TUPLE)
      return cf_hlo_fail(r, line, "tuple types nested deeper than %d", HLO_MAX_TUPLE);
    p += future ? 18 : 6;
    int n = 0, cap = 4;
    hshape *el = malloc((size_t)cap * sizeof *el);
    if (!el) return cf_hlo_oom(r, line);
    for (SKIP(p, e); p < e && *p != '>';) {
      if (n == cap) {
        hshape *more = realloc(el, (size_t)(cap *= 2) * sizeof *el);
        if (!more) {
          free(el);
          return cf_hlo_oom(r, line);
        }
        el = more;
      }
      if ((st = type_at(s, &p, e, line, nest + 1, leaves, &el[n++]))) {
        free(el);
        return st;
      }
      SKIP(p, e);
      if (p < e && *p == ',') p = cf_hlo_skip(p + 1, e);
    }
    if (p >= e) {
      free(el);
      return cf_hlo_fail(r, line, "unterminated 'tuple<'");
    }
    out->n = n;
    if (n && !(out->elem = cf_arena_array(&r->scratch, (size_t)n, sizeof *el))) {
      free(el);
      return cf_hlo_oom(r, line);
    }
    if (n) memcpy(out->elem, el, (size_t)n * sizeof *el);
    free(el);
    if (future && n == 1) *out = out->elem[0];
    *pp = p + 1;
    return CF_OK;
  }
  if (*p == '!') { /* !stablehlo.token, !mhlo.token: no data */
    cf_span nm;
    const char *q = cf_hlo_read_name(p + 1, e, &nm);
    if (!cf_span_is(nm, "stablehlo.token") && !cf_span_is(nm, "mhlo.token"))
      return cf_hlo_fail(r, line, "unsupported type '!%s'", CF_SPAN_QUOTE(nm));
    out->n = -1;
    out->dt = CF_DT_UINT8;
    out->s.rank = 1;
    *pp = q;
    return ++*leaves > CF_MAX_OPERANDS
               ? cf_hlo_fail(r, line, "more than %d arrays in a type", CF_MAX_OPERANDS)
               : CF_OK;
  }
  bool tensor = cf_hlo_word_at(p, e, "tensor") && p + 6 < e && p[6] == '<';
  if (tensor) p += 7;
  out->n = -1;
  cf_shape dims = {0};
  while (tensor && p < e && (isdigit((unsigned char)*p) || *p == '?')) {
    int64_t d;
    if (*p == '?') return cf_hlo_fail(r, line, "dynamic dimension '?' in a tensor type");
    if (!cf_hlo_read_int(&p, e, INT64_MAX, &d) || p >= e || *p != 'x')
      return cf_hlo_fail(r, line, "bad dimension in a tensor type");
    if (dims.rank == CF_MAX_RANK)
      return cf_hlo_fail(r, line, "tensor type has more than %d dimensions", CF_MAX_RANK);
    dims.dims[dims.rank++] = d;
    p++;
  }
  if ((st = elem_type(s, &p, e, line, out))) return st;
  bool complex = out->s.rank == -1;
  out->s = dims;
  if (complex) {
    if (out->s.rank == CF_MAX_RANK)
      return cf_hlo_fail(r, line, "complex tensor has more than %d dimensions", CF_MAX_RANK - 1);
    out->s.dims[out->s.rank++] = 2;
  }
  if (tensor) {
    SKIP(p, e);
    if (p < e && *p == ',') { /* an encoding (#stablehlo.bounds<...>): skipped */
      const char *q = cf_sh_find_top(s, p + 1, e, '>');
      p = q ? q : e;
    }
    if (p >= e || *p != '>') return cf_hlo_fail(r, line, "expected '>' closing 'tensor<'");
    p++;
  }
  if (++*leaves > CF_MAX_OPERANDS)
    return cf_hlo_fail(r, line, "more than %d arrays in a type", CF_MAX_OPERANDS);
  *pp = p;
  return CF_OK;
}

cf_status cf_sh_type(sh_reader *s, const char **pp, const char *e, int line, hshape *out) {
  int64_t leaves = 0;
  return type_at(s, pp, e, line, 0, &leaves, out);
}

cf_status cf_sh_type_list(sh_reader *s, const char *p, const char *e, int line, hshape **out,
                          int *n) {
  *n = 0;
  *out = NULL;
  SKIP(p, e);
  if (p >= e) return CF_OK;
  int cap = 1;
  for (const char *q = p; (q = cf_sh_find_top(s, q, e, ',')); q++)
    cap++;
  if (!(*out = cf_arena_array(&s->r->scratch, (size_t)cap, sizeof **out)))
    return cf_hlo_oom(s->r, line);
  for (;;) {
    if (*n == cap) return cf_hlo_fail(s->r, line, "malformed type list");
    cf_status st = cf_sh_type(s, &p, e, line, &(*out)[(*n)++]);
    if (st) return st;
    SKIP(p, e);
    if (p < e && *p == '{') p = cf_hlo_skip(cf_sh_past(s, p, e), e); /* result attributes */
    if (p >= e) return CF_OK;
    if (*p != ',')
      return cf_hlo_fail(s->r, line, "expected ',' between types at '%s'",
                         CF_SPAN_QUOTE(((cf_span){p, (size_t)(e - p)})));
    p = cf_hlo_skip(p + 1, e);
  }
}

bool cf_sh_type_equal(const hshape *a, const hshape *b) {
  if (a->n != b->n) return false;
  for (int i = 0; i < a->n; i++)
    if (!cf_sh_type_equal(&a->elem[i], &b->elem[i])) return false;
  return a->n >= 0 || (a->dt == b->dt && a->exact == b->exact && cf_shape_equal(&a->s, &b->s));
}

const char *cf_sh_type_text(const hshape *t, char *buf, size_t len) {
  if (t->n >= 0) {
    snprintf(buf, len, "a tuple of %d", t->n);
    return buf;
  }
  const char *name = cf_dtype_name(t->dt); /* a stand-in's, when no name has it */
  for (size_t k = 0; k < sizeof sh_types / sizeof sh_types[0]; k++)
    if (sh_types[k].dt == t->dt && sh_types[k].exact == t->exact) {
      name = sh_types[k].name;
      break;
    }
  size_t o = (size_t)snprintf(buf, len, "tensor<");
  for (int d = 0; d < t->s.rank && o < len; d++)
    o += (size_t)snprintf(buf + o, len - o, "%lldx", (long long)t->s.dims[d]);
  if (o < len) snprintf(buf + o, len - o, "%s>", name);
  return buf;
}

/* ------------------------------------------------------------------ */
/* dense<...> literals                                                */

static double half_to_double(unsigned h) {
  int ex = (h >> 10) & 31, man = h & 1023;
  double v = ex == 0    ? ldexp(man, -24)
             : ex == 31 ? (man ? NAN : INFINITY)
                        : ldexp(man + 1024, ex - 25);
  return (h & 0x8000) ? -v : v;
}

/* Element i of a little-endian hex blob of dtype dt. */
static bool blob_elem(const unsigned char *b, cf_dtype dt, size_t i, double *v) {
  uint64_t u = 0;
  size_t w = cf_dtype_size(dt);
  for (size_t k = 0; k < w; k++)
    u |= (uint64_t)b[i * w + k] << (8 * k);
  switch (dt) {
  case CF_DT_FLOAT32: {
    float f;
    uint32_t x = (uint32_t)u;
    memcpy(&f, &x, 4);
    *v = f;
    break;
  }
  case CF_DT_FLOAT64: memcpy(v, &u, 8); break;
  case CF_DT_FLOAT16: *v = half_to_double((unsigned)u); break;
  case CF_DT_BFLOAT16: {
    float f;
    uint32_t x = (uint32_t)u << 16;
    memcpy(&f, &x, 4);
    *v = f;
    break;
  }
  case CF_DT_INVALID:
  case CF_DT_COUNT: return false;
  default: { /* integers: the bits as the dtype reads them */
    int64_t x = cf_dtype_wrap(dt, u);
    *v = cf_dtype_is_unsigned(dt) ? (double)(uint64_t)x : (double)x;
    break;
  }
  }
  return isfinite(*v);
}

static int hexval(char c) {
  return c >= '0' && c <= '9'   ? c - '0'
         : c >= 'a' && c <= 'f' ? c - 'a' + 10
         : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                : -1;
}

/* One scalar token: a number, true/false, or a hex bit pattern of dt. */
static bool scalar_token(const char *ts, size_t tl, cf_dtype dt, double *v) {
  char tok[64];
  if (!tl || tl >= sizeof tok) return false;
  memcpy(tok, ts, tl);
  tok[tl] = 0;
  if (!strcmp(tok, "true")) return *v = 1, true;
  if (!strcmp(tok, "false")) return *v = 0, true;
  if (tl > 2 && tok[0] == '0' && (tok[1] == 'x' || tok[1] == 'X')) { /* bit pattern */
    unsigned char b[8] = {0};
    size_t w = cf_dtype_size(dt), nd = tl - 2;
    if (nd != 2 * w) return false;
    for (size_t k = 0; k < w; k++) { /* big-endian digits to little-endian bytes */
      int hi = hexval(tok[2 + 2 * k]), lo = hexval(tok[3 + 2 * k]);
      if (hi < 0 || lo < 0) return false;
      b[w - 1 - k] = (unsigned char)(hi * 16 + lo);
    }
    return blob_elem(b, dt, 0, v);
  }
  char *end;
  errno = 0;
  *v = strtod(tok, &end);
  return !*end && errno != ERANGE && isfinite(*v);
}

void cf_sh_dense(const sh_reader *s, const char *p, const char *e, const hshape *t, hinstr *in) {
  int64_t count;
  in->lit = LIT_OTHER;
  if (t->n >= 0 || !t->exact || !cf_shape_elements(&t->s, &count)) return;
  p = cf_hlo_skip(p, e);
  if (e - p < 6 || memcmp(p, "dense<", 6) != 0) return;
  p += 6;
  const char *close = cf_sh_find_top(s, p, e, '>');
  if (!close) return;
  e = close;
  SKIP(p, e);
  bool splat = true, iota = true;
  double first = 0, v;
  int64_t n = 0;
  if (p < e && *p == '"') { /* "0x..." raw little-endian bytes */
    const char *q = p + 1, *qe = cf_hlo_past_quoted(p, e) - 1;
    size_t w = cf_dtype_size(t->dt);
    if (qe - q < 2 || q[0] != '0' || (q[1] != 'x' && q[1] != 'X')) return;
    q += 2;
    size_t bytes = (size_t)(qe - q) / 2;
    if ((size_t)(qe - q) % 2 || !w || bytes % w) return;
    int64_t elems = (int64_t)(bytes / w);
    if (elems != count && elems != 1) return;
    unsigned char b[8];
    for (int64_t i = 0; i < elems; i++) {
      for (size_t k = 0; k < w; k++) {
        int hi = hexval(q[2 * k]), lo = hexval(q[2 * k + 1]);
        if (hi < 0 || lo < 0) return;
        b[k] = (unsigned char)(hi * 16 + lo);
      }
      q += 2 * w;
      if (!blob_elem(b, t->dt, 0, &v)) return;
      if (!i) first = v;
      splat &= v == first;
      iota &= v == (double)i;
    }
    n = elems == 1 ? count : elems;
    if (elems == 1) iota = count == 1 && first == 0;
  } else if (p < e && *p != '[') { /* one value for every element */
    const char *ts = p;
    while (p < e && !is_space(*p))
      p++;
    if (!scalar_token(ts, (size_t)(p - ts), t->dt, &first) || cf_hlo_skip(p, e) != e) return;
    n = count;
    iota = count == 1 && first == 0;
  } else {
    for (;;) {
      while (p < e && (is_space(*p) || *p == '[' || *p == ']' || *p == ','))
        p++;
      if (p >= e) break;
      const char *ts = p;
      while (p < e && !is_space(*p) && *p != ',' && *p != ']' && *p != '[')
        p++;
      if (n >= count || !scalar_token(ts, (size_t)(p - ts), t->dt, &v)) return;
      if (!n) first = v;
      splat &= v == first;
      iota &= v == (double)n;
      n++;
    }
  }
  if (n != count) return;
  in->lit_value = first;
  in->lit = splat ? LIT_SPLAT : iota ? LIT_IOTA : LIT_OTHER;
  if (count == 1 && splat) in->lit = LIT_SPLAT;
}

/* ------------------------------------------------------------------ */
/* meshes                                                             */

/* "name" or name */
static const char *axis_name(const char *p, const char *e, cf_span *out) {
  if (p < e && *p == '"') {
    const char *q = cf_hlo_past_quoted(p, e);
    out->p = p + 1;
    out->n = q > p + 1 && q[-1] == '"' ? (size_t)(q - p - 2) : 0;
    return q;
  }
  out->p = p;
  while (p < e && is_word_char(*p))
    p++;
  out->n = (size_t)(p - out->p);
  return p;
}

static bool span_eq(cf_span a, cf_span b) { return a.n == b.n && !memcmp(a.p, b.p, a.n); }

/* Axis nm of size sz appended to a mesh's na axes so far (their product
 * total), each name once. */
static cf_status mesh_axis_add(hlo_reader *r, int line, cf_span *axis, int64_t *size, int *na,
                               int64_t *total, cf_span nm, int64_t sz) {
  if (*na == HLO_MAX_AXES) return cf_hlo_fail(r, line, "mesh with more than %d axes", HLO_MAX_AXES);
  if (!sz || !cf_mul_i64(*total, sz, total) || *total > CF_MAX_WORLD)
    return cf_hlo_fail(r, line, "mesh: axis sizes must be >= 1 and multiply to at most %d",
                       CF_MAX_WORLD);
  for (int k = 0; k < *na; k++)
    if (span_eq(axis[k], nm))
      return cf_hlo_fail(r, line, "mesh axis '%s' given twice", CF_SPAN_QUOTE(nm));
  axis[*na] = nm;
  size[(*na)++] = sz;
  return CF_OK;
}

/* <["a"=2, "b"=4]> at p into m (its name already set, or none) */
static cf_status mesh_body(sh_reader *s, const char *p, const char *e, int line, hmesh *m) {
  hlo_reader *r = s->r;
  SKIP(p, e);
  if (p >= e || *p != '<') return cf_hlo_fail(r, line, "mesh: expected '<[\"axis\"=size, ...]>'");
  p = cf_hlo_skip(p + 1, e);
  if (p >= e || *p != '[') return cf_hlo_fail(r, line, "mesh: expected '<[\"axis\"=size, ...]>'");
  const char *le = cf_sh_past(s, p, e) - 1;
  cf_span axis[HLO_MAX_AXES];
  int64_t size[HLO_MAX_AXES], total = 1;
  int na = 0;
  for (p = cf_hlo_skip(p + 1, le); p < le;) {
    cf_span nm;
    p = cf_hlo_skip(axis_name(p, le, &nm), le);
    int64_t sz = 0;
    if (!nm.n || p >= le || *p != '=') return cf_hlo_fail(r, line, "mesh: expected \"axis\"=size");
    p = cf_hlo_skip(p + 1, le);
    cf_hlo_read_int(&p, le, CF_MAX_WORLD, &sz); /* (0 when not a size: refused below) */
    cf_status st = mesh_axis_add(r, line, axis, size, &na, &total, nm, sz);
    if (st) return st;
    SKIP(p, le);
    if (p < le && *p == ',')
      p = cf_hlo_skip(p + 1, le);
    else if (p < le)
      return cf_hlo_fail(r, line, "mesh: expected ',' or ']'");
  }
  if (!cf_hlo_mesh_set_axes(r, m, axis, size, na)) return cf_hlo_oom(r, line);
  p = cf_hlo_skip(le + 1, e);
  if (p < e && *p == ',') { /* device_ids=[...]: only the identity order */
    cf_span ids;
    if (cf_sh_attr(s, p + 1, e, "device_ids", &ids) && ids.n && ids.p[0] == '[') {
      int64_t v[CF_MAX_WORLD > 1024 ? 1024 : CF_MAX_WORLD];
      int n;
      const char *q = cf_hlo_int_list(ids.p, ids.p + ids.n, ']', CF_MAX_WORLD, v,
                                      (int)(sizeof v / sizeof v[0]), &n);
      bool identity = q && n == m->total;
      for (int i = 0; identity && i < n; i++)
        identity = v[i] == i;
      if (!identity)
        return cf_hlo_fail(r, line, "mesh: device_ids other than 0, 1, 2, ... are not supported");
    }
  }
  return CF_OK;
}

/* device_ids ([0, 1, ...], dense<[...]> or array<i64: ...>) at v: only the
 * identity order of m's devices is supported */
static cf_status mesh_device_ids(sh_reader *s, cf_span v, int line, const hmesh *m) {
  const char *p = v.p, *e = v.p + v.n;
  while (p < e && *p != '[' && *p != ':' && *p != '<')
    p++;
  if (p < e && *p == '<') p++; /* dense<0>, dense<[...]> */
  if (p < e && *p == ':') p++; /* array<i64: 0, 1> */
  int64_t id, next = 0;
  for (SKIP(p, e); p < e && *p != '>';) {
    if (*p == '[' || *p == ']' || *p == ',') {
      p = cf_hlo_skip(p + 1, e);
      continue;
    }
    if (!cf_hlo_read_int(&p, e, CF_MAX_WORLD, &id) || id != next++)
      return cf_hlo_fail(s->r, line, "mesh: device_ids other than 0, 1, 2, ... are not supported");
    SKIP(p, e);
  }
  if (next != m->total && !(next == 1 && m->total == 1))
    return cf_hlo_fail(s->r, line, "mesh: device_ids other than 0, 1, 2, ... are not supported");
  return CF_OK;
}

/* A StableHLO mesh's axes, [#stablehlo.mesh_axis<name = "x", size = 2>, ...]
 * or [{name = "x", size = 2 : i64}, ...] (a generic sdy.mesh's
 * stablehlo.mesh), and its device_ids, in [p, e) into m. */
static cf_status mesh_axes_attr(sh_reader *s, const char *p, const char *e, int line, hmesh *m) {
  hlo_reader *r = s->r;
  cf_span av, dv;
  if (!cf_sh_attr(s, p, e, "axes", &av) || !av.n || av.p[0] != '[')
    return cf_hlo_fail(r, line, "mesh: expected axes = [...]");
  cf_span axis[HLO_MAX_AXES];
  int64_t size[HLO_MAX_AXES], total = 1;
  int na = 0;
  const char *ae = av.p + av.n - 1;
  for (const char *q = cf_hlo_skip(av.p + 1, ae); q < ae;) {
    const char *open = q;
    while (open < ae && *open != '<' && *open != '{')
      open++;
    const char *close =
        open < ae ? cf_sh_find_top(s, open + 1, ae, *open == '<' ? '>' : '}') : NULL;
    if (*open == '{') close = cf_sh_past(s, open, ae) - 1;
    cf_span nm, sv;
    int64_t sz;
    const char *t;
    if (!close || !cf_sh_attr(s, open + 1, close, "name", &nm) || nm.n < 2 || *nm.p != '"' ||
        !cf_sh_attr(s, open + 1, close, "size", &sv) || !((t = sv.p), 1) ||
        !cf_hlo_read_int(&t, sv.p + sv.n, CF_MAX_WORLD, &sz))
      return cf_hlo_fail(r, line, "mesh: expected axes of a name = \"x\" and a size = N >= 1");
    cf_status st =
        mesh_axis_add(r, line, axis, size, &na, &total, (cf_span){nm.p + 1, nm.n - 2}, sz);
    if (st) return st;
    q = cf_hlo_skip(close + 1, ae);
    if (q < ae && *q == ',') q = cf_hlo_skip(q + 1, ae);
  }
  if (!cf_hlo_mesh_set_axes(r, m, axis, size, na)) return cf_hlo_oom(r, line);
  if (cf_sh_attr(s, av.p + av.n, e, "device_ids", &dv)) return mesh_device_ids(s, dv, line, m);
  return CF_OK;
}

/* "sdy.mesh"() {sym_name = "m", stablehlo.mesh = {axes = [...], device_ids =
 * ...}} : () -> (), the generic form of a mesh declaration */
static cf_status mesh_decl_generic(sh_reader *s, const char *p, const char *e, int line) {
  hlo_reader *r = s->r;
  cf_span nm, mv;
  if (!cf_sh_attr(s, p, e, "sym_name", &nm) || nm.n < 3 || *nm.p != '"' || nm.n - 2 > CF_MAX_NAME ||
      !cf_sh_attr(s, p, e, "stablehlo.mesh", &mv) || !mv.n || *mv.p != '{')
    return cf_hlo_fail(r, line,
                       "sdy.mesh: expected sym_name = \"NAME\" and stablehlo.mesh = {...}");
  nm = (cf_span){nm.p + 1, nm.n - 2};
  if (cf_hlo_mesh_find(r, nm))
    return cf_hlo_fail(r, line, "mesh '@%s' declared twice", CF_SPAN_QUOTE(nm));
  char name[CF_MAX_NAME + 1];
  memcpy(name, nm.p, nm.n);
  name[nm.n] = 0;
  hmesh *m = cf_hlo_mesh_add(r, name);
  if (!m) return cf_hlo_oom(r, line);
  cf_status st = mesh_axes_attr(s, mv.p + 1, mv.p + mv.n - 1, line, m);
  if (!st && m->total > r->mesh_world) r->mesh_world = m->total;
  return st;
}

cf_status cf_sh_mesh_decl(sh_reader *s, const char *p, const char *e, int line) {
  if (p < e && *p == '"') return mesh_decl_generic(s, p, e, line);
  hlo_reader *r = s->r;
  cf_span nm;
  const char *at = memchr(p, '@', (size_t)(e - p));
  if (!at) return cf_hlo_fail(r, line, "mesh declaration needs a name '@NAME'");
  p = axis_name(at + 1, e, &nm);
  if (!nm.n || nm.n > CF_MAX_NAME) return cf_hlo_fail(r, line, "mesh declaration: bad name");
  if (cf_hlo_mesh_find(r, nm))
    return cf_hlo_fail(r, line, "mesh '@%s' declared twice", CF_SPAN_QUOTE(nm));
  SKIP(p, e);
  if (p >= e || *p != '=') return cf_hlo_fail(r, line, "mesh declaration: expected '='");
  char name[CF_MAX_NAME + 1];
  memcpy(name, nm.p, nm.n);
  name[nm.n] = 0;
  hmesh *m = cf_hlo_mesh_add(r, name);
  if (!m) return cf_hlo_oom(r, line);
  cf_status st = mesh_body(s, p + 1, e, line, m);
  if (st) return st;
  if (m->total > r->mesh_world) r->mesh_world = m->total;
  return CF_OK;
}

/* @name or an inline mesh<[...]> at p: the mesh, p moved past it. */
static cf_status mesh_ref(sh_reader *s, const char **pp, const char *e, int line, hmesh *tmp,
                          const hmesh **out) {
  const char *p = cf_hlo_skip(*pp, e);
  if (p < e && *p == '@') {
    cf_span nm;
    p = axis_name(p + 1, e, &nm);
    if (!(*out = cf_hlo_mesh_find(s->r, nm)))
      return cf_hlo_fail(s->r, line, "mesh '@%s' is not declared (sdy.mesh @%s = <[...]>)",
                         CF_SPAN_QUOTE(nm), CF_SPAN_QUOTE(nm));
    *pp = p;
    return CF_OK;
  }
  if (e - p > 16 && !memcmp(p, "#stablehlo.mesh<", 16)) {
    memset(tmp, 0, sizeof *tmp);
    tmp->name = "(inline)"; /* for messages */
    const char *q = cf_sh_find_top(s, p + 16, e, '>');
    if (!q) return cf_hlo_fail(s->r, line, "unterminated inline mesh");
    cf_status st = mesh_axes_attr(s, p + 16, q, line, tmp);
    if (st) return st;
    *out = tmp;
    *pp = q + 1;
    return CF_OK;
  }
  if (cf_hlo_word_at(p, e, "mesh")) {
    memset(tmp, 0, sizeof *tmp);
    tmp->name = "(inline)"; /* for messages */
    const char *q = cf_sh_find_top(s, p + 5, e, '>');
    if (!q) return cf_hlo_fail(s->r, line, "unterminated inline mesh");
    cf_status st = mesh_body(s, p + 4, q + 1, line, tmp);
    if (st) return st;
    *out = tmp;
    *pp = q + 1;
    return CF_OK;
  }
  return cf_hlo_fail(s->r, line, "expected a mesh '@NAME' at '%s'",
                     CF_SPAN_QUOTE(((cf_span){p, (size_t)(e - p)})));
}

static int axis_index(const hmesh *m, cf_span nm) {
  for (int k = 0; k < m->n; k++)
    if (span_eq(m->axis[k], nm)) return k;
  return -1;
}

/* ------------------------------------------------------------------ */
/* replica groups                                                     */

/* #stablehlo.replica_group_mesh_axes<mesh = @m, axes = ["a", ...]> */
static cf_status groups_mesh_axes(sh_reader *s, hinstr *in, const char *p, const char *e,
                                  hrg *out) {
  hlo_reader *r = s->r;
  cf_span mv, av;
  hmesh tmp;
  const hmesh *m;
  const char *lt = memchr(p, '<', (size_t)(e - p));
  const char *gt = lt ? cf_sh_find_top(s, lt + 1, e, '>') : NULL;
  /* (the axes after the mesh: an inline mesh has axes of its own) */
  if (!gt || !cf_sh_attr(s, lt + 1, gt, "mesh", &mv) ||
      !cf_sh_attr(s, mv.p + mv.n, gt, "axes", &av) || !av.n || av.p[0] != '[')
    return cf_hlo_fail(
        r, in->line, "op '%s': replica_group_mesh_axes needs mesh = @NAME, axes = [...]", in->name);
  const char *q = mv.p;
  cf_status st = mesh_ref(s, &q, mv.p + mv.n, in->line, &tmp, &m);
  if (st) return st;
  int sel[HLO_MAX_AXES], ns = 0;
  char axes[CF_MAX_GROUP_NAME + 1];
  size_t o = 0;
  const char *ae = av.p + av.n - 1; /* the ']' */
  for (q = cf_hlo_skip(av.p + 1, ae); q < ae;) {
    cf_span nm;
    if (ae - q > 19 && !memcmp(q, "#stablehlo.axis_ref<", 20)) { /* axis_ref<name = "x"> */
      const char *re = cf_sh_find_top(s, q + 20, ae, '>');
      cf_span v;
      if (!re || !cf_sh_attr(s, q + 20, re, "name", &v) || v.n < 2 || *v.p != '"' ||
          cf_sh_attr(s, q + 20, re, "sub_axis_info", &(cf_span){0}))
        return cf_hlo_fail(r, in->line, "op '%s': axes: expected #stablehlo.axis_ref<name = \"x\">",
                           in->name);
      nm = (cf_span){v.p + 1, v.n - 2};
      q = cf_hlo_skip(re + 1, ae);
    } else {
      q = cf_hlo_skip(axis_name(q, ae, &nm), ae);
    }
    int k = axis_index(m, nm);
    if (k < 0)
      return cf_hlo_fail(r, in->line,
                         "op '%s': replica groups name axis '%s', which mesh '%s' "
                         "does not have",
                         in->name, CF_SPAN_QUOTE(nm), m->name);
    for (int j = 0; j < ns; j++)
      if (sel[j] == k)
        return cf_hlo_fail(r, in->line, "op '%s': replica groups list axis '%s' twice", in->name,
                           CF_SPAN_QUOTE(nm));
    sel[ns++] = k;
    int w = snprintf(axes + o, sizeof axes - o, "%s%.*s", o ? "_" : "", (int)nm.n, nm.p);
    o = w < 0 || (size_t)w >= sizeof axes - o ? sizeof axes : o + (size_t)w;
    if (q < ae && *q == ',')
      q = cf_hlo_skip(q + 1, ae);
    else if (q < ae)
      return cf_hlo_fail(r, in->line, "op '%s': axes: expected ',' or ']'", in->name);
  }
  if ((st = cf_hlo_mesh_groups(r, in->line, m->size, m->n, sel, ns, out))) return st;
  bool ok = o > 0 && o < sizeof axes;
  for (size_t i = 0; ok && axes[i]; i++)
    ok = is_name_char(axes[i]);
  if (ok && !(out->axes = cf_hlo_str(r, axes, o))) return cf_hlo_oom(r, in->line);
  return CF_OK;
}

/* dense<[[0, 1], [2, 3]]> : tensor<2x2xi64> (-1 pads groups of fewer
 * devices); what names the attribute in messages. */
static cf_status groups_dense(sh_reader *s, hinstr *in, const char *p, const char *e, int max_ids,
                              const char *what, hrg *out) {
  hlo_reader *r = s->r;
  const char *close = cf_sh_find_top(s, p + 6, e, '>');
  if (!close) return cf_hlo_fail(r, in->line, "op '%s': unterminated %s", in->name, what);
  p = cf_hlo_skip(p + 6, close);
  if (p == close) { /* dense<>: every device */
    out->all = true;
    return CF_OK;
  }
  size_t cap = 1;
  for (const char *q = p; q < close; q++)
    cap += *q == ',' || *q == '[';
  int *ids = cf_arena_array(&r->scratch, cap, sizeof *ids);
  int *off = cf_arena_array(&r->scratch, cap + 1, sizeof *off);
  if (!ids || !off) return cf_hlo_oom(r, in->line);
  int n = 0, g = 0;
  off[0] = 0;
  if (p >= close || *p != '[' || (p = cf_hlo_skip(p + 1, close)) >= close || *p != '[')
    return cf_hlo_fail(r, in->line, "op '%s': %s: expected dense<[[ids], ...]>", in->name, what);
  for (;;) {
    p = cf_hlo_skip(p + 1, close); /* past '[' */
    while (p < close && *p != ']') {
      int64_t id;
      cf_span num = cf_hlo_number_at(p, close);
      bool neg = *p == '-';
      if (neg) p++;
      if (!cf_hlo_read_int(&p, close, neg ? 1 : CF_MAX_WORLD - 1, &id) || (neg && id != 1)) {
        if (num.n)
          return cf_hlo_fail(r, in->line, "op '%s': %s: device id %s is not in 0..%d", in->name,
                             what, CF_SPAN_QUOTE(num), CF_MAX_WORLD - 1);
        return cf_hlo_fail(r, in->line, "op '%s': %s: expected a device id in 0..%d", in->name,
                           what, CF_MAX_WORLD - 1);
      }
      if (!neg) {
        if ((size_t)n >= cap || n >= max_ids)
          return cf_hlo_fail(r, in->line, "op '%s': more than %d device ids", in->name, max_ids);
        ids[n++] = (int)id;
      }
      p = cf_hlo_skip(p, close);
      if (p < close && *p == ',') p = cf_hlo_skip(p + 1, close);
    }
    if (p >= close) break;
    if (n == off[g]) return cf_hlo_fail(r, in->line, "op '%s': %s: an empty group", in->name, what);
    off[++g] = n;
    p = cf_hlo_skip(p + 1, close);
    if (p < close && *p == ',') p = cf_hlo_skip(p + 1, close);
    if (p < close && *p == '[') continue;
    if (p < close && *p == ']' && cf_hlo_skip(p + 1, close) == close) {
      out->n_sub = g;
      out->off = off;
      out->ids = ids;
      return CF_OK;
    }
    break;
  }
  return cf_hlo_fail(r, in->line, "op '%s': %s: expected dense<[[ids], ...]>", in->name, what);
}

cf_status cf_sh_groups(sh_reader *s, hinstr *in, cf_span val) {
  hrg *g = cf_arena_alloc(&s->r->scratch, sizeof *g);
  if (!g) return cf_hlo_oom(s->r, in->line);
  const char *p = val.p, *e = val.p + val.n;
  cf_status st;
  if (e - p >= 6 && !memcmp(p, "dense<", 6))
    st = groups_dense(s, in, p, e, CF_MAX_WORLD, "replica_groups", g);
  else if (e - p > 35 && !memcmp(p, "#stablehlo.replica_group_mesh_axes<", 35))
    st = groups_mesh_axes(s, in, p, e, g);
  else
    st = cf_hlo_fail(s->r, in->line, "op '%s': unsupported replica_groups '%s'", in->name,
                     CF_SPAN_QUOTE(val));
  if (!st) in->rg = g;
  return st;
}

cf_status cf_sh_pairs(sh_reader *s, hinstr *in, cf_span val) {
  hlo_reader *r = s->r;
  const char *p = val.p, *e = val.p + val.n;
  hrg g;
  cf_status st = CF_OK;
  if (e - p < 6 || memcmp(p, "dense<", 6) != 0)
    return cf_hlo_fail(r, in->line, "op '%s': source_target_pairs: expected dense<[[s, t], ...]>",
                       in->name);
  memset(&g, 0, sizeof g);
  if ((st = groups_dense(s, in, p, e, 2 * CF_MAX_WORLD, "source_target_pairs", &g))) return st;
  size_t cap = (size_t)g.n_sub * 24 + 1, o = 0;
  char *text = cf_arena_alloc(&r->scratch, cap);
  if (!text) return cf_hlo_oom(r, in->line);
  for (int i = 0; i < g.n_sub; i++) {
    if (g.off[i + 1] - g.off[i] != 2)
      return cf_hlo_fail(r, in->line,
                         "op '%s': source_target_pairs: every pair is [source, target]", in->name);
    o += (size_t)snprintf(text + o, cap - o, "%s{%d,%d}", i ? "," : "", g.ids[g.off[i]],
                          g.ids[g.off[i] + 1]);
  }
  hattr *a = cf_arena_array(&r->scratch, (size_t)in->n_attr + 1, sizeof *a);
  if (!a) return cf_hlo_oom(r, in->line);
  if (in->n_attr) memcpy(a, in->attr, (size_t)in->n_attr * sizeof *a);
  a[in->n_attr++] = (hattr){{"source_target_pairs", 19}, {text, o}};
  in->attr = a;
  return CF_OK;
}

/* ------------------------------------------------------------------ */
/* shardings                                                          */

cf_status cf_sh_local_shape(sh_reader *s, cf_span sharding, cf_span manual, const cf_shape *global,
                            int line, cf_shape *out) {
  hlo_reader *r = s->r;
  const char *p = cf_hlo_skip(sharding.p, sharding.p + sharding.n), *e = sharding.p + sharding.n;
  if (p < e && *p == '#') { /* #sdy.sharding<...> */
    const char *lt = memchr(p, '<', (size_t)(e - p));
    p = lt ? lt : e;
  }
  if (p >= e || *p != '<')
    return cf_hlo_fail(r, line, "expected a sharding '<@mesh, [{...}, ...]>' at '%s'",
                       CF_SPAN_QUOTE(sharding));
  p++;
  hmesh tmp;
  const hmesh *m;
  cf_status st = mesh_ref(s, &p, e, line, &tmp, &m);
  if (st) return st;
  p = cf_hlo_skip(p, e);
  if (p >= e || *p != ',' || (p = cf_hlo_skip(p + 1, e)) >= e || *p != '[')
    return cf_hlo_fail(r, line, "sharding: expected '[' with one {axes} per dimension");
  const char *de = cf_sh_past(s, p, e) - 1;
  *out = *global;
  int dim = 0;
  bool used[HLO_MAX_AXES] = {false}; /* an axis cuts at most one dim, once */
  for (p = cf_hlo_skip(p + 1, de); p < de; dim++) {
    if (*p != '{') return cf_hlo_fail(r, line, "sharding: expected '{' for a dimension's axes");
    const char *be = cf_sh_past(s, p, de) - 1;
    if (dim >= global->rank)
      return cf_hlo_fail(r, line, "sharding has more dimensions than the %d of its value",
                         global->rank);
    int64_t parts = 1;
    for (p = cf_hlo_skip(p + 1, be); p < be;) {
      cf_span nm;
      if (*p == '?') { /* open: no axes of its own */
        p = cf_hlo_skip(p + 1, be);
      } else {
        p = cf_hlo_skip(axis_name(p, be, &nm), be);
        if (p < be && *p == ':')
          return cf_hlo_fail(r, line, "sharding: sub-axes ('axis':(k)n) are not supported");
        int k = axis_index(m, nm);
        if (k < 0)
          return cf_hlo_fail(r, line, "sharding names axis '%s', which mesh '%s' does not have",
                             CF_SPAN_QUOTE(nm), m->name);
        if (used[k])
          return cf_hlo_fail(r, line, "sharding: axis '%s' used twice", CF_SPAN_QUOTE(nm));
        used[k] = true;
        bool is_manual = true;
        if (manual.n) { /* {"a", "b"}: is nm among them? */
          is_manual = false;
          const char *q = manual.p, *qe = manual.p + manual.n;
          while (q < qe && !is_manual) {
            cf_span an;
            q = cf_hlo_skip(q, qe);
            if (q < qe && (*q == '{' || *q == ',' || *q == '}')) {
              q++;
              continue;
            }
            const char *nq = axis_name(q, qe, &an);
            is_manual = span_eq(an, nm);
            q = nq > q ? nq : q + 1;
          }
        }
        if (is_manual && !cf_mul_i64(parts, m->size[k], &parts))
          return cf_hlo_fail(r, line, "sharding: dimension %d is cut into too many parts", dim);
      }
      if (p < be && *p == ',')
        p = cf_hlo_skip(p + 1, be);
      else if (p < be)
        return cf_hlo_fail(r, line, "sharding: expected ',' or '}'");
    }
    if (out->dims[dim] % parts)
      return cf_hlo_fail(r, line, "sharding splits dimension %d of size %lld into %lld parts", dim,
                         (long long)out->dims[dim], (long long)parts);
    out->dims[dim] /= parts;
    p = cf_hlo_skip(be + 1, de);
    while (p < de && is_word_char(*p)) /* a priority p0, p1, ... */
      p++;
    p = cf_hlo_skip(p, de);
    if (p < de && *p == ',') p = cf_hlo_skip(p + 1, de);
  }
  if (dim != global->rank)
    return cf_hlo_fail(r, line, "sharding has %d dimensions but its value has %d", dim,
                       global->rank);
  return CF_OK;
}
